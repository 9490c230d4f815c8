"""One error type for everything a user can get wrong.

Every foreseeable input problem becomes an :class:`InputError` naming the field, the value that was
given and what is allowed.  The CLI prints ``str(error)`` as a single line and exits with code 2.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

# line breaks, C0/C1 control characters (tab included) and bidirectional overrides: a run becomes one space
_LINES = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]+")
SHOWN_CHARS = 80  # the most characters of a bad value an error line repeats


def one_line(text: object) -> str:
    """``text`` as one line: every run of line breaks and control characters becomes one space."""
    return _LINES.sub(" ", str(text))


def shorten(text: object, limit: int = SHOWN_CHARS) -> str:
    """``text`` on one line and at most ``limit`` characters: a long value keeps its start and says how
    long it was.

    >>> shorten("x" * 1000, 20)
    'xxx... (1,000 chars)'
    """
    s = one_line(text)
    if len(s) <= limit:
        return s
    tail = f"... ({len(s):,} chars)"
    return s[:max(limit - len(tail), 1)] + tail


class InputError(ValueError):
    """Bad user input: the field, the value, what is allowed, and optionally a suggestion."""

    def __init__(self, field: str, value: object, allowed: str, hint: str = "") -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        self.hint = hint
        shown = "missing" if value is None else f"{shorten(repr(value))} is not allowed"
        text = f"{shorten(field, 2 * SHOWN_CHARS)}: {shown}; {allowed}"
        if hint:
            text += f" ({hint})"
        super().__init__(text)


def closest(name: str, choices: Iterable[str]) -> str:
    """Return a "did you mean" hint for ``name`` among ``choices``, or an empty string."""
    options = list(choices)
    lowered = {c.lower(): c for c in options}
    found = difflib.get_close_matches(name.lower(), list(lowered), n=3, cutoff=0.5)
    if not found:
        return ""
    return "did you mean " + " or ".join(repr(lowered[f]) for f in found) + "?"


def unknown_name(field: str, name: str, choices: Iterable[str]) -> InputError:
    """An :class:`InputError` for a name not in ``choices``, with the closest names suggested."""
    options = sorted(choices)
    shown = ", ".join(options) if len(options) <= 12 else ", ".join(options[:12]) + ", ..."
    return InputError(field, name, f"expected one of: {shown}", closest(name, options))

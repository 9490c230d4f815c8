"""One error type for everything a user can get wrong.

Every foreseeable input problem becomes an :class:`InputError` naming the field, the value that was
given and what is allowed.  The CLI prints ``str(error)`` as a single line and exits with code 2.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class InputError(ValueError):
    """Bad user input: the field, the value, what is allowed, and optionally a suggestion."""

    def __init__(self, field: str, value: object, allowed: str, hint: str = "") -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        self.hint = hint
        shown = "missing" if value is None else f"{value!r} is not allowed"
        text = f"{field}: {shown}; {allowed}"
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

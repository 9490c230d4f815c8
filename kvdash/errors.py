"""One error type for everything a user can get wrong.

Every foreseeable input problem becomes an :class:`InputError` naming the field, the value that was
given and what is allowed.  The CLI prints ``str(error)`` as a single line and exits with code 2.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable


class InputError(ValueError):
    """Bad user input: the field, the value, what is allowed, and optionally a suggestion."""

    def __init__(self, field: str, value: object, allowed: str, hint: str = "") -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        self.hint = hint
        shown = "missing" if value is None else f"{shorten(value)} is not allowed"
        text = f"{field}: {shown}; {allowed}"
        if hint:
            text += f" ({hint})"
        # one line whatever the user typed: a key path or a hint may hold a newline or a 10 KB name
        text = one_line(text)
        super().__init__(text)

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        """Pickled by its four parts, so an error raised in a worker process (``kvdash sweep --jobs``) arrives
        whole."""
        return InputError, (self.field, self.value, self.allowed, self.hint)


class Interrupted(Exception):
    """Ctrl-C (or SIGTERM, SIGHUP), with what it left behind; the CLI prints the message as one line and exits
    ``code`` (128 + the signal's number: 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP).

    (A bare KeyboardInterrupt would be turned into a silent exit 130 by typer.)"""

    def __init__(self, message: str, code: int = 130) -> None:
        super().__init__(message)
        self.code = code


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised like Ctrl-C's KeyboardInterrupt where kvdash catches those signals."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def signal_code(exc: BaseException) -> int:
    """The exit code for an interruption: 128 + the signal's number (SIGINT: 130)."""
    return 128 + getattr(exc, "signum", 2)


def signal_name(exc: BaseException) -> str:
    import signal

    try:
        return signal.Signals(getattr(exc, "signum", 2)).name
    except ValueError:  # pragma: no cover
        return f"signal {getattr(exc, 'signum', 2)}"


def interrupted_text(exc: BaseException) -> str:
    """What an interruption is called in its one line: 'interrupted' for Ctrl-C, 'interrupted by SIGTERM' for a
    signal raised as one (:class:`Terminated`); the CLI, the sweep and the dashboard all say it so."""
    return "interrupted" if signal_code(exc) == 130 else f"interrupted by {signal_name(exc)}"


SHOWN_CHARS = 80
FIELD_CHARS = 240  # the longest unbroken run (a path, a key) an error line keeps whole
# characters that end a line for a terminal or for str.splitlines(): shown escaped (\n, \x1e, \u2028)
_CONTROL = re.compile("[\x00-\x1f\x7f\x85\u2028\u2029]")


def shorten(value: object, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters, with an ellipsis and the full length.

    Error lines echo what the user gave; a 10 KB value must not make a 10 KB line, and an integer
    past Python's 4,300-digit ``str()`` limit must not raise while being shown.  ``repr`` keeps a
    newline as ``\\n``, so the line stays one line.

    >>> shorten("x" * 200)[-19:]
    'x… (202 characters)'
    >>> len(shorten("x" * 200)) <= 80 + len("… (202 characters)")
    True
    >>> shorten(10**5000)
    'an integer of 5,001 digits'
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        digits = len(str(value)) if value.bit_length() < 4000 else _digits(abs(value))
        return f"an integer of {digits:,} digits"
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text):,} characters)"


def one_line(text: str) -> str:
    r"""``text`` with line-ending and control characters escaped and long runs shortened: one line.

    >>> one_line("a\nb\x1ec")
    'a\\nb\\x1ec'
    """
    return shorten_words(_CONTROL.sub(lambda m: repr(m.group())[1:-1], text), FIELD_CHARS)


def shorten_words(text: str, limit: int = SHOWN_CHARS) -> str:
    """Every run of more than ``limit`` non-blank characters in a message shortened as by :func:`shorten`
    (for messages kvdash does not build itself, such as click's usage errors).

    >>> shorten_words("bad value " + "9" * 100 + " here")[-24:]
    '9… (100 characters) here'
    """
    import re

    def cut(m: re.Match[str]) -> str:
        return f"{m.group()[:limit]}… ({len(m.group()):,} characters)"

    return re.sub(r"\S{" + str(limit + 1) + ",}", cut, text)


# line breaks, C0/C1 control characters (tab included) and bidirectional overrides: a run becomes one space
_LINES = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]+")


# characters that hide, reorder or control text: C0 and C1 controls (tab and newline kept), DEL, the soft
# hyphen, bidi marks, embeddings, overrides and isolates (Unicode UAX #9), zero-width characters, word
# joiners and invisible operators, the BOM, line/paragraph separators, interlinear annotation, tag characters
HIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f"
                     "\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb"
                     "\U000e0000-\U000e0fff\ud800-\udfff]")


def _shown(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}" if c < 0x10000 else f"\\U{c:08x}"


def visible(text: str) -> str:
    r"""``text`` with every character that could hide, reorder or restyle what is shown (controls, bidi
    overrides and isolates, zero-width characters, the BOM, the soft hyphen) written as an escape, so that
    what every output shows is what the text holds.  Tab and newline are kept.

    >>> visible("model\u202eevil\x1b[31m\u200b")
    'model\\u202eevil\\x1b[31m\\u200b'
    >>> visible("plain é 💥")
    'plain é 💥'
    """
    return HIDDEN.sub(_shown, text) if HIDDEN.search(text) else text


def flat(text: object) -> str:
    """``text`` as one line of prose (Markdown, diffs): every run of line breaks and control characters
    becomes one space (error lines use :func:`one_line`, which shows them escaped instead)."""
    return _LINES.sub(" ", str(text))


def clip(text: object, limit: int = SHOWN_CHARS) -> str:
    """``text`` flattened to one line and at most ``limit`` characters: a long value keeps its start and
    says how long it was (the text itself, unlike :func:`shorten`'s ``repr``).

    >>> clip("x" * 1000, 20)
    'xxx... (1,000 chars)'
    """
    s = flat(text)
    if len(s) <= limit:
        return s
    tail = f"... ({len(s):,} chars)"
    return s[:max(limit - len(tail), 1)] + tail


def _digits(n: int) -> int:
    """Decimal digits of a positive integer too large for ``str()``."""
    import math

    guess = int(n.bit_length() * math.log10(2))
    return guess + 1 if n >= 10**guess else guess


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


class Shown:
    """A value shown in an error line as written (``repr`` is the text): a YAML boolean as ``true`` / ``false``
    (Python's ``True`` is not what the grid file says), or a description such as ``a section with gpu`` where the
    problem is the keys a section holds."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Shown) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


def keys_shown(section: dict[str, object]) -> Shown:
    """A section judged by the keys it holds, shown as them (``a section with gpu, requests``; ``an empty
    section``)."""
    return Shown(f"a section with {', '.join(str(k) for k in section)}" if section else "an empty section")

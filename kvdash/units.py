"""Byte sizes: parsing ``12GiB`` / ``80GB`` / ``512MiB`` / plain bytes, and naming units in output.

GiB = 2**30 bytes, GB = 10**9 bytes: binary and decimal prefixes are never mixed up.
"""

from __future__ import annotations

import re
from decimal import ROUND_FLOOR, Decimal, InvalidOperation

from kvdash.errors import InputError

KiB = 2**10
MiB = 2**20
GiB = 2**30
TiB = 2**40

UNITS: dict[str, int] = {
    "b": 1,
    "kib": KiB,
    "mib": MiB,
    "gib": GiB,
    "tib": TiB,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}

MAX_SIZE = 2**60  # no machine holds an exbibyte: kvdash.core.limits.MAX_BYTES
MAX_SIZE_TEXT = 64  # characters of a size written as text

_SIZE = re.compile(r"^\s*([0-9][0-9_,]*(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int, field: str = "size", allow_zero: bool = False) -> int:
    """Parse a byte size into an exact integer number of bytes.

    >>> parse_size("12GiB")
    12884901888
    >>> parse_size("80GB")
    80000000000
    >>> parse_size("1.5 MiB")
    1572864
    """
    if isinstance(text, bool):
        raise InputError(field, text, "expected a size such as 12GiB, 80GB, 512MiB or plain bytes")
    if isinstance(text, int):
        value = text
    elif isinstance(text, str) and len(text) > MAX_SIZE_TEXT:  # before any parsing: 5,000 digits is one line
        raise InputError(field, text, f"expected a size of at most 2^60 bytes, written in at most {MAX_SIZE_TEXT} "
                         "characters")
    else:
        match = _SIZE.match(str(text))
        if not match:
            raise InputError(
                field, text, "expected a size such as 12GiB, 80GB, 512MiB or plain bytes"
            )
        number, unit = match.group(1).replace("_", "").replace(",", ""), match.group(2).lower()
        if unit not in UNITS and unit != "":
            raise InputError(
                field,
                text,
                "units are B, KiB, MiB, GiB, TiB (powers of 2) or KB, MB, GB, TB (powers of 10)",
            )
        try:
            exact = Decimal(number) * UNITS.get(unit, 1)
        except InvalidOperation as exc:  # pragma: no cover - the regex already rules this out
            raise InputError(field, text, "expected a number with a unit") from exc
        if exact != exact.to_integral_value():
            raise InputError(field, text, "the size must come to a whole number of bytes")
        value = int(exact)
    if value < 0 or (value == 0 and not allow_zero):
        allowed = "the size must not be negative" if allow_zero else "the size must be positive"
        raise InputError(field, text, allowed)
    if value > MAX_SIZE:
        raise InputError(field, text, f"at most 2^60 bytes ({MAX_SIZE:,}, 1 EiB)")
    return value


def parse_fraction(text: str | float, field: str, low: str = "0", high: str = "1") -> Decimal:
    """Parse a fraction such as ``0.9`` exactly (as a decimal), requiring low < value <= high."""
    try:
        value = Decimal(str(text).strip())
    except InvalidOperation as exc:
        raise InputError(field, text, f"expected a number in ({low}, {high}]") from exc
    if not value.is_finite() or not (Decimal(low) < value <= Decimal(high)):
        raise InputError(field, text, f"expected a number in ({low}, {high}]")
    return value


def scale_floor(total: int, fraction: Decimal) -> int:
    """``floor(total × fraction)`` computed exactly."""
    return int((Decimal(total) * fraction).to_integral_value(rounding=ROUND_FLOOR))


def gib_text(n: int | None, decimals: int = 2, missing: str = "n/a") -> str:
    """``n`` bytes as a number of GiB (2^30 B) with thousands separators; ``missing`` for None.

    >>> gib_text(12 * 2**30), gib_text(150_754_820_096, 1), gib_text(None)
    ('12.00', '140.4', 'n/a')
    """
    return missing if n is None else f"{n / GiB:,.{decimals}f}"


def human_bytes(n: int) -> str:
    """Bytes in the largest binary unit that keeps the number >= 1, e.g. ``12.00 GiB``.

    >>> human_bytes(12 * 2**30)
    '12.00 GiB'
    >>> human_bytes(327680)
    '320.00 KiB'
    """
    sign = "-" if n < 0 else ""
    n = abs(n)
    for name, size in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            return f"{sign}{n / size:.2f} {name}"
    return f"{sign}{n} B"


def group_int(n: int) -> str:
    """An integer with thousands separators: ``39,321``."""
    return f"{n:,}"


RATIO_DECIMALS = 4  # every ratio kvdash prints (calc, live, simulate, reports, diff, charts): one rule


def ratio_text(x: float | None, missing: str = "-", suffix: str = "x") -> str:
    """A ratio as kvdash prints it everywhere: ``RATIO_DECIMALS`` decimals and ``x``.

    >>> ratio_text(2.473684), ratio_text(4.0), ratio_text(None), ratio_text(1.25, suffix="")
    ('2.4737x', '4.0000x', '-', '1.2500')
    """
    return missing if x is None else f"{x:.{RATIO_DECIMALS}f}{suffix}"

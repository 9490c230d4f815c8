"""Option parsing shared by commands (no heavy imports)."""

from kvdash.errors import InputError


def parse_lengths(text: str | None, field: str = "--group") -> tuple[int, ...] | None:
    """``"200,825,1525"`` -> ``(200, 825, 1525)``."""
    if text is None:
        return None
    parts = [p.strip().replace("_", "") for p in text.split(",") if p.strip()]
    if not parts:
        raise InputError(field, text, "expected comma-separated positive token counts, e.g. 200,825,1525")
    out = []
    for p in parts:
        if not (p.isascii() and p.isdigit()) or len(p) > 18 or int(p) <= 0:  # 18 digits: no 4,300-digit int()
            raise InputError(field, text, "expected comma-separated positive token counts, e.g. 200,825,1525")
        out.append(int(p))
    return tuple(out)


def parse_block_size(text: str, field: str = "--block-size") -> int | str:
    """``"16"`` -> 16; ``"auto"`` stays ``"auto"`` (vLLM 0.33's choice for the model)."""
    value = text.strip().lower()
    if value == "auto":
        return "auto"
    if not value.isdigit() or int(value) <= 0:
        raise InputError(field, text, "expected a positive number of tokens or 'auto'")
    return int(value)


def parse_on_off(text: str, field: str) -> bool:
    value = text.strip().lower()
    if value not in ("on", "off"):
        raise InputError(field, text, "expected 'on' or 'off'")
    return value == "on"


def pick_alias(value: object, old_value: object, name: str, old_name: str) -> object:
    """The value of an option that also answers to a hidden old name (kept for one release): the old
    name's value when only it is given; both given with different values is an error."""
    if old_value is None:
        return value
    if value is not None and value != old_value:
        raise InputError(old_name, old_value, f"is the old name of {name}; give only {name}")
    return old_value

"""The engines kvdash knows, by name: :func:`get` and :func:`names`.

Adding an engine (or an engine version) is adding its module under :mod:`kvdash.engines` with one object that
satisfies :class:`~kvdash.engines.base.EngineRules`, one line in :data:`ENGINES`, and its conformance data.
"""

from __future__ import annotations

from kvdash.engines import sglang, vllm
from kvdash.engines.base import EngineRules
from kvdash.errors import InputError

DEFAULT = "vllm"
ENGINES: dict[str, EngineRules] = {
    vllm.RULES.name: vllm.RULES,
    sglang.RULES.name: sglang.RULES,
}


def names() -> tuple[str, ...]:
    """The registered engine names, in registration order: ``('vllm', 'sglang')``."""
    return tuple(ENGINES)


def get(name: str = DEFAULT, field: str = "--engine-rules") -> EngineRules:
    """The rules of engine ``name``; an unknown name is an :class:`~kvdash.errors.InputError` on ``field``.

    >>> get("vllm").label, get("sglang").label
    ('vLLM 0.33', 'SGLang 0.5.23')
    """
    try:
        return ENGINES[name]
    except KeyError:
        raise InputError(field, name, "expected " + ", ".join(names())) from None

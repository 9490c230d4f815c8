"""The longest ``max_model_len`` a model's ``config.json`` allows, as vLLM 0.33.0 derives it (paths under ``vllm/``
of the v0.33.0 release): the model loader (:func:`kvdash.core.model.from_hf_config`) records it on the
:class:`~kvdash.core.arch.Architecture`.  Reading the config's length keys is model reading, so it stays in the
core; the refusal above the limit is the engine's rule (:func:`kvdash.engines.vllm.check_max_model_len`).

Pure Python, standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# ModelArchConfigConvertorBase.derive_max_model_len_and_key (vllm/transformers_utils/model_arch_config_convertor.py)
MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")


# rope types whose factor vLLM does not apply again (_get_and_verify_max_len, vllm/config/model.py)
ROPE_NOT_SCALED = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")


DEFAULT_MAX_LEN = 2048  # no key at all: vLLM assumes 2,048 (and accepts any max_model_len given)


@dataclass(frozen=True)
class DerivedMaxLen:
    """The longest ``max_model_len`` vLLM accepts without ``VLLM_ALLOW_LONG_MAX_MODEL_LEN``."""

    value: int  # 0: no key in config.json (vLLM then accepts any max_model_len given)
    key: str  # the config.json key it came from
    text: str  # how it was derived
    model_max_length: int | None = None
    shown: str = ""  # the number as vLLM's message prints it: a float (ModelArchitectureConfig holds it as one)


def derived_max_model_len(cfg: dict[str, Any], hf_config: dict[str, Any] | None = None) -> DerivedMaxLen:
    """vLLM 0.33's derived max_model_len of a config (``cfg``: the text config, ``hf_config``: the whole one).

    ``derive_max_model_len_and_key`` (``vllm/transformers_utils/model_arch_config_convertor.py``): the smallest
    of the keys in :data:`MAX_LEN_KEYS`, replaced by ``model_max_length`` when that is set; then
    ``_get_and_verify_max_len`` (``vllm/config/model.py``) multiplies it by the RoPE scaling ``factor`` unless
    the rope type already scales ``max_position_embeddings`` (:data:`ROPE_NOT_SCALED`) or the model is a
    Gemma 3.  (A tokenizer's ``model_max_length`` also lowers it in vLLM; kvdash reads no tokenizer.)

    >>> derived_max_model_len({"max_position_embeddings": 2048}).value
    2048
    >>> d = derived_max_model_len({"max_position_embeddings": 4096, "rope_parameters": {"rope_type": "linear",
    ...                                                                                   "factor": 2.0}})
    >>> d.value, d.key
    (8192, 'max_position_embeddings')
    >>> derived_max_model_len({"max_position_embeddings": 131072,
    ...                        "rope_parameters": {"rope_type": "llama3", "factor": 8.0}}).value
    131072
    """
    hf = cfg if hf_config is None else hf_config
    value: float = float("inf")
    key = ""
    for name in MAX_LEN_KEYS:
        got = cfg.get(name)
        if isinstance(got, int | float) and not isinstance(got, bool):
            if got < value:
                key = name
            value = min(value, got)
    if isinstance(cfg.get("model_max_length"), int | float) and cfg.get("model_max_length"):
        key, value = "model_max_length", cfg["model_max_length"]
    if value == float("inf"):
        return DerivedMaxLen(0, "", f"config.json names none of {', '.join(MAX_LEN_KEYS)}: vLLM assumes "
                                    f"{DEFAULT_MAX_LEN:,} and accepts any max_model_len given")
    text = f"{key} {int(value):,}"
    params = _rope_parameters(hf)
    model_type = str(hf.get("model_type") or cfg.get("model_type") or "")
    if params and "gemma3" not in model_type:
        factor: Any = 1.0
        for p in params:
            if p.get("rope_type") not in ROPE_NOT_SCALED:
                factor = p.get("factor", factor)
        if factor is None:
            factor = 1.0
        value = value * factor  # a float from here on, as in vLLM
        if factor != 1.0:
            text += f" x RoPE scaling factor {factor:g}"
    model_max = hf.get("model_max_length")
    return DerivedMaxLen(int(value), key, text + " (vllm/config/model.py, _get_and_verify_max_len)",
                         int(model_max) if isinstance(model_max, int | float) and model_max else None,
                         str(float(value)))


def _rope_parameters(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """``iter_rope_parameters`` (``vllm/transformers_utils/config.py``): one dict, or one per layer type."""
    rp = cfg.get("rope_parameters")
    if rp is None:
        rp = cfg.get("rope_scaling")
    if not isinstance(rp, dict) or not rp:
        return []
    nested = all(isinstance(v, dict) for v in rp.values())
    out = [p for p in rp.values() if isinstance(p, dict) and p] if nested else [rp]
    return [{**p, "rope_type": p.get("rope_type", p.get("type", "default"))} for p in out]

"""KV-cache element types and their storage cost.

``bytes_per_element`` is the payload; ``scale`` says what quantization scales cost on top:

* ``tensor`` -- one scale per tensor (vLLM's default FP8 path): nothing per token.
* ``token_head`` -- an fp32 scale for K and one for V per KV head per token
  (vLLM's ``int8_per_token_head`` / ``fp8_per_token_head``): ``2 x kv_heads x 4`` bytes per token per layer.

FP8 and int8 figures without per-token scales are *idealized*: real kernels also align and may store
scales, and accuracy must be measured separately.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvdash.errors import InputError, unknown_name

SCALE_BYTES = 4  # one fp32 scale


@dataclass(frozen=True)
class KVDtype:
    name: str
    bytes_per_element: int
    quantized: bool
    description: str


DTYPES: dict[str, KVDtype] = {
    d.name: d
    for d in (
        KVDtype("fp32", 4, False, "32-bit float"),
        KVDtype("fp16", 2, False, "16-bit float"),
        KVDtype("bf16", 2, False, "bfloat16 (vLLM 'auto' for bf16 models)"),
        KVDtype("fp8", 1, True, "8-bit float (vLLM 'fp8', e4m3 on CUDA)"),
        KVDtype("fp8_e4m3", 1, True, "8-bit float, 4-bit exponent"),
        KVDtype("fp8_e5m2", 1, True, "8-bit float, 5-bit exponent"),
        KVDtype("int8", 1, True, "8-bit integer"),
        KVDtype(
            "fp8_ds_mla",
            1,
            True,
            "DeepSeek MLA FP8 layout: 512 fp8 latent + 4 fp32 scales + 64 bf16 rope = 656 B/token/layer",
        ),
    )
}

ALIASES = {"auto": "bf16", "float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "half": "fp16"}

SCALE_MODES = ("tensor", "token_head")


def get_dtype(name: str) -> KVDtype:
    """Look up a KV dtype by name (``auto`` means bf16)."""
    key = ALIASES.get(name.lower(), name.lower())
    if key not in DTYPES:
        raise unknown_name("--kv-dtype", name, list(DTYPES) + list(ALIASES))
    return DTYPES[key]


def check_scale_mode(mode: str) -> str:
    if mode not in SCALE_MODES:
        raise unknown_name("--kv-scales", mode, SCALE_MODES)
    return mode


def fp8_ds_mla_token_bytes(kv_lora_rank: int, qk_rope_head_dim: int) -> int:
    """Bytes per token per layer of vLLM's ``fp8_ds_mla`` layout.

    The latent is stored as fp8 with one fp32 scale per 128 elements, and the rope part stays bf16:
    ``kv_lora_rank + 4 x (kv_lora_rank / 128) + 2 x qk_rope_head_dim``.

    >>> fp8_ds_mla_token_bytes(512, 64)  # DeepSeek-V3 (vllm/v1/kv_cache_interface.py, fp8_ds_mla: 656 B/token)
    656
    """
    if kv_lora_rank % 128:
        raise InputError("--kv-dtype", "fp8_ds_mla", f"needs kv_lora_rank divisible by 128, and this model's is "
                         f"{kv_lora_rank}: vLLM's fp8_ds_mla layout (what fp8 is on sparse MLA) keeps one fp32 scale "
                         "per 128 latent elements; use bf16")
    return kv_lora_rank + SCALE_BYTES * (kv_lora_rank // 128) + 2 * qk_rope_head_dim

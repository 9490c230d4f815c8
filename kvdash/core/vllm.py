"""vLLM 0.33.0's rules for what the engine will run, mirrored from its source (paths under ``vllm/`` of the
v0.33.0 release; each function names the file and function it follows).

These are the engine's choices, kept apart from the engine-free formulas of :mod:`kvdash.core.formulas`:

* the scheduler caps ``vllm serve`` picks for a GPU (``max_num_seqs``, ``max_num_batched_tokens``);
* how many batches are in flight at once (``max_concurrent_batches``), which sizes sliding-window and
  chunked-local layers;
* the CUDA-graph capture sizes those caps imply (they feed the reserve estimate);
* the block size ``--block-size`` left unset gives, per GPU generation and KV dtype;
* the longest ``max_model_len`` vLLM accepts for a model, and its refusal above it.

Pure Python, no imports beyond the standard library and kvdash's errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvdash.errors import InputError

GiB = 1 << 30
PERFORMANCE_MODES = ("balanced", "interactivity", "throughput")  # vllm/config/vllm.py PerformanceMode


# --- scheduler caps -------------------------------------------------------------------------------

@dataclass(frozen=True)
class BatchTier:
    """One row of ``EngineArgs.get_batch_defaults`` (``vllm/engine/arg_utils.py``) for ``vllm serve``
    (``UsageContext.OPENAI_API_SERVER``)."""

    max_num_batched_tokens: int
    max_num_seqs: int
    rule: str


TIER_LARGE = BatchTier(16384, 1024, "160 GiB or more")
TIER_H100 = BatchTier(8192, 1024, "70 GiB or more, not an A100")
TIER_OTHER = BatchTier(2048, 256, "under 70 GiB, or an A100")


def batch_tier(gpu_memory: int | None, gpu_name: str | None) -> tuple[BatchTier, str]:
    """The ``vllm serve`` defaults for a GPU of ``gpu_memory`` bytes named ``gpu_name``, and why.

    ``EngineArgs.get_batch_defaults`` (``vllm/engine/arg_utils.py``, v0.33.0): ``>= 160 GiB``: 16,384 batched
    tokens and 1,024 sequences; ``>= 70 GiB`` and ``"a100"`` not in the device name (nor a GB10): 8,192 / 1,024;
    otherwise 2,048 / 256.  Without a GPU (a declared budget) kvdash assumes the H100/H200 row, the GPUs its
    conformance harness plans for.

    >>> batch_tier(150_754_820_096, "NVIDIA H200")[0].max_num_batched_tokens  # 140.4 GiB, not an A100
    8192
    >>> batch_tier(85_899_345_920, "NVIDIA A100 80GB")[0].max_num_seqs  # 80 GiB but an A100
    256
    >>> batch_tier(192_000_000_000, "NVIDIA B200")[0].max_num_batched_tokens  # 178.8 GiB
    16384
    """
    if gpu_memory is None:
        return TIER_H100, "no GPU given: the H100/H200 row assumed"
    name = (gpu_name or "").lower()
    where = f"{gpu_name or 'a GPU'} ({gpu_memory / GiB:.1f} GiB"
    if gpu_memory >= 160 * GiB:
        return TIER_LARGE, f"{where}: {TIER_LARGE.rule})"
    if gpu_memory >= 70 * GiB and "a100" not in name:
        return TIER_H100, f"{where}: {TIER_H100.rule})"
    return TIER_OTHER, f"{where}: {TIER_OTHER.rule})"


@dataclass(frozen=True)
class Caps:
    """The scheduler caps vLLM runs with, each with where it came from."""

    max_num_seqs: int
    max_num_batched_tokens: int
    seqs_basis: str
    tokens_basis: str
    tier: str


def scheduler_caps(gpu_memory: int | None, gpu_name: str | None, max_model_len: int,
                   max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None,
                   performance_mode: str = "balanced", chunked_prefill: bool = True) -> Caps:
    """``max_num_seqs`` and ``max_num_batched_tokens`` as vLLM 0.33 sets them for ``vllm serve``.

    ``EngineArgs._set_default_max_num_seqs_and_batched_tokens_args`` (``vllm/engine/arg_utils.py``): a value
    the user leaves out takes the GPU's default (:func:`batch_tier`), doubled with ``--performance-mode
    throughput``; an unset batched-token count is raised to ``max_model_len`` without chunked prefill and then
    capped at ``max_num_seqs x max_model_len``; an unset ``max_num_seqs`` is capped at the batched tokens.
    ``SchedulerConfig.verify_max_model_len`` (``vllm/config/scheduler.py``) refuses given values with fewer
    batched tokens than sequences (or than ``max_model_len`` without chunked prefill).

    >>> c = scheduler_caps(24_152_899_584, "NVIDIA L4", 8192)  # L4: 256 / 2,048
    >>> c.max_num_seqs, c.max_num_batched_tokens
    (256, 2048)
    >>> c = scheduler_caps(85_520_809_984, "NVIDIA H100 80GB HBM3", 32768, performance_mode="throughput")
    >>> c.max_num_seqs, c.max_num_batched_tokens  # 1,024 x 2, 8,192 x 2
    (2048, 16384)
    >>> scheduler_caps(24_152_899_584, "NVIDIA L4", 8192, chunked_prefill=False).max_num_batched_tokens
    8192
    """
    if performance_mode not in PERFORMANCE_MODES:
        raise InputError("--performance-mode", performance_mode, "expected " + ", ".join(PERFORMANCE_MODES))
    tier, why = batch_tier(gpu_memory, gpu_name)
    double = performance_mode == "throughput"
    if max_num_batched_tokens is None:
        tokens = tier.max_num_batched_tokens * (2 if double else 1)
        tokens_basis = "default" + (f" {tier.max_num_batched_tokens:,} x 2 (--performance-mode throughput)"
                                    if double else "")
        if not chunked_prefill and max_model_len > tokens:
            tokens = max_model_len
            tokens_basis += f", raised to max_model_len {max_model_len:,} (chunked prefill off)"
        seqs_for_cap = (tier.max_num_seqs * (2 if double else 1)) if max_num_seqs is None else max_num_seqs
        if seqs_for_cap * max_model_len < tokens:
            tokens = seqs_for_cap * max_model_len
            tokens_basis += f", capped at max_num_seqs x max_model_len = {tokens:,}"
    else:
        tokens, tokens_basis = max_num_batched_tokens, "given with --max-batched-tokens"
    if max_num_seqs is None:
        seqs = tier.max_num_seqs * (2 if double else 1)
        seqs_basis = "default" + (f" {tier.max_num_seqs:,} x 2 (--performance-mode throughput)" if double else "")
        if seqs > tokens:
            seqs = tokens
            seqs_basis += f", capped at max_num_batched_tokens {tokens:,}"
    else:
        seqs, seqs_basis = max_num_seqs, "given with --max-num-seqs"
    # vllm/config/scheduler.py SchedulerConfig.verify_max_model_len
    if tokens < seqs:
        raise InputError("--max-batched-tokens", tokens,
                         f"vLLM 0.33 refuses it: max_num_batched_tokens ({tokens}) must be greater than or equal to "
                         f"max_num_seqs ({seqs}) (vllm/config/scheduler.py, verify_max_model_len)")
    if not chunked_prefill and tokens < max_model_len:
        raise InputError("--max-batched-tokens", tokens,
                         f"vLLM 0.33 refuses it: max_num_batched_tokens ({tokens}) is smaller than max_model_len "
                         f"({max_model_len}) with chunked prefill off (vllm/config/scheduler.py, "
                         "verify_max_model_len)")
    return Caps(seqs, tokens, seqs_basis, tokens_basis, why)


CAPS_SOURCE = "EngineArgs.get_batch_defaults, vllm/engine/arg_utils.py"


def caps_text(caps: Caps) -> str:
    """``'256 (default), 2,048 (given with --max-batched-tokens)'``-style account of both caps, and the rule.

    >>> caps_text(scheduler_caps(24_152_899_584, "NVIDIA L4", 8192))
    "max_num_seqs 256 (default), max_num_batched_tokens 2,048 (default): vLLM 0.33's defaults for NVIDIA L4 \
(22.5 GiB: under 70 GiB, or an A100; EngineArgs.get_batch_defaults, vllm/engine/arg_utils.py)"
    """
    both = (f"max_num_seqs {caps.max_num_seqs:,} ({caps.seqs_basis}), max_num_batched_tokens "
            f"{caps.max_num_batched_tokens:,} ({caps.tokens_basis})")
    if "default" not in caps.seqs_basis + caps.tokens_basis:
        return both
    return f"{both}: vLLM 0.33's defaults for {caps.tier.rstrip(')')}; {CAPS_SOURCE})" if caps.tier.endswith(")") \
        else f"{both}: vLLM 0.33's defaults, {caps.tier} ({CAPS_SOURCE})"


def max_concurrent_batches(async_scheduling: bool = True, pp: int = 1) -> int:
    """Batches scheduled but not yet settled: ``VllmConfig.max_concurrent_batches`` (``vllm/config/vllm.py``).

    Async scheduling (on by default, ``--no-async-scheduling`` turns it off) overlaps two batches; with
    pipeline parallelism the default V2 model runner keeps ``pp + 1`` in flight (``pp`` without async).

    >>> max_concurrent_batches(), max_concurrent_batches(False), max_concurrent_batches(True, 2)
    (2, 1, 3)
    """
    return pp + 1 if async_scheduling else pp


def max_in_flight_tokens(max_num_batched_tokens: int, async_scheduling: bool = True, pp: int = 1) -> int:
    """``VllmConfig.max_in_flight_tokens`` (``vllm/config/vllm.py``): ``max_concurrent_batches x
    max_num_batched_tokens``, what sliding-window and chunked-local layers are sized for.

    >>> max_in_flight_tokens(8192)  # H100/H200 default, async scheduling on
    16384
    """
    return max_concurrent_batches(async_scheduling, pp) * max_num_batched_tokens


# --- CUDA graphs ------------------------------------------------------------------------------------

def cudagraph_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, blackwell: bool = False,
                            performance_mode: str = "balanced") -> list[int]:
    """The batch sizes vLLM 0.33 captures CUDA graphs for by default (no speculative decoding).

    ``VllmConfig._set_cudagraph_sizes`` (``vllm/config/vllm.py``): the largest size is ``min(2 x max_num_seqs,
    512)`` (1,024 on Blackwell, SM100), at most ``max_num_batched_tokens``; the sizes are 1, 2, 4 (1..32 in
    ``interactivity`` mode), then every 8 below 256, then every 16 up to the largest, plus
    ``max_num_batched_tokens`` and ``max_num_seqs`` when they lie within it.

    >>> len(cudagraph_capture_sizes(1024, 8192)), len(cudagraph_capture_sizes(256, 2048))  # Hopper: 51 each
    (51, 51)
    >>> len(cudagraph_capture_sizes(1024, 16384, blackwell=True)), cudagraph_capture_sizes(4, 2048)
    (83, [1, 2, 4, 8])
    """
    ceiling = 1024 if blackwell else 512
    largest = min(max_num_seqs * 2, ceiling)
    decode = [max_num_seqs] if max_num_seqs <= largest else []
    largest = min(max_num_batched_tokens, largest)
    if performance_mode == "interactivity":
        sizes = list(range(1, min(largest, 32) + 1))
    else:
        sizes = [i for i in (1, 2, 4) if i <= largest]
    if largest >= 8:
        sizes += list(range(8, min(largest + 1, 256), 8))
    if largest >= 256:
        sizes += list(range(256, largest + 1, 16))
    if max_num_batched_tokens <= largest and max_num_batched_tokens not in sizes:
        sizes.append(max_num_batched_tokens)
    sizes += [s for s in decode if s <= max_num_batched_tokens]
    return sorted(set(sizes))


# --- block size -------------------------------------------------------------------------------------

def gpu_generation(compute_capability: str | None) -> str:
    """``"sm90"``-style family of a GPU preset's compute capability ("9.0" -> "sm90"); ``""`` unknown."""
    if not compute_capability:
        return ""
    major = compute_capability.split(".", 1)[0]
    return {"9": "sm90", "10": "sm100", "8": "sm80"}.get(major, "")


def auto_block_size(use_mla: bool, quantized_kv: bool, generation: str = "sm90") -> tuple[int, str]:
    """The block size vLLM 0.33 uses when ``--block-size`` is left unset, before hybrid alignment, and why.

    ``CudaPlatform.get_attn_backend_cls`` (``vllm/platforms/cuda.py``) takes the first valid backend of
    ``_get_backend_priorities`` for the GPU; ``Platform.update_block_size_for_backend``
    (``vllm/platforms/interface.py``) then takes its ``get_preferred_block_size(16)``: 16 where the backend
    accepts it, else its smallest kernel block size.

    * Hopper (SM90): attention FLASH_ATTN (multiples of 16) -> 16; MLA with a bf16/fp16 KV cache
      FLASH_ATTN_MLA (multiples of 16, bf16/fp16 KV only: ``v1/attention/backends/mla/flashattn_mla.py``)
      -> 16; MLA with an fp8 KV cache FLASHMLA (64 only: ``mla/flashmla.py``) -> 64.
    * Blackwell (SM100): attention FLASHINFER (16, 32, 64) -> 16; MLA FLASHINFER_MLA (32, 64:
      ``mla/flashinfer_mla.py``, for qk_nope_head_dim 64, 128 or 192) -> 32.
    * Ampere/Ada (SM80-89): attention FLASH_ATTN -> 16; MLA TRITON_MLA (multiples of 16) -> 16.

    >>> auto_block_size(True, False)[0], auto_block_size(True, True)[0], auto_block_size(False, True)[0]
    (16, 64, 16)
    >>> auto_block_size(True, False, "sm100")[0], auto_block_size(True, False, "sm80")[0]
    (32, 16)
    """
    if not use_mla:
        backend = {"sm100": "FLASHINFER (kernel blocks 16, 32, 64)"}.get(generation, "FLASH_ATTN (multiples of 16)")
        return 16, f"16: {backend} accepts vLLM's default block size of 16 ({_where(generation)})"
    if generation == "sm100":
        return 32, ("32: MLA on Blackwell runs FLASHINFER_MLA, whose kernel blocks are 32 or 64 "
                    "(vllm/v1/attention/backends/mla/flashinfer_mla.py)")
    if generation == "sm80":
        return 16, "16: MLA on Ampere/Ada runs TRITON_MLA, which takes multiples of 16 (mla/triton_mla.py)"
    if quantized_kv:
        return 64, ("64: MLA with an fp8 KV cache on Hopper runs FlashMLA, which takes only 64-token blocks "
                    "(FLASH_ATTN_MLA, first in vllm/platforms/cuda.py's SM90 order, takes bf16/fp16 KV only; "
                    "vllm/v1/attention/backends/mla/flashmla.py)")
    return 16, ("16: MLA with a bf16/fp16 KV cache on Hopper runs FLASH_ATTN_MLA, first in vllm/platforms/cuda.py's "
                "SM90 order, which takes multiples of 16 (vllm/v1/attention/backends/mla/flashattn_mla.py)")


def _where(generation: str) -> str:
    return {"sm90": "Hopper", "sm100": "Blackwell", "sm80": "Ampere/Ada"}.get(generation, "Hopper")


# --- max_model_len ----------------------------------------------------------------------------------

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


def check_max_model_len(max_model_len: int, derived: DerivedMaxLen, allow_long: bool,
                        field: str = "--max-model-len") -> None:
    """Refuse a ``max_model_len`` above the derived limit, as ``_get_and_verify_max_len`` (``vllm/config/model.py``)
    does unless ``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` is set (kvdash: ``--allow-long-max-model-len``)."""
    if not derived.value or max_model_len <= derived.value or allow_long:
        return
    if derived.model_max_length is not None and max_model_len <= derived.model_max_length:
        return
    raise InputError(field, max_model_len,
                     f"vLLM 0.33 refuses it: \"User-specified max_model_len ({max_model_len}) is greater than the "
                     f"derived max_model_len ({derived.key}={derived.shown or derived.value} or model_max_length="
                     f"{derived.model_max_length} in model's config.json)\" (vllm/config/model.py, "
                     "_get_and_verify_max_len)",
                     f"lower it to {derived.value:,} or less, or pass --allow-long-max-model-len as "
                     "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 does")


def check_one_request_fits(budget: int, block_bytes: int, blocks_per_request: int, max_model_len: int,
                           estimated_max_len: int, field: str = "--max-model-len") -> None:
    """Refuse a pool that cannot hold one request of ``max_model_len`` tokens, as vLLM 0.33 refuses to start.

    ``get_kv_cache_configs`` (``vllm/v1/core/kv_cache_planning.py``) plans against the memory left once the
    null block is held back (``available - bytes_per_block``) and ``_check_enough_kv_cache_memory`` raises when
    one request at ``max_model_len`` needs more: ``bytes_per_block x blocks_per_request`` (the sum over groups
    of ``max_memory_usage_bytes`` in pages, ``_max_memory_usage_bytes_from_groups``).  So it refuses exactly
    when ``bytes_per_block x (blocks_per_request + 1) > available``, i.e. when the pool's whole blocks
    ``available // bytes_per_block`` are no more than the blocks one request takes.  Its message quotes GiB
    as ``round(b / 2**30, 2)`` (``format_gib``, ``vllm/utils/mem_utils.py``) and the longest length that
    fits (``estimate_max_model_len``'s binary search, here ``estimated_max_len``).

    >>> check_one_request_fits(12 * 2**30, 8_257_536, 2048, 32768, 24944)  # Llama-3.1-405B, tp 1, bf16
    Traceback (most recent call last):
    ...
    kvdash.errors.InputError: --max-model-len: 32768 ...
    """
    if block_bytes <= 0 or block_bytes * (blocks_per_request + 1) <= budget:
        return
    needed, available = block_bytes * blocks_per_request, budget - block_bytes
    estimate = (f"Based on the available memory, the estimated maximum model length is {estimated_max_len}. "
                if estimated_max_len > 0 else "")
    raise InputError(field, max_model_len,
                     f"vLLM 0.33 refuses to start: \"To serve at least one request with the model's max seq len "
                     f"({max_model_len}), ({round(needed / 2**30, 2)} GiB KV cache is needed, which is larger "
                     f"than the available KV cache memory ({round(available / 2**30, 2)} GiB). {estimate}\" "
                     f"(vllm/v1/core/kv_cache_planning.py, get_kv_cache_configs: {blocks_per_request:,} blocks "
                     f"of {block_bytes:,} B for one request, {budget // block_bytes:,} in the pool of which one "
                     "is its null block)",
                     (f"lower it to {estimated_max_len:,} or less, " if estimated_max_len > 0 else "")
                     + "or give the KV cache more memory")

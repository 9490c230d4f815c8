"""vLLM 0.33.0's rules for what the engine will run, mirrored from its source (paths under ``vllm/`` of the
v0.33.0 release; each function names the file and function it follows), behind
:class:`kvdash.engines.base.EngineRules` as :data:`RULES`.

These are the engine's choices, kept apart from the engine-free formulas of :mod:`kvdash.core`:

* the KV budget from a GPU: ``floor(total x gpu_memory_utilization) - weights/rank - reserve``
  (``Worker.determine_available_memory``, ``vllm/v1/worker/gpu_worker.py``), default utilization 0.92; the
  reserve ``--reserve auto`` takes is :mod:`kvdash.engines.vllm_reserve`;
* the scheduler caps ``vllm serve`` picks for a GPU (``max_num_seqs``, ``max_num_batched_tokens``);
* how many batches are in flight at once (``max_concurrent_batches``), which sizes sliding-window and
  chunked-local layers;
* the CUDA-graph capture sizes those caps imply (they feed the reserve estimate);
* the block size ``--block-size`` left unset gives, per GPU generation and KV dtype, and its raise for hybrids;
* the KV-cache groups of a pool (:func:`rank_shapes`: ``_get_kv_cache_groups_uniform_page_size``) and the
  blocks a request's recurrent state takes (``MambaSpec``);
* the blocks vLLM budgets per request at ``max_model_len`` and its start-up log line (the figures it logs are
  assembled in :mod:`kvdash.engines.vllm_view`);
* the refusal to start when one request of ``max_model_len`` does not fit beside the null block
  (:func:`check_one_request_fits`);
* the refusal of a ``max_model_len`` above the derived limit (the limit itself is read from ``config.json`` by
  :mod:`kvdash.core.maxlen`).

Pure Python, no imports beyond the standard library and kvdash's core.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from kvdash import defaults
from kvdash.core import formulas as f
from kvdash.core.arch import Architecture, Layer
from kvdash.core.dtypes import check_scale_mode, get_dtype
from kvdash.core.maxlen import (  # noqa: F401  (re-exported: vLLM's reading of the length keys)
    DEFAULT_MAX_LEN,
    MAX_LEN_KEYS,
    ROPE_NOT_SCALED,
    DerivedMaxLen,
    derived_max_model_len,
)
from kvdash.core.pool import PoolShape, check_parallel, check_positive, layer_state_bytes, layer_token_bytes
from kvdash.core.state import state_page_bytes
from kvdash.engines.base import Budget, Caps, Gpu, Settings
from kvdash.errors import InputError

if TYPE_CHECKING:
    from kvdash.core.steptime import ModelCompute
from kvdash.units import scale_floor

VERSION = "0.33"  # the vLLM release whose rules kvdash mirrors
GiB = 1 << 30

PERFORMANCE_MODES = ("balanced", "interactivity", "throughput")  # vllm/config/vllm.py PerformanceMode


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


def gpu_generation(compute_capability: str | None) -> str:
    """``"sm90"``-style family of a GPU preset's compute capability ("9.0" -> "sm90"); ``""`` unknown."""
    if not compute_capability:
        return ""
    major = compute_capability.split(".", 1)[0]
    return {"9": "sm90", "10": "sm100", "8": "sm80"}.get(major, "")


def backend_block_size(use_mla: bool, quantized_kv: bool, generation: str = "sm90") -> tuple[int, str]:
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

    >>> backend_block_size(True, False)[0], backend_block_size(True, True)[0], backend_block_size(False, True)[0]
    (16, 64, 16)
    >>> backend_block_size(True, False, "sm100")[0], backend_block_size(True, False, "sm80")[0]
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


# --- the pool: KV-cache groups, hybrid block alignment, state blocks ----------------------------------

KERNEL_BLOCK_ALIGNMENT = 16  # FlashAttention's supported kernel block sizes: multiples of 16
# FlashInfer's gated-delta-net prefill (Hopper) exports a state checkpoint every 64 tokens in align mode
# (vllm/v1/attention/backends/gdn_attn.py, FLASHINFER_GDN_CHECKPOINT_ALIGNMENT)
GDN_CHECKPOINT_ALIGNMENT = 64


def exports_checkpoints(arch: Architecture, prefix_caching: bool) -> bool:
    """vLLM 0.33 takes prefill checkpoints only when every state layer exports them: gated delta net
    layers do in align mode on Hopper (one extra block per request, blocks on a 64-token grid)."""
    states = arch.state_layers
    return prefix_caching and bool(states) and all(layer.state_family == "gdn" for layer in states)


def takes_prefill_checkpoint(arch: Architecture, prefix_caching: bool) -> bool:
    """Whether the state layers' ``MambaSpec`` holds a prefill-checkpoint block in align mode
    (``num_prefill_checkpoint_blocks=1``; ``MambaSpec.max_memory_usage_bytes`` in ``vllm/v1/kv_cache_interface.py``
    is then page x (2 + speculative + 1) per request):

    * every Mamba-2 layer: ``MambaMixer2.get_kv_cache_spec`` (``vllm/model_executor/layers/mamba/mamba_mixer2.py``)
      always sets it (Nemotron-H, Nemotron-3, Granite-4.0-H, Falcon-H1, Zamba2, Mamba-2: every model built on
      ``MambaMixer2``); Mamba-1 (``MambaMixer``, Jamba) keeps 2 blocks;
    * gated delta net layers when they export checkpoints (:func:`exports_checkpoints`).

    With prefix caching off (mamba_cache_mode 'none') a state layer holds 1 block whatever this says."""
    states = arch.state_layers
    if not prefix_caching or not states:
        return False
    return all(layer.state_family == "mamba2" for layer in states) or exports_checkpoints(arch, prefix_caching)


def aligned_block_size(arch: Architecture, dtype: str, scales: str, tp: int, requested: int,
                       prefix_caching: bool = True) -> tuple[int, int]:
    """The attention block size vLLM 0.33 uses, and the state page it must hold (0: no state layers).

    ``Platform._align_hybrid_block_size`` (``vllm/platforms/interface.py``): with alignment
    ``a = max(16, requested)`` (in align mode with checkpoints, ``lcm(a, 64)``) the block becomes
    ``a x ceil(state page / (a x attention bytes per token))``, rounded up to a multiple of 16, when
    that is larger than the requested one, so that one attention page holds a state page; the state
    page is then padded to the attention page.

    >>> from kvdash.core.model import Layer, Architecture
    >>> attn = Layer("full", kv_heads=8, head_dim=128, head_dim_v=128)
    >>> mamba = Layer("mamba", state_family="mamba1", state=(8192, 16, 4))
    >>> aligned_block_size(Architecture("jamba", (attn, mamba), 32, 4096), "bf16", "tensor", 1, 16)
    (80, 311296)

    State layers of two sizes are paged at the larger (an attention-free stack: the requested block, that page):

    >>> from kvdash.core.pool import layer_state_bytes
    >>> small = Layer("mamba", state_family="mamba1", state=(4096, 16, 4))
    >>> aligned_block_size(Architecture("mamba", (small, mamba), 32, 4096), "bf16", "tensor", 1, 16) == (
    ...     16, layer_state_bytes(mamba, 1)) and layer_state_bytes(small, 1) < layer_state_bytes(mamba, 1)
    True
    """
    states = arch.state_layers
    if not states:
        return requested, 0
    attn = arch.attention_layers[0] if arch.attention_layers else None
    page = max(layer_state_bytes(layer, tp) for layer in states)
    if attn is None:  # attention-free (Mamba): nothing to align to; a block is one state page per layer
        return requested, page
    # the page the alignment is computed for: the model class's (get_mamba_state_shape_from_config), which is the
    # layers' own but for a Zamba2 config whose mamba_headdim is not intermediate // n_mamba_heads (Layer.align_state)
    aligned_page = max(state_page_bytes(layer.state_family, layer.align_state or layer.state, tp, layer.conv_bytes,
                                        layer.ssm_bytes) for layer in states)
    token = layer_token_bytes(attn, dtype, scales, tp)
    align = f.imax(KERNEL_BLOCK_ALIGNMENT, requested)
    if exports_checkpoints(arch, prefix_caching):
        align = math.lcm(align, GDN_CHECKPOINT_ALIGNMENT)
    block = align * f.cdiv(aligned_page, align * token)
    block = KERNEL_BLOCK_ALIGNMENT * f.cdiv(block, KERNEL_BLOCK_ALIGNMENT)
    used = f.imax(requested, block)
    if page > used * token:
        # the state page is padded to the attention page (cache_config.mamba_page_size_padded); a layer whose own page
        # is larger trips MambaSpec.page_size_bytes' "assert self.page_size_padded >= page_size"
        # (vllm/v1/kv_cache_interface.py) while the engine plans its KV cache: vLLM 0.33 does not start
        raise InputError("--block-size", used,
                         f"vLLM 0.33 refuses to start (AssertionError in MambaSpec.page_size_bytes, "
                         f"vllm/v1/kv_cache_interface.py): the model class aligns the block to a {aligned_page:,} B "
                         f"state page (get_mamba_state_shape_from_config) but its layers hold {page:,} B, more than "
                         f"the {used * token:,} B attention page of {used} tokens",
                         f"a --block-size of at least {f.cdiv(page, token)} tokens whose attention page holds the "
                         "state (and that the attention backend takes)")
    return used, page


def refused_auto_block(exc: InputError, auto: bool) -> InputError:
    """A refusal of the block size as the user sees it: with ``--block-size auto`` (the default, vLLM's own
    choice) it names 'auto', not the number kvdash resolved it to as though that had been typed (the
    message says how many tokens it came to); any other refusal unchanged."""
    if auto and exc.field.endswith("--block-size"):
        return InputError(exc.field, "auto", exc.allowed, exc.hint)
    return exc


def stage_layers(n_layers: int, pp: int) -> list[range]:
    """Layer ranges per pipeline stage, as vLLM's ``get_pp_indices`` splits them: equal shares,
    the remainder going one each to the stages before the last."""
    sizes = [n_layers // pp] * pp
    for i in range(2, n_layers % pp + 2):
        sizes[-i] += 1
    out, start = [], 0
    for size in sizes:
        out.append(range(start, start + size))
        start += size
    return out


def group_size_for(counts: Sequence[int]) -> int:
    """Layers per KV-cache group for layer kinds of these counts (vLLM 0.33,
    ``_get_kv_cache_groups_uniform_page_size``): the smallest count, or the largest when it is
    below 1.5 x the smallest (12 sliding + 13 full -> 13, not 12).

    >>> group_size_for([52, 10]), group_size_for([12, 13]), group_size_for([28, 4]), group_size_for([62])
    (10, 13, 4, 62)
    """
    low, high = min(counts), max(counts)
    return high if high < low * 1.5 else low


def shape_of(layers: Sequence[Layer], dtype: str, scales: str, tp: int, block_size: int,
             state_page: int = 0, prefix_caching: bool = True, requested: int | None = None,
             checkpoints: bool = False) -> PoolShape:
    """The pool geometry of one stage holding ``layers`` (``block_size``: the one vLLM uses)."""
    kinds: dict[tuple[str, int], list[int]] = {}
    n_state = 0
    for layer, count in Counter(layers).items():  # models repeat a few layer kinds many times
        if layer.is_state:
            n_state += count
            continue
        key = ("full" if layer.kind in ("full", "mla") else layer.kind, layer.window)
        kinds.setdefault(key, []).extend([layer_token_bytes(layer, dtype, scales, tp)] * count)
    if not kinds and not n_state:
        raise InputError("model", "no layers", "a pipeline stage holds no cache layer")
    if not kinds:
        # attention-free (Mamba, Falcon-Mamba: vllm/model_executor/models/mamba.py): every layer's MambaSpec page,
        # one group of them all (_get_kv_cache_groups_uniform_page_size), a block = one page per layer; a request
        # holds 2 blocks in align mode (prefix caching on), 3 with a Mamba-2 checkpoint, 1 without prefix caching
        # (MambaSpec.max_memory_usage_bytes, vllm/v1/kv_cache_interface.py)
        blocks = (3 if checkpoints else 2) if prefix_caching else 1
        return PoolShape(
            block_size=block_size, layer_token_bytes=0, group_size=n_state, full_groups=0, window_groups=0,
            window=0, full_token_bytes=0, window_token_bytes=0, state_bytes=blocks * state_page * n_state,
            attention_layers=0, state_layers=n_state, state_groups=1, state_blocks=blocks,
            state_page_bytes=state_page, requested_block_size=block_size if requested is None else requested,
            mamba_mode="align" if prefix_caching else "none", fixed_block_bytes=state_page * n_state)
    local = {kind for (kind, _) in kinds if kind != "full"}
    if len(local) > 1:
        raise InputError("model", "sliding and chunked layers",
                         "one local-attention kind per model is supported (sliding or chunked)")
    windows = {w for (kind, w) in kinds if kind != "full"}
    if len(windows) > 1:
        raise InputError("model.sliding_window", sorted(windows),
                         "one sliding-window size per model is supported")
    counts = [len(v) for v in kinds.values()] + ([n_state] if n_state else [])
    group_size = group_size_for(counts)
    full_groups = sum(f.cdiv(len(v), group_size) for (k, _), v in kinds.items() if k == "full")
    window_groups = sum(f.cdiv(len(v), group_size) for (k, _), v in kinds.items() if k != "full")
    layer_bytes = max(max(v) for v in kinds.values())

    def ratio(local: bool) -> int:
        # unify_kv_cache_spec_page_size (vllm/v1/core/kv_cache_planning.py): a smaller page that divides the
        # largest gets a ratio x longer block (MiMo-V2-Flash's full layers: 2); one that does not is padded (1)
        sizes = {b for (k, _), v in kinds.items() if (k != "full") == local for b in v}
        only = sizes.pop() if len(sizes) == 1 else layer_bytes
        return layer_bytes // only if layer_bytes % only == 0 else 1

    state_groups = f.cdiv(n_state, group_size) if n_state else 0
    # MambaSpec.max_memory_usage_bytes (vllm/v1/kv_cache_interface.py): align mode 2 pages per request, + 1 prefill
    # checkpoint (Mamba-2 layers, checkpointing gated delta nets: takes_prefill_checkpoint), else 1
    state_blocks = state_groups * ((3 if checkpoints else 2) if prefix_caching else 1)
    return PoolShape(
        block_size=block_size,
        layer_token_bytes=layer_bytes,
        group_size=group_size,
        full_groups=full_groups,
        window_groups=window_groups,
        window=windows.pop() if windows else 0,
        full_token_bytes=sum(sum(v) for (k, _), v in kinds.items() if k == "full"),
        window_token_bytes=sum(sum(v) for (k, _), v in kinds.items() if k != "full"),
        state_bytes=state_blocks * f.block_bytes(block_size, layer_bytes, group_size),
        attention_layers=sum(len(v) for v in kinds.values()),
        state_layers=n_state,
        chunked=int("chunked" in local),
        state_groups=state_groups,
        state_blocks=state_blocks,
        state_page_bytes=state_page if n_state else 0,
        requested_block_size=block_size if requested is None else requested,
        mamba_mode=("align" if prefix_caching else "none") if n_state else "",
        full_ratio=ratio(False) if full_groups else 1,
        window_ratio=ratio(True) if window_groups else 1,
    )


# vllm/model_executor/models/falcon.py (v0.33.0), FalconAttention.__init__: the rotary branch (lines 173-180) and the
# ALiBi branch (lines 189-196) build their Attention without cache_config, so its kv_cache_dtype stays "auto" (the
# model dtype) whatever --kv-cache-dtype says; only the branch with neither passes cache_config, and transformers'
# FalconConfig has rotary = not alibi, so every Falcon takes one of the first two.  Measured with vLLM's own Falcon
# layers: falcon-7b tp 1, 12 GiB, fp8 -> 98,304 blocks, as with bf16 (conformance/vllm/expected.json).
KV_DTYPE_IGNORED = {"falcon": "vllm/model_executor/models/falcon.py lines 173-180 (FalconAttention builds its "
                              "rotary Attention without cache_config)"}


# vllm/model_executor/layers/attention/mla_attention.py (v0.33.0), _canonicalize_sparse_mla_kv_cache_dtype: a
# sparse MLA layer whose backend is FLASHMLA_SPARSE (Hopper's choice for a quantized KV cache: FLASH_ATTN_MLA_SPARSE,
# first in vllm/platforms/cuda.py's SM90 order, takes bf16/fp16 only) stores any quantized dtype but NVFP4 as
# fp8_ds_mla (656 B per token: MLAAttention.get_kv_cache_spec's state_content_bytes)
SPARSE_FP8 = ("vllm/model_executor/layers/attention/mla_attention.py, _canonicalize_sparse_mla_kv_cache_dtype: "
              "sparse MLA with an fp8 KV cache runs FLASHMLA_SPARSE on Hopper, which stores fp8_ds_mla")


def is_sparse_mla(arch: Architecture) -> bool:
    """DeepSeek sparse attention (DeepSeek-V3.2, GLM-5): MLA layers with an indexer key cache beside the latent."""
    return any(layer.index_bytes for layer in arch.layers if layer.kind == "mla")


MODELOPT_KV = {"fp8": "fp8_e4m3", "nvfp4": "nvfp4"}  # MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP, vllm/utils/torch_utils.py


# model types vLLM 0.33 refuses to run in float16 (_FLOAT16_NOT_SUPPORTED_MODELS, vllm/config/model.py): --dtype
# auto serves their float16 checkpoints in bf16
FLOAT16_NOT_SUPPORTED = frozenset({"gemma2", "gemma3", "gemma3_text", "glm4"})


def resolve_auto_kv_dtype(arch: Architecture) -> tuple[str, str]:
    """:func:`declared_kv_dtype` of the checkpoint's ``quantization_config`` (config.json's, kept as a fact); where
    it declares no KV scheme, the model dtype: ``--dtype auto`` (``_resolve_auto_dtype``, vllm/config/model.py)
    serves a float16 checkpoint in fp16 on Ampere and later (bfloat16 first among the supported, float16 kept
    where the config says so and the model type allows it), everything else in bf16 (float32 is cast down)."""
    dtype, why = declared_kv_dtype(arch.facts.get("quantization_config") or {})
    return (model_dtype(arch), "") if not why and dtype == "bf16" else (dtype, why)


def model_dtype(arch: Architecture) -> str:
    """The dtype ``--dtype auto`` serves the model in (:func:`resolve_auto_kv_dtype`): :func:`served_dtype`."""
    return served_dtype(str(arch.facts.get("torch_dtype") or ""), arch.model_type)


def served_dtype(torch_dtype: str, model_type: str) -> str:
    """fp16 for a float16 checkpoint whose model type vLLM 0.33 runs in float16, else bf16."""
    return "fp16" if torch_dtype == "float16" and model_type not in FLOAT16_NOT_SUPPORTED else "bf16"


def declared_kv_dtype(q: dict[str, Any]) -> tuple[str, str]:
    """What ``--kv-cache-dtype auto`` (vLLM's default) stores for a checkpoint with this ``quantization_config``,
    and why when it is not the model dtype (else ``""``).

    ``EngineArgs.create_engine_config`` (``vllm/engine/arg_utils.py``) resolves ``auto`` with
    ``resolve_kv_cache_dtype_string`` (``vllm/utils/torch_utils.py``): a ModelOpt checkpoint
    (``quant_method`` ``modelopt*``) names its KV scheme in ``kv_cache_scheme`` or ``kv_cache_quant_algo``
    (inside ``quantization`` or at the top; ``get_kv_cache_quant_algo_string``): a static 8-bit float scheme
    or ``"FP8"`` is ``fp8_e4m3``, a 4-bit float one ``nvfp4``, anything else stays ``auto``.  A
    compressed-tensors checkpoint that declares a ``kv_cache_scheme`` makes ``auto`` ``fp8`` in
    ``Attention.__init__`` (``vllm/model_executor/layers/attention/attention.py``).  ``auto`` otherwise is
    the model dtype, bf16 here (:func:`resolve_auto_kv_dtype` reads an fp16 checkpoint's)."""
    method = str(q.get("quant_method", ""))
    if method.startswith("modelopt"):
        inner: dict[str, Any] = q["quantization"] if isinstance(q.get("quantization"), dict) else q
        algo = (inner.get("kv_cache_scheme") or q.get("kv_cache_scheme") or inner.get("kv_cache_quant_algo")
                or q.get("kv_cache_quant_algo"))
        if isinstance(algo, dict):
            if algo.get("dynamic") is False and algo.get("num_bits") == 8 and algo.get("type") == "float":
                algo = "fp8"
            elif algo.get("num_bits") == 4 and algo.get("type") == "float":
                algo = "nvfp4"
            else:
                return "bf16", ""
        dtype = MODELOPT_KV.get(algo.lower(), "") if isinstance(algo, str) else ""
        if dtype == "nvfp4":
            raise InputError("--kv-dtype", "auto", "the checkpoint declares an NVFP4 KV cache (its ModelOpt "
                             "quantization_config), which vLLM 0.33 stores as nvfp4; kvdash does not mirror that "
                             "layout", "pass --kv-dtype explicitly (e.g. fp8 or bf16)")
        if dtype:
            return dtype, (f"auto: the checkpoint's ModelOpt quantization_config declares its KV cache as {algo}, "
                           "which vLLM 0.33 stores as fp8_e4m3 (resolve_kv_cache_dtype_string, "
                           "vllm/utils/torch_utils.py)")
        return "bf16", ""
    if method == "compressed-tensors" and q.get("kv_cache_scheme") is not None:
        return "fp8", ("auto: the checkpoint's compressed-tensors quantization_config declares a kv_cache_scheme, "
                       "so vLLM 0.33 stores fp8 (Attention.__init__, "
                       "vllm/model_executor/layers/attention/attention.py)")
    return "bf16", ""


def stored_kv_dtype(arch: Architecture, dtype: str) -> tuple[str, str]:
    """The dtype vLLM 0.33 stores this model's KV cache in when ``--kv-cache-dtype`` is ``dtype``, and, when it is
    not ``dtype``, why (else ``""``).  A quantized dtype asked of a model whose attention ignores it
    (:data:`KV_DTYPE_IGNORED`) is stored in the model dtype (:func:`model_dtype`: bf16, or fp16 for a float16
    checkpoint); ``fp8`` asked of sparse MLA is stored as ``fp8_ds_mla`` (:data:`SPARSE_FP8`), and
    another quantized dtype there is refused (FlashMLA's sparse kernel takes ``fp8`` and ``fp8_ds_mla``; which
    backend serves the others is not mirrored)."""
    auto_why = ""
    if dtype.lower() == "auto":
        dtype, auto_why = resolve_auto_kv_dtype(arch)
        if auto_why:
            stored, why = stored_kv_dtype(arch, dtype)
            return stored, auto_why + (f"; then {why}" if why else "")
    kv = get_dtype(dtype)
    why = KV_DTYPE_IGNORED.get(arch.model_type, "")
    if kv.quantized and why:
        return model_dtype(arch), why
    if kv.quantized and is_sparse_mla(arch):
        if kv.name in ("fp8", "fp8_ds_mla"):
            return "fp8_ds_mla", "" if kv.name == "fp8_ds_mla" else SPARSE_FP8
        raise InputError("--kv-dtype", dtype, "for sparse MLA (DeepSeek-V3.2, GLM-5) kvdash mirrors bf16, fp8 and "
                         "fp8_ds_mla (vLLM 0.33 on Hopper: FLASH_ATTN_MLA_SPARSE and FLASHMLA_SPARSE, "
                         "vllm/platforms/cuda.py); the backend another quantized dtype gets is not mirrored")
    return kv.name, ""


SPARSE_BLOCK = 64  # FLASH_ATTN_MLA_SPARSE, FLASHMLA_SPARSE, FLASHINFER_MLA_SPARSE_SM90: MultipleOf(64) kernel blocks


def check_sparse_block(arch: Architecture, block_size: int, generation: str = "sm90") -> None:
    """Refuse a block size (or GPU) no sparse MLA backend of vLLM 0.33 takes, as its selector refuses to start.

    ``CudaPlatform.get_attn_backend_cls`` (``vllm/platforms/cuda.py``) raises "No valid attention backend found"
    when every backend of ``_get_backend_priorities`` rejects the combination: on Hopper (SM90) the sparse MLA
    backends FLASH_ATTN_MLA_SPARSE, FLASHMLA_SPARSE and FLASHINFER_MLA_SPARSE_SM90 take only multiples of 64
    tokens (``get_supported_kernel_block_sizes``: ``MultipleOf(64)``, ``v1/attention/backends/mla/``), and no
    SM80-89 backend is sparse.  Blackwell's sparse choice (per KV dtype and heads per rank) is not mirrored.

    >>> from kvdash.core.arch import Architecture, Layer
    >>> v32 = Architecture("v3.2", (Layer("mla", kv_heads=1, kv_lora_rank=512, qk_rope_head_dim=64, index_bytes=132),),
    ...                    128, 163840)
    >>> check_sparse_block(v32, 64), check_sparse_block(v32, 128)
    (None, None)
    >>> check_sparse_block(v32, 16)
    Traceback (most recent call last):
    ...
    kvdash.errors.InputError: --block-size: 16 ...
    """
    if not is_sparse_mla(arch):
        return
    if generation == "sm80":
        raise InputError("--gpu", "compute capability 8.x", "vLLM 0.33 has no sparse MLA backend for SM80-89 "
                         "(FLASH_ATTN_MLA_SPARSE and FLASHINFER_MLA_SPARSE_SM90 take SM90 only, FLASHMLA_SPARSE SM90 "
                         "and SM100: vllm/v1/attention/backends/mla/), so it refuses to start")
    if generation == "sm100":
        raise InputError("--gpu", "compute capability 10.x", "sparse MLA on Blackwell (FLASHINFER_MLA_SPARSE, "
                         "FLASHMLA_SPARSE or FA4 by KV dtype and heads per rank: vllm/platforms/cuda.py) is not "
                         "mirrored; kvdash mirrors Hopper's")
    if block_size % SPARSE_BLOCK:
        raise InputError("--block-size", block_size,
                         f"vLLM 0.33 refuses to start: \"No valid attention backend found\" for sparse MLA at block "
                         f"size {block_size} (vllm/platforms/cuda.py, get_attn_backend_cls: Hopper's sparse MLA "
                         "backends FLASH_ATTN_MLA_SPARSE, FLASHMLA_SPARSE and FLASHINFER_MLA_SPARSE_SM90 take only "
                         "multiples of 64 tokens, vllm/v1/attention/backends/mla/)",
                         "a multiple of 64, or auto (64)")


def rank_shapes(arch: Architecture, dtype: str = "bf16", scales: str = "tensor", tp: int = 1,
                pp: int = 1, block_size: int = 16, prefix_caching: bool = True) -> list[PoolShape]:
    """One :class:`PoolShape` per pipeline stage (all tensor-parallel ranks of a stage match); the KV dtype is the
    one vLLM stores the cache in (:func:`stored_kv_dtype`: Falcon keeps bf16)."""
    check_positive("--block-size", block_size)
    check_scale_mode(scales)
    check_sparse_block(arch, block_size)
    dtype = stored_kv_dtype(arch, dtype)[0]
    if get_dtype(dtype).name == "fp8_ds_mla" and not arch.use_mla:  # an attention-free model too (no layer asks)
        raise InputError("--kv-dtype", dtype, "fp8_ds_mla applies to MLA models only")
    check_parallel(arch, tp, pp)
    used, page = aligned_block_size(arch, dtype, scales, tp, block_size, prefix_caching)
    checkpoints = takes_prefill_checkpoint(arch, prefix_caching)
    return [shape_of([arch.layers[i] for i in r], dtype, scales, tp, used, page, prefix_caching, block_size,
                     checkpoints) for r in stage_layers(arch.num_layers, pp)]


HYBRID_RAISE_NOTE = ("; then raised so one attention page holds a state page (vllm/platforms/interface.py, "
                     "_align_hybrid_block_size)")


def auto_block_size(arch: Architecture, kv_dtype: str = defaults.KV_DTYPE,
                    compute_capability: str = "") -> tuple[int, str]:
    """The block size vLLM 0.33 picks when none is given, and why: per GPU generation (the budget's GPU preset;
    Hopper when there is none) and KV dtype (:func:`backend_block_size`); a hybrid's block is
    then raised to hold its state page (:func:`aligned_block_size`)."""
    generation = gpu_generation(compute_capability) or "sm90"
    if kv_dtype.lower() == "auto":
        kv_dtype = resolve_auto_kv_dtype(arch)[0]
    if is_sparse_mla(arch):
        check_sparse_block(arch, SPARSE_BLOCK, generation)
        backend = "FLASHMLA_SPARSE" if get_dtype(kv_dtype).quantized else "FLASH_ATTN_MLA_SPARSE"
        return SPARSE_BLOCK, (f"64: sparse MLA on Hopper runs {backend} (vllm/platforms/cuda.py's SM90 order; "
                              "FLASH_ATTN_MLA_SPARSE takes bf16/fp16 KV only), whose kernel blocks are multiples of "
                              "64 (vllm/v1/attention/backends/mla/)")
    size, why = backend_block_size(arch.use_mla, get_dtype(kv_dtype).quantized, generation)
    if compute_capability == "" and generation == "sm90":
        why += "; no CUDA GPU preset given: Hopper's choice"
    if arch.is_hybrid:
        why += HYBRID_RAISE_NOTE
    return size, why


def starts(pool_blocks: Any, blocks_per_request: Any) -> Any:
    """Whether vLLM 0.33 starts: its pool's whole blocks, one of them the null block, hold one request at
    ``max_model_len`` (:func:`check_one_request_fits`).  Integers for one configuration, polars columns for a
    grid (:mod:`kvdash.sweep.evaluate`)."""
    return pool_blocks > blocks_per_request


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
    if block_bytes <= 0 or starts(budget // block_bytes, blocks_per_request):
        return
    needed, available = block_bytes * blocks_per_request, budget - block_bytes
    estimate = (f"Based on the available memory, the estimated maximum model length is {estimated_max_len}. "
                if estimated_max_len > 0 else "")
    said = (f"To serve at least one request with the model's max seq len ({max_model_len}), "
            f"({round(needed / 2**30, 2)} GiB KV cache is needed, which is larger than the available KV cache "
            f"memory ({round(available / 2**30, 2)} GiB). {estimate}").rstrip()
    raise InputError(field, max_model_len,
                     f"vLLM 0.33 refuses to start: \"{said}\" "
                     f"(vllm/v1/core/kv_cache_planning.py, get_kv_cache_configs: {blocks_per_request:,} blocks "
                     f"of {block_bytes:,} B for one request, {budget // block_bytes:,} in the pool of which one "
                     "is its null block)",
                     (f"lower it to {estimated_max_len:,} or less, " if estimated_max_len > 0 else "")
                     + "or give the KV cache more memory")


# --- the interface ----------------------------------------------------------------------------------

class VllmRules:
    """vLLM 0.33.0 behind :class:`~kvdash.engines.base.EngineRules` (each method's rule is named in the
    function it calls)."""

    name = "vllm"
    version = VERSION
    label = f"vLLM {VERSION}"
    default_util = "0.92"  # vllm/config/cache.py CacheConfig.gpu_memory_utilization
    metric_prefix = "vllm:"

    def check_max_model_len(self, arch: Architecture, max_model_len: int, allow_long: bool,
                            field: str = "--max-model-len") -> None:
        check_max_model_len(max_model_len, arch.derived_max_len, allow_long, field)

    def check_one_request_fits(self, budget: int, block_bytes: int, blocks_per_request: int, max_model_len: int,
                               estimated_max_len: int, field: str = "--max-model-len") -> None:
        check_one_request_fits(budget, block_bytes, blocks_per_request, max_model_len, estimated_max_len, field)

    def caps(self, gpu: Gpu, settings: Settings) -> Caps:
        return scheduler_caps(gpu.memory, gpu.name, settings.max_model_len, settings.max_num_seqs,
                              settings.max_num_batched_tokens, settings.performance_mode, settings.chunked_prefill)

    def block_size(self, arch: Architecture, kv_dtype: str, requested: int | str, gpu: Gpu) -> tuple[int, str]:
        if requested == "auto":
            return auto_block_size(arch, kv_dtype, gpu.compute_capability)
        if isinstance(requested, str):
            raise InputError("--block-size", requested, "expected a positive integer or 'auto'")
        check_sparse_block(arch, check_positive("--block-size", requested),
                           gpu_generation(gpu.compute_capability) or "sm90")
        return requested, f"{requested}: requested"

    def pool(self, arch: Architecture, kv_dtype: str, kv_scales: str, tp: int, pp: int, block_size: int,
             prefix_caching: bool) -> list[PoolShape]:
        return rank_shapes(arch, kv_dtype, kv_scales, tp, pp, block_size, prefix_caching)

    def budget(self, total: int, util: Decimal, weights_per_rank: int, reserve: int) -> Budget:
        requested = scale_floor(total, util)
        return Budget(requested, requested - weights_per_rank - reserve, "floor(total x util) - weights/rank - reserve")

    def auto_reserve(self, arch: Architecture, tp: int, pp: int, caps: Caps, gpu: Gpu,
                     settings: Settings) -> dict[str, Any]:
        from kvdash.engines.vllm_reserve import auto_reserve

        return auto_reserve(arch.model_type, tp, pp, caps.max_num_batched_tokens, gpu.name, layers=arch.num_layers,
                            graphs=self.capture_graphs(caps, gpu, settings))

    def capture_graphs(self, caps: Caps, gpu: Gpu, settings: Settings) -> int:
        """CUDA graphs vLLM 0.33 captures under these caps on this GPU (the reserve's CUDA-graph term scales
        with them): :func:`cudagraph_capture_sizes`, 1,024 the largest on Blackwell (SM100)."""
        blackwell = gpu_generation(gpu.compute_capability) == "sm100"
        return len(cudagraph_capture_sizes(caps.max_num_seqs, caps.max_num_batched_tokens, blackwell,
                                           settings.performance_mode))

    def in_flight_tokens(self, caps: Caps, settings: Settings) -> int:
        return max_in_flight_tokens(caps.max_num_batched_tokens, settings.async_scheduling, settings.pp)

    def blocks_per_request(self, x: Mapping[str, Any]) -> Any:
        # max_memory_usage_bytes per spec (vllm/v1/kv_cache_interface.py): full cdiv(L, B); sliding
        # cdiv(min(W - 1 + T, L), B) + 1; chunked cdiv(min(C + T, L), B), T = max_in_flight_tokens (2 x
        # max_num_batched_tokens under async scheduling); a state group 1 block (2 in align mode, 3 for Mamba-2).
        # A kind whose page is a ratio-th of the largest holds ratio x B tokens per block
        # (unify_kv_cache_spec_page_size, vllm/v1/core/kv_cache_planning.py; PoolShape.full_ratio / window_ratio)
        B, L, window, chunked = x["block_size"], x["max_model_len"], x["window"], x["chunked"]
        fb, wb = B * x.get("full_ratio", 1), B * x.get("window_ratio", 1)
        local = f.cdiv(f.imin(window - 1 + chunked + x["in_flight_tokens"], L), wb) + 1 - chunked
        return x["full_groups"] * f.cdiv(L, fb) + x["window_groups"] * local + x["state_blocks"]

    def startup_line(self, kv_tokens: int, max_model_len: int, concurrency: float) -> str:
        # vllm/v1/core/kv_cache_utils.py (v0.33.0), update_kv_cache_capacity: one line
        return (f"GPU KV cache size: {kv_tokens:,} tokens, "
                f"Maximum concurrency for {max_model_len:,} tokens per request: {concurrency:.2f}x")

    def caps_text(self, caps: Caps) -> str:
        return caps_text(caps)


RULES = VllmRules()


# A module of each part, as the decoders name it (layer 0): Llama / DeepSeek (mlp, shared_experts, experts),
# Qwen-MoE (shared_expert), MiniMax (block_sparse_moe), Llama 4 (feed_forward): what a checkpoint's quantization
# ignore list is matched against
_PART_NAMES = {
    "attention": ("model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.o_proj"),
    "dense MLP": ("model.layers.0.mlp.gate_proj", "model.layers.0.mlp.down_proj",
                  "model.layers.0.feed_forward.gate_proj"),
    "shared experts": ("model.layers.0.mlp.shared_experts.gate_proj", "model.layers.0.mlp.shared_expert.gate_proj",
                       "model.layers.0.feed_forward.shared_expert.gate_proj"),
    "routed experts": ("model.layers.0.mlp.experts.0.gate_proj", "model.layers.0.mlp.experts.0.down_proj",
                       "model.layers.0.block_sparse_moe.experts.0.w1",
                       "model.layers.0.feed_forward.experts.0.gate_proj",
                       "model.layers.0.feed_forward.experts.gate_up_proj"),
}
_LAYER_INDEX = re.compile(r"layers\.(\d+)\.")
# a prefix before "layers." that names another model than the language model's decoder (a vision or audio tower)
_OTHER_TOWER = ("vision", "visual", "audio", "encoder", "tower", "projector", "mm_", "speech", "image")


def _ignored_parts(q: dict[str, Any], layers: int = 0) -> set[str]:
    """The parts of a decoder layer (:data:`_PART_NAMES`) a checkpoint's quantization keeps unquantized: its
    ``ignore`` (compressed-tensors, ModelOpt), ``exclude_modules`` (ModelOpt), ``modules_to_not_convert`` (fp8) or
    ``ignored_layers`` list.  An entry ``re:<pattern>`` is a regular expression matched from the name's start (as
    compressed-tensors' ``should_ignore_layer`` reads it in vLLM 0.33,
    ``vllm/model_executor/layers/quantization/compressed_tensors/utils.py``); another names a module (and so its
    children), a ``*`` wildcard allowed (ModelOpt's ``self_attn*``): a decoder layer's module under a language
    model's prefix (``language_model.model.layers.3.self_attn*``; a vision or audio tower's layers are not the
    decoder's), else a module name (``gate``, ``lm_head``) as the name's last parts.  An entry naming one layer
    counts for that layer only: a part is kept unquantized where the entries cover more than half of the
    ``layers`` decoder layers (NVIDIA's NVFP4 releases list ``self_attn*`` layer by layer; an MTP layer's
    ``model.layers.61.*`` or a first dense layer's ``model.layers.0.mlp`` is not the model's part)."""
    from fnmatch import fnmatchcase

    entries = [str(x) for key in ("ignore", "exclude_modules", "modules_to_not_convert", "ignored_layers")
               for x in (q.get(key) or []) if isinstance(q.get(key), list)]
    found = set()
    for part, names in _PART_NAMES.items():
        every = False  # an entry for every layer
        some: set[int] = set()  # the layers entries name one by one
        for entry in entries:
            if entry.startswith("re:"):
                try:
                    hit = any(re.match(entry[3:], name) for name in names)
                except re.error:
                    hit = False
                every = every or hit
                continue
            index = _LAYER_INDEX.search(entry)
            if index is not None:
                prefix = entry[:index.start()].lower()
                if any(word in prefix for word in _OTHER_TOWER):
                    continue
                pattern = "*" + _LAYER_INDEX.sub("layers.0.", entry[index.start():], count=1)
            else:  # a module name (lm_head, gate) or a pattern over every layer (model.layers.*.self_attn*)
                pattern = "*." + entry
            if any(fnmatchcase(name, pat) or fnmatchcase(name, pat + ".*")
                   for name in names for pat in (pattern, pattern[2:] if index is None else pattern)):
                if index is None:
                    every = True
                else:
                    some.add(int(index.group(1)))
        if every or (some and len(some) * 2 > (layers or len(some))):
            found.add(part)
    return found


def _compressed_tensors_format(q: dict[str, Any]) -> tuple[str, str]:
    """The one weight format of a compressed-tensors checkpoint's ``config_groups`` (every group the same scheme,
    targeting ``Linear``), and its words; ``("", why)`` where it is not one the time model has."""
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        return "", "no config_groups"
    schemes = set()
    for group in groups.values():
        if not isinstance(group, dict) or "Linear" not in (group.get("targets") or []):
            return "", "a group that does not target every Linear layer"
        w: dict[str, Any] = group["weights"] if isinstance(group.get("weights"), dict) else {}
        a = group.get("input_activations") if isinstance(group.get("input_activations"), dict) else None
        kind, bits, size = str(w.get("type", "")), w.get("num_bits"), w.get("group_size")
        if kind == "float" and bits == 8:
            schemes.add(("fp8", "8-bit float weights"))
        elif kind == "float" and bits == 4 and size == 16:
            schemes.add(("nvfp4", "4-bit float weights in groups of 16 (NVFP4)"))
        elif kind == "int" and bits == 4 and a is None:
            schemes.add(("int4_wo", f"4-bit integer weights, group size {size}, bf16 activations (W4A16)"))
        else:
            return "", f"weights of {bits} bits ({kind or 'type not given'}) with " + (
                "activations quantized" if a else "bf16 activations")
    if len(schemes) > 1:
        return "", "groups of different schemes"
    return schemes.pop()


def _has_experts(text: dict[str, Any]) -> bool:
    return any(text.get(k) for k in ("n_routed_experts", "num_experts", "num_local_experts"))


def _has_dense_mlp_layers(text: dict[str, Any]) -> bool:
    """Whether some decoder layer has a dense MLP: a model without routed experts, or a MoE model with dense
    layers (DeepSeek's first_k_dense_replace, Qwen-MoE's mlp_only_layers / decoder_sparse_step, a moe_layer_freq
    or Llama 4's interleave_moe_layer_step above 1; MiMo-V2-Flash's moe_layer_freq is a list, a 0 per dense layer)."""
    if not _has_experts(text):
        return True
    from kvdash.core.modeltypes import moe_by_freq

    if text.get("first_k_dense_replace") or text.get("mlp_only_layers"):
        return True
    for key in ("decoder_sparse_step", "interleave_moe_layer_step"):
        v = text.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 1:
            return True
    layers = text.get("num_hidden_layers")
    n = layers if isinstance(layers, int) and not isinstance(layers, bool) and layers > 0 else 2
    return "moe_layer_freq" in text and not all(moe_by_freq(text["moe_layer_freq"], i) for i in range(n))


def _has_shared_experts(text: dict[str, Any]) -> bool:
    return _has_experts(text) and bool(text.get("n_shared_experts") or text.get("shared_expert_intermediate_size")
                                       or text.get("num_shared_experts"))


def checkpoint_formats(cfg: dict[str, Any]) -> tuple[str, str | None, str | None, str]:
    """``--weight-format auto``: the formats the checkpoint's ``quantization_config`` (config.json's, or its
    ``text_config``'s) stores its weights in, as ``(dense, routed experts, attention, words)`` (``None``: as the
    dense weights; :func:`kvdash.core.steptime.model_compute` reads the three).  vLLM 0.33 loads a checkpoint in
    the format it is stored in: ``quant_method`` ``fp8`` (DeepSeek-V3, Qwen3-*-FP8, MiniMax-M2.5: block-scaled
    fp8) is fp8; a ModelOpt checkpoint's ``quant_algo`` ``FP8`` / ``NVFP4`` is fp8 / nvfp4; a compressed-tensors
    one's ``config_groups`` scheme (8-bit float: fp8; 4-bit float in groups of 16: nvfp4; 4-bit integer weights
    with bf16 activations, W4A16: int4_wo); ``mxfp4`` (gpt-oss) keeps bf16 for all but the routed experts, which
    :func:`~kvdash.core.steptime.model_compute` reads as MXFP4 (a gpt-oss preset without its quantization_config
    too).  The modules the quantization ignores (:func:`_ignored_parts`) stay bf16: attention where NVIDIA's NVFP4
    releases list ``self_attn*``, everything but the routed experts in Kimi-K2.5's int4 release.  AWQ and GPTQ
    of 4 bits are int4 weight-only.  Another method or scheme is not read: bf16, said so (GPTQ of 8 bits, bitsandbytes
    ...).  Without a quantization_config: bf16."""
    q = cfg.get("quantization_config")
    if not q and isinstance(cfg.get("text_config"), dict):
        q = cfg["text_config"].get("quantization_config")
    method = str(q.get("quant_method", "")) if isinstance(q, dict) else ""
    if not method and cfg.get("model_type") == "gpt_oss":  # every gpt-oss release: MXFP4 experts (a preset's
        method = "mxfp4"  # config keeps no quantization_config; model_compute reads its experts as MXFP4 too)
    if not method:
        from kvdash.core.model import config_dtype

        text = cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else cfg
        dtype = served_dtype(config_dtype(cfg), str(text.get("model_type") or cfg.get("model_type") or ""))
        return dtype, None, None, f"auto: no quantization_config in config.json (the model dtype: {dtype})"
    q = q if isinstance(q, dict) else {}
    inner: dict[str, Any] = q["quantization"] if isinstance(q.get("quantization"), dict) else {}  # ModelOpt's nest
    if method == "mxfp4":
        return "bf16", None, None, ("auto: the checkpoint's quantization_config (mxfp4: the routed experts MXFP4, "
                                    "the rest bf16)")
    fmt, words = "", ""
    if method == "fp8":
        fmt, words = "fp8", "quant_method fp8"
    elif method.startswith("modelopt"):
        algo = str(inner.get("quant_algo") or q.get("quant_algo") or "").upper()
        if algo in ("FP8", "NVFP4"):
            fmt, words = algo.lower(), f"ModelOpt, quant_algo {algo}"
    elif method in ("awq", "gptq") and q.get("bits", q.get("w_bit")) == 4:
        # weight-only 4-bit integers, served by vLLM 0.33's Marlin kernels with fp16/bf16 activations; counted at
        # int4_wo's 4.5 bits a parameter (a 16-bit scale per 32), where groups of 128 store about 4.2
        size = q.get("group_size", q.get("q_group_size"))
        fmt, words = "int4_wo", f"{method.upper()}, 4-bit weights, group size {size}, counted at int4_wo's 4.5 bits"
    elif method == "compressed-tensors":
        fmt, words = _compressed_tensors_format(q)
        if not fmt:
            return "bf16", None, None, (f"auto: the checkpoint's compressed-tensors quantization_config ({words}) "
                                        "is not read by the time model, so bf16 is assumed; give --weight-format")
        words = f"compressed-tensors, {words}"
    if not fmt:
        return "bf16", None, None, (f"auto: the checkpoint's quantization_config ({method}) is not read by the time "
                                    "model, so bf16 is assumed; give --weight-format")
    text = cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else cfg
    layers = text.get("num_hidden_layers")
    kept = _ignored_parts({**q, **inner}, layers if isinstance(layers, int) and layers > 0 else 0)
    left = [part for part in _PART_NAMES if part in kept]  # as the list names them, before the model's layout
    if not _has_dense_mlp_layers(text):  # a MoE model without dense MLP layers: its shared experts decide
        kept.discard("dense MLP")
        if "shared experts" in kept:
            kept.add("dense MLP")
    elif not _has_shared_experts(text):  # the dense MLPs decide (a dense model, or MoE without shared experts)
        kept.discard("shared experts")
        if "dense MLP" in kept:
            kept.add("shared experts")
    if ("dense MLP" in kept) != ("shared experts" in kept) and "routed experts" not in kept:
        # one figure times the dense MLPs and the shared experts together: one of them quantized, not both
        return "bf16", None, None, (f"auto: the checkpoint's quantization_config ({words}) leaves the "
                                    + ("dense MLPs" if "dense MLP" in kept else "shared experts")
                                    + " unquantized but not the other, which one dense format cannot say; bf16 is "
                                    "assumed; give --weight-format")
    dense = "bf16" if "dense MLP" in kept else fmt
    experts = "bf16" if "routed experts" in kept else fmt
    attention = "bf16" if "attention" in kept else fmt
    if dense == experts == attention == "bf16":
        return "bf16", None, None, f"auto: the checkpoint's quantization_config ({words}) ignores every layer timed"
    words = f"auto: the checkpoint's quantization_config ({words})" + (
        f"; {', '.join(left)} left bf16 (its ignore list)" if left else "")
    return dense, (None if experts == dense else experts), (None if attention == dense else attention), words


def checkpoint_weight_format(cfg: dict[str, Any]) -> tuple[str, str]:
    """The dense weights' format under ``--weight-format auto`` and the words saying so
    (:func:`checkpoint_formats`, whose routed-expert and attention formats :func:`timed_compute` reads too)."""
    dense, _, _, words = checkpoint_formats(cfg)
    return dense, words


def timed_compute(cfg: dict[str, Any], arch: Architecture, tp: int, weights: str, kv_dtype: str,
                  scales: str = "tensor") -> ModelCompute:
    """The time model's per-rank figures (:func:`kvdash.core.steptime.model_compute`) over the KV cache vLLM 0.33
    stores for ``--kv-cache-dtype kv_dtype`` (:func:`stored_kv_dtype`): ``auto`` as the checkpoint declares it, a
    quantized dtype the model's attention ignores as the model dtype (:func:`model_dtype`), any spelling as its
    canonical name; so the KV bytes a step reads and the attention's FLOP rate (fp8 over an fp8 cache) follow the
    cache the pool was sized for."""
    from kvdash.core.steptime import model_compute

    kv = stored_kv_dtype(arch, kv_dtype)[0]
    if weights == "auto":  # the checkpoint's own formats: dense, routed experts, attention (checkpoint_formats)
        dense, experts, attention, _ = checkpoint_formats(cfg)
        try:
            return model_compute(cfg, arch, tp, dense, experts, kv, scales, attention_weights=attention)
        except InputError as exc:
            if exc.field != "--weight-format":
                raise
        # a model whose parameters the time model cannot count (hybrids: it reads the weight figure at 2 B a
        # parameter) takes bf16 whatever the checkpoint declares, as before auto read it (its basis says so)
        weights = "bf16"
    return model_compute(cfg, arch, tp, weights, None, kv, scales)

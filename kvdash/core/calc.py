"""One configuration in, every capacity figure out.

:func:`rank_shapes` turns an architecture, KV dtype, block size and parallelism into the pool
geometry of each pipeline stage (:class:`PoolShape`); :func:`calculate` evaluates the formulas of
:mod:`kvdash.core.formulas` on it and returns one JSON-ready dictionary whose core keys match the
tutorial's ``kv_capacity.py`` artifact.  The sweep evaluates the same formulas on polars columns
built from the same :class:`PoolShape` fields.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from decimal import ROUND_CEILING, Decimal
from typing import Any

from kvdash import __version__, defaults
from kvdash.core import formulas as f
from kvdash.core import limits
from kvdash.core import vllm as engine
from kvdash.core.dtypes import check_scale_mode, get_dtype
from kvdash.core.gpus import GPU, get_gpu
from kvdash.core.model import KINDS, Architecture, Layer
from kvdash.core.point import fdiv, group_size_problem, point_metrics, shape_inputs, workload_inputs
from kvdash.core.pool import PoolShape, check_parallel, check_positive, layer_state_bytes, layer_token_bytes
from kvdash.core.reserve import ReserveTerm, auto_reserve
from kvdash.errors import InputError
from kvdash.units import GiB, human_bytes, parse_fraction, scale_floor

DEFAULT_BUDGET = defaults.BUDGET_BYTES  # the tutorial's declared KV budget (12 GiB)
VLLM_VERSION = "0.33"  # the vLLM release whose rules kvdash mirrors
# default memory fraction per policy: vLLM 0.33's gpu_memory_utilization, TensorRT-LLM's free_gpu_memory_fraction
DEFAULT_UTIL = defaults.UTIL_BY_POLICY
TP_CANDIDATES = (1, 2, 4, 8, 16, 32, 64)


# --- pool geometry ------------------------------------------------------------------------------

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
    """
    states = arch.state_layers
    if not states:
        return requested, 0
    attn = arch.attention_layers[0] if arch.attention_layers else None
    if attn is None:
        raise InputError("model", "no attention layers", "kvdash needs at least one attention layer")
    page = max(layer_state_bytes(layer, tp) for layer in states)
    token = layer_token_bytes(attn, dtype, scales, tp)
    align = f.imax(KERNEL_BLOCK_ALIGNMENT, requested)
    if exports_checkpoints(arch, prefix_caching):
        align = math.lcm(align, GDN_CHECKPOINT_ALIGNMENT)
    block = align * f.cdiv(page, align * token)
    block = KERNEL_BLOCK_ALIGNMENT * f.cdiv(block, KERNEL_BLOCK_ALIGNMENT)
    return f.imax(requested, block), page


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
    if not kinds:
        raise InputError("model", "no attention layers", "kvdash needs at least one attention layer per stage")
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
    )


def rank_shapes(arch: Architecture, dtype: str = "bf16", scales: str = "tensor", tp: int = 1,
                pp: int = 1, block_size: int = 16, prefix_caching: bool = True) -> list[PoolShape]:
    """One :class:`PoolShape` per pipeline stage (all tensor-parallel ranks of a stage match)."""
    check_positive("--block-size", block_size)
    check_scale_mode(scales)
    get_dtype(dtype)
    check_parallel(arch, tp, pp)
    used, page = aligned_block_size(arch, dtype, scales, tp, block_size, prefix_caching)
    checkpoints = takes_prefill_checkpoint(arch, prefix_caching)
    return [shape_of([arch.layers[i] for i in r], dtype, scales, tp, used, page, prefix_caching, block_size,
                     checkpoints) for r in stage_layers(arch.num_layers, pp)]


def auto_block_size(arch: Architecture, kv_dtype: str = defaults.KV_DTYPE,
                    compute_capability: str = "") -> tuple[int, str]:
    """The block size vLLM 0.33 picks when none is given, and why: per GPU generation (the budget's GPU preset;
    Hopper when there is none) and KV dtype (:func:`kvdash.core.vllm.auto_block_size`); a hybrid's block is
    then raised to hold its state page (:func:`aligned_block_size`)."""
    generation = engine.gpu_generation(compute_capability) or "sm90"
    size, why = engine.auto_block_size(arch.use_mla, get_dtype(kv_dtype).quantized, generation)
    if compute_capability == "" and generation == "sm90":
        why += "; no CUDA GPU preset given: Hopper's choice"
    if arch.is_hybrid:
        why += "; then raised so one attention page holds a state page (vllm/platforms/interface.py, " \
               "_align_hybrid_block_size)"
    return size, why


# --- the budget --------------------------------------------------------------------------------

@dataclass(frozen=True)
class BudgetSpec:
    """Where the per-rank KV budget comes from.

    * explicit: ``bytes`` per rank.
    * ``policy="vllm"``: ``floor(total x util) - weights/rank - reserve`` (utilization of *total*
      memory, as vLLM's ``gpu_memory_utilization``; default 0.92 as in vLLM 0.33).
    * ``policy="trtllm"``: ``floor((total - weights/rank - reserve) x util)`` (TensorRT-LLM's
      ``free_gpu_memory_fraction`` of the memory *free* after loading; default 0.9).
    """

    bytes: int | None = None
    gpu: str | None = None
    gpu_memory: int | None = None
    util: str | None = None  # None: the policy's default (DEFAULT_UTIL)
    policy: str = "vllm"
    weights: int | None = None
    reserve: int = 0
    reserve_basis: str = ""  # '' = given as a size; else where --reserve auto took it from
    reserve_terms: tuple[ReserveTerm, ...] = ()


def resolve_budget(spec: BudgetSpec, arch: Architecture, tp: int, pp: int, strict: bool = True) -> dict[str, Any]:
    """Per-rank KV budget in bytes, with every term that produced it.

    With ``strict=False`` a derived budget that leaves nothing for the KV cache is returned as 0
    (``fits`` false) instead of raising, so a sweep can show that a point does not fit."""
    if spec.bytes is not None and (spec.gpu is not None or spec.gpu_memory is not None):
        raise InputError("--budget", spec.bytes, "give either --budget or --gpu/--gpu-memory, not both")
    if spec.gpu is None and spec.gpu_memory is None:
        value = DEFAULT_BUDGET if spec.bytes is None else spec.bytes
        check_positive("--budget", value)
        return {"per_rank_bytes": value, "source": "explicit" if spec.bytes is not None else "default",
                "formula": "declared KV budget per rank"}
    gpu: GPU | None = get_gpu(spec.gpu) if spec.gpu is not None else None  # '' is an unknown name
    total = spec.gpu_memory if spec.gpu_memory is not None else gpu.memory_bytes  # type: ignore[union-attr]
    check_positive("--gpu-memory", total)
    if spec.policy not in ("vllm", "trtllm"):
        raise InputError("--util-policy", spec.policy, "expected 'vllm' or 'trtllm'")
    util = parse_fraction(DEFAULT_UTIL[spec.policy] if spec.util is None else spec.util, "--gpu-util")
    if spec.weights is None and not arch.weights_known:
        raise InputError("--weights", None, f"a budget derived from the GPU needs the weight bytes of {arch.name}: "
                         "give --weights SIZE or --safetensors-index model.safetensors.index.json "
                         f"(weights {arch.weight_basis})")
    weights = arch.weight_bytes if spec.weights is None else spec.weights
    weights_basis = arch.weight_basis if spec.weights is None else "given with --weights"
    if weights < 0:
        raise InputError("--weights", weights, "must not be negative")
    if spec.reserve < 0:
        raise InputError("--reserve", spec.reserve, "must not be negative")
    ranks = tp * pp
    weights_rank = f.weights_per_rank(weights, ranks)
    if spec.policy == "vllm":
        requested = scale_floor(total, util)
        budget = requested - weights_rank - spec.reserve
        formula = "floor(total x util) - weights/rank - reserve"
    else:
        requested = total - weights_rank - spec.reserve
        budget = scale_floor(max(requested, 0), util)
        formula = "floor((total - weights/rank - reserve) x util)"
    if budget <= 0 and not strict:
        return {"per_rank_bytes": 0, "fits": False, "source": spec.policy, "formula": formula,
                "shortfall_bytes": -budget}
    if budget <= 0:
        raise no_kv_memory(spec, arch, gpu, total, util, weights, weights_basis, tp, pp, budget)
    return {
        "per_rank_bytes": budget,
        "source": spec.policy,
        "formula": formula,
        "gpu": gpu.name if gpu else "custom",
        "gpu_memory_bytes": total,
        "gpu_memory_basis": (f"{gpu.basis}: {gpu.detail}" if gpu and spec.gpu_memory is None
                             else "given with --gpu-memory"),
        "utilization": str(util),
        "requested_bytes": requested,
        "weights_bytes": weights,
        "weights_basis": weights_basis,
        "weights_per_rank_bytes": weights_rank,
        "reserve_bytes": spec.reserve,
        "reserve_basis": spec.reserve_basis or ("given with --reserve" if spec.reserve else
                                                "default 0 B: an upper bound (no activation peak, CUDA graphs "
                                                "or non-torch overhead)"),
        "reserve_terms": [t.as_dict() for t in spec.reserve_terms],
    }


def no_kv_memory(spec: BudgetSpec, arch: Architecture, gpu: GPU | None, total: int, util: Decimal, weights: int,
                 weights_basis: str, tp: int, pp: int, budget: int) -> InputError:
    """The one-line error for a GPU-derived budget that leaves no KV memory: it names the option the user
    typed (or the default the value came from) and only fixes that can work (issue 23)."""
    wr = f.weights_per_rank(weights, tp * pp)
    reserve_given = bool(spec.reserve) and not spec.reserve_basis
    field: str
    value: object
    if spec.util is not None:
        field, value = "--gpu-util", spec.util
    elif spec.weights is not None:
        field, value = "--weights", spec.weights
    elif reserve_given:
        field, value = "--reserve", f"{spec.reserve:,} B"
    else:
        field, value = ("--gpu", spec.gpu) if gpu is not None and spec.gpu_memory is None else ("--gpu-memory", total)
    default = "" if spec.util is not None else f", vLLM {VLLM_VERSION}'s default gpu_memory_utilization"
    if spec.policy == "vllm":
        how = (f"floor({total:,} x {util}{default}) - weights/rank {wr:,} - reserve {spec.reserve:,} = "
               f"{budget:,} B")
    else:
        how = f"floor(({total:,} - weights/rank {wr:,} - reserve {spec.reserve:,}) x {util}) = {budget:,} B"
    reserve_how = spec.reserve_basis.split(" (")[0] if spec.reserve_basis else "given with --reserve"
    fixes = []
    for more in TP_CANDIDATES:  # the smallest TP (same GPU, utilization, reserve) that leaves KV memory
        if more <= tp:
            continue
        try:
            check_parallel(arch, more, pp)
        except InputError:
            continue
        reserve = spec.reserve  # --reserve auto's published terms are taken again at that TP
        if spec.reserve_basis.startswith("--reserve auto: published"):
            reserve = auto_reserve(arch.model_type, more, pp, gpu=spec.gpu, layers=arch.num_layers)["bytes"]
        left = (scale_floor(total, util) if spec.policy == "vllm" else total) - f.weights_per_rank(weights, more * pp) \
            - reserve
        if left > 0:
            fixes.append(f"--tp {more} (weights/rank {f.weights_per_rank(weights, more * pp):,} B)")
            break
    if spec.policy == "vllm" and total - wr - spec.reserve > 0:
        need = (Decimal(wr + spec.reserve + 1) / Decimal(total)).quantize(Decimal("0.01"), rounding=ROUND_CEILING)
        while need <= 1 and scale_floor(total, need) - wr - spec.reserve <= 0:
            need += Decimal("0.01")
        if need <= 1:
            fixes.append(f"--gpu-util {need} or more")
    if spec.reserve and scale_floor(total, util) - wr > 0 and spec.policy == "vllm":
        fixes.append(f"--reserve under {scale_floor(total, util) - wr:,} B (now {spec.reserve:,} B: {reserve_how})")
    fixes.append(f"a GPU with more memory than {total:,} B" if not fixes else "a larger GPU")
    what = (f"the weights alone ({wr:,} B per rank: {weights_basis}) exceed the GPU's {total:,} B" if wr >= total
            else "no memory is left for the KV cache")
    return InputError(field, value, f"{what}: {how}; fix: {' or '.join(fixes)}")


# --- inputs -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class CalcInput:
    arch: Architecture
    kv_dtype: str = defaults.KV_DTYPE
    kv_scales: str = "tensor"
    block_size: int | str = defaults.BLOCK_SIZE  # tokens per block requested, or "auto" (vLLM 0.33's choice)
    budget: BudgetSpec = BudgetSpec()
    tp: int = defaults.TP
    pp: int = defaults.PP
    used: int = defaults.LENGTH
    max_reserved: int = defaults.RESERVATION
    final: int | None = None  # final length for Pow2/Oracle; default: used
    group: tuple[int, ...] | None = None
    prefix: int = 0  # tokens of a prompt prefix every request shares
    max_model_len: int | None = None  # vLLM view; default: max_reserved
    max_batched_tokens: int | None = None  # vLLM max_num_batched_tokens; None: vLLM 0.33's default for the GPU
    target: int | None = None  # planning: requests that must fit
    logged_tokens: int | None = None  # a logged "GPU KV cache size: N tokens" to check
    prefix_caching: bool = True  # vLLM 0.33's default; puts state layers in mamba_cache_mode 'align'
    max_num_seqs: int | None = None  # vLLM max_num_seqs; None: vLLM 0.33's default for the GPU
    performance_mode: str = "balanced"  # vLLM --performance-mode: 'throughput' doubles both defaults
    chunked_prefill: bool = True  # vLLM's default for generative models
    async_scheduling: bool = True  # vLLM 0.33's default: two batches in flight
    allow_long_max_model_len: bool = False  # VLLM_ALLOW_LONG_MAX_MODEL_LEN=1

    def validate(self) -> None:
        check_positive("--length", self.used)
        if self.used > self.arch.max_context:
            raise InputError("--length", self.used, f"at most the model's context length ({self.arch.max_context})")
        check_positive("--max-reserved", self.max_reserved)
        if self.used > self.max_reserved:
            raise InputError("--length", self.used,
                             f"must not exceed --max-reserved={self.max_reserved} (the reservation); "
                             f"add --max-reserved {self.used} or more, or leave --max-reserved out")
        if self.max_reserved > self.arch.max_context:
            raise InputError("--max-reserved", self.max_reserved,
                             f"at most the model's context length ({self.arch.max_context})")
        final = self.used if self.final is None else self.final
        check_positive("--final", final)
        if not self.used <= final <= self.max_reserved:
            raise InputError("--final", final,
                             f"must lie between --length={self.used} and --max-reserved={self.max_reserved}")
        if self.group is not None:
            if not self.group:
                raise InputError("--group", "", "expected comma-separated positive lengths, e.g. 200,825,1525")
            problem = group_size_problem(len(self.group))
            if problem:
                raise InputError("--group", ",".join(map(str, self.group)), problem)
            for length in self.group:
                check_positive("--group", length)
                if length > self.max_reserved:
                    raise InputError("--group", length,
                                     f"each length must not exceed --max-reserved={self.max_reserved}")
        limits.check_int("--prefix", self.prefix)
        if self.prefix and self.prefix >= self.used:
            # a request that is all shared prefix owns no block at some block size (the sensitivity rows try
            # several): capacity = budget // 0.  Issue 17's regression test pins it.
            raise InputError("--prefix", self.prefix, f"must be below --length={self.used} (a request made only of "
                             "the shared prefix owns no block of its own)")
        if self.max_model_len is not None:
            check_positive("--max-model-len", self.max_model_len)
            engine.check_max_model_len(self.max_model_len, self.arch.derived_max_len, self.allow_long_max_model_len)
        if self.max_batched_tokens is not None:
            check_positive("--max-batched-tokens", self.max_batched_tokens)
        if self.max_num_seqs is not None:
            check_positive("--max-num-seqs", self.max_num_seqs)
        if self.target is not None:
            check_positive("--target", self.target)
        if self.logged_tokens is not None:
            check_positive("--logged-tokens", self.logged_tokens)


# --- evaluation -------------------------------------------------------------------------------

def _pct(part: int, whole: int) -> float:
    return 100 * part / whole if whole else 0.0


# Figures that are capacities: with several pipeline stages the tightest stage (the minimum) decides.
CAPACITY_KEYS = (
    "kv_token_slots", "whole_pool_blocks", "block_backed_token_slots", "complete_groups",
    "contiguous_complete_groups", "paged_requests", "contiguous_requests", "pow2_requests",
    "oracle_requests", "requests_with_prefix_sharing", "vllm_num_gpu_blocks", "vllm_kv_cache_tokens",
    "vllm_max_concurrency",
)


def evaluate(inp: CalcInput, shapes: Sequence[PoolShape], budget: int, lengths: tuple[int, ...],
             finals: tuple[int, ...] | None = None) -> dict[str, Any]:
    """:func:`~kvdash.core.point.point_metrics` on every stage, combined as the engines do:
    capacities from the tightest stage, everything else from the stage that holds a request longest."""
    common = {
        "budget": budget, "max_reserved": inp.max_reserved, "prefix": inp.prefix,
        "max_model_len": inp.max_model_len or inp.max_reserved, "max_batched_tokens": inp.max_batched_tokens,
        "in_flight_tokens": engine.max_in_flight_tokens(int(inp.max_batched_tokens or 0), inp.async_scheduling, inp.pp),
        **workload_inputs(lengths, finals),
    }
    stages = [point_metrics(shape_inputs(s) | common) for s in shapes]
    out = dict(max(stages, key=lambda m: (m["paged_bytes"], m["bytes_per_token"])))
    for key in CAPACITY_KEYS:
        out[key] = min(m[key] for m in stages)
    out["bytes_per_token"] = max(m["bytes_per_token"] for m in stages)
    out["request_capacity_ratio"] = fdiv(out["paged_requests"], out["contiguous_requests"])
    return out


def paged_capacity(inp: CalcInput, shapes: Sequence[PoolShape], budget: int, n: int) -> int:
    """Requests of ``n`` tokens that fit, paged (the tightest stage decides)."""
    return int(evaluate(inp, shapes, budget, (n,))["paged_requests"])


def _core(inp: CalcInput, m: dict[str, Any]) -> dict[str, Any]:
    """The tutorial artifact's keys."""
    arch = inp.arch
    paged_slots = m["allocated_slots"]
    return {
        "architecture": {
            "name": arch.name,
            "layers": arch.num_layers,
            "kv_heads": arch.kv_heads,
            "head_dim": arch.head_dim,
            "bytes_per_element": get_dtype(inp.kv_dtype).bytes_per_element,
            "pattern": arch.pattern(),
            "layer_kinds": {kind: arch.counts[kind] for kind in KINDS if kind in arch.counts},
            "derived": list(arch.derived),
        },
        "bytes_per_token": m["bytes_per_token"],
        "kv_token_slots": m["kv_token_slots"],
        "whole_pool_blocks": m["whole_pool_blocks"],
        "block_backed_token_slots": m["block_backed_token_slots"],
        "request": {
            "used_tokens": inp.used,
            "contiguous_slots": inp.max_reserved,
            "paged_blocks": m["paged_blocks"],
            "paged_slots": paged_slots,
            "paged_unused_slots": paged_slots - inp.used,
            "paged_internal_waste_percent": _pct(paged_slots - inp.used, paged_slots),
        },
        "capacity": {
            "contiguous_requests": m["contiguous_requests"],
            "paged_requests": m["paged_requests"],
            "request_capacity_ratio": m["request_capacity_ratio"],
        },
    }


def _pool(shapes: list[PoolShape], budget: int, m: dict[str, Any]) -> dict[str, Any]:
    s = min(shapes, key=lambda sh: int(f.pool_blocks(budget, sh.block_bytes)))
    return {
        "budget_bytes": budget,
        "block_size": s.block_size,
        "block_bytes": s.block_bytes,
        "layer_token_bytes": s.layer_token_bytes,
        "group_size": s.group_size,
        "full_groups": s.full_groups,
        "window_groups": s.window_groups,
        "padded_layers": s.padded_layers,
        "window": s.window,
        "state_groups": s.state_groups,
        "state_layers": s.state_layers,
        "state_page_bytes": s.state_page_bytes,
        "state_blocks_per_request": s.state_blocks,
        "state_bytes_per_request": s.state_bytes,
        "mamba_cache_mode": s.mamba_mode or None,
        "leftover_bytes": m["leftover_bytes"],
        "leftover_tokens": m["leftover_bytes"] / s.bytes_per_token if s.bytes_per_token else 0.0,
        "stages": [asdict(sh) | {"bytes_per_token": sh.bytes_per_token, "block_bytes": sh.block_bytes,
                                 "pool_blocks": int(f.pool_blocks(budget, sh.block_bytes))}
                   for sh in shapes],
    }


def _policies(inp: CalcInput, m: dict[str, Any]) -> dict[str, Any]:
    """Per-request memory split and snapshot capacity under each allocation policy."""
    final = inp.used if inp.final is None else inp.final
    useful = m["useful_bytes"]
    rows = {
        "contiguous_max": (inp.max_reserved, m["contiguous_max_bytes"], m["contiguous_requests"]),
        "contiguous_pow2": (int(f.pow2_reservation(final, inp.max_reserved)), m["contiguous_pow2_bytes"],
                            m["pow2_requests"]),
        "contiguous_oracle": (final, m["contiguous_oracle_bytes"], m["oracle_requests"]),
    }
    out: dict[str, Any] = {}
    for name, (reserved, allocated, requests) in rows.items():
        out[name] = {
            "reserved_tokens": reserved,
            "allocated_bytes": allocated,
            "useful_bytes": useful,
            "reservation_waste_bytes": allocated - useful,
            "tail_waste_bytes": 0,
            "waste_percent": _pct(allocated - useful, allocated),
            "requests": requests,
            "paged_over_contiguous": fdiv(m["paged_requests"], requests),
        }
    out["paged"] = {
        "reserved_tokens": m["allocated_slots"],
        "allocated_bytes": m["paged_bytes"],
        "useful_bytes": useful,
        "reservation_waste_bytes": 0,
        "tail_waste_bytes": m["paged_bytes"] - useful,
        "waste_percent": _pct(m["paged_bytes"] - useful, m["paged_bytes"]),
        "requests": m["paged_requests"],
    }
    return out


def _group(g: dict[str, Any], lengths: tuple[int, ...]) -> dict[str, Any]:
    """The tutorial exercise: repeated groups of lengths packed until another whole group fails."""
    return {
        "lengths": list(lengths),
        "useful_slots": g["useful_slots"],
        "allocated_slots": g["allocated_slots"],
        "tail_waste_slots": g["tail_waste_slots"],
        "blocks_per_group": g["paged_blocks"],
        "complete_groups": g["complete_groups"],
        "pool_blocks_used": g["complete_groups"] * g["paged_blocks"],
        "contiguous_complete_groups": g["contiguous_complete_groups"],
        "offload": {
            "tokens": g["offload_tokens"],
            "useful_bytes": g["offload_useful_bytes"],
            "allocated_bytes": g["offload_allocated_bytes"],
        },
    }


def _prefix(inp: CalcInput, m: dict[str, Any]) -> dict[str, Any]:
    """Requests of ``used`` tokens sharing a ``prefix``-token prompt prefix.

    Whole prefix blocks of full-attention groups are stored once; the partly filled block that
    holds the end of the prefix is copied on write into every request.  Sliding-window groups
    are counted per request (conservative).
    """
    shared = m["prefix_shared_blocks"]
    return {
        "prefix_tokens": inp.prefix,
        "shared_blocks": shared,
        "copied_tail_tokens": inp.prefix % int(inp.block_size),
        "own_blocks_per_request": m["paged_blocks"] - shared,
        "shared_bytes": shared * m["block_bytes"],
        "requests_without_sharing": m["paged_requests"],
        "requests_with_sharing": m["requests_with_prefix_sharing"],
        "saved_bytes_at_requests_without_sharing": m["prefix_saved_bytes"],
        "saved_percent_at_requests_without_sharing": m["prefix_saved_percent"] or 0.0,
    }


def resolve_block_size(inp: CalcInput) -> tuple[int, str]:
    """The requested block size (``auto``: vLLM 0.33's choice on Hopper) and why."""
    if inp.block_size == "auto":
        return auto_block_size(inp.arch, inp.kv_dtype, budget_gpu(inp.budget)[2])
    if isinstance(inp.block_size, str):
        raise InputError("--block-size", inp.block_size, "expected a positive integer or 'auto'")
    return check_positive("--block-size", inp.block_size), f"{inp.block_size}: requested"


def _vllm_view(inp: CalcInput, shapes: list[PoolShape], m: dict[str, Any], block_reason: str = "") -> dict[str, Any]:
    """The figures vLLM 0.33 logs at start-up, for this configuration."""
    length = inp.max_model_len or inp.max_reserved
    tokens, concurrency, num_blocks = m["vllm_kv_cache_tokens"], m["vllm_max_concurrency"], m["vllm_num_gpu_blocks"]
    s = shapes[0]
    batches = engine.max_concurrent_batches(inp.async_scheduling, inp.pp)
    in_flight = engine.max_in_flight_tokens(int(inp.max_batched_tokens or 0), inp.async_scheduling, inp.pp)
    flight = (f"T = max_in_flight_tokens = {batches} batch(es) in flight x max_num_batched_tokens "
              f"{inp.max_batched_tokens:,} = {in_flight:,}; VllmConfig.max_in_flight_tokens, vllm/config/vllm.py")
    notes = [
        f"vLLM's concurrency assumes every request reaches max_model_len={length:,} tokens; "
        f"kvdash's paged figure uses the {inp.used:,} tokens a request holds now.",
        "vLLM reserves one block of the pool as its null block, so one block fewer is usable.",
        "vLLM measures its budget by profiling (weights, activation peak, CUDA graphs), so a real log "
        "can differ from a declared budget.",
    ]
    if s.window_groups and s.chunked:
        notes.append(
            f"For chunked-local layers vLLM budgets cdiv(min(C+T, L), B) blocks (C={s.window:,}, {flight}); "
            "kvdash's snapshot bound is cdiv(C-1, B)+1 during decode."
        )
    elif s.window_groups:
        notes.append(
            f"For sliding layers vLLM budgets cdiv(min(W-1+T, L), B)+1 blocks (W={s.window:,}, {flight}); "
            "kvdash's snapshot bound is cdiv(W-1, B)+1 during decode."
        )
    if s.groups > 1:
        notes.append(
            f"This model has {s.groups} KV-cache groups of {s.group_size} layers sharing one pool of "
            f"{num_blocks:,} blocks; vLLM 0.33 logs its KV cache size as int(max concurrency x max_model_len), "
            "so it is not the number of tokens one request could hold."
        )
    if s.state_groups:
        notes.append(
            f"State layers: {s.state_groups} group(s) of a fixed {s.state_page_bytes:,}-byte state per layer, "
            f"{s.state_blocks} block(s) per request in mamba_cache_mode '{s.mamba_mode}' (prefix caching "
            f"{'on' if inp.prefix_caching else 'off'})."
        )
    return {
        "version": VLLM_VERSION,
        "block_size": s.block_size,
        "block_size_reason": block_reason,
        "prefix_caching": inp.prefix_caching,
        "mamba_cache_mode": s.mamba_mode or None,
        "kv_cache_groups": s.groups,
        "max_model_len": length,
        "max_num_batched_tokens": inp.max_batched_tokens,
        "max_num_seqs": inp.max_num_seqs,
        "max_in_flight_tokens": in_flight,
        "num_gpu_blocks": num_blocks,
        "blocks_per_request_at_max_model_len": m["vllm_blocks_per_request"],
        "gpu_kv_cache_tokens": tokens,
        "max_concurrency": concurrency,
        # vllm/v1/core/kv_cache_utils.py (v0.33.0), update_kv_cache_capacity: one line
        "log_lines": [
            f"GPU KV cache size: {tokens:,} tokens, "
            f"Maximum concurrency for {length:,} tokens per request: {concurrency:.2f}x",
        ],
        "differences": notes,
    }


def _min_util(needed: int, total: int, fixed: int, policy: str) -> float | None:
    """Smallest utilization with two decimals that yields ``needed`` KV bytes."""
    if policy == "vllm":
        exact = Decimal(needed + fixed) / Decimal(total)
    else:
        free = total - fixed
        if free <= 0:
            return None
        exact = Decimal(needed) / Decimal(free)
    util = exact.quantize(Decimal("0.01"), rounding=ROUND_CEILING)
    while util <= 1:
        got = (scale_floor(total, util) - fixed) if policy == "vllm" else scale_floor(total - fixed, util)
        if got >= needed:
            return float(util)  # two decimals: exact as a JSON number
        util += Decimal("0.01")
    return None


def _planning(inp: CalcInput, shapes: list[PoolShape], budget: int, budget_info: dict[str, Any]) -> dict[str, Any]:
    """Budget, utilization and TP degree for ``target`` requests at ``used`` tokens, or, with a group,
    for ``target`` requests of the mix (whole groups: ``ceil(target / k)`` of them).  With ``--prefix`` the
    shared prefix counts: its whole blocks are stored once, so ``needed = shared bytes + groups x own bytes``
    (the inverse of ``requests_with_prefix_sharing = floor((budget - shared) / own) x k``)."""
    target = inp.target
    assert target is not None
    lengths = inp.group or (inp.used,)
    groups = f.cdiv(target, len(lengths))
    key = "requests_with_prefix_sharing" if inp.prefix else "paged_requests"

    def needs(sh: PoolShape) -> int:
        m = evaluate(inp, [sh], 1, lengths)
        if inp.prefix:
            return int(m["prefix_shared_bytes"]) + groups * int(m["prefix_own_bytes"])
        return groups * int(m["paged_bytes"])
    needed = max(needs(sh) for sh in shapes)
    plan: dict[str, Any] = {
        "target_requests": target,
        "max_num_seqs": inp.max_num_seqs,
        "runs_at_once": inp.max_num_seqs is None or target <= inp.max_num_seqs,
        "at_tokens": inp.used if inp.group is None else list(lengths),
        "prefix_tokens": inp.prefix,
        "budget_needed_per_rank_bytes": needed,
        "fits_current_budget": needed <= budget,
    }

    def fits(sh: Sequence[PoolShape], b: int) -> bool:
        return int(evaluate(inp, sh, b, lengths)[key]) >= target
    if "gpu_memory_bytes" in budget_info:
        total = budget_info["gpu_memory_bytes"]
        fixed = budget_info["weights_per_rank_bytes"] + budget_info["reserve_bytes"]
        plan["min_gpu_util"] = _min_util(needed, total, fixed, budget_info["source"])
    # minimum TP degree
    best = None
    for tp in TP_CANDIDATES:
        try:
            tp_shapes = rank_shapes(inp.arch, inp.kv_dtype, inp.kv_scales, tp, inp.pp, int(inp.block_size),
                                    inp.prefix_caching)
            tp_budget = resolve_budget(_at_tp(inp, tp), inp.arch, tp, inp.pp)["per_rank_bytes"]
        except InputError:
            continue
        if fits(tp_shapes, tp_budget):
            best = tp
            break
    plan["min_tp"] = best
    # longest uniform length the target number of requests can all reach
    lo, hi = inp.prefix, inp.arch.max_context  # a request is at least the shared prefix (shorter ones hold 0 bytes)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if int(evaluate(inp, shapes, budget, (mid,))[key]) >= target:
            lo = mid
        else:
            hi = mid - 1
    lo = lo if lo > inp.prefix else 0  # 0: not even one token past the prefix fits
    plan["longest_uniform_tokens"] = lo
    plan["longest_limited_by_context"] = lo == inp.arch.max_context
    return plan


def _at_tp(inp: CalcInput, tp: int) -> BudgetSpec:
    """The budget spec at another TP degree: ``--reserve auto``'s published terms depend on TP (non-torch
    overhead), so they are taken again; a measured (calibration) or given reserve stays as it is."""
    spec = inp.budget
    if not spec.reserve_basis.startswith("--reserve auto: published"):
        return spec
    caps = engine_caps(inp)
    est = auto_reserve(inp.arch.model_type, tp, inp.pp, caps.max_num_batched_tokens, spec.gpu,
                       layers=inp.arch.num_layers, graphs=capture_graphs(inp, caps))
    return replace(spec, reserve=est["bytes"])


def implied_budgets(inp: CalcInput, shapes: Sequence[PoolShape], tokens: int) -> tuple[int, int] | None:
    """The KV budgets per rank for which vLLM 0.33 logs exactly ``tokens`` as its GPU KV cache size (the same
    formula as :func:`_vllm_view`: ``int(num_gpu_blocks / blocks per request x max_model_len)``, monotone in the
    budget), as ``(lowest, highest)``; ``None`` when no budget gives exactly that figure."""
    def logged(b: int) -> int:
        return int(evaluate(inp, shapes, b, (inp.used,))["vllm_kv_cache_tokens"])

    def first_at_least(n: int) -> int:
        lo, hi = 0, 1
        while logged(hi) < n:
            lo, hi = hi, hi * 2
            if hi > limits.MAX_BYTES:
                return limits.MAX_BYTES + 1
        while lo < hi:  # logged(hi) >= n > logged(lo) (or lo = 0)
            mid = (lo + hi) // 2
            if logged(mid) >= n:
                hi = mid
            else:
                lo = mid + 1
        return lo
    low = first_at_least(tokens)
    if low > limits.MAX_BYTES or logged(low) != tokens:
        return None
    return low, first_at_least(tokens + 1) - 1


def log_check(inp: CalcInput, shapes: Sequence[PoolShape], budget_info: dict[str, Any],
              view: dict[str, Any]) -> dict[str, Any]:
    """What a logged ``GPU KV cache size: N tokens`` implies for this configuration (issue 23): the KV budget
    per rank it needs, the runtime reserve that budget leaves on a GPU-derived budget
    (``floor(total x util) - weights/rank - budget``), whether that reserve is possible and plausible, and
    what kvdash predicts."""
    from kvdash.core.reserve import SMALLEST_PUBLISHED_RESERVE_GIB, gib_bytes

    tokens = int(inp.logged_tokens or 0)
    predicted = int(view["gpu_kv_cache_tokens"])
    diff = 100 * (predicted - tokens) / tokens
    out: dict[str, Any] = {"logged_tokens": tokens, "max_model_len": view["max_model_len"],
                           "predicted_tokens": predicted, "predicted_difference_percent": diff}
    span = implied_budgets(inp, shapes, tokens)
    said = f"The logged {tokens:,} tokens (at max_model_len {view['max_model_len']:,})"
    pred = (f"kvdash predicts {predicted:,} tokens ({diff:+.1f}%) with "
            + ("the declared budget" if "gpu_memory_bytes" not in budget_info else reserve_text(budget_info)))
    if span is None:
        out.update(verdict="impossible", budget_range_bytes=None, reserve_range_bytes=None,
                   text=f"{said}: no KV budget gives exactly that figure for this configuration (another model, "
                        f"KV dtype, block size, --tp or --max-model-len?); {pred}.")
        return out
    lo, hi = span
    out["budget_range_bytes"] = [lo, hi]
    budget_text = f"a KV budget of {lo:,} to {hi:,} B per rank" if lo != hi else f"a KV budget of {lo:,} B per rank"
    if "gpu_memory_bytes" not in budget_info or budget_info.get("source") != "vllm":
        out.update(verdict="budget only", reserve_range_bytes=None,
                   text=f"{said} imply {budget_text} (declared here: {budget_info['per_rank_bytes']:,} B); {pred}.")
        return out
    most = budget_info["requested_bytes"] - budget_info["weights_per_rank_bytes"]  # all vLLM can give the KV cache
    r_lo, r_hi = most - hi, most - lo
    out["reserve_range_bytes"] = [r_lo, r_hi]
    smallest = gib_bytes(SMALLEST_PUBLISHED_RESERVE_GIB)
    reserve = (f"a runtime reserve of {r_lo:,} B per rank" if r_lo == r_hi else
               f"a runtime reserve of at most {r_hi:,} B per rank" if r_lo < 0 else
               f"a runtime reserve of {r_lo:,} to {r_hi:,} B per rank")
    if r_hi < 0:
        verdict = "impossible"
        why = (f"more than vLLM can have: at gpu_memory_utilization {budget_info['utilization']} it can give the KV "
               f"cache at most floor({budget_info['gpu_memory_bytes']:,} x {budget_info['utilization']}) - "
               f"{budget_info['weights_per_rank_bytes']:,} B of weights = {most:,} B per rank (another --gpu-util, "
               "--weights, --tp or GPU?)")
        reserve = (f"a negative runtime reserve ({r_lo:,} to {r_hi:,} B per rank)" if r_lo != r_hi else
                   f"a negative runtime reserve ({r_lo:,} B per rank)")
    elif r_hi < smallest:
        verdict = "implausible"
        why = (f"implausibly small: every published vLLM start-up kept at least {SMALLEST_PUBLISHED_RESERVE_GIB} GiB "
               f"({smallest:,} B) for its activation peak and non-torch memory, and vLLM 0.33 also takes CUDA graphs "
               "off (check --gpu-util, --weights, --tp, --kv-dtype)")
    else:
        verdict = "plausible"
        why = "plausible"
    out.update(verdict=verdict, text=f"{said} imply {reserve} ({budget_text}): {why}; {pred}.")
    return out


def _sensitivity(inp: CalcInput, budget: int) -> dict[str, Any]:
    arch = inp.arch
    attn = arch.first("full", "sliding")
    out: dict[str, Any] = {
        # the tutorial's two keys, on this model's layers and head_dim
        # MHA = one KV head per attention head (num_attention_heads), the same definition as the
        # "MHA" row of the variants below; bf16 (2 bytes), every attention layer
        "mha_kv_heads": arch.num_attention_heads if attn else None,
        "mha_bytes_per_token": (
            int(f.kv_bytes_per_token(len(arch.attention_layers), arch.num_attention_heads, attn.head_dim, 2))
            if attn else None
        ),
        "fp8_gqa_bytes_per_token": sum(
            layer_token_bytes(layer, "fp8", "tensor", 1) for layer in arch.attention_layers
        ),
    }
    if arch.num_attention_heads == 64:  # the tutorial's key, where its name is true (Llama-3.1-70B)
        out["mha_64_kv_heads_bytes_per_token"] = out["mha_bytes_per_token"]
    variants: list[tuple[str, CalcInput]] = [("as configured", inp)]
    dt = get_dtype(inp.kv_dtype)
    if dt.bytes_per_element != 1:
        variants.append(("kv dtype fp8 (idealized)", replace(inp, kv_dtype="fp8", kv_scales="tensor")))
    if dt.bytes_per_element != 2 and dt.name != "fp8_ds_mla":
        variants.append(("kv dtype bf16", replace(inp, kv_dtype="bf16", kv_scales="tensor")))
    block = int(inp.block_size)
    variants.append((f"block size {block * 2}", replace(inp, block_size=block * 2)))
    if block > 1:
        variants.append((f"block size {block // 2}", replace(inp, block_size=block // 2)))
    if attn and attn.kv_heads < arch.num_attention_heads:
        mha = Architecture(**{**arch.__dict__, "layers": tuple(
            replace(layer, kv_heads=arch.num_attention_heads) if layer.kind in ("full", "sliding") else layer
            for layer in arch.layers), "name": f"{arch.name} as MHA"})
        variants.append((f"MHA: {arch.num_attention_heads} KV heads", replace(inp, arch=mha)))
    rows = []
    for label, v in variants:
        try:
            shapes = rank_shapes(v.arch, v.kv_dtype, v.kv_scales, v.tp, v.pp, int(v.block_size), v.prefix_caching)
        except InputError:
            continue
        core = _core(v, evaluate(v, shapes, budget, (v.used,), (v.final or v.used,)))
        rows.append({
            "variant": label,
            "kv_dtype": get_dtype(v.kv_dtype).name,
            "block_size": v.block_size,
            "kv_heads": v.arch.kv_heads,
            "bytes_per_token": core["bytes_per_token"],
            "kv_token_slots": core["kv_token_slots"],
            "whole_pool_blocks": core["whole_pool_blocks"],
            "paged_slots": core["request"]["paged_slots"],
            "contiguous_requests": core["capacity"]["contiguous_requests"],
            "paged_requests": core["capacity"]["paged_requests"],
            "request_capacity_ratio": core["capacity"]["request_capacity_ratio"],
        })
    out["variants"] = rows
    return out


def assumptions(inp: CalcInput, budget_info: dict[str, Any], shapes: list[PoolShape]) -> list[str]:
    arch, dt = inp.arch, get_dtype(inp.kv_dtype)
    s = shapes[0]
    lines = [
        f"model: {arch.name} ({arch.source}); {arch.num_layers} layers: {arch.pattern()}; "
        f"{arch.num_attention_heads} attention heads, {arch.kv_heads} KV heads, head_dim {arch.head_dim}; "
        f"max context {arch.max_context:,} tokens"
        + "".join(f"; {line}" for line in arch.derived),
        f"KV dtype: {dt.name}, {dt.bytes_per_element} byte(s) per element; scales: "
        + ("fp32 per token per KV head for K and V" if inp.kv_scales == "token_head" else
           "per tensor (no per-token bytes)"),
        f"block size: {inp.block_size} tokens per block"
        + (f" (requested {s.requested_block_size}; raised so one attention page holds the "
           f"{s.state_page_bytes:,}-byte state page of a state layer, as vLLM 0.33 aligns hybrids)"
           if s.requested_block_size != s.block_size else ""),
        f"parallelism: tensor parallel {inp.tp}, pipeline parallel {inp.pp}; the budget is per rank and "
        "the tightest rank decides",
        f"KV budget per rank: {budget_info['per_rank_bytes']:,} bytes ({budget_info['formula']}; "
        f"source: {budget_info['source']})",
        f"request: {inp.used:,} tokens held now; contiguous reservation (Max) {inp.max_reserved:,} tokens; "
        f"final length {inp.final or inp.used:,} tokens (Pow2/Oracle)",
        "capacities are instantaneous snapshots: every request at the same length, no growth "
        "headroom, no prefix reuse unless --prefix is given",
    ]
    if dt.quantized and inp.kv_scales == "tensor" and dt.name != "fp8_ds_mla":
        lines.append(f"{dt.name} figures are idealized: scale storage, kernel alignment and accuracy "
                     "are not included and must be measured")
    if s.groups > 1:
        lines.append(f"hybrid layout: {s.groups} KV-cache groups of {s.group_size} layers share one pool "
                     f"({s.padded_layers} padded layer slots), as vLLM 0.33 groups them")
    if any(sh.state_layers for sh in shapes):
        lines.append(
            f"state layers ({s.state_layers} on the first stage) hold a fixed-size state per request, whatever "
            f"its length: {s.state_page_bytes:,} bytes per layer, padded to one {s.block_size}-token attention "
            f"page; prefix caching {'on' if inp.prefix_caching else 'off'} -> mamba_cache_mode "
            f"'{s.mamba_mode}': {s.state_blocks} block(s) per request for the {s.state_groups} state group(s)")
    if "gpu_memory_bytes" in budget_info:
        lines.append(f"GPU: {budget_info['gpu']}, {budget_info['gpu_memory_bytes']:,} bytes "
                     f"({budget_info['gpu_memory_basis']}); weights {budget_info['weights_bytes']:,} bytes "
                     f"({budget_info['weights_basis']}), {budget_info['weights_per_rank_bytes']:,} per rank; "
                     f"reserve {budget_info['reserve_bytes']:,} bytes per rank ({budget_info['reserve_basis']})")
        for t in budget_info["reserve_terms"]:
            lines.append(f"reserve term: {t['name']} {t['bytes']:,} bytes"
                         f"{' (extrapolated)' if t['extrapolated'] else ''}: {t['basis']}")
    return lines


def upper_bound_line(inp: CalcInput, budget_info: dict[str, Any]) -> str:
    """The first line of an output whose GPU-derived budget assumes a 0 B reserve: how much ``auto`` takes."""
    caps = engine_caps(inp)
    est = auto_reserve(inp.arch.model_type, inp.tp, inp.pp, caps.max_num_batched_tokens, budget_info.get("gpu"),
                       layers=inp.arch.num_layers, graphs=capture_graphs(inp, caps))
    budget_info["auto_reserve_estimate_bytes"] = est["bytes"]
    budget = budget_info["per_rank_bytes"]
    share = f", {100 * est['bytes'] / budget:.1f}% of it" if budget > 0 else ""
    return (f"UPPER BOUND: this GPU-derived budget assumes a runtime reserve of 0 B per rank; --reserve auto "
            f"would lower it by about {est['bytes']:,} bytes ({est['bytes'] / GiB:.2f} GiB{share}): "
            + ", ".join(f"{t['name']} {t['bytes']:,} B" for t in est["terms"]))


def budget_gpu(spec: BudgetSpec) -> tuple[int | None, str | None, str]:
    """The GPU a budget is derived from: (total bytes, name, compute capability); (None, None, '') for a
    declared budget."""
    if spec.gpu is None and spec.gpu_memory is None:
        return None, None, ""
    gpu = get_gpu(spec.gpu) if spec.gpu is not None else None
    total = spec.gpu_memory if spec.gpu_memory is not None else gpu.memory_bytes  # type: ignore[union-attr]
    return total, (gpu.name if gpu else None), (gpu.compute_capability if gpu else "")


def capture_graphs(inp: CalcInput, caps: engine.Caps | None = None) -> int:
    """CUDA graphs vLLM 0.33 captures under the engine's caps on the budget's GPU (the reserve's CUDA-graph
    term scales with them): :func:`kvdash.core.vllm.cudagraph_capture_sizes`."""
    caps = caps or engine_caps(inp)
    blackwell = engine.gpu_generation(budget_gpu(inp.budget)[2]) == "sm100"
    return len(engine.cudagraph_capture_sizes(caps.max_num_seqs, caps.max_num_batched_tokens, blackwell,
                                              inp.performance_mode))


def engine_caps(inp: CalcInput) -> engine.Caps:
    """``max_num_seqs`` and ``max_num_batched_tokens`` vLLM 0.33 runs this configuration with
    (:func:`kvdash.core.vllm.scheduler_caps` for the budget's GPU)."""
    total, name, _ = budget_gpu(inp.budget)
    return engine.scheduler_caps(total, name, inp.max_model_len or inp.max_reserved, inp.max_num_seqs,
                                 inp.max_batched_tokens, inp.performance_mode, inp.chunked_prefill)


def _engine(inp: CalcInput, caps: engine.Caps, paged: int) -> dict[str, Any]:
    """What vLLM 0.33 runs: its scheduler caps, the batches in flight, and the requests running at once."""
    running = min(paged, caps.max_num_seqs)
    return {
        "max_num_seqs": caps.max_num_seqs,
        "max_num_seqs_basis": caps.seqs_basis,
        "caps_basis": engine.caps_text(caps),
        "max_num_batched_tokens": caps.max_num_batched_tokens,
        "max_num_batched_tokens_basis": caps.tokens_basis,
        "performance_mode": inp.performance_mode,
        "chunked_prefill": inp.chunked_prefill,
        "async_scheduling": inp.async_scheduling,
        "max_concurrent_batches": engine.max_concurrent_batches(inp.async_scheduling, inp.pp),
        "max_in_flight_tokens": engine.max_in_flight_tokens(caps.max_num_batched_tokens, inp.async_scheduling, inp.pp),
        "requests_in_kv_cache": paged,
        "running_requests": running,
        "limited_by": "max_num_seqs" if caps.max_num_seqs < paged else "kv_cache",
    }


def caps_line(e: dict[str, Any]) -> str:
    """The assumption line of the engine caps (what vLLM runs, first after the budget)."""
    batches = e["max_concurrent_batches"]
    return (f"engine caps: vLLM {VLLM_VERSION} runs at most {e['max_num_seqs']:,} requests at once and schedules "
            f"{e['max_num_batched_tokens']:,} tokens per step ({e['caps_basis']}); {batches} "
            f"batch{'es' if batches > 1 else ''} in flight ("
            + ("async scheduling, on by default" if e["async_scheduling"] else "--no-async-scheduling")
            + f"): sliding-window and chunked layers are sized for {e['max_in_flight_tokens']:,} tokens")


def calculate(inp: CalcInput) -> dict[str, Any]:
    """Every figure for one configuration, as a JSON-ready dictionary."""
    inp.validate()
    caps = engine_caps(inp)
    inp = replace(inp, max_batched_tokens=caps.max_num_batched_tokens, max_num_seqs=caps.max_num_seqs)
    requested, block_reason = resolve_block_size(inp)
    shapes = rank_shapes(inp.arch, inp.kv_dtype, inp.kv_scales, inp.tp, inp.pp, requested, inp.prefix_caching)
    if shapes[0].block_size != requested:
        block_reason += (f"; raised from {requested} to {shapes[0].block_size} so one attention page "
                         f"({shapes[0].block_size} x {shapes[0].layer_token_bytes:,} B) holds a "
                         f"{shapes[0].state_page_bytes:,}-byte state page (vLLM 0.33 _align_hybrid_block_size)")
    inp = replace(inp, block_size=shapes[0].block_size)
    budget_info = resolve_budget(inp.budget, inp.arch, inp.tp, inp.pp)
    budget = budget_info["per_rank_bytes"]
    out: dict[str, Any] = {"summary": "", "kvdash_version": __version__}  # summary first, filled below
    out["assumptions"] = assumptions(inp, budget_info, shapes)
    if "gpu_memory_bytes" in budget_info and not inp.budget.reserve_basis and not inp.budget.reserve:
        out["assumptions"].insert(0, upper_bound_line(inp, budget_info))
        est = budget_info["auto_reserve_estimate_bytes"]  # what the default (--reserve auto) would leave
        auto_info = resolve_budget(replace(inp.budget, reserve=est), inp.arch, inp.tp, inp.pp, strict=False)
        auto_m = evaluate(inp, shapes, auto_info["per_rank_bytes"], inp.group or (inp.used,))
        budget_info["auto_reserve_requests"] = int(auto_m["paged_requests"])
    out["inputs"] = {
        "model": inp.arch.name,
        "kv_dtype": get_dtype(inp.kv_dtype).name,
        "kv_scales": inp.kv_scales,
        "block_size": inp.block_size,
        "block_size_requested": requested,
        "block_size_reason": block_reason,
        "prefix_caching": inp.prefix_caching,
        "tp": inp.tp,
        "pp": inp.pp,
        "used_tokens": inp.used,
        "max_reserved_tokens": inp.max_reserved,
        "final_tokens": inp.final or inp.used,
        "max_num_seqs": inp.max_num_seqs,
        "max_batched_tokens": inp.max_batched_tokens,
        "performance_mode": inp.performance_mode,
        "chunked_prefill": inp.chunked_prefill,
        "async_scheduling": inp.async_scheduling,
        "allow_long_max_model_len": inp.allow_long_max_model_len,
    }
    out["budget"] = budget_info
    m = evaluate(inp, shapes, budget, (inp.used,), (inp.final or inp.used,))
    out.update(_core(inp, m))
    s0 = shapes[0]
    if s0.attention_groups > 1:  # one request's blocks in each kind of KV-cache group (gpt-oss: 52 full + 9 sliding)
        local = "chunked" if s0.chunked else "sliding"
        out["request"]["paged_blocks_per_group"] = {
            kind: int(f.request_blocks(inp.used, s0.block_size, int(kind == "full"), int(kind != "full"), s0.window))
            for kind, n in (("full", s0.full_groups), (local, s0.window_groups)) if n}
    out["engine"] = _engine(inp, caps, int(m["paged_requests"]))
    out["assumptions"].insert(1 if out["assumptions"][0].startswith("UPPER BOUND") else 0, caps_line(out["engine"]))
    out["pool"] = _pool(shapes, budget, m)
    out["policies"] = _policies(inp, m)
    out["sensitivity"] = _sensitivity(inp, budget)
    if inp.group is not None:
        out["group"] = _group(evaluate(inp, shapes, budget, inp.group), inp.group)
    if inp.prefix:
        out["prefix"] = _prefix(inp, m)
    out["vllm_view"] = _vllm_view(inp, shapes, m, block_reason)
    if inp.target is not None:
        out["planning"] = _planning(inp, shapes, budget, budget_info)
    if inp.logged_tokens is not None:
        out["log_check"] = log_check(inp, shapes, budget_info, out["vllm_view"])
    out["summary"] = summary(inp, out)
    return out


def reserve_mode(budget_info: dict[str, Any]) -> str:
    """How the budget treats the runtime reserve: ``declared`` (an explicit or default budget: none taken
    off), ``calibration`` / ``published`` (``--reserve auto``), ``given`` (a size) or ``upper bound``
    (a GPU-derived budget with ``--reserve 0``)."""
    if "gpu_memory_bytes" not in budget_info:
        return "declared"
    basis = budget_info.get("reserve_basis", "")
    if basis.startswith("--reserve auto: calibration"):
        return "calibration"
    if basis.startswith("--reserve auto"):
        return "published"
    return "given" if budget_info.get("reserve_bytes") else "upper bound"


def reserve_text(budget_info: dict[str, Any]) -> str:
    """The reserve basis in a few words, for the first line of every face (calc, simulate, live, exporter).

    >>> reserve_text({"per_rank_bytes": 1, "source": "default"})
    "the tutorial's 12 GiB KV budget, declared: no runtime reserve taken off"
    """
    mode = reserve_mode(budget_info)
    if mode == "declared":
        return ("the tutorial's 12 GiB KV budget, declared" if budget_info.get("source") == "default"
                else "a declared KV budget") + ": no runtime reserve taken off"
    size = human_bytes(int(budget_info["reserve_bytes"]))
    if mode == "upper bound":
        return "UPPER BOUND: --reserve 0, no runtime reserve"
    if mode == "given":
        return f"runtime reserve {size} per rank, given with --reserve"
    extrapolated = any(t.get("extrapolated") for t in budget_info.get("reserve_terms", []))
    return (f"runtime reserve {size} per rank, --reserve auto: "
            + ("a kvdash calibrate entry" if mode == "calibration" else
               "published terms" + (", extrapolated" if extrapolated else "")))


def summary(inp: CalcInput, r: dict[str, Any]) -> str:
    """One line that answers the question asked: how many requests of this length fit, paged and contiguous
    (groups that fit with ``--group``, with and without sharing with ``--prefix``, the plan with ``--target``,
    the check of a logged figure with ``--logged-tokens``), on which reserve basis, and why."""
    cap, pool, req = r["capacity"], r["pool"], r["request"]
    bud = r["budget"]
    basis = reserve_text(bud)
    if "group" in r:
        g = r["group"]
        k = len(g["lengths"])
        lead = (f"{g['complete_groups']:,} groups of {' + '.join(f'{n:,}' for n in g['lengths'])} tokens fit paged "
                f"({g['complete_groups'] * k:,} requests), {g['contiguous_complete_groups']:,} contiguous"
                + seqs_tail(g["complete_groups"] * k, r["engine"]))
    elif "prefix" in r:
        p = r["prefix"]
        lead = (f"{p['requests_with_sharing']:,} requests of {inp.used:,} tokens fit paged sharing a "
                f"{p['prefix_tokens']:,}-token prefix, {p['requests_without_sharing']:,} without sharing, "
                f"{cap['contiguous_requests']:,} contiguous" + seqs_tail(p["requests_with_sharing"], r["engine"]))
    else:
        lead = (f"{cap['paged_requests']:,} requests of {inp.used:,} tokens fit {running_text(r['engine'])}"
                f"{cap['contiguous_requests']:,} contiguous{running_tail(r['engine'])}")
    if reserve_mode(bud) == "upper bound":
        auto = bud.get("auto_reserve_requests")
        line = ("UPPER BOUND (--reserve 0, no runtime reserve"
                + (f"; the default --reserve auto gives {auto:,}" if auto is not None else "") + f"): {lead}")
    else:
        line = f"{lead} ({basis})"
    if "planning" in r:
        p = r["planning"]
        what = (f"{p['target_requests']:,} requests of {inp.used:,} tokens" if "group" not in r else
                f"{p['target_requests']:,} requests of the group")
        if inp.prefix:
            what += f" sharing a {inp.prefix:,}-token prefix"
        plan = (f"For {what}: {p['budget_needed_per_rank_bytes']:,} B of KV per rank, "
                + ("which the budget holds" if p["fits_current_budget"] else "more than the budget holds")
                + (f"; minimum --tp {p['min_tp']}" if p["min_tp"] else "; no --tp up to 64 holds them"))
        if "min_gpu_util" in p:
            plan += (f", minimum --gpu-util {p['min_gpu_util']:.2f} at this --tp" if p["min_gpu_util"] is not None
                     else ", no --gpu-util fits them at this --tp")
        if not p["runs_at_once"]:
            plan += (f"; vLLM runs at most {p['max_num_seqs']:,} at once (max_num_seqs), so {p['target_requests']:,} "
                     f"at once need --max-num-seqs {p['target_requests']:,}")
        line = f"{plan}. {line}"
    if "log_check" in r:
        line = f"{r['log_check']['text']} {line}"
    line += (f": a KV budget of {pool['budget_bytes']:,} B ({human_bytes(pool['budget_bytes'])}) per rank "
             f"holds {r['whole_pool_blocks']:,} blocks of {pool['block_size']} tokens "
             f"({r['bytes_per_token']:,} B per token)")
    if "group" in r:
        g = r["group"]
        off = g["offload"]
        line += (f"; a group takes {g['blocks_per_group']:,} blocks, {g['useful_slots']:,} useful of "
                 f"{g['allocated_slots']:,} allocated slots ({g['tail_waste_slots']:,} in block tails); offloading "
                 f"its longest request ({off['tokens']:,} tokens) moves {off['useful_bytes']:,} B of KV "
                 f"({off['allocated_bytes']:,} B in whole blocks)")
        if inp.max_reserved > max(g["lengths"]) or inp.max_reserved > min(g["lengths"]):
            line += f"; contiguous, each request reserves --max-reserved {inp.max_reserved:,} tokens up front"
        return line + "."
    line += f"; paged, a request takes {req['paged_blocks']:,} blocks"
    per = req.get("paged_blocks_per_group")
    if per:  # several KV-cache groups: the request's blocks in each kind of group (gpt-oss-120b: 52 + 9)
        parts = []
        for kind, blocks in per.items():
            n = pool["full_groups"] if kind == "full" else pool["window_groups"]
            parts.append(f"{blocks:,} in its {kind} group" if n == 1 else
                         f"{blocks:,} in each of its {n} {kind} groups")
        line += f" ({' + '.join(parts)})"
    if pool["state_layers"]:
        line += f" plus {pool['state_bytes_per_request']:,} B of recurrent state"
    if "prefix" in r:
        p = r["prefix"]
        line += (f"; sharing, {p['shared_blocks']:,} prefix blocks are stored once and each request owns "
                 f"{p['own_blocks_per_request']:,}")
    if inp.max_reserved > inp.used:
        line += (f"; contiguous, it reserves --max-reserved {inp.max_reserved:,} tokens up front, "
                 f"{inp.max_reserved - inp.used:,} of them unused now")
    else:
        line += "; contiguous, it reserves exactly its length, so only the last block's tail differs"
    for v in r["sensitivity"]["variants"]:  # fp8 against bf16, the other way round
        if v["variant"].startswith("kv dtype"):
            line += (f"; with the KV cache in {v['kv_dtype']}, {v['paged_requests']:,} would fit paged"
                     + (" (idealized: no scales)" if "idealized" in v["variant"] else ""))
    return line + "."


def running_text(e: dict[str, Any]) -> str:
    """``'in the KV cache paged, '`` when the scheduler cap is below what fits, else ``'paged, '``."""
    return "in the KV cache paged, " if e["limited_by"] == "max_num_seqs" else "paged, "


def seqs_tail(fit: int, e: dict[str, Any]) -> str:
    """``', but vLLM runs at most M at once'`` for a count other than one request's (groups, prefix sharing)."""
    if fit <= e["max_num_seqs"]:
        return ""
    return f", but vLLM runs at most {e['max_num_seqs']:,} at once (its max_num_seqs)"


def running_tail(e: dict[str, Any]) -> str:
    """``', but vLLM runs at most M at once (max_num_seqs)'`` when the scheduler cap is below what fits."""
    if e["limited_by"] != "max_num_seqs":
        return ""
    return f", but vLLM runs at most {e['max_num_seqs']:,} at once (its max_num_seqs)"

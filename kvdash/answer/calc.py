"""One configuration in, every capacity figure out: the composition of the engine-free core with one engine's
rules (issue 26: it sits above :mod:`kvdash.engines`, so the core imports no engine).

:func:`calculate` asks the engine named by :attr:`CalcInput.engine` (:mod:`kvdash.engines.registry`) for its
caps, block size and pool geometry (:class:`~kvdash.core.pool.PoolShape` per stage), resolves the budget
(:mod:`kvdash.answer.budget`), evaluates the formulas of :mod:`kvdash.core.point` on it and returns one
JSON-ready dictionary whose core keys match the tutorial's ``kv_capacity.py`` artifact.  The sweep evaluates the
same formulas on polars columns built from the same :class:`PoolShape` fields.  The words of the answer are in
:mod:`kvdash.answer.text`; vLLM's start-up figures and log check in :mod:`kvdash.engines.vllm_view`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import Any

from kvdash import __version__
from kvdash.answer.budget import TP_CANDIDATES, BudgetSpec, _min_util, gpu_of, resolve_budget
from kvdash.answer.inputs import CalcInput, rules_of, settings_of  # noqa: F401  (CalcInput re-exported)
from kvdash.answer.text import assumptions, caps_line, summary
from kvdash.core import formulas as f
from kvdash.core import limits
from kvdash.core.arch import KINDS, Architecture
from kvdash.core.dtypes import get_dtype
from kvdash.core.point import fdiv, point_metrics, shape_inputs, workload_inputs
from kvdash.core.pool import PoolShape, layer_token_bytes
from kvdash.engines import vllm_view
from kvdash.engines.base import Caps
from kvdash.engines.vllm import HYBRID_RAISE_NOTE, max_concurrent_batches, refused_auto_block, starts, stored_kv_dtype
from kvdash.engines.vllm import RULES as VLLM
from kvdash.errors import InputError
from kvdash.units import GiB


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
        # the caps are resolved into inp before any evaluation (calculate); 0 batched tokens when none are given
        "in_flight_tokens": rules_of(inp).in_flight_tokens(
            Caps(int(inp.max_num_seqs or 0), int(inp.max_batched_tokens or 0), "", "", ""), settings_of(inp)),
        **workload_inputs(lengths, finals),
    }
    stages = [point_metrics(shape_inputs(s) | common, rules_of(inp).blocks_per_request) for s in shapes]
    out = dict(max(stages, key=lambda m: (m["paged_bytes"], m["bytes_per_token"])))
    for key in CAPACITY_KEYS:
        out[key] = min(m[key] for m in stages)
    out["bytes_per_token"] = max(m["bytes_per_token"] for m in stages)
    out["request_capacity_ratio"] = fdiv(out["paged_requests"], out["contiguous_requests"])
    return out


def check_engine_starts(inp: CalcInput, shapes: Sequence[PoolShape], budget: int) -> None:
    """The engine refuses to start when one request of ``--max-model-len`` tokens does not fit beside its null
    block (:meth:`kvdash.engines.base.EngineRules.check_one_request_fits`; vLLM 0.33:
    :func:`kvdash.engines.vllm.check_one_request_fits`); checked on every pipeline stage, as vLLM checks every
    worker, and only where ``--max-model-len`` is given (without it kvdash's vLLM figures are for
    ``--max-reserved``, not a length vLLM was given).  The length it suggests is the longest that fits (vLLM's
    ``estimate_max_model_len``: a binary search on the same blocks-per-request figure)."""
    length = int(inp.max_model_len or 0)
    for shape in shapes:
        def request(n: int, shape: PoolShape = shape) -> tuple[int, int]:
            m = evaluate(replace(inp, max_model_len=n), [shape], budget, (1,))
            return int(m["block_bytes"]), int(m["vllm_blocks_per_request"])
        block_bytes, blocks = request(length)
        if starts(budget // block_bytes, blocks):
            continue
        lo, hi, best = 1, length, 0
        while lo <= hi:
            mid = (lo + hi) // 2
            if starts(budget // block_bytes, request(mid)[1]):
                best, lo = mid, mid + 1
            else:
                hi = mid - 1
        rules_of(inp).check_one_request_fits(budget, block_bytes, blocks, length, best, "--max-model-len")


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
            # the cache as stored (auto: the checkpoint's declared fp8, as bytes_per_token counts it)
            "bytes_per_element": get_dtype(stored_kv_dtype(arch, inp.kv_dtype)[0]).bytes_per_element,
            "pattern": arch.pattern(),
            "layer_kinds": {kind: arch.counts[kind] for kind in KINDS if kind in arch.counts},
            # sparse MLA (DeepSeek-V3.2, GLM-5): each layer's indexer key cache beside its latent, whatever the KV
            # dtype (fp8 keys + an fp32 scale per 128: 132 B); 0 elsewhere
            "index_bytes_per_token_per_layer": max((layer.index_bytes for layer in arch.layers), default=0),
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
    """The requested block size (``auto``: the engine's choice for the budget's GPU, Hopper without one) and why
    (:meth:`kvdash.engines.base.EngineRules.block_size`)."""
    return rules_of(inp).block_size(inp.arch, inp.kv_dtype, inp.block_size, gpu_of(inp.budget))


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
            tp_shapes = rules_of(inp).pool(inp.arch, inp.kv_dtype, inp.kv_scales, tp, inp.pp, int(inp.block_size),
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
    est = rules_of(inp).auto_reserve(inp.arch, tp, inp.pp, caps, gpu_of(spec, spec.gpu), settings_of(inp))
    return replace(spec, reserve=est["bytes"])


def implied_budgets(inp: CalcInput, shapes: Sequence[PoolShape], tokens: int) -> tuple[int, int] | None:
    """The KV budgets per rank for which vLLM 0.33 logs exactly ``tokens`` as its GPU KV cache size (the same
    formula as :func:`kvdash.engines.vllm_view.startup_view`: ``int(num_gpu_blocks / blocks per request x
    max_model_len)``, monotone in the budget), as ``(lowest, highest)``; ``None`` when no budget gives exactly
    that figure."""
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
    """What a logged ``GPU KV cache size: N tokens`` (``--logged-tokens``) implies for this configuration:
    :func:`kvdash.engines.vllm_view.log_check` on the budgets :func:`implied_budgets` finds."""
    from kvdash.answer.text import reserve_text

    tokens = int(inp.logged_tokens or 0)
    return vllm_view.log_check(tokens, view, implied_budgets(inp, shapes, tokens), budget_info,
                               reserve_text(budget_info))


def _sensitivity(inp: CalcInput, budget: int, block_auto: bool = False) -> dict[str, Any]:
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
    # what the cache is stored in (vLLM's --kv-cache-dtype auto may be a checkpoint's declared fp8)
    auto = inp.kv_dtype.lower() == "auto"
    dt = get_dtype(stored_kv_dtype(arch, inp.kv_dtype)[0] if auto else inp.kv_dtype)
    def in_dtype(kv_dtype: str) -> CalcInput:
        """The configuration with another KV dtype; a block size left to the engine (``block_auto``) is the
        engine's choice for that dtype (vLLM 0.33 on Hopper: 64 for MLA in fp8, 16 in bf16)."""
        v = replace(inp, kv_dtype=kv_dtype, kv_scales="tensor")
        if block_auto:
            try:
                v = replace(v, block_size=resolve_block_size(replace(v, block_size="auto"))[0])
            except InputError:
                pass
        return v
    if dt.bytes_per_element != 1:
        variants.append(("kv dtype fp8 (idealized)", in_dtype("fp8")))
    if dt.bytes_per_element != 2 and dt.name != "fp8_ds_mla":
        variants.append(("kv dtype bf16", in_dtype("bf16")))
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
            shapes = rules_of(v).pool(v.arch, v.kv_dtype, v.kv_scales, v.tp, v.pp, int(v.block_size), v.prefix_caching)
        except InputError:
            continue
        core = _core(v, evaluate(v, shapes, budget, (v.used,), (v.final or v.used,)))
        rows.append({
            "variant": label,
            "kv_dtype": get_dtype(stored_kv_dtype(v.arch, v.kv_dtype)[0]).name,  # as stored
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


def upper_bound_line(inp: CalcInput, budget_info: dict[str, Any]) -> str:
    """The first line of an output whose GPU-derived budget assumes a 0 B reserve: how much ``auto`` takes."""
    caps = engine_caps(inp)
    est = rules_of(inp).auto_reserve(inp.arch, inp.tp, inp.pp, caps, gpu_of(inp.budget, budget_info.get("gpu")),
                                     settings_of(inp))
    budget_info["auto_reserve_estimate_bytes"] = est["bytes"]
    budget = budget_info["per_rank_bytes"]
    share = f", {100 * est['bytes'] / budget:.1f}% of it" if budget > 0 else ""
    return (f"UPPER BOUND: this GPU-derived budget assumes a runtime reserve of 0 B per rank; --reserve auto "
            f"would lower it by about {est['bytes']:,} bytes ({est['bytes'] / GiB:.2f} GiB{share}): "
            + ", ".join(f"{t['name']} {t['bytes']:,} B" for t in est["terms"]))


def capture_graphs(inp: CalcInput, caps: Caps | None = None) -> int:
    """CUDA graphs vLLM 0.33 captures under the engine's caps on the budget's GPU (the reserve's CUDA-graph
    term scales with them; a calibration's reserve is vLLM's): :meth:`kvdash.engines.vllm.VllmRules.capture_graphs`."""
    return VLLM.capture_graphs(caps or engine_caps(inp), gpu_of(inp.budget), settings_of(inp))


def engine_caps(inp: CalcInput) -> Caps:
    """``max_num_seqs`` and ``max_num_batched_tokens`` the engine runs this configuration with, on the budget's GPU
    (:meth:`kvdash.engines.base.EngineRules.caps`; vLLM 0.33: :func:`kvdash.engines.vllm.scheduler_caps`)."""
    return rules_of(inp).caps(gpu_of(inp.budget), settings_of(inp))


def _engine(inp: CalcInput, caps: Caps, paged: int) -> dict[str, Any]:
    """What vLLM 0.33 runs: its scheduler caps, the batches in flight, and the requests running at once."""
    running = min(paged, caps.max_num_seqs)
    return {
        "max_num_seqs": caps.max_num_seqs,
        "max_num_seqs_basis": caps.seqs_basis,
        "caps_basis": rules_of(inp).caps_text(caps),
        "max_num_batched_tokens": caps.max_num_batched_tokens,
        "max_num_batched_tokens_basis": caps.tokens_basis,
        "performance_mode": inp.performance_mode,
        "chunked_prefill": inp.chunked_prefill,
        "async_scheduling": inp.async_scheduling,
        "max_concurrent_batches": max_concurrent_batches(inp.async_scheduling, inp.pp),
        "max_in_flight_tokens": rules_of(inp).in_flight_tokens(caps, settings_of(inp)),
        "requests_in_kv_cache": paged,
        "running_requests": running,
        "limited_by": "max_num_seqs" if caps.max_num_seqs < paged else "kv_cache",
    }


def calculate(inp: CalcInput) -> dict[str, Any]:
    """Every figure for one configuration, as a JSON-ready dictionary."""
    inp.validate()
    caps = engine_caps(inp)
    inp = replace(inp, max_batched_tokens=caps.max_num_batched_tokens, max_num_seqs=caps.max_num_seqs)
    block_auto = inp.block_size == "auto"  # the engine's choice (the default): the dtype variants re-resolve it
    requested, block_reason = resolve_block_size(inp)
    try:
        shapes = rules_of(inp).pool(inp.arch, inp.kv_dtype, inp.kv_scales, inp.tp, inp.pp, requested,
                                    inp.prefix_caching)
    except InputError as exc:
        raise refused_auto_block(exc, block_auto) from None
    if shapes[0].block_size != requested:  # the figures of the raise replace auto's general note of it
        block_reason = block_reason.replace(HYBRID_RAISE_NOTE, "") + (
            f"; raised from {requested} to {shapes[0].block_size} so one attention page "
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
        "kv_dtype": "auto" if inp.kv_dtype.lower() == "auto" else get_dtype(inp.kv_dtype).name,  # as asked
        "kv_dtype_stored": get_dtype(stored_kv_dtype(inp.arch, inp.kv_dtype)[0]).name,  # what the cache holds
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
    if inp.max_model_len and inp.target is None and inp.logged_tokens is None:  # those ask about other budgets
        check_engine_starts(inp, shapes, budget)
    m = evaluate(inp, shapes, budget, (inp.used,), (inp.final or inp.used,))
    out.update(_core(inp, m))
    s0 = shapes[0]
    if s0.attention_groups > 1:  # one request's blocks in each kind of KV-cache group (gpt-oss: 52 full + 9 sliding)
        local = "chunked" if s0.chunked else "sliding"
        out["request"]["paged_blocks_per_group"] = {
            kind: int(f.request_blocks(inp.used, s0.block_size, int(kind == "full"), int(kind != "full"), s0.window,
                                       s0.full_ratio, s0.window_ratio))
            for kind, n in (("full", s0.full_groups), (local, s0.window_groups)) if n}
    out["engine"] = _engine(inp, caps, int(m["paged_requests"]))
    first = 1 if out["assumptions"][0].startswith("UPPER BOUND") else 0
    out["assumptions"].insert(first, caps_line(out["engine"], rules_of(inp).label))
    out["pool"] = _pool(shapes, budget, m)
    out["policies"] = _policies(inp, m)
    out["sensitivity"] = _sensitivity(inp, budget, block_auto)
    if inp.group is not None:
        out["group"] = _group(evaluate(inp, shapes, budget, inp.group), inp.group)
    if inp.prefix:
        out["prefix"] = _prefix(inp, m)
    out["vllm_view"] = vllm_view.startup_view(shapes[0], m, inp.max_model_len or inp.max_reserved, inp.used, caps,
                                              settings_of(inp), block_reason)
    if inp.target is not None:
        out["planning"] = _planning(inp, shapes, budget, budget_info)
    if inp.logged_tokens is not None:
        out["log_check"] = log_check(inp, shapes, budget_info, out["vllm_view"])
    out["summary"] = summary(inp, out)
    return out

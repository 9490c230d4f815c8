"""What vLLM 0.33.0 logs at start-up about its KV cache, for one configuration, and what a logged figure implies.

``update_kv_cache_capacity`` (``vllm/v1/core/kv_cache_utils.py``, v0.33.0) logs ``GPU KV cache size: N tokens``
as ``int(max concurrency x max_model_len)``, with ``max concurrency = num_gpu_blocks / blocks per request at
max_model_len`` (:meth:`kvdash.engines.vllm.VllmRules.blocks_per_request`).  :func:`startup_view` gives those
figures and how they differ from kvdash's; :func:`log_check` reads a logged figure back into the KV budget and
runtime reserve it implies, and says whether that reserve is possible and plausible.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvdash.core.pool import PoolShape
from kvdash.engines.base import Caps, Settings
from kvdash.engines.vllm import RULES, VERSION, max_concurrent_batches
from kvdash.engines.vllm_reserve import SMALLEST_PUBLISHED_RESERVE_GIB, gib_bytes


def startup_view(shape: PoolShape, m: Mapping[str, Any], length: int, used: int, caps: Caps, settings: Settings,
                 block_reason: str = "") -> dict[str, Any]:
    """The figures vLLM 0.33 logs at start-up for a pool of ``shape`` (the first stage) whose point figures are
    ``m`` (:func:`kvdash.core.point.point_metrics`), at ``max_model_len`` ``length`` with requests holding
    ``used`` tokens now, under ``caps``, and how they differ from kvdash's."""
    tokens, concurrency, num_blocks = m["vllm_kv_cache_tokens"], m["vllm_max_concurrency"], m["vllm_num_gpu_blocks"]
    s = shape
    batches = max_concurrent_batches(settings.async_scheduling, settings.pp)
    in_flight = RULES.in_flight_tokens(caps, settings)
    flight = (f"T = max_in_flight_tokens = {batches} batch(es) in flight x max_num_batched_tokens "
              f"{caps.max_num_batched_tokens:,} = {in_flight:,}; VllmConfig.max_in_flight_tokens, vllm/config/vllm.py")
    notes = [
        f"vLLM's concurrency assumes every request reaches max_model_len={length:,} tokens; "
        f"kvdash's paged figure uses the {used:,} tokens a request holds now.",
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
            f"{'on' if settings.prefix_caching else 'off'})."
        )
    return {
        "version": VERSION,
        "block_size": s.block_size,
        "block_size_reason": block_reason,
        "prefix_caching": settings.prefix_caching,
        "mamba_cache_mode": s.mamba_mode or None,
        "kv_cache_groups": s.groups,
        "max_model_len": length,
        "max_num_batched_tokens": caps.max_num_batched_tokens,
        "max_num_seqs": caps.max_num_seqs,
        "max_in_flight_tokens": in_flight,
        "num_gpu_blocks": num_blocks,
        "blocks_per_request_at_max_model_len": m["vllm_blocks_per_request"],
        "gpu_kv_cache_tokens": tokens,
        "max_concurrency": concurrency,
        "log_lines": [RULES.startup_line(tokens, length, concurrency)],
        "differences": notes,
    }


def log_check(tokens: int, view: Mapping[str, Any], span: tuple[int, int] | None, budget_info: Mapping[str, Any],
              basis: str) -> dict[str, Any]:
    """What a logged ``GPU KV cache size: N tokens`` implies for this configuration (issue 23): the KV budget
    per rank it needs, the runtime reserve that budget leaves on a GPU-derived budget
    (``floor(total x util) - weights/rank - budget``), whether that reserve is possible and plausible, and
    what kvdash predicts.

    ``view``: :func:`startup_view`'s figures; ``span``: the KV budgets per rank that log exactly ``tokens``
    (``(lowest, highest)``, ``None`` when none does); ``budget_info``: the budget's terms
    (:func:`kvdash.answer.budget.resolve_budget`); ``basis``: the reserve basis in words, for the prediction."""
    predicted = int(view["gpu_kv_cache_tokens"])
    diff = 100 * (predicted - tokens) / tokens
    out: dict[str, Any] = {"logged_tokens": tokens, "max_model_len": view["max_model_len"],
                           "predicted_tokens": predicted, "predicted_difference_percent": diff}
    said = f"The logged {tokens:,} tokens (at max_model_len {view['max_model_len']:,})"
    pred = (f"kvdash predicts {predicted:,} tokens ({diff:+.1f}%) with "
            + ("the declared budget" if "gpu_memory_bytes" not in budget_info else basis))
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

"""Every per-point figure as one arithmetic function: the single definition behind ``kvdash calc``
and ``kvdash sweep``.

:func:`point_metrics` takes a mapping of inputs -- Python ``int`` values for one configuration, or
polars column expressions for a whole grid -- and returns a dictionary of outputs built only from
:mod:`kvdash.core.formulas`.  A workload is a group of up to :data:`MAX_LENGTHS` request lengths
``l0..l7`` (0 = unused); a single snapshot request is a group of one.

Inputs (all integers):

=====================  ==================================================================
``block_size``         tokens per block ``B``
``layer_token_bytes``  bytes of one token in one layer (padded to the largest kind)
``group_size``         layers per KV-cache group
``full_groups``        groups keeping every token (full attention, MLA)
``window_groups``      sliding-window groups
``window``             sliding window in tokens (0: none)
``full_token_bytes``   per-token bytes summed over full/MLA layers
``window_token_bytes`` per-token bytes summed over sliding layers
``state_bytes``        fixed recurrent state per request (pool bytes: ``state_blocks`` blocks)
``state_blocks``       pool blocks the state groups hold per request (vLLM 0.33: 1 or 2 per group)
``chunked``            1 when the window groups are chunked-local attention (Llama 4), else 0
``full_ratio``         tokens per full-group block in units of ``B`` (page ratio; 1 unless pages differ)
``window_ratio``       the same for the window groups
``budget``             KV budget of the rank in bytes
``l0``..``l7``         tokens each request of the group holds now (0: no request)
``f0``..``f7``         final length of each request, for Pow2 and Oracle (0: no request)
``k``                  number of requests in the group
``max_reserved``       tokens a contiguous Max allocator reserves per request
``prefix``             tokens of a prompt prefix all requests share (0: none)
``max_model_len``      vLLM's max_model_len for its start-up figures
``max_batched_tokens`` vLLM's max_num_batched_tokens
``in_flight_tokens``   vLLM's max_in_flight_tokens: max_concurrent_batches x max_num_batched_tokens
=====================  ==================================================================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kvdash.core import formulas as f

MAX_LENGTHS = 8
INPUTS = (
    "block_size", "layer_token_bytes", "group_size", "full_groups", "window_groups", "window",
    "full_token_bytes", "window_token_bytes", "state_bytes", "state_blocks", "chunked", "full_ratio",
    "window_ratio", "fixed_block_bytes", "budget", "k",
    "max_reserved", "prefix",
    "max_model_len", "max_batched_tokens", "in_flight_tokens",
    *(f"l{i}" for i in range(MAX_LENGTHS)), *(f"f{i}" for i in range(MAX_LENGTHS)),
)


def fdiv(a: Any, b: Any) -> Any:
    """``a / b`` as a float; ``None`` for a zero integer divisor (columns give inf, mapped to null)."""
    if isinstance(b, int):
        return a / b if b else None
    return a / b


def _token_bytes(n: Any, x: Mapping[str, Any]) -> Any:
    """Bytes of token state for ``n`` tokens held without any block rounding (no state)."""
    return x["full_token_bytes"] * n + x["window_token_bytes"] * f.imin(n, x["window"])


# an engine's blocks per request at max_model_len over these inputs (kvdash.engines.base.EngineRules
# .blocks_per_request): ints for one configuration, polars expressions for a grid
BlocksRule = Callable[[Mapping[str, Any]], Any]


def request_metrics(x: Mapping[str, Any], per_request: BlocksRule | None = None) -> dict[str, Any]:
    """Figures of one request group that do not depend on the budget.  With an engine's ``per_request`` rule
    (vLLM 0.33's: :meth:`kvdash.engines.vllm.VllmRules.blocks_per_request`) also the blocks the engine budgets
    per request at ``max_model_len`` (``vllm_blocks_per_request``), from which :func:`capacity_metrics` gives its
    max concurrency and logged KV-cache size; the core holds no engine's rule of its own."""
    B, k = x["block_size"], x["k"]
    fg, wg, window, state = x["full_groups"], x["window_groups"], x["window"], x["state_bytes"]
    # a grid passes only as many lengths as its largest group; missing ones are absent, not 0
    lengths = [x[f"l{i}"] for i in range(MAX_LENGTHS) if f"l{i}" in x]
    finals = [x[f"f{i}"] for i in range(MAX_LENGTHS) if f"f{i}" in x]

    bb = f.block_bytes(B, x["layer_token_bytes"], x["group_size"]) + x.get("fixed_block_bytes", 0)

    fr, wr = x.get("full_ratio", 1), x.get("window_ratio", 1)

    def blocks(n: Any) -> Any:
        return f.request_blocks(n, B, fg, wg, window, fr, wr)

    group_blocks = sum(blocks(n) for n in lengths)
    group_bytes = group_blocks * bb + k * state
    useful_slots = sum(lengths)
    allocated_slots = sum(f.cdiv(n, B) * B for n in lengths)
    useful_bytes = sum(_token_bytes(n, x) for n in lengths) + k * state
    max_bytes = k * f.contiguous_request_bytes(x["max_reserved"], x["full_token_bytes"],
                                               x["window_token_bytes"], window, state)
    pow2_res = [f.pow2_reservation(n, x["max_reserved"]) * (n > 0) for n in finals]
    longest = lengths[0]
    for n in lengths[1:]:
        longest = f.imax(longest, n)
    prefix_blocks = fg * (x["prefix"] // B)
    out = {
        "bytes_per_token": x["full_token_bytes"] + x["window_token_bytes"],
        "block_bytes": bb,
        "kv_groups": fg + wg,
        "paged_blocks": group_blocks,
        "useful_slots": useful_slots,
        "allocated_slots": allocated_slots,
        "tail_waste_slots": allocated_slots - useful_slots,
        "paged_internal_waste_percent": fdiv(100 * (allocated_slots - useful_slots), allocated_slots),
        "useful_bytes": useful_bytes,
        "paged_bytes": group_bytes,
        "contiguous_max_bytes": max_bytes,
        "contiguous_pow2_bytes": sum(_token_bytes(r, x) for r in pow2_res) + k * state,
        "contiguous_oracle_bytes": sum(_token_bytes(n, x) for n in finals) + k * state,
        "paged_waste_percent": fdiv(100 * (group_bytes - useful_bytes), group_bytes),
        "reservation_waste_percent": fdiv(100 * (max_bytes - useful_bytes), max_bytes),
        "offload_tokens": longest,
        "offload_useful_bytes": _token_bytes(longest, x) + state,
        "offload_allocated_bytes": blocks(longest) * bb + state,
        "prefix_shared_blocks": prefix_blocks,
        "prefix_shared_bytes": prefix_blocks * bb,
        "prefix_own_bytes": (group_blocks - k * prefix_blocks) * bb + k * state,
    }
    if per_request is not None:
        out["vllm_blocks_per_request"] = per_request(x)
        out["vllm_max_model_len"] = x["max_model_len"]
    return out


def capacity_metrics(budget: Any, k: Any, block_size: Any, r: Mapping[str, Any]) -> dict[str, Any]:
    """Figures that divide the budget, from the request figures ``r`` of :func:`request_metrics`."""
    pool = f.pool_blocks(budget, r["block_bytes"])
    complete = f.capacity(budget, r["paged_bytes"])
    paged = complete * k
    contiguous = f.capacity(budget, r["contiguous_max_bytes"]) * k
    shared = r["prefix_shared_bytes"]
    saved = f.imax(paged - 1, 0) * shared
    tokens = pool // f.imax(r["kv_groups"], 1) * block_size  # an attention-free pool has no attention group
    out = {
        "kv_token_slots": f.token_slots(budget, f.imax(r["bytes_per_token"], 1)),  # 0 B/token: attention-free
        "whole_pool_blocks": pool,
        "block_backed_token_slots": tokens,
        "leftover_bytes": budget - pool * r["block_bytes"],
        "complete_groups": complete,
        "contiguous_complete_groups": f.capacity(budget, r["contiguous_max_bytes"]),
        "paged_requests": paged,
        "contiguous_requests": contiguous,
        "pow2_requests": f.capacity(budget, r["contiguous_pow2_bytes"]) * k,
        "oracle_requests": f.capacity(budget, r["contiguous_oracle_bytes"]) * k,
        "request_capacity_ratio": fdiv(paged, contiguous),
        "requests_with_prefix_sharing": f.capacity(f.imax(budget - shared, 0), r["prefix_own_bytes"]) * k,
        "prefix_saved_bytes": saved,
        "prefix_saved_percent": fdiv(100 * saved, complete * r["paged_bytes"]),
        "vllm_num_gpu_blocks": pool,
    }
    if "vllm_blocks_per_request" in r:  # the engine's figures (request_metrics with its per_request rule)
        concurrency = fdiv(pool, r["vllm_blocks_per_request"])
        # vLLM 0.33 get_kv_cache_capacity: int(max_concurrency x max_model_len)
        out["vllm_kv_cache_tokens"] = f.trunc(concurrency * r["vllm_max_model_len"])
        out["vllm_max_concurrency"] = concurrency
    return out


def point_metrics(x: Mapping[str, Any], per_request: BlocksRule | None = None) -> dict[str, Any]:
    """All capacity figures of one point (or one column of points); ``per_request``: the engine's blocks per
    request at ``max_model_len`` (:func:`request_metrics`)."""
    r = request_metrics(x, per_request)
    return r | capacity_metrics(x["budget"], x["k"], x["block_size"], r)


def shape_inputs(shape: Any) -> dict[str, int]:
    """The :func:`point_metrics` inputs that come from a :class:`~kvdash.core.pool.PoolShape`."""
    return {
        "block_size": shape.block_size,
        "layer_token_bytes": shape.layer_token_bytes,
        "group_size": shape.group_size,
        "full_groups": shape.full_groups,
        "window_groups": shape.window_groups,
        "window": shape.window,
        "full_token_bytes": shape.full_token_bytes,
        "window_token_bytes": shape.window_token_bytes,
        "state_bytes": shape.state_bytes,
        "state_blocks": shape.state_blocks,
        "chunked": shape.chunked,
        "full_ratio": shape.full_ratio,
        "window_ratio": shape.window_ratio,
        "fixed_block_bytes": shape.fixed_block_bytes,
    }


def group_size_problem(count: int) -> str | None:
    """Why a group of ``count`` request lengths cannot be evaluated, or ``None`` when it can.

    The one place the :data:`MAX_LENGTHS` limit is stated: ``kvdash calc --group``, grid workloads and
    :func:`workload_inputs` all ask here, so no caller can drop lengths past the limit.

    >>> group_size_problem(8) is None, group_size_problem(9)
    (True, 'at most 8 lengths per group (got 9)')
    """
    if count > MAX_LENGTHS:
        return f"at most {MAX_LENGTHS} lengths per group (got {count})"
    return None


def workload_inputs(lengths: tuple[int, ...], finals: tuple[int, ...] | None = None) -> dict[str, int]:
    """``l0..``, ``f0..`` and ``k`` for a group of request lengths (at most :data:`MAX_LENGTHS`)."""
    problem = group_size_problem(len(lengths))
    if problem:
        raise ValueError(problem)  # callers validate first; this guards against silent truncation
    finals = finals or lengths
    out = {"k": len(lengths)}
    for i, (n, fin) in enumerate(zip(lengths, finals, strict=True)):
        out[f"l{i}"] = n
        out[f"f{i}"] = fin
    return out

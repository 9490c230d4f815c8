"""``grid: engine: [vllm, sglang]``: the engine as a grid dimension -- each point is one engine's plan.

Every other dimension is expanded and evaluated under vLLM 0.33's rules first (:mod:`kvdash.sweep.evaluate`);
``engine`` then gives one row per engine and point, adjacent, in the grid's written order, with an ``engine``
column.  A ``vllm`` row is that point unchanged (same id).  An ``sglang`` row is the same model, workload, GPU,
TP and KV dtype planned by SGLang 0.5.23's rules (:func:`kvdash.engines.sglang.view`, checked against SGLang's
own code in ``conformance/sglang``):

* ``budget_bytes``: ``_profile_available_bytes`` (``mem_cache/kv_cache_configurator.py``), with
  ``mem_fraction_static`` (``arg_groups/memory_hook.py``) in ``gpu_util`` and ``util_policy`` ``sglang``;
* ``bytes_per_token``: its cell size (``model_executor/pool_configurator.py``), ``block_size`` its page size
  (1 on CUDA unless the grid gives ``block_size``, then that as ``--page-size``), ``state_bytes`` 0;
* the request figures: its pool is ``max_total_num_tokens`` token slots, so a request holds its length rounded
  up to the page (:func:`kvdash.core.point.point_metrics` in token units: one slot per token);
* hybrid-SWA models (``is_hybrid_swa_model``): the full pool holds every token, the SWA pool (0.8 x) at most
  ``2 x sliding window`` per request -- ``ScheduleBatch.maybe_evict_swa`` (``managers/schedule_batch.py``)
  frees the slots outside the window once every window of decode steps, so kvdash counts the upper bound --
  and requests fit where both pools hold them;
* ``max_num_seqs``: ``max_running_requests`` (``resolve_max_num_reqs``), ``running_requests`` the smaller of it
  and what fits; ``max_model_len`` its ``context_len``; ``max_batched_tokens`` its ``chunked_prefill_size``;
* ``vllm_kv_cache_tokens`` / ``vllm_max_concurrency`` empty (vLLM's start-up figures).

A point SGLang refuses (the weights leave no memory), or that kvdash does not mirror for SGLang, has no sglang
row; ``Expanded.engine_refusals`` names each with the one-line reason (the report's "Engines compared")."""

from __future__ import annotations

import hashlib
from typing import Any

import polars as pl

from kvdash.core import formulas as f
from kvdash.core.gpus import gpu_presets
from kvdash.core.point import point_metrics, workload_inputs
from kvdash.errors import InputError
from kvdash.sweep.columns import GPUS_PER_NODE, RESULT_COLUMNS
from kvdash.sweep.gridfile import GridSpec

ENGINES = ("vllm", "sglang")
LONG_CONTEXT = 131_072  # kv_128k_over_weights: one request of this many tokens (as kvdash.sweep.evaluate)
SGLANG_UTIL_POLICY = "sglang"  # util_policy of an sglang row: mem_fraction_static of the free memory

# the columns an sglang row takes from SGLang's plan; every other result column is the point's parameter
PLAN_COLUMNS = (
    "block_size", "gpu_util", "util_policy", "budget_bytes", "fits", "max_model_len", "max_batched_tokens",
    "bytes_per_token", "block_bytes", "state_bytes", "kv_token_slots", "whole_pool_blocks",
    "block_backed_token_slots", "paged_blocks", "useful_slots", "allocated_slots", "tail_waste_slots",
    "paged_internal_waste_percent", "useful_bytes", "paged_bytes", "contiguous_max_bytes", "paged_waste_percent",
    "reservation_waste_percent", "complete_groups", "contiguous_complete_groups", "paged_requests",
    "paged_requests_per_gpu", "paged_requests_per_node", "max_num_seqs", "running_requests",
    "running_requests_per_gpu", "contiguous_requests", "pow2_requests", "oracle_requests", "request_capacity_ratio",
    "offload_tokens", "offload_useful_bytes", "offload_allocated_bytes", "requests_with_prefix_sharing",
    "prefix_saved_percent", "vllm_kv_cache_tokens", "vllm_max_concurrency", "kv_128k_over_weights",
    "engine_kv_cache_tokens", "engine_swa_tokens")


def engine_columns(spec: GridSpec) -> list[tuple[str, str, str]]:
    """(name, kind, meaning) of the columns ``engine:`` adds after the result columns, in order."""
    if not spec.engines:
        return []
    return [
        ("engine", "str", "whose rules plan the row: vllm (vLLM 0.33) or sglang (SGLang 0.5.23; in its rows "
         "block_size is the page size, gpu_util mem_fraction_static, budget_bytes _profile_available_bytes, "
         "bytes_per_token the cell size, max_num_seqs max_running_requests, max_model_len context_len, "
         "max_batched_tokens chunked_prefill_size)"),
        ("engine_kv_cache_tokens", "int", "the engine's start-up pool per rank: vLLM's 'GPU KV cache size', "
         "SGLang's max_total_num_tokens (its full pool in a hybrid-SWA model)"),
        ("engine_swa_tokens", "int", "SGLang's SWA pool in a hybrid-SWA model (swa_full_tokens_ratio 0.8; "
         "empty otherwise)"),
        ("engine_vs_vllm_percent", "float", "100 x (engine_kv_cache_tokens - the vLLM row's) / the vLLM row's, at "
         "the same point (0 in vllm rows)"),
        ("engine_held_back_bytes", "int", "GPU bytes per rank the engine keeps from the weights and the KV cache: "
         "the GPU's total - weights per rank - budget_bytes (vLLM: (1 - util) x total + reserve; SGLang: the 1 GiB "
         "taken before the weights + (1 - mem_fraction_static) x the rest); empty without a GPU preset"),
    ]


def _row_id(vllm_id: str, engine: str) -> str:
    """An sglang row's id: 16 hex digits of sha256(vLLM point id + ':' + engine) (a vllm row keeps its id)."""
    return hashlib.sha256(f"{vllm_id}:{engine}".encode()).hexdigest()[:16]


def _per_node(paged: int, gpus: int) -> int:
    """paged requests per 8-GPU node: whole replicas per node, or the replica's requests over its nodes."""
    return paged * (GPUS_PER_NODE // gpus) if gpus <= GPUS_PER_NODE else paged // f.cdiv(gpus, GPUS_PER_NODE)


def token_pool_metrics(tokens: int, page: int, lengths: tuple[int, ...], finals: tuple[int, ...],
                       max_reserved: int, prefix: int) -> dict[str, Any]:
    """A workload group on a pool of ``tokens`` token slots in pages of ``page``: :func:`point_metrics` in token
    units (one slot a token, a block a page).

    >>> m = token_pool_metrics(100, 1, (30, 10), (30, 10), 40, 0)
    >>> m["complete_groups"], m["paged_requests"], m["contiguous_requests"]
    (2, 4, 2)
    """
    x = {"block_size": page, "layer_token_bytes": 1, "group_size": 1, "full_groups": 1, "window_groups": 0,
         "window": 0, "full_token_bytes": 1, "window_token_bytes": 0, "state_bytes": 0, "state_blocks": 0,
         "chunked": 0, "full_ratio": 1, "window_ratio": 1, "fixed_block_bytes": 0, "budget": tokens,
         "max_reserved": max_reserved, "prefix": prefix, **workload_inputs(lengths, finals)}
    return point_metrics(x)


def sglang_plan_rows(spec: GridSpec, frame: pl.DataFrame) -> tuple[pl.DataFrame, list[dict[str, Any]]]:
    """The sglang row of each vLLM point (in the frame's order; refused points left out) and the refusals."""
    from kvdash.engines import sglang

    presets = gpu_presets()
    page_given = any("block_size" in factor for factor in spec.factors)
    plans: dict[tuple[Any, ...], dict[str, Any]] = {}
    figures: dict[tuple[Any, ...], dict[str, Any]] = {}
    refusals: dict[tuple[Any, ...], dict[str, Any]] = {}
    keep: list[int] = []
    rows: list[dict[str, Any]] = []
    cols = ("id", "model", "workload", "kv_dtype", "tp", "pp", "gpu", "block_size", "gpus", "vllm_kv_cache_tokens")
    for i, r in enumerate(frame.select(cols).iter_rows(named=True)):
        page = int(r["block_size"]) if page_given else None
        key = (r["model"], r["kv_dtype"], r["tp"], r["pp"], r["gpu"], page)
        if key not in plans:
            entry = spec.models[str(r["model"])]
            arch = entry.arch
            gpu = presets.get(str(r["gpu"])) if r["gpu"] else None
            if gpu is None:
                plans[key] = {"refused": "SGLang's pool is derived from a GPU: the point has a declared budget"}
            elif r["pp"] != 1:
                plans[key] = {"refused": "SGLang's view is mirrored for pp 1 only"}
            elif not arch.weights_known:
                plans[key] = {"refused": "the model's weights are unknown (give them in models:)"}
            else:
                plans[key] = sglang.view(arch, gpu.memory_bytes, r["tp"], str(r["kv_dtype"]),
                                         f.weights_per_rank(arch.weight_bytes, r["tp"]), page)
                if plans[key].get("pool") == "state_only":  # pure Mamba: no token pool to fit requests in
                    v = plans[key]
                    plans[key] = {"refused": f"SGLang {sglang.VERSION}'s pool for this attention-free model is its "
                                  f"state slots (max_mamba_cache_size {v['max_mamba_cache_size']:,}, at most "
                                  f"{v['max_running_requests']:,} running requests): the sweep's token-pool figures "
                                  "do not apply (kvdash calc --engine-rules sglang gives them)"}
                else:
                    window = max((x.window for x in arch.layers if x.kind in ("sliding", "chunked")), default=0)
                    plans[key]["_window"] = window
        v = plans[key]
        if "refused" in v:
            refusals.setdefault(key[:5], {"model": r["model"], "kv_dtype": r["kv_dtype"], "tp": r["tp"],
                                          "pp": r["pp"], "gpu": r["gpu"], "reason": v["refused"]})
            continue
        fkey = (*key, r["workload"])
        if fkey not in figures:
            figures[fkey] = _sglang_figures(spec, v, str(r["workload"]), int(r["gpus"]))
        vllm_tokens = r["vllm_kv_cache_tokens"]
        tokens = v["max_total_num_tokens"]
        keep.append(i)
        rows.append({"id": _row_id(str(r["id"]), "sglang"), **figures[fkey], "engine": "sglang",
                     "engine_vs_vllm_percent": round(100 * (tokens - vllm_tokens) / vllm_tokens, 6)
                     if vllm_tokens else None})
    schema = dict(frame.schema)
    schema.update({"engine": pl.Utf8, "engine_kv_cache_tokens": pl.Int64, "engine_swa_tokens": pl.Int64,
                   "engine_vs_vllm_percent": pl.Float64})
    plan = pl.DataFrame(rows, schema={c: schema[c] for c in ("id", *PLAN_COLUMNS, "engine",
                                                             "engine_vs_vllm_percent")})
    params = frame[keep].drop(*(c for c in ("id", *PLAN_COLUMNS) if c in frame.columns))
    out = pl.concat([params, plan], how="horizontal").with_columns(pl.Series("_src", keep, dtype=pl.Int64))
    return out, list(refusals.values())


def _sglang_figures(spec: GridSpec, v: dict[str, Any], workload: str, gpus: int) -> dict[str, Any]:
    """Every PLAN_COLUMNS figure of one SGLang plan ``v`` (:func:`kvdash.engines.sglang.view`) and workload."""
    w = spec.workloads[workload]
    page, cell = int(v["page_size"]), float(v["cell_bytes"])
    tokens, swa = int(v["max_total_num_tokens"]), v["swa_max_total_num_tokens"]
    m = token_pool_metrics(tokens, page, w.lengths, w.finals, w.max_reserved, w.prefix)
    complete, shared = m["complete_groups"], m["requests_with_prefix_sharing"]
    if swa is not None:  # hybrid SWA: the SWA pool holds at most 2 x window of each request (maybe_evict_swa)
        cap = 2 * int(v["_window"])
        held = tuple(min(n, cap) for n in w.lengths)
        s = token_pool_metrics(int(swa), page, held, tuple(min(n, cap) for n in w.finals), min(w.max_reserved, cap),
                               min(w.prefix, cap))
        complete = min(complete, s["complete_groups"])
        shared = min(shared, s["requests_with_prefix_sharing"])
    k = len(w.lengths)
    paged = complete * k
    mrr = int(v["max_running_requests"])
    running = min(paged, mrr)

    def b(n: int) -> int:  # token slots -> bytes of the cell (a float in a hybrid-SWA pool)
        return round(n * cell)

    contiguous = m["contiguous_requests"]
    return {
        "block_size": page, "gpu_util": f"{v['mem_fraction_static']:g}", "util_policy": SGLANG_UTIL_POLICY,
        "budget_bytes": int(v["available_bytes"]), "fits": tokens > 0, "max_model_len": int(v["context_len"]),
        "max_batched_tokens": int(v["chunked_prefill_size"]), "bytes_per_token": round(cell),
        "block_bytes": b(page), "state_bytes": 0, "kv_token_slots": tokens, "whole_pool_blocks": tokens // page,
        "block_backed_token_slots": tokens, "paged_blocks": m["paged_blocks"], "useful_slots": m["useful_slots"],
        "allocated_slots": m["allocated_slots"], "tail_waste_slots": m["tail_waste_slots"],
        "paged_internal_waste_percent": m["paged_internal_waste_percent"], "useful_bytes": b(m["useful_bytes"]),
        "paged_bytes": b(m["paged_bytes"]), "contiguous_max_bytes": b(m["contiguous_max_bytes"]),
        "paged_waste_percent": m["paged_waste_percent"], "reservation_waste_percent": m["reservation_waste_percent"],
        "complete_groups": complete, "contiguous_complete_groups": m["contiguous_complete_groups"],
        "paged_requests": paged, "paged_requests_per_gpu": paged / gpus, "paged_requests_per_node":
            _per_node(paged, gpus), "max_num_seqs": mrr, "running_requests": running,
        "running_requests_per_gpu": running / gpus, "contiguous_requests": contiguous,
        "pow2_requests": m["pow2_requests"], "oracle_requests": m["oracle_requests"],
        "request_capacity_ratio": paged / contiguous if contiguous else None,
        "offload_tokens": m["offload_tokens"], "offload_useful_bytes": b(m["offload_useful_bytes"]),
        "offload_allocated_bytes": b(m["offload_allocated_bytes"]), "requests_with_prefix_sharing": shared,
        "prefix_saved_percent": m["prefix_saved_percent"], "vllm_kv_cache_tokens": None,
        "vllm_max_concurrency": None, "kv_128k_over_weights": LONG_CONTEXT * cell / v["weights_per_rank_bytes"]
        if v["weights_per_rank_bytes"] else None,
        "engine_kv_cache_tokens": tokens, "engine_swa_tokens": None if swa is None else int(swa),
    }


def add_engines(spec: GridSpec, frame: pl.DataFrame) -> tuple[pl.DataFrame, list[dict[str, Any]]]:
    """The points frame with one row per engine and point (adjacent, in ``spec.engines``' order) and the
    ``engine`` columns; and the (model, KV dtype, TP, PP, GPU) SGLang's rules refuse, each with its reason."""
    if not spec.engines:
        return frame, []
    n = frame.height
    # an sglang row's utilization and policy are values the grid's own (Enum) columns do not list
    frame = frame.with_columns(pl.col("gpu_util", "util_policy").cast(pl.Utf8))
    vllm = frame.with_columns(pl.lit("vllm").alias("engine"),
                              pl.col("vllm_kv_cache_tokens").alias("engine_kv_cache_tokens"),
                              pl.lit(None, dtype=pl.Int64).alias("engine_swa_tokens"),
                              pl.lit(0.0).alias("engine_vs_vllm_percent"),
                              pl.int_range(n, dtype=pl.Int64).alias("_src"))
    parts, refusals = [], []
    for rank, engine in enumerate(spec.engines):
        if engine == "vllm":
            part = vllm
        else:
            part, refusals = sglang_plan_rows(spec, frame)
        parts.append(part.with_columns(pl.lit(rank, dtype=pl.Int64).alias("_rank")))
    order = [name for name, _, _ in RESULT_COLUMNS] + [name for name, _, _ in engine_columns(spec)]
    order.remove("engine_held_back_bytes")
    out = pl.concat([p.select(*order, "_src", "_rank") for p in parts]).sort("_src", "_rank", maintain_order=True)
    if out.height == 0 and n and refusals:  # every point refused by the only engine asked: say why, write nothing
        r = refusals[0]
        more = f" (and {len(refusals) - 1:,} more setups)" if len(refusals) > 1 else ""
        raise InputError("grid.engine", ", ".join(spec.engines),
                         f"an engine whose rules plan at least one point: SGLang's rules refuse every point, e.g. "
                         f"{r['model']} {r['kv_dtype']} TP {r['tp']} PP {r['pp']}"
                         # a point with a declared budget has no GPU: it read "on None" (a helper's README audit)
                         + (f" on {r['gpu']}" if r.get("gpu") else "") + f": {r['reason']}{more}")
    return _held_back(spec, out.drop("_src", "_rank")), refusals


def _held_back(spec: GridSpec, frame: pl.DataFrame) -> pl.DataFrame:
    """``engine_held_back_bytes``: the GPU's total - weights per rank - budget_bytes, per row (each engine's own
    budget), for points on a GPU preset."""
    presets = gpu_presets()
    keys = frame.select(pl.col("model").cast(pl.Utf8), pl.col("gpu").cast(pl.Utf8), "gpus").unique()
    table = []
    for model, gpu, gpus in keys.iter_rows():
        arch = spec.models[model].arch
        preset = presets.get(gpu) if gpu else None
        table.append({"model": model, "gpu": gpu, "gpus": gpus, "_fixed": None if preset is None or not
                      arch.weights_known else preset.memory_bytes - f.weights_per_rank(arch.weight_bytes, gpus)})
    fixed = pl.DataFrame(table, schema={"model": pl.Utf8, "gpu": pl.Utf8, "gpus": pl.Int64, "_fixed": pl.Int64})
    return frame.with_columns(pl.col("model").cast(pl.Utf8).alias("_m"), pl.col("gpu").cast(pl.Utf8).alias("_g")) \
        .join(fixed.rename({"model": "_m", "gpu": "_g"}), on=["_m", "_g", "gpus"], how="left", maintain_order="left",
              nulls_equal=True) \
        .with_columns((pl.col("_fixed") - pl.col("budget_bytes")).alias("engine_held_back_bytes")) \
        .drop("_m", "_g", "_fixed")

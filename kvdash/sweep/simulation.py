"""A grid's ``simulate:`` section: the same simulated workload over the pool of every point."""

from __future__ import annotations

from typing import Any

import polars as pl

from kvdash.engines.vllm import rank_shapes
from kvdash.errors import InputError
from kvdash.sweep.gridfile import GridSpec, sim_column, sim_columns

SHARE_COLUMNS = (("token_states", "token_states"), ("reservation", "reservation"),
                 ("internal_fragmentation", "internal"), ("external_fragmentation", "external"), ("free", "free"))


column = sim_column


def simulation_columns(spec: GridSpec) -> list[tuple[str, str, str]]:
    """(name, kind, meaning) of the columns a ``simulate:`` section adds, in order."""
    assert spec.simulate is not None
    return sim_columns(spec.simulate)


def add_simulation(spec: GridSpec, frame: pl.DataFrame, jobs: int = 1, use_ray: bool = False) -> pl.DataFrame:
    """The ``simulate:`` columns: every distinct simulation the points need, run once each (on ``jobs`` local
    processes or on Ray: :mod:`kvdash.sweep.parallel`; the results are the same however they ran)."""
    from kvdash.simulate import tasks as T
    from kvdash.sweep.parallel import run_tasks

    sim = spec.simulate
    if sim is None:
        return frame
    point_keys: list[tuple[Any, Any, bool]] = []
    step_tasks: dict[tuple[Any, ...], dict[str, Any]] = {}
    cap_tasks: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in frame.select("model", "kv_dtype", "kv_scales", "tp", "pp", "block_size", "kv_token_slots").iter_rows(
            named=True):
        arch = spec.models[str(r["model"])].arch
        shape = rank_shapes(arch, str(r["kv_dtype"]), str(r["kv_scales"]), r["tp"], r["pp"], r["block_size"])[0]
        simple = shape.groups == 1 and not shape.window_groups and not shape.state_bytes
        max_len = min(sim.max_len, arch.max_context)
        common = {"workload": sim.workload, "slots": r["kv_token_slots"], "block_size": r["block_size"],
                  "max_len": max_len, "allocator": sim.allocator, "seed": sim.seed, "watermark": sim.watermark}
        if simple:
            for pol in sim.policies:
                step_tasks.setdefault((r["kv_token_slots"], r["block_size"], pol, max_len), common | {"policy": pol})
            if sim.rates and sim.policies:
                cap_tasks.setdefault((r["kv_token_slots"], r["block_size"], max_len),
                                     common | {"policies": list(sim.policies), "rates": sim.rates,
                                               "bound": sim.latency_bound})
        point_keys.append(((r["kv_token_slots"], r["block_size"]), max_len, simple))
    try:
        done = run_tasks(T.step_point, list(step_tasks.values()), jobs, use_ray)
        caps_done = run_tasks(T.step_capacity, list(cap_tasks.values()), jobs, use_ray)
    except InputError as exc:
        raise InputError(f"simulate ({exc.field})", exc.value, exc.allowed) from exc
    results = dict(zip(step_tasks, done, strict=True))
    caps = dict(zip(cap_tasks, caps_done, strict=True))
    names = [name for name, _, _ in sim_columns(sim) if name.startswith("sim_")]
    rows: dict[str, list[Any]] = {name: [] for name in names}
    for (pool_key, max_len, simple) in point_keys:
        for pol in sim.policies:
            res = results.get((*pool_key, pol, max_len)) if simple else None
            for share, short in SHARE_COLUMNS:
                rows[column(pol, short)].append(None if res is None else round(res.shares_percent[share], 6))
            rows[column(pol, "avg_batch")].append(None if res is None else round(res.avg_running, 6))
            rows[column(pol, "preemptions")].append(None if res is None else res.preemptions)
            rows[column(pol, "norm_latency")].append(None if res is None else round(res.normalized_latency, 6))
        if sim.rates:
            cap = caps.get((*pool_key, max_len)) if simple else None
            for pol in sim.policies:
                for k in range(len(sim.rates)):
                    rows[column(pol, f"latency_r{k}")].append(None if cap is None else round(cap.latency[pol][k], 6))
                rows[column(pol, "capacity_rate")].append(None if cap is None else cap.capacity[pol])
    frame = frame.with_columns(pl.Series(name, values, dtype=pl.Int64 if name.endswith("preemptions") else pl.Float64)
                               for name, values in rows.items())
    if sim.time is not None:
        from kvdash.sweep.simtime import add_time

        frame = add_time(spec, frame, jobs, use_ray)
    return frame


# --- prefix_cache: --------------------------------------------------------------------------------

PREFIX_COLUMNS = (
    ("pc_workload", "str", "prefix_cache: the workload replayed (trace file or generator)"),
    ("pc_rules", "str", "prefix_cache: the rules (vllm or lmcache)"),
    ("pc_gpu_tokens", "int", "prefix_cache: GPU prefix-cache tokens (vLLM rules: the point's pool; LMCache: 0)"),
    ("pc_cpu_tokens", "int", "prefix_cache: CPU tier tokens at this point (none: no tier; -1: unbounded)"),
    ("pc_hit_percent", "float", "prefix_cache: prompt tokens served from a cache tier, % (prefill saved)"),
    ("pc_requests_hit_percent", "float", "prefix_cache: requests with at least one block hit, %"),
    ("pc_evictions", "int", "prefix_cache: evictions over every tier"),
    ("pc_unbounded_hit_percent", "float", "prefix_cache: the same replay with unbounded tiers, % (the workload's "
                                          "ceiling)"),
)


def prefix_columns(spec: GridSpec) -> list[tuple[str, str, str]]:
    return list(PREFIX_COLUMNS) if spec.prefix_cache is not None else []


def tier_spec(pc: Any, slots: int, block_size: int, bytes_per_token: int, block_bytes: int, tp: int,
              max_batched: int = 0) -> Any:
    """The replay's tiers at one point: vLLM rules, the point's pool as the GPU prefix cache and the CPU/disk
    tiers as vLLM sizes them, the prompt offered to the CPU tier ``max_batched`` tokens a step; LMCache rules, its
    tiers sized with the point's bytes per token."""
    from kvdash.core import tiers as T
    from kvdash.simulate.prefixcache import TierSpec

    tokens: dict[str, int | None] = {"cpu": 0, "disk": 0}
    for name, size in pc.offload.items():
        if size is None:
            tokens[name] = None
        elif pc.rules == "vllm":
            tokens[name] = T.vllm_cpu_tier(size, block_bytes, tp, block_size).tokens
        else:
            tokens[name] = T.lmcache_tier(size, bytes_per_token * tp).tokens
    return TierSpec(rules=pc.rules, block_size=block_size, gpu_tokens=slots // block_size * block_size
                    if pc.rules == "vllm" else 0, cpu_tokens=tokens["cpu"], disk_tokens=tokens["disk"],
                    cpu_policy=pc.cpu_policy, bytes_per_token=bytes_per_token * tp, concurrency=pc.concurrency,
                    ranks=tp, prefill_step_tokens=max_batched)


def add_prefix_cache(spec: GridSpec, frame: pl.DataFrame) -> pl.DataFrame:
    """Each point's replay (one per distinct pool and token size), and the unbounded ceiling once."""
    from dataclasses import replace

    from kvdash.simulate.prefixcache import replay

    pc = spec.prefix_cache
    assert pc is not None
    keys: dict[tuple[int, bool], list[list[int]]] = {}
    done: dict[tuple[int, ...], Any] = {}
    ceiling: dict[int, float] = {}
    rows: dict[str, list[Any]] = {name: [] for name, _, _ in PREFIX_COLUMNS}
    for r in frame.select("kv_token_slots", "block_size", "bytes_per_token", "block_bytes", "tp", "pp",
                          "max_batched_tokens").iter_rows(named=True):
        key = (r["kv_token_slots"], r["block_size"], r["bytes_per_token"], r["block_bytes"], r["tp"],
               r["max_batched_tokens"] or 0)
        if r["pp"] != 1:
            res = None
        else:
            if key not in done:
                ts = tier_spec(pc, *key)
                done[key] = (ts, replay(pc.workload, ts, keys))
            ts, res = done[key]
            b = r["block_size"]
            if b not in ceiling:
                ceiling[b] = 100 * replay(pc.workload, replace(ts, gpu_tokens=None if pc.rules == "vllm" else 0,
                                                               cpu_tokens=None if pc.rules == "lmcache" else 0,
                                                               disk_tokens=0), keys).hit_rate
        rows["pc_workload"].append(pc.label)
        rows["pc_rules"].append(pc.rules)
        if res is None:
            for name in rows:
                if name not in ("pc_workload", "pc_rules"):
                    rows[name].append(None)
            continue
        rows["pc_gpu_tokens"].append(ts.gpu_tokens)
        rows["pc_cpu_tokens"].append(None if ts.cpu_tokens == 0 else -1 if ts.cpu_tokens is None else ts.cpu_tokens)
        rows["pc_hit_percent"].append(round(100 * res.hit_rate, 6))
        rows["pc_requests_hit_percent"].append(round(100 * res.hit_requests / res.requests, 6))
        rows["pc_evictions"].append(sum(t.evictions for t in res.tiers))
        rows["pc_unbounded_hit_percent"].append(round(ceiling[r["block_size"]], 6))
    dtypes = {"str": pl.Utf8, "int": pl.Int64, "float": pl.Float64}
    return frame.with_columns(pl.Series(name, rows[name], dtype=dtypes[kind]) for name, kind, _ in PREFIX_COLUMNS)


def prefix_curve(pc: Any, block_size: int, bytes_per_token: int, block_bytes: int, tp: int,
                 slots: int, max_batched: int = 0) -> list[dict[str, Any]]:
    """Hit rate against the capacity of the outermost tier (``capacities``), per tier, at one point."""
    from dataclasses import replace

    from kvdash.simulate.prefixcache import replay

    base = tier_spec(pc, slots, block_size, bytes_per_token, block_bytes, tp, max_batched)
    swept = "disk" if "disk" in pc.offload else "cpu" if "cpu" in pc.offload else "gpu"
    keys: dict[tuple[int, bool], list[list[int]]] = {}
    out = []
    for tokens in pc.capacities:
        r = replay(pc.workload, replace(base, **{f"{swept}_tokens": tokens}), keys)
        out.append({"tier": swept, "capacity_tokens": tokens, "hit_rate": r.hit_rate,
                    "tiers": {t.name: r.to_json()["tiers"][i] for i, t in enumerate(r.tiers)}})
    return out

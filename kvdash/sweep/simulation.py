"""A grid's ``simulate:`` section: the same simulated workload over the pool of every point."""

from __future__ import annotations

from typing import Any

import polars as pl

from kvdash.core.calc import rank_shapes
from kvdash.errors import InputError
from kvdash.simulate.capacity import capacity_sweep
from kvdash.simulate.engine import simulate
from kvdash.sweep.gridfile import GridSpec

SHARE_COLUMNS = (("token_states", "token_states"), ("reservation", "reservation"),
                 ("internal_fragmentation", "internal"), ("external_fragmentation", "external"), ("free", "free"))


def column(policy: str, what: str) -> str:
    return f"sim_{policy.replace('-', '_')}_{what}"


def simulation_columns(spec: GridSpec) -> list[tuple[str, str, str]]:
    """(name, kind, meaning) of the columns a ``simulate:`` section adds, in order."""
    assert spec.simulate is not None
    out = []
    for pol in spec.simulate.policies:
        for _, short in SHARE_COLUMNS:
            out.append((column(pol, short), "float", f"simulated {pol}: time-averaged share of the pool, {short}, %"))
        out.append((column(pol, "avg_batch"), "float", f"simulated {pol}: average running requests"))
        out.append((column(pol, "preemptions"), "int", f"simulated {pol}: preemptions (recompute)"))
        out.append((column(pol, "norm_latency"), "float",
                    f"simulated {pol}: mean normalized latency, steps per output token (queueing included)"))
    rates = spec.simulate.rates
    if rates:
        for pol in spec.simulate.policies:
            for k, rate in enumerate(rates):
                out.append((column(pol, f"latency_r{k}"), "float",
                            f"simulated {pol}: normalized latency at {rate:.4g} requests per step"))
            out.append((column(pol, "capacity_rate"), "float",
                        f"simulated {pol}: highest swept rate within {spec.simulate.latency_bound:g} steps per "
                        "output token (scheduling capacity under the simulator's assumptions, not GPU throughput)"))
    return out


def add_simulation(spec: GridSpec, frame: pl.DataFrame) -> pl.DataFrame:
    sim = spec.simulate
    if sim is None:
        return frame
    cache: dict[tuple[int, int, str, int], Any] = {}
    caps: dict[tuple[int, int, int], Any] = {}
    rows: dict[str, list[Any]] = {name: [] for name, _, _ in simulation_columns(spec)}
    for r in frame.select("model", "kv_dtype", "kv_scales", "tp", "pp", "block_size", "kv_token_slots").iter_rows(
            named=True):
        arch = spec.models[str(r["model"])].arch
        shape = rank_shapes(arch, str(r["kv_dtype"]), str(r["kv_scales"]), r["tp"], r["pp"], r["block_size"])[0]
        simple = shape.groups == 1 and not shape.window_groups and not shape.state_bytes
        for pol in sim.policies:
            key = (r["kv_token_slots"], r["block_size"], pol, min(sim.max_len, arch.max_context))
            if simple and key not in cache:
                try:
                    cache[key] = simulate(sim.workload, pol, r["kv_token_slots"], r["block_size"],
                                          min(sim.max_len, arch.max_context), sim.allocator, sim.seed,
                                          watermark=sim.watermark)
                except InputError as exc:
                    if exc.field not in ("--budget", "--block-size"):
                        raise InputError(f"simulate ({exc.field})", exc.value, exc.allowed) from exc
                    cache[key] = None  # the pool cannot hold one request under this policy
            res = cache.get(key) if simple else None
            for share, short in SHARE_COLUMNS:
                rows[column(pol, short)].append(None if res is None else round(res.shares_percent[share], 6))
            rows[column(pol, "avg_batch")].append(None if res is None else round(res.avg_running, 6))
            rows[column(pol, "preemptions")].append(None if res is None else res.preemptions)
            rows[column(pol, "norm_latency")].append(None if res is None else round(res.normalized_latency, 6))
        if sim.rates:
            ckey = (r["kv_token_slots"], r["block_size"], min(sim.max_len, arch.max_context))
            if simple and ckey not in caps:
                try:
                    caps[ckey] = capacity_sweep(sim.workload, list(sim.policies), ckey[0], ckey[1], ckey[2], sim.rates,
                                                sim.latency_bound, sim.allocator, sim.seed, sim.watermark)
                except InputError as exc:
                    if exc.field not in ("--budget", "--block-size"):
                        raise InputError(f"simulate ({exc.field})", exc.value, exc.allowed) from exc
                    caps[ckey] = None
            cap = caps.get(ckey) if simple else None
            for pol in sim.policies:
                for k in range(len(sim.rates)):
                    rows[column(pol, f"latency_r{k}")].append(None if cap is None else round(cap.latency[pol][k], 6))
                rows[column(pol, "capacity_rate")].append(None if cap is None else cap.capacity[pol])
    return frame.with_columns(pl.Series(name, values, dtype=pl.Int64 if name.endswith("preemptions") else pl.Float64)
                              for name, values in rows.items())

"""A grid's ``simulate:`` section: the same simulated workload over the pool of every point."""

from __future__ import annotations

from typing import Any

import polars as pl

from kvdash.core.calc import rank_shapes
from kvdash.errors import InputError
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
    return out


def add_simulation(spec: GridSpec, frame: pl.DataFrame) -> pl.DataFrame:
    sim = spec.simulate
    if sim is None:
        return frame
    cache: dict[tuple[int, int, str], Any] = {}
    rows: dict[str, list[Any]] = {name: [] for name, _, _ in simulation_columns(spec)}
    for r in frame.select("model", "kv_dtype", "kv_scales", "tp", "pp", "block_size", "kv_token_slots").iter_rows(
            named=True):
        arch = spec.models[str(r["model"])].arch
        shape = rank_shapes(arch, str(r["kv_dtype"]), str(r["kv_scales"]), r["tp"], r["pp"], r["block_size"])[0]
        simple = shape.groups == 1 and not shape.window_groups and not shape.state_bytes
        for pol in sim.policies:
            key = (r["kv_token_slots"], r["block_size"], pol)
            if simple and key not in cache:
                try:
                    cache[key] = simulate(sim.workload, pol, r["kv_token_slots"], r["block_size"],
                                          min(sim.max_len, arch.max_context), sim.allocator, sim.seed)
                except InputError:
                    cache[key] = None  # the pool cannot hold one request under this policy
            res = cache.get(key) if simple else None
            for share, short in SHARE_COLUMNS:
                rows[column(pol, short)].append(None if res is None else round(res.shares_percent[share], 6))
            rows[column(pol, "avg_batch")].append(None if res is None else round(res.avg_running, 6))
            rows[column(pol, "preemptions")].append(None if res is None else res.preemptions)
    return frame.with_columns(pl.Series(name, values, dtype=pl.Int64 if name.endswith("preemptions") else pl.Float64)
                              for name, values in rows.items())

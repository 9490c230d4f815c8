"""The report's SVG charts (through :mod:`kvdash.report.svg`), written as text: capacity, ratio and waste for
every grid, the simulator's shares and capacity, the prefix cache's hit rates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from kvdash.report import svg
from kvdash.report.labels import Labels
from kvdash.report.picks import CHART_POINTS, _chart_points, _Picks, workload_stats
from kvdash.sweep.gridfile import GridSpec
from kvdash.units import RATIO_DECIMALS

CHARTS = ("capacity.svg", "ratio.svg", "waste.svg")


def charts_for(spec: GridSpec) -> tuple[str, ...]:
    from kvdash.report.timesection import time_charts

    stepped = bool(spec.simulate and spec.simulate.policies)  # a time: block alone runs no step simulation
    return CHARTS + (("simulation.svg",) if stepped else ()) + (
        ("simulation-capacity.svg",) if stepped and spec.simulate and spec.simulate.rates else ()) + (
        ("prefix-cache.svg",) if spec.prefix_cache and spec.prefix_cache.capacities else ()) + time_charts(spec)


def write_prefix_chart(ctx: dict[str, Any], out: Path) -> None:
    """Hit rate against capacity, one stacked bar per capacity: each tier's share of prompt tokens, then misses."""
    pc = ctx["prefix_cache"]
    if not pc or not pc["curve"]:
        return
    colors = {"gpu": "#2f855a", "cpu": "#d69e2e", "disk": "#c05621"}
    labels = [("unbounded" if pt["capacity_tokens"] is None else f"{pt['capacity_tokens']:,} tokens")
              for pt in pc["curve"]]
    names = list(pc["curve"][0]["tiers"])
    parts = [(f"{n} hit", colors[n], [100 * pt["tiers"][n]["hit_rate"] for pt in pc["curve"]]) for n in names]
    parts.append(("miss (prefilled)", "#cbd5e0", [100 * (1 - pt["hit_rate"]) for pt in pc["curve"]]))
    _write(out / "prefix-cache.svg", svg.stacked_chart(labels, parts, "share of prompt tokens, %",
                                                       f"hit rate against {pc['curve'][0]['tier']} tier capacity"))


# --- charts ------------------------------------------------------------------------------------

def write_simulation_chart(spec: GridSpec, df: pl.DataFrame, out: Path) -> None:
    """The paper's Figure 2 layout: one stacked bar per policy (median over the grid), the paper's beside.

    Kept separate from the capacity charts: a later rates/latency chart of the simulator goes beside it."""
    from kvdash.simulate.engine import PAPER_FIG2
    from kvdash.sweep.simulation import SHARE_COLUMNS, column

    assert spec.simulate is not None
    colors = ("#2f855a", "#d69e2e", "#c05621", "#9b2c2c", "#cbd5e0")
    names = ("token states", "reservation", "internal frag.", "external frag. (& other)", "free")
    labels, bars = [], []
    for pol in spec.simulate.policies:
        med = df.select([pl.col(column(pol, short)).median() for _, short in SHARE_COLUMNS]).row(0)
        labels.append(f"{pol} (simulated)")
        bars.append([0.0 if v is None else float(v) for v in med])
        if pol in PAPER_FIG2:
            paper = PAPER_FIG2[pol]
            rest = 100 - sum(v or 0 for v in paper)
            labels.append(f"{pol} (paper Fig. 2)")
            bars.append([paper[0], paper[1] or 0.0, paper[2] or 0.0, paper[3] or 0.0, max(rest, 0.0)])
    parts = [(names[k], colors[k], [b[k] for b in bars]) for k in range(5)]
    _write(out / "simulation.svg", svg.stacked_chart(labels, parts, "share of the KV pool over time, %"))


def write_capacity_chart(spec: GridSpec, df: pl.DataFrame, out: Path) -> None:
    """Normalized latency against request rate per policy (median over the grid), the bound dashed:
    the shape of the paper's Figure 12, as scheduling capacity under the simulator's assumptions."""
    from kvdash.sweep.simulation import column

    sim = spec.simulate
    assert sim is not None and sim.rates
    from kvdash.report.timesection import policy_colour

    series = []
    for pol in sim.policies:  # each policy in the colour the time charts give it
        ys = [df.select(pl.col(column(pol, f"latency_r{k}")).median()).item() for k in range(len(sim.rates))]
        series.append((pol, policy_colour(pol), ys))
    _write(out / "simulation-capacity.svg", svg.line_chart(
        sim.rates, series, "request rate, requests per step (simulated)",
        "steps per output token", (sim.latency_bound, f"bound {sim.latency_bound:g}"),
        "scheduling capacity under the simulator's assumptions (not GPU throughput)"))


def _write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def write_charts(spec: GridSpec, df: pl.DataFrame, out: Path) -> None:
    labels = Labels(spec, df)
    # 1. paged vs contiguous requests, points named by the swept dimensions
    picked, note = _chart_points(spec, df, labels, CHART_POINTS, _Picks(spec, df))
    rows = list(picked.iter_rows(named=True))
    values = [v for r in rows for v in (r["paged_requests"], r["contiguous_requests"]) if v and v > 0]
    log = bool(values) and max(values) / min(values) > 100
    _write(out / "capacity.svg", svg.bar_chart(
        [labels(r) for r in rows],
        [("paged", "#2b6cb0", [r["paged_requests"] for r in rows]),
         ("contiguous (Max)", "#c05621", [r["contiguous_requests"] for r in rows])],
        "requests that fit at once (snapshot)" + (", log scale" if log else ""),
        title=note[0].upper() + note[1:] if note else "", log=log))

    # 2. capacity ratio per model, beside the "universal 4-5x" band (distinct ratios to RATIO_DECIMALS decimals)
    ratios = df.lazy().select("model", pl.col("request_capacity_ratio").round(RATIO_DECIMALS).alias("r")).drop_nulls() \
        .unique().collect().with_columns(pl.col("model").cast(pl.Utf8)).sort(["model", "r"])
    models = [str(m) for m in df.get_column("model").unique(maintain_order=True).to_list()]
    grouped = {m: [] for m in models} | {m: list(v) for m, v in ratios.group_by("model").agg("r").iter_rows()}
    _write(out / "ratio.svg", svg.strip_chart(
        models, [grouped[m] for m in models], "paged / contiguous (Max) requests: a capacity ratio, not throughput",
        (4, 5), 'claimed "universal 4-5x"'))

    # 3. where the memory of one workload group goes: contiguous Max vs paged (median over points)
    medians = workload_stats(df)
    names, useful, reserve_w, tail_w = [], [], [], []
    for row in medians.iter_rows(named=True):
        for kind, value in (("contiguous Max", row["res"]), ("paged", row["pag"])):
            w = float(value) if value is not None else 0.0
            names.append(f"{row['workload']}: {kind}")
            useful.append(100 - w)
            reserve_w.append(w if kind == "contiguous Max" else 0.0)
            tail_w.append(w if kind == "paged" else 0.0)
    _write(out / "waste.svg", svg.stacked_chart(
        names, [("token state", "#2f855a", useful), ("reservation waste (contiguous)", "#c05621", reserve_w),
                ("tail and window-block waste (paged)", "#d69e2e", tail_w)],
        "share of the memory a workload group holds, % (median over the grid)"))

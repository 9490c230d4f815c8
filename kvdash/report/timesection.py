"""The report's "In seconds" section: a grid's ``simulate: time:`` columns (issue 28) as tables, and the
PagedAttention paper's Figure 12 shape (normalized latency against request rate, one line per policy) per
workload as ``time-rates-K.svg``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from kvdash.report import svg
from kvdash.sweep.gridfile import GridSpec
from kvdash.units import ratio_text

MAX_ROWS = 16  # points listed in the per-point table (the rest are in results.csv)
COLOURS = ("#2b6cb0", "#2f855a", "#d69e2e", "#c05621", "#6b46c1", "#718096")


def rate_workloads(spec: GridSpec) -> list[str]:
    """The grid workloads whose points sweep request rates, in the grid's order (chart K is the K-th, from 1)."""
    ts = spec.simulate.time if spec.simulate else None
    if ts is None or not ts.most_rates():
        return []
    return [w for w in spec.workloads if ts.rates_of(w) and (ts.workloads is None or w in ts.workloads)]


def time_charts(spec: GridSpec) -> tuple[str, ...]:
    return tuple(f"time-rates-{k}.svg" for k in range(1, len(rate_workloads(spec)) + 1))


def _fmt(v: Any, digits: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, int):
        return f"{v:,}"
    return f"{v:,.{digits}f}"


def time_section(spec: GridSpec, df: pl.DataFrame, dims: list[str]) -> dict[str, Any] | None:
    """Setup line, per-point SLO/latency rows and, per workload with rates, each policy's rate at the bound."""
    from kvdash.sweep.claims import TIME_LABEL, TIME_MODEL_ERROR

    sim = spec.simulate
    if sim is None or sim.time is None:
        return None
    ts = sim.time
    timed = df.filter(pl.col("time_gpu").is_not_null())
    gpus = sorted({str(g) for g in timed.get_column("time_gpu").to_list()})
    parts = [f"Each point on its own pool, max_num_seqs and max_num_batched_tokens under vLLM 0.33's scheduler "
             f"(paged) and Orca's reservations (max, pow2, oracle: the same scheduler, whole reservations placed by "
             f"{sim.allocator}); {ts.weight_format} weights; GPU figures of {', '.join(gpus) or '-'}; seed {sim.seed}"]
    if ts.workloads:
        parts.append("requests per grid workload: " + "; ".join(
            f"{name}: {(ts.workload_requests or {}).get(name, ts.requests):,} of {w.name} "
            f"({w.prompt.kind} prompt, {w.output.kind} output)" for name, w in ts.workloads.items()))
    else:
        parts.append(f"{ts.requests:,} {sim.workload.name} requests")
    untimed = df.height - timed.height
    if untimed:
        parts.append(f"{untimed:,} of {df.height:,} points not timed (no config.json to count parameters, no GPU "
                     "figures, pipeline parallel, a workload not listed, or a pool too small for the longest request)")
    short = f"{', '.join(gpus) or '-'}, {ts.weight_format} weights; Orca on paged's scheduler ({sim.allocator})"
    out: dict[str, Any] = {"setup": "; ".join(parts), "setup_short": short,
                           "label": "Figures from kvdash's " + TIME_LABEL,
                           "label_short": f"Time model ({TIME_MODEL_ERROR})",
                           "points": [], "point_head": [], "rates": [], "more": ""}
    cols = [d for d in dims if d in timed.columns and timed.get_column(d).n_unique() > 1] or ["model"]
    if ts.slo or ts.users:
        head = ["point", "KV holds (requests)"]
        if ts.slo:
            head += [f"users meeting {ts.slo_text} (p90)", "requests/s meeting it", "binds"]
        if ts.users:
            head += [f"TTFT p90 ms at {ts.users:,} user{'s' if ts.users > 1 else ''}", "TPOT p90 ms",
                     "tokens/s per GPU", "tokens/s per user"]
        rows = []
        for r in timed.head(MAX_ROWS).iter_rows(named=True):
            row = [", ".join(str(r[c]) for c in cols), _fmt(r["time_kv_requests"])]
            if ts.slo:
                row += [_fmt(r["time_slo_users"]), _fmt(r["time_slo_rate"], 3), str(r["time_binds"])]
            if ts.users:
                row += [_fmt(r["time_ttft_p90_ms"]), _fmt(r["time_tpot_p90_ms"]), _fmt(r["time_tokens_per_s_per_gpu"]),
                        _fmt(r["time_tokens_per_s_per_user"])]
            rows.append(row)
        out["point_head"], out["points"] = head, rows
        if timed.height > MAX_ROWS:
            out["more"] = f"the first {MAX_ROWS} of {timed.height:,} timed points (every one is in results.csv)"
    for k, wl in enumerate(rate_workloads(spec), start=1):
        sub = timed.filter(pl.col("workload").cast(pl.Utf8) == wl)
        if not sub.height:
            continue
        med = {pol: sub.select(pl.col(f"time_{pol}_rate").median()).item() for pol in ts.policies}
        rows = [[pol, _fmt(med[pol], 3),
                 "-" if pol == "paged" or "paged" not in ts.policies or not med[pol] or med["paged"] is None
                 else ratio_text(med["paged"] / med[pol])] for pol in ts.policies]
        rates = ts.rates_of(wl) or []
        out["rates"].append({"workload": wl, "chart": f"time-rates-{k}.svg", "rows": rows,
                             "short": f"{len(rates)} rates, {rates[0]:.4g}-{rates[-1]:.4g} requests/s, {sub.height:,} "
                                      f"point{'s' if sub.height > 1 else ''} (medians)",
                             "swept": f"{len(rates)} Poisson rates from {rates[0]:.4g} to {rates[-1]:.4g} requests/s "
                                      f"({sub.height:,} point{'s' if sub.height > 1 else ''}: medians)"})
    out["bound"] = f"{ts.latency_bound:g}"
    return out


def write_time_charts(spec: GridSpec, df: pl.DataFrame, out: Path) -> None:
    """Per workload with rates: the median normalized latency of each policy at each rate, the bound dashed."""
    sim = spec.simulate
    if sim is None or sim.time is None:
        return
    ts = sim.time
    for k, wl in enumerate(rate_workloads(spec), start=1):
        rates = ts.rates_of(wl) or []
        sub = df.filter(pl.col("workload").cast(pl.Utf8) == wl)
        series = []
        for i, pol in enumerate(ts.policies):
            ys = [sub.select(pl.col(f"time_{pol}_nlat_r{j}").median()).item() for j in range(len(rates))]
            series.append(("paged (vLLM)" if pol == "paged" else f"Orca ({pol})", COLOURS[i % len(COLOURS)], ys))
        (out / f"time-rates-{k}.svg").write_text(svg.line_chart(
            rates, series, f"request rate, requests/s ({wl})", "normalized latency, s per output token",
            (ts.latency_bound, f"bound {ts.latency_bound:g} s/token"),
            f"{wl}: normalized latency against request rate (kvdash's time model)"), encoding="utf-8")

"""The report's "In seconds" section: a grid's ``simulate: time:`` columns (issue 28) as tables, and the
PagedAttention paper's Figure 12 shape (normalized latency against request rate, one line per policy) per
workload as ``time-rates-K.svg``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from kvdash.report import svg
from kvdash.report.labels import Labels
from kvdash.sweep.gridfile import GridSpec
from kvdash.sweep.simtime import TIME_POLICIES
from kvdash.units import ratio_text

MAX_ROWS = 16  # points listed in the per-point table (the rest are in results.csv)
MD_ROWS = 6  # in report.md, reviewed in pull requests (the HTML report lists MAX_ROWS)
COLOURS = ("#2b6cb0", "#2f855a", "#d69e2e", "#c05621", "#6b46c1", "#718096")


def policy_colour(policy: str) -> str:
    """A policy's colour in every chart (the time charts' and the step-unit capacity chart), whichever policies a
    grid lists: paged, max, pow2, oracle, paged-prefix in turn; grey (the bound line's) for any other."""
    order = (*TIME_POLICIES, "paged-prefix")
    return COLOURS[order.index(policy)] if policy in order else COLOURS[-1]


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


def _slo_cells(r: dict[str, Any]) -> list[str]:
    """Users and rate meeting the SLO, and what binds; a search that never failed says its figure is a floor."""
    users = _fmt(r["time_slo_users"])
    if r["time_binds"] == "none" and r["time_slo_users"] is not None:
        users = f"≥ {users} (every user simulated met it)"
    rate = _fmt(r["time_slo_rate"], 3)
    if r["time_slo_rate"] is None and r.get("time_slo_rate_met_up_to") is not None:
        rate = f"≥ {r['time_slo_rate_met_up_to']:,.3f} (no limit found: the requests end before a queue builds)"
    return [users, rate, str(r["time_binds"])]


def _rate_cell(sub: pl.DataFrame, pol: str, median: float | None, rates: list[float], bound: float) -> str:
    """A policy's median rate within the bound over the points that have one, saying how many of the workload's
    points those are and where the others lie: within the bound at every swept rate (their rate is above the
    sweep), or over it even after narrowing below the lowest."""
    rate = sub.get_column(f"time_{pol}_rate")
    last = sub.get_column(f"time_{pol}_nlat_r{len(rates) - 1}")
    above = int(((last <= bound) & rate.is_null()).sum())
    unheld = int(sub.get_column(f"time_{pol}_nlat_r0").is_null().sum())
    below = rate.null_count() - above - unheld
    others = [f"{n:,} {what}" for n, what in ((above, f"above {rates[-1]:.4g}"), (below, f"below {rates[0]:.4g}"),
                                               (unheld, "pool too small for its reservations")) if n]
    if median is None:
        if above == sub.height:
            return f"above {rates[-1]:.4g} (within the bound at every swept rate)"
        if below == sub.height:
            return f"below {rates[0]:.4g} (over the bound at the lowest rate)"
        if unheld == sub.height:
            return "none (the pool cannot hold its reservation)"
        return "none (" + "; ".join(others) + ")"
    text = _fmt(median, 3) + (f" (below the lowest swept rate, {rates[0]:.4g})" if median < rates[0] else "")
    if rate.null_count():
        text += f" ({sub.height - rate.null_count():,} of {sub.height:,} points; " + "; ".join(others) + ")"
    return text


def _short_run(ts: Any) -> str:
    """The shortest time workload's closed loop, where it is short (:func:`kvdash.simulate.slo.short_run_note`)."""
    from kvdash.simulate.slo import short_run_note

    by = ts.requests_by_workload()
    name, requests = min(by.items(), key=lambda kv: kv[1])
    note = short_run_note(requests, ts.users or 0)
    if not note:
        return ""
    return f"a short run{f' ({name})' if name and len(by) > 1 else ''}: {note}"


def _constants_text(gpus: list[str], brief: bool = False) -> str:
    """The time model's constants, and the GPUs they were never measured on."""
    from kvdash.core.steptime import MEASURED_GPUS, fitted_constants, unmeasured_note

    c = fitted_constants()
    blackwell = f" ({c.c_flop_blackwell:.4g} on Blackwell)" if c.c_flop_blackwell is not None else ""
    step = f"{c.c_step * 1e3:.4g} ms a step, " if c.c_step else ""
    other = [g for g in gpus if g not in MEASURED_GPUS]
    if brief:
        return (f"constants c_mem {c.c_mem:.4g}, c_flop {c.c_flop:.4g}{blackwell}, {c.c_layer * 1e6:.4g} us a layer, "
                f"{c.c_allreduce * 1e6:.4g} us an all-reduce, {step}{c.c_request * 1e3:.4g} ms a request"
                + (f"; {', '.join(other)} unmeasured (datasheet figures)" if other else ""))
    text = (f"step-time constants (benchmarks/steptime_fit.py): c_mem {c.c_mem:.4g} x bytes / HBM bandwidth, c_flop "
            f"{c.c_flop:.4g}{blackwell} x FLOPs / datasheet FLOP/s, {c.c_layer * 1e6:.4g} us a layer, "
            f"{c.c_allreduce * 1e6:.4g} us an all-reduce, {step}{c.c_request * 1e3:.4g} ms a request outside the "
            f"steps ({c.fitted_on.split(' on ')[-1]})")
    return "; ".join([text, *(n for n in map(unmeasured_note, other) if n)])



def weights_words(weight_format: str) -> str:
    """The grid's weight format in a report: ``auto`` is each checkpoint's own (its quantization_config: fp8 or
    NVFP4 or int4 where it declares one, else bf16; :func:`kvdash.engines.vllm.checkpoint_formats`)."""
    if weight_format == "auto":
        return "each checkpoint's own weight formats (its quantization_config's fp8, NVFP4 or int4, else bf16)"
    return f"{weight_format} weights"

def time_section(spec: GridSpec, df: pl.DataFrame, dims: list[str]) -> dict[str, Any] | None:
    """Setup line, per-point SLO/latency rows and, per workload with rates, each policy's rate at the bound."""
    from kvdash.sweep.claims import TIME_LABEL, TIME_MODEL_ERROR

    sim = spec.simulate
    if sim is None or sim.time is None:
        return None
    ts = sim.time
    timed = df.filter(pl.col("time_gpu").is_not_null())
    gpus = sorted({str(g) for g in timed.get_column("time_gpu").to_list()})
    orca = [pol for pol in ts.policies if pol != "paged"]
    parts = ["Each point on its own pool, max_num_seqs and max_num_batched_tokens under vLLM 0.33's scheduler "
             + (f"(paged) and Orca's reservations ({', '.join(orca)}: the same scheduler, whole reservations placed "
                f"by {sim.allocator})" if orca else "(paged)")
             + f"; {weights_words(ts.weight_format)}; GPU figures of {', '.join(gpus) or '-'}; seed {sim.seed}"]
    if ts.workloads:
        parts.append("requests per grid workload: " + "; ".join(
            f"{name}: {(ts.workload_requests or {}).get(name, ts.requests):,} of {w.name} "
            f"({w.prompt.kind} prompt, {w.output.kind} output)" for name, w in ts.workloads.items()))
    else:
        parts.append(f"{ts.requests:,} {sim.workload.name} requests")
    untimed = df.height - timed.height
    brief = [f"{', '.join(gpus) or '-'}, {weights_words(ts.weight_format)}"
             + (f"; Orca on paged's scheduler ({sim.allocator})" if orca else "")]
    if untimed:
        reasons = df.filter(pl.col("time_gpu").is_null()).group_by("time_not_timed").len() \
            .sort(["len", "time_not_timed"], descending=[True, False]).iter_rows()
        text = (f"{untimed:,} of {df.height:,} point{'s' if df.height > 1 else ''} not timed: "
                + "; ".join(f"{n:,} {why or '-'}" for why, n in reasons))
        parts.append(text)
        brief.append(text)
    short_run = _short_run(ts)
    if short_run:
        parts.append(short_run)
        brief.append(short_run)
    parts.append(_constants_text(gpus))
    brief.append(_constants_text(gpus, brief=True))
    out: dict[str, Any] = {"setup": "; ".join(parts), "setup_short": "; ".join(brief),
                           "label": "Figures from kvdash's " + TIME_LABEL,
                           "label_short": f"Time model ({TIME_MODEL_ERROR}, benchmarks/results/steptime_validation.md)",
                           "points": [], "point_head": [], "rates": [], "more": "", "points_md": [],
                           "more_md": ""}
    label = Labels(spec, df)
    if ts.slo or ts.users:
        head = ["point", "KV holds (requests)"]
        if ts.slo:
            head += [f"users meeting {ts.slo_text} (p90)", "requests/s meeting it", "binds"]
        if ts.users:
            head += [f"TTFT p90 ms at {ts.users:,} user{'s' if ts.users > 1 else ''}", "TPOT p90 ms",
                     "tokens/s per GPU", "tokens/s per user"]
        rows = []
        for r in timed.head(MAX_ROWS).iter_rows(named=True):
            row = [label(r), _fmt(r["time_kv_requests"])]
            if ts.slo:
                row += _slo_cells(r)
            if ts.users:
                row += [_fmt(r["time_ttft_p90_ms"]), _fmt(r["time_tpot_p90_ms"]), _fmt(r["time_tokens_per_s_per_gpu"]),
                        _fmt(r["time_tokens_per_s_per_user"])]
            rows.append(row)
        out["point_head"], out["points"] = head, rows
        if timed.height > MAX_ROWS:
            out["more"] = f"the first {MAX_ROWS} of {timed.height:,} timed points (every one is in results.csv)"
        out["points_md"] = rows[:MD_ROWS]
        if timed.height > MD_ROWS:
            out["more_md"] = f"the first {MD_ROWS} of {timed.height:,} timed points (every one is in results.csv)"
    for k, wl in enumerate(rate_workloads(spec), start=1):
        sub = timed.filter(pl.col("workload").cast(pl.Utf8) == wl)
        if not sub.height:
            continue
        rates = ts.rates_of(wl) or []
        med = {pol: sub.select(pl.col(f"time_{pol}_rate").median()).item() for pol in ts.policies}
        rows = [[pol, _rate_cell(sub, pol, med[pol], rates, ts.latency_bound),
                 "-" if pol == "paged" or "paged" not in ts.policies or not med[pol] or med["paged"] is None
                 else ratio_text(med["paged"] / med[pol])] for pol in ts.policies]
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
        for pol in ts.policies:  # a policy keeps its colour whichever policies the grid lists
            ys = [sub.select(pl.col(f"time_{pol}_nlat_r{j}").median()).item() for j in range(len(rates))]
            series.append(("paged (vLLM)" if pol == "paged" else f"Orca ({pol})", policy_colour(pol), ys))
        median = f", the median of {sub.height:,} points" if sub.height > 1 else ""
        (out / f"time-rates-{k}.svg").write_text(svg.line_chart(
            rates, series, f"request rate, requests/s ({wl})", "normalized latency, s/token",
            (ts.latency_bound, f"bound {ts.latency_bound:g} s/token"),
            f"{wl}: normalized latency against request rate (kvdash's time model{median})"), encoding="utf-8")

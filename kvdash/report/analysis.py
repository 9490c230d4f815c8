"""The report's facts from the results frame: the decision, the gates, the mechanism, the headline, the
sensitivity and waste tables, the groups, the Mermaid chart's points, and :func:`build_context`, everything the
templates show (the grid's own sections, the claims and the exit criteria come from :mod:`kvdash.report.sections`).

A report answers the grid's question first (which configurations pass every gate, the best per workload
by the grid's objective, its margin and the runner-up), then the gates, the headline, why (the
mechanism), the claims, and the assumptions.  Points are named by the grid's swept dimensions.

Pure functions of the frame: no clocks, no files, stable ordering, fixed decimals."""

from __future__ import annotations

import hashlib
import re
import statistics
from concurrent.futures import Future
from typing import Any

import polars as pl

from kvdash import __version__
from kvdash.report.charts import charts_for
from kvdash.report.engines import engines_section, vllm_rows
from kvdash.report.labels import HEADERS, Labels, cell, num
from kvdash.report.picks import (
    DECISION_K,
    _best_per_workload,
    _blocks,
    _chart_points,
    _first_k,
    _order,
    _pair_key,
    _Picks,
    _range_median,
    _workloads,
    workload_stats,
)
from kvdash.report.sections import (
    NO_TUTORIAL_POINT,
    _assumption_lines,
    _claims,
    _dimensions,
    _exit_criteria,
    _models,
    _models_short,
    _prefix_cache,
    _prefix_columns,
    _simulation,
    _simulation_columns,
    engine_caps_text,
    judge_claims,
    reserve_line,
    reserve_text,
)
from kvdash.report.timesection import time_section
from kvdash.sweep.claims import Frame, Verdict, shared_where
from kvdash.sweep.columns import GPUS_PER_NODE, RESULT_COLUMNS
from kvdash.sweep.evaluate import Expanded
from kvdash.sweep.gates import (
    bounds_text,
    columns_of,
    evaluate_gates,
    passing_expr,
    scope_expr,
    shown_floor,
    slack_expr,
)
from kvdash.sweep.gridfile import Gate, GridSpec
from kvdash.units import ratio_text

HEADLINE_ALL = 16  # grids up to this many points are listed whole
HEADLINE_EACH = 6  # else the top and bottom this many by the objective
PARQUET_ABOVE = 100_000  # points: larger grids write results.parquet unless CSV is asked for
MERMAID_POINTS = 8
HEADLINE_WORST = 2


# --- the decision ------------------------------------------------------------------------------

def _engine_columns(spec: GridSpec) -> list[tuple[str, str, str]]:
    from kvdash.sweep.engines import engine_columns

    return engine_columns(spec)


def _objective_value(metric: str, v: Any) -> str:
    if v is None:
        return "-"
    return cell(metric, v) if metric in HEADERS or metric.endswith("_percent") else num(v)


def _decision(spec: GridSpec, df: pl.DataFrame, labels: Labels, picks: _Picks | None = None,
              refusals: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One or two computed sentences: what passes, the best per workload, its margin, the runner-up."""
    o = spec.objective
    cols = list(dict.fromkeys(["id", "workload", "paged_requests", "running_requests", "max_num_seqs", "gpus",
                               *labels.data_columns, o.metric]))
    gate_cols = [c for g in spec.gates for c in columns_of(g)]
    frame = df.select(list(dict.fromkeys(cols + gate_cols))).with_row_index("_row")
    if spec.gates:
        frame = frame.with_columns(passing_expr(spec).alias("_pass"))
        passing = frame.filter(pl.col("_pass"))
        share = shared_where(frame, "_pass", labels.columns) if 0 < passing.height < frame.height else ""
        head = (f"{passing.height:,} of {frame.height:,} configuration{'s pass' if frame.height != 1 else ' passes'} "
                "every gate"
                + (f" (those with {share})" if share else "") + ".")
    else:
        passing = frame
        head = ("No gates in this grid: its 1 configuration is the candidate." if frame.height == 1 else
                f"No gates in this grid: all {frame.height:,} configurations are candidates.")
    by, desc = _order(spec)
    lines = []
    tops = picks.rows(picks.best(DECISION_K), frame.columns[1:]) if picks is not None and not spec.gates else \
        _best_per_workload(spec, passing, DECISION_K)
    for w in _workloads(frame) if picks is None else picks.workloads:
        top = tops.filter(pl.col("workload").cast(pl.Utf8) == w).to_dicts()
        if not top:
            lines.append(f"**{w}**: no configuration passes every gate.")
            continue
        best = top[0]
        skip = ("workload",)
        text = (f"**{w}**: best is {labels(best, skip=skip)} with {_objective_value(o.metric, best[o.metric])} "
                f"{o.metric}")
        capped = best["running_requests"] < best["paged_requests"]
        # the cap by its engine's name: SGLang's is max_running_requests (resolve_max_num_reqs), vLLM's max_num_seqs
        cap = "max_running_requests" if best.get("engine") == "sglang" else "max_num_seqs"
        per_gpu = o.metric in ("paged_requests_per_gpu", "running_requests_per_gpu")
        if o.metric not in ("paged_requests", "running_requests") and (not per_gpu or best["gpus"] > 1 or capped):
            gpus = f"{best['gpus']} GPU{'s' if best['gpus'] > 1 else ''}"
            text += (f" ({best['running_requests']:,} run at once on {gpus}: {best['paged_requests']:,} fit, "
                     f"{cap} {best['max_num_seqs']:,})" if capped else
                     f" ({best['running_requests']:,} requests on {gpus})")
        elif o.metric == "running_requests" and capped:
            text += f" ({best['paged_requests']:,} fit, {cap} {best['max_num_seqs']:,})"
        margins = []
        for g in spec.gates:
            one = pl.DataFrame([best]).select(scope_expr(g).alias("s"), slack_expr(g).alias("m")).row(0)
            if one[0] and one[1] is not None:
                margins.append((one[1], g))
        if margins:
            m, g = min(margins, key=lambda t: t[0])
            unit = " ms" if g.metric.endswith("_ms") else ""  # a time column's margin is in its unit
            text += (f", {num(m if not float(m).is_integer() else int(m))}{unit} inside the gate '{g.name}' "
                     f"({g.metric} {bounds_text(g)})")
        ties = [r for r in top[1:] if r[o.metric] == best[o.metric]]
        if ties:  # each tie by what differs from the best, one apart from the next (a label may hold commas)
            text += "; tied: " + " / ".join(labels.differing(r, best) for r in ties[:3]) + \
                    (f" / {len(ties) - 3} more" if len(ties) > 3 else "")
        second = next((r for r in top[1:] if r[o.metric] != best[o.metric]), None)
        a = best[o.metric]
        if second is not None:
            b = second[o.metric]
            rel = f" ({(b - a) / a:+.1%})" if a else ""
            text += f"; runner-up {labels.differing(second, best)} with {_objective_value(o.metric, b)}{rel}"
        elif len(top) == 1:
            text += "; no runner-up passes"
        lines.append(text + ".")
    engines = engines_section(spec, df, refusals or [])  # grid: engine: both engines weighed on the same hardware
    if engines:
        lines += engines["decision"]
    return {"question": spec.question, "head": head, "lines": lines,
            "objective": f"{o.text()}{'' if o.given else ' (the default objective)'}"
                         + (" among points passing every gate" if spec.gates else "")}


def _mechanism(spec: GridSpec, df: pl.DataFrame) -> str:
    """Why paging multiplies capacity here: contiguous Max stores each request's reservation, paging only the
    blocks it fills, so paged / contiguous is about reservation / tokens held; computed per workload."""
    stats = workload_stats(df)
    parts = []
    for r in stats.iter_rows(named=True):
        w = spec.workloads[r["workload"]]
        held = statistics.fmean(w.lengths)
        computed = "no contiguous fit" if r["lo"] is None else (
            ratio_text(r["lo"]) if ratio_text(r["lo"]) == ratio_text(r["hi"]) else
            f"{ratio_text(r['lo'])} to {ratio_text(r['hi'])}, median {ratio_text(r['med'])}")
        parts.append(f"{w.name} {w.max_reserved:,} / {held:,.0f} = {ratio_text(w.max_reserved / held, suffix='')} "
                     f"(computed {computed})")
    return ("Paged / contiguous capacity is about reservation / tokens held, because contiguous Max stores every "
            "request's whole reservation and paging only the blocks it fills: " + "; ".join(parts) + ".")


def _gate_shown(g: Gate, row: dict[str, Any]) -> str:
    """A gate's value at a point; a floor the gate fell back on (no limit found) is written as one."""
    floor = shown_floor(g, row)
    return num(row[g.metric]) if floor is None else f"≥ {num(floor)}"


def _gates(spec: GridSpec, df: pl.DataFrame, labels: Labels) -> list[list[str]]:
    rows = []
    for r in evaluate_gates(spec, df, labels.data_columns):
        g = r.gate
        where = " AND ".join(f"{d} = {', '.join(map(str, v))}" for d, v in g.where.items()) or "every point"
        best = worst = "-"
        fixed = tuple(c for c in g.where if len(g.where[c]) == 1)
        if "gpu" in fixed and "tp" in fixed:  # "8 x h200" is said by the gate's scope
            fixed += ("gpu",)
        skip = tuple(c for c in fixed if c != "gpu" or "tp" in fixed)
        if r.best is not None and r.worst is not None:
            named = any(c not in skip for c in labels.columns)  # the scope may name the point already
            best, worst = (f"{labels(row, skip=skip)}: {_gate_shown(g, row)}" if named else _gate_shown(g, row)
                           for row in (r.best, r.worst))
        margin = "-" if r.margin is None else num(int(r.margin) if float(r.margin).is_integer() else r.margin)
        if r.margin is not None and r.worst is not None and shown_floor(g, r.worst) is not None:
            margin = f"≥ {margin}"  # judged on a floor: the limit, and so the margin, may be larger
        if r.unvalued:  # they fail the gate without a value to show
            worst += f" ({r.unvalued:,} point{'' if r.unvalued == 1 else 's'} without a value)"
        rows.append([g.name, f"{g.metric} {bounds_text(g)}", where, f"{r.passing:,} / {r.failing:,}", best, worst,
                     margin])
    return rows


# --- tables --------------------------------------------------------------------------------------

def _headline(spec: GridSpec, df: pl.DataFrame, labels: Labels, picks: _Picks | None = None) -> dict[str, Any]:
    """The points by the objective: every point of a small grid (per workload), else the best and the worst
    that fit.  Label columns with one value everywhere are stated once above the table."""
    gpus = df.get_column("gpus")
    metrics = ["contiguous_requests", "paged_requests"]
    if df.height and (df.get_column("running_requests") < df.get_column("paged_requests")).any():
        metrics.append("running_requests")  # vLLM's max_num_seqs is below what fits somewhere
    if gpus.max() and gpus.max() > 1:  # type: ignore[operator]
        metrics.append("paged_requests_per_gpu")
    if labels.has_gpu and (gpus != GPUS_PER_NODE).any():
        metrics.append("paged_requests_per_node")
    metrics.append("request_capacity_ratio")
    if "budget_bytes" not in labels.columns:
        metrics.insert(0, "budget_bytes")
    if df.height and df.get_column("prefix").max():
        metrics.append("requests_with_prefix_sharing")
    o = spec.objective.metric
    cols = list(dict.fromkeys(["id", *labels.data_columns, *metrics, o, "workload", "fits"]))
    narrow = df.select(cols).with_row_index("_row")
    gated = False
    if spec.gates:
        narrow = df.select(*cols, *dict.fromkeys(c for g in spec.gates for c in columns_of(g) if c not in cols)) \
            .with_columns(passing_expr(spec).alias("_pass")).select(*cols, "_pass").with_row_index("_row")
        gated = not narrow.get_column("_pass").all()  # a column of "pass" only says nothing
    by, desc = _order(spec)
    reverse = [not d for d in desc]
    small = narrow.height <= HEADLINE_ALL
    if small:
        ordered = narrow.with_columns(pl.col("workload").to_physical().alias("_w")) if isinstance(
            narrow.schema["workload"], pl.Enum) else narrow.with_columns(pl.lit(0).alias("_w"))
        shown = [ordered.sort(["_w", *by], descending=[False, *desc], nulls_last=True)]
    else:
        present = _workloads(narrow) if picks is None else picks.workloads
        each = max(2, HEADLINE_EACH // len(present))  # per workload: 2k and 128k do not compare
        shared = picks if not spec.gates else None  # searched once for the decision and the charts
        if shared is not None and shared.charts:
            worst = shared.rows(shared.worst(HEADLINE_WORST), cols)
        elif narrow.get_column(by[0]).null_count() == 0:
            worst = _first_k(narrow, HEADLINE_WORST, by[0], not desc[0], True, pl.col("fits"))
        else:
            worst = narrow.filter(pl.col("fits")).bottom_k(HEADLINE_WORST, by=by, reverse=reverse)
        best = shared.rows(shared.best(each), cols) if shared is not None else _best_per_workload(spec, narrow, each)
        shown = [best, worst.sort(by, descending=desc, nulls_last=True)]
    every = pl.concat(shown)
    varying, constant = [], []
    for c in labels.columns:
        texts = {labels.part(c, r) for r in every.iter_rows(named=True)}
        (varying if len(texts) > 1 else constant).append(c)
    first = every.row(0, named=True) if every.height else {}
    headers = [HEADERS[c] for c in varying] + [HEADERS[c] if c != "running_requests" or "engine" not in df.columns
                                               else "runs (engine's cap)" for c in metrics] \
        + (["gates"] if gated else [])

    def rows(frame: pl.DataFrame) -> list[list[str]]:
        out = []
        for r in frame.iter_rows(named=True):
            out.append([labels.part(c, r) if c == "gpu" else cell(c, r[c]) for c in varying]
                       + [cell(c, r[c]) for c in metrics] + (["pass" if r["_pass"] else "FAIL"] if gated else []))
        return out

    unfit = 0 if small else narrow.height - narrow.get_column("fits").sum()
    return {"headers": headers, "all": rows(shown[0]) if small else [], "top": [] if small else rows(shown[0]),
            "each": 0 if small else each,
            "bottom": [] if small else rows(shown[1]),
            "every": ", ".join(f"{HEADERS[c]} {labels.part(c, first)}" for c in constant),
            "unfit": f"{unfit:,} points leave no memory for the KV cache (fits = no) and are not among the worst"
                     if unfit else ""}


def _sensitivity(spec: GridSpec, df: pl.DataFrame, labels: Labels, picks: _Picks | None = None) -> dict[str, Any]:
    """For every swept dimension: median paged requests per value, per workload (a median over workloads of 2k
    and 128k tokens would mean nothing); for models also the median paged / contiguous ratio.

    Where the points come in workload blocks (:func:`_blocks`), one group-by of the blocks (a tenth of the
    points for ten workloads) by each dimension's value takes every workload's median at once, workload ``j``'s
    over the ``j``-th point of each block: the same points, so the same medians.

    Else one group-by of the points per dimension.  The models' ratio median is then taken in the models' own
    group-by when every ratio is finite or null and none is -0.0 (polars' median then equals the value-count
    median of :func:`_range_median`, which is kept for NaN, infinities and -0.0: 1 / -0.0 = -inf finds it)."""
    workloads = _workloads(df) if picks is None else picks.workloads
    dims = [c for c in labels.swept if c != "workload"]  # the GPU and the TP degree apart: fewer rows
    blocks = _blocks(df, dims, workloads) if df.get_column("paged_requests").null_count() == 0 else None
    if blocks is not None:
        return {"workloads": workloads, "tables": _sensitivity_blocks(df, dims, blocks, workloads)}
    paged, ratio = pl.col("paged_requests"), pl.col("request_capacity_ratio")
    odd_ratio = df.schema["request_capacity_ratio"].is_float() and df.select(
        (ratio.is_nan() | ratio.is_infinite() | (1.0 / ratio == float("-inf"))).any()).item()
    lazy = df.lazy()
    queries = []
    joined = False  # the models' ratio median taken in their paged-requests group-by
    for col in dims:
        key = _pair_key(df, col)
        named = [] if len(key) == 2 else [pl.col(col).first(), pl.col("workload").first()]
        extra = []
        if col == "model" and not odd_ratio:
            extra, joined = [ratio.median().alias("ratio")], True
        queries.append(lazy.group_by(*key, maintain_order=True).agg(
            *named, paged.median().alias("med"), *extra).select(col, "workload", "med", *(["ratio"] if extra else [])))
    # else the models' ratio medians from value counts (few distinct ratios per model and workload)
    queries.append(_range_median(lazy, ["model", "workload"], "request_capacity_ratio", ("_lo", "_hi", "ratio"))
                   if "model" in dims and not joined else pl.LazyFrame({"model": [], "workload": [], "ratio": []}))
    *results, model_ratio = pl.collect_all(queries)  # in parallel
    if joined:
        model_ratio = results[dims.index("model")]
    ratios = {(str(m), str(w)): r for m, w, r in model_ratio.select("model", "workload", "ratio").iter_rows()
              if r is not None}
    tables = []
    for col, stats in zip(dims, results, strict=True):
        values = stats.get_column(col).unique(maintain_order=True)  # groups in order: the values as they appear
        if values.len() < 2:
            continue
        cells: dict[Any, dict[str, str]] = {}
        for v, w, med, *_ in stats.iter_rows():
            value = ratios.get((str(v), str(w))) if col == "model" else None
            text = "" if value is None else f" ({ratio_text(value)})"
            cells.setdefault(v, {})[str(w)] = f"{med:,.0f}{text}"
        rows = [[cell(col, v), *[cells[v].get(w, "-") for w in workloads]] for v in values.to_list()]
        tables.append({"dimension": "GPU" if col == "gpu" else HEADERS[col], "rows": rows})
    return {"workloads": workloads, "tables": tables}


def _sensitivity_blocks(df: pl.DataFrame, dims: list[str], blocks: list[int], workloads: list[str]
                        ) -> list[dict[str, Any]]:
    n = len(blocks)
    wtype = df.schema["workload"]
    assert isinstance(wtype, pl.Enum)
    names = [str(wtype.categories[c]) for c in blocks]
    order = [names.index(w) for w in workloads]  # the table's workload columns, in the grid's order
    ratio = pl.col("request_capacity_ratio")
    has_model = "model" in dims
    odd_ratio = df.schema["request_capacity_ratio"].is_float() and has_model and not all(df.select(
        ratio.is_finite().all().alias("finite"), (ratio != 0).all().alias("nonzero")).row(0)) and df.select(
        (ratio.is_nan() | ratio.is_infinite() | (1.0 / ratio == float("-inf"))).any()).item()  # no zero: no -0.0
    wide = df.select(*[pl.col(d).gather_every(n) for d in dims], pl.col("paged_requests").reshape((-1, n)).alias("_p"),
                     *([ratio.reshape((-1, n)).alias("_r")] if has_model and not odd_ratio else []))
    wide = wide.select(*dims, *[pl.col("_p").arr.get(j).alias(f"_p{j}") for j in range(n)],
                       *[pl.col("_r").arr.get(j).alias(f"_r{j}") for j in range(n) if "_r" in wide.columns])
    lazy = wide.lazy()
    queries = [lazy.group_by(d, maintain_order=True).agg(
        *[pl.col(f"_p{j}").median() for j in range(n)],
        *[pl.col(f"_r{j}").median() for j in range(n) if d == "model" and f"_r{j}" in wide.columns]) for d in dims]
    if has_model and odd_ratio:  # the ratio's value-count median (NaN, infinities, -0.0)
        queries.append(_range_median(df.lazy(), ["model", "workload"], "request_capacity_ratio", ("_lo", "_hi", "r")))
    results = pl.collect_all(queries)
    ratios: dict[tuple[str, int], float] = {}
    if has_model and odd_ratio:
        found = results[-1].select("model", "workload", "r").iter_rows()
        ratios = {(str(m), names.index(str(w))): r for m, w, r in found if r is not None}
    tables = []
    for d, stats in zip(dims, results[:len(dims)], strict=True):
        if stats.height < 2:
            continue
        rows = []
        for r in stats.iter_rows():
            if d == "model" and not odd_ratio:
                ratios.update({(str(r[0]), j): r[1 + n + j] for j in range(n) if r[1 + n + j] is not None})
            texts = []
            for j in order:
                value = ratios.get((str(r[0]), j)) if d == "model" else None
                texts.append(f"{r[1 + j]:,.0f}" + ("" if value is None else f" ({ratio_text(value)})"))
            rows.append([cell(d, r[0]), *texts])
        tables.append({"dimension": "GPU" if d == "gpu" else HEADERS[d], "rows": rows})
    return tables


def _waste(df: pl.DataFrame, spec: GridSpec) -> list[list[str]]:
    stats = workload_stats(df)

    def rng(lo: float | None, hi: float | None) -> str:
        if lo is None or hi is None:
            return "-"
        return f"{lo:.2f} %" if lo == hi else f"{lo:.2f} to {hi:.2f} %"

    rows = []
    for r in stats.iter_rows(named=True):
        wl = spec.workloads[r["workload"]]
        rows.append([wl.name, ", ".join(f"{n:,}" for n in wl.lengths), f"{wl.max_reserved:,}", rng(r["rlo"], r["rhi"]),
                     rng(r["plo"], r["phi"]),
                     f"{r['tlo']:,} to {r['thi']:,}" if r["tlo"] != r["thi"] else f"{r['tlo']:,}"])
    return rows


GROUP_COLS = ("useful_slots", "allocated_slots", "tail_waste_slots", "complete_groups", "contiguous_complete_groups",
              "offload_tokens", "offload_useful_bytes", "offload_allocated_bytes")
GROUP_HEADERS = ["useful slots/group", "allocated slots/group", "tail waste slots/group", "whole groups (paged)",
                 "whole groups (contiguous Max)", "offloaded request", "offload: useful bytes",
                 "offload: allocated-block bytes"]


def _groups(df: pl.DataFrame, labels: Labels) -> dict[str, Any]:
    """Workloads of several requests: the tutorial exercise's figures (at most HEADLINE_ALL rows)."""
    cols = list(dict.fromkeys([*labels.data_columns, *GROUP_COLS]))
    several = df.select(Frame(df).helper("_several_lengths").alias("m")).to_series()  # once: counted, then the first
    total = several.sum()
    multi = df.select(cols).gather(several.arg_true().head(HEADLINE_ALL))
    rows = [labels.cells(r) + [cell(c, r[c]) for c in GROUP_COLS] for r in multi.iter_rows(named=True)]
    return {"headers": [HEADERS[c] for c in labels.columns] + GROUP_HEADERS, "rows": rows, "total": total}


def _mermaid(spec: GridSpec, df: pl.DataFrame, labels: Labels, picks: _Picks | None = None) -> dict[str, Any]:
    """Data for a GitHub-rendered ``xychart-beta``: paged (bars) and contiguous (line) requests, x labels from
    the swept dimensions' values (their order named under the chart)."""
    picked, note = _chart_points(spec, df, labels, MERMAID_POINTS, picks)
    rows = list(picked.iter_rows(named=True))
    constant = tuple(c for c in labels.columns if len({labels.part(c, r) for r in rows}) == 1 and len(rows) > 1)
    order = ", ".join(HEADERS[c] for c in labels.columns if c not in constant)
    if constant and rows:
        order += " (every point: " + ", ".join(labels.part(c, rows[0]) for c in constant) + ")"
    def quoted(text: str) -> str:  # a mermaid string on one line: no quotes, no markup, no fence
        return '"' + re.sub(r'[<>"\\`]', "", re.sub(r"[\x00-\x1f\x7f]", " ", text)) + '"'

    return {"labels": ", ".join(quoted(labels(r, short=True, skip=constant)) for r in rows),
            "paged": ", ".join(str(r["paged_requests"]) for r in rows),
            "contiguous": ", ".join(str(r["contiguous_requests"]) for r in rows),
            "n": len(rows), "note": note, "order": order}


def build_context(spec: GridSpec, expanded: Expanded, results: str = "results.csv",
                  verdicts: list[Verdict] | Future[list[Verdict]] | None = None) -> dict[str, Any]:
    """Everything the templates show.  ``verdicts``: :func:`judge_claims` already judged, or a future of it
    (being judged in another thread: it is waited for only after every other table is built)."""
    df = expanded.frame
    labels = Labels(spec, df)
    picks = _Picks(spec, df)
    n = df.height
    ctx = {
        "title": spec.title,
        "description": spec.description,
        "reserve_line": reserve_line(spec, df, labels.has_gpu) + (
            " SGLang's rows take no reserve: SGLang holds back (1 - mem_fraction_static) of the free memory instead "
            "(Engines compared)." if "sglang" in spec.engines else ""),
        "engine_caps": engine_caps_text(vllm_rows(df)),
        "version": __version__,
        "grid_name": spec.path.name,
        "grid_sha256": hashlib.sha256(spec.text.encode()).hexdigest(),
        "points": n,
        "points_before_exclude": expanded.size_before_exclude,
        "results": results,
        "results_note": (f"Parquet: the grid has more than {PARQUET_ABOVE:,} points (--csv writes CSV)"
                         if results.endswith(".parquet") else ""),
        "decision": _decision(spec, df, labels, picks, expanded.engine_refusals),
        "gates": _gates(spec, df, labels),
        "mechanism": _mechanism(spec, df),
        "label_names": labels.names,
        "assumptions": _assumption_lines(df),
        "models": _models(spec),
        "models_short": _models_short(spec),
        "workloads": [[w.name, ", ".join(f"{x:,}" for x in w.lengths)
                       + ("" if w.finals == w.lengths else f" (final {', '.join(f'{x:,}' for x in w.finals)})"),
                       f"{w.max_reserved:,}", f"{w.prefix:,}", w.description] for w in spec.workloads.values()],
        "dimensions": _dimensions(spec, vllm_rows(df)),
        "headline": _headline(spec, df, labels, picks),
        "groups": _groups(df, labels),
        "mermaid": _mermaid(spec, df, labels, picks),
        "sensitivity": _sensitivity(spec, df, labels, picks),
        "waste": _waste(df, spec),
        "charts": charts_for(spec),
        "columns": RESULT_COLUMNS + _engine_columns(spec) + (_simulation_columns(spec) if spec.simulate else [])
        + _prefix_columns(spec),
        "engines": engines_section(spec, df, expanded.engine_refusals),
        "simulation": _simulation(spec, df),
        "time": time_section(spec, df, spec.dimensions),
        "prefix_cache": _prefix_cache(spec, df),
    }
    judged = judge_claims(spec, df) if verdicts is None else \
        verdicts.result() if isinstance(verdicts, Future) else verdicts
    exit_rows = _exit_criteria(df, judged)
    evaluable = [r for r in exit_rows if r[1] != "not evaluable"]
    tutorial_config = not any(r[2] == NO_TUTORIAL_POINT for r in exit_rows)
    ctx["claims"] = _claims(judged, reserve_text(spec) if labels.has_gpu else
                            "explicit KV budget per rank (no runtime reserve applies)")
    ctx["exit_criteria"] = exit_rows if tutorial_config else []
    ctx["exit_summary"] = "" if tutorial_config else (
        f"not evaluable here (no point of the tutorial's configuration); the {len(evaluable)} that do not need "
        "one are in report.html")
    return ctx

"""Reports from sweep results: the context every template shares, charts, and atomic writes.

A report answers the grid's question first (which configurations pass every gate, the best per workload
by the grid's objective, its margin and the runner-up), then the gates, the headline, why (the
mechanism), the claims, and the assumptions.  Points are named by the grid's swept dimensions.

Everything here is deterministic: no clocks, stable ordering, fixed decimals, SVGs written as text.
Two runs over the same grid write byte-identical files.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import statistics
from collections.abc import Callable
from concurrent.futures import Future
from importlib import resources
from pathlib import Path
from typing import Any

import polars as pl

from kvdash import __version__
from kvdash.engines.vllm import rank_shapes
from kvdash.report import svg
from kvdash.sweep.claims import Frame, Verdict, judge_all, shared_where
from kvdash.sweep.columns import GPUS_PER_NODE, RESULT_COLUMNS
from kvdash.sweep.evaluate import DEFAULTS, Expanded
from kvdash.sweep.gates import bounds_text, evaluate_gates, passing_expr, scope_expr, slack_expr
from kvdash.sweep.gridfile import GridSpec
from kvdash.units import RATIO_DECIMALS, GiB, gib_text, ratio_text

HEADLINE_ALL = 16  # grids up to this many points are listed whole
HEADLINE_EACH = 6  # else the top and bottom this many by the objective
PARQUET_ABOVE = 100_000  # points: larger grids write results.parquet unless CSV is asked for
MERMAID_POINTS = 8
HEADLINE_WORST = 2
CHART_POINTS = 24
CHARTS = ("capacity.svg", "ratio.svg", "waste.svg")

# label order, and how each swept column is written in a point's label
LABEL_ORDER = ("model", "gpu", "tp", "pp", "kv_dtype", "kv_scales", "block_size", "budget_bytes", "gpu_util",
               "util_policy", "max_model_len", "max_batched_tokens", "workload")
HEADERS = {
    "model": "model", "gpu": "GPUs", "tp": "TP", "pp": "PP", "kv_dtype": "KV dtype", "kv_scales": "KV scales",
    "block_size": "block", "budget_bytes": "KV budget/rank", "gpu_util": "util", "util_policy": "util policy",
    "max_model_len": "max_model_len", "max_batched_tokens": "batched tokens", "workload": "workload",
    "contiguous_requests": "contiguous (Max)", "paged_requests": "paged", "paged_requests_per_gpu": "paged/GPU",
    "paged_requests_per_node": f"paged/{GPUS_PER_NODE}-GPU node", "request_capacity_ratio": "paged / contig.",
    "requests_with_prefix_sharing": "paged, prefix shared", "bytes_per_token": "KV B/token",
    "running_requests": "vLLM runs", "running_requests_per_gpu": "runs/GPU", "max_num_seqs": "max_num_seqs",
}


def charts_for(spec: GridSpec) -> tuple[str, ...]:
    return CHARTS + (("simulation.svg",) if spec.simulate else ()) + (
        ("simulation-capacity.svg",) if spec.simulate and spec.simulate.rates else ()) + (
        ("prefix-cache.svg",) if spec.prefix_cache and spec.prefix_cache.capacities else ())


def _prefix_point(df: pl.DataFrame) -> dict[str, Any]:
    return df.select("model", "kv_dtype", "tp", "block_size", "bytes_per_token", "block_bytes",
                     "kv_token_slots").row(0, named=True)


def _prefix_cache(spec: GridSpec, df: pl.DataFrame) -> dict[str, Any] | None:
    """The ``prefix_cache:`` section: each point's hit rate, and the hit-rate curve per tier at the first point."""
    pc = spec.prefix_cache
    if pc is None:
        return None
    from kvdash.commands.simulate_prefix import _assumptions
    from kvdash.core import tiers as T
    from kvdash.sweep.simulation import prefix_curve, tier_spec

    rows = []
    for r in df.select("model", "kv_dtype", "tp", "kv_token_slots", "pc_gpu_tokens", "pc_cpu_tokens",
                       "pc_hit_percent", "pc_requests_hit_percent", "pc_evictions").iter_rows(named=True):
        cpu = r["pc_cpu_tokens"]
        rows.append([str(r["model"]), str(r["kv_dtype"]), str(r["tp"]), f"{r['pc_gpu_tokens'] or 0:,}",
                     "-" if cpu is None else "unbounded" if cpu == -1 else f"{cpu:,}",
                     "-" if r["pc_hit_percent"] is None else f"{r['pc_hit_percent']:.2f}",
                     "-" if r["pc_requests_hit_percent"] is None else f"{r['pc_requests_hit_percent']:.2f}",
                     "-" if r["pc_evictions"] is None else f"{r['pc_evictions']:,}"])
    first = _prefix_point(df)
    ts = tier_spec(pc, first["kv_token_slots"], first["block_size"], first["bytes_per_token"], first["block_bytes"],
                   first["tp"])
    sized = {}
    for name, size in pc.offload.items():
        if size is not None:
            sized[name] = (T.vllm_cpu_tier(size, first["block_bytes"], first["tp"], first["block_size"])
                           if pc.rules == "vllm" else T.lmcache_tier(size, first["bytes_per_token"] * first["tp"]))
    curve, curve_rows, tier_rows = [], [], []
    if pc.capacities:
        curve = prefix_curve(pc, first["block_size"], first["bytes_per_token"], first["block_bytes"], first["tp"],
                             first["kv_token_slots"])
        for pt in curve:
            cap = "unbounded" if pt["capacity_tokens"] is None else f"{pt['capacity_tokens']:,}"
            curve_rows.append([cap, *(f"{100 * t['hit_rate']:.2f}" for t in pt["tiers"].values()),
                               f"{100 * pt['hit_rate']:.2f}"])
            for name, t in pt["tiers"].items():
                tier_rows.append([cap, name, f"{100 * t['hit_rate']:.2f}", f"{t['bytes_loaded']:,}",
                                  f"{t['bytes_stored']:,}", f"{t['evictions']:,}",
                                  "-" if t["occupancy_peak"] is None or not t["capacity_units"] else
                                  f"{100 * t['occupancy_mean'] / t['capacity_units']:.1f}"])
    w = pc.workload
    setup = (f"{len(w):,} requests of {pc.label} ({w.note}), {w.prompt_tokens:,} prompt tokens, rules {pc.rules}"
             + (f", CPU eviction {pc.cpu_policy}" if pc.rules == "vllm" else "")
             + f"; the curve at the first point ({first['model']}, {first['kv_dtype']}, TP {first['tp']}) over the "
             + (f"{curve[0]['tier']} tier's capacity" if curve else "-"))
    return {"setup": setup, "rows": rows, "assumptions": _assumptions(pc.rules, ts, sized, T.gpu_host_link(None),
                                                                      T.links()["nvme-gen4"], w, pc.concurrency),
            "curve_head": ["capacity, tokens", *(list(curve[0]["tiers"]) if curve else []), "total"],
            "curve_rows": curve_rows, "tier_rows": tier_rows, "curve": curve}


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


def gib(n: int | None) -> str:
    return "-" if n is None else f"{gib_text(n)} GiB"


def num(x: Any, decimals: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        return f"{x:,.{decimals}f}"
    return str(x)


def cell(col: str, value: Any) -> str:
    if col == "budget_bytes":
        return gib(value)
    if col == "request_capacity_ratio":
        return ratio_text(value)
    if col in ("paged_requests_per_gpu", "running_requests_per_gpu"):
        return "-" if value is None else f"{value:,.1f}"
    if col.endswith("_percent"):
        return "-" if value is None else f"{value:.2f} %"
    return num(value)


# --- naming points by the swept dimensions -----------------------------------------------------

class Labels:
    """Names points by the dimensions the grid sweeps (the GPU always, when the grid has one), e.g.
    ``llama-3.1-70b, 8 x h100-80gb, fp8, block 16, chat``."""

    def __init__(self, spec: GridSpec, df: pl.DataFrame) -> None:
        swept: set[str] = set()
        for factor in spec.factors:
            for dim, vals in factor.items():
                if len({repr(v) for v in vals}) > 1:
                    swept.add("budget_bytes" if dim in ("budget", "gpu_memory", "weights", "reserve") else dim)
        self.has_gpu = df.height > 0 and df.get_column("gpu").null_count() < df.height
        if self.has_gpu:
            swept.add("gpu")
        self.swept = [c for c in LABEL_ORDER if c in swept]
        if self.has_gpu and "tp" in swept:
            swept.discard("tp")  # "8 x h100-80gb" says it
        self.columns = [c for c in LABEL_ORDER if c in swept]
        self.spec = spec

    @property
    def data_columns(self) -> list[str]:
        """Result columns a label reads."""
        extra = ["tp", "pp"] if self.has_gpu else []
        return list(dict.fromkeys([*self.columns, *extra]))

    @property
    def names(self) -> str:
        """The label's parts in order, for a legend: ``model, GPUs, KV dtype, block, workload``."""
        return ", ".join(HEADERS[c] for c in self.columns)

    def part(self, col: str, row: dict[str, Any], short: bool = False) -> str:
        v = row[col]
        if col == "gpu":
            if v is None:
                return "explicit budget"
            gpus = row["tp"] * row["pp"]
            text = f"{gpus}x{v}" if short else f"{gpus} x {v}"
            return text + (f" (TP {row['tp']}, PP {row['pp']})" if row["pp"] > 1 and not short else "")
        if v is None:
            return "-"
        if short:
            return gib(v).replace(" ", "") if col == "budget_bytes" else str(v)
        if col == "budget_bytes":
            return f"{gib(v)}/rank"
        if col == "max_model_len":
            return f"max_model_len {v:,}"
        if col == "max_batched_tokens":
            return f"{v:,} batched"
        return {"block_size": "block {}", "tp": "TP {}", "pp": "PP {}", "gpu_util": "util {}",
                "util_policy": "{} policy", "kv_scales": "{} scales"}.get(col, "{}").format(v)

    def __call__(self, row: dict[str, Any], short: bool = False, skip: tuple[str, ...] = ()) -> str:
        parts = [self.part(c, row, short) for c in self.columns if c not in skip]
        return (" " if short else ", ").join(parts) or str(row.get("id", "the point"))

    def differing(self, row: dict[str, Any], base: dict[str, Any]) -> str:
        """Only the parts of ``row``'s label that differ from ``base``'s."""
        parts = [self.part(c, row) for c in self.columns if self.part(c, row) != self.part(c, base)]
        return ", ".join(parts) or self(row)

    def cells(self, row: dict[str, Any]) -> list[str]:
        return [self.part(c, row) if c == "gpu" else cell(c, row[c]) for c in self.columns]


# --- the decision ------------------------------------------------------------------------------

def _objective_value(metric: str, v: Any) -> str:
    if v is None:
        return "-"
    return cell(metric, v) if metric in HEADERS or metric.endswith("_percent") else num(v)


def _order(spec: GridSpec) -> tuple[list[str], list[bool]]:
    o = spec.objective
    return [o.metric, "_row"], [o.maximize, False]  # ties: the earlier point in the grid's order


def _workloads(df: pl.DataFrame) -> list[str]:
    """The workloads present, in the grid's order."""
    col = df.get_column("workload")
    if isinstance(col.dtype, pl.Enum):
        cats = col.dtype.categories.to_list()
        code = pl.col("workload").to_physical()
        if len(cats) > 64:
            seen = set(col.to_physical().unique().to_list())
            return [c for i, c in enumerate(cats) if i in seen]
        # one comparison per category (a few): cheaper than hashing every point
        present = df.select([(code == i).any().alias(str(i)) for i in range(len(cats))]).row(0) if cats else ()
        return [c for c, there in zip(cats, present, strict=True) if there]
    return list(dict.fromkeys(col.cast(pl.Utf8).to_list()))


def _first_k(frame: pl.DataFrame, k: int, metric: str, desc_metric: bool, desc_row: bool,
             mask: pl.Expr | None = None) -> pl.DataFrame:
    """The first ``k`` rows of ``frame`` (where ``mask``) in the order (``metric``, ``_row``), each descending as
    asked: the k-th value of the metric is found first (one column), so only the rows at or beyond it are
    sorted, never the whole frame.  The metric must have no nulls."""
    m = pl.col(metric)
    values = m if mask is None else m.filter(mask)
    thr = frame.select((values.top_k(k).min() if desc_metric else values.bottom_k(k).max()).alias("t")).item()
    if thr is None:
        return frame.clear()
    cond = m >= thr if desc_metric else m <= thr
    return frame.filter(cond if mask is None else cond & mask).sort([metric, "_row"], descending=[desc_metric,
                                                                                                   desc_row]).head(k)


def _best_per_workload(spec: GridSpec, frame: pl.DataFrame, k: int, workloads: list[str] | None = None
                       ) -> pl.DataFrame:
    """The ``k`` best points of every workload by the objective (ties: the earlier point), in one pass; rows
    in the grid's workload order, best first.  ``frame`` needs ``_row``.  Each workload's k-th best value is
    found first, so only the points at or beyond it are sorted."""
    by, desc = _order(spec)
    metric = by[0]
    m = pl.col(metric)
    kth = frame.lazy().filter(m.is_not_null()).group_by("workload").agg(
        (m.top_k(k).min() if desc[0] else m.bottom_k(k).max()).alias("_kth"))
    wtype = frame.schema["workload"]
    if isinstance(wtype, pl.Enum):  # each point's threshold gathered by its workload's code: no join
        code = pl.col("workload").to_physical()
        if len(wtype.categories) <= 64:  # one filtered top-k per category (a few): cheaper than a group-by
            nulls = frame.get_column(metric).null_count() > 0
            one = [m.filter((code == i) & m.is_not_null() if nulls else code == i)
                   for i in range(len(wtype.categories))]
            firsts = frame.select([(v.top_k(k).min() if desc[0] else v.bottom_k(k).max()).alias(str(i))
                                   for i, v in enumerate(one)]).row(0) if one else ()
            series = pl.Series(firsts, dtype=frame.schema[metric])
        else:
            table = kth.collect()
            series = pl.Series([None] * len(wtype.categories), dtype=table.schema["_kth"]).scatter(
                table.get_column("workload").to_physical(), table.get_column("_kth"))
        thr = pl.lit(series).gather(code)
        rows = frame.lazy().filter(m >= thr if desc[0] else m <= thr)
    else:
        rows = frame.lazy().join(kth, on="workload", how="inner").filter(
            m >= pl.col("_kth") if desc[0] else m <= pl.col("_kth")).drop("_kth")
    rows = rows.sort(by, descending=desc).group_by("workload", maintain_order=True).head(k).collect()
    rows = rows.select(frame.columns)
    order = {w: i for i, w in enumerate(_workloads(frame) if workloads is None else workloads)}
    return rows.with_columns(pl.col("workload").cast(pl.Utf8).replace_strict(order, return_dtype=pl.UInt32)
                             .alias("_w")).sort(["_w", *by], descending=[False, *desc]).drop("_w")


DECISION_K = 8  # the decision reads each workload's best 8: the best, its ties and the runner-up


class _Picks:
    """The points several tables name, each search done once per report, on the few columns it reads (the row,
    the objective, the workload or ``fits``); the columns a table shows are gathered for those rows afterwards.

    * :meth:`best`: each workload's best by the objective over every point, searched once for
      :data:`DECISION_K` (the decision of a grid without gates reads them; the headline its first ``each``,
      which are the same rows in the same order: both orders are (objective, grid order));
    * :meth:`chart`: a chart's best half and worst half that fit, searched once for :data:`CHART_POINTS` and
      taken from it for smaller charts (the Mermaid chart), and :meth:`worst` (the headline's worst).  Only
      when the grid has more than CHART_POINTS points and the objective no nulls (``charts``), else each
      table searches as :func:`_chart_points` does."""

    def __init__(self, spec: GridSpec, df: pl.DataFrame) -> None:
        self.spec, self.df = spec, df
        by, desc = _order(spec)
        self.metric, self.desc = by[0], desc[0]
        metric = df.get_column(self.metric)
        self.charts = df.height > CHART_POINTS and metric.null_count() == 0 and not (
            metric.dtype.is_float() and metric.is_nan().any())
        self._best: tuple[int, pl.DataFrame] | None = None
        self.workloads = _workloads(df)  # the workloads present, in the grid's order (every table reads them)
        self._chart: tuple[pl.DataFrame, pl.DataFrame] | None = None

    def rows(self, picked: pl.DataFrame, cols: list[str]) -> pl.DataFrame:
        """The rows of ``df.select(cols).with_row_index("_row")`` that ``picked`` names by ``_row``, in its order."""
        idx = picked.get_column("_row")
        return pl.DataFrame([idx]).hstack(self.df.select(cols).gather(idx))

    def best(self, k: int) -> pl.DataFrame:
        """:func:`_best_per_workload` of every point, as ``_row``, ``workload`` and the objective."""
        if self._best is None or self._best[0] < k:
            narrow = self.df.select("workload", self.metric).with_row_index("_row")
            self._best = (max(k, DECISION_K), _best_per_workload(self.spec, narrow, max(k, DECISION_K),
                                                                 self.workloads))
        found, best = self._best
        return best if k == found else best.group_by("workload", maintain_order=True).head(k)

    def chart(self, limit: int) -> tuple[pl.DataFrame, pl.DataFrame]:
        """The best ``limit // 2`` points and the worst ``limit // 2`` that fit, the best left out of the worst
        (``_row``, the objective, ``fits``), each in its own order as :func:`_chart_points` finds them.

        Both halves of CHART_POINTS from one pass for two thresholds: the half-th best value, and the
        (2 x half)-th worst value of the points that fit (the first half of those outside the best lie among the
        first 2 x half that fit, since at most half of the best fit); then only the points at or beyond them are
        sorted.  For a smaller half h the best are the first h of CHART_POINTS' best (the same order), and the worst are
        the first h of the points that fit and are not among those h best: either among CHART_POINTS' worst
        (its first h of the points outside its best) or among its best after the first h."""
        if self._chart is None:
            # both thresholds in one pass: the half-th best value, and the (2 x half)-th worst value of the points
            # that fit (the worst half outside the best lie among those: at most half of them are among the best)
            narrow = self.df.select(self.metric, "fits").with_row_index("_row")
            half = CHART_POINTS // 2
            m, fits = pl.col(self.metric), pl.col("fits")
            fit = m.filter(fits)
            best, worst = narrow.select((m.top_k(half).min() if self.desc else m.bottom_k(half).max()).alias("b"),
                                        (fit.bottom_k(2 * half).max() if self.desc else fit.top_k(2 * half).min())
                                        .alias("w")).row(0)
            top = narrow.filter(m >= best if self.desc else m <= best).sort(
                [self.metric, "_row"], descending=[self.desc, False]).head(half)
            bottom = narrow.clear() if worst is None else narrow.filter(
                fits & (m <= worst if self.desc else m >= worst)).filter(
                ~pl.col("_row").is_in(top.get_column("_row").implode())).sort(
                [self.metric, "_row"], descending=[not self.desc, True]).head(half)
            self._chart = (top, bottom)
        top, bottom = self._chart
        h = limit // 2
        assert h <= top.height
        return (top, bottom) if h == top.height else (top.head(h), self._worst(h, top.slice(h)))

    def worst(self, k: int) -> pl.DataFrame:
        """The first ``k`` points that fit in the order (objective reversed, later point first): ``_first_k`` with
        the ``fits`` mask, from the chart's halves (k <= CHART_POINTS // 2)."""
        top, _ = self.chart(CHART_POINTS)
        return self._worst(k, top)

    def _worst(self, k: int, more: pl.DataFrame) -> pl.DataFrame:
        _, bottom = self.chart(CHART_POINTS)
        assert k <= CHART_POINTS // 2
        return pl.concat([bottom, more.filter(pl.col("fits"))]).sort(
            [self.metric, "_row"], descending=[not self.desc, True]).head(k)


def _decision(spec: GridSpec, df: pl.DataFrame, labels: Labels, picks: _Picks | None = None) -> dict[str, Any]:
    """One or two computed sentences: what passes, the best per workload, its margin, the runner-up."""
    o = spec.objective
    cols = list(dict.fromkeys(["id", "workload", "paged_requests", "running_requests", "max_num_seqs", "gpus",
                               *labels.data_columns, o.metric]))
    gate_cols = [g.metric for g in spec.gates]
    frame = df.select(list(dict.fromkeys(cols + gate_cols))).with_row_index("_row")
    if spec.gates:
        frame = frame.with_columns(passing_expr(spec).alias("_pass"))
        passing = frame.filter(pl.col("_pass"))
        share = shared_where(frame, "_pass", labels.columns) if 0 < passing.height < frame.height else ""
        head = (f"{passing.height:,} of {frame.height:,} configurations pass every gate"
                + (f" (those with {share})" if share else "") + ".")
    else:
        passing = frame
        head = f"No gates in this grid: all {frame.height:,} configurations are candidates."
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
        per_gpu = o.metric in ("paged_requests_per_gpu", "running_requests_per_gpu")
        if o.metric not in ("paged_requests", "running_requests") and (not per_gpu or best["gpus"] > 1 or capped):
            gpus = f"{best['gpus']} GPU{'s' if best['gpus'] > 1 else ''}"
            text += (f" ({best['running_requests']:,} run at once on {gpus}: {best['paged_requests']:,} fit, "
                     f"max_num_seqs {best['max_num_seqs']:,})" if capped else
                     f" ({best['running_requests']:,} requests on {gpus})")
        elif o.metric == "running_requests" and capped:
            text += f" ({best['paged_requests']:,} fit, max_num_seqs {best['max_num_seqs']:,})"
        margins = []
        for g in spec.gates:
            one = pl.DataFrame([best]).select(scope_expr(g).alias("s"), slack_expr(g).alias("m")).row(0)
            if one[0] and one[1] is not None:
                margins.append((one[1], g))
        if margins:
            m, g = min(margins, key=lambda t: t[0])
            text += f", {num(m if not float(m).is_integer() else int(m))} inside the gate '{g.name}' ({g.metric} " \
                    f"{bounds_text(g)})"
        ties = [r for r in top[1:] if r[o.metric] == best[o.metric]]
        if ties:
            text += "; " + ", ".join(labels.differing(r, best) for r in ties[:3]) + \
                    (f" and {len(ties) - 3} more" if len(ties) > 3 else "") + " tie"
        second = next((r for r in top[1:] if r[o.metric] != best[o.metric]), None)
        a = best[o.metric]
        if second is not None:
            b = second[o.metric]
            rel = f" ({(b - a) / a:+.1%})" if a else ""
            text += f"; runner-up {labels.differing(second, best)} with {_objective_value(o.metric, b)}{rel}"
        elif len(top) == 1:
            text += "; no runner-up passes"
        lines.append(text + ".")
    return {"question": spec.question, "head": head, "lines": lines,
            "objective": f"{o.text()}{'' if o.given else ' (the default objective)'}"
                         + (" among points passing every gate" if spec.gates else "")}


_STATS: list[tuple[pl.DataFrame, pl.DataFrame]] = []  # the last frame's per-workload figures


def _range_median(lazy: pl.LazyFrame, keys: list[str], col: str, names: tuple[str, str, str]) -> pl.LazyFrame:
    """Per ``keys``: the minimum, maximum and median of ``col`` (nulls left out) from its value counts, so only
    the distinct values are sorted, not every point.  The median is polars' own: the middle value, or for an
    even count ``lo + (hi - lo) x 0.5`` of the two middle ones (both as floats)."""
    v, n = pl.col(col), pl.col("len")
    lo, hi, med = names
    return lazy.filter(v.is_not_null()).group_by(*keys, col).len().sort(*keys, col) \
        .group_by(*keys, maintain_order=True).agg(
            v.first().alias(lo), v.last().alias(hi),
            v.filter(n.cum_sum() > (n.sum() - 1) // 2).first().cast(pl.Float64).alias("_a"),
            v.filter(n.cum_sum() > n.sum() // 2).first().cast(pl.Float64).alias("_b")) \
        .with_columns((pl.col("_a") + (pl.col("_b") - pl.col("_a")) * 0.5).alias(med)).drop("_a", "_b")


def workload_stats(df: pl.DataFrame) -> pl.DataFrame:
    """Per workload (in the order they first appear): the ratio's range and median, the waste ranges and
    medians, the tail range (the mechanism sentence, the waste table and the waste chart all read it)."""
    if _STATS and _STATS[0][0] is df:
        return _STATS[0][1]
    lazy = df.lazy()
    tail = pl.col("tail_waste_slots")
    queries = [lazy.group_by("workload", maintain_order=True).agg(tail.min().alias("tlo"), tail.max().alias("thi"))]
    queries += [_range_median(lazy, ["workload"], col, names) for col, names in (
        ("request_capacity_ratio", ("lo", "hi", "med")), ("reservation_waste_percent", ("rlo", "rhi", "res")),
        ("paged_waste_percent", ("plo", "phi", "pag")))]
    order, *parts = pl.collect_all(queries)
    stats = order
    for part in parts:
        stats = stats.join(part, on="workload", how="left", maintain_order="left")
    stats = stats.select("workload", "lo", "hi", "med", "rlo", "rhi", "res", "plo", "phi", "pag", "tlo", "thi")
    _STATS[:] = [(df, stats)]
    return stats


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
            best, worst = (f"{labels(row, skip=skip)}: {num(row[g.metric])}" if named else num(row[g.metric])
                           for row in (r.best, r.worst))
        margin = "-" if r.margin is None else num(int(r.margin) if float(r.margin).is_integer() else r.margin)
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
        narrow = df.select(*cols, *(g.metric for g in spec.gates if g.metric not in cols)) \
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
    headers = [HEADERS[c] for c in varying] + [HEADERS[c] for c in metrics] + (["gates"] if gated else [])

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


def _pair_key(df: pl.DataFrame, col: str) -> list[pl.Expr]:
    """Group keys for (``col``, workload): one integer ``code x workloads + workload code`` where that is exact
    (an Enum's codes or non-negative integers small enough, no nulls): polars groups one integer key about twice
    as fast as two columns, with the same groups in the same order of first appearance.  Else the two columns."""
    wtype, ctype = df.schema["workload"], df.schema[col]
    pair = [pl.col(col), pl.col("workload")]
    if not isinstance(wtype, pl.Enum) or df.get_column(col).null_count() or df.get_column("workload").null_count():
        return pair
    n = max(1, len(wtype.categories))
    workload = pl.col("workload").to_physical().cast(pl.Int64)
    if isinstance(ctype, pl.Enum):
        return [(pl.col(col).to_physical().cast(pl.Int64) * n + workload).alias("_key")]
    if ctype.is_integer() and df.height:
        lo, hi = df.select(pl.col(col).min().alias("lo"), pl.col(col).max().alias("hi")).row(0)
        if lo >= 0 and hi < (1 << 62) // n:  # hi x n + (n - 1) stays below 2^62: no overflow, each pair apart
            return [(pl.col(col).cast(pl.Int64) * n + workload).alias("_key")]
    return pair


def _blocks(df: pl.DataFrame, dims: list[str], workloads: list[str] | None = None) -> list[int] | None:
    """The workloads' Enum codes in block order when the points come in blocks of one point per workload (W
    workloads, the same ones in the same order in every block: the grid's workloads varying fastest, as
    ``expand`` writes a grid without ``exclude:`` rules) and every dimension in ``dims`` (Enums or integers, no
    nulls) is the same on every point of a block.  Then the points of (value, workload ``j``) are the ``j``-th
    points of the blocks of that value, and one group-by of the blocks serves every workload.  None otherwise
    (checked on every point)."""
    col = df.get_column("workload")
    if not isinstance(col.dtype, pl.Enum) or col.null_count() or df.height == 0:
        return None
    n = len(_workloads(df) if workloads is None else workloads)
    first = col.head(n).to_physical().to_list()
    if df.height % n or len(set(first)) != n:
        return None
    for d in dims:
        t = df.schema[d]
        if not (isinstance(t, pl.Enum) or t.is_integer()) or df.get_column(d).null_count():
            return None
    code, pos = pl.col("workload").to_physical(), pl.int_range(pl.len()) % n  # pos: the point's place in its block
    checks = [(code == pl.lit(pl.Series(first, dtype=col.to_physical().dtype)).gather(pos)).all().alias("_w")]
    if n > 1 and dims:  # each point equals the next one, but for the last point of a block
        same = pl.all_horizontal([pl.col(d) == pl.col(d).shift(-1) for d in dims])
        checks.append((same | (pos == n - 1)).all().alias("_d"))
    return first if all(df.lazy().select(checks).collect().row(0)) else None  # lazy: pos computed once


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


def _chart_points(spec: GridSpec, df: pl.DataFrame, labels: Labels, limit: int,
                  picks: _Picks | None = None) -> tuple[pl.DataFrame, str]:
    """Up to ``limit`` points for a chart, by the objective: the best half and the worst half of those that fit
    (a point without KV memory says nothing on a chart), and a note saying how many were left out."""
    by, desc = _order(spec)
    cols = list(dict.fromkeys(["id", *labels.data_columns, "paged_requests", "contiguous_requests", by[0], "fits"]))
    if picks is not None and picks.charts and limit <= CHART_POINTS:
        top, bottom = (picks.rows(half, cols) for half in picks.chart(limit))
        return _chart_note(df, top, bottom, by, desc)
    narrow = df.select(cols).with_row_index("_row")
    if narrow.height <= limit:
        return narrow.sort(by, descending=desc, nulls_last=True), ""
    reverse = [not d for d in desc]
    half = limit // 2
    fits = pl.col("fits")
    if narrow.get_column(by[0]).null_count() == 0:  # the k-th value first: no sort of the whole grid
        top = _first_k(narrow, half, by[0], desc[0], False)
        bottom = _first_k(narrow, half, by[0], not desc[0], True,
                          fits & ~pl.col("_row").is_in(top.get_column("_row").implode()))
    else:
        top = narrow.top_k(half, by=by, reverse=reverse)
        bottom = narrow.filter(fits & ~pl.col("_row").is_in(top.get_column("_row").implode())).bottom_k(
            half, by=by, reverse=reverse)
    return _chart_note(df, top, bottom, by, desc)


def _chart_note(df: pl.DataFrame, top: pl.DataFrame, bottom: pl.DataFrame, by: list[str],
                desc: list[bool]) -> tuple[pl.DataFrame, str]:
    picked = pl.concat([top, bottom]).sort(by, descending=desc, nulls_last=True)
    unfit = df.height - int(df.get_column("fits").sum())
    return picked, (f"the {top.height} best and the {bottom.height} worst that fit by {by[0]}; "
                    f"{df.height - picked.height:,} of {df.height:,} points left out"
                    + (f" ({unfit:,} leave no KV memory)" if unfit else ""))


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


def _models_short(spec: GridSpec) -> list[list[str]]:
    """The Markdown report's model table: what decides the KV bytes (the HTML report has the sources)."""
    rows = []
    for name, entry in spec.models.items():
        arch = entry.arch
        rows.append([name, arch.pattern(), f"{arch.kv_heads} x {arch.head_dim}",
                     f"{rank_shapes(arch)[0].bytes_per_token:,}",
                     f"{arch.weight_bytes / 1e9:,.1f} GB" if arch.weight_bytes else "not given"])
    return rows


def _models(spec: GridSpec) -> list[list[str]]:
    rows = []
    for name, entry in spec.models.items():
        arch = entry.arch
        shape = rank_shapes(arch)[0]
        rows.append([name, arch.source.replace(str(spec.path.parent) + "/", ""), f"{arch.num_layers}", arch.pattern(),
                     f"{arch.num_attention_heads}", f"{arch.kv_heads}", f"{arch.head_dim}", f"{arch.max_context:,}",
                     f"{shape.bytes_per_token:,}",
                     f"{arch.weight_bytes / 1e9:,.1f} GB ({arch.weight_basis})" if arch.weight_bytes else "not given"])
    return rows


def _dimension_values(dim: str, vals: list[Any]) -> str:
    shown = []
    for v in vals:
        if v is None:
            shown.append({"budget": "12 GiB without a GPU", "max_model_len": "= max_reserved",
                          "weights": "the preset's estimate", "gpu": "none (explicit budget)",
                          "gpu_memory": "the GPU preset's", "max_batched_tokens": "vLLM 0.33's default for the GPU",
                          "max_num_seqs": "vLLM 0.33's default for the GPU"}.get(dim, "none"))
        elif isinstance(v, bool):
            shown.append("on" if v else "off")
        elif dim == "reserve" and v == "auto":
            shown.append("auto on GPU-derived budgets (published activation + non-torch terms by model and TP, CUDA "
                         "graphs by layer; declared budgets take none)")
        elif dim in ("budget", "gpu_memory", "weights", "reserve"):
            shown.append(f"{v:,} B ({gib(v)})")
        else:
            shown.append(str(v))
    return ", ".join(shown)


def _dimensions(spec: GridSpec) -> dict[str, Any]:
    """The dimensions the grid sets (a table) and the defaults it leaves (one line)."""
    rows, defaults = [], []
    set_dims = {}
    for factor in spec.factors:
        linked = len(factor) > 1
        for dim, vals in factor.items():
            set_dims[dim] = (vals, "zip (linked)" if linked else "grid")
    caps = ("max_batched_tokens", "max_num_seqs", "performance_mode", "async_scheduling", "chunked_prefill",
            "allow_long_max_model_len")
    for dim in ("model", "workload", "kv_dtype", "kv_scales", "block_size", "budget", "gpu", "gpu_memory", "gpu_util",
                "util_policy", "weights", "reserve", "tp", "pp", "max_model_len", *caps):
        if dim in caps and dim not in set_dims:
            continue  # one item below for the engine caps the grid leaves to vLLM
        if dim in set_dims:
            vals, how = set_dims[dim]
            shown = f"{len(vals)} (the table above)" if dim == "model" and len(vals) > 4 else \
                _dimension_values(dim, vals)
            rows.append([dim, shown, how])
        else:
            defaults.append(f"{dim} {_dimension_values(dim, [DEFAULTS.get(dim)])}")
    if any(dim not in set_dims for dim in caps):
        defaults.append("engine caps vLLM 0.33's (above)")
    return {"rows": rows, "defaults": "; ".join(defaults)}


def engine_caps_text(df: Any) -> str:
    """What vLLM 0.33 runs at once on the grid's GPUs: its max_num_seqs and max_num_batched_tokens per GPU, and that
    running_requests (what the default objective ranks) is the requests that fit, capped at max_num_seqs."""
    if not df.height:
        return ""
    rows = df.select(pl.col("gpu").cast(pl.Utf8), "max_num_seqs", "max_batched_tokens").unique() \
        .sort("gpu", "max_num_seqs", "max_batched_tokens", nulls_last=True).iter_rows()
    parts = [f"{gpu or 'no GPU'} {seqs:,} / {tokens:,}" for gpu, seqs, tokens in rows]
    capped = int((df.get_column("running_requests") < df.get_column("paged_requests")).sum())
    return ("Engine caps, max_num_seqs / max_num_batched_tokens (vLLM 0.33's defaults per GPU unless the grid sets "
            "them): " + ", ".join(parts) + f"; running_requests = min(paged_requests, max_num_seqs) is below "
            f"paged_requests at {capped:,} of {df.height:,} points.")


def reserve_text(spec: GridSpec) -> str:
    """The runtime reserve a capacity figure assumes, e.g. ``runtime reserve 0 B per rank (kvdash's default)``."""
    for factor in spec.factors:
        if "reserve" in factor:
            vals = ", ".join("auto (published terms: activation peak + non-torch overhead by model and TP + "
                             "CUDA-graph estimate by architecture and layer; see kvdash calc --reserve auto)"
                             if v == "auto" else gib(v)
                             for v in factor["reserve"])
            return f"runtime reserve {vals} per rank (from the grid)"
    return ("runtime reserve auto per rank (kvdash's default: published activation-peak, non-torch and CUDA-graph "
            "terms; see kvdash calc --reserve auto)")


NO_TUTORIAL_POINT = "the grid has no point of the tutorial's configuration"


def _exit_criteria(df: pl.DataFrame, verdicts: list[Verdict]) -> list[list[str]]:
    """The tutorial's measurable exit criteria, evaluated where this grid allows."""
    tut = df.lazy().filter((pl.col("bytes_per_token") == 327_680) & (pl.col("kv_dtype") == "bf16")
                           & (pl.col("budget_bytes") == 12 * GiB) & (pl.col("block_size") == 16)
                           & (pl.col("tp") == 1)).head(4096).collect()  # one row is read of each
    snap = tut.filter(pl.col("lengths").cast(pl.Utf8) == "825")
    rows = [["architecture, KV heads, dtype, budget, block size and lengths are explicit", "met",
             "the Assumptions section lists every input of every point"]]

    def check(label: str, frame: pl.DataFrame, cond: Callable[[dict[str, Any]], bool], shown: str) -> None:
        if frame.height == 0:
            rows.append([label, "not evaluable", NO_TUTORIAL_POINT])
            return
        r = frame.row(0, named=True)
        rows.append([label, "met" if cond(r) else "NOT met", shown.format(**r)])

    check("BF16 GQA KV state equals 327,680 bytes/token", tut, lambda r: r["bytes_per_token"] == 327_680,
          "{bytes_per_token:,} B/token")
    check("12 GiB yields 39,321 token slots (39,312 block-backed at block 16)", tut,
          lambda r: (r["kv_token_slots"], r["block_backed_token_slots"]) == (39_321, 39_312),
          "{kv_token_slots:,} slots, {block_backed_token_slots:,} block-backed")
    check("825 tokens take 52 blocks (832 slots), 7 unused (0.8413 %)", snap,
          lambda r: (r["paged_blocks"], r["allocated_slots"], r["tail_waste_slots"]) == (52, 832, 7),
          "{paged_blocks} blocks, {allocated_slots} slots, {tail_waste_slots} unused, "
          "{paged_internal_waste_percent:.4f} %")
    check("contiguous and paged snapshot capacities are 19 and 47", snap,
          lambda r: (r["contiguous_requests"], r["paged_requests"]) == (19, 47),
          "{contiguous_requests} contiguous, {paged_requests} paged")
    scoped = {v.claim.id: v for v in verdicts}
    hist = [scoped[i] for i in ("waste-60-80-2023", "throughput-2-4x") if i in scoped]
    rows.append(["historical 60-80 % waste and 2-4x throughput are scoped to their 2023 baselines",
                 "met" if hist else "not evaluable",
                 "; ".join(f"{v.claim.id}: {v.verdict}" for v in hist) or "claims not selected"])
    replayed = "pc_hit_percent" in df.columns
    rows.append(["block-level paging is distinguished from prefix-cache matching and retention", "met",
                 "prefix figures assume the prefix blocks are already shared; matching, retention and eviction "
                 "are engine policies outside this arithmetic" if not replayed else
                 "paging is the capacity arithmetic; matching, retention and eviction are the prefix_cache "
                 "replay (vLLM's block pool or LMCache's chunks), reported apart"])
    has_fp8 = df.select(Frame(df).is_in("kv_dtype", ["fp8", "fp8_e4m3", "fp8_e5m2", "int8"]).any()).item()
    rows.append(["FP8 capacity is marked idealized", "met" if has_fp8 else "not evaluable",
                 "every fp8/int8 point without per-token scales is labelled idealized" if has_fp8 else
                 "no fp8 point in this grid"])
    if replayed:
        rows.append(["offload and tiered-KV evaluations include latency, bandwidth and per-tier hit rates",
                     "met", "the prefix_cache section: per-tier hit rates, bytes loaded and stored, evictions, "
                     "occupancy, and transfer times as bytes over each link's bandwidth (lower bounds, not "
                     "measured latency)"])
    else:
        rows.append(["offload and tiered-KV evaluations include latency, bandwidth and per-tier hit rates",
                     "not evaluable", "capacity arithmetic gives offload sizes only (offload_useful_bytes, "
                     "offload_allocated_bytes); transfer latency needs a benchmark"])
    return rows


def _assumption_lines(df: pl.DataFrame) -> list[str]:
    policies = sorted(str(p) for p in df.get_column("util_policy").unique().to_list() if p is not None) or ["vllm"]
    lines = [
        "Bytes, slots and blocks are exact integers; GiB = 2^30 bytes, GB = 10^9 bytes.",
        "Budgets are per rank; when derived from a GPU: " + " or ".join(
            {"vllm": "floor(GPU total x utilization) - weights/rank - reserve (vLLM)",
             "trtllm": "floor((total - weights/rank - reserve) x utilization) (TensorRT-LLM)"}[p]
            for p in policies) + "; the tightest rank decides.",
        "Capacities are snapshots: every request of a workload at its stated length, whole groups only, no growth "
        "headroom, no preemption. A capacity ratio is not a throughput ratio.",
        "Contiguous Max reserves max_reserved tokens per request; Pow2 the next power of two of the final length "
        "(capped at max_reserved); Oracle the exact final length.",
        "Paged pools follow vLLM v1: a block holds block_size tokens for every layer of a KV-cache group; sliding "
        "layers hold at most ceil((W-1)/B)+1 blocks.",
        f"Requests per node assume {GPUS_PER_NODE}-GPU nodes filled with whole replicas of tp x pp GPUs.",
    ]
    frame = Frame(df)
    if df.select((frame.is_in("kv_dtype", ["fp8", "fp8_e4m3", "fp8_e5m2", "int8"])
                  & frame.is_in("kv_scales", ["tensor"])).any()).item():
        lines.append("FP8/int8 points are idealized: 1 byte per element, no per-token scales, alignment or "
                     "accuracy cost.")
    if not df.get_column("fits").all():
        lines.append("Points whose weights and reserve leave no KV memory are kept with capacity 0 (fits = no).")
    return lines


def _simulation(spec: GridSpec, df: pl.DataFrame) -> dict[str, Any] | None:
    """Medians over the grid of the simulated shares, per policy, beside the paper's Figure 2, what each
    share counts and the gaps' causes; the capacity sweep when the section has ``rates``."""
    if spec.simulate is None:
        return None
    from kvdash.simulate.capacity import LABEL
    from kvdash.simulate.engine import PAPER_FIG2
    from kvdash.simulate.explain import PAPER_OTHERS, SHARE_MEANING, gap_notes
    from kvdash.sweep.simulation import SHARE_COLUMNS, column

    sim = spec.simulate
    rows, notes = [], []
    for pol in sim.policies:
        med = df.select([pl.col(column(pol, short)).median().alias(short) for _, short in SHARE_COLUMNS]
                        + [pl.col(column(pol, "avg_batch")).median().alias("batch"),
                           pl.col(column(pol, "preemptions")).median().alias("pre"),
                           pl.col(column(pol, "norm_latency")).median().alias("lat")]).row(0, named=True)
        paper = PAPER_FIG2.get(pol, (None,) * 4)
        cells = []
        for i, (_, short) in enumerate(SHARE_COLUMNS):
            v = med[short]
            text = "-" if v is None else f"{v:.1f}"
            if i < 3 and paper[i] is not None:
                text += f" ({paper[i]:.1f})"
            cells.append(text)
        ext_free = None if med["external"] is None else med["external"] + med["free"]
        cells.append(("-" if ext_free is None else f"{ext_free:.1f}")
                     + ("" if paper[3] is None else f" ({paper[3]:.1f})"))
        rows.append([pol, *cells, "-" if med["batch"] is None else f"{med['batch']:.2f}",
                     "-" if med["pre"] is None else f"{med['pre']:,.0f}",
                     "-" if med["lat"] is None else f"{med['lat']:,.2f}"])
        if med["token_states"] is not None:
            shares = {share: med[short] for share, short in SHARE_COLUMNS}
            notes.append(f"{pol}: " + "; ".join(gap_notes(pol, sim.allocator, sim.workload.synthetic, shares)))
    w = sim.workload
    arrival = f"closed loop of {w.concurrency}" if w.arrival == "closed" else f"Poisson {w.rate:g} requests per step"
    setup = (f"{w.requests:,} {w.name} requests ({w.note}), {arrival}, shared prefix {w.prefix:,} tokens, "
             f"maximum length {sim.max_len:,}, contiguous allocator {sim.allocator}, watermark {sim.watermark:g}, "
             f"seed {sim.seed}; each point's pool is its kv_token_slots; paged pools scheduled by vLLM v1's rules "
             "(vllm/v1/core/sched/scheduler.py, vLLM 0.33.0): running requests first, the newest preempted and "
             "recomputed with its generated tokens, FCFS admission in steps without preemption")
    meaning = [f"{k.replace('_', ' ')}: {v}" for k, v in SHARE_MEANING.items()] + [PAPER_OTHERS]
    capacity = None
    if sim.rates:
        head = "paged" if "paged" in sim.policies else next((p for p in sim.policies if p.startswith("paged")), None)
        med_rate = {pol: df.select(pl.col(column(pol, "capacity_rate")).median()).item() for pol in sim.policies}
        cap_rows = [[pol, "-" if med_rate[pol] is None else f"{med_rate[pol]:.4g}",
                     "-" if head is None or pol == head or not med_rate[pol] or med_rate[head] is None
                     else ratio_text(med_rate[head] / med_rate[pol])] for pol in sim.policies]
        capacity = {"rows": cap_rows, "head": head or "-", "bound": f"{sim.latency_bound:g}", "label": LABEL,
                    "rates": f"{len(sim.rates)} rates from {sim.rates[0]:.4g} to {sim.rates[-1]:.4g} requests per step"}
    return {"rows": rows, "setup": setup, "meaning": meaning, "notes": notes, "capacity": capacity}


def _claims(verdicts: list[Verdict], reserve: str) -> dict[str, Any]:
    """Judged claims as rows; claims this grid cannot judge collapsed into one line each."""
    rows, not_applicable, not_computable = [], [], []
    for v in verdicts:
        if v.verdict == "not applicable":
            not_applicable.append(f"`{v.claim.id}`" if v.note.startswith("this grid has no") else
                                  f"`{v.claim.id}` ({v.note})")
            continue
        if v.verdict == "not computable":
            not_computable.append(f"`{v.claim.id}`")
            continue
        verdict = v.verdict + (f" ({v.holding:,}/{v.points:,})" if v.points and v.verdict != "circular"
                               else "")
        why = []
        if v.where:
            why.append(v.where if v.where.startswith(("everywhere", "no single")) else f"holds where {v.where}")
        if v.direction and v.verdict != "holds":
            why.append(v.direction)
        if v.note:
            why.append(v.note)
        if v.claim.kind == "capacity" and v.claim.metric and "requests" in v.claim.metric:
            why.append(reserve.split(" (")[0].replace("runtime reserve", "reserve").replace(" per rank", "/rank"))
        rows.append({"id": v.claim.id, "claim": v.claim.claim, "claimed": v.claim.claimed_text(),
                     "computed": v.computed, "verdict": verdict, "css": v.verdict.replace(" ", "-"),
                     "why": "; ".join(why), "source": v.claim.source, "conditions": v.claim.conditions,
                     "kind": v.claim.kind, "metric": v.claim.metric or ""})
    return {"rows": rows, "not_applicable": not_applicable, "not_computable": not_computable, "reserve": reserve}


def grid_reserves(spec: GridSpec) -> list[Any]:
    """The grid's ``reserve`` values: those it gives, else kvdash's default (``auto``)."""
    from kvdash.sweep.evaluate import DEFAULTS

    return next((factor["reserve"] for factor in spec.factors if "reserve" in factor), [DEFAULTS["reserve"]])


def _auto_span(spec: GridSpec, df: Any) -> tuple[str, str]:
    """The range ``reserve: auto`` takes over the grid's GPU points, and its share of the budget before it."""
    from kvdash.engines.vllm_reserve import auto_reserve

    rows = df.filter(df.get_column("gpu").is_not_null())
    est, shares = [], []
    from kvdash.core.gpus import gpu_presets
    from kvdash.engines.vllm import cudagraph_capture_sizes, gpu_generation

    presets = gpu_presets()
    for r in rows.select("model", "tp", "pp", "gpu", "budget_bytes", "max_batched_tokens", "max_num_seqs") \
            .unique().iter_rows(named=True):
        entry = spec.models.get(r["model"])
        if entry is None:
            continue
        cc = presets[str(r["gpu"])].compute_capability if str(r["gpu"]) in presets else ""
        graphs = len(cudagraph_capture_sizes(int(r["max_num_seqs"]), int(r["max_batched_tokens"]),
                                             gpu_generation(cc) == "sm100"))
        b = auto_reserve(entry.arch.model_type, int(r["tp"]), int(r["pp"]), int(r["max_batched_tokens"]),
                         gpu=str(r["gpu"]), layers=entry.arch.num_layers, graphs=graphs)["bytes"]
        est.append(b)
        if r["budget_bytes"]:
            shares.append(100 * b / (int(r["budget_bytes"]) + b))
    if not est:
        return "", ""
    span = gib(min(est)) if min(est) == max(est) else f"{gib(min(est))} to {gib(max(est))}"
    share = f"{min(shares):.1f}% to {max(shares):.1f}%" if shares else ""
    return span, share


def reserve_line(spec: GridSpec, df: Any, has_gpu: bool, short: bool = False) -> str:
    """The report's first line under the title (and ``kvdash sweep``'s and ``--check``'s, with ``short``):
    the runtime reserve the GPU-derived budgets take, and what it is based on; an upper bound said first."""
    if not has_gpu:
        return ("no reserve: declared KV budgets" if short else
                "Runtime reserve: none: every KV budget in this grid is declared (the KV memory itself), so nothing "
                "is taken off it.")
    values = grid_reserves(spec)
    parts, long_parts = [], []
    for v in values:
        if v == "auto":
            span, share = _auto_span(spec, df)
            parts.append(f"reserve auto, {span} per rank, published terms")
            long_parts.append(
                "auto" + (" (kvdash's default)" if not any("reserve" in f for f in spec.factors) else "")
                + f", {span} per rank" + (f" ({share} of the memory after the weights)" if share else "")
                + ": llm-d-planner's published activation-peak and non-torch terms (vLLM 0.19.0, H100-80GB) plus "
                "vLLM 0.33's CUDA-graph estimate per layer; extrapolated on other GPUs")
        elif v == 0:
            span, share = _auto_span(spec, df)
            parts.append("reserve 0 B, an UPPER BOUND")
            long_parts.append("0 B, an UPPER BOUND: no activation peak, CUDA graphs or non-torch memory"
                              + (f"; reserve: auto would lower each budget by about {span} per rank" if span else ""))
        else:
            parts.append(f"reserve {gib(v)} per rank, from the grid")
            long_parts.append(f"{gib(v)} per rank, from the grid")
    if short:
        return "; ".join(parts)
    head = "Upper bound where reserve is 0 B. " if 0 in values else ""
    return (f"{head}Runtime reserve of the GPU-derived budgets: " + "; ".join(long_parts) + "."
            + " Declared budgets take none." * (df.get_column("gpu").null_count() > 0))


def judge_claims(spec: GridSpec, df: pl.DataFrame) -> list[Verdict]:
    """The grid's claim verdicts, "holds where" named by its swept dimensions."""
    return judge_all(df, spec.claims, dims=Labels(spec, df).swept,
                     models={name: e.arch for name, e in spec.models.items()})


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
        "reserve_line": reserve_line(spec, df, labels.has_gpu),
        "engine_caps": engine_caps_text(df),
        "version": __version__,
        "grid_name": spec.path.name,
        "grid_sha256": hashlib.sha256(spec.text.encode()).hexdigest(),
        "points": n,
        "points_before_exclude": expanded.size_before_exclude,
        "results": results,
        "results_note": (f"Parquet: the grid has more than {PARQUET_ABOVE:,} points (--csv writes CSV)"
                         if results.endswith(".parquet") else ""),
        "decision": _decision(spec, df, labels, picks),
        "gates": _gates(spec, df, labels),
        "mechanism": _mechanism(spec, df),
        "label_names": labels.names,
        "assumptions": _assumption_lines(df),
        "models": _models(spec),
        "models_short": _models_short(spec),
        "workloads": [[w.name, ", ".join(f"{x:,}" for x in w.lengths)
                       + ("" if w.finals == w.lengths else f" (final {', '.join(f'{x:,}' for x in w.finals)})"),
                       f"{w.max_reserved:,}", f"{w.prefix:,}", w.description] for w in spec.workloads.values()],
        "dimensions": _dimensions(spec),
        "headline": _headline(spec, df, labels, picks),
        "groups": _groups(df, labels),
        "mermaid": _mermaid(spec, df, labels, picks),
        "sensitivity": _sensitivity(spec, df, labels, picks),
        "waste": _waste(df, spec),
        "charts": charts_for(spec),
        "columns": RESULT_COLUMNS + (_simulation_columns(spec) if spec.simulate else []) + _prefix_columns(spec),
        "simulation": _simulation(spec, df),
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


def _prefix_columns(spec: GridSpec) -> list[tuple[str, str, str]]:
    from kvdash.sweep.simulation import prefix_columns

    return prefix_columns(spec)


def _simulation_columns(spec: GridSpec) -> list[tuple[str, str, str]]:
    from kvdash.sweep.simulation import simulation_columns

    return simulation_columns(spec)


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
    colours = ("#2b6cb0", "#c05621", "#2f855a", "#6b46c1", "#b83280", "#718096")
    series = []
    for i, pol in enumerate(sim.policies):
        ys = [df.select(pl.col(column(pol, f"latency_r{k}")).median()).item() for k in range(len(sim.rates))]
        series.append((pol, colours[i % len(colours)], ys))
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


# --- writing -----------------------------------------------------------------------------------

def _bytecode_cache() -> Any:
    """Compiled templates kept under the user's cache folder (compiling both takes ~0.1 s, a sixth of a small
    sweep); jinja2 checks each entry against the template's source.  None when the folder is not writable."""
    import jinja2

    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kvdash" / f"templates-{__version__}"
    try:
        base.mkdir(parents=True, exist_ok=True)
        probe = base / f".probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError:
        return None
    return jinja2.FileSystemBytecodeCache(str(base))


@functools.cache  # one environment per kind per process: templates load once (see warm_up)
def _env(autoescape: bool) -> Any:
    import jinja2

    def source(name: str) -> tuple[str, str, Callable[[], bool]]:
        text = (resources.files("kvdash.templates") / name).read_text(encoding="utf-8")
        return text, name, lambda: True

    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(source),
        autoescape=autoescape, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
        undefined=jinja2.StrictUndefined, bytecode_cache=_bytecode_cache(),
    )
    from kvdash.report.markdown import md, md_code, md_marked

    env.filters["md"] = md  # every user string in report.md passes one of these three
    env.filters["md_code"] = md_code
    env.filters["md_marked"] = md_marked  # kvdash's sentences with their own **bold** / `code` marks
    env.filters["bold"] = lambda s: _inline(s, "**", "strong")
    env.filters["unquote"] = lambda s: _inline(s, "`", "code")
    return env


def _inline(text: str, mark: str, tag: str) -> Any:
    """HTML for Markdown-style ``**bold**`` or ```code``` spans: the text escaped first, then the pairs of
    marks turned into tags."""
    import markupsafe

    pieces = str(markupsafe.escape(str(text))).split(mark)
    out = "".join(p if i % 2 == 0 else f"<{tag}>{p}</{tag}>" for i, p in enumerate(pieces))
    return markupsafe.Markup(out)


def warm_up() -> None:
    """Load what rendering needs (jinja2, both templates) and the claims registry ahead of use.

    ``kvdash sweep`` runs this in a thread while polars evaluates a large grid: evaluation releases the GIL
    and leaves part of a core idle, so this Python-only work costs no wall time there."""
    _env(False).get_template("report.md.j2")
    _env(True).get_template("report.html.j2")
    import markupsafe  # noqa: F401  (the HTML filters import it on first use)


def render_markdown(ctx: dict[str, Any]) -> str:
    return str(_env(False).get_template("report.md.j2").render(**ctx))


def render_html(ctx: dict[str, Any], svgs: dict[str, str]) -> str:
    return str(_env(True).get_template("report.html.j2").render(**ctx, svgs=svgs))


def write_csv(df: pl.DataFrame, path: Path) -> None:
    df.write_csv(path, float_precision=6, null_value="")


def results_formats(points: int, csv: bool = False, parquet: bool = False) -> tuple[str, ...]:
    """Which results files to write: those asked for, else CSV up to PARQUET_ABOVE points and Parquet above."""
    asked = tuple(f for f, on in (("csv", csv), ("parquet", parquet)) if on)
    return asked or (("parquet",) if points > PARQUET_ABOVE else ("csv",))


def write_report(spec: GridSpec, expanded: Expanded, out: Path, formats: tuple[str, ...] | None = None,
                 progress: Callable[[str], None] | None = None, force: bool = False,
                 answer: dict[str, Any] | None = None) -> list[Path]:
    """Write every output into a fresh folder beside ``out``, then swap it into place
    (:mod:`kvdash.report.outdir`: what may be replaced, the manifest, the one-step exchange).

    ``formats``: ``csv`` and/or ``parquet`` (default: :func:`results_formats`).  ``answer``, when given, receives
    the report's decision (``kvdash sweep`` prints it: the answer, not only the file list)."""
    from kvdash.report import outdir

    with outdir.deferred_interrupt() as checkpoint:  # Ctrl-C lands between steps, never inside polars
        return _write_report(spec, expanded, out, formats, progress, force, checkpoint, answer)


def answer_lines(decision: dict[str, Any]) -> list[str]:
    """The report's decision as plain lines for a terminal: its head, then the best point of each workload."""
    def plain(text: str) -> str:
        return text.replace("**", "")
    return [plain(f"{decision['head']} Best by {decision['objective']}:"),
            *(f"- {plain(line)}" for line in decision["lines"])]


def _write_report(spec: GridSpec, expanded: Expanded, out: Path, formats: tuple[str, ...] | None,
                  progress: Callable[[str], None] | None, force: bool, checkpoint: Callable[[], None],
                  answer: dict[str, Any] | None = None) -> list[Path]:
    from kvdash.report import outdir

    def step(msg: str) -> None:
        checkpoint()
        if progress is not None:
            progress(msg)

    formats = formats or results_formats(expanded.frame.height)
    target = outdir.plan(out, force)
    outdir.clean_leftovers(target.out)
    tmp = outdir.work_folder(target.out)
    try:
        from concurrent.futures import ThreadPoolExecutor

        main = "results.csv" if "csv" in formats else "results.parquet"
        step(main)
        # polars releases the GIL: the results file is written and the claims judged (the report's largest
        # independent piece) in threads while the charts and the other tables are built
        with ThreadPoolExecutor(max_workers=2) as pool:
            jobs = []
            if "csv" in formats:
                jobs.append(pool.submit(write_csv, expanded.frame, tmp / "results.csv"))
            if "parquet" in formats:
                jobs.append(pool.submit(expanded.frame.write_parquet, tmp / "results.parquet", statistics=False,
                                            compression="lz4"))  # 2x zstd's size, a third faster
            verdicts = pool.submit(judge_claims, spec, expanded.frame)
            step("charts")
            write_charts(spec, expanded.frame, tmp)
            if spec.simulate is not None:
                write_simulation_chart(spec, expanded.frame, tmp)
                if spec.simulate.rates:
                    write_capacity_chart(spec, expanded.frame, tmp)
            ctx = build_context(spec, expanded, main, verdicts)
            if answer is not None:
                answer.update(ctx["decision"])
            write_prefix_chart(ctx, tmp)
            step("report.md")  # rendered while the results file may still be being written
            (tmp / "report.md").write_text(render_markdown(ctx), encoding="utf-8")
            svgs = {name: _strip_xml_header((tmp / name).read_text(encoding="utf-8")) for name in charts_for(spec)}
            step("report.html")
            (tmp / "report.html").write_text(render_html(ctx, svgs), encoding="utf-8")
            for job in jobs:
                job.result()
        checkpoint()
        return outdir.commit(tmp, outdir.plan(target.out, force))  # planned again: the folder may have changed
    except BaseException:
        outdir.remove_work(outdir.work_root(tmp))
        raise


def _strip_xml_header(svg: str) -> str:
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg

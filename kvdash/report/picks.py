"""The report's fast paths: the points several tables name, found without sorting the whole grid.

Each workload's best by the objective (:func:`_best_per_workload`), the first k in an order (:func:`_first_k`),
the searches shared between tables (:class:`_Picks`), medians from value counts (:func:`_range_median`), the
per-workload figures (:func:`workload_stats`), and the block layout of an expanded grid (:func:`_blocks`).  Each
gives the rows (and the order) the plain sort would: the tests in tests/test_report_fast_paths.py hold them to it."""

from __future__ import annotations

import polars as pl

from kvdash.report.labels import Labels
from kvdash.sweep.gridfile import GridSpec

CHART_POINTS = 24


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

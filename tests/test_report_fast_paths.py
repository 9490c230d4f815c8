"""The report's shortcuts on large grids give exactly what the plain definitions give.

* best / worst points: the k-th value is found first and only the points at or beyond it are sorted;
  the plain definition sorts every point by (metric, point order) and takes the first k;
* minimum, maximum and median per workload from value counts; the plain definition is polars'
  ``median()`` over the points (for an even count ``lo + (hi - lo) x 0.5``: 1, 2, 4, 10 -> 2 + 2 x 0.5 = 3).

Ties and nulls are what the shortcuts could get wrong, so the values come from a few small integers.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from kvdash.report.picks import _best_per_workload, _first_k, _pair_key, _range_median

settings.register_profile("ci", max_examples=150, deadline=None)
settings.load_profile("ci")

WORKLOADS = pl.Enum(["chat", "rag", "long"])


@dataclass
class _Objective:
    metric: str
    maximize: bool


@dataclass
class _Spec:
    objective: _Objective


@st.composite
def frames(draw: st.DrawFn, nulls: bool = True) -> pl.DataFrame:
    n = draw(st.integers(1, 60))
    value = st.one_of(st.none(), st.integers(0, 4)) if nulls else st.integers(0, 4)
    return pl.DataFrame({
        "workload": pl.Series(draw(st.lists(st.sampled_from(WORKLOADS.categories.to_list()), min_size=n,
                                            max_size=n)), dtype=WORKLOADS),
        "m": pl.Series(draw(st.lists(value, min_size=n, max_size=n)), dtype=pl.Float64),
        "fits": draw(st.lists(st.booleans(), min_size=n, max_size=n)),
    }).with_row_index("_row")


@given(frames(nulls=False), st.integers(1, 8), st.booleans(), st.booleans(), st.booleans())
def test_first_k_is_the_head_of_a_full_sort(df, k, desc_metric, desc_row, masked):
    """_first_k == sort every (masked) point by (metric, row) and take k."""
    mask = pl.col("fits") if masked else None
    plain = (df.filter(mask) if masked else df).sort(["m", "_row"], descending=[desc_metric, desc_row]).head(k)
    assert plain.equals(_first_k(df, k, "m", desc_metric, desc_row, mask))


@given(frames(), st.integers(1, 8), st.booleans())
def test_best_per_workload_is_the_head_of_each_workloads_sort(df, k, maximize):
    """Per workload (in the Enum's order, absent ones left out), the k best non-null points by the
    objective, ties to the earlier point: the head of a full sort."""
    got = _best_per_workload(_Spec(_Objective("m", maximize)), df, k)  # type: ignore[arg-type]
    plain = [df.filter((pl.col("workload") == w) & pl.col("m").is_not_null())
             .sort(["m", "_row"], descending=[maximize, False]).head(k) for w in WORKLOADS.categories]
    assert pl.concat(plain).equals(got)


@given(frames())
def test_range_and_median_from_value_counts_match_polars(df):
    """min, max and median per workload from value counts == polars' min/max/median over the points."""
    got = _range_median(df.lazy(), ["workload"], "m", ("lo", "hi", "med")).collect()
    plain = df.group_by("workload", maintain_order=True).agg(
        pl.col("m").min().alias("lo"), pl.col("m").max().alias("hi"), pl.col("m").median().alias("med")) \
        .filter(pl.col("lo").is_not_null())
    assert plain.sort("workload").equals(got.sort("workload"))


def test_median_of_an_even_count_by_hand():
    """1, 2, 4, 10: the middle two are 2 and 4, so 2 + (4 - 2) x 0.5 = 3.0; 7 alone: 7.0."""
    df = pl.DataFrame({"workload": pl.Series(["chat"] * 4 + ["rag"], dtype=WORKLOADS),
                       "m": [10.0, 1.0, 4.0, 2.0, 7.0]})
    got = _range_median(df.lazy(), ["workload"], "m", ("lo", "hi", "med")).collect().sort("workload")
    assert got.rows() == [("chat", 1.0, 10.0, 3.0), ("rag", 7.0, 7.0, 7.0)]


def test_point_id_hex_table_is_every_four_digit_hex_in_order():
    """The table point ids are spelled from: entry i is i in four lowercase hex digits (0 -> 0000, 43,981 ->
    abcd, 65,535 -> ffff), built by crossing 256 two-digit strings with themselves."""
    from kvdash.sweep.evaluate import _hex4

    table = _hex4()
    assert table.len() == 65_536 and (table[0], table[43_981], table[65_535]) == ("0000", "abcd", "ffff")
    assert table.to_list() == [f"{i:04x}" for i in range(65_536)]


@given(frames(), st.integers(1, 8), st.booleans())
def test_best_per_workload_with_text_workloads(df, k, maximize):
    """The same with a plain text workload column (the threshold joined, not gathered by Enum code): workloads
    in the order they first appear."""
    df = df.with_columns(pl.col("workload").cast(pl.Utf8))
    got = _best_per_workload(_Spec(_Objective("m", maximize)), df, k)  # type: ignore[arg-type]
    plain = [df.filter((pl.col("workload") == w) & pl.col("m").is_not_null())
             .sort(["m", "_row"], descending=[maximize, False]).head(k)
             for w in dict.fromkeys(df.get_column("workload").to_list())]
    assert pl.concat(plain).equals(got)


DTYPES = pl.Enum(["bf16", "fp8", "int8"])


@st.composite
def dimension_frames(draw: st.DrawFn) -> tuple[pl.DataFrame, str]:
    """A workload column and one dimension column: an Enum, small integers, integers near the 2^62 / workloads
    limit of one combined key, negative integers, or with nulls (the last three keep the two-column key)."""
    n = draw(st.integers(1, 60))
    kind = draw(st.sampled_from(["enum", "small", "huge", "negative", "nulls"]))
    values = {"enum": st.sampled_from(DTYPES.categories.to_list()), "small": st.integers(0, 5),
              "huge": st.sampled_from([0, (1 << 62) // 3 - 1, (1 << 62) // 3, 2**63 - 1]),
              "negative": st.integers(-3, 3), "nulls": st.one_of(st.none(), st.integers(0, 3))}[kind]
    column = pl.Series("d", draw(st.lists(values, min_size=n, max_size=n)),
                       dtype=DTYPES if kind == "enum" else pl.Int64)
    return pl.DataFrame({
        "workload": pl.Series(draw(st.lists(st.sampled_from(WORKLOADS.categories.to_list()), min_size=n,
                                            max_size=n)), dtype=WORKLOADS),
        "d": column,
        "m": pl.Series(draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)), dtype=pl.Int64),
    }), kind


@given(dimension_frames())
def test_one_integer_key_groups_as_the_two_columns(case):
    """The sensitivity table's (dimension, workload) medians from one combined integer key equal polars' group-by
    of the two columns: the same groups, in the same order of first appearance, the same medians."""
    df, kind = case
    key = _pair_key(df, "d")
    d = df.get_column("d")
    one = kind == "enum" or (d.null_count() == 0 and d.min() >= 0 and d.max() < (1 << 62) // 3)  # 3 workloads
    assert len(key) == (1 if one else 2)
    named = [] if len(key) == 2 else [pl.col("d").first(), pl.col("workload").first()]
    got = df.group_by(*key, maintain_order=True).agg(*named, pl.col("m").median()).select("d", "workload", "m")
    plain = df.group_by("d", "workload", maintain_order=True).agg(pl.col("m").median())
    assert plain.equals(got)


MANY = pl.Enum([f"w{i}" for i in range(70)])  # more than 64 categories: the thresholds by one group-by


@given(frames(), st.integers(1, 8), st.booleans())
def test_best_per_workload_with_many_workload_categories(df, k, maximize):
    """Each workload's k-th best found by a group-by (an Enum of 70 categories) instead of one filtered top-k per
    category: the same head of each workload's full sort, workloads in the Enum's order."""
    df = df.with_columns(pl.col("workload").cast(pl.Utf8).replace({"rag": "w69", "long": "w3", "chat": "w0"})
                         .cast(MANY))
    got = _best_per_workload(_Spec(_Objective("m", maximize)), df, k)  # type: ignore[arg-type]
    plain = [df.filter((pl.col("workload") == w) & pl.col("m").is_not_null())
             .sort(["m", "_row"], descending=[maximize, False]).head(k) for w in MANY.categories]
    assert pl.concat(plain).equals(got)


@st.composite
def grids(draw: st.DrawFn) -> pl.DataFrame:
    """More points than CHART_POINTS (24), objective values from a few integers (ties), some points unfit."""
    n = draw(st.integers(25, 70))
    return pl.DataFrame({
        "workload": pl.Series(draw(st.lists(st.sampled_from(WORKLOADS.categories.to_list()), min_size=n,
                                            max_size=n)), dtype=WORKLOADS),
        "m": pl.Series(draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)), dtype=pl.Float64),
        "fits": draw(st.lists(st.booleans(), min_size=n, max_size=n)),
        "id": [f"p{i}" for i in range(n)],
    })


@given(grids(), st.booleans())
def test_one_chart_search_gives_every_chart_and_the_headline(df, maximize):
    """The report searches the chart's points once for CHART_POINTS (24) and takes the smaller charts from it.
    Plain definitions on every point (``rows``: the point's order in the grid):

    * a chart of L points: its best L/2 are the first L/2 by (objective, row) best first; its worst L/2 are the
      first L/2 of the points that fit and are not among those best, by (objective reversed, later row first);
    * the headline's worst 2: the first 2 of the points that fit in that same reversed order;
    * the headline's best ``each`` per workload: the first ``each`` of the decision's best 8 per workload.
    """
    from kvdash.report.analysis import HEADLINE_WORST, MERMAID_POINTS
    from kvdash.report.picks import CHART_POINTS, _Picks

    spec = _Spec(_Objective("m", maximize))
    picks = _Picks(spec, df)  # type: ignore[arg-type]
    assert picks.charts
    rows = df.with_row_index("_row").select("_row", "m", "fits")
    for limit in (CHART_POINTS, MERMAID_POINTS, 2):
        half = limit // 2
        top = rows.sort(["m", "_row"], descending=[maximize, False]).head(half)
        bottom = rows.filter(pl.col("fits") & ~pl.col("_row").is_in(top.get_column("_row").implode())) \
            .sort(["m", "_row"], descending=[not maximize, True]).head(half)
        got_top, got_bottom = picks.chart(limit)
        assert got_top.equals(top) and got_bottom.equals(bottom), limit
    worst = rows.filter(pl.col("fits")).sort(["m", "_row"], descending=[not maximize, True]).head(HEADLINE_WORST)
    assert picks.worst(HEADLINE_WORST).equals(worst)
    wide = df.with_row_index("_row")
    for each in (2, 6, 8):
        plain = _best_per_workload(spec, wide, each)  # type: ignore[arg-type]
        assert picks.rows(picks.best(each), ["workload", "m", "fits", "id"]).equals(plain)


MODELS = pl.Enum(["m1", "m2", "m3"])


@st.composite
def model_frames(draw: st.DrawFn) -> pl.DataFrame:
    """Models x workloads with paged requests (small integers, ties) and ratios that may be null, and sometimes
    NaN, infinite or -0.0 (where the models' ratio median keeps the value-count path)."""
    n = draw(st.integers(1, 40))
    ratio = st.one_of(st.none(), st.sampled_from([0.0, 0.5, 1.25, 2.0, 3.0]),
                      st.sampled_from([-0.0, float("nan"), float("inf")]) if draw(st.booleans()) else st.none())
    return pl.DataFrame({
        "model": pl.Series(draw(st.lists(st.sampled_from(MODELS.categories.to_list()), min_size=n, max_size=n)),
                           dtype=MODELS),
        "workload": pl.Series(draw(st.lists(st.sampled_from(WORKLOADS.categories.to_list()), min_size=n,
                                            max_size=n)), dtype=WORKLOADS),
        "paged_requests": pl.Series(draw(st.lists(st.integers(0, 6), min_size=n, max_size=n)), dtype=pl.Int64),
        "request_capacity_ratio": pl.Series(draw(st.lists(ratio, min_size=n, max_size=n)), dtype=pl.Float64),
    })


def plain_sensitivity(df: pl.DataFrame, dims: list[str]) -> dict[str, object]:
    """The sensitivity tables by their definition: per (value, workload) polars' median of paged requests and,
    for models, in brackets the value-count median of the ratio (:func:`_range_median`, nulls left out); values
    in the order they appear, workloads in the Enum's order, "-" for a pair without points."""
    from kvdash.report.labels import HEADERS, cell
    from kvdash.units import ratio_text

    workloads = [w for w in df.schema["workload"].categories if w in set(df.get_column("workload").to_list())]
    ratios = {(m, w): v for m, w, v in _range_median(df.lazy(), ["model", "workload"], "request_capacity_ratio",
                                                     ("lo", "hi", "med")).select("model", "workload", "med")
              .collect().iter_rows()} if "model" in dims else {}
    tables = []
    for d in dims:
        med = {(v, w): m for v, w, m in df.group_by(d, "workload").agg(pl.col("paged_requests").median()).iter_rows()}
        values = list(dict.fromkeys(df.get_column(d).to_list()))
        if len(values) < 2:
            continue
        rows = [[cell(d, v), *[f"{med[(v, w)]:,.0f}" + (f" ({ratio_text(ratios[(v, w)])})"
                                                         if d == "model" and ratios.get((v, w)) is not None else "")
                               if (v, w) in med else "-" for w in workloads]] for v in values]
        tables.append({"dimension": HEADERS[d], "rows": rows})
    return {"workloads": workloads, "tables": tables}


@given(model_frames())
def test_models_ratio_median_in_their_group_by_equals_value_counts(df):
    """The sensitivity table's model rows: per (model, workload) polars' median of paged requests and the
    ratio's value-count median, taken in the models' own group-by when no ratio is NaN, infinite or -0.0, and
    by value counts otherwise: the same text as the definition (:func:`plain_sensitivity`)."""
    from types import SimpleNamespace

    from kvdash.report.analysis import _sensitivity

    got = _sensitivity(None, df, SimpleNamespace(swept=["model", "workload"]))  # type: ignore[arg-type]
    assert got == plain_sensitivity(df, ["model"])


@st.composite
def block_grids(draw: st.DrawFn) -> tuple[pl.DataFrame, bool]:
    """A grid as ``expand`` writes it: models x block sizes x workloads, the workloads varying fastest (blocks
    of one point per workload); paged requests and ratios drawn per point.  Sometimes two points swap their
    block size or workload, so blocks are no longer whole (the per-point group-by then)."""
    models = draw(st.lists(st.sampled_from(MODELS.categories.to_list()), min_size=1, max_size=3, unique=True))
    sizes = draw(st.lists(st.sampled_from([8, 16, 32, 64]), min_size=1, max_size=3, unique=True))
    loads = draw(st.lists(st.sampled_from(WORKLOADS.categories.to_list()), min_size=1, max_size=3, unique=True))
    keys = [(m, b, w) for m in models for b in sizes for w in loads]
    n = len(keys)
    ratio = st.one_of(st.none(), st.sampled_from([0.5, 1.25, 2.0, 3.0]),
                      st.sampled_from([-0.0, float("nan")]) if draw(st.booleans()) else st.none())
    df = pl.DataFrame({
        "model": pl.Series([k[0] for k in keys], dtype=MODELS),
        "block_size": [k[1] for k in keys],
        "workload": pl.Series([k[2] for k in keys], dtype=WORKLOADS),
        "paged_requests": draw(st.lists(st.integers(0, 6), min_size=n, max_size=n)),
        "request_capacity_ratio": pl.Series(draw(st.lists(ratio, min_size=n, max_size=n)), dtype=pl.Float64),
    })
    whole = True
    if n > 1 and draw(st.booleans()):
        col = draw(st.sampled_from(["block_size", "workload"]))
        i, j = draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))
        values = df.get_column(col).to_list()
        values[i], values[j] = values[j], values[i]
        df = df.with_columns(pl.Series(col, values, dtype=df.schema[col]))
        whole = values == [k[1] if col == "block_size" else k[2] for k in keys]
    return df, whole


@given(block_grids())
def test_sensitivity_from_workload_blocks_equals_the_definition(case):
    """Where points come in blocks of one point per workload and every dimension is the same across a block,
    the sensitivity medians come from one group-by of the blocks (workload j's from the j-th point of each
    block); the text equals the definition (:func:`plain_sensitivity`), blocks whole or broken."""
    from types import SimpleNamespace

    from kvdash.report.analysis import _sensitivity
    from kvdash.report.picks import _blocks

    df, whole = case
    dims = ["model", "block_size"]
    if whole:
        assert _blocks(df, dims) is not None
    got = _sensitivity(None, df, SimpleNamespace(swept=[*dims, "workload"]))  # type: ignore[arg-type]
    assert got == plain_sensitivity(df, dims)

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

from kvdash.report.build import _best_per_workload, _first_k, _pair_key, _range_median

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

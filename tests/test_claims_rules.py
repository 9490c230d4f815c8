"""Each verdict rule of kvdash/sweep/claims.py pinned by a hand-worked value (issue 17).

Small hand-built result frames, no grid expansion: the file runs in about a second, so the mutation driver
(benchmarks/mutation.py) can run it for every mutant of claims.py.  A failure names the rule that broke.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvdash.sweep.claims import (
    Claim,
    Frame,
    Verdict,
    fmt,
    judge,
    judge_all,
    judge_joint,
    load_claims,
    model_properties,
    shared_text,
    shown_value,
)


def _claim(**kw: Any) -> Claim:
    base: dict[str, Any] = dict(id="c", claim="", source="s", conditions="k", kind="waste",
                                metric="reservation_waste_percent", claimed=(60, 90), tolerance=2)
    base.update(kw)
    return Claim(**base)


def _frame(values: list[float | None], **cols: Any) -> pl.DataFrame:
    n = len(values)
    base: dict[str, Any] = {"model": ["m"] * n, "workload": ["w"] * n, "lengths": ["100"] * n, "tp": [1] * n,
                            "pp": [1] * n, "prefix": [0] * n, "reservation_waste_percent": values}
    base.update(cols)
    return pl.DataFrame(base)


@dataclass
class FakeArch:
    """The attributes model_properties reads from an Architecture."""
    kv_heads: int = 8
    num_attention_heads: int = 64
    weight_basis: str = ""
    weight_bytes: int = 0
    windows: list[int] = field(default_factory=list)
    mla: bool = False

    def first(self, kind: str) -> bool:
        return self.mla and kind == "mla"


class TestText:
    def test_claimed_text(self):
        """[60, 90] +/- 2 -> '60 to 90 (± 2)'; [4, None] 'at least 4'; [5, 5] '5'; no range '-'."""
        assert _claim().claimed_text() == "60 to 90 (± 2)"
        assert _claim(claimed=(4, None), tolerance=0).claimed_text() == "at least 4"
        assert _claim(claimed=(5, 5), tolerance=0).claimed_text() == "5"
        assert _claim(claimed=None).claimed_text() == "-"

    def test_fmt(self):
        """Integers with thousands commas; below 1,000 four significant digits (999.96 rounds to 1,000, not
        the one-decimal '1,000.0' of the large branch); from 1,000 one decimal (1,000.5 stays
        1,000.5, where four digits would give 1,000)."""
        assert (fmt(None), fmt(1234.0), fmt(0.147723), fmt(999.96), fmt(1234.56), fmt(1000.5)) == \
               ("-", "1,234", "0.1477", "1,000", "1,234.6", "1,000.5")

    def test_loaded_tolerance_defaults_to_zero(self):
        """70b-8xh100-contiguous-20 states no tolerance: 0, and its range reads '18 to 22' with no '±'."""
        c = next(c for c in load_claims() if c.id == "70b-8xh100-contiguous-20")
        assert c.tolerance == 0.0 and c.claimed_text() == "18 to 22"

    def test_shown_value_gib_from_2_pow_30(self):
        """2^30 B and up are shown in GiB: 2^30 -> 1.00 GiB, 3 x 2^29 -> 1.50 GiB; 2^30 - 1 stays bytes."""
        assert shown_value(1 << 30) == "1.00 GiB"
        assert shown_value(3 << 29) == "1.50 GiB"
        assert shown_value((1 << 30) - 1) == "1073741823"
        assert shown_value(True) == "True"


class TestDirection:
    def test_defaults_none_below_or_above(self):
        """A verdict built without below/above counts 0 of each: 2 of 2 within -> 'within everywhere'."""
        assert Verdict(_claim(), "holds", "70", 2, 2, "", "").direction == "within everywhere"

    def test_one_point_says_no_everywhere(self):
        """One point above: 'above'; two points above: 'above everywhere'."""
        assert Verdict(_claim(), "contradicted", "99", 1, 0, "", "", above=1).direction == "above"
        assert Verdict(_claim(), "contradicted", "99", 2, 0, "", "", above=2).direction == "above everywhere"

    def test_no_direction_without_points_or_judgement(self):
        assert Verdict(_claim(), "holds", "-", 0, 0, "", "").direction == ""
        assert Verdict(_claim(), "circular", "50", 3, 0, "", "").direction == ""


class TestModelProperties:
    def test_attention_kinds_and_parameters(self):
        """kv_heads 1: mqa; 2 of 64: gqa; 64 of 64: mha (equal counts are MHA); MLA first; windows add
        '+sliding'.  Parameters: '70.6B published parameters' -> 70.6; weights 16e9 B at 2 B each -> 8.0;
        an estimate's bytes or no bytes -> None."""
        props = model_properties({
            "q": FakeArch(kv_heads=1, weight_basis="8.03B published parameters"),
            "g": FakeArch(kv_heads=2, weight_bytes=16_000_000_000),
            "h": FakeArch(kv_heads=64, windows=[4096], weight_bytes=16_000_000_000, weight_basis="estimate x"),
            "d": FakeArch(kv_heads=1, mla=True),
        })
        assert props == {"q": {"params_b": 8.03, "attention": "mqa"},
                         "g": {"params_b": 8.0, "attention": "gqa"},
                         "h": {"params_b": None, "attention": "mha+sliding"},
                         "d": {"params_b": None, "attention": "mla"}}


class TestApplies:
    def test_tp_times_pp_with_pp_above_1(self):
        """tp_times_pp = tp x pp: (2, 4) -> 8 applies, (8, 1) -> 8 applies, (4, 1) -> 4 does not, and (4, 2) ->
        8 applies (tp // pp would give 2).  Values 70, 70, 99(excluded), 99: 2 of 3 within."""
        df = _frame([70.0, 70.0, 99.0, 99.0], tp=[2, 8, 4, 4], pp=[4, 1, 1, 2])
        v = judge(Frame(df), _claim(applies_to={"tp_times_pp": [8]}), [])
        assert (v.points, v.holding, v.above) == (3, 2, 1)

    def test_prefix_positive(self):
        """prefix_positive: prefix > 0, so prefix 0 is out and prefix 1 is in."""
        df = _frame([99.0, 70.0], prefix=[0, 1])
        v = judge(Frame(df), _claim(applies_to={"prefix_positive": [True]}), [])
        assert (v.verdict, v.points, v.computed) == ("holds", 1, "70")

    def test_params_class_is_inclusive_between(self):
        """params_b in [8, 70] billions: the 8B and 70B models apply (bounds included), the 405B does not;
        none of the three is 80 (a class [80, 80] would give none)."""
        models = {"a": FakeArch(weight_basis="8B published parameters"),
                  "b": FakeArch(weight_basis="70B published parameters"),
                  "c": FakeArch(weight_basis="405B published parameters")}
        df = _frame([70.0, 99.0, 70.0], model=["a", "b", "c"])
        v = judge(Frame(df, model_properties(models)), _claim(applies_to={"params_b": [8, 70]}), ["model"])
        assert (v.verdict, v.points, v.holding, v.where) == ("holds only where", 2, 1, "model = a")

    def test_params_class_named_when_nothing_applies(self):
        """No model of 10-20B: not applicable, 0 points, the class named in the note."""
        models = {"a": FakeArch(weight_basis="8B published parameters")}
        df = _frame([70.0])
        df = df.with_columns(pl.lit("a").alias("model"))
        v = judge(Frame(df, model_properties(models)), _claim(applies_to={"params_b": [10, 20]}), [])
        assert (v.verdict, v.points, v.holding) == ("not applicable", 0, 0)
        assert v.note == "this grid has no model of 10-20B parameters"

    def test_attention_on_enum_model_column(self):
        """attention in [mqa]: only model 'q' (kv_heads 1) applies, looked up per Enum category."""
        models = {"q": FakeArch(kv_heads=1), "g": FakeArch(kv_heads=8)}
        df = _frame([99.0, 70.0]).with_columns(pl.Series("model", ["g", "q"], dtype=pl.Enum(["g", "q"])))
        v = judge(Frame(df, model_properties(models)), _claim(applies_to={"attention": ["mqa"]}), [])
        assert (v.verdict, v.points, v.computed) == ("holds", 1, "70")


class TestNotApplicable:
    def test_not_computable(self):
        v = judge(_frame([1.0]), _claim(kind="throughput", metric=None, claimed=None, settle="a benchmark"))
        assert (v.verdict, v.points, v.holding, v.computed) == ("not computable", 0, 0, "-")
        assert v.note == "capacity arithmetic cannot settle a throughput claim; a benchmark"

    def test_a_time_claim_without_the_grids_time_columns(self):
        """A claim judged on a grid's ``simulate: time:`` columns, on a grid without them: not computable, 0 points,
        0 holding, and the note names the column (a mutation run of 2026-12-07 found the counts unguarded)."""
        c = _claim(kind="time", metric="time_paged_rate_met_up_to", settle="a simulate: time: block")
        v = judge(_frame([1.0]), c)
        assert (v.verdict, v.points, v.holding, v.computed) == ("not computable", 0, 0, "-")
        assert v.note == "needs the simulator in seconds (time_paged_rate_met_up_to); a simulate: time: block"

    def test_missing_column(self):
        """applies_to names gpu, a column the results lack: not applicable, 0 points."""
        v = judge(_frame([70.0]), _claim(applies_to={"gpu": ["h100-80gb"]}))
        assert (v.verdict, v.points, v.holding) == ("not applicable", 0, 0)
        assert v.note == "this grid has no gpu in {h100-80gb}"

    def test_no_matching_point(self):
        """The column is there but no point matches (or the metric is null): n = 0, not applicable."""
        v = judge(_frame([70.0], tp=[2]), _claim(applies_to={"tp": [1]}))
        assert (v.verdict, v.points, v.holding, v.note) == ("not applicable", 0, 0, "this grid has no tp in {1}")
        v = judge(_frame([None, None]), _claim())
        assert (v.verdict, v.points, v.holding) == ("not applicable", 0, 0)

    def test_over_lengths(self):
        """An average over many lengths: no matching point -> 'has no'; one length only -> the remainder
        note; lengths '100,200' (several) -> judged on that point alone (70 within)."""
        c = _claim(over_lengths=True, applies_to={"tp": [1]})
        v = judge(_frame([70.0], tp=[2]), c)
        assert (v.verdict, v.points, v.holding, v.note) == ("not applicable", 0, 0, "this grid has no tp in {1}")
        v = judge(_frame([70.0]), c)
        assert (v.verdict, v.points, v.holding) == ("not applicable", 0, 0)
        assert "remainder mod the block size" in v.note
        v = judge(_frame([70.0, 99.0], lengths=["100,200", "100"]), c)
        assert (v.verdict, v.points, v.holding, v.computed) == ("holds", 1, 1, "70")


class TestVerdictRules:
    def test_single_point_holds(self):
        """One point at 60 (lower bound exactly): holds, 1 of 1."""
        v = judge(_frame([60.0]), _claim(tolerance=0), [])
        assert (v.verdict, v.points, v.holding, v.direction) == ("holds", 1, 1, "within")

    def test_tolerance_on_both_bounds(self):
        """60-90 +/- 2: 58 and 92 are within (bounds inclusive), 57.9 below, 92.1 above; range 57.9 to 92.1."""
        v = judge(_frame([58.0, 92.0, 57.9, 92.1]), _claim(), [])
        assert (v.verdict, v.below, v.holding, v.above, v.computed) == ("holds only where", 1, 2, 1, "57.9 to 92.1")

    def test_open_upper_bound(self):
        """at least 1 (no upper bound): 1e9 is within, 0.5 below."""
        v = judge(_frame([1e9, 0.5]), _claim(claimed=(1, None), tolerance=0), [])
        assert (v.below, v.holding, v.above) == (1, 1, 0)

    def test_one_of_three_is_only_where_not_contradicted(self):
        """1 of 3 within: 'holds only where' (h == 0 is the only contradiction)."""
        v = judge(_frame([70.0, 99.0, 99.0], tp=[1, 2, 4]), _claim(), ["tp"])
        assert (v.verdict, v.holding, v.where) == ("holds only where", 1, "tp = 1")

    def test_circular(self):
        """Circular: shown with its computed range, never judged (holding 0, no where)."""
        v = judge(_frame([50.0, 52.0]), _claim(circular="an input"), [])
        assert (v.verdict, v.computed, v.points, v.holding, v.where, v.note) == \
               ("circular", "50 to 52", 2, 0, "", "an input")

    def test_where_on_integer_dimension_with_none(self):
        """budget_bytes none (no GPU) agrees, 7 does not: 'budget_bytes = None' (shorter than
        'everywhere except where budget_bytes = 7')."""
        v = judge(_frame([70.0, 99.0], budget_bytes=[None, 7]), _claim(), ["budget_bytes"])
        assert v.where == "budget_bytes = None"

    def test_where_on_enum_dimension(self):
        """kv_dtype as an Enum (as in sweep results): fp8 agrees, bf16 and fp16 do not."""
        df = _frame([70.0, 99.0, 99.0]).with_columns(
            pl.Series("kv_dtype", ["fp8", "bf16", "fp16"], dtype=pl.Enum(["bf16", "fp16", "fp8"])))
        v = judge(df, _claim(applies_to={"kv_dtype": ["fp8", "bf16", "fp16"]}), ["kv_dtype"])
        assert (v.points, v.where) == (3, "kv_dtype = fp8")

    def test_where_picks_the_shorter_text(self):
        """Agreeing: block 16, 32, 64, 128; failing: 256.  'block_size ≠ 256' (16 chars) is shorter than
        'everywhere except where block_size = 256' (40): min by length."""
        v = judge(_frame([70.0, 70.0, 70.0, 70.0, 99.0], block_size=[16, 32, 64, 128, 256]), _claim(),
                  ["block_size"])
        assert v.where == "block_size ≠ 256"
        v = judge(_frame([70.0, 99.0, 99.0, 99.0], tp=[1, 2, 4, 8], pp=[1, 1, 2, 2]), _claim(), ["tp", "pp"])
        assert v.where == "tp = 1 AND pp = 1"

    def test_where_names_what_the_disagreeing_points_share(self):
        """The 'everywhere except' side of the where rule reads the disagreeing points' values.  tp x pp in
        {1, 2} x {1, 2}, only (tp 2, pp 2) at 99 (above 60-90): the agreeing points take every value of both
        dimensions (no text), the disagreeing one shares tp = 2 and pp = 2, so the where text is
        'everywhere except where tp = 2 AND pp = 2' (if the disagreeing side read every point's or only the
        agreeing points' values it would name nothing and fall back to 'no single swept dimension ...')."""
        v = judge(_frame([70.0, 70.0, 70.0, 99.0], tp=[1, 1, 2, 2], pp=[1, 2, 1, 2]), _claim(), ["tp", "pp"])
        assert (v.verdict, v.points, v.holding, v.above) == ("holds only where", 4, 3, 1)
        assert v.where == "everywhere except where tp = 2 AND pp = 2"
        j = _claim(id="j1", joint="J", tolerance=0, claimed=(0, 100))
        v = judge_joint(Frame(_frame([70.0, 70.0, 70.0, 99.0], tp=[1, 1, 2, 2], pp=[1, 2, 1, 2])),
                        [_claim(id="j0", joint="J"), j], ["tp", "pp"])
        assert (v.verdict, v.holding, v.where) == ("holds only where", 3, "everywhere except where tp = 2 AND pp = 2")


class TestSharedText:
    def test_edges(self):
        """A dimension separates only when some but not all of its values hold: none held or all held -> ''."""
        assert shared_text({"a": [1, 2]}, {"a": []}) == ""
        assert shared_text({"a": [1, 2]}, {"a": [1, 2]}) == ""
        assert shared_text({"a": [1, 2]}, {"a": [2]}) == "a = 2"
        assert shared_text({"a": [1]}, {"a": [1]}) == ""

    def test_negate_above_half_plus_one(self):
        """Of 6 values, 'not in' when more than 6 / 2 + 1 = 4 hold: 3 and 4 held are listed, 5 held negate."""
        every = {"a": [1, 2, 3, 4, 5, 6]}
        assert shared_text(every, {"a": [1, 2, 3]}) == "a in {1, 2, 3}"
        assert shared_text(every, {"a": [1, 2, 3, 4]}) == "a in {1, 2, 3, 4}"
        assert shared_text(every, {"a": [1, 2, 3, 4, 5]}) == "a ≠ 6"
        assert shared_text({"a": list(range(10))}, {"a": list(range(8))}) == "a not in {8, 9}"

    def test_no_cap_on_listed_values(self):
        """The `where` text lists every value it names: no 5-example cap (the old examples list, capped at 5,
        went with the verdict rework).  7 of 20 held (7 <= 20 / 2 + 1 = 11): all 7 listed; 12 of 20 held (12 > 11):
        all 8 others listed after 'not in'."""
        every = {"a": list(range(20))}
        assert shared_text(every, {"a": list(range(7))}) == "a in {0, 1, 2, 3, 4, 5, 6}"
        assert shared_text(every, {"a": list(range(12))}) == "a not in {12, 13, 14, 15, 16, 17, 18, 19}"


class TestPair:
    def test_pair_over_unswept_dimensions(self):
        """fp8 over bf16, points alike in block_size (2 values: a key even though it has only two):
        block 16: 200 / 100 = 2.0; block 32: 190 / 50 = 3.8; claimed 1.95-2.05 with no tolerance:
        1 of 2 within, range 2 to 3.8 (pairing across block sizes would give 200/50 or 190/100)."""
        df = _frame([200.0, 100.0, 190.0, 50.0], kv_dtype=["fp8", "bf16", "fp8", "bf16"],
                    block_size=[16, 16, 32, 32])
        c = _claim(pair={"dimension": "kv_dtype", "over": ["fp8", "bf16"]}, claimed=(1.95, 2.05), tolerance=0)
        v = judge(df, c)
        assert (v.verdict, v.points, v.holding, v.computed) == ("holds only where", 2, 1, "2 to 3.8")
        assert v.where == "block_size = 16"

    def test_pair_not_applicable_note(self):
        """A pair claim whose applies_to column is missing names the pair it needed."""
        v = judge(_frame([1.0]), _claim(pair={"dimension": "kv_dtype", "over": ["fp8", "bf16"]},
                                        applies_to={"gpu": ["h200"]}))
        assert v.verdict == "not applicable" and v.note == "this grid has no points with kv_dtype = fp8 and bf16"


class TestJoint:
    A = _claim(id="a", joint="j", source="src-a", conditions="cond-a", kind="capacity", metric="x",
               claimed=(10, 20), tolerance=0)
    B = _claim(id="b", joint="j", source="src-b", conditions="cond-b", kind="waste", metric="y",
               claimed=(1, 2), tolerance=0)

    def test_joint_on_one_configuration(self):
        """tp 1: x 15, y 1.5 (both within); tp 2: x 15, y 3 (y above); tp 4: x 25, y 1 (x above).
        1 of 3 configurations meets both: holds only where tp = 1; ranges x 15 to 25, y 1 to 3.
        The joint claim takes the first member's source, conditions and kind."""
        df = pl.DataFrame({"tp": [1, 2, 4], "x": [15, 15, 25], "y": [1.5, 3.0, 1.0]})
        v = judge_joint(Frame(df), [self.A, self.B], ["tp"])
        assert (v.verdict, v.points, v.holding, v.where, v.computed, v.note) == \
               ("holds only where", 3, 1, "tp = 1", "15 to 25; 1 to 3", "")
        assert (v.claim.id, v.claim.source, v.claim.conditions, v.claim.kind) == ("j", "src-a", "cond-a", "capacity")
        assert v.claim.metric == "x + y"

    def test_joint_all_or_none(self):
        """All within: holds, no where; none within (x 5 below, y 0 below... y 1 within but x not): contradicted,
        'no configuration meets both'."""
        df = pl.DataFrame({"tp": [1, 2], "x": [15, 16], "y": [1.0, 2.0]})
        v = judge_joint(Frame(df), [self.A, self.B], ["tp"])
        assert (v.verdict, v.holding, v.where, v.note) == ("holds", 2, "", "")
        df = pl.DataFrame({"tp": [1, 2], "x": [5, 16], "y": [1.0, 3.0]})
        v = judge_joint(Frame(df), [self.A, self.B], ["tp"])
        assert (v.verdict, v.holding, v.where, v.note) == ("contradicted", 0, "", "no configuration meets both")

    def test_joint_not_applicable(self):
        """A member's column missing, or no configuration both apply to: 0 points."""
        df = pl.DataFrame({"tp": [1], "x": [15], "y": [1.5]})
        v = judge_joint(Frame(df), [self.A, _claim(**{**self.B.__dict__, "applies_to": {"gpu": ["h200"]}})], ["tp"])
        assert (v.verdict, v.points, v.holding) == ("not applicable", 0, 0)
        v = judge_joint(Frame(df), [self.A, _claim(**{**self.B.__dict__, "applies_to": {"tp": [8]}})], ["tp"])
        assert (v.verdict, v.points, v.holding) == ("not applicable", 0, 0)

    def test_joint_inserted_after_its_last_member(self):
        """judge_all puts the joint verdict right after the later of its two members; with one member selected
        there is no joint verdict.  8B model on 8 x H100: the params_b class 65-75 does not apply."""
        df = _frame([1.0], gpu=["h100-80gb"], tp=[8], contiguous_requests=[20], paged_requests=[70],
                    prefix_saved_percent=[50.0])
        models = {"m": FakeArch(weight_basis="70B published parameters")}
        ids = ["70b-8xh100-contiguous-20", "70b-8xh100-paged-60-80", "prefix-sharing-40-60"]
        order = [v.claim.id for v in judge_all(df, ids=ids, dims=["tp"], models=models)]
        assert order == ["70b-8xh100-contiguous-20", "70b-8xh100-paged-60-80", "vendor-70b-8xh100",
                         "prefix-sharing-40-60"]
        order = [v.claim.id for v in judge_all(df, ids=ids[:1], dims=["tp"], models=models)]
        assert order == ["70b-8xh100-contiguous-20"]


class TestManyClaimsInOnePass:
    """judge_all tallies every claim and joint group on the results frame in one pass, packing each one's
    status byte eight to a 64-bit word: with 46 jobs six words hold them (the last, jobs 40 to 45), so a
    verdict is right only if the packing puts each job's byte in its own word and place."""

    N = 40

    def claims(self) -> list[Claim]:
        """c1 .. c40: claim k says x is exactly k.  Then two joint groups, judged as jobs 44 and 45: A (x in
        [1, 2] and x in [2, 3], both only at x = 2) and B (x in [39, 40] and x in [38, 39], both only at
        x = 39)."""
        exact = [_claim(id=f"c{k}", kind="capacity", metric="x", claimed=(k, k), tolerance=0)
                 for k in range(1, self.N + 1)]
        def member(name: str, joint: str, lo: int) -> Claim:
            return _claim(id=name, joint=joint, kind="capacity", metric="x", claimed=(lo, lo + 1), tolerance=0)
        return [*exact, member("a1", "A", 1), member("a2", "A", 2), member("b1", "B", 39), member("b2", "B", 38)]

    def test_every_claim_judged_with_its_own_bits(self, monkeypatch):
        """40 points, block_size = x = 1 .. 40.  Claim ck holds at exactly one point, x = k: 'holds only where
        block_size = k' (1 value of 40 is not above 40 / 2 + 1, so it is listed, and it is shorter than
        'everywhere except where block_size ≠ k'), 1 of 40 within, k - 1 below, 40 - k above.  Joint A holds
        only where block_size = 2 and joint B only where block_size = 39, each inserted after its last member
        (a joint group's verdict landing on the other group's slot would swap the two where texts)."""
        import kvdash.sweep.claims as claims_mod

        monkeypatch.setattr(claims_mod, "load_claims", self.claims)
        xs = list(range(1, self.N + 1))
        verdicts = judge_all(pl.DataFrame({"block_size": xs, "x": xs}), dims=["block_size"])
        got = [(v.claim.id, v.verdict, v.points, v.holding, v.below, v.above, v.where) for v in verdicts]
        want = [(f"c{k}", "holds only where", 40, 1, k - 1, 40 - k, f"block_size = {k}") for k in xs]
        want += [("a1", "holds only where", 40, 2, 0, 38, "block_size in {1, 2}"),
                 ("a2", "holds only where", 40, 2, 1, 37, "block_size in {2, 3}"),
                 ("A", "holds only where", 40, 1, 0, 0, "block_size = 2"),
                 ("b1", "holds only where", 40, 2, 38, 0, "block_size in {39, 40}"),
                 ("b2", "holds only where", 40, 2, 37, 1, "block_size in {38, 39}"),
                 ("B", "holds only where", 40, 1, 0, 0, "block_size = 39")]
        assert got == want

    def test_two_joint_groups_keep_their_own_verdicts(self, monkeypatch):
        """Only the four joint members (jobs 0-3) and their groups A and B (jobs 4 and 5, tallied after every
        claim): each group's tally goes back to its own slot, so A (both members within only at x = 2) reads
        'block_size = 2' and B (only at x = 39) reads 'block_size = 39', each right after its last member."""
        import kvdash.sweep.claims as claims_mod

        monkeypatch.setattr(claims_mod, "load_claims", lambda: self.claims()[self.N:])
        xs = list(range(1, self.N + 1))
        verdicts = judge_all(pl.DataFrame({"block_size": xs, "x": xs}), dims=["block_size"])
        assert [(v.claim.id, v.holding, v.where) for v in verdicts if v.claim.id in ("A", "B")] == \
               [("A", 1, "block_size = 2"), ("B", 1, "block_size = 39")]
        assert [v.claim.id for v in verdicts] == ["a1", "a2", "A", "b1", "b2", "B"]


# ---- the fast paths of judging (issue 12): each against the plain path it replaces ----

PAIR = {"dimension": "kv_dtype", "over": ["fp8", "bf16"]}


def _verdict_fields(v: Verdict) -> tuple[Any, ...]:
    return (v.claim.id, v.verdict, v.computed, v.points, v.holding, v.where, v.note, v.below, v.above)


def _by_join(df: pl.DataFrame | Frame, claim: Claim, dims: list[str] | None) -> Verdict:
    """The verdict with the positional pairing switched off: every pair found by the hash join."""
    import kvdash.sweep.claims as claims_mod

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(claims_mod, "_pair_by_position", lambda *a: None)
        return judge(df, claim, dims)


@st.composite
def _pair_grids(draw: Any) -> tuple[pl.DataFrame, list[str]]:
    """A cross product of kv_dtype (Enum, 1-3 values), block_size (1-3 ints) and model (1-2 texts) in a random
    nesting order (prefix 0 throughout, as in every results frame), metric paged_requests a small integer (0 gives
    inf or nan ratios, dropped); then maybe some points
    removed (an exclude rule) and maybe the rows shuffled."""
    import itertools

    kinds = draw(st.lists(st.sampled_from(["bf16", "fp8", "int8"]), min_size=1, max_size=3, unique=True))
    values = {"kv_dtype": kinds,
              "block_size": draw(st.lists(st.sampled_from([8, 16, 32]), min_size=1, max_size=3, unique=True)),
              "model": draw(st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=2, unique=True))}
    order = draw(st.permutations(list(values)))
    rows = [dict(zip(order, combo, strict=True)) for combo in itertools.product(*(values[d] for d in order))]
    if draw(st.booleans()):
        keep = draw(st.lists(st.booleans(), min_size=len(rows), max_size=len(rows)))
        rows = [r for r, k in zip(rows, keep, strict=True) if k] or rows[:1]
    if draw(st.booleans()):
        rows = draw(st.permutations(rows))
    xs = draw(st.lists(st.integers(0, 4), min_size=len(rows), max_size=len(rows)))
    df = pl.DataFrame({"kv_dtype": pl.Series([r["kv_dtype"] for r in rows], dtype=pl.Enum(["bf16", "fp8", "int8"])),
                       "block_size": [r["block_size"] for r in rows], "model": [r["model"] for r in rows],
                       "prefix": [0] * len(rows), "paged_requests": xs})
    return df, list(order)


class TestPairByPosition:
    C = _claim(metric="paged_requests", kind="capacity", pair=PAIR, claimed=(1.5, 2.5), tolerance=0.25)

    @settings(max_examples=60, deadline=None)
    @given(_pair_grids())
    def test_same_verdict_as_the_join(self, grid: tuple[pl.DataFrame, list[str]]):
        """Property: on any grid (complete or with points removed, in order or shuffled) the verdict with the
        positional pairing equals the verdict of the hash join alone, swept dimensions or not."""
        df, dims = grid
        for swept in (dims, None):
            assert _verdict_fields(judge(df, self.C, swept)) == _verdict_fields(_by_join(df, self.C, swept))

    def test_complete_grid_in_order_is_paired_by_position(self):
        """bf16 rows first, then fp8 (the partner 2 rows back: a negative offset); x fp8 4, 6 over bf16 2, 2:
        ratios 2 and 3, claimed 1.5-2.5 +/- 0.25: 1 of 2 within (block 8), 1 above."""
        from kvdash.sweep.claims import _applies, _pair_by_position

        df = pl.DataFrame({"kv_dtype": ["bf16", "bf16", "fp8", "fp8"], "block_size": [8, 16, 8, 16],
                           "paged_requests": [2, 2, 4, 6]}, schema_overrides={"kv_dtype": pl.Enum(["bf16", "fp8"])})
        frame = Frame(df)
        cond = _applies(frame, self.C)
        assert cond is not None and _pair_by_position(frame, self.C, cond, ["block_size"]) is not None
        v = judge(frame, self.C, ["kv_dtype", "block_size"])
        assert (v.verdict, v.points, v.holding, v.above, v.computed, v.where) == \
               ("holds only where", 2, 1, 1, "2 to 3", "block_size = 8")

    def test_partner_after(self):
        """fp8 first, bf16 one row on (a positive offset): 6 / 3 = 2 and 5 / 1 = 5 (above 2.75)."""
        from kvdash.sweep.claims import _pair_by_position

        df = pl.DataFrame({"kv_dtype": ["fp8", "bf16", "fp8", "bf16"], "block_size": [8, 8, 16, 16],
                           "paged_requests": [6, 3, 5, 1]})
        assert _pair_by_position(Frame(df), self.C, pl.lit(True), ["block_size"]) is not None
        v = judge(df, self.C, ["kv_dtype", "block_size"])
        assert (v.points, v.holding, v.above, v.computed) == (2, 1, 1, "2 to 5")
        assert _verdict_fields(v) == _verdict_fields(_by_join(df, self.C, ["kv_dtype", "block_size"]))

    @pytest.mark.parametrize(("case", "cols"), [
        # the last fp8 point has no row one on: not every first-value point has its partner there
        ("unpaired last point", {"kv_dtype": ["fp8", "bf16", "fp8"], "block_size": [8, 8, 16]}),
        # the first partner is 1 row on, the second 2: block sizes differ there
        ("partner further on", {"kv_dtype": ["fp8", "bf16", "fp8", "int8", "bf16"],
                                "block_size": [8, 8, 16, 16, 16]}),
        # the row one on is at bf16 but another block size
        ("key differs", {"kv_dtype": ["fp8", "bf16", "fp8", "bf16"], "block_size": [8, 8, 16, 32]}),
        # the row there is not at the second value
        ("not the second value", {"kv_dtype": ["fp8", "bf16", "fp8", "int8"], "block_size": [8, 8, 16, 16]}),
    ])
    def test_falls_back_to_the_join(self, case: str, cols: dict[str, list[Any]]):
        """Where some first-value point's partner is not the row a fixed offset on, no positional pairing
        (None) and the join decides: the verdict is the join's."""
        from kvdash.sweep.claims import _pair_by_position

        n = len(cols["kv_dtype"])
        df = pl.DataFrame({**cols, "paged_requests": [4 - i % 3 for i in range(n)]})
        frame = Frame(df)
        assert _pair_by_position(frame, self.C, pl.lit(True), ["block_size"]) is None, case
        assert _verdict_fields(judge(frame, self.C, None)) == _verdict_fields(_by_join(frame, self.C, None))

    def test_keys_that_equality_cannot_pair(self):
        """A float key (where == and the hash differ on -0.0) or a null key: the join decides."""
        from kvdash.sweep.claims import _pair_by_position

        base = {"kv_dtype": ["fp8", "bf16"], "paged_requests": [4, 2]}
        floats = Frame(pl.DataFrame({**base, "gpu_util": [0.9, 0.9]}))
        assert _pair_by_position(floats, self.C, pl.lit(True), ["gpu_util"]) is None
        nulls = Frame(pl.DataFrame({**base, "block_size": [None, None]}, schema_overrides={"block_size": pl.Int64}))
        assert _pair_by_position(nulls, self.C, pl.lit(True), ["block_size"]) is None
        ints = Frame(pl.DataFrame({**base, "block_size": [8, 8]}))
        assert _pair_by_position(ints, self.C, pl.lit(True), ["block_size"]) is not None

    def test_no_first_value_point(self):
        """No fp8 point at all: nothing to pair (positionally, with nothing checked); not applicable."""
        df = pl.DataFrame({"kv_dtype": ["bf16", "bf16"], "block_size": [8, 16], "paged_requests": [1, 2]})
        v = judge(df, self.C, ["block_size"])
        assert (v.verdict, v.points) == ("not applicable", 0)
        assert _verdict_fields(v) == _verdict_fields(_by_join(df, self.C, ["block_size"]))


    def test_no_points_at_all(self):
        """An empty results frame: nothing to pair, not applicable (as the join finds)."""
        df = pl.DataFrame({"kv_dtype": [], "block_size": [], "prefix": [], "paged_requests": []},
                          schema={"kv_dtype": pl.Utf8, "block_size": pl.Int64, "prefix": pl.Int64,
                                  "paged_requests": pl.Int64})
        v = judge(df, self.C, ["block_size"])
        assert (v.verdict, v.points) == ("not applicable", 0)
        assert _verdict_fields(v) == _verdict_fields(_by_join(df, self.C, ["block_size"]))


class TestNeverApplies:
    def test_absent_category_is_not_tallied(self, monkeypatch):
        """applies_to model [opt-13b] on an Enum model column without that category: not applicable with the
        usual note, decided before any pass (the tally never sees the claim); on a text column the same
        verdict comes from the tally."""
        import kvdash.sweep.claims as claims_mod

        seen: list[str] = []
        tally = claims_mod._tally_many
        monkeypatch.setattr(claims_mod, "_tally_many", lambda lazy, jobs, dims: (
            seen.extend(j.claim.id for j in jobs), tally(lazy, jobs, dims))[1])
        c = _claim(id="opt", applies_to={"model": ["opt-13b"]})
        enum = _frame([70.0]).with_columns(pl.col("model").cast(pl.Enum(["m"])))
        for df, tallied in ((enum, []), (_frame([70.0]), ["opt"])):
            seen.clear()
            v = judge(df, c, [])
            assert (v.verdict, v.points, v.note) == ("not applicable", 0, "this grid has no model in {opt-13b}")
            assert seen == tallied

    def test_joint_member_on_absent_category(self):
        """A joint group one of whose members names no category of an Enum column: not applicable."""
        df = pl.DataFrame({"tp": [1], "x": [15], "y": [1.5]}).with_columns(model=pl.lit("m", pl.Enum(["m"])))
        member = _claim(id="b", joint="j", metric="y", claimed=(1, 2), tolerance=0, applies_to={"model": ["z"]})
        v = judge_joint(Frame(df), [TestJoint.A, member], ["tp"])
        assert (v.verdict, v.points, v.note) == ("not applicable", 0, "this grid has no configuration both apply to")

    def test_params_class_is_not_a_category_test(self):
        """params_b is a class of parameter counts, never a text column's categories: a class naming no Enum
        model's *name* still applies (70B model 'a' in [65, 75])."""
        models = {"a": FakeArch(weight_basis="70B published parameters")}
        df = _frame([70.0]).with_columns(pl.col("model").cast(pl.Enum(["m", "a"])).alias("model")) \
            .with_columns(pl.lit("a").cast(pl.Enum(["m", "a"])).alias("model"))
        v = judge(Frame(df, model_properties(models)), _claim(applies_to={"params_b": [65, 75]}), [])
        assert (v.verdict, v.points) == ("holds", 1)


class TestCategoryCodes:
    def test_params_class_on_enum_models_inclusive(self):
        """The parameter class on an Enum model column (a test of the model codes): 8B and 70B in [8, 70]
        (both ends included), 405B and the model with no count out: as on a text column."""
        models = {"a": FakeArch(weight_basis="8B published parameters"),
                  "b": FakeArch(weight_basis="70B published parameters"),
                  "c": FakeArch(weight_basis="405B published parameters"), "d": FakeArch()}
        text = _frame([70.0, 99.0, 70.0, 70.0], model=["a", "b", "c", "d"])
        enum = text.with_columns(pl.col("model").cast(pl.Enum(["a", "b", "c", "d"])))
        for df in (text, enum):
            v = judge(Frame(df, model_properties(models)), _claim(applies_to={"params_b": [8, 70]}), ["model"])
            assert (v.verdict, v.points, v.holding, v.where) == ("holds only where", 2, 1, "model = a")

    def test_boolean_helper_by_codes_keeps_nulls(self):
        """_several_lengths on an Enum lengths column (codes where the text has a comma) equals the lookup on a
        text column, null where lengths is null."""
        lengths = ["100", "1,2", None, "3,4,5"]
        text = pl.DataFrame({"lengths": lengths})
        enum = text.with_columns(pl.col("lengths").cast(pl.Enum(["100", "1,2", "3,4,5"])))
        got = [df.select(Frame(df).helper("_several_lengths")).to_series().to_list() for df in (text, enum)]
        assert got == [[False, True, None, True]] * 2

    def test_registry_read_once_new_list_each_call(self):
        """load_claims: the same claims on every call, in a list of its own (changing one changes no other)."""
        first, second = load_claims(), load_claims()
        assert first == second and first is not second
        first.clear()
        assert load_claims() == second


def _status(v: float | None, lo: float, hi: float) -> str:
    return "" if v is None else ("f" if v < lo or v > hi else "h")


@st.composite
def _dim_frames(draw: Any) -> pl.DataFrame:
    """Three Enum dimensions of up to 20 categories each (21^3 key values, over the 4,096 of one combined
    group-by: two chunks), values possibly null, an integer dimension, and a metric possibly null."""
    n = draw(st.integers(1, 30))
    cols: dict[str, pl.Series] = {}
    for name in ("e1", "e2", "e3"):
        cats = [f"{name}-{k}" for k in range(draw(st.integers(1, 20)))]
        vals = draw(st.lists(st.one_of(st.none(), st.sampled_from(cats)), min_size=n, max_size=n))
        cols[name] = pl.Series(name, vals, dtype=pl.Enum(cats))
    cols["i"] = pl.Series("i", draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)))
    cols["x"] = pl.Series("x", draw(st.lists(st.one_of(st.none(), st.integers(0, 10)), min_size=n, max_size=n)),
                          dtype=pl.Float64)
    return pl.DataFrame(list(cols.values()))


def _check_against_reference(df: pl.DataFrame, dims: list[str], lo: float, hi: float) -> None:
    """_tally_many of the claim x in [lo, hi] equals a row-by-row reference: counts, and per dimension the
    values over the applicable / agreeing / disagreeing points."""
    from kvdash.sweep.claims import _Job, _tally_many

    value = pl.col("x")
    t = _tally_many(df.lazy(), [_Job(_claim(metric="x", claimed=(lo, hi), tolerance=0), value.is_not_null(), value)],
                    dims)[0]
    rows = df.to_dicts()
    marks = [_status(r["x"], lo, hi) for r in rows]
    assert (t["n"], t["h"], t["nb"] + t["na"]) == (sum(m != "" for m in marks), marks.count("h"), marks.count("f"))
    for d in dims:
        for prefix, wanted in (("a", "hf"), ("h", "h"), ("f", "f")):
            want = {r[d] for r, m in zip(rows, marks, strict=True) if m and m in wanted}
            assert sorted(t[f"{prefix}_{d}"], key=str) == sorted(want, key=str), (prefix, d)


class TestTallyAgainstReference:
    @pytest.mark.parametrize("sizes", [
        # no category (all null), one, then three of 2,000: chunks [e0, e1, e2] (1 x 2 x 2,001 = 4,002 key
        # values), [e3], [e4]; all five in one key would need 4,002 x 2,001^2, past 2^32
        [0, 1, 2000, 2000, 2000],
        # 1 category, then 3,000: [e0], [e1] (2 x 3,001 is past 4,096); each later 2,000 alone, since the
        # last chunk's own size (3,001) decides, not the first's (2)
        [1, 3000, 2000, 2000, 2000],
        # 2,000 categories, then 22 dimensions of one: [e0, e1] (2,001 x 2 = 4,002), then chunks of up to 12
        # one-category dimensions; each counted as one key value (not two) would join them all: 2,001 x 2^22,
        # past 2^32
        [2000] + [1] * 22,
    ])
    def test_many_categories_stay_in_32_bit_keys(self, sizes: list[int]):
        """Enum dimensions with many categories: chunks keep each combined key under 2^32 (a chunk that grew
        past it would wrap and decode wrong values).  Four points at the last categories, x 1 to 4 against
        [2, 3]: the values per dimension equal the reference."""
        cols = {}
        for k, size in enumerate(sizes):
            cats = [f"c{j}" for j in range(size)]
            vals = [cats[-1 - r % size] if size else None for r in range(4)]
            cols[f"e{k}"] = pl.Series(vals, dtype=pl.Enum(cats))
        df = pl.DataFrame({**cols, "x": [1.0, 2.0, 3.0, 4.0]})
        _check_against_reference(df, list(cols), 2, 3)

    def test_enum_dimension_without_categories_first(self):
        """An Enum dimension with no categories (a grid without GPUs: gpu all null) as the first of a chunk:
        its one value is None, and the next dimension's values still come out.  x 70 within [60, 90] at
        tp 1, 99 above at tp 2: holds only where tp = 1."""
        df = pl.DataFrame({"gpu": pl.Series([None, None], dtype=pl.Enum([])),
                           "kv_dtype": pl.Series(["fp8", "bf16"], dtype=pl.Enum(["fp8", "bf16"])),
                           "tp": [1, 2], "x": [70.0, 99.0]})
        from kvdash.sweep.claims import _Job, _tally_many

        value = pl.col("x")
        t = _tally_many(df.lazy(), [_Job(_claim(metric="x"), value.is_not_null(), value)], ["gpu", "kv_dtype", "tp"])[0]
        assert (t["a_gpu"], t["h_gpu"], t["f_gpu"]) == ([None], [None], [None])
        assert (t["h_kv_dtype"], t["f_kv_dtype"], t["h_tp"], t["f_tp"]) == (["fp8"], ["bf16"], [1], [2])

    @settings(max_examples=60, deadline=None)
    @given(_dim_frames(), st.integers(0, 10), st.integers(0, 10))
    def test_values_per_dimension(self, df: pl.DataFrame, lo: int, span: int):
        """Property: for a claim x in [lo, lo + span], the counts and, per dimension, the values over the
        applicable / agreeing / disagreeing points equal a row-by-row reference (Enum dimensions through
        the combined-key group-bys, nulls included)."""
        _check_against_reference(df, ["e1", "e2", "e3", "i"], lo, lo + span)

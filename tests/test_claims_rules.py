"""Each verdict rule of kvdash/sweep/claims.py pinned by a hand-worked value (issue 17).

Small hand-built result frames, no grid expansion: the file runs in about a second, so the mutation driver
(benchmarks/mutation.py) can run it for every mutant of claims.py.  A failure names the rule that broke.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

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
    agree/disagree bits two to a claim, 32 claims to a 64-bit word: with 46 jobs the second word holds jobs 32
    to 45, so a verdict there is right only if the packing puts each job's bits in its own word and place."""

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

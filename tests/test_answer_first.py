"""Issue 23: the answer a user takes away is what the engine will run.  The default reserve of a GPU-derived
budget is ``auto`` and every face states its basis first; the first line answers the question asked (groups,
prefix sharing, --target with the prefix counted); a logged figure can be checked; the texts say what the
figures are.  Every expected value is worked by hand in the test's docstring or comments."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path

import pytest

from kvdash.cli import main
from kvdash.engines.vllm_reserve import SMALLEST_PUBLISHED_RESERVE_GIB, gib_bytes

ROOT = Path(__file__).resolve().parent.parent
QUESTION = ["calc", "--model", "llama-3.1-70b", "--tp", "4", "--gpu", "h100-80gb", "--kv-dtype", "fp8",
            "--length", "8192"]
LOG_LINE = "GPU KV cache size: 1,059,056 tokens, Maximum concurrency for 8,192 tokens per request: 129.28x"


def run(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def doc(args, capsys):
    code, out, err = run([*args, "--json"], capsys)
    assert 0 == code, err
    return json.loads(out)


# --- 1. realistic by default; the basis first --------------------------------------------------------------

class TestReserveBasisFirst:
    def test_declared_budget_stays_exact(self, capsys):
        """The tutorial (12 GiB declared): 47 paged, 19 contiguous, nothing taken off, and the first line says so."""
        r = doc(["calc"], capsys)
        assert (12_884_901_888, 47, 19) == (r["budget"]["per_rank_bytes"], r["capacity"]["paged_requests"],
                                            r["capacity"]["contiguous_requests"])
        assert r["summary"].startswith("47 requests of 825 tokens fit paged, 19 contiguous (the tutorial's 12 GiB "
                                       "KV budget, declared: no runtime reserve taken off)")

    def test_declared_budget_ignores_the_default_reserve(self, capsys):
        """--budget 40GiB: 40 x 2^30 = 42,949,672,960 B per rank, whatever the default reserve."""
        r = doc(["calc", "--budget", "40GiB"], capsys)
        assert 42_949_672_960 == r["budget"]["per_rank_bytes"]
        assert "contiguous (a declared KV budget: no runtime reserve taken off): a KV budget of 42,949,672,960 B" \
            in r["summary"]

    def test_given_reserve_is_named(self, capsys):
        """--reserve 4GiB on Llama-3.1-8B, H100: 78,679,145,185 - 16,060,000,000 - 4,294,967,296 = 58,324,177,889."""
        r = doc(["calc", "-m", "llama-3.1-8b", "--gpu", "h100-80gb", "--reserve", "4GiB"], capsys)
        assert 58_324_177_889 == r["budget"]["per_rank_bytes"]
        assert "(runtime reserve 4.00 GiB per rank, given with --reserve)" in r["summary"]

    def test_brief_first_line_names_the_basis(self, capsys, monkeypatch):
        monkeypatch.setenv("COLUMNS", "80")
        code, out, _ = run([*QUESTION, "--brief"], capsys)
        assert 0 == code
        assert "runtime reserve" in out.splitlines()[0]

    def test_extrapolated_terms_are_said(self, capsys):
        """Llama-3.1-8B on an L4: the published terms were measured on H100-80GB, so they are extrapolated."""
        r = doc(["calc", "-m", "llama-3.1-8b", "--gpu", "l4"], capsys)
        assert "--reserve auto: published terms, extrapolated)" in r["summary"]

    def test_exporter_states_the_reserve(self, capsys):
        """The demo (Llama-3.1-70B, TP 8): auto is 6,539,087,707 B per rank (worked in test_reserve), in the first
        line of the metrics page and in kvdash_info's labels."""
        code, out, _ = run(["exporter", "--demo", "--once"], capsys)
        first, _, info = out.splitlines()[:3]
        assert 0 == code and "reserve auto 6.09 GiB (published, extrapolated)" in first
        assert 'reserve_bytes="6539087707"' in info
        code, out, _ = run(["exporter", "--demo", "--once", "--reserve", "0"], capsys)
        assert "UPPER BOUND: --reserve 0" in out.splitlines()[0]

    def test_live_overview_first_line(self, capsys):
        from kvdash.render.live_view import kv_summary

        kv = doc(["live", "--demo"], capsys)["kv_pool"]
        first = kv_summary(kv).plain.splitlines()[0]
        assert first == "KV pool Llama-3.1-70B bf16 B=16 TP 8, reserve auto 6.09 GiB (published, extrapolated)"


# --- 3. the first line answers the question asked ----------------------------------------------------------

class TestFirstLineAnswers:
    def test_group(self, capsys):
        """The tutorial's exercise in 12 GiB (2,457 blocks of 16 x 327,680 = 5,242,880 B): a group takes
        cdiv(200, 16) + cdiv(825, 16) + cdiv(1,525, 16) = 13 + 52 + 96 = 161 blocks, 2,457 // 161 = 15 groups
        (45 requests); 2,550 useful of 161 x 16 = 2,576 allocated slots (26 in tails); contiguous, a group
        reserves 3 x 2,048 x 327,680 = 2,013,265,920 B: 12,884,901,888 // that = 6 groups; the longest
        request's offload is 1,525 x 327,680 = 499,712,000 B useful, 96 x 5,242,880 = 503,316,480 B allocated."""
        r = doc(["calc", "--group", "200,825,1525"], capsys)
        assert r["summary"].startswith("15 groups of 200 + 825 + 1,525 tokens fit paged (45 requests), 6 contiguous")
        assert ("a group takes 161 blocks, 2,550 useful of 2,576 allocated slots (26 in block tails); offloading its "
                "longest request (1,525 tokens) moves 499,712,000 B of KV (503,316,480 B in whole blocks)") \
            in r["summary"]
        assert "requests of 825 tokens" not in r["summary"]  # --length's default is not what was asked

    def test_prefix(self, capsys):
        """--prefix 512 on the tutorial: 512 // 16 = 32 shared blocks (32 x 5,242,880 = 167,772,160 B), each
        request owns 52 - 32 = 20 blocks (104,857,600 B): (12,884,901,888 - 167,772,160) // 104,857,600 = 121
        with sharing, 47 without."""
        r = doc(["calc", "--prefix", "512"], capsys)
        assert r["summary"].startswith("121 requests of 825 tokens fit paged sharing a 512-token prefix, 47 without "
                                       "sharing, 19 contiguous")
        assert (121, 47) == (r["prefix"]["requests_with_sharing"], r["prefix"]["requests_without_sharing"])

    def test_target_counts_the_prefix(self, capsys):
        """--target 100 with that prefix: 167,772,160 + 100 x 104,857,600 = 10,653,532,160 B, which 12 GiB holds
        (121 >= 100); without the prefix counted it would be 100 x 52 x 5,242,880 = 27,262,976,000 B."""
        r = doc(["calc", "--prefix", "512", "--target", "100"], capsys)
        p = r["planning"]
        assert (10_653_532_160, True, 1) == (p["budget_needed_per_rank_bytes"], p["fits_current_budget"], p["min_tp"])
        assert r["summary"].startswith("For 100 requests of 825 tokens sharing a 512-token prefix: 10,653,532,160 B "
                                       "of KV per rank, which the budget holds; minimum --tp 1. 121 requests")
        plain = doc(["calc", "--target", "100"], capsys)["planning"]
        assert (27_262_976_000, False) == (plain["budget_needed_per_rank_bytes"], plain["fits_current_budget"])

    def test_group_above_max_num_seqs_says_what_runs(self, capsys):
        """Llama-3.1-70B, TP 8, fp8, H100 (80 GB, not an A100: max_num_seqs 1,024): floor(85,520,809,984 x 0.92)
        - 17,650,000,000 - 6,539,087,707 (auto) = 54,490,057,478 B, // (16 x 20,480 = 327,680 B) = 166,290 blocks;
        a group takes 13 + 52 + 96 = 161 blocks: 166,290 // 161 = 1,032 groups = 3,096 requests > 1,024."""
        r = doc(["calc", "-m", "llama-3.1-70b", "--tp", "8", "--gpu", "h100-80gb", "--kv-dtype", "fp8",
                 "--group", "200,825,1525"], capsys)
        assert r["summary"].startswith("1,032 groups of 200 + 825 + 1,525 tokens fit paged (3,096 requests), 433 "
                                       "contiguous, but vLLM runs at most 1,024 at once (its max_num_seqs) (runtime "
                                       "reserve 6.09 GiB per rank")

    def test_upper_bound_group_says_what_auto_gives(self, capsys):
        """--reserve 0 with a group: the label first, with the requests the default (auto) gives."""
        r = doc(["calc", "-m", "llama-3.1-8b", "--gpu", "h100-80gb", "--group", "200,825,1525", "--reserve", "0"],
                capsys)
        auto = doc(["calc", "-m", "llama-3.1-8b", "--gpu", "h100-80gb", "--group", "200,825,1525"], capsys)
        n = auto["group"]["complete_groups"] * 3  # requests in whole groups
        assert r["summary"].startswith(f"UPPER BOUND (--reserve 0, no runtime reserve; the default --reserve auto "
                                       f"gives {n:,}): ")


# --- 4. a logged figure checked ----------------------------------------------------------------------------

class TestLoggedFigure:
    """Llama-3.1-70B, TP 4, H100, fp8, 8,192 tokens: a block is 16 x 40,960 = 655,360 B and a request at
    max_model_len 8,192 takes 512 blocks, so vLLM logs int(blocks / 512 x 8,192) = 16 x blocks tokens.  vLLM can
    give the KV cache at most floor(85,520,809,984 x 0.92) - 35,300,000,000 = 43,379,145,185 B per rank."""

    def test_recipe_figure_implies_an_implausible_reserve(self, capsys):
        """1,059,056 = 16 x 66,191 blocks: a budget of 66,191 x 655,360 = 43,378,933,760 to 66,192 x 655,360 - 1 =
        43,379,589,119 B, so a reserve of at most 43,379,145,185 - 43,378,933,760 = 211,425 B: below the smallest
        published 1.02 GiB.  kvdash predicts 56,213 x 16 = 899,408 tokens (-15.1%)."""
        r = doc([*QUESTION, "--from-log", LOG_LINE], capsys)
        c = r["log_check"]
        assert ([43_378_933_760, 43_379_589_119], [-443_934, 211_425], "implausible") == (
            c["budget_range_bytes"], c["reserve_range_bytes"], c["verdict"])
        assert (899_408, 8192) == (c["predicted_tokens"], c["max_model_len"])
        assert r["summary"].startswith("The logged 1,059,056 tokens (at max_model_len 8,192) imply a runtime reserve "
                                       "of at most 211,425 B per rank")
        assert "kvdash predicts 899,408 tokens (-15.1%)" in r["summary"]
        assert c == doc([*QUESTION, "--logged-tokens", "1059056"], capsys)["log_check"]

    def test_more_than_vllm_can_have(self, capsys):
        """2,000,000 = 16 x 125,000 blocks = 81,920,000,000 B: 38,540,854,815 B more than vLLM can give."""
        c = doc([*QUESTION, "--logged-tokens", "2000000"], capsys)["log_check"]
        assert ("impossible", -38_540_854_815) == (c["verdict"], c["reserve_range_bytes"][1])
        assert "more than vLLM can have" in c["text"] and "43,379,145,185 B per rank" in c["text"]

    def test_plausible(self, capsys):
        """890,000 = 16 x 55,625 blocks = 36,454,400,000 B: a reserve of 43,379,145,185 - 36,455,055,359 =
        6,924,089,826 to 6,924,745,185 B, more than 1.02 GiB: plausible; kvdash's 899,408 is +1.1%."""
        c = doc([*QUESTION, "--logged-tokens", "890000"], capsys)["log_check"]
        assert ("plausible", [6_924_089_826, 6_924_745_185]) == (c["verdict"], c["reserve_range_bytes"])
        assert "(+1.1%)" in c["text"]

    def test_no_budget_gives_the_figure(self, capsys):
        """Every logged figure here is a multiple of 16: 1,059,057 cannot come from this configuration."""
        c = doc([*QUESTION, "--logged-tokens", "1059057"], capsys)["log_check"]
        assert ("impossible", None) == (c["verdict"], c["budget_range_bytes"])
        assert "no KV budget gives exactly that figure" in c["text"]

    def test_declared_budget_implies_a_budget(self, capsys):
        """The tutorial at max_model_len 2,048 (128 blocks of 5,242,880 B): 39,312 = 16 x 2,457 blocks, a budget
        of 12,881,756,160 to 12,886,999,039 B, which holds the declared 12,884,901,888."""
        c = doc(["calc", "--logged-tokens", "39312"], capsys)["log_check"]
        assert ("budget only", [12_881_756_160, 12_886_999_039], 39_312) == (
            c["verdict"], c["budget_range_bytes"], c["predicted_tokens"])

    def test_from_log_takes_the_line_length(self, capsys):
        """The line's 'Maximum concurrency for 4,096 tokens' sets max_model_len 4,096 (256 blocks): 16 x blocks
        again for this model, and the vLLM view follows it."""
        r = doc([*QUESTION, "--from-log", "GPU KV cache size: 899,408 tokens, Maximum concurrency for 4,096 tokens "
                                          "per request: 219.58x"], capsys)
        assert 4096 == r["vllm_view"]["max_model_len"] == r["log_check"]["max_model_len"]

    @pytest.mark.parametrize("args,field", [
        (["--from-log", "no figure here"], "--from-log"),
        (["--from-log", LOG_LINE, "--logged-tokens", "5"], "--logged-tokens"),
        (["--logged-tokens", "0"], "--logged-tokens"),
    ])
    def test_bad_figures_are_one_line(self, args, field, capsys):
        code, _, err = run([*QUESTION, *args], capsys)
        assert 2 == code and err.startswith(f"kvdash: error: {field}") and 1 == err.count("\n")


def test_smallest_published_reserve_is_the_data():
    """1.02 GiB is the smallest activation + non-torch figure of the published runs (CodeLlama-7B: 0.77 + 0.25)."""
    import csv

    with (ROOT / "benchmarks/data/llmd_vllm0190_h100_runs.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    smallest = min(Decimal(r["activation_memory_gib"]) + Decimal(r["non_torch_forward_gib"]) for r in rows)
    assert Decimal(SMALLEST_PUBLISHED_RESERVE_GIB) == smallest
    assert 1_095_216_660 == gib_bytes(SMALLEST_PUBLISHED_RESERVE_GIB)  # 1.02 x 2^30 = 1,095,216,660.48


# --- 5. texts ----------------------------------------------------------------------------------------------

class TestTexts:
    def test_gpt_oss_blocks_per_kind(self, capsys):
        """gpt-oss-120b (18 full + 18 sliding layers of window 128, one group each): 825 tokens take
        cdiv(825, 16) = 52 full blocks and min(52, cdiv(127, 16) + 1 = 9) = 9 sliding: 61, not '61 in each'."""
        r = doc(["calc", "-m", "gpt-oss-120b", "--budget", "12GiB"], capsys)
        assert {"full": 52, "sliding": 9} == r["request"]["paged_blocks_per_group"]
        assert "a request takes 61 blocks (52 in its full group + 9 in its sliding group)" in r["summary"]
        assert "in each of its 2 KV-cache groups" not in r["summary"]

    def test_no_kv_memory_names_the_gpu_and_a_fix_that_works(self, capsys):
        """Llama-3.1-70B (141.2e9 B) on one L4 (24,152,899,584 B): no --gpu-util can help, and the default 0.92
        was not typed.  --tp 16: 8,825,000,000 B of weights per rank and auto's 6,539,087,707 at TP > 1 leave
        floor(24,152,899,584 x 0.92) = 22,220,667,617 - 15,364,087,707 = 6,856,579,910 B; --tp 8 leaves none
        (17,650,000,000 + 6,539,087,707 > 22,220,667,617)."""
        code, _, err = run(["calc", "-m", "llama-3.1-70b", "--gpu", "l4"], capsys)
        assert 2 == code and err.startswith("kvdash: error: --gpu: 'l4' is not allowed; the weights alone")
        assert "vLLM 0.33's default gpu_memory_utilization" in err and "fix: --tp 16 " in err
        assert "--gpu-util" not in err.split("fix:")[1] and 1 == err.count("\n")

    def test_no_kv_memory_names_the_option_typed(self, capsys):
        """Llama-3.1-8B on an L4 at --gpu-util 0.5: floor(24,152,899,584 x 0.5) = 12,076,449,792 <
        16,060,000,000 B of weights; the lowest utilization that leaves memory after the weights and auto's
        3,221,225,471 B: 19,281,225,472 / 24,152,899,584 = 0.7983 -> 0.80."""
        code, _, err = run(["calc", "-m", "llama-3.1-8b", "--gpu", "l4", "--gpu-util", "0.5"], capsys)
        assert 2 == code and err.startswith("kvdash: error: --gpu-util: '0.5' is not allowed; no memory is left")
        assert "--gpu-util 0.80 or more" in err

    def test_preset_weights_are_exact(self):
        """Each preset's weight_bytes is its stated parameter count x bytes, exactly (8.03B x 2 = 16,060,000,000,
        not 16,059,999,999)."""
        for path in sorted((ROOT / "kvdash/data/models").glob("*.json")):
            meta = json.loads(path.read_text())["_kvdash"]
            found = re.search(r"([0-9.]+)B published parameters x ([0-9]) byte", meta.get("weight_basis", ""))
            if found:
                expect = Decimal(found.group(1)) * 10**9 * int(found.group(2))
                assert expect == meta["weight_bytes"], path.name

    def test_shipped_grids_do_not_call_0_9_vllms_default(self):
        """vLLM 0.33's gpu_memory_utilization default is 0.92 (vllm/config/cache.py); a grid at 0.9 says it sets it."""
        for path in sorted((ROOT / "sweeps").glob("*.yaml")):
            text = " ".join(path.read_text().split())
            assert "vLLM's gpu_memory_utilization 0.9" not in text, path.name

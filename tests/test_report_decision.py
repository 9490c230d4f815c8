"""Reports that answer the grid's question: decision, gates, labels, claim verdicts, concision, outputs."""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from kvdash.cli import main
from kvdash.report import analysis
from kvdash.report.build import results_formats, write_report
from kvdash.sweep.claims import Claim, judge, judge_all
from kvdash.sweep.evaluate import expand
from kvdash.sweep.gridfile import parse_grid

REPO = Path(__file__).resolve().parents[1]


@functools.cache
def _vendor():
    """The vendor grid, parsed and evaluated once for every test that reads it (its simulate: time: block runs
    the points in seconds)."""
    spec = parse_grid(REPO / "sweeps" / "vendor-claims.yaml")
    return spec, expand(spec)
CHAT = REPO / "sweeps" / "chat-256.yaml"


@pytest.fixture(scope="module")
def chat(tmp_path_factory):
    out = tmp_path_factory.mktemp("chat") / "r"
    spec = parse_grid(CHAT)
    expanded = expand(spec)
    write_report(spec, expanded, out)
    return spec, expanded.frame, (out / "report.md").read_text(), out


def section(md: str, title: str) -> str:
    start = md.index(f"## {title}\n")
    end = md.find("\n## ", start + 1)
    return md[start:end if end > 0 else None]


class TestDecision:
    def test_best_per_workload_margin_and_runner_up(self, chat):
        """Llama-3.1-70B on 4 x H200, fp8, block 16 (by hand):
        budget/rank = floor(150,754,820,096 x 0.9) - 141.2e9 / 4 - 2 GiB = 98,231,854,438 B;
        fp8 KV at TP 4: 2 x 80 layers x 2 KV heads x 128 x 1 B = 40,960 B/token, 655,360 B a 16-token block;
        floor(98,231,854,438 / 655,360) = 149,889 blocks; 8,192 tokens = 512 blocks a chat -> 292 chats,
        292 / 4 GPUs = 73.0 per GPU, 36 above the 256-chat gate.  Qwen2.5-72B there: 289 / 4 = 72.25 per GPU,
        (72.25 - 73) / 73 = -1.0 %.  Only fp8 passes (bf16 halves every count: at most 170 < 256)."""
        _, _, md, _ = chat
        d = section(md, "Decision")
        assert "> Which configuration serves 256 concurrent 8k-token chats" in d
        assert "8 of 16 configurations pass every gate (those with kv_dtype = fp8)." in d
        assert ("**chat-8k**: best is llama-3.1-70b, 4 x h200, fp8, block 16 with 73.0 running_requests_per_gpu "
                "(292 requests on 4 GPUs), 36 inside the gate '256 concurrent chats' "
                "(running_requests ≥ 256); "
                "tied: block 32; runner-up qwen2.5-72b with 72.2 (-1.0%).") in d

    def test_point_no_swept_dimension_names_is_named_by_its_model(self, tmp_path):
        """A grid sweeping nothing but workloads leaves a point's label empty once the workload is said: the
        decision names it by its model, never by its hash id.  Llama-3.1-8B, bf16, the default 12 GiB budget
        (by hand): 2 x 32 layers x 8 KV heads x 128 x 2 B = 131,072 B/token, 2,097,152 B a 16-token block,
        12 GiB / 2 MiB = 6,144 blocks; 825 tokens = 52 blocks -> floor(6,144 / 52) = 118 requests;
        2,000 tokens = 125 blocks -> floor(6,144 / 125) = 49."""
        path = tmp_path / "g.yaml"
        path.write_text("models: [llama-3.1-8b]\n"
                        "workloads:\n  short: {length: 825}\n  long: {length: 2000}\n")
        spec = parse_grid(path)
        expanded = expand(spec)
        write_report(spec, expanded, tmp_path / "r")
        d = section((tmp_path / "r" / "report.md").read_text(), "Decision")
        assert "**short**: best is llama-3.1-8b with 118.0 running_requests_per_gpu; no runner-up passes." in d
        assert "**long**: best is llama-3.1-8b with 49.0 running_requests_per_gpu; no runner-up passes." in d
        for point_id in expanded.frame.get_column("id"):
            assert point_id not in d

    def test_one_point_is_said_in_the_singular(self, tmp_path, capsys):
        """A grid of one point (Llama-3.1-8B, 825 tokens: 118 requests in the default 12 GiB, worked out above)
        says "1 point", "its 1 configuration", "1 of 1 configuration passes" and "the 1 gate", never "1 points",
        "all 1 configurations" or "all 1 passed"."""
        from tests.cli_run import run

        path = tmp_path / "g.yaml"
        path.write_text("models: [llama-3.1-8b]\n")
        code, out, _ = run(["sweep", str(path), "--out", str(tmp_path / "r")], capsys)
        assert 0 == code or code is None
        out = " ".join(out.split())  # the summary wraps at the terminal's width
        assert out.startswith("1 point (no reserve: declared KV budgets) -> ")
        assert "No gates in this grid: its 1 configuration is the candidate." in out
        assert "best is llama-3.1-8b with 118.0 running_requests_per_gpu" in out
        path.write_text("models: [llama-3.1-8b]\ngates:\n  - {name: any, metric: paged_requests, min: 118}\n")
        code, out, _ = run(["sweep", str(path), "--out", str(tmp_path / "r"), "--check"], capsys)
        assert 0 == code
        out = " ".join(out.split())
        assert "1 of 1 configuration passes every gate." in out and "gates: the 1 gate passed" in out
        assert "1 points" not in out and "all 1 " not in out

    def test_decision_comes_first_and_assumptions_after(self, chat):
        _, _, md, _ = chat
        order = [md.index(f"## {t}\n") for t in ("Decision", "Gates", "Headline", "Claims, scoped to this grid",
                                                 "Assumptions")]
        assert order == sorted(order)

    def test_gate_table(self, chat):
        """8 x H100 fp8 Llama holds 340 chats (floor(57,171,245,337 / 327,680) = 174,472 blocks / 512), the most;
        Qwen2.5-72B on 4 x H200 in bf16 holds 144, the fewest: 144 - 256 = -112 is the gate's margin."""
        _, _, md, _ = chat
        g = section(md, "Gates")
        assert ("| 256 concurrent chats | running_requests ≥ 256 | every point | 8 / 8 | "
                "llama-3.1-70b, 8 x h100-80gb, fp8, block 16: 340 | qwen2.5-72b, 4 x h200, bf16, block 32: 144 | "
                "-112 |") in g

    def test_requests_per_gpu_and_per_node(self, chat):
        """292 chats on 4 GPUs: 73.0 per GPU, two 4-GPU replicas on an 8-GPU node = 584; 8 x H100: one replica."""
        _, df, md, _ = chat
        row = df.filter((pl.col("gpu") == "h200") & (pl.col("kv_dtype") == "fp8") & (pl.col("block_size") == 16)
                        & (pl.col("model") == "llama-3.1-70b")).row(0, named=True)
        assert (row["gpus"], row["paged_requests_per_gpu"], row["paged_requests_per_node"]) == (4, 73.0, 584)
        row = df.filter((pl.col("gpu") == "h100-80gb") & (pl.col("kv_dtype") == "fp8")).row(0, named=True)
        assert (row["gpus"], row["paged_requests_per_gpu"], row["paged_requests_per_node"]) == (8, 42.5, 340)
        assert "| paged/GPU | paged/8-GPU node |" in md

    def test_check_prints_the_same_gate(self, capsys, tmp_path):
        with pytest.raises(SystemExit) as exc:
            main(["sweep", str(CHAT), "--out", str(tmp_path / "r"), "--check"])
        err = capsys.readouterr().err
        assert 1 == exc.value.code and 8 == len(err.strip().splitlines())
        assert "(qwen2.5-72b, 4 x h200, bf16, block 32): running_requests = 144, needs ≥ 256" in err

    def test_mechanism_sentence(self, tmp_path):
        """chat 4,096 reserved / 1,024 held = 4.0000: the ratio paging buys is the reservation over the tokens.
        Whole requests round it: bf16 12 GiB / 327,680 B = 39,321 slots -> 9 reservations, 2,457 blocks / 64 = 38
        paged (38 / 9 = 4.2222x); fp8 78,643 slots -> 19, 4,915 blocks / 64 = 76 (76 / 19 = 4.0000x); median of
        the two (4.2222 + 4.0) / 2 = 4.1111x. Ratios print with 4 decimals everywhere (units.RATIO_DECIMALS)."""
        text = ("models: [tutorial-gqa-80l]\nworkloads:\n  chat: {length: 1024, max_reserved: 4096}\n"
                "grid:\n  kv_dtype: [bf16, fp8]\n")
        path = tmp_path / "g.yaml"
        path.write_text(text)
        spec = parse_grid(path)
        ctx = analysis.build_context(spec, expand(spec))
        assert "chat 4,096 / 1,024 = 4.0000 (computed 4.0000x to 4.2222x, median 4.1111x)" in ctx["mechanism"]

    def test_objective_is_validated(self, tmp_path, capsys):
        path = tmp_path / "g.yaml"
        path.write_text("objective: {maximize: paged_requets}\n")
        with pytest.raises(SystemExit) as exc:
            main(["sweep", str(path), "--dry-run"])
        err = capsys.readouterr().err
        assert 2 == exc.value.code and "objective.maximize" in err and "did you mean 'paged_requests'" in err

    def test_minimize_objective(self, tmp_path):
        """minimize: the smallest value is best (bytes_per_token: fp8 halves bf16's 327,680)."""
        path = tmp_path / "g.yaml"
        path.write_text("models: [tutorial-gqa-80l]\nobjective: {minimize: bytes_per_token}\n"
                        "grid:\n  kv_dtype: [bf16, fp8]\n")
        spec = parse_grid(path)
        ctx = analysis.build_context(spec, expand(spec))
        assert "best is fp8 with 163,840 bytes_per_token" in ctx["decision"]["lines"][0]
        assert "runner-up bf16 with 327,680 (+100.0%)" in ctx["decision"]["lines"][0]


class TestLabels:
    def test_chart_labels_name_the_gpu_and_say_what_is_left_out(self, chat):
        _, _, md, out = chat
        svg = (out / "capacity.svg").read_text()
        assert "llama-3.1-70b, 4 x h200, fp8, block 16" in svg and "qwen2.5-72b, 8 x h100-80gb, bf16, block 32" in svg
        mermaid = md[md.index("```mermaid"):md.index("```", md.index("```mermaid") + 3)]
        assert '"llama-3.1-70b 4xh200 fp8 16"' in mermaid
        assert not re.search(r'"[0-9a-f]{6}"', mermaid)  # no id prefixes
        assert "x axis: model, GPUs, KV dtype, block; the 4 best and the 4 worst that fit by " \
               "running_requests_per_gpu; 8 of 16 points left out." in md

    def test_labels_have_no_duplicates_in_planning(self):
        """Every point of the planning grid has its own label (the GPU is part of it)."""
        spec = parse_grid(REPO / "sweeps" / "planning.yaml")
        df = expand(spec).frame
        labels = analysis.Labels(spec, df)
        names = [labels(r) for r in df.select(labels.data_columns).iter_rows(named=True)]
        assert len(set(names)) == len(names) == df.height
        assert labels.names == "model, GPUs, KV dtype, block, workload"


def _frame(values: list[float], **cols) -> pl.DataFrame:
    n = len(values)
    base = {"id": [f"{i:016x}" for i in range(n)], "model": ["m"] * n, "workload": ["w"] * n, "lengths": ["100"] * n,
            "tp": [1] * n, "pp": [1] * n, "prefix": [0] * n, "reservation_waste_percent": values}
    base.update(cols)
    return pl.DataFrame(base)


class TestVerdicts:
    CLAIM = Claim(id="c", claim="", source="", conditions="", kind="waste", metric="reservation_waste_percent",
                  claimed=(60, 90), tolerance=2)

    def test_direction_and_tolerance(self):
        """60-90 with tolerance 2: 59.72 is within (>= 58), 98.4 above (> 92), 50 below (< 58)."""
        v = judge(_frame([59.72, 98.4, 50.0], block_size=[16, 32, 64]), self.CLAIM, ["block_size"])
        assert (v.verdict, v.below, v.holding, v.above) == ("holds only where", 1, 1, 1)
        assert v.direction == "below at 1, within at 1, above at 1"
        assert v.where == "block_size = 16"

    def test_all_above_says_so(self):
        v = judge(_frame([98.4, 95.0]), self.CLAIM, [])
        assert (v.verdict, v.direction) == ("contradicted", "above everywhere")

    def test_where_is_and_joined_in_swept_dimensions_only(self):
        """Agreeing points share kv_dtype = fp8 and block_size 16 or 32; budget_bytes is not swept: not named."""
        df = _frame([70.0, 70.0, 99.0, 99.0, 99.0], kv_dtype=["fp8", "fp8", "bf16", "bf16", "fp8"],
                    block_size=[16, 32, 16, 32, 64], budget_bytes=[1, 2, 3, 4, 5])
        v = judge(df, self.CLAIM, ["kv_dtype", "block_size"])
        assert v.where == "kv_dtype = fp8 AND block_size in {16, 32}"

    def test_applies_by_parameter_class(self):
        """The vendor grid's own 70B-as-MHA (weights 141.2 GB at 2 bytes: 70.6B) qualifies for the 70B claim and
        holds it: 2 x 80 x 64 x 128 x 2 B x 131,072 tokens / 8 ranks = 42.9 GB > 141.2 GB / 8 = 17.65 GB."""
        spec, vendor = _vendor()
        df = vendor.frame
        v = next(v for v in judge_all(df, dims=["model", "kv_dtype", "workload"],
                                      models={n: e.arch for n, e in spec.models.items()})
                 if v.claim.id == "128k-70b-exceeds-weights")
        assert v.verdict == "holds only where" and v.where == "model = 70b-as-mha-64"
        assert v.computed == "0.1477 to 2.433"

    def test_tail_claim_not_applicable_on_single_lengths(self):
        """A single 2,048-token request fills 128 blocks exactly: tail 0, which says nothing about an average."""
        spec, vendor = _vendor()
        v = next(v for v in judge_all(vendor.frame) if v.claim.id == "tail-8-tokens-4-percent")
        assert v.verdict == "not applicable" and "remainder mod the block size" in v.note

    def test_tail_claim_judged_over_a_group(self, tmp_path):
        """lengths 200, 825, 1,525 at block 16: tails 8 + 7 + 11 = 26 of 2,576 allocated slots = 1.01 %."""
        path = tmp_path / "g.yaml"
        path.write_text("models: [tutorial-gqa-80l]\nworkloads:\n  g: {group: [200, 825, 1525]}\n")
        spec = parse_grid(path)
        v = next(v for v in judge_all(expand(spec).frame) if v.claim.id == "tail-8-tokens-4-percent")
        assert (v.verdict, v.computed, v.direction) == ("contradicted", "1.009", "below")

    def test_prefix_claim_is_measured_where_retention_decides(self):
        """Issue 29: the claim is no longer judged on the prefix's share of each request (an input); it needs a
        prefix_cache: replay, and there it is judged on the share of prompt tokens retained blocks serve."""
        spec, vendor = _vendor()
        v = next(v for v in judge_all(vendor.frame) if v.claim.id == "prefix-sharing-40-60")
        assert v.verdict == "not applicable"
        spec = parse_grid(REPO / "sweeps" / "prefix-cache.yaml")
        v = next(v for v in judge_all(expand(spec).frame) if v.claim.id == "prefix-sharing-40-60")
        # a 1 TiB host tier holds 3.4M (70B bf16) to 16.8M (8B fp8) tokens: 15.79-34.43 % of the conversation
        # trace's prompt tokens hit, below 40 - 2 everywhere (the trace's ceiling is 37.35 %)
        assert v.verdict == "contradicted" and v.computed == "15.79 to 34.43"

    def test_joint_claim_on_one_configuration(self, tmp_path):
        """Llama-3.1-70B on 8 x H100 (bf16, 0 reserve): 59,318,728,826 B/rank over 40,960 B/token (TP 8) =
        1,448,211 slots.  A 72,000-token reservation fits 20 contiguous requests; 20,000-token requests
        take 1,250 blocks of 90,513 -> 72 paged: both vendor figures hold on that one configuration."""
        path = tmp_path / "g.yaml"
        path.write_text("models: [llama-3.1-70b]\nworkloads:\n  long: {length: 20000, max_reserved: 72000}\n"
                        "  short: {length: 2000, max_reserved: 72000}\n"
                        "defaults: {gpu: h100-80gb, tp: 8, gpu_util: '0.9', reserve: 0}\n")
        spec = parse_grid(path)
        df = expand(spec).frame
        verdicts = {v.claim.id: v for v in judge_all(df, dims=["workload"],
                                                     models={n: e.arch for n, e in spec.models.items()})}
        joint = verdicts["vendor-70b-8xh100"]
        assert (joint.verdict, joint.holding, joint.points) == ("holds only where", 1, 2)
        assert joint.where == "workload = long"
        row = df.filter(pl.col("workload") == "long").row(0, named=True)
        assert (row["contiguous_requests"], row["paged_requests"]) == (20, 72)

    def test_reserve_beside_capacity_claims(self, tmp_path):
        spec, vendor = _vendor()
        ctx = analysis.build_context(spec, vendor)
        row = next(r for r in ctx["claims"]["rows"] if r["id"] == "70b-8xh100-paged-60-80")
        assert "reserve auto/rank" in row["why"]  # issue 23: the default reserve of GPU-derived budgets
        assert "runtime reserve auto per rank (kvdash's default" in ctx["claims"]["reserve"]


class TestConcise:
    def test_collapsed_sections(self, chat):
        _, _, md, _ = chat
        assert re.search(r"^Not applicable \(no point matches its `applies_to`, or the reason given\): `", md, re.M)
        assert not re.search(r"^\| `paper-table1-opt13b`", md, re.M)
        assert md.count("Tutorial exit criteria: not evaluable here") == 1 and "## Tutorial exit criteria" not in md
        assert "Not computable from capacity arithmetic" in md

    def test_sensitivity_medians_per_workload(self):
        spec, vendor = _vendor()
        ctx = analysis.build_context(spec, vendor)
        sens = ctx["sensitivity"]
        assert sens["workloads"] == ["chat-2k", "chat-2k-prefix-1k", "long-32k", "context-128k"]
        model = next(t for t in sens["tables"] if t["dimension"] == "model")
        # llama-3.1-70b at TP 8 on H100, util 0.9, the default reserve auto (6,539,087,707 B): 76,968,728,985 -
        # 17,650,000,000 - 6,539,087,707 = 52,779,641,278 B per rank; bf16 // 655,360 = 80,535 blocks -> 629 paged
        # chats of 2k (128 blocks), fp8 // 327,680 = 161,070 -> 1,258: median 943.5, shown rounded to 944;
        # contiguous (131,072 reserved) 9 and 19, so the ratios 69.8889 and 66.2105 have the median 68.0497 (4
        # decimals, RATIO_DECIMALS)
        assert model["rows"][0][:2] == ["llama-3.1-70b", "944 (68.0497x)"]


class TestOutputs:
    def test_parquet_past_a_size(self):
        assert results_formats(100_000) == ("csv",) and results_formats(100_001) == ("parquet",)
        assert results_formats(100_001, csv=True) == ("csv",)
        assert results_formats(5, csv=True, parquet=True) == ("csv", "parquet")

    def test_report_states_parquet(self, tmp_path, monkeypatch):
        monkeypatch.setattr(analysis, "PARQUET_ABOVE", 3)
        path = tmp_path / "g.yaml"
        path.write_text("models: [tutorial-gqa-80l]\ngrid:\n  kv_dtype: [bf16, fp8]\n  block_size: [16, 32]\n")
        spec = parse_grid(path)
        files = {f.name for f in write_report(spec, expand(spec), tmp_path / "r")}
        assert "results.parquet" in files and "results.csv" not in files
        md = (tmp_path / "r" / "report.md").read_text()
        assert "Full data: [results.parquet](results.parquet) (Parquet: the grid has more than 3 points" in md
        assert pl.read_parquet(tmp_path / "r" / "results.parquet").height == 4

    def test_sweep_loads_no_plotting_library_and_no_rich_when_piped(self, tmp_path):
        code = ("import sys; from kvdash.cli import main\n"
                f"try: main(['sweep', {str(CHAT)!r}, '--out', {str(tmp_path / 'r')!r}, '-q'])\n"
                "except SystemExit: pass\n"
                "print('LOADED=' + ','.join(m for m in ('matplotlib', 'rich') if m in sys.modules))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        assert "LOADED=\n" in out

    def test_grid_reader_imports_no_command_and_no_evaluator(self):
        """Layers read top-down: the grid reader needs neither kvdash.commands nor the evaluator."""
        code = ("import sys; from pathlib import Path; from kvdash.sweep.gridfile import parse_grid\n"
                f"parse_grid(Path({str(REPO / 'sweeps' / 'exercise.yaml')!r}))\n"
                "print(sorted(m for m in sys.modules if m.startswith(('kvdash.commands', 'kvdash.sweep.evaluate'))))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        assert out.strip() == "[]"

    def test_markup_in_names_is_escaped_everywhere(self, tmp_path):
        """A model named with markup: escaped in the HTML and the SVGs, stripped from mermaid labels."""
        path = tmp_path / "g.yaml"
        path.write_text('models:\n  - {name: "<img src=x onerror=alert(1)>", layers: 4, kv_heads: 2, head_dim: 64}\n'
                        "  - tutorial-gqa-80l\n")
        spec = parse_grid(path)
        write_report(spec, expand(spec), tmp_path / "r")
        for name in ("report.html", "capacity.svg", "ratio.svg"):
            assert "<img" not in (tmp_path / "r" / name).read_text(), name
        md = (tmp_path / "r" / "report.md").read_text()
        mermaid = md[md.index("```mermaid"):md.index("```", md.index("```mermaid") + 3)]
        assert "<img" not in mermaid and '"img src=x onerror=alert(1)"' in mermaid

    def test_svg_escapes_labels(self):
        from kvdash.report.svg import bar_chart

        svg = bar_chart(["<b>x</b> & y"], [("paged", "#000", [3])], "requests")
        assert "<b>" not in svg and "&lt;b&gt;x&lt;/b&gt; &amp; y" in svg


def test_ties_are_told_apart():
    """A helper's trial: ties were joined by commas, and a tie's label holds commas of its own: planning's chat read
    "block 64, qwen3-8b, qwen3-8b, block 64 and 4 more tie" (three points: block 64; qwen3-8b; qwen3-8b at block 64).
    Each tie now stands apart (the committed report, regenerated by tests/test_reports_current.py)."""
    from pathlib import Path

    md = (Path(__file__).resolve().parent.parent / "reports" / "planning" / "report.md").read_text(encoding="utf-8")
    assert "; tied: block 64 / qwen3-8b / qwen3-8b, block 64 / 4 more." in md and " tie." not in md


def test_dry_run_fits_80_columns(monkeypatch, capsys):
    """A helper's trial: `sweep --dry-run` printed each point on one line of about 135 characters (the header 98).
    At 80 columns every line fits: a point's fields wrap, the rest of it indented under its id."""
    from tests.cli_run import run

    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(["sweep", "sweeps/planning.yaml", "--dry-run"], capsys)
    lines = out.splitlines()
    assert 0 == code and max(map(len, lines)) <= 80 and not any(x.endswith(" ") for x in lines)
    assert 10 == sum(x.startswith("  id=") for x in lines) and any(x.startswith("    ") for x in lines)

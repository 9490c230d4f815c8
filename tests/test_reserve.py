"""``--reserve auto`` and ``kvdash calibrate``: the runtime reserve as named terms, and as measured.

Published figures (llm-d-planner ``data/configuration/vllm_memory_constants.json`` at commit 964c9dc,
github.com/llm-d-incubation/llm-d-planner; fitted to vLLM 0.19.0 on H100-80GB): activation
LlamaForCausalLM 1.89 GiB, Qwen2ForCausalLM 2.25, Gemma3ForCausalLM 3.94, MixtralForCausalLM 1.21;
family base dense 2.00, MoE 2.50; non-torch TP 1 0.27 GiB, TP > 1 2.10 GiB.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvdash.cli import main
from kvdash.engines.vllm_reserve import ACTIVATION_GIB, FAMILY_GIB, NON_TORCH_GIB, auto_reserve, gib_bytes
from tests.cli_run import run
from tests.engine_server import FaultServer

GIB = 2**30




@pytest.fixture
def calib(tmp_path, monkeypatch):
    path = tmp_path / "calibration.jsonl"
    monkeypatch.setenv("KVDASH_CALIBRATION", str(path))
    return path


def test_gib_figures_convert_once_half_up():
    """figure x 2^30 rounded half-up to a byte: 1.89 -> 2,029,372,047.36 -> 2,029,372,047;
    3.94 -> 4,230,542,786.56 -> 4,230,542,787; 2.25 -> 2,415,919,104 exactly."""
    assert 2_029_372_047 == gib_bytes("1.89")
    assert 4_230_542_787 == gib_bytes("3.94")
    assert 2_415_919_104 == gib_bytes("2.25")
    assert 289_910_292 == gib_bytes("0.27")  # 289,910,292.48
    assert 2_254_857_830 == gib_bytes("2.10")  # 2,254,857,830.4


def test_published_terms_reproduce_the_peers_figures():
    """The issue's figures, per architecture and by family, land as the terms (activation + non-torch)."""
    assert ("1.89", "2.25", "3.94", "1.21") == tuple(ACTIVATION_GIB[k] for k in (
        "LlamaForCausalLM", "Qwen2ForCausalLM", "Gemma3ForCausalLM", "MixtralForCausalLM"))
    assert ("2.00", "2.50") == (FAMILY_GIB["dense"], FAMILY_GIB["moe"])
    assert ("0.27", "2.10") == (NON_TORCH_GIB["tp1_pp1"], NON_TORCH_GIB["tpN_pp1"])
    # Llama-3.1-8B TP 1 on H100: 1.89 + 0.27 GiB + 26.88 MiB x 32 layers
    # = 2,029,372,047 + 289,910,292 + 901,943,132 (901,943,132.16) = 3,221,225,471 B, nothing extrapolated
    r = auto_reserve("llama", 1, 1, 8192, "h100-80gb", layers=32)
    assert 3_221_225_471 == r["bytes"]
    assert [2_029_372_047, 289_910_292, 901_943_132] == [t["bytes"] for t in r["terms"]]
    assert [False, False, False] == [t["extrapolated"] for t in r["terms"]]
    # Mixtral TP 2: 1.21 + 2.10 GiB + 26.24 MiB x 32 = 1,299,227,607 + 2,254,857,830 + 880,468,296 (.68)
    assert 4_434_553_733 == auto_reserve("mixtral", 2, 1, gpu="h100-80gb", layers=32)["bytes"]
    # Gemma 3 27B TP 1: 3.94 + 0.27 GiB + 21.08 MiB x 62 = 4,230,542,787 + 289,910,292 + 1,370,446,889 (.96)
    assert 5_890_899_968 == auto_reserve("gemma3_text", 1, 1, gpu="h100-80gb", layers=62)["bytes"]


def test_cuda_graph_figures_are_the_medians_of_the_published_runs():
    """Rule: an architecture's CUDA-graph MiB per layer is the median, over its distinct runs (model, TP, PP,
    dtype, quantization, KV dtype, util) in benchmarks/data/llmd_vllm0190_h100_runs.csv (llm-d-planner
    accuracy/results/v0.19.0/results_raw.csv @d3121e0, vLLM 0.19.0, H100-80GB), of the logged
    "Estimated CUDA graph memory" GiB x 1024 / ceil(layers / PP), rounded half-up to 0.01 MiB.
    E.g. Llama-3.1-8B TP 1: 0.84 x 1024 / 32 = 26.88; the Llama median over 15 runs is that figure."""
    import csv
    import statistics
    from decimal import ROUND_HALF_UP, Decimal
    from fractions import Fraction

    from kvdash.engines.vllm_reserve import CUDA_GRAPH_MIB_PER_LAYER, CUDA_GRAPH_MIB_PER_LAYER_ALL

    text = (Path(__file__).parent.parent / "benchmarks" / "data" / "llmd_vllm0190_h100_runs.csv").read_text()
    rows = list(csv.DictReader(text.splitlines()))
    distinct: dict[tuple[str, ...], dict[str, str]] = {}
    for r in rows:
        distinct.setdefault(tuple(r[k] for k in ("model", "tp", "pp", "dtype", "quantization", "kv_cache_dtype",
                                                 "gpu_memory_utilization")), r)

    def per_layer(r):
        return Fraction(r["cuda_graph_estimated_gib"]) * 1024 / -(-int(r["layers"]) // int(r["pp"]))

    def figure(values):
        m = statistics.median(values)
        return str((Decimal(m.numerator) / Decimal(m.denominator)).quantize(Decimal("0.01"), ROUND_HALF_UP))

    by: dict[str, list[Fraction]] = {}
    for r in distinct.values():
        by.setdefault(r["architecture"], []).append(per_layer(r))
    assert {a: (figure(v), len(v)) for a, v in by.items()} == CUDA_GRAPH_MIB_PER_LAYER
    assert (figure([x for v in by.values() for x in v]), len(distinct)) == CUDA_GRAPH_MIB_PER_LAYER_ALL
    assert ("26.88", 15) == CUDA_GRAPH_MIB_PER_LAYER["LlamaForCausalLM"]


def test_cuda_graph_term_scales_with_layers_per_stage():
    """26.88 MiB x ceil(32 / 4) = 8 layers at PP 4: 225,485,783.04 -> 225,485,783 B; an architecture without
    runs (OPT) takes the all-run median 25.23 MiB x 40 = 1,058,222,899.2 -> 1,058,222,899 B, extrapolated."""
    llama = auto_reserve("llama", 1, 4, gpu="h100-80gb", layers=32)["terms"][2]
    assert 225_485_783 == llama["bytes"] and not llama["extrapolated"] and "x 8 layers per stage" in llama["basis"]
    opt = auto_reserve("opt", 1, 1, gpu="h100-80gb", layers=40)["terms"][2]
    assert 1_058_222_899 == opt["bytes"] and opt["extrapolated"] and "median of all 49" in opt["basis"]
    assert "vllm/v1/worker/gpu_worker.py" in opt["basis"] and "since v0.21" in opt["basis"]


def test_family_base_is_labelled_extrapolated():
    """An architecture without its own figure takes the family base (MoE 2.50 GiB = 2,684,354,560 B), labelled."""
    r = auto_reserve("gpt_oss", 1, 1, gpu="h100-80gb", layers=24)
    act = r["terms"][0]
    assert 2_684_354_560 == act["bytes"] and act["extrapolated"] and "moe family base" in act["basis"]
    dense = auto_reserve("mistral", 1, 1, gpu="h100-80gb", layers=32)["terms"][0]
    assert 2 * GIB == dense["bytes"] and dense["extrapolated"]
    # another GPU or another max_num_batched_tokens: the architecture's own figure, but extrapolated
    assert auto_reserve("llama", 1, 1, gpu="a100-80gb", layers=32)["terms"][0]["extrapolated"]
    other_tokens = auto_reserve("llama", 1, 1, 16384, "h100-80gb", layers=32)
    assert "applied unscaled to 16384" in other_tokens["terms"][0]["basis"]


@given(st.sampled_from(sorted(["llama", "qwen2", "mixtral", "gpt_oss", "opt", "", "deepseek_v3"])),
       st.integers(1, 16), st.integers(1, 8), st.integers(1, 200))
def test_auto_is_the_sum_of_its_terms(model_type, tp, pp, layers):
    """Invariant: the reserve is exactly the sum of its named terms, each a non-negative integer with a basis."""
    r = auto_reserve(model_type, tp, pp, layers=layers)
    assert r["bytes"] == sum(t["bytes"] for t in r["terms"])
    assert all(isinstance(t["bytes"], int) and t["bytes"] >= 0 and t["basis"] for t in r["terms"])


def test_calc_auto_without_calibration(calib, capsys):
    """calc --reserve auto with no calibration entry: Llama-3.1-8B TP 1 takes 3,221,225,471 B, shown with basis."""
    code, out, _ = run(["calc", "-m", "llama-3.1-8b", "--gpu", "h100-80gb", "--reserve", "auto", "--json"], capsys)
    b = json.loads(out)["budget"]
    assert 0 == code
    assert 3_221_225_471 == b["reserve_bytes"]
    assert "published terms" in b["reserve_basis"] and "vLLM 0.19.0" in b["reserve_basis"]
    assert ["activation peak", "non-torch overhead", "CUDA-graph memory"] == [t["name"] for t in b["reserve_terms"]]
    # the budget: floor(85,520,809,984 x 0.92) - 16,060,000,000 (8.03e9 parameters x 2 bytes) - 3,221,225,471
    assert 78_679_145_185 - 16_060_000_000 - 3_221_225_471 == b["per_rank_bytes"]
    # and auto is the default for a GPU-derived budget (issue 23): the same figures without --reserve
    code, doc, _ = run(["calc", "-m", "llama-3.1-8b", "--gpu", "h100-80gb", "--json"], capsys)
    assert b == json.loads(doc)["budget"]


def test_calc_zero_reserve_says_upper_bound_first(calib, capsys):
    """--reserve 0 asks for the upper bound: the first assumption line says so and what auto would take."""
    code, out, _ = run(["calc", "-m", "llama-3.1-8b", "--gpu", "h100-80gb", "--reserve", "0", "--json"], capsys)
    r = json.loads(out)
    assert r["assumptions"][0].startswith("UPPER BOUND")
    assert "3,221,225,471 bytes" in r["assumptions"][0]
    assert 3_221_225_471 == r["budget"]["auto_reserve_estimate_bytes"]


def test_auto_needs_a_gpu_budget(calib, capsys):
    code, _, err = run(["calc", "--reserve", "auto"], capsys)
    assert 2 == code and "--gpu" in err and err.count("\n") == 1


def test_calibrate_against_loopback_metrics(calib, capsys):
    """tests/data/vllm_v1.prom: num_gpu_blocks 90,513, block 16, util 0.9; Llama-3.1-70B at TP 8 on H100-80GB.

    floor(85,520,809,984 x 0.9)       = 76,968,728,985
    weights/rank = 141,200,000,000 / 8 = 17,650,000,000
    pool = 90,513 x 655,360 B          = 59,318,599,680   (block: 16 x 40,960 B)
    reserve = 76,968,728,985 - 17,650,000,000 - 59,318,599,680 = 129,305 B
    """
    with FaultServer("good") as server:
        code, out, err = run(["calibrate", "--engine", server.url, "-m", "llama-3.1-70b", "--gpu", "h100-80gb",
                              "--tp", "8", "--json"], capsys)
    assert 0 == code, err
    entry = json.loads(out)
    assert 129_305 == entry["reserve_bytes"]
    assert (76_968_728_985, 17_650_000_000, 59_318_599_680) == (
        entry["requested_bytes"], entry["weights_per_rank_bytes"], entry["pool_bytes"])
    saved = [json.loads(line) for line in calib.read_text().splitlines()]
    assert 1 == len(saved) and saved[0]["reserve_bytes"] == 129_305
    assert {"model", "gpu", "tp", "vllm_version", "max_num_batched_tokens", "date"} <= set(saved[0])

    # --reserve auto now takes the calibration entry first, says so, and reproduces the engine's pool exactly
    code, out, _ = run(["calc", "-m", "llama-3.1-70b", "--gpu", "h100-80gb", "--tp", "8", "--gpu-util", "0.9",
                        "--reserve", "auto", "--json"], capsys)
    r = json.loads(out)
    assert 129_305 == r["budget"]["reserve_bytes"]
    assert "calibration entry" in r["budget"]["reserve_basis"]
    assert 90_513 == r["whole_pool_blocks"]
    # another TP has no entry: published terms again (1.89 + 2.10 GiB + 26.88 MiB x 80 layers)
    code, out, _ = run(["calc", "-m", "llama-3.1-70b", "--gpu", "h100-80gb", "--tp", "4", "--reserve", "auto",
                        "--json"], capsys)
    assert 2_029_372_047 + 2_254_857_830 + 2_254_857_830 == json.loads(out)["budget"]["reserve_bytes"]


def test_calibrate_unreachable_engine_is_one_line(calib, capsys):
    code, _, err = run(["calibrate", "--engine", "http://127.0.0.1:9/metrics", "-m", "llama-3.1-8b",
                        "--gpu", "h100-80gb", "--timeout", "1"], capsys)
    assert 2 == code and err.startswith("kvdash: error: --engine") and err.count("\n") == 1
    assert not calib.exists()


def test_calibrate_model_defaults_to_the_served_preset(calib, capsys):
    """Without --model or --config, calibrate takes the preset named like the engine's model_name label:
    tests/data/vllm_v1.prom serves meta-llama/Llama-3.1-70B-Instruct -> llama-3.1-70b, so the entry is the one
    test_calibrate_against_loopback_metrics works by hand (reserve 129,305 B at TP 8 on H100-80GB)."""
    with FaultServer("good") as server:
        code, out, err = run(["calibrate", "--engine", server.url, "--gpu", "h100-80gb", "--tp", "8", "--dry-run"],
                             capsys)
        assert 0 == code, err
        assert ("model llama-3.1-70b: the preset named like the engine's model_name "
                "'meta-llama/Llama-3.1-70B-Instruct'") in out
        assert "= 129,305 B" in out
        code, doc, _ = run(["calibrate", "--engine", server.url, "--gpu", "h100-80gb", "--tp", "8", "--dry-run",
                            "--json"], capsys)
        code_m, doc_m, _ = run(["calibrate", "--engine", server.url, "-m", "llama-3.1-70b", "--gpu", "h100-80gb",
                                "--tp", "8", "--dry-run", "--json"], capsys)
    a, b = json.loads(doc), json.loads(doc_m)
    assert 0 == code == code_m and 129_305 == a["reserve_bytes"]
    assert {k: v for k, v in a.items() if k != "date"} == {k: v for k, v in b.items() if k != "date"}
    assert not calib.exists()  # --dry-run


def test_calibrate_unknown_served_model_names_the_label(calib, capsys):
    """A served model with no preset of its name: one line naming the label and the options that fix it."""
    with FaultServer("other-model") as server:
        code, _, err = run(["calibrate", "--engine", server.url, "--gpu", "h100-80gb", "--tp", "8"], capsys)
    assert 2 == code and err.count("\n") == 1
    assert "--model" in err and "'acme/Mystery-13B-Instruct' names no preset" in err and "--config" in err
    assert not calib.exists()


def test_calibrate_checks_options_before_reading_the_engine(calib, capsys):
    """A bad --model, --gpu, --gpu-memory, --weights or --engine-timeout is refused before any scrape (the
    server counts none)."""
    with FaultServer("good") as server:
        for args in (["-m", "no-such-model"], ["--gpu", "no-such-gpu"], ["--gpu-memory", "lots"],
                     ["--weights", "-1"], ["--engine-timeout", "0"]):
            code, _, err = run(["calibrate", "--engine", server.url, *args], capsys)
            assert 2 == code and args[0] in err and err.count("\n") == 1, (args, err)
        assert 0 == server.requests


def test_calibrate_timeout_is_the_old_name_of_engine_timeout(calib, capsys):
    """--timeout (calibrate's name before issue 15) still works, hidden; with a different --engine-timeout it is
    one error. Both bound the same scrape: 0.1 to 60 seconds."""
    with FaultServer("good") as server:
        args = ["calibrate", "--engine", server.url, "-m", "llama-3.1-70b", "--gpu", "h100-80gb", "--tp", "8",
                "--dry-run", "--json"]
        code, out, err = run([*args, "--timeout", "3"], capsys)
        assert 0 == code and 129_305 == json.loads(out)["reserve_bytes"], err
        code, _, err = run([*args, "--timeout", "3", "--engine-timeout", "4"], capsys)
        assert 2 == code and "old name of --engine-timeout" in err
        code, _, err = run([*args, "--timeout", "61"], capsys)
        assert 2 == code and "--engine-timeout" in err and "0.1 to 60" in err


def test_sweep_report_states_reserve_basis(tmp_path):
    """A grid with reserve: [0, auto] on a GPU: the report's first line says upper bound and names auto's basis
    (Llama-3.1-8B at TP 1: 3,221,225,471 B = 3.0000 GiB, worked in test_calc_auto_without_calibration)."""
    grid = tmp_path / "g.yaml"
    grid.write_text("title: auto\nmodels: [llama-3.1-8b]\ngrid:\n  gpu: [h100-80gb]\n  reserve: [0, auto]\n")
    with pytest.raises(SystemExit) as exc:
        main(["sweep", str(grid), "--out", str(tmp_path / "out")])
    assert 0 == exc.value.code
    md = (tmp_path / "out" / "report.md").read_text()
    first = md.split("\n\n")[1]  # the line under the title
    assert first.startswith("**Upper bound where reserve is 0 B. Runtime reserve of the GPU-derived budgets: "
                            "0 B")
    assert "auto, 3.00 GiB per rank" in first and "published activation-peak and non-torch terms" in first
    assert "auto on GPU-derived budgets (published activation + non-torch terms by model and TP" in md


def test_sweep_default_reserve_is_auto_on_gpu_budgets(tmp_path, capsys):
    """A GPU grid that names no reserve takes auto (issue 23): Llama-3.1-8B on H100-80GB at TP 1 has
    78,679,145,185 - 16,060,000,000 - 3,221,225,471 = 59,397,919,714 B of KV per rank, as calc's default; the
    report's first line and the sweep's summary line say so."""
    grid = tmp_path / "g.yaml"
    grid.write_text("title: default\nmodels: [llama-3.1-8b]\ngrid:\n  gpu: [h100-80gb]\n")
    with pytest.raises(SystemExit) as exc:
        main(["sweep", str(grid), "--out", str(tmp_path / "out"), "--check"])
    assert 0 == exc.value.code
    out = " ".join(capsys.readouterr().out.split())  # the summary wraps at the terminal's width
    assert "1 point (reserve auto, 3.00 GiB per rank, published terms) -> " in out  # one point: singular
    assert "gates: none in this grid (reserve auto, 3.00 GiB per rank, published terms)" in out
    csv = (tmp_path / "out" / "results.csv").read_text().splitlines()
    row = dict(zip(csv[0].split(","), csv[1].split(","), strict=True))
    assert "59397919714" == row["budget_bytes"]
    md = (tmp_path / "out" / "report.md").read_text()
    assert md.split("\n\n")[1].startswith(
        "**Runtime reserve of the GPU-derived budgets: auto (kvdash's default), 3.00 GiB per rank")


def test_live_auto_and_upper_bound(calib, capsys):
    """live --demo (Llama-3.1-70B, TP 8): auto, the default, takes 1.89 + 2.10 GiB + 26.88 MiB x 80 layers
    = 2,029,372,047 + 2,254,857,830 + 2,254,857,830 (.40) = 6,539,087,707 B per rank; with --reserve 0 the
    budget is marked an upper bound with that estimate.  The demo's GPUs are H200s and the terms were measured on an
    H100: extrapolated, as calc says for --gpu h200 (a helper's trial: live and the exporter said '(published)')."""
    code, out, _ = run(["live", "--demo", "--json"], capsys)
    kv = json.loads(out)["kv_pool"]
    assert 0 == code
    assert 6_539_087_707 == kv["reserve_bytes"]
    assert "published terms" in kv["reserve_basis"] and kv["auto_reserve_estimate_bytes"] is None
    assert "reserve auto 6.09 GiB (published, extrapolated)" == kv["reserve_text"]
    code, out, _ = run(["calc", "--model", "llama-3.1-70b", "--tp", "8", "--gpu", "h200", "--json"], capsys)
    assert "--reserve auto: published terms, extrapolated" in json.loads(out)["summary"]  # the same words
    code, out, _ = run(["live", "--demo", "--json", "--reserve", "0"], capsys)
    kv0 = json.loads(out)["kv_pool"]
    assert kv0["reserve_basis"].startswith("0 B") and 6_539_087_707 == kv0["auto_reserve_estimate_bytes"]
    assert kv0["budget_bytes"] - kv["budget_bytes"] == 6_539_087_707
    assert "UPPER BOUND: --reserve 0" == kv0["reserve_text"]
    code, out, _ = run(["live", "--demo", "--json", "--budget", "40GiB"], capsys)
    kv1 = json.loads(out)["kv_pool"]
    assert (0, 0, "declared budget, no reserve") == (code, kv1["reserve_bytes"], kv1["reserve_text"])


# --- kvdash live: the measured reserve and the c key (the same entry kvdash calibrate records) -------

H100_BYTES = 85_520_809_984  # the h100-80gb preset: 81,559 MiB


class H100Host:
    """Eight H100-80GB readings as NVML would give them (not the demo: c refuses simulated GPUs)."""

    name = "fixed H100 host"

    def read(self):
        from kvdash.sources.base import GPUReading, Snapshot

        return Snapshot(1_767_225_600.0, self.name, tuple(
            GPUReading(i, "NVIDIA H100 80GB HBM3", total_bytes=H100_BYTES, used_bytes=80 * GIB) for i in range(8)),
            driver="550.54.15")

    def close(self):
        return None


async def _pilot_calibrate(config, engine_url, fetch_engine=True):
    from kvdash.sources.engine import fetch
    from kvdash.tui.app import LiveApp

    app = LiveApp(H100Host(), config, interval=3600, engine_url=engine_url,
                  engine=(lambda: fetch(engine_url, timeout=2.0)) if fetch_engine else None)
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(50):  # one GPU poll and (with an engine) one scrape, each on its own thread
            if app.snapshot is not None and (app.engine is not None or not fetch_engine):
                break
            await pilot.pause(0.1)
        assert app.snapshot is not None and (app.engine is not None or not fetch_engine), "no reading in 5 s"
        await pilot.press("c")
        await pilot.pause()
        return app, str(app.query_one("#status").render()), app.kv


async def test_live_c_key_appends_the_calibrate_entry(calib):
    """kvdash live on 8 x H100-80GB with the loopback engine (tests/data/vllm_v1.prom: 90,513 blocks of 16,
    util 0.9, Llama-3.1-70B at TP 8; kvdash at the engine's util 0.9): the c key appends the entry kvdash
    calibrate records:

        floor(85,520,809,984 x 0.9) = 76,968,728,985
        - 141,200,000,000 / 8       = 17,650,000,000
        - 90,513 x 655,360          = 59,318,599,680
        reserve                     =        129,305 B
    """
    from kvdash.live.analysis import LiveConfig

    with FaultServer("good") as server:
        app, status, kv = await _pilot_calibrate(LiveConfig(model="llama-3.1-70b", tp=8, gpu_util="0.9"), server.url)
    saved = [json.loads(line) for line in calib.read_text().splitlines()]
    assert 1 == len(saved)
    e = saved[0]
    assert 129_305 == e["reserve_bytes"] == 76_968_728_985 - 17_650_000_000 - 59_318_599_680
    assert (76_968_728_985, 17_650_000_000, 59_318_599_680) == (
        e["requested_bytes"], e["weights_per_rank_bytes"], e["pool_bytes"])
    assert ("Llama-3.1-70B", 8, 1, "NVIDIA H100 80GB HBM3", H100_BYTES, "kvdash live") == (
        e["model"], e["tp"], e["pp"], e["gpu"], e["gpu_memory_bytes"], e["source"])
    assert {"vllm_version", "max_num_batched_tokens", "date", "engine"} <= set(e)
    # the UI confirms with the entry's figures and the file
    assert f"calibration saved to {calib}" in status and "129,305 B" in status
    assert "floor(85,520,809,984 x 0.9) - 17,650,000,000 - 90,513 x 655,360" in status
    # the dashboard shows the same figure; 129,305 B is under one 655,360 B block, so kvdash's pool at
    # --reserve 0 is already the engine's 90,513 blocks and no --reserve is suggested
    assert 129_305 == kv["measured_reserve"]["entry"]["reserve_bytes"]
    assert "the same pool" == kv["engine"]["explain"] and 90_513 == kv["pool_blocks"]
    # and --reserve auto finds it (calibrate and live write the same fields, so one reader serves both)
    from kvdash.calibration import find_entry
    from kvdash.core.model import load_preset

    assert 129_305 == find_entry(load_preset("llama-3.1-70b"), None, 8, 1)["reserve_bytes"]


async def test_live_c_key_matches_kvdash_calibrate(calib, capsys):
    """The TUI and the CLI build the entry with one function: every figure but the date, GPU name, engine
    URL and source is equal (calibrate given --gpu h100-80gb, the same 85,520,809,984 B)."""
    from kvdash.live.analysis import LiveConfig

    with FaultServer("good") as server:
        await _pilot_calibrate(LiveConfig(model="llama-3.1-70b", tp=8, gpu_util="0.9"), server.url)
        code, out, err = await asyncio.to_thread(run, ["calibrate", "--engine", server.url, "-m", "llama-3.1-70b",
                                                       "--gpu", "h100-80gb", "--tp", "8", "--json"], capsys)
    assert 0 == code, err
    tui, cli = [json.loads(line) for line in calib.read_text().splitlines()]
    skip = {"date", "gpu", "source"}
    assert {k: v for k, v in tui.items() if k not in skip} == {k: v for k, v in cli.items() if k not in skip}


async def test_live_c_key_says_why_without_an_engine(calib):
    """No engine attached: c writes nothing and says so in the status line."""
    from kvdash.live.analysis import LiveConfig

    app, status, _ = await _pilot_calibrate(LiveConfig(model="llama-3.1-70b", tp=8), "", fetch_engine=False)
    assert not calib.exists()
    assert "calibration not saved: no engine attached: start kvdash live with --engine URL" in status


async def test_live_c_key_says_why_for_another_model_or_a_failing_engine(calib):
    """The engine serves Llama-3.1-70B while kvdash analyses Llama-3.1-8B: nothing saved, the reason named;
    an engine answering 500: nothing saved, its error named."""
    from kvdash.live.analysis import LiveConfig

    with FaultServer("good") as server:
        _, status, kv = await _pilot_calibrate(LiveConfig(model="llama-3.1-8b", tp=1, lengths=(1024,),
                                                          max_reserved=4096), server.url)
    assert "the engine serves meta-llama/Llama-3.1-70B-Instruct, kvdash analyses Llama-3.1-8B" in status
    assert "entry" not in kv["measured_reserve"]
    with FaultServer("500") as server:
        _, status, _ = await _pilot_calibrate(LiveConfig(model="llama-3.1-70b", tp=8, gpu_util="0.9"), server.url)
    assert "calibration not saved" in status and "HTTP 500" in status
    assert not calib.exists()


async def test_live_c_key_refuses_the_demo(calib):
    """The demo's engine and GPUs are simulated: shown, but never saved into the file --reserve auto reads."""
    from kvdash.live.analysis import LiveConfig
    from kvdash.sources.demo import DemoSource
    from kvdash.tui.app import LiveApp

    app = LiveApp(DemoSource(seed=7), LiveConfig(), interval=3600, autopoll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert 4_832_067_128 == app.kv["measured_reserve"]["entry"]["reserve_bytes"]
        await pilot.press("c")
        await pilot.pause()
        status = str(app.query_one("#status").render())
    assert "calibration not saved: the demo's engine and GPUs are simulated" in status
    assert not calib.exists()


def test_live_json_carries_the_measured_reserve(calib, capsys):
    """--json: kv_pool.measured_reserve is the entry calibrate would record.  The demo (8 x H200 of
    150,754,820,096 B, Llama-3.1-70B at TP 8, util 0.92, 177,326 blocks of 655,360 B):
    floor(150,754,820,096 x 0.92) - 17,650,000,000 - 177,326 x 655,360
    = 138,694,434,488 - 17,650,000,000 - 116,212,367,360 = 4,832,067,128 B, marked simulated."""
    code, out, _ = run(["live", "--demo", "--json"], capsys)
    m = json.loads(out)["kv_pool"]["measured_reserve"]
    assert 0 == code
    assert 4_832_067_128 == m["entry"]["reserve_bytes"] and "simulated" in m
    assert (138_694_434_488, 116_212_367_360) == (m["entry"]["requested_bytes"], m["entry"]["pool_bytes"])


def test_live_reserve_line_is_the_measured_figure(calib):
    """kvdash at --gpu-util 0.85, the engine at 0.9: the pools differ, and the suggested --reserve is the
    measured 129,305 B (what calibrate records), with the engine's --gpu-util 0.9 named, not a figure worked
    from kvdash's 0.85 (that would be -4.3 GB)."""
    from kvdash.live.analysis import LiveConfig, analyze
    from kvdash.sources.engine import parse_prometheus, reading_from_samples

    reading = reading_from_samples("http://x/metrics", parse_prometheus(
        (Path(__file__).parent / "data" / "vllm_v1.prom").read_text()))
    kv = analyze(H100Host().read(), LiveConfig(model="llama-3.1-70b", tp=8, gpu_util="0.85"), reading)
    eng = kv["engine"]
    assert 129_305 == eng["reconciling_reserve_bytes"] == kv["measured_reserve"]["entry"]["reserve_bytes"]
    assert eng["explain"].startswith("--gpu-util 0.9 --reserve 129,305 B (0.00 GiB per rank) makes kvdash's pool")


def test_readme_accuracy_tables_are_the_benchmarks_output(capsys):
    """The accuracy tables (docs/reserve.md) are what benchmarks/reserve_accuracy.py prints, row for row (so a change to
    the terms or the data shows up as a failing test, not a stale table).  Also guards its figures:
    leave-one-model-out median 0.26%, worst 5.85% on the 49 runs' KV memory."""
    import runpy

    runpy.run_path(str(Path(__file__).parent.parent / "benchmarks" / "reserve_accuracy.py"), run_name="__main__")
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| run ")]
    readme = (Path(__file__).parent.parent / "docs" / "reserve.md").read_text()  # moved from the README (issue 23)
    assert len(rows) >= 30 + 3 + 4 + 2
    assert [r for r in rows if r not in readme] == []
    assert "| auto, leave one model out | 0.26% | 5.85% | -5.85% to +3.53% |" in rows


@given(st.integers(1, 400_000), st.sampled_from(["0.5", "0.8", "0.9", "0.92", "0.95", "0.975"]),
       st.sampled_from([1, 2, 4, 8]))
def test_measured_reserve_reproduces_the_engines_blocks(blocks, util, tp):
    """Invariant of kvdash.calibration.measure (calibrate and the c key): requested = weights/rank + pool +
    reserve exactly, and kvdash's budget with that reserve, floor(total x util) - weights/rank - reserve,
    holds exactly the engine's num_gpu_blocks (Llama-3.1-70B, 655,360 B blocks at TP 8)."""
    from kvdash.calibration import measure
    from kvdash.core import formulas as f
    from kvdash.core.model import load_preset
    from kvdash.errors import InputError
    from kvdash.sources.engine import EngineReading

    arch = load_preset("llama-3.1-70b")
    reading = EngineReading(url="http://x/metrics", kind="vllm", num_gpu_blocks=blocks, block_size=16,
                            gpu_memory_utilization=util, cache_dtype="auto")
    try:
        e = measure(reading, arch, 150_754_820_096, "H200", tp)
    except InputError as exc:  # weights + pool over the requested memory: refused, never a negative reserve
        assert "negative" in str(exc)
        return
    assert e["reserve_bytes"] >= 0
    assert e["requested_bytes"] == e["weights_per_rank_bytes"] + e["pool_bytes"] + e["reserve_bytes"]
    budget = e["requested_bytes"] - e["weights_per_rank_bytes"] - e["reserve_bytes"]
    assert blocks == f.pool_blocks(budget, e["block_bytes"])


def test_simulate_gpu_budget_says_upper_bound_first(capsys):
    """kvdash simulate with a GPU-derived budget and --reserve 0 says first, as calc does, that it assumes a 0 B
    reserve and
    how much --reserve auto would take: Llama-3.1-8B on H100-80GB at TP 1,
    activation 2,029,372,047 + non-torch 289,910,292 + CUDA graphs 26.88 MiB x 32 layers
    (26.88 x 32 x 1,048,576 = 901,943,132.16 -> 901,943,132) = 3,221,225,471 B."""
    code, out, _ = run(["simulate", "--gpu", "h100-80gb", "--model", "llama-3.1-8b", "--requests", "50",
                        "--reserve", "0"], capsys)
    assert 0 == code
    first = " ".join(out.split())
    assert first.startswith("UPPER BOUND: this GPU-derived budget assumes a runtime reserve of 0 B per rank; "
                            "--reserve auto would lower it by about 3,221,225,471 bytes")
    assert "CUDA-graph memory 901,943,132 B" in first


def test_simulate_reserve_auto_states_its_basis_and_lowers_the_pool(capsys):
    """--reserve auto: the first line names the reserve and its basis; the pool is the budget less it:
    (78,679,145,185 - 16,060,000,000 weights - 3,221,225,471) // 131,072 B per token = 59,397,919,714 // 131,072
    = 453,170 slots.  auto is the default: the same without --reserve."""
    code, out, _ = run(["simulate", "--gpu", "h100-80gb", "--model", "llama-3.1-8b", "--reserve", "auto",
                        "--requests", "50", "--json"], capsys)
    assert 0 == code
    setup = json.loads(out)["setup"]
    assert 59_397_919_714 == setup["budget_bytes"] and 453_170 == setup["capacity_slots"]
    _, doc, _ = run(["simulate", "--gpu", "h100-80gb", "--model", "llama-3.1-8b", "--requests", "50", "--json"],
                    capsys)
    assert setup["budget_bytes"] == json.loads(doc)["setup"]["budget_bytes"]
    assert 1 == len(setup["budget_notes"])
    assert setup["budget_notes"][0].startswith("runtime reserve 3,221,225,471 B per rank (--reserve auto: ")


def test_simulate_explicit_budget_says_no_reserve(capsys):
    """An explicit --budget is taken as the KV pool itself (12 x 2^30 = 12,884,901,888 B): the first line says no
    reserve is taken off it."""
    code, out, _ = run(["simulate", "--budget", "12GiB", "--requests", "50", "--json"], capsys)
    assert 0 == code and ["KV budget 12,884,901,888 B per rank: a declared KV budget: no runtime reserve taken "
                          "off"] == json.loads(out)["setup"]["budget_notes"]


@pytest.mark.parametrize("line", [
    '{"reserve_bytes": Infinity}',  # OverflowError in int()
    '{"reserve_bytes": 1, "model": "Llama-3.1-8B", "tp": null}',  # TypeError in calibration_matches
    '{"reserve_bytes": 1, "model": "Llama-3.1-8B", "tp": "x"}',  # ValueError there
    '{"reserve_bytes": true}', '{"reserve_bytes": 1, "pp": 0}', '{"reserve_bytes": 1, "gpu": 80}',
    '{"reserve_bytes": -5, "model": "Llama-3.1-8B", "tp": 1}',  # blamed on --reserve, never typed
    "[" * 100_000,  # RecursionError in json.loads
])
def test_a_bad_calibration_line_is_one_line_naming_it(line, calib, capsys):
    """A helper's trial: the calibration file (read by every GPU-derived budget, --reserve auto being the default)
    ended calc in a traceback on lines of the wrong types.  Each is now refused in one line naming the file and line,
    exit 2."""
    calib.write_text('{"reserve_bytes": 5, "model": "Llama-3.1-8B", "tp": 1, "pp": 1}\n' + line + "\n")
    code, _, err = run(["calc", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--brief"], capsys)
    assert 2 == code and 1 == len(err.strip().splitlines()) and "Traceback" not in err
    assert err.startswith(f"kvdash: error: {calib}: line 2: ") and "as kvdash calibrate writes" in err


def test_an_entry_is_never_glued_to_a_last_line_without_newline(calib):
    """A helper's trial: the calibration file's last line had lost its newline (an editor, a cut copy); calibrate
    appended its entry to that line, and every GPU-derived command then refused the file.  append_entry ends an open
    last line first: three entries, three lines."""
    from kvdash.calibration import append_entry, load_entries

    calib.write_text('{"reserve_bytes": 1, "model": "m", "tp": 1, "pp": 1}')
    append_entry(calib, {"reserve_bytes": 2, "model": "m", "tp": 1, "pp": 1})
    append_entry(calib, {"reserve_bytes": 3, "model": "m", "tp": 1, "pp": 1})
    assert [1, 2, 3] == [e["reserve_bytes"] for e in load_entries(calib)]
    assert 3 == len(calib.read_text().splitlines()) and calib.read_text().endswith("}\n")


def test_a_calibration_path_that_is_a_folder_is_one_line(tmp_path, monkeypatch, capsys):
    """A helper's trial: KVDASH_CALIBRATION naming a folder gave 'kvdash: error: /path: Is a directory', without the
    variable or what it should name."""
    monkeypatch.setenv("KVDASH_CALIBRATION", str(tmp_path))
    code, _, err = run(["calc", "--model", "llama-3.1-8b", "--gpu", "h100-80gb"], capsys)
    assert 2 == code and err.startswith(f"kvdash: error: KVDASH_CALIBRATION: '{tmp_path}' is not allowed; a readable "
                                        "calibration file") and "Is a directory" in err


def test_calibrate_says_which_engine_figure_is_wrong():
    """A helper's trial: a page whose num_gpu_blocks was negative said '(missing: num_gpu_blocks)' though it was there,
    and one whose pool could not fit the GPU blamed --weights, which was not given.  The refusal now gives each figure's
    own reason, and a negative reserve without --weights names the engine.  Llama-3.1-70B at TP 8 on an H100 80GB:
    9,000,000,000 blocks of 655,360 B cannot fit."""
    from kvdash.calibration import measure
    from kvdash.core.model import load_preset
    from kvdash.errors import InputError
    from kvdash.sources.engine import EngineReading

    arch, url = load_preset("llama-3.1-70b"), "http://127.0.0.1:9/metrics"
    bad = EngineReading(url=url, kind="vllm", block_size=16, gpu_memory_utilization="0.9",
                        invalid={"num_gpu_blocks": "-5 is outside 0 to 2^53"})
    with pytest.raises(InputError, match=r"\(num_gpu_blocks: -5 is outside 0 to 2\^53\)"):
        measure(bad, arch, 85_520_809_984, "h100-80gb", tp=8)
    huge = EngineReading(url=url, kind="vllm", block_size=16, gpu_memory_utilization="0.9",
                         num_gpu_blocks=9_000_000_000)
    with pytest.raises(InputError, match=r"^--engine: .* a pool this GPU can hold: the reserve comes out negative"):
        measure(huge, arch, 85_520_809_984, "h100-80gb", tp=8)
    with pytest.raises(InputError, match=r"^--weights: 141200000000 is not allowed"):
        measure(huge, arch, 85_520_809_984, "h100-80gb", tp=8, weights=141_200_000_000)


def test_the_calibration_line_shows_a_small_reserve_as_calc_does():
    """A helper's trial: calibrate printed the reserve as '129,305 B (0.00 GiB)' where calc shows the same reserve as
    126.27 KiB (129,305 / 1,024 = 126.27); one human_bytes serves both."""
    from kvdash.calibration import entry_text

    entry = {"gpu_memory_bytes": 85_520_809_984, "gpu_memory_utilization": "0.9", "weights_per_rank_bytes": 1,
             "num_gpu_blocks": 1, "block_bytes": 1, "reserve_bytes": 129_305}
    assert entry_text(entry).endswith("= 129,305 B (126.27 KiB)")

"""An option the run would not read is refused in one line, exit 2, never dropped (a helper's audit: 21 options ran
with a value nothing read, the output byte-identical to leaving them out).  Typed at its default it changes
nothing and runs; given where the run reads it, it still works (the second half below)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_run import run

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "kvdash/data/models/llama-3.1-70b.json")
INDEX = str(ROOT / "examples/models/my-model/model.safetensors.index.json")
EXPLICIT = ["--layers", "32", "--kv-heads", "8", "--head-dim", "128"]
TRACE = "TRACE"  # a four-request trace written by the test

REFUSED = {  # case: (command, the refusal's start after "kvdash: error: ")
    "calc --window without an explicit architecture": (
        ["calc", "--budget", "40GiB", "--window", "4096"],
        "--window: 4096 is not allowed; describes an explicit architecture only (--layers, --kv-heads, --head-dim); "
        "--model and --config give their own"),
    "calc --max-context without one": (["calc", "--budget", "40GiB", "--max-context", "8192"], "--max-context: 8192"),
    "calc --head-dim-v without one": (["calc", "--budget", "40GiB", "--head-dim-v", "64"], "--head-dim-v: 64"),
    "calc --attention-heads without one": (["calc", "--budget", "40GiB", "--attention-heads", "64"],
                                           "--attention-heads: 64"),
    "calc --safetensors-index with an explicit architecture": (
        ["calc", "--budget", "40GiB", *EXPLICIT, "--safetensors-index", INDEX],
        f"--safetensors-index: '{INDEX}' is not allowed; weighs a --model or --config checkpoint; with --layers, "
        "--kv-heads and --head-dim give --weights SIZE"),
    "calc --weight-format without --slo": (
        ["calc", "--budget", "40GiB", "--weight-format", "fp8"],
        "--weight-format: 'fp8' is not allowed; times the --slo search only: give --slo too"),
    "calc --offload with --brief": (
        ["calc", "--budget", "40GiB", "--brief", "--offload", "cpu:100GiB"],
        "--offload: 'cpu:100GiB' is not allowed; its tiers are shown in the full output and with --json, not with "
        "--brief: drop --brief"),
    "calc --blocks-per-chunk under LMCache's rules": (
        ["calc", "--budget", "40GiB", "--offload", "cpu:100GiB", "--offload-rules", "lmcache", "--blocks-per-chunk",
         "4"], "--blocks-per-chunk: 4 is not allowed; LMCache's rules use 256-token chunks"),
    "calc --disk-link without a disk tier": (
        ["calc", "--budget", "40GiB", "--offload", "cpu:100GiB", "--disk-link", "nvme-gen5"],
        "--disk-link: 'nvme-gen5' is not allowed; times a disk tier only: give --offload cpu:SIZE,disk:SIZE"),
    "calc --model with --config": (
        ["calc", "--budget", "40GiB", "--config", CONFIG, "-m", "llama-3.1-8b"],
        "--model: 'llama-3.1-8b' is not allowed; give --model or --config, not both (the config.json is read)"),
    "simulate --model with --config": (
        ["simulate", "--budget", "40GiB", "--config", CONFIG, "-m", "llama-3.1-8b"], "--model: 'llama-3.1-8b'"),
    "simulate --weight-format without --time": (
        ["simulate", "--budget", "40GiB", "--weight-format", "fp8"],
        "--weight-format: 'fp8' is not allowed; times the timed simulation only (--time, --slo)"),
    "simulate --latency-bound without --rates": (
        ["simulate", "--budget", "40GiB", "--latency-bound", "3"],
        "--latency-bound: 3.0 is not allowed; bounds a --rates sweep only: give --rates A:B:N"),
    "simulate --trace-every without --json": (
        ["simulate", "--budget", "40GiB", "--trace-every", "5"],
        "--trace-every: 5 is not allowed; keeps a per-step trace in --json only: give --json"),
    "simulate --max-file-size without a file": (
        ["simulate", "--budget", "40GiB", "--max-file-size", "1KiB"],
        "--max-file-size: '1KiB' is not allowed; bounds the file --trace or --hash-trace reads only"),
    "simulate --max-batched-tokens on a declared budget": (
        ["simulate", "--budget", "40GiB", "--max-batched-tokens", "64"],
        "--max-batched-tokens: 64 is not allowed; sizes vLLM's runtime reserve on a GPU (--gpu) under --reserve "
        "auto and the timed run's batches (--time) only"),
    "simulate --max-batched-tokens under SGLang's rules": (
        ["simulate", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--engine-rules", "sglang",
         "--max-batched-tokens", "64"],
        "--max-batched-tokens: 64 is not allowed; none with --engine-rules sglang: SGLang's pool is sized by its "
        "mem_fraction_static, not vLLM's runtime reserve"),
    "simulate --max-batched-tokens beside an explicit --reserve": (
        ["simulate", "--gpu", "h100-80gb", "--reserve", "2GiB", "--max-batched-tokens", "64"],
        "--max-batched-tokens: 64 is not allowed; sizes vLLM's runtime reserve on a GPU (--gpu) under --reserve "
        "auto and the timed run's batches (--time) only"),
    "simulate --max-len (--max-reserved's old name) in a prefix replay": (
        ["simulate", "--budget", "40GiB", "--prefix-workload", "multi-turn:4,3,100,50,50", "--max-len", "4096"],
        "--max-len: 4096 is not allowed; not read by a prefix replay"),
    "simulate --seed with a trace in a closed loop": (
        ["simulate", "--budget", "40GiB", "--trace", TRACE, "--concurrency", "2", "--seed", "5"],
        "--seed: 5 is not allowed; not read by a --trace in a closed loop (--concurrency): nothing is drawn"),
    "simulate --time --seed with a trace in a closed loop": (
        ["simulate", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--time", "--trace", TRACE, "--concurrency",
         "2", "--seed", "5"], "--seed: 5 is not allowed"),
    "sweep --check with --dry-run": (
        ["sweep", "sweeps/tutorial.yaml", "--dry-run", "--check"],
        "--check: '--check' is not allowed; not read with --dry-run (it prints the point count and the first "
        "points, writing nothing; a simulate: block runs in this process)"),
    "sweep --jobs with --dry-run": (["sweep", "sweeps/tutorial.yaml", "--dry-run", "-j", "2"], "--jobs: 2"),
    "sweep --out with --dry-run": (["sweep", "sweeps/tutorial.yaml", "--dry-run", "--out", "OUT"], "--out: "),
    "live --budget with --budget-mode engine": (
        ["live", "--demo", "--once", "--budget-mode", "engine", "--budget", "40GiB"],
        "--budget: '40GiB' is not allowed; a declared budget is read by --budget-mode explicit (the default with "
        "--budget), not engine"),
    "live --gpu-util with a declared budget": (
        ["live", "--demo", "--once", "--budget", "40GiB", "--gpu-util", "0.8"],
        "--gpu-util: '0.8' is not allowed; sizes a budget derived from the GPUs (--budget-mode vllm) only, not a "
        "declared --budget"),
    "live --max-file-size without --replay": (
        ["live", "--demo", "--once", "--max-file-size", "1KiB"],
        "--max-file-size: '1KiB' is not allowed; bounds the file --replay reads only"),
    "exporter --gpu-util with --budget-mode engine": (
        ["exporter", "--demo", "--once", "--budget-mode", "engine", "--gpu-util", "0.8"],
        "--gpu-util: '0.8' is not allowed; sizes a budget derived from the GPUs (--budget-mode vllm) only, not "
        "--budget-mode engine's"),
    "exporter --port with --once": (
        ["exporter", "--demo", "--once", "--port", "9999"],
        "--port: 9999 is not allowed; read by the server only, not with --once (it prints the metrics page once)"),
    "exporter --host with --once": (["exporter", "--demo", "--once", "--host", "0.0.0.0"], "--host: '0.0.0.0'"),
    "record --interval with one reading": (
        ["record", "--demo", "--count", "1", "--interval", "30", "--out", "OUT"],
        "--interval: 30.0 is not allowed; the time between readings; --count 1 takes one reading"),
    "calibrate --model with --config": (
        ["calibrate", "--engine", "localhost:8000", "--config", CONFIG, "-m", "llama-3.1-8b"],
        "--model: 'llama-3.1-8b' is not allowed; give --model or --config, not both"),
    "calibrate --gpu with --gpu-memory": (
        ["calibrate", "--engine", "localhost:8000", "--gpu-memory", "80GiB", "--gpu", "h200"],
        "--gpu: 'h200' is not allowed; a preset's memory, which --gpu-memory replaces: give one or the other"),
    "calibrate --calibration-file with --dry-run": (
        ["calibrate", "--engine", "localhost:8000", "--dry-run", "--calibration-file", "OUT"],
        "--calibration-file: "),
}


def _args(command: list[str], tmp_path: Path) -> list[str]:
    trace = tmp_path / "t.csv"
    trace.write_text("prompt,output\n100,50\n200,30\n150,60\n120,40\n")
    return [str(trace) if a == TRACE else str(tmp_path / "out") if a == "OUT" else a for a in command]


@pytest.mark.parametrize("case", list(REFUSED))
def test_an_option_nothing_reads_is_one_line_exit_2(case, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    command, expected = REFUSED[case]
    code, out, err = run(_args(command, tmp_path), capsys)
    assert (2, "") == (code, out), err
    assert err.startswith(f"kvdash: error: {expected}") and 1 == len(err.strip().splitlines()), err
    assert not (tmp_path / "out").exists()  # nothing written


def test_each_is_read_where_it_applies(tmp_path, capsys, monkeypatch):
    """The refusals are no wider than the rule: each option changes the answer where the run reads it."""
    monkeypatch.chdir(ROOT)

    def out(*args: str) -> str:
        code, text, err = run(list(args), capsys)
        assert 0 == code, err
        return text

    base = out("calc", "--budget", "40GiB", *EXPLICIT, "--json")
    assert base != out("calc", "--budget", "40GiB", *EXPLICIT, "--window", "4096", "--json")
    assert base != out("calc", "--budget", "40GiB", *EXPLICIT, "--max-context", "8192", "--json")
    assert "disk" in json.loads(out("calc", "--budget", "40GiB", "--offload", "cpu:100GiB,disk:1TB", "--disk-link",
                                    "nvme-gen5", "--json"))["offload_tiers"]["tiers"]
    sim = ["simulate", "--budget", "40GiB", "--requests", "200"]
    assert out(*sim, "--json") != out(*sim, "--json", "--trace-every", "5")
    gpu = ["simulate", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--requests", "200", "--json"]
    assert json.loads(out(*gpu))["setup"]["budget_notes"] != \
        json.loads(out(*gpu, "--max-batched-tokens", "64"))["setup"]["budget_notes"]
    trace = _args([TRACE], tmp_path)[0]
    poisson = ["simulate", "--budget", "40GiB", "--trace", trace, "--requests", "4", "--json"]
    assert out(*poisson, "--seed", "5") != out(*poisson, "--seed", "6")  # Poisson arrivals: drawn from the seed
    assert out("live", "--demo", "--json", "--budget-mode", "explicit", "--budget", "40GiB") != \
        out("live", "--demo", "--json", "--budget-mode", "explicit", "--budget", "20GiB")
    # typed at the default, each changes nothing and runs (a size however it is written: 256 MiB is 268,435,456 B)
    out("calc", "--budget", "40GiB", "--weight-format", "auto")
    out("live", "--demo", "--once", "--max-file-size", "268435456")
    out("simulate", "--budget", "40GiB", "--requests", "200", "--max-file-size", "256 MiB")
    out("simulate", "--budget", "40GiB", "--requests", "200", "--latency-bound", "2.0")
    out("sweep", "sweeps/tutorial.yaml", "--dry-run", "-j", "0")


def test_an_unknown_budget_mode_is_named_before_the_options_it_would_ignore(capsys):
    """A review: --budget-mode Explicit --budget 40GiB was refused as '--budget ... not Explicit' (the mode was
    read before it was checked); the unknown mode itself is the error."""
    for command in (["live", "--demo", "--once", "--budget-mode", "Explicit", "--budget", "40GiB"],
                    ["exporter", "--demo", "--once", "--budget-mode", "xyz", "--gpu-util", "0.8"]):
        code, _, err = run(command, capsys)
        assert 2 == code and err.startswith("kvdash: error: --budget-mode: "), err


def test_max_file_size_bounds_a_timed_trace(tmp_path, capsys):
    """simulate --time --trace read its trace with a fixed 256 MiB limit whatever --max-file-size said: a 42-byte
    trace under --max-file-size 20B ran; now it is refused as the length simulation refuses it."""
    trace = _args([TRACE], tmp_path)[0]
    for timed in ([], ["--time"]):
        code, _, err = run(["simulate", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--trace", trace,
                            "--max-file-size", "20B", *timed], capsys)
        assert 2 == code and "the file is 42 bytes, over the 20 bytes limit" in err, err

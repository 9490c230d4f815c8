"""``grid: engine: [vllm, sglang]`` (issue 27 item 3): SGLang 0.5.23's pool beside vLLM 0.33's at every point,
in results.csv and in the report's "Engines compared" section.  The SGLang figures are kvdash.engines.sglang's,
checked against SGLang's own code in test_conformance_sglang.py."""

from __future__ import annotations

import csv

from tests.cli_run import run

GRID = """title: Two engines
models:
  - preset: llama-3.1-70b
  - name: qwen3-next
    config: {config}
    weights: 160GB
grid:
  gpu: [h200]
  tp: [8]
  engine: [vllm, sglang]
"""


def test_two_engine_grid(tmp_path, capsys):
    """Llama-3.1-70B on 8 x H200: SGLang 0.893, 2,832,402 tokens per rank (the calc view's worked figures:
    tests/test_calc_sglang.py) beside vLLM's 2,795,536: +1.3 %; Qwen3-Next: not mirrored, said in one line."""
    from pathlib import Path

    config = Path(__file__).resolve().parent / "data" / "configs" / "qwen3-next-80b-a3b-thinking" / "config.json"
    grid = tmp_path / "g.yaml"
    grid.write_text(GRID.format(config=config))
    code, out, err = run(["sweep", grid, "--out", tmp_path / "out", "-q"], capsys)
    assert code in (0, None), err
    rows = {r["model"]: r for r in csv.DictReader((tmp_path / "out" / "results.csv").read_text().splitlines())}
    llama = rows["llama-3.1-70b"]
    assert (llama["sglang_mem_fraction_static"], llama["sglang_kv_cache_tokens"], llama["sglang_running_requests"]) \
        == ("0.893000", "2832402", "4096")
    assert llama["vllm_kv_cache_tokens"] == "2795536"
    assert llama["sglang_vs_vllm_percent"].startswith("1.3187")
    assert rows["qwen3-next"]["sglang_kv_cache_tokens"] == ""
    assert "not mirrored for this model: SGLang 0.5.23's mamba" in rows["qwen3-next"]["sglang_note"]
    md = (tmp_path / "out" / "report.md").read_text()
    assert "## Engines compared: vLLM 0.33 and SGLang 0.5.23" in md
    assert "| llama-3.1-70b | h200 | 8 | bf16 | 2,795,536 | 0.893 | 2,832,402 | 4,096 | +1.3 % |  |" in md
    assert "Engines compared" in (tmp_path / "out" / "report.html").read_text()


def test_engine_values_are_checked(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_text("models: [llama-3.1-8b]\ngrid:\n  gpu: [h200]\n  engine: [vllm, tgi]\n")
    code, _, err = run(["sweep", grid, "--out", tmp_path / "out"], capsys)
    assert code == 2 and err.count("\n") == 1 and "expected vllm or sglang" in err
    grid.write_text("models: [llama-3.1-8b]\ngrid:\n  gpu: [h200]\n  weights: [16GB]\n  engine: [sglang]\n")
    code, _, err = run(["sweep", grid, "--out", tmp_path / "out"], capsys)
    assert code == 2 and "engine: sglang reads each model's own weight figure" in err


def test_grid_without_engine_has_no_engine_columns(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_text("models: [llama-3.1-8b]\ngrid:\n  gpu: [h200]\n")
    code, _, err = run(["sweep", grid, "--out", tmp_path / "out", "-q"], capsys)
    assert code in (0, None), err
    header = (tmp_path / "out" / "results.csv").read_text().splitlines()[0]
    assert "sglang" not in header
    assert "Engines compared" not in (tmp_path / "out" / "report.md").read_text()

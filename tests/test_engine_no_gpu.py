"""An engine watched from a machine without NVML (issue 24, item 5): ``live --engine URL`` shows the
engine's own figures and kvdash's pool from --budget or --budget-mode engine; ``kvdash record --engine``
records its readings and ``live --replay`` plays them back.  The engine page is SGLang 0.5.23's own
(page size 64: 599,936 tokens = 9,374 pages of 64; 40 % used = 239,974 tokens -> 3,750 pages)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kvdash.sources.nvml as nvml_mod
from tests.cli_run import run
from tests.promfixture import MetricsServer
from tests.test_live import fake_nvml

PAGES = Path(__file__).parent / "data" / "engine_pages"


@pytest.fixture
def engine():
    srv = MetricsServer({"/metrics": (PAGES / "sglang-0.5.23-page64.prom").read_text()})
    yield f"127.0.0.1:{srv.port}"
    srv.close()


@pytest.fixture(autouse=True)
def no_nvml(monkeypatch):
    monkeypatch.setattr(nvml_mod, "_load", lambda: fake_nvml(init="LibraryNotFound"))


def test_live_engine_without_nvml_shows_the_engine(engine, capsys):
    code, out, err = run(["live", "--engine", engine, "--json", "--model", "llama-3.1-8b", "--tp", "1",
                          "--budget", "40GiB"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["snapshot"]["gpus"] == [] and "no GPU readings here" in doc["snapshot"]["error"]
    eng = doc["kv_pool"]["engine"]
    assert eng["reading"]["total_tokens"] == 599_936 and eng["reading"]["block_size"] == 64
    assert (eng["engine_own_blocks"], eng["engine_used_own_blocks"]) == (9_374, 3_750)
    # kvdash's pool from --budget: 40 GiB // (131,072 B x 16) = 20,480 blocks = 327,680 tokens
    assert doc["kv_pool"]["token_slots"] == 327_680 and eng["difference_tokens"] == 599_936 - 327_680


def test_budget_mode_engine_without_nvml(engine, capsys):
    code, out, err = run(["live", "--engine", engine, "--json", "--model", "llama-3.1-8b", "--tp", "1",
                          "--budget-mode", "engine"], capsys)
    assert code == 0, err
    assert json.loads(out)["kv_pool"]["token_slots"] == 599_936  # 37,496 blocks of 16 = 599,936 tokens


def test_without_nvml_or_engine_still_one_line_exit_1(capsys):
    code, _, err = run(["live", "--once"], capsys)
    assert code == 1 and "kvdash live --demo" in err


def test_record_engine_then_replay(engine, capsys, tmp_path):
    out = tmp_path / "rec.jsonl"
    code, text, err = run(["record", "--engine", engine, "--count", "2", "--interval", "0.1", "--out", out], capsys)
    assert code == 0, err
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 2 and all(x["extra"]["engine"]["total_tokens"] == 599_936 for x in lines)
    code, text, err = run(["live", "--replay", out, "--json", "--model", "llama-3.1-8b", "--tp", "1",
                           "--budget-mode", "engine"], capsys)
    assert code == 0, err
    doc = json.loads(text)
    assert doc["kv_pool"]["engine"]["reading"]["total_tokens"] == 599_936
    assert doc["kv_pool"]["engine"]["reading"]["kind"] == "sglang"


def test_record_engine_with_demo_is_refused(engine, capsys, tmp_path):
    code, _, err = run(["record", "--demo", "--engine", engine, "--out", tmp_path / "x.jsonl"], capsys)
    assert code == 2 and "--engine" in err


def test_sglang_engine_is_compared_with_sglang_rules(engine, capsys, monkeypatch):
    """Beside an SGLang engine (its page: llama-3.1-8b, page size 64, 599,936 tokens) on an H200 (143,771 MiB),
    kvdash's pool is SGLang 0.5.23's rules, not vLLM's: TP 1 reserves 512 + 12,288 + 128 + 2 x 256 + 58 x 8 =
    13,904 MiB, mem_fraction_static round(129,867 / 143,771, 3) = 0.903; 8 KV heads x 256 x 32 layers x 2 B =
    131,072 B per token; free before the weights 142,747 MiB, weights 16,060,000,000 B: budget
    int((133,621,078,272 / 2^30 - 149,681,078,272 / 2^30 x 0.097) x 2^30) B, // 131,072 and floored to 64."""
    from kvdash.core.model import load_preset
    from kvdash.engines import sglang

    monkeypatch.setattr(nvml_mod, "_load", lambda: fake_nvml())
    code, out, err = run(["live", "--engine", engine, "--json", "--model", "llama-3.1-8b", "--tp", "1"], capsys)
    assert code == 0, err
    eng = json.loads(out)["kv_pool"]["engine"]
    rules = sglang.plan(load_preset("llama-3.1-8b"), 143771, 1, "bf16", 142_747 * 2**20, 16_060_000_000, 64)
    assert rules.fraction.value == 0.903 and rules.cell_bytes == 131_072
    assert eng["kvdash_rules"] == "SGLang 0.5.23" and eng["kvdash_tokens"] == rules.max_total_num_tokens
    assert eng["kvdash_tokens"] % 64 == 0
    assert eng["difference_tokens"] == 599_936 - rules.max_total_num_tokens
    assert "mem_fraction_static 0.903" in eng["explain"] and "reconciling_reserve_bytes" not in eng

"""The conformance data stays whole: every published config has its source, and
conformance/vllm/expected.json (written by vLLM 0.33.0's own code, see
conformance/vllm/README.md) covers every config with the agreed schema.

These tests do not run vLLM; they guard the files kvdash's conformance test reads.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "data" / "configs"
EXPECTED = ROOT / "conformance" / "vllm" / "expected.json"

OK_KEYS = {
    "config", "tp", "kv_dtype", "block_size_requested", "max_model_len", "budget_bytes", "prefix_caching",
    "status", "reason", "spec_source", "attention_backends", "num_kv_heads", "head_size", "use_mla",
    "is_hybrid", "layer_kinds", "block_size", "page_bytes", "num_groups", "group_sizes", "num_gpu_blocks",
    "max_concurrency", "gpu_kv_cache_tokens", "log_line",
}
REFUSED_KEYS = {
    "config", "tp", "kv_dtype", "block_size_requested", "max_model_len", "budget_bytes", "prefix_caching",
    "status", "reason", "spec_source", "use_mla", "is_hybrid",
}
STATE_KINDS = {"mamba", "linear", "short_conv"}
GIB = 2**30


def config_names() -> list[str]:
    return sorted(p.name for p in CONFIGS.iterdir() if (p / "config.json").is_file())


@pytest.fixture(scope="module")
def expected() -> dict:
    return json.loads(EXPECTED.read_text())


def test_at_least_40_published_configs_each_with_architecture_and_model_type() -> None:
    # Issue 10 item 2: at least 40 real configs, keeping `architectures` and `model_type`.
    names = config_names()
    assert len(names) >= 40
    for name in names:
        cfg = json.loads((CONFIGS / name / "config.json").read_text())
        assert isinstance(cfg["architectures"], list) and cfg["architectures"], name
        assert isinstance(cfg["model_type"], str) and cfg["model_type"], name


def test_every_config_has_exactly_one_source_row() -> None:
    rows = re.findall(r"^\| `([^`]+)` \|", (CONFIGS / "SOURCES.md").read_text(), re.M)
    assert sorted(rows) == config_names()


def test_expected_is_from_vllm_0_33_and_covers_every_config(expected: dict) -> None:
    assert expected["vllm_version"] == "0.33.0"
    assert expected["generated_by"] == "conformance/vllm/run.sh"
    assert expected["serve"]["max_model_len"] == [2048, 32768]
    assert sorted({c["config"] for c in expected["cases"]}) == config_names()


def test_grid_is_complete_for_every_config(expected: dict) -> None:
    # Issue 22: tp {1,2,4,8} x {bf16, fp8} x block {auto, 16, 32, 64} x max_model_len {2048, 32768}
    # x budgets {12, 40} GiB, prefix caching on, and also off for every model with state layers:
    # 128 cases, 256 with state layers.
    by_config: dict[str, list[dict]] = {}
    for case in expected["cases"]:
        by_config.setdefault(case["config"], []).append(case)
    for name, cases in by_config.items():
        kinds = set(expected["configs"].get(name, {}).get("layers", {}).values())
        stateful = bool(kinds & STATE_KINDS) or any(c["is_hybrid"] for c in cases)
        for length in (2048, 32768):
            at = [c for c in cases if c["max_model_len"] == length]
            prefixes = {True, False} if stateful and any(c["status"] == "ok" for c in at) else {
                c["prefix_caching"] for c in at}
            assert prefixes >= {True}, name
            keys = {(c["tp"], c["kv_dtype"], c["block_size_requested"], c["prefix_caching"],
                     c["budget_bytes"]) for c in at}
            want = {(tp, kv, b, p, g * GIB) for tp in (1, 2, 4, 8) for kv in ("bf16", "fp8")
                    for b in ("auto", 16, 32, 64) for p in prefixes for g in (12, 40)}
            assert keys == want, (name, length)
            assert len(at) == len(want), (name, length)


def test_cases_follow_the_schema(expected: dict) -> None:
    for case in expected["cases"]:
        if case["status"] == "ok":
            assert set(case) == OK_KEYS, case["config"]
            assert case["reason"] == ""
            assert case["spec_source"] == "vllm-layers", case["config"]
        else:
            assert case["status"] in ("refused", "not_built"), case["config"]
            assert set(case) == REFUSED_KEYS, case["config"]
            assert case["reason"], case["config"]


def test_logged_tokens_are_int_of_concurrency_times_max_model_len(expected: dict) -> None:
    # vLLM 0.33 logs N = int(max_concurrency * max_model_len) (kv_cache_utils.get_kv_cache_capacity)
    # and the concurrency with two decimals.
    for case in expected["cases"]:
        if case["status"] != "ok":
            continue
        length = case["max_model_len"]
        tokens = int(case["max_concurrency"] * length)
        assert case["gpu_kv_cache_tokens"] == tokens
        assert case["log_line"] == (
            f"GPU KV cache size: {tokens:,} tokens, Maximum concurrency for {length:,} tokens "
            f"per request: {case['max_concurrency']:.2f}x"
        )


def test_issue_10_figures_are_in_expected(expected: dict) -> None:
    """The figures issue 10 quotes (tp 1, bf16, block 16, 12 GiB per rank, L 2,048), unchanged under
    vllm serve's settings: none of them has a sliding window shorter than the request plus the tokens
    in flight (gpt-oss-20b's 261,123 tokens were logged with 2,048 batched tokens and one batch in
    flight; it is not pinned here)."""

    def case(name: str, prefix: bool = True) -> dict:
        (found,) = [c for c in expected["cases"] if c["config"] == name and c["tp"] == 1
                    and c["kv_dtype"] == "bf16" and c["block_size_requested"] == 16
                    and c["max_model_len"] == 2048
                    and c["budget_bytes"] == 12 * GIB and c["prefix_caching"] is prefix]
        return found

    falcon7 = case("falcon-7b-instruct")
    assert falcon7["num_kv_heads"] == 1 and falcon7["max_concurrency"] == 768.0
    # falcon-40b: 60 layers x 8 heads x 64 x 2 (K, V) x 2 bytes = 122,880 B/token.
    falcon40 = case("falcon-40b-instruct")
    assert falcon40["page_bytes"]["full"] * 60 // 16 == 122_880
    assert falcon40["log_line"].endswith("51.20x")
    jamba_on, jamba_off = case("jamba-1.5-mini"), case("jamba-1.5-mini", prefix=False)
    assert jamba_on["layer_kinds"] == {"full": 4, "mamba": 28}
    assert jamba_on["block_size"] == 80 and jamba_on["num_groups"] == 8
    assert jamba_on["num_gpu_blocks"] == jamba_off["num_gpu_blocks"] == 9830
    assert jamba_on["max_concurrency"] == 245.75
    assert round(jamba_off["max_concurrency"], 2) == 297.88
    qnext = case("qwen3-next-80b-a3b-thinking", prefix=False)
    assert qnext["layer_kinds"] == {"full": 12, "linear": 36}
    assert (qnext["block_size"], qnext["num_groups"], qnext["num_gpu_blocks"]) == (544, 4, 963)
    assert round(qnext["max_concurrency"], 2) == 137.57
    gemma = case("gemma-3-27b-it")
    assert gemma["layer_kinds"] == {"full": 10, "sliding": 52}
    assert (gemma["num_groups"], gemma["num_gpu_blocks"]) == (7, 9830)


def test_issue_22_figures_are_in_expected(expected: dict) -> None:
    """Issue 22's table, from vLLM's own layer code: nemotron-3-nano with prefix caching on holds 3 blocks
    per Mamba-2 layer group and request (MambaMixer2.get_kv_cache_spec: one prefill-checkpoint block),
    76.92x (the mirrored harness had 111.11x); DeepSeek-V3's --block-size auto is 16 with bf16 KV
    (FLASH_ATTN_MLA) and 64 with fp8 KV (FLASHMLA)."""

    def case(name: str, kv: str = "bf16", block: object = 16, prefix: bool = True, length: int = 2048) -> dict:
        (found,) = [c for c in expected["cases"] if c["config"] == name and c["tp"] == 1
                    and c["kv_dtype"] == kv and c["block_size_requested"] == block
                    and c["max_model_len"] == length
                    and c["budget_bytes"] == 12 * GIB and c["prefix_caching"] is prefix]
        return found

    assert case("nemotron-3-nano-30b-a3b", block="auto")["log_line"].endswith("76.92x")
    assert case("deepseek-v3", block="auto")["block_size"] == 16
    assert case("deepseek-v3", block="auto")["attention_backends"] == ["FLASH_ATTN_MLA"]
    assert case("deepseek-v3", kv="fp8", block="auto")["block_size"] == 64
    assert case("deepseek-v3", kv="fp8", block="auto")["attention_backends"] == ["FLASHMLA"]

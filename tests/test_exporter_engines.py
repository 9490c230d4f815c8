"""``kvdash exporter --engine-rules sglang`` and live's (issue 27): the analytical pool sized by SGLang 0.5.23's rules
(kvdash.engines.sglang, checked on SGLang's own code in test_conformance_sglang.py), as calc's SGLang view."""

from __future__ import annotations

from tests.cli_run import run

CONFIGS = "tests/data/configs"


def _series(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not on the page")


def test_demo_pool_by_sglang_rules(capsys):
    """The demo: Llama-3.1-70B, TP 8, on 8 x H200 (143,771 MiB).  SGLang's budget 116,015,203,024 B (the worked
    figure of test_calc_sglang.py) // 40,960 B per token = 2,832,402 slots in pages of 1; 825-token requests:
    2,832,402 // 825 = 3,433 fit; contiguous 2,048-token reservations: 1,383.  The default rules keep vLLM's."""
    code, out, _ = run(["exporter", "--demo", "--once", "--engine-rules", "sglang"], capsys)
    assert code in (0, None)
    assert _series(out, "kvdash_kv_budget_bytes") == 116_015_203_024
    assert _series(out, "kvdash_kv_pool_token_slots") == 2_832_402
    assert _series(out, "kvdash_kv_block_bytes") == 40_960
    assert 'kvdash_kv_requests_fit{layout="paged",length="825"} 3433.0' in out
    assert 'kvdash_kv_requests_fit{layout="contiguous",length="825"} 1383.0' in out
    assert 'reserve="SGLang 0.5.23\'s rules (mem_fraction_static)"' in out and 'block_size="1"' in out
    code, out, _ = run(["exporter", "--demo", "--once"], capsys)
    assert _series(out, "kvdash_kv_budget_bytes") != 116_015_203_024 and 'block_size="16"' in out


def test_refusals_are_one_line(capsys):
    base = ["exporter", "--demo", "--once", "--engine-rules"]
    for extra, needle in ((["sglang", "--gpu-util", "0.9"], "--gpu-util is vLLM's"),
                          (["sglang", "--reserve", "2GiB"], "a runtime reserve is vLLM's"),
                          (["sglang", "--budget", "40GiB"], "a budget derived from the GPUs"),
                          (["sglang", "--config", f"{CONFIGS}/jamba-1.5-mini/config.json", "--weights",
                            "160GB"], "refuses this model: JambaForCausalLM has no SGlang implementation"),
                          # a pure Mamba model is planned by SGLang's rules (state slots), not one KV pool
                          (["sglang", "--config", f"{CONFIGS}/mamba-codestral-7b/config.json", "--weights",
                            "16GB", "--tp", "4"], "one pool of full-attention or MLA layers"),
                          # SGLang's plan of a hybrid is mirrored (a state pool beside the KV pool), but the
                          # exporter's analytical pool is one pool
                          (["sglang", "--config", f"{CONFIGS}/qwen3-next-80b-a3b-thinking/config.json", "--weights",
                            "160GB"], "one pool of full-attention or MLA layers"),
                          (["sglang", "--model", "gpt-oss-120b"], "one pool of full-attention or MLA layers"),
                          (["tgi"], "expected vllm, sglang")):
        code, _, err = run([*base, *extra], capsys)
        assert code == 2 and err.count("\n") == 1 and needle in err, (extra, err)


def test_live_pool_by_sglang_rules(capsys):
    """live takes the same option: the demo's pool is SGLang's (2,832,402 slots), its cap SGLang's
    max_running_requests int(2,832,402 / 131,072 x 512) = 11,064, clamped to 4,096; beside the demo's vLLM engine
    the gap is said to compare two engines' rules (no reconciling reserve)."""
    import json

    code, out, _ = run(["live", "--demo", "--once", "--json", "--engine-rules", "sglang"], capsys)
    assert code in (0, None)
    kv = json.loads(out)["kv_pool"]
    assert (kv["engine_rules"], kv["budget_bytes"], kv["token_slots"]) == ("sglang", 116_015_203_024, 2_832_402)
    assert (kv["paged_requests"], kv["max_num_seqs"], kv["running_requests"]) == (3_433, 4_096, 3_433)
    assert "two engines' rules" in kv["engine"]["explain"] and "reconciling_reserve_bytes" not in kv["engine"]
    code, out, _ = run(["live", "--demo", "--once", "--engine-rules", "sglang"], capsys)
    assert "SGLang runs at once" in out and "its max_running_requests 4,096" in out
    code, out, _ = run(["live", "--demo", "--once", "--json"], capsys)
    assert "engine_rules" not in json.loads(out)["kv_pool"]

"""``kvdash simulate --engine-rules sglang`` (issue 27): the length simulation on SGLang 0.5.23's pool (its
budget, cell and page: kvdash.engines.sglang, checked on SGLang's own code in test_conformance_sglang.py); the
scheduling stays the simulator's vLLM rules, and the output says so."""

from __future__ import annotations

import json

from tests.cli_run import run

BASE = ["simulate", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--requests", "200", "--json"]


def test_pool_is_sglangs(capsys):
    """Llama-3.1-8B (preset weights 16,060,000,000 B) on an H100 (81,559 MiB): mem_fraction_static
    round((81,559 - 13,904) / 81,559, 3) = 0.83 (13,904 MiB = 512 + 1.5 x 8,192 + 1/8 x 1,024 + 2 x 256 + 58 x 8);
    free before the weights 80,535 MiB = 84,447,068,160 B, after 68,387,068,160 B; budget
    int(68,387,068,160 - 84,447,068,160 x 0.17) = 54,031,066,572 B; cell 8 x (128 + 128) x 32 x 2 = 131,072 B;
    54,031,066,572 // 131,072 = 412,224 token slots, in pages of 1."""
    code, out, _ = run([*BASE, "--engine-rules", "sglang"], capsys)
    assert code in (0, None)
    s = json.loads(out)["setup"]
    assert (s["budget_bytes"], s["bytes_per_token"], s["capacity_slots"], s["block_size"]) == \
        (54_031_066_572, 131_072, 412_224, 1)
    assert s["engine_rules"] == "sglang" and s["sglang_pool"]["mem_fraction_static"] == 0.83
    assert "SGLang's own scheduler is not mirrored" in s["budget_notes"][-1]
    code, out, _ = run([*BASE, "--engine-rules", "sglang", "--block-size", "16"], capsys)
    s = json.loads(out)["setup"]  # --block-size is SGLang's --page-size: 412,224 floored to 16 = 412,224
    assert (s["block_size"], s["capacity_slots"]) == (16, 412_224 // 16 * 16)
    code, out, _ = run(BASE, capsys)  # the default rules: vLLM's pool, no engine keys
    s = json.loads(out)["setup"]
    assert "engine_rules" not in s and s["block_size"] == 16 and s["budget_bytes"] != 54_031_066_572


def test_refusals_are_one_line(capsys):
    model = ["simulate", "--model", "llama-3.1-8b", "--requests", "10", "--engine-rules"]
    for extra, needle in ((["sglang", "--budget", "40GiB"], "give --gpu"),
                          (["sglang", "--gpu", "h100-80gb", "--reserve", "2GiB"], "--reserve: '2GiB'"),
                          (["sglang", "--gpu", "h100-80gb", "--gpu-util", "0.9"], "--gpu-util is vLLM's"),
                          (["sglang", "--gpu", "h100-80gb", "--time"], "the length simulation only"),
                          (["tgi", "--gpu", "h100-80gb"], "expected vllm, sglang")):
        code, _, err = run([*model, *extra], capsys)
        assert code == 2 and err.count("\n") == 1 and needle in err, (extra, err)


def test_config_only_sglang_serves_is_simulated_on_sglangs_pool(capsys):
    """Ministral-3-3B-2512 (model_type ministral3), which vLLM 0.33 refuses and SGLang 0.5.23 serves: under
    --engine-rules sglang the config is read as SGLang reads it and simulated on its pool, the conformance case's
    (H100, TP 1, bf16, weights 0: 0.835 x 0.95 = 0.79325, 66,882,779,217 B // 26 x 8 x (128 + 128) x 2 B =
    106,496 B = 628,030 token slots); under vLLM's rules it is refused in vLLM's words, one line, as before."""
    config = ["simulate", "--config", "tests/data/configs/ministral-3-3b-2512/config.json", "--gpu", "h100-80gb",
              "--requests", "50", "--weights", "0", "--json"]
    code, out, _ = run([*config, "--engine-rules", "sglang"], capsys)
    assert code in (0, None)
    s = json.loads(out)["setup"]
    assert (s["budget_bytes"], s["bytes_per_token"], s["capacity_slots"]) == (66_882_779_217, 106_496, 628_030)
    code, _, err = run(config, capsys)
    assert code == 2 and err.count("\n") == 1 and "does not have `num_attention_heads` attribute" in err

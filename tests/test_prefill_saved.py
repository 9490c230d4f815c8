"""Prefill time a prefix cache saves (issue 29 item 1, "with the time model, prefill time and TTFT saved"):
each request's chunked prefill timed by the step model with and without its hit tokens."""

import json

import pytest

from kvdash.core.steptime import AttentionKind, Constants, GPUPerf, ModelCompute
from kvdash.simulate.prefill import ChunkTimer, prefill_saved
from tests.cli_run import run

# A toy rank whose terms are worked by hand: 1,000 B of weights at 1,000 B/s (1 s a step), 10 linear parameters
# (20 FLOPs a token at 100 FLOP/s: 0.2 s a token), one full attention layer of 1 head with qk 1 and v 1 (prefill:
# 2 x (1 + 1) = 4 FLOPs a query-key pair: 0.04 s a pair), 2 B of KV a token of context (read by a chunk after
# its prior tokens: 0.002 s a prior token), 0.5 s a step.
MC = ModelCompute(name="toy", tp=1, layers=1, hidden=1, dense_weight_bytes=1000.0, dense_params=10.0, moe_layers=0,
                  experts=0, top_k=0, expert_bytes=0.0, expert_params=0.0, gemm="bf16",
                  attention=(AttentionKind(count=1, q_heads=1, qk_dim=1, v_dim=1, window=0),), kv_full_bytes=2,
                  kv_window_bytes=0, window=0, state_bytes=0, dense_rates=(("bf16", 10.0),))
GPU = GPUPerf(key="toy", hbm_bytes_per_s=1000.0, flops={"bf16": 100.0}, link_bytes_per_s=0.0, source="test")
C = Constants(c_mem=1.0, c_flop=1.0, c_step=0.5, c_layer=0.0, c_allreduce=0.0, c_request=0.25)


def test_chunk_step_worked_by_hand() -> None:
    t = ChunkTimer(MC, GPU, C)
    # 4 tokens after 4: pairs 4 x 4 + 4 x 5 / 2 = 26; 1 + 0.008 (KV of 4 prior) + 0.8 + 1.04 + 0.5 = 3.348 s
    assert t.step(4, 4) == pytest.approx(3.348)
    # chunked at 4: (0, 4) 2.7 s + (4, 4) 3.348 s + (8, 2) 2.676 s (pairs 16 + 3 = 19)
    assert t.prefill(0, 10, 4) == pytest.approx(2.7 + 3.348 + 2.676)


def test_a_chunk_step_runs_the_lm_head_once() -> None:
    """The toy with 4 of its 10 linear parameters an LM head: features() counts them for every token (8 FLOPs a
    token), a chunk samples only its last token, so a 4-token chunk saves 3 x 8 / 100 = 0.24 s (3.348 -> 3.108 s),
    a 1-token chunk nothing (vLLM's logits_indices: one row a scheduled request)."""
    from dataclasses import replace

    head = ChunkTimer(replace(MC, lm_head_params=4.0), GPU, C)
    assert head.step(4, 4) == pytest.approx(3.348 - 0.24)
    assert head.step(7, 1) == pytest.approx(ChunkTimer(MC, GPU, C).step(7, 1))


def test_prefill_saved_worked_by_hand() -> None:
    t = ChunkTimer(MC, GPU, C)
    # request 1: prompt 10, 4 tokens hit (loaded in 0.1 s): with 3.348 + 2.676 = 6.024 s, without 8.724 s
    # request 2: prompt 8, all 8 cached: vLLM computes the last token (max_cache_hit_length = num_tokens - 1):
    #            one step (7, 1): pairs 7 + 1 = 8, 1 + 0.014 + 0.2 + 0.32 + 0.5 = 2.034 s; without: (0, 4) 2.7 s
    #            + (4, 4) 3.348 s = 6.048 s
    # request 3: skipped (-1): left out
    r = prefill_saved(t, [10, 8, 5], [4, 8, -1], 4, [0.1, 0.0, 0.0])
    assert r.requests == 2
    assert r.computed_tokens == 6 + 1 and r.prompt_tokens == 18
    assert r.with_cache_s == pytest.approx(6.024 + 2.034)
    assert r.without_cache_s == pytest.approx(8.724 + 6.048)
    assert r.saved_s == pytest.approx(2.7 + 4.014)
    assert r.load_s == pytest.approx(0.1)
    # TTFT adds 0.25 s outside the steps; with the cache also the 0.1 s load: request 1 6.374 s, request 2 2.284 s
    assert r.ttft_with_ms["mean"] == pytest.approx((6374 + 2284) / 2, abs=1e-3)
    assert r.ttft_without_ms["mean"] == pytest.approx((8974 + 6298) / 2, abs=1e-3)
    # saved per request: 2.7 - 0.1 = 2.6 s and 4.014 s
    assert r.saved_ms["mean"] == pytest.approx((2600 + 4014) / 2, abs=1e-3)


def test_no_hits_save_nothing() -> None:
    t = ChunkTimer(MC, GPU, C)
    r = prefill_saved(t, [10, 3], [0, 0], 4)
    assert r.saved_s == 0 and r.with_cache_s == r.without_cache_s


def test_cli_time_reports_prefill_saved(capsys) -> None:
    code, stdout, err = run(["simulate", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--prefix-workload",
                             "system-prompts:2,2048,256,64,200", "--time", "--json"], capsys)
    assert code == 0, err
    out = json.loads(stdout)
    pt = out["prefill_time"]
    assert pt["requests"] == 200
    assert 0 < pt["prefill_s_with_cache"] < pt["prefill_s_without_cache"]
    # the hits are the shared system prompts: the computed tokens are the prompt tokens the replay did not hit
    assert pt["computed_tokens"] == out["result"]["prompt_tokens"] - out["result"]["hit_tokens"]
    assert pt["max_num_batched_tokens"] == 8192  # vLLM 0.33's default on an 80 GB Hopper (vllm serve)


def test_cli_time_without_gpu_is_one_line(capsys) -> None:
    code, _, err = run(["simulate", "--model", "llama-3.1-8b", "--prefix-workload", "system-prompts:2,2048,256,64,20",
                        "--time"], capsys)
    assert code == 2
    assert "--gpu" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_cli_slo_refused_on_a_prefix_replay(capsys) -> None:
    code, _, err = run(["simulate", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--prefix-workload",
                        "system-prompts:2,2048,256,64,20", "--slo", "ttft=2s"], capsys)
    assert code == 2 and "--slo" in err

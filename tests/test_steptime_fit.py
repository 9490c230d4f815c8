"""Issue 28: what the validation script assumes of each measured row's checkpoint (benchmarks/steptime_fit.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.steptime_fit import DATA, checkpoint_kv_dtype, formats
from kvdash.core.model import from_hf_config
from kvdash.core.steptime import WEIGHT_BYTES, model_compute

MODELS = Path(DATA) / "models"


def _cfg(name: str) -> dict:
    return json.loads((MODELS / name / "config.json").read_text())


def _row(model: str, quant: str, precision: str, tp: int = 1) -> dict[str, str]:
    return {"model_path": model, "gemm_quant_mode": quant, "moe_quant_mode": quant, "precision": precision,
            "system": "b200_sxm", "tp_size": str(tp), "attention_dp_size": "1", "moe_tp_size": str(tp),
            "moe_ep_size": "1", "pp_size": "1", "isl": "8192", "osl": "1024", "batch_size": "32"}


@pytest.mark.parametrize(("name", "kv"), [
    ("kimi-k2.5-nvfp4", "fp8"),  # ModelOpt: kv_cache_scheme {dynamic: false, num_bits: 8, type: float}
    ("minimax-m2.5-nvfp4", "fp8"),
    ("kimi-k2.5", None),  # compressed-tensors int4, kv_cache_scheme null
    ("minimax-m2.5", None),  # quant_method fp8 (weights only): no KV scheme
    ("qwen3-235b-a22b-fp8", None),
    ("gpt-oss-120b", None),  # mxfp4 experts only
])
def test_checkpoint_kv_dtype_as_vllm_resolves_auto(name, kv):
    """vLLM 0.33 resolve_kv_cache_dtype_string (vllm/utils/torch_utils.py): --kv-cache-dtype auto becomes fp8
    for a ModelOpt checkpoint declaring an 8-bit static float KV scheme, and stays the model dtype otherwise."""
    assert checkpoint_kv_dtype(_cfg(name)) == kv


def test_checkpoint_kv_dtype_other_spellings():
    """The hf_quant_config spelling (kv_cache_quant_algo "FP8") is fp8; a dynamic ModelOpt scheme is not
    recognised (vLLM falls back to auto); a compressed-tensors scheme makes the cache fp8 (Attention.__init__)."""
    assert checkpoint_kv_dtype({"quantization_config": {"quant_method": "modelopt",
                                                        "quantization": {"kv_cache_quant_algo": "FP8"}}}) == "fp8"
    dynamic = {"dynamic": True, "num_bits": 8, "type": "float"}
    modelopt_dynamic = {"quantization_config": {"quant_method": "modelopt", "kv_cache_scheme": dynamic}}
    assert checkpoint_kv_dtype(modelopt_dynamic) is None
    assert checkpoint_kv_dtype({"quantization_config": {"quant_method": "compressed-tensors",
                                                        "kv_cache_scheme": dynamic}}) == "fp8"


def test_nvfp4_rows_run_nvidias_checkpoint():
    """MiniMax-M2.5 and Kimi-K2.5 nvfp4 rows: NVFP4 weights, fp8 KV (declared), attention bf16 (the checkpoints
    list self_attn in their quantization ignore); the fp8 and int4 rows keep their own checkpoint's rules."""
    assert formats(_row("MiniMaxAI/MiniMax-M2.5", "nvfp4", "fp4")) == ("nvfp4", "nvfp4", "fp8", "bf16")
    assert formats(_row("moonshotai/Kimi-K2.5", "nvfp4", "fp4")) == ("nvfp4", "nvfp4", "fp8", "bf16")
    assert formats(_row("moonshotai/Kimi-K2.5", "int4_wo", "int4")) == ("bf16", "int4_wo", "bf16", "bf16")
    assert formats(_row("MiniMaxAI/MiniMax-M2.5", "fp8", "fp8")) == ("fp8", "fp8", "fp8", "fp8")


def test_attention_weights_read_at_their_own_format():
    """MiniMax-M2.5: 62 layers x (3,072 x (6,144 + 2 x 1,024) q/k/v + 6,144 x 3,072 o) = 2,730,491,904 attention
    parameters; at bf16 rather than NVFP4 each step reads 2,730,491,904 x (2 - 0.5625) B more on one GPU."""
    cfg = _cfg("minimax-m2.5")
    arch = from_hf_config(cfg, name="minimax-m2.5")
    fp4 = model_compute(cfg, arch, 1, "nvfp4", "nvfp4", "fp8")
    mixed = model_compute(cfg, arch, 1, "nvfp4", "nvfp4", "fp8", attention_weights="bf16")
    extra = 2_730_491_904 * (2 - WEIGHT_BYTES["nvfp4"])
    assert mixed.dense_weight_bytes - fp4.dense_weight_bytes == pytest.approx(extra)
    assert mixed.weights_per_rank - fp4.weights_per_rank == pytest.approx(2_730_491_904 * 1.4375, abs=1)



def test_gemm_rates_follow_each_weights_format():
    """vLLM 0.33 runs gpt-oss's MXFP4 experts with bf16 activations (_get_priority_backends_for_gpt_oss:
    FLASHINFER_TRTLLM_MXFP4_BF16 on SM100, TRITON on Hopper), so on an H100 (989 TFLOP/s bf16) 64 tokens'
    expert FLOPs are 2 x 64 x 36 layers x 4 experts x 3 x 2,880 x 2,880 = 458,647,142,400 at the bf16 rate,
    beside the bf16 dense weights (attention, router, LM head), not at the fp8 rate the GPU has for fp4.  (The
    H100 has a measured kernel model for these experts, which takes their roofline terms as its inputs: the
    compute term keeps the dense GEMMs, and moe_layer_terms holds the experts'.)"""
    from kvdash.core.steptime import features, gpu_perf, moe_layer_terms

    cfg = _cfg("gpt-oss-120b")
    mc = model_compute(cfg, from_hf_config(cfg, "gpt-oss-120b"), 1, "bf16", "mxfp4")
    assert mc.gemm == "bf16" and [k for k, _ in mc.dense_rates] == ["bf16"]
    g = gpu_perf("h100-80gb")
    comp = features(mc, g, 64, 0.0, 0.0, 0.0)[1]
    assert comp == pytest.approx(2 * 64 * mc.dense_params / 989e12)
    assert 36 * moe_layer_terms(mc, g, 64)[1] == pytest.approx(458_647_142_400 / 989e12)


def test_nvfp4_attention_gemms_at_the_bf16_rate():
    """MiniMax-M2.5 on NVIDIA's NVFP4 checkpoint, one GPU: the 2,730,491,904 attention parameters run at the bf16
    rate; the router (62 x 3,072 x 256 = 48,758,784) and LM head (200,064 x 3,072 = 614,596,608) at the dense
    weights' (fp4); the routed experts at fp4."""
    cfg = _cfg("minimax-m2.5")
    mc = model_compute(cfg, from_hf_config(cfg, "minimax-m2.5"), 1, "nvfp4", "nvfp4", "fp8", attention_weights="bf16")
    assert mc.dense_rates == (("bf16", 2_730_491_904.0), ("fp4", 48_758_784.0 + 614_596_608.0))
    assert mc.gemm == "fp4"


def test_routed_experts_move_their_activations():
    """MiniMax-M2.5 (62 MoE layers, hidden 3,072, experts of width 1,536, 8 per token): vLLM 0.33's
    fused_experts_impl reads a token's row for each of its 8 experts, writes and reads intermediate_cache1 (2 x
    1,536 / tp), writes and reads intermediate_cache2 (1,536 / tp), and writes 8 partial outputs that moe_sum
    reads back: 62 x 8 x 2 B x (3 x 3,072 + 6 x 1,536 / tp) per token, 18,284,544 B on one GPU, 11,427,840 on
    each of 4; a step of T tokens reads T times that more; a dense model moves none in this term.  (On the
    B200 a measured kernel model takes these roofline terms, moe_layer_terms, as its inputs.)"""
    from kvdash.core.steptime import gpu_perf, moe_layer_terms

    cfg = _cfg("minimax-m2.5")
    arch = from_hf_config(cfg, name="minimax-m2.5")
    one, four = (model_compute(cfg, arch, tp, "fp8", "fp8", "fp8") for tp in (1, 4))
    assert (one.act_bytes, four.act_bytes) == (18_284_544, 11_427_840)
    g = gpu_perf("b200")
    step = 62 * (moe_layer_terms(four, g, 100)[0] - moe_layer_terms(four, g, 99)[0])
    touched = four.moe_layers * (four.touched_experts(100) - four.touched_experts(99)) * four.expert_bytes
    assert step * g.hbm_bytes_per_s == pytest.approx(touched + 11_427_840)
    dense = _cfg("qwen3-32b")
    assert model_compute(dense, from_hf_config(dense, name="qwen3-32b"), 2, "bf16").act_bytes == 0


def test_tpot_floor_of_a_row_that_must_run_its_users_together():
    """Rule (tpot_floor): where the pool holds every user at full length and max_num_seqs admits them all, a
    decode step reads at least the dense weights, top-k experts a MoE layer and every user's KV at isl + osl / 2
    tokens, at no more than the datasheet bandwidth.  gpt-oss-120b, TP 8 on H100 (3.35 TB/s), 1,024 / 8,192, 512
    users, bf16 KV: one KV head of 64 a rank, 18 full layers x 2 x 64 x 2 B = 4,608 B a token of context and 18
    sliding ones the same for at most 128 tokens, so 4,608 x (5,120 + 128) = 24,182,784 B a user; 36 layers x 4
    experts x 3 x 2,880^2 x 0.53125 B / 8 = 237,945,600 B of experts.  The measured 3.57 ms is under the floor
    (3.88 ms); at TP 2 with 8,192 / 1,024 the pool holds 218 full requests, fewer than 512, so no floor."""
    from benchmarks.steptime_fit import setup, tpot_floor

    row = {"model_path": "openai/gpt-oss-120b", "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4",
           "precision": "fp4", "system": "h100_sxm", "tp_size": "8", "attention_dp_size": "1", "moe_tp_size": "8",
           "moe_ep_size": "1", "pp_size": "1", "isl": "1024", "osl": "8192", "batch_size": "512"}
    mc = setup(row)["mc"]
    floor = tpot_floor(row)
    assert floor == pytest.approx((mc.dense_weight_bytes + 237_945_600 + 512 * 24_182_784) / 3.35e12)
    assert 3.5714e-3 < floor < 3.9e-3
    assert tpot_floor({**row, "tp_size": "2", "moe_tp_size": "2", "isl": "8192", "osl": "1024"}) is None


def test_fit_splits_the_compute_term_by_gpu_generation():
    """Rule (by_generation, predict): a row's six simulated features (memory s, compute s, 1, layers, all-reduces,
    fixed s) become seven, the compute seconds in the Hopper column or, on a Blackwell (B200, B300), the Blackwell
    one; predict() with the fit's seven constants (c_mem, c_flop, c_step, c_layer, c_allreduce, c_flop_blackwell,
    c_request) then gives exactly what the running code gives with the GPU's own constants
    (step_seconds(f, Constants.on(gpu)))."""
    import numpy as np

    from benchmarks.steptime_fit import blackwell, by_generation, predict
    from kvdash.core.steptime import Constants, step_seconds

    f = np.array([0.004, 0.002, 1.0, 80.0, 160.0, 0.0005])
    c7 = np.array([1.25, 1.0, 0.0, 36e-6, 18e-6, 1.8, 0.02])
    c = Constants(c_mem=1.25, c_flop=1.0, c_step=0.0, c_layer=36e-6, c_allreduce=18e-6, c_request=0.02,
                  c_flop_blackwell=1.8)
    for system, gpu, bw in (("h100_sxm", "h100-80gb", False), ("h200_sxm", "h200", False), ("b200_sxm", "b200", True),
                            ("b300_sxm", "b300", True)):
        row = {"system": system}
        assert blackwell(row) is bw
        g = by_generation(f, row)
        assert (g[1], g[5]) == ((0.0, 0.002) if bw else (0.002, 0.0))
        assert predict(g, c7) == pytest.approx(step_seconds(tuple(f), c.on(gpu)))
        assert predict(g, c7, ttft=True) == pytest.approx(step_seconds(tuple(f), c.on(gpu)) + 0.02)
    # on() applied twice gives the second GPU's constants, not the first one's
    assert c.on("b200").on("h200").c_flop == 1.0 and c.on("h200").on("b300").c_flop == 1.8


def test_users_in_step_fill_a_pool_that_users_spread_out_do_not():
    """Rule (simulate_row's phase spread, SPREAD_GRID): Llama-3.1-70B fp8 on one H200, 1,024 + 8,192 tokens: the
    pool holds 38 full requests.  64 users with their phases spread over a whole request sit at about 1,024 +
    4,096 tokens each on average (64 x 5,120 = 327,680 tokens, within 38 x 9,216 = 350,208): no preemption.
    Spread over 0.4 of a request they reach 9,216 nearly together (64 x 9,216 = 589,824 tokens): the pool preempts,
    as the measured run's cliff at 64 users (TTFT 474 ms at 32, 5,323 ms at 64) says it did; 32 users fit either
    way (32 x 9,216 = 294,912)."""
    from benchmarks.steptime_fit import simulate_row

    row = {"model_path": "meta-llama/Llama-3.1-70B", "gemm_quant_mode": "fp8", "moe_quant_mode": "fp8",
           "precision": "fp8", "system": "h200_sxm", "tp_size": "1", "attention_dp_size": "1", "moe_tp_size": "1",
           "moe_ep_size": "1", "pp_size": "1", "isl": "1024", "osl": "8192", "batch_size": "64"}
    spread_out = simulate_row(row, 3, 1.0)
    assert spread_out["capacity"] == 38 and spread_out["preemptions"] == 0
    assert simulate_row(row, 3, 0.4)["preemptions"] > 0
    assert simulate_row({**row, "batch_size": "32"}, 3, 0.4)["preemptions"] == 0


def test_cliff_counts():
    """Rule (cliff_counts, which best_pair ranks the calibration rows by): a cliff is a TTFT jump of 5x or more
    between consecutive concurrencies of one series.  Measured 100, 120, 900 ms at 16, 32, 64 users (a 7.5x jump
    at 64) against predicted 100, 130, 140 ms: 1 measured, 0 hit, 0 false; predicted 100, 110, 600 ms: hit."""
    import numpy as np

    from benchmarks.steptime_fit import cliff_counts

    by_id, sims = {}, {}
    coef = np.zeros(7)
    for users, measured, predicted, predicted_b in ((16, 100, 100, 100), (32, 120, 130, 110), (64, 900, 140, 600)):
        rid = f"r{users}"
        by_id[rid] = {"model_path": "m", "system": "h100_sxm", "backend_version": "", "gemm_quant_mode": "fp8",
                      "tp_size": "1", "attention_dp_size": "", "moe_ep_size": "1", "isl": "1024", "osl": "8192",
                      "batch_size": str(users), "silicon_ttft_ms": str(measured)}
        # features whose prediction is exactly the fixed seconds (constants all 0)
        sims[rid] = {"ttft_f": np.array([0, 0, 0, 0, 0, 0, predicted / 1000]), "b": predicted_b}
    assert cliff_counts(list(by_id), by_id, sims, coef) == (1, 0, 0)
    for rid in sims:
        sims[rid]["ttft_f"] = np.array([0, 0, 0, 0, 0, 0, sims[rid]["b"] / 1000])
    assert cliff_counts(list(by_id), by_id, sims, coef) == (1, 1, 0)


def test_the_pair_predicting_the_calibration_cliffs_wins_over_a_lower_ttft_error():
    """Rule (pair_rank, best_pair's order): cliffs missed + false first, TTFT MAPE next, the wider spread last.
    The last fit's scan: spread 0.6 had the lowest calibration TTFT MAPE (25.5 %) but predicted 6 of 8 cliffs;
    0.4 predicted 7 of 8 at 25.8 % and was chosen; 0.2 predicted 7 of 8 at 26.4 %; a pair with a false cliff
    (7 of 8 hit, 1 false) ranks with one that misses two."""
    from benchmarks.steptime_fit import pair_rank

    scan = [(0.6, 1 / 6, 12.5, 25.5, 8, 6, 0), (0.4, 1 / 6, 12.4, 25.8, 8, 7, 0), (0.2, 1 / 6, 12.4, 26.4, 8, 7, 0)]
    assert min(scan, key=pair_rank)[0] == 0.4
    assert pair_rank((0.2, 0.0, 12.0, 20.0, 8, 7, 1))[0] == pair_rank((0.6, 1 / 6, 12.5, 25.5, 8, 6, 0))[0] == 2
    # equal cliffs and TTFT: the wider spread, then the smaller share
    assert min([(0.4, 0.2, 0, 25.0, 8, 7, 0), (0.8, 0.2, 0, 25.0, 8, 7, 0), (0.8, 0.1, 0, 25.0, 8, 7, 0)],
               key=pair_rank)[:2] == (0.8, 0.1)


def test_in_flight_is_littles_law_on_the_rows_own_figures():
    """Rule (in_flight): a closed loop's user spends TTFT + (osl - 1) x TPOT a request, (osl - 1) x TPOT of it
    decoding, so users x decode / (TTFT + decode) requests decode together on average.  512 users, osl 1,024,
    TPOT 5 ms, TTFT 20,460 ms: decode 1,023 x 5 = 5,115 ms, 512 x 5,115 / 25,575 = 102.4.  With no wait (TTFT 0)
    every user decodes: 512."""
    from benchmarks.steptime_fit import in_flight

    row = {"batch_size": "512", "osl": "1024", "silicon_tpot_ms": "5", "silicon_ttft_ms": "20460"}
    assert in_flight(row) == pytest.approx(102.4)
    assert in_flight({**row, "silicon_ttft_ms": "0"}) == pytest.approx(512)


def test_the_mxfp8_what_if_fits_its_kernel_as_moe_kernels_does():
    """Rule (gpt_oss_mxfp8.fit_kernel = moe_kernels.fit): a_s + b x memory s + c x compute s, fitted on every shape
    but the validation models' (held out where 20 others remain).  24 points made from a_s 20 us, b 1.2, c 1.5 give
    those back exactly; the held-out gpt-oss-120b point, its time doubled, is off by 50 % (the model predicts half
    of it) and does not move the fit."""
    import numpy as np
    import polars as pl

    from benchmarks.gpt_oss_mxfp8 import fit_kernel

    rng = np.random.default_rng(1)
    mem = rng.uniform(1e-5, 1e-3, 25)
    cmp = rng.uniform(1e-6, 2e-3, 25)
    t = 20e-6 + 1.2 * mem + 1.5 * cmp
    t[-1] *= 2
    d = pl.DataFrame({"mem": mem, "cmp": cmp, "seconds": t, "held_out": [""] * 24 + ["gpt-oss-120b"]})
    coef, fit_mape, held_mape = fit_kernel(d)
    assert coef == pytest.approx([20e-6, 1.2, 1.5], rel=1e-6)
    assert fit_mape == pytest.approx(0, abs=1e-6)
    assert held_mape == pytest.approx(50)


def test_a_cache_that_is_not_one_is_simulated_again(tmp_path, capsys):
    """Rule (steptime_fit.load_cache, shared by gpt_oss_mxfp8.py): a --cache file that is not JSON, not a cache or
    of another CACHE_VERSION gives no simulations and one line on stderr, not a traceback; a current one gives its
    simulations by spread."""
    import json

    from benchmarks.steptime_fit import CACHE_VERSION, load_cache

    bad = tmp_path / "c.json"
    for text in ("garbage", "[1, 2]", json.dumps({"version": CACHE_VERSION}), json.dumps({"version": -1})):
        bad.write_text(text)
        assert load_cache(bad) == {}
        assert str(bad) in capsys.readouterr().err
    bad.write_text(json.dumps({"version": CACHE_VERSION, "by_spread": {"0.4": {"r": {"capacity": 3}}}}))
    assert load_cache(bad) == {"0.4": {"r": {"capacity": 3}}}
    assert load_cache(tmp_path / "missing.json") == {}


def test_version_pairs_measure_the_datas_own_repeatability():
    """Rule (version_pairs, figures, differ, blind_floor): one configuration measured under two engine versions is
    one pair (a version's repeated rows averaged), and how far its figures differ is |a - b| / ((a + b) / 2).  The
    shipped rows hold 54 such pairs.  MiniMax-M2.5 NVFP4, TP 4 on B200, 8,192 / 1,024 tokens, 256 users: vLLM
    0.19.0 measured TTFT 1,393.84 ms, the nightly 9,496.30 ms (twice, the same figure), so they differ by 8,102.46 /
    5,445.07 = 148.8 %, while their TPOT (44.25 and 43.84 ms) differ by 0.9 %.  One prediction p for measurements 1
    and 3 errs |p - 1| / 1 + |p - 3| / 3 over two, least at p = 1: (0 + 2 / 3) / 2 = 1 / 3 = |1 - 3| / (2 x 3)."""
    import csv

    from benchmarks.steptime_fit import (
        DATA,
        blind_floor,
        differ,
        figures,
        repeat_pairs,
        repeatability_table,
        version_key,
        version_pairs,
    )

    with (DATA / "silicon_vllm_agg.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    pairs = version_pairs(rows)
    assert len(pairs) == 54
    assert all(version_key(a[0]["backend_version"]) < version_key(b[0]["backend_version"]) for a, b in pairs)
    assert sorted(["nightly-5b8c", "0.19.0", "0.9.0", "0.17.0"], key=version_key) == [
        "0.9.0", "0.17.0", "0.19.0", "nightly-5b8c"]
    older, newer = next((a, b) for a, b in pairs if a[0]["id"] == "minimaxm2_5_b200_vllm_fp4_agg_8192x1024_c256_cfg702")
    assert newer[0]["backend_version"].startswith("nightly") and len(newer) == 2
    (t_a, f_a), (t_b, f_b) = figures(older), figures(newer)
    assert f_b == pytest.approx(9496.30, abs=0.01)
    assert differ(f_a, f_b) == pytest.approx(1.488, abs=5e-4)
    assert differ(t_a, t_b) == pytest.approx(0.0091, abs=5e-4)
    assert differ(3.0, 1.0) == pytest.approx(1.0)  # |3 - 1| / 2
    assert blind_floor(1.0, 3.0) == pytest.approx(1 / 3)
    assert figures([{"silicon_tpot_ms": "10", "silicon_ttft_ms": "100"},
                    {"silicon_tpot_ms": "20", "silicon_ttft_ms": "300"}]) == (15.0, 200.0)
    assert all(a["backend_version"] == b["backend_version"] and a["id"] != b["id"] for a, b in repeat_pairs(rows))
    table = repeatability_table(rows)
    # every pair's means, as the table gives them (a version's repeats averaged first)
    assert table[-2] == "| **all** |  | 54 | **8.6** / 5.6 | **22.6** / 10.6 | 4.0 / 8.9 |"
    assert table[-1].startswith("| repeats within one version (every two rows) | the same | 478 |")


def test_readings_spread_a_segment_over_its_steps_and_wait_for_the_slowest_rank():
    """Rule (steptime_readings.step_times, lockstep): a segment of k steps (its step feature sums to k) lasts
    features . constants, spread evenly over its k steps; ranks in lockstep wait for the slowest each step.  One
    prefill step of 10 ms, then 3 decode steps of 24 ms together: steps [10, 8, 8, 8] ms, 1 and 4 steps done at the
    segments' ends.  Ranks of [1, 1, 5] and [2, 2] ms: steps [2, 2, 5], so the clock reads 0, 2, 4, 9 ms.  A
    segment of time without a step (an idle Poisson gap) is refused."""
    import numpy as np

    from benchmarks.steptime_readings import lockstep, step_times

    c6 = np.array([1.0, 1.0, 0.0, 0.0, 0.0, 1.0])  # memory s + compute s + fixed s
    cum = np.cumsum(np.array([[0, 0, 0, 0, 0, 0], [0.004, 0.006, 1, 80, 0, 0], [0.018, 0, 3, 240, 0, 0.006]]), axis=0)
    t, ends = step_times(cum, c6)
    assert t == pytest.approx([0.010, 0.008, 0.008, 0.008])
    assert ends.tolist() == [0, 1, 4]
    assert lockstep([np.array([1.0, 1.0, 5.0]), np.array([2.0, 2.0])]) == pytest.approx([0, 2, 4, 9])
    with pytest.raises(ValueError, match="closed loops only"):
        step_times(np.cumsum(np.array([[0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0.5]]), axis=0), c6)


def test_dp_ranks_alone_are_the_time_models_own_rank():
    """The lockstep reading's ranks, each on its own clock, give the TPOT the time model gives the row (its users
    dealt round robin over the two ranks, their phases spread as steptime_fit spreads one rank's): MiniMax-M2.5
    fp8, TP 2 x DP 2 on B200, 1,024 / 1,024 tokens, batch_size 16 (a rank's): 32 users, 16 a rank.  A rank's
    clock read at its segments' ends is its schedule's own time (cum . constants), so rank_seconds reads the
    clock where the simulator ended each segment; two ranks alike in lockstep are that clock too.  In lockstep no
    step is shorter."""
    import csv

    import numpy as np

    from benchmarks import steptime_fit as sf
    from benchmarks.steptime_readings import dp_rank_loops, dp_times, lockstep, row_coef, step_times

    with (sf.DATA / "silicon_vllm_agg.csv").open() as fh:
        row = next(r for r in csv.DictReader(fh) if r["model_path"] == "MiniMaxAI/MiniMax-M2.5"
                   and r["system"] == "b200_sxm" and r["tp_size"] == "2" and r["moe_ep_size"] == "4"
                   and r["moe_quant_mode"] == "fp8" and r["isl"] == "1024" and r["osl"] == "1024"
                   and r["batch_size"] == "16")
    assert sf.setup(row)["dp"] == 2
    coef = np.array([1.239, 1.0, 0.0, 46.87e-6, 14.45e-6, 1.889, 18.15e-3])
    sched = dp_rank_loops(row, 4, 0.4)[0][0]
    t, ends = step_times(sched.cum, row_coef(coef, row))
    assert lockstep([t, t])[ends] == pytest.approx(sched.cum @ row_coef(coef, row), rel=1e-9, abs=1e-12)
    got = dp_times(row, coef, 4, 0.4)
    model = sf.predict(sf.by_generation(sf.simulate_row(row, 4, 0.4)["tpot_f"], row), coef)
    assert got["alone"][1] == pytest.approx(model, rel=2e-3)
    assert got["lockstep"][1] >= got["alone"][1]
    assert got["lockstep"][0] >= got["alone"][0] - 1e-12
    # one rank (no attention DP): nothing to wait for, lockstep is the rank alone, to the last bit
    one = {**row, "tp_size": "4", "attention_dp_size": "1", "moe_tp_size": "4", "moe_ep_size": "1"}
    assert sf.setup(one)["dp"] == 1
    solo = dp_times(one, coef, 4, 0.4)
    assert solo["lockstep"] == solo["alone"]


def test_lockstep_seconds_come_back_through_the_fits_predict():
    """Rule (steptime_readings.with_seconds): the lockstep reading puts a DP row's seconds in the fixed feature
    column, which no constant scales, so steptime_fit.predict gives back the TPOT (12 ms) and the TTFT as the fit
    mixes it: 5/6 of the steady 300 ms + 1/6 of the row's own round in step (here 0.6 s of fixed seconds) +
    c_request 18 ms = 250 + 100 + 18 = 368 ms."""
    import numpy as np

    from benchmarks import steptime_fit as sf
    from benchmarks.steptime_readings import with_seconds

    coef = np.array([1.239, 1.0, 0.0, 46.87e-6, 14.45e-6, 1.889, 0.018])
    sim = {"tpot_f": np.ones(7), "ttft_f": np.ones(7), "ttft_burst_f": np.append(np.zeros(6), 0.6)}
    s = with_seconds(sim, 0.300, 0.012, 1 / 6)
    assert sf.predict(s["tpot_f"], coef) == pytest.approx(0.012)
    assert sf.predict(s["ttft_f"], coef, True) == pytest.approx(0.368)
    assert sim["tpot_f"].tolist() == [1.0] * 7  # the cached simulation is left as it was


def test_phases_spread_users_evenly_and_deal_them_round_robin():
    """Rule (steptime_fit.phases): user u's first request stops after 1 - s + s (u + 1) / users of its output.
    Four users at spread 0.4: 0.7, 0.8, 0.9, 1.0.  Two DP ranks of two users each take those four round robin:
    rank 0 the 1st and 3rd (0.7, 0.9), rank 1 the 2nd and 4th (0.8, 1.0)."""
    import numpy as np

    from benchmarks.steptime_fit import phases

    assert phases(4, 0.4) == pytest.approx([0.7, 0.8, 0.9, 1.0])
    assert np.concatenate([phases(2, 0.4, 2, 0), phases(2, 0.4, 2, 1)]) == pytest.approx([0.7, 0.9, 0.8, 1.0])


def test_request_features_measure_from_arrival_to_first_and_last_token():
    """Rule (steptime_fit.request_features): TTFT is the features summed from the request's arrival (the end of
    segment arrival_seg; -1: time 0) to its first token's segment; TPOT those from the first token to the last over
    output - 1.  Steps of 1, 2, 4, 8 (one feature column): request 0 arrives at 0, first token after segment 2,
    last after 4, output 3: TTFT 3, TPOT (15 - 3) / 2 = 6; request 1 arrives at the end of segment 1, first token
    after 3, last after 4, output 4: TTFT 7 - 1 = 6, TPOT (15 - 7) / 3."""
    from types import SimpleNamespace

    import numpy as np

    from benchmarks.steptime_fit import request_features

    cum = np.array([[0.0], [1.0], [3.0], [7.0], [15.0]])
    sched = SimpleNamespace(cum=cum, arrival_seg=np.array([-1, 1]), first_seg=np.array([2, 3]),
                            finish_seg=np.array([4, 4]))
    ttft, tpot = request_features(sched, np.array([3, 4]))
    assert ttft[:, 0] == pytest.approx([3.0, 6.0])
    assert tpot[:, 0] == pytest.approx([6.0, 8 / 3])


@pytest.mark.parametrize("script", ["steptime_fit.py", "steptime_readings.py"])
def test_the_fit_scripts_refuse_no_requests_a_user_in_one_line(script):
    """--requests-per-user 0 ended in a numpy matmul traceback (no request simulated); now one line, exit 2."""
    import subprocess
    import sys

    from benchmarks.steptime_fit import ROOT

    args = ["dp-lockstep"] if script == "steptime_readings.py" else []
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args, "--requests-per-user", "0"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].endswith("--requests-per-user 0: at least 1")
    assert "Traceback" not in proc.stderr


def _measured(rid: str) -> dict[str, str]:
    import csv

    with (Path(DATA) / "silicon_vllm_agg.csv").open() as fh:
        return next(r for r in csv.DictReader(fh) if r["id"] == rid)


def test_users_count_every_attention_dp_rank():
    """Rule (users, rank_users): aiconfigurator's batch_size is one attention data-parallel rank's batch (its
    estimator: concurrency = batch_size x attention_dp_size), and the measured rows' ids name the total:
    ``..._8192x1024_c64_tp4_ep4_1359`` has batch_size 16 and attention_dp_size 4, so 64 users, 16 on each of the 4
    ranks (the fit used to put 16 / 4 = 4 on a rank).  A Qwen3-235B row with attention_dp_size empty but its
    experts over 2 GPUs at TP 1 (``..._1000x100_c8_tp1_epnone_2``, batch_size 8): 8 users, 4 on each of setup's 2
    ranks.  Over the whole file, every id's ``_c<N>_`` is users()."""
    import csv
    import re

    from benchmarks.steptime_fit import rank_users, setup, users

    dp4 = _measured("2026_04_06_minimax_m2_5_h100_sxm_vllm_fp8_agg_8192x1024_c64_tp4_ep4_1359")
    assert (dp4["batch_size"], dp4["attention_dp_size"], users(dp4), rank_users(dp4, setup(dp4)["dp"])) == (
        "16", "4", 64, 16)
    qwen = _measured("qwen_qwen3_235b_a22b_fp8_qwen_qwen3_235b_a22b_fp8_h200_sxm_vllm_agg_1000x100_c8_tp1_epnone_2")
    assert (users(qwen), setup(qwen)["dp"], rank_users(qwen, 2)) == (8, 2, 4)
    with (Path(DATA) / "silicon_vllm_agg.csv").open() as fh:
        named = [(int(m[1]), users(r)) for r in csv.DictReader(fh) if (m := re.search(r"_c(\d+)_", r["id"]))]
    assert len(named) == 1325 and all(c == u for c, u in named)


def test_dp_twins_are_the_same_run_without_attention_dp_at_the_same_users():
    """Rule (dp_twins, as_twins): an attention-DP row's twins are the rows of its model, GPU, engine version,
    formats, TP and lengths without attention DP at the same total users.  MiniMax-M2.5 fp8 on B200, vLLM 0.19.0,
    TP 2 x DP 2 (EP 4), 1,024 / 1,024, batch_size 32 (64 users): six TP 2 rows at 64 users (EP 1 and 2), TPOT
    22.25 to 22.34 ms against the row's 22.40 (differ 0.4 %).  The TP 2 x DP 2 row at 1,024 users has no twin.
    as_twins gives the row the mean of its twins' features: two twins with fixed seconds 0.010 and 0.014 give
    0.012."""
    import csv

    import numpy as np

    from benchmarks.steptime_fit import as_twins, differ, dp_twins, figures

    with (Path(DATA) / "silicon_vllm_agg.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    twins = dict((r["id"], tw) for r, tw in dp_twins(rows))
    tw = twins["minimaxm2_5_b200_vllm_fp8_agg_1024x1024_c64_cfg690"]
    assert len(tw) == 6 and {t["moe_ep_size"] for t in tw} == {"1", "2"}
    assert all((t["batch_size"], t["attention_dp_size"], t["tp_size"]) == ("64", "1", "2") for t in tw)
    assert differ(22.403608332198445, figures(tw)[0]) == pytest.approx(0.0043, abs=1e-4)
    assert "minimaxm2_5_b300_vllm_fp8_agg_1024x1024_c1024_cfg735" not in twins
    a, b = tw[0]["id"], tw[1]["id"]
    sims = {"minimaxm2_5_b200_vllm_fp8_agg_1024x1024_c64_cfg690": {"tpot_f": np.zeros(7), "ttft_f": np.zeros(7),
                                                                   "capacity": 1}}
    for rid, fixed in ((a, 0.010), (b, 0.014)):
        sims[rid] = {"tpot_f": np.array([0, 0, 0, 0, 0, 0, fixed]), "ttft_f": np.zeros(7), "capacity": 2}
    read = as_twins([r for r in rows if r["id"] in sims], sims)
    assert read["minimaxm2_5_b200_vllm_fp8_agg_1024x1024_c64_cfg690"]["tpot_f"][6] == pytest.approx(0.012)
    assert read["minimaxm2_5_b200_vllm_fp8_agg_1024x1024_c64_cfg690"]["capacity"] == 1
    assert read[a] is sims[a]


def test_ranks_and_the_doubted_groups():
    """Rule (ranks): attention_dp_size, or moe_tp x moe_ep / tp where the experts span more GPUs than the
    attention (Qwen3-235B's tp 1, moe_tp 2: 2).  Rule (doubted_table): the error without each DOUBTED group and
    without all of them.  Two rows: gpt-oss-120b on H100 at 512 users, predicted TPOT 2x the measured (APE 100 %),
    and a Kimi-K2.5 row at 10 % over: 55 % on both, 10 % without the gpt-oss one, and both kept where a group does
    not hold them (Qwen3-235B)."""
    import numpy as np

    from benchmarks.steptime_fit import doubted_table, ranks

    base = {"tp_size": "4", "attention_dp_size": "1", "moe_tp_size": "4", "moe_ep_size": "1"}
    assert ranks(base) == 1 and ranks({**base, "attention_dp_size": "4", "moe_ep_size": "16", "moe_tp_size": "1"}) == 4
    assert ranks({"tp_size": "1", "attention_dp_size": "", "moe_tp_size": "2", "moe_ep_size": "1"}) == 2
    by_id = {"g": {**base, "model_path": "openai/gpt-oss-120b", "system": "h100_sxm", "batch_size": "512",
                   "silicon_tpot_ms": "10", "silicon_ttft_ms": "100"},
             "k": {**base, "model_path": "moonshotai/Kimi-K2.5", "system": "b200_sxm", "batch_size": "8",
                   "silicon_tpot_ms": "10", "silicon_ttft_ms": "100"}}
    sims = {i: {"tpot_f": np.array([0, 0, 0, 0, 0, 0, t]), "ttft_f": np.array([0, 0, 0, 0, 0, 0, 0.1])}
            for i, t in (("g", 0.020), ("k", 0.011))}
    lines = doubted_table(["g", "k"], by_id, sims, np.zeros(7))
    assert lines[2].startswith("| gpt-oss-120b on H100 at 512 users") and lines[2].endswith("| 1 | 10.0 | 0.0 |")
    assert lines[5].startswith("| Qwen3-235B") and lines[5].endswith("| 2 | 55.0 | 0.0 |")
    assert lines[-1] == "| all four | 1 | 10.0 | 0.0 |"


def test_twin_table_counts_the_dp_rows_ids_and_copies():
    """Rule (twin_table, on the measured file): 97 attention-DP rows; 40 ids name a TP run with EP over the same
    GPUs (``_tp<N>_ep<N>_`` with N the row's tp_size); 25 others repeat another row's TPOT and TTFT exactly; 88 have
    twins, differing by 4.6 / 1.5 % TPOT and 10.4 / 5.3 % TTFT (mean / median).  With every feature 0 every
    prediction is 0, so every MAPE is 100 % whatever the reading."""
    import csv

    import numpy as np

    from benchmarks.steptime_fit import twin_table

    with (Path(DATA) / "silicon_vllm_agg.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    by_id = {r["id"]: r for r in rows}
    sims = {r["id"]: {"tpot_f": np.zeros(7), "ttft_f": np.zeros(7)} for r in rows}
    lines = twin_table(rows, by_id, sims, np.zeros(7))
    assert lines[0].startswith("Of the 97 attention data-parallel rows, 40 carry ids")
    assert "and 25 more repeat another row's TPOT and TTFT" in lines[0]
    assert lines[4] == "| 88 | 4.6 / 1.5 | 10.4 / 5.3 | 100.0 / 100.0 | 100.0 / 100.0 |"
    assert lines[6].startswith("Every validation row with those 88 read as their twins: TPOT MAPE 100.0 %")


def test_link_seconds_are_the_fixed_seconds_that_move_with_the_bandwidth():
    """Rule (steptime_readings.link_seconds, the link-by-generation reading): the simulator's schedule does not
    depend on time, and a tensor-parallel all-reduce's link seconds are its bytes over the NVLink bandwidth, so
    simulating a row again at half and at a quarter of the bandwidth moves only the fixed seconds, by 1x and 3x
    its link seconds: both estimates agree, every other feature stays to the last bit.  Llama-3.1-70B fp8 TP 2
    on H100, 8,192 / 1,024 tokens, 4 users: a request's TTFT spans 4 steps (8,192 max_num_batched_tokens a step:
    its prompt in one, async scheduling's wait around it) that carry its 8,192 prompt tokens and the other 3 users'
    decode tokens, 3 x 4 = 12: 8,204 tokens through 160 all-reduces (2 of the 80 layers), each moving 2 x (2 - 1)
    / 2 x 8,192 x 2 B a token over 450 GB/s: 160 x 8,204 x 16,384 / 450e9 = 47.79 ms; at TP 1 (on an H200) there
    are none."""
    import csv

    import numpy as np

    from benchmarks import steptime_fit as sf
    from benchmarks.steptime_readings import link_seconds

    with (sf.DATA / "silicon_vllm_agg.csv").open() as fh:
        row = next(r for r in csv.DictReader(fh) if r["model_path"] == "meta-llama/Llama-3.1-70B"
                   and r["system"] == "h100_sxm" and r["tp_size"] == "2" and r["isl"] == "8192"
                   and r["osl"] == "1024" and sf.users(r) == 4)
    spec, half, quarter = (sf.simulate_row(row, 2, 0.4, link_scale=k) for k in (1.0, 0.5, 0.25))
    for key in ("tpot_f", "ttft_f", "ttft_burst_f"):
        a, b, c = (np.asarray(s[key]) for s in (spec, half, quarter))
        assert (a[:5] == b[:5]).all() and (a[:5] == c[:5]).all()
        link = link_seconds(a, b)
        assert link > 0 and link == pytest.approx(link_seconds(a, c, 0.25), rel=1e-9)
    assert link_seconds(np.asarray(spec["ttft_f"]), np.asarray(half["ttft_f"])) == pytest.approx(
        160 * 8_204 * 16_384 / 450e9, rel=1e-12)
    one = {**row, "system": "h200_sxm", "tp_size": "1", "moe_tp_size": "1"}  # 72.7 GB of weights: not one H100
    a, b = (np.asarray(sf.simulate_row(one, 2, 0.4, link_scale=k)["ttft_f"]) for k in (1.0, 0.5))
    assert link_seconds(a, b) == 0.0


def test_the_link_fit_recovers_the_constants_that_made_the_rows():
    """Rule (steptime_readings.with_links, fit_links): rows made by steptime_fit.predict from known constants
    (c_mem 1.3, c_flop 1.2, c_step 0, c_layer 50 us, c_allreduce 10 us, Blackwell c_flop 1.6, Hopper link 1.1,
    Blackwell link 3, c_request 15 ms) give those constants back; a Hopper row's link seconds go to the Hopper
    column and the fixed seconds lose them, a Blackwell row's to the Blackwell column."""
    import numpy as np

    from benchmarks.steptime_fit import predict
    from benchmarks.steptime_readings import fit_links, with_links

    rng = np.random.default_rng(1)
    truth = np.array([1.3, 1.2, 0.0, 50e-6, 10e-6, 1.6, 1.1, 3.0, 0.015])
    by_id, raw, half = {}, {}, {}
    for k in range(40):
        system = ("h100_sxm", "b200_sxm")[k % 2]
        feats = {}
        for key in ("tpot_f", "ttft_f", "ttft_burst_f"):
            f = np.array([rng.uniform(1e-3, 2e-2), rng.uniform(1e-3, 3e-2), rng.integers(1, 9), rng.integers(80, 900),
                          rng.integers(0, 400), 0.0])
            link = rng.uniform(0, 5e-3)
            feats[key] = (f, link)
        i = f"row{k}"
        raw[i] = {"preemptions": 0, "capacity": 1,
                  **{key: np.append(f[:5], f[5] + link) for key, (f, link) in feats.items()}}
        half[i] = {key: np.append(f[:5], f[5] + 2 * link) for key, (f, link) in feats.items()}
        by_id[i] = {"system": system}
    linked = with_links(raw, half, by_id, 0.0)
    h, b = linked["row0"]["tpot_f"], linked["row1"]["tpot_f"]
    assert h[7] == 0.0 and h[6] == pytest.approx(raw["row0"]["tpot_f"][5]) and h[8] == pytest.approx(0.0)
    assert b[6] == 0.0 and b[7] > 0.0 and b[1] == 0.0 and b[5] > 0.0
    for i, s in linked.items():
        by_id[i]["silicon_tpot_ms"] = str(1000 * predict(s["tpot_f"], truth))
        by_id[i]["silicon_ttft_ms"] = str(1000 * predict(s["ttft_f"], truth, True))
    got = fit_links(linked, by_id, list(linked))
    assert got == pytest.approx(truth, rel=1e-6, abs=1e-9)


def test_cliff_table_names_each_step_with_kvdash_room():
    """Rule (steptime_fit.cliff_table): a series' cliff is a TTFT jump of 5x or more between consecutive user
    counts; each measured or predicted one is a row with the step, the TTFT before and at it (measured, kvdash's;
    repeated rows of one user count averaged) and the room kvdash's pool gives.  Llama-3.1-70B fp8 on one H200,
    8,192 / 1,024 tokens (room 38 full requests): measured 3,000 and 3,200 ms at 32 users (mean 3,100) -> 40,000 at
    64 (12.9x, a cliff); kvdash 2,500 -> 9,000 (3.6x, none): missed.  At 16 -> 32 kvdash jumps 400 -> 2,500 (6.25x)
    where the measured 2,000 -> 3,100 does not: a false cliff."""
    import csv

    import numpy as np

    from benchmarks import steptime_fit as sf

    with (sf.DATA / "silicon_vllm_agg.csv").open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["model_path"] == "meta-llama/Llama-3.1-70B"
                and r["system"] == "h200_sxm" and r["tp_size"] == "1" and r["isl"] == "8192"
                and r["osl"] == "1024" and sf.users(r) in (16, 32, 64)]
    assert sorted(sf.users(r) for r in rows) == [16, 32, 64]
    pick = {16: (2_000, [400]), 32: (3_000, [2_500]), 64: (40_000, [9_000])}
    by_id, sims = {}, {}
    for r in rows:
        u = sf.users(r)
        by_id[r["id"]] = {**r, "silicon_ttft_ms": str(pick[u][0])}
        sims[r["id"]] = {"ttft_f": np.array([0, 0, 0, 0, 0, 0, pick[u][1][0] / 1000]), "capacity": 38}
    at32 = next(r["id"] for r in rows if sf.users(r) == 32)
    by_id["twin"] = {**by_id[at32], "id": "twin", "silicon_ttft_ms": "3200"}  # a repeat at 32 users
    sims["twin"] = dict(sims[at32])
    table = sf.cliff_table(list(by_id), by_id, sims, np.zeros(7))
    name = "| calibration | Llama-3.1-70B, H200, fp8, 1 / 1 / 1, 8,192 / 1,024, not given |"
    assert table[2:] == [f"{name} 16 -> 32 | 2,000 -> 3,100 | 400 -> 2,500 | 38 | false (none measured) |",
                         f"{name} 32 -> 64 | 3,100 -> 40,000 | 2,500 -> 9,000 | 38 | missed |"]

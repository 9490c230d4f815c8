"""Issue 28 item 4: Orca's contiguous baselines (Max, Pow2, Oracle) in seconds, beside the paged simulator."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kvdash.core.model import load_preset
from kvdash.core.steptime import Constants, gpu_perf, model_compute
from kvdash.engines.vllm import rank_shapes
from kvdash.errors import InputError
from kvdash.simulate import slo
from kvdash.simulate import timed_contiguous as tc
from kvdash.simulate.timed import Pool, simulate_timed, summarize

C = Constants(1.3, 1.0, 0.002, 4e-5, 1e-5)


def _setup(slots: int, max_len: int = 2048, seqs: int = 256, batched: int = 8192) -> dict:
    cfg = json.loads(Path("kvdash/data/models/llama-3.1-8b.json").read_text())
    arch = load_preset("llama-3.1-8b")
    shape = rank_shapes(arch, "bf16", "tensor", 1, 1, 16)[0]
    return {"pool": Pool(slots // 16, 16, 1, 0, 0, 0), "mc": model_compute(cfg, arch, 1, "bf16"),
            "gpu": gpu_perf("h100-80gb"), "consts": C, "max_num_seqs": seqs, "max_batched": batched, "tp": 1,
            "kv_requests": slots // 512, "slots": slots, "max_len": max_len, "allocator": "first-fit",
            "shape": shape}


def _requests(n: int = 300, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(10, 600, n), rng.integers(2, 400, n)


def test_reservations_follow_the_paper():
    """Max: 2,048 each; Pow2: prompt + next power of two of the output (40 + 25 -> 40 + 32 = 72); Oracle:
    prompt + output (65)."""
    P, OUT = np.array([40, 100]), np.array([25, 200])
    assert tc.reservations("max", P, OUT, 2048).tolist() == [2048, 2048]
    assert tc.reservations("pow2", P, OUT, 2048).tolist() == [72, 356]  # 100 + 256
    assert tc.reservations("oracle", P, OUT, 2048).tolist() == [65, 300]
    with pytest.raises(InputError):
        tc.reservations("paged", P, OUT, 2048)


@pytest.mark.parametrize("closed", [True, False])
def test_oracle_on_a_pool_that_never_binds_is_the_paged_schedule(closed):
    """With room for every reservation at once, memory never decides anything: Orca (Oracle) and paged are the
    same scheduler (running first, FCFS admission under max_num_seqs and the token budget), so every request's
    first token and finish come at the same second (a cross-check of two implementations)."""
    P, OUT = _requests()
    s = _setup(slots=10**7, seqs=64, batched=2048)
    arr = None if closed else slo.arrivals(8.0, len(P), 0)
    a = simulate_timed(P, OUT, s["pool"], s["mc"], s["gpu"], C, 64, 2048, concurrency=48 if closed else 0,
                       arrivals_s=arr)
    b = tc.simulate_timed_contiguous(P, OUT, tc.reservations("oracle", P, OUT, 2048), s["slots"], "first-fit", s["mc"],
                                     s["gpu"], C, 64, 2048, concurrency=48 if closed else 0, arrivals_s=arr)
    ta, tb = a.times(C), b.times(C)
    np.testing.assert_allclose(ta[a.first_seg], tb[b.first_seg], rtol=1e-9)
    np.testing.assert_allclose(ta[a.finish_seg], tb[b.finish_seg], rtol=1e-9)
    assert a.steps == b.steps and a.peak_running == b.peak_running


def test_max_reservation_caps_the_batch():
    """Max reserves 2,048 slots a request: a 20,480-slot pool runs at most 10 at once, Oracle (mean final length
    about 500) many more, and nothing is ever preempted."""
    P, OUT = _requests()
    s = _setup(slots=20480)
    mx = summarize(tc.run("max", P, OUT, s, concurrency=200), C, OUT, 1, "max")
    orc = summarize(tc.run("oracle", P, OUT, s, concurrency=200), C, OUT, 1, "oracle")
    assert mx.peak_running == 10 and orc.peak_running > 30
    assert mx.preemptions == orc.preemptions == 0
    assert orc.requests_per_s > 2 * mx.requests_per_s


def test_buddy_rounds_reservations_up():
    """The buddy allocator rounds 65 slots up to 128: identical requests of prompt 40 + output 25 in a 1,024-slot
    pool (one power-of-two region) run 8 at once (first-fit: 1,024 // 65 = 15)."""
    P, OUT = np.full(60, 40), np.full(60, 25)
    s = _setup(slots=1024)
    ff = tc.run("oracle", P, OUT, s, concurrency=60)
    bd = tc.run("oracle", P, OUT, s | {"allocator": "buddy"}, concurrency=60)
    assert (ff.peak_running, bd.peak_running) == (15, 8)


def test_pool_too_small_for_one_reservation_is_one_clear_error():
    P, OUT = np.full(5, 100), np.full(5, 10)
    with pytest.raises(InputError, match="reservation of 2,048"):
        tc.run("max", P, OUT, _setup(slots=1000), concurrency=2)


def test_normalized_latency_by_hand():
    """One user, prompt 100 and output 10, closed loop: normalized latency = E2E / 10 output tokens, the
    TimedResult's mean E2E over 10."""
    P, OUT = np.full(1, 100), np.full(1, 10)
    s = _setup(slots=10**6)
    sched = slo.schedule(s, P, OUT, concurrency=1, seed=0, policy="oracle")
    res = summarize(sched, C, OUT, 1)
    # both rounded to 6 decimals
    assert slo.normalized_latency(sched, C, OUT) == pytest.approx(res.e2e_ms["mean"] / 1000 / 10, abs=1e-6)


def test_rate_curve_rises_and_paged_sustains_more_than_max():
    """Normalized latency grows with the request rate; at a bound, paged sustains a higher rate than Max on a pool
    where Max's 2,048-slot reservations cap the batch at 10."""
    P, OUT = _requests(200)
    s = _setup(slots=20480)
    rates = [1.0, 4.0, 16.0, 64.0]
    paged, top_p = slo.rate_curve(s, P, OUT, rates, 0.05, 0, policy="paged")
    mx, top_m = slo.rate_curve(s, P, OUT, rates, 0.05, 0, policy="max")
    assert mx == sorted(mx) and mx[-1] > mx[0]
    assert (top_p, top_m) == (16.0, 4.0)  # 0.011 vs 0.187 s/token at 16 requests/s

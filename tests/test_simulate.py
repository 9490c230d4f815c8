"""kvdash simulate: hand-worked cases, invariants checked on every step, the policies' order, CLI errors."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvdash.errors import InputError
from kvdash.simulate.allocators import Buddy, FirstFit
from kvdash.simulate.capacity import capacity_sweep, parse_rates
from kvdash.simulate.engine import (
    ALLOCATORS,
    POLICIES,
    SHARES,
    simulate,
)
from kvdash.simulate.reference import simulate_reference
from kvdash.simulate.workload import (
    PRESETS,
    Lengths,
    Requests,
    Workload,
    draw_requests,
)
from tests.cli_run import run

ONE = Workload("one", Lengths("fixed", 10), Lengths("fixed", 6), requests=1, rate=1.0)


def given_requests(prompt, final, arrival):
    """Requests set by hand (the simulators take them instead of drawing from the seed)."""
    return Requests(np.asarray(prompt, dtype=np.int64), np.asarray(final, dtype=np.int64),
                    np.asarray(arrival, dtype=np.int64))


def both(w, policy, capacity, B, max_len, reqs, **kw):
    """The event-driven simulator and the step-by-step reference, which must agree exactly."""
    fast = simulate(w, policy, capacity, B, max_len, requests=reqs, **kw)
    ref = simulate_reference(w, policy, capacity, B, max_len, requests=reqs, **kw)
    a, b = fast.to_json(), ref.to_json()
    a.pop("allocator"), b.pop("allocator")
    assert a == b
    return fast


class TestByHand:
    def test_paged_one_request(self):
        """Prompt 10, output 6 (final 16), B = 8, 64 slots: admitted holding 10 tokens plus the step's
        token, cdiv(11, 8) = 2 blocks; after each of 6 steps it holds 11..16 tokens (sum 81) in 16 slots;
        so 81 token slots, 96 - 81 = 15 tail slots, 48 x 6 = 288 free, of 384 slot-steps."""
        r = simulate(ONE, "paged", 64, 8, 32)
        assert (6, 1, 0) == (r.steps, r.finished, r.preemptions)
        assert {"token_states": 81, "reservation": 0, "internal_fragmentation": 15, "external_fragmentation": 0,
                "free": 288} == r.slot_steps
        assert 6 == r.token_steps and 1.0 == r.normalized_latency  # 6 steps for 6 output tokens

    def test_contiguous_max_one_request(self):
        """The same request reserving max_len = 32: 81 token slots, reservation 6 x 16 - 81 = 15 (slots for
        tokens still to come), over-reservation (32 - 16) x 6 = 96, free 32 x 6 = 192."""
        r = simulate(ONE, "max", 64, 8, 32)
        assert {"token_states": 81, "reservation": 15, "internal_fragmentation": 96, "external_fragmentation": 0,
                "free": 192} == r.slot_steps

    def test_recompute_keeps_progress(self):
        """vLLM v1: running requests first, the newest preempted, its tokens kept (recompute).
        B = 4, 4 blocks (16 slots). A: prompt 4, final 10; R: prompt 4, final 11; both arrive at step 0.
        step 0: A admitted with cdiv(4 + 1, 4) = 2 blocks, R with 2: free 0; lengths 5, 5.
        steps 1-3: 6,6 / 7,7 / 8,8 (no block boundary crossed).
        step 4: both hold 8 = 2 full blocks; A (oldest) needs a block, none free: the newest, R, is
          preempted (2 blocks back, R keeps its 8 tokens), A takes one (free 1); no admission in a
          preemption step. A: 9.
        step 5: R needs cdiv(8 + 1, 4) = 3 blocks > 1 free: waits. A: 10 = final, leaves (free 4).
        step 6: R admitted, 3 blocks, recomputing its 8 tokens (prompt 4 + 4 generated); 9.
        steps 7, 8: 10, 11 = final.
        Token-steps 6 + 7 = the outputs (10 - 4) + (11 - 4): nothing generated twice.
        Token states 10+12+14+16+9+10+9+10+11 = 101; blocks 4,4,4,4,3,3,3,3,3 = 124 slots, so 23 tail
        slots and 9 x 16 - 124 = 20 free. Queue delay: R waits steps 4 and 5, so 2 / 2 requests = 1.0.
        Normalized latency: A (5 - 0 + 1) / 6 = 1, R (8 - 0 + 1) / 7 = 9/7; mean 8/7."""
        reqs = given_requests([4, 4], [10, 11], [0, 0])
        r = both(ONE, "paged", 16, 4, 32, reqs)
        assert (9, 1, 8, 13) == (r.steps, r.preemptions, r.recomputed_tokens, r.token_steps)
        assert {"token_states": 101, "reservation": 0, "internal_fragmentation": 23, "external_fragmentation": 0,
                "free": 20} == r.slot_steps
        assert 1.0 == r.avg_queue_delay_steps and pytest.approx(8 / 7) == r.normalized_latency

    def test_admission_counts_the_steps_token(self):
        """Two requests, prompt 4 (one full block), final 6, B = 4, 2 blocks: the first takes
        cdiv(4 + 1, 4) = 2 blocks, so the second waits (admitting it with 1 block would preempt it in the
        same step) until the first leaves at step 1; it runs steps 2 and 3. No preemption."""
        reqs = given_requests([4, 4], [6, 6], [0, 0])
        r = both(ONE, "paged", 8, 4, 32, reqs)
        assert (4, 0, 1, 1.0) == (r.steps, r.preemptions, r.peak_running, r.avg_queue_delay_steps)

    def test_watermark(self):
        """vLLM's watermark: waiting requests are admitted only if watermark blocks stay free, once some
        request is scheduled. 4 blocks, watermark 0.25 = 1 block: the same two requests (2 blocks each)
        cannot run together (2 + 1 > 2 free); without it they do."""
        reqs = given_requests([4, 4], [6, 6], [0, 0])
        assert 2 == both(ONE, "paged", 16, 4, 32, reqs).peak_running
        r = both(ONE, "paged", 16, 4, 32, reqs, watermark=0.25)
        assert (1, 4) == (r.peak_running, r.steps)

    def test_buddy_rounds_up(self):
        """A buddy allocator reserves the next power of two: a final of 17 -> 32, 16 -> 16; freed buddies
        merge back into the 64-slot block."""
        b = Buddy(64)
        assert (0, 32) == b.alloc(17) and (32, 16) == b.alloc(16)
        b.free(0, 32)
        b.free(32, 16)
        assert b.free_sets[6] == {0}

    def test_buddy_over_the_whole_pool(self):
        """15,728 slots (OPT-13B, 12 GiB: Table 1 of the PagedAttention paper) = 8,192 + 4,096 + 2,048 +
        1,024 + 256 + 64 + 32 + 16: regions of 4, 2 and 1 blocks of 2,048, so Max places
        15,728 // 2,048 = 7 requests (the paper's Figure 13: Orca (Max) batches 7.00 requests); regions
        never merge (freeing everything leaves the eight regions)."""
        b = Buddy(15_728)
        got = [b.alloc(2048) for _ in range(8)]
        # the smallest free block that fits first: the 2,048 region, then the 4,096 one, then the 8,192 one
        assert [s for s, _ in got[:7]] == [12288, 8192, 10240, 0, 2048, 4096, 6144] and got[7] is None
        for start, size in got[:7]:
            b.free(start, size)
        assert [k for k in range(14) if b.free_sets[k]] == [4, 5, 6, 8, 10, 11, 12, 13]

    def test_first_fit_merges(self):
        f = FirstFit(100)
        a, c = f.alloc(30), f.alloc(30)
        assert (0, 30) == a and (30, 30) == c and f.alloc(50) is None
        f.free(0, 30)
        f.free(30, 30)
        assert ([0], [100]) == (f.starts, f.sizes)


class TestPaper:
    """The PagedAttention paper's setup: OPT-13B, 12 GiB of KV cache = 15,728 slots of 819,200 B (Table 1,
    §3), ShareGPT-like lengths (means 161 in, 338 out, §6.1), Poisson 0.5 requests per step (saturated)."""

    W = replace(PRESETS["sharegpt"], requests=2000, rate=0.5)

    @pytest.mark.parametrize("allocator", ["first-fit", "buddy"])
    def test_max_batches_seven(self, allocator):
        """Figure 13(a): Orca (Max) averages 7.00 batched requests = 15,728 // 2,048; the ramp at the start
        and end of the run is the only shortfall."""
        r = simulate(self.W, "max", 15_728, 16, 2048, allocator)
        assert 7 == r.peak_running and 6.9 < r.avg_running <= 7.0

    def test_max_shares(self):
        """Figure 2: Orca (Max) 20.4 / 13.3 / 57.3 / 8.9 % (token states / reservation / internal /
        external & others); the simulation lands within 1.5 points of each."""
        s = simulate(self.W, "max", 15_728, 16, 2048).shares_percent
        got = (s["token_states"], s["reservation"], s["internal_fragmentation"],
               s["external_fragmentation"] + s["free"])
        assert got == pytest.approx((20.4, 13.3, 57.3, 8.9), abs=1.5)

    def test_oracle_internal_fragmentation(self):
        """Oracle reserves the final length: no internal fragmentation under first-fit (Figure 2: 0);
        under buddy only the rounding to a power of two.  Pow2 reserves the prompt plus the next power of two
        of the output (the paper's rule, issue 28), at least the final length, so under buddy it rounds to at
        least Oracle's block: more internal fragmentation than Oracle (before issue 28 kvdash rounded the
        whole length, which made the two identical)."""
        assert 0 == simulate(self.W, "oracle", 15_728, 16, 2048).slot_steps["internal_fragmentation"]
        buddy = simulate(self.W, "oracle", 15_728, 16, 2048, "buddy").slot_steps
        assert buddy["internal_fragmentation"] > 0
        pow2 = simulate(self.W, "pow2", 15_728, 16, 2048, "buddy").slot_steps
        assert pow2["internal_fragmentation"] > buddy["internal_fragmentation"]

    def test_paged_token_states(self):
        """Figure 2: vLLM keeps 96.3 % of the pool in token states; the simulation, over 10,000 requests (so
        that the pool's filling and draining weigh little), within 1 point."""
        r = simulate(replace(self.W, requests=10_000), "paged", 15_728, 16, 2048)
        assert r.shares_percent["token_states"] == pytest.approx(96.3, abs=1) and r.preemptions > 0


# --- invariants ---------------------------------------------------------------------------------------

def checker(paged: bool):
    def check(state):
        total = sum(state["shares"].values())
        assert total == state["capacity"]  # shares sum to the pool
        assert all(v >= 0 for v in state["shares"].values())
        if paged:
            assert state["free_blocks"] >= 0  # never over-commits
            assert all(n <= fin for n, fin in zip(state["lengths"], state["finals"], strict=True))
        else:
            assert state["reserved"] <= state["capacity"]
            for res, fin, length in state["running"]:
                assert res >= fin >= length  # the reservation covers every token
    return check


WORK = replace(PRESETS["sharegpt"], requests=400, rate=0.3)


@pytest.mark.parametrize("policy", ["max", "pow2", "oracle", "paged", "paged-prefix"])
@pytest.mark.parametrize("allocator", ["first-fit", "buddy"])
def test_invariants_every_step(policy, allocator):
    """Shares sum to the pool, nothing negative, no request beyond its final length, no over-commit."""
    w = replace(WORK, prefix=64) if policy == "paged-prefix" else WORK
    r = simulate(w, policy, 16_000, 16, 2048, allocator=allocator, seed=3, on_step=checker(policy.startswith("paged")))
    assert r.finished == w.requests
    assert sum(r.slot_steps.values()) == r.steps * 16_000


lengths_st = st.one_of(st.builds(lambda a: Lengths("fixed", a), st.integers(1, 60)),
                       st.builds(lambda a, d: Lengths("uniform", a, a + d), st.integers(1, 40), st.integers(0, 40)),
                       st.builds(lambda m, s: Lengths("lognormal", m, s), st.floats(2, 40), st.floats(0.1, 1.0)))


@settings(max_examples=60, deadline=None)
@given(prompt=lengths_st, output=lengths_st, n=st.integers(1, 40), rate=st.floats(0.05, 5),
       closed=st.booleans(), conc=st.integers(1, 12), B=st.sampled_from([1, 2, 4, 8, 16]),
       blocks=st.integers(13, 60), prefix=st.integers(0, 24), wm=st.sampled_from([0.0, 0.05, 0.2]),
       policy=st.sampled_from(POLICIES), allocator=st.sampled_from(ALLOCATORS), seed=st.integers(0, 2**32))
def test_fast_equals_reference(prompt, output, n, rate, closed, conc, B, blocks, prefix, wm, policy, allocator, seed):
    """The event-driven simulator and the step-by-step reference agree exactly on random workloads;
    shares sum to the pool every step (so over all steps); progress is never lost (every output token
    is generated once: token-steps = the sum of the outputs); and the requests do not depend on the
    policy (every policy's token-steps equal the same sum)."""
    max_len = 128
    w = Workload("h", prompt, output, requests=n, rate=rate, arrival="closed" if closed else "poisson",
                 concurrency=conc, prefix=min(prefix, max_len - 1), clip=True)
    capacity = max(blocks * B, 128 * 2)
    reqs = draw_requests(w, seed, max_len)
    r = both(w, policy, capacity, B, max_len, reqs, allocator=allocator, watermark=wm)
    assert sum(r.slot_steps.values()) == r.steps * capacity
    assert r.token_steps == int(reqs.output.sum()) == pytest.approx(r.steps * r.avg_running)
    other = simulate(w, "paged" if policy != "paged" else "max", capacity, B, max_len, allocator, seed)
    assert other.token_steps == r.token_steps


def test_same_requests_for_every_policy():
    """Issue case: prompt 100 (raised to the 512-token prefix), output 200, 100 requests: every policy
    generates 100 x 200 = 20,000 tokens; paged on the same requests is the no-sharing baseline."""
    w = Workload("x", Lengths("fixed", 100), Lengths("fixed", 200), requests=100, arrival="closed", concurrency=8,
                 prefix=512)
    runs = {p: simulate(w, p, 20_000, 16, 2048) for p in ("paged", "paged-prefix", "oracle")}
    assert {r.token_steps for r in runs.values()} == {20_000}
    assert runs["paged-prefix"].slot_steps["token_states"] < runs["paged"].slot_steps["token_states"]


def test_order_of_policies_on_one_trace():
    """On one trace: Oracle's token share >= Pow2's >= Max's, and paged >= all three."""
    shares = {p: simulate(WORK, p, 16_000, 16, 2048, seed=5).shares_percent["token_states"]
              for p in ("max", "pow2", "oracle", "paged")}
    assert shares["oracle"] >= shares["pow2"] >= shares["max"]
    assert shares["paged"] >= max(shares["oracle"], shares["pow2"], shares["max"])


def test_deterministic_under_seed():
    a = simulate(WORK, "paged", 16_000, 16, 2048, seed=9).to_json()
    b = simulate(WORK, "paged", 16_000, 16, 2048, seed=9).to_json()
    assert a == b and a != simulate(WORK, "paged", 16_000, 16, 2048, seed=10).to_json()


def test_overload_preempts_and_finishes():
    """An overloaded pool preempts (recompute) yet every request finishes, and nothing is generated twice."""
    r = simulate(replace(WORK, rate=5.0), "paged", 6_000, 16, 2048, seed=1)
    assert r.preemptions > 0 and r.finished == WORK.requests and r.recomputed_tokens > 0
    assert r.token_steps == int(draw_requests(replace(WORK, rate=5.0), 1, 2048).output.sum())


def test_prefix_sharing_saves_memory():
    """With a 512-token shared prefix, paged-prefix drains the same requests sooner and with less
    queueing than paged (which stores the prefix once per request)."""
    w = replace(WORK, prefix=512, rate=2.0)
    plain = simulate(w, "paged", 20_000, 16, 2048, seed=2)
    shared = simulate(w, "paged-prefix", 20_000, 16, 2048, seed=2)
    assert shared.steps < plain.steps and shared.avg_queue_delay_steps < plain.avg_queue_delay_steps
    assert shared.token_steps == plain.token_steps


def test_closed_loop():
    r = simulate(replace(WORK, arrival="closed", concurrency=8), "paged", 16_000, 16, 2048)
    assert r.peak_running <= 8 and r.finished == WORK.requests


def test_pool_too_small():
    with pytest.raises(InputError, match="cannot hold"):
        simulate(WORK, "max", 1000, 16, 2048)


class TestLongRequests:
    def test_refused_with_count(self):
        """Fixed lengths 2,000 + 100 > 2,048: all 10 refused, with their count."""
        w = Workload("x", Lengths("fixed", 2000), Lengths("fixed", 100), requests=10)
        with pytest.raises(InputError, match="10 of 10 requests longer"):
            draw_requests(w, 0, 2048)

    def test_clipped_when_asked(self):
        w = Workload("x", Lengths("fixed", 2000), Lengths("fixed", 100), requests=10, clip=True)
        reqs = draw_requests(w, 0, 2048)
        assert 10 == reqs.clipped and int(reqs.final.max()) == 2048 and int(reqs.prompt.max()) == 2000

    def test_lognormal_redrawn(self):
        """ShareGPT-like lengths exceed 2,048 in about 1-2 % of draws: drawn again (reported), never cut."""
        reqs = draw_requests(replace(PRESETS["sharegpt"], requests=10_000), 0, 2048)
        assert 0 < reqs.redrawn < 500 and int(reqs.final.max()) <= 2048 and reqs.clipped == 0


class TestCapacity:
    def test_rates_parse(self):
        assert [0.1, 0.2, 0.3] == pytest.approx(parse_rates("0.1:0.3:3"))
        for bad in ("0.1:0.3", "0:1:3", "1:0.5:3", "0.1:0.3:0", "nan:1:2", "0.1:0.2:1", "a:b:c"):
            with pytest.raises(InputError):
                parse_rates(bad)

    def test_paged_holds_more_rate(self):
        """At a bound of 2 steps per output token, paged sustains a higher rate than Max on the paper's
        pool; latency is 1 step per token on an idle pool (each step adds one token)."""
        w = replace(PRESETS["sharegpt"], requests=300)
        cap = capacity_sweep(w, ["max", "paged"], 15_728, 16, 2048, [0.005, 0.05, 0.1], 2.0)
        assert cap.latency["paged"][0] == pytest.approx(1.0, abs=0.05)
        assert cap.capacity["paged"] is not None and cap.capacity["max"] is not None
        assert cap.capacity["paged"] > cap.capacity["max"] and cap.ratios["paged/max"] > 1


class TestCommand:
    def test_json(self, capsys):
        code, out, _ = run(["simulate", "--requests", "200", "--json", "--policies", "max,paged",
                            "--trace-every", "50"], capsys)
        data = json.loads(out)
        assert 0 == code and ["max", "paged"] == [r["policy"] for r in data["results"]]
        steps = data["results"][1]["trace"]["step"]
        assert data["paper_figure_2"]["max"][0] == 20.4 and steps and all(s % 50 == 0 for s in steps)
        for r in data["results"]:  # the per-step trace holds all five shares, which sum to 100 % each step
            tr = r["trace"]
            assert set(tr) == {"step", "running", "token_states", "reservation", "internal_fragmentation",
                               "external_fragmentation", "free"}
            assert all(abs(sum(tr[k][j] for k in SHARES) - 100) < 1e-9 for j in range(len(tr["step"])))

    def test_tables(self, capsys):
        code, out, _ = run(["simulate", "--requests", "200", "--workload", "alpaca"], capsys)
        assert 0 == code and "(20.4)" in out and "Scheduling" in out

    def test_trace_file(self, tmp_path, capsys):
        trace = tmp_path / "t.csv"
        trace.write_text("prompt,output\n100,50\n20,300\n")
        code, out, _ = run(["simulate", "--trace", str(trace), "--requests", "50", "--json"], capsys)
        # two rows run as 50 requests: the name says they were repeated (it gave the file's name alone)
        assert 0 == code and json.loads(out)["setup"]["workload"] == (
            "trace t.csv (2 rows, repeated in order to 50 requests)")
        code, out, _ = run(["simulate", "--trace", str(trace), "--requests", "2", "--json"], capsys)
        assert 0 == code and json.loads(out)["setup"]["workload"] == "trace t.csv"

    @pytest.mark.parametrize("args,field", [
        (["--rate", "-1"], "--rate"), (["--max-reserved", "200000"], "--max-reserved"),  # > the default model's 131,072
        (["--policies", "best"], "--policies"),
        (["--prompt", "normal:5"], "--prompt"), (["--model", "gemma-2-9b"], "--model"),
        (["--requests", "0"], "--requests"), (["--prompt", "fixed:4096"], "--prompt"),
    ])
    def test_bad_parameters(self, args, field, capsys):
        code, _, err = run(["simulate", *args], capsys)
        assert 2 == code and field in err and 1 == len(err.strip().splitlines())

    # issue 13's bad inputs, each one line and exit 2 (before: a traceback, a MemoryError, exit 0 ...)
    @pytest.mark.parametrize("args,field", [
        (["--seed", "-1"], "--seed"),  # was a numpy traceback
        (["--rate", "nan"], "--rate"),  # was exit 0 with a queue delay of -9.2e18
        (["--rate", "inf"], "--rate"),
        (["--requests", "100000000000000"], "--requests"),  # was a MemoryError
        (["--requests", "99999999999999999999"], "--requests"),  # was a ValueError
        (["--requests", "1000000000"], "--requests"),  # was accepted: above the documented 1,000,000
        (["--requests", "2000000", "--max-requests", "100000000"], "--max-requests"),  # the flag has a ceiling too
        (["--prompt", "lognormal:1e9,1"], "--prompt"),  # was silently clipped
        (["--prompt", "fixed:inf"], "--prompt"), (["--prompt", "uniform:1,1e30"], "--prompt"),
        (["--prompt", "lognormal:161,1e300"], "--prompt"), (["--output", "lognormal:nan,1"], "--output"),
        (["--prompt", "fixed:2000", "--output", "fixed:100"], "--prompt"),  # prompt + output above --max-len
        (["--policies", ","], "--policies"),  # was exit 0 with empty tables
        (["--trace-every", "-1"], "--trace-every"),  # was accepted
        (["--block-size", "100000"], "--block-size"),  # was reported as a --budget error
        (["--rates", "0.1:0.05:3"], "--rates"), (["--rates", "0.1"], "--rates"),
        (["--latency-bound", "0.5"], "--latency-bound"), (["--watermark", "1"], "--watermark"),
        (["--rates", "0.1:0.2:3", "--concurrency", "4"], "--rates"),
    ])
    def test_issue_13_bad_input(self, args, field, capsys):
        code, out, err = run(["simulate", "--requests", "20", *args] if "--requests" not in args
                             else ["simulate", *args], capsys)
        assert 2 == code and field in err and 1 == len(err.strip().splitlines()) and "Traceback" not in err

    def test_issue_17_tiny_rate_refused(self, capsys):
        """Regression (issue 17, found from the mutant of the event loop's 2^62 "never" step): --rate 1e-30
        put the arrivals at 1e30 steps, past int64: numpy cast them to -2^63, every request "arrived"
        together and the run exited 0 with a RuntimeWarning and nonsense latencies.  Now one line, exit 2."""
        code, out, err = run(["simulate", "--rate", "1e-30", "--requests", "5"], capsys)
        assert 2 == code and "--rate" in err and "2^53" in err and 1 == len(err.strip().splitlines())

    def test_custom_lengths_are_named_as_given(self, capsys):
        """--prompt and --output replace the preset's lengths, so the workload is "custom" (it was called
        "sharegpt"); with one of them the preset keeps its name and the note says which lengths are its.  The
        requests are the given ones: 10 requests x 50 output tokens = 500 token-steps."""
        code, out, _ = run(["simulate", "--prompt", "fixed:100", "--output", "fixed:50", "--requests", "10",
                            "--policies", "paged", "--json"], capsys)
        data = json.loads(out)
        assert 0 == code and data["setup"]["workload"] == "custom"
        assert data["setup"]["workload_note"] == "custom lengths: --prompt fixed:100, --output fixed:50"
        assert data["results"][0]["token_steps"] == 500
        code, out, _ = run(["simulate", "--prompt", "fixed:100", "--requests", "10", "--policies", "paged",
                            "--json"], capsys)
        setup = json.loads(out)["setup"]
        assert (setup["workload"], setup["workload_note"]) == (
            "sharegpt", "custom lengths: --prompt fixed:100, sharegpt's output lengths")

    def test_pool_smaller_than_a_block_says_what_is_allowed(self, capsys):
        """A budget smaller than one block: the tutorial model's 327,680 B per token (2 x 80 layers x 8 KV heads
        x 128 x 2 B) in 1 MiB = 1,048,576 B holds 1,048,576 // 327,680 = 3 token slots, so --block-size 16 is
        refused in one line that says the pool, the division and what would be allowed."""
        code, _, err = run(["simulate", "--budget", "1MiB"], capsys)
        assert 2 == code and 1 == len(err.strip().splitlines())
        assert ("--block-size: 16 is not allowed; the pool holds only 3 token slots (1,048,576 B per rank // "
                "327,680 B per token): a block of at most 3 tokens, or a larger --budget") in err

    def test_issue_13_same_requests_with_prefix(self, capsys):
        """The issue's case: paged (20,000 token-steps) and paged-prefix (was 100) now run the same requests:
        100 requests x 200 output tokens each = 20,000 for both."""
        code, out, _ = run(["simulate", "--prompt", "fixed:100", "--output", "fixed:200", "--prefix", "512",
                            "--requests", "100", "--concurrency", "8", "--policies", "paged,paged-prefix", "--json"],
                           capsys)
        assert 0 == code and [20_000, 20_000] == [r["token_steps"] for r in json.loads(out)["results"]]

    def test_requests_bound_raised_by_flag(self, capsys):
        """--requests above 1,000,000 needs --max-requests (checked before anything is drawn)."""
        code, _, err = run(["simulate", "--requests", "1000001", "--policies", "max"], capsys)
        assert 2 == code and "--max-requests" in err

    def test_trace_line_above_max_len(self, tmp_path, capsys):
        """A trace line 3000,5 (above --max-len 2,048) is refused with the count; --clip cuts it and says so."""
        trace = tmp_path / "t.csv"
        trace.write_text("100,50\n3000,5\n")
        code, _, err = run(["simulate", "--trace", str(trace), "--requests", "4"], capsys)
        assert 2 == code and "--trace" in err and "2 of 4 requests longer" in err
        code, out, _ = run(["simulate", "--trace", str(trace), "--requests", "4", "--clip", "--json"], capsys)
        data = json.loads(out)
        assert 0 == code and 2 == data["setup"]["clipped"] and 2 == data["results"][0]["clipped"]

    def test_explanations_and_capacity(self, capsys):
        code, out, _ = run(["simulate", "--requests", "200", "--rates", "0.01:0.1:3", "--policies", "max,paged"],
                           capsys)
        assert 0 == code and "ext.+free" in out and "What the shares count" in out and "Beside the paper" in out
        assert "not GPU throughput" in out and "paged/max" in out
        code, out, _ = run(["simulate", "--requests", "200", "--rates", "0.01:0.1:3", "--policies", "max,paged",
                            "--json"], capsys)
        cap = json.loads(out)["capacity"]
        assert [0.01, 0.055, 0.1] == pytest.approx(cap["rates"]) and set(cap["normalized_latency"]) == {"max", "paged"}
        assert "not GPU throughput" in cap["label"] and "paged/max" in cap["ratios"]

    @pytest.mark.parametrize("body", ["", "prompt,output\n", "1,x\n", "5,-3\n", "99999999999999999999999,5\n",
                                      "\u00b2,5\n", "3000,5\n"])
    def test_bad_trace(self, tmp_path, body, capsys):
        trace = tmp_path / "t.csv"
        trace.write_text(body)
        code, _, err = run(["simulate", "--trace", str(trace)], capsys)
        assert 2 == code and "--trace" in err


class TestGridSimulate:
    GRID = """
models: [opt-13b, tutorial-gqa-80l]
workloads:
  w: {length: 499, max_reserved: 2048}
grid:
  budget: [12GiB]
simulate: {workload: alpaca, requests: 200, rate: 0.5, policies: [max, paged], rates: "0.5:2:3"}
"""

    def test_columns_and_report(self, tmp_path):
        from kvdash.report.build import write_report
        from kvdash.sweep.evaluate import expand
        from kvdash.sweep.gridfile import parse_grid

        path = tmp_path / "g.yaml"
        path.write_text(self.GRID)
        spec = parse_grid(path)
        exp = expand(spec)
        cols = exp.frame.columns
        assert "sim_max_token_states" in cols and "sim_paged_preemptions" in cols
        row = exp.frame.row(0, named=True)
        direct = simulate(spec.simulate.workload, "max", row["kv_token_slots"], 16, 2048)
        assert pytest.approx(direct.shares_percent["token_states"], abs=1e-5) == row["sim_max_token_states"]
        write_report(spec, exp, tmp_path / "r")
        md = (tmp_path / "r" / "report.md").read_text()
        assert "## Memory over time (simulated)" in md and "(20.4)" in md
        assert (tmp_path / "r" / "simulation.svg").is_file()
        # the capacity sweep: a column per rate and policy, the capacity, a table and a chart
        assert "sim_paged_latency_r2" in cols and "sim_max_capacity_rate" in cols
        assert "### Capacity at 2 steps per output token (simulated)" in md and "not GPU throughput" in md
        assert (tmp_path / "r" / "simulation-capacity.svg").is_file()

    @pytest.mark.parametrize("text,words", [
        ("simulate: {policies: [pagd]}\n", "did you mean .paged."),
        ("simulate: {rate: -1}\n", "requests per step above 0"),
        ("simulate: {workload: chat}\n", "expected one of"),
        ("simulate: {rate: .nan}\n", "above 0"),
        ("simulate: {rates: 0.5}\n", "A:B:N"),
        ("simulate: {rates: '1:2:3', latency_bound: 1}\n", "more than 1"),
        ("simulate: {seed: -1}\n", "2\\^63"),
        ("simulate: {requests: 100000000}\n", "from 1 to 1,000,000"),
        ("simulate: {watermark: 2}\n", "fraction"),
        ("grid:\n  block_size: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,"
         " 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51,"
         " 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78,"
         " 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95, 96, 97, 98, 99, 100, 101]\n"
         "  tp: [1, 2, 4, 8, 16]\nsimulate: {}\n", "at most 500 points"),
    ])
    def test_errors(self, tmp_path, text, words):
        from kvdash.sweep.gridfile import parse_grid

        path = tmp_path / "g.yaml"
        path.write_text(text)
        with pytest.raises(InputError, match=words):
            parse_grid(path)


class TestVisualSimulation:
    """The step-by-step simulation behind `kvdash live --demo --simulate`."""

    @pytest.mark.parametrize("policy", ["paged", "max", "pow2", "oracle"])
    def test_positions_are_consistent(self, policy):
        """No block or slot is held twice; every request holds at least its tokens; the map has one cell a block."""
        from kvdash.simulate.visual import VisualSimulation

        sim = VisualSimulation(policy, cells=200, seed=3)
        for _ in range(2500):
            sim.step()
            if sim.paged:
                held = [b for s in sim.running.values() for b in s["blocks"]]
                assert len(held) == len(set(held)) and len(held) + len(sim.free_ids) == 200
                assert all(len(s["blocks"]) * 16 >= s["len"] for s in sim.running.values())
            else:
                spans = sorted((s["start"], s["start"] + s["res"]) for s in sim.running.values())
                assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))
                assert all(s["res"] >= s["len"] for s in sim.running.values())
        cells = sim.cells()
        assert 200 == len(cells) and sim.finished > 0

    def test_overload_preempts(self):
        from kvdash.simulate.visual import VisualSimulation

        sim = VisualSimulation("paged", cells=100, workload=replace(PRESETS["sharegpt"], requests=10_000, rate=0.2))
        for _ in range(2000):
            sim.step()
        assert sim.preemptions > 0 and "preemptions" in sim.status()


def test_live_simulate_starts_from_the_command_line(monkeypatch, capsys):
    """``kvdash live --demo --simulate paged`` (the README's command) built its simulation from --block-size's text
    ('auto', '16') and stopped with a TypeError before the dashboard opened; the simulation now takes the block size
    the pool resolved (32 here).  An unknown policy, or --simulate with --once / --json (where no map is drawn), is
    one line, exit 2."""
    from kvdash.tui.app import LiveApp
    from tests.cli_run import run

    started = []
    monkeypatch.setattr(LiveApp, "run", lambda self, *a, **k: started.append(self.simulation))
    code, _, err = run(["live", "--demo", "--simulate", "paged", "--block-size", "32"], capsys)
    assert code == 0, err
    assert started[0].policy == "paged" and started[0].B == 32 and started[0].capacity == 480 * 32
    code, _, err = run(["live", "--demo", "--simulate", "paged"], capsys)
    assert code == 0 and started[1].B == 16, err  # the default block size (vLLM's 16 for this model)
    for extra in (["--simulate", "bogus"], ["--simulate", "paged", "--once"], ["--simulate", "max", "--json"]):
        code, _, err = run(["live", "--demo", *extra], capsys)
        assert code == 2 and 1 == len(err.strip().splitlines()) and "--simulate" in err
    code, _, err = run(["live", "--prometheus", "http://127.0.0.1:9", "--simulate", "paged"], capsys)
    assert code == 2 and 1 == len(err.strip().splitlines()) and "the fleet view draws no block map" in err


async def test_live_app_draws_simulation():
    from kvdash.live.analysis import LiveConfig
    from kvdash.simulate.visual import VisualSimulation
    from kvdash.sources.demo import DemoSource
    from kvdash.tui.app import LiveApp

    app = LiveApp(DemoSource(seed=7), LiveConfig(), interval=3600, autopoll=False,
                  simulation=VisualSimulation("paged", seed=1), sim_steps_per_poll=500)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        assert app.simulation.step_no == 500
        assert "simulated paged" in app.simulation.status()
        assert app._drawn["map-wide"][0] == tuple(app.simulation.cells())  # the map shows the simulation's cells


def test_simulate_prose_has_no_trailing_spaces_at_80_columns(capsys, monkeypatch, tmp_path):
    """rich's Console.print wraps prose and leaves a space at the end of each wrapped line: `simulate` at 80 columns
    ended 22 of its 93 lines in one, the prefix replay 22 of 65.  Both print through commands.common.Prose now: no
    line ends in a space and none passes 80 columns."""
    from tests.cli_run import run

    monkeypatch.setenv("COLUMNS", "80")
    trace = tmp_path / "two.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 2048, "output_length": 10, "hash_ids": [1,2,3,4]}\n' * 2)
    for args in (["simulate", "--requests", "50"],
                 ["simulate", "--model", "llama-3.1-8b", "--hash-trace", str(trace), "--offload", "cpu:100MiB,disk:inf",
                  "--time", "--gpu", "h100-80gb", "--capacities", "1k,2k,inf"]):
        code, out, err = run(args, capsys)
        assert code in (0, None), err
        lines = out.splitlines()
        assert len(lines) > 40 and all(len(x) <= 80 and x == x.rstrip() for x in lines), [
            x for x in lines if len(x) > 80 or x != x.rstrip()]
    # on a colour terminal a line ends in reset codes after the space (a review: 10 lines kept theirs)
    import re

    monkeypatch.setenv("FORCE_COLOR", "1")
    code, out, err = run(["simulate", "--requests", "50"], capsys)
    assert code in (0, None) and "\x1b[" in out, err
    plain = [re.sub(r"\x1b\[[0-9;]*m", "", x) for x in out.splitlines()]
    assert all(x == x.rstrip() for x in plain), [x for x in plain if x != x.rstrip()]

"""The simulator's rules, each pinned by an exact value worked by hand (issue 17).

Fast on purpose (a few seconds, no CLI import): ``benchmarks/mutation.py`` runs this file against
every mutant of ``kvdash/simulate/engine.py``, ``rules.py`` and ``capacity.py``.  Every test names
the rule it guards; the docstrings hold the arithmetic.  ``tests/test_simulate.py`` keeps the paper
reproductions, the CLI and the long runs.
"""

from __future__ import annotations

import random
from collections import deque

import numpy as np
import pytest

from kvdash.errors import InputError
from kvdash.simulate.allocators import Buddy, FirstFit
from kvdash.simulate.capacity import capacity_sweep, parse_rates
from kvdash.simulate.engine import (
    ALLOCATORS,
    POLICIES,
    SHARES,
    check_pool,
    simulate,
)
from kvdash.simulate.reference import simulate_reference
from kvdash.simulate.rules import admit_fcfs, paged_blocks_to_admit, serve_running
from kvdash.simulate.workload import (
    LENGTH_CAP,
    Lengths,
    Requests,
    Workload,
    draw_requests,
    read_trace,
)

ANY = Workload("given", Lengths("fixed", 1), Lengths("fixed", 1), requests=1)


def given(prompt, final, arrival=None):
    """Requests set by hand (the simulators take them instead of drawing from the seed)."""
    arrival = [0] * len(prompt) if arrival is None else arrival
    return Requests(np.asarray(prompt, dtype=np.int64), np.asarray(final, dtype=np.int64),
                    np.asarray(arrival, dtype=np.int64))


def both(policy, capacity, B, max_len, reqs, w=ANY, **kw):
    """The event-driven simulator and the step-by-step reference, which must agree exactly."""
    fast = simulate(w, policy, capacity, B, max_len, requests=reqs, **kw)
    ref = simulate_reference(w, policy, capacity, B, max_len, requests=reqs, **kw)
    a, b = fast.to_json(), ref.to_json()
    a.pop("allocator"), b.pop("allocator")
    assert a == b, "rule: the event-driven simulator agrees exactly with the step-by-step reference"
    return fast


def shares(r):
    return tuple(r.slot_steps[k] for k in SHARES)


# --- rules.py, directly -----------------------------------------------------------------------------

class FakePool:
    """Blocks per running request; ``free`` = total - held."""

    def __init__(self, total, held):
        self.total, self.held, self.log = total, dict(held), []

    @property
    def free(self):
        return self.total - sum(self.held.values())

    def take(self, key):
        self.held[key] += 1
        self.log.append(("take", key))

    def release(self, key):
        self.log.append(("release", key, self.held.pop(key)))


class TestRules:
    def test_blocks_to_admit_prompt_plus_the_steps_token(self):
        """Rule 2, admission: a waiting request's tokens plus this step's token, in blocks of B = 4:
        8 tokens -> cdiv(8 + 1, 4) = 3 (not cdiv(8, 4) = 2); 7 tokens -> cdiv(8, 4) = 2 (not 3)."""
        assert 3 == paged_blocks_to_admit(8, 4, 0, False), "rule: admission counts prompt + the step's token"
        assert 2 == paged_blocks_to_admit(7, 4, 0, False), "rule: admission counts prompt + the step's token"
        assert 1 == paged_blocks_to_admit(1, 4, 0, False)

    def test_blocks_to_admit_shared_prefix(self):
        """Prefix sharing: 10 tokens with a 2-block prefix (B = 4): cdiv(11, 4) = 3 blocks, of which 2 are
        the prefix: 3 - 2 = 1 own block, plus the 2 prefix blocks when no running request holds them
        (3), alone when they are held (1)."""
        assert 3 == paged_blocks_to_admit(10, 4, 2, False), "rule: the first holder of the prefix stores it"
        assert 1 == paged_blocks_to_admit(10, 4, 2, True), "rule: a held prefix is not stored again"

    def test_serve_running_last_free_block_no_preemption(self):
        """Rule 1: one free block and one needer: it takes it, nobody is preempted (free < 1 is false)."""
        running = {0: 0, 1: 1}
        pool = FakePool(3, {0: 1, 1: 1})
        assert [] == serve_running(running, [0], pool), "rule: preempt only when no block is free"
        assert {0: 2, 1: 1} == pool.held and [0, 1] == list(running)

    def test_serve_running_preempts_newest_keeps_oldest(self):
        """Rule 1: no free block; needers 0 (oldest) then 2: the newest running request, 2, is preempted
        (its 2 blocks back), 0 takes one (free 1), then 2 is gone so the loop ends; 1 keeps running."""
        running = {0: 0, 1: 1, 2: 2}
        pool = FakePool(4, {0: 1, 1: 1, 2: 2})
        assert [2] == serve_running(running, [0, 2], pool), "rule: the newest running request is preempted"
        assert [0, 1] == list(running) and [("release", 2, 2), ("take", 0)] == pool.log

    def test_serve_running_preempts_itself(self):
        """Rule 1: the needer is the newest and no block is free: it preempts itself, takes nothing."""
        running = {0: 0, 1: 1}
        pool = FakePool(2, {0: 1, 1: 1})
        assert [1] == serve_running(running, [1], pool), "rule: a needer may preempt itself"
        assert [0] == list(running) and [("release", 1, 1)] == pool.log

    def test_serve_running_several_victims_newest_first(self):
        """Rule 1: no free block, four running requests of one block, needers 0 then 1: for 0 the newest,
        3, is preempted and 0 takes its block; for 1 none is free again, so the next newest, 2, goes and
        1 takes its block.  Victims returned newest first: [3, 2]."""
        running = {0: 0, 1: 1, 2: 2, 3: 3}
        pool = FakePool(4, {0: 1, 1: 1, 2: 1, 3: 1})
        assert [3, 2] == serve_running(running, [0, 1], pool), "rule: victims newest first, one per missing block"
        assert [("release", 3, 1), ("take", 0), ("release", 2, 1), ("take", 1)] == pool.log
        assert [0, 1] == list(running)

    def test_admit_fcfs_head_blocks_the_queue(self):
        """Rule 2: first come first served; a head that cannot be placed blocks the ones behind it."""
        waiting = deque([5, 6, 7])
        assert [5] == admit_fcfs(waiting, lambda i: i != 6), "rule: a head that does not fit blocks the queue"
        assert deque([6, 7]) == waiting


# --- workloads: lengths, traces, arrivals ----------------------------------------------------------------

class TestLengths:
    def test_fixed_and_floor_of_one(self):
        """A fixed length is repeated; every length is at least 1 (fixed 0 -> 1); fixed 1 stays 1."""
        rng = np.random.default_rng(0)
        assert [7, 7, 7] == Lengths("fixed", 7).draw(rng, 3).tolist()
        assert [1, 1] == Lengths("fixed", 0).draw(rng, 2).tolist(), "rule: lengths are at least 1"
        assert [1, 1] == Lengths("fixed", 1).draw(rng, 2).tolist(), "rule: lengths are at least 1"

    def test_cap(self):
        """Lengths are cut at LENGTH_CAP = 2^40 = 1,099,511,627,776 before any check (no overflow)."""
        assert 1_099_511_627_776 == LENGTH_CAP
        rng = np.random.default_rng(0)
        assert [2**40] == Lengths("fixed", 1e30).draw(rng, 1).tolist(), "rule: lengths capped at 2^40"
        assert [2**40, 5] == Lengths("trace", values=(2**41, 5)).draw(rng, 2).tolist()

    def test_uniform_is_inclusive(self):
        """uniform a..b includes both ends: 2,000 draws of uniform 3..4 give exactly {3, 4}."""
        got = set(Lengths("uniform", 3, 4).draw(np.random.default_rng(1), 2000).tolist())
        assert {3, 4} == got, "rule: uniform lengths run from a to b inclusive"

    def test_lognormal_mean(self):
        """lognormal (mean a, sigma b): mu = ln a - b^2 / 2 makes the mean a; 200,000 draws of
        (100, 1.0) average within 2 % of 100 (a wrong mu shifts it by e^(1/6) or more: +18 %)."""
        got = Lengths("lognormal", 100, 1.0).draw(np.random.default_rng(2), 200_000).mean()
        assert abs(got - 100) < 2, "rule: lognormal mean a"

    def test_lognormal_mean_other_sigma(self):
        """The same rule at sigma 0.5, where b^2 / 2 = 0.125 differs from b^3 / 2 = 0.0625 and b / 2 = 0.25
        (at sigma 1 they coincide): 200,000 draws of (100, 0.5) average within 1 % of 100 (sample
        error about 0.12; a wrong mu is off by 6 % or more)."""
        got = Lengths("lognormal", 100, 0.5).draw(np.random.default_rng(3), 200_000).mean()
        assert abs(got - 100) < 1, "rule: lognormal mu = ln a - b^2 / 2"

    def test_defaults(self):
        """Lengths' parameters default to 0: lognormal with only its mean has sigma 0 (every draw the
        mean, 50); uniform with only b = 3 draws 0..3 raised to 1, so 1 comes up half the time (0 and 1:
        2 of 4 values; a default of 1 would give 1/3, of -1 3/5)."""
        rng = np.random.default_rng(0)
        assert {50} == set(Lengths("lognormal", 50).draw(rng, 100).tolist()), "rule: sigma defaults to 0"
        got = Lengths("uniform", b=3).draw(np.random.default_rng(5), 20_000)
        assert abs((got == 1).mean() - 0.5) < 0.02, "rule: a defaults to 0"
        assert set(got.tolist()) == {1, 2, 3}

    def test_trace_cycles(self):
        """Trace lengths are taken in order and cycled: (5, 7, 9) for 5 requests -> 5, 7, 9, 5, 7."""
        got = Lengths("trace", values=(5, 7, 9)).draw(np.random.default_rng(0), 5).tolist()
        assert [5, 7, 9, 5, 7] == got, "rule: trace values in order, cycled"


class TestTrace:
    def test_reading(self, tmp_path):
        """A header line, a blank line and spaces around numbers are allowed: prompts (100, 20), outputs
        (50, 300)."""
        p = tmp_path / "t.csv"
        p.write_text("prompt,output\n100,50\n\n 20 , 300 \n7,8,a note\n")
        assert ((100, 20, 7), (50, 300, 8)) == read_trace(str(p)), "rule: trace lines are prompt,output[,ignored]"

    @pytest.mark.parametrize(("body", "where", "words"), [
        ("100,50\nx,3\n", "t.csv:2", "positive integers"),  # line numbers count from 1
        ("5\n", "t.csv:1", "positive integers"),  # one field on line 1 is not a header (it has a digit)
        ("1,x\n", "t.csv:1", "positive integers"),  # both of the first two fields must be integers
        ("100,50\n0,5\n", "t.csv:2", "must be positive"),
        ("100,50\n5,0\n", "t.csv:2", "must be positive"),
        ("prompt,output\n", "t.csv", "no request"),
    ])
    def test_bad_lines_named(self, tmp_path, body, where, words):
        p = tmp_path / "t.csv"
        p.write_text(body)
        with pytest.raises(InputError) as exc:
            read_trace(str(p))
        assert where in str(exc.value) and words in str(exc.value), "rule: a bad trace line is named by number"

    def test_limit_stops_after_that_many_requests(self, tmp_path):
        """limit=2 on a 3-request trace (after a header): the first 2 requests, the third line never read;
        limit=3 reads all three."""
        p = tmp_path / "t.csv"
        p.write_text("prompt,output\n10,1\n20,2\n30,3\n")
        assert ((10, 20), (1, 2)) == read_trace(str(p), limit=2), "rule: reading stops after limit requests"
        assert ((10, 20, 30), (1, 2, 3)) == read_trace(str(p), limit=3)

    def test_field_of_at_most_18_digits(self, tmp_path):
        """A length may have up to 18 digits (10^18 - 1 < 2^63); 19 digits are refused as not an integer, before
        int() turns a huge field into a huge number."""
        p = tmp_path / "t.csv"
        p.write_text(f"{'9' * 18},1\n")
        assert ((10**18 - 1,), (1,)) == read_trace(str(p)), "rule: 18 digits are accepted"
        p.write_text(f"1,{'1' * 19}\n")
        with pytest.raises(InputError) as exc:
            read_trace(str(p))
        assert "t.csv:1" in str(exc.value) and "positive integers" in str(exc.value), "rule: 19 digits refused"

    def test_trace_workload_one_token_lengths(self, tmp_path):
        """The smallest trace line, 1,1, is a request of prompt 1 and output 1 (final 2)."""
        p = tmp_path / "t.csv"
        p.write_text("1,1\n")
        pr, out = read_trace(str(p))
        w = Workload("t", Lengths("trace", values=pr), Lengths("trace", values=out), requests=2, arrival="closed")
        reqs = draw_requests(w, 0, 8)
        assert [1, 1] == reqs.prompt.tolist() and [2, 2] == reqs.final.tolist()


class TestDraw:
    def test_prefix_raises_short_prompts(self):
        """A prompt shorter than the shared prefix is raised to it, the output kept: prompt 3, output 5,
        prefix 8 -> prompt 8, final 13; a prompt of 9 stays 9 (final 14)."""
        w = Workload("p", Lengths("trace", values=(3, 9)), Lengths("fixed", 5), requests=2, prefix=8)
        reqs = draw_requests(w, 0, 64)
        assert [8, 9] == reqs.prompt.tolist() and [13, 14] == reqs.final.tolist(), "rule: prompts start with the prefix"

    def test_clip(self):
        """--clip: 2,000 + 100 with max-len 2,048 -> final 2,048, prompt 2,000, output 48; 3,000 + 5 ->
        final 2,048, prompt cut to 2,047 so that one output token is left; 2,048 exactly is not cut."""
        w = Workload("c", Lengths("trace", values=(2000, 3000, 2040)), Lengths("trace", values=(100, 5, 8)),
                     requests=3, clip=True)
        reqs = draw_requests(w, 0, 2048)
        assert [2000, 2047, 2040] == reqs.prompt.tolist() and [2048, 2048, 2048] == reqs.final.tolist()
        assert 2 == reqs.clipped, "rule: --clip cuts requests longer than the maximum length"
        assert [48, 1, 8] == reqs.output.tolist()

    def test_exactly_max_len_accepted(self):
        """prompt + output = max-len is allowed (longer than, not equal to, is refused)."""
        w = Workload("c", Lengths("fixed", 2000), Lengths("fixed", 48), requests=2)
        assert [2048, 2048] == draw_requests(w, 0, 2048).final.tolist(), "rule: a request of max-len fits"
        with pytest.raises(InputError, match="2 of 2 requests longer"):
            draw_requests(Workload("c", Lengths("fixed", 2000), Lengths("fixed", 49), requests=2), 0, 2048)

    def test_lognormal_redrawn_within_five_percent(self):
        """Lognormal draws longer than max-len are drawn again when at most 5 % are (here 1 of 40 = 2.5 %
        with output fixed 100 and prompt lognormal: none is left too long)."""
        w = Workload("l", Lengths("lognormal", 100, 1.0), Lengths("fixed", 100), requests=400)
        reqs = draw_requests(w, 3, 1000)
        assert 0 < reqs.redrawn <= 20 and int(reqs.final.max()) <= 1000, "rule: too-long lognormal draws redrawn"

    def test_redraw_allowed_at_exactly_five_percent(self):
        """Lognormal outputs, 20 requests, prompt 46 for the first and 10 for the others, max-len 50: with
        seed 90 only the first is too long (46 + 7 = 53): 1 of 20 = 5 % is not more than 5 %, so it is
        drawn again: 46 + 6 = 52 (too long), then 46 + 4 = 50 = max-len, kept (only longer is redrawn)."""
        w = Workload("l", Lengths("trace", values=(46,) + (10,) * 19), Lengths("lognormal", 3, 0.6), requests=20)
        reqs = draw_requests(w, 90, 50)
        assert 1 == reqs.redrawn and 0 == reqs.clipped, "rule: up to 5 % of lognormal draws are drawn again"
        assert 50 == reqs.final[0], "rule: a redrawn request of exactly max-len is kept"
        assert int(reqs.final.max()) <= 50

    REDRAW = Workload("r", Lengths("trace", values=(370,) + (10,) * 19), Lengths("lognormal", 100, 0.3), requests=20)

    @staticmethod
    def _first_fitting_redraw(seed: int) -> int:
        """Replays REDRAW's generator: the 20 first outputs, then one output per redraw of request 0 (its trace
        prompt 370 draws no number); the redraw whose output is at most 410 - 370 = 40 tokens."""
        rng = np.random.default_rng(seed)
        first = Lengths("lognormal", 100, 0.3).draw(rng, 20)
        assert first[0] > 40 and (first[1:] <= 400).all(), "only request 0 is too long at first"
        return next(k for k in range(1, 2000) if Lengths("lognormal", 100, 0.3).draw(rng, 1)[0] <= 40)

    def test_redraw_tries_1000_draws_and_keeps_the_last(self):
        """A too-long lognormal request is drawn again at most 1,000 times, each draw checked.  REDRAW: prompt
        370 for request 0 and 10 for the others, outputs lognormal (mean 100, sigma 0.3), max-len 410, so
        request 0 fits only with an output of at most 40 (about 0.2 % of draws: mu = ln 100 - 0.3^2 / 2 =
        4.560, (ln 40.5 - 4.560) / 0.3 = -2.86).  Seed 264: its first output of at most 40 is redraw 1,000
        (40 tokens): kept, final 370 + 40 = 410 (the loop used to end without checking its last draw)."""
        assert 1000 == self._first_fitting_redraw(264)
        reqs = draw_requests(self.REDRAW, 264, 410)
        assert 1 == reqs.redrawn and 410 == reqs.final[0], "rule: the 1,000th redraw is checked and kept"

    def test_redraw_gives_up_after_1000_draws(self):
        """Seed 1,698: the first output of at most 40 would be redraw 1,001, one past the limit: refused with
        the one-line error on --max-reserved (REDRAW and the arithmetic as in the test above)."""
        assert 1001 == self._first_fitting_redraw(1698)
        with pytest.raises(InputError, match="the lengths drawn do not fit"):
            draw_requests(self.REDRAW, 1698, 410)

    def test_nothing_redrawn_or_clipped(self):
        """Requests that fit are neither redrawn nor clipped (both counts 0), with or without --clip."""
        for clip in (False, True):
            w = Workload("f", Lengths("fixed", 3), Lengths("fixed", 4), requests=5, clip=clip)
            reqs = draw_requests(w, 0, 64)
            assert (0, 0) == (reqs.redrawn, reqs.clipped), "rule: counts of redrawn/clipped start at 0"
        r = simulate(ANY, "paged", 16, 4, 16, requests=given([2], [3]))
        assert (0, 0) == (r.redrawn, r.clipped)

    def test_workload_defaults(self):
        """A workload's defaults: 1,000 requests; closed loop keeps 32 in the system (prompt 1, output 1,
        Oracle reserving 2 slots each on 128 slots, room for 64: 32 run every step, 1,000 = 31 x 32 + 8
        take 32 steps)."""
        w = Workload("d", Lengths("fixed", 1), Lengths("fixed", 1), arrival="closed")
        assert 1000 == len(draw_requests(w, 0, 8).prompt), "rule: 1,000 requests by default"
        r = simulate(w, "oracle", 128, 4, 8)
        assert (32, 32) == (r.peak_running, r.steps), "rule: closed-loop concurrency 32 by default"

    def test_poisson_arrivals(self):
        """Poisson arrivals at rate r: gaps exponential with mean 1/r, arrival steps the floor of their
        running sum (same generator, after the lengths: fixed lengths draw nothing)."""
        w = Workload("a", Lengths("fixed", 4), Lengths("fixed", 4), requests=50, rate=0.5)
        expect = np.floor(np.cumsum(np.random.default_rng(7).exponential(2.0, size=50))).astype(np.int64)
        assert expect.tolist() == draw_requests(w, 7, 64).arrival.tolist(), "rule: Poisson arrivals, mean gap 1/rate"

    def test_tiny_rate_refused_not_overflowed(self):
        """Regression (issue 17): arrival steps must be exact int64 values.  Rate 1e-30 put the first
        arrival near 1e30 steps; numpy's cast gave -2^63 for every request.  Arrivals must stay below
        2^53: rate 1e-15 (5 requests, last arrival about 2.3e15 < 2^53 = 9.0e15) is accepted, with the
        steps the floor of the running sum; 1e-18 (about 2.3e18) is refused, naming --rate."""
        ok = Workload("a", Lengths("fixed", 4), Lengths("fixed", 4), requests=5, rate=1e-15)
        expect = np.floor(np.cumsum(np.random.default_rng(0).exponential(1 / 1e-15, size=5))).astype(np.int64)
        got = draw_requests(ok, 0, 64).arrival
        assert expect.tolist() == got.tolist() and int(got.min()) > 0, "rule: arrival steps exact, never negative"
        for rate in (1e-18, 1e-30, 1e-320):
            with pytest.raises(InputError, match=r"--rate.*past step 2\^53"):
                draw_requests(Workload("a", Lengths("fixed", 4), Lengths("fixed", 4), requests=5, rate=rate), 0, 64)

    def test_arrival_cap_boundary(self):
        """The cap is exclusive: a last arrival at step 2^53 - 1 is accepted, at 2^53 refused (gaps given
        directly to the helper)."""
        from kvdash.simulate.workload import ARRIVAL_CAP, _arrival_steps
        assert 2**53 == ARRIVAL_CAP
        assert [2**53 - 1] == _arrival_steps(np.asarray([2.0**53 - 1]), 1.0).tolist()
        with pytest.raises(InputError, match="--rate"):
            _arrival_steps(np.asarray([2.0**53]), 1.0)
        with pytest.raises(InputError, match="--rate"):  # the last arrival counts, not the first
            _arrival_steps(np.asarray([1.0, 2.0**53]), 1.0)

    def test_closed_arrivals_zero(self):
        w = Workload("a", Lengths("fixed", 4), Lengths("fixed", 4), requests=3, arrival="closed")
        assert [0, 0, 0] == draw_requests(w, 7, 64).arrival.tolist()


# --- paged, worked by hand -------------------------------------------------------------------------------

class TestPagedByHand:
    def test_output_length_one(self):
        """Prompt 8, output 1 (final 9), B = 4, 16 slots: admitted with cdiv(8 + 1, 4) = 3 blocks, holds 9 =
        its final length at the end of step 0 and leaves: 1 step, 9 token slots, 12 - 9 = 3 tail slots,
        16 - 12 = 4 free; latency (0 - 0 + 1) / 1 = 1."""
        r = both("paged", 16, 4, 16, given([8], [9]))
        assert (1, 1, 0) == (r.steps, r.token_steps, r.preemptions), "rule: output 1 runs one step"
        assert (9, 0, 3, 0, 4) == shares(r), "rule: output 1 holds prompt + 1 token in cdiv(9, 4) blocks"
        assert 1.0 == r.normalized_latency
        assert (1.0, 1.0) == (r.avg_running, r.tokens_per_step), "rule: averages over busy steps (1 step, 1 running)"

    def test_idle_steps_not_counted(self):
        """Two requests of output 1 arriving at steps 0 and 3: steps 1 and 2 are idle, not counted: 2 busy
        steps, each request's latency (finish - arrival + 1) / 1 = 1."""
        r = both("paged", 16, 4, 16, given([8, 8], [9, 9], [0, 3]))
        assert (2, 1.0, 0.0) == (r.steps, r.normalized_latency, r.avg_queue_delay_steps), "rule: idle steps not counted"
        assert (18, 0, 6, 0, 8) == shares(r)

    def test_requeued_at_the_front_progress_kept(self):
        """Preemption re-queues at the front, progress kept, recomputed on resume.  B = 4, 4 blocks.
        A: prompt 4, final 10; R: prompt 4, final 11; W: prompt 4, final 6; all arrive at step 0.
        step 0: A takes cdiv(5, 4) = 2 blocks, R 2 (free 0), W waits (needs 2). Lengths 5, 5.
        steps 1-3: 6,6 / 7,7 / 8,8.
        step 4: A needs a block, none free: the newest, R, is preempted (2 back), goes to the queue's
          front, ahead of W: [R, W]; A takes one (free 1); no admission. A 9.
        step 5: R needs cdiv(8 + 1, 4) = 3 > 1: the queue is blocked. A 10 = final, leaves (free 4).
        step 6: R admitted with 3 blocks (free 1), recomputing its 8 tokens; W needs 2 > 1. R 9.
        steps 7, 8: R 10, 11 = final, leaves (free 4).
        step 9: W admitted (2 blocks), 5; step 10: 6 = final.
        11 steps. Token states 10+12+14+16 + 9+10 + 9+10+11 + 5+6 = 112; allocated 4 x 16 + 5 x 12 + 2 x 8
        = 140 slots: 140 - 112 = 28 tail slots, 11 x 16 - 140 = 36 free.  Token-steps 6 + 7 + 2 = 15.
        Queue delay: A 0, R 6 - 4 = 2 (from its preemption), W 9 - 0 = 9: 11 / 3.
        Latency: A (5 + 1) / 6 = 1, R (8 + 1) / 7, W (10 + 1) / 2."""
        r = both("paged", 16, 4, 32, given([4, 4, 4], [10, 11, 6]))
        assert (11, 1, 15, 2) == (r.steps, r.preemptions, r.token_steps, r.peak_running)
        assert 8 == r.recomputed_tokens, "rule: a resumed request recomputes prompt + generated tokens (4 + 4)"
        assert (112, 0, 28, 0, 36) == shares(r), "rule: preempted request re-queued at the front, progress kept"
        assert pytest.approx(11 / 3) == r.avg_queue_delay_steps, "rule: queue delay counts the wait after preemption"
        assert pytest.approx((1 + 9 / 7 + 11 / 2) / 3) == r.normalized_latency
        assert pytest.approx(15 / 11) == r.avg_running == r.tokens_per_step
        assert pytest.approx(100 * 112 / 176) == r.shares_percent["token_states"]

    def test_events_only_where_a_decision_can_change(self):
        """The event-driven simulator works out in full only the steps where something can change (an
        admission, a finish, a preemption) and sums the quiet ones: on_step sees exactly those.
        The A, R, W case above: 0 (two admitted), 4 (the pool runs out: preemption), 5 (A finishes),
        6 (R readmitted), 8 (R finishes), 9 (W admitted), 10 (W finishes); steps 1-3 and 7 are quiet.
        Two requests of prompt 4, final 20, B = 4, 6 blocks: 2 blocks each at step 0 (free 2); at step 4
        both take their third (free 0); at step 8 both need a fourth: R is preempted (3 back) and A takes
        one; A finishes at step 15 (length 13 after step 8, + 7); R is readmitted at 16 with cdiv(13, 4) =
        4 blocks and finishes at 23.  Events 0, 8, 15, 16, 23 (step 4 is quiet: 2 blocks were free)."""
        states = []
        simulate(ANY, "paged", 16, 4, 32, requests=given([4, 4, 4], [10, 11, 6]), on_step=states.append)
        steps = [s["step"] for s in states]
        assert [0, 4, 5, 6, 8, 9, 10] == steps, "rule: the pool running out is found in closed form"
        # the state shown at each event (the live map's input): lengths after the step, finals, free blocks
        got = [(s["lengths"], s["finals"], s["free_blocks"]) for s in states[:3]]
        assert [([5, 5], [10, 11], 0), ([9], [10], 1), ([10], [10], 1)] == got, "rule: on_step state at an event"
        steps.clear()
        r = simulate(ANY, "paged", 24, 4, 32, requests=given([4, 4], [20, 20]),
                     on_step=lambda s: steps.append(s["step"]))
        assert [0, 8, 15, 16, 23] == steps, "rule: the pool runs out when the free blocks are used up, not before"
        assert (1, 12, 24) == (r.preemptions, r.recomputed_tokens, r.steps)

    def test_no_wake_when_the_head_still_cannot_fit(self):
        """After a finish the loop wakes at the next step only if the queue's head then fits: its blocks
        plus the watermark within the free blocks less those the running requests take at that step.
        B = 4, 6 blocks, watermark 0.2 -> int(1.2) = 1 block.  X: prompt 4, final 20; Y: prompt 4, final 8;
        H: prompt 12, final 14 (cdiv(13, 4) = 4 blocks); T: prompt 1, final 2 (1 block); all at step 0.
        0: X takes 2 (alone: no watermark), Y 2 + 1 <= 4 (free 2), H 4 + 1 > 2 blocks the queue (T too).
        3: Y finishes (free 4); at step 4 X takes its 3rd block (its 9th token), so H would need
          4 + 1 <= 4 - 1: no; no wake at 4 (not for T behind it, not without the watermark, not without
          X's block).
        15: X finishes (it took blocks at 4, 8, 12; free 1 + 5 = 6); H fits (nothing runs: no watermark).
        16: H admitted (4, free 2), T 1 + 1 <= 2 admitted, T finishes.  17: H finishes (18 steps)."""
        states = []
        r = simulate(ANY, "paged", 24, 4, 32, requests=given([4, 4, 12, 1], [20, 8, 14, 2]), watermark=0.2,
                     on_step=states.append)
        assert [0, 3, 15, 16, 17] == [s["step"] for s in states], "rule: wake only when the head fits"
        assert (18, 2) == (r.steps, r.peak_running)

    def test_closed_loop_events(self):
        """Closed loop, concurrency 2: a request enters only when one leaves, so the loop wakes for a new
        one only then.  Paged, B = 4, 32 blocks, 3 requests of prompt 2, final 5 (1 block each): 0 (two
        enter and are admitted), 2 (both finish), 3 (the third enters, admitted), 5 (it finishes).
        Then a pool of 3 blocks, 3 requests of prompt 4, final 10 (2 blocks at admission, a 3rd at the
        step whose token is the 9th): 0 (two enter, one admitted: 2 + 2 > 3), 5 (it finishes), 6 (the
        second admitted, the third enters and waits), 11, 12, 17.  Nothing happens in between: two
        requests are in the system, so none may enter."""
        w = Workload("c", Lengths("fixed", 2), Lengths("fixed", 3), requests=3, arrival="closed", concurrency=2)
        steps = []
        simulate(w, "paged", 128, 4, 16, on_step=lambda s: steps.append(s["step"]))
        assert [0, 2, 3, 5] == steps, "rule: closed loop, a request enters when one leaves"
        w = Workload("c", Lengths("fixed", 4), Lengths("fixed", 6), requests=3, arrival="closed", concurrency=2)
        steps.clear()
        r = simulate(w, "paged", 12, 4, 16, on_step=lambda s: steps.append(s["step"]))
        assert [0, 5, 6, 11, 12, 17] == steps, "rule: closed loop, a waiting request counts in the concurrency"
        assert (18, 0, 1) == (r.steps, r.preemptions, r.peak_running)

    def test_admission_needs_prompt_plus_steps_token(self):
        """Prompt 4 (one full block), final 6, B = 4, 2 blocks: the first takes cdiv(4 + 1, 4) = 2, so the
        second waits until the first leaves at step 1 and runs steps 2 and 3 (admitted with 1 block it
        would be preempted at once). Queue delay 2 / 2 = 1."""
        r = both("paged", 8, 4, 32, given([4, 4], [6, 6]))
        assert (4, 0, 1, 1.0) == (r.steps, r.preemptions, r.peak_running, r.avg_queue_delay_steps), \
            "rule: admission needs prompt + the step's token"

    def test_head_fits_exactly(self):
        """Admission when the free blocks equal the need: 4 blocks, A needs 2 (prompt 4), C prompt 6 needs
        cdiv(7, 4) = 2 = the 2 left: both run at step 0."""
        r = both("paged", 16, 4, 32, given([4, 6], [6, 8]))
        assert (2, 2) == (r.peak_running, r.steps), "rule: a head that needs exactly the free blocks is admitted"

    def test_watermark_boundary(self):
        """vLLM's watermark_blocks = int(watermark x blocks), kept free when admitting while some request
        runs.  4 blocks; A: prompt 4 (2 blocks); C: prompt 2, final 3 (cdiv(3, 4) = 1 block).
        watermark 0.25 -> 1 block: 1 + 1 = 2 <= 2 free: admitted together (peak 2, 2 steps).
        watermark 0.3 -> int(1.2) = 1: the same.  watermark 0.5 -> 2 blocks: 1 + 2 > 2: C waits until A
        leaves at step 1, runs at step 2 (3 steps, peak 1)."""
        reqs = given([4, 2], [6, 3])
        peaks = [both("paged", 16, 4, 32, reqs, watermark=wm).peak_running for wm in (0.25, 0.3)]
        assert [2, 2] == peaks, "rule: watermark, admitted while need + watermark <= free"
        r = both("paged", 16, 4, 32, reqs, watermark=0.5)
        assert (1, 3) == (r.peak_running, r.steps), "rule: watermark blocks kept free"

    def test_watermark_not_applied_to_an_empty_pool(self):
        """The watermark applies once some request is scheduled: alone, prompt 12 (cdiv(13, 4) = 4 blocks,
        the whole pool) is admitted at step 0 despite watermark 0.5: final 14, 2 steps."""
        r = both("paged", 16, 4, 32, given([12], [14]), watermark=0.5)
        assert (2, 0.0) == (r.steps, r.avg_queue_delay_steps), "rule: no watermark when nothing runs"

    def test_block_boundary_needs_a_block(self):
        """A request takes a block at the step whose token starts one: prompt 3, final 9, B = 4, pool 2
        blocks of 4 = 8 slots cannot hold 9 tokens -> refused; with 3 blocks: 1 block at admission (3 + 1
        = 4 tokens), a 2nd at step 1 (5th token), a 3rd at step 5 (9th token): allocated 4, 8 x 4, 12 =
        48 slots over 6 steps; tokens 4+5+6+7+8+9 = 39; tail 9; free 6 x 12 - 48 = 24."""
        with pytest.raises(InputError, match="cannot hold even the longest request"):
            simulate(ANY, "paged", 8, 4, 32, requests=given([3], [9]))
        r = both("paged", 12, 4, 32, given([3], [9]))
        assert (39, 0, 9, 0, 24) == shares(r), "rule: a new block when a token starts one"

    def test_prefix_stored_once(self):
        """paged-prefix, prefix 10 tokens, B = 4: 10 // 4 = 2 whole prefix blocks shared.  Two requests of
        prompt 10, final 12, 16 blocks.  Step 0: the first takes cdiv(11, 4) = 3 blocks (2 of them the
        prefix), the second 3 - 2 = 1: 4 blocks = 16 slots; tokens 11 + 11 less the prefix stored once,
        (2 - 1) x 8 = 8: 14.  Step 1: 12 + 12 - 8 = 16 in 16 slots (no block boundary: 11 % 4 != 0); both
        leave.  Token states 30, tail 2, free 2 x 64 - 32 = 96.  Plain paged stores the prefix twice: 6
        blocks = 24 slots a step: tokens 22 + 24 = 46, tail 2, free 128 - 48 = 80."""
        w = Workload("p", Lengths("fixed", 10), Lengths("fixed", 2), requests=2, prefix=10)
        reqs = given([10, 10], [12, 12])
        shared = both("paged-prefix", 64, 4, 32, reqs, w=w)
        assert (30, 0, 2, 0, 96) == shares(shared), "rule: prefix blocks stored once"
        assert (46, 0, 2, 0, 80) == shares(both("paged", 64, 4, 32, reqs, w=w)), "rule: plain paged stores each prefix"

    def test_no_prefix_paged_prefix_is_paged(self):
        """Without a prefix (the default 0) paged-prefix shares nothing: it equals paged exactly, for
        B = 1 (0 // 1 = 0 prefix blocks) and B = 4."""
        w = Workload("n", Lengths("uniform", 1, 9), Lengths("uniform", 1, 9), requests=12, rate=2.0)
        for B in (1, 4):
            reqs = draw_requests(w, 1, 32)
            a = both("paged-prefix", 40, B, 32, reqs, w=w).to_json()
            b = both("paged", 40, B, 32, reqs, w=w).to_json()
            a.pop("policy"), b.pop("policy")
            assert a == b, f"rule: no prefix, nothing shared (B = {B})"

    def test_prefix_freed_with_its_last_holder(self):
        """The prefix blocks are freed when no running request holds them: prefix 8, B = 4 (2 blocks),
        pool 4 blocks.  A: prompt 8, final 9 (cdiv(9, 4) = 3 blocks: 2 prefix + 1) runs step 0 and leaves;
        B arrives at step 1: it needs 3 blocks again (the prefix is stored anew) and they are free (4):
        2 steps, 9 + 9 tokens in 12 + 12 slots."""
        w = Workload("p", Lengths("fixed", 8), Lengths("fixed", 1), requests=2, prefix=8)
        r = both("paged-prefix", 16, 4, 32, given([8, 8], [9, 9], [0, 1]), w=w)
        assert (18, 0, 6, 0, 8) == shares(r), "rule: a prefix no running request holds is freed"


# --- contiguous, worked by hand -------------------------------------------------------------------------

class TestContiguousByHand:
    def test_output_length_one(self):
        """Prompt 8, final 9, one step, 32 slots: Max reserves max-len 32 (tokens 9, over-reservation 23);
        Pow2 the prompt + next_pow2(output 1) = 8 + 1 = 9 (the paper's rule, issue 28: tokens 9, free 23; it
        rounded the whole 9 up to 16 before); Oracle 9 (free 23)."""
        reqs = given([8], [9])
        assert (9, 0, 23, 0, 0) == shares(both("max", 32, 4, 32, reqs)), "rule: Max reserves max-len"
        assert (9, 0, 0, 0, 23) == shares(both("pow2", 32, 4, 32, reqs)), "rule: Pow2 = prompt + next_pow2(output)"
        assert (9, 0, 0, 0, 23) == shares(both("oracle", 32, 4, 32, reqs)), "rule: Oracle reserves the final length"

    def test_reservation_and_external_fragmentation(self):
        """Oracle, first-fit, 20 slots: A prompt 2, final 12 (reserves 12), B prompt 2, final 10 (10 > 8
        free: waits, so the 8 free slots are external fragmentation).  A runs steps 0-9 (tokens 3..12):
        token states 75, reservation 12 x 10 - 75 = 45, external 8 x 10 = 80.  B admitted at step 10,
        runs steps 10-17 (3..10): 52 tokens, reservation 80 - 52 = 28, free 10 x 8 = 80."""
        r = both("oracle", 20, 4, 32, given([2, 2], [12, 10]))
        assert 18 == r.steps
        assert (127, 73, 0, 80, 80) == shares(r), "rule: free slots while the head waits are external fragmentation"
        assert pytest.approx(10 / 2) == r.avg_queue_delay_steps

    def test_intervals_and_their_state(self):
        """Contiguous runs are summed over intervals that end where something changes: a finish, or the
        step before an arrival that can be admitted at once; on_step sees each interval's last step.
        Oracle, 20 slots: A prompt 2, final 12 (finishes at 0 + 12 - 2 - 1 = 9) and C prompt 2, final 6
        at step 0: one interval [0, 3] (C finishes at 3; A holds 2 + 4 = 6 tokens then), then [4, 9].
        With C arriving at step 5 instead: [0, 4] (the step before C's arrival), [5, 8] (C finishes at
        5 + 3 = 8; A holds 2 + 9 = 11), [9, 9]."""
        states = []
        simulate(ANY, "oracle", 20, 4, 32, requests=given([2, 2], [12, 6]), on_step=states.append)
        got = [(s["steps"], sorted(s["running"])) for s in states]
        assert [(4, [(6, 6, 6), (12, 12, 6)]), (6, [(12, 12, 12)])] == got, "rule: (reserved, final, tokens)"
        states.clear()
        simulate(ANY, "oracle", 20, 4, 32, requests=given([2, 2], [12, 6], [0, 5]), on_step=states.append)
        got = [(s["steps"], sorted(s["running"])) for s in states]
        assert [(5, [(12, 12, 7)]), (4, [(6, 6, 6), (12, 12, 11)]), (1, [(12, 12, 12)])] == got, \
            "rule: an interval ends the step before an arrival that fits"

    def test_buddy_rounds_reservations(self):
        """Oracle under buddy reserves next_pow2(final): final 9 -> 16, 7 slots of rounding (internal)."""
        r = both("oracle", 32, 4, 32, given([8], [9]), allocator="buddy")
        assert (9, 0, 7, 0, 16) == shares(r), "rule: buddy rounds a reservation up to a power of two"


# --- allocators -------------------------------------------------------------------------------------------

class TestBuddy:
    def test_regions_of_a_non_power_of_two_pool(self):
        """15,728 = 8,192 + 4,096 + 2,048 + 1,024 + 256 + 64 + 32 + 16 (its binary digits, largest first)."""
        b = Buddy(15_728)
        assert [13, 12, 11, 10, 8, 6, 5, 4] == b.orders, "rule: one buddy region per binary digit of the pool"
        assert [0, 8192, 12288, 14336, 15360, 15616, 15680, 15712] == b.bases
        assert [k for k in range(14) if b.free_sets[k]] == [4, 5, 6, 8, 10, 11, 12, 13]

    def test_odd_pool_has_a_one_slot_region(self):
        """5 slots = 4 + 1: regions at 0 (order 2) and 4 (order 0); alloc(1) takes the 1-slot region first
        (the smallest free block that fits), then 1 slot of the 4 region."""
        b = Buddy(5)
        assert ([0, 4], [2, 0]) == (b.bases, b.orders), "rule: the lowest binary digit is a region too"
        assert (4, 1) == b.alloc(1) and (0, 1) == b.alloc(1)

    def test_smallest_block_lowest_address(self):
        """alloc(1) takes 1 slot from the smallest free block, the 16-slot region at 15,712 (split into
        1 + 1 + 2 + 4 + 8); alloc(16) then splits the 32-slot region at 15,680; alloc(3) takes the
        4-slot block at 15,716; alloc(17) rounds to 32 and splits the 64 region at 15,616."""
        b = Buddy(15_728)
        assert (15712, 1) == b.alloc(1), "rule: the smallest free block that fits"
        assert (15680, 16) == b.alloc(16)
        assert (15716, 4) == b.alloc(3), "rule: a request takes the next power of two"
        assert (15616, 32) == b.alloc(17)
        assert (15713, 1) == b.alloc(1)

    def test_seven_max_reservations(self):
        """Max reservations of 2,048 in 15,728 slots: 7 fit (the 2,048 region, then the 4,096 one, then the
        8,192 one), the 8th does not; freeing them all leaves the eight regions (no merge across)."""
        b = Buddy(15_728)
        got = [b.alloc(2048) for _ in range(8)]
        assert [s for s, _ in got[:7]] == [12288, 8192, 10240, 0, 2048, 4096, 6144] and got[7] is None
        for start, size in got[:7]:
            b.free(start, size)
        assert [k for k in range(14) if b.free_sets[k]] == [4, 5, 6, 8, 10, 11, 12, 13], "rule: regions never merge"
        assert (0, 8192) == b.alloc(8192), "rule: freed buddies merge back within their region"

    def test_merge_inside_a_region(self):
        """Pool 48 = 32 + 16: two 16-slot blocks of the 32 region merge back into 32 when both are free."""
        b = Buddy(48)
        assert (32, 16) == b.alloc(16) and (0, 16) == b.alloc(16) and (16, 16) == b.alloc(16)
        assert b.alloc(1) is None
        b.free(0, 16)
        b.free(16, 16)
        assert (0, 32) == b.alloc(32), "rule: buddies merge"
        b.free(32, 16)
        assert {32} == b.free_sets[4] and not b.free_sets[5]


class TestFirstFit:
    def test_first_hole_not_best(self):
        """FirstFit(100): 10 @ 0, 5 @ 10, 10 @ 15, 5 @ 25; free the two 10s: holes (0, 10), (15, 10),
        (30, 70).  alloc(5) takes the first hole that fits, at 0 (not a best fit)."""
        f = FirstFit(100)
        assert [(0, 10), (10, 5), (15, 10), (25, 5)] == [f.alloc(n) for n in (10, 5, 10, 5)]
        f.free(0, 10)
        f.free(15, 10)
        assert ([0, 15, 30], [10, 10, 70]) == (f.starts, f.sizes)
        assert (0, 5) == f.alloc(5), "rule: first fit"
        assert (15, 10) == f.alloc(10) and (30, 70) == f.alloc(70), "rule: a hole of exactly the size is used"
        assert f.alloc(1) is not None and f.alloc(5) is None

    def test_merges_both_sides(self):
        """Freeing the middle block between two holes merges the three into one."""
        f = FirstFit(30)
        a, b, c = f.alloc(10), f.alloc(10), f.alloc(10)
        f.free(*a)
        f.free(*c)
        assert ([0, 20], [10, 10]) == (f.starts, f.sizes)
        f.free(*b)
        assert ([0], [30]) == (f.starts, f.sizes), "rule: freed neighbours merge"


# --- the pool check ---------------------------------------------------------------------------------------

class TestCheckPool:
    def test_block_size_bounds(self):
        """1 <= block size <= pool slots: 1 and 16 of 16 are accepted, 0 and 17 refused."""
        reqs = given([2], [4])
        assert check_pool("paged", reqs, 16, 1, 32, "first-fit", 0) is None
        assert check_pool("paged", reqs, 16, 16, 32, "first-fit", 0) is None
        for bad in (0, 17):
            with pytest.raises(InputError, match="--block-size"):
                check_pool("paged", reqs, 16, bad, 32, "first-fit", 0)

    def test_paged_longest_request(self):
        """Paged: the longest request's cdiv(final, B) blocks must fit the pool's whole blocks: final 16,
        B 8 -> 2 blocks: 16 slots (2 blocks) fit, 23 slots (2 blocks) fit, 15 slots (1 block) do not,
        whatever the shorter requests (final 3: 1 block)."""
        reqs = given([4, 2], [16, 3])
        assert check_pool("paged", reqs, 16, 8, 32, "first-fit", 0) is None
        assert check_pool("paged", reqs, 23, 8, 32, "first-fit", 0) is None
        with pytest.raises(InputError, match=r"cannot hold even the longest request \(16 tokens\)"):
            check_pool("paged", reqs, 15, 8, 32, "first-fit", 0)

    def test_contiguous_largest_reservation(self):
        """First-fit: Max reservation 32 in 32 slots fits, in 31 not.  Buddy: Oracle final 17 rounds to 32,
        which fits the 32-slot region of a 48 pool but not the largest region, 16, of 31."""
        reqs = given([4, 1], [17, 2])
        assert [32, 32] == check_pool("max", reqs, 32, 4, 32, "first-fit", 0).tolist()
        with pytest.raises(InputError, match="one max reservation of 32"):
            check_pool("max", reqs, 31, 4, 32, "first-fit", 0)
        assert [17, 2] == check_pool("oracle", reqs, 48, 4, 32, "buddy", 0).tolist()
        with pytest.raises(InputError, match="one oracle reservation of 32"):
            check_pool("oracle", reqs, 31, 4, 32, "buddy", 0)
        assert [1] == check_pool("oracle", given([1], [1]), 1, 1, 32, "buddy", 0).tolist()
        # Pow2: prompt 4 + next_pow2(13) = 20; prompt 1 + next_pow2(1) = 2 (the paper's rule, issue 28)
        assert [20, 2] == check_pool("pow2", reqs, 32, 4, 32, "first-fit", 0).tolist()
        with pytest.raises(InputError, match="one oracle reservation of 17"):
            check_pool("oracle", reqs, 16, 4, 32, "first-fit", 0)

    def test_unknown_policy_or_allocator(self):
        """Names outside the lists are refused with the list (one line, InputError)."""
        with pytest.raises(InputError, match="--policies.*expected some of: max, pow2"):
            simulate(ANY, "lru", 16, 4, 16)
        with pytest.raises(InputError, match="--allocator.*expected one of: first-fit, buddy"):
            simulate(ANY, "max", 16, 4, 16, "best-fit")

    def test_defaults(self):
        """simulate's defaults: seed 0, no per-step trace, first-fit, no watermark; a Result's redrawn and
        clipped counts default to 0."""
        w = Workload("d", Lengths("uniform", 1, 20), Lengths("uniform", 1, 20), requests=30)
        r = simulate(w, "paged", 64, 4, 64)
        assert r.to_json() == simulate(w, "paged", 64, 4, 64, seed=0).to_json(), "rule: seed 0 by default"
        assert r.to_json() != simulate(w, "paged", 64, 4, 64, seed=1).to_json()
        ref = simulate_reference(w, "paged", 64, 4, 64).to_json()
        assert ref == simulate_reference(w, "paged", 64, 4, 64, seed=0).to_json(), "rule: the reference's seed is 0"
        assert ref != simulate_reference(w, "paged", 64, 4, 64, seed=1).to_json()
        assert all(v == [] for v in r.trace.values()), "rule: no trace unless asked"
        assert simulate(w, "pow2", 64, 4, 64).to_json() == simulate(w, "pow2", 64, 4, 64, "first-fit").to_json()
        fields = {k: v for k, v in r.__dict__.items() if k not in ("redrawn", "clipped")}
        bare = type(r)(**fields)
        assert (0, 0) == (bare.redrawn, bare.clipped), "rule: a result's redrawn and clipped default to 0"


# --- shares, traces, callbacks --------------------------------------------------------------------------

def _random_case(seed):
    rnd = random.Random(seed)
    B = rnd.choice([1, 2, 4, 8])
    max_len = 64
    n = rnd.randint(1, 30)
    policy = POLICIES[seed % len(POLICIES)]
    allocator = ALLOCATORS[seed // len(POLICIES) % 2]
    kinds = [Lengths("fixed", rnd.randint(1, 30)), Lengths("uniform", rnd.randint(1, 10), rnd.randint(10, 40)),
             Lengths("lognormal", rnd.uniform(3, 25), rnd.uniform(0.2, 1.0))]
    prefix = rnd.choice([0, 0, rnd.randint(1, 24)])
    w = Workload("r", rnd.choice(kinds), rnd.choice(kinds), requests=n, rate=rnd.uniform(0.1, 4),
                 arrival=rnd.choice(["closed", "poisson"]), concurrency=rnd.randint(1, 10), prefix=prefix, clip=True)
    paged = policy.startswith("paged")
    capacity = rnd.randint(max_len, 3 * max_len) if paged else rnd.randint(max_len, 4 * max_len)
    return w, policy, allocator, capacity, B, max_len, rnd.choice([0.0, 0.0, 0.1]), rnd.randint(0, 99)


@pytest.mark.parametrize("case", range(60))
def test_fast_equals_reference(case):
    """60 fixed random workloads (every policy and allocator, closed and Poisson, prefixes, watermarks,
    tight pools that preempt): the event-driven simulator equals the reference, the shares sum to the
    pool every step, and every output token is generated once (token-steps = the sum of the outputs)."""
    w, policy, allocator, capacity, B, max_len, wm, seed = _random_case(case)
    reqs = draw_requests(w, seed, max_len)
    r = both(policy, capacity, B, max_len, reqs, w=w, allocator=allocator, watermark=wm)
    assert sum(r.slot_steps.values()) == r.steps * capacity, "rule: the five shares sum to the pool"
    assert r.token_steps == int(reqs.output.sum()), "rule: progress is never lost nor generated twice"


def _wide_case(seed):
    """A wider generator than ``_random_case``: block size 1 (a block every step), short maximum lengths,
    tight pools.  Some of its seeds reach rare branches of the event loop (see ``HUNTED``)."""
    rnd = random.Random(seed)
    B = rnd.choice([1, 2, 4, 8])
    max_len = rnd.choice([16, 32, 64])
    n = rnd.randint(1, 25)
    policy = rnd.choice(POLICIES)
    allocator = rnd.choice(ALLOCATORS)
    kinds = [Lengths("fixed", rnd.randint(1, max_len // 2)), Lengths("uniform", 1, rnd.randint(2, max_len // 2)),
             Lengths("lognormal", rnd.uniform(2, max_len / 3), rnd.uniform(0.2, 1.0))]
    w = Workload("r", rnd.choice(kinds), rnd.choice(kinds), requests=n, rate=rnd.uniform(0.1, 5),
                 arrival=rnd.choice(["closed", "poisson"]), concurrency=rnd.randint(1, 10),
                 prefix=rnd.choice([0, rnd.randint(1, max_len // 2)]), clip=True)
    cap = rnd.randint(max_len, 3 * max_len)
    return w, policy, allocator, cap, B, max_len, rnd.choice([0.0, 0.1]), rnd.randint(0, 99)


# Seeds of _wide_case on which a wrong event-loop rule shows, found by the mutation run (benchmarks/mutation.py):
# 5: the pool's exhaustion step must be the earlier of it and the next finish (min, not max);
# 14: the bound "c blocks per B steps over the quiet steps" must count e - 1 - t steps (not one fewer);
# 37: the exhaustion check must run when the next event is two steps ahead.
HUNTED = [5, 14, 37]


@pytest.mark.parametrize("seed", HUNTED)
def test_hunted_cases(seed):
    """On these cases the event-driven simulator equals the reference, and its per-step trace (one row
    per busy step) sums to the same shares."""
    w, policy, allocator, capacity, B, max_len, wm, s = _wide_case(seed)
    reqs = draw_requests(w, s, max_len)
    r = both(policy, capacity, B, max_len, reqs, w=w, allocator=allocator, watermark=wm)
    tr = simulate(w, policy, capacity, B, max_len, allocator, requests=reqs, watermark=wm, trace_every=1).trace
    assert len(tr["step"]) == r.steps and sum(tr["running"]) == r.token_steps, "rule: one trace row a busy step"
    for k in SHARES:
        assert sum(tr[k]) * capacity / 100 == pytest.approx(r.slot_steps[k], abs=1e-6), f"rule: trace {k} per step"


def test_cases_preempt():
    """The random cases above do exercise preemption (else they would not test rule 1)."""
    pre = 0
    for case in range(0, 60, 5):
        w, policy, allocator, capacity, B, max_len, wm, seed = _random_case(case + 3)
        pre += simulate(w, "paged", capacity, B, max_len, seed=seed).preemptions
    assert pre > 0


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_trace_rows(policy, allocator):
    """The per-step trace (``--trace-every``): with every = 1 one row per busy step, whose shares are
    the step's (summed over rows they give the totals, each row sums to 100 %); with every = 3 the rows
    of the busy steps that are multiples of 3, equal to the every-1 rows there; the state passed to
    ``on_step`` at an event step equals that step's row."""
    w = Workload("t", Lengths("uniform", 2, 20), Lengths("uniform", 1, 30), requests=40, rate=0.8, prefix=6)
    states = []
    r1 = simulate(w, policy, 160, 4, 64, allocator, seed=4, trace_every=1, on_step=states.append)
    tr = r1.trace
    assert len(tr["step"]) == r1.steps and sum(tr["running"]) == r1.token_steps, "rule: one trace row a busy step"
    for k in SHARES:
        assert sum(tr[k]) * 160 / 100 == pytest.approx(r1.slot_steps[k], abs=1e-6), f"rule: trace {k} per step"
    for i in range(len(tr["step"])):
        assert sum(tr[k][i] for k in SHARES) == pytest.approx(100), "rule: each step's shares sum to 100 %"
    r3 = simulate(w, policy, 160, 4, 64, allocator, seed=4, trace_every=3).trace
    rows = {s: i for i, s in enumerate(tr["step"])}
    assert r3["step"] == [s for s in tr["step"] if s % 3 == 0], "rule: --trace-every 3 keeps steps 0, 3, 6 ..."
    for j, s in enumerate(r3["step"]):
        for k in ("running", *SHARES):
            assert r3[k][j] == pytest.approx(tr[k][rows[s]]), f"rule: trace row of step {s}"
    for st in states:
        step = st.get("step")
        if step is None:  # contiguous: the state at the last step of each interval
            step = tr["step"][sum(x["steps"] for x in states[: states.index(st) + 1]) - 1]
        row = rows[step]
        for k in SHARES:
            assert 100 * st["shares"][k] / 160 == pytest.approx(tr[k][row]), f"rule: on_step {k} at step {step}"


def test_progress_every_64_steps():
    """Progress of a paged run is reported at steps that are multiples of 64 when a request finished:
    closed loop, concurrency 1, prompt 1, output 1: request i finishes at step i, so over 200 requests
    the calls are at steps 0, 64, 128, 192 with 1, 65, 129, 193 finished.  Contiguous runs report
    after every finish (200 calls, the last 200)."""
    w = Workload("p", Lengths("fixed", 1), Lengths("fixed", 1), requests=200, arrival="closed", concurrency=1)
    calls = []
    simulate(w, "paged", 16, 4, 8, progress=calls.append)
    assert [1, 65, 129, 193] == calls, "rule: paged progress every 64 steps"
    calls.clear()
    simulate(w, "oracle", 16, 4, 8, progress=calls.append)
    assert list(range(1, 201)) == calls


def test_closed_loop_keeps_concurrency():
    """Closed loop, concurrency 2: a new request enters when one leaves.  Prompt 2, output 3 (final 5),
    4 requests, Oracle on 20 slots: two at steps 0-2, two at steps 3-5: 6 steps, peak 2, no queueing."""
    w = Workload("c", Lengths("fixed", 2), Lengths("fixed", 3), requests=4, arrival="closed", concurrency=2)
    for policy in ("oracle", "paged"):
        r = both(policy, 20, 4, 8, draw_requests(w, 0, 8), w=w)
        assert (6, 2, 0.0) == (r.steps, r.peak_running, r.avg_queue_delay_steps), f"rule: closed loop ({policy})"
        assert 1.0 == r.normalized_latency
        # the trace starts at step 0: two requests of 3 tokens (prompt 2 + this step's) = 6 of 20 slots = 30 %
        tr = simulate(w, policy, 20, 4, 8, trace_every=1).trace
        assert [0, 1, 2, 3, 4, 5] == tr["step"] and 30.0 == tr["token_states"][0], "rule: closed loop from step 0"


# --- capacity.py ------------------------------------------------------------------------------------------

class TestCapacity:
    def test_parse_rates(self):
        """A:B:N gives N evenly spaced rates: 1:2:3 -> 1, 1.5, 2; 0.5:0.5:1 -> 0.5; N from 1 to 200."""
        assert [1.0, 1.5, 2.0] == parse_rates("1:2:3"), "rule: rates evenly spaced from A to B"
        assert [0.5] == parse_rates("0.5:0.5:1")
        assert 200 == len(parse_rates("1:2:200"))
        assert [1.0, 2.0] == parse_rates("1:2:2")

    @pytest.mark.parametrize("text", ["1:2", "1:2:3:4", "a:2:3", "0:1:2", "2:1:2", "1:2:1", "1:2:0", "1:2:201",
                                      "inf:inf:2", "-1:1:2"])
    def test_parse_rates_refused(self, text):
        with pytest.raises(InputError, match="--rates"):
            parse_rates(text)

    def test_capacity_at_the_bound(self):
        """One request of output 4 alone in the pool runs without waiting: normalized latency exactly
        (3 - 0 + 1) / 4 = 1.0 at every rate; with the bound 1.0 (latency <= bound) every rate is within,
        so capacity is the top rate, 2; paged/oracle = 2 / 2 = 1."""
        w = Workload("c", Lengths("fixed", 4), Lengths("fixed", 4), requests=1)
        c = capacity_sweep(w, ["paged", "oracle"], 64, 4, 16, [1.0, 2.0], bound=1.0)
        assert {"paged": [1.0, 1.0], "oracle": [1.0, 1.0]} == c.latency
        assert {"paged": 2.0, "oracle": 2.0} == c.capacity, "rule: a latency equal to the bound is within it"
        assert {"paged/oracle": 1.0} == c.ratios

    def test_capacity_stops_at_the_first_rate_above(self):
        """Two requests of prompt 4, output 4 (final 8) on a 2-block pool of B = 4: only one fits, so at a
        rate where both arrive at step 0 the second waits 4 steps: latency (3 + 1) / 4 = 1 and (7 + 1) / 4
        = 2, mean 1.5 > bound 1.2.  At rate 0.1 they arrive far apart (latency 1).  Capacity 0.1, and
        None when even the lowest rate is above the bound."""
        w = Workload("c", Lengths("fixed", 4), Lengths("fixed", 4), requests=2)
        c = capacity_sweep(w, ["paged"], 8, 4, 8, [0.1, 100.0], bound=1.2)
        assert c.latency["paged"][0] == 1.0 and c.latency["paged"][1] == 1.5
        assert 0.1 == c.capacity["paged"], "rule: capacity is the highest rate within the bound"
        c = capacity_sweep(w, ["paged", "max"], 8, 4, 8, [100.0], bound=1.2)
        assert c.capacity == {"paged": None, "max": None} and c.ratios == {"paged/max": None}

    def test_progress_called_per_run(self):
        calls = []
        w = Workload("c", Lengths("fixed", 4), Lengths("fixed", 4), requests=1)
        capacity_sweep(w, ["paged", "max"], 64, 4, 16, [1.0, 2.0, 3.0], bound=2.0, progress=lambda: calls.append(1))
        assert 6 == len(calls)



class TestTraceWords:
    """A refused trace line is shown as the file has it, at most 40 characters; a trace's workload name says when
    its rows were repeated.  Rules of kvdash/simulate/workload.py a mutation run found unguarded (2026-12-07)."""

    def test_a_line_of_40_characters_is_shown_whole_and_41_cut_to_40(self):
        from kvdash.simulate.workload import _shown

        forty, forty_one = "x" * 40, "y" * 41
        assert forty == _shown(f"  {forty}\n")  # stripped, then whole: 40 <= 40
        assert "y" * 37 + "..." == _shown(forty_one) and 40 == len(_shown(forty_one))  # 37 kept + 3 dots

    def test_a_trace_as_long_as_the_run_is_named_alone(self):
        from kvdash.simulate.workload import trace_name

        assert "trace t.csv" == trace_name("t.csv", 3, 3) == trace_name("t.csv", 4, 3) == trace_name("t.csv", 3, None)
        assert "trace t.csv (3 rows, repeated in order to 4 requests)" == trace_name("t.csv", 3, 4)

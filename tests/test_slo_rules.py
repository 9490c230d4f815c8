"""The SLO search's rules (kvdash/simulate/slo.py, issue 28), each worked by hand on a scripted engine.

``slo_search`` and ``rate_curve`` are driven here by a stand-in for one timed run (``run_point`` / ``schedule``):
its latencies are a stated function of the users or the rate, so every step of the doubling, the bisection, the
steady-state checks and the binding limit can be followed by hand.  The same code on the real simulator is tested
in tests/test_time.py (``test_slo_search_finds_a_boundary``, ``test_calc_slo_json``).  No plugins, under a second:
the mutation driver runs this file first (benchmarks/mutation.py).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from kvdash.errors import InputError
from kvdash.simulate import slo

SETUP = {"max_num_seqs": 1024, "kv_requests": 1000, "tp": 1, "consts": None}


def result(tpot_p90_ms: float = 1.0, e2e_mean_ms: float = 1000.0, preemptions: int = 0, peak_running: int = 0,
           requests_per_s: float = 1.0, ttft_p90_ms: float = 1.0) -> SimpleNamespace:
    """A timed run's figures, as :class:`kvdash.simulate.timed.TimedResult` carries them (the fields read)."""
    return SimpleNamespace(ttft_ms={"p90": ttft_p90_ms}, tpot_ms={"p90": tpot_p90_ms},
                           e2e_ms={"p90": e2e_mean_ms, "mean": e2e_mean_ms}, preemptions=preemptions,
                           peak_running=peak_running, requests_per_s=requests_per_s,
                           to_json=lambda: {"tpot_p90_ms": tpot_p90_ms})


def scripted(monkeypatch, by_users, by_rate=lambda r, n: result(tpot_p90_ms=1e9)) -> list[tuple[int, float, int]]:
    """Replace one timed run by ``by_users(c)`` (closed loop of c users) or ``by_rate(r, n)`` (n requests at r
    requests/s; by default no rate meets the SLO); returns the calls made, (users, rate, requests)."""
    calls: list[tuple[int, float, int]] = []

    def run_point(setup, prompt, output, concurrency=0, rate=0.0, *, seed, policy="paged"):
        calls.append((concurrency, rate, len(prompt)))
        return by_users(concurrency) if concurrency else by_rate(rate, len(prompt))

    monkeypatch.setattr(slo, "run_point", run_point)
    return calls


def trace(n: int = 100) -> tuple[np.ndarray, np.ndarray]:
    return np.full(n, 200), np.full(n, 100)


# --- the notes on short runs ----------------------------------------------------------------------------------------

def test_a_closed_loop_is_short_under_ten_requests_a_user():
    # SHORT_RUN = 10: 4 users need 40 requests; 39 is noted with the 40 it needs
    assert slo.short_run_note(40, 4) is None
    assert slo.short_run_note(39, 4) == ("39 requests for 4 users: the first round (every user at once) and the "
                                         "final drain weigh in these figures; about 40 or more approach the steady "
                                         "state")
    assert slo.short_run_note(3, 0) is None  # not a closed loop


def test_a_poisson_run_is_short_under_ten_times_its_requests_in_flight():
    # Little's law: 2 requests/s x 1.5 s mean E2E = 3 in flight; 30 requests are steady, 29 short, 3 a burst
    res = result(e2e_mean_ms=1500.0)
    assert slo.in_flight(res, 2.0) == 3.0
    assert slo.poisson_short_note(30, res, 2.0) is None
    assert slo.poisson_short_note(29, res, 2.0).endswith("about 30 or more approach the steady state")
    assert "29 requests at 2 requests/s with about 3 in flight" in slo.poisson_short_note(29, res, 2.0)
    assert slo.poisson_short_note(4, res, 2.0).startswith("4 requests at 2 requests/s with about 3 in flight")
    assert "arrive faster than they finish" in slo.poisson_short_note(3, res, 2.0)  # held (3) >= requests (3)


def test_the_trace_is_repeated_to_the_requests_a_steady_run_needs():
    p, o = np.array([1, 2, 3]), np.array([4, 5, 6])
    assert slo.repeated(p, o, 3)[0] is p
    rp, ro = slo.repeated(p, o, 5)
    assert rp.tolist() == [1, 2, 3, 1, 2] and ro.tolist() == [4, 5, 6, 4, 5]


# --- the SLO as text, the rate in words ------------------------------------------------------------------------------

def test_slo_text_reads_back_as_parse_slo_wrote_it():
    assert slo.slo_text({"tpot": 0.05, "ttft": 2.0}) == "tpot=50ms,ttft=2s"
    assert slo.slo_text({"e2e": 1.0}) == "e2e=1s"  # 1 s is written in seconds, under it in ms
    assert slo.slo_text({"e2e": 0.999}) == "e2e=999ms"
    assert slo.parse_slo(slo.slo_text({"tpot": 0.05, "ttft": 2.0})) == {"tpot": 0.05, "ttft": 2.0}


def test_rate_words_and_rate_text():
    assert [slo.rate_words(r) for r in (12345.6, 1000.0, 999.4, 23.04, 1.2345, 1.0, 0.8414)] == \
        ["12,346", "1,000", "999.4", "23.04", "1.234", "1", "0.841"]
    found = {"max_rate_per_s": 61.4, "rate_requests": 2000}
    assert slo.rate_text(found, 500) == ("61.4 requests/s (judged over 2,000 requests: the 500 given repeated 4.0 "
                                         "times, to at least 10 x those in flight)")
    assert slo.rate_text({"max_rate_per_s": 61.4, "rate_requests": 500}, 500) == "61.4 requests/s"
    assert slo.rate_text({"max_rate_per_s": None}, 500) == "none"
    assert slo.rate_text({"rate_met_up_to": 1000.0}, 500) == (
        "no limit found: every rate up to 1,000 requests/s meets it, the 500 requests ending before a queue builds "
        "(more --requests)")


def test_arrivals_span_at_most_a_billion_seconds():
    # 1,000 requests at 1e-6 requests/s span 1e9 s: kept; a slower rate is refused in one line
    assert len(slo.arrivals(1e-6, 1000, 0)) == 1000
    with pytest.raises(InputError, match=r"at least 1e-06 requests/s for 1,000 requests"):
        slo.arrivals(0.99e-6, 1000, 0)


def test_meets_is_at_or_under_the_bound_at_p90():
    res = result(tpot_p90_ms=50.0, ttft_p90_ms=2000.0)
    assert slo.meets(res, {"tpot": 0.05, "ttft": 2.0})
    assert not slo.meets(res, {"tpot": 0.0499})
    assert not slo.meets(result(tpot_p90_ms=50.02), {"tpot": 0.05})  # seconds to ms: x 1,000 exactly


def test_no_tpot_to_judge_over_one_token_outputs():
    assert slo.no_tpot_to_judge({"tpot": 0.05}, np.array([1, 1]))
    assert not slo.no_tpot_to_judge({"tpot": 0.05}, np.array([1, 2]))
    assert not slo.no_tpot_to_judge({"ttft": 1.0}, np.array([1, 1]))
    assert not slo.no_tpot_to_judge({"tpot": 0.05}, np.array([], dtype=np.int64))
    assert slo.no_tpot_to_judge({"tpot": 0.05}, np.array([1]))  # one request of one token


# --- the concurrency search and its binding limit --------------------------------------------------------------------

def test_users_double_then_bisect_to_the_last_that_meets(monkeypatch):
    """TPOT p90 = the users in ms, against tpot=50ms: 1, 2, ..., 32 meet, 64 does not; bisection while the bracket
    is wider than max(1, lo // 64): 48 meets, 56 not, 52 not, 50 meets, 51 not: 50 users.  51 > the pool's 45
    mean-length requests, no preemption: the KV cache binds."""
    calls = scripted(monkeypatch, by_users=lambda c: result(tpot_p90_ms=float(c), requests_per_s=0.0))
    out = slo.slo_search({**SETUP, "kv_requests": 45}, *trace(), {"tpot": 0.05}, 0)
    users = [c for c, _, _ in calls if c]
    assert users[:12] == [1, 2, 4, 8, 16, 32, 64, 48, 56, 52, 50, 51]
    assert [n for c, _, n in calls if c][:3] == [100, 100, 100]  # 10 x users requests, at least the trace's 100
    assert out["max_concurrency"] == 50 and out["binds"] == "kv"
    assert out["binding_limit"] == "KV cache (51 users are more than the pool holds at the mean length)"
    assert (out["kv_capacity_requests"], out["max_num_seqs"], out["percentile"]) == (45, 1024, "p90")
    assert out["at_max_concurrency"] == {"tpot_p90_ms": 50.0}


def test_each_closed_loop_runs_ten_requests_a_user(monkeypatch):
    calls = scripted(monkeypatch, by_users=lambda c: result(tpot_p90_ms=float(c), requests_per_s=0.0))
    slo.slo_search(SETUP, *trace(), {"tpot": 0.05}, 0)
    assert {c: n for c, _, n in calls if c}[32] == 320 and {c: n for c, _, n in calls if c}[16] == 160


def test_the_bisection_stops_within_a_64th_of_the_users(monkeypatch):
    """TPOT p90 = users / 10 ms against tpot=100ms: 1,000 users meet.  Doubling to 512 (met) and 1,024 (not);
    the bracket 512-1,024 is halved while wider than lo // 64: 768, 896, 960, 992 (met), 1,008 (not; 16 wider than
    992 // 64 = 15), 1,000 (met); 1,008 - 1,000 = 8 <= 1,000 // 64 = 15: 1,000 users, within 1/64 of the boundary
    (the exact 1,000 here; 1,007 would have been found as 1,000 too)."""
    calls = scripted(monkeypatch, by_users=lambda c: result(tpot_p90_ms=c / 10, requests_per_s=0.0))
    out = slo.slo_search({**SETUP, "max_num_seqs": 4096, "kv_requests": 4096}, *trace(2000), {"tpot": 0.1}, 0)
    assert [c for c, _, _ in calls if c][10:] == [1024, 768, 896, 960, 992, 1008, 1000]
    assert out["max_concurrency"] == 1000 and out["binds"] == "compute"
    assert out["binding_limit"] == "compute (step time grows with the batch)"


@pytest.mark.parametrize("bound_ms,found", [(254, 254), (258, 256)])
def test_the_bisection_stops_at_a_64th_of_the_users_met(monkeypatch, bound_ms, found):
    """TPOT p90 = the users in ms.  Against 254 ms: 128 met, 256 not; 192, 224, 240, 248, 252 met (each bracket
    wider than 3 = 252 // 64), 254 met; 256 - 254 = 2 <= 3: 254 (a 63rd, 252 // 63 = 4, would stop at 252).  Against
    258 ms: 256 met, 512 not; 384, 320, 288, 272, 264, 260 not; 260 - 256 = 4 <= 256 // 64 = 4: 256 (a 65th, 3,
    would go on to 258)."""
    scripted(monkeypatch, by_users=lambda c: result(tpot_p90_ms=float(c), requests_per_s=0.0))
    out = slo.slo_search({**SETUP, "max_num_seqs": 4096, "kv_requests": 4096}, *trace(1000), {"tpot": bound_ms / 1e3},
                         0)
    assert out["max_concurrency"] == found


@pytest.mark.parametrize("setup,above,binds,words", [
    # 51 users > max_num_seqs 40 and no preemption: the engine's cap
    ({"max_num_seqs": 40}, {}, "max_num_seqs",
     "max_num_seqs (40: the users beyond it wait in the queue, their TTFT growing)"),
    # over the cap, but the pool preempted before the engine reached it (at most 39 ran): the KV cache
    ({"max_num_seqs": 40}, {"preemptions": 3, "peak_running": 39}, "kv",
     "KV cache (the pool preempts from 51 users of those simulated; at 51 users the waits for blocks break the SLO)"),
    # ... and at the cap exactly (40 ran) it is the cap again
    ({"max_num_seqs": 40}, {"preemptions": 3, "peak_running": 40}, "max_num_seqs",
     "max_num_seqs (40: the users beyond it wait in the queue, their TTFT growing)"),
    # 51 users = the cap: not beyond it; 51 = the pool's requests: not beyond it either: compute
    ({"max_num_seqs": 51, "kv_requests": 51}, {}, "compute", "compute (step time grows with the batch)"),
    ({"max_num_seqs": 1024, "kv_requests": 50}, {}, "kv",
     "KV cache (51 users are more than the pool holds at the mean length)"),
])
def test_which_limit_binds_just_above_the_answer(monkeypatch, setup, above, binds, words):
    """TPOT p90 = users in ms against 50 ms: 50 users meet, 51 do not; the limit named is the one at 51."""
    scripted(monkeypatch, by_users=lambda c: result(tpot_p90_ms=float(c), requests_per_s=0.0,
                                                    **(above if c == 51 else {})))
    out = slo.slo_search({**SETUP, **setup}, *trace(), {"tpot": 0.05}, 0)
    assert (out["max_concurrency"], out["binds"], out["binding_limit"]) == (50, binds, words)


def test_the_first_preempting_concurrency_is_named(monkeypatch):
    """Preemption from 32 users of those simulated (32, 48, 50, 51, 52, 56, 64 preempt): 'from 32 users'."""
    scripted(monkeypatch, by_users=lambda c: result(tpot_p90_ms=float(c), requests_per_s=0.0,
                                                    preemptions=int(c >= 32), peak_running=c))
    out = slo.slo_search(SETUP, *trace(), {"tpot": 0.05}, 0)
    assert out["binding_limit"].startswith("KV cache (the pool preempts from 32 users of those simulated; at 51")


def test_not_even_one_user_and_no_limit_up_to_the_trace(monkeypatch):
    scripted(monkeypatch, by_users=lambda c: result(tpot_p90_ms=60.0, requests_per_s=0.0))
    out = slo.slo_search(SETUP, *trace(), {"tpot": 0.05}, 0)
    assert (out["max_concurrency"], out["binds"], out["max_rate_per_s"], out["at_max_concurrency"]) == \
        (0, "compute", None, None)
    assert out["binding_limit"] == "compute: not even one user alone meets it (the step time itself)"
    # every concurrency up to the trace's 20 requests meets it: 1, 2, 4, 8, 16, 20, and no limit is named
    calls = scripted(monkeypatch, by_users=lambda c: result(tpot_p90_ms=1.0, requests_per_s=0.0))
    out = slo.slo_search(SETUP, *trace(20), {"tpot": 0.05}, 0)
    assert [c for c, _, _ in calls if c] == [1, 2, 4, 8, 16, 20]
    assert (out["max_concurrency"], out["binds"]) == (20, "none")
    assert out["binding_limit"] == "none up to 20 users (the search's limit: as many users as requests)"


def test_one_token_outputs_have_no_tpot_to_search():
    with pytest.raises(InputError, match="TPOT needs outputs of at least 2 tokens") as exc:
        slo.slo_search(SETUP, np.full(5, 10), np.full(5, 1), {"tpot": 0.05}, 0)
    assert (exc.value.field, exc.value.value) == ("--slo", "tpot=50ms")  # the bound as typed, in ms


# --- the Poisson rate search ------------------------------------------------------------------------------------------

def steady(limit: float):
    """Every user count meets the SLO with 2.5 requests/s served; at a rate, 1 s mean E2E (in flight = the rate)
    and TPOT p90 = 1 ms up to ``limit`` requests/s, 100 ms past it."""
    return (lambda c: result(requests_per_s=2.5)), \
        (lambda r, n: result(tpot_p90_ms=1.0 if r <= limit else 100.0, e2e_mean_ms=1000.0))


def test_the_rate_doubles_from_twice_the_closed_loops_then_bisects(monkeypatch):
    """From 2 x 2.5 = 5 requests/s: 5, 10, 20 meet, 40 does not; bisection of 20-40 while wider than r_lo / 64:
    30, 35 meet, 37.5 not, 36.25, 36.875 meet (0.625 > 36.875 / 64), 37.1875 meets (0.3125 <= 0.58): 37.1875.
    Each rate first runs the highest judged rate's first run scaled to it (Little's law; at least the trace's 100
    and ceil(10 x in flight)), then twice as many: 10 runs 100 x 10 / 5 = 200, then 400; 37.5 after 35's 700 runs
    750; 37.1875 after 36.875's 738 runs ceil(738 x 37.1875 / 36.875) = ceil(744.25) = 745, then 1,490."""
    by_users, by_rate = steady(37.3)
    calls = scripted(monkeypatch, by_users=lambda c: result(tpot_p90_ms=1.0 if c <= 4 else 100.0,
                                                            requests_per_s=2.5), by_rate=by_rate)
    out = slo.slo_search(SETUP, *trace(), {"tpot": 0.05}, 0)
    rates = [(r, n) for c, r, n in calls if not c]
    assert [r for r, _ in rates] == [5, 5, 10, 10, 20, 20, 40, 30, 30, 35, 35, 37.5, 36.25, 36.25, 36.875, 36.875,
                                     37.1875, 37.1875]
    assert [n for _, n in rates] == [100, 200, 200, 400, 400, 800, 800, 600, 1200, 700, 1400, 750, 725, 1450, 738,
                                     1476, 745, 1490]
    assert (out["max_rate_per_s"], out["rate_requests"], out["rate_met_up_to"]) == (37.1875, 1490, None)
    assert out["max_concurrency"] == 4


def test_a_rate_needing_more_than_its_first_run_runs_half_again_what_it_needs(monkeypatch):
    """In flight = 10 x the rate (10 s mean E2E): 5 requests/s needs ceil(10 x 50) = 500 requests, more than the
    trace's 100: it runs 100, then max(500 + 250, 200) = 750 (enough), then 1,500."""
    calls = scripted(monkeypatch, by_users=lambda c: result(tpot_p90_ms=1.0 if c <= 4 else 100.0,
                                                            requests_per_s=2.5),
                     by_rate=lambda r, n: result(tpot_p90_ms=1.0 if r <= 5 else 100.0, e2e_mean_ms=10_000.0))
    out = slo.slo_search(SETUP, *trace(), {"tpot": 0.05}, 0)
    assert [(r, n) for c, r, n in calls if not c][:3] == [(5, 100), (5, 750), (5, 1500)]
    assert out["rate_requests"] == 1500


@pytest.mark.parametrize("limit,found", [(20.2, 20.0), (0.7, 0.6953)])
def test_the_rate_bisection_stops_within_a_64th_of_the_rate_met(monkeypatch, limit, found):
    """Bisection stops once the bracket is at most r_lo / 64 wide.  Limit 20.2: 5, 10, 20 met, 40 not; 30, 25, 22.5,
    21.25, 20.625, 20.3125 not; 20.3125 - 20 = 0.3125 = 20 / 64 exactly: 20 (one more halving would have met
    20.15625).  Limit 0.7 (a rate under 1 request/s stops the same way): 0.5 met, 1 not; 0.75 not, 0.625, 0.6875
    met, 0.71875, 0.703125 not, 0.6953125 met; 0.0078 <= 0.6953125 / 64 = 0.0109: 0.6953."""
    scripted(monkeypatch, by_users=lambda c: result(requests_per_s=2.5 if limit > 1 else 0.25),
             by_rate=steady(limit)[1])
    assert slo.slo_search(SETUP, *trace(), {"tpot": 0.05}, 0)["max_rate_per_s"] == found


def test_a_rate_needing_the_whole_trace_cap_runs_it(monkeypatch):
    """max_num_seqs 5: at most 20 x 5 = 100 requests; 10 requests/s (in flight 10) needs exactly 100: the trace's 50,
    then min(100, max(150, 100)) = 100, enough: met, then 200.  Needing the cap is not needing more than it."""
    calls = scripted(monkeypatch, by_users=lambda c: result(requests_per_s=5.0), by_rate=steady(10.0)[1])
    out = slo.slo_search({**SETUP, "max_num_seqs": 5}, *trace(50), {"tpot": 0.05}, 0)
    assert [(r, n) for c, r, n in calls if not c][:3] == [(10, 50), (10, 100), (10, 200)]
    assert out["rate_requests"] == 200


def test_a_second_run_is_at_least_twice_the_first(monkeypatch):
    """12 requests/s (in flight 12) needs 120 requests, more than the trace's 100: the next run is the larger of
    120 + 60 and 2 x 100: 200, then 400."""
    calls = scripted(monkeypatch, by_users=lambda c: result(requests_per_s=6.0), by_rate=steady(12.0)[1])
    slo.slo_search(SETUP, *trace(), {"tpot": 0.05}, 0)
    assert [(r, n) for c, r, n in calls if not c][:3] == [(12, 100), (12, 200), (12, 400)]


def test_a_rate_whose_queue_outgrows_the_trace_cap_is_not_sustained(monkeypatch):
    """max_num_seqs 5: a rate is judged over at most 20 x 5 = 100 requests (the trace's 50 repeated); in flight =
    the rate, so a rate needing ceil(10 x rate) > 100 requests fails: 5 (50) and 10 (100) meet, 20 (200) does
    not, and bisection (15, 12.5, 11.25, 10.625, 10.3125, 10.15625 all need more than 100) leaves 10."""
    by_users, by_rate = steady(1000.0)
    scripted(monkeypatch, by_users=by_users, by_rate=by_rate)
    out = slo.slo_search({**SETUP, "max_num_seqs": 5}, *trace(50), {"tpot": 0.05}, 0)
    assert (out["max_rate_per_s"], out["rate_requests"]) == (10.0, 200)


def test_a_queue_that_grows_with_the_trace_is_not_sustained(monkeypatch):
    """Past 12 requests/s each rate's second run (twice the requests) holds 1.5 x as many in flight as its first:
    a queue still growing, more than STEADY_GROWTH (1.15) times, so not sustained though the first run met the SLO
    (both runs well under the trace cap, 20 x 1,024).  5, 10 met; 20 grows; bisection of 10-20: 15, 12.5 grow,
    11.25, 11.875 met, 12.1875, 12.03125 grow; 12.03125 - 11.875 = 0.156 <= 11.875 / 64 = 0.186: 11.875."""
    seen: list[float] = []

    def by_rate(r, n):
        again = bool(seen) and seen[-1] == r
        seen.append(r)
        return result(e2e_mean_ms=1500.0 if again and r > 12 else 1000.0)

    scripted(monkeypatch, by_users=lambda c: result(requests_per_s=2.5), by_rate=by_rate)
    out = slo.slo_search(SETUP, *trace(), {"tpot": 0.05}, 0)
    assert out["max_rate_per_s"] == 11.875


@pytest.mark.parametrize("growth,met_up_to", [(1.15, 4.0), (1.16, None)])
def test_growth_of_exactly_fifteen_percent_is_still_steady(monkeypatch, growth, met_up_to):
    """Each rate's second run (twice the requests) holds ``growth`` x as many in flight as its first: 1.15 (the
    STEADY_GROWTH allowed; the rates are powers of 2, so the products are exact) is steady, and every rate from
    2 x 0.0625 doubled, 0.125 ... 4, meets it; 1.16 is a queue still growing: no rate is sustained."""
    seen: list[float] = []

    def by_rate(r, n):
        again = bool(seen) and seen[-1] == r
        seen.append(r)
        return result(e2e_mean_ms=1000.0 * (growth if again else 1.0))

    scripted(monkeypatch, by_users=lambda c: result(requests_per_s=0.0625), by_rate=by_rate)
    out = slo.slo_search(SETUP, *trace(), {"tpot": 0.05}, 0)
    assert (out["rate_met_up_to"], out["max_rate_per_s"]) == (met_up_to, None)


def test_every_rate_tried_meets_it(monkeypatch):
    """From 2 x 0.05 = 0.1 requests/s, six doublings all meet (0.1 ... 3.2): 'no limit found' up to 3.2."""
    by_users, by_rate = steady(1000.0)
    calls = scripted(monkeypatch, by_users=lambda c: result(requests_per_s=0.05), by_rate=by_rate)
    out = slo.slo_search(SETUP, *trace(), {"tpot": 0.05}, 0)
    assert [r for c, r, _ in calls if not c] == [0.1, 0.1, 0.2, 0.2, 0.4, 0.4, 0.8, 0.8, 1.6, 1.6, 3.2, 3.2]
    assert (out["rate_met_up_to"], out["max_rate_per_s"]) == (3.2, None)


def test_no_rate_meets_it(monkeypatch):
    """Even 2 x 2.5 = 5 requests/s fails: bisection from 0 (2.5, 1.25, ... all fail) finds none: None, not 0."""
    scripted(monkeypatch, by_users=lambda c: result(requests_per_s=2.5),
             by_rate=lambda r, n: result(tpot_p90_ms=100.0))
    out = slo.slo_search(SETUP, *trace(), {"tpot": 0.05}, 0)
    assert (out["max_rate_per_s"], out["rate_met_up_to"], out["rate_requests"]) == (None, None, None)


def test_the_rate_bisection_halves_at_most_twenty_times(monkeypatch):
    """From 2 x 500,000 = 1e6 requests/s, which fails, the bisection starts from 0 and halves 20 times at most: the
    20th mid is 1e6 / 2^20 = 0.9537 requests/s, within a 1.43 requests/s limit (1.5 x that), and the answer; a
    19th halving would have found none, a 21st 1.4305."""
    by_users, by_rate = steady(1.5e6 / 2**20)
    calls = scripted(monkeypatch, by_users=lambda c: result(requests_per_s=5e5), by_rate=by_rate)
    out = slo.slo_search(SETUP, *trace(), {"tpot": 0.05}, 0)
    assert out["max_rate_per_s"] == round(1e6 / 2**20, 4) == 0.9537
    assert len({r for c, r, _ in calls if not c}) == 21  # the ceiling, then 20 mids


def test_the_first_ceiling_is_at_least_a_thousandth_request_a_second(monkeypatch):
    calls = scripted(monkeypatch, by_users=lambda c: result(requests_per_s=0.0),
                     by_rate=lambda r, n: result(tpot_p90_ms=100.0))
    slo.slo_search(SETUP, *trace(), {"tpot": 0.05}, 0)
    assert [r for c, r, _ in calls if not c][0] == 1e-3


# --- the paper's normalized latency and Figure 12's rate ------------------------------------------------------------

def test_normalized_latency_is_the_mean_of_e2e_per_output_token():
    """Step ends at 0, 1, 3, 6 s; request 0 arrives at time 0 and finishes at step 2 (3 s), request 1 arrives at
    step 1 (1 s) and finishes at step 3 (6 s); c_request 0.5 s each: (3.5 / 5 + 5.5 / 11) / 2 = (0.7 + 0.5) / 2."""
    sched = SimpleNamespace(times=lambda consts: np.array([0.0, 1.0, 3.0, 6.0]), finish_seg=np.array([2, 3]),
                            closed=True, arrival_seg=np.array([-1, 1]))
    assert slo.normalized_latency(sched, SimpleNamespace(c_request=0.5), np.array([5, 11])) == 0.6
    # a request sent at the end of step 0 (0.25 s) arrives then, not at 0; one output token: the E2E itself;
    # (3 - 0 + 0.5) / 7 = 0.5, (6 - 0.25 + 0.5) / 1 = 6.25, (1 - 0 + 0.5) / 3 = 0.5: 7.25 / 3 = 2.41666... to 6 places
    sched = SimpleNamespace(times=lambda consts: np.array([0.25, 1.0, 3.0, 6.0]), finish_seg=np.array([2, 3, 1]),
                            closed=True, arrival_seg=np.array([-1, 0, -1]))
    assert slo.normalized_latency(sched, SimpleNamespace(c_request=0.5), np.array([7, 1, 3])) == 2.416667
    # Poisson arrivals at 0.5 s and 2 s: (3 - 0.5 + 0.5) / 5 and (6 - 2 + 0.5) / 9: (0.6 + 0.5) / 2
    sched = SimpleNamespace(times=lambda consts: np.array([0.0, 1.0, 3.0, 6.0]), finish_seg=np.array([2, 3]),
                            closed=False, arrival_s=np.array([0.5, 2.0]))
    assert slo.normalized_latency(sched, SimpleNamespace(c_request=0.5), np.array([5, 9])) == 0.55


def curve_of(monkeypatch, latency):
    monkeypatch.setattr(slo, "schedule", lambda setup, p, o, rate=0.0, *, seed, policy="paged": rate)
    monkeypatch.setattr(slo, "normalized_latency", lambda rate, consts, output: latency(rate))


def test_rate_curve_top_and_refinement(monkeypatch):
    """Latency = rate / 10 s/token against a 0.5 bound: rates 1, 2, 4 within (0.4), 8 past it: top 4; refined 3
    times between 4 and 8: 6 (0.6) out, 5 (0.5, at the bound) in, 5.5 out: 5."""
    curve_of(monkeypatch, lambda r: r / 10)
    curve, top = slo.rate_curve(SETUP, *trace(), [1, 2, 4, 8, 16], 0.5, 0)
    assert curve == [0.1, 0.2, 0.4, 0.8, 1.6] and top == 4
    assert slo.rate_curve(SETUP, *trace(), [1, 2, 4, 8, 16], 0.5, 0, refine=3)[1] == 5.0
    assert slo.rate_curve(SETUP, *trace(), [1, 2, 4, 5], 0.5, 0)[1] is None  # within it at every rate swept
    assert slo.rate_curve(SETUP, *trace(), [6, 8], 0.5, 0)[1] is None  # not even the lowest
    # refined from 0 where the lowest is past the bound: 3 (0.3) in, 4.5 (0.45) in, 5.25 out
    assert slo.rate_curve(SETUP, *trace(), [6, 8], 0.5, 0, refine=3)[1] == 4.5
    # 7 refinements against 0.53 between 4 and 8: 6 out, 5 in, 5.5 out, 5.25 in, 5.375, 5.3125 out, 5.28125 in:
    # kept to 4 places (5.28125 exactly, half to even: 5.2812)
    assert slo.rate_curve(SETUP, *trace(), [1, 2, 4, 8, 16], 0.53, 0, refine=7)[1] == 5.2812
    # unrefined, the top is a swept rate as given (refinement rounds to 4 places; a swept rate is not rounded)
    assert slo.rate_curve(SETUP, *trace(), [1.23456, 9], 0.5, 0)[1] == 1.23456


def test_rates_per_second_are_refused_in_seconds():
    with pytest.raises(InputError, match="requests per second") as exc:
        slo.parse_rates_per_s("5:1:3", "--rates")
    assert "requests per step" not in str(exc.value)

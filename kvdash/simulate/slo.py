"""Answers in seconds against an SLO, and request rate at a normalized-latency bound (issue 28).

One place for ``kvdash simulate --time --slo``, ``kvdash calc --slo`` and a grid's ``simulate: time:`` block:

* :func:`slo_search`: the highest closed-loop concurrency and Poisson request rate whose p90 TTFT / TPOT /
  E2E meet an SLO, and which limit binds just above it (KV cache, ``max_num_seqs``, compute);
* :func:`rate_curve`: the PagedAttention paper's Figure 12 (Kwon et al., SOSP 2023, §6.2) in seconds: a
  policy's normalized latency (the mean over requests of end-to-end latency / output tokens, s/token) at each
  Poisson request rate, and the highest rate of the curve within a bound.

A ``setup`` is a dictionary: ``pool`` (:class:`kvdash.simulate.timed.Pool`), ``mc``, ``gpu``, ``consts`` (the
step-time model), ``max_num_seqs``, ``max_batched``, ``tp``, ``kv_requests`` (mean-length requests the pool
holds); contiguous policies also read ``slots`` (token slots), ``max_len`` and ``allocator``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kvdash.errors import InputError

SLO_KEYS = ("ttft", "tpot", "e2e")
SLO_PERCENTILE = "p90"
SHORT_RUN = 10  # a closed loop of fewer requests than this many per user is noted as short (first round, drain)
# a Poisson rate is judged over at least SHORT_RUN x the requests in flight (Little's law: rate x mean E2E), the
# trace repeated as needed, up to this many times max_num_seqs requests (a stable engine runs at most max_num_seqs
# and queues few more; past that the queue grows with the trace: the rate is not sustained)
STEADY_CAP_SEQS = 2 * SHORT_RUN
# ... and over twice that trace its requests in flight may grow at most this much (Llama-3.1-8B on an H100, calc's
# workload, 4,000 -> 8,000 requests: +1 % at 30 requests/s, +7 % at 40, +13 % at 44, +16 % at 46, +19 % at 48, +32 %
# at 56, where TTFT p90 reaches 25 s over 16,000 requests)
STEADY_GROWTH = 1.15


def short_run_note(requests: int, users: int) -> str | None:
    """Why a closed loop of under ``SHORT_RUN`` requests a user is not the steady state; None when it is long
    enough (or not a closed loop)."""
    if not users or requests >= SHORT_RUN * users:
        return None
    return (f"{requests:,} requests for {users:,} users: the first round (every user at once) and the final drain "
            f"weigh in these figures; about {SHORT_RUN * users:,} or more approach the steady state")


def in_flight(res: Any, rate: float) -> float:
    """Requests in the engine on average over a Poisson run at ``rate`` requests/s (Little's law: the rate times
    the mean end-to-end latency)."""
    return rate * res.e2e_ms["mean"] / 1000.0


def poisson_short_note(requests: int, res: Any, rate: float) -> str | None:
    """Why a Poisson run of ``requests`` is not the steady state (fewer than ``SHORT_RUN`` x the requests in
    flight, :func:`in_flight`); None when it is long enough."""
    held = in_flight(res, rate)
    if requests >= SHORT_RUN * held:
        return None
    if held >= requests:  # Little's law over the offered rate past the trace's own size (1e9 requests/s: 2.8e9)
        return (f"{requests:,} requests at {rate:,g} requests/s arrive faster than they finish: all of them are in "
                f"flight at once, a burst rather than a steady rate, and these figures are the burst's (--slo searches "
                f"the rate the engine sustains)")
    return (f"{requests:,} requests at {rate:,g} requests/s with about {held:,.0f} in flight on average (Little's law: "
            f"rate x mean E2E): the start and the final drain weigh in these figures, and requests/s counts the drain; "
            f"about {math.ceil(SHORT_RUN * held):,} or more approach the steady state")


def repeated(prompt: np.ndarray, output: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The trace repeated to ``n`` requests (itself where it has as many or more): a steady run's requests."""
    if n <= len(prompt):
        return prompt, output
    return np.resize(prompt, n), np.resize(output, n)


def parse_slo(text: str, field: str = "--slo") -> dict[str, float]:
    """``ttft=2s,tpot=50ms`` -> seconds per metric (``s``, ``ms`` or ``us``; a bare number is refused: ``tpot=50``
    could mean 50 ms or 50 s)."""
    out: dict[str, float] = {}
    allowed = "expected KEY=TIME pairs, KEY one of ttft, tpot, e2e and TIME like 2s or 50ms (ttft=2s,tpot=50ms)"
    for part in str(text).split(","):
        key, sep, value = part.strip().partition("=")
        key, value = key.strip().lower(), value.strip().lower()
        if not sep:
            raise InputError(field, text, allowed)
        if key not in SLO_KEYS:
            raise InputError(field, text, f"unknown key {key!r}: " + allowed)
        if key in out:
            raise InputError(field, text, f"{key} given twice: " + allowed)
        scale = 1.0
        if value.endswith(("us", "µs")):
            value, scale = value[:-2], 1e-6
        elif value.endswith("ms"):
            value, scale = value[:-2], 1e-3
        elif value.endswith("s"):
            value = value[:-1]
        else:
            raise InputError(field, text, allowed + "; every time needs its unit, s, ms or us")
        try:
            seconds = float(value) * scale
        except ValueError as exc:
            raise InputError(field, text, allowed) from exc
        if not (math.isfinite(seconds) and seconds > 0):
            raise InputError(field, text, f"{key} must be a finite time above 0: " + allowed)
        out[key] = seconds
    return out


def slo_text(slo: dict[str, float]) -> str:
    """``{"tpot": 0.05}`` -> ``tpot=50ms`` (the form :func:`parse_slo` reads)."""
    return ",".join(f"{k}={v * 1000:g}ms" if v < 1 else f"{k}={v:g}s" for k, v in slo.items())


MAX_ARRIVAL_SPAN_S = 1e9  # seconds of Poisson arrivals the timed simulation keeps to the microsecond (2^-52 x 1e9)


def arrivals(rate: float, n: int, seed: int) -> np.ndarray:
    """Poisson arrival times (seconds) of ``n`` requests at ``rate`` per second: the same draw for every policy.  The
    clock is a double: arrivals spanning past 10^9 s would round a step's microseconds away (at 1e-30 requests/s every
    TPOT read 0.0 and E2E equalled TTFT), so such a rate is refused, from simulate's --rate and a grid's rates alike."""
    if n / rate > MAX_ARRIVAL_SPAN_S:
        raise InputError("--rate", f"{rate:g}", f"at least {n / MAX_ARRIVAL_SPAN_S:.3g} requests/s for {n:,} requests "
                                                "with --time: their arrivals would span past 10^9 s, where the steps' "
                                                "microseconds are lost to rounding")
    rng = np.random.default_rng(seed + 1)
    return np.cumsum(rng.exponential(1 / rate, size=n))


def schedule(setup: dict[str, Any], prompt: np.ndarray, output: np.ndarray, concurrency: int = 0,
             rate: float = 0.0, *, seed: int, policy: str = "paged") -> Any:
    """One run: paged through :func:`kvdash.simulate.timed.simulate_timed` (vLLM 0.33's scheduler), Orca's
    ``max``/``pow2``/``oracle`` through :mod:`kvdash.simulate.timed_contiguous` (the same scheduler, whole
    reservations)."""
    arr = arrivals(rate, len(prompt), seed) if rate else None
    if policy == "paged":
        from kvdash.simulate.timed import simulate_timed

        return simulate_timed(prompt, output, setup["pool"], setup["mc"], setup["gpu"], setup["consts"],
                              setup["max_num_seqs"], setup["max_batched"], concurrency=concurrency, arrivals_s=arr)
    from kvdash.simulate import timed_contiguous

    return timed_contiguous.run(policy, prompt, output, setup, concurrency=concurrency, arrivals_s=arr)


def run_point(setup: dict[str, Any], prompt: np.ndarray, output: np.ndarray, concurrency: int = 0,
              rate: float = 0.0, *, seed: int, policy: str = "paged") -> Any:
    """A :class:`kvdash.simulate.timed.TimedResult` of one run."""
    from kvdash.interrupts import checkpoint
    from kvdash.simulate.timed import summarize

    checkpoint()  # a grid's Ctrl-C, noted while it is evaluated, stops it between runs (not after the point)

    sched = schedule(setup, prompt, output, concurrency, rate, seed=seed, policy=policy)
    res = summarize(sched, setup["consts"], output, setup["tp"], policy)
    res.extra = {"kv_capacity_requests": setup["kv_requests"],
                 "normalized_latency_s": normalized_latency(sched, setup["consts"], output)}
    return res


def normalized_latency(sched: Any, consts: Any, output: np.ndarray) -> float:
    """The paper's normalized latency: the mean over requests of (finish - arrival) / output tokens, seconds per
    token (queueing included; each request's ``c_request`` added, as :func:`kvdash.simulate.timed.summarize` does)."""
    t = sched.times(consts)
    finish = t[sched.finish_seg]
    if sched.closed:
        arrive = np.where(sched.arrival_seg < 0, 0.0, t[np.maximum(sched.arrival_seg, 0)])
    else:
        arrive = sched.arrival_s
    e2e = finish - arrive + consts.c_request
    return round(float((e2e / np.maximum(output.astype(np.int64), 1)).mean()), 6)


def meets(res: Any, slo: dict[str, float]) -> bool:
    got = {"ttft": res.ttft_ms, "tpot": res.tpot_ms, "e2e": res.e2e_ms}
    return all(got[k][SLO_PERCENTILE] <= v * 1000 for k, v in slo.items())


BINDS = ("kv", "max_num_seqs", "compute", "none")
# the Poisson rate search doubles its ceiling at most this many times past twice the best closed loop's rate
RATE_DOUBLINGS = 6
# then bisection, to within 1/SEARCH_PRECISION of the answer: the users (exact below 128) and the rate; a closer
# figure would be finer than the simulation's own spread across seeds
SEARCH_PRECISION = 64
RATE_BISECTIONS = 20  # at most (the rate's bracket is a factor of 2 wide after the doublings: 6 halvings)


def rate_words(rate: float) -> str:
    """A request rate as the tables print figures: from 1,000 whole and thousands separated (``1,504``,
    ``12,346``), from 1 four significant digits (``609.2``, ``23.04``), below 1 three (``0.841``); the JSON keeps
    the search's own figure."""
    if rate >= 1000:
        return f"{rate:,.0f}"
    return f"{rate:.4g}" if rate >= 1 else f"{rate:.3g}"


def rate_text(search: dict[str, Any], requests: int, further: str = "more --requests") -> str:
    """The Poisson answer of :func:`slo_search` in words: the rate found, none, or every rate tried met it
    (``further``: how the user searches past the trace, in the command's own terms)."""
    if search.get("rate_met_up_to") is not None:
        return (f"no limit found: every rate up to {rate_words(search['rate_met_up_to'])} requests/s meets it, the "
                f"{requests:,} requests ending before a queue builds ({further})")
    if search["max_rate_per_s"] is None:
        return "none"
    n = search.get("rate_requests")
    # the trace's own requests repeated (np.resize): a short --requests is judged on few distinct lengths, and the
    # rate found moves with them (50 ShareGPT draws 49.2 requests/s, 100 65.2, 20,000 61.4)
    over = (f" (judged over {n:,} requests: the {requests:,} given repeated {n / requests:,.1f} times, to at least "
            f"{SHORT_RUN} x those in flight)" if n and n > requests else "")
    return f"{rate_words(search['max_rate_per_s'])} requests/s{over}"


def no_tpot_to_judge(slo: dict[str, float], output: np.ndarray) -> bool:
    """Whether ``slo`` bounds TPOT over outputs of one token each: TPOT is the time between a request's output
    tokens, so there is none to judge (the search "met" tpot=1us at every load)."""
    return "tpot" in slo and len(output) > 0 and int(np.max(output)) < 2


def slo_search(setup: dict[str, Any], prompt: np.ndarray, output: np.ndarray, slo: dict[str, float],
               seed: int, policy: str = "paged") -> dict[str, Any]:
    """The highest closed-loop concurrency and the highest Poisson rate whose p90 latencies meet ``slo``
    (doubling, then bisection), and which limit binds just above the concurrency found: ``binds`` is one of
    :data:`BINDS` (``binding_limit`` says it in words)."""
    if no_tpot_to_judge(slo, output):
        raise InputError("--slo", f"tpot={slo['tpot'] * 1e3:g}ms", "TPOT needs outputs of at least 2 tokens; every "
                         "output of this workload is 1 token: judge ttft or e2e instead")
    seen: dict[int, Any] = {}

    def ok_c(c: int) -> tuple[bool, Any]:
        if c not in seen:  # judged in the steady rounds: the trace repeated to SHORT_RUN requests a user at least
            seen[c] = run_point(setup, *repeated(prompt, output, SHORT_RUN * c), concurrency=c, seed=seed,
                                policy=policy)
        return meets(seen[c], slo), seen[c]

    cap = len(prompt)  # more users than requests would all start at once
    lo, hi, c = 0, 0, 1
    last = None
    while True:
        c = min(c, cap)
        good, r = ok_c(c)
        if not good:
            hi = c
            break
        lo, last = c, r
        if c == cap:
            break
        c *= 2
    while hi and hi - lo > max(1, lo // SEARCH_PRECISION):
        mid = (lo + hi) // 2
        good, r = ok_c(mid)
        if good:
            lo, last = mid, r
        else:
            hi = mid
    binds, words = "none", f"none up to {cap:,} users (the search's limit: as many users as requests)"
    if hi:
        above = ok_c(hi)[1]
        # max_num_seqs binds only where the engine reached it; a pool that preempts first is the KV cache's limit (a
        # helper's trial: gemma-3-27b on an A100 named max_num_seqs 256 where 195 ran at most, 6,816 preemptions)
        if hi > setup["max_num_seqs"] and not (above.preemptions and above.peak_running < setup["max_num_seqs"]):
            binds, words = "max_num_seqs", (f"max_num_seqs ({setup['max_num_seqs']:,}: the users beyond it wait in "
                                            "the queue, their TTFT growing)")
        elif above.preemptions or hi > setup["kv_requests"]:
            # the first concurrency simulated that preempted, up to hi (the search's points: an upper bound on the
            # onset)
            first = min((c for c, r in seen.items() if r.preemptions and c <= hi), default=0)
            binds, words = "kv", (f"KV cache (the pool preempts from {first:,} users of those simulated; at {hi:,} "
                                  "users the waits for blocks break the SLO)" if above.preemptions else
                                  f"KV cache ({hi:,} users are more than the pool holds at the mean length)")
        elif hi == 1:
            binds, words = "compute", "compute: not even one user alone meets it (the step time itself)"
        else:
            binds, words = "compute", "compute (step time grows with the batch)"
    # the Poisson rate: from twice what the best concurrency served, doubled while it still meets the SLO (a finite
    # trace can end before a queue builds: then no rate is found, and the answer says so), then bisection
    top_rate = None
    unbounded = None
    if last is not None:
        judged: dict[float, int] = {}

        def ok_r(r: float) -> bool:
            # judged in the steady state: the trace repeated until it holds SHORT_RUN x the requests in flight (a
            # finite trace can otherwise end before its queue shows: 1,000 requests all admitted at once, whatever
            # the rate), then run twice as long: a queue that still grows with the trace (in flight more than
            # STEADY_GROWTH times as many) is not sustained, nor one that outgrows STEADY_CAP_SEQS x max_num_seqs
            trace_cap = max(len(prompt), STEADY_CAP_SEQS * int(setup["max_num_seqs"]))
            # start from the length the last rate judged needed, scaled to this rate (Little: L = rate x E2E)
            n = len(prompt)
            if judged:
                r0, n0 = max(judged.items())
                n = min(trace_cap, max(n, math.ceil(n0 / 2 * r / r0)))

            def at(k: int) -> Any:
                return run_point(setup, *repeated(prompt, output, k), rate=r, seed=seed, policy=policy)

            while True:
                res = at(n)
                if not meets(res, slo):  # from an empty engine a longer trace only queues more: it fails there too
                    return False
                need = math.ceil(SHORT_RUN * in_flight(res, r))
                if n >= need:
                    break
                if need > trace_cap:  # from an empty engine the requests in flight only grow (n <= trace_cap < need)
                    return False
                n = min(trace_cap, max(need + need // 2, 2 * n))
            longer = at(2 * n)
            if in_flight(longer, r) > STEADY_GROWTH * in_flight(res, r):
                return False
            judged[r] = 2 * n
            return meets(longer, slo)

        r_lo, r_hi = 0.0, max(last.requests_per_s * 2, 1e-3)
        for _ in range(RATE_DOUBLINGS):
            if not ok_r(r_hi):
                break
            r_lo, r_hi = r_hi, r_hi * 2
        else:
            unbounded = r_lo  # every rate tried met it
        if unbounded is None:
            # bisection until the bracket is within 1/SEARCH_PRECISION of the rate met (from 0 where the first
            # ceiling failed: the lower end is found first), at most RATE_BISECTIONS halvings
            for _ in range(RATE_BISECTIONS):
                if r_lo > 0 and r_hi - r_lo <= r_lo / SEARCH_PRECISION:
                    break
                mid = (r_lo + r_hi) / 2
                if ok_r(mid):
                    r_lo = mid
                else:
                    r_hi = mid
            top_rate = round(r_lo, 4) if r_lo > 0 else None  # no rate met: none, not 0 requests/s
        rate_requests = judged.get(r_lo)
    else:
        rate_requests = None
    return {"slo_s": dict(slo), "percentile": SLO_PERCENTILE, "max_concurrency": lo,
            "max_rate_per_s": top_rate, "rate_met_up_to": unbounded, "rate_requests": rate_requests,
            "binding_limit": words, "binds": binds,
            "kv_capacity_requests": setup["kv_requests"], "max_num_seqs": setup["max_num_seqs"],
            "at_max_concurrency": last.to_json() if last else None}


def rate_curve(setup: dict[str, Any], prompt: np.ndarray, output: np.ndarray, rates: list[float], bound: float,
               seed: int, policy: str = "paged", refine: int = 0) -> tuple[list[float], float | None]:
    """Normalized latency (s/token) at each Poisson rate (requests/s; the same arrival draw scaled for every
    policy), and the highest rate of ``rates`` at and below which it stays within ``bound`` (None: not even the
    lowest, or within it at every swept rate: the rate is then beyond the sweep); ``refine`` bisection steps
    then narrow that rate between it and the next swept one (or 0 and the lowest), so a ratio of two policies'
    rates is not the sweep's spacing."""
    def nlat(r: float) -> float:
        return normalized_latency(schedule(setup, prompt, output, rate=r, seed=seed, policy=policy), setup["consts"],
                                  output)

    curve = [nlat(r) for r in rates]
    top = None
    k = 0
    for r, lat in zip(rates, curve, strict=True):
        if lat > bound:
            break
        top = r
        k += 1
    if k == len(rates):
        return curve, None  # within the bound at every swept rate: its rate is beyond the sweep, not known
    if refine:  # (k < len(rates) here: the rate of rates[k] broke the bound)
        lo, hi = (top or 0.0), rates[k]
        for _ in range(refine):
            mid = (lo + hi) / 2
            if nlat(mid) <= bound:
                lo = mid
            else:
                hi = mid
        top = round(lo, 4) if lo > 0 else None
    return curve, top


def parse_rates_per_s(text: str, field: str) -> list[float]:
    """``A:B:N`` requests per second (:func:`kvdash.simulate.capacity.parse_rates`' rule)."""
    from kvdash.simulate.capacity import parse_rates

    try:
        return parse_rates(text, field)
    except InputError as exc:
        raise InputError(field, text, exc.allowed.replace("requests per step", "requests per second")) from exc

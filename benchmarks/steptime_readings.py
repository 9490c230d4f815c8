"""Two more readings of how the measured runs were served, tried beside the time model (issue 28), not changes to it.

``dp-lockstep``: vLLM's attention data-parallel ranks run every forward pass together (each MoE layer gathers
the ranks' tokens and scatters the results back), so a step lasts as long as the slowest rank's.  The time
model simulates one rank alone (its share of the users) and gives every rank that rank's times.  This reading
simulates each rank's closed loop (the users' phases evenly spread as in ``steptime_fit.py``, dealt round robin
to the ranks), lines the ranks' steps up and takes the slowest rank's step each time; the schedule of each rank
does not depend on time, so only the steps' lengths change.  A stretch of decode steps the simulator sums in
closed form counts each of its steps at the stretch's mean (its steps differ by the KV of one more token for
each running request a step).  Each rank's step still counts its routed experts as if
every rank had its tokens (the time model's DP rule), so a step where one rank prefills and the others decode
is over-counted: what lockstep adds here is an upper bound.

``aiperf``: aiconfigurator's own benchmark templates run aiperf (0.3.0 in ``generator/sflow.py``) at exact
lengths, a warm-up, then 20 N measured requests, and aiperf 0.3.0 opens the measured phase only when the warm-up
has drained, with all N requests at once (``CreditIssuingStrategy._execute_phases``,
``aiperf/timing/credit_issuing_strategy.py``).  This reading simulates exactly that for every row (N users at
once, 20 requests each of exactly ISL / OSL tokens, every request measured), refits the constants on the
calibration rows and reports both sets.

``link-by-generation``: the time model counts each tensor-parallel all-reduce's bytes at the GPU's spec NVLink
bandwidth (coefficient 1, fitted at 1.02 when freed) on every GPU.  This reading gives Hopper (H100, H200) and
Blackwell (B200, B300) a coefficient each, as it gives their compute: every row simulated again with the links at
half their bandwidth, so a row's link seconds at spec are the difference of the two fixed features (the schedule
does not depend on time and the link seconds are inversely proportional to the bandwidth; ``link_seconds``), then
the constants refitted on the calibration rows with the link seconds in two columns of their own, each at least 1
(no GPU beats its spec).

All three print their errors beside the time model's (``steptime_fit.py``'s cache and choices); none changes what
kvdash ships.  Usage::

    .venv/bin/python benchmarks/steptime_readings.py dp-lockstep --cache /tmp/steptime_cache.json
    .venv/bin/python benchmarks/steptime_readings.py aiperf --cache /tmp/steptime_cache.json
    .venv/bin/python benchmarks/steptime_readings.py link-by-generation --cache /tmp/steptime_cache.json
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from multiprocessing import Pool as Processes
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import steptime_fit as sf  # noqa: E402

from kvdash.core.steptime import Constants  # noqa: E402
from kvdash.simulate.timed import simulate_timed  # noqa: E402

AIPERF_ROUNDS = 20  # bench_run.sh.j2's BENCH_MULTI_ROUND and sflow.py's MULTI_ROUND default


def row_coef(coef: np.ndarray, row: dict[str, str]) -> np.ndarray:
    """The fitted constants (steptime_fit's seven) as the six a row's raw step features multiply: c_mem, the
    c_flop of the row's GPU generation, c_step, c_layer, c_allreduce, and 1 for the fixed seconds."""
    return np.array([coef[0], coef[5] if sf.blackwell(row) else coef[1], coef[2], coef[3], coef[4], 1.0])


def step_times(cum: np.ndarray, c6: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(seconds of every step, steps done at the end of every segment) from a closed loop's running feature sums.
    A segment of ``k`` decode steps (its step feature, the constant 1 a step, sums to ``k``) is spread evenly over
    its steps (each step's contexts one token longer than the last's, for every running request)."""
    d = np.diff(cum, axis=0)
    k = np.rint(d[:, 2]).astype(np.int64)
    seconds = d @ c6
    if np.any((k == 0) & (seconds != 0)):
        raise ValueError("a segment of time without a step (an idle gap between Poisson arrivals): closed loops only")
    per = np.where(k > 0, seconds / np.maximum(k, 1), 0.0)
    return np.repeat(per, k), np.rint(cum[:, 2]).astype(np.int64)


def lockstep(ranks: list[np.ndarray]) -> np.ndarray:
    """Seconds at the end of every global step (index 0: time 0) when the ranks step together: each step lasts
    as long as the slowest rank's; a rank whose requests are done has no step to wait for."""
    width = max(len(t) for t in ranks)
    m = np.zeros((len(ranks), width))
    for r, t in enumerate(ranks):
        m[r, :len(t)] = t
    return np.concatenate([[0.0], np.cumsum(m.max(axis=0))])


def dp_rank_loops(row: dict[str, str], per_user: int, spread: float) -> list[tuple[Any, int, np.ndarray]]:
    """Each DP rank's closed loop, simulated: its users (every ``dp``-th of the row's, their phases evenly spread
    over ``spread`` of a request as in steptime_fit.simulate_row), as (schedule, users, output lengths)."""
    s = sf.setup(row)
    dp = s["dp"]
    users = sf.rank_users(row, dp)
    isl, osl = int(row["isl"]), int(row["osl"])
    seqs, batched = sf.batch_caps(row)
    out = []
    for r in range(dp):
        n = users * per_user
        P = np.full(n, isl, dtype=np.int64)
        OUT = np.full(n, max(2, osl), dtype=np.int64)
        OUT[:users] = np.maximum(2, np.rint(osl * sf.phases(users, spread, dp, r))).astype(np.int64)
        sched = simulate_timed(P, OUT, s["pool"], s["mc"], s["gpu"], Constants(), seqs, batched, concurrency=users)
        out.append((sched, users, OUT))
    return out


def dp_times(row: dict[str, str], coef: np.ndarray, per_user: int, spread: float) -> dict[str, tuple[float, float]]:
    """The steady rounds' mean (TTFT s without c_request, TPOT s) of a DP row, its ranks alone (each on its own
    clock, as the time model has it) and in lockstep."""
    c6 = row_coef(coef, row)
    loops = dp_rank_loops(row, per_user, spread)
    times = [step_times(sched.cum, c6) for sched, _, _ in loops]
    together = lockstep([t for t, _ in times])
    result = {}
    for label in ("alone", "lockstep"):
        ttft, tpot = [], []
        for (sched, users, OUT), (t, ends) in zip(loops, times, strict=True):
            a, b = rank_seconds(sched, users, OUT, ends, together if label == "lockstep" else lockstep([t]))
            ttft.append(a)
            tpot.append(b)
        result[label] = (float(np.concatenate(ttft).mean()), float(np.concatenate(tpot).mean()))
    return result


def rank_seconds(sched: Any, users: int, OUT: np.ndarray, ends: np.ndarray,
                 clock: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(TTFT s without c_request, TPOT s) of a rank's steady-round requests (every one after each user's first, as
    steptime_fit measures them) on ``clock`` (seconds at the end of every step, index 0: time 0): a segment's end
    is the clock after the steps done by then (``ends``)."""
    m = np.arange(users, len(OUT))
    arrived = np.where(sched.arrival_seg[m] < 0, 0, ends[np.maximum(sched.arrival_seg[m], 0)])
    first, last = ends[sched.first_seg[m]], ends[sched.finish_seg[m]]
    return clock[first] - clock[arrived], (clock[last] - clock[first]) / (OUT[m] - 1)


def with_seconds(sim: dict[str, Any], ttft_s: float, tpot_s: float, in_step: float) -> dict[str, Any]:
    """A row's simulation (features split by GPU generation, as steptime_fit.fit takes them) whose steady TTFT and
    TPOT are these seconds: in the fixed column, which the constants do not scale, so steptime_fit.predict gives
    them back (the TTFT with c_request, mixed with the row's own round in step, every rank alike there)."""
    s = dict(sim)
    s["tpot_f"] = np.append(np.zeros(6), tpot_s)
    s["ttft_steady_f"] = np.append(np.zeros(6), ttft_s)
    s["ttft_f"] = (1 - in_step) * s["ttft_steady_f"] + in_step * np.asarray(s["ttft_burst_f"])
    return s


def _dp_job(job: tuple[dict[str, str], np.ndarray, int, float]) -> tuple[str, dict[str, tuple[float, float]]]:
    row, coef, per_user, spread = job
    return row["id"], dp_times(row, coef, per_user, spread)


def aiperf_features(row: dict[str, str]) -> dict[str, Any]:
    """A row simulated as aiperf 0.3.0 measures it: every user's first request at once, AIPERF_ROUNDS requests a
    user of exactly ISL / OSL tokens, every one measured (the features steptime_fit.fit takes)."""
    s = sf.setup(row)
    users = sf.rank_users(row, s["dp"])
    n = users * AIPERF_ROUNDS
    P = np.full(n, int(row["isl"]), dtype=np.int64)
    OUT = np.full(n, max(2, int(row["osl"])), dtype=np.int64)
    seqs, batched = sf.batch_caps(row)
    sched = simulate_timed(P, OUT, s["pool"], s["mc"], s["gpu"], Constants(), seqs, batched, concurrency=users)
    ttft_all, tpot_all = sf.request_features(sched, OUT)
    ttft, tpot = ttft_all.mean(axis=0), tpot_all.mean(axis=0)
    return {"ttft_f": ttft, "tpot_f": tpot, "ttft_burst_f": ttft, "capacity": s["capacity"],
            "preemptions": sched.preemptions}


def _aiperf_job(row: dict[str, str]) -> tuple[str, dict[str, Any] | None]:
    try:
        return row["id"], aiperf_features(row)
    except Exception:  # a row the time model cannot simulate (steptime_fit skips it too)
        return row["id"], None


LINK_SCALE = 0.5  # the second simulation's NVLink bandwidth, a share of the spec figure


def _half_link_job(job: tuple[dict[str, str], int, float]) -> tuple[str, dict[str, Any] | None]:
    row, per_user, spread = job
    try:
        return row["id"], sf.simulate_row(row, per_user, spread, link_scale=LINK_SCALE)
    except Exception:  # a row the time model cannot simulate (steptime_fit skips it too)
        return row["id"], None


def link_seconds(spec: np.ndarray, scaled: np.ndarray, scale: float = LINK_SCALE) -> float:
    """A row's link seconds at the spec bandwidth from its raw features (memory s, compute s, 1, layers,
    all-reduces, fixed s) simulated at spec and at ``scale`` of it: the links are the only fixed seconds that
    move, by 1 / scale, so link = (fixed(scaled) - fixed(spec)) / (1 / scale - 1)."""
    return float(scaled[5] - spec[5]) / (1 / scale - 1)


def with_links(sims: dict[str, dict[str, Any]], scaled: dict[str, dict[str, Any]], by_id: dict[str, dict[str, str]],
               in_step: float) -> dict[str, dict[str, Any]]:
    """Each row's features for the link-by-generation fit: steptime_fit's seven (compute by GPU generation; the
    TTFT mixed ``in_step`` in step) with the link seconds taken out of the fixed seconds and put in a Hopper and a
    Blackwell column before it, nine in all: memory s, Hopper compute s, 1, layers, all-reduces, Blackwell compute
    s, Hopper link s, Blackwell link s, fixed s."""
    out: dict[str, dict[str, Any]] = {}
    for i, s in sims.items():
        if i not in scaled:
            continue
        bw = sf.blackwell(by_id[i])
        got: dict[str, Any] = {"preemptions": s["preemptions"], "capacity": s["capacity"]}
        for key in ("tpot_f", "ttft_f", "ttft_burst_f"):
            spec, half = np.asarray(s[key], dtype=float), np.asarray(scaled[i][key], dtype=float)
            link = link_seconds(spec, half)
            g = sf.by_generation(spec, by_id[i])
            got[key] = np.array([*g[:6], 0.0 if bw else link, link if bw else 0.0, g[6] - link])
        out[i] = got
    sf.mix_ttft(out, in_step)
    return out


LINK_FLOOR = np.array([1.0, 1.0, 0, 0, 0, 1.0, 1.0, 1.0, 0])  # c_mem, both c_flop and both links at least 1


def fit_links(sims: dict[str, dict[str, Any]], by_id: dict[str, dict[str, str]], cal: list[str]) -> np.ndarray:
    """steptime_fit.fit on :func:`with_links`' nine features: nine constants (c_mem, c_flop, c_step, c_layer,
    c_allreduce, c_flop on Blackwell, the Hopper and Blackwell link coefficients, c_request), the same weights and
    physical floors, the links' at 1 too; steptime_fit.predict reads them."""
    return sf.fit(sims, by_id, cal, LINK_FLOOR)


def summary(label: str, ids: list[str], by_id: dict[str, dict[str, str]], sims: dict, coef: np.ndarray) -> str:
    e = sf.errors(ids, by_id, sims, coef)
    meas, hit, false = sf.cliff_counts(ids, by_id, sims, coef)
    return f"| {label} | {len(ids)} | {e[0]:.1f} | {e[1]:+.1f} | {e[2]:.1f} | {e[3]:+.1f} | {hit} of {meas} ({false}) |"


HEAD = ["| rows | count | TPOT MAPE % | TPOT bias % | TTFT MAPE % | TTFT median bias % | cliffs predicted (false) |",
        "|---|---:|---:|---:|---:|---:|---:|"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("reading", choices=("dp-lockstep", "aiperf", "link-by-generation"))
    ap.add_argument("--cache", default="", help="steptime_fit.py's --cache file (its simulations of every row)")
    ap.add_argument("--spread", type=float, default=0.4, help="the phase spread steptime_fit.py chose")
    ap.add_argument("--in-step", type=float, default=1 / 6, help="the share in step steptime_fit.py chose")
    ap.add_argument("--requests-per-user", type=int, default=10)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    sf.check_shares(ap, args.spread, args.in_step)
    sf.check_counts(ap, args.requests_per_user, args.jobs)
    rows = list(csv.DictReader((sf.DATA / "silicon_vllm_agg.csv").open()))
    by_id = {r["id"]: r for r in rows}
    simulated = sf.simulations(rows, args.requests_per_user, args.spread, args.cache)
    raw = {i: dict(s) for i, s in simulated.items()}  # the features as simulated (the fit splits base's in place)
    base = {i: dict(s) for i, s in simulated.items()}
    coef = sf.fit_on_calibration(base, by_id, args.in_step)
    cal = [i for i in base if by_id[i]["model_path"] in sf.CALIBRATION]
    val = [i for i in base if by_id[i]["model_path"] in sf.VALIDATION]
    print("\n".join(HEAD))
    print(summary("calibration, the time model", cal, by_id, base, coef))
    if args.reading == "dp-lockstep":
        dp_rows = [i for i in val if sf.setup(by_id[i])["dp"] > 1]
        with Processes(args.jobs) as pool:
            got = dict(pool.map(_dp_job, [(by_id[i], coef, args.requests_per_user, args.spread) for i in dp_rows]))
        lock = {i: (with_seconds(s, *got[i]["lockstep"], args.in_step) if i in got else s) for i, s in base.items()}
        alone = max(abs(got[i]["alone"][1] - sf.predict(base[i]["tpot_f"], coef)) / sf.predict(base[i]["tpot_f"], coef)
                    for i in dp_rows)
        print(summary(f"validation DP rows, each rank alone (the time model; the round-robin ranks' TPOT within "
                      f"{100 * alone:.1f} %)", dp_rows, by_id, base, coef))
        print(summary("validation DP rows, ranks in lockstep", dp_rows, by_id, lock, coef))
        print(summary("validation, the time model", val, by_id, base, coef))
        print(summary("validation, DP ranks in lockstep", val, by_id, lock, coef))
        return 0
    if args.reading == "link-by-generation":
        with Processes(args.jobs) as pool:
            half = {i: h for i, h in pool.map(_half_link_job, [(by_id[i], args.requests_per_user, args.spread)
                                                                 for i in base], chunksize=8) if h is not None}
        linked = with_links(raw, half, by_id, args.in_step)
        coef_l = fit_links(linked, by_id, [i for i in cal if i in linked])
        print(summary("calibration, links by GPU generation", [i for i in cal if i in linked], by_id, linked, coef_l))
        print(summary("validation, the time model", val, by_id, base, coef))
        print(summary("validation, links by GPU generation", [i for i in val if i in linked], by_id, linked, coef_l))
        print(f"\nlinks by GPU generation: c_mem {coef_l[0]:.4g}, c_flop {coef_l[1]:.4g} (Blackwell {coef_l[5]:.4g}), "
              f"c_layer {coef_l[3] * 1e6:.4g} us, c_allreduce {coef_l[4] * 1e6:.4g} us, c_request "
              f"{coef_l[8] * 1e3:.4g} ms, link coefficient Hopper {coef_l[6]:.4g}, Blackwell {coef_l[7]:.4g} "
              f"(achieved {100 / coef_l[7]:.0f} % of the spec NVLink bandwidth)")
        return 0
    with Processes(args.jobs) as pool:
        got_a = dict(pool.map(_aiperf_job, rows, chunksize=4))
    sims = {i: dict(s) for i, s in got_a.items() if s is not None}
    coef_a = sf.fit_on_calibration(sims, by_id, None)
    cal_a = [i for i in sims if by_id[i]["model_path"] in sf.CALIBRATION]
    val_a = [i for i in sims if by_id[i]["model_path"] in sf.VALIDATION]
    print(summary(f"calibration, aiperf's protocol ({AIPERF_ROUNDS} rounds, refitted)", cal_a, by_id, sims, coef_a))
    print(summary("validation, the time model", val, by_id, base, coef))
    print(summary(f"validation, aiperf's protocol ({AIPERF_ROUNDS} rounds, refitted)", val_a, by_id, sims, coef_a))
    return 0


if __name__ == "__main__":
    sys.exit(main())

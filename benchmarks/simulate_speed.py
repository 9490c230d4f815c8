"""Simulation speed: token-steps per second of each policy, the event-driven simulator against the plain
step-by-step reference in the same run.

Run: python benchmarks/simulate_speed.py [--requests 10000] [--rounds 5] [--ref-rounds 1]

The setup is the PagedAttention paper's, saturated: OPT-13B (fp16, 819,200 B per token) with 12 GiB of
KV cache = 15,728 token slots (Table 1), 16-token blocks, ShareGPT-like lengths (means 161 in, 338 out),
Poisson 0.5 requests per step, 10,000 requests; the paged pool preempts (about 1.5 times per request).
A token-step is one running request advanced by one step (one output token).  Targets (issue 13):
paged >= 5 M token-steps/s, contiguous >= 10 M.  Times are CPU seconds of this process
(``time.process_time``), so that other work on a shared machine does not count.  Both simulators must
give identical results; the script checks it and stops if they differ.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

from kvdash.simulate.engine import Result, simulate
from kvdash.simulate.reference import simulate_reference
from kvdash.simulate.workload import PRESETS

CAPACITY = 12 * 2**30 // 819_200  # 15,728
TARGET = {"paged": 5e6, "paged-prefix": 5e6, "max": 10e6, "pow2": 10e6, "oracle": 10e6}


def timed(fn, rounds: int) -> tuple[float, Result]:  # type: ignore[no-untyped-def]
    times, r = [], None
    for _ in range(rounds):
        t = time.process_time()
        r = fn()
        times.append(time.process_time() - t)
    assert r is not None
    return statistics.median(times), r


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ref-rounds", type=int, default=1)
    ap.add_argument("--rate", type=float, default=0.5)
    ap.add_argument("--policies", default="paged,max,pow2,oracle")
    args = ap.parse_args()
    w = replace(PRESETS["sharegpt"], requests=args.requests, rate=args.rate)
    print(f"{args.requests:,} ShareGPT-like requests, OPT-13B 12 GiB = {CAPACITY:,} token slots, block 16, Poisson "
          f"{args.rate} per step, first-fit; median of {args.rounds} (fast) and {args.ref_rounds} (reference) runs")
    print("| policy | token-steps | preemptions | fast CPU s | fast M token-steps/s | target | reference CPU s | "
          "reference M token-steps/s | speed-up |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    missed = []
    for policy in args.policies.split(","):
        fast_s, fast = timed(lambda p=policy: simulate(w, p, CAPACITY, 16, 2048, seed=0), args.rounds)
        ref_s, ref = timed(lambda p=policy: simulate_reference(w, p, CAPACITY, 16, 2048, seed=0), args.ref_rounds)
        a, b = fast.to_json(), ref.to_json()
        a.pop("allocator"), b.pop("allocator")
        if a != b:
            raise SystemExit(f"{policy}: the fast simulator and the reference disagree")
        rate = fast.token_steps / fast_s
        if rate < TARGET[policy]:
            missed.append(policy)
        print(f"| {policy} | {fast.token_steps:,} | {fast.preemptions:,} | {fast_s:.3f} | {rate / 1e6:.1f} | "
              f"{TARGET[policy] / 1e6:.0f} | {ref_s:.2f} | {ref.token_steps / ref_s / 1e6:.2f} | "
              f"{ref_s / fast_s:.0f}x |")
    print("all targets met" if not missed else "below target: " + ", ".join(missed))


if __name__ == "__main__":
    main()

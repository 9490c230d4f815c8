"""Simulation speed: token-steps per second for each policy, 10,000 ShareGPT-like requests.

Run: python benchmarks/simulate_speed.py [--requests 10000] [--rounds 3]

A token-step is one running request advanced by one step.  The pool is Llama-3.1-8B (bf16, 131,072 B
per token) in a 60 GiB budget: 491,520 token slots, 16-token blocks; Poisson arrivals at 1.5 per step.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

from kvdash.simulate.engine import PRESETS, simulate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=float, default=1.5)
    args = ap.parse_args()
    capacity = 60 * 2**30 // 131_072
    w = replace(PRESETS["sharegpt"], requests=args.requests, rate=args.rate)
    print(f"{args.requests:,} ShareGPT-like requests, {capacity:,} token slots, Poisson {args.rate} per step; "
          f"median of {args.rounds}")
    print("| policy | seconds | steps | token-steps | M token-steps/s | avg batch | preemptions |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for policy in ("max", "pow2", "oracle", "paged", "paged-prefix"):
        times = []
        for _ in range(args.rounds):
            t = time.perf_counter()
            r = simulate(w if policy != "paged-prefix" else replace(w, prefix=64), policy, capacity, 16, 2048,
                         seed=1)
            times.append(time.perf_counter() - t)
        dt = statistics.median(times)
        token_steps = r.tokens_per_step * r.steps
        print(f"| {policy} | {dt:.2f} | {r.steps:,} | {token_steps:,.0f} | {token_steps / dt / 1e6:.1f} | "
              f"{r.avg_running:.1f} | {r.preemptions:,} |")


if __name__ == "__main__":
    main()

"""A grid's simulations on 1 and N local worker processes: wall seconds and the speed-up (issue 28 item 7).

Run: python benchmarks/sweep_jobs.py [--grid sweeps/paper-throughput.yaml] [--jobs 2] [--rounds 3] [--out FILE]

Evaluates the grid (``kvdash.sweep.evaluate.expand``, the simulate: block included; no report written) with
``jobs=1`` and with ``jobs=N`` in turn, --rounds times each, and prints the median wall seconds of each, the
speed-up (median serial / median parallel) and whether every parallel frame equals the serial one.  Wall time,
not CPU time: the workers' CPU is not this process's.  On a shared machine the figures move with its load;
the load average is printed beside them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from kvdash.sweep.evaluate import expand
from kvdash.sweep.gridfile import parse_grid


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--grid", default="sweeps/paper-throughput.yaml")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    spec = parse_grid(Path(args.grid))
    times: dict[int, list[float]] = {1: [], args.jobs: []}
    reference = None
    same = True
    load = []
    for _ in range(args.rounds):
        for jobs in (1, args.jobs):
            load.append(os.getloadavg()[0])
            t0 = time.perf_counter()
            frame = expand(spec, jobs=jobs).frame
            times[jobs].append(time.perf_counter() - t0)
            if reference is None:
                reference = frame
            else:
                same = same and frame.equals(reference)
    serial, parallel = statistics.median(times[1]), statistics.median(times[args.jobs])
    lines = [
        f"# `kvdash sweep --jobs`: {args.grid}, {spec.size()} points, {os.cpu_count()} cores",
        "",
        f"Command: `python benchmarks/sweep_jobs.py --grid {args.grid} --jobs {args.jobs} --rounds {args.rounds}`",
        "",
        "| jobs | wall seconds (each round) | median |",
        "|---:|---|---:|",
        f"| 1 | {', '.join(f'{t:.1f}' for t in times[1])} | {serial:.1f} |",
        f"| {args.jobs} | {', '.join(f'{t:.1f}' for t in times[args.jobs])} | {parallel:.1f} |",
        "",
        f"Speed-up: {serial / parallel:.2f}x (median over median); every frame equal to the serial one: {same}; "
        f"load average at the starts {min(load):.1f} to {max(load):.1f}.",
    ]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()

"""``expand()`` of a grid in fresh processes, this tree against an older one, interleaved: the evaluation alone
(no report), median of the rounds.  The 1M grid by default.

Run: python benchmarks/expand_compare.py OLD_TREE [--grid benchmarks/grid_1m.yaml] [--rounds 5]
(OLD_TREE: e.g. ``git archive 024ca53 | tar -x -C /tmp/old``; both trees run on this interpreter)."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CODE = """
import sys, time
from pathlib import Path
from kvdash.sweep.gridfile import parse_grid
from kvdash.sweep.evaluate import expand
spec = parse_grid(Path(sys.argv[1]))
expand(spec)
t = time.perf_counter(); expand(spec); print(time.perf_counter() - t)
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("old", type=Path)
    ap.add_argument("--grid", default="benchmarks/grid_1m.yaml")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    trees = {"before": a.old.resolve(), "after": REPO}
    times: dict[str, list[float]] = {k: [] for k in trees}
    for _ in range(a.rounds):
        for name, tree in trees.items():
            env = dict(os.environ, PYTHONPATH=str(tree))
            out = subprocess.run([sys.executable, "-c", CODE, str(tree / a.grid)], env=env, cwd=tree,
                                 capture_output=True, text=True, check=True)
            times[name].append(float(out.stdout.strip().splitlines()[-1]))
    for name, values in times.items():
        print(f"{name}: median {statistics.median(values):.3f} s ({', '.join(f'{v:.3f}' for v in values)})")
    print(f"after / before: {statistics.median(times['after']) / statistics.median(times['before']):.3f}")


if __name__ == "__main__":
    main()

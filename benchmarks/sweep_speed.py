"""Sweep speed, side by side: kvdash's vectorised grid vs the plain-Python baseline vs kvdash's scalar path.

Run: python benchmarks/sweep_speed.py [--rounds N] [--scalar-sample N] [--baseline PATH]

* vectorised: ``expand()`` of ``benchmarks/grid_1m.yaml`` (1,000,000 points, every result column, in memory)
* baseline: ``shared/bench/formula_loop.py`` -- the tutorial formulas looped in plain Python over its own
  1,000,000 points (run as given, in a subprocess; found beside the checkout or via --baseline)
* scalar: the same grid's points one by one through ``kvdash.core.calc.evaluate`` (pool shapes from
  ``rank_shapes`` and ``point_metrics`` on integers, what ``kvdash calc`` runs), timed on a random sample
  and reported as points per second
* rendering: ``write_report`` for the 1,000,000-point grid (CSV, charts, Markdown, HTML) into a temp folder

Medians over interleaved rounds; the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kvdash.core.calc import BudgetSpec, CalcInput, evaluate, rank_shapes
from kvdash.core.model import model_from_spec
from kvdash.report.build import write_report
from kvdash.sweep.evaluate import expand
from kvdash.sweep.gridfile import parse_grid

HERE = Path(__file__).resolve().parent
GRID = HERE / "grid_1m.yaml"


def find_baseline(given: str | None) -> Path | None:
    candidates = [Path(given)] if given else []
    candidates += [HERE.parent.parent / "shared" / "bench" / "formula_loop.py",
                   HERE.parent / "shared" / "bench" / "formula_loop.py"]
    return next((c for c in candidates if c.is_file()), None)


def baseline_rate(path: Path) -> float:
    out = subprocess.run([sys.executable, str(path), "1000000"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"([0-9.]+) M points/s", out)
    if not match:
        raise SystemExit(f"unexpected baseline output: {out!r}")
    return float(match.group(1)) * 1e6


def scalar_rate(spec, frame, sample: int) -> float:  # type: ignore[no-untyped-def]
    rows = random.Random(7).sample(range(frame.height), sample)
    points = frame[rows].select("model", "workload", "kv_dtype", "kv_scales", "block_size", "tp", "pp",
                                "budget_bytes", "max_model_len").to_dicts()
    archs = {name: model_from_spec(e.spec, spec.path.parent) for name, e in spec.models.items()}
    t = time.perf_counter()
    for p in points:
        w = spec.workloads[p["workload"]]
        inp = CalcInput(arch=archs[p["model"]], kv_dtype=p["kv_dtype"], kv_scales=p["kv_scales"],
                        block_size=p["block_size"], tp=p["tp"], pp=p["pp"], used=w.lengths[0],
                        max_reserved=w.max_reserved, prefix=w.prefix, max_model_len=p["max_model_len"],
                        budget=BudgetSpec(bytes=p["budget_bytes"]))
        shapes = rank_shapes(inp.arch, inp.kv_dtype, inp.kv_scales, inp.tp, inp.pp, inp.block_size)
        evaluate(inp, shapes, p["budget_bytes"], w.lengths, w.finals)
    return sample / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--scalar-sample", type=int, default=20_000)
    ap.add_argument("--baseline")
    ap.add_argument("--no-render", action="store_true")
    args = ap.parse_args()
    spec = parse_grid(GRID)
    base_path = find_baseline(args.baseline)
    vec, base, scal, render = [], [], [], []
    frame = expand(spec).frame  # warm-up (imports, caches)
    for _ in range(args.rounds):
        t = time.perf_counter()
        frame = expand(spec).frame
        vec.append(time.perf_counter() - t)
        if base_path:
            base.append(baseline_rate(base_path))
    for _ in range(3):
        scal.append(scalar_rate(spec, frame, args.scalar_sample))
    if not args.no_render:
        from kvdash.sweep.evaluate import Expanded

        for _ in range(3):
            with tempfile.TemporaryDirectory() as tmp:
                t = time.perf_counter()
                write_report(spec, Expanded(frame, frame.height), Path(tmp) / "out")
                render.append(time.perf_counter() - t)
    n = frame.height
    v = statistics.median(vec)
    vec_rate = n / v
    print(f"grid: {GRID.name}, {n:,} points; {args.rounds} rounds (medians; min in brackets)\n")
    print("| path | time for 1,000,000 points | points/s | kvdash vectorised is |")
    print("|---|---:|---:|---:|")
    print(f"| kvdash sweep, vectorised (polars) | {v:.3f} s [{min(vec):.3f}] | {vec_rate / 1e6:.2f} M | 1.00x |")
    if base:
        b = statistics.median(base)
        print(f"| baseline formula_loop.py (plain Python) | {1e6 / b:.3f} s | {b / 1e6:.2f} M | "
              f"{vec_rate / b:.1f}x faster |")
    else:
        print("| baseline formula_loop.py | not found (pass --baseline PATH) | | |")
    s = statistics.median(scal)
    print(f"| kvdash scalar calculator path, one by one | {1e6 / s:.1f} s (extrapolated from "
          f"{args.scalar_sample:,}) | {s / 1e6:.4f} M | {vec_rate / s:.0f}x faster |")
    if render:
        print(f"\nrendering the 1,000,000-point reports (CSV, 3 SVG charts, Markdown, HTML): "
              f"median {statistics.median(render):.2f} s [{min(render):.2f}]")
    print(f"\ntargets: vectorised <= 0.25 s: {'met' if v <= 0.25 else 'NOT met'}; "
          f">= 2x baseline: {'met' if base and vec_rate >= 2 * statistics.median(base) else 'see above'}; "
          f">= 50x scalar: {'met' if vec_rate >= 50 * s else 'NOT met'}; rendering <= 3 s: "
          f"{'met' if render and statistics.median(render) <= 3 else 'see above'}")


if __name__ == "__main__":
    main()

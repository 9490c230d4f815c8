"""Sweep speed, as ratios measured in one run: end to end, and evaluation against a plain loop and a numpy floor.

Run: python benchmarks/sweep_speed.py [--rounds N] [--big-rounds N] [--before PATH] [--before-path PATHS]
     [--nvitop PATH] [--shared PATH]

* small: ``kvdash sweep sweeps/exercise.yaml`` (4 points, every output) end to end in a fresh process,
  beside ``nvitop --version`` (a fresh process of a comparable tool), interleaved; target: within 4x
* 1M: ``kvdash sweep benchmarks/grid_1m.yaml`` (1,000,000 points: evaluate, judge, render, write) end to end;
  with ``--before PATH`` (an older kvdash source tree, e.g. from ``git archive``) the same command of that tree
  runs interleaved with it, and the speed-up is their ratio; target: at least 3x
* evaluation: ``expand()`` of the 1M grid in memory, per result column, against the numpy floor
  (``bench/numpy_floor.py``: the tutorial's formulas vectorised, per column materialised) and the plain
  Python loop (``bench/formula_loop.py``); target: within 3x of the floor per column.  Both scripts live in
  the shared folder beside the checkout (or ``--shared PATH``); without it those rows say so and the rest runs.

Medians over interleaved rounds; the machine may be shared and noisy, so ratios from one run are what count.

Both source trees are byte-compiled first (``compileall``), as an installed package is: with
``PYTHONDONTWRITEBYTECODE`` set (as on the shared development machine) every run would otherwise compile
kvdash's ~40 modules from source (0.13 s), a cost no installed kvdash pays.  ``--before-path`` adds folders to
the older tree's ``PYTHONPATH`` (e.g. one holding matplotlib, which the tree before issue 12 imports).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SMALL = REPO / "sweeps" / "exercise.yaml"
BIG = HERE / "grid_1m.yaml"


def find_shared(given: str | None) -> Path | None:
    candidates = [Path(given)] if given else []
    candidates += [REPO.parent.parent / "shared" / "bench", REPO.parent / "shared" / "bench", REPO / "shared" / "bench"]
    return next((c for c in candidates if (c / "numpy_floor.py").is_file()), None)


CPU: dict[str, list[float]] = {}


def timed(cmd: list[str], env: dict[str, str] | None = None, cpu: str = "", cwd: Path | None = None) -> float:
    """Wall seconds of one run; with ``cpu``, its CPU seconds (user + system, all threads) are kept under that
    name too: on a shared machine CPU time is steadier than wall time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env, cwd=cwd)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if cpu:
        CPU.setdefault(cpu, []).append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return wall


def kvdash_cmd(source: Path | None, extra: str = "") -> tuple[list[str], dict[str, str] | None]:
    """The command running kvdash's CLI: this checkout, or the source tree ``source`` (via PYTHONPATH, then
    ``extra``; run it with the tree as working directory, since ``python -m`` puts the working directory first
    on sys.path)."""
    if source is None:
        return [sys.executable, "-m", "kvdash.cli"], None
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(source), extra) if p))
    return [sys.executable, "-m", "kvdash.cli"], env


def compile_tree(tree: Path) -> None:
    """Byte-compile a kvdash source tree, as installing it would (a no-op when its .pyc files are current)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "kvdash")], check=True,
                   stdout=subprocess.DEVNULL)


def parse_rate(out: str, pattern: str) -> float:
    match = re.search(pattern, out)
    if not match:
        raise SystemExit(f"unexpected benchmark output: {out!r}")
    return float(match.group(1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7, help="rounds of the small grid and of evaluation")
    ap.add_argument("--big-rounds", type=int, default=3, help="rounds of the 1M grid end to end")
    ap.add_argument("--before", help="an older kvdash source tree to time the 1M grid against")
    ap.add_argument("--before-path", default="", help="folders added to the older tree's PYTHONPATH "
                    "(e.g. one holding matplotlib)")
    ap.add_argument("--nvitop", help="the nvitop executable (default: on PATH or beside this Python)")
    ap.add_argument("--shared", help="folder holding numpy_floor.py and formula_loop.py")
    ap.add_argument("--skip-big", action="store_true")
    args = ap.parse_args()
    shared = find_shared(args.shared)
    nvitop = args.nvitop or shutil.which("nvitop") or str(Path(sys.executable).with_name("nvitop"))
    have_nvitop = Path(nvitop).is_file()
    cmd, _ = kvdash_cmd(None)
    compile_tree(REPO)
    if args.before:
        compile_tree(Path(args.before).resolve())
    tmp = Path(tempfile.mkdtemp(prefix="kvdash-speed-"))
    try:
        # 1. a small grid end to end, beside nvitop --version
        small, ref = [], []
        timed([*cmd, "sweep", str(SMALL), "--out", str(tmp / "small"), "-q"])  # warm the file cache
        for _ in range(args.rounds):
            small.append(timed([*cmd, "sweep", str(SMALL), "--out", str(tmp / "small"), "-q"]))
            if have_nvitop:
                ref.append(timed([nvitop, "--version"]))
        # 2. the 1M grid end to end (and an older tree's, interleaved)
        big, before = [], []
        if not args.skip_big:
            bcmd, benv = kvdash_cmd(Path(args.before).resolve(), args.before_path) if args.before else (cmd, None)
            if args.before:  # the older tree really runs: its own module file
                where = subprocess.run([sys.executable, "-c", "import kvdash; print(kvdash.__file__)"], env=benv,
                                       cwd=Path(args.before).resolve(), capture_output=True, text=True).stdout
                if not where.startswith(str(Path(args.before).resolve())):
                    raise SystemExit(f"--before: kvdash imports from {where.strip()}, not the given tree")
            # the tree before issue 15 reads the workload keys by their old names (used, lengths)
            old_big = tmp / "grid_1m_old_keys.yaml"
            old_big.write_text(re.sub(r"\{group: ", "{lengths: ", re.sub(r"\{length: ", "{used: ", BIG.read_text())))
            for _ in range(args.big_rounds):
                big.append(timed([*cmd, "sweep", str(BIG), "--out", str(tmp / "big"), "-q"], cpu="big"))
                if args.before:
                    before.append(timed([*bcmd, "sweep", str(old_big), "--out", str(tmp / "before"), "-q"], benv,
                                        cpu="before", cwd=Path(args.before).resolve()))
        # 3. evaluation in memory against the floor and the loop
        from kvdash.sweep.columns import RESULT_COLUMNS
        from kvdash.sweep.evaluate import expand
        from kvdash.sweep.gridfile import parse_grid

        spec = parse_grid(BIG)
        frame = expand(spec).frame  # warm-up
        evals, floors, loops = [], [], []
        for _ in range(args.rounds):
            t = time.perf_counter()
            frame = expand(spec).frame
            evals.append(time.perf_counter() - t)
            if shared:
                out = subprocess.run([sys.executable, str(shared / "numpy_floor.py"), str(frame.height), "--rounds",
                                      "1"], capture_output=True, text=True, check=True).stdout
                floors.append(parse_rate(out, r"floor: \d+ points in ([0-9.]+) s"))
                out = subprocess.run([sys.executable, str(shared / "formula_loop.py"), str(frame.height)],
                                     capture_output=True, text=True, check=True).stdout
                loops.append(parse_rate(out, r"in ([0-9.]+) s"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    med = statistics.median
    print(f"sweep speed; medians of interleaved rounds [min]; python {sys.version.split()[0]}\n")
    print("| what | kvdash | reference | ratio | target |")
    print("|---|---:|---:|---:|---|")
    if have_nvitop:
        r = med(small) / med(ref)
        print(f"| 4-point grid end to end vs `nvitop --version` ({args.rounds} rounds) | {med(small):.3f} s "
              f"[{min(small):.3f}] | {med(ref):.3f} s | {r:.2f}x | within 4x: {'met' if r <= 4 else 'NOT met'} |")
    else:
        print(f"| 4-point grid end to end | {med(small):.3f} s | nvitop not installed | | |")
    if big:
        if before:
            r = med(before) / med(big)
            print(f"| 1M grid end to end vs `--before` ({args.big_rounds} rounds) | {med(big):.2f} s "
                  f"[{min(big):.2f}] | {med(before):.2f} s | {r:.1f}x faster | at least 3x: "
                  f"{'met' if r >= 3 else 'NOT met'} |")
            c = med(CPU["before"]) / med(CPU["big"])
            print(f"| 1M grid, CPU seconds (user + system, all threads) vs `--before` | {med(CPU['big']):.2f} s | "
                  f"{med(CPU['before']):.2f} s | {c:.1f}x less | |")
        else:
            print(f"| 1M grid end to end ({args.big_rounds} rounds) | {med(big):.2f} s [{min(big):.2f}] | "
                  "no --before tree | | |")
    ncols = len(RESULT_COLUMNS)
    per_col = med(evals) / ncols
    if floors:
        floor_col = med(floors) / 8  # numpy_floor.py materialises 8 columns
        r = per_col / floor_col
        print(f"| evaluation per column, 1M points ({ncols} columns) vs numpy floor (8 columns) | "
              f"{per_col * 1e3:.1f} ms [{min(evals) / ncols * 1e3:.1f}] | {floor_col * 1e3:.1f} ms | {r:.2f}x | "
              f"within 3x: {'met' if r <= 3 else 'NOT met'} |")
        loop_col = med(loops) / 8
        print(f"| evaluation per column vs plain Python loop (formula_loop.py, 8 columns) | {per_col * 1e3:.1f} ms | "
              f"{loop_col * 1e3:.1f} ms | {loop_col / per_col:.0f}x faster | |")
        print(f"| evaluation, whole grid ({frame.height:,} points, all columns) | {med(evals):.3f} s | | | |")
    else:
        print(f"| evaluation, 1M points ({ncols} columns) | {med(evals):.3f} s ({per_col * 1e3:.1f} ms/column) | "
              "shared bench scripts not found (--shared PATH) | | |")


if __name__ == "__main__":
    main()

"""CPU of the dashboard, this tree against another checkout (the baseline), runs interleaved.

Run: git worktree add /tmp/kvdash-base <commit>   # or: git archive <commit> | tar -x -C /tmp/kvdash-base
     python benchmarks/live_cpu_compare.py --base /tmp/kvdash-base [--rounds 5] [--seconds 20]

Each round runs four fresh processes: base and this tree, each without and with an engine (a local
/metrics server in its own process serving the 66 kB page of live_cpu.realistic_page).  Each
process runs the demo (8 x H200, TP 8) headless at 200x50, polling every 1 s, and reports its CPU
time over wall time after a 2 s warm-up.  Interleaving puts both trees under the same machine load;
the medians and their ratio are printed.  Only ``LiveApp(source, config, interval=, engine=)``
is used, which both trees have.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def worker(seconds: float, engine: str | None) -> None:
    from kvdash.live.analysis import LiveConfig
    from kvdash.sources.demo import DemoSource
    from kvdash.sources.engine import fetch
    from kvdash.tui.app import LiveApp

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    async def go() -> None:
        kw = {"engine": (lambda: fetch(engine, timeout=2.0))} if engine else {}
        app = LiveApp(DemoSource(seed=7), LiveConfig(), interval=1.0, **kw)
        async with app.run_test(size=(200, 50)) as pilot:
            await pilot.pause(2.0)
            c0, t0 = cpu(), time.perf_counter()
            await asyncio.sleep(seconds)
            c1, t1 = cpu(), time.perf_counter()
            print(f"{100 * (c1 - c0) / (t1 - t0):.3f}")
            await pilot.press("q")

    asyncio.run(go())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", type=Path, help="a checkout of the baseline commit")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--worker", nargs=2, metavar=("SECONDS", "ENGINE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(float(args.worker[0]), None if args.worker[1] == "-" else args.worker[1])
        return
    sys.path.insert(0, str(HERE))
    from live_cpu import local_engine

    server, url = local_engine()
    trees = {"base": args.base.resolve(), "this": HERE.parent}
    results: dict[tuple[str, bool], list[float]] = {(t, e): [] for t in trees for e in (False, True)}
    try:
        for _ in range(args.rounds):
            for (tree, with_engine), runs in results.items():
                env = {**os.environ, "PYTHONPATH": str(trees[tree])}
                out = subprocess.run([sys.executable, __file__, "--worker", str(args.seconds),
                                      url if with_engine else "-"], env=env, cwd=trees[tree],
                                     capture_output=True, text=True, check=True)
                runs.append(float(out.stdout.strip().splitlines()[-1]))
    finally:
        server.terminate()
        server.wait()
    med = {k: statistics.median(v) for k, v in results.items()}
    for (tree, with_engine), runs in results.items():
        print(f"{tree:4} {'with engine   ' if with_engine else 'without engine'}: median "
              f"{med[(tree, with_engine)]:.2f} % of one core (runs {', '.join(f'{r:.2f}' for r in runs)})")
    for with_engine in (False, True):
        print(f"this / base {'with' if with_engine else 'without'} engine: "
              f"{med[('this', with_engine)] / med[('base', with_engine)]:.2f}x")


if __name__ == "__main__":
    main()

"""CPU cost and key responsiveness of the running dashboard, headless.

Run: python benchmarks/live_cpu.py [--seconds 60] [--interval 1.0] [--source demo|nvml] [--screenshot FILE]

Runs ``kvdash live`` headless (Textual's ``run_test``) for ``--seconds`` at ``--interval`` and reports
the process CPU time over wall time as a percentage of one core.  Then, polling every 0.1 s, it
presses keys and reports how long each press took to be handled (median and max).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import time
from pathlib import Path

from kvdash.live.analysis import LiveConfig
from kvdash.tui.app import LiveApp


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def make_source(kind: str):  # type: ignore[no-untyped-def]
    if kind == "nvml":
        from kvdash.sources.nvml import NVMLSource

        return NVMLSource()
    from kvdash.sources.demo import DemoSource

    return DemoSource(seed=7)


async def idle_cost(kind: str, seconds: float, interval: float, tp: int, model: str, screenshot: Path | None) -> dict:
    app = LiveApp(make_source(kind), LiveConfig(model=model, tp=tp), interval=interval)
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause(2.0)  # start-up and first polls are not the steady state
        polls0, c0, t0 = app.polls, cpu_seconds(), time.perf_counter()
        await asyncio.sleep(seconds)
        c1, t1 = cpu_seconds(), time.perf_counter()
        if screenshot:
            app.save_screenshot(filename=screenshot.name, path=str(screenshot.parent))
        polls = app.polls - polls0
        await pilot.press("q")
    return {"cpu_percent_of_one_core": 100 * (c1 - c0) / (t1 - t0), "wall_s": t1 - t0, "polls": polls}


async def key_latency(kind: str, presses: int, tp: int, model: str) -> dict:
    app = LiveApp(make_source(kind), LiveConfig(model=model, tp=tp), interval=0.1)
    lat = []
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause(1.0)
        for i in range(presses):
            key = "bd"[i % 2]
            t = time.perf_counter()
            await pilot.press(key)
            lat.append(time.perf_counter() - t)
            await asyncio.sleep(0.05)
        polls = app.polls
        await pilot.press("q")
    return {"median_ms": 1000 * statistics.median(lat), "max_ms": 1000 * max(lat), "presses": presses,
            "polls_during": polls}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--source", choices=("demo", "nvml"), default="demo")
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--model", default="llama-3.1-70b")
    ap.add_argument("--presses", type=int, default=40)
    ap.add_argument("--screenshot", type=Path)
    args = ap.parse_args()
    idle = asyncio.run(idle_cost(args.source, args.seconds, args.interval, args.tp, args.model, args.screenshot))
    keys = asyncio.run(key_latency(args.source, args.presses, args.tp, args.model))
    print(f"source {args.source}: at a {args.interval:g} s interval over {idle['wall_s']:.1f} s "
          f"({idle['polls']} polls): {idle['cpu_percent_of_one_core']:.2f} % of one core")
    print(f"at a 0.1 s interval: {keys['presses']} key presses handled in median {keys['median_ms']:.1f} ms, "
          f"max {keys['max_ms']:.1f} ms ({keys['polls_during']} polls meanwhile)")


if __name__ == "__main__":
    main()

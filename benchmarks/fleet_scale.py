"""The fleet view at scale: 1,000 GPUs across 125 hosts, read from a real Prometheus server.

Run: python benchmarks/fleet_scale.py [--hosts 125] [--gpus 8] [--seconds 30] [--interval 1.0] [--screenshot F.svg]

A loopback HTTP server publishes DCGM-exporter pages (8 GPUs each) and one vLLM engine page per
host; Prometheus scrapes the 250 targets every 5 s.  Then, at ``--interval``:

1. the source alone: ``FleetSource.read()`` (four instant queries, JSON parsing, the fleet with
   its analytical pools) -- wall time per poll (median, max) and this process' CPU time over wall
   time, as a percentage of one core;
2. the dashboard: ``kvdash live --prometheus`` headless (Textual's ``run_test`` at 80x24) polling
   the same Prometheus for ``--seconds`` -- the process' CPU share and the polls it completed.

Targets: each poll within 1 s of wall time at a 1 s interval; under 5 % of one core.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import multiprocessing.queues
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kvdash.fleet.source import FleetSource  # noqa: E402
from kvdash.live.analysis import LiveConfig  # noqa: E402
from tests.promfixture import (  # noqa: E402
    H200_MIB,
    MetricsServer,
    Prometheus,
    config,
    dcgm_page,
    fleet_host,
    target,
    vllm_page,
)


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def pages(hosts: int, gpus: int) -> dict[str, str]:
    out = {}
    for h in range(hosts):
        name = fleet_host(h)
        used = [120_000 + (h * 7 + g * 13) % 9_000 for g in range(gpus)]
        out[f"/{name}/dcgm"] = dcgm_page(name, [(u, H200_MIB - 615 - u, 615) for u in used])
        out[f"/{name}/vllm"] = vllm_page("meta-llama/Llama-3.1-70B-Instruct", blocks=172_725, block_size=16,
                                         usage=round((h % 20) / 20, 2), running=h % 50, waiting=h % 7) + \
            counters("meta-llama/Llama-3.1-70B-Instruct", h)
    return out


def counters(model: str, h: int) -> str:
    """The three vLLM counters the fleet's windowed rates read (the fleet's ``engines`` query fetches them
    since the windowed rates), as vLLM's PrometheusStatLogger names and labels them."""
    lab = f'engine="0",model_name="{model}"'
    return "\n".join([
        "# TYPE vllm:prefix_cache_queries counter", f"vllm:prefix_cache_queries_total{{{lab}}} {90_000 + h}.0",
        "# TYPE vllm:prefix_cache_hits counter", f"vllm:prefix_cache_hits_total{{{lab}}} {36_000 + h}.0",
        "# TYPE vllm:num_preemptions counter", f"vllm:num_preemptions_total{{{lab}}} {h % 5}.0",
    ]) + "\n"


def serve(hosts: int, gpus: int, ports: multiprocessing.queues.Queue[int]) -> None:
    server = MetricsServer(pages(hosts, gpus))  # type: ignore[arg-type]
    ports.put(server.port)
    server.thread.join()


def source_polls(url: str, polls: int, interval: float) -> dict:
    src = FleetSource(url, LiveConfig(), deadline_s=2.0)
    src.read()  # warm: imports, the analysis cache
    walls, cpus, errors = [], [], []
    fleet = None
    cpu0, t0 = cpu_seconds(), time.monotonic()
    for _ in range(polls):
        started, c = time.monotonic(), cpu_seconds()
        snap = src.read()
        walls.append(time.monotonic() - started)
        cpus.append(cpu_seconds() - c)
        if snap.error:
            errors.append(snap.error)
        else:
            fleet = snap.extra["fleet"]
        time.sleep(max(0.0, interval - (time.monotonic() - started)))
    cpu, wall = cpu_seconds() - cpu0, time.monotonic() - t0
    return {"polls": polls, "wall_median_s": round(statistics.median(walls), 4), "wall_max_s": round(max(walls), 4),
            "polls_over_1s": sum(w > 1.0 for w in walls), "errors": errors[:3], "error_count": len(errors),
            "cpu_per_poll_median_s": round(statistics.median(cpus), 4),
            "cpu_percent_of_core": round(100 * cpu / wall, 2),
            "fleet": fleet and {k: fleet["totals"][k] for k in ("hosts", "gpus", "engines")}}


async def app_cost(url: str, seconds: float, interval: float, screenshot: str | None = None) -> dict:
    from kvdash.tui.fleet import FleetApp

    app = FleetApp(FleetSource(url, LiveConfig(), deadline_s=2.0), LiveConfig(), interval=interval)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(3.0)  # the first poll and layout
        polls0, cpu0, t0 = app.polls, cpu_seconds(), time.monotonic()
        await asyncio.sleep(seconds)
        cpu, wall = cpu_seconds() - cpu0, time.monotonic() - t0
        polls = app.polls - polls0
        if screenshot:
            await pilot.press("down", "enter")
            await pilot.pause(0.5)
            app.save_screenshot(screenshot)
    return {"seconds": round(wall, 1), "polls": polls, "cpu_percent_of_core": round(100 * cpu / wall, 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=125)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--screenshot", help="write an SVG of the dashboard (second host open) at the end")
    args = ap.parse_args()
    # the pages are served from another process, so this process' CPU is kvdash's alone
    ctx = multiprocessing.get_context("spawn")
    ports: multiprocessing.queues.Queue[int] = ctx.Queue()
    child = ctx.Process(target=serve, args=(args.hosts, args.gpus, ports), daemon=True)
    child.start()
    here = f"127.0.0.1:{ports.get(timeout=60)}"
    names = [fleet_host(h) for h in range(args.hosts)]
    cfg = config({"dcgm": [target(here, f"{n}:9400", f"/{n}/dcgm") for n in names],
                  "vllm": [target(here, f"{n}:8000", f"/{n}/vllm") for n in names]}, interval="5s", timeout="4s")
    with tempfile.TemporaryDirectory() as tmp:
        prom = Prometheus(cfg, Path(tmp))
        try:
            want = args.hosts * args.gpus
            prom.wait_for(lambda p: len(p.query("DCGM_FI_DEV_FB_USED")["data"]["result"]) == want
                          and len(p.query("vllm:cache_config_info")["data"]["result"]) == args.hosts, timeout=120)
            src = source_polls(prom.url, int(args.seconds / args.interval), args.interval)
            app = asyncio.run(app_cost(prom.url, args.seconds, args.interval, args.screenshot))
        finally:
            prom.close()
            child.terminate()
    print(json.dumps({"hosts": args.hosts, "gpus_per_host": args.gpus, "interval_s": args.interval,
                      "source": src, "dashboard_80x24": app, "cpus": os.cpu_count(),
                      "load_average_1m": round(os.getloadavg()[0], 2)}, indent=2))


if __name__ == "__main__":
    main()

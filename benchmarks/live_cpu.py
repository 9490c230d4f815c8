"""CPU cost and key responsiveness of the running dashboard, headless.

Run: python benchmarks/live_cpu.py [--seconds 60] [--interval 1.0] [--source demo|nvml] [--screenshot FILE]
                                   [--engine URL|local] [--repeat N]

Runs ``kvdash live`` headless (Textual's ``run_test``) for ``--seconds`` at ``--interval`` and reports
the process CPU time over wall time as a percentage of one core (the median of ``--repeat`` runs).
``--engine local`` starts a /metrics server in a separate process (on 127.0.0.1, a 66 kB page: the
recorded vLLM page of tests/data/vllm_v1.prom plus latency histograms, see ``realistic_page``) so
the dashboard scrapes it every interval, as beside a real engine; its CPU is not counted.  Then,
polling every 0.1 s, it presses keys and reports how long each press took to be handled (median
and max).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import subprocess
import sys
import tempfile
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


SERVER = """
import http.server, sys
body = open(sys.argv[1], "rb").read()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


def realistic_page() -> str:
    """The recorded vLLM page (tests/data/vllm_v1.prom) plus 16 histograms of 31 buckets: about
    66 kB and 590 lines, the size of a vLLM 0.x /metrics page with its latency histograms."""
    page = (Path(__file__).parent.parent / "tests" / "data" / "vllm_v1.prom").read_text()
    labels = 'engine="0",model_name="meta-llama/Llama-3.1-70B-Instruct"'
    extra = []
    for h in range(16):
        name = f"vllm:synthetic_histogram_{h}_seconds"
        extra.append(f"# HELP {name} A histogram.\n# TYPE {name} histogram")
        extra += [f'{name}_bucket{{{labels},le="{0.001 * 2**b:g}"}} {b * 7}.0' for b in range(30)]
        extra += [f'{name}_bucket{{{labels},le="+Inf"}} 300.0', f"{name}_count{{{labels}}} 300.0",
                  f"{name}_sum{{{labels}}} 123.4"]
    return page + "\n".join(extra) + "\n"


def local_engine() -> tuple[subprocess.Popen, str]:
    page = Path(tempfile.mkdtemp()) / "metrics.prom"
    page.write_text(realistic_page())
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(page)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    return proc, f"http://127.0.0.1:{port}/metrics"


async def idle_cost(kind: str, seconds: float, interval: float, tp: int, model: str, screenshot: Path | None,
                    engine: str | None = None) -> dict:
    from kvdash.sources.engine import fetch

    fetcher = (lambda: fetch(engine, timeout=2.0)) if engine else None
    app = LiveApp(make_source(kind), LiveConfig(model=model, tp=tp), interval=interval, engine=fetcher,
                  engine_url=engine)
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause(2.0)  # start-up and first polls are not the steady state
        polls0, c0, t0 = app.polls, cpu_seconds(), time.perf_counter()
        await asyncio.sleep(seconds)
        c1, t1 = cpu_seconds(), time.perf_counter()
        if screenshot:
            app.save_screenshot(filename=screenshot.name, path=str(screenshot.parent))
        polls = app.polls - polls0
        engine_ok = app.engine is not None and not app.engine.error
        await pilot.press("q")
    return {"cpu_percent_of_one_core": 100 * (c1 - c0) / (t1 - t0), "wall_s": t1 - t0, "polls": polls,
            "engine_polls": app.engine_polls, "engine_ok": engine_ok}


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
    ap.add_argument("--engine", help="a /metrics URL to scrape every interval, or 'local' to start one")
    ap.add_argument("--repeat", type=int, default=1, help="idle runs; the median is reported")
    args = ap.parse_args()
    server = None
    engine = args.engine
    if engine == "local":
        server, engine = local_engine()
    try:
        runs = [asyncio.run(idle_cost(args.source, args.seconds, args.interval, args.tp, args.model, args.screenshot,
                                      engine)) for _ in range(args.repeat)]
    finally:
        if server is not None:
            server.terminate()
            server.wait()
    cpu = [r["cpu_percent_of_one_core"] for r in runs]
    idle = runs[-1]
    keys = asyncio.run(key_latency(args.source, args.presses, args.tp, args.model))
    with_engine = f", engine {engine} scraped {idle['engine_polls']} times (ok: {idle['engine_ok']})" if engine else ""
    print(f"source {args.source}{with_engine}: at a {args.interval:g} s interval over {idle['wall_s']:.1f} s "
          f"({idle['polls']} polls): median {statistics.median(cpu):.2f} % of one core "
          f"(runs: {', '.join(f'{c:.2f}' for c in cpu)})")
    print(f"at a 0.1 s interval: {keys['presses']} key presses handled in median {keys['median_ms']:.1f} ms, "
          f"max {keys['max_ms']:.1f} ms ({keys['polls_during']} polls meanwhile)")


if __name__ == "__main__":
    main()

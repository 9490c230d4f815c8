"""``kvdash exporter``: kvdash's figures as Prometheus metrics."""

import signal
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvdash.commands.common import parse_lengths
from kvdash.errors import InputError

Opt = typer.Option
DEFAULT_PORT = 9847  # not DCGM exporter's 9400, node exporter's 9100 nor vLLM's 8000


def exporter(
    host: Annotated[str, Opt(help="Address to listen on (loopback by default; 0.0.0.0 for every interface).")] = "127.0.0.1",
    port: Annotated[int, Opt(help="Port to listen on (0: any free port, printed at start); 9847 avoids DCGM 9400, node 9100, vLLM 8000.")] = DEFAULT_PORT,
    demo: Annotated[bool, Opt("--demo", help="Simulated GPUs and engine (8 x H200, TP 8), no GPU needed.")] = False,
    engine: Annotated[Optional[list[str]], Opt(help="A vLLM or SGLang /metrics endpoint; repeat for several.")] = None,
    model: Annotated[str, Opt("--model", "-m", help="Model preset (kvdash models).")] = "llama-3.1-70b",
    config: Annotated[Optional[Path], Opt(help="A config.json instead of a preset.")] = None,
    kv_dtype: Annotated[str, Opt(help="KV dtype.")] = "bf16",
    block_size: Annotated[int, Opt(help="Tokens per block.")] = 16,
    tp: Annotated[int, Opt(help="Tensor-parallel degree: the first TP readable GPUs are the ranks.")] = 8,
    gpu_util: Annotated[str, Opt(help="vLLM gpu_memory_utilization for the derived budget.")] = "0.9",
    weights: Annotated[Optional[str], Opt(help="Weight bytes of the whole model (default: the preset's estimate).")] = None,
    reserve: Annotated[str, Opt(help="Runtime reserve per rank (activation peak, CUDA graphs).")] = "0",
    budget: Annotated[Optional[str], Opt(help="An explicit KV budget per rank (implies --budget-mode explicit).")] = None,
    budget_mode: Annotated[Optional[str], Opt(help="vllm (from each GPU's total), explicit, or engine.")] = None,
    length: Annotated[str, Opt(help="Request lengths in tokens, comma-separated: requests that fit, for each.")] = "2048",
    max_reserved: Annotated[int, Opt(help="Contiguous reservation per request.")] = 8192,
    interval: Annotated[float, Opt(help="Seconds between background readings (scrapes never trigger one).")] = 5.0,
    engine_timeout: Annotated[float, Opt(help="Seconds one engine read may take.")] = 2.0,
    hostname: Annotated[Optional[str], Opt(help="The hostname label of GPU series (default: this host's name).")] = None,
    seed: Annotated[int, Opt(help="Seed of the demo.")] = 7,
    gpus: Annotated[int, Opt(help="Number of demo GPUs.")] = 8,
    once: Annotated[bool, Opt("--once", help="Print the metrics page once and exit (no server).")] = False,
) -> None:
    """Publish GPU memory, kvdash's analytical KV pool and the engines' pools for Prometheus."""
    from prometheus_client import CollectorRegistry, generate_latest, start_http_server

    from kvdash.commands.live import MIN_INTERVAL
    from kvdash.core.model import load_config
    from kvdash.exporter.collector import ExporterState, KvdashCollector
    from kvdash.live.analysis import LiveConfig
    from kvdash.units import parse_size

    if interval < MIN_INTERVAL:
        raise InputError("--interval", interval, f"at least {MIN_INTERVAL} seconds")
    if engine_timeout <= 0 or engine_timeout > 60:
        raise InputError("--engine-timeout", engine_timeout, "expected more than 0 and at most 60 seconds")
    if not 0 <= port <= 65535:
        raise InputError("--port", port, "expected 0 to 65535")
    if gpus < 1 or gpus > 64:
        raise InputError("--gpus", gpus, "expected 1 to 64 demo GPUs")
    mode = budget_mode or ("explicit" if budget else "vllm")
    cfg = LiveConfig(
        model=model, arch=load_config(config) if config else None, kv_dtype=kv_dtype, block_size=block_size, tp=tp,
        gpu_util=gpu_util, weights=parse_size(weights, "--weights", allow_zero=True) if weights else None,
        reserve=parse_size(reserve, "--reserve", allow_zero=True), budget_mode=mode,
        budget=parse_size(budget, "--budget") if budget else None,
        lengths=parse_lengths(length, "--length") or (2048,), max_reserved=max_reserved,
    )
    cfg.validate()
    cfg = replace(cfg, arch=cfg.architecture())  # read the preset once, not on every scrape
    source = _source(demo, seed, gpus)
    state = ExporterState(source, cfg, list(engine or []), interval=interval, engine_timeout=engine_timeout,
                          hostname=hostname or ("demo-host" if demo else None), demo=demo)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(KvdashCollector(state))
    if once:
        for slot in state.engines:
            state.refresh_engine(slot)
        state.refresh_gpus()
        sys.stdout.write(generate_latest(registry).decode("utf-8"))
        source.close()
        return
    try:
        server, _ = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        source.close()
        raise InputError("--port", port, f"cannot listen on {host}:{port} ({exc.strerror or exc})") from exc
    state.start()
    shown = f"[{host}]" if ":" in host else host
    print(f"kvdash exporter: serving http://{shown}:{server.server_port}/metrics "
          f"(readings every {interval:g} s{', demo' if demo else ''})", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        while not done.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        state.stop()


def _source(demo: bool, seed: int, gpus: int):  # type: ignore[no-untyped-def]
    from kvdash.sources.base import SourceUnavailable

    if demo:
        from kvdash.sources.demo import DemoProfile, DemoSource

        return DemoSource(seed=seed, profile=DemoProfile(gpus=gpus))
    try:
        from kvdash.sources.nvml import NVMLSource

        return NVMLSource()
    except SourceUnavailable as exc:
        print(f"kvdash: no GPU readings: {exc}. To try the exporter without a GPU, run: kvdash exporter --demo",
              file=sys.stderr)
        raise typer.Exit(1) from exc

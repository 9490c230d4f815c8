"""``kvdash exporter``: kvdash's figures as Prometheus metrics."""

import signal
import sys
import threading
from dataclasses import replace
from typing import Annotated, Optional

import typer

from kvdash import defaults as D
from kvdash.commands.common import (
    BlockSizeOpt,
    BudgetModeOpt,
    BudgetOpt,
    ConfigOpt,
    DemoOpt,
    EngineRulesOpt,
    EngineTimeoutOpt,
    ExporterLengthOpt,
    GpusOpt,
    GpuUtilOpt,
    IntervalOpt,
    KvDtypeOpt,
    MaxReservedOpt,
    ModelOpt,
    ReserveOpt,
    SeedOpt,
    TpOpt,
    WeightsOpt,
    check_demo_gpus,
    check_engine_timeout,
    check_interval,
    note,
    parse_length,
    refuse_unread,
)
from kvdash.errors import InputError

Opt = typer.Option
DEFAULT_PORT = 9847  # not DCGM exporter's 9400, node exporter's 9100 nor vLLM's 8000


def exporter(
    ctx: typer.Context,
    host: Annotated[str, Opt(help="Address to listen on (loopback by default; 0.0.0.0 for every interface).")] = "127.0.0.1",
    port: Annotated[int, Opt(help="Port to listen on (0: any free port, printed at start); 9847 avoids DCGM 9400, node 9100, vLLM 8000.")] = DEFAULT_PORT,
    demo: DemoOpt = False,
    engine: Annotated[Optional[list[str]], Opt(help="A vLLM or SGLang /metrics endpoint; repeat for several. Default: none.")] = None,
    model: ModelOpt = D.LIVE_MODEL,
    config: ConfigOpt = None,
    kv_dtype: KvDtypeOpt = D.KV_DTYPE,
    block_size: BlockSizeOpt = str(D.BLOCK_SIZE),
    tp: TpOpt = D.LIVE_TP,
    engine_rules: EngineRulesOpt = "vllm",
    gpu_util: GpuUtilOpt = None,
    weights: WeightsOpt = None,
    reserve: ReserveOpt = D.RESERVE,
    budget: BudgetOpt = None,
    budget_mode: BudgetModeOpt = None,
    length: ExporterLengthOpt = None,
    max_reserved: MaxReservedOpt = None,
    interval: IntervalOpt = D.EXPORTER_INTERVAL,
    engine_timeout: EngineTimeoutOpt = D.ENGINE_TIMEOUT,
    hostname: Annotated[Optional[str], Opt(help="The hostname label of GPU series (default: this host's name).")] = None,
    seed: SeedOpt = 7,
    gpus: GpusOpt = 8,
    once: Annotated[bool, Opt("--once", help="Print the metrics page once and exit (no server).")] = False,
) -> None:
    """Publish GPU memory, kvdash's analytical KV pool and the engines' pools for Prometheus."""
    from prometheus_client import CollectorRegistry, generate_latest

    from kvdash.commands.live import live_config, refuse_live_unread
    from kvdash.exporter.collector import ExporterState, KvdashCollector

    check_interval(interval)
    check_engine_timeout(engine_timeout)
    refuse_live_unread(ctx, demo, engine)
    if once:
        refuse_unread(ctx, ("host", "port", "interval"), "read by the server only, not with --once (it prints the "
                                                        "metrics page once)")
    from kvdash.netaddr import check_url
    from kvdash.sources.engine import metrics_url

    seen: set[str] = set()
    for address in engine or []:
        check_url("--engine", address, "a vLLM or SGLang server, e.g. localhost:8000")
        if metrics_url(address) in seen:  # its every series twice, with the same labels
            raise InputError("--engine", address, "each engine once (it is given twice)")
        seen.add(metrics_url(address))
    if not 0 <= port <= 65535:
        raise InputError("--port", port, "expected 0 to 65535")
    check_demo_gpus(gpus)
    cfg = live_config(model, config, kv_dtype, block_size, tp, gpu_util, weights, reserve, budget, budget_mode,
                      exporter_lengths(length or []), max_reserved, engine_rules,
                      ctx.get_parameter_source("block_size").name != "DEFAULT",  # type: ignore[union-attr]
                      lengths_field="--length")
    cfg = replace(cfg, arch=cfg.architecture())  # read the preset once, not on every scrape
    source = _source(demo, seed, gpus)
    state = ExporterState(source, cfg, list(engine or []), interval=interval, engine_timeout=engine_timeout,
                          hostname=hostname or ("demo-host" if demo else None), demo=demo,
                          reserve_per_length=max_reserved is None)
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
        from kvdash.exporter.server import serve

        server, _ = serve(port, host, registry)  # each request bounded in time, concurrent ones capped
    except OSError as exc:
        source.close()
        import errno
        import socket

        # a name that does not resolve, or an address not on this machine, is the host's fault; a port in use or
        # privileged the port's
        field, value = ("--host", host) if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL \
            else ("--port", port)
        raise InputError(field, value, f"cannot listen on {host}:{port} ({exc.strerror or exc})") from exc
    done = threading.Event()
    stopped_by: list[str] = []

    def stop(signum: int, _frame: object) -> None:
        stopped_by.append(signal.Signals(signum).name)
        done.set()

    from kvdash.interrupts import _signals

    # a service's stop, said in one line, exit 0 (a service manager's success); installed before the banner, so a
    # stop sent as soon as it is read is this one (a signal the process started ignoring stays ignored)
    for signum in (s for s in _signals() if s != signal.SIGINT):
        signal.signal(signum, stop)
    state.start()
    shown = f"[{host}]" if ":" in host else host
    from kvdash.exporter.collector import reserve_label

    # two lines within 80 columns (one was 117), the reserve as kvdash_info labels it: start() has read the GPUs once
    # (it said "(published)" where the label said "(published, extrapolated)")
    print(f"kvdash exporter: serving http://{shown}:{server.server_port}/metrics\n"
          f"  {reserve_label(cfg, state.view()['analyses'])}; readings every {interval:g} s{', demo' if demo else ''}",
          flush=True)
    try:
        while not done.wait(0.5):
            pass
    except KeyboardInterrupt:
        stopped_by.append("SIGINT")
    finally:
        server.shutdown()
        server.server_close()
        state.stop()
    print(f"kvdash exporter: stopped by {stopped_by[0] if stopped_by else 'a signal'}", file=sys.stderr, flush=True)


def exporter_lengths(values: list[str]) -> tuple[int, ...]:
    """Each ``--length`` published on its own; ``--length 2048,8192`` (before issue 15) is read as
    ``--length 2048 --length 8192`` for one release, with a note."""
    out: list[int] = []
    for text in values:
        parts = [p for p in text.split(",") if p.strip()] or [text]
        if "," in text:
            note(f"--length {text.strip()}: write --length {' --length '.join(p.strip() for p in parts)} (each length "
                 "is published on its own; the list form is kept for one release)")
        out += [n for p in parts if (n := parse_length(p)) is not None]
    return tuple(out) or (D.LENGTH,)


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

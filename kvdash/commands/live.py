"""``kvdash live`` and ``kvdash record``."""

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvdash.commands.common import parse_lengths
from kvdash.errors import InputError

Opt = typer.Option
MIN_INTERVAL = 0.1
NO_GPU = "no GPU readings: {why}. To see the dashboard without a GPU, run: kvdash live --demo"


def _source(demo: bool, replay: Optional[Path], seed: int, gpus: int,  # type: ignore[no-untyped-def]
            max_bytes: int | None = None, json_out: bool = False):
    from kvdash.sources.base import SourceUnavailable

    if demo and replay:
        raise InputError("--replay", str(replay), "give either --demo or --replay, not both")
    if demo:
        from kvdash.sources.demo import DemoProfile, DemoSource

        if gpus < 1 or gpus > 64:
            raise InputError("--gpus", gpus, "expected 1 to 64 demo GPUs")
        return DemoSource(seed=seed, profile=DemoProfile(gpus=gpus))
    try:
        if replay:
            from kvdash.sources.replay import ReplaySource

            return ReplaySource(replay, *([max_bytes] if max_bytes else []))
        from kvdash.sources.nvml import NVMLSource

        return NVMLSource()
    except SourceUnavailable as exc:
        if replay:
            raise InputError("--replay", str(replay), str(exc)) from exc
        print(f"kvdash: {NO_GPU.format(why=exc)}", file=sys.stderr)
        if json_out:  # scripts reading stdout get the reason too
            print(json.dumps({"error": NO_GPU.format(why=exc), "snapshot": None, "kv_pool": None}))
        raise typer.Exit(1) from exc


def live(
    demo: Annotated[bool, Opt("--demo", help="Simulated GPUs (8 x H200 running a TP-8 engine), no GPU needed.")] = False,
    replay: Annotated[Optional[Path], Opt(help="Play back snapshots recorded by kvdash record.")] = None,
    engine: Annotated[Optional[str], Opt(help="A vLLM or SGLang Prometheus endpoint, e.g. localhost:8000.")] = None,
    engine_timeout: Annotated[float, Opt(help="Seconds one engine scrape may take in all (connect + read + parse).")] = 2.0,
    model: Annotated[str, Opt("--model", "-m", help="Model preset (kvdash models).")] = "llama-3.1-70b",
    config: Annotated[Optional[Path], Opt(help="A config.json instead of a preset.")] = None,
    kv_dtype: Annotated[str, Opt(help="KV dtype.")] = "bf16",
    block_size: Annotated[int, Opt(help="Tokens per block.")] = 16,
    tp: Annotated[int, Opt(help="Tensor-parallel degree: the first TP readable GPUs are the ranks.")] = 8,
    gpu_util: Annotated[str, Opt(help="vLLM gpu_memory_utilization for the derived budget (vLLM 0.33 itself defaults to 0.92; live keeps 0.9, the figure its fleet comparisons are worked at).")] = "0.9",
    weights: Annotated[Optional[str], Opt(help="Weight bytes of the whole model (default: the preset's estimate).")] = None,
    reserve: Annotated[str, Opt(help="Runtime reserve per rank (activation peak, CUDA graphs); 'auto': a kvdash calibrate entry, else published terms.")] = "0",
    budget: Annotated[Optional[str], Opt(help="An explicit KV budget per rank (implies --budget-mode explicit).")] = None,
    budget_mode: Annotated[Optional[str], Opt(help="vllm (from each GPU's total), explicit, or engine. Default: explicit when --budget is given, else vllm.")] = None,
    length: Annotated[str, Opt(help="Tokens per request, or a mix such as 200,825,1525.")] = "2048",
    max_reserved: Annotated[int, Opt(help="Contiguous reservation per request.")] = 8192,
    interval: Annotated[float, Opt(help=f"Seconds between polls (at least {MIN_INTERVAL}).")] = 1.0,
    once: Annotated[bool, Opt("--once", help="Print one snapshot as tables and exit.")] = False,
    as_json: Annotated[bool, Opt("--json", help="Print one snapshot as JSON and exit.")] = False,
    seed: Annotated[int, Opt(help="Seed of the demo.")] = 7,
    gpus: Annotated[int, Opt(help="Number of demo GPUs.")] = 8,
    snapshot_dir: Annotated[Path, Opt(help="Where the s key writes snapshots.")] = Path("."),
    simulate: Annotated[Optional[str], Opt(help="Draw the block map from a running simulation: paged, max, pow2 or "
                                                "oracle (blocks fill, tails, preemption, fragmentation).")] = None,
    prometheus: Annotated[Optional[str], Opt(help="Fleet view: hosts, GPUs and engines from a Prometheus server "
                                                  "(http://HOST:9090).")] = None,

    max_file_size: Annotated[str, Opt(help="Largest --replay file read (streamed line by line).")] = "256MiB",
) -> None:
    """Live GPU memory beside the analytical KV pool (a Textual dashboard; --once/--json for scripts)."""
    from kvdash.core.model import load_config
    from kvdash.live.analysis import LiveConfig, analyze
    from kvdash.sources.engine import fetch, from_snapshot
    from kvdash.units import parse_size

    if interval < MIN_INTERVAL:
        raise InputError("--interval", interval, f"at least {MIN_INTERVAL} seconds")
    mode = budget_mode or ("explicit" if budget else "vllm")
    cfg = LiveConfig(
        model=model, arch=load_config(config) if config else None, kv_dtype=kv_dtype, block_size=block_size, tp=tp,
        gpu_util=gpu_util, weights=parse_size(weights, "--weights", allow_zero=True) if weights else None,
        reserve=0 if reserve.strip().lower() == "auto" else parse_size(reserve, "--reserve", allow_zero=True),
        budget_mode=mode,
        budget=parse_size(budget, "--budget") if budget else None,
        lengths=parse_lengths(length, "--length") or (2048,), max_reserved=max_reserved,
    )
    if reserve.strip().lower() == "auto":  # a kvdash calibrate entry, else the published terms
        from dataclasses import replace

        from kvdash.calibration import reserve_spec

        got = reserve_spec(reserve, cfg.architecture(), None, tp, 1, 8192)
        cfg = replace(cfg, reserve=got[0], reserve_basis=got[1])
    cfg.validate()
    if not 0.1 <= engine_timeout <= 60:
        raise InputError("--engine-timeout", engine_timeout, "expected 0.1 to 60 seconds")
    if prometheus:  # the fleet view (kvdash/commands/fleet.py)
        if demo or replay or engine:
            raise InputError("--prometheus", prometheus, "give it without --demo, --replay or --engine")
        from kvdash.commands.fleet import run_fleet

        return run_fleet(prometheus, cfg, once, as_json, interval)
    if not (once or as_json):
        check_snapshot_dir(snapshot_dir)
    source = _source(demo, replay, seed, gpus, parse_size(max_file_size, "--max-file-size"), json_out=as_json)
    engine_fetch = (lambda: fetch(engine, timeout=engine_timeout)) if engine else None
    if once or as_json:
        from kvdash.sources.base import SourceUnavailable
        from kvdash.sources.replay import ReplayLineError

        try:
            snap = source.read()
        except (ReplayLineError, SourceUnavailable) as exc:
            if replay is None:
                print(f"kvdash: {NO_GPU.format(why=exc)}", file=sys.stderr)
                raise typer.Exit(1) from exc
            raise InputError("--replay", str(replay), str(exc)) from exc
        finally:
            source.close()
        reading = engine_fetch() if engine_fetch else from_snapshot(snap.extra)
        kv = analyze(snap, cfg, reading)
        if as_json:
            print(json.dumps({"snapshot": snap.to_json(), "kv_pool": kv}, indent=2, sort_keys=True, default=str))
        else:
            from rich.console import Console

            from kvdash.render.live_view import once_view

            console = Console()
            for part in once_view(snap, kv, console.width):
                console.print(part)
        if not snap.gpus:
            raise typer.Exit(1)
        if mode == "engine" and not kv.get("ok"):
            print(f"kvdash: {'; '.join(kv.get('notes', []))}", file=sys.stderr)
            raise typer.Exit(1)
        return
    sim = None
    if simulate is not None:
        if simulate not in ("paged", "max", "pow2", "oracle"):
            raise InputError("--simulate", simulate, "expected paged, max, pow2 or oracle")
        from kvdash.simulate.visual import VisualSimulation

        sim = VisualSimulation(simulate, block_size=block_size, seed=seed)
    from kvdash.tui.app import LiveApp

    try:
        LiveApp(source, cfg, interval=interval, engine=engine_fetch, snapshot_dir=snapshot_dir,
                simulation=sim, engine_url=engine).run()
    finally:
        source.close()


def check_snapshot_dir(path: Path) -> None:
    """--snapshot-dir must be a writable folder before the dashboard starts (the s key writes there)."""
    import os

    if not path.exists():
        raise InputError("--snapshot-dir", str(path), "expected an existing folder (create it first)")
    if not path.is_dir():
        raise InputError("--snapshot-dir", str(path), "expected a folder, not a file")
    if not os.access(path, os.W_OK | os.X_OK):
        raise InputError("--snapshot-dir", str(path), "expected a folder you can write to")


def record(
    out: Annotated[Path, Opt(help="JSON-lines file to write (appended).")],
    interval: Annotated[float, Opt(help="Seconds between snapshots.")] = 1.0,
    count: Annotated[int, Opt(help="Number of snapshots.")] = 10,
    demo: Annotated[bool, Opt("--demo", help="Record the demo instead of NVML.")] = False,
    seed: Annotated[int, Opt(help="Seed of the demo.")] = 7,
) -> None:
    """Record GPU snapshots as JSON lines, for kvdash live --replay."""
    if interval < MIN_INTERVAL:
        raise InputError("--interval", interval, f"at least {MIN_INTERVAL} seconds")
    if count < 1:
        raise InputError("--count", count, "expected a positive integer")
    import os
    import stat

    if out.exists() and not stat.S_ISREG(os.stat(out).st_mode):  # a FIFO would block the open; a folder fails
        raise InputError("--out", str(out), "expected a regular file (appended) or a new file")
    source = _source(demo, None, seed, 8)
    try:
        with out.open("a", encoding="utf-8") as fh:
            for i in range(count):
                started = time.monotonic()
                fh.write(source.read().dumps() + "\n")
                fh.flush()
                if i + 1 < count:
                    time.sleep(max(0.0, interval - (time.monotonic() - started)))
    except OSError as exc:
        raise InputError("--out", str(out), f"cannot be written ({exc.strerror})") from exc
    finally:
        source.close()
    print(f"{count} snapshots -> {out}")

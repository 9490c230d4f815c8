"""``kvdash live`` and ``kvdash record``."""

import json
import sys
import time
from dataclasses import replace
from pathlib import Path
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
    GpusOpt,
    GpuUtilOpt,
    GroupOpt,
    IntervalOpt,
    KvDtypeOpt,
    LengthOpt,
    MaxFileSizeOpt,
    MaxReservedOpt,
    ModelOpt,
    ReserveOpt,
    SeedOpt,
    TpOpt,
    WeightsOpt,
    block_size_of,
    check_demo_gpus,
    check_engine_timeout,
    check_interval,
    end_signalled,
    length_or_group,
    parse_block_size,
    parse_budget,
    parse_lengths,
    parse_max_file_size,
    refuse_unread,
)
from kvdash.errors import InputError

Opt = typer.Option
NO_GPU = "no GPU readings: {why}. To see the dashboard without a GPU, run: kvdash live --demo"


def _source(demo: bool, replay: Optional[Path], seed: int, gpus: int,  # type: ignore[no-untyped-def]
            max_bytes: int | None = None, json_out: bool = False, engine: Optional[str] = None,
            follow: bool = False):
    from kvdash.sources.base import SourceUnavailable

    if demo and replay:
        raise InputError("--replay", str(replay), "give either --demo or --replay, not both")
    if demo:
        from kvdash.sources.demo import DemoProfile, DemoSource

        check_demo_gpus(gpus)
        return DemoSource(seed=seed, profile=DemoProfile(gpus=gpus))
    try:
        if replay:
            from kvdash.sources.replay import ReplaySource

            source = ReplaySource(replay, *([max_bytes] if max_bytes else []))
            source.follow = follow  # the dashboard reads lines appended while it replays
            return source
        from kvdash.sources.nvml import NVMLSource

        return NVMLSource()
    except SourceUnavailable as exc:
        if replay:
            raise InputError("--replay", str(replay), str(exc)) from exc
        if engine:  # no NVML here, but an engine to watch: its own figures, kvdash's pool from --budget
            from kvdash.sources.base import NoGPUSource

            return NoGPUSource(str(exc))
        print(f"kvdash: {NO_GPU.format(why=exc)}", file=sys.stderr)
        if json_out:  # scripts reading stdout get the reason too
            print(json.dumps({"error": NO_GPU.format(why=exc), "snapshot": None, "kv_pool": None}))
        raise typer.Exit(1) from exc


def live(
    ctx: typer.Context,
    demo: DemoOpt = False,
    replay: Annotated[Optional[Path], Opt(help="Play back snapshots recorded by kvdash record. Default: none (NVML).")] = None,
    engine: Annotated[Optional[str], Opt(help="A vLLM or SGLang Prometheus endpoint, e.g. localhost:8000. Default: none.")] = None,
    engine_timeout: EngineTimeoutOpt = D.ENGINE_TIMEOUT,
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
    length: LengthOpt = None,
    group: GroupOpt = None,
    max_reserved: MaxReservedOpt = None,
    interval: IntervalOpt = D.INTERVAL,
    once: Annotated[bool, Opt("--once", help="Print one snapshot as tables and exit.")] = False,
    as_json: Annotated[bool, Opt("--json", help="Print one snapshot as JSON and exit.")] = False,
    seed: SeedOpt = 7,
    gpus: GpusOpt = 8,
    snapshot_dir: Annotated[Path, Opt(help="Where the s key writes snapshots.")] = Path("."),
    simulate: Annotated[Optional[str], Opt(help="Draw the block map from a running simulation: paged, max, pow2 or "
                                                "oracle (blocks fill, tails, preemption, fragmentation). Default: "
                                                "none (the analytical map).")] = None,
    prometheus: Annotated[Optional[str], Opt(help="Fleet view: hosts, GPUs and engines from a Prometheus server "
                                                  "(http://HOST:9090). Default: none (this machine).")] = None,
    max_file_size: MaxFileSizeOpt = D.MAX_FILE_SIZE,
) -> None:
    """Live GPU memory beside the analytical KV pool (a Textual dashboard; --once/--json for scripts)."""
    from kvdash.live.analysis import analyze
    from kvdash.sources.engine import fetch, from_snapshot
    check_interval(interval)
    check_engine_timeout(engine_timeout)
    if simulate is not None and simulate not in ("paged", "max", "pow2", "oracle"):  # checked before --once returns
        raise InputError("--simulate", simulate, "expected paged, max, pow2 or oracle")
    if simulate is not None and (once or as_json):
        raise InputError("--simulate", simulate, "the simulated block map is drawn in the dashboard; give it without "
                         "--once or --json")
    refuse_live_unread(ctx, demo, engine, simulate is not None)
    if replay is None:
        refuse_unread(ctx, ("max_file_size",), "bounds the file --replay reads only")
    if once or as_json:  # (the fleet view's --once reads --interval as its deadline)
        refuse_unread(ctx, ("snapshot_dir",) if prometheus else ("interval", "snapshot_dir"),
                      "read by the dashboard only, not with --once or --json")
    max_bytes = parse_max_file_size(max_file_size)
    cfg = live_config(model, config, kv_dtype, block_size, tp, gpu_util, weights, reserve, budget, budget_mode,
                      live_lengths(length, group), max_reserved, engine_rules,
                      ctx.get_parameter_source("block_size").name != "DEFAULT")  # type: ignore[union-attr]
    mode = cfg.budget_mode
    from kvdash.netaddr import check_url

    if engine is not None:
        check_url("--engine", engine, "a vLLM or SGLang server, e.g. localhost:8000")
    if prometheus is not None:
        check_url("--prometheus", prometheus, "a Prometheus server, e.g. http://HOST:9090")
    if prometheus:  # the fleet view (kvdash/commands/fleet.py)
        if demo or replay or engine or simulate:
            raise InputError("--prometheus", prometheus, "give it without --demo, --replay, --engine or --simulate "
                             "(the fleet view draws no block map)")
        from kvdash.commands.fleet import run_fleet

        if not (once or as_json):
            check_snapshot_dir(snapshot_dir)
        return run_fleet(prometheus, cfg, once, as_json, interval, snapshot_dir)
    if not (once or as_json):
        check_snapshot_dir(snapshot_dir)
    source = _source(demo, replay, seed, gpus, max_bytes, json_out=as_json, engine=engine, follow=not (once or as_json))
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
        if replay is not None and not snap.gpus and not snap.extra.get("engine"):  # nothing to show: one line
            raise InputError("--replay", str(replay), "its first snapshot has no GPU readings (\"gpus\" is empty) "
                             "and no engine reading; expected a file written by kvdash record")
        reading = engine_fetch() if engine_fetch else from_snapshot(snap.extra)
        kv = analyze(snap, cfg, reading)
        if as_json:
            print(json.dumps({"snapshot": snap.to_json(), "kv_pool": kv}, indent=2, sort_keys=True, default=str))
        else:
            from kvdash.commands.common import Prose
            from kvdash.render.live_view import once_view

            prose = Prose()  # rich's wrapped lines without their trailing spaces
            for part in once_view(snap, kv, prose.console.width):
                prose.print(part)
        if not snap.gpus and (reading is None or bool(reading.error)):
            print(f"kvdash: {NO_GPU.format(why=snap.error or 'the source lists no GPU')}", file=sys.stderr)
            raise typer.Exit(1)
        if mode == "engine" and not kv.get("ok"):
            print(f"kvdash: {'; '.join(kv.get('notes', []))}", file=sys.stderr)
            raise typer.Exit(1)
        return
    sim = None
    if simulate is not None:
        from kvdash.simulate.visual import VisualSimulation

        # the block size the pool resolved (--block-size is text: 'auto' or tokens)
        sim = VisualSimulation(simulate, block_size=cfg.block_size, seed=seed)
    from kvdash.tui.app import LiveApp

    app = LiveApp(source, cfg, interval=interval, engine=engine_fetch, snapshot_dir=snapshot_dir, simulation=sim,
                  engine_url=engine)
    try:
        app.run()
    finally:
        if not app.read_in_flight:  # never shut NVML down under a read that hangs: the process' exit frees it
            source.close()
    end_signalled(app)


def refuse_live_unread(ctx: typer.Context, demo: bool, engine: object, seeded: bool = False) -> None:
    """live's, record's and exporter's options that shape the demo, an engine's scrape or the pool's budget, refused
    where nothing reads them (``--replay r --seed 8`` showed seed 7's recording); ``seeded``: a simulated block map
    draws from --seed too."""
    if "budget_mode" in ctx.params:  # live and exporter: --budget is the explicit mode's, --gpu-util the vllm mode's
        mode = ctx.params["budget_mode"] or ("explicit" if ctx.params["budget"] else "vllm")
        if mode not in ("explicit", "vllm", "engine"):
            return  # an unknown mode is refused as such by LiveConfig.validate, naming --budget-mode
        if mode != "explicit":
            refuse_unread(ctx, ("budget",), f"a declared budget is read by --budget-mode explicit (the default with "
                                            f"--budget), not {mode}: drop one or the other")
        if mode != "vllm":
            refuse_unread(ctx, ("gpu_util",), "sizes a budget derived from the GPUs (--budget-mode vllm) only, not "
                                              + ("a declared --budget" if mode == "explicit" else
                                                 f"--budget-mode {mode}'s"))
    if not demo:
        refuse_unread(ctx, ("gpus",), "shapes the --demo GPUs only: give --demo too")
        if not seeded:
            refuse_unread(ctx, ("seed",), "seeds --demo or --simulate only: give one of them too"
                          if "simulate" in ctx.params else "seeds --demo only: give --demo too")
    if not engine:
        refuse_unread(ctx, ("engine_timeout",), "bounds each read of --engine only: give --engine too")


def live_lengths(length: Optional[str], group: Optional[str]) -> tuple[int, ...]:
    """live's ``--length`` (one request) or ``--group`` (several lengths packed together), as calc reads them;
    live draws one of them, so both at once is refused."""
    one, group = length_or_group(length, group)
    if one is not None and group is not None:
        raise InputError("--length", one, "give --length or --group, not both (live shows one request length or one "
                         "group)")
    return parse_lengths(group, "--group") or (D.LENGTH if one is None else one,)


def live_config(model: str, config: Optional[Path], kv_dtype: str, block_size: str, tp: int,  # type: ignore[no-untyped-def]
                gpu_util: Optional[str], weights: Optional[str], reserve: str, budget: Optional[str],
                budget_mode: Optional[str], lengths: tuple[int, ...], max_reserved: Optional[int],
                engine_rules: str = "vllm", block_size_given: bool = True, lengths_field: str = ""):
    """live's and exporter's analytical-pool options as a LiveConfig, validated the same way for both
    (``engine_rules`` sglang: the exporter's pool by SGLang 0.5.23's rules, its page size 1 unless given)."""
    from kvdash.core.model import load_config
    from kvdash.live.analysis import LiveConfig
    from kvdash.units import parse_fraction, parse_size

    size = parse_block_size(block_size)  # checked before the model is read, as calc does
    from kvdash.engines import registry

    registry.get(engine_rules)  # an unknown engine: one line
    if engine_rules == "sglang":
        if gpu_util is not None:
            raise InputError("--gpu-util", gpu_util, "none with --engine-rules sglang: --gpu-util is vLLM's "
                                                     "gpu_memory_utilization, SGLang's mem_fraction_static its "
                                                     "default for the GPU and TP")
        if reserve != D.RESERVE:
            raise InputError("--reserve", reserve, "none with --engine-rules sglang: SGLang holds back (1 - "
                                                   "mem_fraction_static) of the free memory; a runtime reserve is "
                                                   "vLLM's")
        reserve = "0"
        if not block_size_given or size == "auto":
            size = 1  # SGLang's page size on CUDA (--page-size unset)
    if (budget_mode or ("explicit" if budget else "vllm")) != "vllm" and reserve == D.RESERVE:
        reserve = "0"  # a declared budget (or the engine's own pool) takes no reserve: the default asks for none
    gpu_util = D.GPU_UTIL if gpu_util is None else gpu_util
    parse_fraction(gpu_util, "--gpu-util")
    # --engine-rules sglang reads config.json as SGLang 0.5.23 does (kvdash.core.modeltypes.normalise): a config
    # vLLM 0.33 alone refuses (Ministral-3, ERNIE 4.5's Ernie4_5_ForCausalLM) gets SGLang's pool
    arch_read = load_config(config, engine="sglang" if engine_rules == "sglang" else "vllm") if config else None
    cfg = LiveConfig(model=model, arch=arch_read, kv_dtype=kv_dtype, tp=tp, gpu_util=gpu_util)
    arch = cfg.architecture()
    if engine_rules == "sglang":  # SGLang's page for DeepSeek sparse attention is 64, whatever is asked
        from kvdash.engines import sglang

        if sglang.is_dsa(arch):
            size = sglang.DSA_PAGE_SIZE
    cfg = replace(
        cfg, arch=cfg.arch, block_size=block_size_of(size, arch, kv_dtype),  # auto: vLLM's choice on Hopper
        weights=parse_size(weights, "--weights", allow_zero=True) if weights else None,
        reserve=0 if reserve.strip().lower() == "auto" else parse_size(reserve, "--reserve", allow_zero=True),
        budget_mode=budget_mode or ("explicit" if budget else "vllm"), budget=parse_budget(budget),
        lengths=lengths, max_reserved=D.reservation(arch.max_context, *lengths) if max_reserved is None else max_reserved,
        engine_rules=engine_rules,
    )
    if reserve.strip().lower() == "auto":  # a kvdash calibrate entry, else the published terms
        from kvdash.live.analysis import with_auto_reserve

        cfg = with_auto_reserve(cfg)
    try:
        cfg.validate()
    except InputError as exc:
        from kvdash.engines.vllm import refused_auto_block

        exc = refused_auto_block(exc, size == "auto")  # vLLM's own block named 'auto', as calc names it
        if lengths_field and exc.field == "--group":  # the exporter's lengths are each a --length
            exc = InputError(lengths_field, exc.value, exc.allowed, exc.hint)
        raise exc from None
    return cfg


def append_line(fd: int, text: str) -> None:
    """Append ``text`` and a newline as one ``write``; if the write fails or is short (a full disk), the file
    is cut back to its size before, so it never ends in half a line.  OSError when the line is not written."""
    import os

    data = (text + "\n").encode("utf-8")
    before = os.lseek(fd, 0, os.SEEK_END)
    try:
        written = os.write(fd, data)
        if written != len(data):
            raise OSError(28, os.strerror(28))  # ENOSPC: the rest did not fit
    except OSError:
        try:
            os.ftruncate(fd, before)
        except OSError:  # pragma: no cover - nothing more can be done
            pass
        raise


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
    ctx: typer.Context,
    out: Annotated[Path, Opt(help="JSON-lines file to write (appended).")],
    interval: IntervalOpt = D.INTERVAL,
    count: Annotated[int, Opt(help="Number of snapshots.")] = 10,
    demo: DemoOpt = False,
    seed: SeedOpt = 7,
    gpus: GpusOpt = 8,
    engine: Annotated[Optional[str], Opt(help="Also record a vLLM or SGLang engine's readings "
                                              "(its /metrics, e.g. localhost:8000). Default: none.")] = None,
    engine_timeout: EngineTimeoutOpt = D.ENGINE_TIMEOUT,
) -> None:
    """Record GPU snapshots (and an engine's readings) as JSON lines, for kvdash live --replay."""
    check_interval(interval)
    check_engine_timeout(engine_timeout)
    check_demo_gpus(gpus)
    refuse_live_unread(ctx, demo, engine)
    if count == 1:
        refuse_unread(ctx, ("interval",), "the time between readings; --count 1 takes one reading")
    if count < 1:
        raise InputError("--count", count, "expected a positive integer")
    import os
    import stat

    if out.exists() and not stat.S_ISREG(os.stat(out).st_mode):  # a FIFO would block the open; a folder fails
        raise InputError("--out", str(out), "expected a regular file (appended) or a new file")
    if demo and engine:
        raise InputError("--engine", engine, "give --demo or --engine, not both (the demo has its own engine)")
    if engine is not None:
        from kvdash.netaddr import check_url

        check_url("--engine", engine, "a vLLM or SGLang server, e.g. localhost:8000")
    source = _source(demo, None, seed, gpus, engine=engine)
    failed = 0
    try:
        fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0),
                     0o644)
    except OSError as exc:
        source.close()
        raise InputError("--out", str(out), f"cannot be written ({exc.strerror})") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for a FIFO or a device after the check
            raise InputError("--out", str(out), "expected a regular file (appended) or a new file")
        for i in range(count):
            started = time.monotonic()
            snap = source.read()
            if engine:
                from kvdash.sources.engine import fetch, snapshot_engine

                reading = fetch(engine, timeout=engine_timeout)
                failed += bool(reading.error)
                snap = replace(snap, extra={**snap.extra, "engine": snapshot_engine(reading)})
            append_line(fd, snap.dumps())  # one write of a whole line, cut back if it does not fit
            if i + 1 < count:
                time.sleep(max(0.0, interval - (time.monotonic() - started)))
    except OSError as exc:
        raise InputError("--out", str(out), f"cannot be written ({exc.strerror}); every line already in it is "
                         "whole") from exc
    finally:
        os.close(fd)
        source.close()
    print(f"{count} snapshots -> {out}" + (f" ({failed} engine readings failed: recorded with their error)"
                                            if failed else ""))

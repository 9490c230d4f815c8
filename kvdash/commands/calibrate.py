"""``kvdash calibrate``: the runtime reserve a running vLLM actually kept, saved for ``--reserve auto``.

From the engine's ``vllm:cache_config_info`` (num_gpu_blocks, block_size, gpu_memory_utilization,
cache_dtype) and the GPU's total memory (NVML, or ``--gpu``/``--gpu-memory``)::

    reserve = floor(total x util) - weights/rank - num_gpu_blocks x block bytes

the term vLLM 0.33's profiling took for the activation peak, CUDA graphs and non-torch memory (plus
the less-than-one-block remainder the pool could not use).  With this reserve, ``kvdash calc`` derives
exactly the engine's pool.  The arithmetic and the entry are :func:`kvdash.calibration.measure`, which
the ``c`` key of ``kvdash live`` uses too.
"""

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvdash import defaults as D
from kvdash.commands.common import (
    ConfigOpt,
    EngineTimeoutOpt,
    GpuMemoryOpt,
    GpuOpt,
    MaxBatchedTokensOpt,
    PpOpt,
    ServedModelOpt,
    TpOpt,
    WeightsOpt,
    check_engine_timeout,
    given,
    refuse_model_beside_config,
    refuse_unread,
)
from kvdash.errors import InputError

Opt = typer.Option


def calibrate(
    ctx: typer.Context,
    engine: Annotated[str, Opt(help="The vLLM server's address or /metrics URL, e.g. localhost:8000.")],
    model: ServedModelOpt = None,
    config: ConfigOpt = None,
    gpu: GpuOpt = None,
    gpu_memory: GpuMemoryOpt = None,
    weights: WeightsOpt = None,
    tp: TpOpt = D.TP,
    pp: PpOpt = D.PP,
    vllm_version: Annotated[str, Opt(help="vLLM version of the engine, recorded with the entry.")] = "0.33.0",
    max_batched_tokens: MaxBatchedTokensOpt = None,
    calibration_file: Annotated[Optional[Path], Opt(help="JSON-lines file to append to (default: $KVDASH_CALIBRATION, else ~/.local/share/kvdash/calibration.jsonl).")] = None,
    engine_timeout: EngineTimeoutOpt = D.ENGINE_TIMEOUT,
    timeout_old: Annotated[Optional[float], Opt("--timeout", hidden=True, help="Old name of --engine-timeout.")] = None,
    dry_run: Annotated[bool, Opt("--dry-run", help="Print the entry without saving it.")] = False,
    as_json: Annotated[bool, Opt("--json", help="Print the entry as JSON.")] = False,
) -> None:
    """Measure the runtime reserve a running vLLM kept and save it for --reserve auto."""
    from kvdash.calibration import append_entry, calibration_path, dated, entry_text, measure, served_preset
    from kvdash.core.gpus import get_gpu
    from kvdash.core.model import resolve_model
    from kvdash.sources.engine import fetch
    from kvdash.units import parse_size

    if timeout_old is not None:  # the old name, kept for one release
        if given(ctx, "engine_timeout") and engine_timeout != timeout_old:
            raise InputError("--timeout", timeout_old, "is the old name of --engine-timeout; give only --engine-timeout")
        engine_timeout = timeout_old
    check_engine_timeout(engine_timeout)
    from kvdash.netaddr import check_url

    check_url("--engine", engine, "a vLLM server, e.g. localhost:8000")
    # every option checked before the engine is read
    if config is not None:
        refuse_model_beside_config(ctx)
    if gpu_memory is not None:
        refuse_unread(ctx, ("gpu",), "a preset's memory, which --gpu-memory replaces: give one or the other")
    if dry_run:
        refuse_unread(ctx, ("calibration_file",), "not written with --dry-run (the entry is printed, not saved)")
    arch = resolve_model(model, config, None) if model or config else None
    total_given = parse_size(gpu_memory, "--gpu-memory") if gpu_memory is not None else None
    preset = get_gpu(gpu) if gpu is not None and gpu_memory is None else None
    weight_bytes = None if weights is None else parse_size(weights, "--weights", allow_zero=True)
    reading = fetch(engine, engine_timeout)
    if reading.error:
        raise InputError("--engine", engine, f"a reachable vLLM /metrics page (the scrape failed: {reading.error})")
    if arch is None:  # the default: the preset named like the model the engine serves
        model = served_preset(reading.served_model)
        arch = resolve_model(model)
    if total_given is not None:
        total, gpu_name = total_given, "custom"
    elif preset is not None:
        total, gpu_name = preset.memory_bytes, str(gpu)
    else:
        total, gpu_name = _nvml_total()
    if max_batched_tokens is None:  # the engine's default for this GPU (vllm/engine/arg_utils.py get_batch_defaults)
        from kvdash.engines.vllm import batch_tier

        name = preset.name if preset is not None else (None if gpu_name == "custom" else gpu_name)
        max_batched_tokens = batch_tier(total, name)[0].max_num_batched_tokens
    entry = dated(measure(reading, arch, total, gpu_name, tp, pp, weight_bytes, vllm_version, max_batched_tokens))
    path = calibration_path(calibration_file)
    if not dry_run:
        append_entry(path, entry)
    if as_json:
        print(json.dumps(entry, indent=2))
        return
    print(f"engine {reading.url}: {entry['num_gpu_blocks']:,} blocks x {entry['block_bytes']:,} B "
          f"= {entry['pool_bytes']:,} B of KV per rank")
    if not given(ctx, "model") and config is None:
        print(f"model {model}: the preset named like the engine's model_name {reading.served_model!r}")
    print(entry_text(entry))
    print(("not saved (--dry-run)" if dry_run else f"saved to {path}") +
          f"; kvdash calc -m {model or config} --gpu ... --tp {tp} --reserve auto uses it")


def _nvml_total() -> tuple[int, str]:
    from kvdash.sources.base import SourceUnavailable
    from kvdash.sources.nvml import NVMLSource

    try:
        src = NVMLSource()
    except SourceUnavailable as exc:
        raise InputError("--gpu", None, f"a GPU preset or --gpu-memory: NVML is not available here ({exc})") from exc
    try:
        gpus = [g for g in src.read().gpus if g.total_bytes]
    finally:
        src.close()
    if not gpus:
        raise InputError("--gpu", None, "a GPU preset or --gpu-memory: NVML reads no GPU memory")
    return int(gpus[0].total_bytes or 0), gpus[0].name

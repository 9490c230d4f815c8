"""``kvdash calibrate``: the runtime reserve a running vLLM actually kept, saved for ``--reserve auto``.

From the engine's ``vllm:cache_config_info`` (num_gpu_blocks, block_size, gpu_memory_utilization,
cache_dtype) and the GPU's total memory (NVML, or ``--gpu``/``--gpu-memory``)::

    reserve = floor(total x util) - weights/rank - num_gpu_blocks x block bytes

the term vLLM 0.33's profiling took for the activation peak, CUDA graphs and non-torch memory (plus
the less-than-one-block remainder the pool could not use).  With this reserve, ``kvdash calc`` derives
exactly the engine's pool.
"""

import datetime
import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from kvdash.errors import InputError

Opt = typer.Option


def measured_reserve(total: int, util: str, weights_rank: int, blocks: int, block_bytes: int) -> dict[str, int]:
    """``floor(total x util) - weights/rank - blocks x block_bytes``, each term in bytes."""
    from kvdash.units import parse_fraction, scale_floor

    requested = scale_floor(total, parse_fraction(util, "gpu_memory_utilization"))
    pool = blocks * block_bytes
    return {"requested_bytes": requested, "weights_per_rank_bytes": weights_rank, "pool_bytes": pool,
            "reserve_bytes": requested - weights_rank - pool}


def calibrate(
    engine: Annotated[str, Opt(help="The vLLM server's address or /metrics URL, e.g. localhost:8000.")],
    model: Annotated[Optional[str], Opt("--model", "-m", help="Model preset or config.json path the engine serves.")] = None,
    config: Annotated[Optional[Path], Opt(help="Hugging Face config.json of the model.")] = None,
    gpu: Annotated[Optional[str], Opt(help="GPU preset (kvdash gpus) instead of reading GPU 0 through NVML.")] = None,
    gpu_memory: Annotated[Optional[str], Opt(help="GPU total memory, instead of a preset or NVML.")] = None,
    weights: Annotated[Optional[str], Opt(help="Weight bytes of the whole model (default: the preset's figure).")] = None,
    tp: Annotated[int, Opt(help="Tensor-parallel degree the engine runs with.")] = 1,
    pp: Annotated[int, Opt(help="Pipeline-parallel degree the engine runs with.")] = 1,
    vllm_version: Annotated[str, Opt(help="vLLM version of the engine, recorded with the entry.")] = "0.33.0",
    max_batched_tokens: Annotated[int, Opt(help="The engine's max_num_batched_tokens, recorded with the entry.")] = 8192,
    calibration_file: Annotated[Optional[Path], Opt(help="JSON-lines file to append to (default: $KVDASH_CALIBRATION, else ~/.local/share/kvdash/calibration.jsonl).")] = None,
    timeout: Annotated[float, Opt(help="Seconds the metrics scrape may take in all.")] = 5.0,
    dry_run: Annotated[bool, Opt("--dry-run", help="Print the entry without saving it.")] = False,
    as_json: Annotated[bool, Opt("--json", help="Print the entry as JSON.")] = False,
) -> None:
    """Measure the runtime reserve a running vLLM kept and save it for --reserve auto."""
    from kvdash.calibration import append_entry, calibration_path
    from kvdash.core import formulas as f
    from kvdash.core.calc import rank_shapes
    from kvdash.core.gpus import get_gpu
    from kvdash.core.model import resolve_model
    from kvdash.sources.engine import fetch
    from kvdash.units import parse_size

    if not model and not config:
        raise InputError("--model", None, "name the model the engine serves (a preset or a config.json path)")
    if not 0.1 <= timeout <= 60:
        raise InputError("--timeout", timeout, "expected 0.1 to 60 seconds")
    arch = resolve_model(model, config, None)
    reading = fetch(engine, timeout)
    if reading.error:
        raise InputError("--engine", engine, f"a reachable vLLM /metrics page (the scrape failed: {reading.error})")
    if reading.kind != "vllm" or not reading.num_gpu_blocks or not reading.block_size \
            or not reading.gpu_memory_utilization:
        raise InputError("--engine", engine, "a vLLM engine exporting vllm:cache_config_info with num_gpu_blocks, "
                         "block_size and gpu_memory_utilization")
    if gpu_memory is not None:
        total, gpu_name = parse_size(gpu_memory, "--gpu-memory"), "custom"
    elif gpu is not None:
        preset = get_gpu(gpu)
        total, gpu_name = preset.memory_bytes, gpu
    else:
        total, gpu_name = _nvml_total()
    if weights is None and not arch.weights_known:
        raise InputError("--weights", None, f"the weight bytes of {arch.name} (weights {arch.weight_basis})")
    weight_bytes = arch.weight_bytes if weights is None else parse_size(weights, "--weights", allow_zero=True)
    dtype = {"auto": "bf16", "": "bf16"}.get(reading.cache_dtype, reading.cache_dtype)
    shape = rank_shapes(arch, dtype, "tensor", tp, pp, reading.block_size)[0]
    if shape.block_size != reading.block_size:
        raise InputError("--engine", engine, f"block_size {reading.block_size}: kvdash lays {arch.name} out with "
                         f"{shape.block_size}-token blocks; is it the model the engine serves?")
    terms = measured_reserve(total, reading.gpu_memory_utilization, f.weights_per_rank(weight_bytes, tp * pp),
                             reading.num_gpu_blocks, shape.block_bytes)
    if terms["reserve_bytes"] < 0:
        raise InputError("--weights", weight_bytes, f"a weight figure that leaves room for the engine's pool: the "
                         f"reserve comes out negative ({terms['reserve_bytes']:,} B); check --model, --tp, --gpu")
    entry: dict[str, Any] = {
        "model": arch.name, "served_model": reading.served_model, "gpu": gpu_name, "gpu_memory_bytes": total,
        "tp": tp, "pp": pp, "vllm_version": vllm_version, "max_num_batched_tokens": max_batched_tokens,
        "gpu_memory_utilization": reading.gpu_memory_utilization, "cache_dtype": reading.cache_dtype,
        "num_gpu_blocks": reading.num_gpu_blocks, "block_size": reading.block_size,
        "block_bytes": shape.block_bytes, "weights_bytes": weight_bytes, **terms,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "engine": reading.url,
    }
    path = calibration_path(calibration_file)
    if not dry_run:
        append_entry(path, entry)
    if as_json:
        print(json.dumps(entry, indent=2))
        return
    print(f"engine {reading.url}: {reading.num_gpu_blocks:,} blocks x {shape.block_bytes:,} B "
          f"= {terms['pool_bytes']:,} B of KV per rank")
    print(f"reserve per rank = floor({total:,} x {reading.gpu_memory_utilization}) - {terms['weights_per_rank_bytes']:,}"
          f" - {terms['pool_bytes']:,} = {terms['reserve_bytes']:,} B ({terms['reserve_bytes'] / 2**30:.2f} GiB)")
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

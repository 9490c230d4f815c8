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

from kvdash.errors import InputError

Opt = typer.Option


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
    from kvdash.calibration import append_entry, calibration_path, dated, entry_text, measure
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
    if gpu_memory is not None:
        total, gpu_name = parse_size(gpu_memory, "--gpu-memory"), "custom"
    elif gpu is not None:
        preset = get_gpu(gpu)
        total, gpu_name = preset.memory_bytes, gpu
    else:
        total, gpu_name = _nvml_total()
    entry = dated(measure(reading, arch, total, gpu_name, tp, pp,
                          None if weights is None else parse_size(weights, "--weights", allow_zero=True),
                          vllm_version, max_batched_tokens))
    path = calibration_path(calibration_file)
    if not dry_run:
        append_entry(path, entry)
    if as_json:
        print(json.dumps(entry, indent=2))
        return
    print(f"engine {reading.url}: {entry['num_gpu_blocks']:,} blocks x {entry['block_bytes']:,} B "
          f"= {entry['pool_bytes']:,} B of KV per rank")
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

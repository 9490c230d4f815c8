"""The local calibration file, the measured reserve, and the ``--reserve`` option (a size, or ``auto``).

``kvdash calibrate`` and the ``c`` key of ``kvdash live`` append one JSON object per line to the
calibration file: the reserve a running vLLM kept per rank, with model, GPU, TP, PP, vLLM version,
max_num_batched_tokens and date.  Both build the entry with :func:`measure`, so they record the same
figure for the same engine.  Path: ``$KVDASH_CALIBRATION`` if set, else
``$XDG_DATA_HOME/kvdash/calibration.jsonl`` (``~/.local/share/kvdash/calibration.jsonl``) -- never
inside the repository.

The measured reserve per rank::

    reserve = floor(total x gpu_memory_utilization) - weights/rank - num_gpu_blocks x block bytes

the term vLLM 0.33's profiling took for the activation peak, CUDA graphs and non-torch memory (plus
the less-than-one-block remainder the pool could not use).  With this reserve, ``kvdash calc`` derives
exactly the engine's pool.
"""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvdash.answer.budget import BudgetSpec
from kvdash.core.model import Architecture
from kvdash.engines.vllm_reserve import MEASURED_GRAPHS, ReserveTerm, auto_reserve, calibration_matches
from kvdash.errors import InputError
from kvdash.units import human_bytes, parse_fraction, parse_size, scale_floor

if TYPE_CHECKING:
    from kvdash.sources.engine import EngineReading

ENV = "KVDASH_CALIBRATION"
MAX_BYTES = 16 << 20  # a calibration file is a few hundred bytes a line; refuse anything absurd


def calibration_path(explicit: str | Path | None = None) -> Path:
    if explicit:
        return Path(explicit).expanduser()
    if os.environ.get(ENV):
        return Path(os.environ[ENV]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "kvdash" / "calibration.jsonl"


def load_entries(path: Path) -> list[dict[str, Any]]:
    """Every well-formed entry of the file (a missing file has none; a bad line is one clear error)."""
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return []
    except OSError as exc:  # a folder, no permission: the variable's (or the default path's) fault, in one line
        raise InputError(ENV, str(path), f"a readable calibration file (JSON lines, as kvdash calibrate writes): "
                                         f"{exc.strerror or exc}") from None
    if len(data) > MAX_BYTES:
        raise InputError(ENV, str(path), f"a calibration file of at most {MAX_BYTES:,} bytes")
    out = []
    for i, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            well_formed = _well_formed(entry)
        except (ValueError, RecursionError):  # RecursionError: a line nested too deeply
            well_formed = False
        if not well_formed:
            raise InputError(f"{path}: line {i}", line,
                             "a JSON object with reserve_bytes (whole bytes from 0), model and gpu text, tp and pp "
                             "whole numbers from 1, as kvdash calibrate writes") from None
        out.append(entry)
    return out


def _whole(v: Any, low: int | None = None) -> bool:
    return not isinstance(v, bool) and isinstance(v, int) and (low is None or v >= low)


def _well_formed(entry: Any) -> bool:
    """Whether a calibration line holds what the reserve rules read, each of the right type (an Infinity, a null tp or
    a tp of "x" ended calc in a traceback: OverflowError, TypeError, ValueError)."""
    if not isinstance(entry, dict) or not _whole(entry.get("reserve_bytes"), 0):  # -5 was blamed on --reserve
        return False
    if any(k in entry and not _whole(entry[k], 1) for k in ("tp", "pp")):
        return False
    return all(entry.get(k) is None or isinstance(entry[k], str) for k in ("model", "gpu"))


def append_entry(path: Path, entry: dict[str, Any]) -> None:
    """One line appended; a file whose last line has no newline (an editor's save, a cut copy) gets one first, so the
    entry is not glued to it (a helper's trial: two entries on one line, and every later command refused the file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+b") as fh:  # one write per line: appends from two runs never interleave
        ends_open = False
        if fh.seek(0, 2) > 0:
            fh.seek(-1, 2)
            ends_open = fh.read(1) != b"\n"
        fh.write((("\n" if ends_open else "") + json.dumps(entry, sort_keys=True) + "\n").encode("utf-8"))


def find_entry(arch: Architecture, gpu: str | None, tp: int, pp: int,
               path: Path | None = None) -> dict[str, Any] | None:
    """The newest entry for this model, TP, PP (and GPU when both name one)."""
    entries = [e for e in load_entries(path or calibration_path()) if calibration_matches(e, arch.name, gpu, tp, pp)]
    return entries[-1] if entries else None


def reserve_spec(text: str, arch: Architecture, gpu: str | None, tp: int, pp: int, max_batched_tokens: int,
                 field: str = "--reserve", graphs: int = MEASURED_GRAPHS) -> tuple[int, str, tuple[ReserveTerm, ...]]:
    """``--reserve`` as (bytes, basis, terms): a size gives itself; ``auto`` a calibration entry or the
    published terms of :mod:`kvdash.engines.vllm_reserve`."""
    if str(text).strip().lower() != "auto":
        return parse_size(str(text), field, allow_zero=True), "", ()
    entry = find_entry(arch, gpu, tp, pp)
    est = auto_reserve(arch.model_type, tp, pp, max_batched_tokens, gpu, entry, layers=arch.num_layers, graphs=graphs)
    terms = tuple(ReserveTerm(t["name"], t["bytes"], t["basis"], t["extrapolated"]) for t in est["terms"])
    basis = (f"--reserve auto: calibration entry from {calibration_path()}" if entry is not None
             else f"--reserve auto: {est['basis']}")
    return est["bytes"], basis, terms


def measured_reserve(total: int, util: str, weights_rank: int, blocks: int, block_bytes: int) -> dict[str, int]:
    """``floor(total x util) - weights/rank - blocks x block_bytes``, each term in bytes."""
    requested = scale_floor(total, parse_fraction(util, "gpu_memory_utilization"))
    pool = blocks * block_bytes
    return {"requested_bytes": requested, "weights_per_rank_bytes": weights_rank, "pool_bytes": pool,
            "reserve_bytes": requested - weights_rank - pool}


def engine_kv_dtype(cache_dtype: str) -> str:
    """vLLM's ``cache_dtype`` as a kvdash KV dtype: ``auto`` (the model's dtype) is taken as bf16."""
    return {"auto": "bf16", "": "bf16"}.get(cache_dtype, cache_dtype)


def measure(reading: EngineReading, arch: Architecture, total: int, gpu: str, tp: int = 1, pp: int = 1,
            weights: int | None = None, vllm_version: str = "0.33.0", max_batched_tokens: int = 8192,
            source: str = "kvdash calibrate") -> dict[str, Any]:
    """The calibration entry (all but its ``date``) for a vLLM engine's reading: the reserve it kept per
    rank on a GPU of ``total`` bytes, with the terms that give it.  ``kvdash calibrate`` and the ``c`` key
    of ``kvdash live`` both call this, so they record the same figure.

    Raises :class:`InputError` naming what is missing: an engine that failed or is not vLLM, no
    ``vllm:cache_config_info`` figures, no weight figure, a block size kvdash would not lay this model
    out with (another model?), or weights that leave a negative reserve."""
    from kvdash.core import formulas as f
    from kvdash.engines.vllm import rank_shapes

    if reading.error:
        raise InputError("--engine", reading.url, f"a reachable vLLM /metrics page (the scrape failed: "
                                                  f"{reading.error})")
    if not reading.kind.startswith("vllm") or not reading.num_gpu_blocks or not reading.block_size \
            or not reading.gpu_memory_utilization:
        # each figure the page lacks, or holds but kvdash dropped (a negative count, two engines disagreeing)
        lacking = [f"{k}: {reading.invalid[k]}" if k in reading.invalid else f"{k}: missing"
                   for k in ("num_gpu_blocks", "block_size", "gpu_memory_utilization") if not getattr(reading, k)]
        raise InputError("--engine", reading.url, "a vLLM engine exporting vllm:cache_config_info with num_gpu_blocks, "
                         "block_size and gpu_memory_utilization"
                         + (f" (this one is {reading.kind or 'not vLLM'})" if not reading.kind.startswith("vllm")
                            else f" ({'; '.join(lacking)})"))
    if weights is None and not arch.weights_known:
        raise InputError("--weights", None, f"the weight bytes of {arch.name} (weights {arch.weight_basis})")
    weight_bytes = arch.weight_bytes if weights is None else weights
    dtype = engine_kv_dtype(reading.cache_dtype)
    shape = rank_shapes(arch, dtype, "tensor", tp, pp, reading.block_size)[0]
    if shape.block_size != reading.block_size:
        raise InputError("--engine", reading.url, f"block_size {reading.block_size}: kvdash lays {arch.name} out "
                         f"with {shape.block_size}-token blocks; is it the model the engine serves?")
    terms = measured_reserve(total, reading.gpu_memory_utilization, f.weights_per_rank(weight_bytes, tp * pp),
                             reading.num_gpu_blocks, shape.block_bytes)
    if terms["reserve_bytes"] < 0:
        why = (f"the reserve comes out negative ({terms['reserve_bytes']:,} B: the engine's {reading.num_gpu_blocks:,} "
               f"blocks of {shape.block_bytes:,} B and the weights do not fit the GPU's share)")
        if weights is None:  # the weights are the model's own count: the page or the setup is at fault, not a flag
            raise InputError("--engine", reading.url, f"a pool this GPU can hold: {why}; check --model, --tp, the GPU "
                                                      "(or give --weights)")
        raise InputError("--weights", weight_bytes, f"a weight figure that leaves room for the engine's pool: {why}; "
                         "check --model, --tp, the GPU")
    return {
        "model": arch.name, "served_model": reading.served_model, "gpu": gpu, "gpu_memory_bytes": total,
        "tp": tp, "pp": pp, "vllm_version": vllm_version, "max_num_batched_tokens": max_batched_tokens,
        "gpu_memory_utilization": reading.gpu_memory_utilization, "cache_dtype": reading.cache_dtype,
        "num_gpu_blocks": reading.num_gpu_blocks, "block_size": reading.block_size,
        "block_bytes": shape.block_bytes, "weights_bytes": weight_bytes, **terms,
        "engine": reading.url, "source": source,
    }


def served_preset(served: str) -> str:
    """The preset named like the model an engine serves (its ``model_name`` label), ``kvdash calibrate``'s
    default ``--model``: organisation, case, punctuation and a chat/instruct suffix are ignored, so
    ``meta-llama/Llama-3.1-70B-Instruct`` is ``llama-3.1-70b``.  Exactly one preset must match."""
    from kvdash.core.model import preset_names, same_model

    if not served:
        raise InputError("--model", None, "the model the engine serves (its metrics carry no model_name label): "
                         "give --model or --config")
    found = [name for name in preset_names() if same_model(served, name)]
    if len(found) != 1:
        shown = served if len(served) <= 80 else served[:77] + "..."
        raise InputError("--model", None, f"the model the engine serves: {shown!r} names "
                         + ("no preset (kvdash models)" if not found else f"{len(found)} presets ({', '.join(found)})")
                         + "; give --model or --config")
    return found[0]


def dated(entry: dict[str, Any], now: datetime.datetime | None = None) -> dict[str, Any]:
    """The entry with its ``date`` (UTC, to the second), as it is saved."""
    when = now or datetime.datetime.now(datetime.UTC)
    return {**entry, "date": when.strftime("%Y-%m-%dT%H:%M:%SZ")}


def entry_text(entry: dict[str, Any]) -> str:
    """The entry's arithmetic in one line: ``floor(total x util) - weights/rank - blocks x block = reserve``."""
    return (f"reserve per rank = floor({entry['gpu_memory_bytes']:,} x {entry['gpu_memory_utilization']}) - "
            f"{entry['weights_per_rank_bytes']:,} - {entry['num_gpu_blocks']:,} x {entry['block_bytes']:,} = "
            f"{entry['reserve_bytes']:,} B ({human_bytes(entry['reserve_bytes'])})")  # as calc shows it (126.27 KiB)


def with_reserve(spec: BudgetSpec, reserve: tuple[int, str, tuple[ReserveTerm, ...]]) -> BudgetSpec:
    from dataclasses import replace

    if reserve[1] and spec.gpu is None and spec.gpu_memory is None:
        raise InputError("--reserve", "auto", "auto needs a GPU-derived budget: give --gpu or --gpu-memory")
    return replace(spec, reserve=reserve[0], reserve_basis=reserve[1], reserve_terms=reserve[2])


def reserve_for(spec: BudgetSpec, text: str, explicit: bool, arch: Architecture, tp: int, pp: int,
                max_batched_tokens: int, field: str = "--reserve", graphs: int = MEASURED_GRAPHS) -> BudgetSpec:
    """``spec`` with the runtime reserve ``--reserve`` asks for (issue 23: realistic by default).

    A budget derived from a GPU takes ``text`` (default ``auto``: a calibration entry, else the published
    terms; ``0``: the upper bound, labelled so).  A declared budget is the KV memory itself: the default
    takes nothing off it, so the tutorial's figures stay exact; ``--reserve auto`` given explicitly with it
    is refused (there is nothing to subtract from)."""
    if spec.gpu is None and spec.gpu_memory is None and not explicit:
        parse_size("0", field, allow_zero=True)
        return spec
    return with_reserve(spec, reserve_spec(text, arch, spec.gpu, tp, pp, max_batched_tokens, field, graphs=graphs))

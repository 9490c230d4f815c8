"""The local calibration file and the ``--reserve`` option (a size, or ``auto``).

``kvdash calibrate`` appends one JSON object per line to the calibration file: the reserve a running
vLLM kept per rank, with model, GPU, TP, PP, vLLM version, max_num_batched_tokens and date.
Path: ``$KVDASH_CALIBRATION`` if set, else ``$XDG_DATA_HOME/kvdash/calibration.jsonl``
(``~/.local/share/kvdash/calibration.jsonl``) -- never inside the repository.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from kvdash.core.calc import BudgetSpec
from kvdash.core.model import Architecture
from kvdash.core.reserve import ReserveTerm, auto_reserve, calibration_matches
from kvdash.errors import InputError
from kvdash.units import parse_size

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
    if len(data) > MAX_BYTES:
        raise InputError(ENV, str(path), f"a calibration file of at most {MAX_BYTES:,} bytes")
    out = []
    for i, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            int(entry["reserve_bytes"])
        except (ValueError, KeyError, TypeError):
            raise InputError(f"{path}: line {i}", line,
                             "a JSON object with reserve_bytes, as kvdash calibrate writes") from None
        out.append(entry)
    return out


def append_entry(path: Path, entry: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:  # one line per write: appends from two runs never interleave
        fh.write(json.dumps(entry, sort_keys=True) + "\n")


def find_entry(arch: Architecture, gpu: str | None, tp: int, pp: int,
               path: Path | None = None) -> dict[str, Any] | None:
    """The newest entry for this model, TP, PP (and GPU when both name one)."""
    entries = [e for e in load_entries(path or calibration_path()) if calibration_matches(e, arch.name, gpu, tp, pp)]
    return entries[-1] if entries else None


def reserve_spec(text: str, arch: Architecture, gpu: str | None, tp: int, pp: int, max_batched_tokens: int,
                 field: str = "--reserve") -> tuple[int, str, tuple[ReserveTerm, ...]]:
    """``--reserve`` as (bytes, basis, terms): a size gives itself; ``auto`` a calibration entry or the
    published terms of :mod:`kvdash.core.reserve`."""
    if str(text).strip().lower() != "auto":
        return parse_size(str(text), field, allow_zero=True), "", ()
    entry = find_entry(arch, gpu, tp, pp)
    est = auto_reserve(arch.model_type, tp, pp, max_batched_tokens, gpu, entry)
    terms = tuple(ReserveTerm(t["name"], t["bytes"], t["basis"], t["extrapolated"]) for t in est["terms"])
    basis = (f"--reserve auto: calibration entry from {calibration_path()}" if entry is not None
             else f"--reserve auto: {est['basis']}")
    return est["bytes"], basis, terms


def with_reserve(spec: BudgetSpec, reserve: tuple[int, str, tuple[ReserveTerm, ...]]) -> BudgetSpec:
    from dataclasses import replace

    if reserve[1] and spec.gpu is None and spec.gpu_memory is None:
        raise InputError("--reserve", "auto", "auto needs a GPU-derived budget: give --gpu or --gpu-memory")
    return replace(spec, reserve=reserve[0], reserve_basis=reserve[1], reserve_terms=reserve[2])

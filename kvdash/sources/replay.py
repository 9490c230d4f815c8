"""Snapshots recorded by ``kvdash record`` (JSON lines), played back one per poll.

The file is streamed: each poll reads one more line (at most ``MAX_LINE_BYTES``), so the first frame
of a 200 MB recording comes as fast as that of a small one and memory stays bounded.  Every line is
checked field by field before it becomes a :class:`Snapshot`; a bad line raises
:class:`ReplayLineError` naming the line number, the field and the value, and the next read goes on
with the following line.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import IO, Any

from kvdash import safeio
from kvdash.sources.base import GPUReading, ProcessReading, Snapshot, SourceUnavailable

MAX_LINE_BYTES = 2**20  # one snapshot of 64 GPUs with their processes is well under 1 MiB (docs/safety.md)


class ReplayLineError(ValueError):
    """One line of a recording is not a valid snapshot: ``line``, ``field``, ``value``, ``allowed``."""

    def __init__(self, line: int, field: str, value: object, allowed: str) -> None:
        self.line, self.field, self.value, self.allowed = line, field, value, allowed
        shown = repr(value)
        if len(shown) > 40:
            shown = shown[:37] + "..."
        super().__init__(f"line {line}, {field}: {shown} is not allowed; {allowed}")


class _Bad(Exception):
    def __init__(self, field: str, value: object, allowed: str) -> None:
        super().__init__(field)
        self.field, self.value, self.allowed = field, value, allowed


def _int(where: str, v: Any, low: int = 0, high: int = 2**63, optional: bool = True) -> int | None:
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
        raise _Bad(where, v, f"expected a whole number from {low:,} to {high:,}" + (" or null" if optional else ""))
    return v


def _float(where: str, v: Any, low: float = 0.0, high: float = 1e6) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not low <= v <= high:
        raise _Bad(where, v, f"expected a finite number from {low:g} to {high:g} or null")
    return float(v)


def _str(where: str, v: Any, default: str = "") -> str:
    if v is None:
        return default
    if not isinstance(v, str):
        raise _Bad(where, v, "expected a string")
    from kvdash.errors import visible

    return visible(v)  # control, bidi and zero-width characters shown as escapes on the terminal


def _bool(where: str, v: Any) -> bool:
    if v is None:
        return False
    if not isinstance(v, bool):
        raise _Bad(where, v, "expected true or false")
    return v


def _list(where: str, v: Any) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise _Bad(where, v, "expected a list")
    return v


def _dict(where: str, v: Any) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise _Bad(where, v, "expected an object {...}")
    return v


def _gpu(where: str, g: Any) -> GPUReading:
    g = _dict(where, g)
    procs = []
    for k, p in enumerate(_list(f"{where}.processes", g.get("processes"))):
        pw = f"{where}.processes[{k}]"
        p = _dict(pw, p)
        procs.append(ProcessReading(pid=_int(f"{pw}.pid", p.get("pid"), optional=False) or 0,
                                    name=_str(f"{pw}.name", p.get("name")),
                                    used_bytes=_int(f"{pw}.used_bytes", p.get("used_bytes"))))
    total = _int(f"{where}.total_bytes", g.get("total_bytes"))
    used = _int(f"{where}.used_bytes", g.get("used_bytes"))
    free = _int(f"{where}.free_bytes", g.get("free_bytes"))
    reserved = _int(f"{where}.reserved_bytes", g.get("reserved_bytes"))
    unified = _bool(f"{where}.unified_memory", g.get("unified_memory"))
    if total is not None and not unified:
        # a GPU's own memory bounds every figure of it (a free 931 GiB on a 140 GiB GPU was shown); a unified-memory
        # device's figures are the system's and are left as read
        for field_, value in ((f"{where}.used_bytes", used), (f"{where}.free_bytes", free),
                              (f"{where}.reserved_bytes", reserved),
                              *((f"{where}.processes[{k}].used_bytes", p.used_bytes) for k, p in enumerate(procs))):
            if value is not None and value > total:
                raise _Bad(field_, value, f"expected at most total_bytes ({total:,})")
    return GPUReading(
        index=_int(f"{where}.index", g.get("index"), high=4096, optional=False) or 0,
        name=_str(f"{where}.name", g.get("name")), uuid=_str(f"{where}.uuid", g.get("uuid")),
        total_bytes=total, used_bytes=used, free_bytes=free, reserved_bytes=reserved,
        utilization_percent=_int(f"{where}.utilization_percent", g.get("utilization_percent"), high=100),
        temperature_c=_int(f"{where}.temperature_c", g.get("temperature_c"), low=-60, high=200),
        power_w=_float(f"{where}.power_w", g.get("power_w")),
        power_limit_w=_float(f"{where}.power_limit_w", g.get("power_limit_w")),
        processes=tuple(procs), processes_note=_str(f"{where}.processes_note", g.get("processes_note")),
        lost=_bool(f"{where}.lost", g.get("lost")), unified_memory=unified,
        memory_api=_str(f"{where}.memory_api", g.get("memory_api")),
    )


ENGINE_FIELDS = {"kv_usage": (0.0, 1.0), "prefix_hit_rate": (0.0, 1.0)}
ENGINE_COUNTS = ("running", "waiting", "preemptions", "num_gpu_blocks", "block_size")


def snapshot_from_record(data: Any) -> Snapshot:
    """A recorded snapshot, every field checked (raises ``_Bad`` with the field's path)."""
    data = _dict("line", data)
    if "time" not in data:
        raise _Bad("time", None, "every snapshot needs its time (seconds since the epoch)")
    t = _float("time", data["time"], 0.0, 1e11)
    extra = _dict("extra", data.get("extra", {}))
    if "engine" in extra:
        e = _dict("extra.engine", extra["engine"])
        for name, (lo, hi) in ENGINE_FIELDS.items():
            _float(f"extra.engine.{name}", e.get(name), lo, hi)
        for name in ENGINE_COUNTS:
            _int(f"extra.engine.{name}", e.get(name), low=1 if name == "block_size" else 0)
        _str("extra.engine.kind", e.get("kind"))
        _str("extra.engine.served_model", e.get("served_model"))
        if e.get("waiting_by_reason") is not None:  # the queue by reason: counts (a list crashed the dashboard)
            for k, v in _dict("extra.engine.waiting_by_reason", e["waiting_by_reason"]).items():
                _int(f"extra.engine.waiting_by_reason.{k}", v, high=2**53)
        if e.get("offload") is not None:  # the offloading tier's settings: numbers or text
            for k, v in _dict("extra.engine.offload", e["offload"]).items():
                if v is not None and not isinstance(v, str):
                    _float(f"extra.engine.offload.{k}", v, -1e18, 1e18)
    return Snapshot(time=t or 0.0, source=_str("source", data.get("source")),
                    gpus=tuple(_gpu(f"gpus[{i}]", g) for i, g in enumerate(_list("gpus", data.get("gpus")))),
                    driver=_str("driver", data.get("driver")), error=_str("error", data.get("error")), extra=extra)


class ReplaySource:
    def __init__(self, path: str | Path, max_bytes: int = safeio.STREAM_CAP) -> None:
        self.path = Path(path)
        self.name = f"replay {self.path.name}"
        self.max_bytes = max_bytes
        self.fh = self._open()
        self.line = 0  # number of the last line read
        self.frames = 0
        self.last: Snapshot | None = None
        self.ended = False  # the last read found no new line: the last snapshot is shown again, marked as the end
        # follow (the dashboard): a last line still being written (no newline, not yet JSON) is waited for, and lines
        # appended later are read, as `tail -f` would; without it (--once) such a line is a bad line
        self.follow = False
        self.incomplete = 0  # the number of a last line waited for (0: none)
        self._open_line = False  # the last line read was whole JSON without its newline: a newline alone comes next

    def _open(self) -> IO[bytes]:
        """The one place the file is opened (binary, read line by line): a regular file of at most
        ``max_bytes`` (kvdash.safeio: a FIFO or device is one line at once, never a blocked read)."""
        return os.fdopen(safeio.open_fd(self.path, "--replay", self.max_bytes, "--max-file-size"), "rb")

    def _next(self) -> Snapshot | None:
        """The next valid line as a snapshot; None at the end; ReplayLineError for a bad line."""
        while True:
            try:
                start = self.fh.tell()
                raw = self.fh.readline(MAX_LINE_BYTES + 1)
            except OSError as exc:
                raise SourceUnavailable(f"reading failed ({exc.strerror or type(exc).__name__})") from exc
            if not raw:
                return None
            if self.follow and len(raw) <= MAX_LINE_BYTES and not raw.endswith(b"\n") and not _json_object(raw):
                self.fh.seek(start)  # being written: read it whole at a later poll
                self.incomplete = self.line + 1
                return None
            self.incomplete = 0
            if self._open_line and raw in (b"\n", b"\r\n"):  # the newline of the line read before: not a line
                self._open_line = False
                continue
            self._open_line = not raw.endswith(b"\n")
            self.line += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                while raw and not raw.endswith(b"\n"):  # skip the rest of the long line, bounded reads
                    raw = self.fh.readline(MAX_LINE_BYTES)
                raise ReplayLineError(self.line, "line", f"{MAX_LINE_BYTES // 2**20}+ MiB",
                                      f"a snapshot line is at most {MAX_LINE_BYTES // 2**20} MiB")
            if not raw.strip():
                continue
            try:
                data = json.loads(raw)
            except (ValueError, RecursionError) as exc:
                raise ReplayLineError(self.line, "line", raw[:40].decode("utf-8", "replace"),
                                      f"expected one JSON object per line ({type(exc).__name__})") from exc
            try:
                return snapshot_from_record(data)
            except _Bad as bad:
                raise ReplayLineError(self.line, bad.field, bad.value, bad.allowed) from None

    def read(self) -> Snapshot:
        """The next snapshot; at the end, the last one again marked as the end (following, each read looks for
        lines appended since)."""
        snap = None if self.ended and not self.follow else self._next()  # ReplayLineError: the caller skips it
        if snap is None:
            self.ended = True
            last = self.last
            if last is None:
                if self.follow and self.incomplete:
                    raise SourceUnavailable(f"line {self.incomplete} is not complete yet")
                raise SourceUnavailable("the file holds no snapshot (record one with kvdash record)")
            waiting = f"; line {self.incomplete} not complete" if self.incomplete else ""
            return Snapshot(time=last.time, source=f"{self.name} (end, {self.frames} snapshots{waiting})",
                            gpus=last.gpus, driver=last.driver, error=last.error, extra=last.extra)
        self.ended = False
        self.frames += 1
        self.last = snap
        return snap

    def close(self) -> None:
        self.fh.close()


def _json_object(raw: bytes) -> bool:
    """Whether a line without its newline is already a whole JSON object (a file's last line may lack the newline)."""
    try:
        return isinstance(json.loads(raw), dict)
    except (ValueError, RecursionError):
        return False

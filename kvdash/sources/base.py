"""Readings of GPUs, shared by every source (NVML, demo, replay): small immutable records.

Units are in the names: ``*_bytes`` exact bytes, ``*_percent`` 0-100, ``temperature_c`` degrees
Celsius, ``power_w`` watts.  ``None`` means "not available" (NVML answered NotSupported, or the
source has no such reading).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class ProcessReading:
    pid: int
    name: str
    used_bytes: int | None


@dataclass(frozen=True)
class GPUReading:
    index: int
    name: str
    uuid: str = ""
    total_bytes: int | None = None
    used_bytes: int | None = None
    free_bytes: int | None = None
    reserved_bytes: int | None = None  # NVML memory v2 only
    utilization_percent: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    processes: tuple[ProcessReading, ...] = ()
    processes_note: str = ""  # "no permission (in a container, run with --pid=host)", "n/a", ...
    lost: bool = False  # NVML said GpuIsLost
    unified_memory: bool = False  # total 0 / NotSupported: memory shared with the CPU (GB10, Grace)
    memory_api: str = ""  # "v2" or "v1"

    @property
    def used_fraction(self) -> float | None:
        if not self.total_bytes or self.used_bytes is None:
            return None
        return self.used_bytes / self.total_bytes


@dataclass(frozen=True)
class Snapshot:
    time: float  # seconds since the epoch (demo and replay: their own clock)
    source: str  # "nvml", "demo (seed 7)", "replay FILE"
    gpus: tuple[GPUReading, ...]
    driver: str = ""
    error: str = ""  # a source-wide problem ("NVML: driver not loaded")
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> Snapshot:
        gpus = tuple(
            GPUReading(**{**g, "processes": tuple(ProcessReading(**p) for p in g.get("processes", ()))})
            for g in data.get("gpus", ())
        )
        return Snapshot(time=float(data["time"]), source=str(data.get("source", "")), gpus=gpus,
                        driver=str(data.get("driver", "")), error=str(data.get("error", "")),
                        extra=dict(data.get("extra", {})))

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)


class Source(Protocol):
    """Anything the dashboard can poll: NVML, the demo, a replay. The TUI cannot tell them apart."""

    name: str

    def read(self) -> Snapshot: ...

    def close(self) -> None: ...


class SourceUnavailable(Exception):
    """The source cannot start at all (no driver, no NVML library, unreadable replay file)."""


class NoGPUSource:
    """A machine without NVML (a laptop, a CPU node) watching an engine elsewhere: snapshots with no
    GPUs and the reason, so ``live --engine URL`` still shows the engine's own figures and kvdash's
    pool comes from ``--budget`` or ``--budget-mode engine``."""

    name = "none"

    def __init__(self, why: str) -> None:
        self.why = why

    def read(self) -> Snapshot:
        import time

        return Snapshot(time=time.time(), source="none", gpus=(), error=f"no GPU readings here ({self.why})")

    def close(self) -> None:
        return None

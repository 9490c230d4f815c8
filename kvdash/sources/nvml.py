"""GPU readings from NVML (``nvidia-ml-py``, imported as ``pynvml``): the only module that touches it.

Every call goes through :func:`query`, which turns NVML's per-field failures into ``None``
("n/a"), so one unsupported field never costs a whole row.  A GPU lost mid-run becomes a marked
row (``lost``); the memory v2 call (with ``reserved``) falls back to v1 where the driver lacks it;
a process list that is denied reads "no permission".
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kvdash.sources.base import GPUReading, ProcessReading, Snapshot, SourceUnavailable

NA = None
NO_PERMISSION = "no permission (in a container, run it with --pid=host)"


def _load() -> Any:
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a dependency
        raise SourceUnavailable("the NVML binding (nvidia-ml-py) is not installed") from exc
    return pynvml


class GpuLost(Exception):
    pass


class NVMLSource:
    """Polls every GPU NVML sees."""

    def __init__(self, nvml: Any = None) -> None:
        self.nvml = nvml or _load()
        self.name = "nvml"
        try:
            self.nvml.nvmlInit()
        except self.nvml.NVMLError as exc:
            raise SourceUnavailable(f"NVML could not start: {self._text(exc)}") from exc
        self._driver = self.query(self.nvml.nvmlSystemGetDriverVersion) or ""
        self._v2 = True

    def _text(self, exc: Exception) -> str:
        try:
            return str(self.nvml.nvmlErrorString(exc.value))  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - any failure here only loses the wording
            return str(exc)

    def query(self, func: Callable[..., Any], *args: Any, default: Any = NA) -> Any:
        """Call one NVML function; NotSupported, NoPermission and unknown functions give ``default``,
        GpuIsLost raises :class:`GpuLost`."""
        n = self.nvml
        try:
            value = func(*args)
        except n.NVMLError_GpuIsLost as exc:
            raise GpuLost() from exc
        except (n.NVMLError_NotSupported, n.NVMLError_NoPermission, n.NVMLError_FunctionNotFound,
                n.NVMLError_NotFound, n.NVMLError_InvalidArgument, n.NVMLError_Unknown):
            return default
        except n.NVMLError:
            return default
        if isinstance(value, bytes):
            value = value.decode(errors="replace")
        return value

    def _memory(self, handle: Any) -> tuple[Any, str]:
        n = self.nvml
        if self._v2:
            try:
                return n.nvmlDeviceGetMemoryInfo(handle, version=n.nvmlMemory_v2), "v2"
            except n.NVMLError_GpuIsLost as exc:
                raise GpuLost() from exc
            except (n.NVMLError_FunctionNotFound, n.NVMLError_NotSupported, n.NVMLError_ArgumentVersionMismatch,
                    TypeError, AttributeError):
                self._v2 = False  # this driver has no v2 call: use v1 from now on
            except n.NVMLError:
                self._v2 = False
        return self.query(n.nvmlDeviceGetMemoryInfo, handle), "v1"

    def _processes(self, handle: Any) -> tuple[tuple[ProcessReading, ...], str]:
        n = self.nvml
        procs: dict[int, int | None] = {}
        note = ""
        for func in (getattr(n, "nvmlDeviceGetComputeRunningProcesses", None),
                     getattr(n, "nvmlDeviceGetGraphicsRunningProcesses", None)):
            if func is None:
                continue
            try:
                for p in func(handle):
                    used = getattr(p, "usedGpuMemory", None)
                    procs[int(p.pid)] = None if used is None or used >= 2**63 else int(used)
            except n.NVMLError_GpuIsLost as exc:
                raise GpuLost() from exc
            except n.NVMLError_NoPermission:
                note = NO_PERMISSION
            except n.NVMLError:
                note = note or "n/a"
        out = []
        for pid in sorted(procs):
            out.append(ProcessReading(pid=pid, name=_process_name(pid), used_bytes=procs[pid]))
        if not out and not note:
            note = "none"
        return tuple(out), note

    def _gpu(self, index: int) -> GPUReading:
        n = self.nvml
        try:
            handle = n.nvmlDeviceGetHandleByIndex(index)
        except n.NVMLError_GpuIsLost:
            return GPUReading(index=index, name="(lost)", lost=True)
        except n.NVMLError as exc:
            return GPUReading(index=index, name=f"(unreadable: {self._text(exc)})", lost=True)
        try:
            name = self.query(n.nvmlDeviceGetName, handle) or f"GPU {index}"
            uuid = self.query(n.nvmlDeviceGetUUID, handle) or ""
            mem, api = self._memory(handle)
            total = used = free = reserved = None
            unified = False
            if mem is None or not getattr(mem, "total", 0):
                unified = True  # NotSupported or total 0: memory shared with the CPU
            else:
                total, used, free = int(mem.total), int(mem.used), int(mem.free)
                reserved = int(mem.reserved) if api == "v2" and hasattr(mem, "reserved") else None
            util = self.query(n.nvmlDeviceGetUtilizationRates, handle)
            temp = self.query(n.nvmlDeviceGetTemperature, handle, n.NVML_TEMPERATURE_GPU)
            power = self.query(n.nvmlDeviceGetPowerUsage, handle)
            limit = self.query(n.nvmlDeviceGetEnforcedPowerLimit, handle)
            procs, note = self._processes(handle)
        except GpuLost:
            return GPUReading(index=index, name="(lost: NVML says GpuIsLost)", lost=True)
        return GPUReading(
            index=index, name=str(name), uuid=str(uuid), total_bytes=total, used_bytes=used, free_bytes=free,
            reserved_bytes=reserved, utilization_percent=None if util is None else int(util.gpu),
            temperature_c=None if temp is None else int(temp),
            power_w=None if power is None else power / 1000, power_limit_w=None if limit is None else limit / 1000,
            processes=procs, processes_note=note, unified_memory=unified, memory_api=api,
        )

    def read(self) -> Snapshot:
        count = self.query(self.nvml.nvmlDeviceGetCount, default=0) or 0
        return Snapshot(time=time.time(), source="nvml", driver=str(self._driver),
                        gpus=tuple(self._gpu(i) for i in range(count)),
                        error="" if count else "NVML sees no GPU")

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down is best effort
            pass


def _process_name(pid: int) -> str:
    """The command of a process from /proc (``?`` when it cannot be read, e.g. another PID namespace)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            parts = fh.read().split(b"\0")
        text = " ".join(p.decode(errors="replace") for p in parts if p)
        return text[:80] or "?"
    except OSError:
        return "?"

"""Snapshots recorded by ``kvdash record`` (JSON lines), played back one per poll."""

from __future__ import annotations

import json
from pathlib import Path

from kvdash import safeio
from kvdash.sources.base import Snapshot, SourceUnavailable


def _not_json(word: str) -> None:
    raise ValueError(f"{word} is not a JSON number")  # json.loads accepts NaN and Infinity; JSON does not


class ReplaySource:
    def __init__(self, path: str | Path, max_bytes: int = safeio.STREAM_CAP) -> None:
        self.path = Path(path)
        self.name = f"replay {self.path.name}"
        lines = safeio.iter_lines(self.path, "--replay", max_bytes, "--max-file-size")  # streamed, bounded
        self.snapshots: list[Snapshot] = []
        for number, line in lines:
            if not line.strip():
                continue
            try:
                self.snapshots.append(Snapshot.from_json(json.loads(line, parse_constant=_not_json)))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise SourceUnavailable(f"line {number}: not a kvdash snapshot "
                                        f"({type(exc).__name__}: {exc})") from exc
        if not self.snapshots:
            raise SourceUnavailable("the file holds no snapshot (record one with kvdash record)")
        self.position = 0

    def read(self) -> Snapshot:
        snap = self.snapshots[min(self.position, len(self.snapshots) - 1)]
        if self.position >= len(self.snapshots) - 1:
            snap = Snapshot(time=snap.time, source=f"{self.name} (end, {len(self.snapshots)} snapshots)",
                            gpus=snap.gpus, driver=snap.driver, error=snap.error, extra=snap.extra)
        self.position += 1
        return snap

    def close(self) -> None:
        return None

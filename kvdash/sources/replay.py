"""Snapshots recorded by ``kvdash record`` (JSON lines), played back one per poll."""

from __future__ import annotations

import json
from pathlib import Path

from kvdash.sources.base import Snapshot, SourceUnavailable


class ReplaySource:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.name = f"replay {self.path.name}"
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise SourceUnavailable(f"the file cannot be read ({type(exc).__name__})") from exc
        self.snapshots: list[Snapshot] = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                self.snapshots.append(Snapshot.from_json(json.loads(line)))
            except (ValueError, KeyError, TypeError) as exc:
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

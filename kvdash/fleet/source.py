"""The fleet source: many hosts read from a Prometheus server, behind the same :class:`Source`
interface as NVML, the demo and a replay.

Each :meth:`FleetSource.read` sends the named queries of :mod:`kvdash.fleet.queries` together (one
total deadline for the reading: connect, headers, bodies, parse) and builds the fleet with
:func:`kvdash.fleet.build.build_fleet`; the fleet rides in ``Snapshot.extra["fleet"]``.  An
unreachable Prometheus or a query error is a snapshot with ``error`` set (the dashboard shows it in a
panel and keeps polling), never an exception.

It lives in the fleet layer, above the sources whose :class:`~kvdash.sources.base.Snapshot` it returns, because
it is built from the fleet's queries, client and analysis (issue 26: it was ``kvdash.sources.prometheus``, whose
imports ran up to ``kvdash.fleet`` and ``kvdash.live``).
"""

from __future__ import annotations

import time
from typing import Any

from kvdash.fleet import queries
from kvdash.fleet.build import build_fleet
from kvdash.fleet.client import PrometheusClient, PrometheusError, Series
from kvdash.live.analysis import LiveConfig
from kvdash.sources.base import Snapshot


class FleetSource:
    def __init__(self, url: str, config: LiveConfig, deadline_s: float = 2.0,
                 clock: Any = time.time) -> None:
        self.client = PrometheusClient(url, deadline_s)
        self.config = config
        self.clock = clock
        self.name = f"prometheus {self.client.url}"

    def fetch(self) -> dict[str, list[Series]]:
        """Every named fleet query; raises :class:`PrometheusError` on the first that fails."""
        return self.client.query_all(queries.FLEET)

    def read(self, config: LiveConfig | None = None) -> Snapshot:
        started = time.monotonic()
        now = self.clock()
        try:
            results = self.fetch()
        except PrometheusError as exc:
            return Snapshot(time=now, source=self.name, gpus=(), error=str(exc), extra={"fleet": None})
        cfg = config or self.config
        fleet = build_fleet(results, cfg)
        fleet["prometheus"] = self.client.url
        fleet["skipped_samples"] = dict(self.client.skipped)
        fleet["time"] = now
        fleet["poll_seconds"] = round(time.monotonic() - started, 4)
        # the raw series ride along so the dashboard can re-analyse when the model or length changes
        return Snapshot(time=now, source=self.name, gpus=(), extra={"fleet": fleet, "results": results,
                                                                        "config": cfg})

    def close(self) -> None:
        return None

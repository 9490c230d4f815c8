"""The exporter's state and its prometheus-client collector.

Readings refresh on background threads, never per scrape: one thread reads the GPUs (NVML or the
demo) and recomputes the analytical pool every ``interval`` seconds; each ``--engine`` has its own
thread, so a slow or hung engine only ages its own reading.  A scrape copies the last readings
under a lock and never waits for a source; every reading carries its age
(``kvdash_reading_age_seconds``, ``kvdash_engine_reading_age_seconds``).

Metric names follow Prometheus' naming conventions (https://prometheus.io/docs/practices/naming/):
a ``kvdash_`` prefix, base units in the name (``_bytes``, ``_seconds``, ``_ratio`` for 0-1), ``_total``
for counters, ``kvdash_info`` for static labels.  The README has a table of every metric.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from kvdash import __version__
from kvdash import defaults as D
from kvdash.errors import InputError
from kvdash.live.analysis import LiveConfig, analyze, compare_engine
from kvdash.sources.base import Snapshot, Source
from kvdash.sources.engine import EngineReading, fetch, from_snapshot

VLLM_MIRRORED = "0.33"  # the vLLM release whose memory rules kvdash mirrors (vLLM 0.33.0)

GPU_LABELS = ["hostname", "gpu", "uuid", "name"]


@dataclass
class EngineSlot:
    url: str
    reading: EngineReading | None = None
    at: float | None = None  # time.monotonic() of the last reading (good or failed)
    good: EngineReading | None = None  # the last reading without error
    good_at: float | None = None


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class ExporterState:
    """Last readings of the GPUs and engines, refreshed by background threads."""

    def __init__(self, source: Source, config: LiveConfig, engines: list[str], interval: float = 5.0,
                 engine_timeout: float = 2.0, hostname: str | None = None, demo: bool = False,
                 fetch_engine: Callable[[str, float], EngineReading] = fetch,
                 clock: Callable[[], float] = time.monotonic, log: Callable[[str], None] | None = None,
                 reserve_per_length: bool = False) -> None:
        # no --max-reserved: each length is analysed with its own contiguous reservation (the default one `kvdash
        # live --length N` takes), so a length's series do not change when another --length is added
        self.reserve_per_length = reserve_per_length
        self.log = log or _stderr  # a change of the GPU readings' state, one line (a daemon's log)
        self.source = source
        self.config = config
        self.interval = interval
        self.engine_timeout = engine_timeout
        self.hostname = hostname or socket.gethostname()
        self.demo = demo
        self.fetch_engine = fetch_engine
        self.clock = clock
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.snapshot: Snapshot | None = None
        self.snapshot_at: float | None = None
        self.analyses: dict[int, dict[str, Any]] = {}  # per length
        self.engines = [EngineSlot(url) for url in engines]
        self.refreshes = 0
        self.errors = 0
        self.last_error = ""
        self.threads: list[threading.Thread] = []

    # --- refreshing ------------------------------------------------------------------------------
    def refresh_gpus(self) -> None:
        """One GPU reading and the analytical pool for each configured length."""
        try:
            snap = self.source.read()
            analyses = {}
            for n in self.config.lengths:
                reserved = D.reservation(self.config.architecture().max_context, n) if self.reserve_per_length \
                    else self.config.max_reserved
                try:
                    analyses[n] = analyze(snap, replace(self.config, lengths=(n,), max_reserved=reserved),
                                          self._engine_for_budget(snap))
                except InputError as exc:
                    analyses[n] = {"ok": False, "notes": [str(exc)]}
        except Exception as exc:  # noqa: BLE001 - a failing source must not stop the exporter
            text = str(exc) or type(exc).__name__
            with self.lock:
                self.errors += 1
                said, self.last_error = self.last_error, text
            if text != said:  # said once per new error, not every interval (it said nothing: mamba's ZeroDivision)
                self.log(f"kvdash exporter: GPU reading failed: {text} (kvdash_refresh_errors_total counts them; "
                         "the last good figures stay published, kvdash_reading_age_seconds growing)")
            return
        if self.last_error:
            self.log("kvdash exporter: GPU readings resumed")
        with self.lock:
            self.last_error = ""
            self.snapshot, self.snapshot_at, self.analyses = snap, self.clock(), analyses
            self.refreshes += 1
            if self.demo:
                demo_engine = from_snapshot(snap.extra)
                if demo_engine is not None:
                    slot = self._demo_slot()
                    slot.reading = slot.good = demo_engine
                    slot.at = slot.good_at = self.snapshot_at

    def _demo_slot(self) -> EngineSlot:
        for slot in self.engines:
            if slot.url == "demo":
                return slot
        slot = EngineSlot("demo")
        self.engines.append(slot)
        return slot

    def _engine_for_budget(self, snap: Snapshot) -> EngineReading | None:
        if self.config.budget_mode != "engine":
            return None
        if self.demo:
            return from_snapshot(snap.extra)
        with self.lock:
            return next((s.good for s in self.engines if s.good is not None), None)

    def refresh_engine(self, slot: EngineSlot) -> None:
        reading = self.fetch_engine(slot.url, self.engine_timeout)
        with self.lock:
            slot.reading, slot.at = reading, self.clock()
            if not reading.error:
                slot.good, slot.good_at = reading, slot.at

    def _loop(self, step: Callable[[], None]) -> None:
        while not self.stop_event.is_set():
            started = time.monotonic()
            step()
            self.stop_event.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def start(self) -> None:
        self.refresh_gpus()  # the first scrape already has figures
        loops: list[tuple[str, Callable[[], None]]] = [("gpus", self.refresh_gpus)]
        loops += [(f"engine {s.url}", partial(self.refresh_engine, s)) for s in self.engines if s.url != "demo"]
        for name, step in loops:
            t = threading.Thread(target=self._loop, args=(step,), name=f"kvdash-exporter {name}", daemon=True)
            t.start()
            self.threads.append(t)

    def stop(self) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout=self.engine_timeout + 1)
        self.source.close()

    # --- exposition ---------------------------------------------------------------------------------
    def view(self) -> dict[str, Any]:
        """A consistent copy of the last readings (taken under the lock, so a scrape never waits on I/O)."""
        with self.lock:
            return {"snapshot": self.snapshot, "snapshot_at": self.snapshot_at, "analyses": dict(self.analyses),
                    "engines": [replace(s) for s in self.engines], "refreshes": self.refreshes,
                    "errors": self.errors}


def _set(family: GaugeMetricFamily, labels: list[str], value: float | int | None) -> None:
    if value is not None:
        family.add_metric(labels, float(value))


def reserve_label(cfg: Any, analyses: dict[int, Any] | None = None) -> str:
    """The reserve basis of the exporter's KV figures, in a few words (kvdash_info's ``reserve`` label and the start
    line): the analysis's wording once a GPU is read (published terms off an H100: extrapolated), else the
    configuration's."""
    from kvdash.live.analysis import reserve_short

    return (analyses or {}).get(cfg.lengths[0], {}).get("reserve_text") or reserve_short(cfg, cfg.reserve_basis)


class KvdashCollector(Collector):
    def __init__(self, state: ExporterState) -> None:
        self.state = state

    def describe(self) -> Iterator[Any]:
        return iter(())  # collect() needs the readings; an empty describe keeps registration cheap

    def collect(self) -> Iterator[Any]:
        st = self.state
        v = st.view()
        now = st.clock()
        cfg = st.config
        arch = cfg.architecture()
        host = st.hostname
        reserve = reserve_label(cfg, v["analyses"])
        info = InfoMetricFamily("kvdash", f"kvdash build and the configuration its KV figures are for; {reserve}.")
        info.add_metric([], {"version": __version__, "model": arch.name, "kv_dtype": cfg.kv_dtype,
                             "block_size": str(cfg.block_size), "tp": str(cfg.tp), "budget_mode": cfg.budget_mode,
                             "vllm_version": VLLM_MIRRORED, "hostname": host, "reserve": reserve,
                             "reserve_bytes": str(cfg.reserve)})
        yield info
        yield CounterMetricFamily("kvdash_refreshes", "GPU readings taken by the background refresh.",
                                  value=v["refreshes"])
        yield CounterMetricFamily("kvdash_refresh_errors", "GPU readings that failed.", value=v["errors"])
        snap: Snapshot | None = v["snapshot"]
        if snap is None:
            return
        age = GaugeMetricFamily("kvdash_reading_age_seconds", "Seconds since the last GPU reading.")
        age.add_metric([], now - (v["snapshot_at"] or now))
        yield age
        fams = {k: GaugeMetricFamily(f"kvdash_gpu_memory_{k}_bytes", doc, labels=GPU_LABELS) for k, doc in (
            ("total", "GPU memory, NVML total."), ("used", "GPU memory in use, NVML used."),
            ("free", "GPU memory free, NVML free."),
            ("reserved", "GPU memory the driver reserves (NVML memory v2; absent where the driver lacks it)."))}
        procs = GaugeMetricFamily("kvdash_gpu_process_memory_bytes", "GPU memory of one process (NVML).",
                                  labels=["hostname", "gpu", "uuid", "pid", "process"])
        for g in snap.gpus:
            labels = [host, str(g.index), g.uuid, g.name]
            _set(fams["total"], labels, g.total_bytes)
            _set(fams["used"], labels, g.used_bytes)
            _set(fams["free"], labels, g.free_bytes)
            _set(fams["reserved"], labels, g.reserved_bytes)
            for p in g.processes:
                _set(procs, [host, str(g.index), g.uuid, str(p.pid), p.name[:80]], p.used_bytes)
        yield from fams.values()
        yield procs
        yield from self._kv(v, snap, host)
        yield from self._engines(v, now)

    def _kv(self, v: dict[str, Any], snap: Snapshot, host: str) -> Iterator[Any]:
        analyses: dict[int, dict[str, Any]] = v["analyses"]
        ok = GaugeMetricFamily("kvdash_kv_analysis_ok", "1 when the analytical pool could be computed, else 0.")
        first = analyses.get(self.state.config.lengths[0], {})
        ok.add_metric([], 1.0 if first.get("ok") else 0.0)
        yield ok
        if not first.get("ok"):
            return
        kv = first
        for name, key, doc in (
                ("kvdash_kv_budget_bytes", "budget_bytes", "KV budget of the tightest rank (bytes)."),
                ("kvdash_kv_pool_blocks", "pool_blocks", "Analytical KV pool, blocks per rank."),
                ("kvdash_kv_pool_token_slots", "token_slots", "Analytical KV pool, token slots."),
                ("kvdash_kv_block_bytes", "block_bytes", "Bytes of one KV block on one rank."),
                ("kvdash_kv_bytes_per_token", "bytes_per_token", "KV bytes of one token on one rank.")):
            fam = GaugeMetricFamily(name, doc)
            fam.add_metric([], float(kv[key]))
            yield fam
        fit = GaugeMetricFamily("kvdash_kv_requests_fit", "Requests of one length that fit in the analytical pool.",
                                labels=["length", "layout"])
        reserved = GaugeMetricFamily("kvdash_kv_contiguous_reserved_tokens", "Tokens a contiguous request of one "
                                     "length reserves (the contiguous layout's figure).", labels=["length"])
        for n, a in sorted(analyses.items()):
            if a.get("ok"):
                fit.add_metric([str(n), "paged"], float(a["paged_requests"]))
                fit.add_metric([str(n), "contiguous"], float(a["contiguous_requests"]))
                reserved.add_metric([str(n)], float(a["max_reserved"]))
        yield fit
        yield reserved
        weights = GaugeMetricFamily("kvdash_gpu_weights_bytes", "Analytical weight shard on each rank's GPU.",
                                    labels=["hostname", "gpu", "uuid"])
        pool = GaugeMetricFamily("kvdash_gpu_kv_pool_bytes",
                                 "Analytical KV pool on each rank's GPU (the tightest rank's, as engines size it).",
                                 labels=["hostname", "gpu", "uuid"])
        rank_gpus = [r["gpu"] for r in kv["ranks"] if r["gpu"] >= 0] or \
            [g.index for g in snap.gpus if not g.lost and g.total_bytes][: self.state.config.tp]
        for g in snap.gpus:
            if g.index in rank_gpus:
                weights.add_metric([host, str(g.index), g.uuid], float(kv["weights_per_rank_bytes"]))
                pool.add_metric([host, str(g.index), g.uuid], float(kv["pool_blocks"] * kv["block_bytes"]))
        yield weights
        yield pool

    def _engines(self, v: dict[str, Any], now: float) -> Iterator[Any]:
        """Each engine's figures, one series per pool (label ``rank``: a vLLM engine, an SGLang DP rank),
        read by the rules of :func:`kvdash.sources.engine.reading_from_samples`; ``hostname`` and
        ``model_name`` on every series, so the fleet and Grafana can filter and compare."""
        kv = v["analyses"].get(self.state.config.lengths[0], {})
        host = self.state.hostname
        lab = ["engine", "hostname", "model_name"]
        rlab = lab + ["rank"]
        up = GaugeMetricFamily("kvdash_engine_up", "1 when the last read of the engine's /metrics worked.", labels=lab)
        age = GaugeMetricFamily("kvdash_engine_reading_age_seconds",
                                "Seconds since the last good reading of the engine.", labels=lab)
        bs = GaugeMetricFamily("kvdash_engine_block_size_tokens",
                               "The engine's block size (vLLM) or page size (SGLang), tokens.", labels=lab)
        tokens = GaugeMetricFamily("kvdash_engine_kv_pool_tokens", "One pool of the engine, tokens (a vLLM engine, "
                                   "an SGLang DP rank; never summed over ranks).", labels=rlab)
        blocks = GaugeMetricFamily("kvdash_engine_kv_pool_blocks", "One pool of the engine, blocks.", labels=rlab)
        used = GaugeMetricFamily("kvdash_engine_kv_used_tokens", "Tokens in use in one pool.", labels=rlab)
        usage = GaugeMetricFamily("kvdash_engine_kv_usage_ratio", "One pool's KV usage, 0 to 1.", labels=rlab)
        running = GaugeMetricFamily("kvdash_engine_requests_running", "Requests one pool is running (totals only).",
                                    labels=rlab)
        waiting = GaugeMetricFamily("kvdash_engine_requests_waiting", "Requests waiting for one pool (totals only).",
                                    labels=rlab)
        evictable = GaugeMetricFamily("kvdash_engine_kv_evictable_tokens",
                                      "SGLang: cached tokens that can be evicted, one pool.", labels=rlab)
        kind_usage = GaugeMetricFamily("kvdash_engine_kv_usage_by_kind_ratio",
                                       "SGLang hybrids: usage of the full / swa / mamba pool.", labels=rlab + ["kind"])
        asleep = GaugeMetricFamily("kvdash_engine_sleeping", "vLLM: 1 when the engine sleeps (engine_sleep_state).",
                                   labels=rlab + ["level"])
        queries = CounterMetricFamily("kvdash_engine_prefix_cache_queries", "Prefix-cache queries, tokens (vLLM; "
                                      "SGLang: prefill tokens of every mode).", labels=lab)
        hits = CounterMetricFamily("kvdash_engine_prefix_cache_hits", "Prefix-cache hits, tokens (vLLM; SGLang: "
                                   "device, host and storage hits).", labels=lab)
        ext_q = CounterMetricFamily("kvdash_engine_external_prefix_cache_queries",
                                    "KV-connector prefix-cache queries, tokens (vLLM).", labels=lab)
        ext_h = CounterMetricFamily("kvdash_engine_external_prefix_cache_hits",
                                    "KV-connector prefix-cache hits, tokens (vLLM).", labels=lab)
        preempt = CounterMetricFamily("kvdash_engine_preemptions", "Preemptions (vLLM) or retractions (SGLang).",
                                      labels=lab)
        hit_ratio = GaugeMetricFamily("kvdash_engine_prefix_cache_hit_ratio",
                                      "Prefix-cache hit rate since start, 0 to 1 (SGLang: the worst rank's gauge).",
                                      labels=lab)
        by_reason = GaugeMetricFamily("kvdash_engine_requests_waiting_by_reason",
                                      "vLLM: waiting requests by reason (capacity, deferred).", labels=lab + ["reason"])
        offload = GaugeMetricFamily("kvdash_engine_offload_tokens", "The offload tier (SGLang HiCache host pool), "
                                    "tokens.", labels=lab + ["what"])
        offload_size = GaugeMetricFamily("kvdash_engine_offload_size_bytes",
                                         "vLLM native KV offloading: --kv-offloading-size (GiB x 2^30).", labels=lab)
        off_lab = lab + ["tier"]
        off_bytes = CounterMetricFamily("kvdash_engine_offload_transfer_bytes",
                                        "The offload tier's transfers, bytes: direction load (tier to GPU) or store "
                                        "(GPU to tier); every rank's shard summed.", labels=off_lab + ["direction"])
        off_seconds = CounterMetricFamily("kvdash_engine_offload_transfer_seconds",
                                          "Time the offload tier's transfers took, seconds (vLLM: summed over "
                                          "engines; SGLang, LMCache: the busiest rank's).",
                                          labels=off_lab + ["direction"])
        off_xfer_tokens = CounterMetricFamily("kvdash_engine_offload_transfer_tokens",
                                              "Tokens the offload tier loaded or stored (SGLang HiCache, LMCache).",
                                              labels=off_lab + ["direction"])
        off_hits = CounterMetricFamily("kvdash_engine_offload_hit_tokens",
                                       "Prompt tokens found in the offload tier (vLLM: KV-connector hits; SGLang: "
                                       "prefill host_hit; LMCache: lookup hits).", labels=off_lab)
        off_queries = CounterMetricFamily("kvdash_engine_offload_query_tokens",
                                          "Prompt tokens looked up in the offload tier (same sources).", labels=off_lab)
        off_capacity = GaugeMetricFamily("kvdash_engine_offload_capacity",
                                         "The offload tier's size as the engine states it: unit chunks, bytes or "
                                         "tokens (vLLM kv_offload_config_info); LMCache: bytes used.",
                                         labels=off_lab + ["unit"])
        diff = GaugeMetricFamily("kvdash_engine_pool_difference_tokens",
                                 "The engine's pool minus kvdash's analytical pool, tokens.", labels=lab)
        for slot in v["engines"]:
            good = slot.good
            model = (good.served_model if good else "")[:200]
            labels = [slot.url, host, model]
            last = slot.reading
            up.add_metric(labels, 1.0 if last is not None and not last.error else 0.0)
            if good is None:
                continue
            age.add_metric(labels, now - (slot.good_at or now))
            _set(bs, labels, good.block_size)
            for pool in good.pools():
                r = labels + [pool.rank]
                _set(tokens, r, pool.total_tokens)
                _set(blocks, r, pool.num_gpu_blocks)
                _set(used, r, pool.used_tokens)
                _set(usage, r, pool.kv_usage)
                _set(running, r, pool.running)
                _set(waiting, r, pool.waiting)
                _set(evictable, r, pool.evictable_tokens)
                for kind, value in pool.usage_by_kind.items():
                    kind_usage.add_metric(r + [kind], value)
                if pool.sleep:
                    asleep.add_metric(r + [pool.sleep], 0.0 if pool.sleep == "awake" else 1.0)
            for fam, value in ((queries, good.prefix_queries), (hits, good.prefix_hits),
                               (ext_q, good.external_queries), (ext_h, good.external_hits),
                               (preempt, good.preemptions)):
                if value is not None:
                    fam.add_metric(labels, float(value))
            _set(hit_ratio, labels, good.prefix_hit_rate)
            for reason, n in sorted(good.waiting_by_reason.items()):
                by_reason.add_metric(labels + [reason], float(n))
            for what in ("host_total_tokens", "host_used_tokens"):
                if isinstance(good.offload.get(what), int):
                    offload.add_metric(labels + [what.removesuffix("_tokens")], float(good.offload[what]))
            _offload_series(good.offload, labels, off_bytes, off_seconds, off_xfer_tokens, off_hits, off_queries,
                            off_capacity)
            size = good.offload.get("size_gib")
            if size is not None:
                try:
                    offload_size.add_metric(labels, float(size) * 2**30)
                except ValueError:
                    pass
            if kv.get("ok"):
                # the served model against kvdash's (a different one: no difference published, as live compares none)
                _set(diff, labels, compare_engine(good, kv, str(kv.get("model", "")), self.state.config.model)
                     .get("difference_tokens"))
        yield from (up, age, bs, tokens, blocks, used, usage, running, waiting, evictable, kind_usage, asleep,
                    queries, hits, ext_q, ext_h, preempt, hit_ratio, by_reason, offload, offload_size, off_bytes,
                    off_seconds, off_xfer_tokens, off_hits, off_queries, off_capacity, diff)


def _offload_series(off: dict[str, Any], labels: list[str], nbytes: Any, seconds: Any, tokens: Any, hits: Any,
                    queries: Any, capacity: Any) -> None:
    """One engine's offload tier (:func:`kvdash.sources.engine._vllm_offload`, ``_sglang_hicache``, ``_lmcache``)
    as the exporter's ``kvdash_engine_offload_*`` series; a figure the engine does not publish is left out."""
    if not off:
        return
    tier = str(off.get("tier", "offload"))[:80]
    t = labels + [tier]

    def num(key: str) -> float | None:
        v = off.get(key)
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

    for direction, b, sec, tok in (("load", "loaded_bytes", "load_seconds", "loaded_tokens"),
                                   ("store", "stored_bytes", "store_seconds", "stored_tokens")):
        for fam, key in ((nbytes, b), (seconds, sec), (tokens, tok)):
            if (v := num(key)) is not None:
                fam.add_metric(t + [direction], v)
    if (v := num("hit_tokens")) is not None and (q := num("query_tokens")) is not None:
        hits.add_metric(t, v)
        queries.add_metric(t, q)
    for unit, key in (("chunks", "chunks"), ("bytes", "size_bytes"), ("tokens", "size_tokens"),
                      ("used_bytes", "used_bytes")):
        if (v := num(key)) is not None:
            capacity.add_metric(t + [unit], v)

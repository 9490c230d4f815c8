"""A running engine's own view, from its Prometheus ``/metrics``: vLLM (current and older metric
names) and SGLang (one pool per data-parallel rank).

One scrape has one total deadline (connect + request + every byte of the body + parse), enforced by
``asyncio.wait_for`` around an asyncio HTTP/1.0 GET: a server that drips bytes or never answers
costs at most the deadline.  The body is parsed with prometheus-client's
``text_string_to_metric_families``.  Every figure is validated (finite, in range, a whole number
where it counts things); a bad figure becomes ``None`` with its reason in ``invalid``, never the
reading.  A slow, down or garbled endpoint gives a reading with ``error`` set, never an exception.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from kvdash.errors import HIDDEN, visible

MAX_BYTES = 4 * 2**20  # the largest /metrics body read; vLLM's is about 100 KiB
MAX_HEADER_BYTES = 64 * 2**10
DEFAULT_TIMEOUT_S = 2.0
MAX_COUNT = 2**53  # counts above this are not exact in a float: not a real reading
MAX_SERIES = 20_000  # vllm:/sglang: samples read from one page; a real page has tens to a few hundred
MAX_RANKS = 1024  # SGLang data-parallel ranks (dp_rank values) on one page
ENGINE_PREFIXES = ("vllm:", "sglang:", "lmcache:")  # the families kvdash reads


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class RankReading:
    """One pool of a server: a vLLM engine (one ``engine`` label: a DP rank) or an SGLang DP rank.

    Each has its own KV pool; a server's pools are never summed into one or averaged."""

    rank: str  # vLLM: the engine label; SGLang: the dp_rank label ("0" without DP)
    total_tokens: int | None = None
    used_tokens: int | None = None
    kv_usage: float | None = None
    running: int | None = None
    waiting: int | None = None
    num_gpu_blocks: int | None = None  # vLLM: kv_cache_size_tokens // block_size; SGLang: pool // page size
    evictable_tokens: int | None = None  # SGLang: radix-cached KV that can be evicted
    usage_by_kind: dict[str, float] = field(default_factory=dict)  # SGLang hybrids: full / swa / mamba
    sleep: str = ""  # vLLM: awake, weights_offloaded (level 1), discard_all (level 2)


@dataclass(frozen=True)
class EngineReading:
    url: str
    kind: str = ""  # "vllm", "sglang"
    kv_usage: float | None = None  # 0-1: the worst pool's (never a mean over pools)
    running: int | None = None  # summed over the pools (each request runs in one)
    waiting: int | None = None
    preemptions: int | None = None  # vLLM preemptions; SGLang retractions (its name for the same event)
    prefix_hit_rate: float | None = None  # 0-1, lifetime (vLLM: hits / queries over engines; SGLang: worst rank)
    num_gpu_blocks: int | None = None  # of the pool below (its own, never the DP sum)
    block_size: int | None = None  # vLLM block size; SGLang page size (sglang:page_size)
    total_tokens: int | None = None  # the smallest pool's tokens (one engine / DP rank)
    used_tokens: int | None = None  # used tokens of that pool
    cache_dtype: str = ""
    gpu_memory_utilization: str = ""
    served_model: str = ""  # the model_name label of its metrics
    ranks: tuple[RankReading, ...] = ()  # every pool (one per vLLM engine / SGLang DP rank)
    invalid: dict[str, str] = field(default_factory=dict)  # field -> why it reads n/a
    error: str = ""
    elapsed_s: float | None = None  # how long the scrape took
    # counters for windowed rates (:func:`windowed`), summed over engines
    prefix_queries: int | None = None
    prefix_hits: int | None = None
    external_queries: int | None = None  # vLLM KV-connector (external) prefix cache
    external_hits: int | None = None
    waiting_by_reason: dict[str, int] = field(default_factory=dict)  # vLLM: capacity, deferred
    evictable_tokens: int | None = None  # SGLang, summed over DP ranks
    offload: dict[str, Any] = field(default_factory=dict)  # the offload tier (vLLM native, SGLang HiCache)
    notes: tuple[str, ...] = ()  # how the page was read (e.g. the front end's summed num_gpu_blocks)
    sleep: str = ""  # vLLM engine_sleep_state: awake, weights_offloaded, discard_all (each engine's, joined)

    def pools(self) -> tuple[RankReading, ...]:
        """Every pool of this server: its ranks, or the one pool the top-level figures describe."""
        if self.ranks:
            return self.ranks
        return (RankReading(rank="0", total_tokens=self.total_tokens, used_tokens=self.used_tokens,
                            kv_usage=self.kv_usage, running=self.running, waiting=self.waiting,
                            num_gpu_blocks=self.num_gpu_blocks, evictable_tokens=self.evictable_tokens),)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class _Checker:
    """Validates figures one by one, collecting the reason each bad one is dropped."""

    def __init__(self) -> None:
        self.invalid: dict[str, str] = {}

    def fraction(self, name: str, value: float | None) -> float | None:
        """A share 0-1 (vLLM's kv_cache_usage_perc is a fraction despite its name)."""
        if value is None:
            return None
        if not math.isfinite(value):
            self.invalid[name] = f"{value} is not a finite number"
            return None
        if not 0.0 <= value <= 1.0:
            self.invalid[name] = f"{value:g} is outside 0 to 1"
            return None
        return value

    def count(self, name: str, value: float | str | None, low: int = 0) -> int | None:
        """A count: a whole number from ``low`` up to 2^53."""
        if value is None:
            return None
        if isinstance(value, str):
            text = value
            try:
                value = float(text)
            except ValueError:
                self.invalid[name] = f"{text[:20]!r} is not a number"
                return None
        if not math.isfinite(value):
            self.invalid[name] = f"{value} is not a finite number"
            return None
        if value != int(value):
            self.invalid[name] = f"{value:g} is not a whole number"
            return None
        if not low <= value <= MAX_COUNT:
            self.invalid[name] = f"{value:g} is outside {low} to 2^53"
            return None
        return int(value)


def _unread(line: str) -> bool:
    """Lines kvdash never reads: HELP text and histogram buckets, which are most of a vLLM page (on a
    66 kB page with 16 histograms, parsing drops from about 15 ms to about 1.2 ms)."""
    if line.startswith("# HELP"):
        return True
    cut = line.find("{")
    name = line[: cut if cut >= 0 else line.find(" ")]
    return name.endswith("_bucket")


class TooManySeries(ValueError):
    """A page with more engine series than :data:`MAX_SERIES`."""


def parse_prometheus(text: str, deadline: float | None = None, max_series: int = MAX_SERIES) -> list[Sample]:
    """Samples of the Prometheus text format (prometheus-client's parser); ValueError when malformed.
    HELP lines and histogram buckets are skipped before parsing (kvdash reads neither).

    ``deadline`` (``time.monotonic()``): parsing stops with TimeoutError once it passes (checked every 256
    samples), so a scrape's deadline covers its parse too; more than ``max_series`` vllm:/sglang: samples is
    :class:`TooManySeries` (a ValueError), so no page costs more than a bounded amount of work."""
    from prometheus_client.parser import text_string_to_metric_families

    if "_bucket" in text or "# HELP" in text:
        text = "\n".join(line for line in text.split("\n") if not _unread(line))
    out: list[Sample] = []
    wanted = 0
    seen = 0
    clock = time.monotonic
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                seen += 1
                if deadline is not None and not seen & 255 and clock() > deadline:
                    raise TimeoutError
                if s.name.startswith(ENGINE_PREFIXES):
                    wanted += 1
                    if wanted > max_series:
                        raise TooManySeries(f"more than {max_series:,} vLLM/SGLang series on one page")
                labels = dict(s.labels)
                if any(HIDDEN.search(v) for v in labels.values()):  # shown as escapes, never raw
                    labels = {k: visible(v) for k, v in labels.items()}
                out.append(Sample(s.name, labels, float(s.value)))
    except TooManySeries:
        raise
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise ValueError(str(exc)[:80] or type(exc).__name__) from exc
    if deadline is not None and clock() > deadline:
        raise TimeoutError
    return out


def _values(samples: list[Sample], *names: str) -> tuple[str, list[Sample]]:
    for name in names:
        found = [s for s in samples if s.name == name]
        if found:
            return name, found
    return names[0], []


def _wanted(samples: list[Sample]) -> list[Sample]:
    """Only the engine families kvdash reads (vllm:*, sglang:*, lmcache:*), so the lookups stay short."""
    return [s for s in samples if s.name.startswith(ENGINE_PREFIXES)]


def _finite(check: _Checker, label: str, samples: list[Sample], *names: str) -> list[float] | None:
    """The values of the first family present, one per label set (engines, ranks); None when absent, or
    when any is non-finite (the reason kept under ``label``)."""
    _, found = _values(samples, *names)
    if not found:
        return None
    bad = [s.value for s in found if not math.isfinite(s.value)]
    if bad:
        check.invalid[label] = f"{bad[0]} is not a finite number"
        return None
    return [s.value for s in found]


def _sum(check: _Checker, label: str, samples: list[Sample], *names: str) -> float | None:
    """The sum over label sets; any non-finite part spoils the sum."""
    values = _finite(check, label, samples, *names)
    return None if values is None else sum(values)


def _mean(check: _Checker, label: str, samples: list[Sample], *names: str) -> float | None:
    """The mean over label sets; any non-finite part spoils it."""
    values = _finite(check, label, samples, *names)
    return None if values is None else sum(values) / len(values)


def _served_model(samples: list[Sample]) -> str:
    names = sorted({s.labels["model_name"] for s in samples if s.labels.get("model_name")})
    return " + ".join(names)


def _rank_key(s: Sample) -> tuple[int, int, str]:
    """SGLang: the lowest pipeline stage, then the lowest TP rank (one scheduler's copy of a figure)."""
    def num(label: str) -> int:
        v = s.labels.get(label, "0")
        return int(v) if v.isdigit() else 0
    return (num("pp_rank"), num("tp_rank"), s.labels.get("moe_ep_rank", ""))


def _totals_only(samples: list[Sample]) -> list[Sample]:
    """SGLang with priority scheduling writes each queue's total under ``priority=""`` and again per
    priority (``_log_gauge_queue_count``): only the total counts."""
    return [s for s in samples if s.labels.get("priority", "") == ""]


def _one(check: _Checker, label: str, samples: list[Sample], *names: str) -> float | None:
    """One scheduler's value of the first family present: SGLang writes the same figure from every TP
    rank and PP stage (constants) or from each PP stage's attention-TP rank 0 (stats); kvdash takes the
    lowest PP stage's lowest TP rank.  Non-finite: None, the reason under ``label``."""
    _, found = _values(_totals_only(samples), *names)
    if not found:
        return None
    s = min(found, key=_rank_key)
    if not math.isfinite(s.value):
        check.invalid[label] = f"{s.value} is not a finite number"
        return None
    return s.value


def _smallest(check: _Checker, label: str, samples: list[Sample], *names: str) -> float | None:
    """The smallest value over TP/PP ranks (a pool constant: the tightest rank's, as SGLang sizes it)."""
    values = _finite(check, label, _totals_only(samples), *names)
    return None if values is None else min(values)


def _by(samples: list[Sample], label: str) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {}
    for s in samples:
        out.setdefault(s.labels.get(label, ""), []).append(s)
    return out


def _order(key: str) -> tuple[int, str]:
    return (len(key), key)


def _sum_of(vals: list[int | None]) -> int | None:
    """The sum over pools, or None (n/a) when one is unknown or the sum leaves the exact range (each sample is
    checked against :data:`MAX_COUNT` where it enters; a sum of many such samples can still pass it)."""
    if not vals or any(v is None for v in vals):
        return None
    total = sum(v for v in vals if v is not None)
    return total if total <= MAX_COUNT else None


def _worst(vals: list[float | None]) -> float | None:
    known = [v for v in vals if v is not None]
    return max(known) if known else None


def tightest(pools: list[RankReading]) -> RankReading | None:
    """The pool a server's top-level figures describe: the smallest (the one compared with kvdash's), of
    equal ones the fullest, so its used blocks and the server's (worst) usage speak of one pool."""
    known = [p for p in pools if p.total_tokens is not None]
    return min(known, key=lambda p: (p.total_tokens or 0, -(p.kv_usage or 0.0)), default=None)


def reading_from_samples(url: str, samples: list[Sample]) -> EngineReading:
    samples = _wanted(samples)
    names = {s.name for s in samples}
    check = _Checker()
    lmc = [s for s in samples if s.name.startswith("lmcache:")]
    if any(n.startswith("vllm:") for n in names):
        reading = _vllm(url, [s for s in samples if not s.name.startswith("lmcache:")], check)
    elif any(n.startswith("sglang:") for n in names):
        reading = _sglang(url, [s for s in samples if not s.name.startswith("lmcache:")], check)
    elif lmc:  # LMCache's own families only: the tier, no pool
        reading = EngineReading(url=url, kind="lmcache", served_model=_served_model(lmc)[:200])
    else:
        return EngineReading(url=url, error="no vLLM, SGLang or LMCache metrics at this address")
    if lmc:
        reading = replace(reading, offload={**reading.offload, **_lmcache(check, lmc)}, invalid=check.invalid)
    return reading


def _lmcache(check: _Checker, samples: list[Sample]) -> dict[str, Any]:
    """LMCache 0.5.6's tier (``lmcache/observability.py``, ``PrometheusLogger``; one LMCache engine per vLLM
    worker, label ``worker_id``): every worker counts the same request's tokens, so tokens are one worker's
    (the lowest ``worker_id``); bytes held (``local_cache_usage``, each worker its shard) are summed; seconds
    are the busiest worker's (``time_to_retrieve``/``time_to_store`` sums).  Hit rates from the counters
    (lifetime; the ``*_hit_rate`` gauges cover only LMCache's last logging interval): the tier's hit rate is
    the lookup's, ``num_lookup_hits`` / ``num_lookup_tokens`` (the prompt tokens LMCache found); the retrieve
    rate, ``num_hit_tokens`` / ``num_requested_tokens``, is what it could load of what it was asked for."""
    workers = _by(samples, "worker_id")
    low = min(workers, key=lambda w: (0, int(w)) if w.isdigit() else (1, 0))
    mine = workers[low]
    out: dict[str, Any] = {"tier": "LMCache", "lmcache_workers": len(workers)}
    for key, name in (("loaded_tokens", "lmcache:num_hit_tokens_total"),
                      ("requested_tokens", "lmcache:num_requested_tokens_total"),
                      ("hit_tokens", "lmcache:num_lookup_hits_total"),
                      ("query_tokens", "lmcache:num_lookup_tokens_total"),
                      ("stored_tokens", "lmcache:num_stored_tokens_total")):
        v = _sum(check, f"lmcache {key}", mine, name)
        if v is not None:
            out[key] = check.count(f"lmcache {key}", v)
    used = _sum(check, "lmcache local_cache_bytes", samples, "lmcache:local_cache_usage")
    if used is not None:
        out["used_bytes"] = check.count("lmcache local_cache_bytes", used)
    for key, name in (("load_seconds", "lmcache:time_to_retrieve_sum"), ("store_seconds", "lmcache:time_to_store_sum")):
        vals = _finite(check, f"lmcache {key}", samples, name)
        if vals:
            out[key] = max(vals)
    if out.get("query_tokens"):
        out["hit_rate"] = check.fraction("lmcache hit_rate", (out.get("hit_tokens") or 0) / out["query_tokens"])
    if out.get("requested_tokens"):
        out["retrieve_hit_rate"] = check.fraction("lmcache retrieve_hit_rate",
                                                  (out.get("loaded_tokens") or 0) / out["requested_tokens"])
    return out


SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")


def _vllm(url: str, samples: list[Sample], check: _Checker) -> EngineReading:
    """vLLM: one front end serves one or more engines (DP ranks), each its own pool, told apart by the
    ``engine`` label.  ``cache_config_info`` is written once per engine; its ``num_gpu_blocks`` is the
    front end's SUM over its engines (``MPClient._apply_ready_response``, vllm/v1/engine/core_client.py),
    its ``kv_cache_size_tokens`` the engine's own pool in tokens, kept per engine."""
    infos = {s.labels.get("engine", ""): s.labels for s in samples if s.name == "vllm:cache_config_info"}
    engines = sorted({s.labels.get("engine", "") for s in samples if s.name in (
        "vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
        "vllm:cache_config_info")}, key=_order) or [""]
    by_engine = _by(samples, "engine")
    notes: list[str] = []
    units: list[RankReading] = []
    first = infos.get(engines[0], next(iter(infos.values()), {}))
    block_size = check.count("block_size", first.get("block_size"), low=1) if first.get("block_size") not in (
        None, "", "None") else None
    for eng in engines:
        info = infos.get(eng, first)
        mine = by_engine.get(eng, []) if len(engines) > 1 else samples
        tag = f"engine {eng} " if len(engines) > 1 else ""
        tokens = check.count(f"{tag}total_tokens", info.get("kv_cache_size_tokens")) \
            if info.get("kv_cache_size_tokens") not in (None, "", "None") else None
        blocks_label = check.count(f"{tag}num_gpu_blocks", info.get("num_gpu_blocks")) \
            if info.get("num_gpu_blocks") not in (None, "", "None") else None
        if tokens is not None:
            blocks = tokens // block_size if block_size else None
        elif len(engines) == 1 and blocks_label is not None:  # an older vLLM: one engine, its own blocks
            blocks = blocks_label
            tokens = blocks * block_size if block_size else None
        else:
            blocks = None
        usage = check.fraction(f"{tag}kv_usage", _mean(check, f"{tag}kv_usage", mine, "vllm:kv_cache_usage_perc",
                                                        "vllm:gpu_cache_usage_perc"))
        sleep = ""
        states = {s.labels.get("sleep_state", ""): s.value for s in mine if s.name == "vllm:engine_sleep_state"}
        if states:
            sleep = next((k for k in ("discard_all", "weights_offloaded") if states.get(k) == 1), "") or \
                ("awake" if states.get("awake") == 1 else "sleeping")
        units.append(RankReading(
            rank=eng or "0", total_tokens=tokens, num_gpu_blocks=blocks, kv_usage=usage,
            used_tokens=None if usage is None or tokens is None else int(usage * tokens),
            running=check.count(f"{tag}running", _sum(check, f"{tag}running", mine, "vllm:num_requests_running")),
            waiting=check.count(f"{tag}waiting", _sum(check, f"{tag}waiting", mine, "vllm:num_requests_waiting")),
            sleep=sleep))
    if len(engines) > 1 and first.get("num_gpu_blocks") not in (None, "", "None"):
        notes.append(f"cache_config_info's num_gpu_blocks ({first.get('num_gpu_blocks')}) is the front end's sum "
                     f"over its {len(engines)} engines; each engine's pool is its kv_cache_size_tokens")
    hits = _sum(check, "prefix_hit_rate", samples, "vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
    queries = _sum(check, "prefix_hit_rate", samples, "vllm:prefix_cache_queries_total",
                   "vllm:gpu_prefix_cache_queries_total")
    if hits is not None and queries:
        hit_rate = check.fraction("prefix_hit_rate", hits / queries)
    else:
        hit_rate = check.fraction("prefix_hit_rate", _mean(check, "prefix_hit_rate", samples,
                                                           "vllm:gpu_prefix_cache_hit_rate"))
    reasons: dict[str, int] = {}
    for s in samples:
        if s.name == "vllm:num_requests_waiting_by_reason" and math.isfinite(s.value):
            reasons[s.labels.get("reason", "")] = reasons.get(s.labels.get("reason", ""), 0) + int(s.value)
    tight = tightest(units)
    ext_q = _sum(check, "external_queries", samples, "vllm:external_prefix_cache_queries_total")
    ext_h = _sum(check, "external_hits", samples, "vllm:external_prefix_cache_hits_total")
    offload = _vllm_offload(check, samples, first, ext_q, ext_h)
    return EngineReading(
        url=url, kind="vllm", kv_usage=_worst([u.kv_usage for u in units]),
        running=_sum_of([u.running for u in units]), waiting=_sum_of([u.waiting for u in units]),
        preemptions=check.count("preemptions", _sum(check, "preemptions", samples, "vllm:num_preemptions_total",
                                                    "vllm:num_preemptions")),
        prefix_hit_rate=hit_rate, num_gpu_blocks=tight.num_gpu_blocks if tight else None, block_size=block_size,
        total_tokens=tight.total_tokens if tight else None, used_tokens=tight.used_tokens if tight else None,
        cache_dtype=first.get("cache_dtype", "")[:40],
        gpu_memory_utilization=first.get("gpu_memory_utilization", "")[:40],
        served_model=_served_model(samples)[:200], ranks=tuple(units),
        invalid=check.invalid, prefix_queries=check.count("prefix_queries", queries),
        prefix_hits=check.count("prefix_hits", hits), external_queries=check.count("external_queries", ext_q),
        external_hits=check.count("external_hits", ext_h), waiting_by_reason=reasons, offload=offload,
        notes=tuple(notes), sleep=" / ".join(dict.fromkeys(u.sleep for u in units if u.sleep)),
    )


_VLLM_TIER_INFO = (("chunks", "cpu_num_chunks"), ("blocks_per_chunk", "cpu_blocks_per_chunk"),
                   ("size_bytes", "cpu_kv_cache_size_bytes"), ("size_tokens", "cpu_kv_cache_size_tokens"))
# the offloading connector's transfer counters (``offloading/metrics.py``), then the deprecated names with a
# ``transfer_type`` label that vLLM 0.33 still writes beside them for the CPU tier
_VLLM_TRANSFERS = (("loaded_bytes", "vllm:kv_offload_load_bytes_total", "vllm:kv_offload_total_bytes_total",
                    "CPU_to_GPU"),
                   ("stored_bytes", "vllm:kv_offload_store_bytes_total", "vllm:kv_offload_total_bytes_total",
                    "GPU_to_CPU"),
                   ("load_seconds", "vllm:kv_offload_load_time_total", "vllm:kv_offload_total_time_total",
                    "CPU_to_GPU"),
                   ("store_seconds", "vllm:kv_offload_store_time_total", "vllm:kv_offload_total_time_total",
                    "GPU_to_CPU"))


def _vllm_offload(check: _Checker, samples: list[Sample], first: dict[str, str], ext_q: float | None,
                  ext_h: float | None) -> dict[str, Any]:
    """vLLM's offload tier: its size (``cache_config_info``'s ``kv_offloading_size``, GiB; the CPU tier's own
    ``vllm:kv_offload_config_info``: chunks, bytes and tokens, each engine's own, the smallest taken), its
    transfers (bytes and seconds loaded and stored, summed over engines), the share of the tier pinned by
    transfers in flight (``kv_offload_cpu_cache_usage_perc``, the worst engine's), and its hits: the KV
    connector's (``external_prefix_cache_*``, tokens; the offloading connector is vLLM's KV connector)."""
    offload: dict[str, Any] = {}
    size = first.get("kv_offloading_size", "")
    if size not in ("", "None"):
        offload = {"tier": f"vLLM native offloading ({first.get('kv_offloading_backend', 'native')})",
                   "size_gib": size[:20]}
    infos = [s.labels for s in samples if s.name == "vllm:kv_offload_config_info"]
    for key, label in _VLLM_TIER_INFO:
        vals = [check.count(f"offload {key}", i.get(label)) for i in infos if i.get(label) not in (None, "", "None")]
        if vals and all(v is not None for v in vals):
            offload.setdefault("tier", "vLLM native offloading")
            offload[key] = min(v for v in vals if v is not None)
    for key, name, old, direction in _VLLM_TRANSFERS:
        found = [x for x in samples if x.name == name]
        if not found:
            found = [x for x in samples if x.name == old and x.labels.get("transfer_type") == direction]
        v = _sum(check, f"offload {key}", found, name, old)
        if v is not None and offload:
            offload[key] = int(v) if key.endswith("bytes") and v <= MAX_COUNT else v
    pinned = _finite(check, "offload pinned", samples, "vllm:kv_offload_cpu_cache_usage_perc")
    if pinned is not None and offload:
        offload["pinned_fraction"] = check.fraction("offload pinned", max(pinned))
    if offload and ext_q:
        offload["hit_tokens"], offload["query_tokens"] = int(ext_h or 0), int(ext_q)
        offload["hit_rate"] = check.fraction("offload hit_rate", (ext_h or 0) / ext_q)
    return offload


def _by_cache_rank(samples: list[Sample], name: str) -> dict[str, list[Sample]]:
    """SGLang's radix-cache series of ``name`` (``RadixCacheMetricsCollector``, one per TP/PP rank, labelled
    ``dp_rank`` = 0 even without DP), per DP rank, each rank's label set as one key."""
    out: dict[str, list[Sample]] = {}
    for x in samples:
        if x.name == name:
            out.setdefault(x.labels.get("dp_rank", ""), []).append(x)
    return out


def _prefill_modes(stats: dict[str, list[Sample]]) -> dict[str, float]:
    """``sglang:prefill_effective_tokens_total`` by ``mode`` (input, device_hit, host_hit, storage_hit): one
    scheduler's per DP rank (pre-seeded at 0 on every rank, counted on the stats-logging rank), summed over DP
    ranks."""
    modes: dict[str, float] = {}
    for mine in stats.values():
        found = [x for x in mine if x.name == "sglang:prefill_effective_tokens_total"]
        if not found:
            continue
        low = min(_rank_key(x) for x in found)
        for x in found:
            if _rank_key(x) == low and math.isfinite(x.value):
                modes[x.labels.get("mode", "")] = modes.get(x.labels.get("mode", ""), 0.0) + x.value
    return modes


def _sglang_hicache(check: _Checker, cache: list[Sample], stats: dict[str, list[Sample]]) -> dict[str, Any]:
    """SGLang HiCache's transfers between the GPU and the host pool (L2), as its radix cache writes them
    (``sglang/srt/observability/metrics_collector.py``, ``RadixCacheMetricsCollector``): bytes per rank's KV
    shard (summed over the ranks: the physical total), tokens the same logical count on every TP rank (one
    rank's per DP rank), seconds the busiest rank's (ranks copy at once); and the prefill tokens by where
    their KV came from (``sglang:prefill_effective_tokens_total``: input, device_hit, host_hit, storage_hit;
    one scheduler's per DP rank): the host tier's hit rate is host_hit over all four."""
    out: dict[str, Any] = {}
    for key, name, how in (("stored_bytes", "sglang:hicache_backup_bytes_total", "sum"),
                           ("loaded_bytes", "sglang:load_back_bytes_total", "sum"),
                           ("stored_tokens", "sglang:hicache_backup_tokens_total", "one"),
                           ("loaded_tokens", "sglang:load_back_tokens_total", "one"),
                           ("store_seconds", "sglang:hicache_backup_duration_seconds_sum", "max"),
                           ("load_seconds", "sglang:load_back_duration_seconds_sum", "max")):
        groups = _by_cache_rank(cache, name)
        if not groups:
            continue
        if any(not math.isfinite(x.value) for g in groups.values() for x in g):
            check.invalid[f"offload {key}"] = "not a finite number"
            continue
        if how == "sum":
            out[key] = check.count(f"offload {key}", sum(x.value for g in groups.values() for x in g))
        elif how == "max":
            out[key] = max(x.value for g in groups.values() for x in g)
        else:  # one rank's (all its pools) per DP rank, summed over DP ranks
            total = 0.0
            for g in groups.values():
                low = min(_rank_key(x) for x in g)
                total += sum(x.value for x in g if _rank_key(x) == low)
            out[key] = check.count(f"offload {key}", total)
    modes = _prefill_modes(stats)
    total = sum(modes.values())
    if total > 0:
        out["hit_tokens"] = check.count("offload hit_tokens", modes.get("host_hit", 0.0))
        out["query_tokens"] = check.count("offload query_tokens", total)
        out["hit_rate"] = check.fraction("offload hit_rate", modes.get("host_hit", 0.0) / total)
        if modes.get("storage_hit"):
            out["storage_hit_tokens"] = check.count("offload storage_hit_tokens", modes["storage_hit"])
    return out


def _sglang(url: str, samples: list[Sample], check: _Checker) -> EngineReading:
    """SGLang: one scheduler per rank.  Every TP rank and PP stage writes the pool constants
    (``Scheduler.emit_metrics_constants`` has no rank gate); each PP stage's attention-TP rank 0 writes
    the stats (``SchedulerMetricsCollector.init_new``: ``is_stats_logging_rank``); with priority
    scheduling each queue is written as a total (``priority=""``) and per priority.  So per DP rank
    (``dp_rank``; each its own pool) kvdash takes one scheduler's figures (:func:`_one`), totals only;
    pools are never summed over TP/PP ranks, DP ranks never averaged.  The radix cache's own series (label
    ``cache_type``: HiCache's transfers) are read apart (:func:`_sglang_hicache`): they carry ``dp_rank="0"``
    even without DP, so they would otherwise read as a second pool."""
    cache = [s for s in samples if "cache_type" in s.labels]
    if cache:
        samples = [s for s in samples if "cache_type" not in s.labels]
    by_rank = _by(samples, "dp_rank")
    ranks = sorted(by_rank, key=_order)
    if len(ranks) > MAX_RANKS:
        return EngineReading(url=url, kind="sglang", error=f"{len(ranks):,} data-parallel ranks (dp_rank) on one "
                                                             f"page; kvdash reads at most {MAX_RANKS:,}")
    per_rank: list[RankReading] = []
    page = None
    for rank in ranks:
        mine = by_rank[rank]
        tag = f"rank {rank} " if len(ranks) > 1 else ""
        total = check.count(f"{tag}total_tokens", _smallest(check, f"{tag}total_tokens", mine,
                                                            "sglang:max_total_num_tokens"))
        usage = check.fraction(f"{tag}kv_usage", _one(check, f"{tag}kv_usage", mine, "sglang:token_usage"))
        kinds = {}
        for kind, name in (("full", "sglang:full_token_usage"), ("swa", "sglang:swa_token_usage"),
                           ("mamba", "sglang:mamba_usage")):
            v = check.fraction(f"{tag}{kind}_usage", _one(check, f"{tag}{kind}_usage", mine, name))
            if v is not None and (kind == "full" or v > 0):
                kinds[kind] = v
        if set(kinds) == {"full"}:
            kinds = {}
        rank_page = check.count("block_size", _one(check, "block_size", mine, "sglang:page_size"), low=1)
        page = page or rank_page
        per_rank.append(RankReading(
            rank=rank or "0", total_tokens=total, kv_usage=usage,
            used_tokens=check.count(f"{tag}used_tokens", _one(check, f"{tag}used_tokens", mine,
                                                              "sglang:num_used_tokens")),
            running=check.count(f"{tag}running", _one(check, f"{tag}running", mine, "sglang:num_running_reqs")),
            waiting=check.count(f"{tag}waiting", _one(check, f"{tag}waiting", mine, "sglang:num_queue_reqs")),
            evictable_tokens=check.count(f"{tag}evictable_tokens", _one(check, f"{tag}evictable_tokens", mine,
                                                                        "sglang:kv_evictable_tokens")),
            usage_by_kind=kinds,
            num_gpu_blocks=total // rank_page if total is not None and rank_page else None,
        ))
    retracted: list[int | None] = []
    hit_rates: list[float | None] = []
    host_total: list[int | None] = []
    host_used: list[int | None] = []
    for rank in ranks:
        mine = by_rank[rank]
        r = _one(check, "preemptions", mine, "sglang:num_retracted_requests_total",
                 "sglang:num_retracted_reqs")  # older SGLang: only the gauge
        retracted.append(check.count("preemptions", r))
        hit_rates.append(check.fraction("prefix_hit_rate", _one(check, "prefix_hit_rate", mine,
                                                                "sglang:cache_hit_rate")))
        host_total.append(check.count("hicache host", _one(check, "hicache host", mine,
                                                           "sglang:hicache_host_total_tokens")))
        host_used.append(check.count("hicache host", _one(check, "hicache host", mine,
                                                          "sglang:hicache_host_used_tokens")))
    offload: dict[str, Any] = {}
    if any(v is not None for v in host_total):
        offload = {"tier": "SGLang HiCache (host)", "host_total_tokens": _sum_of(host_total),
                   "host_used_tokens": _sum_of(host_used)}
        offload.update(_sglang_hicache(check, cache, by_rank))
    tight = tightest(per_rank)
    known_hits = [h for h in hit_rates if h is not None]
    # the prefix-cache counters behind the windowed hit rate: prompt tokens (all four modes) and those whose
    # KV was found (device, host or storage hits), as SGLang's own help text defines the windowed rate
    modes = _prefill_modes(by_rank)
    queries = check.count("prefix_queries", sum(modes.values())) if modes else None
    hits = check.count("prefix_hits", sum(v for k, v in modes.items() if k.endswith("_hit"))) if modes else None
    return EngineReading(
        url=url, kind="sglang", prefix_queries=queries, prefix_hits=hits,
        kv_usage=_worst([r.kv_usage for r in per_rank]),
        running=_sum_of([r.running for r in per_rank]), waiting=_sum_of([r.waiting for r in per_rank]),
        preemptions=_sum_of(retracted) if any(v is not None for v in retracted) else None,
        prefix_hit_rate=min(known_hits) if known_hits else None,
        total_tokens=tight.total_tokens if tight else None, used_tokens=tight.used_tokens if tight else None,
        num_gpu_blocks=tight.num_gpu_blocks if tight else None,
        block_size=page or 1, served_model=_served_model(samples)[:200],
        ranks=tuple(per_rank), invalid=check.invalid,
        evictable_tokens=_sum_of([r.evictable_tokens for r in per_rank]), offload=offload,
    )


def metrics_url(url: str) -> str:
    if "://" not in url:
        url = "http://" + url
    scheme, rest = url.split("://", 1)
    if "/" not in rest:
        url = f"{scheme}://{rest}/metrics"
    return url


def _dechunk(body: bytes) -> bytes:
    """A body sent with ``Transfer-Encoding: chunked`` (some servers ignore HTTP/1.0)."""
    out, pos = bytearray(), 0
    while True:
        end = body.find(b"\r\n", pos)
        if end < 0:
            raise ValueError("a chunked body ends early")
        size = int(body[pos:end].split(b";")[0] or b"0", 16)
        if size == 0:
            return bytes(out)
        out += body[end + 2:end + 2 + size]
        pos = end + 4 + size


class EngineFault(Exception):
    """One scrape failed; the text is what the dashboard shows."""


async def _get(url: str) -> bytes:
    """The body of a 200 answer at ``url`` (any other status is an :class:`EngineFault`)."""
    code, body = await http_get(url, "text/plain", MAX_BYTES)
    if code != 200:
        raise EngineFault(f"HTTP {code} from the engine")
    return body


async def http_get(url: str, accept: str, max_bytes: int) -> tuple[int, bytes]:
    """``(status, body)`` of an HTTP/1.0 GET, at most ``max_bytes`` of body; :class:`EngineFault` on any
    failure.  No deadline of its own: callers wrap it (with the parse) in one ``asyncio.wait_for``."""
    from kvdash.netaddr import split_http_url

    try:  # the options are checked when given (kvdash.netaddr); this guards every other caller
        parts = split_http_url(url)
    except ValueError as exc:  # "http://[::1" (Invalid IPv6 URL), a port out of range, a 64-character label
        raise EngineFault(f"not a usable address ({exc})") from exc
    assert parts.hostname is not None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    ssl: Any = None
    if parts.scheme == "https":
        import ssl as ssl_mod

        ssl = ssl_mod.create_default_context()
    try:
        reader, writer = await asyncio.open_connection(parts.hostname, port, ssl=ssl, limit=MAX_HEADER_BYTES)
    except OSError as exc:
        raise EngineFault(f"unreachable ({exc.strerror or exc})") from exc
    except UnicodeError as exc:  # the resolver's IDNA codec
        raise EngineFault(f"unreachable (the host name cannot be encoded: {str(exc)[:60]})") from exc
    try:
        path = (parts.path or "/metrics") + (f"?{parts.query}" if parts.query else "")
        writer.write(f"GET {path} HTTP/1.0\r\nHost: {parts.netloc}\r\nAccept: {accept}\r\n"
                     f"User-Agent: kvdash\r\nConnection: close\r\n\r\n".encode("ascii", "replace"))
        status = await reader.readline()
        fields = status.split(None, 2)
        if len(fields) < 2 or not fields[0].startswith(b"HTTP/") or not fields[1].isdigit() or len(fields[1]) != 3:
            raise EngineFault("not an HTTP answer")
        code = int(fields[1])
        headers: dict[str, str] = {}
        size = 0
        while True:
            line = await reader.readline()
            size += len(line)
            if size > MAX_HEADER_BYTES:
                raise EngineFault(f"not an HTTP answer (headers over {MAX_HEADER_BYTES // 2**10} KiB)")
            if line in (b"\r\n", b"\n", b""):
                break
            key, _, value = line.decode("latin-1").partition(":")
            headers[key.strip().lower()] = value.strip()
        body = bytearray()
        while len(body) <= max_bytes:
            chunk = await reader.read(65536)
            if not chunk:
                break
            body += chunk
        if len(body) > max_bytes:
            raise EngineFault(f"the answer is larger than {max_bytes // 2**20} MiB")
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return code, _dechunk(bytes(body))
        return code, bytes(body)
    except (ValueError, asyncio.LimitOverrunError, asyncio.IncompleteReadError) as exc:
        raise EngineFault(f"not an HTTP answer ({type(exc).__name__})") from exc
    except (ConnectionError, OSError) as exc:
        raise EngineFault(f"connection dropped ({exc.strerror or type(exc).__name__})") from exc
    finally:
        writer.close()


async def _scrape(url: str, deadline: float | None = None) -> EngineReading:
    body = await _get(url)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EngineFault("not Prometheus metrics: the page is not UTF-8 text") from exc
    try:
        samples = parse_prometheus(text, deadline)
    except ValueError as exc:
        raise EngineFault(f"not Prometheus metrics: {exc}") from exc
    return reading_from_samples(url, samples)


async def fetch_async(url: str, timeout: float = DEFAULT_TIMEOUT_S) -> EngineReading:
    """Read and parse an engine's metrics within ``timeout`` seconds in all; never raises."""
    url = metrics_url(url)
    started = time.perf_counter()
    try:
        # the parse is synchronous (wait_for cannot cut it): it checks the same deadline itself
        reading = await asyncio.wait_for(_scrape(url, time.monotonic() + timeout), timeout)
    except TimeoutError:
        reading = EngineReading(url=url, error=f"timed out: no complete answer within {timeout:g} s "
                                               "(connect + read + parse)")
    except EngineFault as exc:
        reading = EngineReading(url=url, error=str(exc))
    return replace(reading, elapsed_s=time.perf_counter() - started)


def fetch(url: str, timeout: float = DEFAULT_TIMEOUT_S) -> EngineReading:
    """:func:`fetch_async` from synchronous code (a worker thread, ``--once``)."""
    return asyncio.run(fetch_async(url, timeout))


def snapshot_engine(reading: EngineReading) -> dict[str, Any]:
    """A reading as ``kvdash record --engine`` stores it in a snapshot (``extra["engine"]``): the fields
    :func:`from_snapshot` reads back (the tightest pool, as live shows it), plus the url, error and
    every pool under ``ranks``."""
    out: dict[str, Any] = {k: getattr(reading, k) for k in (
        "kind", "kv_usage", "running", "waiting", "preemptions", "prefix_hit_rate", "num_gpu_blocks", "block_size",
        "served_model", "cache_dtype", "url", "error", "prefix_queries", "prefix_hits", "external_queries",
        "external_hits", "waiting_by_reason",
        "offload")}
    util = reading.gpu_memory_utilization
    try:
        out["gpu_memory_utilization"] = float(util) if util else None
    except ValueError:
        out["gpu_memory_utilization"] = None
    out["total_tokens"] = reading.total_tokens
    out["ranks"] = [asdict(r) for r in reading.ranks]
    return {k: v for k, v in out.items() if v not in (None, "", [], {})}


def from_snapshot(snapshot_extra: dict[str, Any]) -> EngineReading | None:
    """The simulated engine a demo or replayed snapshot carries (``extra["engine"]``), validated."""
    e = snapshot_extra.get("engine")
    if not isinstance(e, dict):
        return None
    check = _Checker()

    def num(name: str) -> float | None:
        v = e.get(name)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int | float):
            check.invalid[name] = f"{str(v)[:20]!r} is not a number"
            return None
        return float(v)

    blocks, size = check.count("num_gpu_blocks", num("num_gpu_blocks")), check.count("block_size", num("block_size"),
                                                                                     low=1)
    total = check.count("total_tokens", num("total_tokens"))  # a recorded engine's own pool (kvdash record)
    if total is None:
        total = blocks * size if blocks is not None and size else None
    usage = check.fraction("kv_usage", num("kv_usage"))
    util = check.fraction("gpu_memory_utilization", num("gpu_memory_utilization"))
    if e.get("error"):
        return EngineReading(url=str(e.get("url", "(recorded engine)"))[:200], error=str(e["error"])[:200])
    reasons = e.get("waiting_by_reason")
    by_reason = {str(k)[:20]: n for k, v in reasons.items() if (n := check.count(f"waiting {k}", v)) is not None} \
        if isinstance(reasons, dict) else {}
    off = e.get("offload")
    offload = {str(k)[:40]: (v if isinstance(v, int | float) and not isinstance(v, bool) else str(v)[:80])
               for k, v in off.items()} if isinstance(off, dict) else {}
    return EngineReading(url=str(e.get("url", "(demo engine)"))[:200], kind=str(e.get("kind", ""))[:40],
                         kv_usage=usage,
                         running=check.count("running", num("running")), waiting=check.count("waiting", num("waiting")),
                         preemptions=check.count("preemptions", num("preemptions")),
                         prefix_hit_rate=check.fraction("prefix_hit_rate", num("prefix_hit_rate")),
                         num_gpu_blocks=blocks, block_size=size, total_tokens=total,
                         used_tokens=None if usage is None or total is None else int(usage * total),
                         served_model=str(e.get("served_model", ""))[:200], invalid=check.invalid,
                         prefix_queries=check.count("prefix_queries", num("prefix_queries")),
                         prefix_hits=check.count("prefix_hits", num("prefix_hits")),
                         external_queries=check.count("external_queries", num("external_queries")),
                         external_hits=check.count("external_hits", num("external_hits")),
                         waiting_by_reason=by_reason, offload=offload,
                         gpu_memory_utilization="" if not util else f"{util:g}",
                         cache_dtype=str(e.get("cache_dtype", ""))[:40])


WINDOW = 10  # readings the windowed rates cover (the dashboard's last 10 engine readings)


def windowed(history: list[EngineReading]) -> dict[str, Any]:
    """Rates over the last readings, from the engines' counters (vLLM's prefix_cache_{queries,hits},
    external_prefix_cache_*, num_preemptions; SGLang's num_retracted_requests): the change from the
    oldest to the newest good reading.  A counter that went down (an engine restarted) starts the window
    again after the drop.  ``None`` where fewer than two readings carry the counter.

    >>> a = EngineReading(url="u", prefix_queries=1000, prefix_hits=100, preemptions=2)
    >>> b = replace(a, prefix_queries=3000, prefix_hits=1100, preemptions=5)
    >>> w = windowed([a, b]); (w["prefix_hit_rate"], w["preemptions"], w["readings"])
    (0.5, 3, 2)
    """
    good = [r for r in history if not r.error]

    def value(r: EngineReading, attr: str) -> int | None:
        if attr.startswith("offload_"):  # the tier's counters: offload["hit_tokens"], offload["query_tokens"]
            v = r.offload.get(attr.removeprefix("offload_"))
            return v if isinstance(v, int) and not isinstance(v, bool) else None
        return getattr(r, attr)

    def delta(attr: str) -> int | None:
        vals = [value(r, attr) for r in good]
        run: list[int] = []
        for v in vals:
            if v is None:
                continue
            if run and v < run[-1]:
                run = []  # a restart: the counter began again
            run.append(v)
        return run[-1] - run[0] if len(run) >= 2 else None

    q, h = delta("prefix_queries"), delta("prefix_hits")
    eq, eh = delta("external_queries"), delta("external_hits")
    oq, oh = delta("offload_query_tokens"), delta("offload_hit_tokens")
    return {"readings": len(good), "prefix_queries": q, "prefix_hits": h,
            "prefix_hit_rate": h / q if q and h is not None else None,
            "external_hit_rate": eh / eq if eq and eh is not None else None,
            "offload_hit_rate": oh / oq if oq and oh is not None else None,
            "preemptions": delta("preemptions")}

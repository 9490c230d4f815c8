"""An engine's ``/metrics`` page as samples: the parser with its limits, the readings' types, the checker that
turns a bad figure into n/a with its reason, and the aggregation helpers the per-engine readers share
(:mod:`kvdash.sources.engine_readers`).  :mod:`kvdash.sources.engine` fetches a page and picks the reader."""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
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

    def count(self, name: str, value: object, low: int = 0) -> int | None:
        """A count: a whole number from ``low`` up to 2^53."""
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, str | int | float):  # a list, an object, true
            self.invalid[name] = f"{str(value)[:20]!r} is not a number"
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

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


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class RankReading:
    """One data-parallel rank of an SGLang server (its own KV pool)."""

    rank: str
    total_tokens: int | None = None
    used_tokens: int | None = None
    kv_usage: float | None = None
    running: int | None = None
    waiting: int | None = None


@dataclass(frozen=True)
class EngineReading:
    url: str
    kind: str = ""  # "vllm", "sglang"
    kv_usage: float | None = None  # 0-1
    running: int | None = None
    waiting: int | None = None
    preemptions: int | None = None  # vLLM preemptions; SGLang retractions (its name for the same event)
    prefix_hit_rate: float | None = None  # 0-1
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    total_tokens: int | None = None  # the engine's pool in tokens (SGLang: the smallest rank's)
    used_tokens: int | None = None
    cache_dtype: str = ""
    gpu_memory_utilization: str = ""
    served_model: str = ""  # the model_name label of its metrics
    ranks: tuple[RankReading, ...] = ()  # SGLang data-parallel ranks, when more than one
    invalid: dict[str, str] = field(default_factory=dict)  # field -> why it reads n/a
    error: str = ""
    elapsed_s: float | None = None  # how long the scrape took

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
                if s.name.startswith(("vllm:", "sglang:")):
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
    """Only the engine families kvdash reads (vllm:*, sglang:*), so the lookups stay short."""
    return [s for s in samples if s.name.startswith(("vllm:", "sglang:"))]


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


def reading_from_samples(url: str, samples: list[Sample]) -> EngineReading:
    samples = _wanted(samples)
    names = {s.name for s in samples}
    check = _Checker()
    if any(n.startswith("vllm:") for n in names):
        info = next((s.labels for s in samples if s.name == "vllm:cache_config_info"), {})
        blocks = check.count("num_gpu_blocks", info.get("num_gpu_blocks")) if info.get("num_gpu_blocks") not in (
            None, "None") else None
        block_size = check.count("block_size", info.get("block_size"), low=1) if info.get("block_size") else None
        hits = _sum(check, "prefix_hit_rate", samples, "vllm:prefix_cache_hits_total",
                    "vllm:gpu_prefix_cache_hits_total")
        queries = _sum(check, "prefix_hit_rate", samples, "vllm:prefix_cache_queries_total",
                       "vllm:gpu_prefix_cache_queries_total")
        if hits is not None and queries:
            hit_rate = check.fraction("prefix_hit_rate", hits / queries)
        else:
            hit_rate = check.fraction("prefix_hit_rate", _mean(check, "prefix_hit_rate", samples,
                                                               "vllm:gpu_prefix_cache_hit_rate"))
        usage = check.fraction("kv_usage", _mean(check, "kv_usage", samples, "vllm:kv_cache_usage_perc",
                                                 "vllm:gpu_cache_usage_perc"))
        total = blocks * block_size if blocks is not None and block_size else None
        return EngineReading(
            url=url, kind="vllm", kv_usage=usage,
            running=check.count("running", _sum(check, "running", samples, "vllm:num_requests_running")),
            waiting=check.count("waiting", _sum(check, "waiting", samples, "vllm:num_requests_waiting")),
            preemptions=check.count("preemptions", _sum(check, "preemptions", samples, "vllm:num_preemptions_total",
                                                        "vllm:num_preemptions")),
            prefix_hit_rate=hit_rate, num_gpu_blocks=blocks, block_size=block_size, total_tokens=total,
            used_tokens=None if usage is None or total is None else int(usage * total),
            cache_dtype=info.get("cache_dtype", "")[:40],
            gpu_memory_utilization=info.get("gpu_memory_utilization", "")[:40],
            served_model=_served_model(samples)[:200], invalid=check.invalid,
        )
    if any(n.startswith("sglang:") for n in names):
        return _sglang(url, samples, check)
    return EngineReading(url=url, error="no vLLM or SGLang metrics at this address")


def _sglang(url: str, samples: list[Sample], check: _Checker) -> EngineReading:
    """SGLang: one scheduler per data-parallel rank, each with its own pool, told apart by the
    ``dp_rank`` label.  Pools are per rank (never summed); retractions are its preemptions."""
    by_rank: dict[str, list[Sample]] = {}
    for s in samples:  # one pass: a page with thousands of ranks stays linear
        by_rank.setdefault(s.labels.get("dp_rank", ""), []).append(s)
    ranks = sorted({r for r, mine in by_rank.items() if any(s.name.startswith("sglang:") for s in mine)},
                   key=lambda r: (len(r), r))
    if len(ranks) > MAX_RANKS:
        return EngineReading(url=url, kind="sglang", error=f"{len(ranks):,} data-parallel ranks (dp_rank) on one "
                                                             f"page; kvdash reads at most {MAX_RANKS:,}")
    per_rank: list[RankReading] = []
    for rank in ranks:
        mine = by_rank[rank]
        tag = f"rank {rank} " if len(ranks) > 1 else ""
        per_rank.append(RankReading(
            rank=rank or "0",
            total_tokens=check.count(f"{tag}total_tokens", _sum(check, f"{tag}total_tokens", mine,
                                                                "sglang:max_total_num_tokens")),
            used_tokens=check.count(f"{tag}used_tokens", _sum(check, f"{tag}used_tokens", mine,
                                                              "sglang:num_used_tokens")),
            kv_usage=check.fraction(f"{tag}kv_usage", _mean(check, f"{tag}kv_usage", mine, "sglang:token_usage")),
            running=check.count(f"{tag}running", _sum(check, f"{tag}running", mine, "sglang:num_running_reqs")),
            waiting=check.count(f"{tag}waiting", _sum(check, f"{tag}waiting", mine, "sglang:num_queue_reqs")),
        ))

    def total(attr: str) -> int | None:
        vals = [getattr(r, attr) for r in per_rank]
        return None if not vals or any(v is None for v in vals) else sum(vals)

    pools = [r.total_tokens for r in per_rank if r.total_tokens is not None]
    usages = [r.kv_usage for r in per_rank if r.kv_usage is not None]
    retracted = _sum(check, "preemptions", samples, "sglang:num_retracted_requests_total")
    if retracted is None:
        retracted = _sum(check, "preemptions", samples, "sglang:num_retracted_reqs")
    return EngineReading(
        url=url, kind="sglang", kv_usage=max(usages) if usages else None,
        running=total("running"), waiting=total("waiting"),
        preemptions=check.count("preemptions", retracted),
        prefix_hit_rate=check.fraction("prefix_hit_rate", _mean(check, "prefix_hit_rate", samples,
                                                                "sglang:cache_hit_rate")),
        total_tokens=min(pools) if pools else None,
        used_tokens=next((r.used_tokens for r in per_rank if pools and r.total_tokens == min(pools)), None),
        block_size=1, served_model=_served_model(samples)[:200],
        ranks=tuple(per_rank) if len(per_rank) > 1 else (), invalid=check.invalid,
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
    total = blocks * size if blocks is not None and size else None
    usage = check.fraction("kv_usage", num("kv_usage"))
    util = check.fraction("gpu_memory_utilization", num("gpu_memory_utilization"))
    return EngineReading(url="(demo engine)", kind=str(e.get("kind", ""))[:40], kv_usage=usage,
                         running=check.count("running", num("running")), waiting=check.count("waiting", num("waiting")),
                         preemptions=check.count("preemptions", num("preemptions")),
                         prefix_hit_rate=check.fraction("prefix_hit_rate", num("prefix_hit_rate")),
                         num_gpu_blocks=blocks, block_size=size, total_tokens=total,
                         used_tokens=None if usage is None or total is None else int(usage * total),
                         served_model=str(e.get("served_model", ""))[:200], invalid=check.invalid,
                         gpu_memory_utilization="" if not util else f"{util:g}",
                         cache_dtype=str(e.get("cache_dtype", ""))[:40])

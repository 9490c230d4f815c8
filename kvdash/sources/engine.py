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
import time
from dataclasses import asdict, replace
from typing import Any

from kvdash.sources.engine_page import (
    DEFAULT_TIMEOUT_S,
    MAX_BYTES,
    MAX_HEADER_BYTES,
    _served_model,
    _wanted,
)
from kvdash.sources.engine_page import MAX_COUNT as MAX_COUNT  # re-exported: the readings' callers import them here
from kvdash.sources.engine_page import MAX_SERIES as MAX_SERIES
from kvdash.sources.engine_page import EngineReading as EngineReading
from kvdash.sources.engine_page import RankReading as RankReading
from kvdash.sources.engine_page import Sample as Sample
from kvdash.sources.engine_page import _Checker as _Checker
from kvdash.sources.engine_page import _sum_of as _sum_of
from kvdash.sources.engine_page import parse_prometheus as parse_prometheus
from kvdash.sources.engine_page import tightest as tightest
from kvdash.sources.engine_readers import _lmcache, _sglang, _vllm


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


async def resolve(host: str, port: int) -> list[str]:
    """The addresses of ``host`` (a numeric one as it is), looked up on a daemon thread of its own.

    asyncio's own lookup runs ``getaddrinfo`` in the loop's default executor, which ``asyncio.run`` joins when it
    ends and the interpreter joins at exit: a name server that does not answer (resolv.conf's timeout x attempts)
    held a fetch past its deadline (15 s against --engine-timeout 1, its elapsed_s saying 1.00) and the process
    after q.  Here the deadline cancels the wait and the lookup is left to finish on its own."""
    import ipaddress
    import socket
    import threading

    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    found: asyncio.Future[list[str]] = loop.create_future()

    def land(result: list[str] | None, error: BaseException | None) -> None:
        if not found.done():
            if error is not None:
                found.set_exception(error)
            else:
                found.set_result(result or [])

    def look_up() -> None:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            result: list[str] | None = list(dict.fromkeys(str(info[4][0]) for info in infos))
            error: BaseException | None = None
        except (OSError, UnicodeError) as exc:  # gaierror; the IDNA codec
            result, error = None, exc
        try:
            loop.call_soon_threadsafe(land, result, error)
        except RuntimeError:  # the loop has closed: the deadline passed long ago
            pass

    threading.Thread(target=look_up, name="kvdash-resolve", daemon=True).start()
    return await found


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
        failed: OSError = OSError(f"no address for {parts.hostname}")
        for address in await resolve(parts.hostname, port):  # the resolver's order, as open_connection tries them
            try:
                reader, writer = await asyncio.open_connection(
                    address, port, ssl=ssl, server_hostname=parts.hostname if ssl else None, limit=MAX_HEADER_BYTES)
                break
            except OSError as exc:
                failed = exc
        else:
            raise failed
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

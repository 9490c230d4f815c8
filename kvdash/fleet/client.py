"""A small client of Prometheus' HTTP API (``/api/v1/query``) with one total deadline per reading.

A reading (the fleet's queries, sent together) has one deadline covering connecting, sending, the
headers, every byte of every body and the parse: the requests run in one ``asyncio.wait_for`` (the
engine client's HTTP/1.0 GET, :func:`kvdash.sources.engine.http_get`), and the parse, which runs after
the bodies, checks the same deadline.  A server that trickles its headers a byte at a time costs at
most the deadline.  Every failure (unreachable, an HTTP error, an error answer from Prometheus, a body
that is not the API's JSON, too large, too deep) is :class:`PrometheusError` with a one-line message.

What enters is checked before it is used:

* the body: at most ``MAX_BYTES``; at most ``MAX_SERIES`` samples per query (counted in the bytes,
  before parsing); JSON nesting at most ``MAX_DEPTH`` levels (measured before parsing);
* each sample: its labels must be an object of strings, its value a ``[time, "number"]`` pair; a sample
  that is not is skipped and counted in :attr:`PrometheusClient.skipped` with the reason (one bad
  series never blanks the fleet).  Values may be ``NaN``, ``+Inf``, ``-Inf`` (Prometheus sends those):
  :mod:`kvdash.fleet.build` shows such a figure as n/a with its reason, never as a number.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.parse
from typing import Any, NamedTuple

from kvdash.errors import HIDDEN, visible

MAX_BYTES = 32 * 2**20
MAX_SERIES = 20_000  # per query: 10,000 series parse in about 0.6 s and 82 MiB, 100,000 in 5 s and 586 MiB
MAX_DEPTH = 16  # Prometheus' answers nest 6 levels
MAX_LABELS = 64  # labels on one series
MAX_LABEL_CHARS = 1024  # characters of one label value kept


class PrometheusError(Exception):
    """One line saying why a query got no answer."""


class Series(NamedTuple):
    """One sample of an instant vector (a tuple: thousands are made on every poll)."""

    labels: dict[str, str]
    value: float


def base_url(url: str) -> str:
    """``host:9090`` or ``http://host:9090/prefix/`` -> ``http://host:9090/prefix``."""
    from kvdash.netaddr import split_http_url

    try:
        parts = split_http_url(url)
    except ValueError as exc:
        raise ValueError(f"expected http://HOST:PORT of a Prometheus server: {exc}") from None
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def json_depth(body: bytes, limit: int) -> int:
    """The nesting depth of a JSON text, measured without parsing it (strings skipped); stops counting
    past ``limit``.

    >>> json_depth(b'{"a": [1, {"b": "[[["}]}', 16), json_depth(b"[" * 100_000, 16)
    (3, 17)
    """
    skeleton = _STRING.sub(b"", body).translate(None, _NOT_BRACKETS)
    depth = top = 0
    for b in skeleton:
        depth += 1 if b in (0x5B, 0x7B) else -1
        if depth > top:
            top = depth
            if top > limit:
                break
    return top


class PrometheusClient:
    def __init__(self, url: str, deadline_s: float = 2.0) -> None:
        self.url = base_url(url)
        self.deadline_s = deadline_s
        self.skipped: dict[str, str] = {}  # query name -> how many samples were skipped, and why

    def query(self, expr: str) -> list[Series]:
        """One instant query; the samples of its vector (or scalar) result."""
        return self.query_all({"query": expr})["query"]

    def query_all(self, exprs: dict[str, str]) -> dict[str, list[Series]]:
        """Every query of ``exprs`` ({name: PromQL}), sent together under one deadline for them all."""
        self.skipped = {}
        end = time.monotonic() + self.deadline_s

        async def every() -> dict[str, list[Series]]:
            bodies = await asyncio.gather(*(self._get(expr) for expr in exprs.values()))
            out = {}
            for (name, expr), (status, body) in zip(exprs.items(), bodies, strict=True):
                if time.monotonic() > end:
                    raise TimeoutError
                out[name] = self._samples(name, expr, self._document(status, body))
            return out

        try:
            return _run(lambda: asyncio.wait_for(every(), self.deadline_s))
        except TimeoutError:
            raise PrometheusError(f"Prometheus at {self.url} gave no answer within {self.deadline_s:g} s "
                                  "(connect + headers + body + parse)") from None

    async def _get(self, expr: str) -> tuple[int, bytes]:
        from kvdash.sources.engine import EngineFault, http_get

        target = self.url + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            return await http_get(target, "application/json", MAX_BYTES)
        except EngineFault as exc:
            text = str(exc)
            if text.startswith("unreachable"):
                raise PrometheusError(f"Prometheus at {self.url} is {text}") from None
            raise PrometheusError(f"Prometheus at {self.url}: {text}") from None

    def _document(self, status: int, body: bytes) -> dict[str, Any]:
        where = self.url
        series = body.count(b'"metric"')
        if series > MAX_SERIES:
            raise PrometheusError(f"Prometheus at {where} answered {series:,} series for one query; kvdash reads "
                                  f"at most {MAX_SERIES:,} (narrow the scrape, or query a smaller fleet)")
        if json_depth(body, MAX_DEPTH) > MAX_DEPTH:
            raise PrometheusError(f"{where} answered JSON nested deeper than {MAX_DEPTH} levels "
                                  "(not Prometheus' API)")
        try:
            doc = json.loads(body)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise PrometheusError(f"{where} answered HTTP {status} without Prometheus' JSON "
                                  "(is this a Prometheus server?)") from exc
        if not isinstance(doc, dict):
            raise PrometheusError(f"{where} answered JSON that is not Prometheus' API")
        if doc.get("status") != "success":
            from kvdash.errors import flat

            text = " ".join(flat(doc.get("error", f"HTTP {status}")).split())
            kind = " ".join(flat(doc.get("errorType", "error")).split())[:40]
            raise PrometheusError(f"Prometheus query error ({kind}): {text[:200]}")
        data = doc.get("data")
        if not isinstance(data, dict):
            raise PrometheusError(f"{where} answered without a data field")
        return data

    def _samples(self, name: str, expr: str, data: dict[str, Any]) -> list[Series]:
        result = data.get("result")
        kind = data.get("resultType")
        if kind == "vector" and isinstance(result, list):
            out: list[Series] = []
            bad: dict[str, int] = {}
            for item in result:
                why = _sample(item, out)
                if why:
                    bad[why] = bad.get(why, 0) + 1
            if bad:
                total = sum(bad.values())
                self.skipped[name] = f"{total:,} sample{'s' if total > 1 else ''} skipped: " + "; ".join(
                    f"{n:,} {why}" for why, n in sorted(bad.items()))
            return out
        if kind == "scalar" and isinstance(result, list) and len(result) == 2:
            value = _number(result[1])
            if value is None:
                raise PrometheusError(f"the scalar answer to {expr!r} is not a number")
            return [Series({}, value)]
        from kvdash.errors import clip

        raise PrometheusError(f"unexpected result type {clip(kind, 40)!r} for {expr!r}")


def _run(make: Any) -> Any:
    """``asyncio.run(make())``, on a thread of its own when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(make())).result()


def _number(v: object) -> float | None:
    """A sample value as Prometheus sends it (a string: "1", "NaN", "+Inf"); None when it is not one."""
    if isinstance(v, str) and len(v) <= 64:
        try:
            return float(v)
        except ValueError:
            return None
    if isinstance(v, int | float) and not isinstance(v, bool):
        try:
            return float(v)
        except OverflowError:
            return None
    return None


def _sample(item: object, out: list[Series]) -> str:
    """Append the sample ``item`` to ``out``; the reason when it is malformed ("" when it is not)."""
    if not isinstance(item, dict):
        return "not an object"
    labels = item.get("metric")
    if not isinstance(labels, dict):
        return "without a label object (metric)"
    if len(labels) > MAX_LABELS:
        return f"with more than {MAX_LABELS} labels"
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        return "with a label that is not a string"
    pair = item.get("value")
    if not isinstance(pair, list) or len(pair) != 2:
        return "without a [time, value] pair"
    value = _number(pair[1])
    if value is None:
        return "whose value is not a number"
    if any(len(v) > MAX_LABEL_CHARS or HIDDEN.search(v) for v in labels.values()):
        # cut, and control, bidi and zero-width characters shown as escapes (the same for every series, so
        # joins on labels still match)
        labels = {k: visible(v[:MAX_LABEL_CHARS]) for k, v in labels.items()}
    out.append(Series(labels, value))
    return ""

"""A small client of Prometheus' HTTP API (``/api/v1/query``) with a total deadline per query.

``urllib``'s timeout bounds each socket operation, not the whole answer: a server that trickles
bytes could hold a poll for ever.  Here the deadline covers connecting, sending, and reading the
whole body; when it passes, the query fails with :class:`PrometheusError`.  Every failure
(unreachable, HTTP error, an error answer from Prometheus, a body that is not the API's JSON) is
that one exception with a one-line message.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from typing import Any, NamedTuple

MAX_BYTES = 64 * 2**20


class PrometheusError(Exception):
    """One line saying why a query got no answer."""


class Series(NamedTuple):
    """One sample of an instant vector (a tuple: thousands are made on every poll)."""

    labels: dict[str, str]
    value: float


def base_url(url: str) -> str:
    """``host:9090`` or ``http://host:9090/prefix/`` -> ``http://host:9090/prefix``."""
    url = url.strip()
    if "://" not in url:
        url = "http://" + url
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected http://HOST:PORT of a Prometheus server")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


class PrometheusClient:
    def __init__(self, url: str, deadline_s: float = 2.0) -> None:
        self.url = base_url(url)
        self.deadline_s = deadline_s
        parts = urllib.parse.urlsplit(self.url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or "localhost"
        self._port = parts.port or (443 if self._https else 80)
        self._path = parts.path

    def query(self, expr: str) -> list[Series]:
        """An instant query; the samples of its vector (or scalar) result."""
        data = self._get("/api/v1/query", {"query": expr})
        result = data.get("result")
        kind = data.get("resultType")
        if kind == "vector" and isinstance(result, list):
            out = []
            for item in result:
                try:
                    out.append(Series(item["metric"], float(item["value"][1])))
                except (KeyError, IndexError, TypeError, ValueError) as exc:
                    raise PrometheusError(f"a sample of {expr!r} is malformed") from exc
            return out
        if kind == "scalar" and isinstance(result, list) and len(result) == 2:
            return [Series({}, float(result[1]))]
        raise PrometheusError(f"unexpected result type {kind!r} for {expr!r}")

    def _get(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        end = time.monotonic() + self.deadline_s
        target = self._path + path + "?" + urllib.parse.urlencode(params)
        where = f"{self.url}"

        def left() -> float:
            remaining = end - time.monotonic()
            if remaining <= 0:
                raise PrometheusError(f"Prometheus at {where} gave no answer within {self.deadline_s:g} s")
            return remaining

        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        conn = cls(self._host, self._port, timeout=left())
        try:
            conn.request("GET", target, headers={"Accept": "application/json"})
            if conn.sock is not None:
                conn.sock.settimeout(left())
            resp = conn.getresponse()
            chunks: list[bytes] = []
            size = 0
            while True:
                if conn.sock is not None:
                    conn.sock.settimeout(left())
                chunk = resp.read1(1 << 20)
                if not chunk:
                    break
                size += len(chunk)
                if size > MAX_BYTES:
                    raise PrometheusError(f"Prometheus at {where}: an answer larger than 64 MiB")
                chunks.append(chunk)
                left()
        except TimeoutError as exc:
            raise PrometheusError(f"Prometheus at {where} gave no answer within {self.deadline_s:g} s") from exc
        except (OSError, http.client.HTTPException) as exc:
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            raise PrometheusError(f"Prometheus at {where} is unreachable ({reason})") from exc
        finally:
            conn.close()
        body = b"".join(chunks)
        try:
            doc = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise PrometheusError(f"{where} answered HTTP {resp.status} without Prometheus' JSON "
                                  "(is this a Prometheus server?)") from exc
        if not isinstance(doc, dict):
            raise PrometheusError(f"{where} answered JSON that is not Prometheus' API")
        if doc.get("status") != "success":
            text = " ".join(str(doc.get("error", f"HTTP {resp.status}")).split())
            raise PrometheusError(f"Prometheus query error ({doc.get('errorType', 'error')}): {text[:200]}")
        data = doc.get("data")
        if not isinstance(data, dict):
            raise PrometheusError(f"{where} answered without a data field")
        return data

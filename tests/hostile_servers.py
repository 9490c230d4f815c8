"""Loopback servers that misbehave on purpose (127.0.0.1 only), for tests/test_hostile.py and the fuzzers.

* :class:`FakePrometheus`: answers ``/api/v1/query`` with whatever ``answer(query name, PromQL)`` returns
  (bytes, or a JSON-able value), so a test can send NaN samples, null labels, deep JSON, 100,000 series;
* :class:`RawServer`: a socket server whose connection handler is a function of the socket: it can
  trickle headers a byte at a time, send half a chunked body, or never answer.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
import urllib.parse
from collections.abc import Callable
from typing import Any

from kvdash.fleet import queries

NAME_OF = {expr: name for name, expr in queries.FLEET.items()}


def vector(*series: tuple[dict[str, Any], Any]) -> dict[str, Any]:
    """A successful instant-vector answer: ``(labels, value)`` pairs (values as Prometheus sends them)."""
    return {"status": "success", "data": {"resultType": "vector",
                                          "result": [{"metric": m, "value": [0, v]} for m, v in series]}}


EMPTY = vector()


class FakePrometheus:
    def __init__(self, answer: Callable[[str, str], Any]) -> None:
        self.answer = answer
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query).get("query", [""])[0]
                got = owner.answer(NAME_OF.get(query, ""), query)
                body = got if isinstance(got, bytes) else json.dumps(got).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except OSError:
                    pass

            def log_message(self, *args: Any) -> None:
                return None

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def __enter__(self) -> FakePrometheus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class RawServer:
    """Accepts connections on 127.0.0.1 and runs ``handle(conn, stop)`` for each, on its own thread."""

    def __init__(self, handle: Callable[[socket.socket, threading.Event], None]) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.stop = threading.Event()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.handle = handle
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn: socket.socket) -> None:
        try:
            self.handle(conn, self.stop)
        except OSError:
            pass
        finally:
            conn.close()

    def __enter__(self) -> RawServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.sock.close()


def trickle_headers(conn: socket.socket, stop: threading.Event, every_s: float = 0.3) -> None:
    """The issue's repro: the status line, then a header one byte every ``every_s`` seconds, for ever."""
    conn.recv(65536)
    conn.sendall(b"HTTP/1.1 200 OK\r\nX: ")
    while not stop.wait(every_s):
        conn.sendall(b"p")

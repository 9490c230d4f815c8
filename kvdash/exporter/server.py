"""The exporter's HTTP server: prometheus-client's WSGI app behind a server that bounds its clients.

prometheus-client's ``start_http_server`` starts a thread per connection and waits on each for ever:
300 clients that each send half a request line hold 300 threads.  This server (the same
``ThreadingWSGIServer`` and WSGI app, :mod:`prometheus_client.exposition`) adds two bounds:

* **a deadline per request** (``REQUEST_SECONDS``, 10 s): every socket operation times out at once when
  idle for that long, and a watchdog closes any connection still open that long after it was accepted
  (a client that trickles a byte a second is cut, not only an idle one);
* **a cap on concurrent requests** (``MAX_CLIENTS``, 32): a connection beyond it is answered
  ``503 Service Unavailable`` at once and closed (Prometheus scrapes one request at a time per target).

Errors in a handler (a timeout, a reset) are counted, not printed: a hostile client cannot fill the log.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

from prometheus_client import exposition

MAX_CLIENTS = 32
REQUEST_SECONDS = 10.0
_BUSY = b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class BoundedServer(exposition.ThreadingWSGIServer):
    daemon_threads = True
    request_queue_size = 128  # listen backlog (socketserver's default is 5)
    max_clients = MAX_CLIENTS
    request_seconds = REQUEST_SECONDS

    def __init__(self, *args: Any, **kw: Any) -> None:
        self._slots = threading.BoundedSemaphore(self.max_clients)
        self._lock = threading.Lock()
        self._open: dict[Any, float] = {}
        self.refused = 0
        self.cut = 0
        self.errors = 0
        self._watch_stop = threading.Event()
        super().__init__(*args, **kw)  # binds (OSError when the port is taken: then no watchdog is started)
        self._watchdog = threading.Thread(target=self._watch, name="kvdash-exporter watchdog", daemon=True)
        self._watchdog.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.refused += 1
            try:
                request.settimeout(0.5)
                request.sendall(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        with self._lock:
            self._open[request] = time.monotonic() + self.request_seconds
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._done(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._done(request)

    def _done(self, request: Any) -> None:
        with self._lock:
            if self._open.pop(request, None) is None:
                return
        self._slots.release()

    def _watch(self) -> None:
        while not self._watch_stop.wait(0.25):
            now = time.monotonic()
            with self._lock:
                late = [r for r, end in self._open.items() if end < now]
            for request in late:
                self.cut += 1
                try:
                    request.shutdown(socket.SHUT_RDWR)  # the handler's next read or write fails; it ends
                except OSError:
                    pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        self.errors += 1  # a timeout or a reset: counted, never a traceback on stderr

    def server_close(self) -> None:
        self._watch_stop.set()
        super().server_close()

    def open_requests(self) -> int:
        with self._lock:
            return len(self._open)


class _Handler(exposition._SilentHandler):
    timeout = REQUEST_SECONDS  # socket operations of one request (StreamRequestHandler.setup)


def serve(port: int, addr: str, registry: Any, max_clients: int = MAX_CLIENTS,
          request_seconds: float = REQUEST_SECONDS) -> tuple[BoundedServer, threading.Thread]:
    """Serve ``registry`` at ``http://addr:port/metrics`` on a daemon thread (OSError if it cannot listen)."""
    from wsgiref.simple_server import make_server

    class Server(BoundedServer):
        pass

    Server.max_clients = max_clients
    Server.request_seconds = request_seconds
    Server.address_family, addr = exposition._get_best_family(addr, port)

    class Handler(_Handler):
        timeout = request_seconds

    httpd = make_server(addr, port, exposition.make_wsgi_app(registry), Server, handler_class=Handler)
    thread = threading.Thread(target=httpd.serve_forever, name="kvdash-exporter http", daemon=True)
    thread.start()
    return httpd, thread  # type: ignore[return-value]

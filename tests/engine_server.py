"""A loopback /metrics server that misbehaves on demand, for the engine fault tests.

Bound to 127.0.0.1 only, daemon threads, and bounded: a hang waits at most ``max_hang_s`` (or until
the server stops), a drip sends at most ``drip_bytes``.  ``mode`` can be changed while it runs, so a
test can break the engine and then fix it.
"""

from __future__ import annotations

import http.server
import threading
import time
from pathlib import Path

DATA = Path(__file__).parent / "data"
GOOD = (DATA / "vllm_v1.prom").read_bytes()
MODES = ("good", "nan", "inf", "neg-inf", "500", "garbage", "drip", "hang", "big", "usage-1.7", "other-model")


def body_for(mode: str) -> bytes:
    text = GOOD.decode()
    if mode == "nan":
        return text.replace("} 0.4213", "} NaN").replace("} 12.0", "} NaN").encode()
    if mode == "inf":
        return text.replace("} 12.0", "} +Inf").encode()
    if mode == "neg-inf":
        return text.replace("} 3.0", "} -Inf").encode()
    if mode == "usage-1.7":
        return text.replace("} 0.4213", "} 1.7").encode()
    if mode == "other-model":  # a served model kvdash has no preset for
        return text.replace("meta-llama/Llama-3.1-70B-Instruct", "acme/Mystery-13B-Instruct").encode()
    if mode == "garbage":
        return b"<html><body>502 Bad Gateway {{{ not metrics</body></html>\n"
    if mode == "big":
        return b"# " + b"x" * (5 * 2**20) + b"\n" + GOOD
    return GOOD


class FaultServer:
    def __init__(self, mode: str = "good", max_hang_s: float = 10.0, drip_every_s: float = 0.4,
                 drip_bytes: int = 20) -> None:
        assert mode in MODES
        self.mode = mode
        self.requests = 0
        self.stopped = threading.Event()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                owner.requests += 1
                mode = owner.mode
                try:
                    if mode == "hang":
                        owner.stopped.wait(max_hang_s)
                        return
                    if mode == "500":
                        self.send_response(500)
                        self.end_headers()
                        self.wfile.write(b"Internal Server Error")
                        return
                    body = body_for(mode)
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    if mode == "drip":  # 20 bytes every 0.4 s: the whole page would take minutes
                        for start in range(0, len(body), drip_bytes):
                            if owner.stopped.wait(drip_every_s):
                                return
                            self.wfile.write(body[start:start + drip_bytes])
                            self.wfile.flush()
                        return
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args):
                pass

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/metrics"

    def __enter__(self) -> FaultServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
        time.sleep(0)

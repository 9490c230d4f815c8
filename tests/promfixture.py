"""A real Prometheus server for tests and benchmarks, and an HTTP server of fixture metrics.

Prometheus is Debian's ``prometheus`` package (``.ci/run`` installs it when missing).  A missing
binary fails loudly (``PrometheusMissing``), never a silent skip.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

MISSING = ("the prometheus binary is not on PATH: install Debian's package (apt-get install prometheus); "
           ".ci/run installs it when missing")


class PrometheusMissing(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MetricsServer:
    """Serves ``pages[path]`` (text exposition) on a loopback port, in a thread."""

    def __init__(self, pages: dict[str, str | Callable[[], str]]) -> None:
        self.pages = pages
        self.hits: dict[str, int] = {}
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                page = owner.pages.get(self.path.split("?")[0])
                owner.hits[self.path] = owner.hits.get(self.path, 0) + 1
                if page is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                body = (page() if callable(page) else page).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except OSError:  # the scraper gave up (its timeout); nothing to answer
                    pass

            def log_message(self, *args: Any) -> None:
                return None

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = int(self.httpd.server_address[1])
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class Prometheus:
    """``prometheus`` on a free loopback port with ``config`` (a dict written as YAML-compatible JSON)."""

    def __init__(self, config: dict[str, Any], workdir: Path) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            raise PrometheusMissing(MISSING)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        workdir.mkdir(parents=True, exist_ok=True)
        cfg = workdir / "prometheus.yml"
        cfg.write_text(json.dumps(config, indent=1))  # JSON is YAML
        self.log = (workdir / "prometheus.log").open("w")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={cfg}", f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn",
             "--storage.tsdb.retention.time=1h", "--query.lookback-delta=30s"],
            stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, "GOMAXPROCS": "2"})
        self.workdir = workdir

    def query(self, expr: str) -> dict[str, Any]:
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback
                return dict(json.loads(resp.read()))
        except urllib.error.HTTPError as exc:  # 400/422 carry the error document; 503 while starting may not
            body = exc.read()
            try:
                return dict(json.loads(body))
            except ValueError:
                return {"status": "error", "error": f"HTTP {exc.code}: {body[:200]!r}"}

    def wait_for(self, ready: Callable[[Prometheus], bool], timeout: float = 60.0) -> None:
        """Bounded polling: ``ready(self)`` true within ``timeout`` seconds, else a failure with the log."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                if ready(self):
                    return
            except (OSError, KeyError):  # not listening yet, or an error answer while it starts
                pass
            time.sleep(0.25)
        raise TimeoutError(f"prometheus not ready within {timeout:g} s: {self.log_tail()}")

    def log_tail(self) -> str:
        self.log.flush()
        return (self.workdir / "prometheus.log").read_text()[-2000:]

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def target(address: str, instance: str, path: str, **labels: str) -> dict[str, Any]:
    """A static target whose ``instance`` label names a fake host and whose path picks its page."""
    return {"targets": [address], "labels": {"instance": instance, "__metrics_path__": path, **labels}}


def config(jobs: dict[str, list[dict[str, Any]]], interval: str = "1s", honor_labels: bool = False,
           timeout: str = "900ms") -> dict[str, Any]:
    return {"global": {"scrape_interval": interval, "scrape_timeout": timeout, "evaluation_interval": "10s"},
            "scrape_configs": [{"job_name": job, "honor_labels": honor_labels, "static_configs": targets}
                               for job, targets in jobs.items()]}


# --- exposition text of the exporters kvdash reads ------------------------------------------------

def dcgm_page(hostname: str, gpus: list[tuple[int, int, int]], model: str = "NVIDIA H200",
              instance: str | None = None) -> str:
    """DCGM exporter's framebuffer gauges (MiB) for ``gpus`` = [(used, free, reserved) MiB]."""
    extra = f',instance="{instance}"' if instance else ""
    lines = []
    for field, k in (("DCGM_FI_DEV_FB_FREE", 1), ("DCGM_FI_DEV_FB_USED", 0), ("DCGM_FI_DEV_FB_RESERVED", 2)):
        lines += [f"# HELP {field} Framebuffer memory (in MiB).", f"# TYPE {field} gauge"]
        for i, g in enumerate(gpus):
            lines.append(f'{field}{{gpu="{i}",UUID="GPU-{hostname}-{i:02d}",pci_bus_id="00000000:{i:02X}:00.0",'
                         f'device="nvidia{i}",modelName="{model}",Hostname="{hostname}"{extra}}} {g[k]}')
    return "\n".join(lines) + "\n"


def vllm_page(model: str, blocks: int, block_size: int, usage: float, running: int, waiting: int,
              old: bool = False, instance: str | None = None) -> str:
    """vLLM's /metrics: current names, or (``old``) the pre-V1 ``vllm:gpu_cache_usage_perc``."""
    extra = f',instance="{instance}"' if instance else ""
    lab = f'engine="0",model_name="{model}"{extra}'
    usage_name = "vllm:gpu_cache_usage_perc" if old else "vllm:kv_cache_usage_perc"
    return "\n".join([
        "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{lab}}} {running}.0",
        "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{{{lab}}} {waiting}.0",
        f"# TYPE {usage_name} gauge", f"{usage_name}{{{lab}}} {usage}",
        "# TYPE vllm:cache_config_info gauge",
        f'vllm:cache_config_info{{block_size="{block_size}",cache_dtype="auto",enable_prefix_caching="True",'
        f'engine="0",gpu_memory_utilization="0.9",num_cpu_blocks="None",num_gpu_blocks="{blocks}"{extra}}} 1.0',
    ]) + "\n"


def sglang_page(model: str, max_tokens: int, used: int, running: int, queued: int,
                instance: str | None = None) -> str:
    extra = f',instance="{instance}"' if instance else ""
    lab = f'model_name="{model}"{extra}'
    return "\n".join([
        "# TYPE sglang:max_total_num_tokens gauge", f"sglang:max_total_num_tokens{{{lab}}} {max_tokens}.0",
        "# TYPE sglang:num_used_tokens gauge", f"sglang:num_used_tokens{{{lab}}} {used}.0",
        "# TYPE sglang:token_usage gauge", f"sglang:token_usage{{{lab}}} {used / max_tokens}",
        "# TYPE sglang:num_running_reqs gauge", f"sglang:num_running_reqs{{{lab}}} {running}.0",
        "# TYPE sglang:num_queue_reqs gauge", f"sglang:num_queue_reqs{{{lab}}} {queued}.0",
    ]) + "\n"


# --- a synthetic fleet: N hosts x G GPUs, one vLLM engine per host ----------------------------------

def fleet_host(i: int) -> str:
    return f"gpu-node-{i + 1:03d}"


def fleet_page(hosts: int, gpus: int, down: int = 0) -> str:
    """One exposition page for a whole fleet (served with ``honor_labels``, so the ``instance`` and
    ``job`` labels in the page are kept): DCGM series and a vLLM engine for every host; the last
    ``down`` hosts publish nothing (their targets would be down)."""
    lines = []
    for h in range(hosts - down):
        name = fleet_host(h)
        used = [(120_000 + (h * 7 + g * 13) % 9_000, 0, 615) for g in range(gpus)]
        used = [(u, H200_MIB - 615 - u, r) for u, _, r in used]
        lines.append(dcgm_page(name, used, instance=f"{name}:9400"))
        lines.append(vllm_page("meta-llama/Llama-3.1-70B-Instruct", blocks=172_725, block_size=16,
                               usage=round((h % 20) / 20, 2), running=h % 50, waiting=h % 7,
                               instance=f"{name}:8000"))
    return "".join(lines)


H200_MIB = 143_771


def fleet_results(hosts: int, gpus: int, down: int = 0) -> dict[str, list[Any]]:
    """The same fleet as already-parsed query results (``{query name: [Series]}``), for tests
    that need no server: parsed with prometheus-client's own text parser."""
    from prometheus_client.parser import text_string_to_metric_families

    from kvdash.fleet.client import Series

    dcgm, engines, up = [], [], []
    for family in text_string_to_metric_families(fleet_page(hosts, gpus, down)):
        for s in family.samples:
            labels = {"__name__": s.name, **s.labels}
            (dcgm if s.name.startswith("DCGM") else engines).append(Series(labels, float(s.value)))
    for h in range(hosts):
        for job, port in (("dcgm", 9400), ("vllm", 8000)):
            up.append(Series({"__name__": "up", "job": job, "instance": f"{fleet_host(h)}:{port}"},
                             0.0 if h >= hosts - down else 1.0))
    for s in dcgm + engines:
        s.labels.setdefault("job", "dcgm" if s.labels["__name__"].startswith("DCGM") else "vllm")
    return {"dcgm_memory": dcgm, "kvdash_memory": [], "engines": engines, "targets": up}

"""kvdash exporter: Prometheus naming, exact figures, background readings (never per scrape), and a
slow engine that never delays a scrape."""

from __future__ import annotations

import http.server
import threading
import time
import urllib.request

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from kvdash.exporter.collector import ExporterState, KvdashCollector
from kvdash.live.analysis import LiveConfig
from kvdash.sources.demo import DemoSource
from tests.cli_run import run
from tests.promfixture import free_port, vllm_page

MiB = 2**20




def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(fams, name, **labels):
    for fam in fams.values():
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    raise KeyError(name)


def test_demo_metrics_follow_prometheus_naming(capsys):
    """kvdash_ prefix; counters end in _total; byte figures end in _bytes; seconds in _seconds;
    kvdash_info carries version, model, dtype, block size and the mirrored vLLM version."""
    code, out, _ = run(["exporter", "--demo", "--once", "--length", "2048", "--length", "8192"], capsys)
    assert code == 0
    fams = families(out)
    assert fams and all(name.startswith("kvdash") for name in fams)
    for fam in fams.values():
        for s in fam.samples:
            if fam.type == "counter":
                assert s.name.endswith("_total"), s.name
            if "memory" in s.name or "budget" in s.name or "weights" in s.name or "block_bytes" in s.name:
                assert s.name.endswith("_bytes"), s.name
            if "_age_" in s.name or s.name.endswith("_age"):
                assert s.name.endswith("_seconds"), s.name
    info = next(s for s in fams["kvdash_info"].samples if s.name == "kvdash_info")
    assert info.labels["vllm_version"] == "0.33" and info.labels["model"] == "Llama-3.1-70B"
    assert (info.labels["kv_dtype"], info.labels["block_size"], info.labels["tp"]) == ("bf16", "16", "8")
    assert info.labels["version"]


def test_demo_figures_exact(capsys):
    """The demo's 8 x H200 (150,754,820,096 B each) at the default --gpu-util 0.92 (vLLM 0.33's
    gpu_memory_utilization): floor(0.92 x 150,754,820,096 = 138,694,434,488.32) = 138,694,434,488 B;
    minus weights 141.2e9 / 8 = 17,650,000,000 and the default runtime reserve (issue 23: auto, Llama-3.1-70B at
    TP 8: 1.89 GiB + 2.10 GiB + 26.88 MiB x 80 layers = 2,029,372,047 + 2,254,857,830 + 2,254,857,830 =
    6,539,087,707 B) -> budget 114,505,346,781 B; // 655,360 B per block (2 x 80 layers x 8/8 KV heads x 128 x
    2 B x 16 tokens) = 174,721 blocks (174,721 x 655,360 = 114,505,154,560, remainder 192,221 < one block) =
    2,795,536 token slots. Each length takes its own reservation (no --max-reserved): 2,048 for 2,048 tokens,
    8,192 for 8,192.  2,048-token requests take 128 blocks: 174,721 // 128 = 1,365 paged, and as many contiguous
    (each reserves 2,048 slots, 128 blocks; it was 341 while 8,192 was reserved for every length); 8,192-token
    requests take 512 blocks paged: 174,721 // 512 = 341, contiguous the same."""
    code, out, _ = run(["exporter", "--demo", "--once", "--length", "2048", "--length", "8192"], capsys)
    fams = families(out)
    assert value(fams, "kvdash_gpu_memory_total_bytes", gpu="0") == 150_754_820_096
    assert value(fams, "kvdash_gpu_memory_reserved_bytes", gpu="0") == 512 * MiB
    assert value(fams, "kvdash_kv_budget_bytes") == 114_505_346_781
    assert value(fams, "kvdash_kv_pool_blocks") == 174_721
    assert value(fams, "kvdash_kv_pool_token_slots") == 2_795_536
    assert value(fams, "kvdash_kv_block_bytes") == 655_360
    assert value(fams, "kvdash_kv_requests_fit", length="2048", layout="paged") == 1_365
    assert value(fams, "kvdash_kv_requests_fit", length="2048", layout="contiguous") == 1_365
    assert value(fams, "kvdash_kv_requests_fit", length="8192", layout="paged") == 341
    assert value(fams, "kvdash_kv_requests_fit", length="8192", layout="contiguous") == 341
    assert value(fams, "kvdash_gpu_kv_pool_bytes", gpu="7") == 174_721 * 655_360
    assert value(fams, "kvdash_gpu_weights_bytes", gpu="7") == 17_650_000_000
    # the demo engine's own pool, also at vLLM's default 0.92: (138,694,434,488 - 17,650,000,000 - 4.5 GiB
    # reserve 4,831,838,208 = 116,212,596,280) // 655,360 = 177,326 blocks = 2,837,216 tokens
    assert value(fams, "kvdash_engine_kv_pool_blocks", engine="demo") == 177_326
    assert value(fams, "kvdash_engine_kv_pool_tokens", engine="demo") == 2_837_216
    assert value(fams, "kvdash_engine_pool_difference_tokens", engine="demo") == 2_837_216 - 2_795_536
    # the reserve basis, on the first line of the page and in kvdash_info
    assert "reserve auto 6.09 GiB (published, extrapolated)" in out.splitlines()[0]


def test_old_figures_reachable_with_explicit_flags(capsys):
    """The figures before one set of defaults (live/exporter at --gpu-util 0.9, --max-reserved 8192, and the
    0 B reserve before issue 23) stay reachable with explicit flags: floor(0.9 x 150,754,820,096) -
    17,650,000,000 = 118,029,338,086 B;
    // 655,360 = 180,098 blocks; 2,048-token requests: 180,098 // 128 = 1,407 paged, // 512 = 351
    contiguous."""
    code, out, _ = run(["exporter", "--demo", "--once", "--gpu-util", "0.9", "--length", "2048",
                        "--max-reserved", "8192", "--reserve", "0"], capsys)
    fams = families(out)
    assert value(fams, "kvdash_kv_budget_bytes") == 118_029_338_086
    assert value(fams, "kvdash_kv_pool_blocks") == 180_098
    assert value(fams, "kvdash_kv_requests_fit", length="2048", layout="paged") == 1_407
    assert value(fams, "kvdash_kv_requests_fit", length="2048", layout="contiguous") == 351
    procs = [s for s in fams["kvdash_gpu_process_memory_bytes"].samples if s.labels["gpu"] == "0"]
    assert len(procs) == 2 and {s.labels["pid"] for s in procs} == {"4242", "9000"}


class SlowEngine:
    """A vLLM /metrics that answers at once, or after ``delay`` seconds once ``slow`` is set."""

    def __init__(self) -> None:
        self.slow = threading.Event()
        page = vllm_page("m", blocks=1000, block_size=16, usage=0.5, running=3, waiting=1).encode()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                if owner.slow.is_set():
                    time.sleep(3.0)
                self.send_response(200)
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                try:
                    self.wfile.write(page)
                except OSError:
                    pass

            def log_message(self, *args) -> None:
                return None

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _scrape(port: int) -> tuple[float, dict]:
    started = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:  # noqa: S310
        text = resp.read().decode()
    return time.monotonic() - started, families(text)


def test_slow_engine_never_delays_a_scrape_and_readings_are_not_per_scrape():
    """The engine hangs 3 s per read (timeout 2 s); scrapes still answer within 1 s with the last good
    reading and its growing age; five scrapes take no new GPU reading (interval 60 s)."""
    engine = SlowEngine()
    state = ExporterState(DemoSource(seed=7), LiveConfig(tp=8), [engine.url], interval=0.3, engine_timeout=2.0,
                          hostname="test-host")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(KvdashCollector(state))
    server, _ = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        state.start()
        deadline = time.monotonic() + 10
        while state.engines[0].good is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert state.engines[0].good is not None
        engine.slow.set()
        time.sleep(1.2)  # the engine thread is now stuck in a slow read
        took, fams = _scrape(server.server_port)
        assert took < 1.0  # a scrape that waited on the engine would take its 2 s timeout
        assert value(fams, "kvdash_engine_kv_pool_tokens", engine=engine.url) == 16_000  # 1,000 blocks x 16
        assert value(fams, "kvdash_engine_requests_running", engine=engine.url) == 3
        assert value(fams, "kvdash_engine_reading_age_seconds", engine=engine.url) >= 1.0
        assert value(fams, "kvdash_reading_age_seconds") < 1.0  # the GPU thread is not held up
        state.interval = 60.0
        time.sleep(0.5)  # the GPU loop is now waiting out the long interval
        before = value(_scrape(server.server_port)[1], "kvdash_refreshes_total")
        for _ in range(5):
            _scrape(server.server_port)
        assert value(_scrape(server.server_port)[1], "kvdash_refreshes_total") == before
    finally:
        server.shutdown()
        server.server_close()
        state.stop_event.set()
        engine.close()


def test_port_in_use_is_one_line(capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code, _, err = run(["exporter", "--demo", "--port", str(port)], capsys)
    assert code == 2 and err.count("\n") == 1 and "--port" in err and str(port) in err


def test_bad_options_are_one_line(capsys):
    code, _, err = run(["exporter", "--demo", "--interval", "0.01"], capsys)
    assert code == 2 and "--interval" in err
    code, _, err = run(["exporter", "--demo", "--port", "70000"], capsys)
    assert code == 2 and "--port" in err


def test_without_nvml_says_how_to_run_the_demo(capsys, monkeypatch):
    from kvdash.sources import nvml
    from kvdash.sources.base import SourceUnavailable

    def unavailable(*a, **k):
        raise SourceUnavailable("NVML could not start: driver not loaded")

    monkeypatch.setattr(nvml, "NVMLSource", unavailable)
    code, _, err = run(["exporter", "--port", str(free_port())], capsys)
    assert code == 1 and "kvdash exporter --demo" in err and err.count("\n") == 1


def test_a_failing_gpu_source_is_logged_once_per_new_error():
    """A helper's trial: the exporter counted its failed GPU readings (kvdash_refresh_errors_total) and said nothing, so
    a model it could not analyse (mamba-130m's ZeroDivisionError, since mended) looked like a working exporter with
    no KV series.  It now logs one line on stderr per new error, none while the same error repeats, and one when the
    readings resume."""

    class Flaky(DemoSource):
        fail = "NVML: GPU is lost"

        def read(self):  # type: ignore[no-untyped-def]
            if self.fail:
                raise RuntimeError(self.fail)
            return super().read()

    lines: list[str] = []
    source = Flaky(seed=7)
    state = ExporterState(source, LiveConfig(tp=8), [], hostname="h", log=lines.append)
    state.refresh_gpus()
    state.refresh_gpus()  # the same error: not said again
    source.fail = "NVML: Unknown Error"
    state.refresh_gpus()
    source.fail = ""
    state.refresh_gpus()
    state.refresh_gpus()
    assert 3 == state.errors and 2 == state.refreshes and [
        "kvdash exporter: GPU reading failed: NVML: GPU is lost (kvdash_refresh_errors_total counts them; the last "
        "good figures stay published, kvdash_reading_age_seconds growing)",
        "kvdash exporter: GPU reading failed: NVML: Unknown Error (kvdash_refresh_errors_total counts them; the last "
        "good figures stay published, kvdash_reading_age_seconds growing)",
        "kvdash exporter: GPU readings resumed"] == lines


def test_the_exporter_stops_on_sigterm_in_one_line():
    """A helper's trial: SIGTERM, SIGHUP or Ctrl-C ended the exporter with nothing said.  A service, it stops with one
    line naming the signal and exit 0 (a service manager's success), its port closed."""
    import signal
    import subprocess

    from tests.cli_run import KVDASH, started_with

    for sig in (signal.SIGTERM, signal.SIGHUP):
        proc = subprocess.Popen([*KVDASH, "exporter", "--demo", "--host", "127.0.0.1", "--port", "0"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=started_with)
        assert proc.stdout is not None and "serving http://127.0.0.1:" in proc.stdout.readline()
        # a helper's audit: one 117-character line whose "(published)" kvdash_info labelled "(published, extrapolated)"
        assert "  reserve auto 6.09 GiB (published, extrapolated); readings every 5 s, demo\n" == proc.stdout.readline()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
        assert 0 == proc.returncode and f"kvdash exporter: stopped by {signal.Signals(sig).name}\n" == err


def test_each_length_is_published_on_its_own_and_each_engine_once(capsys):
    """A helper's trial: adding --length 4096 changed the 825-token contiguous figure under the same labels (1,365 ->
    682: the reservation silently became 4,096 for every length), and an engine given twice published every series
    twice with the same labels.  Without --max-reserved each length now takes its own reservation (published as
    kvdash_kv_contiguous_reserved_tokens), and an engine given twice is refused."""
    from tests.cli_run import run

    def page(*args: str) -> dict[tuple[str, ...], float]:
        code, out, _ = run(["exporter", "--demo", "--once", *args], capsys)
        assert 0 == code
        return {(s.name, *sorted(s.labels.items())): s.value for f in text_string_to_metric_families(out)
                for s in f.samples if s.name.startswith(("kvdash_kv_requests_fit", "kvdash_kv_contiguous"))}

    alone, both = page("--length", "825"), page("--length", "825", "--length", "4096")
    assert alone.items() <= both.items() and 1365 == alone[("kvdash_kv_requests_fit", ("layout", "contiguous"),
                                                             ("length", "825"))]
    assert 2048 == both[("kvdash_kv_contiguous_reserved_tokens", ("length", "825"))]
    assert 4096 == both[("kvdash_kv_contiguous_reserved_tokens", ("length", "4096"))]
    code, _, err = run(["exporter", "--demo", "--once", "--engine", "127.0.0.1:9", "--engine",
                        "http://127.0.0.1:9/metrics"], capsys)
    assert 2 == code and "each engine once (it is given twice)" in err


def test_a_host_it_cannot_listen_on_is_the_hosts_fault(capsys):
    """A helper's trial: --host 999.1.1.1 was refused as '--port: 0 is not allowed'.  A name that does not resolve or an
    address not on this machine names --host; a port in use still names --port."""
    import socket

    from tests.cli_run import run

    code, _, err = run(["exporter", "--demo", "--host", "999.1.1.1", "--port", "0"], capsys)
    assert 2 == code and err.startswith("kvdash: error: --host: '999.1.1.1' is not allowed; cannot listen on")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = run(["exporter", "--demo", "--host", "127.0.0.1", "--port", str(port)], capsys)
    assert 2 == code and err.startswith(f"kvdash: error: --port: {port} is not allowed; cannot listen on")

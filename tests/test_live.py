"""kvdash live: the NVML layer (stubbed, faults included), demo, replay, engine metrics, analysis, the app."""

from __future__ import annotations

import http.server
import json
import threading
import time
import types
from pathlib import Path

import pytest

from kvdash.live.analysis import FREE, RESERVED, TAIL, TOKENS, LiveConfig, analyze, block_map
from kvdash.sources.base import GPUReading, Snapshot, SourceUnavailable
from kvdash.sources.demo import DemoSource
from kvdash.sources.engine import fetch, parse_prometheus, reading_from_samples
from kvdash.sources.nvml import NO_PERMISSION, NVMLSource
from kvdash.sources.replay import ReplaySource
from tests.cli_run import run

DATA = Path(__file__).parent / "data"
GiB = 2**30




# --- a stub of the NVML binding, one behaviour per function ----------------------------------------

def fake_nvml(**faults):
    """A pynvml look-alike with two GPUs; ``faults`` maps a function name to an exception class name
    raised for GPU 1 (or for every call with ``all_``)."""
    m = types.SimpleNamespace()

    class NVMLError(Exception):
        def __init__(self, value=0):
            super().__init__(value)
            self.value = value

    m.NVMLError = NVMLError
    for name in ("GpuIsLost", "NotSupported", "NoPermission", "FunctionNotFound", "NotFound", "InvalidArgument",
                 "Unknown", "ArgumentVersionMismatch", "LibraryNotFound", "DriverNotLoaded"):
        setattr(m, f"NVMLError_{name}", type(f"NVMLError_{name}", (NVMLError,), {}))
    m.nvmlMemory_v2 = 0x2000028
    m.NVML_TEMPERATURE_GPU = 0

    def maybe(fn_name, handle=None):
        fault = faults.get(fn_name)
        if fault and (handle in (None, 1) or faults.get("all_")):
            raise getattr(m, f"NVMLError_{fault}")()

    def init():
        maybe("init")

    m.nvmlInit = init
    m.nvmlShutdown = lambda: None
    m.nvmlErrorString = lambda v: "stub error"
    m.nvmlSystemGetDriverVersion = lambda: b"580.159.03"
    m.nvmlDeviceGetCount = lambda: 2
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetName = lambda h: b"NVIDIA H200"
    m.nvmlDeviceGetUUID = lambda h: f"GPU-{h}"

    def memory(h, version=None):
        if version is not None:
            maybe("memory_v2", h)
            return types.SimpleNamespace(total=143771 * 2**20, used=100 * GiB, free=40 * GiB, reserved=GiB // 2)
        maybe("memory_v1", h)
        if faults.get("unified") and h == 1:
            return types.SimpleNamespace(total=0, used=0, free=0)
        return types.SimpleNamespace(total=143771 * 2**20, used=100 * GiB, free=40 * GiB)

    m.nvmlDeviceGetMemoryInfo = memory

    def util(h):
        maybe("util", h)
        return types.SimpleNamespace(gpu=77, memory=40)

    m.nvmlDeviceGetUtilizationRates = util
    m.nvmlDeviceGetTemperature = lambda h, s: 41
    m.nvmlDeviceGetPowerUsage = lambda h: 350_000
    m.nvmlDeviceGetEnforcedPowerLimit = lambda h: 700_000

    def procs(h):
        maybe("procs", h)
        return [types.SimpleNamespace(pid=1, usedGpuMemory=99 * GiB)]

    m.nvmlDeviceGetComputeRunningProcesses = procs
    m.nvmlDeviceGetGraphicsRunningProcesses = lambda h: []
    return m


class TestNVMLLayer:
    def test_full_reading(self):
        """Every field read, with units converted (mW -> W) and the v2 reserved memory."""
        snap = NVMLSource(fake_nvml()).read()
        g = snap.gpus[0]
        assert (2, "580.159.03") == (len(snap.gpus), snap.driver)
        assert (143771 * 2**20, 100 * GiB, GiB // 2, "v2") == (g.total_bytes, g.used_bytes, g.reserved_bytes,
                                                              g.memory_api)
        assert (77, 41, 350.0, 700.0) == (g.utilization_percent, g.temperature_c, g.power_w, g.power_limit_w)
        assert 99 * GiB == g.processes[0].used_bytes

    def test_no_v2_falls_back_to_v1(self):
        snap = NVMLSource(fake_nvml(memory_v2="FunctionNotFound", all_=True)).read()
        assert ["v1", "v1"] == [g.memory_api for g in snap.gpus]
        assert all(g.reserved_bytes is None and g.total_bytes for g in snap.gpus)

    def test_not_supported_field_is_na(self):
        g = NVMLSource(fake_nvml(util="NotSupported")).read().gpus[1]
        assert g.utilization_percent is None and g.total_bytes

    def test_lost_gpu_is_a_marked_row(self):
        """GpuIsLost on one GPU: a LOST row, the other GPU still read."""
        snap = NVMLSource(fake_nvml(util="GpuIsLost")).read()
        assert [False, True] == [g.lost for g in snap.gpus]
        assert snap.gpus[0].total_bytes

    def test_process_list_denied(self):
        g = NVMLSource(fake_nvml(procs="NoPermission")).read().gpus[1]
        assert () == g.processes and NO_PERMISSION == g.processes_note

    def test_unified_memory(self):
        g = NVMLSource(fake_nvml(memory_v2="NotSupported", unified=True, all_=True)).read().gpus[1]
        assert g.unified_memory and g.total_bytes is None

    def test_no_driver(self):
        with pytest.raises(SourceUnavailable, match="NVML could not start"):
            NVMLSource(fake_nvml(init="DriverNotLoaded"))

    def test_cli_without_nvml_one_line_exit_1(self, capsys, monkeypatch):
        """No NVIDIA driver or library: one line saying so and how to run --demo; exit 1."""
        import kvdash.sources.nvml as nvml_mod

        monkeypatch.setattr(nvml_mod, "_load", lambda: fake_nvml(init="LibraryNotFound"))
        code, out, err = run(["live", "--once"], capsys)
        assert 1 == code and 1 == len(err.strip().splitlines())
        assert "kvdash live --demo" in err and "Traceback" not in err


class TestDemoAndReplay:
    def test_demo_deterministic(self):
        a = [DemoSource(seed=3).read().dumps() for _ in range(1)]
        s1, s2 = DemoSource(seed=3), DemoSource(seed=3)
        seq1 = [s1.read().dumps() for _ in range(20)]
        seq2 = [s2.read().dumps() for _ in range(20)]
        assert seq1 == seq2 and a[0] == seq1[0]
        assert seq1 != [DemoSource(seed=4).read().dumps() for _ in range(20)]

    def test_demo_memory_moves(self):
        s = DemoSource(seed=1)
        used = {s.read().gpus[0].used_bytes for _ in range(30)}
        assert len(used) > 5

    def test_record_and_replay(self, tmp_path, capsys):
        out = tmp_path / "rec.jsonl"
        code, text, _ = run(["record", "--demo", "--count", "3", "--interval", "0.1", "--out", str(out)], capsys)
        assert 0 == code and "3 snapshots" in text
        replay = ReplaySource(out)
        snaps = [replay.read() for _ in range(4)]
        assert [s.time for s in snaps[:3]] == sorted(s.time for s in snaps[:3])
        replay.close()
        assert "end" in snaps[3].source and 8 == len(snaps[0].gpus)

    def test_replay_bad_file(self, tmp_path, capsys):
        """A line that is not JSON: one line naming the file, the line number and what is allowed, exit 2."""
        bad = tmp_path / "bad.jsonl"
        bad.write_text('not json\n{"time": 1}\n')
        code, _, err = run(["live", "--replay", str(bad), "--once"], capsys)
        assert 2 == code and 1 == len(err.strip().splitlines())
        assert err.startswith(f"kvdash: error: --replay: '{bad}' is not allowed; line 1, line: 'not json")
        assert "expected one JSON object per line" in err

    @pytest.mark.parametrize("args,expected", [
        (["live", "--replay", "REC", "--once", "--seed", "8"],
         "--seed: 8 is not allowed; seeds --demo or --simulate only: give one of them too"),
        (["live", "--replay", "REC", "--once", "--gpus", "4"],
         "--gpus: 4 is not allowed; shapes the --demo GPUs only: give --demo too"),
        (["live", "--replay", "REC", "--json", "--engine-timeout", "3"],
         "--engine-timeout: 3.0 is not allowed; bounds each read of --engine only: give --engine too"),
        (["live", "--replay", "REC", "--once", "--interval", "2"],
         "--interval: 2.0 is not allowed; read by the dashboard only, not with --once or --json"),
        (["live", "--demo", "--json", "--snapshot-dir", "."],
         "--snapshot-dir: '.' is not allowed; read by the dashboard only, not with --once or --json"),
        (["record", "--out", "OUT", "--seed", "3"], "--seed: 3 is not allowed; seeds --demo only: give --demo too"),
        (["exporter", "--once", "--gpus", "3"], "--gpus: 3 is not allowed; shapes the --demo GPUs only"),
        (["exporter", "--once", "--demo", "--engine-timeout", "4"], "--engine-timeout: 4.0 is not allowed"),
    ])
    def test_an_option_this_run_does_not_read_is_refused(self, tmp_path, capsys, args, expected):
        """``live --replay r --seed 8`` showed seed 7's recording and said nothing: an option the run does not
        read is one line, exit 2 (typed at its default it changes nothing, and runs)."""
        rec = tmp_path / "rec.jsonl"
        assert 0 == run(["record", "--demo", "--count", "1", "--out", str(rec)], capsys)[0]
        args = [str(rec) if a == "REC" else str(tmp_path / "out.jsonl") if a == "OUT" else a for a in args]
        code, out, err = run(args, capsys)
        assert (2, "") == (code, out) and err.startswith(f"kvdash: error: {expected}"), err
        assert 1 == len(err.strip().splitlines()) and not (tmp_path / "out.jsonl").exists()
        at_default = [a for a in args[:-1]] + [{"8": "7", "4": "8", "3": "7"}.get(args[-1], args[-1])]
        if args[-2] in ("--seed", "--gpus") and args[0] == "live":
            assert 0 == run(at_default, capsys)[0]  # the default typed out: read as not given

    def test_seed_and_gpus_are_read_where_they_shape_a_run(self, tmp_path, capsys):
        code, out, _ = run(["live", "--demo", "--once", "--seed", "9", "--gpus", "2"], capsys)
        assert 0 == code and out.startswith("demo (seed 9)")
        # the fleet view's --once reads --interval as its reading deadline (tests/test_hostile.py), so it is allowed
        code, _, err = run(["live", "--prometheus", "http://127.0.0.1:9", "--once", "--interval", "0.5"], capsys)
        assert 1 == code and "not allowed" not in err


# --- engine metrics --------------------------------------------------------------------------

class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


def serve(body: bytes, delay: float = 0.0, status: int = 200):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            time.sleep(delay)
            try:
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, *args):
            pass

    server = _Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def stop(server) -> None:
    server.shutdown()
    server.server_close()


class TestEngineMetrics:
    @pytest.mark.parametrize("name,kind,usage,running,waiting,total", [
        ("vllm_v1.prom", "vllm", 0.4213, 12, 3, 90513 * 16),
        ("vllm_old.prom", "vllm", 0.25, 7, 0, 4096 * 16),
        ("sglang.prom", "sglang", 0.35, 21, 4, 1_200_000),
    ])
    def test_parse_recorded(self, name, kind, usage, running, waiting, total):
        """Recorded /metrics pages of vLLM (current and older names) and SGLang."""
        server = serve((DATA / name).read_bytes())
        try:
            r = fetch(f"127.0.0.1:{server.server_address[1]}", timeout=5)
        finally:
            stop(server)
        assert "" == r.error
        assert (kind, running, waiting, total) == (r.kind, r.running, r.waiting, r.total_tokens)
        assert usage == pytest.approx(r.kv_usage)

    def test_vllm_prefix_hit_rate_and_preemptions(self):
        r = reading_from_samples("x", parse_prometheus((DATA / "vllm_v1.prom").read_text()))
        assert 0.625 == pytest.approx(r.prefix_hit_rate) and 5 == r.preemptions and 16 == r.block_size

    def test_down(self):
        server = serve(b"")
        port = server.server_address[1]
        stop(server)
        r = fetch(f"http://127.0.0.1:{port}/metrics", timeout=1)
        assert r.error.startswith("unreachable")

    def test_slow(self):
        server = serve(b"vllm:num_requests_running 1\n", delay=1.5)
        try:
            r = fetch(f"127.0.0.1:{server.server_address[1]}", timeout=0.3)
        finally:
            stop(server)
        assert "timed out" in r.error

    @pytest.mark.parametrize("body,words", [(b"<html>nope</html>", "not Prometheus"),
                                             (b"\xff\xfe garbage", "not Prometheus"),
                                             (b"foo 1\n", "no vLLM, SGLang or LMCache")])
    def test_garbage(self, body, words):
        server = serve(body)
        try:
            r = fetch(f"127.0.0.1:{server.server_address[1]}", timeout=5)
        finally:
            stop(server)
        assert words in r.error

    def test_http_error(self):
        server = serve(b"", status=503)
        try:
            r = fetch(f"127.0.0.1:{server.server_address[1]}", timeout=5)
        finally:
            stop(server)
        assert "HTTP 503" in r.error


# --- analysis ---------------------------------------------------------------------------------

def two_gpus(a_total: int, b_total: int) -> Snapshot:
    return Snapshot(time=0, source="test", gpus=(GPUReading(0, "A", total_bytes=a_total, used_bytes=0),
                                                 GPUReading(1, "B", total_bytes=b_total, used_bytes=0)))


class TestAnalysis:
    def test_pool_is_smallest_rank(self):
        """TP 2 over GPUs of 80 GiB and 40 GiB: the 40 GiB rank decides.
        Llama-3.1-8B at TP 2: 4 heads x 256 x 2 B x 32 layers = 65,536 B/token; block = 1 MiB.
        Budget at the default --gpu-util 0.92 (vLLM 0.33's): floor(42,949,672,960 x 0.92 = 39,513,699,123.2)
        - 16.06e9 / 2 = 39,513,699,123 - 8,030,000,000 = 31,483,699,123 B // 1,048,576 -> 30,025 blocks;
        a 1,024-token request takes 64 blocks: 30,025 // 64 = 469 paged."""
        cfg = LiveConfig(model="llama-3.1-8b", tp=2, lengths=(1024,), max_reserved=4096)
        kv = analyze(two_gpus(80 * GiB, 40 * GiB), cfg)
        assert 1 == kv["tight_gpu"] and 2**20 == kv["block_bytes"]
        assert (40 * GiB * 92 // 100 - 8_030_000_000) // 2**20 == kv["pool_blocks"] == 30_025
        assert 30_025 // 64 == kv["paged_requests"] == 469

    def test_hybrid_state_shown_fixed(self):
        """Jamba on an explicit 12 GiB: the block is raised 16 -> 80 as vLLM 0.33 does, 9,830 blocks; a request
        of 2,048 tokens holds 26 attention blocks + 14 state blocks (7 state groups x 2 in align mode) ->
        9,830 // 40 = 245 requests; the fixed state (14 x 1,310,720 B) is its own row of the panel."""
        from kvdash.core.model import load_config
        from kvdash.render.live_view import kv_table

        arch = load_config(Path(__file__).parent / "data" / "configs" / "jamba-1.5-mini" / "config.json")
        cfg = LiveConfig(arch=arch, tp=1, budget_mode="explicit", budget=12 * GiB, lengths=(2048,),
                         max_reserved=4096)
        kv = analyze(two_gpus(80 * GiB, 80 * GiB), cfg)
        assert (80, 9_830, 245) == (kv["block_size"], kv["pool_blocks"], kv["paged_requests"])
        assert 14 * 1_310_720 == kv["state_bytes_per_request"]
        assert "state per request (fixed)" in kv_table(kv).plain

    def test_explicit_budget(self):
        cfg = LiveConfig(model="tutorial-gqa-80l", tp=1, budget_mode="explicit", budget=12 * GiB, lengths=(825,),
                         max_reserved=2048)
        kv = analyze(two_gpus(80 * GiB, 80 * GiB), cfg)
        assert (2457, 47, 19) == (kv["pool_blocks"], kv["paged_requests"], kv["contiguous_requests"])

    def test_engine_budget_and_comparison(self):
        """The engine's own pool as the budget; then compared with kvdash's vLLM-rule pool."""
        text = (DATA / "vllm_v1.prom").read_text()
        eng = reading_from_samples("x", parse_prometheus(text))
        cfg = LiveConfig(model="llama-3.1-70b", tp=8, budget_mode="engine", lengths=(2048,), max_reserved=8192)
        kv = analyze(two_gpus(80 * GiB, 80 * GiB), cfg, eng)
        assert 90_513 == kv["pool_blocks"]
        kv2 = analyze(Snapshot(0, "t", tuple(GPUReading(i, "H", total_bytes=85_520_809_984, used_bytes=0)
                                             for i in range(8))), LiveConfig(model="llama-3.1-70b"), eng)
        assert kv2["engine"]["engine_tokens"] == 90_513 * 16 and "difference_tokens" in kv2["engine"]

    def test_lost_gpu_skipped(self):
        snap = Snapshot(0, "t", (GPUReading(0, "x", lost=True), GPUReading(1, "B", total_bytes=80 * GiB, used_bytes=0)))
        kv = analyze(snap, LiveConfig(model="llama-3.1-8b", tp=1, lengths=(1024,), max_reserved=4096))
        assert 1 == kv["tight_gpu"]


class TestBlockMap:
    def test_paged_by_block(self):
        """20-token requests in 8 blocks of 16, one block per cell: four fit, each a full block and a tail."""
        assert [TOKENS, TAIL] * 4 == block_map(8, 16, (20,), 64, 8, False, 16)
        assert [TOKENS, TAIL, TOKENS, TAIL, FREE] == block_map(5, 16, (20,), 64, 8, False, 16)

    def test_contiguous_by_block(self):
        """Reserving 64 slots for 20 tokens: each request 1 cell of tokens (+4 into the next) then reserved."""
        assert [TOKENS, RESERVED, RESERVED, RESERVED, TOKENS, RESERVED, RESERVED, RESERVED] == \
            block_map(8, 16, (20,), 64, 8, True, 16)

    def test_whole_pool_scale(self):
        cells = block_map(1000, 16, (825,), 2048, 50, False)
        assert 50 == len(cells) and cells[0] == TOKENS and cells[-1] == FREE


# --- the app -----------------------------------------------------------------------------------

def make_app(tmp_path=None, **kw):
    from kvdash.tui.app import LiveApp

    return LiveApp(DemoSource(seed=7), LiveConfig(), interval=3600, autopoll=False,
                   snapshot_dir=tmp_path or Path("."), **kw)


async def test_app_keys(tmp_path):
    """Keys change model, dtype, block size, length, zoom and pause; s writes JSON and Markdown."""
    app = make_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        assert app.kv["ok"] and app.kv["model"] == "Llama-3.1-70B"
        await pilot.press("d")
        assert app.config.kv_dtype == "fp8"
        await pilot.press("b")
        assert app.config.block_size == 32
        await pilot.press("l")
        assert app.config.lengths == (1024,)  # from the default 825 to the next length of LENGTHS
        await pilot.press("z", "p")
        assert app.view == 1 and app.paused
        await pilot.press("m")
        assert app.config.model != "llama-3.1-70b"
        await pilot.press("s")
        await pilot.pause()
        written = sorted(p.suffix for p in tmp_path.iterdir())
        assert [".json", ".md"] == written
        data = json.loads(next(tmp_path.glob("*.json")).read_text())
        assert data["kv_pool"]["kv_dtype"] == "fp8" and len(data["snapshot"]["gpus"]) == 8
        await pilot.press("question_mark")
        await pilot.pause()
        assert app.screen.__class__.__name__ == "HelpScreen"
        await pilot.press("escape", "q")


class SlowSource(DemoSource):
    """A demo source whose reads take longer than the poll interval, recording overlapping reads."""

    def __init__(self) -> None:
        super().__init__(seed=1)
        self.active = 0
        self.max_active = 0
        self.reads = 0
        self.lock = threading.Lock()

    def read(self):
        with self.lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        time.sleep(0.15)  # slower than the 0.1 s interval
        snap = super().read()
        with self.lock:
            self.active -= 1
            self.reads += 1
        return snap


async def test_app_polls_without_overlap():
    """Reads slower than the interval never overlap, and keys are still handled meanwhile."""
    from kvdash.tui.app import LiveApp

    source = SlowSource()
    app = LiveApp(source, LiveConfig(), interval=0.1)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(1.2)
        await pilot.press("d")
        assert app.config.kv_dtype == "fp8"
        await pilot.pause(0.5)
    assert source.reads >= 4 and 1 == source.max_active


def _visible(app, selector: str) -> bool:
    """The widget is laid out inside the screen (not scrolled away, not cut by the footer)."""
    region = app.query_one(selector).region
    return region.height > 0 and region.y >= 0 and region.bottom <= app.size.height - 1


async def test_layout_80x24_every_gpu_kv_summary_and_footer():
    """Regression: at 80x24 only 7 of 8 GPUs showed, the KV figures were off-screen and the footer
    was cut ("p p▏", no s or ?).  Now: 8 GPU lines + a header (9 rows) inside the screen, the KV
    summary (pool, requests paged and contiguous, engine usage) below them, the footer with
    v (details), s and ?, and v switches to the details view (block map, processes).
    Figures (defaults: 0.92, 825 tokens, reservation 2,048): floor(0.92 x 150,754,820,096) - 17,650,000,000
    = 121,044,434,488 B // 655,360 = 184,699 blocks; 825 tokens take 52 blocks: 184,699 // 52 = 3,551 paged;
    2,048 reserved take 128: 184,699 // 128 = 1,442 contiguous."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        gpus = app.query_one("#gpus")
        assert 9 == gpus.region.height and _visible(app, "#gpus")
        assert _visible(app, "#kv")
        kv = str(app.query_one("#kv").render())
        assert "184,699 blocks" in kv and "3,551 x 825 tokens paged, 1,442 contiguous" in kv and "KV 54.5%" in kv
        assert all(line.count("\n") == 0 for line in str(gpus.render()).splitlines())
        footer_keys = {key for key, b in app.active_bindings.items() if b.binding.show}
        assert {"v", "s", "question_mark", "q"} <= footer_keys
        assert not app.query_one("#map").display  # the block map waits one key away
        await pilot.press("v")
        await pilot.pause()
        assert app.details and app.query_one("#d-usage").content.plain.startswith("Engine now:")
        assert app.query_one("#d-map").content.renderables[0].plain.startswith("Analytical block map")
        assert "python3 profile_kernels.py" in str(app.query_one("#d-procs").render())


async def test_layout_120x40_block_map_visible_and_processes_fill():
    """At 120x40 the block map is on the overview; the process list takes the rows left."""
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert _visible(app, "#map") and _visible(app, "#procs")
        box = app.query_one("#procs-box")
        assert box.region.bottom == app.query_one("#status").region.y  # down to the status line
        assert app.query_one("#procs").region.height == box.region.height  # 8 rows listed, 3 more named


async def test_layout_200x60_processes_take_the_height():
    """Regression: at 200x60 the process list stopped at 10 rows with 35 empty.  All 11 demo
    processes are listed (header + 11 rows), and the block map is beside them."""
    app = make_app()
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.pause()
        assert 12 == len(str(app.query_one("#procs").render()).splitlines())
        assert _visible(app, "#map-wide") and app.has_class("wide")


def test_gpu_columns_fit_the_width():
    """Every GPU one line at any width: 80 columns keep GPU, name, memory, bar, free, rsvd, util,
    temp, W, procs; 60 keep GPU, name, memory, bar, util; never wider than asked (from 40 up)."""
    from kvdash.render.live_view import gpu_table

    snap = DemoSource(seed=7).read()
    for width in (40, 60, 78, 118, 198):
        lines = gpu_table(snap, width=width).plain.splitlines()
        assert 9 == len(lines) and max(len(x) for x in lines) <= width
    assert "free  rsvd util temp    W procs" in gpu_table(snap, width=78).plain.splitlines()[0]


def test_bars_coloured_by_load():
    """nvitop's thresholds: under 60 % green, under 85 % yellow, from 85 % red."""
    from kvdash.render.live_view import bar, load_style

    assert ["green", "green", "yellow", "yellow", "red"] == [load_style(x) for x in (0, 0.59, 0.6, 0.849, 0.85)]
    assert "red" == str(bar(0.9, 10).spans[0].style)


def test_snapshot_80x24(snap_compare):
    """The dashboard at 80 x 24: every GPU, the KV summary, the footer keys."""
    assert snap_compare(make_app(), terminal_size=(80, 24))


def test_snapshot_80x24_details(snap_compare):
    """The details view at 80 x 24 (v): the engine's usage, the block maps."""
    assert snap_compare(make_app(), terminal_size=(80, 24), press=["v"])


def test_snapshot_120x40(snap_compare):
    """At 120 x 40 the block map and the processes join the overview."""
    assert snap_compare(make_app(), terminal_size=(120, 40))


def test_snapshot_200x60(snap_compare):
    """At 200 x 60: two columns, processes take the height left."""
    assert snap_compare(make_app(), terminal_size=(200, 60))


def test_once_and_json(capsys):
    code, out, _ = run(["live", "--demo", "--once"], capsys)
    assert 0 == code and "Llama-3.1-70B" in out and "paged / contiguous" in out
    code, out, _ = run(["live", "--demo", "--json", "--group", "200,825,1525", "--max-reserved", "2048"], capsys)
    data = json.loads(out)
    assert 8 == len(data["snapshot"]["gpus"]) and data["kv_pool"]["lengths"] == [200, 825, 1525]
    assert data["kv_pool"]["engine"]["engine_tokens"] > 0


@pytest.mark.parametrize("args,field", [(["--interval", "0.01"], "--interval"), (["--model", "nope"], "--model"),
                                        (["--tp", "3"], "--tp"), (["--budget-mode", "magic"], "--budget-mode")])
def test_live_bad_input(args, field, capsys):
    code, _, err = run(["live", "--demo", "--once", *args], capsys)
    assert 2 == code and field in err and 1 == len(err.strip().splitlines())


def _cli_config(model: str):
    """live's configuration as the command line builds it (--reserve auto, every other option at its default)."""
    from kvdash import defaults as D
    from kvdash.commands.live import live_config

    return live_config(model, None, D.KV_DTYPE, "auto", D.LIVE_TP, None, None, D.RESERVE, None, None, (D.LENGTH,),
                       None, "vllm", False)


async def test_model_key_takes_the_new_models_reserve(tmp_path):
    """m under --reserve auto: the pool of the model switched to takes that model's own reserve (it kept the
    previous model's: Llama-3.1-70B's 6.09 GiB at TP 8 shown for Llama-3.1-8B, whose own is 4.83 GiB), the same
    figures `kvdash live --demo -m llama-3.1-8b` starts with; a reserve given as a size stays as given."""
    from dataclasses import replace

    from kvdash.tui.app import LiveApp

    start, target = _cli_config("llama-3.1-70b"), _cli_config("llama-3.1-8b")
    assert start.reserve_basis and start.reserve != target.reserve
    app = LiveApp(DemoSource(seed=7), start, interval=3600, autopoll=False, snapshot_dir=tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        app.set_model("llama-3.1-8b")
        await pilot.pause()
        assert (app.config.reserve, app.config.reserve_basis) == (target.reserve, target.reserve_basis)
        # the pool the dashboard shows is the one `live -m llama-3.1-8b` computes on the same snapshot
        assert app.kv["pool_blocks"] == analyze(app.snapshot, target)["pool_blocks"]
        await pilot.press("q")

    from kvdash.live.analysis import for_model

    given = replace(start, reserve=3 * 2**30, reserve_basis="")
    assert for_model(given, "llama-3.1-8b").reserve == 3 * 2**30


async def test_block_key_never_changes_the_engines_line(tmp_path):
    """b changes kvdash's pool, never the engine's figures (the README's promise): the demo engine reports 177,326
    blocks of 16; at kvdash's block 32 the overview and the details still show the engine's own 177,326 blocks of
    16 (they showed its tokens in kvdash's blocks: 88,663) beside kvdash's pool in blocks of 32."""
    from kvdash.render.live_view import engine_blocks, engine_usage_map, kv_summary

    app = make_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        await pilot.press("b")
        await pilot.pause()
        assert app.config.block_size == 32
        used, pool, size = engine_blocks(app.kv["engine"])
        assert (pool, size) == (177_326, 16) and 0 < used < pool
        assert f"= {used:,}/177,326 blocks of 16 |" in kv_summary(app.kv).plain
        details = engine_usage_map(app.kv, 80).plain
        assert details.startswith(f"Engine now: {used:,} of its 177,326 blocks of 16 used")
        assert f"kvdash's pool {app.kv['pool_blocks']:,} blocks of 32" in details
        await pilot.press("q")


def test_an_attention_free_model_is_analysed_live(capsys):
    """A helper's trial: `kvdash live --demo --once --model <a Mamba config>` ended in ZeroDivisionError (token slots
    divided by the pool's attention groups, of which a Mamba pool has none) and `kvdash exporter` counted only refresh
    errors for it.  mamba-130m on the demo's eight H200s at TP 8: a block is one state group of all 24 layers, each
    layer's state 58,368 B / 8 ranks = 7,296 B, so 175,104 B; 763,301 of them; no traceback, exit 0."""
    from tests.cli_run import run

    code, out, err = run(["live", "--demo", "--once", "--json", "--model", "tests/data/configs/mamba-130m"], capsys)
    assert 0 == code and "Traceback" not in err
    kv = json.loads(out)["kv_pool"]
    assert kv["ok"] and 8 == kv["tp"] and 763_301 == kv["pool_blocks"] and 24 * 58_368 // 8 == kv["block_bytes"]
    assert kv["token_slots"] == 763_301 * kv["block_size"]  # blocks x block size, as core.point counts them


def test_once_text_has_no_trailing_spaces(monkeypatch, capsys):
    """A helper's trial: `kvdash live --demo --once` at 80 columns ended 7 lines in a space (rich's wrapped prose: the
    reserve paragraph, the memory legend); printed through commands.common.Prose now, as simulate's prose is.  Every
    line also fits the 80 columns (in characters)."""
    from tests.cli_run import run

    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(["live", "--demo", "--once"], capsys)
    lines = out.splitlines()
    assert 0 == code and len(lines) > 40 and not [x for x in lines if x.endswith(" ")]
    assert max(map(len, lines)) <= 80


@pytest.mark.parametrize("args,words", [
    (["--length", "0"], "--length: 0 is not allowed; expected 1 to the model's context, 131,072 tokens"),
    (["--length", "99999999999"], "--length: 99999999999 is not allowed; expected 1 to the model's context"),
    (["--length", "4000", "--max-reserved", "2048"], "--length: 4000 is not allowed; expected at most --max-reserved"),
])
def test_a_bad_length_is_named_with_its_own_bound(args, words, capsys):
    """A helper's trial: --length 0 said 'expected 1 to --max-reserved=2048' though 131,072 is accepted (the derived
    reservation follows the lengths), and --length 99999999999 was blamed on --max-reserved, never typed.  The
    exporter's lengths are each a --length (a review: two of them named --group, which it has not)."""
    code, _, err = run(["live", "--demo", "--once", *args], capsys)
    assert 2 == code and words in err
    code, _, err = run(["exporter", "--demo", "--once", "--length", "825", *args], capsys)
    assert 2 == code and words in err and "--group" not in err

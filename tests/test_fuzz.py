"""Fuzzing the whole command line with Hypothesis: never a traceback, one line for bad input.

Each suite generates hostile input for one entry point (calc options, grid documents, replay lines,
trace lines, engine /metrics bodies, Prometheus answers, engine pages with their HTTP framing) and runs
the real command in-process, asserting the promise of docs/safety.md:

* the exit code is 0, 2 (bad input) or, where the command defines it, 1 (live: no GPU readings);
* exit 2 prints exactly one line on stderr, ``kvdash: error: ...``, never "Traceback";
* any other exception escaping the command fails the test (that is a traceback for the user);
* each case finishes within ``CASE_SECONDS`` and the process's peak memory stays under ``PEAK_RSS``.

The seed is fixed (``derandomize=True``, no example database), so CI runs the same cases every time.
Case counts: ``KVDASH_FUZZ_EXAMPLES`` (default 400) is the number for each suite with a weight of 1; the
default run is 2,480 cases (calc 640, grids 320, replays 320, traces 320, metrics bodies 240, Prometheus
answers 320, engine pages 320).  ``KVDASH_FUZZ_EXAMPLES=20000 pytest tests/test_fuzz.py`` digs deeper.
"""

from __future__ import annotations

import contextlib
import http.server
import io
import json
import math
import os
import resource
import string
import threading
import time
import traceback

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvdash.cli import main
from kvdash.sweep.gridfile import DIMENSIONS, MODEL_KEYS, SIMULATE_KEYS, TOP_KEYS, WORKLOAD_KEYS
from tests.strategies import engine_pages, prometheus_answers

BASE = int(os.environ.get("KVDASH_FUZZ_EXAMPLES", "400"))
CASE_SECONDS = 15.0
PEAK_RSS = 3 * 2**30  # bytes; ru_maxrss is in KiB on Linux


def fuzz_settings(weight: float):
    return settings(max_examples=max(1, int(BASE * weight)), derandomize=True, database=None, deadline=None,
                    suppress_health_check=list(HealthCheck), print_blob=True)


def invoke(args: list[str], allowed: tuple[int, ...] = (0, 2)) -> tuple[int, str, str]:
    """Run ``kvdash ARGS`` in-process and check the promise; return (code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    started = time.monotonic()
    code: object = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(args)
        except SystemExit as exc:
            code = exc.code
        except BaseException:  # what a user would see as a traceback
            pytest.fail(f"kvdash {args!r:.300} raised:\n{traceback.format_exc()}")
    elapsed = time.monotonic() - started
    text = err.getvalue()
    assert code in allowed, f"kvdash {args!r:.300}: exit {code}, stderr {text[:500]!r}"
    assert "Traceback" not in text
    if code == 2:
        lines = text.strip().splitlines()
        assert 1 == len(lines) and lines[0].startswith("kvdash: error: "), f"{args!r:.300}: {text[:800]!r}"
        assert len(lines[0]) < 2000, f"error line of {len(lines[0]):,} characters"
    assert elapsed < CASE_SECONDS, f"kvdash {args!r:.300} took {elapsed:.1f} s"
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 < PEAK_RSS
    return int(code), out.getvalue(), text  # type: ignore[call-overload]


# --- values a hostile user types ----------------------------------------------------------------

HUGE = ["9223372036854775808", "18446744073709551616", "1" + "0" * 400, "9" * 5000, "-9223372036854775809"]
odd_text = st.one_of(
    st.sampled_from(["", " ", "nan", "NaN", "inf", "-inf", "1e999", "-1", "0", "0.0", "1.5", "0x10", "1_000",
                     "12GiB", "0GiB", "1e3GB", "-12GiB", "12 gib", "12XiB", "1" + "0" * 400 + "TiB", "1,,2",
                     "200,825,1525", ",", "\x00", "\n", "é", "１２", "٣", "²", "auto", "bf16", "fp8_ds_mla",
                     "h200", "vllm", "trtllm", "token_head", "tensor", "../../etc/passwd", "/dev/zero"]),
    st.sampled_from(HUGE),
    st.integers(-(2**70), 2**70).map(str),
    st.text(max_size=40),
    st.text(alphabet=string.digits, min_size=1, max_size=60),
)
int_text = st.one_of(st.integers(-5, 300_000).map(str), st.sampled_from(HUGE + ["0", "-1", "1", "2", "8"]))

INT_OPTIONS = ["--layers", "--kv-heads", "--head-dim", "--head-dim-v", "--attention-heads", "--window",
               "--max-context", "--block-size", "--used", "--max-reserved", "--final", "--prefix", "--tp", "--pp",
               "--max-model-len", "--max-batched-tokens", "--target"]
TEXT_OPTIONS = ["--budget", "--gpu-memory", "--weights", "--reserve", "--gpu-util", "--kv-dtype", "--kv-scales",
                "--gpu", "--util-policy", "--group", "--model"]


@st.composite
def calc_args(draw: st.DrawFn) -> list[str]:
    args = ["calc"] + (["--json"] if draw(st.booleans()) else [])
    for name in draw(st.lists(st.sampled_from(INT_OPTIONS + TEXT_OPTIONS), max_size=6, unique=True)):
        args += [name, draw(int_text if name in INT_OPTIONS and draw(st.booleans()) else odd_text)]
    return args


@fuzz_settings(1.6)
@given(calc_args())
def test_fuzz_calc_options(args):
    invoke(args)


# --- grid documents -----------------------------------------------------------------------------

BIG_INT_MARK = "BIGINTMARK"
scalars = st.one_of(
    st.integers(-3, 5000), st.sampled_from([0, -1, 2**31, 2**63, 2**64, 10**30]), st.just(BIG_INT_MARK),
    st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
    st.sampled_from(["12GiB", "80GB", "bf16", "fp8", "h200", "tutorial-gqa-80l", "llama-3.1-70b", "vllm", "0.9",
                     "sharegpt", "paged", "first-fit", "fixed:100", "uniform:1,9", "@user", "![x](http://e/x.png)",
                     "</details>", "a|b", "x\ny", "\x00", "💥", "é" * 50]),
    st.text(max_size=20),
)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                      max_leaves=12)
dim_values = st.one_of(scalars, st.lists(scalars, min_size=0, max_size=5))


@st.composite
def grid_documents(draw: st.DrawFn) -> dict:
    doc: dict = {}
    for key in draw(st.lists(st.sampled_from(TOP_KEYS + ("junk",)), max_size=6, unique=True)):
        if key == "models":
            doc[key] = draw(st.lists(st.one_of(
                st.sampled_from(["tutorial-gqa-80l", "llama-3.1-8b", "nope"]),
                st.dictionaries(st.sampled_from(MODEL_KEYS), scalars, max_size=6),
                st.fixed_dictionaries({"layers": st.integers(-1, 2**12), "kv_heads": st.integers(-1, 300),
                                       "head_dim": st.integers(-1, 5000)},
                                      optional={"name": st.text(max_size=10), "window": scalars,
                                                "max_context": scalars, "attention_heads": scalars}),
                values), max_size=3))
        elif key in ("grid", "defaults"):
            doc[key] = draw(st.dictionaries(st.sampled_from(DIMENSIONS + ("junk",)),
                                            dim_values if key == "grid" else scalars, max_size=4))
        elif key == "zip":
            doc[key] = draw(st.lists(st.dictionaries(st.sampled_from(DIMENSIONS), st.lists(scalars, max_size=3),
                                                     max_size=3), max_size=2))
        elif key == "exclude":
            doc[key] = draw(st.lists(st.dictionaries(st.sampled_from(DIMENSIONS), dim_values, max_size=2),
                                     max_size=2))
        elif key == "workloads":
            doc[key] = draw(st.dictionaries(st.text(max_size=8), st.one_of(
                st.dictionaries(st.sampled_from(WORKLOAD_KEYS), st.one_of(scalars, st.lists(scalars, max_size=9)),
                                max_size=4), values), max_size=2))
        elif key == "gates":
            doc[key] = draw(st.lists(st.fixed_dictionaries(
                {"metric": st.sampled_from(["paged_requests", "kv_token_slots", "nope", "model"])},
                optional={"min": scalars, "max": scalars, "name": scalars,
                          "where": st.dictionaries(st.sampled_from(DIMENSIONS), dim_values, max_size=2)}),
                max_size=2))
        elif key == "simulate":
            doc[key] = draw(st.dictionaries(st.sampled_from(SIMULATE_KEYS), st.one_of(scalars, dim_values),
                                            max_size=4))
        else:
            doc[key] = draw(values)
    return doc


MUTATIONS = {
    "none": lambda text: text,
    "alias bomb": lambda text: text + "".join(
        f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9) if i else 'x'}]\n" for i in range(8)),
    "recursive alias": lambda text: text + "loop: &loop [*loop]\n",
    "anchor": lambda text: text.replace(": [", ": &s [", 1),
    "deep nesting": lambda text: text + "deep: " + "[" * 3000 + "]" * 3000 + "\n",
    "NUL byte": lambda text: text[: len(text) // 2] + "\x00" + text[len(text) // 2:],
    "tab indent": lambda text: text.replace("  ", "\t"),
    "truncated": lambda text: text[: max(1, len(text) * 2 // 3)],
    "python tag": lambda text: text + "x: !!python/object/apply:os.system ['true']\n",
}


def grid_text(doc: dict, mutation: str) -> str:
    text = yaml.safe_dump(doc, allow_unicode=True, sort_keys=False, default_flow_style=None)
    return MUTATIONS[mutation](text.replace(BIG_INT_MARK, "9" * 5000))


@fuzz_settings(0.8)
@given(grid_documents(), st.sampled_from(list(MUTATIONS)))
def test_fuzz_grid_documents(tmp_path_factory, doc, mutation):
    path = tmp_path_factory.mktemp("grid") / "g.yaml"
    path.write_bytes(grid_text(doc, mutation).encode("utf-8", "surrogatepass"))
    invoke(["sweep", str(path), "--dry-run"])


def test_grid_fuzzer_reaches_valid_grids(tmp_path):
    """The generator is not all noise: a plain document of its kind runs (exit 0)."""
    doc = {"models": ["tutorial-gqa-80l"], "grid": {"block_size": [16, 32]}}
    path = tmp_path / "g.yaml"
    path.write_text(grid_text(doc, "anchor"))
    assert 0 == invoke(["sweep", str(path), "--dry-run"])[0]


# --- replay lines -------------------------------------------------------------------------------

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.text(max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=10)
gpu_like = st.fixed_dictionaries(
    {"index": json_values, "name": json_values},
    optional={k: st.one_of(st.integers(-1, 2**70), st.floats(allow_nan=True), json_values)
              for k in ("used_bytes", "total_bytes", "free_bytes", "reserved_bytes", "util_percent", "processes")})
snapshot_like = st.fixed_dictionaries(
    {"time": st.one_of(st.floats(allow_nan=True), st.integers(), json_values)},
    optional={"gpus": st.one_of(st.lists(gpu_like, max_size=3), json_values), "source": json_values,
              "extra": json_values, "error": json_values, "driver": json_values})
replay_lines = st.one_of(snapshot_like.map(json.dumps), json_values.map(json.dumps),
                         st.text(max_size=50).filter(lambda s: "\n" not in s and "\r" not in s))


@fuzz_settings(0.8)
@given(st.lists(replay_lines, min_size=1, max_size=4))
def test_fuzz_replay_lines(tmp_path_factory, lines):
    path = tmp_path_factory.mktemp("replay") / "r.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
    invoke(["live", "--replay", str(path), "--json"], allowed=(0, 1, 2))


# --- trace lines --------------------------------------------------------------------------------

trace_fields = st.one_of(st.integers(-3, 5000).map(str), st.sampled_from(HUGE + ["", " 7 ", "1.5", "nan", "２"]),
                         st.text(alphabet="0123456789,-. x", max_size=12))
trace_lines = st.one_of(st.tuples(trace_fields, trace_fields).map(",".join),
                        st.lists(trace_fields, max_size=4).map(",".join), st.just("prompt,output"))


@fuzz_settings(0.8)
@given(st.lists(trace_lines, min_size=1, max_size=6))
def test_fuzz_trace_lines(tmp_path_factory, lines):
    path = tmp_path_factory.mktemp("trace") / "t.csv"
    path.write_text("\n".join(lines) + "\n")
    invoke(["simulate", "--trace", str(path), "--requests", "30", "--max-len", "4096", "--json"])


# --- engine /metrics bodies, served over loopback HTTP ------------------------------------------

METRIC_NAMES = ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:num_requests_running",
                "vllm:num_requests_waiting", "vllm:num_preemptions_total", "vllm:prefix_cache_hits_total",
                "vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_hit_rate", "vllm:cache_config_info",
                "sglang:token_usage", "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:cache_hit_rate",
                "sglang:max_total_num_tokens", "sglang:num_used_tokens", "other_metric"]
metric_values = st.one_of(st.sampled_from(["NaN", "+Inf", "-Inf", "1e308", "-1", "0", "1", "1e999", "x"]),
                          st.floats(allow_nan=True).map(repr), st.integers(-(2**70), 2**70).map(str))
label_values = st.one_of(st.sampled_from(["16", "2048", "2048.0", "1.2.3", "²", "", "fp8", "-1", "9" * 30]),
                         st.text(max_size=8).map(lambda s: s.replace("\\", "").replace('"', "")))
metric_lines = st.one_of(
    st.tuples(st.sampled_from(METRIC_NAMES),
              st.dictionaries(st.sampled_from(["num_gpu_blocks", "block_size", "cache_dtype", "model_name"]),
                              label_values, max_size=3),
              metric_values).map(lambda t: t[0] + ("{" + ",".join(f'{k}="{v}"' for k, v in t[1].items()) + "}"
                                                   if t[1] else "") + " " + t[2]),
    st.sampled_from(["# HELP x y", "# TYPE x gauge", "", "garbage", "a{b=} 1", 'a{b="c"'] ),
    st.text(max_size=30).filter(lambda s: "\n" not in s and "\r" not in s))


class _Body:
    data = b""


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the http.server interface
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(_Body.data)))
        self.end_headers()
        self.wfile.write(_Body.data)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture(scope="module")
def metrics_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


@fuzz_settings(0.6)
@given(st.lists(metric_lines, max_size=8), st.booleans())
def test_fuzz_metrics_bodies(metrics_server, lines, latin1):
    _Body.data = "\n".join(lines).encode("latin-1" if latin1 else "utf-8", "replace")
    code, out, _ = invoke(["live", "--demo", "--engine", metrics_server, "--json"])
    reading = json.loads(out)["kv_pool"]["engine"]["reading"]
    for key in ("kv_usage", "prefix_hit_rate"):
        assert reading[key] is None or math.isfinite(reading[key])  # NaN/Inf shown as missing


def test_metrics_server_is_really_read(metrics_server):
    """The loopback server answers: a real vLLM body gives a reading (no error)."""
    _Body.data = b'vllm:cache_config_info{block_size="16",num_gpu_blocks="2048"} 1\nvllm:kv_cache_usage_perc 0.5\n'
    _, out, _ = invoke(["live", "--demo", "--engine", metrics_server, "--json"])
    reading = json.loads(out)["kv_pool"]["engine"]["reading"]
    assert ("", 2048 * 16, 16384) == (reading["error"], reading["total_tokens"], reading["used_tokens"])


# --- Prometheus answers, served over loopback HTTP (issue 25) ----------------------------------

class _Answers:
    by_query: dict[str, bytes] = {}


@pytest.fixture(scope="module")
def prometheus_server():
    from tests.hostile_servers import EMPTY, FakePrometheus

    empty = json.dumps(EMPTY).encode()
    with FakePrometheus(lambda name, q: _Answers.by_query.get(name, empty)) as prom:
        yield prom.url


def _no_nan(text: str) -> object:
    def refuse(word: str) -> object:
        raise AssertionError(f"{word} in the fleet document")

    return json.loads(text, parse_constant=refuse)


@fuzz_settings(0.8)
@given(st.dictionaries(st.sampled_from(["dcgm_memory", "kvdash_memory", "engines", "targets"]), prometheus_answers(),
                       max_size=4))
def test_fuzz_prometheus_answers(prometheus_server, answers):
    """Whatever Prometheus answers: exit 0 (a fleet), 1 (no data, or one line saying what is wrong), never a
    traceback; in a fleet every byte count is a whole number >= 0 or null, every usage 0-1 or null, no NaN."""
    _Answers.by_query = answers
    code, out, err = invoke(["live", "--prometheus", prometheus_server, "--once", "--json"], allowed=(0, 1))
    if code == 1:
        assert 1 == len(err.strip().splitlines()), err
        return
    doc = _no_nan(out)
    for host in doc["hosts"]:
        for g in host["gpus"]:
            for key in ("total_bytes", "used_bytes", "free_bytes", "reserved_bytes"):
                assert g[key] is None or (isinstance(g[key], int) and 0 <= g[key] <= 2**55), (key, g)
    for e in doc["engines"]:
        assert e["usage"] is None or 0 <= e["usage"] <= 1
        for key in ("pool_tokens", "used_tokens", "free_tokens", "running", "waiting"):
            assert e[key] is None or (isinstance(e[key], int) and e[key] >= 0), (key, e)


def test_prometheus_fuzzer_reaches_real_fleets(prometheus_server):
    """The generator's shape is the API's: one good DCGM answer gives a host with exact bytes."""
    from tests.hostile_servers import vector

    labels = {"__name__": "DCGM_FI_DEV_FB_USED", "Hostname": "n", "gpu": "0"}
    _Answers.by_query = {"dcgm_memory": json.dumps(vector((labels, "70000"))).encode()}
    _, out, _ = invoke(["live", "--prometheus", prometheus_server, "--once", "--json"], allowed=(0,))
    assert 70_000 * 2**20 == _no_nan(out)["hosts"][0]["gpus"][0]["used_bytes"]


# --- engine pages with their HTTP framing, served over a raw loopback socket (issue 25) -------------

class _Page:
    data = b""


@pytest.fixture(scope="module")
def engine_server():
    from tests.hostile_servers import RawServer

    def handle(conn, stop):
        conn.recv(65536)
        conn.sendall(_Page.data)

    with RawServer(handle) as srv:
        yield srv.url + "/metrics"


@fuzz_settings(0.8)
@given(engine_pages())
def test_fuzz_engine_pages(engine_server, page):
    """Whatever the engine's page and framing: a reading (maybe with an error), every figure finite and in
    range, within the scrape's 2 s deadline (CASE_SECONDS bounds the whole command)."""
    _Page.data = page
    started = time.monotonic()
    _, out, _ = invoke(["live", "--demo", "--engine", engine_server, "--json"])
    assert time.monotonic() - started < 2 + 5
    reading = json.loads(out)["kv_pool"]["engine"]["reading"]
    for key in ("kv_usage", "prefix_hit_rate"):
        assert reading[key] is None or 0 <= reading[key] <= 1
    for key in ("running", "waiting", "total_tokens", "used_tokens", "num_gpu_blocks", "block_size", "preemptions"):
        assert reading[key] is None or (isinstance(reading[key], int) and 0 <= reading[key] <= 2**53), key


def test_engine_page_fuzzer_reaches_real_pages(engine_server):
    page = b'vllm:cache_config_info{block_size="16",num_gpu_blocks="2048"} 1\nvllm:kv_cache_usage_perc 0.5\n'
    _Page.data = b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(page) + page
    _, out, _ = invoke(["live", "--demo", "--engine", engine_server, "--json"])
    reading = json.loads(out)["kv_pool"]["engine"]["reading"]
    assert ("", 2048 * 16) == (reading["error"], reading["total_tokens"])

"""Hypothesis strategies shared by the property tests."""

from __future__ import annotations

from hypothesis import strategies as st

from kvdash.core.model import custom

layers = st.integers(1, 128)
kv_heads = st.sampled_from([1, 2, 4, 8, 16, 32, 64])
head_dims = st.sampled_from([64, 80, 96, 128, 256])
block_sizes = st.sampled_from([1, 8, 16, 32, 64, 128, 256])
dtypes = st.sampled_from(["fp32", "fp16", "bf16", "fp8", "int8"])
budgets = st.integers(1 << 20, 1 << 40)


@st.composite
def architectures(draw: st.DrawFn):
    kv = draw(kv_heads)
    return custom(draw(layers), kv, draw(head_dims), num_attention_heads=kv * draw(st.sampled_from([1, 2, 4, 8])))


@st.composite
def requests(draw: st.DrawFn, max_len: int = 131072):
    """(used, max_reserved) with 0 < used <= max_reserved."""
    reserved = draw(st.integers(1, max_len))
    return draw(st.integers(1, reserved)), reserved


# --- what hostile servers send (tests/test_fuzz.py: Prometheus answers and engine pages) -----------------

PROM_VALUES = st.one_of(
    st.sampled_from(["NaN", "+Inf", "-Inf", "1e400", "-1", "0", "1", "0.5", "1.5", "70000", "1e300", "9" * 400, "",
                     "x", "0x10", " 1"]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr), st.integers(-(2**70), 2**70).map(str),
    st.none(), st.booleans(), st.integers(-3, 2**64), st.lists(st.just("1"), max_size=2))
PROM_NAMES = ["DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED", "kvdash_gpu_memory_used_bytes",
              "kvdash_gpu_memory_total_bytes", "vllm:kv_cache_usage_perc", "vllm:cache_config_info",
              "vllm:num_requests_running", "sglang:max_total_num_tokens", "sglang:token_usage",
              "sglang:num_used_tokens", "kvdash_engine_kv_pool_tokens", "kvdash_engine_kv_pool_blocks", "up", "other"]
PROM_LABEL_VALUES = st.one_of(
    st.sampled_from(["n", "n:9400", "n:8000", "[::1]:8000", "0", "1", "²", "-1", "16", "1000", "None", "", "GPU-0",
                     "x" * 300, "\x1b[31m", "\u202e", "a\nb"]),
    st.text(max_size=12), st.integers(-2, 10), st.none(), st.lists(st.just("a"), max_size=2),
    st.dictionaries(st.just("a"), st.just("b"), max_size=1))
PROM_LABELS = st.fixed_dictionaries(
    {"__name__": st.sampled_from(PROM_NAMES)},
    optional={k: PROM_LABEL_VALUES for k in ("Hostname", "hostname", "gpu", "UUID", "instance", "job", "engine",
                                            "num_gpu_blocks", "block_size", "model_name")})
_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False),
                       st.text(max_size=8))
JSON_VALUES = st.recursive(_json_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)), max_leaves=10)
PROM_SAMPLE = st.one_of(
    st.fixed_dictionaries({"metric": PROM_LABELS, "value": st.tuples(st.just(0), PROM_VALUES).map(list)}),
    st.fixed_dictionaries({}, optional={"metric": st.one_of(st.none(), PROM_LABELS, JSON_VALUES),
                                        "value": st.one_of(JSON_VALUES, st.tuples(st.just(0), PROM_VALUES).map(list))}),
    JSON_VALUES)


@st.composite
def prometheus_answers(draw: st.DrawFn) -> bytes:
    """One answer to one query: mostly the API's shape with hostile samples, else errors, noise, deep JSON."""
    import json

    kind = draw(st.sampled_from(["vector"] * 6 + ["scalar", "error", "json", "deep", "bytes"]))
    if kind == "vector":
        doc: object = {"status": "success", "data": {"resultType": draw(st.sampled_from(["vector"] * 5 + ["matrix"])),
                                                     "result": draw(st.lists(PROM_SAMPLE, max_size=8))}}
    elif kind == "scalar":
        doc = {"status": "success", "data": {"resultType": "scalar", "result": [0, draw(PROM_VALUES)]}}
    elif kind == "error":
        doc = {"status": "error", "errorType": draw(st.one_of(st.text(max_size=30), JSON_VALUES)),
               "error": draw(st.one_of(st.text(max_size=60), JSON_VALUES))}
    elif kind == "json":
        doc = draw(JSON_VALUES)
    elif kind == "deep":
        n = draw(st.integers(10, 100_000))
        return b'{"status":"success","data":' + b"[" * n + b"]" * n + b"}"
    else:
        return draw(st.binary(max_size=200))
    return json.dumps(doc).encode()


ENGINE_FAMILIES = ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:num_requests_running",
                   "vllm:num_requests_waiting", "vllm:num_preemptions_total", "vllm:cache_config_info",
                   "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total", "sglang:token_usage",
                   "sglang:max_total_num_tokens", "sglang:num_used_tokens", "sglang:num_running_reqs",
                   "sglang:num_queue_reqs", "sglang:cache_hit_rate", "sglang:num_retracted_reqs"]
ENGINE_VALUES = st.one_of(st.sampled_from(["NaN", "+Inf", "-Inf", "1e308", "-1", "0", "1", "0.5", "16", "1e999"]),
                          st.floats(allow_nan=True).map(repr), st.integers(-(2**70), 2**70).map(str))
ENGINE_LABEL_VALUES = st.one_of(
    st.sampled_from(["0", "1", "7", "16", "2048", "2048.0", "²", "", "fp8", "-1", "9" * 30, "m\x1bx", "\u202e"]),
    st.text(max_size=8).map(lambda s: s.replace("\\", "").replace('"', "").replace("\n", "")))


@st.composite
def engine_pages(draw: st.DrawFn) -> bytes:
    """One HTTP answer of an engine's /metrics: families with dp_rank/engine/model_name label sets (up to
    64 ranks), hostile values, and HTTP framing that lies (status, Content-Length, chunked, no headers end)."""
    lines = []
    for _ in range(draw(st.integers(0, 6))):
        family = draw(st.sampled_from(ENGINE_FAMILIES))
        if draw(st.booleans()):
            lines.append(f"# TYPE {family} {draw(st.sampled_from(['gauge', 'counter', 'untyped', 'histogram', 'x']))}")
        ranks = draw(st.integers(1, 64))
        value = draw(ENGINE_VALUES)
        shared = draw(st.dictionaries(st.sampled_from(["engine", "model_name", "num_gpu_blocks", "block_size",
                                                       "cache_dtype"]), ENGINE_LABEL_VALUES, max_size=3))
        for r in range(ranks):  # one label set per family (drawn once), one series per rank
            labels = {"dp_rank": str(r), **shared} if ranks > 1 else shared
            body = ",".join(f'{k}="{v}"' for k, v in labels.items())
            lines.append(family + ("{" + body + "}" if body else "") + " " + value)
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from(
            ["garbage", 'a{b="c"', "x 1 2 3 4", "# HELP", "\x00", "vllm:x{a=1} 1", "\ufeffvllm:y 1"])))
    page = "\n".join(lines).encode("utf-8", "surrogatepass") + b"\n"
    status = draw(st.sampled_from([b"HTTP/1.0 200 OK"] * 6 + [b"HTTP/1.1 500 Oops", b"HTTP/1.1 200", b"nonsense",
                                                              b"HTTP/1.1 99999 X"]))
    framing = draw(st.sampled_from(["length", "none", "chunked", "bad-chunked", "long-length", "no-end"]))
    if framing == "length":
        return status + b"\r\nContent-Length: %d\r\n\r\n" % len(page) + page
    if framing == "long-length":
        return status + b"\r\nContent-Length: %d\r\n\r\n" % (len(page) + 100) + page
    if framing == "chunked":
        return status + b"\r\nTransfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % len(page) + page + b"\r\n0\r\n\r\n"
    if framing == "bad-chunked":
        return status + b"\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n" + page
    if framing == "no-end":
        return status + b"\r\nX-Header: " + page
    return status + b"\r\n\r\n" + page

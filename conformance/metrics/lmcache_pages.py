"""Metrics pages written by LMCache 0.5.6's own exposition code, for kvdash's CI tests.

Runs in the LMCache side venv (never in CI): ``conformance/metrics/run.sh``.  LMCache runs inside each
vLLM worker (``LMCacheConnectorV1``, one LMCache engine per TP rank); its figures go through
``LMCStatsMonitor`` (``lmcache/observability.py``: ``on_lookup_request``/``on_lookup_finished``,
``on_retrieve_request``/``on_retrieve_finished``, ``on_store_request``/``on_store_finished``,
``update_local_cache_usage``), whose ``get_stats_and_clear()`` the engine's logging thread hands to
``PrometheusLogger.log_prometheus`` every interval.  ``PrometheusLogger`` writes into the
``PROMETHEUS_MULTIPROC_DIR`` (it sets one when none is set); vLLM's ``/metrics`` serves that directory
with prometheus-client's ``MultiProcessCollector``, so LMCache's ``lmcache:*`` families appear on the
engine's own page.  The page here is that collector over LMCache's directory alone (its ``lmcache:*``
families), one forked process per TP rank.

The figures (lookups, hits, stores, the local CPU cache's bytes) are the harness's choice, written through
that code; each request's start and end times are set so the timings read as transfers at the harness's
bandwidths.  The JSON beside the page holds them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings

warnings.filterwarnings("ignore")
os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="kvdash-lmcache-")

import lmcache  # noqa: E402
import torch  # noqa: E402
from lmcache.observability import LMCStatsMonitor, PrometheusLogger  # noqa: E402
from lmcache.v1.metadata import LMCacheMetadata  # noqa: E402
from prometheus_client import CollectorRegistry, generate_latest, multiprocess  # noqa: E402

try:
    from importlib.metadata import version
    LMCACHE_VERSION = version("lmcache")
except Exception:  # pragma: no cover - the side venv has it
    LMCACHE_VERSION = getattr(lmcache, "__version__", "unknown")

BYTES_PER_TOKEN = 131072  # Llama-3.1-8B bf16, all ranks: 32 layers x 2 x 8 KV heads x 128 x 2 B
CHUNK = 256  # LMCache's chunk_size (lmcache/v1/config.py)

# A CPU tier of LMCache (LMCACHE_LOCAL_CPU, max_local_cpu_size 40 GiB) on vLLM TP 1 and TP 2 (Llama-3.1-8B):
# 40 prompts of 8,192 tokens looked up (half found), 20 retrieved, 40 stored; per rank the local CPU
# cache holds its shard of the stored chunks.  Retrieval timed at 40 GB/s, storing at 30 GB/s per rank.
LAYOUTS = [
    {"name": "tp1", "model": "meta-llama/Llama-3.1-8B", "tp": 1, "lookups": 40, "lookup_tokens": 8192,
     "lookup_hit_tokens": 4096, "retrieves": 20, "retrieve_tokens": 8192, "retrieve_hit_tokens": 8192,
     "stores": 40, "store_tokens": 8192, "cpu_size_gib": 40},
    {"name": "tp2", "model": "meta-llama/Llama-3.1-8B", "tp": 2, "lookups": 40, "lookup_tokens": 8192,
     "lookup_hit_tokens": 4096, "retrieves": 20, "retrieve_tokens": 8192, "retrieve_hit_tokens": 8192,
     "stores": 40, "store_tokens": 8192, "cpu_size_gib": 40},
]


def one_rank(layout: dict, worker: int) -> None:
    tp = layout["tp"]
    md = LMCacheMetadata(model_name=layout["model"], world_size=tp, local_world_size=tp, worker_id=worker,
                         local_worker_id=worker, kv_dtype=torch.bfloat16,
                         kv_shape=(32, 2, CHUNK, 8 // tp, 128), role="worker", served_model_name=layout["model"])
    prom = PrometheusLogger.GetOrCreate(md)
    mon = LMCStatsMonitor.GetOrCreate()
    per_rank = BYTES_PER_TOKEN // tp
    for _ in range(layout["lookups"]):
        st = mon.on_lookup_request(layout["lookup_tokens"])
        st.end_time = st.start_time + 0.0004
        mon.on_lookup_finished(st, layout["lookup_hit_tokens"])
    for _ in range(layout["retrieves"]):
        st = mon.on_retrieve_request(layout["retrieve_tokens"])
        st.end_time = st.start_time + layout["retrieve_hit_tokens"] * per_rank / 40e9
        mon.on_retrieve_finished(st, layout["retrieve_hit_tokens"])
    for _ in range(layout["stores"]):
        st = mon.on_store_request(layout["store_tokens"])
        st.end_time = st.start_time + layout["store_tokens"] * per_rank / 30e9
        mon.on_store_finished(st, layout["store_tokens"])
    mon.update_local_cache_usage(layout["stores"] * layout["store_tokens"] * per_rank)
    prom.log_prometheus(mon.get_stats_and_clear())


def build(layout: dict) -> tuple[str, dict]:
    d = tempfile.mkdtemp(prefix=f"kvdash-lmcache-{layout['name']}-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = d
    pids = []
    for worker in range(layout["tp"]):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                one_rank(layout, worker)
            except BaseException:
                import traceback

                traceback.print_exc()
                code = 1
            os._exit(code)
        pids.append(pid)
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        if status:
            raise RuntimeError(f"a rank failed ({status})")
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=d)
    page = generate_latest(registry).decode()
    shutil.rmtree(d)
    page = "".join(block for block in _families(page) if "lmcache:" in block)
    tp, L = layout["tp"], layout
    per_rank = BYTES_PER_TOKEN // tp
    figures = {"layout": L["name"], "kind": "lmcache", "served_model": L["model"], "tp": tp, "chunk_tokens": CHUNK,
               "ranks": tp,
               # counters are per rank (worker_id); kvdash reads one rank's tokens and sums the bytes
               "lookup_tokens": L["lookups"] * L["lookup_tokens"], "lookup_hit_tokens": L["lookups"] * L["lookup_hit_tokens"],
               "requested_tokens": L["retrieves"] * L["retrieve_tokens"],
               "hit_tokens": L["retrieves"] * L["retrieve_hit_tokens"],
               "stored_tokens": L["stores"] * L["store_tokens"],
               "local_cache_bytes": L["stores"] * L["store_tokens"] * per_rank * tp,
               "load_seconds_per_rank": L["retrieves"] * L["retrieve_hit_tokens"] * per_rank / 40e9,
               "store_seconds_per_rank": L["stores"] * L["store_tokens"] * per_rank / 30e9,
               "cpu_size_gib": L["cpu_size_gib"]}
    return page, figures


def _families(page: str) -> list[str]:
    """The page cut into families (each from its ``# HELP`` line)."""
    out: list[str] = []
    for line in page.splitlines(keepends=True):
        if line.startswith("# HELP") or not out:
            out.append("")
        out[-1] += line
    return out


def main() -> int:
    from pages import write_layouts  # beside this file (conformance/metrics/pages.py)

    return write_layouts(LAYOUTS, build, "lmcache", LMCACHE_VERSION,
                         f"lmcache {LMCACHE_VERSION} LMCStatsMonitor + PrometheusLogger (lmcache/observability.py), "
                         "one process per TP rank, MultiProcessCollector")


if __name__ == "__main__":
    raise SystemExit(main())

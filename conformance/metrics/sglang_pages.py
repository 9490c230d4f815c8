"""Metrics pages written by SGLang 0.5.23's own exposition code, for kvdash's CI tests.

Runs in the SGLang side venv (never in CI): ``conformance/metrics/run.sh``.  Like ``sglang serve``
with ``--enable-metrics``, every scheduler (one OS process per TP x PP rank, per DP replica) writes
into one ``PROMETHEUS_MULTIPROC_DIR`` and the HTTP server's ``/metrics`` is prometheus-client's
``MultiProcessCollector`` over that directory (``sglang/srt/utils/common.py``,
``add_prometheus_middleware``).  Each rank here is a forked process that, as
``run_scheduler_process`` does (``sglang/srt/managers/scheduler.py``):

- ``publish(server_args, role="scheduler", ranks=SpawnRanks(world_rank, dp_rank, gpu_id))``
  (``sglang/srt/runtime_context.py``; with DP attention the DP rank comes from
  ``compute_dp_attention_world_info`` as ``data_parallel_controller.py`` computes it);
- ``SchedulerMetricsCollector.init_new(...)`` (``sglang/srt/observability/metrics_collector.py``):
  its labels (``tp_rank``, ``pp_rank``, ``moe_ep_rank``, ``priority=""`` with priority scheduling,
  ``dp_rank`` when set), and ``current_scheduler_metrics_enabled`` (attention-TP rank 0 only);
- ``emit_constants(...)`` on EVERY rank, as ``Scheduler.emit_metrics_constants`` does (no rank gate:
  a TP 8 page has eight ``sglang:max_total_num_tokens`` series for one pool);
- ``log_stats(SchedulerStats)`` and ``increment_retracted_reqs`` on the stats-logging ranks only.

The figures (pool, usage, queues) are the harness's choice, written through that code; the JSON
beside each page holds them, per DP rank, for the CI test to compare with.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")
os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="kvdash-sglang-")

import sglang  # noqa: E402
from prometheus_client import CollectorRegistry, generate_latest, multiprocess  # noqa: E402
from sglang.srt.layers.dp_attention import compute_dp_attention_world_info  # noqa: E402
from sglang.srt.observability.metrics_collector import (  # noqa: E402
    QueueCount,
    SchedulerMetricsCollector,
    SchedulerStats,
)
from sglang.srt.runtime_context import SpawnRanks, get_parallel, publish, spawn_world_rank  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def rank(pool: int, usage: float, running: int, waiting: int, **kw: object) -> dict:
    used = int(pool * usage)
    return {"pool": pool, "usage": usage, "running": running, "waiting": waiting, "used": used,
            "evictable": kw.get("evictable", pool // 10), "available": pool - used - int(kw.get("evictable", pool // 10)),
            "retracted": kw.get("retracted", 0), "hit_rate": kw.get("hit_rate", 0.25), **kw}


LAYOUTS = [
    {"name": "tp1", "model": "llama-3.1-8b", "tp": 1, "pp": 1, "dp": 1, "ranks": [rank(600000, 0.20, 10, 2)]},
    {"name": "tp8", "model": "llama-3.1-70b", "tp": 8, "pp": 1, "dp": 1,
     "ranks": [rank(1200000, 0.35, 21, 4, retracted=2)]},
    {"name": "pp2", "model": "llama-3.1-70b", "tp": 4, "pp": 2, "dp": 1,
     "ranks": [rank(1200000, 0.35, 21, 4, retracted=2)]},
    {"name": "dp2", "model": "llama-3.1-8b", "tp": 1, "pp": 1, "dp": 2,
     "ranks": [rank(600000, 0.20, 4, 0), rank(500000, 0.80, 17, 6, retracted=3)]},
    {"name": "dp2_attn_tp2", "model": "llama-3.1-8b", "tp": 4, "pp": 1, "dp": 2, "dp_attention": True,
     "ranks": [rank(700000, 0.15, 6, 1), rank(690000, 0.60, 20, 3)]},
    {"name": "priority", "model": "llama-3.1-8b", "tp": 1, "pp": 1, "dp": 1, "priority": True,
     "ranks": [rank(600000, 0.50, 21, 4, by_priority_running={0: 15, 1: 6}, by_priority_waiting={0: 1, 1: 3})]},
    {"name": "page64", "model": "llama-3.1-8b", "tp": 1, "pp": 1, "dp": 1, "page_size": 64,
     "ranks": [rank(599936, 0.40, 12, 0)]},
    {"name": "swa", "model": "gemma-2-9b", "tp": 1, "pp": 1, "dp": 1,
     "ranks": [rank(900000, 0.45, 30, 2, swa_pool=180000, swa_usage=0.70, full_usage=0.45)]},
    {"name": "mamba", "model": "qwen3-next-80b-a3b-thinking", "tp": 4, "pp": 1, "dp": 1,
     "ranks": [rank(2000000, 0.30, 40, 5, mamba_usage=0.62, full_usage=0.30)]},
    # HiCache (--enable-hierarchical-cache), TP 2: the host pool (L2) and its transfers as the radix cache's
    # RadixCacheMetricsCollector writes them (one per TP rank, each its own KV shard: bytes per rank, tokens the
    # same logical count on every rank), and the prefill tokens by where their KV came from
    # (increment_effective_prefill_tokens).  Bytes: tokens x 131,072 B per token (Llama-3.1-8B bf16) / TP 2;
    # times at the harness's bandwidths (40 GB/s host-to-GPU, 30 GB/s GPU-to-host per rank), one op each.
    {"name": "hicache", "model": "llama-3.1-8b", "tp": 2, "pp": 1, "dp": 1, "hicache": True,
     "ranks": [rank(600000, 0.55, 14, 1, host_total=2400000, host_used=900000,
                    tier={"backup_tokens": 1_000_000, "load_back_tokens": 250_000, "backup_ops": 400,
                          "load_back_ops": 120, "input_tokens": 1_200_000, "device_hit_tokens": 500_000,
                          "host_hit_tokens": 250_000, "storage_hit_tokens": 0})]},
]


def server_args(layout: dict) -> ServerArgs:
    d = REPO / "tests" / "data" / "configs" / layout["model"]
    kw: dict = {"tp_size": layout["tp"], "pp_size": layout["pp"], "dp_size": layout["dp"], "enable_metrics": True,
                "served_model_name": f"org/{d.name}", "skip_tokenizer_init": True, "device": "cpu"}
    if layout.get("dp_attention"):
        kw["enable_dp_attention"] = True
    if layout.get("priority"):
        kw["enable_priority_scheduling"] = True
        kw["default_priority_value"] = 0
    if layout.get("page_size"):
        kw["page_size"] = layout["page_size"]
    if layout.get("hicache"):
        kw["enable_hierarchical_cache"] = True
    if layout["name"] == "mamba":  # the CPU platform has no Mamba state snapshots (arg_groups/mamba_hook.py)
        kw["mamba_radix_cache_strategy"] = "no_buffer"
        kw["disable_overlap_schedule"] = True  # no_buffer's requirement (validate_mamba_no_buffer)
    return ServerArgs(model_path=str(d), **kw)


def one_rank(sa: ServerArgs, layout: dict, tp_rank: int, pp_rank: int, dp_rank: int | None) -> None:
    """What one scheduler process writes (run in a forked child)."""
    if layout.get("dp_attention"):
        _, _, dp_rank, _ = compute_dp_attention_world_info(tp_rank, layout["tp"], layout["dp"], 1)
    publish(sa, role="scheduler", ranks=SpawnRanks(world_rank=spawn_world_rank(sa, tp_rank=tp_rank, pp_rank=pp_rank),
                                                   dp_rank=dp_rank, gpu_id=tp_rank))
    ctx = SchedulerMetricsCollector.init_new(server_args=sa, enable_priority_scheduling=bool(layout.get("priority")),
                                             enable_lora=False, enable_hierarchical_cache=bool(layout.get("hicache")))
    c = ctx.collector
    r = layout["ranks"][get_parallel().dp_rank or 0]
    if "tier" in r:  # every rank's cache writes its own (not only the stats-logging ranks)
        hicache_rank(layout, r)
    page = layout.get("page_size", 1)
    c.emit_constants(max_total_num_tokens=r["pool"], max_total_num_tokens_swa=r.get("swa_pool"),
                     weight_memory_usage_gb=15.0, kv_cache_memory_usage_gb=round(r["pool"] * 131072 / 1e9 / layout["tp"], 2),
                     graph_memory_usage_gb={"decode": 0.5}, max_running_requests_under_SLO=None, page_size=page,
                     num_pages=r["pool"] // page, context_len=131072, startup_available_gpu_memory_gb=70.0)
    if not ctx.current_scheduler_metrics_enabled:
        return
    st = SchedulerStats(
        num_running_reqs=QueueCount(r["running"], r.get("by_priority_running")),
        num_queue_reqs=QueueCount(r["waiting"], r.get("by_priority_waiting")),
        cache_hit_rate=r["hit_rate"], token_usage=max(r["usage"], r.get("swa_usage", 0), r.get("mamba_usage", 0)),
        full_token_usage=r.get("full_usage", r["usage"]), swa_token_usage=r.get("swa_usage", 0.0),
        mamba_usage=r.get("mamba_usage", 0.0), num_used_tokens=r["used"], kv_used_tokens=r["used"],
        kv_available_tokens=r["available"], kv_evictable_tokens=r["evictable"],
        num_retracted_reqs=r["retracted"],
        hicache_host_used_tokens=r.get("host_used", 0), hicache_host_total_tokens=r.get("host_total", 0))
    c.log_stats(st)
    c.increment_retracted_reqs(r["retracted"], r["retracted"] * 1000, r["retracted"] * 10)
    if "tier" in r:
        t = r["tier"]
        c.increment_effective_prefill_tokens(input_tokens=t["input_tokens"], device_hit_tokens=t["device_hit_tokens"],
                                             host_hit_tokens=t["host_hit_tokens"],
                                             storage_hit_tokens=t["storage_hit_tokens"])


def hicache_rank(layout: dict, r: dict) -> None:
    """What one rank's HiRadixCache writes (``BasePrefixCache.init_metrics_collector``, then
    ``unified_radix_cache.py``'s backup and load-back acknowledgements)."""
    from sglang.srt.layers.dp_attention import is_dp_attention_enabled
    from sglang.srt.observability.metrics_collector import RadixCacheMetricsCollector, radix_cache_metric_labels

    t = r["tier"]
    rc = RadixCacheMetricsCollector(labels=radix_cache_metric_labels("HiRadixCache", get_parallel(),
                                                                     is_dp_attention_enabled()))
    for tokens_key, ops_key, speed, count, add_bytes, observe in (
            ("backup_tokens", "backup_ops", 30e9, rc.increment_backup_num_tokens, rc.increment_backup_num_bytes,
             rc.observe_backup_duration),
            ("load_back_tokens", "load_back_ops", 40e9, rc.increment_load_back_num_tokens,
             rc.increment_load_back_num_bytes, rc.observe_load_back_duration)):
        tokens, n = t[tokens_key], t[ops_key]
        per_op = tokens // n
        for _ in range(n):
            nbytes = per_op * BYTES_PER_TOKEN // layout["tp"]
            count(per_op, "kv")
            add_bytes(nbytes)
            observe(nbytes / speed)


BYTES_PER_TOKEN = 131072  # Llama-3.1-8B bf16: 32 layers x 2 x 8 KV heads x 128 x 2 B


def build(layout: dict) -> tuple[str, dict]:
    d = tempfile.mkdtemp(prefix=f"kvdash-sglang-{layout['name']}-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = d
    sa = server_args(layout)
    procs = []
    replicas = [None] if layout["dp"] == 1 or layout.get("dp_attention") else list(range(layout["dp"]))
    for dp_rank in replicas:
        for pp_rank in range(layout["pp"]):
            for tp_rank in range(layout["tp"]):
                pid = os.fork()
                if pid == 0:
                    code = 0
                    try:
                        one_rank(sa, layout, tp_rank, pp_rank, dp_rank)
                    except BaseException:
                        import traceback

                        traceback.print_exc()
                        code = 1
                    os._exit(code)
                procs.append(pid)
    for pid in procs:
        _, status = os.waitpid(pid, 0)
        if status:
            raise RuntimeError(f"a rank failed ({status})")
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=d)
    page = generate_latest(registry).decode()
    shutil.rmtree(d)
    figures = {"layout": layout["name"], "kind": "sglang", "served_model": sa.served_model_name,
               "page_size": layout.get("page_size", 1), "processes": len(procs), "ranks": []}
    for i, r in enumerate(layout["ranks"]):
        figures["ranks"].append({
            "dp_rank": str(i) if layout["dp"] > 1 else "", "pool_tokens": r["pool"], "usage": r["usage"],
            "token_usage": max(r["usage"], r.get("swa_usage", 0), r.get("mamba_usage", 0)),
            "running": r["running"], "waiting": r["waiting"], "used_tokens": r["used"],
            "evictable_tokens": r["evictable"], "retractions": r["retracted"], "hit_rate": r["hit_rate"],
            "swa_usage": r.get("swa_usage"), "mamba_usage": r.get("mamba_usage"),
            "swa_pool_tokens": r.get("swa_pool"), "host_total_tokens": r.get("host_total"),
            "host_used_tokens": r.get("host_used"), "hicache": hicache_figures(layout, r)})
    return page, figures


def hicache_figures(layout: dict, r: dict) -> dict | None:
    """What the page's HiCache series add up to (per rank bytes summed over the TP ranks: the physical total)."""
    if "tier" not in r:
        return None
    t, tp = r["tier"], layout["tp"]
    out: dict = {"host_hit_tokens": t["host_hit_tokens"], "device_hit_tokens": t["device_hit_tokens"],
                 "input_tokens": t["input_tokens"], "storage_hit_tokens": t["storage_hit_tokens"]}
    for tokens_key, ops_key, speed, name in (("backup_tokens", "backup_ops", 30e9, "stored"),
                                             ("load_back_tokens", "load_back_ops", 40e9, "loaded")):
        per_op = t[tokens_key] // t[ops_key]
        rank_bytes = per_op * BYTES_PER_TOKEN // tp
        out[f"{name}_tokens"] = per_op * t[ops_key]
        out[f"{name}_bytes"] = rank_bytes * t[ops_key] * tp
        out[f"{name}_seconds_per_rank"] = rank_bytes / speed * t[ops_key]
    return out


def main() -> int:
    from pages import write_layouts  # beside this file (conformance/metrics/pages.py)

    return write_layouts(LAYOUTS, build, "sglang", sglang.__version__,
                         (f"sglang {sglang.__version__} SchedulerMetricsCollector "
                         "(sglang/srt/observability/metrics_collector.py), one process per rank"))


if __name__ == "__main__":
    raise SystemExit(main())

"""Metrics pages written by vLLM 0.33.0's own exposition code, for kvdash's CI tests.

Runs in the vLLM side venv (never in CI): ``conformance/metrics/run.sh``.  For each layout, the
front end's ``PrometheusStatLogger`` (``vllm/v1/metrics/loggers.py``) is built from a real
``VllmConfig`` (the model's published config.json under ``tests/data/configs``); each engine
core's ready response goes through the front end's own ``MPClient._apply_ready_response``
(``vllm/v1/engine/core_client.py``: it SUMS ``num_gpu_blocks`` over the DP engines a front end
talks to, and keeps ``kv_cache_size_tokens`` per engine); ``log_engine_initialized`` writes
``vllm:cache_config_info``; ``record(SchedulerStats, IterationStats, engine_idx=i)`` writes each
engine's scheduler figures.  The page is prometheus-client's ``generate_latest`` of the registry
the logger wrote to, as ``vllm serve``'s ``/metrics`` serves it (one API server: no multiprocess
directory; vLLM uses one only with ``--api-server-count`` > 1).

Tensor and pipeline parallelism happen inside one engine core: its workers never write metrics,
so TP 8 and PP 2 give one ``engine`` per DP rank like TP 1 (the pool is the engine's, from its
ready response).  ``--data-parallel-size-local`` with a DP size above it means several front ends
(one per node, hybrid load balancing): each serves only its local engines, so a page holds
``engine`` labels ``start .. start + local - 1``.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from types import SimpleNamespace

warnings.filterwarnings("ignore")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import msgspec  # noqa: E402
import vllm  # noqa: E402
from prometheus_client import REGISTRY, generate_latest  # noqa: E402
from vllm.config import (  # noqa: E402
    CacheConfig,
    DeviceConfig,
    ModelConfig,
    ParallelConfig,
    VllmConfig,
)
from vllm.v1.engine import EngineCoreReadyResponse  # noqa: E402
from vllm.v1.engine.core_client import MPClient  # noqa: E402
from vllm.v1.metrics.loggers import PrometheusStatLogger  # noqa: E402
from vllm.v1.metrics.stats import IterationStats, PrefixCacheStats, SchedulerStats  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

# Each layout: the engines one front end serves, and each engine's figures (what its engine core
# would report).  Pools differ per engine on purpose (GPUs differ; vLLM does not equalise them).
LAYOUTS = [
    {"name": "tp1", "model": "llama-3.1-8b", "tp": 1, "pp": 1, "dp": 1, "dp_local": None,
     "engines": [{"blocks": 177326, "block_size": 16, "usage": 0.42, "running": 12, "waiting": 3,
                  "skipped": 1, "queries": 90000, "hits": 36000, "preempted": 2}]},
    {"name": "tp8", "model": "llama-3.1-70b", "tp": 8, "pp": 1, "dp": 1, "dp_local": None,
     "engines": [{"blocks": 354652, "block_size": 16, "usage": 0.31, "running": 40, "waiting": 0,
                  "skipped": 0, "queries": 500000, "hits": 125000, "preempted": 0}]},
    {"name": "pp2", "model": "llama-3.1-70b", "tp": 4, "pp": 2, "dp": 1, "dp_local": None,
     "engines": [{"blocks": 301234, "block_size": 16, "usage": 0.55, "running": 21, "waiting": 4,
                  "skipped": 0, "queries": 80000, "hits": 8000, "preempted": 1}]},
    {"name": "dp2", "model": "llama-3.1-8b", "tp": 1, "pp": 1, "dp": 2, "dp_local": None,
     "engines": [{"blocks": 177326, "block_size": 16, "usage": 0.10, "running": 3, "waiting": 0,
                  "skipped": 0, "queries": 1000, "hits": 100, "preempted": 0},
                 {"blocks": 177326, "block_size": 16, "usage": 0.90, "running": 30, "waiting": 7,
                  "skipped": 2, "queries": 30000, "hits": 21000, "preempted": 5}]},
    {"name": "dp4", "model": "llama-3.1-8b", "tp": 2, "pp": 1, "dp": 4, "dp_local": None,
     "engines": [{"blocks": 400000 + 1000 * i, "block_size": 16, "usage": u, "running": r, "waiting": w,
                  "skipped": 0, "queries": 10000 * (i + 1), "hits": 2500 * (i + 1), "preempted": i}
                 for i, (u, r, w) in enumerate([(0.2, 5, 0), (0.4, 9, 1), (0.65, 14, 2), (0.05, 1, 0)])]},
    # DP 4 over two nodes (--data-parallel-size 4 --data-parallel-size-local 2): this page is the
    # second node's front end, serving engines 2 and 3.
    {"name": "dp4_local2", "model": "llama-3.1-8b", "tp": 1, "pp": 1, "dp": 4, "dp_local": 2, "dp_start": 2,
     "engines": [{"blocks": 180000, "block_size": 16, "usage": 0.7, "running": 18, "waiting": 2,
                  "skipped": 0, "queries": 7000, "hits": 700, "preempted": 3},
                 {"blocks": 181000, "block_size": 16, "usage": 0.3, "running": 6, "waiting": 0,
                  "skipped": 0, "queries": 5000, "hits": 2500, "preempted": 0}]},
    # KV offloading to CPU (--kv-offloading-size 64, in GiB): cache_config_info carries it; the offloading
    # connector's own metrics (vllm:kv_offload_*) come from its CPU tier (CPUOffloadingSpec, its manager) and
    # the workers' transfer figures, as the connector's scheduler side hands them to the logger.  The tier
    # figures: chunks stored (each request's full blocks) and loaded (the KV-connector hits: 70,000 tokens =
    # 4,375 chunks of 16), the transfers timed at the harness's bandwidths (PCIe Gen5 x16-class: 40 GB/s
    # host-to-GPU, 30 GB/s GPU-to-host), in_flight chunks still being written when the page is read.
    {"name": "offload", "model": "llama-3.1-8b", "tp": 1, "pp": 1, "dp": 1, "dp_local": None,
     "offload_gib": 64.0,
     "engines": [{"blocks": 150000, "block_size": 16, "usage": 0.77, "running": 25, "waiting": 5,
                  "skipped": 0, "queries": 200000, "hits": 60000, "preempted": 4,
                  "ext_queries": 140000, "ext_hits": 70000,
                  "tier": {"stored_chunks": 12000, "loaded_chunks": 4375, "in_flight_chunks": 300,
                           "load_ops": 35, "store_ops": 96, "load_bytes_per_s": 40e9, "store_bytes_per_s": 30e9}}]},
]


def vllm_config(layout: dict) -> VllmConfig:
    d = REPO / "tests" / "data" / "configs" / layout["model"]
    mc = ModelConfig(model=str(d), tokenizer=str(d), skip_tokenizer_init=True, max_model_len=8192,
                     dtype="bfloat16", served_model_name=f"meta-llama/{d.name}")
    cc = CacheConfig(block_size=16)
    if layout.get("offload_gib"):
        cc.kv_offloading_size = layout["offload_gib"]
    pc = ParallelConfig(tensor_parallel_size=layout["tp"], pipeline_parallel_size=layout["pp"],
                        data_parallel_size=layout["dp"],
                        **({"data_parallel_size_local": layout["dp_local"]} if layout["dp_local"] else {}))
    return VllmConfig(model_config=mc, cache_config=cc, parallel_config=pc, device_config=DeviceConfig(device="cpu"))


def ready(vc: VllmConfig, rank: int, e: dict) -> bytes:
    """The engine core's ready response (vllm/v1/engine/core.py builds it the same way)."""
    pc = vc.parallel_config
    resp = EngineCoreReadyResponse(
        num_gpu_blocks=e["blocks"], block_size=e["block_size"], max_model_len=vc.model_config.max_model_len,
        dp_stats_address=None, dtype="bfloat16", vllm_version=vllm.__version__, world_size=pc.world_size,
        data_parallel_size=pc.data_parallel_size, tensor_parallel_size=pc.tensor_parallel_size, pipeline_parallel_size=pc.pipeline_parallel_size,
        decode_context_parallel_size=1, data_parallel_rank=rank, max_num_seqs=1024, max_num_batched_tokens=8192,
        instance_id="kvdash-harness", supports_lora=False, max_loras=0,
        kv_cache_size_tokens=e["blocks"] * e["block_size"], kv_cache_max_concurrency=e["blocks"] * 16 / 8192,
    )
    return msgspec.msgpack.encode(resp)


def offload_stats(vc: VllmConfig, rank: int, e: dict) -> tuple[dict, dict]:
    """The offloading connector's stats payload for one engine, from vLLM's own code: the engine's KV cache
    groups (``FullAttentionSpec`` per layer, as the model runner builds them) -> ``build_offloading_config``
    -> ``OffloadingSpecFactory.create_spec`` (``CPUOffloadingSpec``: the tier's chunks) -> its
    ``CPUOffloadingManager``, given ``prepare_store``/``complete_store``/``prepare_load`` calls; the workers'
    transfer figures (``OffloadingWorkerMetadata``) go through the connector scheduler's own
    ``_update_connector_output`` and ``get_stats`` (on a stand-in holding the fields they read)."""
    import contextlib

    import torch
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (
        DirectionalTransferStats,
        OffloadingWorkerMetadata,
        TransferStats,
    )
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.config import build_offloading_config
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import OffloadingConnectorStats
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import OffloadingConnectorScheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.kv_offload.base import ReqContext, make_offload_key
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory
    from vllm.v1.outputs import KVConnectorOutput

    mc, pc, t = vc.model_config, vc.parallel_config, e["tier"]
    assert vc.kv_transfer_config is not None
    vc.kv_transfer_config.engine_id = f"kvdash-harness-{rank}"
    spec = FullAttentionSpec(block_size=e["block_size"], num_kv_heads=mc.get_num_kv_heads(pc),
                             head_size=mc.get_head_size(), dtype=torch.bfloat16)
    layers = [f"model.layers.{i}.self_attn.attn" for i in range(mc.get_num_layers(pc))]
    kcc = KVCacheConfig(num_blocks=e["blocks"], kv_cache_tensors=[],
                        kv_cache_groups=[KVCacheGroupSpec(layer_names=layers, kv_cache_spec=spec)])
    tier = OffloadingSpecFactory.create_spec(build_offloading_config(vc, kcc))
    manager = tier.get_manager()
    ctx = ReqContext(req_id="harness")
    manager.on_new_request(ctx)
    keys = [make_offload_key(i.to_bytes(32, "big"), 0) for i in range(t["stored_chunks"] + t["in_flight_chunks"])]
    manager.prepare_store(keys, ctx)
    manager.complete_store(keys[:t["stored_chunks"]], ctx)
    chunk_bytes = tier.kv_bytes_per_chunk
    load_b, store_b = t["loaded_chunks"] * chunk_bytes, t["stored_chunks"] * chunk_bytes
    load_t, store_t = load_b / t["load_bytes_per_s"], store_b / t["store_bytes_per_s"]

    def ops(total: int, n: int) -> list[int]:
        return [total // n + (1 if i < total % n else 0) for i in range(n)]

    meta = OffloadingWorkerMetadata(transfer_stats=TransferStats(
        load=DirectionalTransferStats(bytes=load_b, time=load_t, sizes=ops(load_b, t["load_ops"])),
        store=DirectionalTransferStats(bytes=store_b, time=store_t, sizes=ops(store_b, t["store_ops"]))))
    sched = SimpleNamespace(_connector_stats=OffloadingConnectorStats(), manager=manager, _info_sent=False,
                            _manager_locked=contextlib.nullcontext, _stale_job_threshold=0, _jobs={})
    OffloadingConnectorScheduler._update_connector_output(sched, KVConnectorOutput(kv_connector_worker_meta=meta))
    stats = OffloadingConnectorScheduler.get_stats(sched)
    assert stats is not None
    info = tier.cpu_info
    return stats.data, {
        "cpu_num_chunks": info.cpu_num_chunks, "cpu_blocks_per_chunk": info.cpu_blocks_per_chunk,
        "cpu_kv_cache_size_bytes": info.cpu_kv_cache_size_bytes, "cpu_kv_cache_size_tokens": info.cpu_kv_cache_size_tokens,
        "chunk_bytes": chunk_bytes, "loaded_bytes": load_b, "stored_bytes": store_b, "load_seconds": load_t,
        "store_seconds": store_t, "in_flight_chunks": t["in_flight_chunks"],
        "cpu_cache_usage": stats.data["data"]["vllm:kv_offload_cpu_cache_usage_perc"][()]}


def build(layout: dict) -> tuple[str, dict]:
    vc = vllm_config(layout)
    start = layout.get("dp_start", 0)
    idxs = [start + i for i in range(len(layout["engines"]))]
    # the front end's own handshake code, on a stand-in for the client object (it reads these fields)
    client = SimpleNamespace(vllm_config=vc, _effective_attention_block_sizes=set(), stats_update_address=None,
                             _kv_event_sources={})
    for rank, e in zip(idxs, layout["engines"]):
        MPClient._apply_ready_response(client, ready(vc, rank, e))
    for c in list(REGISTRY._collector_to_names):
        REGISTRY.unregister(c)
    logger = PrometheusStatLogger(vc, engine_indexes=idxs)
    logger.log_engine_initialized()
    figures = {"layout": layout["name"], "kind": "vllm", "served_model": vc.model_config.served_model_name,
               "front_end_num_gpu_blocks": vc.cache_config.num_gpu_blocks, "engines": []}
    for rank, e in zip(idxs, layout["engines"]):
        pcs = PrefixCacheStats(requests=10, queries=e["queries"], hits=e["hits"])
        conn = None
        if "ext_queries" in e:
            conn = PrefixCacheStats(requests=10, queries=e["ext_queries"], hits=e["ext_hits"])
        stats = SchedulerStats(num_running_reqs=e["running"], num_waiting_reqs=e["waiting"],
                               num_skipped_waiting_reqs=e["skipped"], kv_cache_usage=e["usage"],
                               prefix_cache_stats=pcs, connector_prefix_cache_stats=conn)
        tier_figures: dict | None = None
        if "tier" in e:
            stats.kv_connector_stats, tier_figures = offload_stats(vc, rank, e)
        it = IterationStats()
        it.num_preempted_reqs = e["preempted"]
        logger.record(stats, it, engine_idx=rank)
        figures["engines"].append({
            # what the page says of each engine's pool: kv_cache_size_tokens, which the front end takes from
            # the FIRST engine's ready response and writes for every engine (core_client.py); the engine
            # core's own pool is beside it
            "engine": str(rank), "pool_tokens": vc.cache_config.kv_cache_size_tokens,
            "engine_core_pool_tokens": e["blocks"] * e["block_size"], "num_gpu_blocks": e["blocks"],
            "block_size": e["block_size"], "usage": e["usage"], "running": e["running"],
            "waiting": e["waiting"] + e["skipped"], "waiting_capacity": e["waiting"],
            "waiting_deferred": e["skipped"], "prefix_queries": e["queries"], "prefix_hits": e["hits"],
            "preemptions": e["preempted"], "external_queries": e.get("ext_queries"),
            "external_hits": e.get("ext_hits"), "offload_gib": layout.get("offload_gib"),
            "offload_tier": tier_figures})
    if layout["name"] == "tp1":  # sleep level 1 on the single engine (POST /sleep?level=1)
        logger.record_sleep_state(sleep=1, level=1)
        figures["engines"][0]["sleep"] = "weights_offloaded"
    return generate_latest(REGISTRY).decode(), figures


def main() -> int:
    from pages import write_layouts  # beside this file (conformance/metrics/pages.py)

    return write_layouts(LAYOUTS, build, "vllm", vllm.__version__,
                         f"vllm {vllm.__version__} PrometheusStatLogger (vllm/v1/metrics/loggers.py)")


if __name__ == "__main__":
    raise SystemExit(main())

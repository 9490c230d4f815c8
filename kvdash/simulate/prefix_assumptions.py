"""The assumptions of a prefix-cache replay, as the lines ``kvdash simulate --hash-trace / --prefix-workload``
prints and a report's ``prefix_cache:`` section lists (one text for both)."""

from __future__ import annotations

from typing import Any


def prefix_assumptions(rules: str, spec: Any, sized: dict[str, Any], cpu_link: Any, dlink: Any, w: Any,
                       conc: int) -> list[str]:
    """What a prefix-cache replay assumes, one line each: the rules (vLLM 0.33.0's block pool or LMCache 0.5.6's
    chunks), each offload tier's size, the links, and the time model."""
    out = []
    if rules == "vllm":
        out.append(f"vLLM 0.33.0 prefix caching: {spec.block_size}-token blocks hashed when full (prompt and output), "
                   "hits on the run of cached blocks from the start up to prompt - 1 tokens, freed blocks evicted "
                   "least recently used with each request's tail first (vllm/v1/core/block_pool.py, "
                   "single_type_kv_cache_manager.py)")
        if "cpu" in sized:
            c = sized["cpu"]
            out.append(f"vLLM native offloading: CPU tier of {c.chunks:,} chunks of {c.chunk_bytes:,} B "
                       f"({c.chunk_tokens} tokens each) = {c.tokens:,} tokens from {c.size_bytes:,} B "
                       "(cpu_bytes // round_up(bytes per block x ranks x blocks per chunk, 4,096); "
                       f"vllm/v1/kv_offload/cpu/spec.py); every full chunk offered, the prompt's "
                       + (f"{spec.prefill_step_tokens:,} tokens a step (max_num_batched_tokens, the request alone "
                          "in its prefill steps)" if spec.prefill_step_tokens else "at once")
                       + ", each output chunk as it fills; an offer larger than the tier is not stored, nor any "
                       f"later one of that request (prepare_store: all or nothing); {spec.cpu_policy.upper()} "
                       "eviction, tails first")
        if spec.disk_tokens != 0:
            out.append("disk tier: vLLM's filesystem tier receives every chunk stored to the CPU tier and is read "
                       "through it (vllm/v1/kv_offload/tiering/manager.py); it evicts nothing, so it is "
                       + ("unbounded here" if spec.disk_tokens is None else
                          f"cut at {spec.disk_tokens:,} tokens here, LRU (kvdash's assumption)"))
    else:
        out.append("LMCache 0.5.6 rules: 256-token prompt chunks, partial tails never stored, outputs not stored "
                   "(save_decode_cache False), prefix hits only, LRU, every chunk written to every tier "
                   "(lmcache/v1/config.py; lmcache/tools/cache_simulator); no GPU prefix cache modelled, as "
                   "LMCache's simulator")
        for name, t in sized.items():
            out.append(f"LMCache {name} tier: {t.chunks:,} chunks of {t.chunk_bytes:,} B = {t.tokens:,} tokens")
    out.append(f"links: GPU-host {cpu_link.name}, {cpu_link.bytes_per_s / 1e9:g} GB/s per direction per GPU "
               f"({cpu_link.source}); disk {dlink.name}, {dlink.bytes_per_s / 1e9:g} GB/s shared "
               f"({dlink.source}); transfer times are bytes / bandwidth, lower bounds")
    out.append(f"time: requests in arrival order, {conc} in flight (the oldest finishes as the next is admitted); "
               "every block of a request is allocated at admission; no preemption, no chunked prefill")
    return out

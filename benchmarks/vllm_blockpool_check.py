"""Cross-check kvdash's prefix-cache pool against vLLM's own BlockPool (run in the vLLM side venv).

    /work/vllm-venv/bin/python benchmarks/vllm_blockpool_check.py > tests/data/vllm_blockpool_check.json

Drives ``vllm.v1.core.block_pool.BlockPool`` (vLLM 0.33.0) with the calls ``KVCacheManager`` makes for
one request at a time (``get_cached_block`` on the prompt's block hashes up to prompt - 1 tokens,
``touch``, ``get_new_blocks``, ``cache_full_blocks``, ``free_blocks(reversed(blocks))``) on workloads
kvdash generates, and records each request's hit blocks and the pool's evictions.  The hashes are
kvdash's block keys as 8-byte strings, so both sides see the same content identity;
``tests/test_prefix_cache.py`` replays the same workloads with kvdash and requires the same hits.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kvdash.simulate import prefixcache as P  # noqa: E402

CASES = [  # (workload spec, block size, GPU blocks)
    ("multi-turn:40,6,300,120,90", 16, 600),
    ("multi-turn:40,6,300,120,90", 16, 3000),
    ("system-prompts:5,700,150,60,400,5/3/1/1/1", 16, 200),
    ("system-prompts:3,64,40,30,300", 16, 40),
    ("mooncake:tests/data/mooncake/conversation_trace.jsonl.xz:400", 16, 20000),
    ("mooncake:tests/data/mooncake/synthetic_trace.jsonl.xz:300", 16, 30000),
]


def workload(spec: str) -> P.Workload:
    if spec.startswith("mooncake:"):
        _, path, limit = spec.split(":")
        return P.read_mooncake(str(Path(__file__).resolve().parent.parent / path), int(limit))
    return P.parse_workload_spec(spec, seed=0)


class _Req:
    def __init__(self, rid: str, hashes: list[bytes]) -> None:
        self.request_id = rid
        self.block_hashes = hashes


def run_vllm(w: P.Workload, B: int, blocks: int) -> dict[str, object]:
    from vllm.v1.core.block_pool import BlockPool

    pool = BlockPool(blocks, enable_caching=True, hash_block_size=B)
    keys = P.block_keys(w, B, True)
    hits: list[int] = []
    evictions = 0
    skipped = 0
    for i, ks in enumerate(keys):
        hashes = [k.to_bytes(8, "little") for k in ks]
        p = w.prompt[i]
        limit = (p - 1) // B
        computed = []
        for h in hashes[:limit]:
            got = pool.get_cached_block(h, [0])
            if got is None:
                break
            computed.append(got[0])
        nblocks = -(-(p + w.output[i]) // B)
        need = nblocks - len(computed)
        evictable = sum(1 for b in computed if b.ref_cnt == 0)
        if need > pool.get_num_free_blocks() - evictable:
            skipped += 1
            hits.append(-1)
            continue
        pool.touch(computed)
        before = sum(1 for b in pool.blocks if b.block_hash is not None)
        new = pool.get_new_blocks(need)
        after = sum(1 for b in pool.blocks if b.block_hash is not None)
        evictions += before - after
        allb = computed + new
        pool.cache_full_blocks(_Req(str(i), hashes), allb, len(computed), len(ks), B, 0)
        hits.append(len(computed))
        pool.free_blocks(reversed(allb))
    return {"hits": hits, "evictions": evictions, "skipped": skipped}


def main() -> None:
    import vllm

    out = {"producer": f"vllm {vllm.__version__} BlockPool (vllm/v1/core/block_pool.py)", "cases": []}
    for spec, B, blocks in CASES:
        w = workload(spec)
        res = run_vllm(w, B, blocks)
        out["cases"].append({"workload": spec, "block_size": B, "gpu_blocks": blocks, **res})
    print(json.dumps(out))


if __name__ == "__main__":
    main()

"""Run LMCache's own cache simulator on the Mooncake FAST'25 traces (a side tree, never a kvdash dependency).

    pip download lmcache==0.5.6 --no-deps -d /tmp/lmc && cd /tmp/lmc && unzip -q lmcache-0.5.6-*.whl 'lmcache/tools/*'
    python benchmarks/lmcache_compare.py /tmp/lmc > tests/data/lmcache_sim_mooncake.json

LMCache's ``lmcache/tools/cache_simulator/simulator.py`` (``simulate(events, capacity_bytes,
kv_bytes_per_chunk, fast=True)``) replays lookup events, each the list of a request's full 256-token
chunk hashes and its ``seq_len``.  A Mooncake request's chunk ``c`` is the half ``c % 2`` of its 512-token
hash block ``c // 2`` (a 512-token block holds two 256-token chunks; a partial last block holds a full
chunk only when it has 256 tokens or more), and the capacity is given in tokens with one byte per token
(so its chunks are ``tokens // 256``).  ``tests/test_prefix_cache.py`` requires kvdash's LMCache rules to
give the same hit tokens at every capacity.
"""

from __future__ import annotations

import json
import lzma
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CAPACITIES = [1_000_000, 3_000_000, 10_000_000, 50_000_000, None]
UNBOUNDED = 2**62


def events(name: str) -> list[dict[str, object]]:
    out = []
    text = lzma.decompress((ROOT / "tests/data/mooncake" / f"{name}_trace.jsonl.xz").read_bytes()).decode()
    for line in text.splitlines():
        r = json.loads(line)
        n = r["input_length"] // 256
        out.append({"timestamp": r["timestamp"], "seq_len": r["input_length"], "chunk_size": 256,
                    "chunk_hashes": [f"{r['hash_ids'][c // 2]}:{c % 2}" for c in range(n)]})
    return out


def main() -> None:
    sys.path.insert(0, sys.argv[1])
    from lmcache.tools.cache_simulator.simulator import simulate

    producer = "LMCache 0.5.6 lmcache/tools/cache_simulator/simulator.py simulate(fast=True)"
    out: dict[str, object] = {"producer": producer, "traces": {}}
    for name in ("conversation", "synthetic"):
        ev = events(name)
        rows = []
        for cap in CAPACITIES:
            res = simulate(ev, UNBOUNDED if cap is None else cap, 256, fast=True)
            rows.append({"capacity_tokens": cap, "hit_tokens": res["total_hit_tokens"],
                         "total_tokens": res["total_tokens"], "token_hit_rate": res["token_hit_rate"],
                         "evictions": res.get("eviction_count")})
        out["traces"][name] = rows  # type: ignore[index]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

"""Prefix-cache replay speed on Mooncake's FAST'25 conversation trace (12,031 requests, 144,793,823 prompt tokens).

Run: python benchmarks/prefix_replay.py [--rounds 3]

Times are CPU seconds of this process (``time.process_time``), so that other work on a shared machine does
not count; reading and decompressing the trace is timed apart, and the block keys are built inside each
replay (nothing cached between rounds).  Target (issue 29): a replay under 10 s.  Cases: LMCache's rules
at 3M tokens (565,000 chunks of 256 tokens); vLLM's rules with a 3M-token GPU pool (9.3 M 16-token blocks,
prompts and outputs); vLLM's rules with a 1M-token GPU pool and a 3M-token CPU tier (LRU).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from kvdash.simulate.prefixcache import TierSpec, read_mooncake, replay

TRACE = Path(__file__).resolve().parent.parent / "tests/data/mooncake/conversation_trace.jsonl.xz"
CASES = {
    "lmcache 3M": TierSpec(rules="lmcache", cpu_tokens=3_000_000),
    "vllm gpu 3M": TierSpec(rules="vllm", gpu_tokens=3_000_000),
    "vllm gpu 1M + cpu 3M": TierSpec(rules="vllm", gpu_tokens=1_000_000, cpu_tokens=3_000_000),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    t = time.process_time()
    w = read_mooncake(str(TRACE))
    print(f"read {len(w):,} requests, {w.prompt_tokens:,} prompt tokens: {time.process_time() - t:.2f} s CPU")
    for name, spec in CASES.items():
        times = []
        for _ in range(args.rounds):
            t = time.process_time()
            r = replay(w, spec)
            times.append(time.process_time() - t)
        print(f"{name}: best {min(times):.2f} s CPU of {args.rounds} (target < 10 s), hit {100 * r.hit_rate:.2f} %")


if __name__ == "__main__":
    main()

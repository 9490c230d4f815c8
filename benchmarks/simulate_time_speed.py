"""The simulator in seconds against the step simulator on the same requests (issue 28: at most 1.5 x).

Run: python benchmarks/simulate_time_speed.py [--requests 10000] [--rounds 21] [--warmup 5] [--concurrency 256]

Llama-3.1-8B (bf16) on one H100 80GB: the pool ``kvdash simulate --time`` uses (0.92 of 81,559 MiB, the
weights, the --reserve auto terms), ShareGPT-shaped lengths (kvdash's synthetic preset: lognormal means 161
in, 338 out), closed loop of --concurrency users.  The step simulator (``kvdash simulate``, paged) runs
the same requests over the same token slots (its result holds its statistics); the timed one (``kvdash simulate
--time``) adds chunked prefill under max_num_batched_tokens 8,192, max_num_seqs 1,024 and the step-time model, and
is timed with its summary (``summarize``: the TTFT / TPOT / E2E percentiles and rates it prints).  Times are CPU
seconds of this process (``time.process_time``), median of --rounds (the two interleaved; each round's own ratio
is printed too, its median and quartiles: the two runs of a round see the same load) after --warmup
uncounted rounds of both (the step simulator's first rounds take about 1.5 x its later ones, which flattered
the ratio when they were counted).
The timed simulator runs event by event (:mod:`kvdash.simulate.timed_fast`) for this model.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace

from kvdash.core.gpus import get_gpu
from kvdash.core.model import DATA, load_preset
from kvdash.core.steptime import fitted_constants, gpu_perf, model_compute
from kvdash.engines.vllm import rank_shapes
from kvdash.engines.vllm_reserve import auto_reserve
from kvdash.simulate.engine import simulate
from kvdash.simulate.timed import Pool, simulate_timed, summarize
from kvdash.simulate.workload import PRESETS, draw_requests


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--warmup", type=int, default=5, help="uncounted rounds of both first")
    ap.add_argument("--concurrency", type=int, default=256)
    args = ap.parse_args()
    arch = load_preset("llama-3.1-8b")
    cfg = json.loads((DATA / "models" / "llama-3.1-8b.json").read_text())
    mc = model_compute(cfg, arch, 1, "bf16")
    gpu = get_gpu("h100-80gb")
    shape = rank_shapes(arch, "bf16", "tensor", 1, 1, 16)[0]
    reserve = auto_reserve(arch.model_type, 1, 1, 8192, gpu.key, None, layers=arch.num_layers)["bytes"]
    budget = int(gpu.memory_bytes * 0.92) - mc.weights_per_rank - reserve
    pool = Pool.of(shape, budget)
    slots = pool.blocks * 16
    w = replace(PRESETS["sharegpt"], requests=args.requests, arrival="closed", concurrency=args.concurrency)
    reqs = draw_requests(w, 0, 8192)
    consts, perf = fitted_constants("h100-80gb"), gpu_perf("h100-80gb")

    def step() -> None:
        simulate(w, "paged", slots, 16, 8192, requests=reqs)

    def timed() -> None:  # the schedule, and the figures simulate --time prints from it (as simulate's Result)
        s = simulate_timed(reqs.prompt, reqs.output, pool, mc, perf, consts, 1024, 8192, concurrency=args.concurrency)
        summarize(s, consts, reqs.output, 1)

    times: dict[str, list[float]] = {"step": [], "timed": []}
    for _ in range(args.warmup):  # not counted: the first rounds of both run slower (allocator, caches)
        step()
        timed()
    for _ in range(args.rounds):  # interleaved, so that both see the same load on a shared machine
        for name, fn in (("step", step), ("timed", timed)):
            t = time.process_time()
            fn()
            times[name].append(time.process_time() - t)
    out = {name: statistics.median(v) for name, v in times.items()}
    # each round's own ratio (its two runs back to back, under the same load): their median and quartiles
    paired = statistics.quantiles([t / s for s, t in zip(times["step"], times["timed"], strict=True)], n=4)
    print(f"{args.requests:,} ShareGPT-shaped requests, Llama-3.1-8B / H100, {pool.blocks:,} blocks, closed loop of "
          f"{args.concurrency}: step simulator {out['step']:.3f} CPU s, timed simulator {out['timed']:.3f} CPU s, "
          f"ratio {out['timed'] / out['step']:.2f} x (target <= 1.5 x); round by round {paired[1]:.2f} x "
          f"(quartiles {paired[0]:.2f}-{paired[2]:.2f})")


if __name__ == "__main__":
    main()

"""Simulated GPUs for ``kvdash live --demo``: deterministic under a seed, no GPU needed.

The default is an 8 x H200 host running one tensor-parallel-8 engine the way vLLM lays memory out:
each rank holds its weight shard, a runtime reserve (activation peak, CUDA graphs) and a KV pool
sized to ``gpu_memory_utilization`` (vLLM 0.33's default, 0.92, the same default kvdash uses).
Utilization, power and temperature move with a seeded random walk; a side job on some GPUs grows and
shrinks so the memory history moves; the engine's metrics (KV usage, running and waiting requests) move
with the load.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from kvdash import defaults
from kvdash.sources.base import GPUReading, ProcessReading, Snapshot

H200_BYTES = 143_771 * 2**20  # what NVML reports on an H200
MiB = 2**20
GiB = 2**30


@dataclass
class DemoProfile:
    gpus: int = 8
    total_bytes: int = H200_BYTES
    gpu_name: str = "NVIDIA H200 (demo)"
    weights_per_rank: int = 17_650_000_000  # Llama-3.1-70B bf16 over 8 ranks, estimated
    runtime_reserve: int = 4 * GiB + 512 * MiB  # activation peak + CUDA graphs, as profiled by an engine
    utilization: float = float(defaults.GPU_UTIL)  # vLLM 0.33's gpu_memory_utilization default, as kvdash's
    block_size: int = 16
    block_bytes: int = 16 * 40_960  # Llama-3.1-70B bf16 at TP 8: 40,960 B/token per rank
    engine_pid: int = 4242


class DemoSource:
    def __init__(self, seed: int = 7, profile: DemoProfile | None = None, start: float = 1_767_225_600.0,
                 step_s: float = 1.0) -> None:
        self.seed = seed
        self.profile = profile or DemoProfile()
        self.rng = random.Random(seed)
        self.name = f"demo (seed {seed})"
        self.tick = 0
        self.start = start
        self.step_s = step_s
        self.load = 0.55
        self.side = [0] * self.profile.gpus
        p = self.profile
        pool_bytes = int(p.total_bytes * p.utilization) - p.weights_per_rank - p.runtime_reserve
        self.num_gpu_blocks = pool_bytes // p.block_bytes
        self.engine_bytes = p.weights_per_rank + p.runtime_reserve + self.num_gpu_blocks * p.block_bytes

    def _step(self) -> None:
        self.tick += 1
        self.load = min(0.98, max(0.05, self.load + self.rng.gauss(0, 0.06)))
        for i in range(self.profile.gpus):
            if i % 3 == 0:  # a side job on some GPUs grows and shrinks
                phase = (self.tick + 5 * i) / 17
                self.side[i] = int((1 + math.sin(phase)) * 3 * GiB) // MiB * MiB

    def read(self) -> Snapshot:
        self._step()
        p = self.profile
        gpus = []
        for i in range(p.gpus):
            jitter = self.rng.uniform(-0.04, 0.04)
            util = int(round(100 * min(1.0, max(0.0, self.load + jitter))))
            procs = [ProcessReading(p.engine_pid + i, f"python3 -m vllm.entrypoints.openai.api_server (rank {i})",
                                    self.engine_bytes)]
            if self.side[i]:
                procs.append(ProcessReading(9000 + i, "python3 profile_kernels.py", self.side[i]))
            used = self.engine_bytes + self.side[i] + 512 * MiB  # plus the CUDA context
            gpus.append(GPUReading(
                index=i, name=p.gpu_name, uuid=f"GPU-demo-{self.seed:04d}-{i:02d}", total_bytes=p.total_bytes,
                used_bytes=used, free_bytes=p.total_bytes - used - 512 * MiB, reserved_bytes=512 * MiB,
                utilization_percent=util, temperature_c=38 + util // 3, power_w=round(90 + 6 * util, 1),
                power_limit_w=700.0, processes=tuple(procs), processes_note="", memory_api="v2",
            ))
        running = int(self.load * 180)
        waiting = max(0, int((self.load - 0.8) * 400))
        engine = {
            "kind": "vllm (demo)",
            "served_model": "meta-llama/Llama-3.1-70B-Instruct",
            "kv_usage": round(min(1.0, self.load * 1.02), 4),
            "running": running,
            "waiting": waiting,
            "preemptions": self.tick // 40,
            "prefix_hit_rate": 0.31,
            "prefix_queries": self.tick * 40_960,  # counters, for the windowed rates (31 % hits)
            "prefix_hits": self.tick * 12_697,
            "external_queries": self.tick * 28_263,  # a KV connector (LMCache-like) serving a quarter of the misses
            "external_hits": self.tick * 7_065,
            "waiting_by_reason": {"capacity": waiting, "deferred": 0},
            "offload": {"tier": "vLLM native offloading (native)", "size_gib": "64.0"},
            "num_gpu_blocks": self.num_gpu_blocks,
            "block_size": p.block_size,
            "gpu_memory_utilization": p.utilization,  # as vllm:cache_config_info carries them
            "cache_dtype": "auto",
        }
        return Snapshot(time=self.start + self.tick * self.step_s, source=self.name, gpus=tuple(gpus),
                        driver="demo", extra={"engine": engine})

    def close(self) -> None:
        return None

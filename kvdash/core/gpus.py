"""GPU presets: the memory figure each uses and where it comes from."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from kvdash.errors import unknown_name

DATA = Path(__file__).resolve().parent.parent / "data"  # shipped inside the package


@dataclass(frozen=True)
class GPU:
    key: str
    name: str
    memory_bytes: int
    basis: str  # "nvml" (what the driver reports on such a card) or "nominal" (advertised size)
    detail: str
    compute_capability: str = ""  # "9.0" (Hopper); "" for a non-CUDA GPU: it picks vLLM's attention backend
    # the time model's figures (kvdash.core.steptime): dense, no sparsity; 0 / empty where not given
    hbm_bytes_per_s: int = 0
    flops: dict[str, int] = field(default_factory=dict, compare=False)  # "bf16", "fp8", "fp4" -> FLOP/s
    link_bytes_per_s: int = 0  # NVLink per GPU, one direction
    perf_source: str = ""


def gpu_presets() -> dict[str, GPU]:
    raw = json.loads((DATA / "gpus.json").read_text(encoding="utf-8"))
    return {k: GPU(key=k, **v) for k, v in raw.items() if not k.startswith("_")}


def get_gpu(name: str) -> GPU:
    presets = gpu_presets()
    key = name.lower().replace(" ", "-").replace("_", "-")
    if key not in presets:
        raise unknown_name("--gpu", name, presets)
    return presets[key]

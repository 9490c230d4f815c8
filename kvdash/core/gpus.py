"""GPU presets: the memory figure each uses and where it comes from."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

from kvdash.errors import unknown_name


@dataclass(frozen=True)
class GPU:
    key: str
    name: str
    memory_bytes: int
    basis: str  # "nvml" (what the driver reports on such a card) or "nominal" (advertised size)
    detail: str


def gpu_presets() -> dict[str, GPU]:
    raw = json.loads((resources.files("kvdash") / "data" / "gpus.json").read_text(encoding="utf-8"))
    return {k: GPU(key=k, **v) for k, v in raw.items() if not k.startswith("_")}


def get_gpu(name: str) -> GPU:
    presets = gpu_presets()
    key = name.lower().replace(" ", "-").replace("_", "-")
    if key not in presets:
        raise unknown_name("--gpu", name, presets)
    return presets[key]

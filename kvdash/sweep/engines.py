"""``grid: engine: [vllm, sglang]``: each grid point's pool under SGLang 0.5.23's rules beside vLLM 0.33's.

The grid's points are vLLM's (every other column); ``engine`` with ``sglang`` among its values adds, per point,
what SGLang would hold on the same GPU, TP and KV dtype (:func:`kvdash.engines.sglang.view`: its
``mem_fraction_static`` default, its cell size, ``max_total_num_tokens`` at SGLang's default page size 1,
``max_running_requests``), and by how much it differs from vLLM's ``GPU KV cache size``.  A point without a GPU
(a declared budget) or a model kvdash does not mirror for SGLang gets empty figures and the one-line reason."""

from __future__ import annotations

from typing import Any

import polars as pl

from kvdash.core.gpus import gpu_presets
from kvdash.sweep.gridfile import GridSpec

ENGINES = ("vllm", "sglang")


def engine_columns(spec: GridSpec) -> list[tuple[str, str, str]]:
    """(name, kind, meaning) of the columns ``engine: [.., sglang]`` adds, in order."""
    if "sglang" not in spec.engines:
        return []
    return [
        ("sglang_mem_fraction_static", "float", "SGLang 0.5.23's mem_fraction_static default for the GPU and TP "
         "(arg_groups/memory_hook.py handle_gpu_memory_settings)"),
        ("sglang_kv_cache_tokens", "int", "SGLang 0.5.23's max_total_num_tokens per rank (page size 1; free memory "
         "before the weights: the GPU's total less 1 GiB)"),
        ("sglang_running_requests", "int", "SGLang 0.5.23's max_running_requests (resolve_max_num_reqs)"),
        ("sglang_vs_vllm_percent", "float", "100 x (SGLang tokens - vLLM's GPU KV cache size) / vLLM's"),
        ("sglang_note", "str", "why a point has no SGLang figures (empty when it has them)"),
    ]


def add_engines(spec: GridSpec, frame: pl.DataFrame) -> pl.DataFrame:
    if "sglang" not in spec.engines:
        return frame
    from kvdash.core import formulas as f
    from kvdash.engines import sglang

    presets = gpu_presets()
    cache: dict[tuple[Any, ...], dict[str, Any]] = {}
    cols: dict[str, list[Any]] = {name: [] for name, _, _ in engine_columns(spec)}
    for r in frame.select("model", "kv_dtype", "tp", "pp", "gpu", "vllm_kv_cache_tokens").iter_rows(named=True):
        key = (r["model"], r["kv_dtype"], r["tp"], r["pp"], r["gpu"])
        if key not in cache:
            arch = spec.models[str(r["model"])].arch
            gpu = presets.get(str(r["gpu"])) if r["gpu"] else None
            if gpu is None:
                cache[key] = {"refused": "SGLang's pool is derived from a GPU: the point has a declared budget"}
            elif r["pp"] != 1:
                cache[key] = {"refused": "SGLang's view is mirrored for pp 1 only"}
            elif not arch.weights_known:
                cache[key] = {"refused": "the model's weights are unknown (give them in models:)"}
            else:
                cache[key] = sglang.view(arch, gpu.memory_bytes, r["tp"], str(r["kv_dtype"]),
                                         f.weights_per_rank(arch.weight_bytes, r["tp"]))
        v = cache[key]
        tokens = v.get("max_total_num_tokens")
        vllm_tokens = r["vllm_kv_cache_tokens"]
        cols["sglang_mem_fraction_static"].append(v.get("mem_fraction_static"))
        cols["sglang_kv_cache_tokens"].append(tokens)
        cols["sglang_running_requests"].append(v.get("max_running_requests"))
        cols["sglang_vs_vllm_percent"].append(
            round(100 * (tokens - vllm_tokens) / vllm_tokens, 6) if tokens is not None and vllm_tokens else None)
        cols["sglang_note"].append(v.get("refused", ""))
    return frame.with_columns(
        pl.Series("sglang_mem_fraction_static", cols["sglang_mem_fraction_static"], dtype=pl.Float64),
        pl.Series("sglang_kv_cache_tokens", cols["sglang_kv_cache_tokens"], dtype=pl.Int64),
        pl.Series("sglang_running_requests", cols["sglang_running_requests"], dtype=pl.Int64),
        pl.Series("sglang_vs_vllm_percent", cols["sglang_vs_vllm_percent"], dtype=pl.Float64),
        pl.Series("sglang_note", cols["sglang_note"], dtype=pl.Utf8))

"""The report's "Engines compared" section and decision line for ``grid: engine: [vllm, sglang]``: per model,
GPU, TP and KV dtype both engines' plans side by side, by how much they differ and why -- the budget rule and
its fraction, the cell size, the page, and the running-request cap -- each figure from the grid's own rows
(:mod:`kvdash.sweep.engines`)."""

from __future__ import annotations

import statistics
from typing import Any

import polars as pl

from kvdash.sweep.gridfile import GridSpec
from kvdash.units import gib_text

GIB = 1 << 30
SAME = ("model", "gpu", "tp", "pp", "kv_dtype")  # a plan's hardware and model: the engines compared on it
HEADERS = ["model", "GPUs", "KV", "vLLM budget/rank", "vLLM GPU KV cache size", "SGLang budget/rank",
           "mem_fraction_static", "SGLang max_total_num_tokens", "max_running_requests", "SGLang vs vLLM"]


def vllm_rows(df: pl.DataFrame) -> pl.DataFrame:
    """The rows vLLM's rules plan (all rows of a grid without ``engine:``): what vLLM-only lines describe."""
    return df.filter(pl.col("engine") == "vllm") if "engine" in df.columns else df


def _pct(a: float, b: float) -> str:
    return f"{100 * (a - b) / b:+.1f} %" if b else "-"


def _gib(n: int) -> str:
    return f"{gib_text(n)} GiB"


def _held(r: dict[str, Any], weights: int, total: int) -> int:
    """Bytes of the GPU a plan keeps out of the weights and the KV cache (per rank)."""
    return total - weights - int(r["budget_bytes"])


def _why(v: dict[str, Any], s: dict[str, Any], weights: int, total: int, arch: Any) -> str:
    """One sentence per model: what makes SGLang's pool differ from vLLM's on the same GPUs."""
    held_v, held_s = _held(v, weights, total), _held(s, weights, total)
    parts = [f"budget {_pct(s['budget_bytes'], v['budget_bytes'])}: SGLang keeps back {_gib(held_s)}/rank (1 GiB + "
             f"(1 - {s['gpu_util']}) x the rest), vLLM {_gib(held_v)} ((1 - {v['gpu_util']}) x GPU + reserve)"]
    sliding = arch.counts.get("sliding", 0) + arch.counts.get("chunked", 0)
    window = max((x.window for x in arch.layers if x.kind in ("sliding", "chunked")), default=0)
    cell = f"cell {s['bytes_per_token']:,} B/token against {v['bytes_per_token']:,} B"
    if s["engine_swa_tokens"] is not None:
        cell = (f"SGLang's hybrid-SWA {cell} (full layers + 0.8 x the {sliding} sliding ones; "
                f"{s['engine_swa_tokens']:,} SWA slots beside the full pool)")
    elif v["bytes_per_token"] == s["bytes_per_token"]:
        cell = f"same cell {s['bytes_per_token']:,} B/token"
    if sliding:
        cell += (f"; vLLM's {sliding} sliding layers hold at most the {window:,}-token window per request"
                 + ("" if s["engine_swa_tokens"] is not None else
                    ", SGLang keeps every token in every layer (not hybrid SWA there)"))
    parts.append(cell)
    parts.append(f"caps {s['max_num_seqs']:,} (max_running_requests at context_len {s['max_model_len']:,}) against "
                 f"{v['max_num_seqs']:,} (max_num_seqs)")
    vtok, stok = v["engine_kv_cache_tokens"], s["engine_kv_cache_tokens"]
    return f"{_pct(stok, vtok) if vtok else '-'} tokens: " + "; ".join(parts) + "."


def engines_section(spec: GridSpec, df: pl.DataFrame, refusals: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Rows of both engines' plans per (model, GPU, TP, PP, KV dtype), the explanation per model, the points
    SGLang's rules refuse, and the decision's engine sentence per workload.  None unless the grid sweeps both."""
    if not {"vllm", "sglang"} <= set(spec.engines) or "engine" not in df.columns:
        return None
    from kvdash.core import formulas as f
    from kvdash.core.gpus import gpu_presets

    presets = gpu_presets()
    first = df.filter(pl.col("workload") == df.get_column("workload").first())
    plans: dict[tuple[Any, ...], dict[str, dict[str, Any]]] = {}
    for r in first.iter_rows(named=True):
        plans.setdefault(tuple(r[c] for c in SAME), {}).setdefault(r["engine"], r)
    rows, why = [], []
    for key, by in plans.items():
        v, s = by.get("vllm"), by.get("sglang")
        if v is None or s is None:
            continue
        arch = spec.models[str(key[0])].arch
        weights = f.weights_per_rank(arch.weight_bytes, key[2] * key[3])
        total = presets[str(key[1])].memory_bytes
        rows.append([str(key[0]), f"{key[2] * key[3]} x {key[1]}", str(key[4]), _gib(v["budget_bytes"]),
                     f"{v['engine_kv_cache_tokens']:,}", _gib(s["budget_bytes"]), str(s["gpu_util"]),
                     f"{s['engine_kv_cache_tokens']:,}" + (f" (SWA {s['engine_swa_tokens']:,})"
                                                         if s["engine_swa_tokens"] is not None else ""),
                     f"{s['max_num_seqs']:,}", _pct(s["engine_kv_cache_tokens"], v["engine_kv_cache_tokens"])])
        why.append(f"**{key[0]}, {key[2] * key[3]} x {key[1]}, {key[4]}**: " + _why(v, s, weights, total, arch))
    refused = [[str(r["model"]), f"{r['tp'] * r['pp']} x {r['gpu']}" if r["gpu"] else "declared budget",
                str(r["kv_dtype"]), str(r["reason"])] for r in refusals]
    return {"headers": HEADERS, "rows": rows, "why": why, "refused": refused, "decision": _decision_lines(df),
            "rules": (
                "vLLM 0.33: util x GPU - weights - reserve, in blocks. SGLang 0.5.23: free after weights - (1 - "
                "mem_fraction_static) x free before (kv_cache_configurator.py _profile_available_bytes; the fraction "
                "from memory_hook.py), token slots at page 1; free before weights = GPU total - 1 GiB (an "
                "assumption). Each row is its engine's own plan.")}


def _decision_lines(df: pl.DataFrame) -> list[str]:
    """Per workload: SGLang's paged requests against vLLM's at the same point (same model, GPUs, TP, KV dtype)."""
    pair = df.filter(pl.col("engine") == "sglang").select("workload", *SAME, pl.col("paged_requests").alias("s")) \
        .join(df.filter(pl.col("engine") == "vllm").select("workload", *SAME, pl.col("paged_requests").alias("v")),
              on=["workload", *SAME], nulls_equal=True)
    lines = []
    for w in dict.fromkeys(pair.get_column("workload").cast(pl.Utf8).to_list()):
        rows = pair.filter(pl.col("workload").cast(pl.Utf8) == w).iter_rows(named=True)
        rel = [(r["s"] - r["v"]) / r["v"] for r in rows if r["v"]]
        if not rel:
            continue
        lo, hi, med = min(rel), max(rel), statistics.median(rel)
        span = f"{lo:+.1%}" if lo == hi else f"{lo:+.1%} to {hi:+.1%} (median {med:+.1%})"
        lines.append(f"**{w}**, engines on the same hardware: SGLang 0.5.23 fits {span} of vLLM 0.33's paged requests "
                     f"over {len(rel):,} point{'s' if len(rel) > 1 else ''} (why: Engines compared).")
    return lines

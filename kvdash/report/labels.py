"""How a report names points and writes cells: the headers, the label of a point by the grid's swept dimensions,
and one text per value (GiB, counts, ratios, percentages)."""

from __future__ import annotations

from typing import Any

import polars as pl

from kvdash.sweep.columns import GPUS_PER_NODE
from kvdash.sweep.gridfile import GridSpec
from kvdash.units import gib_text, ratio_text

# label order, and how each swept column is written in a point's label
LABEL_ORDER = ("model", "engine", "gpu", "tp", "pp", "kv_dtype", "kv_scales", "block_size", "budget_bytes", "gpu_util",
               "util_policy", "max_model_len", "max_batched_tokens", "max_num_seqs", "workload")
HEADERS = {
    "model": "model", "engine": "engine", "gpu": "GPUs", "tp": "TP", "pp": "PP", "kv_dtype": "KV dtype",
    "kv_scales": "KV scales",
    "block_size": "block", "budget_bytes": "KV budget/rank", "gpu_util": "util", "util_policy": "util policy",
    "max_model_len": "max_model_len", "max_batched_tokens": "batched tokens", "workload": "workload",
    "contiguous_requests": "contiguous (Max)", "paged_requests": "paged", "paged_requests_per_gpu": "paged/GPU",
    "paged_requests_per_node": f"paged/{GPUS_PER_NODE}-GPU node", "request_capacity_ratio": "paged / contig.",
    "requests_with_prefix_sharing": "paged, prefix shared", "bytes_per_token": "KV B/token",
    "running_requests": "vLLM runs", "running_requests_per_gpu": "runs/GPU", "max_num_seqs": "max_num_seqs",
}


def gib(n: int | None) -> str:
    return "-" if n is None else f"{gib_text(n)} GiB"


def num(x: Any, decimals: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        return f"{x:,.{decimals}f}"
    return str(x)


def cell(col: str, value: Any) -> str:
    if col == "budget_bytes":
        return gib(value)
    if col == "request_capacity_ratio":
        return ratio_text(value)
    if col in ("paged_requests_per_gpu", "running_requests_per_gpu"):
        return "-" if value is None else f"{value:,.1f}"
    if col.endswith("_percent"):
        return "-" if value is None else f"{value:.2f} %"
    return num(value)


# --- naming points by the swept dimensions -----------------------------------------------------

class Labels:
    """Names points by the dimensions the grid sweeps (the GPU always, when the grid has one), e.g.
    ``llama-3.1-70b, 8 x h100-80gb, fp8, block 16, chat``."""

    def __init__(self, spec: GridSpec, df: pl.DataFrame) -> None:
        swept: set[str] = set()
        for factor in spec.factors:
            for dim, vals in factor.items():
                if len({repr(v) for v in vals}) > 1:
                    swept.add("budget_bytes" if dim in ("budget", "gpu_memory", "weights", "reserve") else dim)
        if len(spec.engines) > 1:  # grid: engine: [vllm, sglang] -- each row one engine's plan
            swept.add("engine")
        self.has_gpu = df.height > 0 and df.get_column("gpu").null_count() < df.height
        if self.has_gpu:
            swept.add("gpu")
        self.swept = [c for c in LABEL_ORDER if c in swept]
        if self.has_gpu and "tp" in swept:
            swept.discard("tp")  # "8 x h100-80gb" says it
        self.columns = [c for c in LABEL_ORDER if c in swept]
        self.spec = spec

    @property
    def data_columns(self) -> list[str]:
        """Result columns a label reads (``model`` always: it names a point no swept dimension tells apart)."""
        extra = ["tp", "pp"] if self.has_gpu else []
        return list(dict.fromkeys([*self.columns, *extra, "model"]))

    @property
    def names(self) -> str:
        """The label's parts in order, for a legend: ``model, GPUs, KV dtype, block, workload``."""
        return ", ".join(HEADERS[c] for c in self.columns)

    def part(self, col: str, row: dict[str, Any], short: bool = False) -> str:
        v = row[col]
        if col == "gpu":
            if v is None:
                return "explicit budget"
            gpus = row["tp"] * row["pp"]
            text = f"{gpus}x{v}" if short else f"{gpus} x {v}"
            return text + (f" (TP {row['tp']}, PP {row['pp']})" if row["pp"] > 1 and not short else "")
        if v is None:
            return "-"
        if short:
            return gib(v).replace(" ", "") if col == "budget_bytes" else str(v)
        if col == "budget_bytes":
            return f"{gib(v)}/rank"
        if col == "max_model_len":
            return f"max_model_len {v:,}"
        if col == "max_batched_tokens":
            return f"{v:,} batched"
        if col == "max_num_seqs":
            return f"max_num_seqs {v:,}"
        return {"block_size": "block {}", "tp": "TP {}", "pp": "PP {}", "gpu_util": "util {}",
                "util_policy": "{} policy", "kv_scales": "{} scales"}.get(col, "{}").format(v)

    def __call__(self, row: dict[str, Any], short: bool = False, skip: tuple[str, ...] = ()) -> str:
        parts = [self.part(c, row, short) for c in self.columns if c not in skip]
        # nothing swept is left to tell the point apart (one point, or one per workload): its model names it
        return (" " if short else ", ").join(parts) or str(row.get("model") or row.get("id", "the point"))

    def differing(self, row: dict[str, Any], base: dict[str, Any]) -> str:
        """Only the parts of ``row``'s label that differ from ``base``'s."""
        parts = [self.part(c, row) for c in self.columns if self.part(c, row) != self.part(c, base)]
        return ", ".join(parts) or self(row)

    def cells(self, row: dict[str, Any]) -> list[str]:
        return [self.part(c, row) if c == "gpu" else cell(c, row[c]) for c in self.columns]

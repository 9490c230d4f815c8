"""``kvdash models`` and ``kvdash gpus``: the built-in presets with their key figures."""

from __future__ import annotations

import json
from typing import Annotated

import typer


def models(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """List the model presets: layers, KV heads, head_dim, pattern and KV bytes per token (bf16)."""
    from kvdash.core.calc import rank_shapes
    from kvdash.core.model import load_preset, preset_names

    rows = []
    for key in preset_names():
        arch = load_preset(key)
        shape = rank_shapes(arch, "bf16")[0]
        rows.append({
            "preset": key, "name": arch.name, "layers": arch.num_layers,
            "attention_heads": arch.num_attention_heads, "kv_heads": arch.kv_heads,
            "head_dim": arch.head_dim, "pattern": arch.pattern(), "max_context": arch.max_context,
            "bf16_bytes_per_token": shape.bytes_per_token, "weight_bytes": arch.weight_bytes,
            "weight_basis": arch.weight_basis,
        })
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Model presets (KV bytes per token at bf16, all layers)")
    for col, just in (("preset", "left"), ("layers", "right"), ("heads", "right"), ("KV heads", "right"),
                      ("head_dim", "right"), ("pattern", "left"), ("max ctx", "right"),
                      ("KV B/token", "right"), ("weights (est.)", "right")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in rows:
        table.add_row(r["preset"], str(r["layers"]), str(r["attention_heads"]), str(r["kv_heads"]),
                      str(r["head_dim"]), r["pattern"], f"{r['max_context']:,}", f"{r['bf16_bytes_per_token']:,}",
                      f"{r['weight_bytes'] / 1e9:,.1f} GB" if r["weight_bytes"] else "-")
    Console().print(table)


def gpus(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """List the GPU presets and where each memory figure comes from."""
    from kvdash.core.gpus import gpu_presets

    presets = gpu_presets()
    if as_json:
        print(json.dumps({k: g.__dict__ for k, g in presets.items()}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="GPU presets (GiB = 2^30 bytes)")
    for col in ("preset", "name", "bytes", "GiB", "basis"):
        table.add_column(col, justify="right" if col in ("bytes", "GiB") else "left")
    for k, g in presets.items():
        table.add_row(k, g.name, f"{g.memory_bytes:,}", f"{g.memory_bytes / 2**30:.2f}", f"{g.basis}: {g.detail}")
    Console().print(table)

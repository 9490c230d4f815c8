"""``kvdash models`` and ``kvdash gpus``: the built-in presets with their key figures."""

import json
from typing import Annotated

import typer


def models(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """List the model presets: layers, KV heads, head_dim, pattern and KV bytes per token (bf16)."""
    from kvdash.core.model import load_preset, preset_names
    from kvdash.engines.vllm import rank_shapes

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
    from kvdash.render.table import Table, print_tables

    table = Table(title="Model presets (KV bytes per token at bf16, all layers)")
    for col in ("preset", "layers by kind", "KV heads x head_dim", "max context", "KV B/token", "weights (est.)"):
        text = col in ("preset", "layers by kind")
        table.add_column(col, "left" if text else "right", wrap=text)
    for r in rows:
        table.add_row(r["preset"], r["pattern"], f"{r['kv_heads']} x {r['head_dim']}", f"{r['max_context']:,}",
                      f"{r['bf16_bytes_per_token']:,}",
                      f"{r['weight_bytes'] / 1e9:,.1f} GB" if r["weight_bytes"] else "-")
    print_tables([table], "GB = 10^9 bytes; weights are estimates unless read from a safetensors index.")


def gpus(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """List the GPU presets and where each memory figure comes from."""
    from kvdash.core.gpus import gpu_presets

    presets = gpu_presets()
    if as_json:
        print(json.dumps({k: g.__dict__ for k, g in presets.items()}, indent=2))
        return
    from kvdash.render.table import Table, print_tables
    from kvdash.units import gib_text

    table = Table(title="GPU presets: total memory per GPU (bytes exact, GiB = 2^30 B)")
    for col in ("preset", "name", "bytes", "GiB", "basis"):
        number = col in ("bytes", "GiB")
        table.add_column(col, "right" if number else "left", wrap=not number)
    for k, g in presets.items():
        table.add_row(k, g.name, f"{g.memory_bytes:,}", gib_text(g.memory_bytes), f"{g.basis}: {g.detail}")
    print_tables([table], "nvml: the total NVML (nvidia-smi) reports on such a card, in MiB = 2^20 B; nominal: "
                 "the vendor's advertised GB read as GB = 10^9 B, used only where no driver figure is known.")

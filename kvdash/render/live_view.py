"""Rich renderables for the live view, pure functions of readings (tested as plain strings):
memory bars, sparklines, the stacked memory bar, the block map, and the ``--once`` tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from kvdash.live.analysis import FREE, RESERVED, TAIL, TOKENS
from kvdash.sources.base import GPUReading, Snapshot

GiB = 2**30
SPARKS = "▁▂▃▄▅▆▇█"
CELL_STYLE = {TOKENS: ("█", "green"), TAIL: ("█", "yellow"), RESERVED: ("▒", "red"), FREE: ("·", "grey50")}


def gib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / GiB:,.1f}"


def bar(fraction: float | None, width: int, style: str = "cyan") -> Text:
    if fraction is None:
        return Text("n/a".ljust(width), style="dim")
    filled = max(0, min(width, round(fraction * width)))
    return Text("█" * filled, style=style) + Text("░" * (width - filled), style="grey35")


def sparkline(values: Sequence[float], width: int, top: float | None = None) -> str:
    """The last ``width`` values as block characters, scaled to ``top`` (default: their maximum)."""
    vals = list(values)[-width:]
    if not vals:
        return ""
    hi = top or max(vals) or 1.0
    return "".join(SPARKS[min(len(SPARKS) - 1, max(0, int(v / hi * (len(SPARKS) - 1) + 0.5)))] for v in vals)


def stacked_bar(segments: Sequence[tuple[str, int, str]], total: int, width: int) -> Text:
    """One bar of ``width`` cells split among (label, bytes, style) segments of ``total`` bytes."""
    out = Text()
    if total <= 0:
        return Text("n/a", style="dim")
    used = 0
    for i, (_, size, style) in enumerate(segments):
        cells = round(max(size, 0) / total * width) if i < len(segments) - 1 else width - used
        cells = max(0, min(cells, width - used))
        out += Text("█" * cells, style=style)
        used += cells
    return out


def legend(segments: Sequence[tuple[str, int, str]]) -> Text:
    out = Text()
    for label, size, style in segments:
        out += Text("■ ", style=style) + Text(f"{label} {gib(size)} GiB  ")
    return out


def block_map_text(cells: Sequence[str], width: int) -> Text:
    out = Text()
    for i, kind in enumerate(cells):
        char, style = CELL_STYLE.get(kind, (" ", ""))
        out += Text(char, style=style)
        if (i + 1) % width == 0 and i + 1 < len(cells):
            out += Text("\n")
    return out


def gpu_status(g: GPUReading) -> str:
    if g.lost:
        return "LOST"
    if g.unified_memory:
        return "unified memory"
    return ""


def gpu_table(snapshot: Snapshot, history: dict[int, Sequence[float]] | None = None, bar_width: int = 16,
              spark_width: int = 16, compact: bool = False) -> Table:
    """One row per GPU; ``compact`` (a narrow terminal) keeps GPU, memory, bar and utilization."""
    table = Table(expand=True, header_style="bold", pad_edge=False)
    columns = (("GPU", "right"), ("name", "left"), ("used/total GiB", "right"), ("", "left"), ("util", "right"),
               ("temp", "right"), ("W", "right"), ("memory history", "left"), ("procs", "right"))
    keep = (0, 2, 3, 4, 8) if compact else tuple(range(len(columns)))
    for i in keep:
        table.add_column(columns[i][0], justify=columns[i][1], no_wrap=True)  # type: ignore[arg-type]
    for g in snapshot.gpus:
        status = gpu_status(g)
        if g.lost:
            lost = [str(g.index), Text(g.name, style="bold red"), Text("LOST", style="bold red"), *[""] * 6]
            table.add_row(*[lost[i] for i in keep])
            continue
        mem = "unified memory" if g.unified_memory else f"{gib(g.used_bytes)}/{gib(g.total_bytes)}"
        spark = sparkline(history.get(g.index, []), spark_width, top=g.total_bytes) if history else ""
        cells = (
            str(g.index), g.name.replace("NVIDIA ", "").replace(" (demo)", "*"), mem,
            bar(g.used_fraction, bar_width),
            "n/a" if g.utilization_percent is None else f"{g.utilization_percent}%",
            "n/a" if g.temperature_c is None else f"{g.temperature_c}C",
            "n/a" if g.power_w is None else f"{g.power_w:.0f}",
            Text(spark, style="cyan"),
            str(len(g.processes)) if g.processes else (g.processes_note or status or "0"),
        )
        table.add_row(*[cells[i] for i in keep])
    return table


def process_table(snapshot: Snapshot, limit: int = 12) -> Table:
    table = Table(expand=True, header_style="bold", pad_edge=False)
    for col, justify in (("GPU", "right"), ("pid", "right"), ("memory GiB", "right"), ("process", "left")):
        table.add_column(col, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    rows = 0
    for g in snapshot.gpus:
        if g.processes_note and not g.processes and g.processes_note != "none":
            table.add_row(str(g.index), "", "", Text(g.processes_note, style="yellow"))
            rows += 1
        for p in g.processes:
            if rows >= limit:
                break
            table.add_row(str(g.index), str(p.pid), gib(p.used_bytes), p.name)
            rows += 1
    return table


def memory_segments(g: GPUReading, kv: dict[str, Any]) -> list[tuple[str, int, str]]:
    """other processes | weights | reserve | KV pool | free, for one GPU (analytical engine parts)."""
    total = g.total_bytes or 0
    weights, reserve = int(kv.get("weights_per_rank_bytes", 0)), int(kv.get("reserve_bytes", 0))
    pool = int(kv.get("pool_blocks", 0)) * int(kv.get("block_bytes", 0))
    engine = max((p.used_bytes or 0 for p in g.processes), default=0)
    others = max(0, (g.used_bytes or 0) - engine) if engine else 0
    free = max(0, total - others - weights - reserve - pool)
    return [("other processes", others, "magenta"), ("weights", weights, "blue"), ("reserve", reserve, "yellow"),
            ("KV pool", pool, "green"), ("free", free, "grey35")]


def kv_table(kv: dict[str, Any]) -> Table:
    table = Table(expand=True, show_header=False, pad_edge=False)
    table.add_column("figure", ratio=2, overflow="fold")
    table.add_column("value", justify="right", ratio=3, overflow="fold")
    if not kv.get("ok"):
        for note in kv.get("notes", []):
            table.add_row(Text(note, style="yellow"), "")
        return table
    lengths = ", ".join(f"{n:,}" for n in kv["lengths"])
    rows = [
        ("model", f"{kv['model']} | {kv['kv_dtype']} | block {kv['block_size']} | TP {kv['tp']}"),
        ("budget per rank", f"{kv['budget_bytes']:,} B ({gib(kv['budget_bytes'])} GiB, {kv['budget_mode']})"),
        ("KV bytes per token per rank", f"{kv['bytes_per_token']:,} B"),
        ("pool blocks (smallest rank)", f"{kv['pool_blocks']:,} x {kv['block_bytes']:,} B"),
        ("token slots", f"{kv['token_slots']:,}"),
        (f"requests of {lengths} tokens: paged", f"{kv['paged_requests']:,}"),
        (f"contiguous (reserve {kv['max_reserved']:,})", f"{kv['contiguous_requests']:,}"),
        ("paged / contiguous", "n/a" if kv["ratio"] is None else f"{kv['ratio']:.2f}x (capacity, not throughput)"),
        ("headroom at capacity", f"{kv['headroom_blocks']:,} blocks, "
                                 f"+{kv['headroom_tokens_per_request']:,} tokens per request"),
    ]
    for label, value in rows:
        table.add_row(label, value)
    eng = kv.get("engine")
    if eng:
        table.add_row(Text("engine", style="bold"), eng["status"])
        r = eng["reading"]
        if not r.get("error"):
            usage = "n/a" if r["kv_usage"] is None else f"{100 * r['kv_usage']:.1f}%"
            table.add_row("engine KV usage | running | waiting",
                          f"{usage} | {r['running'] if r['running'] is not None else 'n/a'} | "
                          f"{r['waiting'] if r['waiting'] is not None else 'n/a'}")
            table.add_row("preemptions | prefix hit rate",
                          f"{r['preemptions'] if r['preemptions'] is not None else 'n/a'} | "
                          + ("n/a" if r["prefix_hit_rate"] is None else f"{100 * r['prefix_hit_rate']:.1f}%"))
            if "engine_tokens" in eng:
                table.add_row("engine pool vs kvdash", f"{eng['engine_tokens']:,} vs {eng['kvdash_tokens']:,} tokens "
                                                       f"({eng['difference_tokens']:+,})")
                table.add_row(Text(eng["explain"], style="dim"), "")
    for note in kv.get("notes", []):
        table.add_row(Text(note, style="yellow"), "")
    return table


def once_view(snapshot: Snapshot, kv: dict[str, Any]) -> list[RenderableType]:
    """What ``kvdash live --once`` prints."""
    head = Text(f"{snapshot.source}  driver {snapshot.driver or 'n/a'}", style="bold")
    out: list[RenderableType] = [head, gpu_table(snapshot, bar_width=12), process_table(snapshot), kv_table(kv)]
    if kv.get("ok") and snapshot.gpus:
        g = next((x for x in snapshot.gpus if x.index == kv.get("tight_gpu")), snapshot.gpus[0])
        if g.total_bytes:
            seg = memory_segments(g, kv)
            out.append(Group(Text(f"GPU {g.index} memory (analytical engine layout):"),
                             stacked_bar(seg, g.total_bytes, 60), legend(seg)))
    if snapshot.error:
        out.append(Text(snapshot.error, style="yellow"))
    return out

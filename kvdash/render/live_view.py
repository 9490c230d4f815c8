"""Rich renderables for the live view, pure functions of readings (tested as plain strings):
memory bars, sparklines, the stacked memory bar, the block map, and the ``--once`` tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from kvdash.live.analysis import FREE, RESERVED, TAIL, TOKENS
from kvdash.sources.base import GPUReading, Snapshot
from kvdash.units import gib_text

SPARKS = "▁▂▃▄▅▆▇█"
CELL_STYLE = {TOKENS: ("█", "green"), TAIL: ("█", "yellow"), RESERVED: ("▒", "red"), FREE: ("·", "grey50"),
              "x": ("x", "magenta")}


def gib(n: int | None) -> str:
    """GiB with one decimal: the dashboard's columns are narrow."""
    return gib_text(n, 1)


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
        out.append("█" * cells, style=style)
        used += cells
    return out


def legend(segments: Sequence[tuple[str, int, str]], total: int | None = None) -> Text:
    out = Text()
    for label, size, style in segments:
        out.append("■ ", style=style)
        out.append(f"{label} {gib(size)} GiB  ")
    if total is not None and sum(max(0, s) for _, s, _ in segments[:-1]) > total:
        out.append("\nthe engine parts do not fit beside what the GPU already holds", style="yellow")
    return out


def block_map_text(cells: Sequence[str], width: int) -> Text:
    """Cells as rows of ``width`` characters, one styled run per stretch of equal cells."""
    out = Text()
    for start in range(0, len(cells), width):
        row = cells[start:start + width]
        i = 0
        while i < len(row):
            j = i
            while j < len(row) and row[j] == row[i]:
                j += 1
            char, style = CELL_STYLE.get(row[i], (" ", ""))
            out.append(char * (j - i), style=style)
            i = j
        if start + width < len(cells):
            out.append("\n")
    return out


def gpu_status(g: GPUReading) -> str:
    if g.lost:
        return "LOST"
    if g.unified_memory:
        return "unified memory"
    return ""


def _fit(text: str, width: int, right: bool = False) -> str:
    text = text if len(text) <= width else text[: max(0, width - 1)] + "…"
    return text.rjust(width) if right else text.ljust(width)


def gpu_table(snapshot: Snapshot, history: dict[int, Sequence[float]] | None = None, bar_width: int = 16,
              spark_width: int = 16, compact: bool = False) -> Text:
    """One line per GPU (plain styled text: cheap to redraw every poll); ``compact`` for narrow
    terminals keeps GPU, memory, bar, utilization and process count."""
    cols = [("GPU", 3, True), ("name", 10, False), ("used/total GiB", 14, True), ("", bar_width, False),
            ("free", 6, True), ("rsv", 5, True), ("util", 4, True), ("temp", 4, True), ("W", 4, True),
            ("memory history", spark_width, False), ("procs", 5, True)]
    keep = (0, 2, 3, 6, 10) if compact else tuple(range(len(cols)))
    out = Text(" ".join(_fit(cols[i][0], cols[i][1], cols[i][2]) for i in keep) + "\n", style="bold")
    for g in snapshot.gpus:
        if g.lost:
            out.append(_fit(str(g.index), 3, True) + " ")
            out.append(f"LOST {g.name}", style="bold red")
            out.append("\n")
            continue
        mem = "unified memory" if g.unified_memory else f"{gib(g.used_bytes)}/{gib(g.total_bytes)}"
        spark = sparkline(history.get(g.index, []), spark_width, top=g.total_bytes) if history else ""
        cells: list[Text | str] = [
            _fit(str(g.index), 3, True), _fit(g.name.replace("NVIDIA ", "").replace(" (demo)", "*"), 10),
            _fit(mem, 14, True), bar(g.used_fraction, bar_width),
            _fit(gib(g.free_bytes), 6, True),
            _fit("n/a" if g.reserved_bytes is None else gib(g.reserved_bytes), 5, True),
            _fit("n/a" if g.utilization_percent is None else f"{g.utilization_percent}%", 4, True),
            _fit("n/a" if g.temperature_c is None else f"{g.temperature_c}C", 4, True),
            _fit("n/a" if g.power_w is None else f"{g.power_w:.0f}", 4, True),
            Text(_fit(spark, spark_width), style="cyan"),
            _fit(str(len(g.processes)) if g.processes else (g.processes_note[:5] or "0"), 5, True),
        ]
        for n, i in enumerate(keep):
            if n:
                out.append(" ")
            cell = cells[i]
            out.append(cell) if isinstance(cell, Text) else out.append(cell)
        out.append("\n")
    return out


def process_table(snapshot: Snapshot, limit: int = 12) -> Text:
    out = Text(f"{'GPU':>3} {'pid':>7} {'GiB':>7}  process\n", style="bold")
    rows = 0
    for g in snapshot.gpus:
        if g.processes_note and not g.processes and g.processes_note != "none":
            out.append(f"{g.index:>3} ")
            out.append(g.processes_note, style="yellow")
            out.append("\n")
            rows += 1
        for proc in g.processes:
            if rows >= limit:
                out.append("  …\n", style="dim")
                return out
            out.append(f"{g.index:>3} {proc.pid:>7} {gib(proc.used_bytes):>7}  {_fit(proc.name, 60).rstrip()}\n")
            rows += 1
    return out


def memory_segments(g: GPUReading, kv: dict[str, Any]) -> list[tuple[str, int, str]]:
    """other processes | weights | reserve | KV pool | free, for one GPU (analytical engine parts).

    With a running engine (an engine reading without error) its largest process is the engine and
    the rest is "other processes"; without one, everything the GPU holds now is other processes and
    the engine parts show what the configuration would add."""
    total = g.total_bytes or 0
    weights, reserve = int(kv.get("weights_per_rank_bytes", 0)), int(kv.get("reserve_bytes", 0))
    pool = int(kv.get("pool_blocks", 0)) * int(kv.get("block_bytes", 0))
    eng = kv.get("engine") or {}
    running = bool(eng) and not eng.get("reading", {}).get("error")
    engine = max((p.used_bytes or 0 for p in g.processes), default=0) if running else 0
    others = max(0, (g.used_bytes or 0) - engine)
    free = max(0, total - others - weights - reserve - pool)
    return [("other processes", others, "magenta"), ("weights", weights, "blue"), ("reserve", reserve, "yellow"),
            ("KV pool", pool, "green"), ("free", free, "grey35")]


def kv_table(kv: dict[str, Any], width: int = 100) -> Text:
    """The KV panel: one "figure .... value" line each (plain styled text)."""
    out = Text()
    if not kv.get("ok"):
        for note in kv.get("notes", []):
            out.append(note + "\n", style="yellow")
        return out
    lengths = ", ".join(f"{n:,}" for n in kv["lengths"])
    rows: list[tuple[str, str]] = [
        ("model", f"{kv['model']} | {kv['kv_dtype']} | block {kv['block_size']} | TP {kv['tp']}"),
        ("budget per rank", f"{kv['budget_bytes']:,} B ({gib(kv['budget_bytes'])} GiB, {kv['budget_mode']})"),
        ("KV bytes per token per rank", f"{kv['bytes_per_token']:,} B"),
        ("pool blocks (smallest rank)", f"{kv['pool_blocks']:,} x {kv['block_bytes']:,} B"),
        ("token slots", f"{kv['token_slots']:,}"),
        *([("state per request (fixed)", f"{kv['state_bytes_per_request']:,} B, whatever the length")]
          if kv.get("state_bytes_per_request") else []),
        (f"requests of {lengths} tokens, paged", f"{kv['paged_requests']:,}"),
        (f"contiguous (reserve {kv['max_reserved']:,})", f"{kv['contiguous_requests']:,}"),
        ("paged / contiguous", "n/a" if kv["ratio"] is None else f"{kv['ratio']:.2f}x (capacity, not throughput)"),
        ("headroom at capacity", f"{kv['headroom_blocks']:,} blocks, "
                                 f"+{kv['headroom_tokens_per_request']:,} tokens per request"),
    ]
    eng = kv.get("engine")
    explain = ""
    if eng:
        rows.append(("engine", eng["status"]))
        r = eng["reading"]
        if not r.get("error"):
            def na(v: Any) -> str:
                return "n/a" if v is None else str(v)

            usage = "n/a" if r["kv_usage"] is None else f"{100 * r['kv_usage']:.1f}%"
            hit = "n/a" if r["prefix_hit_rate"] is None else f"{100 * r['prefix_hit_rate']:.1f}%"
            rows.append(("engine KV usage | running | waiting", f"{usage} | {na(r['running'])} | {na(r['waiting'])}"))
            rows.append(("preemptions | prefix hit rate", f"{na(r['preemptions'])} | {hit}"))
            if "engine_tokens" in eng:
                rows.append(("engine pool vs kvdash", f"{eng['engine_tokens']:,} vs {eng['kvdash_tokens']:,} tokens "
                                                      f"({eng['difference_tokens']:+,})"))
                explain = eng["explain"]
    label_w = max(len(label) for label, _ in rows)
    for label, value in rows:
        out.append(label.ljust(label_w) + "  ", style="bold" if label == "engine" else "")
        out.append(value + "\n")
    if explain:
        out.append(explain + "\n", style="dim")
    for note in kv.get("notes", []):
        out.append(note + "\n", style="yellow")
    return out


def once_view(snapshot: Snapshot, kv: dict[str, Any], width: int = 120) -> list[RenderableType]:
    """What ``kvdash live --once`` prints (compact GPU columns below 110 columns)."""
    head = Text(f"{snapshot.source}  driver {snapshot.driver or 'n/a'}", style="bold")
    out: list[RenderableType] = [head, gpu_table(snapshot, bar_width=12, compact=width < 110),
                                 process_table(snapshot), kv_table(kv)]
    if kv.get("ok") and snapshot.gpus:
        g = next((x for x in snapshot.gpus if x.index == kv.get("tight_gpu")), snapshot.gpus[0])
        if g.total_bytes:
            seg = memory_segments(g, kv)
            out.append(Group(Text(f"GPU {g.index} memory (analytical engine layout):"),
                             stacked_bar(seg, g.total_bytes, 60), legend(seg, g.total_bytes)))
    if snapshot.error:
        out.append(Text(snapshot.error, style="yellow"))
    return out

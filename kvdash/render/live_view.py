"""Rich renderables for the live view, pure functions of readings (tested as plain strings):
memory bars, sparklines, the stacked memory bar, the block map, and the ``--once`` tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from kvdash.live.analysis import FREE, RESERVED, TAIL, TOKENS
from kvdash.sources.base import GPUReading, Snapshot
from kvdash.units import gib_text, ratio_text

SPARKS = "▁▂▃▄▅▆▇█"
CELL_STYLE = {TOKENS: ("█", "green"), TAIL: ("█", "yellow"), RESERVED: ("▒", "red"), FREE: ("·", "grey50"),
              "x": ("x", "magenta")}


def gib(n: int | None) -> str:
    """GiB with one decimal: the dashboard's columns are narrow."""
    return gib_text(n, 1)


def load_style(fraction: float | None) -> str:
    """nvitop's convention: green under 60 %, yellow under 85 %, red from 85 % (memory and utilization)."""
    if fraction is None:
        return "dim"
    return "green" if fraction < 0.60 else "yellow" if fraction < 0.85 else "red"


def bar(fraction: float | None, width: int, style: str | None = None) -> Text:
    """A bar of ``width`` cells, coloured by load unless ``style`` is given."""
    if fraction is None:
        return Text("n/a".ljust(width), style="dim")
    filled = max(0, min(width, round(fraction * width)))
    out = Text()
    out.append("█" * filled, style=style or load_style(fraction))
    out.append("░" * (width - filled), style="grey35")
    return out


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


GPU_COLUMNS = (  # header, width, right-aligned; in the order they are given up on narrow terminals
    ("GPU", 3, True), ("used/total GiB", 14, True), ("", 0, False), ("util", 4, True), ("name", 10, False),
    ("temp", 4, True), ("W", 4, True), ("free", 6, True), ("procs", 5, True), ("rsvd", 5, True),
    ("memory history", 16, False),
)
SHOWN_ORDER = (0, 4, 1, 2, 7, 9, 3, 5, 6, 10, 8)  # left-to-right order of the columns kept
MIN_BAR = 8


def gpu_columns(width: int, bar_width: int | None = None) -> tuple[tuple[int, ...], int]:
    """Which columns fit in ``width`` characters and how wide the memory bar is: GPU, memory, bar and
    utilization always; then name, temperature, power, free, processes, reserved, history."""
    keep: list[int] = []
    used = -1
    for i, (_, w, _) in enumerate(GPU_COLUMNS):
        need = (w or MIN_BAR) + 1
        if i < 4 or used + need <= width:
            keep.append(i)
            used += need
    bar_w = bar_width if bar_width is not None else max(MIN_BAR, min(30, MIN_BAR + width - used))
    return tuple(i for i in SHOWN_ORDER if i in keep), bar_w


def gpu_table(snapshot: Snapshot, history: dict[int, Sequence[float]] | None = None, bar_width: int | None = None,
              spark_width: int = 16, compact: bool = False, width: int = 200) -> Text:
    """One line per GPU whatever the width (plain styled text: cheap to redraw every poll).  Columns
    are dropped, least useful first, to fit ``width`` (``compact``: 60); the memory bar and the
    utilization are coloured by load."""
    keep, bar_w = gpu_columns(60 if compact else width, bar_width)
    heads = [_fit(GPU_COLUMNS[i][0], bar_w if i == 2 else GPU_COLUMNS[i][1], GPU_COLUMNS[i][2]) for i in keep]
    out = Text(" ".join(heads).rstrip() + "\n", style="bold")
    for g in snapshot.gpus:
        if g.lost:
            out.append(_fit(str(g.index), 3, True) + " ")
            out.append(f"LOST {g.name}", style="bold red")
            out.append("\n")
            continue
        mem = "unified memory" if g.unified_memory else f"{gib(g.used_bytes)}/{gib(g.total_bytes)}"
        spark = sparkline(history.get(g.index, []), spark_width, top=g.total_bytes) if history else ""
        util = None if g.utilization_percent is None else g.utilization_percent / 100
        cells: dict[int, Text | str] = {
            0: _fit(str(g.index), 3, True), 4: _fit(g.name.replace("NVIDIA ", "").replace(" (demo)", ""), 10),
            1: _fit(mem, 14, True), 2: bar(g.used_fraction, bar_w),
            3: Text(_fit("n/a" if util is None else f"{g.utilization_percent}%", 4, True), style=load_style(util)),
            5: _fit("n/a" if g.temperature_c is None else f"{g.temperature_c}C", 4, True),
            6: _fit("n/a" if g.power_w is None else f"{g.power_w:.0f}", 4, True),
            7: _fit(gib(g.free_bytes), 6, True),
            8: _fit(str(len(g.processes)) if g.processes else (g.processes_note[:5] or "0"), 5, True),
            9: _fit("n/a" if g.reserved_bytes is None else gib(g.reserved_bytes), 5, True),
            10: Text(_fit(spark, spark_width), style="cyan"),
        }
        for n, i in enumerate(keep):
            if n:
                out.append(" ")
            out.append(cells[i])
        out.append("\n")
    out.rstrip()
    return out


def process_table(snapshot: Snapshot, limit: int = 12, width: int = 80) -> Text:
    """Processes of every GPU, at most ``limit`` rows (the last one says how many more there are)."""
    out = Text(f"{'GPU':>3} {'pid':>7} {'GiB':>7}  process\n", style="bold")
    name_w = max(10, width - 20)
    total = sum(max(len(g.processes), 1 if g.processes_note and g.processes_note != "none" else 0)
                for g in snapshot.gpus)
    rows = 0
    for g in snapshot.gpus:
        if g.processes_note and not g.processes and g.processes_note != "none":
            out.append(f"{g.index:>3} ")
            out.append(g.processes_note, style="yellow")
            out.append("\n")
            rows += 1
        for proc in g.processes:
            if rows >= limit - 1 and total > limit:
                out.append(f"  … {total - rows} more (details view: v)", style="dim")
                return out
            out.append(f"{g.index:>3} {proc.pid:>7} {gib(proc.used_bytes):>7}  {_fit(proc.name, name_w).rstrip()}\n")
            rows += 1
    out.rstrip()
    return out


def memory_segments(g: GPUReading, kv: dict[str, Any]) -> list[tuple[str, int, str]]:
    """other processes | weights | reserve | KV pool | free, for one GPU (analytical engine parts).

    With an engine (given by --engine or carried by the demo) its largest process is the engine and
    the rest is "other processes", even while its /metrics fails: a network error does not make the
    engine's memory someone else's.  Without one, everything the GPU holds now is other processes and
    the engine parts show what the configuration would add."""
    total = g.total_bytes or 0
    weights, reserve = int(kv.get("weights_per_rank_bytes", 0)), int(kv.get("reserve_bytes", 0))
    pool = int(kv.get("pool_blocks", 0)) * int(kv.get("block_bytes", 0))
    eng = kv.get("engine") or {}
    running = bool(eng)
    engine = max((p.used_bytes or 0 for p in g.processes), default=0) if running else 0
    others = max(0, (g.used_bytes or 0) - engine)
    free = max(0, total - others - weights - reserve - pool)
    return [("other processes", others, "magenta"), ("weights", weights, "blue"), ("reserve", reserve, "yellow"),
            ("KV pool", pool, "green"), ("free", free, "grey35")]


def _na(r: dict[str, Any], key: str, text: str | None = None) -> str:
    """A figure of the engine, or ``n/a`` with the reason it was dropped."""
    if r.get(key) is not None:
        return text if text is not None else f"{r[key]:,}"
    why = r.get("invalid", {}).get(key)
    return f"n/a ({why})" if why else "n/a"


def offload_text(off: dict[str, Any]) -> str:
    """``vLLM native offloading (native): 64.0 GiB = 32,768 chunks, 524,288 tokens``; ``SGLang HiCache (host
    memory): 900,000 of 2,400,000 tokens used``; ``LMCache: 40.00 GiB held``."""
    parts = []
    if off.get("size_gib") is not None:
        parts.append(f"{off['size_gib']} GiB")
    if off.get("used_bytes") is not None:
        parts.append(f"{_size(int(off['used_bytes']))} held")
    return f"{off.get('tier', 'offload')}: " + (", ".join(parts) or "on")


def offload_rows(off: dict[str, Any], w: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The tier's transfers and hit rate, each as the engine states it (:mod:`kvdash.sources.engine`)."""
    rows: list[tuple[str, str, str]] = []
    if off.get("chunks") is not None:
        rows.append(("  tier size (engine)", f"{off['chunks']:,} chunks" + (
            f", {off['size_tokens']:,} tokens" if off.get("size_tokens") is not None else ""), ""))
    if off.get("host_total_tokens") is not None:
        used = off.get("host_used_tokens")
        rows.append(("  tier size (engine)", f"{off['host_total_tokens']:,} tokens, "
                                             f"{'n/a' if used is None else f'{used:,}'} used", ""))
    for word, b, sec, tok in (("loaded", "loaded_bytes", "load_seconds", "loaded_tokens"),
                              ("stored", "stored_bytes", "store_seconds", "stored_tokens")):
        if isinstance(off.get(b), int | float):  # bytes, else tokens (LMCache counts tokens only)
            text = _size(int(off[b]))
        elif isinstance(off.get(tok), int | float):
            text = f"{int(off[tok]):,} tokens"
        else:
            continue
        if isinstance(off.get(sec), int | float):
            text += f" in {off[sec]:.3f} s" + (f" = {off[b] / off[sec] / 1e9:.1f} GB/s"
                                               if isinstance(off.get(b), int | float) and off[sec] else "")
        rows.append((f"  offload {word}", text, ""))
    if off.get("hit_rate") is not None:
        hit = f"{100 * off['hit_rate']:.1f}% of {off.get('query_tokens') or 0:,} tokens"
        if w.get("offload_hit_rate") is not None:
            hit += f"; last {w['readings']} readings {100 * w['offload_hit_rate']:.1f}%"
        rows.append(("  offload hit rate", hit, ""))
    if off.get("retrieve_hit_rate") is not None:
        rows.append(("  retrieved of requested", f"{100 * off['retrieve_hit_rate']:.1f}%", ""))
    if off.get("pinned_fraction") is not None:
        rows.append(("  pinned by transfers", f"{100 * off['pinned_fraction']:.1f}%", ""))
    return rows


def offload_summary(off: dict[str, Any], c: dict[str, Any]) -> str:
    """One line of the dashboard's summary, once the tier reports more than its configured size:
    ``32,768 chunks (kvdash 32,768) | hit 50.0% | load 40.0 GB/s``."""
    parts = []
    if off.get("chunks") is not None:
        parts.append(f"{off['chunks']:,} chunks" + (f" (kvdash {c['kvdash_chunks']:,})"
                                                    if c.get("kvdash_chunks") is not None else ""))
    elif off.get("host_total_tokens") is not None:
        used = off.get("host_used_tokens")
        parts.append(f"{'n/a' if used is None else f'{used:,}'}/{off['host_total_tokens']:,} host tokens")
    elif off.get("used_bytes") is not None:
        parts.append(f"{_size(int(off['used_bytes']))} held" + (f" (kvdash {c['kvdash_tokens']:,} tok)"
                                                                 if c.get("kvdash_tokens") is not None else ""))
    if off.get("hit_rate") is not None:
        parts.append(f"hit {100 * off['hit_rate']:.1f}%")
    b, sec = off.get("loaded_bytes"), off.get("load_seconds")
    if isinstance(b, int | float) and isinstance(sec, int | float) and sec:
        parts.append(f"load {b / sec / 1e9:.1f} GB/s")
    return " | ".join(parts) if len(parts) > 1 or off.get("chunks") is not None else ""


def offload_compare_row(c: dict[str, Any]) -> tuple[str, str, str]:
    """The engine's tier beside kvdash's figure for the same size (``kvdash calc --offload``'s rules)."""
    if "note" in c:
        return ("  tier size (kvdash)", c["note"], "dim")
    text = f"{c['kvdash_chunks']:,} chunks, {c['kvdash_tokens']:,} tokens"
    if c["rules"] == "vllm":
        d = c.get("difference_chunks")
        text += ": n/a from the engine" if d is None else (": the same" if d == 0 else f" (engine {d:+,} chunks)")
    else:
        d = c.get("difference_tokens")
        text = f"{c['kvdash_chunks']:,} chunks of 256 = {c['kvdash_tokens']:,} tokens" + (
            "" if d is None else (": as stored" if d == 0 else f" (stored {d:+,})"))
    return ("  tier size (kvdash)", text, "")


def _opt(v: Any) -> str:
    return "n/a" if v is None else f"{v:,}"


def engine_rows(eng: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(label, value, style) rows of the engine's own figures."""
    rows: list[tuple[str, str, str]] = []
    r = eng["reading"]
    if r.get("error"):
        rows.append(("engine", eng["status"], "bold red"))
        return rows
    rows.append(("engine", eng["status"], "bold"))
    if eng.get("served_model"):
        rows.append(("served model", eng["served_model"], "bold yellow" if eng.get("model_differs") else ""))
    if r.get("kind") == "lmcache":  # LMCache's own page: its tier, no pool of its own
        off = r.get("offload") or {}
        rows.append(("offload tier", offload_text(off), ""))
        rows.extend(offload_rows(off, eng.get("window") or {}))
        if eng.get("offload_vs_kvdash"):
            rows.append(offload_compare_row(eng["offload_vs_kvdash"]))
        return rows
    usage = _na(r, "kv_usage", f"{100 * r['kv_usage']:.1f}%" if r.get("kv_usage") is not None else None)
    blocks = engine_blocks(eng)  # the engine's own blocks of its own size where it states them (never kvdash's b)
    if blocks:
        usage += f" ({blocks[0]:,} of {blocks[1]:,} blocks" + (f" of {blocks[2]})" if blocks[2] else ")")
    if len(eng.get("dp_ranks", [])) > 1:
        usage += " worst pool"
    rows.append(("engine KV usage", usage, ""))
    word = "retractions" if r.get("kind") == "sglang" else "preemptions"
    rows.append((f"running | waiting | {word}",
                 f"{_na(r, 'running')} | {_na(r, 'waiting')} | {_na(r, 'preemptions')}", ""))
    hit = _na(r, "prefix_hit_rate", f"{100 * r['prefix_hit_rate']:.1f}%" if r.get("prefix_hit_rate") is not None
              else None)
    w = eng.get("window") or {}
    if w.get("prefix_hit_rate") is not None or w.get("preemptions") is not None:
        hit += f"; last {w['readings']} readings: " + (
            f"{100 * w['prefix_hit_rate']:.1f}%" if w.get("prefix_hit_rate") is not None else "n/a")
    rows.append(("prefix cache hit rate", hit, ""))
    if w.get("preemptions") is not None:
        rows.append((f"{word}, last {w['readings']} readings", f"{w['preemptions']:,}", ""))
    if r.get("external_queries"):
        ext = f"{100 * r['external_hits'] / r['external_queries']:.1f}% of {r['external_queries']:,} tokens"
        if w.get("external_hit_rate") is not None:
            ext += f"; last {w['readings']} readings {100 * w['external_hit_rate']:.1f}%"
        rows.append(("KV-connector hits", ext, ""))
    if r.get("waiting_by_reason") and any(r["waiting_by_reason"].values()):
        rows.append(("waiting by reason", ", ".join(f"{k} {v:,}" for k, v in sorted(r["waiting_by_reason"].items())),
                     ""))
    if r.get("sleep") and r["sleep"] != "awake":
        rows.append(("sleep state", r["sleep"], "bold yellow"))
    if r.get("evictable_tokens") is not None:
        rows.append(("evictable (cached) tokens", f"{r['evictable_tokens']:,}", ""))
    for p in r.get("ranks") or []:
        if p.get("usage_by_kind"):
            kinds = ", ".join(f"{k} {100 * v:.1f}%" for k, v in p["usage_by_kind"].items())
            rows.append((f"  usage by kind, rank {p['rank']}" if len(r["ranks"]) > 1 else "usage by kind", kinds, ""))
    off = r.get("offload") or {}
    if off:
        rows.append(("offload tier", offload_text(off), ""))
        rows.extend(offload_rows(off, w))
        if eng.get("offload_vs_kvdash"):
            rows.append(offload_compare_row(eng["offload_vs_kvdash"]))
    for rank in eng.get("dp_ranks", []):
        u = "n/a" if rank["kv_usage"] is None else f"{100 * rank['kv_usage']:.1f}%"
        pool = "n/a" if rank["total_tokens"] is None else f"{rank['total_tokens']:,}"
        rows.append((f"  pool {rank['rank']} (DP rank)", f"{pool} tokens, usage {u}, r {_opt(rank.get('running'))} "
                     f"w {_opt(rank.get('waiting'))}", ""))
    if "engine_tokens" in eng:
        rules = f" ({eng['kvdash_rules']} rules)" if eng.get("kvdash_rules") else ""
        rows.append((f"engine pool vs kvdash{rules}", f"{eng['engine_tokens']:,} vs {eng['kvdash_tokens']:,} tokens "
                                              f"({eng['difference_tokens']:+,})", ""))
    return rows


def _size(n: int) -> str:
    """Bytes in GiB to 2 decimals, or in bytes when that would read 0.00 GiB."""
    return f"{n:,} B" if abs(n) < 2**30 // 100 else f"{gib_text(n, 2)} GiB"


def measured_rows(kv: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The reserve the engine kept, as ``kvdash calibrate`` measures it (c saves it), or why not."""
    m = kv.get("measured_reserve")
    if not m:
        return []
    if "entry" not in m:
        return [("measured reserve", "n/a (c says why)", "dim")]
    e = m["entry"]
    return [("measured reserve (simulated)" if m.get("simulated") else "measured reserve (c: save)",
             f"{e['reserve_bytes']:,} B ({gib_text(e['reserve_bytes'], 2)} GiB) per rank", "")]


def measured_note(kv: dict[str, Any]) -> str:
    """How the measured reserve was worked, as ``kvdash calibrate`` prints it, or why there is none."""
    m = kv.get("measured_reserve")
    if not m:
        return ""
    if "entry" not in m:
        return f"measured reserve n/a: {m.get('why', '')}"
    e = m["entry"]
    return (f"measured reserve = floor({e['gpu_memory_bytes']:,} x {e['gpu_memory_utilization']}) - "
            f"{e['weights_per_rank_bytes']:,} - {e['num_gpu_blocks']:,} x {e['block_bytes']:,} "
            f"(GPU total x the engine's util - weights/rank - its blocks x block bytes)"
            + (f"; {m['simulated']}" if m.get("simulated") else ""))


def _append_rows(out: Text, rows: list[tuple[str, str, str]]) -> None:
    """``label .... value`` lines, the labels padded to the longest."""
    label_w = max(len(label) for label, _, _ in rows)
    for label, value, style in rows:
        out.append(label.ljust(label_w) + "  ", style="bold" if label == "engine" else "")
        out.append(value + "\n", style=style)


def _kv_problems(kv: dict[str, Any]) -> Text:
    """Why there is no KV pool to show (the analysis' notes), and the engine's own figures where one answers (a
    machine without NVML watching a remote engine: they were left out, only its failures shown), with why kvdash
    has nothing to compare them with."""
    out = Text()
    for note in kv.get("notes", []):
        out.append(note + "\n", style="yellow")
    eng = kv.get("engine")
    if eng and eng["reading"].get("error"):
        out.append(eng["status"] + "\n", style="red")
    elif eng:
        _append_rows(out, engine_rows(eng))
        for line, style in ((eng.get("model_note"), "yellow"), (eng.get("explain"), "dim")):
            if line:
                out.append(line + "\n", style=style)
    return out


def kv_table(kv: dict[str, Any], width: int = 100) -> Text:
    """The KV panel: one "figure .... value" line each (plain styled text)."""
    if not kv.get("ok"):
        return _kv_problems(kv)
    out = Text()
    lengths = ", ".join(f"{n:,}" for n in kv["lengths"])
    rows: list[tuple[str, str, str]] = [
        ("model", f"{kv['model']} | {kv['kv_dtype']} | block {kv['block_size']} | TP {kv['tp']}", ""),
        ("budget per rank", f"{kv['budget_bytes']:,} B ({gib(kv['budget_bytes'])} GiB, "
                             + ("upper bound)" if kv.get("reserve_basis", "").startswith("0 B")
                                and kv["budget_mode"] == "vllm" else "SGLang 0.5.23's rules)"
                                if kv.get("engine_rules") == "sglang" else f"{kv['budget_mode']})"), ""),
        ("runtime reserve (per rank)", kv.get("reserve_text", ""), ""),
        *([("upper bound: --reserve auto", f"-{gib(kv['auto_reserve_estimate_bytes'])} GiB per rank (published "
                                           "terms)", "yellow")] if kv.get("auto_reserve_estimate_bytes") else []),
        ("KV bytes per token per rank", f"{kv['bytes_per_token']:,} B", ""),
        ("pool blocks (smallest rank)", f"{kv['pool_blocks']:,} x {kv['block_bytes']:,} B", ""),
        ("token slots", f"{kv['token_slots']:,}", ""),
        *([("state per request (fixed)", f"{kv['state_bytes_per_request']:,} B, whatever the length", "")]
          if kv.get("state_bytes_per_request") else []),
        (f"requests of {lengths} tokens, paged", f"{kv['paged_requests']:,}", ""),
        *([("SGLang runs at once" if kv.get("engine_rules") == "sglang" else "vLLM runs at once",
            f"{kv['running_requests']:,} (its " + ("max_running_requests" if kv.get("engine_rules") == "sglang"
                                                  else "max_num_seqs") + f" {kv['max_num_seqs']:,})",
            "yellow" if kv["running_requests"] < kv["paged_requests"] else "")] if "max_num_seqs" in kv else []),
        (f"contiguous (reserve {kv['max_reserved']:,})", f"{kv['contiguous_requests']:,}", ""),
        ("paged / contiguous", ratio_text(kv["ratio"], "n/a", "x (capacity, not throughput)"), ""),
        ("blocks left at capacity", f"{kv['headroom_blocks']:,} (shared out: "
                                    f"+{kv['headroom_tokens_per_request']:,} tokens per request)", ""),
    ]
    eng = kv.get("engine")
    if eng:
        rows += engine_rows(eng)
        rows += measured_rows(kv)
    _append_rows(out, rows)
    if eng:
        if eng.get("model_note"):
            out.append(eng["model_note"] + "\n", style="yellow")
        if eng.get("explain"):
            out.append(eng["explain"] + "\n", style="dim")
        if measured_note(kv):
            out.append(measured_note(kv) + "\n", style="dim")
    for note in kv.get("notes", []):
        out.append(note + "\n", style="yellow")
    return out


def kv_summary(kv: dict[str, Any]) -> Text:
    """The KV pool in a few lines, for small terminals: the pool, requests that fit paged and
    contiguous, and the engine's usage; the full table is in the details view."""
    if not kv.get("ok"):
        return _kv_problems(kv)
    out = Text()
    lengths = ", ".join(f"{n:,}" for n in kv["lengths"])
    out.append("KV pool ", style="bold")
    out.append(f"{kv['model']} {kv['kv_dtype']} B={kv['block_size']} TP {kv['tp']}, ")
    out.append(f"{kv.get('reserve_text', '')}\n", style="yellow" if "UPPER" in kv.get("reserve_text", "") else "")
    out.append("pool    ", style="bold")
    out.append(f"{kv['pool_blocks']:,} blocks = {kv['token_slots']:,} tokens per rank\n")
    ratio = "" if kv["ratio"] is None else f": {ratio_text(kv['ratio'])}"
    out.append("fit     ", style="bold")
    capped = kv.get("max_num_seqs") is not None and kv["running_requests"] < kv["paged_requests"]
    out.append(f"{kv['paged_requests']:,} x {lengths} tokens paged, {kv['contiguous_requests']:,} contiguous "
               f"(reserve {kv['max_reserved']:,}){ratio}"
               + (f"; vLLM runs at most {kv['max_num_seqs']:,} at once" if capped else "") + "\n")
    eng = kv.get("engine")
    if eng:
        r = eng["reading"]
        if r.get("error"):
            out.append(eng["status"] + "\n", style="red")
        else:
            usage = _na(r, "kv_usage", f"{100 * r['kv_usage']:.1f}%" if r.get("kv_usage") is not None else None)
            blocks = engine_blocks(eng)
            if blocks:
                usage += f" = {blocks[0]:,}/{blocks[1]:,} blocks" + (f" of {blocks[2]}" if blocks[2] else "")
            word = "retracted" if r.get("kind") == "sglang" else "preempted"
            out.append("engine  ", style="bold")
            if r.get("kind") == "lmcache":  # LMCache's own page: its tier, no pool
                out.append("LMCache (its tier only, no KV pool of its own)\n")
            else:
                out.append(f"KV {usage} | run {_na(r, 'running')} | wait {_na(r, 'waiting')} | "
                           f"{word} {_na(r, 'preemptions')}\n")
            tier = offload_summary(r.get("offload") or {}, eng.get("offload_vs_kvdash") or {})
            if tier:
                out.append("offload ", style="bold")
                out.append(tier + "\n")
            if eng.get("model_note"):
                out.append(eng["model_note"] + "\n", style="yellow")
            elif "engine_tokens" in eng:
                out.append("pools   ", style="bold")
                rules = f" by {eng['kvdash_rules']}'s rules" if eng.get("kvdash_rules") else ""
                out.append(f"engine {eng['engine_tokens']:,} vs kvdash{rules} {eng['kvdash_tokens']:,} "
                           f"({eng['difference_tokens']:+,})")
                m = kv.get("measured_reserve") or {}
                matches = ""
                if "reconciling_reserve_bytes" in eng and eng["reconciling_reserve_bytes"] >= 0:
                    also = eng["explain"].split("--reserve", 1)[0] if eng.get("explain", "").startswith("--") else ""
                    matches = f"{also}--reserve {_size(int(eng['reconciling_reserve_bytes']))} matches"
                if matches and "entry" not in m:
                    out.append(f": {matches}")
                out.append("\n")
                if "entry" in m:
                    out.append("reserve ", style="bold")
                    out.append(f"measured {_size(int(m['entry']['reserve_bytes']))}/rank")
                    out.append(f" ({matches + '; ' if matches else ''}"
                               f"{'simulated' if m.get('simulated') else 'c: save'})\n", style="dim")
    for note in kv.get("notes", []):
        out.append(note + "\n", style="yellow")
    out.rstrip()
    return out


def engine_blocks(eng: dict[str, Any]) -> tuple[int, int, int | None] | None:
    """The engine's (used blocks, pool blocks, block size) as it reports them: its own blocks of its own size where
    it states them (whatever kvdash's ``b`` sets: block size given), else its tokens in kvdash's blocks (None);
    None where usage is unknown."""
    if eng.get("engine_own_blocks") and "engine_used_own_blocks" in eng:
        return int(eng["engine_used_own_blocks"]), int(eng["engine_own_blocks"]), int(eng["engine_block_size"])
    if "used_blocks" in eng and eng.get("engine_blocks"):
        return int(eng["used_blocks"]), int(eng["engine_blocks"]), None
    return None


def engine_usage_map(kv: dict[str, Any], width: int) -> Text | None:
    """The engine's actual usage as one row: used blocks = usage x its pool, beside the pool."""
    blocks = engine_blocks(kv.get("engine") or {})
    if blocks is None:
        return None
    used, pool, size = blocks
    cells = max(0, min(width, round(used / pool * width)))
    out = Text(f"Engine now: {used:,} of its {pool:,} blocks{f' of {size}' if size else ''} used "
               f"({100 * used / pool:.1f}%); kvdash's pool {int(kv['pool_blocks']):,} blocks of "
               f"{int(kv['block_size'])}\n", style="bold")
    out.append("█" * cells, style=load_style(used / pool))
    out.append("·" * (width - cells), style="grey50")
    return out


def once_view(snapshot: Snapshot, kv: dict[str, Any], width: int = 120) -> list[RenderableType]:
    """What ``kvdash live --once`` prints (compact GPU columns below 110 columns)."""
    head = Text(f"{snapshot.source}  driver {snapshot.driver or 'n/a'}", style="bold")
    out: list[RenderableType] = [head, gpu_table(snapshot, width=width),
                                 process_table(snapshot, width=width), kv_table(kv)]
    if kv.get("ok") and snapshot.gpus:
        g = next((x for x in snapshot.gpus if x.index == kv.get("tight_gpu")), snapshot.gpus[0])
        if g.total_bytes:
            seg = memory_segments(g, kv)
            out.append(Group(Text(f"GPU {g.index} memory (analytical engine layout):"),
                             stacked_bar(seg, g.total_bytes, 60), legend(seg, g.total_bytes)))
    if snapshot.error:
        out.append(Text(snapshot.error, style="yellow"))
    return out

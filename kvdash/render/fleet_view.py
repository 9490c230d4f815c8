"""Rich renderables of the fleet view (``kvdash live --prometheus``): one line per host, per GPU and
per engine for the TUI's tree, and the ``--once`` tables.  Pure functions of the fleet document."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from kvdash.render.table import Table
from kvdash.units import gib_text

STATUS_STYLE = {"up": "green", "degraded": "yellow", "down": "bold red"}


def _n(x: int | None) -> str:
    return "n/a" if x is None else f"{x:,}"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _signed(x: int | None) -> str:
    return "n/a" if x is None else f"{x:+,}"


def _live(engines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The engines whose reading is live: one an exporter reports down, or whose reading is stale, counts in no
    total (its last figures are not the engine's now)."""
    return [e for e in engines if e.get("state", "up") == "up"]


def _state_text(e: dict[str, Any]) -> str:
    """``DOWN 41 s old`` for an engine whose reading is not live, else empty."""
    state, age = e.get("state", "up"), e.get("reading_age_s")
    return "" if state == "up" else f"{state.upper()}{f' {age:,.0f} s old' if age is not None else ''}"


def host_usage(h: dict[str, Any]) -> float | None:
    """The host's live engines' KV usage, weighted by their pools (None without a pool)."""
    pools = [(e["pool_tokens"], e["usage"]) for e in _live(h["engines"]) if e["pool_tokens"] and e["usage"] is not None]
    total = sum(p for p, _ in pools)
    return sum(p * u for p, u in pools) / total if total else None


def host_line(h: dict[str, Any]) -> Text:
    """``node-a  up  8 GPU  512.3/1,123.2 GiB  1 eng 42.1%  run 12 wait 3``."""
    out = Text()
    out.append(f"{h['host'][:16]:<16} ", style="bold")
    out.append(f"{h['status']:<8} ", style=STATUS_STYLE.get(h["status"], ""))
    if h["gpus"]:
        out.append(f"{len(h['gpus']):>2} GPU {gib_text(h['used_bytes'], 0):>5}/{gib_text(h['total_bytes'], 0):>5} GiB ")
    else:
        out.append(f"{'no GPU series':<22} ", style="dim")
    engines = _live(h["engines"])  # a down or stale engine's last figures counted in the host's (a helper's audit)
    if engines:
        run = sum(e["running"] or 0 for e in engines)
        wait = sum(e["waiting"] or 0 for e in engines)
        out.append(f"{len(engines)} eng {_pct(host_usage(h)):>6} r{run} w{wait}")
    if len(engines) < len(h["engines"]):
        out.append(f"  {len(h['engines']) - len(engines)} eng down/stale", style="red")
    if h["down_targets"]:
        out.append(f"  {len(h['down_targets'])} down", style="red")
    return out


def gpu_line(g: dict[str, Any]) -> Text:
    used, total = g["used_bytes"], g["total_bytes"]
    frac = used / total if used is not None and total else None
    out = Text(f"GPU {g['gpu']:>2} {g['name'][:22]:<22} {gib_text(used, 1):>6}/{gib_text(total, 1)} GiB ")
    out.append(f"{_pct(frac):>6}", style="red" if frac and frac > 0.95 else "")
    if g["reserved_bytes"] is not None:
        out.append(f" res {gib_text(g['reserved_bytes'], 1)}", style="dim")
    return out


LOOPBACK = ("localhost", "::1")


def engine_where(e: dict[str, Any]) -> tuple[str, str]:
    """Where an engine line says the engine is, and its tag: ``(":8000", "0")`` for the vLLM engine 0 at
    Prometheus' ``instance`` ``10.0.0.5:8000``; an engine read through ``kvdash exporter`` by its own address (the
    exporter's ``engine`` label, the URL it reads) and its pool, not by the exporter's: ``":8000"`` for one on the
    exporter's own host, else the address without its scheme (``"10.0.0.6:8000"``); the exporter's address is in
    ``v``.

    >>> engine_where({"kind": "vllm", "instance": "10.0.0.5:8000", "engine": "0"})
    (':8000', '0')
    >>> [engine_where({"kind": "exporter", "instance": "h:9847", "engine": url, "rank": "0"})[0]
    ...  for url in ("localhost:8000", "http://127.0.0.1:8001/", "[::1]:8002", "http://10.0.0.6:8000",
    ...              "https://gw.example/vllm", "http://[::1]", "not a url")]
    [':8000', ':8001', ':8002', '10.0.0.6:8000', 'gw.example/vllm', ':80', 'not a url']
    """
    if e["kind"] != "exporter":
        where = e["instance"].rsplit(":", 1)[-1] if ":" in e["instance"] else e["instance"]
        return f":{where}", e["engine"]
    label, tag = e["engine"], str(e.get("rank") or "")
    from kvdash.netaddr import split_http_url

    try:
        parts = split_http_url(label)
    except ValueError:
        return label, tag
    host = parts.hostname or ""
    if host in LOOPBACK or host.startswith("127."):
        return f":{parts.port or (443 if parts.scheme == 'https' else 80)}", tag
    return (parts.netloc + parts.path).rstrip("/"), tag


def engine_line(e: dict[str, Any]) -> Text:
    """``vllm :8000 #0 42.1% r12 w3 pool 1,448,208 kvdash 1,234,567 (+213,641)``; a DOWN or STALE engine's line
    ends at its pool (``vllm :8000 #0 STALE 409 s old 42.1% r12 w3 pool 1,448,208``); where the engine is:
    :func:`engine_where`."""
    where, tag = engine_where(e)
    out = Text(f"{e['kind']:<6} {where}{' #' + tag if tag else ''} ", style="cyan")
    state = e.get("state", "up")
    if state != "up":
        out.append(_state_text(e) + " ", style="bold red")
    out.append(f"{_pct(e['usage']):>6} r{e['running'] if e['running'] is not None else '-'} "
               f"w{e['waiting'] if e['waiting'] is not None else '-'} pool {_n(e['pool_tokens'])}",
               style="dim" if state != "up" else "")
    if state != "up":  # out of every total: its pool beside kvdash's is in `v`, and the line fits 80 columns
        return out
    if not e.get("comparable", True):
        if e.get("own_kvdash_tokens") is not None:  # against the pool of the model it serves
            out.append(f" own model {_n(e['own_kvdash_tokens'])} ({_signed(e.get('own_difference_tokens'))})",
                       style="yellow")
        else:
            out.append(" not comparable", style="yellow")
    elif e.get("kvdash_tokens") is not None:
        out.append(f" kvdash {_n(e['kvdash_tokens'])} ({_signed(e.get('difference_tokens'))})")
    else:
        out.append(" kvdash n/a", style="dim")
    return out


def engine_details(fleet: dict[str, Any] | None) -> Text:
    """The fleet's ``v`` view: every engine pool with its state, reading age, model and figures."""
    out = Text()
    if not fleet:
        return Text("no reading yet", style="dim")
    if not fleet["engines"]:
        return Text("no engines in this Prometheus", style="dim")
    for e in fleet["engines"]:
        age = e.get("reading_age_s")
        out.append(f"{e['host']} {e['instance']}{' #' + e['engine'] if e['engine'] else ''}\n", style="bold")
        out.append(f"  {e['kind']} {e.get('model_name') or '(model not published)'}: {e.get('state', 'up')}"
                   f"{f', reading {age:,.1f} s old' if age is not None else ''}"
                   f"{'' if e.get('comparable', True) else ', not comparable with ' + fleet['config']['model']}\n")
        out.append(f"  pool {_n(e['pool_tokens'])} tokens ({_n(e['num_gpu_blocks'])} blocks of "
                   f"{e['block_size'] or '-'}), usage {_pct(e['usage'])}, running {e['running']}, "
                   f"waiting {e['waiting']}\n")
        if e.get("own_kvdash_tokens") is not None:
            out.append(f"  against its own model's pool ({e['own_model']}, same GPUs and --tp): kvdash "
                       f"{_n(e['own_kvdash_tokens'])} tokens, engine {_signed(e.get('own_difference_tokens'))}: "
                       f"{e.get('own_explain', '')}\n")
        elif e.get("own_model_note"):
            out.append(f"  its own model: {e['own_model_note']}\n", style="dim")
        w = e.get("window") or {}
        if w.get("prefix_hit_rate") is not None or w.get("preemptions") is not None:
            word = "retractions" if e["kind"] == "sglang" else "preemptions"
            hit = "n/a" if w.get("prefix_hit_rate") is None else f"{100 * w['prefix_hit_rate']:.1f}%"
            out.append(f"  last {w['readings']} readings (the server's): prefix-cache hit rate {hit}, "
                       f"{word} {'n/a' if w.get('preemptions') is None else format(w['preemptions'], ',')}\n")
        for note in e.get("kvdash_notes", []):
            out.append(f"  {note}\n", style="dim")
    return out


def down_line(t: dict[str, Any]) -> Text:
    return Text(f"down: {t['job']} {t['instance']} (up == 0)", style="red")


def totals_text(fleet: dict[str, Any]) -> Text:
    """Three lines of fleet totals, each under 80 columns for a fleet of thousands of GPUs (the third, requests that
    fit, with one length; more --group lengths make it longer)."""
    t = fleet["totals"]
    c = fleet["config"]
    down = f" ({t['hosts_down']} down, {t['targets_down']} targets)" if t["targets_down"] else ""
    out = Text()
    reporting = t.get("gpus_reporting_memory", t["gpus"])
    partial = f" ({reporting:,} of {t['gpus']:,} report)" if reporting < t["gpus"] else ""
    out.append(f"{t['hosts']} hosts{down}  {t['gpus']} GPUs  "
               f"{gib_text(t['gpu_used_bytes'], 0)}/{gib_text(t['gpu_total_bytes'], 0)} GiB used{partial}\n",
               style="bold")
    out.append(f"{t['engines']} engines  run {t['running']:,} wait {t['waiting']:,}  "
               f"free KV {t['free_kv_tokens']:,} tok = {gib_text(t['free_kv_bytes'], 1)} GiB\n")
    # requests that fit in the free blocks now, of those the engines' whole pools hold; then the model the bytes are
    # counted for, or the bytes per token alone, or neither: what keeps the line to an 80-column pane (its text is
    # 78 wide; several --group lengths may still wrap it)
    fit = "fit now " + ", ".join(f"{r['free_now']:,} of {r['engine_pools']:,} x {r['length']:,} tok"
                                 for r in t["requests_fit"])
    tails = (f"  ({c['model']} {c['kv_dtype']} TP {c['tp']}: {t['kv_bytes_per_token']:,} B/token)",
             f"  ({t['kv_bytes_per_token']:,} B/token)", "")
    out.append(fit + next(tail for tail in tails if len(fit + tail) <= 78 or not tail), style="dim")
    return out


def problem_lines(fleet: dict[str, Any], limit: int = 5) -> list[str]:
    """What Prometheus sent that kvdash could not use: figures shown as n/a (with the reason) and samples
    skipped, at most ``limit`` of each kind named (then a count)."""
    bad = [f"{h['host']} GPU {g['gpu']} {field}: {why}" for h in fleet["hosts"] for g in h["gpus"]
           for field, why in sorted(g.get("invalid", {}).items())]
    bad += [f"{e['host']} {e['kind']} {e['instance']} {field}: {why}" for e in fleet["engines"]
            for field, why in sorted(e.get("invalid", {}).items())]
    out = []
    if bad:
        more = f" and {len(bad) - limit:,} more" if len(bad) > limit else ""
        out.append("n/a from Prometheus: " + "; ".join(bad[:limit]) + more)
    skipped = fleet.get("skipped_samples") or {}
    if skipped:
        out.append("Prometheus samples skipped: " + "; ".join(f"{q}: {why}" for q, why in sorted(skipped.items())))
    return out


def once_tables(fleet: dict[str, Any]) -> tuple[list[Table], str]:
    """``kvdash live --prometheus URL --once``: a hosts table, an engines table and the totals
    (kvdash's own box tables: a value is never cut short)."""
    hosts = Table(title=f"Fleet from {fleet.get('prometheus', 'Prometheus')}")
    for col, just in (("host", "left"), ("status", "left"), ("GPUs", "right"), ("used/total GiB", "right"),
                      ("engines", "right"), ("KV use", "right"), ("down targets (up == 0)", "left")):
        hosts.add_column(col, just, wrap=col in ("host", "down targets (up == 0)"))  # type: ignore[arg-type]
    for h in fleet["hosts"]:
        mem = f"{gib_text(h['used_bytes'], 0)}/{gib_text(h['total_bytes'], 0)}" if h["gpus"] else "n/a"
        live = len(_live(h["engines"]))
        gone = len(h["engines"]) - live
        hosts.add_row(h["host"], h["status"], str(len(h["gpus"])), mem, f"{live}" + (f" (+{gone} down/stale)" if gone
                                                                                     else ""),
                      _pct(host_usage(h)), ", ".join(f"{t['job']} {t['instance']}" for t in h["down_targets"]))
    c = fleet["config"]
    engines = Table(title=f"Engines: their own KV pool beside kvdash's for {c['model']}, {c['kv_dtype']}, "
                          f"block {c['block_size']}, TP {c['tp']}, in tokens (diff = engine - kvdash)")
    for col in ("host", "engine", "KV use", "run/wait", "engine", "kvdash", "diff"):
        engines.add_column(col, "left" if col in ("host", "engine") else "right", wrap=col in ("host", "engine"))
    for e in fleet["engines"]:
        where, tag = engine_where(e)
        state = _state_text(e)  # a down or stale engine's row is its last reading, said so (it read as live)
        engines.add_row(e["host"], f"{e['kind']} {where}{' #' + tag if tag else ''}"
                        + (f" {state}" if state else ""),
                        _pct(e["usage"]), f"{_n(e['running'])}/{_n(e['waiting'])}", _n(e["pool_tokens"]),
                        _n(e.get("kvdash_tokens")), _signed(e.get("difference_tokens")))
    footer = totals_text(fleet).plain
    # "n/a" only for engines kvdash has no pool for; a note beside a pool shown (too few GPUs read for the TP) is not
    # one (a helper's audit: "kvdash pool n/a: TP 8 needs 8 GPUs ..." under a row showing kvdash's pool)
    for label, ok in (("kvdash pool n/a", False), ("kvdash", True)):
        notes = sorted({n for e in fleet["engines"] if bool(e.get("kvdash_pool", e.get("kvdash_ok"))) is ok
                        for n in e["kvdash_notes"]})
        if notes:
            footer += f"\n{label}: " + "; ".join(notes)
    for line in problem_lines(fleet):
        footer += "\n" + line
    footer += "\nAssumptions: " + "; ".join(fleet.get("assumptions", [])) + "."
    return [hosts, engines], footer

"""``kvdash live``: GPUs on the left, the analytical KV pool on the right, in Textual.

Polling runs in a thread worker; the next poll is armed only after the previous one has been
applied, so polls never overlap.  The app knows only the :class:`~kvdash.sources.base.Source`
interface: NVML, the demo and a replay look the same to it.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.command import Hit, Hits, Provider
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, Header, Static

from kvdash.core.dtypes import DTYPES
from kvdash.core.model import preset_names
from kvdash.errors import InputError
from kvdash.live.analysis import LiveConfig, analyze, block_map
from kvdash.render.live_view import (
    block_map_text,
    gpu_table,
    kv_table,
    legend,
    memory_segments,
    process_table,
    stacked_bar,
)
from kvdash.sources.base import Snapshot, Source
from kvdash.sources.engine import EngineReading, from_snapshot
from kvdash.units import gib_text

BLOCK_SIZES = (8, 16, 32, 64, 128)
KV_DTYPES = ("bf16", "fp8", "fp16", "int8", "fp32")
LENGTHS = (128, 256, 512, 825, 1024, 2048, 4096, 8192, 16384, 32768)
HISTORY = 120


class ModelCommands(Provider):
    """Model choice from the command palette."""

    async def search(self, query: str) -> Hits:
        app = self.app
        assert isinstance(app, LiveApp)
        matcher = self.matcher(query)
        for name in preset_names():
            score = matcher.match(f"model {name}")
            if score > 0:
                yield Hit(score, matcher.highlight(f"model {name}"), partial(app.set_model, name),
                          help="analyse this model's KV pool")


class HelpScreen(ModalScreen[None]):
    BINDINGS = [("escape,q,question_mark", "app.pop_screen", "close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    #help { width: 72; height: auto; border: round $accent; padding: 1 2; background: $panel; }
    """

    def compose(self) -> ComposeResult:
        yield Static(HELP, id="help")


HELP = """[b]kvdash live[/b]: GPU memory beside the analytical KV pool

[b]m[/b] / [b]M[/b]  next / previous model (or ctrl+p: the command palette)
[b]d[/b]      next KV dtype           [b]b[/b]  next block size
[b]l[/b] / [b]L[/b]  longer / shorter request length
[b]z[/b]      block map scale: requests / one block per cell / whole pool
[b]p[/b]      pause / resume polling
[b]s[/b]      write a snapshot (JSON and Markdown)
[b]?[/b]      this help          [b]q[/b]  quit

Block map: [green]█[/] tokens  [yellow]█[/] tail of a block  [red]▒[/] reserved, empty  · free
Capacity ratios are capacity, not throughput."""


class LiveApp(App[None]):
    TITLE = "kvdash live"
    CSS = """
    Screen { layout: vertical; }
    #body { height: 1fr; }
    #left, #right { width: 1fr; height: 1fr; padding: 0 1; }
    #left { border-right: tall $panel-lighten-2; }
    .panel-title { text-style: bold; color: $accent; }
    LiveApp.narrow #body { layout: vertical; }
    LiveApp.narrow #left { border-right: none; border-bottom: tall $panel-lighten-2; }
    """
    COMMANDS = App.COMMANDS | {ModelCommands}
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("m", "cycle_model(1)", "model"),
        Binding("M", "cycle_model(-1)", "prev model", show=False),
        Binding("d", "cycle_dtype", "dtype"),
        Binding("b", "cycle_block", "block"),
        Binding("l", "length(1)", "longer"),
        Binding("L", "length(-1)", "shorter"),
        Binding("z", "zoom", "zoom"),
        Binding("p", "pause", "pause"),
        Binding("s", "snapshot", "snapshot"),
        Binding("question_mark", "help", "help"),
    ]

    def __init__(self, source: Source, config: LiveConfig, interval: float = 1.0,
                 engine: Callable[[], EngineReading] | None = None, snapshot_dir: Path | None = None,
                 autopoll: bool = True, simulation: Any = None, sim_steps_per_poll: int = 25) -> None:
        super().__init__()
        self.simulation = simulation  # a kvdash.simulate.visual.VisualSimulation, drawn instead of the static map
        self.sim_steps_per_poll = sim_steps_per_poll
        self.source = source
        self.config = config
        self.interval = interval
        self.engine_fetch = engine
        self.snapshot_dir = snapshot_dir or Path(".")
        self.autopoll = autopoll
        self.paused = False
        self.view = 0  # block map scale: 0 requests, 1 one block per cell, 2 whole pool
        self.snapshot: Snapshot | None = None
        self.engine: EngineReading | None = None
        self.kv: dict[str, Any] = {}
        self.history: dict[int, deque[float]] = {}
        self.message = ""
        self.polls = 0
        self.snapshots_written = 0
        self._drawn: dict[str, Any] = {}  # what each panel shows now, to skip redrawing unchanged panels

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="body"):
            with VerticalScroll(id="left"):
                yield Static("GPUs", classes="panel-title")
                yield Static(id="gpus")
                yield Static(id="procs")
            with VerticalScroll(id="right"):
                yield Static("KV pool", classes="panel-title")
                yield Static(id="kv")
                yield Static(id="stack")
                yield Static(id="map")
        yield Static(id="status")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = self.source.name
        self._resized(self.size.width)
        if self.autopoll:
            self.poll()
        else:
            self.apply(*self.read_once())
        self.call_after_refresh(self.refresh_view)  # again once the panels have their real sizes

    def on_resize(self, event: Any) -> None:
        self._resized(event.size.width)
        self.refresh_view()

    def _resized(self, width: int) -> None:
        self.set_class(width < 140, "narrow")

    # --- polling -------------------------------------------------------------------------------
    def read_once(self) -> tuple[Snapshot, EngineReading | None]:
        if self.simulation is not None and not self.paused:
            for _ in range(self.sim_steps_per_poll):
                self.simulation.step()
        snap = self.source.read()
        engine = self.engine_fetch() if self.engine_fetch else from_snapshot(snap.extra)
        return snap, engine

    @work(thread=True, exclusive=True, group="poll")
    def poll(self) -> None:
        if self.paused:
            self.call_from_thread(self.rearm)
            return
        try:
            snap, engine = self.read_once()
        except Exception as exc:  # noqa: BLE001 - a failing source must not end the dashboard
            self.call_from_thread(self.note, f"source error: {exc}")
            self.call_from_thread(self.rearm)
            return
        self.call_from_thread(self.apply, snap, engine)
        self.call_from_thread(self.rearm)

    def rearm(self) -> None:
        self.set_timer(self.interval, self.poll)

    def note(self, text: str) -> None:
        self.message = text
        self.refresh_view()

    def apply(self, snap: Snapshot, engine: EngineReading | None) -> None:
        self.polls += 1
        self.snapshot = snap
        self.engine = engine
        for g in snap.gpus:
            if g.used_bytes is not None:
                self.history.setdefault(g.index, deque(maxlen=HISTORY)).append(float(g.used_bytes))
        self.recompute()

    def recompute(self) -> None:
        if self.snapshot is None:
            return
        try:
            self.kv = analyze(self.snapshot, self.config, self.engine)
        except InputError as exc:
            self.kv = {"ok": False, "notes": [str(exc)]}
        self.refresh_view()

    # --- drawing -------------------------------------------------------------------------------
    def _update(self, widget_id: str, key: Any, render: Callable[[], Any], shape: Any = None) -> None:
        """Redraw a panel only when what it shows has changed, and lay the screen out again only when
        its shape (``shape``: what decides its height) has changed."""
        if self._drawn.get(widget_id) == key:
            return
        self._drawn[widget_id] = key
        layout = shape is None or self._drawn.get(f"{widget_id}:shape") != shape
        self._drawn[f"{widget_id}:shape"] = shape
        self.query_one(f"#{widget_id}", Static).update(render(), layout=layout)

    def refresh_view(self) -> None:
        snap = self.snapshot
        if snap is None or not self.is_mounted:
            return
        width = max(20, self.query_one("#right").size.width - 2)
        compact = self.query_one("#left").size.width < 90
        spark = {i: tuple(h)[-16:] for i, h in self.history.items()}
        sizes = (self.size.width, self.size.height)
        self._update("gpus", (snap.gpus, spark, compact), lambda: gpu_table(
            snap, self.history, bar_width=10, spark_width=16, compact=compact),
            shape=(len(snap.gpus), compact, sizes))
        procs = tuple((g.index, g.processes, g.processes_note) for g in snap.gpus)
        self._update("procs", procs, lambda: process_table(snap, limit=10),
                     shape=(sum(max(1, len(g.processes)) for g in snap.gpus), sizes))
        kv = self.kv
        engine = kv.get("engine", {})
        self._update("kv", repr(kv), lambda: kv_table(kv),
                     shape=(kv.get("ok"), tuple(kv.get("notes", ())), engine.get("status"), engine.get("explain"),
                            kv.get("model"), tuple(kv.get("lengths", ())), sizes))
        g = next((x for x in snap.gpus if x.index == kv.get("tight_gpu")), None) if kv.get("ok") else None
        if g and g.total_bytes:
            seg = memory_segments(g, kv)
            self._update("stack", (tuple(seg), width), lambda: Group(
                Text(f"GPU {g.index} memory, engine layout (analytical):", style="bold"),
                stacked_bar(seg, g.total_bytes or 0, width), legend(seg, g.total_bytes)))
        else:
            self._update("stack", None, lambda: "")
        if self.simulation is not None:
            sim = self.simulation
            cells = sim.cells()
            self._update("map", (tuple(cells), width), lambda: Group(
                Text(f"Block map, {sim.status()} (one cell per block of {sim.B} slots):", style="bold"),
                block_map_text(cells, width),
                Text.from_markup("[green]█[/] tokens  [yellow]█[/] block tail / never-used reservation  "
                                 "[red]▒[/] reserved for coming tokens  [magenta]x[/] free but no hole fits  · free"),
            ), shape=(len(cells), width))
        elif kv.get("ok"):
            rows = 3 if self.size.height < 30 else 5
            cells = width * rows
            pool, bs = int(kv["pool_blocks"]), int(kv["block_size"])
            lengths = tuple(kv["lengths"])
            per_cell: int | None
            if self.view == 0:  # one contiguous reservation of the group per row
                per_cell = max(1, -(-int(kv["max_reserved"]) * len(lengths) // width))
                scope = f"start of the pool, {per_cell:,} token slots per cell"
            elif self.view == 1:
                per_cell = bs
                scope = "start of the pool, 1 block per cell"
            else:
                per_cell = None
                scope = f"whole pool, {pool * bs / cells:,.0f} token slots per cell"
            key = (pool, bs, lengths, kv["max_reserved"], cells, width, per_cell, kv["paged_requests"],
                   kv["contiguous_requests"])
            if self._drawn.get("map") == key:
                return self._status(snap)
            self._drawn["map"] = key
            paged = block_map(pool, bs, lengths, kv["max_reserved"], cells, False, per_cell)
            contiguous = block_map(pool, bs, lengths, kv["max_reserved"], cells, True, per_cell)
            self.query_one("#map", Static).update(Group(
                Text(f"Block map ({scope}); paged, {kv['paged_requests']:,} requests fit:", style="bold"),
                block_map_text(paged, width),
                Text(f"Same memory, contiguous reservation of {kv['max_reserved']:,} "
                     f"({kv['contiguous_requests']:,} requests):", style="bold"),
                block_map_text(contiguous, width),
                Text.from_markup("[green]█[/] tokens  [yellow]█[/] block tail  [red]▒[/] reserved, empty  · free"),
            ))
        else:
            self._update("map", None, lambda: "")
        self._status(snap)

    def _status(self, snap: Snapshot) -> None:
        state = "paused" if self.paused else f"every {self.interval:g} s"
        err = f"  {snap.error}" if snap.error else ""
        self.query_one("#status", Static).update(
            Text(f" {snap.source} | {state} | length {', '.join(map(str, self.config.lengths))} | "
                 f"{self.message}{err}", style="dim"))

    # --- actions -------------------------------------------------------------------------------
    def set_model(self, name: str) -> None:
        self._configure(replace(self.config, model=name, arch=None), f"model {name}")

    def _configure(self, cfg: LiveConfig, label: str) -> None:
        try:
            cfg.validate()
        except InputError as exc:
            self.note(f"{label}: {exc}")
            return
        self.config = cfg
        self.message = label
        self.recompute()

    def action_cycle_model(self, step: int) -> None:
        names = preset_names()
        i = names.index(self.config.model) if self.config.model in names else -1
        for k in range(1, len(names) + 1):  # skip models the TP degree does not divide
            name = names[(i + step * k) % len(names)]
            cfg = replace(self.config, model=name, arch=None)
            try:
                cfg.validate()
            except InputError:
                continue
            self._configure(cfg, f"model {name}")
            return

    def action_cycle_dtype(self) -> None:
        cur = self.config.kv_dtype
        nxt = KV_DTYPES[(KV_DTYPES.index(cur) + 1) % len(KV_DTYPES)] if cur in KV_DTYPES else "bf16"
        assert nxt in DTYPES
        self._configure(replace(self.config, kv_dtype=nxt), f"kv dtype {nxt}")

    def action_cycle_block(self) -> None:
        cur = self.config.block_size
        nxt = BLOCK_SIZES[(BLOCK_SIZES.index(cur) + 1) % len(BLOCK_SIZES)] if cur in BLOCK_SIZES else 16
        self._configure(replace(self.config, block_size=nxt), f"block size {nxt}")

    def action_length(self, step: int) -> None:
        cur = self.config.lengths[0]
        options = [n for n in LENGTHS if n <= self.config.architecture().max_context]
        if step > 0:
            nxt = next((n for n in options if n > cur), options[-1])
        else:
            nxt = next((n for n in reversed(options) if n < cur), options[0])
        self._configure(replace(self.config, lengths=(nxt,), max_reserved=max(self.config.max_reserved, nxt)),
                        f"length {nxt}")

    def action_zoom(self) -> None:
        self.view = (self.view + 1) % 3
        self.note(("block map: requests", "block map: one block per cell", "block map: whole pool")[self.view])

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.note("paused" if self.paused else "resumed")

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_snapshot(self) -> None:
        if self.snapshot is None:
            return
        self.snapshots_written += 1
        stem = self.snapshot_dir / f"kvdash-snapshot-{int(self.snapshot.time)}-{self.snapshots_written}"
        paths = write_snapshot(stem, self.snapshot, self.kv)
        self.note("wrote " + ", ".join(p.name for p in paths))


def write_snapshot(stem: Path, snap: Snapshot, kv: dict[str, Any]) -> list[Path]:
    """The live readings and the calculator's figures, as JSON and as Markdown."""
    data = {"snapshot": snap.to_json(), "kv_pool": kv}
    json_path = stem.with_suffix(".json")
    json_path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    from kvdash.report.markdown import md  # names come from a replay file or an engine: escape them

    lines = [f"# kvdash live snapshot ({md(snap.source, 200)})", "", "| GPU | name | used GiB | total GiB | util |",
             "|---:|---|---:|---:|---:|"]
    for g in snap.gpus:
        lines.append(f"| {g.index} | {md(g.name, 120)} | "
                     f"{gib_text(g.used_bytes)} | {gib_text(g.total_bytes)} | "
                     f"{'n/a' if g.utilization_percent is None else g.utilization_percent} |")
    if kv.get("ok"):
        lines += ["", f"## KV pool: {md(kv['model'], 120)}, {md(kv['kv_dtype'])}, block {kv['block_size']}, "
                  f"TP {kv['tp']}", "",
                  "| figure | value |", "|---|---:|",
                  f"| budget per rank ({kv['budget_mode']}) | {kv['budget_bytes']:,} B |",
                  f"| pool blocks | {kv['pool_blocks']:,} |", f"| token slots | {kv['token_slots']:,} |",
                  f"| paged requests of {md(kv['lengths'], 120)} | {kv['paged_requests']:,} |",
                  f"| contiguous requests (reserve {kv['max_reserved']:,}) | {kv['contiguous_requests']:,} |"]
    md_path = stem.with_suffix(".md")
    md_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [json_path, md_path]

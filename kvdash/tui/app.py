"""``kvdash live``: GPUs beside the analytical KV pool, in Textual.

Two pollers, each on its own thread: the GPU source (NVML, demo, replay) on a Textual thread worker,
and the engine's /metrics on one long-lived thread of its own.  Each starts its next poll only after
the previous one is done, so polls of one source never overlap, and a slow or hung engine (bounded
by ``--engine-timeout``) never delays the GPU readings.  The app knows only the
:class:`~kvdash.sources.base.Source` interface.

Two views: the overview (every GPU one line, the KV pool summary; on tall terminals the block map
and processes too) and the details (block map, memory layout, every process, the full KV table),
switched with ``v``.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
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
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.css.query import NoMatches
from textual.screen import ModalScreen
from textual.widgets import ContentSwitcher, Footer, Static
from textual.worker import get_current_worker

from kvdash.core.dtypes import DTYPES
from kvdash.core.model import preset_names
from kvdash.errors import InputError
from kvdash.live.analysis import LiveConfig, analyze, block_map, for_model
from kvdash.render.live_view import (
    block_map_text,
    engine_blocks,
    engine_usage_map,
    gpu_table,
    kv_summary,
    kv_table,
    legend,
    memory_segments,
    process_table,
    stacked_bar,
)
from kvdash.sources.base import Snapshot, Source
from kvdash.sources.engine import WINDOW, EngineReading, from_snapshot, windowed
from kvdash.sources.replay import ReplayLineError
from kvdash.units import gib_text

BLOCK_SIZES = (8, 16, 32, 64, 128)
KV_DTYPES = ("bf16", "fp8", "fp16", "int8", "fp32")
LENGTHS = (128, 256, 512, 825, 1024, 2048, 4096, 8192, 16384, 32768)
HISTORY = 120
# the overview's room is measured this long after a resize or a redraw: once its layout follows them (a check right
# after the next refresh could still see the layout before a width change or the class just removed)
ROOM_CHECK_S = 0.05
# a reading polled on its own is late (and its age shown in the status line) when it is older than this or two
# intervals: a GPU read or an engine scrape that hangs leaves old figures on the screen
LATE_AFTER_S = 3.0


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
    BINDINGS = [("escape,q,question_mark,h", "app.pop_screen", "close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    #help { width: 78; height: auto; border: round $accent; padding: 1 2; background: $panel; }
    """

    def compose(self) -> ComposeResult:
        yield Static(HELP, id="help")


HELP = """[b]kvdash live[/b]: GPU memory beside the analytical KV pool

[b]?[/b] / [b]h[/b]  this help          [b]q[/b] / [b]ctrl+c[/b]  quit
[b]m[/b] / [b]M[/b]  next / previous model (or ctrl+p: the command palette)
[b]d[/b]      next KV dtype           [b]b[/b]  next block size
[b]l[/b] / [b]L[/b]  longer / shorter request length
[b]z[/b]      block map scale: requests / one block per cell / whole pool
[b]v[/b]      overview / details (block map, memory layout, every process;
       arrows and PgUp/PgDn scroll the details)
[b]p[/b]      pause / resume polling
[b]s[/b]      write a snapshot (JSON and Markdown)
[b]c[/b]      calibrate: save the engine's measured reserve (--engine)
       to the calibration file --reserve auto reads
[b]?[/b]      this help          [b]q[/b]  quit

Block map: [green]█[/] tokens  [yellow]█[/] tail of a block  [red]▒[/] reserved, empty  · free
Bars: [green]under 60 %[/]  [yellow]under 85 %[/]  [red]85 % and over[/]
GPU columns: rsvd = memory the driver reserves (NVML v2), free = what
is left, W = power draw.  Capacity ratios are capacity, not throughput.
"blocks left at capacity": blocks after the last whole group of
requests; "+N tokens per request" is them shared out over the requests."""


class LiveApp(App[None]):
    TITLE = "kvdash live"
    CSS = """
    Screen { layout: vertical; }
    #top { height: 1; background: $panel; }
    #views { height: 1fr; }
    #overview { height: 1fr; }
    #ov-left, #ov-right { height: 1fr; padding: 0 1; }
    #ov-left { width: 1fr; }
    #ov-right { width: 1fr; display: none; border-left: tall $panel-lighten-2; }
    #gpus, #kv, #stack, #usage, #map, #procs { height: auto; }
    #procs-box { height: 1fr; }
    LiveApp.wide #ov-right { display: block; }
    LiveApp.wide #kv, LiveApp.wide #stack, LiveApp.wide #map, LiveApp.wide #usage { display: none; }
    LiveApp.short #stack, LiveApp.short #map, LiveApp.short #usage { display: none; }
    LiveApp.cramped #stack, LiveApp.cramped #map, LiveApp.cramped #usage { display: none; }
    #details { height: 1fr; padding: 0 1; }
    #status { height: auto; max-height: 5; }
    """
    COMMANDS = App.COMMANDS | {ModelCommands}
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("ctrl+c", "quit", "quit", show=False, priority=True),  # as in any terminal program
        Binding("v", "toggle_view", "details"),
        Binding("m", "cycle_model(1)", "model"),
        Binding("M", "cycle_model(-1)", "prev model", show=False),
        Binding("d", "cycle_dtype", "dtype"),
        Binding("b", "cycle_block", "block"),
        Binding("l", "length(1)", "length"),
        Binding("L", "length(-1)", "len-", show=False),
        Binding("z", "zoom", "zoom", show=False),
        Binding("p", "pause", "pause"),
        Binding("s", "snapshot", "snap"),
        Binding("c", "calibrate", "calib"),
        Binding("question_mark", "help", "help"),
        Binding("h", "help", "help", show=False),
    ]

    def __init__(self, source: Source, config: LiveConfig, interval: float = 1.0,
                 engine: Callable[[], EngineReading] | None = None, snapshot_dir: Path | None = None,
                 autopoll: bool = True, simulation: Any = None, sim_steps_per_poll: int = 25,
                 engine_url: str | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.simulation = simulation  # a kvdash.simulate.visual.VisualSimulation, drawn instead of the static map
        self.sim_steps_per_poll = sim_steps_per_poll
        self.source = source
        self.config = config
        self.interval = interval
        self.engine_fetch = engine
        self.engine_url = engine_url or ""
        self.snapshot_dir = snapshot_dir or Path(".")
        self.autopoll = autopoll
        self.clock = clock  # for the age of the last good reading (tests pass their own)
        self.paused = False
        self.view = 0  # block map scale: 0 requests, 1 one block per cell, 2 whole pool
        self.details = False
        self.snapshot: Snapshot | None = None
        self.engine: EngineReading | None = None
        self.engine_history: deque[EngineReading] = deque(maxlen=WINDOW)  # for the windowed rates
        self.kv: dict[str, Any] = {}
        self.history: dict[int, deque[float]] = {}
        self.message = ""
        self.polls = 0
        self.engine_polls = 0
        self.snapshots_written = 0
        self.calibrations_saved = 0
        self.gpu_error = ""
        self.gpu_good_at: float | None = None
        self.engine_error = ""
        self.engine_good_at: float | None = None
        self._drawn: dict[str, Any] = {}  # what each panel shows now, to skip redrawing unchanged panels
        self.read_in_flight = False  # a GPU read under way (the source is not closed under it: NVML's shutdown)
        self._sim_lock = threading.Lock()  # the simulation steps in the poll thread and is drawn in the UI's
        self._engine_stop = threading.Event()
        self._engine_thread = threading.Thread(target=self._engine_loop, name="kvdash-engine", daemon=True)

    def compose(self) -> ComposeResult:
        yield Static(id="top")
        with ContentSwitcher(id="views", initial="overview"):
            with Horizontal(id="overview"):
                with Vertical(id="ov-left"):
                    yield Static(id="gpus")
                    yield Static(id="kv")
                    yield Static(id="stack")
                    yield Static(id="usage")
                    yield Static(id="map")
                    with Vertical(id="procs-box"):  # takes the rows left; the list inside only its own
                        yield Static(id="procs")
                with VerticalScroll(id="ov-right"):
                    yield Static(id="kv-wide")
                    yield Static(id="stack-wide")
                    yield Static(id="usage-wide")
                    yield Static(id="map-wide")
            with VerticalScroll(id="details"):
                yield Static(id="d-usage")
                yield Static(id="d-map")
                yield Static(id="d-stack")
                yield Static(id="d-kv")
                yield Static(id="d-procs")
        yield Static(id="status")
        yield Footer(show_command_palette=False, compact=True)

    def on_mount(self) -> None:
        self._ui_loop = asyncio.get_running_loop()
        self._catch_signals()
        self._resized(self.size.width, self.size.height)
        if self.autopoll:
            self.poll()
            if self.engine_fetch is not None:
                self._engine_thread.start()
            # the ages of late readings keep counting while a read hangs (nothing else redraws then)
            self.set_interval(1.0, self._tick)
        else:
            self.apply(*self.read_once())
        self.call_after_refresh(self.refresh_view)  # again once the panels have their real sizes
        self.set_interval(ROOM_CHECK_S, self._room_tick)

    signalled = 0  # the signal (SIGTERM, SIGHUP) that ended the app, 0 if none

    def _catch_signals(self) -> None:
        """SIGTERM and SIGHUP end the app as ``q`` does, through Textual's own exit, so the terminal is
        restored (main screen, cursor shown, mouse reporting and the other modes off) as on Ctrl-C."""
        import signal

        if threading.current_thread() is not threading.main_thread():
            return

        def stop(signum: int) -> None:
            self.signalled = signum
            self.exit(return_code=128 + signum)

        for name in ("SIGTERM", "SIGHUP"):
            signum = getattr(signal, name, None)
            if signum is None:
                continue
            try:
                self._ui_loop.add_signal_handler(signum, stop, signum)
            except (NotImplementedError, RuntimeError, ValueError):  # pragma: no cover - not on this platform
                pass

    def on_resize(self, event: Any) -> None:
        self._resized(event.size.width, event.size.height)
        self.refresh_view()
        self.call_after_refresh(self.refresh_view)  # again at the size the app has taken by then

    def _resized(self, width: int, height: int) -> None:
        self.set_class(width >= 160, "wide")
        self.set_class(height < 36 and width < 160, "short")
        self.remove_class("cramped")  # measured again at this size once laid out
        self._room_due = time.monotonic()

    _room_due: float | None = None  # when a redraw or resize asked for the room to be measured

    def _room_tick(self) -> None:
        """The interval set at mount: measure the room once ROOM_CHECK_S has passed since it was asked for (a
        timer set from refresh_view itself would run outside the app's context where the engine thread's readings
        redraw it: textual's active_app is not set there)."""
        due = self._room_due
        if due is not None and time.monotonic() - due >= ROOM_CHECK_S:
            self._room_due = None
            self._check_room()

    def _check_room(self) -> None:
        """From 36 rows the memory layout and block maps join the overview, but where the KV summary's lines wrap
        (80 columns) they left the process list no row, not even its "... N more" line (80x36 to 80x38, 100x36 and
        100x37: a helper's README audit): then the overview drops them as a shorter terminal does ("cramped") until
        the next resize.  Measured after each resize and each redraw of the overview (a first reading that comes
        late, an engine's lines, a status box that grows take rows too)."""
        if not self.is_running or self.details or self.has_class("wide") or self.has_class("short"):
            return
        if getattr(self, "_drawn_at", None) != (self.size.width, self.size.height):
            return  # the panels were drawn for another size: the redraw at this one checks again
        laid = sum(self.query_one(w).outer_size.height for w in ("#top", "#views", "#status", Footer))
        if laid != self.size.height:  # the layout is still the old size's (a resize just came): measure after the next
            self.call_after_refresh(self._check_room)
            return
        if self.query_one("#procs-box").size.height < 3:  # the header, a process and "... N more"
            self.add_class("cramped")
            self.refresh_view()

    # --- polling -------------------------------------------------------------------------------
    def read_once(self) -> tuple[Snapshot, EngineReading | None]:
        """One GPU reading (and the engine's, synchronously: only without autopoll, in tests)."""
        snap, engine = self._read_source(step=not self.paused)
        return snap, self.engine_fetch() if self.engine_fetch else engine

    @work(thread=True, exclusive=True, group="poll")
    def poll(self) -> None:
        """The GPU source only: never waits for the engine.  The read itself runs on a daemon thread of its own
        while this worker waits for it, so that a read that hangs (a wedged NVML call) does not hold the process
        once the app ends: asyncio.run joins the workers' threads at exit (q then took 20 s), and textual cancels
        this one first, which stops waiting."""
        if self.paused:
            self.call_from_thread(self.rearm)
            return
        worker = get_current_worker()
        done, result = threading.Event(), []
        self.read_in_flight = True

        def read() -> None:
            try:
                result.append(self._read_source())
            except BaseException as exc:  # noqa: BLE001 - handed to the worker below
                result.append(exc)
            finally:
                self.read_in_flight = False
                done.set()

        threading.Thread(target=read, name="kvdash-gpu-read", daemon=True).start()
        while not done.wait(0.1):
            if worker.is_cancelled:  # the app is ending: the hung read is left behind (a daemon thread)
                return
        try:
            if isinstance(result[0], BaseException):
                raise result[0]
            snap, engine = result[0]
        except ReplayLineError as exc:
            self.call_from_thread(self.skip_frame, str(exc))
        except Exception as exc:  # noqa: BLE001 - a failing source must not end the dashboard
            self.call_from_thread(self.gpu_failed, f"{type(exc).__name__}: {exc}" if not str(exc) else str(exc))
        else:
            self.call_from_thread(self.apply, snap, engine)
        self.call_from_thread(self.rearm)

    def _read_source(self, step: bool = True) -> tuple[Snapshot, EngineReading | None]:
        """One GPU reading (after the simulation's steps, where ``step``) and the engine figures it carries (a demo's
        or a replay's; None when the engine is scraped on its own thread).  The poll thread and read_once's both."""
        if self.simulation is not None and step:
            with self._sim_lock:  # the UI thread draws its cells (a dict changed size during iteration)
                for _ in range(self.sim_steps_per_poll):
                    self.simulation.step()
        snap = self.source.read()
        return snap, None if self.engine_fetch else from_snapshot(snap.extra)

    def rearm(self) -> None:
        if self.is_running:  # a poll that came back while the app shut down arms nothing on it
            self.set_timer(self.interval, self.poll)

    def _engine_loop(self) -> None:
        """The engine's poller: one thread for the app's life, one scrape at a time, each bounded by
        its own total deadline (--engine-timeout); the reading is handed to the UI loop without waiting
        for it, and the next scrape starts an interval after."""
        loop = self._ui_loop
        while not self._engine_stop.is_set():
            if not self.paused and self.engine_fetch is not None:
                try:
                    reading = self.engine_fetch()
                except Exception as exc:  # noqa: BLE001 - fetch never raises; belt and braces
                    reading = EngineReading(url=self.engine_url, error=f"{type(exc).__name__}: {exc}")
                if self._engine_stop.is_set():
                    return
                try:
                    loop.call_soon_threadsafe(self.apply_engine, reading)
                except RuntimeError:  # the app's loop has closed
                    return
            self._engine_stop.wait(self.interval)

    def on_unmount(self) -> None:
        self._engine_stop.set()
        import signal

        for name in ("SIGTERM", "SIGHUP"):
            signum = getattr(signal, name, None)
            if signum is not None and getattr(self, "_ui_loop", None) is not None:
                try:
                    self._ui_loop.remove_signal_handler(signum)
                except (NotImplementedError, RuntimeError, ValueError):  # pragma: no cover
                    pass

    def skip_frame(self, text: str) -> None:
        """A bad replay line: a notification, the frame skipped, the replay goes on."""
        self.notify(text, title="replay: line skipped", severity="warning", timeout=6)
        self.note(f"skipped {text}")

    def gpu_failed(self, text: str) -> None:
        self.gpu_error = text
        self.recompute()  # the engine's readings that came since are drawn too

    def note(self, text: str) -> None:
        self.message = text
        self.refresh_view()

    def apply(self, snap: Snapshot, engine: EngineReading | None) -> None:
        self.polls += 1
        repeated = self.snapshot is not None and snap.time == self.snapshot.time  # a replay's end, shown again
        self.snapshot = snap
        self.gpu_error = ""
        self.gpu_good_at = self.clock()
        if engine is not None or self.engine_fetch is None:
            self._engine(engine)
        for g in snap.gpus:
            if g.used_bytes is not None and not repeated:  # the memory history holds readings, not repeats
                self.history.setdefault(g.index, deque(maxlen=HISTORY)).append(float(g.used_bytes))
        self.recompute()

    def _engine(self, reading: EngineReading | None) -> None:
        self.engine = reading
        if reading is None:
            return
        if reading.error:
            self.engine_error = reading.error
        else:
            self.engine_error = ""
            self.engine_good_at = self.clock()
            self.engine_history.append(reading)

    def apply_engine(self, reading: EngineReading) -> None:
        """Keep the engine's reading; redraw now only when its state changed (an error came or went)
        or no GPU poll is coming (paused, before the first, or late: :meth:`late`): otherwise the next GPU
        poll draws it, so one screen update per interval serves both sources."""
        self.engine_polls += 1
        was = (self.engine_error, bool(self.engine and self.engine.invalid))
        self._engine(reading)
        if was != (self.engine_error, bool(reading.invalid)) or self.paused or self.snapshot is None \
                or self.late(self.gpu_good_at):  # a GPU read that hangs must not freeze the engine's figures
            self.recompute()

    def recompute(self) -> None:
        if self.snapshot is None:
            self.refresh_view()
            return
        try:
            self.kv = analyze(self.snapshot, self.config, self.engine)
            if isinstance(self.kv.get("engine"), dict):
                self.kv["engine"]["window"] = windowed(list(self.engine_history))
        except InputError as exc:
            self.kv = {"ok": False, "notes": [str(exc)]}
        self.refresh_view()

    # --- drawing -------------------------------------------------------------------------------
    def _update(self, widget_id: str, key: Any, render: Callable[[], Any], shape: Any = None) -> None:
        """Redraw a panel only when what it shows has changed, and lay the screen out again only when
        its shape (``shape``: what decides its height) has changed."""
        if self._drawn.get(widget_id) == key:
            return
        try:
            widget = self.query_one(f"#{widget_id}", Static)
        except NoMatches:  # the panels are gone: the app is closing and a poll's result came back after
            return
        self._drawn[widget_id] = key
        layout = shape is None or self._drawn.get(f"{widget_id}:shape") != shape
        self._drawn[f"{widget_id}:shape"] = shape
        widget.update(render(), layout=layout)

    def refresh_view(self) -> None:
        # App.is_mounted is a method (always truthy); is_running turns False as the app starts to shut
        # down, before its widgets go, so a poll handed over by a worker thread then draws nothing
        if not self.is_running:
            return
        self._status()
        snap = self.snapshot
        if snap is None:
            return
        wide = self.has_class("wide")
        short = self.has_class("short") or self.has_class("cramped")
        sizes = (self.size.width, self.size.height, wide, short, self.details)
        left_w = max(20, (self.size.width // 2 if wide else self.size.width) - 2)
        right_w = max(20, self.size.width - self.size.width // 2 - 4) if wide else left_w
        spark = {i: tuple(h)[-16:] for i, h in self.history.items()}
        kv = self.kv
        engine = kv.get("engine", {})
        kv_key = repr(kv)
        kv_shape = (kv.get("ok"), tuple(kv.get("notes", ())), engine.get("status"), engine.get("explain"),
                    kv.get("model"), tuple(kv.get("lengths", ())), sizes)
        g = next((x for x in snap.gpus if x.index == kv.get("tight_gpu")), None) if kv.get("ok") else None
        if self.details:
            self._draw_map("d-map", self.size.width - 4, rows=8, usage="d-usage")
            self._draw_stack("d-stack", g, self.size.width - 4)
            self._update("d-kv", (kv_key, sizes), lambda: kv_table(kv), shape=kv_shape)
            procs = tuple((x.index, x.processes, x.processes_note) for x in snap.gpus)
            self._update("d-procs", (procs, sizes), lambda: process_table(snap, limit=10_000,
                                                                          width=self.size.width - 4))
            return
        self._update("gpus", (snap.gpus, spark, sizes), lambda: gpu_table(snap, self.history, width=left_w),
                     shape=(len(snap.gpus), sizes))
        if wide:
            self._update("kv", None, lambda: "")
            self._update("stack", None, lambda: "")
            self._update("map", None, lambda: "")
            self._update("usage", None, lambda: "")
            self._update("kv-wide", (kv_key, sizes), lambda: kv_table(kv), shape=kv_shape)
            self._draw_stack("stack-wide", g, right_w)
            self._draw_map("map-wide", right_w, rows=max(3, min(10, (self.size.height - 40) // 2)), usage="usage-wide")
        else:
            self._update("kv", (kv_key, sizes), lambda: kv_summary(kv), shape=kv_shape)
            if not short:
                self._draw_stack("stack", g, left_w)
                self._draw_map("map", left_w, rows=3, usage="usage")
        procs_rows = max(2, self.query_one("#procs-box").size.height)
        procs = tuple((x.index, x.processes, x.processes_note) for x in snap.gpus)
        self._update("procs", (procs, procs_rows, sizes), lambda: process_table(snap, limit=procs_rows - 1,
                                                                                width=left_w),
                     shape=(procs_rows, min(procs_rows, 1 + sum(max(1, len(x.processes)) for x in snap.gpus)),
                            sizes))
        self._drawn_at = (self.size.width, self.size.height)
        if not short and not wide:  # whatever grew since the last resize (a first reading, an engine, the status)
            self._room_due = time.monotonic()

    def _draw_stack(self, widget: str, g: Any, width: int) -> None:
        kv = self.kv
        if g and g.total_bytes:
            seg = memory_segments(g, kv)
            key = legend(seg, g.total_bytes)
            self._update(widget, (tuple(seg), width), lambda: Group(
                Text(f"GPU {g.index} memory, engine layout (analytical):", style="bold"),
                stacked_bar(seg, g.total_bytes or 0, width), key),
                shape=(width, [len(line) // max(1, width) for line in key.plain.splitlines()]))
        else:
            self._update(widget, None, lambda: "")

    def _draw_map(self, widget: str, width: int, rows: int, usage: str) -> None:
        kv = self.kv
        eng = kv.get("engine") or {}
        self._update(usage, (engine_blocks(eng), kv.get("pool_blocks"), kv.get("block_size"), width),
                     lambda: (engine_usage_map(kv, width) if kv.get("ok") else None) or "",
                     shape=(engine_blocks(eng) is not None, width))
        if self.simulation is not None:
            sim = self.simulation
            with self._sim_lock:  # not while the poll thread steps it
                cells, status = list(sim.cells()), sim.status()
            self._update(widget, (tuple(cells), width), lambda: Group(
                Text(f"Block map of a simulation ({status}; its own {sim.blocks}-block pool of {sim.B} "
                     f"slots per block, not this GPU's; b and z do not change it):", style="bold"),
                block_map_text(cells, width),
                Text.from_markup("[green]█[/] tokens  [yellow]█[/] block tail / never-used reservation  "
                                 "[red]▒[/] reserved for coming tokens  [magenta]x[/] free but no hole fits  · free"),
            ), shape=(len(cells), width))
            return
        if not kv.get("ok"):
            self._update(widget, None, lambda: "")
            return
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
        if self._drawn.get(widget) == key:
            return
        self._drawn[widget] = key
        paged = block_map(pool, bs, lengths, kv["max_reserved"], cells, False, per_cell)
        contiguous = block_map(pool, bs, lengths, kv["max_reserved"], cells, True, per_cell)
        parts: list[Any] = [
            Text(f"Analytical block map ({scope}; z: scale); paged, {kv['paged_requests']:,} requests fit:",
                 style="bold"),
            block_map_text(paged, width),
            Text(f"Same memory, contiguous reservation of {kv['max_reserved']:,} "
                 f"({kv['contiguous_requests']:,} requests):", style="bold"),
            block_map_text(contiguous, width),
            Text.from_markup("[green]█[/] tokens  [yellow]█[/] block tail  [red]▒[/] reserved, empty  · free"),
        ]
        self.query_one(f"#{widget}", Static).update(Group(*parts))

    def _age(self, since: float | None) -> str:
        if since is None:
            return "no good reading yet"
        return f"last good reading {self.clock() - since:.0f} s ago"

    def late(self, since: float | None) -> bool:
        """Whether a source polled on its own (autopoll, not paused) has had no good reading for longer than
        :data:`LATE_AFTER_S` or two intervals: its figures on screen are old, which the status line says."""
        return (self.autopoll and not self.paused and since is not None
                and self.clock() - since > max(LATE_AFTER_S, 2 * self.interval))

    def _tick(self) -> None:
        """Once a second while polling: the status line again, so the age of a late reading keeps counting."""
        if self.is_running:
            self._status()

    def _status(self) -> None:
        snap = self.snapshot
        state = "paused" if self.paused else f"every {self.interval:g} s"
        # a replay at its end says so ("replay r.jsonl (end, 15 snapshots)"); before it, the source's own name (a
        # frame's recorded source, e.g. nvml, would pass a replay off as live readings)
        ended = snap is not None and getattr(self.source, "ended", False)
        top = Text(f" kvdash live | {snap.source if ended and snap is not None else self.source.name} | {state}",
                   style="bold")
        if self.engine_fetch is not None:
            top.append(f" | engine {self.engine_url}")
        top.append("  (v: details)" if not self.details else "  (v: overview; arrows scroll)", style="dim")
        if self._drawn.get("top") != top.plain:
            self._drawn["top"] = top.plain
            self.query_one("#top", Static).update(top, layout=False)
        out = Text()
        if self.gpu_error:
            out.append(f" GPU ({self.source.name}): {self.gpu_error}; {self._age(self.gpu_good_at)}\n",
                       style="bold red")
        elif self.late(self.gpu_good_at):  # a read that hangs: the figures above are this old
            out.append(f" GPU ({self.source.name}): no new reading; {self._age(self.gpu_good_at)}\n", style="yellow")
        if snap is not None and snap.error:
            out.append(f" GPU ({self.source.name}): {snap.error}\n", style="yellow")
        if getattr(self.source, "ended", False) and getattr(self.source, "last", None) is not None:  # past its end
            out.append(f" {self.source.name}: at its end, its last snapshot shown (lines appended are read as they "
                       "come)\n", style="yellow")
        url = self.engine.url if self.engine else self.engine_url
        if self.engine_error:
            out.append(f" engine {url}: {self.engine_error}; {self._age(self.engine_good_at)}\n", style="bold red")
        elif self.engine_fetch is not None and self.late(self.engine_good_at):  # a scrape under way, not answered
            out.append(f" engine {url}: no answer yet; {self._age(self.engine_good_at)}\n", style="yellow")
        bad = self.engine.invalid if self.engine else {}
        if bad and not self.engine_error:
            out.append(" engine figures n/a: " + "; ".join(f"{k} {v}" for k, v in bad.items()) + "\n",
                       style="yellow")
        if self.message:
            out.append(f" {self.message}", style="dim")
        out.rstrip()
        if not out.plain.strip():
            out = Text(" ok", style="dim")
        if self._drawn.get("status") != (out.plain, tuple(out.spans)):  # changes with states, not every poll
            self.query_one("#status", Static).update(out)
            self._drawn["status"] = (out.plain, tuple(out.spans))

    # --- actions -------------------------------------------------------------------------------
    def set_model(self, name: str) -> None:
        try:
            cfg = for_model(self.config, name)
        except InputError as exc:
            self.note(f"model {name}: {exc}")
            return
        self._configure(cfg, f"model {name}")

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
            try:
                replace(self.config, model=name, arch=None).validate()
            except InputError:
                continue
            self.set_model(name)  # with its own --reserve auto; a calibration file gone bad is said, not skipped
            return

    def action_cycle_dtype(self) -> None:
        cur = self.config.kv_dtype
        nxt = KV_DTYPES[(KV_DTYPES.index(cur) + 1) % len(KV_DTYPES)] if cur in KV_DTYPES else "bf16"
        assert nxt in DTYPES
        self._configure(replace(self.config, kv_dtype=nxt), f"kv dtype {nxt}")

    def action_cycle_block(self) -> None:
        if self.simulation is not None:
            self.note("b changes kvdash's pool; the simulation keeps its own block size")
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

    def action_toggle_view(self) -> None:
        self.details = not self.details
        self.query_one("#views", ContentSwitcher).current = "details" if self.details else "overview"
        if self.details:
            self.query_one("#details").focus()  # arrows, PgUp/PgDn scroll it straight away
        self._drawn.clear()
        self.refresh_view()
        self.call_after_refresh(self.refresh_view)

    def action_zoom(self) -> None:
        if self.simulation is not None:
            self.note("z: the simulation's map is always one cell per block")
            return
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
        try:
            paths = write_snapshot(self.snapshot_dir, self.snapshot, self.kv, self.settings(), self.snapshots_written)
        except OSError as exc:
            self.not_written(exc)
            return
        self.note("wrote " + ", ".join(p.name for p in paths))

    def not_written(self, exc: OSError) -> None:
        """A snapshot the folder would not take (gone, full, read-only): a notification and a note, not a crash."""
        self.notify(f"{self.snapshot_dir}: {exc.strerror or exc}", title="snapshot not written", severity="error",
                    timeout=8)
        self.note(f"snapshot not written: {exc.strerror or exc}")

    def action_calibrate(self) -> None:
        """Append what ``kvdash calibrate`` would record for the attached engine to the calibration
        file ($KVDASH_CALIBRATION, else the XDG path); say why not when it cannot be measured."""
        from kvdash.calibration import append_entry, calibration_path, dated, entry_text

        self.recompute()  # with the engine's latest reading, which may have come after the last GPU poll
        measured = self.kv.get("measured_reserve")
        if not measured:
            if self.engine_fetch is None and self.engine is None:
                why = "no engine attached: start kvdash live with --engine URL (a vLLM /metrics)"
            elif self.engine is None:
                why = "no engine reading yet"
            elif self.engine.error:
                why = f"the engine {self.engine.url} failed ({self.engine.error})"
            else:
                why = "; ".join(self.kv.get("notes", [])) or "no KV pool analysed"
        else:
            why = measured.get("why", "") or measured.get("simulated", "")
        if "entry" not in (measured or {}) or (measured or {}).get("simulated"):
            self.notify(why, title="calibration not saved", severity="warning", timeout=8)
            self.note(f"calibration not saved: {why}")
            return
        entry = dated(measured["entry"])
        path = calibration_path()
        try:
            append_entry(path, entry)
        except OSError as exc:
            self.notify(f"{path}: {exc.strerror or exc}", title="calibration not saved", severity="error", timeout=8)
            self.note(f"calibration not saved: {path}: {exc.strerror or exc}")
            return
        self.calibrations_saved += 1
        self.notify(f"{entry['model']}, TP {entry['tp']}, {entry['gpu']}: reserve {entry['reserve_bytes']:,} B per "
                    f"rank; --reserve auto uses it", title="calibration saved", timeout=8)
        self.note(f"calibration saved to {path}: {entry_text(entry)}")

    def settings(self) -> dict[str, Any]:
        c = self.config
        return {"model": c.model if c.arch is None else c.arch.name, "kv_dtype": c.kv_dtype,
                "block_size": c.block_size, "tp": c.tp, "gpu_util": c.gpu_util, "reserve_bytes": c.reserve,
                "weights_bytes": c.weights, "budget_mode": c.budget_mode, "budget_bytes": c.budget,
                "lengths": list(c.lengths), "max_reserved": c.max_reserved, "interval_s": self.interval,
                "engine": self.engine_url or None, "source": self.source.name}


def _exclusive_write(path: Path, text: str) -> None:
    """Write ``text`` to a new file atomically: a temporary file linked to ``path`` only if no file
    has that name yet (FileExistsError otherwise)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_snapshot(folder: Path, snap: Snapshot, kv: dict[str, Any], settings: dict[str, Any] | None = None,
                   count: int = 1) -> list[Path]:
    """The live readings and the calculator's figures, as JSON and as Markdown, under a name no
    other snapshot has (``kvdash-snapshot-<UTC time of the reading>-<n>``, n counting up past any
    file already there)."""
    settings = settings or {}
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(snap.time))
    data = {"snapshot": snap.to_json(), "kv_pool": kv, "settings": settings}
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(snap.time))
    from kvdash.markdown import md  # names come from a replay file or an engine: escape them

    lines = [f"# kvdash live snapshot, {when}", "",
             f"Source: {md(snap.source, 200)}; driver {md(snap.driver or 'n/a', 80)}.", "",
             "## Settings", "", "| setting | value |", "|---|---|"]
    lines += [f"| {md(k)} | {md(v if v is not None else 'n/a', 200)} |" for k, v in settings.items()]
    lines += ["", "## GPUs", "", "| GPU | name | used GiB | total GiB | util |", "|---:|---|---:|---:|---:|"]
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
    for note in kv.get("notes", []):
        lines += ["", f"Note: {md(note)}"]
    eng = kv.get("engine")
    if eng:
        r = eng["reading"]
        lines += ["", f"## Engine: {md(eng['status'], 200)}", ""]
        if not r.get("error"):
            def na(key: str) -> str:
                v = r.get(key)
                why = r.get("invalid", {}).get(key)
                return (f"n/a ({why})" if why else "n/a") if v is None else f"{v:,}" if isinstance(v, int) else str(v)

            lines += ["| figure | value |", "|---|---:|"]
            lines += [f"| {k} | {md(na(k), 120)} |" for k in ("kv_usage", "running", "waiting", "preemptions",
                                                     "prefix_hit_rate", "num_gpu_blocks", "block_size",
                                                     "total_tokens", "used_tokens")]
            if eng.get("served_model"):
                lines.append(f"| served model | {md(eng['served_model'], 120)} |")
            if "engine_tokens" in eng:
                lines.append(f"| engine pool vs kvdash (tokens) | {eng['engine_tokens']:,} vs {eng['kvdash_tokens']:,} "
                             f"({eng['difference_tokens']:+,}) |")
            measured = (kv.get("measured_reserve") or {}).get("entry")
            if measured:
                lines.append(f"| measured reserve per rank (kvdash calibrate) | {measured['reserve_bytes']:,} B |")
            for key in ("model_note", "explain"):
                if eng.get(key):
                    lines += ["", md(eng[key])]
    text = "\n".join(lines) + "\n"
    js = json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"
    js_path = write_new(folder, f"kvdash-snapshot-{stamp}", count, ".json", js)
    md_path = js_path.with_suffix(".md")
    md_path.unlink(missing_ok=True)  # an orphan of an earlier failed write: the JSON name is ours now
    _exclusive_write(md_path, text)
    return [js_path, md_path]


def write_new(folder: Path, stem: str, n: int, suffix: str, text: str) -> Path:
    """``text`` written whole to ``folder/<stem>-<n><suffix>``, n counting up past any file already there (live's and
    the fleet view's snapshots)."""
    while True:
        path = folder / f"{stem}-{n}{suffix}"
        try:
            _exclusive_write(path, text)
            return path
        except FileExistsError:
            n += 1

"""The fleet view in the live dashboard: :class:`LiveApp` with a :class:`~kvdash.fleet.source.FleetSource`.

Polling, pausing, the model/dtype/block/length keys and the help screen are :class:`LiveApp`'s; this
class only lays out the fleet: totals on top, then a tree with one line per host (enter or space
expands it into its GPUs, engines and down targets), and a panel message when Prometheus cannot
be read.  At 80x24 the tree shows 16 host lines; arrow keys, page up/down and home/end move.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Footer, Header, Static, Tree

from kvdash.errors import InputError
from kvdash.fleet.build import build_fleet
from kvdash.fleet.source import FleetSource
from kvdash.render.fleet_view import (
    down_line,
    engine_details,
    engine_line,
    gpu_line,
    host_line,
    problem_lines,
    totals_text,
)
from kvdash.sources.base import Snapshot
from kvdash.sources.engine import WINDOW, EngineReading, windowed
from kvdash.tui.app import HelpScreen, LiveApp, write_new

FLEET_HELP = """[b]kvdash live --prometheus[/b]: hosts, GPUs and engines from Prometheus

[b]up[/b] / [b]down[/b], [b]pgup[/b] / [b]pgdn[/b], [b]home[/b] / [b]end[/b]  move
[b]enter[/b] / [b]space[/b]  open or close a host (its GPUs, engines, down targets)
[b]z[/b]      open every host / close them all
[b]m[/b] / [b]M[/b]  next / previous model (kvdash's pool for every engine)
[b]d[/b]      next KV dtype           [b]b[/b]  next block size
[b]l[/b] / [b]L[/b]  longer / shorter request length (requests that fit)
[b]v[/b]      hosts / every engine's details (state, reading age, model)
[b]p[/b]      pause / resume polling  [b]s[/b]  write the fleet as JSON
[b]?[/b] / [b]h[/b]  this help          [b]q[/b] / [b]ctrl+c[/b]  quit

Engine lines: one per pool (a vLLM engine, an SGLang DP rank): KV usage,
running (r) and waiting (w) requests, the pool in tokens, kvdash's pool
for the host's GPUs and the difference; DOWN / STALE engines are out of
the totals (the line ends at the pool), another model's is "not
comparable", and one read through kvdash exporter is named by its own
address ("exporter :8000")."""


class FleetHelp(HelpScreen):
    def compose(self) -> ComposeResult:
        yield Static(FLEET_HELP, id="help")


class FleetApp(LiveApp):
    TITLE = "kvdash live (fleet)"
    CSS = """
    Screen { layout: vertical; }
    #totals { height: auto; padding: 0 1; }
    #problem { height: auto; padding: 0 1; color: $error; display: none; }
    #problem.shown { display: block; }
    #fleet { height: 1fr; }
    #fleet-details { height: 1fr; display: none; padding: 0 1; }
    FleetApp.details #fleet-details { display: block; }
    FleetApp.details #fleet { display: none; }
    #status { height: 1; }
    """

    fleet: dict[str, Any] | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="totals")
        yield Static(id="problem")
        tree: Tree[str] = Tree("fleet", id="fleet")
        tree.show_root = False
        tree.guide_depth = 2
        yield tree
        with VerticalScroll(id="fleet-details"):
            yield Static(id="fleet-details-text")
        yield Static(id="status")
        yield Footer(show_command_palette=False, compact=True)  # as live's: every key's label in 80 columns

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """live's ``c`` (calibrate the attached engine's reserve) has no engine to read in the fleet view: hidden
        from the footer and not run (it said "no engine attached: start kvdash live with --engine URL")."""
        return action != "calibrate"

    def _resized(self, width: int, height: int) -> None:
        return None  # one layout at every size: a line per host

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#fleet", Tree).focus()

    def recompute(self, remember: bool = False) -> None:
        snap = self.snapshot
        if snap is None:
            return
        results = snap.extra.get("results")
        if snap.extra.get("config") == self.config:  # built by the poll for this configuration
            self.fleet = snap.extra["fleet"]
        elif results is not None:  # the model, dtype, block size or length changed since
            try:
                self.fleet = build_fleet(results, self.config)
            except InputError as exc:
                self.message = str(exc)
        else:
            self.fleet = None
        if remember:
            self._remember()
        else:
            self._attach_windows()
        self.refresh_view()

    def refresh_view(self) -> None:
        snap = self.snapshot
        if snap is None or not self.is_running:  # see LiveApp.refresh_view
            return
        self._problem(snap)
        fleet = self.fleet
        if fleet is not None:
            self.query_one("#totals", Static).update(totals_text(fleet))
            self._fill_tree(fleet)
            self._fill_details()
        self._status(snap)

    def _problem(self, snap: Snapshot) -> None:
        """The problem panel: the poll's error, with the age of the fleet kept on screen, or the fleet's odd
        hosts."""
        problem = self.query_one("#problem", Static)
        kept = f"showing the {self._age(self.gpu_good_at)}; " if self.fleet is not None else "no reading yet; "
        odd = problem_lines(self.fleet, 2) if self.fleet is not None and not snap.error else []
        problem.set_class(bool(snap.error or odd), "shown")
        problem.update(Text(f"{snap.error}\n{kept}polling goes on") if snap.error else Text("\n".join(odd)))

    def _tick(self) -> None:
        """Once a second: the kept fleet's age counts on (LiveApp._tick)."""
        if self.is_running and self.snapshot is not None and self.snapshot.error:
            self._problem(self.snapshot)

    def _remember(self) -> None:
        """The fleet's engine counters of this poll, per engine (instance and engine label), the last
        :data:`WINDOW` kept: the windowed rates of ``kvdash.sources.engine.windowed``, as live shows them."""
        history: dict[tuple[str, str], deque[EngineReading]] = getattr(self, "engine_windows", {})
        self.engine_windows = history
        if self.fleet is None:
            return
        for e in self.fleet["engines"]:
            key = (e["instance"], e["engine"])
            state = e.get("state", "up")
            history.setdefault(key, deque(maxlen=WINDOW)).append(EngineReading(
                url=e["instance"], error="" if state == "up" else state, prefix_queries=e.get("prefix_queries"),
                prefix_hits=e.get("prefix_hits"), preemptions=e.get("preemptions")))
        self._attach_windows()

    def _attach_windows(self) -> None:
        history = getattr(self, "engine_windows", {})
        for e in (self.fleet or {}).get("engines", []):
            past = history.get((e["instance"], e["engine"]))
            if past:
                e["window"] = windowed(list(past))

    def apply(self, snap: Snapshot, engine: Any) -> None:
        self.polls += 1
        if snap.error and self.snapshot is not None:
            # keep the last good fleet on screen; the problem panel says what went wrong
            self.snapshot = Snapshot(time=snap.time, source=snap.source, gpus=(), error=snap.error,
                                     extra=self.snapshot.extra)
            self.refresh_view()
            return
        self.snapshot = snap
        self.gpu_good_at = self.clock()  # the fleet's last good poll (its age shown while polls fail)
        self.recompute(remember=True)

    def read_once(self) -> tuple[Snapshot, None]:
        read = self.source.read
        return read(self.config) if isinstance(self.source, FleetSource) else read(), None

    def _fill_tree(self, fleet: dict[str, Any]) -> None:
        """Relabel the tree in place when the fleet's shape is unchanged (only open hosts' children: a
        closed host's lines are drawn when it opens); rebuild it, keeping open hosts open, otherwise."""
        tree = self.query_one("#fleet", Tree)
        hosts = fleet["hosts"]
        shape = [(h["host"], len(h["gpus"]), len(h["engines"]), len(h["down_targets"])) for h in hosts]
        nodes = list(tree.root.children)
        if [n.data for n in nodes] == [s[0] for s in shape] and \
                all(len(n.children) == g + e + d for n, (_, g, e, d) in zip(nodes, shape, strict=True)):
            for node, h in zip(nodes, hosts, strict=True):
                self._relabel(node, host_line(h))
                if node.is_expanded:
                    for child, text in zip(node.children, self._children(h), strict=True):
                        self._relabel(child, text)
            return
        expanded = {n.data for n in nodes if n.is_expanded}
        cursor = tree.cursor_line
        tree.clear()
        for h in hosts:
            node = tree.root.add(host_line(h), data=h["host"], expand=h["host"] in expanded,
                                 allow_expand=bool(h["gpus"] or h["engines"] or h["down_targets"]))
            for text in self._children(h):
                node.add_leaf(text)
        if hosts:
            tree.move_cursor_to_line(min(max(cursor, 0), len(hosts) - 1))

    @staticmethod
    def _relabel(node: Any, text: Text) -> None:
        if node.label.plain != text.plain:
            node.set_label(text)

    def on_tree_node_expanded(self, event: Tree.NodeExpanded[str]) -> None:
        if self.fleet is None:
            return
        h = next((x for x in self.fleet["hosts"] if x["host"] == event.node.data), None)
        if h is not None and len(event.node.children) == len(self._children(h)):
            for child, text in zip(event.node.children, self._children(h), strict=True):
                self._relabel(child, text)

    @staticmethod
    def _children(h: dict[str, Any]) -> list[Text]:
        return [gpu_line(g) for g in h["gpus"]] + [engine_line(e) for e in h["engines"]] + \
            [down_line(t) for t in h["down_targets"]]

    def _status(self, snap: Snapshot) -> None:
        state = "paused" if self.paused else f"every {self.interval:g} s"
        took = f"poll {self.fleet['poll_seconds']:.2f} s | " if self.fleet and \
            "poll_seconds" in self.fleet else ""
        self.query_one("#status", Static).update(
            Text(f" {self.message + ' | ' if self.message else ''}{state} | {took}length "
                 f"{', '.join(map(str, self.config.lengths))} | enter: open a host | {snap.source}", style="dim",
                 no_wrap=True, overflow="ellipsis"))

    def action_zoom(self) -> None:
        """z: open every host, or close them all when any is open."""
        tree = self.query_one("#fleet", Tree)
        hosts = list(tree.root.children)
        close = any(n.is_expanded for n in hosts)
        for node in hosts:
            if close:
                node.collapse()
            else:
                node.expand()
        if not close and self.fleet is not None:
            for node, h in zip(hosts, self.fleet["hosts"], strict=False):
                for child, text in zip(node.children, self._children(h), strict=False):
                    self._relabel(child, text)
        self.note("all hosts closed" if close else "all hosts open")

    def action_help(self) -> None:
        self.push_screen(FleetHelp())

    def action_toggle_view(self) -> None:
        """v: the hosts tree, or every engine's details (state, age, model, pool per rank)."""
        self.details = not self.details
        self.set_class(self.details, "details")
        self._fill_details()
        self.note("engine details" if self.details else "hosts")

    def _fill_details(self) -> None:
        if self.details:
            self.query_one("#fleet-details-text", Static).update(engine_details(self.fleet))

    def action_snapshot(self) -> None:
        import json

        if self.fleet is None:
            return
        self.snapshots_written += 1
        # named after the fleet's own poll (a failed poll keeps it on screen under a later time)
        stamp = int(self.fleet.get("time") or (self.snapshot.time if self.snapshot else 0))
        text = json.dumps(self.fleet, indent=2, sort_keys=True) + "\n"
        try:  # whole or not at all, never over another file
            path = write_new(self.snapshot_dir, f"kvdash-fleet-{stamp}", self.snapshots_written, ".json", text)
        except OSError as exc:  # a folder gone, a full disk: said, not a crash
            self.not_written(exc)
            return
        self.note(f"wrote {path.name}")

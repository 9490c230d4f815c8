"""The fleet dashboard (``kvdash live --prometheus``) at 80x24: 16 hosts x 8 GPUs, one line per host,
expandable; a Prometheus that cannot be read is a panel message.  No server needed: the source
serves already-parsed series (tests/promfixture.py's synthetic fleet)."""

from __future__ import annotations

from dataclasses import replace

from kvdash.fleet.build import build_fleet
from kvdash.live.analysis import LiveConfig
from kvdash.sources.base import Snapshot
from kvdash.tui.fleet import FleetApp
from tests.promfixture import fleet_host, fleet_results


class StaticFleet:
    """A fleet source whose series never change; ``fail`` makes the next reads answer an error."""

    name = "prometheus (test)"

    def __init__(self, hosts: int, gpus: int, down: int = 0) -> None:
        self.results = fleet_results(hosts, gpus, down)
        self.fail = ""
        self.reads = 0

    def read(self, config: LiveConfig | None = None) -> Snapshot:
        self.reads += 1
        if self.fail:
            return Snapshot(time=1_767_225_600.0 + self.reads, source=self.name, gpus=(), error=self.fail,
                            extra={"fleet": None})
        cfg = config or LiveConfig()
        return Snapshot(time=1_767_225_600.0 + self.reads, source=self.name, gpus=(),
                        extra={"fleet": build_fleet(self.results, cfg), "results": self.results, "config": cfg})

    def close(self) -> None:
        return None



async def test_sixteen_hosts_one_line_each_at_80x24():
    """All 16 host lines are on screen at 80x24, with the down host marked."""
    app = FleetApp(StaticFleet(16, 8, down=1), LiveConfig(), autopoll=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        tree = app.query_one("#fleet")
        assert len(tree.root.children) == 16
        assert tree.size.height >= 16, tree.size
        text = app.export_screenshot()
        for h in range(16):
            assert fleet_host(h) in text
        assert "down" in text


async def test_enter_expands_a_host_into_gpus_and_engines():
    app = FleetApp(StaticFleet(16, 8), LiveConfig(), autopoll=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        tree = app.query_one("#fleet")
        await pilot.press("down", "down", "enter")
        await pilot.pause()
        node = tree.root.children[2]
        assert node.is_expanded and node.data == fleet_host(2)
        assert len(node.children) == 8 + 1  # 8 GPUs and one engine
        assert [c.label.plain.split()[:2] for c in node.children[:2]] == [["GPU", "0"], ["GPU", "1"]]
        assert node.children[8].label.plain.startswith("vllm")
        await pilot.press("end")
        assert tree.cursor_line == len(tree.root.children) + 9 - 1  # 16 hosts + 9 open lines
        await pilot.press("home", "down", "down", "enter")  # closes it again
        await pilot.pause()
        assert not node.is_expanded


async def test_fleet_has_no_calibrate_key():
    """live's c calibrates the one attached engine's reserve; the fleet view has none: c is not in its footer and
    does nothing (it said "no engine attached: start kvdash live with --engine URL")."""
    app = FleetApp(StaticFleet(4, 8), LiveConfig(), autopoll=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert not app.check_action("calibrate", ()) and app.check_action("snapshot", ())
        await pilot.press("c")
        await pilot.pause()
        assert not app._notifications


async def test_expanded_hosts_stay_open_across_polls_and_config_changes():
    """A poll relabels in place; the l key (longer requests) re-analyses from the same series."""
    src = StaticFleet(4, 8)
    app = FleetApp(src, LiveConfig(), autopoll=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("enter")
        app.apply(*app.read_once())
        await pilot.pause()
        tree = app.query_one("#fleet")
        assert tree.root.children[0].is_expanded
        before = app.fleet["totals"]["requests_fit"][0]["length"]
        await pilot.press("l")
        await pilot.pause()
        # l: from the default 825 to the next of the TUI's LENGTHS (1,024); the reservation stays 2,048
        assert before == 825 and app.fleet["totals"]["requests_fit"][0]["length"] == 1024
        assert app.config == replace(LiveConfig(), lengths=(1024,))


async def test_prometheus_error_is_a_panel_message_and_the_last_fleet_stays():
    """The last good fleet stays on screen with its age (a helper's trial: it said "showing the last good reading"
    however old): good at t=100, the poll fails at t=105."""
    src = StaticFleet(4, 8)
    clock = [100.0]
    app = FleetApp(src, LiveConfig(), autopoll=False, clock=lambda: clock[0])
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        src.fail = "Prometheus at http://127.0.0.1:9 is unreachable (Connection refused)"
        clock[0] = 105.0
        app.apply(*app.read_once())
        await pilot.pause()
        problem = app.query_one("#problem")
        assert problem.display and problem.region.height == 2
        assert "unreachable" in str(problem.render())
        assert "showing the last good reading 5 s ago; polling goes on" in str(problem.render())
        assert len(app.query_one("#fleet").root.children) == 4


async def test_s_writes_the_fleet_whole_or_says_why_not(tmp_path):
    """A helper's trial: s in the fleet view with its folder gone ended the app in a FileNotFoundError traceback
    (live's s catches OSError; the fleet's did not), and it wrote over a file of the same name.  Now: the file is
    named after the fleet's own poll, written whole beside an existing one, and a folder that is gone is a
    notification and a note."""
    import json

    src = StaticFleet(2, 2)
    folder = tmp_path / "snaps"
    folder.mkdir()
    app = FleetApp(src, LiveConfig(), autopoll=False, snapshot_dir=folder)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        stamp = int(app.fleet.get("time") or app.snapshot.time)  # FleetSource stamps its fleet; this source not
        (folder / f"kvdash-fleet-{stamp}-1.json").write_text("another's\n")
        await pilot.press("s")
        await pilot.pause()
        assert "another's\n" == (folder / f"kvdash-fleet-{stamp}-1.json").read_text()
        assert 2 == len(json.loads((folder / f"kvdash-fleet-{stamp}-2.json").read_text())["hosts"])
        assert app.message == f"wrote kvdash-fleet-{stamp}-2.json"
        (folder / f"kvdash-fleet-{stamp}-1.json").unlink()
        (folder / f"kvdash-fleet-{stamp}-2.json").unlink()
        folder.rmdir()
        await pilot.press("s")
        await pilot.pause()
        assert app.is_running and app.message.startswith("snapshot not written: ")
        assert any(n.title == "snapshot not written" for n in app._notifications)
    assert app.return_code in (None, 0)


async def test_unreachable_from_the_start_is_a_panel_message():
    src = StaticFleet(1, 1)
    src.fail = "Prometheus at http://127.0.0.1:9 is unreachable (Connection refused)"
    app = FleetApp(src, LiveConfig(), autopoll=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        problem = app.query_one("#problem")
        assert problem.display and "unreachable" in str(problem.render()) and "no reading yet" in str(problem.render())
        assert "unreachable" in app.export_screenshot()


async def test_z_opens_every_host_and_closes_them():
    app = FleetApp(StaticFleet(3, 2), LiveConfig(tp=2), autopoll=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        tree = app.query_one("#fleet")
        await pilot.press("z")
        assert all(n.is_expanded for n in tree.root.children)
        assert tree.root.children[2].children[0].label.plain.startswith("GPU  0")
        await pilot.press("z")
        assert not any(n.is_expanded for n in tree.root.children)


def test_snapshot_fleet_80x24(snap_compare):
    """The fleet screen at 80x24 with 16 hosts x 8 GPUs, one down, the third host open (pinned inputs)."""
    app = FleetApp(StaticFleet(16, 8, down=1), LiveConfig(), autopoll=False)
    assert snap_compare(app, terminal_size=(80, 24), press=["down", "down", "enter"])


class GrowingEngine:
    """The vLLM tp1 page from vLLM's own logger (tests/data/engine_pages), its counters advanced on each read:
    +10,000 prefix-cache query tokens, +2,500 hits and +3 preemptions per poll."""

    name = "prometheus (test)"

    def __init__(self) -> None:
        from tests.test_engine_pages import ENGINE_FAMILIES, PAGES, as_series

        self.base = as_series(PAGES / "vllm-0.33.0-tp1.prom", "node-a:8000", ENGINE_FAMILIES)
        self.reads = 0

    def read(self, config: LiveConfig | None = None) -> Snapshot:
        from kvdash.fleet.client import Series

        step = {"vllm:prefix_cache_queries_total": 10_000, "vllm:prefix_cache_hits_total": 2_500,
                "vllm:num_preemptions_total": 3}
        series = [Series(s.labels, s.value + self.reads * step.get(s.labels["__name__"], 0)) for s in self.base]
        self.reads += 1
        cfg = config or LiveConfig()
        results = {"engines": series}
        return Snapshot(time=1_767_225_600.0 + self.reads, source=self.name, gpus=(),
                        extra={"fleet": build_fleet(results, cfg), "results": results, "config": cfg})

    def close(self) -> None:
        return None


async def test_fleet_view_shows_windowed_rates_over_the_last_readings():
    """n polls (the app's own first reads and two more): the window holds n readings, 10,000 x (n - 1) query
    tokens and 2,500 x (n - 1) hits (25.0 %, where the lifetime rate is 40 %), 3 x (n - 1) preemptions; `v`
    shows them; a change of model (m) keeps the history."""
    app = FleetApp(GrowingEngine(), LiveConfig(), autopoll=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        app.apply(*app.read_once())
        app.apply(*app.read_once())
        await pilot.pause()
        (e,) = app.fleet["engines"]
        n = e["window"]["readings"]
        assert n >= 3 and (e["window"]["prefix_hit_rate"], e["window"]["preemptions"]) == (0.25, 3 * (n - 1))
        assert e["prefix_hits"] / e["prefix_queries"] > 0.35  # the lifetime rate: not the window's
        await pilot.press("v")
        await pilot.pause()
        text = str(app.query_one("#fleet-details-text").render())
        assert f"last {n} readings (the server's): prefix-cache hit rate 25.0%, preemptions {3 * (n - 1)}" in text
        await pilot.press("m")
        await pilot.pause()
        assert app.fleet["engines"][0]["window"]["readings"] == n


def test_the_fleet_view_checks_and_uses_snapshot_dir(tmp_path, capsys):
    """--snapshot-dir was dropped on the way to the fleet view (s wrote to the working folder) and not checked: a
    folder that does not exist is refused before the dashboard starts, as in live's single-host view."""
    from tests.cli_run import run

    code, _, err = run(["live", "--prometheus", "http://127.0.0.1:9", "--snapshot-dir", str(tmp_path / "gone")],
                       capsys)
    assert 2 == code and err.startswith("kvdash: error: --snapshot-dir: ") and "expected an existing folder" in err
    seen: list[object] = []  # and the folder given reaches the fleet view (a review: only the refusal was tested)

    def run_app(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(self.snapshot_dir)

    import pytest

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(FleetApp, "run", run_app)
        code, _, err = run(["live", "--prometheus", "http://127.0.0.1:9", "--snapshot-dir", str(tmp_path)], capsys)
    assert 0 == code and [tmp_path] == seen, err

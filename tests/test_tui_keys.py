"""Every key of every view, pressed (issue 24): none raises (a Textual exception fails run_test), the
fleet's v opens its details, Ctrl+C quits as in any terminal program, h opens help like ?, and b
(kvdash's block size) never changes the engine's own block count."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.binding import Binding

from kvdash.live.analysis import LiveConfig
from kvdash.sources.demo import DemoSource
from kvdash.sources.engine import parse_prometheus, reading_from_samples
from kvdash.tui.app import HelpScreen, LiveApp
from kvdash.tui.fleet import FleetApp
from tests.test_fleet_tui import StaticFleet

PAGE = Path(__file__).parent / "data" / "engine_pages" / "vllm-0.33.0-tp1.prom"


def engine():
    return reading_from_samples("http://127.0.0.1:8000/metrics", parse_prometheus(PAGE.read_text()))


def keys(app) -> list[str]:
    out = []
    for b in app.BINDINGS:
        key = b.key if isinstance(b, Binding) else b[0]
        out += [k for k in key.split(",") if k not in ("q", "ctrl+c")]
    return out


def apps(tmp_path):
    return {
        "live demo": lambda: LiveApp(DemoSource(seed=1), LiveConfig(), autopoll=False, snapshot_dir=tmp_path),
        "live engine": lambda: LiveApp(DemoSource(seed=1), LiveConfig(model="llama-3.1-8b", tp=1), autopoll=False,
                                       engine=engine, snapshot_dir=tmp_path, engine_url="127.0.0.1:8000"),
        "fleet": lambda: FleetApp(StaticFleet(4, 8, down=1), LiveConfig(), autopoll=False, snapshot_dir=tmp_path),
    }


@pytest.mark.parametrize("view", ["live demo", "live engine", "fleet"])
async def test_every_key_in_every_view(view, tmp_path):
    app = apps(tmp_path)[view]()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        for details in (False, True):  # each key in the overview, then again in the details view
            for key in keys(app):
                await pilot.press(key)
                await pilot.pause()
                if isinstance(app.screen, HelpScreen):
                    await pilot.press("escape")
                    await pilot.pause()
                if key == "v":  # back where the round started
                    await pilot.press("v")
                    await pilot.pause()
            if not details:
                await pilot.press("v")
                await pilot.pause()
        assert app.is_running


async def test_fleet_v_shows_the_engine_details():
    app = FleetApp(StaticFleet(4, 8, down=1), LiveConfig(), autopoll=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await pilot.press("v")
        await pilot.pause()
        assert app.has_class("details")
        assert "blocks of 16" in str(app.query_one("#fleet-details-text").render())


@pytest.mark.parametrize("view", ["live demo", "fleet"])
async def test_ctrl_c_quits(view, tmp_path):
    app = apps(tmp_path)[view]()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await pilot.press("ctrl+c")
        await pilot.pause()
    assert app.return_code == 0 and not app.is_running


async def test_h_opens_help_like_question_mark(tmp_path):
    app = apps(tmp_path)["live demo"]()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await pilot.press("h")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("h")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)


async def test_b_never_changes_the_engines_own_blocks(tmp_path):
    """The vLLM 0.33 TP 1 page: 2,837,216 tokens = 177,326 blocks of 16.  kvdash's b (16 -> 32) changes
    kvdash's pool, not the engine's line (before issue 24 it halved to 88,663)."""
    app = apps(tmp_path)["live engine"]()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        app.apply(app.source.read(), engine())
        await pilot.pause()
        eng = app.kv["engine"]
        assert (eng["engine_own_blocks"], eng["engine_block_size"]) == (177_326, 16)
        await pilot.press("b")
        await pilot.pause()
        assert app.config.block_size == 32
        eng = app.kv["engine"]
        assert (eng["engine_own_blocks"], eng["engine_block_size"]) == (177_326, 16)

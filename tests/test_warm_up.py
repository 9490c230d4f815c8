"""``kvdash sweep`` loads the report's templates in a thread while polars evaluates a large grid.

The rules: the warm-up fills the environment the renderers use (one per kind, per process), it runs only
for grids of at least WARM_UP_POINTS points, and it never changes or breaks a report."""

from __future__ import annotations

from pathlib import Path

from kvdash.commands import sweep as sweep_cmd
from kvdash.report import render
from tests.cli_run import run

REPO = Path(__file__).resolve().parents[1]
TUTORIAL = REPO / "sweeps" / "tutorial.yaml"  # 16 points
COMMITTED = REPO / "reports" / "tutorial"


def _same_as_committed(out: Path) -> None:
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(p.name for p in COMMITTED.iterdir())
    for name in names:
        assert (out / name).read_bytes() == (COMMITTED / name).read_bytes(), name


def test_warm_up_loads_both_templates_into_the_renderers_environments():
    render._env.cache_clear()
    render.warm_up()
    md, html = render._env(False), render._env(True)
    assert md is render._env(False) and html is render._env(True)  # cached: the renderers get these two
    assert md is not html and not md.autoescape and html.autoescape
    # each environment holds its one compiled template, so rendering compiles nothing more
    assert len(md.cache) == 1 and len(html.cache) == 1


def test_small_grids_start_no_warm_up(tmp_path, capsys, monkeypatch):
    """A 16-point grid is below WARM_UP_POINTS (100,000): no thread is started."""
    started = []
    monkeypatch.setattr(sweep_cmd, "_warm_up", lambda: started.append(1))
    code, _, err = run(["sweep", TUTORIAL, "--out", tmp_path / "r", "-q"], capsys)
    assert (code, err) == (0, "") and started == []
    _same_as_committed(tmp_path / "r")


def test_warm_up_at_the_threshold_changes_no_byte(tmp_path, capsys, monkeypatch):
    """With the threshold at 1 point the 16-point tutorial grid warms up first; the report is the committed one."""
    monkeypatch.setattr(sweep_cmd, "WARM_UP_POINTS", 1)
    threads = []
    real = sweep_cmd._warm_up
    monkeypatch.setattr(sweep_cmd, "_warm_up", lambda: threads.append(real()) or threads[-1])
    render._env.cache_clear()
    code, _, err = run(["sweep", TUTORIAL, "--out", tmp_path / "r", "-q"], capsys)
    assert (code, err) == (0, "")
    assert len(threads) == 1 and not threads[0].is_alive()  # joined before the report is written
    _same_as_committed(tmp_path / "r")


def test_a_failing_warm_up_leaves_the_report_intact(tmp_path, capsys, monkeypatch):
    """An error in the warm-up thread is dropped: the renderers meet the same error where it is handled."""
    monkeypatch.setattr(sweep_cmd, "WARM_UP_POINTS", 1)

    def boom() -> None:
        raise RuntimeError("no templates")

    monkeypatch.setattr(render, "warm_up", boom)
    code, _, err = run(["sweep", TUTORIAL, "--out", tmp_path / "r", "-q"], capsys)
    assert (code, err) == (0, "")
    _same_as_committed(tmp_path / "r")

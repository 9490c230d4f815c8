"""The reports committed under reports/ are exactly what the shipped sweeps produce now."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvdash.report.build import write_report
from kvdash.sweep.evaluate import expand
from kvdash.sweep.gridfile import parse_grid

REPO = Path(__file__).resolve().parents[1]
SWEEPS = sorted((REPO / "sweeps").glob("*.yaml"))


def test_every_sweep_has_a_committed_report():
    assert {p.stem for p in SWEEPS} <= {p.name for p in (REPO / "reports").iterdir() if p.is_dir()}
    assert {"tutorial", "exercise", "vendor-claims", "paper-table1", "planning"} <= {p.stem for p in SWEEPS}


@pytest.mark.parametrize("grid", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_committed_report_is_byte_identical(grid, tmp_path, monkeypatch):
    """Regenerating a shipped sweep changes no byte of its committed report (run `kvdash sweep` to refresh)."""
    monkeypatch.chdir(REPO)  # the grid path as committed (relative) appears in no file, but keep it stable
    spec = parse_grid(grid.relative_to(REPO))
    fresh = write_report(spec, expand(spec), tmp_path / grid.stem)
    committed = REPO / "reports" / grid.stem
    assert sorted(f.name for f in fresh) == sorted(f.name for f in committed.iterdir())
    for f in fresh:
        assert f.read_bytes() == (committed / f.name).read_bytes(), f"{committed.name}/{f.name} is stale"


@pytest.mark.parametrize("grid", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_committed_markdown_is_concise(grid):
    """Each shipped report.md stays within 13,700 characters (results.csv / .parquet keeps every figure); the
    engine-caps line and the running_requests column of issue 23 took it past the old 12,000; the block size a
    grid leaves to the engine, named with the size it resolves to (``block_size auto (vLLM's choice, 16)``, 22
    characters more than ``block_size 16``), and SGLang's cap named in its own term (max_running_requests, not
    max_num_seqs) took engines/report.md past 12,500; the time section's first 6 timed points, why the others are not
    timed and the time model's constants (a grid reviewer's questions, issue 28) took vendor-claims/report.md to
    13,502; the time model's validation file named beside its error, and why throughput-2-4x is 1x at fixed lengths
    (a fresh-eyes trial's questions), to 13,675."""
    text = (REPO / "reports" / grid.stem / "report.md").read_text(encoding="utf-8")
    assert len(text) <= 13_700, f"{grid.stem}/report.md has {len(text):,} characters"

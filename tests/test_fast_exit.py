"""A finished ``kvdash sweep`` process ends with ``os._exit`` (kvdash.cli._exit_now), skipping the interpreter's
teardown.  The rule: nothing it printed or wrote is lost, and its exit code is the command's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kvdash import cli
from tests.cli_run import run

REPO = Path(__file__).resolve().parents[1]


def _kvdash(*args: object, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    # stdout and stderr are pipes here: block-buffered, so a skipped flush would lose the text
    return subprocess.run([sys.executable, "-m", "kvdash.cli", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def test_sweep_process_keeps_its_summary_and_its_report(tmp_path):
    proc = _kvdash("sweep", "sweeps/tutorial.yaml", "--out", tmp_path / "r")
    assert proc.returncode == 0, proc.stderr
    # the summary (the reserve basis first, the files, the decision, where the report is), flushed; its lines
    # wrap at the terminal's width (80 without one), so words are compared
    words = proc.stdout.split()
    assert words[:8] == ["16", "points", "(no", "reserve:", "declared", "KV", "budgets)", "->"]
    assert words[-6:] == ["Report:", str(tmp_path / "r" / "report.md"), "(and", "report.html", "beside", "it)"]
    committed = REPO / "reports" / "tutorial"
    for f in committed.iterdir():
        assert (tmp_path / "r" / f.name).read_bytes() == f.read_bytes(), f.name


def test_failed_gates_keep_exit_code_1_and_every_line(tmp_path):
    """chat-256's gate needs 256 requests: the bf16 points of Llama-3.1-70B fail it (170 on 8 x H100, 146 on
    4 x H200), so --check exits 1 and lists each failing point on stderr, written before the process ends."""
    inproc = REPO / "sweeps" / "chat-256.yaml"
    proc = _kvdash("sweep", inproc, "--out", tmp_path / "r", "--check")
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert lines and all(line.startswith("gate '256 concurrent chats' failed at ") for line in lines)
    # the gate reads running_requests (h1: what vLLM runs), min(170 paged, max_num_seqs 1,024) = 170
    assert any("running_requests = 170, needs ≥ 256" in line for line in lines)


def test_in_process_callers_get_system_exit(tmp_path, capsys, monkeypatch):
    """main(argv) (the tests, an embedding program) never ends the process: os._exit is not reached."""
    monkeypatch.setattr(cli, "_exit_now", lambda code: pytest.fail("os._exit reached in-process"))
    code, out, _ = run(["sweep", REPO / "sweeps" / "tutorial.yaml", "--out", tmp_path / "r"], capsys)
    assert code == 0 and out.split()[:8] == ["16", "points", "(no", "reserve:", "declared", "KV", "budgets)", "->"]


def test_only_sweep_exits_early():
    """Other commands keep the normal teardown (an exporter's or a dashboard's threads end their own way)."""
    assert cli.FAST_EXIT == {"sweep"}
    proc = _kvdash("calc", "--json")
    assert proc.returncode == 0 and proc.stdout.lstrip().startswith("{")


def test_sweep_summary_wraps_at_the_terminal_width(tmp_path, capsys, monkeypatch):
    """The summary's lines (files, decision, one item per scenario) wrap at the terminal's width, an item's later
    lines indented under its text; at 80 columns the tutorial's were 128-160 wide."""
    monkeypatch.setattr(cli, "_exit_now", lambda code: None)
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(["sweep", REPO / "sweeps" / "tutorial.yaml", "--out", tmp_path / "r"], capsys)
    lines = out.splitlines()
    assert code == 0 and all(len(line) <= 80 for line in lines), [x for x in lines if len(x) > 80]
    items = [i for i, line in enumerate(lines) if line.startswith("- ")]
    assert len(items) == 2 and all(lines[i + 1].startswith("  running_requests_per_gpu") for i in items)


def test_sweep_summary_keeps_a_long_path_whole(tmp_path, capsys, monkeypatch):
    """A path longer than the terminal is one word on its own line (copyable), not cut at the width."""
    monkeypatch.setenv("COLUMNS", "80")
    out_dir = tmp_path / ("a-long-report-directory-" * 4)
    code, out, _ = run(["sweep", REPO / "sweeps" / "tutorial.yaml", "--out", out_dir], capsys)
    assert code == 0 and f"{out_dir / 'report.md'}" in out.splitlines()

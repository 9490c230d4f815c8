"""Every command the README shows runs (issue 15): fenced `kvdash ...` lines are run in a temporary
folder holding copies of sweeps/, examples/ and reports/, and exit 0; the Recipes' `console` blocks
print exactly what the README shows (at 80 columns).  Commands that need what a test machine has not
(a GPU, a running engine or Prometheus, a terminal for the dashboard, a server that runs until
stopped) are listed in NOT_RUN with the reason, and the list must name only commands the README shows."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```(\w*)\n(.*?)```", README, re.S)

NOT_RUN = {
    "kvdash live --demo": "interactive: the Textual dashboard runs until q",
    "kvdash live --demo --simulate paged": "interactive: the Textual dashboard runs until q",
    "kvdash live --model llama-3.1-70b --tp 8": "needs GPUs (NVML) and a terminal",
    "kvdash live --engine localhost:8000 --reserve 4GiB": "needs a running vLLM or SGLang engine",
    "kvdash live --engine localhost:8000 --engine-timeout 1": "needs a running vLLM or SGLang engine",
    "kvdash live --once": "needs GPUs (NVML); without them it exits 1 with the reason",
    "kvdash record --out gpus.jsonl --count 60": "needs GPUs (NVML)",
    "kvdash live --replay gpus.jsonl": "interactive, and replays the file the GPU host recorded",
    "kvdash live --engine gpu-node-1:8000 --model llama-3.1-8b --tp 1 --budget 40GiB":
        "needs a running engine (tests/test_engine_no_gpu.py runs it against SGLang's own page on loopback)",
    "kvdash record --engine localhost:8000 --out engine.jsonl --count 60":
        "needs a running engine (tests/test_engine_no_gpu.py records one on loopback)",
    "kvdash exporter --demo": "a server: runs until stopped",
    "kvdash exporter --model llama-3.1-70b --tp 8 --engine localhost:8000 --host 0.0.0.0":
        "a server on a GPU host beside an engine",
    "kvdash live --prometheus http://prometheus:9090": "needs a Prometheus server",
    "kvdash live --prometheus http://prometheus:9090 --once": "needs a Prometheus server",
    "kvdash live --prometheus http://prometheus:9090 --once --json": "needs a Prometheus server",
    "kvdash calibrate --engine localhost:8000 -m llama-3.1-70b --tp 8": "needs a running vLLM engine and GPUs",
    "kvdash calibrate --engine localhost:8000 -m llama-3.1-70b --tp 8 --gpu h100-80gb --dry-run --json":
        "needs a running vLLM engine (tests/test_reserve.py runs it against a loopback /metrics fixture)",
}


def shown_commands() -> list[str]:
    """Each `kvdash ...` command of a fenced block (bash, sh, console, none), comments and prompts cut."""
    out = []
    for _lang, body in BLOCKS:
        for line in body.splitlines():
            line = line.strip().removeprefix("$ ")
            for part in line.split("&&"):
                part = part.strip().removeprefix(".venv/bin/")
                if part.startswith("kvdash "):
                    out.append(part.split("  #")[0].split(" # ")[0].strip())
    return out


def recipes() -> list[tuple[str, str]]:
    """(command, output) of each `console` block: the line after `$ ` and every line up to the next."""
    out = []
    for lang, body in BLOCKS:
        if lang != "console":
            continue
        lines = body.rstrip("\n").splitlines()
        assert lines[0].startswith("$ kvdash ")
        out.append((lines[0][2:], "\n".join(lines[1:]) + "\n"))
    return out


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    where = tmp_path_factory.mktemp("readme")
    # tests/data/mooncake: the traces README's simulate lines and sweeps/prefix-cache.yaml read
    for name in ("sweeps", "examples", "reports", "tests/data/mooncake"):
        shutil.copytree(ROOT / name, where / name)
    return where


def run(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    args = shlex.split(command)
    assert args[0] == "kvdash"
    env = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "kvdash.cli", *args[1:]], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_readme_shows_commands_and_recipes():
    assert len(shown_commands()) >= 30 and 5 == len(recipes())
    stale = set(NOT_RUN) - set(shown_commands())
    assert not stale, f"NOT_RUN names commands the README no longer shows: {stale}"


@pytest.mark.parametrize("command", [c for c in dict.fromkeys(shown_commands()) if c not in NOT_RUN])
def test_every_readme_command_exits_0(command, folder):
    proc = run(command, folder)
    assert 0 == proc.returncode, f"{command}: {proc.stderr[-800:]}"


@pytest.mark.parametrize("command,expected", recipes())
def test_recipes_print_what_the_readme_shows(command, expected, folder):
    proc = run(command, folder)
    assert (0, expected) == (proc.returncode, proc.stdout)


def test_complete_grid_example_is_the_shipped_file():
    """The README's "A grid file, complete" is examples/grid.yaml, word for word (and runs above)."""
    yaml_blocks = [body for lang, body in BLOCKS if lang == "yaml"]
    assert (ROOT / "examples" / "grid.yaml").read_text(encoding="utf-8") in yaml_blocks
    assert "kvdash sweep examples/grid.yaml --dry-run" in shown_commands()


def test_every_repository_path_the_readme_names_exists():
    """Paths written in backticks that look like files of this repository exist."""
    named = set(re.findall(r"`((?:kvdash|tests|benchmarks|sweeps|examples|reports|dashboards|templates|"
                           r"conformance|\.ci)/[\w./-]*)`", README))
    missing = sorted(p for p in named if "*" not in p and not (ROOT / p.rstrip("/")).exists())
    assert not missing, missing


def test_command_1_prints_what_the_readme_shows(folder):
    """Issue 23: "Two commands" shows how command 1 ends (the reserve basis, the decision, where the report is);
    the shipped tutorial grid prints exactly that."""
    shown = next(body for lang, body in BLOCKS if lang == "text" and body.startswith("16 points"))
    proc = run("kvdash sweep sweeps/tutorial.yaml", folder)
    assert (0, shown) == (proc.returncode, proc.stdout)


def test_ci_runs_the_readmes_test_command():
    """The README's command 2 (the tests a new user runs) is `bash .ci/run`, and `.ci/run` is the whole check:
    it installs from the clone, then runs ruff and mypy over the project and pytest over every test path
    (pyproject's ``testpaths``), with nothing deselected; CI runs exactly that file from a fresh clone."""
    block = README.split("## Two commands", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert commands[-1].strip() == "bash .ci/run"
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    steps = [line for line in script if line.startswith(".venv/bin/")]
    assert steps[-3:] == [".venv/bin/ruff check kvdash tests benchmarks", ".venv/bin/mypy",
                          ".venv/bin/python -m pytest"]
    # the test extra, and the optional ray extra so that the Ray test runs rather than being skipped
    assert any("pip install -q -e '.[test]'" in line for line in script)
    assert any("pip install -q -e '.[ray]'" in line for line in script)
    assert 'testpaths = ["tests", "kvdash"]' in (ROOT / "pyproject.toml").read_text(encoding="utf-8")

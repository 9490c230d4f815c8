"""One way for tests to run the kvdash command line in-process."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvdash.cli import main


def run(args, capsys):
    """``kvdash ARGS`` in-process: (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in args])
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


KVDASH = [sys.executable, "-c", "from kvdash.cli import main; main()"]  # kvdash in a child process

BIG_GRID = (  # 100,000 points: a sweep that runs for seconds, to be interrupted
    "models: [tutorial-gqa-80l]\ngrid:\n  block_size: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]\n"
    "  kv_dtype: [bf16, fp8, fp16, fp32]\n  budget: [{}]\n")


def start_big_sweep(tmp_path: Path, out: Path, ignored: tuple[int, ...] = ()) -> tuple[subprocess.Popen, Path]:
    """A real ``kvdash sweep`` of :data:`BIG_GRID` into ``out``, returned once its work folder beside ``out``
    holds part of the report (for signals and kills at a known moment).  ``ignored``: signals the sweep starts
    ignoring, as under ``nohup`` (SIGHUP); the others start at their default, as from an interactive shell."""
    grid = tmp_path / "big.yaml"
    grid.write_text(BIG_GRID.format(", ".join(f"{i}GiB" for i in range(1, 2501))))
    proc = subprocess.Popen([*KVDASH, "sweep", str(grid), "--out", str(out), "-q"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=lambda: started_with(ignored))
    deadline = time.monotonic() + 120
    prefix = f".{out.name}.kvdash-tmp-"
    while time.monotonic() < deadline:  # wait until the report is being written beside --out
        work = [p for p in out.parent.iterdir() if p.name.startswith(prefix)]
        if work and (work[0] / "report").is_dir() and any((work[0] / "report").iterdir()):
            return proc, work[0]
        if proc.poll() is not None:
            pytest.fail(f"the sweep ended before it could be interrupted: {proc.communicate()}")
        time.sleep(0.005)
    proc.kill()
    pytest.fail("no work folder appeared")


def wait_caught(proc: subprocess.Popen, sig: int, timeout: float = 60.0) -> None:
    """Wait until ``proc`` has a handler installed for ``sig`` (Linux: the signal's bit in ``SigCgt`` of
    ``/proc/PID/status``), so a signal sent next reaches kvdash's handler, not the default action a process has
    while Python imports; fails the test if the process ends first or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    status = Path(f"/proc/{proc.pid}/status")
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the command ended before it could be signalled: {proc.communicate()}")
        try:
            caught = next(int(line.split()[1], 16) for line in status.read_text().splitlines()
                          if line.startswith("SigCgt:"))
        except (OSError, StopIteration):
            caught = 0
        if caught >> (sig - 1) & 1:
            return
        time.sleep(0.01)
    proc.kill()
    pytest.fail(f"no handler for {signal.Signals(sig).name} within {timeout:g} s")


def started_with(ignored: tuple[int, ...] = ()) -> None:
    """In a child before it runs kvdash: SIGINT, SIGTERM and SIGHUP at their default, as an interactive shell
    starts a command (this suite may itself run under ``nohup`` or a background ``&``, which ignore SIGHUP or
    SIGINT, and a child inherits that), except ``ignored``."""
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN if s in ignored else signal.SIG_DFL)

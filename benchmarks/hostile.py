"""Hostile inputs of issue 9: wall time, peak memory and what the user sees, one child process each.

Run: python benchmarks/hostile.py [--src DIR] [--limit-gib 4] [--timeout 30]

``--src DIR`` runs the kvdash package found in DIR instead of the installed one (to measure a
baseline: ``git archive BASE | tar -x -C /tmp/base`` then ``--src /tmp/base``).  Each case runs in a
child under an address-space limit (``--limit-gib``) and a wall-clock timeout, so a runaway case is
stopped instead of taking the machine; the table says which.  Peak memory is the child's
``ru_maxrss``.  The case files (a billion-laughs grid, 100,000 explicit models, a 100 MB trace, a FIFO)
are written to a temporary folder first.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def billion_laughs() -> str:
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 10):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [{', '.join(['*' + prev] * 9)}]")
    return "\n".join(lines) + "\n"


def files(folder: Path) -> dict[str, Path]:
    out = {"bomb": folder / "bomb.yaml", "many": folder / "many.yaml", "trace": folder / "trace.csv",
           "fifo": folder / "pipe", "deep": folder / "deep.yaml", "cycle": folder / "cycle.yaml"}
    out["bomb"].write_text(billion_laughs())
    out["many"].write_text("models:\n" + "".join(f"  - {{name: m{i}, layers: 32, kv_heads: 8, head_dim: 128}}\n"
                                                 for i in range(100_000)))
    with out["trace"].open("w") as fh:
        fh.write("prompt,output\n")
        line = "1200,345\n"
        fh.write(line * (100_000_000 // len(line)))
    os.mkfifo(out["fifo"])
    out["deep"].write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    out["cycle"].write_text("a: &a [*a]\n")
    return out


def cases(f: dict[str, Path]) -> dict[str, list[str]]:
    return {
        "calc --config /dev/zero": ["calc", "--config", "/dev/zero"],
        "sweep /dev/zero": ["sweep", "/dev/zero"],
        "live --replay /dev/zero --once": ["live", "--replay", "/dev/zero", "--once"],
        "simulate --trace /dev/zero": ["simulate", "--trace", "/dev/zero"],
        "sweep FIFO": ["sweep", str(f["fifo"])],
        "sweep billion-laughs --dry-run": ["sweep", str(f["bomb"]), "--dry-run"],
        "sweep a: &a [*a]": ["sweep", str(f["cycle"]), "--dry-run"],
        "sweep 5,000-deep nesting": ["sweep", str(f["deep"]), "--dry-run"],
        "sweep 100,000 models --dry-run": ["sweep", str(f["many"]), "--dry-run"],
        "calc --layers 10^9": ["calc", "--layers", "1000000000", "--kv-heads", "8", "--head-dim", "128"],
        "calc --layers 2^63": ["calc", "--layers", "9223372036854775808", "--kv-heads", "8", "--head-dim", "128"],
        "simulate 100 MB trace --requests 100": ["simulate", "--trace", str(f["trace"]), "--requests", "100"],
    }


def run(args: list[str], src: str | None, limit: int, timeout: float) -> tuple[float, float, str]:
    """(wall seconds, peak RSS in MiB of this child alone, what the user saw)."""
    env = dict(os.environ)
    code = "from kvdash.cli import main; main()"
    if src:  # an editable install's import hook would win over PYTHONPATH: drop it, put SRC first
        code = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f)]; "
                f"sys.path.insert(0, {src!r}); " + code)

    def cap() -> None:  # pragma: no cover - in the child
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    with tempfile.TemporaryFile("w+") as err_file:
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-c", code, *args],
                                stdout=subprocess.DEVNULL, stderr=err_file, text=True, env=env, preexec_fn=cap)
        killed = False
        while True:  # wait4 reaps the child and returns its own resource usage
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - started > timeout and not killed:
                proc.kill()
                killed = True
            time.sleep(0.01)
        wall = time.monotonic() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        err_file.seek(0)
        err = err_file.read()
    lines = err.strip().splitlines()
    last = lines[-1] if lines else ""
    outcome = f"killed after {timeout:.0f} s" if killed else f"exit {proc.returncode}"
    if "MemoryError" in err:
        outcome += ", MemoryError at the limit"
    elif "Traceback" in err:
        outcome += f", traceback ({last[:60]})"
    else:
        outcome += f", {len(lines)} line(s): {last[:90]}"
    return wall, usage.ru_maxrss / 1024, outcome


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", help="a folder holding another kvdash package (a baseline)")
    ap.add_argument("--limit-gib", type=float, default=4.0)
    ap.add_argument("--timeout", type=float, default=30.0)
    ns = ap.parse_args()
    limit = int(ns.limit_gib * 2**30)
    with tempfile.TemporaryDirectory() as tmp:
        made = files(Path(tmp))
        print(f"| case | wall s | peak RSS MiB | outcome |  (limit {ns.limit_gib:g} GiB, timeout {ns.timeout:g} s)")
        print("|---|---:|---:|---|")
        for name, args in cases(made).items():
            wall, peak, outcome = run(args, ns.src, limit, ns.timeout)
            print(f"| {name} | {wall:.2f} | {peak:,.0f} | {outcome} |", flush=True)


if __name__ == "__main__":
    main()

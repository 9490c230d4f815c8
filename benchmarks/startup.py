"""Start-up time of kvdash commands beside nvitop's, interleaved, as medians and ratios.

Run: python benchmarks/startup.py [ROUNDS]   (default 21 rounds)

Each round runs every command once, in turn, so machine noise hits all of them alike.  nvitop is
the reference (``pip install nvitop``); it is skipped when not installed.  Measure a plain
``pip install .``: an editable install adds its import hook's cost to every kvdash command.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def command_for(name: str) -> list[str] | None:
    exe = Path(sys.executable).with_name(name)
    found = str(exe) if exe.exists() else shutil.which(name)
    return [found] if found else None


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description="Start-up time of kvdash commands beside nvitop's, interleaved.")
    ap.add_argument("rounds", nargs="?", type=int, default=21, help="rounds, each running every command once")
    rounds = ap.parse_args().rounds
    if rounds < 1:
        ap.error(f"rounds {rounds}: at least 1")
    kvdash = command_for("kvdash") or [sys.executable, "-m", "kvdash.cli"]
    cases: dict[str, list[str]] = {
        "python -c pass (floor)": [sys.executable, "-c", "pass"],
        "kvdash --help": kvdash + ["--help"],
        "kvdash calc": kvdash + ["calc"],
        "kvdash calc --json": kvdash + ["calc", "--json"],
        "kvdash models": kvdash + ["models"],
    }
    nvitop = command_for("nvitop")
    if nvitop:
        cases["nvitop --help (reference)"] = nvitop + ["--help"]
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(rounds):
        for name, cmd in cases.items():
            t = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            times[name].append(time.perf_counter() - t)
    ref = statistics.median(times["nvitop --help (reference)"]) if nvitop else None
    print(f"| command | median s | min s | vs nvitop --help |  ({rounds} interleaved rounds)")
    print("|---|---:|---:|---:|")
    for name, ts in times.items():
        med = statistics.median(ts)
        ratio = f"{med / ref:.2f}x" if ref else "n/a"
        print(f"| {name} | {med:.3f} | {min(ts):.3f} | {ratio} |")


if __name__ == "__main__":
    main()

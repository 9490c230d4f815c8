"""Time to the first frame and peak memory of ``kvdash live --replay`` on a large recording.

Run: python benchmarks/replay_start.py [--mb 200] [--repeat 5] [--keep FILE]

Writes a recording of ``--mb`` MB (demo snapshots of 8 GPUs, one per line), then runs
``kvdash live --replay FILE --once`` in a fresh process ``--repeat`` times and reports the median
wall time and the peak resident memory (ru_maxrss of the child).  For comparison it runs
``kvdash live --demo --once`` the same way: the difference is what the replay costs.  Issue 11
asks for the first frame within 1 s of start for 200 MB, memory bounded.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def write_recording(path: Path, mb: int) -> None:
    from kvdash.sources.demo import DemoSource

    demo = DemoSource(seed=7)
    lines = [(demo.read().dumps() + "\n").encode() for _ in range(200)]
    target = mb * 10**6
    with path.open("wb") as fh:
        written = 0
        while written < target:
            for line in lines:
                fh.write(line)
                written += len(line)


def run_once(args: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one child process."""
    code = ("import resource, sys\nfrom kvdash.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)")
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=False,
                          env={**os.environ, "COLUMNS": "120"})
    took = time.perf_counter() - t
    rss = int(proc.stderr.strip().splitlines()[-1])
    return took, rss


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--keep", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "big.jsonl"
        if not path.exists():
            write_recording(path, args.mb)
        size = path.stat().st_size
        replay = [run_once(["live", "--replay", str(path), "--once"]) for _ in range(args.repeat)]
        first = []
        for _ in range(args.repeat):  # in-process: opening the file and the first frame only
            from kvdash.sources.replay import ReplaySource

            t = time.perf_counter()
            source = ReplaySource(path)
            source.read()
            first.append(time.perf_counter() - t)
            source.close()
        demo = [run_once(["live", "--demo", "--once"]) for _ in range(args.repeat)]
    med = statistics.median
    print(f"recording {size:,} B ({size / 10**6:.0f} MB), {args.repeat} runs each, medians:")
    print(f"  first frame in-process (open + read + check one line): {1000 * med(first):.2f} ms")
    for label, runs in (("live --replay --once", replay), ("live --demo --once  ", demo)):
        print(f"  {label}: {med(t for t, _ in runs):.2f} s wall, peak RSS {med(r for _, r in runs) / 1024:.0f} MiB")



if __name__ == "__main__":
    main()

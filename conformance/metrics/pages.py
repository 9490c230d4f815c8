"""What both page producers share (stdlib only, importable from either side venv): the command line and the
writing of each layout's exposition (``.prom``) beside the figures that built it (``.json``)."""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def write_layouts(layouts: list[dict[str, Any]], build: Callable[[dict[str, Any]], tuple[str, dict[str, Any]]],
                  engine: str, version: str, producer: str) -> int:
    """Build every layout (``--only NAME ...`` for some) and write ``ENGINE-VERSION-NAME.prom`` and ``.json``
    under ``--out``; a layout that fails is reported and the others still run."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "data" / "engine_pages")
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    for layout in layouts:
        if a.only and layout["name"] not in a.only:
            continue
        try:
            page, figures = build(layout)
        except Exception:  # report every layout's failure in one run
            traceback.print_exc()
            continue
        figures["producer"] = producer
        stem = f"{engine}-{version}-{layout['name']}"
        (a.out / f"{stem}.prom").write_text(page)
        (a.out / f"{stem}.json").write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")
        print(stem, len(page), "bytes", file=sys.stderr)
    return 0

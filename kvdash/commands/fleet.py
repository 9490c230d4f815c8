"""``kvdash live --prometheus URL``: the fleet view (called from :mod:`kvdash.commands.live`)."""

import json
import sys
import textwrap
from pathlib import Path

import typer

from kvdash.errors import InputError


def run_fleet(url: str, cfg, once: bool, as_json: bool, interval: float,  # type: ignore[no-untyped-def]
              snapshot_dir: Path | None = None) -> None:
    from dataclasses import replace

    from kvdash.fleet.source import FleetSource

    cfg = replace(cfg, arch=cfg.architecture())  # read the preset once, not on every poll
    try:
        source = FleetSource(url, cfg, deadline_s=max(0.5, min(2.0, interval)))
    except ValueError as exc:
        raise InputError("--prometheus", url, str(exc)) from exc
    if once or as_json:
        snap = source.read()
        error = snap.error
        fleet = None if error else snap.extra["fleet"]
        if fleet is not None and not fleet["hosts"]:
            error = (f"Prometheus at {source.client.url} has no DCGM, kvdash, vLLM or SGLang series and no "
                     "scrape targets (see the README, section Fleet, for a scrape configuration)")
        if error:
            if as_json:  # --json always prints JSON on stdout: here an error object
                print(json.dumps({"error": error, "fleet": None}))
            print(f"kvdash: {error}", file=sys.stderr)
            raise typer.Exit(1)
        assert fleet is not None
        if as_json:
            print(json.dumps(fleet, indent=2, sort_keys=True))
            return
        from kvdash.render.fleet_view import once_tables
        from kvdash.render.table import print_tables, terminal_width

        tables, footer = once_tables(fleet)
        print_tables(tables)
        width = terminal_width()
        for paragraph in footer.splitlines():
            print(textwrap.fill(paragraph, width=width, break_on_hyphens=False))
        return
    from kvdash.commands.common import end_signalled
    from kvdash.tui.fleet import FleetApp

    app = FleetApp(source, cfg, interval=interval, snapshot_dir=snapshot_dir)  # the s key writes there
    app.run()
    end_signalled(app)

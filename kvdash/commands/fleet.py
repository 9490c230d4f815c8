"""``kvdash live --prometheus URL``: the fleet view (called from :mod:`kvdash.commands.live`)."""

import json
import sys

import typer

from kvdash.errors import InputError


def run_fleet(url: str, cfg, once: bool, as_json: bool, interval: float) -> None:  # type: ignore[no-untyped-def]
    from kvdash.sources.prometheus import FleetSource

    try:
        source = FleetSource(url, cfg, deadline_s=max(0.5, min(2.0, interval)))
    except ValueError as exc:
        raise InputError("--prometheus", url, str(exc)) from exc
    if once or as_json:
        snap = source.read()
        if snap.error:
            print(f"kvdash: {snap.error}", file=sys.stderr)
            raise typer.Exit(1)
        fleet = snap.extra["fleet"]
        if as_json:
            print(json.dumps(fleet, indent=2, sort_keys=True))
            return
        from rich.console import Console

        from kvdash.render.fleet_view import once_view

        console = Console()
        for part in once_view(fleet):
            console.print(part)
        return
    from kvdash.tui.fleet import FleetApp

    FleetApp(source, cfg, interval=interval).run()

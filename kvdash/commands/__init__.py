"""One module per command; :func:`register_more` adds the commands beyond ``calc`` and ``models``."""

from typing import Any


def register_more(app: Any) -> None:
    import importlib

    for module, names in (("sweep", ("sweep", "diff", "claims")), ("live", ("live", "record")),
                          ("simulate", ("simulate",)),
                          ("exporter", ("exporter",)), ("calibrate", ("calibrate",))):
        try:
            mod = importlib.import_module(f"kvdash.commands.{module}")
        except ModuleNotFoundError as exc:
            if exc.name != f"kvdash.commands.{module}":
                raise
            continue
        for name in names:
            app.command(name)(getattr(mod, name))

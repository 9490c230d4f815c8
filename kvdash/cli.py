"""The ``kvdash`` command line: a thin layer that parses options and calls the core.

Each command lives in :mod:`kvdash.commands` and imports its heavy libraries (polars, textual,
jinja2, pynvml) only when it runs, so ``kvdash --help`` stays fast.  Every foreseeable problem ends
here as one line on stderr and exit code 2 -- never a traceback.
"""

from __future__ import annotations

import sys

import typer

from kvdash import __version__
from kvdash.errors import InputError

app = typer.Typer(
    name="kvdash",
    help="Exact KV-cache capacity for LLM serving: calculator, sweeps and a live GPU dashboard.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        print(f"kvdash {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """Exact KV-cache capacity for LLM serving."""


def _register() -> None:
    from kvdash.commands import calc, models

    app.command("calc")(calc.calc)
    app.command("models")(models.models)
    app.command("gpus")(models.gpus)
    try:
        from kvdash.commands import register_more
    except ImportError:  # pragma: no cover - all commands ship together
        return
    register_more(app)


_register()


def fail(message: str, code: int = 2) -> None:
    """Print one line to stderr and leave with ``code`` (line breaks in the message become spaces)."""
    from kvdash.errors import one_line

    print(f"kvdash: error: {one_line(message)}", file=sys.stderr)
    raise SystemExit(code)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    from typer.exceptions import TyperException

    try:
        code = app(args=argv, prog_name="kvdash", standalone_mode=False)
    except InputError as exc:
        fail(str(exc))
    except TyperException as exc:  # click usage errors: bad option names or types
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        hint = getattr(exc, "param_hint", None) or ""
        param = getattr(exc, "param", None)
        if param is not None and not hint:
            hint = "/".join(getattr(param, "opts", []) or [getattr(param, "name", "")])
        if hint and isinstance(hint, str) and hint not in message:
            message = f"{hint}: {message}"
        fail(" ".join(message.split()) + " (see kvdash --help)", getattr(exc, "exit_code", 2) or 2)
    except KeyboardInterrupt:
        fail("interrupted", 130)
    except OSError as exc:  # a folder that cannot be written, a full disk: one line, not a traceback
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        fail(f"{where}{exc.strerror or exc}")
    except BrokenPipeError:
        sys.stderr.close()
        raise SystemExit(0) from None
    raise SystemExit(code if isinstance(code, int) else 0)


if __name__ == "__main__":  # pragma: no cover
    main()

"""The ``kvdash`` command line: a thin layer that parses options and calls the core.

Each command lives in :mod:`kvdash.commands` and imports its heavy libraries (polars, textual,
jinja2, pynvml) only when it runs, so ``kvdash --help`` stays fast.  Every foreseeable problem ends
here as one line on stderr and exit code 2 -- never a traceback.
"""

from __future__ import annotations

import sys

import typer

from kvdash import __version__
from kvdash.errors import InputError, Interrupted, Terminated, interrupted_text, one_line, shorten_words, signal_code

app = typer.Typer(
    name="kvdash",
    help="Exact KV-cache capacity for LLM serving: calculator, sweeps and a live GPU dashboard.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _plain_metavar() -> None:
    """Show a required argument as ``GRID``, the usual notation, not typer's ``{GRID}`` (typer.core
    TyperArgument.make_metavar braces required arguments in usage lines)."""
    from typer.core import TyperArgument

    braced = TyperArgument.make_metavar
    if getattr(braced, "kvdash_plain", False):
        return

    def make_metavar(self: TyperArgument, ctx: object, *, usage: bool = False) -> str:
        text: str = braced(self, ctx, usage=usage)  # type: ignore[arg-type]
        return text[1:-1] if text.startswith("{") and text.endswith("}") else text

    make_metavar.kvdash_plain = True  # type: ignore[attr-defined]
    TyperArgument.make_metavar = make_metavar  # type: ignore[method-assign]


_plain_metavar()


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
        pass
    else:
        register_more(app)
    for info in app.registered_commands:
        # the command list shows each docstring's first paragraph whole (wrapped), never cut with "..."
        doc = (info.callback.__doc__ or "") if info.callback else ""
        if info.short_help is None and doc:
            info.short_help = " ".join(doc.strip().split("\n\n")[0].split())


_register()


def fail(message: str, code: int = 2) -> None:
    """Print one line to stderr and leave with ``code`` (line breaks in the message shown escaped)."""
    print(f"kvdash: error: {one_line(message)}", file=sys.stderr)
    raise SystemExit(code)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    from typer.exceptions import TyperException

    args = sys.argv[1:] if argv is None else argv
    if not args:  # bare `kvdash`: the help, on several lines, and success
        args = ["--help"]
    from kvdash.commands.common import flush_notes

    flush_notes(show=False)  # none left from an earlier in-process run
    from kvdash.interrupts import taken_signal, terminate_like_interrupt

    taken_signal()  # none left from an earlier in-process run
    try:
        with terminate_like_interrupt():  # SIGTERM and SIGHUP: one line and 128 + N, as Ctrl-C's
            code = app(args=args, prog_name="kvdash", standalone_mode=False)
    except BrokenPipeError:  # `kvdash ... | head`: the reader left; that is not an error
        _quiet_pipe()
        raise SystemExit(0) from None
    except SystemExit as exc:  # rich (Console.on_broken_pipe) and click turn a closed pipe into exit 1
        if exc.code == 1 and (isinstance(exc.__context__, BrokenPipeError)
                              or type(sys.stdout).__name__ == "_PacifyFlushWrapper"):
            _quiet_pipe()
            raise SystemExit(0) from None
        raise
    except InputError as exc:
        flush_notes(show=False)  # bad input: its one line alone
        fail(str(exc))
    except TyperException as exc:  # click usage errors: bad option names or types
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        hint = getattr(exc, "param_hint", None) or ""
        param = getattr(exc, "param", None)
        if param is not None and not hint:
            hint = "/".join(getattr(param, "opts", []) or [getattr(param, "name", "")])
        if hint and isinstance(hint, str) and hint not in message:
            message = f"{hint}: {message}"
        ctx = getattr(exc, "ctx", None)
        where = getattr(ctx, "command_path", "") or "kvdash"
        if ctx is None and args[0] in _command_names():  # click raises a missing option value without its context
            where = f"kvdash {args[0]}"
        fail(shorten_words(" ".join(message.split())) + f" (see {where} --help)", getattr(exc, "exit_code", 2) or 2)
    except Interrupted as exc:  # a command says what the interruption left (sweep: the old report)
        fail(str(exc), exc.code)
    except (KeyboardInterrupt, RuntimeError) as exc:
        # Ctrl-C, or SIGTERM/SIGHUP where a command catches them (Terminated); or one Python wrapped in a
        # RuntimeError as a command's lazy import set up a class (kvdash.interrupts.from_interrupt)
        from kvdash.interrupts import from_interrupt

        stop = from_interrupt(exc)
        if stop is None:
            raise
        fail(interrupted_text(stop), signal_code(stop))
    except OSError as exc:  # a folder that cannot be written, a full disk: one line, not a traceback
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        fail(f"{where}{exc.strerror or exc}")
    flush_notes()
    try:
        sys.stdout.flush()  # a closed pipe shows here for output still buffered
    except BrokenPipeError:
        _quiet_pipe()
        raise SystemExit(0) from None
    code = code if isinstance(code, int) else 0
    if code == 130:  # typer turns a KeyboardInterrupt inside a command into a silent Exit(130): say it
        signum = taken_signal()  # SIGTERM or SIGHUP raised as one (Terminated): its name and 128 + N
        if signum:
            fail(interrupted_text(Terminated(signum)), 128 + signum)
        print("kvdash: error: interrupted", file=sys.stderr)
    if argv is None and args[0] in FAST_EXIT:
        _exit_now(code)
    raise SystemExit(code)


def _command_names() -> set[str]:
    """The subcommands' names (``calc``, ``sweep``, ...), as typed."""
    import typer

    group = typer.main.get_command(app)
    return set(getattr(group, "commands", {}))


FAST_EXIT = {"sweep"}  # commands whose process ends at once when they are done (see _exit_now)


def _exit_now(code: int) -> None:
    """End the process now that the command is done: its files are written and closed, stdout is flushed.
    The interpreter's own teardown (freeing a million-point frame, unloading polars and ~500 modules) takes
    60-90 ms of a 1.2 s sweep and leaves nothing behind that matters.  Only for a real process (``argv`` not
    given): in-process callers such as the tests get SystemExit as usual."""
    import os

    try:
        sys.stderr.flush()
    except (OSError, ValueError):  # pragma: no cover - stderr closed
        pass
    os._exit(code)


def _quiet_pipe() -> None:
    """Point stdout at /dev/null so that the interpreter's last flush cannot fail on the closed pipe."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # pragma: no cover - stdout without a file descriptor
        pass


if __name__ == "__main__":  # pragma: no cover
    main()

"""A Ctrl-C in an exception's chain, and SIGTERM / SIGHUP raised as one: shared by the console script's entry
(:mod:`kvdash.launch`), :func:`kvdash.cli.main` and the sweep.  Imports nothing of kvdash's, so the entry stays
light and neither imports the other."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# the checkpoints of the deferred interrupts in force (kvdash.report.outdir.deferred_interrupt), innermost last
_CHECKPOINTS: list[Callable[[], None]] = []


def checkpoint() -> None:
    """Raise a Ctrl-C (SIGTERM, SIGHUP) that :func:`kvdash.report.outdir.deferred_interrupt` noted, here and now;
    nothing where none is noted or none is in force.  Long pure-Python work inside a deferred section calls it
    between its units (each timed simulation of a grid: an SLO search of gpt-oss-120b had held a Ctrl-C 42 s)."""
    if _CHECKPOINTS:
        _CHECKPOINTS[-1]()


def push_checkpoint(check: Callable[[], None]) -> None:
    _CHECKPOINTS.append(check)


def pop_checkpoint() -> None:
    _CHECKPOINTS.pop()


def from_interrupt(exc: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C that raised ``exc`` or is in its chain, else None: Python wraps one that lands while a class
    body's descriptors are set up (``__set_name__``: ``platform.uname_result`` as typer imports ``platform``, a
    dataclass's fields as a command's lazy import runs) in a RuntimeError whose cause is the KeyboardInterrupt."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


CAUGHT = ("SIGINT", "SIGTERM", "SIGHUP")  # the signals every command turns into one line


def _signals() -> list[int]:
    """The :data:`CAUGHT` signals this platform has, less those the process was started ignoring: ``nohup``
    ignores SIGHUP, and a non-interactive shell's ``&`` SIGINT, so that the run outlives its terminal; a handler
    put over them would end a ``nohup kvdash sweep`` when the terminal closes (Python itself leaves an ignored
    SIGINT ignored)."""
    return [s for s in (getattr(signal, name) for name in CAUGHT if hasattr(signal, name))
            if signal.getsignal(s) is not signal.SIG_IGN]


_TAKEN: list[int] = []  # the signals terminate_like_interrupt's handler raised, last last


def taken_signal() -> int:
    """The SIGTERM or SIGHUP the handler last raised as an interruption (0: none), forgotten once read: click turns
    the KeyboardInterrupt a command does not catch into a bare exit 130, and :func:`kvdash.cli.main` names the
    signal and its code from this."""
    signum = _TAKEN[-1] if _TAKEN else 0
    _TAKEN.clear()
    return signum


def _raise_for(signum: int) -> None:
    from kvdash.errors import Terminated

    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


@contextmanager
def terminate_like_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`~kvdash.errors.Terminated` (a KeyboardInterrupt) as Ctrl-C does, so a
    command they end says so in one line (exit 128 + the signal's number) and a sweep cleans up its work folder
    first; :func:`kvdash.cli.main` runs every command inside it (``simulate`` ended silently on SIGTERM, exit 143).
    A command may put its own handlers over it (the exporter's SIGTERM, the dashboard's loop handlers)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        _TAKEN.append(signum)
        _raise_for(signum)

    previous = {s: signal.signal(s, handler) for s in _signals() if s != signal.SIGINT}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)

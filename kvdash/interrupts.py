"""A Ctrl-C in an exception's chain: shared by the console script's entry (:mod:`kvdash.launch`) and
:func:`kvdash.cli.main`.  Imports nothing, so the entry stays light and neither imports the other."""

from __future__ import annotations

from collections.abc import Callable

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

"""The ``kvdash`` console script: :func:`kvdash.cli.main`, with Ctrl-C during start-up handled.

Importing the command line (typer, click, rich: about 0.1 s) happens before :func:`kvdash.cli.main` can
catch anything; a Ctrl-C in that window would print a KeyboardInterrupt traceback from the middle of
some import.  This module imports nothing heavy, so the window it leaves is the interpreter's own
start-up; a Ctrl-C during the imports is the same one line as later: ``kvdash: error: interrupted``,
exit 130.
"""

from __future__ import annotations

import sys


def _interrupted() -> None:
    try:
        sys.stderr.write("kvdash: error: interrupted\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # pragma: no cover - stderr closed
        pass
    import os

    os._exit(130)  # half-imported modules: skip the interpreter's teardown


def main() -> None:
    try:
        from kvdash.cli import main as run
    except KeyboardInterrupt:
        _interrupted()
        raise  # pragma: no cover - _interrupted exits
    except BaseException as exc:
        # imported here, not at this module's top, where a Ctrl-C while Python read kvdash/interrupts.py printed a
        # traceback from launch.py (once in 30 runs of test_ctrl_c_during_start_up_is_one_line under CI's load)
        from kvdash.interrupts import from_interrupt

        if from_interrupt(exc) is not None:
            _interrupted()
        raise
    try:
        run()
    except KeyboardInterrupt:  # pragma: no cover - cli.main catches it once the command line is built
        _interrupted()


if __name__ == "__main__":  # pragma: no cover
    main()

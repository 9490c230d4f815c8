"""One way for tests to run the kvdash command line in-process."""

from __future__ import annotations

import pytest

from kvdash.cli import main


def run(args, capsys):
    """``kvdash ARGS`` in-process: (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in args])
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err

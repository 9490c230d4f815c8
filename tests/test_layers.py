"""The calculator core stays pure: it imports none of the UI, data-frame, template or driver libraries."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("textual", "polars", "jinja2", "pynvml", "matplotlib", "rich", "typer")


def test_core_imports_no_heavy_library():
    """Importing kvdash.answer.calc (the core and the engine rules under it) loads none of textual, polars,
    jinja2, pynvml, matplotlib, rich, typer."""
    code = ("import sys, kvdash.answer.calc, kvdash.core.model; "
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert "" == out


def test_cli_help_imports_no_heavy_library():
    """`kvdash --help` loads no polars, textual, jinja2, pynvml or matplotlib (start-up stays fast)."""
    code = ("import sys\nfrom kvdash.cli import app\n"
            "try:\n    app(['--help'], standalone_mode=False)\nexcept SystemExit:\n    pass\n"
            f"print('LOADED=' + ','.join(m for m in {HEAVY[:4] + ('matplotlib',)!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "LOADED=\n" in out or out.rstrip().endswith("LOADED=")


def test_quick_commands_import_no_rich():
    """`kvdash calc`, `models` and `gpus` draw their own tables: rich's import and layout cost ~60 ms."""
    code = ("import sys, io, contextlib\nfrom kvdash.cli import main\n"
            "for args in (['calc'], ['calc', '--group', '200,825,1525', '--target', '50'], ['models'], ['gpus']):\n"
            "    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
            "        main(args)\n"
            "print('LOADED=' + ','.join(m for m in ('rich', 'polars', 'textual', 'jinja2', 'pynvml')"
            " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.rstrip().endswith("LOADED=")


def test_command_modules_keep_annotations_evaluated():
    """typer `eval`s string annotations of every command on each run (~25 ms): command modules must not
    use ``from __future__ import annotations``."""
    from pathlib import Path

    import kvdash.commands

    folder = Path(kvdash.commands.__file__).parent
    offenders = [p.name for p in folder.glob("*.py") if "from __future__ import annotations" in p.read_text()]
    assert [] == offenders

"""Rendering: the Jinja2 environments (one per kind, templates compiled once, Markdown escaping filters) and
the Markdown and HTML reports from a context of :func:`kvdash.report.analysis.build_context`."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from kvdash import __version__


def _bytecode_cache() -> Any:
    """Compiled templates kept under the user's cache folder (compiling both takes ~0.1 s, a sixth of a small
    sweep); jinja2 checks each entry against the template's source.  None when the folder is not writable."""
    import jinja2

    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kvdash" / f"templates-{__version__}"
    try:
        base.mkdir(parents=True, exist_ok=True)
        probe = base / f".probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError:
        return None
    return jinja2.FileSystemBytecodeCache(str(base))


@functools.cache  # one environment per kind per process: templates load once (see warm_up)
def _env(autoescape: bool) -> Any:
    import jinja2

    def source(name: str) -> tuple[str, str, Callable[[], bool]]:
        text = (resources.files("kvdash.templates") / name).read_text(encoding="utf-8")
        return text, name, lambda: True

    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(source),
        autoescape=autoescape, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
        undefined=jinja2.StrictUndefined, bytecode_cache=_bytecode_cache(),
    )
    from kvdash.markdown import md, md_code, md_marked

    env.filters["md"] = md  # every user string in report.md passes one of these three
    env.filters["md_code"] = md_code
    env.filters["md_marked"] = md_marked  # kvdash's sentences with their own **bold** / `code` marks
    env.filters["bold"] = lambda s: _inline(s, "**", "strong")
    env.filters["unquote"] = lambda s: _inline(s, "`", "code")
    return env


def _inline(text: str, mark: str, tag: str) -> Any:
    """HTML for Markdown-style ``**bold**`` or ```code``` spans: the text escaped first, then the pairs of
    marks turned into tags."""
    import markupsafe

    pieces = str(markupsafe.escape(str(text))).split(mark)
    out = "".join(p if i % 2 == 0 else f"<{tag}>{p}</{tag}>" for i, p in enumerate(pieces))
    return markupsafe.Markup(out)


def warm_up() -> None:
    """Load what rendering needs (jinja2, both templates) and the claims registry ahead of use.

    ``kvdash sweep`` runs this in a thread while polars evaluates a large grid: evaluation releases the GIL
    and leaves part of a core idle, so this Python-only work costs no wall time there."""
    _env(False).get_template("report.md.j2")
    _env(True).get_template("report.html.j2")
    import markupsafe  # noqa: F401  (the HTML filters import it on first use)


def render_markdown(ctx: dict[str, Any]) -> str:
    return str(_env(False).get_template("report.md.j2").render(**ctx))


def render_html(ctx: dict[str, Any], svgs: dict[str, str]) -> str:
    return str(_env(True).get_template("report.html.j2").render(**ctx, svgs=svgs))


def _strip_xml_header(svg: str) -> str:
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg

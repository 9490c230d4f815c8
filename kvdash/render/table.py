"""Box-drawn tables for the quick commands (``calc``, ``models``, ``gpus``), without importing rich.

rich's import and its first table layout cost ~60 ms, more than the whole rest of ``kvdash calc``;
these commands are meant to start as fast as ``nvitop --help`` (benchmarks/startup.py), so they draw
their tables here.  The look follows rich's default (a heavy header rule, light body), with one
difference that matters for numbers: a cell is never cut short with an ellipsis.  Text columns wrap
at word boundaries; value columns are kept whole and, when a terminal is too narrow even for those,
the line runs long rather than hiding digits.

Colour (bold headers, dim explanations, italic titles) is used only on a terminal, honouring
``NO_COLOR``, ``FORCE_COLOR`` and ``TERM=dumb``; the width is the terminal's (``COLUMNS`` first,
80 when output is not a terminal), as rich does.
"""

from __future__ import annotations

import os
import shutil
import sys
import unicodedata
from dataclasses import dataclass, field
from typing import IO, Literal

Justify = Literal["left", "right"]
_SGR = {"bold": "1", "dim": "2", "italic": "3"}


@dataclass(frozen=True)
class Styled:
    """A cell with its own style, e.g. ``Styled("GPU KV cache size: ...", "bold")``."""

    text: str
    style: str = ""


@dataclass
class Column:
    header: str
    justify: Justify = "left"
    wrap: bool = True
    style: str = ""


@dataclass
class Table:
    """Rows of text cells under an optional title; ``show_header=False`` draws a plain box."""

    title: str | None = None
    show_header: bool = True
    columns: list[Column] = field(default_factory=list)
    rows: list[list[Styled]] = field(default_factory=list)

    def add_column(self, header: str, justify: Justify = "left", wrap: bool = True, style: str = "") -> None:
        self.columns.append(Column(header, justify, wrap, style))

    def add_row(self, *cells: str | Styled) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"row has {len(cells)} cells for {len(self.columns)} columns")
        self.rows.append([c if isinstance(c, Styled) else Styled(c) for c in cells])


def cell_width(text: str) -> int:
    """Terminal columns ``text`` takes: East Asian wide characters count 2, combining marks 0.

    >>> cell_width("slots"), cell_width("ＧＰＵ"), cell_width("e\\u0301")
    (5, 6, 1)
    """
    if text.isascii():
        return len(text)
    return sum(0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1
               for ch in text)


def _split_long(word: str, width: int) -> list[str]:
    """Cut a word wider than ``width`` into pieces that fit (used only when a column must)."""
    pieces, cur, cur_w = [], "", 0
    for ch in word:
        w = cell_width(ch)
        if cur and cur_w + w > width:
            pieces.append(cur)
            cur, cur_w = "", 0
        cur += ch
        cur_w += w
    return pieces + [cur]


def wrap(text: str, width: int, cut: bool = True) -> list[str]:
    """Greedy word wrap to ``width`` columns; a word longer than the width is cut, or with ``cut=False`` (a path
    to copy) kept whole on its own line.

    >>> wrap("floor(budget / bytes per block)", 14)
    ['floor(budget /', 'bytes per', 'block)']
    >>> wrap("Report: /a/very/long/path/report.md (and more)", 12, cut=False)
    ['Report:', '/a/very/long/path/report.md', '(and more)']
    """
    lines: list[str] = []
    for paragraph in text.split("\n"):
        line, line_w = "", 0
        for word in paragraph.split():
            w = cell_width(word)
            if w > width and cut:
                if line:
                    lines.append(line)
                *full, last = _split_long(word, width)
                lines.extend(full)
                line, line_w = last, cell_width(last)
            elif not line:
                line, line_w = word, w
            elif line_w + 1 + w <= width:
                line, line_w = f"{line} {word}", line_w + 1 + w
            else:
                lines.append(line)
                line, line_w = word, w
        lines.append(line)
    return lines


def _longest_word(text: str) -> int:
    return max((cell_width(w) for w in text.split()), default=0)


def column_widths(table: Table, width: int) -> list[int]:
    """Content width of each column so the table fits ``width`` terminal columns when it can.

    Each column wants its widest line.  When the table is too wide, the widest columns give way first
    (the largest common cap that fits): a text column down to its longest word, a value column down
    to its widest value (only its header wraps).  If that still does not fit, words of text and
    headers are cut; values never are, and a table too wide even so runs past ``width``.
    """
    cols = table.columns
    texts = [[c.header] if table.show_header else [] for c in cols]
    for row in table.rows:
        for i, cell in enumerate(row):
            texts[i].append(cell.text)
    natural = [max((cell_width(line) for t in ts for line in t.split("\n")), default=0) for ts in texts]
    skip = 1 if table.show_header else 0
    # narrowest a column may go: its values' longest word (wrapping) or whole width (not wrapping) ...
    value_floor = [max([_longest_word(t) if cols[i].wrap else cell_width(t) for t in ts[skip:]], default=0)
                   for i, ts in enumerate(texts)]
    # ... and its header's longest word; cutting words, only the widest single character remains
    floor_word = [max(v, _longest_word(ts[0]) if skip else 0) for v, ts in zip(value_floor, texts, strict=True)]
    widest_char = [max((cell_width(ch) for t in ts for ch in t), default=1) for ts in texts]
    floor_cut = [max(w, 1) if c.wrap else max(v, w, 1) for v, w, c in zip(value_floor, widest_char, cols, strict=True)]
    available = width - (3 * len(cols) + 1)
    if sum(natural) <= available:
        return natural
    for floors in (floor_word, floor_cut):
        def fitted(cap: int, floors: list[int] = floors) -> list[int]:
            return [min(n, max(f, cap)) for n, f in zip(natural, floors, strict=True)]

        if sum(min(n, f) for n, f in zip(natural, floors, strict=True)) > available:
            continue
        lo, hi = 0, max(natural)
        while lo < hi:  # the largest cap that fits
            mid = (lo + hi + 1) // 2
            if sum(fitted(mid)) <= available:
                lo = mid
            else:
                hi = mid - 1
        widths = fitted(lo)
        # hand the columns left over to the capped columns, leftmost first
        spare = available - sum(widths)
        for i in range(len(widths)):
            if spare <= 0:
                break
            extra = min(spare, natural[i] - widths[i])
            widths[i] += extra
            spare -= extra
        return widths
    return [min(n, f) for n, f in zip(natural, floor_word, strict=True)]  # too narrow even so: run long, cut nothing


def _paint(text: str, style: str, color: bool) -> str:
    codes = ";".join(_SGR[s] for s in style.split() if s in _SGR)
    return f"\x1b[{codes}m{text}\x1b[0m" if color and codes and text else text


def render_table(table: Table, width: int = 80, color: bool = False) -> list[str]:
    """The table's lines, each exactly as wide as the table (plus colour codes when ``color``)."""
    widths = column_widths(table, width)
    cols = table.columns

    def rule(left: str, mid: str, right: str, fill: str) -> str:
        return left + mid.join(fill * (w + 2) for w in widths) + right

    def body(cells: list[Styled], bar: str, styles: list[str]) -> list[str]:
        # values always fit their column and stay exactly as given; text and headers wrap
        wrapped = [wrap(c.text, w) if col.wrap or cell_width(c.text) > w else [c.text]
                   for c, w, col in zip(cells, widths, cols, strict=True)]
        height = max(len(w) for w in wrapped)
        out = []
        for k in range(height):
            parts = []
            for lines, w, col, style in zip(wrapped, widths, cols, styles, strict=True):
                text = lines[k] if k < len(lines) else ""
                pad = " " * max(0, w - cell_width(text))
                text = _paint(text, style, color)
                parts.append(f" {pad}{text} " if col.justify == "right" else f" {text}{pad} ")
            out.append(bar + bar.join(parts) + bar)
        return out

    lines: list[str] = []
    if table.title:
        lines += [_paint(t, "italic", color) for t in wrap(table.title, width)]
    if table.show_header:
        lines.append(rule("┏", "┳", "┓", "━"))
        header = [Styled(c.header) for c in cols]
        lines += body(header, "┃", ["bold"] * len(cols))
        lines.append(rule("┡", "╇", "┩", "━"))
    else:
        lines.append(rule("┌", "┬", "┐", "─"))
    for row in table.rows:
        styles = [" ".join(s for s in (col.style, cell.style) if s) for col, cell in zip(cols, row, strict=True)]
        lines += body(row, "│", styles)
    lines.append(rule("└", "┴", "┘", "─"))
    return lines


def use_color(stream: IO[str]) -> bool:
    """Colour on a terminal only; ``NO_COLOR`` turns it off, ``FORCE_COLOR`` on (no-color.org)."""
    if os.environ.get("FORCE_COLOR"):
        return True
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def terminal_width() -> int:
    """``COLUMNS`` if set, else the terminal's width, else 80 (output to a file or a pipe)."""
    return shutil.get_terminal_size((80, 24)).columns


def print_tables(tables: list[Table], footer: str = "", file: IO[str] | None = None,
                 width: int | None = None, color: bool | None = None, header: str = "") -> None:
    """Write a bold ``header`` (the answer), then ``tables`` one after another (and a dim footer line)
    to ``file`` (stdout)."""
    stream = file if file is not None else sys.stdout
    width = width or terminal_width()
    color = use_color(stream) if color is None else color
    out: list[str] = [_paint(line, "bold", color) for line in wrap(header, width)] if header else []
    for table in tables:
        out += render_table(table, width, color)
    if footer:
        out += [_paint(line, "dim", color) for line in wrap(footer, width)]
    stream.write("\n".join(out) + "\n")

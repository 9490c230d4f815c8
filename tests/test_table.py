"""The box-drawn tables of calc/models/gpus: they fit the width when they can and never lose a character."""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st

from kvdash.render.table import Styled, Table, cell_width, column_widths, print_tables, render_table, wrap


def body_cells(lines: list[str], ncols: int) -> list[list[str]]:
    """The text of each column, read back from the rendered body lines (one list per column)."""
    cols: list[list[str]] = [[] for _ in range(ncols)]
    for line in lines:
        if line.startswith("│"):
            for i, part in enumerate(line.split("│")[1:-1]):
                cols[i].append(part.strip())
    return cols


def squash(text: str) -> str:
    return "".join(text.split())


def test_wrap_keeps_every_word_and_cuts_only_longer_words():
    assert wrap("floor(budget / bytes per block)", 14) == ["floor(budget /", "bytes per", "block)"]
    assert wrap("abcdefghij", 4) == ["abcd", "efgh", "ij"]
    assert wrap("", 5) == [""]


def test_cell_width_counts_wide_and_combining_characters():
    assert 6 == cell_width("ＧＰＵ")  # fullwidth letters take two columns each
    assert 1 == cell_width("e\u0301")  # e + combining acute accent


def test_values_are_never_cut_and_text_wraps():
    t = Table(title="Pool")
    t.add_column("figure")
    t.add_column("value", "right", wrap=False)
    t.add_column("how", style="dim")
    t.add_row("KV budget per rank", "12,884,901,888 B (12.00 GiB)", "declared KV budget per rank, long explanation")
    lines = render_table(t, width=60)
    assert all(cell_width(line) == 60 for line in lines[1:]), lines
    assert any("12,884,901,888 B (12.00 GiB)" in line for line in lines)  # on one line, whole
    assert not any("…" in line for line in lines)


def test_too_narrow_runs_long_instead_of_hiding_digits():
    t = Table()
    t.add_column("a", wrap=False)
    t.add_column("b", wrap=False)
    t.add_row("123,456,789,012", "987,654,321,098")
    lines = render_table(t, width=20)
    assert any("123,456,789,012" in line for line in lines)
    assert any("987,654,321,098" in line for line in lines)


def test_header_wraps_over_a_narrow_value_column():
    t = Table()
    t.add_column("variant")
    t.add_column("contiguous requests", "right", wrap=False)
    t.add_row("as configured", "19")
    widths = column_widths(t, 30)
    assert sum(widths) + 7 <= 30
    # the header wrapped at its space (no word cut), and the text column kept its longest word whole
    assert len("contiguous") <= widths[1] < len("contiguous requests") and widths[0] >= len("configured")


def test_colour_only_on_request_or_terminal(monkeypatch):
    t = Table(title="T")
    t.add_column("x")
    t.add_row(Styled("bold line", "bold"))
    plain, coloured = io.StringIO(), io.StringIO()
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    print_tables([t], file=plain, width=40)  # a StringIO is not a terminal
    assert "\x1b[" not in plain.getvalue()
    print_tables([t], file=coloured, width=40, color=True)
    assert "\x1b[1mbold line\x1b[0m" in coloured.getvalue()
    monkeypatch.setenv("FORCE_COLOR", "1")
    forced = io.StringIO()
    print_tables([t], file=forced, width=40)
    assert "\x1b[" in forced.getvalue()


WORD = st.text(alphabet=st.sampled_from("abcxyz0123456789,.()%-ＧＰＵ"), min_size=1, max_size=18)
CELL = st.lists(WORD, min_size=0, max_size=6).map(" ".join)


@st.composite
def tables(draw: st.DrawFn) -> Table:
    ncols = draw(st.integers(1, 6))
    t = Table(title=draw(st.none() | CELL), show_header=draw(st.booleans()))
    for _ in range(ncols):
        t.add_column(draw(CELL), draw(st.sampled_from(["left", "right"])), wrap=draw(st.booleans()))
    for _ in range(draw(st.integers(0, 5))):
        t.add_row(*draw(st.lists(CELL, min_size=ncols, max_size=ncols)))
    return t


@settings(max_examples=300, deadline=None)
@given(tables(), st.integers(10, 160))
def test_property_rectangular_lossless_and_within_width_when_possible(table, width):
    lines = render_table(table, width=width)
    n_title = len(lines) - len([ln for ln in lines if ln[:1] in "┏┃┡│┌└"])
    box = lines[n_title:]
    # a rectangle: every line of the box is equally wide
    assert len({cell_width(line) for line in box}) == 1, box
    # lossless: each column's cells, read back, hold exactly the characters put in (order kept)
    cols = body_cells(box, len(table.columns))
    for i in range(len(table.columns)):
        assert squash("".join(cols[i])) == squash("".join(row[i].text for row in table.rows))
    # within the width whenever the values that may not wrap leave room for one (wide) character a column
    need = sum(max([cell_width(r[i].text) for r in table.rows if not c.wrap] + [2])
               for i, c in enumerate(table.columns)) + 3 * len(table.columns) + 1
    if need <= width:
        assert cell_width(box[0]) <= width

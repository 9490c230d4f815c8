"""Markdown safety: every user string that reaches Markdown passes kvdash.markdown.md.

The rendered text is parsed with markdown-it-py (CommonMark plus GitHub's table and autolink rules,
the "gfm-like" preset) rather than searched for substrings, so a test fails when a payload changes
the *structure*: a table cell more, an image, a link, raw HTML, a fold closed early.  GitHub mentions
are recognised in rendered text by ``@`` directly followed by a letter or digit (its mention filter
skips code); ``md`` puts a zero-width space between them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from kvdash.cli import main
from kvdash.errors import flat as one_line
from kvdash.markdown import md, md_code

PAYLOADS = [
    "@octocat", "hi @org/team", "\\@octocat", "@@x", "a@b.c", "&#64;octocat", "\u2028@x",
    "![x](http://evil.example/a.png)", "![x][r]", "[click](javascript:alert(1))", "[x][ref]", "[ref]: http://e.x",
    "[^1]: note", "<https://evil.example>", "https://evil.example/x.png", "www.evil.example",
    "<img src=x onerror=alert(1)>", "<script>alert(1)</script>", "</details>", "<details><summary>x",
    "<!-- open comment", "</td></tr></table>", "&lt;img&gt;", "a|b", "a\\|b", "a\\", "||||", "| x | y |",
    "line1\nline2", "line\r\n| x | y |\n|---|---|", "`code`", "``", "**bold** _it_ ~~gone~~", "# heading",
    "- item", "1. item", "---", "    indented code", "> quote", "\x00nul\x1bescape", "\u202eevil\u202c",
    "x" * 5_000, "name_with_under_scores", "0.9", "-5",
]


def parser() -> MarkdownIt:
    """GitHub-flavoured Markdown as GitHub renders it: its autolink extension links ``www.`` and
    ``http(s)://`` addresses and e-mail addresses, never a bare domain such as ``0.FI`` (linkify-it's
    "fuzzy" links, switched off here)."""
    md = MarkdownIt("gfm-like")
    md.linkify.set({"fuzzy_link": False})
    return md


def flat(tokens):
    for t in tokens:
        yield t
        if t.children:
            yield from flat(t.children)


def visible(tokens) -> str:
    return "".join(t.content for t in flat(tokens) if t.type in ("text", "code_inline"))


def assert_inert(tokens, *, allowed_html: int = 0) -> None:
    kinds = [t.type for t in flat(tokens)]
    assert "image" not in kinds and "link_open" not in kinds, kinds
    html = [t for t in flat(tokens) if t.type in ("html_inline", "html_block")]
    assert len(html) == allowed_html, [t.content for t in html]
    for t in flat(tokens):
        if t.type == "text":
            assert not re.search(r"(?:^|\W)@[A-Za-z0-9]", t.content), t.content  # a GitHub mention


def table_rows(text: str) -> list[list[str]]:
    """The cells of every row of the first table in ``text``, as markdown-it parses them."""
    tokens = parser().parse(text)
    rows, row = [], None
    for i, t in enumerate(tokens):
        if t.type == "tr_open":
            row = []
        elif t.type in ("th_open", "td_open"):
            assert row is not None
            row.append(visible([tokens[i + 1]]) if tokens[i + 1].type == "inline" else "")
        elif t.type == "tr_close":
            rows.append(row)
    return rows


def assert_tables_keep_columns(text: str) -> list:
    """Every row of every table in ``text`` has as many cells as the table's header (markdown-it pads
    or drops cells to the header's count, so compare with the source line's own cell count too)."""
    tokens = parser().parse(text)
    lines = text.splitlines()
    tables = 0
    for t in tokens:
        if t.type == "table_open":
            tables += 1
            start, end = t.map
            widths = set()
            for line in lines[start:end]:
                if set(line.strip()) <= set("|-: "):
                    continue
                row = parser().parse(f"{lines[start]}\n{lines[start + 1]}\n{line}\n")
                widths.add(sum(1 for x in row if x.type in ("td_open",)) or None)
                # the source line itself: cells split on unescaped pipes
                widths.add(len(re.split(r"(?<!\\)\|", line.strip().strip("|"))))
            assert len(widths) == 1, (lines[start], widths)
    assert tables or "|" not in text
    return tokens


class TestEscape:
    @pytest.mark.parametrize("payload", PAYLOADS)
    def test_table_cell_keeps_three_columns_and_is_inert(self, payload):
        """A payload in the middle cell of a three-column row: still three cells, no image, link,
        HTML or mention, and the cell shows the payload's text (on one line, zero-width spaces aside)."""
        text = f"| a | b | c |\n|---|---|---|\n| left | {md(payload)} | right |\n"
        rows = table_rows(text)
        assert [3, 3] == [len(r) for r in rows]
        assert ["left", "right"] == [rows[1][0], rows[1][2]]
        assert one_line(payload).strip() == rows[1][1].replace("\u200b", "")
        assert_inert(parser().parse(text))

    @pytest.mark.parametrize("payload", PAYLOADS)
    def test_paragraph_is_one_inert_paragraph(self, payload):
        """A payload that starts a line (a grid's description) is one plain paragraph: no heading, list,
        rule, quote, code block or table."""
        tokens = parser().parse(md(payload) + "\n")
        blocks = [t.type for t in tokens]
        assert ["paragraph_open", "inline", "paragraph_close"] == blocks
        assert_inert(tokens)

    @pytest.mark.parametrize("payload", PAYLOADS)
    def test_fold_stays_open_until_its_own_close(self, payload):
        """Inside <details>: the only HTML is the fold's own two tags, so "</details>" in a name cannot
        close it early."""
        tokens = parser().parse(f"<details><summary>s</summary>\n\n{md(payload)}\n\n</details>\n")
        assert_inert(tokens, allowed_html=2)

    @pytest.mark.parametrize("payload", PAYLOADS)
    def test_code_span_cell(self, payload):
        """md_code keeps the columns and shows the payload literally (code spans render no HTML, links or
        mentions)."""
        text = f"| a | b | c |\n|---|---|---|\n| left | {md_code(payload)} | right |\n"
        rows = table_rows(text)
        assert [3, 3] == [len(r) for r in rows]
        assert one_line(payload).strip() == rows[1][1].strip()

    @settings(max_examples=400, deadline=None)
    @given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
           | st.text(alphabet="@![]()<>/|\\`*_~#-+=.:&; \nabc1", max_size=40))
    def test_any_string_keeps_columns(self, payload):
        """Property: for any string, a table row keeps its three cells and nothing renders as HTML, link,
        image or mention."""
        text = f"| a | b | c |\n|---|---|---|\n| left | {md(payload)} | right |\n"
        rows = table_rows(text)
        assert [3, 3] == [len(r) for r in rows]
        assert_inert(parser().parse(text))

    def test_limit_shortens(self):
        """md(text, limit) keeps at most ``limit`` characters of the original and says how long it was."""
        assert "xxx... (1,000 chars)" == md("x" * 1000, 20)


HOSTILE = """
title: "@octocat ![t](http://evil.example/t.png) </details> <img src=x>"
description: "desc | with | pipes\\n- and a list <script>x</script> [l](http://e.x)"
models:
  - {name: "m|@evil <b>![i](http://e.x/i.png)", preset: tutorial-gqa-80l}
workloads:
  "w|</details>@x":  {length: 825, max_reserved: 2048}
grid:
  kv_dtype: [bf16, fp8]
gates:
  - {name: "gate\\n@team </details>| x", metric: paged_requests, min: 100000}
"""


class TestOutputs:
    def test_report_md_tables_keep_columns(self, tmp_path, capsys):
        """report.md of a grid whose title, description, model, workload and gate names carry payloads:
        every table row has its header's cell count, the only images are the report's own charts, the
        only link is results.csv, folds balance, and no mention survives."""
        grid = tmp_path / "g.yaml"
        grid.write_text(HOSTILE)
        with pytest.raises(SystemExit) as exc:
            main(["sweep", str(grid), "--out", str(tmp_path / "r"), "--check", "-q"])
        assert 1 == exc.value.code
        err = capsys.readouterr().err
        text = (tmp_path / "r" / "report.md").read_text()
        tokens = assert_tables_keep_columns(text)
        images = [t.attrGet("src") for t in flat(tokens) if t.type == "image"]
        assert images and all(src in ("capacity.svg", "ratio.svg", "waste.svg") for src in images)
        assert ["results.csv"] == [t.attrGet("href") for t in flat(tokens) if t.type == "link_open"]
        html = "".join(t.content for t in flat(tokens) if t.type in ("html_block", "html_inline"))
        assert html.count("<details") == html.count("</details>") > 0
        assert "<img" not in html and "<script" not in html and "<b>" not in html
        for t in flat(tokens):
            if t.type == "text":
                assert not re.search(r"(?:^|\W)@[A-Za-z0-9]", t.content), t.content
        # --check: one line per failing point, the gate name on that line, escaped
        lines = err.strip().splitlines()
        assert 2 == len(lines) and all(line.startswith("gate 'gate @&#8203;team &lt;/details&gt;\\| x' failed")
                                       for line in lines)

    def test_snapshot_markdown_escapes_gpu_names(self, tmp_path):
        """The live snapshot's Markdown escapes what a replay file or engine reports (GPU names, model)."""
        from kvdash.sources.base import GPUReading, Snapshot
        from kvdash.tui.app import write_snapshot

        snap = Snapshot(time=0.0, source="replay @x", gpus=(GPUReading(
            index=0, name="H100 | <img src=x> @team\n| evil |", used_bytes=1 << 30, total_bytes=80 << 30,
            utilization_percent=5),))
        paths = write_snapshot(tmp_path, snap, {"ok": False}, {"model": "m | x @team"})
        text = Path(paths[1]).read_text()
        rows = table_rows(text)
        assert {2, 5} == {len(r) for r in rows}  # the settings table (2 columns) and the GPU table (5)
        assert 2 == sum(len(r) == 5 for r in rows)  # header and one GPU: the name did not add a row
        assert_inert(parser().parse(text))

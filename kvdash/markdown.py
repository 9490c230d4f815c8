"""One escaping function for every user string that reaches Markdown.

Grid files arrive in pull requests from anyone, and their names (models, workloads, gates, titles)
end up in ``report.md``, in ``kvdash diff`` (posted as a PR comment), in ``--check`` lines (written to
the job summary) and in the live snapshot file.  :func:`md` makes such a string inert text on
GitHub:

* one line: newlines and other line or control characters become a space, so a string can neither
  end a table row nor start a heading, list or fold; leading and trailing spaces are dropped (four
  leading spaces would start a code block);
* ``|`` is escaped (``\\|``), so it cannot add a table column; ``\\`` is escaped first so a trailing
  backslash cannot swallow the next ``|``;
* ``<``, ``>`` and ``&`` become entities: no HTML tag, no ``</details>`` that closes a fold early,
  no ``<https://...>`` autolink, no ``<img>``;
* a ``]`` before ``(``, ``[`` or ``:`` is escaped: ``[x](url)``, ``![x](url)``, ``[x][ref]`` and
  ``[x]: url`` are plain text (a bare ``[x]`` links nowhere without a definition), so no remote
  image loads and no link hides its target; ``://`` and ``www.`` get a zero-width space so a
  bare address is not turned into a link either;
* ``@`` is followed by a zero-width space (written ``&#8203;``), which GitHub's mention filter does
  not cross (the same trick Renovate uses in the release notes it posts), so nobody is pinged;
* emphasis, strike-through and code-span characters (`` * _ ~ ` ``) are escaped, so the text
  reads as written.  An underscore between two letters or digits is left alone (it never starts
  emphasis in CommonMark), which keeps names such as ``kv_dtype`` readable in the raw file.

:func:`md_code` is the variant for a code span (backticks around the value), and :func:`shorten`
cuts a long value for one-line messages.  Neither imports anything heavy.
"""

from __future__ import annotations

import re

from kvdash.errors import clip as shorten
from kvdash.errors import flat as one_line

__all__ = ["md", "md_code", "md_marked", "shorten"]

_BACKSLASH_ESCAPED = "\\`*~|"
_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
_ZWSP = "&#8203;"


def md(text: object, limit: int | None = None) -> str:
    """``text`` as inert Markdown text on one line (see the module docstring), optionally shortened
    to ``limit`` characters of the original first.

    >>> md("@alice ![x](http://e.x/a.png) a|b </details>")
    '@&#8203;alice ![x\\\\](http:/&#8203;/e.x/a.png) a\\\\|b &lt;/details&gt;'
    """
    s = one_line(text).strip()  # leading spaces could start a code block
    if limit is not None:
        s = shorten(s, limit)
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = "".join("\\" + ch if ch in _BACKSLASH_ESCAPED else ch for ch in s)
    s = _UNDERSCORE.sub(r"\\_", s)
    s = re.sub(r"\](?=[(\[:])", r"\\]", s)  # "](" "][" "]:" -- inline, reference and definition links
    s = s.replace("@", "@" + _ZWSP).replace("://", ":/" + _ZWSP + "/")
    s = re.sub(r"(?i)\bwww\.", lambda m: m.group(0)[:3] + _ZWSP + ".", s)
    # a leading "# ", "+ ", "- ", "1. " or a line of "---" / "===" would make a heading, a list or a rule
    # where the string starts a line; "0.9", "-5" or a lone "-" in a table cell would not
    s = re.sub(r"^(\s*)([#+=-])(?=\s)|^(\s*)([-=])(?=[-=]+\s*$)", lambda m: (m.group(1) or m.group(3) or "") + "\\"
               + (m.group(2) or m.group(4)), s)
    return re.sub(r"^(\s*\d+)([.)])(?=\s)", r"\1\\\2", s)


def md_code(text: object, limit: int | None = None) -> str:
    """``text`` as a code span safe inside a table cell: one line, ``|`` escaped (GitHub's table
    parser honours ``\\|`` inside code spans), fenced with more backticks than the text holds.

    Code spans show HTML, links and ``@`` literally, so nothing else needs escaping.

    >>> md_code("a|b")
    '`a\\\\|b`'
    >>> md_code("x`y")
    '``x`y``'
    """
    s = one_line(text)
    if limit is not None:
        s = shorten(s, limit)
    s = s.replace("|", "\\|")  # the table parser drops the backslash before "|" whatever precedes it
    longest = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}" if s else "` `"



def md_marked(text: object) -> str:
    """A sentence kvdash wrote, with its own ``**bold**`` and ```code``` marks kept and every other
    character made inert as :func:`md` does (the user strings inside it included).

    >>> md_marked("**chat**: best is `a|b` for @team")
    '**chat**: best is `a\\\\|b` for @&#8203;team'
    """
    out = []
    for i, part in enumerate(one_line(text).split("**")):
        pieces = []
        for j, piece in enumerate(part.split("`")):
            if j % 2:
                pieces.append(md_code(piece))
            elif piece.strip():
                lead = " " if piece[0].isspace() else ""
                trail = " " if piece[-1].isspace() else ""
                pieces.append(lead + md(piece) + trail)
            else:
                pieces.append(" " if piece else "")
        joined = "".join(pieces)
        out.append(f"**{joined.strip()}**" if i % 2 and joined.strip() else joined)
    return "".join(out).strip()

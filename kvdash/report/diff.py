"""``kvdash diff``: what changed between two sweeps, as Markdown for a pull-request comment.

Points are matched by the values of the grid's swept dimensions (model, workload, GPU, TP, ...), not
by their ids: an id hashes every parameter, so editing one default (``gpu_util`` 0.9 -> 0.92) would
otherwise turn every point into "one removed, one added".

* The **key** is the set of dimension columns that vary on either side, less those that follow from
  the others (``budget_bytes`` follows from GPU, model and TP when a GPU is given; ``max_model_len``
  from the workload).  A dimension that is constant on both sides but different (a default that
  changed) is not part of the key: it is listed in the header, and every point shows its effect.
* The **header** lists what changed between the two grids: dimensions (values old -> new), defaults,
  workload definitions, and, when the grid files are given, settings that results.csv does not hold
  (reserve, weights, GPU memory) and gates added or removed.
* **Gates that flip** come first (with the grid files): pass -> FAIL, FAIL -> pass, added points that
  fail, removed points that failed.
* **Changed points** show before -> after and the delta of each headline metric, the largest
  relative change of paged requests first, rows labelled with named columns that always include the
  GPU.
* The text stays under 65,536 characters (GitHub's limit for a comment) whatever the input: every
  user string is escaped by :func:`kvdash.markdown.md` and shortened, tables stop early with a
  note saying how many rows were left out.

Both files are read as text (so an ``id`` column of integers on one side cannot clash with text on the
other) and refused with one line when a side has two rows with the same dimension values (instead of a
join that multiplies them).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from kvdash.errors import InputError
from kvdash.errors import clip as shorten
from kvdash.markdown import md
from kvdash.units import RATIO_DECIMALS, GiB, ratio_text

GITHUB_LIMIT = 65_536  # characters GitHub accepts in one comment
MAX_ROWS = 2_000_000  # kvdash sweep's default --max-points
CELL_CHARS = 60  # the most characters of a user string one table cell repeats

# dimension columns of results.csv, in label order
DIMENSIONS = ("model", "workload", "gpu", "tp", "pp", "kv_dtype", "kv_scales", "block_size", "gpu_util",
              "util_policy", "budget_bytes", "max_model_len", "max_batched_tokens")
# dropped from the key first when the others already tell points apart (they usually follow from them)
DERIVED_FIRST = ("budget_bytes", "max_model_len", "max_batched_tokens", "util_policy", "gpu_util", "pp",
                 "kv_scales")
WORKLOAD_COLUMNS = ("lengths", "max_reserved", "prefix")  # a workload's definition, one value per name
NAMES = {"model": "model", "workload": "workload", "gpu": "GPU", "tp": "TP", "pp": "PP", "kv_dtype": "KV dtype",
         "kv_scales": "KV scales", "block_size": "block", "gpu_util": "GPU util", "util_policy": "util policy",
         "budget_bytes": "KV budget/rank (GiB)", "max_model_len": "max_model_len", "max_batched_tokens": "max batched"}
HEADLINE = ("paged_requests", "running_requests", "paged_requests_per_gpu", "contiguous_requests",
            "request_capacity_ratio",
            "kv_token_slots", "budget_bytes")
HEADLINE_NAMES = {"paged_requests": "paged requests", "running_requests": "vLLM runs at once",
                  "paged_requests_per_gpu": "paged requests/GPU",
                  "contiguous_requests": "contiguous requests", "request_capacity_ratio": "paged / contig.",
                  "kv_token_slots": "KV token slots", "budget_bytes": "KV budget/rank (GiB)"}
GRID_ONLY = ("budget", "gpu_memory", "weights", "reserve")  # settings results.csv holds only through budget_bytes


@dataclass
class _Side:
    frame: pl.DataFrame  # every column as text
    path: Path
    grid: Any = None  # a GridSpec when given


def _read(csv: Path) -> pl.DataFrame:
    """The documented columns with their documented types (other columns as text); a file that does
    not parse that way (an ``id`` of integers is fine: ids are text) is read again as text only."""
    from kvdash.sweep.columns import RESULT_COLUMNS

    types = {"str": pl.Utf8, "int": pl.Int64, "float": pl.Float64, "bool": pl.Boolean}
    header = pl.read_csv(csv, n_rows=0, infer_schema=False).columns
    known = {name: types[kind] for name, kind, _ in RESULT_COLUMNS if name in header}
    schema = {c: known.get(c, pl.Utf8) for c in header}
    try:
        return pl.read_csv(csv, schema=schema, n_rows=MAX_ROWS + 1)
    except Exception:  # noqa: BLE001 - a value of another type somewhere: compare as text
        return pl.read_csv(csv, infer_schema=False, n_rows=MAX_ROWS + 1)


def _load(path: Path, field: str) -> pl.DataFrame:
    csv = path / "results.csv" if path.is_dir() else path
    if path.is_dir() and not csv.is_file() and (path / "results.parquet").is_file():
        csv = path / "results.parquet"  # grids past 100,000 points write Parquet
    if not csv.is_file():  # also refuses FIFOs and devices, which would block or never end
        raise InputError(field, str(path), "expected a results.csv or a report folder holding one")
    from kvdash import safeio

    safeio.check_regular(csv, field, safeio.TABLE_CAP)  # a regular file of at most 4 GiB, never a FIFO
    try:
        df = pl.read_parquet(csv, n_rows=MAX_ROWS + 1) if csv.suffix == ".parquet" else _read(csv)
    except Exception as exc:  # polars raises several error types for malformed files
        raise InputError(field, str(csv), f"not a readable CSV ({type(exc).__name__})") from exc
    if df.height > MAX_ROWS:
        raise InputError(field, str(csv), f"more than {MAX_ROWS:,} rows; kvdash sweeps have at most that many points")
    missing = [c for c in ("id", "model", "workload", "paged_requests") if c not in df.columns]
    if missing:
        raise InputError(field, str(csv), "a kvdash results.csv has the columns id, model, workload, paged_requests "
                         f"(missing: {', '.join(missing)})")
    return df


def _distinct(df: pl.DataFrame, col: str) -> list[str]:
    return ["" if v is None else str(v) for v in df.get_column(col).unique(maintain_order=True).to_list()]


def _unique(df: pl.DataFrame, key: Sequence[str], exact: bool = False) -> bool:
    """No two rows of ``df`` share their ``key`` values.  Fast path: distinct row hashes prove it; a
    collision (or real duplicates) is settled exactly when ``exact``, else taken as "not unique"."""
    if df.height <= 1:
        return True
    if not key:
        return False
    if df.select(pl.struct(list(key)).hash(7).n_unique()).item() == df.height:
        return True
    return exact and df.select(pl.struct(list(key)).n_unique()).item() == df.height


def choose_key(base: pl.DataFrame, head: pl.DataFrame) -> tuple[list[str], list[str]]:
    """(key, swept): the columns points are matched by, and the dimension columns that vary on either
    side and are named in row labels: the key and the linked dimensions that follow from it (a ``zip``
    of GPU and TP), but not the columns that are derived (``max_model_len`` from the workload)."""
    common = [c for c in DIMENSIONS if c in base.columns and c in head.columns]
    derived_budget = any(df.get_column("gpu").drop_nulls().len() for df in (base, head) if "gpu" in df.columns)
    if derived_budget:  # a budget derived from a GPU is a result, not a dimension
        common = [c for c in common if c != "budget_bytes"]
    swept = [c for c in common if len(_distinct(base, c)) > 1 or len(_distinct(head, c)) > 1]
    key = list(swept)
    for col in [*DERIVED_FIRST, *reversed(DIMENSIONS)]:
        if col in key:
            trial = [k for k in key if k != col]
            if _unique(base, trial) and _unique(head, trial):
                key = trial
    return key, [c for c in swept if c in key or c not in DERIVED_FIRST]


def _duplicates(df: pl.DataFrame, key: list[str], field: str, path: Path) -> None:
    if _unique(df, key, exact=True):
        return
    cols = key or ["model"]
    dup = df.filter(pl.struct(cols).is_duplicated())
    first = ", ".join(f"{NAMES.get(c, c)}={shorten(dup[c][0], 30)}" for c in cols)
    raise InputError(field, str(path), f"{dup.height:,} rows share their dimension values (e.g. {first}); "
                     "a kvdash results.csv has one row per point")


def _differs(c: str, base: pl.DataType, head: pl.DataType) -> pl.Expr:
    """Values of column ``c`` differ between BASE and HEAD: as numbers where both sides are numbers (so
    ``0.5`` equals ``0.500000`` and ``16`` equals ``16.0``), else as text."""
    a, b = pl.col(c), pl.col(f"{c}__h")
    if base.is_numeric() and head.is_numeric():
        return a.cast(pl.Float64).ne_missing(b.cast(pl.Float64))
    if base == head:
        return a.ne_missing(b)
    an, bn = a.cast(pl.Float64, strict=False), b.cast(pl.Float64, strict=False)
    return pl.when(an.is_not_null() & bn.is_not_null()).then(an != bn) \
        .otherwise(a.cast(pl.Utf8).ne_missing(b.cast(pl.Utf8)))


def _num(v: str | None) -> float | None:
    if v is None or v == "":
        return None
    try:
        x = float(v)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def _fmt(col: str, v: str | None) -> str:
    x = _num(v)
    if x is None:
        return "-" if v in (None, "") else md(v, 24)
    if col == "budget_bytes":
        return f"{x / GiB:,.2f}"
    if col == "request_capacity_ratio":
        return ratio_text(x)
    if x.is_integer() and abs(x) < 2**53 and "." not in str(v):
        return f"{int(x):,}"
    return f"{x:,.4f}".rstrip("0").rstrip(".")


def _pair(col: str, old: str | None, new: str | None) -> tuple[str, str]:
    """Two values of one column as shown side by side, with as many decimals each (a helper's trial read '2.3906 ->
    4' for vLLM's max concurrency 2.390625 -> 4.0)."""
    a, b = _fmt(col, old), _fmt(col, new)
    x, y = _num(old), _num(new)
    if col in ("budget_bytes", "request_capacity_ratio") or x is None or y is None:
        return a, b
    places = [len(t.split(".")[1]) if "." in t else 0 for t in (a, b)]
    if len(set(places)) > 1:
        return f"{x:,.{max(places)}f}", f"{y:,.{max(places)}f}"
    return a, b


def _delta(col: str, old: str | None, new: str | None) -> str:
    a, b = _num(old), _num(new)
    if a is None or b is None:
        return _fmt(col, old) if old == new else f"{_fmt(col, old)} -> {_fmt(col, new)}"
    d = b - a
    if d == 0:
        return _fmt(col, new)
    if col == "budget_bytes":
        dd = f"{d / GiB:+,.2f}"
    elif col == "request_capacity_ratio":
        dd = f"{d:+.{RATIO_DECIMALS}f}"
    elif d.is_integer():
        dd = f"{int(d):+,}"
    else:
        dd = f"{d:+,.4f}".rstrip("0").rstrip(".")
    rel = f", {100 * d / a:+.1f} %" if a else ""
    shown_old, shown_new = _pair(col, old, new)
    return f"{shown_old} -> {shown_new} ({dd}{rel})"


def _values(vals: Iterable[str]) -> str:
    shown = [md(v, 40) if v != "" else "none" for v in vals]
    return ", ".join(shown[:12]) + (f", ... ({len(shown):,} values)" if len(shown) > 12 else "")


class _Out:
    """Markdown lines with a character budget: a table stops early with a note when it would not fit."""

    def __init__(self, max_chars: int) -> None:
        self.lines: list[str] = []
        self.size = 0
        self.max_chars = max_chars
        self.cut = 0  # rows left out
        # what a note says it stays under: GitHub's limit, or --max-chars as given
        self.limit_text = (f"{GITHUB_LIMIT:,} characters (GitHub's comment limit)" if max_chars >= GITHUB_LIMIT - 1
                           else f"{max_chars:,} characters (--max-chars)")

    def room(self, text: str, reserve: int) -> bool:
        return self.size + len(text) + 1 + reserve <= self.max_chars

    def add(self, *lines: str) -> None:
        for line in lines:
            self.lines.append(line)
            self.size += len(line) + 1

    def table(self, header: Sequence[str], rows: Iterable[Sequence[str]], total: int, limit: int,
              reserve: int = 600, fold: str | None = None) -> None:
        """A table of at most ``limit`` rows; stops early to keep ``reserve`` characters for what follows."""
        head = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        opening = ([f"<details><summary>{fold}</summary>", ""] if fold else []) + head
        closing = ["", "</details>", ""] if fold else [""]
        # what is kept back for the tables after this one, in proportion under a small --max-chars (a reserve of
        # 6,000 left a 2,000-character limit without its 2-row table)
        reserve, margin = min(reserve, self.max_chars // 10), min(200, self.max_chars // 40)
        need = sum(len(x) + 1 for x in opening + closing) + margin
        if not self.room("", need + reserve):
            self.cut += total
            self.add(f"*{md(fold or 'A table')}: {total:,} rows left out to stay under {self.limit_text}; "
                     "results.csv has every point.*", "")
            return
        self.add(*opening)
        shown = 0
        for row in rows:
            if shown >= limit:
                break
            line = "| " + " | ".join(row) + " |"
            if not self.room(line, reserve + margin + sum(len(x) + 1 for x in closing)):
                break
            self.add(line)
            shown += 1
        if shown < total:
            self.cut += total - shown
            why = f"--limit {limit}" if shown >= limit else f"to stay under {self.limit_text}"
            self.add("", f"*{total - shown:,} more rows not shown ({why}); results.csv has every point.*")
        self.add(*closing)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


@dataclass
class _Changes:
    header: list[tuple[str, str, str, str]] = field(default_factory=list)  # what, how, old, new


def _grid_dims(spec: Any) -> dict[str, tuple[list[Any], str]]:
    from kvdash.sweep.evaluate import DEFAULTS
    from kvdash.sweep.gridfile import DIMENSIONS as GRID_DIMENSIONS

    set_dims: dict[str, tuple[list[Any], str]] = {}
    for factor in spec.factors:
        for dim, vals in factor.items():
            set_dims[dim] = (list(vals), "swept" if len(vals) > 1 else "fixed")
    return {d: set_dims.get(d, ([DEFAULTS.get(d)], "default")) for d in GRID_DIMENSIONS}


def _header(base: _Side, head: _Side, swept: list[str]) -> list[tuple[str, str, str, str]]:
    rows: list[tuple[str, str, str, str]] = []
    b, h = base.frame, head.frame
    for col in DIMENSIONS:
        if col not in b.columns or col not in h.columns:
            continue
        old, new = _distinct(b, col), _distinct(h, col)
        if col in DERIVED_FIRST and col not in swept and (len(old) > 1 or len(new) > 1):
            continue  # follows from other dimensions (max_model_len from the workload, a budget from the GPU)
        if old != new:
            how = "swept" if col in swept else "every point"
            if col == "budget_bytes":  # exact bytes, and GiB to read them
                old, new = [_bytes_text(v) for v in old], [_bytes_text(v) for v in new]
            rows.append(("budget (KV bytes/rank)" if col == "budget_bytes" else NAMES.get(col, col), how,
                         _values(old), _values(new)))
    # workload definitions, by name
    wcols = [c for c in WORKLOAD_COLUMNS if c in b.columns and c in h.columns]
    if wcols:
        wb = {r[0]: r[1:] for r in b.select("workload", *wcols).unique(maintain_order=True).iter_rows()}
        wh = {r[0]: r[1:] for r in h.select("workload", *wcols).unique(maintain_order=True).iter_rows()}
        for name in [n for n in wh if n in wb]:
            for i, col in enumerate(wcols):
                if wb[name][i] != wh[name][i]:
                    rows.append((f"workload {md(name, CELL_CHARS)}: {col}", "definition", md(wb[name][i], 60),
                                 md(wh[name][i], 60)))
    if base.grid is not None and head.grid is not None:
        gb, gh = _grid_dims(base.grid), _grid_dims(head.grid)
        shown = {r[0] for r in rows}
        for dim in GRID_ONLY:
            (vo, ho), (vn, hn) = gb[dim], gh[dim]
            if dim == "budget" and "budget (KV bytes/rank)" in shown:
                continue  # an explicit budget is in results.csv, listed above
            if vo != vn:
                how = hn if hn == ho else f"{ho} -> {hn}"
                rows.append((dim, how, _values(_grid_value(v) for v in vo), _values(_grid_value(v) for v in vn)))
        names_b, names_h = [g.name for g in base.grid.gates], [g.name for g in head.grid.gates]
        for g in head.grid.gates:
            if g.name not in names_b:
                rows.append((f"gate {md(g.name, CELL_CHARS)}", "added", "-", f"{md(g.metric)} {_bounds(g)}"))
        for g in base.grid.gates:
            if g.name not in names_h:
                rows.append((f"gate {md(g.name, CELL_CHARS)}", "removed", f"{md(g.metric)} {_bounds(g)}", "-"))
        for g in head.grid.gates:
            prev = next((o for o in base.grid.gates if o.name == g.name), None)
            if prev is not None and (prev.metric, prev.min, prev.max, prev.where) != (g.metric, g.min, g.max, g.where):
                rows.append((f"gate {md(g.name, CELL_CHARS)}", "changed", f"{md(prev.metric)} {_bounds(prev)}",
                             f"{md(g.metric)} {_bounds(g)}"))
    return rows


def _raw(v: str | None) -> str:
    return "-" if v is None or v == "" else md(v, 40)


def _name(path: Path) -> str:
    """A report folder's name, or the folder of a results.csv, or a CSV file's stem."""
    path = path.resolve()
    if path.is_dir():
        return path.name
    return path.parent.name if path.name == "results.csv" else path.stem


def _bytes_text(v: Any) -> str:
    """``12884901888`` -> ``12,884,901,888 B (12.00 GiB)``; other text unchanged."""
    x = _num(str(v)) if v not in (None, "") else None
    if x is None or not x.is_integer():
        return "" if v is None else str(v)
    return f"{int(x):,} B ({x / GiB:,.2f} GiB)"


def _grid_value(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, int) and not isinstance(v, bool):
        return _bytes_text(v)  # the size dimensions (budget, gpu_memory, weights, reserve) are bytes
    return str(v)


def _bounds(g: Any) -> str:
    from kvdash.sweep.gates import bounds_text

    return bounds_text(g)



def _gate_floor(gate: Any, frame: pl.DataFrame) -> pl.Expr:
    """The floor a min: gate is judged on where its metric is empty (:func:`kvdash.sweep.gates.floor_column`), as
    ``__f``; null where the gate has none or the results lack it."""
    from kvdash.sweep import gates as G

    fc = G.floor_column(gate) if gate is not None else None
    return (pl.col(fc) if fc and fc in frame.columns else pl.lit(None)).alias("__f")


def _gate_shown(metric: str, value: Any, floor: Any) -> str:
    """A gate's value in the flips table, or the floor it was judged on (``≥ X``; it showed ``-``)."""
    return f"≥ {_fmt(metric, floor)}" if value is None and floor is not None else _fmt(metric, value)

def diff_results(base_path: Path, head_path: Path, limit: int = 200, *, base_grid: Path | None = None,
                 head_grid: Path | None = None, max_chars: int = GITHUB_LIMIT - 1, title: str | None = None) -> str:
    """The Markdown diff of two sweeps' results (see the module docstring).

    ``base_grid`` / ``head_grid``: the grid files, for gates and the settings results.csv does not
    hold; with only one of them, its gates serve both sides.  ``max_chars``: the text stays below it.
    """
    from kvdash.sweep import gates as G
    from kvdash.sweep.gridfile import parse_grid

    if max_chars < 2_000:
        raise InputError("--max-chars", max_chars, "expected at least 2,000")
    if limit <= 0:
        raise InputError("--limit", limit, "expected a positive integer")
    base = _Side(_load(base_path, "BASE"), base_path)
    head = _Side(_load(head_path, "HEAD"), head_path)
    if head_grid is not None:
        head.grid = parse_grid(head_grid)
    if base_grid is not None:
        base.grid = parse_grid(base_grid)
    base.grid = base.grid or head.grid
    head.grid = head.grid or base.grid

    for side, path_, frame, other in (("HEAD", head_path, head.frame, base.frame),
                                      ("BASE", base_path, base.frame, head.frame)):
        lost = [c for c in DIMENSIONS if c in other.columns and c not in frame.columns and len(_distinct(other, c)) > 1]
        if lost:  # the points cannot be matched: the side without the column is at fault, not the other's rows
            raise InputError(side, str(path_), f"has no {', '.join(lost)} column, by which the other side's points "
                             "differ; a kvdash results.csv holds every dimension")
    key, swept = choose_key(base.frame, head.frame)
    _duplicates(base.frame, key, "BASE", base_path)
    _duplicates(head.frame, key, "HEAD", head_path)
    has_gpu = any(df.get_column("gpu").drop_nulls().len() for df in (base.frame, head.frame)
                  if "gpu" in df.columns)
    # the GPU always (it decides the budget); without one, the explicit budget stands in for it
    label = [c for c in DIMENSIONS if c in swept or c == ("gpu" if has_gpu else "budget_bytes")]
    label = [c for c in label if c in base.frame.columns and c in head.frame.columns] or ["model"]

    bf = base.frame.with_row_index("__row")
    hf = head.frame.with_row_index("__row")
    mixed = [c for c in key if bf.schema[c] != hf.schema[c]]  # one side read as text: match as text
    bf, hf = bf.with_columns(pl.col(mixed).cast(pl.Utf8)), hf.with_columns(pl.col(mixed).cast(pl.Utf8))
    if not key:
        bf, hf = bf.with_columns(pl.lit(0).alias("__k")), hf.with_columns(pl.lit(0).alias("__k"))
    on = key or ["__k"]
    common = [c for c in head.frame.columns if c in base.frame.columns and c != "id" and c not in key]
    # both sides are unique on the key (checked above), so the join has at most one row per point
    joined = bf.select(*on, "__row", *common).join(hf.select(*on, "__row", *common), on=on, how="full",
                                                  suffix="__h", coalesce=True, nulls_equal=True)
    in_b, in_h = pl.col("__row").is_not_null(), pl.col("__row__h").is_not_null()
    matched = joined.filter(in_b & in_h)
    differs = pl.any_horizontal([_differs(c, base.frame.schema[c], head.frame.schema[c]) for c in common]) \
        if common else pl.lit(False)
    matched = matched.with_columns(differs.alias("__changed"))
    changed = matched.filter(pl.col("__changed"))
    # in file order (a join's row order is not deterministic)
    added = hf.select(pl.all().gather(joined.filter(~in_b).get_column("__row__h").sort()))
    removed = bf.select(pl.all().gather(joined.filter(~in_h).get_column("__row").sort()))

    out = _Out(max_chars)
    name = title if title is not None else _name(head_path)
    out.add(f"## kvdash diff: {md(name, 80)}", "")
    by = ", ".join(NAMES.get(c, c) for c in key) or "(one point per side)"
    out.add(f"{head.frame.height:,} points in HEAD, {base.frame.height:,} in BASE, matched by {by}: "
            f"**{changed.height:,} changed, {added.height:,} added, {removed.height:,} removed**, "
            f"{matched.height - changed.height:,} unchanged.", "")

    header = _header(base, head, swept)
    if header:
        out.add("**What changed in the grid**", "")
        out.table(["setting", "how", "BASE", "HEAD"], (list(r) for r in header), len(header), 50, reserve=6_000)
    elif base.frame.height or head.frame.height:
        out.add("No dimension or default of results.csv changed.", "")
    if head.grid is None:
        out.add("*Gates and the settings results.csv does not hold (reserve, weights, GPU memory) are not "
                "compared: pass the grid files with --grid and --base-grid.*", "")

    def lab(row: dict[str, Any], suffix: str = "") -> list[str]:
        def cell(c: str, v: Any) -> str:
            return _fmt(c, v) if c == "budget_bytes" else ("-" if v in (None, "") else md(v, CELL_CHARS))

        cells = []
        for c in label:
            v = row.get(c + suffix) if c not in on else row.get(c)
            if v is None and suffix:
                v = row.get(c)
            before = row.get(c) if suffix and c not in on else None
            # a label the points are not matched by may differ between the sides (an explicit budget changed in
            # the grid): before -> after, as the other figures (it showed HEAD's alone)
            cells.append(f"{cell(c, before)} -> {cell(c, v)}" if before is not None and str(before) != str(v)
                         else cell(c, v))
        return cells

    label_names = [NAMES.get(c, c) for c in label]

    # gates that flip
    if head.grid is not None and (head.grid.gates or base.grid.gates):
        flips: list[list[str]] = []
        summary: list[list[str]] = []
        gb = {g.name: g for g in base.grid.gates}
        for g in head.grid.gates:
            og = gb.get(g.name)
            sh = hf.select(*on, "__row", *[c for c in label if c not in on],
                           G.status(head.frame, g).alias("__s"), pl.col(g.metric).alias("__v")
                           if g.metric in hf.columns else pl.lit(None).alias("__v"), _gate_floor(g, hf))
            sb = bf.select(*on, "__row", *[c for c in label if c not in on],
                           (G.status(base.frame, og) if og else pl.lit(G.NA)).alias("__s"),
                           pl.col(og.metric).alias("__v") if og and og.metric in bf.columns
                           else pl.lit(None).alias("__v"), _gate_floor(og, bf))
            both = sb.join(sh, on=on, how="full", suffix="__h", coalesce=True, nulls_equal=True)
            both = both.with_columns(pl.col("__s").fill_null("absent"), pl.col("__s__h").fill_null("absent"))
            nb = sb.filter(pl.col("__s") == G.FAIL).height
            nh = sh.filter(pl.col("__s") == G.FAIL).height
            pb = sb.filter(pl.col("__s") == G.PASS).height
            ph = sh.filter(pl.col("__s") == G.PASS).height
            summary.append([md(g.name, CELL_CHARS), f"{md(g.metric)} {G.bounds_text(g)}",
                            f"{pb:,} pass, {nb:,} fail" if og else "-", f"{ph:,} pass, {nh:,} fail"])
            flipped = both.filter((pl.col("__s") != pl.col("__s__h"))
                                  & ((pl.col("__s") == G.FAIL) | (pl.col("__s__h") == G.FAIL)))
            # pass -> FAIL first, then new failing points, then fixes
            flipped = flipped.with_columns(pl.when(pl.col("__s__h") == G.FAIL).then(0).otherwise(1).alias("__o")) \
                .sort(["__o", *on], nulls_last=True)
            for r in flipped.head(limit).iter_rows(named=True):
                cells = lab(r, "__h" if r["__s__h"] != "absent" else "")
                before = _gate_shown(g.metric, r["__v"], r["__f"])
                after = _gate_shown(g.metric, r["__v__h"], r["__f__h"])
                flips.append([md(g.name, CELL_CHARS), *cells,
                              f"{r['__s']} ({before})" if r["__s"] not in ("absent", G.NA) else r["__s"],
                              f"**{r['__s__h']}** ({after})" if r["__s__h"] not in ("absent", G.NA) else r["__s__h"]])
        out.add("### Gates", "")
        out.table(["gate", "needs", "BASE", "HEAD"], summary, len(summary), 50, reserve=4_000)
        if flips:
            out.add("**Gates that flip** (BASE -> HEAD; absent: the point is not in that grid)", "")
            out.table(["gate", *label_names, "BASE", "HEAD"], flips, len(flips), limit, reserve=4_000)
        else:
            out.add("No gate flips.", "")

    # changed points: headline metrics before -> after, the largest relative move of paged requests first
    metrics = [m for m in HEADLINE if m in common and m not in label]
    if changed.height:
        rel = (pl.col("paged_requests__h").cast(pl.Float64, strict=False)
               - pl.col("paged_requests").cast(pl.Float64, strict=False)).abs() \
            / pl.max_horizontal(pl.col("paged_requests").cast(pl.Float64, strict=False).abs(), pl.lit(1.0))
        ordered = changed.with_columns(rel.fill_null(0).alias("__rel")).sort(["__rel", *on],
                                                                                descending=[True] + [False] * len(on))
        rows = ([*lab(r, "__h"), *[_delta(m, r[m], r[f"{m}__h"]) for m in metrics]]
                for r in ordered.head(limit).iter_rows(named=True))
        out.add("### Changed points", "", "Before -> after (change, relative change); the largest move of paged "
                "requests first. GiB = 2^30 bytes.", "")
        out.table([*label_names, *[HEADLINE_NAMES[m] for m in metrics]], rows, changed.height, limit,
                  reserve=3_000)
        # dimensions are in the header or the row label already
        others = [c for c in common if c not in metrics and c not in (*DIMENSIONS, *WORKLOAD_COLUMNS)]
        detail = [[*lab(r, "__h"), md(c, 40), *_pair(c, r[c], r[f"{c}__h"])]
                  for r in ordered.head(limit).iter_rows(named=True) for c in others if r[c] != r[f"{c}__h"]]
        if detail:
            out.table([*label_names, "column", "BASE", "HEAD"], detail, len(detail), 10 * limit, reserve=2_000,
                      fold="Every other changed value, point by point (the changed points above, in their order)")

    for title_, frame in (("Added points", added), ("Removed points", removed)):
        if frame.height:
            shown = [c for c in ("paged_requests", "contiguous_requests") if c in frame.columns]
            rows = ([*lab(r), *[_fmt(c, r[c]) for c in shown]] for r in frame.head(limit).iter_rows(named=True))
            out.table([*label_names, *[HEADLINE_NAMES[c] for c in shown]], rows, frame.height, limit,
                      reserve=800, fold=f"{title_} ({frame.height:,})")
    if out.cut:
        out.add(f"*{out.cut:,} rows in all were left out; results.csv has every point.*")
    text = out.text()
    if len(text) > max_chars:  # cannot happen with the reserves above; kept as the last guard
        text = text[:max_chars - 80].rsplit("\n", 1)[0] + "\n\n*(cut to stay under the comment limit)*\n"
    return text

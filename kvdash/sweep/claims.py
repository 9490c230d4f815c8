"""The claims registry and its verdicts against a grid's results."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import polars as pl
import yaml

COMPUTABLE = ("capacity", "waste", "slots")
TIMED = ("time",)  # judged on a grid's simulate: time: columns; not computable without them
# kvdash's time model against measured vLLM rows it was not fitted on (README, "Time model accuracy"; written by
# benchmarks/steptime_fit.py to benchmarks/results/steptime_validation.md, which a test compares with this)
TIME_MODEL_ERROR = "TPOT 20.1 %, TTFT 28.3 % error out of sample"
TIME_LABEL = f"time model ({TIME_MODEL_ERROR})"
PARAMS = ("model", "workload", "lengths", "max_reserved", "prefix", "kv_dtype", "kv_scales", "block_size", "tp", "pp",
          "gpu", "gpu_util", "util_policy", "budget_bytes", "max_model_len", "max_batched_tokens")


@dataclass(frozen=True)
class Claim:
    id: str
    claim: str
    source: str
    conditions: str
    kind: str
    metric: str | None = None
    claimed: tuple[float | None, float | None] | None = None
    tolerance: float = 0.0  # in the metric's unit: values this far outside the claimed range still agree
    applies_to: dict[str, list[Any]] = field(default_factory=dict)
    pair: dict[str, Any] | None = None
    settle: str = ""
    scope: str = ""
    over_lengths: bool = False  # an average over many request lengths: a single length is degenerate
    circular: str = ""  # why the grid's own inputs decide this figure (then it is shown, not judged)
    joint: str = ""  # claims with the same joint key are also judged together on one configuration

    @property
    def computable(self) -> bool:
        return self.kind in COMPUTABLE or self.kind in TIMED

    def claimed_text(self) -> str:
        if not self.claimed:
            return "-"
        lo, hi = self.claimed
        text = f"at least {fmt(lo)}" if hi is None else (fmt(lo) if lo == hi else f"{fmt(lo)} to {fmt(hi)}")
        return text + (f" (± {fmt(self.tolerance)})" if self.tolerance else "")


def fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if float(x).is_integer():
        return f"{int(x):,}"
    return f"{x:,.4g}" if abs(x) < 1000 else f"{x:,.1f}"


def load_claims() -> list[Claim]:
    """The registry (kvdash/data/claims.yaml), read once per process: a new list of the same claims each call."""
    return list(_registry())


@functools.cache
def _registry() -> tuple[Claim, ...]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: 10x faster
    raw = yaml.load((resources.files("kvdash") / "data" / "claims.yaml").read_text(encoding="utf-8"), Loader=loader)
    out = []
    for item in raw:
        claimed = tuple(item["claimed"]) if "claimed" in item else None
        out.append(Claim(
            id=item["id"], claim=item["claim"], source=item["source"], conditions=item["conditions"],
            kind=item["kind"], metric=item.get("metric"), claimed=claimed,  # type: ignore[arg-type]
            tolerance=float(item.get("tolerance", 0)),
            applies_to=item.get("applies_to", {}), pair=item.get("pair"), settle=item.get("settle", ""),
            scope=item.get("scope", ""), over_lengths=bool(item.get("over_lengths", False)),
            circular=item.get("circular", ""), joint=item.get("joint", ""),
        ))
    return tuple(out)


@dataclass
class Verdict:
    claim: Claim
    verdict: str  # holds | holds only where | contradicted | circular | not computable | not applicable
    computed: str  # the computed value or range
    points: int  # applicable points
    holding: int  # points within the claimed range (tolerance included)
    where: str  # for "holds only where": the swept-dimension values the agreeing points share
    note: str
    below: int = 0  # points below the claimed range (beyond the tolerance)
    above: int = 0  # points above it

    @property
    def direction(self) -> str:
        """Where the points sit against the claimed range, e.g. ``above at 14, within at 2``."""
        if not self.points or self.verdict in ("circular", "not applicable", "not computable"):
            return ""
        parts = [f"{word} at {n:,}" for word, n in (("below", self.below), ("within", self.holding),
                                                    ("above", self.above)) if n]
        if len(parts) == 1:
            return parts[0].split(" at ")[0] + (" everywhere" if self.points > 1 else "")
        return ", ".join(parts)


def model_properties(models: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per model name: ``params_b`` (billions of parameters) and ``attention`` (mha, gqa, mqa, mla, plus
    ``+sliding`` for a windowed mix), so a claim can apply by what a model is, not what it is called.

    Parameters come from a preset's published count; otherwise from weights given in the grid, at 2 bytes
    each (bf16); a preset with only a checkpoint size (e.g. MXFP4) has no parameter class."""
    import re

    out = {}
    for name, arch in models.items():
        basis = getattr(arch, "weight_basis", "")
        m = re.search(r"([0-9.]+)B published parameters", basis)
        given = bool(getattr(arch, "weight_bytes", 0)) and not basis.startswith("estimate")
        params = float(m.group(1)) if m else (arch.weight_bytes / 2e9 if given else None)
        if arch.first("mla"):
            kind = "mla"
        elif arch.kv_heads == 1:
            kind = "mqa"
        elif arch.kv_heads >= arch.num_attention_heads:
            kind = "mha"
        else:
            kind = "gqa"
        out[name] = {"params_b": params, "attention": kind + ("+sliding" if arch.windows else "")}
    return out


class Frame:
    """A results frame with the helper columns claims select on, as expressions (never materialised on
    the wide frame: a million points x fifty columns is costly to copy).  Text columns are polars Enums;
    conditions on them compare category codes."""

    def __init__(self, df: pl.DataFrame, props: dict[str, dict[str, Any]] | None = None) -> None:
        self.df = df
        self.schema = df.schema
        self.props = props or {}
        self._helpers: dict[str, pl.Expr] = {}

    HELPERS = ("tp_times_pp", "prefix_positive", "_several_lengths", "params_b", "attention")

    def helper(self, name: str) -> pl.Expr:
        """A helper column as an expression, built on first use."""
        if name not in self._helpers:
            if name == "tp_times_pp":
                expr = pl.col("tp") * pl.col("pp")
            elif name == "prefix_positive":
                expr = pl.col("prefix") > 0
            elif name == "_several_lengths":
                expr = self.per_category("lengths", lambda text: "," in str(text), pl.Boolean)
            else:
                dtype = pl.Float64 if name == "params_b" else pl.Utf8
                expr = self.per_category("model", lambda m: self.props.get(str(m), {}).get(name), dtype)
            self._helpers[name] = expr
        return self._helpers[name]

    def categories(self, col: str) -> list[str] | None:
        dtype = self.schema.get(col)
        return dtype.categories.to_list() if isinstance(dtype, pl.Enum) else None

    def per_category(self, col: str, fn: Any, dtype: Any) -> pl.Expr:
        """``fn(value)`` at every point, computed once per distinct value of a text column.  A true/false
        ``fn`` on an Enum column is a test of the category codes where it is true (a gather costs more)."""
        cats = self.categories(col)
        if cats is None:
            values = [str(v) for v in self.df.get_column(col).unique().to_list()]
            return pl.col(col).cast(pl.Utf8).replace_strict(values, [fn(v) for v in values], return_dtype=dtype)
        results = [fn(c) for c in cats]
        if dtype == pl.Boolean and all(isinstance(r, bool) for r in results):
            return pl.col(col).to_physical().is_in([i for i, r in enumerate(results) if r])
        return pl.lit(pl.Series(results, dtype=dtype)).gather(pl.col(col).to_physical())

    def column(self, col: str) -> pl.Expr | None:
        if col in self.HELPERS and (col != "params_b" and col != "attention" or self.props):
            return self.helper(col)
        return pl.col(col) if col in self.schema else None

    def is_in(self, col: str, allowed: list[Any]) -> pl.Expr:
        cats = self.categories(col)
        if cats is not None:
            wanted = {str(a) for a in allowed}
            return pl.col(col).to_physical().is_in([i for i, c in enumerate(cats) if c in wanted])
        expr = self.column(col)
        assert expr is not None
        return expr.is_in(allowed)


def _applies(frame: Frame, claim: Claim) -> pl.Expr | None:
    """The condition ``applies_to`` sets (None when a column it names is not in the results)."""
    cond = pl.lit(True)
    for col, allowed in claim.applies_to.items():
        expr = frame.column(col)
        if expr is None:
            return None
        if col == "params_b":  # a parameter class: [low, high] billions
            cond = cond & _params_in(frame, expr, allowed)
        else:
            cond = cond & frame.is_in(col, allowed)
    return cond


def _params_in(frame: Frame, expr: pl.Expr, bounds: list[float]) -> pl.Expr:
    """Points whose model has ``bounds[0]`` to ``bounds[1]`` billion parameters, both ends included (a model with
    no parameter count: not); on an Enum model column, a test of the category codes."""
    cats = frame.categories("model")
    if cats is None or "params_b" in frame.schema:
        return expr.is_between(bounds[0], bounds[1]).fill_null(False)
    sizes = [frame.props.get(m, {}).get("params_b") for m in cats]
    return pl.col("model").to_physical().is_in(
        [i for i, x in enumerate(sizes) if x is not None and bounds[0] <= x <= bounds[1]]).fill_null(False)


def _never(frame: Frame, claim: Claim) -> bool:
    """Whether ``applies_to`` allows none of a text column's categories: then no point applies, known without
    a pass over the points (e.g. a claim about a model the grid does not have)."""
    for col, allowed in claim.applies_to.items():
        cats = frame.categories(col)
        if col != "params_b" and cats is not None and not {str(a) for a in allowed} & set(cats):
            return True
    return False


def _pair_keys(frame: Frame, claim: Claim, dims: list[str], swept: bool) -> list[str]:
    """The columns a pair's two points share: every other swept dimension (every other parameter that varies,
    when ``dims`` are not the swept ones)."""
    assert claim.pair is not None
    df, dim = frame.df, claim.pair["dimension"]
    if swept:
        return [c for c in dims if c != dim] or ["prefix"]
    return [c for c in PARAMS if c in df.columns and c != dim and df.get_column(c).n_unique() > 1] or ["prefix"]


def _pair_frame(frame: Frame, claim: Claim, cond: pl.Expr, dims: list[str], keys: list[str]) -> pl.DataFrame:
    """Rows with a ``value`` column: the ratio of the metric at the pair's first value over its second, for
    points alike in every column of ``keys``."""
    assert claim.metric is not None and claim.pair is not None
    df = frame.df
    dim, (first, second) = claim.pair["dimension"], claim.pair["over"]
    partner = pl.struct(keys).hash(seed=0).alias("_partner")  # one join key instead of many columns
    keep = list(dict.fromkeys(d for d in dims if d in df.columns))
    base = df.lazy().filter(cond)
    a = base.filter(frame.is_in(dim, [first])).select(*keep, claim.metric, partner)
    b = base.filter(frame.is_in(dim, [second])).select(partner, pl.col(claim.metric).alias("_base")) \
        .unique("_partner")
    return a.join(b, on="_partner", how="inner").select(
        *keep, (pl.col(claim.metric) / pl.col("_base")).alias("value")).filter(pl.col("value").is_finite()) \
        .collect()


def _exact_key(dtype: pl.DataType) -> bool:
    """Whether ``==`` on a column of this type matches exactly what a hash join matches (not floats: -0.0)."""
    return dtype.is_integer() or isinstance(dtype, pl.Enum | pl.Categorical) or dtype in (pl.Utf8, pl.Boolean)


def _pair_by_position(frame: Frame, claim: Claim, cond: pl.Expr, keys: list[str]) -> tuple[pl.Expr, pl.Expr] | None:
    """The points at the pair's first value and, there, the pair's ratio, on the results frame itself, when
    every point at the first value has its partner a fixed number of rows on (a grid expanded in order,
    nothing excluded): the row there must be at the second value and alike in every key column.  None when
    not (then :func:`_pair_frame` pairs the points by a join)."""
    assert claim.metric is not None and claim.pair is not None
    if any(not _exact_key(frame.schema[k]) for k in keys):
        return None
    dim, (first, second) = claim.pair["dimension"], claim.pair["over"]
    a = (cond & frame.is_in(dim, [first])).fill_null(False)
    sub = frame.df.select(*keys, a.alias("_a"), (cond & frame.is_in(dim, [second])).fill_null(False).alias("_b"))
    at_first = sub.get_column("_a")
    off = (sub.get_column("_b").arg_max() or 0) - (at_first.arg_max() or 0)  # first rows at each value (0: none)
    n = sub.height - abs(off)
    here, there = sub.slice(max(-off, 0), n), sub.slice(max(off, 0), n)  # row r of here pairs with row r of there
    alike = pl.select(pl.all_horizontal(there.get_column("_b"), *(here.get_column(k) == there.get_column(k)
                                                                 for k in keys)).fill_null(False)).to_series()
    if here.get_column("_a").sum() < at_first.sum() or not (~here.get_column("_a") | alike).all():
        return None
    return a, pl.col(claim.metric) / pl.col(claim.metric).shift(-off)


def shown_value(v: Any) -> str:
    if isinstance(v, int) and not isinstance(v, bool) and v >= 1 << 30:
        return f"{v / (1 << 30):.2f} GiB"
    return str(v)


def _sort_key(v: Any) -> tuple[bool, Any]:
    return (v is None, v if isinstance(v, int | float) else str(v))


def shared_text(everything: dict[str, list[Any]], held: dict[str, list[Any]]) -> str:
    """What the ``held`` points are confined to, per dimension, AND-joined, e.g. ``kv_dtype = fp8 AND
    block_size in {16, 32}`` (empty when no dimension separates them).  ``everything``/``held``: the distinct
    values of each dimension over all points and over the held ones."""
    parts = []
    for col, values in everything.items():
        all_vals, held_vals = set(values), set(held[col])
        if len(all_vals) > 1 and 0 < len(held_vals) < len(all_vals):
            negate = len(held_vals) > len(all_vals) / 2 + 1  # "not in" the few others is shorter
            vals = (all_vals - held_vals) if negate else held_vals
            shown = [shown_value(v) for v in sorted(vals, key=_sort_key)]
            if len(shown) == 1:
                parts.append(f"{col} {'≠' if negate else '='} {shown[0]}")
            else:
                parts.append(f"{col} {'not in' if negate else 'in'} {{{', '.join(shown)}}}")
    return " AND ".join(parts)


def shared_where(frame: pl.DataFrame, flag: str, dims: list[str]) -> str:
    """:func:`shared_text` of the rows of ``frame`` where column ``flag`` is true."""
    cols = [c for c in dims if c in frame.columns]
    if not cols:
        return ""
    row = frame.select(*[pl.col(c).unique().implode().alias(f"a_{c}") for c in cols],
                       *[pl.col(c).filter(pl.col(flag)).unique().implode().alias(f"h_{c}") for c in cols]).row(
        0, named=True)
    return shared_text({c: row[f"a_{c}"] for c in cols}, {c: row[f"h_{c}"] for c in cols})


def _where_text(everything: dict[str, list[Any]], held: dict[str, list[Any]], failing: dict[str, list[Any]]) -> str:
    """The shorter of what the agreeing points share and what the disagreeing points share."""
    options = []
    if text := shared_text(everything, held):
        options.append(text)
    if text := shared_text(everything, failing):
        options.append(f"everywhere except where {text}")
    return min(options, key=len) if options else "no single swept dimension separates the agreeing points"


def _applies_text(key: str, allowed: list[Any]) -> str:
    if key == "params_b":
        return f"model of {fmt(allowed[0])}-{fmt(allowed[1])}B parameters"
    return f"{key} in {{{', '.join(map(shown_value, allowed))}}}"


def _range_text(vmin: Any, vmax: Any) -> str:
    return fmt(vmin) if vmin == vmax else f"{fmt(vmin)} to {fmt(vmax)}"


def _bounds(claim: Claim, value: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """(below, above) conditions on ``value`` with the claim's tolerance."""
    assert claim.claimed is not None
    lo, hi = claim.claimed
    below = value < lo - claim.tolerance if lo is not None else pl.lit(False)
    above = value > hi + claim.tolerance if hi is not None else pl.lit(False)
    return below, above


@dataclass
class _Job:
    """One claim's tally on one frame: the applicable points (``mask``), the value judged against the claimed
    range, the column whose range is shown (default: the value), and extra minima/maxima over the applicable
    points.  ``counted``: the points judged, when fewer than ``mask`` (the rest still count in ``all``)."""

    claim: Claim
    mask: pl.Expr
    value: pl.Expr
    shown: pl.Expr | None = None
    extra: dict[str, tuple[pl.Expr, str]] = field(default_factory=dict)
    counted: pl.Expr | None = None


# A point's status per job, one bit each, so that ORing statuses tells which kinds of points a value has
WITHIN, BELOW, ABOVE, UNJUDGED = 1, 2, 4, 8  # (UNJUDGED: applicable but not judged; 0: not applicable)
_BYTES = 8  # jobs per 64-bit word: one status byte each


def _tally_many(lazy: pl.LazyFrame, jobs: list[_Job], dims: list[str]) -> list[dict[str, Any]]:
    """Per job: counts and the shown value's range over its judged points and, per dimension, the distinct values
    over all / agreeing / disagreeing points.  All jobs at once: one pass computes each point's status per job
    (:data:`WITHIN`, :data:`BELOW`, :data:`ABOVE`, :data:`UNJUDGED` or 0) as a byte column; counts and ranges
    read those columns, and the bytes, packed eight to a 64-bit word, are ORed per value of each dimension, so
    the values each job's agreeing and disagreeing points take come out together."""
    if not jobs:
        return []
    cols: list[pl.Expr] = []
    aggs: list[pl.Expr] = []
    for i, job in enumerate(jobs):
        below, above = _bounds(job.claim, job.value)
        judged = job.mask if job.counted is None else job.mask & job.counted
        side = pl.when(below).then(pl.lit(BELOW, pl.UInt8)).when(above).then(pl.lit(ABOVE, pl.UInt8)) \
            .otherwise(pl.lit(WITHIN, pl.UInt8))
        status = pl.when(judged).then(side).when(job.mask).then(pl.lit(UNJUDGED, pl.UInt8)) \
            if job.counted is not None else pl.when(judged).then(side)
        cols.append(status.otherwise(pl.lit(0, pl.UInt8)).alias(f"_s{i}"))
        cols.append((job.value if job.shown is None else job.shown).alias(f"_v{i}"))
        cols += [e.alias(f"_x{i}_{k}") for k, (e, _) in job.extra.items()]
        s = pl.col(f"_s{i}")
        hit = (s & (WITHIN | BELOW | ABOVE)) > 0
        aggs += [(s == WITHIN).sum().alias(f"h{i}"), (s == BELOW).sum().alias(f"nb{i}"),
                 (s == ABOVE).sum().alias(f"na{i}"), (s > 0).sum().alias(f"all{i}"),
                 pl.col(f"_v{i}").filter(hit).min().alias(f"vmin{i}"),
                 pl.col(f"_v{i}").filter(hit).max().alias(f"vmax{i}"),
                 *(getattr(pl.col(f"_x{i}_{k}").filter(hit), how)().alias(f"x{i}_{k}")
                   for k, (_, how) in job.extra.items())]
    chunks, plain = _enum_chunks(lazy.collect_schema(), dims)
    keys = [f"_k{c}" for c in range(len(chunks))]
    # each status computed once; dimensions are not copied
    narrow = lazy.select(*plain, *(_chunk_key(chunk).alias(k) for k, chunk in zip(keys, chunks, strict=True)),
                         *cols).collect()
    queries = [narrow.lazy().select(aggs)]
    names = [f"_w{k}" for k in range(-(-len(jobs) // _BYTES))]
    if dims:
        # a frame of the columns themselves: a select on ``narrow`` would first copy every column into one chunk
        # (its status columns come out of the pass in unequal chunks)
        packed = pl.DataFrame([*(narrow.get_column(c) for c in (*plain, *keys)),
                               *_pack(narrow, len(jobs), names)]).lazy()
        queries += [packed.group_by(d).agg(pl.col(n).bitwise_or() for n in names) for d in plain]
        queries += [packed.group_by(k).agg(pl.col(n).bitwise_or() for n in names) for k in keys]
    results = pl.collect_all(queries)
    row = results[0].row(0, named=True)
    per = {d: (res.get_column(d).to_list(), {n: res.get_column(n).to_list() for n in names})
           for d, res in zip(plain, results[1:1 + len(plain)], strict=True)}
    for c, (chunk, res) in enumerate(zip(chunks, results[1 + len(plain):], strict=True)):
        per.update(_split_chunk(chunk, res.get_column(f"_k{c}").to_list(), {n: res.get_column(n).to_list()
                                                                             for n in names}))
    out = []
    for i, job in enumerate(jobs):
        t = {k: row[f"{k}{i}"] for k in ("h", "nb", "na", "all", "vmin", "vmax")}
        t["n"] = t["h"] + t["nb"] + t["na"]
        for k in ("vmin", "vmax"):  # the value judged is a float: show its range as one
            t[k] = None if t[k] is None else float(t[k])
        t.update({k: row[f"x{i}_{k}"] for k in job.extra})
        word, shift = names[i // _BYTES], 8 * (i % _BYTES)
        for d in dims:
            values, ors = per[d]
            pairs = [(v, w >> shift) for v, w in zip(values, ors[word], strict=True)]
            t[f"a_{d}"] = [v for v, s in pairs if s & (WITHIN | BELOW | ABOVE)]
            t[f"h_{d}"] = [v for v, s in pairs if s & WITHIN]
            t[f"f_{d}"] = [v for v, s in pairs if s & (BELOW | ABOVE)]
        out.append(t)
    return out


def _pack(narrow: pl.DataFrame, jobs: int, names: list[str]) -> list[pl.Series]:
    """Status columns ``_s0``... as 64-bit words, job ``i``'s status in byte ``i % 8`` (lowest first) of word ``i // 8``
    in polars (numpy's copy saves 20 ms at 1M points, its import costs 0.1 s), read from the status columns alone."""
    words = []
    for k, name in enumerate(names):
        word = pl.lit(0, dtype=pl.UInt64)
        for i in range(_BYTES * k, min(_BYTES * (k + 1), jobs)):
            word = word | pl.col(f"_s{i}").cast(pl.UInt64) * (1 << (8 * (i % _BYTES)))
        words.append(word.alias(name))
    return pl.DataFrame([narrow.get_column(f"_s{i}") for i in range(jobs)]).select(words).get_columns()


_CHUNK = 1 << 12  # at most this many key values in one combined group-by


def _enum_chunks(schema: pl.Schema, dims: list[str]) -> tuple[list[list[tuple[str, list[str]]]], list[str]]:
    """The Enum dimensions in chunks whose category counts (plus one, for null) multiply to at most
    :data:`_CHUNK`, each chunk grouped by one small integer key instead of one group-by per dimension; and
    the other dimensions, grouped by their own column."""
    chunks: list[list[tuple[str, list[str]]]] = []
    plain: list[str] = []
    for d in dims:
        dtype = schema[d]
        if not isinstance(dtype, pl.Enum):
            plain.append(d)
            continue
        cats = dtype.categories.to_list()
        if not chunks or math.prod(len(c) + 1 for _, c in chunks[-1]) * (len(cats) + 1) > _CHUNK:
            chunks.append([])
        chunks[-1].append((d, cats))
    return chunks, plain


def _chunk_key(chunk: list[tuple[str, list[str]]]) -> pl.Expr:
    """Mixed radix of the chunk's category codes, null as the code after the last category."""
    key = None
    for d, cats in chunk:
        code = pl.col(d).to_physical().cast(pl.UInt32).fill_null(len(cats))
        key = code if key is None else key * (len(cats) + 1) + code
    assert key is not None  # a chunk has at least one dimension
    return key


def _split_chunk(chunk: list[tuple[str, list[str]]], keys: list[int],
                 ors: dict[str, list[int]]) -> dict[str, tuple[list[Any], dict[str, list[int]]]]:
    """Per dimension of a chunk: its values and, per word, the OR over the combined keys holding each value."""
    out = {}
    stride = 1
    for d, cats in reversed(chunk):
        acc: dict[int, dict[str, int]] = {}
        for r, key in enumerate(keys):
            words = acc.setdefault(key // stride % (len(cats) + 1), dict.fromkeys(ors, 0))
            for n, col in ors.items():
                words[n] |= col[r]
        out[d] = ([cats[code] if code < len(cats) else None for code in acc],
                  {n: [words[n] for words in acc.values()] for n in ors})
        stride *= len(cats) + 1
    return out


def _plan(frame: Frame, claim: Claim, dims: list[str], swept: bool) -> Verdict | tuple[pl.LazyFrame | None, _Job, str]:
    """A claim's verdict when it needs no data, else what to tally: the frame (None: the results frame), the
    job and what the claim needs (for "this grid has no ...")."""
    if not claim.computable:
        return Verdict(claim, "not computable", "-", 0, 0, "",
                       f"capacity arithmetic cannot settle a {claim.kind} claim; {claim.settle}")
    assert claim.metric is not None
    if claim.kind in TIMED and claim.metric not in frame.schema:
        return Verdict(claim, "not computable", "-", 0, 0, "",
                       f"needs the simulator in seconds ({claim.metric}); {claim.settle}")
    need = ", ".join(_applies_text(k, v) for k, v in claim.applies_to.items()) or "matching points"
    cond = _applies(frame, claim)
    if claim.pair:
        need = f"points with {claim.pair['dimension']} = {' and '.join(claim.pair['over'])}"
    if cond is None or _never(frame, claim):
        return Verdict(claim, "not applicable", "-", 0, 0, "", f"this grid has no {need}")
    lazy: pl.LazyFrame | None = None
    if claim.pair:
        keys = _pair_keys(frame, claim, dims, swept)
        paired = _pair_by_position(frame, claim, cond, keys)
        if paired is None:
            value = pl.col("value")  # finite wherever a pair exists: a column mask, so its sum counts rows
            lazy, mask = _pair_frame(frame, claim, cond, dims, keys).lazy(), value.is_not_null()
        else:
            first, value = paired
            mask = first & value.is_finite()
    else:
        value = pl.col(claim.metric).cast(pl.Float64)
        mask = cond & value.is_not_null()
    shown = None if claim.pair else pl.col(claim.metric)
    counted = frame.helper("_several_lengths") if claim.over_lengths else None
    return lazy, _Job(claim, mask, value, shown, counted=counted), need


def _verdict(claim: Claim, t: dict[str, Any], dims: list[str], need: str) -> Verdict:
    n, h = int(t["n"]), int(t["h"])
    if claim.over_lengths and n == 0 and t["all"]:
        return Verdict(claim, "not applicable", "-", 0, 0, "",
                       "an average over many lengths; one length's tail is its remainder mod the block "
                       "size (0 when block-aligned)")
    if n == 0:
        return Verdict(claim, "not applicable", "-", 0, 0, "", f"this grid has no {need}")
    computed = _range_text(t["vmin"], t["vmax"])
    if claim.circular:
        return Verdict(claim, "circular", computed, n, 0, "", claim.circular)
    where = ""
    if h == n:
        verdict = "holds"
    elif h == 0:
        verdict = "contradicted"
    else:
        verdict = "holds only where"
        where = _where_text(*({d: t[f"{p}_{d}"] for d in dims} for p in ("a", "h", "f")))
    note = claim.scope if claim.kind not in TIMED else "; ".join(x for x in (TIME_LABEL, claim.scope) if x)
    return Verdict(claim, verdict, computed, n, h, where, note, below=int(t["nb"]), above=int(t["na"]))


def _dims(frame: Frame, dims: list[str] | None) -> list[str]:
    return [d for d in (dims if dims is not None else SEPARATORS) if d in frame.schema]


def judge(df: pl.DataFrame | Frame, claim: Claim, dims: list[str] | None = None) -> Verdict:
    frame = df if isinstance(df, Frame) else Frame(df)
    return _judge_many(frame, [claim], dims, [])[0][0]


def judge_joint(frame: Frame, members: list[Claim], dims: list[str]) -> Verdict:
    """Claims from one source about one setting, judged on the same configuration: a point agrees when
    every member's metric is within its range there."""
    return _judge_many(frame, [], dims, [members])[1][0]


def _judge_many(frame: Frame, claims: list[Claim], dims: list[str] | None,
                joints: list[list[Claim]]) -> tuple[list[Verdict], list[Verdict]]:
    """Verdicts of ``claims`` and of each joint group in ``joints``; everything judged on the results frame
    itself is tallied together in one pass (a pair's points are paired on a frame of their own)."""
    swept = dims is not None
    dims = _dims(frame, dims)
    out: list[Verdict | None] = []
    main: list[tuple[int, _Job, Any]] = []
    for claim in claims:
        planned = _plan(frame, claim, dims, swept)
        if isinstance(planned, Verdict):
            out.append(planned)
            continue
        lazy, job, need = planned
        if lazy is not None:
            out.append(_verdict(claim, _tally_many(lazy, [job], dims)[0], dims, need))
        else:
            out.append(None)
            main.append((len(out) - 1, job, need))
    joint_out: list[Verdict | None] = []
    for members in joints:
        planned_joint = _joint_job(frame, members)
        joint_out.append(planned_joint if isinstance(planned_joint, Verdict) else None)
        if not isinstance(planned_joint, Verdict):
            main.append((-len(joint_out), planned_joint, members))
    for (i, job, need), t in zip(main, _tally_many(frame.df.lazy(), [j for _, j, _ in main], dims), strict=True):
        if i >= 0:
            out[i] = _verdict(job.claim, t, dims, need)
        else:
            joint_out[-i - 1] = _joint_verdict(need, t, dims)
    return [v for v in out if v is not None], [v for v in joint_out if v is not None]


def _joint_claim(members: list[Claim]) -> Claim:
    text = " and ".join(f"`{c.id}`" for c in members)
    return Claim(id=members[0].joint, claim=f"Both at once, on one configuration: {text}.",
                 source=members[0].source, conditions=members[0].conditions, kind=members[0].kind,
                 metric=" + ".join(c.metric or "" for c in members))


def _joint_job(frame: Frame, members: list[Claim]) -> Verdict | _Job:
    joint = _joint_claim(members)
    conds = [_applies(frame, c) for c in members]
    if any(c is None for c in conds) or any(_never(frame, c) or c.pair for c in members):
        return Verdict(joint, "not applicable", "-", 0, 0, "", "this grid has no configuration both apply to")
    mask, ok = pl.lit(True), pl.lit(True)
    for claim, cond in zip(members, conds, strict=True):
        value = pl.col(claim.metric or "").cast(pl.Float64)
        below, above = _bounds(claim, value)
        mask = mask & cond & value.is_not_null()  # type: ignore[operator]
        ok = ok & ~below & ~above
    # judge "all members within" as one claim of a 0/1 value: within [1, 1]
    proxy = Claim(id=joint.id, claim="", source="", conditions="", kind="capacity", metric="_joint",
                  claimed=(1, 1))
    extra = {f"lo{i}": (pl.col(c.metric or ""), "min") for i, c in enumerate(members)} | \
        {f"hi{i}": (pl.col(c.metric or ""), "max") for i, c in enumerate(members)}
    return _Job(proxy, mask, ok.cast(pl.Float64), pl.lit(None, pl.Float64), extra)  # its range is not shown


def _joint_verdict(members: list[Claim], t: dict[str, Any], dims: list[str]) -> Verdict:
    joint = _joint_claim(members)
    n, h = int(t["n"]), int(t["h"])
    if n == 0:
        return Verdict(joint, "not applicable", "-", 0, 0, "", "this grid has no configuration both apply to")
    computed = "; ".join(_range_text(t[f"lo{i}"], t[f"hi{i}"]) for i in range(len(members)))
    where = _where_text(*({d: t[f"{p}_{d}"] for d in dims} for p in ("a", "h", "f"))) if 0 < h < n else ""
    verdict = "holds" if h == n else ("contradicted" if h == 0 else "holds only where")
    return Verdict(joint, verdict, computed, n, h, where, "no configuration meets both" if h == 0 else "")


SEPARATORS = ("model", "workload", "kv_dtype", "block_size", "tp", "pp", "gpu", "gpu_util", "budget_bytes")


def judge_all(df: pl.DataFrame, ids: list[str] | None = None, dims: list[str] | None = None,
              models: dict[str, Any] | None = None) -> list[Verdict]:
    """Every selected claim's verdict; ``dims``: the swept dimensions (result column names) a "holds where"
    may name; ``models``: name -> Architecture, for claims that apply by model properties.  A joint group's
    verdict follows its last member."""
    claims = load_claims()
    if ids is not None:
        claims = [c for c in claims if c.id in ids]
    elif "engine" not in df.columns:  # an engine's own statement is scoped by grids with engine: only (every
        claims = [c for c in claims if "engine" not in c.applies_to]  # other grid's points are vLLM's plans)
    dims = list(dims if dims is not None else SEPARATORS)
    frame = Frame(df, model_properties(models) if models else None)
    joints: dict[str, list[Claim]] = {}
    for c in claims:
        if c.joint:
            joints.setdefault(c.joint, []).append(c)
    groups = [members for members in joints.values() if len(members) > 1]
    out, joint_verdicts = _judge_many(frame, claims, dims, groups)
    for members, verdict in zip(groups, joint_verdicts, strict=True):
        at = max(i for i, v in enumerate(out) if v.claim in members)
        out.insert(at + 1, verdict)
    return out

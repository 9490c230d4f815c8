"""The claims registry and its verdicts against a grid's results."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import polars as pl
import yaml

COMPUTABLE = ("capacity", "waste", "slots")
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
        return self.kind in COMPUTABLE

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
    return out


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
        """``fn(value)`` at every point, computed once per distinct value of a text column."""
        cats = self.categories(col)
        if cats is None:
            values = [str(v) for v in self.df.get_column(col).unique().to_list()]
            return pl.col(col).cast(pl.Utf8).replace_strict(values, [fn(v) for v in values], return_dtype=dtype)
        return pl.lit(pl.Series([fn(c) for c in cats], dtype=dtype)).gather(pl.col(col).to_physical())

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
            cond = cond & expr.is_between(allowed[0], allowed[1]).fill_null(False)
        else:
            cond = cond & frame.is_in(col, allowed)
    return cond


def _pair_frame(frame: Frame, claim: Claim, cond: pl.Expr, dims: list[str], swept: bool) -> pl.DataFrame:
    """Rows with a ``value`` column: the ratio of the metric at the pair's first value over its second, for
    points alike in every other parameter (every other swept dimension, when ``dims`` are the swept ones)."""
    assert claim.metric is not None and claim.pair is not None
    df = frame.df
    dim, (first, second) = claim.pair["dimension"], claim.pair["over"]
    if swept:
        keys = [c for c in dims if c != dim] or ["prefix"]
    else:
        keys = [c for c in PARAMS if c in df.columns and c != dim and df.get_column(c).n_unique() > 1] or ["prefix"]
    partner = pl.struct(keys).hash(seed=0).alias("_partner")  # one join key instead of many columns
    keep = list(dict.fromkeys(d for d in dims if d in df.columns))
    base = df.lazy().filter(cond)
    a = base.filter(frame.is_in(dim, [first])).select(*keep, claim.metric, partner)
    b = base.filter(frame.is_in(dim, [second])).select(partner, pl.col(claim.metric).alias("_base")) \
        .unique("_partner")
    return a.join(b, on="_partner", how="inner").select(
        *keep, (pl.col(claim.metric) / pl.col("_base")).alias("value")).filter(pl.col("value").is_finite()) \
        .collect()


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


def _tally(lazy: pl.LazyFrame, mask: pl.Expr, value: pl.Expr, claim: Claim, dims: list[str]) -> dict[str, Any]:
    """Counts and the value's range over the applicable points and, per dimension, its distinct values over
    all / agreeing / disagreeing points: one pass, each dimension's value and the verdict packed in one integer
    (code x 2 + agrees) so a unique of integers replaces a group-by."""
    schema = lazy.collect_schema()
    below, above = _bounds(claim, pl.col("_v"))
    ok = (~below & ~above).alias("_ok")
    packed = []
    for d in dims:
        if isinstance(schema[d], pl.Enum) or schema[d].is_integer():
            key = pl.col(d).to_physical().cast(pl.Int64) if isinstance(schema[d], pl.Enum) else pl.col(d)
            key = key.cast(pl.Int64).fill_null(-1)  # -1: none (e.g. no GPU)
            packed.append((key * 2 + pl.col("_ok").cast(pl.Int64)).unique().implode().alias(f"p_{d}"))
        else:  # other types: (value, agrees) pairs
            packed.append(pl.struct(pl.col(d).alias("v"), pl.col("_ok").alias("ok")).unique().implode()
                          .alias(f"s_{d}"))
    row = lazy.filter(mask).select(*dims, value.alias("_v")).with_columns(
        ok, below.alias("_below"), above.alias("_above")).select(
        pl.len().alias("n"), pl.col("_ok").sum().alias("h"), pl.col("_below").sum().alias("nb"),
        pl.col("_above").sum().alias("na"), pl.col("_v").min().alias("vmin"), pl.col("_v").max().alias("vmax"),
        *packed).collect().row(0, named=True)
    out = {k: row[k] for k in ("n", "h", "nb", "na", "vmin", "vmax")}
    for d in dims:
        cats = schema[d].categories.to_list() if isinstance(schema[d], pl.Enum) else None

        def value_of(code: int, cats: list[str] | None = cats) -> Any:
            if code == -1:
                return None
            return cats[code] if cats is not None else code

        if f"p_{d}" in row:
            pairs = [(value_of(x // 2), x % 2) for x in row[f"p_{d}"]]
        else:
            pairs = [(x["v"], int(x["ok"])) for x in row[f"s_{d}"]]
        out[f"a_{d}"] = list({v for v, _ in pairs})
        out[f"h_{d}"] = [v for v, agrees in pairs if agrees]
        out[f"f_{d}"] = [v for v, agrees in pairs if not agrees]
    return out


def judge(df: pl.DataFrame | Frame, claim: Claim, dims: list[str] | None = None) -> Verdict:
    if not claim.computable:
        return Verdict(claim, "not computable", "-", 0, 0, "",
                       f"capacity arithmetic cannot settle a {claim.kind} claim; {claim.settle}")
    frame = df if isinstance(df, Frame) else Frame(df)
    swept = dims is not None
    dims = [d for d in (dims if dims is not None else SEPARATORS) if d in frame.schema]
    assert claim.metric is not None
    need = ", ".join(_applies_text(k, v) for k, v in claim.applies_to.items()) or "matching points"
    cond = _applies(frame, claim)
    if claim.pair:
        need = f"points with {claim.pair['dimension']} = {' and '.join(claim.pair['over'])}"
    if cond is None:
        return Verdict(claim, "not applicable", "-", 0, 0, "", f"this grid has no {need}")
    if claim.pair:
        lazy, mask, value = _pair_frame(frame, claim, cond, dims, swept).lazy(), pl.lit(True), pl.col("value")
    else:
        value = pl.col(claim.metric).cast(pl.Float64)
        lazy, mask = frame.df.lazy(), cond & value.is_not_null()
    if claim.over_lengths:
        several = lazy.select((mask & frame.helper("_several_lengths")).sum().alias("several"),
                              mask.sum().alias("all")).collect().row(0)
        if several[0] == 0:
            if several[1] == 0:
                return Verdict(claim, "not applicable", "-", 0, 0, "", f"this grid has no {need}")
            return Verdict(claim, "not applicable", "-", 0, 0, "",
                           "an average over many lengths; one length's tail is its remainder mod the block "
                           "size (0 when block-aligned)")
        mask = mask & frame.helper("_several_lengths")
    t = _tally(lazy, mask, value, claim, dims)
    n, h = int(t["n"]), int(t["h"])
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
    return Verdict(claim, verdict, computed, n, h, where, claim.scope, below=int(t["nb"]), above=int(t["na"]))


def judge_joint(frame: Frame, members: list[Claim], dims: list[str]) -> Verdict:
    """Claims from one source about one setting, judged on the same configuration: a point agrees when
    every member's metric is within its range there."""
    dims = [d for d in dims if d in frame.schema]
    text = " and ".join(f"`{c.id}`" for c in members)
    joint = Claim(id=members[0].joint, claim=f"Both at once, on one configuration: {text}.",
                  source=members[0].source, conditions=members[0].conditions, kind=members[0].kind,
                  metric=" + ".join(c.metric or "" for c in members))
    conds = [_applies(frame, c) for c in members]
    if any(c is None for c in conds) or any(c.pair for c in members):
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
    t = _tally(frame.df.lazy(), mask, ok.cast(pl.Float64), proxy, dims)
    n, h = int(t["n"]), int(t["h"])
    if n == 0:
        return Verdict(joint, "not applicable", "-", 0, 0, "", "this grid has no configuration both apply to")
    ranges = frame.df.lazy().filter(mask).select(
        *[pl.col(c.metric or "").min().alias(f"lo{i}") for i, c in enumerate(members)],
        *[pl.col(c.metric or "").max().alias(f"hi{i}") for i, c in enumerate(members)]).collect().row(0)
    k = len(members)
    computed = "; ".join(_range_text(ranges[i], ranges[k + i]) for i in range(k))
    where = _where_text(*({d: t[f"{p}_{d}"] for d in dims} for p in ("a", "h", "f"))) if 0 < h < n else ""
    verdict = "holds" if h == n else ("contradicted" if h == 0 else "holds only where")
    return Verdict(joint, verdict, computed, n, h, where, "no configuration meets both" if h == 0 else "")


SEPARATORS = ("model", "workload", "kv_dtype", "block_size", "tp", "pp", "gpu", "gpu_util", "budget_bytes")


def judge_all(df: pl.DataFrame, ids: list[str] | None = None, dims: list[str] | None = None,
              models: dict[str, Any] | None = None) -> list[Verdict]:
    """Every selected claim's verdict; ``dims``: the swept dimensions (result column names) a "holds where"
    may name; ``models``: name -> Architecture, for claims that apply by model properties."""
    claims = load_claims()
    if ids is not None:
        claims = [c for c in claims if c.id in ids]
    dims = list(dims if dims is not None else SEPARATORS)
    frame = Frame(df, model_properties(models) if models else None)
    out = []
    joints: dict[str, list[Claim]] = {}
    for c in claims:
        out.append(judge(frame, c, dims))
        if c.joint:
            joints.setdefault(c.joint, []).append(c)
    for members in joints.values():
        if len(members) > 1:
            at = max(i for i, v in enumerate(out) if v.claim in members)
            out.insert(at + 1, judge_joint(frame, members, dims))
    return out

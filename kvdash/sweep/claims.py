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
    raw = yaml.safe_load((resources.files("kvdash") / "data" / "claims.yaml").read_text(encoding="utf-8"))
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
    examples: list[str]  # ids of agreeing points (at most 5)
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


def model_properties(models: dict[str, Any]) -> pl.DataFrame:
    """Per model name: ``params_b`` (billions of parameters) and ``attention`` (mha, gqa, mqa, mla, plus
    ``+sliding`` for a windowed mix), so a claim can apply by what a model is, not what it is called.

    Parameters come from a preset's published count; otherwise from weights given in the grid, at 2 bytes
    each (bf16); a preset with only a checkpoint size (e.g. MXFP4) has no parameter class."""
    import re

    rows = []
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
        rows.append({"model": name, "params_b": params, "attention": kind + ("+sliding" if arch.windows else "")})
    return pl.DataFrame(rows, schema={"model": pl.Utf8, "params_b": pl.Float64, "attention": pl.Utf8})


def _with_helpers(df: pl.DataFrame, props: pl.DataFrame | None = None) -> pl.DataFrame:
    out = df.with_columns(
        (pl.col("tp") * pl.col("pp")).alias("tp_times_pp"),
        (pl.col("prefix") > 0).alias("prefix_positive"),
        pl.col("lengths").cast(pl.Utf8).str.contains(",").alias("_several_lengths"),
    )
    if props is not None and props.height:
        # gathered through a small table: a join would copy every column of a wide frame
        names = out.get_column("model").cast(pl.Utf8)
        index = {n: i for i, n in enumerate(props.get_column("model").to_list())}
        idx = names.replace_strict(index, default=None, return_dtype=pl.UInt32)
        out = out.with_columns(props.get_column("params_b").gather(idx).alias("params_b"),
                               props.get_column("attention").gather(idx).alias("attention"))
    return out


def _narrow(df: pl.DataFrame, claim: Claim, dims: list[str]) -> pl.DataFrame:
    """Only the columns a claim needs (filtering a wide frame copies every column)."""
    assert claim.metric is not None
    cols = ["id", *PARAMS, *dims, *claim.applies_to, "_several_lengths", "lengths", claim.metric]
    return df.select(list(dict.fromkeys(c for c in cols if c in df.columns)))


def _applicable(df: pl.DataFrame, claim: Claim) -> pl.DataFrame:
    for col, allowed in claim.applies_to.items():
        if col not in df.columns:
            return df.head(0)
        if col == "params_b":  # a parameter class: [low, high] billions
            df = df.filter(pl.col(col).is_between(allowed[0], allowed[1]))
            continue
        column = pl.col(col).cast(pl.Utf8) if isinstance(df.schema[col], pl.Enum) else pl.col(col)
        df = df.filter(column.is_in(allowed))
    return df


def _metric_frame(df: pl.DataFrame, claim: Claim) -> pl.DataFrame:
    """Rows with a ``value`` column: the metric, or for a pair claim the ratio first / second."""
    assert claim.metric is not None
    if not claim.pair:
        return df.with_columns(pl.col(claim.metric).cast(pl.Float64).alias("value")).filter(
            pl.col("value").is_not_null())
    dim, (first, second) = claim.pair["dimension"], claim.pair["over"]
    keys = [c for c in PARAMS if c in df.columns and c != dim and df.get_column(c).n_unique() > 1]
    if not keys:
        keys = ["prefix"]
    partner = pl.struct(keys).hash(seed=0).alias("_partner")  # one join key instead of many columns
    text = pl.col(dim).cast(pl.Utf8)
    a = df.filter(text == first).with_columns(partner)
    b = df.filter(text == second).select(partner, pl.col(claim.metric).alias("_base")).unique("_partner")
    joined = a.join(b, on="_partner", how="inner")
    return joined.with_columns((pl.col(claim.metric) / pl.col("_base")).alias("value")).filter(
        pl.col("value").is_finite())


def shown_value(v: Any) -> str:
    if isinstance(v, int) and not isinstance(v, bool) and v >= 1 << 30:
        return f"{v / (1 << 30):.2f} GiB"
    return str(v)


def shared_where(frame: pl.DataFrame, flag: str, dims: list[str]) -> str:
    """What the rows with ``flag`` true share in the swept dimensions ``dims``, AND-joined, e.g.
    ``kv_dtype = fp8 AND block_size in {16, 32}`` (empty when no dimension separates them)."""
    cols = [c for c in dims if c in frame.columns]
    if not cols:
        return ""
    everything = frame.select(pl.col(c).unique().implode() for c in cols).row(0, named=True)
    held = frame.filter(pl.col(flag)).select(pl.col(c).unique().implode() for c in cols).row(0, named=True)
    parts = []
    for col in cols:
        all_vals, held_vals = set(everything[col]), set(held[col])
        if len(all_vals) > 1 and 0 < len(held_vals) < len(all_vals):
            negate = len(held_vals) > len(all_vals) / 2 + 1  # "not in" the few others is shorter
            vals = (all_vals - held_vals) if negate else held_vals
            shown = [shown_value(v) for v in sorted(vals, key=lambda v: (v is None, v if isinstance(
                v, int | float) else str(v)))]
            if len(shown) == 1:
                parts.append(f"{col} {'≠' if negate else '='} {shown[0]}")
            else:
                parts.append(f"{col} {'not in' if negate else 'in'} {{{', '.join(shown)}}}")
    return " AND ".join(parts)


def _where_text(frame: pl.DataFrame, dims: list[str]) -> str:
    """The shorter of what the agreeing points share and what the disagreeing points share."""
    held = shared_where(frame, "in_range", dims)
    failing = shared_where(frame.with_columns(~pl.col("in_range")), "in_range", dims)
    options = ([held] if held else []) + ([f"everywhere except where {failing}"] if failing else [])
    return min(options, key=len) if options else "no single swept dimension separates the agreeing points"


def _applies_text(key: str, allowed: list[Any]) -> str:
    if key == "params_b":
        return f"model of {fmt(allowed[0])}-{fmt(allowed[1])}B parameters"
    return f"{key} in {{{', '.join(map(shown_value, allowed))}}}"


def _range(values: pl.Series) -> str:
    vmin, vmax = values.min(), values.max()
    return fmt(vmin) if vmin == vmax else f"{fmt(vmin)} to {fmt(vmax)}"  # type: ignore[arg-type]


def _in_range(claim: Claim) -> tuple[pl.Expr, pl.Expr]:
    """(below, above) conditions on ``value`` with the claim's tolerance."""
    assert claim.claimed is not None
    lo, hi = claim.claimed
    below = pl.col("value") < lo - claim.tolerance if lo is not None else pl.lit(False)
    above = pl.col("value") > hi + claim.tolerance if hi is not None else pl.lit(False)
    return below, above


def judge(df: pl.DataFrame, claim: Claim, dims: list[str] | None = None) -> Verdict:
    if not claim.computable:
        return Verdict(claim, "not computable", "-", 0, 0, "", [],
                       f"capacity arithmetic cannot settle a {claim.kind} claim; {claim.settle}")
    if "tp_times_pp" not in df.columns:
        df = _with_helpers(df)
    dims = list(dims or SEPARATORS)
    applicable = _metric_frame(_applicable(_narrow(df, claim, dims), claim), claim)
    if applicable.height == 0:
        need = ", ".join(_applies_text(k, v) for k, v in claim.applies_to.items()) or "matching points"
        if claim.pair:
            need = f"points with {claim.pair['dimension']} = {' and '.join(claim.pair['over'])}"
        return Verdict(claim, "not applicable", "-", 0, 0, "", [], f"this grid has no {need}")
    if claim.over_lengths:
        several = applicable.filter(pl.col("_several_lengths"))
        if several.height == 0:
            return Verdict(claim, "not applicable", _range(applicable.get_column("value")), 0, 0, "", [],
                           "an average over many lengths; one length's tail is its remainder mod the block "
                           "size (0 when block-aligned)")
        applicable = several
    if claim.circular:
        return Verdict(claim, "circular", _range(applicable.get_column("value")), applicable.height, 0, "", [],
                       claim.circular)
    below, above = _in_range(claim)
    applicable = applicable.with_columns(below.alias("_below"), above.alias("_above")) \
        .with_columns((~pl.col("_below") & ~pl.col("_above")).alias("in_range"))
    n = applicable.height
    counts = applicable.select(pl.col("in_range").sum(), pl.col("_below").sum(), pl.col("_above").sum()).row(0)
    h, nb, na = (int(x) for x in counts)
    where = ""
    if h == n:
        verdict = "holds"
    elif h == 0:
        verdict = "contradicted"
    else:
        verdict = "holds only where"
        where = _where_text(applicable, dims)
    # the five smallest ids: independent of row order, which joins do not keep
    examples = sorted(applicable.filter(pl.col("in_range")).get_column("id").bottom_k(5).to_list())
    return Verdict(claim, verdict, _range(applicable.get_column("value")), n, h, where, examples, claim.scope,
                   below=nb, above=na)


def judge_joint(df: pl.DataFrame, members: list[Claim], dims: list[str]) -> Verdict:
    """Claims from one source about one setting, judged on the same configuration: a point agrees when
    every member's metric is within its range there."""
    frames = []
    for claim in members:
        a = _metric_frame(_applicable(_narrow(df, claim, dims), claim), claim)
        below, above = _in_range(claim)
        frames.append(a.select("id", *[c for c in dims if c in a.columns],
                               (~below & ~above).alias(f"_ok_{claim.id}"), pl.col("value").alias(f"_v_{claim.id}")))
    joined = frames[0]
    for other in frames[1:]:
        joined = joined.join(other.drop([c for c in other.columns if c in joined.columns and c != "id"]), on="id")
    text = " and ".join(f"`{c.id}`" for c in members)
    joint = Claim(id=members[0].joint, claim=f"Both at once, on one configuration: {text}.",
                  source=members[0].source, conditions=members[0].conditions, kind=members[0].kind,
                  metric=" + ".join(c.metric or "" for c in members))
    if joined.height == 0:
        return Verdict(joint, "not applicable", "-", 0, 0, "", [], "this grid has no configuration both apply to")
    ok = pl.all_horizontal(f"_ok_{c.id}" for c in members)
    joined = joined.with_columns(ok.alias("in_range"))
    n, h = joined.height, int(joined.get_column("in_range").sum())
    computed = "; ".join(_range(joined.get_column(f"_v_{c.id}")) for c in members)
    where = _where_text(joined, dims) if 0 < h < n else ""
    verdict = "holds" if h == n else ("contradicted" if h == 0 else "holds only where")
    note = "no configuration meets both" if h == 0 else ""
    return Verdict(joint, verdict, computed, n, h, where, [], note)


SEPARATORS = ("model", "workload", "kv_dtype", "block_size", "tp", "pp", "gpu", "gpu_util", "budget_bytes")


def judge_all(df: pl.DataFrame, ids: list[str] | None = None, dims: list[str] | None = None,
              models: dict[str, Any] | None = None) -> list[Verdict]:
    """Every selected claim's verdict; ``dims``: the swept dimensions (result column names) a "holds where"
    may name; ``models``: name -> Architecture, for claims that apply by model properties."""
    claims = load_claims()
    if ids is not None:
        claims = [c for c in claims if c.id in ids]
    dims = list(dims if dims is not None else SEPARATORS)
    df = _with_helpers(df, model_properties(models) if models else None)
    out = []
    joints: dict[str, list[Claim]] = {}
    for c in claims:
        out.append(judge(df, c, dims))
        if c.joint:
            joints.setdefault(c.joint, []).append(c)
    for members in joints.values():
        if len(members) > 1:
            at = max(i for i, v in enumerate(out) if v.claim in members)
            out.insert(at + 1, judge_joint(df, members, dims))
    return out

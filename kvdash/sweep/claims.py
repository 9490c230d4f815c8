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
    applies_to: dict[str, list[Any]] = field(default_factory=dict)
    pair: dict[str, Any] | None = None
    settle: str = ""
    scope: str = ""

    @property
    def computable(self) -> bool:
        return self.kind in COMPUTABLE

    def claimed_text(self) -> str:
        if not self.claimed:
            return "-"
        lo, hi = self.claimed
        if hi is None:
            return f"at least {fmt(lo)}"
        return fmt(lo) if lo == hi else f"{fmt(lo)} to {fmt(hi)}"


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
            applies_to=item.get("applies_to", {}), pair=item.get("pair"), settle=item.get("settle", ""),
            scope=item.get("scope", ""),
        ))
    return out


@dataclass
class Verdict:
    claim: Claim
    verdict: str  # holds | holds only where | contradicted | not computable | not applicable
    computed: str  # the computed value or range
    points: int  # applicable points
    holding: int  # points in the claimed range
    where: str  # for "holds only where": what the holding points share
    examples: list[str]  # ids of holding points (at most 5)
    note: str


def _with_helpers(df: pl.DataFrame) -> pl.DataFrame:
    return df.with_columns(
        (pl.col("tp") * pl.col("pp")).alias("tp_times_pp"),
        (pl.col("prefix") > 0).alias("prefix_positive"),
    )


def _narrow(df: pl.DataFrame, claim: Claim) -> pl.DataFrame:
    """Only the columns a claim needs (filtering a wide frame copies every column)."""
    assert claim.metric is not None
    cols = ["id", *PARAMS, *claim.applies_to, claim.metric]
    return df.select(list(dict.fromkeys(c for c in cols if c in df.columns)))


def _applicable(df: pl.DataFrame, claim: Claim) -> pl.DataFrame:
    for col, allowed in claim.applies_to.items():
        if col not in df.columns:
            return df.head(0)
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


SEPARATORS = ("model", "workload", "kv_dtype", "block_size", "tp", "pp", "gpu", "gpu_util", "budget_bytes")


def _shared(frame: pl.DataFrame) -> str:
    """The parameter values the points with ``in_range`` true are confined to,
    e.g. ``block_size=16; kv_dtype=fp8``."""
    cols = [c for c in SEPARATORS if c in frame.columns]
    everything = frame.select(pl.col(c).unique().implode() for c in cols).row(0, named=True)
    held = frame.filter(pl.col("in_range")).select(pl.col(c).unique().implode() for c in cols).row(0, named=True)
    parts = []
    for col in cols:
        all_vals, held_vals = set(everything[col]), set(held[col])
        if len(all_vals) > 1 and 0 < len(held_vals) < len(all_vals):
            shown = ", ".join(str(v) for v in sorted(held_vals, key=lambda v: (v is None, str(v))))
            parts.append(f"{col} in {{{shown}}}" if len(held_vals) > 1 else f"{col}={shown}")
    return "; ".join(parts)


def judge(df: pl.DataFrame, claim: Claim) -> Verdict:
    if not claim.computable:
        return Verdict(claim, "not computable", "-", 0, 0, "", [],
                       f"capacity arithmetic cannot settle a {claim.kind} claim; {claim.settle}")
    if "tp_times_pp" not in df.columns:
        df = _with_helpers(df)
    applicable = _metric_frame(_applicable(_narrow(df, claim), claim), claim)
    if applicable.height == 0:
        need = ", ".join(f"{k} in {{{', '.join(map(str, v))}}}" for k, v in claim.applies_to.items()) \
            or "matching points"
        if claim.pair:
            need = f"points with {claim.pair['dimension']} = {' and '.join(claim.pair['over'])}"
        return Verdict(claim, "not applicable", "-", 0, 0, "", [], f"this grid has no {need}")
    assert claim.claimed is not None
    lo, hi = claim.claimed
    cond = pl.lit(True)
    if lo is not None:
        cond = cond & (pl.col("value") >= lo)
    if hi is not None:
        cond = cond & (pl.col("value") <= hi)
    applicable = applicable.with_columns(cond.alias("in_range"))
    n = applicable.height
    h = int(applicable.get_column("in_range").sum())
    vmin, vmax = applicable.get_column("value").min(), applicable.get_column("value").max()
    computed = fmt(vmin) if vmin == vmax else f"{fmt(vmin)} to {fmt(vmax)}"  # type: ignore[arg-type]
    where = ""
    if h == n:
        verdict = "holds"
    elif h == 0:
        verdict = "contradicted"
    else:
        verdict = "holds only where"
        where = _shared(applicable)
        if not where:
            failing = _shared(applicable.with_columns(~pl.col("in_range")))
            where = f"everywhere except where {failing}" if failing else \
                "no single parameter separates the points in range from the rest"
    # the five smallest ids: independent of row order, which joins do not keep
    examples = sorted(applicable.filter(pl.col("in_range")).get_column("id").bottom_k(5).to_list())
    return Verdict(claim, verdict, computed, n, h, where, examples, claim.scope)


def judge_all(df: pl.DataFrame, ids: list[str] | None = None) -> list[Verdict]:
    claims = load_claims()
    if ids is not None:
        claims = [c for c in claims if c.id in ids]
    df = _with_helpers(df)
    return [judge(df, c) for c in claims]

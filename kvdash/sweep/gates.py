"""Gates of a grid evaluated on its results: one place for ``--check``, the report's gate table and its
decision section.

A gate constrains the points its ``where:`` selects (every point when it has none); a point outside a
gate's scope passes it.  A null metric fails a gate (nothing fits, or the ratio is undefined).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from kvdash.sweep.gridfile import Gate, GridSpec


def where_column(dim: str) -> str:
    """The result column a gate's ``where`` dimension is read from."""
    return "budget_bytes" if dim == "budget" else dim


def scope_expr(gate: Gate) -> pl.Expr:
    cond = pl.lit(True)
    for dim, allowed in gate.where.items():
        col = pl.col(where_column(dim))
        cond = cond & (col.cast(pl.Utf8).is_in([str(a) for a in allowed]) if dim != "budget"
                       else col.is_in(allowed))
    return cond


def ok_expr(gate: Gate) -> pl.Expr:
    value = pl.col(gate.metric)
    ok = value.is_not_null()
    if gate.min is not None:
        ok = ok & (value >= gate.min)
    if gate.max is not None:
        ok = ok & (value <= gate.max)
    return ok


def slack_expr(gate: Gate) -> pl.Expr:
    """How far inside the bound a point is, in the metric's unit (negative: outside); the tighter bound
    when a gate has both."""
    value = pl.col(gate.metric).cast(pl.Float64)
    parts = []
    if gate.min is not None:
        parts.append(value - gate.min)
    if gate.max is not None:
        parts.append(gate.max - value)
    return pl.min_horizontal(parts) if len(parts) > 1 else parts[0]


def bounds_text(gate: Gate) -> str:
    if gate.min is not None and gate.max is not None:
        return f"= {gate.min:g}" if gate.min == gate.max else f"{gate.min:g} to {gate.max:g}"
    return f"≥ {gate.min:g}" if gate.min is not None else f"≤ {gate.max:g}"


def passing_expr(spec: GridSpec) -> pl.Expr:
    """True where a point passes every gate of the grid."""
    ok = pl.lit(True)
    for gate in spec.gates:
        ok = ok & (~scope_expr(gate) | ok_expr(gate))
    return ok


@dataclass
class GateResult:
    gate: Gate
    scope: int  # points the gate constrains
    passing: int
    best: dict[str, Any] | None  # the row with the most slack
    worst: dict[str, Any] | None  # the row with the least slack
    margin: float | None  # the worst point's slack: how far the tightest point is inside the bound

    @property
    def failing(self) -> int:
        return self.scope - self.passing


def evaluate_gates(spec: GridSpec, frame: pl.DataFrame, keep: list[str]) -> list[GateResult]:
    """Each gate's counts, its best and worst point (``keep`` columns of each) and its margin."""
    out = []
    for gate in spec.gates:
        cols = list(dict.fromkeys(["id", *keep, gate.metric]))
        sub = frame.filter(scope_expr(gate)).select(*cols, ok_expr(gate).alias("_ok"),
                                                    slack_expr(gate).fill_null(float("-inf")).alias("_slack"))
        if sub.height == 0:
            out.append(GateResult(gate, 0, 0, None, None, None))
            continue
        ordered = sub.sort(["_slack", "id"], descending=[True, False])
        best, worst = ordered.row(0, named=True), ordered.row(-1, named=True)
        margin = worst["_slack"]
        out.append(GateResult(gate, sub.height, int(sub.get_column("_ok").sum()), best, worst,
                              None if margin == float("-inf") else margin))
    return out


def failure_lines(spec: GridSpec, frame: pl.DataFrame, label: Any) -> list[str]:
    """One line per failing point per gate (``kvdash sweep --check``); ``label(row)`` names the point."""
    lines = []
    for gate in spec.gates:
        bad = frame.filter(scope_expr(gate) & ~ok_expr(gate))
        for row in bad.iter_rows(named=True):
            lines.append(f"gate '{gate.name}' failed at {row['id']} ({label(row)}): {gate.metric} = "
                         f"{row[gate.metric]}, needs {bounds_text(gate)}")
    return lines

"""Gates of a grid evaluated on its results: one place for ``--check``, the report's gate table, its
decision section and ``kvdash diff``.

A gate constrains the points its ``where:`` selects (every point when it has none); a point outside a
gate's scope passes it.  A null or NaN metric fails a gate (nothing fits, or the ratio is undefined).

The frame may be the typed frame of a sweep or a ``results.csv`` read as text (``kvdash diff``):
selection compares the text of the values (``"16"``, ``"h200"``, ``"0.9"``) and the metric is read as
a float, so both give the same answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from kvdash.errors import InputError
from kvdash.errors import clip as shorten
from kvdash.markdown import md
from kvdash.sweep.gridfile import Gate, GridSpec
from kvdash.sweep.simtime import TIME_POLICIES

PASS, FAIL, NA = "pass", "FAIL", "n/a"


def where_column(dim: str) -> str:
    """The result column a gate's ``where`` dimension is read from."""
    return "budget_bytes" if dim == "budget" else dim


def scope_expr(gate: Gate, columns: list[str] | None = None) -> pl.Expr:
    """True where the gate's ``where`` selects the point; with ``columns`` (a frame's), a dimension the
    results lack is one clear error instead of a polars one."""
    cond = pl.lit(True)
    for dim, allowed in gate.where.items():
        name = where_column(dim)
        if columns is not None and name not in columns:
            raise InputError(f"gate {shorten(gate.name, 60)!r} where.{dim}", allowed,
                             "the results have no such column")
        cond = cond & pl.col(name).cast(pl.Utf8).is_in([str(a) for a in allowed])
    return cond


# a column whose empty value has a floor in another, which a min: gate is judged on: where the SLO rate search found
# no limit, every rate up to time_slo_rate_met_up_to met it; where a policy stays within the latency bound at every
# swept rate, its rate is above time_<policy>_rate_met_up_to, and paged's ratio over a policy at least
# time_paged_over_<policy>_at_least
FLOORS = {"time_slo_rate": "time_slo_rate_met_up_to",
          **{f"time_{pol}_rate": f"time_{pol}_rate_met_up_to" for pol in TIME_POLICIES},
          **{f"time_paged_over_{pol}": f"time_paged_over_{pol}_at_least" for pol in TIME_POLICIES if pol != "paged"}}


def floor_column(gate: Gate) -> str | None:
    """The column a min:-only gate falls back on where its metric is empty (:data:`FLOORS`), else None."""
    return FLOORS.get(gate.metric) if gate.min is not None and gate.max is None else None


def columns_of(gate: Gate) -> list[str]:
    """The result columns a gate reads: its metric, the floor a min: gate falls back on, and for time_slo_users the
    limit that bound (none: the figure is a floor, :func:`shown_floor`)."""
    floor = floor_column(gate)
    return [gate.metric] + ([floor] if floor else []) + (["time_binds"] if gate.metric == "time_slo_users" else [])


def floor_used(gate: Gate, row: dict[str, Any]) -> Any:
    """The floor a point is judged on (its metric empty, the floor column set), else None."""
    floor = floor_column(gate)
    return row.get(floor) if floor and row.get(gate.metric) is None else None


def shown_floor(gate: Gate, row: dict[str, Any]) -> Any:
    """The value a point's gate cell shows as a floor (``≥ X``): the floor it was judged on, or its own
    ``time_slo_users`` where the SLO search never failed (``time_binds`` none: every user simulated met it, so the
    limit is at least that); else None."""
    floor = floor_used(gate, row)
    if floor is None and gate.metric == "time_slo_users" and row.get("time_binds") == "none":
        return row.get(gate.metric)
    return floor


def gate_value(gate: Gate, columns: list[str] | None = None) -> pl.Expr:
    value = pl.col(gate.metric).cast(pl.Float64, strict=False)
    floor = floor_column(gate)
    if floor and (columns is None or floor in columns):
        value = pl.coalesce(value, pl.col(floor).cast(pl.Float64, strict=False))
    return value


def ok_expr(gate: Gate, columns: list[str] | None = None) -> pl.Expr:
    value = gate_value(gate, columns)
    ok = value.is_not_null() & value.is_not_nan()
    if gate.min is not None:
        ok = ok & (value >= gate.min)
    if gate.max is not None:
        ok = ok & (value <= gate.max)
    return ok


def slack_expr(gate: Gate) -> pl.Expr:
    """How far inside the bound a point is, in the metric's unit (negative: outside); the tighter bound
    when a gate has both."""
    value = gate_value(gate)
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
    unvalued: int = 0  # points in scope without a value (e.g. not timed): they fail, and best/worst skip them

    @property
    def failing(self) -> int:
        return self.scope - self.passing


def evaluate_gates(spec: GridSpec, frame: pl.DataFrame, keep: list[str]) -> list[GateResult]:
    """Each gate's counts, its best and worst point (``keep`` columns of each) and its margin."""
    out = []
    for gate in spec.gates:
        cols = list(dict.fromkeys(["id", *keep, *columns_of(gate)]))
        sub = frame.filter(scope_expr(gate)).select(*cols, ok_expr(gate).alias("_ok"), slack_expr(gate).fill_nan(None)
                                                    .fill_null(float("-inf")).alias("_slack"))
        if sub.height == 0:
            out.append(GateResult(gate, 0, 0, None, None, None))
            continue
        # the best and worst of the points with a value: a point without one (not timed, say) fails the gate but
        # has no slack to show, and taking it as the worst hid the tightest measured point behind a "-"
        valued = sub.filter(pl.col("_slack") > float("-inf"))
        unvalued = sub.height - valued.height
        if valued.height == 0:
            out.append(GateResult(gate, sub.height, int(sub.get_column("_ok").sum()), None, None, None, unvalued))
            continue
        ordered = valued.sort(["_slack", "id"], descending=[True, False])
        best, worst = ordered.row(0, named=True), ordered.row(-1, named=True)
        # a point without a value fails with a slack nobody knows: then no margin (the worst valued point's would
        # read as the gate's)
        out.append(GateResult(gate, sub.height, int(sub.get_column("_ok").sum()), best, worst,
                              None if unvalued else worst["_slack"], unvalued))
    return out


def status(frame: pl.DataFrame, gate: Gate) -> pl.Expr:
    """``"pass"``, ``"FAIL"`` or ``"n/a"`` (outside the gate's scope, or no such metric) for every point."""
    if gate.metric not in frame.columns:
        return pl.lit(NA)
    return pl.when(~scope_expr(gate, frame.columns)).then(pl.lit(NA)) \
        .when(~ok_expr(gate, frame.columns)).then(pl.lit(FAIL)).otherwise(pl.lit(PASS))


def failure_lines(spec: GridSpec, frame: pl.DataFrame, label: Any) -> list[str]:
    """One line per failing point per gate (``kvdash sweep --check``); ``label(row)`` names the point.
    Every user string is escaped for Markdown (the lines are pasted into job summaries and PR comments)
    and shortened, so a gate name cannot split the output or ping anyone."""
    lines = []
    for gate in spec.gates:
        if gate.metric not in frame.columns:
            lines.append(f"gate '{md(gate.name, 80)}' cannot be checked: results have no column {md(gate.metric, 60)}")
            continue
        bad = frame.filter(scope_expr(gate, frame.columns) & ~ok_expr(gate, frame.columns))
        for row in bad.iter_rows(named=True):
            floor = floor_used(gate, row)
            if floor is not None:
                value = f"{gate.metric} empty, {floor_column(gate)} = {md(floor, 40)} (no limit found below it)"
            elif row[gate.metric] is None:
                value = f"{gate.metric} empty (no value at this point: see the report's time section)"
            else:
                value = f"{gate.metric} = {md(row[gate.metric], 40)}"
            lines.append(f"gate '{md(gate.name, 80)}' failed at {md(row['id'], 24)} ({md(label(row), 160)}): "
                         f"{value}, needs {bounds_text(gate)}")
    return lines

"""Gates evaluated on a results frame: shared by ``kvdash sweep --check`` and ``kvdash diff``.

A gate of a grid (``gates:``) selects points by dimension values (``where:``) and bounds one numeric
result column (``min:`` / ``max:``).  A selected point *fails* when its value is below ``min``, above
``max`` or missing; a point the gate does not select is *not applicable*.

The frame may be the typed frame of a sweep or a ``results.csv`` read as text (``kvdash diff``):
selection compares the text of the values (``"16"``, ``"h200"``, ``"0.9"``) and the metric is read as
a float, so both give the same answer.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from kvdash.errors import InputError, shorten
from kvdash.report.markdown import md
from kvdash.sweep.gridfile import Gate

PASS, FAIL, NA = "pass", "FAIL", "n/a"
# the columns a --check line names a point by (the GPU always: it decides the budget)
CHECK_LABEL = ("model", "workload", "kv_dtype", "block_size", "tp", "gpu")


def _column(dim: str) -> str:
    return "budget_bytes" if dim == "budget" else dim


def selected(frame: pl.DataFrame, gate: Gate) -> pl.Expr:
    """True where ``gate.where`` selects the point."""
    sel = pl.lit(True)
    for dim, allowed in gate.where.items():
        col = _column(dim)
        if col not in frame.columns:
            raise InputError(f"gate {shorten(gate.name, 60)!r} where.{dim}", allowed,
                             "results.csv has no such column; a gate can select by " +
                             ", ".join(c for c in ("model", "workload", "kv_dtype", "kv_scales", "block_size",
                                                   "budget", "gpu", "gpu_util", "util_policy", "tp", "pp",
                                                   "max_model_len", "max_batched_tokens")))
        sel = sel & pl.col(col).cast(pl.Utf8).is_in([str(v) for v in allowed])
    return sel


def failing(gate: Gate) -> pl.Expr:
    """True where the metric is outside the gate's bounds or missing (apply to selected points)."""
    value = pl.col(gate.metric).cast(pl.Float64, strict=False)
    bad = value.is_null() | value.is_nan()
    if gate.min is not None:
        bad = bad | (value < gate.min)
    if gate.max is not None:
        bad = bad | (value > gate.max)
    return bad


def status(frame: pl.DataFrame, gate: Gate) -> pl.Expr:
    """``"pass"``, ``"FAIL"`` or ``"n/a"`` for every point of ``frame``."""
    if gate.metric not in frame.columns:
        return pl.lit(NA)
    return pl.when(~selected(frame, gate)).then(pl.lit(NA)).when(failing(gate)).then(pl.lit(FAIL)) \
        .otherwise(pl.lit(PASS))


def bounds_text(gate: Gate) -> str:
    """``">= 64"``, ``"<= 0.5"`` or both, joined by "and"."""
    return " and ".join(b for b in (f">= {gate.min:g}" if gate.min is not None else "",
                                    f"<= {gate.max:g}" if gate.max is not None else "") if b)


def check_lines(gates: list[Gate], frame: pl.DataFrame) -> list[str]:
    """One line per failing point of every gate, every user string escaped for Markdown (the lines are
    pasted into job summaries and PR comments) and shortened."""
    lines = []
    for gate in gates:
        label = [c for c in CHECK_LABEL if c in frame.columns]
        cols = ["id", *label] + ([gate.metric] if gate.metric not in label else [])
        if gate.metric not in frame.columns:
            lines.append(f"gate '{md(gate.name, 80)}' cannot be checked: results have no column {md(gate.metric, 60)}")
            continue
        bad = frame.filter(selected(frame, gate) & failing(gate)).select(cols)
        for row in bad.iter_rows(named=True):
            where = ", ".join(_label_part(c, row[c]) for c in label)
            lines.append(f"gate '{md(gate.name, 80)}' failed at {md(row['id'], 24)} ({where}): "
                         f"{gate.metric} = {md(row[gate.metric], 40)}, needs {bounds_text(gate)}")
    return lines


def _label_part(col: str, value: Any) -> str:
    shown = "-" if value is None or value == "" else md(value, 40)
    return {"block_size": f"block {shown}", "tp": f"tp {shown}", "gpu": f"gpu {shown}"}.get(col, shown)

"""The length-spec syntax shared by ``kvdash simulate`` and a grid file's ``simulate:`` section."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from kvdash.errors import InputError

if TYPE_CHECKING:
    from kvdash.simulate.workload import Lengths


def parse_lengths_spec(text: str, field: str) -> Lengths:
    """``fixed:200``, ``uniform:10,100`` or ``lognormal:161,1.0`` (mean, sigma of the log)."""
    from kvdash.simulate import workload  # numpy: only when a length spec is read

    kind, _, args = text.partition(":")
    try:
        values = [float(x) for x in args.split(",")] if args else []
    except ValueError as exc:
        raise InputError(field, text, "expected fixed:N, uniform:A,B or lognormal:MEAN,SIGMA") from exc
    if not all(math.isfinite(v) for v in values):
        raise InputError(field, text, "expected finite numbers: fixed:N, uniform:A,B or lognormal:MEAN,SIGMA")
    if kind == "fixed" and len(values) == 1 and values[0] >= 1:
        return workload.Lengths("fixed", values[0])
    if kind == "uniform" and len(values) == 2 and 1 <= values[0] <= values[1]:
        return workload.Lengths("uniform", values[0], values[1])
    if kind == "lognormal" and len(values) == 2 and values[0] >= 1 and 0 < values[1] <= 10:
        return workload.Lengths("lognormal", values[0], values[1])
    raise InputError(field, text, "expected fixed:N (N >= 1), uniform:A,B (1 <= A <= B) or lognormal:MEAN,SIGMA "
                                  "(MEAN >= 1, 0 < SIGMA <= 10)")

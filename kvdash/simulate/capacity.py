"""Scheduling capacity at a latency bound: the shape of the PagedAttention paper's Figure 12.

For each policy the same requests are run at several Poisson rates; a request's normalized latency
is the steps from its arrival to its last token (queueing and waiting after preemptions included)
divided by its output tokens, averaged over requests.  A policy's capacity is the highest rate of the
sweep at which (and below which) the mean normalized latency stays within the bound.

Every step takes one unit of time whatever the batch, so this is scheduling capacity under the
simulator's assumptions: how many requests per step the pool lets the scheduler keep running. It is
not GPU throughput (a real step takes longer as the batch grows, and prefill is not free).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from kvdash.errors import InputError
from kvdash.simulate.engine import simulate
from kvdash.simulate.workload import Workload, draw_requests

LABEL = ("scheduling capacity under the simulator's assumptions (every step one time unit whatever the batch, "
         "prefill free): requests per step, not GPU throughput")
MAX_RATES = 200


def parse_rates(text: str, field: str = "--rates") -> list[float]:
    """``A:B:N``: N rates evenly spaced from A to B (A <= B, both positive; N from 1 to 200)."""
    parts = str(text).split(":")
    allowed = (f"expected A:B:N, N rates from A to B requests per step (0 < A <= B, 1 <= N <= {MAX_RATES}; "
               "N = 1 only with A = B)")
    if len(parts) != 3:
        raise InputError(field, text, allowed)
    try:
        a, b, n = float(parts[0]), float(parts[1]), int(parts[2])
    except ValueError as exc:
        raise InputError(field, text, allowed) from exc
    if not (math.isfinite(a) and math.isfinite(b) and 0 < a <= b and 1 <= n <= MAX_RATES) or (n == 1 and a != b):
        raise InputError(field, text, allowed)
    if n == 1:
        return [a]
    return [a + (b - a) * k / (n - 1) for k in range(n)]


@dataclass
class Capacity:
    rates: list[float]
    bound: float
    latency: dict[str, list[float]]  # policy -> mean normalized latency at each rate, steps per output token
    capacity: dict[str, float | None]  # policy -> highest rate within the bound (None: not even the lowest)
    ratios: dict[str, float | None]  # "paged/max" ... at the bound

    def to_json(self) -> dict[str, Any]:
        return {"label": LABEL, "rates": self.rates, "latency_bound": self.bound,
                "normalized_latency": self.latency, "capacity_rate": self.capacity, "ratios": self.ratios}


def capacity_sweep(workload: Workload, policies: list[str], capacity_slots: int, block_size: int, max_len: int,
                   rates: list[float], bound: float, allocator: str = "first-fit", seed: int = 0,
                   watermark: float = 0.0, progress: Any = None) -> Capacity:
    """Run every policy at every rate on the same requests (only the arrival steps change)."""
    latency: dict[str, list[float]] = {}
    best: dict[str, float | None] = {}
    for pol in policies:
        curve = []
        for rate in rates:
            w = replace(workload, rate=rate, arrival="poisson")
            reqs = draw_requests(w, seed, max_len)
            curve.append(simulate(w, pol, capacity_slots, block_size, max_len, allocator, seed, watermark=watermark,
                                  requests=reqs).normalized_latency)
            if progress is not None:
                progress()
        latency[pol] = curve
        top = None
        for rate, lat in zip(rates, curve, strict=True):
            if lat > bound:
                break
            top = rate
        best[pol] = top
    ratios: dict[str, float | None] = {}
    head = "paged" if "paged" in policies else next((p for p in policies if p.startswith("paged")), None)
    if head is not None:
        for pol in policies:
            if not pol.startswith("paged"):
                a, b = best[head], best[pol]
                ratios[f"{head}/{pol}"] = None if a is None or not b else a / b
    return Capacity(rates=list(rates), bound=bound, latency=latency, capacity=best, ratios=ratios)

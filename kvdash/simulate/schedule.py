"""What a timed simulation did (:mod:`kvdash.simulate.timed` and :mod:`kvdash.simulate.timed_fast` both return it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kvdash.core.steptime import Constants

NFEAT = 6

# vLLM 0.33's async scheduling (EngineCore.step_with_batch_queue, vllm/v1/engine/core.py, a batch queue of 2):
# step n + 1 is scheduled before step n's output is processed, so a request that arrives while step n runs is
# first seen by the schedule() of step n + 2 (after step n's output); a closed loop's next request, sent when the
# client gets its previous one's last token (step n's output), arrives while step n + 1 runs: step n + 3.  While
# nothing runs the engine waits for input and schedules an arrival at once.
ASYNC_STEPS = 2


@dataclass
class Schedule:
    """What the simulation did, in terms the step-time constants multiply: the running sums of the six
    features at the end of every segment (one step, or a stretch of decode steps), and the segment of each
    request's arrival (closed loop; Poisson arrivals are times), first token and finish."""

    cum: np.ndarray  # (segments + 1, 6): row 0 is zero
    first_seg: np.ndarray
    finish_seg: np.ndarray
    arrival_seg: np.ndarray  # closed loop: the segment whose end the request arrived at (-1: at time 0)
    arrival_s: np.ndarray  # Poisson: seconds
    steps: int
    preemptions: int
    peak_running: int
    token_steps: int
    closed: bool

    def times(self, c: Constants) -> np.ndarray:
        """Seconds at the end of each segment (index 0: time 0) under constants ``c``."""
        v = np.array(c.vector() + (1.0,))
        return self.cum @ v


def last_true(ok: Callable[[int], bool], k_max: int) -> int:
    """The largest ``k`` in ``0 .. k_max`` with ``ok(k)``, for an ``ok`` true up to some ``k`` and false after it
    (``ok(0)`` taken as true): a bisection.  Both timed simulators ask it the most decode steps whose blocks the
    pool holds and the steps that start before the next arrival."""
    if ok(k_max):
        return k_max
    lo, hi = 0, k_max  # ok(lo), not ok(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo

"""The plain reference simulator: the same simulation as :func:`kvdash.simulate.engine.simulate`, one step at
a time in plain Python with a length per request; the two must agree exactly (tests/test_simulate_rules.py)."""

from __future__ import annotations

from collections import deque

import numpy as np

from kvdash.simulate.allocators import Buddy, FirstFit
from kvdash.simulate.engine import SHARES, Result, _result, check_pool
from kvdash.simulate.rules import admit_fcfs, paged_blocks_to_admit, serve_running
from kvdash.simulate.workload import Requests, Workload, draw_requests


class _RefPool:
    """Block counts per request, for :func:`simulate_reference`."""

    def __init__(self, total: int, prefix_blocks: int, running: dict[int, int], blocks: dict[int, int],
                 length: list[int], waiting: deque[int]) -> None:
        self.total, self.pb, self.running, self.blocks = total, prefix_blocks, running, blocks
        self.length, self.waiting = length, waiting
        self.used = 0
        self.preempted: list[int] = []

    @property
    def free(self) -> int:
        return self.total - self.used - (self.pb if self.running else 0)

    def take(self, key: int) -> None:
        self.blocks[key] += 1
        self.used += 1

    def release(self, key: int) -> None:
        self.used -= self.blocks.pop(key)
        self.waiting.appendleft(key)
        self.preempted.append(key)


def simulate_reference(workload: Workload, policy: str, capacity_slots: int, block_size: int, max_len: int,
                       allocator: str = "first-fit", seed: int = 0, watermark: float = 0.0,
                       requests: Requests | None = None) -> Result:
    """The same simulation, one step at a time in plain Python with a length per request: slow, and
    obviously the rules of :mod:`kvdash.simulate.rules`; :func:`simulate` must agree with it exactly
    (tests) and is benchmarked against it (``benchmarks/simulate_speed.py``)."""
    reqs = requests if requests is not None else draw_requests(workload, seed, max_len)
    reserve = check_pool(policy, reqs, capacity_slots, block_size, max_len, allocator, workload.prefix)
    B = block_size
    prompt, final = reqs.prompt.tolist(), reqs.final.tolist()
    arrival = reqs.arrival.tolist()
    n = len(prompt)
    length = list(prompt)
    enter = list(arrival)
    finish = [0] * n
    waiting: deque[int] = deque()
    running: dict[int, int] = {}  # request -> request (the request is its own key here)
    blocks: dict[int, int] = {}
    paged = reserve is None
    pb = workload.prefix // B if policy == "paged-prefix" else 0
    total = capacity_slots // B
    wm = int(watermark * total)
    pool = _RefPool(total, pb, running, blocks, length, waiting)
    alloc: FirstFit | Buddy = FirstFit(capacity_slots) if allocator == "first-fit" else Buddy(capacity_slots)
    where: dict[int, tuple[int, int]] = {}
    sums = dict.fromkeys(SHARES, 0)
    steps = running_sum = peak = finished = preemptions = recomputed = waited = 0
    next_arrival = 0
    closed = workload.arrival == "closed"
    t = 0

    def place(i: int) -> bool:
        if paged:
            need = paged_blocks_to_admit(length[i], B, pb, bool(running))
            if need + (wm if running else 0) > pool.free:
                return False
            blocks[i] = -(-(length[i] + 1) // B) - pb
            pool.used += blocks[i]
        else:
            got = alloc.alloc(int(reserve[i]))  # type: ignore[index]
            if got is None:
                return False
            where[i] = got
        running[i] = i
        return True

    while finished < n:
        if closed:
            while next_arrival < n and len(running) + len(waiting) < workload.concurrency:
                arrival[next_arrival] = enter[next_arrival] = t
                waiting.append(next_arrival)
                next_arrival += 1
        else:
            while next_arrival < n and arrival[next_arrival] <= t:
                waiting.append(next_arrival)
                next_arrival += 1
            if not running and not waiting:
                t = arrival[next_arrival]  # idle: not counted
                continue
        preempted: list[int] = []
        if paged:
            pool.preempted = []
            preempted = serve_running(running, [i for i in running if length[i] % B == 0], pool)
            for i in preempted:
                enter[i] = t
                preemptions += 1
        before = set(running)
        if not preempted:
            for i in admit_fcfs(waiting, place):
                waited += t - enter[i]
                if length[i] != prompt[i]:
                    recomputed += length[i]
        del before
        for i in running:
            length[i] += 1
        c = len(running)
        if c:
            tokens = sum(length[i] for i in running)
            if paged:
                tokens -= (c - 1) * pb * B
                allocated = (pool.used + pb) * B
                shares = {"token_states": tokens, "internal_fragmentation": allocated - tokens,
                          "free": capacity_slots - allocated}
            else:
                reserved = sum(where[i][1] for i in running)
                useful = sum(min(where[i][1], final[i]) for i in running)
                key = "external_fragmentation" if waiting else "free"
                shares = {"token_states": tokens, "reservation": useful - tokens,
                          "internal_fragmentation": reserved - useful, key: capacity_slots - reserved}
            for k, v in shares.items():
                sums[k] += v
            steps += 1
            running_sum += c
            peak = max(peak, c)
        for i in [i for i in running if length[i] >= final[i]]:
            del running[i]
            if paged:
                pool.used -= blocks.pop(i)
            else:
                alloc.free(*where.pop(i))
            finish[i] = t
            finished += 1
        t += 1
    reqs = Requests(reqs.prompt, reqs.final, np.asarray(arrival, dtype=np.int64), reqs.redrawn, reqs.clipped)
    return _result(policy, "blocks" if paged else allocator, reqs, sums, steps, running_sum, peak, preemptions,
                   recomputed, waited, finish, {})

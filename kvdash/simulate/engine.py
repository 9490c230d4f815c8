"""KV pool occupancy over time: iteration-level scheduling against a real allocator.

Every step each running request gains one token; the scheduling rules (which requests run, which are
preempted, which are admitted) are those of :mod:`kvdash.simulate.rules`: vLLM's v1 scheduler
(``vllm/v1/core/sched/scheduler.py``, vLLM 0.33.0) for paged pools, first come first served admission
of whole reservations for Orca's contiguous baselines.  A request admitted holding ``n`` tokens (its
prompt; after a preemption its prompt and generated tokens) holds ``n + 1`` at the end of that step,
and leaves at the end of the step in which it reaches its final length.

Policies share one pool of ``capacity`` token slots:

* contiguous ``max`` / ``pow2`` / ``oracle`` reserve ``max_len`` / the prompt plus the next power of two
  of the output (the paper's rule) / the final length, placed by a first-fit allocator or by a buddy
  allocator (Orca's, as the PagedAttention paper ran it) over the pool split into power-of-two regions,
  which rounds every reservation up to a power of two;
* ``paged``: blocks of ``block_size`` slots taken as tokens arrive; when the pool runs out the newest
  running request is preempted and later recomputed with the tokens it had generated;
* ``paged-prefix``: as paged, with the whole blocks of a shared prompt prefix stored once while any
  running request uses them; ``paged`` on the same workload is the no-sharing baseline.

Every policy runs the same requests: lengths and arrival steps come from the seed alone.

Memory is accounted every busy step in token slots: token states, reservation (reserved for tokens
still to come), internal fragmentation (held but never to be used: a block's unfilled tail,
over-reservation, buddy rounding), external fragmentation (free slots while the queue's head cannot
be placed) and free.  The five sum to the capacity every step.

Both simulators here are event-driven: between two events (an admission, a finish, an arrival that
can be admitted, the step at which the pool runs out) no scheduling decision changes, so the steps in
between are summed in closed form.  :func:`kvdash.simulate.reference.simulate_reference` steps one by
one with the same rules; tests require the two to agree exactly.  The workloads and the requests drawn
are :mod:`kvdash.simulate.workload`'s, the contiguous allocators :mod:`kvdash.simulate.allocators`'.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvdash.core import formulas as f
from kvdash.errors import InputError
from kvdash.simulate.allocators import Buddy, FirstFit
from kvdash.simulate.rules import admit_fcfs, paged_blocks_to_admit, serve_running
from kvdash.simulate.workload import Requests, Workload, draw_requests

POLICIES = ("max", "pow2", "oracle", "paged", "paged-prefix")
ALLOCATORS = ("first-fit", "buddy")
SHARES = ("token_states", "reservation", "internal_fragmentation", "external_fragmentation", "free")


# PagedAttention paper (Kwon et al., SOSP 2023), Figure 2: token states / reservation / internal / external & other, %
PAPER_FIG2: dict[str, tuple[float | None, ...]] = {
    "max": (20.4, 13.3, 57.3, 8.9),
    "pow2": (26.8, 17.9, 13.6, 41.6),
    "oracle": (38.2, 25.2, 0.0, 36.6),
    "paged": (96.3, None, None, None),
}
# the same paper, Figure 13(a): average batched requests, OPT-13B, ShareGPT / Alpaca
PAPER_FIG13_BATCH = {"sharegpt": {"max": 7.00, "pow2": 9.81, "oracle": 13.62, "paged": 30.42},
                     "alpaca": {"max": 7.00, "pow2": 43.24, "oracle": 72.75, "paged": 132.44}}


# --- results --------------------------------------------------------------------------------------

@dataclass
class Result:
    policy: str
    allocator: str
    steps: int  # busy steps (at least one request running)
    finished: int
    preemptions: int
    recomputed_tokens: int  # tokens prefilled again when preempted requests resume (prompt + generated)
    token_steps: int  # running requests summed over steps: each one a generated output token
    slot_steps: dict[str, int]  # the five shares summed over busy steps, token slots
    shares_percent: dict[str, float]
    avg_running: float
    peak_running: int
    tokens_per_step: float
    avg_queue_delay_steps: float  # steps waiting, from arrival to admission and after each preemption
    normalized_latency: float  # mean over requests of (finish - arrival + 1 steps) / output tokens
    redrawn: int = 0
    clipped: int = 0
    trace: dict[str, list[float]] = field(default_factory=dict)

    def to_json(self, traces: bool = False) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "trace"}
        if traces:
            out["trace"] = self.trace
        return out


def _result(policy: str, allocator: str, reqs: Requests, sums: dict[str, int], steps: int, running_sum: int,
            peak: int, preemptions: int, recomputed: int, waited: int, finish: list[int],
            trace: dict[str, list[float]]) -> Result:
    n = len(reqs.prompt)
    total = sum(sums.values()) or 1
    latency = (np.asarray(finish, dtype=np.int64) - reqs.arrival + 1) / reqs.output
    return Result(policy=policy, allocator=allocator, steps=steps, finished=n, preemptions=preemptions,
                  recomputed_tokens=recomputed, token_steps=running_sum, slot_steps=dict(sums),
                  shares_percent={k: 100 * v / total for k, v in sums.items()},
                  avg_running=running_sum / max(steps, 1), peak_running=peak,
                  tokens_per_step=running_sum / max(steps, 1), avg_queue_delay_steps=waited / n,
                  normalized_latency=float(latency.mean()), redrawn=reqs.redrawn, clipped=reqs.clipped,
                  trace=trace)


def _new_trace() -> dict[str, list[float]]:
    return {"step": [], "running": [], **{k: [] for k in SHARES}}


def _record(trace: dict[str, list[float]], step: int, running: int, capacity: int, shares: dict[str, int]) -> None:
    trace["step"].append(step)
    trace["running"].append(running)
    for k in SHARES:
        trace[k].append(100 * shares.get(k, 0) / capacity)


# --- the simulation -------------------------------------------------------------------------------

def check_pool(policy: str, reqs: Requests, capacity_slots: int, block_size: int, max_len: int,
               allocator: str, prefix: int) -> np.ndarray | None:
    """Refuse a pool that cannot hold the longest request; the contiguous reservations."""
    if block_size < 1 or block_size > capacity_slots:
        raise InputError("--block-size", block_size, f"expected 1 to {capacity_slots:,} (the pool's token slots)")
    if policy.startswith("paged"):
        if int(f.cdiv(int(reqs.final.max()), block_size)) > capacity_slots // block_size:
            raise InputError("--budget", f"{capacity_slots:,} token slots",
                             f"the pool cannot hold even the longest request ({int(reqs.final.max()):,} tokens)")
        return None
    reserve = {"max": np.full(len(reqs.final), max_len, dtype=np.int64),
               "pow2": f.pow2_output_reservation(reqs.prompt, reqs.final, max_len), "oracle": reqs.final}[policy]
    biggest = int(reserve.max())
    if allocator == "buddy":
        biggest = 1 << max(0, (biggest - 1).bit_length())
    if biggest > (capacity_slots if allocator == "first-fit" else 1 << (capacity_slots.bit_length() - 1)):
        raise InputError("--budget", f"{capacity_slots:,} token slots",
                         f"the pool cannot hold one {policy} reservation of {biggest:,} slots")
    return np.asarray(reserve, dtype=np.int64)


def simulate(workload: Workload, policy: str, capacity_slots: int, block_size: int, max_len: int,
             allocator: str = "first-fit", seed: int = 0, trace_every: int = 0,
             progress: Any = None, on_step: Any = None, watermark: float = 0.0,
             requests: Requests | None = None) -> Result:
    """Run one policy over the workload; deterministic under ``seed`` (every policy sees the same
    requests).  ``on_step`` is called with the state at every event step (tests check invariants
    there).  ``watermark``: the fraction of the pool's blocks kept free when admitting (vLLM's
    ``watermark_blocks``)."""
    if policy not in POLICIES:
        raise InputError("--policies", policy, "expected some of: " + ", ".join(POLICIES))
    if allocator not in ALLOCATORS:
        raise InputError("--allocator", allocator, "expected one of: " + ", ".join(ALLOCATORS))
    reqs = requests if requests is not None else draw_requests(workload, seed, max_len)
    reserve = check_pool(policy, reqs, capacity_slots, block_size, max_len, allocator, workload.prefix)
    if reserve is None:
        prefix_blocks = workload.prefix // block_size if policy == "paged-prefix" else 0
        sim = _PagedFast(workload, reqs, capacity_slots, block_size, prefix_blocks,
                         int(watermark * (capacity_slots // block_size)), trace_every, progress, on_step)
        return sim.run(policy)
    return _contiguous(workload, policy, allocator, capacity_slots, reqs, reserve, trace_every, progress, on_step)


class _PagedFast:
    """Paged policies, event by event.  A running request's length is ``off + step`` (one token a
    step), so nothing per request changes between events; a request starts a new block at the steps
    where ``(off + step - 1) % B == 0``, i.e. at one phase of the step modulo ``B``.  ``phases`` holds
    the running requests by phase, which gives in O(B) the blocks taken over any span of steps and the
    step at which the free blocks run out (the pool's next preemption)."""

    def __init__(self, workload: Workload, reqs: Requests, capacity: int, B: int, prefix_blocks: int,
                 watermark_blocks: int, trace_every: int, progress: Any, on_step: Any) -> None:
        self.w, self.reqs, self.capacity, self.B, self.pb = workload, reqs, capacity, B, prefix_blocks
        self.total = capacity // B
        self.wm = watermark_blocks
        self.trace_every, self.progress, self.on_step = trace_every, progress, on_step
        self.prompt = reqs.prompt.tolist()
        self.final = reqs.final.tolist()
        self.arrival = reqs.arrival.tolist()
        n = len(self.prompt)
        self.length = list(self.prompt)  # tokens a waiting request holds (prompt, + generated if preempted)
        self.enter = list(self.arrival)  # step a waiting request joined the queue
        self.finish = [0] * n
        self.running: dict[int, int] = {}  # key -> request, admission order (keys increase)
        self.off: list[int] = []  # by key
        self.key_req: list[int] = []  # by key
        self.phases: list[set[int]] = [set() for _ in range(B)]
        self.sum_off = 0
        self.used = 0  # blocks of running requests, beyond the shared prefix
        self.free = self.total  # as rules.Pool: total - used - the prefix blocks while held
        self.heap: list[tuple[int, int]] = []  # (finish step, key)
        self.waiting: deque[int] = deque()
        self.e = 0
        self.preemptions = self.recomputed = self.waited = 0

    # the pool, as rules.serve_running sees it
    def take(self, key: int) -> None:
        self.used += 1
        self.free -= 1

    def _drop(self, key: int, blocks: int) -> None:
        off = self.off[key]
        self.phases[(1 - off) % self.B].discard(key)
        self.sum_off -= off
        self.used -= blocks
        self.free += blocks + (self.pb if not self.running else 0)

    def release(self, key: int) -> None:
        i = self.key_req[key]
        length = self.off[key] + self.e - 1  # its tokens before this step: all kept (recompute)
        self._drop(key, -(-length // self.B) - self.pb)
        self.length[i] = length
        self.enter[i] = self.e
        self.waiting.appendleft(i)
        self.preemptions += 1

    def place(self, i: int) -> bool:
        length, e, B, pb = self.length[i], self.e, self.B, self.pb
        held = bool(self.running)
        need = paged_blocks_to_admit(length, B, pb, held)
        if need + (self.wm if held else 0) > self.free:
            return False
        key = len(self.off)
        off = length + 1 - e
        self.off.append(off)
        self.key_req.append(i)
        self.running[key] = i
        self.used += need - (0 if held else pb)
        self.free -= need
        self.phases[(1 - off) % B].add(key)
        self.sum_off += off
        heapq.heappush(self.heap, (self.final[i] - off, key))
        self.waited += e - self.enter[i]
        if length != self.prompt[i]:
            self.recomputed += length
        return True

    def _crossings(self, s1: int, s2: int) -> tuple[int, int]:
        """Blocks taken at steps s1..s2, and the sum over those steps of the blocks taken up to each
        (a block taken at step u counts in the steps u..s2)."""
        B, add, acc = self.B, 0, 0
        e = s2 + 1
        for p, keys in enumerate(self.phases):
            if keys:
                u0 = s1 + (p - s1) % B
                if u0 <= s2:
                    m = len(keys)
                    j = (s2 - u0) // B + 1
                    add += m * j
                    acc += m * (j * (e - u0) - B * j * (j - 1) // 2)
        return add, acc

    def _exhausted(self, t: int, c: int) -> int:
        """The first step after ``t`` at which the running requests need more blocks than are free."""
        B = self.B
        rounds, rem = divmod(self.free, c)
        acc = 0
        phases = self.phases
        for j in range(B):
            acc += len(phases[(t + 1 + j) % B])
            if acc > rem:
                return t + 1 + rounds * B + j
        raise AssertionError("unreachable: the phases hold every running request")  # pragma: no cover

    def _shares(self, step: int, used: int) -> dict[str, int]:
        c = len(self.running)
        tokens = self.sum_off + c * step - (c - 1) * self.pb * self.B if c else 0
        allocated = (used + (self.pb if c else 0)) * self.B
        return {"token_states": tokens, "reservation": 0, "internal_fragmentation": allocated - tokens,
                "external_fragmentation": 0, "free": self.capacity - allocated}

    def run(self, policy: str) -> Result:
        n, B, capacity, pb = len(self.prompt), self.B, self.capacity, self.pb
        shared = pb * B
        closed = self.w.arrival == "closed"
        conc = self.w.concurrency
        arrival, final, off, phases = self.arrival, self.final, self.off, self.phases
        running, heap, waiting = self.running, self.heap, self.waiting
        trace = _new_trace()
        every, on_step, progress = self.trace_every, self.on_step, self.progress
        tok_sum = alloc_sum = steps = running_sum = peak = finished = 0
        next_arrival = 0
        again = False  # the queue's head may fit at the next step (blocks were freed)
        t = -1
        inf = 1 << 62
        place = self.place
        while finished < n:
            # the next step at which anything can change
            c = len(running)
            if again and waiting:
                e = t + 1  # admission was skipped, or blocks were freed
            elif closed:
                e = t + 1 if next_arrival < n and c + len(waiting) < conc else inf
            elif next_arrival < n and not waiting:
                e = arrival[next_arrival]
            else:
                e = inf
            if c and e > t + 1:
                while heap[0][1] not in running:
                    heapq.heappop(heap)  # preempted since
                if heap[0][0] < e:
                    e = heap[0][0]
                if e > t + 1 and self.free < c * ((e - 2 - t) // B + 1):  # else the pool cannot run out first
                    e = min(e, self._exhausted(t, c))
                k = e - 1 - t
                if k > 0:  # quiet steps t+1 .. e-1: every running request gains a token, no decision changes
                    s1, s2 = t + 1, e - 1
                    add, acc = self._crossings(s1, s2)
                    tok = k * self.sum_off + c * (s1 + s2) * k // 2 - k * (c - 1) * shared
                    tok_sum += tok
                    alloc_sum += (k * self.used + acc + k * pb) * B
                    if every:
                        for s in range((s1 + every - 1) // every * every, s2 + 1, every):
                            _record(trace, s, c, capacity, self._shares(s, self.used + self._crossings(s1, s)[0]))
                    self.used += add
                    self.free -= add
                    steps += k
                    running_sum += c * k
            assert e < inf, "nothing running, nothing admissible"
            # step e, in full
            self.e = e
            if closed:
                while next_arrival < n and len(running) + len(waiting) < conc:
                    arrival[next_arrival] = self.enter[next_arrival] = e
                    waiting.append(next_arrival)
                    next_arrival += 1
            else:
                while next_arrival < n and arrival[next_arrival] <= e:
                    waiting.append(next_arrival)
                    next_arrival += 1
            needers = phases[e % B]
            preempted = False
            if needers:
                if len(needers) <= self.free:  # rules.serve_running without a preemption
                    self.used += len(needers)
                    self.free -= len(needers)
                else:
                    preempted = bool(serve_running(running, sorted(needers), self))
            if waiting and not preempted:
                admit_fcfs(waiting, place)
            # After a preemption the queue's head (the oldest victim) cannot fit before blocks are freed:
            # the last victim was taken because no block was free, and then one of its blocks was given
            # away, so fewer than its own blocks are free.  Unless the pool emptied, the next chance to
            # admit is after a finish.
            again = preempted and not running
            freed = False
            c = len(running)
            if c:
                tokens = self.sum_off + c * e - (c - 1) * shared
                tok_sum += tokens
                alloc_sum += (self.used + pb) * B
                steps += 1
                running_sum += c
                if c > peak:
                    peak = c
                if every and e % every == 0:
                    _record(trace, e, c, capacity, self._shares(e, self.used))
                if on_step is not None:
                    on_step({"capacity": capacity, "B": B, "step": e, "shares": self._shares(e, self.used),
                             "free_blocks": self.free, "lengths": [off[k_] + e for k_ in running],
                             "finals": [final[i] for i in running.values()]})
            while heap and heap[0][0] == e:
                _, key = heapq.heappop(heap)
                i = running.pop(key, -1)
                if i < 0:
                    continue
                self._drop(key, -(-final[i] // B) - pb)
                self.finish[i] = e
                finished += 1
                freed = True
            if freed and waiting and not again:
                # the head may fit at the next step: free blocks less what the running requests take then
                # (if they need more than is free, the pool runs out and that step is an event anyway)
                held = bool(running)
                need = paged_blocks_to_admit(self.length[waiting[0]], B, pb, held) + (self.wm if held else 0)
                again = need <= self.free - len(phases[(e + 1) % B])
            if progress is not None and freed and e % 64 == 0:
                progress(finished)
            t = e
        sums = {"token_states": tok_sum, "reservation": 0, "internal_fragmentation": alloc_sum - tok_sum,
                "external_fragmentation": 0, "free": steps * capacity - alloc_sum}
        reqs = self.reqs if not closed else Requests(self.reqs.prompt, self.reqs.final,
                                                     np.asarray(arrival, dtype=np.int64), self.reqs.redrawn,
                                                     self.reqs.clipped)
        return _result(policy, "blocks", reqs, sums, steps, running_sum, peak, self.preemptions, self.recomputed,
                       self.waited, self.finish, trace)


def _contiguous(workload: Workload, policy: str, allocator: str, capacity: int, reqs: Requests,
                reserve: np.ndarray, trace_every: int, progress: Any, on_step: Any = None) -> Result:
    """Contiguous policies, event by event: memory changes only when a request is admitted or
    finishes, so the steps in between are summed in closed form (tokens grow by one per running
    request per step)."""
    prompt, final, res_of = reqs.prompt.tolist(), reqs.final.tolist(), reserve.tolist()
    arrival = reqs.arrival.tolist()
    n = len(prompt)
    alloc: FirstFit | Buddy = FirstFit(capacity) if allocator == "first-fit" else Buddy(capacity)
    waiting: deque[int] = deque()
    heap: list[tuple[int, int, int, int]] = []  # (finish step, request, start, reserved)
    finish = [0] * n
    sums = dict.fromkeys(SHARES, 0)
    count = 0
    offset = 0  # sum over running requests of (prompt - admission step): tokens(s) = count*(s+1) + offset
    reserved = 0  # sum of reserved slots
    useful = 0  # sum of min(reserved, final)
    steps = finished = peak = running_steps = waited = 0
    next_arrival = 0
    closed = workload.arrival == "closed"
    t = 0
    trace = _new_trace()
    slot: list[tuple[int, int] | None] = [None]

    def place(i: int) -> bool:
        got = alloc.alloc(res_of[i])
        slot[0] = got
        return got is not None

    while finished < n:
        if not closed:
            while next_arrival < n and arrival[next_arrival] <= t:
                waiting.append(next_arrival)
                next_arrival += 1
        else:
            while next_arrival < n and count + len(waiting) < workload.concurrency:
                arrival[next_arrival] = t
                waiting.append(next_arrival)
                next_arrival += 1
        while waiting and place(waiting[0]):  # rules.admit_fcfs, inlined: the allocator answers
            i = waiting.popleft()
            start, res = slot[0]  # type: ignore[misc]
            waited += t - arrival[i]
            heapq.heappush(heap, (t + final[i] - prompt[i] - 1, i, start, res))
            count += 1
            offset += prompt[i] - t
            reserved += res
            useful += min(res, final[i])
        blocked = bool(waiting)
        if not heap:  # idle: jump to the next arrival without counting the empty steps
            t = arrival[next_arrival] if next_arrival < n else t + 1
            continue
        e = heap[0][0]
        if not closed and not blocked and next_arrival < n:
            e = min(e, arrival[next_arrival] - 1)  # an arrival can be admitted at once
        e = max(e, t)
        k = e - t + 1
        tok = count * ((t + 1 + e + 1) * k // 2) + offset * k  # sum over s in [t, e] of count*(s+1) + offset
        sums["token_states"] += tok
        sums["reservation"] += useful * k - tok
        sums["internal_fragmentation"] += (reserved - useful) * k
        unallocated = capacity - reserved
        sums["external_fragmentation" if blocked else "free"] += unallocated * k
        if on_step is not None:  # the state at the last step of the interval (tokens are largest there)
            last = count * (e + 1) + offset
            on_step({"capacity": capacity, "reserved": reserved, "useful": useful, "tokens": last, "steps": k,
                     "running": [(r, final[i], final[i] - (s_ - e)) for s_, i, _, r in heap],
                     "shares": {"token_states": last, "reservation": useful - last,
                                "internal_fragmentation": reserved - useful,
                                "external_fragmentation": unallocated if blocked else 0,
                                "free": 0 if blocked else unallocated}})
        steps += k
        running_steps += count * k
        peak = max(peak, count)
        if trace_every:
            for s_ in range((t + trace_every - 1) // trace_every * trace_every, e + 1, trace_every):
                tk = count * (s_ + 1) + offset
                _record(trace, s_, count, capacity, {
                    "token_states": tk, "reservation": useful - tk, "internal_fragmentation": reserved - useful,
                    "external_fragmentation": unallocated if blocked else 0, "free": 0 if blocked else unallocated})
        while heap and heap[0][0] == e:
            _, i, start, res = heapq.heappop(heap)
            alloc.free(start, res)
            count -= 1
            offset -= prompt[i] - (e - (final[i] - prompt[i] - 1))
            reserved -= res
            useful -= min(res, final[i])
            finish[i] = e
            finished += 1
        if progress is not None:
            progress(finished)
        t = e + 1
    if closed:
        reqs = Requests(reqs.prompt, reqs.final, np.asarray(arrival, dtype=np.int64), reqs.redrawn, reqs.clipped)
    return _result(policy, allocator, reqs, sums, steps, running_steps, peak, 0, 0, waited, finish, trace)

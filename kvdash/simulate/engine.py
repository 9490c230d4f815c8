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
between are summed in closed form.  :func:`simulate_reference` steps one by one with the same rules;
tests require the two to agree exactly.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvdash import safeio
from kvdash.core import formulas as f
from kvdash.errors import InputError
from kvdash.simulate.rules import admit_fcfs, paged_blocks_to_admit, serve_running

POLICIES = ("max", "pow2", "oracle", "paged", "paged-prefix")
ALLOCATORS = ("first-fit", "buddy")
SHARES = ("token_states", "reservation", "internal_fragmentation", "external_fragmentation", "free")
LENGTH_CAP = 2**40  # lengths drawn are cut here before any check (no int64 overflow)
MAX_REDRAWN = 0.05  # a lognormal whose draws exceed the maximum length more often than this is refused

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


# --- workloads ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Lengths:
    """A length distribution: ``fixed`` (a), ``uniform`` (a..b), ``lognormal`` (mean a, spread b: the
    sigma of the log), or ``trace`` (values taken in order from a file, cycled)."""

    kind: str
    a: float = 0
    b: float = 0
    values: tuple[int, ...] = ()

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` lengths, each from 1 to ``LENGTH_CAP`` (far above any maximum length, so a length too
        long is refused or clipped later, never overflows)."""
        cap = LENGTH_CAP
        if self.kind == "fixed":
            out = np.full(n, int(min(self.a, cap)))
        elif self.kind == "uniform":
            out = rng.integers(int(min(self.a, cap)), int(min(self.b, cap)) + 1, size=n)
        elif self.kind == "lognormal":
            mu = math.log(self.a) - self.b**2 / 2  # so that the mean is a
            out = np.minimum(np.rint(rng.lognormal(mu, self.b, size=n)), cap).astype(np.int64)
        elif self.kind == "trace":
            out = np.resize(np.asarray([min(v, cap) for v in self.values], dtype=np.int64), n)
        else:  # pragma: no cover - validated on construction
            raise ValueError(self.kind)
        return np.maximum(out, 1).astype(np.int64)


@dataclass(frozen=True)
class Workload:
    name: str
    prompt: Lengths
    output: Lengths
    requests: int = 1000
    arrival: str = "poisson"  # or "closed"
    rate: float = 1.0  # requests per step (poisson)
    concurrency: int = 32  # requests kept in the system (closed loop)
    prefix: int = 0  # tokens of a prompt prefix every request shares
    synthetic: bool = True
    note: str = ""
    clip: bool = False  # cut requests longer than the maximum length instead of refusing them


PRESETS = {
    "sharegpt": Workload("sharegpt", Lengths("lognormal", 161.31, 1.0), Lengths("lognormal", 337.99, 1.0),
                         note="synthetic, shaped after the PagedAttention paper's ShareGPT means (161 in, 338 out)"),
    "alpaca": Workload("alpaca", Lengths("lognormal", 19.31, 0.6), Lengths("lognormal", 58.45, 0.8),
                       note="synthetic, shaped after the PagedAttention paper's Alpaca means (19 in, 58 out)"),
}


def read_trace(path: str, limit: int | None = None,
               max_bytes: int = safeio.STREAM_CAP) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A CSV of ``prompt,output`` lengths (a header line is allowed), streamed by :mod:`kvdash.safeio`
    (a regular file, at most ``max_bytes``); reading stops after ``limit`` requests (the simulation
    takes the values in order, so later lines would not be used)."""
    prompts: list[int] = []
    outputs: list[int] = []
    for number, line in safeio.iter_lines(path, "--trace", max_bytes, "--max-file-size"):
        if limit is not None and len(prompts) >= limit:
            break
        parts = [p.strip() for p in line.split(",")]
        if not line.strip():
            continue
        if len(parts) < 2 or not all(p.isascii() and p.isdigit() and len(p) <= 18 for p in parts[:2]):
            if number == 1 and not any(p.isdigit() for p in parts):
                continue  # header
            raise InputError("--trace", f"{path}:{number}", "each line must be 'prompt,output' positive integers")
        p, o = int(parts[0]), int(parts[1])
        if p <= 0 or o <= 0:
            raise InputError("--trace", f"{path}:{number}", "lengths must be positive")
        prompts.append(p)
        outputs.append(o)
    if not prompts:
        raise InputError("--trace", path, "the trace holds no request")
    return tuple(prompts), tuple(outputs)


@dataclass(frozen=True)
class Requests:
    """The requests every policy runs: prompt and final lengths, arrival steps (closed loop: 0)."""

    prompt: np.ndarray
    final: np.ndarray
    arrival: np.ndarray
    redrawn: int = 0  # lognormal draws longer than the maximum length, drawn again
    clipped: int = 0  # requests cut to the maximum length (``clip``)

    @property
    def output(self) -> np.ndarray:
        return self.final - self.prompt


def draw_requests(workload: Workload, seed: int, max_len: int) -> Requests:
    """Prompt lengths, final lengths and arrival steps of every request, from the seed alone (never
    from the policy).  A prompt shorter than the shared prefix is raised to it; the output is kept.
    Requests longer than ``max_len`` (prompt + output) are cut when the workload says ``clip``;
    otherwise lognormal draws are drawn again (a distribution truncated at ``max_len``, refused when
    more than 5 % of the draws are too long) and fixed, uniform or trace lengths are refused."""
    rng = np.random.default_rng(seed)
    n = workload.requests
    prompt = workload.prompt.draw(rng, n)
    output = workload.output.draw(rng, n)
    if workload.prefix:
        prompt = np.maximum(prompt, workload.prefix)  # every prompt starts with the shared prefix
    over = prompt + output > max_len
    count = int(over.sum())
    redrawn = clipped = 0
    if count and workload.clip:
        clipped = count
        final = np.minimum(prompt + output, max_len)
        prompt = np.minimum(prompt, final - 1)
        output = final - prompt
    elif count:
        lognormal = "lognormal" in (workload.prompt.kind, workload.output.kind)
        if not lognormal or count > MAX_REDRAWN * n:
            field_ = "--trace" if workload.prompt.kind == "trace" else "--prompt/--output"
            raise InputError(field_, f"{count:,} of {n:,} requests longer than --max-reserved={max_len:,}",
                             "every prompt + output must fit the maximum length; pass --clip to cut them"
                             + ("" if not lognormal else " (lognormal lengths are drawn again when at most 5 % "
                                "of the draws are too long)"))
        redrawn = count
        for _ in range(1000):
            idx = np.nonzero(over)[0]
            if not len(idx):
                break
            p = workload.prompt.draw(rng, len(idx))
            if workload.prefix:
                p = np.maximum(p, workload.prefix)
            prompt[idx] = p
            output[idx] = workload.output.draw(rng, len(idx))
            over = prompt + output > max_len
        if over.any():  # every one of the 1000 draws checked (a fit at the last one is kept); issue 17
            raise InputError("--max-reserved", max_len, "the lengths drawn do not fit")
    if workload.arrival == "poisson":
        arrivals = _arrival_steps(rng.exponential(1 / workload.rate, size=n), workload.rate)  # issue 17
    else:
        arrivals = np.zeros(n, dtype=np.int64)
    return Requests(prompt.astype(np.int64), (prompt + output).astype(np.int64), arrivals, redrawn, clipped)


# --- contiguous allocators ------------------------------------------------------------------------

class FirstFit:
    """First-fit over [0, capacity): a sorted list of free (start, size) holes, merged on free."""

    def __init__(self, capacity: int) -> None:
        self.starts = [0]
        self.sizes = [capacity]

    def alloc(self, size: int) -> tuple[int, int] | None:
        for i, hole in enumerate(self.sizes):
            if hole >= size:
                start = self.starts[i]
                if hole == size:
                    del self.starts[i], self.sizes[i]
                else:
                    self.starts[i] += size
                    self.sizes[i] -= size
                return start, size
        return None

    def free(self, start: int, size: int) -> None:
        i = bisect.bisect_left(self.starts, start)
        self.starts.insert(i, start)
        self.sizes.insert(i, size)
        if i + 1 < len(self.starts) and self.starts[i] + self.sizes[i] == self.starts[i + 1]:
            self.sizes[i] += self.sizes.pop(i + 1)
            self.starts.pop(i + 1)
        if i > 0 and self.starts[i - 1] + self.sizes[i - 1] == self.starts[i]:
            self.sizes[i - 1] += self.sizes.pop(i)
            self.starts.pop(i)


class Buddy:
    """A binary buddy allocator over the whole pool.  A pool that is not a power of two is split into
    power-of-two regions, one per binary digit of its size, largest first (15,728 slots: 8,192 +
    4,096 + 2,048 + 1,024 + 256 + 64 + 32 + 16); blocks merge only within their region.  A request
    of n slots takes the next power of two (the rounding is internal fragmentation), from the
    smallest free block that fits, lowest address first."""

    def __init__(self, capacity: int) -> None:
        self.top = capacity.bit_length() - 1
        self.free_sets: list[set[int]] = [set() for _ in range(self.top + 1)]
        self.heaps: list[list[int]] = [[] for _ in range(self.top + 1)]
        self.bases: list[int] = []
        self.orders: list[int] = []
        start = 0
        for k in range(self.top, -1, -1):
            if capacity >> k & 1:
                self.bases.append(start)
                self.orders.append(k)
                self._add(k, start)
                start += 1 << k

    def _add(self, order: int, start: int) -> None:
        self.free_sets[order].add(start)
        heapq.heappush(self.heaps[order], start)

    def alloc(self, size: int) -> tuple[int, int] | None:
        order = max(0, (size - 1).bit_length())
        for k in range(order, self.top + 1):
            live, heap = self.free_sets[k], self.heaps[k]
            while heap and heap[0] not in live:
                heapq.heappop(heap)  # merged away or taken: dropped lazily
            if heap:
                start = heapq.heappop(heap)
                live.remove(start)
                while k > order:
                    k -= 1
                    self._add(k, start + (1 << k))
                return start, 1 << order
        return None

    def free(self, start: int, size: int) -> None:
        order = size.bit_length() - 1
        limit = self.orders[bisect.bisect_right(self.bases, start) - 1]
        while order < limit:
            buddy = start ^ (1 << order)
            if buddy not in self.free_sets[order]:
                break
            self.free_sets[order].remove(buddy)
            start = min(start, buddy)
            order += 1
        self._add(order, start)


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


# --- the plain reference ------------------------------------------------------------------------

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


# --- arrival steps (kept at the end of the file: line numbers above are keys of benchmarks/mutation_equivalent.txt)

ARRIVAL_CAP = 2**53  # arrival steps stay exact integers (and far below the event loop's 2^62 "never")


def _arrival_steps(gaps: np.ndarray, rate: float) -> np.ndarray:
    """Poisson arrival steps: the floor of the running sum of the exponential gaps.  A rate so small that
    the last arrival lies at step 2^53 or later is refused (it used to overflow int64 silently: every
    request arrived at step -2^63, issue 17)."""
    times = np.floor(np.cumsum(gaps))
    if not times[-1] < ARRIVAL_CAP:
        raise InputError("--rate", rate, f"{len(gaps):,} requests at this rate arrive past step 2^53; "
                         "expected a larger rate (requests per step)")
    return times.astype(np.int64)

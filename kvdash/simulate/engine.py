"""KV pool occupancy over time: iteration-level scheduling against a real allocator.

Each step every running request gains one token; waiting requests are admitted first come, first
served while the policy can place the head of the queue (a blocked head blocks the queue, as FCFS
does).  A request enters holding its prompt and leaves when it reaches its final length.

Policies share one pool of ``capacity`` token slots:

* contiguous ``max`` / ``pow2`` / ``oracle`` reserve ``max_len`` / the next power of two of the final
  length / the final length, placed by a first-fit or buddy allocator over the pool's slots, so
  external fragmentation is what the allocator leaves;
* ``paged``: blocks of ``block_size`` slots taken as tokens arrive; when the pool runs out the newest
  running request is preempted (its blocks freed, it goes back to the head of the queue and is
  recomputed), as vLLM does;
* ``paged-prefix``: as paged, with the whole blocks of a shared prompt prefix stored once
  (reference-counted while any request uses them); the partly filled prefix block is per request.

Memory is accounted every step in token slots: token states, reservation (reserved for tokens still
to come), internal fragmentation (reserved or allocated but never to be used: a block's tail,
over-reservation, buddy rounding), external fragmentation (free slots while the queue's head cannot be
placed) and free.  The five always sum to the capacity.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvdash import safeio
from kvdash.core import formulas as f
from kvdash.errors import InputError

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
        if self.kind == "fixed":
            out = np.full(n, int(self.a))
        elif self.kind == "uniform":
            out = rng.integers(int(self.a), int(self.b) + 1, size=n)
        elif self.kind == "lognormal":
            mu = math.log(self.a) - self.b**2 / 2  # so that the mean is a
            out = np.rint(rng.lognormal(mu, self.b, size=n)).astype(np.int64)
        elif self.kind == "trace":
            out = np.resize(np.asarray(self.values, dtype=np.int64), n)
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
    prompts, outputs = [], []
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
    """A binary buddy allocator over the largest power of two <= capacity (the rest is unusable);
    a request of n slots takes the next power of two (the rounding is internal fragmentation)."""

    def __init__(self, capacity: int) -> None:
        self.top = capacity.bit_length() - 1
        self.arena = 1 << self.top
        self.free_lists: dict[int, set[int]] = {k: set() for k in range(self.top + 1)}
        self.free_lists[self.top].add(0)

    def alloc(self, size: int) -> tuple[int, int] | None:
        order = max(0, (size - 1).bit_length())
        if order > self.top:
            return None
        k = order
        while k <= self.top and not self.free_lists[k]:
            k += 1
        if k > self.top:
            return None
        start = min(self.free_lists[k])  # lowest address first: deterministic
        self.free_lists[k].remove(start)
        while k > order:
            k -= 1
            self.free_lists[k].add(start + (1 << k))
        return start, 1 << order

    def free(self, start: int, size: int) -> None:
        order = size.bit_length() - 1
        while order < self.top:
            buddy = start ^ (1 << order)
            if buddy not in self.free_lists[order]:
                break
            self.free_lists[order].remove(buddy)
            start = min(start, buddy)
            order += 1
        self.free_lists[order].add(start)


# --- the simulation -------------------------------------------------------------------------------

@dataclass
class Result:
    policy: str
    allocator: str
    steps: int
    finished: int
    preemptions: int
    shares_percent: dict[str, float]
    avg_running: float
    peak_running: int
    tokens_per_step: float
    avg_queue_delay_steps: float
    trace: dict[str, list[float]] = field(default_factory=dict)

    def to_json(self, traces: bool = False) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "trace"}
        if traces:
            out["trace"] = self.trace
        return out


def draw_requests(workload: Workload, seed: int, max_len: int, with_prefix: bool
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Prompt lengths, final lengths and arrival steps of every request, from the seed alone."""
    rng = np.random.default_rng(seed)
    n = workload.requests
    prompt = workload.prompt.draw(rng, n)
    output = workload.output.draw(rng, n)
    final = np.minimum(prompt + output, max_len)
    prompt = np.minimum(prompt, final - 1).clip(min=1)
    if with_prefix and workload.prefix:
        prompt = np.maximum(prompt, workload.prefix)  # every prompt starts with the shared prefix
        final = np.maximum(final, prompt + 1)
    if workload.arrival == "poisson":
        arrivals = np.floor(np.cumsum(rng.exponential(1 / workload.rate, size=n))).astype(np.int64)
    else:
        arrivals = np.zeros(n, dtype=np.int64)
    return prompt, final, arrivals


def simulate(workload: Workload, policy: str, capacity_slots: int, block_size: int, max_len: int,
             allocator: str = "first-fit", seed: int = 0, trace_every: int = 0,
             progress: Any = None, on_step: Any = None) -> Result:
    """Run one policy over the workload; deterministic under ``seed`` (every policy sees the same
    requests)."""
    if policy not in POLICIES:
        raise InputError("--policies", policy, "expected some of: " + ", ".join(POLICIES))
    if allocator not in ALLOCATORS:
        raise InputError("--allocator", allocator, "expected one of: " + ", ".join(ALLOCATORS))
    prompt, final, arrivals = draw_requests(workload, seed, max_len, policy == "paged-prefix")
    if policy.startswith("paged"):
        if int(f.cdiv(final.max(), block_size)) > capacity_slots // block_size:
            raise InputError("--budget", f"{capacity_slots:,} token slots",
                             f"the pool cannot hold even the longest request ({int(final.max()):,} tokens)")
        prefix_blocks = (workload.prefix // block_size) if policy == "paged-prefix" else 0
        return _paged(workload, policy, capacity_slots, block_size, prefix_blocks, prompt, final, arrivals,
                      trace_every, progress, on_step)
    reserve = {"max": np.full(len(final), max_len), "pow2": f.pow2_reservation(final, max_len),
               "oracle": final}[policy]
    if int(reserve.max()) > capacity_slots:
        raise InputError("--budget", f"{capacity_slots:,} token slots",
                         f"the pool cannot hold one {policy} reservation of {int(reserve.max()):,} slots")
    return _contiguous(workload, policy, allocator, capacity_slots, prompt, final, arrivals, reserve,
                       trace_every, progress, on_step)


def _paged(workload: Workload, policy: str, capacity: int, B: int, prefix_blocks: int, prompt: np.ndarray,
           final: np.ndarray, arrivals: np.ndarray, trace_every: int, progress: Any, on_step: Any = None) -> Result:
    """Paged policies, step by step over numpy arrays of the running requests."""
    n = len(prompt)
    total_blocks = capacity // B
    waiting: deque[int] = deque()
    arrival = arrivals.copy()
    r_id = np.zeros(0, dtype=np.int64)
    r_len = np.zeros(0, dtype=np.int64)
    r_fin = np.zeros(0, dtype=np.int64)
    r_blocks = np.zeros(0, dtype=np.int64)  # own blocks, beyond the shared prefix
    free_blocks = total_blocks
    shared_refs = 0
    first_admit = np.full(n, -1, dtype=np.int64)
    sums = dict.fromkeys(SHARES, 0.0)
    finished = preemptions = steps = tokens_generated = running_sum = peak = 0
    next_arrival = released = 0
    trace: dict[str, list[float]] = {"step": [], "running": [], "token_states": [], "free": []}
    step = 0
    shared_slots_if_used = prefix_blocks * B

    def release_prefix() -> None:
        nonlocal shared_refs, free_blocks
        if prefix_blocks:
            shared_refs -= 1
            if shared_refs == 0:
                free_blocks += prefix_blocks

    while finished < n:
        if workload.arrival == "poisson":
            while next_arrival < n and arrival[next_arrival] <= step:
                waiting.append(next_arrival)
                next_arrival += 1
            if not len(r_id) and not waiting:  # idle: jump to the next arrival, uncounted
                step = int(arrival[next_arrival])
                continue
        else:
            while released < n and len(r_id) + len(waiting) < workload.concurrency:
                arrival[released] = step
                waiting.append(released)
                released += 1
        admitted: list[int] = []
        while waiting:
            i = waiting[0]
            own = f.cdiv(int(prompt[i]), B) - prefix_blocks
            extra = prefix_blocks if shared_refs == 0 else 0  # the shared prefix, stored once
            if own + extra > free_blocks:
                break
            free_blocks -= own + extra
            if prefix_blocks:
                shared_refs += 1
            waiting.popleft()
            if first_admit[i] < 0:
                first_admit[i] = step
            admitted.append(i)
        if admitted:
            ids = np.asarray(admitted, dtype=np.int64)
            r_id = np.concatenate((r_id, ids))
            r_len = np.concatenate((r_len, prompt[ids]))
            r_fin = np.concatenate((r_fin, final[ids]))
            r_blocks = np.concatenate((r_blocks, f.cdiv(prompt[ids], B) - prefix_blocks))
        count = len(r_id)
        if count:
            r_len += 1  # one decode step
            tokens_generated += count
            grow = np.nonzero(f.cdiv(r_len, B) - prefix_blocks > r_blocks)[0]
            if len(grow) <= free_blocks:
                r_blocks[grow] += 1
                free_blocks -= len(grow)
            else:  # oldest first; while the pool is short, preempt the newest (maybe the one growing)
                for j in grow:
                    while free_blocks < 1 and len(r_id) > j:
                        free_blocks += int(r_blocks[-1])
                        waiting.appendleft(int(r_id[-1]))
                        preemptions += 1
                        release_prefix()
                        r_id, r_len, r_fin, r_blocks = r_id[:-1], r_len[:-1], r_fin[:-1], r_blocks[:-1]
                    if j >= len(r_id):
                        break
                    free_blocks -= 1
                    r_blocks[j] += 1
            count = len(r_id)
        shared = shared_slots_if_used if shared_refs > 0 else 0
        tokens = int(r_len.sum()) - count * shared_slots_if_used + shared
        allocated = (total_blocks - free_blocks) * B
        sums["token_states"] += tokens
        sums["internal_fragmentation"] += allocated - tokens
        sums["free"] += capacity - allocated
        running_sum += count
        peak = max(peak, count)
        if on_step is not None:
            on_step({"capacity": capacity, "B": B, "tokens": tokens, "allocated": allocated,
                     "free_blocks": free_blocks, "r_len": r_len, "r_blocks": r_blocks + prefix_blocks,
                     "shares": {"token_states": tokens, "reservation": 0, "internal_fragmentation": allocated - tokens,
                                "external_fragmentation": 0, "free": capacity - allocated}})
        if trace_every and step % trace_every == 0:
            trace["step"].append(step)
            trace["running"].append(count)
            trace["token_states"].append(100 * tokens / capacity)
            trace["free"].append(100 * (capacity - allocated) / capacity)
        if count:
            done = r_len >= r_fin
            if done.any():
                free_blocks += int(r_blocks[done].sum())
                for _ in range(int(done.sum())):
                    release_prefix()
                finished += int(done.sum())
                keep = ~done
                r_id, r_len, r_fin, r_blocks = r_id[keep], r_len[keep], r_fin[keep], r_blocks[keep]
        steps += 1
        step += 1
        if progress is not None and step % 1000 == 0:
            progress(finished)
    total = sum(sums.values())
    return Result(policy=policy, allocator="blocks", steps=steps, finished=finished, preemptions=preemptions,
                  shares_percent={k: 100 * v / total for k, v in sums.items()}, avg_running=running_sum / steps,
                  peak_running=peak, tokens_per_step=tokens_generated / steps,
                  avg_queue_delay_steps=float((first_admit - arrival).mean()), trace=trace)


def _contiguous(workload: Workload, policy: str, allocator: str, capacity: int, prompt: np.ndarray,
                final: np.ndarray, arrivals: np.ndarray, reserve: np.ndarray, trace_every: int,
                progress: Any, on_step: Any = None) -> Result:
    """Contiguous policies, event by event: memory changes only when a request is admitted or
    finishes, so the steps in between are summed in closed form (tokens grow by one per running
    request per step)."""
    import heapq

    n = len(prompt)
    alloc: FirstFit | Buddy = FirstFit(capacity) if allocator == "first-fit" else Buddy(capacity)
    waiting: deque[int] = deque()
    heap: list[tuple[int, int, int, int]] = []  # (finish step, request, start, reserved)
    first_admit = np.full(n, -1, dtype=np.int64)
    arrival = arrivals.copy()
    sums = dict.fromkeys(SHARES, 0.0)
    count = 0
    offset = 0  # sum over running requests of (prompt - admission step): tokens(s) = count*(s+1) + offset
    reserved = 0  # sum of reserved slots
    useful = 0  # sum of min(reserved, final)
    steps = finished = peak = 0
    running_steps = 0
    tokens_generated = 0
    next_arrival = released = 0
    t = 0
    trace: dict[str, list[float]] = {"step": [], "running": [], "token_states": [], "free": []}
    while finished < n:
        if workload.arrival == "poisson":
            while next_arrival < n and arrival[next_arrival] <= t:
                waiting.append(next_arrival)
                next_arrival += 1
        else:
            while released < n and count + len(waiting) < workload.concurrency:
                arrival[released] = t
                waiting.append(released)
                released += 1
        while waiting:
            i = waiting[0]
            got = alloc.alloc(int(reserve[i]))
            if got is None:
                break
            waiting.popleft()
            first_admit[i] = t
            start, res = got
            heapq.heappush(heap, (t + int(final[i]) - int(prompt[i]) - 1, i, start, res))
            count += 1
            offset += int(prompt[i]) - t
            reserved += res
            useful += min(res, int(final[i]))
        blocked = bool(waiting)
        if not heap:  # idle: jump to the next arrival without counting the empty steps
            t = int(arrival[next_arrival]) if next_arrival < n else t + 1
            continue
        finish = heap[0][0]
        a = int(arrival[next_arrival]) if workload.arrival == "poisson" and next_arrival < n else None
        e = finish if a is None else min(finish, a - 1)
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
            running = [(r, int(final[i]), int(prompt[i]) + e - int(first_admit[i]) + 1) for _, i, _, r in heap]
            on_step({"capacity": capacity, "reserved": reserved, "useful": useful, "tokens": last,
                     "running": running, "steps": k,
                     "shares": {"token_states": last, "reservation": useful - last,
                                "internal_fragmentation": reserved - useful,
                                "external_fragmentation": unallocated if blocked else 0,
                                "free": 0 if blocked else unallocated}})
        steps += k
        running_steps += count * k
        tokens_generated += count * k
        peak = max(peak, count)
        if trace_every:
            for s_ in range((t + trace_every - 1) // trace_every * trace_every, e + 1, trace_every):
                trace["step"].append(s_)
                trace["running"].append(count)
                trace["token_states"].append(100 * (count * (s_ + 1) + offset) / capacity)
                trace["free"].append(0.0 if blocked else 100 * unallocated / capacity)
        while heap and heap[0][0] == e:
            _, i, start, res = heapq.heappop(heap)
            alloc.free(start, res)
            count -= 1
            offset -= int(prompt[i]) - int(first_admit[i])
            reserved -= res
            useful -= min(res, int(final[i]))
            finished += 1
        if progress is not None:
            progress(finished)
        t = e + 1
    total = sum(sums.values())
    return Result(policy=policy, allocator=allocator, steps=steps, finished=finished, preemptions=0,
                  shares_percent={k: 100 * v / total for k, v in sums.items()},
                  avg_running=running_steps / steps, peak_running=peak, tokens_per_step=tokens_generated / steps,
                  avg_queue_delay_steps=float((first_admit - arrival).mean()), trace=trace)

"""The paged simulator in seconds: vLLM 0.33's scheduler with a step-time model (issue 28).

Every step follows ``Scheduler.schedule()`` in ``vllm/v1/core/sched/scheduler.py`` (vLLM 0.33.0):

1. the running requests, oldest first, each get their next tokens within the step's token budget
   (``max_num_batched_tokens``): a decoding request one, a request being prefilled the rest of its
   prompt (chunked prefill: at most what the budget has left); each takes the blocks its tokens need
   (``KVCacheManager.allocate_slots``), and while the pool has too few the newest running request is
   preempted (recompute: its blocks freed, it goes back to the front of the queue and is prefilled again
   with the tokens it had generated), possibly the request itself;
2. only in a step without preemption, waiting requests are admitted first come first served while fewer
   than ``max_num_seqs`` run, the budget has tokens left and the pool has the blocks of their first chunk;
   a head that does not fit blocks the queue.

A request's tokens are computed in chunks; the step that computes its last known token samples the next
one (the first of them is its first token: TTFT), and it leaves when it has its output.  Blocks per
request are kvdash's (:func:`kvdash.core.formulas.request_blocks`: full layers every token, sliding
layers their window, state layers a fixed page), so sliding-window and hybrid models run as calc counts
them.  The step's time is :func:`kvdash.core.steptime.features` of what it scheduled.  With async
scheduling (vLLM's default) the CPU work of step ``n + 1`` overlaps step ``n``: what is left of it is the
fitted per-step constant.  The same overlap delays arrivals (``ASYNC_STEPS``): step ``n + 1`` is scheduled
before step ``n``'s output is processed, so a request arriving while step ``n`` runs joins step ``n + 2`` at
the earliest, and a closed loop's next request (sent when the previous one's last token, step ``n``'s
output, reaches its user) arrives while step ``n + 1`` runs and joins step ``n + 3``; an idle engine
schedules an arrival at once.

Between events nothing is decided: when every running request decodes and no waiting request can be
admitted, the steps up to the next finish, the step at which the pool runs short, or the next arrival
are summed in closed form (their step times grow linearly with the contexts).

Closed loop (``concurrency`` users, each sending its next request when the previous one finishes) or
Poisson arrivals at ``rate`` requests per second.  Step counts alone (the paper's figures) stay in
:mod:`kvdash.simulate.engine`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvdash.core import formulas as f
from kvdash.core.steptime import Constants, GPUPerf, ModelCompute, features, lm_head_seconds, prefill_chunk_seconds
from kvdash.errors import InputError
from kvdash.simulate.schedule import ASYNC_STEPS, NFEAT, Schedule, last_true

__all__ = ["NFEAT", "Pool", "Schedule", "TimedResult", "simulate_reference", "simulate_timed", "summarize"]



@dataclass(frozen=True)
class Pool:
    """The paged pool of one rank: blocks and the per-request block rule of its :class:`PoolShape`."""

    blocks: int
    block_size: int
    full_groups: int
    window_groups: int
    window: int
    state_blocks: int
    full_ratio: int = 1  # tokens per full-group block in units of block_size (PoolShape.full_ratio)
    window_ratio: int = 1

    def request_blocks(self, tokens: Any) -> Any:
        if not self.window_groups:  # f.request_blocks without a window group, inlined (the hot path)
            return self.full_groups * (-(-tokens // (self.block_size * self.full_ratio))) + self.state_blocks
        return f.request_blocks(tokens, self.block_size, self.full_groups, self.window_groups,
                                self.window, self.full_ratio, self.window_ratio) + self.state_blocks

    @classmethod
    def of(cls, shape: Any, budget_bytes: int) -> Pool:
        return cls(f.pool_blocks(budget_bytes, shape.block_bytes), shape.block_size, shape.full_groups,
                   shape.window_groups, shape.window, shape.state_blocks, shape.full_ratio, shape.window_ratio)


@dataclass
class TimedResult:
    policy: str
    requests: int
    ttft_ms: dict[str, float]
    tpot_ms: dict[str, float]
    e2e_ms: dict[str, float]
    tokens_per_s: float  # output tokens per second, all GPUs of the engine
    tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float  # mean over requests of 1 / TPOT
    requests_per_s: float
    makespan_s: float
    steps: int
    preemptions: int
    peak_running: int
    avg_running: float
    constants: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    has_tpot: bool = True  # False: no request had a second output token, so TPOT (and per-user tokens/s) has none

    def to_json(self) -> dict[str, Any]:
        """The result as JSON; without a second output token anywhere TPOT's figures and the per-user tokens/s are
        null (the table's ``-``), not a 0 a script would read as a time."""
        out = dict(self.__dict__)
        if not out.pop("has_tpot"):
            out["tpot_ms"] = dict.fromkeys(self.tpot_ms)
            out["tokens_per_s_per_user"] = None
        return out


def _rounded(x: float, digits: int) -> float:
    """``round(x, digits)``, but a rate too small to keep four significant digits that way keeps four: 1e-9
    requests/s gives 1.4e-9 tokens/s, not 0.0, and 9.189e-07 requests/s is not rounded up to 1e-06."""
    return float(f"{x:.4g}") if x and abs(x) < 10.0 ** (3 - digits) else round(x, digits)


def _stats(values_s: np.ndarray) -> dict[str, float]:
    ms = values_s * 1000.0
    if not len(ms):
        return {"p50": 0.0, "p90": 0.0, "p99": 0.0, "mean": 0.0}
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    return {"p50": round(float(p50), 3), "p90": round(float(p90), 3), "p99": round(float(p99), 3),
            "mean": round(float(ms.mean()), 3)}


def simulate_timed(prompt: np.ndarray, output: np.ndarray, pool: Pool, mc: ModelCompute, gpu: GPUPerf,
                   consts: Constants, max_num_seqs: int, max_batched_tokens: int, concurrency: int = 0,
                   arrivals_s: np.ndarray | None = None) -> Schedule:
    """Run the requests (``prompt``/``output`` lengths, in order) closed-loop at ``concurrency`` or at the
    Poisson ``arrivals_s`` (seconds, sorted); return the :class:`Schedule` (times under ``consts``).

    Every model runs event by event (:mod:`kvdash.simulate.timed_fast`), which gives the schedule of the step by
    step :func:`simulate_reference`."""
    from kvdash.simulate import timed_fast

    _check(prompt, output, pool, max_num_seqs, max_batched_tokens)
    return timed_fast.simulate_events(prompt, output, pool, mc, gpu, consts, max_num_seqs, max_batched_tokens,
                                      concurrency, arrivals_s)


def _check(prompt: np.ndarray, output: np.ndarray, pool: Pool, max_num_seqs: int, max_batched_tokens: int) -> None:
    if max_batched_tokens < max_num_seqs:
        raise InputError("--max-batched-tokens", max_batched_tokens,
                         f"at least --max-num-seqs ({max_num_seqs}), as vLLM requires")
    longest = int((prompt.astype(np.int64) + output.astype(np.int64)).max())
    if int(pool.request_blocks(longest)) > pool.blocks:
        raise InputError("--budget", f"{pool.blocks:,} blocks",
                         f"the pool cannot hold the longest request ({longest:,} tokens)")


def simulate_reference(prompt: np.ndarray, output: np.ndarray, pool: Pool, mc: ModelCompute, gpu: GPUPerf,
                       consts: Constants, max_num_seqs: int, max_batched_tokens: int, concurrency: int = 0,
                       arrivals_s: np.ndarray | None = None) -> Schedule:
    """:func:`simulate_timed` step by step over numpy columns (every model; the rule the event simulator
    is checked against)."""
    n = len(prompt)
    _check(prompt, output, pool, max_num_seqs, max_batched_tokens)
    P = prompt.astype(np.int64)
    OUT = output.astype(np.int64)
    closed = arrivals_s is None
    coef = np.array(consts.vector() + (1.0,))
    full_pf, win_pf = mc.attn_pair_flops()  # decode
    full_pp, win_pp = mc.attn_pair_flops(prefill=True)
    lm_s = lm_head_seconds(mc, gpu)
    W = mc.window or 1
    bw = gpu.hbm_bytes_per_s
    f_attn = gpu.rate(mc.attn_rate)
    # decode-token cost per token of context (seconds at spec figures), full and window layers
    dec_mem_full, dec_mem_win = mc.kv_full_bytes / bw, mc.kv_window_bytes / bw
    dec_cmp_full, dec_cmp_win = full_pf / f_attn, win_pf / f_attn
    base_cache: dict[int, np.ndarray] = {}

    def base(tokens: int) -> np.ndarray:
        """Features of a step of ``tokens`` tokens apart from attention (weights, linear FLOPs, overhead, comm)."""
        got = base_cache.get(tokens)
        if got is None:
            got = np.array(features(mc, gpu, tokens, 0.0, 0.0, 0.0), dtype=float)  # state reads: per request below
            base_cache[tokens] = got
        return got

    # per-request state
    computed = np.zeros(n, dtype=np.int64)
    generated = np.zeros(n, dtype=np.int64)
    first_seg = np.full(n, -1, dtype=np.int64)
    finish_seg = np.full(n, -1, dtype=np.int64)
    arrival_seg = np.full(n, -1, dtype=np.int64)
    ready = np.zeros(n, dtype=np.int64)  # the first step a waiting request may join while others run (ASYNC_STEPS)
    held = np.zeros(n, dtype=np.int64)
    running: list[int] = []  # admission order
    waiting: deque[int] = deque()
    free = pool.blocks
    cum_rows: list[np.ndarray] = [np.zeros(NFEAT)]
    acc = np.zeros(NFEAT)
    now = 0.0
    seg = 0
    steps = preemptions = peak = token_steps = 0
    next_req = 0
    done = 0
    arr = arrivals_s if arrivals_s is not None else np.zeros(0)
    if closed:
        for _ in range(min(concurrency, n)):
            waiting.append(next_req)
            next_req += 1

    def end_segment(x: np.ndarray) -> None:
        nonlocal acc, seg, now
        acc = acc + x
        cum_rows.append(acc)
        seg += 1
        now = float(acc @ coef)

    while done < n:
        if not closed:
            while next_req < n and arr[next_req] <= now:
                waiting.append(next_req)
                ready[next_req] = steps + ASYNC_STEPS - 1  # it arrived during the last step
                next_req += 1
            if not running and not waiting:
                # idle until the next arrival: a segment of pure waiting time
                gap = float(arr[next_req]) - now
                end_segment(np.array([0, 0, 0, 0, 0, gap]))
                now = float(arr[next_req])  # the engine wakes at the arrival (acc @ coef may round just below it)
                continue
        # --- try a stretch of decode-only steps
        c = len(running)
        if c and not _prefilling(running, computed, generated, P, first_seg):
            ids = np.asarray(running, dtype=np.int64)
            head = waiting[0] if waiting else -1
            later = head >= 0 and int(ready[head]) > steps  # not yet seen by the scheduler (async scheduling)
            can_admit = head >= 0 and not later and c < max_num_seqs and max_batched_tokens > c and int(
                pool.request_blocks(min(int(P[head] + generated[head]), max_batched_tokens - c))) <= free
            if not can_admit:
                ctx = computed[ids] + 1  # tokens each decode token attends to (its own included)
                k_fin = int((OUT[ids] - generated[ids]).min())
                if later:
                    k_fin = min(k_fin, int(ready[head]) - steps)
                k = _fit_blocks(pool, computed[ids], held[ids], free, k_fin)
                if k >= 1:
                    xb = base(c)
                    if not closed and next_req < n:
                        k = _steps_before(arr[next_req] - now, k, xb @ coef, ctx, W, coef,
                                          (dec_mem_full, dec_mem_win, dec_cmp_full, dec_cmp_win))
                    if k >= 1:
                        x = _stretch_features(xb, ctx, k, W, dec_mem_full, dec_mem_win, dec_cmp_full, dec_cmp_win,
                                              2 * mc.state_bytes / bw)
                        computed[ids] += k
                        generated[ids] += k
                        held[ids] = pool.request_blocks(computed[ids])
                        free = pool.blocks - int(held[ids].sum())
                        steps += k
                        token_steps += k * c
                        end_segment(x)
                        fin = ids[generated[ids] >= OUT[ids]]
                        if len(fin):
                            running, free, done, next_req = _finish(fin, running, held, free, finish_seg, seg, done,
                                                                    closed, waiting, next_req, n, arrival_seg,
                                                                    ready, steps)
                        continue
        # --- one step, as Scheduler.schedule(): the running requests first (vectorized when no preemption)
        budget = max_batched_tokens
        ids = np.asarray(running, dtype=np.int64)
        take = np.zeros(0, dtype=np.int64)
        preempted_now = False
        if len(ids):
            want = P[ids] + generated[ids] - computed[ids]
            before = np.cumsum(want) - want
            take = np.clip(budget - before, 0, want)
            need = np.where(take > 0, pool.request_blocks(computed[ids] + take) - held[ids], 0)
            if int(need.sum()) <= free:
                held[ids] += need
                free -= int(need.sum())
                budget -= int(take.sum())
            else:  # the pool runs short: request by request, preempting the newest
                take, free, budget, n_pre = _serve_with_preemption(running, P, generated, computed, held, pool,
                                                                   free, max_batched_tokens, waiting)
                preemptions += n_pre
                preempted_now = n_pre > 0
                ids = np.asarray(running, dtype=np.int64)
        admitted: list[tuple[int, int]] = []
        if not preempted_now:
            busy = bool(running)  # an idle engine schedules what arrives at once
            while waiting and len(running) < max_num_seqs and budget > 0:
                r = waiting[0]
                if busy and ready[r] > steps:  # arrived after this step was scheduled (async scheduling)
                    break
                want_r = int(P[r] + generated[r] - computed[r])
                t_r = min(want_r, budget)
                need_r = int(pool.request_blocks(t_r))
                if need_r > free:
                    break
                waiting.popleft()
                running.append(r)
                held[r] = need_r
                free -= need_r
                admitted.append((r, t_r))
                budget -= t_r
        if admitted:
            ids = np.concatenate([ids, np.asarray([r for r, _ in admitted], dtype=np.int64)])
            take = np.concatenate([take, np.asarray([t for _, t in admitted], dtype=np.int64)])
        live = take > 0
        if not live.any():
            raise InputError("--budget", f"{pool.blocks:,} blocks", "the pool cannot hold one request's first chunk")
        sids, stake = ids[live], take[live]
        tokens = int(stake.sum())
        x = base(tokens).copy()
        comp0 = computed[sids]
        decode = (stake == 1) & (comp0 + 1 == P[sids] + generated[sids])
        if decode.any():
            a = comp0[decode] + 1
            full_ctx = float(a.sum())
            win_ctx = float(np.minimum(a, W).sum()) if mc.window else 0.0
            x[0] += dec_mem_full * full_ctx + dec_mem_win * win_ctx + int(decode.sum()) * 2 * mc.state_bytes / bw
            x[1] += dec_cmp_full * full_ctx + dec_cmp_win * win_ctx
        if not decode.all():
            for p0, q in zip(comp0[~decode].tolist(), stake[~decode].tolist(), strict=True):
                mem_s, cmp_s = prefill_chunk_seconds(mc, p0, q, (full_pp, win_pp), f_attn, bw, lm_head_s=lm_s)
                x[1] += cmp_s
                x[0] += mem_s
        steps += 1
        token_steps += len(sids)
        end_segment(x)
        computed[sids] += stake
        sampled = sids[computed[sids] == P[sids] + generated[sids]]
        generated[sampled] += 1
        new_first = sampled[first_seg[sampled] < 0]
        first_seg[new_first] = seg
        peak = max(peak, len(running))
        fin = sampled[generated[sampled] >= OUT[sampled]]
        if len(fin):
            running, free, done, next_req = _finish(fin, running, held, free, finish_seg, seg, done, closed,
                                                    waiting, next_req, n, arrival_seg, ready, steps)
    return Schedule(np.asarray(cum_rows), first_seg, finish_seg, arrival_seg,
                    arr if not closed else np.zeros(n), steps, preemptions, peak, token_steps, closed)


def _serve_with_preemption(running: list[int], P: np.ndarray, generated: np.ndarray, computed: np.ndarray,
                           held: np.ndarray, pool: Pool, free: int, budget: int,
                           waiting: deque[int]) -> tuple[np.ndarray, int, int, int]:
    """Rule 1 request by request: each running request's tokens within the budget; while the pool has too
    few blocks the newest running request is preempted (recompute), possibly the request itself.  Returns
    the tokens scheduled per request still running (in order), the free blocks, the budget left and the
    number of preemptions; ``running`` and ``waiting`` are updated in place."""
    sched: dict[int, int] = {}
    preempted = 0
    i = 0
    while i < len(running) and budget > 0:
        r = running[i]
        take = min(int(P[r] + generated[r] - computed[r]), budget)
        need = int(pool.request_blocks(int(computed[r]) + take)) - int(held[r])
        stop = False
        while need > free:
            v = running.pop()
            free += int(held[v])
            held[v] = 0
            computed[v] = 0
            waiting.appendleft(v)
            preempted += 1
            budget += sched.pop(v, 0)
            if v == r:
                stop = True
                break
        if stop:
            break
        held[r] += need
        free -= need
        sched[r] = take
        budget -= take
        i += 1
    take_arr = np.asarray([sched.get(r, 0) for r in running], dtype=np.int64)
    return take_arr, free, budget, preempted


def _prefilling(running: list[int], computed: np.ndarray, generated: np.ndarray, P: np.ndarray,
                first_seg: np.ndarray) -> bool:
    """Whether a running request still prefills: more than one token to compute, or its first token not out
    yet (a chunk that left one prompt token: the step that computes it samples the first token, so it is a
    step of its own, never inside a stretch)."""
    ids = np.asarray(running, dtype=np.int64)
    return bool((P[ids] + generated[ids] - computed[ids] > 1).any() or (first_seg[ids] < 0).any())


def _fit_blocks(pool: Pool, computed: np.ndarray, held: np.ndarray, free: int, k_max: int) -> int:
    """The most decode steps (at most ``k_max``) the running requests can take without a preemption."""
    def need(k: int) -> int:
        return int((pool.request_blocks(computed + k) - held).clip(min=0).sum())

    return last_true(lambda k: need(k) <= free, k_max)


def _window_sum(ctx: np.ndarray, k: int, W: int) -> float:
    """Sum over requests and steps j < k of min(ctx + j, W)."""
    a = ctx.astype(np.int64)
    below = np.clip(W - a, 0, k)  # steps with ctx + j < W ... those j with a + j <= W - 1... (a + j < W)
    s_below = below * a + below * (below - 1) // 2
    return float((s_below + (k - below) * W).sum())


def _stretch_features(xb: np.ndarray, ctx: np.ndarray, k: int, W: int, mf: float, mw: float, cf: float, cw: float,
                      state_s: float) -> np.ndarray:
    c = len(ctx)
    full = float(ctx.sum()) * k + c * k * (k - 1) / 2
    win = _window_sum(ctx, k, W) if (mw or cw) else 0.0
    x = xb * k
    x = x.copy()
    x[0] += mf * full + mw * win + state_s * c * k
    x[1] += cf * full + cw * win
    return x


def _steps_before(gap: float, k: int, base_s: float, ctx: np.ndarray, W: int, coef: np.ndarray,
                  d: tuple[float, float, float, float]) -> int:
    """Decode steps (at most ``k``) that start before ``gap`` seconds from now: the arrival is scheduled at
    the first step starting at or after it."""
    mf, mw, cf, cw = d
    per_full = coef[0] * mf + coef[1] * cf
    per_win = coef[0] * mw + coef[1] * cw
    c = len(ctx)

    def elapsed(m: int) -> float:  # seconds of the first m steps
        full = float(ctx.sum()) * m + c * m * (m - 1) / 2
        win = _window_sum(ctx, m, W) if per_win else 0.0
        return base_s * m + per_full * full + per_win * win

    # the number of steps m with start time < gap: step m starts at elapsed(m) (elapsed(0) = 0 < gap)
    return last_true(lambda m: elapsed(m) < gap, k - 1) + 1


def _finish(fin: np.ndarray, running: list[int], held: np.ndarray, free: int, finish_seg: np.ndarray, seg: int,
            done: int, closed: bool, waiting: deque[int], next_req: int, n: int,
            arrival_seg: np.ndarray, ready: np.ndarray, steps: int) -> tuple[list[int], int, int, int]:
    free += int(held[fin].sum())
    held[fin] = 0
    finish_seg[fin] = seg
    done += len(fin)
    run = np.asarray(running, dtype=np.int64)
    running = run[finish_seg[run] < 0].tolist()
    gone = fin
    if closed:
        for _ in range(len(gone)):
            if next_req < n:
                arrival_seg[next_req] = seg
                ready[next_req] = steps + ASYNC_STEPS  # the user's next request arrives during the next step
                waiting.append(next_req)
                next_req += 1
    return running, free, done, next_req


def summarize(s: Schedule, consts: Constants, output: np.ndarray, tp: int, policy: str = "paged") -> TimedResult:
    """Latency percentiles and throughput of a schedule under constants ``consts``."""
    t = s.times(consts)
    first = t[s.first_seg]
    finish = t[s.finish_seg]
    if s.closed:
        arrive = np.where(s.arrival_seg < 0, 0.0, t[np.maximum(s.arrival_seg, 0)])
    else:
        arrive = s.arrival_s
    ttft = first - arrive + consts.c_request
    OUT = output.astype(np.int64)
    multi = OUT > 1
    tpot = (finish[multi] - first[multi]) / (OUT[multi] - 1)
    e2e = finish - arrive + consts.c_request
    span = float(t[-1]) or 1e-12
    total = float(OUT.sum())
    per_user = float((1.0 / tpot[tpot > 0]).mean()) if (tpot > 0).any() else 0.0
    return TimedResult(policy=policy, requests=len(OUT), ttft_ms=_stats(ttft), tpot_ms=_stats(tpot),
                       e2e_ms=_stats(e2e),
                       tokens_per_s=_rounded(total / span, 3), tokens_per_s_per_gpu=_rounded(total / span / tp, 3),
                       tokens_per_s_per_user=_rounded(per_user, 3), requests_per_s=_rounded(len(OUT) / span, 6),
                       makespan_s=round(span, 6), steps=s.steps, preemptions=s.preemptions,
                       peak_running=s.peak_running, avg_running=round(s.token_steps / max(s.steps, 1), 3),
                       constants=consts.fitted_on, has_tpot=bool(multi.any()))

"""Orca's contiguous baselines in seconds: Max, Pow2 and Oracle under the timed simulator's scheduler (issue 28).

The PagedAttention paper (Kwon et al., SOSP 2023, §6.2, Fig. 12) compares vLLM with three versions of Orca
that differ only in how much KV memory a request reserves when it is admitted: ``max`` the maximum length
(2,048 there), ``pow2`` its prompt plus the next power of two of its output ("over-reserves the space for
outputs by at most 2x"), ``oracle`` exactly its final length.  :func:`kvdash.core.formulas.pow2_output_reservation`
is the rule, shared with the step simulator (:func:`kvdash.simulate.engine.check_pool`), and the reservation is
placed by the same first-fit or buddy allocator (:class:`kvdash.simulate.allocators.FirstFit`, ``Buddy``).

Everything else is :func:`kvdash.simulate.timed.simulate_timed`'s scheduler, so that paged and contiguous runs
differ only in the memory rule: every step the running requests, oldest first, take their next tokens within
``max_num_batched_tokens`` (a decode one, a prefill the rest of its prompt: chunked prefill), then waiting
requests are admitted first come first served while fewer than ``max_num_seqs`` run, the budget has tokens
left and the allocator can place the whole reservation (a head that cannot be placed blocks the queue).  A
reservation covers the final length, so nothing is ever preempted.  The step's time is
:func:`kvdash.core.steptime.features` of what it scheduled, as in the paged simulator; decode-only stretches
between events are summed in closed form.  With a pool so large that every reservation fits, Oracle's
schedule is the paged simulator's, step for step (``tests/test_timed_contiguous.py`` checks it).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from kvdash.core import formulas as f
from kvdash.core.steptime import Constants, GPUPerf, ModelCompute, features, lm_head_seconds, prefill_chunk_seconds
from kvdash.errors import InputError
from kvdash.simulate.allocators import Buddy, FirstFit
from kvdash.simulate.schedule import ASYNC_STEPS
from kvdash.simulate.timed import Schedule

CONTIGUOUS = ("max", "pow2", "oracle")
NFEAT = 6  # the step features' length (kvdash.core.steptime.features)


def reservations(policy: str, prompt: np.ndarray, output: np.ndarray, max_len: int) -> np.ndarray:
    """Slots each request reserves at admission: ``max_len`` (Max), prompt + next power of two of the output
    (Pow2, the paper's rule), the final length (Oracle)."""
    final = (prompt + output).astype(np.int64)
    if policy == "max":
        return np.full(len(final), max_len, dtype=np.int64)
    if policy == "pow2":
        return np.asarray(f.pow2_output_reservation(prompt.astype(np.int64), final, max_len), dtype=np.int64)
    if policy == "oracle":
        return final
    raise InputError("policy", policy, "expected one of: " + ", ".join(CONTIGUOUS))


def _fits(alloc: FirstFit | Buddy, size: int) -> bool:
    """Whether the allocator could place ``size`` slots now (without placing them)."""
    if isinstance(alloc, FirstFit):
        return bool(alloc.sizes) and max(alloc.sizes) >= size
    order = max(0, (size - 1).bit_length())
    return any(alloc.free_sets[k] for k in range(order, alloc.top + 1))


def _window_sum(ctx: np.ndarray, k: int, W: int) -> float:
    """Sum over requests and steps j < k of min(ctx + j, W)."""
    a = ctx.astype(np.int64)
    below = np.clip(W - a, 0, k)
    return float((below * a + below * (below - 1) // 2 + (k - below) * W).sum())


def simulate_timed_contiguous(prompt: np.ndarray, output: np.ndarray, reserve: np.ndarray, capacity_slots: int,
                              allocator: str, mc: ModelCompute, gpu: GPUPerf, consts: Constants, max_num_seqs: int,
                              max_batched_tokens: int, concurrency: int = 0,
                              arrivals_s: np.ndarray | None = None) -> Schedule:
    """Run the requests closed-loop at ``concurrency`` or at the Poisson ``arrivals_s`` (seconds, sorted), each
    reserving ``reserve`` slots of a pool of ``capacity_slots`` when admitted; the :class:`Schedule` is read by
    :func:`kvdash.simulate.timed.summarize` as a paged one is."""
    n = len(prompt)
    if max_batched_tokens < max_num_seqs:
        raise InputError("--max-batched-tokens", max_batched_tokens,
                         f"at least --max-num-seqs ({max_num_seqs}), as vLLM requires")
    P = prompt.astype(np.int64)
    OUT = output.astype(np.int64)
    res = reserve.astype(np.int64).tolist()
    alloc: FirstFit | Buddy = FirstFit(capacity_slots) if allocator == "first-fit" else Buddy(capacity_slots)
    biggest = max(res)
    if not _fits(alloc, biggest):
        raise InputError("--budget", f"{capacity_slots:,} token slots",
                         f"the pool cannot hold one reservation of {biggest:,} slots")
    closed = arrivals_s is None
    coef = np.array(consts.vector() + (1.0,))
    full_pf, win_pf = mc.attn_pair_flops()
    full_pp, win_pp = mc.attn_pair_flops(prefill=True)
    lm_s = lm_head_seconds(mc, gpu)
    W = mc.window or 1
    bw = gpu.hbm_bytes_per_s
    f_attn = gpu.rate(mc.attn_rate)
    mf, mw = mc.kv_full_bytes / bw, mc.kv_window_bytes / bw
    cf, cw = full_pf / f_attn, win_pf / f_attn
    state_s = 2 * mc.state_bytes / bw
    base_cache: dict[int, np.ndarray] = {}

    def base(tokens: int) -> np.ndarray:
        got = base_cache.get(tokens)
        if got is None:
            got = np.array(features(mc, gpu, tokens, 0.0, 0.0, 0.0), dtype=float)
            base_cache[tokens] = got
        return got

    computed = np.zeros(n, dtype=np.int64)
    generated = np.zeros(n, dtype=np.int64)
    first_seg = np.full(n, -1, dtype=np.int64)
    finish_seg = np.full(n, -1, dtype=np.int64)
    arrival_seg = np.full(n, -1, dtype=np.int64)
    ready = np.zeros(n, dtype=np.int64)  # the first step a waiting request may join while others run (ASYNC_STEPS)
    place: list[tuple[int, int] | None] = [None] * n
    running: list[int] = []
    waiting: deque[int] = deque()
    cum_rows: list[np.ndarray] = [np.zeros(NFEAT)]
    acc = np.zeros(NFEAT)
    now = 0.0
    seg = steps = peak = token_steps = next_req = done = 0
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

    def finish(fin: np.ndarray) -> None:
        nonlocal running, done, next_req
        for r in fin.tolist():
            start, size = place[r]  # type: ignore[misc]
            alloc.free(start, size)
            place[r] = None
        finish_seg[fin] = seg
        done += len(fin)
        gone = set(fin.tolist())
        running = [r for r in running if r not in gone]
        if closed:
            for _ in range(len(fin)):
                if next_req < n:
                    arrival_seg[next_req] = seg
                    ready[next_req] = steps + ASYNC_STEPS
                    waiting.append(next_req)
                    next_req += 1

    while done < n:
        if not closed:
            while next_req < n and arr[next_req] <= now:
                waiting.append(next_req)
                ready[next_req] = steps + ASYNC_STEPS - 1  # it arrived during the last step
                next_req += 1
            if not running and not waiting:
                end_segment(np.array([0, 0, 0, 0, 0, float(arr[next_req]) - now]))
                continue
        c = len(running)
        ids = np.asarray(running, dtype=np.int64)
        if c and not bool((P[ids] + generated[ids] - computed[ids] > 1).any()):
            head = waiting[0] if waiting else -1
            later = head >= 0 and int(ready[head]) > steps  # not yet seen by the scheduler (async scheduling)
            can_admit = head >= 0 and not later and c < max_num_seqs and max_batched_tokens > c and _fits(
                alloc, res[head])
            if not can_admit:
                ctx = computed[ids] + 1
                k = int((OUT[ids] - generated[ids]).min())
                if later:
                    k = min(k, int(ready[head]) - steps)
                xb = base(c)
                if not closed and next_req < n:
                    k = _steps_before(float(arr[next_req]) - now, k, float(xb @ coef), ctx, W,
                                      coef[0] * mf + coef[1] * cf, coef[0] * mw + coef[1] * cw)
                if k >= 1:
                    full = float(ctx.sum()) * k + c * k * (k - 1) / 2
                    win = _window_sum(ctx, k, W) if (mw or cw) else 0.0
                    x = xb * k
                    x[0] += mf * full + mw * win + state_s * c * k
                    x[1] += cf * full + cw * win
                    computed[ids] += k
                    generated[ids] += k
                    steps += k
                    token_steps += k * c
                    end_segment(x)
                    fin = ids[generated[ids] >= OUT[ids]]
                    if len(fin):
                        finish(fin)
                    continue
        # one step: the running requests first, then FCFS admission of whole reservations
        budget = max_batched_tokens
        take = np.zeros(0, dtype=np.int64)
        if c:
            want = P[ids] + generated[ids] - computed[ids]
            before = np.cumsum(want) - want
            take = np.clip(budget - before, 0, want)
            budget -= int(take.sum())
        admitted: list[tuple[int, int]] = []
        busy = bool(running)  # an idle engine schedules what arrives at once
        while waiting and len(running) < max_num_seqs and budget > 0:
            r = waiting[0]
            if busy and ready[r] > steps:  # arrived after this step was scheduled (async scheduling)
                break
            got = alloc.alloc(res[r])
            if got is None:
                break
            waiting.popleft()
            place[r] = got
            running.append(r)
            t_r = min(int(P[r] + generated[r] - computed[r]), budget)
            admitted.append((r, t_r))
            budget -= t_r
        if admitted:
            ids = np.concatenate([ids, np.asarray([r for r, _ in admitted], dtype=np.int64)])
            take = np.concatenate([take, np.asarray([t for _, t in admitted], dtype=np.int64)])
        live = take > 0
        if not live.any():
            raise InputError("--budget", f"{capacity_slots:,} token slots", "the pool cannot hold one reservation")
        sids, stake = ids[live], take[live]
        x = base(int(stake.sum())).copy()
        comp0 = computed[sids]
        decode = (stake == 1) & (comp0 + 1 == P[sids] + generated[sids])
        if decode.any():
            a = comp0[decode] + 1
            full_ctx = float(a.sum())
            win_ctx = float(np.minimum(a, W).sum()) if mc.window else 0.0
            x[0] += mf * full_ctx + mw * win_ctx + int(decode.sum()) * state_s
            x[1] += cf * full_ctx + cw * win_ctx
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
        first_seg[sampled[first_seg[sampled] < 0]] = seg
        peak = max(peak, len(running))
        fin = sampled[generated[sampled] >= OUT[sampled]]
        if len(fin):
            finish(fin)
    return Schedule(np.asarray(cum_rows), first_seg, finish_seg, arrival_seg, arr if not closed else np.zeros(n),
                    steps, 0, peak, token_steps, closed)


def _steps_before(gap: float, k: int, base_s: float, ctx: np.ndarray, W: int, per_full: float,
                  per_win: float) -> int:
    """Decode steps (at most ``k``) that start before ``gap`` seconds from now (an arrival is scheduled at the
    first step starting at or after it)."""
    c = len(ctx)
    total = float(ctx.sum())

    def elapsed(m: int) -> float:
        full = total * m + c * m * (m - 1) / 2
        win = _window_sum(ctx, m, W) if per_win else 0.0
        return base_s * m + per_full * full + per_win * win

    if elapsed(k - 1) < gap:
        return k
    lo, hi = 0, k - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if elapsed(mid) < gap:
            lo = mid
        else:
            hi = mid
    return lo + 1


def run(policy: str, prompt: np.ndarray, output: np.ndarray, setup: dict[str, Any], concurrency: int = 0,
        arrivals_s: np.ndarray | None = None) -> Schedule:
    """A contiguous policy on ``setup`` (the keys :mod:`kvdash.simulate.slo` uses: ``slots``, ``max_len``,
    ``allocator`` besides the time model's)."""
    reserve = reservations(policy, prompt, output, setup["max_len"])
    return simulate_timed_contiguous(prompt, output, reserve, setup["slots"], setup.get("allocator", "first-fit"),
                                     setup["mc"], setup["gpu"], setup["consts"], setup["max_num_seqs"],
                                     setup["max_batched"], concurrency=concurrency, arrivals_s=arrivals_s)

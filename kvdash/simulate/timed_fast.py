"""The simulator in seconds, event by event (issue 28: within 1.5x of the step simulator).

The same scheduler as :func:`kvdash.simulate.timed.simulate_reference` (vLLM 0.33's ``Scheduler.schedule()``,
step for step, the same segments), for pools and models without sliding-window layers.  What makes it fast
is the step simulator's trick (:class:`kvdash.simulate.engine._PagedFast`): a decoding request's computed
tokens are ``off + T`` after ``T`` steps, so nothing per request changes between events, and

* a decoding request takes a new block at the steps where ``(off + T) % B == 0``: the decoders are held by
  the phase ``off % B``, which gives in O(B) the blocks a stretch of steps takes and the step at which the
  free blocks run out;
* the KV a decode step reads is ``sum(off) + c (T + 1)`` tokens of context: one running sum;
* a decoder's finish step is fixed when it starts decoding: a heap.

Only the requests being prefilled (at most a few, always after every decoder in the running order: a
request admitted after one being prefilled got budget, so that one's prefill was complete) are held one by
one.  A step that preempts lays the running requests out in order and follows the reference rule request by
request.  ``tests/test_time.py`` checks both simulators give the same schedule on random workloads.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Any

import numpy as np

from kvdash.core.steptime import Constants, GPUPerf, ModelCompute, features, lm_head_seconds
from kvdash.errors import InputError
from kvdash.simulate.schedule import ASYNC_STEPS, NFEAT, Schedule


def applies(pool: Any, mc: ModelCompute) -> bool:
    """Whether the event simulator covers this pool and model: no sliding-window layers."""
    return not pool.window_groups and not mc.window and not mc.kv_window_bytes


def simulate_events(prompt: np.ndarray, output: np.ndarray, pool: Any, mc: ModelCompute, gpu: GPUPerf,
                    consts: Constants, max_num_seqs: int, max_batched_tokens: int, concurrency: int,
                    arrivals_s: np.ndarray | None) -> Schedule:
    n = len(prompt)
    P: list[int] = prompt.astype(np.int64).tolist()
    OUT: list[int] = output.astype(np.int64).tolist()
    closed = arrivals_s is None
    arr: list[float] = arrivals_s.tolist() if arrivals_s is not None else []
    coef_np = np.array(consts.vector() + (1.0,))
    # tokens per block of the full groups (Pool.request_blocks without window groups)
    B, fg, sb, total = pool.block_size * pool.full_ratio, pool.full_groups, pool.state_blocks, pool.blocks

    def rb(t: int) -> int:  # Pool.request_blocks without window groups
        return fg * (-(-t // B)) + sb

    full_pf, win_pf = mc.attn_pair_flops()
    full_pp = mc.attn_pair_flops(prefill=True)[0]  # no window here
    lm_s = lm_head_seconds(mc, gpu)  # a chunk runs the LM head once (prefill_chunk_seconds)
    bw = gpu.hbm_bytes_per_s
    f_attn = gpu.rate(mc.attn_rate)
    mf, cf = mc.kv_full_bytes / bw, full_pf / f_attn
    mw, cw = mc.kv_window_bytes / bw, win_pf / f_attn  # 0.0 here; kept so that the sums match the reference's
    state2 = 2 * mc.state_bytes
    kv_full = mc.kv_full_bytes
    state_s = 2 * mc.state_bytes / bw
    base_cache: dict[int, list[float]] = {}
    if not mc.moe_layers:  # a dense model's terms are element-wise in the tokens: all step sizes at once
        every_size: Any = np.arange(max_batched_tokens + 1)  # features() is element-wise: an array of token counts
        feats = features(mc, gpu, every_size, 0.0, 0.0, 0.0)
        table = np.stack([np.broadcast_to(np.asarray(v, dtype=float), (max_batched_tokens + 1,)) for v in feats], 1)
    else:
        table = None

    def base(tokens: int) -> list[float]:
        got = base_cache.get(tokens)
        if got is None:
            got = table[tokens].tolist() if table is not None else [
                float(v) for v in features(mc, gpu, tokens, 0.0, 0.0, 0.0)]
            base_cache[tokens] = got
        return got

    computed = [0] * n  # requests not decoding (a decoder's: off + T)
    gen = [0] * n  # requests not decoding (a decoder's: off + T - P + 1)
    first = [-1] * n
    finish = [-1] * n
    arrival = [-1] * n
    ready = [0] * n  # the first step a waiting request may join while others run (timed.ASYNC_STEPS)
    off: list[int] = []  # by decoder key (a key per start of decoding: a preempted request comes back anew)
    dec: dict[int, int] = {}  # decoding: key -> request, in running order
    phases: list[set[int]] = [set() for _ in range(B)]  # off % B -> keys
    sum_off = 0
    heap: list[tuple[int, int]] = []  # (finish step, key); stale entries: key no longer in dec
    pref: list[int] = []  # requests being prefilled (or not yet sampled), in running order, after every decoder
    waiting: deque[int] = deque()
    heappop, heappush = heapq.heappop, heapq.heappush
    free = total
    T = 0  # steps so far
    rows: list[float] = [0.0] * NFEAT  # the segments' features, flat (summed at the end)
    acc = np.zeros(NFEAT)  # Poisson arrivals: the running sum, for the time now
    now = 0.0
    seg = steps = preemptions = peak = token_steps = 0
    next_req = done = 0
    if closed:
        for _ in range(min(concurrency, n)):
            waiting.append(next_req)
            next_req += 1

    def clock(x: list[float]) -> float:
        nonlocal acc
        acc = acc + np.asarray(x)
        return float(acc @ coef_np)

    def start_decoding(r: int, comp: int, g: int, t_next: int) -> None:
        """Request ``r`` (``comp`` computed, ``g`` generated, one token to compute) decodes from step ``t_next``."""
        nonlocal sum_off
        key = len(off)
        o = comp - t_next
        off.append(o)
        dec[key] = r
        phases[o % B].add(key)
        sum_off += o
        heapq.heappush(heap, (t_next + OUT[r] - g - 1, key))

    def stop_decoding(key: int) -> int:
        """Remove a decoder; its computed tokens after ``T`` steps."""
        nonlocal sum_off
        del dec[key]
        o = off[key]
        phases[o % B].discard(key)
        sum_off -= o
        return o + T

    def finished(r: int, comp: int) -> None:
        nonlocal free, done, next_req
        free += rb(comp)
        finish[r] = seg
        done += 1
        if closed and next_req < n:
            arrival[next_req] = seg
            ready[next_req] = T + ASYNC_STEPS
            waiting.append(next_req)
            next_req += 1

    def pop_finished() -> None:
        """The decoders whose last token was sampled in the steps before ``T`` leave (finished + stop_decoding)."""
        nonlocal sum_off, free, done, next_req
        while heap and heap[0][0] < T:
            _, key = heappop(heap)
            r = dec.pop(key, -1)
            if r < 0:
                continue
            o = off[key]
            phases[o % B].discard(key)
            sum_off -= o
            free += fg * (-(-(o + T) // B)) + sb
            finish[r] = seg
            done += 1
            if closed and next_req < n:
                arrival[next_req] = seg
                ready[next_req] = T + ASYNC_STEPS
                waiting.append(next_req)
                next_req += 1

    def crossings(k: int, c: int) -> int:
        """Blocks the decoders take in steps T .. T + k - 1: each decoder one (per full group) every B steps,
        and in the last k % B steps those whose phase comes up."""
        rounds, part = divmod(k, B)
        add = c * rounds
        for j in range(T, T + part):
            add += len(phases[-j % B])
        return add * fg

    def fit(k_max: int, c: int) -> int:
        """The most decode steps (at most ``k_max``) without running out of free blocks."""
        if not fg or c * fg * (-(-k_max // B)) <= free:
            return k_max
        rounds, rem = divmod(free // fg, c)
        acc = 0
        for j in range(B):
            acc += len(phases[(-(T + rounds * B + j)) % B])
            if acc > rem:
                return min(k_max, rounds * B + j)
        raise AssertionError("unreachable: the phases hold every decoder")  # pragma: no cover

    while done < n:
        if not closed:
            while next_req < n and arr[next_req] <= now:
                waiting.append(next_req)
                ready[next_req] = T + ASYNC_STEPS - 1  # it arrived during the last step
                next_req += 1
            if not dec and not pref and not waiting:
                x = [0.0, 0.0, 0.0, 0.0, 0.0, float(arr[next_req]) - now]
                rows += x
                seg += 1
                now = clock(x)
                continue
        cd = len(dec)
        c = cd + len(pref)
        # --- a stretch of decode-only steps
        if c and not pref:
            can_admit = later = False
            if waiting:
                h = waiting[0]
                later = ready[h] > T  # not yet seen by the scheduler (async scheduling)
                first_chunk = min(P[h] + gen[h], max_batched_tokens - c)
                can_admit = not later and c < max_num_seqs and max_batched_tokens > c and (
                    fg * (-(-first_chunk // B)) + sb <= free)
            if not can_admit:
                while heap[0][1] not in dec:
                    heapq.heappop(heap)
                k = heap[0][0] - T + 1
                if later and ready[waiting[0]] - T < k:
                    k = ready[waiting[0]] - T
                if fg and c * fg * (-(-k // B)) > free:
                    k = fit(k, c)
                if k >= 1:
                    xb = base_cache.get(c) or base(c)
                    S = sum_off + c * (T + 1)  # the decode tokens' contexts at the stretch's first step
                    if not closed and next_req < n:
                        k = _steps_before(arr[next_req] - now, k, float(np.asarray(xb) @ coef_np), S, c,
                                          coef_np[0] * mf + coef_np[1] * cf, coef_np[0] * mw + coef_np[1] * cw)
                    if k >= 1:
                        full = float(S) * k + c * k * (k - 1) / 2
                        x = [v * k for v in xb] if k > 1 else list(xb)  # (v * 1 is v)
                        x[0] += mf * full + mw * 0.0 + state_s * c * k
                        x[1] += cf * full + cw * 0.0
                        if fg:
                            free -= crossings(k, c) if k > 1 else fg * len(phases[-T % B])
                        T += k
                        steps += k
                        token_steps += k * c
                        rows += x
                        seg += 1
                        if not closed:
                            now = clock(x)
                        if heap[0][0] < T:
                            pop_finished()
                        continue
        # --- one step, as Scheduler.schedule(): the running requests first
        budget = max_batched_tokens
        takes: list[int] = []  # per request of pref
        preempted_now = False
        need = fg * len(phases[-T % B]) if fg else 0
        if pref:
            before = cd
            for r in pref:
                want = P[r] + gen[r] - computed[r]
                t = budget - before
                t = 0 if t < 0 else (want if t > want else t)
                before += want
                takes.append(t)
                if t:
                    need += rb(computed[r] + t) - rb(computed[r])
        if need <= free:
            free -= need
            budget -= cd + sum(takes) if takes else cd
        else:  # the pool runs short: request by request, preempting the newest (recompute)
            order = list(dec) + [-1 - r for r in pref]  # decoder keys, then requests being prefilled as -1 - r
            sched: dict[int, int] = {}
            n_pre = 0
            i = 0
            while i < len(order) and budget > 0:
                item = order[i]
                if item >= 0:
                    comp, want = off[item] + T, 1
                else:
                    comp = computed[-1 - item]
                    want = P[-1 - item] + gen[-1 - item] - comp
                take = want if want < budget else budget
                nb = rb(comp + take) - rb(comp)
                stop = False
                while nb > free:
                    v = order.pop()
                    if v >= 0:
                        rv = dec[v]
                        comp_v = stop_decoding(v)
                        gen[rv] = comp_v - P[rv] + 1
                    else:
                        rv = -1 - v
                        comp_v = computed[rv]
                    tv = sched.pop(v, 0)
                    free += rb(comp_v + tv)
                    budget += tv
                    computed[rv] = 0
                    waiting.appendleft(rv)
                    n_pre += 1
                    if v == item:
                        stop = True
                        break
                if stop:
                    break
                free -= nb
                sched[item] = take
                budget -= take
                i += 1
            if any(key not in sched for key in dec):  # pragma: no cover - the budget covers every decoder
                raise AssertionError("a decoder left unscheduled")
            pref = [-1 - v for v in order if v < 0]
            takes = [sched.get(-1 - r, 0) for r in pref]
            preemptions += n_pre
            preempted_now = n_pre > 0
            cd = len(dec)
        chunk_reqs = pref  # pref is built anew below
        chunk_takes = takes
        if waiting and not preempted_now:
            running = cd + len(pref)
            busy = running > 0  # an idle engine schedules what arrives at once
            while waiting and running < max_num_seqs and budget > 0:
                r = waiting[0]
                if busy and ready[r] > T:  # arrived after this step was scheduled (async scheduling)
                    break
                want = P[r] + gen[r] - computed[r]
                q = want if want < budget else budget
                nb = fg * (-(-q // B)) + sb
                if nb > free:
                    break
                waiting.popleft()
                free -= nb
                chunk_reqs.append(r)
                chunk_takes.append(q)
                budget -= q
                running += 1
        # the step's features, chunk by chunk, in one pass: a chunk of one token may be a decode token (its last
        # prompt token, or a 1-token prompt); every other adds prefill_chunk_seconds (causal_pairs(p0, q),
        # mc.kv_read_bytes(p0), no window, the LM head once), summed in px0 / px1
        tokens = nd = cd
        full_ctx = sum_off + cd * (T + 1)
        px0 = px1 = 0.0
        n_prefill = 0
        for r, q in zip(chunk_reqs, chunk_takes):  # noqa: B905 - the same length
            if q:
                tokens += q
                p0 = computed[r]
                if q == 1 and p0 + 1 == P[r] + gen[r]:
                    nd += 1
                    full_ctx += p0 + 1
                else:
                    px1 += full_pp * (q * p0 + q * (q + 1) // 2) / f_attn - (q - 1) * lm_s
                    px0 += (kv_full * p0 + state2) / bw
                    n_prefill += 1
        if not tokens:
            raise InputError("--budget", f"{pool.blocks:,} blocks", "the pool cannot hold one request's first chunk")
        x = list(base_cache.get(tokens) or base(tokens))
        if nd:
            x[0] += mf * full_ctx + nd * state2 / bw
            x[1] += cf * full_ctx
        if n_prefill:
            x[0] += px0
            x[1] += px1
        steps += 1
        token_steps += nd + n_prefill
        rows += x
        seg += 1
        if not closed:
            now = clock(x)
        if cd + len(chunk_reqs) > peak:
            peak = cd + len(chunk_reqs)
        seg_now = seg
        T += 1  # the decoders' computed tokens advance with T
        if heap and heap[0][0] < T:
            pop_finished()
        # the chunks: a request samples when its last known token is computed
        pref = []
        for r, t in zip(chunk_reqs, chunk_takes):  # noqa: B905 - the same length
            if t:
                comp = computed[r] + t
                computed[r] = comp
                g = gen[r]
                if comp == P[r] + g:
                    g += 1
                    gen[r] = g
                    if first[r] < 0:
                        first[r] = seg_now
                    if g >= OUT[r]:
                        finished(r, comp)
                        continue
                    if pref:  # pragma: no cover - a request after one still prefilling got no budget
                        raise AssertionError("a decoder after a request being prefilled")
                    # start_decoding(r, comp, g, T), inline
                    key = len(off)
                    o = comp - T
                    off.append(o)
                    dec[key] = r
                    phases[o % B].add(key)
                    sum_off += o
                    heappush(heap, (T + OUT[r] - g - 1, key))
                    continue
            pref.append(r)
        # a recomputed request with one token left and its first token out decodes
        while pref and first[pref[0]] >= 0 and P[pref[0]] + gen[pref[0]] - computed[pref[0]] == 1:
            r = pref.pop(0)
            start_decoding(r, computed[r], gen[r], T)
    cum = np.cumsum(np.asarray(rows).reshape(-1, NFEAT), axis=0)
    return Schedule(cum, np.asarray(first, dtype=np.int64), np.asarray(finish, dtype=np.int64),
                    np.asarray(arrival, dtype=np.int64), arrivals_s if arrivals_s is not None else np.zeros(n),
                    steps, preemptions, peak, token_steps, closed)


def _steps_before(gap: float, k: int, base_s: float, S: int, c: int, per_full: float, per_win: float) -> int:
    """Decode steps (at most ``k``) that start before ``gap`` seconds from now (the reference's
    ``timed._steps_before`` with the contexts' sum ``S``, no window)."""
    def elapsed(m: int) -> float:
        full = float(S) * m + c * m * (m - 1) / 2
        return base_s * m + per_full * full + per_win * 0.0

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

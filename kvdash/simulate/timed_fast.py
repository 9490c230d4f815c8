"""The simulator in seconds, event by event (issue 28: within 1.5x of the step simulator).

The same scheduler as :func:`kvdash.simulate.timed.simulate_reference` (vLLM 0.33's ``Scheduler.schedule()``,
step for step, the same segments), for every pool and model.  What makes it fast
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

Sliding windows (gpt-oss, Gemma, Mistral v0.1, MiMo-V2-Flash): a decoder whose window blocks have stopped
growing (``capw`` a window group) and whose window context has reached the window ``Wc`` changes nothing more
in them; the young ones, held in buckets by offset (:class:`_Young`), take a window block at the steps where
``(off + T) % Bw == 0`` (phases again) and read ``off + T + 1`` tokens of window context (a running sum), and
a stretch's sums are arithmetic series less each bucket's steps after it ages.  A prefill chunk's seconds are
:func:`kvdash.core.steptime.prefill_chunk_seconds` itself there (its window pairs).

The rest is Python's cost per request (``benchmarks/simulate_time_speed.py``): a segment records four numbers
and its features are summed at the end for all segments at once (:func:`_cumulative`: the step size's row of a
table, times the steps, plus the KV and prefill seconds; the running time is kept in the loop only for Poisson
arrivals, which need it); a step's admissions and its chunks go in one pass; the state stays in the function's
locals (no nested function rebinds it); under Poisson arrivals the time now is a running sum of the segments'
seconds (the reference's is the summed features times the constants: the two round differently, so an arrival
within about 1e-15 s of a step's end may join a step apart in the two; an idle engine wakes at the arrival's
time exactly in both).
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Any

import numpy as np

from kvdash.core.steptime import Constants, GPUPerf, ModelCompute, features, lm_head_seconds, prefill_chunk_seconds
from kvdash.errors import InputError
from kvdash.simulate.schedule import ASYNC_STEPS, NFEAT, Schedule, last_true

# the largest max_num_batched_tokens whose step sizes are tabulated up front (8 floats a size: 4 MiB)
TABLE_TOKENS = 65_536


def simulate_events(prompt: np.ndarray, output: np.ndarray, pool: Any, mc: ModelCompute, gpu: GPUPerf,
                    consts: Constants, max_num_seqs: int, max_batched_tokens: int, concurrency: int,
                    arrivals_s: np.ndarray | None) -> Schedule:
    n = len(prompt)
    P: list[int] = prompt.astype(np.int64).tolist()
    OUT: list[int] = output.astype(np.int64).tolist()
    closed = arrivals_s is None
    arr: list[float] = arrivals_s.tolist() if arrivals_s is not None else []
    coef_np = np.array(consts.vector() + (1.0,))
    # tokens per block of the full groups
    B, fg, sb, total = pool.block_size * pool.full_ratio, pool.full_groups, pool.state_blocks, pool.blocks
    # sliding windows: the window groups' blocks (Bw tokens each, at most capw a request) and the window the
    # attention reads (Wc tokens of context; 0: none, as the reference's win_ctx)
    wg, Bw, Wc = pool.window_groups, pool.block_size * pool.window_ratio, mc.window
    capw = -(-(pool.window - 1) // Bw) + 1 if wg else 0
    windowed = bool(wg or Wc)
    # the young decoders (window blocks still growing, window context below Wc), in buckets by offset
    yg = _Young(Wc, wg, Bw, capw) if windowed else None

    def rb(t: int, B: int = B, fg: int = fg, sb: int = sb) -> int:  # Pool.request_blocks without window groups
        return fg * (-(-t // B)) + sb

    if windowed:
        def rb(t: int, B: int = B, fg: int = fg, sb: int = sb) -> int:  # noqa: F811 - Pool.request_blocks
            w = -(-t // Bw)
            return fg * (-(-t // B)) + wg * (w if w < capw else capw) + sb

    full_pf, win_pf = mc.attn_pair_flops()
    full_pp, win_pp = mc.attn_pair_flops(prefill=True)
    lm_s = lm_head_seconds(mc, gpu)  # a chunk runs the LM head once (prefill_chunk_seconds)
    bw = gpu.hbm_bytes_per_s
    f_attn = gpu.rate(mc.attn_rate)
    mf, cf = mc.kv_full_bytes / bw, full_pf / f_attn
    mw, cw = mc.kv_window_bytes / bw, win_pf / f_attn
    state2 = 2 * mc.state_bytes
    kv_full = mc.kv_full_bytes
    state_s = 2 * mc.state_bytes / bw
    base_cache: dict[int, list[float]] = {}
    if not mc.moe_layers and max_batched_tokens <= TABLE_TOKENS:
        # a dense model's terms are element-wise in the tokens: all step sizes at once (a huge
        # max_num_batched_tokens, 10^8, would build gigabytes: those sizes are computed as they come)
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

    computed = [0] * n  # requests waiting or being prefilled (stale for decoders, off + T, and finished ones)
    gen = [0] * n  # requests waiting or being prefilled (stale for decoders, off + T - P + 1, and finished ones)
    first = [-1] * n
    finish = [-1] * n
    arrival = [-1] * n
    ready = [0] * n  # the first step a waiting request may join while others run (timed.ASYNC_STEPS)
    off: list[int] = []  # by decoder key (a key per start of decoding: a preempted request comes back anew)
    dec: dict[int, int] = {}  # decoding: key -> request, in running order
    phases = [0] * B  # off % B -> decoders
    sum_off = 0
    # finish step << KEY_BITS | key (one int: faster to compare than a pair); stale entries: key no longer in dec
    heap: list[int] = []
    pref: list[int] = []  # requests being prefilled (or not yet sampled), in running order, after every decoder
    waiting: deque[int] = deque()
    heappop, heappush = heapq.heappop, heapq.heappush
    kb, km = KEY_BITS, KEY_MASK
    free = total
    T = 0  # steps so far (idle segments are not steps)
    # the segments, SEG values each, flat (their features are summed at the end, _cumulative): the step's tokens
    # (a stretch's decoders), its steps (0: idle), the memory and compute seconds of its decode tokens (KV and
    # state) and prefill chunks (an idle segment: its seconds, and 0)
    rows: list[float] = []
    now = 0.0  # Poisson arrivals: seconds so far (the segments' seconds under consts, summed as they end)
    seg = preemptions = peak = token_steps = 0
    next_req = done = sent = 0  # sent: requests finished since the loop's top, whose users send the next
    if closed:
        for _ in range(min(concurrency, n)):
            waiting.append(next_req)
            next_req += 1

    c_mem, c_flop = coef_np[0].item(), coef_np[1].item()
    step_s: dict[int, float] = {}  # Poisson arrivals: a step's base seconds under consts, by its tokens

    def base_s(tokens: int) -> float:
        got = step_s.get(tokens)
        if got is None:
            got = step_s[tokens] = float(np.asarray(base(tokens)) @ coef_np)
        return got

    while True:
        # the decoders whose last token was sampled in the steps before T leave; a closed loop's next request
        # arrives (scheduled from the step after next: ASYNC_STEPS)
        lim = T << kb
        if yg is not None:
            yg.age(T)
        while heap and heap[0] < lim:
            key = heappop(heap) & km
            r = dec.pop(key, -1)
            if r < 0:  # preempted since
                continue
            o = off[key]
            phases[o % B] -= 1
            sum_off -= o
            if yg is None:  # rb inlined (the hot path)
                free += fg * (-(-(o + T) // B)) + sb
            else:
                free += rb(o + T)
                yg.remove(o)
            finish[r] = seg
            done += 1
            sent += 1
        while sent and closed and next_req < n:  # each finished request's user sends the next one
            arrival[next_req] = seg
            ready[next_req] = T + ASYNC_STEPS
            waiting.append(next_req)
            next_req += 1
            sent -= 1
        sent = 0
        if done >= n:
            break
        if not closed:
            while next_req < n and arr[next_req] <= now:
                waiting.append(next_req)
                ready[next_req] = T + ASYNC_STEPS - 1  # it arrived during the last step
                next_req += 1
            if not dec and not pref and not waiting:
                rows += (0, 0, arr[next_req] - now, 0.0)  # idle until the next arrival (k 0: the seconds)
                seg += 1
                now = arr[next_req]
                continue
        cd = len(dec)
        c = cd + len(pref)
        # --- a stretch of decode-only steps
        if c and not pref:
            stretch, later = True, False  # a stretch unless the queue's head is admitted now
            if waiting:
                h = waiting[0]
                if ready[h] > T:  # not yet seen by the scheduler (async scheduling)
                    later = True
                elif c < max_num_seqs and max_batched_tokens > c:
                    first_chunk = P[h] + gen[h]
                    if first_chunk > max_batched_tokens - c:
                        first_chunk = max_batched_tokens - c
                    stretch = (fg * (-(-first_chunk // B)) + sb if yg is None else rb(first_chunk)) > free
            if stretch:
                while heap[0] & km not in dec:
                    heappop(heap)
                k = (heap[0] >> kb) - T + 1
                if later and ready[waiting[0]] - T < k:
                    k = ready[waiting[0]] - T
                if yg is not None and yg.bn:
                    k = _fit_young(k, c, T, free, B, fg, phases, yg)
                elif fg and c * fg * (-(-k // B)) > free:
                    k = _fit(k, c, T, free, B, fg, phases)
                if k >= 1:
                    S = sum_off + c * (T + 1)  # the decode tokens' contexts at the stretch's first step
                    if not closed and next_req < n:
                        k = _steps_before(arr[next_req] - now, k, base_s(c), S, c, c_mem * mf + c_flop * cf,
                                          c_mem * mw + c_flop * cw, yg if Wc else None)
                    if k >= 1:
                        full = float(S) * k + c * k * (k - 1) / 2
                        win = float(yg.window_context(c, k)) if yg is not None and Wc and (mw or cw) else 0.0
                        m = mf * full + mw * win + state_s * c * k
                        fl = cf * full + cw * win
                        if fg:
                            free -= _crossings(k, c, T, B, fg, phases) if k > 1 else fg * phases[-T % B]
                        if yg is not None and yg.bn:
                            free -= yg.window_blocks(k)
                        T += k
                        token_steps += k * c
                        rows += (c, k, m, fl)
                        seg += 1
                        if not closed:
                            now += k * base_s(c) + c_mem * m + c_flop * fl
                        continue
        # --- one step, as Scheduler.schedule(): the running requests first
        budget = max_batched_tokens
        takes: list[int] = []  # per request of pref
        preempted_now = False
        need = fg * phases[-T % B] if fg else 0
        if yg is not None:
            need += yg.at_boundary()
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
            n_pre = dec_sched = 0  # dec_sched: decoders scheduled (and not preempted since)
            # where a request may allocate: a decoder whose token starts a block (off + T a multiple of B), and
            # every request being prefilled; the decoders between take one token and no block, so they are
            # scheduled a run at a time (the same schedule as one by one: they never preempt)
            at = (-T) % B
            stops = [k for k, key in enumerate(dec) if off[key] % B == at] if not windowed else [
                k for k, key in enumerate(dec) if rb(off[key] + T + 1) != rb(off[key] + T)]
            stops += range(len(dec), len(order))
            si = 0
            i = 0
            while i < len(order) and budget > 0:
                while si < len(stops) and stops[si] < i:
                    si += 1
                j = stops[si] if si < len(stops) and stops[si] < len(order) else len(order)
                if j > i:  # decoders i .. j - 1: a token each, inside their last block
                    run = j - i if j - i < budget else budget
                    sched.update(dict.fromkeys(order[i:i + run], 1))
                    budget -= run
                    dec_sched += run
                    i += run
                    continue
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
                        rv = dec.pop(v)
                        o = off[v]
                        if yg is not None:
                            yg.remove(o)
                        phases[o % B] -= 1
                        sum_off -= o
                        comp_v = o + T
                        gen[rv] = comp_v - P[rv] + 1
                    else:
                        rv = -1 - v
                        comp_v = computed[rv]
                    tv = sched.pop(v, 0)
                    if v >= 0 and tv:
                        dec_sched -= 1
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
                dec_sched += item >= 0
                i += 1
            if dec_sched != len(dec):  # pragma: no cover - the budget covers every decoder
                raise AssertionError("a decoder left unscheduled")
            pref = [-1 - v for v in order if v < 0]
            takes = [sched.get(-1 - r, 0) for r in pref]
            preemptions += n_pre
            preempted_now = n_pre > 0
            cd = len(dec)
        # the running requests' chunks, then the waiting requests admitted (vLLM 0.33 admits while fewer than
        # max_num_seqs run, the budget lasts and the pool holds the first chunk), each in one pass: the step's
        # features (a chunk of one token that completes the known tokens is a decode token: its last prompt token,
        # or a 1-token prompt; every other adds prefill_chunk_seconds: causal_pairs(p0, q), mc.kv_read_bytes(p0),
        # the LM head once, inlined where there is no window, the function itself where there is; summed in px0 /
        # px1), then what the step did: a request samples when its
        # last known token is computed.  A request that finishes here frees its blocks (and, closed loop, sends
        # the next request) after the admissions: the scheduler saw the pool before the step ran.
        running_pref, npref = pref, len(pref)
        admit = bool(waiting) and not preempted_now
        running = cd + npref
        busy = running > 0  # an idle engine schedules what arrives at once
        tokens = nd = cd
        full_ctx = sum_off + cd * (T + 1)
        win_ctx = yg.window_context(cd, 1) if yg is not None and Wc and cd else 0
        px0 = px1 = 0.0
        n_prefill = freed = n_fin = 0
        seg += 1
        T1 = T + 1  # a decoder's computed tokens are off + T1 after this step
        pref = []
        i = 0
        while True:
            if i < npref:
                r, q = running_pref[i], takes[i]
                i += 1
                if not q:
                    pref.append(r)
                    continue
            else:
                if not (admit and waiting and running < max_num_seqs and budget > 0):
                    break
                r = waiting[0]
                if busy and ready[r] > T:  # arrived after this step was scheduled (async scheduling)
                    break
                want = P[r] + gen[r] - computed[r]
                q = want if want < budget else budget
                nb = fg * (-(-q // B)) + sb if yg is None else rb(q)
                if nb > free:
                    break
                waiting.popleft()
                free -= nb
                budget -= q
                running += 1
            tokens += q
            p0 = computed[r]
            comp = p0 + q
            g = gen[r]
            # it samples when its last known token is computed (computed and gen are kept only for requests
            # waiting or being prefilled)
            samples = comp == P[r] + g
            if samples and q == 1:  # a decode token: its last prompt token, or a 1-token prompt
                nd += 1
                full_ctx += comp
                if Wc:
                    win_ctx += comp if comp < Wc else Wc
            elif windowed:
                ms, cs = prefill_chunk_seconds(mc, p0, q, (full_pp, win_pp), f_attn, bw, lm_head_s=lm_s)
                px0 += ms
                px1 += cs
                n_prefill += 1
            else:
                px1 += full_pp * (q * p0 + q * (q + 1) // 2) / f_attn - (q - 1) * lm_s
                px0 += (kv_full * p0 + state2) / bw
                n_prefill += 1
            if samples:
                if first[r] < 0:
                    first[r] = seg
                if g + 1 >= OUT[r]:  # finished
                    freed += fg * (-(-comp // B)) + sb if yg is None else rb(comp)
                    finish[r] = seg
                    n_fin += 1
                    continue
                if pref:  # pragma: no cover - a request after one still prefilling got no budget
                    raise AssertionError("a decoder after a request being prefilled")
                # it decodes from the next step, g + 1 generated
                key = len(off)
                o = comp - T1
                off.append(o)
                dec[key] = r
                phases[o % B] += 1
                sum_off += o
                heappush(heap, (T1 + OUT[r] - g - 2) << kb | key)
                if yg is not None:
                    yg.add(o, T1)
                continue
            computed[r] = comp
            pref.append(r)
        T = T1
        free += freed
        done += n_fin
        sent = n_fin  # their users' next requests arrive at the loop's top, with the decoders' finishes
        if not tokens:
            raise InputError("--budget", f"{pool.blocks:,} blocks", "the pool cannot hold one request's first chunk")
        m, fl = px0, px1
        if nd:
            m += mf * full_ctx + mw * win_ctx + nd * state2 / bw
            fl += cf * full_ctx + cw * win_ctx
        token_steps += nd + n_prefill
        rows += (tokens, 1, m, fl)
        if not closed:
            now += base_s(tokens) + c_mem * m + c_flop * fl
        if running > peak:
            peak = running
        # a recomputed request with one token left and its first token out decodes
        while pref and first[pref[0]] >= 0 and P[pref[0]] + gen[pref[0]] - computed[pref[0]] == 1:
            r = pref.pop(0)
            key = len(off)
            o = computed[r] - T
            off.append(o)
            dec[key] = r
            phases[o % B] += 1
            sum_off += o
            heappush(heap, (T + OUT[r] - gen[r] - 1) << kb | key)
            if yg is not None:
                yg.add(o, T)
    cum = _cumulative(np.fromiter(rows, float, len(rows)).reshape(-1, SEG), table, base)
    return Schedule(cum, np.fromiter(first, np.int64, n), np.fromiter(finish, np.int64, n),
                    np.fromiter(arrival, np.int64, n), arrivals_s if arrivals_s is not None else np.zeros(n),
                    T, preemptions, peak, token_steps, closed)


SEG = 4
# a heap entry holds a decoder's key in its low bits (a key per start of decoding: one per request and per
# preemption, fewer than 2**32)
KEY_BITS = 32
KEY_MASK = (1 << KEY_BITS) - 1


def _crossings(k: int, c: int, T: int, B: int, fg: int, phases: list[int]) -> int:
    """Blocks ``c`` decoders (``phases``: how many at each ``off % B``) take in steps T .. T + k - 1: each one (per
    full group) every B steps, and in the last k % B steps those whose phase comes up."""
    rounds, part = divmod(k, B)
    add = c * rounds
    for j in range(T, T + part):
        add += phases[-j % B]
    return add * fg


def _fit(k_max: int, c: int, T: int, free: int, B: int, fg: int, phases: list[int]) -> int:
    """The most decode steps from step ``T`` (at most ``k_max``) before ``c`` decoders run out of ``free`` blocks."""
    if not fg or c * fg * (-(-k_max // B)) <= free:
        return k_max
    rounds, rem = divmod(free // fg, c)
    acc = 0
    for j in range(B):
        acc += phases[(-(T + rounds * B + j)) % B]
        if acc > rem:
            return min(k_max, rounds * B + j)
    raise AssertionError("unreachable: the phases hold every decoder")  # pragma: no cover


def _cumulative(segs: np.ndarray, table: np.ndarray | None, base: Any) -> np.ndarray:
    """The running sums of the features (row 0 zero) from :func:`simulate_events`' flat segments: a segment of
    ``k`` steps of ``tokens`` tokens is ``k`` times the step's base features (weights, linear FLOPs, overheads)
    plus the memory and compute seconds of its decode tokens and prefill chunks (summed in the loop)."""
    tokens = segs[:, 0].astype(np.intp)
    out = np.empty((len(segs) + 1, NFEAT))
    out[0] = 0.0
    x = out[1:]
    if table is not None:
        np.take(table, tokens, axis=0, out=x)
    else:  # MoE: each step size's base features once
        sizes, where = np.unique(tokens, return_inverse=True)
        x[:] = np.array([base(int(t)) for t in sizes], dtype=float).reshape(-1, NFEAT)[where]
    x *= segs[:, 1:2]  # an idle segment has k 0 (a step of 0 tokens has finite features)
    x[:, 0] += segs[:, 2]
    x[:, 1] += segs[:, 3]
    idle = segs[:, 1] == 0
    if idle.any():  # Poisson arrivals: its third number is seconds idle
        x[idle, 5] = segs[idle, 2]
        x[idle, 0] = 0.0
    return np.cumsum(out, axis=0, out=out)


def _fit_young(k_max: int, c: int, T: int, free: int, B: int, fg: int, phases: list[int], yg: _Young) -> int:
    """:func:`_fit` with the young decoders' window blocks besides every decoder's full blocks: the most steps (at
    most ``k_max``) whose blocks ``free`` holds (the blocks taken grow with the steps: a bisection)."""
    def need(k: int) -> int:
        return (_crossings(k, c, T, B, fg, phases) if fg else 0) + yg.window_blocks(k)

    return last_true(lambda k: need(k) <= free, k_max)


def _steps_before(gap: float, k: int, base_s: float, S: int, c: int, per_full: float, per_win: float,
                  yg: _Young | None) -> int:
    """Decode steps (at most ``k``) that start before ``gap`` seconds from now (the reference's
    ``timed._steps_before`` with the contexts' sum ``S`` and, with a window, the young decoders ``yg``)."""
    def elapsed(m: int) -> float:
        full = float(S) * m + c * m * (m - 1) / 2
        win = float(yg.window_context(c, m)) if yg is not None and per_win else 0.0
        return base_s * m + per_full * full + per_win * win

    return last_true(lambda m: elapsed(m) < gap, k - 1) + 1


class _Young:
    """The decoders of a sliding-window pool whose window blocks still grow or whose window context is below the
    window, held by their offset ``o`` (computed tokens ``o + T`` at step ``T``) in buckets, never one by one: at
    step ``T`` a decoder is context-young while ``o + T <= Wc - 2`` (it reads ``o + T + 1`` tokens of window
    context, an old one ``Wc``) and block-young while ``o + T <= Lw = (capw - 1) Bw`` (it takes a window block at
    the steps where ``(o + T) % Bw == 0``, an old one holds ``capw``).  As ``T`` grows the largest offsets age
    out, a bucket at a time (:meth:`age`); a stretch's sums are the young's arithmetic series less the steps after
    each bucket ages (:meth:`window_context`, :meth:`window_blocks`), so an event costs the buckets ageing within
    it, not the young decoders (a window of 4,096 tokens keeps most of a ShareGPT workload's decoders young)."""

    def __init__(self, Wc: int, wg: int, Bw: int, capw: int) -> None:
        self.Wc, self.wg, self.Bw = Wc, wg, Bw
        self.Lw = (capw - 1) * Bw if wg else -1
        self.cn = self.cs = 0  # context-young: count, sum of offsets
        self.cb: dict[int, int] = {}  # offset -> context-young decoders
        self.bn = 0  # block-young: count
        self.bb: dict[int, int] = {}  # offset -> block-young decoders
        self.wphases = [0] * Bw  # block-young decoders by o % Bw
        self.T = 0  # the step the buckets hold

    def add(self, o: int, T: int) -> None:
        """A decoder from step ``T`` (after :meth:`age` to ``T``, or in the step before it, whose ageing it
        survives: it is young at ``T``)."""
        if o + T <= self.Wc - 2:
            self.cn += 1
            self.cs += o
            self.cb[o] = self.cb.get(o, 0) + 1
        if o + T <= self.Lw:
            self.bn += 1
            self.bb[o] = self.bb.get(o, 0) + 1
            self.wphases[o % self.Bw] += 1

    def remove(self, o: int) -> None:
        """A decoder that finishes or is preempted at the step the buckets hold."""
        T = self.T
        if o + T <= self.Wc - 2:
            self.cn -= 1
            self.cs -= o
            if self.cb[o] == 1:
                del self.cb[o]
            else:
                self.cb[o] -= 1
        if o + T <= self.Lw:
            self.bn -= 1
            if self.bb[o] == 1:
                del self.bb[o]
            else:
                self.bb[o] -= 1
            self.wphases[o % self.Bw] -= 1

    def age(self, T: int) -> None:
        """Step ``T`` (not before the buckets' step): the offsets that are old by then leave."""
        t0 = self.T
        if T == t0:
            return
        self.T = T
        if self.cn:  # context: offsets above Wc - 2 - T, those up to Wc - 2 - t0 were young
            for o in _between(self.cb, self.Wc - 1 - T, self.Wc - 2 - t0):
                cnt = self.cb.pop(o)
                self.cn -= cnt
                self.cs -= cnt * o
        if self.bn:
            for o in _between(self.bb, self.Lw + 1 - T, self.Lw - t0):
                cnt = self.bb.pop(o)
                self.bn -= cnt
                self.wphases[o % self.Bw] -= cnt

    def window_context(self, c: int, k: int) -> int:
        """Window context ``c`` decoders read over steps ``T .. T + k - 1``: the sum over decoders and steps j of
        min(o + T + 1 + j, Wc) (the reference's ``timed._window_sum``); a bucket that ages at step T + j (j = Wc -
        1 - T - o) reads Wc from then: its series' excess, cnt (k - j)(k - j - 1) / 2, is taken off."""
        W, T, n = self.Wc, self.T, self.cn
        total = c * W * k + k * (self.cs + n * (T + 1 - W)) + n * k * (k - 1) // 2
        if n and k > 1:
            for o in _between(self.cb, W - T - k, W - 2 - T):
                j = W - 1 - T - o
                total -= self.cb[o] * (k - j) * (k - j - 1) // 2
        return total

    def window_blocks(self, k: int) -> int:
        """Window blocks the young take in steps ``T .. T + k - 1``: a block when ``(o + T + j) % Bw == 0`` while
        young; a bucket's last young step j = Lw - T - o takes one (Lw is a multiple of Bw), and the (k - 1 - j) //
        Bw the phases count after it are taken off."""
        if not self.bn:
            return 0
        Bw, T = self.Bw, self.T
        add = _crossings(k, self.bn, T, Bw, 1, self.wphases)  # as if none aged
        if k > 1:
            bb, Lw = self.bb, self.Lw
            for o in _between(bb, Lw - T - k + 2, Lw - T):
                add -= bb[o] * ((k - 1 - (Lw - T - o)) // Bw)
        return add * self.wg

    def at_boundary(self) -> int:
        """Window blocks the young take at step ``T``."""
        return self.wg * self.wphases[-self.T % self.Bw] if self.bn else 0


def _between(buckets: dict[int, int], lo: int, hi: int) -> list[int]:
    """The keys of ``buckets`` in ``lo .. hi`` with a count (looked up one by one or scanned, whichever is fewer)."""
    if hi < lo:
        return []
    if hi - lo + 1 <= len(buckets):
        return [o for o in range(lo, hi + 1) if buckets.get(o)]
    return [o for o, cnt in buckets.items() if lo <= o <= hi and cnt]

"""Prefill time a prefix cache saves, from the time model (``kvdash.core.steptime``).

Each request's prefill is timed alone on the engine (no other request in its steps: the no-load TTFT),
chunked as vLLM 0.33 chunks a long prompt (at most ``max_num_batched_tokens`` tokens a step,
``vllm/v1/core/sched/scheduler.py``), twice: with its cached prefix (the replay's hit tokens are not
computed; the chunk still reads their KV) and with no cache.  A step's cost is the simulator's
(``kvdash.simulate.timed``): the weights and linear FLOPs of its tokens, the causal query-key pairs of the
chunk after its prior tokens (full and sliding layers at their prefill dims), the prior tokens' KV read,
the per-step, per-layer and all-reduce constants.  vLLM computes at least one token of a fully cached
prompt (``max_cache_hit_length = num_tokens - 1``), so a hit never leaves less than one token to prefill.

What this leaves out: queueing behind other requests (the timed simulator's TTFT) and the transfer of
hits from a host or disk tier (reported per tier, apart from this).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvdash.core.steptime import (
    Constants,
    GPUPerf,
    ModelCompute,
    features,
    lm_head_seconds,
    prefill_chunk_seconds,
    step_seconds,
)
from kvdash.simulate.timed import _stats as _ms


class ChunkTimer:
    """Seconds of one prefill step of ``chunk`` tokens after ``prior`` tokens, memoised per step size."""

    def __init__(self, mc: ModelCompute, gpu: GPUPerf, consts: Constants) -> None:
        self.mc, self.gpu, self.consts = mc, gpu, consts
        self.pair_flops = mc.attn_pair_flops(prefill=True)
        self.f_attn = gpu.rate(mc.attn_rate)
        self.lm_s = lm_head_seconds(mc, gpu)
        self._base: dict[int, tuple[float, ...]] = {}

    def step(self, prior: int, chunk: int) -> float:
        base = self._base.get(chunk)
        if base is None:
            base = features(self.mc, self.gpu, chunk, 0.0, 0.0, 0.0)
            self._base[chunk] = base
        mem_s, cmp_s = prefill_chunk_seconds(self.mc, prior, chunk, self.pair_flops, self.f_attn,
                                             self.gpu.hbm_bytes_per_s, lm_head_s=self.lm_s)
        x = list(base)
        x[1] += cmp_s
        x[0] += mem_s
        return step_seconds(tuple(x), self.consts)

    def prefill(self, prior: int, tokens: int, max_batched: int) -> float:
        """Seconds to prefill ``tokens`` tokens after ``prior`` cached ones, ``max_batched`` a step."""
        s = 0.0
        done, left = prior, tokens
        while left > 0:
            n = min(left, max_batched)
            s += self.step(done, n)
            done += n
            left -= n
        return s


@dataclass(frozen=True)
class PrefillSaved:
    requests: int  # requests served (skipped ones left out)
    computed_tokens: int  # prompt tokens prefilled with the cache
    prompt_tokens: int
    with_cache_s: float  # sum of the requests' prefill seconds with their hits
    without_cache_s: float  # the same prompts with no cache
    load_s: float  # sum of the requests' tier loads (bytes / link bandwidth, before their prefill)
    ttft_with_ms: dict[str, float]  # no-load TTFT (tier loads, then the prefill alone), p50/p90/p99/mean
    ttft_without_ms: dict[str, float]  # the prefill alone, plus the constant time outside the steps
    saved_ms: dict[str, float]  # per request: without - with
    max_batched: int

    @property
    def saved_s(self) -> float:
        """Prefill compute seconds saved (tier loads not counted)."""
        return self.without_cache_s - self.with_cache_s

    @property
    def saved_share(self) -> float:
        return self.saved_s / self.without_cache_s if self.without_cache_s else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"requests": self.requests, "computed_tokens": self.computed_tokens,
                "prompt_tokens": self.prompt_tokens, "prefill_s_with_cache": round(self.with_cache_s, 6),
                "prefill_s_without_cache": round(self.without_cache_s, 6), "prefill_s_saved": round(self.saved_s, 6),
                "prefill_time_saved_share": round(self.saved_share, 6), "tier_load_s": round(self.load_s, 6),
                "ttft_no_load_ms_with_cache": self.ttft_with_ms,
                "ttft_no_load_ms_without_cache": self.ttft_without_ms, "ttft_no_load_ms_saved": self.saved_ms,
                "max_num_batched_tokens": self.max_batched,
                "basis": "each request's prefill alone (no queueing), chunked at max_num_batched_tokens, "
                         "timed by kvdash's fitted step model; TTFT with the cache adds the request's tier "
                         "loads before its prefill (not overlapped)"}


def prefill_saved(timer: ChunkTimer, prompts: Sequence[int], hits: Sequence[int], max_batched: int,
                  loads: Sequence[float] | None = None) -> PrefillSaved:
    """Prefill seconds of each served request with and without its hit tokens (``hits[i]`` -1: skipped);
    ``loads[i]``: seconds request ``i`` spends loading its hits from host or disk tiers."""
    if max_batched < 1:
        raise ValueError("max_batched must be positive")
    with_s: list[float] = []
    without_s: list[float] = []
    load: list[float] = []
    loads = loads if loads is not None else [0.0] * len(hits)
    computed = total = 0
    memo: dict[tuple[int, int], float] = {}

    def timed(prior: int, tokens: int) -> float:
        key = (prior, tokens)
        got = memo.get(key)
        if got is None:
            got = timer.prefill(prior, tokens, max_batched)
            memo[key] = got
        return got

    for p, h, ld in zip(prompts, hits, loads, strict=True):
        if h < 0:
            continue
        h = min(h, p - 1) if p > 0 else 0  # at least one token is computed
        with_s.append(timed(h, p - h))
        load.append(ld)
        without_s.append(timed(0, p))
        computed += p - h
        total += p
    a, b, ld_s = np.asarray(with_s), np.asarray(without_s), np.asarray(load)
    ttft = a + ld_s + timer.consts.c_request  # the time a request spends outside the steps before its first token
    return PrefillSaved(len(with_s), computed, total, float(a.sum()), float(b.sum()), float(ld_s.sum()), _ms(ttft),
                        _ms(b + timer.consts.c_request), _ms(b - a - ld_s), max_batched)

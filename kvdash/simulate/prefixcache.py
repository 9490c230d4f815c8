"""Prefix caching and tiered KV over a workload with structure: what is retained, hit, evicted, moved.

A request is a prompt made of *segments* (content ids, each with a length) and an output.  Segment ids are
prefix-closed: an id always follows the same tokens (Mooncake's remapped 512-token prefix-block hashes
are such ids; the generators here build them so).  A full block of ``G`` tokens ending inside segment
``s`` at offset ``o`` is therefore identified by ``(s, o)`` alone, the same identity vLLM's chained block
hash gives it (``hash(parent hash, block tokens)``, ``vllm/v1/core/kv_cache_utils.py``).

Rules mirrored (cited where they are used):

* **vLLM 0.33.0 automatic prefix caching** (``vllm/v1/core/block_pool.py``, ``kv_cache_manager.py``,
  ``single_type_kv_cache_manager.py``): only full blocks are hashed, prompt and generated tokens alike;
  a hit is the longest run of cached blocks from the start, at most ``prompt - 1`` tokens
  (``max_cache_hit_length = request.num_tokens - 1``); a hit block gains a reference and leaves the free
  queue; a finished request frees its blocks tail first (``free_blocks(reversed(blocks))``): hashed
  blocks join the end of the free queue, unhashed ones its front; a new block is taken from the front,
  evicting the cached block it held.
* **vLLM native offloading** (``vllm/v1/kv_offload/``): a CPU tier of chunks (``kvdash.core.tiers``),
  every full chunk a request computes is stored (prompt and output); a lookup continues after the GPU
  hit; LRU (``cpu/policies/lru.py``: a finished request's chunks become most recent, tails ranked before
  heads) or ARC (``cpu/policies/arc.py``); a filesystem tier behind it receives every chunk stored to the
  CPU tier (``tiering/manager.py``: "always offload to all tiers") and is read through the CPU tier;
  vLLM's filesystem tier evicts nothing, so a disk tier is unbounded unless a size is given (then LRU,
  kvdash's assumption).
* **LMCache 0.5.6** (``lmcache/v1/config.py``; its ``tools/cache_simulator``): 256-token chunks of the
  prompt only (``save_decode_cache`` False), partial tails never stored, every chunk written to every
  tier, a hit is the run of cached chunks from the start, LRU: hits refreshed and misses inserted in
  request order (heads before tails); a disk hit is copied back up to the CPU tier.

Time: requests are served in arrival order; ``concurrency`` requests are in flight and the oldest
finishes when the next is admitted (1: one at a time, as LMCache's simulator replays).  A request whose
blocks do not fit while others hold theirs waits for the oldest to finish; one larger than the GPU pool
is counted and skipped.  Transfers are instantaneous for the state (no pinning) and timed separately
over each tier's link.
"""

from __future__ import annotations

import json
import lzma
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import numpy as np

from kvdash import safeio
from kvdash.errors import InputError
from kvdash.simulate.prefix_dense import DenseGpuPool, DenseLru
from kvdash.simulate.prefix_tiers import ArcTier, LruTier, TierStats

SEG_SHIFT = 21  # a block key is segment << 21 | end offset: segments up to 2^21 - 1 tokens
MAX_SEG = (1 << SEG_SHIFT) - 1
MOONCAKE_BLOCK = 512
RULES = ("vllm", "lmcache")
CPU_POLICIES = ("lru", "arc")


# --- workloads ------------------------------------------------------------------------------------

@dataclass
class Workload:
    """Requests with structure, in arrival order."""

    name: str
    arrival: list[float]  # ms for traces; request index for generated workloads
    prompt: list[int]
    output: list[int]
    segs: list[np.ndarray]  # segment ids of each prompt, in order (int64)
    seg_ends: list[np.ndarray]  # cumulative end offsets of those segments (int64); last == prompt
    out_seg: list[int]  # id of each request's output segment (a later turn may reuse it)
    note: str = ""
    source: str = ""

    def __len__(self) -> int:
        return len(self.prompt)

    @property
    def prompt_tokens(self) -> int:
        return sum(self.prompt)

    def first(self, n: int) -> Workload:
        """The first ``n`` requests (``--requests``)."""
        return Workload(self.name, self.arrival[:n], self.prompt[:n], self.output[:n], self.segs[:n],
                        self.seg_ends[:n], self.out_seg[:n], self.note, self.source)


def _check_len(value: object, field_: str, where: str, key: str) -> int:
    """A length of the trace: a whole number of tokens up to kvdash's bound for every length (2^26; an
    output_length of 2^31 took 36 s and 10 GB before the request was skipped as larger than the pool)."""
    from kvdash.core.limits import MAX_TOKENS

    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENS:
        shown = value if isinstance(value, int | float | bool) or value is None else str(value)[:20]
        raise InputError(field_, f"{where}: {key} {json.dumps(shown)}",
                         f"expected a whole number of tokens from 0 to {MAX_TOKENS:,}")
    return value


def read_mooncake(path: str, limit: int | None = None, max_bytes: int = safeio.STREAM_CAP,
                  field_: str = "--hash-trace") -> Workload:
    """A Mooncake-format JSONL trace (``kvcache-ai/Mooncake``, ``FAST25-release/README.md``): one request
    a line, ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids`` (one id per 512-token
    prompt block, the last one possibly partial).  ``.xz`` files are decompressed."""
    arrival: list[float] = []
    prompt: list[int] = []
    output: list[int] = []
    segs: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    top = 0
    for number, line in _lines(path, max_bytes, field_):
        if limit is not None and len(prompt) >= limit:
            break
        if not line.strip():
            continue
        where = f"{path}:{number}"
        if number == 1:
            line = line.lstrip("\ufeff")  # a UTF-8 byte-order mark some editors write
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: a line nested too deeply
            raise InputError(field_, where, "each line must be one JSON object") from None
        keys = ("timestamp", "input_length", "output_length", "hash_ids")
        if not isinstance(rec, dict) or not set(keys) <= rec.keys():
            missing = [k for k in keys if k not in rec] if isinstance(rec, dict) else list(keys)
            raise InputError(field_, where, "expected timestamp, input_length, output_length and hash_ids; "
                                            f"missing: {', '.join(missing)}")
        p = _check_len(rec["input_length"], field_, where, "input_length")
        o = _check_len(rec["output_length"], field_, where, "output_length")
        ts = rec["timestamp"]
        ids = rec["hash_ids"]
        if isinstance(ts, bool) or not isinstance(ts, int | float) or not ts >= 0:
            raise InputError(field_, where, "timestamp must be a non-negative number of milliseconds")
        if not isinstance(ids, list):
            raise InputError(field_, f"{where}: hash_ids {str(ids)[:20]}", "expected a list of hash ids, one per "
                                                                          "512-token block of the prompt")
        if p < 1 or len(ids) != -(-p // MOONCAKE_BLOCK):
            raise InputError(field_, where, "expected input_length >= 1 and one hash id per 512-token block "
                                            "(ceil(input_length / 512) of them)")
        if not all(isinstance(h, int) and not isinstance(h, bool) and 0 <= h < 2**40 for h in ids):
            raise InputError(field_, where, "hash ids must be integers from 0 to 2^40 - 1")
        if prompt and ts < arrival[-1]:
            raise InputError(field_, where, "timestamps must not decrease")
        arrival.append(float(ts))
        prompt.append(p)
        output.append(o)
        seg = np.asarray(ids, dtype=np.int64)
        end = np.minimum(np.arange(1, len(ids) + 1, dtype=np.int64) * MOONCAKE_BLOCK, p)
        segs.append(seg)
        ends.append(end)
        top = max(top, int(seg.max()))
    if not prompt:
        raise InputError(field_, path, "the trace holds no request")
    base = top + 1  # output segments: unique ids above every hash id (no later request names them)
    return Workload(f"trace {path.rsplit('/', 1)[-1]}", arrival, prompt, output, segs, ends,
                    [base + i for i in range(len(prompt))], note="Mooncake-format trace, 512-token prefix hashes",
                    source=path)


def _lines(path: str, max_bytes: int, field_: str) -> Iterator[tuple[int, str]]:
    if path.endswith(".xz"):
        raw = safeio.read_bytes(path, field_, max_bytes, "--max-file-size")
        try:
            dec = lzma.LZMADecompressor()
            data = dec.decompress(raw, max_length=max_bytes * 16)
        except lzma.LZMAError as exc:
            raise InputError(field_, path, "not a valid .xz file") from exc
        if not dec.eof:
            raise InputError(field_, path, f"expected at most {max_bytes * 16:,} bytes once decompressed")
        text = safeio.decode(data, field_, path)
        yield from enumerate(text.splitlines(), start=1)
        return
    yield from safeio.iter_lines(path, field_, max_bytes, "--max-file-size")


def multi_turn(conversations: int, turns: int, system: int, user: int, output: int, seed: int = 0,
               interleave: bool = True) -> Workload:
    """``conversations`` chats of ``turns`` turns: turn ``t``'s prompt is the system prompt (shared by
    every chat), then each earlier turn's user message and reply, then its own user message; user
    messages and replies are lognormal (sigma 0.5) around the given means.  Chats are interleaved round
    robin (turn 1 of every chat, then turn 2 ...) when ``interleave``, else one after the other."""
    rng = np.random.default_rng(seed)
    next_id = 1  # 0: the system prompt
    order = [(c, t) for t in range(turns) for c in range(conversations)] if interleave else \
        [(c, t) for c in range(conversations) for t in range(turns)]
    hist_segs: list[list[int]] = [[0] if system else [] for _ in range(conversations)]
    hist_lens: list[list[int]] = [[system] if system else [] for _ in range(conversations)]
    w = Workload(f"multi-turn {conversations}x{turns}", [], [], [], [], [], [],
                 note=f"{conversations} chats of {turns} turns, system prompt {system}, user ~{user}, reply ~{output} "
                      "tokens (each turn's prompt extends the last)")
    mu_u, mu_o = np.log(max(user, 1)) - 0.125, np.log(max(output, 1)) - 0.125
    for k, (c, _t) in enumerate(order):
        u = int(min(max(1, round(rng.lognormal(mu_u, 0.5))), MAX_SEG))
        o = int(min(max(1, round(rng.lognormal(mu_o, 0.5))), MAX_SEG))
        hist_segs[c].append(next_id)
        hist_lens[c].append(u)
        next_id += 1
        w.arrival.append(float(k))
        w.prompt.append(sum(hist_lens[c]))
        w.output.append(o)
        w.segs.append(np.asarray(hist_segs[c], dtype=np.int64))
        w.seg_ends.append(np.cumsum(np.asarray(hist_lens[c], dtype=np.int64)))
        w.out_seg.append(next_id)
        hist_segs[c].append(next_id)  # the reply becomes part of the next turn's prompt
        hist_lens[c].append(o)
        next_id += 1
    return w


def system_prompts(requests: int, prompts: Sequence[int], shares: Sequence[float], user: int, output: int,
                   seed: int = 0) -> Workload:
    """``requests`` single-turn requests, each starting with one of ``len(prompts)`` system prompts
    (lengths ``prompts``) drawn with probabilities ``shares``, then a user message and an output,
    lognormal (sigma 0.5) around their means."""
    rng = np.random.default_rng(seed)
    p = np.asarray(shares, dtype=float)
    which = rng.choice(len(prompts), size=requests, p=p / p.sum())
    mu_u, mu_o = np.log(max(user, 1)) - 0.125, np.log(max(output, 1)) - 0.125
    us = np.clip(np.rint(rng.lognormal(mu_u, 0.5, size=requests)), 1, MAX_SEG).astype(np.int64)
    os_ = np.clip(np.rint(rng.lognormal(mu_o, 0.5, size=requests)), 1, MAX_SEG).astype(np.int64)
    n = len(prompts)
    w = Workload(f"system-prompts {n}", [], [], [], [], [], [],
                 note=f"{requests:,} requests over {n} system prompts ({', '.join(f'{x:,}' for x in prompts)} tokens; "
                      f"shares {', '.join(f'{s:g}' for s in shares)}), user ~{user}, output ~{output} tokens")
    for i in range(requests):
        s = int(which[i])
        u, o = int(us[i]), int(os_[i])
        w.arrival.append(float(i))
        w.prompt.append(prompts[s] + u)
        w.output.append(o)
        w.segs.append(np.asarray([s, n + 2 * i], dtype=np.int64))
        w.seg_ends.append(np.asarray([prompts[s], prompts[s] + u], dtype=np.int64))
        w.out_seg.append(n + 2 * i + 1)
    return w


def block_keys_flat(w: Workload, size: int, with_output: bool) -> tuple[np.ndarray, np.ndarray]:
    """The key of every full block of ``size`` tokens of each request, all requests in one array, and
    where each request's keys start (``offsets``, ``len(w) + 1`` of them): prompt blocks, then (when
    ``with_output``) the blocks that end in the output (generated tokens are cached too under vLLM's
    rules).  A block is identified by the segment holding its last token and that token's end offset in
    it; the pairs are numbered densely (``np.unique``: keys ``0 .. n - 1``, as small ints that Python's
    dicts spread without collisions and that index the dense tiers' arrays).  One pass over all requests:
    each segment's count of block ends names the segment of every block without a search."""
    n = len(w)
    prompt = np.asarray(w.prompt, dtype=np.int64)
    total = prompt + np.asarray(w.output, dtype=np.int64) if with_output else prompt
    per = total // size  # full blocks of each request
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(per, out=offsets[1:])
    if not n or not offsets[-1]:
        return np.zeros(0, dtype=np.int64), offsets
    req = np.repeat(np.arange(n, dtype=np.int64), per)
    end = (np.arange(offsets[-1], dtype=np.int64) - offsets[req] + 1) * size  # each block's end, in its request
    seg_count = np.fromiter((len(e) for e in w.seg_ends), dtype=np.int64, count=n)
    seg_end = np.concatenate(w.seg_ends)  # in its request's coordinates
    seg_start = np.concatenate(([0], seg_end[:-1]))
    first = np.zeros(n, dtype=np.int64)
    np.cumsum(seg_count[:-1], out=first[1:])
    seg_start[first] = 0
    segs = np.concatenate(w.segs)
    keys = np.empty(len(end), dtype=np.int64)
    inside = end <= prompt[req]
    # a block ending at e (its last token e - 1) lies in the segment with start < e <= end: a segment holds
    # end // size - start // size block ends, so repeating each segment that often, in order, names the
    # segment of every prompt block of every request in turn
    k = np.repeat(np.arange(len(seg_end), dtype=np.int64), seg_end // size - seg_start // size)
    keys[inside] = (segs[k] << SEG_SHIFT) | (end[inside] - seg_start[k])
    if with_output:
        out = ~inside
        r = req[out]
        out_seg = np.asarray(w.out_seg, dtype=np.int64)
        keys[out] = (out_seg[r] << SEG_SHIFT) | (end[out] - prompt[r])
    _, dense = np.unique(keys, return_inverse=True)
    return dense.astype(np.int64).reshape(-1), offsets


def block_keys(w: Workload, size: int, with_output: bool) -> list[list[int]]:
    """:func:`block_keys_flat` as one list of Python ints per request (the GPU pool's dict keys)."""
    return _keys(w, size, with_output, {})


# --- the replay -----------------------------------------------------------------------------------

@dataclass
class Replay:
    rules: str
    requests: int
    prompt_tokens: int
    hit_tokens: int
    hit_requests: int
    skipped: int  # requests larger than the GPU pool
    waits: int  # admissions that had to wait for an in-flight request to finish
    tiers: list[TierStats]
    concurrency: int
    request_hits: list[int] = field(default_factory=list)  # hit tokens of each request, in order; -1: skipped
    request_load_s: list[float] = field(default_factory=list)  # seconds loading its tier hits over the links

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def to_json(self, links: dict[str, Any] | None = None) -> dict[str, Any]:
        links = links or {}
        return {"rules": self.rules, "requests": self.requests, "prompt_tokens": self.prompt_tokens,
                "hit_tokens": self.hit_tokens, "hit_rate": self.hit_rate, "prefill_tokens_saved": self.hit_tokens,
                "hit_requests": self.hit_requests,
                "hit_requests_rate": self.hit_requests / self.requests if self.requests else 0.0,
                "evictions": sum(t.evictions for t in self.tiers), "skipped_too_large": self.skipped,
                "waits": self.waits, "concurrency": self.concurrency,
                "tiers": [t.to_json(self.prompt_tokens, self.requests, links.get(t.name)) for t in self.tiers]}


@dataclass(frozen=True)
class TierSpec:
    """What a replay runs: the rules, tier capacities in tokens (None: unbounded; 0: no such tier)."""

    rules: str = "vllm"
    block_size: int = 16
    gpu_tokens: int | None = 0  # vLLM rules: the GPU pool, in token slots
    cpu_tokens: int | None = 0
    disk_tokens: int | None = 0
    blocks_per_chunk: int = 1
    cpu_policy: str = "lru"
    chunk_tokens: int = 256  # LMCache rules
    bytes_per_token: int = 0  # all ranks: bytes moved per token
    cpu_link_bps: int = 0
    disk_link_bps: int = 0
    ranks: int = 1  # each rank moves its share over its own GPU link (bytes / ranks / bandwidth); a disk is shared
    concurrency: int = 1
    series_points: int = 100
    # vLLM rules: max_num_batched_tokens, the prompt tokens one prefill step computes (a request alone in its steps),
    # whose full chunks the CPU tier is offered together (0: the whole prompt in one offer)
    prefill_step_tokens: int = 0


KeyCache = dict[tuple[str, int, bool], Any]  # block keys by (form, block size, with outputs), kept across replays


def replay(w: Workload, spec: TierSpec, keys_cache: KeyCache | None = None) -> Replay:
    """Replay ``w`` under ``spec``; ``keys_cache`` keeps the block keys across calls (capacity sweeps)."""
    if spec.rules not in RULES:
        raise InputError("--rules", spec.rules, "expected vllm or lmcache")
    cache = keys_cache if keys_cache is not None else {}
    if spec.rules == "lmcache":
        return _replay_lmcache(w, spec, cache)
    return _replay_vllm(w, spec, cache)


def _flat(w: Workload, size: int, with_output: bool, cache: KeyCache) -> tuple[np.ndarray, np.ndarray]:
    k = ("flat", size, with_output)
    if k not in cache:
        cache[k] = block_keys_flat(w, size, with_output)
    return cache[k]  # type: ignore[no-any-return]


def _keys(w: Workload, size: int, with_output: bool, cache: KeyCache) -> list[list[int]]:
    k = ("lists", size, with_output)
    if k not in cache:
        flat, offsets = _flat(w, size, with_output, cache)
        ids, bounds = flat.tolist(), offsets.tolist()
        cache[k] = [ids[bounds[i]:bounds[i + 1]] for i in range(len(w))]
    return cache[k]  # type: ignore[no-any-return]


def _units(tokens: int | None, unit: int) -> int | None:
    return None if tokens is None else tokens // unit


def _sample_every(n: int, points: int) -> int:
    return max(1, -(-n // max(1, points)))


def _replay_lmcache(w: Workload, spec: TierSpec, cache: KeyCache) -> Replay:
    """LMCache's rules; with one tier and ``concurrency`` 1 this is LMCache's ``simulate(fast=True)``
    step for step (tests compare both on the same trace)."""
    c = spec.chunk_tokens
    keys = _keys(w, c, False, cache)
    tiers: list[TierStats] = []
    cpu_stats = TierStats("cpu", c, _units(spec.cpu_tokens, c), c * spec.bytes_per_token)
    cpu = LruTier(cpu_stats.capacity, cpu_stats)
    tiers.append(cpu_stats)
    disk: LruTier | None = None
    if spec.disk_tokens != 0:
        disk_stats = TierStats("disk", c, _units(spec.disk_tokens, c), c * spec.bytes_per_token)
        disk = LruTier(disk_stats.capacity, disk_stats)
        tiers.append(disk_stats)
    every = _sample_every(len(w), spec.series_points)
    hit_tokens = hit_requests = 0
    per_request: list[int] = []
    per_load: list[float] = []
    cpu_bps, disk_bps, ub = spec.cpu_link_bps * spec.ranks, spec.disk_link_bps, cpu_stats.unit_bytes
    d = cpu.d
    for i, ks in enumerate(keys):
        h = 0
        for k in ks:
            if k not in d:
                break
            h += 1
        hd = 0
        if disk is not None:
            dd = disk.d
            for k in ks[h:]:
                if k not in dd:
                    break
                hd += 1
        load_s = 0.0
        if h:
            cpu_stats.hit_tokens += h * c
            cpu_stats.hit_requests += 1
            cpu_stats.loaded_units += h
            if cpu_bps:
                cpu_stats.transfer_s.append(h * ub / cpu_bps)
                load_s += cpu_stats.transfer_s[-1]
        if hd:
            assert disk is not None
            disk.stats.hit_tokens += hd * c
            disk.stats.hit_requests += 1
            disk.stats.loaded_units += hd
            if disk_bps:
                disk.stats.transfer_s.append(hd * ub / disk_bps + (hd * ub / cpu_bps if cpu_bps else 0.0))
                load_s += disk.stats.transfer_s[-1]
        if h or hd:
            hit_requests += 1
        hit_tokens += (h + hd) * c
        per_request.append((h + hd) * c)
        per_load.append(load_s)
        # every chunk goes to every tier: hits refreshed, misses inserted, in request order
        if not h and not hd and (cpu.capacity is None or len(ks) <= (cpu.capacity or 0)) and d.keys().isdisjoint(ks):
            if cpu.capacity is not None:
                over = len(d) + len(ks) - cpu.capacity
                for _ in range(max(0, over)):
                    d.popitem(last=False)
                cpu_stats.evictions += max(0, over)
            d.update(zip(ks, repeat(None)))
            cpu_stats.stored_units += len(ks)
        else:
            for k in ks[:h]:
                d.move_to_end(k)
            cpu.store(ks[h:])
        if disk is not None:
            disk.store(ks)
        for t, tier in ((cpu_stats, cpu), *(((disk.stats, disk),) if disk is not None else ())):
            t.occupancy_peak = max(t.occupancy_peak, len(tier))  # after every request, not only the samples
            if i % every == 0:
                _sample(t, len(tier))
    return Replay("lmcache", len(w), w.prompt_tokens, hit_tokens, hit_requests, 0, 0, tiers, 1, per_request, per_load)


def _sample(t: TierStats, used: int) -> None:
    t.samples += 1
    t.occupancy_sum += used
    t.occupancy_peak = max(t.occupancy_peak, used)
    t.series.append(used)


def _replay_vllm(w: Workload, spec: TierSpec, cache: KeyCache) -> Replay:
    B = spec.block_size
    gflat, goffsets = _flat(w, B, True, cache)
    gbounds = goffsets.tolist()
    gpu_blocks = _units(spec.gpu_tokens, B)
    gstats = TierStats("gpu", B, gpu_blocks, B * spec.bytes_per_token)
    big = sum(w.prompt) + sum(w.output)
    pool = DenseGpuPool(gpu_blocks if gpu_blocks is not None else -(-big // B) + len(w) + 1,
                        int(gflat.max()) + 1 if len(gflat) else 0)
    tiers = [gstats]
    ct = B * spec.blocks_per_chunk
    arc = spec.cpu_policy == "arc"
    cpu: DenseLru | ArcTier | None = None
    disk: DenseLru | None = None
    cflat = np.zeros(0, dtype=np.int64)
    cbounds: list[int] = []
    ckeys: list[list[int]] = []  # ARC's keys, as Python ints
    if spec.cpu_tokens != 0:
        cstats = TierStats("cpu", ct, _units(spec.cpu_tokens, ct), ct * spec.bytes_per_token)
        cflat, coffsets = _flat(w, ct, True, cache)
        cbounds = coffsets.tolist()
        n_keys = int(cflat.max()) + 1 if len(cflat) else 0
        if arc:
            cpu = ArcTier(cstats.capacity, cstats)
            ckeys = _keys(w, ct, True, cache)
        else:
            cpu = DenseLru(cstats.capacity, cstats, n_keys)
        tiers.append(cstats)
        if spec.disk_tokens != 0:
            dstats = TierStats("disk", ct, _units(spec.disk_tokens, ct), ct * spec.bytes_per_token)
            disk = DenseLru(dstats.capacity, dstats, n_keys)
            tiers.append(dstats)
    bpc = spec.blocks_per_chunk
    Entry = tuple[np.ndarray, int, np.ndarray, list[int], set[int], set[int]]
    inflight: list[Entry] = []
    every = _sample_every(len(w), spec.series_points)
    hit_tokens = hit_requests = skipped = waits = 0
    per_request: list[int] = []
    per_load: list[float] = []
    cpu_bps, disk_bps = spec.cpu_link_bps * spec.ranks, spec.disk_link_bps
    no_set: set[int] = set()

    def finish(entry: Entry) -> None:
        held, plain, ca, cl, ins, reused = entry
        pool.release(held, plain)
        if isinstance(cpu, ArcTier):
            cpu.finish(cl, ins, reused)
        elif cpu is not None:
            cpu.finish(ca)
        if disk is not None:
            disk.finish(ca)

    for i in range(len(w)):
        ks = gflat[gbounds[i]:gbounds[i + 1]]
        p = w.prompt[i]
        nblocks = -(-(p + w.output[i]) // B)
        limit = (p - 1) // B  # max_cache_hit_length = num_tokens - 1
        h = pool.hit(ks, limit)
        # offload tiers continue the hit in whole chunks, up to the same limit
        hc = hd = 0
        ca = cflat[cbounds[i]:cbounds[i + 1]] if cpu is not None else cflat
        cl: list[int] = ckeys[i] if arc and cpu is not None else []
        start = -(-h // bpc)
        if cpu is not None:
            climit = limit // bpc
            if start < climit:
                if isinstance(cpu, ArcTier):
                    j = start
                    while j < climit and cl[j] in cpu:
                        j += 1
                    hc = j - start
                else:
                    hc = cpu.run(ca[start:climit])
                if disk is not None and start + hc < climit:
                    hd = disk.run(ca[start + hc:climit])
        hit_blocks = max(h, (start + hc + hd) * bpc) if (hc or hd) else h
        got = pool.admit(ks, h, nblocks)  # blocks loaded from a tier are new GPU blocks, hashed at once
        while got is None and inflight:
            finish(inflight.pop(0))
            waits += 1
            got = pool.admit(ks, h, nblocks)
        if got is None:
            skipped += 1
            per_request.append(-1)
            per_load.append(0.0)
            continue
        held, plain = got
        loaded = hit_blocks - h
        if h:
            gstats.hit_tokens += h * B
            gstats.hit_requests += 1
        reused: set[int] = no_set
        ins: set[int] = no_set
        load_s = 0.0
        if cpu is not None:
            if hc:
                cstats = tiers[1]
                cstats.hit_tokens += ((start + hc) * bpc - h) * B
                cstats.hit_requests += 1
                cstats.loaded_units += hc
                if cpu_bps:
                    cstats.transfer_s.append(hc * cstats.unit_bytes / cpu_bps)
                    load_s += cstats.transfer_s[-1]
                if isinstance(cpu, ArcTier):
                    hits = cl[start:start + hc]
                    cpu.touch(hits)
                    reused = set(hits)
                else:
                    cpu.touch(ca[start:start + hc])
            if hd and disk is not None:
                dstats = disk.stats
                dstats.hit_tokens += (loaded - ((start + hc) * bpc - h if hc else 0)) * B
                dstats.hit_requests += 1
                dstats.loaded_units += hd
                if disk_bps:
                    dstats.transfer_s.append(hd * dstats.unit_bytes / disk_bps
                                             + (hd * dstats.unit_bytes / cpu_bps if cpu_bps else 0.0))
                    load_s += dstats.transfer_s[-1]
                disk.touch(ca[start + hc:start + hc + hd])
                # promoted through the CPU tier
                if isinstance(cpu, ArcTier):
                    cpu.store(cl[start + hc:start + hc + hd], set(cl))
                else:
                    cpu.store(ca[start + hc:start + hc + hd], ca)
            # every full chunk computed is offered to the CPU tier, each offer stored whole or not at all, and
            # what the CPU tier stores is cascaded to the disk tier (_store_computed)
            stored = _store_computed(cpu, cl if isinstance(cpu, ArcTier) else ca, w.prompt[i], ct,
                                     spec.prefill_step_tokens, hit_blocks * B, start + hc + hd if hc or hd else 0)
            if isinstance(cpu, ArcTier):
                ins = set(stored)
            if disk is not None and len(stored):
                disk.store(np.asarray(stored, dtype=np.int64))
        if h or loaded:
            hit_requests += 1
        hit_tokens += hit_blocks * B
        per_request.append(hit_blocks * B)
        per_load.append(load_s)
        inflight.append((held, plain, ca, cl, ins, reused))
        if len(inflight) >= spec.concurrency:
            finish(inflight.pop(0))
        # the peak after every request (the sampled series missed it: 3,811 of 3,823 units stored, 0 evicted)
        gstats.occupancy_peak = max(gstats.occupancy_peak, pool.used())
        if cpu is not None:
            tiers[1].occupancy_peak = max(tiers[1].occupancy_peak, len(cpu))
            if disk is not None:
                disk.stats.occupancy_peak = max(disk.stats.occupancy_peak, len(disk))
        if i % every == 0:
            _sample(gstats, pool.used())
            if cpu is not None:
                _sample(tiers[1], len(cpu))
                if disk is not None:
                    _sample(disk.stats, len(disk))
    for entry in inflight:
        finish(entry)
    gstats.evictions = pool.evictions
    return Replay("vllm", len(w), w.prompt_tokens, hit_tokens, hit_requests, skipped, waits, tiers, spec.concurrency,
                  per_request, per_load)


def _store_computed(cpu: DenseLru | ArcTier, keys: Any, prompt: int, ct: int, step: int, cached: int = 0,
                    loaded_to: int = 0) -> Any:
    """Offer a request's full chunks (``keys``: those of its ``prompt`` tokens, then those ending in its output; ``ct``
    tokens a chunk) to the CPU tier as vLLM 0.33 does; returns the keys stored (the ones the disk tier receives).

    vLLM offers at each step the chunks computed so far and not yet stored (``_build_store_jobs``,
    offloading/scheduler.py): the prompt a prefill step (``step`` tokens, ``max_num_batched_tokens``, the request
    alone in its steps; 0: the whole prompt at once) from its ``cached`` tokens on, then each output chunk as it
    fills; the chunks before ``loaded_to`` were loaded from a tier and are not offered (``next_stored_chunk_idx``
    jumps past a load's chunks), a GPU-only hit's are.  An offer is all or
    nothing: ``CPUOffloadingManager.prepare_store`` (vllm/v1/kv_offload/cpu/manager.py) returns None when the
    chunks it must evict exceed the evictable ones, the offer's own keys being protected, so an offer fits iff its
    distinct keys are at most the tier's chunks; the connector then counts an ALLOCATION_FAILURE and does not
    advance the request's stored index, so every later offer holds the failed keys again and fails too (ARC still
    learns from each key's ghost: ``on_store_miss`` runs first).  Only the chunks the CPU tier stored reach the
    tiers behind it (``TieringOffloadingManager.complete_store``, tiering/manager.py).  Where the whole request
    fits, one offer of every chunk stores the same (its earlier offers' chunks are the most recent, so no later
    offer evicts them)."""
    def offer(ks: Any) -> Any:
        return cpu.store(ks, set(ks)) if isinstance(cpu, ArcTier) else cpu.store(ks, ks)

    cap = cpu.capacity
    arc = isinstance(cpu, ArcTier)
    if cap is None or len(keys) <= cap:
        return offer(keys)
    head = prompt // ct
    bounds = sorted({min(s + step, prompt) // ct for s in range(cached, prompt, step)} | {head} if step > 0
                    else {head})
    bounds += range(head + 1, len(keys) + 1)
    parts: list[Any] = []
    done = loaded_to
    for b in bounds:
        if b <= done:
            continue
        if len(set(keys[done:b]) if arc else np.unique(keys[done:b])) > cap:  # this offer and every later one fail
            cpu.stats.store_failures += 1
            if isinstance(cpu, ArcTier):  # each key observed once, in the offer that first holds it
                seen = done
                for later in (x for x in bounds if x > done):
                    cpu.on_store_miss(keys[seen:later])
                    seen = later
            break
        parts.append(offer(keys[done:b]))
        done = b
    if arc:
        return [k for part in parts for k in part]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


# --- specs ----------------------------------------------------------------------------------------

MAX_GENERATED = 2_000_000  # requests a generator may make


def parse_workload_spec(text: str, seed: int, field_: str = "--prefix-workload", context: int = 0) -> Workload:
    """``multi-turn:CHATS,TURNS,SYSTEM,USER,REPLY`` or ``system-prompts:N,SYSTEM,USER,OUTPUT[,REQUESTS]``
    (N system prompts of SYSTEM tokens each, equal shares; REQUESTS 2,000 by default) or
    ``system-prompts:N,SYSTEM,USER,OUTPUT,REQUESTS,S1/S2/...`` (shares, one per prompt)."""
    kind, _, args = str(text).partition(":")
    allowed = ("expected multi-turn:CHATS,TURNS,SYSTEM,USER,REPLY or system-prompts:N,SYSTEM,USER,OUTPUT[,REQUESTS"
               "[,SHARE/SHARE/...]] (token counts; SYSTEM may be 0 for multi-turn)")
    parts = [p.strip() for p in args.split(",")] if args else []
    try:
        if kind == "multi-turn" and len(parts) == 5:
            c, t, s, u, o = (int(x) for x in parts)
            if c >= 1 and t >= 1 and c * t <= MAX_GENERATED and 0 <= s <= MAX_SEG and 1 <= u <= MAX_SEG \
                    and 1 <= o <= MAX_SEG:
                last = s + (t - 1) * (u + o) + u + o  # the last turn's prompt and reply, at the means
                if context and last > context:  # each turn's prompt holds every earlier turn: refused before
                    # the quadratic generation (100,000 turns ran past two minutes)
                    raise InputError(field_, text, f"the last turn would reach about {last:,} tokens (SYSTEM + "
                                                   f"TURNS x (USER + REPLY)), past the model's context "
                                                   f"({context:,}): fewer turns or shorter messages")
                return multi_turn(c, t, s, u, o, seed)
        if kind == "system-prompts" and 4 <= len(parts) <= 6:
            n, s, u, o = (int(x) for x in parts[:4])
            r = int(parts[4]) if len(parts) > 4 else 2000
            shares = [float(x) for x in parts[5].split("/")] if len(parts) > 5 else [1.0] * n
            if 1 <= n <= 10_000 and 1 <= s <= MAX_SEG and 1 <= u <= MAX_SEG and 1 <= o <= MAX_SEG \
                    and 1 <= r <= MAX_GENERATED and len(shares) == n and all(x >= 0 and x < 1e9 for x in shares) \
                    and sum(shares) > 0:
                return system_prompts(r, [s] * n, shares, u, o, seed)
    except InputError:
        raise
    except ValueError as exc:
        raise InputError(field_, text, allowed) from exc
    raise InputError(field_, text, allowed)


_TOKEN_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}


def parse_tokens(text: str, field_: str) -> int | None:
    """A token count: ``3000000``, ``3M`` (10^6), ``500k``, ``1G``; ``inf``/``unbounded``: None."""
    t = str(text).strip().lower().replace("_", "").replace(",", "")
    if t in ("inf", "unbounded"):
        return None
    unit = t[-1:] if t[-1:] in _TOKEN_UNITS and t[-1:] else ""
    body = t[:-1] if unit else t
    try:
        value = float(body) * _TOKEN_UNITS[unit] if body else -1.0
    except ValueError:
        value = -1.0
    if not (1 <= value <= 2**50) or value != int(value):
        raise InputError(field_, text, "expected a whole number of tokens (3000000, 3M, 500k) or inf")
    return int(value)


def parse_capacities(text: str, field_: str = "--capacities") -> list[int | None]:
    """A comma list of token counts (``1M,3M,10M,50M,inf``), at most 40, increasing, inf last."""
    out = [parse_tokens(p, field_) for p in str(text).split(",") if p.strip()]
    finite = [x for x in out if x is not None]
    if not out or len(out) > 40 or finite != sorted(set(finite)) or (None in out and out[-1] is not None) \
            or out.count(None) > 1:
        raise InputError(field_, text, "expected 1 to 40 increasing token counts, inf (if any) last")
    return out

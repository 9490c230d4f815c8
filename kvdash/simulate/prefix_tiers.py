"""The tiers of a prefix-cache replay (:mod:`kvdash.simulate.prefixcache`) as ordered dicts: vLLM 0.33's GPU
block pool with prefix caching, an LRU chunk tier (vLLM's ``LRUCachePolicy`` or LMCache's ``LRUCacheFast``),
vLLM's ARC chunk tier, and the counters each tier reports.  LMCache's rules and the ARC tier run on these;
under vLLM's rules the GPU pool and the LRU tiers run on their numpy twins in
:mod:`kvdash.simulate.prefix_dense`, and :class:`GpuPool` and :class:`LruTier` are the readable reference
that ``tests/test_prefix_dense.py`` drives beside them, call by call."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any


@dataclass
class TierStats:
    name: str
    unit_tokens: int  # tokens per block or chunk
    capacity: int | None  # blocks or chunks; None: unbounded
    unit_bytes: int = 0
    hit_tokens: int = 0
    hit_requests: int = 0
    stored_units: int = 0
    loaded_units: int = 0
    evictions: int = 0
    store_failures: int = 0  # vLLM's CPU tier: requests whose chunks it could not store (all or nothing)
    occupancy_sum: float = 0.0
    occupancy_peak: int = 0
    samples: int = 0
    transfer_s: list[float] = field(default_factory=list)
    series: list[int] = field(default_factory=list)

    def to_json(self, total_tokens: int, requests: int, link: Any = None) -> dict[str, Any]:
        t = sorted(self.transfer_s)
        out: dict[str, Any] = {
            "tier": self.name, "unit_tokens": self.unit_tokens, "capacity_units": self.capacity,
            "capacity_tokens": None if self.capacity is None else self.capacity * self.unit_tokens,
            "unit_bytes": self.unit_bytes, "hit_tokens": self.hit_tokens,
            "hit_rate": self.hit_tokens / total_tokens if total_tokens else 0.0,
            "hit_requests": self.hit_requests, "hit_requests_rate": self.hit_requests / requests if requests else 0.0,
            "bytes_loaded": self.loaded_units * self.unit_bytes, "bytes_stored": self.stored_units * self.unit_bytes,
            "units_loaded": self.loaded_units, "units_stored": self.stored_units, "evictions": self.evictions,
            "store_failures": self.store_failures,
            "occupancy_mean": self.occupancy_sum / self.samples if self.samples else 0.0,
            "occupancy_peak": self.occupancy_peak, "occupancy_series": self.series,
            "transfer_p50_s": _pct(t, 50), "transfer_p99_s": _pct(t, 99), "transfers": len(t)}
        if link is not None:
            out["link"] = {"name": link.name, "bytes_per_s": link.bytes_per_s, "source": link.source}
        return out


def _pct(values: list[float], q: int) -> float | None:
    """Nearest-rank percentile (the smallest value with at least q % of the values at or below it)."""
    if not values:
        return None
    rank = max(1, -(-q * len(values) // 100))
    return values[rank - 1]


class GpuPool:
    """vLLM's BlockPool with prefix caching (``vllm/v1/core/block_pool.py``), counted by key: the readable
    reference for the replay's :class:`~kvdash.simulate.prefix_dense.DenseGpuPool` (a test drives both).

    ``ref`` holds the hashed blocks that running requests hold, with their reference counts; ``free``
    the hashed blocks none holds, in free-queue order (the front is evicted first); the two are
    disjoint and together are the prefix cache.  Blocks without a hash (partial tails, duplicates) are
    only counted: freed, they go to the front of vLLM's free queue, so they are always reused before any
    cached block and need no order."""

    def __init__(self, blocks: int) -> None:
        self.total = blocks - 1  # block 0 is vLLM's null block (``BlockPool.__init__``: never handed out)
        self.ref: dict[int, int] = {}
        self.free: OrderedDict[int, None] = OrderedDict()
        self.plain = 0  # unhashed blocks held by requests
        self.evictions = 0
        self.shadow = 0  # shadow keys (second copies) count down from -1; block keys are never negative

    def free_blocks(self) -> int:
        return self.total - len(self.ref) - self.plain

    def used(self) -> int:
        """Blocks holding content: held by requests, or retained in the prefix cache."""
        return len(self.ref) + len(self.free) + self.plain

    def hit(self, keys: list[int], limit: int) -> int:
        h = 0
        ref, free = self.ref, self.free
        for k in keys:
            if h >= limit or (k not in free and k not in ref):
                break
            h += 1
        return h

    def admit(self, keys: list[int], hits: int, blocks: int) -> tuple[list[int], int] | None:
        """Take the request's ``blocks`` blocks: its first ``hits`` keys are cached; the rest of its
        keys are new full blocks.  Returns (hashed keys it holds, unhashed blocks) or None when they
        do not fit (nothing changed)."""
        ref, free = self.ref, self.free
        hit_keys = keys[:hits]
        held_free = sum(1 for k in hit_keys if k in free)
        need = blocks - hits
        if need > self.free_blocks() - held_free:
            return None
        for k in hit_keys:  # touch(): one more reference, out of the free queue
            if k in free:
                del free[k]
                ref[k] = 1
            else:
                ref[k] += 1
        plain_free = self.total - len(ref) - len(free) - self.plain
        take = need - min(need, plain_free)  # the rest comes from the front of the free queue: evictions
        pop = free.popitem
        for _ in range(take):
            pop(last=False)
        self.evictions += take
        new = keys[hits:]
        if ref.keys().isdisjoint(new) and free.keys().isdisjoint(new) and len(set(new)) == len(new):
            ref.update(zip(new, repeat(1)))
            held = keys
        else:
            # a block whose content is cached already (past the hit limit, or after a gap) is cached a
            # second time by vLLM (``_insert_block_hash``: the map holds both; lookups return the first):
            # a shadow key, never hit, that takes its place in the free queue like any cached block
            held = list(hit_keys)
            for k in new:
                if k in ref or k in free:
                    self.shadow -= 1
                    k = self.shadow
                ref[k] = 1
                held.append(k)
        plain = blocks - len(held)
        self.plain += plain
        return held, plain

    def release(self, held: list[int], plain: int) -> None:
        """``free_blocks(reversed(blocks))``: the tail's hashed blocks reach the free queue first."""
        ref, free = self.ref, self.free
        for k in reversed(held):
            c = ref[k] - 1
            if c == 0:
                del ref[k]
                free[k] = None
            else:
                ref[k] = c
        self.plain -= plain


class LruTier:
    """A chunk tier with LRU eviction.  ``tails_first``: a finished request's chunks become the most
    recent with its tail ranked before its head (vLLM's ``LRUCachePolicy``); otherwise hits are
    refreshed and misses inserted in request order (LMCache's ``LRUCacheFast``)."""

    def __init__(self, capacity: int | None, stats: TierStats) -> None:
        self.capacity = capacity
        self.d: OrderedDict[int, None] = OrderedDict()
        self.stats = stats

    def __contains__(self, key: int) -> bool:
        return key in self.d

    def __len__(self) -> int:
        return len(self.d)

    def store(self, keys: list[int], protected: set[int] | frozenset[int] = frozenset()) -> list[int]:
        """Insert the keys not present (refresh the present ones), evicting LRU; returns the inserted keys."""
        d, cap = self.d, self.capacity
        inserted = []
        for k in keys:
            if k in d:
                d.move_to_end(k)
                continue
            if cap is not None and len(d) >= cap:
                if not self._evict_one(protected):
                    break  # every resident chunk is protected: the store is dropped
            d[k] = None
            inserted.append(k)
        self.stats.stored_units += len(inserted)
        return inserted

    def _evict_one(self, protected: set[int] | frozenset[int]) -> bool:
        d = self.d
        if not protected:
            d.popitem(last=False)
            self.stats.evictions += 1
            return True
        for k in d:
            if k not in protected:
                del d[k]
                self.stats.evictions += 1
                return True
        return False

    def finish(self, keys: list[int]) -> None:
        d = self.d
        for k in reversed(keys):
            if k in d:
                d.move_to_end(k)

    def touch(self, keys: list[int]) -> None:
        d = self.d
        for k in keys:
            d.move_to_end(k)


class ArcTier:
    """vLLM's ``ARCCachePolicy`` (``vllm/v1/kv_offload/cpu/policies/arc.py``) over keys: T1 (seen once),
    T2 (reused), ghosts B1/B2 of what each evicted, an adaptive target for T1."""

    def __init__(self, capacity: int | None, stats: TierStats) -> None:
        self.capacity = capacity
        self.t1: OrderedDict[int, None] = OrderedDict()
        self.t2: OrderedDict[int, None] = OrderedDict()
        self.b1: OrderedDict[int, None] = OrderedDict()
        self.b2: OrderedDict[int, None] = OrderedDict()
        self.target = 0.0
        self.stats = stats

    def __contains__(self, key: int) -> bool:
        return key in self.t1 or key in self.t2

    def __len__(self) -> int:
        return len(self.t1) + len(self.t2)

    def _ghost(self, key: int) -> None:
        cap = self.capacity or 0
        if key in self.b1:
            self.target = min(self.target + max(1, len(self.b2) / len(self.b1)), cap)
            self.b1.move_to_end(key)
        elif key in self.b2:
            self.target = max(self.target - max(1, len(self.b1) / len(self.b2)), 0)
            self.b2.move_to_end(key)

    def touch(self, keys: list[int]) -> None:
        for k in reversed(keys):
            if k in self.t1:
                del self.t1[k]
                self.t2[k] = None
            elif k in self.t2:
                self.t2.move_to_end(k)
            else:
                self._ghost(k)

    def _evict_one(self, protected: set[int] | frozenset[int]) -> bool:
        def first(d: OrderedDict[int, None]) -> int | None:
            for k in d:
                if k not in protected:
                    return k
            return None

        k = first(self.t1) if len(self.t1) >= int(self.target) else None
        src, ghost = (self.t1, self.b1) if k is not None else (self.t2, self.b2)
        if k is None:
            k = first(self.t2)
            if k is None:
                k = first(self.t1)
                src, ghost = self.t1, self.b1
        if k is None:
            return False
        del src[k]
        ghost[k] = None
        cap = self.capacity or 0
        for g in (self.b1, self.b2):
            while len(g) > cap:
                g.popitem(last=False)
        self.stats.evictions += 1
        return True

    def on_store_miss(self, keys: list[int]) -> list[int]:
        """The offered keys not held, whose ghost hits adapt the target (``on_store_miss``, which vLLM's
        ``prepare_store`` calls before it knows whether the store fits): returned in order."""
        misses = [k for k in keys if k not in self]
        for k in reversed(misses):
            self._ghost(k)
        return misses

    def store(self, keys: list[int], protected: set[int] | frozenset[int] = frozenset()) -> list[int]:
        misses = self.on_store_miss(keys)
        inserted = []
        for k in misses:
            if self.capacity is not None and len(self) >= self.capacity and not self._evict_one(protected):
                break
            self.t1[k] = None
            self.b1.pop(k, None)
            self.b2.pop(k, None)
            inserted.append(k)
        self.stats.stored_units += len(inserted)
        return inserted

    def finish(self, keys: list[int], inserted: set[int] | None = None, reused: set[int] | None = None) -> None:
        inserted = inserted or set()
        reused = reused or set()
        for k in reversed(keys):
            if k in inserted:
                if k in self.t1:
                    self.t1.move_to_end(k)
                elif k in self.t2:
                    self.t2.move_to_end(k)
            elif k in reused and k in self.t1:
                del self.t1[k]
                self.t2[k] = None
            elif k in reused and k in self.t2:
                self.t2.move_to_end(k)


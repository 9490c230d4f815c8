"""The prefix-cache replay's tiers over dense block keys, in numpy: the same decisions as the ordered-dict
tiers of :mod:`kvdash.simulate.prefix_tiers` (which stay as the readable reference, and a test replays
random workloads through both), a request's keys handled as one array instead of one key at a time.

Block keys are ``0 .. n - 1`` (:func:`kvdash.simulate.prefixcache.block_keys_flat`).  An order (a free
queue, a recency list) is an append-only log of keys: a key's live entry is the one at ``pos[key]`` (its
last append), earlier entries are stale, ``pos[key] == -1`` means the key is not in the order; ``head``
is where the oldest live entry may be.  Taking the oldest entries scans from ``head``; when the log
fills it is compacted to its live entries.
"""

from __future__ import annotations

import numpy as np

from kvdash.simulate.prefix_tiers import TierStats

I64 = np.int64


def _distinct(scratch: np.ndarray, keys: np.ndarray) -> bool:
    """Whether no key repeats in ``keys``: each writes its index into ``scratch`` and reads it back (a
    repeated key reads a later index)."""
    at = np.arange(len(keys), dtype=I64)
    scratch[keys] = at
    return bool((scratch[keys] == at).all())


class _Order:
    """An insertion order over keys, oldest first: ``append`` makes keys the newest, ``oldest`` finds the
    oldest (skipping marked keys), ``drop`` removes keys."""

    def __init__(self, n: int, room: int) -> None:
        self.pos = np.full(n, -1, dtype=I64)
        self.log = np.empty(max(1 << 16, room), dtype=I64)
        self.head = self.tail = 0

    def grow(self, n: int) -> None:
        """Room for keys up to ``n - 1``."""
        if n > len(self.pos):
            self.pos = np.concatenate((self.pos, np.full(n - len(self.pos), -1, dtype=I64)))

    def append(self, keys: np.ndarray) -> None:
        """Make ``keys`` the newest, in order (a repeated key ranks at its last place, as a second
        ``move_to_end`` leaves it)."""
        n = len(keys)
        if not n:
            return
        if self.tail + n > len(self.log):
            self._compact(n)
        at = np.arange(self.tail, self.tail + n, dtype=I64)
        self.log[self.tail:self.tail + n] = keys
        pos = self.pos
        pos[keys] = at
        if n > 1 and not (pos[keys] == at).all():
            for i, k in enumerate(keys.tolist()):
                pos[k] = self.tail + i
        self.tail += n

    def live(self) -> np.ndarray:
        """The keys in the order, oldest first."""
        span = self.log[self.head:self.tail]
        return span[self.pos[span] == np.arange(self.head, self.tail, dtype=I64)]

    def _compact(self, incoming: int) -> None:
        live = self.live()
        m = len(live)
        if m + incoming > len(self.log) // 2:
            self.log = np.empty(2 * (m + incoming), dtype=I64)
        self.log[:m] = live
        self.pos[live] = np.arange(m, dtype=I64)
        self.head, self.tail = 0, m

    def oldest(self, count: int, skip: np.ndarray | None = None) -> tuple[np.ndarray, int] | None:
        """The ``count`` oldest keys (not ``skip``-marked ones) and the log index of the last of them, or
        None when there are fewer.  Nothing changes: :meth:`take` removes them."""
        log, pos = self.log, self.pos
        found: list[np.ndarray] = []
        need, i, last = count, self.head, self.head
        while need > 0 and i < self.tail:
            j = min(self.tail, i + max(2 * need, 4096))
            seg = log[i:j]
            ok = pos[seg] == np.arange(i, j, dtype=I64)
            if skip is not None:
                ok &= ~skip[seg]
            idx = np.flatnonzero(ok)[:need]
            if len(idx):
                found.append(seg[idx])
                need -= len(idx)
                last = i + int(idx[-1])
            i = j
        if need > 0:
            return None
        return (np.concatenate(found) if len(found) > 1 else found[0]), last

    def take(self, keys: np.ndarray, last: int) -> None:
        """Remove the keys :meth:`oldest` found (``last``: its second answer)."""
        pos, log = self.pos, self.log
        pos[keys] = -1
        live = np.flatnonzero(pos[log[self.head:last + 1]] == np.arange(self.head, last + 1, dtype=I64))
        self.head = self.head + int(live[0]) if len(live) else last + 1


class DenseLru:
    """:class:`~kvdash.simulate.prefix_tiers.LruTier` with vLLM's order (``LRUCachePolicy``,
    ``vllm/v1/kv_offload/cpu/policies/lru.py``: a finished request's chunks become the most recent, its
    tail ranked before its head): the same hits, the same evictions in the same order.  An unbounded tier
    keeps no order (it never evicts)."""

    def __init__(self, capacity: int | None, stats: TierStats, n: int) -> None:
        self.capacity = capacity
        self.stats = stats
        self.size = 0
        self.order = _Order(n if capacity is not None else 0, 4 * (capacity or 0))
        self.present = np.zeros(n, dtype=bool) if capacity is None else None
        self.mark = np.zeros(n if capacity is not None else 0, dtype=bool)  # a store's protected keys
        self.scratch = np.zeros(n, dtype=I64)  # finds a key repeated within one call

    def __len__(self) -> int:
        return self.size

    def _has(self, keys: np.ndarray) -> np.ndarray:
        return self.present[keys] if self.present is not None else self.order.pos[keys] >= 0

    def __contains__(self, key: int) -> bool:
        return bool(self._has(np.asarray([key], dtype=I64))[0])

    def run(self, keys: np.ndarray) -> int:
        """How many of ``keys``, from the first, are present."""
        has = self._has(keys)
        return len(keys) if has.all() else int(has.argmin())

    def _distinct(self, keys: np.ndarray) -> bool:
        return _distinct(self.scratch, keys)

    def _append(self, keys: np.ndarray) -> None:
        if self.present is not None:
            self.present[keys] = True
        else:
            self.order.append(keys)

    def _evict(self, found: tuple[np.ndarray, int]) -> None:
        self.order.take(*found)
        self.size -= len(found[0])
        self.stats.evictions += len(found[0])

    def store(self, keys: np.ndarray, protected: np.ndarray | None = None) -> np.ndarray:
        """:meth:`LruTier.store`: insert the keys not present and refresh the present ones, in order,
        evicting the oldest; with ``protected`` (which holds ``keys``), protected keys are never evicted and
        the store stops when only they remain.  Returns the inserted keys.

        In one step: the victims are the oldest unprotected keys, as many as the tier overflows by.  With
        ``protected``, refreshed and inserted keys are protected, so taking the victims first and then
        appending ``keys`` is the ordered dict's interleaved loop.  Without it, the same holds unless a
        victim is one of ``keys`` (the loop would evict it before its turn and insert it again) or the
        store overflows by more than the tier holds (it evicts what it inserted): those cases, a repeated
        key and a store cut short run :meth:`_one_by_one`, the loop itself."""
        if not self._distinct(keys):
            return self._one_by_one(keys, protected)
        cap = self.capacity
        miss = keys[~self._has(keys)]
        over = self.size + len(miss) - cap if cap is not None else 0
        if over > 0:
            mark = self.mark
            if protected is not None:
                mark[protected] = True
                prot = protected if self._distinct(protected) else np.unique(protected)
                free = self.size - int(np.count_nonzero(self.order.pos[prot] >= 0))
                found = self.order.oldest(over, mark) if over <= free else None
                mark[protected] = False
                if found is None:
                    return self._one_by_one(keys, protected)
            else:
                found = self.order.oldest(over) if over <= self.size else None
                if found is None:  # the store evicts keys it inserted itself
                    return self._one_by_one(keys, None)
                mark[found[0]] = True
                clash = bool(mark[keys].any())
                mark[found[0]] = False
                if clash:
                    return self._one_by_one(keys, None)
            self._evict(found)
        self._append(keys)
        self.size += len(miss)
        self.stats.stored_units += len(miss)
        return miss

    def _one_by_one(self, keys: np.ndarray, protected: np.ndarray | None) -> np.ndarray:
        cap = self.capacity
        inserted: list[int] = []
        protect = protected is not None and cap is not None
        if protect:
            self.mark[protected] = True
        try:
            for k in keys.tolist():
                one = np.asarray([k], dtype=I64)
                if self._has(one)[0]:
                    self._append(one)
                    continue
                if cap is not None and self.size >= cap:
                    found = self.order.oldest(1, self.mark if protect else None)
                    if found is None:
                        break  # every resident chunk is protected: the store is dropped
                    self._evict(found)
                self._append(one)
                self.size += 1
                inserted.append(k)
        finally:
            if protect:
                self.mark[protected] = False
        self.stats.stored_units += len(inserted)
        return np.asarray(inserted, dtype=I64)

    def finish(self, keys: np.ndarray) -> None:
        """:meth:`LruTier.finish`: the present keys become the most recent, the last key first."""
        if self.capacity is not None:
            rev = keys[::-1]
            self.order.append(rev[self.order.pos[rev] >= 0])

    def touch(self, keys: np.ndarray) -> None:
        """:meth:`LruTier.touch`: hits (all present) become the most recent, in order."""
        if self.capacity is not None:
            self.order.append(keys)


class DenseGpuPool:
    """:class:`~kvdash.simulate.prefix_tiers.GpuPool` (vLLM 0.33's ``BlockPool`` with prefix caching,
    ``vllm/v1/core/block_pool.py``) over dense keys: ``ref`` counts each hashed block's holders, the free
    queue of cached blocks none holds is an :class:`_Order`; the same hits, evictions and held blocks.
    A second copy of cached content (vLLM's ``_insert_block_hash`` keeps both) gets a shadow key from
    ``n`` up, never hit."""

    def __init__(self, blocks: int, n: int) -> None:
        self.total = blocks - 1  # block 0 is vLLM's null block (``BlockPool.__init__``: never handed out)
        self.ref = np.zeros(n, dtype=I64)
        self.free = _Order(n, min(2 * blocks, 1 << 22))
        self.n_ref = 0  # keys with a holder
        self.n_free = 0  # cached keys none holds
        self.plain = 0  # unhashed blocks held by requests
        self.evictions = 0
        self.next_shadow = n
        self.scratch = np.zeros(n, dtype=I64)

    def free_blocks(self) -> int:
        return self.total - self.n_ref - self.plain

    def used(self) -> int:
        """Blocks holding content: held by requests, or retained in the prefix cache."""
        return self.n_ref + self.n_free + self.plain

    def _cached(self, keys: np.ndarray) -> np.ndarray:
        return (self.ref[keys] > 0) | (self.free.pos[keys] >= 0)

    def hit(self, keys: np.ndarray, limit: int) -> int:
        c = self._cached(keys[:max(0, limit)])
        return len(c) if c.all() else int(c.argmin())

    def _distinct(self, keys: np.ndarray) -> bool:
        return _distinct(self.scratch, keys)

    def admit(self, keys: np.ndarray, hits: int, blocks: int) -> tuple[np.ndarray, int] | None:
        """:meth:`GpuPool.admit`: the request's first ``hits`` keys are cached, the rest are new full
        blocks; returns (hashed keys it holds, unhashed blocks) or None when they do not fit."""
        ref, free = self.ref, self.free
        if not self._distinct(keys):
            return self._admit_one_by_one(keys, hits, blocks)
        hit_keys = keys[:hits]
        in_free = free.pos[hit_keys] >= 0
        held_free = int(np.count_nonzero(in_free))
        need = blocks - hits
        if need > self.free_blocks() - held_free:
            return None
        # touch(): one more reference, out of the free queue
        if held_free:
            leaving = hit_keys[in_free]
            free.pos[leaving] = -1
            self.n_free -= held_free
            self.n_ref += held_free
        ref[hit_keys] += 1
        self._evict(need)
        new = keys[hits:]
        if not self._cached(new).any():
            ref[new] = 1
            self.n_ref += len(new)
            held = keys
        else:
            held = np.concatenate((hit_keys, self._shadowed(new, True)))
        plain = blocks - len(held)
        self.plain += plain
        return held, plain

    def _evict(self, need: int) -> None:
        plain_free = self.total - self.n_ref - self.n_free - self.plain
        take = need - min(need, plain_free)  # the rest comes from the front of the free queue: evictions
        if take > 0:
            found = self.free.oldest(take)
            assert found is not None  # admit checked that the free queue holds them
            self.free.take(*found)
            self.n_free -= take
            self.evictions += take

    def _room(self, top: int) -> None:
        """Arrays for keys up to ``top - 1`` (shadow keys come after the block keys)."""
        if top > len(self.ref):
            grown = max(top, len(self.ref) + max(4096, len(self.ref) // 8))
            self.ref = np.concatenate((self.ref, np.zeros(grown - len(self.ref), dtype=I64)))
            self.scratch = np.concatenate((self.scratch, np.zeros(grown - len(self.scratch), dtype=I64)))
            self.free.grow(grown)

    def _shadowed(self, new: np.ndarray, distinct: bool) -> np.ndarray:
        """The new blocks' keys, a shadow key for each whose content is cached already (or, when keys
        repeat, was given a block earlier in this request)."""
        if distinct:
            cached = self._cached(new)
            out = new.copy()
            count = int(np.count_nonzero(cached))
            out[cached] = np.arange(self.next_shadow, self.next_shadow + count, dtype=I64)
            self.next_shadow += count
            self._room(self.next_shadow)
            self.ref[out] = 1
            self.n_ref += len(out)
            return out
        keys = []
        for k in new.tolist():
            if self.ref[k] > 0 or self.free.pos[k] >= 0:
                k = self.next_shadow
                self.next_shadow += 1
                self._room(self.next_shadow)
            self.ref[k] = 1
            self.n_ref += 1
            keys.append(k)
        return np.asarray(keys, dtype=I64)

    def _admit_one_by_one(self, keys: np.ndarray, hits: int, blocks: int) -> tuple[np.ndarray, int] | None:
        """A request repeating a key: :meth:`GpuPool.admit`'s loops, key by key."""
        ref, free = self.ref, self.free
        hit_keys = keys[:hits].tolist()
        held_free = sum(1 for k in hit_keys if free.pos[k] >= 0)  # counted before any leaves, as GpuPool does
        need = blocks - hits
        if need > self.free_blocks() - held_free:
            return None
        for k in hit_keys:
            if free.pos[k] >= 0:
                free.pos[k] = -1
                self.n_free -= 1
                self.n_ref += 1
                ref[k] = 1
            else:
                ref[k] += 1
        self._evict(need)
        held = np.concatenate((keys[:hits], self._shadowed(keys[hits:], False)))
        plain = blocks - len(held)
        self.plain += plain
        return held, plain

    def release(self, held: np.ndarray, plain: int) -> None:
        """``free_blocks(reversed(blocks))``: the tail's hashed blocks reach the free queue first."""
        rev = held[::-1]
        if self._distinct(rev):
            self.ref[rev] -= 1
            zero = rev[self.ref[rev] == 0]
        else:
            zero_list = []
            for k in rev.tolist():
                self.ref[k] -= 1
                if self.ref[k] == 0:
                    zero_list.append(k)
            zero = np.asarray(zero_list, dtype=I64)
        self.free.append(zero)
        self.n_ref -= len(zero)
        self.n_free += len(zero)
        self.plain -= plain

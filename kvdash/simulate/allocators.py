"""Contiguous allocators over a pool of token slots: first fit, and Orca's binary buddy allocator (as the
PagedAttention paper ran it).  ``alloc(size)`` gives ``(start, slots)`` or None; ``free(start, slots)``."""

from __future__ import annotations

import bisect
import heapq


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

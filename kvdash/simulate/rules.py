"""The scheduling rules, defined once for every simulator in kvdash.

Three simulators apply them: the event-driven one that ``kvdash simulate`` runs
(:mod:`kvdash.simulate.engine`), the plain step-by-step reference it is checked and benchmarked
against (:func:`kvdash.simulate.reference.simulate_reference`), and the block-position one that draws the
live map (:mod:`kvdash.simulate.visual`).

Paged policies follow vLLM's v1 scheduler, ``Scheduler.schedule()`` in
``vllm/v1/core/sched/scheduler.py`` (vLLM 0.33.0), with ``KVCacheManager.allocate_slots()`` in
``vllm/v1/core/kv_cache_manager.py``:

1. the running requests are served first, oldest first; one whose next token needs a new block takes
   one, and while the pool has none the newest running request is preempted (its blocks freed, it goes
   back to the front of the waiting queue; recompute keeps its generated tokens, which are prefilled
   again with the prompt when it resumes), possibly the request itself, which then ends the loop;
2. only in a step without preemption are waiting requests admitted, first come first served: the
   queue's head is admitted while the free blocks cover its tokens plus the token of this step and the
   watermark (``watermark_blocks``, applied to waiting and preempted requests once any request is
   scheduled in the step); a head that does not fit blocks the queue.

In this model rule 2's "only in a step without preemption" changes an outcome only when the pool
emptied: otherwise the queue's head after a preemption is the oldest victim, and fewer blocks are free
than it held (the last victim was taken because none was free, and one of its blocks was given away).

Contiguous policies (Orca's Max, Pow2, Oracle) reserve every slot at admission, so rule 1 never
preempts; rule 2 admits the head while the allocator can place its reservation.

Not modelled: vLLM's per-step token budget (``max_num_batched_tokens``, chunked prefill), the cap on
running requests (``max_num_seqs``), prefix-cache eviction, and the time a step takes (every step is
one unit, whatever the batch).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Protocol


class Pool(Protocol):
    """What :func:`serve_running` needs of a paged pool."""

    @property
    def free(self) -> int:
        """Free blocks."""

    def take(self, key: int) -> None:
        """Give running request ``key`` one more block."""

    def release(self, key: int) -> None:
        """Free every block of request ``key``, just removed from the running set (preemption)."""


def serve_running(running: dict[int, int], needers: Iterable[int], pool: Pool) -> list[int]:
    """Rule 1. ``running`` maps keys to requests in admission order (oldest first); ``needers`` are
    the keys whose token this step starts a new block, oldest first.  Victims are taken with
    ``running.popitem()`` (the newest) and released; returns the preempted keys, newest first."""
    preempted: list[int] = []
    for key in needers:
        if key not in running:
            break  # preempted in this step, and so is every newer request
        while pool.free < 1:
            victim, _ = running.popitem()
            pool.release(victim)
            preempted.append(victim)
            if victim == key:
                break
        if key not in running:
            break
        pool.take(key)
    return preempted


def admit_fcfs(waiting: deque[int], place: Callable[[int], bool]) -> list[int]:
    """Rule 2: admit the head of the queue while ``place(request)`` succeeds (it allocates on
    success); a head that cannot be placed blocks the queue."""
    admitted: list[int] = []
    while waiting and place(waiting[0]):
        admitted.append(waiting.popleft())
    return admitted


def paged_blocks_to_admit(length: int, block_size: int, prefix_blocks: int, prefix_held: bool) -> int:
    """Blocks a waiting request of ``length`` tokens (prompt, plus its generated tokens after a
    preemption) takes when admitted: its tokens and this step's token, less the shared prefix's whole
    blocks, plus those prefix blocks when no running request holds them yet."""
    own = -(-(length + 1) // block_size) - prefix_blocks
    return own + (0 if prefix_held else prefix_blocks)

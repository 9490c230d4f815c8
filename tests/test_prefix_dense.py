"""The dense tiers the prefix replay runs on (kvdash/simulate/prefix_dense.py) against the ordered-dict reference
tiers (kvdash/simulate/prefix_tiers.py): the same calls, the same answers, the same order, step by step.

Random call sequences over few keys and small capacities, so that every path runs: evictions that skip
protected keys, stores cut short when only protected keys remain, unprotected stores whose victims are keys of
the same store, keys repeated within one request, shadow copies of cached content, log compaction."""

from __future__ import annotations

import random

import numpy as np
import pytest

from kvdash.simulate import prefixcache as P
from kvdash.simulate.prefix_dense import DenseGpuPool, DenseLru
from kvdash.simulate.prefix_tiers import GpuPool, LruTier, TierStats


def _keys(rng: random.Random, n: int, repeat: bool) -> list[int]:
    size = rng.randint(0, 9)
    ks = [rng.randrange(n) for _ in range(size)]
    return ks if repeat else list(dict.fromkeys(ks))


@pytest.mark.parametrize("seed", range(60))
def test_dense_lru_equals_lru_tier(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.choice((6, 12, 40))
    cap = rng.choice((None, 1, 3, 5, 8))
    ref = LruTier(cap, TierStats("cpu", 16, cap))
    dense = DenseLru(cap, TierStats("cpu", 16, cap), n)
    dense.order.log = np.empty(16, dtype=np.int64)  # a tiny log: compaction runs often
    for _ in range(300):
        op = rng.random()
        ks = _keys(rng, n, repeat=rng.random() < 0.15)
        arr = np.asarray(ks, dtype=np.int64)
        if op < 0.45:
            if rng.random() < 0.5:
                extra = _keys(rng, n, repeat=True)
                got_ref = ref.store(ks, set(ks) | set(extra))
                got = dense.store(arr, np.asarray(ks + extra, dtype=np.int64))
            else:
                got_ref = ref.store(ks)
                got = dense.store(arr)
            assert got.tolist() == got_ref
        elif op < 0.7:
            ref.finish(ks)
            dense.finish(arr)
        else:
            present = [k for k in ks if k in ref]
            ref.touch(present)
            dense.touch(np.asarray(present, dtype=np.int64))
        assert len(dense) == len(ref)
        assert dense.stats.evictions == ref.stats.evictions
        assert dense.stats.stored_units == ref.stats.stored_units
        assert [k in dense for k in range(n)] == [k in ref for k in range(n)]
        assert dense.run(arr) == next((i for i, k in enumerate(ks) if k not in ref), len(ks))
        if cap is not None:
            assert dense.order.live().tolist() == list(ref.d)


def _same_held(dense_held: np.ndarray, ref_held: list[int], n: int) -> None:
    # shadow keys: negative in GpuPool, from n up in DenseGpuPool
    assert [k if k < n else "shadow" for k in dense_held.tolist()] == [k if k >= 0 else "shadow" for k in ref_held]


@pytest.mark.parametrize("seed", range(60))
def test_dense_gpu_pool_equals_gpu_pool(seed: int) -> None:
    rng = random.Random(1000 + seed)
    n = rng.choice((5, 10, 30))
    blocks = rng.choice((2, 4, 8, 16))
    ref = GpuPool(blocks)
    dense = DenseGpuPool(blocks, n)
    dense.free.log = np.empty(16, dtype=np.int64)
    running: list[tuple[np.ndarray, list[int], int]] = []
    for _ in range(300):
        if running and (rng.random() < 0.4 or len(running) > 3):
            d_held, r_held, plain = running.pop(rng.randrange(len(running)))
            ref.release(r_held, plain)
            dense.release(d_held, plain)
        else:
            ks = _keys(rng, n, repeat=rng.random() < 0.15)
            arr = np.asarray(ks, dtype=np.int64)
            limit = rng.randint(0, len(ks))
            h = ref.hit(ks, limit)
            assert dense.hit(arr, limit) == h
            need = len(ks) + rng.randint(0, 2)  # full blocks plus a partial tail or two
            got_ref = ref.admit(ks, h, need)
            got = dense.admit(arr, h, need)
            assert (got is None) == (got_ref is None)
            if got is not None and got_ref is not None:
                _same_held(got[0], got_ref[0], n)
                assert got[1] == got_ref[1]
                running.append((got[0], got_ref[0], got[1]))
        assert dense.evictions == ref.evictions
        assert dense.free_blocks() == ref.free_blocks()
        assert dense.used() == ref.used()
        live = dense.free.live().tolist()
        assert [k if k < n else "shadow" for k in live] == [k if k >= 0 else "shadow" for k in ref.free]


def test_block_keys_flat_names_each_block_by_segment_and_offset() -> None:
    """Two requests sharing a 20-token segment (id 7), block size 8: request 0 is segments 7 (20 tokens) then
    9 (12), 32 prompt tokens and 8 output tokens; request 1 is 7 (20) then 11 (4), 24 tokens, 0 output.
    Full blocks end at 8, 16 (in segment 7), 24, 32 (segment 9 at offsets 4 and 12) and 40 (the output,
    offset 8) for request 0; 8, 16 (segment 7) and 24 (segment 11, offset 4) for request 1.  So both
    requests' first two keys are equal and nothing else is."""
    w = P.Workload("t", [0.0, 1.0], [32, 24], [8, 0],
                   [np.asarray([7, 9]), np.asarray([7, 11])], [np.asarray([20, 32]), np.asarray([20, 24])], [100, 101])
    flat, offsets = P.block_keys_flat(w, 8, True)
    assert offsets.tolist() == [0, 5, 8]
    raw = [(7, 8), (7, 16), (9, 4), (9, 12), (100, 8), (7, 8), (7, 16), (11, 4)]
    order = sorted(set(raw))
    assert flat.tolist() == [order.index(r) for r in raw]
    assert P.block_keys(w, 8, True) == [flat[:5].tolist(), flat[5:].tolist()]
    assert P.block_keys(w, 8, False) == [[0, 1, 2, 3], [0, 1, 4]]  # (7,8) (7,16) (9,4) (9,12) (11,4): 0-4

"""Invariants of the calculator, checked by Hypothesis over random architectures and requests."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvdash.answer.budget import BudgetSpec
from kvdash.answer.calc import CalcInput, calculate, paged_capacity
from kvdash.core import formulas as f
from kvdash.core.model import custom
from kvdash.engines.vllm import rank_shapes
from tests.strategies import architectures, block_sizes, budgets, dtypes, head_dims, kv_heads, layers, requests

settings.register_profile("ci", max_examples=150, deadline=None)
settings.load_profile("ci")


@given(layers, kv_heads, head_dims, st.sampled_from([1, 2, 4]), st.integers(1, 8))
def test_bytes_scale_linearly_with_layers(n_layers, kv, hd, bpe, k):
    """KV bytes per token of k x L layers = k x those of L layers."""
    assert k * f.kv_bytes_per_token(n_layers, kv, hd, bpe) == f.kv_bytes_per_token(k * n_layers, kv, hd, bpe)


@given(layers, kv_heads, head_dims, dtypes)
def test_shape_matches_tutorial_formula(n_layers, kv, hd, dtype):
    """For a uniform full-attention model the pool shape reproduces 2 x L x H x D x bytes."""
    from kvdash.core.dtypes import get_dtype

    shape = rank_shapes(custom(n_layers, kv, hd), dtype)[0]
    assert f.kv_bytes_per_token(n_layers, kv, hd, get_dtype(dtype).bytes_per_element) == shape.bytes_per_token


@given(requests(), block_sizes)
def test_paged_slots_cover_used_with_tail_below_block(req, block):
    """Paged slots >= used tokens, and the tail waste is below one block."""
    used, _ = req
    slots = f.cdiv(used, block) * block
    assert used <= slots < used + block


@given(architectures(), requests(8192), block_sizes, budgets)
def test_paged_beats_contiguous_when_reservation_covers_blocks(arch, req, block, budget):
    """Paged capacity >= contiguous (Max) capacity whenever the reservation >= the paged slots."""
    used, reserved = req
    if f.cdiv(used, block) * block > reserved or reserved > arch.max_context:
        return
    r = calculate(CalcInput(arch=arch, block_size=block, used=used, max_reserved=reserved,
                            budget=BudgetSpec(bytes=budget)))
    assert r["capacity"]["paged_requests"] >= r["capacity"]["contiguous_requests"]


@given(architectures(), st.integers(1, 8192), block_sizes, budgets)
def test_capacity_is_tight(arch, used, block, budget):
    """paged x blocks <= pool blocks < (paged + 1) x blocks: the pool holds exactly that many requests."""
    r = calculate(CalcInput(arch=arch, block_size=block, used=used, max_reserved=max(used, 1),
                            budget=BudgetSpec(bytes=budget)))
    blocks, n, pool = r["request"]["paged_blocks"], r["capacity"]["paged_requests"], r["whole_pool_blocks"]
    assert n * blocks <= pool < (n + 1) * blocks
    assert r["block_backed_token_slots"] <= r["kv_token_slots"]


@given(architectures(), st.integers(1, 4096), st.integers(1, 4096), block_sizes, budgets)
def test_capacity_monotone(arch, a, b, block, budget):
    """A longer request never fits more often; a larger budget never fits fewer."""
    shapes = rank_shapes(arch, block_size=block)
    lo, hi = sorted((a, b))
    inp = CalcInput(arch=arch, block_size=block, used=1, max_reserved=1)
    assert paged_capacity(inp, shapes, budget, hi) <= paged_capacity(inp, shapes, budget, lo)
    assert paged_capacity(inp, shapes, budget, lo) <= paged_capacity(inp, shapes, budget * 2, lo)


@given(st.integers(1, 1 << 20), st.integers(1, 1 << 16), st.sampled_from([1, 16, 32, 64]))
def test_window_never_needs_more_than_full(n, window, block):
    """A sliding layer never holds more blocks than a full layer, nor more than the window bound."""
    got = f.window_blocks(n, window, block)
    assert got <= f.cdiv(n, block)
    assert got <= f.cdiv(window - 1, block) + 1


@given(st.integers(1, 1 << 30))
def test_next_pow2(n):
    """next_pow2(n) is a power of two in [n, 2n)."""
    p = f.next_pow2(n)
    assert p & (p - 1) == 0 and n <= p < 2 * n


@given(st.lists(st.integers(1, (1 << 31) - 1), min_size=1, max_size=50), st.integers(1, 1 << 20))
def test_pow2_reservation_same_on_int_polars_and_numpy(finals, max_reserved):
    """One Pow2 formula serves calc (int), sweep (polars) and the simulator (numpy): all agree."""
    import numpy as np
    import polars as pl

    want = [f.pow2_reservation(n, max_reserved) for n in finals]
    assert want == [min(f.next_pow2(n), max_reserved) for n in finals]
    got_np = f.pow2_reservation(np.array(finals, dtype=np.int64), max_reserved)
    got_pl = pl.DataFrame({"n": finals}).select(f.pow2_reservation(pl.col("n"), max_reserved).alias("r"))["r"].to_list()
    assert want == got_np.tolist() == got_pl


@given(st.integers(-(1 << 40), 1 << 40), st.integers(-(1 << 40), 1 << 40))
def test_imin_imax(a, b):
    assert (min(a, b), max(a, b)) == (f.imin(a, b), f.imax(a, b))


@given(architectures(), st.sampled_from([1, 2, 4, 8]))
def test_tp_never_grows_per_rank_bytes(arch, tp):
    """Per-rank KV bytes per token never grow with the TP degree."""
    if arch.num_attention_heads % tp or (arch.kv_heads >= tp and arch.kv_heads % tp) or \
            (arch.kv_heads < tp and tp % arch.kv_heads):
        return
    assert rank_shapes(arch, tp=tp)[0].bytes_per_token <= rank_shapes(arch)[0].bytes_per_token

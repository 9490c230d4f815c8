"""Hypothesis strategies shared by the property tests."""

from __future__ import annotations

from hypothesis import strategies as st

from kvdash.core.model import custom

layers = st.integers(1, 128)
kv_heads = st.sampled_from([1, 2, 4, 8, 16, 32, 64])
head_dims = st.sampled_from([64, 80, 96, 128, 256])
block_sizes = st.sampled_from([1, 8, 16, 32, 64, 128, 256])
dtypes = st.sampled_from(["fp32", "fp16", "bf16", "fp8", "int8"])
budgets = st.integers(1 << 20, 1 << 40)


@st.composite
def architectures(draw: st.DrawFn):
    kv = draw(kv_heads)
    return custom(draw(layers), kv, draw(head_dims), num_attention_heads=kv * draw(st.sampled_from([1, 2, 4, 8])))


@st.composite
def requests(draw: st.DrawFn, max_len: int = 131072):
    """(used, max_reserved) with 0 < used <= max_reserved."""
    reserved = draw(st.integers(1, max_len))
    return draw(st.integers(1, reserved)), reserved

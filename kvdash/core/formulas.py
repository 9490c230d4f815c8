"""The capacity formulas, one function each.

Every function here uses only ``+ - * //`` (and ``min``/``max`` through :func:`imin`/:func:`imax`),
so the *same* definition evaluates a single configuration (Python ``int``), a whole grid (polars
expressions, in :mod:`kvdash.sweep`) and the simulator's arrays of requests (numpy, in
:mod:`kvdash.simulate`; reached through the array's own namespace, so nothing here imports numpy).
Bytes, slots and blocks stay exact integers; only :func:`next_pow2` on columns and arrays passes
through a float ``log2``, which is exact for lengths below 2^31.

Symbols: ``B`` block size in tokens; ``n`` tokens held by a request; ``W`` sliding window in tokens.
"""

from __future__ import annotations

from typing import Any, TypeVar

N = TypeVar("N")  # int, or a polars expression


def cdiv(n: Any, d: Any) -> Any:
    """Ceiling division ``⌈n / d⌉`` for positive ``d``.

    >>> cdiv(825, 16)
    52
    """
    return -(-n // d)


def imin(a: Any, b: Any) -> Any:
    """``min(a, b)`` for integers, and element-wise for columns (``clip``, so that nested minima do
    not copy their arguments into the expression tree).

    >>> imin(7, 3), imin(3, 7)
    (3, 3)
    """
    if isinstance(a, int) and isinstance(b, int):
        return a if a < b else b
    if hasattr(a, "__array_namespace__") or hasattr(b, "__array_namespace__"):
        return _xp(a, b).minimum(a, b)
    return a.clip(upper_bound=b) if hasattr(a, "clip") else b.clip(upper_bound=a)


def imax(a: Any, b: Any) -> Any:
    """``max(a, b)`` for integers, and element-wise for columns.

    >>> imax(7, 3), imax(3, 7)
    (7, 7)
    """
    if isinstance(a, int) and isinstance(b, int):
        return a if a > b else b
    if hasattr(a, "__array_namespace__") or hasattr(b, "__array_namespace__"):
        return _xp(a, b).maximum(a, b)
    return a.clip(lower_bound=b) if hasattr(a, "clip") else b.clip(lower_bound=a)


def next_pow2(n: Any) -> Any:
    """Smallest power of two ``>= n`` (Orca's Pow2 reservation).

    >>> next_pow2(825), next_pow2(1024), next_pow2(1)
    (1024, 1024, 1)
    """
    if isinstance(n, int):
        return 1 << (n - 1).bit_length()
    # log2 of an integer below 2**31 is exact enough for ceil() to land on the power.
    if hasattr(n, "__array_namespace__"):
        xp = n.__array_namespace__()
        return xp.astype(2 ** xp.ceil(xp.log2(n)), xp.int64)
    return (2 ** n.log(2).ceil()).cast(int)


def trunc(x: Any) -> Any:
    """A float truncated toward zero to an integer, as Python's ``int()`` (vLLM's logged token count).

    >>> trunc(127.5 * 2048)
    261120
    """
    if isinstance(x, float):
        return int(x)
    if hasattr(x, "__array_namespace__"):
        xp = x.__array_namespace__()
        return xp.astype(xp.trunc(x), xp.int64)
    return x.cast(int)


def pow2_reservation(final: Any, max_reserved: Any) -> Any:
    """Tokens the Pow2 policy reserves: the next power of two of the final length, capped at the
    maximum reservation.

    >>> pow2_reservation(825, 2048), pow2_reservation(1525, 2048), pow2_reservation(3000, 2048)
    (1024, 2048, 2048)
    """
    return imin(next_pow2(final), max_reserved)


def pow2_output_reservation(prompt: Any, final: Any, max_reserved: Any) -> Any:
    """Tokens Orca (Pow2) reserves, as the PagedAttention paper defines it (Kwon et al., SOSP 2023, §6.1:
    "over-reserves the space for outputs by at most 2x"): the prompt, plus the next power of two of the
    output length, capped at the maximum reservation.  A prompt of 40 and an output of 25 reserve
    40 + 32 = 72 (rounding the whole 65 up would reserve 128).

    >>> pow2_output_reservation(40, 65, 2048), pow2_output_reservation(1000, 2100, 2048)
    (72, 2048)

    An output of one token reserves one slot past the prompt (2^0), and so does none (the output counted as at
    least 1: 2^0 = 1, where next_pow2(0) would give 2):

    >>> pow2_output_reservation(40, 41, 2048), pow2_output_reservation(40, 40, 2048)
    (41, 41)
    """
    return imin(prompt + next_pow2(imax(final - prompt, 1)), max_reserved)


def _xp(a: Any, b: Any) -> Any:
    """The array namespace (numpy) of whichever argument is an array."""
    return (a if hasattr(a, "__array_namespace__") else b).__array_namespace__()


def kv_bytes_per_token(layers: Any, kv_heads: Any, head_dim: Any, bytes_per_element: Any) -> Any:
    """Bytes of K and V one token stores in a standard MHA/GQA/MQA model.

    ``2 × layers × kv_heads × head_dim × bytes_per_element`` -- the 2 is one K and one V vector.

    >>> kv_bytes_per_token(80, 8, 128, 2)  # tutorial: 327,680 B = 0.3125 MiB
    327680
    """
    return 2 * layers * kv_heads * head_dim * bytes_per_element


def token_slots(budget: Any, bytes_per_token: Any) -> Any:
    """Whole tokens of KV that fit in ``budget`` bytes, ignoring blocks.

    >>> token_slots(12 * 2**30, 327680)  # tutorial: 39,321
    39321
    """
    return budget // bytes_per_token


def weights_per_rank(weight_bytes: Any, ranks: Any) -> Any:
    """Weight bytes one rank holds when ``tp x pp`` ranks split the model evenly (rounded up).

    >>> weights_per_rank(141_200_000_000, 4)  # Llama-3.1-70B estimate on TP 4
    35300000000
    """
    return cdiv(weight_bytes, ranks)


def block_bytes(block_size: Any, layer_token_bytes: Any, group_size: Any) -> Any:
    """Bytes of one pool block: ``B`` tokens for each of the ``group_size`` layers it serves."""
    return block_size * layer_token_bytes * group_size


def pool_blocks(budget: Any, bytes_per_block: Any) -> Any:
    """Whole blocks the pool holds; the leftover ``budget mod bytes_per_block`` cannot form one.

    >>> pool_blocks(12 * 2**30, 16 * 327680)  # tutorial: 2,457
    2457
    """
    return budget // bytes_per_block


def window_blocks(n: Any, window: Any, block_size: Any) -> Any:
    """Blocks a sliding-window layer group needs for a request holding ``n`` tokens.

    The next token attends to the last ``W`` positions; those span at most ``⌈(W-1)/B⌉ + 1``
    blocks, because the window need not start on a block boundary, and never more than ``⌈n/B⌉``.

    >>> window_blocks(100, 4096, 16), window_blocks(10000, 4096, 16)
    (7, 257)
    """
    return imin(cdiv(n, block_size), cdiv(window - 1, block_size) + 1)


def request_blocks(
    n: Any, block_size: Any, full_groups: Any, window_groups: Any, window: Any,
    full_ratio: Any = 1, window_ratio: Any = 1,
) -> Any:
    """Pool blocks one request of ``n`` tokens holds: every full group needs ``⌈n/B⌉``, every
    window group at most the window's blocks.  A kind whose page is a ``ratio``-th of the largest
    holds ``ratio x B`` tokens per block (vLLM's ``unify_kv_cache_spec_page_size``; 1 for every
    model whose layers share one page size).

    >>> request_blocks(825, 16, 1, 0, 0)  # tutorial: 52
    52
    >>> request_blocks(2048, 16, 1, 5, 128, full_ratio=2)  # MiMo-V2-Flash: 2,048 / 32 + 5 x 9
    109

    A window kind with the double page instead: 2,048 / 16 full blocks + 5 x min(2,048 / 32, ceil(127 / 32) + 1)
    = 128 + 5 x 5:

    >>> request_blocks(2048, 16, 1, 5, 128, window_ratio=2)
    153
    """
    return (full_groups * cdiv(n, block_size * full_ratio)
            + window_groups * window_blocks(n, window, block_size * window_ratio))


def contiguous_request_bytes(
    reserved: Any, full_token_bytes: Any, window_token_bytes: Any, window: Any, state_bytes: Any
) -> Any:
    """Bytes one contiguous reservation of ``reserved`` tokens holds.

    Full-attention layers reserve every position; a sliding layer never needs more than ``W``.
    """
    return (
        full_token_bytes * reserved + window_token_bytes * imin(reserved, window) + state_bytes
    )


def capacity(budget: Any, request_bytes: Any) -> Any:
    """Requests of ``request_bytes`` each that fit at once in ``budget``.

    For a pool of ``P = budget // block`` blocks and requests of ``k`` blocks this equals
    ``P // k``, because ``⌊⌊a/b⌋/c⌋ = ⌊a/(bc)⌋`` for positive integers.

    >>> capacity(12 * 2**30, 52 * 16 * 327680), capacity(12 * 2**30, 2048 * 327680)  # 47, 19
    (47, 19)
    """
    return budget // request_bytes

"""Recurrent state of Mamba and linear-attention layers: bytes per request per layer on one rank.

vLLM 0.33 keeps the state of such a layer in one ``MambaSpec`` page per request (two in prefix-caching
``align`` mode): a convolution state plus a temporal (SSM) state, whose shapes come from the model
class's ``get_mamba_state_shape_from_config``, i.e. ``MambaStateShapeCalculator`` in
``vllm/model_executor/layers/mamba/mamba_utils.py`` (vLLM v0.33.0).  The formulas below mirror it:

* ``mamba1`` (Jamba): conv ``(I/tp) x (d_conv - 1)``, ssm ``(I/tp) x d_state``.
* ``mamba2`` (Nemotron-H, Granite-4 hybrid, Falcon-H1, Zamba2, Mamba-2): a single group is replicated to ``tp``
  ranks, and more groups than one must be divisible by ``tp`` (``MambaMixer2.__init__``); conv
  ``(d_conv - 1) x (I + 2 G d_state)/tp``, ssm
  ``(H/tp) x head_dim x d_state``.
* ``gdn`` (gated delta net, Qwen3-Next): conv ``(2 Hk dk + Hv dv)/tp x (d_conv - 1)``, ssm
  ``(Hv/tp) x dk x dv``.
* ``short_conv`` (LFM2's short-convolution layers): conv ``(conv_dim/tp) x (L_cache - 1)``, no temporal
  state (``MambaStateShapeCalculator.short_conv_state_shape``; ``ShortConv.get_state_shape`` in
  ``vllm/model_executor/layers/mamba/short_conv.py``).
* ``fixed``: a state size given in bytes (``_kvdash.state_bytes_per_layer``), split evenly over ranks.

Element sizes: the conv state is stored in the model dtype (2 bytes for bf16/fp16), the ssm state in the
model dtype too unless the model's config names ``mamba_ssm_cache_dtype`` (Nemotron-H: float32).
"""

from __future__ import annotations

from kvdash.core import formulas as f
from kvdash.errors import InputError

FAMILIES = ("mamba1", "mamba2", "gdn", "short_conv", "fixed")
# the fields of Layer.state for each family, in order
FIELDS = {
    "mamba1": ("intermediate_size", "d_state", "d_conv"),
    "mamba2": ("intermediate_size", "n_groups", "num_heads", "head_dim", "d_state", "d_conv"),
    "gdn": ("num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim", "d_conv"),
    "short_conv": ("conv_dim", "d_conv"),
    "fixed": ("bytes",),
}


def _divide(n: int, tp: int, what: str) -> int:
    if n % tp:
        raise InputError("--tp", tp, f"must divide the state layers' {what} ({n})")
    return n // tp


def state_elements(family: str, dims: tuple[int, ...], tp: int) -> tuple[int, int]:
    """Elements of the (conv, ssm) state of one layer on one of ``tp`` ranks.

    >>> state_elements("mamba1", (8192, 16, 4), 1)  # Jamba-v0.1: 8,192 x 3 and 8,192 x 16
    (24576, 131072)
    >>> state_elements("gdn", (16, 32, 128, 128, 4), 1)  # Qwen3-Next-80B-A3B
    (24576, 524288)
    >>> state_elements("short_conv", (2048, 3), 1)  # LFM2-1.2B: 2,048 x 2, no temporal state
    (4096, 0)
    """
    if family == "mamba1":
        inter, d_state, d_conv = dims
        local = _divide(inter, tp, "intermediate size")
        return local * (d_conv - 1), local * d_state
    if family == "mamba2":
        inter, groups, heads, head_dim, d_state, d_conv = dims
        if groups % tp:  # vLLM's extra_groups_for_head_shards: a single group is replicated to tp
            # MambaMixer2.__init__ (vllm/model_executor/layers/mamba/mamba_mixer2.py) asserts that tp divides the
            # groups or that there is only one: "If tensor parallel world size does not divide num_groups, then
            # num_groups must equal 1", so vLLM 0.33 refuses to start otherwise
            if groups != 1:
                raise InputError("--tp", tp, f"must divide the state layers' groups ({groups}): vLLM 0.33 refuses to "
                                 "start (\"If tensor parallel world size does not divide num_groups, then num_groups "
                                 "must equal 1\", MambaMixer2.__init__, vllm/model_executor/layers/mamba/"
                                 "mamba_mixer2.py)")
            groups = tp
        conv_dim = _divide(inter + 2 * groups * d_state, tp, "convolution width")
        return (d_conv - 1) * conv_dim, _divide(heads, tp, "SSM heads") * head_dim * d_state
    if family == "gdn":
        k_heads, v_heads, dk, dv, d_conv = dims
        conv_dim = _divide(2 * k_heads * dk + v_heads * dv, tp, "convolution width")
        return conv_dim * (d_conv - 1), _divide(v_heads, tp, "value heads") * dk * dv
    if family == "short_conv":
        conv_dim, d_conv = dims
        return _divide(conv_dim, tp, "convolution width") * (d_conv - 1), 0
    if family == "fixed":
        return int(f.cdiv(dims[0], tp)), 0
    raise InputError("state layer", family, "expected one of: " + ", ".join(FAMILIES))


def state_page_bytes(family: str, dims: tuple[int, ...], tp: int, conv_bytes: int, ssm_bytes: int) -> int:
    """Bytes of one layer's state for one request on one rank (vLLM's unpadded ``MambaSpec`` page).

    >>> state_page_bytes("mamba1", (8192, 16, 4), 1, 2, 2)  # (24,576 + 131,072) x 2
    311296
    """
    if family == "fixed":
        return state_elements(family, dims, tp)[0]
    conv, ssm = state_elements(family, dims, tp)
    return conv * conv_bytes + ssm * ssm_bytes

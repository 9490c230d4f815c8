"""The pool geometry of one rank, engine-free: :class:`PoolShape` (what an engine's layout rules produce) and
the bytes one token or one recurrent state takes in one layer on one tensor-parallel rank.

How layers are grouped into KV-cache groups, which block size is used and how many blocks a request's state
holds are an engine's choices (:meth:`kvdash.engines.base.EngineRules.pool`; vLLM 0.33's in
:mod:`kvdash.engines.vllm`); this module only holds the shape they fill in and the per-layer byte counts.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvdash.core import formulas as f
from kvdash.core import limits
from kvdash.core.dtypes import SCALE_BYTES, fp8_ds_mla_token_bytes, get_dtype
from kvdash.core.model import Architecture, Layer
from kvdash.core.state import state_page_bytes
from kvdash.errors import InputError


@dataclass(frozen=True)
class PoolShape:
    """The KV pool of one rank (one pipeline stage), the way vLLM 0.33 lays it out.

    Layers of one kind (one KV-cache spec) form KV-cache groups of ``group_size`` layers: the smallest
    kind's layer count, or the largest when it is under 1.5 x the smallest (vLLM's
    ``_get_kv_cache_groups_uniform_page_size``); a kind's last group is padded.  One pool block
    holds ``block_size`` tokens for every layer of one group, so it takes
    ``block_size x layer_token_bytes x group_size`` bytes.  State (mamba/linear) layers form groups
    too; their state page is padded to the attention page, and a request holds ``state_blocks``
    blocks of them whatever its length (1 per state group; in prefix-caching ``align`` mode 2, 3 for Mamba-2).
    """

    block_size: int
    layer_token_bytes: int  # bytes of one token in one layer (the largest kind's, others padded)
    group_size: int  # layers per KV-cache group
    full_groups: int  # groups that keep every token (full attention, MLA)
    window_groups: int  # groups of sliding-window (or chunked-local) layers
    window: int  # the sliding window (or attention chunk) in tokens (0: none)
    full_token_bytes: int  # sum over full/MLA layers of their bytes per token (unpadded)
    window_token_bytes: int  # sum over sliding layers of their bytes per token (unpadded)
    state_bytes: int  # pool bytes of the fixed recurrent state of one request: state_blocks x block
    attention_layers: int
    state_layers: int
    chunked: int = 0  # 1: the window groups are Llama 4 chunked-local attention
    state_groups: int = 0
    state_blocks: int = 0  # pool blocks one request's state holds, whatever its length
    state_page_bytes: int = 0  # one state layer's unpadded page (vLLM MambaSpec) on this rank
    requested_block_size: int = 0
    mamba_mode: str = ""  # 'align' (prefix caching on), 'none', or '' without state layers
    # tokens per block of the full / window groups in units of block_size: a kind whose page is a ratio-th of the
    # largest page gets ratio x block_size tokens per block (vllm/v1/core/kv_cache_planning.py,
    # unify_kv_cache_spec_page_size; MiMo-V2-Flash's full layers: 2); 1 when every layer has one page size
    full_ratio: int = 1
    window_ratio: int = 1
    # an attention-free pool (Mamba, Falcon-Mamba): a block is one state page per layer of its group, whatever the
    # block size (layer_token_bytes 0): vLLM 0.33 plans only MambaSpec pages, one group of every layer
    fixed_block_bytes: int = 0

    @property
    def bytes_per_token(self) -> int:
        return self.full_token_bytes + self.window_token_bytes

    @property
    def block_bytes(self) -> int:
        return f.block_bytes(self.block_size, self.layer_token_bytes, self.group_size) + self.fixed_block_bytes

    @property
    def attention_groups(self) -> int:
        return self.full_groups + self.window_groups

    @property
    def groups(self) -> int:
        return self.full_groups + self.window_groups + self.state_groups

    @property
    def padded_layers(self) -> int:
        return self.groups * self.group_size - self.attention_layers - self.state_layers


def check_parallel(arch: Architecture, tp: int, pp: int) -> None:
    """Reject tensor/pipeline degrees the engines would reject."""
    for name, value in (("--tp", tp), ("--pp", pp)):
        limits.check_int(name, value)
    if arch.num_attention_heads % tp:
        raise InputError("--tp", tp, f"must divide num_attention_heads={arch.num_attention_heads}")
    kv = arch.kv_heads
    if arch.first("full", "sliding", "chunked") and kv:
        if (kv >= tp and kv % tp) or (kv < tp and tp % kv):
            raise InputError("--tp", tp, f"must divide num_key_value_heads={kv} or be a multiple of it")
    if pp > 1 and arch.decoder_layers and arch.decoder_layers != arch.num_layers:
        raise InputError("--pp", pp, f"1 for {arch.name}: its {arch.decoder_layers} decoder layers hold "
                         f"{arch.num_layers} cache layers, and how vLLM splits them is not modeled")
    if pp > arch.num_layers:
        raise InputError("--pp", pp, f"at most the number of layers ({arch.num_layers})")


def layer_token_bytes(layer: Layer, dtype: str, scales: str, tp: int) -> int:
    """Bytes one token takes in one layer on one tensor-parallel rank.

    Full/sliding/chunked: ``max(1, kv_heads // tp) x (head_dim + head_dim_v) x bytes`` (heads are
    replicated when ``tp > kv_heads``), plus ``2 x heads x 4`` with per-token-head scales.
    MLA: ``(kv_lora_rank + qk_rope_head_dim) x bytes`` on every rank (the latent is not split); a sparse MLA
    layer adds its indexer key cache, ``index_bytes`` whatever the KV dtype.
    """
    kv = get_dtype(dtype)
    if layer.kind == "mla":
        if kv.name == "fp8_ds_mla":
            return fp8_ds_mla_token_bytes(layer.kv_lora_rank, layer.qk_rope_head_dim) + layer.index_bytes
        return (layer.latent_dim * kv.bytes_per_element + (SCALE_BYTES if scales == "token_head" else 0)
                + layer.index_bytes)
    if kv.name == "fp8_ds_mla":
        raise InputError("--kv-dtype", dtype, "fp8_ds_mla applies to MLA models only")
    heads = f.imax(1, layer.kv_heads // tp)
    payload = heads * (layer.head_dim + layer.head_dim_v) * kv.bytes_per_element
    return payload + (2 * heads * SCALE_BYTES if scales == "token_head" else 0)


def layer_state_bytes(layer: Layer, tp: int) -> int:
    """One state layer's state for one request on one rank (vLLM's unpadded ``MambaSpec`` page)."""
    return state_page_bytes(layer.state_family, layer.state, tp, layer.conv_bytes, layer.ssm_bytes)



def check_positive(field: str, value: object) -> int:
    """A positive integer within the field's documented range (:mod:`kvdash.core.limits`)."""
    return limits.check_int(field, value, low=1)

"""The architecture a model's KV cache follows: its layers, each of one kind (full, sliding or chunked
attention, MLA, or a recurrent state layer), and the few model-level figures the planners read.

The lowest module of the model description: :mod:`kvdash.core.model` (presets, config.json) and
:mod:`kvdash.core.modeltypes` (per-model-type rules) both build on it, and neither imports the other's
names from here the other way round (issue 26: no import circles)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

KINDS = ("full", "sliding", "chunked", "mla", "mamba", "linear", "short_conv")
ATTENTION_KINDS = ("full", "sliding", "chunked", "mla")
STATE_KINDS = ("mamba", "linear", "short_conv")
SLIDING_NAMES = {"sliding_attention", "sliding", "local", "local_attention"}
CHUNKED_NAMES = {"chunked_attention"}
FULL_NAMES = {"full_attention", "full", "global", "global_attention", "attention"}
STATE_NAMES = {"mamba", "linear_attention", "state", "recurrent", "ssm"}


@dataclass(frozen=True)
class Layer:
    kind: str
    kv_heads: int = 0
    head_dim: int = 0
    head_dim_v: int = 0
    window: int = 0  # sliding window, or the chunk of chunked attention, in tokens
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    state_family: str = ""  # mamba1, mamba2, gdn, short_conv or fixed (kvdash.core.state)
    state: tuple[int, ...] = ()  # the family's shape fields (kvdash.core.state.FIELDS)
    conv_bytes: int = 2  # bytes per element of the conv state (model dtype)
    ssm_bytes: int = 2  # bytes per element of the temporal state
    # sparse MLA (DeepSeek-V3.2, GLM-5): bytes per token of the layer's indexer key cache, a second cache layer
    # beside the latent in the same KV-cache group (kvdash.core.modeltypes.sparse_mla_index_bytes); 0: none
    index_bytes: int = 0
    # the state shape the model class gives vLLM's hybrid block alignment (get_mamba_state_shape_from_config) where
    # it differs from the layer's own (kvdash.core.modeltypes: Zamba2); () when they agree
    align_state: tuple[int, ...] = ()

    @property
    def latent_dim(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def is_state(self) -> bool:
        return self.kind in STATE_KINDS


@dataclass(frozen=True)
class Architecture:
    name: str
    layers: tuple[Layer, ...]
    num_attention_heads: int
    max_context: int
    hidden_size: int = 0
    weight_bytes: int = 0
    weight_basis: str = "not given"
    source: str = ""
    notes: str = ""
    model_type: str = ""
    weights_known: bool = True  # False: no weight figure; a GPU-derived budget needs --weights
    decoder_layers: int = 0  # decoder layers (Falcon-H1 has an attention and a mamba mixer in each)
    derived: tuple[str, ...] = ()  # figures config.json does not state, with the rule that derived them
    counts: dict[str, int] = field(default_factory=dict, compare=False)
    max_len_rule: Any = None  # kvdash.core.maxlen.DerivedMaxLen from config.json; None: max_context
    # config.json facts an engine's own rules read (kvdash.engines.sglang): "architectures" (tuple),
    # "nested_text_config" (bool), "top_model_type" (str), "vision_config" ({key: int} or None), "length_fields"
    # ({key: int}), "rope_scaling" (dict), "swa" ({key: int}), "hybrid_layer_pattern" (tuple),
    # "quantization_config" (dict, kvdash.engines.vllm: resolve_auto_kv_dtype)
    facts: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def derived_max_len(self) -> Any:
        """The longest max_model_len vLLM 0.33 accepts for this model
        (:func:`kvdash.core.maxlen.derived_max_model_len`)."""
        from kvdash.core.maxlen import DerivedMaxLen

        if self.max_len_rule is not None:
            return self.max_len_rule
        return DerivedMaxLen(self.max_context, "max_position_embeddings",
                             f"max_position_embeddings {self.max_context:,}")

    def __post_init__(self) -> None:
        object.__setattr__(self, "counts", dict(Counter(layer.kind for layer in self.layers)))

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def attention_layers(self) -> tuple[Layer, ...]:
        return tuple(layer for layer in self.layers if not layer.is_state)

    @property
    def state_layers(self) -> tuple[Layer, ...]:
        return tuple(layer for layer in self.layers if layer.is_state)

    @property
    def is_hybrid(self) -> bool:
        """Attention and state layers together (vLLM's ``is_hybrid``; an attention-free Mamba is not hybrid)."""
        return bool(self.state_layers) and bool(self.attention_layers)

    @property
    def use_mla(self) -> bool:
        return self.first("mla") is not None

    def first(self, *kinds: str) -> Layer | None:
        return next((layer for layer in self.layers if layer.kind in kinds), None)

    @property
    def kv_heads(self) -> int:
        layer = self.first("full", "sliding", "chunked")
        return layer.kv_heads if layer else (1 if self.first("mla") else 0)

    @property
    def head_dim(self) -> int:
        layer = self.first("full", "sliding", "chunked")
        if layer:
            return layer.head_dim
        mla = self.first("mla")
        return mla.latent_dim if mla else 0

    @property
    def windows(self) -> tuple[int, ...]:
        return tuple(sorted({layer.window for layer in self.layers if layer.kind == "sliding"}))

    def pattern(self) -> str:
        """Short description of the layer mix, e.g. ``'21 sliding(4096) + 21 full'``."""
        parts = []
        for kind in KINDS:
            count = self.counts.get(kind, 0)
            if not count:
                continue
            if kind in ("sliding", "chunked"):
                sizes = sorted({layer.window for layer in self.layers if layer.kind == kind})
                parts.append(f"{count} {kind}({'/'.join(str(w) for w in sizes)})")
            elif kind in STATE_KINDS:
                families = sorted({layer.state_family for layer in self.layers if layer.kind == kind})
                parts.append(f"{count} {kind}({'/'.join(families)})")
            else:
                parts.append(f"{count} {kind}")
        return " + ".join(parts)


def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """Multimodal configs nest the language model under ``text_config``."""
    inner = cfg.get("text_config")
    if isinstance(inner, dict):
        merged = dict(cfg)
        merged.update({k: v for k, v in inner.items() if v is not None or k not in merged})
        return merged
    return cfg

"""What a ``config.json`` means for the KV cache, per ``model_type``, the way vLLM 0.33 reads it.

kvdash never guesses: a ``config.json`` whose ``model_type`` is not in :data:`SUPPORTED` is refused in
one line naming it and the supported types.  A supported file is read through ``transformers``' own
config class for its model type (``CONFIG_MAPPING[model_type].from_dict``: the defaults the library
defines, e.g. Gemma 3's sliding-window pattern of 6 and its 131,072-token context, Qwen3-Next's
``layer_types`` from ``full_attention_interval``, Llama 4's chunked layers); ``transformers`` is
imported only when a config file is read, and never reaches the network (``HF_HUB_OFFLINE``).  Then the
rules of vLLM 0.33 (``vllm/config/model.py`` and the model classes in ``vllm/model_executor/models/``)
give the KV heads, head size, layer kinds and recurrent-state shapes.
"""

from __future__ import annotations

import os
import warnings
from typing import TYPE_CHECKING, Any

from kvdash.errors import InputError

if TYPE_CHECKING:
    from kvdash.core.arch import Architecture, Layer

# model_type -> (models, layer kinds kvdash builds for it).  The table of docs/model-types.md is generated from this.
SUPPORTED: dict[str, tuple[str, str]] = {
    "llama": ("Llama 2, Llama 3.x, Yi (llama-format releases)", "full"),
    "llama4": ("Llama 4 (multimodal config, text_config)", "full + chunked"),
    "llama4_text": ("Llama 4 text model", "full + chunked"),
    "mistral": ("Mistral, Ministral-8B", "full or sliding"),
    "mixtral": ("Mixtral", "full or sliding"),
    "qwen2": ("Qwen2, Qwen2.5", "full (sliding when use_sliding_window)"),
    "qwen2_moe": ("Qwen2-MoE", "full"),
    "qwen3": ("Qwen3", "full"),
    "qwen3_moe": ("Qwen3-MoE", "full"),
    "qwen3_next": ("Qwen3-Next", "full + linear (gated delta net)"),
    "qwen3_5": ("Qwen3.5 (multimodal config, text_config)", "full + linear (gated delta net)"),
    "qwen3_5_text": ("Qwen3.5 text model", "full + linear (gated delta net)"),
    "qwen3_5_moe": ("Qwen3.5-MoE (multimodal config, text_config)", "full + linear (gated delta net)"),
    "qwen3_5_moe_text": ("Qwen3.5-MoE text model", "full + linear (gated delta net)"),
    "qwen3_vl": ("Qwen3-VL (multimodal config, text_config)", "full"),
    "qwen3_vl_moe": ("Qwen3-VL-MoE (multimodal config, text_config)", "full"),
    "minimax_m2": ("MiniMax-M2, M2.5", "full"),
    "deepseek_v2": ("DeepSeek-V2, V2-Lite", "mla"),
    "deepseek_v3": ("DeepSeek-V3, Kimi-K2", "mla"),
    "kimi_k2": ("Kimi-K2", "mla"),
    "deepseek_v32": ("DeepSeek-V3.2 (sparse MLA)", "mla + the indexer's key cache in every layer"),
    "glm_moe_dsa": ("GLM-5 (sparse MLA)", "mla + the indexer's key cache in every layer"),
    "kimi_k25": ("Kimi-K2.5 (multimodal config, text_config)", "mla"),
    "glm4_moe_lite": ("GLM-4.7-Flash", "mla"),
    "glm4_moe": ("GLM-4.5", "full"),
    "chatglm": ("ChatGLM2/3, GLM-4 (chatglm format)", "full"),
    "phi3": ("Phi-3, Phi-4", "full or sliding"),
    "gemma": ("Gemma", "full"),
    "gemma2": ("Gemma 2", "full + sliding"),
    "gemma3": ("Gemma 3 (multimodal config, text_config)", "full + sliding"),
    "gemma3_text": ("Gemma 3 text model", "full + sliding"),
    "gemma3n": ("Gemma 3n (multimodal config, text_config)",
                "full + sliding; the last num_kv_shared_layers layers read earlier layers' KV and hold none"),
    "gemma3n_text": ("Gemma 3n text model",
                     "full + sliding; the last num_kv_shared_layers layers read earlier layers' KV and hold none"),
    "gpt_oss": ("gpt-oss", "full + sliding"),
    "mimo_v2_flash": ("MiMo-V2-Flash", "full + sliding (hybrid_layer_pattern), each kind with its own KV heads and "
                      "head sizes; the full layers' smaller page holds twice the tokens per block"),
    "falcon": ("Falcon 7B/40B/180B", "full"),
    "lfm2": ("LFM2", "full + short_conv (short-convolution state layers, layer_types)"),
    "lfm2_moe": ("LFM2-MoE", "full + short_conv (short-convolution state layers, layer_types)"),
    "falcon_h1": ("Falcon-H1", "full + mamba (Mamba-2), both in every layer"),
    "jamba": ("Jamba", "full + mamba (Mamba-1)"),
    "mamba": ("Mamba (attention-free)", "mamba (Mamba-1) in every layer"),
    "falcon_mamba": ("Falcon-Mamba (attention-free)", "mamba (Mamba-1) in every layer"),
    "mamba2": ("Mamba-2, Mamba-Codestral (attention-free)", "mamba (Mamba-2) in every layer"),
    "nemotron_h": ("Nemotron-H", "full + mamba (Mamba-2)"),
    "granitemoehybrid": ("Granite 4.0 hybrid", "full + mamba (Mamba-2)"),
    "zamba2": ("Zamba2", "mamba (Mamba-2) in every layer + full in each hybrid layer"),
    "olmo": ("OLMo", "full"),
    "olmo2": ("OLMo 2", "full"),
    "olmo3": ("OLMo 3", "full + sliding (layer_types)"),
    "smollm3": ("SmolLM3 (NoPE layers hold KV too)", "full (sliding where layer_types says so)"),
    "seed_oss": ("Seed-OSS", "full"),
    "exaone4": ("EXAONE 4.0", "full + sliding (layer_types)"),
    "ernie4_5": ("ERNIE 4.5 dense", "full"),
    "ernie4_5_moe": ("ERNIE 4.5 MoE", "full"),
    "hunyuan_v1_dense": ("Hunyuan dense V1", "full"),
    "hunyuan_v1_moe": ("Hunyuan MoE V1", "full"),
    "starcoder2": ("StarCoder2", "full or sliding"),
    "cohere": ("Command-R", "full"),
    "cohere2": ("Command-R7B / Command A", "full + sliding"),
    "opt": ("OPT", "full"),
}
# model_type -> the published configs in tests/data/configs/ that conformance-check it against vLLM 0.33.0's own
# code (conformance/vllm/expected.json holds planned cases for each); a type without one is modelled by a rule that
# no real config has checked yet, and docs/model-types.md says so.  tests/test_modeltypes.py keeps this honest.
CONFORMANCE: dict[str, tuple[str, ...]] = {
    "llama": ("llama-2-13b", "llama-2-70b", "llama-3.1-70b", "llama-3.1-8b", "llama-3.2-1b", "llama-3.2-3b"),
    "llama4": ("llama-4-scout-17b-16e-instruct",),
    "mistral": ("mistral-7b-v0.1", "mistral-7b-v0.3"),
    "mixtral": ("mixtral-8x22b-v0.1", "mixtral-8x7b-v0.1"),
    "qwen2": ("qwen2-7b-instruct", "qwen2.5-14b", "qwen2.5-7b"),
    "qwen2_moe": ("qwen1.5-moe-a2.7b",),
    "qwen3": ("qwen3-32b", "qwen3-8b"),
    "qwen3_moe": ("qwen3-235b-a22b", "qwen3-30b-a3b"),
    "qwen3_next": ("qwen3-next-80b-a3b-thinking",),
    "qwen3_5": ("qwen3.5-27b",),
    "qwen3_5_moe": ("qwen3.5-35b-a3b",),
    "qwen3_vl": ("qwen3-vl-8b-instruct",),
    "qwen3_vl_moe": ("qwen3-vl-30b-a3b-instruct",),
    "minimax_m2": ("minimax-m2.5",),
    "deepseek_v2": ("deepseek-v2-lite",),
    "deepseek_v3": ("deepseek-v3",),
    "kimi_k2": ("kimi-k2-instruct",),
    "kimi_k25": ("kimi-k2.5",),
    "glm4_moe_lite": ("glm-4.7-flash",),
    "glm4_moe": ("glm-4.5-air",),
    "chatglm": ("chatglm3-6b", "glm-4-9b-chat"),
    "phi3": ("phi-3-mini-4k-instruct", "phi-4-mini-instruct"),
    "gemma": ("gemma-2b",),
    "gemma2": ("gemma-2-27b", "gemma-2-9b"),
    "gemma3": ("gemma-3-27b-it", "gemma-3-4b-it"),
    "gemma3_text": ("gemma-3-1b-it",),
    "gpt_oss": ("gpt-oss-120b", "gpt-oss-20b"),
    "falcon": ("falcon-40b-instruct", "falcon-7b-instruct"),
    "jamba": ("jamba-1.5-mini",),
    "nemotron_h": ("nemotron-3-nano-30b-a3b", "nemotron-h-56b-base-8k"),
    "olmo2": ("olmo-2-7b",),
    "smollm3": ("smollm3-3b",),
    "starcoder2": ("starcoder2-7b",),
    "cohere": ("aya-23-8b",),
    "cohere2": ("command-a-03-2025", "command-r7b-12-2024"),
    "opt": ("opt-125m",),
    "exaone4": ("exaone-4.0-32b",),
    "lfm2": ("lfm2-1.2b",),
    "mimo_v2_flash": ("mimo-v2-flash",),
    "olmo3": ("olmo-3-7b",),
    "seed_oss": ("seed-oss-36b",),
    "mamba": ("mamba-130m",),
    "falcon_mamba": ("falcon-mamba-7b",),
    "mamba2": ("mamba-codestral-7b",),
    "zamba2": ("zamba2-7b",),
    "glm_moe_dsa": ("glm-5.1",),
    "deepseek_v32": ("deepseek-v3.2",),
    "granitemoehybrid": ("granite-4.0-h-tiny",),
    "hunyuan_v1_dense": ("hunyuan-7b",),
    "gemma3n": ("gemma-3n-e4b",),
    "gemma3n_text": ("gemma-3n-e4b-text",),
    "olmo": ("olmo-1b-hf",),
    "lfm2_moe": ("lfm2-8b-a1b",),
    "falcon_h1": ("falcon-h1-7b",),
    "ernie4_5": ("ernie-4.5-0.3b-pt",),
    "ernie4_5_moe": ("ernie-4.5-21b-a3b",),
    "hunyuan_v1_moe": ("hunyuan-a13b",),
    "llama4_text": ("llama-4-scout-17b-16e-instruct-text",),
    "qwen3_5_text": ("qwen3.5-27b-text",),
    "qwen3_5_moe_text": ("qwen3.5-35b-a3b-text",),
}
# model types vLLM 0.33 itself refuses, with its reason
REFUSED_BY_VLLM: dict[str, str] = {
    "RefinedWeb": "vLLM 0.33 no longer serves RWForCausalLM (supported until v0.28.0)",
    "RefinedWebModel": "vLLM 0.33 no longer serves RWForCausalLM (supported until v0.28.0)",
    "bamba": "vLLM 0.33 no longer serves BambaForCausalLM (supported until v0.23.0: _PREVIOUSLY_SUPPORTED_MODELS in "
             "vllm/model_executor/models/registry.py)",
    "minicpm": "vLLM 0.33 reads this config only with the model's remote code (trust_remote_code), which kvdash "
               "does not run",
    # the harness's ValidationError on Ministral-3-3B-2512 (conformance/vllm/expected.json): transformers'
    # Ministral3Config leaves text_config a dict, which vllm/config/model.py finds without num_attention_heads
    "ministral3": "vLLM 0.33 refuses this config: the text_config extracted from the model config does not have "
                  "`num_attention_heads` attribute (transformers' Ministral3Config keeps it a plain dict; "
                  "ValidationError in vllm/config/model.py); SGLang 0.5.23 serves it (models/mistral.py)",
}
# model types kvdash reads only for SGLang 0.5.23's view (kvdash.engines.sglang, load_config(engine="sglang")):
# configs vLLM 0.33 refuses (REFUSED_BY_VLLM says why) but SGLang serves; the text config's attention fields are
# read as for any llama-like model (full attention in every layer)
SGLANG_ONLY_TYPES: dict[str, tuple[str, str]] = {
    # transformers' Ministral3Config (model_type ministral3 at the top of a Mistral3ForConditionalGeneration config,
    # Ministral-3-3B-2512) keeps text_config and vision_config as plain dicts; SGLang's get_hf_text_config
    # (utils/hf_transformers/common.py) turns text_config into a PretrainedConfig and serves the model with
    # models/mistral.py Mistral3ForConditionalGeneration
    "ministral3": ("Ministral 3 (Mistral3ForConditionalGeneration config: text_config + pixtral vision_config)",
                   "full"),
}
# architectures (config.json "architectures") vLLM 0.33 does not register although their model_type is served
# (vllm/model_executor/models/registry.py resolves a model by its architecture, not its model_type); SGLang 0.5.23
# resolves them through its own registry (models/*.py EntryClass), so load_config(engine="sglang") reads them
REFUSED_ARCHITECTURES: dict[str, str] = {
    "Ernie4_5_ForCausalLM": "vLLM 0.33 registers ERNIE 4.5 as Ernie4_5ForCausalLM; this config names "
                            "Ernie4_5_ForCausalLM, the remote-code class of the first release (auto_map), which vLLM "
                            "0.33 refuses ('not supported for now'); use the release whose config.json names "
                            "Ernie4_5ForCausalLM",
}
# model types vLLM 0.33 serves through its Transformers backend whose transformers model class reads config.head_dim
# as it stands: the config class (transformers 5.20.2) leaves head_dim None when config.json has none, and the
# attention takes getattr(config, "head_dim", hidden_size // heads), None, so building the model stops at
# "self.scaling = self.head_dim**-0.5" (TypeError): vLLM 0.33 does not start (measured with the harness on
# Hunyuan-A13B's first-release file, which names attention_head_dim but no head_dim)
_HUNYUAN_HEAD_DIM = ("vLLM 0.33 serves {cls} through its Transformers backend, whose attention (transformers' {attn}) "
                     "takes its head size from config.head_dim, None when config.json has none: building the model "
                     "stops at a TypeError and vLLM does not start; add head_dim to config.json")
HEAD_DIM_REQUIRED: dict[str, str] = {
    "hunyuan_v1_dense": _HUNYUAN_HEAD_DIM.format(cls="HunYuanDenseV1ForCausalLM", attn="HunYuanDenseV1Attention"),
    "hunyuan_v1_moe": _HUNYUAN_HEAD_DIM.format(cls="HunYuanMoEV1ForCausalLM", attn="HunYuanMoEV1Attention"),
}
# model types vLLM 0.33 serves whose KV layout kvdash does not model yet: refused in one line that says why and what
# to pass instead (docs/model-types.md lists them)
_INSTEAD = "; give the shape with --layers/--kv-heads/--head-dim instead (a uniform model)"
NOT_MODELLED: dict[str, str] = {
}
HYBRID_TYPES = ("jamba", "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "nemotron_h", "granitemoehybrid",
                "falcon_h1", "zamba2", "lfm2", "lfm2_moe", "mamba", "falcon_mamba", "mamba2")
# model types without attention layers: only state pages (num_attention_heads, head_dim not read)
ATTENTION_FREE_TYPES = ("mamba", "falcon_mamba", "mamba2")
# sparse MLA (DeepSeek sparse attention): an indexer key cache beside every layer's latent
SPARSE_MLA_TYPES = ("deepseek_v32", "glm_moe_dsa")
# model types whose attention layers come shaped by their own rule (heads and head sizes per layer kind)
SHAPED_TYPES = ("mimo_v2_flash",)
# model types transformers does not define (remote code): read as published, with the rules below
RAW_TYPES = {"chatglm", "kimi_k2"}
FALCON_TYPES = {"falcon", "RefinedWeb", "RefinedWebModel"}
NO_ESTIMATE = ("unknown: config.json alone does not give them here (a quantized checkpoint, a vision or audio "
               "tower, state layers, or an MLP kvdash does not count)")


def supported_text() -> str:
    return ", ".join(SUPPORTED)


def normalise(raw: Any, where: str, engine: str = "vllm") -> dict[str, Any]:
    """The config as ``transformers``' class for its ``model_type`` reads it (defaults filled in).

    ``engine="sglang"`` reads it for SGLang 0.5.23's view (:mod:`kvdash.engines.sglang`): the refusals that are
    vLLM 0.33's alone -- an architecture its registry does not name (:data:`REFUSED_ARCHITECTURES`), a model type
    it cannot read that SGLang serves (:data:`SGLANG_ONLY_TYPES`) -- do not apply; every other refusal does."""
    if not isinstance(raw, dict):
        raise InputError(where, type(raw).__name__, "expected a JSON object")
    model_type = raw.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise InputError(f"{where}: model_type", model_type,
                         "kvdash reads a config.json by its model_type; supported: " + supported_text())
    sglang = engine == "sglang"
    if model_type in REFUSED_BY_VLLM and not (sglang and model_type in SGLANG_ONLY_TYPES):
        raise InputError(f"{where}: model_type", model_type,
                         REFUSED_BY_VLLM[model_type] + "; supported: " + supported_text())
    archs = raw.get("architectures")
    if not sglang and isinstance(archs, list) and archs and all(a in REFUSED_ARCHITECTURES for a in archs):
        raise InputError(f"{where}: architectures", archs[0], REFUSED_ARCHITECTURES[archs[0]])
    if model_type in NOT_MODELLED:
        raise InputError(f"{where}: model_type", model_type,
                         "vLLM 0.33 serves it but " + NOT_MODELLED[model_type] + _INSTEAD)
    if model_type not in SUPPORTED and not (sglang and model_type in SGLANG_ONLY_TYPES):
        raise InputError(f"{where}: model_type", model_type,
                         "kvdash cannot model this type exactly; supported: " + supported_text() + _INSTEAD)
    if model_type in RAW_TYPES:
        return dict(raw)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from transformers import CONFIG_MAPPING
        except ImportError as exc:  # pragma: no cover - a dependency
            raise InputError(where, model_type, "reading config.json needs the transformers package") from exc
        try:
            config_class = CONFIG_MAPPING[model_type]
        except KeyError as exc:
            raise InputError(f"{where}: model_type", model_type,
                             "the installed transformers does not define this model type") from exc
        try:
            data = {k: v for k, v in raw.items() if k != "transformers_version"}
            cfg: dict[str, Any] = config_class.from_dict(data).to_dict()
        except Exception as exc:  # transformers validates fields its own way
            text = " ".join(str(exc).split())[:200]
            raise InputError(where, model_type, "transformers could not read it: " + text) from exc
    if "hybrid_override_pattern" in raw:  # Nemotron-H's pattern as published
        cfg["hybrid_override_pattern"] = raw["hybrid_override_pattern"]
    if model_type in HEAD_DIM_REQUIRED and cfg.get("head_dim") is None:
        heads, hidden = cfg.get("num_attention_heads"), cfg.get("hidden_size")
        derived = (f" ({hidden} / {heads} = {hidden // heads} for this file)"
                   if isinstance(heads, int) and heads > 0 and isinstance(hidden, int) and hidden % heads == 0 else "")
        raise InputError(f"{where}: head_dim", None, HEAD_DIM_REQUIRED[model_type] + derived)
    return cfg


def aliases(cfg: dict[str, Any]) -> dict[str, Any]:
    """Field names of older formats mapped to the common ones (only where the common one is absent)."""
    out = dict(cfg)
    for old, new in (("n_layer", "num_hidden_layers"), ("num_layers", "num_hidden_layers"),
                     ("n_head", "num_attention_heads"), ("n_embd", "hidden_size"),
                     ("seq_length", "max_position_embeddings"), ("n_positions", "max_position_embeddings")):
        if out.get(new) is None and isinstance(out.get(old), int):
            out[new] = out[old]
    if out.get("model_type") == "nemotron_h" and out.get("num_hidden_layers") is None:
        pattern = _nemotron_pattern(out)
        if pattern:
            out["num_hidden_layers"] = len(pattern)
    return out


def _pos(cfg: dict[str, Any], key: str, where: str) -> int:
    value = cfg.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InputError(f"{where}: {key}", value, "expected a positive integer")
    return value


def total_kv_heads(cfg: dict[str, Any], heads: int, where: str) -> int:
    """vLLM's ``ModelConfig.get_total_num_kv_heads``: Falcon's ``multi_query`` (unless
    ``new_decoder_architecture``) means one KV head; else the first of ``n_head_kv``, ``num_kv_heads``,
    ``num_key_value_heads``, ``multi_query_group_num``; else ``num_attention_heads``."""
    model_type = cfg.get("model_type")
    new_falcon = model_type in FALCON_TYPES and bool(cfg.get("new_decoder_architecture"))
    if not new_falcon and cfg.get("multi_query"):
        return 1
    if model_type == "chatglm":  # vllm/model_executor/models/chatglm.py: GLMAttention
        return _pos(cfg, "multi_query_group_num", where) if cfg.get("multi_query_attention") else heads
    for key in ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num"):
        if cfg.get(key) is not None:
            return _pos(cfg, key, where)
    return heads


def head_size(cfg: dict[str, Any], heads: int, where: str) -> int:
    """vLLM's ``get_head_size``: ``head_dim`` when set, else ``hidden_size // num_attention_heads``."""
    if cfg.get("head_dim") is not None:
        return _pos(cfg, "head_dim", where)
    hidden = cfg.get("hidden_size")
    if not hidden:
        raise InputError(f"{where}: head_dim", None, "give head_dim, or hidden_size to derive it")
    if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden % heads:
        raise InputError(f"{where}: hidden_size", hidden,
                         f"must be divisible by num_attention_heads={heads}, or give head_dim")
    size = hidden // heads
    if cfg.get("model_type") == "chatglm" and cfg.get("kv_channels") not in (None, size):
        raise InputError(f"{where}: kv_channels", cfg.get("kv_channels"),
                         f"vLLM's ChatGLM uses hidden_size // num_attention_heads = {size}; a different "
                         "kv_channels is not modeled")
    return size


def cache_holders(cfg: dict[str, Any], model_type: str, kinds: list[str], where: str) -> list[str]:
    """The kinds of the decoder layers that hold a KV cache of their own (all of them, but for Gemma 3n).

    Gemma 3n: a layer ``i >= first = num_hidden_layers - num_kv_shared_layers`` reads the cache of layer
    ``first - 2`` (sliding) or ``first - 1`` (full) when that index is ``>= 0``, through its
    ``kv_sharing_target_layer_name``, and ``GPUModelRunner.get_kv_cache_spec`` leaves such layers out
    (vllm/model_executor/models/gemma3n.py, ``Gemma3nAttention.__init__``)."""
    if model_type != "gemma3n_text":
        return kinds
    n_layers = len(kinds)
    shared = cfg.get("num_kv_shared_layers") or 0
    if isinstance(shared, bool) or not isinstance(shared, int) or not 0 <= shared < n_layers:
        raise InputError(f"{where}: num_kv_shared_layers", shared, f"expected an integer from 0 to {n_layers - 1}")
    first = n_layers - shared
    return [kind for i, kind in enumerate(kinds)
            if i < first or first - (2 if kind == "sliding" else 1) < 0]


def sparse_mla_index_bytes(cfg: dict[str, Any], model_type: str, n_layers: int, where: str) -> int:
    """Bytes per token of a sparse MLA layer's indexer key cache, the same in every layer (0 for other types).

    vLLM 0.33 (``vllm/models/deepseek_v32/attention.py``, ``DeepseekV32Indexer.__init__``; DeepSeek-V3.2 and
    GLM-5's ``GlmMoeDsaForCausalLM`` share it) gives each indexed layer a ``DeepseekV32IndexerCache`` of
    ``index_head_dim + index_head_dim // 128 x 4`` bytes per token (fp8 keys and one fp32 scale per 128, stored as
    ``torch.uint8`` whatever ``--kv-cache-dtype`` says): its ``get_kv_cache_spec``
    (``vllm/model_executor/models/deepseek_v2.py``) is an ``MLAAttentionSpec`` of one head of that size, so
    DeepSeek-V3.2's 128-wide index keys take 132 B.  ``DeepseekV32Attention.__init__`` leaves the indexer out of a
    layer that ``index_topk_freq`` / ``index_topk_pattern`` skip; a config that skips any is refused here (its
    layers would hold caches of two sizes, not mirrored).

    >>> sparse_mla_index_bytes({"index_head_dim": 128, "index_topk": 2048}, "deepseek_v32", 61, "config.json")
    132
    """
    if model_type not in SPARSE_MLA_TYPES:
        return 0
    head = _pos(cfg, "index_head_dim", where)
    if head % 128:
        raise InputError(f"{where}: index_head_dim", head, "expected a multiple of 128 (the indexer's fp8 keys "
                         "carry one fp32 scale per 128: vllm/models/deepseek_v32/attention.py)")
    freq, pattern = cfg.get("index_topk_freq", 1), cfg.get("index_topk_pattern")
    if freq not in (None, 1) or (pattern is not None and any(p == "S" for p in list(pattern)[:n_layers])):
        raise InputError(f"{where}: index_topk_freq", freq if pattern is None else pattern,
                         "a sparse MLA config whose index_topk_freq / index_topk_pattern leaves layers without an "
                         "indexer is not mirrored (DeepseekV32Attention.__init__, "
                         "vllm/models/deepseek_v32/attention.py); expected every layer indexed")
    return head + head // 128 * 4


def _nemotron_pattern(cfg: dict[str, Any]) -> str:
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        return pattern
    names = cfg.get("layers_block_type")
    if isinstance(names, list):
        code = {"mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*", "mlp": "-",
                "moe": "E"}
        return "".join(code.get(str(n), "?") for n in names)
    return ""


def _mamba2(cfg: dict[str, Any], where: str, inter: int, heads_key: str, head_dim_key: str,
            groups_key: str, state_key: str, conv_key: str) -> tuple[int, ...]:
    return (inter, _pos(cfg, groups_key, where), _pos(cfg, heads_key, where), _pos(cfg, head_dim_key, where),
            _pos(cfg, state_key, where), _pos(cfg, conv_key, where))


def hybrid_layers(cfg: dict[str, Any], model_type: str, n_layers: int,
                  where: str) -> list[tuple[str, Layer | None]] | None:
    """Layer kinds of a hybrid model, each state layer with its shape; ``None`` for other types.

    Attention entries are ``("full", None)``: the caller builds them from the attention fields (Zamba2's, whose
    heads and head size are its own, come built)."""
    from kvdash.core.arch import Layer

    if model_type not in HYBRID_TYPES and model_type not in SHAPED_TYPES:
        return None
    hidden = _pos(cfg, "hidden_size", where)
    full: tuple[str, Layer | None] = ("full", None)
    if model_type == "mimo_v2_flash":
        # vllm/model_executor/models/mimo_v2.py, MiMoV2FlashDecoderLayer.__init__: hybrid_layer_pattern[i] == 1
        # (is_compressed_softmax_layer) builds a sliding layer of swa_num_key_value_heads KV heads, swa_head_dim
        # K and swa_v_head_dim V, window sliding_window_size; any other value a full layer of num_key_value_heads,
        # head_dim and v_head_dim.  Their pages differ (MiMo-V2-Flash: 4 x 320 and 8 x 320 B-elements per token):
        # unify_kv_cache_spec_page_size then doubles the full layers' block (kvdash.core.calc.PoolShape.full_ratio)
        pattern = cfg.get("hybrid_layer_pattern")
        if not isinstance(pattern, list) or len(pattern) != n_layers:
            raise InputError(f"{where}: hybrid_layer_pattern", pattern, f"expected a list of {n_layers} 0/1 values")
        swa = Layer("sliding", kv_heads=_pos(cfg, "swa_num_key_value_heads", where),
                    head_dim=_pos(cfg, "swa_head_dim", where),
                    head_dim_v=cfg.get("swa_v_head_dim") or _pos(cfg, "swa_head_dim", where),
                    window=_pos(cfg, "sliding_window_size", where))
        glob = Layer("full", kv_heads=_pos(cfg, "num_key_value_heads", where), head_dim=_pos(cfg, "head_dim", where),
                     head_dim_v=cfg.get("v_head_dim") or _pos(cfg, "head_dim", where))
        return [("sliding", swa) if p == 1 else ("full", glob) for p in pattern]
    if model_type == "jamba":  # vllm/model_executor/models/jamba.py: layers_block_type
        period, offset = _pos(cfg, "attn_layer_period", where), cfg.get("attn_layer_offset", 0)
        inter = _pos(cfg, "mamba_expand", where) * hidden
        mamba = Layer("mamba", state_family="mamba1",
                      state=(inter, _pos(cfg, "mamba_d_state", where), _pos(cfg, "mamba_d_conv", where)))
        return [full if i % period == offset else ("mamba", mamba) for i in range(n_layers)]
    # gated delta net: vllm/model_executor/models/qwen3_next.py; Qwen3.5 and Qwen3.5-MoE reuse its layer
    # (vllm/model_executor/models/qwen3_5.py, Qwen3_5DecoderLayer: layer_types[i] == "linear_attention")
    if model_type in ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"):
        ssm_dtype = str(cfg.get("mamba_ssm_dtype") or "bfloat16")  # Qwen3.5 keeps the recurrent state in float32
        gdn = Layer("linear", state_family="gdn", ssm_bytes=4 if ssm_dtype == "float32" else 2, state=(
            _pos(cfg, "linear_num_key_heads", where), _pos(cfg, "linear_num_value_heads", where),
            _pos(cfg, "linear_key_head_dim", where), _pos(cfg, "linear_value_head_dim", where),
            _pos(cfg, "linear_conv_kernel_dim", where)))
        types = cfg.get("layer_types")
        if not isinstance(types, list) or len(types) != n_layers:
            raise InputError(f"{where}: layer_types", types, f"expected a list of {n_layers} layer kinds")
        out: list[tuple[str, Layer | None]] = []
        for i, name in enumerate(types):
            if name == "full_attention":
                out.append(full)
            elif name == "linear_attention":
                out.append(("linear", gdn))
            else:
                raise InputError(f"{where}: layer_types[{i}]", name,
                                 f"expected full_attention or linear_attention for {model_type}")
        return out
    if model_type == "mamba2":
        # vllm/model_executor/models/mamba2.py, Mamba2DecoderLayer.__init__: MambaMixer2(intermediate_size=
        # getattr(config, "intermediate_size", expand x hidden_size), n_groups, num_heads, head_dim,
        # ssm_state_size=state_size, conv_kernel_size=conv_kernel); Mamba2ForCausalLM is attention-free
        # (IsAttentionFree), and MambaMixer2.get_kv_cache_spec takes one prefill-checkpoint block in align mode
        inter = cfg.get("intermediate_size") or _pos(cfg, "expand", where) * hidden
        mamba = Layer("mamba", state_family="mamba2", state=(
            _pos({"intermediate_size": inter}, "intermediate_size", where), _pos(cfg, "n_groups", where),
            _pos(cfg, "num_heads", where), _pos(cfg, "head_dim", where), _pos(cfg, "state_size", where),
            _pos(cfg, "conv_kernel", where)))
        return [("mamba", mamba)] * n_layers
    if model_type in ATTENTION_FREE_TYPES:
        # vllm/model_executor/models/mamba.py (MambaDecoderLayer: MambaMixer(intermediate_size=config.intermediate_size,
        # ssm_state_size=config.state_size, conv_kernel_size=config.conv_kernel)); FalconMambaForCausalLM is served
        # by the same class (registry.py); Mamba-1: no prefill checkpoint
        mamba = Layer("mamba", state_family="mamba1", state=(
            _pos(cfg, "intermediate_size", where), _pos(cfg, "state_size", where), _pos(cfg, "conv_kernel", where)))
        return [("mamba", mamba)] * n_layers
    if model_type in ("lfm2", "lfm2_moe"):
        # vllm/model_executor/models/lfm2.py (Lfm2Model.__init__, get_layer: layer_types[i] == "full_attention" is an
        # attention layer, any other a Lfm2ShortConvDecoderLayer; lfm2_moe.py the same): a ShortConv layer
        # (vllm/model_executor/layers/mamba/short_conv.py, get_state_shape) keeps one conv state of conv_dim / tp x
        # (conv_L_cache - 1) in the model dtype, no temporal state, and no prefill checkpoint. The conv width:
        # lfm2.py passes config.conv_dim (Lfm2ShortConvDecoderLayer, get_mamba_state_shape_from_config); lfm2_moe.py
        # passes config.hidden_size (Lfm2MoeShortConvDecoderLayer: ShortConv(dim=config.hidden_size), and its
        # get_mamba_state_shape_from_config: intermediate_size=hf_config.hidden_size); Lfm2MoeConfig has no conv_dim
        conv_width = "hidden_size" if model_type == "lfm2_moe" else "conv_dim"
        conv = Layer("short_conv", state_family="short_conv",
                     state=(_pos(cfg, conv_width, where), _pos(cfg, "conv_L_cache", where)))
        types = cfg.get("layer_types")
        if not isinstance(types, list) or len(types) != n_layers:
            raise InputError(f"{where}: layer_types", types, f"expected a list of {n_layers} layer kinds")
        return [full if name == "full_attention" else ("short_conv", conv) for name in types]
    if model_type == "nemotron_h":
        pattern = _nemotron_pattern(cfg)
        ssm_dtype = str(cfg.get("mamba_ssm_cache_dtype") or "float16")
        if ssm_dtype not in ("float32", "float16", "bfloat16"):
            raise InputError(f"{where}: mamba_ssm_cache_dtype", ssm_dtype, "expected float32, float16 or bfloat16")
        heads = _pos(cfg, "mamba_num_heads", where)
        head_dim = _pos(cfg, "mamba_head_dim", where)
        mamba = Layer("mamba", state_family="mamba2", ssm_bytes=4 if ssm_dtype == "float32" else 2,
                      state=_mamba2(cfg, where, heads * head_dim, "mamba_num_heads", "mamba_head_dim", "n_groups",
                                    "ssm_state_size", "conv_kernel"))
        out = []
        for i, code in enumerate(pattern):
            if code == "M":
                out.append(("mamba", mamba))
            elif code == "*":
                out.append(full)
            elif code not in "-E":
                raise InputError(f"{where}: hybrid_override_pattern[{i}]", code,
                                 "expected M (mamba), * (attention), - (MLP) or E (MoE)")
        return out
    if model_type == "zamba2":
        # vllm/model_executor/models/zamba2.py: every layer has a MambaMixer2 (Zamba2MambaDecoderLayer: intermediate
        # mamba_expand x hidden_size, n_mamba_heads heads of intermediate / n_mamba_heads, mamba_ngroups groups);
        # a "hybrid" layer (layers_block_type) adds the shared transformer block, whose Attention is its own per
        # hybrid layer (Zamba2Attention.dpa_list: KV cache unique for every attention layer), built with
        # num_attention_heads heads of attention_head_dim and no num_kv_heads (so as many KV heads as heads)
        inter = _pos(cfg, "mamba_expand", where) * hidden
        heads = _pos(cfg, "n_mamba_heads", where)
        if inter % heads:
            raise InputError(f"{where}: n_mamba_heads", heads, f"must divide mamba_expand x hidden_size = {inter}")
        # Zamba2ForCausalLM.get_mamba_state_shape_from_config, which vLLM's block alignment asks
        # (Platform._align_hybrid_block_size, vllm/platforms/interface.py), takes head_dim = mamba_headdim, the layer
        # intermediate // n_mamba_heads: a config where they differ aligns to a page that is not the layer's
        dims = (inter, _pos(cfg, "mamba_ngroups", where), heads, inter // heads, _pos(cfg, "mamba_d_state", where),
                _pos(cfg, "mamba_d_conv", where))
        headdim = cfg.get("mamba_headdim") or dims[3]
        mamba = Layer("mamba", state_family="mamba2", state=dims,
                      align_state=() if headdim == dims[3] else dims[:3] + (headdim,) + dims[4:])
        attn_heads, attn_dim = _pos(cfg, "num_attention_heads", where), _pos(cfg, "attention_head_dim", where)
        attention = Layer("full", kv_heads=attn_heads, head_dim=attn_dim, head_dim_v=attn_dim)
        types = cfg.get("layers_block_type")
        if not isinstance(types, list) or len(types) != n_layers:
            raise InputError(f"{where}: layers_block_type", types, f"expected a list of {n_layers} layer kinds")
        out = []
        for name in types:
            if name == "hybrid":
                out.append(("full", attention))
            out.append(("mamba", mamba))
        return out
    if model_type == "falcon_h1" and cfg.get("mamba_d_ssm") is not None:
        inter = _pos(cfg, "mamba_d_ssm", where)
    else:
        inter = int(_pos(cfg, "mamba_expand", where) * hidden)
    mamba = Layer("mamba", state_family="mamba2", state=_mamba2(
        cfg, where, inter, "mamba_n_heads", "mamba_d_head", "mamba_n_groups", "mamba_d_state", "mamba_d_conv"))
    if model_type == "falcon_h1":  # every decoder layer has an attention and a mamba mixer
        return [entry for _ in range(n_layers) for entry in (full, ("mamba", mamba))]
    # granitemoehybrid
    types = cfg.get("layer_types") or cfg.get("layers_block_type")
    if not isinstance(types, list) or len(types) != n_layers:
        raise InputError(f"{where}: layer_types", types, f"expected a list of {n_layers} layer kinds")
    out = []
    for i, name in enumerate(types):
        if name in ("attention", "full_attention"):
            out.append(full)
        elif name in ("mamba", "linear_attention"):
            out.append(("mamba", mamba))
        else:
            raise InputError(f"{where}: layer_types[{i}]", name, "expected attention or mamba for granitemoehybrid")
    return out


# --- weights ------------------------------------------------------------------------------------

GATED_MLP = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "deepseek_v2", "deepseek_v3",
             "kimi_k2", "glm4_moe_lite", "smollm3",
             "glm4_moe", "chatglm", "phi3", "gemma", "gemma2", "gemma3_text", "olmo", "olmo2", "cohere",
             "cohere2"}
PLAIN_MLP = {"opt", "starcoder2", "falcon"}


def moe_by_freq(freq: Any, layer: int) -> bool:
    """Whether ``moe_layer_freq`` makes decoder layer ``layer`` a MoE one: DeepSeek's step (every ``freq``-th layer,
    ``layer % freq == 0``; absent: every layer) or MiMo-V2-Flash's list, one entry a layer (1 MoE, 0 dense)."""
    if isinstance(freq, list):
        return bool(freq[layer]) if layer < len(freq) else True
    step = freq if isinstance(freq, int) and not isinstance(freq, bool) and freq > 0 else 1
    return layer % step == 0


def _moe(cfg: dict[str, Any], model_type: str, layer: int, n_layers: int) -> tuple[int, int, int] | None:
    """(routed experts, expert width, shared-expert width) of a MoE layer, ``None`` for a dense one."""
    if model_type == "mixtral":
        return cfg["num_local_experts"], cfg["intermediate_size"], 0
    if model_type in ("qwen2_moe", "qwen3_moe"):
        step = cfg.get("decoder_sparse_step") or 1
        if layer in (cfg.get("mlp_only_layers") or []) or (layer + 1) % step:
            return None
        shared = cfg.get("shared_expert_intermediate_size") or 0
        experts = cfg.get("num_experts") or cfg["num_local_experts"]  # transformers 5 names it num_local_experts
        return experts, cfg["moe_intermediate_size"], shared
    if model_type in TIME_MODEL_MOE:  # gpt-oss, MiniMax-M2: every layer routes to experts of intermediate_size
        experts = cfg.get("num_local_experts") or cfg["num_experts"]
        return experts, cfg["intermediate_size"], cfg.get("shared_intermediate_size") or 0
    if model_type in ("deepseek_v2", "deepseek_v3", "kimi_k2", "glm4_moe", "glm4_moe_lite"):
        if not cfg.get("n_routed_experts") or layer < (cfg.get("first_k_dense_replace") or 0) \
                or not moe_by_freq(cfg.get("moe_layer_freq"), layer):
            return None
        width = cfg["moe_intermediate_size"]
        return cfg["n_routed_experts"], width, (cfg.get("n_shared_experts") or 0) * width
    return None


# MoE model types the time model counts (kvdash.core.steptime) beside GATED_MLP: their layers are all MoE
TIME_MODEL_MOE = {"gpt_oss", "minimax_m2"}


def estimate_parameters(cfg: dict[str, Any], arch: Architecture) -> int | None:
    """Parameters of the language model from its config: embeddings (twice unless
    ``tie_word_embeddings``), per layer the attention projections (q, k, v, o; MLA's low-rank ones)
    and the MLP (gated: ``3 x hidden x intermediate``, plain: ``2 x``; MoE: every routed expert, the
    shared experts and the router).  Norms and biases are left out (well under 0.1 %).
    ``None`` where the config does not determine it (hybrids, multimodal, unknown MLP)."""
    if arch.model_type not in GATED_MLP and arch.model_type not in PLAIN_MLP:
        return None
    parts = parameter_parts(cfg, arch)
    if parts is None:
        return None
    return int(parts["embedding"] + parts["lm_head"] + parts["attention"] + parts["dense_mlp"] + parts["shared"]
               + parts["router"] + parts["experts_total"] * parts["expert_params"])


def parameter_parts(cfg: dict[str, Any], arch: Architecture) -> dict[str, int] | None:
    """The parameters of :func:`estimate_parameters`, by part: ``embedding``, ``lm_head`` (0 when tied),
    ``attention``, ``dense_mlp``, ``shared`` (shared experts), ``router``, and the routed experts:
    ``experts_total`` (experts summed over MoE layers) of ``expert_params`` each, ``moe_layers``,
    ``experts`` and ``top_k`` (experts per token); ``hidden`` and ``vocab``.  The time model
    (:mod:`kvdash.core.steptime`) reads the same parts."""
    from kvdash.core.arch import _text_config

    model_type = arch.model_type
    if model_type in HYBRID_TYPES or (model_type not in GATED_MLP and model_type not in PLAIN_MLP
                                      and model_type not in TIME_MODEL_MOE):
        return None
    if cfg.get("vision_config") or cfg.get("audio_config"):
        return None
    c = _text_config(cfg)
    c = aliases(c)
    parts = dict.fromkeys(("attention", "dense_mlp", "shared", "router", "experts_total", "expert_params",
                           "moe_layers", "experts", "top_k"), 0)
    try:
        h = int(c["hidden_size"])
        vocab = int(c.get("padded_vocab_size") or c["vocab_size"])
        n_layers = arch.decoder_layers
        heads = arch.num_attention_heads
        if model_type == "opt":
            inter = int(c["ffn_dim"])
        elif model_type in FALCON_TYPES:
            inter = int(c.get("ffn_hidden_size") or 4 * h)
        elif model_type == "chatglm":
            inter = int(c["ffn_hidden_size"])
        else:
            inter = int(c["intermediate_size"])
        tied = c.get("tie_word_embeddings")
        if tied is None:
            tied = model_type in {"gemma", "gemma2", "gemma3_text", "opt"}
        parts["embedding"] = vocab * h
        parts["lm_head"] = 0 if tied else vocab * h
        if model_type == "opt":
            parts["embedding"] += (int(c.get("max_position_embeddings") or 2048) + 2) * h  # learned positions
        parts["hidden"], parts["vocab"] = h, vocab
        layer0 = arch.layers[0]
        for i in range(n_layers):
            if layer0.kind == "mla":
                nope, rope, v = int(c["qk_nope_head_dim"]), int(c["qk_rope_head_dim"]), int(c["v_head_dim"])
                q_rank = c.get("q_lora_rank")
                q = h * q_rank + q_rank * heads * (nope + rope) if q_rank else h * heads * (nope + rope)
                kv = h * (layer0.kv_lora_rank + rope) + layer0.kv_lora_rank * heads * (nope + v)
                attn = q + kv + heads * v * h
            else:
                d, kvh = layer0.head_dim, layer0.kv_heads
                attn = h * heads * d + 2 * h * kvh * d + heads * d * h
            moe = _moe(c, model_type, i, n_layers)
            mats = 2 if model_type in PLAIN_MLP else 3
            parts["attention"] += attn
            if moe is None:
                parts["dense_mlp"] += mats * h * inter
            else:
                experts, width, shared = moe
                parts["experts_total"] += experts
                parts["expert_params"] = 3 * h * width
                parts["shared"] += 3 * h * shared
                parts["router"] += h * experts
                parts["moe_layers"] += 1
                parts["experts"] = experts
                parts["top_k"] = int(c.get("num_experts_per_tok") or c.get("experts_per_token") or 1)
    except (KeyError, TypeError, ValueError):
        return None
    return parts


def estimate_weights(cfg: dict[str, Any], arch: Architecture) -> tuple[int, str] | None:
    """Weight bytes from :func:`estimate_parameters` at 2 bytes per parameter (vLLM serves an
    unquantized checkpoint in bf16/fp16); ``None`` for quantized checkpoints and configs kvdash cannot
    count."""
    if cfg.get("quantization_config"):
        return None
    params = estimate_parameters(cfg, arch)
    if params is None:
        return None
    return 2 * params, (f"estimate: {params / 1e9:.2f}B parameters counted from config.json (embeddings, "
                        "attention and MLP/expert matrices; norms and biases left out) x 2 bytes (bf16)")


# --- README ---------------------------------------------------------------------------------------

README_START = "<!-- model-types:start (generated by: python -m kvdash.core.modeltypes) -->"
README_END = "<!-- model-types:end -->"


def readme_table() -> str:
    """The table of supported model types (docs/model-types.md) and layer kinds, from :data:`SUPPORTED`."""
    from kvdash.core.arch import KINDS

    lines = [README_START, "", "| `model_type` | models | layer kinds | conformance-checked on |", "|---|---|---|---|"]
    for model_type, (models, kinds) in SUPPORTED.items():
        estimate = "" if model_type in GATED_MLP | PLAIN_MLP else " (no weight estimate)"
        names = CONFORMANCE.get(model_type, ())
        checked = ", ".join(f"`{name}`" for name in names) or "not yet (no published config here)"
        lines.append(f"| `{model_type}` | {models}{estimate} | {kinds} | {checked} |")
    checked_types = [t for t in SUPPORTED if t in CONFORMANCE]
    lines += ["", f"{len(checked_types)} of these {len(SUPPORTED)} model types are conformance-checked against vLLM "
              "0.33.0's own code on a published config, or one written from a published config's fields where none "
              "was found (above) (`tests/data/configs/`, `conformance/vllm/expected.json`)."]
    refused = ", ".join(f"`{t}`" for t in NOT_MODELLED) or "none of the families above"
    lines += ["", f"Served by vLLM 0.33 but not modelled (refused in one line that says why): {refused}; any "
              "other model type is refused in one line naming the supported ones and what to pass instead."]
    lines += ["", "Layer kinds: " + ", ".join(f"`{k}`" for k in KINDS) + ".", "", README_END]
    return "\n".join(lines)


if __name__ == "__main__":
    print(readme_table())

"""SGLang 0.5.23's KV-pool sizing, mirrored: :func:`plan` (every figure, explained) and :data:`RULES`.

Each rule follows SGLang's own code at the 0.5.23 release (paths under ``python/sglang/srt/``), checked case by
case against that code by ``conformance/sglang/`` (``expected.json``; ``tests/test_conformance_sglang.py``):

* ``mem_fraction_static`` default: ``arg_groups/memory_hook.py`` ``handle_gpu_memory_settings`` -- by GPU memory
  tier (``nvidia-smi``'s total in MiB) a chunked-prefill size and a decode CUDA-graph batch, then
  ``reserved = 512 + 1.5 x max(chunked_prefill, 2048) + tp x pp / 8 x 1024 + 2 x decode_max_bs + prefill
  graphs`` MiB (``reserve_for_graph_mb``: 8 MiB per prefill capture size, 1.5 GiB with MLA), at least 10 GiB
  on a GPU above 60 GiB, and ``round((total - reserved) / total, 3)``;
* budget: ``mem_cache/kv_cache_configurator.py`` ``_profile_available_bytes`` --
  ``free after weights - free before weights x (1 - mem_fraction_static)``, in GB floats as SGLang computes it;
* cell size per token: ``model_executor/pool_configurator.py`` ``DefaultPoolConfigurator._compute_cell_size``
  (MHA/GQA: ``max(1, kv_heads // tp) x (head_dim + v_head_dim) x layers x dtype bytes``, ``ModelConfig.
  get_num_kv_heads``; MLA: ``(kv_lora_rank + qk_rope_head_dim) x layers x dtype bytes``);
* hybrid sliding-window pool: ``HybridSWAPoolConfigurator`` for the architectures ``configs/model_config.py``
  ``is_hybrid_swa_model`` lists (Llama 4, gpt-oss ...): full layers + ``swa_full_tokens_ratio`` (0.8) x SWA
  layers per token; Gemma 2/3 and Mistral are *not* hybrids there (every layer holds every token);
* tokens: ``available // cell``, floored to the page size (``calculate_pool_sizes``);
* ``max_running_requests``: ``KVCacheConfigurator.resolve_max_num_reqs`` -- ``int(tokens / context_len x 512)``
  clamped to 2,048..4,096, at most ``tokens // 2``;
* the start-up line: ``managers/scheduler.py`` (``max_total_num_tokens=..., chunked_prefill_size=...,
  max_prefill_tokens=..., max_running_requests=..., context_len=..., available_gpu_mem=...``);
* multimodal models: :func:`multimodal` -- ``adjust_mem_fraction_for_vlm``, prefill CUDA graphs off, the feature
  transport and ``mm_runtime_reservation_gb`` off the budget.

* the state pool of the Mamba-2 / gated-delta-net hybrids in :data:`MAMBA_MIRRORED_ARCHS`:
  ``kv_cache_configurator.py`` ``_handle_max_mamba_cache`` (the share ``mamba_full_memory_ratio``,
  ``max_mamba_cache_size``) and the cap on running requests in ``resolve_max_num_reqs``;
* pure Mamba (:data:`PURE_MAMBA_ARCHS`: ``configs/mamba.py`` Mamba-1 through ``Mamba2StateShape.create_full_rank``,
  ``configs/mamba2.py`` Mamba-2): the same state pool, 3 slots per request, and no attention layer, so
  ``pool_configurator.py`` ``DefaultPoolConfigurator`` has a 0 B cell and ``_zero_kv_max_tokens`` (context_len) as
  ``max_total_num_tokens``;
* DeepSeek sparse attention (:func:`is_dsa`): the page of 64 (``arg_groups/model_overrides/deepseek_v2.py``), the fp8
  latent of ``kv_cache_configurator.py`` ``calculate_mla_kv_cache_dim`` (656 B) and the indexer's keys,
  ``pool_configurator.py`` ``_compute_dsa_indexer_cell_size`` (``mem_cache/memory_pool.py`` ``DSATokenToKVPool``:
  ``index_head_dim + index_head_dim // 128 x 4`` uint8 per layer);
* configs SGLang serves and vLLM 0.33 refuses, read for this view alone (``load_config(..., engine="sglang")``,
  :func:`kvdash.core.modeltypes.normalise`): Ministral-3 (``model_type`` ministral3, ``models/mistral.py``
  ``Mistral3ForConditionalGeneration``: multimodal, its dict ``vision_config`` read through ``getattr``'s defaults in
  ``adjust_mem_fraction_for_vlm``, :data:`VIT_FIELDS`) and ERNIE 4.5's first-release ``Ernie4_5_ForCausalLM``
  (``models/ernie4.py``: a plain text model);
* models SGLang cannot build (:data:`NO_SGLANG_CLASS_ARCHS`: Falcon, Jamba, Zamba2): refused in SGLang's own sentence
  (``model_loader/utils.py`` ``get_model_architecture``, ``resolve_transformers_arch``), as weights that leave no
  memory are (``_profile_available_bytes``).

Not mirrored (refused in one line, :class:`NotMirrored`): other mamba / linear-attention / short-conv models, a
multimodal model whose vision-config class kvdash does not know, DeepSeek sparse attention with pooled or shared index
keys (``index_kpool``, ``indexer_types``, ``cli_factor``), speculative decoding, DP attention, pipeline parallelism.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kvdash.core.arch import Architecture
from kvdash.core.dtypes import fp8_ds_mla_token_bytes
from kvdash.core.pool import PoolShape, check_positive
from kvdash.engines.base import Budget, Caps, Gpu, Settings
from kvdash.errors import InputError

VERSION = "0.5.23"
LABEL = f"SGLang {VERSION}"
MIB = 1 << 20
GIB = 1 << 30
MAX_PREFILL_TOKENS = 16384  # arg_groups/fields: --max-prefill-tokens default
SWA_FULL_TOKENS_RATIO = 0.8  # --swa-full-tokens-ratio default
# configs/model_config.py is_hybrid_swa_model: the architectures whose pool splits into full and SWA parts
# (the ones kvdash can meet; SWA_SINK_ARCHS and MIMO_V2 included)
HYBRID_SWA_ARCHS = frozenset({
    "BeamForCausalLM", "Llama4ForConditionalGeneration", "GptOssForCausalLM", "GraniteSWAForCausalLM",
    "GraniteMoeSWAForCausalLM", "IQuestQ1ForCausalLM", "MiMoV2ForCausalLM", "MiMoV2FlashForCausalLM",
    "Step3p5ForCausalLM", "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration", "LagunaForCausalLM",
    "MellumForCausalLM",
})
# configs/model_config.py ModelConfig.__init__: multimodal is off by default for these (text-only serving)
MM_DISABLED_ARCHS = frozenset({"Gemma3ForConditionalGeneration", "Llama4ForConditionalGeneration",
                               "Step3VLForConditionalGeneration", "InklingForConditionalGeneration"})
# configs/model_config.py multimodal_breakable_cuda_graph_supported_model_archs: multimodal models that keep
# breakable prefill CUDA graphs; every other multimodal model has them turned off (cuda_graph_hook.py
# disable_breakable_cudagraph_if_incompatible, "multimodal model")
MM_BREAKABLE_GRAPH_ARCHS = frozenset({
    "MiniMaxM3SparseForConditionalGeneration", "Cohere2VisionForConditionalGeneration",
    "Glm5NextForConditionalGeneration", "InternS2MobiusForConditionalGeneration", "PaddleOCRVLForConditionalGeneration",
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration", "Qwen4ExpForConditionalGeneration",
    "MuseGlimmerForConditionalGeneration", "MuseSparkForConditionalGeneration", "KimiK3ForConditionalGeneration",
    "KimiK25ForConditionalGeneration", "MiniMaxM3SparseForCausalLM",
})
# adjust_mem_fraction_for_vlm reads vision_config.num_hidden_layers and .hidden_size from the config object SGLang
# builds; per top-level model_type, the config.json key each comes from and the class's default when absent
VIT_FIELDS: dict[str, tuple[str, int, str, int, str]] = {
    # configs/kimi_k25.py KimiK25VisionConfig: its own num_hidden_layers / hidden_size (defaults 27, 1152); the
    # config.json's vt_num_hidden_layers / vt_hidden_size are not what it reads
    "kimi_k25": ("num_hidden_layers", 27, "hidden_size", 1152, "KimiK25VisionConfig (configs/kimi_k25.py)"),
    # transformers' Qwen3VLVisionConfig / Qwen3VLMoeVisionConfig: attribute_map num_hidden_layers -> depth
    "qwen3_vl": ("depth", 27, "hidden_size", 1152, "transformers Qwen3VLVisionConfig (num_hidden_layers = depth)"),
    "qwen3_vl_moe": ("depth", 27, "hidden_size", 1152,
                     "transformers Qwen3VLMoeVisionConfig (num_hidden_layers = depth)"),
    # configs/qwen3_5.py Qwen3_5VisionConfig / Qwen3_5MoeVisionConfig: subclasses of SGLang's own
    # Qwen3VLVisionConfig (configs/qwen3_vl.py), which stores depth with no num_hidden_layers alias, so
    # adjust_mem_fraction_for_vlm's getattr default, 24 layers, is what it reads ("" = no key read)
    "qwen3_5": ("", 24, "hidden_size", 1152,
                "Qwen3_5VisionConfig (configs/qwen3_5.py): depth not read, getattr's default 24 layers"),
    "qwen3_5_moe": ("", 24, "hidden_size", 1152,
                    "Qwen3_5MoeVisionConfig (configs/qwen3_5.py): depth not read, getattr's default 24 layers"),
    # transformers' Gemma3nVisionConfig (a timm MobileNet wrapper): hidden_size (default 2048), no
    # num_hidden_layers, so getattr's default 24
    "gemma3n": ("", 24, "hidden_size", 2048,
                "transformers Gemma3nVisionConfig: no num_hidden_layers, getattr's default 24 layers"),
    # transformers' Ministral3Config (Ministral-3: models/mistral.py Mistral3ForConditionalGeneration) keeps
    # vision_config a plain dict (only text_config is turned into a PretrainedConfig, utils/hf_transformers/common.py
    # get_hf_text_config), so getattr reads neither field: its defaults, 24 layers and width 1,024 (the pixtral
    # tower's own num_hidden_layers / hidden_size are not read)
    "ministral3": ("", 24, "", 1024,
                   "Ministral3Config keeps vision_config a dict: getattr's defaults 24 layers, width 1,024"),
}
# arg_groups/model_overrides/qwen3_vl.py _HOPPER_QWEN3_VL_TYPES: the profiled large-Hopper serving defaults
HOPPER_QWEN3_VL_TYPES = frozenset({"qwen3_vl", "qwen3_vl_moe"})
VLM_CACHE_SIZE_MB = 100  # environ.py SGLANG_VLM_CACHE_SIZE_MB default (the multimodal embedding cache)
MM_FEATURE_CACHE_MB = 1024  # environ.py SGLANG_MM_FEATURE_CACHE_MB default (the CUDA IPC feature pool)
MAMBA_FULL_MEMORY_RATIO = 0.9  # --mamba-full-memory-ratio default: the mamba pool's share against the KV pool's
# kv_cache_configurator.py _calculate_mamba_ratio: MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO (3) + the extra
# buffer's tracking slots (mem_cache/allocation_sizing.py get_mamba_tracking_slots: 2 with the overlap schedule)
MAMBA_RATIO = 3 + 2
# arg_groups/overrides.py _mamba_radix_cache_resolution: without extra-buffer support
# (supports_mamba_cache_extra_buffer: _MAMBA_EXTRA_BUFFER_ARCHS or the linear-attention spec) the strategy is
# no_buffer: 3 state slots per request, the overlap schedule off, and a page size above 1 refused
# (mamba_hook.py validate_mamba_no_buffer); Lfm2MoeForCausalLM as Lfm2ForCausalLM (_MAMBA_RADIX_CACHE_ARCHS only)
MAMBA_NO_BUFFER_ARCHS = frozenset({"Lfm2ForCausalLM", "Lfm2MoeForCausalLM"})
MAMBA_RATIO_NO_BUFFER = 3
SSM_STATE_BYTES = 4  # configs/mamba_utils.py mamba2_state_dtype: the temporal state is float32 by default
# the hybrids whose state pool is mirrored: architectures SGLang builds a mamba2_cache_params for
# (configs/model_config.py mambaish_config: NemotronHConfig, Qwen3NextConfig, GraniteMoeHybridConfig, Qwen3.5's
# text config, a Qwen3NextConfig; Falcon-H1 and Qwen3.5's text-only classes Qwen3_5ForCausalLM /
# Qwen3_5MoeForCausalLM, which arg_groups/overrides.py lists in _MAMBA_RADIX_CACHE_ARCHS and
# _MAMBA_EXTRA_BUFFER_ARCHS as it lists the multimodal ones; LFM2-MoE, in the first only: no_buffer), checked
# case by case against SGLang's code (conformance/sglang); the rest refused
MAMBA_MIRRORED_ARCHS = frozenset({"NemotronHForCausalLM", "Qwen3NextForCausalLM", "GraniteMoeHybridForCausalLM",
                                  "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
                                  "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM", "FalconH1ForCausalLM",
                                  *MAMBA_NO_BUFFER_ARCHS})
# configs/mamba.py MambaConfig / FalconMambaConfig (Mamba-1: Mamba2StateShape.create_full_rank) and configs/mamba2.py
# Mamba2Config: pure state-space models, full_attention_layer_ids [] and every layer in mamba2_cache_params.layers;
# not in arg_groups/overrides.py _MAMBA_RADIX_CACHE_ARCHS, so no radix-cache strategy: 3 state slots per request
# (_calculate_mamba_ratio's base, no extra buffer) and any page size
PURE_MAMBA_ARCHS = frozenset({"MambaForCausalLM", "FalconMambaForCausalLM", "Mamba2ForCausalLM"})
# model_loader/utils.py get_model_architecture: architectures no module of SGLang 0.5.23's registry (models/*.py
# EntryClass) names, whose transformers class reports is_backend_compatible() False (_supports_attention_backend),
# so resolve_transformers_arch refuses them under the default --model-impl auto (checked by conformance/sglang)
NO_SGLANG_CLASS_ARCHS = frozenset({"FalconForCausalLM", "JambaForCausalLM", "Zamba2ForCausalLM"})
# DeepSeek sparse attention (an indexer cache beside the latent): the model_types kvdash reads for it, and
# configs/model_config.py is_deepseek_dsa's architectures among them (it also needs index_topk, which both set)
DSA_MODEL_TYPES = frozenset({"deepseek_v32", "glm_moe_dsa"})
DSA_ARCHS = frozenset({"DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM"})
# mem_cache/memory_pool.py DSATokenToKVPool: quant_block_size 128, the index keys stored as uint8 (1 B), and
# rope_storage_dtype bfloat16 (the rope part of the fp8 latent stays 2 B)
DSA_QUANT_BLOCK = 128
DSA_ROPE_BYTES = 2
DSA_PAGE_SIZE = 64  # arg_groups/model_overrides/deepseek_v2.py: page_size = 64 x index_kpool (1) on CUDA
KV_BYTES = {"bf16": 2, "fp16": 2, "auto": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}


class NotMirrored(InputError):
    """A setup whose SGLang sizing kvdash does not mirror: one line naming what SGLang would do."""

    def __init__(self, what: str):
        super().__init__("--engine-rules", "sglang", f"not mirrored for this model: {what}")
        self.what = what


@dataclass(frozen=True)
class Tier:
    """``handle_gpu_memory_settings``' GPU-memory tier: the defaults it sets."""

    chunked_prefill_size: int
    decode_max_bs: int
    text: str


def tier(gpu_mib: float, tp: int) -> Tier:
    """``arg_groups/memory_hook.py`` ``handle_gpu_memory_settings`` (SGLang 0.5.23): by ``nvidia-smi``'s total in
    MiB, the chunked-prefill size and the decode CUDA-graph max batch (``tp < 4`` halves the latter's tier)."""
    if gpu_mib < 20 * 1024:
        return Tier(2048, 8, "under 20 GiB (T4, 4080)")
    if gpu_mib < 35 * 1024:
        return Tier(4096, 48 if tp < 4 else 160, "20-35 GiB (A10, 4090, 5090)")
    if gpu_mib < 60 * 1024:
        return Tier(4096, 32 if tp < 4 else 160, "35-60 GiB (A100 40GB, L40)")
    if gpu_mib < 90 * 1024:
        return Tier(8192, 256 if tp < 4 else 512, "60-90 GiB (H100, A100 80GB)")
    if gpu_mib < 160 * 1024:
        return Tier(8192, 256 if tp < 4 else 512, "90-160 GiB (H20, H200)")
    return Tier(16384, 512, "160 GiB and above (B200, MI300)")


def prefill_graph_sizes(max_bs: int) -> list[int]:
    """``arg_groups/cuda_graph_hook.py`` ``generate_prefill_cuda_graph_batch_sizes``: the prefill capture sizes.

    >>> len(prefill_graph_sizes(8192)), len(prefill_graph_sizes(4096))
    (58, 50)
    """
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1025, 64)) + list(range(1280, 4097, 256)) + list(range(4608, max_bs + 1, 512)))
    return [s for s in sizes if s <= max_bs]


@dataclass(frozen=True)
class Multimodal:
    """SGLang 0.5.23's start-up rules for a multimodal model (``ModelConfig.is_multimodal``), one rank."""

    transport: str  # mm_feature_transport: "cpu" or "cuda_ipc"
    reservation_mib: int  # mm_runtime_reservation_gb x 1,024: taken out of the KV budget
    prefill_graphs: bool  # breakable prefill CUDA graphs kept (else off, and out of the fraction's reserve)
    vit_layers: int | None  # None: no vision_config (the fraction is not adjusted)
    vit_hidden: int | None
    vit_factor: float  # 0.95 x clamp(1 - 0.1 x (complexity - 1), 0.8, 1.05); 1.0 without a vision_config
    large_hopper_qwen3_vl: bool
    text: tuple[str, ...]


def multimodal(arch: Architecture, gpu_mib: float, max_running_requests: int | None = None) -> Multimodal | None:
    """What SGLang 0.5.23 does at start-up for a multimodal model, on an SM90 (Hopper) GPU of ``gpu_mib`` MiB as
    kvdash's SGLang view assumes (``None`` for a text-only model):

    * feature transport: ``arg_groups/serving_hook.py`` ``handle_multimodal_feature_transport`` -- ``cpu`` on one
      node; but Qwen3-VL on a Hopper GPU of 60 GiB or more gets ``cuda_ipc`` and no embedding cache
      (``arg_groups/model_overrides/qwen3_vl.py`` ``_qwen3vl_hopper_serving_overrides``, which also raises the
      feature pool to 3 GiB for ``--max-running-requests`` of 400 or more);
    * budget cut: ``mem_cache/kv_cache_configurator.py`` ``mm_runtime_reservation_gb`` -- the embedding cache
      (``SGLANG_VLM_CACHE_SIZE_MB``, 100) plus the feature pool with ``cuda_ipc`` (``SGLANG_MM_FEATURE_CACHE_MB``,
      1,024), in MiB, off ``_profile_available_bytes``' rest;
    * prefill CUDA graphs: off unless the architecture is in ``multimodal_breakable_cuda_graph_supported_model_archs``
      (``arg_groups/cuda_graph_hook.py`` ``disable_breakable_cudagraph_if_incompatible``), so out of the reserve;
    * the fraction: ``arg_groups/memory_hook.py`` ``adjust_mem_fraction_for_vlm`` -- x 0.95 x
      ``clamp(1 - 0.1 x (L x H^2 / (24 x 1024^2) - 1), 0.8, 1.05)`` for a ViT of L layers and width H.

    >>> from kvdash.core.model import from_hf_config
    >>> m = multimodal(from_hf_config({"model_type": "qwen3_vl", "architectures": ["Qwen3VLForConditionalGeneration"],
    ...     "text_config": {"model_type": "qwen3_vl_text", "num_hidden_layers": 2, "hidden_size": 64,
    ...     "num_attention_heads": 4}, "vision_config": {"depth": 27, "hidden_size": 1152}}, "x"), 81_559)
    >>> m.transport, m.reservation_mib, m.prefill_graphs, round(m.vit_factor, 6)
    ('cuda_ipc', 1024, False, 0.909736)
    """
    if not is_multimodal(arch):
        return None
    top = str(arch.facts.get("top_model_type") or "")
    archs = arch.facts.get("architectures", ())
    hopper_qwen = gpu_mib >= 60 * 1024 and top in HOPPER_QWEN3_VL_TYPES
    transport = "cuda_ipc" if hopper_qwen else "cpu"
    vlm_cache = 0 if hopper_qwen else VLM_CACHE_SIZE_MB
    pool = 0
    if transport == "cuda_ipc":
        pool = 3 * 1024 if max_running_requests is not None and max_running_requests >= 400 else MM_FEATURE_CACHE_MB
    graphs = any(a in MM_BREAKABLE_GRAPH_ARCHS for a in archs)
    text = [f"multimodal: feature transport {transport}" + (
        " (Qwen3-VL on a Hopper GPU of 60 GiB or more: model_overrides/qwen3_vl.py)" if hopper_qwen else
        " (one node: serving_hook.py handle_multimodal_feature_transport)"),
        f"multimodal budget cut {vlm_cache + pool:,} MiB = embedding cache {vlm_cache} + feature pool {pool} "
        "(kv_cache_configurator.py mm_runtime_reservation_gb)",
        "prefill CUDA graphs " + ("kept (multimodal_breakable_cuda_graph_supported_model_archs)" if graphs else
                                  "off for a multimodal model (cuda_graph_hook.py)")]
    vision = arch.facts.get("vision_config")
    layers = hidden = None
    factor = 1.0
    if vision is not None:
        fields = VIT_FIELDS.get(top)
        if fields is None:
            raise NotMirrored(f"how SGLang {VERSION}'s config class for model_type {top or '?'} reads its vision "
                              "tower (adjust_mem_fraction_for_vlm)")
        lkey, ldef, hkey, hdef, source = fields
        layers, hidden = int(vision.get(lkey, ldef) if lkey else ldef), int(vision.get(hkey, hdef) if hkey else hdef)
        ratio = layers * hidden ** 2 / (24 * 1024 ** 2)
        factor = 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))
        text.append(f"ViT {layers} layers x width {hidden} ({source}): fraction x 0.95 x clamp(1 - 0.1 x "
                    f"({ratio:.4f} - 1), 0.8, 1.05) = x {factor:.6f} (memory_hook.py adjust_mem_fraction_for_vlm)")
    return Multimodal(transport, vlm_cache + pool, graphs, layers, hidden, factor, hopper_qwen, tuple(text))


@dataclass(frozen=True)
class Fraction:
    value: float
    reserved_mib: float
    terms: tuple[tuple[str, float], ...]
    chunked_prefill_size: int
    decode_max_bs: int
    prefill_graphs: int
    tier: str
    given: bool = False
    vlm_factor: float = 1.0  # adjust_mem_fraction_for_vlm's factor on the rounded fraction (1.0: none)


def mem_fraction_static(gpu_mib: float, tp: int, use_mla: bool, model_path: str = "", pp: int = 1,
                        chunked_prefill_size: int | None = None, max_running_requests: int | None = None,
                        given: float | None = None, mm: Multimodal | None = None) -> Fraction:
    """SGLang 0.5.23's ``mem_fraction_static`` default (``handle_gpu_memory_settings`` with
    ``reserve_for_graph_mb``; aggregated serving, CUDA graphs on, no speculative decoding, no DP attention).

    Worked: an H200 (143,771 MiB), TP 8, Llama-3.1-70B: chunked prefill 8,192, decode max batch 512, 58 prefill
    capture sizes: 512 + 12,288 + 1,024 + 1,024 + 464 = 15,312 MiB; (143,771 - 15,312) / 143,771 = 0.8935 -> 0.893.
    """
    t = tier(gpu_mib, tp)
    cps = chunked_prefill_size if chunked_prefill_size is not None else t.chunked_prefill_size
    max_bs = t.decode_max_bs
    if max_running_requests is not None and max_bs > max_running_requests:
        max_bs = max_running_requests
    # model_overrides/qwen3_vl.py expand_multimodal_decode_graph_to_running_limit: up to 512 running requests
    if mm is not None and mm.large_hopper_qwen3_vl and max_running_requests is not None \
            and max_bs < max_running_requests <= 512:
        max_bs = max_running_requests
    graphs = mm is None or mm.prefill_graphs
    prefill_max = min(8192, cps) if use_mla else cps
    if "llama-2" in model_path.lower():  # memory_hook.py: "For Llama2 series models, max_bs is limited to 4096"
        prefill_max = min(prefill_max, 4096)
    n_prefill = len(prefill_graph_sizes(prefill_max)) if graphs else 0
    activation = max(cps, 2048) if cps > 0 else max(MAX_PREFILL_TOKENS, 2048)
    terms = [("constant metadata", 512.0), ("activations: 1.5 x max(chunked_prefill_size, 2048)", activation * 1.5),
             ("parallel slack: tp x pp / 8 x 1,024", tp * pp / 8 * 1024),
             ("decode CUDA graphs: 2 x max batch", max_bs * 2.0),
             ("prefill CUDA graphs: " + ("1.5 GiB with MLA" if use_mla else f"{n_prefill} capture sizes x 8"),
              (1.5 * 1024 if use_mla else n_prefill * 8.0) if graphs else 0.0)]
    reserved = 512.0
    reserved += activation * 1.5
    reserved += tp * pp / 8 * 1024
    reserved += max_bs * 2 + ((1.5 * 1024 if use_mla else n_prefill * 8) if graphs else 0)
    if gpu_mib > 60 * 1024 and reserved < 10 * 1024:
        terms.append(("floor: at least 10 GiB above 60 GiB", 10 * 1024 - reserved))
        reserved = max(reserved, 10 * 1024)
    value = given if given is not None else round((gpu_mib - reserved) / gpu_mib, 3)
    vlm = mm.vit_factor if mm is not None and given is None else 1.0
    if vlm != 1.0:  # memory_hook.py adjust_mem_fraction_for_vlm, on the default only
        value = value * vlm
    return Fraction(value, reserved, tuple(terms), cps, max_bs, n_prefill, t.text, given is not None, vlm)


def context_len(arch: Architecture) -> int:
    """``utils/hf_transformers/common.py`` ``get_context_length``: the first of ``max_sequence_length``,
    ``seq_length``, ``max_seq_len``, ``model_max_length``, ``max_position_embeddings`` the config has, times
    ``rope_scaling.factor`` unless the scaling names ``original_max_position_embeddings`` or is ``llama3``;
    2,048 without any."""
    fields: Mapping[str, int] = arch.facts.get("length_fields") or {}
    rope: Mapping[str, Any] = arch.facts.get("rope_scaling") or {}
    factor: float = 1
    if rope:
        factor = rope.get("factor", 1) or 1
        if "original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3":
            factor = 1
    for key in ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings"):
        if key in fields:
            return int(factor * fields[key])
    if not arch.facts:
        return arch.max_context
    return 2048


def is_hybrid_swa(arch: Architecture) -> bool:
    """``configs/model_config.py`` ``is_hybrid_swa_model`` on the config's ``architectures``."""
    return any(a in HYBRID_SWA_ARCHS for a in arch.facts.get("architectures", ()))


def swa_layer_ids(arch: Architecture) -> tuple[list[int], list[int]]:
    """``get_hybrid_layer_ids``: Llama 4 -- every fourth layer full (``(i + 1) % 4 == 0``), the rest SWA; the
    sliding-window-with-sinks architectures (gpt-oss) -- ``layer_types``' ``sliding_attention`` entries."""
    n = arch.decoder_layers or arch.num_layers
    pattern = arch.facts.get("hybrid_layer_pattern") or ()
    if any(a in ("MiMoV2ForCausalLM", "MiMoV2FlashForCausalLM") for a in arch.facts.get("architectures", ())) \
            and len(pattern) >= n:  # MiMo-V2: hybrid_layer_pattern, 1 = SWA
        return [i for i in range(n) if pattern[i] == 1], [i for i in range(n) if pattern[i] == 0]
    if "Llama4ForConditionalGeneration" in arch.facts.get("architectures", ()):
        return [i for i in range(n) if (i + 1) % 4 != 0], [i for i in range(n) if (i + 1) % 4 == 0]
    swa = [i for i, layer in enumerate(arch.layers) if layer.kind == "sliding"]
    return swa, [i for i in range(n) if i not in swa]


def is_multimodal(arch: Architecture) -> bool:
    """``ModelConfig.is_multimodal`` as far as kvdash reads it: a config nesting ``text_config`` (SGLang's
    ``hf_config is not hf_text_config``), unless its first architecture is one SGLang serves text-only by default
    (Gemma 3, Llama 4 ...)."""
    archs = arch.facts.get("architectures", ())
    return bool(arch.facts.get("nested_text_config")) and not (archs and archs[0] in MM_DISABLED_ARCHS)


def mamba_mirrored(arch: Architecture) -> bool:
    """Whether kvdash mirrors SGLang's state pool for this model: full attention beside the Mamba-2 or
    gated-delta-net state layers of an architecture in :data:`MAMBA_MIRRORED_ARCHS`, or a pure Mamba-1 / Mamba-2
    model (:data:`PURE_MAMBA_ARCHS`: state layers only)."""
    archs = arch.facts.get("architectures", ())
    if archs and archs[0] in PURE_MAMBA_ARCHS:
        return not arch.attention_layers and all(layer.state_family in ("mamba1", "mamba2")
                                                 for layer in arch.state_layers)
    return bool(arch.attention_layers) and not is_hybrid_swa(arch) and bool(archs) \
        and archs[0] in MAMBA_MIRRORED_ARCHS and all(layer.kind == "full" for layer in arch.attention_layers)


def is_pure_mamba(arch: Architecture) -> bool:
    """A model of :data:`PURE_MAMBA_ARCHS`: SGLang's KV cell is 0 B (no attention layer) and its pool the state
    slots alone."""
    archs = arch.facts.get("architectures", ())
    return bool(archs) and archs[0] in PURE_MAMBA_ARCHS and bool(arch.state_layers) and not arch.attention_layers


def sglang_refuses_model(arch: Architecture) -> str:
    """What SGLang 0.5.23 says when it cannot build the model at all ('' when it can): an architecture of
    :data:`NO_SGLANG_CLASS_ARCHS` (``model_loader/utils.py`` ``resolve_transformers_arch``, under
    ``get_model_architecture``)."""
    archs = arch.facts.get("architectures", ())
    if archs and not any(a not in NO_SGLANG_CLASS_ARCHS for a in archs):
        return (f"{archs[0]} has no SGlang implementation and the Transformers implementation is not compatible "
                "with SGLang")
    return ""


def is_dsa(arch: Architecture) -> bool:
    """``configs/model_config.py`` ``is_deepseek_dsa``: DeepSeek sparse attention's indexer cache beside the MLA
    latent (the model types kvdash reads for it, :data:`DSA_MODEL_TYPES`)."""
    return arch.model_type in DSA_MODEL_TYPES


def mamba_cache_per_req(arch: Architecture, tp: int) -> int:
    """``mamba2_cache_params.mamba_cache_per_req``: one request's conv state (model dtype) and temporal state
    (float32, ``mamba2_state_dtype``) over every state layer, on one rank."""
    from kvdash.core.state import state_elements

    total = 0
    for layer in arch.state_layers:
        conv, ssm = state_elements(layer.state_family, layer.state, tp)
        total += conv * layer.conv_bytes + ssm * SSM_STATE_BYTES
    return total


def refusal(arch: Architecture, tp: int, pp: int = 1) -> str:
    """Why kvdash cannot give SGLang's pool for this setup ('' when it can)."""
    if any(layer.kind not in ("full", "sliding", "chunked", "mla") and not layer.is_state for layer in arch.layers) \
            or (arch.state_layers and not mamba_mirrored(arch)):
        return ("SGLang 0.5.23's mamba / linear-attention / short-conv state pool (mamba_full_memory_ratio, "
                "max_mamba_cache_size: kv_cache_configurator.py _handle_max_mamba_cache)")
    if is_dsa(arch):
        archs = arch.facts.get("architectures", ())
        # configs/model_config.py: get_dsa_index_kpool (pooled index keys, a page of 64 x index_kpool) and
        # dsa_layer_skips_topk (indexer_types "shared", cli_factor > 1: layers without index keys of their own);
        # index_skip_topk_offset only moves which layers index_topk_freq skips, and kvdash reads only freq 1
        dk = arch.facts.get("dsa_keys") or {}
        keys = [k for k, bad in (("index_kpool", dk.get("index_kpool", 1) != 1),
                                 ("indexer_types", "shared" in list(dk.get("indexer_types") or ())),
                                 ("cli_factor", (dk.get("cli_factor") or 1) != 1)) if bad]
        if not archs or archs[0] not in DSA_ARCHS:
            return (f"DeepSeek sparse attention's indexer cache for architecture {archs[0] if archs else '?'} "
                    "(configs/model_config.py is_deepseek_dsa names DeepseekV32ForCausalLM, GlmMoeDsaForCausalLM)")
        if keys:
            return (f"DeepSeek sparse attention's indexer cache with {', '.join(keys)} (pooled or shared index keys: "
                    "model_executor/pool_configurator.py _compute_dsa_indexer_cell_size)")
    if pp != 1:
        return "pipeline parallelism (per-stage layer split and the MIN over stages)"
    return ""


@dataclass(frozen=True)
class Plan:
    """SGLang 0.5.23's pool on one rank, every figure with its rule."""

    fraction: Fraction
    page_size: int
    cell_bytes: float  # bytes per token of max_total_num_tokens (a float for the hybrid SWA pool)
    cell_text: str
    pool: str  # "default", "hybrid_swa" or "state_only" (pure Mamba: a 0 B cell, the state slots are the pool)
    free_before: int
    free_after: int
    available_bytes: int
    max_total_num_tokens: int
    swa_tokens: int | None
    max_running_requests: int
    context_len: int
    layers: int
    full_layers: int = 0
    swa_layers: int = 0
    full_per_token: int = 0
    swa_per_token: int = 0
    lines: tuple[str, ...] = field(default=())
    mamba_slots: int = 0  # max_mamba_cache_size (0: no state pool)

    def startup_line(self) -> str:
        """``managers/scheduler.py`` (tp rank 0); ``available_gpu_mem`` is read after the pools and CUDA graphs
        are allocated, which no sizing rule decides, so kvdash leaves it out."""
        return (f"max_total_num_tokens={self.max_total_num_tokens}, chunked_prefill_size="
                f"{self.fraction.chunked_prefill_size}, max_prefill_tokens={MAX_PREFILL_TOKENS}, "
                f"max_running_requests={self.max_running_requests}, context_len={self.context_len}, "
                "available_gpu_mem=")


def read_free(free: int, ranks: int) -> float:
    """``get_available_gpu_memory(distributed=True)``: ``torch.tensor(free, dtype=torch.float32)`` all-reduced with
    MIN, so above one rank the reading is rounded to the nearest float32 (16 KiB steps near 140 GB).

    >>> read_free(149_555_960_320, 2) - 149_555_960_320
    -6656.0
    """
    if ranks <= 1:
        return float(free)
    return float(struct.unpack("f", struct.pack("f", free))[0])


def kv_heads_per_rank(total: int, tp: int) -> int:
    """``ModelConfig.get_num_kv_heads``: ``max(1, total // tp)`` (a rank keeps at least one KV head)."""
    return max(1, total // tp)


def plan(arch: Architecture, gpu_mib: float, tp: int, kv_dtype: str, free_before: int, weights_per_rank: int,
         page_size: int | None = None, fraction: float | None = None, model_path: str = "",
         max_running_requests: int | None = None, chunked_prefill_size: int | None = None) -> Plan:
    """SGLang 0.5.23's pool for ``arch`` at tensor-parallel ``tp`` on a GPU of ``gpu_mib`` MiB (``nvidia-smi``),
    with ``free_before`` bytes free before the weights load and ``weights_per_rank`` bytes of weights.
    Raises :class:`NotMirrored` for what kvdash does not mirror, :class:`InputError` where SGLang refuses."""
    no_class = sglang_refuses_model(arch)
    if no_class:
        raise InputError("--model", arch.name, f"SGLang {VERSION} refuses: {no_class} (model_loader/utils.py "
                                               "get_model_architecture, resolve_transformers_arch)")
    why = refusal(arch, tp)
    if why:
        raise NotMirrored(why)
    kv_bytes = KV_BYTES.get(kv_dtype)
    if kv_bytes is None:
        raise InputError("--kv-dtype", kv_dtype, "SGLang's view takes bf16 or fp8")
    page = check_positive("--block-size", page_size) if page_size is not None else 1
    dsa = is_dsa(arch)
    if dsa:  # arg_groups/model_overrides/deepseek_v2.py: "Setting page size to 64 for DeepSeek DSA." (any request)
        page = DSA_PAGE_SIZE
    mm = multimodal(arch, gpu_mib, max_running_requests)
    f = mem_fraction_static(gpu_mib, tp, arch.use_mla, model_path or arch.name,
                            chunked_prefill_size=chunked_prefill_size, max_running_requests=max_running_requests,
                            given=fraction, mm=mm)
    free_after = free_before - weights_per_rank
    if free_after <= 0:  # the weights do not load: torch.OutOfMemoryError in the model loader, before any sizing
        raise InputError("--weights", weights_per_rank, f"SGLang {VERSION} cannot load the weights: "
                         f"{weights_per_rank:,} B per rank exceed the {free_before:,} B free before loading them (GPU "
                         "total less 1 GiB of CUDA context and NCCL buffers); CUDA out of memory")
    # kv_cache_configurator.py _profile_available_bytes: GB floats (utils/common.py get_available_gpu_memory);
    # with more than one rank both readings are a MIN over ranks through a float32 tensor
    pre_gb = read_free(free_before, tp) / GIB
    rest = read_free(free_after, tp) / GIB - pre_gb * (1 - f.value)
    if mm is not None:  # kv_cache_configurator.py mm_runtime_reservation_gb, in GB as SGLang subtracts it
        rest -= mm.reservation_mib / 1024
    mamba_slots = 0
    per_req = 0
    ratio = MAMBA_RATIO
    if arch.state_layers and any(a in MAMBA_NO_BUFFER_ARCHS for a in arch.facts.get("architectures", ())[:1]):
        ratio = MAMBA_RATIO_NO_BUFFER
        if page != 1:
            raise InputError("--block-size", page, f"SGLang {VERSION} refuses: no_buffer only supports page_size=1 "
                             "(this model has no mamba extra buffer: mamba_hook.py validate_mamba_no_buffer)")
    if is_pure_mamba(arch):
        ratio = MAMBA_RATIO_NO_BUFFER  # no radix-cache strategy (overrides.py): _calculate_mamba_ratio's base 3
    if arch.state_layers:
        # kv_cache_configurator.py _handle_max_mamba_cache (no --max-mamba-cache-size): the mamba pool takes
        # ratio / (1 + ratio) of the rest, K = (budget - slot) // slot slots, and (K + 1) slots (one padding) leave
        per_req = mamba_cache_per_req(arch, tp)
        budget = rest * MAMBA_FULL_MEMORY_RATIO / (1 + MAMBA_FULL_MEMORY_RATIO) * (1 << 30)
        mamba_slots = int((budget - per_req) // per_req)
        if mamba_slots <= 0:
            raise InputError("--gpu-memory", None, f"SGLang {VERSION} refuses: not enough GPU memory for the "
                             f"hybrid state cache (max_mamba_cache_size={mamba_slots}, {per_req:,} B per request)")
        rest -= (mamba_slots + 1) * per_req / (1 << 30)
    if rest <= 0:
        minimum = 1 - (free_after / GIB) / pre_gb
        raise InputError("--weights", weights_per_rank,
                         f"SGLang {VERSION} refuses: loaded weights leave no GPU memory for the KV cache under "
                         f"mem_fraction_static={f.value}; it needs above {math.ceil(minimum * 1000) / 1000:.3f}")
    available = int(rest * GIB)
    # a hybrid's KV pool holds its attention layers only (the state layers are the mamba pool)
    n_layers = len(arch.attention_layers) if arch.state_layers else arch.num_layers
    if arch.model_type == "gemma3n_text" and arch.decoder_layers:
        # configs/model_config.py ModelConfig: num_attention_layers = num_hidden_layers, and the token pool holds a
        # buffer for each: Gemma 3n's KV-shared layers (models/gemma3n_causal.py reads an earlier layer's cache)
        # keep theirs, where vLLM gives them none (SGLang 0.5.23 on gemma-3n-e4b-text: 35 x 2,048 = 71,680 B/token)
        n_layers = arch.decoder_layers
    lines = [f"mem_fraction_static {f.value}: " + ("given" if f.given else
             f"round(({gpu_mib:,.0f} MiB - {f.reserved_mib:,.0f} MiB reserved) / {gpu_mib:,.0f} MiB, 3)"
             + (f" x {f.vlm_factor:.6f} (adjust_mem_fraction_for_vlm)" if f.vlm_factor != 1.0 else "") + ", "
             f"GPU tier {f.tier} (arg_groups/memory_hook.py handle_gpu_memory_settings)"),
             f"budget {available:,} B = free after weights {read_free(free_after, tp):,.0f} - free before weights "
             f"{read_free(free_before, tp):,.0f} x (1 - {f.value})"
             # above one rank the equation holds for the figures SGLang reads, not the bytes free
             + (f" (each the MIN over {tp} ranks through a float32: {free_after:,} and {free_before:,} B free)"
                if tp > 1 and (read_free(free_after, tp), read_free(free_before, tp)) != (free_after, free_before)
                else "")
             + (f" - {mm.reservation_mib:,} MiB multimodal" if mm else "")
             # a state pool comes off the same rest before the KV pool is sized (_handle_max_mamba_cache)
             + (f" - {mamba_slots + 1:,} state slots x {per_req:,} B (the mamba pool, below)" if mamba_slots else "")
             + " (mem_cache/kv_cache_configurator.py _profile_available_bytes)"]
    if mm is not None:
        lines[1:1] = list(mm.text)
    if mamba_slots:
        lines.append(f"mamba pool: max_mamba_cache_size {mamba_slots:,} = (rest x {MAMBA_FULL_MEMORY_RATIO} / "
                     f"{1 + MAMBA_FULL_MEMORY_RATIO:.1f} - {per_req:,} B) // {per_req:,} B per request; "
                     f"{mamba_slots + 1:,} slots off the budget, running requests at most {mamba_slots:,} // "
                     f"{ratio} (kv_cache_configurator.py _handle_max_mamba_cache, resolve_max_num_reqs)")
    ctx = context_len(arch)
    if dsa:
        lines.append(f"page size {page}: SGLang sets it for DeepSeek sparse attention, whatever --page-size asks "
                     "(arg_groups/model_overrides/deepseek_v2.py: 64 x index_kpool)")
    if is_hybrid_swa(arch):
        swa_ids, full_ids = swa_layer_ids(arch)
        layer = arch.first("full", "sliding", "chunked")
        assert layer is not None
        per_token = kv_heads_per_rank(layer.kv_heads, tp) * (layer.head_dim + (layer.head_dim_v or layer.head_dim)) \
            * kv_bytes
        # ModelConfig.get_swa_num_kv_heads, swa_head_dim, swa_v_head_dim: the SWA layers' own geometry where the
        # config gives one (MiMo-V2), else the full layers'
        g = arch.facts.get("swa") or {}
        swa_hd = g.get("swa_head_dim", layer.head_dim)
        swa_per_token = kv_heads_per_rank(g.get("swa_num_key_value_heads", layer.kv_heads), tp) \
            * (swa_hd + g.get("swa_v_head_dim", swa_hd)) * kv_bytes
        cell: float = per_token * len(full_ids) + SWA_FULL_TOKENS_RATIO * (swa_per_token * len(swa_ids))
        tokens = int(available // cell)
        full = tokens // page * page
        swa = int(full * SWA_FULL_TOKENS_RATIO) // page * page
        window = max((x.window for x in arch.layers if x.kind in ("sliding", "chunked")), default=0)
        if window and window + page >= swa:
            raise InputError("--gpu-memory", None, f"SGLang {VERSION} refuses: the SWA pool ({swa} tokens) cannot "
                             f"hold one request (sliding window {window} + page {page})")
        cell_text = (f"{len(full_ids)} full x {per_token:,} B + {SWA_FULL_TOKENS_RATIO} x {len(swa_ids)} SWA x "
                     f"{swa_per_token:,} B = {cell:,.1f} B per full-pool token (HybridSWAPoolConfigurator)")
        lines.append(f"hybrid SWA pool (is_hybrid_swa_model): full {full:,} tokens, SWA {swa:,} tokens "
                     f"(swa_full_tokens_ratio {SWA_FULL_TOKENS_RATIO})")
        mrr = max_num_reqs(full, ctx, max_running_requests)
        return Plan(f, page, cell, cell_text, "hybrid_swa", free_before, free_after, available, full, swa, mrr, ctx,
                    n_layers, len(full_ids), len(swa_ids), per_token, swa_per_token, tuple(lines))
    if is_pure_mamba(arch):
        # pool_configurator.py DefaultPoolConfigurator: no attention layer, so _cell_size 0 and the token pool is
        # _zero_kv_max_tokens = --max-total-tokens or context_len, floored to the page (calculate_pool_sizes)
        tokens = ctx // page * page
        if tokens <= 0:
            raise InputError("--block-size", page, f"SGLang {VERSION} refuses: Not enough memory. Please try to "
                             f"increase --mem-fraction-static. (context_len {ctx} below page size {page}: "
                             "pool_configurator.py MemoryPoolConfig)")
        lines.append(f"max_total_num_tokens {tokens:,} = context_len {ctx:,} floored to page {page}: no attention "
                     "layer, a KV cell of 0 B (DefaultPoolConfigurator._zero_kv_max_tokens); the state slots are the "
                     "pool")
        mrr = min(max_num_reqs(tokens, ctx, max_running_requests), mamba_slots // ratio)
        if mrr <= 0:
            raise InputError("--gpu-memory", None, f"SGLang {VERSION} refuses: the hybrid state cache is too small "
                             f"to serve any requests (max_mamba_cache_size={mamba_slots}, ratio {ratio})")
        return Plan(f, page, 0, "no attention layer: 0 B per token (pure Mamba: the state slots are the pool)",
                    "state_only", free_before, free_after, available, tokens, None, mrr, ctx, 0, 0, 0, 0, 0,
                    tuple(lines), mamba_slots)
    if arch.use_mla:
        mla = arch.first("mla")
        assert mla is not None
        if dsa and kv_bytes == 1:
            # kv_cache_configurator.py calculate_mla_kv_cache_dim, DSA with an fp8 KV cache on the default (scaled)
            # backends: kv_lora_rank fp8 + one fp32 scale per 128 + the rope part in bf16
            if mla.kv_lora_rank % DSA_QUANT_BLOCK:
                raise InputError("--kv-dtype", kv_dtype, f"SGLang {VERSION} refuses: kv_lora_rank "
                                 f"{mla.kv_lora_rank} must be multiple of quant_block_size {DSA_QUANT_BLOCK}")
            # the layout is vLLM's fp8_ds_mla, byte for byte: one formula for both engines
            latent = fp8_ds_mla_token_bytes(mla.kv_lora_rank, mla.qk_rope_head_dim)
            latent_text = (f"fp8 latent: kv_lora_rank {mla.kv_lora_rank} + {mla.kv_lora_rank // DSA_QUANT_BLOCK} "
                           f"scales x 4 + qk_rope_head_dim {mla.qk_rope_head_dim} x {DSA_ROPE_BYTES} (bf16) = "
                           f"{latent} B")
        else:
            latent = mla.latent_dim * kv_bytes
            latent_text = (f"(kv_lora_rank {mla.kv_lora_rank} + qk_rope_head_dim {mla.qk_rope_head_dim}) x "
                           f"{kv_bytes} B")
        icell = latent * n_layers
        cell_text = f"MLA: {latent_text} x {n_layers} layers"
        if dsa:
            # pool_configurator.py _compute_dsa_indexer_cell_size: index_head_dim + index_head_dim // 128 x 4 uint8
            # per token in every indexed layer (DSATokenToKVPool's index_k_with_scale_buffer), whatever the KV dtype
            index = sum(layer.index_bytes for layer in arch.layers if layer.kind == "mla")
            icell += index
            cell_text += f" + DSA indexer keys {mla.index_bytes} B x {n_layers} layers"
        cell_text += f" = {icell:,} B (replicated on every rank)"
    else:
        layer = arch.first("full", "sliding", "chunked")
        if layer is None:
            raise NotMirrored("a model without attention layers")
        heads = kv_heads_per_rank(layer.kv_heads, tp)
        hv = layer.head_dim_v or layer.head_dim
        icell = heads * (layer.head_dim + hv) * n_layers * kv_bytes
        cell_text = (f"max(1, {layer.kv_heads} // {tp}) = {heads} KV heads x ({layer.head_dim} + {hv}) x "
                     f"{n_layers} layers x {kv_bytes} B = {icell:,} B")
        if arch.counts.get("sliding") or arch.counts.get("chunked"):
            cell_text += " (SGLang keeps every token in every layer: not a hybrid-SWA architecture)"
    tokens = available // icell // page * page
    if tokens <= 0:  # pool_configurator.py MemoryPoolConfig.__post_init__
        raise InputError("--gpu-memory", None, f"SGLang {VERSION} refuses: Not enough memory. Please try to increase "
                         f"--mem-fraction-static. Current value: mem_fraction_static={f.value}")
    lines.append(f"max_total_num_tokens {tokens:,} = {available:,} // {icell:,} floored to page {page} "
                 "(DefaultPoolConfigurator.calculate_pool_sizes)")
    mrr = max_num_reqs(tokens, ctx, max_running_requests)
    if mamba_slots:  # resolve_max_num_reqs: capped by the mamba state cache
        mrr = min(mrr, mamba_slots // ratio)
        if mrr <= 0:
            raise InputError("--gpu-memory", None, f"SGLang {VERSION} refuses: the hybrid state cache is too small "
                             f"to serve any requests (max_mamba_cache_size={mamba_slots}, ratio {ratio})")
    return Plan(f, page, icell, cell_text, "default", free_before, free_after, available, tokens, None, mrr, ctx,
                n_layers, n_layers, 0, icell // n_layers if n_layers else 0, 0, tuple(lines), mamba_slots)


def max_num_reqs(tokens: int, ctx: int, requested: int | None = None) -> int:
    """``KVCacheConfigurator.resolve_max_num_reqs``: ``int(tokens / context_len x 512)`` clamped to
    2,048..4,096, at most ``tokens // 2``; a requested ``--max-running-requests`` is kept up to ``tokens // 2``.

    >>> max_num_reqs(2_832_693, 131_072)   # 11,065 clamped to 4,096
    4096
    """
    if requested is not None:
        return min(max(1, requested), tokens // 2)
    estimated = max(min(int(tokens / ctx * 512), 4096), 2048)
    return min(estimated, tokens // 2)


class SglangRules:
    """SGLang 0.5.23 behind :class:`~kvdash.engines.base.EngineRules`, as far as its questions have SGLang
    answers; the block/group questions (vLLM's layout) raise :class:`NotImplementedError` with the reason."""

    name = "sglang"
    version = VERSION
    label = LABEL
    default_util = "auto"  # mem_fraction_static is computed per GPU, TP and model: mem_fraction_static()
    metric_prefix = "sglang:"

    def check_max_model_len(self, arch: Architecture, max_model_len: int, allow_long: bool,
                            field: str = "--max-model-len") -> None:
        # configs/model_config.py _derive_context_length: above the derived length needs
        # SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1
        derived = context_len(arch)
        if max_model_len > derived and not allow_long:
            raise InputError(field, max_model_len, f"SGLang {VERSION} refuses a context length above the derived "
                             f"{derived:,} (SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 allows it)")

    def check_one_request_fits(self, budget: int, block_bytes: int, blocks_per_request: int, max_model_len: int,
                               estimated_max_len: int, field: str = "--max-model-len") -> None:
        raise NotImplementedError("vLLM's start check (one request of max_model_len beside the null block, "
                                  "get_kv_cache_configs) is not mirrored for SGLang, whose pool has no blocks")

    def caps(self, gpu: Gpu, settings: Settings) -> Caps:
        mib = (gpu.memory or 0) / MIB
        t = tier(mib, 1)
        cps = settings.max_num_batched_tokens or t.chunked_prefill_size
        seqs = settings.max_num_seqs
        return Caps(seqs or 0, cps, "given with --max-running-requests" if seqs else
                    "resolved from the pool (resolve_max_num_reqs)",
                    "given" if settings.max_num_batched_tokens else "default", t.text)

    def block_size(self, arch: Architecture, kv_dtype: str, requested: int | str, gpu: Gpu) -> tuple[int, str]:
        if is_dsa(arch):  # arg_groups/model_overrides/deepseek_v2.py, whatever --page-size asks
            return DSA_PAGE_SIZE, (f"{DSA_PAGE_SIZE}: SGLang's page for DeepSeek sparse attention "
                                   "(arg_groups/model_overrides/deepseek_v2.py: 64 x index_kpool)")
        if requested == "auto":
            return 1, "1: SGLang's page size on CUDA (--page-size unset)"
        if isinstance(requested, str):
            raise InputError("--block-size", requested, "expected a positive integer or 'auto'")
        return check_positive("--block-size", requested), f"{requested}: requested (--page-size)"

    def pool(self, arch: Architecture, kv_dtype: str, kv_scales: str, tp: int, pp: int, block_size: int,
             prefix_caching: bool) -> list[PoolShape]:
        raise NotImplementedError("SGLang has no KV-cache groups: its pool is tokens x cell size (plan())")

    def budget(self, total: int, util: Decimal, weights_per_rank: int, reserve: int) -> Budget:
        # _profile_available_bytes with free before weights = total - reserve (kvdash's reserve stands for what
        # is taken before the weights: CUDA context, NCCL) and util = mem_fraction_static
        free_before = total - reserve
        rest = (free_before - weights_per_rank) / GIB - free_before / GIB * (1 - float(util))
        return Budget(free_before, int(rest * GIB),
                      "free after weights - free before weights x (1 - mem_fraction_static)")

    def auto_reserve(self, arch: Architecture, tp: int, pp: int, caps: Caps, gpu: Gpu,
                     settings: Settings) -> dict[str, Any]:
        raise NotImplementedError("SGLang reserves through mem_fraction_static, not a separate reserve")

    def in_flight_tokens(self, caps: Caps, settings: Settings) -> int:
        raise NotImplementedError("SGLang sizes no per-request sliding-window blocks")

    def blocks_per_request(self, x: Mapping[str, Any]) -> Any:
        raise NotImplementedError("SGLang caps running requests by resolve_max_num_reqs, not blocks per request")

    def startup_line(self, kv_tokens: int, max_model_len: int, concurrency: float) -> str:
        raise NotImplementedError("SGLang's start-up line needs the whole plan: Plan.startup_line()")

    def caps_text(self, caps: Caps) -> str:
        return (f"chunked_prefill_size {caps.max_num_batched_tokens:,} ({caps.tokens_basis}, GPU tier {caps.tier}); "
                f"max_running_requests {caps.seqs_basis} (SGLang {VERSION} arg_groups/memory_hook.py, "
                "mem_cache/kv_cache_configurator.py)")


RULES = SglangRules()


CONTEXT_BYTES = 1024 * MIB  # free before weights = total - this: CUDA context and NCCL buffers (an assumption)


def view(arch: Architecture, gpu_memory: int, tp: int, kv_dtype: str, weights_per_rank: int,
         page_size: int | None = None, vllm: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The SGLang 0.5.23 view of one configuration, for ``kvdash calc --engine-rules sglang`` and sweeps: every
    figure of :func:`plan` with its rule, the start-up line, and -- given kvdash's vLLM figures for the same setup
    (``{"tokens", "budget", "util", "reserve", "label"}``) -- one line saying by how much the engines differ and
    why.  A setup kvdash does not mirror gives ``{"refused": "<one line>"}``."""
    gpu_mib = gpu_memory / MIB
    free_before = gpu_memory - CONTEXT_BYTES
    try:
        p = plan(arch, gpu_mib, tp, kv_dtype, free_before, weights_per_rank, page_size)
    except InputError as exc:  # NotMirrored, or what SGLang refuses: the reason, in one line
        return {"version": VERSION, "refused": exc.allowed}
    # what a rank keeps out of weights and KV, as vLLM's figure beside it counts it (GPU total - weights - KV
    # budget): the CUDA context and NCCL buffers assumed before the weights, and (1 - fraction) of the free memory
    held_back = CONTEXT_BYTES + free_before * (1 - p.fraction.value)
    out: dict[str, Any] = {
        "version": VERSION, "mem_fraction_static": p.fraction.value, "reserved_mib": p.fraction.reserved_mib,
        "fraction_terms": [{"name": n, "mib": v} for n, v in p.fraction.terms], "gpu_tier": p.fraction.tier,
        "chunked_prefill_size": p.fraction.chunked_prefill_size, "cuda_graph_max_bs": p.fraction.decode_max_bs,
        "free_before_weights_bytes": free_before, "free_after_weights_bytes": p.free_after,
        "free_before_basis": "GPU total - 1 GiB (CUDA context and NCCL buffers: an assumption; SGLang measures it)",
        "weights_per_rank_bytes": weights_per_rank, "available_bytes": p.available_bytes,
        "held_back_bytes": int(held_back), "pool": p.pool, "cell_bytes": p.cell_bytes, "cell": p.cell_text,
        "page_size": p.page_size, "max_total_num_tokens": p.max_total_num_tokens,
        "swa_max_total_num_tokens": p.swa_tokens, "max_running_requests": p.max_running_requests,
        "context_len": p.context_len, "log_line": p.startup_line() + "(measured at start-up)",
        "max_mamba_cache_size": p.mamba_slots or None,
        "lines": list(p.lines),
    }
    if vllm and p.pool == "state_only":
        out["comparison"] = (
            f"SGLang {VERSION}'s pool for this attention-free model is its state slots: max_mamba_cache_size "
            f"{p.mamba_slots:,}, at most {p.max_running_requests:,} running requests ({MAMBA_RATIO_NO_BUFFER} slots "
            f"each); its max_total_num_tokens {p.max_total_num_tokens:,} is context_len, not a KV capacity, so it is "
            f"not compared with {vllm.get('label', 'vLLM')}'s token figure")
    elif vllm:
        tokens, label = int(vllm["tokens"]), str(vllm.get("label", "vLLM"))
        diff = p.max_total_num_tokens - tokens
        pct = 100 * diff / tokens if tokens else 0.0
        vllm_kept = int(vllm.get("held_back", 0))
        out["comparison"] = (
            f"SGLang {VERSION} holds {p.max_total_num_tokens:,} tokens per rank where {label} holds {tokens:,} "
            f"({'+' if diff >= 0 else ''}{pct:.1f} %): SGLang keeps {held_back / GIB:.2f} GiB per rank out of the KV "
            f"cache ({CONTEXT_BYTES / GIB:g} GiB of CUDA context and NCCL buffers + (1 - mem_fraction_static "
            f"{p.fraction.value}) x the free memory before the weights, its default "
            f"for this GPU at TP {tp}), {label} keeps {vllm_kept / GIB:.2f} GiB ({vllm.get('why', '')})"
            + ("" if not vllm.get("bytes_per_token") or int(vllm["bytes_per_token"]) == round(p.cell_bytes) else
               f"; and a token takes {p.cell_bytes:,.1f} B in SGLang's pool against {int(vllm['bytes_per_token']):,} B "
               f"in {label}'s ({p.pool.replace('_', ' ')} pool: {p.cell_text.split(' = ')[0]})"))
    return out

"""Run vLLM 0.33.0's own KV-cache planning code on every config under tests/data/configs.

Runs inside a side virtualenv that has ``vllm==0.33.0`` (see run.sh); it is not part of
kvdash and is never imported by kvdash or its tests. It writes conformance/vllm/expected.json.

What runs is vLLM's code, on CPU, set up the way a CUDA engine on a Hopper GPU would be:

* ``vllm.config.ModelConfig`` / ``VllmConfig`` read the config.json (transformers config
  classes, vLLM's config registry, ``verify_with_parallel_config`` for the TP size,
  ``MambaModelConfig.verify_and_update_config`` for the mamba cache mode);
* the per-layer ``KVCacheSpec`` dict is built the way ``GPUModelRunner.get_kv_cache_spec``
  builds it from the model's attention modules (``Attention.get_kv_cache_spec``,
  ``ChunkedLocalAttention.get_kv_cache_spec``, ``MLAAttention.get_kv_cache_spec``,
  ``MambaBase.get_kv_cache_spec`` and the GDN override), with vLLM's spec classes, vLLM's
  ``customize_attention_spec`` and ``_largest_kernel_block_within`` against the CUDA
  FlashAttention backend class. The models themselves cannot be built here (their attention
  backends need CUDA or vLLM's compiled CPU ops), so which layer is full, sliding, chunked,
  MLA, Mamba or linear attention is read from the config exactly as the model file in
  ``vllm/model_executor/models/`` reads it (see ``layer_plan`` below, one rule per file);
* the hybrid block-size alignment is ``Platform._align_hybrid_block_size`` from
  ``vllm/platforms/interface.py``, called on the CUDA platform class with the FlashAttention
  backend (what ``update_block_size_for_backend`` passes on Hopper);
* groups, blocks and capacity are the engine core's calls, in its order
  (``vllm/v1/engine/core.py``): ``get_global_kv_cache_groups``, ``get_kv_cache_configs``,
  ``generate_scheduler_kv_cache_config``, ``update_kv_cache_capacity`` (whose log line is
  captured verbatim), ``get_max_concurrency_for_kv_cache_config``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import vllm  # noqa: E402
from vllm.config import (  # noqa: E402
    CacheConfig,
    DeviceConfig,
    ModelConfig,
    ParallelConfig,
    VllmConfig,
)
from vllm.config.vllm import set_current_vllm_config  # noqa: E402
from vllm.model_executor.layers.attention.attention import (  # noqa: E402
    _largest_kernel_block_within,
)
from vllm.model_executor.models import ModelRegistry  # noqa: E402
from vllm.model_executor.models.config import MambaModelConfig  # noqa: E402
from vllm.platforms.interface import Platform  # noqa: E402
from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype  # noqa: E402
from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend  # noqa: E402
from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum  # noqa: E402
from vllm.v1.core import kv_cache_utils  # noqa: E402
from vllm.v1.core.kv_cache_planning import (  # noqa: E402
    get_global_kv_cache_groups,
    get_kv_cache_configs,
)
from vllm.v1.core.kv_cache_utils import (  # noqa: E402
    generate_scheduler_kv_cache_config,
    get_max_concurrency_for_kv_cache_config,
    update_kv_cache_capacity,
)
from vllm.v1.kv_cache_interface import (  # noqa: E402
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
    get_kv_quant_mode,
)
from vllm.v1.worker.utils import customize_attention_spec  # noqa: E402
import vllm.model_executor.layers.mamba.abstract as mamba_abstract  # noqa: E402

MAX_MODEL_LEN = 2048
TPS = (1, 2, 4, 8)
KV_DTYPES = {"bf16": "auto", "fp8": "fp8"}
BLOCKS = (16, 32)
MLA_BLOCKS = (16, 32, 64)
BUDGETS = (12 * 2**30, 40 * 2**30)
# FlashInfer's GDN prefill kernel (chosen on Hopper, see _resolve_gdn_prefill_backend in
# vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py) exports prefill
# checkpoints every FLASHINFER_GDN_CHECKPOINT_ALIGNMENT tokens in align mode.
from vllm.v1.attention.backends.gdn_attn import FLASHINFER_GDN_CHECKPOINT_ALIGNMENT  # noqa: E402


class HopperPlatform(Platform):
    """vLLM's Platform base class (which CudaPlatform inherits the alignment from, without
    overriding it), with the attention backend a Hopper engine selects.

    ``vllm.platforms.cuda`` itself cannot be imported without libcuda.
    ``_find_non_ssm_backends`` reads the attention layers of a built model; none is built
    here, so it answers what ``get_attn_backend`` picks on SM90 for these models
    (FlashAttention). ``_align_hybrid_block_size`` is vLLM's, unchanged.
    """

    @classmethod
    def _find_non_ssm_backends(cls, vllm_config):  # type: ignore[override]
        return [FlashAttentionBackend]


# ---------------------------------------------------------------------------------------
# Which layers the model file builds, read from the config as each vLLM model file does.
# Each entry: (suffix, kind, extra) with kind in full/sliding/chunked/mla/mamba/linear.
# ---------------------------------------------------------------------------------------


def layer_plan(mc: ModelConfig, cache_sliding_window: int | None) -> list[list[tuple]]:
    cfg = mc.hf_text_config
    arch = mc.architecture
    n = mc.get_total_num_hidden_layers()
    plan: list[list[tuple]] = []
    if mc.use_mla:
        # deepseek_v2.py / kimi: one MLAAttention per decoder layer.
        return [[("self_attn.attn", "mla", None)] for _ in range(n)]
    if arch == "JambaForCausalLM":
        # jamba.py: ALL_DECODER_LAYER_TYPES[config.layers_block_type[i]]
        for t in cfg.layers_block_type:
            plan.append([("self_attn.attn", "full", None)] if t == "attention"
                        else [("mamba", "mamba", MambaAttentionBackendEnum.MAMBA1)])
        return plan
    if arch == "NemotronHForCausalLM":
        # nemotron_h.py: layer class from hybrid_override_pattern[i]: M mamba, * attention,
        # - MLP, E MoE (the last two keep no KV cache).
        for ch in cfg.hybrid_override_pattern:
            if ch == "M":
                plan.append([("mixer", "mamba", MambaAttentionBackendEnum.MAMBA2)])
            elif ch == "*":
                plan.append([("mixer.attn", "full", None)])
            else:
                plan.append([])
        return plan
    if arch == "FalconH1ForCausalLM":
        # falcon_h1.py: every decoder layer runs attention and a Mamba-2 mixer in parallel.
        return [[("self_attn.attn", "full", None), ("mamba", "mamba",
                 MambaAttentionBackendEnum.MAMBA2)] for _ in range(n)]
    if mc.is_hybrid:
        layer_types = getattr(cfg, "layer_types", None)
        if layer_types is None:
            raise NotImplementedError(f"harness: no layer rule for hybrid {arch}")
        # qwen3_next.py / qwen3_5.py: layer_type = config.layer_types[i];
        # linear_attention is a gated delta net (GDN) layer.
        for t in layer_types[:n]:
            if t == "linear_attention":
                plan.append([("linear_attn", "linear", MambaAttentionBackendEnum.GDN_ATTN)])
            else:
                plan.append([("self_attn.attn", "full", None)])
        return plan
    if arch == "Llama4ForConditionalGeneration" or arch == "Llama4ForCausalLM":
        # llama4.py: nope = no_rope_layers[i] == 0; ChunkedLocalAttention when not nope and
        # attention_chunk_size is set.
        for i in range(n):
            nope = cfg.no_rope_layers[i] == 0
            if not nope and cfg.attention_chunk_size:
                plan.append([("self_attn.attn", "chunked", cfg.attention_chunk_size)])
            else:
                plan.append([("self_attn.attn", "full", None)])
        return plan
    if arch == "GptOssForCausalLM":
        # gpt_oss.py: sliding_window = config.sliding_window if layer_idx % 2 == 0.
        return [[("attn.attn", "sliding" if i % 2 == 0 else "full",
                  cfg.sliding_window if i % 2 == 0 else None)] for i in range(n)]
    if arch in ("Cohere2ForCausalLM",):
        # commandr.py (v2): sliding layers from layer_types get sliding_window + 1.
        return [[("self_attn.attn", "sliding", cfg.sliding_window + 1)]
                if cfg.layer_types[i] == "sliding_attention"
                else [("self_attn.attn", "full", None)] for i in range(n)]
    layer_types = getattr(cfg, "layer_types", None)
    if layer_types is not None and len(set(layer_types[:n])) > 1:
        # llama.py, gemma2.py, gemma3.py, qwen2.py ...: per_layer_sliding_window =
        # config.sliding_window where layer_types[i] == "sliding_attention".
        return [[("self_attn.attn", "sliding", cfg.sliding_window)]
                if layer_types[i] == "sliding_attention"
                else [("self_attn.attn", "full", None)] for i in range(n)]
    # Otherwise Attention falls back to cache_config.sliding_window (attention.py), which
    # EngineArgs sets only when the model is all sliding (engine/arg_utils.py).
    if cache_sliding_window is not None:
        return [[("self_attn.attn", "sliding", cache_sliding_window)] for _ in range(n)]
    return [[("self_attn.attn", "full", None)] for _ in range(n)]


def engine_sliding_window(mc: ModelConfig) -> int | None:
    """CacheConfig.sliding_window as EngineArgs.create_engine_config sets it."""
    layer_types = getattr(mc.hf_text_config, "layer_types", None)
    if layer_types is None or all(lt == "sliding_attention" for lt in layer_types):
        return mc.get_sliding_window()
    return None


def build_specs(vc: VllmConfig, plan, mamba_shapes) -> dict:
    """The per-layer spec dict, as GPUModelRunner.get_kv_cache_spec would return it."""
    mc, pc, cc = vc.model_config, vc.parallel_config, vc.cache_config
    cache_dtype = cc.cache_dtype
    dtype = kv_cache_dtype_str_to_dtype(cache_dtype, mc)
    quant = get_kv_quant_mode(cache_dtype)
    kvh = mc.get_num_kv_heads(pc)
    hs = mc.get_head_size()
    block = cc.block_size
    specs: dict = {}
    for i, entries in enumerate(plan):
        for suffix, kind, extra in entries:
            name = f"model.layers.{i}.{suffix}"
            if kind == "full":
                spec = FullAttentionSpec(block_size=block, num_kv_heads=kvh, head_size=hs,
                                         head_size_v=hs, dtype=dtype, kv_quant_mode=quant)
                spec = customize_attention_spec(FlashAttentionBackend, spec)
            elif kind == "sliding":
                one = FlashAttentionBackend.customize_spec(SlidingWindowSpec(
                    block_size=1, num_kv_heads=kvh, head_size=hs, head_size_v=hs,
                    dtype=dtype, kv_quant_mode=quant, sliding_window=extra))
                per_token = one.real_page_size_bytes
                sw_block = _largest_kernel_block_within(
                    FlashAttentionBackend, per_token, per_token * block, block, one)
                spec = SlidingWindowSpec(block_size=sw_block, num_kv_heads=kvh, head_size=hs,
                                         head_size_v=hs, dtype=dtype, kv_quant_mode=quant,
                                         sliding_window=extra, page_size_padded=None)
                spec = customize_attention_spec(FlashAttentionBackend, spec)
            elif kind == "chunked":
                spec = ChunkedLocalAttentionSpec(block_size=block, num_kv_heads=kvh,
                                                 head_size=hs, dtype=dtype,
                                                 kv_quant_mode=quant,
                                                 attention_chunk_size=extra)
                spec = customize_attention_spec(FlashAttentionBackend, spec)
            elif kind == "mla":
                spec = MLAAttentionSpec(block_size=block, num_kv_heads=1, max_tp_shards=1,
                                        head_size=hs, dtype=dtype, cache_dtype_str=cache_dtype,
                                        kv_quant_mode=quant)
            elif kind in ("mamba", "linear"):
                shapes, dtypes = mamba_shapes
                spec = MambaSpec(shapes=tuple(shapes), dtypes=dtypes,
                                 block_size=cc.mamba_block_size,
                                 page_size_padded=cc.mamba_page_size_padded,
                                 mamba_type=extra, tp_replicated=False,
                                 mamba_cache_mode=cc.mamba_cache_mode,
                                 num_speculative_blocks=vc.num_speculative_tokens)
                if kind == "linear" and cc.mamba_cache_mode == "align":
                    # GDN layer override (qwen_gdn_linear_attn.py): FlashInfer prefill on
                    # Hopper exports one prefill checkpoint per request.
                    spec = replace(spec, num_prefill_checkpoint_blocks=1,
                                   prefill_checkpoint_alignment=(
                                       mamba_abstract.get_mamba_prefill_checkpoint_grid(vc)))
            else:
                raise AssertionError(kind)
            specs[name] = spec
    return specs


def spec_kind(spec) -> str:
    if isinstance(spec, MLAAttentionSpec):
        return "mla"
    if isinstance(spec, SlidingWindowSpec):
        return "sliding"
    if isinstance(spec, ChunkedLocalAttentionSpec):
        return "chunked"
    if isinstance(spec, MambaSpec):
        return "linear" if spec.mamba_type == MambaAttentionBackendEnum.GDN_ATTN else "mamba"
    if isinstance(spec, FullAttentionSpec):
        return "full"
    return type(spec).__name__


class _CaptureLogger:
    """Stands in for kv_cache_utils.logger while update_kv_cache_capacity logs."""

    def __init__(self):
        self.lines: list[str] = []

    def info_once(self, fmt, *args, **_kw):
        self.lines.append(fmt % args)

    info = info_once


def plan_case(mc_base: ModelConfig, tp: int, kv: str, block: int, prefix: bool, plan_cache):
    """Configure like a CUDA engine; returns (vllm_config, specs)."""
    mc = copy.deepcopy(mc_base)
    pc = ParallelConfig(tensor_parallel_size=tp)
    cc = CacheConfig(block_size=block, cache_dtype=KV_DTYPES[kv],
                     enable_prefix_caching=prefix, sliding_window=engine_sliding_window(mc))
    vc = VllmConfig(model_config=mc, cache_config=cc, parallel_config=pc,
                    device_config=DeviceConfig(device="cpu"))
    # Undo what the CPU platform changed and record what a CUDA engine has at this point.
    cc = vc.cache_config
    cc.block_size = block
    cc.user_specified_block_size = True
    cc.mamba_ssm_cache_dtype = "auto"
    cc.enable_prefix_caching = prefix
    vc.scheduler_config.enable_chunked_prefill = True
    vc.scheduler_config.disable_hybrid_kv_cache_manager = False
    cc.kv_cache_layout = "NHD"
    mamba_shapes = None
    if mc.is_hybrid:
        cc.mamba_cache_mode = "none"
        cc.mamba_block_size = None
        cc.mamba_page_size_padded = None
        MambaModelConfig.verify_and_update_config(vc)
        model_cls, _ = ModelRegistry.resolve_model_cls(mc.architecture, model_config=mc)
        with set_current_vllm_config(vc):
            mamba_shapes = (model_cls.get_mamba_state_shape_from_config(vc),
                            model_cls.get_mamba_state_dtype_from_config(vc))
    key = id(mc_base)
    if key not in plan_cache:
        plan_cache[key] = layer_plan(mc, cc.sliding_window)
    plan = plan_cache[key]
    if mc.is_hybrid:
        has_gdn = any(k == "linear" for e in plan for _, k, _ in e)
        align = (FLASHINFER_GDN_CHECKPOINT_ALIGNMENT
                 if has_gdn and cc.mamba_cache_mode == "align" else None)
        saved = mamba_abstract.get_mamba_prefill_checkpoint_alignment
        # The real function asks the built Mamba layers; GDN layers on Hopper answer 64
        # in align mode, Mamba-1/Mamba-2 mixers answer None.
        mamba_abstract.get_mamba_prefill_checkpoint_alignment = lambda _vc: align
        try:
            with set_current_vllm_config(vc):
                HopperPlatform._align_hybrid_block_size(vc, FlashAttentionBackend)
            specs = build_specs(vc, plan, mamba_shapes)
        finally:
            mamba_abstract.get_mamba_prefill_checkpoint_alignment = saved
    else:
        specs = build_specs(vc, plan, mamba_shapes)
    return vc, specs


def run_budget(vc: VllmConfig, specs: dict, budget: int) -> dict:
    vc = copy.deepcopy(vc)
    kv_cache_specs = [specs]
    groups = get_global_kv_cache_groups(vc, kv_cache_specs)
    configs = get_kv_cache_configs(vc, kv_cache_specs, [budget], groups)
    sched = generate_scheduler_kv_cache_config(configs)
    attn_block = vc.cache_config.block_size
    participating = [g.kv_cache_spec.block_size for g in sched.kv_cache_groups
                     if g.kv_cache_spec.prefix_cacheable]
    vc.cache_config.block_size = min(participating or
                                     [g.kv_cache_spec.block_size for g in sched.kv_cache_groups])
    cap = _CaptureLogger()
    saved_logger, saved_name = kv_cache_utils.logger, kv_cache_utils._kv_cache_device_name
    kv_cache_utils.logger = cap
    kv_cache_utils._kv_cache_device_name = lambda _vc: "GPU"  # the CUDA engine's word
    try:
        update_kv_cache_capacity(vc, sched)
    finally:
        kv_cache_utils.logger, kv_cache_utils._kv_cache_device_name = saved_logger, saved_name
    conc = get_max_concurrency_for_kv_cache_config(vc, sched)
    page_bytes: dict[str, int] = {}
    for spec in specs.values():
        page_bytes.setdefault(spec_kind(spec), spec.page_size_bytes)
    return {
        "block_size": attn_block,
        "page_bytes": page_bytes,
        "num_groups": len(sched.kv_cache_groups),
        "group_sizes": [len(g.layer_names) for g in sched.kv_cache_groups],
        "num_gpu_blocks": sched.num_blocks,
        "max_concurrency": conc,
        "gpu_kv_cache_tokens": vc.cache_config.kv_cache_size_tokens,
        "log_line": cap.lines[-1] if cap.lines else "",
    }


def reason_of(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= 2000 else text[:2000] + "..."


def cases_for(name: str, d: Path, log) -> list[dict]:
    out: list[dict] = []
    try:
        mc = ModelConfig(model=str(d), tokenizer=str(d), skip_tokenizer_init=True,
                         max_model_len=MAX_MODEL_LEN, dtype="bfloat16")
        use_mla, hybrid = bool(mc.use_mla), bool(mc.is_hybrid)
        load_error = None
    except Exception as exc:  # vLLM refuses the config itself
        mc, use_mla, hybrid, load_error = None, False, False, reason_of(exc)
    blocks = MLA_BLOCKS if use_mla else BLOCKS
    prefixes = (True, False) if hybrid else (True,)
    plan_cache: dict = {}
    for tp in TPS:
        for kv in KV_DTYPES:
            for block in blocks:
                for prefix in prefixes:
                    base = {"config": name, "tp": tp, "kv_dtype": kv,
                            "block_size_requested": block, "prefix_caching": prefix}
                    planned = None
                    if load_error is None:
                        try:
                            planned = plan_case(mc, tp, kv, block, prefix, plan_cache)
                            err = None
                        except Exception as exc:
                            err = reason_of(exc)
                            log(f"  {name} tp{tp} {kv} b{block} pc{int(prefix)}: refused: {err[:160]}")
                    else:
                        err = load_error
                    for budget in BUDGETS:
                        case = dict(base, budget_bytes=budget)
                        if planned is not None:
                            vc, specs = planned
                            try:
                                figures = run_budget(vc, specs, budget)
                                kinds: dict[str, int] = {}
                                for spec in specs.values():
                                    k = spec_kind(spec)
                                    kinds[k] = kinds.get(k, 0) + 1
                                case.update(status="ok", reason="",
                                            num_kv_heads=vc.model_config.get_num_kv_heads(vc.parallel_config),
                                            head_size=vc.model_config.get_head_size(),
                                            use_mla=use_mla, is_hybrid=hybrid,
                                            layer_kinds=kinds, **figures)
                            except Exception as exc:
                                case.update(status="refused", reason=reason_of(exc),
                                            use_mla=use_mla, is_hybrid=hybrid)
                        else:
                            case.update(status="refused", reason=err,
                                        use_mla=use_mla, is_hybrid=hybrid)
                        out.append(case)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="tests/data/configs")
    ap.add_argument("--out", default="conformance/vllm/expected.json")
    ap.add_argument("--only", nargs="*", help="config folder names (default: all)")
    ap.add_argument("--partial-out", help="write only these configs' cases to this file")
    args = ap.parse_args()
    root = Path(args.configs)
    names = sorted(p.name for p in root.iterdir() if (p / "config.json").is_file())
    if args.only:
        names = [n for n in names if n in set(args.only)]

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    t0 = time.time()
    cases: list[dict] = []
    for name in names:
        t = time.time()
        got = cases_for(name, root / name, log)
        ok = sum(c["status"] == "ok" for c in got)
        log(f"{name}: {ok}/{len(got)} ok ({time.time() - t:.1f} s)")
        cases.extend(got)
    doc = {
        "vllm_version": vllm.__version__,
        "generated_by": "conformance/vllm/run.sh",
        "max_model_len": MAX_MODEL_LEN,
        "cases": cases,
    }
    out = Path(args.partial_out or args.out)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    tmp.replace(out)
    log(f"{len(cases)} cases from {len(names)} configs in {time.time() - t0:.0f} s -> {out}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(1)

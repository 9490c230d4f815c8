"""Run vLLM 0.33.0's own KV-cache code on every config under tests/data/configs.

Runs inside a side virtualenv that has ``vllm==0.33.0`` (see run.sh); it is not part of
kvdash and is never imported by kvdash or its tests. It writes conformance/vllm/expected.json.

What runs is vLLM's code, on a CPU-only machine, set up the way ``vllm serve`` runs on one
H100/H200 (SM90) per rank (see README.md beside this file for every setting and why):

1. ``ModelConfig`` / ``VllmConfig`` read the config.json (a ``max_model_len`` or tensor-parallel
   size vLLM refuses is recorded as refused, with vLLM's message).
2. The model is **built by vLLM's own model class** (``initialize_model``, the loader's
   call) under ``torch.device("meta")``: no weights are allocated or loaded. Every attention
   and state layer registers itself in the config's static forward context, exactly as in
   the engine; each picks its attention backend through vLLM's selector, answered by the
   CUDA platform's own priority list for compute capability 9.0 (``HopperPlatform``).
3. ``Platform.update_block_size_for_backend`` (the executor's call; ``CudaPlatform`` does not
   override it) chooses the block size for ``--block-size`` unset and aligns hybrids.
4. The per-layer spec dict is ``vllm.v1.worker.gpu.attn_utils.get_kv_cache_spec`` (model
   runner V2, the default on CUDA) or ``GPUModelRunner.get_kv_cache_spec`` (V1), i.e. every
   layer's own ``get_kv_cache_spec`` and ``customize_attention_spec``.
5. Groups, blocks and capacity are the engine core's calls, in its order
   (``vllm/v1/engine/core.py``, ``_initialize_kv_caches``).

Where step 2 cannot run for a config (the error is recorded), the case's specs come from a
hand-written mirror (``mirror_plan``), each rule naming the vLLM model file and line it
mirrors; a family without a rule is recorded as ``spec_source: "not mirrored"``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
import traceback
import types
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
# vllm/triton_utils/importing.py keeps Triton (HAS_TRITON) when no GPU driver is active only
# where CUDA_VISIBLE_DEVICES is set and empty (a Ray worker before CUDA starts). A Hopper host has
# Triton with its driver; with HAS_TRITON false vLLM would swap in placeholders, its Triton
# kernel modules (e.g. the Mamba-2 SSD ops imported by mamba_mixer2.py) would not import and the
# model-runner choice (VllmConfig.use_v2_model_runner) would change. No Triton kernel runs here.
os.environ["CUDA_VISIBLE_DEVICES"] = ""

import torch  # noqa: E402

# --- the platform: vLLM's CUDA platform class, answering as one Hopper GPU ---------------------
# The vLLM wheel ships its CUDA kernels as extension modules (vllm/_C_stable_libtorch.abi3.so,
# vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so, vllm/_flashmla_C.abi3.so, ...). On a Hopper host they
# load; here they cannot (no libcuda.so.1), and vLLM's Python code decides which backends exist
# by whether they import (e.g. vllm_flash_attn/flash_attn_interface.py FA3_AVAILABLE,
# v1/attention/ops/flashmla.py). Nothing here runs a kernel, so each one that fails to load is
# replaced by an empty module of the same name, as present as on the Hopper host. The list of
# stubbed modules goes into expected.json's header.
import importlib  # noqa: E402
import importlib.util  # noqa: E402

STUBBED_EXTENSIONS: list[str] = []


def _stub_cuda_extensions() -> None:
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.submodule_search_locations
    root = Path(list(spec.submodule_search_locations)[0])
    for so in sorted(root.rglob("*.abi3.so")):
        rel = so.relative_to(root.parent).with_suffix("").with_suffix("")
        name = ".".join(rel.parts)
        if "third_party" in rel.parts:
            continue
        spec_so = importlib.util.spec_from_file_location(name, so)
        assert spec_so is not None
        try:  # dlopen the extension alone, without importing its package first
            sys.modules[name] = importlib.util.module_from_spec(spec_so)
        except (ImportError, OSError):
            sys.modules[name] = types.ModuleType(name)
            STUBBED_EXTENSIONS.append(name)


_stub_cuda_extensions()

# The kernels those modules would register (torch.ops._C.*) are absent. vllm/_custom_ops.py has
# a few functions that ask the compiled library what it supports (cutlass_scaled_mm_supports_*,
# ...); some are called while modules are imported or weight layers are built, to pick a
# weight-GEMM kernel. Each such query answers False ("not supported") and is recorded in the
# header; no kernel is ever run here, and KV-cache specs do not depend on those answers.
KERNEL_QUERIES: set[str] = set()


def _patch_kernel_queries() -> None:
    import vllm._custom_ops as ops

    def answer_false(name):
        def query(*_a, **_k):
            KERNEL_QUERIES.add(name)
            return False
        return query

    for name in dir(ops):
        if "_supports_" in name or name.startswith("is_") and name.endswith("_supported"):
            setattr(ops, name, answer_false(name))


# Layers also take handles to their kernels while being built (activation.py: ``self.op =
# torch.ops._C.silu_and_mul``). After vllm._custom_ops has registered what it registers, a
# missing op of vLLM's kernel namespaces is a handle that raises if it is ever called.
KERNEL_HANDLES: set[str] = set()
_KERNEL_NAMESPACES = {"_C", "_moe_C", "_C_cache_ops", "_C_custom_ar", "_vllm_fa2_C",
                      "_vllm_fa3_C", "_flashmla_C", "_flashmla_extension_C", "_qutlass_C"}


class _KernelHandle:
    def __init__(self, qualname: str):
        self.qualname = qualname

    def __getattr__(self, item):
        if item.startswith("__"):
            raise AttributeError(item)
        return _KernelHandle(f"{self.qualname}.{item}")

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"harness: kernel {self.qualname} would run; it is not loaded here")


def _patch_kernel_handles() -> None:
    orig = torch._ops._OpNamespace.__getattr__

    def getattr_(self, op_name):
        try:
            return orig(self, op_name)
        except AttributeError:
            if self.name in _KERNEL_NAMESPACES and not op_name.startswith("__"):
                KERNEL_HANDLES.add(f"{self.name}.{op_name}")
                return _KernelHandle(f"{self.name}.{op_name}")
            raise

    torch._ops._OpNamespace.__getattr__ = getattr_

import vllm  # noqa: E402
import vllm.platforms as _platforms  # noqa: E402
from vllm.platforms.cuda import CudaPlatformBase  # noqa: E402
from vllm.platforms.interface import DeviceCapability  # noqa: E402

H200_NAME = "NVIDIA H200"
H200_MEMORY = 150_754_820_096  # bytes nvidia-smi reports for one H200 (141 GiB class)


class HopperPlatform(CudaPlatformBase):
    """vLLM's ``CudaPlatformBase`` (everything it decides is its own code), answering the
    device queries as one H200 would: compute capability 9.0 (SM90), its name and memory.
    ``NvmlCudaPlatform`` answers the same questions through NVML, which this machine lacks."""

    @classmethod
    def get_device_capability(cls, device_id: int = 0) -> DeviceCapability:
        return DeviceCapability(major=9, minor=0)

    @classmethod
    def has_device_capability(cls, capability, device_id: int = 0) -> bool:
        if isinstance(capability, tuple):
            return (9, 0) >= tuple(capability)
        return 90 >= capability

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return H200_NAME

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        return H200_MEMORY

    @classmethod
    def is_fully_connected(cls, device_ids) -> bool:
        return True

    @classmethod
    def device_count(cls) -> int:
        return 8

    @classmethod
    def get_device_uuid(cls, device_id: int = 0) -> str:
        return f"GPU-h200-{device_id}"

    @classmethod
    def is_pin_memory_available(cls) -> bool:
        return True

    @classmethod
    def get_device_numa_node(cls, device_id: int = 0):
        return None

    @classmethod
    def num_compute_units(cls, device_id: int = 0) -> int:
        return 132  # streaming multiprocessors of an H100 SXM / H200

    @classmethod
    def is_integrated_gpu(cls, device_id: int = 0) -> bool:
        return False

    @classmethod
    def current_device(cls):
        # Layers that place a tensor on "the current device" explicitly (e.g. the GDN layer's
        # RMSNormGated in qwen_gdn_linear_attn.py) get the device this harness builds on.
        return torch.device("meta")


_platforms.current_platform = HopperPlatform()


class _NoStream:
    """Some layers create CUDA streams or events while being built (e.g. shared experts'
    ``aux_stream()`` in vllm/utils/torch_utils.py); no work is ever queued on them here."""

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, item):
        return lambda *a, **k: None


torch.cuda.Stream = _NoStream  # type: ignore[misc]
torch.cuda.Event = _NoStream  # type: ignore[misc]
torch.cuda.current_stream = lambda *a, **k: _NoStream()  # type: ignore[assignment]
_patch_kernel_queries()
_patch_kernel_handles()

# vLLM inspects a model class in a child process (registry.py, _run_in_subprocess) so that the
# parent does not initialise CUDA; the child would not see the platform above. Nothing here
# initialises CUDA, so the same inspection runs in this process.
import vllm.model_executor.models.registry as _registry  # noqa: E402

_registry._run_in_subprocess = lambda fn: fn()

# The worker sets up vLLM's workspace manager before it builds the model runner and the model
# (Worker._init_workspace_and_model_runner, vllm/v1/worker/gpu_worker.py: init_workspace_manager(
# self.device, ...)); sparse MLA's FLASHMLA_SPARSE layers reserve their scratch from it while
# being built (DeepSeek-V3.2 / GLM-5 with fp8 KV: "WorkspaceManager not initialized" otherwise).
# Here it is vLLM's own WorkspaceManager on the device the harness builds on, ``meta``: the
# scratch is a working buffer, never a KV-cache spec, and no tensor on meta holds memory.
from vllm.v1.worker.workspace import init_workspace_manager  # noqa: E402

init_workspace_manager(torch.device("meta"))

from vllm.config import (  # noqa: E402
    CacheConfig,
    DeviceConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
    VllmConfig,
)
from vllm.config.vllm import set_current_vllm_config  # noqa: E402
from vllm.distributed import parallel_state  # noqa: E402
from vllm.model_executor.models import ModelRegistry  # noqa: E402
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
    SparseCacheRole,
)

# --- what `vllm serve` gets on one H100/H200 per rank ------------------------------------------
# EngineArgs.get_batch_defaults (vllm/engine/arg_utils.py): OpenAI API server on a GPU with at
# least 70 GiB that is not an A100 -> max_num_batched_tokens 8192, max_num_seqs 1024.
# Async scheduling: on unless something is incompatible (VllmConfig, vllm/config/vllm.py);
# max_concurrent_batches is then 2 (VllmConfig.max_concurrent_batches).
SERVE = {
    "max_num_batched_tokens": 8192,
    "max_num_seqs": 1024,
    "async_scheduling": "default (on; resolved by VllmConfig)",
    "enable_chunked_prefill": True,
    "gpu": H200_NAME + " (SM90)",
    "dtype": "bfloat16",
}
MAX_MODEL_LENS = (2048, 32768)
TPS = (1, 2, 4, 8)
KV_DTYPES = {"bf16": "auto", "fp8": "fp8"}
BLOCKS = (None, 16, 32, 64)  # None: --block-size unset ("auto")
BUDGETS = (12 * 2**30, 40 * 2**30)


# --- parallel groups: the model code asks them its rank and world size ------------------------


class FakeProcessGroup:
    """What model code asks a torch ProcessGroup while building (``size()``, ``rank()``)."""

    def __init__(self, world_size: int):
        self._size = world_size

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return 0


class FakeGroup:
    """Stands in for a ``GroupCoordinator``: rank 0 of ``world_size`` ranks. Model code reads
    ``world_size`` / ``rank_in_group`` while building layers (e.g. heads per rank); nothing
    here communicates."""

    def __init__(self, name: str, world_size: int):
        self.unique_name = name
        self.world_size = world_size
        self.rank_in_group = 0
        self.rank = 0
        self.local_rank = 0
        self.ranks = list(range(world_size))
        self.is_first_rank = True
        self.is_last_rank = world_size == 1
        self.device_group = FakeProcessGroup(world_size)
        self.cpu_group = FakeProcessGroup(world_size)
        self.device_communicator = None
        self.use_device_communicator = False
        self.mq_broadcaster = None

    def __getattr__(self, item):
        raise AttributeError(f"harness FakeGroup {self.unique_name} has no {item!r}")


def install_groups(tp: int) -> None:
    ps = parallel_state
    ps._WORLD = FakeGroup("world", tp)
    ps._INNER_DP_WORLD = FakeGroup("inner_dp_world", tp)
    ps._TP = FakeGroup("tp", tp)
    ps._PP = FakeGroup("pp", 1)
    ps._PP.is_last_rank = True
    ps._DP = FakeGroup("dp", 1)
    ps._EP = FakeGroup("ep", tp)
    ps._DCP = FakeGroup("dcp", 1)
    ps._PCP = FakeGroup("pcp", 1)
    if hasattr(ps, "_ETP"):
        ps._ETP = FakeGroup("etp", 1)
    if hasattr(ps, "_EPLB"):
        ps._EPLB = FakeGroup("eplb", tp)


# --- configuration, as the engine has it on a CUDA host ----------------------------------------


def make_model_config(d: Path, max_model_len: int) -> ModelConfig:
    return ModelConfig(model=str(d), tokenizer=str(d), skip_tokenizer_init=True,
                       max_model_len=max_model_len, dtype="bfloat16")


def serve_batch_defaults(world_size: int) -> tuple[int, int]:
    """``vllm serve``'s max_num_batched_tokens and max_num_seqs on this platform (the H200 above):
    vLLM's ``EngineArgs.get_batch_defaults`` for the OpenAI API server."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.usage.usage_lib import UsageContext

    tokens, seqs = EngineArgs.get_batch_defaults(world_size)
    got = (tokens[UsageContext.OPENAI_API_SERVER], seqs[UsageContext.OPENAI_API_SERVER])
    assert got == (SERVE["max_num_batched_tokens"], SERVE["max_num_seqs"]), got
    return got


def make_vllm_config(mc: ModelConfig, tp: int, kv: str, block: int | None,
                     prefix: bool) -> VllmConfig:
    pc = ParallelConfig(tensor_parallel_size=tp)
    # EngineArgs.create_engine_config (vllm/engine/arg_utils.py): "Only set CacheConfig.sliding_window
    # if the model is all sliding window"; Attention falls back to it for layers without their own
    # window (e.g. Mistral-7B-v0.1, StarCoder2). Same code, same order; and its "auto" KV dtype
    # resolution (resolve_kv_cache_dtype_string: a checkpoint's FP8 KV scheme).
    from vllm.utils.torch_utils import resolve_kv_cache_dtype_string

    sliding_window = None
    layer_types = getattr(mc.hf_text_config, "layer_types", None)
    if layer_types is None or all(lt == "sliding_attention" for lt in layer_types):
        sliding_window = mc.get_sliding_window()
    cache_dtype = resolve_kv_cache_dtype_string(KV_DTYPES[kv], mc)
    cc = CacheConfig(block_size=block, cache_dtype=cache_dtype, enable_prefix_caching=prefix,
                     sliding_window=sliding_window)
    batched, seqs = serve_batch_defaults(tp)
    sc = SchedulerConfig(max_num_batched_tokens=batched, max_num_seqs=seqs,
                         max_model_len=mc.max_model_len,
                         is_encoder_decoder=mc.is_encoder_decoder,
                         enable_chunked_prefill=True)
    vc = VllmConfig(model_config=mc, cache_config=cc, parallel_config=pc, scheduler_config=sc,
                    device_config=DeviceConfig(device="cuda"))
    # resolve_kv_cache_layout (vllm/v1/attention/backends/utils.py) records the layout the
    # backends prefer before planning; FlashAttention / the SM90 MLA backends take NHD.
    vc.cache_config.kv_cache_layout = "NHD"
    return vc


def _scalar_on_cpu(init):
    """``GeluAndMulSparse.__init__`` (vllm/model_executor/layers/activation.py; Gemma 3n's MLP with
    ``activation_sparsity_pattern``) turns the target sparsity into a Python float with
    ``Normal(0, 1).icdf(torch.tensor(sparsity)).item()``; under the ``meta`` default device that tensor has no
    value ("Tensor.item() cannot be called on meta tensors"), where on the H200 it is a CPU or GPU scalar. It is
    computed on the CPU here: the activation's constant, never a KV-cache spec."""

    def wrapped(self, *args, **kwargs):
        with torch.device("cpu"):
            init(self, *args, **kwargs)

    return wrapped


from vllm.model_executor.layers.activation import GeluAndMulSparse  # noqa: E402

GeluAndMulSparse.__init__ = _scalar_on_cpu(GeluAndMulSparse.__init__)


class _CudaTensorsOnMeta(torch.overrides.TorchFunctionMode):
    """A model class that allocates a working buffer on ``current_platform.device_type`` explicitly
    (``device="cuda"``; e.g. DeepSeek-V3.2's shared top-k index buffer,
    vllm/models/deepseek_v32/nvidia/model.py) gets it on ``meta`` too, like every other tensor here.
    Only where a tensor is placed changes: no buffer is a KV-cache spec, and a model that built
    before never asked for a CUDA tensor (it would have failed without a driver)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        device = kwargs.get("device")
        if device is not None:
            try:
                on_cuda = torch.device(device).type == "cuda"
            except (RuntimeError, TypeError):
                on_cuda = False
            if on_cuda:
                kwargs["device"] = torch.device("meta")
        return func(*args, **kwargs)


def build_model(vc: VllmConfig):
    """vLLM's loader builds the model under the target device (base_loader.load_model); here
    that device is ``meta``, so no tensor holds memory and no weight is read."""
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.utils.torch_utils import set_default_torch_dtype

    # The Transformers backend (models/transformers/base.py, init_parameters) moves the parameters
    # transformers left on meta to device_config.device; here that device is meta too.
    saved = vc.device_config.device
    vc.device_config.device = torch.device("meta")
    try:
        with set_default_torch_dtype(vc.model_config.dtype), torch.device("meta"), _CudaTensorsOnMeta():
            return initialize_model(vllm_config=vc)
    finally:
        vc.device_config.device = saved


def engine_specs(vc: VllmConfig) -> dict:
    """The per-layer spec dict as the model runner returns it (V2 default on CUDA)."""
    if vc.use_v2_model_runner:
        from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec

        return get_kv_cache_spec(vc)
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    fake = types.SimpleNamespace(vllm_config=vc, shared_kv_cache_layers={})
    return GPUModelRunner.get_kv_cache_spec(fake)


def spec_kind(spec) -> str:
    if isinstance(spec, MLAAttentionSpec):
        # sparse MLA's indexer key cache (DeepseekV32IndexerCache.get_kv_cache_spec,
        # vllm/model_executor/models/deepseek_v2.py: cache_role INDEXER) beside each latent
        return "indexer" if getattr(spec, "cache_role", None) == SparseCacheRole.INDEXER else "mla"
    if isinstance(spec, SlidingWindowSpec):
        return "sliding"
    if isinstance(spec, ChunkedLocalAttentionSpec):
        return "chunked"
    if isinstance(spec, MambaSpec):
        name = getattr(spec.mamba_type, "name", str(spec.mamba_type))
        if name in ("MAMBA1", "MAMBA2"):
            return "mamba"
        if name == "GDN_ATTN":
            return "linear"
        return name.lower()
    if isinstance(spec, FullAttentionSpec):
        return "full"
    return type(spec).__name__


def spec_detail(spec) -> dict:
    d = {"kind": spec_kind(spec), "class": type(spec).__name__, "block_size": spec.block_size,
         "page_bytes": spec.page_size_bytes}
    for attr in ("num_kv_heads", "head_size", "head_size_v", "sliding_window",
                 "attention_chunk_size", "num_prefill_checkpoint_blocks",
                 "num_speculative_blocks", "mamba_cache_mode", "shapes"):
        if hasattr(spec, attr):
            v = getattr(spec, attr)
            if attr == "shapes":
                v = [list(s) for s in v]
            d[attr] = v
    if hasattr(spec, "mamba_type"):
        d["mamba_type"] = getattr(spec.mamba_type, "name", str(spec.mamba_type))
    if hasattr(spec, "dtype"):
        d["dtype"] = str(spec.dtype).replace("torch.", "")
    if hasattr(spec, "dtypes"):
        d["dtypes"] = [str(x).replace("torch.", "") for x in spec.dtypes]
    return d


class _CaptureLogger:
    """Stands in for kv_cache_utils.logger while update_kv_cache_capacity logs."""

    def __init__(self):
        self.lines: list[str] = []

    def info_once(self, fmt, *args, **_kw):
        self.lines.append(fmt % args)

    info = info_once

    def warning(self, fmt, *args, **_kw):
        pass

    warning_once = debug = debug_once = warning


def run_budget(vc: VllmConfig, specs: dict, budget: int) -> dict:
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
    saved_logger = kv_cache_utils.logger
    kv_cache_utils.logger = cap
    try:
        update_kv_cache_capacity(vc, sched)
    finally:
        kv_cache_utils.logger = saved_logger
    vc.validate_block_size()
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


# --- the attention-backend choices a build made, to know when a build can be reused -----------

import vllm.v1.attention.selector as _selector  # noqa: E402

_SELECTIONS: list[tuple] = []
_orig_select = _selector._cached_get_attn_backend


def _recording_select(backend, attn_selector_config, num_heads=None, *, _run_kv_cache_dtype=None):
    cls = _orig_select(backend, attn_selector_config, num_heads,
                       _run_kv_cache_dtype=_run_kv_cache_dtype)
    _SELECTIONS.append((backend, attn_selector_config, num_heads, _run_kv_cache_dtype, cls))
    return cls


_selector._cached_get_attn_backend = _recording_select


def same_backends(selections: list[tuple], vc: VllmConfig) -> bool:
    """Would building under ``vc`` pick the same backend for every layer? vLLM's selector is
    asked again with this case's block size (the only per-case input of the selection that
    varies between the cases sharing a build: see ``build_key``)."""
    cc = vc.cache_config
    block = cc.block_size if cc.user_specified_block_size else None
    with set_current_vllm_config(vc):
        for backend, cfg, heads, run_dtype, cls in selections:
            try:
                again = _orig_select(backend, cfg._replace(block_size=block), heads,
                                     _run_kv_cache_dtype=run_dtype)
            except Exception:  # noqa: BLE001 - no backend for this block: not the same
                return False
            if again is not cls:
                return False
    return True


class Built:
    def __init__(self, vc: VllmConfig, selections: list[tuple]):
        self.forward_context = vc.compilation_config.static_forward_context
        self.selections = selections
        self.backends = sorted({b.get_name() for *_x, b in selections})


def build_for(vc: VllmConfig) -> Built:
    _SELECTIONS.clear()
    with set_current_vllm_config(vc):
        model = build_model(vc)
    del model  # the layers live on in the static forward context
    return Built(vc, list(_SELECTIONS))


def attach(vc: VllmConfig, built: Built) -> None:
    vc.compilation_config.static_forward_context = built.forward_context


def plan_specs(vc: VllmConfig) -> dict:
    """What the executor and the engine core do once the model is built."""
    from vllm.platforms import current_platform

    current_platform.update_block_size_for_backend(vc)
    with set_current_vllm_config(vc):
        return engine_specs(vc)


def figures(vc: VllmConfig, specs: dict, budget: int) -> dict:
    forward = vc.compilation_config.static_forward_context
    vc.compilation_config.static_forward_context = {}
    try:
        vcc = copy.deepcopy(vc)
    finally:
        vc.compilation_config.static_forward_context = forward
    vcc.compilation_config.static_forward_context = forward
    return run_budget(vcc, specs, budget)


def layer_table(specs: dict) -> dict[str, str]:
    return {name: spec_kind(spec) for name, spec in specs.items()}


def cases_for(name: str, d: Path, log, fresh: bool) -> tuple[list[dict], dict]:
    out: list[dict] = []
    info: dict = {}
    builds: dict[tuple, list[Built]] = {}
    for length in MAX_MODEL_LENS:
        try:
            mc = make_model_config(d, length)
            load_error = None
            use_mla, hybrid = bool(mc.use_mla), bool(mc.is_hybrid)
            stateful = hybrid or bool(getattr(mc, "is_attention_free", False)) or bool(
                getattr(mc, "has_inner_state", False))
        except Exception as exc:  # vLLM refuses the config (or this max_model_len)
            mc, load_error, use_mla, hybrid, stateful = None, reason_of(exc), False, False, False
            log(f"  {name} L{length}: refused: {load_error[:200]}")
        prefixes = (True, False) if stateful else (True,)
        for tp in TPS:
            install_groups(tp)
            for kv in KV_DTYPES:
                for block in BLOCKS:
                    for prefix in prefixes:
                        base = {"config": name, "tp": tp, "kv_dtype": kv,
                                "block_size_requested": "auto" if block is None else block,
                                "max_model_len": length, "prefix_caching": prefix}
                        planned = err = None
                        status = "refused"
                        if load_error is not None:
                            err = load_error
                        else:
                            planned, err, status = plan_one(name, mc, tp, kv, block, prefix,
                                                            builds, info, log, fresh)
                        for budget in BUDGETS:
                            case = dict(base, budget_bytes=budget, use_mla=use_mla,
                                        is_hybrid=hybrid)
                            if planned is None:
                                case.update(status=status, reason=err,
                                            spec_source=("not mirrored" if status == "not_built"
                                                         else "vllm-layers"))
                            else:
                                vc, specs, backends = planned
                                try:
                                    figs = figures(vc, specs, budget)
                                    kinds: dict[str, int] = {}
                                    for spec in specs.values():
                                        k = spec_kind(spec)
                                        kinds[k] = kinds.get(k, 0) + 1
                                    attn = [sp for sp in specs.values()
                                            if hasattr(sp, "num_kv_heads")
                                            and spec_kind(sp) != "indexer"]
                                    case.update(status="ok", reason="", spec_source="vllm-layers",
                                                attention_backends=backends,
                                                num_kv_heads=(attn[0].num_kv_heads if attn else 0),
                                                head_size=(attn[0].head_size if attn else 0),
                                                layer_kinds=kinds, **figs)
                                except Exception as exc:  # noqa: BLE001 - vLLM refuses it
                                    case.update(status="refused", reason=reason_of(exc),
                                                spec_source="vllm-layers")
                            out.append(case)
    return out, info


# Assertions vLLM's layers make about the config while they are built, which `vllm serve` hits at start-up on
# the H200 as here: MambaMixer2.__init__ (vllm/model_executor/layers/mamba/mamba_mixer2.py).
MODEL_CHECKS = ("If tensor parallel world size does not divide num_groups",
                "Tensor parallel world size must divide num heads")


def build_key(tp: int, kv: str, prefix: bool) -> tuple:
    return (tp, kv, prefix)


def plan_one(name, mc, tp, kv, block, prefix, builds, info, log, fresh):
    """(vllm_config, specs, backends) or None, the reason and the status."""
    try:
        vc = make_vllm_config(copy.deepcopy(mc), tp, kv, block, prefix)
    except Exception as exc:  # noqa: BLE001 - vLLM refuses the engine config
        return None, reason_of(exc), "refused"
    key = build_key(tp, kv, prefix)
    built = None
    if not fresh:
        for candidate in builds.get(key, []):
            if same_backends(candidate.selections, vc):
                built = candidate
                break
    if built is None:
        t = time.time()
        try:
            built = build_for(vc)
        except Exception as exc:  # noqa: BLE001 - the model cannot be built here
            if (isinstance(exc, ValueError) and str(exc).startswith("No valid attention backend found")) or (
                    isinstance(exc, AssertionError) and str(exc).startswith(MODEL_CHECKS)):
                # vLLM's selector (CudaPlatform.get_attn_backend_cls, vllm/platforms/cuda.py) refuses
                # the combination while the model is built: `vllm serve` stops with this error on the
                # H200 too (e.g. sparse MLA at --block-size 16/32: its backends take multiples of 64), as do
                # the model layers' own checks of the parallel layout (MODEL_CHECKS)
                return None, reason_of(exc), "refused"
            reason = "harness: vLLM's model class could not be built here: " + reason_of(exc)
            info.setdefault("build_errors", {})[f"tp{tp}-{kv}-pc{int(prefix)}"] = reason[:600]
            log(f"  {name} tp{tp} {kv} pc{int(prefix)}: build failed: {reason[:300]}")
            return None, reason, "not_built"
        info["builds"] = info.get("builds", 0) + 1
        info["build_s"] = info.get("build_s", 0.0) + time.time() - t
        builds.setdefault(key, []).append(built)
        # make_vllm_config built a config whose forward context the build filled
        plan_vc = vc
    else:
        plan_vc = vc
        attach(plan_vc, built)
    try:
        specs = plan_specs(plan_vc)
    except Exception as exc:  # noqa: BLE001 - vLLM refuses it (e.g. no common block size)
        return None, reason_of(exc), "refused"
    if "layers" not in info:
        info["layers"] = layer_table(specs)
    return (plan_vc, specs, built.backends), None, "ok"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="tests/data/configs")
    ap.add_argument("--out", default="conformance/vllm/expected.json")
    ap.add_argument("--only", nargs="*", help="config folder names (default: all)")
    ap.add_argument("--fresh", action="store_true",
                    help="build the model for every case (no reuse; slow, for checking reuse)")
    ap.add_argument("--partial-out", help="write only these configs' cases to this file")
    ap.add_argument("--quick", action="store_true",
                    help="tp 1, block auto and max_model_len 2,048 only (a smoke test; with --partial-out)")
    ap.add_argument("--shard", default="0/1", help="K/N: run every N-th config from the K-th")
    ap.add_argument("--tps", nargs="*", type=int, help="tensor-parallel sizes (default: 1 2 4 8)")
    args = ap.parse_args()
    if args.tps:
        global TPS
        TPS = tuple(args.tps)
    if args.quick:
        global BLOCKS, MAX_MODEL_LENS
        TPS, BLOCKS, MAX_MODEL_LENS = (1,), (None,), (2048,)
    root = Path(args.configs)
    names = sorted(p.name for p in root.iterdir() if (p / "config.json").is_file())
    if args.only:
        names = [n for n in names if n in set(args.only)]
    k, n = (int(x) for x in args.shard.split("/"))
    names = names[k::n]

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    t0 = time.time()
    cases: list[dict] = []
    per_config: dict[str, dict] = {}
    for name in names:
        t = time.time()
        got, info = cases_for(name, root / name, log, args.fresh)
        ok = sum(c["status"] == "ok" for c in got)
        info["harness_s"] = round(time.time() - t, 1)
        info["build_s"] = round(info.get("build_s", 0.0), 1)
        log(f"{name}: {ok}/{len(got)} ok, {info.get('builds', 0)} builds "
            f"({info['harness_s']:.1f} s)")
        cases.extend(got)
        per_config[name] = info
    doc = {
        "vllm_version": vllm.__version__,
        "generated_by": "conformance/vllm/run.sh",
        "serve": dict(SERVE, max_model_len=list(MAX_MODEL_LENS), tensor_parallel_size=list(TPS),
                      kv_cache_dtype={k: v for k, v in KV_DTYPES.items()},
                      block_size=["auto" if b is None else b for b in BLOCKS],
                      kv_budget_bytes_per_rank=list(BUDGETS),
                      prefix_caching="on (vLLM's default); also off for models with state layers",
                      model_runner="V2 (VllmConfig.use_v2_model_runner on CUDA)"),
        "harness": {
            "specs_from": "vLLM's model classes built on the meta device; each layer's own "
                          "get_kv_cache_spec (see conformance/vllm/README.md)",
            "stubbed_cuda_extensions": sorted(STUBBED_EXTENSIONS),
            "kernel_capability_queries_answered_false": sorted(KERNEL_QUERIES),
            "kernel_handles_taken_never_run": len(KERNEL_HANDLES),
        },
        "configs": per_config,
        "cases": cases,
    }
    out = Path(args.partial_out or args.out)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(dumps(doc))
    tmp.replace(out)
    log(f"{len(cases)} cases from {len(names)} configs in {time.time() - t0:.0f} s -> {out}")
    return 0


def dumps(doc: dict) -> str:
    """Sorted keys; one case per line (diff-friendly, and 10x smaller than indented)."""
    head = {k: v for k, v in doc.items() if k != "cases"}
    text = json.dumps(head, indent=1, sort_keys=True)
    lines = [json.dumps(c, sort_keys=True) for c in doc["cases"]]
    return text[:-2] + ',\n "cases": [\n' + ",\n".join(lines) + "\n ]\n}\n"


if __name__ == "__main__":
    try:
        rc = main()
    except Exception:
        traceback.print_exc()
        rc = 1
    # Some of what the model classes started (compile workers, FlashInfer's JIT threads) keeps the
    # interpreter from exiting for minutes after the output is written; nothing is left to flush.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)

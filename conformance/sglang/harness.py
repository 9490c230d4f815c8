"""Run SGLang 0.5.23's own KV-pool sizing code on every config under tests/data/configs.

Runs inside the SGLang side virtualenv (see run.sh); never imported by kvdash or its tests.
Writes conformance/sglang/expected.json, which tests/test_conformance_sglang.py compares kvdash with.

What runs is SGLang's code, in the order ``sglang serve`` runs it on one H100/H200 per rank:

1. ``ServerArgs(...).resolve_once()`` (``srt/arg_groups/pipeline.py``): every resolution hook,
   among them ``memory_hook.handle_gpu_memory_settings`` (chunked prefill, CUDA-graph batch sizes,
   the ``mem_fraction_static`` default), the attention backend, the page size.
2. ``publish(server_args, role="scheduler", ...)`` (``srt/runtime_context.py``), as
   ``run_scheduler_process`` does, so ``get_schedule()`` / ``get_parallel()`` answer as in the engine.
3. ``ModelConfig.from_server_args`` (``srt/configs/model_config.py``): heads per rank,
   ``is_hybrid_swa``, MLA dimensions, ``context_len``; then the model loader's choice of class
   (``srt/model_loader/utils.py`` ``get_model_architecture``): SGLang's own class where a module of
   its registry names the architecture, else ``resolve_transformers_arch``, which refuses a
   transformers class that is not backend-compatible (Falcon, Jamba, Zamba2).
4. The runner's own steps: ``resolve_layer_indices``, ``configure_kv_cache_dtype``,
   ``resolve_sliding_window_size``; then a real ``KVCacheConfigurator``
   (``srt/mem_cache/kv_cache_configurator.py``) and the body of its
   ``_resolve_memory_pool_config``: ``_profile_available_bytes``, ``config_from_budget``
   (``create_memory_pool_configurator(...).calculate_pool_sizes``), ``resolve_max_num_reqs``.

What is mocked (README.md beside this file says why each cannot move a figure but the two
free-memory readings, which are the stated inputs): ``torch.cuda``'s device queries answer as an
H100 / H200 (SM90, nvidia-smi's MiB), ``nvidia-smi`` answers the total in MiB, the CUDA kernel
packages (``sgl_kernel``, ``flashinfer``, ...) are empty modules, the built model is a stand-in
that carries no weights (the layer split comes from ``ModelConfig``), and ``torch.cuda.mem_get_info``
answers the two free-memory figures of the case.
"""

from __future__ import annotations

import argparse
import ast
import importlib.abc
import importlib.machinery
import json
import os
import subprocess
import sys
import time
import traceback
import types
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
MIB = 1 << 20
GIB = 1 << 30
# nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits, as on the cards
# (kvdash/data/gpus.json records the same figures, read through NVML).
GPUS = {
    "h100": {"name": "NVIDIA H100 80GB HBM3", "mib": 81559},
    "h200": {"name": "NVIDIA H200", "mib": 143771},
}
CONTEXT_BYTES = 1024 * MIB  # free before weights = total - this (CUDA context, NCCL): stated input

STATE: dict = {"gpu": "h200", "free": 0}
STUBBED: set[str] = set()


# --- CUDA kernel packages: empty modules whose names resolve to inert classes ------------------
class _Meta(type):
    def __getattr__(cls, k):
        if k.startswith("__"):
            raise AttributeError(k)
        return _stub_class(cls.__qualname__ + "." + k)


def _stub_class(q: str):
    STUBBED.add(q.split(".")[0])
    return _Meta(q.rsplit(".", 1)[-1], (), {"__qualname__": q, "__init__": lambda self, *a, **k: None})


class _StubModule(types.ModuleType):
    def __getattr__(self, k):
        if k.startswith("__"):
            raise AttributeError(k)
        return _stub_class(self.__name__ + "." + k)


class _KernelFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    ROOTS = ("sgl_kernel", "flashinfer", "deep_gemm", "flash_attn", "sgl_fa4", "flash_mla")

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.ROOTS:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _StubModule(spec.name)
        m.__path__ = []
        STUBBED.add(spec.name.split(".")[0])
        return m

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _KernelFinder())


# --- torch.cuda answering as one Hopper GPU -------------------------------------------------------
def _total() -> int:
    return GPUS[STATE["gpu"]]["mib"] * MIB


class _Props:
    major, minor, multi_processor_count, is_integrated, gcnArchName = 9, 0, 132, False, ""

    @property
    def name(self):
        return GPUS[STATE["gpu"]]["name"]

    @property
    def total_memory(self):
        return _total()


torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 8
torch.cuda.current_device = lambda: 0
torch.cuda.get_device_capability = lambda d=None: (9, 0)
torch.cuda.get_device_name = lambda d=None: GPUS[STATE["gpu"]]["name"]
torch.cuda.get_device_properties = lambda d=None: _Props()
torch.cuda.mem_get_info = lambda d=None: (STATE["free"], _total())
torch.cuda.empty_cache = lambda: None
torch.cuda.synchronize = lambda d=None: None
torch.cuda.is_initialized = lambda: True
torch.cuda.set_device = lambda d: None
torch.distributed.all_reduce = lambda *a, **k: None  # every rank reads the same free memory

_run = subprocess.run


def _nvidia_smi(cmd, *a, **k):
    if isinstance(cmd, list) and cmd and cmd[0] == "nvidia-smi":
        out = "\n".join([str(GPUS[STATE["gpu"]]["mib"])] * 8) if "memory.total" in " ".join(cmd) else ""
        return subprocess.CompletedProcess(cmd, 0, out + "\n", "")
    return _run(cmd, *a, **k)


subprocess.run = _nvidia_smi

import sglang  # noqa: E402
from sglang.srt.arg_groups.overrides import resolved_view  # noqa: E402
from sglang.srt.configs.model_config import AttentionArch, ModelConfig  # noqa: E402
from sglang.srt.mem_cache import kv_cache_dtype as kvd  # noqa: E402
from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator  # noqa: E402
from sglang.srt.model_executor.model_runner_components.layer_setup import resolve_layer_indices  # noqa: E402
from sglang.srt.model_executor.model_runner_components.load_model_utils import (  # noqa: E402
    resolve_sliding_window_size,
)
from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (  # noqa: E402
    SpecAuxHiddenStateConfig,
)
from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator  # noqa: E402
from sglang.srt.model_loader.utils import resolve_transformers_arch  # noqa: E402
from sglang.srt.platforms import current_platform  # noqa: E402
from sglang.srt.runtime_context import SpawnRanks, get_parallel, get_schedule, publish  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402
from sglang.srt.utils.common import get_available_gpu_memory  # noqa: E402

sys.path.insert(0, str(REPO))
from kvdash.core.model import load_config  # noqa: E402  (pure stdlib: the weights input only)


class StandInModel:
    """The built model, as far as the sizing reads it: no weights, no layer split of its own
    (``start_layer``/``end_layer`` default to the whole model at PP 1), no quantized KV scales, and
    the model class's ``get_attention_sliding_window_size`` when it has one."""

    def __init__(self, window):
        self._window = window

    def get_attention_sliding_window_size(self):
        return self._window


def model_window(model_config: ModelConfig):
    """The model class's own ``get_attention_sliding_window_size`` (Gemma 2/3, gpt-oss, Llama 4 ...),
    called on the config as the built model would; None where the class has none."""
    from sglang.srt.models.registry import ModelRegistry

    try:
        cls, _ = ModelRegistry.resolve_model_cls(model_config.hf_config.architectures)
    except Exception:  # noqa: BLE001 - a class SGLang cannot import here: the config's window
        return "no-class"
    fn = getattr(cls, "get_attention_sliding_window_size", None)
    if fn is None:
        return "no-method"
    shim = types.SimpleNamespace(config=model_config.hf_config, model_config=model_config)
    try:
        return fn(shim)
    except Exception:  # noqa: BLE001
        return "no-method"


def registry_entry_classes() -> dict[str, str]:
    """SGLang's model registry as its source declares it: every ``EntryClass`` name of ``srt/models/*.py``
    (``models/registry.py`` ``import_model_classes`` registers exactly these), with its module.  Read from the
    source, not from ``ModelRegistry.models``: here about half the modules fail to import without their CUDA
    kernels, and the registry skips a module that fails ("Ignore import error"), which on a GPU it imports."""
    out: dict[str, str] = {}
    for f in sorted((Path(sglang.__file__).parent / "srt" / "models").glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass"
                                                    for t in node.targets):
                v = node.value
                for e in (v.elts if isinstance(v, (ast.List, ast.Tuple)) else [v]):
                    if isinstance(e, ast.Name):
                        out[e.id] = f.stem
    return out


ENTRY_CLASSES: dict[str, str] = {}


def model_class(mc: ModelConfig) -> str:
    """``model_loader/utils.py`` ``get_model_architecture`` (default ``--model-impl auto``), as the model loader
    runs it before any KV sizing: SGLang's own class when the registry names an architecture
    (``ModelRegistry.is_arch_supported``, on :data:`ENTRY_CLASSES`), else SGLang's ``resolve_transformers_arch``,
    which raises -- the case is refused with its message -- when the transformers class is not backend-compatible."""
    archs = list(getattr(mc.hf_config, "architectures", None) or [])
    native = [a for a in archs if a in ENTRY_CLASSES]
    if native:
        return f"{native[0]} (models/{ENTRY_CLASSES[native[0]]}.py)"
    return resolve_transformers_arch(mc, archs)[0]


def weights_per_rank(config_dir: Path, tp: int) -> tuple[int, str]:
    try:
        arch = load_config(config_dir / "config.json")
    except Exception as e:  # noqa: BLE001
        return 0, f"kvdash has no estimate ({type(e).__name__}): 0"
    if not arch.weights_known or not arch.weight_bytes:
        return 0, "kvdash has no estimate: 0"
    return -(-arch.weight_bytes // tp), f"kvdash's estimate {arch.weight_bytes} B / tp, rounded up"


ENV0: dict[str, str] = {}


def run_case(config_dir: Path, gpu: str, tp: int, kv: str, page: int | None) -> dict:
    # Each case is a fresh `sglang serve`: resolution writes environment variables (serving_hook.py
    # sets SGLANG_USE_CUDA_IPC_TRANSPORT), which must not reach the next case.
    os.environ.clear()
    os.environ.update(ENV0)
    STATE["gpu"] = gpu
    total = _total()
    case: dict = {"config": config_dir.name, "gpu": gpu, "gpu_total_mib": GPUS[gpu]["mib"], "tp": tp,
                  "kv_dtype": kv, "page_size_requested": page if page is not None else "auto"}
    kw: dict = {"tp_size": tp, "skip_tokenizer_init": True}
    if kv == "fp8":
        kw["kv_cache_dtype"] = "fp8_e4m3"
    if page is not None:
        kw["page_size"] = page
    try:
        sa = ServerArgs(model_path=str(config_dir), **kw)
        sa.resolve_once()
        publish(sa, role="scheduler", ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0))
        # the WORLD group's CPU side, read by get_available_gpu_memory(distributed=...): every rank
        # reads the same mocked free memory, so the MIN over ranks is that figure
        get_parallel().override_permanently(world_group=types.SimpleNamespace(cpu_group=None, world_size=tp))
        v = resolved_view(sa)
        mc = ModelConfig.from_server_args(sa)
        cls = model_class(mc)
    except Exception as e:  # noqa: BLE001 - SGLang refused this setup
        case.update(status="refused", reason=f"{type(e).__name__}: {e}".splitlines()[0][:400])
        return case
    window = model_window(mc)
    sw_source = "model class"
    if window in ("no-class", "no-method"):
        sw_source = f"config ({window})"
        window = None
        model = types.SimpleNamespace()
    else:
        model = StandInModel(window)
    sliding = resolve_sliding_window_size(model, mc)
    _, kv_dtype = kvd.configure_kv_cache_dtype(
        server_args_kv_cache_dtype=v.kv_cache_dtype, model=None, model_dtype=mc.dtype, is_draft_worker=False,
        is_dflash=False, speculative_draft_attention_backend=None, speculative_draft_kv_cache_dtype=None)
    layer_info = resolve_layer_indices(model=model, model_config=mc, is_draft_worker=False)
    weights, weights_basis = weights_per_rank(config_dir, tp)
    pre_free = total - CONTEXT_BYTES
    post_free = pre_free - weights
    case.update(
        mem_fraction_static=v.mem_fraction_static, chunked_prefill_size=v.chunked_prefill_size,
        max_prefill_tokens=v.max_prefill_tokens, page_size=get_schedule().page_size,
        attention_backend=v.attention_backend, prefill_attention_backend=v.prefill_attention_backend,
        decode_attention_backend=v.decode_attention_backend,
        decode_graph_max_bs=v.cuda_graph_config.decode.max_bs,
        decode_graph_backend=str(v.cuda_graph_config.decode.backend),
        prefill_graph_backend=str(v.cuda_graph_config.prefill.backend),
        prefill_graph_sizes=len(v.cuda_graph_config.prefill.bs or []),
        swa_full_tokens_ratio=v.swa_full_tokens_ratio, context_len=mc.context_len,
        is_multimodal=bool(mc.is_multimodal), mm_feature_transport=v.mm_feature_transport,
        architectures=list(mc.hf_config.architectures or []), model_class=cls,
        is_hybrid_swa=bool(mc.is_hybrid_swa), use_mla=mc.attention_arch == AttentionArch.MLA,
        num_kv_heads_per_rank=mc.get_num_kv_heads(tp), head_dim=mc.head_dim, v_head_dim=mc.v_head_dim,
        kv_cache_dtype=str(kv_dtype).replace("torch.", ""), sliding_window_size=sliding,
        sliding_window_source=sw_source,
        num_effective_layers=layer_info.num_effective_layers,
        full_attention_layers=None if layer_info.full_attention_layer_ids is None
        else len(layer_info.full_attention_layer_ids),
        swa_attention_layers=None if layer_info.swa_attention_layer_ids is None
        else len(layer_info.swa_attention_layer_ids),
        weights_bytes_per_rank=weights, weights_basis=weights_basis,
        free_before_weights_bytes=pre_free, free_after_weights_bytes=post_free,
    )
    try:
        kvc = KVCacheConfigurator(
            device="cuda", gpu_id=0, attn_dp_size=1, pp_size=1, pp_group=None, model=model, model_config=mc,
            server_args=sa, kv_cache_dtype=kv_dtype, kv_cache_dtype_str=v.kv_cache_dtype, model_dtype=mc.dtype,
            page_size=get_schedule().page_size, sliding_window_size=sliding,
            spec_algorithm=SpeculativeAlgorithm.from_string(None), is_draft_worker=False,
            post_capture_kv_active=False, spec_aux_config=SpecAuxHiddenStateConfig(), is_hybrid_swa=mc.is_hybrid_swa,
            is_hybrid_swa_compress=mc.is_hybrid_swa_compress, use_mla_backend=mc.attention_arch == AttentionArch.MLA,
            layer_info=layer_info, forward_stream=None, req_to_token_pool=None, token_to_kv_pool_allocator=None,
            memory_pool_config=None)
        STATE["free"] = pre_free
        # distributed/bootstrap.py measure_pre_model_load_memory: the MIN over the world's ranks, read through
        # a float32 tensor when there is more than one rank (utils/common.py get_available_gpu_memory)
        pre = get_available_gpu_memory("cuda", 0, distributed=tp > 1, cpu_group=None)
        STATE["free"] = post_free
        configurator = create_memory_pool_configurator(kvc)
        case["pool_configurator"] = type(configurator).__name__
        case["cell_size_bytes"] = getattr(configurator, "_cell_size", None)
        for k in ("_full_per_token", "_swa_per_token", "_full_layers_num", "_swa_layers_num"):
            if hasattr(configurator, k):
                case[k.strip("_")] = getattr(configurator, k)
        # kv_cache_configurator.py _resolve_memory_pool_config, step by step
        available = kvc._profile_available_bytes(pre)
        case["available_bytes"] = available
        config = kvc.config_from_budget(available)
        config.max_running_requests = kvc.resolve_max_num_reqs(config.max_total_num_tokens)
        config = create_memory_pool_configurator(kvc).finalize_with_max_running_requests(config)
    except Exception as e:  # noqa: BLE001
        case.update(status="refused", reason=f"{type(e).__name__}: {e}".splitlines()[0][:400])
        return case
    case.update(
        status="ok", reason="", max_total_num_tokens=config.max_total_num_tokens,
        full_max_total_num_tokens=config.full_max_total_num_tokens,
        swa_max_total_num_tokens=config.swa_max_total_num_tokens,
        max_running_requests=config.max_running_requests,
        max_mamba_cache_size=get_schedule().max_mamba_cache_size if kvc.mambaish_config is not None else None,
        mamba_cache_per_req=(kvc.mambaish_config.mamba2_cache_params.mamba_cache_per_req
                             if kvc.mambaish_config is not None else None),
        mamba_full_memory_ratio=get_schedule().mamba_full_memory_ratio if kvc.mambaish_config is not None else None,
        mamba_ratio=kvc._calculate_mamba_ratio() if kvc.mambaish_config is not None else None,
    )
    # managers/scheduler.py: the start-up line (tp rank 0); available_gpu_mem is read after the
    # pools and CUDA graphs are allocated, which no sizing code decides: not reproduced here.
    case["log_line"] = (f"max_total_num_tokens={config.max_total_num_tokens}, "
                        f"chunked_prefill_size={v.chunked_prefill_size}, "
                        f"max_prefill_tokens={v.max_prefill_tokens}, "
                        f"max_running_requests={config.max_running_requests}, "
                        f"context_len={mc.context_len}, available_gpu_mem=")
    return case


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default=str(REPO / "tests" / "data" / "configs"))
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--tps", nargs="*", type=int, default=[1, 2, 4, 8])
    ap.add_argument("--gpus", nargs="*", default=["h100", "h200"])
    ap.add_argument("--kvs", nargs="*", default=["bf16", "fp8"])
    ap.add_argument("--pages", nargs="*", default=["auto", "16", "64"])
    ap.add_argument("--shard", default="0/1")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    ENV0.update(os.environ)
    # _profile_available_bytes calls gc.collect() (weight-loading temporaries); here the heap holds only the
    # imported modules, so they are frozen once (gc.freeze) and every collection stays short
    from sglang.srt.models.registry import ModelRegistry  # imported once, before the freeze
    import gc

    ENTRY_CLASSES.update(registry_entry_classes())
    assert set(ModelRegistry.models) <= set(ENTRY_CLASSES), "a registered class the source scan missed"
    gc.collect()
    gc.freeze()
    k, n = (int(x) for x in a.shard.split("/"))
    dirs = sorted(p for p in Path(a.configs).iterdir() if (p / "config.json").exists())
    if a.only:
        dirs = [p for p in dirs if p.name in a.only]
    dirs = dirs[k::n]
    cases, per_config = [], {}
    for d in dirs:
        t0 = time.time()
        for gpu in a.gpus:
            for tp in a.tps:
                for kv in a.kvs:
                    for page in a.pages:
                        try:
                            c = run_case(d, gpu, tp, kv, None if page == "auto" else int(page))
                        except Exception as e:  # noqa: BLE001 - the harness itself failed: recorded, never guessed
                            c = {"config": d.name, "gpu": gpu, "tp": tp, "kv_dtype": kv,
                                 "page_size_requested": page, "status": "harness_error",
                                 "reason": f"{type(e).__name__}: {e}".splitlines()[0][:400]}
                            traceback.print_exc()
                        cases.append(c)
        per_config[d.name] = {"harness_s": round(time.time() - t0, 1)}
        print(f"{d.name}: {round(time.time() - t0, 1)} s", file=sys.stderr, flush=True)
    Path(a.out).write_text(json.dumps({"sglang_version": sglang.__version__, "configs": per_config,
                                       "stubbed_modules": sorted(STUBBED), "cases": cases}))


if __name__ == "__main__":
    main()

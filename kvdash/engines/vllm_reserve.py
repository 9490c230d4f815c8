"""``--reserve auto`` for vLLM 0.33: the runtime reserve per rank as a sum of named terms, each with its basis.

How vLLM 0.33 turns these terms into KV memory (``Worker.determine_available_memory`` in
``vllm/v1/worker/gpu_worker.py`` at v0.33.0, with ``memory_profiling`` in ``vllm/utils/mem_utils.py``)::

    requested          = ceil(total x gpu_memory_utilization)             (request_memory, v1/worker/utils.py)
    non_kv_cache       = total_consumed + transient_peak_headroom
        total_consumed = free before the engine - free after the profile run
                         (weights + non-torch memory: NCCL, cuBLAS workspaces, CUDA context growth)
        transient_peak_headroom = torch peak - torch allocated after the profile run
                         (the activation peak of a max_num_batched_tokens forward pass)
    available_kv       = requested - non_kv_cache - cudagraph_memory_estimate_applied

The CUDA-graph estimate is subtracted **by default** in vLLM 0.33.0: ``determine_available_memory`` calls
``GPUModelRunner.profile_cudagraph_memory()`` (``vllm/v1/worker/gpu_model_runner.py``) whenever
``compilation_config.cudagraph_mode`` is not NONE -- the default optimization level O2 sets
FULL_AND_PIECEWISE (``OPTIMIZATION_LEVEL_02`` in ``vllm/config/vllm.py``) and ``enforce_eager`` defaults to
False -- and applies it when ``envs.VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` is true, whose default is
``"1"`` (``vllm/envs.py``: "Enabled by default as of v0.21.0").  Only ``--enforce-eager``,
``cudagraph_mode=NONE`` or ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0`` make it 0.  The estimate is the
largest first capture of the modes plus (graphs - 1) x the second capture's size per mode; on Hopper the
default capture sizes are 51 (1, 2, 4, 8..248 by 8, 256..512 by 16), the same 51 the vLLM 0.19 logs list.

So kvdash's ``floor(total x util) - weights/rank - reserve`` matches it with
``reserve = activation peak + non-torch overhead + CUDA-graph memory`` (the ceil/floor of
``requested`` differs by at most one byte).

Published figures (the only public measurements this module knows): llm-d-planner's calibration,
``data/configuration/vllm_memory_constants.json`` in github.com/llm-d-incubation/llm-d-planner
(commit 964c9dc), fitted to real vLLM **0.19.0** start-up runs on **H100-80GB** at the default
``max_num_batched_tokens`` 8192; its accuracy report is ``accuracy/results/v0.19.0/accuracy_report.md``
in the same repository.  vLLM 0.19 computed the CUDA-graph estimate by the same rule but did not subtract
it, so the fitted terms leave it out.  kvdash's CUDA-graph term comes from the same runs' logged
``Estimated CUDA graph memory: X GiB total`` (``accuracy/results/v0.19.0/results_raw.csv`` at commit
d3121e0, copied with the layer counts to ``benchmarks/data/llmd_vllm0190_h100_runs.csv``): per vLLM
architecture, the median over its distinct runs of the estimate per decoder layer on the rank's pipeline
stage (graphs capture every layer's kernels: 0.49 to 1.92 GiB per rank over 2B to 72B models, 15.9 to
62.7 MiB per layer), times the model's layers per stage.  An architecture without runs takes the median
over all 49 distinct runs, labelled extrapolated.

Bytes: each GiB figure is converted once, ``figure x 2**30`` rounded half-up to a whole byte
(exact decimal arithmetic, no float).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

GIB = 1 << 30

SOURCE = ("llm-d-planner data/configuration/vllm_memory_constants.json (github.com/llm-d-incubation/"
          "llm-d-planner @964c9dc), fitted to vLLM 0.19.0 runs on H100-80GB at max_num_batched_tokens 8192")
MEASURED_VLLM = "0.19.0"
MEASURED_GPU = "H100-80GB"
MEASURED_BATCHED_TOKENS = 8192


def gib_bytes(figure: str) -> int:
    """``"1.89"`` GiB -> 2,029,372,047 bytes: ``figure x 2**30`` rounded half-up to a whole byte."""
    return int((Decimal(figure) * GIB).to_integral_value(rounding=ROUND_HALF_UP))


# activation peak per vLLM architecture class (GiB, as published)
ACTIVATION_GIB: dict[str, str] = {
    "LlamaForCausalLM": "1.89", "Qwen2ForCausalLM": "2.25", "Qwen3ForCausalLM": "2.21",
    "Mistral3ForConditionalGeneration": "2.10", "PixtralForConditionalGeneration": "2.10",
    "DeepseekV2ForCausalLM": "1.93", "GraniteForCausalLM": "0.85", "LlavaNextForConditionalGeneration": "0.79",
    "MixtralForCausalLM": "1.21", "Phi3ForCausalLM": "1.52", "Qwen2MoeForCausalLM": "2.47",
    "Qwen3MoeForCausalLM": "2.68", "Gemma2ForCausalLM": "3.65", "Gemma3ForCausalLM": "3.94",
    "GemmaForCausalLM": "3.63",
}
# activation peak by family when the architecture has no figure of its own (GiB)
FAMILY_GIB: dict[str, str] = {"dense": "2.00", "moe": "2.50"}
# non-torch overhead by parallelism (GiB): NCCL buffers, cuBLAS workspaces, context growth
NON_TORCH_GIB: dict[str, str] = {"tp1_pp1": "0.27", "tp1_ppN": "0.07", "tpN_pp1": "2.10", "tpN_ppN": "2.10"}

# the range of "Estimated CUDA graph memory" in llm-d-planner's vLLM 0.19.0 H100-80GB start-up logs
# (accuracy/results/v0.19.0/logs at d3121e0: Llama-3.1-8B at PP 4 0.49 GiB ... Llama-3.3-70B at TP 2 1.92 GiB)
CUDA_GRAPH_LOGGED_GIB = ("0.49", "1.92")
CUDA_GRAPH_SOURCE = ("'Estimated CUDA graph memory' of llm-d-planner's vLLM 0.19.0 H100-80GB start-up runs "
                     "(accuracy/results/v0.19.0/results_raw.csv @d3121e0)")
# MiB of CUDA-graph estimate per decoder layer on the rank's stage: the median over the architecture's
# distinct runs (model, TP, PP, dtype, quantization, KV dtype) of logged GiB x 1024 / layers per stage,
# rounded half-up to 0.01 MiB; (figure, runs).  tests/test_reserve.py recomputes them from
# benchmarks/data/llmd_vllm0190_h100_runs.csv.
CUDA_GRAPH_MIB_PER_LAYER: dict[str, tuple[str, int]] = {
    "LlamaForCausalLM": ("26.88", 15), "Qwen2ForCausalLM": ("22.31", 9), "Qwen3ForCausalLM": ("23.89", 1),
    "Mistral3ForConditionalGeneration": ("26.62", 3), "DeepseekV2ForCausalLM": ("52.72", 1),
    "GraniteForCausalLM": ("18.94", 3), "LlavaNextForConditionalGeneration": ("15.87", 1),
    "MixtralForCausalLM": ("26.24", 1), "Phi3ForCausalLM": ("20.74", 1), "PhiForCausalLM": ("17.60", 1),
    "Qwen2MoeForCausalLM": ("34.99", 1), "Qwen3MoeForCausalLM": ("26.45", 1), "Gemma2ForCausalLM": ("20.48", 3),
    "Gemma3ForCausalLM": ("21.08", 3), "GemmaForCausalLM": ("30.72", 1), "GptOssForCausalLM": ("46.51", 1),
    "Llama4ForConditionalGeneration": ("23.25", 1), "KimiVLForConditionalGeneration": ("42.29", 2),
}
CUDA_GRAPH_MIB_PER_LAYER_ALL = ("25.23", 49)  # the median over all 49 distinct runs

# the smallest reserve (activation peak + non-torch memory) any of the 49 distinct published vLLM 0.19.0 H100-80GB
# start-ups kept: codellama/CodeLlama-7b-hf at TP 1, 0.77 + 0.25 GiB (benchmarks/data/llmd_vllm0190_h100_runs.csv,
# from llm-d-planner's accuracy/results/v0.19.0/results_raw.csv @d3121e0; tests/test_reserve.py recomputes it).
# vLLM 0.33 subtracts CUDA graphs besides, so a logged pool that leaves less is implausible.
SMALLEST_PUBLISHED_RESERVE_GIB = "1.02"

# config.json model_type -> the vLLM architecture class it resolves to
ARCH_CLASS: dict[str, str] = {
    "llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
    "deepseek_v2": "DeepseekV2ForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM",
    "granite": "GraniteForCausalLM", "mixtral": "MixtralForCausalLM", "phi3": "Phi3ForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM", "gemma2": "Gemma2ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM", "gemma3": "Gemma3ForCausalLM", "gemma": "GemmaForCausalLM",
    "mistral": "MistralForCausalLM", "gpt_oss": "GptOssForCausalLM", "opt": "OPTForCausalLM",
    "phi": "PhiForCausalLM", "llama4": "Llama4ForConditionalGeneration", "kimi_vl": "KimiVLForConditionalGeneration",
    "mistral3": "Mistral3ForConditionalGeneration", "llava_next": "LlavaNextForConditionalGeneration",
}
MOE_TYPES = frozenset({"mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "kimi_k2", "glm4_moe",
                       "gpt_oss", "llama4", "granitemoe", "granitemoehybrid", "jamba", "qwen3_next", "olmoe",
                       "phimoe", "dbrx"})


@dataclass(frozen=True)
class ReserveTerm:
    name: str
    bytes: int
    basis: str
    extrapolated: bool

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "bytes": self.bytes, "basis": self.basis, "extrapolated": self.extrapolated}


def mib_bytes(figure: str, times: int = 1) -> int:
    """``figure`` MiB x ``times`` in bytes, rounded half-up: ``"26.88"`` x 32 = 901,943,132.16 -> 901,943,132."""
    return int((Decimal(figure) * (1 << 20) * times).to_integral_value(rounding=ROUND_HALF_UP))


def layers_per_stage(layers: int, pp: int) -> int:
    """Decoder layers on the largest pipeline stage: ``ceil(layers / pp)``."""
    return -(-layers // max(pp, 1))


MEASURED_GRAPHS = 51  # capture sizes of the measured runs: 1, 2, 4, 8..248 by 8, 256..512 by 16 (H100, 1,024 seqs)


def cuda_graph_term(model_type: str, layers: int, pp: int, other_gpu: bool, context: str,
                    graphs: int = MEASURED_GRAPHS) -> ReserveTerm:
    """The CUDA-graph estimate vLLM 0.33 subtracts by default: the architecture's MiB per layer (median of
    its vLLM 0.19 runs) x the layers on the rank's stage, x ``graphs / 51`` when the engine's caps capture
    another number of graphs than the measured runs (vLLM's estimate is one capture plus ``graphs - 1`` x the
    next one's size: close to proportional to the number of graphs)."""
    cls = ARCH_CLASS.get(model_type, "")
    own = CUDA_GRAPH_MIB_PER_LAYER.get(cls)
    figure, runs = own or CUDA_GRAPH_MIB_PER_LAYER_ALL
    n = layers_per_stage(layers, pp)
    scaled = graphs != MEASURED_GRAPHS
    whose = (f"{cls} {figure} MiB per layer (median of its {runs} distinct run{'s' if runs > 1 else ''})" if own
             else f"{figure} MiB per layer, the median of all {runs} distinct runs ({cls or model_type or 'unknown'} "
                  "has none of its own)")
    total = mib_bytes(figure, n) if not scaled else \
        int((Decimal(figure) * (1 << 20) * n * graphs / MEASURED_GRAPHS).to_integral_value(rounding=ROUND_HALF_UP))
    per_graphs = (f" x {graphs} capture sizes / the {MEASURED_GRAPHS} of the measured runs (the engine's caps: "
                  "VllmConfig._set_cudagraph_sizes, vllm/config/vllm.py)") if scaled else \
        f" ({graphs} capture sizes, as in the measured runs)"
    return ReserveTerm("CUDA-graph memory", total,
                       f"{whose} x {n} layers per stage{per_graphs}; "
                       "added because vLLM 0.33.0 subtracts it by default: "
                       "Worker.determine_available_memory (vllm/v1/worker/gpu_worker.py) takes "
                       "profile_cudagraph_memory() off the KV budget when cudagraph_mode is not NONE (O2 default "
                       "FULL_AND_PIECEWISE) and VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 (vllm/envs.py default, "
                       "since v0.21); 0 with --enforce-eager; "
                       f"from the {CUDA_GRAPH_SOURCE}{context}", other_gpu or own is None or not layers or scaled)


def off_measured_gpu(gpu: str | None) -> bool:
    """Whether the published terms, measured on an H100, are applied to another GPU (a preset key such as ``h200`` or
    an NVML name such as ``NVIDIA H200``): they are then labelled extrapolated."""
    return gpu is not None and gpu != "" and "H100" not in gpu.upper().replace(" ", "")


def auto_reserve(model_type: str, tp: int, pp: int, max_batched_tokens: int = MEASURED_BATCHED_TOKENS,
                 gpu: str | None = None, calibration: dict[str, Any] | None = None,
                 *, layers: int, graphs: int = MEASURED_GRAPHS) -> dict[str, Any]:
    """The runtime reserve per rank for ``--reserve auto``: ``{"bytes", "basis", "terms": [...]}``.

    A matching ``calibration`` entry (``kvdash calibrate``: the reserve a running engine kept) wins over
    the published terms.  Otherwise: activation peak (per architecture, else by family) + non-torch
    overhead (by TP/PP) + CUDA-graph memory (per architecture and decoder layer; ``layers`` is the
    model's decoder layer count; ``graphs``: the CUDA-graph capture sizes the engine's caps give,
    :func:`kvdash.engines.vllm.cudagraph_capture_sizes`).  The activation peak is the published figure at 8,192
    batched tokens, applied unscaled (and flagged extrapolated) at other ``max_num_batched_tokens``: no
    measurement at other sizes is at hand.  A term is ``extrapolated`` when the configuration differs from what it
    was measured on (another GPU, another max_num_batched_tokens, a family base or all-run median
    instead of the architecture's own figure)."""
    if calibration is not None:
        term = ReserveTerm(
            "measured reserve (calibration)", int(calibration["reserve_bytes"]),
            f"kvdash calibrate on {calibration.get('date', '?')}: {calibration.get('model', '?')} on "
            f"{calibration.get('gpu', '?')}, TP {calibration.get('tp', '?')}, vLLM "
            f"{calibration.get('vllm_version', '?')}, max_num_batched_tokens "
            f"{calibration.get('max_num_batched_tokens', '?')}", False)
        return {"bytes": term.bytes, "basis": "calibration entry", "terms": [term.as_dict()]}
    other_gpu = off_measured_gpu(gpu)
    other_tokens = max_batched_tokens != MEASURED_BATCHED_TOKENS
    context = (f"; measured on {MEASURED_GPU}" + (f", applied to {gpu}" if other_gpu else "")
               + f" at max_num_batched_tokens {MEASURED_BATCHED_TOKENS}"
               + (f", applied unscaled to {max_batched_tokens}" if other_tokens else ""))
    cls = ARCH_CLASS.get(model_type, "")
    if cls in ACTIVATION_GIB:
        act = ReserveTerm("activation peak", gib_bytes(ACTIVATION_GIB[cls]),
                          f"{cls} {ACTIVATION_GIB[cls]} GiB (per-architecture figure){context}",
                          other_gpu or other_tokens)
    else:
        family = "moe" if model_type in MOE_TYPES else "dense"
        act = ReserveTerm("activation peak", gib_bytes(FAMILY_GIB[family]),
                          f"{family} family base {FAMILY_GIB[family]} GiB ({cls or model_type or 'unknown'} "
                          f"has no figure of its own){context}", True)
    key = ("tp1" if tp == 1 else "tpN") + ("_pp1" if pp == 1 else "_ppN")
    nt = ReserveTerm("non-torch overhead", gib_bytes(NON_TORCH_GIB[key]),
                     f"{key} {NON_TORCH_GIB[key]} GiB (NCCL, cuBLAS workspaces){context}", other_gpu)
    graph_term = cuda_graph_term(model_type, layers, pp, other_gpu, context, graphs)
    terms = [act, nt, graph_term]
    return {"bytes": sum(t.bytes for t in terms),
            "basis": f"published terms ({SOURCE}; CUDA graphs: {CUDA_GRAPH_SOURCE})",
            "terms": [t.as_dict() for t in terms]}


def calibration_matches(entry: dict[str, Any], model: str, gpu: str | None, tp: int, pp: int) -> bool:
    """A calibration entry applies when model, TP, PP and (if both are known) GPU are the same."""
    if entry.get("model") != model or int(entry.get("tp", 0)) != tp or int(entry.get("pp", 1)) != pp:
        return False
    return gpu is None or entry.get("gpu") in (None, gpu)

"""``--reserve auto``: the runtime reserve per rank as a sum of named terms, each with its basis.

How vLLM 0.33 turns these terms into KV memory (``Worker.determine_available_memory`` in
``vllm/v1/worker/gpu_worker.py`` at v0.33.0, with ``memory_profiling`` in ``vllm/utils/mem_utils.py``)::

    requested          = ceil(total x gpu_memory_utilization)             (request_memory, v1/worker/utils.py)
    non_kv_cache       = total_consumed + transient_peak_headroom
        total_consumed = free before the engine - free after the profile run
                         (weights + non-torch memory: NCCL, cuBLAS workspaces, CUDA context growth)
        transient_peak_headroom = torch peak - torch allocated after the profile run
                         (the activation peak of a max_num_batched_tokens forward pass)
    available_kv       = requested - non_kv_cache - cudagraph_memory_estimate
        (the CUDA-graph estimate is subtracted when VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1,
         the default since v0.21)

So kvdash's ``floor(total x util) - weights/rank - reserve`` matches it with
``reserve = activation peak + non-torch overhead + CUDA-graph memory`` (the ceil/floor of
``requested`` differs by at most one byte).

Published figures (the only public measurements this module knows): llm-d-planner's calibration,
``data/configuration/vllm_memory_constants.json`` in github.com/llm-d-incubation/llm-d-planner
(commit 964c9dc), fitted to real vLLM **0.19.0** start-up runs on **H100-80GB** at the default
``max_num_batched_tokens`` 8192; its accuracy report is ``accuracy/results/v0.19.0/accuracy_report.md``
in the same repository.  vLLM 0.19 did not yet subtract CUDA-graph memory, so the fitted terms leave it
out; the runs' own logs estimate it at 0.49 to 1.92 GiB per rank, too model-dependent to apply as one
figure: kvdash leaves it at 0 B and says so (``kvdash calibrate`` measures the whole reserve of a running
engine, CUDA graphs included).

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

# config.json model_type -> the vLLM architecture class it resolves to
ARCH_CLASS: dict[str, str] = {
    "llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
    "deepseek_v2": "DeepseekV2ForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM",
    "granite": "GraniteForCausalLM", "mixtral": "MixtralForCausalLM", "phi3": "Phi3ForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM", "gemma2": "Gemma2ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM", "gemma3": "Gemma3ForCausalLM", "gemma": "GemmaForCausalLM",
    "mistral": "MistralForCausalLM", "gpt_oss": "GptOssForCausalLM", "opt": "OPTForCausalLM",
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


def auto_reserve(model_type: str, tp: int, pp: int, max_batched_tokens: int = MEASURED_BATCHED_TOKENS,
                 gpu: str | None = None, calibration: dict[str, Any] | None = None) -> dict[str, Any]:
    """The runtime reserve per rank for ``--reserve auto``: ``{"bytes", "basis", "terms": [...]}``.

    A matching ``calibration`` entry (``kvdash calibrate``: the reserve a running engine kept) wins over
    the published terms.  Otherwise: activation peak (per architecture, else by family) + non-torch
    overhead (by TP/PP) + CUDA-graph memory (0 B: no published figure).  A term is ``extrapolated`` when
    the configuration differs from what it was measured on (another GPU, another max_num_batched_tokens,
    a family base instead of the architecture's own figure)."""
    if calibration is not None:
        term = ReserveTerm(
            "measured reserve (calibration)", int(calibration["reserve_bytes"]),
            f"kvdash calibrate on {calibration.get('date', '?')}: {calibration.get('model', '?')} on "
            f"{calibration.get('gpu', '?')}, TP {calibration.get('tp', '?')}, vLLM "
            f"{calibration.get('vllm_version', '?')}, max_num_batched_tokens "
            f"{calibration.get('max_num_batched_tokens', '?')}", False)
        return {"bytes": term.bytes, "basis": "calibration entry", "terms": [term.as_dict()]}
    other_gpu = gpu is not None and "H100" not in gpu.upper().replace(" ", "")
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
    graphs = ReserveTerm("CUDA-graph memory", 0,
                         "0 B: not added; vLLM 0.33 subtracts profile_cudagraph_memory() "
                         "(VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1, default since v0.21), which the published "
                         "terms (vLLM 0.19) leave out; vLLM 0.19 start-up logs on H100-80GB estimate it at "
                         f"{CUDA_GRAPH_LOGGED_GIB[0]} to {CUDA_GRAPH_LOGGED_GIB[1]} GiB per rank for 2B to 70B "
                         "models (llm-d-planner accuracy/results/v0.19.0/logs @d3121e0); "
                         "kvdash calibrate measures it with the rest", True)
    terms = [act, nt, graphs]
    return {"bytes": sum(t.bytes for t in terms), "basis": f"published terms ({SOURCE})",
            "terms": [t.as_dict() for t in terms]}


def calibration_matches(entry: dict[str, Any], model: str, gpu: str | None, tp: int, pp: int) -> bool:
    """A calibration entry applies when model, TP, PP and (if both are known) GPU are the same."""
    if entry.get("model") != model or int(entry.get("tp", 0)) != tp or int(entry.get("pp", 1)) != pp:
        return False
    return gpu is None or entry.get("gpu") in (None, gpu)

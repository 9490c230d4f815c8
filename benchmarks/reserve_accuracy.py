"""How close ``--reserve 0`` and ``--reserve auto`` come to the KV pool real vLLM start-ups logged,
in-sample and out of sample.

Run: python benchmarks/reserve_accuracy.py          (prints Markdown tables; no GPU, no network)

Data (``benchmarks/data/llmd_vllm0190_h100_runs.csv``): the 59 successful vLLM **0.19.0** start-ups on
**H100-80GB** that llm-d-planner published (github.com/llm-d-incubation/llm-d-planner at commit d3121e0,
``accuracy/results/v0.19.0/results_raw.csv``, parsed from ``accuracy/results/v0.19.0/logs/<log>.log``;
``max_num_batched_tokens`` 8192), with each model's vLLM architecture class and decoder layer count added
from its ``config.json``.  From each log: ``total_memory`` (79.19 GiB, torch's view of the card), the
profiled weights, activation peak and non-torch increase per rank, the CUDA-graph estimate, the
``Available KV cache memory`` and ``GPU KV cache size: N tokens``.  Log figures are printed to 0.01 GiB,
so each input carries up to +-0.005 GiB of rounding.

What is compared, per run (vLLM 0.19 did **not** subtract the CUDA-graph estimate, so neither does the
``auto`` figure here; vLLM 0.33 does, see kvdash/engines/vllm_reserve.py):

* ``--reserve 0``: ``total x util - weights/rank``.
* ``auto (published)``: minus llm-d-planner's published activation + non-torch terms (kvdash/engines/vllm_reserve.py).
  Those terms were fitted to these very runs: **in-sample**.
* ``auto (leave one model out)``: the same rule refitted without every run of the model being predicted
  (activation: median over the architecture's other distinct runs, else over the family's -- dense or
  MoE; non-torch: median over the other runs of the same parallelism key tp1_pp1 / tp1_ppN / tpN):
  **out of sample** for the model.

Tables: (1) KV tokens against the logged ``GPU KV cache size`` for the runs whose KV layout kvdash models
(a preset, or a config.json under tests/data/configs; kvdash's tokens at the logged KV memory must land
within the log's rounding, else the run is left out and named); (2) available KV memory for all 49
distinct runs, summarised; (3) Qwen3-14B on vLLM 0.15.0 to 0.18.0 (the same repository's
``accuracy/results/version-sweep/runs/*.json``: a model outside the fit and other vLLM versions);
(4) the CUDA-graph estimate itself, each run predicted from the others.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Callable
from decimal import ROUND_FLOOR, Decimal
from fractions import Fraction
from functools import partial
from pathlib import Path
from typing import Any

from kvdash.core.model import Architecture, custom, load_config, load_preset
from kvdash.engines.vllm import rank_shapes
from kvdash.engines.vllm_reserve import ACTIVATION_GIB, FAMILY_GIB, NON_TORCH_GIB

ROOT = Path(__file__).resolve().parent
DATA = ROOT / "data" / "llmd_vllm0190_h100_runs.csv"
CONFIGS = ROOT.parent / "tests" / "data" / "configs"
SOURCE = "llm-d-planner@d3121e0 accuracy/results/v0.19.0/results_raw.csv"
GIB = 1 << 30
BLOCK = 16
MOE = {"MixtralForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "DeepseekV2ForCausalLM",
       "GptOssForCausalLM", "Llama4ForConditionalGeneration", "KimiVLForConditionalGeneration"}

# model id -> kvdash's KV layout: a preset, or a published config.json copy in tests/data/configs
LAYOUT: dict[str, Callable[[], Architecture]] = {}
for _ids, _preset in ((("meta-llama/Llama-3.1-8B-Instruct", "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16",
                        "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8"), "llama-3.1-8b"),
                      (("RedHatAI/Llama-3.3-70B-Instruct-fp8-dynamic",
                        "redhatai/Llama-3.3-70B-Instruct-quantized.w8a8"), "llama-3.1-70b"),
                      (("Qwen/Qwen2.5-7B-Instruct", "RedHatAI/Qwen2.5-7B-Instruct-fp8-dynamic",
                        "RedHatAI/Qwen2.5-7B-Instruct-quantized.w8a8"), "qwen2.5-7b"),
                      (("Qwen/Qwen2.5-72B-Instruct",), "qwen2.5-72b"), (("Qwen/Qwen3-8B",), "qwen3-8b"),
                      (("mistralai/Mixtral-8x7B-Instruct-v0.1",), "mixtral-8x7b"),
                      (("google/gemma-2-9b-it",), "gemma-2-9b"), (("openai/gpt-oss-20b",), "gpt-oss-20b")):
    for _id in _ids:
        LAYOUT[_id] = partial(load_preset, _preset)
for _id, _dir in (("deepseek-ai/DeepSeek-V2-Lite-Chat", "deepseek-v2-lite"), ("google/gemma-2-27b-it", "gemma-2-27b"),
                  ("google/gemma-3-27b-it", "gemma-3-27b-it"), ("google/gemma-3-4b-it", "gemma-3-4b-it"),
                  ("Qwen/Qwen1.5-MoE-A2.7B", "qwen1.5-moe-a2.7b"), ("Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b"),
                  ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama-4-scout-17b-16e-instruct")):
    LAYOUT[_id] = partial(load_config, CONFIGS / _dir / "config.json")


def g(text: str) -> Fraction:
    """A logged GiB figure, exactly."""
    return Fraction(text)


def load_runs() -> list[dict[str, str]]:
    return list(csv.DictReader(DATA.read_text().splitlines()))


def distinct(runs: list[dict[str, str]]) -> list[dict[str, str]]:
    """One run per configuration: runs differing only in max_model_len profile the same figures."""
    seen: dict[tuple[str, ...], dict[str, str]] = {}
    for r in runs:
        seen.setdefault(tuple(r[k] for k in ("model", "tp", "pp", "dtype", "quantization", "kv_cache_dtype",
                                             "gpu_memory_utilization")), r)
    return list(seen.values())


def nt_key(r: dict[str, str]) -> str:
    return ("tp1" if r["tp"] == "1" else "tpN") + ("_pp1" if r["pp"] == "1" else "_ppN")


def published_reserve(r: dict[str, str]) -> Fraction:
    """llm-d-planner's published activation + non-torch terms (GiB), as kvdash's auto takes them."""
    act = ACTIVATION_GIB.get(r["architecture"]) or FAMILY_GIB["moe" if r["architecture"] in MOE else "dense"]
    key = nt_key(r) if nt_key(r) != "tpN_ppN" else "tpN_pp1"
    return g(act) + g(NON_TORCH_GIB[key])


def refit_reserve(r: dict[str, str], pool: list[dict[str, str]]) -> Fraction:
    """The same rule refitted on ``pool`` (the runs of every other model): medians of distinct runs."""
    same = [g(x["activation_memory_gib"]) for x in pool if x["architecture"] == r["architecture"]]
    fam = [g(x["activation_memory_gib"]) for x in pool if (x["architecture"] in MOE) == (r["architecture"] in MOE)]
    nts = [g(x["non_torch_forward_gib"]) for x in pool if nt_group(x) == nt_group(r)]
    tp1 = [g(x["non_torch_forward_gib"]) for x in pool if x["tp"] == r["tp"] == "1"]  # tp1_ppN: only one model ran it
    return Fraction(statistics.median(same or fam)) + Fraction(statistics.median(nts or tp1))


def nt_group(r: dict[str, str]) -> str:
    """The parallelism key of the non-torch term; TP > 1 is one group whatever the PP."""
    return "tpN" if r["tp"] != "1" else nt_key(r)


def kv_memory(r: dict[str, str], reserve: Fraction) -> Fraction:
    """Available KV memory (GiB) kvdash predicts: total x util - weights/rank - reserve."""
    return g(r["init_total_memory_gib"]) * g(r["gpu_memory_utilization"]) - g(r["weights_memory_gib"]) - reserve


def kv_dtype(r: dict[str, str]) -> str:
    if r["kv_cache_dtype"] == "fp8":
        return "fp8"
    return {"torch.float32": "fp32", "torch.float16": "fp16"}.get(r["dtype"], "bf16")


def tokens(arch: Architecture, r: dict[str, str], gib: Fraction) -> int:
    """vLLM's logged token count for a KV memory of ``gib``: whole blocks, per KV-cache group."""
    shape = rank_shapes(arch, kv_dtype(r), "tensor", int(r["tp"]), 1, BLOCK)[0]
    budget = int((Decimal(gib.numerator) / Decimal(gib.denominator) * GIB).to_integral_value(ROUND_FLOOR))
    return max(budget, 0) // shape.block_bytes // shape.attention_groups * shape.block_size


def pct(pred: float, logged: float) -> str:
    return f"{100 * (pred - logged) / logged:+.2f}%"


def token_rows() -> tuple[list[list[str]], list[str]]:
    every = distinct(load_runs())
    rows, left_out = [], []
    for r in every:  # runs differing only in max_model_len log the same pool: one row each
        make = LAYOUT.get(r["model"])
        if make is None or r["pp"] != "1":
            continue
        arch = make()
        logged = int(r["kv_cache_tokens"])
        at_logged = tokens(arch, r, g(r["kv_cache_memory_gib"]))  # kvdash's layout at the logged memory
        if abs(at_logged - logged) > logged * 0.0035:  # 0.005 GiB of rounding on >= 1.5 GiB of KV
            left_out.append(f"{r['log']} (kvdash's layout gives {at_logged:,} tokens at the logged "
                            f"{r['kv_cache_memory_gib']} GiB, the log {logged:,})")
            continue
        pool = [x for x in every if x["model"] != r["model"]]
        zero = tokens(arch, r, kv_memory(r, Fraction(0)))
        pub = tokens(arch, r, kv_memory(r, published_reserve(r)))
        loo = tokens(arch, r, kv_memory(r, refit_reserve(r, pool)))
        rows.append([f"`{r['log']}`", f"{logged:,}", f"{zero:,}", pct(zero, logged), f"{pub:,}", pct(pub, logged),
                     f"{loo:,}", pct(loo, logged)])
    return rows, left_out


def summary(errors: list[float]) -> str:
    a = [abs(e) for e in errors]
    return f"{statistics.median(a):.2f}% | {max(a):.2f}% | {min(errors):+.2f}% to {max(errors):+.2f}%"


def memory_rows() -> list[list[str]]:
    every = distinct(load_runs())
    errs: dict[str, list[float]] = {"zero": [], "pub": [], "loo": []}
    for r in every:
        logged = float(g(r["kv_cache_memory_gib"]))
        pool = [x for x in every if x["model"] != r["model"]]
        for name, reserve in (("zero", Fraction(0)), ("pub", published_reserve(r)),
                              ("loo", refit_reserve(r, pool))):
            errs[name].append(100 * (float(kv_memory(r, reserve)) - logged) / logged)
    return [["--reserve 0", summary(errs["zero"])], ["auto, published terms (in-sample)", summary(errs["pub"])],
            ["auto, leave one model out", summary(errs["loo"])]]


# Qwen3-14B TP 1 on H100-80GB, gpu_memory_utilization 0.95, max_model_len 8192, bf16 (llm-d-planner@d3121e0
# accuracy/results/version-sweep/runs/qwen3-14b-vllm-v0-1X-0--h100-80gb--tp1pp1dp1--8192.json):
# (vLLM version, weights GiB, logged activation GiB, logged KV GiB, logged KV tokens)
QWEN3_14B = [("0.15.0", "27.52", "5.64", "41.94", 274_848), ("0.16.0", "27.52", "5.64", "41.94", 274_848),
             ("0.17.0", "27.52", "2.23", "45.34", 297_152), ("0.18.0", "27.52", "2.23", "45.23", 296_400)]


def version_rows() -> list[list[str]]:
    # Qwen3-14B's config.json (huggingface.co/Qwen/Qwen3-14B): 40 layers, 40 heads, 8 KV heads, head_dim 128
    arch = custom(40, 8, 128, num_attention_heads=40, name="Qwen3-14B")
    out = []
    for version, weights, act, kv, logged in QWEN3_14B:
        check = {"tp": "1", "kv_cache_dtype": "auto", "dtype": "torch.bfloat16"}
        # kvdash's layout at the logged memory gives the log's count, within the 0.005 GiB rounding
        assert abs(tokens(arch, check, g(kv)) - logged) <= logged * 0.0035, version
        r = {"init_total_memory_gib": "79.19", "gpu_memory_utilization": "0.95", "weights_memory_gib": weights,
             "tp": "1", "pp": "1", "kv_cache_dtype": "auto", "dtype": "torch.bfloat16",
             "architecture": "Qwen3ForCausalLM"}
        zero = tokens(arch, r, kv_memory(r, Fraction(0)))
        pub = tokens(arch, r, kv_memory(r, published_reserve(r)))
        out.append([version, f"{logged:,}", f"{zero:,}", pct(zero, logged), f"{pub:,}", pct(pub, logged),
                    f"{act} GiB"])
    return out


def graph_rows() -> list[list[str]]:
    """The logged CUDA-graph estimate of each distinct run predicted from the others (its architecture's
    median, else all runs'): per decoder layer on the stage (kvdash's rule) and as one figure."""
    every = distinct(load_runs())

    def layers(x: dict[str, str]) -> int:
        return math.ceil(int(x["layers"]) / int(x["pp"]))

    per_layer, flat = [], []
    for k, r in enumerate(every):
        others = [x for j, x in enumerate(every) if j != k]
        pool = [x for x in others if x["architecture"] == r["architecture"]] or others
        truth = float(r["cuda_graph_estimated_gib"])
        per = statistics.median(float(x["cuda_graph_estimated_gib"]) / layers(x) for x in pool) * layers(r)
        per_layer.append(abs(per - truth))
        flat.append(abs(statistics.median(float(x["cuda_graph_estimated_gib"]) for x in pool) - truth))
    return [[name, f"{statistics.median(e):.2f} GiB", f"{max(e):.2f} GiB"]
            for name, e in (("per decoder layer x layers per stage (kvdash)", per_layer),
                            ("one figure per architecture", flat))]


def table(head: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(map(str, r)) + " |" for r in rows])


def main() -> None:
    rows, left_out = token_rows()
    print(f"Runs: {SOURCE} (vLLM 0.19.0, H100-80GB; CUDA-graph estimate not subtracted by 0.19)\n")
    print("1. KV tokens against the logged `GPU KV cache size`\n")
    print(table(["run", "logged KV tokens", "--reserve 0", "error", "auto (published, in-sample)", "error",
                 "auto (leave one model out)", "error"], rows))
    if left_out:
        print("\nLeft out (kvdash's KV layout does not reproduce the log's token count at its own memory): "
              + "; ".join(left_out))
    print("\n2. Available KV memory against the logged `Available KV cache memory`, all 49 distinct runs "
          "(relative error)\n")
    print(table(["reserve", "median abs error", "worst abs error", "range"], memory_rows()))
    print("\n3. Out of sample by version: Qwen3-14B, TP 1, H100-80GB, util 0.95 "
          "(llm-d-planner@d3121e0 accuracy/results/version-sweep/runs)\n")
    print(table(["vLLM", "logged KV tokens", "--reserve 0", "error", "auto (published)", "error",
                 "logged activation"], version_rows()))
    print("\n4. The CUDA-graph estimate (vLLM 0.33 subtracts it), each run predicted from the other 48\n")
    print(table(["rule", "median abs error", "worst abs error"], graph_rows()))


if __name__ == "__main__":
    main()

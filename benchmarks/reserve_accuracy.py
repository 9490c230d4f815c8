"""How close ``--reserve 0`` and ``--reserve auto`` come to the KV pool real vLLM start-ups logged.

Run: python benchmarks/reserve_accuracy.py          (prints a Markdown table; no GPU, no network)

The runs: public vLLM **0.19.0** start-up logs on **H100-80GB**, ``gpu_memory_utilization`` 0.95,
``max_num_batched_tokens`` 8192, bf16, prefix caching off, in github.com/llm-d-incubation/llm-d-planner at
commit d3121e0, ``accuracy/results/v0.19.0/logs/<name>.log``.  From each log: ``total_memory`` of the
worker's init snapshot (79.19 GiB, torch's view of the card), the ``weights memory`` of the profiling line,
the ``GPU KV cache size: N tokens`` line, and the ``Estimated CUDA graph memory`` (not subtracted by 0.19,
subtracted by default since 0.21).  Log figures are printed to 0.01 GiB, so each input carries up to
+-0.005 GiB of rounding.

Caveat: these are the runs llm-d-planner fitted its calibration to, so ``auto`` is scored in-sample here;
it says how well the published terms reproduce their own runs, not how they generalise.  Only vLLM 0.19
logs were available; vLLM 0.33 additionally subtracts the CUDA-graph estimate (last column).

kvdash's figure per case: ``floor(total x 0.95) - weights/rank - reserve``, then whole blocks of the
model's per-rank block bytes x 16 tokens, the same count vLLM logs.
"""

from __future__ import annotations

from decimal import Decimal

from kvdash.core.calc import rank_shapes
from kvdash.core.model import load_preset
from kvdash.core.reserve import auto_reserve, gib_bytes

LOGS = "llm-d-planner@d3121e0 accuracy/results/v0.19.0/logs/"
# (log name, kvdash preset, model_type, tp, weights GiB per rank, logged KV tokens, logged CUDA-graph GiB)
CASES = [
    ("meta-llama-llama-3-1-8b---h100-80gb--tp1pp1dp1--8192", "llama-3.1-8b", "llama", 1, "14.99", 476_016, "0.84"),
    ("meta-llama-llama-3-1-8b---h100-80gb--tp2pp1dp1--8192", "llama-3.1-8b", "llama", 2, "7.51", 1_044_688, "1.69"),
    ("meta-llama-llama-3-1-8b---h100-80gb--tp4pp1dp1--8192", "llama-3.1-8b", "llama", 4, "3.77", 2_209_792, "0.57"),
    ("qwen-qwen2-5-7b-instruct--h100-80gb--tp1pp1dp1--8192", "qwen2.5-7b", "qwen2", 1, "14.25", 1_096_000, "0.61"),
    ("qwen-qwen2-5-7b-instruct--h100-80gb--tp2pp1dp1--8192", "qwen2.5-7b", "qwen2", 2, "7.12", 2_390_592, "0.61"),
    ("qwen-qwen2-5-7b-instruct--h100-80gb--tp4pp1dp1--8192", "qwen2.5-7b", "qwen2", 4, "3.55", 5_043_280, "0.69"),
    ("qwen-qwen3-8b--h100-80gb--tp1pp1dp1--8192", "qwen3-8b", "qwen3", 1, "15.27", 418_688, "0.84"),
]
TOTAL = gib_bytes("79.19")
UTIL = Decimal("0.95")
BLOCK = 16


def tokens(preset: str, tp: int, budget: int) -> int:
    block_bytes = rank_shapes(load_preset(preset), "bf16", "tensor", tp, 1, BLOCK)[0].block_bytes
    return max(budget, 0) // block_bytes * BLOCK


def rows() -> list[list[str]]:
    out = []
    requested = int(Decimal(TOTAL) * UTIL)
    for name, preset, model_type, tp, weights, logged, graphs in CASES:
        base = requested - gib_bytes(weights)
        zero = tokens(preset, tp, base)
        terms = auto_reserve(model_type, tp, 1, 8192, "h100-80gb", layers=load_preset(preset).num_layers)["terms"]
        # vLLM 0.19 did not subtract the CUDA-graph estimate: its runs are compared without that term
        auto = tokens(preset, tp, base - sum(t["bytes"] for t in terms if t["name"] != "CUDA-graph memory"))
        out.append([f"`{name}`", f"{logged:,}", f"{zero:,}", f"{100 * (zero - logged) / logged:+.2f}%",
                    f"{auto:,}", f"{100 * (auto - logged) / logged:+.2f}%", graphs])
    return out


def main() -> None:
    print(f"Logs: {LOGS}<name>.log (vLLM 0.19.0, H100-80GB, gpu_memory_utilization 0.95)\n")
    print("| run | logged KV tokens | kvdash --reserve 0 | error | kvdash --reserve auto | error | "
          "CUDA graphs logged (GiB; 0.33 subtracts) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows():
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()

"""``kvdash simulate --engine-rules sglang``: the length simulation on SGLang 0.5.23's pool.

The pool is SGLang's own (:func:`kvdash.engines.sglang.view`, checked against SGLang's code in
``conformance/sglang``): ``max_total_num_tokens`` token slots of its cell size, in pages of its page size (1 on
CUDA unless ``--block-size`` gives ``--page-size``).  The scheduling stays the simulator's (vLLM v1's rules):
SGLang's scheduler is not mirrored, and the output says so."""

from typing import Any

from kvdash.core import formulas as f
from kvdash.core.arch import Architecture
from kvdash.errors import InputError

SCHEDULER_NOTE = ("scheduling: the simulator's vLLM v1 rules on SGLang's pool (SGLang's own scheduler is not "
                  "mirrored)")


def sglang_pool(arch: Architecture, gpu: str | None, tp: int, kv_dtype: str, budget: dict[str, Any],
                page_size: int | str | None, reserve: str | None, gpu_util: str | None) -> dict[str, Any]:
    """SGLang 0.5.23's pool for the simulation: budget, cell, page, token slots, the explaining lines and the
    view itself; one-line refusals for what the rules do not take."""
    from kvdash.core.gpus import gpu_presets
    from kvdash.engines import sglang

    if gpu is None:
        raise InputError("--engine-rules", "sglang", "SGLang's pool is derived from a GPU: give --gpu (a declared "
                                                     "--budget has no free memory to profile)")
    if reserve is not None:
        raise InputError("--reserve", reserve, "none with --engine-rules sglang: SGLang holds back (1 - mem_fraction_static) of the free memory, "
                                               "not a runtime reserve: a runtime reserve is vLLM's")
    if gpu_util is not None:
        raise InputError("--gpu-util", gpu_util, "none with --engine-rules sglang: --gpu-util is vLLM's "
                                                 "gpu_memory_utilization, SGLang's mem_fraction_static its default "
                                                 "for the GPU and TP")
    if isinstance(page_size, str):  # --block-size auto: SGLang's page size on CUDA
        page_size = None
    weights = int(budget.get("weights_per_rank_bytes") or f.weights_per_rank(arch.weight_bytes, tp))
    v = sglang.view(arch, gpu_presets()[gpu].memory_bytes, tp, kv_dtype, weights, page_size)
    if "refused" in v:
        raise InputError("--engine-rules", "sglang", v["refused"])
    if v["pool"] != "default":
        what = ("its state slots, an attention-free model's (no token pool)" if v["pool"] == "state_only"
                else f"{v['pool']} (a full and an SWA pool)")
        raise InputError("--engine-rules", "sglang", f"the simulation takes one pool; SGLang's is {what} for this "
                                                     "model")
    lines = [f"SGLang {sglang.VERSION}'s pool (--engine-rules sglang): {line}" for line in v["lines"]]
    return {"budget_bytes": int(v["available_bytes"]), "cell_bytes": int(v["cell_bytes"]),
            "page_size": int(v["page_size"]), "max_total_num_tokens": int(v["max_total_num_tokens"]),
            "lines": [*lines, SCHEDULER_NOTE], "view": v}

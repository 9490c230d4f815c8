"""The KV budget per rank: declared, or derived from a GPU by an engine's rule (issue 26: the composition above
the engines).

:class:`BudgetSpec` says where the budget comes from; :func:`resolve_budget` turns it into bytes with every term
that produced it, taking the engine's budget rule (:meth:`kvdash.engines.base.EngineRules.budget`; vLLM 0.33's
``floor(total x util) - weights/rank - reserve``) or TensorRT-LLM's ``free_gpu_memory_fraction`` rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Any

from kvdash import defaults
from kvdash.core import formulas as f
from kvdash.core.arch import Architecture
from kvdash.core.gpus import GPU, get_gpu
from kvdash.core.pool import check_parallel, check_positive
from kvdash.engines import registry
from kvdash.engines.base import Gpu
from kvdash.engines.vllm_reserve import ReserveTerm, auto_reserve
from kvdash.errors import InputError
from kvdash.units import parse_fraction, scale_floor

DEFAULT_BUDGET = defaults.BUDGET_BYTES  # the tutorial's declared KV budget (12 GiB)
# default memory fraction per policy: vLLM 0.33's gpu_memory_utilization, TensorRT-LLM's free_gpu_memory_fraction
DEFAULT_UTIL = defaults.UTIL_BY_POLICY
TP_CANDIDATES = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class BudgetSpec:
    """Where the per-rank KV budget comes from.

    * explicit: ``bytes`` per rank.
    * ``policy="vllm"``: ``floor(total x util) - weights/rank - reserve`` (utilization of *total*
      memory, as vLLM's ``gpu_memory_utilization``; default 0.92 as in vLLM 0.33).
    * ``policy="trtllm"``: ``floor((total - weights/rank - reserve) x util)`` (TensorRT-LLM's
      ``free_gpu_memory_fraction`` of the memory *free* after loading; default 0.9).
    """

    bytes: int | None = None
    gpu: str | None = None
    gpu_memory: int | None = None
    util: str | None = None  # None: the policy's default (DEFAULT_UTIL)
    policy: str = "vllm"
    weights: int | None = None
    weights_basis: str = ""  # where ``weights`` comes from when the user did not give it ('': --weights)
    reserve: int = 0
    reserve_basis: str = ""  # '' = given as a size; else where --reserve auto took it from
    reserve_terms: tuple[ReserveTerm, ...] = ()


BOTH_BUDGETS = "give either --budget or --gpu/--gpu-memory, not both"


def resolve_budget(spec: BudgetSpec, arch: Architecture, tp: int, pp: int, strict: bool = True) -> dict[str, Any]:
    """Per-rank KV budget in bytes, with every term that produced it.

    With ``strict=False`` a derived budget that leaves nothing for the KV cache is returned as 0
    (``fits`` false) instead of raising, so a sweep can show that a point does not fit."""
    if spec.bytes is not None and (spec.gpu is not None or spec.gpu_memory is not None):
        raise InputError("--budget", spec.bytes, BOTH_BUDGETS)  # the commands refuse it first, as typed
    if spec.gpu is None and spec.gpu_memory is None:
        value = DEFAULT_BUDGET if spec.bytes is None else spec.bytes
        check_positive("--budget", value)
        return {"per_rank_bytes": value, "source": "explicit" if spec.bytes is not None else "default",
                "formula": "declared KV budget per rank"}
    gpu: GPU | None = get_gpu(spec.gpu) if spec.gpu is not None else None  # '' is an unknown name
    total = spec.gpu_memory if spec.gpu_memory is not None else gpu.memory_bytes  # type: ignore[union-attr]
    check_positive("--gpu-memory", total)
    if spec.policy not in ("vllm", "trtllm"):
        raise InputError("--util-policy", spec.policy, "expected 'vllm' or 'trtllm'")
    util = parse_fraction(DEFAULT_UTIL[spec.policy] if spec.util is None else spec.util, "--gpu-util")
    if spec.weights is None and not arch.weights_known:
        raise InputError("--weights", None, f"a budget derived from the GPU needs the weight bytes of {arch.name}: "
                         "give --weights SIZE or --safetensors-index model.safetensors.index.json "
                         f"(weights {arch.weight_basis})")
    weights = arch.weight_bytes if spec.weights is None else spec.weights
    weights_basis = arch.weight_basis if spec.weights is None else (spec.weights_basis or "given with --weights")
    if weights < 0:
        raise InputError("--weights", weights, "must not be negative")
    if spec.reserve < 0:
        raise InputError("--reserve", spec.reserve, "must not be negative")
    ranks = tp * pp
    weights_rank = f.weights_per_rank(weights, ranks)
    if spec.policy in registry.names():  # the engine's own rule (vLLM 0.33: floor(total x util) - ...)
        rule = registry.get(spec.policy).budget(total, util, weights_rank, spec.reserve)
        requested, budget, formula = rule.requested, rule.per_rank_bytes, rule.formula
    else:
        requested = total - weights_rank - spec.reserve
        budget = scale_floor(max(requested, 0), util)
        formula = "floor((total - weights/rank - reserve) x util)"
    if budget <= 0 and not strict:
        return {"per_rank_bytes": 0, "fits": False, "source": spec.policy, "formula": formula,
                "shortfall_bytes": -budget}
    if budget <= 0:
        raise no_kv_memory(spec, arch, gpu, total, util, weights, weights_basis, tp, pp, budget)
    return {
        "per_rank_bytes": budget,
        "source": spec.policy,
        "formula": formula,
        "gpu": gpu.name if gpu else "custom",
        "gpu_memory_bytes": total,
        "gpu_memory_basis": (f"{gpu.basis}: {gpu.detail}" if gpu and spec.gpu_memory is None
                             else "given with --gpu-memory"),
        "utilization": str(util),
        "requested_bytes": requested,
        "weights_bytes": weights,
        "weights_basis": weights_basis,
        "weights_per_rank_bytes": weights_rank,
        "reserve_bytes": spec.reserve,
        "reserve_basis": spec.reserve_basis or ("given with --reserve" if spec.reserve else
                                                "default 0 B: an upper bound (no activation peak, CUDA graphs "
                                                "or non-torch overhead)"),
        "reserve_terms": [t.as_dict() for t in spec.reserve_terms],
    }


def no_kv_memory(spec: BudgetSpec, arch: Architecture, gpu: GPU | None, total: int, util: Decimal, weights: int,
                 weights_basis: str, tp: int, pp: int, budget: int) -> InputError:
    """The one-line error for a GPU-derived budget that leaves no KV memory: it names the option the user
    typed (or the default the value came from) and only fixes that can work (issue 23)."""
    wr = f.weights_per_rank(weights, tp * pp)
    reserve_given = bool(spec.reserve) and not spec.reserve_basis
    field: str
    value: object
    if spec.util is not None:
        field, value = "--gpu-util", spec.util
    elif spec.weights is not None and not spec.weights_basis:
        field, value = "--weights", spec.weights
    elif reserve_given:
        field, value = "--reserve", f"{spec.reserve:,} B"
    else:
        field, value = ("--gpu", spec.gpu) if gpu is not None and spec.gpu_memory is None else ("--gpu-memory", total)
    default = "" if spec.util is not None else f", {registry.get().label}'s default gpu_memory_utilization"
    if spec.policy == "vllm":
        how = (f"floor({total:,} x {util}{default}) - weights/rank {wr:,} - reserve {spec.reserve:,} = "
               f"{budget:,} B")
    else:
        how = f"floor(({total:,} - weights/rank {wr:,} - reserve {spec.reserve:,}) x {util}) = {budget:,} B"
    reserve_how = spec.reserve_basis.split(" (")[0] if spec.reserve_basis else "given with --reserve"
    fixes = []
    for more in TP_CANDIDATES:  # the smallest TP (same GPU, utilization, reserve) that leaves KV memory
        if more <= tp:
            continue
        try:
            check_parallel(arch, more, pp)
        except InputError:
            continue
        reserve = spec.reserve  # --reserve auto's published terms are taken again at that TP
        if spec.reserve_basis.startswith("--reserve auto: published"):
            reserve = auto_reserve(arch.model_type, more, pp, gpu=spec.gpu, layers=arch.num_layers)["bytes"]
        left = (scale_floor(total, util) if spec.policy == "vllm" else total) - f.weights_per_rank(weights, more * pp) \
            - reserve
        if left > 0:
            fixes.append(f"--tp {more} (weights/rank {f.weights_per_rank(weights, more * pp):,} B)")
            break
    if spec.policy == "vllm" and total - wr - spec.reserve > 0:
        need = (Decimal(wr + spec.reserve + 1) / Decimal(total)).quantize(Decimal("0.01"), rounding=ROUND_CEILING)
        while need <= 1 and scale_floor(total, need) - wr - spec.reserve <= 0:
            need += Decimal("0.01")
        if need <= 1:
            fixes.append(f"--gpu-util {need} or more")
    if spec.reserve and scale_floor(total, util) - wr > 0 and spec.policy == "vllm":
        fixes.append(f"--reserve under {scale_floor(total, util) - wr:,} B (now {spec.reserve:,} B: {reserve_how})")
    fixes.append(f"a GPU with more memory than {total:,} B" if not fixes else "a larger GPU")
    what = (f"the weights alone ({wr:,} B per rank: {weights_basis}) exceed the GPU's {total:,} B" if wr >= total
            else "no memory is left for the KV cache")
    return InputError(field, value, f"{what}: {how}; fix: {' or '.join(fixes)}")


def budget_gpu(spec: BudgetSpec) -> tuple[int | None, str | None, str]:
    """The GPU a budget is derived from: (total bytes, name, compute capability); (None, None, '') for a
    declared budget."""
    if spec.gpu is None and spec.gpu_memory is None:
        return None, None, ""
    gpu = get_gpu(spec.gpu) if spec.gpu is not None else None
    total = spec.gpu_memory if spec.gpu_memory is not None else gpu.memory_bytes  # type: ignore[union-attr]
    return total, (gpu.name if gpu else None), (gpu.compute_capability if gpu else "")


def gpu_of(spec: BudgetSpec, name: str | None = None) -> Gpu:
    """:func:`budget_gpu` as the engines take it; ``name`` overrides the device name (the reserve's wording
    names the GPU as the caller was given it)."""
    total, device, cc = budget_gpu(spec)
    return Gpu(total, device if name is None else name, cc)


def _min_util(needed: int, total: int, fixed: int, policy: str) -> float | None:
    """Smallest utilization with two decimals that yields ``needed`` KV bytes."""
    if policy == "vllm":
        exact = Decimal(needed + fixed) / Decimal(total)
    else:
        free = total - fixed
        if free <= 0:
            return None
        exact = Decimal(needed) / Decimal(free)
    util = exact.quantize(Decimal("0.01"), rounding=ROUND_CEILING)
    while util <= 1:
        got = (scale_floor(total, util) - fixed) if policy == "vllm" else scale_floor(total - fixed, util)
        if got >= needed:
            return float(util)  # two decimals: exact as a JSON number
        util += Decimal("0.01")
    return None

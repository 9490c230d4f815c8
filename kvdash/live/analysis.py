"""The analytical KV pool beside live readings: pure functions, no UI.

For the chosen model, dtype, block size and TP degree, each rank's budget comes from its own GPU
(vLLM's rule: ``floor(total x utilization) - weights/rank - reserve``), from an explicit size, or
from a running engine's own pool; the pool is the smallest rank's, as the engines do.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from kvdash import defaults
from kvdash.answer.budget import BudgetSpec, resolve_budget
from kvdash.answer.calc import CalcInput, evaluate
from kvdash.core import formulas as f
from kvdash.core.model import Architecture, resolve_model, same_model
from kvdash.core.point import group_size_problem
from kvdash.engines.vllm import rank_shapes
from kvdash.errors import InputError
from kvdash.sources.base import Snapshot
from kvdash.sources.engine import EngineReading

BUDGET_MODES = ("vllm", "explicit", "engine")


@dataclass(frozen=True)
class LiveConfig:
    model: str = defaults.LIVE_MODEL  # the engine --demo runs (kvdash/defaults.py: the one exception)
    arch: Architecture | None = None  # from --config; else the preset (or config.json path) named by model
    kv_dtype: str = defaults.KV_DTYPE
    # the block size used: live_config resolves --block-size (default auto, vLLM 0.33's choice: 16 for the
    # default model, Llama-3.1-70B; kvdash/defaults.py)
    block_size: int = 16
    tp: int = defaults.LIVE_TP
    gpu_util: str = defaults.GPU_UTIL  # vLLM 0.33's gpu_memory_utilization
    weights: int | None = None
    reserve: int = 0
    reserve_basis: str = ""  # '' = given as a size; else where --reserve auto took it from
    budget_mode: str = "vllm"
    budget: int | None = None
    lengths: tuple[int, ...] = (defaults.LENGTH,)
    max_reserved: int = defaults.RESERVATION
    engine_rules: str = "vllm"  # exporter --engine-rules: whose rules size the analytical pool (sglang: SGLang 0.5.23)

    def architecture(self) -> Architecture:
        return self.arch or resolve_model(self.model)

    def validate(self) -> None:
        if self.budget_mode not in BUDGET_MODES:
            raise InputError("--budget-mode", self.budget_mode, "expected one of: " + ", ".join(BUDGET_MODES))
        if self.budget_mode == "explicit" and not self.budget:
            raise InputError("--budget", self.budget, "an explicit budget needs --budget SIZE")
        option = "--length" if len(self.lengths) == 1 else "--group"
        problem = group_size_problem(len(self.lengths))
        if problem:
            raise InputError(option, ",".join(map(str, self.lengths)), problem)
        arch = self.architecture()
        for n in self.lengths:  # the length's own bound first (a derived --max-reserved follows the lengths)
            if n <= 0 or n > arch.max_context:
                raise InputError(option, n, f"expected 1 to the model's context, {arch.max_context:,} tokens for "
                                            f"{arch.name}")
            if n > self.max_reserved:
                raise InputError(option, n, f"expected at most --max-reserved={self.max_reserved}")
        shape = rank_shapes(arch, self.kv_dtype, "tensor", self.tp, 1, self.block_size)[0]
        if self.engine_rules == "sglang":
            check_sglang_pool(arch, self, shape)
        if self.max_reserved > arch.max_context:
            raise InputError("--max-reserved", self.max_reserved, f"at most {arch.max_context} for {arch.name}")


def for_model(cfg: LiveConfig, name: str) -> LiveConfig:
    """``cfg`` for another model (live's ``m`` / ``M``, a fleet host's own model): under ``--reserve auto`` the
    reserve is that model's own (a calibration entry, else the published terms, as :func:`live_config` takes it
    at start-up), never the previous model's; a reserve given as a size stays as given."""
    out = replace(cfg, model=name, arch=None)
    return with_auto_reserve(out) if cfg.reserve_basis else out


def with_auto_reserve(cfg: LiveConfig) -> LiveConfig:
    """``cfg`` with ``--reserve auto``'s reserve for its model and TP: a kvdash calibrate entry, else the published
    terms (:func:`kvdash.calibration.reserve_spec`; no GPU named, vLLM 0.33's default token budget)."""
    from kvdash.calibration import reserve_spec

    got = reserve_spec("auto", cfg.architecture(), None, cfg.tp, 1, defaults.MAX_BATCHED_TOKENS)
    return replace(cfg, reserve=got[0], reserve_basis=got[1])


@dataclass(frozen=True)
class RankPool:
    gpu: int
    total_bytes: int | None
    budget_bytes: int
    pool_blocks: int
    note: str = ""


def analyze(snapshot: Snapshot, cfg: LiveConfig, engine: EngineReading | None = None) -> dict[str, Any]:
    """The KV panel's figures for one snapshot."""
    arch = cfg.architecture()
    shapes = rank_shapes(arch, cfg.kv_dtype, "tensor", cfg.tp, 1, cfg.block_size)
    shape = shapes[0]
    usable = [g for g in snapshot.gpus if not g.lost and g.total_bytes]
    ranks_gpus = usable[: cfg.tp]
    weights = arch.weight_bytes if cfg.weights is None else cfg.weights
    ranks: list[RankPool] = []
    notes: list[str] = []
    if len(ranks_gpus) < cfg.tp and cfg.budget_mode == "vllm":
        # the pool of the readable ranks stands, said as such (beside it, a bare "needs 8" read as if it were n/a)
        notes.append(f"TP {cfg.tp} needs {cfg.tp} GPUs with memory readings; {len(ranks_gpus)} are readable"
                     + (f": the pool is the smallest of these {len(ranks_gpus)}, the other ranks taken to be alike"
                        if ranks_gpus else ""))
    for g in ranks_gpus if cfg.budget_mode == "vllm" and cfg.engine_rules == "sglang" else []:
        # --engine-rules sglang: SGLang 0.5.23's budget on this GPU (its mem_fraction_static default)
        from kvdash.engines import sglang

        sv = sglang.view(arch, g.total_bytes or 0, cfg.tp, cfg.kv_dtype, f.weights_per_rank(weights, cfg.tp),
                         cfg.block_size)
        b = int(sv.get("available_bytes", 0))
        ranks.append(RankPool(g.index, g.total_bytes, b, int(f.pool_blocks(b, shape.block_bytes)),
                              sv.get("refused", f"SGLang {sglang.VERSION}'s rules: mem_fraction_static "
                                                f"{sv.get('mem_fraction_static')}")))
    for g in ranks_gpus if cfg.budget_mode == "vllm" and cfg.engine_rules != "sglang" else []:
        info = resolve_budget(BudgetSpec(gpu_memory=g.total_bytes, util=cfg.gpu_util, weights=weights,
                                         reserve=cfg.reserve), arch, cfg.tp, 1, strict=False)
        b = int(info["per_rank_bytes"])
        ranks.append(RankPool(g.index, g.total_bytes, b, int(f.pool_blocks(b, shape.block_bytes)),
                              "" if info.get("fits", True) else "weights and reserve leave no KV memory"))
    if cfg.budget_mode == "explicit":
        b = int(cfg.budget or 0)
        ranks = [RankPool(-1, None, b, int(f.pool_blocks(b, shape.block_bytes)), "explicit budget")]
    if cfg.budget_mode == "engine":
        if engine is None:
            notes.append("--budget-mode engine needs an engine pool: give --engine URL")
        elif engine.error:
            notes.append(f"--budget-mode engine: the engine at {engine.url} failed ({engine.error}), "
                         "so there is no pool to take the budget from")
        elif engine.total_tokens is None:
            why = engine.invalid.get("num_gpu_blocks") or engine.invalid.get("total_tokens")
            notes.append(f"--budget-mode engine: the engine at {engine.url} does not report its pool size"
                         + (f" ({why})" if why else ""))
        else:
            blocks = engine.total_tokens // shape.block_size * shape.attention_groups
            ranks = [RankPool(-1, None, blocks * shape.block_bytes, blocks, f"from the engine ({engine.kind})")]
    if cfg.budget_mode == "vllm" and cfg.engine_rules != "sglang" and ranks and not cfg.reserve \
            and not cfg.reserve_basis:
        from kvdash.engines.vllm_reserve import auto_reserve

        auto_estimate = auto_reserve(arch.model_type, cfg.tp, 1, gpu=ranks_gpus[0].name if ranks_gpus else None,
                                     layers=arch.num_layers)["bytes"]
    else:
        auto_estimate = None
    if not ranks:
        out_bad: dict[str, Any] = {"ok": False, "notes": notes or ["no GPU memory readings"], "model": arch.name}
        if engine is not None:  # the engine's own figures still show (a machine without NVML)
            out_bad["engine"] = compare_engine(engine, out_bad, arch.name, cfg.model)
        return out_bad
    tight = min(ranks, key=lambda r: r.pool_blocks)
    budget = tight.budget_bytes
    inp = CalcInput(arch=arch, kv_dtype=cfg.kv_dtype, block_size=cfg.block_size, tp=cfg.tp,
                    used=cfg.lengths[0], max_reserved=cfg.max_reserved, budget=BudgetSpec(bytes=max(budget, 1)))
    m = evaluate(inp, shapes, max(budget, 0), cfg.lengths)
    paged, contiguous = int(m["paged_requests"]), int(m["contiguous_requests"])
    # what vLLM 0.33 runs at once on these GPUs: max_num_seqs of `vllm serve` (EngineArgs.get_batch_defaults)
    from kvdash.engines.vllm import caps_text, scheduler_caps

    gpu0 = ranks_gpus[0] if ranks_gpus else None
    caps = scheduler_caps(gpu0.total_bytes if gpu0 else None, gpu0.name if gpu0 else None, cfg.max_reserved)
    caps_basis = caps_text(caps)
    if cfg.engine_rules == "sglang" and cfg.budget_mode == "vllm":  # SGLang's cap: from its pool
        from kvdash.engines import sglang

        tokens = tight.pool_blocks * shape.block_size
        caps = replace(caps, max_num_seqs=sglang.max_num_reqs(tokens, sglang.context_len(arch)))
        caps_basis = (f"max_running_requests {caps.max_num_seqs:,} (SGLang {sglang.VERSION} resolve_max_num_reqs: "
                      f"int(tokens / context_len x 512) within 2,048..4,096)")
    per_group = int(m["paged_blocks"])
    used_blocks = int(m["complete_groups"]) * per_group
    headroom_blocks = tight.pool_blocks - used_blocks
    reserve_basis = ("SGLang 0.5.23's rules: (1 - mem_fraction_static) of the free memory held back, no runtime "
                     "reserve" if cfg.engine_rules == "sglang" and cfg.budget_mode == "vllm" else None) or \
        ({"explicit": "a declared KV budget: no runtime reserve taken off",
                      "engine": "the engine's own pool: its reserve is already taken off"}.get(cfg.budget_mode)
                     or cfg.reserve_basis or ("given with --reserve" if cfg.reserve else "0 B: an upper bound"))
    out: dict[str, Any] = {
        "ok": True,
        "model": arch.name,
        "kv_dtype": cfg.kv_dtype,
        "block_size": shape.block_size,  # the one used: hybrids raise it as vLLM 0.33 does
        "tp": cfg.tp,
        "budget_mode": cfg.budget_mode,
        "lengths": list(cfg.lengths),
        "max_reserved": cfg.max_reserved,
        "bytes_per_token": shape.bytes_per_token,
        "block_bytes": shape.block_bytes,
        "groups": shape.groups,
        "ranks": [r.__dict__ for r in ranks],
        "tight_gpu": tight.gpu,
        "budget_bytes": budget,
        "pool_blocks": tight.pool_blocks,
        # an attention-free pool (Mamba) has no attention group: its blocks hold states, as core.point counts them
        "token_slots": tight.pool_blocks // f.imax(shape.attention_groups, 1) * shape.block_size,
        "state_bytes_per_request": shape.state_bytes,  # fixed, whatever the request's length
        "paged_requests": paged,
        "max_num_seqs": caps.max_num_seqs,
        "max_num_batched_tokens": caps.max_num_batched_tokens,
        "caps_basis": caps_basis,
        "running_requests": min(paged, caps.max_num_seqs),
        "contiguous_requests": contiguous,
        "ratio": (paged / contiguous) if contiguous else None,
        "blocks_per_group": per_group,
        "headroom_blocks": headroom_blocks,
        "headroom_tokens_per_request": (headroom_blocks // max(paged, 1)) * shape.block_size
        // f.imax(shape.attention_groups, 1)
        if paged else 0,
        "weights_per_rank_bytes": f.weights_per_rank(weights, cfg.tp),
        "gpu_util": cfg.gpu_util,
        "reserve_bytes": cfg.reserve,
        "auto_reserve_estimate_bytes": auto_estimate,  # what --reserve auto takes when the reserve is 0 B
        "reserve_basis": reserve_basis,
        "reserve_text": reserve_short(cfg, reserve_basis, gpu0.name if gpu0 else ""),
        "notes": notes,
    }
    if cfg.engine_rules == "sglang" and cfg.budget_mode == "vllm":
        out["engine_rules"] = "sglang"  # --engine-rules sglang: the pool, its cap and budget are SGLang 0.5.23's
    if engine is not None:
        measured = measure_engine_reserve(engine, arch, cfg, ranks_gpus, snapshot.driver)
        out["measured_reserve"] = measured
        out["engine"] = compare_engine(engine, out, arch.name, cfg.model, measured)
        gpu_bytes = ranks_gpus[0].total_bytes if ranks_gpus else None
        if engine.kind == "sglang" and cfg.budget_mode == "vllm" and gpu_bytes and "engine_tokens" in out["engine"] \
                and not out["engine"].get("model_differs"):
            sglang_rules(out["engine"], arch, cfg, gpu_bytes, weights, engine.block_size)
        elif cfg.engine_rules == "sglang" and engine.kind.startswith("vllm") and "engine_tokens" in out["engine"]:
            row = out["engine"]  # --engine-rules sglang beside a vLLM engine: two engines' rules, not a reserve
            row.pop("reconciling_reserve_bytes", None)
            row["explain"] = ("kvdash's pool follows SGLang 0.5.23's rules (--engine-rules sglang) and the engine is "
                              "vLLM: the gap compares two engines' rules (without --engine-rules, kvdash follows "
                              "vLLM's)")
    return out


def sglang_rules(row: dict[str, Any], arch: Architecture, cfg: LiveConfig, gpu_bytes: int, weights: int,
                 page_size: int | None) -> None:
    """Beside an SGLang engine the pool gap compares like with like: kvdash's figure is SGLang 0.5.23's own rules
    for this GPU, TP, KV dtype and the engine's page size (:func:`kvdash.engines.sglang.view`), not vLLM's."""
    from kvdash.engines import sglang

    v = sglang.view(arch, gpu_bytes, cfg.tp, cfg.kv_dtype, f.weights_per_rank(weights, cfg.tp), page_size)
    row["sglang_rules"] = v
    if "refused" in v:
        row["explain"] = f"SGLang {sglang.VERSION}'s rules: {v['refused']}; kvdash's figure is vLLM 0.33's"
        return
    ours = int(v["max_total_num_tokens"])
    row["kvdash_tokens"], row["kvdash_rules"] = ours, f"SGLang {sglang.VERSION}"
    row["difference_tokens"] = row["engine_tokens"] - ours
    row.pop("reconciling_reserve_bytes", None)  # vLLM's reserve: no meaning beside SGLang's fraction
    row["explain"] = (f"kvdash's pool by SGLang {sglang.VERSION}'s rules: mem_fraction_static "
                      f"{v['mem_fraction_static']} (its default for this GPU at TP {cfg.tp}), free memory before the "
                      f"weights taken as the GPU's total less 1 GiB, {v['cell_bytes']:,} B per token, page size "
                      f"{v['page_size']}; " + ("the same pool" if row["difference_tokens"] == 0 else
                      "a gap is the engine's measured free memory, a --mem-fraction-static or --max-total-tokens "
                      "it was given, or weights other than kvdash's"))


def check_sglang_pool(arch: Architecture, cfg: LiveConfig, shape: Any) -> None:
    """``--engine-rules sglang`` sizes the analytical pool as SGLang 0.5.23 does; kvdash does that where SGLang's
    pool is one pool of one cell per token equal to the rank shape's (full attention, MLA), else refuses."""
    from kvdash.engines import sglang

    no_class = sglang.sglang_refuses_model(arch)
    if no_class:
        raise InputError("--engine-rules", "sglang", f"SGLang {sglang.VERSION} refuses this model: {no_class}")
    why = sglang.refusal(arch, cfg.tp)
    if why:
        raise InputError("--engine-rules", "sglang", f"not mirrored for this model: {why}")
    if sglang.is_dsa(arch) and shape.block_size != sglang.DSA_PAGE_SIZE:
        # SGLang's DSA cell per token is vLLM's (latent + 132 B of index keys per layer): the pools agree at its page
        raise InputError("--block-size", shape.block_size, f"SGLang {sglang.VERSION} pages DeepSeek sparse "
                         f"attention by {sglang.DSA_PAGE_SIZE} tokens (arg_groups/model_overrides/deepseek_v2.py): "
                         f"the analytical pool under its rules needs --block-size {sglang.DSA_PAGE_SIZE}")
    if cfg.budget_mode != "vllm":
        raise InputError("--engine-rules", "sglang", "sizes a budget derived from the GPUs: drop --budget / "
                                                     "--budget-mode")
    if sglang.is_hybrid_swa(arch) or shape.groups != 1 or shape.window_groups or shape.state_bytes:
        raise InputError("--engine-rules", "sglang", "the analytical pool under SGLang's rules is one pool of "
                                                     "full-attention or MLA layers; this model's is not")


def reserve_short(cfg: LiveConfig, basis: str, gpu_name: str = "") -> str:
    """The reserve basis in a few words, for the first line of live's KV panel and the exporter's banner; with the
    GPU read (``gpu_name``), published terms applied off the H100 they were measured on say so, as calc does."""
    from kvdash.units import human_bytes

    if cfg.budget_mode == "explicit":
        return "declared budget, no reserve"
    if cfg.budget_mode == "engine":
        return "engine's own pool"
    if cfg.engine_rules == "sglang":
        return "SGLang 0.5.23's rules (mem_fraction_static)"
    if basis.startswith("--reserve auto: calibration"):
        return f"reserve auto {human_bytes(cfg.reserve)} (calibrated)"
    if basis.startswith("--reserve auto"):
        from kvdash.engines.vllm_reserve import off_measured_gpu

        how = "published, extrapolated" if off_measured_gpu(gpu_name or None) else "published"
        return f"reserve auto {human_bytes(cfg.reserve)} ({how})"
    if cfg.reserve:
        return f"reserve {human_bytes(cfg.reserve)} (given)"
    return "UPPER BOUND: --reserve 0"


def measure_engine_reserve(engine: EngineReading, arch: Architecture, cfg: LiveConfig,
                           gpus: list[Any], driver: str = "") -> dict[str, Any]:
    """What ``kvdash calibrate`` would record for this engine (:func:`kvdash.calibration.measure`):
    ``{"entry": {...}}`` (no date yet), or ``{"why": "..."}`` saying why it cannot be measured.

    The GPU total is the smallest of the TP ranks' readings (the rank whose pool is tightest); the
    utilization, KV dtype and block size are the engine's own (``vllm:cache_config_info``), the model,
    TP and weights kvdash's (``--model``/``m``, ``--tp``, ``--weights``).  vLLM version and
    max_num_batched_tokens are not in the metrics: recorded as 0.33.0 and 8192, vLLM 0.33's defaults.
    A simulated engine or GPU (the demo, a replayed demo recording) is measured for display but marked
    ``simulated``: the ``c`` key does not save it into the file ``--reserve auto`` reads."""
    from kvdash.calibration import measure

    if engine.served_model and not same_model(engine.served_model, arch.name, cfg.model):
        return {"why": f"the engine serves {engine.served_model}, kvdash analyses {arch.name}: choose the served "
                       "model (m or --model) first"}
    totals = [g for g in gpus if g.total_bytes]
    if not totals:
        return {"why": "no GPU memory reading to take the total from"}
    tight = min(totals, key=lambda g: g.total_bytes)
    try:
        entry = measure(engine, arch, int(tight.total_bytes), tight.name, cfg.tp, 1, cfg.weights,
                        source="kvdash live")
    except InputError as exc:
        return {"why": str(exc)}
    fake = [what for what, yes in (("engine", "demo" in engine.kind), ("GPUs", driver == "demo")) if yes]
    if fake:
        return {"entry": entry, "simulated": f"the demo's {' and '.join(fake)} are simulated: c saves only "
                                             "real readings (NVML GPUs and --engine URL)"}
    return {"entry": entry}


def _same_figure(a: object, b: object) -> bool:
    """``0.9`` and ``0.90`` are one utilization; ``bf16`` and ``fp8`` two dtypes."""
    from decimal import Decimal, InvalidOperation

    try:
        return Decimal(str(a)) == Decimal(str(b))
    except InvalidOperation:
        return str(a) == str(b)


def _engine_dtype(cache_dtype: str) -> str:
    from kvdash.calibration import engine_kv_dtype

    return engine_kv_dtype(cache_dtype)


def _own_blocks(row: dict[str, Any], engine: EngineReading) -> None:
    """The engine's own pool blocks, block size and used blocks where it states them, whatever kvdash's ``b`` says."""
    if engine.num_gpu_blocks is not None and engine.block_size:
        row["engine_own_blocks"] = engine.num_gpu_blocks
        row["engine_block_size"] = engine.block_size
        if engine.used_tokens is not None:
            row["engine_used_own_blocks"] = -(-engine.used_tokens // engine.block_size)
        elif engine.kv_usage is not None:
            row["engine_used_own_blocks"] = int(engine.kv_usage * engine.num_gpu_blocks)


def compare_engine(engine: EngineReading, kv: dict[str, Any], model_name: str = "", preset: str = "",
                   measured: dict[str, Any] | None = None) -> dict[str, Any]:
    """The engine's own pool beside kvdash's, with the difference explained: a different served
    model first (then the pools are not comparable), then block size, then the ``--reserve`` that
    would make kvdash's pool equal the engine's: the measured reserve (``measured["entry"]``, what
    ``kvdash calibrate`` records) when there is one, with the engine's utilization and KV dtype named
    where kvdash's differ; else worked from kvdash's own budget."""
    row: dict[str, Any] = {"reading": engine.to_json()}
    if engine.error:
        row["status"] = f"engine {engine.url}: {engine.error}"
        return row
    row["status"] = f"{engine.kind} at {engine.url}"
    model_differs = bool(engine.served_model) and not same_model(engine.served_model, model_name, preset)
    if engine.served_model:
        row["served_model"] = engine.served_model
        row["model_differs"] = model_differs
        if model_differs:
            row["model_note"] = (f"the engine serves {engine.served_model}, kvdash analyses {model_name}: "
                                 "their pools are not comparable (choose the served model with m or --model)")
    if len(engine.ranks) > 1:
        row["dp_ranks"] = [{"rank": r.rank, "total_tokens": r.total_tokens, "used_tokens": r.used_tokens,
                            "kv_usage": r.kv_usage, "running": r.running, "waiting": r.waiting}
                           for r in engine.ranks]
    if engine.offload and not model_differs and kv.get("block_bytes"):
        tier = offload_vs_kvdash(engine, kv)
        if tier:
            row["offload_vs_kvdash"] = tier
    if engine.kind == "lmcache":
        row["explain"] = "LMCache's own page: its tier only, no KV pool of its own"
        return row
    if "token_slots" not in kv or model_differs:
        # no pool of kvdash's, or a pool of another model: the engine's own figures, no comparison (the pools of two
        # models were still set side by side, "2,837,216 vs 3,792,208 tokens (-954,992)", under the note saying
        # they are not comparable: a helper's README audit)
        if "token_slots" not in kv:  # (a different model alone: model_note says why nothing is compared)
            row["explain"] = "kvdash has no pool to compare with (" + "; ".join(kv.get("notes", [])) + \
                "): give --budget SIZE or --gpu, or --budget-mode engine"
        _own_blocks(row, engine)
        return row
    if engine.total_tokens is None:
        why = engine.invalid.get("num_gpu_blocks") or engine.invalid.get("total_tokens")
        row["explain"] = ("the engine does not report its pool size (vLLM: vllm:cache_config_info)"
                          + (f": {why}" if why else ""))
        return row
    ours = int(kv["token_slots"])
    diff = engine.total_tokens - ours
    row["engine_tokens"] = engine.total_tokens
    row["kvdash_tokens"] = ours
    row["difference_tokens"] = diff
    groups, bs = int(kv["groups"]), int(kv["block_size"])
    engine_blocks = engine.total_tokens // bs * groups  # in kvdash's blocks (bytes of one block x groups)
    if engine.used_tokens is not None:
        row["used_blocks"] = engine.used_tokens // bs * groups + (groups if engine.used_tokens % bs else 0)
    elif engine.kv_usage is not None:
        row["used_blocks"] = int(engine.kv_usage * engine_blocks)
    row["engine_blocks"] = engine_blocks  # in kvdash's blocks, for the bar beside kvdash's pool
    _own_blocks(row, engine)
    reasons: list[str] = []
    if engine.block_size and engine.block_size not in (1, bs):
        reasons.append(f"the engine uses block size {engine.block_size}, kvdash {bs} (press b or give --block-size "
                   f"{engine.block_size})")
    elif diff != 0 and kv.get("budget_mode") == "vllm":
        entry = (measured or {}).get("entry")
        also = ""
        if entry is not None:  # the same figure kvdash calibrate records
            reserve = int(entry["reserve_bytes"])
            also = "".join(f" {opt} {theirs}" for opt, theirs, ours in (
                ("--gpu-util", entry["gpu_memory_utilization"], kv.get("gpu_util")),
                ("--kv-dtype", _engine_dtype(entry["cache_dtype"]), kv.get("kv_dtype")))
                if ours is not None and not _same_figure(theirs, ours))
        else:
            target = engine_blocks * int(kv["block_bytes"])
            reserve = int(kv["reserve_bytes"]) + int(kv["budget_bytes"]) - target
        row["reconciling_reserve_bytes"] = reserve
        if reserve >= 0:
            reasons.append(f"{also.strip() + ' ' if also else ''}--reserve {reserve:,} B ({reserve / 2**30:.2f} GiB "
                           "per rank) makes kvdash's pool equal the engine's: the engine's profiled activation peak, "
                           "CUDA graphs and other processes")
        else:
            reasons.append(f"the engine's pool is larger than kvdash's budget can hold even with --reserve 0 "
                       f"({-reserve:,} B short per rank): check --gpu-util and --weights against the engine's")
    elif diff != 0:
        reasons.append(f"kvdash's budget comes from --budget-mode {kv.get('budget_mode')}, not from the GPU")
    if groups > 1:
        reasons.append(f"this model has {groups} KV-cache groups: the engine's token figure divides its blocks "
                   "by the group count")
    if not reasons:
        reasons.append("the same pool")
    row["explain"] = "; ".join(reasons)
    return row


def offload_vs_kvdash(engine: EngineReading, kv: dict[str, Any]) -> dict[str, Any]:
    """The engine's offload tier beside kvdash's own figure for a tier of the same size (the rules of
    ``kvdash calc --offload``, :mod:`kvdash.core.tiers`): vLLM native offloading, its ``kv_offloading_size``
    (GiB, over the TP ranks) in chunks and tokens (``vllm_cpu_tier``) against ``kv_offload_config_info``'s
    ``cpu_num_chunks`` and ``cpu_kv_cache_size_tokens``; LMCache, the bytes it holds in 256-token chunks
    (``lmcache_tier``) against the tokens it stored.  SGLang HiCache's host pool is not mirrored.  Empty when
    the engine states no tier size of its own (an older vLLM: only ``kv_offloading_size``)."""
    from kvdash.core.tiers import lmcache_tier, vllm_cpu_tier

    off = engine.offload
    groups, bs, tp = int(kv.get("groups", 1)), int(kv.get("block_size", 0)), int(kv.get("tp", 1))
    if groups != 1 or not bs or not kv.get("block_bytes"):
        return {"note": f"not compared ({groups} KV-cache groups)"}
    per_token_rank = int(kv["block_bytes"]) // bs  # bytes per token on one rank (kvdash's model)
    if str(off.get("tier", "")).startswith("vLLM") and off.get("size_gib") is not None:
        if off.get("chunks") is None:  # nothing of the engine's to set beside (kvdash calc --offload gives ours)
            return {}
        try:
            size = int(float(off["size_gib"]) * 2**30)
        except ValueError:
            return {"note": "not compared (kv_offloading_size is not a number)"}
        engine_bs = engine.block_size or bs
        t = vllm_cpu_tier(size, per_token_rank * engine_bs, tp, engine_bs, int(off.get("blocks_per_chunk") or 1))
        out: dict[str, Any] = {"rules": "vllm", "size_bytes": size, "kvdash_chunks": t.chunks,
                               "kvdash_tokens": t.tokens, "chunk_bytes": t.chunk_bytes,
                               "engine_chunks": off.get("chunks"), "engine_tokens": off.get("size_tokens"),
                               "engine_size_bytes": off.get("size_bytes")}
        if off.get("chunks") is not None:
            out["difference_chunks"] = int(off["chunks"]) - t.chunks
        return out
    if off.get("tier") == "LMCache" and off.get("used_bytes") is not None:
        t = lmcache_tier(int(off["used_bytes"]), per_token_rank * tp)
        out = {"rules": "lmcache", "size_bytes": int(off["used_bytes"]), "kvdash_chunks": t.chunks,
               "kvdash_tokens": t.tokens, "chunk_bytes": t.chunk_bytes, "engine_tokens": off.get("stored_tokens")}
        if off.get("stored_tokens") is not None:
            out["difference_tokens"] = int(off["stored_tokens"]) - t.tokens
        return out
    return {"note": "not mirrored (SGLang's --hicache-ratio/-size)"}


# --- the block map --------------------------------------------------------------------------------

TOKENS, TAIL, RESERVED, FREE, PADDING = "T", "t", "r", ".", " "


def block_map(pool_blocks: int, block_size: int, lengths: tuple[int, ...], max_reserved: int, cells: int,
              contiguous: bool, tokens_per_cell: int | None = None) -> list[str]:
    """The pool drawn as at most ``cells`` cells.

    Requests of the workload are packed over the whole pool as the capacity figures count them
    (whole groups): under paging each takes ``ceil(n / B)`` blocks, its last block part tokens (T)
    part tail (t); under contiguous reservation each takes ``max_reserved`` token slots, ``n`` of
    them tokens, the rest reserved but empty (r); ``.`` is free.  ``tokens_per_cell=None`` shows the
    whole pool in ``cells`` cells; otherwise the map is a window onto the start of the pool at that
    scale.  A cell shows what most of its slots hold.
    """
    if pool_blocks <= 0 or cells <= 0:
        return []
    slots = pool_blocks * block_size
    if tokens_per_cell is None:
        per_cell = slots / cells
        view = slots
    else:
        per_cell = float(tokens_per_cell)
        view = min(slots, cells * tokens_per_cell)
        cells = f.cdiv(view, tokens_per_cell)
    group: list[tuple[str, int]] = []
    for n in lengths:
        if contiguous:
            group += [(TOKENS, n), (RESERVED, max_reserved - n)]
        else:
            full = f.cdiv(n, block_size) * block_size
            group += [(TOKENS, n), (TAIL, full - n)]
    need = sum(k for _, k in group)
    runs: list[tuple[str, int]] = []
    used = 0
    while used + need <= slots and used < view:
        runs += group
        used += need
    runs.append((FREE, slots - used))
    out: list[str] = []
    counts: dict[str, float] = {}
    boundary = per_cell
    position = 0.0
    for kind, length in runs:
        remaining = float(length)
        while remaining > 0 and len(out) < cells:
            take = min(remaining, boundary - position)
            counts[kind] = counts.get(kind, 0.0) + take
            position += take
            remaining -= take
            if position >= boundary - 1e-9:
                if TAIL in counts and per_cell <= block_size:  # a partly filled block
                    out.append(TAIL)
                else:
                    out.append(max(counts, key=lambda k: (counts[k], k == TAIL)))
                counts = {}
                boundary += per_cell
        if len(out) >= cells:
            break
    if counts and len(out) < cells:
        out.append(max(counts, key=lambda k: counts[k]))
    return out

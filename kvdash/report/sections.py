"""The report's sections that state the grid's setting and judge its claims: the models, the dimensions, the
engine caps, the runtime reserve, the assumptions, the claims, the tutorial's exit criteria, and the
``simulate:`` and ``prefix_cache:`` sections.  Pure functions of the grid and its results frame."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

from kvdash.engines.vllm import SPARSE_BLOCK, is_sparse_mla, rank_shapes
from kvdash.report.labels import Labels, gib
from kvdash.sweep.claims import TIMED, Frame, Verdict, judge_all
from kvdash.sweep.columns import GPUS_PER_NODE
from kvdash.sweep.evaluate import DEFAULTS
from kvdash.sweep.gridfile import GridSpec
from kvdash.units import GiB, ratio_text


def _prefix_point(df: pl.DataFrame) -> dict[str, Any]:
    return df.select("model", "kv_dtype", "tp", "block_size", "bytes_per_token", "block_bytes",
                     "kv_token_slots").row(0, named=True)


def _prefix_cache(spec: GridSpec, df: pl.DataFrame) -> dict[str, Any] | None:
    """The ``prefix_cache:`` section: each point's hit rate, and the hit-rate curve per tier at the first point."""
    pc = spec.prefix_cache
    if pc is None:
        return None
    from kvdash.core import tiers as T
    from kvdash.simulate.prefix_assumptions import prefix_assumptions
    from kvdash.sweep.simulation import prefix_curve, tier_spec

    rows = []
    for r in df.select("model", "kv_dtype", "tp", "kv_token_slots", "pc_gpu_tokens", "pc_cpu_tokens",
                       "pc_hit_percent", "pc_requests_hit_percent", "pc_evictions").iter_rows(named=True):
        cpu = r["pc_cpu_tokens"]
        rows.append([str(r["model"]), str(r["kv_dtype"]), str(r["tp"]), f"{r['pc_gpu_tokens'] or 0:,}",
                     "-" if cpu is None else "unbounded" if cpu == -1 else f"{cpu:,}",
                     "-" if r["pc_hit_percent"] is None else f"{r['pc_hit_percent']:.2f}",
                     "-" if r["pc_requests_hit_percent"] is None else f"{r['pc_requests_hit_percent']:.2f}",
                     "-" if r["pc_evictions"] is None else f"{r['pc_evictions']:,}"])
    first = _prefix_point(df)
    ts = tier_spec(pc, first["kv_token_slots"], first["block_size"], first["bytes_per_token"], first["block_bytes"],
                   first["tp"])
    sized = {}
    for name, size in pc.offload.items():
        if size is not None:
            sized[name] = (T.vllm_cpu_tier(size, first["block_bytes"], first["tp"], first["block_size"])
                           if pc.rules == "vllm" else T.lmcache_tier(size, first["bytes_per_token"] * first["tp"]))
    curve, curve_rows, tier_rows = [], [], []
    if pc.capacities:
        curve = prefix_curve(pc, first["block_size"], first["bytes_per_token"], first["block_bytes"], first["tp"],
                             first["kv_token_slots"], first.get("max_batched_tokens") or 0)
        for pt in curve:
            cap = "unbounded" if pt["capacity_tokens"] is None else f"{pt['capacity_tokens']:,}"
            curve_rows.append([cap, *(f"{100 * t['hit_rate']:.2f}" for t in pt["tiers"].values()),
                               f"{100 * pt['hit_rate']:.2f}"])
            for name, t in pt["tiers"].items():
                tier_rows.append([cap, name, f"{100 * t['hit_rate']:.2f}", f"{t['bytes_loaded']:,}",
                                  f"{t['bytes_stored']:,}", f"{t['evictions']:,}",
                                  "-" if t["occupancy_peak"] is None or not t["capacity_units"] else
                                  f"{100 * t['occupancy_mean'] / t['capacity_units']:.1f}"])
    w = pc.workload
    setup = (f"{len(w):,} requests of {pc.label} ({w.note}), {w.prompt_tokens:,} prompt tokens, rules {pc.rules}"
             + (f", CPU eviction {pc.cpu_policy}" if pc.rules == "vllm" else "")
             + f"; the curve at the first point ({first['model']}, {first['kv_dtype']}, TP {first['tp']}) over the "
             + (f"{curve[0]['tier']} tier's capacity" if curve else "-"))
    return {"setup": setup, "rows": rows, "assumptions": prefix_assumptions(pc.rules, ts, sized, T.gpu_host_link(None),
                                                                            T.links()["nvme-gen4"], w, pc.concurrency),
            "curve_head": ["capacity, tokens", *(list(curve[0]["tiers"]) if curve else []), "total"],
            "curve_rows": curve_rows, "tier_rows": tier_rows, "curve": curve}


def _model_shape(arch: Any) -> Any:
    """The model tables' one-rank shape: at vLLM's default block of 16, or 64 for sparse MLA (DeepSeek-V3.2, GLM-5),
    whose backends take no block of 16 (:func:`kvdash.engines.vllm.check_sparse_block`)."""
    return rank_shapes(arch, block_size=SPARSE_BLOCK if is_sparse_mla(arch) else 16)[0]


def _models_short(spec: GridSpec) -> list[list[str]]:
    """The Markdown report's model table: what decides the KV bytes (the HTML report has the sources)."""
    rows = []
    for name, entry in spec.models.items():
        arch = entry.arch
        rows.append([name, arch.pattern(), f"{arch.kv_heads} x {arch.head_dim}",
                     f"{_model_shape(arch).bytes_per_token:,}",
                     f"{arch.weight_bytes / 1e9:,.1f} GB" if arch.weight_bytes else "not given"])
    return rows


def _models(spec: GridSpec) -> list[list[str]]:
    rows = []
    for name, entry in spec.models.items():
        arch = entry.arch
        shape = _model_shape(arch)
        rows.append([name, arch.source.replace(str(spec.path.parent) + "/", ""), f"{arch.num_layers}", arch.pattern(),
                     f"{arch.num_attention_heads}", f"{arch.kv_heads}", f"{arch.head_dim}", f"{arch.max_context:,}",
                     f"{shape.bytes_per_token:,}",
                     f"{arch.weight_bytes / 1e9:,.1f} GB ({arch.weight_basis})" if arch.weight_bytes else "not given"])
    return rows


def _dimension_values(dim: str, vals: list[Any]) -> str:
    shown = []
    for v in vals:
        if v is None:
            shown.append({"budget": "12 GiB without a GPU", "max_model_len": "= max_reserved",
                          "weights": "the preset's estimate", "gpu": "none (explicit budget)",
                          "gpu_memory": "the GPU preset's", "max_batched_tokens": "vLLM 0.33's default for the GPU",
                          "max_num_seqs": "vLLM 0.33's default for the GPU"}.get(dim, "none"))
        elif isinstance(v, bool):
            shown.append("on" if v else "off")
        elif dim == "reserve" and v == "auto":
            shown.append("auto on GPU-derived budgets (published activation + non-torch terms by model and TP, CUDA "
                         "graphs by layer; declared budgets take none)")
        elif dim in ("budget", "gpu_memory", "weights", "reserve"):
            shown.append(f"{v:,} B ({gib(v)})")
        else:
            shown.append(str(v))
    return ", ".join(shown)


def _dimensions(spec: GridSpec, df: Any = None) -> dict[str, Any]:
    """The dimensions the grid sets (a table) and the defaults it leaves (one line); a block_size left out is
    vLLM's choice, shown with the sizes it resolved to at the points ``df`` (vLLM's rows), e.g. ``block_size auto
    (vLLM's choice, 16)``."""
    rows, defaults = [], []
    set_dims = {}
    for factor in spec.factors:
        linked = len(factor) > 1
        for dim, vals in factor.items():
            set_dims[dim] = (vals, "zip (linked)" if linked else "grid")
    caps = ("max_batched_tokens", "max_num_seqs", "performance_mode", "async_scheduling", "chunked_prefill",
            "allow_long_max_model_len")
    for dim in ("model", "workload", "kv_dtype", "kv_scales", "block_size", "budget", "gpu", "gpu_memory", "gpu_util",
                "util_policy", "weights", "reserve", "tp", "pp", "max_model_len", *caps):
        if dim in caps and dim not in set_dims:
            continue  # one item below for the engine caps the grid leaves to vLLM
        if dim in set_dims:
            vals, how = set_dims[dim]
            shown = f"{len(vals)} (the table above)" if dim == "model" and len(vals) > 4 else \
                _dimension_values(dim, vals)
            rows.append([dim, shown, how])
        elif dim == "block_size" and DEFAULTS.get(dim) == "auto" and df is not None and df.height:
            sizes = sorted(set(df.get_column("block_size").to_list()))
            defaults.append(f"{dim} auto (vLLM's choice, {', '.join(map(str, sizes))}"
                            + (" by model, KV dtype and GPU)" if len(sizes) > 1 else ")"))
        else:
            defaults.append(f"{dim} {_dimension_values(dim, [DEFAULTS.get(dim)])}")
    if any(dim not in set_dims for dim in caps):
        defaults.append("engine caps vLLM 0.33's (above)")
    return {"rows": rows, "defaults": "; ".join(defaults)}


def engine_caps_text(df: Any) -> str:
    """What vLLM 0.33 runs at once on the grid's GPUs: its max_num_seqs and max_num_batched_tokens per GPU, and that
    running_requests (what the default objective ranks) is the requests that fit, capped at max_num_seqs."""
    if not df.height:
        return ""
    rows = df.select(pl.col("gpu").cast(pl.Utf8), "max_num_seqs", "max_batched_tokens").unique() \
        .sort("gpu", "max_num_seqs", "max_batched_tokens", nulls_last=True).iter_rows()
    parts = [f"{gpu or 'no GPU'} {seqs:,} / {tokens:,}" for gpu, seqs, tokens in rows]
    capped = int((df.get_column("running_requests") < df.get_column("paged_requests")).sum())
    return ("Engine caps, max_num_seqs / max_num_batched_tokens (vLLM 0.33's defaults per GPU unless the grid sets "
            "them): " + ", ".join(parts) + f"; running_requests = min(paged_requests, max_num_seqs) is below "
            f"paged_requests at {capped:,} of {df.height:,} points.")


def reserve_text(spec: GridSpec) -> str:
    """The runtime reserve a capacity figure assumes, e.g. ``runtime reserve 0 B per rank (kvdash's default)``."""
    for factor in spec.factors:
        if "reserve" in factor:
            vals = ", ".join("auto (published terms: activation peak + non-torch overhead by model and TP + "
                             "CUDA-graph estimate by architecture and layer; see kvdash calc --reserve auto)"
                             if v == "auto" else gib(v)
                             for v in factor["reserve"])
            return f"runtime reserve {vals} per rank (from the grid)"
    return ("runtime reserve auto per rank (kvdash's default: published activation-peak, non-torch and CUDA-graph "
            "terms; see kvdash calc --reserve auto)")


NO_TUTORIAL_POINT = "the grid has no point of the tutorial's configuration"


def _exit_criteria(df: pl.DataFrame, verdicts: list[Verdict]) -> list[list[str]]:
    """The tutorial's measurable exit criteria, evaluated where this grid allows."""
    tut = df.lazy().filter((pl.col("bytes_per_token") == 327_680) & (pl.col("kv_dtype") == "bf16")
                           & (pl.col("budget_bytes") == 12 * GiB) & (pl.col("block_size") == 16)
                           & (pl.col("tp") == 1)).head(4096).collect()  # one row is read of each
    snap = tut.filter(pl.col("lengths").cast(pl.Utf8) == "825")
    rows = [["architecture, KV heads, dtype, budget, block size and lengths are explicit", "met",
             "the Assumptions section lists every input of every point"]]

    def check(label: str, frame: pl.DataFrame, cond: Callable[[dict[str, Any]], bool], shown: str) -> None:
        if frame.height == 0:
            rows.append([label, "not evaluable", NO_TUTORIAL_POINT])
            return
        r = frame.row(0, named=True)
        rows.append([label, "met" if cond(r) else "NOT met", shown.format(**r)])

    check("BF16 GQA KV state equals 327,680 bytes/token", tut, lambda r: r["bytes_per_token"] == 327_680,
          "{bytes_per_token:,} B/token")
    check("12 GiB yields 39,321 token slots (39,312 block-backed at block 16)", tut,
          lambda r: (r["kv_token_slots"], r["block_backed_token_slots"]) == (39_321, 39_312),
          "{kv_token_slots:,} slots, {block_backed_token_slots:,} block-backed")
    check("825 tokens take 52 blocks (832 slots), 7 unused (0.8413 %)", snap,
          lambda r: (r["paged_blocks"], r["allocated_slots"], r["tail_waste_slots"]) == (52, 832, 7),
          "{paged_blocks} blocks, {allocated_slots} slots, {tail_waste_slots} unused, "
          "{paged_internal_waste_percent:.4f} %")
    check("contiguous and paged snapshot capacities are 19 and 47", snap,
          lambda r: (r["contiguous_requests"], r["paged_requests"]) == (19, 47),
          "{contiguous_requests} contiguous, {paged_requests} paged")
    scoped = {v.claim.id: v for v in verdicts}
    hist = [scoped[i] for i in ("waste-60-80-2023", "throughput-2-4x") if i in scoped]
    rows.append(["historical 60-80 % waste and 2-4x throughput are scoped to their 2023 baselines",
                 "met" if hist else "not evaluable",
                 "; ".join(f"{v.claim.id}: {v.verdict}" for v in hist) or "claims not selected"])
    replayed = "pc_hit_percent" in df.columns
    rows.append(["block-level paging is distinguished from prefix-cache matching and retention", "met",
                 "prefix figures assume the prefix blocks are already shared; matching, retention and eviction "
                 "are engine policies outside this arithmetic" if not replayed else
                 "paging is the capacity arithmetic; matching, retention and eviction are the prefix_cache "
                 "replay (vLLM's block pool or LMCache's chunks), reported apart"])
    has_fp8 = df.select(Frame(df).is_in("kv_dtype", ["fp8", "fp8_e4m3", "fp8_e5m2", "int8"]).any()).item()
    rows.append(["FP8 capacity is marked idealized", "met" if has_fp8 else "not evaluable",
                 "every fp8/int8 point without per-token scales is labelled idealized" if has_fp8 else
                 "no fp8 point in this grid"])
    if replayed:
        rows.append(["offload and tiered-KV evaluations include latency, bandwidth and per-tier hit rates",
                     "met", "the prefix_cache section: per-tier hit rates, bytes loaded and stored, evictions, "
                     "occupancy, and transfer times as bytes over each link's bandwidth (lower bounds, not "
                     "measured latency)"])
    else:
        rows.append(["offload and tiered-KV evaluations include latency, bandwidth and per-tier hit rates",
                     "not evaluable", "capacity arithmetic gives offload sizes only (offload_useful_bytes, "
                     "offload_allocated_bytes); transfer latency needs a benchmark"])
    return rows


def _assumption_lines(df: pl.DataFrame) -> list[str]:
    policies = sorted(str(p) for p in df.get_column("util_policy").unique().to_list() if p is not None) or ["vllm"]
    lines = [
        "Bytes, slots and blocks are exact integers; GiB = 2^30 bytes, GB = 10^9 bytes.",
        "Budgets are per rank; when derived from a GPU: " + " or ".join(
            {"vllm": "floor(GPU total x utilization) - weights/rank - reserve (vLLM)",
             "trtllm": "floor((total - weights/rank - reserve) x utilization) (TensorRT-LLM)",
             # grid: engine: sglang rows (kvdash.sweep.engines)
             "sglang": "free after weights - free before weights x (1 - mem_fraction_static) (SGLang 0.5.23, "
                       "free before weights = GPU total - 1 GiB)"}[p]
            for p in policies) + "; the tightest rank decides.",
        "Capacities are snapshots: every request of a workload at its stated length, whole groups only, no growth "
        "headroom, no preemption. A capacity ratio is not a throughput ratio.",
        "Contiguous Max reserves max_reserved tokens per request; Pow2 the next power of two of the final length "
        "(capped at max_reserved); Oracle the exact final length.",
        "Paged pools follow vLLM v1: a block holds block_size tokens for every layer of a KV-cache group; sliding "
        "layers hold at most ceil((W-1)/B)+1 blocks.",
        f"Requests per node assume {GPUS_PER_NODE}-GPU nodes filled with whole replicas of tp x pp GPUs.",
    ]
    frame = Frame(df)
    if df.select((frame.is_in("kv_dtype", ["fp8", "fp8_e4m3", "fp8_e5m2", "int8"])
                  & frame.is_in("kv_scales", ["tensor"])).any()).item():
        lines.append("FP8/int8 points are idealized: 1 byte per element, no per-token scales, alignment or "
                     "accuracy cost.")
    if not df.get_column("fits").all():
        lines.append("Points whose weights and reserve leave no KV memory are kept with capacity 0 (fits = no).")
        if "vllm_max_concurrency" in df.columns and df.select(
                (~pl.col("fits") & (pl.col("budget_bytes") > 0) & (pl.col("vllm_max_concurrency") <= 1)).any()).item():
            lines.append("Points where vLLM 0.33 would refuse to start (one request of max_model_len needs every whole "
                         "block of the pool or more: _check_enough_kv_cache_memory, vllm/v1/core/kv_cache_planning.py) "
                         "are marked fits = no; their capacities are what such a pool would hold.")
    return lines


def _simulation(spec: GridSpec, df: pl.DataFrame) -> dict[str, Any] | None:
    """Medians over the grid of the simulated shares, per policy, beside the paper's Figure 2, what each
    share counts and the gaps' causes; the capacity sweep when the section has ``rates``."""
    if spec.simulate is None or not spec.simulate.policies:
        return None
    from kvdash.simulate.capacity import LABEL
    from kvdash.simulate.engine import PAPER_FIG2
    from kvdash.simulate.explain import PAPER_OTHERS, SHARE_MEANING, gap_notes
    from kvdash.sweep.simulation import SHARE_COLUMNS, column

    sim = spec.simulate
    rows, notes = [], []
    for pol in sim.policies:
        med = df.select([pl.col(column(pol, short)).median().alias(short) for _, short in SHARE_COLUMNS]
                        + [pl.col(column(pol, "avg_batch")).median().alias("batch"),
                           pl.col(column(pol, "preemptions")).median().alias("pre"),
                           pl.col(column(pol, "norm_latency")).median().alias("lat")]).row(0, named=True)
        paper = PAPER_FIG2.get(pol, (None,) * 4)
        cells = []
        for i, (_, short) in enumerate(SHARE_COLUMNS):
            v = med[short]
            text = "-" if v is None else f"{v:.1f}"
            if i < 3 and paper[i] is not None:
                text += f" ({paper[i]:.1f})"
            cells.append(text)
        ext_free = None if med["external"] is None else med["external"] + med["free"]
        cells.append(("-" if ext_free is None else f"{ext_free:.1f}")
                     + ("" if paper[3] is None else f" ({paper[3]:.1f})"))
        rows.append([pol, *cells, "-" if med["batch"] is None else f"{med['batch']:.2f}",
                     "-" if med["pre"] is None else f"{med['pre']:,.0f}",
                     "-" if med["lat"] is None else f"{med['lat']:,.2f}"])
        if med["token_states"] is not None:
            shares = {share: med[short] for share, short in SHARE_COLUMNS}
            notes.append(f"{pol}: " + "; ".join(gap_notes(pol, sim.allocator, sim.workload.synthetic, shares)))
    w = sim.workload
    arrival = f"closed loop of {w.concurrency}" if w.arrival == "closed" else f"Poisson {w.rate:g} requests per step"
    setup = (f"{w.requests:,} {w.name} requests ({w.note}), {arrival}, shared prefix {w.prefix:,} tokens, "
             f"maximum length {sim.max_len:,}, contiguous allocator {sim.allocator}, watermark {sim.watermark:g}, "
             f"seed {sim.seed}; each point's pool is its kv_token_slots; paged pools scheduled by vLLM v1's rules "
             "(vllm/v1/core/sched/scheduler.py, vLLM 0.33.0): running requests first, the newest preempted and "
             "recomputed with its generated tokens, FCFS admission in steps without preemption")
    meaning = [f"{k.replace('_', ' ')}: {v}" for k, v in SHARE_MEANING.items()] + [PAPER_OTHERS]
    capacity = None
    if sim.rates:
        head = "paged" if "paged" in sim.policies else next((p for p in sim.policies if p.startswith("paged")), None)
        med_rate = {pol: df.select(pl.col(column(pol, "capacity_rate")).median()).item() for pol in sim.policies}
        cap_rows = [[pol, "-" if med_rate[pol] is None else f"{med_rate[pol]:.4g}",
                     "-" if head is None or pol == head or not med_rate[pol] or med_rate[head] is None
                     else ratio_text(med_rate[head] / med_rate[pol])] for pol in sim.policies]
        capacity = {"rows": cap_rows, "head": head or "-", "bound": f"{sim.latency_bound:g}", "label": LABEL,
                    "rates": f"{len(sim.rates)} rates from {sim.rates[0]:.4g} to {sim.rates[-1]:.4g} requests per step"}
    return {"rows": rows, "setup": setup, "meaning": meaning, "notes": notes, "capacity": capacity}


def _claims(verdicts: list[Verdict], reserve: str) -> dict[str, Any]:
    """Judged claims as rows; claims this grid cannot judge collapsed into one line each."""
    rows, not_applicable, not_computable, timed = [], [], [], []
    for v in verdicts:
        if v.verdict == "not applicable":
            not_applicable.append(f"`{v.claim.id}`" if v.note.startswith("this grid has no") else
                                  f"`{v.claim.id}` ({v.note})")
            continue
        if v.verdict == "not computable":
            if v.claim.kind in TIMED:  # judged only with a simulate: time: block: named once, counted after
                timed.append(f"`{v.claim.id}`")
                if len(timed) == 1:
                    not_computable.append("")
            else:
                not_computable.append(f"`{v.claim.id}`")
            continue
        verdict = v.verdict + (f" ({v.holding:,}/{v.points:,})" if v.points and v.verdict != "circular"
                               else "")
        why = []
        if v.where:
            why.append(v.where if v.where.startswith(("everywhere", "no single")) else f"holds where {v.where}")
        if v.direction and v.verdict != "holds":
            why.append(v.direction)
        if v.note:
            why.append(v.note)
        if v.claim.kind == "capacity" and v.claim.metric and "requests" in v.claim.metric:
            why.append(reserve.split(" (")[0].replace("runtime reserve", "reserve").replace(" per rank", "/rank"))
        rows.append({"id": v.claim.id, "claim": v.claim.claim, "claimed": v.claim.claimed_text(),
                     "computed": v.computed, "verdict": verdict, "css": v.verdict.replace(" ", "-"),
                     "why": "; ".join(why), "source": v.claim.source, "conditions": v.claim.conditions,
                     "kind": v.claim.kind, "metric": v.claim.metric or ""})
    if timed:  # the time claims in one entry, where the first of them stood: the shipped reports stay short
        not_computable[not_computable.index("")] = timed[0] + (f" (+{len(timed) - 1} in seconds)" if len(timed) > 1
                                                                else "")
    return {"rows": rows, "not_applicable": not_applicable, "not_computable": not_computable, "reserve": reserve}


def grid_reserves(spec: GridSpec) -> list[Any]:
    """The grid's ``reserve`` values: those it gives, else kvdash's default (``auto``)."""
    from kvdash.sweep.evaluate import DEFAULTS

    return next((factor["reserve"] for factor in spec.factors if "reserve" in factor), [DEFAULTS["reserve"]])


def _auto_span(spec: GridSpec, df: Any) -> tuple[str, str]:
    """The range ``reserve: auto`` takes over the grid's GPU points, and its share of the budget before it."""
    from kvdash.engines.vllm_reserve import auto_reserve

    rows = df.filter(df.get_column("gpu").is_not_null())
    est, shares = [], []
    from kvdash.core.gpus import gpu_presets
    from kvdash.engines.vllm import cudagraph_capture_sizes, gpu_generation

    presets = gpu_presets()
    for r in rows.select("model", "tp", "pp", "gpu", "budget_bytes", "max_batched_tokens", "max_num_seqs") \
            .unique().iter_rows(named=True):
        entry = spec.models.get(r["model"])
        if entry is None:
            continue
        cc = presets[str(r["gpu"])].compute_capability if str(r["gpu"]) in presets else ""
        graphs = len(cudagraph_capture_sizes(int(r["max_num_seqs"]), int(r["max_batched_tokens"]),
                                             gpu_generation(cc) == "sm100"))
        b = auto_reserve(entry.arch.model_type, int(r["tp"]), int(r["pp"]), int(r["max_batched_tokens"]),
                         gpu=str(r["gpu"]), layers=entry.arch.num_layers, graphs=graphs)["bytes"]
        est.append(b)
        if r["budget_bytes"]:
            shares.append(100 * b / (int(r["budget_bytes"]) + b))
    if not est:
        return "", ""
    span = gib(min(est)) if min(est) == max(est) else f"{gib(min(est))} to {gib(max(est))}"
    share = f"{min(shares):.1f}% to {max(shares):.1f}%" if shares else ""
    return span, share


def reserve_line(spec: GridSpec, df: Any, has_gpu: bool, short: bool = False) -> str:
    """The report's first line under the title (and ``kvdash sweep``'s and ``--check``'s, with ``short``):
    the runtime reserve the GPU-derived budgets take, and what it is based on; an upper bound said first."""
    if not has_gpu:
        return ("no reserve: declared KV budgets" if short else
                "Runtime reserve: none: every KV budget in this grid is declared (the KV memory itself), so nothing "
                "is taken off it.")
    values = grid_reserves(spec)
    parts, long_parts = [], []
    for v in values:
        if v == "auto":
            span, share = _auto_span(spec, df)
            parts.append(f"reserve auto, {span} per rank, published terms")
            long_parts.append(
                "auto" + (" (kvdash's default)" if not any("reserve" in f for f in spec.factors) else "")
                + f", {span} per rank" + (f" ({share} of the memory after the weights)" if share else "")
                + ": llm-d-planner's published activation-peak and non-torch terms (vLLM 0.19.0, H100-80GB) plus "
                "vLLM 0.33's CUDA-graph estimate per layer; extrapolated on other GPUs")
        elif v == 0:
            span, share = _auto_span(spec, df)
            parts.append("reserve 0 B, an UPPER BOUND")
            long_parts.append("0 B, an UPPER BOUND: no activation peak, CUDA graphs or non-torch memory"
                              + (f"; reserve: auto would lower each budget by about {span} per rank" if span else ""))
        else:
            parts.append(f"reserve {gib(v)} per rank, from the grid")
            long_parts.append(f"{gib(v)} per rank, from the grid")
    if short:
        return "; ".join(parts)
    head = "Upper bound where reserve is 0 B. " if 0 in values else ""
    return (f"{head}Runtime reserve of the GPU-derived budgets: " + "; ".join(long_parts) + "."
            + " Declared budgets take none." * (df.get_column("gpu").null_count() > 0))


def judge_claims(spec: GridSpec, df: pl.DataFrame) -> list[Verdict]:
    """The grid's claim verdicts, "holds where" named by its swept dimensions."""
    return judge_all(df, spec.claims, dims=Labels(spec, df).swept,
                     models={name: e.arch for name, e in spec.models.items()})


def _prefix_columns(spec: GridSpec) -> list[tuple[str, str, str]]:
    from kvdash.sweep.simulation import prefix_columns

    return prefix_columns(spec)


def _simulation_columns(spec: GridSpec) -> list[tuple[str, str, str]]:
    from kvdash.sweep.simulation import simulation_columns

    return simulation_columns(spec)

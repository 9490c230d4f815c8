"""Expand a grid into points and evaluate them all at once with polars.

Expansion is a chain of cross joins of small code tables (written key order, ``zip`` groups as one
table), then ``exclude`` filters.  Per-model figures that need Python (pool shapes, derived
budgets) are computed once per distinct combination and joined in; every result column then comes
from :func:`kvdash.core.point.point_metrics` evaluated on polars expressions -- the same function
``kvdash calc`` evaluates on integers.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from kvdash import defaults as D
from kvdash.answer.budget import BudgetSpec, budget_gpu, resolve_budget
from kvdash.core import formulas as f
from kvdash.core.gpus import gpu_presets
from kvdash.core.limits import MAX_TOKENS
from kvdash.core.model import Architecture
from kvdash.core.point import capacity_metrics, request_metrics, shape_inputs
from kvdash.core.pool import PoolShape, check_positive
from kvdash.engines import vllm as vllm_rules
from kvdash.engines.vllm import auto_block_size, rank_shapes, refused_auto_block
from kvdash.engines.vllm_reserve import auto_reserve
from kvdash.errors import InputError
from kvdash.sweep.columns import GPUS_PER_NODE, RESULT_COLUMNS
from kvdash.sweep.gridfile import DIMENSIONS, GridError, GridSpec

DEFAULT_MAX_POINTS = 2_000_000

DEFAULTS: dict[str, Any] = {  # a dimension the grid leaves out: kvdash/defaults.py, as every command
    "kv_dtype": D.KV_DTYPE, "kv_scales": "tensor", "block_size": D.BLOCK_SIZE, "budget": None, "gpu": None,
    "gpu_memory": None, "gpu_util": D.GPU_UTIL, "util_policy": "vllm", "weights": None, "reserve": D.RESERVE,
    "tp": D.TP, "pp": D.PP, "max_model_len": None,
    # the engine caps: None is vLLM 0.33's default for the point's GPU (kvdash.engines.vllm.scheduler_caps)
    "max_batched_tokens": None, "max_num_seqs": None, "performance_mode": "balanced", "async_scheduling": True,
    "chunked_prefill": True, "allow_long_max_model_len": False,
}
# dimensions added with the engine caps (issue 23): at their default a point keeps the id it had before them
CAPS_DIMS = ("max_num_seqs", "performance_mode", "async_scheduling", "chunked_prefill", "allow_long_max_model_len")
OLD_BATCHED_DEFAULT = 8192  # max_batched_tokens' default before it followed the GPU: null hashes as it did
OLD_BLOCK_DEFAULT = 16  # block_size's default before it was the engine's choice ('auto'): left out, it hashes so


_HEX = {i: "0123456789abcdef"[i] for i in range(16)}
_M61 = (1 << 61) - 1


def _h(text: str, digits: int) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:digits], 16)


@dataclass
class Expanded:
    frame: pl.DataFrame  # one row per point, result columns in RESULT_COLUMNS order
    size_before_exclude: int
    # grid: engine: -- the (model, KV dtype, TP, PP, GPU) an engine's rules refuse, with the reason
    engine_refusals: list[dict[str, Any]] = field(default_factory=list)


def dominant_stage(shapes: list[PoolShape], where: str) -> PoolShape:
    """With pipeline parallelism the sweep evaluates the stage that is largest in every respect."""
    fields = ("layer_token_bytes", "group_size", "full_groups", "window_groups", "full_token_bytes",
              "window_token_bytes", "state_bytes", "state_blocks")
    for s in shapes:
        if all(getattr(s, k) >= getattr(o, k) for o in shapes for k in fields) and \
                all(o.window in (s.window, 0) for o in shapes):
            return s
    raise InputError(where, len(shapes), "no pipeline stage dominates the others for this hybrid model, so a "
                     "sweep cannot take one stage for all; evaluate it with kvdash calc --pp")


class _Reads(dict[str, Any]):
    """A mapping that records which keys were read (the request figures the budget divisions use)."""

    def __init__(self, items: dict[str, Any]) -> None:
        super().__init__(items)
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return super().__getitem__(key)


class _Keys:
    """Mixed-radix keys over dimension codes, and dense lookup tables indexed by them.

    A dimension with a single value has no code column: its code is always 0."""

    def __init__(self, values: dict[str, list[Any]], columns: set[str]) -> None:
        self.values = values
        self.columns = columns

    def code(self, d: str) -> pl.Expr:
        return pl.col(f"_c_{d}") if f"_c_{d}" in self.columns else pl.lit(0, dtype=pl.UInt32)

    def space(self, dims: tuple[str, ...]) -> int:
        total = 1
        for d in dims:
            total *= len(self.values[d])
        return total

    def expr(self, dims: tuple[str, ...]) -> pl.Expr:
        key = pl.lit(0, dtype=pl.UInt64)
        for d in dims:
            if len(self.values[d]) > 1:
                key = key * len(self.values[d]) + self.code(d)
        return key

    def unique(self, codes: pl.DataFrame, key: str, dims: tuple[str, ...], complete: bool) -> pl.DataFrame:
        """The distinct keys of column ``key``, with the code of every dimension decoded from them.

        ``complete``: every combination is present (no exclusions), so the keys are 0..space-1."""
        cols: dict[str, pl.Expr] = {}
        rest = pl.col(key)
        for d in reversed(dims):
            n = len(self.values[d])
            cols[f"_c_{d}"] = (rest % n).cast(pl.UInt32)
            rest = rest // n
        present = pl.Series(key, range(self.space(dims)), dtype=pl.UInt64) if complete else \
            codes.get_column(key).unique().sort()
        return pl.DataFrame({key: present}).with_columns(e.alias(n) for n, e in cols.items())

    def decode(self, key: int, dims: tuple[str, ...]) -> dict[str, Any]:
        out = {}
        for d in reversed(dims):
            key, c = divmod(key, len(self.values[d]))
            out[d] = self.values[d][c]
        return dict(reversed(list(out.items())))

    def lookup(self, d: str, dtype: Any) -> pl.Expr:
        """The value of dimension ``d`` at every point (text as a polars Enum: cheap to group and join)."""
        vals = self.values[d]
        if dtype == pl.Utf8:
            dtype = pl.Enum(list(dict.fromkeys(str(v) for v in vals if v is not None)))
            vals = [None if v is None else str(v) for v in vals]
        if len(vals) == 1:
            return pl.lit(vals[0], dtype=dtype)
        return pl.lit(pl.Series(vals, dtype=dtype)).gather(self.code(d))


def _dense_frame(table: pl.DataFrame, key: str, size: int, columns: list[str]) -> pl.DataFrame:
    """``columns`` of ``table`` as a lookup table of ``size`` rows: row ``i`` holds the row whose ``key`` is ``i``
    (nulls where no row has it)."""
    full = pl.DataFrame({key: pl.Series(range(size), dtype=table.schema[key])})
    return full.join(table.select(key, *columns), on=key, how="left", maintain_order="left").drop(key)


def _dim_hashes(dim: str, values: list[Any], defaulted: bool = False) -> pl.Series:
    """One 61-bit term per value of a dimension; a point's id is the sum of its terms mod 2^61 - 1.  An engine-cap
    dimension at its default adds 0, a null max_batched_tokens hashes as 8,192 did, and a block_size the grid
    leaves out (``defaulted``: the engine's choice) as 16 did, so grids that set none of them keep their ids."""
    mult = _h(f"dimension:{dim}", 7) | 1

    def term(v: Any) -> int:
        if dim in CAPS_DIMS and v == DEFAULTS[dim] and type(v) is type(DEFAULTS[dim]):
            return 0
        if dim == "max_batched_tokens" and v is None:
            v = OLD_BATCHED_DEFAULT
        if dim == "block_size" and defaulted:
            v = OLD_BLOCK_DEFAULT
        return _h(f"{dim}={v!r}", 8) * mult % _M61

    return pl.Series([term(v) for v in values], dtype=pl.UInt64)


def _hex4() -> pl.Series:
    """The 65,536 four-digit hex strings ``0000`` .. ``ffff`` in order: 256 x 256 pairs of two digits crossed
    in polars (5 ms; a Python list of 65,536 formatted strings takes 20-30 ms, a tenth of a small sweep)."""
    two = pl.DataFrame({"hi": [f"{i:02x}" for i in range(256)]})
    return two.join(two.rename({"hi": "lo"}), how="cross", maintain_order="left_right") \
        .select(pl.concat_str("hi", "lo")).to_series()


def _cross_sum(tables: list[pl.DataFrame], sums: list[str], alls: list[str]) -> pl.DataFrame:
    """Every combination of one row of each table in order (polars' cross join, left rows outer, the last table
    fastest), with columns ``sums`` added up and columns ``alls`` (booleans) and-ed over the combination."""
    out = tables[0].lazy()
    for table in tables[1:]:
        out = out.join(table.lazy(), how="cross", maintain_order="left_right", suffix="_r").select(
            *((pl.col(c) + pl.col(f"{c}_r")).alias(c) for c in sums), *((pl.col(c) & pl.col(f"{c}_r")).alias(c)
                                                                        for c in alls))
    return out.collect()


SHAPE_DIMS = ("model", "kv_dtype", "kv_scales", "tp", "pp", "block_size")
# after the workload: what enters only vLLM's start-up figures (the engine caps follow the GPU, so it is here too)
REQUEST_DIMS = SHAPE_DIMS + ("workload", "max_model_len", "max_batched_tokens", "max_num_seqs", "performance_mode",
                             "chunked_prefill", "async_scheduling", "allow_long_max_model_len", "gpu", "gpu_memory")
BUDGET_DIMS = ("model", "budget", "gpu", "gpu_memory", "gpu_util", "util_policy", "weights", "reserve", "tp", "pp",
               "max_batched_tokens", "max_num_seqs", "performance_mode")  # the caps: the reserve's CUDA graphs
CAP_INPUTS = ("gpu", "gpu_memory", "max_batched_tokens", "max_num_seqs", "performance_mode", "chunked_prefill",
              "async_scheduling", "pp")
DENSE_LIMIT = 4_000_000  # key spaces larger than this are joined instead of gathered
LONG_CONTEXT = 131_072
ENGINE_METRICS = ("vllm_blocks_per_request", "vllm_max_model_len")  # the request figures max_model_len or
# the in-flight tokens enter (request_metrics' only use of them)


def point_caps(p: dict[str, Any], max_model_len: int) -> vllm_rules.Caps:
    """The scheduler caps of a point (its GPU, the grid's caps or vLLM 0.33's defaults): the rule calc uses."""
    total, name, _ = budget_gpu(BudgetSpec(gpu=p["gpu"], gpu_memory=p["gpu_memory"]))
    return vllm_rules.scheduler_caps(total, name, max_model_len, p["max_num_seqs"], p["max_batched_tokens"],
                                 p["performance_mode"], p.get("chunked_prefill", True))


def reserve_graphs(p: dict[str, Any], caps: vllm_rules.Caps) -> int:
    """CUDA graphs the caps capture on the point's GPU (the reserve's CUDA-graph term scales with them)."""
    cc = budget_gpu(BudgetSpec(gpu=p["gpu"], gpu_memory=p["gpu_memory"]))[2]
    blackwell = vllm_rules.gpu_generation(cc) == "sm100"
    return len(vllm_rules.cudagraph_capture_sizes(caps.max_num_seqs, caps.max_num_batched_tokens, blackwell,
                                              p["performance_mode"]))


def grid_compute_capabilities(gpus: list[Any]) -> list[str]:
    """The compute capabilities --block-size auto reads for a grid's GPUs, one per generation (a declared budget
    or --gpu-memory counts as Hopper, as in calc)."""
    presets = gpu_presets()
    ccs = [presets[g].compute_capability if g is not None else "" for g in gpus]
    return list({vllm_rules.gpu_generation(cc) or "sm90": cc for cc in ccs}.values()) or [""]


def grid_auto_block_size(arch: Architecture, kv_dtype: str, ccs: list[str], model: str, where: str,
                         left_out: bool) -> int:
    """vLLM 0.33's block size for ``block_size: auto`` (also the default a grid leaves out), the same on every
    GPU generation of the grid: the grid's pool shapes are per model, not per GPU, so where the choice differs
    (MLA: 64 with fp8 KV on Hopper, 32 on Blackwell) it asks for a number."""
    choices = {auto_block_size(arch, kv_dtype, cc)[0] for cc in ccs}
    if len(choices) > 1:
        left = " (the grid leaves block_size to vLLM: auto, its default)" if left_out else ""
        raise InputError(f"{where}: block_size", "auto",
                         f"for {model} (MLA) vLLM 0.33's choice differs by GPU generation "
                         f"({', '.join(map(str, sorted(choices)))}), and the grid's GPUs span several{left}",
                         "give block_size as a number, or sweep one generation per grid")
    return choices.pop()
# parameters shown with every point that the request key fixes (the budget key fixes gpu, util_policy, gpu_util)
REQUEST_PARAMETERS = (("model", pl.Utf8), ("workload", pl.Utf8), ("kv_dtype", pl.Utf8), ("kv_scales", pl.Utf8),
                      ("tp", pl.Int64), ("pp", pl.Int64))


def expand(spec: GridSpec, max_points: int = DEFAULT_MAX_POINTS, jobs: int = 1, use_ray: bool = False) -> Expanded:
    """Every point of the grid with every result column (:data:`RESULT_COLUMNS`)."""
    size = spec.size()
    if size > max_points:
        raise InputError(f"{spec.path}", f"{size:,} points",
                         f"the limit is {max_points:,}; raise it with --max-points")
    # value lists per dimension (constants for dimensions the grid does not set)
    values: dict[str, list[Any]] = {}
    for factor in spec.factors:
        values.update(factor)
    set_dims = set(values)  # the dimensions the grid sets (the rest take DEFAULTS)
    for dim in DIMENSIONS:
        if dim not in values:
            values[dim] = [DEFAULTS[dim]]
    if "reserve" not in set_dims and all(v is None for d in ("gpu", "gpu_memory") for v in values[d]):
        values["reserve"] = [0]  # declared budgets only: nothing to take off (and the points' ids stay as they were)
    # the points: the product of the factors with more than one value, in written order (a zip group is one
    # factor).  A point needs only its request and budget keys: each factor's table holds its share of both
    # keys (and whether each exclude rule matches it), and the product sums the shares (no per-dimension columns)
    multi = [factor for factor in spec.factors if len(next(iter(factor.values()))) > 1]
    keys = _Keys(values, set())
    weights: dict[str, dict[str, int]] = {}
    for name, dims in (("_req", REQUEST_DIMS), ("_budget", BUDGET_DIMS)):
        weight, weights[name] = 1, {}
        for d in reversed(dims):
            weights[name][d] = weight
            weight *= len(values[d])
    # a rule naming a one-valued dimension applies only if it names that value
    rules = [rule for rule in spec.excludes if all(values[d][0] in rule[d] for d in rule if len(values[d]) == 1)]
    tables = []
    for factor in multi:
        n = len(next(iter(factor.values())))
        table: dict[str, pl.Series] = {
            name: pl.Series([i * sum(w.get(d, 0) for d in factor) for i in range(n)], dtype=pl.UInt64)
            for name, w in weights.items()}
        for r, rule in enumerate(rules):
            table[f"_x{r}"] = pl.Series([all(values[d][i] in rule[d] for d in factor if d in rule) for i in range(n)],
                                        dtype=pl.Boolean)
        tables.append(pl.DataFrame(table))
    if not tables:  # a single point: every key share 0, and every rule that applies matches it
        tables = [pl.DataFrame({**{name: pl.Series([0], dtype=pl.UInt64) for name in weights},
                                **{f"_x{r}": pl.Series([True]) for r in range(len(rules))}})]
    codes = _cross_sum(tables, list(weights), [f"_x{r}" for r in range(len(rules))])
    if rules:
        codes = codes.filter(~pl.any_horizontal(f"_x{r}" for r in range(len(rules)))).select(*weights)
    if spec.excludes and codes.height == 0:
        raise InputError(f"{spec.path}: exclude", f"{size:,} points", "the exclude rules remove every point")

    def arch_of(name: str) -> Architecture:
        return spec.models[name].arch  # type: ignore[no-any-return]

    def point_label(p: dict[str, Any]) -> str:
        return "grid point " + ", ".join(f"{k}={v}" for k, v in p.items() if v is not None)

    # 1. pool shapes per (model, dtype, scales, tp, pp, block size): Python, once each
    complete = not spec.excludes
    req_ids = keys.unique(codes, "_req", REQUEST_DIMS, complete)
    req_ids = req_ids.with_columns(
        pl.Series("_shape", [0] * req_ids.height, dtype=pl.UInt64) if req_ids.height == 0 else
        _Keys(values, set(req_ids.columns)).expr(SHAPE_DIMS).alias("_shape"))
    by_base: dict[tuple[Any, ...], dict[str, Any]] = {}  # shape inputs and per-rank figures of each base
    shape_rows: list[dict[str, Any]] = []
    hybrid: dict[str, bool] = {}  # Architecture.is_hybrid scans every layer: once per model, not per point shape
    grid_ccs = grid_compute_capabilities(values["gpu"])
    for key in req_ids.get_column("_shape").unique().sort().to_list():
        p = keys.decode(key, SHAPE_DIMS)
        arch = arch_of(p["model"])
        if p["model"] not in hybrid:
            hybrid[p["model"]] = arch.is_hybrid
        is_hybrid = hybrid[p["model"]]
        # 'auto': vLLM 0.33's choice for the model, its KV dtype and the GPU generation, as --block-size auto
        # (the default when the grid leaves block_size out: the engine's choice, as calc without --block-size)
        block_size = grid_auto_block_size(arch, p["kv_dtype"], grid_ccs, p["model"], str(spec.path),
                                          "block_size" not in set_dims) \
            if p["block_size"] == "auto" else p["block_size"]
        # the block size changes no layer arithmetic, except in hybrids (the block is aligned to the state page)
        base = (p["model"], p["kv_dtype"], p["kv_scales"], p["tp"], p["pp"],
                block_size if is_hybrid else None)
        try:
            check_positive("block_size", block_size)
            if base not in by_base:
                stage = dominant_stage(rank_shapes(arch, p["kv_dtype"], p["kv_scales"], p["tp"], p["pp"],
                                                   block_size), "pp")
                weights_rank = f.weights_per_rank(arch.weight_bytes, p["tp"] * p["pp"])
                kv128 = f.contiguous_request_bytes(LONG_CONTEXT, stage.full_token_bytes, stage.window_token_bytes,
                                                   stage.window, stage.state_bytes)
                by_base[base] = {**shape_inputs(stage), "_max_context": arch.max_context,
                                 "_kv128k_over_weights": kv128 / weights_rank if weights_rank else None}
        except InputError as exc:
            exc = refused_auto_block(exc, p["block_size"] == "auto")
            raise InputError(f"{spec.path}: {point_label(p)}: {exc.field}", exc.value, exc.allowed,
                             exc.hint or "add an exclude: rule for it") from exc
        # outside hybrids only the block size itself differs between the block sizes of a base
        shape_rows.append({"_shape": key, **by_base[base]} if is_hybrid else
                          {"_shape": key, **by_base[base], "block_size": block_size})
    for w in (spec.workloads[name] for name in values["workload"]):
        for model in sorted({base[0] for base in by_base}):
            if w.max_reserved > arch_of(model).max_context:
                context = f"at most the context length of {model} ({arch_of(model).max_context:,})"
                at = ("workloads", w.name, "max_reserved")
                if at in spec.tree.marks:
                    raise GridError(spec.tree.at(at), at, w.max_reserved, context)
                # not written: the reservation is the longest length, which is then what is too long
                key = next((k for k in ("length", "group", "final") if at[:2] + (k,) in spec.tree.marks), "length")
                raise GridError(spec.tree.at(at[:2] + (key,)), at[:2] + (key,), max(w.lengths + w.finals),
                                context + " (max_reserved, not given, is the longest length)")

    # 2. request figures per (shape, workload, max_model_len, max_batched_tokens): polars on a small table
    wl = [spec.workloads[name] for name in values["workload"]]
    widest = max(len(w.lengths) for w in wl)
    wtable: dict[str, Any] = {"_c_workload": pl.Series(range(len(wl)), dtype=pl.UInt32),
                              "k": [len(w.lengths) for w in wl], "max_reserved": [w.max_reserved for w in wl],
                              "prefix": [w.prefix for w in wl],
                              "lengths": pl.Series([",".join(map(str, w.lengths)) for w in wl], dtype=pl.Enum(
                                  list(dict.fromkeys(",".join(map(str, w.lengths)) for w in wl))))}
    for i in range(widest):
        wtable[f"l{i}"] = [w.lengths[i] if i < len(w.lengths) else 0 for w in wl]
        wtable[f"f{i}"] = [w.finals[i] if i < len(w.finals) else 0 for w in wl]
    rkeys = _Keys(values, set(req_ids.columns))
    req = req_ids.join(pl.DataFrame(shape_rows, schema_overrides={"_shape": pl.UInt64,
                                                                  "_kv128k_over_weights": pl.Float64}), on="_shape") \
        .join(pl.DataFrame(wtable), on="_c_workload").with_columns(
            rkeys.lookup("max_model_len", pl.Int64).fill_null(pl.col("max_reserved")).alias("max_model_len"),
            rkeys.lookup("max_model_len", pl.Int64).is_not_null().alias("_max_model_len_given"),
            *(rkeys.code(d).alias(f"_k_{d}") for d in (*CAP_INPUTS, "model", "allow_long_max_model_len")))
    # vLLM refuses a max_model_len above the model's derived limit (vllm/config/model.py) unless allowed
    given = [v for v in values["max_model_len"] if v is not None]
    if given:
        for row in req.select("_k_model", "_k_allow_long_max_model_len", rkeys.code("max_model_len").alias("_k_l")) \
                .unique().iter_rows(named=True):
            length = values["max_model_len"][row["_k_l"]]
            if length is None:
                continue
            model = values["model"][row["_k_model"]]
            try:
                vllm_rules.check_max_model_len(length, arch_of(model).derived_max_len,
                                           values["allow_long_max_model_len"][row["_k_allow_long_max_model_len"]],
                                           "max_model_len")
            except InputError as exc:
                raise InputError(f"{spec.path}: grid point model={model}, max_model_len={length}: {exc.field}",
                                 exc.value, exc.allowed, "set allow_long_max_model_len: true as vLLM's "
                                 "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 does, or add an exclude: rule for it") from exc
    # the scheduler caps per (GPU, caps, max_model_len): vLLM 0.33's defaults for the GPU where the grid sets none
    kcols = [f"_k_{d}" for d in CAP_INPUTS] + ["max_model_len"]
    cap_rows = []
    for row in req.select(kcols).unique(maintain_order=True).iter_rows(named=True):
        p = {d: values[d][row[f"_k_{d}"]] for d in CAP_INPUTS}
        try:
            caps = point_caps(p, row["max_model_len"])
        except InputError as exc:
            raise InputError(f"{spec.path}: {point_label(p)}: {exc.field}", exc.value, exc.allowed,
                             "add an exclude: rule for it") from exc
        cap_rows.append({**row, "max_batched_tokens": caps.max_num_batched_tokens, "max_num_seqs": caps.max_num_seqs,
                         "in_flight_tokens": vllm_rules.max_in_flight_tokens(caps.max_num_batched_tokens,
                                                                         p["async_scheduling"], p["pp"])})
    req = req.join(pl.DataFrame(cap_rows, schema={**{c: pl.UInt32 for c in kcols[:-1]}, "max_model_len": pl.Int64,
                                                  "max_batched_tokens": pl.Int64, "max_num_seqs": pl.Int64,
                                                  "in_flight_tokens": pl.Int64}),
                   on=kcols, how="left", maintain_order="left")
    r_exprs = request_metrics({c: pl.col(c) for c in req.columns}, vllm_rules.RULES.blocks_per_request)
    finite = {name for name, kind, _ in RESULT_COLUMNS if kind == "float"}
    r_cols = {n: (pl.when(e.is_finite()).then(e.cast(pl.Float64)).otherwise(None) if n in finite else e).alias(n)
              for n, e in r_exprs.items()}
    # max_model_len and max_batched_tokens enter only vLLM's start-up figures: the rest (most of the arithmetic)
    # once per (shape, workload), then joined onto its requests
    engine = [n for n in r_cols if n in ENGINE_METRICS]
    req = req.with_columns((pl.col("_req") // keys.space(REQUEST_DIMS[len(SHAPE_DIMS) + 1:])).alias("_group"))
    groups = req.filter(pl.col("_group").is_first_distinct()) \
        .select("_group", *(e for n, e in r_cols.items() if n not in ENGINE_METRICS))
    req = req.join(groups, on="_group", how="left", maintain_order="left").lazy() \
        .with_columns(r_cols[n] for n in engine).with_columns(
        (pl.lit(0, dtype=pl.UInt64) + sum((pl.lit(_dim_hashes(d, values[d], d not in set_dims)).gather(rkeys.code(d))
                                           for d in REQUEST_DIMS), pl.lit(0, dtype=pl.UInt64)) % _M61)
        .alias("_hreq"),
        *(rkeys.lookup(name, dtype).alias(name) for name, dtype in REQUEST_PARAMETERS),
        (rkeys.lookup("tp", pl.Int64) * rkeys.lookup("pp", pl.Int64)).alias("gpus")).with_columns(
        # requests per node = paged requests x _node_mult // _node_div: whole replicas per node when a replica fits
        # in one (x 8 // gpus, // 1), else the replica's requests over its nodes (x 1, // nodes)
        pl.when(pl.col("gpus") <= GPUS_PER_NODE).then(GPUS_PER_NODE // pl.col("gpus")).otherwise(1)
        .alias("_node_mult"),
        pl.when(pl.col("gpus") <= GPUS_PER_NODE).then(1)
        .otherwise((pl.col("gpus") + GPUS_PER_NODE - 1) // GPUS_PER_NODE).alias("_node_div")).collect()

    # 3. budgets per (model, budget, GPU, utilization, policy, weights, reserve, tp, pp): Python, once each
    bud_ids = keys.unique(codes, "_budget", BUDGET_DIMS, complete)
    bkeys = _Keys(values, set(bud_ids.columns))
    bvals, bfits = [], []
    for key in bud_ids.get_column("_budget").to_list():
        p = keys.decode(key, BUDGET_DIMS)
        reserve = p["reserve"]
        if reserve == "auto":  # published terms only: a report must not depend on this machine's calibration file
            reserve_arch = arch_of(p["model"])
            if p["gpu"] or p["gpu_memory"]:
                # the caps without max_model_len's cap (it binds only below 16 tokens: 1,024 x 16 = 16,384)
                try:
                    caps = point_caps(p, MAX_TOKENS)
                except InputError as exc:
                    raise InputError(f"{spec.path}: {point_label(p)}: {exc.field}", exc.value, exc.allowed,
                                     "add an exclude: rule for it") from exc
                reserve = auto_reserve(reserve_arch.model_type, p["tp"], p["pp"], caps.max_num_batched_tokens,
                                       gpu=p["gpu"] or "custom", layers=reserve_arch.num_layers,
                                       graphs=reserve_graphs(p, caps))["bytes"]
            else:
                reserve = 0
        bspec = BudgetSpec(bytes=p["budget"], gpu=p["gpu"], gpu_memory=p["gpu_memory"], util=p["gpu_util"],
                           policy=p["util_policy"], weights=p["weights"], reserve=reserve)
        try:
            info = resolve_budget(bspec, arch_of(p["model"]), p["tp"], p["pp"], strict=False)
        except InputError as exc:
            raise InputError(f"{spec.path}: {point_label(p)}: {exc.field}", exc.value, exc.allowed, exc.hint) from exc
        bvals.append(info["per_rank_bytes"])
        bfits.append(info.get("fits", True))
    bud = bud_ids.with_columns(
        pl.Series("budget_bytes", bvals, dtype=pl.Int64), pl.Series("fits", bfits, dtype=pl.Boolean),
        (sum((pl.lit(_dim_hashes(d, values[d], d not in set_dims)).gather(bkeys.code(d)) for d in BUDGET_DIMS
              if d not in REQUEST_DIMS), pl.lit(0, dtype=pl.UInt64)) % _M61).alias("_hbud"),
        bkeys.lookup("gpu", pl.Utf8).alias("gpu"), bkeys.lookup("util_policy", pl.Utf8).alias("util_policy"),
        # the utilization only where the budget is derived from a GPU
        pl.when(pl.lit(pl.Series([v is not None for v in values["gpu"]])).gather(bkeys.code("gpu"))
                | pl.lit(pl.Series([v is not None for v in values["gpu_memory"]])).gather(bkeys.code("gpu_memory")))
        .then(bkeys.lookup("gpu_util", pl.Utf8)).otherwise(None).alias("gpu_util"))

    # 4. gather request and budget figures onto every point; the budget divisions; ids; parameters
    # the request figures a point needs: its result columns and those the budget divisions read; a figure that is
    # one of its inputs unchanged (vLLM's max_model_len) is read from that input's column
    source = {n: e.meta.output_name() if e.meta.is_column() else n for n, e in r_exprs.items()}
    reads = _Reads({n: pl.col(source[n]) for n in r_exprs})
    capacity_metrics(pl.col("budget_bytes"), pl.col("k"), pl.col("block_size"), reads)
    outputs = {name for name, _, _ in RESULT_COLUMNS}
    shown = list(dict.fromkeys([
        "block_size", "state_bytes", "max_reserved", "prefix", "max_model_len", "max_batched_tokens", "max_num_seqs",
        "lengths",
        "_kv128k_over_weights", *(source[n] for n in r_exprs if n in outputs),
        *(name for name, _ in REQUEST_PARAMETERS), "gpus"]))
    # a parameter with one value in the whole grid is one literal, not a gathered column
    literal = {name: keys.lookup(name, dtype) for name, dtype in (*REQUEST_PARAMETERS, ("gpu", pl.Utf8),
                                                                  ("util_policy", pl.Utf8)) if len(values[name]) == 1}
    if "tp" in literal and "pp" in literal:
        literal["gpus"] = keys.lookup("tp", pl.Int64) * keys.lookup("pp", pl.Int64)
    if all(len(values[d]) == 1 for d in ("gpu", "gpu_memory", "gpu_util")):
        derived = values["gpu"][0] is not None or values["gpu_memory"][0] is not None
        literal["gpu_util"] = pl.when(pl.lit(derived)).then(keys.lookup("gpu_util", pl.Utf8)).otherwise(None)
    shown = [c for c in shown if c not in literal]
    # the rest only feed the divisions and the id: gathered as columns of the final query, not into the points
    # frame (fewer page faults: each million-row column is 8 MB of fresh memory)
    start_check = any(v is not None for v in values["max_model_len"])
    feeds = [c for c in dict.fromkeys(["k", "_hreq", *(source[n] for n in reads.read), "_node_mult", "_node_div",
                                       *(("_max_model_len_given", source["vllm_blocks_per_request"])
                                         if start_check else ())])
             if c not in shown]
    bud_shown = [c for c in ("budget_bytes", "fits", "gpu", "util_policy", "gpu_util") if c not in literal]
    bud_feeds = ["_hbud"]
    at: dict[str, pl.Expr] = {}
    if keys.space(REQUEST_DIMS) <= DENSE_LIMIT and keys.space(BUDGET_DIMS) <= DENSE_LIMIT:
        n_req, n_bud = keys.space(REQUEST_DIMS), keys.space(BUDGET_DIMS)
        dense_req = _dense_frame(req, "_req", n_req, shown + feeds)
        dense_bud = _dense_frame(bud, "_budget", n_bud, bud_shown + bud_feeds)
        # one gather of each dense table (a single index conversion) rather than one per column
        points = pl.concat([codes, dense_req.select(shown).gather(codes.get_column("_req")),
                            dense_bud.select(bud_shown).gather(codes.get_column("_budget"))], how="horizontal")
        at = {c: pl.lit(dense_req.get_column(c)).gather(pl.col("_req")) for c in feeds} | \
            {c: pl.lit(dense_bud.get_column(c)).gather(pl.col("_budget")) for c in bud_feeds}
    else:
        # in the points' order, as the gathers above (a join's output order is otherwise not guaranteed)
        points = codes.lazy().join(req.lazy().select(["_req", *shown, *feeds]), on="_req",
                                   how="left", maintain_order="left") \
            .join(bud.lazy().select("_budget", *bud_shown, *bud_feeds), on="_budget", how="left",
                  maintain_order="left").collect()

    c_exprs = capacity_metrics(pl.col("budget_bytes"), pl.col("k"), pl.col("block_size"),
                               {n: pl.col(source[n]) for n in r_exprs})
    metrics: dict[str, pl.Expr] = {n: pl.col(source[n]) for n in r_exprs} | c_exprs
    metrics["kv_128k_over_weights"] = pl.col("_kv128k_over_weights")
    if start_check:
        # vLLM 0.33 refuses to start where one request of max_model_len does not fit beside the null block
        # (kvdash/engines/vllm.py: check_one_request_fits, after kv_cache_planning.py's
        # _check_enough_kv_cache_memory): the pool's whole blocks are no more than one request takes.  As in
        # calc, only where max_model_len is given (otherwise the vLLM figures are for max_reserved).
        refused = pl.col("_max_model_len_given") & ~vllm_rules.starts(c_exprs["whole_pool_blocks"],
                                                                      pl.col(source["vllm_blocks_per_request"]))
        metrics["fits"] = pl.col("fits") & ~refused
    metrics |= literal
    gpus = metrics.get("gpus", pl.col("gpus"))
    metrics["paged_requests_per_gpu"] = c_exprs["paged_requests"] / gpus
    metrics["paged_requests_per_node"] = c_exprs["paged_requests"] * pl.col("_node_mult") // pl.col("_node_div")
    # what vLLM runs at once: the requests that fit, at most max_num_seqs (per replica)
    metrics["running_requests"] = pl.min_horizontal(c_exprs["paged_requests"], pl.col("max_num_seqs"))
    metrics["running_requests_per_gpu"] = metrics["running_requests"] / gpus
    # the id: the sum of one hash term per parameter, modulo 2^61 - 1, as 16 hex digits
    acc = (pl.col("_hreq") + pl.col("_hbud")) % _M61
    chunks = _hex4()
    metrics["id"] = pl.format("{}{}{}{}", *[pl.lit(chunks).gather((acc // (1 << (16 * (3 - i)))) % (1 << 16))
                                            for i in range(4)])  # format: 30 % faster than concat_str here
    out = []
    for name, kind, _ in RESULT_COLUMNS:
        expr = metrics.get(name, pl.col(name))
        if kind == "float" and name in c_exprs:  # request-level floats were made finite on the small table
            expr = pl.when(expr.is_finite()).then(expr.cast(pl.Float64)).otherwise(None)
        out.append(expr.alias(name))
    # the feeds as columns of the query: common subexpressions are found among column expressions only (gathers
    # inside the expressions made paged_requests be computed seven times)
    frame = points.lazy().with_columns(e.alias(c) for c, e in at.items()).select(out).collect()
    refusals: list[dict[str, Any]] = []
    if spec.engines:  # one row per engine and point (kvdash.sweep.engines)
        from kvdash.sweep.engines import add_engines

        frame, refusals = add_engines(spec, frame)
    if spec.simulate is not None:
        from kvdash.sweep.simulation import add_simulation

        frame = add_simulation(spec, frame, jobs, use_ray)
    if spec.prefix_cache is not None:
        from kvdash.sweep.simulation import add_prefix_cache

        frame = add_prefix_cache(spec, frame)
    # grid: engine: multiplies the points (one row per engine)
    return Expanded(frame=frame, size_before_exclude=size * max(1, len(spec.engines)), engine_refusals=refusals)

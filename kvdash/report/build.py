"""Reports from sweep results: the context every template shares, charts, and atomic writes.

Everything here is deterministic: no clocks, stable ordering, fixed decimals, SVGs without dates and
with a fixed hash salt.  Two runs over the same grid write byte-identical files.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import polars as pl

from kvdash import __version__
from kvdash.core.calc import rank_shapes
from kvdash.simulate.engine import PAPER_FIG2
from kvdash.sweep.claims import Verdict, judge_all
from kvdash.sweep.evaluate import DEFAULTS, RESULT_COLUMNS, Expanded
from kvdash.sweep.gridfile import GridSpec
from kvdash.sweep.simulation import simulation_columns
from kvdash.units import GiB, gib_text

HEADLINE_ALL = 40  # grids up to this many points are listed whole
HEADLINE_EACH = 10  # else the top and bottom this many by paged requests
HEADLINE_COLS = ("id", "model", "workload", "kv_dtype", "block_size", "tp", "budget_bytes", "bytes_per_token",
                 "whole_pool_blocks", "contiguous_requests", "paged_requests", "request_capacity_ratio")
CHARTS = ("capacity.svg", "ratio.svg", "waste.svg")


def charts_for(spec: GridSpec) -> tuple[str, ...]:
    return CHARTS + (("simulation.svg",) if spec.simulate else ()) + (
        ("simulation-capacity.svg",) if spec.simulate and spec.simulate.rates else ())


def gib(n: int | None) -> str:
    return "-" if n is None else f"{gib_text(n)} GiB"


def num(x: Any, decimals: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        return f"{x:,.{decimals}f}"
    return str(x)


def cell(col: str, value: Any) -> str:
    if col == "budget_bytes":
        return gib(value)
    if col == "request_capacity_ratio":
        return "-" if value is None else f"{value:.3f}x"
    if col.endswith("_percent"):
        return "-" if value is None else f"{value:.2f} %"
    return num(value)


HEADERS = {
    "id": "id", "model": "model", "workload": "workload", "kv_dtype": "KV dtype", "block_size": "block",
    "tp": "TP", "budget_bytes": "KV budget/rank", "bytes_per_token": "KV B/token", "whole_pool_blocks": "pool blocks",
    "contiguous_requests": "contiguous (Max)", "paged_requests": "paged", "request_capacity_ratio": "paged / contig.",
}


def _rows(df: pl.DataFrame, cols: tuple[str, ...]) -> list[list[str]]:
    return [[cell(c, r[c]) for c in cols] for r in df.select(cols).iter_rows(named=True)]


def _sensitivity(df: pl.DataFrame, spec: GridSpec) -> list[dict[str, Any]]:
    """For every dimension with several values: how capacity moves with it."""
    out = []
    dims = [d for d in spec.dimensions if d in df.columns or d in ("budget", "gpu_memory")]
    for dim in dims:
        col = "budget_bytes" if dim in ("budget", "gpu_memory") else dim
        if col not in df.columns:
            continue
        stats = df.group_by(col, maintain_order=True).agg(
            pl.len().alias("n"), pl.col("paged_requests").median().alias("med"),
            pl.col("paged_requests").min().alias("lo"), pl.col("paged_requests").max().alias("hi"),
            pl.col("request_capacity_ratio").min().alias("rlo"), pl.col("request_capacity_ratio").max().alias("rhi"))
        if stats.height < 2:
            continue
        rows = []
        for r in stats.iter_rows(named=True):
            rows.append([cell(col, r[col]), num(r["n"]), num(int(r["med"])),
                         f"{r['lo']:,} to {r['hi']:,}",
                         f"{r['rlo']:.3f}x to {r['rhi']:.3f}x" if r["rlo"] is not None else "-"])
        out.append({"dimension": dim, "rows": rows})
    return out


def _waste(df: pl.DataFrame, spec: GridSpec) -> list[list[str]]:
    stats = df.group_by("workload", maintain_order=True).agg(
        pl.col("reservation_waste_percent").min().alias("rlo"), pl.col("reservation_waste_percent").max().alias("rhi"),
        pl.col("paged_waste_percent").min().alias("plo"), pl.col("paged_waste_percent").max().alias("phi"),
        pl.col("tail_waste_slots").min().alias("tlo"), pl.col("tail_waste_slots").max().alias("thi"))

    def rng(lo: float | None, hi: float | None) -> str:
        if lo is None or hi is None:
            return "-"
        return f"{lo:.2f} %" if lo == hi else f"{lo:.2f} to {hi:.2f} %"

    rows = []
    for r in stats.iter_rows(named=True):
        wl = spec.workloads[r["workload"]]
        rows.append([wl.name, ", ".join(f"{n:,}" for n in wl.lengths), f"{wl.max_reserved:,}", rng(r["rlo"], r["rhi"]),
                     rng(r["plo"], r["phi"]),
                     f"{r['tlo']:,} to {r['thi']:,}" if r["tlo"] != r["thi"] else f"{r['tlo']:,}"])
    return rows


GROUP_COLS = ("id", "model", "workload", "kv_dtype", "block_size", "useful_slots", "allocated_slots",
              "tail_waste_slots", "complete_groups", "contiguous_complete_groups", "offload_tokens",
              "offload_useful_bytes", "offload_allocated_bytes")
GROUP_HEADERS = ["id", "model", "workload", "KV dtype", "block", "useful slots/group", "allocated slots/group",
                 "tail waste slots/group", "whole groups (paged)", "whole groups (contiguous Max)", "offloaded request",
                 "offload: useful bytes", "offload: allocated-block bytes"]


def _groups(df: pl.DataFrame) -> list[list[str]]:
    """Workloads of several requests: the tutorial exercise's figures (at most HEADLINE_ALL rows)."""
    multi = df.filter(pl.col("lengths").cast(pl.Utf8).str.contains(",")).select(GROUP_COLS)
    return _rows(multi.head(HEADLINE_ALL), GROUP_COLS)


def _mermaid(df: pl.DataFrame, limit: int = 12) -> dict[str, Any]:
    """Data for a GitHub-rendered ``xychart-beta``: paged (bars) and contiguous (line) requests of up to
    ``limit`` points (the most paged requests first), labelled by the first 6 characters of their ids."""
    top = df.select("id", "paged_requests", "contiguous_requests").top_k(
        limit, by=["paged_requests", "id"], reverse=[False, True]).sort(["paged_requests", "id"],
                                                                         descending=[True, False])
    return {"labels": ", ".join(f'"{i[:6]}"' for i in top.get_column("id").to_list()),
            "paged": ", ".join(str(v) for v in top.get_column("paged_requests").to_list()),
            "contiguous": ", ".join(str(v) for v in top.get_column("contiguous_requests").to_list()),
            "n": top.height}


def _models(spec: GridSpec) -> list[list[str]]:
    rows = []
    for name, entry in spec.models.items():
        arch = entry.arch
        shape = rank_shapes(arch)[0]
        rows.append([name, arch.source.replace(str(spec.path.parent) + "/", ""), f"{arch.num_layers}", arch.pattern(),
                     f"{arch.num_attention_heads}", f"{arch.kv_heads}", f"{arch.head_dim}", f"{arch.max_context:,}",
                     f"{shape.bytes_per_token:,}",
                     f"{arch.weight_bytes / 1e9:,.1f} GB ({arch.weight_basis})" if arch.weight_bytes else "not given"])
    return rows


def _dimensions(spec: GridSpec, df: pl.DataFrame) -> list[list[str]]:
    rows = []
    set_dims = {}
    for factor in spec.factors:
        linked = len(factor) > 1
        for dim, vals in factor.items():
            set_dims[dim] = (vals, "zip (linked)" if linked else "grid")
    for dim in ("model", "workload", "kv_dtype", "kv_scales", "block_size", "budget", "gpu", "gpu_memory", "gpu_util",
                "util_policy", "weights", "reserve", "tp", "pp", "max_model_len", "max_batched_tokens"):
        if dim in set_dims:
            vals, how = set_dims[dim]
        else:
            vals, how = [DEFAULTS.get(dim)], "default"
        shown = []
        for v in vals:
            if v is None:
                shown.append({"budget": "12 GiB unless a GPU is given", "max_model_len": "the workload's max_reserved",
                              "weights": "the preset's estimate", "gpu": "none (explicit budget)",
                              "gpu_memory": "the GPU preset's"}.get(dim, "none"))
            elif dim in ("budget", "gpu_memory", "weights", "reserve"):
                shown.append(f"{v:,} B ({gib(v)})")
            else:
                shown.append(str(v))
        rows.append([dim, ", ".join(shown), how])
    return rows


def _exit_criteria(df: pl.DataFrame, verdicts: list[Verdict]) -> list[list[str]]:
    """The tutorial's measurable exit criteria, evaluated where this grid allows."""
    tut = df.filter((pl.col("bytes_per_token") == 327_680) & (pl.col("kv_dtype") == "bf16")
                    & (pl.col("budget_bytes") == 12 * GiB) & (pl.col("block_size") == 16) & (pl.col("tp") == 1))
    snap = tut.filter(pl.col("lengths").cast(pl.Utf8) == "825")
    rows = [["architecture, KV heads, dtype, budget, block size and lengths are explicit", "met",
             "the Assumptions section lists every input of every point"]]

    def check(label: str, frame: pl.DataFrame, cond: Callable[[dict[str, Any]], bool], shown: str) -> None:
        if frame.height == 0:
            rows.append([label, "not evaluable", "the grid has no point of the tutorial's configuration"])
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
    rows.append(["block-level paging is distinguished from prefix-cache matching and retention", "met",
                 "prefix figures assume the prefix blocks are already shared; matching, retention and eviction "
                 "are engine policies outside this arithmetic"])
    dtype = pl.col("kv_dtype").cast(pl.Utf8)
    has_fp8 = df.filter(dtype.str.starts_with("fp8") | (dtype == "int8")).height > 0
    rows.append(["FP8 capacity is marked idealized", "met" if has_fp8 else "not evaluable",
                 "every fp8/int8 point without per-token scales is labelled idealized" if has_fp8 else
                 "no fp8 point in this grid"])
    rows.append(["offload and tiered-KV evaluations include latency, bandwidth and per-tier hit rates",
                 "not evaluable", "capacity arithmetic gives offload sizes only (offload_useful_bytes, "
                 "offload_allocated_bytes); transfer latency needs a benchmark"])
    return rows


def _assumption_lines(df: pl.DataFrame) -> list[str]:
    lines = [
        "Bytes, slots and blocks are exact integers; GiB = 2^30 bytes, GB = 10^9 bytes.",
        "Budgets are per rank. A derived budget is floor(GPU total x utilization) - weights/rank - reserve (vLLM) "
        "or floor((total - weights/rank - reserve) x utilization) (TensorRT-LLM); the tightest rank decides.",
        "Capacities are instantaneous snapshots: every request of a workload at its stated length, whole groups "
        "only, no growth headroom, no preemption.",
        "Contiguous Max reserves max_reserved tokens per request; Pow2 the next power of two of the final length "
        "(capped at max_reserved); Oracle the exact final length.",
        "Paged pools follow vLLM v1: one block holds block_size tokens for every layer of a KV-cache group; "
        "sliding layers hold at most ceil((W-1)/B)+1 blocks.",
        "A capacity ratio is not a throughput ratio.",
    ]
    if df.filter(pl.col("kv_dtype").cast(pl.Utf8).is_in(["fp8", "fp8_e4m3", "fp8_e5m2", "int8"])
                 & (pl.col("kv_scales").cast(pl.Utf8) == "tensor")).height:
        lines.append("FP8/int8 points are idealized: 1 byte per element, no per-token scales, alignment or "
                     "accuracy cost.")
    if df.filter(~pl.col("fits")).height:
        lines.append("Points whose weights and reserve leave no KV memory are kept with capacity 0 (fits = no).")
    return lines




def _simulation(spec: GridSpec, df: pl.DataFrame) -> dict[str, Any] | None:
    """Medians over the grid of the simulated shares, per policy, beside the paper's Figure 2, what each
    share counts and the gaps' causes; the capacity sweep when the section has ``rates``."""
    if spec.simulate is None:
        return None
    from kvdash.simulate.capacity import LABEL
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
                     else f"{med_rate[head] / med_rate[pol]:.2f}x"] for pol in sim.policies]
        capacity = {"rows": cap_rows, "head": head or "-", "bound": f"{sim.latency_bound:g}", "label": LABEL,
                    "rates": f"{len(sim.rates)} rates from {sim.rates[0]:.4g} to {sim.rates[-1]:.4g} requests per step"}
    return {"rows": rows, "setup": setup, "meaning": meaning, "notes": notes, "capacity": capacity}


def build_context(spec: GridSpec, expanded: Expanded) -> dict[str, Any]:
    df = expanded.frame
    verdicts = judge_all(df, spec.claims)
    n = df.height
    if n <= HEADLINE_ALL:
        headline = {"all": _rows(df, HEADLINE_COLS), "top": [], "bottom": []}
    else:
        narrow = df.select(HEADLINE_COLS)
        top = narrow.top_k(HEADLINE_EACH, by=["paged_requests", "id"], reverse=[False, True]) \
            .sort(["paged_requests", "id"], descending=[True, False])
        bottom = narrow.bottom_k(HEADLINE_EACH, by=["paged_requests", "id"], reverse=[False, True]) \
            .sort(["paged_requests", "id"], descending=[True, False])
        headline = {"all": [], "top": _rows(top, HEADLINE_COLS), "bottom": _rows(bottom, HEADLINE_COLS)}
    return {
        "title": spec.title,
        "description": spec.description,
        "version": __version__,
        "grid_name": spec.path.name,
        "grid_sha256": hashlib.sha256(spec.text.encode()).hexdigest(),
        "points": n,
        "points_before_exclude": expanded.size_before_exclude,
        "assumptions": _assumption_lines(df),
        "models": _models(spec),
        "workloads": [[w.name, ", ".join(f"{x:,}" for x in w.lengths), ", ".join(f"{x:,}" for x in w.finals),
                       f"{w.max_reserved:,}", f"{w.prefix:,}", w.description] for w in spec.workloads.values()],
        "dimensions": _dimensions(spec, df),
        "headline_headers": [HEADERS[c] for c in HEADLINE_COLS],
        "headline": headline,
        "groups": _groups(df),
        "mermaid": _mermaid(df),
        "group_headers": GROUP_HEADERS,
        "sensitivity": _sensitivity(df, spec),
        "waste": _waste(df, spec),
        "verdicts": verdicts,
        "exit_criteria": _exit_criteria(df, verdicts),
        "charts": charts_for(spec),
        "columns": RESULT_COLUMNS + (simulation_columns(spec) if spec.simulate else []),
        "simulation": _simulation(spec, df),
    }


# --- charts ------------------------------------------------------------------------------------

def _plt() -> Any:
    import matplotlib

    matplotlib.use("svg")
    import matplotlib.pyplot as plt

    plt.rcdefaults()
    plt.rcParams.update({"svg.hashsalt": "kvdash", "svg.fonttype": "none", "font.family": "DejaVu Sans",
                         "font.size": 9, "axes.spines.top": False, "axes.spines.right": False})
    return plt


def _save(fig: Any, path: Path) -> None:
    fig.savefig(path, format="svg", metadata={"Date": None, "Creator": f"kvdash {__version__}"},
                bbox_inches="tight")


def _finish_share_chart(fig: Any, ax: Any, labels: list[str], xlabel: str, legend_columns: int, path: Path) -> None:
    """Axes, legend and file of a horizontal 0-100 % share chart (first label on top)."""
    import matplotlib.pyplot as plt

    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel(xlabel)
    ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=legend_columns, frameon=False, fontsize=8)
    _save(fig, path)
    plt.close(fig)


def _label(r: dict[str, Any]) -> str:
    return f"{r['model']} {r['kv_dtype']} B{r['block_size']} tp{r['tp']} {r['workload']}"


def write_simulation_chart(spec: GridSpec, df: pl.DataFrame, out: Path) -> None:
    """The paper's Figure 2 layout: one stacked bar per policy (median over the grid), the paper's beside."""
    from kvdash.sweep.simulation import SHARE_COLUMNS, column

    assert spec.simulate is not None
    plt = _plt()
    colors = ("#2f855a", "#d69e2e", "#c05621", "#9b2c2c", "#cbd5e0")
    labels, bars = [], []
    for pol in spec.simulate.policies:
        med = df.select([pl.col(column(pol, short)).median() for _, short in SHARE_COLUMNS]).row(0)
        labels.append(f"{pol} (simulated)")
        bars.append([0.0 if v is None else float(v) for v in med])
        if pol in PAPER_FIG2:
            paper = PAPER_FIG2[pol]
            rest = 100 - sum(v or 0 for v in paper)
            labels.append(f"{pol} (paper Fig. 2)")
            bars.append([paper[0], paper[1] or 0.0, paper[2] or 0.0, paper[3] or 0.0, max(rest, 0.0)])
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(labels) + 1.4))
    left = [0.0] * len(labels)
    names = ("token states", "reservation", "internal frag.", "external frag. (& other)", "free")
    for k in range(5):
        vals = [b[k] for b in bars]
        ax.barh(range(len(labels)), vals, left=left, color=colors[k], label=names[k])
        left = [a + b for a, b in zip(left, vals, strict=True)]
    _finish_share_chart(fig, ax, labels, "share of the KV pool over time, %", 3, out / "simulation.svg")


def write_capacity_chart(spec: GridSpec, df: pl.DataFrame, out: Path) -> None:
    """Normalized latency against request rate per policy (median over the grid), the bound dashed:
    the shape of the paper's Figure 12, as scheduling capacity under the simulator's assumptions."""
    from kvdash.sweep.simulation import column

    sim = spec.simulate
    assert sim is not None and sim.rates
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for pol in sim.policies:
        ys = [df.select(pl.col(column(pol, f"latency_r{k}")).median()).item() for k in range(len(sim.rates))]
        ax.plot(sim.rates, [float("nan") if y is None else y for y in ys], marker="o", markersize=3, label=pol)
    ax.axhline(sim.latency_bound, color="#718096", linestyle="--", linewidth=1,
               label=f"bound {sim.latency_bound:g}")
    ax.set_yscale("log")
    ax.set_xlabel("request rate, requests per step (simulated)")
    ax.set_ylabel("normalized latency, steps per output token")
    ax.set_title("scheduling capacity under the simulator's assumptions (not GPU throughput)", fontsize=9)
    ax.legend(frameon=False, fontsize=8)
    _save(fig, out / "simulation-capacity.svg")
    plt.close(fig)


def write_charts(df: pl.DataFrame, out: Path) -> None:
    plt = _plt()
    # 1. paged vs contiguous requests for the headline points
    narrow = df.select("id", "model", "kv_dtype", "block_size", "tp", "workload", "paged_requests",
                       "contiguous_requests")
    if narrow.height > 24:
        order = {"by": ["paged_requests", "id"], "descending": [True, False]}
        narrow = pl.concat([narrow.top_k(12, by=["paged_requests", "id"], reverse=[False, True]).sort(**order),
                            narrow.bottom_k(12, by=["paged_requests", "id"], reverse=[False, True]).sort(**order)])
    ordered = narrow
    rows = list(ordered.iter_rows(named=True))
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(rows) + 1.2))
    ys = list(range(len(rows)))
    ax.barh([y + 0.2 for y in ys], [r["paged_requests"] for r in rows], height=0.4, label="paged", color="#2b6cb0")
    ax.barh([y - 0.2 for y in ys], [r["contiguous_requests"] for r in rows], height=0.4, label="contiguous (Max)",
            color="#c05621")
    ax.set_yticks(ys, [_label(r) for r in rows])
    ax.invert_yaxis()
    values = [v for r in rows for v in (r["paged_requests"], r["contiguous_requests"]) if v and v > 0]
    if values and max(values) / min(values) > 100:
        ax.set_xscale("log")
    ax.set_xlabel("requests that fit at once (snapshot)" + (", log scale" if ax.get_xscale() == "log" else ""))
    ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=2, frameon=False)
    _save(fig, out / "capacity.svg")
    plt.close(fig)

    # 2. capacity ratio per model, beside the "universal 4-5x" band
    # distinct ratios per model only (to 3 decimals): a large grid repeats them many times
    ratios = df.select("model", pl.col("request_capacity_ratio").round(3).alias("r")).drop_nulls() \
        .unique().sort(["model", "r"])
    models = df.get_column("model").unique(maintain_order=True).to_list()
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(models) + 1.2))
    ax.axvspan(4, 5, color="#e2e8f0", label='claimed "universal 4-5x"')
    for i, m in enumerate(models):
        vals = ratios.filter(pl.col("model") == m).get_column("r").to_list()
        ax.scatter(vals, [i] * len(vals), s=14, color="#2b6cb0", zorder=3)
    ax.set_yticks(range(len(models)), models)
    ax.invert_yaxis()
    ax.set_xlabel("paged / contiguous (Max) requests: a capacity ratio, not throughput")
    ax.set_xlim(left=0)
    ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), frameon=False)
    _save(fig, out / "ratio.svg")
    plt.close(fig)

    # 3. where the memory of one workload group goes: contiguous Max vs paged (median over points)
    medians = df.group_by("workload", maintain_order=True).agg(
        pl.col("reservation_waste_percent").median().alias("res"), pl.col("paged_waste_percent").median().alias("pag"))
    names = medians.get_column("workload").to_list()
    fig, ax = plt.subplots(figsize=(8, 0.7 * len(names) + 1.2))
    labels, useful, waste, kinds = [], [], [], []
    for row in medians.iter_rows(named=True):
        name = row["workload"]
        for kind, value in (("contiguous Max", row["res"]), ("paged", row["pag"])):
            w = float(value) if value is not None else 0.0
            labels.append(f"{name}: {kind}")
            useful.append(100 - w)
            waste.append(w)
            kinds.append(kind)
    ys = list(range(len(labels)))
    ax.barh(ys, useful, color="#2f855a", label="token state")
    ax.barh(ys, waste, left=useful, color=["#c05621" if k == "contiguous Max" else "#d69e2e" for k in kinds],
            label="reservation (contiguous) / tail (paged) waste")
    _finish_share_chart(fig, ax, labels, "share of the memory a workload group holds, % (median over the grid)", 2,
                        out / "waste.svg")


# --- writing -----------------------------------------------------------------------------------

def _env(autoescape: bool) -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(
            lambda name: (resources.files("kvdash.templates") / name).read_text(encoding="utf-8")),
        autoescape=autoescape, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    from kvdash.report.markdown import md, md_code

    env.filters["md"] = md  # every user string in report.md passes one of these two
    env.filters["md_code"] = md_code
    return env


def render_markdown(ctx: dict[str, Any]) -> str:
    return str(_env(False).get_template("report.md.j2").render(**ctx))


def render_html(ctx: dict[str, Any], svgs: dict[str, str]) -> str:
    return str(_env(True).get_template("report.html.j2").render(**ctx, svgs=svgs))


def write_csv(df: pl.DataFrame, path: Path) -> None:
    df.write_csv(path, float_precision=6, null_value="")


def write_report(spec: GridSpec, expanded: Expanded, out: Path, parquet: bool = False,
                 progress: Callable[[str], None] | None = None) -> list[Path]:
    """Write every output into a fresh folder beside ``out``, then swap it into place."""
    step = progress or (lambda _msg: None)
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        from concurrent.futures import ThreadPoolExecutor

        step("results.csv")
        with ThreadPoolExecutor(max_workers=1) as pool:  # polars writes while matplotlib draws
            csv = pool.submit(write_csv, expanded.frame, tmp / "results.csv")
            if parquet:
                expanded.frame.write_parquet(tmp / "results.parquet", statistics=False)
            step("charts")
            write_charts(expanded.frame, tmp)
            if spec.simulate is not None:
                write_simulation_chart(spec, expanded.frame, tmp)
                if spec.simulate.rates:
                    write_capacity_chart(spec, expanded.frame, tmp)
            ctx = build_context(spec, expanded)
            csv.result()
        step("report.md")
        (tmp / "report.md").write_text(render_markdown(ctx), encoding="utf-8")
        svgs = {name: _strip_xml_header((tmp / name).read_text(encoding="utf-8")) for name in charts_for(spec)}
        step("report.html")
        (tmp / "report.html").write_text(render_html(ctx, svgs), encoding="utf-8")
        os.chmod(tmp, 0o755)
        old = None
        if out.exists():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            os.replace(out, old)
        os.replace(tmp, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return sorted(out.iterdir())


def _strip_xml_header(svg: str) -> str:
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg

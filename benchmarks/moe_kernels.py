"""Fit the fused-MoE kernel model of kvdash's step time on aiconfigurator's measured MoE kernels (issue 28).

The step model's routed-expert terms were a roofline at the constants fitted on dense rows (``c_mem``, ``c_flop``),
and the dense calibration rows cannot say how fast vLLM's fused-MoE kernels run: the validation rows showed MoE
decode 8-48 % and MoE prefill 30-50 % slower than that roofline.  aiconfigurator 0.12 ships **kernel
measurements** of vLLM's MoE layer (``systems/data/<gpu>/moe/vllm/0.24.0/moe_perf.parquet``: one fused-MoE layer
timed alone per GPU, weight format, shape, tensor-parallel split and token count; Apache-2.0), not serving runs.
This script fits, per GPU and expert weight format, ::

    t_layer = a + b x (expert weights touched + activations) / HBM bandwidth + c x expert FLOPs / dense FLOP/s

with ``kvdash.core.steptime.moe_layer_terms`` computing the two roofline terms exactly as the step model does,
by non-negative least squares on relative error, and writes ``kvdash/data/moe_kernels.json``.  Chosen before
looking at any serving row: vLLM 0.24.0's tables (the newest vLLM aiconfigurator measured on all four of H100,
H200, B200, B300), the skewed routing ``power_law_1.01`` (real routers are not balanced), the fastest kernel of
each point (the backend vLLM's oracle would pick; for gpt-oss's MXFP4, gpt-oss's own kernels), experts split by
tensor parallelism only (``moe_ep_size`` 1, vLLM's default without ``--enable-expert-parallel``), and the shapes
of the four validation models (gpt-oss-120b, MiniMax-M2.5, Kimi-K2.5, Qwen3-235B) left out of the fit wherever 20
or more other points remain (their error is reported as held out).

Usage (polars reads the parquet files; aiconfigurator installed in a side venv, never a dependency)::

    python3 -m venv /work/aic-venv && /work/aic-venv/bin/pip install aiconfigurator==0.12.0
    .venv/bin/python benchmarks/moe_kernels.py --aic-data \\
        /work/aic-venv/lib/python3.*/site-packages/aiconfigurator_core/systems/data [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from steptime_fit import nnls  # noqa: E402

from kvdash.core.steptime import WEIGHT_BYTES, ModelCompute, expert_act_bytes, gpu_perf, moe_layer_terms  # noqa: E402

OUT = ROOT / "kvdash" / "data" / "moe_kernels.json"
VERSION = "0.24.0"
DISTRIBUTION = "power_law_1.01"
# aiconfigurator's system folder -> kvdash's GPU preset
GPUS = {"h100_sxm": "h100-80gb", "h200_sxm": "h200", "b200_sxm": "b200", "b300_sxm": "b300"}
# aiconfigurator's moe_dtype -> kvdash's expert weight format and the GEMM rate the step model gives it
FORMATS = {"bfloat16": ("bf16", "bf16"), "fp8_block": ("fp8", "fp8"), "nvfp4": ("nvfp4", "fp4"),
           "int4_wo": ("int4_wo", "bf16"), "w4a16_mxfp4": ("mxfp4", "bf16")}
# (hidden, moe intermediate, experts, top-k) of the validation models: left out of the fit where possible
VALIDATION_SHAPES = {(2880, 2880, 128, 4): "gpt-oss-120b", (3072, 1536, 256, 8): "MiniMax-M2.5",
                     (7168, 2048, 384, 8): "Kimi-K2.5", (4096, 1536, 128, 8): "Qwen3-235B-A22B"}
MIN_POINTS = 20
# kernels measured for other model classes left out of a format: kvdash's `mxfp4` is gpt-oss's checkpoint, which
# vLLM 0.33 runs with gpt-oss's own backends (`_get_priority_backends_for_gpt_oss`,
# vllm/model_executor/layers/fused_moe/oracle/mxfp4.py: Triton matmul_ogs on Hopper, FlashInfer TRT-LLM MXFP4 x bf16
# on SM100), measured by aiconfigurator as the `gptossmxfp4` kernels; its other MXFP4 table is a Marlin W4A4 kernel
KERNEL_FILTER = {"w4a16_mxfp4": "gptossmxfp4"}


def one_layer(h: int, inter: int, experts: int, k: int, tp: int, fmt: str, rate: str) -> ModelCompute:
    """A ModelCompute holding one MoE layer of this shape on one of ``tp`` ranks (experts split by TP)."""
    params = 3 * h * inter
    return ModelCompute(
        name="moe", tp=tp, layers=1, hidden=h, dense_weight_bytes=0.0, dense_params=0.0, moe_layers=1,
        experts=experts, top_k=k, expert_bytes=params * WEIGHT_BYTES[fmt] / tp, expert_params=params / tp,
        gemm=rate, attention=(), kv_full_bytes=0, kv_window_bytes=0, window=0, state_bytes=0,
        act_bytes=expert_act_bytes(h, k, params, tp), expert_format=fmt, dp=1)  # one rank's tokens


def points(base: Path, folder: str, key: str, source: str = f"vllm/{VERSION}",
           formats: dict[str, tuple[str, str]] | None = None) -> pl.DataFrame | None:
    """Every measured point of ``source``'s table on this GPU (``formats``: aiconfigurator's moe_dtype -> kvdash's
    expert format and GEMM rate, default FORMATS), the fastest kernel of each, with the roofline terms kvdash's
    step model computes for it and the validation model whose shape it is ("" for none)."""
    formats = FORMATS if formats is None else formats
    path = base / folder / "moe" / source / "moe_perf.parquet"
    if not path.is_file():
        return None
    d = pl.read_parquet(path).filter(pl.col("moe_dtype").is_in(list(formats)) & (pl.col("distribution") == DISTRIBUTION)
                                     & (pl.col("moe_ep_size") == 1))
    if not d.height:
        return None
    for dtype, kernel in KERNEL_FILTER.items():
        d = d.filter((pl.col("moe_dtype") != dtype) | pl.col("kernel_source").str.contains(kernel))
    shape = ["moe_dtype", "hidden_size", "inter_size", "num_experts", "topk", "moe_tp_size", "num_tokens"]
    d = d.group_by(shape).agg(pl.col("latency").min()).sort(shape)  # the fastest kernel of each point
    gpu = gpu_perf(key)
    mem, cmp = [], []
    for r in d.iter_rows(named=True):
        fmt, rate = formats[r["moe_dtype"]]
        mc = one_layer(r["hidden_size"], r["inter_size"], r["num_experts"], r["topk"], r["moe_tp_size"], fmt, rate)
        m, c = moe_layer_terms(mc, gpu, r["num_tokens"])
        mem.append(m)
        cmp.append(c)
    val = [VALIDATION_SHAPES.get((h, i, e, k), "") for h, i, e, k in
           d.select("hidden_size", "inter_size", "num_experts", "topk").iter_rows()]
    return d.with_columns(mem=pl.Series(mem), cmp=pl.Series(cmp), seconds=pl.col("latency") / 1e3,
                          held_out=pl.Series(val))


def fit(d: pl.DataFrame) -> tuple[np.ndarray, bool]:
    """The coefficients, fitted on the shapes other than the validation models' where MIN_POINTS remain (True),
    else on every shape (False)."""
    train = d.filter(pl.col("held_out") == "")
    held_out = train.height >= MIN_POINTS
    if not held_out:
        train = d
    y = train["seconds"].to_numpy()
    A = np.stack([np.ones(train.height), train["mem"].to_numpy(), train["cmp"].to_numpy()], 1) / y[:, None]
    return nnls(A, np.ones(train.height)), held_out


def mape(d: pl.DataFrame, coef: np.ndarray) -> float | None:
    if not d.height:
        return None
    p = coef[0] + coef[1] * d["mem"].to_numpy() + coef[2] * d["cmp"].to_numpy()
    y = d["seconds"].to_numpy()
    return round(float(np.mean(np.abs(p - y) / y) * 100), 1)


def build(base: Path) -> dict:
    table: dict[str, dict] = {}
    for folder, key in GPUS.items():
        d = points(base, folder, key)
        if d is None:
            continue
        for dtype, (fmt, _) in FORMATS.items():
            sub = d.filter(pl.col("moe_dtype") == dtype)
            if sub.height < MIN_POINTS:
                continue
            coef, held_out = fit(sub)
            held = sub.filter(pl.col("held_out") != "")
            table.setdefault(key, {})[fmt] = {
                "a_s": float(f"{coef[0]:.4g}"), "b": float(f"{coef[1]:.4g}"), "c": float(f"{coef[2]:.4g}"),
                "points": sub.height,
                "fit": ("fitted on shapes other than the validation models'" if held_out else
                        "fitted on every shape measured (only the validation models' shapes are)"),
                "fit_mape_pct": mape(sub.filter(pl.col("held_out") == "") if held_out else sub, coef),
                "held_out_mape_pct": mape(held, coef) if held_out else None,
                "held_out_shapes": sorted(set(held["held_out"].to_list())) if held_out else [],
            }
    return {
        "source": (f"aiconfigurator 0.12.0 (github.com/ai-dynamo/aiconfigurator, Apache-2.0) "
                   f"systems/data/<gpu>/moe/vllm/{VERSION}/moe_perf.parquet: vLLM {VERSION}'s fused-MoE layer timed "
                   f"alone; routing {DISTRIBUTION}, experts split by tensor parallelism only, the fastest kernel of "
                   "each point"),
        "model": ("t_layer = a_s + b x memory roofline s + c x compute roofline s "
                  "(kvdash.core.steptime.moe_layer_terms)"),
        "written_by": "benchmarks/moe_kernels.py",
        "gpus": table,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--aic-data", required=True, type=Path, help="aiconfigurator_core/systems/data")
    ap.add_argument("--check", action="store_true", help="compare with the shipped table instead of writing it")
    args = ap.parse_args(argv)
    doc = build(args.aic_data)
    text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    for key, fmts in doc["gpus"].items():
        for fmt, e in fmts.items():
            print(f"{key:10s} {fmt:8s} a {e['a_s'] * 1e6:6.1f} us  b {e['b']:5.2f}  c {e['c']:5.2f}  "
                  f"points {e['points']:5d}  fit MAPE {e['fit_mape_pct']} %  held out {e['held_out_mape_pct']} % "
                  f"{','.join(e['held_out_shapes'])}")
    if args.check:
        same = OUT.is_file() and OUT.read_text(encoding="utf-8") == text
        print("kvdash/data/moe_kernels.json is " + ("current" if same else "NOT current"))
        return 0 if same else 1
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

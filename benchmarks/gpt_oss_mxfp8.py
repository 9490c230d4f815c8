"""What if the gpt-oss-120b B200 runs used MXFP8 activations?  A what-if beside the time model (issue 28), not a
change to it.

kvdash runs gpt-oss's MXFP4 experts with bf16 activations on Blackwell, as vLLM picks by default
(``_get_priority_backends_for_gpt_oss`` in vLLM 0.33's ``fused_moe/oracle/mxfp4.py``: FlashInfer TRT-LLM MXFP4 x
bf16 first; ``get_mxfp4_backend`` in the late-2025 ``quantization/mxfp4.py``: bf16 on SM100 unless
``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1``), at aiconfigurator's measurement of that kernel.  The measured B200
rows (vLLM 0.15.1) are over-predicted by about half, and that kernel alone takes longer than some of their whole
steps (TP 1, 128 users: 36 layers x 0.39 ms against a measured 13.45 ms TPOT).  Which backend the runs used is not
in the data.  aiconfigurator also measured FlashInfer's TRT-LLM MXFP4 x MXFP8 kernel (vLLM: the environment
variable above, or ``--moe-backend flashinfer_trtllm_afp8`` in 0.33), in its SGLang 0.5.14 tables
(``systems/data/<gpu>/moe/sglang/0.5.14/moe_perf.parquet``, ``moe_dtype`` ``w4a8_mxfp4_mxfp8``).  This script
fits that kernel the way ``benchmarks/moe_kernels.py`` fits the others (power-law routing, experts split by TP,
the fastest kernel of each point, every shape measured but gpt-oss-120b's, which is held out),
simulates the gpt-oss rows of the GPUs it covers again with it, and prints the error beside the default's.
It changes nothing kvdash ships.

Usage (aiconfigurator in a side venv, never a dependency)::

    .venv/bin/python benchmarks/gpt_oss_mxfp8.py --cache /tmp/steptime_cache.json \\
        --aic-data /work/aic-venv/lib/python3.*/site-packages/aiconfigurator_core/systems/data
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import moe_kernels as mk  # noqa: E402
import steptime_fit as sf  # noqa: E402

from kvdash.core import steptime  # noqa: E402
from kvdash.core.steptime import MoeKernel  # noqa: E402

SOURCE = "sglang/0.5.14"
FORMATS = {"w4a8_mxfp4_mxfp8": ("mxfp4", "fp8")}  # MXFP4 weights, MXFP8 activations: the GEMMs at the fp8 rate


def fit_kernel(d: pl.DataFrame) -> tuple[np.ndarray, float | None, float | None]:
    """The kernel fitted as moe_kernels.py fits every other (:func:`moe_kernels.fit`: the validation models' shapes,
    here gpt-oss-120b's, held out); (coefficients, fit MAPE %, MAPE % on the held-out shapes)."""
    coef, held_out = mk.fit(d)
    if not held_out:
        return coef, mk.mape(d, coef), None
    return coef, mk.mape(d.filter(pl.col("held_out") == ""), coef), mk.mape(d.filter(pl.col("held_out") != ""), coef)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--aic-data", required=True, type=Path, help="aiconfigurator's systems/data folder")
    ap.add_argument("--cache", default="", help="steptime_fit.py's --cache file (its simulations of every row)")
    ap.add_argument("--spread", type=float, default=0.4, help="the phase spread steptime_fit.py chose")
    ap.add_argument("--in-step", type=float, default=1 / 6, help="the share in step steptime_fit.py chose")
    ap.add_argument("--requests-per-user", type=int, default=10)
    args = ap.parse_args()
    sf.check_shares(ap, args.spread, args.in_step)
    sf.check_counts(ap, args.requests_per_user, 1)
    if not args.aic_data.is_dir():
        print(f"--aic-data: {args.aic_data} is not a folder (aiconfigurator's systems/data)", file=sys.stderr)
        return 2
    kernels: dict[str, MoeKernel] = {}
    print(f"FlashInfer TRT-LLM MXFP4 x MXFP8 ({', '.join(FORMATS)}, aiconfigurator {SOURCE}), fitted on every shape "
          "but gpt-oss-120b's:")
    for folder, key in mk.GPUS.items():
        d = mk.points(args.aic_data, folder, key, SOURCE, FORMATS)
        if d is None:
            continue
        coef, fit_mape, held_mape = fit_kernel(d)
        kernels[key] = MoeKernel(float(coef[0]), float(coef[1]), float(coef[2]), d.height, f"aiconfigurator {SOURCE}")
        print(f"  {key}: a_s {coef[0] * 1e6:.1f} us, b {coef[1]:.3f}, c {coef[2]:.3f}; {d.height} points, "
              f"fit MAPE {fit_mape} %, gpt-oss-120b's shape held out {held_mape} %")
    if not kernels:
        print(f"--aic-data: no {', '.join(FORMATS)} measurements under {args.aic_data}/*/moe/{SOURCE}", file=sys.stderr)
        return 2
    rows = list(csv.DictReader((sf.DATA / "silicon_vllm_agg.csv").open()))
    by_id = {r["id"]: r for r in rows}
    gpus = {k for k, v in sf.GPUS.items() if v in kernels}
    whatif = [r for r in rows if r["model_path"] == "openai/gpt-oss-120b" and r["system"] in gpus]
    base = sf.simulations(rows, args.requests_per_user, args.spread, args.cache)
    default = steptime.moe_kernel
    try:  # the step model reads kvdash.core.steptime.moe_kernel at each step
        steptime.moe_kernel = lambda gpu_key, fmt: (kernels[gpu_key] if fmt == "mxfp4" and gpu_key in kernels
                                                    else default(gpu_key, fmt))
        new, _ = sf.simulate_all(whatif, args.requests_per_user, args.spread, 1)
    finally:
        steptime.moe_kernel = default
    results = {}
    for label, sims in (("bf16 activations (kvdash)", dict(base)), ("MXFP8 activations (what-if)", {**base, **new})):
        sims = {i: dict(s) for i, s in sims.items()}
        coef = sf.fit_on_calibration(sims, by_id, args.in_step)  # unchanged: the calibration rows have no experts
        val = [i for i in sims if by_id[i]["model_path"] in sf.VALIDATION]
        results[label] = (sf.errors([r["id"] for r in whatif if r["id"] in sims], by_id, sims, coef),
                          sf.errors(val, by_id, sims, coef), sf.cliff_counts(val, by_id, sims, coef))
    systems = ", ".join(sorted({r["system"] for r in whatif}))
    print(f"\n{len(whatif)} gpt-oss-120b rows ({systems}) simulated again (phase spread "
          f"{args.spread:g}, {args.in_step:.3g} in step):\n")
    print("| experts run with | gpt-oss TPOT MAPE % | TPOT bias % | gpt-oss TTFT MAPE % | TTFT bias % | "
          "validation TPOT MAPE % | validation TTFT MAPE % | cliffs predicted (false) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, (g, v, c) in results.items():
        print(f"| {label} | {g[0]:.1f} | {g[1]:+.1f} | {g[2]:.1f} | {g[3]:+.1f} | {v[0]:.1f} | {v[2]:.1f} | "
              f"{c[1]} of {c[0]} ({c[2]}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

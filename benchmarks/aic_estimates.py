"""aiconfigurator 0.12's estimates of the measured vLLM rows, for ``benchmarks/steptime_fit.py`` to compare.

Runs in a side virtual environment holding aiconfigurator (never a kvdash dependency)::

    python3 -m venv /work/aic-venv && /work/aic-venv/bin/pip install aiconfigurator==0.12.0
    /work/aic-venv/bin/python benchmarks/aic_estimates.py [--every N] [--out benchmarks/results/aic_estimates.csv]

For each row of ``tests/data/measured/silicon_vllm_agg.csv`` (every N-th row of each model, GPU and
parallelism group; default every row) it calls ``aiconfigurator.cli.api.cli_estimate`` in aggregated
mode with the row's model, system, ISL/OSL, concurrency, parallelism and quantization (KV cache fp8 where
the row's precision is fp8, as kvdash's script assumes), on aiconfigurator's default vLLM database, and
writes ``id,aic_ttft_ms,aic_tpot_ms,error``.  Rows it cannot estimate are written with the error.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import logging
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROWS = ROOT / "tests/data/measured/silicon_vllm_agg.csv"
# the measured rows' model ids -> the ids aiconfigurator ships configs for
MODEL_IDS = {"meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
             "nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama/Meta-Llama-3.1-8B"}
GEMM = {"": "bfloat16"}
MOE = {"": "bfloat16"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--every", type=int, default=1)
    ap.add_argument("--models", default="", help="comma list of model_path values (default: every model)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/aic_estimates.csv"))
    args = ap.parse_args()
    from aiconfigurator.cli.api import cli_estimate

    logging.disable(logging.WARNING)
    rows = list(csv.DictReader(ROWS.open()))
    groups: dict[tuple[str, ...], int] = defaultdict(int)
    done: set[str] = set()
    out = Path(args.out)
    if out.exists():
        done = {r["id"] for r in csv.DictReader(out.open())}
    new = not out.exists()
    with out.open("a", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        if new:
            w.writerow(["id", "aic_ttft_ms", "aic_tpot_ms", "error"])
        wanted = {m for m in args.models.split(",") if m}
        for r in rows:
            if wanted and r["model_path"] not in wanted:
                continue
            key = (r["model_path"], r["system"], r["tp_size"], r["gemm_quant_mode"], r["moe_ep_size"])
            groups[key] += 1
            if (groups[key] - 1) % args.every or r["id"] in done:
                continue
            t0 = time.time()
            kw = dict(mode="agg", backend_name="vllm", isl=int(r["isl"]), osl=int(r["osl"]),
                      batch_size=int(r["batch_size"]), tp_size=int(r["tp_size"]), pp_size=int(r["pp_size"] or 1),
                      attention_dp_size=int(r["attention_dp_size"] or 1),
                      moe_tp_size=int(r["moe_tp_size"]) if r["moe_tp_size"] not in ("", "0") else None,
                      moe_ep_size=int(r["moe_ep_size"]) if r["moe_ep_size"] not in ("", "0") else None,
                      gemm_quant_mode=GEMM.get(r["gemm_quant_mode"], r["gemm_quant_mode"]),
                      moe_quant_mode=MOE.get(r["moe_quant_mode"], r["moe_quant_mode"]),
                      kvcache_quant_mode="fp8" if r["precision"] == "fp8" else "bfloat16")
            model = MODEL_IDS.get(r["model_path"], r["model_path"])
            err = ""
            ttft = tpot = ""
            for attempt in (kw, {k: v for k, v in kw.items() if not k.endswith("quant_mode")}):
                try:
                    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                        res = cli_estimate(model, r["system"], **attempt)
                    ttft, tpot, err = f"{res.ttft:.3f}", f"{res.tpot:.3f}", ""
                    break
                except Exception as exc:  # noqa: BLE001 - recorded per row
                    err = f"{type(exc).__name__}: {str(exc)[:120]}".replace("\n", " ")
            w.writerow([r["id"], ttft, tpot, err])
            fh.flush()
            print(f"{r['id']}: {ttft} {tpot} {err[:60]} ({time.time() - t0:.1f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()

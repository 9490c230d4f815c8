"""What a per-step roofline would do to the time model's error (issue 28): an experiment, not the shipped model.

Run: python benchmarks/steptime_roofline.py [--requests-per-user 10] [--bins 400]

The shipped step time adds the memory and compute terms, ``c_mem x mem + c_flop x comp``; a GEMM whose
weights stream under its compute costs about the larger of the two, ``max(c_mem x mem, c_flop x comp)``.
This script asks, before anyone builds that into the simulators, how much it would change the fit and the
validation error.  It runs every measured row once (the same simulation as ``benchmarks/steptime_fit.py``:
in a closed loop the schedule does not depend on the constants) and keeps, per row, every segment's
features (one step, or a stretch of decode-only steps) weighted by how many measured requests' TTFT and TPOT
windows hold it.  Under the roofline a segment costs ``c_mem x mem`` when ``mem / comp >= c_flop / c_mem``
and ``c_flop x comp`` otherwise, so with the segments binned by ``mem / comp`` the mean TTFT and TPOT are
linear in the constants again for a given ratio; the fit alternates a non-negative least-squares fit (the
same weights and bounds as steptime_fit.py) with the ratio it implies, on the calibration rows only.

Approximation: a stretch of decode steps is judged as a whole (its summed memory against its summed
compute), exact when one term dominates every step of it, as in decode.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.steptime_fit import (  # noqa: E402
    CALIBRATION,
    DATA,
    JITTER,
    STAGGER,
    TTFT_WEIGHT,
    VALIDATION,
    batch_caps,
    mape,
    nnls,
    rank_users,
    setup,
)
from kvdash.core.steptime import Constants  # noqa: E402
from kvdash.simulate.timed import simulate_timed  # noqa: E402

EDGES = np.logspace(-4, 4, 401)


def row_sums(row: dict[str, str], per_user: int) -> dict[str, Any]:
    """Per ratio bin, the TTFT- and TPOT-weighted memory and compute seconds; and the weighted other terms."""
    s = setup(row)
    users = rank_users(row, s["dp"])
    n = users * per_user
    isl, osl = int(row["isl"]), int(row["osl"])
    rng = np.random.default_rng(0)
    P = np.maximum(1, np.rint(isl * rng.uniform(1 - JITTER, 1 + JITTER, n))).astype(np.int64)
    OUT = np.maximum(2, np.rint(osl * rng.uniform(1 - JITTER, 1 + JITTER, n))).astype(np.int64)
    measured = np.arange(n)
    if STAGGER != "0" and per_user > 1:
        phase = (np.arange(users) + 1) / users if STAGGER == "1" else rng.uniform(0, 1, users)
        OUT[:users] = np.maximum(2, np.rint(osl * phase)).astype(np.int64)
        measured = np.arange(users, n)
    seqs, batched = batch_caps(row)
    sched = simulate_timed(P, OUT, s["pool"], s["mc"], s["gpu"], Constants(), seqs, batched, concurrency=users)
    dx = np.diff(sched.cum, axis=0)  # (segments, 6)
    segs = len(dx)
    arrive = np.where(sched.arrival_seg < 0, 0, sched.arrival_seg)
    w = np.zeros(segs + 1)
    u = np.zeros(segs + 1)
    m = len(measured)
    for i in measured:
        a, f, e = int(arrive[i]), int(sched.first_seg[i]), int(sched.finish_seg[i])
        w[a] += 1 / m
        w[f] -= 1 / m
        u[f] += 1 / ((OUT[i] - 1) * m)
        u[e] -= 1 / ((OUT[i] - 1) * m)
    w, u = np.cumsum(w)[:segs], np.cumsum(u)[:segs]
    mem, comp = dx[:, 0], dx[:, 1]
    ratio = np.where(comp > 0, mem / np.maximum(comp, 1e-300), np.inf)
    b = np.clip(np.searchsorted(EDGES, ratio), 0, len(EDGES))
    nb = len(EDGES) + 1
    out = {"preemptions": sched.preemptions}
    for name, wt in (("ttft", w), ("tpot", u)):
        out[name + "_mem"] = np.bincount(b, wt * mem, nb)
        out[name + "_comp"] = np.bincount(b, wt * comp, nb)
        out[name + "_rest"] = wt @ dx[:, 2:]  # steps, layer units, collectives, link seconds
        out[name + "_sum"] = wt @ dx  # the shipped (additive) features
    return out


def features(s: dict[str, Any], kind: str, r: float | None) -> np.ndarray:
    """(mem, comp, steps, layers, collectives, link) of a row's mean TTFT or TPOT; ``r``: the roofline
    threshold c_flop / c_mem (a bin counts as memory-bound when its mem / comp ratio is at least r), None: the
    additive model."""
    if r is None:
        return s[kind + "_sum"]
    cut = int(np.searchsorted(EDGES, r))  # bins >= cut have ratio >= EDGES[cut - 1] ~ r
    mem = s[kind + "_mem"][cut:].sum()
    comp = s[kind + "_comp"][:cut].sum()
    return np.concatenate([[mem, comp], s[kind + "_rest"]])


def fit(sims: dict[str, dict[str, Any]], by_id: dict[str, dict[str, str]], r: float | None) -> np.ndarray:
    A, b = [], []
    for i, s in sims.items():
        row = by_id[i]
        if row["model_path"] not in CALIBRATION:
            continue
        ttft_w = 0.0 if s["preemptions"] else TTFT_WEIGHT
        for kind, meas, wt, req in (("tpot", float(row["silicon_tpot_ms"]) / 1000, 1.0, 0.0),
                                    ("ttft", float(row["silicon_ttft_ms"]) / 1000, ttft_w, 1.0)):
            f = features(s, kind, r)
            A.append(wt * np.append(f[:5], req) / meas)
            b.append(wt * (1 - f[5] / meas))
    A_, b_ = np.asarray(A), np.asarray(b)
    floor = np.array([1.0, 1.0, 0, 0, 0, 0])
    return nnls(A_, b_ - A_ @ floor) + floor


def errors(sims: dict[str, dict[str, Any]], by_id: dict[str, dict[str, str]], c: np.ndarray,
           r: float | None, models: tuple[str, ...]) -> tuple[float, float, int]:
    pt, mt, pf, mf = [], [], [], []
    for i, s in sims.items():
        row = by_id[i]
        if row["model_path"] not in models:
            continue
        ft, ff = features(s, "tpot", r), features(s, "ttft", r)
        pt.append(float(ft[:5] @ c[:5] + ft[5]))
        pf.append(float(ff[:5] @ c[:5] + ff[5] + c[5]))
        mt.append(float(row["silicon_tpot_ms"]) / 1000)
        mf.append(float(row["silicon_ttft_ms"]) / 1000)
    return mape(pt, mt), mape(pf, mf), len(pt)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests-per-user", type=int, default=10)
    args = ap.parse_args()
    with (DATA / "silicon_vllm_agg.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    by_id = {r["id"]: r for r in rows}
    t0 = time.time()
    sims: dict[str, dict[str, Any]] = {}
    skipped: dict[str, int] = defaultdict(int)
    for r in rows:
        try:
            sims[r["id"]] = row_sums(r, args.requests_per_user)
        except Exception as exc:  # noqa: BLE001 - counted and reported
            skipped[f"{r['model_path']}: {type(exc).__name__}"] += 1
    print(f"simulated {len(sims)} rows in {time.time() - t0:.0f} s; skipped {sum(skipped.values())}", file=sys.stderr)
    lines = ["| step time | c_mem | c_flop | c_step ms | c_layer us | c_allreduce us | c_request ms | "
             "calibration TPOT / TTFT MAPE % | validation TPOT / TTFT MAPE % |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label, roof in (("sum (shipped)", False), ("roofline max", True)):
        r = None
        c = fit(sims, by_id, None)
        if roof:
            r = float(c[1] / c[0])
            for _ in range(30):  # the threshold the constants imply, to a fixed point
                c = fit(sims, by_id, r)
                nr = float(c[1] / c[0])
                if abs(np.log(nr / r)) < 1e-3:
                    break
                r = nr
        ct, cf, _ = errors(sims, by_id, c, r, CALIBRATION)
        vt, vf, _ = errors(sims, by_id, c, r, VALIDATION)
        lines.append(f"| {label} | {c[0]:.3f} | {c[1]:.3f} | {c[2] * 1e3:.3g} | {c[3] * 1e6:.4g} | "
                     f"{c[4] * 1e6:.4g} | {c[5] * 1e3:.4g} | {ct:.1f} / {cf:.1f} | {vt:.1f} / {vf:.1f} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

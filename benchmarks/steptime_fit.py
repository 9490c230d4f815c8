"""Fit the step-time constants on measured vLLM runs and validate them on the runs not fitted (issue 28).

Run: python benchmarks/steptime_fit.py [--write] [--requests-per-user 10]

Data: ``tests/data/measured/silicon_vllm_agg.csv`` (aiconfigurator 0.12's measured vLLM aggregated-serving
rows, Apache-2.0; see its SOURCE.md).  Calibration subset (the only rows the constants see): the dense
models Llama-3.1-70B, Llama-3.1-8B-FP8 and Qwen3-32B.  Validation: gpt-oss-120b, MiniMax-M2.5, Kimi-K2.5 and
Qwen3-235B-A22B, every GPU.

Each row is a closed-loop benchmark: ``users`` users (``batch_size`` x ``attention_dp_size``: aiconfigurator's
``batch_size`` is one attention data-parallel rank's), each sending its next request (``isl`` tokens
in, ``osl`` out) when the previous one finishes, ``requests-per-user`` requests each.  kvdash simulates it
with :func:`kvdash.simulate.timed.simulate_timed` (vLLM's scheduler: chunked prefill, preemption by
recompute) over the pool kvdash computes for the row.  In a closed loop nothing the scheduler decides
depends on time, so one simulation per row gives every request's TTFT and TPOT as a linear function of the
constants; the fit is a non-negative least-squares fit of the relative errors of the mean TTFT and mean
TPOT of the calibration rows.  The TPOT is the steady rounds' (users out of step, their phases spread over a
share of a request, ``SPREAD_GRID``); the TTFT mixes them with the first round, in which every user's request
arrives at once (users in step), at a share of ``IN_STEP_GRID``; the spread and the share are the pair that
predicts the calibration rows' cliffs best, then gives them the lowest TTFT error (``--spread`` and
``--in-step`` fix them).  Each spread is one simulation of every row (about 15 s on two cores; ``--jobs``).

Assumptions (not in the data): ``gpu_memory_utilization`` 0.9 (vLLM's default before 0.20), the runtime
reserve of ``--reserve auto`` (kvdash.engines.vllm_reserve), ``max_num_batched_tokens`` and ``max_num_seqs``
as vLLM 0.33 picks them for the row's GPU (``batch_caps``; ``KVDASH_FIT_CAPS=0``: 8,192 and 1,024 everywhere),
the users out of step (``KVDASH_FIT_STAGGER``: ``1`` evenly spread phases, the default; ``random``; ``0`` all
starting together), KV cache fp8 where the row's precision is fp8 and on Llama-3.1-70B's NVFP4 rows
(else bf16), 16-token blocks (64 for MLA), checkpoint formats as their config.json state (gpt-oss: MXFP4
experts, bf16 attention; Kimi-K2.5: int4/NVFP4 experts, bf16 attention and dense layers).

``--write`` stores the constants in ``kvdash/data/steptime.json`` and the tables in
``benchmarks/results/steptime_validation.md``.  aiconfigurator's estimates of the same rows come from
``benchmarks/aic_estimates.py`` (run in a side venv; its CSV is committed).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import os
import re
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from kvdash.core.gpus import get_gpu
from kvdash.core.model import engine_config, load_config
from kvdash.core.steptime import Constants, gpu_perf, model_compute
from kvdash.engines.vllm import declared_kv_dtype, rank_shapes
from kvdash.engines.vllm_reserve import auto_reserve
from kvdash.simulate.timed import Pool, simulate_timed

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests/data/measured"
CALIBRATION = ("meta-llama/Llama-3.1-70B", "nvidia/Llama-3.1-8B-Instruct-FP8", "Qwen/Qwen3-32B")
VALIDATION = ("openai/gpt-oss-120b", "MiniMaxAI/MiniMax-M2.5", "moonshotai/Kimi-K2.5", "Qwen/Qwen3-235B-A22B-FP8")
MODELS = {"meta-llama/Llama-3.1-70B": "llama-3.1-70b", "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b",
          "Qwen/Qwen3-32B": "qwen3-32b", "openai/gpt-oss-120b": "gpt-oss-120b",
          "MiniMaxAI/MiniMax-M2.5": "minimax-m2.5", "moonshotai/Kimi-K2.5": "kimi-k2.5",
          "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b-fp8"}
GPUS = {"h100_sxm": "h100-80gb", "h200_sxm": "h200", "b200_sxm": "b200", "b300_sxm": "b300"}
UTIL = 0.9
MAX_BATCHED = 8192
MAX_SEQS = 1024
CLIFF = 5.0
# the --cache file's version: raised whenever the simulated features change (a stale cache is simulated again);
# 2: MiniMax-M2's third all-reduce a layer; 3: Llama-3.1-70B's NVFP4 rows with an fp8 KV cache; 4: one simulation
# per phase spread (SPREAD_GRID); 5: an attention data-parallel row's batch_size is each rank's users (users())
# 6: a MoE layer under a measured kernel model counts its other kernels only (MLP_KERNELS); 7: a prefill chunk runs
# the LM head once (lm_head_seconds); 8: attention over an fp8 KV cache at the fp8 rate (ModelCompute.attn_rate)
CACHE_VERSION = 8
# lengths drawn uniformly within +-JITTER of ISL/OSL (mean kept): benchmark clients' random prompts vary, and
# identical lengths would keep every user in lockstep (an assumption, chosen on the calibration rows)
PHYSICAL = __import__("os").environ.get("KVDASH_FIT_PHYSICAL", "1") == "1"
TTFT_WEIGHT = float(__import__("os").environ.get("KVDASH_FIT_TTFT_WEIGHT", "0.5"))  # TPOT rows weigh 1
JITTER = float(__import__("os").environ.get("KVDASH_FIT_JITTER", "0.0"))
STAGGER = __import__("os").environ.get("KVDASH_FIT_STAGGER", "1")  # "0": in step, "1": evenly, "random"
CAPS = __import__("os").environ.get("KVDASH_FIT_CAPS", "1") == "1"
# the benchmark's mean TTFT sits between two regimes kvdash simulates: users out of step (the steady rounds: a
# request's prompt rarely meets another's) and users in step (the first round: every user's request arrives at
# once, and the prompts are prefilled max_num_batched_tokens at a time, the last after about users x ISL /
# budget tokens).  The measured TTFT grows with the users about linearly, at a tenth to a fifth of one more
# prompt's prefill time per user, between the two (out of step it hardly grows; in step it is twice the
# measured at 8 users).  The share in step is chosen on the calibration rows from this grid
IN_STEP_GRID = (0.0, 1 / 20, 1 / 10, 1 / 8, 1 / 6, 1 / 5, 1 / 4, 1 / 3, 1 / 2)
# how far apart the users are in the steady rounds: their phases spread over this share of a request's life (1:
# evenly over the whole of it, each user's KV at a different length; toward 0: in step, every user's KV growing
# together to isl + osl, so a pool holding fewer full requests than users preempts every round).  A closed loop
# of identical lengths keeps the phases its start gives it: started together, the users stay about one prompt's
# prefill apart, and the measured runs show cliffs exactly where the pool holds fewer full requests than users
# (Llama-3.1-70B fp8, 1,024 / 8,192, 64 users: H200 TP 1 holds 38, 474 ms -> 5,323 ms) though evenly spread
# users would fit.  Chosen on the calibration rows with the share in step (``best_pair``)
SPREAD_GRID = (0.2, 0.4, 0.6, 0.8, 1.0)


# the checkpoint a row's quantization runs (vLLM serves NVFP4 only from a pre-quantized checkpoint): NVIDIA's
# ModelOpt NVFP4 releases of Kimi-K2.5 and MiniMax-M2.5, their config.json as aiconfigurator ships them
# (tests/data/measured/SOURCE.md); every other row runs the model's own checkpoint (MODELS)
CHECKPOINTS = {("moonshotai/Kimi-K2.5", "nvfp4"): "kimi-k2.5-nvfp4",
               ("MiniMaxAI/MiniMax-M2.5", "nvfp4"): "minimax-m2.5-nvfp4"}


def checkpoint_kv_dtype(cfg: dict[str, Any]) -> str | None:
    """The KV cache dtype a checkpoint declares, as vLLM 0.33 resolves ``--kv-cache-dtype auto``: kvdash's own
    rule (:func:`kvdash.engines.vllm.declared_kv_dtype`), on config.json's ``quantization_config`` (top level,
    else ``text_config``'s, as ``kvdash.core.model`` reads it); ``"fp8"`` for either fp8 spelling (1 byte),
    None where the checkpoint declares none."""
    q = cfg.get("quantization_config") or cfg.get("text_config", {}).get("quantization_config") or {}
    dtype, why = declared_kv_dtype(q)
    return None if not why else "fp8" if dtype.startswith("fp8") else dtype


def _ignored(cfg: dict[str, Any], module: str) -> bool:
    """Whether the checkpoint's quantization ``ignore`` / ``exclude_modules`` list keeps ``module`` unquantized."""
    q = cfg.get("quantization_config") or cfg.get("text_config", {}).get("quantization_config") or {}
    return any(module in x for x in q.get("ignore", q.get("exclude_modules", [])))


NOTES = """Notes:

- Checkpoints: rows whose quantization is NVFP4 run NVIDIA's ModelOpt NVFP4 release of the model (vLLM serves
  NVFP4 only from a pre-quantized checkpoint): `nvidia/Kimi-K2.5-NVFP4`, `nvidia/MiniMax-M2.5-NVFP4`, their
  config.json in `tests/data/measured/models/*-nvfp4/`. Both declare an 8-bit float KV cache scheme, which vLLM
  0.33 turns `--kv-cache-dtype auto` into (`resolve_kv_cache_dtype_string`, vllm/utils/torch_utils.py), and
  keep attention in bf16 (`self_attn` in their quantization `ignore`). Rows of other checkpoints: fp8 KV where
  the row's precision is fp8 (assumed: the data does not say which `--kv-cache-dtype` the run passed), and on
  Llama-3.1-70B's NVFP4 rows (calibration, B200): aiconfigurator ships no config of NVIDIA's NVFP4 release, but
  its FP8 release and 25 of the 28 ModelOpt `hf_quant_config.json` it ships declare `kv_cache_quant_algo` FP8,
  and the rows need it: at 64 users of 8,192 + 1,024 tokens (TTFT 1.9 s, no cliff) a bf16 cache needs 64 x
  8,192 x 327,680 B = 172 GB beyond the weights, more than a B200 holds. With bf16 kvdash predicted a cliff
  there that the run did not show; with fp8 the calibration TTFT error fell 28.9 -> 26.3 % and the validation
  moved 21.9 / 29.2 -> 22.3 / 29.4 % (TPOT / TTFT).
- GEMM rates: each dense GEMM runs at its own weights' rate (bf16 attention at bf16), and gpt-oss's MXFP4
  experts at bf16, as vLLM 0.33 runs them (bf16 activations: `_get_priority_backends_for_gpt_oss`,
  vllm/model_executor/layers/fused_moe/oracle/mxfp4.py). The calibration rows are unchanged by both.
- Users in and out of step: the measured TTFT grows with concurrency at about a tenth to a fifth of one more
  prompt's prefill per user. Out of step (the steady rounds, the users' phases evenly spread) kvdash's TTFT
  hardly grows; in step (every user's request arriving at once and prefilled `max_num_batched_tokens` at a
  time, as in a closed loop's first round) it is about twice the measured at 8 users. The TTFT compared is
  the mix of the two whose share in step gives the calibration rows the lowest TTFT error (the table above;
  the validation rows never choose it); TPOT is the steady rounds'. What the benchmark's client did (its
  warm-up, its number of requests, its length spread) is not in the data; aiconfigurator's own templates run
  aiperf (0.3.0 in generator/sflow.py) at exact lengths, N or 2N warm-up requests, then 20 N measured ones, and
  aiperf 0.3.0 opens the measured phase only after the warm-up has drained, with all N requests at once
  (CreditIssuingStrategy._execute_phases): one measured round in step of 20.
- How far apart the users are (the phase spread): evenly spread over a whole request, every user's KV is at a
  different length and the pool needs room for about `users x (isl + osl / 2)` tokens; but a closed loop of
  identical lengths started together stays nearly in step (the users a prompt's prefill apart), so every user's
  KV grows to `isl + osl` at about the same time. The measured cliffs say the same: Llama-3.1-70B fp8, 1,024 /
  8,192 tokens, jumps at 64 users on H200 TP 1 (474 -> 5,323 ms) and H100 TP 2 (289 -> 30,787 ms), where the pool
  holds 38 and 45 full requests, though 64 users evenly spread fit. The steady rounds are simulated with the
  phases spread over 0.2 to 1 of a request (`SPREAD_GRID`), and the spread is chosen on the calibration rows with
  the share in step: the calibration cliffs predicted best, then the lowest calibration TTFT error. At 1 (before
  this round) the calibration rows predicted 5 of their 8 cliffs (validation 3 of 12, 1 false); at the chosen 0.4,
  7 of 8 (validation 4 of 12, 1 false: MiniMax-M2.5 fp8 TP 4 x EP 4 on H100, 1,024 / 8,192, at 64 users, where
  the pool holds 45), and TPOT / TTFT moved 12.5 / 26.3 -> 12.4 / 25.8 % (calibration), 22.3 / 29.4 -> 22.4 /
  29.1 % (validation). The validation results of spreads 0.02 to 1 were looked at while the rule was written
  (every spread 0.2 to 0.4 gives validation cliffs 4 of 12).
- Async scheduling: a request that arrives while step n runs joins step n + 2, a closed loop's next request
  step n + 3 after its predecessor's last (vLLM 0.33's batch queue of two, `EngineCore.step_with_batch_queue`,
  vllm/v1/engine/core.py; `kvdash.simulate.timed.ASYNC_STEPS`), in the simulators themselves.
- Routed experts' activations: k x (3 hidden + 6 I) x 2 B per token and MoE layer read and written, as
  `fused_experts_impl` moves them (vllm/model_executor/layers/fused_moe/fused_moe.py); no constant, and the
  dense calibration rows move none in this term.
- Routed experts on the four GPUs (H100, H200, B200, B300) in the formats aiconfigurator measured (bf16, fp8
  block, NVFP4, int4 weight-only, gpt-oss's MXFP4): each MoE layer's time is the measured fused-MoE kernel model
  of `kvdash/data/moe_kernels.json`, a_s + b x memory s + c x compute s of the experts' roofline, fitted by
  `benchmarks/moe_kernels.py` on aiconfigurator 0.12's kernel measurements of vLLM 0.24.0's fused-MoE layer
  (not on serving rows; the validation models' shapes held out where 20 other points remain), in place of the
  roofline at c_mem / c_flop, which the dense calibration rows fitted; the measured module holds the fused-MoE
  kernels, so a MoE layer counts only the others there (7/9 of a layer unit, 10/9 with a shared expert:
  ModelCompute.kernel_units in kvdash/core/steptime.py).  No calibration row has routed experts: the constants
  are unchanged.
- No GPU was available this session: the bandwidth and FLOP terms were not measured on a device (issue 28
  item 6); every figure here is from the simulator with the constants fitted on the calibration rows."""


def formats(row: dict[str, str]) -> tuple[str, str, str, str]:
    """(dense weights, expert weights, KV dtype, attention weights) of a row."""
    model = row["model_path"]
    gemm = row["gemm_quant_mode"] or "bf16"
    moe = row["moe_quant_mode"] or gemm
    ckpt = CHECKPOINTS.get((model, moe))
    declared = None
    if ckpt is not None:
        cfg = json.loads((DATA / "models" / ckpt / "config.json").read_text())
        declared = checkpoint_kv_dtype(cfg)
        attention = "bf16" if _ignored(cfg, "self_attn") else gemm
        # NVIDIA's NVFP4 releases: experts, shared experts and dense MLPs NVFP4; attention and lm_head bf16
        return gemm, moe, declared or ("fp8" if row["precision"] == "fp8" else "bf16"), attention
    # no declared KV scheme: fp8 where the row's precision is fp8 (the benchmark's --kv-cache-dtype, assumed)
    kv = "fp8" if row["precision"] == "fp8" else "bf16"
    if model == "meta-llama/Llama-3.1-70B" and moe == "nvfp4":
        # NVIDIA's NVFP4 release (no config in aiconfigurator 0.12; its FP8 release's hf_quant_config.json, and 25 of
        # the 28 ModelOpt configs it ships, declare kv_cache_quant_algo FP8); and the rows need it: at 64 users of
        # 8192 + 1024 tokens on one B200 (TTFT 1.9 s, no cliff) a bf16 cache would need 64 x 8,192 x 327,680 B =
        # 172 GB beyond the weights, more than the GPU has
        kv = "fp8"
    if model == "openai/gpt-oss-120b":
        return "bf16", "mxfp4", kv, "bf16"  # the checkpoint: MXFP4 experts, everything else bf16
    if model == "moonshotai/Kimi-K2.5":
        # the int4 checkpoint (compressed-tensors, kv_cache_scheme null): attention, shared experts and dense
        # layers bf16
        return "bf16", moe, kv, "bf16"
    return gemm, moe, kv, gemm


_cfg_cache: dict[str, Any] = {}


def attention_dp(row: dict[str, str]) -> int:
    """The row's ``attention_dp_size`` column (empty or 0: 1)."""
    return int(row.get("attention_dp_size") or 1) or 1


def ranks(row: dict[str, str]) -> int:
    """The row's attention data-parallel ranks: ``attention_dp_size``, or more where the experts span more GPUs
    than the attention (``tp_size`` 1, ``moe_tp_size`` 2: two ranks)."""
    tp = int(row["tp_size"])
    dp = attention_dp(row)
    moe_gpus = int(row["moe_tp_size"] or 1) * int(row["moe_ep_size"] or 1)
    return moe_gpus // tp if moe_gpus > tp * dp else dp


def setup(row: dict[str, str], link_scale: float = 1.0) -> dict[str, Any]:
    """Everything kvdash needs for one row (raises ValueError when it cannot model the row); ``link_scale``
    multiplies the GPU's NVLink bandwidth (a reading of ``steptime_readings.py``; 1: the spec figure)."""
    name = MODELS[row["model_path"]]
    if name not in _cfg_cache:
        # read as kvdash's commands read a --config (and the engine: through transformers' class for the type)
        path = DATA / "models" / name / "config.json"
        _cfg_cache[name] = (engine_config(path), load_config(path))
    cfg, arch = _cfg_cache[name]
    tp = int(row["tp_size"])
    dp = ranks(row)
    if int(row["pp_size"] or 1) != 1:
        raise ValueError("pipeline parallel")
    dense, experts, kv, attention = formats(row)
    mc = model_compute(cfg, arch, tp, dense, experts, kv, dp=dp, attention_weights=attention)
    gkey = GPUS[row["system"]]
    gpu = gpu_perf(gkey)
    if link_scale != 1.0:
        gpu = replace(gpu, link_bytes_per_s=gpu.link_bytes_per_s * link_scale)
    block = 64 if arch.use_mla else 16
    shape = rank_shapes(arch, kv, "tensor", tp, 1, block)[0]
    total = get_gpu(gkey).memory_bytes
    reserve = auto_reserve(arch.model_type, tp, 1, batch_caps(row)[1], gkey, None, layers=arch.num_layers)["bytes"]
    budget = math.floor(total * UTIL) - mc.weights_per_rank - reserve
    if budget <= 0:
        raise ValueError(f"weights {mc.weights_per_rank:,} B leave no KV budget")
    pool = Pool.of(shape, budget)
    return {"mc": mc, "gpu": gpu, "pool": pool, "dp": dp, "arch": arch,
            "capacity": pool.blocks // int(pool.request_blocks(int(row["isl"]) + int(row["osl"])))}


def users(row: dict[str, str]) -> int:
    """The row's benchmark concurrency: all its users, over every attention data-parallel rank.  aiconfigurator's
    ``batch_size`` is one attention-DP rank's batch: its estimator reports ``concurrency = batch_size x
    attention_dp_size`` (``global_bs = bs * model.config.attention_dp_size`` in
    ``aiconfigurator_core/sdk/backends/base_backend.py``, 0.12.0), and the measured rows' own ids say so: the
    ``c<N>`` in the id of each of the 97 rows with ``attention_dp_size`` over 1 is ``batch_size x
    attention_dp_size`` (``..._8192x1024_c64_tp4_ep4_1359``: ``batch_size`` 16, ``attention_dp_size`` 4), and it is
    ``batch_size`` in all 1,228 other rows that carry one.  Rows that leave ``attention_dp_size`` empty but spread
    the experts over more GPUs than the attention (Qwen3-235B's ``tp_size`` 1, ``moe_tp_size`` 2; :func:`setup`
    counts them as data-parallel) have ``c<N>`` = ``batch_size``: all their users."""
    return int(row["batch_size"]) * attention_dp(row)


def rank_users(row: dict[str, str], dp: int) -> int:
    """Users on one attention data-parallel rank of ``dp`` (vLLM's DP coordinator balances the ranks' requests)."""
    return max(1, users(row) // dp)


def tpot_floor(row: dict[str, str]) -> float | None:
    """The least TPOT (seconds) the spec HBM bandwidth allows a row, where its users must all decode at once; None
    where they need not.  They must when the pool holds every user's request at full length (``capacity``) and
    vLLM's ``max_num_seqs`` admits them all: then every decode step reads the rank's dense weights, at least
    ``top_k`` routed experts of each MoE layer, and each user's KV (a closed loop's user sits, on average, at
    ``isl + osl / 2`` tokens), at no more than the spec bandwidth.  No fitted constant enters, and compute,
    overheads and prefill are left out, so a measured TPOT below the floor is a row whose benchmark did not keep
    all its users decoding together (its TTFT says the rest waited)."""
    s = setup(row)
    per_rank = rank_users(row, s["dp"])
    if s["capacity"] < per_rank or batch_caps(row)[0] < per_rank:
        return None
    mc = s["mc"]
    context = np.float64(int(row["isl"]) + int(row["osl"]) / 2)
    read = (mc.dense_weight_bytes + mc.moe_layers * mc.top_k * mc.expert_bytes
            + per_rank * float(mc.kv_read_bytes(context)))
    return read / s["gpu"].hbm_bytes_per_s


def in_flight(row: dict[str, str]) -> float:
    """The requests a row's run kept decoding at once, on average, from its own measured figures (Little's law):
    a closed loop of :func:`users` users, each sending its next request when the last one ends, spends
    ``TTFT + (osl - 1) x TPOT`` a request, ``(osl - 1) x TPOT`` of it decoding, so on average
    ``users x decode / (TTFT + decode)`` requests decode together.  No kvdash figure enters: a count far
    under ``users`` says the other requests waited, in the engine (a full pool, ``max_num_seqs``) or before
    it (a client that held fewer requests open)."""
    decode = (int(row["osl"]) - 1) * float(row["silicon_tpot_ms"])
    return users(row) * decode / (float(row["silicon_ttft_ms"]) + decode)


CONFIG_COLUMNS = ("model_path", "system", "precision", "gemm_quant_mode", "moe_quant_mode", "tp_size", "pp_size",
                  "attention_dp_size", "moe_tp_size", "moe_ep_size", "isl", "osl", "batch_size")


def runs_by_config(rows: list[dict[str, str]]) -> dict[tuple[str, ...], dict[str, list[dict[str, str]]]]:
    """The rows of each configuration (:data:`CONFIG_COLUMNS`: model, GPU, formats, parallelism, lengths,
    concurrency) by engine version."""
    out: dict[tuple[str, ...], dict[str, list[dict[str, str]]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        out[tuple(r[c] for c in CONFIG_COLUMNS)][r["backend_version"]].append(r)
    return out


def version_pairs(rows: list[dict[str, str]]) -> list[tuple[list[dict[str, str]], list[dict[str, str]]]]:
    """Every configuration the data measured under two engine versions, as (the older version's rows, the newer
    one's) for each pair of its versions.  No kvdash figure enters."""
    return [(v[a], v[b]) for v in runs_by_config(rows).values()
            for a, b in itertools.combinations(sorted(v, key=version_key), 2)]


def repeat_pairs(rows: list[dict[str, str]]) -> list[tuple[dict[str, str], dict[str, str]]]:
    """Every two rows of one configuration under one engine version (a run repeated, or a row copied)."""
    return [(a, b) for v in runs_by_config(rows).values() for group in v.values()
            for a, b in itertools.combinations(group, 2)]


def version_key(version: str) -> tuple[int, tuple[int, ...], str]:
    """Engine versions in release order: numbered releases by their numbers (0.9.0 before 0.17.0), then the rest
    (a ``nightly-<commit>`` build, dated after the releases the data holds) by name."""
    parts = version.split(".")
    if version and all(p.isdigit() for p in parts):
        return 0, tuple(int(p) for p in parts), ""
    return 1, (), version


def figures(group: list[dict[str, str]]) -> tuple[float, float]:
    """(TPOT ms, TTFT ms) of one version's rows of a configuration: their mean where it was measured more than
    once."""
    return (float(np.mean([float(r["silicon_tpot_ms"]) for r in group])),
            float(np.mean([float(r["silicon_ttft_ms"]) for r in group])))


def differ(a: float, b: float) -> float:
    """How far apart two measurements of one quantity are, as a share of their mean."""
    return abs(a - b) / ((a + b) / 2)


def blind_floor(a: float, b: float) -> float:
    """The least mean absolute percentage error one prediction reaches on two measurements ``a`` and ``b`` (a
    model that cannot tell them apart): the error is piecewise linear in the prediction, least at the smaller
    measurement, where it is |a - b| / max(a, b) on the larger one and 0 on the other: |a - b| / (2 max(a, b))."""
    return abs(a - b) / (2 * max(a, b))


def repeatability_table(rows: list[dict[str, str]]) -> list[str]:
    """The version pairs (:func:`version_pairs`) by model, GPU and versions: how far their TPOT and TTFT differ,
    and the least MAPE a model blind to the version reaches on them (:func:`blind_floor`); then every repeat
    within one version (:func:`repeat_pairs`)."""
    groups: dict[tuple[str, str, str, str], list[tuple[float, float, float, float]]] = defaultdict(list)
    for older, newer in version_pairs(rows):
        a, b = figures(older), figures(newer)
        key = (older[0]["model_path"].split("/")[1], older[0]["system"].split("_")[0].upper(),
               older[0]["backend_version"], newer[0]["backend_version"])
        groups[key].append((differ(a[0], b[0]), differ(a[1], b[1]), blind_floor(a[0], b[0]), blind_floor(a[1], b[1])))
    out = ["| model, GPU | engine versions | configurations | TPOT differ: mean / median % | "
           "TTFT differ: mean / median % | least MAPE blind to the version: TPOT / TTFT % |",
           "|---|---|---:|---:|---:|---:|"]

    def line(label: str, versions: str, d: list[tuple[float, ...]], bold: bool = False) -> str:
        t, f, bt, bf = (100 * np.array(d)).T
        b = "**" if bold else ""
        return (f"| {label} | {versions} | {len(d)} | {b}{t.mean():.1f}{b} / {np.median(t):.1f} | "
                f"{b}{f.mean():.1f}{b} / {np.median(f):.1f} | {bt.mean():.1f} / {bf.mean():.1f} |")

    every: list[tuple[float, ...]] = []
    for (model, gpu, v1, v2), d in sorted(groups.items()):
        every += d
        out.append(line(f"{model} {gpu}", f"{v1} / {v2}", d))
    if every:
        out.append(line("**all**", "", every, bold=True))
    same = [(differ(float(a["silicon_tpot_ms"]), float(b["silicon_tpot_ms"])),
             differ(float(a["silicon_ttft_ms"]), float(b["silicon_ttft_ms"])),
             blind_floor(float(a["silicon_tpot_ms"]), float(b["silicon_tpot_ms"])),
             blind_floor(float(a["silicon_ttft_ms"]), float(b["silicon_ttft_ms"]))) for a, b in repeat_pairs(rows)]
    if same:
        out.append(line("repeats within one version (every two rows)", "the same", same))
    return out


TWIN_COLUMNS = ("model_path", "system", "backend_version", "gemm_quant_mode", "moe_quant_mode", "tp_size", "isl",
                "osl")


def dp_twins(rows: list[dict[str, str]]) -> list[tuple[dict[str, str], list[dict[str, str]]]]:
    """Each row run with attention data parallelism (``attention_dp_size`` over 1) beside its twins: the rows of
    the same model, GPU, engine version, formats, tensor parallelism and lengths run without it, at the same total
    users (:func:`users`).  Rows with no twin are left out."""
    plain: dict[tuple[Any, ...], list[dict[str, str]]] = defaultdict(list)
    for r in rows:
        if attention_dp(r) == 1:
            plain[(*(r[c] for c in TWIN_COLUMNS), users(r))].append(r)
    out = []
    for r in rows:
        if attention_dp(r) > 1:
            twins = plain.get((*(r[c] for c in TWIN_COLUMNS), users(r)))
            if twins:
                out.append((r, twins))
    return out


def simulated_twins(rows: list[dict[str, str]], sims: dict[str, dict[str, Any]]
                    ) -> list[tuple[dict[str, str], list[dict[str, str]]]]:
    """:func:`dp_twins` where the row and every twin were simulated."""
    return [(r, tw) for r, tw in dp_twins(rows) if r["id"] in sims and all(t["id"] in sims for t in tw)]


def as_twins(rows: list[dict[str, str]], sims: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``sims`` with each attention data-parallel row that has twins (:func:`simulated_twins`) simulated as its
    twins' configuration: their TTFT and TPOT features averaged (the features are linear in the constants, so this
    is the mean of the twins' predictions)."""
    out = dict(sims)
    for r, twins in simulated_twins(rows, sims):
        out[r["id"]] = {**sims[r["id"]], **{k: np.mean([sims[t["id"]][k] for t in twins], axis=0)
                                             for k in ("tpot_f", "ttft_f")}}
    return out


def twin_table(rows: list[dict[str, str]], by_id: dict[str, dict[str, str]], sims: dict[str, dict[str, Any]],
               coef: np.ndarray) -> list[str]:
    """How far the attention data-parallel rows' figures are from their twins' (:func:`dp_twins`, the twins'
    repeats averaged); kvdash's error on those rows as labelled and as their twins' configuration
    (:func:`as_twins`); and every validation row's error and cliffs with them read so."""
    pairs = simulated_twins(rows, sims)
    if not pairs:
        return []
    d = np.array([(differ(float(r["silicon_tpot_ms"]), figures(tw)[0]),
                   differ(float(r["silicon_ttft_ms"]), figures(tw)[1])) for r, tw in pairs]) * 100
    twin = as_twins(rows, sims)
    ids = [r["id"] for r, _ in pairs]
    own, read = errors(ids, by_id, sims, coef), errors(ids, by_id, twin, coef)
    val = [i for i in sims if by_id[i]["model_path"] in VALIDATION]
    every, cl = errors(val, by_id, twin, coef), cliff_counts(val, by_id, twin, coef)
    dp_rows = [r for r in rows if attention_dp(r) > 1]
    named = [r for r in dp_rows if (m := re.search(r"_tp(\d+)_ep(\d+)_", r["id"])) and m[1] == m[2] == r["tp_size"]]
    seen: dict[tuple[str, str], int] = defaultdict(int)
    for r in rows:
        seen[(r["silicon_tpot_ms"], r["silicon_ttft_ms"])] += 1
    copies = [r for r in dp_rows if r not in named and seen[(r["silicon_tpot_ms"], r["silicon_ttft_ms"])] > 1]
    return [f"Of the {len(dp_rows)} attention data-parallel rows, {len(named)} carry ids that name a tensor-parallel "
            "run with expert parallelism over the same GPUs (`_tp<N>_ep<N>_`, where the columns say attention_dp_size "
            f"N and moe_ep_size N x N), and {len(copies)} more repeat another row's TPOT and TTFT to the last digit.",
            "", "| rows | TPOT differ from the twins: mean / median % | TTFT differ: mean / median % | kvdash TPOT / "
            "TTFT MAPE % as labelled (attention-DP ranks) | as the twins' configuration |",
            "|---:|---:|---:|---:|---:|",
            f"| {len(pairs)} | {d[:, 0].mean():.1f} / {np.median(d[:, 0]):.1f} | {d[:, 1].mean():.1f} / "
            f"{np.median(d[:, 1]):.1f} | {own[0]:.1f} / {own[2]:.1f} | {read[0]:.1f} / {read[2]:.1f} |", "",
            f"Every validation row with those {len(pairs)} read as their twins: TPOT MAPE {every[0]:.1f} %, TTFT MAPE "
            f"{every[2]:.1f} %, cliffs {cl[1]} of {cl[0]} predicted at the same step, {cl[2]} false."]


def batch_caps(row: dict[str, str]) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) vLLM picks on the row's GPU (kvdash.engines.vllm.scheduler_caps,
    vLLM 0.33's EngineArgs.get_batch_defaults: 8,192 tokens on H100/H200, 16,384 on B200/B300)."""
    if not CAPS:
        return MAX_SEQS, MAX_BATCHED
    from kvdash.engines.vllm import scheduler_caps

    gpu = get_gpu(GPUS[row["system"]])
    caps = scheduler_caps(gpu.memory_bytes, gpu.name, int(row["isl"]) + int(row["osl"]))
    return caps.max_num_seqs, caps.max_num_batched_tokens


def phases(users: int, spread: float, dp: int = 1, rank: int = 0) -> np.ndarray:
    """Where each user's first request stops, as a share of its output, so that the loop's later rounds run with
    the users' phases evenly spread over ``spread`` of a request: ``1 - spread + spread x (u + 1) / users``; with
    ``dp`` attention data-parallel ranks, the users of all ranks evenly spread and dealt round robin, this rank's
    (``rank``) share of them."""
    return 1 - spread + spread * (np.arange(users) * dp + rank + 1) / (users * dp)


def request_features(sched: Any, OUT: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every request's TTFT and TPOT as feature sums (rows: requests; columns: the step model's six features) from
    a closed loop's schedule: TTFT from its arrival (a segment's end; -1: time 0) to its first token, TPOT from
    the first token to the last over ``output - 1`` tokens."""
    cum = sched.cum
    arrived = np.where(sched.arrival_seg[:, None] < 0, 0, cum[np.maximum(sched.arrival_seg, 0)])
    return cum[sched.first_seg] - arrived, (cum[sched.finish_seg] - cum[sched.first_seg]) / (OUT - 1)[:, None]


def simulate_row(row: dict[str, str], per_user: int, spread: float = 1.0, link_scale: float = 1.0
                 ) -> dict[str, Any]:
    """The row's closed loop simulated with the users' phases spread over ``spread`` of a request
    (:data:`SPREAD_GRID`): the TTFT and TPOT features of the steady rounds, the first round's TTFT features
    (every user's request arriving at once), the pool's full-length capacity and the preemptions."""
    s = setup(row, link_scale)
    per_rank = rank_users(row, s["dp"])
    n = per_rank * per_user
    isl, osl = int(row["isl"]), int(row["osl"])
    rng = np.random.default_rng(0)
    P = np.maximum(1, np.rint(isl * rng.uniform(1 - JITTER, 1 + JITTER, n))).astype(np.int64)
    OUT = np.maximum(2, np.rint(osl * rng.uniform(1 - JITTER, 1 + JITTER, n))).astype(np.int64)
    measured = np.arange(n)
    burst = np.arange(n)
    if STAGGER != "0" and per_user > 1:
        # out of step: user u's first request stops after 1 - spread + spread x (u + 1) / users of the output, so
        # that the loop reaches its steady state with the users' phases evenly spread over that share of a
        # request (spread 1: over all of it); the steady rounds are measured.  The first
        # round is the other regime, in step: the users' requests arrive together (all at time 0) and are
        # prefilled in chunks of max_num_batched_tokens, the last of them after about users x ISL / budget steps
        # (``ttft_burst_f``; the benchmark's TTFT is a mix of the two, see IN_STEP)
        phase = phases(per_rank, spread) if STAGGER == "1" else rng.uniform(0, 1, per_rank)
        OUT[:per_rank] = np.maximum(2, np.rint(osl * phase)).astype(np.int64)
        measured = np.arange(per_rank, n)
        burst = np.arange(per_rank)
    seqs, batched = batch_caps(row)
    sched = simulate_timed(P, OUT, s["pool"], s["mc"], s["gpu"], Constants(), seqs, batched, concurrency=per_rank)
    ttft_all, tpot_all = request_features(sched, OUT)
    ttft_f, tpot_f = ttft_all[measured].mean(axis=0), tpot_all[measured].mean(axis=0)
    return {"ttft_f": ttft_f, "tpot_f": tpot_f, "ttft_burst_f": ttft_all[burst].mean(axis=0),
            "capacity": s["capacity"], "preemptions": sched.preemptions}


def nnls(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Least squares with non-negative coefficients, by trying every subset of free coefficients (7 of them)."""
    best, best_err = np.zeros(A.shape[1]), float(np.sum(b * b))
    for k in range(1, A.shape[1] + 1):
        for cols in itertools.combinations(range(A.shape[1]), k):
            x, *_ = np.linalg.lstsq(A[:, cols], b, rcond=None)
            if (x < 0).any():
                continue
            full = np.zeros(A.shape[1])
            full[list(cols)] = x
            err = float(np.sum((A @ full - b) ** 2))
            if err < best_err:
                best, best_err = full, err
    return best


def predict(f: np.ndarray, c: np.ndarray, ttft: bool = False) -> float:
    """Seconds from a row's split features (:func:`by_generation`) and the constants ``c`` (c_mem, c_flop, c_step,
    c_layer, c_allreduce, c_flop_blackwell, c_request): every feature but the last (the fixed seconds) times its
    constant, the fixed seconds, and the last constant (c_request) on a TTFT.  A reading with more feature columns
    before the fixed seconds (``steptime_readings.py``) has as many more constants before c_request."""
    return float(f[:-1] @ c[:-1] + f[-1] + (c[-1] if ttft else 0.0))


def blackwell(row: dict[str, str]) -> bool:
    """Whether the row's GPU is a Blackwell (compute capability 10.x: B200, B300), whose compute term has its own
    constant (:data:`kvdash.core.steptime.Constants.c_flop_blackwell`)."""
    return get_gpu(GPUS[row["system"]]).compute_capability.split(".")[0] == "10"


def by_generation(f: np.ndarray, row: dict[str, str]) -> np.ndarray:
    """The simulator's six features (memory s, compute s, 1, layers, all-reduces, fixed s) as seven: the compute
    seconds in the Hopper column or the Blackwell one (exact: every feature is linear in its constant)."""
    f = np.asarray(f, dtype=float)
    bw = blackwell(row)
    return np.array([f[0], 0.0 if bw else f[1], f[2], f[3], f[4], f[1] if bw else 0.0, f[5]])


def mape(pred: list[float], meas: list[float]) -> float:
    return 100 * float(np.mean([abs(p - m) / m for p, m in zip(pred, meas, strict=True)])) if pred else float("nan")


def mdape(pred: list[float], meas: list[float]) -> float:
    """The median absolute percentage error (a few rows far off move the mean, not the median)."""
    return 100 * float(np.median([abs(p - m) / m for p, m in zip(pred, meas, strict=True)])) if pred else float("nan")


def cliffs(series: list[tuple[int, float]]) -> set[int]:
    """Concurrency steps (the higher concurrency) where TTFT jumps CLIFF x or more."""
    out = set()
    s = sorted(series)
    for (_, t0), (c1, t1) in itertools.pairwise(s):
        if t0 > 0 and t1 / t0 >= CLIFF:
            out.add(c1)
    return out


BANDS = ((1, 8), (9, 32), (33, 128), (129, 2048))  # users (the largest row: 1,024 a rank x 2 ranks)


# validation groups the README discusses as not explained by the model, or not by the model alone: named after the
# largest errors were looked at, so the error without them is a reading, never the headline
DOUBTED: tuple[tuple[str, Any], ...] = (
    ("gpt-oss-120b on H100 at 512 users (about 100 decoding, most likely the client's limit: `in_flight`)",
     lambda r: r["model_path"] == "openai/gpt-oss-120b" and r["system"] == "h100_sxm" and users(r) == 512),
    ("gpt-oss-120b on B200 (its MoE kernel: the data does not say which ran)",
     lambda r: r["model_path"] == "openai/gpt-oss-120b" and r["system"] == "b200_sxm"),
    ("the attention data-parallel rows (they measure like runs without it)", lambda r: ranks(r) > 1),
    ("Qwen3-235B-A22B-FP8 (vLLM 0.12: TPOT flat with the users)",
     lambda r: r["model_path"] == "Qwen/Qwen3-235B-A22B-FP8"),
)


def doubted_table(ids: list[str], by_id: dict[str, dict[str, str]], sims: dict[str, dict[str, Any]],
                  coef: np.ndarray) -> list[str]:
    """The validation error without each :data:`DOUBTED` group, and without all of them."""
    out = ["| rows left out | rows kept | TPOT MAPE % | TTFT MAPE % |", "|---|---:|---:|---:|"]
    for label, test in DOUBTED:
        kept = [i for i in ids if not test(by_id[i])]
        e = errors(kept, by_id, sims, coef)
        out.append(f"| {label} | {len(kept)} | {e[0]:.1f} | {e[2]:.1f} |")
    kept = [i for i in ids if not any(test(by_id[i]) for _, test in DOUBTED)]
    e = errors(kept, by_id, sims, coef)
    return out + [f"| all four | {len(kept)} | {e[0]:.1f} | {e[2]:.1f} |"]


def breakdown(ids: list[str], by_id: dict[str, dict[str, str]], sims: dict[str, dict[str, Any]],
              coef: np.ndarray) -> list[str]:
    """Tables of the validation error by (model, GPU) and by concurrency band."""
    err: dict[str, tuple[float, float]] = {}
    for i in ids:
        r, s = by_id[i], sims[i]
        err[i] = (predict(s["tpot_f"], coef) * 1000 / float(r["silicon_tpot_ms"]) - 1,
                  predict(s["ttft_f"], coef, True) * 1000 / float(r["silicon_ttft_ms"]) - 1)
    n = len(ids)

    def line(label: str, group: list[str]) -> str:
        t = np.array([err[i][0] for i in group])
        f = np.array([err[i][1] for i in group])
        return (f"| {label} | {len(group)} | {100 * np.abs(t).mean():.1f} | {100 * t.mean():+.1f} | "
                f"{100 * np.abs(t).sum() / n:.1f} | {100 * np.abs(f).mean():.1f} | {100 * np.median(f):+.1f} | "
                f"{100 * np.abs(f).sum() / n:.1f} |")

    head = ["| {} | rows | TPOT MAPE % | TPOT bias % | TPOT points | TTFT MAPE % | TTFT bias % | TTFT points |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    out = [head[0].format("model, GPU"), head[1]]
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for i in ids:
        groups[(by_id[i]["model_path"].split("/")[1], by_id[i]["system"].split("_")[0].upper())].append(i)
    out += [line(f"{m} {g}", v) for (m, g), v in sorted(groups.items())]
    out += ["", head[0].format("concurrency"), head[1]]
    for lo, hi in BANDS:
        group = [i for i in ids if lo <= users(by_id[i]) <= hi]
        if group:
            out.append(line(f"{lo}-{hi}", group))
    return out


def split_generations(sims: dict[str, dict[str, Any]], by_id: dict[str, dict[str, str]]) -> None:
    """Every simulation's features (TPOT, TTFT, the first round's TTFT) split by the row's GPU generation
    (:func:`by_generation`), in place."""
    for i, sim in sims.items():
        for key in ("tpot_f", "ttft_f", "ttft_burst_f"):
            sim[key] = by_generation(np.asarray(sim[key]), by_id[i])


def fit_on_calibration(sims: dict[str, dict[str, Any]], by_id: dict[str, dict[str, str]],
                       in_step: float | None) -> np.ndarray:
    """Split the features by GPU generation, mix the TTFT (``in_step``; None: the features are already the
    measured mix) and fit the constants on the calibration rows, as :func:`main` does at its chosen pair (the
    readings and what-ifs under ``benchmarks/`` refit this way)."""
    split_generations(sims, by_id)
    if in_step is not None:
        mix_ttft(sims, in_step)
    return fit(sims, by_id, [i for i in sims if by_id[i]["model_path"] in CALIBRATION])


def room(row: dict[str, str], sim: dict[str, Any]) -> int:
    """Requests at full length (isl + osl) the pools of every attention data-parallel rank hold: the simulated
    rank's room times the ranks."""
    return int(sim["capacity"]) * setup(row)["dp"]


def mix_ttft(sims: dict[str, dict[str, Any]], in_step: float) -> None:
    """Each row's TTFT features: ``in_step`` of the round in step (the users' requests arriving together) and
    the rest out of step (the steady rounds)."""
    for s in sims.values():
        s.setdefault("ttft_steady_f", s["ttft_f"])
        s["ttft_f"] = (1 - in_step) * s["ttft_steady_f"] + in_step * s["ttft_burst_f"]


def fit(sims: dict[str, dict[str, Any]], by_id: dict[str, dict[str, str]], cal: list[str],
        floor: np.ndarray | None = None) -> np.ndarray:
    """The constants: non-negative least squares of the calibration rows' relative TPOT and TTFT errors, each at
    least its ``floor`` (default: c_mem and both c_flop at least 1, see below; a reading with more feature columns
    gives one a column, c_request last)."""
    A, b = [], []
    for i in cal:
        r, s = by_id[i], sims[i]
        # a row whose simulation preempts is in the cliff regime: its TTFT is queueing, which the fit of
        # step-time constants should not chase (the cliff itself is checked below)
        ttft_w = 0.0 if s["preemptions"] else TTFT_WEIGHT
        for f, m, w, req in ((s["tpot_f"], float(r["silicon_tpot_ms"]) / 1000, 1.0, 0.0),
                             (s["ttft_f"], float(r["silicon_ttft_ms"]) / 1000, ttft_w, 1.0)):
            A.append(w * np.append(f[:-1], req) / m)
            b.append(w * (1 - f[-1] / m))
    # (ttft weight 0.5: the benchmark's TTFT depends on how clients start, which the data does not say)
    A_, b_ = np.asarray(A), np.asarray(b)
    # physical bounds: no GPU beats its spec bandwidth or FLOP/s, so c_mem >= 1 and c_flop >= 1 (fitted as
    # 1 + a non-negative excess)
    if floor is None:
        floor = np.array([1.0, 1.0, 0, 0, 0, 1.0, 0]) if PHYSICAL else np.zeros(7)
    return nnls(A_, b_ - A_ @ floor) + floor


def _simulate_one(job: tuple[dict[str, str], int, float]) -> tuple[str, dict[str, Any] | str]:
    """One row's simulation (a worker of :func:`simulate_all`): its features, or why kvdash cannot model it."""
    row, per_user, spread = job
    try:
        return row["id"], simulate_row(row, per_user, spread)
    except Exception as exc:  # noqa: BLE001 - counted and reported
        return row["id"], f"{row['model_path']}: {type(exc).__name__}: {str(exc)[:80]}"


def simulate_all(rows: list[dict[str, str]], per_user: int, spread: float, jobs: int
                 ) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """Every row simulated at one phase spread, on ``jobs`` processes: (features by row id, skip reasons)."""
    work = [(r, per_user, spread) for r in rows]
    if jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(jobs) as pool:
            results = list(pool.map(_simulate_one, work, chunksize=8))
    else:
        results = [_simulate_one(w) for w in work]
    sims: dict[str, dict[str, Any]] = {}
    skipped: dict[str, int] = defaultdict(int)
    for rid, res in results:
        if isinstance(res, str):
            skipped[res] += 1
        else:
            sims[rid] = res
    return sims, skipped


SERIES_KEY = ("model_path", "system", "backend_version", "gemm_quant_mode", "tp_size", "attention_dp_size",
              "moe_ep_size", "isl", "osl")


def cliff_series(ids: list[str], by_id: dict[str, dict[str, str]], sims: dict[str, dict[str, Any]],
                 coef: np.ndarray) -> dict[tuple[str, ...], list[tuple[int, float, float, str]]]:
    """The concurrency series of these rows (one series: a model, GPU, engine version, precision, parallelism and
    ISL / OSL): (users, measured TTFT ms, kvdash TTFT ms, row id) of each row."""
    series: dict[tuple[str, ...], list[tuple[int, float, float, str]]] = defaultdict(list)
    for i in ids:
        r = by_id[i]
        series[tuple(r[k] for k in SERIES_KEY)].append(
            (users(r), float(r["silicon_ttft_ms"]), predict(sims[i]["ttft_f"], coef, True) * 1000, i))
    return series


def cliff_counts(ids: list[str], by_id: dict[str, dict[str, str]], sims: dict[str, dict[str, Any]],
                 coef: np.ndarray) -> tuple[int, int, int]:
    """(cliffs measured, predicted at the same step, predicted where none was measured) over the concurrency
    series of these rows (:func:`cliff_series`)."""
    measured = hit = false = 0
    for pts in cliff_series(ids, by_id, sims, coef).values():
        m = cliffs([(c, t) for c, t, _, _ in pts])
        p = cliffs([(c, t) for c, _, t, _ in pts])
        measured += len(m)
        hit += len(m & p)
        false += len(p - m)
    return measured, hit, false


def cliff_table(ids: list[str], by_id: dict[str, dict[str, str]], sims: dict[str, dict[str, Any]],
                coef: np.ndarray) -> list[str]:
    """Every concurrency series with a cliff, measured or predicted: the step of each (its users), the TTFT of the
    step before it and at it, measured and kvdash's, and the room kvdash's pool gives (requests at full length,
    every attention data-parallel rank): a cliff at fewer users than that room is not the pool's as kvdash sizes
    it."""
    out = ["| set | series (model, GPU, weights, TP / attention DP / EP, ISL / OSL, vLLM) | users | measured TTFT ms "
           "| kvdash TTFT ms | kvdash room | cliff |", "|---|---|---:|---:|---:|---:|---|"]
    for key, pts in sorted(cliff_series(ids, by_id, sims, coef).items()):
        m = cliffs([(c, t) for c, t, _, _ in pts])
        p = cliffs([(c, t) for c, _, t, _ in pts])
        steps = sorted(m | p)
        if not steps:
            continue
        by_users: dict[int, list[tuple[float, float, str]]] = defaultdict(list)
        for c, t, k, i in pts:
            by_users[c].append((t, k, i))
        order = sorted(by_users)
        model, system, version, quant, tp, dp, ep, isl, osl = key
        r0 = by_id[pts[0][3]]
        label = "calibration" if model in CALIBRATION else "validation"
        name = (f"{model.split('/')[-1]}, {system.split('_')[0].upper()}, {quant or r0['precision'] or 'not given'}, "
                f"{tp} / {dp or 1} / {ep or 1}, {int(isl):,} / {int(osl):,}, {version or 'not given'}")
        mean = {u: (float(np.mean([x[0] for x in v])), float(np.mean([x[1] for x in v]))) for u, v in by_users.items()}
        for c in steps:
            before = order[order.index(c) - 1]
            held = room(by_id[by_users[c][0][2]], sims[by_users[c][0][2]])
            verdict = ("predicted at the same step" if c in m and c in p else "missed" if c in m
                       else "false (none measured)")
            out.append(f"| {label} | {name} | {before} -> {c} | {mean[before][0]:,.0f} -> {mean[c][0]:,.0f} | "
                       f"{mean[before][1]:,.0f} -> {mean[c][1]:,.0f} | {held:,} | {verdict} |")
    return out


def pair_rank(t: tuple[float, float, float, float, int, int, int]) -> tuple[float, ...]:
    """How a (spread, share, calibration TPOT MAPE, TTFT MAPE, cliffs measured, hit, false) scan entry ranks,
    best first: cliffs missed + false cliffs, then the TTFT MAPE, then the wider spread, then the smaller share."""
    spread, share, _, ttft, measured, hit, false = t
    return (measured - hit + false, round(ttft, 6), -spread, share)


def best_pair(by_spread: dict[float, dict[str, dict[str, Any]]], by_id: dict[str, dict[str, str]],
              shares: tuple[float, ...]) -> tuple[float, float, list[tuple[float, float, float, float, int, int, int]]]:
    """The phase spread and share in step, chosen on the calibration rows only: each pair refitted, the one whose
    calibration cliffs are predicted best (cliffs missed + false cliffs, fewest), then the lowest calibration TTFT
    MAPE, then the wider spread.  Returns (spread, share, the scan: spread, share, calibration TPOT MAPE, TTFT MAPE,
    cliffs measured, hit, false)."""
    scan = []
    for spread, base in by_spread.items():
        cal = [i for i in base if by_id[i]["model_path"] in CALIBRATION]
        for w in shares:
            sims = {k: dict(v) for k, v in base.items()}
            mix_ttft(sims, w)
            c = fit(sims, by_id, cal)
            scan.append((spread, w,
                         mape([predict(sims[i]["tpot_f"], c) for i in cal],
                              [float(by_id[i]["silicon_tpot_ms"]) / 1000 for i in cal]),
                         mape([predict(sims[i]["ttft_f"], c, True) for i in cal],
                              [float(by_id[i]["silicon_ttft_ms"]) / 1000 for i in cal]),
                         *cliff_counts(cal, by_id, sims, c)))
    best = min(scan, key=pair_rank)
    return best[0], best[1], scan


def check_shares(ap: argparse.ArgumentParser, spread: float | None, in_step: float | None) -> None:
    """Refuse, in one line (exit 2), a phase spread outside (0, 1] or a share in step outside [0, 1]."""
    if spread is not None and not 0 < spread <= 1:
        ap.error(f"--spread {spread:g}: a share of a request, more than 0 and at most 1")
    if in_step is not None and not 0 <= in_step <= 1:
        ap.error(f"--in-step {in_step:g}: a share of the TTFT, 0 to 1")


def check_counts(ap: argparse.ArgumentParser, per_user: int, jobs: int) -> None:
    """Refuse, in one line (exit 2), fewer than one request a user or one process."""
    if per_user < 1:
        ap.error(f"--requests-per-user {per_user}: at least 1")
    if jobs < 1:
        ap.error(f"--jobs {jobs}: at least 1")


def errors(ids: list[str], by_id: dict[str, dict[str, str]], sims: dict, coef: np.ndarray) -> tuple[float, ...]:
    """(TPOT MAPE %, TPOT mean signed %, TTFT MAPE %, TTFT median signed %) of these rows."""
    pt = [predict(sims[i]["tpot_f"], coef) * 1000 for i in ids]
    pf = [predict(sims[i]["ttft_f"], coef, True) * 1000 for i in ids]
    mt = [float(by_id[i]["silicon_tpot_ms"]) for i in ids]
    mf = [float(by_id[i]["silicon_ttft_ms"]) for i in ids]
    return (mape(pt, mt), 100 * float(np.mean(np.array(pt) / mt - 1)), mape(pf, mf),
            100 * float(np.median(np.array(pf) / mf - 1)))


def simulations(rows: list[dict[str, str]], per_user: int, spread: float, cache: str) -> dict[str, dict]:
    """Every row's simulation at this spread with kvdash's kernels: from this script's --cache file where it holds
    them (:func:`load_cache`), else simulated here."""
    have = load_cache(Path(cache) if cache else None).get(f"{spread:g}", {})
    todo = [r for r in rows if r["id"] not in have]
    if todo:
        new, _ = simulate_all(todo, per_user, spread, os.cpu_count() or 1)
        have = {**have, **new}
    return as_arrays(have)


def load_cache(path: Path | None) -> dict[str, dict[str, Any]]:
    """The --cache file's simulations by phase spread (``{"0.4": {row id: features}}``); empty, saying why on
    stderr, where the file is missing, unreadable, not a cache or written by another CACHE_VERSION."""
    if path is None or not path.exists():
        return {}
    try:
        raw = json.loads(path.read_text())
        if raw.get("version") != CACHE_VERSION:
            print(f"{path}: written by another version of the simulation; simulating again", file=sys.stderr)
            return {}
        return dict(raw["by_spread"])
    except (OSError, ValueError, AttributeError, KeyError, TypeError) as e:
        print(f"{path}: not a simulation cache ({type(e).__name__}); simulating again", file=sys.stderr)
        return {}


def as_arrays(sims: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Cached simulations with their feature lists as numpy arrays again."""
    return {k: {kk: (np.asarray(vv) if isinstance(vv, list) else vv) for kk, vv in v.items()} for k, v in sims.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--requests-per-user", type=int, default=10)
    ap.add_argument("--in-step", type=float, default=None,
                    help="the share of the measured TTFT in step (default: chosen on the calibration rows from "
                         + ", ".join(f"{w:.3g}" for w in IN_STEP_GRID) + ")")
    ap.add_argument("--spread", type=float, default=None,
                    help="the share of a request the users' phases spread over in the steady rounds (default: "
                         "chosen on the calibration rows from " + ", ".join(f"{w:g}" for w in SPREAD_GRID) + ")")
    ap.add_argument("--limit", type=int, default=0, help="rows per model (0: all), for a quick run")
    ap.add_argument("--models", default="", help="comma-separated model_path values to simulate (default: all)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes simulating (default: cores)")
    ap.add_argument("--cache", default="", help="a JSON file of the simulated features, reused when present "
                                                "(the schedule does not depend on the constants)")
    args = ap.parse_args()
    check_shares(ap, args.spread, args.in_step)
    check_counts(ap, args.requests_per_user, args.jobs)
    with (DATA / "silicon_vllm_agg.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    unknown = sorted(set(filter(None, args.models.split(","))) - {r["model_path"] for r in rows})
    if unknown:
        ap.error(f"--models {','.join(unknown)}: not a model_path of the measured rows; one of "
                 f"{', '.join(sorted(CALIBRATION + VALIDATION))}")
    if args.models and not set(args.models.split(",")) & set(CALIBRATION):
        ap.error("--models: name at least one calibration model (the constants are fitted on them): "
                 f"{', '.join(sorted(CALIBRATION))}")
    per_model: dict[str, int] = defaultdict(int)
    chosen_rows = []
    for r in rows:
        if args.limit and per_model[r["model_path"]] >= args.limit:
            continue
        if args.models and r["model_path"] not in args.models.split(","):
            continue
        per_model[r["model_path"]] += 1
        chosen_rows.append(r)
    t0 = time.time()
    cache = Path(args.cache) if args.cache else None
    stored = load_cache(cache)
    spreads = [args.spread] if args.spread is not None else list(SPREAD_GRID)
    by_spread: dict[float, dict[str, dict[str, Any]]] = {}
    skipped: dict[str, int] = defaultdict(int)
    for spread in spreads:
        have = stored.setdefault(f"{spread:g}", {})
        todo = [r for r in chosen_rows if r["id"] not in have]  # rows skipped before are tried again
        new, skip = simulate_all(todo, args.requests_per_user, spread, args.jobs)
        for k, v in skip.items():
            skipped[k] = max(skipped[k], v)
        have.update({k: {kk: (vv.tolist() if isinstance(vv, np.ndarray) else vv) for kk, vv in v.items()}
                     for k, v in new.items()})
        wanted = {r["id"] for r in chosen_rows}
        by_spread[spread] = as_arrays({k: v for k, v in have.items() if k in wanted})
    if cache is not None:
        cache.write_text(json.dumps({"version": CACHE_VERSION, "by_spread": stored}))
    print(f"simulated {len(chosen_rows)} rows at {len(spreads)} phase spreads in {time.time() - t0:.0f} s; "
          f"skipped {sum(skipped.values())}", file=sys.stderr)
    for k, v in sorted(skipped.items()):
        print(f"  skipped {v}: {k}", file=sys.stderr)
    by_id = {r["id"]: r for r in rows}
    for sims in by_spread.values():  # the compute seconds in the column of the row's GPU generation
        split_generations(sims, by_id)
    # the phase spread and the share of the benchmark's TTFT in step, chosen on the calibration rows only
    shares = (args.in_step,) if args.in_step is not None else IN_STEP_GRID
    spread, in_step, scan = best_pair(by_spread, by_id, shares)
    sims = by_spread[spread]
    cal = [i for i in sims if by_id[i]["model_path"] in CALIBRATION]
    mix_ttft(sims, in_step)
    coef = fit(sims, by_id, cal)
    consts = Constants(*[float(x) for x in (*coef[:5], coef[6])], c_flop_blackwell=float(coef[5]),
                       fitted_on=f"benchmarks/steptime_fit.py on {len(cal)} measured vLLM rows of "
                                 "Llama-3.1-70B, Llama-3.1-8B-FP8, Qwen3-32B (aiconfigurator 0.12 silicon_sample)")
    lines = [f"Constants fitted on {len(cal)} calibration rows: c_mem {coef[0]:.4g} (achieved "
             f"{100 / coef[0] if coef[0] else float('inf'):.0f} % of HBM bandwidth), c_flop {coef[1]:.4g}, "
             f"c_step {coef[2] * 1e3:.4g} ms, c_layer {coef[3] * 1e6:.4g} us, c_allreduce {coef[4] * 1e6:.4g} us, "
             f"c_request {coef[6] * 1e3:.4g} ms, c_flop on Blackwell (B200, B300) {coef[5]:.4g} (achieved "
             f"{100 / coef[5] if coef[5] else float('inf'):.0f} % of the datasheet FLOP/s; elsewhere "
             f"{100 / coef[1] if coef[1] else float('inf'):.0f} %)", ""]
    if len(scan) > 1:
        lines += [f"The users' phases spread over {spread:g} of a request in the steady rounds, and the measured TTFT "
                  f"as {in_step:.3g} in step (every user's request arriving at once) and the rest out of step: the "
                  "pair chosen on the calibration rows (each pair refitted): the calibration cliffs predicted best "
                  "(missed + false, fewest), then the lowest calibration TTFT MAPE, then the wider spread. The best "
                  "share in step of each spread, and every share at the chosen spread:", "",
                  "| phase spread | share in step | calibration TPOT MAPE % | calibration TTFT MAPE % | "
                  "calibration cliffs predicted (of measured) | false cliffs |", "|---:|---:|---:|---:|---:|---:|"]
        per_spread = {sp: min((t for t in scan if t[0] == sp), key=pair_rank) for sp in by_spread}
        shown = sorted(set(per_spread.values()) | {t for t in scan if t[0] == spread}, key=lambda t: (-t[0], t[1]))
        lines += [f"| {sp:g} | {w:.3g}{' (chosen)' if (sp, w) == (spread, in_step) else ''} | {t:.1f} | {f:.1f} | "
                  f"{h} of {m} | {fa} |" for sp, w, t, f, m, h, fa in shown] + [""]
    else:
        lines += [f"The users' phases spread over {spread:g} of a request, the measured TTFT as {in_step:.3g} in step "
                  "and the rest out of step (`--spread`, `--in-step`).", ""]
    aic: dict[str, tuple[float, float]] = {}
    aic_path = ROOT / "benchmarks/results/aic_estimates.csv"
    if aic_path.exists():
        for a in csv.DictReader(aic_path.open()):
            if a["aic_ttft_ms"]:
                aic[a["id"]] = (float(a["aic_ttft_ms"]), float(a["aic_tpot_ms"]))
    table = ["| set | model | rows | TPOT MAPE % | TTFT MAPE % | TPOT / TTFT median APE % | cliffs measured | "
             "predicted at the same step | false cliffs |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    cmp = ["| model | rows (aiconfigurator estimated) | kvdash TPOT MAPE % | aiconfigurator TPOT MAPE % | "
           "kvdash TTFT MAPE % | aiconfigurator TTFT MAPE % |", "|---|---:|---:|---:|---:|---:|"]
    totals: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    cliff_tot: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for label, models in (("calibration", CALIBRATION), ("validation", VALIDATION)):
        for model in models:
            ids = [i for i in sims if by_id[i]["model_path"] == model]
            if not ids:
                continue
            pt = [predict(sims[i]["tpot_f"], coef) * 1000 for i in ids]
            pf = [predict(sims[i]["ttft_f"], coef, True) * 1000 for i in ids]
            mt = [float(by_id[i]["silicon_tpot_ms"]) for i in ids]
            mf = [float(by_id[i]["silicon_ttft_ms"]) for i in ids]
            meas_c, hit, false = cliff_counts(ids, by_id, sims, coef)
            cliff_tot[label][0] += meas_c
            cliff_tot[label][1] += hit
            cliff_tot[label][2] += false
            totals[label]["pt"] += pt
            totals[label]["mt"] += mt
            totals[label]["pf"] += pf
            totals[label]["mf"] += mf
            table.append(f"| {label} | {model} | {len(ids)} | {mape(pt, mt):.1f} | {mape(pf, mf):.1f} | "
                         f"{mdape(pt, mt):.1f} / {mdape(pf, mf):.1f} | {meas_c} | {hit} | {false} |")
            both = [i for i in ids if i in aic]
            if label == "validation" and both:
                k_pt = [predict(sims[i]["tpot_f"], coef) * 1000 for i in both]
                k_pf = [predict(sims[i]["ttft_f"], coef, True) * 1000 for i in both]
                m_t = [float(by_id[i]["silicon_tpot_ms"]) for i in both]
                m_f = [float(by_id[i]["silicon_ttft_ms"]) for i in both]
                a_t = [aic[i][1] for i in both]
                a_f = [aic[i][0] for i in both]
                totals["cmp"]["kt"] += k_pt
                totals["cmp"]["kf"] += k_pf
                totals["cmp"]["mt"] += m_t
                totals["cmp"]["mf"] += m_f
                totals["cmp"]["at"] += a_t
                totals["cmp"]["af"] += a_f
                cmp.append(f"| {model} | {len(both)} | {mape(k_pt, m_t):.1f} | {mape(a_t, m_t):.1f} | "
                           f"{mape(k_pf, m_f):.1f} | {mape(a_f, m_f):.1f} |")
    for label in ("calibration", "validation"):
        t = totals[label]
        c = cliff_tot[label]
        table.append(f"| **{label}** | all | {len(t['pt'])} | **{mape(t['pt'], t['mt']):.1f}** | "
                     f"**{mape(t['pf'], t['mf']):.1f}** | {mdape(t['pt'], t['mt']):.1f} / "
                     f"{mdape(t['pf'], t['mf']):.1f} | {c[0]} | {c[1]} | {c[2]} |")
    # rows that cannot have run their stated concurrency (measured TPOT under the spec-bandwidth floor of
    # tpot_floor): listed, and the validation error given without them beside the error on every row
    val_ids = [i for i in sims if by_id[i]["model_path"] in VALIDATION]
    floors = {i: tpot_floor(by_id[i]) for i in val_ids}
    below = [i for i in val_ids if floors[i] is not None and float(by_id[i]["silicon_tpot_ms"]) / 1000 < floors[i]]
    kept = [i for i in val_ids if i not in below]
    if below:
        k_t = [predict(sims[i]["tpot_f"], coef) * 1000 for i in kept]
        k_f = [predict(sims[i]["ttft_f"], coef, True) * 1000 for i in kept]
        m_t = [float(by_id[i]["silicon_tpot_ms"]) for i in kept]
        m_f = [float(by_id[i]["silicon_ttft_ms"]) for i in kept]
        table.append(f"| validation | all but the {len(below)} rows under the bandwidth floor (below) | {len(kept)} | "
                     f"{mape(k_t, m_t):.1f} | {mape(k_f, m_f):.1f} | {mdape(k_t, m_t):.1f} / {mdape(k_f, m_f):.1f} "
                     "| | | |")
    floor_lines = ["Rows whose measured TPOT is under the spec-bandwidth floor of their stated concurrency (the pool "
                   "holds every user at full length and vLLM's max_num_seqs admits them all, so each decode step reads "
                   "the dense weights, top-k experts a MoE layer and every user's KV at isl + osl / 2 tokens: "
                   "`tpot_floor`, no fitted constant): they did not keep that many requests decoding together, and "
                   "are kept in the error on every row above:", "",
                   "| row | concurrency | measured TPOT ms | floor ms | measured TTFT ms | kvdash TPOT ms |",
                   "|---|---:|---:|---:|---:|---:|"]
    floor_lines += [f"| {by_id[i]['id']} | {users(by_id[i])} | {float(by_id[i]['silicon_tpot_ms']):.2f} | "
                    f"{floors[i] * 1000:.2f} | {float(by_id[i]['silicon_ttft_ms']):,.0f} | "
                    f"{predict(sims[i]['tpot_f'], coef) * 1000:.2f} |" for i in sorted(below)]
    # every row whose own figures say fewer than half its users decoded together (in_flight), beside the room
    # kvdash gives them: where kvdash's pool and max_num_seqs admit every user, the wait was not the pool's
    waited = sorted((i for i in sims if in_flight(by_id[i]) < users(by_id[i]) / 2),
                    key=lambda i: (by_id[i]["model_path"], by_id[i]["id"]))
    if waited:
        floor_lines += ["", "Rows whose measured TTFT and TPOT say fewer than half their users were decoding at once "
                        "(`in_flight`, Little's law on the row's own figures: users x (osl - 1) x TPOT / (TTFT + "
                        "(osl - 1) x TPOT); no kvdash figure enters), beside the room kvdash's pool gives (full-length "
                        "requests, every attention data-parallel rank) and vLLM's max_num_seqs:", "",
                        "| row | set | users | in flight | kvdash room | max_num_seqs | measured TTFT ms | "
                        "kvdash TTFT ms |", "|---|---|---:|---:|---:|---:|---:|---:|"]
        for i in waited:
            r, s = by_id[i], sims[i]
            floor_lines.append(
                f"| {r['id']} | {'calibration' if r['model_path'] in CALIBRATION else 'validation'} | "
                f"{users(r)} | {in_flight(r):.1f} | {room(r, s):,} | "
                f"{batch_caps(r)[0]:,} | {float(r['silicon_ttft_ms']):,.0f} | "
                f"{predict(s['ttft_f'], coef, True) * 1000:,.0f} |")
    t = totals["cmp"]
    if t["kt"]:
        cmp.append(f"| **all** | {len(t['kt'])} | **{mape(t['kt'], t['mt']):.1f}** | "
                   f"**{mape(t['at'], t['mt']):.1f}** | "
                   f"**{mape(t['kf'], t['mf']):.1f}** | **{mape(t['af'], t['mf']):.1f}** |")
    out = "\n".join(lines + ["kvdash's time model against the measured rows (mean absolute percentage error):", ""]
                    + table + ["", "The same validation rows, kvdash against aiconfigurator 0.12 (its default "
                               "vLLM database), on the rows aiconfigurator estimated:", ""] + cmp
                    + ["", "Where the validation error is, by model and GPU and by concurrency (bias: the mean signed "
                       "error of TPOT and the median signed error of TTFT, + when kvdash predicts more; points: the "
                       "share of the validation MAPE the group carries):", ""]
                    + breakdown([i for i in sims if by_id[i]["model_path"] in VALIDATION], by_id, sims, coef)
                    + ["", "The validation error without the groups the README finds unexplained by the model alone "
                       "(named after the largest errors were seen: a reading, not the headline):", ""]
                    + doubted_table([i for i in sims if by_id[i]["model_path"] in VALIDATION], by_id, sims, coef)
                    + (["", *floor_lines] if below or waited else [])
                    + ["", "Every capacity cliff (a TTFT jump of 5x or more between consecutive concurrencies), "
                       "measured or predicted, with the room kvdash's pool gives at full length (`cliff_table`): a "
                       "measured cliff at fewer users than that room is one kvdash's pool does not explain as sized "
                       "(the runs' --kv-cache-dtype and memory settings are not in the data):", ""]
                    + cliff_table(list(sims), by_id, sims, coef)
                    + ["", "The data's own repeatability: configurations (model, GPU, formats, parallelism, lengths, "
                       "concurrency) measured under two engine versions, and how far the two runs' figures differ "
                       "(|a - b| / ((a + b) / 2), a version's repeated rows averaged; `version_pairs`, no kvdash "
                       "figure enters), and the least MAPE a model blind to the engine version reaches on the two runs "
                       "(|a - b| / (2 max(a, b)), `blind_floor`):", ""]
                    + repeatability_table(rows)
                    + ["", "The attention data-parallel rows against their twins: the rows of the same model, GPU, "
                       "engine version, formats, tensor parallelism and lengths run without attention data "
                       "parallelism at the same total users (`dp_twins`; no kvdash figure enters the differences). "
                       "They differ from their twins less than one configuration's runs under two engine versions "
                       "differ (above), so their runs show little of what data parallelism should change (a rank's "
                       "half or quarter of the users, the experts spread over two or four times the GPUs, the pools "
                       "of every rank); kvdash's error on them as "
                       "labelled, and with the twin's configuration (the headline keeps the labelled one):", ""]
                    + twin_table(rows, by_id, sims, coef))
    print(out)
    if args.write:
        (ROOT / "kvdash/data/steptime.json").write_text(json.dumps(
            {"c_mem": consts.c_mem, "c_flop": consts.c_flop, "c_step": consts.c_step, "c_layer": consts.c_layer,
             "c_allreduce": consts.c_allreduce, "c_request": consts.c_request,
             "c_flop_blackwell": consts.c_flop_blackwell, "fitted_on": consts.fitted_on},
            indent=2) + "\n")
        (ROOT / "benchmarks/results/steptime_validation.md").write_text(
            "# Step-time model: fit and validation (`python benchmarks/steptime_fit.py --write`)\n\n" + out + "\n\n"
            + NOTES + "\n")


if __name__ == "__main__":
    main()

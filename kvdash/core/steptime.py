"""The time of one engine step, from what it reads and what it computes (issue 28).

A step of a continuous-batching engine runs every scheduled token through the model once: the decode
tokens of running requests (one each) and the prefill chunks of requests being prefilled.  Its time is
modelled as a sum of physical terms, each a figure of the model, the GPU and the batch divided by a
GPU figure, with a few constants fitted in the open (``benchmarks/steptime_fit.py``)::

    t = c_mem x (weights read + routed experts' activations + KV read) / HBM bandwidth
      + c_flop x (linear FLOPs / dense FLOP/s of the weights' dtype + attention FLOPs / dense bf16 FLOP/s)
      + c_step + c_layer x layers + c_allreduce x all-reduces
      + all-reduce bytes / NVLink bandwidth

and every request's first token comes ``c_request`` seconds later than the steps alone say (the API server's
request handling and tokenization, and sampling's return to it: time outside the engine's steps).

* weights read: every dense weight of the rank (attention, dense MLPs, shared experts, router, LM head)
  plus, on MoE layers, the routed experts the step's tokens touch: ``E x (1 - (1 - k/E)^T)`` of ``E``
  experts for ``T`` tokens routed to ``k`` each, the expected number of distinct experts when tokens
  pick experts independently and uniformly;
* routed experts' activations: each token's row read by each of its ``k`` experts, their intermediates
  written and read back and their ``k`` partial outputs summed (``ModelCompute.act_bytes`` per token);
* KV read: for each decode token the KV its attention reads, from kvdash's own per-layer figures
  (:func:`kvdash.core.pool.layer_token_bytes` times the context, a sliding layer's capped at its
  window, and :func:`kvdash.core.pool.layer_state_bytes` for state layers, read and written);
  a prefill chunk reads its earlier context once;
* linear FLOPs: ``2 x active parameters x tokens`` (a MoE token runs ``k`` experts);
  attention FLOPs: ``2 x heads x (qk dim + v dim)`` per query-key pair per layer, the pairs of a causal
  chunk of ``q`` tokens after ``p`` earlier ones being ``q x p + q (q + 1) / 2`` (capped by a window);
* all-reduces: two per layer under tensor parallelism (after attention and after the MLP), each a
  ring over ``tp`` GPUs moving ``2 (tp - 1) / tp x tokens x hidden x 2 bytes`` per GPU, and one more per
  layer where the engine's attention exchanges a norm's statistics across the ranks (MiniMax-M2's q/k RMSNorm
  over all heads: :data:`NORM_REDUCES`; a few bytes a token, so its latency only).

``c_mem`` and ``c_flop`` are the inverse of the achieved fraction of the spec bandwidth and FLOP/s; the
others are seconds.  Everything here is per tensor-parallel rank (the ranks work in parallel).

Pure Python: the simulator calls the same functions with numpy arrays (through :mod:`kvdash.core.formulas`).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from typing import Any

from kvdash.core import formulas as f
from kvdash.core.model import Architecture
from kvdash.core.pool import layer_state_bytes, layer_token_bytes
from kvdash.errors import InputError

DATA = Path(__file__).resolve().parent.parent / "data"

# Bytes per weight of each storage format, scales included: fp8 with per-block scales (1/16,384 of the
# weights: left out), NVFP4 = 4 bits + one fp8 scale per 16 (NVIDIA's NVFP4 format), MXFP4 = 4 bits + one
# 8-bit scale per 32 (OCP Microscaling spec v1.0; gpt-oss's checkpoint), int4 weight-only = 4 bits + one
# bf16 scale per group of 32 (compressed-tensors pack-quantized, as Kimi-K2.5's checkpoint)
WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "nvfp4": 0.5625, "mxfp4": 0.53125, "int4_wo": 0.5625}
# the tensor-core rate a GEMM of these weights runs at (weight-only int4 and MXFP4 on Hopper compute in bf16)
GEMM_RATE = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "nvfp4": "fp4", "mxfp4": "fp4", "int4_wo": "bf16"}
ACT_BYTES = 2  # bf16 activations on the all-reduce
# GPU kernels one decoder layer runs in vLLM 0.33 (what the fitted per-layer constant pays for, in units of a
# dense layer): a dense layer 9 (RMSNorm, QKV GEMM, rotary, attention, O GEMM, RMSNorm, gate-up GEMM,
# SiLU-and-mul, down GEMM); a MoE layer replaces the MLP's 3 with the fused-MoE path's 7 (router GEMM,
# topk_softmax, moe_align_block_size, the w13 fused_moe kernel, SiLU-and-mul, the w2 fused_moe kernel, moe_sum:
# vllm/model_executor/layers/fused_moe/fused_moe.py, fused_experts_impl) and a shared expert adds 3
KERNELS = {"dense": 9, "moe": 13, "shared": 3}
# where a measured kernel model times the routed experts (moe_kernel: vLLM's FusedMoE module run from the router's
# logits, so routing, moe_align_block_size, both expert GEMMs, the activation and moe_sum), a MoE layer's other
# kernels are the dense layer's but its MLP's 3, plus the router GEMM, plus a shared expert's 3 (the measured
# module has none)
MLP_KERNELS, ROUTER_KERNELS = 3, 1
# model types whose attention, under tensor parallelism, all-reduces once more per layer: MiniMax-M2's q and k
# RMSNorm run over all heads, so each rank's partial variances are summed across the ranks before the norm
# (vLLM 0.33: MiniMaxM2Attention.forward -> MiniMaxText01RMSNormTP.forward_qkv -> minimax_qk_norm_fusion,
# vllm/model_executor/models/minimax_m2.py:240 and vllm/model_executor/layers/minimax_rms_norm/rms_norm_tp.py:409,
# a Lamport one-shot all-reduce fused with the norm up to 2,048 tokens, an eager all-reduce above; the vLLM
# 0.19 that ran the measured rows all-reduces in MiniMaxText01RMSNormTP.forward_qk).  The exchange moves two
# fp32 values a token: counted at c_allreduce (the fitted per-all-reduce latency), no link bytes
NORM_REDUCES = {"minimax_m2": 1}


_WIDER = {"fp4": ("fp4", "fp8", "bf16"), "fp8": ("fp8", "bf16"), "bf16": ("bf16",)}


@dataclass(frozen=True)
class GPUPerf:
    """The spec figures of a GPU the step model divides by (dense, no sparsity), with their source."""

    key: str
    hbm_bytes_per_s: float
    flops: dict[str, float]  # "bf16", "fp8", "fp4" -> dense tensor-core FLOP/s
    link_bytes_per_s: float  # NVLink per GPU, one direction (0: none)
    source: str

    def rate(self, kind: str) -> float:
        """FLOP/s of a GEMM kind; a kind the GPU lacks (fp4 on Hopper) runs at the next wider one."""
        for k in _WIDER[kind]:
            if self.flops.get(k):
                return self.flops[k]
        raise InputError("--gpu", self.key, "no bf16 FLOP/s figure for the time model")


def gpu_perf(key: str) -> GPUPerf:
    """The time-model figures of a GPU preset (``kvdash/data/gpus.json``, each with its public source)."""
    from kvdash.core.gpus import get_gpu

    try:
        gpu = get_gpu(key)
    except InputError as exc:  # an unknown name: the presets the time model can use, not every preset
        raise InputError(exc.field, key, "expected a GPU preset with bandwidth and FLOP/s figures: "
                         + ", ".join(sorted(_perf_presets()))) from exc
    if not gpu.hbm_bytes_per_s:
        raise InputError("--gpu", key, "the time model needs a GPU with bandwidth and FLOP/s figures: "
                         + ", ".join(sorted(k for k, g in _perf_presets().items())))
    return GPUPerf(gpu.key, float(gpu.hbm_bytes_per_s), {k: float(v) for k, v in gpu.flops.items()},
                   float(gpu.link_bytes_per_s), gpu.perf_source)


def _perf_presets() -> dict[str, Any]:
    from kvdash.core.gpus import gpu_presets

    return {k: g for k, g in gpu_presets().items() if g.hbm_bytes_per_s}


@dataclass(frozen=True)
class Constants:
    """The fitted constants (``benchmarks/steptime_fit.py`` writes ``kvdash/data/steptime.json``)."""

    c_mem: float = 1.25
    c_flop: float = 1.5
    c_step: float = 0.003
    c_layer: float = 0.0
    c_allreduce: float = 1e-5
    c_request: float = 0.0  # seconds every request spends outside the engine's steps before its first token
    fitted_on: str = "not fitted"
    # c_flop on a Blackwell GPU (compute capability 10.x: B200, B300), which reaches a smaller share of its
    # datasheet FLOP/s in the calibration rows than a Hopper; None: c_flop everywhere
    c_flop_blackwell: float | None = None
    c_flop_other: float | None = field(default=None, compare=False)  # set by on(): the c_flop it replaced

    def vector(self) -> tuple[float, float, float, float, float]:
        return (self.c_mem, self.c_flop, self.c_step, self.c_layer, self.c_allreduce)

    def on(self, gpu_key: str) -> Constants:
        """These constants for one GPU: ``c_flop`` is ``c_flop_blackwell`` on a Blackwell."""
        from dataclasses import replace

        from kvdash.core.gpus import get_gpu

        base = self if self.c_flop_other is None else replace(
            self, c_flop=self.c_flop_other, c_flop_other=None, fitted_on=self.fitted_on.split("; c_flop ")[0])
        if base.c_flop_blackwell is None or get_gpu(gpu_key).compute_capability.split(".")[0] != "10":
            return base
        return replace(base, c_flop=base.c_flop_blackwell, c_flop_other=base.c_flop,
                       fitted_on=f"{base.fitted_on}; c_flop {base.c_flop_blackwell:.4g} on a Blackwell GPU (its "
                                 f"calibration rows reached {100 / base.c_flop_blackwell:.0f} % of the datasheet "
                                 "FLOP/s)")


# the GPUs of the measured serving rows the constants were fitted and validated on (benchmarks/steptime_fit.py)
MEASURED_GPUS = ("h100-80gb", "h200", "b200", "b300")


def unmeasured_note(gpu_key: str) -> str | None:
    """What a GPU without measured rows means for its figures; None for one of :data:`MEASURED_GPUS`."""
    if gpu_key in MEASURED_GPUS:
        return None
    return (f"no measured serving row on {gpu_key}: the constants (fitted and validated on rows of "
            f"{', '.join(MEASURED_GPUS)}) are applied to its datasheet figures unchecked")


def fitted_constants(gpu_key: str | None = None) -> Constants:
    """The constants shipped in ``kvdash/data/steptime.json`` (fitted by ``benchmarks/steptime_fit.py``), for
    ``gpu_key``'s generation where given (:meth:`Constants.on`)."""
    path = DATA / "steptime.json"
    if not path.is_file():
        return Constants()
    raw = json.loads(path.read_text(encoding="utf-8"))
    consts = Constants(**{k: raw[k] for k in ("c_mem", "c_flop", "c_step", "c_layer", "c_allreduce", "c_request",
                                              "fitted_on")}, c_flop_blackwell=raw.get("c_flop_blackwell"))
    return consts.on(gpu_key) if gpu_key else consts


@dataclass(frozen=True)
class AttentionKind:
    """Attention layers of one kind on one rank: how many, their query heads, dims and window."""

    count: int
    q_heads: int
    qk_dim: int
    v_dim: int
    window: int  # 0: full attention
    prefill_qk_dim: int = 0  # MLA prefills un-absorbed (qk_nope + qk_rope, v_head_dim); 0: as decode
    prefill_v_dim: int = 0


@dataclass(frozen=True)
class ModelCompute:
    """What one step reads and computes on one tensor-parallel rank, apart from the batch."""

    name: str
    tp: int
    layers: int
    hidden: int
    dense_weight_bytes: float  # read every step
    dense_params: float  # linear parameters every token runs (per rank)
    moe_layers: int
    experts: int
    top_k: int
    expert_bytes: float  # one routed expert of one layer, per rank
    expert_params: float
    gemm: str  # "bf16", "fp8" or "fp4": the rate of the weights' GEMMs (of the routed experts' on a MoE model)
    attention: tuple[AttentionKind, ...]
    kv_full_bytes: int  # per token of context, every full/MLA layer of the rank (calc.layer_token_bytes)
    kv_window_bytes: int  # per token of context, every sliding layer of the rank
    window: int
    state_bytes: int  # per request, every state layer of the rank (calc.layer_state_bytes)
    weights_per_rank: int = 0  # resident weight bytes per rank (for the memory budget)
    dp: int = 1  # attention data-parallel ranks sharing the experts (their tokens reach every expert rank)
    layer_units: float = 0.0  # the per-layer fixed work in dense-layer equivalents (0: one per layer; see KERNELS)
    # the same where a measured kernel model times the routed experts (0: one per layer; see MLP_KERNELS)
    kernel_units: float = 0.0
    # the dense linear parameters by the rate their GEMMs run at, ((kind, params per rank), ...), summing to
    # dense_params: the compute term reads these (() : none, as a rank of routed experts alone)
    dense_rates: tuple[tuple[str, float], ...] = ()
    act_bytes: float = 0.0  # MLP activation bytes written and read back per token on this rank (see model_compute)
    expert_format: str = ""  # the routed experts' weight format (WEIGHT_BYTES key); "" : no routed experts
    norm_reduces: int = 0  # latency-only all-reduces a step beyond the two a layer (see NORM_REDUCES), on this rank
    # the LM head's parameters on this rank and the rate its GEMM is counted at: part of dense_params, which count
    # it for every token; a prefill chunk samples one token (see prefill_chunk_seconds)
    lm_head_params: float = 0.0
    lm_head_rate: str = "bf16"
    # the rate attention's query-key and value FLOPs run at: fp8 where the KV cache is fp8 and vLLM quantizes the
    # query to match (see model_compute), else bf16
    attn_rate: str = "bf16"
    counted: bool = True  # False: parameters taken from the weight figure (basis[0] says how), not from config.json
    basis: tuple[str, ...] = field(default=(), compare=False)

    def kv_read_bytes(self, context: Any) -> Any:
        """Bytes of KV one decode token with ``context`` tokens before it reads on this rank."""
        return (self.kv_full_bytes * context + self.kv_window_bytes * f.imin(context, self.window)
                + 2 * self.state_bytes)

    def touched_experts(self, tokens: float) -> float:
        """Expected distinct routed experts ``tokens`` tokens touch in one MoE layer."""
        if not self.moe_layers or tokens <= 0:
            return 0.0
        return self.experts * (1 - (1 - self.top_k / self.experts) ** tokens)

    def attn_pair_flops(self, prefill: bool = False) -> tuple[float, float]:
        """FLOPs per query-key pair, summed over the rank's (full, window) attention layers; ``prefill``: with
        the dims prefill runs at (MLA: un-absorbed heads)."""
        return self._pair_flops[prefill]

    @cached_property
    def _pair_flops(self) -> tuple[tuple[float, float], tuple[float, float]]:
        return self._pair_flops_of(False), self._pair_flops_of(True)

    def _pair_flops_of(self, prefill: bool) -> tuple[float, float]:
        def dims(a: AttentionKind) -> int:
            if prefill and a.prefill_qk_dim:
                return a.prefill_qk_dim + a.prefill_v_dim
            return a.qk_dim + a.v_dim

        full = sum(2 * a.count * a.q_heads * dims(a) for a in self.attention if not a.window)
        win = sum(2 * a.count * a.q_heads * dims(a) for a in self.attention if a.window)
        return float(full), float(win)


def causal_pairs(prior: Any, chunk: Any, window: int = 0) -> Any:
    """Query-key pairs of a causal chunk of ``chunk`` tokens after ``prior`` earlier ones: query ``i``
    (1-based) sees ``prior + i`` keys, or at most ``window``.

    >>> causal_pairs(0, 4), causal_pairs(10, 2), causal_pairs(10, 4, window=12)
    (10, 23, 47)
    """
    total = chunk * prior + chunk * (chunk + 1) // 2
    if not window:
        return total
    # queries that see more than the window: those with prior + i > window
    start = f.imax(window - prior, 0)  # queries 1..start see prior + i <= window
    start = f.imin(start, chunk)
    over = chunk - start
    capped = start * prior + start * (start + 1) // 2 + over * window
    return capped


def lm_head_seconds(mc: ModelCompute, gpu: GPUPerf) -> float:
    """Seconds of the LM head's GEMM for one token on this rank at the spec FLOP/s (the rate :func:`features` counts
    it at)."""
    return 2 * mc.lm_head_params / gpu.rate(mc.lm_head_rate) if mc.lm_head_params else 0.0


def prefill_chunk_seconds(mc: ModelCompute, prior: int, chunk: int, pair_flops: tuple[float, float],
                          flops_per_s: float, hbm_bytes_per_s: float, *, lm_head_s: float) -> tuple[float, float]:
    """(memory s, compute s) that a prefill chunk of ``chunk`` tokens after ``prior`` ones adds to its step at the
    spec figures: the prior tokens' KV read, and the chunk's causal query-key pairs at the prefill dims
    (``pair_flops``: :meth:`ModelCompute.attn_pair_flops` with ``prefill=True``, full and window layers), less the
    LM head of all but one of its tokens (``lm_head_s``: :func:`lm_head_seconds`): :func:`features` counts the
    head for every token, but vLLM computes logits only at each scheduled request's last token
    (``sample_hidden_states = hidden_states[logits_indices]``, ``logits_indices = query_start_loc[1:] - 1``,
    ``vllm/v1/worker/gpu_model_runner.py``), so a chunk of a 8,192-token prompt runs the head once, not 8,192
    times.  The one definition the timed simulators and the prefill-saved figures share."""
    full_pp, win_pp = pair_flops
    pw = causal_pairs(prior, chunk, mc.window) if mc.window else 0
    return (float(mc.kv_read_bytes(prior)) / hbm_bytes_per_s,
            (full_pp * causal_pairs(prior, chunk) + win_pp * pw) / flops_per_s - (chunk - 1) * lm_head_s)


def model_compute(cfg: dict[str, Any], arch: Architecture, tp: int, weights: str = "bf16",
                  experts_weights: str | None = None, kv_dtype: str = "bf16", scales: str = "tensor",
                  dp: int = 1, attention_weights: str | None = None) -> ModelCompute:
    """The per-rank figures of a model from its ``config.json`` (``text_config`` for multimodal ones)
    and its kvdash :class:`Architecture`: ``weights`` / ``experts_weights`` name the storage format of
    the dense and routed-expert weights (``bf16``, ``fp8``, ``nvfp4``, ``mxfp4``, ``int4_wo``);
    attention projections of gpt-oss stay bf16 (its checkpoint quantizes only the experts), and
    ``attention_weights`` names the attention projections' format where a checkpoint keeps them apart from
    the other dense weights (NVIDIA's NVFP4 checkpoints list ``self_attn`` in their quantization ``ignore``:
    bf16).  With ``dp``
    attention data-parallel ranks of ``tp`` GPUs each, the routed experts are split over all ``tp x dp``
    GPUs (expert parallelism) and every rank's tokens reach them."""
    from kvdash.core.model import _text_config
    from kvdash.core.modeltypes import aliases, parameter_parts

    for value in (weights, experts_weights or weights, attention_weights or weights):
        if value not in WEIGHT_BYTES:
            raise InputError("--weight-format", value, "expected one of: " + ", ".join(WEIGHT_BYTES))
    # the language model only: a vision encoder runs on images, which a text request does not send
    c = {k: v for k, v in aliases(_text_config(cfg)).items() if k not in ("vision_config", "audio_config")}
    parts = parameter_parts(c, arch)
    fallback = ""
    if parts is None:
        if not (arch.weights_known and arch.weight_bytes and arch.hidden_size):
            # say what is lacking: a weight figure given beside a model without a hidden size (--layers ... alone)
            # was asked for again (a helper's trial)
            if arch.weights_known and arch.weight_bytes:
                raise InputError("--model", arch.name, "the time model needs the model's hidden size besides its "
                                 "weight figure, which a model given by its dimensions alone lacks: give its "
                                 "config.json (--model PATH)")
            raise InputError("--model", arch.name, "the time model needs a config kvdash can count parameters of "
                             "(a supported model_type with its MLP and expert sizes) or a weight figure (--weights)")
        # hybrids and other types kvdash does not count: every weight read each step, one FLOP pair per weight
        # byte pair (bf16); a MoE among them is overstated (all experts read)
        n = arch.weight_bytes // 2
        parts = {"embedding": 0, "lm_head": 0, "attention": 0, "dense_mlp": n, "shared": 0, "router": 0,
                 "experts_total": 0, "expert_params": 0, "moe_layers": 0, "experts": 0, "top_k": 0,
                 "hidden": arch.hidden_size, "vocab": 0}
        if weights not in ("bf16", "fp16") or experts_weights not in (None, "bf16", "fp16"):  # fp16: 2 B, as bf16
            raise InputError("--weight-format", experts_weights if weights in ("bf16", "fp16") else weights,
                             f"bf16 only for {arch.name} (or fp16, 2 B a parameter too): the time model cannot count "
                             "its parameters from its config "
                             f"({arch.model_type}, no MLP sizes kvdash reads), so it reads the weight figure "
                             f"({arch.weight_basis}) at 2 B a parameter; give --config with the model's full "
                             "config.json")
        weights = experts_weights = "bf16"
        fallback = (f"parameters not counted from config.json ({arch.model_type}): {n:,} taken from the weight "
                    f"figure ({arch.weight_basis}) at 2 B each, all read every step")
    if experts_weights is None and weights == "bf16":
        # the checkpoint's own expert format where the config names one: every gpt-oss release stores its experts in
        # MXFP4 (`quantization_config.quant_method` "mxfp4", the rest bf16: `modules_to_not_convert`), as calc's
        # weight figure for it does; reading them as bf16 would count 233 GB for gpt-oss-120b instead of about 65
        quant = c.get("quantization_config") or {}
        if (isinstance(quant, dict) and quant.get("quant_method") == "mxfp4") or arch.model_type == "gpt_oss":
            experts_weights = "mxfp4"
    ew = experts_weights or weights
    dense_fmt = "bf16" if arch.model_type == "gpt_oss" else weights
    attn_fmt = attention_weights or dense_fmt
    dense_b, expert_b = WEIGHT_BYTES[dense_fmt], WEIGHT_BYTES[ew]
    h = parts["hidden"]
    lm_head = parts["vocab"] * h  # read every step (the embedding lookup reads a row per token: left out)
    dense_linear = parts["attention"] + parts["dense_mlp"] + parts["shared"] + parts["router"]
    attn_bytes = parts["attention"] * WEIGHT_BYTES[attn_fmt]
    mlp_bytes = (parts["dense_mlp"] + parts["shared"]) * dense_b + parts["router"] * 2
    dense_bytes = (attn_bytes + mlp_bytes) / tp + lm_head * 2 / tp
    kinds = Counter((layer.kind, layer.window) for layer in arch.layers if not layer.is_state)
    q_heads = max(1, arch.num_attention_heads // tp)
    attention = []
    for (kind, window), count in sorted(kinds.items()):
        layer = arch.first(kind)
        assert layer is not None
        pqk = pv = 0
        if kind == "mla":  # decode absorbed: queries attend over the latent (kv_lora_rank + rope), values the latent;
            # prefill un-absorbed (vLLM's MLA prefill path): qk_nope + qk_rope per head, v_head_dim
            qk, v = layer.latent_dim, layer.kv_lora_rank
            pqk = int(c.get("qk_nope_head_dim") or 0) + layer.qk_rope_head_dim
            pv = int(c.get("v_head_dim") or 0)
            if not pqk or not pv:
                pqk = pv = 0
        else:
            qk, v = layer.head_dim, layer.head_dim_v or layer.head_dim
        attention.append(AttentionKind(count, q_heads, qk, v, window if kind in ("sliding", "chunked") else 0, pqk, pv))
    full = sum(layer_token_bytes(layer, kv_dtype, scales, tp) for layer in arch.layers if layer.kind in ("full", "mla"))
    win_layers = [layer for layer in arch.layers if layer.kind in ("sliding", "chunked")]
    win = sum(layer_token_bytes(layer, kv_dtype, scales, tp) for layer in win_layers)
    state = sum(layer_state_bytes(layer, tp) for layer in arch.state_layers)
    # held once: a tied LM head is the embedding itself (parts' lm_head 0), though read every step as the head
    resident = (parts["embedding"] * 2 + parts["lm_head"] * 2 + attn_bytes + mlp_bytes
                + parts["experts_total"] * parts["expert_params"] * expert_b)
    n_layers = arch.decoder_layers or arch.num_layers
    units = float(n_layers)
    kernel_units = float(n_layers)
    if parts["moe_layers"]:
        shared = KERNELS["shared"] if parts["shared"] else 0
        units += parts["moe_layers"] * (KERNELS["moe"] - KERNELS["dense"] + shared) / KERNELS["dense"]
        kernel_units += parts["moe_layers"] * (ROUTER_KERNELS - MLP_KERNELS + shared) / KERNELS["dense"]
    # each dense GEMM at the rate of its own weights: attention projections at theirs (bf16 where the checkpoint
    # keeps them so), the dense MLPs, shared experts, router and LM head at the dense weights' (the router and
    # LM head, stored bf16, are left at that rate: a simplification that keeps the dense models' figures)
    rate: dict[str, float] = {}
    for kind, params in ((GEMM_RATE[attn_fmt], parts["attention"]),
                         (GEMM_RATE[dense_fmt], parts["dense_mlp"] + parts["shared"] + parts["router"] + lm_head)):
        rate[kind] = rate.get(kind, 0.0) + params / tp
    rates = tuple(sorted((k, float(v)) for k, v in rate.items() if v))
    # gpt-oss's MXFP4 experts run with bf16 activations on every GPU here: vLLM 0.33 picks the first supported of
    # _get_priority_backends_for_gpt_oss (vllm/model_executor/layers/fused_moe/oracle/mxfp4.py):
    # FLASHINFER_TRTLLM_MXFP4_BF16 on SM100, TRITON (matmul_ogs, bf16 activations) on Hopper
    expert_rate = "bf16" if arch.model_type == "gpt_oss" and ew == "mxfp4" else GEMM_RATE[ew]
    # the routed experts' activations, per token (bf16), as vLLM 0.33's fused_experts_impl moves them
    # (vllm/model_executor/layers/fused_moe/fused_moe.py): the token's row is read once for each of its k experts
    # by the w13 kernel, which writes intermediate_cache1 (2 I on this rank); SiLU-and-mul reads it and writes
    # intermediate_cache2 (I), which the w2 kernel reads, writing k partial outputs (intermediate_cache3, hidden
    # each) that moe_sum reads back: k x (3 hidden + 6 I) x 2 B per MoE layer.  Grouped expert GEMMs of T x k / E
    # rows each stream these under their weights; a dense MLP's activations, once per token and under GEMMs
    # that are compute-bound in prefill, are left out (counted the same way they make the calibration fit worse)
    act = 0.0
    if parts["moe_layers"] and h:
        act = parts["moe_layers"] * expert_act_bytes(h, parts["top_k"], parts["expert_params"], tp)
    return ModelCompute(
        name=arch.name, tp=tp, layers=n_layers, hidden=h, layer_units=units, kernel_units=kernel_units, act_bytes=act,
        dense_weight_bytes=dense_bytes, dense_params=(dense_linear + lm_head) / tp,
        lm_head_params=lm_head / tp, lm_head_rate=GEMM_RATE[dense_fmt],
        attn_rate="fp8" if kv_dtype.startswith("fp8") and not arch.use_mla else "bf16",
        moe_layers=parts["moe_layers"], experts=parts["experts"], top_k=parts["top_k"],
        expert_bytes=parts["expert_params"] * expert_b / (tp * dp), expert_params=parts["expert_params"] / tp,
        gemm=expert_rate if parts["moe_layers"] else GEMM_RATE[weights], attention=tuple(attention), dense_rates=rates,
        kv_full_bytes=full, kv_window_bytes=win, window=win_layers[0].window if win_layers else 0,
        state_bytes=state, dp=dp, expert_format=ew if parts["moe_layers"] else "",
        norm_reduces=NORM_REDUCES.get(arch.model_type, 0) * n_layers if tp > 1 else 0, counted=not fallback,
        weights_per_rank=math.ceil(resident / tp - parts["experts_total"] * parts["expert_params"] * expert_b
                                   * (1 / tp - 1 / (tp * dp))),
        basis=(fallback or f"weights {dense_fmt} (experts {ew}"
               + (f", attention {attn_fmt}" if attn_fmt != dense_fmt else "")
               + f"): {WEIGHT_BYTES[dense_fmt]:g} / {WEIGHT_BYTES[ew]:g} B per parameter, parameters counted from "
               "config.json",))


def expert_act_bytes(hidden: int, top_k: int, expert_params: float, tp: int) -> float:
    """Activation bytes one token's routed experts move in one MoE layer on a rank (``k x (3 hidden + 6 I) x 2 B``,
    ``I = expert_params / (3 hidden tp)`` the expert's width on the rank; see :func:`model_compute`)."""
    return top_k * ACT_BYTES * (3 * hidden + 6 * expert_params / (3 * hidden * tp))


def moe_layer_terms(mc: ModelCompute, gpu: GPUPerf, tokens: Any) -> tuple[Any, Any]:
    """The routed experts of one MoE layer on this rank for a step of ``tokens`` tokens, at the spec figures:
    (seconds to read the experts the tokens touch and move their activations, seconds of their GEMM FLOPs); for a
    model with MoE layers only (:func:`features` asks it only then)."""
    mem = (mc.touched_experts(tokens * mc.dp) * mc.expert_bytes
           + mc.act_bytes / mc.moe_layers * tokens) / gpu.hbm_bytes_per_s
    return mem, 2 * mc.top_k * mc.expert_params * tokens / gpu.rate(mc.gemm)


@dataclass(frozen=True)
class MoeKernel:
    """A fused-MoE layer's measured time on a GPU for one expert format: ``a_s + b x memory s + c x compute s``
    of :func:`moe_layer_terms` (fitted on kernel measurements by ``benchmarks/moe_kernels.py``)."""

    a_s: float
    b: float
    c: float
    points: int
    source: str


@cache
def moe_kernel(gpu_key: str, expert_format: str) -> MoeKernel | None:
    """The measured fused-MoE kernel model of ``kvdash/data/moe_kernels.json`` for this GPU and expert format,
    or None (the roofline at ``c_mem`` / ``c_flop`` then stands for the experts).  fp16 experts take bf16's: the
    same 2 bytes and the same tensor-core rate (:data:`GEMM_RATE`; --weight-format auto reads a float16
    checkpoint as fp16)."""
    doc = json.loads((DATA / "moe_kernels.json").read_text(encoding="utf-8"))
    entry = doc["gpus"].get(gpu_key, {}).get("bf16" if expert_format == "fp16" else expert_format)
    if entry is None:
        return None
    return MoeKernel(entry["a_s"], entry["b"], entry["c"], entry["points"], doc["source"])


def features(mc: ModelCompute, gpu: GPUPerf, tokens: float, decode_kv_bytes: float, pairs_full: float,
             pairs_window: float, prefill_kv_bytes: float = 0.0) -> tuple[float, float, float, float, float, float]:
    """The step's terms before the constants: (memory s, compute s, 1, layers, all-reduces, fixed s) at
    the spec figures, for ``tokens`` scheduled tokens, ``decode_kv_bytes`` of KV the decode tokens read,
    the causal query-key pairs of the prefill chunks (full and window layers) and the KV they read.  The fixed
    seconds are the links' time and, where :func:`moe_kernel` has a measured model for the GPU and the experts'
    format, the routed experts' (then out of the memory and compute terms, and the layer units count only the
    kernels the measured module does not run: ``kernel_units``, see MLP_KERNELS)."""
    kernel = moe_kernel(gpu.key, mc.expert_format) if mc.moe_layers else None
    moe_mem, moe_cmp = moe_layer_terms(mc, gpu, tokens) if mc.moe_layers else (0.0, 0.0)
    fixed: Any = 0.0
    if kernel is not None:
        fixed = mc.moe_layers * (kernel.a_s * f.imin(tokens, 1) + kernel.b * moe_mem + kernel.c * moe_cmp)
        moe_mem = moe_cmp = 0.0
    mem = (mc.dense_weight_bytes + decode_kv_bytes + prefill_kv_bytes) / gpu.hbm_bytes_per_s + mc.moe_layers * moe_mem
    full, win = mc.attn_pair_flops()
    attn = full * pairs_full + win * pairs_window
    comp = (mc.moe_layers * moe_cmp
            + sum(2 * p * tokens / gpu.rate(kind) for kind, p in mc.dense_rates) + attn / gpu.rate(mc.attn_rate))
    reduces = 2 * mc.layers if mc.tp > 1 else 0
    link = 0.0
    if mc.tp > 1 and gpu.link_bytes_per_s:
        link = reduces * 2 * (mc.tp - 1) / mc.tp * tokens * mc.hidden * ACT_BYTES / gpu.link_bytes_per_s
    gathers = 0
    if mc.dp > 1 and mc.moe_layers:
        # attention data parallel: each MoE layer all-gathers the dp ranks' tokens and reduce-scatters the result
        # (vLLM 0.33's default all2all_backend "allgather_reducescatter", vllm/config/parallel.py): two
        # collectives, each bringing (dp - 1) ranks' tokens of hidden x 2 bytes to every GPU
        gathers = 2 * mc.moe_layers
        if gpu.link_bytes_per_s:
            link += gathers * (mc.dp - 1) * tokens * mc.hidden * ACT_BYTES / gpu.link_bytes_per_s
    units = float(mc.kernel_units or mc.layers) if kernel is not None else float(mc.layer_units or mc.layers)
    return (mem, comp, 1.0, units, float(reduces + gathers + mc.norm_reduces), link + fixed)


def step_seconds(x: tuple[float, ...], c: Constants) -> float:
    """The step time from :func:`features` and the constants."""
    v = c.vector()
    return v[0] * x[0] + v[1] * x[1] + v[2] * x[2] + v[3] * x[3] + v[4] * x[4] + x[5]

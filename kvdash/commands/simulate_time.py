"""``kvdash simulate --time``: the paged simulator in seconds, and the highest load meeting an SLO (issue 28)."""

import json
from pathlib import Path
from typing import Any

from kvdash.core import limits
from kvdash.errors import InputError
from kvdash.simulate.slo import (  # noqa: F401
    SLO_KEYS,
    SLO_PERCENTILE,
    meets,
    parse_slo,
    poisson_short_note,
    run_point,
    short_run_note,
    slo_search,
)


def vllm_batch_defaults(memory_bytes: int, gpu_name: str, max_model_len: int = 131072) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) vLLM 0.33 picks for ``vllm serve`` on a GPU: kvdash's one mirror,
    :func:`kvdash.engines.vllm.scheduler_caps` (``EngineArgs`` in ``vllm/engine/arg_utils.py``)."""
    from kvdash.engines.vllm import scheduler_caps

    caps = scheduler_caps(memory_bytes, gpu_name, max_model_len)
    return caps.max_num_seqs, caps.max_num_batched_tokens


def model_config(model: str, config: str | None) -> dict[str, Any]:
    """The config.json dictionary of a preset or a file, for the time model's parameter counts, as the engine reads
    it (:func:`kvdash.core.model.engine_config`)."""
    from kvdash.core.model import DATA, engine_config

    if config:
        return engine_config(config)
    path = DATA / "models" / f"{model.lower()}.json"
    if not path.is_file():
        given = Path(model)
        if given.is_dir():  # a checkpoint's folder: its config.json, as resolve_model reads it
            given = given / "config.json"
        return engine_config(given)
    return engine_config(path)


def main(o: dict[str, Any]) -> None:
    """The ``--time`` branch of ``kvdash simulate`` (``o``: its options, validated as far as the pool shape)."""
    from dataclasses import replace

    from kvdash.answer.budget import BudgetSpec, resolve_budget
    from kvdash.calibration import reserve_spec, with_reserve
    from kvdash.commands.common import check_budget_options, parse_budget, warn
    from kvdash.core.gpus import get_gpu
    from kvdash.core.steptime import fitted_constants, gpu_perf, moe_kernel, unmeasured_note
    from kvdash.engines.vllm import stored_kv_dtype, timed_compute
    from kvdash.simulate.lengths import parse_lengths_spec
    from kvdash.simulate.timed import Pool
    from kvdash.simulate.workload import PRESETS, Lengths, draw_requests, read_trace, trace_name

    arch, shape, tp = o["arch"], o["shape"], o["tp"]
    if not o["gpu"]:
        raise InputError("--gpu", None, "--time needs a GPU preset with bandwidth and FLOP/s figures (e.g. h100-80gb)")
    if o["slo"] and not o["time_model"]:
        raise InputError("--slo", o["slo"], "needs --time")
    slo = parse_slo(o["slo"]) if o["slo"] else None
    gpu = get_gpu(o["gpu"])
    perf = gpu_perf(gpu.key)
    cfg = model_config(o["model"], str(o["config"]) if o["config"] else None)
    from kvdash.units import parse_size

    arch = with_weight_figure(arch, o["weights"])
    mc = timed_compute(cfg, arch, tp, o["weight_format"], o["kv_dtype"])  # auto: experts and attention too
    wf, wf_basis = timed_weight_format(cfg, o["weight_format"], mc)
    stored = stored_kv_dtype(arch, o["kv_dtype"])[0]  # the cache vLLM keeps (auto: the checkpoint's)
    seqs_d, tokens_d = vllm_batch_defaults(gpu.memory_bytes, gpu.name)
    seqs = seqs_d if o["max_num_seqs"] is None else o["max_num_seqs"]  # 0 is refused below, not the default
    batched = tokens_d if o["max_batched_tokens"] is None else o["max_batched_tokens"]
    for name, value in (("--max-num-seqs", seqs), ("--max-batched-tokens", batched)):
        limits.check_int(name, value)  # calc's ranges: 1 to 2^32 sequences, 1 to 2^26 tokens
    notes = check_budget_options(o["budget"], o["gpu"], None, o["gpu_util"], "vllm", o["weights"], o["reserve"])

    weights = parse_size(o["weights"], "--weights", allow_zero=True) if o["weights"] else mc.weights_per_rank * tp
    spec = BudgetSpec(bytes=parse_budget(o["budget"]), gpu=o["gpu"], util=o["gpu_util"], weights=weights,
                      weights_basis="" if o["weights"] else f"the time model's count: {mc.basis[0]}")
    spec = with_reserve(spec, reserve_spec(o["reserve"], arch, o["gpu"], tp, 1, batched))
    binfo = resolve_budget(spec, arch, tp, 1)
    for line in notes:
        warn(line)
    pool = Pool.of(shape, binfo["per_rank_bytes"])
    w = PRESETS[o["workload"]] if o["workload"] in PRESETS else None
    if w is None:
        raise InputError("--workload", o["workload"], "expected one of: " + ", ".join(PRESETS))
    if o["trace"] is not None:
        prompts, outputs = read_trace(str(o["trace"]), o["requests"], o["max_bytes"])
        w = replace(w, name=trace_name(o["trace"].name, len(prompts), o["requests"]), prompt=Lengths("trace", values=prompts),
                    output=Lengths("trace", values=outputs), synthetic=False)
    if o["prompt"]:
        w = replace(w, prompt=parse_lengths_spec(o["prompt"], "--prompt"), synthetic=False)
    if o["output"]:
        w = replace(w, output=parse_lengths_spec(o["output"], "--output"), synthetic=False)
    if o["prompt"] or o["output"]:  # the header and setup.workload name the lengths that ran, not the preset's
        w = replace(w, name=f"prompt {o['prompt'] or w.name}, output {o['output'] or w.name}")
    max_len = o["max_len"]
    w = replace(w, requests=o["requests"], rate=1.0, clip=o["clip"], arrival="closed", concurrency=1)
    if max_len > arch.max_context:  # as the length simulation refuses it (a request past the context never runs)
        raise InputError("--max-reserved", max_len, f"at most the model's context length ({arch.max_context:,})")
    reqs = draw_requests(w, o["seed"], max_len)
    prompt, output = reqs.prompt, reqs.output
    if (longest := int(reqs.final.max())) > arch.max_context:
        raise InputError("--trace" if o["trace"] is not None else "--prompt" if o["prompt"] else "--output",
                         f"{longest:,} tokens", f"requests of at most the model's context length "
                                                f"({arch.max_context:,} tokens, prompt + output)")
    if int(pool.request_blocks(longest)) > pool.blocks:
        raise InputError("--budget", f"{pool.blocks:,} blocks", "the pool cannot hold the longest request")
    mean_len = int(round(float(reqs.final.mean())))
    kv_requests = pool.blocks // int(pool.request_blocks(max(mean_len, 1)))
    consts = fitted_constants(perf.key)
    setup = {"pool": pool, "mc": mc, "gpu": perf, "consts": consts, "max_num_seqs": seqs, "max_batched": batched,
             "tp": tp, "kv_requests": kv_requests}
    conc = o["concurrency"]
    rate = o["rate"]
    res = run_point(setup, prompt, output, concurrency=conc or 0, rate=0.0 if conc else rate, seed=o["seed"])
    search = None
    if slo:
        from kvdash.commands.common import working

        with working(f"searching the load that meets {o['slo']} (timed simulations)"):
            search = slo_search(setup, prompt, output, slo, o["seed"])
    info = {"model": arch.name, "gpu": gpu.key, "tp": tp, "kv_dtype": stored, "weight_format": wf,
            "block_size": shape.block_size, "pool_blocks": pool.blocks, "budget_bytes": binfo["per_rank_bytes"],
            "max_num_seqs": seqs, "max_num_batched_tokens": batched, "workload": w.name, "requests": len(prompt),
            "arrival": f"closed loop of {conc:,}" if conc else f"Poisson, {rate:,g} requests/s",
            "kv_capacity_requests": kv_requests, "mean_request_tokens": mean_len,
            "constants": consts.fitted_on, "gpu_figures": perf.source,
            "measured_error": "benchmarks/results/steptime_validation.md (fit on dense models, validated on MoE rows)",
            "scheduler": "vLLM v1 Scheduler.schedule() rules (vllm/v1/core/sched/scheduler.py, vLLM 0.33.0) in seconds"}
    kernel = moe_kernel(perf.key, mc.expert_format) if mc.moe_layers else None
    if mc.moe_layers:
        info["routed_experts"] = (
            f"measured fused-MoE kernel model for {mc.expert_format} experts on {perf.key} (kvdash/data/moe_kernels.json"
            f", from {kernel.source})" if kernel is not None else
            f"roofline at the dense constants (no kernel measurement for {mc.expert_format} experts on {perf.key})")
    if mc.moe_layers:  # the routed experts' own format (gpt-oss's MXFP4, Kimi-K2.5's int4) beside the dense one
        info["expert_weight_format"] = mc.expert_format
    info["weights_per_rank_bytes"] = int(mc.weights_per_rank)
    if o["weights"] and mc.counted:  # two figures: say which serves what (a helper's trial: --weights went unsaid)
        from kvdash.core import formulas as f

        info["budget_weights_per_rank_bytes"] = int(f.weights_per_rank(weights, tp))
        info["weights_budget"] = (f"--weights {info['budget_weights_per_rank_bytes']:,} B per rank sizes the KV budget; "
                                  f"each step reads the counted {int(mc.weights_per_rank):,} B per rank")
    if wf_basis:
        info["weight_format_basis"] = wf_basis
    if not mc.counted:
        info["parameters"] = mc.basis[0]
    if unmeasured := unmeasured_note(perf.key):
        info["gpu_extrapolated"] = unmeasured
    if short := (short_run_note(len(prompt), conc) if conc else poisson_short_note(len(prompt), res, rate)):
        info["short_run"] = short
    if mc.norm_reduces:
        info["all_reduces"] = (f"{2 + mc.norm_reduces // mc.layers} a layer under TP {tp}: the attention's and the MLP's, "
                               f"and {arch.model_type}'s q/k RMSNorm statistics (vLLM 0.33 "
                               "vllm/model_executor/models/minimax_m2.py:240)")
    if o["as_json"]:
        out: dict[str, Any] = {"setup": info, "results": [res.to_json()]}
        if search is not None:
            out["slo"] = search
        print(json.dumps(out, indent=2))
        return
    from kvdash.commands.common import Prose
    from kvdash.render.table import Table, print_tables

    prose = Prose()

    def say(text: str) -> None:  # a line of prose, wrapped at the terminal's width (no trailing spaces)
        prose.print(text, markup=False, highlight=False)

    experts = (f" (experts {mc.expert_format})" if mc.expert_format and mc.expert_format != wf else "")
    local = "chunked attention of" if any(layer.kind == "chunked" for layer in arch.layers) else "sliding window"
    window = (f", {local} {mc.window:,} tokens on "
              + ("some layers" if mc.kv_full_bytes else "every attention layer")) if mc.window else ""
    say(f"{arch.name} on {tp} x {gpu.key}, {wf} weights{experts}, {stored} KV{window}: "
        f"{pool.blocks:,} blocks of {shape.block_size} tokens; {info['workload']}, {len(prompt):,} requests, "
        f"{info['arrival']}; max_num_seqs {seqs:,}, max_num_batched_tokens {batched:,}")
    lat = Table(title="Latency, ms (paged, vLLM's scheduler, step-time model)")
    for col in ("metric", "p50", "p90", "p99", "mean"):
        lat.add_column(col, "left" if col == "metric" else "right", wrap=False)
    no_tpot = not res.has_tpot  # TPOT needs a second output token (vLLM's benchmark: 0)
    for name, d in (("TTFT", res.ttft_ms), ("TPOT", res.tpot_ms), ("E2E", res.e2e_ms)):
        lat.add_row(name, *("-" if name == "TPOT" and no_tpot else f"{d[k]:,.1f}" for k in ("p50", "p90", "p99", "mean")))
    thr = Table(title="Throughput (output tokens)")
    for col in ("tokens/s", "per GPU", "per user", "requests/s", "preempted", "avg batch"):
        thr.add_column(col, "right", wrap=False)
    def tokens_s(v: float) -> str:  # tokens/s: whole from 100, else three significant digits (0.405, not 0)
        return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"

    thr.add_row(tokens_s(res.tokens_per_s), tokens_s(res.tokens_per_s_per_gpu),
                "-" if no_tpot else f"{res.tokens_per_s_per_user:,.1f}",
                f"{res.requests_per_s:,.3f}" if res.requests_per_s >= 0.001 or not res.requests_per_s else
                f"{res.requests_per_s:.3g}", f"{res.preemptions:,}", f"{res.avg_running:,.1f}")
    print_tables([lat, thr])
    if search is not None:
        say(slo_sentence(search, len(prompt), mean_len))
    say(f"constants: {consts.fitted_on}; measured error: {info['measured_error']}")
    for key, label in (("weights_budget", "weights"), ("weight_format_basis", "weights"),
                       ("routed_experts", "routed experts"),
                       ("parameters", "parameters"),
                       ("gpu_extrapolated", "GPU"), ("short_run", "note"), ("all_reduces", "all-reduces")):
        if key in info:
            say(f"{label}: {info[key]}")


def timed_weight_format(cfg: dict[str, Any], asked: str, mc: Any) -> tuple[str, str]:
    """The dense weights' format the step times read and why (``""``: as asked): ``auto`` is the checkpoint's
    (:func:`kvdash.engines.vllm.checkpoint_weight_format`), read as bf16 where the time model cannot count the
    model's parameters (hybrids: the weight figure at 2 B a parameter; :func:`timed_compute`)."""
    from kvdash.engines.vllm import checkpoint_weight_format

    if asked != "auto":
        return asked, ""
    fmt, basis = checkpoint_weight_format(cfg)
    if not mc.counted and fmt not in ("bf16", "fp16"):  # fp16: 2 B a parameter too, as timed_compute reads it
        return "bf16", (f"{basis}; not applied: the parameters are not counted from config.json, so the weight "
                        "figure is read at 2 B a parameter")
    return fmt, basis


CALC_SLO_REQUESTS = 1000  # calc's short simulation: 1,000 ShareGPT-shaped requests
CALC_SLO_MAX_LEN = 8192  # ... clipped at this many tokens (or the model's context, if shorter)


def with_weight_figure(arch: Any, weights: str | None) -> Any:
    """``arch`` with ``--weights`` as its weight figure, which the time model reads every step where it cannot count
    the parameters from config.json (hybrids: :func:`kvdash.core.steptime.model_compute`)."""
    if not weights:
        return arch
    from dataclasses import replace

    from kvdash.units import parse_size

    return replace(arch, weight_bytes=parse_size(weights, "--weights", allow_zero=True), weights_known=True,
                   weight_basis="--weights")


def calc_slo(result: dict[str, Any], arch: Any, model: str, config: str | None, gpu_key: str | None, tp: int,
             kv_dtype: str, slo_text: str, weight_format: str = "auto", max_model_len: int | None = None,
             weights: str | None = None) -> dict[str, Any]:
    """``kvdash calc --slo``: :func:`slo_search` over calc's own pool (its budget per rank, blocks and
    block rule) with 1,000 ShareGPT-shaped requests (kvdash's synthetic preset, seed 0), clipped at
    :data:`CALC_SLO_MAX_LEN` tokens, the model's context or ``--max-model-len``, the shortest; ``--weights`` is the
    weight figure the step times read where the parameters are not counted (it ignored it and refused them)."""
    from dataclasses import replace

    from kvdash.core.gpus import get_gpu
    from kvdash.core.steptime import fitted_constants, gpu_perf, unmeasured_note
    from kvdash.engines.vllm import timed_compute
    from kvdash.simulate.timed import Pool
    from kvdash.simulate.workload import PRESETS, draw_requests

    slo = parse_slo(slo_text)
    if not gpu_key:
        raise InputError("--gpu", None, "--slo needs a GPU preset with bandwidth and FLOP/s figures (e.g. h100-80gb)")
    stages = result["pool"].get("stages") or [None]
    if (len(stages) if isinstance(stages, list) else int(stages)) > 1:
        raise InputError("--pp", len(stages) if isinstance(stages, list) else stages,
                         "--slo simulates one pipeline stage: use --pp 1")
    gpu = get_gpu(gpu_key)
    perf = gpu_perf(gpu.key)
    p = result["pool"]
    cfg = model_config(model, config)
    arch = with_weight_figure(arch, weights)
    mc = timed_compute(cfg, arch, tp, weight_format, kv_dtype)  # auto: the checkpoint's experts and attention too
    weight_format, wf_basis = timed_weight_format(cfg, weight_format, mc)
    # the page ratios too: MiMo-V2-Flash's full layers hold 2 x 16 tokens a block at TP 1-4 (the search had counted
    # 52 blocks for 825 tokens where calc's table says 26)
    shape = stages[0] if isinstance(stages, list) and isinstance(stages[0], dict) else {}
    pool = Pool(int(result["whole_pool_blocks"]), int(p["block_size"]), int(p["full_groups"]), int(p["window_groups"]),
                int(p["window"] or 0), int(p["state_blocks_per_request"] or 0), int(shape.get("full_ratio", 1)),
                int(shape.get("window_ratio", 1)))
    # calc's own engine caps (its --max-num-seqs / --max-batched-tokens, else vLLM 0.33's defaults for the GPU)
    seqs, batched = int(result["engine"]["max_num_seqs"]), int(result["engine"]["max_num_batched_tokens"])
    w = replace(PRESETS["sharegpt"], requests=CALC_SLO_REQUESTS, arrival="closed", concurrency=1, clip=True)
    cap = min(arch.max_context, CALC_SLO_MAX_LEN, max_model_len or CALC_SLO_MAX_LEN)  # vLLM serves no longer
    reqs = draw_requests(w, 0, cap)
    mean_len = int(round(float(reqs.final.mean())))
    setup = {"pool": pool, "mc": mc, "gpu": perf, "consts": fitted_constants(perf.key), "max_num_seqs": seqs,
             "max_batched": batched, "tp": tp, "kv_requests": pool.blocks // int(pool.request_blocks(mean_len))}
    out = slo_search(setup, reqs.prompt, reqs.output, slo, 0)  # calc draws its workload from seed 0
    out["workload"] = (f"{CALC_SLO_REQUESTS:,} ShareGPT-shaped requests (synthetic: lognormal means 161 in, 338 out "
                       f"before clipping at {cap:,} tokens)")
    out["requests"] = CALC_SLO_REQUESTS
    out["mean_request_tokens"] = mean_len
    out["max_num_seqs"], out["max_num_batched_tokens"] = seqs, batched
    if unmeasured := unmeasured_note(perf.key):
        out["gpu_extrapolated"] = unmeasured
    out["weight_format"] = weight_format
    if weight_format != "bf16" or wf_basis.startswith("auto: the checkpoint's"):
        out["pool_note"] = (f"the pool is calc's (weights: {result['budget'].get('weights_basis') or 'as calc counts them'}"
                            f"); the step times read {weight_format} weights"
                            + (f" ({wf_basis})" if wf_basis else " (--weights sizes the pool for that checkpoint)"))
    if not mc.counted:  # the weight figure read every step (hybrids): said, as simulate --time says it
        out["parameters"] = mc.basis[0]
    out.pop("at_max_concurrency", None)
    return out


def slo_sentence(s: dict[str, Any], requests: int, mean_len: int, workload: str = "",
                 further: str = "more --requests") -> str:
    """An SLO search's answer (:func:`kvdash.simulate.slo.slo_search`) in one sentence, as simulate and calc print
    it: the users and the rate, the pool's room at the workload's mean length, the limit that binds."""
    from kvdash.simulate.slo import rate_text, slo_text

    kv = s["kv_capacity_requests"]
    # the SLO as parse_slo read it (ttft=2s, whatever the case or unit it was typed in)
    return (f"SLO {slo_text(s['slo_s'])} at p90{f' ({workload})' if workload else ''}: at most "
            f"{s['max_concurrency']:,} user{'' if s['max_concurrency'] == 1 else 's'} (closed loop), "
            f"{rate_text(s, requests, further)} (Poisson); KV holds about {kv:,} request{'' if kv == 1 else 's'} "
            f"of their mean length ({mean_len:,} tokens) at once; binds: {s['binding_limit']}")


def calc_slo_lines(s: dict[str, Any]) -> list[str]:
    """``kvdash calc --slo``'s answer in words (under its tables, and in ``--brief``): the SLO line, and a ``GPU:``
    line where the time constants are applied to a GPU without measured rows."""
    line = slo_sentence(s, s["requests"], s["mean_request_tokens"], s["workload"],
                        "kvdash simulate --time --slo with more --requests searches further")
    if "pool_note" in s:
        line += f"; {s['pool_note']}"
    if "parameters" in s:
        line += f"; parameters: {s['parameters']}"
    return [line] + ([f"GPU: {s['gpu_extrapolated']}"] if "gpu_extrapolated" in s else [])

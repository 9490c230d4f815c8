"""``kvdash simulate``: KV pool occupancy over time under each allocation policy."""

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvdash import defaults as D
from kvdash.commands.common import (
    BlockSizeOpt,
    BlocksPerChunkOpt,
    BudgetOpt,
    ConfigOpt,
    DiskLinkOpt,
    EngineRulesOpt,
    GpuOpt,
    GpuUtilOpt,
    KvDtypeOpt,
    LinkOpt,
    MaxBatchedTokensOpt,
    MaxFileSizeOpt,
    MaxNumSeqsOpt,
    MaxReservedOpt,
    ModelOpt,
    OffloadOpt,
    PrefixOpt,
    ReserveOpt,
    SloOpt,
    TpOpt,
    WeightFormatOpt,
    WeightsOpt,
    block_size_of,
    parse_block_size,
    parse_budget,
    parse_max_file_size,
)
from kvdash.errors import InputError
from kvdash.simulate.lengths import parse_lengths_spec

Opt = typer.Option

PAPER_SETUP = ("paper: Orca reimplementations with a buddy allocator and vLLM, OPT-13B on one A100-40GB, real "
               "ShareGPT/Alpaca requests, memory profiled during the paper's §6.2 runs")


MAX_REQUESTS = 1_000_000  # --requests above this needs --max-requests
HARD_MAX_REQUESTS = 50_000_000  # about 2 GB of arrays per policy


def simulate(
    ctx: typer.Context,
    model: ModelOpt = D.MODEL,
    config: ConfigOpt = None,
    kv_dtype: KvDtypeOpt = D.KV_DTYPE,
    block_size: BlockSizeOpt = str(D.BLOCK_SIZE),
    budget: BudgetOpt = None,
    gpu: GpuOpt = None,
    gpu_util: GpuUtilOpt = None,
    weights: WeightsOpt = None,
    reserve: ReserveOpt = D.RESERVE,
    tp: TpOpt = D.TP,
    engine_rules: EngineRulesOpt = "vllm",
    workload: Annotated[str, Opt(help="sharegpt or alpaca (synthetic, shaped after the paper's datasets).")] = "sharegpt",
    prompt: Annotated[Optional[str], Opt(help="Prompt lengths: fixed:N, uniform:A,B, lognormal:MEAN,SIGMA. Default: the --workload preset's.")] = None,
    output: Annotated[Optional[str], Opt(help="Output lengths, same forms. Default: the --workload preset's.")] = None,
    trace: Annotated[Optional[Path], Opt(help="CSV of prompt,output lengths (replaces --prompt/--output). Default: none.")] = None,
    requests: Annotated[Optional[int], Opt(help=f"Requests to simulate (at most --max-requests, {MAX_REQUESTS:,} unless "
                                                "raised). Default: 2,000 (--hash-trace: every request of the trace).")] = None,
    max_requests: Annotated[int, Opt(help=f"Upper bound of --requests (at most {HARD_MAX_REQUESTS:,}).")] = MAX_REQUESTS,
    rate: Annotated[float, Opt(help="Poisson arrivals per step; with --time, requests per second.")] = 0.5,
    rates: Annotated[Optional[str], Opt(help="A:B:N: also sweep N rates from A to B and report each policy's "
                                             "normalized latency and capacity at --latency-bound. Default: none (one rate, --rate).")] = None,
    latency_bound: Annotated[float, Opt(help="Normalized latency bound for --rates, steps per output token "
                                             "(1.0 is an unloaded pool).")] = 2.0,
    concurrency: Annotated[Optional[int], Opt(help="Closed loop: keep this many requests in the system instead. Default: none (Poisson arrivals at --rate).")] = None,
    prefix: PrefixOpt = 0,
    max_reserved: MaxReservedOpt = None,
    max_len_old: Annotated[Optional[int], Opt("--max-len", hidden=True, help="Old name of --max-reserved.")] = None,
    clip: Annotated[bool, Opt("--clip", help="Cut requests longer than --max-reserved instead of refusing them "
                                             "(the output says how many).")] = False,
    policies: Annotated[str, Opt(help="Comma list of max, pow2, oracle, paged, paged-prefix.")] = "max,pow2,oracle,paged",
    allocator: Annotated[str, Opt(help="Contiguous allocator: first-fit, or buddy (Orca's, as the paper ran its "
                                       "baselines; the pool split into power-of-two regions).")] = "first-fit",
    watermark: Annotated[float, Opt(help="Fraction of the pool's blocks kept free when admitting waiting requests "
                                         "(vLLM's KVCacheManager watermark; 0 by default).")] = 0.0,
    seed: Annotated[int, Opt(help="Seed of the workload.")] = 0,
    trace_every: Annotated[int, Opt(help="Keep a per-step trace every N steps in --json (0: none).")] = 0,
    max_file_size: MaxFileSizeOpt = D.MAX_FILE_SIZE,
    hash_trace: Annotated[Optional[Path], Opt(help="Prefix caching: a Mooncake-format JSONL trace (timestamp, "
                                                   "input_length, output_length, hash_ids of 512-token blocks; .xz "
                                                   "read too) replayed through the prefix cache and tiers. Default: none.")] = None,
    prefix_workload: Annotated[Optional[str], Opt(help="Prefix caching on a generated workload: multi-turn:CHATS,TURNS,"
                                                       "SYSTEM,USER,REPLY or system-prompts:N,SYSTEM,USER,OUTPUT[,REQUESTS"
                                                       "[,SHARE/...]]. Default: none.")] = None,
    rules: Annotated[str, Opt(help="Prefix caching rules: vllm (16-token blocks in the GPU pool, tails evicted "
                                   "first, native offloading) or lmcache (256-token prompt chunks, LRU).")] = "vllm",
    offload: OffloadOpt = None,
    cpu_policy: Annotated[str, Opt(help="vLLM CPU tier eviction: lru or arc.")] = "lru",
    blocks_per_chunk: BlocksPerChunkOpt = 1,
    link: LinkOpt = None,
    disk_link: DiskLinkOpt = "nvme-gen4",
    capacities: Annotated[Optional[str], Opt(help="Hit rate against capacity of the outermost tier, tokens: "
                                                  "1M,3M,10M,50M,inf. Default: none.")] = None,
    as_json: Annotated[bool, Opt("--json", help="Print JSON.")] = False,
    time_model: Annotated[bool, Opt("--time", help="Simulate in seconds (paged, vLLM's scheduler, the fitted step-time "
                                                   "model; needs --gpu): TTFT, TPOT, E2E, tokens/s. --rate is then "
                                                   "requests per second.")] = False,
    weight_format: WeightFormatOpt = "auto",
    max_num_seqs: MaxNumSeqsOpt = None,
    max_batched_tokens: MaxBatchedTokensOpt = None,
    slo: SloOpt = None,
) -> None:
    """Simulate KV pool occupancy over time under contiguous and paged allocation."""
    from kvdash.commands.common import pick_alias

    limit_requests = requests  # a trace is read whole unless --requests is given
    requests = 2000 if requests is None else requests
    max_len: int | None = pick_alias(max_reserved, max_len_old, "--max-reserved", "--max-len")  # type: ignore[assignment]
    from kvdash.answer.budget import BudgetSpec, resolve_budget
    from kvdash.core.model import load_config, resolve_model
    from kvdash.engines.vllm import rank_shapes, refused_auto_block
    from kvdash.simulate.engine import PAPER_FIG2, POLICIES
    from kvdash.simulate.engine import simulate as run
    from kvdash.simulate.workload import PRESETS, Lengths, draw_requests, read_trace, trace_name
    from kvdash.units import parse_size

    if not 1 <= max_requests <= HARD_MAX_REQUESTS:
        raise InputError("--max-requests", max_requests, f"expected 1 to {HARD_MAX_REQUESTS:,}")
    replay = hash_trace is not None or prefix_workload is not None  # replays every request unless --requests
    if (limit_requests is not None or not replay) and not 1 <= requests <= max_requests:
        raise InputError("--requests", _short(requests) if limit_requests is not None else f"{requests} (the default)",
                         f"expected 1 to {max_requests:,} (--max-requests raises the bound, up to "
                         f"{HARD_MAX_REQUESTS:,})")
    if not 0 <= seed < 2**63:
        raise InputError("--seed", _short(seed), "expected 0 to 2^63 - 1")
    if not (math.isfinite(rate) and rate > 0):
        raise InputError("--rate", rate, "expected a positive number of requests per "
                         + ("second (--time)" if time_model else "step"))
    if not (math.isfinite(latency_bound) and latency_bound > 1):
        raise InputError("--latency-bound", latency_bound, "expected more than 1 step per output token")
    if not (math.isfinite(watermark) and 0 <= watermark < 1):
        raise InputError("--watermark", watermark, "expected a fraction from 0 to below 1")
    if trace_every < 0:
        raise InputError("--trace-every", trace_every, "expected 0 (no trace) or a positive number of steps")
    max_bytes = parse_max_file_size(max_file_size)  # checked even without --trace
    from kvdash.commands.common import given, refuse_model_beside_config, refuse_unread

    if config is not None:
        refuse_model_beside_config(ctx)
    if trace is not None:  # the trace gives every length: a preset or a length spec beside it was dropped silently
        refuse_unread(ctx, ("prompt", "output", "workload"),
                      "not read with --trace (the trace gives every prompt and output length): give one or the other")
    size = parse_block_size(block_size)
    if max_len is not None and max_len < 2:
        raise InputError("--max-reserved", max_len, "expected at least 2")
    if concurrency is not None and concurrency < 1:
        raise InputError("--concurrency", concurrency, "expected a positive integer")

    if slo is not None:
        from kvdash.simulate.slo import parse_slo

        parse_slo(slo)  # an empty or malformed --slo is refused here, not skipped
    if concurrency is not None and given(ctx, "rate"):
        raise InputError("--rate", rate, f"Poisson arrivals, or a closed loop of --concurrency {concurrency}: "
                                         "give one of the two")
    if prefix < 0:
        raise InputError("--prefix", prefix, "expected 0 to --max-reserved - 1 tokens")
    chosen = [p.strip() for p in policies.split(",") if p.strip()]
    if not chosen:
        raise InputError("--policies", policies, "expected some of: " + ", ".join(POLICIES))
    for p in chosen:
        if p not in POLICIES:
            raise InputError("--policies", p, "expected some of: " + ", ".join(POLICIES))
    sweep = None
    if rates is not None:
        from kvdash.simulate.capacity import parse_rates

        sweep = parse_rates(rates)
        if concurrency is not None:
            raise InputError("--rates", rates, "sweeps Poisson rates; drop --concurrency")
    # --engine-rules sglang reads config.json as SGLang 0.5.23 does (kvdash.core.modeltypes.normalise): a config
    # vLLM 0.33 alone refuses (Ministral-3, ERNIE 4.5's Ernie4_5_ForCausalLM) is simulated on SGLang's pool
    arch = load_config(config, engine="sglang" if engine_rules == "sglang" else "vllm") if config else \
        resolve_model(model)
    max_len = D.reservation(arch.max_context) if max_len is None else max_len
    block_size = block_size_of(size, arch, kv_dtype, gpu)  # auto (the default): vLLM 0.33's choice on the GPU
    if not 1 <= block_size <= max_len:
        raise InputError("--block-size", _short(block_size), f"expected 1 to --max-reserved ({max_len:,}) tokens")
    try:
        shape = rank_shapes(arch, kv_dtype, "tensor", tp, 1, block_size)[0]
    except InputError as exc:
        raise refused_auto_block(exc, size == "auto") from None
    prefix_replay = hash_trace is not None or prefix_workload is not None
    from kvdash.engines import registry

    registry.get(engine_rules)  # an unknown engine: one line
    if engine_rules == "sglang" and (prefix_replay or time_model or slo):
        raise InputError("--engine-rules", "sglang", "sizes the pool of the length simulation only (not --time, "
                                                     "--slo, --hash-trace or --prefix-workload)")
    if prefix_replay and slo:
        raise InputError("--slo", slo, "answers a length workload (--workload/--prompt/--output), not a prefix replay")
    tier_options = ("offload", "cpu_policy", "blocks_per_chunk", "link", "disk_link", "capacities", "rules")
    if not prefix_replay:
        refuse_unread(ctx, tier_options, "applies to a prefix replay (--hash-trace or --prefix-workload) only")
    else:
        refuse_unread(ctx, ("trace", "rate", "policies", "prefix", "workload", "prompt", "output", "watermark",
                            "allocator", "clip", "max_reserved", "max_len_old", "rates", "latency_bound",
                            "trace_every"),
                      "not read by a prefix replay (--hash-trace, --prefix-workload): it replays the trace's or "
                      "the generator's requests through the prefix cache")
        if hash_trace is not None:
            refuse_unread(ctx, ("seed",), "not read by --hash-trace (a trace draws nothing)")
        if not time_model:  # (--max-batched-tokens still sizes --reserve auto's terms on a GPU)
            refuse_unread(ctx, ("weight_format",), "times the prefill of a prefix replay with --time only")
        if not offload:
            refuse_unread(ctx, ("cpu_policy", "blocks_per_chunk"),
                          "shapes an --offload tier: give --offload too")
    if trace is None and hash_trace is None:
        refuse_unread(ctx, ("max_file_size",), "bounds the file --trace or --hash-trace reads only")
    if trace is not None and concurrency is not None and not (slo or rates):
        refuse_unread(ctx, ("seed",), "not read by a --trace in a closed loop (--concurrency): nothing is drawn")
    if (time_model or slo) and not prefix_replay:
        from kvdash.commands.common import warn
        from kvdash.commands.simulate_time import main as timed_main

        refuse_unread(ctx, ("prefix", "watermark", "rates", "latency_bound", "trace_every", "allocator"),
                      "not read by --time / --slo (the timed run is paged under vLLM 0.33's scheduler at its own "
                      "rules): give it without --time and --slo")
        if given(ctx, "policies") and time_model:
            warn(f"--policies {policies} has no effect with --time: the timed simulation runs paged (vLLM's "
                 "scheduler) only; the Orca policies in seconds are a grid's (simulate: time: policies)")

        timed_main(locals())
        return
    if not prefix_replay:  # the length simulation (the timed one returned above)
        refuse_unread(ctx, ("weight_format",), "times the timed simulation only (--time, --slo)")
        if rates is None:
            refuse_unread(ctx, ("latency_bound",), "bounds a --rates sweep only: give --rates A:B:N")
        if not as_json:
            refuse_unread(ctx, ("trace_every",), "keeps a per-step trace in --json only: give --json")
        if engine_rules == "sglang":
            refuse_unread(ctx, ("max_batched_tokens",), "none with --engine-rules sglang: SGLang's pool is sized by "
                                                        "its mem_fraction_static, not vLLM's runtime reserve")
        if gpu is None or reserve.strip().lower() != "auto":
            refuse_unread(ctx, ("max_batched_tokens",), "sizes vLLM's runtime reserve on a GPU (--gpu) under "
                                                        "--reserve auto and the timed run's batches (--time) only")
    if max_num_seqs is not None:  # read by the timed length simulation only (returned above)
        raise InputError("--max-num-seqs", max_num_seqs, "caps only the timed simulation of a length workload "
                                                         "(--time, with or without --slo); " + (
                                                             "a prefix replay (--hash-trace, --prefix-workload) runs "
                                                             "every request the pool holds, --time or not"
                                                             if prefix_replay else
                                                             "this simulation runs every request the pool holds"))
    if shape.groups != 1 or shape.window_groups or shape.state_bytes:
        raise InputError("--model", arch.name, "simulate handles full-attention and MLA models (one KV-cache group)")
    from kvdash.commands.common import check_budget_options, warn

    notes = check_budget_options(budget, gpu, None, gpu_util, "vllm", weights, reserve, given(ctx, "reserve"))
    from kvdash.calibration import reserve_for

    spec = BudgetSpec(
        bytes=parse_budget(budget),  # neither: the 12 GiB default
        gpu=gpu, util=gpu_util, weights=parse_size(weights, "--weights", allow_zero=True) if weights else None)
    from kvdash.answer.calc import CalcInput, capture_graphs, engine_caps

    # vLLM 0.33's caps for the GPU, --max-batched-tokens where given (it sizes --reserve auto's activation and CUDA
    # graph terms, as in calc)
    caps_inp = CalcInput(arch=arch, kv_dtype=kv_dtype, tp=tp, budget=spec, max_batched_tokens=max_batched_tokens)
    caps = engine_caps(caps_inp)
    spec = reserve_for(spec, reserve, given(ctx, "reserve"), arch, tp, 1, caps.max_num_batched_tokens,
                       graphs=capture_graphs(caps_inp, caps))
    binfo = resolve_budget(spec, arch, tp, 1)
    b = binfo["per_rank_bytes"]
    bytes_per_token = shape.bytes_per_token
    sglang_pool = None
    if engine_rules == "sglang":
        from kvdash.commands.simulate_engines import sglang_pool as sglang_pool_of

        sglang_pool = sglang_pool_of(arch, gpu, tp, kv_dtype, binfo, size if given(ctx, "block_size") else None,
                                     reserve if given(ctx, "reserve") else None, gpu_util)
        b, bytes_per_token, block_size = sglang_pool["budget_bytes"], sglang_pool["cell_bytes"], \
            sglang_pool["page_size"]
    from kvdash.answer.text import reserve_text

    budget_lines = []  # every output says first what it assumes of the runtime reserve (as calc does)
    if sglang_pool is not None:
        budget_lines += sglang_pool["lines"]
    elif "gpu_memory_bytes" in binfo:
        if spec.reserve or spec.reserve_basis:
            budget_lines.append(f"runtime reserve {binfo['reserve_bytes']:,} B per rank ({binfo['reserve_basis']})")
        else:
            from kvdash.answer.calc import upper_bound_line

            budget_lines.append(upper_bound_line(CalcInput(arch=arch, kv_dtype=kv_dtype, tp=tp, budget=spec), binfo))
    else:
        budget_lines.append(f"KV budget {b:,} B per rank: {reserve_text(binfo)}")
    for line in notes:
        warn(line)
    capacity = b // bytes_per_token if sglang_pool is None else sglang_pool["max_total_num_tokens"]
    if prefix_replay:
        from kvdash.commands.simulate_prefix import PrefillTiming, run_prefix

        timing = None
        if time_model:
            if not gpu:
                raise InputError("--gpu", None, "--time needs a GPU preset with bandwidth and FLOP/s figures "
                                                "(e.g. h100-80gb)")
            timing = PrefillTiming(model=model, config=str(config) if config else None, weight_format=weight_format,
                                   max_batched=max_batched_tokens or caps.max_num_batched_tokens,
                                   weights=weights)

        run_prefix(arch=arch, kv_dtype=kv_dtype, block_size=block_size, tp=tp, gpu=gpu, budget_lines=budget_lines,
                   per_rank_bytes=b, bytes_per_token=shape.bytes_per_token, capacity=capacity, hash_trace=hash_trace,
                   prefix_workload=prefix_workload, rules=rules, offload=offload, cpu_policy=cpu_policy,
                   blocks_per_chunk=blocks_per_chunk, link=link, disk_link=disk_link, capacities=capacities,
                   concurrency=concurrency, requests=limit_requests, seed=seed,
                   max_bytes=max_bytes, as_json=as_json, timing=timing,
                   prefill_step_tokens=max_batched_tokens or caps.max_num_batched_tokens)
        return
    if max_len > arch.max_context:
        raise InputError("--max-reserved", max_len, f"at most the model's context length ({arch.max_context:,})")
    if block_size > capacity:
        how = (f" ({b:,} B per rank // {bytes_per_token:,} B per token)" if sglang_pool is None else
               " (SGLang's max_total_num_tokens)")
        raise InputError("--block-size", block_size, f"the pool holds only {capacity:,} token slots{how}: a block "
                                                     f"of at most {capacity:,} tokens, or a larger --budget")
    from kvdash.core import limits

    limits.check_rate("--rate", rate)
    for option, number in (("--requests", requests), ("--seed", seed), ("--trace-every", trace_every)):
        limits.check_int(option, number)
    if concurrency is not None:
        limits.check_int("--concurrency", concurrency)
    if prefix < 0 or prefix >= max_len:
        raise InputError("--prefix", prefix, f"expected 0 to {max_len - 1} tokens")
    if workload not in PRESETS:
        raise InputError("--workload", workload, "expected one of: " + ", ".join(PRESETS))
    w = PRESETS[workload]
    if trace is not None:
        prompts, outputs = read_trace(str(trace), requests, max_bytes)
        w = replace(w, name=trace_name(trace.name, len(prompts), requests), prompt=Lengths("trace", values=prompts),
                    output=Lengths("trace", values=outputs), synthetic=False, note=f"lengths from {trace.name}")
    if prompt or output:  # say which lengths are the user's: a preset's name alone would claim them all
        given_lengths = ", ".join(f"{flag} {spec}" for flag, spec in (("--prompt", prompt), ("--output", output))
                                  if spec)
        kept = "" if prompt and output else f", {w.name}'s {'output' if prompt else 'prompt'} lengths"
        w = replace(w, name="custom" if prompt and output and trace is None else w.name,
                    prompt=parse_lengths_spec(prompt, "--prompt") if prompt else w.prompt,
                    output=parse_lengths_spec(output, "--output") if output else w.output,
                    note=f"custom lengths: {given_lengths}{kept}", synthetic=False)
    w = replace(w, requests=requests, rate=rate, prefix=prefix, clip=clip,
                arrival="closed" if concurrency else "poisson", concurrency=concurrency or 0)
    reqs = draw_requests(w, seed, max_len)  # the requests of every policy
    results = []
    from rich.console import Console

    from kvdash.commands.common import Prose

    err = Console(stderr=True)
    for p in chosen:
        if err.is_terminal and not as_json:
            from rich.progress import Progress

            with Progress(console=err, transient=True) as bar:
                task = bar.add_task(f"simulating {p}", total=requests)
                results.append(run(w, p, capacity, block_size, max_len, allocator, seed, trace_every,
                                   progress=lambda done, t=task: bar.update(t, completed=done), watermark=watermark,
                                   requests=reqs))
        else:
            results.append(run(w, p, capacity, block_size, max_len, allocator, seed, trace_every,
                               watermark=watermark, requests=reqs))
    cap = None
    if sweep is not None:
        from kvdash.simulate.capacity import capacity_sweep

        if err.is_terminal and not as_json:
            from rich.progress import Progress

            with Progress(console=err, transient=True) as bar:
                task = bar.add_task(f"sweeping {len(sweep)} rates", total=len(sweep) * len(chosen))
                cap = capacity_sweep(w, chosen, capacity, block_size, max_len, sweep, latency_bound, allocator, seed,
                                     watermark, progress=lambda: bar.advance(task))
        else:
            cap = capacity_sweep(w, chosen, capacity, block_size, max_len, sweep, latency_bound, allocator, seed,
                                 watermark)
    from kvdash.simulate.explain import PAPER_OTHERS, SHARE_MEANING, comparison

    notes = [comparison(r.policy, allocator, w.synthetic, r.shares_percent, PAPER_FIG2.get(r.policy)) for r in results]
    lengths = (f"{reqs.clipped:,} requests clipped to --max-reserved" if reqs.clipped else
               f"{reqs.redrawn:,} lognormal draws longer than --max-reserved drawn again" if reqs.redrawn else
               "no request longer than --max-reserved")
    setup = {"model": arch.name, "kv_dtype": kv_dtype, "block_size": block_size, "tp": tp, "budget_bytes": b,
             "bytes_per_token": bytes_per_token, "capacity_slots": capacity, "workload": w.name,
             "workload_note": w.note, "requests": requests, "arrival": w.arrival, "rate": rate,
             "concurrency": concurrency, "prefix": prefix, "max_len": max_len, "allocator": allocator, "seed": seed,
             "watermark": watermark, "clipped": reqs.clipped, "redrawn": reqs.redrawn, "budget_notes": budget_lines,
             "scheduler": "vLLM v1 Scheduler.schedule() rules (vllm/v1/core/sched/scheduler.py, vLLM 0.33.0)"}
    if sglang_pool is not None:  # the pool is SGLang's; the scheduling stays the simulator's (vLLM's rules)
        setup["engine_rules"] = "sglang"
        setup["sglang_pool"] = sglang_pool["view"]
    if as_json:
        out = {"setup": setup, "results": [r.to_json(traces=bool(trace_every)) for r in results],
               "paper_figure_2": {k: v for k, v in PAPER_FIG2.items()}, "paper_setup": PAPER_SETUP,
               "shares_meaning": SHARE_MEANING, "paper_external_and_others": PAPER_OTHERS, "comparison": notes}
        if cap is not None:
            out["capacity"] = cap.to_json()
        print(json.dumps(out, indent=2))
        return
    from kvdash.render.table import Table, print_tables

    console = Prose()
    for line in budget_lines:
        console.print(line, markup=False, highlight=False)
    console.print(f"[bold]{arch.name}[/bold], {kv_dtype}, block {block_size}, TP {tp}: {capacity:,} token slots "
                  f"({b:,} B / {bytes_per_token:,} B per token); {w.name} ({w.note}; {lengths}); "
                  f"{requests:,} requests, "
                  + (f"closed loop of {concurrency}" if concurrency else f"Poisson {rate:g} per step")
                  + f"; max length {max_len:,}; contiguous allocator {allocator}; watermark {watermark:g}; seed {seed}")
    # kvdash's own tables: numbers are never cut, headers wrap, 80 columns hold them
    shares = Table(title="Share of the KV pool over time, % (paper Fig. 2 in brackets)")
    for col in ("policy", "token states", "reser- vation", "internal frag.", "ext frag", "free",
                "ext.+free (paper: external & others)"):
        shares.add_column(col, "left" if col == "policy" else "right", wrap=False)
    # two tables, so that each fits 80 columns with every value whole
    stats = Table(title="Scheduling: batches")
    for col in ("policy", "avg batch", "peak batch", "preempted", "recomputed tokens", "tokens/step"):
        stats.add_column(col, "left" if col == "policy" else "right", wrap=False)
    times = Table(title="Scheduling: time (queue delay in steps; normalized latency in steps per output token)")
    for col in ("policy", "finished", "queue delay", "normalized latency", "steps"):
        times.add_column(col, "left" if col == "policy" else "right", wrap=False)
    for r, note in zip(results, notes, strict=True):
        sh = r.shares_percent
        paper = PAPER_FIG2.get(r.policy, (None,) * 4)
        keys = ("token_states", "reservation", "internal_fragmentation")
        cells = [f"{sh[k]:.1f}" + ("" if paper[i] is None else f" ({paper[i]:.1f})") for i, k in enumerate(keys)]
        shares.add_row(r.policy, *cells, f"{sh['external_fragmentation']:.1f}", f"{sh['free']:.1f}",
                       f"{note['ext_plus_free']:.1f}" + ("" if paper[3] is None else f" ({paper[3]:.1f})"))
        stats.add_row(r.policy, f"{r.avg_running:.2f}", str(r.peak_running), f"{r.preemptions:,}",
                      f"{r.recomputed_tokens:,}", f"{r.tokens_per_step:.1f}")
        times.add_row(r.policy, f"{r.finished:,}", f"{r.avg_queue_delay_steps:,.1f}",
                      f"{r.normalized_latency:,.2f}", f"{r.steps:,}")
    print_tables([shares])
    console.print(f"[dim]{PAPER_SETUP}; here: {w.note}, the pool and arrivals above. Shares are averaged over "
                  "busy steps.[/dim]")
    console.print("[bold]What the shares count[/bold]")
    for k, meaning in SHARE_MEANING.items():
        console.print(f"  {k.replace('_', ' ')}: {meaning}")
    console.print(f"  {PAPER_OTHERS}")
    console.print("[bold]Beside the paper[/bold]")
    for note in notes:
        diffs = note.get("minus_paper")
        shown = ", ".join(f"{k.replace('_', ' ')} {round(v, 1) + 0.0:+.1f}" for k, v in (diffs or {}).items())
        head = f" ({shown} points against the paper)" if shown else ""
        console.print(f"  {note['policy']}{head}: " + "; ".join(note["notes"]))
    print_tables([stats, times])
    console.print("[dim]Scheduling: vLLM v1 rules (vllm/v1/core/sched/scheduler.py, vLLM 0.33.0) for paged "
                  "pools: running requests first, the newest preempted when blocks run out and recomputed later "
                  "with its generated tokens (recomputed tokens: prompt and output prefilled again); waiting "
                  "requests admitted first come, first served, in steps without preemption. Queue delay counts "
                  "steps waiting before admission and after each preemption; normalized latency is (finish - "
                  "arrival + 1) / output tokens, averaged over requests.[/dim]")
    if cap is not None:
        _print_capacity(console, cap)


def _short(value: object) -> str:
    text = str(value)
    return text if len(text) <= 24 else text[:10] + "..." + text[-6:] + f" ({len(text)} digits)"


def _print_capacity(console, cap) -> None:  # type: ignore[no-untyped-def]
    from kvdash.render.table import Table, print_tables
    from kvdash.simulate.capacity import LABEL

    table = Table(title=f"Normalized latency (steps per output token) against rate; capacity at "
                        f"{cap.bound:g} steps per token")
    table.add_column("rate (requests/step)", "right", wrap=False)
    for pol in cap.latency:
        table.add_column(pol, "right", wrap=False)
    for k, rate in enumerate(cap.rates):
        table.add_row(f"{rate:.4g}", *(f"{cap.latency[p][k]:,.2f}" for p in cap.latency))
    table.add_row("capacity", *("-" if cap.capacity[p] is None else f"{cap.capacity[p]:.4g}" for p in cap.latency))
    print_tables([table])
    from kvdash.units import ratio_text

    ratios = ", ".join(f"{k} {ratio_text(v)}" for k, v in cap.ratios.items())
    console.print(f"Ratios at the bound: {ratios or '-'}. [dim]{LABEL}; the paper's Fig. 12 states 2-4x against "
                  "Orca at the same latency, measured on GPUs.[/dim]")

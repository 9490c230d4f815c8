"""``kvdash simulate``: KV pool occupancy over time under each allocation policy."""

import json
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvdash.errors import InputError

Opt = typer.Option

PAPER_SETUP = ("paper: Orca reimplementations with a buddy allocator and vLLM, OPT-13B on one A100-40GB, real "
               "ShareGPT/Alpaca requests, memory profiled during the paper's §6.2 runs")


def parse_lengths_spec(text: str, field: str):  # type: ignore[no-untyped-def]
    """``fixed:200``, ``uniform:10,100`` or ``lognormal:161,1.0`` (mean, sigma of the log)."""
    from kvdash.simulate.engine import Lengths

    kind, _, args = text.partition(":")
    try:
        values = [float(x) for x in args.split(",")] if args else []
    except ValueError as exc:
        raise InputError(field, text, "expected fixed:N, uniform:A,B or lognormal:MEAN,SIGMA") from exc
    if kind == "fixed" and len(values) == 1 and values[0] >= 1:
        return Lengths("fixed", values[0])
    if kind == "uniform" and len(values) == 2 and 1 <= values[0] <= values[1]:
        return Lengths("uniform", values[0], values[1])
    if kind == "lognormal" and len(values) == 2 and values[0] >= 1 and values[1] > 0:
        return Lengths("lognormal", values[0], values[1])
    raise InputError(field, text, "expected fixed:N (N >= 1), uniform:A,B (1 <= A <= B) or lognormal:MEAN,SIGMA "
                                  "(MEAN >= 1, SIGMA > 0)")


def simulate(
    model: Annotated[str, Opt("--model", "-m", help="Model preset.")] = "opt-13b",
    config: Annotated[Optional[Path], Opt(help="A config.json instead of a preset.")] = None,
    kv_dtype: Annotated[str, Opt(help="KV dtype.")] = "fp16",
    block_size: Annotated[int, Opt(help="Tokens per block (paged policies).")] = 16,
    budget: Annotated[str, Opt(help="KV budget per rank.")] = "12GiB",
    tp: Annotated[int, Opt(help="Tensor-parallel degree.")] = 1,
    workload: Annotated[str, Opt(help="sharegpt or alpaca (synthetic, shaped after the paper's datasets).")] = "sharegpt",
    prompt: Annotated[Optional[str], Opt(help="Prompt lengths: fixed:N, uniform:A,B, lognormal:MEAN,SIGMA.")] = None,
    output: Annotated[Optional[str], Opt(help="Output lengths, same forms.")] = None,
    trace: Annotated[Optional[Path], Opt(help="CSV of prompt,output lengths (replaces --prompt/--output).")] = None,
    requests: Annotated[int, Opt(help="Requests to simulate.")] = 2000,
    rate: Annotated[float, Opt(help="Poisson arrivals per step.")] = 0.5,
    concurrency: Annotated[Optional[int], Opt(help="Closed loop: keep this many requests in the system instead.")] = None,
    prefix: Annotated[int, Opt(help="Tokens of a prompt prefix all requests share (paged-prefix).")] = 0,
    max_len: Annotated[int, Opt(help="Maximum sequence length; Max reserves it.")] = 2048,
    policies: Annotated[str, Opt(help="Comma list of max, pow2, oracle, paged, paged-prefix.")] = "max,pow2,oracle,paged",
    allocator: Annotated[str, Opt(help="Contiguous allocator: first-fit, or buddy (the paper's Orca baselines; over "
                                       "the largest power of two of the pool).")] = "first-fit",
    seed: Annotated[int, Opt(help="Seed of the workload.")] = 0,
    trace_every: Annotated[int, Opt(help="Keep a per-step trace every N steps in --json (0: none).")] = 0,
    max_file_size: Annotated[str, Opt(help="Largest --trace file read (streamed line by line).")] = "256MiB",
    as_json: Annotated[bool, Opt("--json", help="Print JSON.")] = False,
) -> None:
    """Simulate KV pool occupancy over time under contiguous and paged allocation."""
    from kvdash.core.calc import BudgetSpec, rank_shapes, resolve_budget
    from kvdash.core.model import load_config, load_preset
    from kvdash.simulate.engine import PAPER_FIG2, POLICIES, PRESETS, Lengths, read_trace
    from kvdash.simulate.engine import simulate as run
    from kvdash.units import parse_size

    arch = load_config(config) if config else load_preset(model)
    shape = rank_shapes(arch, kv_dtype, "tensor", tp, 1, block_size)[0]
    if shape.groups != 1 or shape.window_groups or shape.state_bytes:
        raise InputError("--model", arch.name, "simulate handles full-attention and MLA models (one KV-cache group)")
    b = resolve_budget(BudgetSpec(bytes=parse_size(budget, "--budget")), arch, tp, 1)["per_rank_bytes"]
    capacity = b // shape.bytes_per_token
    for name, value, low in (("--requests", requests, 1), ("--max-len", max_len, 2), ("--block-size", block_size, 1)):
        if value < low:
            raise InputError(name, value, f"expected at least {low}")
    if max_len > arch.max_context:
        raise InputError("--max-len", max_len, f"at most the model's context length ({arch.max_context:,})")
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
        prompts, outputs = read_trace(str(trace), requests, parse_size(max_file_size, "--max-file-size"))
        w = replace(w, name=f"trace {trace.name}", prompt=Lengths("trace", values=prompts),
                    output=Lengths("trace", values=outputs), synthetic=False, note=f"lengths from {trace.name}")
    if prompt:
        w = replace(w, prompt=parse_lengths_spec(prompt, "--prompt"), note="custom lengths")
    if output:
        w = replace(w, output=parse_lengths_spec(output, "--output"), note="custom lengths")
    lowest = {"fixed": lambda d: d.a, "uniform": lambda d: d.a, "lognormal": lambda d: 1,
              "trace": lambda d: min(d.values)}
    for field_name, dist in (("--prompt", w.prompt), ("--output", w.output)):
        if lowest[dist.kind](dist) >= max_len:
            raise InputError(field_name if trace is None else "--trace", f"{dist.kind}:{dist.a:g}" if
                             trace is None else str(trace), f"lengths must stay below --max-len={max_len:,} "
                             f"(the model allows {arch.max_context:,})")
    w = replace(w, requests=requests, rate=rate, prefix=prefix,
                arrival="closed" if concurrency else "poisson", concurrency=concurrency or 0)
    chosen = [p.strip() for p in policies.split(",") if p.strip()]
    for p in chosen:
        if p not in POLICIES:
            raise InputError("--policies", p, "expected some of: " + ", ".join(POLICIES))
    results = []
    from rich.console import Console

    err = Console(stderr=True)
    for p in chosen:
        if err.is_terminal and not as_json:
            from rich.progress import Progress

            with Progress(console=err, transient=True) as bar:
                task = bar.add_task(f"simulating {p}", total=requests)
                results.append(run(w, p, capacity, block_size, max_len, allocator, seed, trace_every,
                                   progress=lambda done, t=task: bar.update(t, completed=done)))
        else:
            results.append(run(w, p, capacity, block_size, max_len, allocator, seed, trace_every))
    setup = {"model": arch.name, "kv_dtype": kv_dtype, "block_size": block_size, "tp": tp, "budget_bytes": b,
             "bytes_per_token": shape.bytes_per_token, "capacity_slots": capacity, "workload": w.name,
             "workload_note": w.note, "requests": requests, "arrival": w.arrival, "rate": rate,
             "concurrency": concurrency, "prefix": prefix, "max_len": max_len, "allocator": allocator, "seed": seed}
    if as_json:
        print(json.dumps({"setup": setup, "results": [r.to_json(traces=bool(trace_every)) for r in results],
                          "paper_figure_2": {k: v for k, v in PAPER_FIG2.items()}, "paper_setup": PAPER_SETUP},
                         indent=2))
        return
    from rich.table import Table

    console = Console()
    console.print(f"[bold]{arch.name}[/bold], {kv_dtype}, block {block_size}, TP {tp}: {capacity:,} token slots "
                  f"({b:,} B / {shape.bytes_per_token:,} B per token); {w.name} ({w.note}); {requests:,} requests, "
                  + (f"closed loop of {concurrency}" if concurrency else f"Poisson {rate:g} per step")
                  + f"; max length {max_len:,}; contiguous allocator {allocator}; seed {seed}")
    shares = Table(title="Share of the KV pool over time, % (paper Fig. 2 in brackets)", title_justify="left",
                   header_style="bold")
    for col in ("policy", "token states", "reservation", "internal frag.", "external frag.", "free"):
        shares.add_column(col, justify="left" if col == "policy" else "right")
    stats = Table(title="Scheduling", title_justify="left", header_style="bold")
    for col in ("policy", "avg batch", "peak batch", "preemptions", "finished", "tokens/step", "queue delay (steps)",
                "steps"):
        stats.add_column(col, justify="left" if col == "policy" else "right")
    for r in results:
        sh = r.shares_percent
        paper = PAPER_FIG2.get(r.policy, (None,) * 4)
        keys = ("token_states", "reservation", "internal_fragmentation", "external_fragmentation")
        cells = [f"{sh[k]:.1f}" + ("" if paper[i] is None else f" ({paper[i]:.1f})") for i, k in enumerate(keys)]
        shares.add_row(r.policy, *cells, f"{sh['free']:.1f}")
        stats.add_row(r.policy, f"{r.avg_running:.1f}", str(r.peak_running), f"{r.preemptions:,}", f"{r.finished:,}",
                      f"{r.tokens_per_step:.1f}", f"{r.avg_queue_delay_steps:,.1f}", f"{r.steps:,}")
    console.print(shares)
    console.print(stats)
    console.print(f"[dim]{PAPER_SETUP}; here: {w.note}, the pool and arrivals above. Shares are averaged over "
                  "busy steps; free memory while the queue's head cannot be placed counts as external "
                  "fragmentation.[/dim]")

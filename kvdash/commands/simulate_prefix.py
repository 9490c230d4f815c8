"""``kvdash simulate --hash-trace / --prefix-workload``: prefix caching and tiers over a workload with structure."""

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kvdash.errors import InputError

CHART_WIDTH = 30
GLYPHS = {"gpu": "█", "cpu": "▓", "disk": "░"}


@dataclass(frozen=True)
class PrefillTiming:
    """What ``--time`` needs to time each request's prefill with and without its hits."""

    model: str
    config: str | None
    weight_format: str
    max_batched: int
    weights: str | None


def run_prefix(*, arch: Any, kv_dtype: str, block_size: int, tp: int, gpu: str | None, budget_lines: list[str],
               per_rank_bytes: int, bytes_per_token: int, capacity: int, hash_trace: Path | None,
               prefix_workload: str | None, rules: str, offload: str | None, cpu_policy: str, blocks_per_chunk: int,
               link: str | None, disk_link: str, capacities: str | None, concurrency: int | None,
               requests: int | None, seed: int, max_bytes: int, as_json: bool,
               timing: PrefillTiming | None = None, prefill_step_tokens: int = 0) -> None:
    from kvdash.core import tiers as T
    from kvdash.simulate import prefixcache as P
    from kvdash.simulate.prefix_assumptions import prefix_assumptions

    if hash_trace is not None and prefix_workload is not None:
        raise InputError("--prefix-workload", prefix_workload, "give --hash-trace or --prefix-workload, not both")
    if rules not in P.RULES:
        raise InputError("--rules", rules, "expected vllm or lmcache")
    if cpu_policy not in P.CPU_POLICIES:
        raise InputError("--cpu-policy", cpu_policy, "expected lru or arc")
    if not 1 <= blocks_per_chunk <= 4096:
        raise InputError("--blocks-per-chunk", blocks_per_chunk, "expected 1 to 4096")
    if rules == "lmcache" and (cpu_policy != "lru" or blocks_per_chunk != 1):
        raise InputError("--rules", rules, "LMCache's rules use 256-token chunks and LRU; drop --cpu-policy and "
                                           "--blocks-per-chunk")
    conc = 1 if concurrency is None else concurrency
    if rules == "lmcache" and conc != 1:
        raise InputError("--concurrency", conc, "LMCache's rules replay one request at a time (as its simulator)")
    tiers_in = T.parse_offload(offload) if offload else ({"cpu": None} if rules == "lmcache" else {})
    if rules == "vllm" and tiers_in.get("cpu", 0) is None:
        raise InputError("--offload", offload, "the vLLM CPU tier needs a size")
    curve = P.parse_capacities(capacities) if capacities else None
    cpu_link = T.parse_link(link, "--link") if link else T.gpu_host_link(gpu)
    dlink = T.parse_link(disk_link, "--disk-link")
    if hash_trace is not None:
        w = P.read_mooncake(str(hash_trace), requests, max_bytes)
    else:
        assert prefix_workload is not None
        w = P.parse_workload_spec(prefix_workload, seed, context=arch.max_context)
        if requests is not None and requests < len(w):  # the first N requests, as --requests reads a trace
            w = w.first(requests)
    past = sum(1 for p, o in zip(w.prompt, w.output, strict=True) if p + o > arch.max_context)
    if past:  # replayed as given (Mooncake's traces come from longer-context models), but said
        from kvdash.commands.common import warn

        warn(f"{past:,} of {len(w):,} requests are longer than {arch.name}'s context ({arch.max_context:,} tokens, "
             "prompt + output): replayed as the trace gives them, though vLLM would refuse them")
    all_ranks = bytes_per_token * tp
    B = block_size
    sized: dict[str, Any] = {}
    if rules == "vllm":
        gpu_tokens: int | None = capacity // B * B
        cpu_tokens: int | None = 0
        disk_tokens: int | None = 0
        if "cpu" in tiers_in:
            c = T.vllm_cpu_tier(tiers_in["cpu"] or 0, B * bytes_per_token, tp, B, blocks_per_chunk)
            cpu_tokens = c.tokens
            sized["cpu"] = c
        if "disk" in tiers_in:
            size = tiers_in["disk"]
            if size is None:
                disk_tokens = None
            else:
                d = T.vllm_cpu_tier(size, B * bytes_per_token, tp, B, blocks_per_chunk)
                disk_tokens = d.tokens
                sized["disk"] = d
        for name, tier in sized.items():  # a tier of 0 chunks vanished from the tables without a word
            if not tier.chunks:
                raise InputError("--offload", offload, f"the {name} tier holds no chunk: one chunk of "
                                 f"{blocks_per_chunk} block(s) takes {tier.chunk_bytes:,} B; a larger size or "
                                 "fewer --blocks-per-chunk")
    else:
        gpu_tokens = 0
        cpu_tokens = disk_tokens = 0
        for name in ("cpu", "disk"):
            if name in tiers_in:
                size = tiers_in[name]
                if size is None:
                    tokens: int | None = None
                else:
                    t = T.lmcache_tier(size, all_ranks)
                    sized[name] = t
                    tokens = t.tokens
                if name == "cpu":
                    cpu_tokens = tokens
                else:
                    disk_tokens = tokens
    spec = P.TierSpec(rules=rules, block_size=B, gpu_tokens=gpu_tokens, cpu_tokens=cpu_tokens,
                      disk_tokens=disk_tokens, blocks_per_chunk=blocks_per_chunk, cpu_policy=cpu_policy,
                      bytes_per_token=all_ranks, cpu_link_bps=cpu_link.bytes_per_s, disk_link_bps=dlink.bytes_per_s,
                      ranks=tp, concurrency=conc, prefill_step_tokens=prefill_step_tokens)
    if spec.gpu_tokens is not None and rules == "vllm" and spec.gpu_tokens < B:
        raise InputError("--budget", per_rank_bytes, "the pool holds no whole block")
    timer = _timer(timing, arch, tp, gpu, kv_dtype) if timing is not None else None
    keys: dict[tuple[int, bool], list[list[int]]] = {}
    result = P.replay(w, spec, keys)
    prefill = None
    if timer is not None and timing is not None:
        from kvdash.simulate.prefill import prefill_saved

        prefill = prefill_saved(timer, w.prompt, result.request_hits, timing.max_batched, result.request_load_s)
    swept = "disk" if "disk" in tiers_in else "cpu" if "cpu" in tiers_in else "gpu"
    points: list[dict[str, Any]] = []
    if curve is not None:
        for tokens in curve:
            r = P.replay(w, replace(spec, **{f"{swept}_tokens": tokens}), keys)
            points.append({"capacity_tokens": tokens, "hit_rate": r.hit_rate,
                           "tiers": {t.name: t.hit_tokens / r.prompt_tokens for t in r.tiers}})
    links = {"cpu": cpu_link, "disk": dlink}
    assumptions = prefix_assumptions(rules, spec, sized, cpu_link, dlink, w, conc)
    setup = {"model": arch.name, "kv_dtype": kv_dtype, "block_size": B, "tp": tp, "budget_bytes": per_rank_bytes,
             "bytes_per_token_per_rank": bytes_per_token, "gpu_pool_tokens": capacity // B * B, "workload": w.name,
             "workload_note": w.note, "requests": len(w), "prompt_tokens": w.prompt_tokens, "rules": rules,
             "cpu_policy": cpu_policy if rules == "vllm" else "lru", "concurrency": conc,
             "tiers_sized": {k: {"size_bytes": v.size_bytes, "chunk_bytes": v.chunk_bytes, "chunks": v.chunks,
                                 "chunk_tokens": v.chunk_tokens, "tokens": v.tokens} for k, v in sized.items()},
             "budget_notes": budget_lines, "assumptions": assumptions}
    if as_json:
        out = {"setup": setup, "result": result.to_json(links)}
        if prefill is not None:
            out["prefill_time"] = prefill.to_json()
        if curve is not None:
            out["capacity_curve"] = {"tier": swept, "points": points}
        print(json.dumps(out, indent=2))
        return
    _print(setup, result, links, swept, points, budget_lines)
    if prefill is not None:
        _print_prefill(prefill, timing)


def _timer(timing: PrefillTiming, arch: Any, tp: int, gpu: str | None, kv_dtype: str) -> Any:
    """The time model's prefill timer for the model on the GPU (``--time``)."""
    from kvdash.commands.simulate_time import model_config
    from kvdash.core.steptime import fitted_constants, gpu_perf
    from kvdash.engines.vllm import timed_compute
    from kvdash.simulate.prefill import ChunkTimer

    if not gpu:
        raise InputError("--gpu", None, "--time needs a GPU preset with bandwidth and FLOP/s figures (e.g. h100-80gb)")
    if timing.max_batched < 1:
        raise InputError("--max-batched-tokens", timing.max_batched, "expected a positive integer")
    if timing.weights:
        from kvdash.units import parse_size

        arch = replace(arch, weight_bytes=parse_size(timing.weights, "--weights", allow_zero=True), weights_known=True,
                       weight_basis="--weights")
    mc = timed_compute(model_config(timing.model, timing.config), arch, tp, timing.weight_format, kv_dtype)
    return ChunkTimer(mc, gpu_perf(gpu), fitted_constants(gpu))


def _print_prefill(p: Any, timing: PrefillTiming | None) -> None:
    from kvdash.commands.common import Prose

    console = Prose()

    def secs(x: float) -> str:  # a short replay's seconds in ms (it printed "0.0 s ... 0.0 s saved (39.9 %)")
        return f"{x:,.1f} s" if x >= 10 else f"{x:.3g} s" if x >= 1 else f"{x * 1e3:.3g} ms"

    line = (f"Prefill time (the time model, each request alone, {p.max_batched:,} tokens a step): "
            f"{secs(p.with_cache_s)} computed with the cache, {secs(p.without_cache_s)} without; "
            f"{secs(p.saved_s)} saved ({100 * p.saved_share:.1f} %)"
            + (f"; tier loads {secs(p.load_s)}" if p.load_s else ""))
    console.print(line, markup=False, highlight=False)
    w, wo, sv = p.ttft_with_ms, p.ttft_without_ms, p.saved_ms
    console.print(f"TTFT at no load, p50 / p99: {_ms(w['p50'])} / {_ms(w['p99'])} with the cache, "
                  f"{_ms(wo['p50'])} / {_ms(wo['p99'])} without; saved per request p50 {_ms(sv['p50'])}, "
                  f"mean {_ms(sv['mean'])} (queueing not modelled: see simulate --time)",
                  markup=False, highlight=False)


def _ms(x: float) -> str:
    return f"{x:,.1f} ms" if x < 1000 else f"{x / 1000:,.2f} s"


def _pct(x: float) -> str:
    return f"{100 * x:.2f}"


def _seconds(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x * 1e3:,.2f} ms" if x < 1 else f"{x:,.2f} s"


def _print(setup: dict[str, Any], result: Any, links: dict[str, Any], swept: str, points: list[dict[str, Any]],
           budget_lines: list[str]) -> None:
    from kvdash.commands.common import Prose
    from kvdash.render.table import Table, print_tables

    console = Prose()
    for line in budget_lines:
        console.print(line, markup=False, highlight=False)
    data = result.to_json(links)
    console.print(f"[bold]{setup['model']}[/bold], {setup['kv_dtype']}, TP {setup['tp']}: {setup['workload']} "
                  f"({setup['workload_note']}); {setup['requests']:,} requests, {setup['prompt_tokens']:,} prompt "
                  f"tokens; rules {setup['rules']}", markup=True, highlight=False)
    console.print("[bold]Assumptions[/bold]")
    for line in setup["assumptions"]:
        console.print(f"  {line}", markup=False, highlight=False)
    table = Table(title="Per tier: hits (share of all prompt tokens), traffic, evictions")
    for col in ("tier", "capacity tokens", "hit %", "req. hit %", "loaded", "stored", "evictions"):
        table.add_column(col, "left" if col == "tier" else "right", wrap=False)
    times = Table(title="Per tier: transfer time per request (to the GPU), occupancy")
    for col in ("tier", "transfers", "p50", "p99", "occupancy mean", "peak"):
        times.add_column(col, "left" if col == "tier" else "right", wrap=False)
    from kvdash.units import human_bytes as fmt_bytes

    for t in data["tiers"]:
        cap = "unbounded" if t["capacity_tokens"] is None else f"{t['capacity_tokens']:,}"
        table.add_row(t["tier"], cap, _pct(t["hit_rate"]), _pct(t["hit_requests_rate"]),
                      fmt_bytes(t["bytes_loaded"]) if t["tier"] != "gpu" else "-", fmt_bytes(t["bytes_stored"])
                      if t["tier"] != "gpu" else "-", f"{t['evictions']:,}")
        occ = t["capacity_units"]
        mean = f"{t['occupancy_mean'] / occ * 100:.1f} %" if occ else f"{t['occupancy_mean']:,.0f} chunks"
        peak = f"{t['occupancy_peak'] / occ * 100:.1f} %" if occ else f"{t['occupancy_peak']:,} chunks"
        times.add_row(t["tier"], f"{t['transfers']:,}", _seconds(t["transfer_p50_s"]), _seconds(t["transfer_p99_s"]),
                      mean, peak)
    print_tables([table, times])
    console.print(f"Total: {_pct(data['hit_rate'])} % of prompt tokens hit ({data['prefill_tokens_saved']:,} prefill "
                  f"tokens saved); {_pct(data['hit_requests_rate'])} % of requests hit at least one block; "
                  f"{data['evictions']:,} evictions"
                  + (f"; {data['skipped_too_large']:,} requests larger than the GPU pool skipped"
                     if data["skipped_too_large"] else "")
                  + (f"; {data['waits']:,} admissions waited for a finish" if data["waits"] else ""),
                  markup=False, highlight=False)
    for t in data["tiers"]:
        if t.get("store_failures"):
            console.print(f"{t['tier']} tier: {t['store_failures']:,} requests not stored from an offer on: it "
                          "held more chunks than the tier (vLLM 0.33 stores an offer all or nothing and offers the "
                          "refused chunks again with the next ones; the tiers behind it receive none)",
                          markup=False, highlight=False)
    if points:
        chart = Table(title=f"Hit rate against {swept} tier capacity (tokens), % of prompt tokens")
        names = list(points[0]["tiers"])
        for col in ("capacity", *names, "total", "chart"):
            chart.add_column(col, "right" if col != "chart" else "left", wrap=False)
        for pt in points:
            cap = "inf" if pt["capacity_tokens"] is None else _tokens(pt["capacity_tokens"])
            bar = ""
            acc = 0.0
            for n in names:
                before = round(acc * CHART_WIDTH)
                acc += pt["tiers"][n]
                bar += GLYPHS[n] * (round(acc * CHART_WIDTH) - before)
            chart.add_row(cap, *(_pct(pt["tiers"][n]) for n in names), _pct(pt["hit_rate"]), bar)
        print_tables([chart])
        console.print("  chart: " + ", ".join(f"{GLYPHS[n]} {n}" for n in names) + f"; {CHART_WIDTH} columns = 100 %",
                      markup=False, highlight=False)


def _tokens(n: int) -> str:
    for unit, value in (("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if n >= value and n % (value // 10) == 0:
            return f"{n / value:g}{unit}"
    return f"{n:,}"

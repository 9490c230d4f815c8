"""``kvdash calc``: one configuration, every figure, explained."""

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from kvdash import defaults as D
from kvdash.commands.common import (  # noqa: F401 - check_budget_options and warn re-exported
    AllowLongOpt,
    AsyncSchedulingOpt,
    BlockSizeOpt,
    BlocksPerChunkOpt,
    BudgetOpt,
    ChunkedPrefillOpt,
    ConfigOpt,
    DiskLinkOpt,
    EngineRulesOpt,
    GpuMemoryOpt,
    GpuOpt,
    GpuUtilOpt,
    GroupOpt,
    KvDtypeOpt,
    LengthOpt,
    LinkOpt,
    MaxBatchedTokensOpt,
    MaxNumSeqsOpt,
    MaxReservedOpt,
    ModelOpt,
    OffloadOpt,
    PerformanceModeOpt,
    PpOpt,
    PrefixOpt,
    ReserveOpt,
    SloOpt,
    TpOpt,
    WeightFormatOpt,
    WeightsOpt,
    check_budget_options,
    given,
    length_or_group,
    parse_block_size,
    parse_budget,
    parse_lengths,
    parse_on_off,
    pick_alias,
    refuse_model_beside_config,
    refuse_unread,
    warn,
)
from kvdash.errors import InputError

Opt = typer.Option
# config.json field -> the calc option that sets it
CONFIG_OPTIONS = {"num_hidden_layers": "--layers", "num_key_value_heads": "--kv-heads", "head_dim": "--head-dim",
                  "v_head_dim": "--head-dim-v", "num_attention_heads": "--attention-heads",
                  "sliding_window": "--window", "max_position_embeddings": "--max-context"}




LOG_TOKENS = r"GPU KV cache size:\s*([0-9][0-9,_]*)\s*tokens"
LOG_LENGTH = r"Maximum concurrency for\s*([0-9][0-9,_]*)\s*tokens per request"


def logged_figure(tokens: int | None, line: str | None, max_model_len: int | None) -> tuple[int | None, int | None]:
    """``--logged-tokens`` and ``--from-log`` as (logged tokens, max_model_len): the line's ``Maximum concurrency
    for L tokens`` gives max_model_len unless ``--max-model-len`` is given."""
    import re

    if line is None:
        return tokens, max_model_len
    text = line if len(line) <= 4096 else line[:4096]
    found = re.search(LOG_TOKENS, text)
    if found is None:
        raise InputError("--from-log", line, "vLLM's start-up line, e.g. 'GPU KV cache size: 1,059,056 tokens, "
                         "Maximum concurrency for 8,192 tokens per request: 129.28x' (or give --logged-tokens N)")
    value = int(found.group(1).replace(",", "").replace("_", "")[:19])
    if tokens is not None and tokens != value:
        raise InputError("--logged-tokens", tokens, f"the --from-log line says {value:,}; give one of them")
    length = re.search(LOG_LENGTH, text)
    if length is not None and max_model_len is None:
        max_model_len = int(length.group(1).replace(",", "").replace("_", "")[:19])
    return value, max_model_len


def calc(
    ctx: typer.Context,
    model: ModelOpt = D.MODEL,
    config: ConfigOpt = None,
    safetensors_index: Annotated[Optional[Path], Opt(help="model.safetensors.index.json: weight bytes from metadata.total_size. Default: none (the preset's figure or an estimate).")] = None,
    layers: Annotated[Optional[int], Opt(help="Explicit architecture: number of layers. Default: none (--model's).")] = None,
    kv_heads: Annotated[Optional[int], Opt(help="Explicit architecture: KV heads per layer. Default: none (--model's).")] = None,
    head_dim: Annotated[Optional[int], Opt(help="Explicit architecture: head dimension. Default: none (--model's).")] = None,
    head_dim_v: Annotated[Optional[int], Opt(help="Explicit architecture: V head dimension when it differs. Default: --head-dim.")] = None,
    attention_heads: Annotated[Optional[int], Opt(help="Explicit architecture: query heads (default: KV heads).")] = None,
    window: Annotated[int, Opt(help="Explicit architecture: sliding window on every layer (0 = none).")] = 0,
    max_context: Annotated[int, Opt(help="Explicit architecture: context length in tokens.")] = 131072,
    kv_dtype: KvDtypeOpt = D.KV_DTYPE,
    kv_scales: Annotated[str, Opt(help="Scale storage: 'tensor' (none per token) or 'token_head' (fp32 per token per KV head, K and V).")] = "tensor",
    budget: BudgetOpt = None,
    gpu: GpuOpt = None,
    gpu_memory: GpuMemoryOpt = None,
    gpu_util: GpuUtilOpt = None,
    util_policy: Annotated[str, Opt(help="'vllm': fraction of total memory; 'trtllm': fraction of memory free after weights.")] = "vllm",
    weights: WeightsOpt = None,
    reserve: ReserveOpt = D.RESERVE,
    block_size: BlockSizeOpt = str(D.BLOCK_SIZE),
    prefix_caching: Annotated[str, Opt(help="vLLM prefix caching: 'on' (vLLM 0.33's default; state layers in mamba_cache_mode 'align', 2 blocks per request per state group, 3 for Mamba-2 and gated delta net) or 'off'.")] = "on",
    used: LengthOpt = None,
    used_old: Annotated[Optional[int], Opt("--used", hidden=True, help="Old name of --length.")] = None,
    max_reserved: MaxReservedOpt = None,
    final: Annotated[Optional[int], Opt(help="Final length of the request, for the Pow2 and Oracle policies (default: --length).")] = None,
    group: GroupOpt = None,
    prefix: PrefixOpt = 0,
    tp: TpOpt = D.TP,
    pp: PpOpt = D.PP,
    max_model_len: Annotated[Optional[int], Opt(help="vLLM view: max_model_len (default: --max-reserved).")] = None,
    max_batched_tokens: MaxBatchedTokensOpt = None,
    max_num_seqs: MaxNumSeqsOpt = None,
    performance_mode: PerformanceModeOpt = "balanced",
    async_scheduling: AsyncSchedulingOpt = True,
    chunked_prefill: ChunkedPrefillOpt = True,
    allow_long_max_model_len: AllowLongOpt = False,
    target: Annotated[Optional[int], Opt(help="Planning: requests that must fit; adds budget, min utilization, min TP and longest length. Default: none (no planning).")] = None,
    logged_tokens: Annotated[Optional[int], Opt(help="Check a logged figure: the 'GPU KV cache size: N tokens' vLLM "
                                                      "logged; says which reserve (or budget) it implies, whether "
                                                      "that is plausible, and what kvdash predicts. Default: none.")] = None,
    from_log: Annotated[Optional[str], Opt(help="The same, from vLLM's log line as text: 'GPU KV cache size: "
                                                "1,059,056 tokens, Maximum concurrency for 8,192 tokens per "
                                                "request: 129.28x' (its max_model_len is taken unless "
                                                "--max-model-len is given). Default: none.")] = None,
    offload: OffloadOpt = None,
    offload_rules: Annotated[str, Opt(help="Tier sizing for --offload: vllm (native offloading: chunks of --blocks-per-chunk blocks, page-aligned) or lmcache (256-token chunks).")] = "vllm",
    blocks_per_chunk: BlocksPerChunkOpt = 1,
    link: LinkOpt = None,
    disk_link: DiskLinkOpt = "nvme-gen4",
    as_json: Annotated[bool, Opt("--json", help="Print one JSON document.")] = False,
    brief: Annotated[bool, Opt("--brief", help="Print only the answer: the summary line and the line vLLM would log.")] = False,
    slo: SloOpt = None,
    weight_format: WeightFormatOpt = "auto",
    engine_rules: EngineRulesOpt = "vllm",
) -> None:
    """How many requests fit, paged and contiguous, and every KV-cache figure behind it, for one configuration (default: the tutorial's)."""
    from kvdash.answer.budget import BudgetSpec
    from kvdash.answer.calc import CalcInput, calculate, capture_graphs, engine_caps
    from kvdash.core.model import model_from_spec, resolve_model
    from kvdash.engines import registry
    from kvdash.units import parse_size

    rules = registry.get(engine_rules)  # an unknown engine is the first error, before any figure
    if engine_rules != "vllm" and slo is not None:  # the time model runs vLLM's scheduler over vLLM's pool
        raise InputError("--slo", slo, f"times vLLM 0.33's scheduler over vLLM's pool, not --engine-rules "
                                       f"{engine_rules}'s: use --engine-rules vllm (the default)")
    if slo is None:
        refuse_unread(ctx, ("weight_format",), "times the --slo search only: give --slo too")
    if config is not None:
        refuse_model_beside_config(ctx)
    if brief and not as_json and offload is not None:
        raise InputError("--offload", offload, "its tiers are shown in the full output and with --json, not with "
                                               "--brief: drop --brief")
    if any(v is not None for v in (layers, kv_heads, head_dim)):
        refuse_unread(ctx, ("safetensors_index",), "weighs a --model or --config checkpoint; with --layers, "
                                                   "--kv-heads and --head-dim give --weights SIZE")
        if given(ctx, "model") or config:
            raise InputError("--layers", layers, "give either --model/--config or --layers/--kv-heads/--head-dim")
        # the same builder a grid file's explicit model uses; its field names become option names
        try:
            arch = model_from_spec({"layers": layers, "kv_heads": kv_heads, "head_dim": head_dim,
                                    "head_dim_v": head_dim_v, "attention_heads": attention_heads, "window": window,
                                    "max_context": max_context, "name": "custom"}, where="")
        except InputError as exc:
            key = exc.field.rsplit(".", 1)[-1].rsplit(": ", 1)[-1]
            option = CONFIG_OPTIONS.get(key, "--" + key.replace("_", "-"))
            raise InputError(option, exc.value, exc.allowed, exc.hint) from exc
    else:
        refuse_unread(ctx, ("head_dim_v", "attention_heads", "window", "max_context"),
                      "describes an explicit architecture only (--layers, --kv-heads, --head-dim); --model and "
                      "--config give their own")
        try:
            arch = resolve_model(model, config, safetensors_index)
        except InputError as exc:
            if rules.name == "sglang":  # a config vLLM 0.33 alone refuses: SGLang's start-up line in the refusal
                sglang_only(exc, model, config, safetensors_index, gpu, gpu_memory, tp, pp, kv_dtype, weights,
                            block_size if given(ctx, "block_size") else None)
            raise
    length, group = length_or_group(used, group)
    length = pick_alias(length, used_old, "--length", "--used")  # type: ignore[assignment]
    used = D.LENGTH if length is None else length
    warnings = check_budget_options(budget, gpu, gpu_memory, gpu_util, util_policy, weights, reserve,
                                    given(ctx, "reserve"))
    if max_reserved is None:  # the reservation the question implies: at least the longest length asked about
        max_reserved = D.reservation(arch.max_context, used, final or 0, *(parse_lengths(group) or ()))
    logged_tokens, max_model_len = logged_figure(logged_tokens, from_log, max_model_len)
    if rules.name == "sglang" and logged_tokens is not None:
        raise InputError("--logged-tokens" if from_log is None else "--from-log", logged_tokens,
                         "checks vLLM 0.33's 'GPU KV cache size' line; with --engine-rules sglang compare SGLang's "
                         "own start-up line (max_total_num_tokens=..., in the SGLang view) instead")
    spec = BudgetSpec(
        bytes=parse_budget(budget),
        gpu=gpu,
        gpu_memory=parse_size(gpu_memory, "--gpu-memory") if gpu_memory is not None else None,
        util=gpu_util,
        policy=util_policy,
        weights=parse_size(weights, "--weights", allow_zero=True) if weights is not None else None,
    )
    from kvdash.calibration import reserve_for

    inp = CalcInput(
        arch=arch, kv_dtype=kv_dtype, kv_scales=kv_scales, block_size=parse_block_size(block_size), budget=spec,
        prefix_caching=parse_on_off(prefix_caching, "--prefix-caching"),
        tp=tp, pp=pp, used=used, max_reserved=max_reserved, final=final,
        group=parse_lengths(group), prefix=prefix, max_model_len=max_model_len,
        max_batched_tokens=max_batched_tokens, target=target, logged_tokens=logged_tokens, max_num_seqs=max_num_seqs,
        performance_mode=performance_mode, async_scheduling=async_scheduling, chunked_prefill=chunked_prefill,
        allow_long_max_model_len=allow_long_max_model_len,
    )
    inp.validate()
    caps = engine_caps(inp)  # the reserve's activation and CUDA-graph terms follow the engine's caps
    spec = reserve_for(spec, reserve, given(ctx, "reserve"), arch, tp, pp, caps.max_num_batched_tokens,
                       graphs=capture_graphs(inp, caps))
    from dataclasses import replace

    if rules.name == "sglang":
        sglang_fits(spec, arch, tp, pp, kv_dtype, block_size if given(ctx, "block_size") else None)
    result = calculate(replace(inp, budget=spec))
    pool = result["pool"]
    if offload is not None:
        result["offload_tiers"] = _offload(ctx, offload, offload_rules, blocks_per_chunk, link, disk_link, gpu, tp,
                                           pp, pool, used)
    elif offload_rules != "vllm" or blocks_per_chunk != 1 or link is not None or disk_link != "nvme-gen4":
        raise InputError("--offload", None, "--offload-rules, --blocks-per-chunk, --link and --disk-link need "
                                            "--offload cpu:SIZE")
    if result["whole_pool_blocks"] == 0:
        option = "--budget" if gpu is None and gpu_memory is None else "--gpu-util"
        raise InputError(option, f"{pool['budget_bytes']:,} B per rank",
                         f"the KV budget must hold at least one block ({pool['block_bytes']:,} B); "
                         "sizes take a unit: 12GiB (2^30 B), 80GB (10^9 B), 512MiB")
    for line in warnings:
        warn(line)
    if rules.name == "sglang":
        result["sglang_view"] = sglang_view(result, arch, tp, kv_dtype, block_size if given(ctx, "block_size") else None)
        # the start-up line shown is SGLang's; vLLM's view stays only as the comparison's reference figure
        result.pop("vllm_view")
        result["vllm_view_omitted"] = VLLM_VIEW_OMITTED
    if slo is not None:
        from kvdash.commands.common import working
        from kvdash.commands.simulate_time import calc_slo

        with working(f"searching the load that meets {slo} (a timed simulation)"):
            result["slo"] = calc_slo(result, arch, model, str(config) if config else None, gpu, tp, kv_dtype, slo,
                                     weight_format, max_model_len, weights)
    if as_json:
        if brief:
            warn("--brief has no effect with --json (the JSON document starts with its summary)")
        print(json.dumps(result, indent=2))
        return
    if brief:
        from kvdash.render.table import terminal_width, wrap

        v = result.get("vllm_view")
        lines = [result["summary"], *(f"Derived (not in config.json): {line}" for line in result["architecture"]["derived"]),
                 *(f"vLLM {v['version']} would log: {line}" for line in (v["log_lines"] if v else ())),
                 *([result["vllm_view_omitted"]] if "vllm_view_omitted" in result else [])]
        if "sglang_view" in result:
            lines += sglang_lines(result["sglang_view"], brief=True)
        if "slo" in result:  # asked for, so part of the answer
            from kvdash.commands.simulate_time import calc_slo_lines

            lines += calc_slo_lines(result["slo"])
        print("\n".join(part for line in lines for part in wrap(line, terminal_width())))
        return
    from kvdash.render.calc_view import footer, render
    from kvdash.render.table import print_tables

    render(result, closing=False)  # the footer closes the output, after the sections below
    if "sglang_view" in result:
        from kvdash.render.table import terminal_width, wrap

        print("\n".join(part for line in sglang_lines(result["sglang_view"]) for part in wrap(line, terminal_width())))
    if "slo" in result:
        from kvdash.commands.simulate_time import calc_slo_lines
        from kvdash.render.table import terminal_width, wrap

        print("\n".join(part for line in calc_slo_lines(result["slo"]) for part in wrap(line, terminal_width())))
    if offload is not None:
        _print_offload(result["offload_tiers"])
    print_tables([], footer(result))


VLLM_VIEW_OMITTED = ("--engine-rules sglang: the start-up line shown is SGLang 0.5.23's (sglang_view.log_line); "
                     "vLLM 0.33's start-up lines are omitted, its GPU KV cache size kept only as the reference of "
                     "sglang_view.comparison")


def sglang_only(exc: InputError, model: str | None, config: Any, safetensors_index: Any, gpu: str | None,
                gpu_memory: str | None, tp: int, pp: int, kv_dtype: str, weights: str | None,
                block_size: str | None) -> None:
    """Under ``--engine-rules sglang``, a ``config.json`` that vLLM 0.33 refuses but SGLang 0.5.23 serves (read by
    ``load_config(..., engine="sglang")``: ministral3, ERNIE 4.5's first-release ``Ernie4_5_ForCausalLM``): calc's
    answer is built on vLLM's figures, so it still stops, in one line that keeps vLLM's reason and adds SGLang's
    start-up line (:func:`kvdash.engines.sglang.plan`) where the GPU and the weights are known.  Returns (the
    caller re-raises ``exc`` as before) when SGLang's reading refuses the file too."""
    from kvdash.answer.budget import BudgetSpec, budget_gpu
    from kvdash.core import formulas as f
    from kvdash.core.model import load_config
    from kvdash.engines import sglang
    from kvdash.units import parse_size

    path = config if config is not None else (model if model and (model.endswith(".json") or "/" in model)
                                              else None)
    if path is None:
        return
    try:
        arch = load_config(path, safetensors_index, engine="sglang")
    except InputError:
        return  # refused by SGLang's reading as well: vLLM's line, as before
    said = exc.allowed.split("; supported: ")[0]
    head = f"{said}; kvdash calc's answer is built on vLLM 0.33's figures, so it stops here"
    try:
        spec = BudgetSpec(gpu=gpu, gpu_memory=parse_size(gpu_memory, "--gpu-memory") if gpu_memory is not None
                          else None)
        total = budget_gpu(spec)[0] if gpu is not None or gpu_memory is not None else None
        weight_bytes = parse_size(weights, "--weights", allow_zero=True) if weights is not None else \
            (arch.weight_bytes if arch.weights_known else None)
    except InputError:
        return  # a bad --gpu / --weights: the config's line comes first, as under vLLM's rules
    if total is None or weight_bytes is None or pp != 1:
        need = "--pp 1" if pp != 1 else ("--gpu" if total is None else "--weights")
        raise InputError(exc.field, exc.value, f"{head} (SGLang {sglang.VERSION}'s start-up line for this config, "
                         f"which kvdash's SGLang view plans, needs {need})") from exc
    page = int(block_size) if block_size not in (None, "auto") else None
    try:
        p = sglang.plan(arch, total / 2**20, tp, kv_dtype, total - sglang.CONTEXT_BYTES,
                        f.weights_per_rank(weight_bytes, tp), page)
    except InputError as why:
        raise InputError(exc.field, exc.value, f"{head}; and SGLang's view refuses it too: {why.allowed}") from exc
    raise InputError(exc.field, exc.value, f"{head}; SGLang {sglang.VERSION} would start: {p.startup_line()}"
                     "(measured at start-up); "
                     f"mem_fraction_static {p.fraction.value:.6g}, {p.cell_bytes:,} B per token") from exc


def sglang_fits(spec: Any, arch: Any, tp: int, pp: int, kv_dtype: str, block_size: str | None) -> None:
    """Under ``--engine-rules sglang``, weights that leave no KV memory are refused in SGLang 0.5.23's terms (its
    ``_profile_available_bytes`` refusal, or weights that do not load), in one line, before vLLM's budget rule
    would word it; where SGLang plans but vLLM 0.33's budget (calc's answer) has no memory, the line says both."""
    from kvdash.answer.budget import budget_gpu, resolve_budget
    from kvdash.core import formulas as f
    from kvdash.core.pool import check_parallel
    from kvdash.engines import sglang

    check_parallel(arch, tp, pp)  # --tp 0 is refused in one line here, as calc's answer would, not divided by
    total, _, _ = budget_gpu(spec)
    if total is None or pp != 1 or (spec.weights is None and not arch.weights_known):
        return  # a declared budget, PP or unknown weights: sglang_view / resolve_budget say why, as before
    if resolve_budget(spec, arch, tp, pp, strict=False).get("fits", True):
        return
    field, value = ("--weights", spec.weights) if spec.weights is not None else \
        (("--gpu", spec.gpu) if spec.gpu is not None and spec.gpu_memory is None else ("--gpu-memory", total))
    weights = arch.weight_bytes if spec.weights is None else spec.weights
    page = int(block_size) if block_size not in (None, "auto") else None
    try:
        p = sglang.plan(arch, total / 2**20, tp, kv_dtype, total - sglang.CONTEXT_BYTES,
                        f.weights_per_rank(weights, tp), page)
    except sglang.NotMirrored:
        return  # SGLang's pool is not mirrored for this model: vLLM's budget says why the weights do not fit
    except InputError as exc:
        if exc.field == "--model":  # SGLang cannot build the model at all: not a matter of memory
            raise InputError("--engine-rules", "sglang", exc.allowed) from exc
        raise InputError(field, value, exc.allowed) from exc
    raise InputError(field, value, f"SGLang {sglang.VERSION} would start ({p.startup_line()}...) but vLLM 0.33's "
                     "budget, which calc's answer and the comparison are built on, leaves no KV memory here: "
                     "try --tp or a larger GPU")


def sglang_view(result: dict, arch: Any, tp: int, kv_dtype: str, block_size: str | None) -> dict:
    """The SGLang 0.5.23 view beside the vLLM one (``--engine-rules sglang``)."""
    from kvdash.engines import sglang

    b = result["budget"]
    if not b.get("gpu_memory_bytes"):
        raise InputError("--engine-rules", "sglang", "SGLang's view derives its pool from a GPU: give --gpu or "
                                                    "--gpu-memory (a declared --budget has no free memory to profile)")
    if result["inputs"].get("pp", 1) != 1:
        raise InputError("--pp", result["inputs"]["pp"], "SGLang's view is mirrored for --pp 1 only")
    page = None
    if block_size is not None and block_size != "auto":
        page = int(block_size)
    v = result["vllm_view"]
    total = b["gpu_memory_bytes"]
    held = total - b["per_rank_bytes"] - b.get("weights_per_rank_bytes", 0)
    why = (f"1 - gpu_memory_utilization {b.get('utilization')} of the GPU plus the runtime reserve "
           f"{b.get('reserve_bytes', 0) / 2**30:.2f} GiB")
    return sglang.view(arch, total, tp, kv_dtype, int(b.get("weights_per_rank_bytes", 0)), page,
                       {"tokens": v["gpu_kv_cache_tokens"], "label": f"vLLM {v['version']}", "held_back": held,
                        "why": why, "bytes_per_token": result.get("bytes_per_token")})


def sglang_lines(s: dict, brief: bool = False) -> list[str]:
    if "refused" in s:
        return [f"SGLang {s['version']} view: {s['refused']}"]
    if brief:
        return [f"SGLang {s['version']} would log: {s['log_line']}", *([s["comparison"]] if "comparison" in s else [])]
    out = [f"SGLang {s['version']} view (--engine-rules sglang):",
           f"  mem_fraction_static {s['mem_fraction_static']}: reserved {s['reserved_mib']:,.0f} MiB = "
           + " + ".join(f"{t['mib']:,.0f} ({t['name']})" for t in s["fraction_terms"]),
           f"  free before weights {s['free_before_weights_bytes']:,} B ({s['free_before_basis']})",
           *(f"  {line}" for line in s["lines"]),
           f"  cell: {s['cell']}",
           f"  max_running_requests {s['max_running_requests']:,} (resolve_max_num_reqs: int(tokens / context_len "
           f"{s['context_len']:,} x 512) within 2,048..4,096, at most tokens // 2"
           + (f"; at most max_mamba_cache_size {s['max_mamba_cache_size']:,} // the state slots a request takes, "
              "as the mamba pool line says" if s.get("max_mamba_cache_size") else "") + ")",
           f"  SGLang {s['version']} would log: {s['log_line']}"]
    if "comparison" in s:
        out.append(s["comparison"])
    return out


def _offload(ctx: typer.Context, text: str, rules: str, blocks_per_chunk: int, link: str | None, disk_link: str,
             gpu: str | None, tp: int, pp: int, pool: dict, used: int) -> dict:
    from kvdash.core import tiers as T

    if rules not in ("vllm", "lmcache"):
        raise InputError("--offload-rules", rules, "expected vllm or lmcache")
    if rules == "lmcache":
        refuse_unread(ctx, ("blocks_per_chunk",), "LMCache's rules use 256-token chunks: drop --blocks-per-chunk")
    if not 1 <= blocks_per_chunk <= 4096:
        raise InputError("--blocks-per-chunk", blocks_per_chunk, "expected 1 to 4096")
    if pp != 1:
        raise InputError("--pp", pp, "--offload sizes tiers for one pipeline stage (--pp 1)")
    if pool["full_groups"] != 1 or pool["window_groups"] or pool["state_groups"]:
        raise InputError("--offload", text, "tier sizing handles one full-attention KV-cache group")
    sizes = T.parse_offload(text)
    if "disk" not in sizes:
        refuse_unread(ctx, ("disk_link",), "times a disk tier only: give --offload cpu:SIZE,disk:SIZE")
    host = T.parse_link(link, "--link") if link else T.gpu_host_link(gpu)
    return T.offload_view(sizes, pool["block_bytes"], tp, pool["block_size"], used, host,
                          T.parse_link(disk_link, "--disk-link"), rules, blocks_per_chunk)


def _print_offload(o: dict) -> None:
    from kvdash.render.table import terminal_width, wrap
    from kvdash.units import human_bytes

    where = "vLLM native offloading, vllm/v1/kv_offload/cpu/spec.py" if o["rules"] == "vllm" else \
        "LMCache 0.5.6 rules, 256-token chunks"
    lines = [f"Offload tiers ({where}):"]
    for name, t in o["tiers"].items():
        if t["unbounded"]:
            lines.append(f"  {name}: unbounded (vLLM's filesystem tier evicts nothing)")
            continue
        pad = "" if t["chunk_bytes"] == t["unpadded_chunk_bytes"] else \
            f" ({t['unpadded_chunk_bytes']:,} B padded to 4,096-B pages)"
        lines.append(f"  {name}: {t['size_bytes']:,} B // {t['chunk_bytes']:,} B per chunk{pad} = {t['chunks']:,} "
                     f"chunks x {t['chunk_tokens']} tokens = {t['tokens']:,} tokens")
    s = o["request_bytes"]
    lines.append(f"  one request of {o['request_tokens']:,} tokens stores {o['request_chunks']:,} full chunks "
                 f"({o['request_stored_tokens']:,} tokens; a partial tail is not stored) = {s:,} B "
                 f"({human_bytes(s)}), {o['request_bytes_per_rank']:,} B per rank")
    lines.append(f"  reload over {o['link']['name']} at {o['link']['bytes_per_s'] / 1e9:g} GB/s per GPU: "
                 f"{o['reload_cpu_s'] * 1e3:,.3f} ms (bytes per rank / bandwidth, a lower bound; "
                 f"{o['link']['source']})")
    if o["reload_disk_s"] is not None:
        lines.append(f"  from disk over {o['disk_link']['name']} at {o['disk_link']['bytes_per_s'] / 1e9:g} GB/s "
                     f"(shared), then the host link: {o['reload_disk_s'] * 1e3:,.3f} ms ({o['disk_link']['source']})")
    held = ", ".join(f"{k} {'unbounded' if v is None else f'{v:,}'}" for k, v in o["requests_held"].items())
    total = o["requests_held_total"]
    lines.append(f"  prefixes of such requests the tiers hold: {held}; together "
                 + ("unbounded" if total is None else f"{total:,}"))
    print("\n".join(part for line in lines for part in wrap(line, terminal_width())))

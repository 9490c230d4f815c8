"""The words of an answer: its assumption lines, the reserve basis every face states first, and the one-line
summary that answers the question asked (issue 23), from :func:`kvdash.answer.calc.calculate`'s figures.
"""

from __future__ import annotations

from typing import Any

from kvdash.answer.inputs import CalcInput
from kvdash.core.arch import Architecture
from kvdash.core.dtypes import get_dtype
from kvdash.core.pool import PoolShape
from kvdash.engines.vllm import stored_kv_dtype
from kvdash.units import human_bytes

# why a model's cache layers are fewer than its decoder layers, by model_type
_NO_CACHE_OF_THEIR_OWN = {
    "gemma3n": "the last {k} reuse an earlier layer's KV (num_kv_shared_layers)",
    "gemma3n_text": "the last {k} reuse an earlier layer's KV (num_kv_shared_layers)",
    "nemotron_h": "the other {k} are MLP or MoE blocks (hybrid_override_pattern '-' / 'E'), which hold no cache",
}


def layer_count(arch: Architecture) -> str:
    """The layers that hold a cache (KV or state), and the decoder layers where the two counts differ:
    Falcon-H1 runs an attention and a Mamba mixer side by side in each decoder layer (88 cache layers in 44);
    Gemma 3n's last 15 of 35 layers read earlier layers' KV, Nemotron-H's MLP blocks hold none."""
    n, d = arch.num_layers, arch.decoder_layers
    if not d or d == n:
        return f"{n} layers"
    if n > d:
        state = sum(1 for layer in arch.layers if layer.is_state)
        both = n - d  # decoder layers with an attention beside their state mixer
        return f"{n} cache layers in {d} decoder layers (" + (
            "each runs an attention and a state mixer side by side)" if both == d == state else
            f"{both} of them run an attention beside their state mixer)")
    why = _NO_CACHE_OF_THEIR_OWN.get(arch.model_type, "the other {k} hold no cache of their own").format(k=d - n)
    return f"{n} cache layers of {d} decoder layers ({why})"


def kv_geometry(arch: Architecture) -> str:
    """KV heads and head_dim (V's where it differs), per layer kind where the kinds differ (MiMo-V2-Flash: full
    layers 4 KV heads, sliding ones 8)."""
    shapes = sorted({(layer.kind, layer.kv_heads, layer.head_dim, layer.head_dim_v or layer.head_dim)
                     for layer in arch.layers if layer.kind in ("full", "sliding", "chunked")})

    def one(kv: int, k: int, v: int) -> str:
        return f"{kv} KV heads, head_dim {k}" + (f" (V {v})" if v != k else "")

    if len({shape[1:] for shape in shapes}) > 1:
        return "; ".join(f"{kind} layers {one(*rest)}" for kind, *rest in shapes)
    if shapes:
        return one(*shapes[0][1:])
    return f"{arch.kv_heads} KV heads, head_dim {arch.head_dim}"


def assumptions(inp: CalcInput, budget_info: dict[str, Any], shapes: list[PoolShape]) -> list[str]:
    arch, dt = inp.arch, get_dtype(inp.kv_dtype)
    s = shapes[0]
    lines = [
        f"model: {arch.name} ({arch.source}); {layer_count(arch)}: {arch.pattern()}; "
        + (f"{arch.num_attention_heads} attention heads, {kv_geometry(arch)}; " if arch.num_attention_heads else
           "no attention layers; ")
        + f"max context {arch.max_context:,} tokens"
        + (" (config.json names no length field: vLLM 0.33's fallback, _get_and_verify_max_len, "
           "vllm/config/model.py)" if "length_fields" in arch.facts and not arch.facts["length_fields"] else "")
        + "".join(f"; {line}" for line in arch.derived),
        (f"KV dtype: {dt.name}, {dt.bytes_per_element} byte(s) per element; scales: " if not
         stored_kv_dtype(arch, inp.kv_dtype)[1] else
         f"KV dtype: {inp.kv_dtype if inp.kv_dtype.lower() == 'auto' else dt.name} asked, stored as "
         f"{stored_kv_dtype(arch, inp.kv_dtype)[0]} "
         f"({get_dtype(stored_kv_dtype(arch, inp.kv_dtype)[0]).bytes_per_element} byte(s) per element); scales: ")
        + ("fp32 per token per KV head for K and V" if inp.kv_scales == "token_head" else
           "per tensor (no per-token bytes)"),
        f"block size: {inp.block_size} tokens per block"
        + (f" (requested {s.requested_block_size}; raised so one attention page holds the "
           f"{s.state_page_bytes:,}-byte state page of a state layer, as vLLM 0.33 aligns hybrids)"
           if s.requested_block_size != s.block_size else ""),
        f"parallelism: tensor parallel {inp.tp}, pipeline parallel {inp.pp}; the budget is per rank and "
        "the tightest rank decides",
        f"KV budget per rank: {budget_info['per_rank_bytes']:,} bytes ({budget_info['formula']}; "
        f"source: {budget_info['source']})",
        f"request: {inp.used:,} tokens held now; contiguous reservation (Max) {inp.max_reserved:,} tokens; "
        f"final length {inp.final or inp.used:,} tokens (Pow2/Oracle)",
        "capacities are instantaneous snapshots: every request at the same length, no growth "
        "headroom, no prefix reuse unless --prefix is given",
    ]
    stored, why = stored_kv_dtype(arch, inp.kv_dtype)
    if why.startswith("auto:"):  # the checkpoint declares its KV dtype: said second, it moves the answer
        lines.insert(1, f"KV cache {stored}, from --kv-dtype {why}; every figure here uses {stored}")
    elif why:  # vLLM 0.33 ignores --kv-cache-dtype for this model's attention (Falcon): said second
        lines.insert(1, f"KV cache stays {stored}, not {dt.name}: vLLM 0.33 does not apply --kv-cache-dtype to "
                        f"{arch.model_type}'s attention ({why}); every figure here uses {stored}")
    elif dt.quantized and inp.kv_scales == "tensor" and dt.name != "fp8_ds_mla":
        lines.append(f"{dt.name} figures are idealized: scale storage, kernel alignment and accuracy "
                     "are not included and must be measured")
    if s.groups > 1:
        lines.append(f"hybrid layout: {s.groups} KV-cache groups of {s.group_size} layers share one pool "
                     f"({s.padded_layers} padded layer slots), as vLLM 0.33 groups them")
    if any(sh.state_layers for sh in shapes):
        lines.append(
            f"state layers ({s.state_layers} on the first stage) hold a fixed-size state per request, whatever "
            f"its length: {s.state_page_bytes:,} bytes per layer, padded to one {s.block_size}-token attention "
            f"page; prefix caching {'on' if inp.prefix_caching else 'off'} -> mamba_cache_mode "
            f"'{s.mamba_mode}': {s.state_blocks} block(s) per request for the {s.state_groups} state group(s)")
    if "gpu_memory_bytes" in budget_info:
        lines.append(f"GPU: {budget_info['gpu']}, {budget_info['gpu_memory_bytes']:,} bytes "
                     f"({budget_info['gpu_memory_basis']}); weights {budget_info['weights_bytes']:,} bytes "
                     f"({budget_info['weights_basis']}), {budget_info['weights_per_rank_bytes']:,} per rank; "
                     f"reserve {budget_info['reserve_bytes']:,} bytes per rank ({budget_info['reserve_basis']})")
        for t in budget_info["reserve_terms"]:
            lines.append(f"reserve term: {t['name']} {t['bytes']:,} bytes"
                         f"{' (extrapolated)' if t['extrapolated'] else ''}: {t['basis']}")
    return lines


def caps_line(e: dict[str, Any], label: str) -> str:
    """The assumption line of the engine caps (what the engine, named ``label``, runs; first after the budget)."""
    batches = e["max_concurrent_batches"]
    return (f"engine caps: {label} runs at most {e['max_num_seqs']:,} requests at once and schedules "
            f"{e['max_num_batched_tokens']:,} tokens per step ({e['caps_basis']}); {batches} "
            f"batch{'es' if batches > 1 else ''} in flight ("
            + ("async scheduling, on by default" if e["async_scheduling"] else "--no-async-scheduling")
            + f"): sliding-window and chunked layers are sized for {e['max_in_flight_tokens']:,} tokens")


def reserve_mode(budget_info: dict[str, Any]) -> str:
    """How the budget treats the runtime reserve: ``declared`` (an explicit or default budget: none taken
    off), ``calibration`` / ``published`` (``--reserve auto``), ``given`` (a size) or ``upper bound``
    (a GPU-derived budget with ``--reserve 0``)."""
    if "gpu_memory_bytes" not in budget_info:
        return "declared"
    basis = budget_info.get("reserve_basis", "")
    if basis.startswith("--reserve auto: calibration"):
        return "calibration"
    if basis.startswith("--reserve auto"):
        return "published"
    return "given" if budget_info.get("reserve_bytes") else "upper bound"


def reserve_text(budget_info: dict[str, Any]) -> str:
    """The reserve basis in a few words, for the first line of every face (calc, simulate, live, exporter).

    >>> reserve_text({"per_rank_bytes": 1, "source": "default"})
    "the tutorial's 12 GiB KV budget, declared: no runtime reserve taken off"
    """
    mode = reserve_mode(budget_info)
    if mode == "declared":
        return ("the tutorial's 12 GiB KV budget, declared" if budget_info.get("source") == "default"
                else "a declared KV budget") + ": no runtime reserve taken off"
    size = human_bytes(int(budget_info["reserve_bytes"]))
    if mode == "upper bound":
        return "UPPER BOUND: --reserve 0, no runtime reserve"
    if mode == "given":
        return f"runtime reserve {size} per rank, given with --reserve"
    extrapolated = any(t.get("extrapolated") for t in budget_info.get("reserve_terms", []))
    return (f"runtime reserve {size} per rank, --reserve auto: "
            + ("a kvdash calibrate entry" if mode == "calibration" else
               "published terms" + (", extrapolated" if extrapolated else "")))


def summary(inp: CalcInput, r: dict[str, Any]) -> str:
    """One line that answers the question asked: how many requests of this length fit, paged and contiguous
    (groups that fit with ``--group``, with and without sharing with ``--prefix``, the plan with ``--target``,
    the check of a logged figure with ``--logged-tokens``), on which reserve basis, and why."""
    cap, pool, req = r["capacity"], r["pool"], r["request"]
    bud = r["budget"]
    basis = reserve_text(bud)
    if "group" in r:
        g = r["group"]
        k = len(g["lengths"])
        lead = (f"{g['complete_groups']:,} groups of {' + '.join(f'{n:,}' for n in g['lengths'])} tokens fit paged "
                f"({g['complete_groups'] * k:,} requests), {g['contiguous_complete_groups']:,} contiguous"
                + seqs_tail(g["complete_groups"] * k, r["engine"]))
    elif "prefix" in r:
        p = r["prefix"]
        lead = (f"{p['requests_with_sharing']:,} requests of {inp.used:,} tokens fit paged sharing a "
                f"{p['prefix_tokens']:,}-token prefix, {p['requests_without_sharing']:,} without sharing, "
                f"{cap['contiguous_requests']:,} contiguous" + seqs_tail(p["requests_with_sharing"], r["engine"]))
    else:
        lead = (f"{cap['paged_requests']:,} requests of {inp.used:,} tokens fit {running_text(r['engine'])}"
                f"{cap['contiguous_requests']:,} contiguous{running_tail(r['engine'])}")
    if reserve_mode(bud) == "upper bound":
        auto = bud.get("auto_reserve_requests")
        line = ("UPPER BOUND (--reserve 0, no runtime reserve"
                + (f"; the default --reserve auto gives {auto:,}" if auto is not None else "") + f"): {lead}")
    else:
        line = f"{lead} ({basis})"
    if "planning" in r:
        p = r["planning"]
        what = (f"{p['target_requests']:,} requests of {inp.used:,} tokens" if "group" not in r else
                f"{p['target_requests']:,} requests of the group")
        if inp.prefix:
            what += f" sharing a {inp.prefix:,}-token prefix"
        plan = (f"For {what}: {p['budget_needed_per_rank_bytes']:,} B of KV per rank, "
                + ("which the budget holds" if p["fits_current_budget"] else "more than the budget holds")
                + (f"; minimum --tp {p['min_tp']}" if p["min_tp"] else "; no --tp up to 64 holds them"))
        if "min_gpu_util" in p:
            plan += (f", minimum --gpu-util {p['min_gpu_util']:.2f} at this --tp" if p["min_gpu_util"] is not None
                     else ", no --gpu-util fits them at this --tp")
        if not p["runs_at_once"]:
            plan += (f"; vLLM runs at most {p['max_num_seqs']:,} at once (max_num_seqs), so {p['target_requests']:,} "
                     f"at once need --max-num-seqs {p['target_requests']:,}")
        line = f"{plan}. {line}"
    if "log_check" in r:
        line = f"{r['log_check']['text']} {line}"
    attention_free = pool["state_layers"] and not r["bytes_per_token"]  # Mamba: state pages only
    line += (f": a KV budget of {pool['budget_bytes']:,} B ({human_bytes(pool['budget_bytes'])}) per rank "
             + (f"holds {r['whole_pool_blocks']:,} blocks of one {pool['state_page_bytes']:,}-byte state page per "
                f"layer (attention-free: no per-token KV)" if attention_free else
                f"holds {r['whole_pool_blocks']:,} blocks of {pool['block_size']} tokens "
                f"({r['bytes_per_token']:,} B per token)"))
    if "group" in r:
        g = r["group"]
        off = g["offload"]
        line += (f"; a group takes {g['blocks_per_group']:,} blocks, {g['useful_slots']:,} useful of "
                 f"{g['allocated_slots']:,} allocated slots ({g['tail_waste_slots']:,} in block tails); offloading "
                 f"its longest request ({off['tokens']:,} tokens) moves {off['useful_bytes']:,} B of KV "
                 f"({off['allocated_bytes']:,} B in whole blocks)")
        if inp.max_reserved > min(g["lengths"]):  # some request holds less than it reserves
            line += f"; contiguous, each request reserves --max-reserved {inp.max_reserved:,} tokens up front"
        return line + "."
    if attention_free:
        line += (f"; a request of any length holds {pool['state_blocks_per_request']:,} of them, "
                 f"{pool['state_bytes_per_request']:,} B of recurrent state (mamba_cache_mode "
                 f"'{pool['mamba_cache_mode']}')")
    else:
        line += f"; paged, a request takes {req['paged_blocks']:,} blocks"
    per = req.get("paged_blocks_per_group")
    if per:  # several KV-cache groups: the request's blocks in each kind of group (gpt-oss-120b: 52 + 9)
        parts = []
        for kind, blocks in per.items():
            n = pool["full_groups"] if kind == "full" else pool["window_groups"]
            parts.append(f"{blocks:,} in its {kind} group" if n == 1 else
                         f"{blocks:,} in each of its {n} {kind} groups")
        line += f" ({' + '.join(parts)})"
    if pool["state_layers"] and not attention_free:
        line += f" plus {pool['state_bytes_per_request']:,} B of recurrent state"
    if "prefix" in r:
        p = r["prefix"]
        line += (f"; sharing, {p['shared_blocks']:,} prefix blocks are stored once and each request owns "
                 f"{p['own_blocks_per_request']:,}")
    if inp.max_reserved > inp.used:
        line += (f"; contiguous, it reserves --max-reserved {inp.max_reserved:,} tokens up front, "
                 f"{inp.max_reserved - inp.used:,} of them unused now")
    else:
        line += "; contiguous, it reserves exactly its length, so only the last block's tail differs"
    for v in r["sensitivity"]["variants"]:  # fp8 against bf16, the other way round
        if v["variant"].startswith("kv dtype"):
            line += (f"; with the KV cache in {v['kv_dtype']}, {v['paged_requests']:,} would fit paged"
                     + (" (idealized: no scales)" if "idealized" in v["variant"] else ""))
    return line + "."


def running_text(e: dict[str, Any]) -> str:
    """``'in the KV cache paged, '`` when the scheduler cap is below what fits, else ``'paged, '``."""
    return "in the KV cache paged, " if e["limited_by"] == "max_num_seqs" else "paged, "


def seqs_tail(fit: int, e: dict[str, Any]) -> str:
    """``', but vLLM runs at most M at once'`` for a count other than one request's (groups, prefix sharing)."""
    if fit <= e["max_num_seqs"]:
        return ""
    return f", but vLLM runs at most {e['max_num_seqs']:,} at once (its max_num_seqs)"


def running_tail(e: dict[str, Any]) -> str:
    """``', but vLLM runs at most M at once (max_num_seqs)'`` when the scheduler cap is below what fits."""
    if e["limited_by"] != "max_num_seqs":
        return ""
    return f", but vLLM runs at most {e['max_num_seqs']:,} at once (its max_num_seqs)"

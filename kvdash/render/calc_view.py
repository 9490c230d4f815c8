"""The tables of ``kvdash calc``: one section per concern, every figure with its unit.

Drawn by :mod:`kvdash.render.table` (no rich import) so that ``kvdash calc`` starts as fast as
``nvitop --help``; values are never truncated, explanations wrap.
"""

from __future__ import annotations

from typing import IO, Any

from kvdash.render.table import Styled, Table, print_tables
from kvdash.units import human_bytes, ratio_text


def b(n: int) -> str:
    """Exact bytes and a binary-unit reading: ``327,680 B (320.00 KiB)``."""
    return f"{n:,} B ({human_bytes(n)})" if n >= 1024 else f"{n:,} B"


def ratio(x: float | None) -> str:
    return ratio_text(x, "n/a (no contiguous request fits)")


def _kv(title: str, rows: list[tuple[str, str, str]]) -> Table:
    table = Table(title=title)
    table.add_column("figure")
    table.add_column("value", justify="right", wrap=False)
    table.add_column("how", style="dim")
    for row in rows:
        table.add_row(*row)
    return table


def _per_token_how(r: dict[str, Any]) -> str:
    """How the per-token figure was formed, for the architecture at hand."""
    arch, pool = r["architecture"], r["pool"]
    kinds = set(arch["layer_kinds"])
    if kinds == {"mla"} and arch.get("index_bytes_per_token_per_layer"):
        how = (f"layers x (latent (kv_lora_rank + qk_rope_head_dim) x bytes + the sparse-attention indexer's "
               f"{arch['index_bytes_per_token_per_layer']} B key cache: fp8 index_head_dim + a 4 B scale per 128)")
    elif kinds == {"mla"}:
        how = "layers x latent (kv_lora_rank + qk_rope_head_dim) x bytes: one latent, no K/V pair"
    elif kinds == {"full"} and pool["group_size"] == arch["layers"]:
        how = "2 x layers x kv_heads x head_dim x bytes"
    else:
        how = "sum over attention layers of each one's bytes per token"
    if r["inputs"]["kv_scales"] == "token_head":
        how += ", + an fp32 K and V scale per KV head"
    return how + " (per rank)"


def tables(r: dict[str, Any]) -> list[Table]:
    out: list[Table] = []
    a = Table(title="Assumptions", show_header=False)
    a.add_column("assumption")
    for line in r["assumptions"]:
        a.add_row(f"- {line}")
    out.append(a)

    pool, req, cap = r["pool"], r["request"], r["capacity"]
    out.append(_kv("Per-token bytes", [
        ("KV bytes per token", b(r["bytes_per_token"]), _per_token_how(r)),
        ("bytes per token per layer", b(pool["layer_token_bytes"]), "largest layer kind; others padded to it"),
        ("recurrent state per request", b(pool["state_bytes_per_request"]),
         (f"fixed, whatever the length: {pool['state_layers']} state layers of {pool['state_page_bytes']:,} B, "
          f"{pool['state_blocks_per_request']} block(s) of the {pool['state_groups']} state group(s), "
          f"mamba_cache_mode '{pool['mamba_cache_mode']}'") if pool["state_layers"] else "no state layers"),
    ]))
    groups = pool["full_groups"] + pool["window_groups"]
    out.append(_kv("Pool", [
        ("KV budget per rank", b(pool["budget_bytes"]), r["budget"]["formula"]),
        ("token slots (no blocks)", f"{r['kv_token_slots']:,} tokens", "floor(budget / bytes per token)"),
        ("block size", f"{pool['block_size']} tokens", r["inputs"]["block_size_reason"]),
        ("bytes per block", b(pool["block_bytes"]),
         f"block size x layer bytes x {pool['group_size']} layers per group"),
        ("KV-cache groups", f"{groups + pool['state_groups']} ({pool['full_groups']} full, "
                            f"{pool['window_groups']} sliding/chunked, {pool['state_groups']} state)",
         f"{pool['padded_layers']} padded layer slots"),
        ("whole pool blocks", f"{r['whole_pool_blocks']:,} blocks", "floor(budget / bytes per block)"),
        ("block-backed token slots", f"{r['block_backed_token_slots']:,} tokens", "blocks / groups x block size"),
        ("leftover (cannot form a block)", b(pool["leftover_bytes"]),
         f"{pool['leftover_tokens']:.1f} tokens of KV"),
    ]))
    bud = r["budget"]
    if "reserve_bytes" in bud:
        rows = [(t["name"] + (" (extrapolated)" if t["extrapolated"] else ""), b(t["bytes"]), t["basis"])
                for t in bud.get("reserve_terms", [])]
        rows.append(("runtime reserve per rank", b(bud["reserve_bytes"]), bud.get("reserve_basis", "")))
        out.append(_kv("Runtime reserve (vLLM 0.33: requested - weights - activation peak - non-torch - CUDA graphs)",
                       rows))
    per = req.get("paged_blocks_per_group")
    blocks_how = ("ceil(length / block size)" if not per else "sum over the KV-cache groups: " + " + ".join(
        f"{n:,} per {kind} group" for kind, n in per.items()))
    out.append(_kv("One request", [
        ("tokens held now", f"{req['used_tokens']:,} tokens", "--length"),
        ("contiguous reservation", f"{req['contiguous_slots']:,} slots", "--max-reserved (Max policy)"),
        ("paged blocks", f"{req['paged_blocks']:,} blocks", blocks_how),
        ("paged slots", f"{req['paged_slots']:,} slots", "ceil(length / block size) x block size"
         + (" (the token slots of one full-attention group)" if per else "")),
        ("unused slots in the last block", f"{req['paged_unused_slots']:,} slots", "paged slots - length"),
        ("internal (tail) waste", f"{req['paged_internal_waste_percent']:.4f} %", "unused / paged slots"),
    ]))
    # one column per policy, so the table fits 80 columns without cutting a value short
    policies = r["policies"]
    pol = Table(title="Allocation policies: one request, and how many fit (MiB/GiB = 2^20/2^30 B)")
    pol.add_column("per request")
    for name in policies:
        pol.add_column(name.replace("contiguous_", ""), justify="right", wrap=False)
    for label, key, fmt in (("reserved tokens", "reserved_tokens", "{:,}"), ("allocated", "allocated_bytes", None),
                            ("useful", "useful_bytes", None), ("reservation waste", "reservation_waste_bytes", None),
                            ("tail waste", "tail_waste_bytes", None), ("waste %", "waste_percent", "{:.2f}"),
                            ("requests that fit", "requests", "{:,}")):
        pol.add_row(label, *(human_bytes(p[key]) if fmt is None else fmt.format(p[key]) for p in policies.values()))
    pol.add_row("paged fits this many times more", *(ratio(p['paged_over_contiguous'])
                                                      if p.get("paged_over_contiguous") else "-"
                                                      for p in policies.values()))
    out.append(pol)
    out.append(_kv("Capacity (snapshot)", [
        ("contiguous requests (Max)", f"{cap['contiguous_requests']:,}", "floor(budget / reservation bytes)"),
        ("paged requests", f"{cap['paged_requests']:,}", "floor(pool blocks / blocks per request)"),
        ("paged / contiguous", ratio(cap["request_capacity_ratio"]), "a capacity ratio, not a throughput ratio"),
        ("vLLM runs at once", f"{r['engine']['running_requests']:,}",
         f"min(paged requests, max_num_seqs {r['engine']['max_num_seqs']:,})"),
    ]))
    if "group" in r:
        g = r["group"]
        out.append(_kv(f"Group {g['lengths']} packed repeatedly", [
            ("useful slots per group", f"{g['useful_slots']:,} slots", "sum of lengths"),
            ("allocated slots per group", f"{g['allocated_slots']:,} slots", "sum of ceil(len / B) x B"),
            ("tail waste per group", f"{g['tail_waste_slots']:,} slots", "allocated - useful"),
            ("blocks per group", f"{g['blocks_per_group']:,} blocks", ""),
            ("complete groups (paged)", f"{g['complete_groups']:,}", "no partial group admitted"),
            ("complete groups (contiguous Max)", f"{g['contiguous_complete_groups']:,}", ""),
            (f"offload of the {g['offload']['tokens']:,}-token request: useful", b(g["offload"]["useful_bytes"]),
             "tokens x bytes per token"),
            ("offload: full allocated blocks", b(g["offload"]["allocated_bytes"]),
             "wire size also depends on layout, metadata, scales"),
        ]))
    if "prefix" in r:
        p = r["prefix"]
        out.append(_kv(f"Prefix sharing ({p['prefix_tokens']:,}-token shared prefix)", [
            ("shared blocks (stored once)", f"{p['shared_blocks']:,} blocks", "whole prefix blocks x full groups"),
            ("copied-on-write tail", f"{p['copied_tail_tokens']:,} tokens", "prefix mod block size, per request"),
            ("own blocks per request", f"{p['own_blocks_per_request']:,} blocks", ""),
            ("requests without sharing", f"{p['requests_without_sharing']:,}", ""),
            ("requests with sharing", f"{p['requests_with_sharing']:,}", "(pool - shared) / own blocks"),
            ("memory saved at the unshared count", b(p["saved_bytes_at_requests_without_sharing"]),
             f"{p['saved_percent_at_requests_without_sharing']:.2f} % of that memory"),
        ]))
    v = r.get("vllm_view")
    if v is None:  # --engine-rules sglang: SGLang's own start-up line follows the tables
        note = Table(title="Engine start-up line", show_header=False)
        note.add_column("line")
        note.add_row(r.get("vllm_view_omitted", "vLLM's start-up lines are omitted"))
        out.append(note)
    else:
        out.append(_vllm_view(v))
    return _after_view(r, out)


def _vllm_view(v: dict[str, Any]) -> Table:
    why = Table(title=f"What vLLM {v['version']} would log for this configuration, and why it differs from kvdash",
                show_header=False)
    why.add_column("line")
    why.add_row(f"num_gpu_blocks = {v['num_gpu_blocks']:,}; {v['blocks_per_request_at_max_model_len']:,} blocks "
                f"per request at max_model_len {v['max_model_len']:,}")
    for line in v["log_lines"]:
        why.add_row(Styled(line, "bold"))
    for note in v["differences"]:
        why.add_row(f"- {note}")
    return why


def _after_view(r: dict[str, Any], out: list[Table]) -> list[Table]:
    if "planning" in r:
        p = r["planning"]
        rows = [
            ("budget per rank needed", b(p["budget_needed_per_rank_bytes"]),
             f"{p['target_requests']:,} requests x "
             + (f"{p['at_tokens']:,} tokens" if isinstance(p["at_tokens"], int) else f"mix {p['at_tokens']}")
             + ", paged"),
            ("fits the current budget", "yes" if p["fits_current_budget"] else "no", ""),
        ]
        if "min_gpu_util" in p:
            rows.append(("minimum --gpu-util", f"{p['min_gpu_util']:.2f}" if p["min_gpu_util"] is not None
                         else "does not fit on this GPU",
                         "two decimals, rounded up"))
        rows.append(("minimum tensor parallel", str(p["min_tp"]) if p["min_tp"] else "none up to 64",
                     "same per-rank budget rule"))
        rows.append(("longest uniform length", f"{p['longest_uniform_tokens']:,} tokens",
                     "capped by the model's context" if p["longest_limited_by_context"] else
                     f"for {p['target_requests']:,} requests at once"))
        out.append(_kv("Planning", rows))
    s = r["sensitivity"]
    sens = Table(title="Sensitivity (same budget)")
    for col in ("variant", "KV B/token", "token slots", "pool blocks", "contiguous", "paged", "ratio"):
        sens.add_column(col, "left" if col == "variant" else "right", wrap=col == "variant")
    for row in s["variants"]:
        sens.add_row(row["variant"], f"{row['bytes_per_token']:,}", f"{row['kv_token_slots']:,}",
                     f"{row['whole_pool_blocks']:,}", f"{row['contiguous_requests']:,}",
                     f"{row['paged_requests']:,}", ratio(row["request_capacity_ratio"]))
    out.append(sens)
    return out


def footer(result: dict[str, Any]) -> str:
    """The closing line of calc's tables: the version and what the units mean."""
    return f"kvdash {result['kvdash_version']} - bytes are exact; KiB/MiB/GiB are powers of 2."


def render(result: dict[str, Any], file: IO[str] | None = None, width: int | None = None,
           color: bool | None = None, closing: bool = True) -> None:
    """Print every section of ``result`` (from :func:`kvdash.answer.calc.calculate`); ``closing=False`` leaves
    the footer out, for a caller that prints more sections after the tables and the footer after those."""
    print_tables(tables(result), footer(result) if closing else "", file=file, width=width, color=color,
                 header=result.get("summary", ""))

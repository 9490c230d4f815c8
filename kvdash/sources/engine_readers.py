"""The per-engine readers of a parsed ``/metrics`` page: vLLM 0.33 (and older names), SGLang 0.5.23 (one pool per
data-parallel rank; HiCache), LMCache 0.5.6's tier -- each written against the engine's exposition code and
the pages it produced (``conformance/metrics/``)."""

from __future__ import annotations

import math
from typing import Any

from kvdash.sources.engine_page import (
    MAX_COUNT,
    MAX_RANKS,
    EngineReading,
    RankReading,
    Sample,
    _by,
    _Checker,
    _finite,
    _mean,
    _one,
    _order,
    _rank_key,
    _served_model,
    _smallest,
    _sum,
    _sum_of,
    _worst,
    tightest,
)


def _lmcache(check: _Checker, samples: list[Sample]) -> dict[str, Any]:
    """LMCache 0.5.6's tier (``lmcache/observability.py``, ``PrometheusLogger``; one LMCache engine per vLLM
    worker, label ``worker_id``): every worker counts the same request's tokens, so tokens are one worker's
    (the lowest ``worker_id``); bytes held (``local_cache_usage``, each worker its shard) are summed; seconds
    are the busiest worker's (``time_to_retrieve``/``time_to_store`` sums).  Hit rates from the counters
    (lifetime; the ``*_hit_rate`` gauges cover only LMCache's last logging interval): the tier's hit rate is
    the lookup's, ``num_lookup_hits`` / ``num_lookup_tokens`` (the prompt tokens LMCache found); the retrieve
    rate, ``num_hit_tokens`` / ``num_requested_tokens``, is what it could load of what it was asked for."""
    workers = _by(samples, "worker_id")
    low = min(workers, key=lambda w: (0, int(w)) if w.isdigit() else (1, 0))
    mine = workers[low]
    out: dict[str, Any] = {"tier": "LMCache", "lmcache_workers": len(workers)}
    for key, name in (("loaded_tokens", "lmcache:num_hit_tokens_total"),
                      ("requested_tokens", "lmcache:num_requested_tokens_total"),
                      ("hit_tokens", "lmcache:num_lookup_hits_total"),
                      ("query_tokens", "lmcache:num_lookup_tokens_total"),
                      ("stored_tokens", "lmcache:num_stored_tokens_total")):
        v = _sum(check, f"lmcache {key}", mine, name)
        if v is not None:
            out[key] = check.count(f"lmcache {key}", v)
    used = _sum(check, "lmcache local_cache_bytes", samples, "lmcache:local_cache_usage")
    if used is not None:
        out["used_bytes"] = check.count("lmcache local_cache_bytes", used)
    for key, name in (("load_seconds", "lmcache:time_to_retrieve_sum"), ("store_seconds", "lmcache:time_to_store_sum")):
        vals = _finite(check, f"lmcache {key}", samples, name)
        if vals:
            out[key] = max(vals)
    if out.get("query_tokens"):
        out["hit_rate"] = check.fraction("lmcache hit_rate", (out.get("hit_tokens") or 0) / out["query_tokens"])
    if out.get("requested_tokens"):
        out["retrieve_hit_rate"] = check.fraction("lmcache retrieve_hit_rate",
                                                  (out.get("loaded_tokens") or 0) / out["requested_tokens"])
    return out


SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")


def _vllm(url: str, samples: list[Sample], check: _Checker) -> EngineReading:
    """vLLM: one front end serves one or more engines (DP ranks), each its own pool, told apart by the
    ``engine`` label.  ``cache_config_info`` is written once per engine; its ``num_gpu_blocks`` is the
    front end's SUM over its engines (``MPClient._apply_ready_response``, vllm/v1/engine/core_client.py),
    its ``kv_cache_size_tokens`` the engine's own pool in tokens, kept per engine."""
    infos = {s.labels.get("engine", ""): s.labels for s in samples if s.name == "vllm:cache_config_info"}
    engines = sorted({s.labels.get("engine", "") for s in samples if s.name in (
        "vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
        "vllm:cache_config_info")}, key=_order) or [""]
    by_engine = _by(samples, "engine")
    notes: list[str] = []
    units: list[RankReading] = []
    first = infos.get(engines[0], next(iter(infos.values()), {}))
    block_size = check.count("block_size", first.get("block_size"), low=1) if first.get("block_size") not in (
        None, "", "None") else None
    for eng in engines:
        info = infos.get(eng, first)
        mine = by_engine.get(eng, []) if len(engines) > 1 else samples
        tag = f"engine {eng} " if len(engines) > 1 else ""
        tokens = check.count(f"{tag}total_tokens", info.get("kv_cache_size_tokens")) \
            if info.get("kv_cache_size_tokens") not in (None, "", "None") else None
        blocks_label = check.count(f"{tag}num_gpu_blocks", info.get("num_gpu_blocks")) \
            if info.get("num_gpu_blocks") not in (None, "", "None") else None
        if tokens is not None:
            blocks = tokens // block_size if block_size else None
        elif len(engines) == 1 and blocks_label is not None:  # an older vLLM: one engine, its own blocks
            blocks = blocks_label
            tokens = blocks * block_size if block_size else None
        else:
            blocks = None
        usage = check.fraction(f"{tag}kv_usage", _mean(check, f"{tag}kv_usage", mine, "vllm:kv_cache_usage_perc",
                                                        "vllm:gpu_cache_usage_perc"))
        sleep = ""
        states = {s.labels.get("sleep_state", ""): s.value for s in mine if s.name == "vllm:engine_sleep_state"}
        if states:
            sleep = next((k for k in ("discard_all", "weights_offloaded") if states.get(k) == 1), "") or \
                ("awake" if states.get("awake") == 1 else "sleeping")
        units.append(RankReading(
            rank=eng or "0", total_tokens=tokens, num_gpu_blocks=blocks, kv_usage=usage,
            used_tokens=None if usage is None or tokens is None else int(usage * tokens),
            running=check.count(f"{tag}running", _sum(check, f"{tag}running", mine, "vllm:num_requests_running")),
            waiting=check.count(f"{tag}waiting", _sum(check, f"{tag}waiting", mine, "vllm:num_requests_waiting")),
            sleep=sleep))
    if len(engines) > 1 and first.get("num_gpu_blocks") not in (None, "", "None"):
        notes.append(f"cache_config_info's num_gpu_blocks ({first.get('num_gpu_blocks')}) is the front end's sum "
                     f"over its {len(engines)} engines; each engine's pool is its kv_cache_size_tokens")
    hits = _sum(check, "prefix_hit_rate", samples, "vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
    queries = _sum(check, "prefix_hit_rate", samples, "vllm:prefix_cache_queries_total",
                   "vllm:gpu_prefix_cache_queries_total")
    if hits is not None and queries:
        hit_rate = check.fraction("prefix_hit_rate", hits / queries)
    else:
        hit_rate = check.fraction("prefix_hit_rate", _mean(check, "prefix_hit_rate", samples,
                                                           "vllm:gpu_prefix_cache_hit_rate"))
    reasons: dict[str, int] = {}
    for s in samples:
        if s.name == "vllm:num_requests_waiting_by_reason" and math.isfinite(s.value):
            reasons[s.labels.get("reason", "")] = reasons.get(s.labels.get("reason", ""), 0) + int(s.value)
    tight = tightest(units)
    ext_q = _sum(check, "external_queries", samples, "vllm:external_prefix_cache_queries_total")
    ext_h = _sum(check, "external_hits", samples, "vllm:external_prefix_cache_hits_total")
    offload = _vllm_offload(check, samples, first, ext_q, ext_h)
    return EngineReading(
        url=url, kind="vllm", kv_usage=_worst([u.kv_usage for u in units]),
        running=_sum_of([u.running for u in units]), waiting=_sum_of([u.waiting for u in units]),
        preemptions=check.count("preemptions", _sum(check, "preemptions", samples, "vllm:num_preemptions_total",
                                                    "vllm:num_preemptions")),
        prefix_hit_rate=hit_rate, num_gpu_blocks=tight.num_gpu_blocks if tight else None, block_size=block_size,
        total_tokens=tight.total_tokens if tight else None, used_tokens=tight.used_tokens if tight else None,
        cache_dtype=first.get("cache_dtype", "")[:40],
        gpu_memory_utilization=first.get("gpu_memory_utilization", "")[:40],
        served_model=_served_model(samples)[:200], ranks=tuple(units),
        invalid=check.invalid, prefix_queries=check.count("prefix_queries", queries),
        prefix_hits=check.count("prefix_hits", hits), external_queries=check.count("external_queries", ext_q),
        external_hits=check.count("external_hits", ext_h), waiting_by_reason=reasons, offload=offload,
        notes=tuple(notes), sleep=" / ".join(dict.fromkeys(u.sleep for u in units if u.sleep)),
    )


_VLLM_TIER_INFO = (("chunks", "cpu_num_chunks"), ("blocks_per_chunk", "cpu_blocks_per_chunk"),
                   ("size_bytes", "cpu_kv_cache_size_bytes"), ("size_tokens", "cpu_kv_cache_size_tokens"))
# the offloading connector's transfer counters (``offloading/metrics.py``), then the deprecated names with a
# ``transfer_type`` label that vLLM 0.33 still writes beside them for the CPU tier
_VLLM_TRANSFERS = (("loaded_bytes", "vllm:kv_offload_load_bytes_total", "vllm:kv_offload_total_bytes_total",
                    "CPU_to_GPU"),
                   ("stored_bytes", "vllm:kv_offload_store_bytes_total", "vllm:kv_offload_total_bytes_total",
                    "GPU_to_CPU"),
                   ("load_seconds", "vllm:kv_offload_load_time_total", "vllm:kv_offload_total_time_total",
                    "CPU_to_GPU"),
                   ("store_seconds", "vllm:kv_offload_store_time_total", "vllm:kv_offload_total_time_total",
                    "GPU_to_CPU"))


def _vllm_offload(check: _Checker, samples: list[Sample], first: dict[str, str], ext_q: float | None,
                  ext_h: float | None) -> dict[str, Any]:
    """vLLM's offload tier: its size (``cache_config_info``'s ``kv_offloading_size``, GiB; the CPU tier's own
    ``vllm:kv_offload_config_info``: chunks, bytes and tokens, each engine's own, the smallest taken), its
    transfers (bytes and seconds loaded and stored, summed over engines), the share of the tier pinned by
    transfers in flight (``kv_offload_cpu_cache_usage_perc``, the worst engine's), and its hits: the KV
    connector's (``external_prefix_cache_*``, tokens; the offloading connector is vLLM's KV connector)."""
    offload: dict[str, Any] = {}
    size = first.get("kv_offloading_size", "")
    if size not in ("", "None"):
        offload = {"tier": f"vLLM native offloading ({first.get('kv_offloading_backend', 'native')})",
                   "size_gib": size[:20]}
    infos = [s.labels for s in samples if s.name == "vllm:kv_offload_config_info"]
    for key, label in _VLLM_TIER_INFO:
        vals = [check.count(f"offload {key}", i.get(label)) for i in infos if i.get(label) not in (None, "", "None")]
        if vals and all(v is not None for v in vals):
            offload.setdefault("tier", "vLLM native offloading")
            offload[key] = min(v for v in vals if v is not None)
    for key, name, old, direction in _VLLM_TRANSFERS:
        found = [x for x in samples if x.name == name]
        if not found:
            found = [x for x in samples if x.name == old and x.labels.get("transfer_type") == direction]
        v = _sum(check, f"offload {key}", found, name, old)
        if v is not None and offload:
            offload[key] = int(v) if key.endswith("bytes") and v <= MAX_COUNT else v
    pinned = _finite(check, "offload pinned", samples, "vllm:kv_offload_cpu_cache_usage_perc")
    if pinned is not None and offload:
        offload["pinned_fraction"] = check.fraction("offload pinned", max(pinned))
    if offload and ext_q:
        offload["hit_tokens"], offload["query_tokens"] = int(ext_h or 0), int(ext_q)
        offload["hit_rate"] = check.fraction("offload hit_rate", (ext_h or 0) / ext_q)
    return offload


def _by_cache_rank(samples: list[Sample], name: str) -> dict[str, list[Sample]]:
    """SGLang's radix-cache series of ``name`` (``RadixCacheMetricsCollector``, one per TP/PP rank, labelled
    ``dp_rank`` = 0 even without DP), per DP rank, each rank's label set as one key."""
    out: dict[str, list[Sample]] = {}
    for x in samples:
        if x.name == name:
            out.setdefault(x.labels.get("dp_rank", ""), []).append(x)
    return out


def _prefill_modes(stats: dict[str, list[Sample]]) -> dict[str, float]:
    """``sglang:prefill_effective_tokens_total`` by ``mode`` (input, device_hit, host_hit, storage_hit): one
    scheduler's per DP rank (pre-seeded at 0 on every rank, counted on the stats-logging rank), summed over DP
    ranks."""
    modes: dict[str, float] = {}
    for mine in stats.values():
        found = [x for x in mine if x.name == "sglang:prefill_effective_tokens_total"]
        if not found:
            continue
        low = min(_rank_key(x) for x in found)
        for x in found:
            if _rank_key(x) == low and math.isfinite(x.value):
                modes[x.labels.get("mode", "")] = modes.get(x.labels.get("mode", ""), 0.0) + x.value
    return modes


def _sglang_hicache(check: _Checker, cache: list[Sample], stats: dict[str, list[Sample]]) -> dict[str, Any]:
    """SGLang HiCache's transfers between the GPU and the host pool (L2), as its radix cache writes them
    (``sglang/srt/observability/metrics_collector.py``, ``RadixCacheMetricsCollector``): bytes per rank's KV
    shard (summed over the ranks: the physical total), tokens the same logical count on every TP rank (one
    rank's per DP rank), seconds the busiest rank's (ranks copy at once); and the prefill tokens by where
    their KV came from (``sglang:prefill_effective_tokens_total``: input, device_hit, host_hit, storage_hit;
    one scheduler's per DP rank): the host tier's hit rate is host_hit over all four."""
    out: dict[str, Any] = {}
    for key, name, how in (("stored_bytes", "sglang:hicache_backup_bytes_total", "sum"),
                           ("loaded_bytes", "sglang:load_back_bytes_total", "sum"),
                           ("stored_tokens", "sglang:hicache_backup_tokens_total", "one"),
                           ("loaded_tokens", "sglang:load_back_tokens_total", "one"),
                           ("store_seconds", "sglang:hicache_backup_duration_seconds_sum", "max"),
                           ("load_seconds", "sglang:load_back_duration_seconds_sum", "max")):
        groups = _by_cache_rank(cache, name)
        if not groups:
            continue
        if any(not math.isfinite(x.value) for g in groups.values() for x in g):
            check.invalid[f"offload {key}"] = "not a finite number"
            continue
        if how == "sum":
            out[key] = check.count(f"offload {key}", sum(x.value for g in groups.values() for x in g))
        elif how == "max":
            out[key] = max(x.value for g in groups.values() for x in g)
        else:  # one rank's (all its pools) per DP rank, summed over DP ranks
            total = 0.0
            for g in groups.values():
                low = min(_rank_key(x) for x in g)
                total += sum(x.value for x in g if _rank_key(x) == low)
            out[key] = check.count(f"offload {key}", total)
    modes = _prefill_modes(stats)
    total = sum(modes.values())
    if total > 0:
        out["hit_tokens"] = check.count("offload hit_tokens", modes.get("host_hit", 0.0))
        out["query_tokens"] = check.count("offload query_tokens", total)
        out["hit_rate"] = check.fraction("offload hit_rate", modes.get("host_hit", 0.0) / total)
        if modes.get("storage_hit"):
            out["storage_hit_tokens"] = check.count("offload storage_hit_tokens", modes["storage_hit"])
    return out


def _sglang(url: str, samples: list[Sample], check: _Checker) -> EngineReading:
    """SGLang: one scheduler per rank.  Every TP rank and PP stage writes the pool constants
    (``Scheduler.emit_metrics_constants`` has no rank gate); each PP stage's attention-TP rank 0 writes
    the stats (``SchedulerMetricsCollector.init_new``: ``is_stats_logging_rank``); with priority
    scheduling each queue is written as a total (``priority=""``) and per priority.  So per DP rank
    (``dp_rank``; each its own pool) kvdash takes one scheduler's figures (:func:`_one`), totals only;
    pools are never summed over TP/PP ranks, DP ranks never averaged.  The radix cache's own series (label
    ``cache_type``: HiCache's transfers) are read apart (:func:`_sglang_hicache`): they carry ``dp_rank="0"``
    even without DP, so they would otherwise read as a second pool."""
    cache = [s for s in samples if "cache_type" in s.labels]
    if cache:
        samples = [s for s in samples if "cache_type" not in s.labels]
    by_rank = _by(samples, "dp_rank")
    ranks = sorted(by_rank, key=_order)
    if len(ranks) > MAX_RANKS:
        return EngineReading(url=url, kind="sglang", error=f"{len(ranks):,} data-parallel ranks (dp_rank) on one "
                                                             f"page; kvdash reads at most {MAX_RANKS:,}")
    per_rank: list[RankReading] = []
    page = None
    for rank in ranks:
        mine = by_rank[rank]
        tag = f"rank {rank} " if len(ranks) > 1 else ""
        total = check.count(f"{tag}total_tokens", _smallest(check, f"{tag}total_tokens", mine,
                                                            "sglang:max_total_num_tokens"))
        usage = check.fraction(f"{tag}kv_usage", _one(check, f"{tag}kv_usage", mine, "sglang:token_usage"))
        kinds = {}
        for kind, name in (("full", "sglang:full_token_usage"), ("swa", "sglang:swa_token_usage"),
                           ("mamba", "sglang:mamba_usage")):
            v = check.fraction(f"{tag}{kind}_usage", _one(check, f"{tag}{kind}_usage", mine, name))
            if v is not None and (kind == "full" or v > 0):
                kinds[kind] = v
        if set(kinds) == {"full"}:
            kinds = {}
        rank_page = check.count("block_size", _one(check, "block_size", mine, "sglang:page_size"), low=1)
        page = page or rank_page
        per_rank.append(RankReading(
            rank=rank or "0", total_tokens=total, kv_usage=usage,
            used_tokens=check.count(f"{tag}used_tokens", _one(check, f"{tag}used_tokens", mine,
                                                              "sglang:num_used_tokens")),
            running=check.count(f"{tag}running", _one(check, f"{tag}running", mine, "sglang:num_running_reqs")),
            waiting=check.count(f"{tag}waiting", _one(check, f"{tag}waiting", mine, "sglang:num_queue_reqs")),
            evictable_tokens=check.count(f"{tag}evictable_tokens", _one(check, f"{tag}evictable_tokens", mine,
                                                                        "sglang:kv_evictable_tokens")),
            usage_by_kind=kinds,
            num_gpu_blocks=total // rank_page if total is not None and rank_page else None,
        ))
    retracted: list[int | None] = []
    hit_rates: list[float | None] = []
    host_total: list[int | None] = []
    host_used: list[int | None] = []
    for rank in ranks:
        mine = by_rank[rank]
        r = _one(check, "preemptions", mine, "sglang:num_retracted_requests_total",
                 "sglang:num_retracted_reqs")  # older SGLang: only the gauge
        retracted.append(check.count("preemptions", r))
        hit_rates.append(check.fraction("prefix_hit_rate", _one(check, "prefix_hit_rate", mine,
                                                                "sglang:cache_hit_rate")))
        host_total.append(check.count("hicache host", _one(check, "hicache host", mine,
                                                           "sglang:hicache_host_total_tokens")))
        host_used.append(check.count("hicache host", _one(check, "hicache host", mine,
                                                          "sglang:hicache_host_used_tokens")))
    offload: dict[str, Any] = {}
    if any(v is not None for v in host_total):
        offload = {"tier": "SGLang HiCache (host)", "host_total_tokens": _sum_of(host_total),
                   "host_used_tokens": _sum_of(host_used)}
        offload.update(_sglang_hicache(check, cache, by_rank))
    tight = tightest(per_rank)
    known_hits = [h for h in hit_rates if h is not None]
    # the prefix-cache counters behind the windowed hit rate: prompt tokens (all four modes) and those whose
    # KV was found (device, host or storage hits), as SGLang's own help text defines the windowed rate
    modes = _prefill_modes(by_rank)
    queries = check.count("prefix_queries", sum(modes.values())) if modes else None
    hits = check.count("prefix_hits", sum(v for k, v in modes.items() if k.endswith("_hit"))) if modes else None
    return EngineReading(
        url=url, kind="sglang", prefix_queries=queries, prefix_hits=hits,
        kv_usage=_worst([r.kv_usage for r in per_rank]),
        running=_sum_of([r.running for r in per_rank]), waiting=_sum_of([r.waiting for r in per_rank]),
        preemptions=_sum_of(retracted) if any(v is not None for v in retracted) else None,
        prefix_hit_rate=min(known_hits) if known_hits else None,
        total_tokens=tight.total_tokens if tight else None, used_tokens=tight.used_tokens if tight else None,
        num_gpu_blocks=tight.num_gpu_blocks if tight else None,
        block_size=page or 1, served_model=_served_model(samples)[:200],
        ranks=tuple(per_rank), invalid=check.invalid,
        evictable_tokens=_sum_of([r.evictable_tokens for r in per_rank]), offload=offload,
    )

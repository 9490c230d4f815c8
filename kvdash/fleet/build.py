"""A fleet from Prometheus series: hosts, their GPUs, their engines, down targets and totals.

Pure functions of the query results (``{query name: [Series]}``) and the configuration; the
analytical pool of each engine comes from :func:`kvdash.live.analysis.analyze` on its host's GPUs
and :func:`~kvdash.live.analysis.compare_engine` (the same formulas as ``kvdash live`` on one host).

Matching rules, stated once:

- A host is named by the ``Hostname`` label (DCGM exporter) or ``hostname`` (kvdash exporter),
  else by the host part of ``instance``.  The host part of a GPU series' ``instance`` is an alias
  of that host, so an engine scraped at ``10.0.0.5:8000`` joins the host whose DCGM exporter is
  ``10.0.0.5:9400``.
- A host with DCGM series takes its GPUs from DCGM; kvdash exporter series are used for hosts
  without DCGM.
- An engine is one ``(instance, engine label)`` pair of vLLM series, or one ``instance`` of SGLang
  series; its host is the alias of its ``instance``'s host part (or its own ``hostname`` label).
  ``kvdash exporter``'s ``kvdash_engine_*`` series (one engine per ``engine`` label) stand in for a
  host's engines only when Prometheus scrapes none of that host's engines itself.
- The analytical pool of an engine uses the first ``--tp`` GPUs of its host (``kvdash live``'s
  rule for the ranks).  A target whose ``up`` is 0 is listed under its host as down.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from kvdash.core import formulas as f
from kvdash.errors import InputError
from kvdash.fleet.client import Series
from kvdash.live.analysis import LiveConfig, analyze, compare_engine, for_model, same_model
from kvdash.sources.base import GPUReading, Snapshot
from kvdash.sources.engine import EngineReading, RankReading, Sample, _Checker, reading_from_samples, tightest

MiB = 2**20
DCGM_FIELD = {"DCGM_FI_DEV_FB_USED": "used", "DCGM_FI_DEV_FB_FREE": "free", "DCGM_FI_DEV_FB_RESERVED": "reserved"}
KVDASH_FIELD = {"kvdash_gpu_memory_used_bytes": "used", "kvdash_gpu_memory_free_bytes": "free",
                "kvdash_gpu_memory_reserved_bytes": "reserved", "kvdash_gpu_memory_total_bytes": "total"}


ENGINE_STALE_S = 30.0  # an exporter's engine reading older than this is shown stale and left out of totals

ASSUMPTIONS = [
    "DCGM framebuffer figures are MiB (2^20 B); a GPU's total is used + free + reserved",
    "a host is named by its Hostname/hostname label, else by the host part of instance; an engine joins the "
    "host whose GPU series come from the same address",
    "kvdash's pool for an engine: the first --tp GPUs of its host are the ranks, each with "
    "floor(total x --gpu-util) - weights per rank - --reserve (vLLM 0.33's rule), the pool the smallest rank's",
    "free KV = each engine's pool minus its used tokens (the engine's own figures); in bytes at kvdash's bytes "
    "per token of the model on one rank x --tp",
    "requests that fit now = free // (ceil(length / B) x B) per engine, B its block size (SGLang: 1)",
    "a target whose last scrape failed (up == 0) is listed as down under its host (named as in the last hour)",
    "an engine is read as kvdash live reads it: each vLLM engine and each SGLang DP rank is one pool (never "
    "summed or averaged); an engine kvdash exporter reports down, or whose reading is older than "
    f"{ENGINE_STALE_S:g} s, is listed but left out of the totals",
    "an engine serving another model than --model is not comparable: no kvdash pool beside it, its free KV "
    "not converted to bytes",
]


def instance_host(instance: str) -> str:
    """The host part of an ``instance`` label.

    >>> instance_host("node-a:9400"), instance_host("[::1]:8000"), instance_host("gpu7")
    ('node-a', '[::1]', 'gpu7')
    """
    if instance.startswith("["):
        return instance.split("]", 1)[0] + "]"
    return instance.rsplit(":", 1)[0] if instance.count(":") == 1 else instance


MAX_GPU_BYTES = 2**53  # a figure above this is no GPU's memory (and no longer exact in a float)


def _memory(value: float, scale: int) -> tuple[int | None, str]:
    """A GPU memory figure in bytes from a sample (``scale`` bytes per unit); None and the reason when the
    sample is not a finite, non-negative, whole number of units up to 2^53 bytes."""
    if not math.isfinite(value):
        return None, f"{value} is not a finite number"
    if value < 0:
        return None, f"{value:g} is negative"
    if value * scale > MAX_GPU_BYTES:
        return None, f"{value:g} x {scale:,} B is over 2^53 bytes"
    if value != int(value):
        return None, f"{value:g} is not a whole number"
    return int(value) * scale, ""


def _gpus(series: list[Series], fields: dict[str, str], scale: int, hostname_label: str,
          aliases: dict[str, str]) -> dict[str, dict[str, dict[str, Any]]]:
    """{host: {gpu key: {index, uuid, name, used, free, reserved, total (bytes)}}}.

    The loop runs once per series (3,000 for 1,000 GPUs on every poll), so it keeps lookups few:
    a GPU is found by (instance, gpu key) in one dictionary."""
    hosts: dict[str, dict[str, dict[str, Any]]] = {}
    by_key: dict[tuple[str, str], dict[str, Any]] = {}
    uuid_label, name_label = ("UUID", "modelName") if hostname_label == "Hostname" else ("uuid", "name")
    field_of = fields.get
    for s in series:
        labels = s.labels
        field = field_of(labels.get("__name__", ""))
        if field is None:
            continue
        inst = labels.get("instance", "")
        uuid = labels.get(uuid_label, "")
        gpu = by_key.get((inst, uuid or labels.get("gpu", "")))
        if gpu is None:
            host = labels.get(hostname_label) or instance_host(inst)
            aliases.setdefault(instance_host(inst), host)
            aliases.setdefault(host, host)
            index = labels.get("gpu", "")
            gpu = {"index": int(index) if index.isascii() and index.isdigit() and len(index) <= 6 else -1,
                   "uuid": uuid, "name": labels.get(name_label, ""), "invalid": {}}
            by_key[(inst, uuid or index)] = hosts.setdefault(host, {}).setdefault(uuid or index, gpu)
        value, why = _memory(s.value, scale)
        if why:
            gpu["invalid"][f"{field}_bytes"] = why
            gpu.pop(field, None)
        elif f"{field}_bytes" not in gpu["invalid"]:
            gpu[field] = value
    return hosts


def _gpu_row(g: dict[str, Any]) -> dict[str, Any]:
    """One GPU of the fleet document, bytes exact; total = used + free + reserved where not published."""
    total = g.get("total")
    invalid = dict(g.get("invalid", {}))
    if total is None and "total_bytes" not in invalid and "used" in g and "free" in g \
            and "reserved_bytes" not in invalid:
        total = g["used"] + g["free"] + g.get("reserved", 0)
    elif total is None and ("used" in g or "free" in g):
        invalid.setdefault("total_bytes", "used + free + reserved needs all three figures valid")
    return {"gpu": g["index"], "uuid": g["uuid"], "name": g["name"], "total_bytes": total,
            "used_bytes": g.get("used"), "free_bytes": g.get("free"), "reserved_bytes": g.get("reserved"),
            "invalid": invalid}


def _gpu_reading(row: dict[str, Any]) -> GPUReading:
    return GPUReading(index=row["gpu"], name=row["name"], uuid=row["uuid"], total_bytes=row["total_bytes"],
                      used_bytes=row["used_bytes"], free_bytes=row["free_bytes"],
                      reserved_bytes=row["reserved_bytes"])


POOL_SERIES = frozenset({"kvdash_engine_kv_pool_tokens", "kvdash_engine_kv_pool_blocks", "kvdash_engine_kv_used_tokens",
                         "kvdash_engine_kv_usage_ratio", "kvdash_engine_requests_running",
                         "kvdash_engine_requests_waiting"})


def _engines(series: list[Series]) -> dict[tuple[str, str], dict[str, Any]]:
    """{(instance, exporter engine label or ""): {kind, job, model_name, hostname, samples}}: every engine
    server Prometheus scrapes (one per instance: vLLM's engines and SGLang's DP ranks are read inside
    it by :func:`kvdash.sources.engine.reading_from_samples`, the rules ``kvdash live`` applies to one
    page), and every engine ``kvdash exporter`` reports (one per ``engine`` label)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for s in series:
        name = s.labels.get("__name__", "")
        kind = "vllm" if name.startswith("vllm:") else "sglang" if name.startswith("sglang:") else \
            "exporter" if name.startswith("kvdash_engine_") else ""
        if not kind:
            continue
        key = (s.labels.get("instance", ""), s.labels.get("engine", "") if kind == "exporter" else "")
        e = out.setdefault(key, {"kind": kind, "job": s.labels.get("job", ""), "model_name": "", "hostname": "",
                                 "samples": []})
        if kind != "exporter" and e["kind"] == "exporter":
            e["kind"] = kind
        if s.labels.get("model_name"):
            e["model_name"] = s.labels["model_name"]
        if s.labels.get("hostname"):
            e["hostname"] = s.labels["hostname"]
        e["samples"].append(Sample(name, s.labels, s.value))
    return out


_EXPORTER_COUNTERS = {"kvdash_engine_prefix_cache_queries_total": "prefix_queries",
                      "kvdash_engine_prefix_cache_hits_total": "prefix_hits",
                      "kvdash_engine_preemptions_total": "preemptions"}


def _exporter_reading(url: str, e: dict[str, Any]) -> tuple[EngineReading, str]:
    """An engine as ``kvdash exporter`` published it (one series per pool, label ``rank``), and its state:
    "up", "down" (kvdash_engine_up 0) or "stale" (its last good reading older than ENGINE_STALE_S)."""
    by_rank: dict[str, dict[str, float]] = {}
    counters: dict[str, int | None] = {}
    up, age, block_size = None, None, None
    check = _Checker()  # every figure as the engine client checks a page: n/a with its reason when bad

    def _int(x: float | None, name: str = "figure") -> int | None:
        return check.count(name, x)

    for s in e["samples"]:
        if s.name == "kvdash_engine_up":
            up = s.value
        elif s.name == "kvdash_engine_reading_age_seconds":
            age = s.value
        elif s.name == "kvdash_engine_block_size_tokens":
            block_size = check.count("block_size", s.value, low=1)
        elif s.name in POOL_SERIES:
            by_rank.setdefault(s.labels.get("rank", "0"), {})[s.name] = s.value
        elif s.name in _EXPORTER_COUNTERS:
            counters[_EXPORTER_COUNTERS[s.name]] = check.count(_EXPORTER_COUNTERS[s.name], s.value)
    pools = []
    for rank in sorted(by_rank, key=lambda r: (len(r), r)):
        v = by_rank[rank]
        tag = f"rank {rank} " if len(by_rank) > 1 else ""
        total = _int(v.get("kvdash_engine_kv_pool_tokens"), f"{tag}total_tokens")
        usage = check.fraction(f"{tag}kv_usage", v.get("kvdash_engine_kv_usage_ratio"))
        blocks = _int(v.get("kvdash_engine_kv_pool_blocks"), f"{tag}num_gpu_blocks")
        if block_size is None and total is not None and blocks:
            block_size = total // blocks
        pools.append(RankReading(rank=rank, total_tokens=total, kv_usage=usage,
                                 num_gpu_blocks=blocks,
                                 used_tokens=_int(v.get("kvdash_engine_kv_used_tokens"), f"{tag}used_tokens"),
                                 running=_int(v.get("kvdash_engine_requests_running"), f"{tag}running"),
                                 waiting=_int(v.get("kvdash_engine_requests_waiting"), f"{tag}waiting")))
    state = "down" if up == 0 else "stale" if age is not None and age > ENGINE_STALE_S else "up"
    tight = tightest(pools)
    reading = EngineReading(url=url, kind="exporter", block_size=block_size,
                            served_model=e["model_name"], ranks=tuple(pools) if len(pools) > 1 else (),
                            total_tokens=tight.total_tokens if tight else None,
                            num_gpu_blocks=tight.num_gpu_blocks if tight else None,
                            used_tokens=tight.used_tokens if tight else None,
                            kv_usage=max((p.kv_usage for p in pools if p.kv_usage is not None), default=None),
                            running=pools[0].running if len(pools) == 1 else None,
                            waiting=pools[0].waiting if len(pools) == 1 else None, invalid=check.invalid,
                            prefix_queries=counters.get("prefix_queries"), prefix_hits=counters.get("prefix_hits"),
                            preemptions=counters.get("preemptions"))
    if len(pools) == 1:
        reading = replace(reading, ranks=(), kv_usage=pools[0].kv_usage)
    return reading, state if pools or up is not None else "up"


def _compare(cache: dict[Any, dict[str, Any]], reading: EngineReading, kv: dict[str, Any]) -> dict[str, Any]:
    """compare_engine() on the figures it explains (pool size and block size), once per distinct engine pool."""
    key = (id(kv), reading.kind, reading.total_tokens, reading.block_size, reading.num_gpu_blocks)
    if key not in cache:
        cache[key] = compare_engine(EngineReading(url="", kind=reading.kind, total_tokens=reading.total_tokens,
                                                  block_size=reading.block_size,
                                                  num_gpu_blocks=reading.num_gpu_blocks), kv)
    return cache[key]


class _Analyses:
    """analyze() per distinct set of rank GPU totals (a fleet of identical hosts analyses once)."""

    def __init__(self, cfg: LiveConfig) -> None:
        self.cfg = cfg
        self.cache: dict[Any, dict[str, Any]] = {}

    def get(self, gpus: list[dict[str, Any]], engine: EngineReading | None, lengths: tuple[int, ...]) \
            -> dict[str, Any]:
        """``gpus``: the host's GPU rows (fleet document); GPU readings are made only on a cache miss."""
        ranks = tuple(g["total_bytes"] for g in gpus if g["total_bytes"])[: self.cfg.tp]
        by_engine = self.cfg.budget_mode == "engine"
        key = (ranks, lengths, (engine.total_tokens if engine else None) if by_engine else None)
        if key not in self.cache:
            cfg = replace(self.cfg, lengths=lengths)
            snap = Snapshot(time=0.0, source="prometheus", gpus=tuple(_gpu_reading(g) for g in gpus))
            try:
                kv = analyze(snap, cfg, engine if by_engine else None)
            except InputError as exc:
                kv = {"ok": False, "notes": [str(exc)]}
            kv.pop("engine", None)
            self.cache[key] = kv
        return self.cache[key]


class _OwnModels:
    """An engine of another model than ``--model``, set beside kvdash's pool for the model it serves: the
    preset named like its ``model_name`` (organisation, case, punctuation and a chat/instruct suffix ignored,
    as ``kvdash calibrate`` picks it; exactly one preset must match), on the same host's GPUs with the
    fleet's other settings (``--tp``, KV dtype, block size, budget)."""

    def __init__(self, cfg: LiveConfig) -> None:
        self.cfg = cfg
        self.presets: dict[str, str | None] = {}
        self.analyses: dict[str, _Analyses] = {}

    def preset(self, served: str) -> str | None:
        if served not in self.presets:
            from kvdash.core.model import preset_names

            found = [name for name in preset_names() if same_model(served, name)]
            self.presets[served] = found[0] if len(found) == 1 else None
        return self.presets[served]

    def compare(self, served: str, gpus: list[dict[str, Any]], one: EngineReading, lengths: tuple[int, ...],
                compared: dict[Any, dict[str, Any]]) -> dict[str, Any]:
        name = self.preset(served)
        if name is None:
            return {"own_model_note": f"no kvdash preset is named like {served}: give --model or --config"}
        try:
            if name not in self.analyses:
                self.analyses[name] = _Analyses(for_model(self.cfg, name))
            kv = self.analyses[name].get(gpus, one, lengths)
        except InputError as exc:
            kv = {"ok": False, "notes": [str(exc)]}
        if not kv.get("ok") or "token_slots" not in kv:
            return {"own_model": name, "own_model_note": "; ".join(kv.get("notes", [])) or "no pool"}
        cmp = _compare(compared, one, kv)
        return {"own_model": name, "own_kvdash_tokens": kv["token_slots"],
                "own_difference_tokens": cmp.get("difference_tokens"), "own_explain": cmp.get("explain", "")}


def build_fleet(results: dict[str, list[Series]], cfg: LiveConfig) -> dict[str, Any]:
    """The fleet document ``kvdash live --prometheus --once --json`` prints (see the README)."""
    aliases: dict[str, str] = {}
    dcgm = _gpus(results.get("dcgm_memory", []), DCGM_FIELD, MiB, "Hostname", aliases)
    own = _gpus(results.get("kvdash_memory", []), KVDASH_FIELD, 1, "hostname", aliases)
    gpu_hosts = {**{h: ("kvdash", g) for h, g in own.items()}, **{h: ("dcgm", g) for h, g in dcgm.items()}}
    hosts: dict[str, dict[str, Any]] = {}

    def host(name: str) -> dict[str, Any]:
        return hosts.setdefault(name, {"host": name, "source": "", "gpus": [], "engines": [], "targets_up": 0,
                                       "down_targets": []})

    for name, (kind, per_gpu) in gpu_hosts.items():
        h = host(name)
        h["source"] = kind
        h["gpus"] = sorted((_gpu_row(g) for g in per_gpu.values()), key=lambda r: (r["gpu"], r["uuid"]))
    for s in results.get("host_names", []):  # names seen in the last hour: a stopped exporter's host keeps its own
        named = s.labels.get("hostname") or s.labels.get("Hostname")
        if named:
            aliases.setdefault(instance_host(s.labels.get("instance", "")), named)
    for s in results.get("targets", []):
        inst = s.labels.get("instance", "")
        h = host(aliases.get(instance_host(inst), instance_host(inst)))
        if s.value != 1:  # up is 1 or 0; anything else (NaN, -1) is no sign of a working scrape
            h["down_targets"].append({"job": s.labels.get("job", ""), "instance": inst})
        else:
            h["targets_up"] += 1
    analyses = _Analyses(cfg)
    own_models = _OwnModels(cfg)
    lengths = cfg.lengths
    engines_out = []
    model_name = cfg.architecture().name
    compared: dict[Any, dict[str, Any]] = {}
    found = _engines(results.get("engines", []))
    scraped = {e["hostname"] or aliases.get(instance_host(inst), instance_host(inst))
               for (inst, _), e in found.items() if e["kind"] != "exporter"}
    for (inst, label), e in sorted(found.items(), key=lambda item: (item[1]["kind"] == "exporter", item[0])):
        name = e["hostname"] or aliases.get(instance_host(inst), instance_host(inst))
        if e["kind"] == "exporter" and name in scraped:
            continue  # Prometheus scrapes this host's engines itself: count each engine once
        h = host(name)
        if e["kind"] == "exporter":
            reading, state = _exporter_reading(inst, e)
            age = next((x.value for x in e["samples"] if x.name == "kvdash_engine_reading_age_seconds"), None)
        else:
            reading, state, age = reading_from_samples(inst, e["samples"]), "up", None
        served = e["model_name"] or reading.served_model
        comparable = not served or same_model(served, model_name, cfg.model)
        pools = reading.pools()
        for pool in pools:
            one = replace(reading, ranks=(), total_tokens=pool.total_tokens, used_tokens=pool.used_tokens,
                          kv_usage=pool.kv_usage, num_gpu_blocks=pool.num_gpu_blocks)
            kv = analyses.get(h["gpus"], one, lengths)
            used = pool.used_tokens
            invalid = dict(reading.invalid)
            if used is not None and pool.total_tokens is not None and used > pool.total_tokens:
                invalid["used_tokens"] = f"{used:,} is more than the pool's {pool.total_tokens:,} tokens"
                used = None  # never a negative free count
            elif used is None and pool.kv_usage is not None and pool.total_tokens is not None:
                used = int(round(pool.kv_usage * pool.total_tokens))
            row: dict[str, Any] = {
                "host": name, "instance": inst, "engine": label or (pool.rank if len(pools) > 1 or e["kind"] == "vllm"
                                                                     else ""),
                "rank": pool.rank, "job": e["job"], "kind": e["kind"], "model_name": served, "state": state,
                "reading_age_s": age,
                "comparable": comparable,
                "num_gpu_blocks": pool.num_gpu_blocks, "block_size": reading.block_size,
                "pool_tokens": pool.total_tokens, "usage": pool.kv_usage, "used_tokens": used,
                "free_tokens": None if pool.total_tokens is None or used is None else pool.total_tokens - used,
                "running": pool.running, "waiting": pool.waiting,
                "cache_dtype": reading.cache_dtype, "gpu_memory_utilization": reading.gpu_memory_utilization,
                "kvdash_ok": bool(kv.get("ok")) and comparable,
                "kvdash_pool": bool(kv.get("ok")),  # a pool of kvdash's model, compared or not (another model served)
                "kvdash_notes": list(kv.get("notes", [])) + ([] if comparable else [
                    f"not comparable: the engine serves {served}, kvdash's pool is for {model_name} (choose the "
                    "served model with m or --model)"]),
                "invalid": invalid,
                # the server's counters (summed over its pools), for the fleet view's windowed rates
                "prefix_queries": reading.prefix_queries, "prefix_hits": reading.prefix_hits,
                "preemptions": reading.preemptions,
            }
            if label and len(pools) > 1:
                row["engine"] = f"{label} rank {pool.rank}"
            if not comparable and served:
                row.update(own_models.compare(served, h["gpus"], one, lengths, compared))
            if kv.get("ok") and comparable:
                cmp = _compare(compared, one, kv)
                row.update({"kvdash_tokens": kv["token_slots"], "kvdash_pool_blocks": kv["pool_blocks"],
                            "kvdash_budget_bytes": kv["budget_bytes"], "kvdash_paged_requests": kv["paged_requests"],
                            "kvdash_contiguous_requests": kv["contiguous_requests"],
                            "difference_tokens": cmp.get("difference_tokens"), "explain": cmp.get("explain", "")})
            h["engines"].append(row)
            engines_out.append(row)
    engines_out.sort(key=lambda e: (e["host"], e["instance"], e["engine"]))
    out_hosts = []
    for name in sorted(hosts):
        h = hosts[name]
        h["engines"].sort(key=lambda e: (e["instance"], e["engine"]))
        h["down_targets"].sort(key=lambda t: (t["job"], t["instance"]))
        dead = any(e.get("state", "up") != "up" for e in h["engines"])
        h["status"] = "down" if h["down_targets"] and not h["targets_up"] and not h["gpus"] and not \
            any(e.get("state", "up") == "up" for e in h["engines"]) else \
            "degraded" if h["down_targets"] or dead else "up"
        gs = h["gpus"]
        h["total_bytes"] = all_known_sum(g["total_bytes"] for g in gs)
        h["used_bytes"] = all_known_sum(g["used_bytes"] for g in gs)
        out_hosts.append(h)
    return {
        "assumptions": ASSUMPTIONS,
        "config": {"model": cfg.architecture().name, "kv_dtype": cfg.kv_dtype, "block_size": cfg.block_size,
                   "tp": cfg.tp, "lengths": list(lengths), "max_reserved": cfg.max_reserved,
                   "budget_mode": cfg.budget_mode, "gpu_util": cfg.gpu_util},
        "hosts": out_hosts,
        "engines": engines_out,
        "totals": totals(out_hosts, engines_out, cfg, _bytes_per_token(cfg)),
    }


def _bytes_per_token(cfg: LiveConfig) -> int:
    from kvdash.engines.vllm import rank_shapes

    return int(rank_shapes(cfg.architecture(), cfg.kv_dtype, "tensor", cfg.tp, 1, cfg.block_size)[0].bytes_per_token)


def known_sum(values: Iterable[int | None]) -> int | None:
    """The sum of the figures that are known; None (shown as n/a) when none is: a GPU whose figure is n/a
    never counts as 0 bytes.

    >>> known_sum([3, None, 4]), known_sum([None, None]), known_sum([])
    (7, None, None)
    """
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def all_known_sum(values: Iterable[int | None]) -> int | None:
    """The sum when every figure is known, else None: a host's memory is n/a as soon as one of its GPUs'
    is (its GPU lines show the figures that are known).

    >>> all_known_sum([3, 4]), all_known_sum([3, None]), all_known_sum([])
    (7, None, None)
    """
    vals = list(values)
    return None if not vals or any(v is None for v in vals) else sum(v for v in vals if v is not None)


def request_slots(length: int, block_size: int) -> int:
    """Token slots one request of ``length`` tokens holds in a paged pool: ``ceil(n / B) x B``.

    >>> request_slots(2048, 16), request_slots(2049, 16), request_slots(825, 1)
    (2048, 2064, 825)
    """
    return int(f.cdiv(length, block_size)) * block_size


def totals(hosts: list[dict[str, Any]], engines: list[dict[str, Any]], cfg: LiveConfig,
           bytes_per_token_rank: int) -> dict[str, Any]:
    """Fleet totals.  Free KV: each engine's pool minus its used tokens (the engine's own figures);
    in bytes at kvdash's bytes per token of the model, per rank x ``--tp`` ranks.  Requests that fit,
    per length: ``free // request_slots(length, engine block size)`` summed over engines (now), the
    same over the whole engine pools, and kvdash's analytical paged count summed over engines.  Only
    engines whose reading is live count (an exporter's engine that is down or stale is left out); free KV
    in bytes only over engines of the model kvdash analyses (others are not comparable)."""
    gpus = [g for h in hosts for g in h["gpus"]]
    reporting = [g for g in gpus if g["used_bytes"] is not None and g["total_bytes"] is not None]
    listed = engines
    engines = [e for e in engines if e.get("state", "up") == "up"]
    free_tokens = sum(e["free_tokens"] for e in engines if e["free_tokens"] is not None)
    free_same = sum(e["free_tokens"] for e in engines if e["free_tokens"] is not None and e.get("comparable", True))
    fit = []
    for n in cfg.lengths:
        now = pools = 0
        for e in engines:
            bs = e["block_size"] or cfg.block_size
            if e["free_tokens"] is not None:
                now += e["free_tokens"] // request_slots(n, bs)
            if e["pool_tokens"] is not None:
                pools += e["pool_tokens"] // request_slots(n, bs)
        fit.append({"length": n, "free_now": now, "engine_pools": pools})
    return {
        "hosts": len(hosts),
        "hosts_down": sum(h["status"] == "down" for h in hosts),
        "targets_down": sum(len(h["down_targets"]) for h in hosts),
        "gpus": len(gpus),
        # used / total over the GPUs that report both, so that the two figures cover the same GPUs
        "gpu_total_bytes": known_sum(g["total_bytes"] for g in reporting),
        "gpu_used_bytes": known_sum(g["used_bytes"] for g in reporting),
        "gpu_free_bytes": known_sum(g["free_bytes"] for g in gpus),
        "gpus_reporting_memory": len(reporting),
        "engines": len(engines),
        "engines_down": sum(e.get("state", "up") != "up" for e in listed),
        "engines_not_comparable": sum(not e.get("comparable", True) for e in engines),
        "running": sum(e["running"] or 0 for e in engines),
        "waiting": sum(e["waiting"] or 0 for e in engines),
        "engine_pool_tokens": sum(e["pool_tokens"] or 0 for e in engines),
        "kvdash_pool_tokens": sum(e.get("kvdash_tokens") or 0 for e in engines),
        "free_kv_tokens": free_tokens,
        "kv_bytes_per_token": bytes_per_token_rank * cfg.tp,
        "free_kv_bytes": free_same * bytes_per_token_rank * cfg.tp,
        "requests_fit": fit,
        "kvdash_paged_requests": sum(e.get("kvdash_paged_requests") or 0 for e in engines),
    }

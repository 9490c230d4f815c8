"""Engine pages written by the engines' own metrics code (tests/data/engine_pages, made by
conformance/metrics/run.sh: vLLM 0.33.0's PrometheusStatLogger, SGLang 0.5.23's
SchedulerMetricsCollector with one process per rank), read by live, the exporter and the fleet, and
compared with the figures that built each page (the JSON beside it).

The rules guarded (kvdash/sources/engine.py):
- vLLM: one pool per ``engine`` label; its pool is ``cache_config_info``'s ``kv_cache_size_tokens``,
  never ``num_gpu_blocks`` (the front end's SUM over its DP engines: on the DP 2 page 354,652 =
  2 x 177,326 blocks, while each engine holds 177,326 x 16 = 2,837,216 tokens);
- SGLang: one pool per ``dp_rank``; each figure from one scheduler (TP 8 writes the pool eight times:
  1,200,000 each, not 9,600,000; PP 2 writes the stats twice: 21 running, not 42); queues from the
  ``priority=""`` total only (21/4, not 42/8); the page size from ``sglang:page_size`` (64);
- usage per pool, the server's the worst pool's (DP 2: 0.9, never the mean 0.5); running and waiting
  summed over pools.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from kvdash.exporter.collector import ExporterState, KvdashCollector
from kvdash.fleet.build import build_fleet
from kvdash.fleet.client import Series
from kvdash.fleet.queries import KVDASH_ENGINE_SERIES, SGLANG_SERIES, VLLM_SERIES
from kvdash.live.analysis import LiveConfig
from kvdash.sources.demo import DemoSource
from kvdash.sources.engine import EngineReading, parse_prometheus, reading_from_samples

PAGES = Path(__file__).parent / "data" / "engine_pages"
ALL = sorted(p for p in PAGES.glob("*.prom") if not p.name.startswith("lmcache-"))  # engines with a KV pool
LMCACHE = sorted(PAGES.glob("lmcache-*.prom"))  # LMCache's own families (its tier, no pool)
ENGINE_FAMILIES = set(VLLM_SERIES + SGLANG_SERIES)


def figures(page: Path) -> dict:
    return json.loads(page.with_suffix(".json").read_text())


def expected_pools(fig: dict) -> list[dict]:
    """Each pool as the harness wrote it: rank, tokens, usage, running, waiting."""
    if fig["kind"] == "vllm":
        return [{"rank": e["engine"], "tokens": e["pool_tokens"], "usage": e["usage"], "running": e["running"],
                 "waiting": e["waiting"]} for e in fig["engines"]]
    return [{"rank": r["dp_rank"] or "0", "tokens": r["pool_tokens"], "usage": r["token_usage"],
             "running": r["running"], "waiting": r["waiting"]} for r in fig["ranks"]]


def pools_of(reading: EngineReading) -> list[dict]:
    return [{"rank": p.rank, "tokens": p.total_tokens, "usage": p.kv_usage, "running": p.running,
             "waiting": p.waiting} for p in reading.pools()]


def read(page: Path) -> EngineReading:
    return reading_from_samples("http://node-a:8000/metrics", parse_prometheus(page.read_text()))


def test_every_layout_has_a_page_and_its_figures():
    names = {p.name.split("-", 2)[2].removesuffix(".prom") for p in ALL}
    assert {"tp1", "tp8", "pp2", "dp2", "dp4", "dp4_local2", "offload"} <= {
        p.name.split("-", 2)[2].removesuffix(".prom") for p in ALL if p.name.startswith("vllm-0.33.0-")}
    assert {"tp1", "tp8", "pp2", "dp2", "dp2_attn_tp2", "priority", "page64", "hicache"} <= {
        p.name.split("-", 2)[2].removesuffix(".prom") for p in ALL if p.name.startswith("sglang-0.5.23-")}
    assert {p.stem for p in LMCACHE} == {"lmcache-0.5.6-tp1", "lmcache-0.5.6-tp2"}
    assert names and all(p.with_suffix(".json").exists() for p in ALL + LMCACHE)


@pytest.mark.parametrize("page", ALL, ids=lambda p: p.stem)
def test_live_reads_each_pool_as_the_engine_wrote_it(page):
    fig = figures(page)
    r = read(page)
    assert not r.error and not r.invalid, (r.error, r.invalid)
    want = expected_pools(fig)
    assert pools_of(r) == want
    assert r.kv_usage == max(p["usage"] for p in want)  # the worst pool, never a mean
    assert r.running == sum(p["running"] for p in want) and r.waiting == sum(p["waiting"] for p in want)
    assert r.total_tokens == min(p["tokens"] for p in want)  # the tightest pool
    assert r.served_model == fig["served_model"]
    if fig["kind"] == "vllm":
        assert r.block_size == 16
        assert r.preemptions == sum(e["preemptions"] for e in fig["engines"])
        assert r.prefix_queries == sum(e["prefix_queries"] for e in fig["engines"])
        assert r.prefix_hits == sum(e["prefix_hits"] for e in fig["engines"])
        assert r.waiting_by_reason == {"capacity": sum(e["waiting_capacity"] for e in fig["engines"]),
                                       "deferred": sum(e["waiting_deferred"] for e in fig["engines"])}
        ext = [e["external_hits"] for e in fig["engines"] if e["external_hits"] is not None]
        assert r.external_hits == sum(ext)  # vLLM writes the counter at 0 without a connector
        if fig["engines"][0].get("offload_gib"):
            assert r.offload["size_gib"] == str(fig["engines"][0]["offload_gib"])
        else:
            assert r.offload == {}
        assert [p.sleep for p in r.pools()] == [e.get("sleep", "awake") for e in fig["engines"]]
    else:
        assert r.block_size == fig["page_size"]
        assert r.preemptions == sum(x["retractions"] for x in fig["ranks"])
        assert [p.evictable_tokens for p in r.pools()] == [x["evictable_tokens"] for x in fig["ranks"]]
        assert [p.used_tokens for p in r.pools()] == [x["used_tokens"] for x in fig["ranks"]]
        for p, x in zip(r.pools(), fig["ranks"], strict=True):
            kinds = {k: x[f"{k}_usage"] for k in ("swa", "mamba") if x.get(f"{k}_usage")}
            assert {k: v for k, v in p.usage_by_kind.items() if k != "full"} == kinds
        if fig["ranks"][0].get("host_total_tokens"):
            assert r.offload["host_total_tokens"] == sum(x["host_total_tokens"] for x in fig["ranks"])
            assert r.offload["host_used_tokens"] == sum(x["host_used_tokens"] for x in fig["ranks"])


def test_vllm_dp_front_end_sums_num_gpu_blocks_and_kvdash_does_not():
    """DP 2 of 177,326-block engines: cache_config_info says num_gpu_blocks 354,652 (the sum), and
    kv_cache_size_tokens 2,837,216 = 177,326 x 16 per engine; kvdash's pool is 2,837,216, 177,326 blocks."""
    page = PAGES / "vllm-0.33.0-dp2.prom"
    assert 'num_gpu_blocks="354652"' in page.read_text() and figures(page)["front_end_num_gpu_blocks"] == 354_652
    r = read(page)
    assert (r.total_tokens, r.num_gpu_blocks) == (2_837_216, 177_326)
    assert [p.kv_usage for p in r.ranks] == [0.1, 0.9] and r.kv_usage == 0.9
    assert any("front end's sum" in n for n in r.notes)
    # of equal pools the fullest describes the server: 0.9 x 2,837,216 = 2,553,494.4 -> 2,553,494 used tokens
    assert r.used_tokens == 2_553_494


def test_sglang_tp8_writes_its_pool_eight_times_and_kvdash_counts_it_once():
    page = PAGES / "sglang-0.5.23-tp8.prom"
    assert page.read_text().count("sglang:max_total_num_tokens{") == 8 and figures(page)["processes"] == 8
    assert read(page).total_tokens == 1_200_000


def as_series(page: Path, instance: str, families: set[str]) -> list[Series]:
    """What Prometheus answers for the fleet's engines query: the page's series with instance and job."""
    return [Series({"__name__": s.name, **s.labels, "instance": instance, "job": "engine"}, s.value)
            for s in parse_prometheus(page.read_text()) if s.name in families]


def fleet_pools(fleet: dict) -> list[dict]:
    return [{"rank": e["rank"], "tokens": e["pool_tokens"], "usage": e["usage"], "running": e["running"],
             "waiting": e["waiting"]} for e in fleet["engines"]]


@pytest.mark.parametrize("page", ALL, ids=lambda p: p.stem)
def test_fleet_reads_each_pool_as_the_engine_wrote_it(page):
    fig = figures(page)
    fleet = build_fleet({"engines": as_series(page, "node-a:8000", ENGINE_FAMILIES)}, LiveConfig())
    want = expected_pools(fig)
    assert fleet_pools(fleet) == want
    t = fleet["totals"]
    assert t["engines"] == len(want) and t["engine_pool_tokens"] == sum(p["tokens"] for p in want)
    assert (t["running"], t["waiting"]) == (sum(p["running"] for p in want), sum(p["waiting"] for p in want))


def exporter_series(page: Path, url: str = "localhost:8000", up: bool = True,
                    families: frozenset[str] | None = frozenset(KVDASH_ENGINE_SERIES)) -> list[Series]:
    """kvdash exporter reading the page (its own engine thread's reading), scraped by Prometheus."""
    reading = read(page)
    state = ExporterState(DemoSource(seed=1), LiveConfig(), [url], fetch_engine=lambda u, t: reading,
                          hostname="node-b")
    state.refresh_gpus()
    state.refresh_engine(state.engines[0])
    if not up:
        state.engines[0].reading = replace(reading, error="unreachable")
    out = []
    for fam in KvdashCollector(state).collect():
        for s in fam.samples:
            if families is None or s.name in families:
                out.append(Series({"__name__": s.name, **s.labels, "instance": "node-b:9847", "job": "kvdash"},
                                  s.value))
    return out


@pytest.mark.parametrize("page", ALL, ids=lambda p: p.stem)
def test_exporter_publishes_each_pool_and_the_fleet_reads_it_back(page):
    fleet = build_fleet({"engines": exporter_series(page)}, LiveConfig())
    assert fleet_pools(fleet) == expected_pools(figures(page))
    assert all(e["host"] == "node-b" and e["state"] == "up" for e in fleet["engines"])


def test_an_engine_the_exporter_says_is_down_is_listed_and_left_out_of_totals():
    page = PAGES / "vllm-0.33.0-tp1.prom"
    fleet = build_fleet({"engines": exporter_series(page, up=False)}, LiveConfig())
    (e,) = fleet["engines"]
    assert e["state"] == "down"
    t = fleet["totals"]
    assert (t["engines"], t["engines_down"], t["running"], t["engine_pool_tokens"], t["free_kv_tokens"]) == (
        0, 1, 0, 0, 0)
    assert fleet["hosts"][0]["status"] == "degraded"  # its exporter answers, its engine does not


def test_a_stale_exporter_reading_is_left_out_of_totals():
    """kvdash_engine_reading_age_seconds 409 > ENGINE_STALE_S (30 s): stale, out of the totals."""
    series = [s if s.labels["__name__"] != "kvdash_engine_reading_age_seconds" else Series(s.labels, 409.0)
              for s in exporter_series(PAGES / "vllm-0.33.0-tp1.prom")]
    fleet = build_fleet({"engines": series}, LiveConfig())
    assert fleet["engines"][0]["state"] == "stale" and fleet["engines"][0]["reading_age_s"] == 409.0
    assert fleet["totals"]["engines"] == 0 and fleet["totals"]["running"] == 0
    # as the text says it (a helper's audit: the --once row and the host's line read as live, the host counting the
    # stale engine's usage and running requests)
    from kvdash.render.fleet_view import host_line, host_usage, once_tables

    (h,) = fleet["hosts"]
    assert host_usage(h) is None and host_line(h).plain.endswith("no GPU series            1 eng down/stale")
    from io import StringIO

    from rich.console import Console

    buf = StringIO()
    for table in once_tables(fleet)[0]:
        Console(file=buf, width=200).print(table)
    assert "STALE 409 s old" in buf.getvalue() and "0 (+1 down/stale)" in buf.getvalue()
    # the fleet tree's line ends at the engine's pool: kvdash's beside it (in `v`) ran it past 80 columns (86
    # characters, the tree's guide and scroll bar taking 4 more), and it is out of every total
    from kvdash.render.fleet_view import engine_line

    line = engine_line(fleet["engines"][0]).plain
    assert "kvdash" not in line and len(line) <= 76, line
    assert line == "exporter :8000 #0 STALE 409 s old  42.0% r12 w4 pool 2,837,216", line  # the engine's port
    from tests.promfixture import fleet_results

    results = fleet_results(1, 8)  # a host of 8 H200s (DCGM) whose engine Prometheus reads through its exporter
    results["engines"] = [Series({**s.labels, "hostname": "gpu-node-001"}, s.value)
                          for s in exporter_series(PAGES / "vllm-0.33.0-tp1.prom")]
    (live,) = build_fleet(results, LiveConfig(model="llama-3.1-8b", tp=1))["engines"]
    line = engine_line(live).plain  # up, compared with kvdash's pool on the host's GPU: within 76 columns
    assert line == f"exporter :8000 #0  42.0% r12 w4 pool 2,837,216 kvdash {live['kvdash_tokens']:,} " \
                   f"({live['difference_tokens']:+,})" and len(line) <= 76, line
    # --once names it alike (it said "exporter :9847 #localhost:8000": the exporter's port, then the engine's URL)
    buf = StringIO()
    Console(file=buf, width=200).print(once_tables({**fleet, "engines": [live]})[0][1])
    assert "exporter :8000 #0" in buf.getvalue() and "9847" not in buf.getvalue()


def test_an_engine_of_another_model_is_not_comparable():
    """An SGLang page serving org/llama-3.1-8b beside kvdash's Llama-3.1-70B: no kvdash pool, no
    difference, its free KV not converted at 70B's bytes per token."""
    fleet = build_fleet({"engines": as_series(PAGES / "sglang-0.5.23-tp1.prom", "n:30000", ENGINE_FAMILIES)},
                        LiveConfig())
    (e,) = fleet["engines"]
    assert not e["comparable"] and "kvdash_tokens" not in e and "not comparable" in " ".join(e["kvdash_notes"])
    assert fleet["totals"]["free_kv_tokens"] == 480_000 and fleet["totals"]["free_kv_bytes"] == 0
    same = build_fleet({"engines": as_series(PAGES / "sglang-0.5.23-tp1.prom", "n:30000", ENGINE_FAMILIES)},
                       LiveConfig(model="llama-3.1-8b", tp=1))
    assert same["engines"][0]["comparable"]


def test_a_stopped_exporters_host_keeps_its_name():
    """Only `up 0` is left of the exporter at 10.0.0.7:9847; its kvdash_info of the last hour named the host."""
    fleet = build_fleet({"targets": [Series({"__name__": "up", "instance": "10.0.0.7:9847", "job": "kvdash"}, 0)],
                         "host_names": [Series({"instance": "10.0.0.7:9847", "hostname": "gpu-7"}, 1)]}, LiveConfig())
    (h,) = fleet["hosts"]
    assert (h["host"], h["status"]) == ("gpu-7", "down")


def test_exporter_publishes_the_offload_tier():
    """SGLang HiCache (host pool 2,400,000 tokens, 900,000 used) and vLLM's --kv-offloading-size 64 (GiB):
    the series the Grafana dashboard's offload panel plots."""
    got = {(s.labels["__name__"], s.labels.get("what")): s.value
           for s in exporter_series(PAGES / "sglang-0.5.23-hicache.prom", families=None)}
    assert got[("kvdash_engine_offload_tokens", "host_total")] == 2_400_000
    assert got[("kvdash_engine_offload_tokens", "host_used")] == 900_000
    got = {s.labels["__name__"]: s.value for s in exporter_series(PAGES / "vllm-0.33.0-offload.prom", families=None)}
    assert got["kvdash_engine_offload_size_bytes"] == 64 * 2**30


# --- offload tiers (issue 24 item 4, issue 29 item 5) ------------------------------------------------------

def test_vllm_offload_tier_reads_as_its_connector_wrote_it():
    """vLLM 0.33.0, --kv-offloading-size 64 on Llama-3.1-8B TP 1 (the page: CPUOffloadingSpec, its manager and the
    connector scheduler's get_stats, through PrometheusStatLogger).  The tier: 64 GiB // (32 layers x 2 x 8 x 128
    x 2 B x 16 = 2,097,152 B per chunk) = 32,768 chunks = 524,288 tokens (cpu_kv_cache_size_tokens: 32,768 x
    8,192 // (8,192 / 16) = 524,288).  Loaded 4,375 chunks x 2,097,152 = 9,175,040,000 B in 9,175,040,000 / 40e9
    = 0.229376 s; stored 12,000 chunks = 25,165,824,000 B in 0.8388608 s; 300 chunks in flight of 32,768 =
    0.91552734375 % pinned; hits 70,000 of 140,000 KV-connector tokens = 50 %."""
    page = PAGES / "vllm-0.33.0-offload.prom"
    t = figures(page)["engines"][0]["offload_tier"]
    off = read(page).offload
    assert (off["chunks"], off["size_tokens"], off["size_bytes"], off["blocks_per_chunk"]) == (
        t["cpu_num_chunks"], t["cpu_kv_cache_size_tokens"], t["cpu_kv_cache_size_bytes"], t["cpu_blocks_per_chunk"]) \
        == (32_768, 524_288, 64 * 2**30, 1)
    assert (off["loaded_bytes"], off["stored_bytes"]) == (t["loaded_bytes"], t["stored_bytes"]) == (
        9_175_040_000, 25_165_824_000)
    assert off["load_seconds"] == pytest.approx(t["load_seconds"]) == pytest.approx(0.229376)
    assert off["store_seconds"] == pytest.approx(t["store_seconds"]) == pytest.approx(0.8388608)
    assert off["pinned_fraction"] == t["cpu_cache_usage"] == 300 / 32_768
    assert (off["hit_tokens"], off["query_tokens"], off["hit_rate"]) == (70_000, 140_000, 0.5)


def test_vllm_deprecated_transfer_names_are_read_when_the_new_ones_are_absent():
    """vLLM 0.33 writes vllm:kv_offload_total_bytes{transfer_type=CPU_to_GPU|GPU_to_CPU} beside the new names
    (offloading/metrics.py keeps them during its migration): a page without the new names reads the old ones."""
    samples = [s for s in parse_prometheus((PAGES / "vllm-0.33.0-offload.prom").read_text())
               if not s.name.startswith(("vllm:kv_offload_load_", "vllm:kv_offload_store_"))]
    off = reading_from_samples("u", samples).offload
    assert (off["loaded_bytes"], off["stored_bytes"]) == (9_175_040_000, 25_165_824_000)


def test_sglang_hicache_transfers_and_host_hits():
    """SGLang 0.5.23 HiCache, TP 2 (the page: each rank's RadixCacheMetricsCollector and the scheduler's
    increment_effective_prefill_tokens).  Bytes per rank's shard, summed: 400 backups of 2,500 tokens x
    131,072 B / 2 = 163,840,000 B per rank each -> 131,072,000,000 B; tokens one rank's: 1,000,000 stored,
    120 x 2,083 = 249,960 loaded; seconds the busiest rank's (65,536,000,000 B / 30e9 = 2.18453 s); the host
    hit rate 250,000 / (1,200,000 + 500,000 + 250,000 + 0) = 12.82 %.  The radix cache's series say
    dp_rank="0" without DP: still one pool."""
    page = PAGES / "sglang-0.5.23-hicache.prom"
    assert 'cache_type="HiRadixCache",dp_rank="0"' in page.read_text()
    want = figures(page)["ranks"][0]["hicache"]
    r = read(page)
    assert len(r.pools()) == 1 and not r.invalid
    off = r.offload
    for key in ("stored_bytes", "loaded_bytes", "stored_tokens", "loaded_tokens"):
        assert off[key] == want[key], key
    assert (off["stored_bytes"], off["loaded_tokens"]) == (131_072_000_000, 249_960)
    assert off["store_seconds"] == pytest.approx(want["stored_seconds_per_rank"]) == pytest.approx(2.1845333)
    assert off["load_seconds"] == pytest.approx(want["loaded_seconds_per_rank"])
    assert (off["hit_tokens"], off["query_tokens"]) == (250_000, 1_950_000)
    assert off["hit_rate"] == pytest.approx(250_000 / 1_950_000)


@pytest.mark.parametrize("page", LMCACHE, ids=lambda p: p.stem)
def test_lmcache_tier_reads_as_its_logger_wrote_it(page):
    """LMCache 0.5.6's PrometheusLogger, one process per TP rank (worker_id): every worker counts the same
    tokens (one worker's read: 40 lookups of 8,192 tokens, 4,096 found = 163,840 of 327,680 = 50 %), each
    holds its shard (summed: 40 x 8,192 x 131,072 B = 42,949,672,960 B = 40 GiB), seconds the busiest
    worker's (TP 2: 20 retrieves x 8,192 x 65,536 B / 40e9 = 0.268 s)."""
    fig = figures(page)
    r = read(page)
    assert (r.kind, r.served_model, r.error, r.invalid) == ("lmcache", fig["served_model"], "", {})
    off = r.offload
    assert off["lmcache_workers"] == fig["ranks"] == fig["tp"]
    assert (off["hit_tokens"], off["query_tokens"]) == (fig["lookup_hit_tokens"], fig["lookup_tokens"])
    assert off["hit_rate"] == 0.5 and off["retrieve_hit_rate"] == fig["hit_tokens"] / fig["requested_tokens"]
    assert (off["loaded_tokens"], off["stored_tokens"]) == (fig["hit_tokens"], fig["stored_tokens"])
    assert off["used_bytes"] == fig["local_cache_bytes"] == 40 * 2**30
    assert off["load_seconds"] == pytest.approx(fig["load_seconds_per_rank"], rel=1e-6)
    assert off["store_seconds"] == pytest.approx(fig["store_seconds_per_rank"], rel=1e-6)


def test_live_shows_each_tier_beside_kvdash_figure_for_the_same_size():
    """Issue 29 item 5: the engine's tier beside kvdash.core.tiers for the same size.  vLLM: kvdash's
    vllm_cpu_tier(64 GiB, 16,384 B x 16 per rank, TP 1) = 32,768 chunks of 2,097,152 B = 524,288 tokens, the
    engine's own 32,768 (difference 0); LMCache: 40 GiB // (256 x 131,072 B) = 1,280 chunks = 327,680 tokens,
    what it stored; SGLang HiCache: not mirrored, said so."""
    from kvdash.live.analysis import compare_engine
    from kvdash.render.live_view import engine_rows

    def row(page: str, tp: int = 1) -> dict:
        cfg = LiveConfig(model="llama-3.1-8b", tp=tp, budget=40 * 2**30)
        snap = DemoSource(seed=1).read()
        from kvdash.live.analysis import analyze

        kv = analyze(snap, cfg, read(PAGES / f"{page}.prom"))
        return compare_engine(read(PAGES / f"{page}.prom"), kv, "llama-3.1-8b")

    v = row("vllm-0.33.0-offload")["offload_vs_kvdash"]
    assert (v["kvdash_chunks"], v["engine_chunks"], v["difference_chunks"], v["kvdash_tokens"], v["chunk_bytes"]) == (
        32_768, 32_768, 0, 524_288, 2_097_152)
    for tp in (1, 2):
        c = row("lmcache-0.5.6-tp2", tp)["offload_vs_kvdash"]
        assert (c["kvdash_chunks"], c["kvdash_tokens"], c["difference_tokens"]) == (1_280, 327_680, 0)
    h = row("sglang-0.5.23-hicache", 2)
    assert "not mirrored" in h["offload_vs_kvdash"]["note"]
    texts = {label.strip(): value for label, value, _ in engine_rows(row("vllm-0.33.0-offload"))}
    assert texts["tier size (kvdash)"] == "32,768 chunks, 524,288 tokens: the same"
    assert texts["offload loaded"] == "8.54 GiB in 0.229 s = 40.0 GB/s"
    assert texts["offload hit rate"] == "50.0% of 140,000 tokens"
    assert all(len(label) + len(value) <= 80 - 2 for label, value, _ in engine_rows(row("sglang-0.5.23-hicache", 2))
               if not label.startswith("engine"))


@pytest.mark.parametrize("name", ["vllm-0.33.0-offload", "sglang-0.5.23-hicache", "lmcache-0.5.6-tp2"])
def test_exporter_publishes_the_offload_transfers_and_hits(name):
    page = PAGES / f"{name}.prom"
    off = read(page).offload
    got = {(s.labels["__name__"], s.labels.get("direction"), s.labels.get("unit")): s.value
           for s in exporter_series(page, families=None) if s.labels["__name__"].startswith("kvdash_engine_offload_")}
    for direction, b, sec in (("load", "loaded_bytes", "load_seconds"), ("store", "stored_bytes", "store_seconds")):
        if b in off:
            assert got[("kvdash_engine_offload_transfer_bytes_total", direction, None)] == off[b]
        assert got[("kvdash_engine_offload_transfer_seconds_total", direction, None)] == pytest.approx(off[sec])
    assert got[("kvdash_engine_offload_hit_tokens_total", None, None)] == off["hit_tokens"]
    assert got[("kvdash_engine_offload_query_tokens_total", None, None)] == off["query_tokens"]
    if "chunks" in off:
        assert got[("kvdash_engine_offload_capacity", None, "chunks")] == 32_768


def test_windowed_offload_hit_rate():
    """Two readings of the vLLM offload page, the second with 10,000 more KV-connector tokens of which 1,000
    hit: the window's offload hit rate is 1,000 / 10,000 = 10 % (the lifetime one stays near 50 %)."""
    from kvdash.sources.engine import windowed

    a = read(PAGES / "vllm-0.33.0-offload.prom")
    b = replace(a, offload={**a.offload, "hit_tokens": 71_000, "query_tokens": 150_000})
    assert windowed([a, b])["offload_hit_rate"] == 0.1


# --- the fleet: each engine against its own model's pool; the counters behind windowed rates -------------

def test_an_engine_of_another_model_is_set_beside_its_own_models_pool():
    """The SGLang page serves org/llama-3.1-8b beside kvdash's Llama-3.1-70B (not comparable, as before), and
    is compared with kvdash's Llama-3.1-8B pool on the same budget: --budget 40 GiB at --tp 8, bf16: 32
    layers x 2 x 1 KV head per rank x 128 x 2 B = 16,384 B per token per rank; 40 GiB // (16,384 x 16) =
    163,840 blocks = 2,621,440 tokens; the engine's 600,000 is 2,021,440 fewer."""
    cfg = LiveConfig(budget=40 * 2**30, budget_mode="explicit")
    fleet = build_fleet({"engines": as_series(PAGES / "sglang-0.5.23-tp1.prom", "n:30000", ENGINE_FAMILIES)}, cfg)
    (e,) = fleet["engines"]
    assert not e["comparable"] and "kvdash_tokens" not in e
    assert (e["own_model"], e["own_kvdash_tokens"], e["own_difference_tokens"]) == (
        "llama-3.1-8b", 2_621_440, 600_000 - 2_621_440)
    assert fleet["totals"]["free_kv_bytes"] == 0  # totals still count only kvdash's model in bytes
    from kvdash.render.fleet_view import engine_details, engine_line

    assert "own model 2,621,440 (-2,021,440)" in engine_line(e).plain
    assert "against its own model's pool (llama-3.1-8b" in engine_details(fleet).plain


def test_a_served_model_no_preset_names_says_so():
    series = [Series({**s.labels, "model_name": "acme/unknown-13b"}, s.value)
              for s in as_series(PAGES / "sglang-0.5.23-tp1.prom", "n:30000", ENGINE_FAMILIES)]
    (e,) = build_fleet({"engines": series}, LiveConfig(budget=40 * 2**30, budget_mode="explicit"))["engines"]
    assert "own_kvdash_tokens" not in e and "no kvdash preset is named like acme/unknown-13b" in e["own_model_note"]


@pytest.mark.parametrize("via", ["prometheus", "exporter"])
def test_fleet_rows_carry_the_counters_for_windowed_rates(via):
    """vLLM tp1 page: prefix_cache_queries 90,000, hits 36,000, preemptions 2, read straight from the engine's
    series or back from kvdash exporter's counters."""
    page = PAGES / "vllm-0.33.0-tp1.prom"
    series = as_series(page, "node-a:8000", ENGINE_FAMILIES) if via == "prometheus" else exporter_series(page)
    (e,) = build_fleet({"engines": series}, LiveConfig())["engines"]
    fig = figures(page)["engines"][0]
    assert (e["prefix_queries"], e["prefix_hits"], e["preemptions"]) == (
        fig["prefix_queries"], fig["prefix_hits"], fig["preemptions"]) == (90_000, 36_000, 2)


@pytest.mark.parametrize("name, line", [
    ("vllm-0.33.0-offload", "offload 32,768 chunks (kvdash 32,768) | hit 50.0% | load 40.0 GB/s"),
    ("sglang-0.5.23-hicache", "offload 900,000/2,400,000 host tokens | hit 12.8% | load 80.0 GB/s"),
    ("lmcache-0.5.6-tp2", "offload 40.00 GiB held (kvdash 327,680 tok) | hit 50.0%"),
])
def test_the_dashboard_summary_has_one_offload_line_within_80_columns(name, line):
    """The 80x24 dashboard's summary (kv_summary): the tier in one line once it reports more than its
    configured size (the demo engine, size only, keeps its layout)."""
    from kvdash.live.analysis import analyze
    from kvdash.render.live_view import kv_summary

    cfg = LiveConfig(model="llama-3.1-8b", tp=2, budget=40 * 2**30, budget_mode="explicit")
    kv = analyze(DemoSource(seed=1).read(), cfg, read(PAGES / f"{name}.prom"))
    lines = kv_summary(kv).plain.splitlines()
    assert line in lines and all(len(x) <= 78 for x in lines if x.startswith("offload"))
    from kvdash.sources.engine import from_snapshot

    snap = DemoSource(seed=1).read()
    engine = from_snapshot(snap.extra)
    assert engine is not None and engine.offload == {"tier": "vLLM native offloading (native)", "size_gib": "64.0"}
    demo = kv_summary(analyze(snap, LiveConfig(), engine)).plain.splitlines()
    assert any(x.startswith("engine") for x in demo) and not any(x.startswith("offload") for x in demo)


def test_sglang_prefix_counters_for_the_windowed_hit_rate():
    """SGLang's sglang:prefill_effective_tokens_total (its help: windowed hit rate = rate of the *_hit modes over
    all modes), one scheduler's: the HiCache page has 1,200,000 input + 500,000 device + 250,000 host + 0
    storage = 1,950,000 prompt tokens, 750,000 of them hits; the other pages' series are pre-seeded at 0.
    The fleet carries them too (the windowed rates of its v view)."""
    r = read(PAGES / "sglang-0.5.23-hicache.prom")
    assert (r.prefix_queries, r.prefix_hits) == (1_950_000, 750_000)
    assert (read(PAGES / "sglang-0.5.23-tp8.prom").prefix_queries, read(PAGES / "sglang-0.5.23-tp8.prom").prefix_hits) \
        == (0, 0)
    fleet = build_fleet({"engines": as_series(PAGES / "sglang-0.5.23-hicache.prom", "n:30000", ENGINE_FAMILIES)},
                        LiveConfig())
    assert (fleet["engines"][0]["prefix_queries"], fleet["engines"][0]["prefix_hits"]) == (1_950_000, 750_000)

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
ALL = sorted(PAGES.glob("*.prom"))
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
    assert names and all(p.with_suffix(".json").exists() for p in ALL)


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

"""The fleet's matching rules and totals, from series alone (no server): kvdash/fleet/build.py."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from kvdash.fleet.build import build_fleet, request_slots
from kvdash.fleet.client import Series
from kvdash.live.analysis import LiveConfig

MiB = 2**20
H100 = 81_559  # MiB


def s(metric: str, value: float, **labels: str) -> Series:
    return Series({"__name__": metric, **labels}, value)


def dcgm(host: str, instance: str, gpus: int, used: int = 70_000, reserved: int = 527) -> list[Series]:
    out = []
    for i in range(gpus):
        lab = {"Hostname": host, "gpu": str(i), "UUID": f"GPU-{host}-{i}", "modelName": "NVIDIA H100 80GB HBM3",
               "instance": instance}
        out += [s("DCGM_FI_DEV_FB_USED", used, **lab), s("DCGM_FI_DEV_FB_RESERVED", reserved, **lab),
                s("DCGM_FI_DEV_FB_FREE", H100 - used - reserved, **lab)]
    return out


def vllm(instance: str, engine: str = "0", blocks: int = 90_513, usage: float = 0.5, old: bool = False,
         running: int = 4, waiting: int = 1) -> list[Series]:
    lab = {"instance": instance, "engine": engine, "model_name": "meta-llama/Llama-3.1-70B-Instruct", "job": "vllm"}
    return [s("vllm:gpu_cache_usage_perc" if old else "vllm:kv_cache_usage_perc", usage, **lab),
            s("vllm:num_requests_running", running, **lab), s("vllm:num_requests_waiting", waiting, **lab),
            s("vllm:cache_config_info", 1, instance=instance, engine=engine, block_size="16",
              num_gpu_blocks=str(blocks), kv_cache_size_tokens=str(blocks * 16), cache_dtype="auto",
              gpu_memory_utilization="0.9")]


def test_engine_joins_the_host_named_by_dcgm_through_its_address():
    """DCGM at 10.0.0.5:9400 names its host node-x (Hostname); vLLM at 10.0.0.5:8000 belongs to node-x.
    kvdash is given the engine's own --gpu-util 0.9 (its cache_config_info): floor(0.9 x 85,520,809,984) -
    17,650,000,000 = 59,318,728,985 B // 655,360 = 90,513 blocks x 16 = 1,448,208 tokens, the engine's pool.
    (At kvdash's default 0.92 the pool would be 93,123 blocks, 1,489,968 tokens.)"""
    fleet = build_fleet({"dcgm_memory": dcgm("node-x", "10.0.0.5:9400", 8), "engines": vllm("10.0.0.5:8000"),
                         "targets": [s("up", 1, instance="10.0.0.5:9400", job="dcgm"),
                                     s("up", 1, instance="10.0.0.5:8000", job="vllm")]}, LiveConfig(gpu_util="0.9"))
    assert [h["host"] for h in fleet["hosts"]] == ["node-x"]
    (e,) = fleet["engines"]
    assert e["host"] == "node-x" and e["kvdash_tokens"] == 1_448_208 and e["difference_tokens"] == 0


def test_dcgm_wins_over_kvdash_series_for_the_same_host():
    own = [s(f"kvdash_gpu_memory_{k}_bytes", v, hostname="node-x", gpu="0", uuid="u", name="n",
             instance="node-x:9847") for k, v in (("used", 1), ("free", 2), ("total", 3))]
    fleet = build_fleet({"dcgm_memory": dcgm("node-x", "node-x:9400", 1), "kvdash_memory": own}, LiveConfig(tp=1))
    (h,) = fleet["hosts"]
    assert h["source"] == "dcgm" and h["gpus"][0]["used_bytes"] == 70_000 * MiB


def test_two_engines_behind_one_address_and_the_newer_usage_name_wins():
    """vLLM data-parallel engines share an instance and differ by the engine label; where both usage names
    are present, vllm:kv_cache_usage_perc is the one read."""
    series = vllm("n:8000", "0", usage=0.25) + vllm("n:8000", "1", usage=0.75)
    series.append(s("vllm:gpu_cache_usage_perc", 0.9, instance="n:8000", engine="0"))
    fleet = build_fleet({"dcgm_memory": dcgm("n", "n:9400", 8), "engines": series}, LiveConfig())
    assert [(e["engine"], e["usage"]) for e in fleet["engines"]] == [("0", 0.25), ("1", 0.75)]


def test_older_usage_name_alone_is_read():
    fleet = build_fleet({"engines": vllm("n:8000", old=True, usage=0.4)}, LiveConfig())
    assert fleet["engines"][0]["usage"] == 0.4


def test_too_few_gpus_for_tp_is_noted():
    """A host with 4 GPUs cannot hold a TP-8 engine's ranks: kvdash live's rule (the pool of the readable
    ranks, with a note) is kept, and the note travels with the engine."""
    fleet = build_fleet({"dcgm_memory": dcgm("n", "n:9400", 4), "engines": vllm("n:8000")}, LiveConfig(tp=8))
    (e,) = fleet["engines"]
    assert "TP 8 needs 8 GPUs with memory readings; 4 are readable: the pool is the smallest of these 4, the other " \
        "ranks taken to be alike" in e["kvdash_notes"]
    # the --once footer does not call that pool n/a (it said "kvdash pool n/a: TP 8 needs 8 ..." under the pool)
    from kvdash.render.fleet_view import once_tables

    assert e["kvdash_ok"] and e["kvdash_tokens"] > 0
    footer = once_tables(fleet)[1]
    assert "kvdash pool n/a" not in footer and "\nkvdash: TP 8 needs 8 GPUs with memory readings; 4 are" in footer
    other = build_fleet({"dcgm_memory": dcgm("n", "n:9400", 4), "engines": vllm("n:8000")},
                        LiveConfig(tp=8, model="qwen3-32b"))  # another model served: kvdash's pool exists, not n/a
    assert "kvdash pool n/a" not in once_tables(other)[1] and "\nkvdash: TP 8 needs" in once_tables(other)[1]
    none = build_fleet({"engines": vllm("n:8000")}, LiveConfig(tp=8))  # no GPU series: no pool, said n/a
    assert "\nkvdash pool n/a: TP 8 needs 8 GPUs with memory readings; 0 are readable" in once_tables(none)[1]


def test_no_gpu_series_means_no_kvdash_pool():
    """An engine on a host without GPU series: the engine's figures, kvdash's pool n/a with the reason."""
    fleet = build_fleet({"engines": vllm("n:8000")}, LiveConfig(tp=8))
    (e,) = fleet["engines"]
    assert not e["kvdash_ok"] and "kvdash_tokens" not in e and e["kvdash_notes"]
    assert fleet["totals"]["engine_pool_tokens"] == 1_448_208 and fleet["totals"]["kvdash_pool_tokens"] == 0


def test_budget_mode_engine_takes_each_engines_own_pool():
    cfg = replace(LiveConfig(), budget_mode="engine")
    fleet = build_fleet({"dcgm_memory": dcgm("n", "n:9400", 8),
                         "engines": vllm("n:8000", "0", blocks=1_000) + vllm("n:8000", "1", blocks=2_000)}, cfg)
    assert [e["kvdash_tokens"] for e in fleet["engines"]] == [16_000, 32_000]
    assert [e["difference_tokens"] for e in fleet["engines"]] == [0, 0]


def test_a_host_seen_only_through_up_0_is_down():
    fleet = build_fleet({"targets": [s("up", 0, instance="gone:9400", job="dcgm")]}, LiveConfig())
    (h,) = fleet["hosts"]
    assert (h["host"], h["status"], h["down_targets"]) == ("gone", "down", [{"job": "dcgm", "instance": "gone:9400"}])


def test_a_host_with_one_target_down_is_degraded():
    fleet = build_fleet({"dcgm_memory": dcgm("n", "n:9400", 8), "targets": [
        s("up", 1, instance="n:9400", job="dcgm"), s("up", 0, instance="n:8000", job="vllm")]}, LiveConfig())
    assert fleet["hosts"][0]["status"] == "degraded"


@settings(max_examples=60, deadline=None)
@given(engines=st.lists(st.tuples(st.integers(0, 200_000), st.integers(0, 100), st.sampled_from([1, 16, 32])),
                        min_size=1, max_size=6),
       length=st.integers(1, 40_000))
def test_requests_that_fit_now_never_exceed_free_memory(engines, length):
    """Invariant: requests counted as fitting now, at ceil(n/B) x B slots each, fit in the free tokens; and
    never more than fit in the whole pools."""
    series = []
    for i, (blocks, pct, bs) in enumerate(engines):
        inst = f"h{i}:8000"
        if bs == 1:
            series += [s("sglang:max_total_num_tokens", blocks, instance=inst),
                       s("sglang:token_usage", pct / 100, instance=inst)]
        else:
            series += [s("vllm:kv_cache_usage_perc", pct / 100, instance=inst, engine="0"),
                       s("vllm:cache_config_info", 1, instance=inst, engine="0", block_size=str(bs),
                         num_gpu_blocks=str(blocks))]
    fleet = build_fleet({"engines": series}, replace(LiveConfig(), lengths=(length,), max_reserved=max(8192, length)))
    (fit,) = fleet["totals"]["requests_fit"]
    used_by_fit = sum((e["free_tokens"] // request_slots(length, e["block_size"])) * request_slots(length,
                      e["block_size"]) for e in fleet["engines"])
    assert used_by_fit <= fleet["totals"]["free_kv_tokens"]
    assert fit["free_now"] <= fit["engine_pools"]
    for e in fleet["engines"]:
        assert e["free_tokens"] + e["used_tokens"] == e["pool_tokens"]


def test_prometheus_with_a_single_host_source_is_one_line(capsys):
    import pytest

    from kvdash.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["live", "--prometheus", "localhost:9090", "--demo", "--once"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and "--prometheus" in err


def test_missing_prometheus_binary_is_a_clear_failure(monkeypatch, tmp_path):
    """Without the binary the fixture raises (and the session fixture turns it into pytest.fail), naming
    the Debian package to install."""
    import shutil

    import pytest

    from tests.promfixture import Prometheus, PrometheusMissing

    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(PrometheusMissing, match="apt-get install prometheus"):
        Prometheus({}, tmp_path)


def test_an_empty_prometheus_is_one_line_exit_1(monkeypatch, capsys):
    import pytest

    from kvdash.cli import main
    from kvdash.fleet.source import FleetSource

    monkeypatch.setattr(FleetSource, "fetch", lambda self: {})
    with pytest.raises(SystemExit) as exc:
        main(["live", "--prometheus", "localhost:9090", "--once", "--json"])
    out = capsys.readouterr()
    assert exc.value.code == 1 and out.err.count("\n") == 1 and "no DCGM" in out.err
    import json  # --json always prints JSON on stdout (issue 15): an error object when there is no data

    assert {"error": out.err.strip().removeprefix("kvdash: "), "fleet": None} == json.loads(out.out)


def test_exporter_engines_only_where_prometheus_does_not_scrape_the_engines():
    """node-a's engine is scraped directly and also read by its exporter: counted once (the direct one);
    node-b's only view is its exporter's."""
    def exp(instance: str, engine: str) -> list[Series]:
        lab = {"instance": instance, "engine": engine}
        return [s("kvdash_engine_kv_pool_tokens", 16_000, **lab), s("kvdash_engine_kv_pool_blocks", 1_000, **lab),
                s("kvdash_engine_kv_usage_ratio", 0.25, **lab), s("kvdash_engine_requests_running", 2, **lab)]

    fleet = build_fleet({"dcgm_memory": dcgm("node-a", "node-a:9400", 8) + dcgm("node-b", "node-b:9400", 8),
                         "engines": vllm("node-a:8000") + exp("node-a:9847", "localhost:8000")
                         + exp("node-b:9847", "localhost:8000")}, LiveConfig())
    assert [(e["host"], e["kind"]) for e in fleet["engines"]] == [("node-a", "vllm"), ("node-b", "exporter")]
    b = fleet["engines"][1]
    assert (b["pool_tokens"], b["block_size"], b["used_tokens"], b["running"]) == (16_000, 16, 4_000, 2)

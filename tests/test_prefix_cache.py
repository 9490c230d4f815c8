"""Prefix caching and tiers (issue 29): vLLM's block pool, its offload tiers, LMCache's rules, Mooncake traces."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kvdash.core import tiers as T
from kvdash.errors import InputError
from kvdash.simulate import prefixcache as P
from kvdash.simulate.prefix_tiers import GpuPool

DATA = Path(__file__).resolve().parent / "data"
MOONCAKE = DATA / "mooncake"
GiB = 2**30


# --- tier sizing (kvdash.core.tiers) --------------------------------------------------------------

def test_vllm_cpu_tier_issue_example() -> None:
    # Llama-3.1-70B TP 8 bf16: 80 layers x 2 (K, V) x 1 KV head per rank x 128 x 2 B = 40,960 B per token per
    # rank; block 16 -> 655,360 B; x 8 ranks = 5,242,880 B per chunk (= 1,280 pages of 4,096 B, no padding);
    # 100 GiB = 107,374,182,400 B // 5,242,880 = 20,480 chunks; x 16 tokens = 327,680 tokens.
    t = T.vllm_cpu_tier(100 * GiB, 40_960 * 16, 8, 16)
    assert (t.chunks, t.chunk_bytes, t.tokens) == (20_480, 5_242_880, 327_680)
    assert t.used_bytes == 100 * GiB


def test_vllm_cpu_tier_pads_to_the_page() -> None:
    # 1,000 B per block per rank x 3 ranks x 2 blocks = 6,000 B, rounded up to 8,192 (two 4,096-B pages):
    # 1 MiB = 1,048,576 // 8,192 = 128 chunks of 2 x 16 tokens = 4,096 tokens
    t = T.vllm_cpu_tier(2**20, 1_000, 3, 16, blocks_per_chunk=2)
    assert (t.unpadded_chunk_bytes, t.chunk_bytes, t.chunks, t.chunk_tokens, t.tokens) == (6_000, 8_192, 128, 32,
                                                                                              4_096)
    # the replicated layout keeps one copy: 1,000 x 2 = 2,000 -> 4,096; 256 chunks
    assert T.vllm_cpu_tier(2**20, 1_000, 3, 16, 2, replicated=True).chunks == 256


def test_lmcache_tier() -> None:
    # 327,680 B per token (70B, all ranks) x 256 = 83,886,080 B per chunk;
    # 100 GiB // that = 1,280 chunks = 327,680 tokens
    t = T.lmcache_tier(100 * GiB, 327_680)
    assert (t.chunk_bytes, t.chunks, t.tokens) == (83_886_080, 1_280, 327_680)


def test_parse_offload_and_links() -> None:
    assert T.parse_offload("cpu:100GiB") == {"cpu": 100 * GiB}
    assert T.parse_offload("cpu:1GB,disk:inf") == {"cpu": 10**9, "disk": None}
    for bad in ("disk:1TB", "cpu:0", "gpu:1GiB", "cpu:1GiB,cpu:2GiB", "cpu"):
        with pytest.raises(InputError):
            T.parse_offload(bad)
    assert T.gpu_host_link("h200").key == "pcie5-x16"
    assert T.gpu_host_link("a100-80gb").bytes_per_s == 32 * 10**9
    assert T.gpu_host_link("gh200").key == "nvlink-c2c"
    assert T.parse_link("25GB/s", "--link").bytes_per_s == 25 * 10**9
    with pytest.raises(InputError):
        T.parse_link("fast", "--link")
    # 5,242,880 B over PCIe Gen5 x16 at 64 GB/s: 81.92 us
    assert T.transfer_seconds(5_242_880, T.links()["pcie5-x16"]) == pytest.approx(81.92e-6)
    # remote tiers: 400 Gb/s RDMA = 400e9 / 8 = 50 GB/s, 100 Gb/s Ethernet = 12.5 GB/s; the same 5,242,880 B chunk
    # takes 104.8576 us and 419.4304 us
    assert T.parse_link("rdma-400g", "--disk-link").bytes_per_s == 50 * 10**9
    assert T.transfer_seconds(5_242_880, T.links()["rdma-400g"]) == pytest.approx(104.8576e-6)
    assert T.transfer_seconds(5_242_880, T.links()["ethernet-100g"]) == pytest.approx(419.4304e-6)


def test_every_gpu_preset_has_a_host_link() -> None:
    from kvdash.core.gpus import gpu_presets

    raw = json.loads((T.DATA / "links.json").read_text())
    assert set(gpu_presets()) <= set(raw["gpu_host_link"])
    assert set(raw["gpu_host_link"].values()) <= set(T.links())


# --- vLLM's block pool, by hand -------------------------------------------------------------------

def _one(prompt: int, output: int, segs: list[int], ends: list[int], out_seg: int) -> P.Workload:
    return P.Workload("t", [0.0], [prompt], [output], [np.asarray(segs, dtype=np.int64)],
                      [np.asarray(ends, dtype=np.int64)], [out_seg])


def _cat(*ws: P.Workload) -> P.Workload:
    out = P.Workload("t", [], [], [], [], [], [])
    for k, w in enumerate(ws):
        out.arrival.append(float(k))
        out.prompt += w.prompt
        out.output += w.output
        out.segs += w.segs
        out.seg_ends += w.seg_ends
        out.out_seg += w.out_seg
    return out


def test_tails_evicted_first_and_hit_limit() -> None:
    # block 4; pool of 6 blocks, one of them vLLM's null block: 5 usable.
    # A: 16-token prompt (4 blocks, segment 1) + 1 output token -> 5 blocks; freed tail first.
    # B: 8 new tokens + 1 -> 3 blocks: takes A's output block (unhashed, front of the queue) and then evicts
    #    A's blocks 4 and 3 (its tail, first in the free queue): 2 evictions.
    # A again: blocks 1 and 2 still cached: 8 tokens hit (not 12: its tail was evicted first).
    a = _one(16, 1, [1], [16], 100)
    b = _one(8, 1, [2], [8], 101)
    r = P.replay(_cat(a, b, a), P.TierSpec(block_size=4, gpu_tokens=24))
    assert r.hit_tokens == 8
    assert r.tiers[0].evictions == 2 + 2  # the second A evicts two more to hold its 5 blocks
    # unbounded: the repeat hits 3 blocks = 12 tokens, not 16: at most prompt - 1 tokens hit
    r = P.replay(_cat(a, a), P.TierSpec(block_size=4, gpu_tokens=None))
    assert r.hit_tokens == 12


def test_hits_stop_at_the_first_miss() -> None:
    # segments 1 (8 tokens) then 2 (8 tokens); the second request has segment 3 in the middle: only the
    # first 2 blocks (8 tokens) hit although its last blocks are "the same" segment 2 content after a
    # different prefix (prefix-closed ids: a different id)
    a = _one(16, 1, [1, 2], [8, 16], 100)
    c = _one(24, 1, [1, 3, 4], [8, 16, 24], 101)
    r = P.replay(_cat(a, c), P.TierSpec(block_size=4, gpu_tokens=None))
    assert r.hit_tokens == 8
    assert r.hit_requests == 1


def test_matches_vllm_blockpool() -> None:
    """Every request's hit blocks and the pool's evictions equal those of vLLM 0.33.0's own BlockPool driven
    with KVCacheManager's calls (tests/data/vllm_blockpool_check.json, made by
    benchmarks/vllm_blockpool_check.py in the vLLM side venv)."""
    fixture = json.loads((DATA / "vllm_blockpool_check.json").read_text())
    assert fixture["producer"].startswith("vllm 0.33.0")
    for case in fixture["cases"]:
        spec = case["workload"]
        if spec.startswith("mooncake:"):
            _, path, limit = spec.split(":")
            w = P.read_mooncake(str(DATA.parent.parent / path), int(limit))
        else:
            w = P.parse_workload_spec(spec, seed=0)
        B = case["block_size"]
        keys = P.block_keys(w, B, True)
        pool = GpuPool(case["gpu_blocks"])
        hits = []
        for i, ks in enumerate(keys):
            p = w.prompt[i]
            h = pool.hit(ks, (p - 1) // B)
            got = pool.admit(ks, h, -(-(p + w.output[i]) // B))
            if got is None:
                hits.append(-1)
                continue
            hits.append(h)
            pool.release(*got)
        assert hits == case["hits"], spec
        assert pool.evictions == case["evictions"], spec
        r = P.replay(w, P.TierSpec(block_size=B, gpu_tokens=case["gpu_blocks"] * B))  # the dense pool
        assert r.request_hits == [h * B if h >= 0 else -1 for h in case["hits"]], spec
        assert r.hit_tokens == sum(h for h in case["hits"] if h > 0) * B
        assert r.tiers[0].evictions == case["evictions"]


# --- generated workloads --------------------------------------------------------------------------

def test_multi_turn_extends_the_last_turn() -> None:
    w = P.multi_turn(3, 4, 100, 50, 40, seed=1)
    assert len(w) == 12
    for c in range(3):
        turns = [i for i in range(12) if i % 3 == c]  # round robin
        for a, b in zip(turns, turns[1:], strict=False):
            # the next prompt = this prompt + this reply + a new user message
            assert list(w.segs[b][:len(w.segs[a]) + 1]) == [*w.segs[a], w.out_seg[a]]
            assert w.prompt[b] > w.prompt[a] + w.output[a]
    # unbounded pool: each later turn hits every full block of its history (prompt and reply of the
    # turn before), the first turns the system prompt's full blocks (100 // 16 = 6 blocks, after chat 0)
    B = 16
    r = P.replay(w, P.TierSpec(block_size=B, gpu_tokens=None))
    expect = 0
    for i in range(12):
        if i < 3:
            expect += 0 if i == 0 else 96
        else:
            prev = i - 3
            expect += min((w.prompt[prev] + w.output[prev]) // B, (w.prompt[i] - 1) // B) * B
    assert r.hit_tokens == expect


def test_system_prompts_shares() -> None:
    w = P.system_prompts(1000, [512, 512], [3, 1], 20, 10, seed=0)
    first = [int(s[0]) for s in w.segs]
    assert 700 < first.count(0) < 800  # 3 : 1
    # unbounded: every request but the first of each system prompt hits its 512 tokens (32 blocks)
    r = P.replay(w, P.TierSpec(block_size=16, gpu_tokens=None))
    assert r.hit_tokens == (1000 - 2) * 512
    assert r.hit_requests == 998


def test_workload_spec_errors() -> None:
    for bad in ("multi-turn:1,2,3", "system-prompts:2,100,10,10,50,1", "chat:1", "multi-turn:0,1,1,1,1",
                "system-prompts:2,100,10,10,50,a/b"):
        with pytest.raises(InputError):
            P.parse_workload_spec(bad, 0)
    assert P.parse_capacities("1M,3M,inf") == [10**6, 3 * 10**6, None]
    for bad in ("3M,1M", "inf,1M", "0", "1.5", "x"):
        with pytest.raises(InputError):
            P.parse_capacities(bad)


# --- tiers in the replay --------------------------------------------------------------------------

def test_cpu_tier_catches_what_the_gpu_evicts() -> None:
    # GPU of 5 usable blocks of 4 tokens; A (16 tokens, 5 blocks with its output), then B (8 new tokens) evicts
    # A's blocks 3 and 4; the CPU tier (every full chunk stored, 1 block per chunk) still has them: the
    # repeat of A hits 2 blocks on the GPU and loads 1 from the CPU (12 tokens: the limit is prompt - 1).
    a = _one(16, 1, [1], [16], 100)
    b = _one(8, 1, [2], [8], 101)
    r = P.replay(_cat(a, b, a), P.TierSpec(block_size=4, gpu_tokens=24, cpu_tokens=1000, bytes_per_token=10,
                                           cpu_link_bps=1000))
    gpu, cpu = r.tiers
    assert (gpu.hit_tokens, cpu.hit_tokens, r.hit_tokens) == (8, 4, 12)
    assert cpu.loaded_units == 1 and cpu.transfer_s == [4 * 10 / 1000]
    # stored: A's 4 full blocks (16 tokens + 1 output: 4 full), B's 2, and nothing new the third time
    assert cpu.stored_units == 6


def test_disk_tier_behind_the_cpu() -> None:
    # CPU tier of 4 chunks: after A (4 chunks) and B (2), A's tail chunks (evicted first: a finished request's tail
    # ranks before its head) are only on the (unbounded) disk tier; A again: 2 blocks from the GPU, then its third
    # chunk from disk (the hit stops at prompt - 1 = 15 tokens: 3 blocks)
    a = _one(16, 1, [1], [16], 100)
    b = _one(8, 1, [2], [8], 101)
    r = P.replay(_cat(a, b, a), P.TierSpec(block_size=4, gpu_tokens=24, cpu_tokens=16, disk_tokens=None))
    gpu, cpu, disk = r.tiers
    assert gpu.hit_tokens == 8 and cpu.hit_tokens == 0 and disk.hit_tokens == 4
    assert r.hit_tokens == 12


def test_cpu_store_is_all_or_nothing() -> None:
    """Rule (vLLM 0.33, CPUOffloadingManager.prepare_store, vllm/v1/kv_offload/cpu/manager.py: None when the
    chunks to evict exceed the evictable ones, the offer's own keys protected; the connector does not advance the
    request's stored index, so it never stores them; only the chunks the CPU tier stored cascade to the tiers
    behind it, TieringOffloadingManager.complete_store): a CPU tier of 2 chunks cannot take A's 4, so it stores
    none of them and the disk tier gets none (kvdash stored the first 2 and cascaded all 4, so the last A hit the
    disk); B's 2 fit.  Stores: B's 2 only; 2 failures (both A's)."""
    a = _one(16, 1, [1], [16], 100)
    b = _one(8, 1, [2], [8], 101)
    r = P.replay(_cat(a, b, a), P.TierSpec(block_size=4, gpu_tokens=24, cpu_tokens=8, disk_tokens=None))
    gpu, cpu, disk = r.tiers
    assert (gpu.hit_tokens, cpu.hit_tokens, disk.hit_tokens) == (8, 0, 0)
    assert (cpu.stored_units, cpu.store_failures, disk.stored_units) == (2, 2, 2)
    arc = P.replay(_cat(a, b, a), P.TierSpec(block_size=4, gpu_tokens=24, cpu_tokens=8, disk_tokens=None,
                                             cpu_policy="arc"))
    assert (arc.tiers[1].stored_units, arc.tiers[1].store_failures, arc.tiers[2].stored_units) == (2, 2, 2)
    # a prompt that fits with outputs that do not: the prompt's chunks are stored, then each output chunk alone
    c = _one(8, 12, [3], [8], 102)  # 2 prompt chunks, 20 tokens: 5 full chunks in all
    r = P.replay(c, P.TierSpec(block_size=4, gpu_tokens=40, cpu_tokens=8, disk_tokens=None))
    assert (r.tiers[1].stored_units, r.tiers[1].evictions, r.tiers[1].store_failures, r.tiers[2].stored_units) == (
        5, 3, 0, 5)


def test_arc_keeps_reused_chunks_through_a_scan() -> None:
    # GPU: 3 usable blocks of 4 tokens, so each request (8 + 1 tokens, 3 blocks) evicts the one before; CPU
    # tier of 4 chunks; every request stores its 2 full blocks. A, X1, A (a CPU hit: ARC moves A's chunk
    # to T2), X2, X3, A. LRU keeps the last 4 chunks (X2's, X3's): the last A misses; ARC evicts the
    # one-offs from T1 and keeps A's reused chunk: the last A hits it (1 block: the limit is prompt - 1).
    def w() -> P.Workload:
        a = _one(8, 1, [1], [8], 100)
        return _cat(a, _one(8, 1, [2], [8], 101), a, _one(8, 1, [3], [8], 102), _one(8, 1, [4], [8], 103), a)

    lru = P.replay(w(), P.TierSpec(block_size=4, gpu_tokens=16, cpu_tokens=16))
    arc = P.replay(w(), P.TierSpec(block_size=4, gpu_tokens=16, cpu_tokens=16, cpu_policy="arc"))
    assert lru.tiers[1].hit_tokens == 4  # the third request only
    assert arc.tiers[1].hit_tokens == 8  # the third and the last


# --- Mooncake traces and LMCache's simulator ------------------------------------------------------

@pytest.fixture(scope="module")
def traces() -> dict[str, P.Workload]:
    return {n: P.read_mooncake(str(MOONCAKE / f"{n}_trace.jsonl.xz")) for n in ("conversation", "synthetic")}


def test_mooncake_traces_as_published(traces: dict[str, P.Workload]) -> None:
    # FAST25-release/README.md: 12,031 requests, mean input 12,035; 3,993 requests, mean input 15,325
    c, s = traces["conversation"], traces["synthetic"]
    assert (len(c), round(c.prompt_tokens / len(c))) == (12_031, 12_035)
    assert (len(s), round(s.prompt_tokens / len(s))) == (3_993, 15_325)


def test_lmcache_rules_equal_lmcache_simulator(traces: dict[str, P.Workload]) -> None:
    """LMCache 0.5.6's own simulator (tests/data/lmcache_sim_mooncake.json, benchmarks/lmcache_compare.py):
    the same hit tokens and evictions at 1M, 3M, 10M, 50M tokens and unbounded, on both traces."""
    fixture = json.loads((DATA / "lmcache_sim_mooncake.json").read_text())
    assert fixture["producer"].startswith("LMCache 0.5.6")
    for name, rows in fixture["traces"].items():
        keys: dict[tuple[int, bool], list[list[int]]] = {}
        for row in rows:
            r = P.replay(traces[name], P.TierSpec(rules="lmcache", cpu_tokens=row["capacity_tokens"]), keys)
            assert r.prompt_tokens == row["total_tokens"]
            assert r.hit_tokens == row["hit_tokens"], (name, row["capacity_tokens"])
            assert r.tiers[0].evictions == row["evictions"]


def test_lmcache_simulator_figures_beside_the_issue_and_paper() -> None:
    # the issue quotes LMCache's simulator at 14.3 % (3M) / 37.3 % (unbounded) on conversation and 32.0 % / 65.0 %
    # on synthetic; the FAST'25 paper's Table 2 gives cache ratios of 40 % and 66 %: within 3 points unbounded
    fixture = json.loads((DATA / "lmcache_sim_mooncake.json").read_text())["traces"]
    rate = {n: {row["capacity_tokens"]: 100 * row["token_hit_rate"] for row in rows} for n, rows in fixture.items()}
    assert rate["conversation"][3_000_000] == pytest.approx(14.3, abs=0.1)
    assert rate["conversation"][None] == pytest.approx(37.3, abs=0.1)
    assert rate["synthetic"][3_000_000] == pytest.approx(32.0, abs=0.2)
    assert rate["synthetic"][None] == pytest.approx(65.0, abs=0.1)
    assert abs(rate["conversation"][None] - 40) <= 3 and abs(rate["synthetic"][None] - 66) <= 3


def test_read_mooncake_refuses_bad_lines(tmp_path: Path) -> None:
    good = {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}
    for bad in ({**good, "hash_ids": [1]}, {**good, "input_length": 0}, {**good, "timestamp": -1},
                {k: v for k, v in good.items() if k != "hash_ids"}, {**good, "hash_ids": [1, "x"]}):
        f = tmp_path / "t.jsonl"
        f.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
        with pytest.raises(InputError) as exc:
            P.read_mooncake(str(f))
        assert ":2" in str(exc.value.value)
    f = tmp_path / "t.jsonl"
    f.write_text("not json\n")
    with pytest.raises(InputError):
        P.read_mooncake(str(f))


# --- the command line -----------------------------------------------------------------------------

def test_calc_offload_issue_example(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.cli_run import run

    code, out, _ = run(["calc", "--model", "llama-3.1-70b", "--tp", "8", "--offload", "cpu:100GiB", "--json"], capsys)
    assert code in (0, None)
    o = json.loads(out)["offload_tiers"]
    cpu = o["tiers"]["cpu"]
    assert (cpu["chunks"], cpu["chunk_bytes"], cpu["tokens"]) == (20_480, 5_242_880, 327_680)
    # the default request, 825 tokens: 51 full 16-token chunks (816 tokens) x 5,242,880 B = 267,386,880 B;
    # 33,423,360 B per rank over PCIe Gen5 x16 (64 GB/s, no --gpu): 0.522 ms; 20,480 // 51 = 401 prefixes
    assert (o["request_chunks"], o["request_bytes"], o["request_bytes_per_rank"]) == (51, 267_386_880, 33_423_360)
    assert o["reload_cpu_s"] == pytest.approx(33_423_360 / 64e9)
    assert o["requests_held"] == {"cpu": 401} and o["requests_held_total"] == 401
    code, out, _ = run(["calc", "--model", "llama-3.1-70b", "--tp", "8", "--offload", "cpu:100GiB"], capsys)
    assert "20,480 chunks" in out and "327,680 tokens" in out


def test_calc_footer_closes_the_output_after_every_section(capsys: pytest.CaptureFixture[str]) -> None:
    """calc's footer (the version and what KiB/MiB/GiB mean) is its last line, after the sections printed below
    the tables: the offload tiers (cpu:100GiB at TP 8: 20,480 chunks of 5,242,880 B, as above) and SGLang's view
    (Llama-3.1-70B on 8 x H200: max_total_num_tokens 2,832,402, as tests/test_calc_sglang.py works out)."""
    from tests.cli_run import run

    for args, section, figure in (
            (["--model", "llama-3.1-70b", "--tp", "8", "--offload", "cpu:100GiB"], "Offload tiers (vLLM native",
             "20,480 chunks"),
            (["--model", "llama-3.1-70b", "--gpu", "h200", "--tp", "8", "--engine-rules", "sglang"],
             "SGLang 0.5.23 view (--engine-rules sglang):", "max_total_num_tokens=2832402")):
        code, out, _ = run(["calc", *args], capsys)
        assert code in (0, None)
        flat = out.replace("\n", " ")  # every line is wrapped to the terminal's width
        assert flat.rstrip().endswith(" - bytes are exact; KiB/MiB/GiB are powers of 2.")
        assert flat.count("bytes are exact") == 1
        assert flat.index(section) < flat.index(figure) < flat.index("bytes are exact")


@pytest.mark.parametrize("args, field", [
    (["calc", "--offload", "disk:1TB"], "--offload"),
    (["calc", "--link", "pcie5-x16"], "--offload"),
    (["calc", "--offload", "cpu:1GiB", "--link", "warp"], "--link"),
    (["simulate", "--prefix-workload", "chat:1"], "--prefix-workload"),
    (["simulate", "--prefix-workload", "multi-turn:2,2,10,10,10", "--rules", "sglang"], "--rules"),
    (["simulate", "--prefix-workload", "multi-turn:2,2,10,10,10", "--capacities", "3M,1M"], "--capacities"),
    (["simulate", "--prefix-workload", "multi-turn:2,2,10,10,10", "--offload", "cpu:1GiB", "--cpu-policy", "lfu"],
     "--cpu-policy"),
    (["simulate", "--hash-trace", "/nonexistent.jsonl"], "--hash-trace"),
])
def test_bad_input_is_one_line(args: list[str], field: str, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.cli_run import run

    code, out, err = run(args, capsys)
    assert code == 2
    assert field in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_simulate_prefix_json_and_text(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.cli_run import run

    args = ["simulate", "--model", "llama-3.1-8b", "--budget", "2GiB", "--prefix-workload",
            "system-prompts:4,2000,100,50,400", "--offload", "cpu:4GiB,disk:inf", "--capacities", "10k,100k,inf"]
    code, out, _ = run([*args, "--json"], capsys)
    assert code in (0, None)
    d = json.loads(out)
    assert [t["tier"] for t in d["result"]["tiers"]] == ["gpu", "cpu", "disk"]
    assert d["result"]["hit_tokens"] == sum(t["hit_tokens"] for t in d["result"]["tiers"])
    assert [p["capacity_tokens"] for p in d["capacity_curve"]["points"]] == [10_000, 100_000, None]
    code, out, _ = run(args, capsys)
    assert code in (0, None)
    assert "Per tier" in out and "Hit rate against disk tier capacity" in out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_hostile_trial_of_the_prefix_replay(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A hostile trial of the prefix replay (a helper), each mended: a link in bits (25Gb/s) was read as bytes
    (8 x too fast); an output_length of 2^31 took 36 s and 10 GB before being skipped; --max-requests refused
    the default 2,000 a trace never uses; a multi-turn spec past the model's context ran for minutes; --requests
    did not limit a generated workload; a tier of 0 chunks vanished from the tables; the occupancy peak was read
    off the sampled series (3,811 of 3,823 units stored, none evicted); options a run does not read were accepted
    and ignored (--offload without a replay, --rate with one, --cpu-policy without --offload)."""
    from tests.cli_run import run

    assert T.parse_link("25Gb/s", "--link").bytes_per_s == 25 * 10**9 // 8  # bits
    assert T.parse_link("25GB/s", "--link").bytes_per_s == 25 * 10**9
    with pytest.raises(InputError, match="positive bandwidth"):
        T.parse_link("0GB/s", "--link")
    two = tmp_path / "two.jsonl"
    two.write_text('\ufeff{"timestamp": 0, "input_length": 2048, "output_length": 10, "hash_ids": [1,2,3,4]}\n'
                   '{"timestamp": 10, "input_length": 2048, "output_length": 10, "hash_ids": [1,2,3,4]}\n')
    base = ["simulate", "--model", "llama-3.1-8b", "--hash-trace", str(two)]
    code, _, err = run([*base, "--max-requests", "5"], capsys)  # a byte-order mark is read past too
    assert code in (0, None), err
    big = tmp_path / "big.jsonl"
    big.write_text('{"timestamp": 0, "input_length": 1000, "output_length": 2147483647, "hash_ids": [1,2]}\n')
    code, _, err = run(["simulate", "--model", "llama-3.1-8b", "--hash-trace", str(big)], capsys)
    assert code == 2 and "is not allowed; expected a whole number of tokens from 0 to 67,108,864" in err
    deep = tmp_path / "deep.jsonl"  # a helper's trial: RecursionError in json.loads, a traceback and exit 1
    deep.write_text("[" * 100_000 + "\n")
    code, _, err = run(["simulate", "--model", "llama-3.1-8b", "--hash-trace", str(deep)], capsys)
    assert code == 2 and f"{deep}:1' is not allowed; each line must be one JSON object" in err
    gen = ["simulate", "--model", "llama-3.1-8b", "--prefix-workload"]
    code, _, err = run([*gen, "multi-turn:20,100000,10,10,10"], capsys)
    assert code == 2 and "the last turn would reach about 2,000,010 tokens" in err
    code, out, _ = run([*gen, "multi-turn:20,6,1000,200,300", "--requests", "10", "--json"], capsys)
    assert json.loads(out)["result"]["requests"] == 10
    code, _, err = run([*base, "--offload", "cpu:1KiB"], capsys)
    assert code == 2 and "the cpu tier holds no chunk" in err
    for extra, words in ((["--requests", "20", "--offload", "cpu:1GiB"], "applies to a prefix replay"),
                         (["--rate", "3"], "not read by a prefix replay"),
                         (["--clip"], "--clip: '--clip' is not allowed; not read by a prefix replay"),
                         (["--cpu-policy", "arc"], "shapes an --offload tier")):
        args = ["simulate", "--model", "llama-3.1-8b", *extra] if "--offload" in extra else [*base, *extra]
        code, _, err = run(args, capsys)
        assert code == 2 and words in err and len(err.strip().splitlines()) == 1, (extra, err)
    code, out, _ = run([*base, "--offload", "cpu:10GiB", "--json"], capsys)
    cpu = json.loads(out)["result"]["tiers"][1]
    # one figure for the GPU pool: whole blocks, as its tier's capacity (the setup gave the token slots, 4 more)
    assert json.loads(out)["setup"]["gpu_pool_tokens"] == json.loads(out)["result"]["tiers"][0]["capacity_tokens"]
    assert cpu["evictions"] == 0 and cpu["occupancy_peak"] == cpu["units_stored"] == 128  # 2,048 / 16


def test_cpu_offers_follow_the_prefill_steps() -> None:
    """Rule (vLLM 0.33 _build_store_jobs, offloading/scheduler.py: each step offers the chunks computed so far and
    not stored): a prompt of 16 tokens (4 chunks of 4) prefilled 8 tokens a step is offered 2 chunks at a time, so
    a CPU tier of 2 chunks stores both offers (the second evicting the first) and the disk tier receives all 4;
    prefilled in one step (0) or 12 tokens a step (3 chunks first) the first offer is refused, and every later one,
    which holds the refused chunks again (a review found the prompt offered whole)."""
    a = _one(16, 1, [1], [16], 100)

    def tiers(step: int) -> tuple[int, int, int]:
        r = P.replay(a, P.TierSpec(block_size=4, gpu_tokens=24, cpu_tokens=8, disk_tokens=None,
                                   prefill_step_tokens=step))
        return r.tiers[1].stored_units, r.tiers[1].store_failures, r.tiers[2].stored_units

    assert tiers(8) == (4, 0, 4) and tiers(4) == (4, 0, 4)
    assert tiers(0) == (0, 1, 0) and tiers(12) == (0, 1, 0)
    # chunks loaded from a tier are not offered again (next_stored_chunk_idx jumps past a load's chunks): A's 4
    # chunks, evicted from the GPU by B (whose 6 the 4-chunk tier refuses), are loaded for A2 (A's prompt and 8 more
    # tokens), whose offer is its 2 new chunks: stored, evicting 2 (offered whole, 6 keys, it was refused)
    b, a2 = _one(24, 1, [2], [24], 101), _one(24, 1, [1, 5], [16, 24], 102)
    r = P.replay(_cat(a, b, a2), P.TierSpec(block_size=4, gpu_tokens=32, cpu_tokens=16, disk_tokens=None))
    cpu = r.tiers[1]
    assert (cpu.hit_tokens, cpu.loaded_units, cpu.stored_units, cpu.evictions, cpu.store_failures) == (16, 4, 6, 2, 1)
    assert r.tiers[2].stored_units == 6
    # ARC observes a refused offer's ghosts (vLLM's prepare_store calls on_store_miss before the allocation): keys
    # 1 and 2, evicted to B1 by 3 and 4, come back in a refused offer of 4 keys: the target moves from 0 to 2
    # (1 a ghost hit: + max(1, |B2| / |B1|)), nothing is stored
    from kvdash.simulate.prefix_tiers import ArcTier, TierStats

    tier = ArcTier(2, TierStats("cpu", 4, 2))
    tier.store([1, 2], {1, 2})
    tier.store([3, 4], {3, 4})
    assert list(tier.b1) == [1, 2] and tier.target == 0
    assert P._store_computed(tier, [1, 2, 5, 6], 16, 4, 0) == [] and tier.stats.store_failures == 1
    assert tier.target == 2 and len(tier) == 2 and 1 not in tier

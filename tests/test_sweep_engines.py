"""``grid: engine: [vllm, sglang]`` (issue 27): the engine as a grid dimension -- one row per engine and point,
each its own engine's plan -- and the report weighing the engines on the same hardware.  SGLang's pool figures
are kvdash.engines.sglang's, checked against SGLang 0.5.23's own code in test_conformance_sglang.py."""

from __future__ import annotations

import csv
from pathlib import Path

from kvdash.sweep.engines import token_pool_metrics
from tests.cli_run import run

CONFIGS = Path(__file__).resolve().parent / "data" / "configs"
GRID = """title: Two engines
models:
  - preset: llama-3.1-70b
  - name: jamba
    config: {config}
    weights: 160GB
grid:
  gpu: [h200]
  tp: [8]
{engine}"""


def _rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.read_text().splitlines()))


def _sweep(tmp_path, capsys, text: str, name: str) -> Path:
    grid = tmp_path / f"{name}.yaml"
    grid.write_text(text)
    code, _, err = run(["sweep", grid, "--out", tmp_path / name, "-q"], capsys)
    assert code in (0, None), err
    return tmp_path / name


def test_engine_is_a_dimension(tmp_path, capsys):
    """Llama-3.1-70B on 8 x H200, the default workload (825 tokens held, 2,048 reserved).  SGLang's plan
    (test_calc_sglang.py): 116,015,203,024 B // 40,960 B = 2,832,402 token slots, max_running_requests 4,096.
    At page 1 a request holds its 825 tokens: 2,832,402 // 825 = 3,433 fit (3,433 x 825 = 2,832,225); all run
    (3,433 <= 4,096); contiguous Max 2,832,402 // 2,048 = 1,383.  vLLM's row is the point of the grid without
    engine:, unchanged, and runs 1,024 (max_num_seqs).  Jamba-1.5-Mini: SGLang 0.5.23 has no Jamba model class and
    refuses it (model_loader/utils.py resolve_transformers_arch), so no sglang row, and the report says SGLang's
    sentence."""
    config = CONFIGS / "jamba-1.5-mini" / "config.json"
    out = _sweep(tmp_path, capsys, GRID.format(config=config, engine="  engine: [vllm, sglang]\n"), "two")
    plain = _sweep(tmp_path, capsys, GRID.format(config=config, engine=""), "one")
    rows, base = _rows(out / "results.csv"), _rows(plain / "results.csv")
    assert [(r["model"], r["engine"]) for r in rows] == [("llama-3.1-70b", "vllm"), ("llama-3.1-70b", "sglang"),
                                                         ("jamba", "vllm")]
    for r, b in zip([rows[0], rows[2]], base, strict=True):  # the vLLM rows are the points unchanged
        assert {k: r[k] for k in b} == b
        assert r["engine_kv_cache_tokens"] == b["vllm_kv_cache_tokens"] and r["engine_vs_vllm_percent"] == "0.000000"
    s = rows[1]
    assert (s["block_size"], s["gpu_util"], s["util_policy"], s["budget_bytes"], s["bytes_per_token"]) == \
        ("1", "0.893", "sglang", "116015203024", "40960")
    assert (s["engine_kv_cache_tokens"], s["kv_token_slots"], s["max_num_seqs"]) == ("2832402", "2832402", "4096")
    assert (s["paged_requests"], s["running_requests"], s["contiguous_requests"], s["tail_waste_slots"]) == \
        ("3433", "3433", "1383", "0")
    assert s["vllm_kv_cache_tokens"] == "" and s["id"] != rows[0]["id"]
    # (2,832,402 - 2,795,536) / 2,795,536 = +1.3187 %
    assert rows[0]["vllm_kv_cache_tokens"] == "2795536" and s["engine_vs_vllm_percent"].startswith("1.3187")
    md = (out / "report.md").read_text()
    assert "Points are named by the swept dimensions: model, engine" in md
    # the decision weighs the engines: SGLang runs 3,433 where vLLM's max_num_seqs stops at 1,024 (-70.2 %)
    assert "best is llama-3.1-70b, sglang, 8 x h200 with 429.1 running_requests_per_gpu" in md
    assert "runner-up vllm with 128.0 (-70.2%)" in md
    # 3,433 paged against vLLM's 3,360: +2.2 %
    assert "engines on the same hardware: SGLang 0.5.23 fits +2.2% of vLLM 0.33's paged requests over 1 point " in md
    assert "| llama-3.1-70b | 8 x h200 | bf16 | 106.64 GiB | 2,795,536 | 108.05 GiB | 0.893 | 2,832,402 | 4,096 | " \
           "+1.3 % |" in md
    # 1 GiB + (1 - 0.893) x (143,771 MiB - 1 GiB) = 1 + 14.92 = 15.92 GiB kept from weights and KV
    assert "budget +1.3 %: SGLang keeps back 15.92 GiB/rank (1 GiB + (1 - 0.893) x the rest)" in md
    assert "same cell 40,960 B/token" in md
    assert "caps 4,096 (max_running_requests at context_len 131,072) against 1,024 (max_num_seqs)" in md
    # held back: 143,771 MiB = 150,754,820,096 B - 17,650,000,000 B of weights - the budget
    assert s["engine_held_back_bytes"] == str(150_754_820_096 - 17_650_000_000 - 116_015_203_024)  # 17,089,617,072
    assert rows[0]["engine_held_back_bytes"] == str(150_754_820_096 - 17_650_000_000 - 114_505_346_781)
    assert "| jamba | 8 x h200 | bf16 | SGLang 0.5.23 refuses: JambaForCausalLM has no SGlang implementation and " \
           "the Transformers implementation is not compatible with SGLang (model_loader/utils.py" in md
    assert "3 points (4 before exclusions)" in md
    assert "`sglang-activations-5-8gb`" in md and "**contradicted (0/1)**" in md  # the claims: all default
    assert "Engines compared" in (out / "report.html").read_text()


def test_hybrid_swa_rows_need_both_pools(tmp_path, capsys):
    """gpt-oss-120b (is_hybrid_swa_model): SGLang's SWA pool is int(0.8 x the full pool).  A 100-token request
    is inside the 128-token window, so it holds 100 slots in each pool and the smaller SWA pool decides:
    SWA // 100 requests, not full // 100.  A 16,384-token one holds at most 2 x 128 = 256 SWA slots
    (maybe_evict_swa), so there the full pool decides: full // 16,384."""
    from kvdash.core.gpus import gpu_presets
    from kvdash.core.model import load_config, load_preset
    from kvdash.engines import sglang

    preset = load_preset("gpt-oss-120b")
    arch = load_config(CONFIGS / "gpt-oss-120b" / "config.json")
    v = sglang.view(arch, gpu_presets()["h200"].memory_bytes, 8, "bf16", -(-preset.weight_bytes // 8))
    full, swa = v["max_total_num_tokens"], v["swa_max_total_num_tokens"]
    assert v["pool"] == "hybrid_swa" and swa == int(full * 0.8)
    out = _sweep(tmp_path, capsys, "models: [gpt-oss-120b]\nworkloads:\n  short: {length: 100, max_reserved: 128}\n"
                 "  long: {length: 16384, max_reserved: 16384}\ngrid:\n  gpu: [h200]\n  tp: [8]\n"
                 "  engine: [vllm, sglang]\n", "swa")
    rows = {r["workload"]: r for r in _rows(out / "results.csv") if r["engine"] == "sglang"}
    assert rows["short"]["engine_kv_cache_tokens"] == str(full) and rows["short"]["engine_swa_tokens"] == str(swa)
    assert rows["short"]["paged_requests"] == str(swa // 100)
    assert rows["long"]["paged_requests"] == str(full // 16384)


def test_token_pool_metrics_by_hand():
    """A pool of 100 token slots, page 16: a 30-token request holds 32 slots, a 10-token one 16: 48 a group,
    100 // 48 = 2 groups (4 requests), tails 2 + 6 = 8 slots; contiguous Max 40 x 2 = 80 a group: 1 group."""
    m = token_pool_metrics(100, 16, (30, 10), (30, 10), 40, 0)
    assert (m["allocated_slots"], m["tail_waste_slots"], m["complete_groups"], m["paged_requests"],
            m["contiguous_requests"]) == (48, 8, 2, 4, 2)


def test_engine_values_are_checked(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_text("models: [llama-3.1-8b]\ngrid:\n  gpu: [h200]\n  engine: [vllm, tgi]\n")
    code, _, err = run(["sweep", grid, "--out", tmp_path / "out"], capsys)
    assert code == 2 and err.count("\n") == 1 and "expected vllm or sglang" in err
    grid.write_text("models: [llama-3.1-8b]\ngrid:\n  gpu: [h200]\n  weights: [16GB]\n  engine: [sglang]\n")
    code, _, err = run(["sweep", grid, "--out", tmp_path / "out"], capsys)
    assert code == 2 and "engine: sglang reads each model's own weight figure" in err
    grid.write_text("models: [llama-3.1-8b]\ngrid:\n  gpu: [h200]\n  engine: [vllm, sglang]\n"
                    "simulate: {workload: sharegpt, requests: 10, rate: 0.5}\n")
    code, _, err = run(["sweep", grid, "--out", tmp_path / "out"], capsys)
    assert code == 2 and err.count("\n") == 1 and "the simulators replay vLLM's block allocator" in err


def test_grid_without_engine_has_no_engine_columns(tmp_path, capsys):
    out = _sweep(tmp_path, capsys, "models: [llama-3.1-8b]\ngrid:\n  gpu: [h200]\n", "plain")
    header = (out / "results.csv").read_text().splitlines()[0]
    assert "engine" not in header
    md = (out / "report.md").read_text()
    assert "Engines compared" not in md
    # an engine's own claim is scoped by engine grids only: not listed (not even as not applicable) here
    assert "sglang-activations-5-8gb" not in md


def test_sglang_activation_rule_of_thumb_is_judged(tmp_path, capsys):
    """The claim sglang-activations-5-8gb (SGLang's Hyperparameter Tuning page: 5-8 GB outside the weights and the
    KV pool is typically enough) is judged on the sglang rows' engine_held_back_bytes: Llama-3.1-70B on 8 x H200
    keeps 17,089,617,072 B per rank (above 8 GB: contradicted); the vllm rows are not its points."""
    out = _sweep(tmp_path, capsys, "models: [llama-3.1-70b]\nclaims: [sglang-activations-5-8gb]\ngrid:\n"
                 "  gpu: [h200]\n  tp: [8]\n  engine: [vllm, sglang]\n", "claim")
    md = (out / "report.md").read_text()
    assert "| 5,000,000,000 to 8,000,000,000 | 17,089,617,072 | **contradicted (0/1)** | above" in md


def test_minimax_400k_claims_scoped_by_an_engine_grid(tmp_path, capsys):
    """The vLLM recipe (MiniMax/MiniMax-M2.md) and MiniMax-M2.5's SGLang deploy guide both say 4 GPUs of 96 GB hold
    a total KV cache of 400K tokens; kvdash judges each on its engine's rows, MiniMax-M2.5 (the recipe's example,
    220 GB of weights as it says) at TP 4 on an H20 (97,871 MiB = 102,625,181,696 B, as nvidia-smi reports it):
    * SGLang 0.5.23: tier 90-160 GiB, reserve 512 + 12,288 + 512 + 2 x 512 + 58 x 8 = 14,800 MiB, fraction
      round((97,871 - 14,800) / 97,871, 3) = round(0.84878, 3) = 0.849; cell max(1, 8 // 4) = 2 KV heads x 256 x 62
      x 2 B = 63,488 B; 491,701 tokens (the SGLang view, checked against SGLang's code in test_conformance_sglang.py);
    * vLLM 0.33: 525,648 tokens with the default reserve auto.
    Both above 350,000-450,000 (400K to the nearest 100K): the claims understate what a real H20 holds, so both are
    contradicted (above).  With the advertised 96 GB read as 96 x 10^9 B (89.4 GiB, the preset before 2026-12-06)
    both held (386,658 and 429,632): the verdict turns on the card's real memory."""
    grid = tmp_path / "minimax.yaml"
    grid.write_text("title: MiniMax\nclaims: [vllm-minimax-m2-400k-4x96g, sglang-minimax-m2-400k-4x96g]\nmodels:\n"
                    f"  - name: minimax-m2.5\n    config: {CONFIGS / 'minimax-m2.5' / 'config.json'}\n"
                    "    weights: 220GB\ngrid:\n  gpu: [h20]\n  tp: [4]\n  engine: [vllm, sglang]\n")
    code, _, err = run(["sweep", grid, "--out", tmp_path / "out", "-q"], capsys)
    assert code in (0, None), err
    rows = _rows(tmp_path / "out" / "results.csv")
    assert [(r["engine"], r["engine_kv_cache_tokens"]) for r in rows] == [("vllm", "525648"), ("sglang", "491701")]
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| 350,000 to 450,000 | 525,648 | **contradicted (0/1)** | above;" in md
    assert "| 350,000 to 450,000 | 491,701 | **contradicted (0/1)** | above;" in md
    # the SGLang guide launches with --mem-fraction-static 0.85: 493,301 tokens, above the range too
    from kvdash.core.model import load_config
    from kvdash.engines import sglang

    arch = load_config(CONFIGS / "minimax-m2.5" / "config.json")
    h20 = 97_871 * 2**20
    p = sglang.plan(arch, 97_871, 4, "bf16", h20 - 2**30, 55_000_000_000, fraction=0.85)
    assert (p.cell_bytes, p.max_total_num_tokens) == (63_488, 493_301)


def test_pure_mamba_sglang_row_is_refused_in_one_line(tmp_path, capsys):
    """Mamba-Codestral-7B (pure Mamba-2) on 8 x H200: SGLang 0.5.23 plans it (its pool is the state slots, a 0 B KV
    cell and context_len 2,048 as max_total_num_tokens), but the sweep's token-pool figures (requests of the
    workload's length in a token pool) do not apply, so the sglang row is left out with one line naming the state
    pool; the vLLM row stays."""
    grid = tmp_path / "mamba.yaml"
    grid.write_text(f"title: Mamba\nmodels:\n  - name: codestral\n    config: "
                    f"{CONFIGS / 'mamba-codestral-7b' / 'config.json'}\n    weights: 14.6GB\n"
                    "grid:\n  gpu: [h200]\n  tp: [8]\n  engine: [vllm, sglang]\n")
    code, _, err = run(["sweep", grid, "--out", tmp_path / "out", "-q"], capsys)
    assert code in (0, None), err
    assert [r["engine"] for r in _rows(tmp_path / "out" / "results.csv")] == ["vllm"]
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| codestral | 8 x h200 | bf16 | SGLang 0.5.23's pool for this attention-free model is its state slots " \
           "(max_mamba_cache_size " in md


def test_best_pick_names_sglangs_cap_in_its_words(tmp_path, capsys):
    """sweeps/engines.yaml: the best chat point is gpt-oss-120b under SGLang, capped at 4,096 running requests; the
    summary names that cap max_running_requests (SGLang's resolve_max_num_reqs), not vLLM's max_num_seqs, and a vLLM
    best point keeps max_num_seqs."""
    out = tmp_path / "engines"
    code, _, err = run(["sweep", Path(__file__).resolve().parent.parent / "sweeps" / "engines.yaml", "--out", out,
                        "-q"], capsys)
    assert code in (0, None), err
    text = (out / "report.md").read_text()
    assert "best is gpt-oss-120b, sglang, 8 x h200 with 512.0 running_requests_per_gpu (4,096 run at once on 8 " \
           "GPUs: 7,388 fit, max_running_requests 4,096)" in text
    assert "best is gpt-oss-120b, vllm, 8 x h200 with 128.0 running_requests_per_gpu (1,024 run at once on 8 GPUs: " \
           "1,625 fit, max_num_seqs 1,024)" in text


def test_sparse_mla_grid_writes_its_report(tmp_path, capsys):
    """A grid of DeepSeek-V3.2 (sparse MLA) at block sizes vLLM takes (64, 128): the report's model tables size a
    token at sparse MLA's block of 64, not the default 16 that vLLM refuses for it (the sweep stopped at
    "--block-size: 16 is not allowed" after every point was computed).  One rank: 61 layers x (576 x 2 B + 132 B of
    indexer keys) = 78,324 B per token; SGLang's page is 64 whatever the grid's block size."""
    grid = tmp_path / "dsa.yaml"
    grid.write_text(f"title: DSA\nmodels:\n  - name: dsa\n    config: {CONFIGS / 'deepseek-v3.2' / 'config.json'}\n"
                    "    weights: 690GB\ngrid:\n  gpu: [h200]\n  tp: [8]\n  block_size: [64, 128]\n"
                    "  engine: [vllm, sglang]\n")
    code, _, err = run(["sweep", grid, "--out", tmp_path / "out", "-q"], capsys)
    assert code in (0, None), err
    rows = _rows(tmp_path / "out" / "results.csv")
    assert [(r["engine"], r["block_size"]) for r in rows] == [("vllm", "64"), ("sglang", "64"), ("vllm", "128"),
                                                               ("sglang", "64")]
    assert "78,324" in (tmp_path / "out" / "report.md").read_text()


def test_a_grid_every_point_of_which_sglang_refuses_is_one_line(tmp_path, capsys):
    """Review finding 17: a grid with ``engine: [sglang]`` whose every point SGLang refuses (LFM2-8B-A1B at page 16:
    ``Lfm2MoeForCausalLM`` has no mamba extra buffer, so no_buffer, which takes only page_size=1) wrote an empty
    report, "0 points (no reserve: declared KV budgets)", exit 0, and SGLang's reason nowhere.  Now one line naming
    grid.engine and SGLang's own reason, exit 2, and no output folder."""
    grid = tmp_path / "lfm2.yaml"
    grid.write_text(f"title: LFM2-MoE\nmodels:\n  - name: lfm2-moe\n    config: "
                    f"{CONFIGS / 'lfm2-8b-a1b' / 'config.json'}\n    weights: 16.7GB\n"
                    "grid:\n  gpu: [h200]\n  block_size: [16]\n  engine: [sglang]\n")
    code, _, err = run(["sweep", grid, "--out", tmp_path / "out", "-q"], capsys)
    assert 2 == code and 1 == err.count("\n")
    assert "grid.engine" in err and "no_buffer only supports page_size=1" in err
    assert not (tmp_path / "out").exists()


def test_a_refused_point_with_a_declared_budget_names_no_gpu(tmp_path, capsys):
    """A helper's README audit: a point with a declared budget (no GPU) was named "... TP 1 PP 1 on None" in the
    refusal of a grid SGLang's rules refuse whole (its pool is derived from a GPU)."""
    grid = tmp_path / "sg.yaml"
    grid.write_text("models: [llama-3.1-8b]\nworkloads:\n  w: {length: 2048}\ndefaults: {budget: 40GiB}\n"
                    "grid:\n  engine: [sglang]\n")
    code, _, err = run(["sweep", grid, "--out", tmp_path / "out", "-q"], capsys)
    assert 2 == code and "e.g. llama-3.1-8b bf16 TP 1 PP 1: SGLang's pool is derived from a GPU" in err
    assert "None" not in err

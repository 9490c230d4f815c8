"""vLLM 0.33.0's rules for what the engine runs (issue 22 item 1, issue 23 item 2), each pinned to a value worked
by hand from the vLLM file and function it follows (paths under ``vllm/`` of the v0.33.0 release):

* A. a Mamba-2 layer in align mode holds 3 blocks per request (``MambaMixer2.get_kv_cache_spec`` in
  ``model_executor/layers/mamba/mamba_mixer2.py``; ``MambaSpec.max_memory_usage_bytes`` in
  ``v1/kv_cache_interface.py``); Mamba-1 keeps 2, prefix caching off 1;
* B. sliding-window and chunked-local layers are sized for ``max_in_flight_tokens`` = ``max_concurrent_batches``
  x ``max_num_batched_tokens`` (``config/vllm.py``), 2 batches under async scheduling;
* C. ``--block-size auto`` per KV dtype and GPU generation (``platforms/cuda.py``; more in test_calc_rules.py);
* D. a ``max_model_len`` above the derived limit is refused (``config/model.py``, ``_get_and_verify_max_len``);
* the scheduler caps ``vllm serve`` picks per GPU (``engine/arg_utils.py``, ``EngineArgs.get_batch_defaults`` and
  ``_set_default_max_num_seqs_and_batched_tokens_args``), one test per GPU tier of kvdash's presets.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvdash.answer.budget import BudgetSpec
from kvdash.answer.calc import CalcInput, calculate
from kvdash.core.model import load_config, load_preset
from kvdash.engines import vllm
from kvdash.engines.vllm_reserve import auto_reserve
from kvdash.errors import InputError
from kvdash.sweep.evaluate import expand
from kvdash.sweep.gridfile import parse_grid
from kvdash.units import GiB
from tests.cli_run import run

CONFIGS = Path(__file__).resolve().parent / "data" / "configs"


def config(name: str):
    return load_config(CONFIGS / name / "config.json")


def view(arch, length: int, **kw) -> dict:
    """vLLM's start-up figures at max_model_len ``length`` in a declared 12 GiB budget (tp 1, bf16)."""
    kw.setdefault("budget", BudgetSpec(bytes=12 * GiB))
    return calculate(CalcInput(arch=arch, used=1, max_reserved=min(length, arch.max_context), max_model_len=length,
                               **kw))


# --- A. the prefill-checkpoint block of Mamba-2 layers ----------------------------------------------------------

class TestMamba2CheckpointBlock:
    def test_nemotron_3_nano_align_mode_holds_three_blocks_per_state_group(self):
        """Nemotron-3-Nano-30B-A3B (6 attention + 23 Mamba-2 layers), tp 1, bf16, block 16, 12 GiB, max_model_len
        2,048: the block is aligned to 2,096 and the pool holds 1,000 blocks; groups of 6 layers: 1 full group, 4
        state groups.  A request at 2,048 tokens: cdiv(2,048, 2,096) = 1 full block + 4 x 3 state blocks
        (page x (2 + 0 speculative + 1 checkpoint)) = 13, so 1,000 / 13 = 76.92x; with the old 2 blocks it was
        1 + 8 = 9 -> 111.11x (what the MambaBase-built harness committed)."""
        r = view(config("nemotron-3-nano-30b-a3b"), 2048)
        v = r["vllm_view"]
        assert (v["block_size"], v["num_gpu_blocks"], v["blocks_per_request_at_max_model_len"]) == (2096, 1000, 13)
        assert v["max_concurrency"] == pytest.approx(1000 / 13)
        assert "76.92x" in v["log_lines"][0]
        assert r["pool"]["state_blocks_per_request"] == 12

    def test_prefix_caching_off_holds_one(self):
        """mamba_cache_mode 'none': page x (1 + 0 speculative) per state group: 1 + 4 x 1 = 5 -> 1,000 / 5 = 200x
        (the block is aligned without the 64-token checkpoint grid either way: Mamba-2 exports none)."""
        v = view(config("nemotron-3-nano-30b-a3b"), 2048, prefix_caching=False)["vllm_view"]
        assert (v["blocks_per_request_at_max_model_len"], v["max_concurrency"]) == (5, 200.0)

    def test_jamba_mamba1_stays_at_two(self):
        """Jamba-1.5-Mini's layers are MambaMixer (Mamba-1), whose spec sets no checkpoint block: 2 blocks per state
        group in align mode, as vLLM's own planner logged for Jamba-v0.1 (vllm-on-cpu notes: 245.75x align)."""
        r = view(config("jamba-1.5-mini"), 2048)
        s = r["pool"]
        assert s["state_blocks_per_request"] == 2 * s["state_groups"]


# --- B. in-flight tokens for sliding-window and chunked-local layers ---------------------------------------------

class TestInFlightTokens:
    def test_mistral_7b_at_32k_two_batches_in_flight(self):
        """Mistral-7B-v0.1: 32 sliding layers (W 4,096) of 8 KV heads x 128, bf16: a block of 16 tokens x 4,096 B x
        32 layers = 2 MiB; 12 GiB holds 6,144 blocks.  No GPU: the H100/H200 defaults, 8,192 batched tokens, async
        scheduling on: T = 2 x 8,192 = 16,384 in flight; cdiv(min(4,095 + 16,384, 32,768), 16) + 1 = 1,280 + 1 =
        1,281 blocks per request -> 6,144 / 1,281 = 4.80x (one batch in flight gave 769 -> 7.99x)."""
        r = view(config("mistral-7b-v0.1"), 32768)
        v = r["vllm_view"]
        assert (v["num_gpu_blocks"], v["max_in_flight_tokens"], v["blocks_per_request_at_max_model_len"]) == \
            (6144, 16384, 1281)
        assert "4.80x" in v["log_lines"][0]

    def test_no_async_scheduling_is_one_batch(self):
        """--no-async-scheduling: max_concurrent_batches 1, T = 8,192: cdiv(12,287, 16) + 1 = 769 -> 7.99x."""
        v = view(config("mistral-7b-v0.1"), 32768, async_scheduling=False)["vllm_view"]
        assert (v["max_in_flight_tokens"], v["blocks_per_request_at_max_model_len"]) == (8192, 769)
        assert "7.99x" in v["log_lines"][0]

    def test_smaller_batches_hold_fewer_blocks(self):
        """--max-batched-tokens 2,048 (an L4's default): T = 4,096; cdiv(8,191, 16) + 1 = 513 -> 6,144 / 513 =
        11.98x."""
        v = view(config("mistral-7b-v0.1"), 32768, max_batched_tokens=2048)["vllm_view"]
        assert v["blocks_per_request_at_max_model_len"] == 513 and "11.98x" in v["log_lines"][0]

    def test_llama4_chunked_local_layers(self):
        """Llama-4-Scout: 36 chunked (C 8,192) + 12 full layers of 8 KV heads x 128, bf16 (4,096 B per token per
        layer); groups of 12: 3 chunked + 1 full; a block 16 x 4,096 x 12 = 786,432 B, 12 GiB holds 16,384.  At
        max_model_len 32,768, T = 16,384: 1 x cdiv(32,768, 16) + 3 x cdiv(min(8,192 + 16,384, 32,768), 16) =
        2,048 + 3 x 1,536 = 6,656 -> 16,384 / 6,656 = 2.46x; one batch (T 8,192): 2,048 + 3 x 1,024 = 5,120 ->
        3.20x."""
        arch = config("llama-4-scout-17b-16e-instruct")
        v = view(arch, 32768)["vllm_view"]
        assert (v["num_gpu_blocks"], v["blocks_per_request_at_max_model_len"]) == (16384, 6656)
        assert "2.46x" in v["log_lines"][0]
        one = view(arch, 32768, async_scheduling=False)["vllm_view"]
        assert one["blocks_per_request_at_max_model_len"] == 5120 and "3.20x" in one["log_lines"][0]

    def test_pipeline_parallel_batches(self):
        """VllmConfig.max_concurrent_batches: async with PP 2 on the default V2 model runner keeps pp + 1 = 3."""
        assert vllm.max_in_flight_tokens(8192, True, 2) == 3 * 8192
        assert vllm.max_in_flight_tokens(8192, False, 2) == 2 * 8192


# --- D. max_model_len above the derived limit --------------------------------------------------------------------

class TestMaxModelLen:
    def test_gemma2_at_32k_is_refused(self):
        """Gemma-2-9B: max_position_embeddings 8,192 (vLLM prints it as the float 8192.0) and no
        model_max_length, so vLLM 0.33 raises "User-specified max_model_len (32768) is greater than the derived
        max_model_len (max_position_embeddings=8192.0 or
        model_max_length=None in model's config.json)"."""
        with pytest.raises(InputError) as exc:
            view(config("gemma-2-9b"), 32768)
        text = str(exc.value)
        assert exc.value.field == "--max-model-len"
        assert ("User-specified max_model_len (32768) is greater than the derived max_model_len "
                "(max_position_embeddings=8192.0 or model_max_length=None in model's config.json)") in text
        assert "--allow-long-max-model-len" in text and "\n" not in text

    def test_the_limit_itself_and_the_override_are_accepted(self):
        """8,192 is not greater than 8,192; 32,768 with allow_long_max_model_len (VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)
        plans like any other length."""
        assert view(config("gemma-2-9b"), 8192)["vllm_view"]["max_model_len"] == 8192
        r = view(config("gemma-2-9b"), 32768, allow_long_max_model_len=True)
        assert r["vllm_view"]["max_model_len"] == 32768

    def test_rope_scaling_factor_raises_the_limit(self):
        """_get_and_verify_max_len multiplies the derived length by RoPE's factor unless the rope type already
        scaled max_position_embeddings: 'linear' x 4 on 4,096 -> 16,384; 'yarn' x 4 -> 4,096 (already scaled);
        the smallest key wins (n_positions 2,048 under max_position_embeddings 4,096), and model_max_length
        replaces it."""
        linear = vllm.derived_max_model_len({"max_position_embeddings": 4096,
                                             "rope_parameters": {"rope_type": "linear", "factor": 4.0}})
        yarn = vllm.derived_max_model_len({"max_position_embeddings": 4096,
                                           "rope_parameters": {"rope_type": "yarn", "factor": 4.0}})
        both = vllm.derived_max_model_len({"max_position_embeddings": 4096, "n_positions": 2048})
        cohere = vllm.derived_max_model_len({"max_position_embeddings": 8192, "model_max_length": 131072})
        assert (linear.value, yarn.value, (both.value, both.key), (cohere.value, cohere.key)) == \
            (16384, 4096, (2048, "n_positions"), (131072, "model_max_length"))

    def test_cli_refusal_is_one_line_exit_2(self, capsys):
        code, out, err = run(["calc", "--config", str(CONFIGS / "phi-3-mini-4k-instruct" / "config.json"),
                              "--max-model-len", "32768", "--brief"], capsys)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
        assert "max_position_embeddings=4096" in err and "VLLM_ALLOW_LONG_MAX_MODEL_LEN" in err
        code, out, _ = run(["calc", "--config", str(CONFIGS / "phi-3-mini-4k-instruct" / "config.json"),
                            "--max-model-len", "32768", "--allow-long-max-model-len", "--brief"], capsys)
        assert code == 0 and "32,768 tokens per request" in out

    def test_grid_refuses_and_its_key_allows(self, tmp_path):
        grid = tmp_path / "g.yaml"
        grid.write_text("models: [gemma-2-9b]\ngrid:\n  max_model_len: [8192, 32768]\n")
        with pytest.raises(InputError) as exc:
            expand(parse_grid(grid))
        assert "greater than the derived max_model_len" in str(exc.value)
        assert "allow_long_max_model_len: true" in str(exc.value)
        grid.write_text("models: [gemma-2-9b]\ngrid:\n  max_model_len: [8192, 32768]\n"
                        "defaults:\n  allow_long_max_model_len: true\n")
        assert expand(parse_grid(grid)).frame.height == 2


# --- the scheduler caps, per GPU tier ----------------------------------------------------------------------------

def engine_of(gpu: str, **kw) -> dict:
    return calculate(CalcInput(arch=load_preset("llama-3.1-8b"), budget=BudgetSpec(gpu=gpu), **kw))["engine"]


class TestSchedulerCaps:
    @pytest.mark.parametrize(("gpu", "seqs", "tokens"), [
        # EngineArgs.get_batch_defaults, OPENAI_API_SERVER: >= 160 GiB 1,024 / 16,384
        ("b200", 1024, 16384),  # 192e9 B = 178.8 GiB
        ("mi300x", 1024, 16384),  # 192e9 B = 178.8 GiB (ROCm runs the same function)
        # >= 70 GiB and "a100" not in the device name: 1,024 / 8,192
        ("h200", 1024, 8192),  # 143,771 MiB = 140.4 GiB
        ("h100-80gb", 1024, 8192),  # 81,559 MiB = 79.6 GiB
        ("h20", 1024, 8192),  # 97,871 MiB = 95.6 GiB (the rules run patched in 96e9 B: same tier)
        # otherwise 256 / 2,048
        ("a100-80gb", 256, 2048),  # 80 GiB, but an A100 (vLLM PR 17885: larger batches slow A100s down)
        ("a100-40gb", 256, 2048),
        ("l40s", 256, 2048),  # 45.0 GiB
        ("l4", 256, 2048),  # 22.5 GiB
        ("a10g", 256, 2048),
        ("rtx-4090", 256, 2048),
    ])
    def test_defaults_per_gpu_tier(self, gpu, seqs, tokens):
        e = engine_of(gpu)
        assert (e["max_num_seqs"], e["max_num_batched_tokens"]) == (seqs, tokens)
        assert "default" in e["max_num_seqs_basis"] and "EngineArgs.get_batch_defaults" in e["caps_basis"]

    def test_no_gpu_assumes_the_h100_row(self):
        """A declared budget names no GPU: the H100/H200 row (the GPUs the conformance harness plans for)."""
        e = calculate(CalcInput(arch=load_preset("llama-3.1-8b")))["engine"]
        assert (e["max_num_seqs"], e["max_num_batched_tokens"]) == (1024, 8192)

    def test_throughput_mode_doubles_both(self):
        """--performance-mode throughput: an L4's 256 / 2,048 -> 512 / 4,096; an H200's -> 2,048 / 16,384."""
        e = engine_of("l4", performance_mode="throughput")
        assert (e["max_num_seqs"], e["max_num_batched_tokens"]) == (512, 4096)
        e = engine_of("h200", performance_mode="throughput")
        assert (e["max_num_seqs"], e["max_num_batched_tokens"]) == (2048, 16384)

    def test_without_chunked_prefill_batched_tokens_reach_max_model_len(self):
        """Chunked prefill off: max(max_model_len 8,192, 2,048) = 8,192 on an L4."""
        e = engine_of("l4", chunked_prefill=False, used=8192, max_reserved=8192)
        assert e["max_num_batched_tokens"] == 8192

    def test_caps_on_each_other(self):
        """max_num_seqs 2 at max_model_len 100: batched tokens min(2 x 100, 2,048) = 200; batched tokens 64 on an
        L4: max_num_seqs min(256, 64) = 64."""
        e = engine_of("l4", max_num_seqs=2, used=100, max_reserved=100)
        assert (e["max_num_seqs"], e["max_num_batched_tokens"]) == (2, 200)
        e = engine_of("l4", max_batched_tokens=64)
        assert (e["max_num_seqs"], e["max_num_batched_tokens"]) == (64, 64)

    def test_refused_where_vllm_refuses(self):
        """SchedulerConfig.verify_max_model_len: both given, batched tokens below max_num_seqs is an error."""
        with pytest.raises(InputError) as exc:
            engine_of("l4", max_batched_tokens=64, max_num_seqs=128)
        assert "must be greater than or equal to max_num_seqs (128)" in str(exc.value)

    def test_the_answer_says_what_runs(self):
        """Llama-3.1-8B on an L40S at 100 tokens: 1,933 fit (13,533 blocks / 7 per request), vLLM runs at most 256
        at once; the summary says both, and the capacity keeps what fits."""
        r = calculate(CalcInput(arch=load_preset("llama-3.1-8b"), budget=BudgetSpec(gpu="l40s"), used=100))
        assert r["capacity"]["paged_requests"] == 1933
        assert (r["engine"]["running_requests"], r["engine"]["limited_by"]) == (256, "max_num_seqs")
        assert "1,933 requests of 100 tokens fit in the KV cache paged" in r["summary"]
        assert "vLLM runs at most 256 at once" in r["summary"]
        assert r["assumptions"][1].startswith("engine caps: vLLM 0.33 runs at most 256 requests at once")

    def test_no_cap_sentence_when_it_does_not_bind(self):
        r = calculate(CalcInput(arch=load_preset("llama-3.1-8b"), budget=BudgetSpec(gpu="l40s"), used=8192,
                                max_reserved=8192))
        assert r["engine"]["limited_by"] == "kv_cache" and "runs at most" not in r["summary"]

    def test_target_above_max_num_seqs(self):
        """--target 300 on an L40S at 100 tokens: 300 fit, but vLLM runs at most 256: --max-num-seqs 300 needed."""
        r = calculate(CalcInput(arch=load_preset("llama-3.1-8b"), budget=BudgetSpec(gpu="l40s"), used=100,
                                target=300))
        assert r["planning"]["runs_at_once"] is False
        assert "need --max-num-seqs 300" in r["summary"]

    def test_cli_options(self, capsys):
        code, out, _ = run(["calc", "-m", "llama-3.1-8b", "--gpu", "l40s", "--length", "100", "--max-num-seqs", "512",
                            "--json"], capsys)
        e = json.loads(out)["engine"]
        assert code == 0 and (e["max_num_seqs"], e["running_requests"]) == (512, 512)
        code, _, err = run(["calc", "--performance-mode", "fast"], capsys)
        assert code == 2 and "--performance-mode" in err


class TestCapsFeedTheReserve:
    def test_cuda_graph_captures_follow_the_caps(self):
        """VllmConfig._set_cudagraph_sizes: 1,024 seqs on an H100: min(2 x 1,024, 512) = 512, sizes 1, 2, 4,
        8..248 by 8 (31), 256..512 by 16 (17) = 51; on a B200 (SM100) the ceiling is 1,024: 3 + 31 + 49 = 83;
        max_num_seqs 4: min(8, 512) = 8 -> 1, 2, 4, 8 plus the decode size 4 = 4 sizes."""
        assert len(vllm.cudagraph_capture_sizes(1024, 8192)) == 51
        assert len(vllm.cudagraph_capture_sizes(1024, 16384, blackwell=True)) == 83
        assert vllm.cudagraph_capture_sizes(4, 8192) == [1, 2, 4, 8]

    def test_reserve_graph_term_scales_with_the_number_of_graphs(self):
        """Llama (26.88 MiB per layer at 51 graphs) x 32 layers = 901,943,132 B; at 83 graphs x 83 / 51:
        26.88 x 2^20 x 32 = 901,943,132.16; x 83 / 51 = 1,467,868,234.7 -> 1,467,868,235 B, flagged extrapolated."""
        base = auto_reserve("llama", 1, 1, layers=32)["terms"][2]
        b200 = auto_reserve("llama", 1, 1, layers=32, graphs=83)["terms"][2]
        assert (base["bytes"], b200["bytes"]) == (901_943_132, 1_467_868_235)
        assert b200["extrapolated"] and "83 capture sizes" in b200["basis"]

    def test_calc_reserve_auto_on_a_b200(self, capsys):
        code, out, _ = run(["calc", "-m", "llama-3.1-8b", "--gpu", "b200", "--reserve", "auto", "--json"], capsys)
        terms = {t["name"]: t["bytes"] for t in json.loads(out)["budget"]["reserve_terms"]}
        assert code == 0 and terms["CUDA-graph memory"] == 1_467_868_235


class TestSweepCaps:
    def test_grid_columns_per_gpu(self, tmp_path):
        """One grid over an L4, an H100 and a B200: max_num_seqs 256 / 1,024 / 1,024, batched tokens 2,048 / 8,192
        / 16,384; running_requests = min(paged_requests, max_num_seqs)."""
        grid = tmp_path / "g.yaml"
        grid.write_text("models: [llama-3.1-8b]\nworkloads:\n  short: {length: 100, max_reserved: 2048}\n"
                        "grid:\n  gpu: [l4, h100-80gb, b200]\n")
        f = expand(parse_grid(grid)).frame
        rows = {r["gpu"]: r for r in f.iter_rows(named=True)}
        assert [(rows[g]["max_num_seqs"], rows[g]["max_batched_tokens"]) for g in ("l4", "h100-80gb", "b200")] == \
            [(256, 2048), (1024, 8192), (1024, 16384)]
        for r in rows.values():
            assert r["running_requests"] == min(r["paged_requests"], r["max_num_seqs"])
        assert rows["h100-80gb"]["running_requests"] == 1024 < rows["h100-80gb"]["paged_requests"]

    def test_grid_keys(self, tmp_path):
        """max_num_seqs: 64 caps what runs; async_scheduling: false sizes Mistral's sliding layers for one batch
        (7.99x at 32,768, as calc --no-async-scheduling)."""
        grid = tmp_path / "g.yaml"
        grid.write_text("models: [mistral-7b-v0.1]\nworkloads:\n  w: {length: 100, max_reserved: 32768}\n"
                        "defaults:\n  max_num_seqs: 64\n  max_model_len: 32768\n"
                        "grid:\n  async_scheduling: [true, false]\n")
        f = expand(parse_grid(grid)).frame
        assert f.get_column("running_requests").to_list() == [64, 64]
        assert [round(x, 2) for x in f.get_column("vllm_max_concurrency").to_list()] == [4.80, 7.99]

    def test_default_objective_ranks_what_runs(self):
        from kvdash.sweep.gridfile import Objective

        assert Objective().metric == "running_requests_per_gpu"


# --- against vLLM 0.33.0's own code (conformance/vllm/rules/*.json, written by the probes beside them) -----------

RULES = Path(__file__).resolve().parent.parent / "conformance" / "vllm" / "rules"


class TestAgainstVllmCode:
    def test_caps_equal_vllm_engine_args(self):
        """EngineArgs._set_default_max_num_seqs_and_batched_tokens_args run by vLLM 0.33.0 with each preset's
        device name and memory: 11 GPUs x 2 performance modes x chunked prefill on/off, every pair equal."""
        from kvdash.core.gpus import gpu_presets

        doc = json.loads((RULES / "caps.json").read_text())
        assert doc["vllm_version"] == "0.33.0" and len(doc["cases"]) == 44
        for case, (seqs, tokens) in doc["cases"].items():
            gpu, perf, chunked, length = case.split("/")
            g = gpu_presets()[gpu]
            caps = vllm.scheduler_caps(g.memory_bytes, g.name, int(length[2:]), performance_mode=perf,
                                       chunked_prefill=chunked == "chunked=True")
            assert (caps.max_num_seqs, caps.max_num_batched_tokens) == (seqs, tokens), case

    def test_window_blocks_equal_vllm_specs(self):
        """SlidingWindowSpec (W 4,096) and ChunkedLocalAttentionSpec (C 8,192) of block 16 under a VllmConfig with
        2,048 / 8,192 / 16,384 batched tokens, async on and off, max_model_len 2,048 and 32,768: kvdash's
        point formula gives vLLM's blocks per request (its max_memory_usage_bytes / page) in all 24 cases."""
        from kvdash.core.point import request_metrics

        doc = json.loads((RULES / "rules.json").read_text())
        assert doc["vllm_version"] == "0.33.0" and len(doc["windows"]) == 24
        for w in doc["windows"]:
            in_flight = vllm.max_in_flight_tokens(w["max_num_batched_tokens"], w["async_scheduling"])
            assert in_flight == w["in_flight"]
            chunked = int(w["kind"] == "chunked")
            x = {"block_size": 16, "layer_token_bytes": 1, "group_size": 1, "full_groups": 0, "window_groups": 1,
                 "window": 8192 if chunked else 4096, "full_token_bytes": 0, "window_token_bytes": 1,
                 "state_bytes": 0, "state_blocks": 0, "chunked": chunked, "k": 1, "max_reserved": 1, "prefix": 0,
                 "max_model_len": w["max_model_len"], "max_batched_tokens": w["max_num_batched_tokens"],
                 "in_flight_tokens": in_flight, "l0": 1, "f0": 1}
            assert request_metrics(x, vllm.RULES.blocks_per_request)["vllm_blocks_per_request"] == w["blocks"], w

    def test_mamba_pages_equal_vllm_spec(self):
        """MambaSpec.max_memory_usage_bytes / page: align 2 (+1 with a checkpoint block), none 1; and
        MambaMixer2.get_kv_cache_spec sets num_prefill_checkpoint_blocks=1 in vLLM 0.33.0's source."""
        doc = json.loads((RULES / "rules.json").read_text())
        pages = {(m["mode"], m["checkpoint_blocks"]): m["pages"] for m in doc["mamba"]}
        assert pages == {("align", 0): 2, ("align", 1): 3, ("none", 0): 1, ("none", 1): 1}
        assert doc["mamba_mixer2_sets_checkpoint"] is True

    def test_derived_max_model_len_and_refusal_equal_vllm(self):
        """ModelConfig's derived max_model_len for each probed config, and kvdash's refusal one token above it
        quotes vLLM's message word for word."""
        doc = json.loads((RULES / "rules.json").read_text())
        assert len(doc["max_len"]) >= 10
        for name, got in doc["max_len"].items():
            arch = config(name)
            if not got["refusal_above"]:  # longrope (Phi-4-mini): vLLM defaults to original_max_position_embeddings
                vllm.check_max_model_len(got["derived"] + 1, arch.derived_max_len, False)  # and accepts more
                assert arch.derived_max_len.value > got["derived"], name
                continue
            assert arch.derived_max_len.value == got["derived"], name
            with pytest.raises(InputError) as exc:
                vllm.check_max_model_len(got["derived"] + 1, arch.derived_max_len, False)
            quoted = got["refusal_above"].split("Value error, ", 1)[1].rstrip(".")
            assert f'"{quoted}"' in str(exc.value), name


class TestCheckpointFormatRules:
    """--weight-format auto's reading of a checkpoint's quantization_config (vllm.checkpoint_formats and its parts):
    the rules a mutation run of 2026-12-07 found unguarded, each worked by hand."""

    @staticmethod
    def attention_ignored(n_listed: int, layers: int) -> bool:
        q = {"ignore": [f"model.layers.{i}.self_attn" for i in range(n_listed)]}
        return "attention" in vllm._ignored_parts(q, layers)

    def test_a_part_is_ignored_when_more_than_half_its_layers_are_listed(self):
        """NVIDIA's NVFP4 releases list self_attn layer by layer: a part counts as left unquantized when its layers
        listed are more than half the model's (an MTP or first dense layer alone is not the model's part).  3 of 6
        is half: not; 4 of 6: yes; 3 of 8 (38 %): not (3 x 2 = 6 < 8)."""
        assert not self.attention_ignored(3, 6)  # 3 x 2 = 6, not more than 6
        assert self.attention_ignored(4, 6)  # 8 > 6
        assert not self.attention_ignored(3, 8)  # 6 < 8 (a rule at a third would say yes: 9 > 8)

    def test_compressed_tensors_nvfp4_and_mixed_groups(self):
        """A compressed-tensors group of 4-bit float weights in groups of 16 is NVFP4; 4-bit floats in groups of 32
        are not a format the time model has; two groups of different schemes are not one format."""
        def group(kind: str, bits: int, size: int) -> dict:
            return {"targets": ["Linear"], "weights": {"type": kind, "num_bits": bits, "group_size": size},
                    "input_activations": {"type": kind, "num_bits": bits}}

        fmt = vllm._compressed_tensors_format
        assert ("nvfp4", "4-bit float weights in groups of 16 (NVFP4)") == fmt({"config_groups": {"g": group("float", 4,
                                                                                                             16)}})
        assert "" == fmt({"config_groups": {"g": group("float", 4, 32)}})[0]
        assert "" == fmt({"config_groups": {"g": group("float", 4, 15)}})[0]
        assert ("", "groups of different schemes") == fmt({"config_groups": {"a": group("float", 4, 16),
                                                                             "b": group("float", 8, 0)}})

    def test_dense_mlp_layers_of_a_moe_model(self):
        """A MoE model has dense MLP layers where a MoE step above 1 skips layers (decoder_sparse_step 2: every
        other layer dense; 1: none), or moe_layer_freq marks a layer dense among num_hidden_layers (2 when the file
        gives no usable count)."""
        dense = vllm._has_dense_mlp_layers
        assert not dense({"num_experts": 8, "decoder_sparse_step": 1})
        assert dense({"num_experts": 8, "decoder_sparse_step": 2})
        assert dense({"num_experts": 8, "interleave_moe_layer_step": 2})
        assert dense({"num_experts": 8, "moe_layer_freq": [0, 1], "num_hidden_layers": 0})  # 0: read as 2 layers
        assert not dense({"num_experts": 8, "moe_layer_freq": [1, 0], "num_hidden_layers": 1})  # layer 0 alone: MoE
        # a count that is not an int is read as 2 layers: layers 0 and 1 are MoE, the third is not looked at
        assert not dense({"num_experts": 8, "moe_layer_freq": [1, 1, 0], "num_hidden_layers": "3"})
        assert dense({"num_experts": 8, "moe_layer_freq": [1, 1, 0], "num_hidden_layers": 3})

    def test_dense_mlps_left_unquantized_but_not_the_shared_experts_is_said(self):
        """One figure times the dense MLPs and the shared experts together: a checkpoint whose ignore list keeps the
        dense MLPs bf16 (a pattern over every layer's mlp.gate_proj) but quantizes the shared experts cannot be told
        as one format: bf16, said so."""
        cfg = {"model_type": "deepseek_v3", "n_routed_experts": 8, "first_k_dense_replace": 1, "n_shared_experts": 1,
               "num_hidden_layers": 2,
               "quantization_config": {"quant_method": "fp8", "ignore": [r"re:.*mlp\.gate_proj"]}}
        dense, experts, attention, words = vllm.checkpoint_formats(cfg)
        assert ("bf16", None, None) == (dense, experts, attention)
        assert words == ("auto: the checkpoint's quantization_config (quant_method fp8) leaves the dense MLPs "
                         "unquantized but not the other, which one dense format cannot say; bf16 is assumed; give "
                         "--weight-format")

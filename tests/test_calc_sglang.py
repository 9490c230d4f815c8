"""``kvdash calc --engine-rules sglang``: SGLang 0.5.23's view beside vLLM's (issue 27 item 1).  The rules
themselves are checked case by case against SGLang's own code in ``test_conformance_sglang.py``; here the face."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_run import run


def test_sglang_view_llama70b_tp8_h200(capsys):
    """Llama-3.1-70B (preset weights 141,200,000,000 B: 17,650,000,000 per rank at TP 8) on an H200 (143,771 MiB):
    free before weights 142,747 MiB = 149,681,078,272 B (the 1 GiB context assumption), after 132,031,078,272 B;
    fraction 0.893 (reserved 15,312 MiB); budget int((132,031,078,272 - 149,681,078,272 x 0.107 in GB floats,
    float32 readings at TP 8) x 2^30) = 116,015,203,024 B; // 40,960 B per token = 2,832,402 tokens; 4,096 running."""
    code, out, _ = run(["calc", "--model", "llama-3.1-70b", "--gpu", "h200", "--tp", "8", "--engine-rules", "sglang",
                        "--json"], capsys)
    assert code in (0, None)
    s = json.loads(out)["sglang_view"]
    assert (s["mem_fraction_static"], s["reserved_mib"], s["cell_bytes"]) == (0.893, 15312.0, 40960)
    assert (s["available_bytes"], s["max_total_num_tokens"], s["max_running_requests"]) == \
        (116_015_203_024, 2_832_402, 4096)
    assert s["log_line"].startswith("max_total_num_tokens=2832402, chunked_prefill_size=8192, max_prefill_tokens=16384,"
                                    " max_running_requests=4096, context_len=131072, available_gpu_mem=")
    assert "SGLang 0.5.23 holds 2,832,402 tokens per rank where vLLM 0.33 holds" in s["comparison"]


def test_sglang_view_text_and_brief(capsys):
    code, out, _ = run(["calc", "--model", "llama-3.1-70b", "--gpu", "h200", "--tp", "8", "--engine-rules", "sglang",
                        "--brief"], capsys)
    assert code in (0, None)
    assert "SGLang 0.5.23 would log: max_total_num_tokens=2832402" in out.replace("\n", " ")
    code, out, _ = run(["calc", "--model", "llama-3.1-70b", "--gpu", "h200", "--tp", "8", "--engine-rules", "sglang"],
                       capsys)
    assert "SGLang 0.5.23 view (--engine-rules sglang):" in out
    assert "(1 - mem_fraction_static 0.893)" in out.replace("\n", " ")


def test_gemma3_differs_by_its_sliding_layers(capsys):
    """Gemma 3 in SGLang keeps every token in all 62 layers; the view says so in its cell line."""
    code, out, _ = run(["calc", "--config", "tests/data/configs/gemma-3-27b-it/config.json", "--gpu", "h200",
                        "--weights", "54GB", "--engine-rules", "sglang", "--json"], capsys)
    s = json.loads(out)["sglang_view"]
    assert s["cell_bytes"] == 16 * 256 * 62 * 2
    assert "not a hybrid-SWA architecture" in s["cell"]


def test_refusals_are_one_line(capsys):
    code, _, err = run(["calc", "--model", "llama-3.1-70b", "--gpu", "h200", "--engine-rules", "tgi"], capsys)
    assert code == 2 and err.count("\n") == 1 and "expected vllm, sglang" in err
    code, _, err = run(["calc", "--model", "llama-3.1-8b", "--budget", "40GiB", "--engine-rules", "sglang"], capsys)
    assert code == 2 and err.count("\n") == 1 and "give --gpu or --gpu-memory" in err
    # a model SGLang 0.5.23 has no class for (model_loader/utils.py resolve_transformers_arch): its own sentence
    code, out, _ = run(["calc", "--config", "tests/data/configs/jamba-1.5-mini/config.json", "--gpu",
                        "h200", "--tp", "4", "--weights", "16GB", "--engine-rules", "sglang", "--brief"], capsys)
    assert code in (0, None)
    assert "SGLang 0.5.23 view: SGLang 0.5.23 refuses: JambaForCausalLM has no SGlang implementation and the " \
           "Transformers implementation is not compatible with SGLang" in out.replace("\n", " ")
    # pure Mamba-2 is planned: its pool is the state slots, and the comparison says why tokens are not compared
    code, out, _ = run(["calc", "--config", "tests/data/configs/mamba-codestral-7b/config.json", "--gpu",
                        "h200", "--tp", "4", "--weights", "16GB", "--engine-rules", "sglang", "--json"], capsys)
    view = json.loads(out)["sglang_view"]
    assert (view["pool"], view["cell_bytes"], view["max_total_num_tokens"]) == ("state_only", 0, 2048)
    assert view["max_mamba_cache_size"] > 0 and "is context_len, not a KV capacity" in view["comparison"]
    # a hybrid whose state pool is mirrored (Qwen3-Next) is planned: no refusal
    code, out, _ = run(["calc", "--config", "tests/data/configs/qwen3-next-80b-a3b-thinking/config.json", "--gpu",
                        "h200", "--tp", "4", "--weights", "160GB", "--engine-rules", "sglang", "--json"], capsys)
    view = json.loads(out)["sglang_view"]
    assert "refused" not in view and view["max_running_requests"] > 0


def test_hybrid_comparison_names_the_cell(capsys):
    """Llama 4 at TP 4: SGLang's 12 full + 0.8 x 36 SWA layers of 1,024 B = 41,779.2 B per token against vLLM's
    48 layers x 1,024 B = 49,152 B: the comparison line says so."""
    code, out, _ = run(["calc", "--config", "tests/data/configs/llama-4-scout-17b-16e-instruct/config.json", "--gpu",
                        "h200", "--tp", "4", "--weights", "218GB", "--engine-rules", "sglang", "--json"], capsys)
    s = json.loads(out)["sglang_view"]
    assert "a token takes 41,779.2 B in SGLang's pool against 49,152 B in vLLM 0.33's" in s["comparison"]


def test_dsa_keys_on_the_model_type():
    """DeepSeek sparse attention (SGLang's configs/model_config.py is_deepseek_dsa: an indexer cache beside the
    latent) is found by the model_type kvdash reads and mirrored: the published DeepSeek-V3.2 (tests/data/configs)
    and GLM-5 (conformance/vllm/external) configs get page 64 (arg_groups/model_overrides/deepseek_v2.py) and 132 B
    of index keys per layer in the cell (GLM-5, 78 layers at TP 8: 78 x (576 x 2 + 132) = 100,152 B, its
    indexer_types all "full"); DeepSeek-V3 (plain MLA) keeps page 1 and 61 x 1,152 = 70,272 B."""
    from pathlib import Path

    from kvdash.core.model import load_config, load_preset
    from kvdash.engines import sglang

    root = Path(__file__).resolve().parents[1]
    v3 = load_preset("deepseek-v3")
    assert sglang.refusal(v3, 8) == "" and not sglang.is_dsa(v3)
    p = sglang.plan(v3, 143_771, 8, "bf16", 142_747 * 2**20, 0)
    assert (p.page_size, p.cell_bytes) == (1, 70_272)
    for folder, model_type, cell in (("tests/data/configs/deepseek-v3.2", "deepseek_v32", 61 * 1284),
                                     ("conformance/vllm/external/glm-5", "glm_moe_dsa", 100_152)):
        arch = load_config(root / folder / "config.json")
        assert arch.model_type == model_type and sglang.is_dsa(arch)
        assert sglang.refusal(arch, 8) == ""
        p = sglang.plan(arch, 143_771, 8, "bf16", 142_747 * 2**20, 0, 16)
        assert (p.page_size, p.cell_bytes) == (64, cell)


def test_vllm_view_is_omitted_under_sglang(capsys):
    """Under --engine-rules sglang the start-up line is SGLang's: calc's vllm_view (vLLM's 'GPU KV cache size'
    lines) is left out with one statement, in JSON, --brief and the tables; with the default rules it stays."""
    base = ["calc", "--model", "llama-3.1-70b", "--gpu", "h200", "--tp", "8"]
    code, out, _ = run([*base, "--engine-rules", "sglang", "--json"], capsys)
    d = json.loads(out)
    assert "vllm_view" not in d and "log_check" not in d
    assert d["vllm_view_omitted"].startswith("--engine-rules sglang: the start-up line shown is SGLang 0.5.23's")
    code, out, _ = run([*base, "--engine-rules", "sglang", "--brief"], capsys)
    flat = out.replace("\n", " ")
    assert "vLLM 0.33 would log" not in flat and "vLLM 0.33's start-up lines are omitted" in flat
    code, out, _ = run([*base, "--engine-rules", "sglang"], capsys)
    assert "What vLLM 0.33 would log" not in out and "Engine start-up line" in out
    code, out, _ = run([*base, "--json"], capsys)
    assert "vllm_view" in json.loads(out) and "vllm_view_omitted" not in json.loads(out)


def test_logged_vllm_figure_is_refused_under_sglang(capsys):
    code, _, err = run(["calc", "--model", "llama-3.1-70b", "--gpu", "h200", "--tp", "8", "--engine-rules", "sglang",
                        "--logged-tokens", "2832402"], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "--logged-tokens: 2832402" in err and "compare SGLang's own start-up line" in err


def test_multimodal_qwen3_vl_on_h100_by_hand():
    """SGLang 0.5.23 on Qwen3-VL-8B, H100 (81,559 MiB), TP 1, bf16, page 16, weights 0 (conformance case):
    * prefill CUDA graphs off (cuda_graph_hook.py: not on the multimodal breakable-graph list), so the reserve is
      512 + 1.5 x 8,192 + 1/8 x 1,024 + 2 x 256 = 13,440 MiB; round((81,559 - 13,440) / 81,559, 3) = 0.835;
    * adjust_mem_fraction_for_vlm: ViT depth 27 x width 1,152 -> 27 x 1,152^2 / (24 x 1,024^2) = 1.423828125,
      0.95 x (1 - 0.1 x 0.423828125) = 0.909736328125; 0.835 x that = 0.759629833984375;
    * budget: 80,535 MiB free (78.6474609375 GB) x 0.7596298... = 59.7429577 GB, less 1 GB (CUDA IPC feature pool
      1,024 MiB, no embedding cache: Qwen3-VL's large-Hopper defaults) = 58.7429577 GB = 63,074,770,542 B;
    * cell 8 KV heads x (128 + 128) x 36 layers x 2 B = 147,456 B; 63,074,770,542 // 147,456 = 427,753 -> page
      16: 427,744 tokens (435,034 without the 1 GiB cut)."""
    from kvdash.core.model import load_config
    from kvdash.engines import sglang

    arch = load_config("tests/data/configs/qwen3-vl-8b-instruct/config.json")
    p = sglang.plan(arch, 81_559, 1, "bf16", 80_535 * 2**20, 0, 16)
    assert p.fraction.reserved_mib == 13_440 and p.fraction.prefill_graphs == 0
    assert p.fraction.value == pytest.approx(0.759629833984375, abs=1e-15)
    assert p.available_bytes == 63_074_770_542
    assert p.cell_bytes == 147_456 and p.max_total_num_tokens == 427_744
    mm = sglang.multimodal(arch, 81_559)
    assert mm is not None and (mm.transport, mm.reservation_mib) == ("cuda_ipc", 1024)
    # below 60 GiB the large-Hopper defaults do not apply: CPU transport, the 100 MiB embedding cache
    small = sglang.multimodal(arch, 48 * 1024)
    assert small is not None and (small.transport, small.reservation_mib) == ("cpu", 100)
    # a given --mem-fraction-static is not adjusted (memory_hook.py adjusts the default only)
    assert sglang.plan(arch, 81_559, 1, "bf16", 80_535 * 2**20, 0, 16, fraction=0.8).fraction.value == 0.8


def test_multimodal_kimi_k25_keeps_prefill_graphs_and_reads_its_class_defaults():
    """Kimi-K2.5 (H100, TP 1): KimiK25VisionConfig ignores config.json's vt_* keys, so the ViT is its defaults,
    27 x 1,152 (factor 0.909736328125 as above); it is on the breakable-graph list, so MLA's 1.5 GiB prefill term
    stays: 512 + 12,288 + 128 + 512 + 1,536 = 14,976 MiB, round(66,583 / 81,559, 3) = 0.816, x 0.909736328125 =
    0.74234484375; the budget loses the 100 MiB embedding cache (CPU transport)."""
    from kvdash.core.model import load_config
    from kvdash.engines import sglang

    arch = load_config("tests/data/configs/kimi-k2.5/config.json")
    p = sglang.plan(arch, 81_559, 1, "bf16", 80_535 * 2**20, 0, 16)
    assert p.fraction.reserved_mib == 14_976
    assert p.fraction.value == pytest.approx(0.74234484375, abs=1e-15)
    rest = 80_535 / 1024 * p.fraction.value - 100 / 1024
    assert p.available_bytes == int(rest * 2**30) == 62_583_988_018


def test_multimodal_unknown_vision_config_class_is_not_mirrored():
    """A multimodal config whose model_type SGLang's vision-config reading kvdash does not know is refused in one
    line rather than guessed (adjust_mem_fraction_for_vlm reads the class's attributes, not the JSON keys)."""
    from kvdash.core.model import from_hf_config
    from kvdash.engines import sglang

    arch = from_hf_config({"model_type": "made_up_vl", "architectures": ["MadeUpVLForConditionalGeneration"],
                           "text_config": {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
                                           "num_attention_heads": 4},
                           "vision_config": {"depth": 32, "hidden_size": 1280}}, "x")
    with pytest.raises(sglang.NotMirrored) as err:
        sglang.plan(arch, 81_559, 1, "bf16", 80_535 * 2**20, 0)
    assert "model_type made_up_vl" in err.value.what and "\n" not in str(err.value)


def test_mamba_pool_qwen3_next_on_h200_by_hand():
    """SGLang 0.5.23's state pool (kv_cache_configurator.py _handle_max_mamba_cache, no --max-mamba-cache-size)
    on Qwen3-Next-80B-A3B, H200 (143,771 MiB), TP 1, bf16, page 1, weights 0 (conformance case):
    * fraction 0.903 (as any GQA model on an H200 at TP 1); rest = 139.4013671875 GB x 0.903 = 125.87943457 GB;
    * per request: 36 gated-delta-net layers x (conv 8,192 x 3 x 2 B = 49,152 + temporal 32 x 128 x 128 x 4 B,
      float32 = 2,097,152) = 77,266,944 B;
    * mamba budget = rest x 0.9 / 1.9 = 64,024,111,742.98 B; K = (budget - 77,266,944) // 77,266,944 = 827;
    * the KV budget: rest - 828 slots x 77,266,944 B = 66.2961826 GB = 71,184,984,047 B; the 12 full-attention
      layers x 2 KV heads x (256 + 256) x 2 B = 24,576 B per token: 2,896,524 tokens;
    * running requests: min(2,048 from the pool, 827 // 5 state slots per request) = 165."""
    from kvdash.core.model import load_config
    from kvdash.engines import sglang

    arch = load_config("tests/data/configs/qwen3-next-80b-a3b-thinking/config.json")
    assert sglang.mamba_cache_per_req(arch, 1) == 77_266_944
    p = sglang.plan(arch, 143_771, 1, "bf16", 142_747 * 2**20, 0)
    assert p.fraction.value == 0.903
    assert p.available_bytes == 71_184_984_047
    assert p.cell_bytes == 24_576 and p.max_total_num_tokens == 2_896_524
    assert p.max_running_requests == 165
    assert any("max_mamba_cache_size 827" in line for line in p.lines)


def test_multimodal_qwen3_5_reads_24_vit_layers():
    """Qwen3.5-27B (H100, TP 1): SGLang's Qwen3_5VisionConfig subclasses its own Qwen3VLVisionConfig, which has
    no num_hidden_layers, so adjust_mem_fraction_for_vlm takes getattr's 24 (not config.json's depth 27): 24 x
    1,152^2 / (24 x 1,024^2) = 1.265625, 0.95 x (1 - 0.0265625) = 0.924765625; Qwen3.5 keeps breakable prefill
    graphs (58 x 8 = 464 MiB): reserve 13,904 MiB, round(67,655 / 81,559, 3) = 0.830; 0.830 x 0.924765625 =
    0.76755546875 (SGLang's figure in the conformance case)."""
    from kvdash.core.model import load_config
    from kvdash.engines import sglang

    arch = load_config("tests/data/configs/qwen3.5-27b/config.json")
    mm = sglang.multimodal(arch, 81_559)
    assert mm is not None and (mm.vit_layers, mm.vit_hidden, mm.prefill_graphs) == (24, 1152, True)
    p = sglang.plan(arch, 81_559, 1, "bf16", 80_535 * 2**20, 0, 16)
    assert p.fraction.reserved_mib == 13_904
    assert p.fraction.value == pytest.approx(0.76755546875, abs=1e-15)


def test_multimodal_gemma_3n_floor_factor_and_every_decoder_layer():
    """Gemma 3n E4B (H100, TP 1): Gemma3nVisionConfig's hidden_size 2,048 and getattr's 24 layers -> 24 x 2,048^2 /
    (24 x 1,024^2) = 4, 1 - 0.1 x 3 = 0.7, clamped to 0.8, x 0.95 = 0.76; prefill graphs off: reserve 13,440 MiB,
    0.835 x 0.76 = 0.6346; the cell counts all 35 decoder layers (SGLang skips no KV-shared layer): 35 x 2 KV heads
    x (256 + 256) x 2 B = 71,680 B (vLLM's 20 KV-holding layers would give 40,960 B); 746,160 tokens at page 16."""
    from kvdash.core.model import load_config
    from kvdash.engines import sglang

    arch = load_config("tests/data/configs/gemma-3n-e4b/config.json")
    p = sglang.plan(arch, 81_559, 1, "bf16", 80_535 * 2**20, 0, 16)
    assert p.fraction.reserved_mib == 13_440
    assert p.fraction.value == pytest.approx(0.835 * 0.76, abs=1e-15)
    assert p.cell_bytes == 71_680 and p.max_total_num_tokens == 746_160


def test_lfm2_has_no_mamba_extra_buffer():
    """LFM2 (short-conv state; not among supports_mamba_cache_extra_buffer's models): SGLang's no_buffer strategy,
    3 state slots per request and page size 1 only (mamba_hook.py validate_mamba_no_buffer). H200, TP 1, bf16:
    10 short-conv layers x 2,048 x 2 x 2 B = 81,920 B per request; 781,543 slots; running requests
    min(4,096, 781,543 // 3 = 260,514) = 4,096 (the conformance case's figures); page 16 is refused in one line."""
    from kvdash.core.model import load_config
    from kvdash.engines import sglang
    from kvdash.errors import InputError

    arch = load_config("tests/data/configs/lfm2-1.2b/config.json")
    assert sglang.mamba_cache_per_req(arch, 1) == 81_920
    p = sglang.plan(arch, 143_771, 1, "bf16", 142_747 * 2**20, 0)
    assert any("max_mamba_cache_size 781,543" in line and "// 3" in line for line in p.lines)
    assert p.max_running_requests == 4096
    with pytest.raises(InputError) as err:
        sglang.plan(arch, 143_771, 1, "bf16", 142_747 * 2**20, 0, 16)
    assert "no_buffer only supports page_size=1" in str(err.value) and "\n" not in str(err.value)


def test_no_kv_memory_is_refused_in_sglangs_terms(capsys):
    """calc --engine-rules sglang, weights that leave no memory: SGLang's own refusal in one line, exit 2, not vLLM's
    gpu_memory_utilization wording.
    * H200 (143,771 MiB), TP 1, Llama-3.1-70B's 141,200,000,000 B: fraction 0.903 (13,904 MiB reserved); free before
      142,747 MiB = 139.4013671875 GB, after 7.8986... GB; 7.8986 - 139.4014 x 0.097 < 0, so
      _profile_available_bytes refuses, the minimum fraction 1 - 7.8986 / 139.4014 = 0.94334 -> "above 0.944";
    * H100 (81,559 MiB): the weights exceed the 84,447,068,160 B free before loading: they do not load."""
    code, _, err = run(["calc", "--model", "llama-3.1-70b", "--gpu", "h200", "--tp", "1", "--engine-rules", "sglang"],
                       capsys)
    assert code == 2 and err.count("\n") == 1
    assert "SGLang 0.5.23 refuses: loaded weights leave no GPU memory for the KV cache under " \
           "mem_fraction_static=0.903; it needs above 0.944" in err
    assert "gpu_memory_utilization" not in err
    code, _, err = run(["calc", "--model", "llama-3.1-70b", "--gpu", "h100-80gb", "--tp", "1", "--engine-rules",
                        "sglang", "--brief"], capsys)
    assert code == 2 and err.count("\n") == 1 and "gpu_memory_utilization" not in err
    assert "SGLang 0.5.23 cannot load the weights: 141,200,000,000 B per rank exceed the 84,447,068,160 B free" in err
    # the default rules keep vLLM's wording
    code, _, err = run(["calc", "--model", "llama-3.1-70b", "--gpu", "h200", "--tp", "1"], capsys)
    assert code == 2 and "gpu_memory_utilization" in err


def test_live_sglang_rules_dsa_page_and_no_class(capsys):
    """live --engine-rules sglang: DeepSeek-V3.2 gets SGLang's page of 64 (arg_groups/model_overrides/deepseek_v2.py)
    and SGLang's pool, the conformance case's 1,693,184 tokens on an H200 at TP 8 (132,617,435,348 B // 78,324 B =
    1,693,190, floored to 64); Falcon is refused in SGLang's own sentence (no model class)."""
    code, out, _ = run(["live", "--demo", "--once", "--json", "--engine-rules", "sglang", "--config",
                        "tests/data/configs/deepseek-v3.2/config.json"], capsys)
    kv = json.loads(out)["kv_pool"]
    assert (kv["block_size"], kv["token_slots"], kv["ranks"][0]["budget_bytes"]) == (64, 1_693_184, 132_617_435_348)
    code, _, err = run(["live", "--demo", "--once", "--engine-rules", "sglang", "--tp", "1", "--config",
                        "tests/data/configs/falcon-7b-instruct/config.json"], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "SGLang 0.5.23 refuses this model: FalconForCausalLM has no SGlang implementation" in err


def test_calc_on_a_config_only_sglang_serves(capsys):
    """Ministral-3-3B-2512 and ERNIE-4.5-0.3B's first release: vLLM 0.33 refuses both, so calc (built on vLLM's
    figures) stops under --engine-rules sglang too, in one line that keeps vLLM's reason and adds SGLang 0.5.23's
    start-up line, the conformance case's own (H100, TP 2, fp8, --page-size 16, weights 0:
    conformance/sglang/expected.json); under vLLM's rules the line is vLLM's alone, as before."""
    cases = json.loads(Path("conformance/sglang/expected.json").read_text())["cases"]
    for config in ("ministral-3-3b-2512", "ernie-4.5-0.3b"):
        want = next(c for c in cases if c["config"] == config and c["gpu"] == "h100" and c["tp"] == 2
                    and c["kv_dtype"] == "fp8" and c["page_size_requested"] == 16)
        args = ["calc", "--config", f"tests/data/configs/{config}/config.json", "--gpu", "h100-80gb", "--tp", "2",
                "--kv-dtype", "fp8", "--block-size", "16", "--weights", "0"]
        code, _, err = run([*args, "--engine-rules", "sglang"], capsys)
        assert code == 2 and err.count("\n") == 1 and "vLLM 0.33" in err
        assert f"SGLang 0.5.23 would start: {want['log_line']}(measured at start-up)" in err
        code, _, vllm_err = run(args, capsys)
        assert code == 2 and vllm_err.count("\n") == 1 and "SGLang 0.5.23 would start" not in vllm_err
        code, _, err = run(["calc", "--config", f"tests/data/configs/{config}/config.json", "--gpu", "h100-80gb",
                            "--engine-rules", "sglang"], capsys)
        assert code == 2 and err.count("\n") == 1 and "needs --weights)" in err  # kvdash has no weight estimate


def test_live_sglang_rules_read_configs_only_sglang_serves(capsys):
    """live --engine-rules sglang reads config.json as SGLang 0.5.23 does: ERNIE-4.5-0.3B's first release and
    Ministral-3-3B-2512 (vLLM 0.33 refuses both) get SGLang's pool, the conformance cases' at TP 8 on an H200
    (the demo's): ERNIE max(1, 2 // 8) = 1 KV head x (128 + 128) x 18 layers x 2 B = 9,216 B, 133,665,202,896 B //
    9,216 = 14,503,602 tokens; Ministral-3 1 x 256 x 26 x 2 = 13,312 B, fraction 0.897 x 0.95 = 0.85215,
    127,445,873,249 B // 13,312 = 9,573,758.  Under vLLM's rules both are refused in one line, as before."""
    for config, slots, budget in (("ernie-4.5-0.3b", 14_503_602, 133_665_202_896),
                                  ("ministral-3-3b-2512", 9_573_758, 127_445_873_249)):
        args = ["live", "--demo", "--once", "--json", "--weights", "0", "--config",
                f"tests/data/configs/{config}/config.json"]
        code, out, _ = run([*args, "--engine-rules", "sglang"], capsys)
        kv = json.loads(out)["kv_pool"]
        assert (kv["block_size"], kv["token_slots"], kv["ranks"][0]["budget_bytes"]) == (1, slots, budget)
        code, _, err = run(args, capsys)
        assert code == 2 and err.count("\n") == 1 and "vLLM 0.33" in err


def test_no_class_without_kv_memory_names_the_engine_rules_not_the_weights(capsys):
    """calc --engine-rules sglang where vLLM's budget leaves no KV memory and SGLang has no class for the model
    (Jamba-1.5-Mini's 104 GB at TP 1 on an H100): the refusal is the model's, so it names --engine-rules sglang, not
    --weights or --gpu as if more memory would help."""
    code, _, err = run(["calc", "--config", "tests/data/configs/jamba-1.5-mini/config.json", "--gpu", "h100-80gb",
                        "--weights", "104GB", "--engine-rules", "sglang"], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "--engine-rules: 'sglang' is not allowed; SGLang 0.5.23 refuses: JambaForCausalLM has no SGlang " \
           "implementation" in err
    assert "--weights" not in err
    code, _, err = run(["calc", "--config", "tests/data/configs/falcon-40b-instruct/config.json", "--gpu",
                        "h100-80gb", "--engine-rules", "sglang"], capsys)
    assert code == 2 and err.count("\n") == 1 and "FalconForCausalLM has no SGlang implementation" in err
    assert "--gpu" not in err


def test_running_requests_line_names_the_mamba_cap(capsys):
    """Mamba-Codestral-7B (pure Mamba-2) on an H100 with 15 GB of weights: 94 state slots, 3 a request, so SGLang runs
    at most 31 requests, below resolve_max_num_reqs' floor of 2,048 and tokens // 2 = 1,024: the max_running_requests
    line names the mamba cap it comes from, not only the clamp it falls outside."""
    code, out, _ = run(["calc", "--config", "tests/data/configs/mamba-codestral-7b/config.json", "--gpu", "h100-80gb",
                        "--weights", "15GB", "--engine-rules", "sglang"], capsys)
    assert code == 0
    text = " ".join(out.split())
    line = ("max_running_requests 31 (resolve_max_num_reqs: int(tokens / context_len 2,048 x 512) within "
            "2,048..4,096, at most tokens // 2; at most max_mamba_cache_size 94 // the state slots a request takes")
    assert line in text
    # a model without a state pool keeps the plain line
    code, out, _ = run(["calc", "--model", "llama-3.1-8b", "--gpu", "h200", "--engine-rules", "sglang"], capsys)
    assert code == 0 and "max_mamba_cache_size" not in out


@pytest.mark.parametrize("args", [["--tp", "0"], ["--tp", "-2"], ["--pp", "0"], ["--tp", "3"]])
def test_bad_parallel_degrees_are_one_line_under_sglang(args, capsys):
    """calc --engine-rules sglang checks --tp / --pp before SGLang's no-KV-memory rule divides the weights by them
    (--tp 0 was a ZeroDivisionError traceback): one line, exit 2, as under vLLM's rules."""
    code, _, err = run(["calc", "--model", "llama-3.1-8b", "--gpu", "h200", "--engine-rules", "sglang", *args], capsys)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert f"{args[0]}: {args[1]} is not allowed" in err


def test_readme_names_every_mirrored_state_pool_architecture():
    """README's SGLang paragraph on the state pool names every architecture kvdash mirrors it for
    (kvdash.engines.sglang.MAMBA_MIRRORED_ARCHS), and LFM2-MoE among the no-buffer ones (// 3)."""
    from pathlib import Path

    from kvdash.engines import sglang

    names = {"NemotronHForCausalLM": "Nemotron-H", "Qwen3NextForCausalLM": "Qwen3-Next",
             "GraniteMoeHybridForCausalLM": "Granite-4.0-H", "FalconH1ForCausalLM": "Falcon-H1",
             "Lfm2ForCausalLM": "LFM2", "Lfm2MoeForCausalLM": "LFM2-MoE",
             "Qwen3_5ForConditionalGeneration": "Qwen3.5", "Qwen3_5MoeForConditionalGeneration": "Qwen3.5",
             "Qwen3_5ForCausalLM": "text-only classes", "Qwen3_5MoeForCausalLM": "text-only classes"}
    assert set(names) == set(sglang.MAMBA_MIRRORED_ARCHS)
    text = " ".join((Path(__file__).resolve().parent.parent / "README.md").read_text().split())
    para = text.split("hybrids SGLang builds a state pool for (", 1)[1].split("_mamba_radix_cache_resolution", 1)[0]
    for arch, name in names.items():
        assert name in para, arch
    assert "// 3 for LFM2 and LFM2-MoE" in para


def test_budget_line_takes_the_mamba_pool_off():
    """The budget line's equation holds for a model with a state pool: Qwen3-Next-80B on an H200 at TP 1 (weights 0,
    test_mamba_pool_qwen3_next_on_h200_by_hand): 71,184,984,047 B = free after weights - free before x (1 - 0.903)
    - 828 state slots x 77,266,944 B; it named the first two terms only (136 GB against 71 GB)."""
    from kvdash.core.model import load_config
    from kvdash.engines import sglang

    arch = load_config("tests/data/configs/qwen3-next-80b-a3b-thinking/config.json")
    p = sglang.plan(arch, 143_771, 1, "bf16", 142_747 * 2**20, 0)
    line = next(x for x in p.lines if x.startswith("budget "))
    assert line.startswith("budget 71,184,984,047 B = free after weights 149,681,078,272 - free before weights "
                           "149,681,078,272 x (1 - 0.903) - 828 state slots x 77,266,944 B (the mamba pool, below)")
    rest = 149_681_078_272 - 149_681_078_272 * (1 - 0.903) - 828 * 77_266_944
    assert rest == pytest.approx(71_184_984_047, rel=1e-8)
    # no state pool: the line is as before
    plain = sglang.plan(load_config("tests/data/configs/qwen3-8b/config.json"), 143_771, 1, "bf16", 142_747 * 2**20, 0)
    assert "state slots" not in next(x for x in plain.lines if x.startswith("budget "))


def test_comparison_counts_held_back_memory_as_vllms_figure_does(capsys):
    """Llama-3.1-70B, 8 x H200: the comparison's held-back figures are counted alike, GPU total - weights per rank -
    the KV budget: vLLM 0.33's 150,754,820,096 - 17,650,000,000 - 114,505,346,781 = 17.32 GiB and SGLang's
    150,754,820,096 - 17,650,000,000 - 116,015,203,024 = 17,089,617,072 B = 15.92 GiB (the sweep's
    engine_held_back_bytes), which is 1 GiB of CUDA context + (1 - 0.893) x the free memory before the weights;
    it said 14.92 GiB, leaving the 1 GiB out of SGLang's side only, so SGLang seemed to keep 2.4 GiB less while
    holding 1.3 % more tokens."""
    code, out, _ = run(["calc", "--model", "llama-3.1-70b", "--gpu", "h200", "--tp", "8", "--engine-rules", "sglang",
                        "--json"], capsys)
    assert code == 0
    v = json.loads(out)["sglang_view"]
    # to SGLang's GB-float arithmetic in _profile_available_bytes (127 B here)
    assert v["held_back_bytes"] == pytest.approx(150_754_820_096 - 17_650_000_000 - 116_015_203_024, abs=1024)
    assert "SGLang keeps 15.92 GiB per rank out of the KV cache (1 GiB of CUDA context and NCCL buffers + (1 - " \
           "mem_fraction_static 0.893) x the free memory before the weights" in v["comparison"]
    assert "vLLM 0.33 keeps 17.32 GiB" in v["comparison"]
    readme = " ".join((Path(__file__).resolve().parent.parent / "README.md").read_text().split())
    assert "SGLang keeps 15.92 GiB per rank out of the KV cache ..., vLLM 0.33 keeps 17.32 GiB" in readme


@pytest.mark.parametrize("tp", [2, 16])
def test_budget_line_holds_for_the_figures_read_across_ranks(tp, capsys):
    """A helper's trial: above one rank the budget line printed the bytes free but SGLang reads each as a MIN over
    the ranks through a float32 (read_free), so the equation as printed missed by 512 B (TP 2) to 623 B (TP 16,
    Llama-3.1-8B on an H200: 148,677,328,272 free after the weights, read as 148,677,328,896).  It now prints the
    figures read, the bytes free beside them, and holds to the byte the budget is floored to."""
    import re

    from tests.cli_run import run

    code, out, _ = run(["calc", "--engine-rules", "sglang", "--gpu", "h200", "--model", "llama-3.1-8b", "--tp", str(tp),
                        "--json"], capsys)
    line = json.loads(out)["sglang_view"]["lines"][1]
    budget, after, before = (int(x.replace(",", "")) for x in re.findall(r"\d[\d,]{4,}", line)[:3])
    frac = float(re.search(r"\(1 - ([\d.]+)\)", line).group(1))
    assert 0 == code and 0 <= after - before * (1 - frac) - budget < 1
    assert f"(each the MIN over {tp} ranks through a float32: " in line

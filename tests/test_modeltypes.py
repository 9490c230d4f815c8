"""Reading published config.json files the way vLLM 0.33 does; refusing what kvdash cannot model;
parameter counts for the weights."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvdash.answer.budget import BudgetSpec
from kvdash.answer.calc import CalcInput, calculate
from kvdash.core import modeltypes
from kvdash.core.model import from_hf_config, load_config
from kvdash.core.state import state_elements, state_page_bytes
from kvdash.engines.vllm import aligned_block_size, group_size_for, rank_shapes
from kvdash.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "data" / "configs"


def config(name: str):
    return load_config(CONFIGS / name / "config.json")


def test_readme_table_is_generated_from_the_code():
    """The model-type table (docs/model-types.md, linked from the README) is exactly what ``python -m
    kvdash.core.modeltypes`` prints."""
    text = (ROOT / "docs" / "model-types.md").read_text(encoding="utf-8")
    start, end = text.index(modeltypes.README_START), text.index(modeltypes.README_END)
    assert modeltypes.readme_table() == text[start:end + len(modeltypes.README_END)]


class TestVllmRules:
    def test_falcon_multi_query(self):
        """vLLM get_total_num_kv_heads: ``multi_query`` without ``new_decoder_architecture`` -> 1 KV head
        (transformers fills num_kv_heads = 71, which vLLM does not read then); head 4,544 / 71 = 64."""
        arch = config("falcon-7b-instruct")
        assert (1, 64, 32) == (arch.kv_heads, arch.head_dim, arch.num_layers)

    def test_falcon_keeps_bf16_kv_under_fp8(self):
        """vLLM 0.33's falcon.py builds the rotary Attention without cache_config (FalconAttention.__init__, lines
        173-180), so --kv-cache-dtype fp8 leaves the cache in bf16: falcon-7b (1 KV head of 64) is 2 x 64 x 2 B =
        256 B per token per layer x 32 layers = 8,192 B per token either way; 12 GiB / (16 x 256 x 32) = 98,304
        blocks, 98,304 / 128 blocks per 2,048-token request = 768.00x (what vLLM's own Falcon layers give;
        fp8 would have been 196,608 blocks and 1,536.00x).  The answer says so in its second assumption line."""
        from kvdash.engines.vllm import stored_kv_dtype

        arch = config("falcon-7b-instruct")
        assert ("bf16", "fp8") == (stored_kv_dtype(arch, "fp8")[0], stored_kv_dtype(config("llama-3.1-8b"), "fp8")[0])
        assert "falcon.py lines 173-180" in stored_kv_dtype(arch, "fp8")[1]
        for kv in ("bf16", "fp8"):
            r = calculate(CalcInput(arch=arch, kv_dtype=kv, block_size=16, max_model_len=2048))
            assert (98_304, "768.00x") == (r["vllm_view"]["num_gpu_blocks"], r["vllm_view"]["log_lines"][0][-7:])
        fp8 = calculate(CalcInput(arch=arch, kv_dtype="fp8", block_size=16, max_model_len=2048))
        assert fp8["assumptions"][2].startswith("KV cache stays bf16, not fp8: vLLM 0.33 does not apply")

    def test_falcon_new_decoder_architecture(self):
        """Falcon-40B: ``num_kv_heads`` 8, head 8,192 / 128 = 64."""
        arch = config("falcon-40b-instruct")
        assert (8, 64, 60) == (arch.kv_heads, arch.head_dim, arch.num_layers)

    @pytest.mark.parametrize("name,reason", [("falcon-40b-refinedweb", "RWForCausalLM"),
                                             ("minicpm-2b-sft-bf16", "trust_remote_code")])
    def test_refused_as_vllm_refuses(self, name, reason):
        """vLLM 0.33 refuses these configs (the original Falcon RefinedWeb format; MiniCPM without its remote
        code), so kvdash does too, saying why."""
        with pytest.raises(InputError, match=reason):
            config(name)

    def test_chatglm(self):
        """ChatGLM3-6B: ``num_layers`` 28, ``multi_query_group_num`` 2 KV heads of 4,096 / 32 = 128
        (= ``kv_channels``), ``seq_length`` 8,192 as the context."""
        arch = config("chatglm3-6b")
        assert (28, 2, 128, 8192) == (arch.num_layers, arch.kv_heads, arch.head_dim, arch.max_context)

    def test_chatglm_other_kv_channels_refused(self):
        cfg = {"model_type": "chatglm", "num_layers": 2, "num_attention_heads": 32, "hidden_size": 4096,
               "multi_query_attention": True, "multi_query_group_num": 2, "kv_channels": 64}
        with pytest.raises(InputError, match="kv_channels"):
            from_hf_config(modeltypes.normalise(cfg, "x"), "x")

    def test_gemma3_defaults_from_transformers(self):
        """Gemma-3-27b-it's text_config names neither the pattern nor the context: transformers' defaults
        (pattern 6, 131,072) -> layers 6, 12, ... 60 full: 10 full + 52 sliding(1024)."""
        arch = config("gemma-3-27b-it")
        assert "10 full + 52 sliding(1024)" == arch.pattern()
        assert 131_072 == arch.max_context

    def test_llama4_chunked(self):
        """Llama 4 Scout: every 4th layer is a NoPE full-attention layer, the rest chunked (8,192)."""
        assert "12 full + 36 chunked(8192)" == config("llama-4-scout-17b-16e-instruct").pattern()

    def test_phi3_sliding_2047(self):
        assert "32 sliding(2047)" == config("phi-3-mini-4k-instruct").pattern()

    def test_qwen2_disabled_window(self):
        """Qwen2.5 ships ``sliding_window`` with ``use_sliding_window: false``: all full."""
        assert "28 full" == config("qwen2.5-7b").pattern()

    def test_mla(self):
        """DeepSeek-V3 / Kimi-K2: one 512 + 64 latent per layer."""
        for name in ("deepseek-v3", "kimi-k2-instruct"):
            arch = config(name)
            assert (arch.use_mla, arch.head_dim, arch.kv_heads) == (True, 576, 1)


class TestNewTypes:
    """Model types of issue 22 item 3, each read from its published config.json (tests/data/configs/SOURCES.md)."""

    @pytest.mark.parametrize("name,model_type,pattern,kv_heads,head_dim,per_token", [
        # Qwen3-VL: vllm/model_executor/models/qwen3_vl.py builds the language model from Qwen3's decoder layers
        # (full attention); text_config: 36 layers x 8 KV heads x (128 + 128) x 2 B = 147,456 B/token
        ("qwen3-vl-8b-instruct", "qwen3_vl_text", "36 full", 8, 128, 147_456),
        # Qwen3-VL-MoE: 48 layers x 4 x 256 x 2 = 98,304
        ("qwen3-vl-30b-a3b-instruct", "qwen3_vl_moe_text", "48 full", 4, 128, 98_304),
        # MiniMax-M2.5: vllm/model_executor/models/minimax_m2.py, MiniMaxM2Attention (no window passed):
        # 62 x 8 x 256 x 2 = 253,952
        ("minimax-m2.5", "minimax_m2", "62 full", 8, 128, 253_952),
        # SmolLM3: served by vLLM's Transformers backend (registry.py _TRANSFORMERS_SUPPORTED_MODELS), which gives
        # every layer an Attention (transformers/base.py, _create_attention_instances), NoPE layers included:
        # 36 x 4 x 256 x 2 = 73,728
        ("smollm3-3b", "smollm3", "36 full", 4, 128, 73_728),
        # Kimi-K2.5: text_config is DeepSeek-V3 MLA: 61 x (512 + 64) x 2 = 70,272
        ("kimi-k2.5", "deepseek_v3", "61 mla", 1, 576, 70_272),
        # GLM-4.7-Flash: vllm/model_executor/models/glm4_moe_lite.py uses DeepseekV2MLAAttention (MLA, ModelConfig
        # use_mla for glm4_moe_lite): 47 x 576 x 2 = 54,144
        ("glm-4.7-flash", "glm4_moe_lite", "47 mla", 1, 576, 54_144),
    ])
    def test_layers_and_bytes_per_token(self, name, model_type, pattern, kv_heads, head_dim, per_token):
        arch = config(name)
        assert (model_type, pattern, kv_heads, head_dim) == (arch.model_type, arch.pattern(), arch.kv_heads,
                                                             arch.head_dim)
        assert per_token == calculate(CalcInput(arch=arch))["bytes_per_token"]

    def test_qwen3_5_moe_gated_delta_net(self):
        """Qwen3.5-35B-A3B: layer_types -> 10 full + 30 gated-delta-net layers (vllm/model_executor/models/qwen3_5.py);
        state (16 key heads, 32 value heads, 128 x 128, conv 4): conv (2 x 16 x 128 + 32 x 128) x 3 = 24,576
        elements in bf16 = 49,152 B, ssm 32 x 128 x 128 = 524,288 in float32 (mamba_ssm_dtype) = 2,097,152 B:
        page 2,146,304 B at tp 1."""
        arch = config("qwen3.5-35b-a3b")
        assert "10 full + 30 linear(gdn)" == arch.pattern()
        layer = arch.state_layers[0]
        assert (2, 4) == (layer.conv_bytes, layer.ssm_bytes)
        assert 2_146_304 == state_page_bytes(layer.state_family, layer.state, 1, layer.conv_bytes, layer.ssm_bytes)


    @pytest.mark.parametrize("model_type,pattern,kv_heads", [
        # vLLM's Transformers backend (olmo3, seed_oss, hunyuan_v1_*: registry.py _TRANSFORMERS_SUPPORTED_MODELS) and
        # exaone4.py give layer i a window exactly when layer_types[i] == "sliding_attention"; transformers' default
        # configs put a full layer every 4th: 8 full + 24 sliding(4096) of 32
        ("olmo3", "8 full + 24 sliding(4096)", 32),
        ("exaone4", "8 full + 24 sliding(4096)", 32),
        ("seed_oss", "64 full", 8),
        ("ernie4_5", "18 full", 2),  # ernie45.py: full attention
        ("ernie4_5_moe", "28 full", 4),  # ernie45_moe.py
        # transformers' Hunyuan configs leave head_dim None (see test_hunyuan_needs_head_dim): given as published
        ("hunyuan_v1_dense", "32 full", 32),
        ("hunyuan_v1_moe", "32 full", 32),
    ])
    def test_types_read_through_transformers_defaults(self, model_type, pattern, kv_heads):
        """Types of vLLM's Transformers backend and ERNIE 4.5, read through transformers' default config of the type
        (each is conformance-checked on a published config too: the README table's last column)."""
        raw = {"model_type": model_type} | ({"head_dim": 128} if model_type in modeltypes.HEAD_DIM_REQUIRED else {})
        arch = from_hf_config(modeltypes.normalise(raw, "x"), model_type)
        assert (pattern, kv_heads, 128) == (arch.pattern(), arch.kv_heads, arch.head_dim)
        assert model_type in modeltypes.SUPPORTED
        assert model_type in modeltypes.CONFORMANCE

    @pytest.mark.parametrize("model_type", ["hunyuan_v1_dense", "hunyuan_v1_moe"])
    def test_hunyuan_needs_head_dim(self, model_type):
        """vLLM 0.33 serves HunYuanDenseV1ForCausalLM / HunYuanMoEV1ForCausalLM through its Transformers backend
        (vllm/model_executor/models/registry.py, _TRANSFORMERS_SUPPORTED_MODELS); transformers' (5.20.2) config class
        leaves head_dim None when config.json has none, and its attention (HunYuanMoEV1Attention.__init__,
        modeling_hunyuan_v1_moe.py) takes getattr(config, "head_dim", hidden_size // heads) = None and stops at
        ``self.head_dim**-0.5`` (TypeError): the harness measured it on Hunyuan-A13B's first-release file (model_type
        written as hunyuan_v1_moe, no head_dim: every build failed). kvdash refuses such a file in one line, with
        the value to add (4,096 / 32 = 128); the same file with ``"head_dim": 128`` is tests/data/configs/hunyuan-a13b,
        which vLLM plans: 32 layers x 8 KV heads x (128 + 128) x 2 B = 131,072 B per token, 12 GiB / (16 x 131,072)
        = 6,144 blocks, 128 per 2,048-token request -> 48.00x."""
        with pytest.raises(InputError, match=r"head_dim: missing; vLLM 0.33 serves HunYuan.*add head_dim to "
                                             r"config.json \(4096 / 32 = 128 for this file\)"):
            modeltypes.normalise({"model_type": model_type, "hidden_size": 4096, "num_attention_heads": 32}, "x")
        raw = json.loads((CONFIGS / "hunyuan-a13b" / "config.json").read_text())
        assert 128 == raw["attention_head_dim"] == raw["head_dim"]  # the one key added to the published file
        with pytest.raises(InputError, match="head_dim: missing"):
            modeltypes.normalise({k: v for k, v in raw.items() if k != "head_dim"}, "x")
        r = calculate(CalcInput(arch=config("hunyuan-a13b"), block_size=16, max_model_len=2048))
        assert 6_144 == r["vllm_view"]["num_gpu_blocks"]
        assert r["vllm_view"]["log_lines"][0].endswith("48.00x")

    def test_gemma3n_shared_layers_hold_no_cache(self):
        """Gemma 3n (vllm/model_executor/models/gemma3n.py, Gemma3nAttention): with 35 layers and
        num_kv_shared_layers 15, layers 20..34 read the KV of layer 18 (sliding) or 19 (full) and hold none, so
        the pool has the first 20: transformers' default pattern (4 sliding, 1 full) gives 16 sliding(512) + 4
        full, each 2 KV heads x (256 + 256) x 2 B = 2,048 B per token: 40,960 B/token."""
        cfg = modeltypes.normalise({"model_type": "gemma3n_text", "num_hidden_layers": 35, "num_kv_shared_layers": 15},
                                   "x")
        arch = from_hf_config(cfg, "g3n")
        assert ("4 full + 16 sliding(512)", 20, 35) == (arch.pattern(), arch.num_layers, arch.decoder_layers)
        assert 40_960 == calculate(CalcInput(arch=arch))["bytes_per_token"]

    @pytest.mark.parametrize("name", ["gemma-3n-e4b", "gemma-3n-e4b-text"])
    def test_gemma3n_e4b_config_vllm_planned(self, name):
        """The gemma-3n-e4b configs (transformers' Gemma3nConfig / Gemma3nTextConfig defaults, google/gemma-3n-E4B's):
        35 layers, the last 15 share KV (Gemma3nAttention, gemma3n.py), so 20 hold it: 4 full + 16 sliding(512),
        2 KV heads x (256 + 256) x 2 B = 2,048 B per token each.  vLLM 0.33.0 (conformance/vllm/expected.json),
        tp 1, bf16, block 16, 12 GiB, 2,048 tokens: a page per layer is 16 x 2,048 = 32,768 B; the 20 layers form
        5 groups of 4 (1 full, 4 sliding), a block is 4 x 32,768 = 131,072 B, 12,884,901,888 // 131,072 = 98,304."""
        arch = config(name)
        # a gemma3n config is read through its text_config (model_type gemma3n_text)
        assert ("gemma3n_text", "4 full + 16 sliding(512)", 20, 35) == (
            arch.model_type, arch.pattern(), arch.num_layers, arch.decoder_layers)
        expected = json.loads((ROOT / "conformance" / "vllm" / "expected.json").read_text())
        case = next(c for c in expected["cases"] if c["config"] == name and c["tp"] == 1
                    and c["kv_dtype"] == "bf16" and c["block_size_requested"] == 16 and c["max_model_len"] == 2048
                    and c["budget_bytes"] == 12 * 2**30)
        assert ({"full": 4, "sliding": 16}, {"full": 32_768, "sliding": 32_768}, [4] * 5, 98_304) == (
            case["layer_kinds"], case["page_bytes"], case["group_sizes"], case["num_gpu_blocks"])

    def test_gemma3n_sharing_needs_a_target(self):
        """vLLM shares only when the target index first - 2 (sliding) or first - 1 (full) is >= 0: with one
        unshared layer (full), a shared sliding layer keeps its own cache, a shared full one does not."""
        cfg = modeltypes.normalise({"model_type": "gemma3n_text", "num_hidden_layers": 3, "num_kv_shared_layers": 2,
                                    "layer_types": ["full_attention", "sliding_attention", "full_attention"]}, "x")
        assert "1 full + 1 sliding(512)" == from_hf_config(cfg, "g3n").pattern()


    def test_zamba2_mamba_everywhere_attention_in_hybrid_layers(self):
        """Zamba2 (vllm/model_executor/models/zamba2.py) with transformers' default Zamba2Config (54 layers, 9
        "hybrid"): a Mamba-2 mixer in every layer (intermediate 2 x 2,560 = 5,120, 8 heads of 640, 1 group, d_state
        64, d_conv 4: conv 3 x (5,120 + 2 x 64) = 15,744 + ssm 8 x 640 x 64 = 327,680 elements = 686,848 B) and
        an Attention of its own in each hybrid layer (32 heads of attention_head_dim 160, as many KV heads:
        32 x 320 x 2 = 20,480 B per token).  Block 16 x ceil(686,848 / (16 x 20,480)) = 48; groups of 9: 1 full
        + 6 mamba; 12 GiB / (48 x 20,480 x 9) = 1,456 blocks; at 2,048 tokens 43 + 6 x 3 (align mode, Mamba-2
        checkpoint block) = 61 -> 23.87x, what vLLM 0.33's own Zamba2 layers gave (measured, README)."""
        arch = from_hf_config(modeltypes.normalise({"model_type": "zamba2"}, "x"), "zamba2")
        assert ("9 full + 54 mamba(mamba2)", 32, 160) == (arch.pattern(), arch.kv_heads, arch.head_dim)
        layer = arch.state_layers[0]
        assert 686_848 == state_page_bytes(layer.state_family, layer.state, 1, 2, 2)
        r = calculate(CalcInput(arch=arch, block_size=16, max_model_len=2048))
        assert (48, 1_456) == (r["pool"]["block_size"], r["vllm_view"]["num_gpu_blocks"])
        assert r["vllm_view"]["log_lines"][0].endswith("23.87x")


    def test_lfm2_short_conv_layers(self):
        """LFM2-1.2B (vllm/model_executor/models/lfm2.py: layer_types[i] == "full_attention" is attention, any
        other a ShortConv layer, vllm/model_executor/layers/mamba/short_conv.py): 6 full layers of 8 KV heads x
        (64 + 64) x 2 B = 2,048 B per token, 10 short-conv layers of one conv state 2,048 x (3 - 1) x 2 B = 8,192 B
        (no temporal state).  A 16-token page (32,768 B) holds the state, so the block stays 16; groups of 6
        (group_size_for([6, 10])): 1 full + 2 state = 3; 12 GiB / (16 x 2,048 x 6) = 65,536 blocks; a 2,048-token
        request takes 128 + 2 x 2 (align mode, no prefill checkpoint) = 132 -> 496.48x (1 block per state group
        with prefix caching off: 130 -> 504.12x)."""
        _check_short_conv(config("lfm2-1.2b"), "6 full + 10 short_conv(short_conv)", 3, "496.48x", "504.12x")

    def test_lfm2_moe_short_conv_width_is_hidden_size(self):
        """LFM2-8B-A1B (``lfm2_moe``): vLLM 0.33's lfm2_moe.py builds each short-conv layer as
        ``ShortConv(dim=config.hidden_size)`` (Lfm2MoeShortConvDecoderLayer) and sizes its state with
        ``intermediate_size=hf_config.hidden_size`` (Lfm2MoeForCausalLM.get_mamba_state_shape_from_config):
        transformers' Lfm2MoeConfig has no ``conv_dim`` (lfm2.py's dense LFM2 reads ``conv_dim``).  Here: 6 full
        layers of 8 KV heads x (64 + 64) x 2 B = 2,048 B per token, 18 short-conv layers of one state 2,048 x
        (3 - 1) x 2 B = 8,192 B.  A 16-token page (32,768 B) holds it, so the block stays 16; groups of 6: 1 full +
        3 state = 4; 12 GiB / (16 x 2,048 x 6) = 65,536 blocks; a 2,048-token request takes 128 + 3 x 2 (align
        mode) = 134 -> 489.07x, 128 + 3 = 131 -> 500.27x with prefix caching off (what vLLM's own layers give,
        conformance/vllm/expected.json ``lfm2-8b-a1b``)."""
        arch = config("lfm2-8b-a1b")
        assert "conv_dim" not in json.loads((CONFIGS / "lfm2-8b-a1b" / "config.json").read_text())
        assert (2_048, 3) == arch.state_layers[0].state
        _check_short_conv(arch, "6 full + 18 short_conv(short_conv)", 4, "489.07x", "500.27x")

    def test_mamba_attention_free(self):
        """Mamba-130m (vllm/model_executor/models/mamba.py: a Mamba-1 mixer in each of 24 layers, no attention):
        a state page of conv 1,536 x (4 - 1) + ssm 1,536 x 16 = 29,184 elements x 2 B = 58,368 B; one group of
        all 24 layers, a block one page per layer: 12 GiB / (58,368 x 24) = 9,198 blocks; a request of any length
        holds 2 of them in align mode -> 4,599.00x, 1 without prefix caching -> 9,198.00x (vLLM's own layers
        give both, conformance/vllm/expected.json)."""
        arch = config("mamba-130m")
        assert ("24 mamba(mamba1)", 0, False) == (arch.pattern(), arch.num_attention_heads, arch.is_hybrid)
        r = calculate(CalcInput(arch=arch, block_size=16, max_model_len=2048))
        assert (9_198, 1, 58_368) == (r["vllm_view"]["num_gpu_blocks"], r["vllm_view"]["kv_cache_groups"],
                                      r["pool"]["state_page_bytes"])
        assert r["vllm_view"]["log_lines"][0].endswith("4599.00x")
        assert "blocks of one 58,368-byte state page per layer (attention-free" in r["summary"]
        off = calculate(CalcInput(arch=arch, block_size=16, max_model_len=2048, prefix_caching=False))
        assert off["vllm_view"]["log_lines"][0].endswith("9198.00x")


class TestConformanceMap:
    """The README's "conformance-checked on" column (modeltypes.CONFORMANCE) names real configs that check each type."""

    @staticmethod
    def folder_types() -> dict[str, str]:
        return {p.name: json.loads((p / "config.json").read_text())["model_type"]
                for p in CONFIGS.iterdir() if (p / "config.json").is_file()}

    def test_every_named_config_exists_with_its_type_and_vllm_plans_it(self):
        expected = json.loads((ROOT / "conformance" / "vllm" / "expected.json").read_text())
        planned = {c["config"] for c in expected["cases"] if c["status"] == "ok"}
        types = self.folder_types()
        for model_type, names in modeltypes.CONFORMANCE.items():
            assert model_type in modeltypes.SUPPORTED
            assert names, model_type
            for name in names:
                assert types.get(name) == model_type, (model_type, name)
                assert name in planned, f"{name}: vLLM 0.33 plans no case of it in expected.json"

    def test_every_supported_config_is_listed(self):
        """A config of a supported type that vLLM plans is listed for its type (a type loses its row only by
        losing every config)."""
        expected = json.loads((ROOT / "conformance" / "vllm" / "expected.json").read_text())
        planned = {c["config"] for c in expected["cases"] if c["status"] == "ok"}
        for name, model_type in self.folder_types().items():
            if model_type in modeltypes.SUPPORTED and name in planned:
                assert name in modeltypes.CONFORMANCE.get(model_type, ()), (name, model_type)


class TestRefusals:
    def test_served_by_vllm_but_not_modelled(self, tmp_path, monkeypatch):
        """A type vLLM 0.33 serves but kvdash cannot model yet: one line with why (the vLLM file) and what to pass.
        Every type of the table is modelled now (issue 22), so the rule is checked on an entry put in for the test
        (Bailing's linear-attention MoE: vllm/model_executor/models/bailing_moe_linear.py keeps a state kvdash has no
        rule for)."""
        model_type = "bailing_moe_linear"
        monkeypatch.setitem(modeltypes.NOT_MODELLED, model_type, "its linear-attention state "
                            "(vllm/model_executor/models/bailing_moe_linear.py) is not mirrored")
        path = tmp_path / "config.json"
        path.write_text(json.dumps({"model_type": model_type, "num_hidden_layers": 2}))
        with pytest.raises(InputError) as err:
            load_config(path)
        text = str(err.value)
        assert f"'{model_type}'" in text and "vLLM 0.33 serves it" in text and "vllm/" in text
        assert "--layers/--kv-heads/--head-dim" in text and "\n" not in text
        assert model_type not in modeltypes.SUPPORTED

    @pytest.mark.parametrize("model_type", ["rwkv", "bert", "yi"])
    def test_unknown_model_type(self, tmp_path, model_type):
        """A model type kvdash cannot model exactly is one line naming it and what is supported."""
        path = tmp_path / "config.json"
        path.write_text(json.dumps({"model_type": model_type, "num_hidden_layers": 2, "num_attention_heads": 4,
                                    "hidden_size": 64}))
        with pytest.raises(InputError) as err:
            load_config(path)
        text = str(err.value)
        assert f"'{model_type}'" in text and "supported: llama" in text and "\n" not in text
        assert text.endswith("give the shape with --layers/--kv-heads/--head-dim instead (a uniform model)")

    def test_missing_model_type(self, tmp_path):
        path = tmp_path / "config.json"
        path.write_text(json.dumps({"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64}))
        with pytest.raises(InputError, match="model_type"):
            load_config(path)

    def test_cli_one_line_exit_2(self, tmp_path):
        path = tmp_path / "config.json"
        path.write_text(json.dumps({"model_type": "rwkv", "num_hidden_layers": 2}))
        proc = subprocess.run([sys.executable, "-m", "kvdash.cli", "calc", "--config", str(path)],
                              capture_output=True, text=True)
        assert 2 == proc.returncode
        assert 1 == len(proc.stderr.strip().splitlines()) and "'rwkv'" in proc.stderr
        assert "cannot model this type" in proc.stderr and "--layers/--kv-heads/--head-dim" in proc.stderr

    def test_state_layer_without_a_hybrid_type(self):
        cfg = {"num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 64,
               "layer_types": ["full_attention", "linear_attention"]}
        with pytest.raises(InputError, match="state_bytes_per_layer"):
            from_hf_config(cfg, "x")

    def test_transformers_refusal_is_one_line(self):
        """Falcon-H1-0.5B: transformers 5.20 (and so vLLM 0.33) rejects mamba_n_heads 24 for
        mamba_expand x hidden_size = 2,048; kvdash says so in one line."""
        with pytest.raises(InputError) as err:
            config("falcon-h1-0.5b")
        assert "mamba_n_heads must divide" in str(err.value) and "\n" not in str(err.value)


class TestStateShapes:
    def test_jamba_state(self):
        """Mamba-1 (Jamba): intermediate 2 x 4,096 = 8,192; conv 8,192 x 3, ssm 8,192 x 16 -> 311,296 B bf16."""
        arch = config("jamba-1.5-mini")
        layer = arch.state_layers[0]
        assert 311_296 == state_page_bytes(layer.state_family, layer.state, 1, 2, 2)
        assert (12_288, 65_536) == state_elements(layer.state_family, layer.state, 2)

    def test_nemotron_float32_ssm(self):
        """Nemotron-H keeps the SSM state in ``mamba_ssm_cache_dtype`` (float32 in transformers' default)."""
        layer = config("nemotron-h-56b-base-8k").state_layers[0]
        assert (2, 4) == (layer.conv_bytes, layer.ssm_bytes)

    def test_mamba2_groups_replicated_below_tp(self):
        """Mamba-2 with 1 group at tp 2: the group is replicated, conv width (I + 2 x 2 x d_state) / 2."""
        conv, ssm = state_elements("mamba2", (4096, 1, 64, 64, 128, 4), 2)
        assert (3 * (4096 + 2 * 2 * 128) // 2, 32 * 64 * 128) == (conv, ssm)

    def test_tp_must_divide_state(self):
        with pytest.raises(InputError, match="--tp"):
            state_elements("gdn", (16, 32, 128, 128, 4), 3)

    @given(st.integers(1, 64), st.sampled_from([16, 32, 64]), st.integers(1, 10**7))
    def test_aligned_page_holds_the_state(self, heads, requested, page):
        """Property: the aligned block is a multiple of max(16, requested), at least the request, and its
        attention page holds the state page; one alignment step less would not (when raised)."""
        from kvdash.core.model import Architecture, Layer

        attn = Layer("full", kv_heads=heads, head_dim=128, head_dim_v=128)
        arch = Architecture("x", (attn, Layer("mamba", state_family="fixed", state=(page,))), heads, 4096)
        block, state = aligned_block_size(arch, "bf16", "tensor", 1, requested)
        token = heads * 256 * 2
        align = max(16, requested)
        assert block >= requested and block * token >= state == page
        if block > requested:
            assert block % align == 0 and (block - align) * token < page


class TestGrouping:
    def test_unequal_counts_rule(self):
        """vLLM 0.33: 12 sliding + 13 full -> groups of 13 (13 < 1.5 x 12), not 12."""
        assert 13 == group_size_for([12, 13])
        cfg = {"num_hidden_layers": 25, "num_attention_heads": 8, "head_dim": 64, "sliding_window": 128,
               "layer_types": ["sliding_attention"] * 12 + ["full_attention"] * 13}
        shape = rank_shapes(from_hf_config(cfg, "x"))[0]
        assert (13, 1, 1, 1) == (shape.group_size, shape.full_groups, shape.window_groups, shape.padded_layers)

    @given(st.lists(st.integers(1, 200), min_size=1, max_size=4))
    def test_group_size_property(self, counts):
        """Property: the group size is the smallest count, or the largest when max < 1.5 x min."""
        size = group_size_for(counts)
        assert size == (max(counts) if max(counts) < 1.5 * min(counts) else min(counts))


class TestBlockSizeAuto:
    def test_mla_bf16_16_fp8_64(self):
        """Hopper (no GPU preset: Hopper's choice): vllm/platforms/cuda.py's SM90 MLA order starts with
        FLASH_ATTN_MLA, which takes bf16/fp16 KV in multiples of 16 -> 16; an fp8 KV cache skips it for FlashMLA,
        64-token blocks only -> 64 (vllm/v1/attention/backends/mla/flashattn_mla.py, flashmla.py)."""
        r = calculate(CalcInput(arch=config("deepseek-v2-lite"), block_size="auto"))
        assert 16 == r["pool"]["block_size"] and "FLASH_ATTN_MLA" in r["vllm_view"]["block_size_reason"]
        r = calculate(CalcInput(arch=config("deepseek-v2-lite"), block_size="auto", kv_dtype="fp8"))
        assert 64 == r["pool"]["block_size"] and "FlashMLA" in r["vllm_view"]["block_size_reason"]

    def test_dense_16(self):
        r = calculate(CalcInput(arch=config("llama-3.1-8b"), block_size="auto"))
        assert 16 == r["pool"]["block_size"]

    def test_hybrid_aligned(self):
        """Qwen3-Next: state page 1,097,728 B, 2,048 B per attention token.  Prefix caching on (align mode,
        checkpoints every 64 tokens): 64 x ceil(1,097,728 / (64 x 2,048)) = 576, and 3 blocks per request per
        state group; off: 16 x ceil(1,097,728 / 32,768) = 544, 1 block."""
        arch = config("qwen3-next-80b-a3b-thinking")
        on = calculate(CalcInput(arch=arch, block_size="auto"))
        assert 576 == on["pool"]["block_size"] and "raised from 16 to 576" in on["vllm_view"]["block_size_reason"]
        assert (3 * 3, "align") == (on["pool"]["state_blocks_per_request"], on["vllm_view"]["mamba_cache_mode"])
        off = calculate(CalcInput(arch=arch, block_size="auto", prefix_caching=False))
        assert (544, 3, "none") == (off["pool"]["block_size"], off["pool"]["state_blocks_per_request"],
                                    off["vllm_view"]["mamba_cache_mode"])


class TestWeights:
    # published parameter counts (Hugging Face model cards): Llama-3.1-8B 8.03B, Llama-3.1-70B 70.6B,
    # Mixtral-8x7B 46.7B, Mixtral-8x22B 141B, Qwen2.5-7B 7.61B, Qwen2.5-14B 14.7B, Qwen3-8B 8.2B,
    # Qwen3-32B 32.8B, Qwen3-30B-A3B 30.5B, Qwen3-235B-A22B 235B, Mistral-7B 7.24B, DeepSeek-V2-Lite 15.7B,
    # gemma-2-9b 9.24B, OLMo-2-7B 7.30B
    TOLERANCE = 0.01  # norms and biases are left out of the count; 1 % covers them and the cards' rounding

    @pytest.mark.parametrize("name,published", [
        ("llama-3.1-8b", 8.03e9), ("llama-3.1-70b", 70.6e9), ("mixtral-8x7b-v0.1", 46.7e9),
        ("mixtral-8x22b-v0.1", 141e9), ("qwen2.5-7b", 7.61e9), ("qwen2.5-14b", 14.7e9), ("qwen3-8b", 8.2e9),
        ("qwen3-32b", 32.8e9), ("qwen3-30b-a3b", 30.5e9), ("qwen3-235b-a22b", 235e9), ("mistral-7b-v0.1", 7.24e9),
        ("deepseek-v2-lite", 15.7e9), ("gemma-2-9b", 9.24e9), ("olmo-2-7b", 7.30e9),
    ])
    def test_estimate_matches_published_counts(self, name, published):
        arch = config(name)
        assert arch.weights_known and arch.weight_basis.startswith("estimate:")
        assert abs(arch.weight_bytes / 2 - published) <= self.TOLERANCE * published

    def test_llama_8b_by_hand(self):
        """Llama-3.1-8B: 128,256 x 4,096 x 2 (untied) + 32 x (4,096 x 4,096 x 2 + 4,096 x 1,024 x 2 +
        3 x 4,096 x 14,336) = 8,029,995,008 parameters -> 16,059,990,016 bytes."""
        assert 16_059_990_016 == config("llama-3.1-8b").weight_bytes

    def test_quantized_refused_for_gpu_budget(self):
        """DeepSeek-V3 ships FP8 (quantization_config): no estimate, so a GPU-derived budget asks for weights."""
        arch = config("deepseek-v3")
        assert not arch.weights_known
        with pytest.raises(InputError, match="--weights SIZE or --safetensors-index"):
            calculate(CalcInput(arch=arch, budget=BudgetSpec(gpu="h200"), tp=8))
        r = calculate(CalcInput(arch=arch, budget=BudgetSpec(gpu="h200", weights=671 * 10**9), tp=8))
        assert r["budget"]["weights_bytes"] == 671 * 10**9

    def test_estimate_used_for_gpu_budget(self):
        """Qwen3-32B at tp 2 on an H100: the estimate (65.5 GB) is split over the ranks, never 0."""
        r = calculate(CalcInput(arch=config("qwen3-32b"), budget=BudgetSpec(gpu="h100-80gb"), tp=2))
        assert r["budget"]["weights_per_rank_bytes"] == -(-config("qwen3-32b").weight_bytes // 2) > 0
        assert "estimate" in r["budget"]["weights_basis"] and "0.92" == r["budget"]["utilization"]


def _check_short_conv(arch, pattern: str, groups: int, on: str, off: str) -> None:
    """An LFM2-family config at 12 GiB, block 16, 2,048 tokens: its layer pattern, 8 KV heads of 64, a short-conv
    state page of 2,048 x (3 - 1) x 2 B = 8,192 B, 65,536 blocks in ``groups`` KV-cache groups, and vLLM's
    maximum concurrency with prefix caching on (align mode) and off."""
    assert (pattern, 8, 64) == (arch.pattern(), arch.kv_heads, arch.head_dim)
    assert 8_192 == state_page_bytes("short_conv", arch.state_layers[0].state, 1, 2, 2)
    r = calculate(CalcInput(arch=arch, block_size=16, max_model_len=2048))
    assert (16, 65_536, groups) == (r["pool"]["block_size"], r["vllm_view"]["num_gpu_blocks"],
                                    r["vllm_view"]["kv_cache_groups"])
    assert r["vllm_view"]["log_lines"][0].endswith(on)
    no_prefix = calculate(CalcInput(arch=arch, block_size=16, max_model_len=2048, prefix_caching=False))
    assert no_prefix["vllm_view"]["log_lines"][0].endswith(off)

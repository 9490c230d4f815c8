"""Sparse MLA (DeepSeek-V3.2 ``deepseek_v32``, GLM-5 ``glm_moe_dsa``) as vLLM 0.33.0 plans it.

Rules guarded (vLLM 0.33.0 files; kvdash/core/modeltypes.py and kvdash/engines/vllm.py cite them):

* the indexer key cache: ``DeepseekV32Indexer.__init__`` (``vllm/models/deepseek_v32/attention.py``) gives every
  indexed layer a ``DeepseekV32IndexerCache`` of ``index_head_dim + index_head_dim // 128 x 4`` bytes per token in
  ``torch.uint8``, whatever the KV dtype (``get_kv_cache_spec``, ``vllm/model_executor/models/deepseek_v2.py``);
* one KV-cache group holds the latents and the indexers (``UniformTypeKVCacheSpecs``: a block's page is the sum of
  its layers' pages, ``vllm/v1/kv_cache_interface.py``), so a block costs ``block x (latent + indexer)`` per layer;
* fp8 KV is stored as ``fp8_ds_mla`` (``_canonicalize_sparse_mla_kv_cache_dtype``,
  ``vllm/model_executor/layers/attention/mla_attention.py``: FLASHMLA_SPARSE serves a quantized cache);
* Hopper's sparse MLA backends take multiples of 64 tokens only (``get_supported_kernel_block_sizes``:
  ``MultipleOf(64)``), so ``--block-size`` unset is 64 and 16 or 32 is refused at start-up.

The published DeepSeek-V3.2 config is in ``tests/data/configs/`` (moved from the external set after the audit
measured it; its 128 cases are compared with vLLM's own figures in ``tests/test_conformance.py``); GLM-5's is in the
external set (``conformance/vllm/external/``, ``tests/test_conformance_external.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvdash.answer.budget import BudgetSpec
from kvdash.answer.calc import CalcInput, calculate
from kvdash.core.model import load_config
from kvdash.core.pool import layer_token_bytes
from kvdash.engines.base import Gpu
from kvdash.engines.vllm import RULES, auto_block_size, stored_kv_dtype
from kvdash.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
EXTERNAL = ROOT / "conformance" / "vllm" / "external"
CONFIGS = ROOT / "tests" / "data" / "configs"
EXPECTED = ROOT / "conformance" / "vllm" / "expected.json"
GiB = 2**30


def _arch(name: str):
    own = CONFIGS / name / "config.json"
    return load_config(own if own.is_file() else EXTERNAL / name / "config.json")


def _calc(arch, kv: str = "bf16", block: int | str = "auto", budget: int = 12 * GiB, length: int = 2048):
    return calculate(CalcInput(arch=arch, kv_dtype=kv, block_size=block, budget=BudgetSpec(bytes=budget), tp=1,
                               used=1, max_reserved=length, max_model_len=length, max_batched_tokens=8192))


@pytest.mark.parametrize("name,layers", [("deepseek-v3.2", 61), ("glm-5", 78)])
def test_every_layer_holds_the_indexer_keys(name, layers):
    """index_head_dim 128: 128 fp8 keys + 128 // 128 x 4 B of scale = 132 B per token per layer, in uint8."""
    arch = _arch(name)
    assert layers == arch.num_layers
    assert {132} == {layer.index_bytes for layer in arch.layers}
    # the latent (512 + 64) x 2 B plus the indexer: 1,152 + 132 = 1,284 B per token in bf16
    assert 1284 == layer_token_bytes(arch.layers[0], "bf16", "tensor", 1)
    # fp8 is stored as fp8_ds_mla: 512 fp8 + 4 x 4 B of scales + 64 x 2 B of rope = 656, + 132 = 788
    assert ("fp8_ds_mla", True) == (stored_kv_dtype(arch, "fp8")[0], bool(stored_kv_dtype(arch, "fp8")[1]))
    assert 788 == layer_token_bytes(arch.layers[0], stored_kv_dtype(arch, "fp8")[0], "tensor", 1)


def test_deepseek_v32_figures_by_hand():
    """DeepSeek-V3.2, tp 1, 12 GiB, max_model_len 2,048 (vLLM 0.33.0's own code gave the same, the brief's
    reference figure): bf16: a block of 64 tokens is 61 x 64 x 1,284 = 5,012,736 B; 12,884,901,888 // that = 2,570
    blocks; 2,048 tokens hold 32 blocks: 2,570 / 32 = 80.31x, 164,480 tokens.  fp8: 61 x 64 x 788 = 3,076,352 B,
    4,188 blocks, 130.88x."""
    arch = _arch("deepseek-v3.2")
    bf16 = _calc(arch)
    assert 64 == bf16["pool"]["block_size"]
    assert (2570, "GPU KV cache size: 164,480 tokens, Maximum concurrency for 2,048 tokens per request: 80.31x") == (
        bf16["vllm_view"]["num_gpu_blocks"], bf16["vllm_view"]["log_lines"][0])
    fp8 = _calc(arch, "fp8")
    assert (4188, 130.875) == (fp8["vllm_view"]["num_gpu_blocks"], fp8["vllm_view"]["max_concurrency"])


def test_block_size_auto_is_64_on_hopper():
    """FLASH_ATTN_MLA_SPARSE (bf16) and FLASHMLA_SPARSE (fp8) take MultipleOf(64): the preferred size is 64."""
    arch = _arch("glm-5")
    assert 64 == auto_block_size(arch, "bf16")[0] == auto_block_size(arch, "fp8", "9.0")[0]
    assert "FLASHMLA_SPARSE" in auto_block_size(arch, "fp8")[1]
    assert (128, "128: requested") == RULES.block_size(arch, "bf16", 128, Gpu())


@pytest.mark.parametrize("block", [16, 32, 48])
def test_block_sizes_vllm_refuses(block):
    """vLLM 0.33's selector finds no sparse MLA backend at 16 or 32 ("No valid attention backend found"): one
    line naming the field, the value and what is allowed, as the start-up refusal."""
    arch = _arch("deepseek-v3.2")
    with pytest.raises(InputError) as err:
        _calc(arch, block=block)
    text = str(err.value)
    assert text.startswith(f"--block-size: {block}") and "No valid attention backend found" in text
    assert "multiple of 64" in text and "\n" not in text


def test_gpus_without_a_mirrored_sparse_backend():
    """Ampere/Ada (8.x) has no sparse MLA backend in vLLM 0.33 (it refuses); Blackwell's choice is not mirrored."""
    arch = _arch("deepseek-v3.2")
    with pytest.raises(InputError, match="no sparse MLA backend"):
        auto_block_size(arch, "bf16", "8.0")
    with pytest.raises(InputError, match="not mirrored"):
        RULES.block_size(arch, "bf16", 64, Gpu(compute_capability="10.0"))


def test_other_quantized_dtypes_are_not_mirrored():
    with pytest.raises(InputError, match="not mirrored"):
        stored_kv_dtype(_arch("deepseek-v3.2"), "int8")


def test_a_config_with_unindexed_layers_is_refused(tmp_path):
    """index_topk_freq 4 leaves 3 of 4 layers without an indexer (DeepseekV32Attention.__init__: skip_topk), so
    the layers would hold caches of two sizes: refused in one line, not guessed."""
    cfg = json.loads((EXTERNAL / "glm-5" / "config.json").read_text(encoding="utf-8"))
    cfg["index_topk_freq"] = 4
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    with pytest.raises(InputError) as err:
        load_config(path)
    assert "index_topk_freq" in str(err.value) and "not mirrored" in str(err.value)


def test_sglang_dsa_cell_matches_vllms_per_layer():
    """SGLang 0.5.23 mirrors the indexer too (kvdash.engines.sglang: pool_configurator.py
    _compute_dsa_indexer_cell_size): per layer and token its cell is vLLM's -- bf16 576 x 2 + 132 = 1,284 B, fp8 656 +
    132 = 788 B (its calculate_mla_kv_cache_dim is vLLM's fp8_ds_mla) -- 61 layers: 78,324 and 48,068 B."""
    from kvdash.engines.sglang import plan, refusal

    arch = _arch("deepseek-v3.2")
    assert refusal(arch, 1) == ""
    assert plan(arch, 143_771, 1, "bf16", 142_747 * 2**20, 0).cell_bytes == 61 * 1_284 == 78_324
    assert plan(arch, 143_771, 1, "fp8", 142_747 * 2**20, 0).cell_bytes == 61 * 788 == 48_068


def test_sparse_mla_figures_vllm_gave():
    """DeepSeek-V3.2 (sparse MLA) as vLLM 0.33.0 planned it (conformance/vllm/expected.json), worked by hand: 61
    latents of 576 x 2 B and 61 indexer caches of 132 B per token (DeepseekV32IndexerCache, uint8 whatever the KV
    dtype) in one group, 64-token blocks: a block is 61 x 64 x (1,152 + 132) = 5,012,736 B, and 12 GiB / that = 2,570
    blocks; fp8 KV is stored as fp8_ds_mla (656 B): 61 x 64 x (656 + 132) = 3,076,352 B per block, 4,188 blocks; a
    request of 2,048 tokens holds 32 blocks (80.31x, 130.88x)."""
    cases = json.loads(EXPECTED.read_text(encoding="utf-8"))["cases"]
    got = {c["kv_dtype"]: c for c in cases if c["config"] == "deepseek-v3.2" and c["tp"] == 1 and c["status"] == "ok"
           and c["block_size_requested"] == "auto" and c["max_model_len"] == 2048 and c["budget_bytes"] == 12 * GiB}
    assert (2570, 80.3125, {"mla": 73728, "indexer": 8448}) == (
        got["bf16"]["num_gpu_blocks"], got["bf16"]["max_concurrency"], got["bf16"]["page_bytes"])
    assert (4188, 130.875, {"mla": 41984, "indexer": 8448}) == (
        got["fp8"]["num_gpu_blocks"], got["fp8"]["max_concurrency"], got["fp8"]["page_bytes"])


def test_fp8_latent_not_a_multiple_of_128_names_the_option_and_the_rank(tmp_path, capsys):
    """A sparse-MLA config whose kv_lora_rank (500) is not a multiple of 128 with --kv-dtype fp8: one line that names
    the option (--kv-dtype, not the internal 'kv_dtype'), the rank and what to use instead."""
    from tests.cli_run import run

    cfg = json.loads((CONFIGS / "deepseek-v3.2" / "config.json").read_text())
    cfg["kv_lora_rank"] = 500
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code, _, err = run(["calc", "--config", path, "--budget", "40GiB", "--block-size", "64", "--kv-dtype", "fp8"],
                       capsys)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("kvdash: error: --kv-dtype: 'fp8_ds_mla' is not allowed; needs kv_lora_rank divisible by "
                          "128, and this model's is 500")
    assert "use bf16" in err

"""The default block size is the engine's own choice (``auto``, kvdash/defaults.py): what ``vllm serve`` without
``--block-size`` runs, and SGLang's page under ``--engine-rules sglang``.  Every figure below is worked by hand
from calc's own output (budgets per rank as calc prints them), so the tests pin the block arithmetic, not the
budget's.

vLLM 0.33 on Hopper with --block-size unset (kvdash.engines.vllm.auto_block_size): 16 for attention and bf16 MLA,
64 for MLA with an fp8 KV cache (FlashMLA takes only 64) and for sparse MLA (DeepSeek-V3.2: its backends take
multiples of 64, and refuse 16).  A block size typed on the command line is still refused where vLLM refuses it.
"""

from __future__ import annotations

import json

import pytest

from kvdash import defaults as D
from tests.cli_run import run

V32 = ["--config", "tests/data/configs/deepseek-v3.2/config.json", "--gpu", "h200", "--tp", "8", "--weights", "690GB"]
V3_FP8 = ["--model", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--kv-dtype", "fp8"]


def _calc(capsys, *args: str) -> dict:
    code, out, err = run(["calc", *args, "--json"], capsys)
    assert 0 == code, err
    return json.loads(out)


def test_default_is_auto():
    assert "auto" == D.BLOCK_SIZE


def test_deepseek_v32_without_block_size_plans_blocks_of_64(capsys):
    """DeepSeek-V3.2 (sparse MLA) on 8 x H200 with 690 GB of weights, no --block-size: vLLM 0.33 starts with
    blocks of 64, and so does kvdash (before: refused, "16 is not allowed", though 16 was never typed).

    Per token per rank (MLA is not split by TP): 61 layers x 1,284 B = 78,324 B, where 1,284 B is the latent
    (kv_lora_rank 512 + qk_rope_head_dim 64 = 576 elements x 2 B = 1,152 B) plus the indexer key (128 fp8 B + a
    4-byte fp32 scale = 132 B).  A block of 64 tokens: 64 x 78,324 = 5,012,736 B.  calc's budget per rank is
    46,428,303,089 B: 46,428,303,089 // 5,012,736 = 9,262 blocks (9,262 x 5,012,736 = 46,427,960,832, 342,257 B
    left over).  An 825-token request takes ceil(825 / 64) = 13 blocks (832 slots), so 9,262 // 13 = 712
    requests fit paged (712 x 13 = 9,256)."""
    d = _calc(capsys, *V32)
    pool = d["pool"]
    assert (d["inputs"]["block_size"], d["inputs"]["block_size_requested"]) == (64, 64)
    assert d["inputs"]["block_size_reason"].startswith("64: sparse MLA on Hopper")
    assert pool["budget_bytes"] == 46_428_303_089
    assert pool["block_bytes"] == 64 * 61 * 1_284 == 5_012_736
    assert pool["leftover_bytes"] == 46_428_303_089 - 9_262 * 5_012_736 == 342_257
    assert d["whole_pool_blocks"] == 46_428_303_089 // 5_012_736 == 9_262
    assert d["summary"].startswith(f"{9_262 // 13} requests of 825 tokens fit paged")  # 712
    assert "holds 9,262 blocks of 64 tokens (78,324 B per token); paged, a request takes 13 blocks" in d["summary"]


def test_deepseek_v32_typed_16_is_still_refused(capsys):
    """The user's own --block-size 16 is refused as vLLM 0.33 refuses it (no sparse MLA backend takes 16)."""
    code, _, err = run(["calc", *V32, "--block-size", "16"], capsys)
    assert 2 == code and "--block-size: 16 is not allowed" in err and "a multiple of 64, or auto (64)" in err


def test_deepseek_v3_fp8_default_is_64(capsys):
    """DeepSeek-V3 with an fp8 KV cache on 8 x H200, no --block-size: FlashMLA's 64-token blocks.

    61 MLA layers x 576 elements x 1 B (fp8) = 35,136 B per token; a block 64 x 35,136 = 2,248,704 B.  Budget per
    rank 48,266,432,177 B // 2,248,704 = 21,464 blocks (249,521 B left over); a request of 825 tokens 13 blocks:
    21,464 // 13 = 1,651 paged.  With --block-size 16 (typed, vLLM would not pick it): 48,266,432,177 // 562,176
    = 85,856 blocks of 16, 52 per request, also 1,651 (825 tokens fill 832 slots either way)."""
    d = _calc(capsys, *V3_FP8)
    assert (d["inputs"]["block_size"], d["pool"]["block_bytes"]) == (64, 64 * 61 * 576) == (64, 2_248_704)
    assert d["pool"]["budget_bytes"] == 48_266_432_177
    assert d["whole_pool_blocks"] == 48_266_432_177 // 2_248_704 == 21_464
    assert "64: MLA with an fp8 KV cache on Hopper runs FlashMLA" in d["inputs"]["block_size_reason"]
    assert "holds 21,464 blocks of 64 tokens" in d["summary"] and d["summary"].startswith("1,651 requests")
    typed = _calc(capsys, *V3_FP8, "--block-size", "16")
    assert (typed["inputs"]["block_size"], typed["whole_pool_blocks"]) == (16, 48_266_432_177 // (16 * 35_136))
    assert typed["whole_pool_blocks"] == 85_856 and "16: requested" == typed["inputs"]["block_size_reason"]


def test_deepseek_v3_bf16_default_stays_16(capsys):
    """bf16 MLA on Hopper runs FLASH_ATTN_MLA, which takes vLLM's default 16."""
    d = _calc(capsys, "--model", "deepseek-v3", "--gpu", "h200", "--tp", "8")
    assert 16 == d["inputs"]["block_size"] and 16 * 61 * 1_152 == d["pool"]["block_bytes"]


@pytest.mark.parametrize("args", [[], ["--model", "llama-3.1-70b", "--gpu", "h100-80gb", "--tp", "4"]])
def test_llama_and_tutorial_default_stays_16(capsys, args):
    """Attention without MLA: FLASH_ATTN takes 16, so the default changes no figure.  The tutorial: 12 GiB //
    (16 x 327,680 B) = 12,884,901,888 // 5,242,880 = 2,457 blocks, as before; the same figures as a typed 16."""
    d = _calc(capsys, *args)
    typed = _calc(capsys, *args, "--block-size", "16")
    assert 16 == d["inputs"]["block_size"] == typed["inputs"]["block_size"]
    assert d["pool"] == typed["pool"] and d["whole_pool_blocks"] == typed["whole_pool_blocks"]
    if not args:
        assert 2_457 == d["whole_pool_blocks"] == 12 * 2**30 // (16 * 327_680)
    assert d["inputs"]["block_size_reason"].startswith("16: FLASH_ATTN (multiples of 16) accepts vLLM's default "
                                                       "block size of 16")


def test_sglang_calc_default_page_is_sglangs(capsys):
    """--engine-rules sglang without --block-size: SGLang's own page, 1 on CUDA (--page-size unset); a typed
    --block-size 16 is its --page-size 16, which rounds the token pool down to whole pages of 16."""
    args = ["--model", "llama-3.1-70b", "--gpu", "h100-80gb", "--tp", "4", "--engine-rules", "sglang"]
    default = _calc(capsys, *args)["sglang_view"]
    auto = _calc(capsys, *args, "--block-size", "auto")["sglang_view"]
    typed = _calc(capsys, *args, "--block-size", "16")["sglang_view"]
    assert (1, 1, 16) == (default["page_size"], auto["page_size"], typed["page_size"])
    assert default["max_total_num_tokens"] == auto["max_total_num_tokens"] == 413_356
    assert typed["max_total_num_tokens"] == 413_356 // 16 * 16 == 413_344


def test_simulate_and_live_default_is_vllms_choice(capsys):
    """simulate and live resolve the default with the KV dtype (and simulate with the --gpu preset): DeepSeek-V3
    fp8 in blocks of 64 (before: auto_block_size read bf16, so 16); 21,464 blocks of 2,248,704 B as in calc."""
    code, out, err = run(["simulate", *V3_FP8, "--requests", "5", "--json"], capsys)
    assert 0 == code, err
    assert 64 == json.loads(out)["setup"]["block_size"]
    code, out, err = run(["simulate", *V32, "--requests", "5", "--json"], capsys)
    assert 0 == code, err
    assert 64 == json.loads(out)["setup"]["block_size"]
    code, out, err = run(["live", "--demo", "--json", "--model", "deepseek-v3", "--kv-dtype", "fp8"], capsys)
    assert 0 == code, err
    kv = json.loads(out)["kv_pool"]
    assert (kv["block_size"], kv["block_bytes"]) == (64, 2_248_704)


def _grid(tmp_path, name: str, text: str):
    from kvdash.sweep.evaluate import expand
    from kvdash.sweep.gridfile import parse_grid

    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    spec = parse_grid(path)
    return spec, expand(spec).frame


def test_grid_default_block_size_is_vllms_choice_per_point(tmp_path):
    """A grid that leaves block_size out plans each point in vLLM's own block, the block_size column the integer
    it resolves to: DeepSeek-V3 fp8 on 8 x H200 in blocks of 64 (21,464 of 2,248,704 B, the budget and figures of
    calc above), Llama-3.1-70B in 16.  A point keeps the id it had when the default was 16 (the left-out
    dimension hashes as 16 did, as a null max_batched_tokens hashes as 8,192), so ids stay across the change;
    the report's defaults line names the sizes: ``block_size auto (vLLM's choice, 16, 64 ...)``."""
    from kvdash.report.sections import _dimensions

    text = "models: [deepseek-v3, llama-3.1-70b]\ndefaults: {gpu: h200, tp: 8, kv_dtype: fp8%s}\n"
    spec, auto = _grid(tmp_path, "auto", text % "")
    _, typed = _grid(tmp_path, "typed", text % ", block_size: 16")
    _, asked = _grid(tmp_path, "asked", text % ", block_size: auto")
    rows = {r["model"]: r for r in auto.iter_rows(named=True)}
    v3 = rows["deepseek-v3"]
    assert (v3["block_size"], v3["block_bytes"], v3["budget_bytes"]) == (64, 2_248_704, 48_266_432_177)
    assert v3["whole_pool_blocks"] == 48_266_432_177 // 2_248_704 == 21_464 and v3["paged_requests"] == 1_651
    assert rows["llama-3.1-70b"]["block_size"] == 16
    assert typed.get_column("block_size").to_list() == [16, 16]
    assert auto.get_column("id").to_list() == typed.get_column("id").to_list()  # ids as before the change
    assert asked.get_column("block_size").to_list() == auto.get_column("block_size").to_list()
    assert asked.get_column("id").to_list() != auto.get_column("id").to_list()  # a written 'auto' is its own value
    line = _dimensions(spec, auto)["defaults"]
    assert "block_size auto (vLLM's choice, 16, 64 by model, KV dtype and GPU)" in line


def test_grid_default_over_gpu_generations_names_the_default(tmp_path):
    """MLA over Hopper and Blackwell: vLLM's choice differs by generation (64 fp8 on Hopper, 32 on Blackwell) and
    the grid's shapes are per model, not per GPU, so the grid asks for a number; the line says the block size was
    left to vLLM rather than typed."""
    from kvdash.errors import InputError

    with pytest.raises(InputError) as exc:
        _grid(tmp_path, "mixed", "models: [deepseek-v3]\ndefaults: {tp: 8, kv_dtype: fp8}\n"
                                 "grid: {gpu: [h200, b200]}\n")
    assert "the grid leaves block_size to vLLM: auto, its default" in str(exc.value)
    assert "give block_size as a number" in str(exc.value) and "(32, 64)" in str(exc.value)


def test_grid_default_over_generations_that_agree(tmp_path):
    """bf16 MLA on Hopper and Ampere: vLLM 0.33 picks 16 on both (FLASH_ATTN_MLA, TRITON_MLA), so the grid
    plans it without asking for a number."""
    _, frame = _grid(tmp_path, "agree", "models: [deepseek-v3]\ndefaults: {tp: 8}\ngrid: {gpu: [h200, a100-80gb]}\n")
    assert frame.get_column("block_size").to_list() == [16, 16]


def test_hybrid_default_reason_says_the_raise_once():
    """A hybrid left to vLLM: auto's 16, then raised to hold the state page; the reason gives the raise's figures
    once (auto's general note of the raise is dropped where calc gives the figures).  TWO_STAGES (tests/
    test_calc_rules.py): 80 x 4,096 B = 327,680 B holds the 311,296-byte state page."""
    from kvdash.answer.calc import CalcInput, calculate
    from tests.test_calc_rules import TWO_STAGES

    reason = calculate(CalcInput(TWO_STAGES, pp=2))["inputs"]["block_size_reason"]
    assert reason.startswith("16: FLASH_ATTN (multiples of 16)") and reason.count("_align_hybrid_block_size") == 1
    assert reason.endswith("raised from 16 to 80 so one attention page (80 x 4,096 B) holds a 311,296-byte state "
                           "page (vLLM 0.33 _align_hybrid_block_size)")

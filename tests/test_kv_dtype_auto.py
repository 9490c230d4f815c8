"""``--kv-dtype auto`` is what vLLM 0.33's ``--kv-cache-dtype auto`` (its default) stores for the checkpoint
(kvdash/engines/vllm.py: resolve_auto_kv_dtype, after ``resolve_kv_cache_dtype_string`` and
``get_kv_cache_quant_algo_string`` in vllm/utils/torch_utils.py and ``Attention.__init__`` in
vllm/model_executor/layers/attention/attention.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kvdash.answer.budget import BudgetSpec
from kvdash.answer.calc import CalcInput, calculate
from kvdash.core.model import load_config
from kvdash.engines.vllm import resolve_auto_kv_dtype
from kvdash.errors import InputError
from kvdash.units import GiB

MODELS = Path(__file__).resolve().parent / "data" / "measured" / "models"


def _with_quant(quant: dict) -> object:
    arch = load_config(MODELS / "llama-3.1-8b" / "config.json")
    return dataclasses.replace(arch, facts={**arch.facts, "quantization_config": quant})


@pytest.mark.parametrize(("quant", "dtype"), [
    # ModelOpt: a static 8-bit float kv_cache_scheme, or kv_cache_quant_algo "FP8" (inside "quantization" or at
    # the top), maps through MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP: "fp8" -> "fp8_e4m3"
    ({"quant_method": "modelopt", "kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"}}, "fp8_e4m3"),
    ({"quant_method": "modelopt", "quantization": {"kv_cache_quant_algo": "FP8"}}, "fp8_e4m3"),
    ({"quant_method": "modelopt_fp4", "kv_cache_quant_algo": "fp8"}, "fp8_e4m3"),
    # a dynamic scheme, an unknown name or no KV entry: vLLM falls back to auto, the model dtype
    ({"quant_method": "modelopt", "kv_cache_scheme": {"dynamic": True, "num_bits": 8, "type": "float"}}, "bf16"),
    ({"quant_method": "modelopt", "kv_cache_quant_algo": "int8"}, "bf16"),
    ({"quant_method": "modelopt"}, "bf16"),
    # compressed-tensors: any declared kv_cache_scheme makes auto fp8 (Attention.__init__); null does not
    ({"quant_method": "compressed-tensors", "kv_cache_scheme": {"num_bits": 8, "type": "float"}}, "fp8"),
    ({"quant_method": "compressed-tensors", "kv_cache_scheme": None}, "bf16"),
    # other methods (block-fp8 weights, no KV entry) and no quantization_config: the model dtype
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "bf16"),
    ({}, "bf16"),
])
def test_auto_resolves_as_vllm(quant: dict, dtype: str) -> None:
    got, why = resolve_auto_kv_dtype(_with_quant(quant))  # type: ignore[arg-type]
    assert got == dtype
    assert bool(why) == (dtype != "bf16")


def test_nvfp4_kv_is_refused_in_one_line() -> None:
    arch = _with_quant({"quant_method": "modelopt", "kv_cache_scheme": {"num_bits": 4, "type": "float"}})
    with pytest.raises(InputError, match="NVFP4 KV cache"):
        resolve_auto_kv_dtype(arch)  # type: ignore[arg-type]


def _calc(config: str, kv_dtype: str) -> dict:
    arch = load_config(MODELS / config / "config.json")
    return calculate(CalcInput(arch=arch, kv_dtype=kv_dtype, block_size=64, budget=BudgetSpec(bytes=40 * GiB), tp=4,
                               used=2048, max_reserved=4096, max_model_len=4096))


def test_published_modelopt_checkpoint_stores_fp8_under_auto() -> None:
    """nvidia/Kimi-K2.5-NVFP4's config.json (aiconfigurator's copy, tests/data/measured/SOURCE.md) declares
    kv_cache_scheme {dynamic: false, num_bits: 8, type: float}: under auto vLLM 0.33 stores fp8_e4m3, so every
    figure equals --kv-dtype fp8_e4m3's (MLA: 576 latent elements x 1 B x 61 layers = 35,136 B per token),
    half of the bf16 figure; moonshotai/Kimi-K2.5's own config (compressed-tensors, kv_cache_scheme null) keeps
    bf16 under auto."""
    auto, fp8 = _calc("kimi-k2.5-nvfp4", "auto"), _calc("kimi-k2.5-nvfp4", "fp8_e4m3")
    assert auto["bytes_per_token"] == fp8["bytes_per_token"] == 576 * 61
    assert auto["kv_token_slots"] == fp8["kv_token_slots"]
    assert any("declares its KV cache as fp8" in a and "fp8_e4m3" in a for a in auto["assumptions"])
    plain, bf16 = _calc("kimi-k2.5", "auto"), _calc("kimi-k2.5", "bf16")
    assert plain["bytes_per_token"] == bf16["bytes_per_token"] == 2 * 576 * 61


def test_assumptions_name_what_was_asked_and_what_is_stored() -> None:
    """The second assumption line names the asked dtype and the stored one with its bytes per element:
    auto on Kimi-K2.5-NVFP4 is stored as fp8_e4m3 (1 byte); fp8 on Falcon-7B-Instruct stays bf16 (2 bytes:
    falcon.py builds its rotary Attention without cache_config); bf16 asked and stored says it once."""
    auto = _calc("kimi-k2.5-nvfp4", "auto")["assumptions"]
    assert any(a.startswith("KV dtype: auto asked, stored as fp8_e4m3 (1 byte(s) per element)") for a in auto)
    falcon = load_config(Path(__file__).resolve().parent / "data" / "configs" / "falcon-7b-instruct" / "config.json")
    r = calculate(CalcInput(arch=falcon, kv_dtype="fp8", block_size=16, budget=BudgetSpec(bytes=4 * GiB), tp=1,
                            used=825, max_reserved=2048))
    assert any(a.startswith("KV dtype: fp8 asked, stored as bf16 (2 byte(s) per element)") for a in r["assumptions"])
    plain = _calc("kimi-k2.5", "bf16")["assumptions"]
    assert any(a.startswith("KV dtype: bf16, 2 byte(s) per element; scales: per tensor") for a in plain)


def test_auto_is_the_model_dtype_of_a_float16_checkpoint(capsys: pytest.CaptureFixture[str]) -> None:
    """Rule (vLLM 0.33 ``_resolve_auto_dtype``, vllm/config/model.py): ``--dtype auto`` keeps a float16 config's
    float16 on Ampere and later, so ``--kv-cache-dtype auto`` stores fp16 (aya-23-8b's config.json says float16:
    kvdash said bf16, the same 2 bytes); the model types vLLM refuses in float16 (_FLOAT16_NOT_SUPPORTED_MODELS:
    gemma2, gemma3, gemma3_text, glm4) run bf16; bfloat16, float32 (cast down) and no dtype give bf16."""
    configs = Path(__file__).resolve().parent / "data" / "configs"
    aya = load_config(configs / "aya-23-8b" / "config.json")
    assert aya.facts["torch_dtype"] == "float16" and resolve_auto_kv_dtype(aya) == ("fp16", "")
    import json

    from tests.cli_run import run

    code, out, err = run(["calc", "--model", str(configs / "aya-23-8b"), "--kv-dtype", "auto", "--json"], capsys)
    d = json.loads(out)
    assert code in (0, None) and d["inputs"]["kv_dtype_stored"] == "fp16", err
    assert d["bytes_per_token"] == 32 * 2 * 8 * 128 * 2  # 32 layers, K and V, 8 KV heads x 128, 2 B: as bf16's
    gemma = load_config(configs / "gemma-2-9b" / "config.json")
    for dtype, stored in (("float16", "bf16"), ("bfloat16", "bf16")):
        assert resolve_auto_kv_dtype(dataclasses.replace(gemma, facts={**gemma.facts, "torch_dtype": dtype}))[0] \
            == stored
    llama = load_config(MODELS / "llama-3.1-8b" / "config.json")
    for dtype in ("bfloat16", "float32", ""):
        assert resolve_auto_kv_dtype(dataclasses.replace(llama, facts={**llama.facts, "torch_dtype": dtype}))[0] \
            == "bf16"


def test_weight_format_auto_names_a_float16_checkpoints_dtype(capsys: pytest.CaptureFixture[str],
                                                             tmp_path: Path) -> None:
    """The reading of the whole diff: --weight-format auto said "the model dtype: bf16" for a float16 checkpoint
    whose KV cache auto now calls fp16; both come from one served_dtype (the same 2 bytes, the same rate), and fp16
    experts take bf16's measured fused-MoE kernel (an H200's bf16 entry of kvdash/data/moe_kernels.json)."""
    import json

    from kvdash.core.steptime import moe_kernel
    from kvdash.engines.vllm import checkpoint_formats
    from tests.cli_run import run

    configs = Path(__file__).resolve().parent / "data" / "configs"
    aya = json.loads((configs / "aya-23-8b" / "config.json").read_text())
    assert checkpoint_formats(aya)[0] == "fp16" and "the model dtype: fp16" in checkpoint_formats(aya)[3]
    assert checkpoint_formats({**aya, "model_type": "gemma2"})[0] == "bf16"  # vLLM refuses gemma2 in float16
    code, out, err = run(["simulate", "--model", str(configs / "aya-23-8b"), "--gpu", "h100-80gb", "--time",
                          "--requests", "20", "--concurrency", "4", "--json"], capsys)
    assert code in (0, None) and json.loads(out)["setup"]["weight_format"] == "fp16", err
    assert moe_kernel("h200", "fp16") == moe_kernel("h200", "bf16") is not None
    # a model whose parameters are not counted (Jamba: the --weights figure at 2 B a parameter) reads fp16 as such,
    # not "bf16 ... not applied"
    jamba = json.loads((configs / "jamba-1.5-mini" / "config.json").read_text())
    folder = tmp_path / "jamba-fp16"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**jamba, "torch_dtype": "float16"}))
    code, out, err = run(["simulate", "--model", str(folder), "--gpu", "h200", "--tp", "2", "--weights", "104GB",
                          "--time", "--requests", "20", "--concurrency", "4", "--json"], capsys)
    setup = json.loads(out)["setup"]
    assert code in (0, None) and setup["weight_format"] == "fp16", err
    assert "not applied" not in setup["weight_format_basis"]

"""Mamba-2 (``mamba2``: Mamba-Codestral-7B) as vLLM 0.33.0 plans it: attention-free, every layer a ``MambaMixer2``.

Rules guarded: ``Mamba2DecoderLayer.__init__`` (``vllm/model_executor/models/mamba2.py``) builds each mixer with
``intermediate_size`` (else ``expand x hidden_size``), ``n_groups``, ``num_heads``, ``head_dim``, ``state_size``
and ``conv_kernel``; ``MambaStateShapeCalculator.mamba2_state_shape`` gives its conv state ``(conv_kernel - 1) x
(intermediate + 2 x n_groups x state_size)`` and its SSM state ``num_heads x head_dim x state_size`` (model dtype);
the model is attention-free, so vLLM plans one group of every layer's ``MambaSpec`` page, a block being one page
per layer; ``MambaMixer2.get_kv_cache_spec`` takes one prefill-checkpoint block in align mode, so a request holds
3 blocks with prefix caching on and 1 with it off (``MambaSpec.max_memory_usage_bytes``,
``vllm/v1/kv_cache_interface.py``).  ``conformance/vllm/expected.json`` holds vLLM's own 256 cases of the config
(``tests/test_conformance.py`` compares each)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvdash.answer.budget import BudgetSpec
from kvdash.answer.calc import CalcInput, calculate
from kvdash.core.model import load_config
from kvdash.core.pool import layer_state_bytes
from kvdash.errors import InputError

CONFIG = Path(__file__).resolve().parent / "data" / "configs" / "mamba-codestral-7b" / "config.json"


def test_mamba_codestral_state_page_by_hand():
    """conv: 3 x (8,192 + 2 x 8 x 128) x 2 B = 61,440; SSM: 128 x 64 x 128 x 2 B = 2,097,152; page 2,158,592 B."""
    arch = load_config(CONFIG)
    assert (64, {"mamba"}, False) == (arch.num_layers, set(arch.counts), arch.is_hybrid)
    assert 2_158_592 == layer_state_bytes(arch.layers[0], 1)


def test_mamba_codestral_blocks_by_hand():
    """12 GiB / (64 x 2,158,592 B) = 93 blocks; prefix caching on: 3 blocks a request -> 31.00x (63,488 tokens
    at 2,048); off: 1 block -> 93.00x; vLLM 0.33.0's code gave the same (conformance/vllm/expected.json)."""
    arch = load_config(CONFIG)
    out = {}
    for prefix in (True, False):
        r = calculate(CalcInput(arch=arch, kv_dtype="bf16", block_size="auto", budget=BudgetSpec(bytes=12 * 2**30),
                                tp=1, used=1, max_reserved=2048, max_model_len=2048, prefix_caching=prefix,
                                max_batched_tokens=8192))
        out[prefix] = (r["vllm_view"]["num_gpu_blocks"], r["vllm_view"]["log_lines"][0])
    line = "GPU KV cache size: 63,488 tokens, Maximum concurrency for 2,048 tokens per request: 31.00x"
    assert (93, line) == out[True]
    assert 93 == out[False][0] and out[False][1].endswith("93.00x")


ZAMBA2 = Path(__file__).resolve().parent / "data" / "configs" / "zamba2-7b" / "config.json"


def _zamba(tp: int = 1, kv: str = "bf16", block: int | str = "auto"):
    return calculate(CalcInput(arch=load_config(ZAMBA2), kv_dtype=kv, block_size=block,
                               budget=BudgetSpec(bytes=12 * 2**30), tp=tp, used=1, max_reserved=2048,
                               max_model_len=2048, max_batched_tokens=8192))


def test_groups_tp_must_divide_unless_one():
    """MambaMixer2.__init__ (vllm/model_executor/layers/mamba/mamba_mixer2.py): "If tensor parallel world size does
    not divide num_groups, then num_groups must equal 1".  Zamba2-7B has mamba_ngroups 2: tp 2 is planned, tp 4
    refused (vLLM 0.33's code refused all 64 of its tp 4 and tp 8 cases); a single group is replicated to tp."""
    from kvdash.core.state import state_elements

    assert _zamba(tp=2, block=64)["vllm_view"]["num_gpu_blocks"] > 0
    with pytest.raises(InputError, match="num_groups must equal 1"):
        _zamba(tp=4, block=64)
    # one group of 128-wide states replicated to 4 ranks: conv 3 x (8,192 + 2 x 4 x 128) / 4 = 6,912
    assert (6912, 32 * 64 * 128) == state_elements("mamba2", (8192, 1, 128, 64, 128, 4), 4)


def test_block_alignment_on_the_model_class_page():
    """Zamba2ForCausalLM.get_mamba_state_shape_from_config takes head_dim = mamba_headdim (64), the layers
    intermediate // n_mamba_heads = 7,168 // 8 = 896.  Alignment page: (3 x (7,168 + 2 x 2 x 64) + 8 x 64 x 64) x 2
    = 110,080 B, so block auto stays 16 (16 x 28,672 B of attention per token = 458,752 B >= it); the layers' page
    is (22,272 + 8 x 896 x 64) x 2 = 962,048 B, larger than the padded page: MambaSpec.page_size_bytes asserts and
    vLLM does not start.  Block 64 (1,835,008 B) holds it: planned, 540 blocks, as vLLM 0.33's code gave."""
    for block in ("auto", 16, 32):
        with pytest.raises(InputError, match="page_size_bytes") as refused:
            _zamba(block=block)
        # the value as the user gave it: auto (the default, unseen) is not shown as a typed 16
        assert block == refused.value.value and "attention page of 16 tokens" in str(refused.value) or block != "auto"
    with pytest.raises(InputError, match="page_size_bytes"):
        _zamba(kv="fp8", block=64)  # fp8 attention page 917,504 B < 962,048 B
    assert 540 == _zamba(block=64)["vllm_view"]["num_gpu_blocks"]


@pytest.mark.parametrize("command", [["calc"], ["simulate"], ["simulate", "--time"],
                                     ["live", "--demo", "--once", "--tp", "1"],
                                     ["exporter", "--demo", "--once", "--tp", "1"]])
def test_a_refused_automatic_block_is_named_auto(command, capsys):
    """No --block-size typed: Zamba2-7B's automatic block (16 tokens, see above) is refused as 'auto', not as
    though 16 had been typed (it said "--block-size: 16 is not allowed"); a typed 16 is still shown as 16."""
    from tests.cli_run import run

    code, _, err = run([*command, "--model", str(ZAMBA2.parent)], capsys)
    assert 2 == code and err.startswith("kvdash: error: --block-size: 'auto' is not allowed; vLLM 0.33 refuses")
    assert "attention page of 16 tokens" in err and len(err.strip().splitlines()) == 1
    code, _, err = run([*command, "--model", str(ZAMBA2.parent), "--block-size", "16"], capsys)
    assert 2 == code and err.startswith("kvdash: error: --block-size: 16 is not allowed")

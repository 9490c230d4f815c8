"""vLLM 0.33 refuses to start when one request of ``max_model_len`` tokens does not fit in the KV pool beside
its null block, and kvdash refuses the same configurations in one line.

The rule: ``get_kv_cache_configs`` (vLLM 0.33.0 ``vllm/v1/core/kv_cache_planning.py``, lines 1533-1560) plans
against ``available - bytes_per_block`` (the null block ``BlockPool`` holds back) and
``_check_enough_kv_cache_memory`` (same file, lines 50-86) raises "To serve at least one request with the
model's max seq len ..." when ``bytes_per_block x blocks_per_request`` is more.  Found by the external
conformance set (``conformance/vllm/external``: Llama-3.1-405B and Phi-3.5-mini at 32,768 tokens in 12 GiB).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvdash.answer.budget import BudgetSpec
from kvdash.answer.calc import CalcInput, calculate
from kvdash.core.model import load_config
from kvdash.errors import InputError
from kvdash.units import GiB

EXTERNAL = Path(__file__).resolve().parent.parent / "conformance" / "vllm" / "external"

# Llama-3.1-405B: 126 layers x 2 x 8 KV heads x 128 x 2 B = 516,096 B per token; block 16: 8,257,536 B
BLOCK_BYTES = 16 * 126 * 2 * 8 * 128 * 2


def run(config: str, budget: int, max_model_len: int, block_size: int | str = 16):
    arch = load_config(EXTERNAL / config / "config.json")
    return calculate(CalcInput(arch=arch, kv_dtype="bf16", block_size=block_size, budget=BudgetSpec(bytes=budget),
                               tp=1, used=1, max_reserved=max_model_len, max_model_len=max_model_len,
                               max_batched_tokens=8192))


def test_llama_405b_at_32k_in_12_gib_is_refused_as_vllm_refuses():
    """12 GiB // 8,257,536 = 1,560 blocks, one of them the null block; one request of 32,768 tokens takes
    32,768 / 16 = 2,048: 2,048 x 8,257,536 = 16,911,433,728 B = 15.75 GiB needed, 12 GiB - 8,257,536 B =
    11.99 GiB available; the longest length that fits is 1,559 x 16 = 24,944 (vLLM's own message, from its
    code, in conformance/vllm/external/expected.json)."""
    assert 8_257_536 == BLOCK_BYTES
    with pytest.raises(InputError) as exc:
        run("llama-3.1-405b", 12 * GiB, 32768)
    text = str(exc.value)
    assert text.startswith("--max-model-len: 32768")
    assert ("\"To serve at least one request with the model's max seq len (32768), (15.75 GiB KV cache is needed, "
            "which is larger than the available KV cache memory (11.99 GiB). Based on the available memory, the "
            "estimated maximum model length is 24944.\"") in text
    assert "vllm/v1/core/kv_cache_planning.py" in text
    assert "lower it to 24,944 or less" in text


def test_the_boundary_is_one_block_beside_the_request():
    """Exactly 2,048 + 1 blocks start (vLLM: needed 2,048 blocks <= available 2,049 - 1); one byte fewer leaves
    2,048 whole blocks, the null block and 2,047 for a request of 2,048: refused.  1.00x is not enough."""
    fits = run("llama-3.1-405b", 2049 * BLOCK_BYTES, 32768)
    assert 2049 == fits["vllm_view"]["num_gpu_blocks"]
    assert fits["vllm_view"]["log_lines"][0].endswith("1.00x")
    with pytest.raises(InputError):
        run("llama-3.1-405b", 2049 * BLOCK_BYTES - 1, 32768)


def test_a_sliding_model_counts_its_window_blocks():
    """Phi-3.5-mini's sliding window (262,143) is longer than 32,768, so a request takes cdiv(32,768, 16) + 1 =
    2,049 blocks (SlidingWindowSpec.max_memory_usage_bytes); 12 GiB holds 2,048 blocks of 6,291,456 B: the log
    would read 1.00x, vLLM refuses ("12.01 GiB KV cache is needed ... (11.99 GiB) ... 32736")."""
    with pytest.raises(InputError) as exc:
        run("phi-3.5-mini-instruct", 12 * GiB, 32768)
    assert "(12.01 GiB KV cache is needed" in str(exc.value)
    assert "(11.99 GiB)" in str(exc.value)
    assert "estimated maximum model length is 32736." in str(exc.value)


def test_a_request_that_fits_still_plans():
    """At 2,048 tokens a request takes 128 blocks of the 1,560: 1,560 / 128 = 12.19x, as vLLM logs it."""
    got = run("llama-3.1-405b", 12 * GiB, 2048)
    assert got["vllm_view"]["log_lines"][0].endswith("12.19x")


START_GRID = """
models: [llama-3.1-8b]
workloads:
  w: {length: 1000, max_reserved: 32768}
grid:
  kv_dtype: [bf16]
  block_size: [16]
  budget: [4294967296, 4297064448]
"""


@pytest.mark.parametrize("given", [True, False])
def test_sweep_marks_points_vllm_would_not_start(tmp_path, given):
    """The sweep applies the same rule to every point where max_model_len is given (as calc, only then).
    Llama-3.1-8B bf16: 32 layers x 2 x 8 KV heads x 128 x 2 B = 131,072 B per token, 2,097,152 B per 16-token
    block; one request of 32,768 tokens takes 2,048 blocks.  4 GiB holds exactly 2,048 blocks: one is the
    null block, so vLLM refuses to start (fits = false); 4 GiB + 2 MiB holds 2,049 and starts (max
    concurrency 2,049 / 2,048 = 1.00049).  Without max_model_len the grid's vLLM figures are for
    max_reserved and nothing is refused, as calc without --max-model-len."""
    from kvdash.sweep.evaluate import expand
    from kvdash.sweep.gridfile import parse_grid

    path = tmp_path / "grid.yaml"
    path.write_text(START_GRID + ("  max_model_len: [32768]\n" if given else ""))
    frame = expand(parse_grid(path)).frame.sort("budget_bytes")
    assert frame.get_column("whole_pool_blocks").to_list() == [2048, 2049]
    assert frame.get_column("vllm_max_concurrency").to_list() == [1.0, 2049 / 2048]
    assert frame.get_column("fits").to_list() == ([False, True] if given else [True, True])
    assert frame.get_column("paged_requests").to_list() == [2048 * 16 // 1008, 2049 * 16 // 1008]  # 63 blocks each
    if given:  # calc agrees point for point
        llama = Path(__file__).resolve().parent / "data" / "configs" / "llama-3.1-8b" / "config.json"
        arch = load_config(llama)

        def calc(budget: int):
            return calculate(CalcInput(arch=arch, kv_dtype="bf16", block_size=16, budget=BudgetSpec(bytes=budget),
                                       tp=1, used=1000, max_reserved=32768, max_model_len=32768))
        with pytest.raises(InputError, match="refuses to start"):
            calc(4294967296)
        assert calc(4297064448)["vllm_view"]["max_concurrency"] == pytest.approx(2049 / 2048)

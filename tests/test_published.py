"""Figures pinned to published sources: the tutorial, the PagedAttention paper, vLLM's FP8 doc."""

from __future__ import annotations

import pytest

from kvdash.answer.budget import BudgetSpec
from kvdash.answer.calc import CalcInput, calculate
from kvdash.core.model import custom, load_preset, resolve_model
from kvdash.units import GiB

TUTORIAL = resolve_model()  # hypothetical 80-layer GQA model of the tutorial


def tutorial(**kw):
    return calculate(CalcInput(arch=kw.pop("arch", TUTORIAL), **kw))


class TestTutorialWorkedExample:
    """kv-cache-tutorial.txt, "Expected core values" and "Measurable Exit Criteria"."""

    def test_expected_core_values(self):
        """Every expected core value of the tutorial artifact."""
        r = tutorial()
        assert r["architecture"] | {"name": None} == {
            "name": None, "pattern": "80 full", "layer_kinds": {"full": 80}, "derived": [],
            "layers": 80, "kv_heads": 8, "head_dim": 128, "bytes_per_element": 2,
            "index_bytes_per_token_per_layer": 0}  # no sparse-MLA indexer
        assert 327_680 == r["bytes_per_token"]  # 2 x 80 x 8 x 128 x 2
        assert 39_321 == r["kv_token_slots"]  # floor(12 GiB / 327,680)
        assert 2_457 == r["whole_pool_blocks"]
        assert 39_312 == r["block_backed_token_slots"]
        request = {k: v for k, v in r["request"].items() if k != "paged_internal_waste_percent"}
        assert {"used_tokens": 825, "contiguous_slots": 2048, "paged_blocks": 52, "paged_slots": 832,
                "paged_unused_slots": 7} == request
        assert 0.8413 == pytest.approx(r["request"]["paged_internal_waste_percent"], abs=5e-5)
        assert 19 == r["capacity"]["contiguous_requests"]
        assert 47 == r["capacity"]["paged_requests"]
        assert 2.4737 == pytest.approx(r["capacity"]["request_capacity_ratio"], abs=5e-5)
        assert 2_621_440 == r["sensitivity"]["mha_64_kv_heads_bytes_per_token"]  # 2.5 MiB/token (64 heads)
        assert 2_621_440 == r["sensitivity"]["mha_bytes_per_token"]
        assert 163_840 == r["sensitivity"]["fp8_gqa_bytes_per_token"]

    def test_leftover_is_three_mib(self):
        """"the leftover 3 MiB (9.6 tokens of KV) cannot form another block"."""
        pool = tutorial()["pool"]
        assert 3 * 2**20 == pool["leftover_bytes"]
        assert 9.6 == pytest.approx(pool["leftover_tokens"])

    def test_contiguous_unused_fraction(self):
        """Contiguous: 1,223 of 2,048 slots unused = 59.72 %."""
        p = tutorial()["policies"]["contiguous_max"]
        assert 59.72 == pytest.approx(p["waste_percent"], abs=0.005)

    def test_fp8_ideal_slots(self):
        """Idealized FP8: floor(12 GiB / 163,840) = 78,643 slots."""
        r = tutorial(kv_dtype="fp8")
        assert 78_643 == r["kv_token_slots"]
        assert any("idealized" in line for line in r["assumptions"])

    def test_wrong_head_count(self):
        """Plugging 64 heads in cuts the pool from 39,321 to 4,915 token slots."""
        mha = custom(80, 64, 128)
        assert 4_915 == tutorial(arch=mha)["kv_token_slots"]

    def test_block_32_for_200_tokens(self):
        """A 200-token sequence allocates 208 slots at block 16 and 224 at block 32; 825 lands on 832 for both."""
        assert 208 == tutorial(used=200)["request"]["paged_slots"]
        assert 224 == tutorial(used=200, block_size=32)["request"]["paged_slots"]
        assert 832 == tutorial(block_size=32)["request"]["paged_slots"]

    def test_48th_request_does_not_fit(self):
        """48 x 832 = 39,936 slots exceed the 39,312 block-backed slots."""
        r = tutorial()
        assert 48 * r["request"]["paged_slots"] > r["block_backed_token_slots"]


# The exercise: four configurations, groups [200, 825, 1525] in 12 GiB.  Worked by hand:
#   B=16: blocks 13 + 52 + 96 = 161 -> slots 208 + 832 + 1536 = 2,576; tail 26
#   B=32: blocks 7 + 26 + 48 = 81 -> slots 224 + 832 + 1536 = 2,592; tail 42
#   pool blocks: bf16 B16 2,457; bf16 B32 floor(39,321.6 / 32) = 1,228; fp8 B16 4,915; MHA B16 307
#   groups: 2,457 // 161 = 15; 1,228 // 81 = 15; 4,915 // 161 = 30; 307 // 161 = 1
#   offload of 1,525 tokens: useful 1,525 x B/token; allocated 1,536 x B/token
EXERCISE = [
    # label, arch, dtype, block, allocated, tail, groups, offload useful, offload allocated
    ("bf16 GQA B16", TUTORIAL, "bf16", 16, 2576, 26, 15, 1525 * 327680, 1536 * 327680),
    ("bf16 GQA B32", TUTORIAL, "bf16", 32, 2592, 42, 15, 1525 * 327680, 1536 * 327680),
    ("fp8 GQA B16", TUTORIAL, "fp8", 16, 2576, 26, 30, 1525 * 163840, 1536 * 163840),
    ("bf16 MHA-64 B16", custom(80, 64, 128), "bf16", 16, 2576, 26, 1, 1525 * 2621440, 1536 * 2621440),
]


@pytest.mark.parametrize("label,arch,dtype,block,allocated,tail,groups,useful_b,alloc_b", EXERCISE,
                         ids=[e[0] for e in EXERCISE])
def test_tutorial_exercise(label, arch, dtype, block, allocated, tail, groups, useful_b, alloc_b):
    """The tutorial's hands-on exercise, every reported figure."""
    g = tutorial(arch=arch, kv_dtype=dtype, block_size=block, group=(200, 825, 1525))["group"]
    assert 2550 == g["useful_slots"]
    assert allocated == g["allocated_slots"]
    assert tail == g["tail_waste_slots"]
    assert groups == g["complete_groups"]
    assert {"tokens": 1525, "useful_bytes": useful_b, "allocated_bytes": alloc_b} == g["offload"]


class TestPagedAttentionPaper:
    """Kwon et al., SOSP 2023, Table 1 and §3 (the paper's "GB" is GiB)."""

    def test_opt13b_token_bytes(self):
        """§3: one OPT-13B token is 2 x 5120 x 40 x 2 = 819,200 bytes ("800 KB")."""
        assert 819_200 == tutorial(arch=load_preset("opt-13b"))["bytes_per_token"]

    def test_opt13b_slots(self):
        """Table 1: OPT-13B, 12 GB of KV on one A100-40GB -> 15.7K slots."""
        r = tutorial(arch=load_preset("opt-13b"), budget=BudgetSpec(bytes=12 * GiB))
        assert 15_728 == r["kv_token_slots"]
        assert round(r["kv_token_slots"] / 1000, 1) == 15.7

    def test_opt175b_slots(self):
        """Table 1: OPT-175B, 264 GB of KV over 8 A100-80GB (TP 8, 33 GiB a rank) -> 60.1K slots."""
        r = tutorial(arch=load_preset("opt-175b"), tp=8, budget=BudgetSpec(bytes=264 * GiB // 8))
        assert 589_824 == r["bytes_per_token"]  # 4,718,592 / 8 per rank
        assert 60_074 == r["kv_token_slots"]
        assert round(r["kv_token_slots"] / 1000, 1) == 60.1


class TestVllmFp8Doc:
    """vLLM "Quantized KV Cache" doc (vLLM docs, "Quantized KV Cache"): Qwen3-4B on an L4,
    11.47 GiB of KV cache:
    83,488 tokens (auto) vs 166,992 (fp8); max concurrency at 32k 2.55x vs 5.10x."""

    # 12,312,000,000 B = 11.466 GiB lies in both intervals the two logs imply:
    # bf16 5,218 blocks x 2,359,296 B, fp8 10,437 blocks x 1,179,648 B.
    BUDGET = BudgetSpec(bytes=12_312_000_000)

    def run(self, dtype):
        return tutorial(arch=load_preset("qwen3-4b"), kv_dtype=dtype, budget=self.BUDGET,
                        max_model_len=32768)["vllm_view"]

    def test_bf16(self):
        """auto (bf16): 83,488 tokens, 2.55x at 32,768 tokens."""
        v = self.run("bf16")
        # the doc's log is from a vLLM before 0.33 (two lines); 0.33 logs the same figures in one line:
        # int(5,218 / 2,048 x 32,768) = 83,488
        assert ["GPU KV cache size: 83,488 tokens, Maximum concurrency for 32,768 tokens per request: 2.55x"] \
            == v["log_lines"]

    def test_fp8_doubles(self):
        """fp8: 166,992 tokens, 5.10x: twice the blocks, within one block."""
        v = self.run("fp8")
        assert ["GPU KV cache size: 166,992 tokens, Maximum concurrency for 32,768 tokens per request: 5.10x"] \
            == v["log_lines"]
        assert 1 >= v["num_gpu_blocks"] - 2 * self.run("bf16")["num_gpu_blocks"]

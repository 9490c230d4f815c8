"""The engine interface (issue 26 item 1): :class:`kvdash.engines.base.EngineRules`, vLLM 0.33's rules behind it
(:mod:`kvdash.engines.vllm`) and the registry.  Each test names the rule and works its value by hand."""

from __future__ import annotations

from decimal import Decimal

import pytest

from kvdash.core.model import load_preset
from kvdash.engines import registry
from kvdash.engines.base import Caps, EngineRules, Gpu, Settings
from kvdash.errors import InputError

VLLM = registry.get("vllm")
H100 = Gpu(85_520_809_984, "NVIDIA H100 80GB HBM3", "9.0")
L4 = Gpu(24_152_899_584, "NVIDIA L4", "8.9")


def test_registry_names_and_unknown_engine():
    """One engine registered today; an unknown name is one clear error naming what is allowed."""
    assert registry.names()[0] == "vllm"
    assert registry.get() is VLLM
    with pytest.raises(InputError) as err:
        registry.get("tgi")
    assert "expected vllm" in str(err.value)


def test_vllm_satisfies_the_protocol():
    """Structural check at run time (mypy checks it statically through ``registry.ENGINES``' type)."""
    rules: EngineRules = VLLM
    for name in ("check_max_model_len", "caps", "block_size", "pool", "budget", "auto_reserve",
                 "in_flight_tokens", "blocks_per_request", "startup_line", "caps_text"):
        assert callable(getattr(rules, name)), name
    assert (rules.name, rules.version, rules.label, rules.default_util) == ("vllm", "0.33", "vLLM 0.33", "0.92")


def test_budget_is_floor_total_times_util_minus_weights_and_reserve():
    """vLLM: floor(85,520,809,984 x 0.92) = floor(78,679,145,185.28) = 78,679,145,185 requested;
    minus 16,060,000,000 weights and 6,000,000,000 reserve = 56,619,145,185 B for the KV cache."""
    b = VLLM.budget(85_520_809_984, Decimal("0.92"), 16_060_000_000, 6_000_000_000)
    assert (b.requested, b.per_rank_bytes) == (78_679_145_185, 56_619_145_185)
    assert b.formula == "floor(total x util) - weights/rank - reserve"


def test_caps_follow_the_gpu_tier():
    """EngineArgs.get_batch_defaults: an L4 (22.5 GiB, under 70 GiB) gets 256 seqs / 2,048 tokens; an H100
    (79.6 GiB, not an A100) 1,024 / 8,192; a given --max-num-seqs 64 is kept."""
    assert (VLLM.caps(L4, Settings(8192)).max_num_seqs, VLLM.caps(L4, Settings(8192)).max_num_batched_tokens) \
        == (256, 2048)
    c = VLLM.caps(H100, Settings(8192, max_num_seqs=64))
    assert (c.max_num_seqs, c.max_num_batched_tokens, c.seqs_basis) == (64, 8192, "given with --max-num-seqs")


def test_caps_refused_combination():
    """verify_max_model_len: 100 batched tokens below 256 sequences is refused, naming --max-batched-tokens."""
    with pytest.raises(InputError) as err:
        VLLM.caps(L4, Settings(8192, max_num_seqs=256, max_num_batched_tokens=100))
    assert "--max-batched-tokens" in str(err.value)


def test_in_flight_tokens_two_batches_under_async_scheduling():
    """max_concurrent_batches x max_num_batched_tokens: 2 x 8,192 = 16,384; without async 1 x 8,192; PP 2
    with async 3 x 8,192 = 24,576."""
    caps = Caps(1024, 8192, "default", "default", "")
    assert VLLM.in_flight_tokens(caps, Settings(8192)) == 16_384
    assert VLLM.in_flight_tokens(caps, Settings(8192, async_scheduling=False)) == 8_192
    assert VLLM.in_flight_tokens(caps, Settings(8192, pp=2)) == 24_576


def test_block_size_requested_auto_and_refused():
    """A requested 32 is kept; auto for an MLA model with an fp8 KV cache on Hopper is FlashMLA's 64; for
    Llama (no MLA) 16; any other string is refused."""
    llama, ds = load_preset("llama-3.1-8b"), load_preset("deepseek-v3")
    assert VLLM.block_size(llama, "bf16", 32, H100) == (32, "32: requested")
    assert VLLM.block_size(ds, "fp8", "auto", H100)[0] == 64
    assert VLLM.block_size(llama, "bf16", "auto", H100)[0] == 16
    with pytest.raises(InputError):
        VLLM.block_size(llama, "bf16", "big", H100)


def test_pool_of_a_uniform_model_is_one_group_of_all_layers():
    """Llama-3.1-8B: 32 full layers -> one KV-cache group of 32; bf16, 8 KV heads x (128 + 128) x 2 B =
    4,096 B per token per layer; block 16 x 4,096 x 32 = 2,097,152 B."""
    (s,) = VLLM.pool(load_preset("llama-3.1-8b"), "bf16", "tensor", 1, 1, 16, True)
    assert (s.groups, s.group_size, s.layer_token_bytes, s.block_bytes) == (1, 32, 4_096, 2_097_152)


def test_blocks_per_request_full_and_sliding():
    """gpt-oss-like: 1 full group + 1 sliding group, W 128, B 16, L 8,192, T 16,384, no state:
    full cdiv(8192, 16) = 512; sliding cdiv(min(127 + 16,384, 8,192), 16) + 1 = 512 + 1 = 513; total 1,025.
    A chunked group (C 128): cdiv(min(128 + 16,384, 8,192), 16) = 512, total 1,024."""
    x = {"block_size": 16, "max_model_len": 8192, "window": 128, "chunked": 0, "full_groups": 1,
         "window_groups": 1, "state_blocks": 0, "in_flight_tokens": 16_384}
    assert VLLM.blocks_per_request(x) == 1_025
    assert VLLM.blocks_per_request(x | {"chunked": 1}) == 1_024
    assert VLLM.blocks_per_request(x | {"state_blocks": 2}) == 1_027


def test_startup_line_word_for_word():
    """update_kv_cache_capacity (vllm/v1/core/kv_cache_utils.py) prints the tokens with commas and the
    concurrency to two decimals."""
    assert VLLM.startup_line(1_234_567, 8192, 150.7) == \
        "GPU KV cache size: 1,234,567 tokens, Maximum concurrency for 8,192 tokens per request: 150.70x"


def test_check_max_model_len_refuses_above_the_derived_limit():
    """Llama-3.1-8B derives 131,072 (llama3 rope: not scaled again); 131,073 is refused unless allowed."""
    arch = load_preset("llama-3.1-8b")
    VLLM.check_max_model_len(arch, 131_072, False)
    VLLM.check_max_model_len(arch, 131_073, True)
    with pytest.raises(InputError):
        VLLM.check_max_model_len(arch, 131_073, False)


def test_auto_reserve_counts_the_caps_graphs():
    """Llama (LlamaForCausalLM) at TP 1 on an H100: activation 1.89 GiB = 2,029,372,047 B, non-torch tp1_pp1
    0.27 GiB = 289,910,292 B, CUDA graphs 26.88 MiB x 32 layers = 901,943,132 B (51 graphs, as measured):
    3,221,225,471 B."""
    caps = VLLM.caps(H100, Settings(8192))
    est = VLLM.auto_reserve(load_preset("llama-3.1-8b"), 1, 1, caps, H100, Settings(8192))
    assert [t["bytes"] for t in est["terms"]] == [2_029_372_047, 289_910_292, 901_943_132]
    assert est["bytes"] == 3_221_225_471


def test_batch_tier_boundaries_are_inclusive():
    """EngineArgs.get_batch_defaults compares ``device_memory >= 160 GiB`` and ``>= 70 GiB``: exactly
    160 x 2^30 = 171,798,691,840 B takes the large row (16,384 / 1,024), one byte less the H100 row (8,192);
    exactly 70 x 2^30 = 75,161,927,680 B takes the H100 row, one byte less the small row (2,048 / 256)."""
    def tokens(memory: int) -> int:
        return VLLM.caps(Gpu(memory, "NVIDIA X"), Settings(8192)).max_num_batched_tokens

    assert (tokens(171_798_691_840), tokens(171_798_691_839)) == (16_384, 8_192)
    assert (tokens(75_161_927_680), tokens(75_161_927_679)) == (8_192, 2_048)


class TestLogCheckBoundaries:
    """kvdash.engines.vllm_view.log_check on hand-made figures: all vLLM can give the KV cache is
    requested 10,000,000,000 - weights 2,000,000,000 = 8,000,000,000 B per rank; the implied reserve range is
    8,000,000,000 - (highest, lowest) budget.  The smallest published reserve is 1.02 GiB = 1,095,216,660 B."""

    BUDGET = {"gpu_memory_bytes": 12_000_000_000, "source": "vllm", "requested_bytes": 10_000_000_000,
              "weights_per_rank_bytes": 2_000_000_000, "utilization": "0.92", "per_rank_bytes": 1}
    VIEW = {"gpu_kv_cache_tokens": 1000, "max_model_len": 8192}

    def check(self, span: tuple[int, int]) -> dict:
        from kvdash.engines import vllm_view

        return vllm_view.log_check(1000, self.VIEW, span, self.BUDGET, "basis")

    def test_a_reserve_from_exactly_zero_is_a_range(self):
        """Budgets 7e9..8e9: reserve 0 to 1,000,000,000 B (from 0, not 'at most'); below 1.02 GiB: implausible."""
        out = self.check((7_000_000_000, 8_000_000_000))
        assert out["reserve_range_bytes"] == [0, 1_000_000_000] and out["verdict"] == "implausible"
        assert "a runtime reserve of 0 to 1,000,000,000 B per rank" in out["text"]

    def test_a_reserve_from_minus_one_is_at_most(self):
        """Budgets 7e9..8,000,000,001: reserve -1 to 1,000,000,000 B: written 'at most 1,000,000,000'."""
        out = self.check((7_000_000_000, 8_000_000_001))
        assert "a runtime reserve of at most 1,000,000,000 B per rank" in out["text"]

    def test_a_reserve_of_at_most_zero_is_possible_but_implausible(self):
        """Budgets 8e9..8.5e9: reserve -500,000,000 to 0: not more than vLLM can have (r_hi = 0 is not < 0)."""
        out = self.check((8_000_000_000, 8_500_000_000))
        assert out["reserve_range_bytes"] == [-500_000_000, 0] and out["verdict"] == "implausible"
        assert "a runtime reserve of at most 0 B per rank" in out["text"]

    def test_one_byte_more_than_vllm_can_give_is_impossible(self):
        """Lowest budget 8,000,000,001: the reserve is at most -1 B: impossible."""
        assert self.check((8_000_000_001, 8_000_000_001))["verdict"] == "impossible"

    def test_exactly_the_smallest_published_reserve_is_plausible(self):
        """Lowest budget 8e9 - 1,095,216,660 = 6,904,783,340: reserve up to 1,095,216,660 B, not below the
        smallest published one: plausible; one byte less (lowest budget one byte more): implausible."""
        assert self.check((6_904_783_340, 6_904_783_350))["verdict"] == "plausible"
        assert self.check((6_904_783_341, 6_904_783_350))["verdict"] == "implausible"


def test_caps_raise_to_max_model_len_only_above_the_default():
    """Chunked prefill off: batched tokens are raised to max_model_len only when it is larger
    (_set_default_max_num_seqs_and_batched_tokens_args): on an H100 at max_model_len 8,192 = the default 8,192
    the basis stays "default"; at 8,193 it is raised."""
    at = VLLM.caps(H100, Settings(8192, chunked_prefill=False))
    above = VLLM.caps(H100, Settings(8193, chunked_prefill=False))
    assert (at.max_num_batched_tokens, at.tokens_basis) == (8192, "default")
    assert above.max_num_batched_tokens == 8193 and "raised to max_model_len 8,193" in above.tokens_basis


def test_throughput_mode_caps_tokens_by_the_doubled_seqs():
    """--performance-mode throughput on an H100 at max_model_len 16: seqs 1,024 x 2 = 2,048; 2,048 x 16 = 32,768
    is not below the doubled 16,384 batched tokens, so they stay 16,384; at max_model_len 4: 2,048 x 4 = 8,192."""
    assert VLLM.caps(H100, Settings(16, performance_mode="throughput")).max_num_batched_tokens == 16_384
    assert VLLM.caps(H100, Settings(4, performance_mode="throughput")).max_num_batched_tokens == 8_192

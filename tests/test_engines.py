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
    assert (s.full_ratio, s.window_ratio) == (1, 1)  # one page size: no block lengthened (no window group at all)


def test_blocks_per_request_full_and_sliding():
    """gpt-oss-like: 1 full group + 1 sliding group, W 128, B 16, L 8,192, T 16,384, no state:
    full cdiv(8192, 16) = 512; sliding cdiv(min(127 + 16,384, 8,192), 16) + 1 = 512 + 1 = 513; total 1,025.
    A chunked group (C 128): cdiv(min(128 + 16,384, 8,192), 16) = 512, total 1,024."""
    x = {"block_size": 16, "max_model_len": 8192, "window": 128, "chunked": 0, "full_groups": 1,
         "window_groups": 1, "state_blocks": 0, "in_flight_tokens": 16_384}
    assert VLLM.blocks_per_request(x) == 1_025
    assert VLLM.blocks_per_request(x | {"chunked": 1}) == 1_024
    assert VLLM.blocks_per_request(x | {"state_blocks": 2}) == 1_027


def test_blocks_per_request_with_lengthened_blocks():
    """unify_kv_cache_spec_page_size: a kind whose page is half the largest holds 2 x B = 32 tokens a block.  The
    gpt-oss-like pool above with full_ratio 2: full cdiv(8,192, 32) = 256, sliding 513: 769; with window_ratio 2:
    full 512, sliding cdiv(min(127 + 16,384, 8,192), 32) + 1 = 256 + 1 = 257: 769."""
    x = {"block_size": 16, "max_model_len": 8192, "window": 128, "chunked": 0, "full_groups": 1,
         "window_groups": 1, "state_blocks": 0, "in_flight_tokens": 16_384}
    assert VLLM.blocks_per_request(x | {"full_ratio": 2}) == 769
    assert VLLM.blocks_per_request(x | {"window_ratio": 2}) == 769


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


def test_caps_balanced_mode_caps_tokens_by_the_undoubled_seqs():
    """_set_default_max_num_seqs_and_batched_tokens_args: batched tokens = min(max_num_seqs x max_model_len, default);
    on an H100 in balanced mode max_num_seqs is 1,024 (not doubled): at max_model_len 6, 1,024 x 6 = 6,144 < 8,192,
    so 6,144 ("capped" in the basis); at max_model_len 8, 1,024 x 8 = 8,192 is not below 8,192: the default stands
    and the basis does not say "capped"."""
    six = VLLM.caps(H100, Settings(6))
    assert (six.max_num_seqs, six.max_num_batched_tokens) == (1024, 6_144)
    assert six.tokens_basis == "default, capped at max_num_seqs x max_model_len = 6,144"
    eight = VLLM.caps(H100, Settings(8))
    assert (eight.max_num_batched_tokens, eight.tokens_basis) == (8_192, "default")


def test_caps_default_seqs_said_capped_only_below_the_tokens():
    """An unset max_num_seqs is min(default, max_num_batched_tokens): on an H100 the default 1,024 beside a given
    1,024 batched tokens stays 1,024 with the basis "default" (not "capped": 1,024 is not above 1,024); beside a
    given 1,000 it becomes 1,000, "capped at max_num_batched_tokens 1,000"."""
    same = VLLM.caps(H100, Settings(8192, max_num_batched_tokens=1024))
    assert (same.max_num_seqs, same.seqs_basis) == (1024, "default")
    below = VLLM.caps(H100, Settings(8192, max_num_batched_tokens=1000))
    assert (below.max_num_seqs, below.seqs_basis) == (1000, "default, capped at max_num_batched_tokens 1,000")


class TestCudagraphCaptureSizes:
    """VllmConfig._set_cudagraph_sizes (vllm/config/vllm.py, v0.33.0), no speculative decoding: the largest size is
    min(2 x max_num_seqs, 512; 1,024 on SM100), then at most max_num_batched_tokens; sizes 1, 2, 4 (1..min(largest,
    32) in interactivity mode), every 8 from 8 below min(largest + 1, 256), every 16 from 256 up to the largest,
    max_num_batched_tokens if within the largest, max_num_seqs if within the pre-token largest and the tokens."""

    def test_largest_is_twice_the_seqs(self):
        """200 seqs: largest min(400, 512) = 400: 1, 2, 4 (3) + 8..248 (31) + 256..400 by 16 (10) = 44 sizes."""
        from kvdash.engines.vllm import cudagraph_capture_sizes

        sizes = cudagraph_capture_sizes(200, 8192)
        assert (len(sizes), sizes[-2:]) == (44, [384, 400])

    def test_a_largest_of_exactly_256_captures_256(self):
        """128 seqs: largest min(256, 512) = 256 >= 256, so the 16-stride part is range(256, 257, 16) = [256]:
        3 + 31 + 1 = 35 sizes ending 248, 256 (128 is on the 8-grid)."""
        from kvdash.engines.vllm import cudagraph_capture_sizes

        sizes = cudagraph_capture_sizes(128, 8192)
        assert (len(sizes), sizes[-2:]) == (35, [248, 256])

    def test_decode_size_beyond_the_ceiling_is_not_captured(self):
        """513 seqs on Hopper: largest min(1,026, 512) = 512, and 513 > 512 is not added (the list ends at 512);
        1,025 seqs on Blackwell: min(2,050, 1,024) = 1,024, 1,025 not added; 300 seqs (within 512, off the
        16-stride: 300 - 256 = 44) is added."""
        from kvdash.engines.vllm import cudagraph_capture_sizes

        assert cudagraph_capture_sizes(513, 8192)[-2:] == [496, 512]
        assert cudagraph_capture_sizes(1025, 16384, blackwell=True)[-2:] == [1008, 1024]
        assert 300 in cudagraph_capture_sizes(300, 8192)

    def test_small_largest_sizes(self):
        """2 seqs: largest min(4, 512) = 4: [1, 2, 4] (4 <= 4 kept).  8 seqs, 15 batched tokens: largest
        min(16, 512) = 16, then min(15, 16) = 15: 1, 2, 4, the 8-grid below min(16, 256) is [8] (not 16), the
        tokens 15 appended: [1, 2, 4, 8, 15]."""
        from kvdash.engines.vllm import cudagraph_capture_sizes

        assert cudagraph_capture_sizes(2, 2048) == [1, 2, 4]
        assert cudagraph_capture_sizes(8, 15) == [1, 2, 4, 8, 15]

    def test_off_stride_token_count_is_the_largest(self):
        """200 seqs, 271 batched tokens: largest min(400, 512) = 400, then min(271, 400) = 271; the 16-stride part
        range(256, 272, 16) is [256] (not 272); 271 <= 271 and off the grid, so it is appended: 3 + 31 + 1 + 1 =
        36 sizes ending 256, 271."""
        from kvdash.engines.vllm import cudagraph_capture_sizes

        sizes = cudagraph_capture_sizes(200, 271)
        assert (len(sizes), sizes[-2:]) == (36, [256, 271])

    def test_interactivity_mode_every_size_to_32(self):
        """--performance-mode interactivity: 1..min(largest, 32).  10 seqs: largest 20: 1..20 (20 sizes; the 8-grid
        8, 16 and the decode 10 are among them).  1,024 seqs, 8,192 tokens: largest 512: 1..32 (32) + 8..248 by 8
        less 8, 16, 24, 32 (27) + 256..512 by 16 (17) = 76 sizes, 33 not among them."""
        from kvdash.engines.vllm import cudagraph_capture_sizes

        assert cudagraph_capture_sizes(10, 8192, performance_mode="interactivity") == list(range(1, 21))
        wide = cudagraph_capture_sizes(1024, 8192, performance_mode="interactivity")
        assert (len(wide), wide[:33] == list(range(1, 33)) + [40]) == (76, True)


def test_check_max_model_len_allows_up_to_model_max_length():
    """_get_and_verify_max_len (vllm/config/model.py): above the derived length, a config's model_max_length
    still allows max_model_len up to and including it (it raises when max_model_len > model_max_length):
    derived 4,096 with model_max_length 8,192 accepts 8,192 and refuses 8,193."""
    from kvdash.core.maxlen import DerivedMaxLen
    from kvdash.engines.vllm import check_max_model_len

    derived = DerivedMaxLen(4096, "max_position_embeddings", "hand-made", model_max_length=8192)
    check_max_model_len(8192, derived, allow_long=False)
    with pytest.raises(InputError) as err:
        check_max_model_len(8193, derived, allow_long=False)
    assert "User-specified max_model_len (8193)" in str(err.value)


class TestAttentionFreePool:
    """An attention-free model (vllm/model_executor/models/mamba.py): one group of every state layer, a block one
    MambaSpec page per layer; a request holds 2 blocks in align mode (prefix caching on), 3 with a Mamba-2
    prefill checkpoint, 1 with prefix caching off (MambaSpec.max_memory_usage_bytes, vllm/v1/kv_cache_interface.py)."""

    def test_mamba1_two_blocks_in_align_mode_one_without(self):
        """Mamba-130m (tests/data/configs, 24 Mamba-1 layers): page (1,536 x 3 + 1,536 x 16) x 2 B = 58,368 B;
        align mode 2 x 58,368 x 24 = 2,801,664 B per request; prefix caching off 1 x 58,368 x 24 = 1,400,832 B."""
        from pathlib import Path

        from kvdash.core.model import load_config

        arch = load_config(Path(__file__).parent / "data" / "configs" / "mamba-130m" / "config.json")
        (on,) = VLLM.pool(arch, "bf16", "tensor", 1, 1, 16, True)
        (off,) = VLLM.pool(arch, "bf16", "tensor", 1, 1, 16, False)
        assert (on.state_blocks, on.state_bytes, on.state_page_bytes, on.mamba_mode) == (2, 2_801_664, 58_368, "align")
        assert (off.state_blocks, off.state_bytes, off.mamba_mode) == (1, 1_400_832, "none")
        # no attention: no token bytes, no attention group, one group of all 24 state layers; a block is the 24
        # pages alone (16 x 0 x 24 + 1,400,832 B), and a request of any length holds its 2 state blocks
        assert (on.layer_token_bytes, on.bytes_per_token, on.full_groups, on.window_groups, on.window,
                on.attention_layers) == (0, 0, 0, 0, 0, 0)
        assert (on.group_size, on.state_layers, on.state_groups, on.groups, on.requested_block_size) \
            == (24, 24, 1, 1, 16)
        assert (on.fixed_block_bytes, on.block_bytes) == (1_400_832, 1_400_832)
        x = {"block_size": 16, "max_model_len": 2048, "window": on.window, "chunked": on.chunked,
             "full_groups": on.full_groups, "window_groups": on.window_groups, "state_blocks": on.state_blocks,
             "in_flight_tokens": 16_384}
        assert VLLM.blocks_per_request(x) == 2

    def test_mamba2_three_blocks_with_its_checkpoint(self):
        """24 Mamba-2 layers (MambaMixer2 always sets a prefill checkpoint block), inter 1,536, 1 group, 24 heads of
        64, d_state 128, d_conv 4: conv (4 - 1) x (1,536 + 2 x 1 x 128) = 5,376, ssm 24 x 64 x 128 = 196,608
        elements, x 2 B = 403,968 B a page; align mode 3 x 403,968 x 24 = 29,085,696 B per request."""
        from kvdash.core.arch import Architecture, Layer

        layer = Layer("mamba", state_family="mamba2", state=(1536, 1, 24, 64, 128, 4))
        (s,) = VLLM.pool(Architecture("mamba2-hand", (layer,) * 24, 0, 2048), "bf16", "tensor", 1, 1, 16, True)
        assert (s.state_blocks, s.state_page_bytes, s.state_bytes) == (3, 403_968, 29_085_696)


class TestPageSizeUnification:
    """unify_kv_cache_spec_page_size (vllm/v1/core/kv_cache_planning.py): a smaller attention page that divides the
    largest gets a block ratio x longer; one that does not is padded to the largest (ratio 1)."""

    def test_a_page_that_does_not_divide_is_padded(self):
        """4 full layers of 8 KV heads x (128 + 128) x 2 B = 4,096 B per token and 4 sliding ones (window 128) of 6
        heads = 3,072 B: pages 16 x 4,096 = 65,536 and 16 x 3,072 = 49,152 B; 65,536 % 49,152 != 0, so the sliding
        page is padded (window_ratio 1).  A request at L 8,192, T 16,384: full cdiv(8,192, 16) = 512, sliding
        cdiv(min(127 + 16,384, 8,192), 16) + 1 = 513: 1,025 blocks (a ratio of 2 would give 256 + 1 = 257)."""
        from kvdash.core.arch import Architecture, Layer

        full = Layer("full", kv_heads=8, head_dim=128, head_dim_v=128)
        sliding = Layer("sliding", kv_heads=6, head_dim=128, head_dim_v=128, window=128)
        (s,) = VLLM.pool(Architecture("hand", (full,) * 4 + (sliding,) * 4, 48, 8192), "bf16", "tensor", 1, 1, 16,
                         True)
        assert (s.layer_token_bytes, s.full_groups, s.window_groups, s.full_ratio, s.window_ratio) == (4096, 1, 1, 1, 1)
        x = {"block_size": 16, "max_model_len": 8192, "window": 128, "chunked": 0, "full_groups": 1,
             "window_groups": 1, "state_blocks": 0, "in_flight_tokens": 16_384, "full_ratio": s.full_ratio,
             "window_ratio": s.window_ratio}
        assert VLLM.blocks_per_request(x) == 1_025

    def test_no_full_group_keeps_ratio_one(self):
        """Mistral-7B-v0.1 (tests/data/configs): sliding_window 4,096 on all 32 layers: no full group, one sliding
        group of 32; both ratios stay 1 (the pool's stages in --json show them)."""
        from pathlib import Path

        from kvdash.core.model import load_config

        arch = load_config(Path(__file__).parent / "data" / "configs" / "mistral-7b-v0.1" / "config.json")
        (s,) = VLLM.pool(arch, "bf16", "tensor", 1, 1, 16, True)
        assert (s.full_groups, s.window_groups, s.group_size, s.full_ratio, s.window_ratio) == (0, 1, 32, 1, 1)


class TestOneRequestFits:
    """get_kv_cache_configs / _check_enough_kv_cache_memory (vllm/v1/core/kv_cache_planning.py): the memory left
    after the null block must hold one request at max_model_len: refused exactly when
    bytes_per_block x (blocks_per_request + 1) > available."""

    def test_exactly_one_request_beside_the_null_block_starts(self):
        """1,000-byte blocks, 9 per request: 1,000 x (9 + 1) = 10,000 <= 10,000 starts; 9,999 is refused (one
        request needs 9,000 B, the pool less its null block holds 8,999)."""
        from kvdash.engines.vllm import check_one_request_fits

        check_one_request_fits(10_000, 1_000, 9, 144, 0)
        with pytest.raises(InputError) as err:
            check_one_request_fits(9_999, 1_000, 9, 144, 128)
        assert "9 blocks of 1,000 B for one request, 9 in the pool" in str(err.value)
        assert "lower it to 128 or less" in str(err.value)

    def test_one_byte_blocks_are_checked_too(self):
        """Only a pool of zero-byte blocks skips the check: 1-byte blocks, 10 per request, a 10-byte budget:
        1 x (10 + 1) = 11 > 10: refused."""
        from kvdash.engines.vllm import check_one_request_fits

        with pytest.raises(InputError):
            check_one_request_fits(10, 1, 10, 160, 0)

    def test_the_refusal_quotes_vllms_message(self):
        """Llama-3.1-405B, tp 1, bf16, block 16: 8,257,536 B a block, 2,048 blocks at max_model_len 32,768, a 12 GiB
        budget.  _check_enough_kv_cache_memory's words, with format_gib = round(b / 2^30, 2): needed 8,257,536 x
        2,048 = 16,911,433,728 B = 15.75 GiB; available 12,884,901,888 - 8,257,536 = 12,876,644,352 B = 11.992...
        -> 11.99 GiB; the pool 12,884,901,888 // 8,257,536 = 1,560 blocks.  With an estimate of 0 the "Based on the
        available memory" sentence and the "lower it to" fix are left out."""
        from kvdash.engines.vllm import check_one_request_fits

        with pytest.raises(InputError) as err:
            check_one_request_fits(12 * 2**30, 8_257_536, 2048, 32768, 24944)
        text = str(err.value)
        assert ("\"To serve at least one request with the model's max seq len (32768), (15.75 GiB KV cache is needed, "
                "which is larger than the available KV cache memory (11.99 GiB). Based on the available memory, the "
                "estimated maximum model length is 24944.\"") in text
        assert "2,048 blocks of 8,257,536 B for one request, 1,560 in the pool of which one is its null block" in text
        assert "lower it to 24,944 or less, or give the KV cache more memory" in text
        with pytest.raises(InputError) as err:
            check_one_request_fits(12 * 2**30, 8_257_536, 2048, 32768, 0)
        text = str(err.value)
        assert "memory (11.99 GiB).\" (vllm/v1" in text and "Based on" not in text
        assert "lower it to" not in text and "or give the KV cache more memory" in text
        with pytest.raises(InputError) as err:  # 2,047 blocks: 8,257,536 x 2,047 = 16,903,176,192 B = 15.742... GiB
            check_one_request_fits(12 * 2**30, 8_257_536, 2047, 32752, 24944)
        assert "(15.74 GiB KV cache is needed" in str(err.value)
        with pytest.raises(InputError) as err:  # an estimate of 1 token is still one (estimated_max_len > 0)
            check_one_request_fits(12 * 2**30, 8_257_536, 2048, 32768, 1)
        assert "the estimated maximum model length is 1.\"" in str(err.value)
        assert "lower it to 1 or less, or give" in str(err.value)


class TestKvDtypeAuto:
    """--kv-cache-dtype auto (EngineArgs.create_engine_config, vllm/engine/arg_utils.py; resolve_kv_cache_dtype_string,
    vllm/utils/torch_utils.py): a ModelOpt checkpoint's static 8-bit float KV scheme is fp8_e4m3, a 4-bit float one
    nvfp4 (refused: not mirrored), anything else the model dtype."""

    @staticmethod
    def _arch(scheme: dict, model_type: str = "", mla: bool = False):
        from kvdash.core.arch import Architecture, Layer

        layer = (Layer("mla", kv_heads=1, kv_lora_rank=512, qk_rope_head_dim=64) if mla
                 else Layer("full", kv_heads=8, head_dim=128, head_dim_v=128))
        return Architecture("hand", (layer,), 8, 4096, model_type=model_type,
                            facts={"quantization_config": {"quant_method": "modelopt", "kv_cache_scheme": scheme}})

    STATIC_FP8 = {"dynamic": False, "num_bits": 8, "type": "float"}

    def test_static_8_bit_float_is_fp8_e4m3(self):
        from kvdash.engines.vllm import resolve_auto_kv_dtype

        assert resolve_auto_kv_dtype(self._arch(self.STATIC_FP8))[0] == "fp8_e4m3"
        assert resolve_auto_kv_dtype(self._arch(self.STATIC_FP8 | {"dynamic": True})) == ("bf16", "")

    def test_4_bit_float_is_refused(self):
        from kvdash.engines.vllm import resolve_auto_kv_dtype

        with pytest.raises(InputError) as err:
            resolve_auto_kv_dtype(self._arch({"num_bits": 4, "type": "float"}))
        assert "NVFP4" in str(err.value)

    def test_auto_then_ignored_by_falcon(self):
        """Falcon's attention ignores the KV dtype: auto's fp8_e4m3 is stored as bf16, both reasons given."""
        from kvdash.engines.vllm import stored_kv_dtype

        stored, why = stored_kv_dtype(self._arch(self.STATIC_FP8, model_type="falcon"), "auto")
        assert stored == "bf16" and why.startswith("auto: the checkpoint's ModelOpt quantization_config")
        assert "; then vllm/model_executor/models/falcon.py" in why

    def test_auto_block_size_takes_the_resolved_dtype(self):
        """MLA with auto resolved to fp8_e4m3 on Hopper runs FlashMLA: 64-token blocks (bf16 would give 16)."""
        from kvdash.engines.vllm import auto_block_size

        assert auto_block_size(self._arch(self.STATIC_FP8, mla=True), "auto")[0] == 64


def test_a_state_page_larger_than_the_attention_page_is_refused():
    """Zamba2-7B (tests/data/configs), tp 1, block 16: its layers' state page (962,048 B) exceeds the attention page
    the block was aligned to, 16 x 28,672 B per token (32 KV heads x (224 + 224) x 2 B) = 458,752 B: MambaSpec's
    page_size_padded assertion stops vLLM 0.33; the fix is cdiv(962,048, 28,672) = 34 tokens (28,672 x 33 =
    946,176 is too small)."""
    from pathlib import Path

    from kvdash.core.model import load_config
    from kvdash.engines.vllm import aligned_block_size

    arch = load_config(Path(__file__).parent / "data" / "configs" / "zamba2-7b" / "config.json")
    with pytest.raises(InputError) as err:
        aligned_block_size(arch, "bf16", "tensor", 1, 16)
    assert "its layers hold 962,048 B, more than the 458,752 B attention page of 16 tokens" in str(err.value)
    assert "a --block-size of at least 34 tokens" in str(err.value)

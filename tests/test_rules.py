"""Each rule of the capacity formulas and of ``point_metrics``, pinned to the value it must give.

Every expected value is worked by hand in the docstring, so a failure names the rule that broke
(issue 17: before these, many rules were caught only by the byte-identical report test).
"""

from __future__ import annotations

import pytest

from kvdash.core import formulas as f
from kvdash.core.point import point_metrics, workload_inputs
from kvdash.engines.vllm import RULES as VLLM

# A small hand-checkable shape: 2 full layers of 100 B per token each (layer_token_bytes 100,
# one group of 2 layers), block 16 -> block bytes 16 x 100 x 2 = 3,200.
SMALL = {
    "block_size": 16, "layer_token_bytes": 100, "group_size": 2, "full_groups": 1, "window_groups": 0,
    "window": 0, "full_token_bytes": 200, "window_token_bytes": 0, "state_bytes": 0, "state_blocks": 0, "chunked": 0,
    "max_reserved": 64, "prefix": 0, "max_model_len": 64, "max_batched_tokens": 2048,
    "in_flight_tokens": 4096,  # vLLM 0.33 max_in_flight_tokens: 2 batches in flight (async scheduling) x 2,048
}


def metrics(budget: int, lengths: tuple[int, ...], finals: tuple[int, ...] | None = None, **over: int) -> dict:
    return point_metrics(SMALL | over | {"budget": budget} | workload_inputs(lengths, finals), VLLM.blocks_per_request)


class TestFormulas:
    def test_window_blocks_when_window_is_two_above_a_block_multiple(self):
        """W = 18, B = 16: the last 18 positions span cdiv(17, 16) + 1 = 2 + 1 = 3 blocks (they can start
        at the last slot of one block); a request of 10,000 tokens needs those 3, not cdiv(10000, 16)."""
        assert f.window_blocks(10_000, 18, 16) == 3

    def test_window_blocks_never_exceed_the_request(self):
        """n = 20 < W: the request's own cdiv(20, 16) = 2 blocks, not the window's 3."""
        assert f.window_blocks(20, 18, 16) == 2

    def test_imin_imax_on_equal_and_unequal(self):
        """min/max of (4, 9) and (9, 4) are 4 and 9 either way round."""
        assert (f.imin(4, 9), f.imin(9, 4), f.imax(4, 9), f.imax(9, 4)) == (4, 4, 9, 9)

    def test_contiguous_request_bytes_adds_the_recurrent_state(self):
        """reserved 100, full 200 B/token, window 50 B/token with W = 30, state 7,000 B:
        200 x 100 + 50 x min(100, 30) + 7,000 = 20,000 + 1,500 + 7,000 = 28,500."""
        assert f.contiguous_request_bytes(100, 200, 50, 30, 7_000) == 28_500

    def test_contiguous_window_layers_hold_only_what_was_reserved(self):
        """reserved 10 < W = 30: the sliding layers hold 10 tokens: 200 x 10 + 50 x 10 = 2,500."""
        assert f.contiguous_request_bytes(10, 200, 50, 30, 0) == 2_500

    def test_block_bytes_multiplies_tokens_layers_and_group(self):
        """16 tokens x 100 B x 2 layers = 3,200 B."""
        assert f.block_bytes(16, 100, 2) == 3_200

    def test_request_blocks_sum_full_and_window_groups(self):
        """n = 100, B = 16, 2 full groups, 3 window groups, W = 18:
        2 x cdiv(100, 16) + 3 x (cdiv(17, 16) + 1) = 2 x 7 + 3 x 3 = 23."""
        assert f.request_blocks(100, 16, 2, 3, 18) == 23

    def test_weights_per_rank_rounds_up(self):
        """10 bytes on 4 ranks: cdiv(10, 4) = 3 bytes on the fullest rank."""
        assert f.weights_per_rank(10, 4) == 3


class TestGroups:
    def test_group_figures_multiply_by_the_group_size(self):
        """Lengths (20, 40), B 16, block 3,200 B.  Blocks: cdiv(20,16) + cdiv(40,16) = 2 + 3 = 5, so a group
        holds 5 x 3,200 = 16,000 B.  Budget 100,000 B: 100,000 // 16,000 = 6 complete groups = 12 requests.
        Max reserves 64 tokens x 200 B = 12,800 B a request, 25,600 a group: 100,000 // 25,600 = 3 groups
        = 6 requests."""
        m = metrics(100_000, (20, 40))
        assert m["paged_blocks"] == 5
        assert m["paged_bytes"] == 16_000
        assert (m["complete_groups"], m["paged_requests"]) == (6, 12)
        assert m["contiguous_max_bytes"] == 25_600
        assert (m["contiguous_complete_groups"], m["contiguous_requests"]) == (3, 6)
        assert m["request_capacity_ratio"] == 2.0

    def test_longest_request_when_it_is_not_last(self):
        """Lengths (50, 20): the offload figures follow the longest, 50 tokens: 50 x 200 = 10,000 useful B,
        cdiv(50, 16) = 4 blocks = 12,800 allocated B."""
        m = metrics(100_000, (50, 20))
        assert m["offload_tokens"] == 50
        assert (m["offload_useful_bytes"], m["offload_allocated_bytes"]) == (10_000, 12_800)

    def test_slots_and_waste_percentages(self):
        """Lengths (20, 40): useful 60 slots, allocated 32 + 48 = 80, tail 20 -> 25 % internal waste.
        Bytes: useful 60 x 200 = 12,000 of 16,000 paged -> 25 % paged waste; Max holds 25,600 for 12,000
        useful -> (25,600 - 12,000) / 25,600 = 53.125 % reservation waste."""
        m = metrics(100_000, (20, 40))
        assert (m["useful_slots"], m["allocated_slots"], m["tail_waste_slots"]) == (60, 80, 20)
        assert m["paged_internal_waste_percent"] == 25.0
        assert m["useful_bytes"] == 12_000
        assert m["paged_waste_percent"] == 25.0
        assert m["reservation_waste_percent"] == 53.125

    def test_pow2_and_oracle_use_final_lengths(self):
        """Used (20, 40), finals (30, 33), max 64: Pow2 reserves 32 + 64 = 96 tokens -> 19,200 B a group,
        100,000 // 19,200 = 5 groups = 10 requests; Oracle reserves 30 + 33 = 63 tokens -> 12,600 B,
        7 groups = 14 requests."""
        m = metrics(100_000, (20, 40), (30, 33))
        assert m["contiguous_pow2_bytes"] == 19_200 and m["pow2_requests"] == 10
        assert m["contiguous_oracle_bytes"] == 12_600 and m["oracle_requests"] == 14

    def test_pow2_ignores_padded_zero_lengths(self):
        """A grid pads short groups with zero lengths; next_pow2(0) is 1 but an absent request reserves 0:
        group (20,) padded with l1 = f1 = 0 reserves only 32 tokens = 6,400 B."""
        x = SMALL | {"budget": 100_000, "k": 1, "l0": 20, "f0": 20, "l1": 0, "f1": 0}
        assert point_metrics(x, VLLM.blocks_per_request)["contiguous_pow2_bytes"] == 6_400

    def test_recurrent_state_counts_once_per_request_in_every_policy(self):
        """State 1,000 B a request, lengths (20, 40): paged 16,000 + 2 x 1,000 = 18,000; Max 25,600 + 2,000
        = 27,600; Pow2 (32 + 64) x 200 + 2,000 = 21,200; Oracle (20 + 40) x 200 + 2,000 = 14,000; useful
        12,000 + 2,000 = 14,000."""
        m = metrics(100_000, (20, 40), state_bytes=1_000)
        assert m["paged_bytes"] == 18_000
        assert m["contiguous_max_bytes"] == 27_600
        assert m["contiguous_pow2_bytes"] == 21_200
        assert m["contiguous_oracle_bytes"] == 14_000
        assert m["useful_bytes"] == 14_000
        assert m["offload_useful_bytes"] == 40 * 200 + 1_000
        assert m["offload_allocated_bytes"] == 3 * 3_200 + 1_000

    def test_useful_bytes_past_the_window(self):
        """Full 200 B/token plus sliding 50 B/token with W = 18: a 40-token request's useful bytes are
        200 x 40 + 50 x min(40, 18) = 8,000 + 900 = 8,900."""
        m = metrics(100_000, (40,), window_groups=1, window=18, window_token_bytes=50)
        assert m["useful_bytes"] == 8_900


class TestPool:
    def test_pool_blocks_and_leftover(self):
        """Budget 100,000 B, block 3,200 B: 31 blocks (99,200 B) and 800 B left over; one group of layers
        so 31 x 16 = 496 token slots backed by blocks; token slots without blocks 100,000 // 200 = 500."""
        m = metrics(100_000, (20,))
        assert (m["whole_pool_blocks"], m["leftover_bytes"]) == (31, 800)
        assert m["block_backed_token_slots"] == 496
        assert m["kv_token_slots"] == 500

    def test_block_backed_tokens_divide_by_the_number_of_groups(self):
        """Two groups (1 full + 1 window) share the pool: 31 blocks // 2 = 15 per group -> 240 tokens."""
        m = metrics(100_000, (20,), window_groups=1, window=18, window_token_bytes=200)
        assert m["kv_groups"] == 2
        assert m["block_backed_token_slots"] == 240

    def test_vllm_max_concurrency(self):
        """max_model_len 64, B 16: cdiv(64, 16) = 4 blocks a request; 31 / 4 = 7.75x."""
        m = metrics(100_000, (20,))
        assert m["vllm_blocks_per_request"] == 4
        assert m["vllm_max_concurrency"] == 7.75

    def test_vllm_window_blocks_per_request(self):
        """One window group, W = 18, in-flight tokens T = 10, L 64: cdiv(min(17 + 10, 64), 16) + 1 = 2 + 1 = 3,
        plus the full group's 4 = 7 blocks."""
        m = metrics(100_000, (20,), window_groups=1, window=18, window_token_bytes=200, in_flight_tokens=10)
        assert m["vllm_blocks_per_request"] == 7

    def test_vllm_chunked_blocks_per_request(self):
        """Chunked local attention (chunked = 1), chunk C = 17, in-flight tokens T = 16, L 64, B 16: vLLM
        0.33 bounds a chunked group by cdiv(min(C + T, L), B) = cdiv(33, 16) = 3 blocks (no "+ 1": a chunk
        starts on its own boundary), plus the full group's cdiv(64, 16) = 4: 7 blocks."""
        m = metrics(100_000, (20,), window_groups=1, window=17, window_token_bytes=200, in_flight_tokens=16,
                    chunked=1)
        assert m["vllm_blocks_per_request"] == 7

    @pytest.mark.parametrize(("batched", "expected"), [(15, 4 + 3), (16, 4 + 4)])
    def test_vllm_window_bound_at_a_block_boundary(self, batched, expected):
        """W = 18, B = 16, L 64: the window group needs cdiv(W - 1 + T, B) + 1 blocks.  T = 15: 17 + 15 = 32
        positions = exactly 2 blocks, + 1 = 3; T = 16: 33 positions = 3 blocks, + 1 = 4 (each plus the full
        group's cdiv(64, 16) = 4).  One position more or less on either side of W - 1 would cross the
        boundary, so this pins the "- 1"."""
        m = metrics(100_000, (20,), window_groups=1, window=18, window_token_bytes=200, in_flight_tokens=batched)
        assert m["vllm_blocks_per_request"] == expected


class TestPrefix:
    def test_prefix_shared_and_saved_bytes(self):
        """Prefix 32 tokens = 2 whole blocks (6,400 B) shared by every request.  Lengths (40,): each request
        holds 3 blocks, 1 of its own.  Budget 100,000: paged 100,000 // 9,600 = 10 requests; with sharing
        (100,000 - 6,400) // 3,200 = 29 requests.  Saved: (10 - 1) x 6,400 = 57,600 B of 96,000 = 60 %."""
        m = metrics(100_000, (40,), prefix=32)
        assert (m["prefix_shared_blocks"], m["prefix_shared_bytes"]) == (2, 6_400)
        assert m["prefix_own_bytes"] == 3_200
        assert m["paged_requests"] == 10
        assert m["requests_with_prefix_sharing"] == 29
        assert m["prefix_saved_bytes"] == 57_600
        assert m["prefix_saved_percent"] == 60.0

    def test_prefix_counts_whole_blocks_only(self):
        """A 31-token prefix fills 31 // 16 = 1 whole block: only that block can be shared."""
        assert metrics(100_000, (40,), prefix=31)["prefix_shared_blocks"] == 1

    def test_one_request_saves_nothing(self):
        """Budget 9,600 B holds exactly one 3-block request: max(1 - 1, 0) x 6,400 = 0 B saved."""
        m = metrics(9_600, (40,), prefix=32)
        assert m["paged_requests"] == 1
        assert (m["prefix_saved_bytes"], m["prefix_saved_percent"]) == (0, 0.0)

    def test_no_request_saves_nothing(self):
        """Budget 9,599 B holds no request: saved bytes max(0 - 1, 0) x 6,400 = 0, never negative."""
        m = metrics(9_599, (40,), prefix=32)
        assert m["paged_requests"] == 0
        assert m["prefix_saved_bytes"] == 0

    def test_budget_smaller_than_the_prefix(self):
        """Budget 6,000 B < the 6,400 B prefix: no request fits with sharing (max(6,000 - 6,400, 0) // 3,200 = 0)."""
        assert metrics(6_000, (40,), prefix=32)["requests_with_prefix_sharing"] == 0


    def test_group_with_prefix_counts_requests_not_groups(self):
        """Lengths (40, 40), prefix 32: a group of k = 2 requests holds 2 x 3 = 6 blocks, 2 x 2 of them the
        shared prefix, so it owns (6 - 2 x 2) x 3,200 = 6,400 B; the prefix is 2 blocks = 6,400 B, stored once.
        Budget 100,000: (100,000 - 6,400) // 6,400 = 93,600 // 6,400 = 14 groups, x 2 = 28 requests (the
        rule multiplies by the group size; 14 // 2 would give 7)."""
        m = metrics(100_000, (40, 40), prefix=32)
        assert (m["prefix_shared_bytes"], m["prefix_own_bytes"]) == (6_400, 6_400)
        assert m["requests_with_prefix_sharing"] == 28

    def test_budget_equal_to_the_prefix_leaves_no_request(self):
        """A shape of 1 B per token and 1-token blocks, length 2, prefix 1: the prefix is 1 block = 1 B, each
        request owns 1 block = 1 B.  Budget 1 B = the prefix: max(1 - 1, 0) // 1 = 0 requests with sharing
        (the floor is 0 bytes left, not 1); budget 2 B: (2 - 1) // 1 = 1."""
        one_byte = {"block_size": 1, "layer_token_bytes": 1, "group_size": 1, "full_token_bytes": 1}
        assert metrics(1, (2,), prefix=1, **one_byte)["requests_with_prefix_sharing"] == 0
        assert metrics(2, (2,), prefix=1, **one_byte)["requests_with_prefix_sharing"] == 1


@pytest.mark.parametrize(("n", "expected"), [(825, 1024), (1024, 1024), (1025, 2048), (1, 1), (2, 2), (3, 4)])
def test_next_pow2(n, expected):
    """Smallest power of two >= n, at and around the powers."""
    assert f.next_pow2(n) == expected


class TestPointRulesFoundByMutation:
    """kvdash/core/point.py's rules a mutation run of 2026-12-07 found unguarded by these files, worked by hand."""

    def test_a_fixed_part_of_each_block_is_added_to_its_bytes(self):
        """fixed_block_bytes (a sparse-MLA indexer's or a state page's share of every block) adds to the block:
        16 x 100 x 2 = 3,200 + 800 = 4,000 B; 32,000 B hold 8 blocks."""
        m = metrics(32_000, (16,), fixed_block_bytes=800)
        assert (4_000, 8) == (m["block_bytes"], m["whole_pool_blocks"])

    def test_a_window_kind_without_a_page_ratio_takes_one(self):
        """A window group of 32 tokens beside the full one, no window_ratio given (a model whose layers share one
        page size): 100 tokens hold ceil(100 / 16) = 7 full blocks + min(7, ceil(31 / 16) + 1) = 3 window blocks."""
        m = metrics(10**6, (100,), window_groups=1, window=32, window_token_bytes=100)
        assert 10 == m["paged_blocks"]

    def test_an_attention_free_pool_counts_its_blocks_and_bytes_without_dividing_by_zero(self):
        """mamba-130m: no attention group (kv_groups 0) and 0 KV bytes a token; a block is its state page,
        1,400,832 B.  10^9 B hold 713 blocks (713 x 1,400,832 = 998,793,216), block-backed slots 713 x 16 = 11,408
        (the groups counted as at least 1), and the token-slot figure divides by at least 1 B: 10^9."""
        from kvdash.core.model import load_config
        from kvdash.core.point import shape_inputs
        from kvdash.engines.vllm import rank_shapes

        arch = load_config("tests/data/configs/mamba-130m/config.json")
        shape = rank_shapes(arch, "bf16", "tensor", 1, 1, 16)[0]
        m = metrics(10**9, (100,), **shape_inputs(shape))
        assert (0, 0, 1_400_832) == (m["kv_groups"], m["bytes_per_token"], m["block_bytes"])
        assert (713, 11_408, 10**9) == (m["whole_pool_blocks"], m["block_backed_token_slots"], m["kv_token_slots"])

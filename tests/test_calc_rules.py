"""Each rule of kvdash/answer/calc.py and the vLLM rules it composes (kvdash/engines/vllm.py) pinned by a
hand-worked value (issue 17): planning, input checks, layer bytes, pool layout, policies and sensitivity.
Fast (no CLI, no Hypothesis), so the mutation driver runs it first for every mutant of calc.py.

The planning tests use ``MHA64``: one full-attention layer with 64 KV heads of head_dim 64, so one token is
64 x (64 + 64) x 2 B = 16,384 B at TP 1 and 16,384 / t at TP t (64 heads split t ways); a 16-token block is
262,144 / t B.  With an explicit budget of 10 such blocks per rank (2,621,440 B, the same at every TP) a rank
holds 10 x t blocks, so 10 x t requests of 16 tokens (one block each).
"""

from __future__ import annotations

import pytest

from kvdash.answer.budget import BudgetSpec, resolve_budget
from kvdash.answer.calc import TP_CANDIDATES, CalcInput, _min_util, calculate, upper_bound_line
from kvdash.core.model import Architecture, Layer, load_preset
from kvdash.core.pool import layer_token_bytes
from kvdash.engines.vllm import auto_block_size, group_size_for, rank_shapes, shape_of, stage_layers
from kvdash.errors import InputError

MHA64 = Architecture("mha64", (Layer("full", kv_heads=64, head_dim=64, head_dim_v=64),), 64, 4096)
TEN_BLOCKS = 10 * 262_144
TUTORIAL = load_preset("tutorial-gqa-80l")  # 80 full layers, 8 KV heads, head_dim 128: 327,680 B/token in bf16


def _plan(target: int, **kw) -> dict:
    kw.setdefault("budget", BudgetSpec(bytes=TEN_BLOCKS))
    return calculate(CalcInput(MHA64, used=16, max_reserved=16, target=target, **kw))["planning"]


class TestPlanning:
    @pytest.mark.parametrize(("target", "tp"), [(10, 1), (11, 2), (20, 2), (21, 4), (40, 4), (41, 8), (80, 8),
                                                (81, 16), (160, 16), (161, 32), (320, 32), (321, 64), (640, 64),
                                                (641, None)])
    def test_min_tp(self, target, tp):
        """10 x t requests fit at TP t: the smallest t of 1, 2, 4, ..., 64 with 10 t >= target (None past 640)."""
        assert TP_CANDIDATES == (1, 2, 4, 8, 16, 32, 64)
        assert _plan(target)["min_tp"] == tp

    def test_budget_needed_and_equality_fits(self):
        """Needed: target x 262,144 B at TP 1.  10 requests need 2,621,440 B = the budget: fits (<=); 11 need
        2,883,584 B: does not."""
        p = _plan(10)
        assert (p["budget_needed_per_rank_bytes"], p["fits_current_budget"]) == (2_621_440, True)
        p = _plan(11)
        assert (p["budget_needed_per_rank_bytes"], p["fits_current_budget"]) == (2_883_584, False)

    @pytest.mark.parametrize(("target", "longest"), [(1, 160), (2, 80), (3, 48), (10, 16), (11, 0)])
    def test_longest_uniform_tokens(self, target, longest):
        """10 blocks of 16 tokens: 1 request reaches 160 tokens, 2 reach 80 (5 blocks each), 3 reach 48
        (3 blocks each, 9 of 10), 10 reach 16; 11 requests cannot hold even one token each: 0."""
        p = _plan(target)
        assert (p["longest_uniform_tokens"], p["longest_limited_by_context"]) == (longest, False)

    def test_longest_limited_by_context(self):
        """A budget of 1,000 blocks: one request reaches the model's 4,096-token context (256 blocks)."""
        p = _plan(1, budget=BudgetSpec(bytes=1000 * 262_144))
        assert (p["longest_uniform_tokens"], p["longest_limited_by_context"]) == (4096, True)

    def test_longest_with_a_prefix(self):
        """With a 16-token prefix the search starts at the prefix; 11 requests fit no token past it: 0.
        1 request: 16 tokens shared, the rest its own; 10 blocks hold 160 tokens."""
        p = calculate(CalcInput(MHA64, used=20, max_reserved=20, prefix=16, target=11,
                                budget=BudgetSpec(bytes=TEN_BLOCKS)))["planning"]
        assert p["longest_uniform_tokens"] == 0
        p = calculate(CalcInput(MHA64, used=20, max_reserved=20, prefix=16, target=1,
                                budget=BudgetSpec(bytes=TEN_BLOCKS)))["planning"]
        assert p["longest_uniform_tokens"] == 160

    def test_regression_prefix_equal_to_used(self):
        """Bug found by issue 17's calc tests: ``kvdash calc --used 16 --max-reserved 16 --prefix 16`` raised
        ZeroDivisionError (a request that is all shared prefix owns 0 bytes: capacity = budget // 0), and so did
        --used 24 --prefix 24 at block 16 through its 'block size 8' sensitivity row.  Now one line on --prefix;
        a prefix one token shorter than the request is fine: 15 shared of 16 at block 16 shares no whole block,
        so each request owns its block: 10 requests with or without sharing."""
        for used in (16, 24):
            with pytest.raises(InputError) as e:
                calculate(CalcInput(MHA64, used=used, max_reserved=used, prefix=used,
                                    budget=BudgetSpec(bytes=TEN_BLOCKS)))
            assert e.value.field == "--prefix" and e.value.allowed.startswith(f"must be below --length={used}")
        r = calculate(CalcInput(MHA64, used=16, max_reserved=16, prefix=15, budget=BudgetSpec(bytes=TEN_BLOCKS)))
        assert r["prefix"]["requests_with_sharing"] == 10

    def test_min_gpu_util_trtllm_and_vllm(self):
        """GPU of 10,000,000 B, weights 1,000,000 B, 31 requests need 31 x 262,144 = 8,126,464 B per rank.
        trtllm: 8,126,464 / (10,000,000 - 1,000,000) = 0.9029 -> 0.91 (floor(9,000,000 x 0.91) = 8,190,000).
        vllm: (8,126,464 + 1,000,000) / 10,000,000 = 0.9126 -> 0.92 (9,200,000 - 1,000,000 = 8,200,000)."""
        spec = BudgetSpec(gpu_memory=10_000_000, weights=1_000_000, policy="trtllm", util="0.9")
        assert _plan(31, budget=spec)["min_gpu_util"] == 0.91
        spec = BudgetSpec(gpu_memory=10_000_000, weights=1_000_000, policy="vllm", util="0.9")
        assert _plan(31, budget=spec)["min_gpu_util"] == 0.92


class TestMinUtil:
    def test_exact_at_equality(self):
        """vllm: (500 + 100) / 1,000 = 0.60 exactly and floor(1,000 x 0.60) - 100 = 500 >= 500: 0.60.
        trtllm: 450 / (1,000 - 100) = 0.50: floor(900 x 0.50) = 450: 0.50."""
        assert _min_util(500, 1000, 100, "vllm") == 0.6
        assert _min_util(450, 1000, 100, "trtllm") == 0.5

    def test_full_memory_and_beyond(self):
        """vllm: 900 + 100 of 1,000 needs 1.00 (allowed); 901 needs more than the GPU: None.
        trtllm: nothing free when the fixed part is the whole GPU (1,000 of 1,000) or more: None."""
        assert _min_util(900, 1000, 100, "vllm") == 1.0
        assert _min_util(901, 1000, 100, "vllm") is None
        assert _min_util(1, 1000, 1000, "trtllm") is None
        assert _min_util(1, 1000, 1001, "trtllm") is None
        assert _min_util(1, 1000, 999, "trtllm") == 1.0  # 1 / 1 free byte


class TestInputChecks:
    def test_tp_zero_is_one_line_error(self):
        with pytest.raises(InputError) as e:
            calculate(CalcInput(TUTORIAL, tp=0))
        assert e.value.field == "--tp"

    def test_pp_limits(self):
        """PP above 1 is refused for a model whose 2 decoder layers hold 4 cache layers (the split is not
        modeled); PP 1 is fine.  On a plain 4-layer model PP 4 is the most (one layer a stage), PP 5 refused."""
        dec = Architecture("dec", (FULL8,) * 4, 64, 4096, decoder_layers=2)
        assert len(rank_shapes(dec, pp=1)) == 1
        with pytest.raises(InputError) as e:
            rank_shapes(dec, pp=2)
        assert e.value.field == "--pp" and "2 decoder layers hold 4 cache layers" in e.value.allowed
        plain = Architecture("plain", (FULL8,) * 4, 64, 4096)
        assert len(rank_shapes(plain, pp=4)) == 4
        with pytest.raises(InputError) as e:
            rank_shapes(plain, pp=5)
        assert e.value.allowed == "at most the number of layers (4)"

    def test_weights_zero_accepted_negative_refused(self):
        """--weights 0: vllm budget floor(10,000,000 x 0.92) - 0 - 0 = 9,200,000; -1 refused; --reserve -1
        refused, --reserve 0 accepted."""
        spec = BudgetSpec(gpu_memory=10_000_000, weights=0)
        assert resolve_budget(spec, MHA64, 1, 1)["per_rank_bytes"] == 9_200_000
        for bad, field in ((BudgetSpec(gpu_memory=10_000_000, weights=-1), "--weights"),
                           (BudgetSpec(gpu_memory=10_000_000, weights=0, reserve=-1), "--reserve")):
            with pytest.raises(InputError) as e:
                resolve_budget(bad, MHA64, 1, 1)
            assert e.value.field == field

    def test_trtllm_budget_and_shortfall(self):
        """trtllm: floor((10,000,000 - 4,000,000 / 2 ranks - 1,000) x 0.5) = 3,999,500.  A budget of nothing:
        weights 20,000,000 on one rank -> 0, fits false, shortfall 0 for trtllm (max(requested, 0));
        vllm: 9,200,000 - 20,000,000 = -10,800,000 -> shortfall 10,800,000."""
        spec = BudgetSpec(gpu_memory=10_000_000, weights=4_000_000, reserve=1000, policy="trtllm", util="0.5")
        info = resolve_budget(spec, MHA64, 2, 1)
        assert (info["per_rank_bytes"], info["weights_per_rank_bytes"], info["requested_bytes"]) == \
               (3_999_500, 2_000_000, 7_999_000)
        spec = BudgetSpec(gpu_memory=10_000_000, weights=20_000_000)
        assert resolve_budget(spec, MHA64, 1, 1, strict=False) == {
            "per_rank_bytes": 0, "fits": False, "source": "vllm",
            "formula": "floor(total x util) - weights/rank - reserve", "shortfall_bytes": 10_800_000}
        with pytest.raises(InputError):
            resolve_budget(spec, MHA64, 1, 1)

    def test_budget_of_zero_is_nothing_left(self):
        """vllm: floor(1,000 x 0.5) - 500 = 0 B: nothing left (fits false, shortfall 0; strict: one line).
        trtllm at util 1: weights 2,000 of 1,000 -> requested -1,000, floored at 0: budget 0, not 1."""
        spec = BudgetSpec(gpu_memory=1000, weights=500, util="0.5")
        assert resolve_budget(spec, MHA64, 1, 1, strict=False)["shortfall_bytes"] == 0
        with pytest.raises(InputError):
            resolve_budget(spec, MHA64, 1, 1)
        spec = BudgetSpec(gpu_memory=1000, weights=2000, util="1", policy="trtllm")
        assert resolve_budget(spec, MHA64, 1, 1, strict=False)["per_rank_bytes"] == 0
        assert resolve_budget(spec, MHA64, 1, 1, strict=False)["shortfall_bytes"] == 0

    def test_weights_split_over_tp_times_pp(self):
        """TP 2 x PP 2 = 4 ranks: 4,000,000 B of weights -> 1,000,000 per rank (TP // PP would give 1 rank)."""
        spec = BudgetSpec(gpu_memory=10_000_000, weights=4_000_000, util="0.5")
        assert resolve_budget(spec, MHA64, 2, 2)["weights_per_rank_bytes"] == 1_000_000

    def test_positive_fields_and_group_bound(self):
        """--block-size 0 is refused; a group length equal to --max-reserved (2,048) is allowed."""
        with pytest.raises(InputError) as e:
            calculate(CalcInput(TUTORIAL, block_size=0))
        assert e.value.field == "--block-size"
        assert calculate(CalcInput(TUTORIAL, group=(2048,)))["group"]["lengths"] == [2048]

    def test_budget_of_one_byte_is_positive(self):
        """vllm: floor(1,000 x 0.5) - 499 = 1 B is a (tiny) budget, not 'nothing left'."""
        spec = BudgetSpec(gpu_memory=1000, weights=499, util="0.5")
        assert resolve_budget(spec, MHA64, 1, 1)["per_rank_bytes"] == 1


class TestLayerBytes:
    def test_token_head_scales(self):
        """8 KV heads x 256 x 2 B = 4,096, plus 2 x 8 heads x 4 B fp32 scales = 64: 4,160 B; at TP 2 (4 heads)
        2,048 + 32 = 2,080; at TP 16 the 8 heads are replicated, one per rank: 512 + 8 = 520."""
        layer = TUTORIAL.layers[0]
        assert layer_token_bytes(layer, "bf16", "token_head", 1) == 4160
        assert layer_token_bytes(layer, "bf16", "token_head", 2) == 2080
        assert layer_token_bytes(layer, "bf16", "token_head", 16) == 520
        assert layer_token_bytes(layer, "bf16", "tensor", 1) == 4096

    def test_mla_token_head_scale(self):
        """MLA latent (512 + 64) x 2 B = 1,152, plus one fp32 scale of 4 B: 1,156, on every TP rank."""
        layer = Layer("mla", kv_lora_rank=512, qk_rope_head_dim=64)
        assert layer_token_bytes(layer, "bf16", "token_head", 8) == 1156
        assert layer_token_bytes(layer, "bf16", "tensor", 8) == 1152


FULL8 = Layer("full", kv_heads=8, head_dim=128, head_dim_v=128)  # 4,096 B/token in bf16
SLIDE4 = Layer("sliding", kv_heads=4, head_dim=128, head_dim_v=128, window=1024)  # 2,048 B/token


class TestPoolShape:
    def test_padding_to_largest_kind(self):
        """3 full (4,096 B) + 2 sliding (2,048 B) layers: group size 2 (3 is not below 1.5 x 2), full groups
        cdiv(3, 2) = 2, window groups 1, 3 x 2 - 5 = 1 padded layer; every layer padded to 4,096 B, so a
        16-token block is 16 x 4,096 x 2 = 131,072 B; bytes/token unpadded 3 x 4,096 + 2 x 2,048 = 16,384."""
        s = shape_of([FULL8] * 3 + [SLIDE4] * 2, "bf16", "tensor", 1, 16)
        assert (s.group_size, s.full_groups, s.window_groups, s.padded_layers, s.layer_token_bytes) == \
               (2, 2, 1, 1, 4096)
        assert (s.block_bytes, s.full_token_bytes, s.window_token_bytes, s.bytes_per_token, s.window) == \
               (131_072, 12_288, 4_096, 16_384, 1024)
        assert (s.attention_layers, s.state_layers, s.groups, s.attention_groups) == (5, 0, 3, 3)

    def test_padding_within_one_kind(self):
        """Two full layers of 8 and 4 KV heads (4,096 and 2,048 B/token): one kind, one group of 2, padded to
        the larger: block 16 x 4,096 x 2 = 131,072 B; unpadded 6,144 B/token."""
        full4 = Layer("full", kv_heads=4, head_dim=128, head_dim_v=128)
        s = shape_of([FULL8, full4], "bf16", "tensor", 1, 16)
        assert (s.layer_token_bytes, s.block_bytes, s.bytes_per_token) == (4096, 131_072, 6144)

    def test_one_local_kind_and_one_window(self):
        """Sliding and chunked layers in one model, or two window sizes: refused with one line."""
        chunked = Layer("chunked", kv_heads=8, head_dim=128, head_dim_v=128, window=1024)
        with pytest.raises(InputError) as e:
            shape_of([FULL8, SLIDE4, chunked], "bf16", "tensor", 1, 16)
        assert e.value.allowed == "one local-attention kind per model is supported (sliding or chunked)"
        other = Layer("sliding", kv_heads=4, head_dim=128, head_dim_v=128, window=2048)
        with pytest.raises(InputError) as e:
            shape_of([FULL8, SLIDE4, other], "bf16", "tensor", 1, 16)
        assert e.value.allowed == "one sliding-window size per model is supported"

    def test_full_only_defaults(self):
        """Full layers only, rank_shapes' defaults: block 16, no window (0), no state page (0), no mamba mode."""
        s = rank_shapes(Architecture("plain", (FULL8,) * 2, 64, 4096))[0]
        assert (s.block_size, s.window, s.state_page_bytes, s.state_blocks, s.mamba_mode) == (16, 0, 0, 0, "")

    def test_auto_block_size(self):
        """vLLM 0.33 with --block-size unset (vllm/platforms/cuda.py _get_backend_priorities, then
        Platform.update_block_size_for_backend in vllm/platforms/interface.py): on Hopper MLA with a bf16 KV
        cache takes FLASH_ATTN_MLA (multiples of 16: mla/flashattn_mla.py) -> 16; with fp8 KV FLASH_ATTN_MLA is
        invalid (bf16/fp16 KV only), so FlashMLA (64 only: mla/flashmla.py) -> 64; attention FLASH_ATTN -> 16;
        a hybrid asks 16 and is aligned later."""
        mamba = Layer("mamba", state_family="mamba1", state=(8192, 16, 4))
        deepseek = load_preset("deepseek-v3")
        assert auto_block_size(deepseek)[0] == 16
        assert auto_block_size(deepseek, "fp8")[0] == 64
        assert auto_block_size(deepseek, "fp8", "9.0")[0] == 64
        assert auto_block_size(Architecture("jamba", (FULL8, mamba), 32, 4096))[0] == 16
        assert auto_block_size(TUTORIAL)[0] == 16 and "FLASH_ATTN" in auto_block_size(TUTORIAL)[1]

    def test_auto_block_size_per_gpu_generation(self):
        """Blackwell (SM100, the B200 preset's compute capability 10.0): MLA takes FLASHINFER_MLA, first in
        _get_backend_priorities' SM100 order, whose kernel blocks are 32 or 64 (mla/flashinfer_mla.py), so
        get_preferred_block_size(16) gives the smallest, 32, for bf16 and fp8 alike; attention FLASHINFER
        accepts 16.  Ampere/Ada (8.x): FLASH_ATTN_MLA and FlashMLA need SM90/SM100, so TRITON_MLA (multiples of
        16) -> 16."""
        deepseek = load_preset("deepseek-v3")
        assert auto_block_size(deepseek, "bf16", "10.0")[0] == 32
        assert auto_block_size(deepseek, "fp8", "10.0")[0] == 32
        assert auto_block_size(TUTORIAL, "bf16", "10.0")[0] == 16
        assert auto_block_size(deepseek, "fp8", "8.0")[0] == 16
        assert auto_block_size(deepseek, "bf16", "8.9")[0] == 16

    def test_auto_block_size_follows_the_gpu_preset(self):
        """calc --block-size auto reads the GPU preset's compute capability: DeepSeek-V3 fp8 on an H200 (9.0)
        -> 64, on a B200 (10.0) -> 32; bf16 on an H200 -> 16."""
        deepseek = load_preset("deepseek-v3")
        spec = BudgetSpec(gpu="h200", weights=10**9)
        assert calculate(CalcInput(deepseek, kv_dtype="fp8", block_size="auto", budget=spec, tp=8))["pool"][
            "block_size"] == 64
        assert calculate(CalcInput(deepseek, kv_dtype="bf16", block_size="auto", budget=spec, tp=8))["pool"][
            "block_size"] == 16
        b200 = BudgetSpec(gpu="b200", weights=10**9)
        assert calculate(CalcInput(deepseek, kv_dtype="fp8", block_size="auto", budget=b200, tp=8))["pool"][
            "block_size"] == 32

    def test_group_size_rule(self):
        """The largest count when it is below 1.5 x the smallest: [3, 2] -> 2 (3 = 1.5 x 2), [4, 3] -> 4."""
        assert group_size_for([3, 2]) == 2 and group_size_for([4, 3]) == 4 and group_size_for([5]) == 5

    def test_state_blocks_per_mode(self):
        """One mamba1 state layer beside one attention layer: 1 state group; 2 blocks per request with prefix
        caching (align mode), 1 without; state bytes = blocks x one block.  Jamba's doctest: block 80, page
        311,296 B; one 80-token block of 4,096 B/token = 327,680 B."""
        mamba = Layer("mamba", state_family="mamba1", state=(8192, 16, 4))
        arch = Architecture("jamba", (FULL8, mamba), 32, 4096)
        on = rank_shapes(arch)[0]
        assert (on.block_size, on.state_groups, on.state_blocks, on.state_bytes, on.mamba_mode) == \
               (80, 1, 2, 2 * 327_680, "align")
        assert on.state_page_bytes == 311_296 and on.state_layers == 1 and on.padded_layers == 0
        off = rank_shapes(arch, prefix_caching=False)[0]
        assert (off.state_blocks, off.state_bytes, off.mamba_mode) == (1, 327_680, "none")


    def test_gdn_checkpoint_alignment(self):
        """1 full layer (4,096 B/token) + 3 gated-delta-net layers (page 1,097,728 B each, Qwen3-Next's shape).
        Prefix caching on: alignment lcm(16, 64) = 64, block 64 x cdiv(1,097,728, 64 x 4,096) = 64 x 5 = 320;
        3 state groups (group size 1: 3 is not below 1.5 x 1) x 3 blocks (2 + 1 checkpoint) = 9.
        Off: alignment 16, block 16 x cdiv(1,097,728, 65,536) = 16 x 17 = 272; 3 x 1 = 3 state blocks."""
        gdn = Layer("linear", state_family="gdn", state=(16, 32, 128, 128, 4))
        arch = Architecture("qn", (FULL8, gdn, gdn, gdn), 32, 4096)
        on, off = rank_shapes(arch)[0], rank_shapes(arch, prefix_caching=False)[0]
        assert (on.block_size, on.state_page_bytes, on.state_groups, on.state_blocks) == (320, 1_097_728, 3, 9)
        assert (off.block_size, off.state_blocks) == (272, 3)


    def test_alignment_from_requested_and_largest_state(self):
        """Jamba's shape (page 311,296 B, 4,096 B/token): requested 32 aligns on max(16, 32) = 32:
        32 x cdiv(311,296, 32 x 4,096) = 32 x 3 = 96 (on 16 it would be 80).  Two state layers of different
        pages: the larger one decides (gdn 1,097,728 B beside mamba1 311,296 B: block 16 x cdiv(1,097,728,
        65,536) = 272 with prefix caching off)."""
        mamba = Layer("mamba", state_family="mamba1", state=(8192, 16, 4))
        assert rank_shapes(Architecture("jamba", (FULL8, mamba), 32, 4096), block_size=32)[0].block_size == 96
        gdn = Layer("linear", state_family="gdn", state=(16, 32, 128, 128, 4))
        mixed = Architecture("mixed", (FULL8, mamba, gdn), 32, 4096)
        assert rank_shapes(mixed, prefix_caching=False)[0].block_size == 272


class TestStages:
    def test_unequal_stages(self):
        """vLLM's get_pp_indices: 10 layers on 4 stages -> 2 each, the remainder 2 going to the stages before
        the last: 2, 3, 3, 2.  7 on 2 -> 4, 3.  4 on 4 -> 1 each."""
        assert [len(r) for r in stage_layers(10, 4)] == [2, 3, 3, 2]
        assert stage_layers(10, 4)[1] == range(2, 5)
        assert [len(r) for r in stage_layers(7, 2)] == [4, 3]
        assert [len(r) for r in stage_layers(4, 4)] == [1, 1, 1, 1]

    def test_tightest_stage_decides(self):
        """Tutorial model, PP 3: stages of 27, 27, 26 layers.  A 27-layer stage takes 27 x 4,096 = 110,592 B
        per token: 12 GiB / (16 x 110,592) = 7,281 blocks (12,884,901,888 / 1,769,472 = 7,281.8); 825
        tokens take 52 blocks: 140 requests.  bytes_per_token is the largest stage's."""
        r = calculate(CalcInput(TUTORIAL, pp=3))
        assert [s["attention_layers"] for s in r["pool"]["stages"]] == [27, 27, 26]
        assert (r["bytes_per_token"], r["whole_pool_blocks"], r["capacity"]["paged_requests"]) == (110_592, 7281, 140)
        # the pool shown is the tightest stage's (27 layers, one group of 27); a request's bytes the largest
        # stage's: 832 slots x 110,592 = 92,012,544 B
        assert (r["pool"]["group_size"], r["pool"]["block_bytes"]) == (27, 1_769_472)
        assert r["policies"]["paged"]["allocated_bytes"] == 92_012_544


class TestOutputs:
    R = calculate(CalcInput(TUTORIAL))  # 825 used, 2,048 reserved, 12 GiB, 327,680 B/token

    def test_policies_waste(self):
        """useful 825 x 327,680 = 270,336,000 B.  Max: 2,048 tokens, 671,088,640 B, waste 1,223 / 2,048 =
        59.716796875 %.  Pow2: 1,024 tokens, waste 199 / 1,024 = 19.43359375 %.  Oracle: 825, 0 %.  Paged:
        52 blocks = 832 tokens, tail 7 x 327,680 = 2,293,760 B, 7 / 832 = 0.84134... %."""
        p = self.R["policies"]
        assert (p["contiguous_max"]["reserved_tokens"], p["contiguous_max"]["reservation_waste_bytes"],
                p["contiguous_max"]["waste_percent"], p["contiguous_max"]["tail_waste_bytes"]) == \
               (2048, 400_752_640, 59.716796875, 0)
        assert (p["contiguous_pow2"]["reserved_tokens"], p["contiguous_pow2"]["waste_percent"]) == (1024, 19.43359375)
        assert (p["contiguous_oracle"]["reserved_tokens"], p["contiguous_oracle"]["waste_percent"]) == (825, 0.0)
        assert p["paged"]["tail_waste_bytes"] == 2_293_760 and p["paged"]["reservation_waste_bytes"] == 0
        assert p["paged"]["waste_percent"] == pytest.approx(100 * 7 / 832)
        assert p["contiguous_max"]["paged_over_contiguous"] == 47 / 19  # 47 paged, 19 contiguous

    def test_request_fields(self):
        """832 paged slots, 7 unused: 7 / 832 internal waste."""
        req = self.R["request"]
        assert (req["paged_slots"], req["paged_unused_slots"]) == (832, 7)
        assert req["paged_internal_waste_percent"] == pytest.approx(100 * 7 / 832)

    def test_sensitivity_rows(self):
        """MHA with 64 KV heads: 2 x 80 x 64 x 128 x 2 = 2,621,440 B/token; fp8 GQA 80 x 8 x 256 = 163,840.
        Rows: as configured (47 paged), fp8 (half the bytes: 4,915 blocks, 94), block 32 (2,457 / 2 -> 1,228
        blocks), block 8 (4,915 blocks), MHA (12 GiB / 2,621,440 = 4,915 slots, 307 blocks, 5 requests)."""
        s = self.R["sensitivity"]
        assert (s["mha_64_kv_heads_bytes_per_token"], s["fp8_gqa_bytes_per_token"]) == (2_621_440, 163_840)
        rows = [(v["variant"], v["bytes_per_token"], v["whole_pool_blocks"], v["paged_requests"])
                for v in s["variants"]]
        assert rows == [("as configured", 327_680, 2457, 47), ("kv dtype fp8 (idealized)", 163_840, 4915, 94),
                        ("block size 32", 327_680, 1228, 47), ("block size 8", 327_680, 4915, 47),
                        ("MHA: 64 KV heads", 2_621_440, 307, 5)]

    def test_sensitivity_of_fp8_has_bf16_row(self):
        """An fp8 input gets a 'kv dtype bf16' row and no fp8 row; block 1 has no 'block size 0' row."""
        s = calculate(CalcInput(TUTORIAL, kv_dtype="fp8", block_size=1))["sensitivity"]
        assert [v["variant"] for v in s["variants"]] == ["as configured", "kv dtype bf16", "block size 2",
                                                         "MHA: 64 KV heads"]

    def test_vllm_view_notes(self):
        """The tutorial model: one KV-cache group, no group note; max_num_batched_tokens defaults to 8,192.
        One full + one sliding layer: 2 groups of 1 layer: the group note is there."""
        v = self.R["vllm_view"]
        assert (v["kv_cache_groups"], v["max_num_batched_tokens"]) == (1, 8192)
        assert not any("KV-cache groups" in n for n in v["differences"])
        two = calculate(CalcInput(Architecture("two", (FULL8, SLIDE4), 64, 4096)))["vllm_view"]
        assert two["kv_cache_groups"] == 2
        assert any(n.startswith("This model has 2 KV-cache groups of 1 layers") for n in two["differences"])

    def test_group_pool_blocks_used(self):
        """Group 200, 825, 1,525 at block 16: 13 + 52 + 96 = 161 blocks a group; 2,457 blocks hold 15 groups
        (2,415 blocks used)."""
        g = calculate(CalcInput(TUTORIAL, group=(200, 825, 1525)))["group"]
        assert (g["blocks_per_group"], g["complete_groups"], g["pool_blocks_used"]) == (161, 15, 2415)

    def test_prefix_fields(self):
        """Prefix 100 at block 16: 6 whole shared blocks, a 4-token tail copied; 52 - 6 = 46 own blocks;
        shared 6 x 16 x 327,680 = 31,457,280 B."""
        p = calculate(CalcInput(TUTORIAL, prefix=100))["prefix"]
        assert (p["shared_blocks"], p["copied_tail_tokens"], p["own_blocks_per_request"], p["shared_bytes"]) == \
               (6, 4, 46, 31_457_280)


FULL4 = Layer("full", kv_heads=4, head_dim=128, head_dim_v=128)  # 2,048 B/token in bf16
MAMBA1 = Layer("mamba", state_family="mamba1", state=(8192, 16, 4))  # state page 311,296 B at TP 1 (Jamba's)
# two pipeline stages that differ: stage 0 = [FULL8, MAMBA1] (a hybrid), stage 1 = [FULL4, FULL4] (attention only)
TWO_STAGES = Architecture("two-stages", (FULL8, MAMBA1, FULL4, FULL4), 32, 4096)


class TestUpperBoundLine:
    """The first assumption of a GPU-derived budget with no --reserve: what ``--reserve auto`` would take.

    MHA64 has no model_type, so the reserve is the dense family base 2.00 GiB = 2,147,483,648 B plus the
    non-torch overhead at TP 1 / PP 1, 0.27 GiB = 0.27 x 1,073,741,824 = 289,910,292.48 -> 289,910,292 B
    (half-up), plus the CUDA-graph term for its 1 layer at the all-run median 25.23 MiB per layer
    (kvdash.engines.vllm_reserve, no runs of its own): 25.23 x 1,048,576 = 26,455,572.48 -> 26,455,572 B; in all
    2,147,483,648 + 289,910,292 + 26,455,572 = 2,463,849,512 B = 2.29 GiB (2,463,849,512 / 2^30 = 2.2946)."""

    EST = 2_463_849_512

    def test_share_is_100_x_estimate_over_budget_one_decimal(self):
        """The upper-bound line's share is 100 x estimate / budget, one decimal.  A GPU of 4 x 2,463,849,512 =
        9,855,398,048 B at util 1 with 0 B of weights: budget 9,855,398,048 B, share 100 x 1 / 4 = 25.0 %
        (101 x would give 25.2, 99 x 24.8, 100 // estimate 0.0)."""
        r = calculate(CalcInput(MHA64, used=16, max_reserved=16,
                                budget=BudgetSpec(gpu_memory=4 * self.EST, weights=0, util="1")))
        assert r["budget"]["per_rank_bytes"] == 9_855_398_048
        assert r["assumptions"][0] == (
            "UPPER BOUND: this GPU-derived budget assumes a runtime reserve of 0 B per rank; --reserve auto "
            "would lower it by about 2,463,849,512 bytes (2.29 GiB, 25.0% of it): activation peak "
            "2,147,483,648 B, non-torch overhead 289,910,292 B, CUDA-graph memory 26,455,572 B")
        assert r["budget"]["auto_reserve_estimate_bytes"] == self.EST

    def test_line_comes_first(self):
        """The upper-bound line is inserted at position 0, the engine caps after it (before the model line), and
        only once; the other 8 lines (model ... GPU, the last) keep their order."""
        r = calculate(CalcInput(MHA64, used=16, max_reserved=16,
                                budget=BudgetSpec(gpu_memory=4 * self.EST, weights=0, util="1")))
        a = r["assumptions"]
        assert a[0].startswith("UPPER BOUND: ") and a[1].startswith("engine caps: ")
        assert a[2].startswith("model: mha64 ")
        assert a[-1].startswith("GPU: custom, 9,855,398,048 bytes")
        assert sum(line.startswith("UPPER BOUND") for line in a) == 1 and len(a) == 10

    def test_one_byte_budget_still_gets_a_share(self):
        """A budget of 1 B (GPU 1,000 B at util 0.5, weights 499 B: 500 - 499 = 1) is positive, so the share is
        printed: 100 x 2,463,849,512 / 1 = 246,384,951,200.0 %."""
        r = calculate(CalcInput(MHA64, used=16, max_reserved=16,
                                budget=BudgetSpec(gpu_memory=1000, weights=499, util="0.5")))
        assert "(2.29 GiB, 246384951200.0% of it)" in r["assumptions"][0]

    def test_zero_budget_has_no_share(self):
        """A budget of 0 B (a sweep point where nothing is left) has no share (no division by 0): the
        parenthesis holds the GiB figure alone."""
        line = upper_bound_line(CalcInput(MHA64), {"per_rank_bytes": 0})
        assert "(2.29 GiB): activation peak" in line and "% of it" not in line

    def test_no_line_with_a_reserve(self):
        """--reserve given (1 B): the budget is no longer an upper bound of this kind: no line."""
        r = calculate(CalcInput(MHA64, used=16, max_reserved=16,
                                budget=BudgetSpec(gpu_memory=4 * self.EST, weights=0, util="1", reserve=1)))
        assert not any(line.startswith("UPPER BOUND") for line in r["assumptions"])


class TestAssumptionText:
    def test_one_group_has_no_hybrid_line(self):
        """The tutorial model (80 full layers): 1 KV-cache group: no 'hybrid layout' line."""
        r = calculate(CalcInput(TUTORIAL))
        assert not any(line.startswith("hybrid layout") for line in r["assumptions"])

    def test_two_groups_have_the_hybrid_line(self):
        """One full + one sliding layer: group size 1 (counts [1, 1]), 1 + 1 = 2 groups, 2 x 1 - 2 = 0 padded
        slots: the line is there with exactly these figures."""
        r = calculate(CalcInput(Architecture("two", (FULL8, SLIDE4), 64, 4096)))
        assert ("hybrid layout: 2 KV-cache groups of 1 layers share one pool (0 padded layer slots), as vLLM "
                "0.33 groups them") in r["assumptions"]

    def test_first_stage_describes_the_layout(self):
        """PP 2 on [FULL8, MAMBA1 | FULL4, FULL4]: the hybrid and state lines describe the first stage (shapes[0]):
        1 full + 1 state layer, group size 1, 2 groups, 0 padded; 1 state layer with Jamba's 311,296-byte page;
        block 16 x cdiv(311,296, 16 x 4,096) = 16 x 5 = 80; prefix caching on: 'align', 2 blocks for 1 state
        group.  (The second stage, attention only, has 1 group and no state page: 0 bytes.)"""
        a = calculate(CalcInput(TWO_STAGES, pp=2))["assumptions"]
        assert ("block size: 80 tokens per block (requested 16; raised so one attention page holds the "
                "311,296-byte state page of a state layer, as vLLM 0.33 aligns hybrids)") in a
        assert ("hybrid layout: 2 KV-cache groups of 1 layers share one pool (0 padded layer slots), as vLLM "
                "0.33 groups them") in a
        assert ("state layers (1 on the first stage) hold a fixed-size state per request, whatever its length: "
                "311,296 bytes per layer, padded to one 80-token attention page; prefix caching on -> "
                "mamba_cache_mode 'align': 2 block(s) per request for the 1 state group(s)") in a

    def test_block_alignment_reason_names_the_first_stage(self):
        """The alignment reason: raised from 16 to 80 so one 80-token page of the first stage's 4,096 B/token
        layers (80 x 4,096 = 327,680 B) holds the 311,296-byte state page.  The second stage's pages are
        2,048 B/token and it has no state page, so reading shapes[-1] would say '80 x 2,048 B' and '0-byte'."""
        r = calculate(CalcInput(TWO_STAGES, pp=2, block_size=16))  # typed: the default is auto (vLLM's choice)
        assert r["inputs"]["block_size_reason"] == (
            "16: requested; raised from 16 to 80 so one attention page (80 x 4,096 B) holds a 311,296-byte "
            "state page (vLLM 0.33 _align_hybrid_block_size)")
        assert (r["inputs"]["block_size"], r["inputs"]["block_size_requested"]) == (80, 16)


class TestSummaryText:
    def test_groups_are_full_plus_window(self):
        """3 full + 2 sliding layers: group size 2, cdiv(3, 2) = 2 full groups + 1 window group = 3.  The sliding
        layers' page (2,048 B/token) is half the full layers' (4,096), so vLLM 0.33 gives them 2 x 16 = 32-token
        blocks (unify_kv_cache_spec_page_size, vllm/v1/core/kv_cache_planning.py; what its own MiMo-V2-Flash layers
        give, conformance/vllm/expected.json).  An 825-token request takes cdiv(825, 16) = 52 blocks in each full
        group and min(cdiv(825, 32) = 26, cdiv(1,023, 32) + 1 = 33) = 26 in the sliding group: 2 x 52 + 26 = 130,
        said per kind (issue 23: a total is not "in each" group)."""
        arch = Architecture("3f2s", (FULL8,) * 3 + (SLIDE4,) * 2, 64, 4096)
        r = calculate(CalcInput(arch))
        assert {"full": 52, "sliding": 26} == r["request"]["paged_blocks_per_group"]
        assert ("a request takes 130 blocks (52 in each of its 2 full groups + 26 in its sliding group);"
                in r["summary"])

    def test_two_groups_named_one_group_not(self):
        """One full + one sliding layer (window 1,024; the sliding page half the full one, so 32-token sliding
        blocks): 2 groups (> 1), 52 + 26 blocks at 825 tokens; at 2,048 tokens the sliding group holds
        min(64, cdiv(1,023, 32) + 1 = 33) = 33 of the 128 + 33 = 161; the tutorial model's single group gets no
        breakdown ('52 blocks; contiguous')."""
        two = calculate(CalcInput(Architecture("two", (FULL8, SLIDE4), 64, 4096)))["summary"]
        assert " takes 78 blocks (52 in its full group + 26 in its sliding group);" in two
        long = calculate(CalcInput(Architecture("two", (FULL8, SLIDE4), 64, 4096), used=2048))["summary"]
        assert " takes 161 blocks (128 in its full group + 33 in its sliding group);" in long
        one = calculate(CalcInput(TUTORIAL))["summary"]
        assert "paged, a request takes 52 blocks; contiguous" in one and " group" not in one.split("paged,")[1]

    def test_unused_reservation(self):
        """825 tokens held, --max-reserved 2,048: 2,048 - 825 = 1,223 reserved tokens unused now."""
        s = calculate(CalcInput(TUTORIAL))["summary"]
        assert "; contiguous, it reserves --max-reserved 2,048 tokens up front, 1,223 of them unused now;" in s

    def test_reservation_equal_to_length(self):
        """--max-reserved equal to the length (16 = 16): nothing reserved past it, so the other sentence."""
        s = calculate(CalcInput(MHA64, used=16, max_reserved=16, budget=BudgetSpec(bytes=TEN_BLOCKS)))["summary"]
        assert "; contiguous, it reserves exactly its length, so only the last block's tail differs" in s
        assert "up front" not in s


class TestSensitivityVariants:
    def test_block_two_has_a_block_one_row(self):
        """Block 2 > 1: the rows are block 4 (2 x 2) and block 1 (2 // 2)."""
        s = calculate(CalcInput(TUTORIAL, block_size=2))["sensitivity"]
        assert [v["variant"] for v in s["variants"] if v["variant"].startswith("block size")] == \
               ["block size 4", "block size 1"]

    def test_mha_model_has_no_mha_row(self):
        """MHA64 already has one KV head per attention head (64 = 64): no 'MHA' variant; bf16 at block 16:
        as configured, fp8, block 32, block 8."""
        s = calculate(CalcInput(MHA64, used=16, max_reserved=16, budget=BudgetSpec(bytes=TEN_BLOCKS)))["sensitivity"]
        assert [v["variant"] for v in s["variants"]] == ["as configured", "kv dtype fp8 (idealized)",
                                                         "block size 32", "block size 8"]


class TestScalesInOutput:
    def test_token_head_scale_bytes_in_calc(self):
        """fp8 with per-token-head scales on the tutorial model: (8 x 256 x 1) + (2 x 8 x 4) = 2,048 + 64 = 2,112 B
        per layer, x 80 = 168,960 B/token; a 16-token block is 2,703,360 B: 12 GiB / 2,703,360 = 4,766.2 -> 4,766
        blocks; 825 tokens take 52 blocks: 4,766 // 52 = 91 requests (94 without the scale bytes).  The
        assumption names the fp32 scales and the figure is not flagged 'idealized'."""
        r = calculate(CalcInput(TUTORIAL, kv_dtype="fp8", kv_scales="token_head"))
        assert (r["bytes_per_token"], r["whole_pool_blocks"], r["capacity"]["paged_requests"]) == (168_960, 4766, 91)
        a = r["assumptions"]
        assert "KV dtype: fp8, 1 byte(s) per element; scales: fp32 per token per KV head for K and V" in a
        assert not any("idealized" in line for line in r["assumptions"])

    def test_bf16_token_head(self):
        """bf16 with scales: 80 x (4,096 + 64) = 332,800 B/token; 12,884,901,888 / (16 x 332,800) = 2,419.8 ->
        2,419 blocks; 2,419 // 52 = 46 requests."""
        r = calculate(CalcInput(TUTORIAL, kv_scales="token_head"))
        assert (r["bytes_per_token"], r["whole_pool_blocks"], r["capacity"]["paged_requests"]) == (332_800, 2419, 46)

    def test_fp8_per_tensor_is_idealized(self):
        """fp8 per tensor: 80 x 2,048 = 163,840 B/token, no per-token scale bytes: flagged idealized."""
        r = calculate(CalcInput(TUTORIAL, kv_dtype="fp8"))
        assert r["bytes_per_token"] == 163_840
        assert "KV dtype: fp8, 1 byte(s) per element; scales: per tensor (no per-token bytes)" in r["assumptions"]
        assert ("fp8 figures are idealized: scale storage, kernel alignment and accuracy are not included and must "
                "be measured") in r["assumptions"]


class TestMoreEdges:
    def test_derived_budget_of_one_byte_not_strict(self):
        """The sweep path (strict=False): floor(1,000 x 0.5) - 499 = 1 B is a budget (fits, no shortfall), not
        'nothing left' (only <= 0 is, which adds fits false and the shortfall)."""
        info = resolve_budget(BudgetSpec(gpu_memory=1000, weights=499, util="0.5"), MHA64, 1, 1, strict=False)
        assert info["per_rank_bytes"] == 1 and "shortfall_bytes" not in info and "fits" not in info

    def test_length_equal_to_context_allowed(self):
        """--length may equal the model's context (4,096 = 4,096); one more is refused.  4,096 tokens are 256
        blocks of 262,144 B: a budget of 256 blocks holds exactly 1 request."""
        r = calculate(CalcInput(MHA64, used=4096, max_reserved=4096, budget=BudgetSpec(bytes=256 * 262_144)))
        assert r["capacity"]["paged_requests"] == 1
        with pytest.raises(InputError) as e:
            calculate(CalcInput(MHA64, used=4097, max_reserved=4097))
        assert e.value.field == "--length" and e.value.allowed == "at most the model's context length (4096)"

    def test_vllm_view_describes_the_first_stage(self):
        """PP 2 on [FULL8, MAMBA1 | FULL4, FULL4]: the vLLM view reads the first stage (shapes[0]): 2 KV-cache
        groups (1 attention + 1 state), mamba_cache_mode 'align', block 80; its state note names 1 state group of
        a 311,296-byte state, 2 blocks per request.  (The second stage has 1 group and no state.)"""
        v = calculate(CalcInput(TWO_STAGES, pp=2))["vllm_view"]
        assert (v["kv_cache_groups"], v["mamba_cache_mode"], v["block_size"]) == (2, "align", 80)
        assert ("State layers: 1 group(s) of a fixed 311,296-byte state per layer, 2 block(s) per request in "
                "mamba_cache_mode 'align' (prefix caching on).") in v["differences"]
        assert any(n.startswith("This model has 2 KV-cache groups of 1 layers") for n in v["differences"])

    def test_planning_needs_the_largest_stage(self):
        """PP 2 on [FULL8, MAMBA1 | FULL4, FULL4], block 80, 825 tokens = cdiv(825, 80) = 11 blocks.  Stage 0: a
        block is 80 x 4,096 x 1 = 327,680 B, 11 blocks + 2 state blocks = 13 x 327,680 = 4,259,840 B; stage 1:
        80 x 2,048 x 2 = 327,680 B a block, 11 blocks = 3,604,480 B.  Every rank must hold its stage, so 10
        requests need the larger, 10 x 4,259,840 = 42,598,400 B per rank (not 36,044,800)."""
        p = calculate(CalcInput(TWO_STAGES, pp=2, target=10))["planning"]
        assert p["budget_needed_per_rank_bytes"] == 42_598_400

    def test_min_gpu_util_counts_the_reserve(self):
        """GPU 10,000,000 B, weights 1,000,000 + reserve 500,000 = 1,500,000 B fixed; 31 requests need 8,126,464 B.
        vllm: (8,126,464 + 1,500,000) / 10,000,000 = 0.9626 -> 0.97 (0.96 gives 9,600,000 - 1,500,000 =
        8,100,000, too little).  trtllm: 8,126,464 / (10,000,000 - 1,500,000) = 0.9560 -> 0.96."""
        for policy, util in (("vllm", 0.97), ("trtllm", 0.96)):
            spec = BudgetSpec(gpu_memory=10_000_000, weights=1_000_000, reserve=500_000, policy=policy, util="0.9")
            assert _plan(31, budget=spec)["min_gpu_util"] == util


class TestEngineStarts:
    """calculate with --max-model-len checks vLLM 0.33's start-up refusal on every stage (check_engine_starts:
    get_kv_cache_configs plans against the pool less its null block, _check_enough_kv_cache_memory refuses when
    one request of max_model_len needs more); the length it suggests is the longest that fits (estimate_max_model_len).
    MHA64: a 16-token block is 262,144 B; max_model_len 160 takes cdiv(160, 16) = 10 blocks."""

    def _calc(self, budget: int, max_model_len: int, **kw) -> dict:
        return calculate(CalcInput(MHA64, used=16, max_reserved=16, max_model_len=max_model_len,
                                   budget=BudgetSpec(bytes=budget), **kw))

    def test_one_request_beside_the_null_block_exactly_starts(self):
        """262,144 x (10 + 1) = 2,883,584 B holds the null block and one request: it starts, with 11 blocks."""
        assert self._calc(2_883_584, 160)["vllm_view"]["num_gpu_blocks"] == 11

    def test_one_byte_less_is_refused_with_the_longest_length_that_fits(self):
        """2,883,583 B: refused; the longest length that fits beside the null block needs 262,144 x cdiv(n, 16) <=
        2,883,583 - 262,144 = 2,621,439, i.e. at most 9 blocks: 9 x 16 = 144 tokens."""
        with pytest.raises(InputError) as e:
            self._calc(2_883_583, 160)
        assert e.value.field == "--max-model-len"
        assert "the estimated maximum model length is 144." in str(e.value)
        assert "10 blocks of 262,144 B for one request, 10 in the pool" in str(e.value)

    def test_a_single_token_can_be_the_longest(self):
        """Block size 1 (16,384 B a block), max_model_len 16 (16 blocks), a budget of 2 blocks (32,768 B): refused
        (16,384 x 17 > 32,768); beside the null block 1 block fits, so 1 token is the estimate (the search starts
        at 1)."""
        with pytest.raises(InputError) as e:
            self._calc(32_768, 16, block_size=1)
        assert "the estimated maximum model length is 1." in str(e.value)
        assert "lower it to 1 or less" in str(e.value)

    def test_the_search_reaches_the_length_just_past_a_probe(self):
        """Block size 1, max_model_len 16, a budget of 10 blocks (163,840 B): 9 blocks are left beside the null
        block, so 9 tokens are the longest.  The search over 1..16 probes 8 (fits), then 12, 10 (do not) and 9."""
        with pytest.raises(InputError) as e:
            self._calc(163_840, 16, block_size=1)
        assert "the estimated maximum model length is 9." in str(e.value)

    def test_the_search_reaches_the_length_just_below_a_probe(self):
        """Block size 1, max_model_len 16, 12 blocks (196,608 B): 11 are left beside the null block, 11 tokens the
        longest.  The search probes 8 (fits), 12 (does not: the next bound is 11), 10 and 11 (fit)."""
        with pytest.raises(InputError) as e:
            self._calc(196_608, 16, block_size=1)
        assert "the estimated maximum model length is 11." in str(e.value)

    def test_no_length_fits_beside_the_null_block(self):
        """A budget of one block (262,144 B): beside the null block nothing is left, so no length fits (estimate 0)
        and the refusal suggests no length."""
        with pytest.raises(InputError) as e:
            self._calc(262_144, 160)
        assert "estimated maximum model length" not in str(e.value) and "lower it to" not in str(e.value)
        assert "or give the KV cache more memory" in str(e.value)


class TestPlanningDetails:
    """_planning's inverse of the capacity figures (MHA64: a 16-token block is 262,144 B)."""

    def test_budget_needed_with_a_shared_prefix(self):
        """--prefix 32 (2 whole blocks, stored once), requests of 48 tokens (3 blocks, 1 their own), target 3:
        needed = shared 2 x 262,144 + 3 requests x own 1 x 262,144 = 524,288 + 786,432 = 1,310,720 B."""
        p = calculate(CalcInput(MHA64, used=48, max_reserved=48, prefix=32, target=3,
                                budget=BudgetSpec(bytes=TEN_BLOCKS)))["planning"]
        assert (p["budget_needed_per_rank_bytes"], p["prefix_tokens"]) == (1_310_720, 32)

    def test_runs_at_once_up_to_max_num_seqs(self):
        """The target runs at once when it is at most max_num_seqs: 10 requests with --max-num-seqs 10 do, 11
        do not."""
        assert _plan(10, max_num_seqs=10)["runs_at_once"] is True
        assert _plan(11, max_num_seqs=10)["runs_at_once"] is False


class TestNoKvMemory:
    """answer.budget.no_kv_memory (issue 23): a GPU-derived budget that leaves no KV memory is one error naming the
    option the value came from, how the budget was worked, and only fixes that work: the smallest larger TP
    (TP_CANDIDATES) that leaves memory, vLLM's smallest --gpu-util (ceil((weights/rank + reserve + 1) / total) to
    0.01), a smaller --reserve, then a larger GPU.  MHA64 (64 heads: every TP up to 64 divides them)."""

    def _error(self, spec: BudgetSpec, arch: Architecture = MHA64, pp: int = 1) -> InputError:
        with pytest.raises(InputError) as e:
            resolve_budget(spec, arch, 1, pp)
        return e.value

    def _fixes(self, **kw) -> str:
        return self._error(BudgetSpec(gpu_memory=1_000_000, **kw)).allowed.split("; fix: ")[1]

    def test_a_tp_is_offered_only_where_it_leaves_memory(self):
        """At --gpu-util 0.5 (500,000 B per rank whatever the TP): 1,000,000 B of weights leave
        500,000 - 500,000 = 0 B at TP 2 (not offered) and 250,000 B at TP 4; 999,998 B leave
        500,000 - cdiv(999,998, 2) = 1 B at TP 2 (offered).  Both leave 1,000,000 - weights > 0 before the
        utilization: ceil(1,000,001 / 1,000,000) = 1.01 is over 1 (no utilization fix); ceil(999,999 /
        1,000,000) = 1.00 leaves 2 B ("1.00 or more")."""
        assert self._fixes(util="0.5", weights=1_000_000) == "--tp 4 (weights/rank 250,000 B) or a larger GPU"
        assert self._fixes(util="0.5", weights=999_998) == ("--tp 2 (weights/rank 499,999 B) or --gpu-util 1.00 or "
                                                            "more or a larger GPU")

    def test_one_byte_left_at_full_utilization_is_a_fix(self):
        """999,999 B of weights: 1,000,000 - 999,999 = 1 B is left at utilization 1: ceil(1,000,000 / 1,000,000) =
        1.00 -> "--gpu-util 1.00 or more"; TP 2 leaves 500,000 - 500,000 = 0, TP 4 500,000 - 250,000."""
        assert self._fixes(util="0.5", weights=999_999) == ("--tp 4 (weights/rank 250,000 B) or --gpu-util 1.00 or "
                                                            "more or a larger GPU")

    def test_the_smallest_utilization_on_the_grid_itself(self):
        """599,999 B of weights: ceil(600,000 / 1,000,000) = 0.60 exactly, which leaves floor(600,000) - 599,999 =
        1 B: 0.60 (not 0.61)."""
        assert self._fixes(util="0.5", weights=599_999) == ("--tp 2 (weights/rank 300,000 B) or --gpu-util 0.60 or "
                                                            "more or a larger GPU")

    def test_a_smaller_reserve_only_where_the_weights_leave_room(self):
        """--reserve 10 at the default 0.92 (920,000 B): 920,000 B of weights leave 920,000 - 920,000 = 0 for any
        reserve (no reserve fix); 919,999 B leave 1: "--reserve under 1 B".  TP 2: 920,000 - 460,000 - 10 > 0;
        utilization ceil(920,011 / 1,000,000) and ceil(920,010 / 1,000,000) = 0.93."""
        assert self._fixes(weights=920_000, reserve=10) == ("--tp 2 (weights/rank 460,000 B) or --gpu-util 0.93 or "
                                                            "more or a larger GPU")
        assert self._fixes(weights=919_999, reserve=10) == ("--tp 2 (weights/rank 460,000 B) or --gpu-util 0.93 or "
                                                            "more or --reserve under 1 B (now 10 B: given with "
                                                            "--reserve) or a larger GPU")

    def test_a_reserve_from_elsewhere_names_its_source(self):
        """A reserve with a basis (a calibration's, not typed): the error names --gpu-memory, and the reserve fix
        quotes the basis up to its first " (": "calibration c.json"."""
        e = self._error(BudgetSpec(gpu_memory=1_000_000, reserve=950_000,
                                   reserve_basis="calibration c.json (measured)"))
        assert (e.field, e.value) == ("--gpu-memory", 1_000_000)
        assert e.allowed.endswith("fix: --gpu-util 0.96 or more or --reserve under 920,000 B (now 950,000 B: "
                                  "calibration c.json) or a larger GPU")

    def test_weights_equal_to_the_gpu_are_the_weights_alone(self):
        """1,000,000 B of weights on 1,000,000 B (wr >= total): "the weights alone ... exceed the GPU's"."""
        e = self._error(BudgetSpec(gpu_memory=1_000_000, util="0.5", weights=1_000_000))
        assert e.allowed.startswith("the weights alone (1,000,000 B per rank: given with --weights) exceed the GPU's "
                                    "1,000,000 B: ")

    def test_pipeline_stages_split_the_weights(self):
        """PP 2 over 2 layers: 1,200,000 B of weights are cdiv(1,200,000, 1 x 2) = 600,000 B per rank; --tp 2
        gives cdiv(1,200,000, 2 x 2) = 300,000 B and leaves 500,000 - 300,000."""
        e = self._error(BudgetSpec(gpu_memory=1_000_000, util="0.5", weights=1_200_000),
                        Architecture("mha64x2", MHA64.layers * 2, 64, 4096), pp=2)
        assert e.allowed == ("no memory is left for the KV cache: floor(1,000,000 x 0.5) - weights/rank 600,000 - "
                             "reserve 0 = -100,000 B; fix: --tp 2 (weights/rank 300,000 B) or --gpu-util 0.61 or more "
                             "or a larger GPU")

    def test_util_typed_names_util_and_both_fixes(self):
        """1,000,000 B at --gpu-util 0.5 with 600,000 B of weights: floor(500,000) - 600,000 = -100,000 B.  --tp 2
        leaves 500,000 - 300,000 = 200,000 B; the smallest utilization: ceil(600,001 / 1,000,000 = 0.600001) =
        0.61 (0.60 leaves 0 B)."""
        e = self._error(BudgetSpec(gpu_memory=1_000_000, util="0.5", weights=600_000))
        assert (e.field, e.value) == ("--gpu-util", "0.5")
        assert e.allowed == ("no memory is left for the KV cache: floor(1,000,000 x 0.5) - weights/rank 600,000 - "
                             "reserve 0 = -100,000 B; fix: --tp 2 (weights/rank 300,000 B) or --gpu-util 0.61 or more "
                             "or a larger GPU")

    def test_utilization_of_exactly_one_is_a_fix(self):
        """995,000 B of weights on 1,000,000 B at 0.5: ceil(995,001 / 1,000,000) to 0.01 = 1.00, which leaves
        1,000,000 - 995,000 = 5,000 B: "--gpu-util 1.00 or more" is offered."""
        e = self._error(BudgetSpec(gpu_memory=1_000_000, util="0.5", weights=995_000))
        assert e.allowed.endswith("fix: --tp 2 (weights/rank 497,500 B) or --gpu-util 1.00 or more or a larger GPU")

    def test_weights_alone_exceed_the_gpu(self):
        """--weights 2,000,000 on 1,000,000 B with --reserve 100 at vLLM's default 0.92: 920,000 - 2,000,000 - 100 =
        -1,080,100 B; --tp 2 leaves 920,000 - 1,000,000 - 100 < 0, --tp 4 920,000 - 500,000 - 100 = 419,900 B; no
        utilization helps (total - weights < 0) and no reserve either (920,000 - 2,000,000 < 0)."""
        e = self._error(BudgetSpec(gpu_memory=1_000_000, weights=2_000_000, reserve=100))
        assert (e.field, e.value) == ("--weights", 2_000_000)
        assert e.allowed == ("the weights alone (2,000,000 B per rank: given with --weights) exceed the GPU's "
                             "1,000,000 B: floor(1,000,000 x 0.92, vLLM 0.33's default gpu_memory_utilization) - "
                             "weights/rank 2,000,000 - reserve 100 = -1,080,100 B; fix: --tp 4 (weights/rank "
                             "500,000 B) or a larger GPU")

    def test_reserve_typed_names_reserve_and_its_fix(self):
        """--reserve 950,000 on 1,000,000 B (no weights): 920,000 - 950,000 = -30,000 B; no TP helps (the reserve
        is per rank); ceil(950,001 / 1,000,000) = 0.96 leaves 10,000 B; a reserve under 920,000 B leaves memory."""
        e = self._error(BudgetSpec(gpu_memory=1_000_000, reserve=950_000))
        assert (e.field, e.value) == ("--reserve", "950,000 B")
        assert e.allowed.endswith("= -30,000 B; fix: --gpu-util 0.96 or more or --reserve under 920,000 B (now "
                                  "950,000 B: given with --reserve) or a larger GPU")

    def test_nothing_helps_but_a_gpu_with_more_memory(self):
        """A model of 2 x 10^12 B of weights on an L4 (24,152,899,584 B): even TP 64 leaves 31,250,000,000 B of
        weights per rank: the error names --gpu and offers only more memory than the L4's."""
        huge = Architecture("huge", MHA64.layers, 64, 4096, weight_bytes=2 * 10**12, weight_basis="hand-made")
        e = self._error(BudgetSpec(gpu="l4"), huge)
        assert (e.field, e.value) == ("--gpu", "l4")
        assert e.allowed.startswith("the weights alone (2,000,000,000,000 B per rank: hand-made) exceed the GPU's "
                                    "24,152,899,584 B")
        assert e.allowed.endswith("; fix: a GPU with more memory than 24,152,899,584 B")

    def test_trtllm_offers_the_smallest_tp_beyond_the_current_one(self):
        """TensorRT-LLM's rule, 999,990 B of weights on 1,000,000 B at 0.01: floor((1,000,000 - 999,990) x 0.01) =
        floor(0.1) = 0 B.  TP 1 (the current) is not offered although 10 B are free before the fraction; --tp 2
        leaves 1,000,000 - 499,995 = 500,005 B; vLLM's utilization and reserve fixes do not apply."""
        e = self._error(BudgetSpec(gpu_memory=1_000_000, util="0.01", weights=999_990, policy="trtllm"))
        assert e.allowed == ("no memory is left for the KV cache: floor((1,000,000 - weights/rank 999,990 - reserve 0) "
                             "x 0.01) = 0 B; fix: --tp 2 (weights/rank 499,995 B) or a larger GPU")


class TestImpliedBudgets:
    """implied_budgets: the KV budgets per rank for which vLLM 0.33 logs exactly N tokens (GPU KV cache size =
    int(num_gpu_blocks / blocks per request x max_model_len)), found by doubling then bisection.  MHA64 at
    max_model_len 16: one 16-token block of 262,144 B per request, so the log says 16 x (budget // 262,144)."""

    @pytest.fixture(autouse=True)
    def _ends(self):
        """Each search must end (a wrong bound would loop for ever): 20 s is thousands of times what it takes."""
        import signal

        def stop(*_):
            raise TimeoutError("the budget search did not end")
        old = signal.signal(signal.SIGALRM, stop)
        signal.alarm(20)
        yield
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)

    def _range(self, tokens: int, arch: Architecture = MHA64):
        from kvdash.answer.calc import implied_budgets

        inp = CalcInput(arch, used=16, max_reserved=16, budget=BudgetSpec(bytes=TEN_BLOCKS))
        return implied_budgets(inp, rank_shapes(arch), tokens)

    def test_whole_blocks(self):
        """16 tokens: 1 block, budgets 262,144 to 2 x 262,144 - 1 = 524,287; 160 tokens: 10 blocks, 2,621,440 to
        2,883,583; 150 tokens is no multiple of 16: no budget logs it."""
        assert self._range(16) == (262_144, 524_287)
        assert self._range(160) == (2_621_440, 2_883_583)
        assert self._range(150) is None

    def test_consecutive_figures_at_max_model_len_one(self):
        """At max_model_len 1 a request takes 1 block and the log says int(blocks / 1 x 1) = the blocks: 10 tokens
        are logged from 10 x 262,144 = 2,621,440 to 11 x 262,144 - 1 = 2,883,583 B (11 is logged from there)."""
        from kvdash.answer.calc import implied_budgets

        inp = CalcInput(MHA64, used=1, max_reserved=1, budget=BudgetSpec(bytes=TEN_BLOCKS))
        assert implied_budgets(inp, rank_shapes(MHA64), 10) == (2_621_440, 2_883_583)

    def test_a_block_that_is_not_a_power_of_two(self):
        """3 such layers: a block of 786,432 B; 16 tokens from 786,432 to 1,572,863 B.  (The doubling passes 2^20 =
        1,048,576, which already logs 16: the lowest budget lies below it.)"""
        three = Architecture("mha64x3", MHA64.layers * 3, 64, 4096)
        assert self._range(16, three) == (786_432, 1_572_863)

    def test_up_to_the_largest_budget_kvdash_takes(self):
        """limits.MAX_BYTES = 2^60 B: 2^60 / 2^18 = 2^42 blocks log 2^46 = 70,368,744,177,664 tokens, reached only at
        2^60 itself (one more block would need more than 2^60 B); 16 tokens more: None."""
        assert self._range(2**46) == (2**60, 2**60)
        assert self._range(2**46 + 16) is None


class TestEngineSection:
    """calculate's engine section (_engine): requests running at once = min(requests the KV cache holds,
    max_num_seqs), limited by max_num_seqs only when it is below them.  MHA64 with 10 blocks holds 10 requests of
    16 tokens."""

    def _engine(self, **kw) -> dict:
        return calculate(CalcInput(MHA64, used=16, max_reserved=16, budget=BudgetSpec(bytes=TEN_BLOCKS), **kw))

    def test_running_is_the_smaller_of_the_two(self):
        """No GPU: the H100/H200 row's 1,024 seqs: min(10, 1,024) = 10, the KV cache limits; --max-num-seqs 4:
        min(10, 4) = 4, max_num_seqs limits; --max-num-seqs 10 = the 10 held: the KV cache (not below it)."""
        e = self._engine()["engine"]
        assert (e["requests_in_kv_cache"], e["running_requests"], e["limited_by"]) == (10, 10, "kv_cache")
        e = self._engine(max_num_seqs=4)["engine"]
        assert (e["running_requests"], e["limited_by"]) == (4, "max_num_seqs")
        e = self._engine(max_num_seqs=10)["engine"]
        assert (e["running_requests"], e["limited_by"]) == (10, "kv_cache")

    def test_caps_line_first_without_an_upper_bound(self):
        """A declared budget has no UPPER BOUND line: the engine caps are the first assumption."""
        assert self._engine()["assumptions"][0].startswith("engine caps: vLLM 0.33 runs at most 1,024 requests")

    def test_blocks_per_group_are_the_first_stages(self):
        """Layers sliding (window 32), full, full, full on 2 pipeline stages: the first stage holds a sliding and a
        full group, the second only full layers; a request of 16 tokens takes cdiv(16, 16) = 1 full block and
        min(cdiv(16, 16), cdiv(31, 16) + 1) = 1 sliding block, split by kind as the first stage's groups are."""
        sliding = Layer("sliding", kv_heads=64, head_dim=64, head_dim_v=64, window=32)
        arch = Architecture("sfff", (sliding, *MHA64.layers * 3), 64, 4096)
        r = calculate(CalcInput(arch, used=16, max_reserved=16, pp=2, budget=BudgetSpec(bytes=TEN_BLOCKS)))
        assert r["request"]["paged_blocks_per_group"] == {"full": 1, "sliding": 1}


def test_attention_free_pool_lengthens_no_block():
    """An attention-free pool (Mamba-130m, tests/data/configs: 24 Mamba-1 layers, vllm/model_executor/models/mamba.py)
    has no attention page to unify (unify_kv_cache_spec_page_size): both block ratios stay 1 (what --json's pool
    stages show); a block is the 24 state pages, 24 x 58,368 = 1,400,832 B."""
    from pathlib import Path

    from kvdash.core.model import load_config

    arch = load_config(Path(__file__).parent / "data" / "configs" / "mamba-130m" / "config.json")
    (s,) = rank_shapes(arch)
    assert (s.full_ratio, s.window_ratio, s.fixed_block_bytes, s.block_bytes) == (1, 1, 1_400_832, 1_400_832)


def test_sparse_mla_token_bytes_add_the_indexer_cache():
    """layer_token_bytes of a sparse MLA layer (DeepSeek-V3.2: kv_lora_rank 512, qk_rope_head_dim 64, an indexer key
    cache of 132 B per token, uint8 whatever the KV dtype): bf16 (512 + 64) x 2 + 132 = 1,284 B; fp8_ds_mla's
    656 B + 132 = 788 B."""
    v32 = Layer("mla", kv_heads=1, kv_lora_rank=512, qk_rope_head_dim=64, index_bytes=132)
    assert layer_token_bytes(v32, "bf16", "tensor", 1) == 1_284
    assert layer_token_bytes(v32, "fp8_ds_mla", "tensor", 1) == 788


def test_sensitivity_under_kv_dtype_auto_uses_the_stored_dtype():
    """--kv-dtype auto on a checkpoint without a KV scheme is stored as bf16 (2 B): the sensitivity offers the fp8
    variant, not a bf16 one (the dtype it already is)."""
    r = calculate(CalcInput(MHA64, used=16, max_reserved=16, kv_dtype="auto", budget=BudgetSpec(bytes=TEN_BLOCKS)))
    labels = [v["variant"] for v in r["sensitivity"]["variants"]]
    assert "kv dtype fp8 (idealized)" in labels and "kv dtype bf16" not in labels

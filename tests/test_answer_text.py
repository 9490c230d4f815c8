"""The wording of calc's answer (kvdash/answer/text.py): where each assumption goes, singular and plural, when a
tail is said.  Each test names the sentence it guards and the values that decide it."""

from __future__ import annotations

from pathlib import Path

from kvdash.answer.budget import BudgetSpec
from kvdash.answer.calc import CalcInput, calculate
from kvdash.answer.text import seqs_tail
from kvdash.core.model import load_config, load_preset
from kvdash.units import GiB

CONFIGS = Path(__file__).resolve().parent / "data" / "configs"
MODELS = Path(__file__).resolve().parent / "data" / "measured" / "models"


def _calc(arch, **kw):
    base = dict(arch=arch, kv_dtype="bf16", block_size=16, budget=BudgetSpec(bytes=4 * GiB), tp=1, used=825,
                max_reserved=2048)
    return calculate(CalcInput(**{**base, **kw}))


def test_a_stored_dtype_other_than_asked_is_said_right_after_the_model() -> None:
    """The line that moves every figure comes second among the model's own lines: right after "model: ...",
    for a checkpoint-declared fp8 (Kimi-K2.5-NVFP4 under auto) and for Falcon's ignored fp8."""
    for arch, dtype, start in ((load_config(MODELS / "kimi-k2.5-nvfp4" / "config.json"), "auto", "KV cache fp8_e4m3"),
                               (load_config(CONFIGS / "falcon-7b-instruct" / "config.json"), "fp8",
                                "KV cache stays bf16")):
        lines = _calc(arch, kv_dtype=dtype, tp=4 if dtype == "auto" else 1)["assumptions"]
        at = next(i for i, a in enumerate(lines) if a.startswith("model: "))
        assert lines[at + 1].startswith(start), lines


def test_batches_in_flight_singular_and_plural() -> None:
    """Async scheduling on (vLLM 0.33's default): 2 batches in flight; off: 1 batch."""
    arch = load_preset("llama-3.1-8b")
    on = " ".join(_calc(arch)["assumptions"])
    off = " ".join(_calc(arch, async_scheduling=False)["assumptions"])
    assert "; 2 batches in flight (async scheduling, on by default)" in on
    assert "; 1 batch in flight (--no-async-scheduling)" in off


def test_group_reservation_is_said_when_a_request_holds_less() -> None:
    """A group of 100 and 200 tokens with --max-reserved 200 (a group's lengths never exceed it): the
    100-token request holds less than it reserves, so the reservation is said; with every request at 200 it
    is not."""
    arch = load_preset("llama-3.1-8b")
    said = "contiguous, each request reserves --max-reserved 200 tokens up front"
    assert said in _calc(arch, used=100, group=[100, 200], max_reserved=200)["summary"]
    assert said not in _calc(arch, used=200, group=[200, 200], max_reserved=200)["summary"]


def test_attention_free_summary_names_the_state_blocks() -> None:
    """Mamba-130m under prefix caching (vLLM 0.33 align mode): a request of any length holds 2 state blocks."""
    s = _calc(load_config(CONFIGS / "mamba-130m" / "config.json"))["summary"]
    assert "a request of any length holds 2 of them" in s and "mamba_cache_mode 'align'" in s


def test_max_num_seqs_tail_only_past_the_cap() -> None:
    """At exactly max_num_seqs requests nothing is added; one more and the cap is said."""
    e = {"max_num_seqs": 1024}
    assert seqs_tail(1024, e) == ""
    assert seqs_tail(1025, e) == ", but vLLM runs at most 1,024 at once (its max_num_seqs)"


def test_cache_layers_beside_decoder_layers_are_counted_as_the_config_builds_them() -> None:
    """The model line's layer count where cache layers and decoder layers differ (layer_count; a mutation run of
    2026-12-07 found these sentences unguarded by this file).  Falcon-H1-7B: 44 decoder layers, each an attention and
    a Mamba mixer, so 88 cache layers, 44 of them state; Zamba2-7B: 81 decoder layers (all Mamba), 13 with a shared
    attention beside, 94 = 81 + 13 cache layers; Gemma 3n: 35 decoder layers, the last 35 - 20 = 15 reuse KV;
    Nemotron-H-56B: 118 blocks, 118 - 64 = 54 MLP or MoE; a plain model: its layers once."""
    from kvdash.answer.text import layer_count

    def count(name: str) -> str:
        return layer_count(load_config(CONFIGS / name / "config.json"))

    assert "88 cache layers in 44 decoder layers (each runs an attention and a state mixer side by side)" == \
        count("falcon-h1-7b")
    assert "94 cache layers in 81 decoder layers (13 of them run an attention beside their state mixer)" == \
        count("zamba2-7b")
    assert count("gemma-3n-e4b-text").startswith("20 cache layers of 35 decoder layers (the last 15 reuse")
    assert "64 cache layers of 118 decoder layers (the other 54 are MLP or MoE blocks (hybrid_override_pattern " \
           "'-' / 'E'), which hold no cache)" == count("nemotron-h-56b-base-8k")
    assert "80 layers" == layer_count(load_preset("llama-3.1-70b"))


def test_kv_heads_and_head_dim_are_given_per_kind_only_where_the_kinds_differ() -> None:
    """kv_geometry: MiMo-V2-Flash's full layers have 4 KV heads, its sliding ones 8 (both head_dim 192, V 128): one
    clause per kind; Gemma 3's full and sliding layers share 4 KV heads and head_dim 256: one clause, no kinds named;
    a uniform model: one clause."""
    from kvdash.answer.text import kv_geometry

    assert "full layers 4 KV heads, head_dim 192 (V 128); sliding layers 8 KV heads, head_dim 192 (V 128)" == \
        kv_geometry(load_config(CONFIGS / "mimo-v2-flash" / "config.json"))
    assert "4 KV heads, head_dim 256" == kv_geometry(load_config(CONFIGS / "gemma-3-4b-it" / "config.json"))
    assert "8 KV heads, head_dim 128" == kv_geometry(load_preset("llama-3.1-70b"))

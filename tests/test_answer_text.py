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

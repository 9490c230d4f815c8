"""kvdash's SGLang view (:mod:`kvdash.engines.sglang`) against SGLang 0.5.23's own sizing code, figure by figure.

``conformance/sglang/expected.json`` is written by ``conformance/sglang/run.sh`` from SGLang 0.5.23 itself:
``ServerArgs.resolve_once`` (the ``mem_fraction_static`` default, page size, chunked prefill), ``ModelConfig``,
a real ``KVCacheConfigurator`` and its ``_profile_available_bytes``, ``config_from_budget``
(``create_memory_pool_configurator(...).calculate_pool_sizes``) and ``resolve_max_num_reqs``, with the two
free-memory readings mocked (the file's header states them).  Every case is compared here, with the case's own
inputs (GPU MiB, free memory before the weights, weights per rank): the fraction, the budget, the cell size per
token, the pool tokens (full and SWA), ``max_running_requests``, ``context_len`` and the start-up line.

A case SGLang refuses must be refused by kvdash too (one ``InputError``).  A case kvdash does not mirror must be
refused by kvdash in one line, for a reason recorded in :data:`NOT_MIRRORED`; a config kvdash cannot read at
all is recorded in :data:`KVDASH_CANNOT_READ`.  One test per config.
"""

from __future__ import annotations

import functools
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kvdash.core.model import Architecture, load_config
from kvdash.engines import sglang as S
from kvdash.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "data" / "configs"
EXPECTED = ROOT / "conformance" / "sglang" / "expected.json"
FIELDS = ("mem_fraction_static", "page_size", "cell_size_bytes", "available_bytes", "max_total_num_tokens",
          "swa_max_total_num_tokens", "max_running_requests", "context_len", "log_line")

# configs kvdash's SGLang view refuses in one line, and the reason's opening words (kvdash.engines.sglang.refusal):
# none since pure Mamba and DeepSeek sparse attention are mirrored and Jamba / Zamba2 / Falcon are refused by SGLang
# itself (no model class: model_loader/utils.py resolve_transformers_arch)
NOT_MIRRORED: dict[str, str] = {}
# configs kvdash's config reader refuses (one InputError), with what SGLang 0.5.23 did with them
KVDASH_CANNOT_READ = {
    "falcon-40b-refinedweb": "refused",  # RWForCausalLM custom code: SGLang refuses too
    "minicpm-2b-sft-bf16": "refused",  # remote code: SGLang refuses too
    "yi-34b-first-release": "refused",  # remote code: SGLang refuses too
    "falcon-h1-0.5b": "refused",  # transformers' FalconH1Config refuses the copy: SGLang too
}
# ministral-3-3b-2512 (model_type ministral3) and ernie-4.5-0.3b (Ernie4_5_ForCausalLM) are refused by vLLM 0.33
# alone: they are read as SGLang reads them (load_config(engine="sglang")) and mirrored case by case


@functools.cache
def _expected() -> dict[str, Any]:
    return json.loads(EXPECTED.read_text())


def _configs() -> list[str]:
    return sorted({c["config"] for c in _expected()["cases"]})


@functools.cache
def _arch(config: str) -> Architecture:
    return load_config(CONFIGS / config / "config.json", engine="sglang")


def kvdash_case(case: dict[str, Any]) -> dict[str, Any]:
    """kvdash's SGLang figures for one case of ``expected.json``, from the case's own inputs."""
    page = None if case["page_size_requested"] == "auto" else int(case["page_size_requested"])
    p = S.plan(_arch(case["config"]), case["gpu_total_mib"], case["tp"], case["kv_dtype"],
               case.get("free_before_weights_bytes", 0), case.get("weights_bytes_per_rank", 0), page,
               model_path=str(CONFIGS / case["config"]))
    return {"mem_fraction_static": p.fraction.value, "page_size": p.page_size, "cell_size_bytes": p.cell_bytes,
            "available_bytes": p.available_bytes, "max_total_num_tokens": p.max_total_num_tokens,
            "swa_max_total_num_tokens": p.swa_tokens, "max_running_requests": p.max_running_requests,
            "context_len": p.context_len, "log_line": p.startup_line()}


def test_header_names_the_producer_and_its_inputs():
    """The file says which SGLang produced it and what the mocked inputs were."""
    e = _expected()
    assert e["sglang_version"] == "0.5.23"
    assert "1,024 MiB" in e["free_before_weights"]
    assert set(e["gpus"]) == {"h100", "h200"}
    assert len({(c["gpu"], c["tp"], c["kv_dtype"], str(c["page_size_requested"])) for c in e["cases"]}) == 48


def test_every_config_is_in_the_grid():
    on_disk = sorted(p.name for p in CONFIGS.iterdir() if (p / "config.json").exists())
    assert _configs() == on_disk


@pytest.mark.parametrize("config", _configs())
def test_config_agrees_with_sglang(config: str):
    cases = [c for c in _expected()["cases"] if c["config"] == config]
    assert cases, config
    if config in KVDASH_CANNOT_READ:
        with pytest.raises(InputError):
            load_config(CONFIGS / config / "config.json", engine="sglang")
        assert {c["status"] for c in cases} == {KVDASH_CANNOT_READ[config]}
        return
    if config in NOT_MIRRORED:
        for c in cases:
            with pytest.raises(S.NotMirrored) as err:
                kvdash_case(c)
            assert err.value.what.startswith(NOT_MIRRORED[config]), err.value.what
            assert "\n" not in str(err.value)
        return
    bad: Counter[str] = Counter()
    first: dict[str, str] = {}
    for c in cases:
        where = f"{c['gpu']} tp{c['tp']} {c['kv_dtype']} page {c['page_size_requested']}"
        if c["status"] != "ok":
            try:
                kvdash_case(c)
            except InputError as exc:
                # SGLang cannot build the model (model_loader/utils.py resolve_transformers_arch): kvdash says
                # SGLang's own sentence
                said = c["reason"].removeprefix("ValueError: ").rstrip(".")
                if "has no SGlang implementation" in said and said not in str(exc):
                    bad["refusal wording"] += 1
                    first.setdefault("refusal wording", f"{where}: kvdash said {exc.allowed!r}, SGLang {said!r}")
                continue
            bad["refusal"] += 1
            first.setdefault("refusal", f"{where}: SGLang refused ({c['reason'][:120]}), kvdash planned")
            continue
        got = kvdash_case(c)
        for k in FIELDS:
            if got[k] != c.get(k):
                bad[k] += 1
                first.setdefault(k, f"{where}: kvdash {got[k]!r}, SGLang {c.get(k)!r}")
    assert not bad, f"{config}: {dict(bad)} of {len(cases)} cases; first: {first}"


def test_agreement_counts_match_readme():
    """conformance/sglang/README.md states how many cases agree; this keeps the statement true."""
    cases = _expected()["cases"]
    ok = [c for c in cases if c["status"] == "ok"]
    mirrored = [c for c in ok if c["config"] not in NOT_MIRRORED and c["config"] not in KVDASH_CANNOT_READ]
    refused = [c for c in cases if c["status"] != "ok"]
    text = (ROOT / "conformance" / "sglang" / "README.md").read_text()
    assert f"{len(cases):,} cases" in text
    assert f"{len(mirrored):,} planned by SGLang and by kvdash" in text
    assert f"{len(refused):,} refused by SGLang" in text
    # the breakdown of SGLang's refusals ("562 refused by SGLang (192: ...; 192: ...; 114: ...; 64: ...). kvdash")
    # adds up to the count it breaks down
    flat = " ".join(text.split())
    head = f"{len(ok):,} planned by SGLang 0.5.23, {len(refused):,} refused by SGLang ("
    assert head in flat
    inner = flat.split(head, 1)[1].split("). kvdash", 1)[0]
    parts = [int(n.replace(",", "")) for n in re.findall(r"(?:^|; )([\d,]+): ", inner)]
    assert len(parts) >= 2 and sum(parts) == len(refused), (parts, inner)


def test_worked_example_llama_70b_tp8_h200():
    """The rule by hand, Llama-3.1-70B at TP 8 on an H200 (143,771 MiB), bf16, page 1:
    reserved 512 + 1.5 x 8,192 + 8/8 x 1,024 + 2 x 512 + 58 x 8 = 15,312 MiB, fraction round(128,459 / 143,771, 3)
    = 0.893; cell max(1, 8 // 8) = 1 KV head x (128 + 128) x 80 layers x 2 B = 40,960 B; with 139,536 MiB free
    before and 17,638,096,896 B of weights per rank the budget is 116,027,106,000 B and 116,027,106,000 // 40,960
    = 2,832,693 tokens; max_running_requests min(4,096, 2,832,693 // 2) = 4,096 (2,832,693 / 131,072 x 512 =
    11,065 clamped)."""
    arch = _arch("llama-3.1-70b")
    p = S.plan(arch, 143771, 8, "bf16", (143771 - 1024) * 2**20, 17_638_096_896)
    assert (p.fraction.reserved_mib, p.fraction.value) == (15312.0, 0.893)
    assert p.cell_bytes == 40_960
    assert (p.available_bytes, p.max_total_num_tokens, p.max_running_requests) == (116_027_106_000, 2_832_693, 4096)


def test_gemma3_is_not_a_hybrid_in_sglang():
    """is_hybrid_swa_model does not list Gemma 3: every one of its 62 layers holds every token:
    16 KV heads x (128 + 128) x 62 x 2 B = 507,904 B per token at TP 1."""
    p = S.plan(_arch("gemma-3-27b-it"), 143771, 1, "bf16", 100 * 2**30, 0)
    assert (p.pool, p.cell_bytes) == ("default", 507_904)


def test_llama4_is_a_hybrid_swa_pool():
    """Llama 4: 12 full + 0.8 x 36 SWA layers of max(1, 8 // 4) = 2 KV heads x (128 + 128) x 2 B = 1,024 B:
    12,288 + 0.8 x 36,864 = 41,779.2 B per full-pool token at TP 4; the SWA pool is 0.8 x the full pool."""
    p = S.plan(_arch("llama-4-scout-17b-16e-instruct"), 143771, 4, "bf16", 100 * 2**30, 0)
    assert (p.pool, p.full_layers, p.swa_layers, p.full_per_token) == ("hybrid_swa", 12, 36, 1024)
    assert p.cell_bytes == pytest.approx(41779.2)
    assert p.swa_tokens == int(p.max_total_num_tokens * 0.8)


def test_refusal_is_one_line(tmp_path):
    """What kvdash does not mirror is refused in one line: DeepSeek sparse attention with pooled index keys
    (index_kpool 2: configs/model_config.py get_dsa_index_kpool, a page of 128 and half the index bytes per token)."""
    cfg = json.loads((CONFIGS / "glm-5.1" / "config.json").read_text())
    cfg["index_kpool"] = 2
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(S.NotMirrored) as err:
        S.plan(load_config(tmp_path / "config.json"), 143771, 4, "bf16", 100 * 2**30, 0)
    assert str(err.value).count("\n") == 0 and "index_kpool" in str(err.value)


def test_model_without_an_sglang_class_is_refused_in_sglangs_words():
    """SGLang 0.5.23 has no class for Falcon, Jamba or Zamba2 (no srt/models/*.py EntryClass names them) and
    transformers' classes report is_backend_compatible() False, so model_loader/utils.py resolve_transformers_arch
    refuses them under --model-impl auto: "FalconForCausalLM has no SGlang implementation and the Transformers
    implementation is not compatible with SGLang." (the harness's cases), before any sizing."""
    for config, arch in (("falcon-7b-instruct", "FalconForCausalLM"), ("jamba-1.5-mini", "JambaForCausalLM"),
                         ("zamba2-7b", "Zamba2ForCausalLM")):
        with pytest.raises(InputError) as err:
            S.plan(_arch(config), 143771, 1, "bf16", 142_747 * 2**20, 0)
        assert not isinstance(err.value, S.NotMirrored)
        assert f"{arch} has no SGlang implementation and the Transformers implementation is not compatible with " \
               "SGLang" in str(err.value) and "\n" not in str(err.value)


def test_dsa_deepseek_v32_h100_by_hand():
    """DeepSeek-V3.2 (DSA), H100 (81,559 MiB), TP 1, weights 0, any --page-size (the conformance cases):
    * page 64: arg_groups/model_overrides/deepseek_v2.py sets 64 x index_kpool (1) for DeepSeek DSA;
    * fraction (MLA): 512 + 1.5 x 8,192 + 1/8 x 1,024 + 2 x 256 + 1,536 = 14,976 MiB reserved, round(66,583 / 81,559,
      3) = 0.816; budget 78.6474609375 GB x 0.816 = 68,908,807,618 B;
    * cell (pool_configurator.py _compute_cell_size, _compute_dsa_indexer_cell_size): bf16 61 x ((512 + 64) x 2 +
      132) = 61 x 1,284 = 78,324 B, the indexer's 128 + 128 // 128 x 4 = 132 uint8 per layer; fp8
      (kv_cache_configurator.py calculate_mla_kv_cache_dim) 61 x (512 + 4 x 4 + 64 x 2 + 132) = 61 x 788 = 48,068 B;
    * tokens: 68,908,807,618 // 78,324 = 879,791 -> 879,744 at page 64; // 48,068 = 1,433,569 -> 1,433,536;
    * running requests: int(879,744 / 163,840 x 512) = 2,749; fp8 int(4,479.8) clamped to 4,096."""
    arch = _arch("deepseek-v3.2")
    p = S.plan(arch, 81_559, 1, "bf16", 80_535 * 2**20, 0, 16)
    assert (p.page_size, p.fraction.reserved_mib, p.fraction.value) == (64, 14_976, 0.816)
    assert (p.available_bytes, p.cell_bytes, p.max_total_num_tokens, p.max_running_requests) == \
        (68_908_807_618, 78_324, 879_744, 2749)
    p8 = S.plan(arch, 81_559, 1, "fp8", 80_535 * 2**20, 0)
    assert (p8.page_size, p8.cell_bytes, p8.max_total_num_tokens, p8.max_running_requests) == \
        (64, 48_068, 1_433_536, 4096)


def test_pure_mamba_h100_by_hand():
    """Pure Mamba, H100, TP 1, weights 0 (the conformance cases; kv_cache_configurator.py _handle_max_mamba_cache,
    pool_configurator.py DefaultPoolConfigurator): fraction 0.83 (13,904 MiB reserved), rest 78.6474609375 GB x 0.83;
    the state pool takes 0.9 / 1.9 of it, 33,201,031,534.48 B;
    * mamba-130m (Mamba-1: configs/mamba.py, Mamba2StateShape.create_full_rank): 24 layers x (conv 1,536 x 3 x 2 B +
      temporal 1,536 x 16 x 4 B) = 24 x 107,520 = 2,580,480 B per request; (33,201,031,534 - 2,580,480) //
      2,580,480 = 12,865 slots; 12,866 slots off the budget leave 36,890,610,892 B;
    * mamba-codestral-7b (Mamba-2: configs/mamba2.py): 64 x (conv (8,192 + 2 x 8 x 128) x 3 x 2 B + temporal 128 x
      64 x 128 x 4 B) = 64 x 4,255,744 = 272,367,616 B; 120 slots; 37,134,585,036 B;
    * no attention layer: a 0 B cell, so max_total_num_tokens is context_len, 2,048 (_zero_kv_max_tokens), at any
      page size (no radix-cache strategy for these architectures, so no page-1 rule);
    * running requests: min(2,048 clamped, 2,048 // 2 = 1,024) then the state cap: 12,865 // 3 = 4,288 -> 1,024;
      120 // 3 = 40."""
    for config, per_req, slots, available, running in (("mamba-130m", 2_580_480, 12_865, 36_890_610_892, 1024),
                                                        ("mamba-codestral-7b", 272_367_616, 120, 37_134_585_036, 40)):
        arch = _arch(config)
        assert S.mamba_cache_per_req(arch, 1) == per_req
        for page in (None, 64):
            p = S.plan(arch, 81_559, 1, "bf16", 80_535 * 2**20, 0, page)
            assert (p.fraction.value, p.mamba_slots, p.available_bytes) == (0.83, slots, available)
            assert (p.cell_bytes, p.max_total_num_tokens, p.max_running_requests) == (0, 2048, running)


def test_gemma3n_kv_shared_layers_keep_a_pool_buffer_in_sglang():
    """SGLang 0.5.23's ModelConfig sizes the token pool by num_hidden_layers (num_attention_layers), Gemma 3n's 15
    KV-shared layers included, where vLLM gives them no cache: a token is 35 layers x 2 KV heads x (256 + 256) x
    2 B = 71,680 B at TP 1 (vLLM: 20 x 2,048 = 40,960 B), as SGLang's own code gave for gemma-3n-e4b-text."""
    p = S.plan(_arch("gemma-3n-e4b-text"), 143771, 1, "bf16", 100 * 2**30, 0)
    assert p.cell_bytes == 71_680


def test_lfm2_moe_is_no_buffer_like_lfm2():
    """LFM2-8B-A1B (``Lfm2MoeForCausalLM``): SGLang 0.5.23 lists it in ``_MAMBA_RADIX_CACHE_ARCHS`` but not in
    ``_MAMBA_EXTRA_BUFFER_ARCHS`` (``arg_groups/overrides.py``), so its strategy is no_buffer and a page above 1 is
    refused (``mamba_hook.py validate_mamba_no_buffer``).  Its cell by hand: 6 full-attention layers x 8 KV heads x
    (64 + 64) x 2 B = 12,288 B per token (head_dim 2,048 / 32 = 64); the 18 short-conv layers are state slots."""
    arch = _arch("lfm2-8b-a1b")
    free = (143771 - 1024) * 2**20
    with pytest.raises(InputError, match="no_buffer only supports page_size=1"):
        S.plan(arch, 143771, 1, "bf16", free, 0, 16)
    assert S.plan(arch, 143771, 1, "bf16", free, 0).cell_bytes == 12_288


def test_qwen35_text_config_has_the_multimodal_cell_without_the_vision_cut():
    """Qwen3.5-27B's text-only class (``Qwen3_5ForCausalLM``) takes the extra buffer as the multimodal class does
    (``_MAMBA_EXTRA_BUFFER_ARCHS``): the same cell, 16 full layers x 4 KV heads x (256 + 256) x 2 B = 65,536 B per
    token, but the default fraction (0.903 on an H200 at TP 1) without ``adjust_mem_fraction_for_vlm``'s cut
    (the multimodal config's 0.835...), so its pool holds more tokens."""
    free = (143771 - 1024) * 2**20
    text = S.plan(_arch("qwen3.5-27b-text"), 143771, 1, "bf16", free, 0)
    mm = S.plan(_arch("qwen3.5-27b"), 143771, 1, "bf16", free, 0)
    assert text.cell_bytes == mm.cell_bytes == 65_536
    assert text.fraction.value == 0.903 and mm.fraction.value < 0.903
    assert text.max_total_num_tokens > mm.max_total_num_tokens


def test_ministral3_multimodal_by_hand():
    """Ministral-3-3B-2512 (model_type ministral3, ``Mistral3ForConditionalGeneration``: models/mistral.py) on an
    H100 (81,559 MiB), TP 1, bf16, page unset, weights 0 (the conformance case):
    * fraction: prefill CUDA graphs off for a multimodal model not on the breakable list (cuda_graph_hook.py), so
      reserved 512 + 1.5 x 8,192 + 1/8 x 1,024 + 2 x 256 + 0 = 13,440 MiB, round((81,559 - 13,440) / 81,559, 3) =
      round(0.83521, 3) = 0.835; adjust_mem_fraction_for_vlm (arg_groups/memory_hook.py): transformers'
      Ministral3Config keeps vision_config a dict, so getattr's defaults 24 layers x 1,024 wide, complexity 24 x
      1,024^2 / (24 x 1,024^2) = 1, factor 0.95 x clamp(1 - 0.1 x 0, 0.8, 1.05) = 0.95: 0.835 x 0.95 = 0.79325;
    * budget: 78.6474609375 GB x 0.79325 - 100 MiB (the embedding cache, CPU transport: mm_runtime_reservation_gb)
      = 62.38709838867 - 0.09765625 = 62.28944213867 GB = 66,882,779,217 B;
    * cell: 26 layers x 8 KV heads x (128 + 128) x 2 B = 106,496 B; 66,882,779,217 // 106,496 = 628,030 tokens;
    * context_len 262,144 (text_config max_position_embeddings; the yarn factor 16 names
      original_max_position_embeddings, so it is not applied); max_running_requests int(628,030 / 262,144 x 512)
      = 1,226, clamped up to 2,048."""
    p = S.plan(_arch("ministral-3-3b-2512"), 81_559, 1, "bf16", 80_535 * 2**20, 0)
    assert (p.fraction.reserved_mib, p.fraction.vlm_factor, p.fraction.value) == (13_440, 0.95, 0.835 * 0.95)
    assert (p.available_bytes, p.cell_bytes, p.max_total_num_tokens) == (66_882_779_217, 106_496, 628_030)
    assert (p.context_len, p.max_running_requests) == (262_144, 2048)


def test_ernie45_first_release_by_hand():
    """ERNIE-4.5-0.3B's first-release config (``Ernie4_5_ForCausalLM``, SGLang 0.5.23's models/ernie4.py) on an
    H100, TP 1, bf16, page unset, weights 0 (the conformance case): a text model, prefill graphs on:
    reserved 512 + 12,288 + 128 + 512 + 58 x 8 = 13,904 MiB, round(67,655 / 81,559, 3) = 0.83; budget
    78.6474609375 GB x 0.83 = 70,091,066,572 B; cell 18 layers x 2 KV heads x (128 + 128) x 2 B = 18,432 B;
    70,091,066,572 // 18,432 = 3,802,683 tokens; max_running_requests int(3,802,683 / 131,072 x 512) = 14,854,
    clamped to 4,096."""
    p = S.plan(_arch("ernie-4.5-0.3b"), 81_559, 1, "bf16", 80_535 * 2**20, 0)
    assert (p.fraction.reserved_mib, p.fraction.value) == (13_904, 0.83)
    assert (p.available_bytes, p.cell_bytes, p.max_total_num_tokens) == (70_091_066_572, 18_432, 3_802_683)
    assert (p.context_len, p.max_running_requests) == (131_072, 4096)


@pytest.mark.parametrize("config, field, words", [
    ("ministral-3-3b-2512", "model_type", "the text_config extracted from the model config does not have "
                                          "`num_attention_heads` attribute"),
    ("ernie-4.5-0.3b", "architectures", "Ernie4_5_ForCausalLM, the remote-code class of the first release"),
])
def test_vllm_only_refusals_stay_with_vllms_reader(config: str, field: str, words: str):
    """The two configs SGLang 0.5.23 serves and vLLM 0.33 refuses (conformance/vllm/expected.json: a ValidationError
    on every case) are read for SGLang's view only: kvdash's default reader, which calc, sweep, live and simulate
    use, refuses them in one line with vLLM's reason, as before."""
    with pytest.raises(InputError) as err:
        load_config(CONFIGS / config / "config.json")
    assert f": {field}" in err.value.field and words in str(err.value) and "\n" not in str(err.value)
    assert not isinstance(err.value, S.NotMirrored)
    load_config(CONFIGS / config / "config.json", engine="sglang")  # SGLang's reading: no refusal

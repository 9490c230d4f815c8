"""kvdash against vLLM 0.33.0's own code, figure by figure.

``conformance/vllm/expected.json`` is written by the harness in ``conformance/vllm/`` from vLLM 0.33.0
itself: each model is built by vLLM's own model class (on the meta device, no weights) and every layer
answers its own ``get_kv_cache_spec``; vLLM's ``kv_cache_planning.py`` / ``kv_cache_utils.py`` then plan
the pool, set up as ``vllm serve`` runs on an H100/H200 (the file's ``serve`` header).  Every case is
compared here: KV heads and head size per rank, layer kinds, block size used, page bytes, groups,
``num_gpu_blocks``, max concurrency and the logged line.  A case vLLM refuses must be refused by kvdash too
(one ``InputError``).

One test per config; a failing one lists every figure that disagrees, how many cases it disagrees in, and
the first cases with both values, so a difference reads as a cause, not as hundreds of failures.

The second half pins the five models of issue 10's table (tp 1, bf16, block 16, 12 GiB per rank,
max_model_len 2,048), whose vLLM 0.33 figures were measured with vLLM's planner when the issue was filed.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kvdash.answer.budget import BudgetSpec
from kvdash.answer.calc import CalcInput, calculate
from kvdash.core import formulas as f
from kvdash.core.model import Architecture, load_config
from kvdash.core.pool import layer_token_bytes
from kvdash.engines.vllm import stored_kv_dtype
from kvdash.errors import InputError
from kvdash.units import GiB

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "data" / "configs"
EXPECTED = ROOT / "conformance" / "vllm" / "expected.json"
CALC_FIELDS = {field.name for field in dataclasses.fields(CalcInput)}


@functools.cache
def _arch(config: str, root: Path = CONFIGS) -> Architecture:
    return load_config(root / config / "config.json")


def kvdash_case(config: str, tp: int, kv_dtype: str, block_size: int | str, budget: int, prefix_caching: bool,
                max_model_len: int, serve: dict[str, Any] | None = None, root: Path = CONFIGS) -> dict[str, Any]:
    """kvdash's figures for one case, in the schema of ``expected.json``.  ``serve``: the engine settings of
    ``expected.json``'s header (batched tokens, max_num_seqs, async scheduling), passed to kvdash where its
    ``CalcInput`` has the field; ``root``: the folder holding ``config/config.json`` (``tests/data/configs``,
    or ``conformance/vllm/external`` for the external set)."""
    arch = _arch(config, root)
    length = min(max_model_len, arch.max_context)
    extra: dict[str, Any] = {}
    serve = serve or {}
    if "max_num_batched_tokens" in serve:
        extra["max_batched_tokens"] = serve["max_num_batched_tokens"]
    if "max_num_seqs" in serve and "max_num_seqs" in CALC_FIELDS:
        extra["max_num_seqs"] = serve["max_num_seqs"]
    if "async_scheduling" in CALC_FIELDS:
        extra["async_scheduling"] = True  # vllm serve's default (VllmConfig resolves it on)
    r = calculate(CalcInput(arch=arch, kv_dtype=kv_dtype, block_size=block_size, budget=BudgetSpec(bytes=budget),
                            tp=tp, used=1, max_reserved=length, max_model_len=max_model_len,
                            prefix_caching=prefix_caching, **extra))
    pool, view = r["pool"], r["vllm_view"]
    stage = pool["stages"][0]
    block = pool["block_size"]
    pages: dict[str, int] = {}
    for layer in arch.layers:
        if layer.is_state and not arch.attention_layers:  # attention-free: the state page itself
            pages[layer.kind] = stage["state_page_bytes"]
        elif layer.is_state:  # padded to the attention page (vLLM's page_size_padded)
            pages[layer.kind] = block * stage["layer_token_bytes"]
        else:
            # the dtype vLLM stores the cache in (Falcon keeps bf16 under fp8: engines/vllm.py stored_kv_dtype);
            # a sparse MLA layer is two cache layers to vLLM, the latent and the indexer's keys (a page of
            # block x index_bytes), in one group: kvdash holds both in one layer of their summed bytes per token
            pages[layer.kind] = block * (layer_token_bytes(layer, stored_kv_dtype(arch, kv_dtype)[0], "tensor", tp)
                                         - layer.index_bytes)
            if layer.index_bytes:
                pages["indexer"] = block * layer.index_bytes
    # vLLM assigns layers[i::n] to the i-th of a kind's n groups
    sizes = []
    counts = Counter(("state" if layer.is_state else layer.kind, layer.window) for layer in arch.layers)
    indexers = sum(1 for layer in arch.layers if layer.index_bytes)
    kinds = dict(arch.counts) | ({"indexer": indexers} if indexers else {})
    if indexers:  # vLLM's one group holds the latents and the indexers (UniformTypeKVCacheSpecs)
        counts[("mla", 0)] += indexers
    for count in counts.values():
        n = f.cdiv(count, stage["group_size"] * (2 if indexers else 1))  # a sparse MLA layer: 2 cache layers
        sizes.extend(len(range(i, count, n)) for i in range(n))
    attn = arch.first("full", "sliding", "chunked")
    return {
        "num_kv_heads": max(1, attn.kv_heads // tp) if attn else (1 if arch.use_mla else 0),
        "head_size": arch.head_dim,
        "use_mla": arch.use_mla,
        "is_hybrid": arch.is_hybrid,
        "layer_kinds": kinds,
        "block_size": block,
        "page_bytes": pages,
        "num_groups": view["kv_cache_groups"],
        "group_sizes": sorted(sizes),
        "num_gpu_blocks": view["num_gpu_blocks"],
        "max_concurrency": view["max_concurrency"],
        "gpu_kv_cache_tokens": view["gpu_kv_cache_tokens"],
        "log_line": view["log_lines"][0],
    }


FIGURES = ("num_kv_heads", "head_size", "use_mla", "is_hybrid", "layer_kinds", "block_size", "page_bytes",
           "num_groups", "group_sizes", "num_gpu_blocks", "gpu_kv_cache_tokens", "log_line", "max_concurrency")


def _load_expected() -> dict[str, Any] | None:
    if not EXPECTED.is_file():
        return None
    data: dict[str, Any] = json.loads(EXPECTED.read_text(encoding="utf-8"))
    return data


EXPECTED_DATA = _load_expected()
CASES: list[dict[str, Any]] = EXPECTED_DATA["cases"] if EXPECTED_DATA else []
SERVE: dict[str, Any] = EXPECTED_DATA.get("serve", {}) if EXPECTED_DATA else {}
BY_CONFIG: dict[str, list[dict[str, Any]]] = {}
for _case in CASES:
    BY_CONFIG.setdefault(_case["config"], []).append(_case)


def case_id(case: dict[str, Any]) -> str:
    return (f"tp{case['tp']} {case['kv_dtype']} block {case['block_size_requested']} "
            f"len {case.get('max_model_len', EXPECTED_DATA and EXPECTED_DATA.get('max_model_len'))} "
            f"prefix {'on' if case['prefix_caching'] else 'off'} {case['budget_bytes'] // GiB} GiB")


def compare(case: dict[str, Any], serve: dict[str, Any] | None = None,
            root: Path = CONFIGS) -> list[tuple[str, Any, Any]]:
    """(figure, vLLM, kvdash) for every figure of ``case`` kvdash disagrees on; empty when it agrees.
    ``serve`` (default: this file's header) and ``root`` (default ``tests/data/configs``) let another
    harness output, such as the external set's, be compared the same way."""
    args = (case["config"], case["tp"], case["kv_dtype"], case["block_size_requested"], case["budget_bytes"],
            case["prefix_caching"], case["max_model_len"], SERVE if serve is None else serve, root)
    if case["status"] == "refused":
        try:
            got = kvdash_case(*args)
        except InputError:
            return []
        return [("refusal", case["reason"][:160], f"planned: {got['log_line']}")]
    try:
        got = kvdash_case(*args)
    except InputError as exc:
        return [("refusal", f"planned: {case['log_line']}", f"refused: {str(exc)[:160]}")]
    diffs = []
    for key in FIGURES:
        want = sorted(case[key]) if key == "group_sizes" else case[key]
        have = got[key]
        if key == "max_concurrency":
            if want != pytest.approx(have, rel=1e-12):
                diffs.append((key, want, have))
        elif want != have:
            diffs.append((key, want, have))
    return diffs


def report(config: str, cases: list[dict[str, Any]], examples: int = 3, serve: dict[str, Any] | None = None,
           root: Path = CONFIGS) -> str:
    """Every disagreement of one config, grouped by figure: count, then the first cases."""
    by_figure: dict[str, list[str]] = {}
    bad = 0
    for case in cases:
        diffs = compare(case, serve, root)
        bad += bool(diffs)
        for key, want, have in diffs:
            by_figure.setdefault(key, []).append(f"{case_id(case)}: vLLM {want!r}, kvdash {have!r}")
    if not bad:
        return ""
    lines = [f"{config}: kvdash disagrees with vLLM 0.33.0 on {bad} of {len(cases)} cases"]
    for key, items in sorted(by_figure.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"  {key}: {len(items)} cases, e.g.")
        lines.extend(f"    {item}" for item in items[:examples])
    return "\n".join(lines)


def test_expected_file_is_vllm_033_as_served_on_hopper():
    """The harness's output is committed, names the vLLM release and the ``vllm serve`` settings it ran
    with on an H100/H200 (EngineArgs.get_batch_defaults: 8,192 batched tokens and 1,024 sequences for a
    GPU of 70 GiB or more that is not an A100; async scheduling on), and covers the grid of issue 22."""
    assert EXPECTED_DATA is not None, f"{EXPECTED} is missing: run conformance/vllm/run.sh to generate it"
    assert "0.33.0" == EXPECTED_DATA["vllm_version"]
    assert CASES, "expected.json holds no cases"
    assert 8192 == SERVE["max_num_batched_tokens"]
    assert 1024 == SERVE["max_num_seqs"]
    assert [2048, 32768] == SERVE["max_model_len"]
    assert ["auto", 16, 32, 64] == SERVE["block_size"]
    assert [1, 2, 4, 8] == SERVE["tensor_parallel_size"]
    folders = {p.name for p in CONFIGS.iterdir() if (p / "config.json").is_file()}
    assert folders == set(BY_CONFIG), "every committed config has cases"


def test_every_case_has_vllm_figures():
    """Every case's specs came from vLLM's own layer code (or vLLM refused it): none was mirrored by hand,
    none is "not mirrored" (the harness could not build the model and has no rule for it)."""
    missing = Counter((c["config"], c.get("spec_source", "?")) for c in CASES
                      if c["status"] not in ("ok", "refused"))
    assert not missing, "cases without vLLM figures: " + ", ".join(f"{k[0]} ({k[1]}): {n}"
                                                                  for k, n in sorted(missing.items()))
    sources = Counter(c.get("spec_source") for c in CASES)
    assert set(sources) <= {"vllm-layers"}, sources


@pytest.mark.parametrize("config", sorted(BY_CONFIG))
def test_config_agrees_with_vllm(config):
    """All cases of one config: vLLM refused it and kvdash refuses it, or every figure agrees."""
    cases = [c for c in BY_CONFIG[config] if c["status"] in ("ok", "refused")]
    text = report(config, cases)
    assert not text, "\n" + text


class TestIssueTable:
    """Issue 10's table: five published configs at tp 1, bf16, block 16, 12 GiB per rank, max_model_len 2,048;
    the right-hand column is vLLM 0.33.0 (its planner, run when the issue was filed)."""

    @staticmethod
    def case(config: str, prefix_caching: bool = True) -> dict[str, Any]:
        return kvdash_case(config, 1, "bf16", 16, 12 * GiB, prefix_caching, 2048)

    def test_falcon_7b_multi_query(self):
        """``multi_query: true`` (not ``new_decoder_architecture``): 1 KV head of 64 -> 32 layers x 2 x 64 x 2 B
        = 8,192 B/token; 12 GiB / (16 x 8,192) = 98,304 blocks, 128 per request -> 768x."""
        got = self.case("falcon-7b-instruct")
        assert (1, 64) == (got["num_kv_heads"], got["head_size"])
        assert 98_304 == got["num_gpu_blocks"]
        assert got["log_line"].endswith("768.00x")

    def test_falcon_40b_new_decoder_architecture(self):
        """``new_decoder_architecture`` with ``num_kv_heads: 8``: 60 x 2 x 8 x 64 x 2 = 122,880 B/token;
        12 GiB / (16 x 122,880) = 6,553 blocks / 128 = 51.20x."""
        got = self.case("falcon-40b-instruct")
        assert 8 == got["num_kv_heads"]
        assert 6_553 == got["num_gpu_blocks"]
        assert got["log_line"].endswith("51.20x")

    def test_jamba(self):
        """Jamba (``attn_layer_period`` 8, offset 4): 4 attention + 28 Mamba-1 layers.  State page
        (8,192 x 3 + 8,192 x 16) x 2 B = 311,296 B; attention 4,096 B/token -> block 16 x ceil(311,296 / 65,536)
        = 80; groups of 4 layers: 1 + 7 = 8; 12 GiB / (80 x 4,096 x 4) = 9,830 blocks.  A request of 2,048
        tokens: 26 attention blocks + 7 state groups x 2 (align) = 40 -> 245.75x; prefix caching off:
        26 + 7 = 33 -> 297.88x."""
        on, off = self.case("jamba-1.5-mini"), self.case("jamba-1.5-mini", prefix_caching=False)
        assert {"full": 4, "mamba": 28} == on["layer_kinds"]
        assert (80, 8, 9_830) == (on["block_size"], on["num_groups"], on["num_gpu_blocks"])
        assert 327_680 == on["page_bytes"]["mamba"] == on["page_bytes"]["full"]
        assert on["log_line"].endswith("245.75x")
        assert off["log_line"].endswith("297.88x")

    def test_qwen3_next(self):
        """Qwen3-Next (``full_attention_interval`` 4, no ``layer_types``): 12 full + 36 gated-delta-net
        layers.  State (8,192 x 3 + 32 x 128 x 128) x 2 B = 1,097,728 B; attention 2 x 2 x 256 x 2 = 2,048
        B/token -> block 16 x ceil(1,097,728 / 32,768) = 544; groups of 12: 1 + 3 = 4; 12 GiB / (544 x 2,048
        x 12) = 963 blocks; prefix caching off: 4 + 3 = 7 blocks per request -> 137.57x."""
        got = self.case("qwen3-next-80b-a3b-thinking", prefix_caching=False)
        assert {"full": 12, "linear": 36} == got["layer_kinds"]
        assert (544, 4, 963) == (got["block_size"], got["num_groups"], got["num_gpu_blocks"])
        assert got["log_line"].endswith("137.57x")

    def test_gemma_3_27b_default_pattern(self):
        """Gemma-3-27b-it names no ``sliding_window_pattern`` and no ``max_position_embeddings`` in
        ``text_config``: transformers' defaults (pattern 6, 131,072 tokens) give 10 full + 52 sliding,
        groups of 10: 1 + 6 = 7; 16 x 8,192 x 10 B a block -> 9,830 blocks."""
        got = self.case("gemma-3-27b-it")
        assert {"full": 10, "sliding": 52} == got["layer_kinds"]
        assert (7, 9_830) == (got["num_groups"], got["num_gpu_blocks"])
        assert [8, 8, 9, 9, 9, 9, 10] == got["group_sizes"]
        assert 131_072 == load_config(CONFIGS / "gemma-3-27b-it" / "config.json").max_context

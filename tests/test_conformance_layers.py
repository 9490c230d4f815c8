"""A third source for which layer is which: vLLM's built layers against transformers' config classes.

``conformance/vllm/expected.json`` records, per config, every layer vLLM 0.33.0's own model class built
and the kind of KV-cache spec that layer returned (``configs[name]["layers"]``: layer name -> kind; the
harness builds the model on the meta device and calls each layer's ``get_kv_cache_spec``).  Here the same
layers are read from ``transformers``' own config class for the file's ``model_type`` (the library kvdash
reads configs with): ``layer_types`` (Gemma 2/3, gpt-oss, Qwen3-Next/3.5, Llama 4, LFM2, OLMo 3 ...),
``layers_block_type`` (Jamba) and ``hybrid_override_pattern`` (Nemotron-H: ``M`` Mamba-2, ``*`` attention,
``-`` / ``E`` no KV cache).  A layer whose kind differs fails, naming both sources; a ``layer_types`` value
without a rule below fails too (never guessed).  Without any per-layer field, every decoder layer must hold
KV cache (vLLM built one cache layer for each of ``num_hidden_layers``).
"""

from __future__ import annotations

import json
import re
import types
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "data" / "configs"
EXPECTED = ROOT / "conformance" / "vllm" / "expected.json"

# transformers' layer_types values -> the kind of spec vLLM's layer returns (harness spec_kind):
# full_attention -> FullAttentionSpec (MLAAttentionSpec for MLA models), sliding_attention ->
# SlidingWindowSpec, chunked_attention -> ChunkedLocalAttentionSpec, linear_attention -> MambaSpec of a
# gated delta net, mamba -> MambaSpec (Mamba-1/2), conv -> MambaSpec of a short convolution (LFM2).
LAYER_TYPES = {"full_attention": "full", "attention": "full", "sliding_attention": "sliding",
               "chunked_attention": "chunked", "linear_attention": "linear", "mamba": "mamba",
               "conv": "short_conv", "indexed_attention": "indexed"}
# sparse MLA (GLM-5's GlmMoeDsaConfig: "indexed_attention"): the layer holds the latent (MLAAttentionSpec) and the
# indexer's key cache (DeepseekV32IndexerCache, harness kind "indexer"), two cache layers of one decoder index
INDEXED = {"mla", "indexer"}
NEMOTRON_PATTERN = {"M": "mamba", "*": "full", "-": None, "E": None}
LAYER_INDEX = re.compile(r"(?:^|\.)(\d+)\.")  # model.layers.3.self_attn.attn, transformer.h.3.self_attention.attn


def _expected_layers() -> dict[str, dict[str, str]]:
    if not EXPECTED.is_file():
        return {}
    data = json.loads(EXPECTED.read_text(encoding="utf-8"))
    return {name: info["layers"] for name, info in data.get("configs", {}).items() if info.get("layers")}


LAYERS = _expected_layers()


def transformers_config(name: str) -> Any:
    """transformers' config class for the file's model_type (its defaults filled in), text part.  A type
    transformers has no class for (ChatGLM, Kimi-K2: the checkpoints ship their own code) is read as
    published: its fields as they stand in config.json."""
    from transformers import CONFIG_MAPPING

    raw = json.loads((CONFIGS / name / "config.json").read_text(encoding="utf-8"))
    if raw["model_type"] not in CONFIG_MAPPING:
        fields = dict(raw.get("text_config") or raw)
        fields.setdefault("num_hidden_layers", fields.get("num_layers"))
        return types.SimpleNamespace(**fields)
    cfg = CONFIG_MAPPING[raw["model_type"]].from_dict(raw)
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def per_layer_kinds(cfg: Any, mla: bool) -> tuple[str, list[str | None]] | None:
    """(field, kind per decoder layer) from transformers' config, or None when it names no per-layer kind."""
    n = cfg.num_hidden_layers
    pattern = getattr(cfg, "hybrid_override_pattern", None)
    if pattern:
        return "hybrid_override_pattern", [NEMOTRON_PATTERN[ch] for ch in pattern[:n]]
    blocks = getattr(cfg, "layers_block_type", None)
    # transformers' GraniteMoeHybridConfig answers layers_block_type with its layer_types (attribute_map:
    # "full_attention" / "linear_attention"), read below
    if blocks and getattr(cfg, "model_type", "") != "granitemoehybrid":
        # transformers' FalconH1Config answers "hybrid" for every layer (configuration_falcon_h1.py,
        # layers_block_type): attention and a Mamba-2 mixer side by side (vllm falcon_h1.py, FalconH1ParallelHybrid),
        # checked below as {"full", "mamba"}
        return "layers_block_type", [{"attention": "full", "mamba": "mamba", "hybrid": "full"}[b]
                                     for b in list(blocks)[:n]]
    types = getattr(cfg, "layer_types", None)
    if types:
        unknown = sorted(set(types) - set(LAYER_TYPES))
        if unknown:
            pytest.fail(f"layer_types values without a rule in this cross-check: {unknown}")
        kinds: list[str | None] = [LAYER_TYPES[t] for t in list(types)[:n]]
        if getattr(cfg, "model_type", "") in ("mamba", "falcon_mamba", "mamba2", "granitemoehybrid"):
            # transformers' MambaConfig / FalconMambaConfig / Mamba2Config name every layer "linear_attention"; each
            # is a Mamba-1 mixer (vllm/model_executor/models/mamba.py, MambaDecoderLayer) or a Mamba-2 one
            # (mamba2.py, Mamba2DecoderLayer), a MambaSpec of kind "mamba"; GraniteMoeHybridConfig names Granite-4.0-H's
            # Mamba-2 layers so too (granitemoehybrid.py, ALL_DECODER_LAYER_TYPES: "linear_attention" ->
            # GraniteMoeHybridMambaDecoderLayer, a MambaMixer2)
            kinds = ["mamba" if k == "linear" else k for k in kinds]
        if mla:
            kinds = ["mla" if k == "full" else k for k in kinds]
        shared = getattr(cfg, "num_kv_shared_layers", 0) or 0
        if shared:
            # Gemma 3n: transformers' Gemma3nTextConfig says the last num_kv_shared_layers layers use the KV of an
            # earlier layer; vLLM gives them a kv_sharing_target_layer_name (gemma3n.py, Gemma3nAttention.__init__)
            # and get_kv_cache_spec returns no cache for such a layer
            kinds = [None if i >= n - shared else k for i, k in enumerate(kinds)]
        return "layer_types", kinds
    return None


def vllm_kinds(layers: dict[str, str]) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    for name, kind in layers.items():
        m = LAYER_INDEX.search(name)
        assert m, f"vLLM layer name without a decoder index: {name}"
        out.setdefault(int(m.group(1)), set()).add(kind)
    return out


def test_expected_records_vllm_layers_for_every_planned_config():
    data = json.loads(EXPECTED.read_text(encoding="utf-8"))
    planned = {c["config"] for c in data["cases"] if c["status"] == "ok"}
    assert planned <= set(LAYERS), sorted(planned - set(LAYERS))


# Zamba2 (vllm/model_executor/models/zamba2.py, Zamba2Attention.__init__): the shared attention blocks name their
# Attention "model.attn.{j}", j numbering the hybrid layers block by block (num_mem_blocks), not by decoder index
ZAMBA_ATTN = re.compile(r"^model\.attn\.\d+$")


def test_zamba2_attention_per_hybrid_layer():
    """Zamba2: a Mamba-2 mixer in every decoder layer, and one attention cache per "hybrid" layer of
    transformers' layers_block_type (its KV cache is unique for every attention layer)."""
    for name in (n for n in LAYERS if transformers_config(n).model_type == "zamba2"):
        cfg = transformers_config(name)
        attn = [k for k, kind in LAYERS[name].items() if ZAMBA_ATTN.match(k)]
        assert {LAYERS[name][k] for k in attn} == {"full"}
        assert len(attn) == list(cfg.layers_block_type).count("hybrid")
        mixers = [kind for k, kind in LAYERS[name].items() if k not in attn]  # named by vLLM's own layer numbering
        assert mixers == ["mamba"] * cfg.num_hidden_layers


@pytest.mark.parametrize("name", sorted(n for n in LAYERS if transformers_config(n).model_type != "zamba2"))
def test_layer_kinds_agree_with_transformers(name):
    cfg = transformers_config(name)
    built = vllm_kinds(LAYERS[name])
    mla = any(k == "mla" for kinds in built.values() for k in kinds)
    plan = per_layer_kinds(cfg, mla)
    n = cfg.num_hidden_layers
    if getattr(cfg, "model_type", "") == "falcon_h1":
        # vllm/model_executor/models/falcon_h1.py, FalconH1ParallelHybrid.__init__: the Mamba-2 branch of decoder
        # layer i is named "model.{num_hidden_layers + i}.mixer" ("all attention/ssm layers must have different
        # index in prefix"), so its cache layer is folded back onto decoder layer i
        folded: dict[int, set[str]] = {}
        for i, kinds_i in built.items():
            folded.setdefault(i - n if i >= n else i, set()).update(kinds_i)
        built = folded
    if plan is None:
        # no per-layer field: every decoder layer holds KV cache, of one kind
        assert sorted(built) == list(range(n)), f"vLLM built cache layers {sorted(built)} of {n}"
        return
    field, kinds = plan
    wrong = []
    for i, kind in enumerate(kinds):
        got = built.get(i, set())
        want = set() if kind is None else INDEXED if kind == "indexed" else {kind}
        if name.startswith("falcon-h1") and kind is not None:
            want = {kind, "mamba"}
        if got != want:
            wrong.append(f"layer {i}: transformers {field} {kind!r}, vLLM {sorted(got)}")
    extra = sorted(set(built) - set(range(len(kinds))))
    assert not wrong and not extra, "\n".join(wrong + [f"vLLM layers beyond {field}: {extra}"] * bool(extra))

"""Model architectures: layers and what each stores per token (or per request).

An :class:`Architecture` is an ordered tuple of :class:`Layer` records.  It is read from a Hugging
Face ``config.json`` (:func:`load_config`: through ``transformers``' config class for the file's
``model_type``, then vLLM 0.33's rules for what the fields mean for the KV cache, see
:mod:`kvdash.core.modeltypes`) or from a built-in preset, a small ``config.json`` shipped in
``kvdash/data/models/`` read by the same :func:`from_hf_config`.

Layer kinds (vLLM 0.33's KV-cache specs in ``vllm/v1/kv_cache_interface.py``):

* ``full``    -- MHA/GQA/MQA (``FullAttentionSpec``): K and V per KV head per token.
* ``sliding`` -- ``SlidingWindowSpec``: only the last ``window`` tokens are needed.
* ``chunked`` -- ``ChunkedLocalAttentionSpec`` (Llama 4): attention within chunks of ``window`` tokens.
* ``mla``     -- Multi-head Latent Attention: one latent of ``kv_lora_rank + qk_rope_head_dim``
  per token, no K/V doubling, not split by tensor parallelism.
* ``mamba``   -- a Mamba-1/Mamba-2 layer (``MambaSpec``): a fixed-size state per request.
* ``linear``  -- a linear-attention (gated delta net) layer, also a ``MambaSpec`` state per request.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvdash.core import limits
from kvdash.core.arch import (  # noqa: F401 - re-exported: the names callers import from kvdash.core.model
    ATTENTION_KINDS,
    CHUNKED_NAMES,
    FULL_NAMES,
    KINDS,
    SLIDING_NAMES,
    STATE_KINDS,
    STATE_NAMES,
    Architecture,
    Layer,
    _text_config,
)
from kvdash.errors import InputError, unknown_name


def _int(cfg: dict[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = cfg.get(key, default)
    if value is None:
        value = default
    if value is None:
        raise InputError(f"{where}: {key}", None, "this field is required (a positive integer)")
    return limits.check_int(f"{where}: {key}", value, low=1, name=key)  # a documented range per key


def _layer_kinds(cfg: dict[str, Any], n_layers: int, where: str) -> list[str]:
    """The attention kind of every layer from generic fields: ``full``, ``sliding``, ``chunked`` or a
    state name (only with ``_kvdash.state_bytes_per_layer``)."""
    window = cfg.get("sliding_window")
    if cfg.get("use_sliding_window") is False:  # Qwen2/3 ship a window but disable it
        window = None
    types = cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != n_layers:
            raise InputError(
                f"{where}: layer_types", types, f"expected a list of {n_layers} layer kinds"
            )
        kinds = []
        for i, name in enumerate(types):
            key = str(name).lower()
            if key in SLIDING_NAMES:
                kinds.append("sliding")
            elif key in CHUNKED_NAMES:
                kinds.append("chunked")
            elif key in FULL_NAMES:
                kinds.append("full")
            elif key in STATE_NAMES:
                kinds.append("linear" if key == "linear_attention" else "mamba")
            else:
                raise unknown_name(
                    f"{where}: layer_types[{i}]", str(name), SLIDING_NAMES | FULL_NAMES | STATE_NAMES | CHUNKED_NAMES
                )
        if "sliding" in kinds and not window:
            raise InputError(
                f"{where}: sliding_window", window, "sliding layers need a positive window"
            )
        return kinds
    if not window:
        return ["full"] * n_layers
    pattern = cfg.get("sliding_window_pattern")
    if isinstance(pattern, int) and pattern > 0:  # Gemma 3: every pattern-th layer is global
        return ["full" if (i + 1) % pattern == 0 else "sliding" for i in range(n_layers)]
    if cfg.get("model_type") in {"gemma2"}:  # alternating, layer 0 local
        return ["sliding" if i % 2 == 0 else "full" for i in range(n_layers)]
    return ["sliding"] * n_layers


# the context-length keys SGLang 0.5.23 reads, in its order (srt/utils/hf_transformers/common.py
# CONTEXT_LENGTH_KEYS); kept as config facts for kvdash.engines.sglang
LENGTH_FIELDS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings")


def config_dtype(cfg: dict[str, Any]) -> str:
    """The checkpoint's dtype as config.json names it (``dtype`` in transformers 5, ``torch_dtype`` before; the
    top level first, then ``text_config``), ``""`` where it names none."""
    dtypes = [c.get(k) for c in (cfg, cfg.get("text_config")) if isinstance(c, dict) for k in ("dtype", "torch_dtype")]
    return next((str(d) for d in dtypes if isinstance(d, str)), "")


def from_hf_config(
    cfg: dict[str, Any],
    name: str,
    source: str = "config.json",
    weight_bytes: int = 0,
    weight_basis: str = "not given",
    weights_known: bool = True,
) -> Architecture:
    """Build an :class:`Architecture` from a (normalised) Hugging Face ``config.json`` dictionary.

    ``head_dim`` is read when present (``hidden_size / num_attention_heads`` is wrong for Qwen3,
    Gemma, gpt-oss and others); the KV heads follow vLLM's ``get_total_num_kv_heads`` (Falcon's
    ``multi_query``, then ``n_head_kv``, ``num_kv_heads``, ``num_key_value_heads``,
    ``multi_query_group_num``, else ``num_attention_heads``).  Model-type rules (hybrid layer
    patterns, state shapes) come from :mod:`kvdash.core.modeltypes`.
    """
    from kvdash.core import modeltypes
    from kvdash.core.maxlen import derived_max_model_len

    where = source
    if not isinstance(cfg, dict):
        raise InputError(where, type(cfg).__name__, "expected a JSON object")
    archs = cfg.get("architectures")
    nested = isinstance(cfg.get("text_config"), dict)
    top_type = str(cfg.get("model_type") or "")
    vision = cfg.get("vision_config") if isinstance(cfg.get("vision_config"), dict) else None
    quant = cfg.get("quantization_config")
    if not isinstance(quant, dict) and nested:
        quant = cfg["text_config"].get("quantization_config")
    torch_dtype = config_dtype(cfg)
    cfg = modeltypes.aliases(_text_config(cfg))
    facts: dict[str, Any] = {
        # the checkpoint's dtype, which vLLM's --dtype auto serves (kvdash.engines.vllm.model_dtype)
        "torch_dtype": torch_dtype,
        "architectures": tuple(str(a) for a in archs) if isinstance(archs, list) else (),
        "nested_text_config": nested,
        # the top-level model_type and the vision tower's integer fields (None: no vision_config), for SGLang's
        # adjust_mem_fraction_for_vlm (kvdash.engines.sglang)
        "top_model_type": top_type,
        "vision_config": None if vision is None else {
            k: v for k, v in vision.items() if isinstance(v, int) and not isinstance(v, bool)},
        "length_fields": {k: cfg[k] for k in LENGTH_FIELDS if isinstance(cfg.get(k), int)
                          and not isinstance(cfg.get(k), bool)},
        "rope_scaling": dict(cfg["rope_scaling"]) if isinstance(cfg.get("rope_scaling"), dict) else {},
        # sliding-window layers with their own geometry (MiMo-V2), and the layer pattern that names them
        "swa": {k: cfg[k] for k in ("swa_num_key_value_heads", "swa_head_dim", "swa_v_head_dim")
                if isinstance(cfg.get(k), int) and not isinstance(cfg.get(k), bool)},
        "hybrid_layer_pattern": tuple(cfg["hybrid_layer_pattern"])
        if isinstance(cfg.get("hybrid_layer_pattern"), list) else (),
        # the checkpoint's quantization_config (top level, else text_config's): what a KV dtype of "auto" becomes
        "quantization_config": dict(quant) if isinstance(quant, dict) else {},
        # the DeepSeek-sparse-attention keys SGLang's indexer pool reads beside index_head_dim (configs/model_config.py
        # get_dsa_index_kpool, dsa_layer_skips_topk): kvdash.engines.sglang refuses pooled or shared index keys
        "dsa_keys": {k: cfg[k] for k in ("index_kpool", "indexer_types", "cli_factor") if cfg.get(k) is not None},
    }
    n_layers = _int(cfg, "num_hidden_layers", where)
    model_type = str(cfg.get("model_type") or "")
    attention_free = model_type in modeltypes.ATTENTION_FREE_TYPES  # Mamba: no attention heads to read
    heads = 0 if attention_free else _int(cfg, "num_attention_heads", where)
    hidden = cfg.get("hidden_size") or 0
    if hidden:
        hidden = limits.check_int(f"{where}: hidden_size", hidden, name="hidden_size")
    max_ctx = _int(cfg, "max_position_embeddings", where, default=cfg.get("max_seq_len") or 2048)
    meta = cfg.get("_kvdash", {}) if isinstance(cfg.get("_kvdash"), dict) else {}
    state_bytes = meta.get("state_bytes_per_layer", 0) or cfg.get("kvdash_state_bytes", 0) or 0
    if state_bytes:
        limits.check_int(f"{where}: _kvdash.state_bytes_per_layer", state_bytes, name="state_bytes_per_layer")
    model_type = str(cfg.get("model_type") or "")
    derived: list[str] = []

    if cfg.get("kv_lora_rank"):
        rank = _int(cfg, "kv_lora_rank", where)
        rope = _int(cfg, "qk_rope_head_dim", where)
        index = modeltypes.sparse_mla_index_bytes(cfg, model_type, n_layers, where)
        layers = tuple(Layer("mla", kv_heads=1, kv_lora_rank=rank, qk_rope_head_dim=rope, index_bytes=index)
                       for _ in range(n_layers))
    else:
        if attention_free:
            head_dim = kv_heads = head_dim_v = window = chunk = 0
        else:
            head_dim = modeltypes.head_size(cfg, heads, where)
            kv_heads = modeltypes.total_kv_heads(cfg, heads, where)
            derived += derived_figures(cfg, heads, head_dim, kv_heads)
            head_dim_v = cfg.get("v_head_dim") or head_dim
            limits.check_int(f"{where}: v_head_dim", head_dim_v, name="v_head_dim")
            window = cfg.get("sliding_window") or 0
            if window:
                limits.check_int(f"{where}: sliding_window", window, name="sliding_window")
            if window and model_type == "cohere2":
                # vllm/model_executor/models/commandr.py: a Cohere2 sliding layer sees sliding_window + 1 tokens
                window += 1
                derived.append(f"sliding window {window:,} = sliding_window {window - 1:,} + 1: vLLM 0.33's Cohere2 "
                               "attention (vllm/model_executor/models/commandr.py) sees one token more")
            chunk = cfg.get("attention_chunk_size") or 0
            if chunk:
                limits.check_int(f"{where}: attention_chunk_size", chunk, name="sliding_window")
        hybrid = modeltypes.hybrid_layers(cfg, model_type, n_layers, where)
        if hybrid is not None:
            kinds = [kind for kind, _ in hybrid]
        else:
            kinds = _layer_kinds(cfg, n_layers, where)
            kinds = modeltypes.cache_holders(cfg, model_type, kinds, where)
            if any(kind in STATE_KINDS for kind in kinds) and state_bytes <= 0:
                raise InputError(
                    f"{where}: _kvdash.state_bytes_per_layer", state_bytes or None,
                    "state (mamba/linear) layers need a supported hybrid model_type "
                    f"({', '.join(modeltypes.HYBRID_TYPES)}) or their state size in bytes per request per layer",
                )
        built: list[Layer] = []
        for i, kind in enumerate(kinds):
            shaped = hybrid[i][1] if hybrid is not None else None  # a layer the model type shapes itself
            if kind in STATE_KINDS:
                if hybrid is not None:
                    state_layer = hybrid[i][1]
                    assert state_layer is not None
                    built.append(state_layer)
                else:
                    built.append(Layer(kind, state_family="fixed", state=(state_bytes,)))
            elif shaped is not None:  # an attention layer the model type shapes itself (Zamba2)
                built.append(shaped)
            elif kind == "chunked":
                if not chunk:
                    raise InputError(f"{where}: attention_chunk_size", None,
                                     "chunked-attention layers need a positive chunk size")
                built.append(Layer(kind, kv_heads=kv_heads, head_dim=head_dim, head_dim_v=head_dim_v, window=chunk))
            else:
                built.append(Layer(kind, kv_heads=kv_heads, head_dim=head_dim, head_dim_v=head_dim_v,
                                   window=window if kind == "sliding" else 0))
        layers = tuple(built)
    if not layers:  # e.g. a Nemotron-H hybrid_override_pattern of MLP blocks only ("-"): an engine keeps no KV
        raise InputError(f"{where}: num_hidden_layers", n_layers,
                         "no layer holds KV cache or state (the layer pattern names only MLP or other cache-free "
                         "blocks): nothing for an engine to size")
    if kv_heads_check := [layer.kv_heads for layer in layers if layer.kind in ("full", "sliding", "chunked")]:
        if kv_heads_check[0] > heads:
            raise InputError(f"{where}: num_key_value_heads", kv_heads_check[0],
                             f"must not exceed num_attention_heads={heads}")
    return Architecture(
        name=str(meta.get("name", name)),
        layers=layers,
        num_attention_heads=heads,
        max_context=max_ctx,
        hidden_size=int(hidden),
        weight_bytes=int(meta.get("weight_bytes", weight_bytes) or 0),
        weight_basis=str(meta.get("weight_basis", weight_basis)),
        source=str(meta.get("source", source)),
        notes=str(meta.get("notes", "")),
        model_type=model_type,
        weights_known=weights_known or "weight_bytes" in meta,
        decoder_layers=n_layers,
        derived=tuple(derived),
        max_len_rule=derived_max_model_len(cfg),
        facts=facts,
    )


def _read_json(path: Path, field: str) -> Any:
    """A JSON document of at most 16 MiB from a regular file (kvdash.safeio), as one-line errors."""
    from kvdash import safeio

    text = safeio.read_text(path, field)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(field, str(path),
                         f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from exc
    except (ValueError, RecursionError) as exc:  # a 5,000-digit integer; nesting deeper than Python's stack
        reason = "nested too deeply" if isinstance(exc, RecursionError) else "a number too long to read"
        raise InputError(field, str(path), f"not valid JSON ({reason})") from exc


KV_HEAD_KEYS = ("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num", "multi_query")


# the config.json fields kvdash reads whose absence transformers' config class fills with its own default
# (head_dim and the KV heads have their own derived lines)
DEFAULTED_FIELDS = ("num_hidden_layers", "num_attention_heads", "hidden_size", "max_position_embeddings",
                    "intermediate_size", "vocab_size", "sliding_window")


def class_name(kind: Any) -> str:
    """transformers' config class for a ``model_type`` (``Gemma3TextConfig``), by which its defaults are named."""
    try:
        from transformers import CONFIG_MAPPING

        return str(CONFIG_MAPPING[str(kind)].__name__)
    except Exception:  # noqa: BLE001 - normalise() already imported it; a name only
        return f"config class for model_type {kind!s}"


def text_model_type(cfg: dict[str, Any]) -> Any:
    """The text model's ``model_type``: its ``text_config``'s own, or, for a ``text_config`` that names none, the
    type of the class the outer config reads it with (Gemma3Config: ``gemma3_text``); the config's own without a
    ``text_config``; None where the library does not know the outer type."""
    inner = cfg.get("text_config")
    if not isinstance(inner, dict):
        return cfg.get("model_type")
    if inner.get("model_type"):
        return inner["model_type"]
    try:
        from transformers import CONFIG_MAPPING

        return str(CONFIG_MAPPING[str(cfg.get("model_type"))].sub_configs["text_config"].model_type)
    except Exception:  # noqa: BLE001 - a type the library does not know: none to name
        return None


def text_class_name(cfg: dict[str, Any]) -> str:
    """The config class whose defaults fill the text model's fields: that of :func:`text_model_type` (Gemma3Config's
    text_config: Gemma3TextConfig), else the outer config's class."""
    kind = text_model_type(cfg)
    return class_name(kind if kind is not None else cfg.get("model_type"))


def library_defaults(raw: Any, cfg: dict[str, Any]) -> list[str]:
    """Each field kvdash reads that ``raw`` (config.json as written) leaves out and transformers' config class
    filled in, named with the class: ``hidden_size 4,096: transformers' LlamaConfig default``."""
    if not isinstance(raw, dict):
        return []
    from kvdash.core import modeltypes

    model_type = raw.get("model_type")
    if model_type in modeltypes.RAW_TYPES:
        return []
    out = []
    for written, read, where in ((raw, cfg, ""), (raw.get("text_config"), cfg.get("text_config"), "text_config.")):
        if not isinstance(written, dict) or not isinstance(read, dict):
            continue
        # text_config's defaults are its own class's (Gemma3TextConfig's, not Gemma3Config's): the one rule the
        # derived head_dim and KV-head lines name it by
        cls = text_class_name(raw) if where else class_name(model_type)
        for key in DEFAULTED_FIELDS:
            value = read.get(key)
            if key not in written and isinstance(value, int) and not isinstance(value, bool) and value:
                out.append(f"{where}{key} {value:,}: transformers' {cls} default")
    return out


def derived_figures(cfg: Any, heads: int, head_dim: int, kv_heads: int, hidden: int = 0) -> list[str]:
    """The figures ``cfg`` (config.json as written) does not state, each with the rule that derived it
    (``hidden``: the hidden_size read, the library's default when the file has none)."""
    if not isinstance(cfg, dict):
        return []
    inner = cfg.get("text_config")
    text: dict[str, Any] = inner if isinstance(inner, dict) else cfg
    out = []
    if text.get("head_dim") is None and text.get("attention_head_dim") is None and not text.get("kv_lora_rank"):
        hidden = text.get("hidden_size") or hidden
        if hidden and heads and hidden // heads != head_dim:  # the model class's own default (Gemma 3: 256)
            out.append(f"head_dim {head_dim}: transformers' {text_class_name(cfg)} default "
                       f"(config.json has no head_dim; hidden_size {hidden:,} / num_attention_heads {heads} would "
                       f"give {hidden // heads:,})")
        else:
            out.append(f"head_dim {head_dim} derived as hidden_size {hidden:,} / "
                       f"num_attention_heads {heads} (config.json has no head_dim)"
                       if hidden else f"head_dim {head_dim} (config.json has neither head_dim nor hidden_size)")
    kind = text_model_type(cfg)  # a text_config without its model_type: the type the outer config reads it as
    if kind == "gemma3_text" and text.get("sliding_window") and text.get("layer_types") is None \
            and text.get("sliding_window_pattern") is None:  # the layer mix rests on the class's default
        out.append("layer pattern: every 6th layer full, the rest sliding (transformers' Gemma3TextConfig default "
                   "sliding_window_pattern 6; config.json gives no layer_types)")
    if kind == "llama4_text" and text.get("attention_chunk_size") and text.get("no_rope_layers") is None \
            and text.get("no_rope_layer_interval") is None:
        out.append("layer pattern: every 4th layer full (no RoPE), the rest chunked (transformers' Llama4TextConfig "
                   "default no_rope_layer_interval 4; config.json gives no no_rope_layers)")
    new_falcon = text.get("new_decoder_architecture") or text.get("model_type") in ("RefinedWeb", "RefinedWebModel")
    if text.get("multi_query") and not new_falcon and kv_heads == 1 and text.get("num_kv_heads") not in (None, 1):
        out.append(f"KV heads 1: multi_query true without new_decoder_architecture (vLLM 0.33's "
                   f"ModelConfig.get_total_num_kv_heads; num_kv_heads {text.get('num_kv_heads')} is not read)")
    if all(text.get(k) is None for k in KV_HEAD_KEYS) and not text.get("kv_lora_rank"):
        if kv_heads == heads:
            out.append(f"KV heads {kv_heads} derived from num_attention_heads (config.json names no KV heads: "
                       "multi-head attention)")
        else:  # the class's own default (Gemma3TextConfig: 4 KV heads)
            out.append(f"KV heads {kv_heads}: transformers' {text_class_name(cfg)} default "
                       "(config.json names no KV heads)")
    return out


def load_config(path: str | Path, safetensors_index: str | Path | None = None, engine: str = "vllm",
                field: str = "--config") -> Architecture:
    """Read a ``config.json`` through ``transformers``' config class for its ``model_type`` (defaults
    filled in as the library defines them), and optionally ``model.safetensors.index.json`` for the
    weight bytes; without one, the weights are estimated from the config where kvdash can
    (:func:`kvdash.core.modeltypes.estimate_weights`).  ``engine="sglang"``: read for SGLang 0.5.23's view, without
    the refusals that are vLLM 0.33's alone (:func:`kvdash.core.modeltypes.normalise`)."""
    from kvdash.core import modeltypes

    p = Path(path)
    raw = _read_json(p, field)
    cfg = modeltypes.normalise(raw, str(p), engine)
    weight_bytes, basis, known = 0, "not given", True
    if safetensors_index is None and (p.parent / "model.safetensors.index.json").is_file():
        safetensors_index = p.parent / "model.safetensors.index.json"
    if safetensors_index is not None:
        weight_bytes = read_weight_bytes(safetensors_index)
        basis = "metadata.total_size of model.safetensors.index.json"
    name = p.parent.name or p.stem
    arch = from_hf_config(cfg, name=name, source=str(p), weight_bytes=weight_bytes, weight_basis=basis)
    if arch.kv_heads:  # transformers fills head_dim in: what was derived is read from the file as written
        rules = [line for line in arch.derived if line.startswith("sliding window ")]  # an engine's rule, kept
        arch = replace(arch, derived=tuple(library_defaults(raw, cfg) + derived_figures(
            raw, arch.num_attention_heads, arch.head_dim, arch.kv_heads, arch.hidden_size) + rules))
    if safetensors_index is None:
        estimate = modeltypes.estimate_weights(cfg, arch)
        if estimate is None:
            weight_bytes, basis, known = 0, modeltypes.NO_ESTIMATE, False
        else:
            weight_bytes, basis = estimate
        arch = Architecture(**{**arch.__dict__, "weight_bytes": weight_bytes, "weight_basis": basis,
                               "weights_known": known})
    return arch


def read_weight_bytes(path: str | Path) -> int:
    """``metadata.total_size`` of a ``model.safetensors.index.json``: the weights in bytes."""
    data = _read_json(Path(path), "--safetensors-index")
    total = data.get("metadata", {}).get("total_size") if isinstance(data, dict) else None
    if isinstance(total, bool) or not isinstance(total, int) or total <= 0:
        raise InputError("--safetensors-index metadata.total_size", total, "expected a positive integer of bytes")
    return total


# --- built-in presets -------------------------------------------------------------------------

DATA = Path(__file__).resolve().parent.parent / "data"  # shipped inside the package


def engine_config(path: str | Path) -> dict[str, Any]:
    """A ``config.json`` as the engine reads it, for the time model's parameter counts (the KV figures and the weight
    estimate already read it so, :func:`load_config`): a published file through ``transformers``' class for its
    ``model_type``, the fields it leaves out filled with the class's defaults (Gemma 3's ``text_config`` names no
    ``vocab_size``: Gemma3TextConfig's 262,208, which vLLM reads too); a kvdash preset (its ``_kvdash`` block) as
    written, since the paper's OPT presets name only their KV fields and a class default would misstate the rest
    (OPTConfig's ``ffn_dim`` 3,072 for OPT-175B's 49,152).  A file the library cannot read is returned as written
    (the caller's reading already refused what it must)."""
    from kvdash.core import modeltypes

    p = Path(path)
    raw = _read_json(p, "--config")
    if not isinstance(raw, dict) or "_kvdash" in raw:
        return dict(raw) if isinstance(raw, dict) else {}
    try:
        return modeltypes.normalise(raw, str(p))
    except InputError:
        return dict(raw)


def _preset_files() -> dict[str, Path]:
    return {entry.name[:-5]: entry for entry in (DATA / "models").iterdir() if entry.name.endswith(".json")}


def preset_names() -> list[str]:
    return sorted(_preset_files())


def load_preset(name: str) -> Architecture:
    files = _preset_files()
    key = name.lower()
    if key not in files:
        err = unknown_name("--model", name, files)
        raise InputError(err.field, err.value, f"{err.allowed}; a model without a preset is read from its own "
                         "config.json: --config PATH (the file of its Hugging Face repository)", err.hint)
    cfg = json.loads(files[key].read_text(encoding="utf-8"))
    return from_hf_config(cfg, name=key, source=f"preset {key}")


def resolve_model(model: str | None = None, config: str | Path | None = None,
                  safetensors_index: str | Path | None = None) -> Architecture:
    """A preset name, or a ``config.json`` path; a path given as ``--model`` works too."""
    if config is not None:
        return load_config(config, safetensors_index)
    if model is None:
        model = "tutorial-gqa-80l"
    if model.endswith(".json") or "/" in model:
        folder = Path(model)
        if folder.is_dir():  # a checkpoint's folder, as vllm serve takes it
            if not (folder / "config.json").is_file():
                raise InputError("--model", model, "a config.json path, or a checkpoint folder holding one (this "
                                 "folder has no config.json)")
            return load_config(folder / "config.json", safetensors_index, field="--model")
        return load_config(model, safetensors_index, field="--model")
    arch = load_preset(model)
    if safetensors_index is not None:
        arch = Architecture(**{**arch.__dict__, "weight_bytes": read_weight_bytes(safetensors_index),
                               "weight_basis": "metadata.total_size of model.safetensors.index.json",
                               "weights_known": True})
    return arch


def custom(layers: int, kv_heads: int, head_dim: int, num_attention_heads: int | None = None,
           head_dim_v: int | None = None, window: int = 0, max_context: int = 131072,
           name: str = "custom", source: str = "command-line fields") -> Architecture:
    """A uniform architecture from explicit numbers (``--layers/--kv-heads/--head-dim``)."""
    cfg: dict[str, Any] = {
        "num_hidden_layers": layers,
        "num_attention_heads": num_attention_heads or kv_heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "max_position_embeddings": max_context,
    }
    if head_dim_v:
        cfg["v_head_dim"] = head_dim_v
    if window:
        cfg["sliding_window"] = window
    return from_hf_config(cfg, name=name, source=source, weights_known=False)


def model_from_spec(spec: dict[str, Any], base: Path | None = None, where: str = "model") -> Architecture:
    """An architecture from a mapping: ``preset``, ``config`` (+ ``safetensors_index``), or explicit
    ``layers``/``kv_heads``/``head_dim`` (+ ``head_dim_v``, ``attention_heads``, ``window``,
    ``max_context``).  Relative paths are taken from ``base``; ``weights`` overrides weight bytes."""
    base = base or Path(".")
    explicit = [k for k in ("layers", "kv_heads", "head_dim") if spec.get(k) is not None]
    sources = [k for k in ("preset", "config") if spec.get(k)] + (["layers/kv_heads/head_dim"] if explicit else [])
    if len(sources) != 1:
        raise InputError(where, sources or "nothing",
                         "give exactly one of: preset, config, or layers + kv_heads + head_dim")
    if explicit:
        for key in ("layers", "kv_heads", "head_dim"):
            limits.check_int(f"{where}.{key}", spec.get(key), name=key)
        for key in ("head_dim_v", "attention_heads", "window", "max_context"):
            if spec.get(key):
                limits.check_int(f"{where}.{key}", spec.get(key), name=key)
        arch = custom(spec["layers"], spec["kv_heads"], spec["head_dim"], spec.get("attention_heads"),
                      spec.get("head_dim_v"), spec.get("window") or 0, spec.get("max_context") or 131072,
                      name=str(spec.get("name", "custom")), source="explicit layers, KV heads and head_dim")
    elif spec.get("preset"):
        arch = load_preset(str(spec["preset"]))
    else:
        index = spec.get("safetensors_index")
        arch = load_config(base / str(spec["config"]), base / str(index) if index else None)
    if spec.get("weights") is not None:
        from kvdash.units import parse_size

        arch = Architecture(**{**arch.__dict__, "weight_bytes": parse_size(spec["weights"], f"{where}.weights",
                                                                         allow_zero=True),
                               "weight_basis": "given in the grid file", "weights_known": True})
    return arch


def _model_key(name: str) -> str:
    """A model name without organisation, case, punctuation or a chat/instruct suffix:
    ``meta-llama/Llama-3.1-70B-Instruct`` and ``Llama-3.1-70B`` both give ``llama3170b``."""
    base = name.rsplit("/", 1)[-1].lower()
    for suffix in ("-instruct", "-chat", "-hf", "-it", "-base"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return "".join(ch for ch in base if ch.isalnum())


def same_model(served: str, kvdash_name: str, preset: str = "") -> bool:
    """Whether an engine's served model (``A + B`` for several) is kvdash's model or preset, by name."""
    keys = {_model_key(kvdash_name), _model_key(preset)} - {""}
    return any(_model_key(part) in keys for part in served.split(" + "))

"""The range of every integer kvdash accepts (documented in docs/safety.md).

The ranges are far beyond any published model or server, and small enough that no product kvdash
forms overflows a signed 64-bit column (the sweep's polars frame) or takes noticeable time:

* bytes per token per rank is at most ``layers x kv_heads x (head_dim + head_dim_v + 2 fp32 scales) x 4``
  bytes, just over 2^10 x 2^8 x 2^13 x 2^2 = 2^33;
* times a length of at most 2^26 tokens, and a group of 8 lengths, that stays below 2^63 (signed 64 bits;
  ``tests/test_safety.py`` checks the product);
* a budget of at most 2^60 bytes (1 EiB) is more memory than any machine holds.

The largest published models stay well inside: Llama 3.1 405B has 126 layers, 8 KV heads of 128;
DeepSeek-V3's MLA latent is 512 + 64; Llama 4 Scout's context is 10,485,760 tokens (< 2^24).
"""

from __future__ import annotations

from kvdash.errors import InputError

MAX_LAYERS = 1024
MAX_KV_HEADS = 256
MAX_ATTENTION_HEADS = 4096
MAX_HEAD_DIM = 4096  # also head_dim_v, kv_lora_rank, qk_rope_head_dim
MAX_HIDDEN = 2**20  # hidden_size of config.json
MAX_TOKENS = 2**26  # every length: used, final, max_reserved, max_context, window, max_model_len, prefix...
MAX_BLOCK_SIZE = 2**16
MAX_PARALLEL = 1024  # tp and pp
MAX_BYTES = 2**60  # budget, GPU memory, weights, reserve, state bytes
MAX_REQUESTS = 2**32  # --target
MAX_SIM_REQUESTS = 1_000_000  # simulated requests (simulate --requests, a grid's simulate: requests)
MAX_RATE = 1_000_000.0  # Poisson arrivals per simulated step
MAX_MODELS = 10_000  # models in one grid file
MAX_POINTS = 2_000_000  # points of one grid (--max-points raises it, up to MAX_POINTS_CEILING)
MAX_POINTS_CEILING = 50_000_000

# field name (option, grid dimension or config.json key) -> (lowest, highest)
RANGES: dict[str, tuple[int, int]] = {}
for _names, _range in (
    (("layers", "--layers", "num_hidden_layers"), (1, MAX_LAYERS)),
    (("kv_heads", "--kv-heads", "num_key_value_heads"), (1, MAX_KV_HEADS)),
    (("attention_heads", "--attention-heads", "num_attention_heads"), (1, MAX_ATTENTION_HEADS)),
    (("head_dim", "--head-dim", "head_dim_v", "--head-dim-v", "v_head_dim", "kv_lora_rank", "qk_rope_head_dim"),
     (1, MAX_HEAD_DIM)),
    (("used", "--used", "final", "--final", "max_reserved", "--max-reserved", "max_context", "--max-context",
      "max_position_embeddings", "window", "--window", "sliding_window", "max_model_len", "--max-model-len",
      "max_batched_tokens", "--max-batched-tokens", "lengths", "--group", "--length", "max_len", "--max-len",
      "--max-reserved"),
     (1, MAX_TOKENS)),
    (("prefix", "--prefix"), (0, MAX_TOKENS)),
    (("hidden_size",), (1, MAX_HIDDEN)),
    (("block_size", "--block-size"), (1, MAX_BLOCK_SIZE)),
    (("tp", "--tp", "pp", "--pp"), (1, MAX_PARALLEL)),
    (("budget", "--budget", "gpu_memory", "--gpu-memory", "state_bytes_per_layer"), (1, MAX_BYTES)),
    (("weights", "--weights", "reserve", "--reserve"), (0, MAX_BYTES)),
    (("target", "--target"), (1, MAX_REQUESTS)),
    (("max_num_seqs", "--max-num-seqs"), (1, MAX_REQUESTS)),
    (("requests", "--requests", "concurrency", "--concurrency", "users"), (1, MAX_SIM_REQUESTS)),
    (("seed", "--seed", "--trace-every"), (0, 2**32)),
):
    for _name in _names:
        RANGES[_name] = _range


def check_rate(field: str, value: object) -> float:
    """A finite number of arrivals per step in (0, MAX_RATE] (NaN and Inf are refused)."""
    import math

    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or not 0 < value <= MAX_RATE:
        raise InputError(field, value, f"expected a number of requests per step above 0 and at most {MAX_RATE:,.0f}")
    return float(value)


def range_of(field: str) -> tuple[int, int] | None:
    """The range for a field; ``field`` may be a path such as ``grid.block_size[0]`` or ``x.json: head_dim``."""
    key = field.rsplit(": ", 1)[-1].split("[", 1)[0].rsplit(".", 1)[-1].strip()
    return RANGES.get(key)


def allowed_text(low: int, high: int) -> str:
    return f"expected an integer from {low:,} to {high:,}"


def check_int(field: str, value: object, low: int | None = None, high: int | None = None,
              name: str | None = None) -> int:
    """``value`` if it is an int (not a bool) within the field's range; else one-line InputError.

    ``name`` picks the range (default: ``field``); ``low``/``high`` override it.
    """
    found = range_of(name or field) or (1, MAX_BYTES)
    lo = found[0] if low is None else low
    hi = found[1] if high is None else high
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InputError(field, value, allowed_text(lo, hi))
    return value


def parse_block_size(value: str | int, field: str = "--block-size") -> int | str:
    """The one parser of ``--block-size`` (calc, live, exporter, simulate) and the grid's ``block_size``:
    ``"16"`` or 16 -> 16; ``"auto"`` stays ``"auto"`` (vLLM 0.33's choice for the model:
    ``kvdash.engines.vllm.auto_block_size``); anything else one error line naming the range.

    >>> parse_block_size("16"), parse_block_size(32), parse_block_size(" Auto ")
    (16, 32, 'auto')
    """
    allowed = f"expected 'auto' or a whole number of tokens from 1 to {MAX_BLOCK_SIZE:,}"
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InputError(field, value, allowed)
    text = str(value).strip().lower()
    if text == "auto":
        return "auto"
    if not (text.isascii() and text.isdigit()) or len(text) > 18:  # 18 digits: no 4,300-digit int()
        raise InputError(field, value, allowed)
    try:
        return check_int(field, int(text), low=1, high=MAX_BLOCK_SIZE)
    except InputError as exc:
        raise InputError(field, value, allowed) from exc

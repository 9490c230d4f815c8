"""The one default of each concept several commands share (issue 15): calc, live, exporter, simulate, record
and the sweep grid read their defaults from here, so a concept has one default everywhere.

Pure Python with no imports beyond the standard library: ``kvdash --help`` and ``kvdash.core`` import it.

The defaults are the tutorial's configuration ("Managing the KV Cache"): a hypothetical 80-layer GQA model, a
bf16 KV cache on one GPU, requests holding 825 tokens while a contiguous allocator reserves 2,048, in a 12 GiB
budget; a budget derived from a GPU uses vLLM 0.33's ``gpu_memory_utilization``.

The block size is the engine's own choice (``auto``), as ``vllm serve`` without ``--block-size`` picks it
(:func:`kvdash.engines.vllm.auto_block_size`): on Hopper 16 for attention and bf16 MLA (the tutorial model's
16), 64 for MLA with an fp8 KV cache and for sparse MLA, hybrids raised to hold the state page; SGLang's own
page (1 on CUDA, 64 for DeepSeek sparse attention) under ``--engine-rules sglang``.  kvdash answers what the
engine will do: a fixed 16 planned blocks vLLM never uses for fp8 MLA, and refused sparse MLA (DeepSeek-V3.2),
which ``vllm serve`` starts at 64.  A block size typed with ``--block-size`` is still checked and refused
where the engine refuses it.

Two exceptions, each for a reason (``tests/test_vocabulary.py`` lists them and fails on any other):

* ``live`` and ``exporter`` read a running engine, so their model and tensor-parallel degree describe the
  engine their ``--demo`` runs (Llama-3.1-70B at TP 8 on 8 x H200): the tutorial model is hypothetical and
  never runs, and Llama-3.1-70B's 141.2 GB of bf16 weights do not fit one H200 (TP 1 leaves no KV budget).
"""

MODEL = "tutorial-gqa-80l"  # the tutorial's hypothetical 80-layer GQA model (kvdash/data/models)
KV_DTYPE = "bf16"  # vLLM's 'auto' for a bf16 model
BLOCK_SIZE = "auto"  # tokens per block: the engine's own choice (vLLM 0.33's auto; SGLang's page) -- see above
TP = 1  # tensor-parallel degree
PP = 1  # pipeline-parallel degree
# vLLM 0.33.0 CacheConfig.gpu_memory_utilization (vllm/config/cache.py: Field(default=0.92, gt=0, le=1))
GPU_UTIL = "0.92"
TRTLLM_UTIL = "0.9"  # TensorRT-LLM's free_gpu_memory_fraction, for --util-policy trtllm
UTIL_BY_POLICY = {"vllm": GPU_UTIL, "trtllm": TRTLLM_UTIL}
LENGTH = 825  # tokens each request holds: the tutorial's request
RESERVATION = 2048  # tokens a contiguous allocator reserves per request: the tutorial's
# runtime reserve per rank (activations, CUDA graphs, non-torch memory) of a budget derived from a GPU: 'auto' is
# a kvdash calibrate entry, else the published terms (kvdash/engines/vllm_reserve.py); '0' asks for the upper bound.  A
# declared --budget is the KV memory itself: no reserve is taken off it.
RESERVE = "auto"
BUDGET_TEXT = "12GiB"  # the tutorial's declared KV budget, when no GPU gives one
BUDGET_BYTES = 12 * 2**30
# vLLM 0.33's max_num_batched_tokens for `vllm serve` on an H100/H200 (EngineArgs.get_batch_defaults): where no GPU
# is known (live without one); calc, sweep, simulate and calibrate take the GPU's own (kvdash.engines.vllm.batch_tier)
MAX_BATCHED_TOKENS = 8192

ENGINE_TIMEOUT = 2.0  # seconds one engine /metrics read may take (live, exporter, calibrate)
MIN_INTERVAL = 0.1  # the shortest --interval (seconds between readings)
INTERVAL = 1.0  # live and record: a reading a second
EXPORTER_INTERVAL = 5.0  # exporter: background readings for Prometheus (scrapes every 15 s or more)
MAX_FILE_SIZE = "256MiB"  # largest --replay / --trace file read (kvdash.safeio.STREAM_CAP)

# the exception (see the module docstring): live and exporter describe the engine their --demo runs
LIVE_MODEL = "llama-3.1-70b"
LIVE_TP = 8

BLOCK_SIZE_HELP = "Tokens per KV block, or 'auto': the engine's own choice, as when the engine is given none " \
                  "(vLLM 0.33 on Hopper: 16, 64 for MLA with an fp8 KV cache and for sparse MLA; hybrids raised " \
                  "to hold the state page; SGLang: its page, 1 on CUDA)."


def reservation(context: int, *lengths: int) -> int:
    """The contiguous reservation a question implies: ``RESERVATION`` (capped at the model's context), raised to
    the longest length asked about, so that every length fits its reservation.

    >>> reservation(131072, 825), reservation(131072, 8192), reservation(1024, 825)
    (2048, 8192, 1024)
    """
    return max(min(RESERVATION, context), 0, *lengths)

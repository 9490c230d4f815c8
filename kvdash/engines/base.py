"""The questions every engine answers, as one small interface: :class:`EngineRules`.

kvdash's core (:mod:`kvdash.core`) holds the engine-free formulas: bytes per token of a layer, the pool
geometry of one rank (:class:`~kvdash.core.pool.PoolShape`), blocks, capacities.  What an inference engine
*does* with them -- how much of a GPU it gives the KV cache, which block size it picks, how it groups layers
into KV-cache groups, how many requests it runs at once, what it logs at start-up -- differs per engine and
per version, and lives in one module per engine under :mod:`kvdash.engines` (``vllm.py``: vLLM 0.33), found
by name through :mod:`kvdash.engines.registry`.

An engine module defines one object that satisfies :class:`EngineRules` (a :class:`typing.Protocol`: no base
class to inherit) and adds it to the registry.  The composition that turns one configuration into every
figure (:mod:`kvdash.answer.calc`) calls only these methods, in this order:

1. :meth:`~EngineRules.check_max_model_len` -- refuse a context length the engine refuses;
2. :meth:`~EngineRules.caps` -- the scheduler caps (``max_num_seqs``, ``max_num_batched_tokens``) for the GPU;
3. :meth:`~EngineRules.block_size` -- the requested block size, or the engine's own choice for ``"auto"``;
4. :meth:`~EngineRules.pool` -- the pool geometry per pipeline stage: KV-cache groups, the block the engine
   really uses (it may raise the requested one, as vLLM does for hybrids), state blocks per request;
5. :meth:`~EngineRules.budget` -- the KV budget per rank from a GPU's memory, the weights and a reserve;
   :meth:`~EngineRules.auto_reserve` -- the reserve ``--reserve auto`` takes when nothing measured is given;
6. :meth:`~EngineRules.in_flight_tokens` and :meth:`~EngineRules.blocks_per_request` -- what a request may
   hold at ``max_model_len``, which gives the engine's max concurrency (``pool blocks / blocks per request``)
   and the KV-cache size it logs (:meth:`~EngineRules.startup_line`);
7. :meth:`~EngineRules.caps_text` -- the caps in words, with the engine's source, for the first lines.

Rules a new engine (SGLang, issue 27) has no counterpart for raise :class:`NotImplementedError` with the
reason; they are never faked.  Every rule cites the engine's file and function at the mirrored version.

**Metric reading rules** (how an engine's ``/metrics`` page is read and aggregated across DP/TP ranks) are not
part of this interface: they parse a page and belong to the sources layer, :mod:`kvdash.sources.engine`
(``_vllm``, ``_sglang``, one reader per engine), which is written against the engines' exposition code and
its committed pages (``conformance/metrics/``).  An engine module may name its metric prefix
(:attr:`EngineRules.metric_prefix`) for the readers to key on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from kvdash.core.arch import Architecture
    from kvdash.core.pool import PoolShape


@dataclass(frozen=True)
class Gpu:
    """The GPU a budget is derived from, as far as it is known.

    ``memory``: total bytes (``None``: a declared budget, no GPU); ``name``: the device name as NVML or the
    preset gives it (``"NVIDIA H100 80GB HBM3"``; ``None`` for ``--gpu-memory`` alone); ``compute_capability``:
    ``"9.0"``-style (``""`` unknown)."""

    memory: int | None = None
    name: str | None = None
    compute_capability: str = ""


@dataclass(frozen=True)
class Settings:
    """The engine options of one configuration, in engine-neutral words (each engine maps them to its own flags).

    ``max_num_seqs`` / ``max_num_batched_tokens``: ``None`` takes the engine's default for the GPU (vLLM:
    ``--max-num-seqs`` / ``--max-num-batched-tokens``; SGLang: ``--max-running-requests`` /
    ``--chunked-prefill-size``).  ``performance_mode``, ``chunked_prefill``, ``async_scheduling`` are vLLM 0.33's
    switches (an engine without them reads their defaults and refuses other values).  ``prefix_caching``: the
    engine's prefix cache on (the default of both engines).  ``pp``: pipeline-parallel degree."""

    max_model_len: int
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    performance_mode: str = "balanced"
    chunked_prefill: bool = True
    async_scheduling: bool = True
    prefix_caching: bool = True
    pp: int = 1


@dataclass(frozen=True)
class Caps:
    """The scheduler caps an engine runs with, each with where it came from.

    ``max_num_seqs``: requests running at once at most; ``max_num_batched_tokens``: tokens scheduled per step;
    ``seqs_basis`` / ``tokens_basis``: ``"default"``-style words (``"given with --max-num-seqs"``);
    ``tier``: the rule that chose the defaults for this GPU (vLLM: ``"NVIDIA L4 (22.5 GiB: under 70 GiB, or an
    A100)"``)."""

    max_num_seqs: int
    max_num_batched_tokens: int
    seqs_basis: str
    tokens_basis: str
    tier: str


@dataclass(frozen=True)
class Budget:
    """The KV budget per rank an engine derives from a GPU.

    ``requested``: the bytes the engine claims of the GPU before weights and reserve (vLLM:
    ``floor(total x gpu_memory_utilization)``); ``per_rank_bytes``: what is left for the KV cache (may be 0 or
    negative: the caller reports it); ``formula``: the rule in words (``"floor(total x util) - weights/rank -
    reserve"``)."""

    requested: int
    per_rank_bytes: int
    formula: str


class EngineRules(Protocol):
    """What one engine at one version does with a configuration.  All sizes are integers in bytes, lengths in
    tokens; every method is pure (no I/O) and deterministic."""

    name: str  # registry key and util-policy name: "vllm"
    version: str  # the mirrored release: "0.33"
    label: str  # how outputs name it: "vLLM 0.33"
    default_util: str  # the default memory fraction as a decimal string (vLLM 0.33's gpu_memory_utilization "0.92")
    metric_prefix: str  # the engine's /metrics family prefix: "vllm:" (read by kvdash.sources.engine)

    def check_max_model_len(self, arch: Architecture, max_model_len: int, allow_long: bool,
                            field: str = "--max-model-len") -> None:
        """Raise :class:`kvdash.errors.InputError` (naming ``field``) for a ``max_model_len`` the engine refuses
        for ``arch``; ``allow_long``: the engine's override (vLLM: ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``)."""
        ...

    def check_one_request_fits(self, budget: int, block_bytes: int, blocks_per_request: int, max_model_len: int,
                               estimated_max_len: int, field: str = "--max-model-len") -> None:
        """Raise :class:`kvdash.errors.InputError` (naming ``field``) where the engine refuses to start because a
        pool of ``budget`` bytes in blocks of ``block_bytes`` cannot hold one request of ``max_model_len`` tokens
        (``blocks_per_request`` blocks); ``estimated_max_len``: the longest length that would fit."""
        ...

    def caps(self, gpu: Gpu, settings: Settings) -> Caps:
        """The scheduler caps for this GPU: given values kept, missing ones the engine's defaults for the GPU.
        Raise :class:`~kvdash.errors.InputError` for a combination the engine refuses."""
        ...

    def block_size(self, arch: Architecture, kv_dtype: str, requested: int | str, gpu: Gpu) -> tuple[int, str]:
        """The block size asked of the pool and why: ``requested`` as given (an ``int``, checked positive), or
        for ``"auto"`` the engine's own choice for this model, KV dtype and GPU generation.  (:meth:`pool` may
        then raise it.)  Any other string is an :class:`~kvdash.errors.InputError` on ``--block-size``."""
        ...

    def pool(self, arch: Architecture, kv_dtype: str, kv_scales: str, tp: int, pp: int, block_size: int,
             prefix_caching: bool) -> list[PoolShape]:
        """One :class:`~kvdash.core.pool.PoolShape` per pipeline stage, as the engine lays out its pool: its
        KV-cache groups (``group_size`` layers each, the full / window / state groups), the block size it uses
        (``requested_block_size`` keeps ``block_size``), and the pool blocks a request's fixed state takes
        (``state_blocks``).  Raise :class:`~kvdash.errors.InputError` for a layout the engine refuses."""
        ...

    def budget(self, total: int, util: Decimal, weights_per_rank: int, reserve: int) -> Budget:
        """The KV budget per rank from a GPU of ``total`` bytes at memory fraction ``util``, with
        ``weights_per_rank`` bytes of weights and a ``reserve`` (activation peak, CUDA graphs, non-torch
        memory) per rank."""
        ...

    def auto_reserve(self, arch: Architecture, tp: int, pp: int, caps: Caps, gpu: Gpu,
                     settings: Settings) -> dict[str, Any]:
        """The published runtime reserve per rank ``--reserve auto`` takes when no measured (calibration) entry
        applies: ``{"bytes": int, "basis": str, "terms": [ReserveTerm.as_dict(), ...]}``, every term with its
        source and whether it is extrapolated to this configuration."""
        ...

    def in_flight_tokens(self, caps: Caps, settings: Settings) -> int:
        """Tokens of one request the engine may have scheduled but not settled: what sliding-window and
        chunked-local groups are sized for (vLLM: ``max_concurrent_batches x max_num_batched_tokens``)."""
        ...

    def blocks_per_request(self, x: Mapping[str, Any]) -> Any:
        """Pool blocks the engine budgets for one request at ``max_model_len``, over the point inputs of
        :func:`kvdash.core.point.request_metrics` (``block_size``, ``full_groups``, ``window_groups``, ``window``,
        ``chunked``, ``state_blocks``, ``max_model_len``, ``in_flight_tokens``).  The values are Python ints for
        one configuration or polars expressions for a grid: use only :mod:`kvdash.core.formulas`' helpers
        (``cdiv``, ``imin``, ``imax``) and arithmetic.  ``pool blocks / this`` is the engine's max concurrency."""
        ...

    def startup_line(self, kv_tokens: int, max_model_len: int, concurrency: float) -> str:
        """The engine's start-up log line for its KV-cache size, word for word as it prints it (vLLM:
        ``"GPU KV cache size: 1,234 tokens, Maximum concurrency for 8,192 tokens per request: 1.50x"``)."""
        ...

    def caps_text(self, caps: Caps) -> str:
        """Both caps, their bases and the engine's source in one phrase, for the assumption lines."""
        ...

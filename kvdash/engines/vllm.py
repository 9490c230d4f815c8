"""vLLM 0.33.0's rules behind :class:`kvdash.engines.base.EngineRules`: :data:`RULES`.

Each rule follows vLLM's own code at the v0.33.0 release (paths under ``vllm/``), named in its docstring:

* budget: ``floor(total x gpu_memory_utilization) - weights/rank - reserve``
  (``Worker.determine_available_memory``, ``vllm/v1/worker/gpu_worker.py``), default utilization 0.92;
* ``--reserve auto``: the published activation / non-torch / CUDA-graph terms of :mod:`kvdash.core.reserve`,
  the graphs counted from the caps (``VllmConfig._set_cudagraph_sizes``);
* block size ``auto``: the attention backend's preferred block per GPU generation and KV dtype
  (``CudaPlatform.get_attn_backend_cls``), raised for hybrids (``Platform._align_hybrid_block_size``);
* KV-cache groups: ``_get_kv_cache_groups_uniform_page_size`` (``vllm/v1/core/kv_cache_utils.py``);
* scheduler caps: ``EngineArgs.get_batch_defaults`` / ``_set_default_max_num_seqs_and_batched_tokens_args``
  (``vllm/engine/arg_utils.py``);
* blocks per request at ``max_model_len``: ``max_memory_usage_bytes`` per spec (``vllm/v1/kv_cache_interface.py``);
* the start-up line: ``update_kv_cache_capacity`` (``vllm/v1/core/kv_cache_utils.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from kvdash.core import formulas as f
from kvdash.core import vllm as rules
from kvdash.core.arch import Architecture
from kvdash.core.pool import PoolShape, check_positive
from kvdash.engines.base import Budget, Caps, Gpu, Settings
from kvdash.errors import InputError
from kvdash.units import scale_floor

VERSION = "0.33"


class VllmRules:
    """vLLM 0.33.0 (:class:`~kvdash.engines.base.EngineRules`)."""

    name = "vllm"
    version = VERSION
    label = f"vLLM {VERSION}"
    default_util = "0.92"  # vllm/config/cache.py CacheConfig.gpu_memory_utilization
    metric_prefix = "vllm:"

    def check_max_model_len(self, arch: Architecture, max_model_len: int, allow_long: bool,
                            field: str = "--max-model-len") -> None:
        rules.check_max_model_len(max_model_len, arch.derived_max_len, allow_long, field)

    def caps(self, gpu: Gpu, settings: Settings) -> Caps:
        c = rules.scheduler_caps(gpu.memory, gpu.name, settings.max_model_len, settings.max_num_seqs,
                                 settings.max_num_batched_tokens, settings.performance_mode, settings.chunked_prefill)
        return Caps(c.max_num_seqs, c.max_num_batched_tokens, c.seqs_basis, c.tokens_basis, c.tier)

    def block_size(self, arch: Architecture, kv_dtype: str, requested: int | str, gpu: Gpu) -> tuple[int, str]:
        if requested == "auto":
            from kvdash.core.calc import auto_block_size

            return auto_block_size(arch, kv_dtype, gpu.compute_capability)
        if isinstance(requested, str):
            raise InputError("--block-size", requested, "expected a positive integer or 'auto'")
        return check_positive("--block-size", requested), f"{requested}: requested"

    def pool(self, arch: Architecture, kv_dtype: str, kv_scales: str, tp: int, pp: int, block_size: int,
             prefix_caching: bool) -> list[PoolShape]:
        from kvdash.core.calc import rank_shapes

        return rank_shapes(arch, kv_dtype, kv_scales, tp, pp, block_size, prefix_caching)

    def budget(self, total: int, util: Decimal, weights_per_rank: int, reserve: int) -> Budget:
        requested = scale_floor(total, util)
        return Budget(requested, requested - weights_per_rank - reserve, "floor(total x util) - weights/rank - reserve")

    def auto_reserve(self, arch: Architecture, tp: int, pp: int, caps: Caps, gpu: Gpu,
                     settings: Settings) -> dict[str, Any]:
        from kvdash.core.reserve import auto_reserve

        return auto_reserve(arch.model_type, tp, pp, caps.max_num_batched_tokens, gpu.name, layers=arch.num_layers,
                            graphs=self.capture_graphs(caps, gpu, settings))

    def capture_graphs(self, caps: Caps, gpu: Gpu, settings: Settings) -> int:
        """CUDA graphs vLLM 0.33 captures under these caps (the reserve's CUDA-graph term scales with them):
        ``VllmConfig._set_cudagraph_sizes`` (``vllm/config/vllm.py``), 1,024 largest on Blackwell."""
        blackwell = rules.gpu_generation(gpu.compute_capability) == "sm100"
        return len(rules.cudagraph_capture_sizes(caps.max_num_seqs, caps.max_num_batched_tokens, blackwell,
                                                 settings.performance_mode))

    def in_flight_tokens(self, caps: Caps, settings: Settings) -> int:
        return rules.max_in_flight_tokens(caps.max_num_batched_tokens, settings.async_scheduling, settings.pp)

    def blocks_per_request(self, x: Mapping[str, Any]) -> Any:
        # max_memory_usage_bytes per spec (vllm/v1/kv_cache_interface.py): full cdiv(L, B); sliding
        # cdiv(min(W - 1 + T, L), B) + 1; chunked cdiv(min(C + T, L), B), T = max_in_flight_tokens; a state
        # group 1 block (2 in align mode, 3 for Mamba-2): state_blocks
        B, L, window, chunked = x["block_size"], x["max_model_len"], x["window"], x["chunked"]
        local = f.cdiv(f.imin(window - 1 + chunked + x["in_flight_tokens"], L), B) + 1 - chunked
        return x["full_groups"] * f.cdiv(L, B) + x["window_groups"] * local + x["state_blocks"]

    def startup_line(self, kv_tokens: int, max_model_len: int, concurrency: float) -> str:
        # vllm/v1/core/kv_cache_utils.py (v0.33.0), update_kv_cache_capacity: one line
        return (f"GPU KV cache size: {kv_tokens:,} tokens, "
                f"Maximum concurrency for {max_model_len:,} tokens per request: {concurrency:.2f}x")

    def caps_text(self, caps: Caps) -> str:
        return rules.caps_text(rules.Caps(caps.max_num_seqs, caps.max_num_batched_tokens, caps.seqs_basis,
                                          caps.tokens_basis, caps.tier))


RULES = VllmRules()

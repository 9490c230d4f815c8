"""The inputs of one configuration (:class:`CalcInput`), their checks, and the engine they name.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvdash import defaults
from kvdash.answer.budget import BudgetSpec
from kvdash.core import limits
from kvdash.core.arch import Architecture
from kvdash.core.point import group_size_problem
from kvdash.core.pool import check_positive
from kvdash.engines import registry
from kvdash.engines.base import EngineRules, Settings
from kvdash.errors import InputError


@dataclass(frozen=True)
class CalcInput:
    arch: Architecture
    kv_dtype: str = defaults.KV_DTYPE
    kv_scales: str = "tensor"
    block_size: int | str = defaults.BLOCK_SIZE  # tokens per block requested, or "auto" (vLLM 0.33's choice)
    budget: BudgetSpec = BudgetSpec()
    tp: int = defaults.TP
    pp: int = defaults.PP
    used: int = defaults.LENGTH
    max_reserved: int = defaults.RESERVATION
    final: int | None = None  # final length for Pow2/Oracle; default: used
    group: tuple[int, ...] | None = None
    prefix: int = 0  # tokens of a prompt prefix every request shares
    max_model_len: int | None = None  # vLLM view; default: max_reserved
    max_batched_tokens: int | None = None  # vLLM max_num_batched_tokens; None: vLLM 0.33's default for the GPU
    target: int | None = None  # planning: requests that must fit
    logged_tokens: int | None = None  # a logged "GPU KV cache size: N tokens" to check
    prefix_caching: bool = True  # vLLM 0.33's default; puts state layers in mamba_cache_mode 'align'
    max_num_seqs: int | None = None  # vLLM max_num_seqs; None: vLLM 0.33's default for the GPU
    performance_mode: str = "balanced"  # vLLM --performance-mode: 'throughput' doubles both defaults
    chunked_prefill: bool = True  # vLLM's default for generative models
    async_scheduling: bool = True  # vLLM 0.33's default: two batches in flight
    allow_long_max_model_len: bool = False  # VLLM_ALLOW_LONG_MAX_MODEL_LEN=1
    # the engine whose rules apply (kvdash.engines.registry); the "vllm_view", "engine" and "log_check" sections are
    # vLLM 0.33's (kvdash.engines.vllm_view) -- another engine brings its own
    engine: str = "vllm"

    def validate(self) -> None:
        check_positive("--length", self.used)
        if self.used > self.arch.max_context:
            raise InputError("--length", self.used, f"at most the model's context length ({self.arch.max_context})")
        check_positive("--max-reserved", self.max_reserved)
        if self.used > self.max_reserved:
            raise InputError("--length", self.used,
                             f"must not exceed --max-reserved={self.max_reserved} (the reservation); "
                             f"add --max-reserved {self.used} or more, or leave --max-reserved out")
        if self.max_reserved > self.arch.max_context:
            raise InputError("--max-reserved", self.max_reserved,
                             f"at most the model's context length ({self.arch.max_context})")
        final = self.used if self.final is None else self.final
        check_positive("--final", final)
        if not self.used <= final <= self.max_reserved:
            raise InputError("--final", final,
                             f"must lie between --length={self.used} and --max-reserved={self.max_reserved}")
        if self.group is not None:
            if not self.group:
                raise InputError("--group", "", "expected comma-separated positive lengths, e.g. 200,825,1525")
            problem = group_size_problem(len(self.group))
            if problem:
                raise InputError("--group", ",".join(map(str, self.group)), problem)
            for length in self.group:
                check_positive("--group", length)
                if length > self.max_reserved:
                    raise InputError("--group", length,
                                     f"each length must not exceed --max-reserved={self.max_reserved}")
        limits.check_int("--prefix", self.prefix)
        if self.prefix and self.prefix >= self.used:
            # a request that is all shared prefix owns no block at some block size (the sensitivity rows try
            # several): capacity = budget // 0.  Issue 17's regression test pins it.
            raise InputError("--prefix", self.prefix, f"must be below --length={self.used} (a request made only of "
                             "the shared prefix owns no block of its own)")
        if self.max_model_len is not None:
            check_positive("--max-model-len", self.max_model_len)
            rules_of(self).check_max_model_len(self.arch, self.max_model_len, self.allow_long_max_model_len)
        if self.max_batched_tokens is not None:
            check_positive("--max-batched-tokens", self.max_batched_tokens)
        if self.max_num_seqs is not None:
            check_positive("--max-num-seqs", self.max_num_seqs)
        if self.target is not None:
            check_positive("--target", self.target)
        if self.logged_tokens is not None:
            check_positive("--logged-tokens", self.logged_tokens)


def rules_of(inp: CalcInput) -> EngineRules:
    """The rules of the configuration's engine (:attr:`CalcInput.engine`)."""
    return registry.get(inp.engine, "engine")


def settings_of(inp: CalcInput) -> Settings:
    """The configuration's engine options, as :class:`~kvdash.engines.base.Settings`."""
    return Settings(inp.max_model_len or inp.max_reserved, inp.max_num_seqs, inp.max_batched_tokens,
                    inp.performance_mode, inp.chunked_prefill, inp.async_scheduling, inp.prefix_caching, inp.pp)

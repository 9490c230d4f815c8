"""Every PromQL expression kvdash sends, by name, in one place.

``kvdash live --prometheus`` sends the four ``FLEET`` queries on each poll (one instant query each;
a regular expression on ``__name__`` fetches a family of series in one round trip).  The Grafana
dashboard (``dashboards/kvdash.json``) has its own panel queries; the tests run both sets against a
real Prometheus server.

Series read (units as the exporters publish them):

- NVIDIA DCGM exporter: ``DCGM_FI_DEV_FB_USED``, ``DCGM_FI_DEV_FB_FREE``, ``DCGM_FI_DEV_FB_RESERVED``
  (framebuffer memory in MiB, labels ``Hostname``, ``gpu``, ``UUID``, ``modelName``); total = used +
  free + reserved.
- ``kvdash exporter``: ``kvdash_gpu_memory_{used,free,reserved,total}_bytes`` (labels ``hostname``,
  ``gpu``, ``uuid``, ``name``).
- vLLM's ``/metrics``: ``vllm:kv_cache_usage_perc`` (0-1; before vLLM V1 ``vllm:gpu_cache_usage_perc``),
  ``vllm:num_requests_running``, ``vllm:num_requests_waiting`` (label ``model_name``) and
  ``vllm:cache_config_info`` (labels ``num_gpu_blocks``, ``block_size``, ``cache_dtype``,
  ``gpu_memory_utilization``), joined on ``instance`` and ``engine``.
- SGLang's ``/metrics`` (``--enable-metrics``): ``sglang:max_total_num_tokens``, ``sglang:token_usage``,
  ``sglang:num_used_tokens``, ``sglang:num_running_reqs``, ``sglang:num_queue_reqs``.
- ``kvdash exporter``'s view of its engines (``--engine``): ``kvdash_engine_kv_pool_tokens``, ``_kv_pool_blocks``,
  ``_kv_usage_ratio``, ``_requests_running``, ``_requests_waiting`` (used for a host only when
  Prometheus does not scrape that host's engines itself, so no engine is counted twice).
- the counters behind the fleet view's windowed rates (prefix-cache hit rate and preemptions over the last
  readings): ``vllm:prefix_cache_{queries,hits}_total``, ``vllm:num_preemptions_total``,
  ``sglang:num_retracted_requests_total``, ``sglang:prefill_effective_tokens_total`` (by ``mode``),
  ``kvdash_engine_prefix_cache_{queries,hits}_total``,
  ``kvdash_engine_preemptions_total``.
- Prometheus' own ``up`` (1 scraped, 0 down) for every target.
"""

from __future__ import annotations

DCGM_MEMORY_SERIES = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED")
KVDASH_MEMORY_SERIES = ("kvdash_gpu_memory_used_bytes", "kvdash_gpu_memory_free_bytes",
                        "kvdash_gpu_memory_reserved_bytes", "kvdash_gpu_memory_total_bytes")
VLLM_SERIES = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:cache_config_info",
               "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:num_requests_waiting_by_reason",
               "vllm:engine_sleep_state", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
               "vllm:num_preemptions_total")
KVDASH_ENGINE_SERIES = ("kvdash_engine_up", "kvdash_engine_reading_age_seconds", "kvdash_engine_block_size_tokens",
                        "kvdash_engine_kv_pool_tokens", "kvdash_engine_kv_pool_blocks", "kvdash_engine_kv_used_tokens",
                        "kvdash_engine_kv_usage_ratio", "kvdash_engine_requests_running",
                        "kvdash_engine_requests_waiting", "kvdash_engine_prefix_cache_queries_total",
                        "kvdash_engine_prefix_cache_hits_total", "kvdash_engine_preemptions_total")
SGLANG_SERIES = ("sglang:max_total_num_tokens", "sglang:token_usage", "sglang:num_used_tokens",
                 "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:page_size", "sglang:kv_evictable_tokens",
                 "sglang:full_token_usage", "sglang:swa_token_usage", "sglang:mamba_usage",
                 "sglang:num_retracted_requests_total", "sglang:prefill_effective_tokens_total")


def _names(names: tuple[str, ...]) -> str:
    return '{__name__=~"' + "|".join(names) + '"}'


def _keep(labels: str, names: tuple[str, ...]) -> str:
    """The series of ``names`` with only ``labels`` (and their name): ``max by`` over one series each
    changes no value and halves the answer (DCGM adds pci_bus_id, device, job, ...)."""
    return f"max by (__name__, {labels}) ({_names(names)})"


FLEET: dict[str, str] = {
    # GPU memory of every host that runs NVIDIA's DCGM exporter, MiB
    "dcgm_memory": _keep("Hostname, gpu, UUID, modelName, instance", DCGM_MEMORY_SERIES),
    # GPU memory of every host that runs kvdash exporter, bytes
    "kvdash_memory": _keep("hostname, gpu, uuid, name, instance", KVDASH_MEMORY_SERIES),
    # the engines' own figures (vLLM and SGLang)
    "engines": _names(VLLM_SERIES + SGLANG_SERIES + KVDASH_ENGINE_SERIES),
    # every target Prometheus scrapes: 1 when the last scrape worked, 0 when it failed
    "targets": "up",
    # the host name each exporter target had in the last hour, so a stopped exporter's host keeps its name
    "host_names": 'max by (instance, hostname, Hostname) '
                  '(last_over_time({__name__=~"kvdash_info|DCGM_FI_DEV_FB_USED"}[1h]))',
}


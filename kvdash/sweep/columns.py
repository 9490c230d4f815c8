"""The documented columns of a sweep's results, in order: one owner for the grid reader (gate metrics),
the evaluator (what it computes) and the report (the column list)."""

GPUS_PER_NODE = 8  # an HGX/DGX node; requests per node assume it

# name, kind, description -- the documented columns of results.csv, in order
RESULT_COLUMNS: list[tuple[str, str, str]] = [
    ("id", "str", "stable point id: a hash of the point's parameters, not its position"),
    ("model", "str", "model name from the grid's models:"),
    ("workload", "str", "workload name"),
    ("lengths", "str", "tokens each request of the workload holds now (comma-separated)"),
    ("max_reserved", "int", "tokens a contiguous Max allocator reserves per request"),
    ("prefix", "int", "tokens of a shared prompt prefix (0: none)"),
    ("kv_dtype", "str", "KV element type"),
    ("kv_scales", "str", "scale storage: tensor (none per token) or token_head"),
    ("block_size", "int", "tokens per block used (hybrids: raised as vLLM 0.33 does to hold a state page)"),
    ("tp", "int", "tensor-parallel degree"),
    ("pp", "int", "pipeline-parallel degree"),
    ("gpu", "str", "GPU preset when the budget is derived (empty for an explicit budget)"),
    ("gpu_util", "str", "utilization fraction when derived"),
    ("util_policy", "str", "vllm (fraction of total) or trtllm (fraction of free after weights)"),
    ("budget_bytes", "int", "KV budget per rank in bytes (0 when weights and reserve leave nothing)"),
    ("fits", "bool", "false when the derived budget leaves no memory for the KV cache, or (max_model_len given) "
     "where vLLM 0.33 would refuse to start: whole_pool_blocks <= vllm_blocks_per_request"),
    ("max_model_len", "int", "vLLM max_model_len used for its start-up figures"),
    ("max_batched_tokens", "int", "vLLM max_num_batched_tokens: the grid's, else vLLM 0.33's default for the GPU "
     "(EngineArgs.get_batch_defaults); sliding-window layers are sized for 2 x it under async scheduling"),
    ("bytes_per_token", "int", "KV bytes one token takes on the tightest rank"),
    ("block_bytes", "int", "bytes of one pool block"),
    ("state_bytes", "int", "pool bytes of one request's fixed Mamba/linear-attention state, whatever its length "
     "(vLLM 0.33 prefix caching on: 2 blocks per state group, 3 for Mamba-2 and gated delta net; 0: no state layers)"),
    ("kv_token_slots", "int", "floor(budget / bytes_per_token)"),
    ("whole_pool_blocks", "int", "floor(budget / block_bytes)"),
    ("block_backed_token_slots", "int", "pool blocks / KV-cache groups x block size"),
    ("paged_blocks", "int", "pool blocks one workload group holds"),
    ("useful_slots", "int", "sum of the workload's lengths"),
    ("allocated_slots", "int", "sum of ceil(length / B) x B"),
    ("tail_waste_slots", "int", "allocated - useful slots"),
    ("paged_internal_waste_percent", "float", "100 x tail waste / allocated slots"),
    ("useful_bytes", "int", "bytes of token state the group needs"),
    ("paged_bytes", "int", "bytes the group holds when paged"),
    ("contiguous_max_bytes", "int", "bytes the group holds under contiguous Max"),
    ("paged_waste_percent", "float", "100 x (paged - useful) / paged bytes"),
    ("reservation_waste_percent", "float", "100 x (Max - useful) / Max bytes"),
    ("complete_groups", "int", "whole workload groups that fit, paged"),
    ("contiguous_complete_groups", "int", "whole groups that fit under contiguous Max"),
    ("paged_requests", "int", "requests that fit, paged (whole groups x group size)"),
    ("gpus", "int", "GPUs one replica spans: tp x pp"),
    ("paged_requests_per_gpu", "float", "paged requests / GPUs of the replica"),
    ("paged_requests_per_node", "int", f"paged requests an {GPUS_PER_NODE}-GPU node serves: whole replicas per node x "
     "paged requests (a replica over several nodes: its requests / its nodes, floored)"),
    ("max_num_seqs", "int", "vLLM max_num_seqs: the grid's, else vLLM 0.33's default for the GPU "
     "(EngineArgs.get_batch_defaults)"),
    ("running_requests", "int", "requests vLLM runs at once: min(paged requests, max_num_seqs)"),
    ("running_requests_per_gpu", "float", "running requests / GPUs of the replica"),
    ("contiguous_requests", "int", "requests that fit under contiguous Max"),
    ("pow2_requests", "int", "requests that fit under contiguous Pow2 (next power of two of the final length)"),
    ("oracle_requests", "int", "requests that fit under contiguous Oracle (exact final length)"),
    ("request_capacity_ratio", "float", "paged / contiguous Max requests (empty when none fit contiguously)"),
    ("offload_tokens", "int", "tokens of the longest request"),
    ("offload_useful_bytes", "int", "its token-state bytes"),
    ("offload_allocated_bytes", "int", "its full allocated-block bytes"),
    ("requests_with_prefix_sharing", "int", "requests that fit when the prefix blocks are shared"),
    ("prefix_saved_percent", "float", "memory saved by sharing at the unshared request count, percent"),
    ("vllm_kv_cache_tokens", "int", "vLLM 0.33's 'GPU KV cache size': int(max concurrency x max_model_len)"),
    ("vllm_max_concurrency", "float", "vLLM's 'Maximum concurrency' at max_model_len"),
    ("kv_128k_over_weights", "float", "KV bytes of one 131,072-token request / weight bytes (per rank)"),
]
FLOAT_DECIMALS = 6

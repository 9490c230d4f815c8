"""vLLM 0.33.0's own code on the rules kvdash mirrors in kvdash/engines/vllm.py: SlidingWindowSpec /
ChunkedLocalAttentionSpec.max_memory_usage_bytes (vllm/v1/kv_cache_interface.py) under a real VllmConfig's
max_in_flight_tokens (async scheduling on and off), MambaSpec.max_memory_usage_bytes per mamba_cache_mode and
checkpoint blocks, whether MambaMixer2.get_kv_cache_spec sets the checkpoint block, and ModelConfig's derived
max_model_len with its refusal one token above it (vllm/config/model.py) for the configs named.  Writes
rules.json in the current folder:

    cd conformance/vllm/rules && /work/vllm-venv/bin/python rules_probe.py ../../../tests/data/configs \
        gemma-2-9b,phi-3-mini-4k-instruct,...
"""
import json, os, sys, types
os.environ["HF_HUB_OFFLINE"] = "1"
import torch
from vllm.config import ModelConfig, VllmConfig, SchedulerConfig, CacheConfig, ParallelConfig, DeviceConfig
from vllm.v1.kv_cache_interface import SlidingWindowSpec, ChunkedLocalAttentionSpec, MambaSpec
configs = sys.argv[1]
out = {"vllm_version": __import__("vllm").__version__, "windows": [], "max_len": {}}
d = os.path.join(configs, "mistral-7b-v0.1")
for L in (2048, 32768):
    mc = ModelConfig(model=d, tokenizer=d, skip_tokenizer_init=True, max_model_len=L, dtype="bfloat16")
    for tokens in (2048, 8192, 16384):
        for asyn in (True, False):
            sc = SchedulerConfig(max_num_batched_tokens=tokens, max_num_seqs=256, max_model_len=L,
                                 async_scheduling=asyn, is_encoder_decoder=False)
            vc = VllmConfig(model_config=mc, scheduler_config=sc, cache_config=CacheConfig(block_size=16),
                            parallel_config=ParallelConfig(), device_config=DeviceConfig(device="cpu"))
            vc.scheduler_config.async_scheduling = asyn  # as vllm serve resolves it on CUDA
            for kind, spec in (("sliding", SlidingWindowSpec(block_size=16, num_kv_heads=8, head_size=128,
                                                              dtype=torch.bfloat16, sliding_window=4096)),
                               ("chunked", ChunkedLocalAttentionSpec(block_size=16, num_kv_heads=8, head_size=128,
                                                                     dtype=torch.bfloat16, attention_chunk_size=8192))):
                out["windows"].append({"kind": kind, "max_model_len": L, "max_num_batched_tokens": tokens,
                                       "async_scheduling": asyn, "in_flight": vc.max_in_flight_tokens,
                                       "blocks": spec.max_memory_usage_bytes(vc) // spec.page_size_bytes})
mamba = []
for mode in ("align", "none"):
    for ckpt in (0, 1):
        vc = types.SimpleNamespace(cache_config=types.SimpleNamespace(mamba_cache_mode=mode))
        spec = MambaSpec(shapes=((3, 8192), (8192, 16)), dtypes=(torch.bfloat16, torch.bfloat16), block_size=16,
                         mamba_cache_mode=mode, num_prefill_checkpoint_blocks=ckpt)
        mamba.append({"mode": mode, "checkpoint_blocks": ckpt,
                      "pages": spec.max_memory_usage_bytes(vc) // spec.page_size_bytes})
out["mamba"] = mamba
from vllm.model_executor.layers.mamba.mamba_mixer2 import MambaMixer2
import inspect
out["mamba_mixer2_sets_checkpoint"] = "num_prefill_checkpoint_blocks=1" in inspect.getsource(MambaMixer2.get_kv_cache_spec)
for name in sys.argv[2].split(","):
    d = os.path.join(configs, name)
    if not os.path.isfile(os.path.join(d, "config.json")):
        continue
    try:
        mc = ModelConfig(model=d, tokenizer=d, skip_tokenizer_init=True, dtype="bfloat16")
        derived = mc.max_model_len
        try:
            ModelConfig(model=d, tokenizer=d, skip_tokenizer_init=True, dtype="bfloat16", max_model_len=derived + 1)
            refusal = ""
        except Exception as exc:
            refusal = str(exc).split(" To allow overriding")[0]
        out["max_len"][name] = {"derived": derived, "refusal_above": refusal}
    except Exception as exc:
        out["max_len"][name] = {"error": type(exc).__name__ + ": " + str(exc)[:200]}
    json.dump(out, open("rules.json", "w"), indent=1, sort_keys=True)
json.dump(out, open("rules.json", "w"), indent=1, sort_keys=True)

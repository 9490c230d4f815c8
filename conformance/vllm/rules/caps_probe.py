"""vLLM 0.33.0's own EngineArgs._set_default_max_num_seqs_and_batched_tokens_args (vllm/engine/arg_utils.py) for each
of kvdash's GPU presets: the platform's device name and total memory are patched to the preset's (no GPU here),
then `vllm serve`'s defaults (UsageContext.OPENAI_API_SERVER) are read for balanced/throughput mode, with chunked
prefill on (max_model_len 8,192) and off (32,768).  Run with the vLLM 0.33.0 venv:

    /work/vllm-venv/bin/python conformance/vllm/rules/caps_probe.py kvdash/data/gpus.json > conformance/vllm/rules/caps.json
"""
import json, sys, types
from vllm.engine import arg_utils
from vllm.engine.arg_utils import EngineArgs
from vllm.usage.usage_lib import UsageContext
gpus = json.load(open(sys.argv[1]))
out = {}
for key, g in gpus.items():
    if key.startswith("_"):
        continue
    p = arg_utils.current_platform
    p.get_device_total_memory = lambda device_id=0, m=g["memory_bytes"]: m
    p.get_device_name = lambda device_id=0, n=g["name"]: n
    p.is_device_capability = lambda cap, device_id=0: False
    for perf in ("balanced", "throughput"):
        for chunked, mml in ((True, 8192), (False, 32768)):
            ea = EngineArgs(model="x")
            ea.performance_mode = perf
            ea.enable_chunked_prefill = chunked
            mc = types.SimpleNamespace(max_model_len=mml, is_multimodal_model=False, is_mm_prefix_lm=False)
            pc = types.SimpleNamespace(use_batched_dp_moe=False)
            ea._set_default_max_num_seqs_and_batched_tokens_args(UsageContext.OPENAI_API_SERVER, mc, pc)
            out[f"{key}/{perf}/chunked={chunked}/L={mml}"] = (ea.max_num_seqs, ea.max_num_batched_tokens)
print(json.dumps({"vllm_version": __import__("vllm").__version__, "cases": out}, indent=1, sort_keys=True))

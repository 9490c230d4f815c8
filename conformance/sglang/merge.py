"""Merge the harness shards into expected.json: a header, then one case per line (keys sorted)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

HEADER = {
    "gpus": {"h100": "NVIDIA H100 80GB HBM3, 81,559 MiB (nvidia-smi memory.total)",
             "h200": "NVIDIA H200, 143,771 MiB (nvidia-smi memory.total)"},
    "free_before_weights": "total - 1,024 MiB (CUDA context and NCCL buffers: a stated input)",
    "free_after_weights": "free_before_weights - weights_bytes_per_rank (kvdash's weight estimate / tp, "
                          "rounded up; 0 where kvdash has no estimate: an input, recorded per case)",
    "grid": "tp 1/2/4/8 x kv bf16 (auto) / fp8 (fp8_e4m3) x page auto/16/64 x GPU h100/h200",
    "server_args": "ServerArgs(model_path=DIR, tp_size, kv_cache_dtype, page_size, skip_tokenizer_init) "
                   "resolved by resolve_once(); everything else SGLang's defaults",
}


def main() -> None:
    out, seconds, *shards = sys.argv[1:]
    cases, configs, stubbed, version = [], {}, set(), None
    for s in shards:
        d = json.loads(Path(s).read_text())
        version = d["sglang_version"]
        cases += d["cases"]
        configs.update(d["configs"])
        stubbed |= set(d["stubbed_modules"])
    cases.sort(key=lambda c: (c["config"], c["gpu"], c["tp"], c["kv_dtype"], str(c["page_size_requested"])))
    head = {"sglang_version": version, **HEADER, "stubbed_modules": sorted(stubbed),
            "run_seconds": int(seconds), "configs": dict(sorted(configs.items()))}
    lines = ["{", *(f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True)}," for k, v in head.items()), '  "cases": [']
    lines += [f"    {json.dumps(c, sort_keys=True)}," for c in cases]
    lines[-1] = lines[-1].rstrip(",")
    lines += ["  ]", "}"]
    repo = str(Path(__file__).resolve().parents[2]) + "/"  # SGLang's messages name the config path: keep it relative
    Path(out).write_text("\n".join(lines).replace(repo, "") + "\n")
    ok = sum(c["status"] == "ok" for c in cases)
    print(f"{len(cases)} cases: {ok} ok, {len(cases) - ok} refused or failed", file=sys.stderr)


if __name__ == "__main__":
    main()

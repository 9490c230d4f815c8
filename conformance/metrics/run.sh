#!/usr/bin/env bash
# Regenerate tests/data/engine_pages/ from the engines' own metrics code (never part of .ci/run).
#
# Usage: conformance/metrics/run.sh [--only LAYOUT ...]
#   VLLM_VENV   (default /work/vllm-venv, else ./.vllm-venv): vllm==0.33.0
#   SGLANG_VENV (default /work/sglang-venv, else ./.sglang-venv): sglang==0.5.23 --no-deps plus the few
#               modules its metrics import needs (created here when missing; see README.md beside this file)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$repo"
VLLM_VENV="${VLLM_VENV:-$( [[ -x /work/vllm-venv/bin/python ]] && echo /work/vllm-venv || echo "$repo/.vllm-venv")}"
SGLANG_VENV="${SGLANG_VENV:-$( [[ -x /work/sglang-venv/bin/python ]] && echo /work/sglang-venv || echo "$repo/.sglang-venv")}"
if [[ ! -x "$VLLM_VENV/bin/python" ]]; then
  python3 -m venv "$VLLM_VENV" && "$VLLM_VENV/bin/pip" install --quiet "vllm==0.33.0"
fi
if [[ ! -x "$SGLANG_VENV/bin/python" ]]; then
  python3 -m venv "$SGLANG_VENV"
  "$SGLANG_VENV/bin/pip" install --quiet --no-deps "sglang==0.5.23"
  # what `import sglang.srt.observability.metrics_collector` needs (found one ModuleNotFoundError at a time)
  "$SGLANG_VENV/bin/pip" install --quiet prometheus-client numpy orjson psutil pybase64 requests torch packaging \
    pillow starlette msgspec pydantic pyzmq tqdm ipython aiohttp transformers torchvision dill apache-tvm-ffi \
    sentencepiece compressed-tensors gguf
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
start=$(date +%s)
"$VLLM_VENV/bin/python" "$here/vllm_pages.py" "$@"
"$SGLANG_VENV/bin/python" "$here/sglang_pages.py" "$@"
echo "conformance/metrics/run.sh: $(( $(date +%s) - start )) s" >&2

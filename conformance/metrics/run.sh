#!/usr/bin/env bash
# Regenerate tests/data/engine_pages/ from the engines' own metrics code (never part of .ci/run).
#
# Usage: conformance/metrics/run.sh [--only LAYOUT ...]
#   VLLM_VENV   (default /work/vllm-venv, else ./.vllm-venv): vllm==0.33.0
#   SGLANG_VENV (default /work/sglang-venv, else ./.sglang-venv): sglang==0.5.23 --no-deps plus the few
#               modules its metrics import needs (created here when missing; see README.md beside this file)
#   LMCACHE_VENV (default /work/lmcache-venv, else ./.lmcache-venv): lmcache==0.5.6 --no-deps plus what
#               lmcache.observability imports; torch's CUDA libraries are taken from the SGLang venv (same torch)
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
LMCACHE_VENV="${LMCACHE_VENV:-$( [[ -x /work/lmcache-venv/bin/python ]] && echo /work/lmcache-venv || echo "$repo/.lmcache-venv")}"
if [[ ! -x "$LMCACHE_VENV/bin/python" ]]; then
  python3 -m venv "$LMCACHE_VENV"
  # what `import lmcache.observability` needs (found one ModuleNotFoundError at a time); torch as SGLang's
  "$LMCACHE_VENV/bin/pip" install --quiet --no-deps "lmcache==0.5.6" prometheus-client "torch==2.14.1" numpy \
    cachetools py-cpuinfo pyyaml psutil typing_extensions aiohttp multidict attrs yarl idna propcache \
    aiohappyeyeballs aiosignal frozenlist requests urllib3 certifi
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
start=$(date +%s)
"$VLLM_VENV/bin/python" "$here/vllm_pages.py" "$@"
"$SGLANG_VENV/bin/python" "$here/sglang_pages.py" "$@"
# torch --no-deps has no CUDA libraries of its own; LMCache's metrics never touch a GPU, torch's import needs them
nv="$(ls -d "$SGLANG_VENV"/lib/python3*/site-packages/nvidia/*/lib 2>/dev/null | tr '\n' ':')"
LD_LIBRARY_PATH="$nv${LD_LIBRARY_PATH:-}" "$LMCACHE_VENV/bin/python" "$here/lmcache_pages.py" "$@"
echo "conformance/metrics/run.sh: $(( $(date +%s) - start )) s" >&2

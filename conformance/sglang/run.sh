#!/usr/bin/env bash
# Regenerate conformance/sglang/expected.json from SGLang 0.5.23's own sizing code (never part of .ci/run).
#
# Usage: conformance/sglang/run.sh [harness options, e.g. --only qwen3-8b --tps 1 2]
#   SGLANG_VENV (default /work/sglang-venv, else ./.sglang-venv): sglang==0.5.23 --no-deps plus the
#               pure-Python modules its import needs (created here when missing; see README.md)
#   JOBS (default 2): harness processes side by side, each on every JOBS-th config
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$repo"
SGLANG_VENV="${SGLANG_VENV:-$( [[ -x /work/sglang-venv/bin/python ]] && echo /work/sglang-venv || echo "$repo/.sglang-venv")}"
if [[ ! -x "$SGLANG_VENV/bin/python" ]] || ! "$SGLANG_VENV/bin/python" -c 'import sglang, sys; sys.exit(sglang.__version__ != "0.5.23")' 2>/dev/null; then
  echo "creating $SGLANG_VENV with sglang==0.5.23 --no-deps (about 6 GB with torch's CUDA wheels)" >&2
  python3 -m venv "$SGLANG_VENV"
  "$SGLANG_VENV/bin/pip" install --quiet --no-deps "sglang==0.5.23"
  # conformance/metrics/run.sh's list (what the metrics import needs), then what the sizing path adds
  "$SGLANG_VENV/bin/pip" install --quiet prometheus-client numpy orjson psutil pybase64 requests torch packaging \
    pillow starlette msgspec pydantic pyzmq tqdm ipython aiohttp transformers torchvision dill apache-tvm-ffi \
    sentencepiece compressed-tensors gguf einops openai
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
jobs="${JOBS:-2}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
pids=()
for ((k = 0; k < jobs; k++)); do
  nice "$SGLANG_VENV/bin/python" "$here/harness.py" --shard "$k/$jobs" --out "$tmp/shard$k.json" "$@" \
    2> >(grep -v -e '^Ignore import error' -e 'deprecated' >&2 | sed "s/^/[shard $k] /" >&2) &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
python3 "$here/merge.py" "$here/expected.json" "$(( $(date +%s) - start ))" "$tmp"/shard*.json
echo "conformance/sglang/run.sh: $(( $(date +%s) - start )) s" >&2

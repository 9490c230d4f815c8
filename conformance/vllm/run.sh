#!/usr/bin/env bash
# Regenerate conformance/vllm/expected.json (and registry.json) from vLLM 0.33.0's own code.
#
# Usage: conformance/vllm/run.sh [harness options, e.g. --only qwen3-8b jamba-1.5-mini]
#        conformance/vllm/run.sh --registry     # only conformance/vllm/registry.json
#        conformance/vllm/run.sh --external [harness options]
#            # the external set: conformance/vllm/external/*/config.json -> external/expected.json
#
# The side virtualenv holding vllm==0.33.0 (about 8 GB with torch's CUDA libraries) is
# VLLM_VENV, default /work/vllm-venv if it exists, else ./.vllm-venv in the repository.
# It is created here when missing (pip install vllm==0.33.0, ~20 minutes; then timm --no-deps,
# which Gemma 3n's vision tower needs). It is never
# part of .ci/run: the CI tests only read the committed expected.json and registry.json.
# JOBS (default 2) harness processes run side by side, each on every JOBS-th config.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$repo"

if [[ -z "${VLLM_VENV:-}" ]]; then
  if [[ -x /work/vllm-venv/bin/python ]]; then
    VLLM_VENV=/work/vllm-venv
  else
    VLLM_VENV="$repo/.vllm-venv"
  fi
fi

if [[ ! -x "$VLLM_VENV/bin/python" ]] || ! "$VLLM_VENV/bin/python" -c 'import vllm, sys; sys.exit(vllm.__version__ != "0.33.0")' 2>/dev/null; then
  echo "creating $VLLM_VENV with vllm==0.33.0 (several GB, takes a while)" >&2
  python3 -m venv "$VLLM_VENV"
  "$VLLM_VENV/bin/pip" install --quiet "vllm==0.33.0"
fi
# timm: Gemma 3n's vision tower (gemma3n_mm.py, transformers' TimmWrapperModel) needs it and vllm==0.33.0 does not
# depend on it; --no-deps keeps the venv's torch and torchvision as vllm pinned them
if ! "$VLLM_VENV/bin/python" -c 'import timm' 2>/dev/null; then
  "$VLLM_VENV/bin/pip" install --quiet --no-deps timm
fi

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
start=$(date +%s)
if [[ "${1:-}" == "--registry" ]]; then
  "$VLLM_VENV/bin/python" "$here/registry.py" "$here/registry.json"
  exit 0
fi
configs=tests/data/configs
out="$here/expected.json"
if [[ "${1:-}" == "--external" ]]; then
  shift
  configs=conformance/vllm/external
  out="$here/external/expected.json"
fi
jobs="${JOBS:-2}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
pids=()
for ((k = 0; k < jobs; k++)); do
  "$VLLM_VENV/bin/python" "$here/harness.py" --configs "$configs" --shard "$k/$jobs" \
    --partial-out "$tmp/shard$k.json" "$@" 2> >(sed "s/^/[shard $k] /" >&2) &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
python3 "$here/merge.py" "$out" "$tmp"/shard*.json
echo "conformance/vllm/run.sh: $(( $(date +%s) - start )) s" >&2

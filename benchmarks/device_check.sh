#!/usr/bin/env bash
# The real-NVML checks of `kvdash live`, run on a GPU host (here: the workplace's H200 machine).
# Usage: OUT=dir bash benchmarks/device_check.sh   (wheels of missing packages in .whl/ are installed first)
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
K="python3 -m kvdash.cli"
run() { echo "\$ $*"; "$@"; echo "(exit $?)"; }
{
  run nvidia-smi --query-gpu=index,name,memory.total,memory.used,memory.reserved,driver_version --format=csv
  run python3 -c "import pynvml, textual, typer; print('nvidia-ml-py', pynvml.__name__, 'textual', textual.__version__, 'typer', typer.__version__)"
} > "$OUT/env.txt" 2>&1
run $K live --once --model llama-3.1-8b --tp 1 > "$OUT/once.txt" 2>&1
$K live --json --model llama-3.1-8b --tp 1 > "$OUT/live.json" 2> "$OUT/live.err"
run $K record --out "$OUT/record.jsonl" --count 5 --interval 1 > "$OUT/record.txt" 2>&1
run $K live --replay "$OUT/record.jsonl" --once --model llama-3.1-8b --tp 1 > "$OUT/replay.txt" 2>&1
run $K calc --gpu h200 --model llama-3.1-8b --json > "$OUT/calc-h200.json" 2>&1
# a process that holds 20 GiB, to see memory and the process list move
python3 -c "import torch, time; x = torch.empty(20 * 2**30, dtype=torch.uint8, device='cuda'); x.fill_(1); torch.cuda.synchronize(); time.sleep(30)" &
HOLDER=$!
sleep 12
$K live --json --model llama-3.1-8b --tp 1 > "$OUT/live-with-20GiB.json" 2> "$OUT/live-with-20GiB.err"
# the app itself, headless against real NVML: CPU use at 1 s, key handling at 0.1 s, a screenshot
run python3 benchmarks/live_cpu.py --source nvml --tp 1 --model llama-3.1-8b --seconds 10 --presses 10 \
  --screenshot "$OUT/live-nvml.svg" > "$OUT/headless.txt" 2>&1
kill $HOLDER 2>/dev/null
wait 2>/dev/null
ls -la "$OUT"

#!/usr/bin/env bash
# Issue 5's one-machine figures: tp=2 on the shm backend (one thread per rank), TP, TP + SP and
# async TP alternating iteration by iteration in one job (`--compare tp,sp,async`), output 1:
# the Llama-3.2-1B shape at 512 and 2048 tokens, the ~110M Llama at 8192. Writes the JSON of
# each run to benches/results/ for benches/plot_async_tp.py. Usage: benches/async-tp.sh [build-dir] [iterations]
set -euo pipefail
cd "$(dirname "$0")/.."
loom=${1:-build}/loom
iters=${2:-3}
mkdir -p benches/results
for spec in "configs/llama-3.2-1b.json 512" "configs/llama-3.2-1b.json 2048" "configs/llama-100m.json 8192"; do
  set -- $spec
  name=$(basename "$1" .json)
  echo "== $name, input $2, output 1, tp=2"
  "$loom" bench latency -m "$1" --load-format dummy --batch-size 1 --input-len "$2" --output-len 1 \
    --num-iters-warmup 1 --num-iters "$iters" -tp 2 --threads 1 --compare tp,sp,async \
    --output-json "benches/results/$name-$2" 2>/dev/null | grep -E "^(== mode|Avg latency|50%|Rank|Avg latency .* / )"
done

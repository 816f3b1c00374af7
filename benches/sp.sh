#!/usr/bin/env bash
# Issue 4's sequence-parallel figures: tp=2 (one thread per rank), TP and TP + SP alternating
# iteration by iteration inside one job (`--compare tp,sp`), as a ratio of average latency, with
# each rank's activation memory (SP holds the residual stream and norms at 1/tp of the tokens).
# Llama-3.2-1B shape at 2048 tokens, the ~110M Llama at 8192 (the 1B takes minutes a pass there).
# Usage: benches/sp.sh [build-dir] [iterations]
set -euo pipefail
cd "$(dirname "$0")/.."
loom=${1:-build}/loom
iters=${2:-3}
for spec in "configs/llama-3.2-1b.json 2048" "configs/llama-100m.json 8192"; do
  set -- $spec
  echo "== $(basename "$1" .json), input $2, output 1, tp=2"
  "$loom" bench latency -m "$1" --load-format dummy --batch-size 1 --input-len "$2" --output-len 1 \
    --num-iters-warmup 1 --num-iters "$iters" -tp 2 --threads 1 --compare tp,sp 2>/dev/null |
    grep -E "^(== mode|Avg latency|50%|Rank)"
done

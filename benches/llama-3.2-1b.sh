#!/usr/bin/env bash
# Issue 2's single-rank figures for the Llama-3.2-1B shape (dummy weights, 2 threads), with the
# machine's sgemm rate and memory bandwidth measured in the same run, so each model figure can
# be read as a share of what the hardware allows. Usage: benches/llama-3.2-1b.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
loom=${1:-build}/loom
cfg=configs/llama-3.2-1b.json
common=(-m "$cfg" --load-format dummy --threads 2 --batch-size 1 --num-iters-warmup 1)
echo "== machine"; "$loom" bench machine --threads 2
for dtype in float32 bfloat16; do
  for len in 512 2048; do
    echo "== prefill $len, $dtype weights"
    "$loom" bench latency "${common[@]}" --dtype "$dtype" --input-len "$len" --output-len 1 --num-iters 3 | grep -E "^(Avg|Prefill|Memory|Rank)"
  done
  echo "== decode, $dtype weights (prompt 128, 64 new tokens)"
  "$loom" bench latency "${common[@]}" --dtype "$dtype" --input-len 128 --output-len 65 --num-iters 2 | grep -E "^(Decode|Memory|Rank)"
done

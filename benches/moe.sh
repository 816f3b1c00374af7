#!/usr/bin/env bash
# Issue 6's benchmark: the OLMoE-1B-7B shape (configs/olmoe-1b-7b.json, all 16 layers, bf16
# dummy weights: 13.9 GB), prefill of 512 and 2048 tokens, output 1. tp=1 with two threads,
# then tp=2 with one thread per rank and TP, TP + SP and async TP alternating in one job
# (`--compare`). `--profile` gives the time spent in the experts; the expert GEMM rate is the
# experts' FLOPs (tokens x top-k x 3 GEMMs x 2 x hidden x features per rank, per layer) over
# that time, beside the sgemm rate `loom bench machine` measures in the same run.
# Usage: [DTYPE=float32] [LAYERS=4] benches/moe.sh [build-dir] [iterations]; LAYERS keeps the
# first layers only (a copy of the config in /tmp), so that f32 experts fit in memory.
set -euo pipefail
cd "$(dirname "$0")/.."
loom=${1:-build}/loom
iters=${2:-2}
dtype=${DTYPE:-bfloat16}
layers=${LAYERS:-16}
cfg=$(mktemp --suffix=.json)
trap 'rm -f "$cfg"' EXIT
sed "s/\"num_hidden_layers\": 16/\"num_hidden_layers\": $layers/" configs/olmoe-1b-7b.json > "$cfg"
"$loom" bench machine | grep sgemm
# experts' GFLOP/s from a report: the profile's "moe" share of rank 0's time, per iteration
rate() {
  awk -v len="$1" -v tp="$2" -v iters="$iters" -v layers="$layers" '
    /^== mode/ { mode = $3 }
    /^Avg latency/ { print }
    /^time by op \(rank 0/ {
      total = $6; moe = 0
      for (i = 1; i <= NF; i++) if ($i == "moe") { moe = $(i + 1); sub("%", "", moe) }
      s = total * moe / 100 / iters
      flops = len * 8 * 6 * 2048 * 1024 / tp * layers
      printf "experts%s: %.2f s per pass, %.1f GFLOP/s\n", mode ? " (" mode ")" : "", s, flops / s / 1e9
    }'
}
for len in 512 2048; do
  common=(-m "$cfg" --load-format dummy --dtype "$dtype" --batch-size 1 --input-len "$len" --output-len 1
          --num-iters-warmup 1 --num-iters "$iters" --profile)
  echo "== OLMoE-1B-7B ($layers layers, $dtype), input $len, tp=1 (2 threads)"
  "$loom" bench latency "${common[@]}" 2>/dev/null | rate "$len" 1
  echo "== OLMoE-1B-7B ($layers layers, $dtype), input $len, tp=2 (1 thread per rank)"
  "$loom" bench latency "${common[@]}" -tp 2 --threads 1 --compare tp,sp,async 2>/dev/null | rate "$len" 2
done

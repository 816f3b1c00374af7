#!/usr/bin/env bash
# Issue 26's figures: data parallelism on shm, one thread a rank.
#   1. The OLMoE-1B-7B shape (configs/olmoe-1b-7b.json, its first LAYERS layers, bf16 dummy
#      weights) on four ranks in six layouts: -tp 4 (TP-MoE), -tp 4 -ep, -tp 2 -dp 2 -ep,
#      -tp 2 -dp 2 -ep -sp (--sp-min-tokens 0), and -tp 2 -dp 2 without and with -sp (TP-MoE
#      across the replicas). For each, `bench latency` at a batch of BATCH
#      requests (throughput) and of one (latency), INPUT tokens in and OUTPUT out; the report's
#      expert lines give the rows each rank received per MoE layer (the imbalance) and the
#      bytes between ranks. Layouts alternate round by round (ROUNDS), so host drift hits them
#      alike.
#   2. Placement by measured load on -tp 2 -dp 2 -ep: one run writes the expert load
#      (--save-expert-load), the next places the experts by it (--expert-load); the imbalance
#      lines before and after.
#   3. A dense model (configs/llama-3.2-1b.json, bf16 dummy) served at -dp 2 and at -tp 2 (one
#      thread a rank), DENSE_REQUESTS streaming requests at concurrency 16 (benches/serve.sh's
#      load generator, ENGINES=loom), output tok/s and latencies.
# Usage: [LAYERS=4] [ROUNDS=2] [PARTS="1 2 3"] [ORDER="tp4 ..."] benches/dp.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
loom=$build/loom
layers=${LAYERS:-4}
rounds=${ROUNDS:-2}
batch=${BATCH:-16} input=${INPUT:-128} output=${OUTPUT:-17}
cfg=/tmp/loom-olmoe-$layers.json
sed "s/\"num_hidden_layers\": 16/\"num_hidden_layers\": $layers/" configs/olmoe-1b-7b.json > "$cfg"
part() { [[ " ${PARTS:-1 2 3} " == *" $1 "* ]]; }
show() { grep -E "^(CPU|Avg latency|Prefill|Decode:|experts|  per layer)"; }
common=(-m "$cfg" --load-format dummy --dtype bfloat16 --threads 1 --num-iters-warmup 1 --num-iters 2
        --input-len "$input" --output-len "$output")
declare -A layout=([tp4]="-tp 4" [tp4-ep]="-tp 4 -ep" [tp2dp2-ep]="-tp 2 -dp 2 -ep"
                   [tp2dp2-ep-sp]="-tp 2 -dp 2 -ep -sp --sp-min-tokens 0" [tp2dp2]="-tp 2 -dp 2"
                   [tp2dp2-sp]="-tp 2 -dp 2 -sp --sp-min-tokens 0")
order=(${ORDER:-tp4 tp4-ep tp2dp2-ep tp2dp2-ep-sp tp2dp2 tp2dp2-sp})
"$loom" bench machine | grep -E "CPU|sgemm|read"
if part 1; then
  for r in $(seq "$rounds"); do
    for name in "${order[@]}"; do
      for b in "$batch" 1; do
        echo "== 1. round $r, $name (${layout[$name]}), OLMoE shape $layers layers, batch $b"
        # shellcheck disable=SC2086
        "$loom" bench latency "${common[@]}" ${layout[$name]} --batch-size "$b" 2>/dev/null | show
      done
    done
  done
fi
if part 2; then
  load=/tmp/loom-olmoe-$layers-load.json
  echo "== 2. -tp 2 -dp 2 -ep, contiguous placement (writing the expert load)"
  "$loom" bench latency "${common[@]}" -tp 2 -dp 2 -ep --batch-size "$batch" --save-expert-load "$load" 2>&1 | show
  echo "== 2. -tp 2 -dp 2 -ep, placed by that load"
  "$loom" bench latency "${common[@]}" -tp 2 -dp 2 -ep --batch-size "$batch" --expert-load "$load" 2>/dev/null | show
  "$loom" plan -m "$cfg" --load-format dummy -tp 2 -dp 2 -ep --expert-load "$load" | grep "placed by" | head -4
fi
if part 3; then
  for args in "-dp 2" "-tp 2"; do
    echo "== 3. llama-3.2-1b shape served at $args, concurrency 16"
    ENGINES=loom CONCURRENCY=16 REQUESTS=${DENSE_REQUESTS:-16} LONG_PROMPT=0 THREADS=1 LOOM_ARGS="$args" \
      benches/serve.sh "$loom" 2>&1 | grep -E "^\| (engine|loom)" || true
  done
fi

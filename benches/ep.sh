#!/usr/bin/env bash
# Issue 15's figures: expert parallelism against TP-MoE at 2 ranks (one thread each) on the
# OLMoE-1B-7B shape (configs/olmoe-1b-7b.json, bf16 dummy weights), its first LAYERS layers
# (default 8: each rank materialises the dummy experts both modes read, and 16 layers of them
# twice over would not fit 24 GiB).
#   1. shm: TP-MoE (tp), EP (ep) and EP with SP (ep-sp) alternating in one job
#      (`--compare tp,ep,ep-sp`), at prefill 512, prefill 2048 and decode (input 128, 32 steps);
#      each report gives the latency, the experts' GEMM rate on rank 0, and under EP the rows
#      each rank received per MoE layer (the imbalance) and the bytes between ranks.
#   2. (root) over MPI across two network namespaces at 1 Gbit/s (benches/netns-mpi.sh with
#      JOBS): TP-MoE against EP, with and without SP, at prefill 512 and at decode, alternating
#      job by job, with the link's bytes.
# TP-MoE's bytes per MoE layer are its all-reduce (plain TP) or all-gather + reduce-scatter (SP)
# of T x hidden floats; EP's are counted by the engine (dispatch and combine, both ways).
# Usage: [LAYERS=8] [PARTS="1 2"] [ROUNDS=2] benches/ep.sh [build-dir] [iterations]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
loom=$build/loom
iters=${2:-2}
layers=${LAYERS:-8}
cfg=/tmp/loom-olmoe-$layers.json
sed "s/\"num_hidden_layers\": 16/\"num_hidden_layers\": $layers/" configs/olmoe-1b-7b.json > "$cfg"
part() { [[ " ${PARTS:-1 2} " == *" $1 "* ]]; }
"$loom" bench machine | grep sgemm
show() { grep -E "^(CPU|== mode|Avg latency|Prefill|Decode:|Rank|experts|  per layer)"; }
common=(-m "$cfg" --load-format dummy --dtype bfloat16 -tp 2 --threads 1 --batch-size 1 --num-iters-warmup 1
        --num-iters "$iters" --compare tp,ep,ep-sp)
part 1 && for len in 512 2048; do
  echo "== 1. shm, OLMoE-1B-7B shape ($layers layers, bf16), prefill $len, output 1"
  "$loom" bench latency "${common[@]}" --input-len "$len" --output-len 1 2>/dev/null | show
done
part 1 && echo "== 1. shm, decode: input 128, output 33 (32 steps of one token)"
part 1 && "$loom" bench latency "${common[@]}" --input-len 128 --output-len 33 2>/dev/null | show
if part 2; then
  echo "== 2. MPI across two network namespaces at 1 Gbit/s"
  # SP from the first token (--sp-min-tokens 0): the default 1024 would run a 512-token pass as plain TP
  dt="--dtype bfloat16" sp="-sp --sp-min-tokens 0" dec="--input-len 128 --output-len 17"
  CONFIG=$cfg LEN=512 ROUNDS=${ROUNDS:-2} WARMUP=1 ITERS=$iters \
    JOBS="tp-moe prefill 512:$dt;ep prefill 512:$dt -ep;tp-moe+sp prefill 512:$dt $sp;ep+sp prefill 512:$dt $sp -ep;tp-moe decode:$dt $dec;ep decode:$dt -ep $dec" \
    benches/netns-mpi.sh "$build" 1gbit
fi

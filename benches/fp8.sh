#!/usr/bin/env bash
# Issue 27's FP8 figures on one machine, dummy weights at real shapes: the same model as bf16
# (as the checkpoint ships, bf16 activations), int8 (-q int8, int8 activations), FP8 (RedHatAI's
# FP8 config: E4M3 weights, exact fp32 activations) and FP8 W8A8 (--fp8-activations), each
# run in turn within a round so that they share the machine's state; decode tokens/s (batch 1,
# 32 new tokens after 16) and prefill of 512 and 2048 tokens, at tp=1 (2 threads) and tp=2 with
# async TP (one thread a rank). Usage: benches/fp8.sh [build-dir]
# Environment: MODEL (llama-3.2-1b; llama-3.1-8b runs decode only unless LENS is set), ROUNDS
# (2), LENS (prefill lengths, "512 2048"), TPS ("1 2").
set -euo pipefail
cd "$(dirname "$0")/.."
loom=${1:-build}/loom
model=${MODEL:-llama-3.2-1b}
rounds=${ROUNDS:-2}
lens=${LENS-512 2048}
[ "$model" = llama-3.2-1b ] || lens=${LENS-}
cfg() { echo "configs/$model$([ "$1" = fp8 ] || [ "$1" = w8a8 ] && echo -fp8).json"; }
args() { case $1 in int8) echo "-q int8" ;; w8a8) echo "--fp8-activations" ;; *) echo "" ;; esac; }
# one bench latency: format, tp, input, output -> its report
run() {
  local fmt=$1 tp=$2 threads=$((2 / $2)) par=""
  [ "$tp" = 1 ] || par="-tp $tp --enable-async-tp"
  # shellcheck disable=SC2046,SC2086
  "$loom" bench latency -m "$(cfg "$fmt")" --load-format dummy --batch-size 1 --num-iters-warmup 1 --num-iters 2 \
    --threads "$threads" $par $(args "$fmt") --input-len "$3" --output-len "$4" 2>/dev/null
}
rate() { awk -v k="$1" '$1 == k {for (i = 2; i <= NF; i++) if ($i == "tok/s") print $(i - 1)}'; }
echo "== $model, $(nproc) cores; $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
"$loom" bench latency -m configs/llama-100m.json --load-format dummy --input-len 4 --output-len 1 --num-iters 1 \
  --num-iters-warmup 0 2>/dev/null | grep -m1 '^CPU:'
for r in $(seq "$rounds"); do
  for tp in ${TPS:-1 2}; do
    for fmt in bf16 int8 fp8 w8a8; do
      dec=$(run $fmt "$tp" 16 33 | rate Decode:)
      line="round $r tp=$tp $fmt: decode $dec tok/s"
      for len in $lens; do
        [ "$tp" = 2 ] && [ "$len" = 2048 ] && continue
        pre=$(run $fmt "$tp" "$len" 1 | rate Prefill:)
        line+=", prefill $len $pre tok/s"
      done
      echo "$line"
    done
  done
done

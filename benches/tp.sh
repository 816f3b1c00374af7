#!/usr/bin/env bash
# Issue 3's tensor-parallel figures on the Llama-3.2-1B shape (dummy bf16 weights, as the
# checkpoint ships): tp=2 with one thread per rank against tp=1 with two threads, run
# alternately in one session, as ratios of average latency; per-rank peak memory and the share
# of time in collectives; then the collective wait strategy (spin before sleeping) at decode,
# where collectives are most frequent. Usage: benches/tp.sh [build-dir] [iterations]
# Environment: LOOM_ARGS (extra loom arguments, e.g. "-q int4 --quantize-lm-head"), LENS
# (input lengths, default "512 2048"), SPINS (--comm-spin values; "" skips that part).
set -euo pipefail
cd "$(dirname "$0")/.."
loom=${1:-build}/loom
iters=${2:-2}
cfg=configs/llama-3.2-1b.json
# shellcheck disable=SC2086
run() { "$loom" bench latency -m "$cfg" --load-format dummy --batch-size 1 --num-iters-warmup 1 --num-iters "$iters" \
  ${LOOM_ARGS:-} "$@" 2>/dev/null; }
avg() { awk '/^Avg latency/ {print $3}'; }
for len in ${LENS:-512 2048}; do
  for out in 1 32; do
    t1=$(run --input-len "$len" --output-len "$out" -tp 1 --threads 2 | tee /tmp/loom-tp1.txt | avg)
    t2=$(run --input-len "$len" --output-len "$out" -tp 2 --threads 1 | tee /tmp/loom-tp2.txt | avg)
    printf "input %4d output %2d: tp=1 (2 threads) %.3f s, tp=2 (1 thread/rank) %.3f s, tp2/tp1 = %s\n" \
      "$len" "$out" "$t1" "$t2" "$(awk "BEGIN {printf \"%.3f\", $t2 / $t1}")"
    grep -h "^Rank" /tmp/loom-tp1.txt | sed 's/^/    tp=1 /'
    grep -h "^Rank" /tmp/loom-tp2.txt | sed 's/^/    tp=2 /'
  done
done
[ -n "${SPINS-x}" ] || exit 0
echo "== collective wait strategy at decode (tp=2, input 128, 32 new tokens)"
for spin in ${SPINS:-0 2000 100000000}; do
  t=$(run --input-len 128 --output-len 33 -tp 2 --threads 1 --comm-spin "$spin" | tee /tmp/loom-spin.txt | avg)
  printf "  --comm-spin %-9s avg latency %.3f s; %s\n" "$spin" "$t" "$(grep -h '^Decode' /tmp/loom-spin.txt)"
done

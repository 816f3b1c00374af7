#!/usr/bin/env bash
# Issue 3's tensor-parallel figures on the Llama-3.2-1B shape (dummy bf16 weights, as the
# checkpoint ships): tp=2 with one thread per rank against tp=1 with two threads, run
# alternately in one session, as ratios of average latency; per-rank peak memory and the share
# of time in collectives; then the collective wait strategy (spin before sleeping) at decode,
# where collectives are most frequent. First, the machine alone (benches/stream_ranks.c): memory
# streamed by two threads of one process against two processes, pinned or not. Each tp=2 run is
# repeated under each --cpu-bind of BINDS. Usage: benches/tp.sh [build-dir] [iterations]
# Environment: LOOM_ARGS (extra loom arguments, e.g. "-q int4 --quantize-lm-head"), LENS
# (input lengths, default "512 2048"), OUTS (new tokens, default "1 32"), BINDS (default
# "auto none"), SPINS (--comm-spin values; "" skips that part).
set -euo pipefail
cd "$(dirname "$0")/.."
loom=${1:-build}/loom
iters=${2:-2}
cfg=configs/llama-3.2-1b.json
echo "== $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) (family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2- | tr -d ' '), model $(grep -m1 '^model\s' /proc/cpuinfo | cut -d: -f2- | tr -d ' ')); $(nproc) cores"
cc -O2 -o "${1:-build}/stream_ranks" benches/stream_ranks.c -lpthread
echo "== the machine alone: 2 x 256 MiB, 10 passes"
"${1:-build}/stream_ranks" 2 256 10
# shellcheck disable=SC2086
run() { "$loom" bench latency -m "$cfg" --load-format dummy --batch-size 1 --num-iters-warmup 1 --num-iters "$iters" \
  ${LOOM_ARGS:-} "$@" 2>/dev/null; }
avg() { awk '/^Avg latency/ {print $3}'; }
for len in ${LENS:-512 2048}; do
  for out in ${OUTS:-1 32}; do
    t1=$(run --input-len "$len" --output-len "$out" -tp 1 --threads 2 | tee /tmp/loom-tp1.txt | avg)
    for bind in ${BINDS:-auto none}; do
      t2=$(run --input-len "$len" --output-len "$out" -tp 2 --threads 1 --cpu-bind "$bind" | tee /tmp/loom-tp2.txt | avg)
      printf "input %4d output %2d: tp=1 (2 threads) %.3f s, tp=2 (1 thread/rank, --cpu-bind %s) %.3f s, tp2/tp1 = %s\n" \
        "$len" "$out" "$t1" "$bind" "$t2" "$(awk "BEGIN {printf \"%.3f\", $t2 / $t1}")"
      grep -h "^Rank" /tmp/loom-tp2.txt | sed 's/^/    tp=2 /'
    done
    grep -h "^Rank" /tmp/loom-tp1.txt | sed 's/^/    tp=1 /'
  done
done
[ -n "${SPINS-x}" ] || exit 0
echo "== collective wait strategy at decode (tp=2, input 128, 32 new tokens)"
for spin in ${SPINS:-0 2000 100000000}; do
  t=$(run --input-len 128 --output-len 33 -tp 2 --threads 1 --comm-spin "$spin" | tee /tmp/loom-spin.txt | avg)
  printf "  --comm-spin %-9s avg latency %.3f s; %s\n" "$spin" "$t" "$(grep -h '^Decode' /tmp/loom-spin.txt)"
done

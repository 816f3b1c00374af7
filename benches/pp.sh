#!/usr/bin/env bash
# Issue 14's pipeline-parallel figures on the Llama-3.2-1B shape (dummy bf16 weights, as the
# checkpoint ships), in one job so the rows share the machine's state:
#   1. memory per rank: peak RSS at tp=1, tp=2 and pp=2 (one short pass each);
#   2. latency: prefill of 2048 tokens at pp=2 against tp=2, alternating job by job;
#   3. throughput: a batch of 8 x 512 tokens at pp=2 with microbatches (the default split)
#      against without (--pp-microbatches 1), alternating, with each stage's bubble;
#   4. across a network: pp=2 against tp=2 over MPI at 1 Gbit/s with the bytes on the link, at
#      batch 1 x 2048 and 8 x 512 (benches/netns-mpi.sh with JOBS; root, PP_NETNS=1).
# The 2 cores make every layout 2 ranks of one thread.
# Usage: [PARTS="1 2 3 4"] benches/pp.sh [build-dir] [rounds] (part 4 also needs PP_NETNS=1)
set -euo pipefail
cd "$(dirname "$0")/.."
loom=${1:-build}/loom
rounds=${2:-2}
cfg=configs/llama-3.2-1b.json
# shellcheck disable=SC2086
bench() { "$loom" bench latency -m "$cfg" --load-format dummy --threads 1 --num-iters-warmup 1 "$@" 2>/dev/null; }
avg() { awk '/^Avg latency/ {print $3}'; }
"$loom" bench latency -m "$cfg" --load-format dummy --input-len 1 --output-len 1 --num-iters 1 --num-iters-warmup 0 \
  2>/dev/null | grep '^CPU'

part() { [[ " ${PARTS:-1 2 3 4} " == *" $1 "* ]]; }

part 1 && echo "== 1. memory per rank (input 128, output 1)"
part 1 && for layout in "-tp 1 --threads 2" "-tp 2" "-pp 2"; do
  # shellcheck disable=SC2086
  bench --input-len 128 --output-len 1 --batch-size 1 --num-iters 1 $layout | grep '^Rank' | sed "s/^/  $layout: /"
done

part 2 && echo "== 2. prefill of 2048 tokens, batch 1: pp=2 against tp=2, alternating ($rounds rounds of 2 iterations)"
part 2 && for r in $(seq "$rounds"); do
  t_tp=$(bench --input-len 2048 --output-len 1 --batch-size 1 --num-iters 2 -tp 2 | avg)
  t_pp=$(bench --input-len 2048 --output-len 1 --batch-size 1 --num-iters 2 -pp 2 --profile | tee /tmp/loom-pp-lat.txt | avg)
  printf "  round %d: tp=2 %.3f s, pp=2 %.3f s, pp/tp = %s; %s\n" "$r" "$t_tp" "$t_pp" \
    "$(awk "BEGIN {printf \"%.3f\", $t_pp / $t_tp}")" "$(grep -h '^Rank' /tmp/loom-pp-lat.txt | sed 's/.*stage/stage/' | paste -sd';')"
done

part 3 && echo "== 3. batch 8 x 512 tokens (one prefill pass of 4096): pp=2 with microbatches against without"
part 3 && for r in $(seq "$rounds"); do
  t_one=$(bench --input-len 512 --output-len 1 --batch-size 8 --num-iters 2 -pp 2 --pp-microbatches 1 | tee /tmp/loom-pp-one.txt | avg)
  t_mb=$(bench --input-len 512 --output-len 1 --batch-size 8 --num-iters 2 -pp 2 | tee /tmp/loom-pp-mb.txt | avg)
  t_tp=$(bench --input-len 512 --output-len 1 --batch-size 8 --num-iters 2 -tp 2 | avg)
  printf "  round %d: 1 microbatch %.3f s (%.0f tok/s), default split %.3f s (%.0f tok/s), tp=2 %.3f s (%.0f tok/s); with/without = %s\n" \
    "$r" "$t_one" "$(awk "BEGIN {print 4096 / $t_one}")" "$t_mb" "$(awk "BEGIN {print 4096 / $t_mb}")" \
    "$t_tp" "$(awk "BEGIN {print 4096 / $t_tp}")" "$(awk "BEGIN {printf \"%.3f\", $t_mb / $t_one}")"
  echo "    without: $(grep -h '^Rank' /tmp/loom-pp-one.txt | sed 's/.*stage/stage/' | paste -sd';')"
  echo "    with:    $(grep -h '^Rank' /tmp/loom-pp-mb.txt | sed 's/.*stage/stage/' | paste -sd';')"
done

if part 4 && [ "${PP_NETNS:-0}" = 1 ]; then
  echo "== 4. across a 1 Gbit/s link (two network namespaces, one MPI rank each): pp=2 against tp=2"
  JOBS='tp=2:-tp 2;pp=2:-pp 2' ROUNDS=$rounds benches/netns-mpi.sh "$(dirname "$loom")" 1gbit
  echo "== 4b. the same link, a batch of 8 x 512 tokens (pp=2 in microbatches)"
  JOBS='tp=2 batch 8x512:-tp 2 --batch-size 8 --input-len 512;pp=2 batch 8x512:-pp 2 --batch-size 8 --input-len 512' \
    ITERS=1 benches/netns-mpi.sh "$(dirname "$loom")" 1gbit
fi

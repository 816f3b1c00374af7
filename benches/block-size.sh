#!/usr/bin/env bash
# The KV cache's block size: `loom bench latency` at each --block-size, and optionally a loom
# built before the paged cache (contiguous KV per sequence) as the baseline, the runs taking
# turns round by round so drift on the machine hits them alike. Long prompts make attention's
# share of prefill and decode large enough to see what reading keys block by block costs.
#
# Usage: benches/block-size.sh [LOOM_BINARY] [BASELINE_BINARY]   (default build/loom, no baseline)
# Knobs (environment): SIZES="16 32 64 128 256"  ROUNDS=2  CONFIG=configs/llama-100m.json
#   INPUT=2048 OUTPUT=64 BATCH=4 THREADS=2
# Prints a markdown table: block size, prefill tok/s and decode tok/s (median over the rounds),
# and each against the baseline (or against the largest block size without one).
set -euo pipefail
cd "$(dirname "$0")/.."
loom=${1:-build/loom}
base=${2:-}
SIZES=${SIZES:-"16 32 64 128 256"}
ROUNDS=${ROUNDS:-2}
CONFIG=${CONFIG:-configs/llama-100m.json}
INPUT=${INPUT:-2048} OUTPUT=${OUTPUT:-64} BATCH=${BATCH:-4} THREADS=${THREADS:-2}
[ -x "$loom" ] || { echo "block-size.sh: no loom binary at $loom" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run() { # label binary [flags...]: one bench latency run, its prefill and decode tok/s appended to $out/label
  local label=$1 bin=$2
  shift 2
  "$bin" bench latency -m "$CONFIG" --load-format dummy -t "$THREADS" --input-len "$INPUT" --output-len "$OUTPUT" \
    --batch-size "$BATCH" --num-iters 2 --num-iters-warmup 1 --max-model-len $((INPUT + OUTPUT)) "$@" 2>/dev/null |
    awk '/^Prefill:/ {p = $(NF-1)} /^Decode:/ {d = $5} END {print p, d}' >>"$out/$label"
}
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)
echo "CPU: $cpu; $CONFIG dummy weights, input $INPUT, output $OUTPUT, batch $BATCH, $THREADS threads, $ROUNDS rounds" >&2
for r in $(seq "$ROUNDS"); do
  [ -n "$base" ] && run base "$base"
  for bs in $SIZES; do run "$bs" "$loom" --block-size "$bs"; done
  echo "round $r done" >&2
done
median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
ref=${base:+base}
ref=${ref:-$(echo "$SIZES" | tr ' ' '\n' | tail -1)}
rp=$(cut -d' ' -f1 "$out/$ref" | median) rd=$(cut -d' ' -f2 "$out/$ref" | median)
echo "| block size | prefill tok/s | decode tok/s | prefill vs $ref | decode vs $ref |"
echo "|---|---|---|---|---|"
for label in ${base:+base} $SIZES; do
  p=$(cut -d' ' -f1 "$out/$label" | median) d=$(cut -d' ' -f2 "$out/$label" | median)
  awk -v l="$label" -v p="$p" -v d="$d" -v rp="$rp" -v rd="$rd" \
    'BEGIN {printf "| %s | %.1f | %.2f | %.3f | %.3f |\n", l == "base" ? "contiguous (before paging)" : l, p, d, p / rp, d / rd}'
done

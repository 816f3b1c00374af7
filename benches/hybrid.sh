#!/usr/bin/env bash
# Hybrid recurrent models (issue 44): prefill and decode of a hybrid shape at tp=1 and tp=2, and
# a prompt run a second time, resumed from the recurrent state's snapshot (prefix caching on),
# against the same prompt prefilled whole (--no-enable-prefix-caching). `loom bench latency`
# on CONFIG with bf16 dummy weights; the rows take turns, REPS rounds, and each keeps its best
# (these machines are noisy).
#
# Usage: benches/hybrid.sh [LOOM_BINARY|BUILD_DIR]   (default build/loom; built if missing)
#
# Knobs: CONFIG=configs/qwen3-next-80b-a3b-4layers.json, INPUT=512, GEN=32 (decode steps),
# REPS=2, THREADS=2 (the machine's cores: tp=2 runs one thread a rank), RESULTS=build-bench/hybrid-<date>.
# Prints a markdown table with the CPU and loom's kernel variant.
set -euo pipefail
{
cd "$(dirname "$0")/.."
root=$PWD
. benches/common.sh

loom=${1:-build/loom}
[ -d "$loom" ] && loom=${loom%/}/loom
CONFIG=${CONFIG:-$root/configs/qwen3-next-80b-a3b-4layers.json}
INPUT=${INPUT:-512}
GEN=${GEN:-32}
REPS=${REPS:-2}
THREADS=${THREADS:-2}
RESULTS=${RESULTS:-$root/build-bench/hybrid-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$RESULTS"
loom_prepare

echo "model: $(basename "$CONFIG"), bf16 dummy weights; prompt $INPUT, then $GEN decode steps" | bench_info

common=(bench latency -m "$CONFIG" --load-format dummy --batch-size 1 --input-len "$INPUT" --num-iters-warmup 0
  --num-iters 1)
declare -A pre dec secs hits
keep_best() { # array name, key, value: the larger
  local -n a=$1
  if [ -z "${a[$2]:-}" ] || awk -v x="$3" -v y="${a[$2]}" 'BEGIN { exit !(x > y) }'; then a[$2]=$3; fi
}
rows=("tp=1" "tp=2" "repeat, snapshot" "repeat, no cache")
for round in $(seq "$REPS"); do
  for row in "${rows[@]}"; do
    phase "round $round: $row"
    case $row in
    tp=1) args=(--threads "$THREADS" --output-len $((GEN + 1))) ;;
    tp=2) args=(-tp 2 --threads $((THREADS / 2 > 0 ? THREADS / 2 : 1)) --output-len $((GEN + 1))) ;;
    "repeat, snapshot") args=(--threads "$THREADS" --output-len 1 --repeat-prompts) ;;
    "repeat, no cache") args=(--threads "$THREADS" --output-len 1 --repeat-prompts --no-enable-prefix-caching) ;;
    esac
    out=$RESULTS/${row//[ ,=]/_}-$round.txt
    "$loom" "${common[@]}" "${args[@]}" >"$out" 2>&1 || { tail -5 "$out" >&2; die "loom bench ($row) failed"; }
    p=$(sed -n 's/^Prefill: .*, \([0-9.]*\) tok\/s.*/\1/p' "$out" | head -1)
    if [ -z "${pre[$row]:-}" ] || awk -v x="$p" -v y="${pre[$row]}" 'BEGIN { exit !(x > y) }'; then
      secs[$row]=$(sed -n 's/^Prefill: \([0-9.]*\) s avg.*/\1/p' "$out" | head -1)
      hits[$row]=$(sed -n 's/^Prefix cache: \([0-9]*\) of the .*/\1/p' "$out" | head -1)
    fi
    keep_best pre "$row" "$p"
    d=$(sed -n 's/^Decode: .*, \([0-9.]*\) tok\/s.*/\1/p' "$out" | head -1)
    [ -z "$d" ] || keep_best dec "$row" "$d"
    phase_end "$row"
  done
done

table=("| run | prompt positions run | prefill s (TTFT) | prompt tok/s | decode tok/s | prefill vs tp=1 |"
  "|---|---|---|---|---|---|")
for row in "${rows[@]}"; do
  p=${pre[$row]} d=${dec[$row]:--} h=${hits[$row]:-0}
  table+=("| $row | $((INPUT - h)) | ${secs[$row]} | $p | $d | $(awk -v a="$p" -v b="${pre[tp=1]}" 'BEGIN { printf "%.2fx", a / b }') |")
done
printf '%s\n' "${table[@]}" | tee "$RESULTS/report.md"
exit 0
}

#!/usr/bin/env bash
# The KV cache's dtypes at long context (issue 45): decode after a CTX-token prompt, where every
# step reads the whole cache beside the weights. `loom bench latency --kv-cache-dtype T` for each
# of DTYPES, and llama.cpp's `llama-bench -fa 1 -ctk C -ctv C -d CTX` on the same GGUF for each of
# LLAMA_TYPES (llama.cpp quantizes V only with flash attention); the configurations take turns,
# REPS rounds, and each row keeps its best round (these machines are noisy).
#
# Usage: benches/kv-cache-dtype.sh [LOOM_BINARY|BUILD_DIR]   (default build/loom; built if missing)
#
# Knobs: GGUF=FILE (default build-bench/gguf/llama-3.2-1b-random-Q4_K_M.gguf, which
# benches/gguf.sh writes), CTX=4096, GEN=32 (decode steps), REPS=2, THREADS=2,
# DTYPES="float32 bfloat16 fp8 int8", LLAMA_TYPES="f16 q8_0", RESULTS=build-bench/kv-<date>;
# BEFORE=BINARY adds another loom build's rows (BEFORE_DTYPES, default "float32 int8") to the turns.
# Prints a markdown table (decode tokens/s, KV bytes a token, and each against loom's float32
# and llama.cpp's f16) with the CPU, loom's kernel variant and llama.cpp's build.
set -euo pipefail
{
cd "$(dirname "$0")/.."
root=$PWD
. benches/common.sh

loom=${1:-build/loom}
[ -d "$loom" ] && loom=${loom%/}/loom
GGUF=${GGUF:-$root/build-bench/gguf/llama-3.2-1b-random-Q4_K_M.gguf}
CTX=${CTX:-4096}
GEN=${GEN:-32}
REPS=${REPS:-2}
THREADS=${THREADS:-2}
DTYPES=${DTYPES:-float32 bfloat16 fp8 int8}
LLAMA_TYPES=${LLAMA_TYPES:-f16 q8_0}
bench=$root/build-bench
RESULTS=${RESULTS:-$bench/kv-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$bench" "$RESULTS"
[ -s "$GGUF" ] || die "$GGUF: no such file (benches/gguf.sh writes it; or set GGUF=FILE)"

loom_prepare
llama_cpp_source
build_llama "$bench/llama-cpu" "CPU"
llama=$bench/llama-cpu
gguf_venv

{
  echo "file: $(basename "$GGUF"); context: $CTX, then $GEN decode steps"
  echo "llama.cpp: $llama_version"
  [ -z "${BEFORE:-}" ] || echo "before: $BEFORE"
} | bench_info

declare -A best bytes
keep_best() { # key, tok/s
  if [ -z "${best[$1]:-}" ] || awk -v a="$2" -v b="${best[$1]}" 'BEGIN { exit !(a > b) }'; then best[$1]=$2; fi
}
for round in $(seq "$REPS"); do
  for t in $DTYPES; do
    phase "round $round: loom --kv-cache-dtype $t"
    out=$RESULTS/loom-$t-$round.txt
    "$loom" bench latency -m "$GGUF" --threads "$THREADS" --batch-size 1 --input-len "$CTX" \
      --output-len $((GEN + 1)) --num-iters-warmup 0 --num-iters 1 --kv-cache-dtype "$t" >"$out" 2>&1 \
      || { tail -5 "$out" >&2; die "loom bench latency --kv-cache-dtype $t failed"; }
    keep_best "loom $t" "$(sed -n 's/^Decode: .*, \([0-9.]*\) tok\/s.*/\1/p' "$out" | head -1)"
    bytes[loom $t]=$(sed -n 's/.*, \([0-9]*\) bytes per token).*/\1/p' "$out" | head -1)
    phase_end "loom $t"
  done
  for t in ${BEFORE:+${BEFORE_DTYPES:-float32 int8}}; do
    phase "round $round: loom before, --kv-cache-dtype $t"
    out=$RESULTS/before-$t-$round.txt
    dtype=(--kv-cache-dtype "$t")
    [ "$t" != float32 ] || dtype=() # a build from before the flag
    "$BEFORE" bench latency -m "$GGUF" --threads "$THREADS" --batch-size 1 --input-len "$CTX" \
      --output-len $((GEN + 1)) --num-iters-warmup 0 --num-iters 1 "${dtype[@]}" >"$out" 2>&1 \
      || { tail -5 "$out" >&2; die "$BEFORE bench latency --kv-cache-dtype $t failed"; }
    keep_best "before $t" "$(sed -n 's/^Decode: .*, \([0-9.]*\) tok\/s.*/\1/p' "$out" | head -1)"
    bytes[before $t]=$(sed -n 's/.*, \([0-9]*\) bytes per token).*/\1/p' "$out" | head -1)
    phase_end "before $t"
  done
  for t in $LLAMA_TYPES; do
    phase "round $round: llama-bench -ctk $t -ctv $t"
    out=$RESULTS/llama-$t-$round
    "$llama/bin/llama-bench" -m "$GGUF" -t "$THREADS" -r 1 -p 0 -n "$GEN" -d "$CTX" -fa 1 -ctk "$t" -ctv "$t" \
      -o json >"$out.json" 2>"$out.log" || { tail -5 "$out.log" >&2; die "llama-bench -ctk $t failed"; }
    keep_best "llama.cpp $t" "$("$py" -c 'import json, sys; print("%.2f" % json.load(open(sys.argv[1]))[0]["avg_ts"])' "$out.json")"
    phase_end "llama.cpp $t"
  done
done

first_loom=${DTYPES%% *} first_llama=${LLAMA_TYPES%% *}
table=("| engine | KV cache | KV bytes a token | decode tok/s at $CTX | vs loom $first_loom | vs llama.cpp $first_llama |"
  "|---|---|---|---|---|---|")
for key in $(for t in $DTYPES; do echo "loom_$t"; done) \
  $(for t in ${BEFORE:+${BEFORE_DTYPES:-float32 int8}}; do echo "before_$t"; done) \
  $(for t in $LLAMA_TYPES; do echo "llama.cpp_$t"; done); do
  k=${key/_/ }
  v=${best[$k]}
  table+=("| ${k% *} | ${k#* } | ${bytes[$k]:--} | $v | $(awk -v a="$v" -v b="${best[loom $first_loom]}" 'BEGIN { printf "%.2fx", a / b }') | $(awk -v a="$v" -v b="${best[llama.cpp $first_llama]}" 'BEGIN { printf "%.2fx", a / b }') |")
done
printf '%s\n' "${table[@]}" | tee "$RESULTS/report.md"
exit 0
}

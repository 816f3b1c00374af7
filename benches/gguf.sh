#!/usr/bin/env bash
# loom and llama.cpp on the same GGUF files (issue 43): `loom bench latency -m FILE.gguf` against
# `llama-bench -m FILE.gguf`, the two taking turns on each row; and the wall time of loading the
# file and computing a one-token pass (`loom bench latency --input-len 1 --num-iters 1` against
# `llama-bench -p 1 -n 0 -r 1`, each with its own warm-up), the page cache warm for both.
#
# Usage: benches/gguf.sh [LOOM_BINARY|BUILD_DIR]   (default build/loom; built if missing)
#
# Files (GGUFS, space-separated; default below): each is run as it is. The default set:
#   - Gemma 3 270M Q4_K_M as published (tests/gemma3_real.py's download, ~/.cache/loom-tests),
#     when it is there;
#   - each shape of SHAPES (configs/NAME.json; default the Llama-3.2-1B shape, llama-3.2-1b) with
#     random weights, written in BF16 by benches/make_gguf.py and quantized by llama.cpp's own
#     llama-quantize to Q4_K_M, Q6_K, Q8_0 and IQ4_XS (QUANTS), in build-bench/gguf/. An MoE row:
#     SHAPES=olmoe-1b-7b QUANTS=Q4_K_M (OLMoE-1B-7B's shape, its experts stacked per projection).
#
# Knobs: ROWS="pp512 tg64", REPS=2, THREADS=2, DECODE_CTX=16, QUANTS="Q4_K_M Q6_K Q8_0 IQ4_XS",
# SHAPES="llama-3.2-1b", GGUFS="FILE ...", RESULTS=build-bench/gguf-<date>.
# Prints a markdown table (tokens/s of each, and loom / llama.cpp) with the CPU, loom's kernel
# variant and llama.cpp's build; raw outputs stay in RESULTS.
set -euo pipefail
{
cd "$(dirname "$0")/.."
root=$PWD
. benches/common.sh

loom=${1:-build/loom}
[ -d "$loom" ] && loom=${loom%/}/loom
ROWS=${ROWS:-pp512 tg64}
REPS=${REPS:-2}
THREADS=${THREADS:-2}
DECODE_CTX=${DECODE_CTX:-16}
QUANTS=${QUANTS:-Q4_K_M Q6_K Q8_0 IQ4_XS}
bench=$root/build-bench
RESULTS=${RESULTS:-$bench/gguf-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$bench" "$RESULTS"
for r in $ROWS; do [[ $r =~ ^(pp|tg)[0-9]+$ ]] || die "ROWS: '$r' is not ppN or tgN"; done

loom_prepare
llama_cpp_source
build_llama "$bench/llama-cpu" "CPU"
# with AMX the native build is an AMX build, whose Q4_0/Q8_0 rows can crash (vs-llama-cpp.sh):
# the AVX-512 build is the peer there
llama=$bench/llama-cpu label="native"
if grep -qw amx_tile /proc/cpuinfo; then
  build_llama "$bench/llama-avx512" "AVX-512 without AMX" -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON \
    -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON \
    -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
  llama=$bench/llama-avx512 label="AVX-512, no AMX"
fi

gguf_venv
if [ -z "${GGUFS:-}" ]; then
  GGUFS=
  gemma=$HOME/.cache/loom-tests/gemma-3-270m-q4_k_m.gguf
  [ -s "$gemma" ] && GGUFS=$gemma
  for shape in ${SHAPES:-llama-3.2-1b}; do
    bf16=$bench/gguf/$shape-random-bf16.gguf
    gguf_write "configs/$shape.json" "$bf16"
    for q in $QUANTS; do
      f=$bench/gguf/$shape-random-$q.gguf
      if [ ! -s "$f" ]; then
        phase "llama-quantize $shape to $q"
        nice -n 10 "$llama/bin/llama-quantize" "$bf16" "$f.tmp" "$q" "$THREADS" >"$RESULTS/quantize-$shape-$q.log" 2>&1 \
          || { tail -20 "$RESULTS/quantize-$shape-$q.log" >&2; die "llama-quantize $shape $q failed"; }
        mv "$f.tmp" "$f"
        phase_end "llama-quantize $shape $q"
      fi
      GGUFS="$GGUFS $f"
    done
  done
fi

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
variant=$("$loom" bench machine --threads "$THREADS" 2>&1 | sed -n 's/.*kernels \([a-z0-9]*\).*/\1/p' | head -1)
{
  echo "date: $(date -Is)"
  echo "cpu: $cpu; loom kernels: ${variant:-?}; threads: $THREADS; reps: $REPS (+1 warm-up)"
  echo "llama.cpp: $llama_version, build: $label"
  echo "loom: git $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ', with uncommitted changes')"
} | tee "$RESULTS/info.txt" >&2

table=("| file | row | loom | llama.cpp | loom / llama.cpp |" "|---|---|---|---|---|")
for f in $GGUFS; do
  name=$(basename "$f" .gguf)
  load=("$loom" bench latency -m "$f" --threads "$THREADS" --batch-size 1 --input-len 1 --output-len 1 \
    --num-iters-warmup 0 --num-iters 1)
  for i in 1 2; do "${load[@]}" >/dev/null 2>&1 || true; done # the page cache warm
  t0=$(date +%s.%N); "${load[@]}" >"$RESULTS/$name-load-loom.txt" 2>&1 \
    || die "loom bench latency -m $f failed: $(tail -3 "$RESULTS/$name-load-loom.txt")"
  loom_load=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
  t0=$(date +%s.%N); "$llama/bin/llama-bench" -m "$f" -t "$THREADS" -r 1 -p 1 -n 0 >"$RESULTS/$name-load-llama.txt" 2>&1 || true
  llama_load=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
  table+=("| $name | load + 1 token, s | $(printf %.2f "$loom_load") | $(printf %.2f "$llama_load") | $(awk -v a="$llama_load" -v b="$loom_load" 'BEGIN { printf "%.2fx the time", b / a }') |")
  for row in $ROWS; do
    n=${row#??}
    phase "$name $row"
    if [[ $row == pp* ]]; then largs=(--input-len "$n" --output-len 1) kind=Prefill bargs=(-p "$n" -n 0)
    else largs=(--input-len "$DECODE_CTX" --output-len $((n + 1))) kind=Decode bargs=(-p 0 -n "$n" -d "$DECODE_CTX"); fi
    out=$RESULTS/$name-$row
    "$loom" bench latency -m "$f" --threads "$THREADS" --batch-size 1 --num-iters-warmup 1 --num-iters "$REPS" \
      "${largs[@]}" >"$out-loom.txt" 2>&1 || { tail -5 "$out-loom.txt" >&2; die "loom bench latency failed on $f"; }
    lt=$(sed -n "s/^$kind: .*, \([0-9.]*\) tok\/s.*/\1/p" "$out-loom.txt" | head -1)
    "$llama/bin/llama-bench" -m "$f" -t "$THREADS" -r "$REPS" "${bargs[@]}" -o json >"$out-llama.json" 2>"$out-llama.log" \
      || { tail -5 "$out-llama.log" >&2; die "llama-bench failed on $f"; }
    ct=$("$py" -c 'import json, sys; print("%.2f" % json.load(open(sys.argv[1]))[0]["avg_ts"])' "$out-llama.json")
    echo "   loom $lt tok/s, llama.cpp $ct tok/s" >&2
    table+=("| $name | $row | $lt | $ct | $(awk -v a="$lt" -v b="$ct" 'BEGIN { printf "%.2fx", a / b }') |")
    phase_end "$name $row"
  done
done
printf '%s\n' "${table[@]}" | tee "$RESULTS/report.md"
exit 0
}

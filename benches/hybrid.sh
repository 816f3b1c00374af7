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
# LLAMA=1: then the same cut in llama.cpp beside loom, on the same weights: random bf16 weights
# written as a Hugging Face folder (benches/make_hf_random.py: Qwen3-Next's checkpoint layout,
# build-bench/hf-<config>/), converted by llama.cpp's own convert_hf_to_gguf.py (through
# benches/hf_to_gguf.py, which writes no tokenizer; --outtype bf16 --no-mtp) into
# build-bench/<config>.bf16.gguf; llama-bench (the CPU build vs-llama-cpp.sh makes,
# build-bench/llama-cpu) runs -p INPUT -n GEN -t THREADS, and `loom bench latency` the folder,
# taking turns, REPS rounds (about 30 GB of disk; the converter runs in .venv, which
# scripts/test.sh makes, else in build-bench/venv-convert with torch, safetensors, transformers).
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

if [ "${LLAMA:-0}" = 1 ]; then
  bench=$root/build-bench
  llama_cpp_source
  build_llama "$bench/llama-cpu" "CPU"
  conv=$root/.venv/bin/python
  if ! "$conv" -c 'import torch, safetensors, transformers, tqdm' 2>/dev/null; then
    conv=$bench/venv-convert/bin/python
    if ! "$conv" -c 'import torch, safetensors, transformers, tqdm' 2>/dev/null; then
      phase "venv for llama.cpp's converter in $bench/venv-convert"
      python3 -m venv "$bench/venv-convert" || die "python3 -m venv failed"
      nice -n 10 "$bench/venv-convert/bin/pip" install -q torch==2.13.0 safetensors transformers==5.24.0 numpy tqdm \
        sentencepiece >"$bench/venv-convert.log" 2>&1 || die "pip install failed (log: $bench/venv-convert.log)"
      phase_end "converter venv"
    fi
  fi
  name=$(basename "$CONFIG" .json)
  folder=$bench/hf-$name gguf=$bench/$name.bf16.gguf
  if [ ! -s "$folder/model.safetensors.index.json" ]; then
    phase "random bf16 weights of $name into $folder"
    nice -n 10 "$conv" benches/make_hf_random.py "$CONFIG" "$folder" || die "make_hf_random.py failed"
    phase_end "weights"
  fi
  if [ ! -s "$gguf" ]; then
    phase "llama.cpp's converter: $folder -> $gguf"
    nice -n 10 "$conv" benches/hf_to_gguf.py "$lcpp" "$folder" --outtype bf16 --no-mtp --outfile "$gguf.tmp" \
      >"$RESULTS/convert.log" 2>&1 || { tail -5 "$RESULTS/convert.log" >&2; die "conversion failed"; }
    mv "$gguf.tmp" "$gguf"
    phase_end "conversion"
  fi
  echo "same weights: $folder (loom) and $gguf (llama.cpp: $llama_version)" | tee -a "$RESULTS/info.txt" >&2
  for round in $(seq "$REPS"); do
    phase "round $round: loom and llama.cpp on the same weights"
    out=$RESULTS/same-loom-$round.txt
    "$loom" bench latency -m "$folder" --batch-size 1 --input-len "$INPUT" --output-len $((GEN + 1)) \
      --num-iters-warmup 1 --num-iters 1 --threads "$THREADS" >"$out" 2>&1 || { tail -5 "$out" >&2; die "loom failed"; }
    keep_best pre "loom, same weights" "$(sed -n 's/^Prefill: .*, \([0-9.]*\) tok\/s.*/\1/p' "$out" | head -1)"
    keep_best dec "loom, same weights" "$(sed -n 's/^Decode: .*, \([0-9.]*\) tok\/s.*/\1/p' "$out" | head -1)"
    out=$RESULTS/same-llama-$round.json
    "$bench/llama-cpu/bin/llama-bench" -m "$gguf" -p "$INPUT" -n "$GEN" -t "$THREADS" -r 1 -o json >"$out" \
      2>"$out.log" || { tail -5 "$out.log" >&2; die "llama-bench failed"; }
    keep_best pre "llama.cpp, same weights" "$(python3 -c 'import json,sys; print("%.1f" % next(r["avg_ts"] for r in json.load(open(sys.argv[1])) if r["n_prompt"]))' "$out")"
    keep_best dec "llama.cpp, same weights" "$(python3 -c 'import json,sys; print("%.2f" % next(r["avg_ts"] for r in json.load(open(sys.argv[1])) if r["n_gen"]))' "$out")"
    phase_end "same weights"
  done
  for row in "loom, same weights" "llama.cpp, same weights"; do
    rows+=("$row")
    secs[$row]=$(awk -v p="${pre[$row]}" -v n="$INPUT" 'BEGIN { printf "%.2f", n / p }')
  done
fi

table=("| run | prompt positions run | prefill s (TTFT) | prompt tok/s | decode tok/s | prefill vs tp=1 |"
  "|---|---|---|---|---|---|")
for row in "${rows[@]}"; do
  p=${pre[$row]} d=${dec[$row]:--} h=${hits[$row]:-0}
  table+=("| $row | $((INPUT - h)) | ${secs[$row]} | $p | $d | $(awk -v a="$p" -v b="${pre[tp=1]}" 'BEGIN { printf "%.2fx", a / b }') |")
done
printf '%s\n' "${table[@]}" | tee "$RESULTS/report.md"
exit 0
}

#!/usr/bin/env bash
# Speculative decoding's benchmarks (issue 25), one job, every figure naming the CPU and the
# kernel variant (the report's first lines):
#  1. the verify cost: one target pass over k + 1 tokens of a sequence against a one-token pass,
#     on the 1B shape (bf16 dummy weights), at tp=1 and tp=2, k = 1..4 (the target as its own
#     draft, so every pass carries exactly k + 1 tokens; `loom bench latency` times the target's
#     passes apart from the draft's);
#  2. real acceptance: an Eagle3 head trained here for the embedded stories260K model
#     (benches/eagle3_train.py, from text the model generates itself), k = 2..5, at tp=1 and
#     -tp 2 with sequence parallelism, with the decode speed-up `loom bench latency` measures;
#  3. the draft's TP: the Eagle3 draft at the target's -tp 2 or whole on each rank;
#  4. n-gram lookup on a copy-heavy task: the model continuing a passage it was given twice.
# Usage: benches/spec.sh [out.txt]   (PY: a Python with torch, transformers and speculators'
# code, for the training; without it, an existing build-bench/eagle3-stories260K is used)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-benches/results/spec.txt}
loom=${LOOM:-build/loom}
head=build-bench/eagle3-stories260K
mkdir -p "$(dirname "$out")" build-bench
[ -x "$loom" ] || { echo "spec.sh: build loom first (scripts/build.sh)" >&2; exit 1; }
exec > >(tee "$out") 2>&1
"$loom" bench machine | head -3
echo "host load: $(cut -d' ' -f1-3 /proc/loadavg)"

echo "== 1. verify cost, llama-3.2-1b shape, bf16 dummy weights, batch 1"
for tp in 1 2; do
  for k in 1 2 3 4; do
    echo "-- tp=$tp k=$k"
    "$loom" bench latency -m configs/llama-3.2-1b.json --load-format dummy -tp "$tp" --batch-size 1 --input-len 16 \
      --output-len 33 --num-iters-warmup 1 --num-iters 2 \
      --speculative-config "{\"method\": \"draft_model\", \"model\": \"configs/llama-3.2-1b.json\", \"num_speculative_tokens\": $k}" \
      2>&1 | grep -E '^Target passes|one pass over'
  done
done

echo "== 2. Eagle3 on stories260K (a head trained here)"
if [ ! -f "$head/model.safetensors" ]; then
  [ -n "${PY:-}" ] || { echo "spec.sh: no $head and no PY to train it with" >&2; exit 1; }
  "$PY" benches/eagle3_train.py --target models/stories260K --out "$head" --sequences 4096 --epochs 12 | tail -3
fi
for mode in "" "-tp 2 --enable-sequence-parallel --sp-min-tokens 0"; do
  for k in 2 3 4 5; do
    echo "-- ${mode:-tp=1} k=$k"
    # shellcheck disable=SC2086
    "$loom" run -m models/stories260K $mode -n 256 -v --ignore-eos \
      --speculative-config "{\"method\": \"eagle3\", \"model\": \"$head\", \"num_speculative_tokens\": $k}" \
      2>&1 >/dev/null | grep -E 'speculative|generated'
    # shellcheck disable=SC2086
    "$loom" bench latency -m models/stories260K $mode --batch-size 1 --input-len 16 --output-len 257 \
      --num-iters-warmup 2 --num-iters 10 \
      --speculative-config "{\"method\": \"eagle3\", \"model\": \"$head\", \"num_speculative_tokens\": $k}" \
      2>&1 | grep -E '^Speculative|speed-up'
  done
done

echo "== 3. the Eagle3 draft's TP at -tp 2 (k=3)"
for dtp in 1 2; do
  echo "-- draft_tensor_parallel_size $dtp"
  "$loom" bench latency -m models/stories260K -tp 2 --batch-size 4 --input-len 16 --output-len 129 \
    --num-iters-warmup 2 --num-iters 10 \
    --speculative-config "{\"method\": \"eagle3\", \"model\": \"$head\", \"num_speculative_tokens\": 3, \"draft_tensor_parallel_size\": $dtp}" \
    2>&1 | grep -E '^Speculative|speed-up'
done

echo "== 4. n-gram lookup, copy-heavy: a passage given twice, continued"
passage=$("$loom" run -n 120 2>/dev/null | tr -d '\n')
for k in 2 4; do
  echo "-- k=$k"
  "$loom" run -p "$passage $passage" -n 120 -v \
    --speculative-config "{\"method\": \"ngram\", \"num_speculative_tokens\": $k, \"prompt_lookup_min\": 2, \"prompt_lookup_max\": 4}" \
    2>&1 >/dev/null | grep -E 'speculative|generated'
done
"$loom" run -p "$passage $passage" -n 120 -v 2>&1 >/dev/null | grep generated

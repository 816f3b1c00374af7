#!/usr/bin/env bash
# Issue 13's benchmark: DeepSeek-V2-Lite's shape (configs/deepseek-v2-lite.json) with bf16 dummy
# weights. The whole model (15.7 B parameters, 31 GB in bf16) does not fit a 24 GiB machine, so
# the first LAYERS layers run (default 4: the dense layer 0 and three of experts; a copy of the
# config in /tmp). Prefill of 512 and 2048 tokens (output 1) and decode (input 512, 33 tokens
# out: 32 decode steps) at tp=1 with two threads, then tp=2 with one thread per rank and TP,
# TP + SP and async TP alternating in one job (`--compare`). The KV figures come from `loom
# plan` on the whole model: bytes per token of the latent cache against full per-head K and V,
# and the context the default 4 GiB budget holds either way.
# Usage: [LAYERS=4] benches/mla.sh [build-dir] [iterations]
set -euo pipefail
cd "$(dirname "$0")/.."
loom=${1:-build}/loom
iters=${2:-2}
layers=${LAYERS:-4}
cfg=$(mktemp --suffix=.json)
trap 'rm -f "$cfg"' EXIT
sed "s/\"num_hidden_layers\": 27/\"num_hidden_layers\": $layers/" configs/deepseek-v2-lite.json > "$cfg"
"$loom" bench machine | head -3
for tp in 1 2; do
  echo "== DeepSeek-V2-Lite (all 27 layers), KV cache at tp=$tp"
  "$loom" plan -m configs/deepseek-v2-lite.json --load-format dummy -tp "$tp" | grep -E "KV cache|KV budget"
done
summary() { grep -E "^== mode|^Avg latency|^Prefill|^Decode:|^Memory"; }
for len in 512 2048; do
  common=(-m "$cfg" --load-format dummy --batch-size 1 --input-len "$len" --output-len 1 --num-iters-warmup 1
          --num-iters "$iters")
  echo "== DeepSeek-V2-Lite ($layers layers, bf16), prefill $len, tp=1 (2 threads)"
  "$loom" bench latency "${common[@]}" 2>/dev/null | summary
  echo "== DeepSeek-V2-Lite ($layers layers, bf16), prefill $len, tp=2 (1 thread per rank)"
  "$loom" bench latency "${common[@]}" -tp 2 --threads 1 --compare tp,sp,async 2>/dev/null | summary
done
common=(-m "$cfg" --load-format dummy --batch-size 1 --input-len 512 --output-len 33 --num-iters-warmup 1
        --num-iters "$iters")
echo "== DeepSeek-V2-Lite ($layers layers, bf16), decode after 512, tp=1 (2 threads)"
"$loom" bench latency "${common[@]}" 2>/dev/null | summary
echo "== DeepSeek-V2-Lite ($layers layers, bf16), decode after 512, tp=2 (1 thread per rank)"
"$loom" bench latency "${common[@]}" -tp 2 --threads 1 --compare tp,sp,async 2>/dev/null | summary

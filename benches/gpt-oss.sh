#!/usr/bin/env bash
# The GPT-OSS figures (issues 29, 43, 45): decode on the GPT-OSS-20B shape
# (configs/gpt-oss-20b.json: 24 layers, 32 experts of 2880, top 4, MXFP4 experts) against
# llama.cpp's MXFP4 decode, the engines taking turns round by round:
#   loom tp=1 folder      one rank, THREADS threads; the config with dummy weights, the experts
#                         rounded into MXFP4 at load (the checkpoint's format, held as ggml's
#                         MXFP4 blocks on int8 activations), the rest bf16 (--dtype auto)
#   loom tp=1 GGUF        one rank, THREADS threads, on llama.cpp's own file below (ggml's MXFP4
#                         blocks on int8 activations, --dtype auto)
#   loom tp=2 EP+SP GGUF  two ranks of THREADS/2 threads on that file, expert parallelism (16
#                         experts a rank) and sequence parallelism from the first token
#   llama.cpp             llama-bench of a GGUF of the same shape (benches/make_gguf.py: random
#                         MXFP4 experts, bf16 elsewhere; arch gpt-oss as its converter writes
#                         it), THREADS threads, weights read into memory (-lm none)
# Decode is NEW tokens after a CTX-token prompt (loom bench latency --input-len CTX
# --output-len NEW+1; llama-bench -p 0 -n NEW -d CTX). Each engine's weights (about 13 GB) fit
# the 24 GiB machine one at a time, which is why they take turns rather than share it.
# Usage: [ROUNDS=3] [NEW=32] [CTX=16] [THREADS=2] benches/gpt-oss.sh [LOOM_BINARY|BUILD_DIR]
set -euo pipefail
{ # read whole before it runs
cd "$(dirname "$0")/.."
root=$PWD
. benches/common.sh
loom=${1:-build/loom}
[ -d "$loom" ] && loom=${loom%/}/loom
ROUNDS=${ROUNDS:-3} NEW=${NEW:-32} CTX=${CTX:-16} THREADS=${THREADS:-2}
CONFIG=configs/gpt-oss-20b.json
bench=$root/build-bench
RESULTS=${RESULTS:-$bench/results-gpt-oss-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$bench" "$RESULTS"
loom_prepare
llama_cpp_source
build_llama "$bench/llama-cpu" "CPU"
gguf_venv
gguf=$bench/gguf/gpt-oss-20b-random-mxfp4.gguf
gguf_write "$CONFIG" "$gguf"
{
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(grep -m1 "^cpu family" /proc/cpuinfo | tr -s " \t" " "), $(grep -m1 "^model\s" /proc/cpuinfo | tr -s " \t" " ")"
  echo "llama.cpp: $llama_version"
  echo "loom: $loom_src (git $(git rev-parse --short HEAD))"
  echo "rounds $ROUNDS, decode $NEW tokens after $CTX, threads $THREADS"
} | tee "$RESULTS/info.txt" >&2
"$loom" bench machine --threads "$THREADS" >"$RESULTS/machine.txt" 2>&1 || true
grep -E "^CPU|read" "$RESULTS/machine.txt" >&2 || true
lat=(bench latency --batch-size 1 --num-iters-warmup 1 --num-iters 2 --input-len "$CTX" --output-len $((NEW + 1)))
for r in $(seq 1 "$ROUNDS"); do
  phase "round $r"
  "$loom" "${lat[@]}" -m "$CONFIG" --load-format dummy --threads "$THREADS" >"$RESULTS/loom-tp1-$r.txt" 2>&1 \
    || { tail -20 "$RESULTS/loom-tp1-$r.txt" >&2; die "loom tp=1 failed"; }
  echo "   loom tp=1 folder:     $(grep -m1 '^Decode:' "$RESULTS/loom-tp1-$r.txt")" >&2
  "$loom" "${lat[@]}" -m "$gguf" --threads "$THREADS" >"$RESULTS/loom-tp1-gguf-$r.txt" 2>&1 \
    || { tail -20 "$RESULTS/loom-tp1-gguf-$r.txt" >&2; die "loom tp=1 on the GGUF failed"; }
  echo "   loom tp=1 GGUF:       $(grep -m1 '^Decode:' "$RESULTS/loom-tp1-gguf-$r.txt")" >&2
  "$loom" "${lat[@]}" -m "$gguf" -tp 2 --threads $((THREADS / 2 > 0 ? THREADS / 2 : 1)) --enable-expert-parallel \
    --enable-sequence-parallel --sp-min-tokens 0 >"$RESULTS/loom-tp2-ep-sp-$r.txt" 2>&1 \
    || { tail -20 "$RESULTS/loom-tp2-ep-sp-$r.txt" >&2; die "loom tp=2 EP+SP failed"; }
  echo "   loom tp=2 EP+SP GGUF: $(grep -m1 '^Decode:' "$RESULTS/loom-tp2-ep-sp-$r.txt")" >&2
  "$bench/llama-cpu/bin/llama-bench" -m "$gguf" -t "$THREADS" -p 0 -n "$NEW" -d "$CTX" -r 2 -lm none -o json \
    >"$RESULTS/llama-$r.json" 2>"$RESULTS/llama-$r.log" || { tail -20 "$RESULTS/llama-$r.log" >&2; die "llama-bench failed"; }
  echo "   llama.cpp:       $(python3 -c 'import json, sys; print("%.2f tok/s" % json.load(open(sys.argv[1]))[0]["avg_ts"])' "$RESULTS/llama-$r.json")" >&2
  phase_end "round $r"
done
python3 - "$RESULTS" "$ROUNDS" <<'PY' | tee "$RESULTS/report.md"
import json, re, statistics, sys
d, n = sys.argv[1], int(sys.argv[2])
def loom(mode, r):
    m = re.search(r"^Decode:.*?([0-9.]+) tok/s", open(f"{d}/loom-{mode}-{r}.txt").read(), re.M)
    return float(m.group(1))
modes = ["tp1", "tp1-gguf", "tp2-ep-sp"]
rows = []
for r in range(1, n + 1):
    l = json.load(open(f"{d}/llama-{r}.json"))[0]["avg_ts"]
    rows.append([r] + [loom(m, r) for m in modes] + [l])
print("| round (decode tok/s) | loom tp=1 folder | loom tp=1 GGUF | loom tp=2 EP+SP GGUF | llama.cpp | folder / llama.cpp "
      "| GGUF / llama.cpp | tp=2 GGUF / llama.cpp |")
print("|---|---|---|---|---|---|---|---|")
for r, *t, l in rows:
    print(f"| {r} | " + " | ".join(f"{x:.2f}" for x in t) + f" | {l:.2f} | " + " | ".join(f"{x / l:.2f}x" for x in t) + " |")
med = lambda i: statistics.median(x[i] for x in rows)
ratio = lambda i: statistics.median(x[i] / x[4] for x in rows)
print("| median | " + " | ".join(f"{med(i):.2f}" for i in (1, 2, 3, 4)) + " | " +
      " | ".join(f"{ratio(i):.2f}x" for i in (1, 2, 3)) + " |")
PY
}

#!/usr/bin/env bash
# loom against llama.cpp on the Llama-3.2-1B shape (random weights, fp32 and bf16, 2 threads),
# in one job, the two engines taking turns on each row so both see the same machine state.
#
# Usage: benches/vs-llama-cpp.sh [LOOM_BINARY|BUILD_DIR]  (default build/loom; built if missing)
#
# What it does (each step skipped when its output is already there, so a rerun only measures):
#   1. pip-downloads the llama-cpp-python sdist (its vendor/llama.cpp is llama.cpp's source) into
#      build-bench/dl and unpacks it into build-bench/src;
#   2. builds llama.cpp's llama-bench with nice -j2: default CPU backend (build-bench/
#      llama-cpu, built for this CPU), with OpenBLAS (build-bench/llama-blas, GGML_BLAS=ON,
#      Debian's libopenblas-openmp-dev as loom uses; apt-get installs what is missing) when
#      BLAS_ROWS asks, and for AVX2 alone (build-bench/llama-avx2, GGML_NATIVE=OFF) when
#      VARIANTS has loom's avx2, so that each loom variant meets a llama.cpp of the same ISA;
#      on a CPU with AMX, also for AVX-512 without AMX (build-bench/llama-avx512: VNNI, BF16,
#      VBMI), since the native build takes AMX there and its AMX path can crash (SIGILL on
#      every Q4_0 and Q8_0 row on an Emerald Rapids Xeon): each row then meets the faster of the builds
#      that ran, and the report names it;
#   3. writes random-weight GGUFs of configs/llama-3.2-1b.json, f32 and bf16, with llama.cpp's
#      gguf-py (benches/make_gguf.py, in a venv at build-bench/venv; no tokenizer: vocab type
#      "none");
#   4. runs `loom bench machine` (sgemm rate, memory read bandwidth), then for each weight dtype
#      and row: loom once per variant (LOOM_CPU=<variant>), then llama-bench (CPU build; the
#      AVX2 build; and the OpenBLAS build with OMP_WAIT_POLICY=PASSIVE for BLAS_ROWS);
#   5. prints one markdown table per dtype (benches/vs_llama_cpp_report.py) and keeps every raw
#      output in build-bench/results-<date>/ (report.md is the printed tables).
#
# Knobs (environment):
#   VARIANTS="avx512 avx2"   loom's rows once per variant with LOOM_CPU set ("default": unset;
#                            default "default"); a variant ending in "+exact" ("default+exact")
#                            runs loom with --dtype float32, exact fp32 compute, instead of the
#                            reduced-precision default of bf16 and quantized weights
#   DTYPES="f32 bf16"        weight dtypes; also q4 and q8: llama.cpp's Q4_0 and Q8_0 (llama-quantize
#                            of the bf16 GGUF, its defaults: a Q4_0 model keeps the tied
#                            embedding/LM head at Q6_K) against loom's int4 (groups of 128) and
#                            int8 (per channel) quantized at load, LM head int8 per channel
#   ROWS="pp512 pp2048 tg64" ppN: prefill of N tokens; tgN: N decode steps after a DECODE_CTX
#                            prompt (llama-bench -n N -d DECODE_CTX)
#   DECODE_CTX=16            prompt before the decode steps
#   REPS=2                   timed repetitions (plus one warm-up each, both engines)
#   THREADS=2                threads for both engines
#   BLAS_ROWS="f32:pp bf16:pp"  which dtype:kind rows also run the OpenBLAS llama.cpp build
#                            ("" for none; kind is pp or tg)
#   CONFIG=configs/llama-3.2-1b.json   the model shape
#   LLAMA_ARGS=""            extra llama-bench arguments (e.g. "-fa 1")
#   RESULTS=build-bench/results-<date>  where the raw outputs go
#   QUIET_WAIT=0             before each row, wait up to this many seconds for the machine to be
#                            quiet (no other runnable threads); the threads other jobs had
#                            runnable before each row go to load.txt and the report either way
#   MODEL_DIR=DIR GGUF=FILE  a real model instead of CONFIG's random weights: loom reads the
#                            Hugging Face folder DIR, llama.cpp the GGUF of the same weights
#                            (the folder made from it by transformers, as tests/gemma3_real.py
#                            does): its bf16 rows run llama-quantize --allow-requantize FILE BF16,
#                            its q4 rows FILE itself (e.g. a Q4_K_M as published)
# A quick check: REPS=1 ROWS="pp64 tg8" DTYPES=bf16 benches/vs-llama-cpp.sh
# Gemma 3 270M (issue 29): MODEL_DIR=~/.cache/loom-tests/gemma3-270m-<key> GGUF=~/.cache/loom-tests/
#   gemma-3-270m-q4_k_m.gguf DTYPES="bf16 q4" ROWS="pp512 tg64" BLAS_ROWS= benches/vs-llama-cpp.sh
set -euo pipefail
{ # the whole script is read before it runs, so editing it mid-run is safe
cd "$(dirname "$0")/.."
root=$PWD

. benches/common.sh

loom=${1:-build/loom}
[ -d "$loom" ] && loom=${loom%/}/loom
VARIANTS=${VARIANTS:-default}
DTYPES=${DTYPES:-f32 bf16}
ROWS=${ROWS:-pp512 pp2048 tg64}
DECODE_CTX=${DECODE_CTX:-16}
REPS=${REPS:-2}
THREADS=${THREADS:-2}
BLAS_ROWS=${BLAS_ROWS-f32:pp bf16:pp}
CONFIG=${CONFIG:-configs/llama-3.2-1b.json}
LLAMA_ARGS=${LLAMA_ARGS:-}
QUIET_WAIT=${QUIET_WAIT:-0}
bench=$root/build-bench
RESULTS=${RESULTS:-$bench/results-$(date +%Y%m%d-%H%M%S)}

for t in python3 cmake make gcc g++ pip3 lscpu; do
  command -v "$t" >/dev/null || die "'$t' is missing (Debian: apt-get install cmake g++ make python3-pip util-linux)"
done
MODEL_DIR=${MODEL_DIR:-}
GGUF=${GGUF:-}
if [ -n "$MODEL_DIR" ]; then
  [ -f "$MODEL_DIR/config.json" ] || die "MODEL_DIR: no config.json in '$MODEL_DIR'"
  [ -f "$GGUF" ] || die "MODEL_DIR needs GGUF=FILE, the same weights for llama.cpp"
  for d in $DTYPES; do [[ $d =~ ^(bf16|q4)$ ]] || die "DTYPES: '$d' with MODEL_DIR (bf16 or q4)"; done
fi
[ -f "$CONFIG" ] || die "no model config $CONFIG"
for r in $ROWS; do [[ $r =~ ^(pp|tg)[0-9]+$ ]] || die "ROWS: '$r' is not ppN or tgN"; done
for d in $DTYPES; do [[ $d =~ ^(f32|bf16|q4|q8)$ ]] || die "DTYPES: '$d' is not f32, bf16, q4 or q8"; done
mkdir -p "$bench" "$RESULTS"

# --- loom -------------------------------------------------------------------------------------
loom_prepare

# --- llama.cpp source -------------------------------------------------------------------------
llama_cpp_source

# --- llama.cpp builds -------------------------------------------------------------------------
have_pkg() { dpkg -s "$1:$(dpkg --print-architecture)" >/dev/null 2>&1 || dpkg -s "$1" >/dev/null 2>&1; }
need_apt=()
have_pkg libopenblas-openmp-dev || need_apt+=(libopenblas-openmp-dev)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
if [ -n "$BLAS_ROWS" ] && [ ${#need_apt[@]} -gt 0 ]; then
  phase "apt-get install ${need_apt[*]}"
  SUDO=; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${need_apt[@]}" >/dev/null
  phase_end "apt-get"
fi
build_llama "$bench/llama-cpu" "CPU"
# loom's avx2 rows meet llama.cpp built for AVX2 too: the native build uses AVX-512 here
LLAMA_AVX2=0
[[ " $VARIANTS " =~ \ avx2(\+exact)?\  ]] && LLAMA_AVX2=1
[ $LLAMA_AVX2 = 1 ] && build_llama "$bench/llama-avx2" "AVX2" -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON \
  -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF
# with AMX the native build is an AMX build; the AVX-512 one is the other working peer
LLAMA_AVX512=0
grep -qw amx_tile /proc/cpuinfo && LLAMA_AVX512=1
[ $LLAMA_AVX512 = 1 ] && build_llama "$bench/llama-avx512" "AVX-512 without AMX" -DGGML_NATIVE=OFF -DGGML_AVX=ON \
  -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=ON -DGGML_AVX512=ON \
  -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF \
  -DGGML_AMX_BF16=OFF
if [ -n "$BLAS_ROWS" ]; then
  build_llama "$bench/llama-blas" "OpenBLAS" -DGGML_BLAS=ON -DGGML_BLAS_VENDOR=OpenBLAS
  ls "$bench/llama-blas/bin" | grep -q ggml-blas \
    || die "the OpenBLAS build of llama.cpp has no BLAS backend (log: $bench/llama-blas.log; delete $bench/llama-blas to rebuild)"
fi

# --- GGUF files -------------------------------------------------------------------------------
gguf_venv
model=$(basename "$CONFIG" .json)
kind=random
if [ -n "$MODEL_DIR" ]; then
  model=$(basename "$MODEL_DIR") kind=real
  mkdir -p "$bench/gguf"
  ln -sf "$(realpath "$GGUF")" "$bench/gguf/$model-real-q4.gguf"
  if [[ " $DTYPES " == *" bf16 "* ]] && [ ! -s "$bench/gguf/$model-real-bf16.gguf" ]; then
    phase "llama-quantize --allow-requantize $GGUF to BF16"
    nice -n 10 "$bench/llama-cpu/bin/llama-quantize" --allow-requantize "$GGUF" "$bench/gguf/$model-real-bf16.gguf.tmp" \
      BF16 "$THREADS" >"$RESULTS/quantize-bf16.log" 2>&1 || { tail -20 "$RESULTS/quantize-bf16.log" >&2; die "llama-quantize BF16 failed"; }
    mv "$bench/gguf/$model-real-bf16.gguf.tmp" "$bench/gguf/$model-real-bf16.gguf"
    phase_end "llama-quantize BF16"
  fi
fi
gguf_args=()
float_dtypes=$(for d in $DTYPES; do case $d in q*) echo bf16 ;; *) echo "$d" ;; esac; done | sort -u)
for d in $float_dtypes; do
  f=$bench/gguf/$model-random-$d.gguf
  [ -s "$f" ] || [ $kind = real ] || gguf_args+=(--"$d" "$f.tmp")
done
if [ ${#gguf_args[@]} -gt 0 ]; then
  phase "writing random-weight GGUFs of $CONFIG (${gguf_args[*]})"
  mkdir -p "$bench/gguf"
  nice -n 10 "$py" benches/make_gguf.py "$CONFIG" "${gguf_args[@]}"
  for d in $float_dtypes; do [ -f "$bench/gguf/$model-random-$d.gguf.tmp" ] && mv "$bench/gguf/$model-random-$d.gguf.tmp" "$bench/gguf/$model-random-$d.gguf"; done
  phase_end "GGUF writing"
fi
for d in $DTYPES; do
  [ $kind = real ] && continue
  case $d in q4) type=Q4_0 ;; q8) type=Q8_0 ;; *) continue ;; esac
  f=$bench/gguf/$model-random-$d.gguf
  [ -s "$f" ] && continue
  phase "llama-quantize to $type"
  nice -n 10 "$bench/llama-cpu/bin/llama-quantize" "$bench/gguf/$model-random-bf16.gguf" "$f.tmp" "$type" "$THREADS" \
    >"$RESULTS/quantize-$d.log" 2>&1 || { tail -20 "$RESULTS/quantize-$d.log" >&2; die "llama-quantize $type failed"; }
  mv "$f.tmp" "$f"
  phase_end "llama-quantize $type"
done

# --- runs -------------------------------------------------------------------------------------
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
{
  echo "date: $(date -Is)"
  echo "cpu: $cpu"
  echo "cpu flags (avx512/amx/bf16): $(grep -m1 -o -w 'avx2\|avx512f\|avx512_bf16\|amx_tile\|amx_bf16' /proc/cpuinfo | sort -u | paste -sd' ')"
  echo "llama.cpp: $llama_version"
  echo "loom: $loom_src (git $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ', with uncommitted changes'))"
  echo "config: ${MODEL_DIR:-$CONFIG}$( [ $kind = real ] && echo " (real weights; llama.cpp: $GGUF, bf16 by llama-quantize --allow-requantize)")"
  echo "threads: $THREADS"
  echo "reps: $REPS (+1 warm-up)"
  echo "rows: $ROWS"
  echo "decode context: $DECODE_CTX"
  echo "dtypes: $DTYPES"
  echo "variants: $VARIANTS"
  echo "llama.cpp builds: cpu ($bench/llama-cpu, native$( [ $LLAMA_AVX512 = 1 ] && echo ": AMX"))$( [ $LLAMA_AVX512 = 1 ] && echo ", avx512 ($bench/llama-avx512, GGML_NATIVE=OFF, no AMX)")$( [ $LLAMA_AVX2 = 1 ] && echo ", avx2 ($bench/llama-avx2, GGML_NATIVE=OFF)")$( [ -n "$BLAS_ROWS" ] && echo ", blas ($bench/llama-blas, OMP_WAIT_POLICY=PASSIVE) for $BLAS_ROWS")"
} | tee "$RESULTS/info.txt" >&2

run_loom() { # variant, then loom's arguments; prints to stdout, stderr kept too
  local v=${1%+exact} exact=(); [[ $1 == *+exact && $2 == bench && $3 == latency ]] && exact=(--dtype float32); shift
  if [ "$v" = default ]; then env -u LOOM_CPU "$loom" "$@" "${exact[@]}"
  else LOOM_CPU=$v "$loom" "$@" "${exact[@]}"; fi
}

# Other jobs' runnable threads, in tenths, averaged over 10 samples of /proc/stat's procs_running
# (a machine-wide count, so it sees other containers' processes too; minus this awk).
others_running() {
  local s=0 r i
  for i in 1 2 3 4 5 6 7 8 9 10; do
    r=$(awk '/^procs_running/ {print $2}' /proc/stat); s=$((s + r - 1)); sleep 0.1
  done
  echo "$s"
}
note_load() { # label: waits up to QUIET_WAIT s for quiet, then logs what it saw
  local t0 o waited=0
  t0=$(stamp); o=$(others_running)
  while [ "$o" -gt 5 ] && [ $(( $(stamp) - t0 )) -lt "$QUIET_WAIT" ]; do sleep 5; o=$(others_running); waited=1; done
  printf '%s: %d.%d other runnable threads (loadavg %s)%s\n' "$1" $((o / 10)) $((o % 10)) \
    "$(cut -d' ' -f1-3 /proc/loadavg)" "$([ $waited = 1 ] && echo ", waited $(( $(stamp) - t0 )) s")" >>"$RESULTS/load.txt"
  tail -1 "$RESULTS/load.txt" | sed 's/^/   /' >&2
}

phase "loom bench machine"
ok=()
for v in $VARIANTS; do
  note_load "loom bench machine [$v]"
  if run_loom "$v" bench machine --threads "$THREADS" >"$RESULTS/machine-$v.txt" 2>&1; then ok+=("$v")
  else echo "   LOOM_CPU=$v: loom bench machine failed, variant left out:" >&2; fi
  sed "s/^/   [$v] /" "$RESULTS/machine-$v.txt" >&2
done
[ ${#ok[@]} -gt 0 ] || die "loom bench machine failed for every variant ($VARIANTS)"
VARIANTS=${ok[*]}
sed -i "s/^variants: .*/variants: $VARIANTS/" "$RESULTS/info.txt"
phase_end "loom bench machine"

llama_run() { # build, dtype, row, label, extra env...
  local b=$1 d=$2 row=$3 label=$4; shift 4
  local n=${row#??} args
  if [[ $row == pp* ]]; then args=(-p "$n" -n 0); else args=(-p 0 -n "$n" -d "$DECODE_CTX"); fi
  local out=$RESULTS/llama-$d-$row-$label
  local rc=0
  # shellcheck disable=SC2086
  env "$@" "$bench/llama-$b/bin/llama-bench" -m "$bench/gguf/$model-$kind-$d.gguf" -t "$THREADS" \
    -r "$REPS" "${args[@]}" -o json $LLAMA_ARGS >"$out.json" 2>"$out.log" || rc=$?
  if [ $rc -ne 0 ]; then # a build that crashes on a row (the AMX build's SIGILL) is left out of it
    tail -5 "$out.log" >&2; rm -f "$out.json"
    echo "$d $row: llama.cpp $label build failed (exit $rc, log: $out.log)" | tee -a "$RESULTS/crashed.txt" >&2
    return 0
  fi
  echo "   llama.cpp $label: $(python3 -c 'import json, sys; j = json.load(open(sys.argv[1]))[0]; print("%.2f tok/s (sd %.2f)" % (j["avg_ts"], j["stddev_ts"]))' "$out.json" 2>/dev/null || echo '?')" >&2
}

# loom makes dummy weights in the dtype the config says they are stored in, and --dtype float32
# computes exactly on them as stored: the f32 rows need a config that says float32, or loom
# would hold bf16 weights against llama.cpp's f32 GGUF
f32_config=$RESULTS/$(basename "$CONFIG" .json)-float32.json
python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["torch_dtype"] = "float32"; c.pop("dtype", None)
json.dump(c, open(sys.argv[2], "w"), indent=2)' "$CONFIG" "$f32_config"
for d in $DTYPES; do
  ldtype=$([ "$d" = f32 ] && echo float32 || echo bfloat16)
  lconfig=$([ "$d" = f32 ] && echo "$f32_config" || echo "$CONFIG")
  case $d in q4) qargs=(-q int4 --quantize-lm-head) ;; q8) qargs=(-q int8 --quantize-lm-head) ;; *) qargs=() ;; esac
  for row in $ROWS; do
    phase "$d $row"
    n=${row#??}
    if [[ $row == pp* ]]; then largs=(--input-len "$n" --output-len 1)
    else largs=(--input-len "$DECODE_CTX" --output-len $((n + 1))); fi
    for v in $VARIANTS; do
      out=$RESULTS/loom-$d-$row-$v.txt
      note_load "loom [$v] $d $row"
      if [ $kind = real ]; then margs=(-m "$MODEL_DIR"); else margs=(-m "$lconfig" --load-format dummy); fi
      run_loom "$v" bench latency "${margs[@]}" --dtype "$ldtype" "${qargs[@]}" --threads "$THREADS" \
        --batch-size 1 --num-iters-warmup 1 --num-iters "$REPS" "${largs[@]}" >"$out" 2>&1 \
        || { tail -20 "$out" >&2; die "loom bench latency failed ($v, $d, $row; output: $out)"; }
      echo "   loom [$v]: $(grep -E '^(Prefill|Decode):' "$out" | { if [[ $row == pp* ]]; then grep ^Prefill; else grep ^Decode; fi; } | head -1)" >&2
    done
    note_load "llama.cpp cpu $d $row"
    llama_run cpu "$d" "$row" cpu
    if [ $LLAMA_AVX512 = 1 ]; then
      note_load "llama.cpp avx512 $d $row"
      llama_run avx512 "$d" "$row" avx512
    fi
    if [ $LLAMA_AVX2 = 1 ]; then
      note_load "llama.cpp avx2 $d $row"
      llama_run avx2 "$d" "$row" avx2
    fi
    if [[ " $BLAS_ROWS " == *" $d:${row:0:2} "* ]]; then
      note_load "llama.cpp blas $d $row"
      llama_run blas "$d" "$row" blas OMP_WAIT_POLICY=PASSIVE
    fi
    phase_end "$d $row"
  done
done

printf '%s\n' "${timings[@]}" >"$RESULTS/timings.txt"
python3 benches/vs_llama_cpp_report.py "$RESULTS" | tee "$RESULTS/report.md"
echo >&2
echo "timings:" >&2; sed 's/^/  /' "$RESULTS/timings.txt" >&2
echo "raw outputs: $RESULTS" >&2
exit 0
}

#!/usr/bin/env bash
# Serving benchmark: `loom serve` against llama.cpp's `llama-server` on the Llama-3.2-1B shape
# (random weights, bf16, 2 threads, the same number of parallel slots), in one job, the two
# servers taking turns on each concurrency level so both see the same machine state; then
# `loom serve -tp 2` with and without --enable-sequence-parallel on long prompts.
#
# Usage: benches/serve.sh [LOOM_BINARY|BUILD_DIR]  (default build/loom; built if missing)
#
# What it does (each set-up step skipped when its output is already there):
#   1. llama.cpp's source as benches/vs-llama-cpp.sh gets it (the llama-cpp-python sdist from
#      PyPI into build-bench/dl, unpacked into build-bench/src; its vendor/llama.cpp), and
#      builds the llama-server target with nice -j2 into build-bench/llama-server (CPU backend;
#      no web UI, no OpenSSL, no curl);
#   2. the bf16 random-weight GGUF of the config (benches/make_gguf.py, as vs-llama-cpp.sh
#      writes it, venv at build-bench/venv), and a copy of it whose tokenizer.ggml.model is
#      "test" with a token list of the vocabulary size (gguf-py's copy_with_new_metadata): the
#      GGUF make_gguf.py writes has vocab type "none", with which llama-server aborts on its
#      first generated token (GGML_ASSERT(type != LLAMA_VOCAB_TYPE_NONE) in
#      llama_vocab::impl::token_get_attr, from common_token_to_piece); llama.cpp's "test" vocab
#      (LLAMA_VOCAB_TYPE_TEST, a dummy tokenizer) detokenizes a token as its id in hex. Weights
#      and shapes are unchanged; prompts are token ids, so the tokenizer itself is never used;
#   3. starts `loom serve` (--load-format dummy --dtype bfloat16 -t THREADS --max-num-seqs
#      SLOTS --max-model-len CTX) and `llama-server` (-t THREADS -tb THREADS -np SLOTS
#      -c SLOTS*CTX, continuous batching, its defaults otherwise) on 127.0.0.1, one warm-up
#      request each, then for each concurrency level runs benches/serve_load.py against each
#      server in turn (which one goes first alternates between levels): REQUESTS streaming
#      completions of PROMPT_LEN random token ids (seeded; the same prompts for both servers;
#      no two requests share a prefix), OUTPUT_LEN tokens each (ignore_eos, temperature 0);
#   4. stops both, then for SP in off on: starts `loom serve -tp 2 --threads THREADS/2`
#      (--enable-sequence-parallel for on) and runs LONG_REQUESTS requests of LONG_PROMPT-token
#      prompts at LONG_CONCURRENCY;
#   5. prints markdown tables (engine, concurrency, requests, output tok/s, TTFT and ITL p50 and
#      p99) and keeps every raw output in build-bench/results-serve-<date>/ (report.md is the
#      printed tables, results.jsonl serve_load.py's lines, *.log the servers' stderr).
# Servers are stopped on exit (SIGTERM, then SIGKILL after 30 s); every request has a timeout.
#
# Knobs (environment):
#   WORKLOAD=single          the workload above; multiturn: multi-turn chat (its knobs below)
#   CONCURRENCY="1 4 16"     concurrency levels
#   REQUESTS=""              requests per level (default: 2 x concurrency, at least 4, at most
#                            16: one wave at concurrency 16 keeps the job near 11 minutes on 2
#                            cores; with equal lengths, later waves start together too)
#   PROMPT_LEN=128 OUTPUT_LEN=128
#   SLOTS=16                 loom --max-num-seqs, llama-server -np
#   CTX=1024                 context per sequence (loom --max-model-len; llama-server -c SLOTS*CTX)
#   THREADS=2                threads for both (loom -t; llama-server -t and -tb)
#   ENGINES="loom llama-server"   which servers the concurrency levels run ("": none, only
#                            the -tp 2 workload; loom-uncached: loom with --no-enable-prefix-caching,
#                            a third server beside them)
#   LONG_PROMPT=2048 LONG_OUTPUT=16 LONG_REQUESTS=2 LONG_CONCURRENCY=2
#                            the -tp 2 workload (LONG_PROMPT=0 skips it); its context is
#                            LONG_PROMPT + LONG_OUTPUT, its --max-num-seqs LONG_CONCURRENCY
#   TIMEOUT=600              seconds allowed per request
#   CONFIG=configs/llama-3.2-1b.json   the model shape
#   GGUF=""                  llama-server's weights: a GGUF of CONFIG's shape (a model
#                            benches/make_gguf.py cannot write: benches/make_hf_random.py's folder
#                            converted by benches/hf_to_gguf.py); default: make_gguf.py's
#   LOOM_ARGS="" LLAMA_ARGS=""   extra arguments for loom serve / llama-server
#   RESULTS=build-bench/results-serve-<date>   where the raw outputs go
#   QUIET_WAIT=0             before each run, wait up to this many seconds for the machine to be
#                            quiet (other jobs below 0.1 cores); what was seen goes to load.txt
#                            and the report's note column either way (with the cores the server
#                            kept busy during the run, its CPU time / wall time, and the whole
#                            machine's busy cores over the run, from /proc/stat)
# A quick check: CONCURRENCY="1 2" OUTPUT_LEN=8 LONG_PROMPT=256 LONG_OUTPUT=4 benches/serve.sh
#
# WORKLOAD=multiturn: multi-turn chat sessions against both servers' prompt caches, instead of
# the single-shot requests and the -tp 2 workload (LONG_PROMPT defaults to 0). For each
# concurrency level C, max(USERS, C) users (16 users at concurrency 16: every in-flight request
# is a different user) each hold a TURNS-turn conversation: a shared system prompt of SYSTEM_LEN
# random token ids (the same for every user; a different one per level, so no level starts
# with the system prompt cached), then per turn USER_LEN new user token ids; the whole
# conversation is resent every turn (serve_load.py --multi-turn), and the OUTPUT_LEN ids the
# server generated are appended before the user's next turn (loom gives them as "token_id:N"
# logprobs, llama-server in "__verbose" with "verbose": true; ANSWER=fixed appends seeded
# pseudo-random ids instead, so only the previous prompt is a reusable prefix). So turn t's
# prompt is SYSTEM_LEN + t x USER_LEN + (t - 1) x OUTPUT_LEN tokens, 1952 at turn 6 by default,
# and a cache that keeps a conversation only has USER_LEN + OUTPUT_LEN = 160 new tokens a turn.
# At most C requests are in flight; the turns wait in one FIFO queue and a user's next turn
# joins its back when the previous one ends, so with more users than C the users interleave and
# a server must keep every user's conversation to reuse it. Both servers start once, with SLOTS
# (default: the highest level) slots of CTX tokens (default: the longest conversation plus one,
# rounded up to 256: 2048), loom with its defaults (prefix caching is on by default where the
# build has it; LOOM_ARGS adds flags), llama-server with its prompt-cache defaults, which in
# this llama.cpp version are: --cache-prompt on (a slot keeps its last prompt's KV and a request
# reuses the longest common prefix), --slot-prompt-similarity 0.1 (a request goes to the idle
# slot whose cached tokens share the longest prefix with it, if over 10% of the prompt; else to
# the least recently used slot), --cache-ram 8192 (MiB of host memory where a slot's prompt is
# saved when the slot goes to another request, as least recently used or by a prefix match that
# keeps under half of it, and loaded back on a later match), --cache-reuse 0 (no KV shifting
# of non-prefix chunks) and, with -np given, no unified KV (each slot has CTX tokens). After
# the levels, each server gets NEW_REQUESTS requests (at concurrency 1) of a fresh
# USER_LEN + OUTPUT_LEN-token prompt, nothing cached: the TTFT of
# prefilling only a follow-up turn's new tokens, the issue's yardstick ("a follow-up turn's TTFT
# within 1.2x of prefilling only its new tokens"); the report divides the follow-up turns' TTFT
# p50 by it. The report has, per level, TTFT p50/p99 and mean cached prompt tokens (the usage's
# prompt_tokens_details.cached_tokens, else llama-server's timings.cache_n) per turn with the
# engines side by side, and a summary (output and prompt tok/s, TTFT of turn 1 and of the
# follow-ups, ITL p50/p99, the new-tokens prefill); requests-<engine>-c<C>.jsonl holds every
# request (user, turn, prompt length, TTFT, ITL gaps, cached tokens).
# Its knobs (the others above apply too; their defaults differ where shown):
#   WORKLOAD=single          or multiturn
#   USERS=8 TURNS=6 SYSTEM_LEN=1024 USER_LEN=128 OUTPUT_LEN=32
#   CONCURRENCY="4 16"       levels; users = max(USERS, level)
#   SLOTS=max level  CTX=SYSTEM_LEN + TURNS x (USER_LEN + OUTPUT_LEN) + 1, rounded up to 256
#   ANSWER=generated         or fixed (see above)
#   NEW_REQUESTS=5           requests of the new-tokens-only prefill (0: skip it)
#   TIMEOUT=1200             seconds per request (a server that re-prefills every history
#                            takes long at 16: 16 prompts of up to 2k tokens in one wave)
# On 2 cores with the 1B shape, 48 + 96 turns: an estimate of about 10 minutes when both
# servers reuse their caches; one that re-prefills every history needs ~1550 tokens a turn,
# near 40 minutes at concurrency 16 alone (at ~70 prefill tok/s).
# Full size: WORKLOAD=multiturn QUIET_WAIT=120 benches/serve.sh
# Quick: WORKLOAD=multiturn CONCURRENCY=2 USERS=2 TURNS=3 SYSTEM_LEN=64 USER_LEN=16 OUTPUT_LEN=8 \
#          NEW_REQUESTS=2 CONFIG=configs/llama-100m.json benches/serve.sh
set -euo pipefail
{ # the whole script is read before it runs, so editing it mid-run is safe
cd "$(dirname "$0")/.."
root=$PWD

. benches/common.sh

loom=${1:-build/loom}
[ -d "$loom" ] && loom=${loom%/}/loom
WORKLOAD=${WORKLOAD:-single}
[[ $WORKLOAD =~ ^(single|multiturn)$ ]] || die "WORKLOAD: '$WORKLOAD' is not single or multiturn"
if [ "$WORKLOAD" = multiturn ]; then
  USERS=${USERS:-8}
  TURNS=${TURNS:-6}
  SYSTEM_LEN=${SYSTEM_LEN:-1024}
  USER_LEN=${USER_LEN:-128}
  ANSWER=${ANSWER:-generated}
  NEW_REQUESTS=${NEW_REQUESTS:-5}
  CONCURRENCY=${CONCURRENCY:-4 16}
  OUTPUT_LEN=${OUTPUT_LEN:-32}
  mt_longest=$((SYSTEM_LEN + TURNS * (USER_LEN + OUTPUT_LEN)))  # the last turn's prompt + answer
  CTX=${CTX:-$(( (mt_longest + 1 + 255) / 256 * 256 ))}
  SLOTS=${SLOTS:-$(printf '%s\n' $CONCURRENCY | sort -n | tail -1)}
  LONG_PROMPT=${LONG_PROMPT:-0}
  TIMEOUT=${TIMEOUT:-1200}
  [[ $ANSWER =~ ^(generated|fixed)$ ]] || die "ANSWER: '$ANSWER' is not generated or fixed"
fi
CONCURRENCY=${CONCURRENCY:-1 4 16}
REQUESTS=${REQUESTS:-}
PROMPT_LEN=${PROMPT_LEN:-128}
OUTPUT_LEN=${OUTPUT_LEN:-128}
SLOTS=${SLOTS:-16}
CTX=${CTX:-1024}
THREADS=${THREADS:-2}
ENGINES=${ENGINES-loom llama-server}
LONG_PROMPT=${LONG_PROMPT:-2048}
LONG_OUTPUT=${LONG_OUTPUT:-16}
LONG_REQUESTS=${LONG_REQUESTS:-2}
LONG_CONCURRENCY=${LONG_CONCURRENCY:-2}
TIMEOUT=${TIMEOUT:-600}
CONFIG=${CONFIG:-configs/llama-3.2-1b.json}
LOOM_ARGS=${LOOM_ARGS:-}
LLAMA_ARGS=${LLAMA_ARGS:-}
QUIET_WAIT=${QUIET_WAIT:-0}
bench=$root/build-bench
RESULTS=${RESULTS:-$bench/results-serve-$(date +%Y%m%d-%H%M%S)}

for t in python3 cmake make gcc g++ pip3 lscpu curl setsid pgrep; do
  command -v "$t" >/dev/null || die "'$t' is missing (Debian: apt-get install cmake g++ make python3-pip util-linux curl procps)"
done
[ -f "$CONFIG" ] || die "no model config $CONFIG"
for e in $ENGINES; do
  [[ $e =~ ^(loom|loom-uncached|llama-server)$ ]] || die "ENGINES: '$e' is not loom, loom-uncached or llama-server"
done
if [ "$WORKLOAD" = multiturn ]; then
  # llama-server stops a slot one token short of its context, so the longest one needs CTX - 1
  [ "$mt_longest" -lt "$CTX" ] || die "the longest conversation, SYSTEM_LEN + TURNS x (USER_LEN + OUTPUT_LEN) = $mt_longest tokens, needs CTX over it ($CTX)"
else
  [ $((PROMPT_LEN + OUTPUT_LEN)) -le "$CTX" ] || die "PROMPT_LEN + OUTPUT_LEN is over CTX ($CTX)"
fi
# prompt ids are drawn from [1000, vocab): the config's vocabulary, at most 128000 (the ids
# serve_load.py drew before it was given the vocabulary: the same prompts on the 1B shape)
vocab=$(python3 -c 'import json, sys; print(min(int(json.load(open(sys.argv[1]))["vocab_size"]), 128000))' "$CONFIG") \
  || die "no vocab_size in $CONFIG"
mkdir -p "$bench" "$RESULTS"
[[ " $ENGINES " == *" llama-server "* ]] && need_llama=1 || need_llama=0

# --- loom -------------------------------------------------------------------------------------
loom_prepare

# --- llama.cpp source and llama-server (as vs-llama-cpp.sh gets the source) --------------------
llama_version=none
if [ $need_llama = 1 ]; then
  llama_cpp_source

  llama_server_build

  # --- GGUF: make_gguf.py's bf16 file, and a copy with llama.cpp's "test" vocab --------------
  gguf_venv
  model=$(basename "$CONFIG" .json)
  gguf_bf16=${GGUF:-$bench/gguf/$model-random-bf16.gguf}
  gguf=$bench/gguf/$(basename "$gguf_bf16" .gguf)-testvocab.gguf
  if [ -n "${GGUF:-}" ]; then [ -s "$GGUF" ] || die "GGUF=$GGUF: no such file"; else gguf_write "$CONFIG" "$gguf_bf16"; fi
  mkdir -p "$(dirname "$gguf")"
  if [ ! -s "$gguf" ] || [ "$gguf" -ot "$gguf_bf16" ]; then
    phase "copying it with tokenizer.ggml.model \"test\" (llama-server cannot generate with vocab \"none\")"
    nice -n 10 "$py" - "$gguf_bf16" "$gguf.tmp" <<'EOF' 2>"$RESULTS/gguf-testvocab.log" \
      || { tail -5 "$RESULTS/gguf-testvocab.log" >&2; die "writing $gguf failed"; }
import sys
import gguf
from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata
src, dst = sys.argv[1], sys.argv[2]
reader = gguf.GGUFReader(src)
arch = reader.get_field(gguf.Keys.General.ARCHITECTURE).contents()
n_vocab = int(reader.get_field(gguf.Keys.LLM.VOCAB_SIZE.format(arch=arch)).contents())
T = gguf.GGUFValueType
new = {gguf.Keys.Tokenizer.MODEL: MetadataDetails(T.STRING, "test"),
       gguf.Keys.Tokenizer.LIST: MetadataDetails(T.ARRAY, ["%x" % i for i in range(n_vocab)], sub_type=T.STRING)}
copy_with_new_metadata(reader, gguf.GGUFWriter(dst, arch), new, [])
print("%s: vocab \"test\" with %d tokens -> %s" % (src, n_vocab, dst), file=sys.stderr)
EOF
    mv "$gguf.tmp" "$gguf"
    phase_end "GGUF test-vocab copy"
  fi
fi

# --- info -------------------------------------------------------------------------------------
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
variant=$(cd "$RESULTS" && "$loom" run -v -n 1 2>&1 >/dev/null | awk '/^CPU:/ && !f {print; f = 1}' || true)
variant=${variant:-CPU: ?}
{
  echo "date: $(date -Is)"
  echo "cpu: $cpu ($(nproc) cores online)"
  echo "loom $variant"
  echo "llama.cpp: $llama_version"
  echo "loom: $loom_src (git $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ', with uncommitted changes'))"
  echo "config: $CONFIG, bf16 weights, dummy/random"
  echo "threads: $THREADS; slots: $SLOTS; context per sequence: $CTX"
  if [ "$WORKLOAD" = multiturn ]; then
    echo "workload: multi-turn chat, concurrency $CONCURRENCY, max($USERS, concurrency) users x $TURNS turns; shared system prompt $SYSTEM_LEN token ids, $USER_LEN new user token ids and $OUTPUT_LEN output tokens a turn (answers appended: $ANSWER ids), the whole history resent; new-tokens-only prefill: $NEW_REQUESTS requests of $((USER_LEN + OUTPUT_LEN)) token ids at concurrency 1"
  else
    echo "workload: concurrency $CONCURRENCY; prompt $PROMPT_LEN token ids, $OUTPUT_LEN output tokens; requests per level: ${REQUESTS:-2 x concurrency, at least 4, at most 16}"
  fi
  echo "engines: $ENGINES"
  [ "$LONG_PROMPT" -le 0 ] || echo "long: loom -tp 2 (--threads $(( THREADS > 1 ? THREADS / 2 : 1 )) a rank), SP off/on; prompt $LONG_PROMPT, $LONG_OUTPUT output tokens, $LONG_REQUESTS requests at concurrency $LONG_CONCURRENCY"
  echo "loom args: $LOOM_ARGS; llama-server args: $LLAMA_ARGS"
} | tee "$RESULTS/info.txt" >&2

# --- servers ----------------------------------------------------------------------------------
declare -A srv_pid=() srv_port=()
stop_server() { # name
  local name=$1 pid=${srv_pid[$1]:-} i
  [ -n "$pid" ] || return 0
  unset "srv_pid[$name]"
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "   $name (pid $pid) still up 30 s after SIGTERM: SIGKILL to its process group" >&2
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}
cleanup() { local n; for n in "${!srv_pid[@]}"; do stop_server "$n"; done; }
trap cleanup EXIT
trap 'exit 130' INT TERM

start_loom() { # name, loom serve arguments...
  local name=$1 log=$RESULTS/$1.log i port; shift
  # setsid: its own process group (with any -tp ranks), so a stuck server can be killed whole
  setsid "$loom" serve -m "$CONFIG" --load-format dummy --dtype bfloat16 --host 127.0.0.1 --port 0 \
    "$@" $LOOM_ARGS >"$log" 2>&1 </dev/null &
  srv_pid[$name]=$!
  echo "   $name: pid $! ($loom serve $* $LOOM_ARGS)" >&2
  for i in $(seq 600); do
    port=$(sed -n 's|^loom serve: listening on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$log" | head -1)
    [ -n "$port" ] && break
    kill -0 "${srv_pid[$name]}" 2>/dev/null || { tail -20 "$log" >&2; die "$name exited before listening (log: $log)"; }
    sleep 0.5
  done
  [ -n "$port" ] || die "$name not listening after 300 s (log: $log)"
  srv_port[$name]=$port
}
start_llama() { # name, llama-server arguments...
  local name=$1 log=$RESULTS/$1.log i port; shift
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  # shellcheck disable=SC2086
  setsid "$lsdir/bin/llama-server" -m "$gguf" --host 127.0.0.1 --port "$port" "$@" $LLAMA_ARGS \
    >"$log" 2>&1 </dev/null &
  srv_pid[$name]=$!
  echo "   $name: pid $! (llama-server $* $LLAMA_ARGS, port $port)" >&2
  for i in $(seq 600); do
    curl -s -m 2 "http://127.0.0.1:$port/health" 2>/dev/null | grep -q '"ok"' && break
    kill -0 "${srv_pid[$name]}" 2>/dev/null || { tail -20 "$log" >&2; die "$name exited before it was ready (log: $log)"; }
    sleep 0.5
  done
  curl -s -m 2 "http://127.0.0.1:$port/health" | grep -q '"ok"' || die "$name not ready after 300 s (log: $log)"
  srv_port[$name]=$port
}

# /proc/stat's cpu line: busy ticks (user, nice, system, irq, softirq, steal), all ticks
cpu_line() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9}' /proc/stat; }
# Cores other jobs kept busy, in hundredths: one second of /proc/stat's cpu line (user, nice,
# system, irq, softirq, steal over all fields), times the online cores. Taken while the servers
# are idle, so it counts others only. (procs_running is not used: in some containers it reads
# 1-2 above what the cpu line shows on an idle machine.)
others_busy() {
  local a b
  a=$(cpu_line); sleep 1; b=$(cpu_line)
  awk -v a="$a" -v b="$b" -v n="$(nproc)" 'BEGIN {split(a, x, " "); split(b, y, " ");
    d = y[2] - x[2]; printf "%d", (d > 0 ? 100 * n * (y[1] - x[1]) / d + 0.5 : 0)}'
}
load_note=""
note_load() { # label: waits up to QUIET_WAIT s for quiet, then logs what it saw
  local t0 o waited=0
  t0=$(stamp); o=$(others_busy)
  while [ "$o" -gt 10 ] && [ $(( $(stamp) - t0 )) -lt "$QUIET_WAIT" ]; do sleep 4; o=$(others_busy); waited=1; done
  load_note=$(printf 'others %d.%02d cores' $((o / 100)) $((o % 100)))
  printf '%s: other jobs busy %d.%02d cores before the run (loadavg %s)%s\n' "$1" $((o / 100)) $((o % 100)) \
    "$(cut -d' ' -f1-3 /proc/loadavg)" "$([ $waited = 1 ] && echo ", waited $(( $(stamp) - t0 )) s")" >>"$RESULTS/load.txt"
}
cpu_ticks() { # pid: utime + stime of its session (the server's threads and any -tp ranks), in ticks
  local p t=0 x
  for p in $(pgrep -s "$1" 2>/dev/null || echo "$1"); do
    x=$(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0); t=$((t + x))
  done
  echo "$t"
}
hz=$(getconf CLK_TCK)

run_load() { # name, label, concurrency, tag (of the file name), serve_load.py arguments...
  local name=$1 label=$2 c=$3 tag=$4; shift 4
  local pid=${srv_pid[$name]} out=$RESULTS/run-$name-c$c-$tag.json others=() t0=() t1=() k busy=""
  note_load "$label c=$c $tag"
  for k in "${!srv_pid[@]}"; do if [ "$k" != "$name" ]; then others+=("$k"); fi; done
  for k in "${others[@]}"; do t0+=("$(cpu_ticks "${srv_pid[$k]}")"); done
  local s0 m0; s0=$(cpu_ticks "$pid"); m0=$(cpu_line)
  python3 benches/serve_load.py --port "${srv_port[$name]}" --concurrency "$c" --vocab "$vocab" \
    --timeout "$TIMEOUT" --label "$label" "$@" \
    --note "$load_note" >"$out" || echo "   $label c=$c: some requests failed (see $out)" >&2
  local s1 m1; s1=$(cpu_ticks "$pid"); m1=$(cpu_line)
  for k in "${!others[@]}"; do
    busy+=", idle ${others[$k]} used $(awk -v a="${t0[$k]}" -v b="$(cpu_ticks "${srv_pid[${others[$k]}]}")" -v hz="$hz" 'BEGIN {printf "%.1f", (b - a) / hz}') s CPU"
  done
  local cpu_s machine; cpu_s=$(awk -v a="$s0" -v b="$s1" -v hz="$hz" 'BEGIN {printf "%.1f", (b - a) / hz}')
  machine=$(awk -v a="$m0" -v b="$m1" -v n="$(nproc)" 'BEGIN {split(a, x, " "); split(b, y, " ");
    d = y[2] - x[2]; printf "%.2f", (d > 0 ? n * (y[1] - x[1]) / d : 0)}')
  printf '   %s: server used %s s CPU%s; the whole machine was busy %s cores on average\n' \
    "$label c=$c" "$cpu_s" "$busy" "$machine" >>"$RESULTS/load.txt"
  [ -s "$out" ] || die "serve_load.py printed nothing for $label c=$c (server log: $RESULTS/$name.log)"
  # the cores the server kept busy (its CPU time over the run's wall time) and the whole
  # machine's busy cores over the run join the note: machine minus server (minus the load
  # generator's few percent) is what other jobs took during the run
  python3 -c 'import json, sys; r = json.loads(open(sys.argv[1]).read()); r["server_cpu_s"] = float(sys.argv[2])
r["machine_busy_cores"] = float(sys.argv[3])
r["note"] += ", server %.2f, machine %.2f cores" % (r["server_cpu_s"] / r["wall_s"], r["machine_busy_cores"]) if r["wall_s"] else ""
print(json.dumps(r))' "$out" "$cpu_s" "$machine" >>"$RESULTS/results.jsonl"
  tail -1 "$RESULTS/results.jsonl" >"$out"
  python3 -c 'import json, sys; r = json.loads(open(sys.argv[1]).read())
mt = r.get("workload") == "multiturn"
t1 = r["turns"][0] if mt and r["turns"] else {}
print("   %-14s c=%-3d %2d/%-2d ok  %7.2f tok/s  TTFT p50 %8.1f p99 %8.1f ms%s  ITL p50 %7.1f p99 %7.1f ms  (%s)%s" % (
    r["label"], r["concurrency"], r["ok"], r["requests"], r["output_tok_s"] or 0, r["ttft_ms"]["p50"] or 0,
    r["ttft_ms"]["p99"] or 0, " (turn 1 p50 %.1f, follow-ups p50 %.1f; cached %s of %d prompt tokens)" % (
        t1.get("ttft_ms_p50") or 0, r["ttft_followup_ms"]["p50"] or 0, "?" if r["cached_tokens"] is None else r["cached_tokens"], r["prompt_tokens"]) if mt else "",
    r["itl_ms"]["p50"] or 0, r["itl_ms"]["p99"] or 0, r["note"],
    "  ERRORS: %s" % r["errors"] if r["errors"] else ""))' "$out" >&2
  tail -1 "$RESULTS/load.txt" >&2
}
loom_load_args=(--logprobs)  # loom sends a chunk per token only with logprobs when it has no tokenizer
load_args() { # engine: its serve_load.py arguments, in the array a
  a=()
  if [[ $1 == loom* ]]; then a=("${loom_load_args[@]}"); fi
  # multi-turn: llama-server's generated ids come in "__verbose" (loom's in its logprobs)
  if [ "$WORKLOAD" = multiturn ] && [ "$1" = llama-server ] && [ "$ANSWER" = generated ]; then a+=(--verbose-ids); fi
  return 0
}

# --- concurrency levels: loom and llama-server taking turns -----------------------------------
if [ -n "$ENGINES" ]; then
  phase "starting the servers"
  for e in $ENGINES; do
    case $e in
      loom) start_loom loom -t "$THREADS" --max-num-seqs "$SLOTS" --max-model-len "$CTX" ;;
      loom-uncached) start_loom loom-uncached -t "$THREADS" --max-num-seqs "$SLOTS" --max-model-len "$CTX" \
        --no-enable-prefix-caching ;;
      llama-server) start_llama llama-server -t "$THREADS" -tb "$THREADS" -np "$SLOTS" -c $((SLOTS * CTX)) --cont-batching ;;
    esac
  done
  for e in $ENGINES; do  # warm-up: first touches of weights and buffers, not measured
    # (multi-turn: a random prompt, no prefix shared with any system prompt)
    load_args "$e"
    python3 benches/serve_load.py --port "${srv_port[$e]}" --concurrency 1 --requests 1 --prompt-len "$PROMPT_LEN" \
      --output-len 8 --seed 0 --vocab "$vocab" --timeout "$TIMEOUT" --label "$e warm-up" "${a[@]}" >"$RESULTS/warmup-$e.json" \
      || { cat "$RESULTS/warmup-$e.json" >&2; die "$e's warm-up request failed (log: $RESULTS/$e.log)"; }
  done
  phase_end "server start-up and warm-up"
  k=0
  for c in $CONCURRENCY; do
    phase "concurrency $c"
    n=${REQUESTS:-$(( 2 * c < 4 ? 4 : 2 * c > 16 ? 16 : 2 * c ))}
    order=$ENGINES
    [ $((k % 2)) = 0 ] || order=$(echo "$ENGINES" | tr ' ' '\n' | tac | paste -sd' ')
    for e in $order; do
      load_args "$e"
      if [ "$WORKLOAD" = multiturn ]; then
        run_load "$e" "$e" "$c" multiturn --multi-turn --users $(( USERS > c ? USERS : c )) --turns "$TURNS" \
          --system-len "$SYSTEM_LEN" --user-len "$USER_LEN" --output-len "$OUTPUT_LEN" --answer "$ANSWER" \
          --dump "$RESULTS/requests-$e-c$c.jsonl" "${a[@]}"
      else
        run_load "$e" "$e" "$c" "p$PROMPT_LEN" --requests "$n" --prompt-len "$PROMPT_LEN" --output-len "$OUTPUT_LEN" "${a[@]}"
      fi
    done
    k=$((k + 1))
    phase_end "concurrency $c"
  done
  if [ "$WORKLOAD" = multiturn ] && [ "$NEW_REQUESTS" -gt 0 ]; then
    # the yardstick of a follow-up turn: prefilling only its new tokens, from nothing cached (a
    # fresh random prompt of USER_LEN + OUTPUT_LEN ids, no prefix shared with anything sent)
    phase "new-tokens-only prefill: $((USER_LEN + OUTPUT_LEN)) token ids, concurrency 1"
    for e in $ENGINES; do
      load_args "$e"
      run_load "$e" "$e" 1 "new$((USER_LEN + OUTPUT_LEN))" --workload new-tokens-prefill --requests "$NEW_REQUESTS" \
        --prompt-len $((USER_LEN + OUTPUT_LEN)) --output-len 4 --seed 7 "${a[@]}"
    done
    phase_end "new-tokens-only prefill"
  fi
  for e in $ENGINES; do stop_server "$e"; done
fi

# --- long prompts: loom -tp 2, sequence parallelism off and on ---------------------------------
if [ "$LONG_PROMPT" -gt 0 ]; then
  rank_threads=$(( THREADS > 1 ? THREADS / 2 : 1 ))
  for sp in off on; do
    name=loom-tp2 label="loom tp2" spa=()
    if [ $sp = on ]; then name=loom-tp2-sp label="loom tp2 + SP" spa=(--enable-sequence-parallel); fi
    phase "$label, prompt $LONG_PROMPT"
    start_loom "$name" -tp 2 --threads "$rank_threads" --max-num-seqs "$LONG_CONCURRENCY" \
      --max-model-len $((LONG_PROMPT + LONG_OUTPUT)) "${spa[@]}"
    python3 benches/serve_load.py --port "${srv_port[$name]}" --concurrency 1 --requests 1 --prompt-len 16 \
      --output-len 4 --seed 0 --vocab "$vocab" --timeout "$TIMEOUT" --label "$label warm-up" "${loom_load_args[@]}" \
      >"$RESULTS/warmup-$name.json" || { cat "$RESULTS/warmup-$name.json" >&2; die "$name's warm-up request failed"; }
    run_load "$name" "$label" "$LONG_CONCURRENCY" "p$LONG_PROMPT" --requests "$LONG_REQUESTS" --prompt-len "$LONG_PROMPT" \
      --output-len "$LONG_OUTPUT" "${loom_load_args[@]}"
    stop_server "$name"
    phase_end "$label"
  done
fi

printf '%s\n' "${timings[@]}" >"$RESULTS/timings.txt"
{
  sed 's/^/    /' "$RESULTS/info.txt"
  echo
  [ ! -s "$RESULTS/results.jsonl" ] || python3 benches/serve_load.py --report "$RESULTS/results.jsonl" --base llama-server
} | tee "$RESULTS/report.md"
echo >&2
echo "timings:" >&2; sed 's/^/  /' "$RESULTS/timings.txt" >&2
echo "raw outputs: $RESULTS" >&2
exit 0
}

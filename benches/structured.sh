#!/usr/bin/env bash
# Structured output benchmark (issue 28), in one job:
#   1. the mask's cost per decoding step: `loom bench grammar` on three real vocabularies,
#      32k (Llama 2, tests/data/tokenizers/llama2), 128k (Llama 3) and 256k (Command-R), the
#      last two from the vocabulary-only GGUF files in llama.cpp's source tree
#      (benches/grammar_vocabs.py); for benches/structured/order.schema.json and for any JSON
#      (json.gbnf), each along order.json's bytes, and a random walk through json.gbnf;
#   2. decode throughput with and without the schema on the Llama-3.2-1B shape (bf16 random
#      weights, Llama 3's vocabulary), `loom serve` against llama.cpp's `llama-server` (the same
#      shape and random weights as a GGUF, Llama 3's tokenizer copied in from
#      ggml-vocab-llama-bpe.gguf), both with --threads THREADS and one slot, the same requests
#      (benches/structured_load.py: llama-server's top-level `json_schema` field, which loom
#      takes too), greedy and at temperature 1, the servers taking turns.
#
# Usage: benches/structured.sh [LOOM_BINARY|BUILD_DIR]   (default build/loom; built if missing)
# Knobs: THREADS=2 ROUNDS=2 MAX_TOKENS=96 TEMPS=0,1 ENGINES="loom llama-server"
#        PY=python3 with transformers, tokenizers and gguf (default: a venv in build-bench)
# Raw outputs: build-bench/results-structured-<date>/ (report.md is what it prints).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
source benches/common.sh
loom=${1:-build/loom}
[ -d "$loom" ] && loom=$loom/loom
THREADS=${THREADS:-2} ROUNDS=${ROUNDS:-2} MAX_TOKENS=${MAX_TOKENS:-96} TEMPS=${TEMPS:-0,1}
ENGINES=${ENGINES-loom llama-server}
bench=$root/build-bench
RESULTS=${RESULTS:-$bench/results-structured-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$RESULTS"
loom_prepare
llama_cpp_source
models=$lcpp/models

py=${PY:-$bench/venv-structured/bin/python}
if ! "$py" -c 'import transformers, tokenizers, gguf, jsonschema, numpy' 2>/dev/null; then
  phase "venv with transformers, tokenizers, jsonschema and llama.cpp's gguf-py in $bench/venv-structured"
  python3 -m venv "$bench/venv-structured"
  nice -n 10 "$bench/venv-structured/bin/pip" install -q transformers tokenizers jsonschema numpy sentencepiece \
    "$lcpp/gguf-py" >"$bench/venv-structured.log" 2>&1 || die "pip install failed (log: $bench/venv-structured.log)"
  py=$bench/venv-structured/bin/python
  phase_end "venv"
fi

# --- vocabularies ------------------------------------------------------------------------------
if [ ! -s "$bench/vocab-256k/tokenizer.json" ]; then
  phase "tokenizers of 128k and 256k tokens from llama.cpp's vocabulary GGUFs"
  "$py" benches/grammar_vocabs.py "$models" configs/llama-3.2-1b.json "$bench" 2>"$RESULTS/vocabs.log" \
    || { tail -5 "$RESULTS/vocabs.log" >&2; die "benches/grammar_vocabs.py failed"; }
  phase_end "vocabularies"
fi
mkdir -p "$bench/vocab-32k"
cp tests/data/tokenizers/llama2/tokenizer.json "$bench/vocab-32k/"
"$py" -c "import json; c = json.load(open('configs/llama-3.2-1b.json')); c.update(vocab_size=32000, bos_token_id=1, eos_token_id=2); json.dump(c, open('$bench/vocab-32k/config.json', 'w'))"

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
{
  echo "date: $(date -Is); cpu: $cpu ($(nproc) cores online)"
  echo "loom: $loom_src (git $(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
  echo "llama.cpp: $llama_version"
} | tee "$RESULTS/report.md"

# --- 1. mask cost per step ---------------------------------------------------------------------
s=benches/structured
for v in 32k 128k 256k; do
  for job in "--json-schema $s/order.schema.json --text $s/order.json" "--grammar $s/json.gbnf --text $s/order.json" \
    "--grammar $s/json.gbnf --num-tokens 512"; do
    echo "### vocabulary $v: loom bench grammar $job" | tee -a "$RESULTS/report.md"
    "$loom" bench grammar -m "$bench/vocab-$v" --load-format dummy $job 2>"$RESULTS/grammar-$v.log" \
      | tee -a "$RESULTS/report.md" || die "loom bench grammar failed (log: $RESULTS/grammar-$v.log)"
  done
done

# --- 2. constrained and free decode, loom and llama-server ---------------------------------------
[ -n "$ENGINES" ] || exit 0
servers=()
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
wait_up() { for _ in $(seq 600); do curl -sf "$1/health" >/dev/null && return; sleep 1; done; die "$2 did not start"; }
if [[ " $ENGINES " == *" loom "* ]]; then
  "$loom" serve -m "$bench/vocab-128k" --load-format dummy --dtype bfloat16 --threads "$THREADS" --port 18091 \
    --max-num-seqs 1 --max-model-len 1024 2>"$RESULTS/loom-serve.log" &
  pids+=($!)
  wait_up http://127.0.0.1:18091 "loom serve"
  servers+=(loom=http://127.0.0.1:18091)
fi
if [[ " $ENGINES " == *" llama-server "* ]]; then
  llama_server_build
  gguf=$bench/gguf/llama-3.2-1b-random-bf16.gguf
  gguf_tok=$bench/gguf/llama-3.2-1b-random-bf16-llama3vocab.gguf
  if [ ! -s "$gguf" ]; then
    phase "writing the random-weight bf16 GGUF of configs/llama-3.2-1b.json"
    mkdir -p "$bench/gguf"
    nice -n 10 "$py" benches/make_gguf.py configs/llama-3.2-1b.json --bf16 "$gguf.tmp" && mv "$gguf.tmp" "$gguf"
    phase_end "GGUF writing"
  fi
  if [ ! -s "$gguf_tok" ] || [ "$gguf_tok" -ot "$gguf" ]; then
    phase "copying it with Llama 3's tokenizer (ggml-vocab-llama-bpe.gguf's tokenizer.* keys)"
    nice -n 10 "$py" - "$gguf" "$models/ggml-vocab-llama-bpe.gguf" "$gguf_tok.tmp" <<'PYEOF' 2>"$RESULTS/gguf-vocab.log" \
      || { tail -5 "$RESULTS/gguf-vocab.log" >&2; die "writing $gguf_tok failed"; }
import sys
import gguf
from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata
src, vocab, dst = sys.argv[1:4]
reader, vr = gguf.GGUFReader(src), gguf.GGUFReader(vocab)
arch = reader.get_field(gguf.Keys.General.ARCHITECTURE).contents()
new = {}
for name, f in vr.fields.items():
    if name.startswith("tokenizer."):
        t = f.types[0]
        new[name] = MetadataDetails(t, f.contents(), sub_type=f.types[-1] if t == gguf.GGUFValueType.ARRAY else None)
copy_with_new_metadata(reader, gguf.GGUFWriter(dst, arch), new, [])
PYEOF
    mv "$gguf_tok.tmp" "$gguf_tok"
    phase_end "GGUF tokenizer copy"
  fi
  "$lsdir/bin/llama-server" -m "$gguf_tok" -t "$THREADS" -tb "$THREADS" -np 1 -c 1024 --port 18092 \
    >"$RESULTS/llama-server.log" 2>&1 &
  pids+=($!)
  wait_up http://127.0.0.1:18092 llama-server
  servers+=(llama-server=http://127.0.0.1:18092)
fi
echo "### decode with and without benches/structured/order.schema.json (Llama-3.2-1B shape, bf16 random weights, Llama 3 vocabulary, $THREADS threads)" | tee -a "$RESULTS/report.md"
"$py" benches/structured_load.py benches/structured/order.schema.json "$ROUNDS" "$MAX_TOKENS" "$TEMPS" "${servers[@]}" \
  >"$RESULTS/load.jsonl" || die "structured_load.py failed (output: $RESULTS/load.jsonl)"
sed -n '/^| server/,$p' "$RESULTS/load.jsonl" | tee -a "$RESULTS/report.md"
echo "raw: $RESULTS" >&2

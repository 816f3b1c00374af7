#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (build-fuzz/) and runs each for N seconds (default
# 60) on a seed corpus of the repo's own model files. Crashes leave their input in build-fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
LOOM_WITH_FUZZ=1 scripts/install-deps.sh
# the generic kernels alone, and line tables for debug information: the parsers are what is
# fuzzed, and the kernels' other variants took most of the build
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DLOOM_FUZZ=ON -DLOOM_CPU_GENERIC_ONLY=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target fuzz_safetensors fuzz_gguf fuzz_config fuzz_tokenizer fuzz_quant fuzz_request fuzz_template \
  fuzz_expert_load fuzz_grammar fuzz_grammar_ambiguous fuzz_tool_calls fuzz_image
for t in safetensors gguf config tokenizer quant request template expert_load grammar grammar_ambiguous tool_calls image; do
  corpus=build-fuzz/corpus-$t
  mkdir -p "$corpus"
  case $t in
    safetensors) cp tests/golden/*/golden.safetensors models/stories260K/model.safetensors "$corpus/" 2>/dev/null || true
                 cp fuzz/regressions/safetensors-* "$corpus/"
                 for f in tests/golden/*/model.safetensors; do cp "$f" "$corpus/$(basename "$(dirname "$f")").st"; done ;;
    gguf) cp fuzz/seeds/gguf-*.gguf fuzz/regressions/gguf-* "$corpus/" ;;
    config) for f in tests/golden/*/config.json models/stories260K/config.json configs/*.json fuzz/seeds/config-*.json fuzz/regressions/config-*.json; do
              cp "$f" "$corpus/$(echo "$f" | tr / _)"; done ;;
    tokenizer) cp models/stories260K/tokenizer.json "$corpus/stories.json" ;;
    quant) cp fuzz/seeds/quant-*.safetensors "$corpus/" ;;
    template) # each published template, a NUL, then one of its cases' contexts
      for d in tests/data/templates/*/; do
        [ -f "$d/template.jinja" ] || continue
        python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))[-1]["context"]), end="")' "$d/cases.json" >"$corpus/ctx.json"
        { cat "$d/template.jinja"; printf '\0'; cat "$corpus/ctx.json"; } >"$corpus/$(basename "$d")"
      done
      rm -f "$corpus/ctx.json" ;;
    request) cp fuzz/seeds/request-*.bin fuzz/regressions/request-*.bin "$corpus/" ;;
    expert_load) cp fuzz/seeds/expert-load-*.json "$corpus/" ;;
    grammar) cp fuzz/seeds/grammar-*.bin fuzz/regressions/grammar-*.bin "$corpus/" ;;
    grammar_ambiguous) cp fuzz/seeds/ambiguous-*.bin "$corpus/" ;;
    tool_calls) cp fuzz/seeds/tool-calls-* "$corpus/" ;;
    image) cp fuzz/seeds/image-* "$corpus/" ;;
  esac
  echo "fuzz_$t: ${secs}s"
  if ! (cd build-fuzz && ./fuzz_$t -max_total_time="$secs" -max_len=65536 -rss_limit_mb=4096 "corpus-$t" > "fuzz-$t.log" 2>&1); then
    tail -n 60 "build-fuzz/fuzz-$t.log"
    exit 1
  fi
  tail -n 1 "build-fuzz/fuzz-$t.log"
done

#!/usr/bin/env bash
# JSON Schema coverage on JSONSchemaBench (guidance-ai/jsonschemabench: ~9,500 real schemas from
# GitHub, Kubernetes, Snowplow, JSON Schema Store, the Washington Post and Glaive's function
# calls), which this repository does not carry: give its checkout.
#   1. every schema goes through loom's converter (tests/test_structured --corpus): converted or
#      refused, and why (the keyword each refusal names is counted);
#   2. every converted schema gets one sentence sampled under its mask from stories260K and from
#      the random-weight golden llama (temperature 1, at most 384 tokens);
#   3. tests/schema_check.py validates each finished sentence against its schema with
#      Python's jsonschema and prints, per dataset: schemas, converted, outputs finished, valid.
#
# Usage: benches/schema_coverage.sh JSONSCHEMABENCH_DIR [BUILD_DIR]   (default build/); the
# directory is a checkout of guidance-ai/jsonschemabench or a bare clone of it.
# Needs python3 with jsonschema (PY=...; default .venv/bin/python, which scripts/test.sh makes).
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:?usage: benches/schema_coverage.sh JSONSCHEMABENCH_DIR [BUILD_DIR]}
build=${2:-build}
py=${PY:-.venv/bin/python}
out=${RESULTS:-build-bench/results-schema-coverage-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
[ -x "$build/test_structured" ] || cmake --build "$build" --target test_structured -j2
"$py" - "$src" "$out/corpus.jsonl" <<'PYEOF'
import json, os, subprocess, sys
src, dst = sys.argv[1:3]
if os.path.isdir(os.path.join(src, "data")):  # a checkout
    names = [f"{d}/{n}" for d in sorted(os.listdir(f"{src}/data")) for n in sorted(os.listdir(f"{src}/data/{d}"))]
    read = lambda n: open(f"{src}/data/{n}").read()
else:  # a bare repository (git clone --mirror)
    names = [n[5:] for n in subprocess.run(["git", "-C", src, "ls-tree", "-r", "--name-only", "HEAD", "data/"],
                                           capture_output=True, text=True, check=True).stdout.split()]
    read = lambda n: subprocess.run(["git", "-C", src, "show", f"HEAD:data/{n}"], capture_output=True, text=True).stdout
with open(dst, "w") as f:
    for n in names:
        if not n.endswith(".json"):
            continue
        try:
            schema = json.loads(read(n))
        except ValueError:
            continue
        f.write(json.dumps({"name": n, "schema": schema}) + "\n")
PYEOF
echo "$(wc -l <"$out/corpus.jsonl") schemas; generating (log: $out/generate.log)" >&2
"$build/test_structured" --corpus "$out/corpus.jsonl" --out "$out/outputs.jsonl" >"$out/generate.log" 2>&1 || true
tail -2 "$out/generate.log" >&2
"$py" tests/schema_check.py "$out/corpus.jsonl" "$out/outputs.jsonl" | tee "$out/report.md"

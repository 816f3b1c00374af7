#!/usr/bin/env bash
# The main job: build loom and run it on the embedded default model (stories260K, greedy).
# Extra arguments go to `loom run`.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(scripts/build.sh | tail -n 1)
exec "$dir/loom" run "$@"

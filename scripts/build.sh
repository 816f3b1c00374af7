#!/usr/bin/env bash
# Configures and builds loom into build/ (or build-asan/ with --sanitize). Installs the
# Debian packages first. Used by run.sh, test.sh and CI.
set -euo pipefail
cd "$(dirname "$0")/.."
"$PWD/scripts/install-deps.sh"
dir=build
args=(-DCMAKE_BUILD_TYPE=Release)
if [ "${1:-}" = --sanitize ]; then
  dir=build-asan
  args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_SANITIZE=ON)
fi
cmake -S . -B "$dir" "${args[@]}" >/dev/null
cmake --build "$dir" -j "$(nproc)"
echo "$dir"

#!/usr/bin/env bash
# Configures and builds loom into build/ (or build-asan/ with --sanitize). Installs the
# Debian packages first. Used by run.sh, test.sh and CI. LOOM_NATIVE=ON tunes all code for this
# machine (-march=native); the default build runs on any CPU and picks its kernels at run time.
set -euo pipefail
cd "$(dirname "$0")/.."
"$PWD/scripts/install-deps.sh"
dir=build
args=(-DCMAKE_BUILD_TYPE=Release -DLOOM_NATIVE="${LOOM_NATIVE:-OFF}")
if [ "${1:-}" = --sanitize ]; then
  dir=build-asan
  # -g1: line tables, which the sanitizers' reports need, without the variable tracking that
  # made each kernel variant take 58 s to compile instead of 37 (variant.c, gcc 12)
  args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DLOOM_SANITIZE=ON
    -DLOOM_NATIVE="${LOOM_NATIVE:-OFF}")
fi
# test.sh names the Python with the openai client; a build without it (run.sh) keeps what the
# build directory had
[ -n "${LOOM_TEST_PYTHON:-}" ] && args+=(-DLOOM_TEST_PYTHON="$LOOM_TEST_PYTHON")
[ -n "${LOOM_TEST_VISION_PYTHON:-}" ] && args+=(-DLOOM_TEST_VISION_PYTHON="$LOOM_TEST_VISION_PYTHON")
cmake -S . -B "$dir" "${args[@]}" >/dev/null
cmake --build "$dir" -j "$(nproc)"
echo "$dir"

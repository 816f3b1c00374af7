#!/usr/bin/env bash
# Cross-builds loom for aarch64 into build-aarch64/ (Debian's gcc-aarch64-linux-gnu and arm64
# multiarch libraries, no MPI backend, no hwloc; see cmake/aarch64-linux-gnu.cmake) and runs tests under
# qemu-aarch64: test_golden, test_stories, test_parallel, test_quant, test_gguf and test_row_bits (whose
# linears run on OpenBLAS in this build), once per CPU variant (generic, neon, neondot: qemu's
# default CPU has the dot product), or the tests that a ctest -R regex given as argument picks.
# Installs the Debian packages first (adds the arm64 architecture to dpkg).
set -euo pipefail
cd "$(dirname "$0")/.."
LOOM_WITH_AARCH64=1 scripts/install-deps.sh
dir=build-aarch64
cmake -S . -B "$dir" -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DCMAKE_BUILD_TYPE=Release \
      -DLOOM_NATIVE=OFF -DLOOM_MPI=OFF -DLOOM_DNNL=OFF -DLOOM_HWLOC=OFF >/dev/null
cmake --build "$dir" -j "$(nproc)"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# Under qemu, OpenMP threads that spin at barriers slow each other down badly (test_stories:
# ~50 s spinning, ~20 s sleeping).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
ctest --test-dir "$dir" -R "${1:-^(test_golden|test_stories|test_parallel|test_quant|test_gguf|test_row_bits)(\.|\$)}" --output-on-failure \
  -j2

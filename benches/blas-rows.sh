#!/usr/bin/env bash
# Does OpenBLAS's sgemm give a row the same bits in calls of any row count? (It need not: that
# is why loom's attention sums in its own order, docs/DESIGN.md 4.7.) Runs benches/blas_rows.c
# as the machine is, then with OPENBLAS_CORETYPE set to a name OpenBLAS does not know, which
# on an Emerald Rapids Xeon moves it from its Prescott kernels to its Cooperlake ones.
# Usage: benches/blas-rows.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
mkdir -p build-bench
gcc -O2 benches/blas_rows.c -o build-bench/blas_rows $(pkg-config --cflags --libs openblas)
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1) ($(grep -m1 '^cpu family' /proc/cpuinfo | sed 's/.*: //'), model $(grep -m1 '^model\s' /proc/cpuinfo | sed 's/.*: //'))"
echo "== OPENBLAS_CORETYPE ${OPENBLAS_CORETYPE:-unset}"
OMP_NUM_THREADS=1 build-bench/blas_rows
echo "== OPENBLAS_CORETYPE=NoSuchCore"
OPENBLAS_CORETYPE=NoSuchCore OMP_NUM_THREADS=1 build-bench/blas_rows

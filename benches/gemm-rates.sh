#!/usr/bin/env bash
# Prefill GEMM rates beside loom's OpenBLAS: oneDNN (Debian's libdnnl-dev, installed here if
# missing) in f32, bf16 and int8, on the 1B shape's 512 x 2048 x 2048 product, 2 threads.
# Prints the CPU, the OpenBLAS kernels in use (OPENBLAS_CORETYPE, if the machine sets it) and
# oneDNN's implementation of each. Usage: benches/gemm-rates.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if ! dpkg -s libdnnl-dev >/dev/null 2>&1; then
  SUDO=; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends libdnnl-dev >/dev/null
fi
mkdir -p build-bench
gcc -O2 -fopenmp benches/gemm_rates.c -o build-bench/gemm_rates $(pkg-config --cflags --libs openblas) -ldnnl
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset)}"
OMP_NUM_THREADS=${THREADS:-2} build-bench/gemm_rates

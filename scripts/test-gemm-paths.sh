#!/usr/bin/env bash
# The invariant tests again under each kernel path oneDNN has on this CPU below the one it
# picks (ONEDNN_MAX_CPU_ISA caps it): inside a library the order of a sum is the library's, and
# it changes with the ISA, so a path this CPU can take but did not must not hide a broken
# invariant (docs/DESIGN.md 4.7). scripts/test.sh ran the suite on the path oneDNN picks.
# OpenBLAS computes no product an invariant rests on in this build, so its core types
# (OPENBLAS_CORETYPE) need no run. Usage: scripts/test-gemm-paths.sh [build-dir] (after
# scripts/test.sh has built it).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
# "CPU: ..., kernels avx512bf16 (this CPU runs: ...); GEMMs: OpenBLAS ..., oneDNN cpu_isa_avx512_core_amx"
where=$("$dir/loom" bench machine --threads 1 | head -n 1)
echo "$where"
best=${where##*oneDNN cpu_isa_}
variant=${where#*kernels }
variant=${variant%% *}
[ "$best" != "$where" ] || { echo "test-gemm-paths: this build has no oneDNN; nothing to do"; exit 0; }
# oneDNN's x86 ISAs in order; its f32 and bf16 matmuls change kernels at each but
# avx512_core_vnni, which adds int8 products only (loom computes those itself): no run there
isas=(avx2 avx512_core avx512_core_vnni avx512_core_bf16 avx512_core_amx)
tests="^(test_row_bits\..*|test_parallel\.$variant|test_spec\.$variant|test_pipeline|test_expert|test_prefix_cache|test_data_parallel)\$"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
for isa in "${isas[@]}"; do
  [ "$isa" = "$best" ] && exit 0
  [ "$isa" = avx512_core_vnni ] && continue
  echo "== ONEDNN_MAX_CPU_ISA=$isa"
  ONEDNN_MAX_CPU_ISA=${isa^^} ctest --test-dir "$dir" -R "$tests" --output-on-failure -j2
done
echo "test-gemm-paths: oneDNN's best ISA here, $best, is not one this script knows; the caps below it ran"

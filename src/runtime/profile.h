/* Profiling hooks of loom's own benchmarks and tests (tools/bench.c, tests/test_expert.c), kept
 * out of loom.h: a program on the library reads loom_engine_get_stats instead. */
#ifndef LOOM_RUNTIME_PROFILE_H
#define LOOM_RUNTIME_PROFILE_H
#include "loom.h"

/* Times every op kind of the forward passes from now on (on) or not, and resets the statistics
 * (loom_engine_reset_stats). */
void engine_set_profile(loom_engine *e, bool on);
/* The time by op kind and in collectives, the pipeline's waits and the experts' report. */
void engine_print_profile(const loom_engine *e, FILE *f);
/* The experts' GEMM rate on this rank, and under expert parallelism the rows each rank received
 * in each MoE layer (the load imbalance) and the bytes between ranks, since the reset
 * (per_layer: a line per layer, else the summary). Every rank holds every rank's counts. */
void engine_print_experts(const loom_engine *e, FILE *f, bool per_layer);
/* Under expert parallelism: rows `rank` of this stage received in this stage's MoE layer number
 * `layer` (0: its first) since the reset; -1 for a layer or rank it does not have. */
long engine_expert_rows(const loom_engine *e, int layer, int rank);

#endif

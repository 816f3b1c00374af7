/* Where expert parallelism puts each expert (placement.c): contiguous ranges by default, or
 * balanced by a measured load profile (EPLB), per mixture-of-experts layer. */
#ifndef LOOM_PLAN_PLACEMENT_H
#define LOOM_PLAN_PLACEMENT_H
#include <stdint.h>

#include "util/err.h"

/* A load profile (loom_expert_load in loom.h): for each MoE layer, named by its module
 * ("model.layers.3.mlp"), the tokens routed to each of its n_experts experts. */
struct loom_expert_load {
    int n_layers, n_experts;
    char **names;  /* [n_layers] */
    double *count; /* [n_layers][n_experts] */
};
typedef loom_expert_load expert_load;

/* The placement of one layer's n experts on `ranks` ranks: owner[e] holds expert e, as its
 * local[e]-th expert (each rank's experts in increasing index). With a load row (load, NULL:
 * none), experts go heaviest first to the least-loaded rank that has room, each rank holding
 * as many experts as the contiguous split gives it (so memory stays balanced): DeepSeek's EPLB
 * packing without redundant copies. */
void placement_make(int n, int ranks, const double *load, int32_t *owner, int32_t *local);
/* The load row of layer `name` in lp (NULL: lp NULL or no such layer). Fails, naming the file's
 * layer, when it counts another number of experts. */
int placement_load_row(const expert_load *lp, const char *name, int n_experts, const double **row, loom_err *err);
/* Rows received per rank over the mean, were every token of the profile row dispatched under
 * this placement: the imbalance `loom plan` reports before and after. Counts (token, expert)
 * pairs, the experts' work. */
double placement_imbalance(const double *load, int n, int ranks, const int32_t *owner);

#endif

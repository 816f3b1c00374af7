/* Where expert parallelism puts each expert (placement.c): contiguous ranges by default, or
 * balanced by a measured load profile (EPLB), with optional redundant copies of the hottest
 * experts, per mixture-of-experts layer. */
#ifndef LOOM_PLAN_PLACEMENT_H
#define LOOM_PLAN_PLACEMENT_H
#include <stdbool.h>
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

/* One layer's placement: every expert has one copy, or several when it is hot and copies are
 * spare. Expert e's copies are [first[e], first[e + 1]); copy c is held by rank owner[c] as its
 * local[c]-th expert (each rank's copies in increasing expert order). */
typedef struct placement {
    int n_experts, n_copies;
    int32_t *first, *owner, *local;
} placement;

/* The placement of n experts on `ranks` ranks. Without a load row (load NULL): contiguous
 * ranges, the first n % ranks ranks one more. With one: the `redundant` hottest experts by load
 * per copy get one more copy each (DeepSeek's EPLB), then copies go heaviest first (an expert's
 * load shared among its copies) to the least-loaded rank with room that holds no copy of that
 * expert yet, each rank holding as many copies as a contiguous split of them gives it (so memory
 * stays balanced). Fails when out of memory, or when redundant copies are asked without a load
 * or beyond one copy of every expert on every rank. */
int placement_make(placement *pl, int n, int ranks, const double *load, int redundant, loom_err *err);
void placement_free(placement *pl);
/* Whether rank holds a copy of expert e. */
bool placement_holds(const placement *pl, int e, int rank);
/* The load row of layer `name` in lp (NULL: lp NULL or no such layer). Fails, naming the file's
 * layer, when it counts another number of experts. */
int placement_load_row(const expert_load *lp, const char *name, int n_experts, const double **row, loom_err *err);
/* The most any rank's copies would compute over the mean, were every token of the profile row
 * dispatched under this placement (an expert's tokens spread evenly over its copies): the
 * imbalance `loom plan` reports before and after. Counts (token, expert) pairs, the experts'
 * work. */
double placement_imbalance(const double *load, const placement *pl, int ranks);

#endif

/* Binding (bind.c): a plan's weights, read for this rank from the model's store. */
#ifndef LOOM_RUNTIME_BIND_H
#define LOOM_RUNTIME_BIND_H
#include "plan/plan.h"

/* Reads, shards, repacks and quantizes the slices p's steps name from ws into the steps'
 * resolved fields (w, bias, norm_w, route_bias, experts; latent attention's transpose of
 * kv_b_proj). progress: a line on stderr per decoder layer bound. A second plan over the same
 * slices (the plain TP plan beside the SP one) reuses what the first made. */
int bind_plan(plan *p, weight_store *ws, bool progress, loom_err *err);

#endif

/* Sequence parallelism's regions, after vLLM's Transformers-backend sequence parallelism (its
 * per-module Region). Between the embedding and the LM head the residual stream holds only
 * this rank's tokens. A region -- a child of a decoder layer that reduces across ranks (a
 * row-parallel linear, or a mixture of experts) -- all-gathers its input, and its reducers skip
 * their all-reduce: their partial sums flow on to the region's exit, which reduce-scatters
 * them. That is only correct if every op between a reducer and the exit commutes with the sum
 * over ranks, which dist.c's rules of partial sums check op by op. */
#include <string.h>

#include "plan/plan_impl.h"
#include "util/err.h"

static bool reduces(const module *m) {
    for (int i = 0; i < m->n_ops; i++) {
        const op *o = &m->ops[i];
        if ((o->kind == OP_LINEAR && o->lin->style == PAR_ROW) || o->kind == OP_MOE ||
            (o->kind == OP_CALL && reduces(o->child)))
            return true;
    }
    return false;
}

static bool sp_is_region(const plan *p, const module *parent, const module *child) {
    return p->o.sp && !strcmp(parent->kind, "decoder_layer") && reduces(child);
}

/* A region sees every token: its (first) input is gathered. */
static int sp_enter(plan *p, const module *m, const op *call, int x, loom_err *err) {
    (void)err;
    const plan_value v = p->values[x];
    return v.rows == ROWS_SHARD ? plan_collective(p, STEP_GATHER_ROWS, call, m, x, v.width, ROWS_TOKENS) : x;
}

/* The exit: the region's output must be the partial sum of its reductions; it is
 * reduce-scattered into this rank's rows of the residual. */
static int sp_exit(plan *p, const module *m, const op *call, int out, loom_err *err) {
    const plan_value v = p->values[out];
    plan_region *r = plan_add_region(p, call, STEP_GATHER_ROWS, STEP_REDUCE_SCATTER);
    if (!r) return -1;
    r->verified = !p->region_unverified;
    p->region_unverified = false;
    if (v.rows != ROWS_TOKENS || v.dist != DIST_PARTIAL)
        return loom_errf(err,
                         "%s: sequence parallelism does not support region %s: its output is not a partial sum "
                         "of its reductions",
                         m->name, call->child->name);
    return plan_collective(p, STEP_REDUCE_SCATTER, call, m, out, v.width, ROWS_SHARD);
}

const region_kind region_sp = {
    .name = "sequence parallel", .is_region = sp_is_region, .enter = sp_enter, .exit = sp_exit};

void sp_check_outside(plan *p, const module *m, const op *o) {
    if (!p->o.sp) return;
    if (o->kind == OP_ATTENTION || o->kind == OP_CONV1D || o->kind == OP_GATED_DELTA || o->kind == OP_SSM_SCAN)
        plan_warn(p, "%s: `%s` outside a region mixes tokens, which sequence parallelism shards there", m->name,
                  op_kind_name(o->kind));
    if (o->kind == OP_CUSTOM && o->custom.cls == LOOM_OP_TOKEN_MIXING)
        plan_warn(p,
                  "%s: `%s` may mix tokens, which sequence parallelism shards outside regions; outputs may be "
                  "incorrect",
                  m->name, o->custom.name);
    if (o->kind == OP_CUSTOM && o->custom.cls == LOOM_OP_OPAQUE)
        plan_warn(p, "%s: could not verify `%s`: outside a region it sees only this rank's tokens", m->name,
                  o->custom.name);
}

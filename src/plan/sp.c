/* Sequence parallelism at plan time, after vLLM's Transformers-backend sequence parallelism (its
 * per-module Region). Between the embedding and the LM head the residual stream holds only
 * this rank's tokens. A region -- a child of a decoder layer that
 * reduces across ranks (a row-parallel linear, or a mixture of experts) -- all-gathers its input, and its reducers skip their all-reduce: their
 * partial sums flow on to the region's exit, which reduce-scatters them. That is only correct
 * if every op between a reducer and the exit commutes with the sum over ranks, which is what
 * sp_output_dist checks op by op: additive ops need every input partial, pass-through ops keep
 * their first input's partial sum, a scaling op may scale exactly one partial input (by a constant,
 * or by a complete value: Qwen2-MoE's sigmoid gate); any other
 * op on a partial sum (a norm, an activation, a residual add with a complete value, a second
 * reduction) is an error naming the op and the module. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
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

bool sp_is_region(const plan *p, const module *parent, const module *child) {
    return p->o.sp && !strcmp(parent->kind, "decoder_layer") && reduces(child);
}

void sp_warn(plan *p, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    for (int i = 0; i < p->n_warnings; i++)
        if (!strcmp(p->warnings[i], buf)) return;
    p->warnings = realloc(p->warnings, (p->n_warnings + 1) * sizeof *p->warnings);
    p->warnings[p->n_warnings++] = strdup(buf);
}

int sp_output_dist(plan *p, const module *m, const op *o, const int *in, loom_err *err) {
    int partial = 0, complete = 0;
    for (int i = 0; i < o->n_in; i++) {
        partial += p->values[in[i]].dist == DIST_PARTIAL;
        complete += p->values[in[i]].dist == DIST_COMPLETE;
    }
    /* an expert-parallel combine's output: every rank's share is already in it */
    if (complete && ((o->kind == OP_LINEAR && o->lin->style == PAR_ROW) || o->kind == OP_MOE))
        return loom_errf(err, "%s: `%s` reduces across ranks a value the experts' combine already completed: the sum "
                              "would count it once per rank", m->name, op_kind_name(o->kind));
    if (!partial) return complete ? DIST_COMPLETE : p->values[in[0]].dist;
    const char *name = op_kind_name(o->kind);
    switch (o->kind) {
    case OP_ADD: /* additive */
        if (partial == o->n_in) return DIST_PARTIAL;
        return loom_errf(err, "%s: `%s` adds a complete value to a partial sum (the sum over ranks would count it "
                              "once per rank)", m->name, name);
    case OP_SPLIT:
    case OP_LOGIT_ROWS: /* pass-through */
        return DIST_PARTIAL;
    case OP_SCALE: /* scaling by a constant */
        return DIST_PARTIAL;
    case OP_SIGMOID_GATE: /* scaling by a complete value: each rank's share scales alike */
        if (p->values[in[1]].dist == DIST_PARTIAL)
            return loom_errf(err, "%s: `%s` gates by a partial sum", m->name, name);
        return DIST_PARTIAL;
    case OP_LINEAR:
        if (o->lin->style == PAR_ROW) return loom_errf(err, "%s: `%s` reduces a partial sum again", m->name, name);
        break;
    case OP_CUSTOM:
        name = o->custom.name;
        switch (o->custom.cls) {
        case LOOM_OP_ADDITIVE:
            if (partial == o->n_in) return DIST_PARTIAL;
            return loom_errf(err, "%s: `%s` adds a complete value to a partial sum", m->name, name);
        case LOOM_OP_PASSTHROUGH:
        case LOOM_OP_SCALING:
            return DIST_PARTIAL;
        case LOOM_OP_OPAQUE: /* as vLLM's Transformers-backend SP does for what it cannot trace: warn, and trust it */
            p->region_unverified = true;
            sp_warn(p, "%s: could not verify that `%s` is compatible with sequence parallelism (an opaque op on a "
                       "partial sum)", m->name, name);
            return DIST_PARTIAL;
        case LOOM_OP_ELEMENTWISE:
        case LOOM_OP_TOKEN_MIXING:
            break;
        }
        break;
    default:
        break;
    }
    return loom_errf(err, "%s: `%s` is applied to a partial sum", m->name, name);
}

int sp_exit_region(plan *p, const module *m, const op *call, int out, loom_err *err) {
    const plan_value v = p->values[out];
    p->regions = realloc(p->regions, (p->n_regions + 1) * sizeof *p->regions);
    p->regions[p->n_regions++] = (plan_region){.mod = call->child, .verified = !p->region_unverified,
                                               .entry = STEP_GATHER_ROWS, .exit = STEP_REDUCE_SCATTER};
    p->region_unverified = false;
    if (v.rows != ROWS_TOKENS || v.dist != DIST_PARTIAL)
        return loom_errf(err, "%s: sequence parallelism does not support region %s: its output is not a partial sum "
                              "of its reductions", m->name, call->child->name);
    return plan_collective(p, STEP_REDUCE_SCATTER, call, m, out, v.width, ROWS_SHARD);
}

void sp_check_outside(plan *p, const module *m, const op *o) {
    if (!p->o.sp || p->in_region) return;
    if (o->kind == OP_ATTENTION)
        sp_warn(p, "%s: `attention` outside a region may mix tokens, which sequence parallelism shards there", m->name);
    if (o->kind == OP_CUSTOM && o->custom.cls == LOOM_OP_TOKEN_MIXING)
        sp_warn(p, "%s: `%s` may mix tokens, which sequence parallelism shards outside regions; outputs may be "
                   "incorrect", m->name, o->custom.name);
    if (o->kind == OP_CUSTOM && o->custom.cls == LOOM_OP_OPAQUE)
        sp_warn(p, "%s: could not verify `%s`: outside a region it sees only this rank's tokens", m->name,
                o->custom.name);
}

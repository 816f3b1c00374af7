/* How each op spreads its output over the ranks (its dist), given its inputs': tensor
 * parallelism's rules (a row-parallel linear's output is a partial sum, a column-parallel one's
 * is sharded), and the rules of partial sums, after _check_partial_output in vLLM's
 * Transformers-backend sequence parallelism: additive ops need every input partial,
 * pass-through ops keep their first input's partial sum, a scaling op may scale exactly one
 * partial input (by a constant, or by a complete value: Qwen2-MoE's sigmoid gate); any other op
 * on a partial sum (a norm, an activation, a residual add with a complete value, a second
 * reduction) is an error naming the op and the module. The region being flattened may decide
 * first (an expert-parallel region's experts). */
#include <string.h>

#include "plan/plan_impl.h"
#include "util/err.h"

/* An op's output dist when an input is a partial sum or complete (DIST_COMPLETE), or -1 with err
 * when the op may not act on it. */
static int partial_dist(plan *p, const module *m, const op *o, const int *in, loom_err *err) {
    int partial = 0, complete = 0;
    for (int i = 0; i < o->n_in; i++) {
        partial += p->values[in[i]].dist == DIST_PARTIAL;
        complete += p->values[in[i]].dist == DIST_COMPLETE;
    }
    /* an expert-parallel combine's output: every rank's share is already in it */
    if (complete && ((o->kind == OP_LINEAR && o->lin->style == PAR_ROW) || o->kind == OP_MOE))
        return loom_errf(err,
                         "%s: `%s` reduces across ranks a value the experts' combine already completed: the sum "
                         "would count it once per rank",
                         m->name, op_kind_name(o->kind));
    if (!partial) return complete ? DIST_COMPLETE : p->values[in[0]].dist;
    const char *name = op_name(o);
    switch (o->kind) {
    case OP_ADD: /* additive */
        if (partial == o->n_in) return DIST_PARTIAL;
        return loom_errf(err,
                         "%s: `%s` adds a complete value to a partial sum (the sum over ranks would count it "
                         "once per rank)",
                         m->name, name);
    case OP_SPLIT:
    case OP_LOGIT_ROWS: return DIST_PARTIAL; /* pass-through */
    case OP_SCALE: return DIST_PARTIAL;      /* scaling by a constant */
    case OP_SIGMOID_GATE:                    /* scaling by a complete value: each rank's share scales alike */
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
        case LOOM_OP_SCALING: return DIST_PARTIAL;
        case LOOM_OP_OPAQUE: /* as vLLM's Transformers-backend SP does for what it cannot trace: warn, and trust it */
            p->region_unverified = true;
            plan_warn(p,
                      "%s: could not verify that `%s` is compatible with sequence parallelism (an opaque op on a "
                      "partial sum)",
                      m->name, name);
            return DIST_PARTIAL;
        case LOOM_OP_ELEMENTWISE:
        case LOOM_OP_TOKEN_MIXING: break;
        }
        break;
    default: break;
    }
    return loom_errf(err, "%s: `%s` is applied to a partial sum", m->name, name);
}

int op_output_dist(plan *p, const module *m, const op *o, const int *in, loom_err *err) {
    int d = p->region->output_dist ? p->region->output_dist(p, m, o, in, err) : DIST_DEFAULT;
    if (d != DIST_DEFAULT) return d;
    if (o->kind == OP_EMBED) return p->o.tp > 1 ? DIST_PARTIAL : DIST_FULL; /* rows outside the shard are zero */
    if (o->kind == OP_INPUT_ROWS) return DIST_FULL;                         /* every rank is given all of them */
    if (o->kind == OP_CONCAT && (p->values[in[0]].dist != DIST_FULL || p->values[in[1]].dist != DIST_FULL))
        return loom_errf(err, "%s: `concat` of values spread over the ranks (each must be whole on every rank)",
                         m->name);
    if (o->kind == OP_MOE && plan_experts_span(&p->o))
        return loom_errf(err,
                         "%s: experts spread over %s run inside a decoder layer's expert region, on this rank's "
                         "tokens",
                         m->name, p->o.ep ? "expert parallelism" : "the replicas");
    for (int i = 0; i < o->n_in; i++)
        if (p->values[in[i]].dist == DIST_COMPLETE) return partial_dist(p, m, o, in, err);
    if (o->kind == OP_LINEAR && p->o.tp > 1) {
        if (p->values[in[0]].dist == DIST_PARTIAL) return partial_dist(p, m, o, in, err);
        return o->lin->style == PAR_ROW ? DIST_PARTIAL : o->lin->style == PAR_REPLICATED ? DIST_FULL : DIST_SHARDED;
    }
    if (o->kind == OP_LINEAR) return DIST_FULL;
    if (o->kind == OP_MOE && p->o.tp > 1 && p->values[in[0]].dist != DIST_PARTIAL) return DIST_PARTIAL;
    d = partial_dist(p, m, o, in, err);
    if (d == DIST_SHARDED && o->kind == OP_RMS_NORM && !o->group && !o->across_ranks)
        return loom_errf(err,
                         "%s: %s normalises over features split across ranks; its statistic would cover only "
                         "this rank's share",
                         m->name, o->weight);
    return d;
}

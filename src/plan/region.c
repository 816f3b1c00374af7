/* The region kinds' table (plan_impl.h's region_kind): which kind a decoder layer's child is,
 * tried in order, and the two kinds defined here. Outside any region (region_plain) a partial
 * sum is completed where it is made. Under plain TP a mixture of experts is a region too
 * (region_moe_reduction): its routed and shared experts' partials are summed before its one
 * all-reduce, as vLLM does, which is also what SP's region does before its reduce-scatter, so
 * the two modes add the same numbers in the same order. */
#include <string.h>

#include "plan/plan_impl.h"
#include "util/err.h"

/* Under TP a partial sum is all-reduced where it is made; under SP the embedding's is
 * reduce-scattered into the residual, and any other is an error: it belongs in a region. */
static int plain_partial(plan *p, const module *m, const op *o, int v, loom_err *err) {
    const plan_value pv = p->values[v];
    if (!p->o.sp) return plan_collective(p, STEP_ALL_REDUCE, o, m, v, pv.width, pv.rows);
    if (o->kind == OP_EMBED) return plan_collective(p, STEP_REDUCE_SCATTER, o, m, v, pv.width, ROWS_SHARD);
    return loom_errf(err, "%s: sequence parallelism cannot place `%s`: it reduces across ranks outside a region",
                     m->name, op_kind_name(o->kind));
}

static int plain_place_inputs(plan *p, const module *m, const op *o, int *in, loom_err *err) {
    (void)in, (void)err;
    sp_check_outside(p, m, o);
    return 0;
}

const region_kind region_plain = {.name = "none", .place_inputs = plain_place_inputs, .partial = plain_partial};

static bool moe_reduction_is_region(const plan *p, const module *parent, const module *child) {
    return p->o.tp > 1 && !p->o.sp && !plan_experts_span(&p->o) && !strcmp(parent->kind, "decoder_layer") &&
           !strcmp(child->kind, "moe");
}

static int moe_reduction_exit(plan *p, const module *m, const op *call, int out, loom_err *err) {
    const plan_value v = p->values[out];
    if (v.dist != DIST_PARTIAL)
        return loom_errf(err, "%s: %s does not end in a partial sum of its experts", m->name, call->child->name);
    return plan_collective(p, STEP_ALL_REDUCE, call, m, out, v.width, v.rows);
}

const region_kind region_moe_reduction = {
    .name = "experts' reduction", .is_region = moe_reduction_is_region, .exit = moe_reduction_exit};

const region_kind *region_of(const plan *p, const module *parent, const module *child) {
    static const region_kind *const kinds[] = {&region_ep, &region_moe_reduction, &region_sp};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (kinds[i]->is_region(p, parent, child)) return kinds[i];
    return NULL;
}

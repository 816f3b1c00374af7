/* Experts across a stage's ranks at plan time. Under --enable-expert-parallel each rank of a
 * stage (its tensor-parallel group, or with data parallelism the tp ranks of every replica:
 * plan_ep_ranks) holds whole experts (placement.c) instead of a share of every expert's
 * features. With data parallelism and without it, each of those dp x tp ranks holds a
 * 1/(dp x tp) share of every expert's features (shard.c; plan_step.experts_sliced). Either way
 * a decoder layer's child holding the experts becomes an expert region that works on this
 * rank's token rows: the rows the sequence-parallel residual already holds, or under plain TP
 * the same rows sliced from the complete hidden state, so that both modes run the same steps on
 * the same rows and agree bit for bit. Inside, the router runs on those rows and the experts'
 * op dispatches each row to the ranks that own its experts and combines what comes back, or
 * gathers every rank's rows and reduce-scatters its partial sums back to their owners
 * (runtime/expert_parallel.c), so its output is DIST_COMPLETE: already summed across ranks.
 *
 * What stays tensor-parallel inside (the shared experts) reads every token: the region's input is
 * all-gathered for it on first use (under plain TP it is the input itself). Its partial sum is
 * completed by a reduce-scatter where it meets this rank's rows, before the complete routed
 * output is added: a complete value added to a partial one would be counted once per rank. At the
 * exit, this rank's complete rows are the residual's shard under SP, and are all-gathered into
 * every token's under plain TP; a partial sum leaving the region is reduced as in any region. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan_impl.h"
#include "util/err.h"

/* The expert a tensor of step d's per-expert layout belongs to: any tensor under the expert's
 * module ("...experts.7.w1.qweight" as well as ".weight"), or -1. */
static int expert_of(const moe_desc *d, const char *name) {
    const char *pattern = d->gate[0] ? d->gate : d->up, *at = strstr(pattern, "%d"); /* (no gate: up's) */
    size_t n = at ? (size_t)(at - pattern) : 0;
    if (!at || strncmp(name, pattern, n) || !isdigit((unsigned char)name[n])) return -1;
    char *end;
    long e = strtol(name + n, &end, 10);
    return *end == '.' && e < d->n_experts ? (int)e : -1;
}

bool ep_foreign_tensor(const plan *p, const char *name) {
    for (int i = 0; p->o.ep && i < p->n_steps; i++) {
        const plan_step *s = &p->steps[i];
        if (s->kind != STEP_EP_MOE || s->op->moe->stacked) continue;
        int e = expert_of(s->op->moe, name);
        if (e >= 0) return !placement_holds(&s->place, e, plan_ep_rank(&p->o));
    }
    return false;
}

static bool holds_experts(const module *m) {
    for (int i = 0; i < m->n_ops; i++)
        if (m->ops[i].kind == OP_MOE) return true;
    return false;
}

/* Warns where expert parallelism has nothing to do. */
void ep_check_model(plan *p, const module *tree) {
    if (p->o.ep && !module_uses(tree, OP_MOE))
        plan_warn(p, "--enable-expert-parallel has no effect: the model has no mixture-of-experts layers");
}

static bool ep_is_region(const plan *p, const module *parent, const module *child) {
    return plan_experts_span(&p->o) && !strcmp(parent->kind, "decoder_layer") && holds_experts(child);
}

/* The entry: the region's input x as this rank's token rows (sliced from every token's under
 * plain TP). */
static int ep_enter(plan *p, const module *m, const op *call, int x, loom_err *err) {
    (void)err;
    plan_region *r = plan_add_region(p, call, STEP_OP, STEP_OP);
    if (!r) return -1;
    r->ep = true;
    p->ep.call = call, p->ep.parent = m;
    const plan_value v = p->values[x];
    if (v.rows == ROWS_SHARD) {
        p->ep.shard_in = x, p->ep.tokens_in = -1;
        return x;
    }
    r->entry = STEP_SLICE_ROWS;
    p->ep.tokens_in = x;
    return p->ep.shard_in = plan_collective(p, STEP_SLICE_ROWS, call, m, x, v.width, ROWS_SHARD);
}

/* An op that reads every token (a tensor-parallel linear, attention, a token-mixing custom op). */
static bool reads_every_token(const op *o) {
    return (o->kind == OP_LINEAR && o->lin->style == PAR_COLUMN) || o->kind == OP_ATTENTION || o->kind == OP_CONV1D ||
           o->kind == OP_GATED_DELTA || o->kind == OP_SSM_SCAN ||
           (o->kind == OP_CUSTOM && o->custom.cls == LOOM_OP_TOKEN_MIXING);
}

/* Before op o runs inside: an op reading every token gets the gathered input, and a partial sum
 * of every token meeting this rank's rows is reduce-scattered first. */
static int ep_place_inputs(plan *p, const module *m, const op *o, int *in, loom_err *err) {
    plan_region *r = &p->regions[p->n_regions - 1];
    if (o->n_in && reads_every_token(o) && p->values[in[0]].rows == ROWS_SHARD) {
        if (in[0] != p->ep.shard_in)
            return loom_errf(err,
                             "%s: `%s` reads every token, but its input is made inside the expert-parallel "
                             "region %s from this rank's tokens only",
                             m->name, op_kind_name(o->kind), p->ep.call->child->name);
        if (p->ep.tokens_in < 0) {
            const plan_value v = p->values[in[0]];
            p->ep.tokens_in =
                plan_collective(p, STEP_GATHER_ROWS, p->ep.call, p->ep.parent, in[0], v.width, ROWS_TOKENS);
            if (p->ep.tokens_in < 0) return -1;
            r->gathers++;
        }
        in[0] = p->ep.tokens_in;
    }
    bool shard = false, tokens = false;
    for (int i = 0; i < o->n_in; i++) {
        shard |= p->values[in[i]].rows == ROWS_SHARD;
        tokens |= p->values[in[i]].rows == ROWS_TOKENS;
    }
    if (!(shard && tokens)) return 0;
    for (int i = 0; i < o->n_in; i++) { /* a tensor-parallel partial sum meets this rank's rows: complete it */
        const plan_value v = p->values[in[i]];
        if (v.rows != ROWS_TOKENS) continue;
        if (v.dist != DIST_PARTIAL)
            return loom_errf(err,
                             "%s: `%s` mixes every token's rows with this rank's inside the expert-parallel "
                             "region %s",
                             m->name, op_kind_name(o->kind), p->ep.call->child->name);
        in[i] = plan_collective(p, STEP_REDUCE_SCATTER, p->ep.call, p->ep.parent, in[i], v.width, ROWS_SHARD);
        if (in[i] < 0) return -1;
        r->completes++;
    }
    return 0;
}

/* The experts' output: DIST_COMPLETE, their combine having summed it across ranks (on
 * another op or rows, dist.c's rules decide, refusing experts run on every token). */
static int ep_output_dist(plan *p, const module *m, const op *o, const int *in, loom_err *err) {
    if (o->kind != OP_MOE || p->values[in[0]].rows != ROWS_SHARD) return DIST_DEFAULT;
    if (p->values[in[0]].dist != DIST_FULL && p->values[in[0]].dist != DIST_COMPLETE)
        return loom_errf(err, "%s: the experts' input is %s, not complete", m->name,
                         p->values[in[0]].dist == DIST_PARTIAL ? "a partial sum" : "split across ranks");
    return DIST_COMPLETE;
}

/* The exit: this rank's complete rows are the residual's shard under SP and are all-gathered
 * under plain TP; a partial sum leaves as from any region. */
static int ep_exit(plan *p, const module *m, const op *call, int out, loom_err *err) {
    plan_region *r = &p->regions[p->n_regions - 1];
    const plan_value v = p->values[out];
    p->ep.call = NULL;
    if (v.dist == DIST_SHARDED)
        return loom_errf(err, "%s: region %s ends in a value split across ranks", m->name, call->child->name);
    if (v.rows == ROWS_TOKENS && v.dist == DIST_PARTIAL) { /* a partial sum leaves as in any region */
        r->exit = p->o.sp ? STEP_REDUCE_SCATTER : STEP_ALL_REDUCE;
        return plan_collective(p, r->exit, call, m, out, v.width, p->o.sp ? ROWS_SHARD : ROWS_TOKENS);
    }
    if (v.rows == ROWS_TOKENS) { /* complete on every token: under SP keep this rank's */
        if (!p->o.sp) return out;
        r->exit = STEP_SLICE_ROWS;
        return plan_collective(p, STEP_SLICE_ROWS, call, m, out, v.width, ROWS_SHARD);
    }
    if (!p->o.sp) {
        r->exit = STEP_GATHER_ROWS;
        return plan_collective(p, STEP_GATHER_ROWS, call, m, out, v.width, ROWS_TOKENS);
    }
    /* outside the region, this rank's complete rows are simply the residual's shard */
    p->values[out].dist = DIST_FULL;
    return out;
}

const region_kind region_ep = {.name = "expert parallel",
                               .is_region = ep_is_region,
                               .enter = ep_enter,
                               .place_inputs = ep_place_inputs,
                               .output_dist = ep_output_dist,
                               .exit = ep_exit};

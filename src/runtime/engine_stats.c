/* What an engine reports about itself: its memory, the weight bytes a decode step streams, and,
 * since the profile reset, where its time went (ops, collectives, the pipeline's waits, the
 * experts' work). Read by `loom bench` and `loom serve`; nothing here runs a pass. */
#include <stdio.h>
#include <string.h>

#include "runtime/engine.h"

size_t loom_engine_activation_bytes(const loom_engine *e) { return e->x.activation_bytes; }
size_t loom_engine_kv_bytes(const loom_engine *e) { return e->x.kv_bytes; }

size_t loom_engine_kv_bytes_per_token(const loom_engine *e) {
    const plan *p = &e->x.plans[0].p;
    return (size_t)(e->layer1 - e->layer0) * p->kv_width * (p->kv_latent ? 1 : 2) * sizeof(float);
}

double loom_engine_blocked_seconds(const loom_engine *e) {
    return e->x.comm->blocked_s + (e->x.world != e->x.comm ? e->x.world->blocked_s : 0);
}

static size_t wmat_bytes(const wmat *w) {
    if (w->q) return (size_t)w->rows * (w->ld + (size_t)w->q->n_groups * 2 * sizeof(float));
    return (size_t)w->rows * w->cols * dtype_size(w->dt);
}

size_t loom_engine_decode_bytes(const loom_engine *e) {
    const plan *p = &e->x.plans[0].p;
    double bytes = 0;
    for (int i = 0; i < p->n_steps; i++) {
        const plan_step *s = &p->steps[i];
        if (s->op->kind == OP_LINEAR)
            for (int j = 0; j < s->op->lin->n_parts; j++) bytes += (double)wmat_bytes(&s->w[j]);
        if (s->op->kind == OP_MOE && s->experts) /* a token reads top_k of the experts */
            for (int j = 0; j < 3 * s->n_experts; j++) /* this rank's: all, or its share under EP */
                bytes += (double)wmat_bytes(&s->experts[j]) * s->op->moe->top_k / s->op->moe->n_experts;
    }
    return (size_t)bytes;
}

void loom_engine_set_profile(loom_engine *e, bool on) {
    executor_reset_stats(&e->x, on);
    e->pl.pass_s = e->pl.wait_logits_s = 0;
    e->pl.passes = e->pl.microbatches = 0;
}

int loom_engine_stage(const loom_engine *e) { return e->x.stage; }
double loom_engine_pipeline_idle(const loom_engine *e) { return pipeline_idle(&e->pl, &e->x.st); }

void loom_engine_print_experts(const loom_engine *e, FILE *f, bool per_layer) {
    ep_print(&e->x.ep, &e->x.st.experts, e->x.world->rank, e->x.comm->size, f, per_layer);
}

void loom_engine_expert_work(const loom_engine *e, double *seconds, double *gflop, long *pairs) {
    const expert_work *w = &e->x.st.experts;
    *seconds = w->seconds, *gflop = w->flop / 1e9, *pairs = w->pairs;
}

long loom_engine_expert_rows(const loom_engine *e, int layer, int rank) {
    const expert_parallel *x = &e->x.ep;
    int n = e->x.comm->size;
    if (layer < 0 || layer >= x->n_layers || rank < 0 || rank >= n) return -1;
    return x->received[(size_t)layer * n + rank];
}

void loom_engine_print_profile(const loom_engine *e, FILE *f) {
    const exec_stats *st = &e->x.st;
    double total = st->comm_seconds;
    for (int k = 0; k < OP_KIND_COUNT; k++) total += st->op_seconds[k];
    fprintf(f, "time by op (rank %d, %.3f s in all):", e->x.world->rank, total);
    for (int k = 0; k < OP_KIND_COUNT; k++)
        if (st->op_seconds[k] > 0) fprintf(f, " %s %.1f%%", op_kind_name(k), 100 * st->op_seconds[k] / total);
    if (e->x.comm->size > 1) fprintf(f, " collectives %.1f%%", 100 * st->comm_seconds / total);
    fputc('\n', f);
    if (e->pl.pp > 1) pipeline_print(&e->pl, st, e->x.world->rank, e->layer0, e->layer1, f);
    loom_engine_print_experts(e, f, true);
    if (e->x.comm->size == 1) return;
    /* what the fused ops' GEMMs did not hide shows here, apart from the GEMMs themselves */
    fprintf(f, "waiting in collectives (rank %d):", e->x.world->rank);
    for (int k = STEP_ALL_REDUCE; k < STEP_KIND_COUNT; k++)
        if (st->waited_seconds[k] > 0) fprintf(f, " %s %.3f s", step_kind_name(k), st->waited_seconds[k]);
    if (e->x.ep.n_layers) fprintf(f, " all_to_all (experts) %.3f s", e->x.ep.waited_s);
    fputc('\n', f);
}

/* What an engine reports about itself (loom_engine_get_stats): its sizes and memory, the
 * weight bytes a decode step streams, and, since the reset, where its time went; and the
 * profiling hooks of runtime/profile.h (the time by op kind, the experts' report). Nothing here
 * runs a pass. */
#include <stdio.h>
#include <string.h>

#include "plan/stage.h"
#include "runtime/engine.h"
#include "runtime/profile.h"

size_t engine_kv_bytes_per_token(const loom_engine *e, int layers) {
    const plan *p = &e->x.plans[0].p;
    return (size_t)layers * kv_row_bytes(e->x.kv_dtype, p->kv_width, p->kv_slab, p->kv_group) * (p->kv_latent ? 1 : 2);
}

static size_t wmat_bytes(const wmat *w) {
    if (w->q) /* the packed row (GGUF blocks hold their scales), and its groups' scale and zero point */
        return (size_t)w->rows * (w->ld + (size_t)w->q->n_groups * 2 * sizeof(float));
    return (size_t)w->rows * w->cols * dtype_size(w->dt);
}

static size_t decode_bytes(const loom_engine *e) {
    const plan *p = &e->x.plans[0].p;
    double bytes = 0;
    for (int i = 0; i < p->n_steps; i++) {
        const plan_step *s = &p->steps[i];
        if (s->op->kind == OP_LINEAR)
            for (int j = 0; j < s->op->lin->n_parts; j++) bytes += (double)wmat_bytes(&s->w[j]);
        if (s->op->kind == OP_MOE && s->experts)       /* a token reads top_k of the experts */
            for (int j = 0; j < 3 * s->n_experts; j++) /* this rank's: all, or its share under EP */
                bytes += (double)wmat_bytes(&s->experts[j]) * s->op->moe->top_k / s->op->moe->n_experts;
    }
    return (size_t)bytes;
}

void loom_engine_get_stats(const loom_engine *e, loom_engine_stats *st) {
    const executor *x = &e->x;
    if (e->mirror) { /* no ranks, plans or buffers: its sizes */
        *st = (loom_engine_stats){.max_seqs = e->max_seqs, .max_ctx = e->max_ctx, .max_tokens = e->max_tokens};
        return;
    }
    *st = (loom_engine_stats){
        .rank = e->job->rank,
        .ranks = e->job->size,
        .replica = e->replica,
        .replicas = e->job->layout.dp,
        .lockstep = e->lockstep,
        .stage = x->stage,
        .stages = e->pl.pp,
        .max_seqs = e->max_seqs,
        .max_ctx = e->max_ctx,
        .max_tokens = e->max_tokens,
        .activation_bytes = x->activation_bytes,
        .kv_bytes = x->kv_bytes,
        .state_bytes = x->state_bytes,
        .state_bytes_per_seq = x->state_bytes / (size_t)e->max_seqs,
        .kv_bytes_per_token =
            engine_kv_bytes_per_token(e, stage_count_using(e->model->tree, e->layer0, e->layer1, OP_ATTENTION)),
        .decode_bytes = decode_bytes(e),
        .blocked_seconds = x->comm->blocked_s + (x->world != x->comm ? x->world->blocked_s : 0) +
                           (x->ep_comm != x->comm ? x->ep_comm->blocked_s : 0),
        .pipeline_idle = pipeline_idle(&e->pl, &x->st),
        .expert_seconds = x->st.experts.seconds,
        .expert_gflop = x->st.experts.flop / 1e9,
        .expert_pairs = x->st.experts.pairs,
    };
}

void engine_set_profile(loom_engine *e, bool on) {
    executor_reset_stats(&e->x, on);
    e->pl.pass_s = e->pl.wait_logits_s = 0;
    e->pl.passes = e->pl.microbatches = 0;
}

void loom_engine_reset_stats(loom_engine *e) { engine_set_profile(e, e->x.profile); }

void engine_print_experts(const loom_engine *e, FILE *f, bool per_layer) {
    ep_print(&e->x.ep, &e->x.st.experts, e->job->rank, e->x.ep_comm->size, f, per_layer);
}

long engine_expert_rows(const loom_engine *e, int layer, int rank) {
    const expert_parallel *x = &e->x.ep;
    int n = e->x.ep_comm->size;
    if (layer < 0 || layer >= x->n_layers || rank < 0 || rank >= n) return -1;
    return x->received[(size_t)layer * n + rank];
}

void engine_print_profile(const loom_engine *e, FILE *f) {
    const exec_stats *st = &e->x.st;
    double total = st->comm_seconds;
    for (int k = 0; k < OP_KIND_COUNT; k++) total += st->op_seconds[k];
    fprintf(f, "time by op (rank %d, %.3f s in all):", e->job->rank, total);
    for (int k = 0; k < OP_KIND_COUNT; k++)
        if (st->op_seconds[k] > 0) fprintf(f, " %s %.1f%%", op_kind_name(k), 100 * st->op_seconds[k] / total);
    if (e->x.comm->size > 1) fprintf(f, " collectives %.1f%%", 100 * st->comm_seconds / total);
    fputc('\n', f);
    if (e->pl.pp > 1) pipeline_print(&e->pl, st, e->job->rank, e->layer0, e->layer1, f);
    engine_print_experts(e, f, true);
    if (e->x.comm->size == 1) return;
    /* what the fused ops' GEMMs did not hide shows here, apart from the GEMMs themselves */
    fprintf(f, "waiting in collectives (rank %d):", e->job->rank);
    for (int k = STEP_ALL_REDUCE; k < STEP_KIND_COUNT; k++)
        if (st->waited_seconds[k] > 0) fprintf(f, " %s %.3f s", step_kind_name(k), st->waited_seconds[k]);
    if (e->x.ep.n_layers) fprintf(f, " all_to_all (experts) %.3f s", e->x.ep.waited_s);
    fputc('\n', f);
}

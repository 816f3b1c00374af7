/* The engine: a plan with its buffers, the KV cache and RoPE tables, and the executor that
 * runs the plan's steps over a batch. Everything is allocated here, once; loom_forward
 * allocates nothing. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/rope_freq.h"
#include "plan/plan.h"
#include "plan/stage.h"
#include "quant/quant.h"
#include "runtime/engine.h"
#include "util/err.h"

static int round_up(int n, int k) { return (n + k - 1) / k * k; }

float *engine_value(const loom_engine *e, int v, size_t *ld) {
    const plan_value *pv = &e->cur->p.values[v];
    int buf = e->cur->p.values[pv->base].buffer;
    *ld = e->cur->p.buffer_width[buf];
    return e->cur->buffers[buf] + pv->col;
}

static void *alloc_or_fail(size_t bytes, const char *what, loom_err *err) {
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) loom_errf(err, "out of memory allocating %s (%zu MiB)", what, bytes >> 20);
    return p;
}

static void set_threads(int threads, int ranks) {
    if (threads <= 0) threads = omp_get_num_procs() / ranks > 0 ? omp_get_num_procs() / ranks : 1;
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
}

static int alloc_buffers(loom_engine *e, engine_plan *ep, loom_err *err) {
    const plan *p = &ep->p;
    int pad = round_up(ep->max_tokens, e->comm->size), logits = ep->max_tokens < e->max_logits ? ep->max_tokens : e->max_logits;
    ep->buffers = calloc(p->n_buffers, sizeof *ep->buffers);
    for (int b = 0; b < p->n_buffers; b++) {
        size_t rows = p->buffer_rows[b] == ROWS_LOGITS ? logits : p->buffer_rows[b] == ROWS_SHARD ? pad / e->comm->size : pad;
        if (!(ep->buffers[b] = alloc_or_fail(rows * p->buffer_width[b] * sizeof(float), "activations", err))) return -1;
        e->activation_bytes += rows * p->buffer_width[b] * sizeof(float);
    }
    return 0;
}

/* One scratch serves every MoE step: sized for the widest of them and the largest batch. */
static int alloc_moe_scratch(loom_engine *e, loom_err *err) {
    moe_shape most = {0};
    for (int i = 0; i < e->n_plans; i++)
        for (int k = 0; k < e->plans[i].p.n_steps; k++) {
            const plan_step *s = &e->plans[i].p.steps[k];
            if (s->kind != STEP_OP || s->op->kind != OP_MOE) continue;
            const moe_desc *d = s->op->moe;
            most.hidden = d->hidden > most.hidden ? d->hidden : most.hidden;
            most.inter = s->expert_inter > most.inter ? s->expert_inter : most.inter;
            most.n_experts = d->n_experts > most.n_experts ? d->n_experts : most.n_experts;
            most.top_k = d->top_k > most.top_k ? d->top_k : most.top_k;
        }
    if (!most.n_experts) return 0;
    /* under expert parallelism a rank's experts may receive every rank's rows of a padded batch */
    int rows = round_up(e->max_tokens, e->comm->size);
    if (moe_scratch_init(&e->moe, rows, &most))
        return loom_errf(err, "out of memory allocating the experts' scratch for %d tokens", e->max_tokens);
    e->activation_bytes += moe_scratch_bytes(rows, &most, e->moe.threads);
    return 0;
}

static int alloc_state(loom_engine *e, loom_err *err) {
    const model_config *c = &e->model->cfg;
    const plan *p = &e->plans[0].p;
    for (int i = 0; i < e->n_plans; i++)
        if (alloc_buffers(e, &e->plans[i], err)) return -1;
    e->kv = calloc(c->n_layers, sizeof *e->kv); /* indexed by layer; this stage's are allocated */
    size_t kv_width = (size_t)p->kv_width; /* the same in both plans */
    size_t per = (size_t)e->max_seqs * e->max_ctx * kv_width * sizeof(float);
    for (int l = e->layer0; l < e->layer1; l++) { /* a latent cache (MLA) has no V */
        e->kv[l] = (kv_layer){.max_ctx = e->max_ctx, .kv_width = (int)kv_width};
        if (!(e->kv[l].k = alloc_or_fail(per, "the KV cache", err)) ||
            (!p->kv_latent && !(e->kv[l].v = alloc_or_fail(per, "the KV cache", err))))
            return -1;
        e->kv_bytes += (p->kv_latent ? 1 : 2) * per;
    }
    if (alloc_moe_scratch(e, err) || ep_init(e, err)) return -1;
    e->seq_len = calloc(e->max_seqs, sizeof *e->seq_len);
    e->logits = alloc_or_fail((size_t)e->max_logits * c->vocab * sizeof(float), "logits", err);
    if (!e->logits) return -1;
    float inv_freq[CONFIG_MAX_HEAD_DIM / 2];
    rope_inv_freq(c, inv_freq);
    return rope_table_init(&e->rope, inv_freq, c->head_dim / 2, c->rope_attention_factor, e->max_ctx, err);
}

/* Tensors no op reads, reported by the first rank of each stage for its own part (under expert
 * parallelism, without the other ranks' experts). */
static void warn_unused(const loom_model *m, const plan *p) {
    char **unused = weights_unused(&m->ws);
    int n = 0, first = -1;
    for (int i = 0; unused[i]; i++)
        if (!stage_foreign_tensor(&p->o, m->tree, unused[i]) && !ep_foreign_tensor(p, unused[i]) && n++ == 0) first = i;
    if (n)
        fprintf(stderr, "loom: warning: %s: %d tensor%s not used by %s, e.g. '%s'\n", m->ws.dir, n, n > 1 ? "s" : "",
                m->cfg.arch, unused[first]);
    free(unused);
}

/* This rank's place in the pipeline: its stage's communicator and decoder layers. */
static int join_stage(loom_engine *e, const loom_engine_options *o, loom_err *err) {
    e->pp = o->pipeline_parallel > 1 ? o->pipeline_parallel : 1;
    int n_layers = stage_count_layers(e->model->tree), *first = calloc(e->pp + 1, sizeof *first);
    int rc = stage_layers(n_layers, e->pp, o->pp_layer_partition, first, err);
    if (!rc && e->world->size % e->pp)
        rc = loom_errf(err, "-pp %d does not divide the job's %d ranks", e->pp, e->world->size);
    if (!rc && e->pp > 1) rc = comm_split_stages(e->world, e->world->size / e->pp, &e->own_comm, err);
    if (!rc) {
        e->comm = e->pp > 1 ? e->own_comm : e->world;
        e->stage = e->world->rank / e->comm->size;
        e->layer0 = first[e->stage], e->layer1 = first[e->stage + 1];
    }
    free(first);
    return rc;
}

/* Rows an engine with these options runs at most: all tokens, and the rows with logits. */
static void engine_rows(const loom_engine_options *o, int *tokens, int *logits) {
    int seqs = o->max_seqs > 0 ? o->max_seqs : 1;
    *tokens = o->max_tokens > 0 ? o->max_tokens : 512;
    *logits = o->all_logits ? *tokens : (seqs < *tokens ? seqs : *tokens);
}

size_t loom_comm_slot_bytes(const loom_model *m, int tp, const loom_engine_options *o) {
    plan p;
    loom_err err;
    int tokens, logits;
    engine_rows(o, &tokens, &logits);
    /* pipeline: a stage sends at most every token's hidden state, and the last broadcasts logits */
    size_t pipe = o->pipeline_parallel > 1 ? (size_t)round_up(tokens, tp) * stage_hidden_width(m->tree) : 0;
    if (o->pipeline_parallel > 1 && (size_t)logits * m->cfg.vocab > pipe) pipe = (size_t)logits * m->cfg.vocab;
    plan_options po = {.tp = tp, .sp = o->sequence_parallel, .async_tp = o->async_tp, .ep = o->expert_parallel,
                       .quant = m->ws.quant,
                       .checkpoint = &m->cfg.quant};
    if (plan_build(&p, m->tree, &po, NULL, &err)) return 0;
    tokens = round_up(tokens, tp);
    size_t need[3] = {(size_t)tokens * p.max_comm_cols[ROWS_TOKENS],
                      (size_t)tokens / tp * p.max_comm_cols[ROWS_SHARD],
                      (size_t)logits * (p.max_comm_cols[ROWS_LOGITS] > p.max_comm_cols[ROWS_SHARD]
                                            ? p.max_comm_cols[ROWS_LOGITS] : p.max_comm_cols[ROWS_SHARD])};
    plan_free(&p);
    size_t most = need[0] > need[1] ? need[0] : need[1];
    most = most > need[2] ? most : need[2];
    return (most > pipe ? most : pipe) * sizeof(float);
}

int loom_check_sharding(const loom_model *m, int tp, const loom_engine_options *o, loom_err *err) {
    int pp = o->pipeline_parallel > 1 ? o->pipeline_parallel : 1, *first = calloc(pp + 1, sizeof *first), rc = 0;
    if (stage_layers(stage_count_layers(m->tree), pp, o->pp_layer_partition, first, err))
        rc = loom_err_prefix(err, "%s cannot run with -pp %d", m->cfg.arch, pp);
    for (int s = 0; s < pp && !rc; s++)
        for (int r = 0; r < tp && !rc; r++) {
            plan p;
            /* async TP plans the same shapes */
            plan_options po = {.tp = tp, .rank = r, .sp = o->sequence_parallel, .ep = o->expert_parallel,
                               .quant = m->ws.quant,
                               .checkpoint = &m->cfg.quant, .pp = pp, .stage = s, .layer0 = first[s],
                               .layer1 = first[s + 1]};
            if (plan_build(&p, m->tree, &po, NULL, err))
                rc = loom_err_prefix(err, "%s cannot run with -tp %d%s%s", m->cfg.arch, tp,
                                     o->sequence_parallel ? " and sequence parallelism" : "",
                                     o->expert_parallel ? " and expert parallelism" : "");
            else plan_free(&p);
        }
    free(first);
    return rc;
}

static size_t kv_bytes_per_token(const loom_engine *e) {
    const plan *p = &e->plans[0].p;
    return (size_t)(e->layer1 - e->layer0) * p->kv_width * (p->kv_latent ? 1 : 2) * sizeof(float);
}

/* The context: as asked, or as long as the KV budget holds for every sequence (up to the
 * model's maximum), so a latent cache's smaller rows buy a longer context. */
static int size_context(loom_engine *e, const loom_engine_options *o, loom_err *err) {
    size_t budget = o->kv_cache_bytes ? o->kv_cache_bytes : LOOM_KV_CACHE_BYTES_DEFAULT, per = kv_bytes_per_token(e);
    size_t fits = budget / ((size_t)e->max_seqs * per);
    int max_pos = e->model->cfg.max_pos;
    if (o->max_ctx > max_pos)
        return loom_errf(err, "max context %d exceeds the model's max_position_embeddings %d", o->max_ctx, max_pos);
    if (o->max_ctx > 0 && (size_t)o->max_ctx > fits)
        return loom_errf(err, "a context of %d for %d sequences needs %.2f GiB of KV cache on each rank (%zu bytes per "
                              "token), over its budget of %.2f GiB: shorten the context (--max-model-len), run fewer "
                              "sequences (--max-num-seqs) or raise the budget (--kv-cache-memory-bytes)",
                         o->max_ctx, e->max_seqs, (double)o->max_ctx * e->max_seqs * per / (1 << 30), per,
                         (double)budget / (1 << 30));
    if (!o->max_ctx && !fits)
        return loom_errf(err, "%d sequences do not fit one token each in the KV budget of %zu bytes on each rank (%zu "
                              "bytes per token): raise --kv-cache-memory-bytes", e->max_seqs, budget, per);
    e->max_ctx = o->max_ctx > 0 ? o->max_ctx : fits < (size_t)max_pos ? (int)fits : max_pos;
    return 0;
}

loom_engine *loom_engine_new(loom_model *m, const loom_engine_options *o, loom_err *err) {
    loom_engine *e = calloc(1, sizeof *e);
    e->model = m;
    e->max_seqs = o->max_seqs > 0 ? o->max_seqs : 1;
    engine_rows(o, &e->max_tokens, &e->max_logits);
    e->world = o->comm ? o->comm : (e->own_comm = comm_local());
    set_threads(o->threads, e->world->size);
    if (join_stage(e, o, err)) goto fail;
    pipeline_init(e, o);
    /* a progress line only where loading takes long enough to wonder (dummy or converted
     * weights of a large model; mapped f32/bf16 tensors load lazily) */
    loom_model_info info;
    loom_model_get_info(m, &info);
    bool progress = m->progress && info.n_params > (64u << 20);
    plan_options po = {.tp = e->comm->size, .rank = e->comm->rank, .sp = o->sequence_parallel,
                       .async_tp = o->async_tp, .ep = o->expert_parallel, .progress = progress, .quant = m->ws.quant,
                       .checkpoint = &m->cfg.quant, .pp = e->pp, .stage = e->stage, .layer0 = e->layer0,
                       .layer1 = e->layer1};
    e->n_plans = 1;
    e->plans[0].max_tokens = e->max_tokens;
    if (plan_build(&e->plans[0].p, m->tree, &po, &m->ws, err)) goto fail;
    e->sp_min_tokens = e->plans[0].p.o.sp ? o->sp_min_tokens : 0;
    if (e->sp_min_tokens > 1) { /* the short passes' plain TP plan (weights are shared: same slices) */
        plan_options tp_only = {.tp = po.tp, .rank = po.rank, .ep = po.ep, .quant = po.quant, .checkpoint = po.checkpoint,
                                .pp = po.pp, .stage = po.stage, .layer0 = po.layer0, .layer1 = po.layer1};
        e->plans[1].max_tokens = e->sp_min_tokens - 1 < e->max_tokens ? e->sp_min_tokens - 1 : e->max_tokens;
        if (plan_build(&e->plans[1].p, m->tree, &tp_only, &m->ws, err)) goto fail;
        e->n_plans = 2;
    }
    e->cur = &e->plans[0];
    if (size_context(e, o, err)) goto fail;
    if (e->comm->rank == 0) { /* each stage's first rank, for its layers */
        warn_unused(m, &e->plans[0].p);
        for (int i = 0; i < e->plans[0].p.n_warnings; i++) fprintf(stderr, "loom: warning: %s\n", e->plans[0].p.warnings[i]);
    }
    if (alloc_state(e, err)) goto fail;
    return e;
fail:
    loom_engine_free(e);
    return NULL;
}

void loom_engine_free(loom_engine *e) {
    if (!e) return;
    pipeline_free(e);
    for (int i = 0; i < 2; i++) {
        for (int b = 0; e->plans[i].buffers && b < e->plans[i].p.n_buffers; b++) free(e->plans[i].buffers[b]);
        free(e->plans[i].buffers);
        plan_free(&e->plans[i].p);
    }
    for (int l = e->layer0; e->kv && l < e->layer1; l++) free(e->kv[l].k), free(e->kv[l].v);
    free(e->kv);
    free(e->seq_len);
    free(e->logits);
    rope_table_free(&e->rope);
    moe_scratch_free(&e->moe);
    ep_free(e);
    comm_free(e->own_comm);
    free(e);
}

void loom_engine_reset_seq(loom_engine *e, int seq) {
    if (seq >= 0 && seq < e->max_seqs) e->seq_len[seq] = 0;
}

/* Rejects a batch the kernels could not run correctly, before anything is written. */
static int check_batch(const loom_engine *e, const loom_batch *b, loom_err *err) {
    if (b->n_tokens <= 0 || b->n_tokens > e->max_tokens)
        return loom_errf(err, "batch of %d tokens (engine holds 1..%d)", b->n_tokens, e->max_tokens);
    if (b->n_logits < 0 || b->n_logits > e->max_logits)
        return loom_errf(err, "%d logit rows asked (engine holds up to %d)", b->n_logits, e->max_logits);
    for (int i = 0; i < b->n_tokens; i++) {
        int s = b->seq[i];
        if (b->ids[i] < 0 || b->ids[i] >= e->model->cfg.vocab)
            return loom_errf(err, "token %d: id %d outside the vocabulary (%d)", i, b->ids[i], e->model->cfg.vocab);
        if (s < 0 || s >= e->max_seqs) return loom_errf(err, "token %d: sequence %d (engine holds %d)", i, s, e->max_seqs);
        if (b->pos[i] < 0 || b->pos[i] >= e->max_ctx)
            return loom_errf(err, "token %d: position %d beyond the context of %d", i, b->pos[i], e->max_ctx);
        bool starts_run = i == 0 || b->seq[i - 1] != s;
        int expect = starts_run ? e->seq_len[s] : b->pos[i - 1] + 1;
        if (b->pos[i] != expect)
            return loom_errf(err, "token %d: sequence %d continues at position %d, not %d", i, s, expect, b->pos[i]);
        for (int j = 0; starts_run && j < i; j++)
            if (b->seq[j] == s) return loom_errf(err, "token %d: sequence %d's tokens are not contiguous", i, s);
    }
    for (int i = 0; i < b->n_logits; i++)
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= b->n_tokens)
            return loom_errf(err, "logit row %d: %d is not a token of the batch", i, b->logit_rows[i]);
    return 0;
}

/* Rows a value has in this pass: T tokens, this rank's T_pad/tp under SP, or the logit rows. */
static int value_rows(const loom_engine *e, const plan_value *v, const loom_batch *b) {
    switch (v->rows) {
    case ROWS_LOGITS: return b->n_logits;
    case ROWS_SHARD: return round_up(b->n_tokens, e->comm->size) / e->comm->size;
    case ROWS_TOKENS: break;
    }
    return b->n_tokens;
}

static int run_collective(loom_engine *e, const plan_step *s, const loom_batch *b, loom_err *err) {
    const plan_value *iv = &e->cur->p.values[s->in[0]], *ov = &e->cur->p.values[s->out];
    int n = e->comm->size, t_pad = round_up(b->n_tokens, n), shard = t_pad / n, w = iv->width;
    size_t ldi, ldo;
    float *in = engine_value(e, s->in[0], &ldi), *out = engine_value(e, s->out, &ldo);
    comm_set_phase(e->comm, "%s in %s", step_kind_name(s->kind), s->mod->name);
    double t0 = omp_get_wtime();
    int rc = 0;
    switch (s->kind) {
    case STEP_ALL_REDUCE: rc = comm_all_reduce(e->comm, in, ldi, out, ldo, value_rows(e, ov, b), w, err); break;
    case STEP_GATHER_COLS:
        rc = comm_all_gather_cols(e->comm, in, ldi, out, ldo, value_rows(e, ov, b), e->cur->p.vocab_col0,
                                  e->cur->p.vocab_width, err);
        break;
    case STEP_REDUCE_SCATTER: /* padded rows at the end carry zeros, so every shard is whole */
        for (int r = b->n_tokens; r < t_pad; r++) memset(in + (size_t)r * ldi, 0, w * sizeof *in);
        rc = comm_reduce_scatter_rows(e->comm, in, ldi, out, ldo, t_pad, w, err);
        break;
    case STEP_GATHER_ROWS: rc = comm_all_gather_rows(e->comm, in, ldi, out, ldo, shard, w, err); break;
    case STEP_SLICE_ROWS: /* this rank's rows; those past the batch are padding, zeros as a reduce-scatter leaves */
        for (int i = 0; i < shard; i++) {
            int r = e->comm->rank * shard + i;
            if (r < b->n_tokens) memcpy(out + (size_t)i * ldo, in + (size_t)r * ldi, w * sizeof *out);
            else memset(out + (size_t)i * ldo, 0, w * sizeof *out);
        }
        break;
    case STEP_GATHER_LOGITS:
        rc = comm_gather_rows_at(e->comm, in, ldi, shard, b->logit_rows, b->n_logits, out, ldo, w, err);
        break;
    case STEP_OP:
    case STEP_AG_MATMUL:
    case STEP_MATMUL_RS:
    case STEP_SEND:
    case STEP_RECV:
    case STEP_KIND_COUNT: break;
    }
    if (!rc && s->bias[0]) add_rows(out, ldo, s->bias[0], 0, out, ldo, value_rows(e, ov, b), ov->width);
    e->comm_seconds += omp_get_wtime() - t0;
    return rc;
}

/* The GEMM of a fused step, over one block of rows or one chunk of it (see comm.h's callbacks). */
typedef struct fused_gemm {
    const plan_step *s;
    const float *in; /* matmul-reduce-scatter: the whole input */
    size_t ldi, ldo;
    float *out;      /* all-gather-matmul: the whole output */
    int tokens;      /* real rows of the pass: the kernel is chosen by it, blocks past it skipped */
    int chunk;       /* rows per GEMM */
} fused_gemm;

static void gather_gemm(void *ctx, const float *x, size_t ldx, int row0, int rows) {
    fused_gemm *g = ctx;
    int n = g->tokens - row0 < rows ? g->tokens - row0 : rows;
    for (int i = 0; i < g->s->op->lin->n_parts; i++)
        linear_chunked(x, ldx, n, g->chunk, g->tokens, &g->s->w[i], g->s->bias[i],
                       g->out + (size_t)row0 * g->ldo + g->s->col[i], g->ldo);
}

static void partial_gemm(void *ctx, int row0, int rows, float *y, size_t ldy) {
    fused_gemm *g = ctx;
    int n = g->tokens - row0 < rows ? g->tokens - row0 : rows;
    if (n < 0) n = 0;
    linear_chunked(g->in + (size_t)row0 * g->ldi, g->ldi, n, g->chunk, g->tokens, &g->s->w[0], NULL, y, ldy);
    for (int r = n; r < rows; r++) memset(y + (size_t)r * ldy, 0, g->s->w[0].rows * sizeof *y); /* padding */
}

static int run_fused(loom_engine *e, const plan_step *s, const loom_batch *b, loom_err *err) {
    const plan_value *ov = &e->cur->p.values[s->out];
    int shard = round_up(b->n_tokens, e->comm->size) / e->comm->size;
    size_t ldi, ldo;
    const float *in = engine_value(e, s->in[0], &ldi);
    float *out = engine_value(e, s->out, &ldo);
    fused_gemm g = {s, in, ldi, ldo, out, b->n_tokens, comm_chunk_rows(e->comm, shard)};
    comm_set_phase(e->comm, "%s in %s", step_kind_name(s->kind), s->mod->name);
    double t0 = omp_get_wtime();
    int rc = s->kind == STEP_AG_MATMUL
                 ? comm_all_gather_matmul(e->comm, in, ldi, shard, e->cur->p.values[s->in[0]].width, gather_gemm, &g, err)
                 : comm_matmul_reduce_scatter(e->comm, shard, ov->width, partial_gemm, &g, out, ldo, err);
    if (!rc && s->kind == STEP_MATMUL_RS && s->bias[0]) add_rows(out, ldo, s->bias[0], 0, out, ldo, shard, ov->width);
    e->comm_seconds += omp_get_wtime() - t0;
    return rc;
}

moe_shape engine_moe_shape(const plan_step *s) {
    const moe_desc *d = s->op->moe;
    return (moe_shape){.hidden = d->hidden, .inter = s->expert_inter, .n_experts = d->n_experts, .top_k = d->top_k,
                       .softmax_of_topk = d->routing == ROUTE_TOPK_SOFTMAX, .norm_topk = d->norm_topk,
                       .sigmoid = d->sigmoid, .n_group = d->n_group, .topk_group = d->topk_group,
                       .group_top2_sum = d->group_top2_sum, .bias = s->route_bias, .scale = d->scale};
}

static void run_step(loom_engine *e, const plan_step *s, const loom_batch *b) {
    const op *o = s->op;
    const plan_value *ov = &e->cur->p.values[s->out];
    int rows = value_rows(e, ov, b), w = ov->width;
    size_t ldo, ld0 = 0, ld1 = 0, ld2 = 0;
    float *out = engine_value(e, s->out, &ldo);
    const float *in0 = s->n_in > 0 ? engine_value(e, s->in[0], &ld0) : NULL;
    const float *in1 = s->n_in > 1 ? engine_value(e, s->in[1], &ld1) : NULL;
    const float *in2 = s->n_in > 2 ? engine_value(e, s->in[2], &ld2) : NULL;
    switch (o->kind) {
    case OP_EMBED: embed_rows(&s->w[0], s->vocab0, b->ids, rows, out, ldo); break;
    case OP_LINEAR: {
        /* Sharded linears run in the blocks and chunks the fused collectives use (T padded to a
         * multiple of the ranks, one block per rank, cut as comm_chunk_rows says), so that
         * every mode hands the BLAS the same GEMM shapes and TP, SP and async TP agree bit for
         * bit by construction. */
        bool sharded = o->lin->style == PAR_COLUMN || o->lin->style == PAR_ROW;
        int block = sharded ? round_up(rows, e->comm->size) / e->comm->size : rows;
        for (int r0 = 0; r0 < rows; r0 += block) {
            int m = rows - r0 < block ? rows - r0 : block;
            for (int i = 0; i < o->lin->n_parts; i++)
                linear_chunked(in0 + (size_t)r0 * ld0, ld0, m, comm_chunk_rows(e->comm, block), rows, &s->w[i], s->bias[i],
                               out + (size_t)r0 * ldo + s->col[i], ldo);
        }
        break;
    }
    case OP_RMS_NORM:
        if (s->sum_squares) sum_squares(in0, ld0, out, ldo, rows, e->cur->p.values[s->in[0]].width);
        else if (in1) rms_norm_by(in0, ld0, in1, ld1, out, ldo, rows, w, o->features, s->norm_w, o->eps);
        else rms_norm(in0, ld0, out, ldo, rows, w, o->group ? o->group : w, s->norm_w, o->eps);
        break;
    case OP_MOE: {
        moe_shape sh = engine_moe_shape(s);
        double t0 = omp_get_wtime();
        moe_forward(&sh, s->experts, in0, ld0, in1, ld1, rows, out, ldo, &e->moe);
        e->expert_seconds += omp_get_wtime() - t0;
        e->expert_flop += 6.0 * sh.hidden * sh.inter * rows * sh.top_k; /* gate, up, down: 2 flops a weight */
        e->expert_pairs += (long)rows * sh.top_k;
        break;
    }
    case OP_SIGMOID_GATE: sigmoid_gate(in0, ld0, in1, ld1, out, ldo, rows, w); break;
    case OP_ROPE:
        rope_apply(&e->rope, in0, ld0, out, ldo, rows, w / o->rope.stride, o->rope.stride, o->rope.offset,
                   o->rope.interleaved, b->pos);
        break;
    case OP_ATTENTION:
        if (s->attn.mla.kv_lora)
            mla_attention(&s->attn, &e->kv[o->attn.layer], in0, ld0, in1, ld1, in2, ld2, s->w[1].data, out, ldo, rows,
                          b->pos, b->seq);
        else
            attention(&s->attn, &e->kv[o->attn.layer], in0, ld0, in1, ld1, in2, ld2, out, ldo, rows, b->pos, b->seq);
        break;
    case OP_SILU_MUL: silu_mul(in0, ld0, in1, ld1, out, ldo, rows, w); break;
    case OP_ADD: add_rows(in0, ld0, in1, ld1, out, ldo, rows, w); break;
    case OP_SCALE: scale_rows(in0, ld0, o->scalar, out, ldo, rows, w); break;
    case OP_CUSTOM: {
        bool tokens = ov->rows == ROWS_TOKENS;
        o->custom.forward(o->custom.user, in0, ld0, out, ldo, rows, w, tokens ? b->pos : NULL, tokens ? b->seq : NULL);
        break;
    }
    case OP_LOGIT_ROWS:
        for (int i = 0; i < rows; i++) memcpy(out + i * ldo, in0 + (size_t)b->logit_rows[i] * ld0, w * sizeof *out);
        break;
    case OP_SPLIT:
    case OP_CALL:
    case OP_KIND_COUNT: break; /* never steps */
    }
}

/* A stage boundary: the hidden state, as the plan holds it on this rank, goes to or comes from
 * the rank of the same TP rank in the next or previous stage. */
static int run_boundary(loom_engine *e, const plan_step *s, const loom_batch *b, loom_err *err) {
    bool send = s->kind == STEP_SEND;
    int v = send ? s->in[0] : s->out, tp = e->comm->size, peer = e->world->rank + (send ? tp : -tp);
    const plan_value *pv = &e->cur->p.values[v];
    size_t ld;
    float *x = engine_value(e, v, &ld);
    int rows = value_rows(e, pv, b);
    comm_set_phase(e->world, "stage %d: %s of %d rows %s stage %d", e->stage, send ? "send" : "recv", rows,
                   send ? "to" : "from", e->stage + (send ? 1 : -1));
    double t0 = omp_get_wtime();
    int rc = send ? comm_send_rows(e->world, peer, x, ld, rows, pv->width, err)
                  : comm_recv_rows(e->world, peer, x, ld, rows, pv->width, err);
    *(send ? &e->pipe.wait_next_s : &e->pipe.wait_prev_s) += omp_get_wtime() - t0;
    return rc;
}

int engine_run_pass(loom_engine *e, const loom_batch *b, loom_err *err) {
    e->cur = &e->plans[e->n_plans > 1 && b->n_tokens < e->sp_min_tokens];
    e->ep.layer = 0;
    e->ep.passes += e->ep.n_layers > 0;
    for (int i = 0; i < e->cur->p.n_steps; i++) {
        const plan_step *s = &e->cur->p.steps[i];
        if (s->kind == STEP_OP && s->op->kind == OP_MOE && e->cur->p.o.ep) {
            double t0 = omp_get_wtime(), comm0 = e->comm_seconds; /* its all-to-alls count as collectives */
            if (ep_moe_step(e, s, b, err)) return -1;
            if (e->profile) e->op_seconds[OP_MOE] += omp_get_wtime() - t0 - (e->comm_seconds - comm0);
            continue;
        }
        if (s->kind == STEP_SEND || s->kind == STEP_RECV) {
            if (run_boundary(e, s, b, err)) return -1;
            continue;
        }
        if (s->kind != STEP_OP) {
            double waited = e->comm->blocked_s;
            bool fused = s->kind == STEP_AG_MATMUL || s->kind == STEP_MATMUL_RS;
            if (fused ? run_fused(e, s, b, err) : run_collective(e, s, b, err)) return -1;
            e->waited_seconds[s->kind] += e->comm->blocked_s - waited;
            continue;
        }
        if (!e->profile) {
            run_step(e, s, b);
            continue;
        }
        double t0 = omp_get_wtime();
        run_step(e, s, b);
        e->op_seconds[s->op->kind] += omp_get_wtime() - t0;
    }
    return 0;
}

void engine_take_logits(loom_engine *e, const loom_batch *b, const int32_t *at) {
    size_t ld;
    const float *out = engine_value(e, e->cur->p.output, &ld);
    size_t vocab = e->model->cfg.vocab;
    for (int r = 0; r < b->n_logits; r++) memcpy(e->logits + (at ? at[r] : r) * vocab, out + r * ld, vocab * sizeof *out);
}

int loom_forward(loom_engine *e, const loom_batch *b, const float **logits, loom_err *err) {
    if (check_batch(e, b, err)) return -1;
    if (e->pp > 1 ? pipeline_forward(e, b, err) : engine_run_pass(e, b, err)) return -1;
    if (e->pp == 1) engine_take_logits(e, b, NULL);
    for (int i = 0; i < b->n_tokens; i++) e->seq_len[b->seq[i]] = b->pos[i] + 1;
    *logits = e->logits;
    return 0;
}

size_t loom_engine_activation_bytes(const loom_engine *e) { return e->activation_bytes; }
double loom_engine_blocked_seconds(const loom_engine *e) {
    return e->comm->blocked_s + (e->world != e->comm ? e->world->blocked_s : 0);
}
size_t loom_engine_kv_bytes(const loom_engine *e) { return e->kv_bytes; }
size_t loom_engine_kv_bytes_per_token(const loom_engine *e) { return kv_bytes_per_token(e); }

static size_t wmat_bytes(const wmat *w) {
    if (w->q) return (size_t)w->rows * (w->ld + (size_t)w->q->n_groups * 2 * sizeof(float));
    return (size_t)w->rows * w->cols * dtype_size(w->dt);
}

size_t loom_engine_decode_bytes(const loom_engine *e) {
    const plan *p = &e->plans[0].p;
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
    e->profile = on;
    memset(e->op_seconds, 0, sizeof e->op_seconds);
    memset(e->waited_seconds, 0, sizeof e->waited_seconds);
    memset(&e->pipe, 0, sizeof e->pipe);
    e->comm_seconds = e->expert_seconds = e->expert_flop = 0;
    e->expert_pairs = 0;
    ep_reset_stats(e);
}

void loom_engine_print_profile(const loom_engine *e, FILE *f) {
    double total = e->comm_seconds;
    for (int k = 0; k < OP_KIND_COUNT; k++) total += e->op_seconds[k];
    fprintf(f, "time by op (rank %d, %.3f s in all):", e->world->rank, total);
    for (int k = 0; k < OP_KIND_COUNT; k++)
        if (e->op_seconds[k] > 0) fprintf(f, " %s %.1f%%", op_kind_name(k), 100 * e->op_seconds[k] / total);
    if (e->comm->size > 1) fprintf(f, " collectives %.1f%%", 100 * e->comm_seconds / total);
    fputc('\n', f);
    if (e->pp > 1) pipeline_print_profile(e, f);
    loom_engine_print_experts(e, f, true);
    if (e->comm->size == 1) return;
    /* what the fused ops' GEMMs did not hide shows here, apart from the GEMMs themselves */
    fprintf(f, "waiting in collectives (rank %d):", e->world->rank);
    for (int k = STEP_ALL_REDUCE; k < STEP_KIND_COUNT; k++)
        if (e->waited_seconds[k] > 0) fprintf(f, " %s %.3f s", step_kind_name(k), e->waited_seconds[k]);
    if (e->ep.n_layers) fprintf(f, " all_to_all (experts) %.3f s", e->ep.waited_s);
    fputc('\n', f);
}

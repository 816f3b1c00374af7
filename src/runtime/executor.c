/* The executor (executor.h): the run-time state of one rank's plans, allocated once, and the
 * loop that runs their steps. Sharded linears run in the row blocks and chunks the fused
 * collectives use, so TP, SP and async TP agree bit for bit (DESIGN 4.2); nothing here
 * allocates per forward pass. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/executor.h"
#include "util/alloc.h"
#include "util/err.h"

static int round_up(int n, int k) { return (n + k - 1) / k * k; }

/* Where value v of the current plan lives, and its row stride. */
static float *value_at(const executor *x, int v, size_t *ld) {
    const plan_value *pv = &x->cur->p.values[v];
    int buf = x->cur->p.values[pv->base].buffer;
    *ld = x->cur->p.buffer_width[buf];
    return x->cur->buffers[buf] + pv->col;
}

static int alloc_buffers(executor *x, engine_plan *ep, loom_err *err) {
    const plan *p = &ep->p;
    int n = x->comm->size, pad = round_up(ep->max_tokens, n);
    int logits = ep->max_tokens < x->max_logits ? ep->max_tokens : x->max_logits;
    if (!(ep->buffers = mem_zalloc(p->n_buffers, sizeof *ep->buffers, "the activations", err))) return -1;
    for (int b = 0; b < p->n_buffers; b++) {
        size_t rows = p->buffer_rows[b] == ROWS_LOGITS ? logits : p->buffer_rows[b] == ROWS_SHARD ? pad / n : pad;
        if (!(ep->buffers[b] = mem_aligned(rows * p->buffer_width[b] * sizeof(float), "activations", err))) return -1;
        x->activation_bytes += rows * p->buffer_width[b] * sizeof(float);
    }
    return 0;
}

/* One scratch serves every MoE step: sized for the widest of them and the largest batch. */
static int alloc_moe_scratch(executor *x, loom_err *err) {
    moe_shape most = {0};
    for (int i = 0; i < x->n_plans; i++)
        for (int k = 0; k < x->plans[i].p.n_steps; k++) {
            const plan_step *s = &x->plans[i].p.steps[k];
            if ((s->kind != STEP_OP && s->kind != STEP_EP_MOE) || s->op->kind != OP_MOE) continue;
            const moe_desc *d = s->op->moe;
            most.hidden = d->hidden > most.hidden ? d->hidden : most.hidden;
            most.inter = s->expert_inter > most.inter ? s->expert_inter : most.inter;
            most.n_experts = d->n_experts > most.n_experts ? d->n_experts : most.n_experts;
            most.top_k = d->top_k > most.top_k ? d->top_k : most.top_k;
        }
    if (!most.n_experts) return 0;
    /* under expert parallelism a rank's experts may receive every rank's rows of a padded batch */
    int rows = round_up(x->max_tokens, x->comm->size);
    if (moe_scratch_init(&x->moe, rows, &most))
        return loom_errf(err, "out of memory allocating the experts' scratch for %d tokens", x->max_tokens);
    x->activation_bytes += moe_scratch_bytes(rows, &most, x->moe.threads);
    return 0;
}

/* The widest shard of rows any plan quantizes before a gather of quantized rows. */
static int alloc_quant_send(executor *x, loom_err *err) {
    size_t floats = 0, shard = (size_t)(x->max_tokens + x->comm->size - 1) / x->comm->size;
    for (int i = 0; i < x->n_plans; i++)
        for (int j = 0; j < x->plans[i].p.n_steps; j++) {
            const plan_step *s = &x->plans[i].p.steps[j];
            size_t f = s->code ? shard * rows_floats(s->code, x->plans[i].p.values[s->in[0]].width) : 0;
            if (f > floats) floats = f;
        }
    if (!floats) return 0;
    x->activation_bytes += floats * sizeof(float);
    return (x->quant_send = mem_aligned(floats * sizeof(float), "the quantized rows sent to a gather", err)) ? 0 : -1;
}

/* One state per recurrent op, which every plan's step of that op (the SP plan's and the plain
 * TP one's) reads and advances: a sequence's state is its own, whichever plan a pass runs. */
static int alloc_states(executor *x, loom_err *err) {
    size_t cap = 0;
    for (int i = 0; i < x->n_plans; i++)
        for (int k = 0; k < x->plans[i].p.n_steps; k++) {
            plan_step *s = &x->plans[i].p.steps[k], *first = NULL;
            size_t n = plan_state_floats(&x->plans[i].p, s);
            if (!n) continue;
            for (int j = 0; j < x->n_states && !first; j++)
                if (x->state_steps[j]->op == s->op) first = x->state_steps[j];
            if (!first) {
                size_t bytes = (size_t)x->max_seqs * n * sizeof(float),
                       snaps = (size_t)x->n_snapshot_slots * n * sizeof(float);
                if (ARRAY_RESERVE(x->state_steps, cap, (size_t)x->n_states + 1, "the recurrent states", err) ||
                    !(s->state = mem_aligned(bytes, "a recurrent layer's state", err)) ||
                    (snaps && !(s->snapshots = mem_aligned(snaps, "a recurrent layer's snapshots", err))))
                    return -1;
                memset(s->state, 0, bytes);
                x->state_bytes += bytes + snaps;
                x->state_steps[x->n_states++] = first = s;
            }
            s->state = first->state, s->snapshots = first->snapshots;
            s->state_stride = n;
        }
    return 0;
}

/* Whether decoder layer l has an attention step, so a KV cache. */
static bool attends(const executor *x, int l) {
    const plan *p = &x->plans[0].p;
    for (int i = 0; i < p->n_steps; i++)
        if (p->steps[i].kind == STEP_OP && p->steps[i].op->kind == OP_ATTENTION && p->steps[i].op->attn.layer == l)
            return true;
    return false;
}

int executor_init(executor *x, const rope_freqs *f, loom_err *err) {
    const plan *p = &x->plans[0].p;
    x->cur = &x->plans[0];
    for (int i = 0; i < x->n_plans; i++)
        if (alloc_buffers(x, &x->plans[i], err)) return -1;
    /* indexed by layer; this stage's are allocated */
    x->kv = mem_zalloc(x->layer1, sizeof *x->kv, "the KV cache's layers", err);
    if (!x->kv) return -1;
    /* the same in both plans */
    size_t per = (size_t)x->kv_blocks * x->block_size * kv_row_bytes(x->kv_dtype, p->kv_width, p->kv_slab, p->kv_group);
    for (int l = x->layer0; l < x->layer1; l++) { /* a latent cache (MLA) has no V */
        if (!attends(x, l)) continue;             /* a hybrid model's recurrent layer */
        x->kv[l] = (kv_layer){.kv_width = p->kv_width,
                              .block_size = x->block_size,
                              .tables = x->kv_tables,
                              .table_width = x->table_width};
        kv_layer_format(&x->kv[l], x->kv_dtype, p->kv_slab, p->kv_group);
        if (!(x->kv[l].k = mem_aligned(per, "the KV cache", err)) ||
            (!p->kv_latent && !(x->kv[l].v = mem_aligned(per, "the KV cache", err))))
            return -1;
        x->kv_bytes += (p->kv_latent ? 1 : 2) * per;
    }
    for (int j = 0; j < x->n_capture; j++) {
        size_t bytes = (size_t)x->capture_rows * x->capture_width * sizeof(float);
        if (!(x->capture[j] = mem_aligned(bytes, "the captured hidden states", err))) return -1;
        x->activation_bytes += bytes;
    }
    if (alloc_states(x, err) || alloc_moe_scratch(x, err) || alloc_quant_send(x, err) ||
        ep_init(&x->ep, p, x->ep_comm->size, x->comm->size, x->max_tokens, &x->activation_bytes, err))
        return -1;
    if (f->has_local && rope_table_init(&x->rope_local, f->local, NULL, f->half, 1.0f, x->max_ctx, err)) return -1;
    if (x->image_token >= 0 &&
        !(x->reach = mem_array((size_t)x->max_tokens, sizeof(int32_t), "image rows' reach", err)))
        return -1;
    x->rope_long_after = f->long_after;
    if (f->long_after) {
        size_t n = x->max_tokens;
        if (!(x->rope_rows = mem_array(n, sizeof(int32_t), "longrope's rows", err)) ||
            !(x->seq_ids = mem_array(n, sizeof(int32_t), "longrope's rows", err)) ||
            !(x->seq_reach = mem_array(n, sizeof(int32_t), "longrope's rows", err)))
            return -1;
    }
    return rope_table_init(&x->rope, f->inv, f->long_after ? f->long_inv : NULL, f->half, f->factor, x->max_ctx, err);
}

/* longrope, as transformers switches it per forward: a sequence whose rows in this pass reach
 * past long_after positions rotates all of them by the long set (rows max_ctx on of the table);
 * keys already cached keep the rotation they had. Under SP every rank sees the whole batch, so
 * the ranks agree. */
static int seq_slot(const int32_t *seqs, int n, int32_t seq) {
    int i = 0;
    while (i < n && seqs[i] != seq) i++;
    return i;
}

/* The image tokens' rows of an embedding: the batch's image rows in order. Under TP the embedding
 * is a partial sum over the ranks' vocabulary shards, so the first rank holds each image row and
 * the others zeros, which the reduction adds exactly. */
static void place_image_rows(const executor *x, const loom_batch *b, int image_token, float *out, size_t ldo, int w) {
    int k = 0;
    for (int r = 0; r < b->n_tokens; r++) {
        if (b->ids[r] != image_token) continue;
        float *o = out + (size_t)r * ldo;
        if (x->comm->rank == 0) memcpy(o, b->image_rows + (size_t)k * w, w * sizeof *o);
        else memset(o, 0, w * sizeof *o);
        k++;
    }
}

/* Each row's reach (attend_task's): an image's tokens, a run of image_token at consecutive
 * positions of one sequence, see to the run's last; NULL when the pass has no image rows (its
 * image tokens, if any, are plain tokens, as transformers runs a prompt without pixel values). */
static const int32_t *image_reach(executor *x, const loom_batch *b) {
    if (x->image_token < 0 || !b->image_rows) return NULL;
    bool any = false;
    for (int r = 0; r < b->n_tokens;) {
        int e = r + 1;
        if (b->ids[r] == x->image_token) {
            any = true;
            while (e < b->n_tokens && b->ids[e] == x->image_token && b->seq[e] == b->seq[r] &&
                   b->pos[e] == b->pos[e - 1] + 1)
                e++;
        }
        for (int i = r; i < e; i++) x->reach[i] = b->pos[e - 1];
        r = e;
    }
    return any ? x->reach : NULL;
}

const float *executor_image_rows_after(const executor *x, const float *rows, const int32_t *ids, int n) {
    for (int i = 0; rows && i < n; i++)
        if (ids[i] == x->image_token) rows += x->image_width;
    return rows;
}

static const int32_t *longrope_rows(executor *x, const loom_batch *b) {
    if (!x->rope_long_after) return b->pos;
    int n = 0; /* the pass's sequences, and the furthest position each reaches */
    for (int r = 0; r < b->n_tokens; r++) {
        int i = seq_slot(x->seq_ids, n, b->seq[r]);
        if (i == n) x->seq_ids[n] = b->seq[r], x->seq_reach[n++] = b->pos[r];
        else if (b->pos[r] > x->seq_reach[i]) x->seq_reach[i] = b->pos[r];
    }
    for (int r = 0; r < b->n_tokens; r++) {
        int i = seq_slot(x->seq_ids, n, b->seq[r]);
        x->rope_rows[r] = b->pos[r] + (x->seq_reach[i] + 1 > x->rope_long_after ? x->max_ctx : 0);
    }
    return x->rope_rows;
}

void executor_free(executor *x) {
    for (int i = 0; i < x->n_states; i++) /* before the plans holding them */
        free(x->state_steps[i]->state), free(x->state_steps[i]->snapshots);
    free(x->state_steps);
    for (int i = 0; i < 2; i++) {
        for (int b = 0; x->plans[i].buffers && b < x->plans[i].p.n_buffers; b++) free(x->plans[i].buffers[b]);
        free(x->plans[i].buffers);
        plan_free(&x->plans[i].p);
    }
    for (int l = x->layer0; x->kv && l < x->layer1; l++) free(x->kv[l].k), free(x->kv[l].v);
    free(x->kv);
    rope_table_free(&x->rope);
    rope_table_free(&x->rope_local);
    free(x->rope_rows), free(x->seq_ids), free(x->seq_reach), free(x->reach);
    moe_scratch_free(&x->moe);
    free(x->quant_send);
    for (int j = 0; j < x->n_capture; j++) free(x->capture[j]);
    ep_free(&x->ep);
}

/* Rows a value has in this pass: T tokens, this rank's T_pad/tp under SP, or the logit rows. */
static int value_rows(const executor *x, const plan_value *v, const loom_batch *b) {
    switch (v->rows) {
    case ROWS_LOGITS: return b->n_logits;
    case ROWS_SHARD: return round_up(b->n_tokens, x->comm->size) / x->comm->size;
    case ROWS_TOKENS: break;
    }
    return b->n_tokens;
}

/* This rank's shard rows of w columns as step s's quantized rows in x->quant_send, for a gather
 * of them (plan_step.code); their stride in floats, which is also the width the gather moves. */
static size_t quantize_shard(executor *x, const plan_step *s, const float *in, size_t ldi, int shard, int w) {
    size_t qw = rows_floats(s->code, w);
    quantize_rows(s->code, in, ldi, shard, w, s->in_scale, x->quant_send, qw);
    return qw;
}

static int run_collective(executor *x, const plan_step *s, const loom_batch *b, loom_err *err) {
    const plan_value *iv = &x->cur->p.values[s->in[0]], *ov = &x->cur->p.values[s->out];
    int n = x->comm->size, t_pad = round_up(b->n_tokens, n), shard = t_pad / n, w = iv->width;
    size_t ldi, ldo;
    float *in = value_at(x, s->in[0], &ldi), *out = value_at(x, s->out, &ldo);
    loom_comm_set_phase(x->comm, "%s in %s", step_kind_name(s->kind), s->mod->name);
    double t0 = omp_get_wtime();
    int rc = 0;
    switch (s->kind) {
    case STEP_ALL_REDUCE: rc = comm_all_reduce(x->comm, in, ldi, out, ldo, value_rows(x, ov, b), w, err); break;
    case STEP_GATHER_COLS:
        rc = comm_all_gather_cols(x->comm, in, ldi, out, ldo, value_rows(x, ov, b), x->cur->p.vocab_col0,
                                  x->cur->p.vocab_width, err);
        break;
    case STEP_REDUCE_SCATTER: /* padded rows at the end carry zeros, so every shard is whole */
        for (int r = b->n_tokens; r < t_pad; r++) memset(in + (size_t)r * ldi, 0, w * sizeof *in);
        rc = comm_reduce_scatter_rows(x->comm, in, ldi, out, ldo, t_pad, w, err);
        break;
    case STEP_GATHER_ROWS:
        if (s->code) { /* this rank's rows quantized, then the gather moves those (plan.c) */
            size_t qw = quantize_shard(x, s, in, ldi, shard, w);
            rc = comm_all_gather_rows(x->comm, x->quant_send, qw, out, ldo, shard, (int)qw, err);
        } else {
            rc = comm_all_gather_rows(x->comm, in, ldi, out, ldo, shard, w, err);
        }
        break;
    case STEP_SLICE_ROWS: /* this rank's rows; those past the batch are padding, zeros as a reduce-scatter leaves */
        for (int i = 0; i < shard; i++) {
            int r = x->comm->rank * shard + i;
            if (r < b->n_tokens) memcpy(out + (size_t)i * ldo, in + (size_t)r * ldi, w * sizeof *out);
            else memset(out + (size_t)i * ldo, 0, w * sizeof *out);
        }
        break;
    case STEP_GATHER_LOGITS:
        rc = comm_gather_rows_at(x->comm, in, ldi, shard, b->logit_rows, b->n_logits, out, ldo, w, err);
        break;
    case STEP_OP:
    case STEP_EP_MOE:
    case STEP_AG_MATMUL:
    case STEP_MATMUL_RS:
    case STEP_SEND:
    case STEP_RECV:
    case STEP_CAPTURE:
    case STEP_KIND_COUNT: break;
    }
    if (!rc && s->bias[0]) add_rows(out, ldo, s->bias[0], 0, out, ldo, value_rows(x, ov, b), ov->width);
    x->st.comm_seconds += omp_get_wtime() - t0;
    return rc;
}

/* The GEMM of a fused step, over one block of rows or one chunk of it (see comm.h's callbacks). */
typedef struct fused_gemm {
    const plan_step *s;
    const float *in; /* matmul-reduce-scatter: the whole input */
    size_t ldi, ldo;
    float *out; /* all-gather-matmul: the whole output */
    int tokens; /* real rows of the pass: the kernel is chosen by it, blocks past it skipped */
    int chunk;  /* rows per GEMM */
} fused_gemm;

static void gather_gemm(void *ctx, const float *x, size_t ldx, int row0, int rows) {
    fused_gemm *g = ctx;
    int n = g->tokens - row0 < rows ? g->tokens - row0 : rows;
    for (int i = 0; i < g->s->op->lin->n_parts; i++) {
        float *y = g->out + (size_t)row0 * g->ldo + g->s->col[i];
        if (g->s->code)
            linear_quantized_rows(g->s->code, x, ldx, n, g->chunk, g->tokens, &g->s->w[i], g->s->bias[i], y, g->ldo);
        else linear_chunked(x, ldx, n, g->chunk, g->tokens, &g->s->w[i], g->s->bias[i], y, g->ldo);
    }
}

static void partial_gemm(void *ctx, int row0, int rows, float *y, size_t ldy) {
    fused_gemm *g = ctx;
    int n = g->tokens - row0 < rows ? g->tokens - row0 : rows;
    if (n < 0) n = 0;
    linear_chunked(g->in + (size_t)row0 * g->ldi, g->ldi, n, g->chunk, g->tokens, &g->s->w[0], NULL, y, ldy);
    for (int r = n; r < rows; r++) memset(y + (size_t)r * ldy, 0, g->s->w[0].rows * sizeof *y); /* padding */
}

static int run_fused(executor *x, const plan_step *s, const loom_batch *b, loom_err *err) {
    const plan_value *ov = &x->cur->p.values[s->out];
    int shard = round_up(b->n_tokens, x->comm->size) / x->comm->size;
    size_t ldi, ldo;
    const float *in = value_at(x, s->in[0], &ldi);
    float *out = value_at(x, s->out, &ldo);
    fused_gemm g = {s, in, ldi, ldo, out, b->n_tokens, comm_chunk_rows(x->comm, shard)};
    loom_comm_set_phase(x->comm, "%s in %s", step_kind_name(s->kind), s->mod->name);
    double t0 = omp_get_wtime();
    int w = x->cur->p.values[s->in[0]].width;
    if (s->kind == STEP_AG_MATMUL && s->code) { /* quantized before the gather, as a plain gather does */
        ldi = quantize_shard(x, s, in, ldi, shard, w);
        in = x->quant_send, w = (int)ldi;
    }
    int rc = s->kind == STEP_AG_MATMUL
                 ? comm_all_gather_matmul(x->comm, in, ldi, shard, w, gather_gemm, &g, err)
                 : comm_matmul_reduce_scatter(x->comm, shard, ov->width, partial_gemm, &g, out, ldo, err);
    if (!rc && s->kind == STEP_MATMUL_RS && s->bias[0]) add_rows(out, ldo, s->bias[0], 0, out, ldo, shard, ov->width);
    x->st.comm_seconds += omp_get_wtime() - t0;
    return rc;
}

/* The shape the kernels run step s's experts with (all of them, for routing). */
/* The module tree's activation as the kernels name it. */
static gate_fn gate_of(const glu_desc *g) {
    gate_kind kind = g->act == GLU_SILU_CLAMPED ? GATE_SILU_CLAMPED
                     : g->act == GLU_GELU_TANH  ? GATE_GELU_TANH
                     : g->act == GLU_RELU2      ? GATE_RELU2
                                                : GATE_SILU;
    return (gate_fn){kind, g->limit, g->alpha};
}

static moe_shape moe_shape_of(const plan_step *s) {
    const moe_desc *d = s->op->moe;
    return (moe_shape){.hidden = d->hidden,
                       .inter = s->expert_inter,
                       .n_experts = d->n_experts,
                       .top_k = d->top_k,
                       .softmax_of_topk = d->routing == ROUTE_TOPK_SOFTMAX,
                       .norm_topk = d->norm_topk,
                       .sigmoid = d->sigmoid,
                       .n_group = d->n_group,
                       .topk_group = d->topk_group,
                       .group_top2_sum = d->group_top2_sum,
                       .bias = s->route_bias,
                       .scale = d->scale,
                       .gate = gate_of(&d->act),
                       .expert_bias = s->expert_bias};
}

static void run_step(executor *x, const plan_step *s, const loom_batch *b) {
    const op *o = s->op;
    const plan_value *ov = &x->cur->p.values[s->out];
    int rows = value_rows(x, ov, b), w = ov->width;
    size_t ldo, ld0 = 0, ld1 = 0, ld2 = 0;
    float *out = value_at(x, s->out, &ldo);
    const float *in0 = s->n_in > 0 ? value_at(x, s->in[0], &ld0) : NULL;
    const float *in1 = s->n_in > 1 ? value_at(x, s->in[1], &ld1) : NULL;
    const float *in2 = s->n_in > 2 ? value_at(x, s->in[2], &ld2) : NULL;
    switch (o->kind) {
    case OP_EMBED:
        embed_rows(&s->w[0], s->vocab0, b->ids, rows, out, ldo);
        if (o->scalar != 1.0f) scale_rows(out, ldo, o->scalar, out, ldo, rows, w);
        if (o->image_token >= 0 && b->image_rows) place_image_rows(x, b, o->image_token, out, ldo, w);
        break;
    case OP_LINEAR: {
        /* Sharded linears run in the blocks and chunks the fused collectives use (T padded to a
         * multiple of the ranks, one block per rank, cut as comm_chunk_rows says), so that
         * every mode hands the BLAS the same GEMM shapes and TP, SP and async TP agree bit for
         * bit by construction. */
        bool sharded = o->lin->style == PAR_COLUMN || o->lin->style == PAR_ROW;
        rows_code code = x->cur->p.values[s->in[0]].code; /* gathered as quantized rows */
        int block = sharded ? round_up(rows, x->comm->size) / x->comm->size : rows;
        for (int r0 = 0; r0 < rows; r0 += block) {
            int m = rows - r0 < block ? rows - r0 : block;
            for (int i = 0; i < o->lin->n_parts; i++) {
                float *y = out + (size_t)r0 * ldo + s->col[i];
                int chunk = comm_chunk_rows(x->comm, block);
                if (code)
                    linear_quantized_rows(code, in0 + (size_t)r0 * ld0, ld0, m, chunk, rows, &s->w[i], s->bias[i], y,
                                          ldo);
                else linear_chunked(in0 + (size_t)r0 * ld0, ld0, m, chunk, rows, &s->w[i], s->bias[i], y, ldo);
            }
        }
        break;
    }
    case OP_RMS_NORM:
        if (s->sum_squares) sum_squares(in0, ld0, out, ldo, rows, x->cur->p.values[s->in[0]].width);
        else if (o->gate_silu) rms_norm_gated(in0, ld0, in1, ld1, out, ldo, rows, w, o->group, s->norm_w, o->eps);
        else if (in1) rms_norm_by(in0, ld0, in1, ld1, out, ldo, rows, w, o->features, s->norm_w, o->eps);
        else rms_norm(in0, ld0, out, ldo, rows, w, o->group ? o->group : w, s->norm_w, o->wide, o->eps);
        break;
    case OP_MOE: {
        moe_shape sh = moe_shape_of(s);
        double t0 = omp_get_wtime();
        moe_forward(&sh, s->experts, in0, ld0, in1, ld1, rows, out, ldo, &x->moe);
        x->st.experts.seconds += omp_get_wtime() - t0;
        /* gate (if any), up, down: 2 flops a weight */
        x->st.experts.flop += (sh.gate.kind == GATE_RELU2 ? 4.0 : 6.0) * sh.hidden * sh.inter * rows * sh.top_k;
        x->st.experts.pairs += (long)rows * sh.top_k;
        break;
    }
    case OP_SIGMOID_GATE: sigmoid_gate(in0, ld0, in1, ld1, x->cur->p.values[s->in[1]].width, out, ldo, rows, w); break;
    case OP_HEAD_SLICE:
        for (int i = 0; i < rows; i++)
            for (int h = 0; h < w / o->slice.width; h++)
                memcpy(out + i * ldo + h * o->slice.width, in0 + i * ld0 + h * o->slice.stride + o->slice.offset,
                       o->slice.width * sizeof *out);
        break;
    case OP_CONV1D: {
        conv_inputs c = {.n_in = s->n_in, .kernel = o->rec->kernel};
        for (int i = 0; i < s->n_in; i++) {
            c.x[i] = value_at(x, s->in[i], &c.ldx[i]);
            c.width[i] = x->cur->p.values[s->in[i]].width;
            c.w[i] = s->w[i].data, c.ldw[i] = s->w[i].ld, c.bias[i] = s->bias[i];
        }
        state_snapshots sn = x->snaps;
        sn.base = s->snapshots;
        conv1d_silu(&c, out, ldo, rows, b->pos, b->seq, s->state, s->state_stride, &sn);
        break;
    }
    case OP_SSM_SCAN: {
        const recurrent_desc *r = o->rec;
        int heads = w / r->v_dim, groups = heads * r->n_groups / r->n_v_heads;
        ssm_shape sh = {heads,     r->v_dim,     groups ? groups : 1, r->d_state,  r->dt_min,
                        r->dt_max, s->w[0].data, s->w[1].data,        s->w[2].data};
        state_snapshots sn = x->snaps;
        sn.base = s->snapshots;
        ssm_scan(&sh, in0, ld0, in1, ld1, out, ldo, rows, b->pos, b->seq, s->state, s->state_stride, &sn);
        break;
    }
    case OP_GATED_DELTA: {
        const recurrent_desc *r = o->rec;
        int nv = w / r->v_dim;
        delta_shape sh = {nv * r->n_k_heads / r->n_v_heads, nv, r->k_dim, r->v_dim, s->w[0].data, s->w[1].data};
        state_snapshots sn = x->snaps;
        sn.base = s->snapshots;
        gated_delta(&sh, in0, ld0, in1, ld1, in2, ld2, out, ldo, rows, b->pos, b->seq, s->state, s->state_stride, &sn);
        break;
    }
    case OP_ROPE:
        rope_apply(o->rope.local ? &x->rope_local : &x->rope, in0, ld0, out, ldo, rows, w / o->rope.stride,
                   o->rope.stride, o->rope.offset, o->rope.interleaved, o->rope.local ? b->pos : x->pass_rope_rows);
        break;
    case OP_ATTENTION:
        if (s->attn.mla.kv_lora)
            mla_attention(&s->attn, &x->kv[o->attn.layer], in0, ld0, in1, ld1, in2, ld2, s->w[1].data, out, ldo, rows,
                          b->pos, b->seq);
        else
            attention(&s->attn, &x->kv[o->attn.layer], in0, ld0, in1, ld1, in2, ld2, out, ldo, rows, b->pos, b->seq,
                      x->pass_reach);
        break;
    case OP_GLU: {
        gate_fn f = gate_of(&o->glu);
        glu(&f, in0, ld0, in1, ld1, out, ldo, rows, w);
        break;
    }
    case OP_SOFTCAP: softcap_rows(in0, ld0, o->scalar, out, ldo, rows, w); break;
    case OP_RELU2: relu2_rows(in0, ld0, out, ldo, rows, w); break;
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
    case OP_INPUT_ROWS:
        for (int i = 0; i < rows; i++) memcpy(out + i * ldo, x->rows_in + (size_t)i * w, w * sizeof *out);
        break;
    case OP_CONCAT: {
        int w0 = x->cur->p.values[s->in[0]].width;
        for (int i = 0; i < rows; i++) {
            memcpy(out + i * ldo, in0 + i * ld0, w0 * sizeof *out);
            memcpy(out + i * ldo + w0, in1 + i * ld1, (w - w0) * sizeof *out);
        }
        break;
    }
    case OP_SPLIT:
    case OP_CALL:
    case OP_KIND_COUNT: break; /* never steps */
    }
}

/* A captured value's rows, kept in its slot (rows past the pass's first at capture_row0). */
static void run_capture(executor *x, const plan_step *s, const loom_batch *b) {
    const plan_value *v = &x->cur->p.values[s->in[0]];
    size_t ld;
    const float *in = value_at(x, s->in[0], &ld);
    float *to = x->capture[s->capture_slot] + (size_t)x->capture_row0 * x->capture_width;
    for (int i = 0; i < value_rows(x, v, b); i++)
        memcpy(to + (size_t)i * x->capture_width, in + i * ld, v->width * sizeof *to);
}

int executor_share_captures(executor *x, int rows, loom_err *err) {
    for (int j = 0; j < x->n_capture; j++) {
        loom_comm_set_phase(x->world, "stage %d: captured hidden state %d from rank %d", x->stage, j,
                            x->capture_root[j]);
        if (comm_broadcast_floats(x->world, x->capture_root[j], x->capture[j], (size_t)rows * x->capture_width, err))
            return -1;
    }
    return 0;
}

/* A stage boundary: the hidden state, as the plan holds it on this rank, goes to or comes from
 * the rank of the same TP rank in the next or previous stage. */
static int run_boundary(executor *x, const plan_step *s, const loom_batch *b, loom_err *err) {
    bool send = s->kind == STEP_SEND;
    int v = send ? s->in[0] : s->out, tp = x->comm->size, peer = x->world->rank + (send ? tp : -tp);
    const plan_value *pv = &x->cur->p.values[v];
    size_t ld;
    float *rows_at = value_at(x, v, &ld);
    int rows = value_rows(x, pv, b);
    loom_comm_set_phase(x->world, "stage %d: %s of %d rows %s stage %d", x->stage, send ? "send" : "recv", rows,
                        send ? "to" : "from", x->stage + (send ? 1 : -1));
    double t0 = omp_get_wtime();
    int rc = send ? comm_send_rows(x->world, peer, rows_at, ld, rows, pv->width, err)
                  : comm_recv_rows(x->world, peer, rows_at, ld, rows, pv->width, err);
    *(send ? &x->st.wait_next_s : &x->st.wait_prev_s) += omp_get_wtime() - t0;
    return rc;
}

/* An expert-parallel MoE step: expert_parallel.c routes, dispatches, runs this rank's experts
 * and combines; its all-to-alls count as collectives, the rest as the moe op. */
static int run_ep_moe(executor *x, const plan_step *s, const loom_batch *b, loom_err *err) {
    size_t ldx, ldl, ldo;
    const float *in = value_at(x, s->in[0], &ldx), *logits = value_at(x, s->in[1], &ldl);
    float *out = value_at(x, s->out, &ldo);
    moe_shape sh = moe_shape_of(s);
    double t0 = omp_get_wtime(), comm0 = x->st.comm_seconds;
    if (ep_moe_step(&x->ep, x->ep_comm, x->comm, &x->moe, s, &sh, in, ldx, logits, ldl, out, ldo, b->n_tokens,
                    &x->st.experts, &x->st.comm_seconds, err))
        return -1;
    if (x->profile) x->st.op_seconds[OP_MOE] += omp_get_wtime() - t0 - (x->st.comm_seconds - comm0);
    return 0;
}

int executor_run_pass(executor *x, const loom_batch *b, loom_err *err) {
    x->cur = &x->plans[x->n_plans > 1 && b->n_tokens < x->sp_min_tokens];
    x->pass_rope_rows = longrope_rows(x, b);
    x->pass_reach = image_reach(x, b);
    ep_begin_pass(&x->ep);
    for (int i = 0; i < x->cur->p.n_steps; i++) {
        const plan_step *s = &x->cur->p.steps[i];
        switch (s->kind) {
        case STEP_OP: {
            double t0 = x->profile ? omp_get_wtime() : 0;
            run_step(x, s, b);
            if (x->profile) x->st.op_seconds[s->op->kind] += omp_get_wtime() - t0;
            break;
        }
        case STEP_EP_MOE:
            if (run_ep_moe(x, s, b, err)) return -1;
            break;
        case STEP_SEND:
        case STEP_RECV:
            if (run_boundary(x, s, b, err)) return -1;
            break;
        case STEP_CAPTURE: run_capture(x, s, b); break;
        default: {
            double waited = x->comm->blocked_s;
            bool fused = s->kind == STEP_AG_MATMUL || s->kind == STEP_MATMUL_RS;
            if (fused ? run_fused(x, s, b, err) : run_collective(x, s, b, err)) return -1;
            x->st.waited_seconds[s->kind] += x->comm->blocked_s - waited;
        }
        }
    }
    return kernel_scratch_check(err); /* a kernel that lost its scratch skipped its work: the pass failed */
}

int executor_run_idle(executor *x, loom_err *err) {
    x->cur = &x->plans[0];
    ep_begin_pass(&x->ep);
    const loom_batch none = {0};
    for (int i = 0; i < x->cur->p.n_steps; i++)
        if (x->cur->p.steps[i].kind == STEP_EP_MOE && run_ep_moe(x, &x->cur->p.steps[i], &none, err)) return -1;
    return 0;
}

void executor_take_logits(const executor *x, const loom_batch *b, float *logits, size_t vocab, const int32_t *at) {
    size_t ld;
    const float *out = value_at(x, x->cur->p.output, &ld);
    for (int r = 0; r < b->n_logits; r++) memcpy(logits + (at ? at[r] : r) * vocab, out + r * ld, vocab * sizeof *out);
}

void executor_restore_state(executor *x, int seq, int slot) {
    for (int i = 0; i < x->n_states; i++) {
        const plan_step *s = x->state_steps[i];
        memcpy(s->state + (size_t)seq * s->state_stride, s->snapshots + (size_t)slot * s->state_stride,
               s->state_stride * sizeof *s->state);
    }
}

void executor_reset_stats(executor *x, bool profile) {
    x->profile = profile;
    memset(&x->st, 0, sizeof x->st);
    ep_reset_stats(&x->ep, x->ep_comm->size);
}

/* Tensor parallelism: each rank's share of the weights, following Megatron-LM as vLLM does:
 * column-parallel linears split their output features (whole heads for q/k/v; kv heads are
 * replicated when there are fewer than ranks), row-parallel linears split their input features
 * and produce a partial sum (its bias counted once: see plan_collective), the embedding and
 * LM head split the vocabulary, and each expert of a mixture is split like an MLP (every rank
 * holds a share of every expert, as vLLM's TP without expert parallelism does), or under expert
 * parallelism held whole by one rank (ep.c places them). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "plan/plan_impl.h"
#include "quant/checkpoint.h"
#include "util/err.h"

/* The rows [*r0, *r0 + *nr) of a column-parallel part that this rank holds. */
static int shard_rows(const plan *p, const linear_part *pt, const module *m, int *r0, int *nr, bool *replicated,
                      loom_err *err) {
    int tp = p->o.tp, rank = p->o.rank;
    if (pt->whole) { /* complete on every rank: its split is DIST_FULL (flatten_split) */
        *r0 = 0;
        *nr = pt->out;
        return 0;
    }
    if (pt->head_dim) {
        int heads = pt->out / pt->head_dim, hd = pt->head_dim;
        if (heads % tp == 0) {
            *nr = heads / tp * hd;
            *r0 = rank * *nr;
            return 0;
        }
        if (pt->replicable && tp % heads == 0) { /* fewer kv heads than ranks: each rank keeps one */
            *r0 = rank * heads / tp * hd;
            *nr = hd;
            *replicated = true;
            return 0;
        }
        return loom_errf(err, "%s: %s has %d heads, which cannot be split across %d ranks", m->name, pt->weight,
                         heads, tp);
    }
    if (pt->out % tp)
        return loom_errf(err, "%s: %s has %d output features, not divisible by %d ranks", m->name, pt->weight,
                         pt->out, tp);
    *nr = pt->out / tp;
    *r0 = rank * *nr;
    return 0;
}

/* Dummy-weight scale keeping activations O(1): uniform(-a, a) has variance a^2/3, so
 * a = sqrt(3/in) gives unit-variance outputs for unit-variance inputs. */
static float linear_init(int in) { return sqrtf(3.0f / (float)in); }

/* The scheme a linear is quantized to at load: every sharded linear and expert takes
 * --quantization's; replicated linears (routers, gates: tiny) stay float, and so do the LM
 * head and the embedding table (PAR_VOCAB) unless asked (--quantize-lm-head: 8 bits per
 * channel, as llama.cpp keeps its output layer wider than a 4-bit body), since the logits feel
 * the head's error directly: on stories260K an int8 head alone moves greedy decoding off the
 * published story at token 61. */
quant_scheme shard_scheme(const plan *p, par_style style) {
    if (!p->o.quant.bits || style == PAR_REPLICATED) return (quant_scheme){0};
    if (style == PAR_VOCAB) return p->o.quant.head ? (quant_scheme){8, 0, true} : (quant_scheme){0};
    return p->o.quant;
}

/* Rows [r0, r0+nr) x columns [c0, c0+nc) of float tensor `name` (ndim dimensions `shape`, read
 * as [rows, cols]): quantized at load where the scheme for its style says, else as stored
 * (dummy values of scale `init`). A split that cuts a quantization group is refused here,
 * before any weight is read (ws NULL). */
static int bind_stored(const plan *p, weight_store *ws, par_style style, const char *name, int ndim, const int *shape,
                       int cols, int r0, int nr, int c0, int nc, float init, wmat *out, loom_err *err) {
    quant_scheme q = shard_scheme(p, style);
    if (q.bits && quant_check_split(&q, name, cols, c0, nc, err)) return -1;
    if (!ws) return 0;
    if (q.bits) return quant_online(ws, &q, name, ndim, shape, cols, r0, nr, c0, nc, init, out, err);
    if (ndim == 2) return weights_get(ws, name, shape[0], cols, r0, nr, c0, nc, false, init, out, err);
    return weights_get_expert(ws, name, shape[0], r0 / shape[1], shape[1], cols, r0 % shape[1], nr, c0, nc, init, out,
                              err);
}

/* A linear weight's slice: read from a quantized checkpoint where it stores this linear
 * quantized, else as bind_stored gives it. */
static int bind_weight(const plan *p, weight_store *ws, par_style style, const char *name, int ndim, const int *shape,
                       int cols, int r0, int nr, int c0, int nc, wmat *out, loom_err *err) {
    const quant_config *cq = p->o.checkpoint;
    if (cq && quant_checkpoint_applies(cq, name, style)) {
        if (ndim != 2) return loom_errf(err, "%s: quantized stacked expert tensors are not supported", name);
        if (quant_checkpoint_check(cq, name, shape[0], cols, r0, nr, c0, nc, err)) return -1;
        if (ws && quant_checkpoint_has(ws, cq, name))
            return quant_checkpoint_get(ws, cq, name, shape[0], cols, r0, nr, c0, nc, out, err);
    }
    return bind_stored(p, ws, style, name, ndim, shape, cols, r0, nr, c0, nc, linear_init(cols), out, err);
}

int shard_bind_linear(plan *p, plan_step *s, const linear_desc *l, int in_width, const module *m, weight_store *ws,
                      loom_err *err) {
    int col = 0;
    for (int i = 0; i < l->n_parts; i++) {
        const linear_part *pt = &l->parts[i];
        int r0 = 0, nr = pt->out, c0 = 0, nc = l->in;
        bool bias = pt->bias[0];
        switch (l->style) {
        case PAR_COLUMN:
            if (shard_rows(p, pt, m, &r0, &nr, &s->replicated[i], err)) return -1;
            break;
        case PAR_ROW:
            if (l->in % p->o.tp || in_width != l->in / p->o.tp)
                return loom_errf(err, "%s: %s reads %d input features of %d, not a 1/%d share", m->name, pt->weight,
                                 in_width, l->in, p->o.tp);
            nc = in_width;
            c0 = p->o.rank * nc;
            break;
        case PAR_VOCAB:
            r0 = p->vocab_col0[p->o.rank];
            nr = p->vocab_width[p->o.rank];
            break;
        case PAR_REPLICATED:
            break;
        }
        /* a part that is a row range of its tensor reads from row0 on */
        int shape[2] = {pt->tensor_rows ? pt->tensor_rows : pt->out, l->in};
        if (bind_weight(p, ws, l->style, pt->weight, 2, shape, l->in, pt->row0 + r0, nr, c0, nc, &s->w[i], err))
            return loom_err_prefix(err, "%s", m->name);
        if (ws && bias) {
            wmat b;
            if (weights_get(ws, pt->bias, shape[0], 0, pt->row0 + r0, nr, 0, 0, true, 0.02f, &b, err))
                return loom_err_prefix(err, "%s", m->name);
            /* a row-parallel bias must enter the sum over ranks once: rank 0 adds it to its
             * partial, unless the completing collective takes it over (plan_collective) */
            bool row = l->style == PAR_ROW && p->o.tp > 1;
            s->bias[i] = row && p->o.rank ? NULL : b.data;
            if (row) s->row_bias = b.data;
        }
        s->col[i] = col;
        s->feat0[i] = r0;
        col += nr;
    }
    return col;
}

int shard_bind_moe(plan *p, plan_step *s, const moe_desc *d, const module *m, weight_store *ws, loom_err *err) {
    int tp = p->o.tp, I = d->inter, H = d->hidden;
    /* expert parallelism: whole experts, a contiguous range of them per rank (ep.c) */
    bool ep = p->o.ep && tp > 1;
    if (!ep && I % tp)
        return loom_errf(err, "%s: its experts have %d features, not divisible by %d ranks", m->name, I, tp);
    int nr = ep ? I : I / tp, r0 = ep ? 0 : p->o.rank * nr;
    s->expert_inter = nr;
    s->expert0 = 0, s->n_experts = d->n_experts;
    if (ep) {
        ep_placement(d->n_experts, tp, p->o.rank, &s->expert0, &s->n_experts);
        /* a dispatched row: the token's hidden state, then its experts on the rank and their weights */
        if (H + 2 * d->top_k > p->max_comm_cols[ROWS_TOKENS]) p->max_comm_cols[ROWS_TOKENS] = H + 2 * d->top_k;
    }
    /* per-expert tensors, or the layout's fused alternative where the checkpoint holds that */
    bool fused = ws && d->fused_gate_up[0] && weights_has(ws, d->fused_gate_up);
    const char *gate = fused ? d->fused_gate_up : d->gate, *down = fused ? d->fused_down : d->down;
    if (ws && d->bias[0]) {
        wmat b;
        if (weights_get(ws, d->bias, d->n_experts, 0, 0, 0, 0, 0, true, 0.02f, &b, err))
            return loom_err_prefix(err, "%s", m->name);
        s->route_bias = b.data;
    }
    if (ws) s->experts = calloc(3 * (size_t)(s->n_experts ? s->n_experts : 1), sizeof *s->experts);
    for (int e = s->expert0; e < s->expert0 + s->n_experts; e++) {
        wmat *w = ws ? &s->experts[3 * (e - s->expert0)] : &(wmat[3]){0}[0];
        int rc;
        if (d->stacked || fused) { /* gate rows, then up rows, of one [2I, H] matrix per expert */
            int gu[3] = {d->n_experts, 2 * I, H}, dn[3] = {d->n_experts, H, I};
            rc = bind_weight(p, ws, PAR_COLUMN, gate, 3, gu, H, e * 2 * I + r0, nr, 0, H, &w[0], err) ||
                 bind_weight(p, ws, PAR_COLUMN, gate, 3, gu, H, e * 2 * I + I + r0, nr, 0, H, &w[1], err) ||
                 bind_weight(p, ws, PAR_ROW, down, 3, dn, I, e * H, H, r0, nr, &w[2], err);
        } else {
            char g[160], u[160], dn[160];
            snprintf(g, sizeof g, d->gate, e);
            snprintf(u, sizeof u, d->up, e);
            snprintf(dn, sizeof dn, d->down, e);
            int gu_shape[2] = {I, H}, dn_shape[2] = {H, I};
            rc = bind_weight(p, ws, PAR_COLUMN, g, 2, gu_shape, H, r0, nr, 0, H, &w[0], err) ||
                 bind_weight(p, ws, PAR_COLUMN, u, 2, gu_shape, H, r0, nr, 0, H, &w[1], err) ||
                 bind_weight(p, ws, PAR_ROW, dn, 2, dn_shape, I, 0, H, r0, nr, &w[2], err);
        }
        if (rc) return loom_err_prefix(err, "%s", m->name);
        if (!ws) break; /* the split checks are the same for every expert */
    }
    return H;
}

int shard_bind_embed(plan *p, plan_step *s, const linear_part *table, int hidden, const module *m, weight_store *ws,
                     loom_err *err) {
    int shape[2] = {table->out, hidden};
    s->vocab0 = p->vocab_col0[p->o.rank];
    /* quantized like the LM head where that is (a tied head is then the same matrix) */
    if (bind_stored(p, ws, PAR_VOCAB, table->weight, 2, shape, hidden, s->vocab0, p->vocab_width[p->o.rank], 0, hidden,
                    1.0f, &s->w[0], err))
        return loom_err_prefix(err, "%s", m->name);
    return hidden;
}

/* Vocabulary shards: ceil(V / tp) rows each, the last rank the rest. */
int shard_vocab(plan *p, const module *tree, loom_err *err) {
    int vocab = 0, tp = p->o.tp;
    for (int i = 0; i < tree->n_ops; i++)
        if (tree->ops[i].kind == OP_EMBED) vocab = tree->ops[i].lin->parts[0].out;
    p->vocab_col0 = calloc(tp, sizeof *p->vocab_col0);
    p->vocab_width = calloc(tp, sizeof *p->vocab_width);
    int per = (vocab + tp - 1) / tp;
    for (int r = 0; r < tp; r++) {
        p->vocab_col0[r] = r * per;
        p->vocab_width[r] = r + 1 < tp ? per : vocab - r * per;
        if (p->vocab_width[r] <= 0) return loom_errf(err, "a vocabulary of %d cannot be split across %d ranks", vocab, tp);
    }
    return 0;
}

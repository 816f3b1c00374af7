/* Tensor parallelism: each rank's share of the weights, following Megatron-LM as vLLM does:
 * column-parallel linears split their output features (whole heads for q/k/v; kv heads are
 * replicated when there are fewer than ranks), row-parallel linears split their input features
 * and produce a partial sum (its bias counted once: see plan_collective), the embedding and
 * LM head split the vocabulary, and each expert of a mixture is split like an MLP (every rank
 * holds a share of every expert, as vLLM's TP without expert parallelism does), or under expert
 * parallelism held whole by one rank (ep.c places them). Each step names the slices this rank
 * reads; a split the checkpoint's packing or the quantization scheme cannot take is refused
 * here, before any weight is read (runtime/bind.c reads them). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "plan/plan_impl.h"
#include "quant/checkpoint.h"
#include "util/alloc.h"
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
        return loom_errf(err, "%s: %s has %d heads, which cannot be split across %d ranks", m->name, pt->weight, heads,
                         tp);
    }
    if (pt->out % tp)
        return loom_errf(err, "%s: %s has %d output features, not divisible by %d ranks", m->name, pt->weight, pt->out,
                         tp);
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
    /* the head at 8 bits: FP8 stays FP8, the integer and FP4 formats take int8 */
    enum qcode head_code = p->o.quant.code == QCODE_E2M1 ? QCODE_UINT : p->o.quant.code;
    if (style == PAR_VOCAB)
        return p->o.quant.head ? (quant_scheme){8, 0, true, head_code, 0, 0, false} : (quant_scheme){0};
    return p->o.quant;
}

/* Refuses a split of r that cuts a quantization group or a packed word, naming the tensor and
 * the numbers: a linear stored quantized is held to its checkpoint's packing, and any linear
 * or table quantized at load to its scheme's groups. */
static int check_split(const plan *p, const weight_ref *r, loom_err *err) {
    const quant_config *cq = p->o.checkpoint;
    /* MXFP4 checkpoints quantize stacked experts only (transformers' replaces GPT-OSS's experts) */
    bool mx_float = cq && cq->format == QF_MXFP4 && r->ndim != 3;
    if (r->kind == WEIGHT_LINEAR && cq && !mx_float && quant_checkpoint_applies(cq, r->name, r->style)) {
        if (r->ndim != 2 && cq->format != QF_MXFP4 && cq->format != QF_GGUF)
            return loom_errf(err, "%s: quantized stacked expert tensors are not supported", r->name);
        if (quant_checkpoint_check(cq, r->name, r->ndim == 3 ? r->shape[0] * r->shape[1] : r->shape[0], r->cols, r->r0,
                                   r->nr, r->c0, r->nc, err))
            return -1;
    }
    quant_scheme q = shard_scheme(p, r->style);
    return q.bits ? quant_check_split(&q, r->name, r->cols, r->c0, r->nc, err) : 0;
}

int shard_linear(plan *p, plan_step *s, const linear_desc *l, int in_width, const module *m, loom_err *err) {
    int col = 0;
    for (int i = 0; i < l->n_parts; i++) {
        const linear_part *pt = &l->parts[i];
        int r0 = 0, nr = pt->out, c0 = 0, nc = l->in;
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
        case PAR_REPLICATED: break;
        }
        /* a part that is a row range of its tensor reads from row0 on */
        int rows = pt->tensor_rows ? pt->tensor_rows : pt->out;
        s->weight[i] =
            (weight_ref){WEIGHT_LINEAR, pt->weight,         2, {rows, l->in}, l->in, pt->row0 + r0, nr, c0, nc,
                         l->style,      linear_init(l->in), 0};
        if (check_split(p, &s->weight[i], err)) return loom_err_prefix(err, "%s", m->name);
        if (pt->bias[0]) {
            weight_ref b = {WEIGHT_F32, pt->bias, 1, {rows}, 0, pt->row0 + r0, nr, 0, 0, PAR_REPLICATED, 0.02f, 0};
            /* a row-parallel bias must enter the sum over ranks once: rank 0 adds it to its
             * partial, unless the completing collective takes it over (plan_collective) */
            bool row = l->style == PAR_ROW && p->o.tp > 1;
            if (!(row && p->o.rank)) s->bias_ref[i] = b;
            if (row) s->row_bias_ref = b;
        }
        s->col[i] = col;
        s->feat0[i] = r0;
        col += nr;
    }
    return col;
}

void expert_slices(const plan_step *s, int e, bool fused, char names[3][160], weight_ref out[3]) {
    const moe_desc *d = s->op->moe;
    int E = d->n_experts, I = d->inter, H = d->hidden, r0 = s->expert_r0, nr = s->expert_inter;
    if (d->stacked || fused) { /* gate rows, then up rows, of one [2I, H] matrix per expert */
        const char *gate = fused ? d->fused_gate_up : d->gate, *down = fused ? d->fused_down : d->down;
        out[0] = (weight_ref){WEIGHT_LINEAR, gate,           3, {E, 2 * I, H}, H, e * 2 * I + r0, nr, 0, H,
                              PAR_COLUMN,    linear_init(H), 0};
        out[1] = out[0];
        out[1].r0 += I;
        if (d->interleaved) { /* GPT-OSS: gate j is row 2j, up j row 2j + 1 */
            out[0].r0 = e * 2 * I + 2 * r0, out[0].row_step = 2;
            out[1] = out[0];
            out[1].r0++;
        }
        out[2] = (weight_ref){WEIGHT_LINEAR, down, 3, {E, H, I}, I, e * H, H, r0, nr, PAR_ROW, linear_init(I), 0};
        return;
    }
    if (d->stacked_each) { /* one [E, I, H] tensor each for gate and up, [E, H, I] for down */
        out[0] =
            (weight_ref){WEIGHT_LINEAR, d->gate, 3, {E, I, H}, H, e * I + r0, nr, 0, H, PAR_COLUMN, linear_init(H), 0};
        out[1] = out[0];
        out[1].name = d->up;
        out[2] = (weight_ref){WEIGHT_LINEAR, d->down, 3, {E, H, I}, I, e * H, H, r0, nr, PAR_ROW, linear_init(I), 0};
        return;
    }
    const char *pattern[3] = {d->gate, d->up, d->down};
    for (int j = 0; j < 3; j++) snprintf(names[j], 160, pattern[j], e);
    out[0] = (weight_ref){WEIGHT_LINEAR, names[0], 2, {I, H}, H, r0, nr, 0, H, PAR_COLUMN, linear_init(H), 0};
    out[1] = out[0];
    out[1].name = names[1];
    out[2] = (weight_ref){WEIGHT_LINEAR, names[2], 2, {H, I}, I, 0, H, r0, nr, PAR_ROW, linear_init(I), 0};
    if (!d->gate[0]) out[0] = (weight_ref){0}; /* experts without a gate (Nemotron-H's): none to read */
}

int shard_moe(plan *p, plan_step *s, const moe_desc *d, const module *m, loom_err *err) {
    int I = d->inter, H = d->hidden;
    /* expert parallelism: whole experts, placed over the stage's ranks (ep.c, placement.c);
     * without it each rank holds a share of every expert's features: of the tp group's, or with
     * replicas of the stage's dp x tp ranks */
    bool ep = p->o.ep;
    s->experts_sliced = !ep && p->o.dp > 1;
    int ranks = s->experts_sliced ? plan_ep_ranks(&p->o) : p->o.tp;
    int rank = s->experts_sliced ? plan_ep_rank(&p->o) : p->o.rank;
    if (!ep && I % ranks)
        return loom_errf(err, "%s: its experts have %d features, not divisible by %d ranks%s", m->name, I, ranks,
                         s->experts_sliced ? " (-tp x -dp; --enable-expert-parallel places whole experts instead)"
                                           : "");
    s->expert_inter = ep ? I : I / ranks;
    s->expert_r0 = ep ? 0 : rank * s->expert_inter;
    int E = d->n_experts;
    s->n_experts = 0;
    if (ep) {
        const double *load;
        if (placement_load_row(p->o.expert_load, m->name, E, &load, err) ||
            placement_make(&s->place, E, plan_ep_ranks(&p->o), load, p->o.redundant_experts, err))
            return loom_err_prefix(err, "%s", m->name);
        if (!(s->expert_ids = mem_array(s->place.n_copies, sizeof *s->expert_ids, "an expert placement", err)))
            return -1;
        for (int e = 0; e < E; e++) /* by local index: copies in increasing expert order */
            for (int c = s->place.first[e]; c < s->place.first[e + 1]; c++)
                if (s->place.owner[c] == plan_ep_rank(&p->o)) s->expert_ids[s->n_experts++] = e;
        /* a dispatched row: the token's hidden state, then its experts on the rank and their weights */
        if (H + 2 * d->top_k > p->max_comm_cols[ROWS_TOKENS]) p->max_comm_cols[ROWS_TOKENS] = H + 2 * d->top_k;
    } else {
        if (!(s->expert_ids = mem_array(E, sizeof *s->expert_ids, "an expert placement", err))) return -1;
        for (int e = 0; e < E; e++) s->expert_ids[s->n_experts++] = e;
    }
    /* gathered from every replica, a row carries its experts and their weights (expert_parallel.c) */
    if (s->experts_sliced && H + 2 * d->top_k > p->max_comm_cols[ROWS_TOKENS])
        p->max_comm_cols[ROWS_TOKENS] = H + 2 * d->top_k;
    if (d->bias[0])
        s->route_bias_ref =
            d->bias_row ? (weight_ref){WEIGHT_F32,   d->bias,        2,     {1}, d->n_experts, 0, 1, 0,
                                       d->n_experts, PAR_REPLICATED, 0.02f, 0}
                        : (weight_ref){WEIGHT_F32, d->bias, 1, {d->n_experts}, 0, 0, 0, 0, 0, PAR_REPLICATED, 0.02f, 0};
    if (!s->n_experts) return H;
    /* every expert splits alike: the first one's slices stand for all */
    char names[3][160];
    weight_ref w[3];
    expert_slices(s, s->expert_ids[0], false, names, w);
    for (int j = 0; j < 3; j++)
        if (w[j].name && check_split(p, &w[j], err)) return loom_err_prefix(err, "%s", m->name);
    return H;
}

int shard_embed(plan *p, plan_step *s, const linear_part *table, int hidden, const module *m, loom_err *err) {
    s->vocab0 = p->vocab_col0[p->o.rank];
    /* quantized like the LM head where that is (a tied head is then the same matrix) */
    s->weight[0] = (weight_ref){
        WEIGHT_TABLE, table->weight, 2, {table->out, hidden}, hidden, s->vocab0, p->vocab_width[p->o.rank], 0, hidden,
        PAR_VOCAB,    1.0f,          0};
    if (check_split(p, &s->weight[0], err)) return loom_err_prefix(err, "%s", m->name);
    return hidden;
}

/* Vocabulary shards: ceil(V / tp) rows each, the last rank the rest. */
int shard_vocab(plan *p, const module *tree, loom_err *err) {
    int vocab = 0, tp = p->o.tp;
    for (int i = 0; i < tree->n_ops; i++)
        if (tree->ops[i].kind == OP_EMBED) vocab = tree->ops[i].lin->parts[0].out;
    p->vocab_col0 = mem_zalloc(tp, sizeof *p->vocab_col0, "the vocabulary shards", &p->oom);
    p->vocab_width = mem_zalloc(tp, sizeof *p->vocab_width, "the vocabulary shards", &p->oom);
    if (!p->vocab_col0 || !p->vocab_width) return -1;
    int per = (vocab + tp - 1) / tp;
    for (int r = 0; r < tp; r++) {
        p->vocab_col0[r] = r * per;
        p->vocab_width[r] = r + 1 < tp ? per : vocab - r * per;
        if (p->vocab_width[r] <= 0)
            return loom_errf(err, "a vocabulary of %d cannot be split across %d ranks", vocab, tp);
    }
    return 0;
}

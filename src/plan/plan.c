/* Plan construction: flattening the tree, this rank's shard of every weight, the collectives
 * that sharding needs, buffer assignment. Sharding follows Megatron-LM as vLLM does it:
 * column-parallel linears split their output features (whole heads for q/k/v; kv heads are
 * replicated when there are fewer than ranks), row-parallel linears split their input features
 * and produce a partial sum that is all-reduced (a bias is added by rank 0 only), and the
 * embedding and LM head split the vocabulary. */
#include "plan/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/err.h"

static int new_value(plan *p, int width, const op *producer, bool logit_rows, dist d) {
    if (p->n_values == p->cap_values) {
        p->cap_values = p->cap_values ? 2 * p->cap_values : 64;
        p->values = realloc(p->values, p->cap_values * sizeof *p->values);
    }
    int id = p->n_values++;
    p->values[id] = (plan_value){.width = width, .base = id, .logit_rows = logit_rows, .dist = d,
                                 .producer = producer, .def_step = p->n_steps - 1, .last_use = p->n_steps - 1};
    return id;
}

static plan_step *new_step(plan *p, step_kind kind, const op *o, const module *m) {
    if (p->n_steps == p->cap_steps) {
        p->cap_steps = p->cap_steps ? 2 * p->cap_steps : 64;
        p->steps = realloc(p->steps, p->cap_steps * sizeof *p->steps);
    }
    plan_step *s = &p->steps[p->n_steps++];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->op = o;
    s->mod = m;
    return s;
}

/* Binding a layer is where weights are read, widened or generated: report it on stderr, in
 * place on a terminal, otherwise at every quarter so logs stay short. */
static void report_progress(plan *p) {
    p->layers_done++;
    if (!p->progress) return;
    int n = p->layers_done, t = p->layers_total;
    if (isatty(2)) fprintf(stderr, "\rloading weights: layer %d/%d (%d%%)%s", n, t, 100 * n / t, n == t ? "\n" : "");
    else if (n == t || (4 * n / t) != (4 * (n - 1) / t)) fprintf(stderr, "loading weights: layer %d/%d\n", n, t);
}

/* The rows [*r0, *r0 + *nr) of a column-parallel part that this rank holds. */
static int shard_rows(const plan *p, const linear_part *pt, const module *m, int *r0, int *nr, loom_err *err) {
    int tp = p->tp, rank = p->rank;
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

/* Resolves a linear's parts for this rank; returns its output width here. in_width is the
 * width of its input on this rank (a row-parallel linear reads that many of its columns). */
static int bind_linear(plan *p, plan_step *s, const linear_desc *l, int in_width, const module *m,
                       weight_store *ws, loom_err *err) {
    int col = 0;
    for (int i = 0; i < l->n_parts; i++) {
        const linear_part *pt = &l->parts[i];
        int r0 = 0, nr = pt->out, c0 = 0, nc = l->in;
        bool bias = pt->bias[0];
        switch (l->style) {
        case PAR_COLUMN:
            if (shard_rows(p, pt, m, &r0, &nr, err)) return -1;
            break;
        case PAR_ROW:
            if (l->in % p->tp || in_width != l->in / p->tp)
                return loom_errf(err, "%s: %s reads %d input features of %d, not a 1/%d share", m->name, pt->weight,
                                 in_width, l->in, p->tp);
            nc = in_width;
            c0 = p->rank * nc;
            bias = bias && p->rank == 0; /* the partial sums then carry the bias once */
            break;
        case PAR_VOCAB:
            r0 = p->vocab_col0[p->rank];
            nr = p->vocab_width[p->rank];
            break;
        case PAR_REPLICATED:
            break;
        }
        if (ws && weights_get(ws, pt->weight, pt->out, l->in, r0, nr, c0, nc, false, linear_init(l->in), &s->w[i], err))
            return loom_err_prefix(err, "%s", m->name);
        if (ws && bias) {
            wmat b;
            if (weights_get(ws, pt->bias, pt->out, 0, r0, nr, 0, 0, true, 0.02f, &b, err))
                return loom_err_prefix(err, "%s", m->name);
            s->bias[i] = b.data;
        }
        s->col[i] = col;
        col += nr;
    }
    return col;
}

static int flatten(plan *p, const module *m, const int *bind, weight_store *ws, loom_err *err);

/* A collective after a step whose output is partial (all-reduce) or vocabulary-sharded
 * (gather); returns the completed value. */
static int complete(plan *p, const module *m, const op *o, int v, int full_width) {
    const plan_value in = p->values[v];
    step_kind k = in.dist == DIST_PARTIAL ? STEP_ALL_REDUCE : STEP_GATHER_COLS;
    plan_step *s = new_step(p, k, o, m);
    s->in[0] = v;
    int out = new_value(p, full_width, o, in.logit_rows, DIST_FULL);
    s->out = out;
    int *widest = in.logit_rows ? &p->max_comm_logit_cols : &p->max_comm_token_cols;
    if (in.width > *widest) *widest = in.width;
    return out;
}

static int flatten_split(plan *p, const module *m, const op *o, int fused, bool logit_rows, loom_err *err) {
    plan_value f = p->values[fused]; /* a copy: new_value may move the array */
    const op *prod = f.producer;
    if (!prod || prod->kind != OP_LINEAR || o->part >= prod->lin->n_parts)
        return loom_errf(err, "%s: split of a value that is not a fused linear's output", m->name);
    /* the parts' widths on this rank are the gaps between their output columns */
    const plan_step *ps = &p->steps[f.def_step];
    int end = o->part + 1 < prod->lin->n_parts ? ps->col[o->part + 1] : f.width;
    int v = new_value(p, end - ps->col[o->part], o, logit_rows, f.dist);
    p->values[v].base = f.base;
    p->values[v].col = f.col + ps->col[o->part];
    return v;
}

static int flatten_op(plan *p, const module *m, const op *o, int *map, weight_store *ws, loom_err *err) {
    int in[4] = {0};
    for (int i = 0; i < o->n_in; i++) in[i] = map[o->in[i]];
    if (o->kind == OP_CALL) {
        int out = flatten(p, o->child, in, ws, err);
        if (out < 0) return -1;
        if (!strcmp(o->child->kind, "decoder_layer")) report_progress(p);
        map[o->out[0]] = out;
        return 0;
    }
    const plan_value *v0 = o->n_in ? &p->values[in[0]] : NULL;
    bool logit_rows = o->kind == OP_LOGIT_ROWS || (v0 && v0->logit_rows);
    if (o->kind == OP_SPLIT) { /* a view: no step, no buffer of its own */
        int v = flatten_split(p, m, o, in[0], logit_rows, err);
        if (v < 0) return -1;
        map[o->out[0]] = v;
        return 0;
    }
    int width = v0 ? v0->width : 0;
    dist d = v0 ? v0->dist : DIST_FULL;
    if (o->kind == OP_ADD && (p->values[in[1]].dist != d || p->values[in[1]].width != width))
        return loom_errf(err, "%s: add of values spread differently over the ranks", m->name);
    plan_step *s = new_step(p, STEP_OP, o, m);
    for (int i = 0; i < o->n_in; i++) s->in[i] = in[i];
    switch (o->kind) {
    case OP_LINEAR:
        if ((width = bind_linear(p, s, o->lin, width, m, ws, err)) < 0) return -1;
        d = o->lin->style == PAR_ROW ? DIST_PARTIAL : o->lin->style == PAR_REPLICATED ? DIST_FULL : DIST_SHARDED;
        if (p->tp == 1) d = DIST_FULL;
        break;
    case OP_EMBED: {
        const linear_part *pt = &o->lin->parts[0];
        s->vocab0 = p->vocab_col0[p->rank];
        if (ws && weights_get(ws, pt->weight, pt->out, o->lin->in, s->vocab0, p->vocab_width[p->rank], 0, 0, false,
                              1.0f, &s->w[0], err))
            return loom_err_prefix(err, "%s", m->name);
        width = o->lin->in;
        d = p->tp > 1 ? DIST_PARTIAL : DIST_FULL; /* rows outside the shard are zero */
        break;
    }
    case OP_ATTENTION: {
        const attn_desc *a = &o->attn;
        int kv = a->n_kv_heads >= p->tp ? a->n_kv_heads / p->tp : 1, h = a->n_heads / p->tp;
        s->attn = (attn_shape){h, kv, a->head_dim, a->sliding_window, a->scale};
        p->kv_width = kv * a->head_dim;
        width = h * a->head_dim;
        break;
    }
    case OP_RMS_NORM:
        if (!o->group && d != DIST_FULL)
            return loom_errf(err, "%s: %s normalises over features split across ranks; its statistic would "
                                  "cover only this rank's share", m->name, o->weight);
        if (ws) {
            wmat nw;
            if (weights_get(ws, o->weight, o->group ? o->group : width, 0, 0, 0, 0, 0, true, -1.0f, &nw, err))
                return loom_err_prefix(err, "%s", m->name);
            s->norm_w = nw.data;
        }
        break;
    default: /* rope, silu_mul, add, scale, logit_rows keep their input's width */
        break;
    }
    int v = new_value(p, width, o, logit_rows, d);
    s->out = v;
    if (d == DIST_PARTIAL) v = complete(p, m, o, v, width);
    else if (o->kind == OP_LINEAR && o->lin->style == PAR_VOCAB && p->tp > 1) v = complete(p, m, o, v, o->lin->parts[0].out);
    map[o->out[0]] = v;
    return 0;
}

static int flatten(plan *p, const module *m, const int *bind, weight_store *ws, loom_err *err) {
    int *map = malloc(m->n_values * sizeof *map);
    if (m->n_inputs) memcpy(map, bind, m->n_inputs * sizeof *map);
    int rc = 0;
    for (int i = 0; i < m->n_ops && !rc; i++) rc = flatten_op(p, m, &m->ops[i], map, ws, err);
    int out = rc ? -1 : map[m->outputs[0]];
    free(map);
    return out;
}

/* Liveness: a base buffer lives from its definition to the last use of it or of any view of
 * it; buffers are handed out greedily, the narrowest free one that is wide enough. A step
 * never writes into a buffer it reads, so no kernel has to care about aliasing. */
static void assign_buffers(plan *p) {
    for (int s = 0; s < p->n_steps; s++)
        for (int i = 0; i < plan_step_inputs(&p->steps[s]); i++) {
            plan_value *b = &p->values[p->values[p->steps[s].in[i]].base];
            if (b->last_use < s) b->last_use = s;
        }
    p->values[p->values[p->output].base].last_use = p->n_steps;
    int *free_at = NULL; /* per buffer: the step after which it is free */
    for (int s = 0; s < p->n_steps; s++) {
        plan_value *v = &p->values[p->steps[s].out];
        int best = -1;
        for (int b = 0; b < p->n_buffers; b++)
            if (free_at[b] < s && p->buffer_logit_rows[b] == v->logit_rows && p->buffer_width[b] >= (size_t)v->width &&
                (best < 0 || p->buffer_width[b] < p->buffer_width[best]))
                best = b;
        if (best < 0) {
            best = p->n_buffers++;
            p->buffer_width = realloc(p->buffer_width, p->n_buffers * sizeof *p->buffer_width);
            p->buffer_logit_rows = realloc(p->buffer_logit_rows, p->n_buffers * sizeof *p->buffer_logit_rows);
            free_at = realloc(free_at, p->n_buffers * sizeof *free_at);
            p->buffer_width[best] = v->width;
            p->buffer_logit_rows[best] = v->logit_rows;
        }
        free_at[best] = v->last_use;
        v->buffer = best;
    }
    free(free_at);
}

/* Vocabulary shards: ceil(V / tp) rows each, the last rank the rest. */
static int shard_vocab(plan *p, const module *tree, loom_err *err) {
    int vocab = 0;
    for (int i = 0; i < tree->n_ops; i++)
        if (tree->ops[i].kind == OP_EMBED) vocab = tree->ops[i].lin->parts[0].out;
    p->vocab_col0 = calloc(p->tp, sizeof *p->vocab_col0);
    p->vocab_width = calloc(p->tp, sizeof *p->vocab_width);
    int per = (vocab + p->tp - 1) / p->tp;
    for (int r = 0; r < p->tp; r++) {
        p->vocab_col0[r] = r * per;
        p->vocab_width[r] = r + 1 < p->tp ? per : vocab - r * per;
        if (p->vocab_width[r] <= 0)
            return loom_errf(err, "a vocabulary of %d cannot be split across %d ranks", vocab, p->tp);
    }
    return 0;
}

int plan_build(plan *p, const module *tree, int tp, int rank, weight_store *ws, bool progress, loom_err *err) {
    memset(p, 0, sizeof *p);
    p->tp = tp;
    p->rank = rank;
    p->progress = progress;
    for (int i = 0; i < tree->n_ops; i++)
        p->layers_total += tree->ops[i].kind == OP_CALL && !strcmp(tree->ops[i].child->kind, "decoder_layer");
    if (shard_vocab(p, tree, err) || (p->output = flatten(p, tree, NULL, ws, err)) < 0) {
        plan_free(p);
        return -1;
    }
    assign_buffers(p);
    return 0;
}

int plan_step_inputs(const plan_step *s) { return s->kind == STEP_OP ? s->op->n_in : 1; }

void plan_free(plan *p) {
    free(p->steps);
    free(p->values);
    free(p->buffer_width);
    free(p->buffer_logit_rows);
    free(p->vocab_col0);
    free(p->vocab_width);
    memset(p, 0, sizeof *p);
}

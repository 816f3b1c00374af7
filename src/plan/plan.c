/* Plan construction: flattening the tree, per-rank widths, weight binding, buffer assignment. */
#include "plan/plan.h"

#include <math.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

static int new_value(plan *p, int width, const op *producer, bool logit_rows) {
    if (p->n_values == p->cap_values) {
        p->cap_values = p->cap_values ? 2 * p->cap_values : 64;
        p->values = realloc(p->values, p->cap_values * sizeof *p->values);
    }
    int id = p->n_values++;
    p->values[id] = (plan_value){.width = width, .base = id, .logit_rows = logit_rows,
                                 .producer = producer, .first_def = p->n_steps, .last_use = p->n_steps};
    return id;
}

static plan_step *new_step(plan *p, const op *o, const module *m) {
    if (p->n_steps == p->cap_steps) {
        p->cap_steps = p->cap_steps ? 2 * p->cap_steps : 64;
        p->steps = realloc(p->steps, p->cap_steps * sizeof *p->steps);
    }
    plan_step *s = &p->steps[p->n_steps++];
    memset(s, 0, sizeof *s);
    s->op = o;
    s->mod = m;
    return s;
}

/* Dummy-weight scale keeping activations O(1): uniform(-a, a) has variance a^2/3, so
 * a = sqrt(3/in) gives unit-variance outputs for unit-variance inputs. */
static float linear_init(int in) { return sqrtf(3.0f / (float)in); }

static int bind_linear(plan_step *s, const linear_desc *l, weight_store *ws, loom_err *err) {
    int col = 0;
    for (int i = 0; i < l->n_parts; i++) {
        const linear_part *pt = &l->parts[i];
        if (ws && weights_get(ws, pt->weight, pt->out, l->in, 0, 0, 0, 0, false, linear_init(l->in), &s->w[i], err))
            return -1;
        if (ws && pt->bias[0]) {
            wmat b;
            if (weights_get(ws, pt->bias, pt->out, 0, 0, 0, 0, 0, true, 0.02f, &b, err)) return -1;
            s->bias[i] = b.data;
        }
        s->col[i] = col;
        col += pt->out;
    }
    return col;
}

/* Width of an op's output on this rank, from its inputs' widths. */
static int out_width(const plan *p, const op *o, const int *in) {
    const plan_value *v0 = o->n_in ? &p->values[in[0]] : NULL;
    switch (o->kind) {
    case OP_EMBED: return o->lin->in;
    case OP_SPLIT: return v0->producer->lin->parts[o->part].out;
    case OP_ATTENTION: return o->attn.n_heads * o->attn.head_dim;
    default: return v0->width; /* linear is handled by bind_linear */
    }
}

static int flatten(plan *p, const module *m, const int *bind, weight_store *ws, loom_err *err);

/* Binding a layer is where weights are read, widened or generated: report it on stderr, in
 * place on a terminal, otherwise at every quarter so logs stay short. */
static void report_progress(plan *p) {
    p->layers_done++;
    if (!p->progress) return;
    int n = p->layers_done, t = p->layers_total;
    if (isatty(2)) fprintf(stderr, "\rloading weights: layer %d/%d (%d%%)%s", n, t, 100 * n / t, n == t ? "\n" : "");
    else if (n == t || (4 * n / t) != (4 * (n - 1) / t)) fprintf(stderr, "loading weights: layer %d/%d\n", n, t);
}

static int flatten_op(plan *p, const module *m, const op *o, int *map, weight_store *ws, loom_err *err) {
    int in[4];
    for (int i = 0; i < o->n_in; i++) in[i] = map[o->in[i]];
    if (o->kind == OP_CALL) {
        int out = flatten(p, o->child, in, ws, err);
        if (out < 0) return -1;
        if (!strcmp(o->child->kind, "decoder_layer")) report_progress(p);
        map[o->out[0]] = out;
        return 0;
    }
    bool logit_rows = o->kind == OP_LOGIT_ROWS || (o->n_in && p->values[in[0]].logit_rows);
    if (o->kind == OP_SPLIT) { /* a view: no step, no buffer of its own */
        plan_value f = p->values[in[0]]; /* a copy: new_value may move the array */
        const op *prod = f.producer;
        if (!prod || prod->kind != OP_LINEAR || o->part >= prod->lin->n_parts)
            return loom_errf(err, "%s: split of a value that is not a fused linear's output", m->name);
        int col = 0;
        for (int i = 0; i < o->part; i++) col += prod->lin->parts[i].out;
        int v = new_value(p, prod->lin->parts[o->part].out, o, logit_rows);
        p->values[v].base = f.base;
        p->values[v].col = f.col + col;
        map[o->out[0]] = v;
        return 0;
    }
    plan_step *s = new_step(p, o, m);
    for (int i = 0; i < o->n_in; i++) s->in[i] = in[i];
    int width;
    if (o->kind == OP_LINEAR) {
        if ((width = bind_linear(s, o->lin, ws, err)) < 0) return loom_err_prefix(err, "%s", m->name);
    } else if (o->kind == OP_EMBED) {
        const linear_part *pt = &o->lin->parts[0];
        if (ws && weights_get(ws, pt->weight, pt->out, o->lin->in, 0, 0, 0, 0, false, 1.0f, &s->w[0], err))
            return loom_err_prefix(err, "%s", m->name);
        width = out_width(p, o, in);
    } else {
        width = out_width(p, o, in);
        if (ws && o->kind == OP_RMS_NORM) {
            wmat nw;
            if (weights_get(ws, o->weight, o->group ? o->group : width, 0, 0, 0, 0, 0, true, -1.0f, &nw, err))
                return loom_err_prefix(err, "%s", m->name);
            s->norm_w = nw.data;
        }
    }
    int v = new_value(p, width, o, logit_rows);
    s->out = v;
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

/* Liveness: a base buffer lives from its first definition to the last use of it or of any view
 * of it; buffers are handed out greedily, reusing a free one that is wide enough. */
static void assign_buffers(plan *p) {
    for (int s = 0; s < p->n_steps; s++)
        for (int i = 0; i < p->steps[s].op->n_in; i++) {
            plan_value *b = &p->values[p->values[p->steps[s].in[i]].base];
            if (b->last_use < s) b->last_use = s;
        }
    p->values[p->values[p->output].base].last_use = p->n_steps;
    int *free_at = NULL; /* per buffer: step after which it is free */
    for (int s = 0; s < p->n_steps; s++) {
        plan_value *v = &p->values[p->steps[s].out];
        int best = -1;
        for (int b = 0; b < p->n_buffers; b++)
            if (free_at[b] < s && p->buffer_logit_rows[b] == v->logit_rows &&
                (best < 0 || p->buffer_width[b] < p->buffer_width[best]) && p->buffer_width[b] >= (size_t)v->width)
                best = b;
        if (best < 0) {
            best = p->n_buffers++;
            p->buffer_width = realloc(p->buffer_width, p->n_buffers * sizeof *p->buffer_width);
            p->buffer_logit_rows = realloc(p->buffer_logit_rows, p->n_buffers * sizeof *p->buffer_logit_rows);
            free_at = realloc(free_at, p->n_buffers * sizeof *free_at);
            p->buffer_width[best] = v->width;
            p->buffer_logit_rows[best] = v->logit_rows;
        }
        /* an op may write its output over an input that dies here only if it is elementwise;
         * to keep every kernel free of aliasing concerns, a buffer frees after its last use */
        free_at[best] = v->last_use;
        v->buffer = best;
    }
    free(free_at);
}

int plan_build(plan *p, const module *tree, int tp, int rank, weight_store *ws, bool progress,
               loom_err *err) {
    memset(p, 0, sizeof *p);
    p->tp = tp;
    p->rank = rank;
    p->progress = progress;
    for (int i = 0; i < tree->n_ops; i++)
        p->layers_total += tree->ops[i].kind == OP_CALL && !strcmp(tree->ops[i].child->kind, "decoder_layer");
    if (tp != 1) return loom_errf(err, "tensor parallelism (-tp %d) is not available in this build yet", tp);
    p->output = flatten(p, tree, NULL, ws, err);
    if (p->output < 0) {
        plan_free(p);
        return -1;
    }
    assign_buffers(p);
    return 0;
}

void plan_free(plan *p) {
    free(p->steps);
    free(p->values);
    free(p->buffer_width);
    free(p->buffer_logit_rows);
    memset(p, 0, sizeof *p);
}

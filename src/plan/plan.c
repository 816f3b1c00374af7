/* Plan construction: flattening the tree into steps, with the collectives tensor parallelism
 * needs and the regions' own (through the region kinds of plan_impl.h), async TP's fusions, and
 * buffer assignment. Which slice of a weight each rank reads is shard.c's business; how each op
 * spreads its output over the ranks, dist.c's; what a region does, its kind's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan_impl.h"
#include "plan/stage.h"
#include "quant/checkpoint.h"
#include "util/alloc.h"
#include "util/err.h"

static int flatten(plan *p, const module *m, const int *bind, loom_err *err);

/* A call of a child module: a region of some kind (region_of) is entered, flattened in its
 * kind and left; a plain call's ops run in the region around it. */
static int flatten_call(plan *p, const module *m, const op *o, const int *in, loom_err *err) {
    const region_kind *k = region_of(p, m, o->child);
    if (!k) {
        int out = flatten(p, o->child, in, err);
        if (out >= 0 && !strcmp(o->child->kind, "decoder_layer")) p->layers++;
        return out;
    }
    int args[4];
    memcpy(args, in, o->n_in * sizeof *in);
    if (k->enter && (args[0] = k->enter(p, m, o, in[0], err)) < 0) return -1;
    const region_kind *around = p->region;
    p->region = k;
    int out = flatten(p, o->child, args, err);
    p->region = around;
    return out < 0 ? -1 : k->exit(p, m, o, out, err);
}

static int flatten_split(plan *p, const module *m, const op *o, int fused, loom_err *err) {
    plan_value f = p->values[fused]; /* a copy: plan_new_value may move the array */
    const op *prod = f.producer;
    if (!prod || prod->kind != OP_LINEAR || o->part >= prod->lin->n_parts)
        return loom_errf(err, "%s: split of a value that is not a fused linear's output", m->name);
    /* the parts' widths on this rank are the gaps between their output columns */
    const plan_step *ps = &p->steps[f.def_step];
    int end = o->part + 1 < prod->lin->n_parts ? ps->col[o->part + 1] : f.width;
    /* a part every rank holds whole (MLA's latents) is complete where the rest is sharded */
    bool whole = prod->lin->parts[o->part].whole && f.dist == DIST_SHARDED;
    int v = plan_new_value(p, end - ps->col[o->part], o, f.rows, whole ? DIST_FULL : f.dist);
    if (v < 0) return -1;
    p->values[v].base = f.base;
    p->values[v].col = f.col + ps->col[o->part];
    p->values[v].feat0 = ps->feat0[o->part];
    p->values[v].replicated_heads = ps->replicated[o->part];
    return v;
}

static int gcd(int a, int b) { return b ? gcd(b, a % b) : a; }

/* The KV cache's rows on this rank, the same for every layer: its kv heads (a latent cache: the
 * whole latent, which the absorbed form reads as whole rows). */
static void kv_geometry(plan *p, const attn_desc *a) {
    if (a->kv_lora) {
        p->kv_width = p->kv_slab = a->kv_lora + a->rope;
        p->kv_group = gcd(a->kv_lora, a->rope);
        p->kv_latent = true;
        return;
    }
    int kv = a->n_kv_heads >= p->o.tp ? a->n_kv_heads / p->o.tp : 1;
    p->kv_width = kv * a->head_dim;
    p->kv_slab = p->kv_group = a->head_dim;
}

/* The tree's first attention op, or NULL. */
static const op *first_attention(const module *m) {
    for (int i = 0; i < m->n_ops; i++) {
        const op *o = m->ops[i].kind == OP_CALL ? first_attention(m->ops[i].child) : &m->ops[i];
        if (o && o->kind == OP_ATTENTION) return o;
    }
    return NULL;
}

/* Latent attention: this rank's heads of kv_b_proj (the binder adds the f32 transpose of them
 * that both of its forms read: kernels.h's mla_attention); every rank caches the whole latent. */
static int shard_latent_attention(plan *p, plan_step *s, const module *m, const op *o, loom_err *err) {
    const attn_desc *a = &o->attn;
    int cols = shard_linear(p, s, o->lin, a->kv_lora, m, err);
    if (cols < 0) return -1;
    s->attn.mla = (mla_shape){a->kv_lora, a->nope, a->rope, a->v_dim};
    return cols / (a->nope + a->v_dim) * a->v_dim;
}

/* A recurrent mixer's convolution: each input's channels are this rank's heads of q, k or v
 * (Mamba-2: x, and B and C's groups, which ranks replicate when there are fewer than ranks),
 * and read those rows of the weight and bias. */
static int shard_conv(plan *p, plan_step *s, const op *o) {
    const recurrent_desc *r = o->rec;
    int cols = 0;
    for (int i = 0; i < o->n_in; i++) {
        const plan_value *v = &p->values[s->in[i]];
        s->weight[i] =
            (weight_ref){WEIGHT_F32, r->weight, 3,         {r->channels, 1}, r->kernel, r->offsets[i] + v->feat0,
                         v->width,   0,         r->kernel, PAR_REPLICATED,   0.3f,      0};
        if (r->bias[0])
            s->bias_ref[i] = (weight_ref){WEIGHT_F32, r->bias, 1, {r->channels},  0,     r->offsets[i] + v->feat0,
                                          v->width,   0,       0, PAR_REPLICATED, 0.02f, 0};
        cols += v->width;
    }
    return cols;
}

/* Mamba-2's scan on this rank's heads (x's, and dt's one a head), with their A_log, dt_bias
 * and D. */
static int shard_ssm(plan *p, plan_step *s, const module *m, const op *o, loom_err *err) {
    const recurrent_desc *r = o->rec;
    const plan_value *dt = &p->values[s->in[1]];
    int heads = dt->width;
    if (r->n_v_heads % p->o.tp)
        return loom_errf(err, "%s: %d heads cannot be split across %d ranks", m->name, r->n_v_heads, p->o.tp);
    s->weight[0] =
        (weight_ref){WEIGHT_F32, r->a_log, 1, {r->n_v_heads}, 0, dt->feat0, heads, 0, 0, PAR_REPLICATED, 0.5f, 0};
    s->weight[1] = s->weight[0], s->weight[2] = s->weight[0];
    s->weight[1].name = r->dt_bias, s->weight[2].name = r->d;
    return heads * r->v_dim;
}

/* The delta rule on this rank's heads (the linear before it gave each rank whole key heads and
 * their value heads), with their A_log and dt_bias. */
static int shard_delta(plan *p, plan_step *s, const module *m, const op *o, int width, loom_err *err) {
    const recurrent_desc *r = o->rec;
    int tp = p->o.tp, nk = r->n_k_heads / tp, nv = r->n_v_heads / tp;
    if (r->n_k_heads % tp || r->n_v_heads % tp || width != 2 * nk * r->k_dim + nv * r->v_dim)
        return loom_errf(err, "%s: %d key and %d value heads cannot be split across %d ranks", m->name, r->n_k_heads,
                         r->n_v_heads, tp);
    int h0 = p->values[s->in[1]].feat0; /* b's first head */
    s->weight[0] = (weight_ref){WEIGHT_F32, r->a_log, 1, {r->n_v_heads}, 0, h0, nv, 0, 0, PAR_REPLICATED, 0.5f, 0};
    s->weight[1] = s->weight[0];
    s->weight[1].name = r->dt_bias;
    return nv * r->v_dim;
}

/* The step's parameters on this rank and the slices of the weights it reads; returns its
 * output width. */
static int shard_op(plan *p, plan_step *s, const module *m, const op *o, int width, loom_err *err) {
    switch (o->kind) {
    case OP_LINEAR: return shard_linear(p, s, o->lin, width, m, err);
    case OP_EMBED: return shard_embed(p, s, &o->lin->parts[0], o->lin->in, m, err);
    case OP_ATTENTION: {
        const attn_desc *a = &o->attn;
        int kv = a->n_kv_heads >= p->o.tp ? a->n_kv_heads / p->o.tp : 1, h = a->n_heads / p->o.tp;
        s->attn = (attn_shape){h, kv, a->head_dim, a->sliding_window, a->scale, {0}, a->softcap, NULL};
        kv_geometry(p, a);
        if (a->sinks[0]) /* this rank's heads' sinks */
            s->sinks_ref = (weight_ref){WEIGHT_F32, a->sinks, 1, {a->n_heads},   0,     p->o.rank * h,
                                        h,          0,        0, PAR_REPLICATED, 0.02f, 0};
        return a->kv_lora ? shard_latent_attention(p, s, m, o, err) : h * a->head_dim;
    }
    case OP_RMS_NORM: {
        if (o->group && width % o->group) /* groups cut by the shard (Mamba-2's B and C groups) */
            return loom_errf(err, "%s: %s normalises groups of %d columns, which %d ranks' %d columns cut", m->name,
                             o->weight, o->group, p->o.tp, width);
        /* across ranks or wide: this rank's columns of the whole projection's weight */
        bool whole = o->across_ranks || o->wide;
        int n = whole ? o->features : o->group ? o->group : width;
        int c0 = whole ? p->values[s->in[0]].feat0 : 0;
        s->norm_ref = (weight_ref){WEIGHT_F32, o->weight,      1,     {n}, 0, c0, o->group && !o->wide ? 0 : width, 0,
                                   0,          PAR_REPLICATED, -1.0f, 0};
        return width;
    }
    case OP_MOE: return shard_moe(p, s, o->moe, m, err);
    case OP_HEAD_SLICE:
        if (width % o->slice.stride)
            return loom_errf(err, "%s: %d columns are not whole heads of %d", m->name, width, o->slice.stride);
        return width / o->slice.stride * o->slice.width;
    case OP_CONV1D: return shard_conv(p, s, o);
    case OP_SSM_SCAN: return shard_ssm(p, s, m, o, err);
    case OP_GATED_DELTA: return shard_delta(p, s, m, o, width, err);
    case OP_INPUT_ROWS: return o->features;
    case OP_CONCAT: return width + p->values[s->in[1]].width;
    default: return width; /* rope, glu, add, scale, softcap, relu2, logit_rows keep their input's width */
    }
}

/* An RMSNorm over a whole projection that TP shards by heads: each rank sums the squares of
 * its columns, an all-reduce adds the ranks' sums (in rank order, like every reduction), and
 * the norm step divides by the whole width. Returns the summed statistic's value. */
static int norm_statistic(plan *p, const module *m, const op *o, int x, loom_err *err) {
    const plan_value xv = p->values[x];
    if (xv.replicated_heads)
        return loom_errf(err,
                         "%s: %s normalises a whole projection whose heads are replicated across %d ranks (fewer "
                         "kv heads than ranks): each would count more than once",
                         m->name, o->weight, p->o.tp);
    plan_step *s = plan_new_step(p, STEP_OP, o, m);
    if (!s) return -1;
    s->in[0] = x;
    s->sum_squares = true;
    if ((s->out = plan_new_value(p, 1, o, xv.rows, DIST_PARTIAL)) < 0) return -1;
    return plan_collective(p, STEP_ALL_REDUCE, o, m, s->out, 1, xv.rows);
}

static int flatten_op(plan *p, const module *m, const op *o, int *map, loom_err *err) {
    int in[4] = {0};
    for (int i = 0; i < o->n_in; i++)
        if ((in[i] = map[o->in[i]]) < 0)
            return loom_errf(err,
                             "pipeline stage %d: %s reads `%s`, which an earlier stage makes: only the hidden "
                             "state crosses a stage boundary",
                             p->o.stage, m->name, m->value_names[o->in[i]]);
    if (o->kind == OP_CALL) return (map[o->out[0]] = flatten_call(p, m, o, in, err)) < 0 ? -1 : 0;
    if (o->kind == OP_SPLIT) return (map[o->out[0]] = flatten_split(p, m, o, in[0], err)) < 0 ? -1 : 0;
    if (p->region->place_inputs && p->region->place_inputs(p, m, o, in, err)) return -1;
    /* a copy: plan_new_value may move the array */
    const plan_value first = o->n_in ? p->values[in[0]] : (plan_value){.rows = ROWS_TOKENS};
    const plan_value *v0 = o->n_in ? &first : NULL;
    row_kind rows = first.rows;
    bool same_width = o->kind == OP_ADD || o->kind == OP_GLU; /* elementwise over all inputs */
    for (int i = 1; i < o->n_in; i++)
        if (p->values[in[i]].rows != rows || (same_width && p->values[in[i]].width != v0->width))
            return loom_errf(err, "%s: `%s` of values of different shapes on this rank", m->name,
                             op_kind_name(o->kind));
    int d = op_output_dist(p, m, o, in, err);
    if (d < 0) return -1;
    if (o->kind == OP_LOGIT_ROWS && rows == ROWS_SHARD) { /* the SP zone ends: gather the wanted rows */
        return (map[o->out[0]] = plan_collective(p, STEP_GATHER_LOGITS, o, m, in[0], v0->width, ROWS_LOGITS)) < 0 ? -1
                                                                                                                  : 0;
    }
    int stat = o->kind == OP_RMS_NORM && o->across_ranks && d == DIST_SHARDED ? norm_statistic(p, m, o, in[0], err) : 0;
    if (stat < 0) return -1;
    plan_step *s = plan_new_step(p, o->kind == OP_MOE && plan_experts_span(&p->o) ? STEP_EP_MOE : STEP_OP, o, m);
    if (!s) return -1;
    memcpy(s->in, in, sizeof in);
    if (stat) s->in[1] = stat, s->n_in = 2;
    int width = shard_op(p, s, m, o, v0 ? v0->width : 0, err);
    if (width < 0) return -1;
    int v = plan_new_value(p, width, o, o->kind == OP_LOGIT_ROWS ? ROWS_LOGITS : rows, d);
    if (v < 0) return -1;
    s->out = v;
    if (o->kind == OP_LINEAR) p->values[v].feat0 = s->feat0[0], p->values[v].replicated_heads = s->replicated[0];
    else if (v0) p->values[v].feat0 = v0->feat0, p->values[v].replicated_heads = v0->replicated_heads;
    if (o->kind == OP_HEAD_SLICE)
        p->values[v].feat0 = v0->feat0 / o->slice.stride * o->slice.width; /* its own columns */
    if (d == DIST_PARTIAL && !(v0 && v0->dist == DIST_PARTIAL) && p->region->partial)
        v = p->region->partial(p, m, o, v, err);
    else if (o->kind == OP_LINEAR && o->lin->style == PAR_VOCAB && p->o.tp > 1)
        v = plan_collective(p, STEP_GATHER_COLS, o, m, v, o->lin->parts[0].out, rows);
    if (v < 0) return -1;
    map[o->out[0]] = v;
    return 0;
}

/* The stage boundary: the hidden state as the previous stage's last layer left it (this rank's
 * token shard under SP, all tokens otherwise) arrives before the first op this stage runs, and
 * leaves after the last; it moves data and does no arithmetic. */
static int stage_recv(plan *p, const module *m, const op *first) {
    plan_step *s = plan_new_step(p, STEP_RECV, first, m);
    if (!s) return -1;
    s->n_in = 0;
    return s->out = plan_new_value(p, stage_hidden_width(m), first, p->o.sp ? ROWS_SHARD : ROWS_TOKENS, DIST_FULL);
}

static int stage_send(plan *p, const module *m, const op *last, int v) {
    plan_step *s = plan_new_step(p, STEP_SEND, last, m);
    if (!s) return -1;
    s->in[0] = v;
    s->out = -1;
    return v;
}

/* The capture slot op i of the top module's first input fills (plan_options' capture), or -1:
 * the hidden state entering a captured decoder layer, or the logit rows entering the final
 * norm. */
static int capture_slot(const plan *p, const module *m, int i) {
    const op *o = &m->ops[i];
    if (stage_is_layer_call(m, i))
        for (int j = 0; j < p->o.n_capture_layers; j++)
            if (p->o.capture_layers[j] == stage_op_layer(m, i)) return j;
    if (!p->o.capture_last || o->kind != OP_RMS_NORM) return -1;
    for (int k = 0; k < i; k++)
        if (m->ops[k].kind == OP_LOGIT_ROWS && m->ops[k].out[0] == o->in[0]) return p->o.n_capture_layers;
    return -1;
}

/* Keeps value v's rows after the pass in capture slot `slot`. Under SP the hidden state is
 * this rank's token shard: every rank all-gathers it first, as at a region's entry, so that
 * each holds every token's (what the seed's Eagle3 support does); the gather moves the
 * residual as the layer receives it and changes no value, so SP's captures are TP's bits. */
static int capture(plan *p, const module *m, const op *o, int v, int slot, loom_err *err) {
    const plan_value pv = p->values[v];
    if (pv.dist != DIST_FULL)
        return loom_errf(err, "%s: `%s` is kept for a speculative draft, but each rank holds only part of it", m->name,
                         m->value_names[o->in[0]]);
    if (pv.rows == ROWS_SHARD) {
        if ((v = plan_collective(p, STEP_GATHER_ROWS, o, m, v, pv.width, ROWS_TOKENS)) < 0) return -1;
        p->steps[p->n_steps - 1].for_capture = true;
    }
    plan_step *s = plan_new_step(p, STEP_CAPTURE, o, m);
    if (!s) return -1;
    s->in[0] = v;
    s->out = -1;
    s->capture_slot = slot;
    p->capture_width[slot] = pv.width;
    return 0;
}

static int flatten(plan *p, const module *m, const int *bind, loom_err *err) {
    int *map = mem_array(m->n_values, sizeof *map, "the planner's value map", &p->oom);
    if (!map) return -1;
    for (int i = 0; i < m->n_values; i++) map[i] = i < m->n_inputs ? bind[i] : -1;
    int rc = 0;
    const op *last = NULL; /* the last op this stage runs of the top module */
    for (int i = 0; i < m->n_ops && !rc; i++) {
        const op *o = &m->ops[i];
        if (m == p->tree && !stage_runs_op(&p->o, m, i)) continue;
        int slot = m == p->tree ? capture_slot(p, m, i) : -1;
        if (m == p->tree && !last && p->o.stage > 0 && (map[o->in[0]] = stage_recv(p, m, o)) < 0) rc = -1;
        else if (slot >= 0 && capture(p, m, o, map[o->in[0]], slot, err)) rc = -1;
        else rc = flatten_op(p, m, o, map, err);
        last = o;
    }
    int out = rc ? -1 : map[m->outputs[0]];
    if (!rc && m == p->tree && p->o.stage < p->o.pp - 1) out = stage_send(p, m, last, map[last->out[0]]);
    free(map);
    return out;
}

int plan_step_inputs(const plan_step *s) { return s->n_in; }

/* Liveness: a base buffer lives from its definition to the last use of it or of any view of
 * it; buffers are handed out greedily, the narrowest free one of the right row kind that is
 * wide enough. A step never writes into a buffer it reads, so no kernel minds aliasing. There
 * are at most as many buffers as steps. */
static int assign_buffers(plan *p) {
    for (int s = 0; s < p->n_steps; s++)
        for (int i = 0; i < plan_step_inputs(&p->steps[s]); i++) {
            plan_value *b = &p->values[p->values[p->steps[s].in[i]].base];
            if (b->last_use < s) b->last_use = s;
        }
    if (p->output >= 0) p->values[p->values[p->output].base].last_use = p->n_steps;
    /* per buffer: the step after which it is free */
    int *free_at = mem_array(p->n_steps, sizeof *free_at, "buffer liveness", &p->oom);
    p->buffer_width = mem_array(p->n_steps, sizeof *p->buffer_width, "the plan's buffers", &p->oom);
    p->buffer_rows = mem_array(p->n_steps, sizeof *p->buffer_rows, "the plan's buffers", &p->oom);
    if (!free_at || !p->buffer_width || !p->buffer_rows) {
        free(free_at);
        return -1;
    }
    for (int s = 0; s < p->n_steps; s++) {
        if (p->steps[s].out < 0) continue; /* a send */
        plan_value *v = &p->values[p->steps[s].out];
        int best = -1;
        for (int b = 0; b < p->n_buffers; b++)
            if (free_at[b] < s && p->buffer_rows[b] == v->rows && p->buffer_width[b] >= (size_t)v->width &&
                (best < 0 || p->buffer_width[b] < p->buffer_width[best]))
                best = b;
        if (best < 0) {
            best = p->n_buffers++;
            p->buffer_width[best] = v->width;
            p->buffer_rows[best] = v->rows;
        }
        free_at[best] = v->last_use;
        v->buffer = best;
    }
    free(free_at);
    return 0;
}

static void note_unfused(plan *p, const plan_step *s, const char *why) {
    char buf[512];
    if (s->kind == STEP_OP) snprintf(buf, sizeof buf, "%s: %s", s->mod->name, why);
    else snprintf(buf, sizeof buf, "%s: %s %s", s->mod->name, step_kind_name(s->kind), why);
    plan_keep_text(p, &p->unfused, &p->n_unfused, &p->cap_unfused, buf);
}

/* The step consuming value v, when exactly one does (views of v count as uses). */
static plan_step *sole_consumer(plan *p, int v) {
    plan_step *found = NULL;
    for (int s = 0; s < p->n_steps; s++)
        for (int i = 0; i < plan_step_inputs(&p->steps[s]); i++)
            if (p->values[p->steps[s].in[i]].base == v) {
                if (found && found != &p->steps[s]) return NULL;
                found = &p->steps[s];
            }
    return found;
}

static bool fusable(const plan_step *s, par_style style) {
    return s && s->kind == STEP_OP && s->op->kind == OP_LINEAR && s->op->lin->style == style && !s->op->lin->no_fuse;
}

/* Latent attention's q_b_proj and kv_b_proj read latents made inside the region (kv_b_proj
 * inside the attention op, from the cache): no collective borders them, so there is nothing for
 * them to overlap. The plan says so for each column-parallel linear past the region's entry. */
static void note_inner_linears(plan *p, int gather) {
    const op *region = p->steps[gather].op;
    for (int i = gather + 1; i < p->n_steps; i++) {
        const plan_step *s = &p->steps[i];
        if (s->op == region) break;
        if (s->kind != STEP_OP || !s->op->lin || s->op->lin->style != PAR_COLUMN) continue;
        const char *start, *in = s->mod->value_names[s->op->in[0]];
        int len = linear_part_name(&s->op->lin->parts[0], &start);
        char why[256];
        if (s->op->kind == OP_ATTENTION)
            snprintf(why, sizeof why,
                     "%.*s (inside attention) kept: it expands the latent cache, not the region "
                     "input",
                     len, start);
        else
            snprintf(why, sizeof why,
                     "%.*s kept: its input %s is made inside the region from the gathered rows, so no "
                     "collective borders it",
                     len, start, in);
        note_unfused(p, s, why);
    }
}

/* The rows linear step c can take quantized before a gather, as they are:
 *   int8: it computes on int8 activations in its input's own column order (a column-parallel
 *     linear whose every part is integer-quantized, groups in column order and whole 32-column
 *     blocks: kernels.h's int8_rows_fit, which runtime/bind.c confirms on the weights);
 *   FP8: its parts are an FP8 checkpoint's with a static input scale and compute on FP8
 *     activations (--fp8-activations): each rank rounds its rows with that constant, so
 *     quantizing before the gather is exact, as the removed vLLM pass did (FP8 bytes, a quarter
 *     of fp32's). Dynamic scales are taken from the gathered rows. */
static rows_code takes_quantized_rows(const plan *p, const plan_step *c) {
    if (p->o.exact || !c || c->kind != STEP_OP || c->op->kind != OP_LINEAR) return ROWS_F32;
    const linear_desc *l = c->op->lin;
    if (l->style != PAR_COLUMN) return ROWS_F32;
    const quant_config *cq = p->o.checkpoint;
    /* GGUF blocks meet int8 rows only where a slice is whole blocks of 32 (runtime/bind.c): each
     * quantizes the fp32 rows it is given, the same bits as quantized before the gather; an MXFP4
     * checkpoint quantizes its stacked experts only, never a linear */
    if (cq && (cq->format == QF_GGUF || cq->format == QF_MXFP4)) return ROWS_F32;
    quant_scheme q = shard_scheme(p, l->style);
    bool fp8 = cq && quant_format_fp8(cq->format);
    if (fp8 || q.code) { /* a checkpoint's, or dummy weights of one (quantized at load, its scheme kept) */
        if (!p->o.fp8_act || (fp8 ? cq->fp8_act != FP8_ACT_STATIC : !(q.in_scale > 0))) return ROWS_F32;
        for (int i = 0; fp8 && i < l->n_parts; i++)
            if (!quant_checkpoint_applies(cq, l->parts[i].weight, l->style)) return ROWS_F32;
        return ROWS_FP8;
    }
    if (l->in % QACT) return ROWS_F32;
    for (int i = 0; i < l->n_parts; i++) {
        if (cq && quant_checkpoint_applies(cq, l->parts[i].weight, l->style)) {
            if (cq->act_order || cq->group % QBLOCK) return ROWS_F32;
        } else if (!q.bits || q.group % QBLOCK) {
            return ROWS_F32;
        }
    }
    return ROWS_INT8;
}

/* SP regions whose gathered input feeds one linear on int8 or FP8 activations gather those
 * rows: each rank quantizes its own token rows, and the gather moves 9/32 (int8) or 1/4 (FP8)
 * of the fp32 bytes. Rounding is per row (int8) or by a constant (FP8), so the consumer gets
 * the bits it would have made from the gathered fp32 rows. */
static void mark_quantized_gathers(plan *p) {
    for (int i = 0; i < p->n_steps; i++) {
        plan_step *s = &p->steps[i];
        if (s->kind != STEP_GATHER_ROWS || s->op->kind != OP_CALL || s->for_capture) continue;
        plan_step *c = sole_consumer(p, s->out);
        rows_code code = c && c->in[0] == s->out ? takes_quantized_rows(p, c) : ROWS_F32;
        if (!code) continue;
        s->code = code;
        p->values[s->out].code = code;
        for (int r = 0; r < p->n_regions; r++)
            if (p->regions[r].mod == s->op->child && !p->regions[r].ep)
                p->regions[r].gather_code = code, p->regions[r].gather_width = p->values[s->in[0]].width;
    }
}

/* Async TP, after Region._fuse of vLLM's Transformers-backend sequence parallelism: a region's
 * all-gather fuses with the column-parallel linear that alone consumes the gathered input, and
 * its reduce-scatter with the row-parallel linear whose output the region returns unmodified;
 * the fused step replaces both. */
static void fuse_async_tp(plan *p) {
    for (int i = 0; i < p->n_steps; i++) {
        plan_step *s = &p->steps[i];
        if (s->op->kind != OP_CALL || (s->kind != STEP_GATHER_ROWS && s->kind != STEP_REDUCE_SCATTER) || s->for_capture)
            continue;
        p->n_region_collectives++;
        if (!strcmp(s->op->child->kind, "moe")) {
            note_unfused(p, s, "kept: mixture-of-experts regions keep plain collectives, as vLLM's do");
            continue;
        }
        if (s->kind == STEP_GATHER_ROWS) {
            plan_step *c = sole_consumer(p, s->out);
            if (!fusable(c, PAR_COLUMN) || c->in[0] != s->out) {
                note_unfused(p, s,
                             c && c->op->kind == OP_LINEAR && c->op->lin->no_fuse
                                 ? "kept: its linear is marked not fusable"
                                 : "kept: the gathered input is not consumed by one column-parallel linear");
                continue;
            }
            c->kind = STEP_AG_MATMUL;
            c->in[0] = s->in[0];
            c->code = s->code; /* it quantizes its shard and gathers those rows itself */
            note_inner_linears(p, i);
        } else {
            plan_step *prod = &p->steps[p->values[s->in[0]].def_step];
            if (!fusable(prod, PAR_ROW) || prod->out != s->in[0] || sole_consumer(p, prod->out) != s) {
                note_unfused(p, s,
                             prod->kind == STEP_OP && prod->op->kind == OP_LINEAR && prod->op->lin->no_fuse
                                 ? "kept: its linear is marked not fusable"
                                 : "kept: the region does not return a row-parallel linear's output unmodified");
                continue;
            }
            prod->kind = STEP_MATMUL_RS;
            prod->out = s->out;
            prod->bias_ref[0] = s->bias_ref[0]; /* the bias the reduction took over, added after the scatter */
        }
        s->kind = STEP_OP; /* mark for removal: a region call is never an op step */
        p->n_fused++;
    }
    int n = 0;
    for (int i = 0; i < p->n_steps; i++)
        if (!(p->steps[i].kind == STEP_OP && p->steps[i].op->kind == OP_CALL)) p->steps[n++] = p->steps[i];
    p->n_steps = n;
    /* step indices moved: liveness starts again from the new ones */
    for (int i = 0; i < n; i++)
        if (p->steps[i].out >= 0) p->values[p->steps[i].out].def_step = p->values[p->steps[i].out].last_use = i;
}

int plan_build(plan *p, const module *tree, const plan_options *o, loom_err *err) {
    memset(p, 0, sizeof *p);
    p->o = *o;
    p->tree = tree;
    p->o.sp = (o->sp || o->async_tp) && o->tp > 1;
    p->o.async_tp = o->async_tp && o->tp > 1;
    if (p->o.dp < 1) p->o.dp = 1, p->o.replica = 0;
    p->o.ep = o->ep && plan_ep_ranks(&p->o) > 1;
    if (o->redundant_experts && !p->o.ep)
        return loom_errf(err,
                         "--num-redundant-experts %d: redundant copies are of whole experts, which need "
                         "--enable-expert-parallel over more than one rank",
                         o->redundant_experts);
    p->region = &region_plain;
    if (p->o.pp <= 1) p->o.pp = 1, p->o.stage = 0, p->o.layer0 = 0, p->o.layer1 = stage_count_layers(tree);
    p->n_layers = p->o.layer1 - p->o.layer0;
    ep_check_model(p, tree);
    int rc = shard_vocab(p, tree, err) || (p->output = flatten(p, tree, NULL, err)) < 0 ? -1 : 0;
    if (!rc && p->o.stage < p->o.pp - 1) p->output = -1; /* what it makes is sent on */
    /* a stage of a hybrid model's recurrent layers alone attends nowhere: its cache rows are
     * still the model's, so that every stage sizes the pool alike */
    const op *att = rc || p->kv_width ? NULL : first_attention(tree);
    if (att) kv_geometry(p, &att->attn);
    if (!rc && p->o.sp) mark_quantized_gathers(p);
    if (!rc && p->o.async_tp) fuse_async_tp(p);
    if (!rc) rc = assign_buffers(p);
    if (p->oom.msg[0]) { /* a builder ran out of memory: that is the failure, whatever followed */
        if (err) *err = p->oom;
        rc = -1;
    }
    if (rc) plan_free(p);
    return rc;
}

size_t plan_state_floats(const plan *p, const plan_step *s) {
    if (s->kind != STEP_OP) return 0;
    const recurrent_desc *r = s->op->rec;
    int w = p->values[s->out].width;
    if (s->op->kind == OP_CONV1D) return (size_t)(r->kernel - 1) * w;
    if (s->op->kind == OP_GATED_DELTA) return (size_t)w / r->v_dim * r->k_dim * r->v_dim;
    if (s->op->kind == OP_SSM_SCAN) return (size_t)w * r->d_state;
    return 0;
}

size_t plan_seq_state_floats(const plan *p) {
    size_t n = 0;
    for (int i = 0; i < p->n_steps; i++) n += plan_state_floats(p, &p->steps[i]);
    return n;
}

void plan_free(plan *p) {
    for (int i = 0; i < p->n_unfused; i++) free(p->unfused[i]);
    free(p->unfused);
    for (int i = 0; i < p->n_warnings; i++) free(p->warnings[i]);
    free(p->warnings);
    free(p->regions);
    for (int i = 0; i < p->n_steps; i++) {
        plan_step *s = &p->steps[i];
        free(s->experts), free(s->expert_ids), free(s->expert_bias);
        placement_free(&s->place);
    }
    free(p->steps);
    free(p->values);
    free(p->buffer_width);
    free(p->buffer_rows);
    free(p->vocab_col0);
    free(p->vocab_width);
    memset(p, 0, sizeof *p);
}

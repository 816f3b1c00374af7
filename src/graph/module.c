/* Module tree construction (see module.h). */
#include "graph/module.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/alloc.h"
#include "util/err.h"

static const char *kind_names[OP_KIND_COUNT] = {
    "embed",   "linear",     "split",  "rms_norm",    "rope",     "attention",    "glu",        "add",
    "scale",   "logit_rows", "call",   "custom",      "moe",      "sigmoid_gate", "input_rows", "concat",
    "softcap", "head_slice", "conv1d", "gated_delta", "ssm_scan", "relu2",
};

const char *op_kind_name(op_kind k) { return kind_names[k]; }

bool module_uses(const module *m, op_kind k) {
    for (int i = 0; i < m->n_ops; i++)
        if (m->ops[i].kind == k || (m->ops[i].kind == OP_CALL && module_uses(m->ops[i].child, k))) return true;
    return false;
}
/* The elements of a linear's (or an embedding's) parts, less a part that reads the table
 * `tied` (a head tied to the embedding, counted with it). */
static size_t linear_params(const linear_desc *l, const char *tied) {
    size_t n = 0;
    for (int i = 0; i < l->n_parts; i++)
        if (!tied || strcmp(l->parts[i].weight, tied)) n += (size_t)l->parts[i].out * (l->in + !!l->parts[i].bias[0]);
    return n;
}

static size_t count_params(const module *m, const char *tied) {
    size_t n = 0;
    for (int i = 0; i < m->n_ops; i++) {
        const op *o = &m->ops[i];
        if (o->kind == OP_CALL) n += count_params(o->child, tied);
        else if (o->kind == OP_EMBED) n += linear_params(o->lin, NULL);
        else if (o->lin) n += linear_params(o->lin, tied); /* linears, MLA's kv_b_proj */
        else if (o->kind == OP_MOE)                        /* gate (if any), up and down */
            n += (size_t)o->moe->n_experts * (o->moe->act.act == GLU_RELU2 ? 2 : 3) * o->moe->inter * o->moe->hidden;
        else if (o->kind == OP_CONV1D) n += (size_t)o->rec->channels * o->rec->kernel;
    }
    return n;
}

size_t module_count_params(const module *m) {
    for (int i = 0; i < m->n_ops; i++)
        if (m->ops[i].kind == OP_EMBED) return count_params(m, m->ops[i].lin->parts[0].weight);
    return count_params(m, NULL);
}

const char *op_name(const op *o) {
    if (o->kind == OP_GLU)
        return o->glu.act == GLU_GELU_TANH      ? "gelu_tanh_mul"
               : o->glu.act == GLU_SILU_CLAMPED ? "silu_clamped_mul"
               : o->glu.act == GLU_RELU2        ? "relu2"
                                                : "silu_mul";
    return o->kind == OP_CUSTOM ? o->custom.name : kind_names[o->kind];
}

module *module_new(const char *kind, const char *fmt, ...) {
    module *m = mem_zalloc(1, sizeof *m, "a module", NULL);
    if (!m) return NULL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->name, sizeof m->name, fmt, ap);
    va_end(ap);
    snprintf(m->kind, sizeof m->kind, "%s", kind);
    return m;
}

/* What op o owns. */
static void op_release(op *o) {
    free(o->lin);
    free(o->moe);
    free(o->rec);
    if (o->kind == OP_CALL) module_free(o->child);
    if (o->kind == OP_CUSTOM) free((char *)o->custom.name);
}

void module_free(module *m) {
    if (!m) return;
    for (int i = 0; i < m->n_ops; i++) op_release(&m->ops[i]);
    for (int i = 0; i < m->n_values; i++) free(m->value_names[i]);
    free(m->value_names);
    free(m->ops);
    free(m);
}

int module_check(const module *root, loom_err *err) {
    if (!root) return loom_errf(err, "cannot allocate %zu bytes for the model's root module", sizeof *root);
    if (root->failed) {
        if (err) *err = root->why;
        return -1;
    }
    for (int i = 0; i < root->n_ops; i++)
        if (root->ops[i].kind == OP_CALL && module_check(root->ops[i].child, err)) return -1;
    return 0;
}

/* Where an allocation for m reports: m's record of its first failure. */
static loom_err *why(module *m) { return m->failed ? NULL : &m->why; }

/* Marks m failed (its message already set); returns -1 for the emitters to pass on. */
static int failed(module *m) {
    m->failed = true;
    return -1;
}

static int new_value(module *m, const char *name) {
    char *copy = mem_strdup(name, "a value's name", why(m));
    if (!copy || ARRAY_RESERVE(m->value_names, m->cap_values, (size_t)m->n_values + 1, "a module's values", why(m))) {
        free(copy);
        return failed(m);
    }
    m->value_names[m->n_values] = copy;
    return m->n_values++;
}

int module_input(module *m, const char *name) {
    int v = m ? new_value(m, name) : -1;
    if (v >= 0) m->n_inputs++;
    return v;
}

void module_output(module *m, int value) {
    if (m) m->outputs[m->n_outputs++] = value;
}

int module_end_at(module *m, int value) {
    for (int i = 0; i < m->n_ops; i++)
        for (int k = 0; k < m->ops[i].n_out; k++)
            if (m->ops[i].out[k] == value) {
                for (int j = i + 1; j < m->n_ops; j++) op_release(&m->ops[j]);
                m->n_ops = i + 1;
                m->n_outputs = 1;
                m->outputs[0] = value;
                return 0;
            }
    return -1;
}

/* The op appended to m, or NULL (m marked failed) when out of memory. */
static op *new_op(module *m, op_kind kind, int n_in, const int *in, const char *out_name) {
    if (!m) return NULL;
    if (ARRAY_RESERVE(m->ops, m->cap_ops, (size_t)m->n_ops + 1, "a module's ops", why(m))) {
        failed(m);
        return NULL;
    }
    int out = new_value(m, out_name);
    if (out < 0) return NULL;
    op *o = &m->ops[m->n_ops++];
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->n_in = n_in;
    if (n_in) memcpy(o->in, in, n_in * sizeof *in);
    o->n_out = 1;
    o->out[0] = out;
    return o;
}

/* Gives o (of m) its own copy of l; returns o's value, or -1 when out of memory. */
static int attach_lin(module *m, op *o, const linear_desc *l) {
    if (!(o->lin = mem_alloc(sizeof *o->lin, "a linear's description", why(m)))) return failed(m);
    *o->lin = *l;
    return o->out[0];
}

int emit_embed(module *m, const char *table, int vocab, int hidden, float scale, int image_token) {
    op *o = new_op(m, OP_EMBED, 0, NULL, scale != 1.0f ? "embeds_scaled" : "embeds");
    if (!o) return -1;
    o->scalar = scale;
    o->image_token = image_token;
    linear_desc l = {.in = hidden, .n_parts = 1, .style = PAR_VOCAB};
    snprintf(l.parts[0].weight, sizeof l.parts[0].weight, "%s", table);
    l.parts[0].out = vocab;
    return attach_lin(m, o, &l);
}

int linear_part_name(const linear_part *p, const char **start) {
    const char *w = p->weight, *end = strrchr(w, '.');
    if (!end) end = w + strlen(w);
    for (*start = end; *start > w && (*start)[-1] != '.';) (*start)--;
    return (int)(end - *start);
}

int emit_linear(module *m, int in, const linear_desc *lin) {
    /* name the value after its (first) weight: "q_proj" */
    char name[64];
    const char *start;
    int len = linear_part_name(&lin->parts[0], &start);
    snprintf(name, sizeof name, "%.*s%s", len, start, lin->n_parts > 1 ? "+" : "");
    op *o = new_op(m, OP_LINEAR, 1, &in, name);
    return o ? attach_lin(m, o, lin) : -1;
}

int emit_split(module *m, int fused, int part, const char *name) {
    op *o = new_op(m, OP_SPLIT, 1, &fused, name);
    if (!o) return -1;
    o->part = part;
    return o->out[0];
}

int emit_rms_norm_offset(module *m, int in, const char *weight, float offset, float eps, int group, const char *name) {
    op *o = new_op(m, OP_RMS_NORM, 1, &in, name);
    if (!o) return -1;
    snprintf(o->weight, sizeof o->weight, "%s", weight);
    o->weight_offset = offset;
    o->eps = eps;
    o->group = group;
    return o->out[0];
}

int emit_rms_norm(module *m, int in, const char *weight, float eps, int group, const char *name) {
    return emit_rms_norm_offset(m, in, weight, 0, eps, group, name);
}

int emit_rms_norm_across(module *m, int in, const char *weight, float eps, int features, const char *name) {
    int v = emit_rms_norm(m, in, weight, eps, 0, name);
    if (v < 0) return -1;
    m->ops[m->n_ops - 1].across_ranks = true;
    m->ops[m->n_ops - 1].features = features;
    return v;
}

int emit_rms_norm_wide(module *m, int in, const char *weight, float eps, int group, int features, const char *name) {
    int v = emit_rms_norm(m, in, weight, eps, group, name);
    if (v < 0) return -1;
    m->ops[m->n_ops - 1].wide = true;
    m->ops[m->n_ops - 1].features = features;
    return v;
}

int emit_rope(module *m, int in, const rope_desc *r, const char *name) {
    op *o = new_op(m, OP_ROPE, 1, &in, name);
    if (!o) return -1;
    o->rope = *r;
    return o->out[0];
}

int emit_attention(module *m, int q, int k, int v, const attn_desc *a) {
    op *o = new_op(m, OP_ATTENTION, 3, (int[]){q, k, v}, "attn");
    if (!o) return -1;
    o->attn = *a;
    return o->out[0];
}

int emit_mla_attention(module *m, int q, int kv_c, int k_pe, const attn_desc *a, const linear_desc *kv_b) {
    int v = emit_attention(m, q, kv_c, k_pe, a);
    return v < 0 ? -1 : attach_lin(m, &m->ops[m->n_ops - 1], kv_b);
}

int emit_glu(module *m, int gate, int up, const glu_desc *g) {
    op *o = new_op(m, OP_GLU, 2, (int[]){gate, up}, "act");
    if (!o) return -1;
    o->glu = *g;
    return o->out[0];
}

int emit_softcap(module *m, int in, float cap, const char *name) {
    op *o = new_op(m, OP_SOFTCAP, 1, &in, name);
    if (!o) return -1;
    o->scalar = cap;
    return o->out[0];
}

int emit_relu2(module *m, int in, const char *name) {
    op *o = new_op(m, OP_RELU2, 1, &in, name);
    return o ? o->out[0] : -1;
}

int emit_add(module *m, int a, int b, const char *name) {
    op *o = new_op(m, OP_ADD, 2, (int[]){a, b}, name);
    return o ? o->out[0] : -1;
}

int emit_scale(module *m, int in, float s, const char *name) {
    op *o = new_op(m, OP_SCALE, 1, &in, name);
    if (!o) return -1;
    o->scalar = s;
    return o->out[0];
}

int emit_logit_rows(module *m, int in) {
    op *o = new_op(m, OP_LOGIT_ROWS, 1, &in, "last");
    return o ? o->out[0] : -1;
}

int emit_moe(module *m, int x, int router_logits, const moe_desc *d) {
    op *o = new_op(m, OP_MOE, 2, (int[]){x, router_logits}, "experts");
    if (!o) return -1;
    if (!(o->moe = mem_alloc(sizeof *o->moe, "an MoE description", why(m)))) return failed(m);
    *o->moe = *d;
    return o->out[0];
}

int emit_sigmoid_gate(module *m, int in, int gate, const char *name) {
    op *o = new_op(m, OP_SIGMOID_GATE, 2, (int[]){in, gate}, name);
    return o ? o->out[0] : -1;
}

int emit_rms_norm_gated(module *m, int x, int z, const char *weight, float eps, int group, const char *name) {
    op *o = new_op(m, OP_RMS_NORM, 2, (int[]){x, z}, name);
    if (!o) return -1;
    snprintf(o->weight, sizeof o->weight, "%s", weight);
    o->eps = eps;
    o->group = group;
    o->gate_silu = true;
    return o->out[0];
}

int emit_head_slice(module *m, int in, const slice_desc *s, const char *name) {
    op *o = new_op(m, OP_HEAD_SLICE, 1, &in, name);
    if (!o) return -1;
    o->slice = *s;
    return o->out[0];
}

static int attach_rec(module *m, op *o, const recurrent_desc *r) {
    if (!(o->rec = mem_alloc(sizeof *o->rec, "a recurrent mixer's description", why(m)))) return failed(m);
    *o->rec = *r;
    return o->out[0];
}

int emit_conv1d(module *m, const int *ins, int n_in, const recurrent_desc *r) {
    op *o = new_op(m, OP_CONV1D, n_in, ins, "conv");
    return o ? attach_rec(m, o, r) : -1;
}

int emit_gated_delta(module *m, int qkv, int b, int a, const recurrent_desc *r) {
    op *o = new_op(m, OP_GATED_DELTA, 3, (int[]){qkv, b, a}, "delta");
    return o ? attach_rec(m, o, r) : -1;
}

int emit_ssm_scan(module *m, int xbc, int dt, const recurrent_desc *r) {
    op *o = new_op(m, OP_SSM_SCAN, 2, (int[]){xbc, dt}, "scan");
    return o ? attach_rec(m, o, r) : -1;
}

int emit_input_rows(module *m, int features, const char *name) {
    op *o = new_op(m, OP_INPUT_ROWS, 0, NULL, name);
    if (!o) return -1;
    o->features = features;
    return o->out[0];
}

int emit_concat(module *m, int a, int b, const char *name) {
    op *o = new_op(m, OP_CONCAT, 2, (int[]){a, b}, name);
    return o ? o->out[0] : -1;
}

int emit_call(module *m, module *child, const int *ins, int n_in, const char *name) {
    if (!m || !child) { /* module_new's only failure */
        if (m && !m->failed)
            loom_errf(&m->why, "cannot allocate %zu bytes for the module called as %s", sizeof *m, name);
        if (m) failed(m);
        module_free(child);
        return -1;
    }
    op *o = new_op(m, OP_CALL, n_in, ins, name);
    if (!o) {
        module_free(child);
        return -1;
    }
    o->child = child;
    return o->out[0];
}

int module_add_custom(module *m, bool at_input, const loom_custom_op *c) {
    int src = at_input ? 0 : m->outputs[0];
    char *name = mem_strdup(c->name, "a custom op's name", why(m));
    op *o = name ? new_op(m, OP_CUSTOM, 1, &src, c->name) : NULL;
    if (!o) {
        free(name);
        return failed(m);
    }
    o->custom = *c;
    o->custom.name = name;
    int v = o->out[0];
    if (at_input) { /* move the op first; every earlier reader of the input now reads v */
        op added = *o;
        memmove(m->ops + 1, m->ops, (m->n_ops - 1) * sizeof *m->ops);
        m->ops[0] = added;
        for (int i = 1; i < m->n_ops; i++)
            for (int j = 0; j < m->ops[i].n_in; j++)
                if (m->ops[i].in[j] == src) m->ops[i].in[j] = v;
        for (int i = 0; i < m->n_outputs; i++)
            if (m->outputs[i] == src) m->outputs[i] = v;
    } else {
        m->outputs[0] = v;
    }
    return 0;
}

module *module_find(module *root, const char *path) {
    if (!strcmp(root->name, path)) return root;
    for (int i = 0; i < root->n_ops; i++)
        if (root->ops[i].kind == OP_CALL) {
            module *f = module_find(root->ops[i].child, path);
            if (f) return f;
        }
    return NULL;
}

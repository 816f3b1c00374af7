/* Module tree construction (see module.h). */
#include "graph/module.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *kind_names[OP_KIND_COUNT] = {
    "embed", "linear", "split", "rms_norm", "rope", "attention",
    "silu_mul", "add", "scale", "logit_rows", "call", "custom", "moe", "sigmoid_gate",
};

const char *op_kind_name(op_kind k) { return kind_names[k]; }
const char *op_name(const op *o) { return o->kind == OP_CUSTOM ? o->custom.name : kind_names[o->kind]; }

module *module_new(const char *kind, const char *fmt, ...) {
    module *m = calloc(1, sizeof *m);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->name, sizeof m->name, fmt, ap);
    va_end(ap);
    snprintf(m->kind, sizeof m->kind, "%s", kind);
    return m;
}

void module_free(module *m) {
    if (!m) return;
    for (int i = 0; i < m->n_ops; i++) {
        free(m->ops[i].lin);
        free(m->ops[i].moe);
        if (m->ops[i].kind == OP_CALL) module_free(m->ops[i].child);
        if (m->ops[i].kind == OP_CUSTOM) free((char *)m->ops[i].custom.name);
    }
    for (int i = 0; i < m->n_values; i++) free(m->value_names[i]);
    free(m->value_names);
    free(m->ops);
    free(m);
}

static int new_value(module *m, const char *name) {
    if (m->n_values == m->cap_values) {
        m->cap_values = m->cap_values ? 2 * m->cap_values : 8;
        m->value_names = realloc(m->value_names, m->cap_values * sizeof *m->value_names);
    }
    m->value_names[m->n_values] = strdup(name);
    return m->n_values++;
}

int module_input(module *m, const char *name) {
    m->n_inputs++;
    return new_value(m, name);
}

void module_output(module *m, int value) { m->outputs[m->n_outputs++] = value; }

static op *new_op(module *m, op_kind kind, int n_in, const int *in, const char *out_name) {
    if (m->n_ops == m->cap_ops) {
        m->cap_ops = m->cap_ops ? 2 * m->cap_ops : 8;
        m->ops = realloc(m->ops, m->cap_ops * sizeof *m->ops);
    }
    op *o = &m->ops[m->n_ops++];
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->n_in = n_in;
    if (n_in) memcpy(o->in, in, n_in * sizeof *in);
    o->n_out = 1;
    o->out[0] = new_value(m, out_name);
    return o;
}

static linear_desc *copy_lin(const linear_desc *l) {
    linear_desc *c = malloc(sizeof *c);
    *c = *l;
    return c;
}

int emit_embed(module *m, const char *table, int vocab, int hidden) {
    op *o = new_op(m, OP_EMBED, 0, NULL, "embeds");
    linear_desc l = {.in = hidden, .n_parts = 1, .style = PAR_VOCAB};
    snprintf(l.parts[0].weight, sizeof l.parts[0].weight, "%s", table);
    l.parts[0].out = vocab;
    o->lin = copy_lin(&l);
    return o->out[0];
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
    o->lin = copy_lin(lin);
    return o->out[0];
}

int emit_split(module *m, int fused, int part, const char *name) {
    op *o = new_op(m, OP_SPLIT, 1, &fused, name);
    o->part = part;
    return o->out[0];
}

int emit_rms_norm(module *m, int in, const char *weight, float eps, int group, const char *name) {
    op *o = new_op(m, OP_RMS_NORM, 1, &in, name);
    snprintf(o->weight, sizeof o->weight, "%s", weight);
    o->eps = eps;
    o->group = group;
    return o->out[0];
}

int emit_rms_norm_across(module *m, int in, const char *weight, float eps, int features, const char *name) {
    int v = emit_rms_norm(m, in, weight, eps, 0, name);
    m->ops[m->n_ops - 1].across_ranks = true;
    m->ops[m->n_ops - 1].features = features;
    return v;
}

int emit_rope(module *m, int in, const rope_desc *r, const char *name) {
    op *o = new_op(m, OP_ROPE, 1, &in, name);
    o->rope = *r;
    return o->out[0];
}

int emit_attention(module *m, int q, int k, int v, const attn_desc *a) {
    op *o = new_op(m, OP_ATTENTION, 3, (int[]){q, k, v}, "attn");
    o->attn = *a;
    return o->out[0];
}

int emit_mla_attention(module *m, int q, int kv_c, int k_pe, const attn_desc *a, const linear_desc *kv_b) {
    int v = emit_attention(m, q, kv_c, k_pe, a);
    m->ops[m->n_ops - 1].lin = copy_lin(kv_b);
    return v;
}

int emit_silu_mul(module *m, int gate, int up) {
    return new_op(m, OP_SILU_MUL, 2, (int[]){gate, up}, "act")->out[0];
}

int emit_add(module *m, int a, int b, const char *name) {
    return new_op(m, OP_ADD, 2, (int[]){a, b}, name)->out[0];
}

int emit_scale(module *m, int in, float s, const char *name) {
    op *o = new_op(m, OP_SCALE, 1, &in, name);
    o->scalar = s;
    return o->out[0];
}

int emit_logit_rows(module *m, int in) { return new_op(m, OP_LOGIT_ROWS, 1, &in, "last")->out[0]; }

int emit_moe(module *m, int x, int router_logits, const moe_desc *d) {
    op *o = new_op(m, OP_MOE, 2, (int[]){x, router_logits}, "experts");
    o->moe = malloc(sizeof *o->moe);
    *o->moe = *d;
    return o->out[0];
}

int emit_sigmoid_gate(module *m, int in, int gate, const char *name) {
    return new_op(m, OP_SIGMOID_GATE, 2, (int[]){in, gate}, name)->out[0];
}

int emit_call(module *m, module *child, const int *ins, int n_in, const char *name) {
    op *o = new_op(m, OP_CALL, n_in, ins, name);
    o->child = child;
    return o->out[0];
}

void module_add_custom(module *m, bool at_input, const loom_custom_op *c) {
    int src = at_input ? 0 : m->outputs[0];
    op *o = new_op(m, OP_CUSTOM, 1, &src, c->name);
    o->custom = *c;
    o->custom.name = strdup(c->name);
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

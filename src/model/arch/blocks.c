/* The blocks the families share: linear parts (fused checkpoint tensors among them), GQA
 * self-attention with RoPE and its q/k norms, the gated MLP (SwiGLU or GELU-tanh), and the LM
 * head. Each family's layer (llama_blocks.c, gemma_blocks.c, eagle3_blocks.c, ...) composes
 * them. Weight names are Hugging Face's. */
#include <stdio.h>

#include "model/arch/arch.h"

void linear_part_init(linear_part *p, const char *prefix, const char *proj, int out, int head_dim, bool bias) {
    snprintf(p->weight, sizeof p->weight, "%s.%s.weight", prefix, proj);
    if (bias) snprintf(p->bias, sizeof p->bias, "%s.%s.bias", prefix, proj);
    p->out = out;
    p->head_dim = head_dim;
}

void linear_fuse_parts(linear_desc *l, int n, const char *prefix, const char *fused) {
    int rows = 0;
    for (int i = 0; i < n; i++) rows += l->parts[i].out;
    for (int i = 0, row0 = 0; i < n; row0 += l->parts[i++].out) {
        linear_part *p = &l->parts[i];
        snprintf(p->weight, sizeof p->weight, "%s.%s.weight", prefix, fused);
        if (p->bias[0]) snprintf(p->bias, sizeof p->bias, "%s.%s.bias", prefix, fused);
        p->row0 = row0;
        p->tensor_rows = rows;
    }
}

/* q_norm / k_norm before RoPE: per head (Qwen3), or over the whole projection of `features`
 * (OLMoE), whose statistic then spans the ranks under TP. */
static int qk_norm(module *m, const model_config *c, const llama_variant *v, int x, const char *which, int features) {
    char w[128], name[16];
    snprintf(w, sizeof w, "%s.%s_norm.weight", m->name, which);
    snprintf(name, sizeof name, "%s_normed", which);
    return v->qk_norm_whole ? emit_rms_norm_across(m, x, w, c->rms_eps, features, name)
                            : emit_rms_norm_offset(m, x, w, v->norm_offset, c->rms_eps, c->head_dim, name);
}

module *attention_module(const model_config *c, const llama_variant *v, const char *name, int layer, int in) {
    module *m = module_new("attention", "%s", name);
    if (!m) return NULL;
    int x = module_input(m, "x");
    int hd = c->head_dim, q_out = c->n_heads * hd, kv_out = c->n_kv_heads * hd, gated = v->output_gate ? 2 : 1;
    linear_desc qkv = {.in = in, .n_parts = 3, .style = PAR_COLUMN};
    bool bias = v->qkv_bias || c->attention_bias;
    linear_part_init(&qkv.parts[0], m->name, "q_proj", gated * q_out, gated * hd, bias);
    linear_part_init(&qkv.parts[1], m->name, "k_proj", kv_out, hd, bias);
    linear_part_init(&qkv.parts[2], m->name, "v_proj", kv_out, hd, bias);
    qkv.parts[1].replicable = qkv.parts[2].replicable = true;
    if (v->fused_qkv) linear_fuse_parts(&qkv, qkv.n_parts, m->name, v->fused_qkv);
    int fused = emit_linear(m, x, &qkv);
    int q = emit_split(m, fused, 0, "q");
    int k = emit_split(m, fused, 1, "k");
    int val = emit_split(m, fused, 2, "v"), gate = -1;
    if (v->output_gate) { /* each head's query, then its gate */
        gate = emit_head_slice(m, q, &(slice_desc){2 * hd, hd, hd}, "gate");
        q = emit_head_slice(m, q, &(slice_desc){2 * hd, 0, hd}, "query");
    }
    if (v->qk_norm || v->qk_norm_whole) {
        q = qk_norm(m, c, v, q, "q", q_out);
        k = qk_norm(m, c, v, k, "k", kv_out);
    }
    /* Gemma's layer_types: sliding layers attend within the window, with their own RoPE base */
    bool sliding = c->layer_windows ? c->sliding_layer[layer] : v->sliding_window;
    bool local = sliding && c->rope_local_theta;
    bool adjacent = v->interleaved || c->rope_meta_layout;
    if (!c->no_rope) { /* Granite 4.0-H's attention sees no positions: its Mamba layers give them */
        q = emit_rope(m, q, &(rope_desc){c->n_heads, hd, 0, adjacent, local}, "q_rot");
        k = emit_rope(m, k, &(rope_desc){c->n_kv_heads, hd, 0, adjacent, local}, "k_rot");
    }
    attn_desc a = {.layer = layer,
                   .n_heads = c->n_heads,
                   .n_kv_heads = c->n_kv_heads,
                   .head_dim = hd,
                   .sliding_window = sliding ? c->sliding_window : 0,
                   .scale = c->attention_mult,
                   .softcap = c->attn_softcap};
    if (v->attn_sinks) snprintf(a.sinks, sizeof a.sinks, "%s.sinks", m->name);
    int att = emit_attention(m, q, k, val, &a);
    if (v->output_gate) att = emit_sigmoid_gate(m, att, gate, "gated");
    linear_desc o = {.in = q_out, .n_parts = 1, .style = PAR_ROW};
    linear_part_init(&o.parts[0], m->name, "o_proj", c->hidden, 0, c->attention_bias);
    module_output(m, emit_linear(m, att, &o));
    return m;
}

module *mlp_module(const model_config *c, const llama_variant *v, const char *name, int inter) {
    module *m = module_new("mlp", "%s", name);
    if (!m) return NULL;
    int x = module_input(m, "x");
    linear_desc gu = {.in = c->hidden, .n_parts = 2, .style = PAR_COLUMN};
    linear_part_init(&gu.parts[0], m->name, "gate_proj", inter, 0, c->mlp_bias);
    linear_part_init(&gu.parts[1], m->name, "up_proj", inter, 0, c->mlp_bias);
    if (v && v->fused_gate_up) linear_fuse_parts(&gu, gu.n_parts, m->name, v->fused_gate_up);
    int fused = emit_linear(m, x, &gu);
    int gate = emit_split(m, fused, 0, "gate"), up = emit_split(m, fused, 1, "up");
    int act = emit_glu(m, gate, up, &(glu_desc){c->gelu_tanh ? GLU_GELU_TANH : GLU_SILU, 0, 0});
    linear_desc d = {.in = inter, .n_parts = 1, .style = PAR_ROW};
    linear_part_init(&d.parts[0], m->name, "down_proj", c->hidden, 0, c->mlp_bias);
    module_output(m, emit_linear(m, act, &d));
    return m;
}

module *relu2_mlp_module(const model_config *c, const char *name, int inter) {
    module *m = module_new("mlp", "%s", name);
    if (!m) return NULL;
    linear_desc up = {.in = c->hidden, .n_parts = 1, .style = PAR_COLUMN};
    linear_part_init(&up.parts[0], m->name, "up_proj", inter, 0, c->mlp_bias);
    int act = emit_relu2(m, emit_linear(m, module_input(m, "x"), &up), "act");
    linear_desc down = {.in = inter, .n_parts = 1, .style = PAR_ROW};
    linear_part_init(&down.parts[0], m->name, "down_proj", c->hidden, 0, c->mlp_bias);
    module_output(m, emit_linear(m, act, &down));
    return m;
}

int emit_lm_head(module *m, const model_config *c, int h, const char *embed) {
    linear_desc head = {.in = c->hidden, .n_parts = 1, .style = PAR_VOCAB};
    snprintf(head.parts[0].weight, sizeof head.parts[0].weight, "%s", c->tie_embeddings ? embed : "lm_head.weight");
    head.parts[0].out = c->vocab;
    return emit_linear(m, h, &head);
}

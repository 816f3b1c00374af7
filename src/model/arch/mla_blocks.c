/* Multi-head latent attention (DeepSeek-V2/V3), as ops: the projections of the region input
 * (q_proj or q_a_proj, and kv_a_proj_with_mqa split into the latent kv_c and the shared k_pe)
 * as one linear whose down-projections every rank holds whole, as vLLM replicates them; the
 * latents' norms; q_b_proj by head; RoPE on the rotary part of each head only; the attention
 * over the latent cache with kv_b_proj inside it; o_proj by rows. Weight names are Hugging
 * Face's. */
#include <math.h>
#include <stdio.h>

#include "model/arch/arch.h"

/* transformers builds q_a_layernorm and kv_a_layernorm with its RMSNorm's default epsilon, not
 * the config's rms_norm_eps */
#define MLA_NORM_EPS 1e-6f

/* A projection every rank holds all of: rows [row0, row0 + out) of `proj`'s tensor of `rows`. */
static void whole_part(linear_part *p, const char *prefix, const char *proj, int row0, int out, int rows, bool bias) {
    linear_part_init(p, prefix, proj, out, 0, bias);
    p->whole = true;
    p->row0 = row0;
    p->tensor_rows = rows;
}

/* DeepSeek's softmax scale: 1/sqrt(q/k head dim), grown by YaRN's mscale(factor, mscale_all_dim)^2
 * where the RoPE type scales (transformers' yarn_apply_mscale). */
static float mla_scale(const model_config *c) {
    double s = 1.0 / sqrt(c->mla.qk_nope_head_dim + c->mla.qk_rope_head_dim);
    if (c->rope_kind != ROPE_DEFAULT && c->rope_mscale_all_dim != 0 && c->rope_factor > 1) {
        double m = 0.1 * c->rope_mscale_all_dim * log(c->rope_factor) + 1.0;
        s *= m * m;
    }
    return (float)s;
}

module *mla_attention_module(const model_config *c, const llama_variant *v, int layer) {
    const mla_config *a = &c->mla;
    module *m = module_new("attention", "model.layers.%d.self_attn", layer);
    if (!m) return NULL;
    int x = module_input(m, "x");
    int qk = a->qk_nope_head_dim + a->qk_rope_head_dim, H = c->n_heads, kv_rows = a->kv_lora_rank + a->qk_rope_head_dim;
    bool bias = c->attention_bias;
    char w[128];
    /* the region input's projections: one linear, so async TP fuses the gather with all of them */
    linear_desc in = {.in = c->hidden, .n_parts = 3, .style = PAR_COLUMN};
    if (a->q_lora_rank) whole_part(&in.parts[0], m->name, "q_a_proj", 0, a->q_lora_rank, 0, bias);
    else linear_part_init(&in.parts[0], m->name, "q_proj", H * qk, qk, false);
    whole_part(&in.parts[1], m->name, "kv_a_proj_with_mqa", 0, a->kv_lora_rank, kv_rows, bias);
    whole_part(&in.parts[2], m->name, "kv_a_proj_with_mqa", a->kv_lora_rank, a->qk_rope_head_dim, kv_rows, bias);
    int fused = emit_linear(m, x, &in);
    int q = emit_split(m, fused, 0, a->q_lora_rank ? "q_a" : "q");
    int kv_c = emit_split(m, fused, 1, "kv_c"), k_pe = emit_split(m, fused, 2, "k_pe");
    if (a->q_lora_rank) {
        snprintf(w, sizeof w, "%s.q_a_layernorm.weight", m->name);
        q = emit_rms_norm(m, q, w, MLA_NORM_EPS, 0, "q_a_normed");
        linear_desc qb = {.in = a->q_lora_rank, .n_parts = 1, .style = PAR_COLUMN};
        linear_part_init(&qb.parts[0], m->name, "q_b_proj", H * qk, qk, false);
        q = emit_linear(m, q, &qb);
    }
    snprintf(w, sizeof w, "%s.kv_a_layernorm.weight", m->name);
    kv_c = emit_rms_norm(m, kv_c, w, MLA_NORM_EPS, 0, "kv_c_normed");
    bool interleaved = v->interleaved || a->rope_interleave;
    q = emit_rope(m, q, &(rope_desc){H, qk, a->qk_nope_head_dim, interleaved, false}, "q_rot");
    k_pe = emit_rope(m, k_pe, &(rope_desc){1, a->qk_rope_head_dim, 0, interleaved, false}, "k_pe_rot");
    attn_desc ad = {.layer = layer,
                    .n_heads = H,
                    .n_kv_heads = H,
                    .head_dim = qk,
                    .scale = mla_scale(c),
                    .kv_lora = a->kv_lora_rank,
                    .nope = a->qk_nope_head_dim,
                    .rope = a->qk_rope_head_dim,
                    .v_dim = a->v_head_dim};
    linear_desc kv_b = {.in = a->kv_lora_rank, .n_parts = 1, .style = PAR_COLUMN};
    linear_part_init(&kv_b.parts[0], m->name, "kv_b_proj", H * (a->qk_nope_head_dim + a->v_head_dim),
                     a->qk_nope_head_dim + a->v_head_dim, false);
    int att = emit_mla_attention(m, q, kv_c, k_pe, &ad, &kv_b);
    linear_desc o = {.in = H * a->v_head_dim, .n_parts = 1, .style = PAR_ROW};
    linear_part_init(&o.parts[0], m->name, "o_proj", c->hidden, 0, bias);
    module_output(m, emit_linear(m, att, &o));
    return m;
}

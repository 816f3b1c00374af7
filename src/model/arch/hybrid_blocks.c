/* Hybrid models, whose layers mix tokens by attention or by a recurrent mixer as the config's
 * layer types say (model_config.mixer): Qwen3.5's Gated DeltaNet beside its gated full
 * attention, its MLPs dense or (Qwen3.5-MoE) every one a mixture of experts; Qwen3-Next, whose
 * DeltaNet projections are fused per key head, with mixtures and dense MLPs as its config says. The layer around the mixer is the Llama family's pre-norm one; Qwen3.5's norms
 * are zero-centred (scale 1 + w, the variant's norm_offset). Weight names are Hugging Face's. */
#include <stdio.h>

#include "model/arch/arch.h"

static const char *const part_names[6] = {"q", "k", "v", "z", "b", "a"};

/* Qwen3.5's projections: q, k and v as row ranges of in_proj_qkv, then z, b and a, each a part
 * sharded by its own heads; into part[] in part_names' order. */
static void projections_apart(module *m, const model_config *c, int x, int part[6]) {
    const gdn_config *g = &c->gdn;
    int kd = g->k_heads * g->k_dim, vd = g->v_heads * g->v_dim;
    linear_desc in = {.in = c->hidden, .n_parts = 6, .style = PAR_COLUMN};
    const int qkv_rows[3] = {kd, kd, vd}, head[3] = {g->k_dim, g->k_dim, g->v_dim};
    for (int i = 0, row0 = 0; i < 3; row0 += qkv_rows[i++]) {
        linear_part_init(&in.parts[i], m->name, "in_proj_qkv", qkv_rows[i], head[i], false);
        in.parts[i].row0 = row0;
        in.parts[i].tensor_rows = 2 * kd + vd;
    }
    linear_part_init(&in.parts[3], m->name, "in_proj_z", vd, g->v_dim, false);
    linear_part_init(&in.parts[4], m->name, "in_proj_b", g->v_heads, 1, false);
    linear_part_init(&in.parts[5], m->name, "in_proj_a", g->v_heads, 1, false);
    int fused = emit_linear(m, x, &in);
    for (int i = 0; i < 6; i++) part[i] = emit_split(m, fused, i, part_names[i]);
}

/* Qwen3-Next's: in_proj_qkvz and in_proj_ba group each key head's rows (q, k, then the v and z
 * of its value heads; their b, then their a), so each is one part sharded by key head, and
 * head slices take the six apart (v's and z's heads in the order the separate layout has). */
static void projections_by_key_head(module *m, const model_config *c, int x, int part[6]) {
    const gdn_config *g = &c->gdn;
    int per = g->v_heads / g->k_heads, qkvz = 2 * g->k_dim + 2 * per * g->v_dim;
    linear_desc in = {.in = c->hidden, .n_parts = 2, .style = PAR_COLUMN};
    linear_part_init(&in.parts[0], m->name, "in_proj_qkvz", g->k_heads * qkvz, qkvz, false);
    linear_part_init(&in.parts[1], m->name, "in_proj_ba", 2 * g->v_heads, 2 * per, false);
    int fused = emit_linear(m, x, &in);
    int groups[2] = {emit_split(m, fused, 0, "qkvz"), emit_split(m, fused, 1, "ba")};
    const int width[6] = {g->k_dim, g->k_dim, per * g->v_dim, per * g->v_dim, per, per};
    for (int i = 0, off = 0; i < 6; off += width[i++]) {
        if (i == 4) off = 0; /* b and a, of in_proj_ba */
        slice_desc s = {i < 4 ? qkvz : 2 * per, off, width[i]};
        part[i] = emit_head_slice(m, groups[i >= 4], &s, part_names[i]);
    }
}

/* Gated DeltaNet (transformers' Qwen3_5GatedDeltaNet, Qwen3NextGatedDeltaNet): one
 * column-parallel linear makes q, k, v, z, b and a, sharded by heads, so a rank holds whole key
 * heads and the value heads that read them; the causal convolution and the delta rule keep a
 * state per sequence; the output, normalised per value head and gated by silu(z), goes through
 * the row-parallel out_proj. */
static module *gated_delta_module(const model_config *c, const llama_variant *v, int layer) {
    module *m = module_new("linear_attention", "model.layers.%d.linear_attn", layer);
    if (!m) return NULL;
    const gdn_config *g = &c->gdn;
    int x = module_input(m, "x"), kd = g->k_heads * g->k_dim, vd = g->v_heads * g->v_dim, part[6];
    (v->gdn_by_key_head ? projections_by_key_head : projections_apart)(m, c, x, part);
    recurrent_desc r = {.layer = layer,
                        .kernel = g->conv_kernel,
                        .channels = 2 * kd + vd,
                        .offsets = {0, kd, 2 * kd},
                        .n_k_heads = g->k_heads,
                        .n_v_heads = g->v_heads,
                        .k_dim = g->k_dim,
                        .v_dim = g->v_dim};
    snprintf(r.weight, sizeof r.weight, "%s.conv1d.weight", m->name);
    snprintf(r.a_log, sizeof r.a_log, "%s.A_log", m->name);
    snprintf(r.dt_bias, sizeof r.dt_bias, "%s.dt_bias", m->name);
    int conv = emit_conv1d(m, part, 3, &r);
    int core = emit_gated_delta(m, conv, part[4], part[5], &r);
    char w[128];
    snprintf(w, sizeof w, "%s.norm.weight", m->name);
    int normed = emit_rms_norm_gated(m, core, part[3], w, c->rms_eps, g->v_dim, "normed");
    linear_desc out = {.in = vd, .n_parts = 1, .style = PAR_ROW};
    linear_part_init(&out.parts[0], m->name, "out_proj", c->hidden, 0, false);
    module_output(m, emit_linear(m, normed, &out));
    return m;
}

static module *decoder_layer(const model_config *c, const llama_variant *v, int layer) {
    module *m = module_new("decoder_layer", "model.layers.%d", layer);
    if (!m) return NULL;
    int h = module_input(m, "hidden");
    char name[96];
    snprintf(name, sizeof name, "model.layers.%d.self_attn", layer);
    module *mixer = c->mixer[layer] == MIXER_GATED_DELTA ? gated_delta_module(c, v, layer)
                                                         : attention_module(c, v, name, layer, c->hidden);
    h = residual_branch(m, c, v, h, "input_layernorm", mixer, "resid_mixer");
    snprintf(name, sizeof name, "model.layers.%d.mlp", layer);
    /* Qwen3-Next keeps dense MLPs in mlp_only_layers and between sparse steps */
    bool sparse = v->moe && c->n_experts && !c->mlp_only[layer] && (layer + 1) % c->sparse_step == 0;
    module *mlp = sparse ? moe_module(c, v->moe, layer) : mlp_module(c, v, name, c->intermediate);
    h = residual_branch(m, c, v, h, "post_attention_layernorm", mlp, "resid_mlp");
    module_output(m, h);
    return m;
}

module *build_hybrid(const model_config *c, const llama_variant *v) {
    module *m = module_new("model", "model");
    if (!m) return NULL;
    int h = emit_embed(m, "model.embed_tokens.weight", c->vocab, c->hidden);
    for (int l = 0; l < c->n_layers; l++) h = emit_call(m, decoder_layer(c, v, l), &h, 1, "hidden");
    h = emit_rms_norm_offset(m, emit_logit_rows(m, h), "model.norm.weight", v->norm_offset, c->rms_eps, 0, "normed");
    module_output(m, emit_lm_head(m, c, h));
    return m;
}

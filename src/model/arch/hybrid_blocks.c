/* Hybrid models' recurrent mixers, which the Llama family's layer takes where the config's
 * layer types say (model_config.mixer, llama_blocks.c's layer_mixer): Gated DeltaNet (Qwen3.5,
 * Qwen3.5-MoE; Qwen3-Next's with its projections fused per key head) and Mamba-2; and Granite
 * 4.0-H's own layer, Mamba-2 or attention without RoPE, then its experts beside a shared MLP;
 * and Nemotron-H's, one block a layer (Mamba-2, attention without RoPE, a squared-ReLU MLP or
 * experts), which Mamba2ForCausalLM's layers are too, all of them Mamba-2.
 * Qwen3.5's norms are zero-centred (scale 1 + w, the variant's norm_offset). Weight names are
 * Hugging Face's. */
#include <stdio.h>

#include "model/arch/arch.h"

static const char *const part_names[6] = {"q", "k", "v", "z", "b", "a"};

/* Qwen3.5's projections: q, k and v as row ranges of in_proj_qkv, then z, b and a, each a part
 * sharded by its own heads; into part[] in part_names' order. */
static void projections_apart(module *m, const model_config *c, int x, int part[6]) {
    const gdn_config *g = &c->gdn;
    int kd = g->k_heads * g->k_dim, vd = g->v_heads * g->v_dim;
    linear_desc in = {.in = c->hidden, .n_parts = 6, .style = PAR_COLUMN};
    linear_part_init(&in.parts[0], m->name, "q", kd, g->k_dim, false);
    linear_part_init(&in.parts[1], m->name, "k", kd, g->k_dim, false);
    linear_part_init(&in.parts[2], m->name, "v", vd, g->v_dim, false);
    linear_fuse_parts(&in, 3, m->name, "in_proj_qkv");
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

/* Mamba-2 `name` (transformers' GraniteMoeHybridMambaLayer, NemotronHMamba2Mixer, Mamba2Mixer:
 * the same math): in_proj's rows are z, then x, B and C (the convolution's channels, in that
 * order), then dt: five parts, z, x and dt sharded by head, B and C by group (replicated where
 * there are fewer groups than ranks, as vLLM does). The scan keeps a state per sequence; its
 * output times silu(z) is normalised per group (with one group, across the ranks the heads are
 * spread over) before the row-parallel out_proj. */
static module *mamba_module(const model_config *c, const char *name, int layer) {
    module *m = module_new("mamba", "%s", name);
    if (!m) return NULL;
    const mamba_config *mb = &c->mamba;
    int x = module_input(m, "x"), gn = mb->n_groups * mb->d_state;
    static const char *const names[5] = {"z", "xs", "B", "C", "dt"};
    const int out[5] = {mb->inner, mb->inner, gn, gn, mb->n_heads},
              head[5] = {mb->head_dim, mb->head_dim, mb->d_state, mb->d_state, 1};
    linear_desc in = {.in = c->hidden, .n_parts = 5, .style = PAR_COLUMN};
    int part[5];
    for (int i = 0; i < 5; i++) {
        linear_part_init(&in.parts[i], m->name, names[i], out[i], head[i], mb->proj_bias);
        in.parts[i].replicable = i == 2 || i == 3;
    }
    linear_fuse_parts(&in, 5, m->name, "in_proj");
    int fused = emit_linear(m, x, &in);
    for (int i = 0; i < 5; i++) part[i] = emit_split(m, fused, i, names[i]);
    recurrent_desc r = {.layer = layer,
                        .kernel = mb->conv_kernel,
                        .channels = mb->inner + 2 * gn,
                        .offsets = {0, mb->inner, mb->inner + gn},
                        .n_v_heads = mb->n_heads,
                        .v_dim = mb->head_dim,
                        .n_groups = mb->n_groups,
                        .d_state = mb->d_state,
                        .dt_min = mb->dt_min,
                        .dt_max = mb->dt_max};
    snprintf(r.weight, sizeof r.weight, "%s.conv1d.weight", m->name);
    if (mb->conv_bias) snprintf(r.bias, sizeof r.bias, "%s.conv1d.bias", m->name);
    snprintf(r.a_log, sizeof r.a_log, "%s.A_log", m->name);
    snprintf(r.dt_bias, sizeof r.dt_bias, "%s.dt_bias", m->name);
    snprintf(r.d, sizeof r.d, "%s.D", m->name);
    int scan = emit_ssm_scan(m, emit_conv1d(m, part + 1, 3, &r), part[4], &r);
    int gated = emit_glu(m, part[0], scan, &(glu_desc){GLU_SILU, 0, 0}); /* silu(z) * y, then the norm */
    char w[128];
    snprintf(w, sizeof w, "%s.norm.weight", m->name);
    int normed = mb->n_groups == 1
                     ? emit_rms_norm_across(m, gated, w, c->rms_eps, mb->inner, "normed")
                     : emit_rms_norm_wide(m, gated, w, c->rms_eps, mb->inner / mb->n_groups, mb->inner, "normed");
    linear_desc o = {.in = mb->inner, .n_parts = 1, .style = PAR_ROW};
    linear_part_init(&o.parts[0], m->name, "out_proj", c->hidden, 0, mb->proj_bias);
    module_output(m, emit_linear(m, normed, &o));
    return m;
}

/* Granite's shared MLP: input_linear holds gate's rows then up's, output_linear is down. */
static module *granite_shared_mlp(const model_config *c, int layer) {
    module *m = module_new("mlp", "model.layers.%d.shared_mlp", layer);
    if (!m) return NULL;
    int x = module_input(m, "x"), inter = c->shared_intermediate;
    linear_desc gu = {.in = c->hidden, .n_parts = 2, .style = PAR_COLUMN};
    linear_part_init(&gu.parts[0], m->name, "gate", inter, 0, false);
    linear_part_init(&gu.parts[1], m->name, "up", inter, 0, false);
    linear_fuse_parts(&gu, 2, m->name, "input_linear");
    int fused = emit_linear(m, x, &gu);
    int act = emit_glu(m, emit_split(m, fused, 0, "gate"), emit_split(m, fused, 1, "up"), &(glu_desc){GLU_SILU, 0, 0});
    linear_desc d = {.in = inter, .n_parts = 1, .style = PAR_ROW};
    linear_part_init(&d.parts[0], m->name, "output_linear", c->hidden, 0, false);
    module_output(m, emit_linear(m, act, &d));
    return m;
}

/* Granite 4.0-H's layer: its mixer, then the experts and the shared MLP side by side on the
 * same normalised input, each branch scaled by residual_multiplier. */
static module *granite_layer(const model_config *c, const llama_variant *v, int layer) {
    module *m = module_new("decoder_layer", "model.layers.%d", layer);
    if (!m) return NULL;
    int h = module_input(m, "hidden");
    h = residual_branch(m, c, v, h, "input_layernorm", layer_mixer(c, v, layer), "resid_mixer");
    char w[128];
    snprintf(w, sizeof w, "%s.post_attention_layernorm.weight", m->name);
    int n = emit_rms_norm(m, h, w, c->rms_eps, 0, "post_attention_layernorm");
    int out = emit_call(m, granite_shared_mlp(c, layer), &n, 1, "shared_mlp");
    if (c->n_experts) out = emit_add(m, emit_call(m, moe_module(c, v->moe, layer), &n, 1, "moe"), out, "ffn");
    if (c->residual_mult != 1.0f) out = emit_scale(m, out, c->residual_mult, "scaled");
    module_output(m, emit_add(m, h, out, "resid_mlp"));
    return m;
}

/* Nemotron-H's (and Mamba-2's) layer: one block, `mixer`, after its own norm: Mamba-2,
 * attention without RoPE, the MLP, or the experts beside a shared MLP. */
static module *mixer_layer(const model_config *c, const llama_variant *v, int layer) {
    module *m = module_new("decoder_layer", "model.layers.%d", layer);
    if (!m) return NULL;
    char name[sizeof m->name + 8];
    snprintf(name, sizeof name, "%s.mixer", m->name);
    module *block = c->mixer[layer] == MIXER_MAMBA2      ? mamba_module(c, name, layer)
                    : c->mixer[layer] == MIXER_ATTENTION ? attention_module(c, v, name, layer, c->hidden)
                    : c->mixer[layer] == MIXER_MOE       ? moe_module(c, v->moe, layer)
                                                         : relu2_mlp_module(c, name, c->intermediate);
    module_output(m, residual_branch(m, c, v, module_input(m, "hidden"), "norm", block, "resid"));
    return m;
}

module *recurrent_mixer(const model_config *c, const llama_variant *v, int layer) {
    char name[96];
    snprintf(name, sizeof name, "model.layers.%d.mamba", layer); /* Granite's */
    return c->mixer[layer] == MIXER_MAMBA2 ? mamba_module(c, name, layer) : gated_delta_module(c, v, layer);
}

module *build_granite_hybrid(const model_config *c, const llama_variant *v) {
    return build_decoder(c, v, granite_layer);
}

module *build_mixer_layers(const model_config *c, const llama_variant *v) { return build_decoder(c, v, mixer_layer); }

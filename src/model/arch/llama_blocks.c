/* The Llama family's layer and model: a pre-norm decoder layer over the shared attention and
 * MLP blocks (blocks.c), or MLA's, a hybrid model's recurrent mixer and the MoE block where the
 * variant and the config say, and the model around the layers, with the switches of
 * llama_variant. Weight names are Hugging Face's. */
#include <stdio.h>

#include "model/arch/arch.h"

/* Granite scales the branch, others multiply by 1 (no op). */
int residual_branch(module *m, const model_config *c, const llama_variant *v, int h, const char *norm, module *child,
                    const char *name) {
    char w[128];
    snprintf(w, sizeof w, "%s.%s.weight", m->name, norm);
    int n = emit_rms_norm_offset(m, h, w, v->norm_offset, c->rms_eps, 0, norm);
    int out = emit_call(m, child, &n, 1, child ? child->kind : norm);
    if (c->residual_mult != 1.0f) out = emit_scale(m, out, c->residual_mult, "scaled");
    return emit_add(m, h, out, name);
}

module *layer_mixer(const model_config *c, const llama_variant *v, int layer) {
    if (c->mixer[layer] != MIXER_ATTENTION) return recurrent_mixer(c, v, layer);
    char name[96];
    snprintf(name, sizeof name, "model.layers.%d.self_attn", layer);
    return v->mla ? mla_attention_module(c, v, layer) : attention_module(c, v, name, layer, c->hidden);
}

static module *decoder_layer(const model_config *c, const llama_variant *v, int layer) {
    module *m = module_new("decoder_layer", "model.layers.%d", layer);
    if (!m) return NULL;
    int h = module_input(m, "hidden");
    h = residual_branch(m, c, v, h, "input_layernorm", layer_mixer(c, v, layer), "resid_attn");
    /* MoE models keep dense MLPs in their mlp_only_layers and between sparse steps */
    bool sparse = v->moe && c->n_experts && !c->mlp_only[layer] && (layer + 1) % c->sparse_step == 0;
    char mlp[96];
    snprintf(mlp, sizeof mlp, "model.layers.%d.mlp", layer);
    h = residual_branch(m, c, v, h, "post_attention_layernorm",
                        sparse ? moe_module(c, v->moe, layer) : mlp_module(c, v, mlp, c->intermediate), "resid_mlp");
    module_output(m, h);
    return m;
}

module *build_decoder(const model_config *c, const llama_variant *v, layer_builder layer) {
    module *m = module_new("model", "model");
    if (!m) return NULL;
    const char *embed = v->embed ? v->embed : "model.embed_tokens.weight";
    int h = emit_embed(m, embed, c->vocab, c->hidden, c->embedding_mult, -1);
    for (int l = 0; l < c->n_layers; l++) h = emit_call(m, layer(c, v, l), &h, 1, "hidden");
    h = emit_rms_norm_offset(m, emit_logit_rows(m, h), v->final_norm ? v->final_norm : "model.norm.weight",
                             v->norm_offset, c->rms_eps, 0, "normed");
    int logits = emit_lm_head(m, c, h, embed);
    if (c->logits_scale != 1.0f) logits = emit_scale(m, logits, 1.0f / c->logits_scale, "logits_scaled");
    module_output(m, logits);
    return m;
}

module *build_llama_family(const model_config *c, const llama_variant *v) { return build_decoder(c, v, decoder_layer); }

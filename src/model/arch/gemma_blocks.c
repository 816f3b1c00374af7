/* Gemma 2 and Gemma 3 (text): the Llama family's attention and MLP modules (llama_blocks.c) with
 * Gemma's switches from the config (GeGLU, scores scaled by query_pre_attn_scalar and, on
 * Gemma 2, soft-capped; sliding and global layers, Gemma 3's with their own RoPE bases and
 * per-head q/k norms), in Gemma's layer: a norm before and after both attention and MLP, each
 * scaling by 1 + w. The embedding is scaled by sqrt(hidden), and Gemma 2 soft-caps the logits. */
#include <math.h>
#include <stdio.h>

#include "model/arch/arch.h"

static int norm(module *m, const llama_variant *v, const model_config *c, int h, const char *prefix,
                const char *which) {
    char w[128];
    snprintf(w, sizeof w, "%s.%s.weight", prefix, which);
    return emit_rms_norm_offset(m, h, w, v->norm_offset, c->rms_eps, 0, which);
}

/* h + post_norm(child(pre_norm(h))) */
static int sandwich(module *m, const llama_variant *v, const model_config *c, int h, const char *pre, const char *post,
                    module *child, const char *name) {
    int n = norm(m, v, c, h, m->name, pre);
    int out = emit_call(m, child, &n, 1, child ? child->kind : pre);
    return emit_add(m, h, norm(m, v, c, out, m->name, post), name);
}

static module *decoder_layer(const model_config *c, const llama_variant *v, int layer) {
    module *m = module_new("decoder_layer", "model.layers.%d", layer);
    if (!m) return NULL;
    int h = module_input(m, "hidden");
    char name[96];
    snprintf(name, sizeof name, "model.layers.%d.self_attn", layer);
    h = sandwich(m, v, c, h, "input_layernorm", "post_attention_layernorm",
                 attention_module(c, v, name, layer, c->hidden), "resid_attn");
    snprintf(name, sizeof name, "model.layers.%d.mlp", layer);
    h = sandwich(m, v, c, h, "pre_feedforward_layernorm", "post_feedforward_layernorm",
                 mlp_module(c, v, name, c->intermediate), "resid_mlp");
    module_output(m, h);
    return m;
}

module *build_gemma(const model_config *c, const llama_variant *v) {
    module *m = module_new("model", "model");
    if (!m) return NULL;
    /* transformers' fp32 hidden**0.5; a vision-language model's image tokens unscaled */
    int h = emit_embed(m, "model.embed_tokens.weight", c->vocab, c->hidden, (float)sqrt((double)c->hidden),
                       c->vision.kind ? c->vision.image_token : -1);
    for (int l = 0; l < c->n_layers; l++) h = emit_call(m, decoder_layer(c, v, l), &h, 1, "hidden");
    h = norm(m, v, c, emit_logit_rows(m, h), "model", "norm");
    int logits = emit_lm_head(m, c, h, "model.embed_tokens.weight");
    if (c->final_softcap) logits = emit_softcap(m, logits, c->final_softcap, "logits_capped");
    module_output(m, logits);
    return m;
}

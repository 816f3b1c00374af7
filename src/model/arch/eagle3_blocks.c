/* The Eagle3 speculative draft (model/config.h's eagle3_config) as a module tree: one Llama
 * decoder layer whose attention reads the token's normalised embedding beside the normalised
 * hidden state it continues, then the final norm and the draft's own LM head. The hidden state
 * enters as rows beside the ids (OP_INPUT_ROWS): the speculator gives fc of the target's states,
 * or the draft's own last pre-norm state. Weight names are the checkpoint's: EAGLE's
 * "midlayer.*" or speculators' "layers.0.*", with "embed_tokens", "norm", "lm_head" at the top
 * (runtime/model.c points the embedding at the target's when the draft has none). */
#include <stdio.h>

#include "model/arch/arch.h"

static module *eagle3_layer(const model_config *c) {
    const eagle3_config *e = &c->eagle3;
    module *m = module_new("decoder_layer", "%s", e->layer);
    if (!m) return NULL;
    int embeds = module_input(m, "embeds"), h = module_input(m, "hidden");
    char w[128], name[128];
    snprintf(w, sizeof w, "%s.input_layernorm.weight", e->layer);
    int en = emit_rms_norm(m, embeds, w, c->rms_eps, 0, "embeds_normed");
    snprintf(w, sizeof w, "%s.hidden_norm.weight", e->layer);
    int hn = emit_rms_norm(m, h, w, c->rms_eps, 0, "hidden_normed");
    int x = emit_concat(m, en, hn, "x");
    llama_variant v = {.qk_norm = e->qk_norm};
    snprintf(name, sizeof name, "%s.self_attn", e->layer);
    int attn = emit_call(m, attention_module(c, &v, name, 0, 2 * c->hidden), &x, 1, "attention");
    int r = emit_add(m, e->norm_before_residual ? hn : h, attn, "resid_attn");
    snprintf(w, sizeof w, "%s.post_attention_layernorm.weight", e->layer);
    int p = emit_rms_norm(m, r, w, c->rms_eps, 0, "post_attention_layernorm");
    snprintf(name, sizeof name, "%s.mlp", e->layer);
    int mlp = emit_call(m, mlp_module(c, NULL, name, c->intermediate), &p, 1, "mlp");
    module_output(m, emit_add(m, r, mlp, "resid_mlp"));
    return m;
}

module *build_eagle3(const model_config *c) {
    module *m = module_new("model", "model");
    if (!m) return NULL;
    int in[2] = {emit_embed(m, "embed_tokens.weight", c->vocab, c->hidden, 1.0f, -1),
                 emit_input_rows(m, c->hidden, "hidden_in")};
    int h = emit_call(m, eagle3_layer(c), in, 2, "hidden");
    h = emit_rms_norm(m, emit_logit_rows(m, h), "norm.weight", c->rms_eps, 0, "normed");
    /* whole on every rank: its draft vocabulary is not the embedding's, whose split the
     * vocabulary-parallel head would share, and it is a few MiB */
    linear_desc head = {.in = c->hidden, .n_parts = 1, .style = PAR_REPLICATED};
    snprintf(head.parts[0].weight, sizeof head.parts[0].weight, "lm_head.weight");
    head.parts[0].out = c->eagle3.draft_vocab;
    module_output(m, emit_linear(m, h, &head));
    return m;
}

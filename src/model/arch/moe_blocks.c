/* Mixture-of-experts blocks: a router (a replicated linear, so every rank routes every token
 * the same way), the routed experts as one OP_MOE, and the shared experts beside them (Qwen2-
 * MoE's gated by a sigmoid of one more replicated linear, DeepSeek's added as they are). The
 * module's output is the sum of partial sums under TP, which is what makes it a sequence-
 * parallel region like a dense MLP. */
#include <stdio.h>
#include <string.h>

#include "model/arch/arch.h"

/* bias: the tensor's name, or NULL for none */
static int replicated_linear(module *m, int x, const char *weight, const char *bias, int in, int out) {
    linear_desc l = {.in = in, .n_parts = 1, .style = PAR_REPLICATED};
    snprintf(l.parts[0].weight, sizeof l.parts[0].weight, "%s", weight);
    if (bias) snprintf(l.parts[0].bias, sizeof l.parts[0].bias, "%s", bias);
    l.parts[0].out = out;
    return emit_linear(m, x, &l);
}

/* The router as a module of its own (GraniteMoE's external routing): x -> logits. */
static module *router_module(const model_config *c, const char *name) {
    module *r = module_new("router", "%s", name);
    if (!r) return NULL;
    int x = module_input(r, "x");
    char w[128];
    snprintf(w, sizeof w, "%s.layer.weight", r->name);
    module_output(r, replicated_linear(r, x, w, NULL, c->hidden, c->n_experts));
    return r;
}

void moe_stacked_name(char *pattern) {
    char *at = strstr(pattern, "%d.");
    if (at) memmove(at, at + 3, strlen(at + 3) + 1);
}

void moe_bias_name(char *out, size_t cap, const char *weight) {
    size_t n = strlen(weight);
    if (n > 7 && !strcmp(weight + n - 7, ".weight")) snprintf(out, cap, "%.*s.bias", (int)(n - 7), weight);
    else snprintf(out, cap, "%s_bias", weight);
}

module *moe_module(const model_config *c, const moe_layout *l, int layer) {
    l = moe_layout_of_file(l, c->experts_stacked);
    module *m = module_new("moe", "model.layers.%d.%s", layer, l->module);
    if (!m) return NULL;
    int x = module_input(m, "x");
    char name[128];
    char bias[128];
    snprintf(name, sizeof name, "%s.%s", m->name, l->router);
    if (l->router_bias) snprintf(bias, sizeof bias, "%s.%s", m->name, l->router_bias);
    int logits = l->external_router
                     ? emit_call(m, router_module(c, name), &x, 1, "router_logits")
                     : replicated_linear(m, x, name, l->router_bias ? bias : NULL, c->hidden, c->n_experts);
    moe_desc d = {.hidden = c->hidden,
                  .inter = c->moe_intermediate,
                  .n_experts = c->n_experts,
                  .top_k = c->top_k,
                  .routing = l->routing,
                  .norm_topk = c->norm_topk || l->always_norm_topk,
                  .stacked = l->stacked,
                  .scale = 1};
    if (l->gate) snprintf(d.gate, sizeof d.gate, "%s.%s", m->name, l->gate);
    snprintf(d.up, sizeof d.up, "%s.%s", m->name, l->stacked ? l->gate : l->up);
    snprintf(d.down, sizeof d.down, "%s.%s", m->name, l->down);
    d.stacked_each = c->experts_stacked && !l->stacked;
    if (d.stacked_each) {
        moe_stacked_name(d.gate);
        moe_stacked_name(d.up);
        moe_stacked_name(d.down);
    }
    d.interleaved = l->interleaved;
    if (l->expert_bias) {
        moe_bias_name(d.gate_up_bias, sizeof d.gate_up_bias, d.gate);
        if (d.stacked_each) moe_bias_name(d.up_bias, sizeof d.up_bias, d.up);
        moe_bias_name(d.down_bias, sizeof d.down_bias, d.down);
    }
    if (c->swiglu_limit > 0) d.act = (glu_desc){GLU_SILU_CLAMPED, c->swiglu_limit, c->swiglu_alpha};
    if (l->relu2) d.act = (glu_desc){GLU_RELU2, 0, 0};
    if (l->fused_gate_up) {
        snprintf(d.fused_gate_up, sizeof d.fused_gate_up, "%s.%s", m->name, l->fused_gate_up);
        snprintf(d.fused_down, sizeof d.fused_down, "%s.%s", m->name, l->fused_down);
    }
    if (l->bias) { /* DeepSeek's routing, as its config describes it; ERNIE's bias always */
        d.sigmoid = c->sigmoid_scores;
        d.scale = c->routed_scale;
        if (c->topk_method != TOPK_GREEDY) d.n_group = c->n_group, d.topk_group = c->topk_group;
        d.group_top2_sum = c->topk_method == TOPK_NOAUX_TC;
        if (c->topk_method == TOPK_NOAUX_TC || l->bias_always)
            snprintf(d.bias, sizeof d.bias, "%s.%s", m->name, l->bias);
        d.bias_row = l->bias_row;
    }
    int out = emit_moe(m, x, logits, &d);
    if (l->shared && c->shared_intermediate) { /* partial sums both: they meet before the one reduction */
        snprintf(name, sizeof name, "%s.%s", m->name, l->shared);
        module *mlp = l->relu2 ? relu2_mlp_module(c, name, c->shared_intermediate)
                               : mlp_module(c, NULL, name, c->shared_intermediate);
        int shared = emit_call(m, mlp, &x, 1, "shared");
        if (l->shared_gated) {
            snprintf(name, sizeof name, "%s.shared_expert_gate.weight", m->name);
            shared = emit_sigmoid_gate(m, shared, replicated_linear(m, x, name, NULL, c->hidden, 1), "shared_gated");
        }
        out = emit_add(m, out, shared, "moe_out");
    }
    module_output(m, out);
    return m;
}

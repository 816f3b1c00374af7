/* Mixture-of-experts blocks: a router (a replicated linear, so every rank routes every token
 * the same way), the routed experts as one OP_MOE, and Qwen2-MoE's shared expert, gated by a
 * sigmoid of one more replicated linear. The module's output is the sum of partial sums under
 * TP, which is what makes it a sequence-parallel region like a dense MLP. */
#include <stdio.h>

#include "model/arch/arch.h"

static int replicated_linear(module *m, int x, const char *weight, int in, int out) {
    linear_desc l = {.in = in, .n_parts = 1, .style = PAR_REPLICATED};
    snprintf(l.parts[0].weight, sizeof l.parts[0].weight, "%s", weight);
    l.parts[0].out = out;
    return emit_linear(m, x, &l);
}

/* The router as a module of its own (GraniteMoE's external routing): x -> logits. */
static module *router_module(const model_config *c, const char *name) {
    module *r = module_new("router", "%s", name);
    int x = module_input(r, "x");
    char w[128];
    snprintf(w, sizeof w, "%s.layer.weight", r->name);
    module_output(r, replicated_linear(r, x, w, c->hidden, c->n_experts));
    return r;
}

module *moe_module(const model_config *c, const moe_layout *l, int layer) {
    module *m = module_new("moe", "model.layers.%d.%s", layer, l->module);
    int x = module_input(m, "x");
    char name[128];
    snprintf(name, sizeof name, "%s.%s", m->name, l->router);
    int logits = l->external_router ? emit_call(m, router_module(c, name), &x, 1, "router_logits")
                                    : replicated_linear(m, x, name, c->hidden, c->n_experts);
    moe_desc d = {.hidden = c->hidden, .inter = c->moe_intermediate, .n_experts = c->n_experts, .top_k = c->top_k,
                  .routing = l->routing, .norm_topk = c->norm_topk || l->always_norm_topk, .stacked = l->stacked};
    snprintf(d.gate, sizeof d.gate, "%s.%s", m->name, l->gate);
    snprintf(d.up, sizeof d.up, "%s.%s", m->name, l->stacked ? l->gate : l->up);
    snprintf(d.down, sizeof d.down, "%s.%s", m->name, l->down);
    int out = emit_moe(m, x, logits, &d);
    if (l->shared_expert && c->shared_intermediate) {
        snprintf(name, sizeof name, "%s.shared_expert", m->name);
        int shared = emit_call(m, mlp_module(c, name, c->shared_intermediate), &x, 1, "shared");
        snprintf(name, sizeof name, "%s.shared_expert_gate.weight", m->name);
        int gate = replicated_linear(m, x, name, c->hidden, 1);
        out = emit_add(m, out, emit_sigmoid_gate(m, shared, gate, "shared_gated"), "moe_out");
    }
    module_output(m, out);
    return m;
}

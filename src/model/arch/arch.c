/* The architecture table: config.json "architectures" name -> builder. */
#include "model/arch/arch.h"

#include <string.h>

#include "util/err.h"

#define PER_EXPERT_PROJ                                                                                                \
    .gate = "experts.%d.gate_proj.weight", .up = "experts.%d.up_proj.weight", .down = "experts.%d.down_proj.weight"

static const moe_layout olmoe_moe = {
    .module = "mlp", .router = "gate.weight", PER_EXPERT_PROJ, .routing = ROUTE_SOFTMAX_TOPK};
static const moe_layout qwen_moe = {.module = "mlp",
                                    .router = "gate.weight",
                                    PER_EXPERT_PROJ,
                                    .routing = ROUTE_SOFTMAX_TOPK,
                                    .shared = "shared_expert",
                                    .shared_gated = true};
static const moe_layout mixtral_moe = {.module = "block_sparse_moe",
                                       .router = "gate.weight",
                                       .gate = "experts.%d.w1.weight",
                                       .up = "experts.%d.w3.weight",
                                       .down = "experts.%d.w2.weight",
                                       .routing = ROUTE_SOFTMAX_TOPK,
                                       .always_norm_topk = true};
/* GraniteMoE: experts stacked, gate and up in one [E, 2I, H] tensor (gate's rows first); a GGUF
 * file (llama.cpp's converter) holds gate and up apart */
static const moe_layout granite_gguf_moe = {.module = "block_sparse_moe",
                                            .router = "router",
                                            .external_router = true,
                                            PER_EXPERT_PROJ,
                                            .routing = ROUTE_TOPK_SOFTMAX};
static const moe_layout granite_moe = {.module = "block_sparse_moe",
                                       .router = "router",
                                       .external_router = true,
                                       .stacked = true,
                                       .gate = "input_linear.weight",
                                       .down = "output_linear.weight",
                                       .routing = ROUTE_TOPK_SOFTMAX,
                                       .stacked_each = &granite_gguf_moe};
/* Qwen3.5-MoE: Qwen2-MoE's layout, the top k always renormalised (its config has no switch) */
static const moe_layout qwen3_5_moe = {.module = "mlp",
                                       .router = "gate.weight",
                                       PER_EXPERT_PROJ,
                                       .fused_gate_up = "experts.gate_up_proj",
                                       .fused_down = "experts.down_proj",
                                       .routing = ROUTE_SOFTMAX_TOPK,
                                       .always_norm_topk = true,
                                       .shared = "shared_expert",
                                       .shared_gated = true};
/* DeepSeek: checkpoints hold experts one by one; transformers' in-memory fused layout loads too */
static const moe_layout deepseek_moe = {.module = "mlp",
                                        .router = "gate.weight",
                                        PER_EXPERT_PROJ,
                                        .fused_gate_up = "experts.gate_up_proj",
                                        .fused_down = "experts.down_proj",
                                        .routing = ROUTE_SOFTMAX_TOPK,
                                        .shared = "shared_experts",
                                        .bias = "gate.e_score_correction_bias"};

/* ERNIE 4.5: softmax scores, the experts chosen by their score plus moe_statics' correction
 * bias, weighted by their scores renormalised */
static const moe_layout ernie_moe = {.module = "mlp",
                                     .router = "gate.weight",
                                     PER_EXPERT_PROJ,
                                     .fused_gate_up = "experts.gate_up_proj",
                                     .fused_down = "experts.down_proj",
                                     .routing = ROUTE_SOFTMAX_TOPK,
                                     .always_norm_topk = true,
                                     .shared = "shared_experts",
                                     .bias = "moe_statics.e_score_correction_bias",
                                     .bias_always = true,
                                     .bias_row = true};

/* Nemotron-H: each expert up_proj and down_proj without a gate (squared ReLU), as the shared
 * experts; DeepSeek-V3's routing (sigmoid scores, the correction bias, groups) */
static const moe_layout nemotron_moe = {.module = "mixer",
                                        .router = "gate.weight",
                                        .up = "experts.%d.up_proj.weight",
                                        .down = "experts.%d.down_proj.weight",
                                        .routing = ROUTE_SOFTMAX_TOPK,
                                        .shared = "shared_experts",
                                        .bias = "gate.e_score_correction_bias",
                                        .relu2 = true};

/* GPT-OSS: the top k router logits (with the router's bias) softmaxed, experts stacked as
 * MXFP4 checkpoints store them, gate and up rows alternating, with biases, clamped SwiGLU; a GGUF
 * file (llama.cpp's converter) holds gate and up apart, each with its bias */
static const moe_layout gpt_oss_gguf_moe = {.module = "mlp",
                                            .router = "router.weight",
                                            PER_EXPERT_PROJ,
                                            .routing = ROUTE_TOPK_SOFTMAX,
                                            .router_bias = "router.bias",
                                            .expert_bias = true};
static const moe_layout gpt_oss_moe = {.module = "mlp",
                                       .router = "router.weight",
                                       .stacked = true,
                                       .gate = "experts.gate_up_proj",
                                       .down = "experts.down_proj",
                                       .routing = ROUTE_TOPK_SOFTMAX,
                                       .router_bias = "router.bias",
                                       .interleaved = true,
                                       .expert_bias = true,
                                       .stacked_each = &gpt_oss_gguf_moe};

static const struct {
    const char *name;
    llama_variant variant;
    module *(*build)(const model_config *c, const llama_variant *v);
} llama_like[] = {
    {"LlamaForCausalLM", {0}, build_llama_family},
    {"MistralForCausalLM", {.sliding_window = true}, build_llama_family},
    {"Qwen2ForCausalLM", {.qkv_bias = true}, build_llama_family},
    {"Qwen3ForCausalLM", {.qk_norm = true}, build_llama_family},
    {"GraniteForCausalLM", {0}, build_llama_family}, /* multipliers come from the config */
    {"OlmoeForCausalLM", {.qk_norm_whole = true, .moe = &olmoe_moe}, build_llama_family},
    {"MixtralForCausalLM", {.sliding_window = true, .moe = &mixtral_moe}, build_llama_family},
    {"Qwen2MoeForCausalLM", {.qkv_bias = true, .moe = &qwen_moe}, build_llama_family},
    {"Qwen3MoeForCausalLM", {.qk_norm = true, .moe = &qwen_moe}, build_llama_family},
    {"GraniteMoeForCausalLM", {.moe = &granite_moe}, build_llama_family},
    {"DeepseekV2ForCausalLM", {.mla = true, .interleaved = true, .moe = &deepseek_moe}, build_llama_family},
    {"DeepseekV3ForCausalLM", {.mla = true, .moe = &deepseek_moe}, build_llama_family},
    {"Ernie4_5ForCausalLM", {.interleaved = true}, build_llama_family},
    {"Ernie4_5_MoeForCausalLM", {.interleaved = true, .moe = &ernie_moe}, build_llama_family},
    {"Phi3ForCausalLM",
     {.sliding_window = true, .fused_qkv = "qkv_proj", .fused_gate_up = "gate_up_proj"},
     build_llama_family},
    {"GptOssForCausalLM", {.attn_sinks = true, .moe = &gpt_oss_moe}, build_llama_family},
    {"Gemma2ForCausalLM", {.norm_offset = 1}, build_gemma},
    {"Gemma3ForCausalLM", {.qk_norm = true, .norm_offset = 1}, build_gemma},
    {"Qwen3_5ForCausalLM", {.qk_norm = true, .norm_offset = 1, .output_gate = true}, build_llama_family},
    {"Qwen3_5MoeForCausalLM",
     {.qk_norm = true, .norm_offset = 1, .output_gate = true, .moe = &qwen3_5_moe},
     build_llama_family},
    {"GraniteMoeHybridForCausalLM", {.moe = &granite_moe}, build_granite_hybrid},
    {"NemotronHForCausalLM",
     {.embed = "model.embeddings.weight", .final_norm = "model.norm_f.weight", .moe = &nemotron_moe},
     build_mixer_layers},
    {"Mamba2ForCausalLM",
     {.embed = "model.embeddings.weight", .final_norm = "model.norm_f.weight"},
     build_mixer_layers},
    {"Qwen3NextForCausalLM",
     {.qk_norm = true, .norm_offset = 1, .output_gate = true, .gdn_by_key_head = true, .moe = &qwen_moe},
     build_llama_family},
};

bool arch_supported(const char *name) {
    for (size_t i = 0; i < sizeof llama_like / sizeof llama_like[0]; i++)
        if (!strcmp(name, llama_like[i].name)) return true;
    return false;
}

const moe_layout *arch_moe_layout(const char *name) {
    for (size_t i = 0; i < sizeof llama_like / sizeof llama_like[0]; i++)
        if (!strcmp(name, llama_like[i].name)) return llama_like[i].variant.moe;
    return NULL;
}

/* A pooling model's tree: the top module ends at the final norm of the logit rows, its head cut
 * off (the model's output is the normed hidden state). */
static int cut_head(module *root, loom_err *err) {
    for (int i = 1; i < root->n_ops; i++) {
        const op *o = &root->ops[i];
        if (o->kind != OP_RMS_NORM) continue;
        for (int k = 0; k < i; k++)
            if (root->ops[k].kind == OP_LOGIT_ROWS && root->ops[k].out[0] == o->in[0])
                return module_end_at(root, o->out[0]);
    }
    return loom_errf(err, "the model has no final norm after its last layer to pool");
}

module *arch_build(const model_config *c, loom_err *err) {
    if (c->eagle3.on) {
        module *root = build_eagle3(c);
        if (!module_check(root, err)) return root;
        module_free(root);
        loom_err_prefix(err, "building the Eagle3 draft's module tree");
        return NULL;
    }
    for (size_t i = 0; i < sizeof llama_like / sizeof llama_like[0]; i++)
        if (!strcmp(c->arch, llama_like[i].name)) {
            const llama_variant *v = &llama_like[i].variant;
            module *root =
                llama_like[i].build ? llama_like[i].build(c, v) : build_llama_family(c, v); /* checked once, here */
            if (module_check(root, err)) {
                module_free(root);
                loom_err_prefix(err, "building the module tree");
                return NULL;
            }
            if (c->pooled && cut_head(root, err)) {
                module_free(root);
                return NULL;
            }
            return root;
        }
    char list[512] = "";
    for (size_t i = 0; i < sizeof llama_like / sizeof llama_like[0]; i++)
        strcat(strcat(list, i ? ", " : ""), llama_like[i].name);
    loom_errf(err, "config.json: unsupported architecture '%s' (supported: %s)", c->arch, list);
    return NULL;
}

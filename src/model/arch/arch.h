/* Architecture builders: each turns a config into the module tree of its decoder model.
 * Llama-family architectures share the blocks in llama_blocks.c and differ only in a few
 * switches, so adding one is an entry in the table of arch.c. */
#ifndef LOOM_MODEL_ARCH_H
#define LOOM_MODEL_ARCH_H
#include "model/config.h"
#include "plan/module.h"

/* Options that distinguish Llama-like architectures. */
typedef struct llama_variant {
    bool qkv_bias;      /* Qwen2: q/k/v projections have biases */
    bool qk_norm;       /* Qwen3: per-head RMSNorm of q and k before RoPE */
    bool sliding_window;/* Mistral: honour config sliding_window */
} llama_variant;

module *build_llama_family(const model_config *c, const llama_variant *v);

/* Returns the model tree for c->arch, or NULL with err naming the architecture. */
module *arch_build(const model_config *c, loom_err *err);

#endif

/* GGUF architectures (model/gguf_arch.c): what each `general.architecture` llama.cpp writes is
 * to loom, shared by the config writer (gguf_config.c) and the tensor names (gguf_model.c). */
#ifndef LOOM_MODEL_GGUF_ARCH_H
#define LOOM_MODEL_GGUF_ARCH_H
#include <stdbool.h>

#include "model/gguf.h"

/* RoPE factor tensors, read into the config (gguf_config.c), not weights */
#define ROPE_FREQS "rope_freqs.weight"
#define ROPE_SHORT "rope_factors_short.weight"
#define ROPE_LONG  "rope_factors_long.weight"

typedef struct gguf_arch {
    const char *name; /* general.architecture */
    const char *hf;   /* its transformers class */
    /* llama.cpp's converter reorders q and k rows of each head into Meta's layout, rotary pairs
     * adjacent; the file is run with adjacent pairs instead of copying rows back */
    bool meta_rope;
    bool gemma; /* norms stored as 1 + w, the FFN's norms named as Gemma's */
    /* a mixture of experts (the row chosen where {arch}.expert_count is present), whose top k
     * weights llama.cpp's graph renormalises or not by architecture (the file carries no
     * norm_topk_prob; transformers' loader sets Qwen3-MoE's) */
    bool moe, norm_topk;
    /* DeepSeek-V2/V3: latent attention and DeepSeek's routing (put_deepseek), written for
     * DeepseekV3's config class, which states every choice V2 makes as well */
    bool deepseek;
    /* Granite: the embedding, residual, attention and logit multipliers (their _scale keys) */
    bool multipliers;
    /* ERNIE 4.5's MoE: dense leading layers, experts every interleave_moe_layer_step layers, and
     * shared experts by count (put_ernie_moe) */
    bool ernie_moe;
} gguf_arch;

/* The file's row of the table (of an architecture's rows, the one with experts where the file
 * counts them), or NULL with err naming the architecture, one loom does not run. */
const gguf_arch *gguf_arch_of(const gguf_file *f, loom_err *err);

#endif

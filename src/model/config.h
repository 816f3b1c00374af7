/* Model hyper-parameters read from a Hugging Face config.json (the fields the decoder
 * architectures loom knows need; see arch/ for which architectures use which). */
#ifndef LOOM_MODEL_CONFIG_H
#define LOOM_MODEL_CONFIG_H
#include "loom.h"
#include "quant/format.h"

enum rope_kind { ROPE_DEFAULT, ROPE_LLAMA3, ROPE_LINEAR };

typedef struct model_config {
    char arch[64]; /* architectures[0], e.g. "LlamaForCausalLM" */
    int hidden, intermediate, n_layers, n_heads, n_kv_heads, head_dim, vocab, max_pos;
    float rms_eps;
    /* RoPE */
    float rope_theta;
    enum rope_kind rope_kind;
    float rope_factor, rope_low_freq, rope_high_freq;
    int rope_orig_max_pos;
    bool tie_embeddings, attention_bias, mlp_bias;
    int sliding_window; /* 0: full causal attention */
    /* Granite multipliers; 1 (and attention 1/sqrt(head_dim)) for the others */
    float embedding_mult, attention_mult, residual_mult, logits_scale;
    /* mixture of experts; n_experts 0: dense */
    int n_experts, top_k, moe_intermediate, shared_intermediate, sparse_step;
    bool norm_topk;         /* renormalise the top-k routing weights */
    unsigned char mlp_only[256]; /* per layer: 1 = dense MLP in an MoE model (mlp_only_layers) */
    int bos_id;
    int eos_ids[8];
    int n_eos;
    char dtype[16]; /* torch_dtype / dtype as written, "" if absent */
    quant_config quant; /* quantization_config (format QF_NONE if absent) */
} model_config;

/* Parses config.json text. name is used in error messages (usually the file path). */
int config_parse(model_config *c, const char *json, size_t len, const char *name, loom_err *err);
int config_load_file(model_config *c, const char *path, loom_err *err);

#endif

/* Model hyper-parameters read from a Hugging Face config.json (the fields the decoder
 * architectures loom knows need; see arch/ for which architectures use which). */
#ifndef LOOM_MODEL_CONFIG_H
#define LOOM_MODEL_CONFIG_H
#include "loom.h"
#include "model/quant_config.h"

/* The widest head (and rotary part) config_parse accepts: RoPE's per-row scratch is sized by it. */
#define CONFIG_MAX_HEAD_DIM 1024

enum rope_kind { ROPE_DEFAULT, ROPE_LLAMA3, ROPE_LINEAR, ROPE_YARN, ROPE_LONGROPE };

/* How a mixture of experts picks its experts (DeepSeek's topk_method). */
enum topk_method { TOPK_GREEDY, TOPK_GROUP_LIMITED, TOPK_NOAUX_TC };

/* Multi-head latent attention (DeepSeek-V2/V3); kv_lora_rank 0: the model has none. */
typedef struct mla_config {
    int q_lora_rank; /* 0: a plain q_proj */
    int kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
    bool rope_interleave; /* rotary pairs are (2i, 2i+1), not (i, i + d/2) */
} mla_config;

/* An Eagle3 speculative draft (EAGLE's LlamaForCausalLMEagle3 or a speculators "eagle3"
 * folder): one decoder layer over cat(input_layernorm(embed(token)), hidden_norm(h)), where h
 * is fc(the target's hidden states entering aux_layers) for a token after the target's, or
 * the draft's own last pre-norm state for the next; its LM head covers draft_vocab tokens,
 * draft id i being target id i + d2t[i]. */
typedef struct eagle3_config {
    bool on;
    int draft_vocab;
    bool norm_before_residual; /* the residual is hidden_norm(h), not h */
    int target_hidden;         /* the target's hidden size (fc takes n_aux of them) */
    int n_aux, aux_layers[3];  /* decoder layers of the target whose input hidden states fc
                                  fuses (n_aux 0: the default 2, L/2, L-3 of the target) */
    char layer[16];            /* the layer's weight prefix: "midlayer" (EAGLE) or "layers.0" */
    int spec_tokens;           /* speculators_config's first proposal method's speculative_tokens
                                  (0: none), vLLM's default for num_speculative_tokens */
    bool qk_norm;              /* a Qwen3 layer (speculators' transformer_layer_config) */
} eagle3_config;

/* A decoder layer's token mixer: attention, or a recurrent one (hybrid models); Nemotron-H's
 * layers may hold no mixer but an MLP (or experts, which loom refuses) in its place. */
enum mixer_kind { MIXER_ATTENTION, MIXER_GATED_DELTA, MIXER_MAMBA2, MIXER_MLP, MIXER_MOE };
/* Whether a layer of this kind keeps a state per sequence. */
static inline bool mixer_is_recurrent(enum mixer_kind k) { return k == MIXER_GATED_DELTA || k == MIXER_MAMBA2; }
/* Gated DeltaNet linear attention (Qwen3.5, Qwen3-Next): value heads per key head, a causal
 * convolution of conv_kernel taps over q, k and v. */
typedef struct gdn_config {
    int k_heads, v_heads, k_dim, v_dim, conv_kernel;
} gdn_config;
/* Mamba-2 (Granite 4.0-H, Nemotron-H, Mamba2ForCausalLM): n_heads heads of head_dim (inner = their product), B and C in
 * n_groups groups of d_state, a causal convolution of conv_kernel taps over x, B and C; the
 * time step softplus(dt + dt_bias) clamped to [dt_min, dt_max]. */
typedef struct mamba_config {
    int n_heads, head_dim, inner, n_groups, d_state, conv_kernel;
    bool conv_bias, proj_bias;
    float dt_min, dt_max;
} mamba_config;

/* A vision-language model's vision tower and projector (Gemma 3's: SigLIP, then an average pool
 * to tokens_per_image tokens, a soft-embedding norm and a projection to the text model's
 * width); kind VISION_NONE: a text model. config_vision.c reads it. */
enum vision_kind { VISION_NONE, VISION_GEMMA3 };
typedef struct vision_config {
    enum vision_kind kind;
    int hidden, intermediate, n_layers, n_heads, image_size, patch_size, channels;
    float eps;                /* the layer norms' (and the soft-embedding norm's) */
    int tokens_per_image;     /* mm_tokens_per_image: a square */
    int image_token;          /* the placeholder each image token of a prompt is */
    int boi_token, eoi_token; /* around an image's tokens in a prompt */
} vision_config;

typedef struct model_config {
    char arch[64]; /* architectures[0], e.g. "LlamaForCausalLM" */
    int hidden, intermediate, n_layers, n_heads, n_kv_heads, head_dim, vocab, max_pos;
    int head_vocab;   /* rows of the LM head: vocab, but an Eagle3 draft's own vocabulary; a
                       pooling model's hidden size (it has no head: pooled) */
    bool bare;        /* architectures[0] names the bare decoder ("Qwen3Model"): no LM head, an
                       embedding model; arch then holds its ...ForCausalLM family */
    bool text_of_vlm; /* the text model of a vision-language model (Qwen3_5ForConditionalGeneration):
                         arch holds its text family; the vision tower is not loaded unless vision
                         describes it */
    vision_config vision;
    bool pooled; /* the model outputs its final hidden states (after the final norm) where it
                       would output logits: an embedding model (loom_model_options.task) */
    eagle3_config eagle3;
    float rms_eps;
    /* RoPE */
    float rope_theta;
    enum rope_kind rope_kind;
    float rope_factor, rope_low_freq, rope_high_freq;
    int rope_orig_max_pos;
    /* YaRN: the ramp between beta_fast and beta_slow rotations, the factor cos and sin are
     * multiplied by, and mscale_all_dim (DeepSeek's softmax scale grows by mscale(factor, it)^2) */
    float rope_beta_fast, rope_beta_slow, rope_attention_factor, rope_mscale_all_dim;
    bool rope_truncate;
    /* the rotated features of each head: head_dim x partial_rotary_factor (Phi-4-mini's 0.75) */
    int rope_dim;
    /* longrope (Phi-3): each pair's frequency divided by its short factor, or by its long one in
     * a pass that reaches past rope_orig_max_pos positions */
    float rope_short[CONFIG_MAX_HEAD_DIM / 2], rope_long[CONFIG_MAX_HEAD_DIM / 2];
    mla_config mla;
    bool tie_embeddings, attention_bias, mlp_bias;
    /* q and k rows of each head in Meta's layout, rotary pairs adjacent: a GGUF file's Llama, as
     * llama.cpp's converter reorders it (model/gguf_arch.c) */
    bool rope_meta_layout;
    int sliding_window; /* 0: full causal attention */
    /* Gemma: the layers that attend within sliding_window (layer_types; the others attend to
     * everything), and their own RoPE base (0: the same tables as the others) */
    bool layer_windows;
    unsigned char sliding_layer[256];
    float rope_local_theta;
    bool gelu_tanh;                    /* the MLP's gate: GELU's tanh approximation (GeGLU), else SiLU (SwiGLU) */
    float attn_softcap, final_softcap; /* cap * tanh(x / cap) of the scores, the logits; 0: none */
    float swiglu_limit, swiglu_alpha;  /* GPT-OSS's clamped SwiGLU (limit 0: plain SwiGLU) */
    /* Granite multipliers; 1 (and attention 1/sqrt(head_dim)) for the others */
    float embedding_mult, attention_mult, residual_mult, logits_scale;
    /* mixture of experts; n_experts 0: dense */
    int n_experts, top_k, moe_intermediate, shared_intermediate, sparse_step;
    /* each projection's experts in one [E, out, in] tensor, named as the per-expert one without
     * its index: a GGUF file's ffn_{gate,up,down}_exps (model/gguf_config.c) */
    bool experts_stacked;
    bool norm_topk;      /* renormalise the top-k routing weights */
    bool sigmoid_scores; /* scoring_func sigmoid (DeepSeek-V3), else softmax */
    enum topk_method topk_method;
    int n_group, topk_group;
    float routed_scale;          /* routed_scaling_factor */
    unsigned char mlp_only[256]; /* per layer: 1 = dense MLP in an MoE model (mlp_only_layers) */
    /* per layer: its mixer_kind (layer_types' linear_attention: MIXER_GATED_DELTA) */
    unsigned char mixer[256];
    bool recurrent; /* some layer's mixer keeps a state per sequence */
    gdn_config gdn;
    mamba_config mamba;
    bool no_rope; /* attention sees no positions (Granite 4.0-H's position_embedding_type none) */
    int bos_id;
    int eos_ids[8];
    int n_eos;
    char dtype[16];     /* torch_dtype / dtype as written, "" if absent */
    quant_config quant; /* quantization_config (format QF_NONE if absent) */
} model_config;

/* Parses config.json text. name is used in error messages (usually the file path). */
int config_parse(model_config *c, const char *json, size_t len, const char *name, loom_err *err);
int config_load_file(model_config *c, const char *path, loom_err *err);

#endif

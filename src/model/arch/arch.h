/* Architecture builders: each turns a config into the module tree of its decoder model. The
 * blocks every family shares are in blocks.c. Llama-family architectures share its layer
 * (llama_blocks.c) and differ only in a few switches, so adding one is an entry in the table of
 * arch.c; a family whose layer differs (Gemma's) has a builder of its own around the same
 * blocks. */
#ifndef LOOM_MODEL_ARCH_H
#define LOOM_MODEL_ARCH_H
#include "graph/module.h"
#include "model/config.h"

/* How an architecture lays out its mixture-of-experts layers (names relative to the layer's
 * MoE module; expert patterns have one %d). */
typedef struct moe_layout {
    const char *module;   /* the decoder layer's child: "mlp", "block_sparse_moe" */
    const char *router;   /* router weight ("gate.weight"), or with external_router the
                               router module's name ("router", holding "layer.weight") */
    bool external_router; /* GraniteMoE: the router is a module of its own */
    bool stacked;         /* experts in two 3-D tensors: gate = [E, 2I, H], down = [E, H, I] */
    const char *gate, *up, *down;
    const char *fused_gate_up, *fused_down; /* per-expert layouts' fused alternative, if any */
    moe_routing routing;
    bool always_norm_topk; /* Mixtral renormalises the top k whatever the config says */
    const char *shared;    /* the shared experts' MLP when the config sizes one, or NULL */
    bool shared_gated;     /* Qwen2-MoE: times sigmoid(shared_expert_gate x) */
    const char *bias;      /* DeepSeek: routing from the config, with this correction bias under
                               noaux_tc (NULL: the layout's own routing) */
    bool bias_always;      /* ERNIE: the bias chooses whatever the config's topk_method */
    bool bias_row;         /* the bias is stored as [1, experts] (ERNIE's moe_statics) */
    /* GPT-OSS: the router has a bias (this name), the stacked gate tensor alternates gate and
     * up rows, and the experts have biases, <gate>_bias and <down>_bias */
    const char *router_bias;
    bool interleaved, expert_bias;
    /* the layout of a file that holds each projection's experts in one tensor
     * (model_config.experts_stacked: GGUF), where it is not this one's (GPT-OSS: gate and up
     * apart, each with its bias); NULL: the same */
    const struct moe_layout *stacked_each;
    bool relu2; /* Nemotron-H: experts and the shared MLP without a gate, down(relu(up x)^2) (gate NULL) */
} moe_layout;

/* The layout the experts of a file are read by: l's own, or its stacked_each where the file
 * stacks each projection's experts (experts_stacked). */
static inline const moe_layout *moe_layout_of_file(const moe_layout *l, bool experts_stacked) {
    return l && experts_stacked && l->stacked_each ? l->stacked_each : l;
}

/* Options that distinguish Llama-like architectures. */
typedef struct llama_variant {
    bool qkv_bias;         /* Qwen2: q/k/v projections have biases */
    bool qk_norm;          /* Qwen3: per-head RMSNorm of q and k before RoPE */
    bool qk_norm_whole;    /* OLMoE: RMSNorm of the whole q and k projections, across heads */
    bool sliding_window;   /* Mistral: honour config sliding_window */
    bool mla;              /* DeepSeek: multi-head latent attention (mla_blocks.c) */
    bool interleaved;      /* rotary pairs (2i, 2i+1): DeepSeek-V2 (V3: rope_interleave), ERNIE */
    const moe_layout *moe; /* MoE architectures: their expert layers (dense ones: NULL) */
    float norm_offset;     /* Gemma: norms scale by weight + 1 */
    bool attn_sinks;       /* GPT-OSS: a learned logit per head in each softmax's denominator (self_attn.sinks) */
    bool output_gate;      /* Qwen3.5: q_proj holds each head's query then its output gate; the
                              attention's output is scaled by sigmoid(gate) before o_proj */
    bool gdn_by_key_head;  /* Qwen3-Next: Gated DeltaNet's in_proj_qkvz and in_proj_ba hold each key
                              head's q, k, v and z (b and a) together */
    /* Phi-3: q/k/v, and gate/up, as row ranges of one tensor each (NULL: a tensor per part) */
    const char *fused_qkv, *fused_gate_up;
    /* the embedding and the final norm where not model.embed_tokens and model.norm (Nemotron-H's
     * embeddings and norm_f) */
    const char *embed, *final_norm;
} llama_variant;

/* The families' builders: Llama's (llama_blocks.c), Gemma 2 and 3's (gemma_blocks.c: the shared
 * attention and MLP in Gemma's layer), an Eagle3 speculative draft (eagle3_blocks.c). */
module *build_llama_family(const model_config *c, const llama_variant *v);
module *build_gemma(const model_config *c, const llama_variant *v);
module *build_eagle3(const model_config *c);
/* Granite 4.0-H (hybrid_blocks.c): Mamba-2 or attention by model_config.mixer, experts beside a
 * shared MLP. */
module *build_granite_hybrid(const model_config *c, const llama_variant *v);
/* Nemotron-H and Mamba-2 (hybrid_blocks.c): each layer one block by model_config.mixer. */
module *build_mixer_layers(const model_config *c, const llama_variant *v);
/* The model around its decoder layers (llama_blocks.c): the embedding, each layer `layer`
 * builds, the final norm (v's offset) and the LM head, with Granite's multipliers where the
 * config has them. */
typedef module *(*layer_builder)(const model_config *c, const llama_variant *v, int layer);
module *build_decoder(const model_config *c, const llama_variant *v, layer_builder layer);
/* Decoder layer `layer`'s token mixer: attention, MLA, or (hybrid models, by
 * model_config.mixer) the recurrent one, recurrent_mixer's (hybrid_blocks.c: Gated DeltaNet
 * or Mamba-2). */
module *layer_mixer(const model_config *c, const llama_variant *v, int layer);
module *recurrent_mixer(const model_config *c, const llama_variant *v, int layer);

/* The shared blocks (blocks.c). GQA self-attention `name` (q/k/v/o_proj) of decoder layer
 * `layer` over an input of `in` features (the hidden size, or an Eagle3 layer's two hidden
 * states side by side). */
module *attention_module(const model_config *c, const llama_variant *v, const char *name, int layer, int in);
/* The gated MLP `name` (gate_proj/up_proj/down_proj, or v's fused gate_up) of `inter`
 * features: SwiGLU, or GeGLU where the config says (Gemma). v may be NULL (shared experts). */
module *mlp_module(const model_config *c, const llama_variant *v, const char *name, int inter);
/* Nemotron-H's MLP `name` of `inter` features: up_proj, squared ReLU, down_proj, no gate. */
module *relu2_mlp_module(const model_config *c, const char *name, int inter);
/* The vocab-parallel LM head over h: lm_head.weight, or the embedding `embed` when tied. */
int emit_lm_head(module *m, const model_config *c, int h, const char *embed);
/* A linear part: weight (and bias) `proj` of module prefix, out features, sharded by heads of
 * head_dim (0: by features). */
void linear_part_init(linear_part *p, const char *prefix, const char *proj, int out, int head_dim, bool bias);
/* A fused checkpoint tensor (Phi-3's qkv_proj, Qwen3.5's in_proj_qkv, Mamba-2's in_proj): l's
 * first n parts become its row ranges, in order, each still sharded by its own heads or
 * features. */
void linear_fuse_parts(linear_desc *l, int n, const char *prefix, const char *fused);

/* Pre-norm residual branch h + residual_mult * child(norm(h)) of decoder layer m, the norm
 * scaling by weight + v's norm_offset (llama_blocks.c). */
int residual_branch(module *m, const model_config *c, const llama_variant *v, int h, const char *norm, module *child,
                    const char *name);
/* Layer `layer`'s latent attention module (mla_blocks.c) and mixture-of-experts module
 * (moe_blocks.c). */
module *mla_attention_module(const model_config *c, const llama_variant *v, int layer);
module *moe_module(const model_config *c, const moe_layout *l, int layer);

/* Returns the model tree for c->arch, or NULL with err naming the architecture. */
/* Whether name (config.json's architectures[0]) is one arch_build builds. */
bool arch_supported(const char *name);
/* The expert layout of architecture `name`, NULL for a dense one (a GGUF file's expert tensors
 * are named by it: model/gguf_model.c). */
const moe_layout *arch_moe_layout(const char *name);
/* A per-expert tensor pattern ("...experts.%d.w1.weight") into the name of the tensor stacking
 * every expert's ("...experts.w1.weight"), in place. */
void moe_stacked_name(char *pattern);
/* The bias of weight tensor `weight` into out: "<stem>.bias" for "<stem>.weight", else
 * "<name>_bias" (GPT-OSS's experts.gate_up_proj_bias). */
void moe_bias_name(char *out, size_t cap, const char *weight);
module *arch_build(const model_config *c, loom_err *err);

#endif

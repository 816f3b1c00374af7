/* The model as a tree of modules. Each module's forward is an explicit list of ops over
 * named values local to the module; OP_CALL runs a child module. There is no tracing: the op
 * list is the graph, so the planner (and later the parallelism analyses) read it directly.
 * Widths are logical (the whole model's); the planner derives each rank's share. */
#ifndef LOOM_GRAPH_MODULE_H
#define LOOM_GRAPH_MODULE_H
#include "loom.h"

typedef enum op_kind {
    OP_EMBED,        /* out[T, hidden] = table[token ids] * scalar; a vision-language model's
                       image tokens take the pass's image rows instead             */
    OP_LINEAR,       /* out = in @ W^T (+ bias), W given in parts fused along out    */
    OP_SPLIT,        /* out = view of part `part` of a fused linear's output         */
    OP_RMS_NORM,     /* out = rms_norm(in) * w, over rows or over groups of `group`  */
    OP_ROPE,         /* out = in with the rotary part of each head rotated            */
    OP_ATTENTION,    /* out = causal attention(q, k, v) through the layer's KV cache;
                       multi-head latent attention: (q, kv_c, k_pe) and kv_b_proj  */
    OP_GLU,          /* out = act(in0) * in1: SiLU (SwiGLU) or GELU-tanh (GeGLU)      */
    OP_ADD,          /* out = in0 + in1                                              */
    OP_SCALE,        /* out = in0 * scalar                                           */
    OP_LOGIT_ROWS,   /* out = the rows of in0 whose logits are wanted                */
    OP_CALL,         /* outs = child(ins)                                            */
    OP_CUSTOM,       /* out = a user's function of in0, of a declared class           */
    OP_MOE,          /* out = the routed experts' weighted sum for in0, routed by the
                       router logits in1                                           */
    OP_SIGMOID_GATE, /* out = in0 * sigmoid(in1), in1 one column per row            */
    OP_INPUT_ROWS,   /* out[T, features] = rows the batch gives beside its ids (an Eagle3
                       draft's hidden state: loom_batch.rows_in)                   */
    OP_CONCAT,       /* out = [in0 | in1], columns side by side                       */
    OP_SOFTCAP,      /* out = scalar * tanh(in0 / scalar) (Gemma 2's logit soft-capping) */
    OP_HEAD_SLICE,   /* out = columns [offset, offset + width) of each head of in0 (a query
                       and its output gate, stored side by side per head)              */
    OP_CONV1D,       /* out = silu(causal depthwise convolution of [in0 | in1 | in2]),
                       through each sequence's last kernel - 1 rows (recurrent state)  */
    OP_GATED_DELTA,  /* out = the gated delta rule over the convolved q, k, v (in0) with
                       in1 = b (beta's logits) and in2 = a (the decay's), through each
                       sequence's state matrix per value head                         */
    OP_SSM_SCAN,     /* out = Mamba-2's selective scan over the convolved x, B, C (in0)
                       with time steps in1, through each sequence's state per head    */
    OP_RELU2,        /* out = max(in0, 0)^2 (Nemotron-H's squared ReLU, an MLP without a gate) */
    OP_KIND_COUNT
} op_kind;

/* How a linear's weight is split across tensor-parallel ranks (Megatron style). */
typedef enum par_style {
    PAR_REPLICATED, /* every rank holds all of W                                  */
    PAR_COLUMN,     /* output features sharded; output is sharded                 */
    PAR_ROW,        /* input features sharded; output is a partial sum            */
    PAR_VOCAB,      /* embedding / LM head rows sharded by vocabulary              */
} par_style;

#define LIN_MAX_PARTS 6 /* Gated DeltaNet: q, k, v, z, b, a from one input */

typedef struct linear_part {
    char weight[128];      /* tensor name, [out, in] */
    char bias[128];        /* "" when absent */
    int out;               /* logical output features */
    int head_dim;          /* >0: sharded by whole heads of this size (q/k/v), else by features */
    bool replicable;       /* heads may be replicated when fewer than ranks (k/v, as vLLM does) */
    bool whole;            /* every rank holds all of it (MLA's down-projections beside q_proj) */
    int row0, tensor_rows; /* the part is rows [row0, row0 + out) of a tensor of tensor_rows
                              (0: the whole tensor), as MLA splits kv_a_proj_with_mqa */
} linear_part;

typedef struct linear_desc {
    int in;
    int n_parts;
    linear_part parts[LIN_MAX_PARTS];
    par_style style;
    bool no_fuse; /* keep plain collectives around it under async TP (quantized, or asked) */
} linear_desc;

/* A gated MLP's activation (OP_GLU, and the experts' of OP_MOE): act(gate) * up, SiLU or GELU's
 * tanh approximation; or GPT-OSS's clamped SwiGLU, gate clamped above at limit and up to
 * [-limit, limit], gate * sigmoid(alpha * gate) * (up + 1); or, for experts without a gate
 * (Nemotron-H's), relu(up)^2. */
typedef enum glu_act { GLU_SILU, GLU_GELU_TANH, GLU_SILU_CLAMPED, GLU_RELU2 } glu_act;
typedef struct glu_desc {
    glu_act act;
    float limit, alpha; /* GLU_SILU_CLAMPED */
} glu_desc;

/* A mixture-of-experts layer: each token goes to the top_k experts of its router logits,
 * each a SwiGLU MLP of `inter` features, and gets their outputs weighted by its routing
 * probabilities. Under TP every rank holds a 1/tp share of every expert's features (gate and
 * up column-parallel, down row-parallel), so the output is a partial sum. */
typedef enum moe_routing {
    ROUTE_SOFTMAX_TOPK, /* softmax over all experts, then the top k (renormalised if norm_topk) */
    ROUTE_TOPK_SOFTMAX, /* the top k logits, then a softmax over those (GraniteMoE) */
} moe_routing;

typedef struct moe_desc { /* (act GLU_RELU2: no gate tensors, gate[] "") */
    int hidden, inter, n_experts, top_k;
    moe_routing routing;
    bool norm_topk;
    /* DeepSeek's routing (kernels.h's moe_shape says how they combine) */
    bool sigmoid, group_top2_sum;
    int n_group, topk_group;
    float scale;
    char bias[128]; /* e_score_correction_bias, "" when absent */
    bool bias_row;  /* stored as [1, n_experts] */
    /* the fused alternative of per-expert tensors, used when the checkpoint has it (transformers'
     * in-memory layout): gate_up [E, 2*inter, hidden], down [E, hidden, inter]; "" if none */
    char fused_gate_up[128], fused_down[128];
    /* per-expert tensors: printf patterns with one %d for the expert ("...experts.%d.w1.weight");
     * stacked: gate holds [E, 2*inter, hidden] (gate rows, then up rows), down [E, hidden, inter] */
    bool stacked;
    /* stacked_each: gate [E, inter, hidden], up likewise, down [E, hidden, inter], one tensor each */
    bool stacked_each;
    char gate[128], up[128], down[128];
    /* GPT-OSS: gate and up rows alternate in the stacked gate tensor (gate j = row 2j), and the
     * experts have biases ("" if none: [E, 2*inter] interleaved likewise, [E, hidden]); where
     * gate and up are apart (stacked_each: a GGUF file), gate_up_bias is gate's [E, inter] and
     * up_bias up's */
    bool interleaved;
    char gate_up_bias[136], up_bias[136], down_bias[136];
    glu_desc act; /* the experts' activation */
} moe_desc;

typedef struct attn_desc {
    int layer, n_heads, n_kv_heads, head_dim, sliding_window; /* head_dim: of q and k */
    float scale;
    float softcap;   /* scores become softcap * tanh(score / softcap) before masking (0: none) */
    char sinks[128]; /* a learned logit per head in each softmax's denominator (GPT-OSS), "" if none */
    /* multi-head latent attention (kv_lora 0: none): the cache holds each token's latent kv_c
     * (kv_lora) and rotated k_pe (rope); kv_b_proj (the op's lin) expands the latent into
     * per-head k_nope (nope) and v (v_dim) */
    int kv_lora, nope, rope, v_dim;
} attn_desc;

/* n_heads heads of `stride` columns each, whose columns [offset, offset + rotary dims) rotate;
 * interleaved: rotary pairs are (2i, 2i+1), rotated into transformers' de-interleaved order. */
typedef struct rope_desc {
    int n_heads, stride, offset;
    bool interleaved;
    bool local; /* the sliding layers' own frequencies (Gemma 3's rope_local_base_freq) */
} rope_desc;

/* OP_HEAD_SLICE: of heads of `stride` columns, each one's columns [offset, offset + width). */
typedef struct slice_desc {
    int stride, offset, width;
} slice_desc;

/* A recurrent mixer's ops (Gated DeltaNet's, Mamba-2's; recurrent.c in kernels/). The
 * convolution's channels are its inputs' side by side; input i's channel c is row
 * offsets[i] + c of the [channels, 1, kernel] weight (and of the bias, if any). The delta rule
 * runs n_v_heads heads of a k_dim x v_dim state, value head j reading key head
 * j / (n_v_heads / n_k_heads), with the decay exp(-exp(A_log) * softplus(a + dt_bias)) and
 * beta = sigmoid(b). Mamba-2's scan runs n_v_heads heads of v_dim (x's) over a v_dim x d_state
 * state, B and C in n_groups groups, with the time step softplus(dt + dt_bias) clamped to
 * [dt_min, dt_max], the decay exp(-exp(A_log) x step) and the skip D. */
typedef struct recurrent_desc {
    int layer;
    int kernel, channels, offsets[3];
    int n_k_heads, n_v_heads, k_dim, v_dim;
    int n_groups, d_state;
    float dt_min, dt_max;
    char weight[128], bias[128];           /* OP_CONV1D: conv1d.weight, conv1d.bias ("" if none) */
    char a_log[128], dt_bias[128], d[128]; /* OP_GATED_DELTA, OP_SSM_SCAN (D: the scan's) */
} recurrent_desc;

typedef struct module module;

typedef struct op {
    op_kind kind;
    int n_in, n_out;
    int in[4], out[4];
    linear_desc *lin;    /* OP_LINEAR, OP_EMBED (parts[0] = table) */
    char weight[128];    /* OP_RMS_NORM */
    float eps;           /* OP_RMS_NORM */
    float weight_offset; /* OP_RMS_NORM: added to the weight (Gemma's 1 + w) */
    glu_desc glu;        /* OP_GLU */
    int group;           /* OP_RMS_NORM: 0 = whole row, else normalise each `group` columns */
    bool across_ranks;   /* OP_RMS_NORM over a whole head-sharded projection (OLMoE's q/k
                           norms): under TP, its sum of squares is all-reduced */
    int features;        /* OP_RMS_NORM across ranks or wide: the projection's whole width; OP_INPUT_ROWS: its width */
    bool wide;           /* OP_RMS_NORM by groups whose weight spans every group (Mamba-2's
                              gated norm), where one group's weight serves them all otherwise */
    int part;            /* OP_SPLIT */
    float scalar;        /* OP_SCALE, OP_SOFTCAP, OP_EMBED (its rows' scale) */
    int image_token;     /* OP_EMBED: the id whose rows are the image rows (loom_batch's), -1: none */
    attn_desc attn;      /* OP_ATTENTION */
    rope_desc rope;      /* OP_ROPE */
    module *child;       /* OP_CALL */
    moe_desc *moe;       /* OP_MOE */
    slice_desc slice;    /* OP_HEAD_SLICE */
    recurrent_desc *rec; /* OP_CONV1D, OP_GATED_DELTA */
    bool gate_silu;      /* OP_RMS_NORM: times silu(in1) (a gated norm: Gated DeltaNet's output) */
    loom_custom_op custom; /* OP_CUSTOM (name owned by the op) */
} op;

struct module {
    char name[96]; /* HF-style path: "model.layers.3.mlp" */
    char kind[24]; /* "model", "decoder_layer", "attention", "mlp", ... */
    int n_inputs;  /* values 0..n_inputs-1 are the inputs */
    int n_values;
    size_t cap_values;
    char **value_names;
    int n_ops;
    size_t cap_ops;
    op *ops;
    int n_outputs;
    int outputs[4];
    bool failed; /* an allocation failed while building it: `why` says which (module_check) */
    loom_err why;
};

/* Building never stops on an allocation failure: module_new returns NULL, and an emitter that
 * cannot allocate marks its module failed and returns -1. Every emitter accepts a NULL module
 * and -1 ids (and emit_call a NULL child), so a builder runs to its end unchecked, and whoever
 * takes the tree asks module_check once, then frees a failed tree whole. */
module *module_new(const char *kind, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void module_free(module *m); /* frees children reached through OP_CALL too */
/* 0, or -1 with err set to the first allocation failure recorded in the tree (a NULL tree is
 * one: its root could not be allocated). */
int module_check(const module *root, loom_err *err);
int module_input(module *m, const char *name);
void module_output(module *m, int value);
/* m ends where `value` is made: the ops after it are dropped and it is the one output (a
 * pooling model's final hidden state, its head cut off). -1 when no op of m makes it. */
int module_end_at(module *m, int value);

/* Op emitters: each returns the id of the value it defines (-1 when out of memory). */
/* The embedding, its rows times scale (Gemma's sqrt(hidden), Granite's multiplier; 1: as
 * stored); rows of image_token (-1: none) are the batch's image rows, unscaled. */
int emit_embed(module *m, const char *table, int vocab, int hidden, float scale, int image_token);
int emit_linear(module *m, int in, const linear_desc *lin);
int emit_split(module *m, int fused, int part, const char *name);
int emit_rms_norm(module *m, int in, const char *weight, float eps, int group, const char *name);
/* x / rms(x) * (weight + offset): Gemma's norms store w for a scale of 1 + w. */
int emit_rms_norm_offset(module *m, int in, const char *weight, float offset, float eps, int group, const char *name);
/* RMSNorm over a whole projection of `features` that TP shards by heads (across_ranks). */
int emit_rms_norm_across(module *m, int in, const char *weight, float eps, int features, const char *name);
/* RMSNorm of each `group` columns of a projection of `features`, with a weight of all of them. */
int emit_rms_norm_wide(module *m, int in, const char *weight, float eps, int group, int features, const char *name);
int emit_rope(module *m, int in, const rope_desc *r, const char *name);
int emit_attention(module *m, int q, int k, int v, const attn_desc *a);
/* Latent attention over q (rotated), the normalised latent kv_c and the rotated k_pe, with
 * kv_b_proj (a column-parallel linear by head of nope + v_dim) applied inside. */
int emit_mla_attention(module *m, int q, int kv_c, int k_pe, const attn_desc *a, const linear_desc *kv_b);
int emit_glu(module *m, int gate, int up, const glu_desc *g);
int emit_softcap(module *m, int in, float cap, const char *name);
int emit_relu2(module *m, int in, const char *name);
int emit_add(module *m, int a, int b, const char *name);
int emit_scale(module *m, int in, float s, const char *name);
int emit_logit_rows(module *m, int in);
int emit_moe(module *m, int x, int router_logits, const moe_desc *d);
/* in * sigmoid(gate): gate one column per row, or as wide as in (elementwise). */
int emit_sigmoid_gate(module *m, int in, int gate, const char *name);
/* rms_norm(x) * weight * silu(z), over groups of `group` columns. */
int emit_rms_norm_gated(module *m, int x, int z, const char *weight, float eps, int group, const char *name);
int emit_head_slice(module *m, int in, const slice_desc *s, const char *name);
int emit_conv1d(module *m, const int *ins, int n_in, const recurrent_desc *r);
int emit_gated_delta(module *m, int qkv, int b, int a, const recurrent_desc *r);
int emit_ssm_scan(module *m, int xbc, int dt, const recurrent_desc *r);
int emit_input_rows(module *m, int features, const char *name);
int emit_concat(module *m, int a, int b, const char *name);
/* Runs child on ins; returns its first output (children here have one). */
int emit_call(module *m, module *child, const int *ins, int n_in, const char *name);

/* Inserts a custom op on the module's output (or first input): later ops and the module's
 * outputs read the custom op's result instead. Returns 0, or -1 when out of memory: the tree is
 * then unchanged and the module marked failed (module_check says why). */
int module_add_custom(module *m, bool at_input, const loom_custom_op *c);
/* The module at `path` in the tree, or NULL. */
module *module_find(module *root, const char *path);
/* Whether m, or a module it calls, has an op of kind k. */
bool module_uses(const module *m, op_kind k);
/* The parameters of m's weights: linears, embeddings (a head tied to one counted with it),
 * experts, convolutions; norms and per-head scalars are left out (a few thousand). */
size_t module_count_params(const module *m);

/* A part's short name, the weight's last path component before ".weight" ("q_proj"): sets
 * *start into the weight name and returns the length. */
int linear_part_name(const linear_part *p, const char **start);

/* "custom" ops report the user's name */
const char *op_name(const op *o);
const char *op_kind_name(op_kind k);

#endif

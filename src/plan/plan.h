/* The execution plan of one rank: the module tree flattened once, at start-up, into a list of
 * steps over values, with this rank's share of every weight (tensor parallelism) named by
 * tensor and slice, the tokens it owns between decoder layers (sequence parallelism), the
 * collectives both need, and each value placed in a buffer by liveness so that steady-state
 * forward passes allocate nothing (the CPU analogue of CUDA graphs). Planning reads no weight:
 * the runtime's binder (runtime/bind.c) reads, shards, repacks and quantizes the slices the
 * steps name, into the steps' resolved fields. */
#ifndef LOOM_PLAN_PLAN_H
#define LOOM_PLAN_PLAN_H
#include "graph/module.h"
#include "kernels/kernels.h"
#include "model/quant_config.h"
#include "model/weights.h"
#include "plan/placement.h"

#define PLAN_MAX_CAPTURE 4 /* capture slots: Eagle3 reads three layers' states and its own */

/* How a value's columns are spread over the ranks. */
typedef enum dist {
    DIST_FULL,    /* every rank holds all of it */
    DIST_SHARDED, /* each rank holds its columns (heads, features, vocabulary) */
    DIST_PARTIAL, /* each rank holds a partial sum of all of it */
    /* expert parallelism: each rank holds the finished values of its own token rows, which the
     * experts' combine already summed across ranks; reducing it again would count it per rank */
    DIST_COMPLETE,
} dist;

/* Which rows a value has in a forward pass of T tokens. */
typedef enum row_kind {
    ROWS_TOKENS, /* every token of the batch (T; buffers hold T padded to a multiple of tp) */
    ROWS_SHARD,  /* sequence parallelism: this rank's T_pad/tp tokens */
    ROWS_LOGITS, /* the rows whose logits are wanted */
} row_kind;

typedef enum step_kind {
    STEP_OP,             /* the op's kernel */
    STEP_EP_MOE,         /* a MoE whose experts span the stage's ranks (ep.c): route this rank's rows, and
                            either dispatch them to the ranks holding their experts and combine the sums
                            back (expert parallelism), or gather every rank's rows, run this rank's share
                            of every expert and reduce-scatter the sums back (plan_step.experts_sliced) */
    STEP_ALL_REDUCE,     /* TOKENS partial -> TOKENS full */
    STEP_GATHER_COLS,    /* vocabulary-sharded -> full (logits) */
    STEP_REDUCE_SCATTER, /* TOKENS partial -> SHARD full: region exit, embedding under SP */
    STEP_GATHER_ROWS,    /* SHARD -> TOKENS: region entry */
    STEP_GATHER_LOGITS,  /* SHARD -> LOGITS: the wanted rows, from the ranks that own them */
    STEP_AG_MATMUL,      /* async TP: SHARD input -> column-parallel linear's TOKENS output */
    STEP_MATMUL_RS,      /* async TP: TOKENS input -> row-parallel linear's sum, SHARD rows */
    STEP_SEND,           /* pipeline: the hidden state, as it is, to this TP rank of the next stage */
    STEP_RECV,           /* pipeline: the hidden state from this TP rank of the previous stage */
    STEP_SLICE_ROWS,     /* TOKENS -> SHARD: this rank's rows, copied (expert-parallel regions) */
    STEP_CAPTURE,        /* a value's rows kept after the pass (an Eagle3 draft's inputs): TOKENS or LOGITS */
    STEP_KIND_COUNT
} step_kind;

typedef struct plan_value {
    int width; /* columns this rank holds */
    int base;  /* value whose buffer holds it (itself unless a view) */
    int col;   /* first column inside the base's rows */
    row_kind rows;
    dist dist;
    int feat0;             /* first of the model's features this rank's columns hold (sharded values) */
    bool replicated_heads; /* its heads are copies held by several ranks (kv heads < tp) */
    const op *producer;
    rows_code code;         /* holds int8 or FP8 rows (kernels.h's rows_floats), for a linear */
    int def_step, last_use; /* step indices, for buffer assignment */
    int buffer;             /* for bases: buffer index */
} plan_value;

/* How a weight a step names is read. */
typedef enum weight_kind {
    WEIGHT_NONE,
    WEIGHT_LINEAR, /* a linear's: stored quantized where the checkpoint says, else quantized at load
                      where the scheme for its style says, else as stored */
    WEIGHT_TABLE,  /* the embedding table: quantized at load like the LM head, else as stored */
    WEIGHT_F32,    /* norms, biases, routing biases: an f32 copy */
} weight_kind;

/* Rows [r0, r0 + nr) x columns [c0, c0 + nc) of tensor `name`, read as a [rows, cols] matrix
 * (cols 0: a vector of rows; nr or nc 0: all), `ndim` 3 for a stacked [shape[0], shape[1],
 * cols] expert tensor. Names point into the module tree, which outlives the plan. */
typedef struct weight_ref {
    weight_kind kind;
    const char *name;
    int ndim, shape[3], cols;
    int r0, nr, c0, nc;
    par_style style; /* what decides a linear's quantization */
    float init;      /* dummy weights' scale (negative: the constant 1 of a norm) */
    int row_step;    /* rows r0, r0 + row_step, ... (0 or 1: consecutive; 2: GPT-OSS's gate or up rows) */
} weight_ref;

typedef struct plan_step {
    step_kind kind;
    const op *op;         /* STEP_OP, and the op a collective completes */
    const module *mod;    /* owning module, for messages and the plan printer */
    int n_in, in[4], out; /* out: -1 for a send */
    bool sum_squares;     /* OP_RMS_NORM across ranks: this step makes the row statistic */
    /* STEP_GATHER_ROWS, STEP_AG_MATMUL: each rank quantizes its rows to int8 or FP8 (kernels.h's
     * quantized rows) before the gather, which moves those; its consumer computes on them as
     * they are. FP8 rows are rounded with in_scale, the consumer's static scale (the binder's). */
    rows_code code;
    float in_scale;
    bool for_capture; /* STEP_GATHER_ROWS: the whole hidden state for a capture, not a region's entry */
    int capture_slot; /* STEP_CAPTURE: which of the engine's captured values it fills */
    int layer;        /* the decoder layer (0: the stage's first) it belongs to; -1: none */
    /* what this rank reads: each part's weight and bias, a row-parallel bias every rank holds,
     * a norm's weight, the routing bias; the experts' slices start at expert_r0 (expert_slices) */
    weight_ref weight[LIN_MAX_PARTS], bias_ref[LIN_MAX_PARTS], row_bias_ref, norm_ref, route_bias_ref, sinks_ref;
    int expert_r0;
    /* a recurrent op's (OP_CONV1D, OP_GATED_DELTA): each sequence's state_stride floats from
     * state (the executor's, shared by the plans that run the op) */
    float *state, *snapshots; /* snapshots: the executor's slots of it (prefix caching) */
    size_t state_stride;
    /* resolved by the binder (w[1] of latent attention: kv_b_proj's f32 transpose), and the
     * parameters of this rank */
    wmat w[LIN_MAX_PARTS];            /* MLA attention: kv_b_proj, then its f32 transpose */
    const float *bias[LIN_MAX_PARTS]; /* collectives: bias added to the completed sum */
    int col[LIN_MAX_PARTS];           /* output column of each part */
    int feat0[LIN_MAX_PARTS];         /* first output feature of each part this rank holds */
    bool replicated[LIN_MAX_PARTS];   /* the part's heads are replicated across ranks */
    wmat *experts;                    /* OP_MOE: gate, up, down of each expert (this rank's share) */
    const float **expert_bias;        /* OP_MOE: their biases, likewise (NULL: none) */
    const float *route_bias;          /* OP_MOE: e_score_correction_bias (NULL: none) */
    int expert_inter;                 /* OP_MOE: features of each expert this rank holds */
    /* OP_MOE: the experts this rank holds (all of them but under EP), by global index in
     * increasing order (under EP an expert with several copies may come twice); under EP, where
     * each expert's copies are (ranks of plan_ep_ranks, placement.c) */
    int n_experts;
    int32_t *expert_ids;
    placement place;
    /* STEP_EP_MOE with data parallelism and without expert parallelism: this rank holds a
     * 1/(dp x tp) share of every expert's features, over the rows of every replica */
    bool experts_sliced;
    const float *norm_w;
    int vocab0;      /* first vocabulary row this rank holds (embedding) */
    attn_shape attn; /* this rank's heads */
} plan_step;

/* A child of a decoder layer that reduces across ranks, under sequence parallelism, or that
 * holds an expert-parallel mixture of experts. */
typedef struct region_kind region_kind; /* plan_impl.h */

typedef struct plan_region {
    const module *mod;
    bool verified;         /* false: an opaque op touched a partial sum */
    bool ep;               /* its experts are expert-parallel: rows dispatched and combined inside */
    step_kind entry, exit; /* the collective at each end (STEP_OP: none) */
    int gathers;           /* under EP: all-gathers of its input for what stays tensor-parallel (shared experts) */
    int completes;         /* under EP: reduce-scatters completing those partial sums before the routed output joins */
    rows_code gather_code; /* its all-gather moves int8 or FP8 rows (plan_step.code) */
    int gather_width;      /* the columns it gathers */
} plan_region;

typedef struct plan_options {
    int tp, rank;
    /* data parallelism (dp 0 or 1: one replica): this rank's replica; expert parallelism spreads
     * the experts over the dp x tp ranks of a stage (plan_ep_rank) */
    int dp, replica;
    /* pipeline parallelism (pp 0 or 1: one stage): this rank's stage runs decoder layers
     * [layer0, layer1), with the embedding if it is the first and the LM head if the last */
    int pp, stage, layer0, layer1;
    bool sp;                        /* --enable-sequence-parallel */
    bool async_tp;                  /* --enable-async-tp (implies sp) */
    bool ep;                        /* --enable-expert-parallel: each rank holds whole experts (ep.c) */
    quant_scheme quant;             /* what linears are quantized to at load (--quantization) */
    const quant_config *checkpoint; /* how the checkpoint stores quantized linears (NULL: float) */
    bool exact;                     /* --dtype float32: no linear computes on int8 activations */
    bool fp8_act;                   /* --fp8-activations: FP8 linears compute on FP8 activations */
    /* values kept after each pass, in capture slots 0.. (speculative decoding's Eagle3): the
     * hidden state entering each of these decoder layers (every token's), then with
     * capture_last the hidden state of the logit rows entering the final norm */
    int n_capture_layers, capture_layers[PLAN_MAX_CAPTURE];
    bool capture_last;
    /* expert parallelism: place each layer's experts by this load profile (NULL: contiguous),
     * with this many redundant copies of its hottest experts */
    const loom_expert_load *expert_load;
    int redundant_experts;
} plan_options;

typedef struct plan {
    plan_options o;
    const module *tree;
    plan_step *steps;
    int n_steps;
    size_t cap_steps;
    plan_value *values;
    int n_values;
    size_t cap_values;
    int output;                    /* logits value (-1: a stage before the last, which sends its output) */
    int kv_width;                  /* this rank's K (and V) columns per layer */
    int kv_slab;                   /* the cache's contiguous columns per block: a head (MLA: the row) */
    int kv_group;                  /* columns that share a scale in an 8-bit cache: a head (MLA:
                                      gcd(kv_lora, rope), which the latent and k_pe both split into) */
    bool kv_latent;                /* the cache holds one latent row per token (MLA), not K and V */
    int *vocab_col0, *vocab_width; /* [tp]: each rank's vocabulary shard */
    int n_buffers;
    size_t *buffer_width; /* floats per row of each buffer */
    row_kind *buffer_rows;
    /* widest block a collective publishes, per row kind, for sizing the backend's buffers */
    int max_comm_cols[3];
    /* sequence parallelism */
    plan_region *regions;
    int n_regions;
    size_t cap_regions;
    const region_kind *region; /* the kind of region being flattened (region_plain: none) */
    struct {                   /* the expert-parallel region being flattened (call NULL: none) */
        const op *call;
        const module *parent;
        int shard_in, tokens_in; /* its input as this rank's token rows, and as every token's (-1: not yet) */
    } ep;
    bool region_unverified;
    char **warnings;
    int n_warnings;
    size_t cap_warnings;
    /* async TP: region collectives, how many were fused, and why the others were not */
    int n_region_collectives, n_fused;
    char **unfused;
    int n_unfused;
    size_t cap_unfused;
    loom_err oom;                        /* the first allocation that failed while planning */
    int layers, n_layers;                /* decoder layers flattened so far; this stage's */
    int capture_width[PLAN_MAX_CAPTURE]; /* each capture slot's columns (0: another stage fills it) */
} plan;

/* Flattens the tree (the stage's part of it) for o->rank of o->tp, naming the slice of every
 * weight this rank reads and refusing a split that cuts a quantization group or a packed word
 * before any weight is read; errors name the module and the op, tensor or dimension at fault. */
int plan_build(plan *p, const module *tree, const plan_options *o, loom_err *err);
void plan_free(plan *p);
/* The floats of one sequence's state that recurrent step s keeps on this rank (its
 * convolution's last kernel - 1 input rows, its delta rule's k_dim x v_dim matrix per value
 * head, its scan's head_dim x d_state per head; 0 for any other step), and those of all of p's
 * steps. */
size_t plan_state_floats(const plan *p, const plan_step *s);
size_t plan_seq_state_floats(const plan *p);
int plan_step_inputs(const plan_step *s);
/* The ranks a stage's experts are spread over, and this rank's place among them (replicas
 * first, then tp ranks: the GROUP_EP communicator's order). */
static inline int plan_ep_ranks(const plan_options *o) { return o->tp * o->dp; }
/* Whether a mixture's experts span those ranks (ep.c's region): whole experts under expert
 * parallelism, else with several replicas a share of every expert's features on each rank. */
static inline bool plan_experts_span(const plan_options *o) { return o->ep || o->dp > 1; }
static inline int plan_ep_rank(const plan_options *o) { return o->replica * o->tp + o->rank; }
/* A tensor of an expert another rank holds, in a per-expert layout (so this rank never reads it). */
bool ep_foreign_tensor(const plan *p, const char *name);
const char *step_kind_name(step_kind k);

/* What a linear of this style is quantized to at load (bits 0: float). */
quant_scheme shard_scheme(const plan *p, par_style style);
/* Expert e's gate, up and down slices of an MoE step, their names formatted into names: the
 * per-expert tensors, or the stacked [E, ...] ones (GraniteMoE's, or the fused alternative a
 * checkpoint may hold instead, when fused). */
void expert_slices(const plan_step *s, int e, bool fused, char names[3][160], weight_ref out[3]);

#endif

/* The execution plan of one rank: the module tree flattened once, at start-up, into a list of
 * steps over values, with this rank's share of every weight (Megatron-style tensor
 * parallelism) and the collectives that sharding needs, each value placed in a buffer by
 * liveness so that steady-state forward passes allocate nothing (the CPU analogue of CUDA
 * graphs). */
#ifndef LOOM_PLAN_PLAN_H
#define LOOM_PLAN_PLAN_H
#include "kernels/kernels.h"
#include "model/weights.h"
#include "plan/module.h"

/* How a value is spread over the ranks. */
typedef enum dist {
    DIST_FULL,    /* every rank holds all of it */
    DIST_SHARDED, /* each rank holds its columns (heads, features, vocabulary) */
    DIST_PARTIAL, /* each rank holds a partial sum of all of it */
} dist;

typedef enum step_kind {
    STEP_OP,          /* the op's kernel */
    STEP_ALL_REDUCE,  /* out = sum of every rank's in (in: DIST_PARTIAL) */
    STEP_GATHER_COLS, /* out = every rank's columns of in, side by side (vocabulary) */
} step_kind;

typedef struct plan_value {
    int width;       /* columns this rank holds */
    int base;        /* value whose buffer holds it (itself unless a view) */
    int col;         /* first column inside the base's rows */
    bool logit_rows; /* rows are the logit rows, not all tokens */
    dist dist;
    const op *producer;
    int def_step, last_use; /* step indices, for buffer assignment */
    int buffer;      /* for bases: buffer index */
} plan_value;

typedef struct plan_step {
    step_kind kind;
    const op *op;      /* STEP_OP, and the op a collective completes */
    const module *mod; /* owning module, for messages and the plan printer */
    int in[4], out;
    /* resolved parameters of this rank */
    wmat w[LIN_MAX_PARTS];
    const float *bias[LIN_MAX_PARTS];
    int col[LIN_MAX_PARTS]; /* output column of each part */
    const float *norm_w;
    int vocab0;             /* first vocabulary row this rank holds (embedding) */
    attn_shape attn;        /* this rank's heads */
} plan_step;

typedef struct plan {
    int tp, rank;
    plan_step *steps;
    int n_steps, cap_steps;
    plan_value *values;
    int n_values, cap_values;
    int output;   /* logits value */
    int kv_width; /* this rank's K (and V) columns per layer */
    int *vocab_col0, *vocab_width; /* [tp]: each rank's vocabulary shard */
    int n_buffers;
    size_t *buffer_width; /* floats per row of each buffer */
    bool *buffer_logit_rows;
    /* widest block a collective publishes, per row kind, for sizing the backend's buffers */
    int max_comm_token_cols, max_comm_logit_cols;
    /* loading progress, by decoder layer */
    bool progress;
    int layers_done, layers_total;
} plan;

/* Flattens the tree for rank `rank` of `tp` and resolves its weights through ws (NULL: shapes
 * only, e.g. to check that a model can be sharded before any weight is read, or to print);
 * errors name the module and the tensor or dimension at fault. */
int plan_build(plan *p, const module *tree, int tp, int rank, weight_store *ws, bool progress,
               loom_err *err);
void plan_free(plan *p);
int plan_step_inputs(const plan_step *s);

#endif

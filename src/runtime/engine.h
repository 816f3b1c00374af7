/* Engine internals shared by the executor and generation. */
#ifndef LOOM_RUNTIME_ENGINE_H
#define LOOM_RUNTIME_ENGINE_H
#include "comm/comm.h"
#include "kernels/kernels.h"
#include "plan/plan.h"
#include "runtime/model.h"

/* A plan with its buffers. An engine has one, or two with --sp-min-tokens: the sequence-
 * parallel plan for long passes and a plain TP one for short passes (decode), which SP and
 * async TP would only slow down; both give the same bits. */
typedef struct engine_plan {
    plan p;
    float **buffers;
    int max_tokens; /* tokens per pass this plan runs */
} engine_plan;

/* Where a pipeline stage's time went in forward passes (the bubble is the waiting). */
typedef struct pipeline_stats {
    double pass_s;                                    /* in pipelined forward passes */
    double wait_prev_s, wait_next_s, wait_logits_s;   /* for the stage before, after, the logits */
    long passes, microbatches;
} pipeline_stats;

/* Expert parallelism's buffers and per-MoE-layer counts (expert_parallel.c). */
typedef struct expert_parallel {
    int n_layers, layer; /* MoE steps in the plan; the next one in this pass */
    int max_rows;        /* rows a rank may receive in one all-to-all: the padded batch */
    int32_t *choice, *local_choice, *row_at;
    float *weight, *local_weight;
    float *send, *recv, *sums, *back; /* dispatched rows, received; experts' sums, and those come back */
    int *send_rows, *recv_rows, *start;
    const char **name;   /* [n_layers]: each MoE module */
    long *received;      /* [n_layers][ranks]: rows each rank received, since the profile reset */
    double *bytes;       /* [n_layers]: bytes between ranks, both all-to-alls */
    long passes;
    double waited_s;     /* blocked in the all-to-alls (profile) */
} expert_parallel;

struct loom_engine {
    loom_model *model;
    /* comm: the ranks of this stage, which tensor parallelism shards across; world: the whole
     * job (comm itself with one stage). own_comm: made here (tp=1, or this stage's) */
    loom_comm *comm, *world, *own_comm;
    int pp, stage, layer0, layer1; /* this rank's pipeline stage runs decoder layers [layer0, layer1) */
    int max_microbatches;          /* 0: the default split (pipeline.c) */
    int *mb_first;                 /* pipeline.c's scratch: microbatch bounds, logit rows */
    int32_t *mb_rows, *mb_at;
    pipeline_stats pipe;
    engine_plan plans[2], *cur;
    int n_plans, sp_min_tokens;
    kv_layer *kv;
    rope_table rope;
    moe_scratch moe; /* shared by the MoE steps */
    expert_parallel ep;
    double expert_seconds, expert_flop; /* in the experts' GEMMs (routing included under TP) */
    long expert_pairs;
    int max_seqs, max_ctx, max_tokens, max_logits;
    int *seq_len; /* positions each sequence's KV cache holds */
    float *logits;
    size_t activation_bytes, kv_bytes;
    bool profile;               /* time each step kind */
    double op_seconds[OP_KIND_COUNT], comm_seconds;
    double waited_seconds[STEP_KIND_COUNT]; /* blocked in each kind of collective */
};

/* Where value v of the current plan lives, and its row stride. */
float *engine_value(const loom_engine *e, int v, size_t *ld);
/* The shape moe_forward runs step s's experts with (all experts, for routing). */
moe_shape engine_moe_shape(const plan_step *s);
int ep_init(loom_engine *e, loom_err *err);
void ep_free(loom_engine *e);
void ep_reset_stats(loom_engine *e);
/* An MoE step of an expert-parallel region: route, dispatch, this rank's experts, combine. */
int ep_moe_step(loom_engine *e, const plan_step *s, const loom_batch *b, loom_err *err);

/* Runs this rank's steps over b: the whole pass, or its stage's part of it. */
int engine_run_pass(loom_engine *e, const loom_batch *b, loom_err *err);
/* Copies the logit rows of the pass just run into e->logits: its row i to row at[i] (NULL: i). */
void engine_take_logits(loom_engine *e, const loom_batch *b, const int32_t *at);
/* A pass through the pipeline stages (pipeline.c): b splits into microbatches, each run through
 * this stage as soon as the previous stage hands it over; then every rank gets the logits. */
int pipeline_forward(loom_engine *e, const loom_batch *b, loom_err *err);
void pipeline_init(loom_engine *e, const loom_engine_options *o);
void pipeline_free(loom_engine *e);
void pipeline_print_profile(const loom_engine *e, FILE *f);

#endif

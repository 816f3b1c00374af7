/* The step executor (executor.c): what one rank's plans run on (their buffers, the KV cache,
 * the RoPE tables, the experts' scratch) and the loop that runs a plan's steps over a batch:
 * kernels for op steps, the communicator for collectives, fused collectives and stage
 * hand-overs, expert_parallel.c for expert-parallel MoE steps. Calls go one way: the engine
 * and the pipeline call the executor, which calls expert_parallel.c, the kernels and comm. */
#ifndef LOOM_RUNTIME_EXECUTOR_H
#define LOOM_RUNTIME_EXECUTOR_H
#include "comm/comm.h"
#include "kernels/kernels.h"
#include "plan/plan.h"
#include "runtime/expert_parallel.h"

/* A plan with its buffers. An engine has one, or two with --sp-min-tokens: the sequence-
 * parallel plan for long passes and a plain TP one for short passes (decode), which SP and
 * async TP would only slow down; both give the same bits. */
typedef struct engine_plan {
    plan p;
    float **buffers;
    int max_tokens; /* tokens per pass this plan runs */
} engine_plan;

/* Where this rank's time went since the profile reset. */
typedef struct exec_stats {
    double op_seconds[OP_KIND_COUNT];       /* per op kind, when profiling */
    double comm_seconds;                    /* in collectives and the experts' all-to-alls */
    double waited_seconds[STEP_KIND_COUNT]; /* blocked in each kind of collective */
    double wait_prev_s, wait_next_s;        /* pipeline: for the previous stage, for the next */
    expert_work experts;
} exec_stats;

typedef struct executor {
    /* comm: the ranks of this stage of this replica, which TP shards across; world: this
     * replica's ranks, every stage's (the job's, with one replica); ep_comm: the ranks a stage's
     * experts are spread over (comm, or with data parallelism the stage's ranks of every replica) */
    loom_comm *comm, *world, *ep_comm;
    int stage;
    engine_plan plans[2], *cur;
    int n_plans, sp_min_tokens; /* passes shorter than sp_min_tokens run plans[1] */
    int max_tokens, max_logits, max_ctx;
    int layer0, layer1; /* the decoder layers whose KV cache this rank holds */
    int max_seqs;
    /* the recurrent ops' states, one per op, which both plans' steps of it point to (max_seqs
     * of the step's state_stride floats): each op's first step, which owns it */
    int n_states;
    plan_step **state_steps;
    /* prefix caching of recurrent layers: slots of each op's state (runtime/state_cache.h), and
     * the snapshots the pass being run takes into them (set by the engine) */
    int n_snapshot_slots;
    state_snapshots snaps;
    /* the KV pool: kv_blocks blocks of block_size positions per layer, read through the
     * sequences' block tables (kv_tables, table_width per sequence; runtime/kv_cache.h) */
    int kv_blocks, block_size, table_width;
    loom_kv_dtype kv_dtype; /* how the pools hold K and V (kernels/kv_format.c) */
    const int32_t *kv_tables;
    kv_layer *kv;                /* indexed by layer */
    rope_table rope, rope_local; /* rope_local: the sliding layers' own (Gemma 3), if any */
    /* longrope: a pass reaching past rope_long_after positions of a sequence rotates that
     * sequence's rows by the long set (rope_rows: the pass's rows of `rope`; seq_ids and
     * seq_reach: its sequences and how far each reaches) */
    int rope_long_after;
    int32_t *rope_rows, *seq_ids, *seq_reach;
    const int32_t *pass_rope_rows; /* the pass's rows of `rope`: its positions, or rope_rows */
    /* a vision-language model's image placeholder (-1: none), whose runs in a pass see each other
     * (Gemma 3): each row's reach (attention's), pass_reach NULL when the pass has no image */
    int image_token, image_width; /* and the width of the batch's image rows */
    int32_t *reach;
    const int32_t *pass_reach;
    moe_scratch moe;   /* shared by the MoE steps */
    float *quant_send; /* this rank's rows quantized for a gather of quantized rows (plan_step.code) */
    expert_parallel ep;
    /* the values the plans keep after a pass (plan_options' capture): slot j holds
     * capture_rows rows of capture_width columns, filled from row capture_row0 on (a pipeline
     * microbatch's first token); under pipeline stages capture_root[j] is the world rank whose
     * stage makes slot j, and broadcasts it */
    int n_capture, capture_width, capture_rows, capture_row0;
    const float *rows_in; /* the pass's rows beside its ids (OP_INPUT_ROWS), one per token */
    float *capture[PLAN_MAX_CAPTURE];
    int capture_root[PLAN_MAX_CAPTURE];
    size_t activation_bytes, kv_bytes, state_bytes;
    bool profile; /* time each op kind */
    exec_stats st;
} executor;

/* Allocates what the plans run on, once: their buffers, the KV pools of layers [layer0,
 * layer1), the recurrent ops' states for max_seqs sequences, the RoPE tables of f for max_ctx
 * positions, the experts' scratch and expert parallelism's buffers. The caller has set comm, world, ep_comm, stage, the plans, the max_*
 * sizes, the pool's and image_token. */
int executor_init(executor *x, const rope_freqs *f, loom_err *err);
/* Under pipeline stages: every captured slot from the stage that made it, to every rank (rows of
 * the pass just run). */
int executor_share_captures(executor *x, int rows, loom_err *err);
void executor_free(executor *x);
/* Runs this rank's steps over b: the whole pass, or its stage's part of it. */
int executor_run_pass(executor *x, const loom_batch *b, loom_err *err);
/* A pass of no tokens, for a replica with nothing to run while the others run theirs: only the
 * expert-parallel steps, which route nothing of this rank's but still run its experts over the
 * rows the other replicas send (data parallelism's lockstep). */
int executor_run_idle(executor *x, loom_err *err);
/* The image rows past those of tokens ids[0..n) (one row of image_width a image token): where a
 * batch cut after them resumes (rows NULL: NULL). */
const float *executor_image_rows_after(const executor *x, const float *rows, const int32_t *ids, int n);
/* Copies the logit rows of the pass just run, vocab wide, into logits: its row i to row at[i]
 * (NULL: i). */
void executor_take_logits(const executor *x, const loom_batch *b, float *logits, size_t vocab, const int32_t *at);
void executor_reset_stats(executor *x, bool profile);
/* Sequence seq's recurrent state becomes the one snapshot slot `slot` holds (a cached prefix
 * attached to it). */
void executor_restore_state(executor *x, int seq, int slot);

#endif

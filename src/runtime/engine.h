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

struct loom_engine {
    loom_model *model;
    loom_comm *comm, *own_comm; /* own_comm: made here for tp=1 */
    engine_plan plans[2], *cur;
    int n_plans, sp_min_tokens;
    kv_layer *kv;
    rope_table rope;
    moe_scratch moe; /* shared by the MoE steps */
    int max_seqs, max_ctx, max_tokens, max_logits;
    int *seq_len; /* positions each sequence's KV cache holds */
    float *logits;
    size_t activation_bytes, kv_bytes;
    bool profile;               /* time each step kind */
    double op_seconds[OP_KIND_COUNT], comm_seconds;
    double waited_seconds[STEP_KIND_COUNT]; /* blocked in each kind of collective */
};

#endif

/* Engine internals shared by the executor and generation. */
#ifndef LOOM_RUNTIME_ENGINE_H
#define LOOM_RUNTIME_ENGINE_H
#include "comm/comm.h"
#include "kernels/kernels.h"
#include "plan/plan.h"
#include "runtime/model.h"

struct loom_engine {
    loom_model *model;
    loom_comm *comm, *own_comm; /* own_comm: made here for tp=1 */
    plan plan;
    float **buffers;
    kv_layer *kv;
    rope_table rope;
    int max_seqs, max_ctx, max_tokens, max_logits;
    int max_tokens_pad; /* max_tokens rounded up to a multiple of the ranks */
    bool all_logits;
    int *seq_len; /* positions each sequence's KV cache holds */
    float *logits;
    size_t activation_bytes, kv_bytes;
    bool profile;               /* time each step kind */
    double op_seconds[OP_KIND_COUNT], comm_seconds;
};

#endif

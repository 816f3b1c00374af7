/* Compute kernels over token-major fp32 buffers: rows are tokens, `ld` is the row stride in
 * floats. GEMMs go to the BLAS; the rest are OpenMP loops. */
#ifndef LOOM_KERNELS_H
#define LOOM_KERNELS_H
#include <stdlib.h>

#include "model/config.h"
#include "model/weights.h"

/* A float buffer grown once, 64-byte aligned: kept per thread (_Thread_local) by the kernels
 * that need scratch, so steady-state calls allocate nothing. The worker threads of a parallel
 * loop have their own, empty, thread-locals: callers hand the pointer to them. */
typedef struct fbuf {
    float *p;
    size_t cap;
} fbuf;
static inline float *fbuf_get(fbuf *b, size_t floats) {
    if (floats > b->cap) {
        free(b->p);
        b->p = aligned_alloc(64, (floats * sizeof *b->p + 63) / 64 * 64);
        b->cap = floats;
    }
    return b->p;
}

/* y[m, n] = x[m, k] @ w[n, k]^T, row-major with leading dimensions (gemm.c). */
void gemm_f32(int m, int n, int k, const float *x, size_t ldx, const float *w, size_t ldw, float *y, size_t ldy);

/* y[m, 0:W.rows] = x[m, 0:W.cols] @ W^T (+ bias). The m rows may be one block of a product
 * of pass_rows rows: the kernel (streaming or sgemm) is chosen by pass_rows, so every block of
 * one product takes the same one. */
void linear(const float *x, size_t ldx, int m, int pass_rows, const wmat *w, const float *bias, float *y,
            size_t ldy);
/* The same product as one GEMM per `chunk` rows (the last chunk shorter), as the fused
 * collectives compute it; bf16 weights are widened once for all the chunks. */
void linear_chunked(const float *x, size_t ldx, int m, int chunk, int pass_rows, const wmat *w, const float *bias,
                    float *y, size_t ldy);

/* out = x / sqrt(mean(x^2) + eps) * weight, over each `group` columns of `cols` (group = cols
 * for a whole-row norm); weight has `group` entries. */
void rms_norm(const float *x, size_t ldx, float *out, size_t ldo, int rows, int cols, int group,
              const float *weight, float eps);

/* RoPE tables: cos/sin [max_pos, head_dim/2] following transformers' rope initialisers. */
typedef struct rope_table {
    int max_pos, half;
    float *cos, *sin;
} rope_table;
int rope_table_init(rope_table *t, const model_config *c, int max_pos, loom_err *err);
void rope_table_free(rope_table *t);
/* rotate_half RoPE on n_heads heads of head_dim per row at positions pos[row]. */
void rope_apply(const rope_table *t, const float *x, size_t ldx, float *out, size_t ldo, int rows,
                int n_heads, const int32_t *pos);

/* The same norm in two steps, for rows whose columns are spread over ranks: ss[r] = the sum of
 * squares of this rank's columns; once the ranks' ss are summed, rms_norm_by normalises by
 * sqrt(ss / features + eps), `features` being the whole row's width. */
void sum_squares(const float *x, size_t ldx, float *ss, size_t lds, int rows, int cols);
void rms_norm_by(const float *x, size_t ldx, const float *ss, size_t lds, float *out, size_t ldo, int rows, int cols,
                 int features, const float *weight, float eps);
/* out = x * sigmoid(g), g one value per row (Qwen2-MoE's shared-expert gate). */
void sigmoid_gate(const float *x, size_t ldx, const float *g, size_t ldg, float *out, size_t ldo, int rows, int cols);

void silu_mul(const float *gate, size_t ldg, const float *up, size_t ldu, float *out, size_t ldo,
              int rows, int cols);
/* (ldb 0 adds one row, e.g. a bias, to every row of a; out may be a) */
void add_rows(const float *a, size_t lda, const float *b, size_t ldb, float *out, size_t ldo, int rows,
              int cols);
void scale_rows(const float *a, size_t lda, float s, float *out, size_t ldo, int rows, int cols);
/* out[r] = table[ids[r]] (ids outside [v0, v0 + table.rows) give zero rows: vocab shards). */
void embed_rows(const wmat *table, int v0, const int32_t *ids, int rows, float *out, size_t ldo);

/* Mixture of experts over a batch of rows (see moe.c). */
typedef struct moe_shape {
    int hidden, inter, n_experts, top_k; /* inter: the expert features this rank holds */
    bool softmax_of_topk; /* GraniteMoE: softmax over the k chosen logits; else over all, then top k */
    bool norm_topk;       /* renormalise the chosen probabilities to sum to 1 */
} moe_shape;

/* Buffers for moe_forward, sized once for the engine's largest batch. */
typedef struct moe_scratch {
    int threads;
    int32_t *choice, *count, *start; /* routing; pairs per expert, where each expert's begin */
    int32_t *token, *pair, *slot;    /* by expert: row and pair (r*k + j); slot[pair]: its place */
    float *weight, *x, *gate, *up, *y;              /* x, gate, up: one set per thread */
} moe_scratch;
int moe_scratch_init(moe_scratch *s, int rows, const moe_shape *sh);
size_t moe_scratch_bytes(int rows, const moe_shape *sh, int threads);
void moe_scratch_free(moe_scratch *s);

/* Routing: choice[r*k + j], weight[r*k + j] = the j-th expert of row r and its weight. Ties go
 * to the lower expert index, so every rank (and every mode) routes a row the same way. */
void moe_route(const float *logits, size_t ldl, int rows, const moe_shape *sh, int32_t *choice, float *weight);
/* out[r] = sum over row r's experts e, in increasing e, of weight * down_e(silu(gate_e x) * up_e x);
 * experts[3e..3e+2] = gate, up, down. Each expert runs as GEMMs over the rows routed to it, the
 * experts spread over the threads (one GEMM of few rows uses one core better than two). */
void moe_forward(const moe_shape *sh, const wmat *experts, const float *x, size_t ldx, const float *logits,
                 size_t ldl, int rows, float *out, size_t ldo, moe_scratch *s);

/* KV cache of one layer: [n_seqs][max_ctx][kv_width] for K and for V. */
typedef struct kv_layer {
    float *k, *v;
    int max_ctx, kv_width;
} kv_layer;

/* Causal attention for a flattened batch: row r is token at position pos[r] of sequence
 * seq[r]. Writes k/v into the cache first, then each query attends to its sequence's keys
 * 0..pos (or the last `window` of them). Rows of one sequence are contiguous. */
typedef struct attn_shape {
    int n_heads, n_kv_heads, head_dim, window;
    float scale;
} attn_shape;
void attention(const attn_shape *s, kv_layer *cache, const float *q, size_t ldq, const float *k,
               size_t ldk, const float *v, size_t ldv, float *out, size_t ldo, int rows,
               const int32_t *pos, const int32_t *seq);

#endif

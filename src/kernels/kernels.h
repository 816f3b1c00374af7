/* Compute kernels over token-major fp32 buffers: rows are tokens, `ld` is the row stride in
 * floats. GEMMs go to the BLAS; the rest are OpenMP loops. */
#ifndef LOOM_KERNELS_H
#define LOOM_KERNELS_H
#include "model/config.h"
#include "model/weights.h"

/* y[m, 0:W.rows] = x[m, 0:W.cols] @ W^T (+ bias). The m rows may be one block of a product
 * of pass_rows rows: the kernel is chosen by pass_rows, so a product computed block by block
 * (as the fused collectives do) equals the whole one bit for bit -- OpenBLAS's sgemm computes
 * each row the same whatever M is. */
void linear(const float *x, size_t ldx, int m, int pass_rows, const wmat *w, const float *bias, float *y,
            size_t ldy);

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

void silu_mul(const float *gate, size_t ldg, const float *up, size_t ldu, float *out, size_t ldo,
              int rows, int cols);
void add_rows(const float *a, size_t lda, const float *b, size_t ldb, float *out, size_t ldo, int rows,
              int cols);
void scale_rows(const float *a, size_t lda, float s, float *out, size_t ldo, int rows, int cols);
/* out[r] = table[ids[r]] (ids outside [v0, v0 + table.rows) give zero rows: vocab shards). */
void embed_rows(const wmat *table, int v0, const int32_t *ids, int rows, float *out, size_t ldo);

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

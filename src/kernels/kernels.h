/* Compute kernels over token-major fp32 buffers: rows are tokens, `ld` is the row stride in
 * floats. GEMMs go to the BLAS; the rest are OpenMP loops. */
#ifndef LOOM_KERNELS_H
#define LOOM_KERNELS_H
#include <stdlib.h>

#include "cpu/cpu.h"
#include "loom.h"
#include "tensor/tensor.h"

/* A float buffer grown once, 64-byte aligned: kept per thread (_Thread_local) by the kernels
 * that need scratch, so steady-state calls allocate nothing. The worker threads of a parallel
 * loop have their own, empty, thread-locals: callers hand the pointer to them.
 *
 * Kernels have no error path: the executor runs them as steps that cannot fail, and a kernel
 * inside a parallel loop could not return one anyway. So scratch that cannot be allocated is
 * recorded instead of fatal (scratch.c): fbuf_get returns NULL and records why, the kernel skips
 * its work (its output keeps whatever it held), and kernel_scratch_check, which the executor
 * calls after its steps, turns the record into the pass's error. Nothing dereferences NULL and
 * nothing exits; the pass that lost a kernel's work reports it instead of returning its logits. */
typedef struct fbuf {
    float *p;
    size_t cap;
} fbuf;
/* The buffer, grown to hold `floats`; NULL (recorded) when it cannot be. */
float *fbuf_get(fbuf *b, size_t floats);
/* Records a kernel's failed allocation (the first since the last check is kept). */
void kernel_scratch_failed(const loom_err *why);
/* 0, or -1 with err set (and the record cleared) when a kernel lost its scratch since the last call. */
int kernel_scratch_check(loom_err *err);

/* y[m, n] = x[m, k] @ w[n, k]^T, row-major with leading dimensions (gemm.c). */
void gemm_f32(int m, int n, int k, const float *x, size_t ldx, const float *w, size_t ldw, float *y, size_t ldy);
/* The same on bf16 x (contiguous: ld k, 64-byte aligned) and bf16 w, accumulated in fp32;
 * false, y untouched, where this build or CPU has no bf16 GEMM. */
bool gemm_bf16(int m, int n, int k, const uint16_t *x, const uint16_t *w, size_t ldw, float *y, size_t ldy);

/* y[m, 0:W.rows] = x[m, 0:W.cols] @ W^T (+ bias). The m rows may be one block of a product
 * of pass_rows rows: the kernel (streaming or sgemm) is chosen by pass_rows, so every block of
 * one product takes the same one. */
void linear(const float *x, size_t ldx, int m, int pass_rows, const wmat *w, const float *bias, float *y, size_t ldy);
/* The same product as one GEMM per `chunk` rows (the last chunk shorter), as the fused
 * collectives compute it; bf16 weights are widened once for all the chunks. */
void linear_chunked(const float *x, size_t ldx, int m, int chunk, int pass_rows, const wmat *w, const float *bias,
                    float *y, size_t ldy);

/* Rows of int8 activations (--dtype auto on quantized weights; section 6 of docs/DESIGN.md) as
 * records of floats, so that a collective can move them: a row of `cols` values (a multiple of
 * QACT) is its cols int8 codes, then one f32 scale per QACT columns, q8row_floats(cols) floats
 * in all, 9/32 of the fp32 row. quantize_rows makes them from f32 rows; linear_quantized_rows
 * takes them as the input of W, whose packed columns must be its input columns (no act-order,
 * no padding: int8_rows_fit), giving the very bits linear computes from the f32 rows (m of a
 * product of pass_rows rows, as linear's). */
static inline size_t q8row_floats(int cols) { return (size_t)cols / 4 + (size_t)cols / QACT; }
static inline bool int8_rows_fit(const wmat *w) {
    return w->act == WACT_INT8 && w->q && !w->q->col_of && w->q->kp == w->cols; /* kp: whole blocks of QACT */
}

/* Rows quantized before a collective moves them (a gather's), as records of floats: int8 rows
 * as above, or FP8 rows, a row's cols E4M3 codes rounded with a constant scale (an FP8
 * checkpoint's static input_scale), (cols + 3) / 4 floats. linear_quantized_rows takes either
 * as W's input and gives the very bits linear would from the f32 rows. */
typedef enum rows_code { ROWS_F32, ROWS_INT8, ROWS_FP8 } rows_code;
static inline size_t rows_floats(rows_code code, int cols) {
    return code == ROWS_FP8 ? ((size_t)cols + 3) / 4 : code == ROWS_INT8 ? q8row_floats(cols) : (size_t)cols;
}
/* x's rows as `code` rows into out (ldo floats apart); in_scale: FP8's constant. */
void quantize_rows(rows_code code, const float *x, size_t ldx, int rows, int cols, float in_scale, float *out,
                   size_t ldo);
void linear_quantized_rows(rows_code code, const float *xq, size_t ldq, int m, int chunk, int pass_rows, const wmat *w,
                           const float *bias, float *y, size_t ldy);

/* t[w.cols, w.rows] = W^T in f32, whatever W's format. -1 when t is NULL (its allocation failed)
 * or the identity it multiplies by cannot be allocated (recorded: kernel_scratch_check). */
int linear_transpose(const wmat *w, float *t);

/* out = x / sqrt(mean(x^2) + eps) * weight, over each `group` columns of `cols` (group = cols
 * for a whole-row norm); weight has `group` entries, or (wide) `cols`, each group its own. */
void rms_norm(const float *x, size_t ldx, float *out, size_t ldo, int rows, int cols, int group, const float *weight,
              bool wide, float eps);

/* What a model's RoPE tables are built from (model/rope_freq.h computes it). */
#define ROPE_MAX_PAIRS 512
typedef struct rope_freqs {
    int half;     /* rotary pairs per head */
    float factor; /* cos and sin times this: YaRN's and longrope's attention factor (else 1) */
    float inv[ROPE_MAX_PAIRS];
    bool has_local;
    float local[ROPE_MAX_PAIRS]; /* the sliding layers' own, unscaled (Gemma 3) */
    int long_after;              /* longrope: a pass reaching past this many positions of its
                                    sequence rotates by long_inv (0: no long set) */
    float long_inv[ROPE_MAX_PAIRS];
} rope_freqs;

/* RoPE tables: cos/sin [max_pos, half] of positions times the inverse frequencies inv_freq[half],
 * each multiplied by `factor`; with long_inv, a second set follows at rows max_pos + p. */
typedef struct rope_table {
    int max_pos, half;
    float *cos, *sin;
} rope_table;
int rope_table_init(rope_table *t, const float *inv_freq, const float *long_inv, int half, float factor, int max_pos,
                    loom_err *err);
void rope_table_free(rope_table *t);
/* RoPE at table rows pos[row] (positions, or past max_pos those of the long set) on n_heads heads of `stride` columns per row, rotating columns
 * [offset, offset + head_dim) of each (rotate_half pairs, or interleaved ones: see rope_desc)
 * and copying the others. */
void rope_apply(const rope_table *t, const float *x, size_t ldx, float *out, size_t ldo, int rows, int n_heads,
                int stride, int offset, bool interleaved, const int32_t *pos);

/* The same norm in two steps, for rows whose columns are spread over ranks: ss[r] = the sum of
 * squares of this rank's columns; once the ranks' ss are summed, rms_norm_by normalises by
 * sqrt(ss / features + eps), `features` being the whole row's width. */
void sum_squares(const float *x, size_t ldx, float *ss, size_t lds, int rows, int cols);
void rms_norm_by(const float *x, size_t ldx, const float *ss, size_t lds, float *out, size_t ldo, int rows, int cols,
                 int features, const float *weight, float eps);
/* out = x * sigmoid(g), g one value per row (gate_cols 1: Qwen2-MoE's shared-expert gate) or
 * one per element (gate_cols = cols: Qwen3.5's attention output gate). */
void sigmoid_gate(const float *x, size_t ldx, const float *g, size_t ldg, int gate_cols, float *out, size_t ldo,
                  int rows, int cols);
/* out = rms_norm(x) * weight * silu(z), over groups of `group` columns (a recurrent mixer's
 * output norm). */
void rms_norm_gated(const float *x, size_t ldx, const float *z, size_t ldz, float *out, size_t ldo, int rows, int cols,
                    int group, const float *weight, float eps);

/* Recurrent mixers (recurrent.c). A batch holds each sequence's rows together and in order
 * (loom_forward's rule); a sequence's state is `stride` floats at state + seq * stride, and a
 * row at position 0 starts it from zeros. */
#define CONV_MAX_KERNEL 16
/* Snapshots a pass takes of the recurrent state (prefix caching, runtime/state_cache.h): each
 * sequence seq's state after its first pos positions, copied to base + slot * stride in the
 * state's own layout. pos is a multiple of interval. */
typedef struct state_snap {
    int32_t seq, pos, slot;
} state_snap;
typedef struct state_snapshots {
    int n, interval;
    const state_snap *at;
    float *base;
} state_snapshots;
/* The causal depthwise convolution with SiLU over n_in inputs' channels side by side: input i
 * has width[i] channels, channel c's taps w[i] row c (ld[i] floats a row), oldest first, and
 * its bias bias[i][c] (bias[i] NULL: none). The state holds each sequence's last kernel - 1
 * input rows. */
typedef struct conv_inputs {
    int n_in, kernel;
    const float *x[3];
    size_t ldx[3];
    int width[3];
    const float *w[3], *bias[3];
    size_t ldw[3];
} conv_inputs;
void conv1d_silu(const conv_inputs *in, float *out, size_t ldo, int rows, const int32_t *pos, const int32_t *seq,
                 float *state, size_t stride, const state_snapshots *snaps);
/* The gated delta rule (Gated DeltaNet) over this rank's heads: qkv rows hold q and k
 * (n_k_heads of k_dim each) then v (n_v_heads of v_dim); b and a one value per value head.
 * Value head h reads key head h / (n_v_heads / n_k_heads) and keeps a k_dim x v_dim state. */
#define DELTA_MAX_DIM 512 /* the widest key or value head */
typedef struct delta_shape {
    int n_k_heads, n_v_heads, k_dim, v_dim;
    const float *a_log, *dt_bias; /* per value head */
} delta_shape;
void gated_delta(const delta_shape *sh, const float *qkv, size_t ldq, const float *b, size_t ldb, const float *a,
                 size_t lda, float *out, size_t ldo, int rows, const int32_t *pos, const int32_t *seq, float *state,
                 size_t stride, const state_snapshots *snaps);
/* Mamba-2's selective scan over this rank's heads: xbc rows hold x (n_heads of head_dim), then
 * B and C (n_groups of d_state each); dt one value per head. Head h reads group
 * h / (n_heads / n_groups) and keeps a head_dim x d_state state; its output row is
 * C . state + D x. */
typedef struct ssm_shape {
    int n_heads, head_dim, n_groups, d_state;
    float dt_min, dt_max;
    const float *a_log, *dt_bias, *d; /* per head */
} ssm_shape;
void ssm_scan(const ssm_shape *sh, const float *xbc, size_t ldx, const float *dt, size_t ldt, float *out, size_t ldo,
              int rows, const int32_t *pos, const int32_t *seq, float *state, size_t stride,
              const state_snapshots *snaps);

/* A gated activation as the kernels take it (graph/module.h's glu_desc says what each is). */
typedef enum gate_kind { GATE_SILU, GATE_GELU_TANH, GATE_SILU_CLAMPED, GATE_RELU2 } gate_kind; /* RELU2: no gate */
typedef struct gate_fn {
    gate_kind kind;
    float limit, alpha; /* GATE_SILU_CLAMPED */
} gate_fn;
/* out = act(gate) * up by f */
void glu(const gate_fn *f, const float *gate, size_t ldg, const float *up, size_t ldu, float *out, size_t ldo, int rows,
         int cols);
/* out = gelu(x) by its tanh approximation (a vision tower's MLP) */
void gelu_tanh_rows(const float *x, size_t ldx, float *out, size_t ldo, int rows, int cols);
/* out = (x - mean) / sqrt(var + eps) * weight + bias over each row (a vision tower's LayerNorm) */
void layer_norm(const float *x, size_t ldx, float *out, size_t ldo, int rows, int cols, const float *weight,
                const float *bias, float eps);
/* out = cap * tanh(x / cap) */
void softcap_rows(const float *x, size_t ldx, float cap, float *out, size_t ldo, int rows, int cols);
/* out = max(x, 0)^2 */
void relu2_rows(const float *x, size_t ldx, float *out, size_t ldo, int rows, int cols);
/* (ldb 0 adds one row, e.g. a bias, to every row of a; out may be a) */
void add_rows(const float *a, size_t lda, const float *b, size_t ldb, float *out, size_t ldo, int rows, int cols);
void scale_rows(const float *a, size_t lda, float s, float *out, size_t ldo, int rows, int cols);
/* out[r] = table[ids[r]] (ids outside [v0, v0 + table.rows) give zero rows: vocab shards). */
void embed_rows(const wmat *table, int v0, const int32_t *ids, int rows, float *out, size_t ldo);

/* Mixture of experts over a batch of rows (see moe.c). */
typedef struct moe_shape {
    int hidden, inter, n_experts, top_k; /* inter: the expert features this rank holds */
    bool softmax_of_topk;                /* GraniteMoE: softmax over the k chosen logits; else over all, then top k */
    bool norm_topk;                      /* renormalise the chosen probabilities to sum to 1 */
    /* DeepSeek routing (moe_route describes the order of the steps) */
    bool sigmoid;            /* scores are sigmoid(logit), each on its own, instead of a softmax */
    int n_group, topk_group; /* group-limited selection over n_group equal groups (0: none) */
    bool group_top2_sum;     /* a group's score is the sum of its two best scores, else its best */
    const float *bias;       /* e_score_correction_bias: added to the scores to choose, not to weigh (NULL: none) */
    float scale;             /* routed_scaling_factor: multiplies the final weights (0 counts as 1) */
    gate_fn gate;            /* the experts' activation */
    /* the experts' biases (GPT-OSS; NULL: none): [3e + j] expert e's gate, up and down bias,
     * indexed like `experts`, each NULL where absent (down's on all but one TP rank) */
    const float *const *expert_bias;
} moe_shape;

/* Buffers for moe_forward, sized once for the engine's largest batch. */
typedef struct moe_scratch {
    int threads;
    int32_t *choice, *count, *start;   /* routing; pairs per expert, where each expert's begin */
    int32_t *token, *pair, *slot;      /* by expert: row and pair (r*k + j); slot[pair]: its place */
    float *weight, *x, *gate, *up, *y; /* x, gate, up: one set per thread */
} moe_scratch;
int moe_scratch_init(moe_scratch *s, int rows, const moe_shape *sh);
size_t moe_scratch_bytes(int rows, const moe_shape *sh, int threads);
void moe_scratch_free(moe_scratch *s);

/* Routing: choice[r*k + j], weight[r*k + j] = the j-th expert of row r and its weight. Ties go
 * to the lower expert index (and between groups to the lower group), so every rank (and every
 * mode) routes a row the same way. Steps: scores (softmax over all, or sigmoid each); the
 * choosing scores are the scores plus bias; with groups, each group's choosing score (its best,
 * or the sum of its two best) picks topk_group groups and only their experts stay candidates;
 * the top_k candidates by choosing score are chosen; their weights are their scores (without
 * the bias), renormalised if norm_topk (sum + 1e-20 under sigmoid, as transformers' DeepSeek-V3
 * does), then multiplied by scale. softmax_of_topk (GraniteMoE) takes none of these options. */
void moe_route(const float *logits, size_t ldl, int rows, const moe_shape *sh, int32_t *choice, float *weight);
/* out[r] = sum over row r's experts e, in increasing e, of weight * down_e(silu(gate_e x) * up_e x);
 * experts[3e..3e+2] = gate, up, down. Each expert runs as GEMMs over the rows routed to it, the
 * experts spread over the threads (one GEMM of few rows uses one core better than two). */
void moe_forward(const moe_shape *sh, const wmat *experts, const float *x, size_t ldx, const float *logits, size_t ldl,
                 int rows, float *out, size_t ldo, moe_scratch *s);
/* The experts' part of moe_forward, with each row's choices given: choice[r*k + j] indexes
 * `experts` (n_experts of them), negative where the pair belongs to another call (expert
 * parallelism: an expert on another rank); a row with no pair here gets zeros. */
void moe_experts(const moe_shape *sh, const wmat *experts, const float *x, size_t ldx, int rows, const int32_t *choice,
                 const float *weight, float *out, size_t ldo, moe_scratch *s);

/* KV cache of one layer, paged: a pool of blocks of block_size positions for K and for V (a
 * latent cache, MLA, has no V: its rows are kv_c then k_pe), laid out by kv_format.c: a block is
 * its slabs of `slab` columns (a kv head; a latent cache's whole row), a slab its positions'
 * records of `record` bytes, each the values in the cache's dtype (loom.h's loom_kv_dtype) and,
 * for an 8-bit dtype, an fp32 scale per `group` columns. row_bytes is a position's bytes over
 * all slabs. Sequence s's blocks are tables[s * table_width ...], shared by every layer, so its
 * position p is row p % block_size of block tables[s * table_width + p / block_size]; row
 * numbers below are the pool's (block * block_size + slot). */
typedef struct kv_layer {
    char *k, *v;
    int kv_width, block_size;
    loom_kv_dtype dt;
    int slab, group;
    size_t record, row_bytes;
    const int32_t *tables;
    int table_width;
} kv_layer;

/* The bytes of a position of `width` values in dtype dt, in slabs of `slab`, a scale per
 * `group` of them. */
size_t kv_row_bytes(loom_kv_dtype dt, int width, int slab, int group);
/* Sets c's dtype and layout (c->kv_width set). */
void kv_layer_format(kv_layer *c, loom_kv_dtype dt, int slab, int group);
/* Stores x (kv_width values) as row `row` of pool (c->k or c->v), rounded to the cache's dtype. */
void kv_write(const kv_layer *c, char *pool, size_t row, const float *x);
/* Rows row..row+n-1 of pool (in one block), columns col..col+cols-1 (in one slab, col a multiple
 * of the group), as fp32: a pointer into the pool where it holds fp32 (*ld: the stride between
 * rows in floats), else buf, where they are widened ([n][cols], *ld = cols). */
const float *kv_read(const kv_layer *c, const char *pool, size_t row, int n, int col, int cols, float *buf, size_t *ld);

/* The row of the pool holding position pos of a sequence whose blocks are blocks[]. */
static inline size_t block_row(const int32_t *blocks, int block_size, int pos) {
    return (size_t)blocks[pos / block_size] * block_size + pos % block_size;
}

/* The row of the pool holding position pos of sequence seq. */
static inline size_t kv_row(const kv_layer *c, int seq, int pos) {
    return block_row(c->tables + (size_t)seq * c->table_width, c->block_size, pos);
}

/* Multi-head latent attention's dimensions (kv_lora 0: plain attention). */
typedef struct mla_shape {
    int kv_lora, nope, rope, v_dim;
} mla_shape;

/* Causal attention for a flattened batch: row r is token at position pos[r] of sequence
 * seq[r]. Writes k/v into the cache first, then each query attends to its sequence's keys
 * 0..pos (or the last `window` of them), or 0..reach[r] where reach is given (an image's tokens,
 * all in this pass, seeing each other: attend_task's reach). Rows of one sequence are
 * contiguous. */
typedef struct attn_shape {
    int n_heads, n_kv_heads, head_dim, window;
    float scale;
    mla_shape mla;
    float softcap;      /* scores become softcap * tanh(score / softcap) (0: none; Gemma 2) */
    const float *sinks; /* this rank's heads' sink logits (attend_task's; NULL: none) */
} attn_shape;
void attention(const attn_shape *s, kv_layer *cache, const float *q, size_t ldq, const float *k, size_t ldk,
               const float *v, size_t ldv, float *out, size_t ldo, int rows, const int32_t *pos, const int32_t *seq,
               const int32_t *reach);

/* One attention task (attention.c): `rows` query rows q + r*ldq, row i*g + j being query i (at
 * position p0 + i) of head j, each qk_dim long, over the keys and values of positions 0..p0+i
 * (or the last `window`); row i*g + j's output (v_dim) goes to out + i*ldo + j*head_stride.
 * The key of position p is k[p*ldk], or, from a paged cache, columns kcol.. of row
 * (blocks[p / block_size] * block_size + p % block_size) of kpool; values likewise. Keys are
 * visited in chunks at the same positions either way (multiples of the chunk, which never crosses
 * a block), so paged and contiguous keys give the same bits. */
typedef struct attend_task {
    const float *q;
    size_t ldq;
    int rows, g, qk_dim, v_dim, p0, window;
    float scale;
    const float *k, *v; /* contiguous keys and values (cache NULL) */
    size_t ldk, ldv;
    float *out;
    size_t ldo, head_stride;
    const kv_layer *cache;     /* NULL: contiguous keys and values */
    const char *kpool, *vpool; /* the cache's pools holding the keys and values, */
    int kcol, vcol;            /* from these columns */
    const int32_t *blocks;     /* the sequence's blocks in the cache */
    int block_size;
    float softcap;      /* 0: none */
    const float *sinks; /* per stacked head (row r's: sinks[r % g]), a logit that joins each
                           softmax's denominator and weighs no value (GPT-OSS); NULL: none */
    /* per query i, the last key position it sees where that is past its own (an image's tokens
     * see each other, Gemma 3's; a vision tower's every patch sees all): non-decreasing in i,
     * never before the query's position; NULL: each sees up to itself */
    const int32_t *reach;
} attend_task;
void attend(const attend_task *t);
/* The end of the run of rows starting at r: same sequence, consecutive positions, at most `most`. */
int attention_run_end(int r, int rows, const int32_t *pos, const int32_t *seq, int most);

/* Multi-head latent attention (mla.c): q holds n_heads heads of nope + rope (rotated) columns,
 * kv_c the normalised latent, k_pe the rotated shared key; the cache takes [kv_c | k_pe] per
 * token. kv_b_t is kv_b_proj's transpose [kv_lora, n_heads * (nope + v_dim)] (f32). A sequence
 * decoding one token attends over the latent cache (absorbed: q_nope times W_UK per head, the
 * latent output times W_UV); longer runs expand the cache into per-head K and V. */
void mla_attention(const attn_shape *s, kv_layer *cache, const float *q, size_t ldq, const float *kv_c, size_t ldc,
                   const float *k_pe, size_t ldp, const float *kv_b_t, float *out, size_t ldo, int rows,
                   const int32_t *pos, const int32_t *seq);

#endif

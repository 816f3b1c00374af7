/* CPU variants: the one home of everything that depends on the instruction set. Each variant
 * (generic C, AVX2+FMA, AVX2 with AVX-VNNI, AVX-512, NEON, NEON with sdot) is a table of the hand-written hot kernels, all built
 * from the same source (variant.c over simd.h) with that variant's compiler flags. The table is
 * chosen once, at start-up, from what the CPU reports (cpuid on x86-64, hwcaps on aarch64), so
 * one binary runs everywhere at the speed its CPU allows; LOOM_CPU forces a lower variant.
 * On x86-64, avx512amx is avx512bf16 with the AMX int8 tiles for prefill (Sapphire Rapids and
 * later Xeons); avx512bf16 is AVX-512 with the VNNI and BF16 dot products (Zen 4 and later,
 * Cooper Lake, Sapphire Rapids); avx512 the same vectors without them; avx2vnni AVX2 with the
 * VEX-encoded int8 dot product of CPUs without AVX-512 (Alder Lake, Sierra Forest). On aarch64, neondot is
 * NEON with the Armv8.2 int8 dot product (sdot; Neoverse N1 and later).
 * GEMMs are not here: oneDNN and OpenBLAS dispatch on the CPU themselves. */
#ifndef LOOM_CPU_CPU_H
#define LOOM_CPU_CPU_H
#include <stddef.h>
#include <stdint.h>

#include "loom.h"

struct qlayout;

/* Columns per scale of int8 activations: the packed block, so that every packed row (whole
 * blocks) is whole scale blocks. 64 and 128 measured within run-to-run noise of it on Zen 4
 * (1B shape, prefill 512) and further from the exact logits (golden models' mean difference
 * 2.6% at 32, 2.9% at 64, 3.4% at 128). */
#define QACT 32

/* One row of activations quantized for the integer dot products of a quantized matrix
 * (kernels/linear.c makes them): codes q in the matrix's packed column order, value q * d
 * with one scale d per QACT columns, and per quantization group the sum of the row's values
 * q * d over the group's columns, for the zero points (for a GGUF row: dot_gguf_q8's sums). */
typedef struct q8row {
    const int8_t *q;
    const float *d;
    const float *gsum;
} q8row;

/* panel_q8's shape: input rows a step (an AMX tile's rows), weight rows a panel (its columns) */
#define PANEL_Q8_ROWS 16
#define PANEL_Q8_W    16
/* panel_q8's scratch for a matrix: its panel's codes as the tiles take them, and its scales */
#define PANEL_Q8_PACK(q) ((size_t)(q)->kp * PANEL_Q8_W + (size_t)(q)->n_groups * 2 * PANEL_Q8_W * sizeof(float))
/* panel_gguf_q8's scratch for a slice of kp columns: its rows' codes as they are and as the
 * tiles take them, a partial step's input rows, and two factors (dl, ml) per 16 columns a row */
#define PANEL_GGUF_PACK(kp)                                                                                            \
    ((size_t)(kp) * (2 * PANEL_Q8_W + PANEL_Q8_ROWS) + (size_t)(kp) / 16 * 2 * PANEL_Q8_W * sizeof(float))
/* Where in that scratch the rows' codes as decoded (kp a row), their dl and their ml
 * (PANEL_Q8_W lanes a sub-block) sit, after the tiles' codes and input rows */
static inline int8_t *panel_gguf_codes(uint8_t *pack, int kp) {
    return (int8_t *)pack + (size_t)kp * (PANEL_Q8_W + PANEL_Q8_ROWS);
}
static inline float *panel_gguf_dl(uint8_t *pack, int kp) {
    return (float *)(panel_gguf_codes(pack, kp) + (size_t)kp * PANEL_Q8_W);
}
static inline float *panel_gguf_ml(uint8_t *pack, int kp) {
    return panel_gguf_dl(pack, kp) + (size_t)kp / 16 * PANEL_Q8_W;
}

/* dot_gguf_q8's most input rows a call (a speculative verify pass's, or a decode batch's, share) */
#define GGUF_Q8_ROWS 8

typedef struct cpu_kernels {
    const char *name;
    int floats; /* in one vector (1: generic) */
    /* y[r] = x[r] . w over k columns, for nr (1 or 2) input rows and one weight row: the
     * streaming GEMV of decode, which reads each weight once for both input rows. */
    void (*dot_f32)(const float *const *x, int nr, const float *w, int k, float y[2]);
    void (*dot_bf16)(const float *const *x, int nr, const uint16_t *w, int k, float y[2]);
    void (*widen_bf16)(const uint16_t *src, float *dst, int n);
    /* A KV cache's 8-bit codes (kernels/kv_format.c) times their scale: int8 integers, or E4M3
     * numbers (e4m3), each value rounded once, as the scalar widening rounds it. */
    void (*widen_kv8)(const uint8_t *src, float *dst, int n, float scale, int e4m3);
    /* The same for row `row` of a quantized matrix (quant/quant.h), whose packed bytes are w:
     * x in its packed column order; and the row dequantized into dst[q->kp]. */
    void (*dot_q)(const float *const *x, int nr, const uint8_t *w, const struct qlayout *q, size_t row, float y[2]);
    void (*dequant_q)(const uint8_t *w, const struct qlayout *q, size_t row, float *dst);
    /* A GGUF row (QCODE_GGUF, a block type, the slice starting on a block of 32) on int8
     * activations, in every variant: y[r] = x[r] . w for nr (1 to GGUF_Q8_ROWS) rows, whose gsum holds
     * each 4 columns' codes added (exact small integers). One order everywhere, so every variant
     * and every way of batching rows gives the same bits: per block of 32 columns, lane k (k < 8)
     * takes the exact integer sum of weight codes times activation codes over columns
     * 4k..4k+3, times (its sub-block's scale times the block's activation scale, one rounding),
     * added (fused) into lane k of one of two chains by the block's parity; for a type with
     * mins, the lane's gsum times (its sub-block's min times the activation scale) likewise into
     * two more; each pair of chains is added lane by lane, its eight lanes in the tree
     * ((0 + 4) + (2 + 6)) + ((1 + 5) + (3 + 7)), and y is the first sum less the second. */
    void (*dot_gguf_q8)(const q8row *x, int nr, const uint8_t *w, const struct qlayout *q, float *y);
    /* The reduced-precision products (--dtype auto): y[r] = x[r] . w for nr (1 to 4) rows.
     * dot_q8: int8 activations against a quantized row, integer sums per block scaled in fp32,
     * in the variants without tile_q8 (NEON, neondot, generic; NULL on x86);
     * dot_bf16x: bf16 activations against nw (1 or 2) bf16 rows w[j] with fp32 accumulation,
     * y[j][r] = x[r] . w[j], NULL in variants whose CPUs have no bf16 dot product (their bf16
     * weights compute exactly instead). */
    void (*dot_q8)(const q8row *x, int nr, const uint8_t *w, const struct qlayout *q, const float *sz, float y[4]);
    void (*dot_bf16x)(const uint16_t *const *x, int nr, const uint16_t *const *w, int nw, int k, float y[2][4]);
    /* dot_fp8x: bf16 activations (in the packed column order) against one row of FP8 codes
     * (qlayout.code), widened to bf16 exactly, fp32 sums per group times the group's scale;
     * NULL where dot_bf16x is (FP8 weights then compute exactly). */
    void (*dot_fp8x)(const uint16_t *const *x, int nr, const uint8_t *w, const struct qlayout *q, const float *sz,
                     float y[4]);
    /* n FP8 codes (n a multiple of 32; e5m2, else E4M3) as bf16, exactly, for the bf16 GEMM of
     * FP8 prefill; NULL where dot_fp8x is */
    void (*widen_fp8_bf16)(const uint8_t *src, uint16_t *dst, int n, int e5m2);
    /* On x86 (NULL elsewhere), dot_q8 as a tile: y[r * 8 + j] = x[r] . row j of eight
     * quantized rows w[j] (scales and zero points sz[j]), nr 1 to 8, with the rows in the
     * vector lanes, so each block is scaled once for all eight. Every way of summing, in every
     * variant, takes one order, so prefill and decode give the same bits: each 32-column
     * block's exact integer sum times its activation scale, added in fp32 (fused) into the
     * group's sum; that times the group's scale into the row's; scale times zero point times
     * the row's group sum into the zero term, taken off at the end. */
    void (*tile_q8)(const q8row *x, int nr, const uint8_t *const *w, const struct qlayout *q, const float *const *sz,
                    float *y);
    /* On CPUs with AMX (NULL elsewhere), tile_q8's products for a prefill's panel: nr input rows
     * (a multiple of PANEL_Q8_ROWS; x[i].q is x[0].q + i * x_stride bytes) against PANEL_Q8_W
     * adjacent weight rows from w, ld bytes apart (their scales and zero points from sz, a row's
     * 2 * n_groups floats apart), into y[i * ldy + j], in tile_q8's order and so with its bits.
     * pack is scratch of PANEL_Q8_PACK bytes. */
    void (*panel_q8)(const q8row *x, size_t x_stride, int nr, const uint8_t *w, size_t ld, const struct qlayout *q,
                     const float *sz, uint8_t *pack, float *y, size_t ldy);
    /* A GGUF prefill's products (dot_gguf_q8 streams decode): AMX's tiles in avx512amx, AVX-512
     * VNNI in avx512bf16, 256-bit products in avx2, avx2vnni and avx512, sdot in neondot,
     * widening products in neon; NULL in generic. nr input rows (x[i].q = x[0].q + i * x_stride bytes) against nw (1 to
     * PANEL_Q8_W) weight rows of a GGUF slice from w, ld bytes apart, into y[i * ldy + j]. A
     * sub-block is the type's scale step, gtype_split's 16 or 32 columns; x[i].gsum holds each
     * sub-block's activation codes added times the block's scale (one rounding), xsum + i * (kp /
     * width) the integer sums themselves. The order, the same in every variant (the exact integer
     * sums are) and for any nr and nw and any row's place among them: per block of 32 columns, in
     * order, one chain of fused multiply-adds takes the exact integer sum of weight codes times
     * activation codes over each sub-block: a 32-column one times (its dl times the block's
     * activation scale, one rounding); two of 16 as (the first's sum times its dl, plus, fused, the
     * second's times its dl) times the activation scale; for a type with mins, then each
     * sub-block's -ml times gsum. pack is scratch of PANEL_GGUF_PACK bytes. */
    void (*panel_gguf_q8)(const q8row *x, size_t x_stride, const int32_t *xsum, int nr, const uint8_t *w, size_t ld,
                          int nw, const struct qlayout *q, uint8_t *pack, float *y, size_t ldy);
    float (*sum_squares)(const float *x, int n);
    /* out = x * s * w (RMSNorm's scaling by its inverse root and weight) */
    void (*scale_mul)(const float *x, float s, const float *w, float *out, int n);
    /* one head of rotate_half RoPE: out[i], out[i+half] from x[i], x[i+half] */
    void (*rope)(const float *x, const float *cos, const float *sin, float *out, int half);
    void (*silu_mul)(const float *gate, const float *up, float *out, int n);
    /* GPT-OSS's clamped SwiGLU: g = min(gate, limit), u = clamp(up, -limit, limit),
     * out = g * sigmoid(alpha g) * (u + 1) */
    void (*silu_clamped_mul)(const float *gate, const float *up, float *out, int n, float limit, float alpha);
    /* gelu_tanh(gate) * up, GELU's tanh approximation written as x * sigmoid(2u) */
    void (*gelu_tanh_mul)(const float *gate, const float *up, float *out, int n);
    void (*add)(const float *a, const float *b, float *out, int n);
    void (*axpy)(float a, const float *x, float *y, int n); /* y += a * x (the MoE combine) */
    void (*scale)(const float *x, float s, float *out, int n);
    /* y[r][c] = (y[r][c] if accumulate, else 0) + the sum over i < k of x[r * xr + i * xk] *
     * b[i * ldb + c], for r < m and c < n. Each element is one chain of fused multiply-adds in
     * increasing i, so its bits depend on its own row of x and column of b alone: not on m or
     * n, where its row or column sits, the tile or thread that ran it, or the vector width
     * (the FMA variants give the same bits). Attention's products run here, not in a BLAS,
     * whose order changes with the shape and the CPU (kernels/attention.c). */
    void (*gemm_ordered)(int m, int n, int k, const float *x, size_t xr, size_t xk, const float *b, size_t ldb,
                         float *y, size_t ldy, int accumulate);
    /* One key block of attention's online softmax with the queries in columns: s holds nk rows
     * (keys) of n scores (ld lds), m and l each query's running maximum and sum. Per column c:
     * mx = max(m[c], s[j][c] over j); corr[c] = exp(m[c] - mx); s[j][c] = exp(s[j][c] - mx);
     * l[c] = l[c] * corr[c] + (their sum in increasing j); m[c] = mx. Elementwise in c, so a
     * query's result is a function of its own column; a score of -inf adds an exact zero. */
    void (*softmax_step)(float *s, size_t lds, int nk, int n, float *m, float *l, float *corr);
    /* Gated DeltaNet's step of one value head (kernels/recurrent.c): state S of kd rows of vd
     * (row i is key i's); S *= decay; d = beta (v - S^T k); S += k d^T; out = S^T q. Each
     * element's sums run over i in increasing order. */
    void (*delta_step)(float *S, int kd, int vd, float decay, float beta, const float *k, const float *v,
                       const float *q, float *out);
    /* Mamba-2's step of one head (kernels/recurrent.c): state S of hd rows of ds (row p is
     * channel p's); S[p] = S[p] decay + (step x[p]) B; y[p] = S[p] . C + d x[p]. */
    void (*ssm_step)(float *S, int hd, int ds, float decay, float step, const float *x, const float *B, const float *C,
                     float d, float *y);
    /* One row of the causal depthwise convolution over n channels, then SiLU: out[c] =
     * silu(bias[c] + the sum over j < k of taps[j * ldt + c] * rows[j][c]), j from the oldest
     * input to the current one (bias NULL: none). */
    void (*conv_row)(const float *const *rows, const float *taps, size_t ldt, int k, const float *bias, float *out,
                     int n);
} cpu_kernels;

/* The variant in use; chosen on first use if cpu_init was not called. Never fails: when the
 * choice failed (an unusable LOOM_CPU, which cpu_init reports) it warns once on stderr and
 * returns the generic variant. */
const cpu_kernels *cpu(void);
/* Chooses the variant: the best this CPU runs, or LOOM_CPU's if it names one the CPU runs. */
int cpu_init(loom_err *err);

/* A spinning waiter's pause: lets the sibling hyperthread run and saves power. */
static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

#endif

/* Linear layers y = x W^T. Many rows (prefill) are compute bound: f32 weights go straight to
 * the GEMM (gemm.c); bf16 and quantized weights are widened (dequantized) panel by panel into
 * a scratch buffer for it, the conversion amortised over the rows. Few rows (decode) are memory
 * bound: a fused kernel streams each weight row once, widening in registers, so bf16 moves
 * half the bytes of f32 and 4-bit weights an eighth. A quantized matrix's columns may be in a
 * packed order (quant/quant.h); the input is then gathered into that order first. */
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "kernels/kernels.h"
#include "tensor/tensor.h"
#include "util/alloc.h"

/* Up to this many rows use the streaming kernel. A decode step of 16 sequences on the 1B shape
 * (Zen 2, AVX2): bf16 weights 543 ms streamed against 636 ms widened into panels for the GEMM,
 * f32 weights level (612 against 600 ms); the server's steps are that size. */
#define FEW_ROWS 16
/* f32 bytes of bf16 weights widened per sgemm call: wide enough that each call is a large GEMM
 * for OpenBLAS (256 rows of 2048 columns measured slower at 512 tokens), small enough to stay
 * a modest scratch for any width */
#define PANEL_BYTES ((size_t)8 << 20)

/* The columns a row of w's kernels reads: its packed columns when quantized. */
static int kernel_cols(const wmat *w) { return w->q ? w->q->kp : w->cols; }

/* x's m rows in w's packed column order (zero where a packed column is padding), or x itself
 * when w's columns are in input order; NULL when its scratch cannot be had (kernels.h). */
static const float *packed_input(const float *x, size_t *ldx, int m, const wmat *w) {
    static _Thread_local fbuf gathered;
    if (!w->q || !w->q->col_of) return x;
    int kp = w->q->kp;
    float *g = fbuf_get(&gathered, (size_t)m * kp);
    if (!g) return NULL;
    const int32_t *col_of = w->q->col_of;
    for (int r = 0; r < m; r++)
        for (int p = 0; p < kp; p++) g[(size_t)r * kp + p] = col_of[p] >= 0 ? x[(size_t)r * *ldx + col_of[p]] : 0.0f;
    *ldx = kp;
    return g;
}

/* Each weight row is read once for a pair of input rows (the last may be alone). */
static void linear_few(const float *x, size_t ldx, int m, const wmat *w, float *y, size_t ldy) {
    const cpu_kernels *k = cpu();
    if (!(x = packed_input(x, &ldx, m, w))) return;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < w->rows; n++)
        for (int r = 0; r < m; r += 2) {
            int nr = r + 1 < m ? 2 : 1;
            const float *xr[2] = {x + (size_t)r * ldx, x + (size_t)(r + nr - 1) * ldx};
            float acc[2];
            if (w->q)
                k->dot_q(xr, nr, (const uint8_t *)w->data + (size_t)n * w->ld, w->q,
                         w->q->sz + (size_t)n * w->q->n_groups * 2, acc);
            else if (w->dt == DT_F32) k->dot_f32(xr, nr, (const float *)w->data + (size_t)n * w->ld, w->cols, acc);
            else k->dot_bf16(xr, nr, (const uint16_t *)w->data + (size_t)n * w->ld, w->cols, acc);
            for (int i = 0; i < nr; i++) y[(size_t)(r + i) * ldy + n] = acc[i];
        }
}

/* Weight row n widened to f32 into dst[kernel_cols(w)]. */
static void widen_row(const cpu_kernels *k, const wmat *w, int n, float *dst) {
    if (w->q)
        k->dequant_q((const uint8_t *)w->data + (size_t)n * w->ld, w->q, w->q->sz + (size_t)n * w->q->n_groups * 2,
                     dst);
    else k->widen_bf16((const uint16_t *)w->data + (size_t)n * w->ld, dst, w->cols);
}

/* Rows in chunks of `chunk`, each its own sgemm (see linear_chunked); a panel of bf16 or
 * quantized weights is widened once for all of them. */
static void linear_panels(const float *x, size_t ldx, int m, int chunk, const wmat *w, float *y, size_t ldy) {
    static _Thread_local fbuf panel;
    int cols = kernel_cols(w);
    int rows = (int)(PANEL_BYTES / sizeof(float) / (size_t)cols);
    if (rows < 16) rows = 16;
    float *pn = fbuf_get(&panel, (size_t)rows * cols);
    if (!pn || !(x = packed_input(x, &ldx, m, w))) return;
    const cpu_kernels *k = cpu();
    for (int n0 = 0; n0 < w->rows; n0 += rows) {
        int nb = w->rows - n0 < rows ? w->rows - n0 : rows;
#pragma omp parallel for schedule(static)
        for (int r = 0; r < nb; r++) widen_row(k, w, n0 + r, pn + (size_t)r * cols);
        for (int r0 = 0; r0 < m; r0 += chunk)
            gemm_f32(m - r0 < chunk ? m - r0 : chunk, nb, cols, x + (size_t)r0 * ldx, ldx, pn, cols,
                     y + (size_t)r0 * ldy + n0, ldy);
    }
}

void linear_chunked(const float *x, size_t ldx, int m, int chunk, int pass_rows, const wmat *w, const float *bias,
                    float *y, size_t ldy) {
    if (m <= 0) return;
    if (pass_rows <= FEW_ROWS) /* rows are independent here: chunks change nothing */
        linear_few(x, ldx, m, w, y, ldy);
    else if (w->dt == DT_F32 && !w->q)
        for (int r0 = 0; r0 < m; r0 += chunk)
            gemm_f32(m - r0 < chunk ? m - r0 : chunk, w->rows, w->cols, x + (size_t)r0 * ldx, ldx, w->data, w->ld,
                     y + (size_t)r0 * ldy, ldy);
    else linear_panels(x, ldx, m, chunk, w, y, ldy);
    if (bias) add_rows(y, ldy, bias, 0, y, ldy, m, w->rows);
}

void linear(const float *x, size_t ldx, int m, int pass_rows, const wmat *w, const float *bias, float *y, size_t ldy) {
    linear_chunked(x, ldx, m, m, pass_rows, w, bias, y, ldy);
}

/* Through the product with an identity, so every weight format comes out widened exactly as the
 * kernels widen it. */
int linear_transpose(const wmat *w, float *t) {
    int n = w->cols;
    loom_err why;
    float *eye = t ? mem_zalloc((size_t)n * n, sizeof *eye, "the identity of a transpose", &why) : NULL;
    if (!eye) {
        if (t) kernel_scratch_failed(&why);
        return -1;
    }
    for (int i = 0; i < n; i++) eye[(size_t)i * n + i] = 1;
    linear(eye, n, n, n, w, NULL, t, w->rows);
    free(eye);
    return 0;
}

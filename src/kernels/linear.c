/* Linear layers y = x W^T. Many rows (prefill) are compute bound: f32 weights go straight to
 * sgemm, bf16 weights are widened panel by panel into a scratch buffer for sgemm (the
 * conversion is amortised over the rows). Few rows (decode) are memory bound: a fused kernel
 * streams each weight row once, widening bf16 in registers, so bf16 moves half the bytes. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "kernels/kernels.h"

#define FEW_ROWS 8 /* up to this many rows use the streaming kernel */
/* f32 bytes of bf16 weights widened per sgemm call: wide enough that each call is a large GEMM
 * for OpenBLAS (256 rows of 2048 columns measured slower at 512 tokens), small enough to stay
 * a modest scratch for any width */
#define PANEL_BYTES ((size_t)8 << 20)

/* Each weight row is read once for a pair of input rows (the last may be alone). */
static void linear_few(const float *x, size_t ldx, int m, const wmat *w, float *y, size_t ldy) {
    const cpu_kernels *k = cpu();
#pragma omp parallel for schedule(static)
    for (int n = 0; n < w->rows; n++)
        for (int r = 0; r < m; r += 2) {
            int nr = r + 1 < m ? 2 : 1;
            const float *xr[2] = {x + (size_t)r * ldx, x + (size_t)(r + nr - 1) * ldx};
            float acc[2];
            if (w->dt == DT_F32) k->dot_f32(xr, nr, (const float *)w->data + (size_t)n * w->ld, w->cols, acc);
            else k->dot_bf16(xr, nr, (const uint16_t *)w->data + (size_t)n * w->ld, w->cols, acc);
            for (int i = 0; i < nr; i++) y[(size_t)(r + i) * ldy + n] = acc[i];
        }
}

/* Rows in chunks of `chunk`, each its own sgemm (see linear_chunked); a bf16 panel is widened
 * once for all of them. */
static void linear_bf16_panels(const float *x, size_t ldx, int m, int chunk, const wmat *w, float *y, size_t ldy) {
    /* a scratch panel per calling thread, grown once: steady-state calls allocate nothing */
    static _Thread_local float *panel;
    static _Thread_local size_t panel_cap;
    int rows = (int)(PANEL_BYTES / sizeof(float) / (size_t)w->cols);
    if (rows < 16) rows = 16;
    size_t need = (size_t)rows * w->cols;
    if (need > panel_cap) {
        free(panel);
        panel = aligned_alloc(64, need * sizeof *panel);
        panel_cap = need;
    }
    const uint16_t *wd = w->data;
    const cpu_kernels *k = cpu();
    float *pn = panel; /* the worker threads below have their own (empty) thread-locals */
    for (int n0 = 0; n0 < w->rows; n0 += rows) {
        int nb = w->rows - n0 < rows ? w->rows - n0 : rows;
#pragma omp parallel for schedule(static)
        for (int r = 0; r < nb; r++) k->widen_bf16(wd + (size_t)(n0 + r) * w->ld, pn + (size_t)r * w->cols, w->cols);
        for (int r0 = 0; r0 < m; r0 += chunk)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m - r0 < chunk ? m - r0 : chunk, nb, w->cols, 1.0f,
                        x + (size_t)r0 * ldx, (int)ldx, pn, w->cols, 0.0f, y + (size_t)r0 * ldy + n0, (int)ldy);
    }
}

void linear_chunked(const float *x, size_t ldx, int m, int chunk, int pass_rows, const wmat *w, const float *bias,
                    float *y, size_t ldy) {
    if (m <= 0) return;
    if (pass_rows <= FEW_ROWS) /* rows are independent here: chunks change nothing */
        linear_few(x, ldx, m, w, y, ldy);
    else if (w->dt == DT_F32)
        for (int r0 = 0; r0 < m; r0 += chunk)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m - r0 < chunk ? m - r0 : chunk, w->rows, w->cols, 1.0f,
                        x + (size_t)r0 * ldx, (int)ldx, w->data, (int)w->ld, 0.0f, y + (size_t)r0 * ldy, (int)ldy);
    else
        linear_bf16_panels(x, ldx, m, chunk, w, y, ldy);
    if (bias) add_rows(y, ldy, bias, 0, y, ldy, m, w->rows);
}

void linear(const float *x, size_t ldx, int m, int pass_rows, const wmat *w, const float *bias, float *y,
            size_t ldy) {
    linear_chunked(x, ldx, m, m, pass_rows, w, bias, y, ldy);
}

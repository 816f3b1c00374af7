/* Linear layers y = x W^T. Many rows (prefill) are compute bound: f32 weights go straight to
 * sgemm, bf16 weights are widened panel by panel into a scratch buffer for sgemm (the
 * conversion is amortised over the rows). Few rows (decode) are memory bound: a fused kernel
 * streams each weight row once, widening bf16 in registers, so bf16 moves half the bytes. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "kernels/kernels.h"
#include "util/half.h"

#define FEW_ROWS 8 /* up to this many rows use the streaming kernel */
#define PANEL 256  /* bf16 weight rows widened per sgemm call */

static inline float weight_at(const wmat *w, size_t i) {
    return w->dt == DT_F32 ? ((const float *)w->data)[i] : bf16_to_f32(((const uint16_t *)w->data)[i]);
}

/* y[r][j] = x[r] . W[n0 + j] for nr (1 or 2) input rows and four weight rows. */
static void block_4(const cpu_kernels *k, const float *const *x, int nr, const wmat *w, int n0, float y[2][4]) {
    size_t off = (size_t)n0 * w->ld;
    if (w->dt == DT_F32) k->gemv4_f32(x, nr, (const float *)w->data + off, w->ld, w->cols, y);
    else k->gemv4_bf16(x, nr, (const uint16_t *)w->data + off, w->ld, w->cols, y);
}

static void linear_few(const float *x, size_t ldx, int m, const wmat *w, float *y, size_t ldy) {
    const cpu_kernels *k = cpu();
    int nb = w->rows / 4 * 4;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < nb; n += 4)
        for (int r = 0; r < m; r += 2) {
            int nr = r + 1 < m ? 2 : 1;
            const float *xr[2] = {x + (size_t)r * ldx, x + (size_t)(r + nr - 1) * ldx};
            float acc[2][4];
            block_4(k, xr, nr, w, n, acc);
            for (int i = 0; i < nr; i++)
                for (int j = 0; j < 4; j++) y[(size_t)(r + i) * ldy + n + j] = acc[i][j];
        }
    for (int n = nb; n < w->rows; n++) /* fewer than four rows left */
        for (int r = 0; r < m; r++) {
            float s = 0;
            for (int i = 0; i < w->cols; i++) s += weight_at(w, (size_t)n * w->ld + i) * x[(size_t)r * ldx + i];
            y[(size_t)r * ldy + n] = s;
        }
}

/* Rows in chunks of `chunk`, each its own sgemm (see linear_chunked); a bf16 panel is widened
 * once for all of them. */
static void linear_bf16_panels(const float *x, size_t ldx, int m, int chunk, const wmat *w, float *y, size_t ldy) {
    /* a scratch panel per calling thread, grown once: steady-state calls allocate nothing */
    static _Thread_local float *panel;
    static _Thread_local size_t panel_cap;
    size_t need = (size_t)PANEL * w->cols;
    if (need > panel_cap) {
        free(panel);
        panel = aligned_alloc(64, need * sizeof *panel);
        panel_cap = need;
    }
    const uint16_t *wd = w->data;
    const cpu_kernels *k = cpu();
    float *pn = panel; /* the worker threads below have their own (empty) thread-locals */
    for (int n0 = 0; n0 < w->rows; n0 += PANEL) {
        int nb = w->rows - n0 < PANEL ? w->rows - n0 : PANEL;
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

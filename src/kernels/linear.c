/* Linear layers: f32 weights go straight to sgemm; bf16 weights are widened on the fly,
 * by a fused dot-product kernel when there are few rows (decode: memory bound, so reading
 * half the bytes is the point) and by converting row panels for sgemm otherwise (prefill:
 * compute bound, the conversion is amortised over the rows). */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "kernels/kernels.h"
#include "util/half.h"

#define FEW_ROWS 8   /* up to this many rows use the fused bf16 kernel */
#define PANEL 256    /* weight rows widened per sgemm call */

static void add_bias(float *y, size_t ldy, int m, int n, const float *bias) {
    if (!bias) return;
    for (int r = 0; r < m; r++)
        for (int c = 0; c < n; c++) y[(size_t)r * ldy + c] += bias[c];
}

#ifdef __AVX512F__
static inline __m512 load_bf16x16(const uint16_t *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

/* One input row against four weight rows at a time: four independent FMA chains hide the
 * FMA latency that a single dot product would be bound by, and x is loaded once for all. */
static void bf16_gemv_4rows(const float *x, const uint16_t *w, size_t ld, int k, float *y) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int i = 0;
    for (; i + 16 <= k; i += 16) {
        __m512 xv = _mm512_loadu_ps(x + i);
        s0 = _mm512_fmadd_ps(load_bf16x16(w + i), xv, s0);
        s1 = _mm512_fmadd_ps(load_bf16x16(w + ld + i), xv, s1);
        s2 = _mm512_fmadd_ps(load_bf16x16(w + 2 * ld + i), xv, s2);
        s3 = _mm512_fmadd_ps(load_bf16x16(w + 3 * ld + i), xv, s3);
    }
    y[0] = _mm512_reduce_add_ps(s0), y[1] = _mm512_reduce_add_ps(s1);
    y[2] = _mm512_reduce_add_ps(s2), y[3] = _mm512_reduce_add_ps(s3);
    for (; i < k; i++)
        for (int r = 0; r < 4; r++) y[r] += bf16_to_f32(w[r * ld + i]) * x[i];
}
#endif

/* dot products of rows x[0..m) with one bf16 weight row, m <= FEW_ROWS */
static void bf16_row_dots(const float *x, size_t ldx, int m, const uint16_t *w, int k, float *acc) {
    int i = 0;
#ifdef __AVX512F__
    __m512 s[FEW_ROWS];
    for (int r = 0; r < m; r++) s[r] = _mm512_setzero_ps();
    for (; i + 16 <= k; i += 16) {
        __m512 wf = load_bf16x16(w + i);
        for (int r = 0; r < m; r++) s[r] = _mm512_fmadd_ps(wf, _mm512_loadu_ps(x + r * ldx + i), s[r]);
    }
    for (int r = 0; r < m; r++) acc[r] = _mm512_reduce_add_ps(s[r]);
#else
    for (int r = 0; r < m; r++) acc[r] = 0;
#endif
    for (; i < k; i++) {
        float wf = bf16_to_f32(w[i]);
        for (int r = 0; r < m; r++) acc[r] += wf * x[r * ldx + i];
    }
}

static void linear_bf16_few(const float *x, size_t ldx, int m, const wmat *w, float *y, size_t ldy,
                            bool accumulate) {
    const uint16_t *wd = w->data;
    int n0 = 0;
#ifdef __AVX512F__
    if (m == 1) {
        n0 = w->rows / 4 * 4;
#pragma omp parallel for schedule(static)
        for (int n = 0; n < n0; n += 4) {
            float acc[4];
            bf16_gemv_4rows(x, wd + (size_t)n * w->ld, w->ld, w->cols, acc);
            for (int r = 0; r < 4; r++) y[n + r] = accumulate ? y[n + r] + acc[r] : acc[r];
        }
    }
#endif
#pragma omp parallel for schedule(static)
    for (int n = n0; n < w->rows; n++) {
        float acc[FEW_ROWS];
        bf16_row_dots(x, ldx, m, wd + (size_t)n * w->ld, w->cols, acc);
        for (int r = 0; r < m; r++) {
            float *dst = &y[(size_t)r * ldy + n];
            *dst = accumulate ? *dst + acc[r] : acc[r];
        }
    }
}

static void linear_bf16_panels(const float *x, size_t ldx, int m, const wmat *w, float *y, size_t ldy,
                               bool accumulate) {
    /* a thread-private scratch panel, grown once: steady-state calls allocate nothing */
    static _Thread_local float *panel;
    static _Thread_local size_t panel_cap;
    size_t need = (size_t)PANEL * w->cols;
    if (need > panel_cap) {
        free(panel);
        panel = aligned_alloc(64, need * sizeof *panel);
        panel_cap = need;
    }
    const uint16_t *wd = w->data;
    float *pn = panel; /* the worker threads have their own (empty) thread-locals */
    for (int n0 = 0; n0 < w->rows; n0 += PANEL) {
        int nb = w->rows - n0 < PANEL ? w->rows - n0 : PANEL;
#pragma omp parallel for schedule(static)
        for (int r = 0; r < nb; r++) {
            const uint16_t *src = wd + (size_t)(n0 + r) * w->ld;
            float *dst = pn + (size_t)r * w->cols;
            for (int c = 0; c < w->cols; c++) dst[c] = bf16_to_f32(src[c]);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, nb, w->cols, 1.0f, x, (int)ldx, pn,
                    w->cols, accumulate ? 1.0f : 0.0f, y + n0, (int)ldy);
    }
}

void linear(const float *x, size_t ldx, int m, const wmat *w, const float *bias, float *y, size_t ldy,
            bool accumulate) {
    if (m <= 0) return;
    if (w->dt == DT_F32)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, w->rows, w->cols, 1.0f, x, (int)ldx,
                    w->data, (int)w->ld, accumulate ? 1.0f : 0.0f, y, (int)ldy);
    else if (m <= FEW_ROWS)
        linear_bf16_few(x, ldx, m, w, y, ldy, accumulate);
    else
        linear_bf16_panels(x, ldx, m, w, y, ldy, accumulate);
    add_bias(y, ldy, m, w->rows, bias);
}

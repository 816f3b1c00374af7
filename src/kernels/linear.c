/* Linear layers y = x W^T. Many rows (prefill) are compute bound: f32 weights go straight to
 * sgemm, bf16 weights are widened panel by panel into a scratch buffer for sgemm (the
 * conversion is amortised over the rows). Few rows (decode) are memory bound: a fused kernel
 * streams each weight row once, widening bf16 in registers, so bf16 moves half the bytes. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "kernels/kernels.h"
#include "util/half.h"

#define FEW_ROWS 8 /* up to this many rows use the streaming kernel */
#define PANEL 256  /* bf16 weight rows widened per sgemm call */

static inline float weight_at(const wmat *w, size_t i) {
    return w->dt == DT_F32 ? ((const float *)w->data)[i] : bf16_to_f32(((const uint16_t *)w->data)[i]);
}

#ifdef __AVX512F__
static inline __m512 load_f32x16(const void *p, size_t i) { return _mm512_loadu_ps((const float *)p + i); }
/* Prefetch distance: a few hundred bytes ahead in each of the four weight rows streamed at once,
 * which the hardware prefetcher alone keeps too few of in flight. */
#define PF_BYTES 384
static inline void prefetch_f32(const void *p, size_t i) { _mm_prefetch((const char *)((const float *)p + i) + PF_BYTES, _MM_HINT_T0); }
static inline void prefetch_bf16(const void *p, size_t i) { _mm_prefetch((const char *)((const uint16_t *)p + i) + PF_BYTES, _MM_HINT_T0); }
static inline __m512 load_bf16x16(const void *p, size_t i) {
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* NR (1 or 2) input rows against four weight rows: 4*NR independent FMA chains hide the FMA
 * latency, and the four weight rows (a few KiB) stay in L1 for the next pair of input rows. */
#define DOTS(name, load, prefetch, NR)                                                          \
    static void name(const float *const *x, const void *w, size_t ld, int k, float y[2][4]) {   \
        __m512 a[NR][4];                                                                        \
        for (int r = 0; r < NR; r++)                                                            \
            for (int j = 0; j < 4; j++) a[r][j] = _mm512_setzero_ps();                          \
        for (int i = 0; i + 16 <= k; i += 16) {                                                 \
            __m512 xv[NR];                                                                      \
            for (int r = 0; r < NR; r++) xv[r] = _mm512_loadu_ps(x[r] + i);                     \
            for (int j = 0; j < 4; j++) {                                                       \
                if (i % 32 == 0) prefetch(w, j * ld + i);                                       \
                __m512 wj = load(w, j * ld + i);                                                \
                for (int r = 0; r < NR; r++) a[r][j] = _mm512_fmadd_ps(wj, xv[r], a[r][j]);     \
            }                                                                                   \
        }                                                                                       \
        for (int r = 0; r < NR; r++)                                                            \
            for (int j = 0; j < 4; j++) y[r][j] = _mm512_reduce_add_ps(a[r][j]);                \
    }
DOTS(dots_f32_1, load_f32x16, prefetch_f32, 1)
DOTS(dots_f32_2, load_f32x16, prefetch_f32, 2)
DOTS(dots_bf16_1, load_bf16x16, prefetch_bf16, 1)
DOTS(dots_bf16_2, load_bf16x16, prefetch_bf16, 2)
#endif

/* y[r][j] = x[r] . W[n0 + j] for nr (1 or 2) input rows and four weight rows; the vector
 * kernel covers k rounded down to 16, the scalar loop the rest. */
static void block_4(const float *const *x, int nr, const wmat *w, int n0, float y[2][4]) {
    int k = w->cols, kv = 0;
    memset(y, 0, 8 * sizeof(float));
#ifdef __AVX512F__
    kv = k / 16 * 16;
    size_t off = (size_t)n0 * w->ld;
    if (w->dt == DT_F32) (nr == 2 ? dots_f32_2 : dots_f32_1)(x, (const float *)w->data + off, w->ld, kv, y);
    else (nr == 2 ? dots_bf16_2 : dots_bf16_1)(x, (const uint16_t *)w->data + off, w->ld, kv, y);
#endif
    for (int j = 0; j < 4; j++)
        for (int i = kv; i < k; i++) {
            float wf = weight_at(w, (size_t)(n0 + j) * w->ld + i);
            for (int r = 0; r < nr; r++) y[r][j] += wf * x[r][i];
        }
}

static void linear_few(const float *x, size_t ldx, int m, const wmat *w, float *y, size_t ldy) {
    int nb = w->rows / 4 * 4;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < nb; n += 4)
        for (int r = 0; r < m; r += 2) {
            int nr = r + 1 < m ? 2 : 1;
            const float *xr[2] = {x + (size_t)r * ldx, x + (size_t)(r + nr - 1) * ldx};
            float acc[2][4];
            block_4(xr, nr, w, n, acc);
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
    float *pn = panel; /* the worker threads below have their own (empty) thread-locals */
    for (int n0 = 0; n0 < w->rows; n0 += PANEL) {
        int nb = w->rows - n0 < PANEL ? w->rows - n0 : PANEL;
#pragma omp parallel for schedule(static)
        for (int r = 0; r < nb; r++) {
            const uint16_t *src = wd + (size_t)(n0 + r) * w->ld;
            float *dst = pn + (size_t)r * w->cols;
            for (int c = 0; c < w->cols; c++) dst[c] = bf16_to_f32(src[c]);
        }
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
    if (bias)
        for (int r = 0; r < m; r++)
            for (int c = 0; c < w->rows; c++) y[(size_t)r * ldy + c] += bias[c];
}

void linear(const float *x, size_t ldx, int m, int pass_rows, const wmat *w, const float *bias, float *y,
            size_t ldy) {
    linear_chunked(x, ldx, m, m, pass_rows, w, bias, y, ldy);
}

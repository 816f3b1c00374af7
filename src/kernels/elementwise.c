/* Row-wise kernels: RMSNorm (also in two steps, for a norm whose row spans ranks), SiLU-and-mul,
 * residual add, scaling, sigmoid gating, embedding lookup. */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "util/half.h"

static float sum_sq(const float *x, int n) {
    float ss = 0;
    for (int c = 0; c < n; c++) ss += x[c] * x[c];
    return ss;
}

/* o = x / sqrt(ss / n + eps) * weight, for one row's n columns */
static void rms_apply(const float *x, float ss, int n, int cols, const float *weight, float eps, float *o) {
    float inv = 1.0f / sqrtf(ss / n + eps);
    for (int c = 0; c < cols; c++) o[c] = x[c] * inv * weight[c];
}

void rms_norm(const float *x, size_t ldx, float *out, size_t ldo, int rows, int cols, int group,
              const float *weight, float eps) {
#pragma omp parallel for schedule(static) if (rows > 1)
    for (int r = 0; r < rows; r++)
        for (int g0 = 0; g0 < cols; g0 += group) {
            const float *xr = x + (size_t)r * ldx + g0;
            rms_apply(xr, sum_sq(xr, group), group, group, weight, eps, out + (size_t)r * ldo + g0);
        }
}

void sum_squares(const float *x, size_t ldx, float *out, size_t ldo, int rows, int cols) {
    for (int r = 0; r < rows; r++) out[(size_t)r * ldo] = sum_sq(x + (size_t)r * ldx, cols);
}

void rms_norm_by(const float *x, size_t ldx, const float *ss, size_t lds, float *out, size_t ldo, int rows, int cols,
                 int features, const float *weight, float eps) {
#pragma omp parallel for schedule(static) if (rows > 1)
    for (int r = 0; r < rows; r++)
        rms_apply(x + (size_t)r * ldx, ss[(size_t)r * lds], features, cols, weight, eps, out + (size_t)r * ldo);
}

void sigmoid_gate(const float *x, size_t ldx, const float *g, size_t ldg, float *out, size_t ldo, int rows, int cols) {
    for (int r = 0; r < rows; r++) {
        float s = 1.0f / (1.0f + expf(-g[(size_t)r * ldg]));
        for (int c = 0; c < cols; c++) out[(size_t)r * ldo + c] = x[(size_t)r * ldx + c] * s;
    }
}

void silu_mul(const float *gate, size_t ldg, const float *up, size_t ldu, float *out, size_t ldo,
              int rows, int cols) {
#pragma omp parallel for schedule(static) if (rows > 1)
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            float g = gate[(size_t)r * ldg + c];
            out[(size_t)r * ldo + c] = g / (1.0f + expf(-g)) * up[(size_t)r * ldu + c];
        }
}

void add_rows(const float *a, size_t lda, const float *b, size_t ldb, float *out, size_t ldo, int rows,
              int cols) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            out[(size_t)r * ldo + c] = a[(size_t)r * lda + c] + b[(size_t)r * ldb + c];
}

void scale_rows(const float *a, size_t lda, float s, float *out, size_t ldo, int rows, int cols) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) out[(size_t)r * ldo + c] = a[(size_t)r * lda + c] * s;
}

void embed_rows(const wmat *table, int v0, const int32_t *ids, int rows, float *out, size_t ldo) {
    for (int r = 0; r < rows; r++) {
        float *o = out + (size_t)r * ldo;
        int id = ids[r] - v0;
        if (id < 0 || id >= table->rows) {
            memset(o, 0, table->cols * sizeof *o);
        } else if (table->dt == DT_F32) {
            memcpy(o, (const float *)table->data + (size_t)id * table->ld, table->cols * sizeof *o);
        } else {
            const uint16_t *src = (const uint16_t *)table->data + (size_t)id * table->ld;
            for (int c = 0; c < table->cols; c++) o[c] = bf16_to_f32(src[c]);
        }
    }
}

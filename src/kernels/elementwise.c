/* Row-wise kernels: RMSNorm, SiLU-and-mul, residual add, scaling, embedding lookup. */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "util/half.h"

void rms_norm(const float *x, size_t ldx, float *out, size_t ldo, int rows, int cols, int group,
              const float *weight, float eps) {
#pragma omp parallel for schedule(static) if (rows > 1)
    for (int r = 0; r < rows; r++) {
        for (int g0 = 0; g0 < cols; g0 += group) {
            const float *xr = x + (size_t)r * ldx + g0;
            float *o = out + (size_t)r * ldo + g0;
            float ss = 0;
            for (int c = 0; c < group; c++) ss += xr[c] * xr[c];
            float inv = 1.0f / sqrtf(ss / group + eps);
            for (int c = 0; c < group; c++) o[c] = xr[c] * inv * weight[c];
        }
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

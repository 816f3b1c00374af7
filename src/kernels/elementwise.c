/* Row-wise kernels: RMSNorm (also in two steps, for a norm whose row spans ranks), LayerNorm
 * (a vision tower's), gated activations (SiLU or GELU-tanh, times up) and GELU-tanh alone, soft-capping, residual add, scaling, sigmoid gating (by a value per row or per element), the
 * gated norm of recurrent mixers, embedding lookup. The loops over rows are here; the
 * loop over a row's columns is the CPU variant's (cpu/variant.c). */
#include <math.h>
#include <string.h>

#include "cpu/cpu.h"
#include "kernels/kernels.h"
#include "tensor/tensor.h"

/* o = x / sqrt(ss / n + eps) * weight, for one row's cols columns */
static void rms_apply(const float *x, float ss, int n, int cols, const float *weight, float eps, float *o) {
    cpu()->scale_mul(x, 1.0f / sqrtf(ss / n + eps), weight, o, cols);
}

void rms_norm(const float *x, size_t ldx, float *out, size_t ldo, int rows, int cols, int group, const float *weight,
              bool wide, float eps) {
#pragma omp parallel for schedule(static) if (rows > 1)
    for (int r = 0; r < rows; r++)
        for (int g0 = 0; g0 < cols; g0 += group) {
            const float *xr = x + (size_t)r * ldx + g0;
            rms_apply(xr, cpu()->sum_squares(xr, group), group, group, weight + (wide ? g0 : 0), eps,
                      out + (size_t)r * ldo + g0);
        }
}

void sum_squares(const float *x, size_t ldx, float *out, size_t ldo, int rows, int cols) {
    for (int r = 0; r < rows; r++) out[(size_t)r * ldo] = cpu()->sum_squares(x + (size_t)r * ldx, cols);
}

void rms_norm_by(const float *x, size_t ldx, const float *ss, size_t lds, float *out, size_t ldo, int rows, int cols,
                 int features, const float *weight, float eps) {
#pragma omp parallel for schedule(static) if (rows > 1)
    for (int r = 0; r < rows; r++)
        rms_apply(x + (size_t)r * ldx, ss[(size_t)r * lds], features, cols, weight, eps, out + (size_t)r * ldo);
}

static float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

void sigmoid_gate(const float *x, size_t ldx, const float *g, size_t ldg, int gate_cols, float *out, size_t ldo,
                  int rows, int cols) {
#pragma omp parallel for schedule(static) if (rows > 1 && gate_cols > 1)
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * ldx, *gr = g + (size_t)r * ldg;
        float *o = out + (size_t)r * ldo;
        if (gate_cols == 1) cpu()->scale(xr, sigmoid(gr[0]), o, cols);
        else
            for (int c = 0; c < cols; c++) o[c] = xr[c] * sigmoid(gr[c]);
    }
}

void rms_norm_gated(const float *x, size_t ldx, const float *z, size_t ldz, float *out, size_t ldo, int rows, int cols,
                    int group, const float *weight, float eps) {
    rms_norm(x, ldx, out, ldo, rows, cols, group, weight, false, eps);
#pragma omp parallel for schedule(static) if (rows > 1)
    for (int r = 0; r < rows; r++) {
        const float *zr = z + (size_t)r * ldz;
        float *o = out + (size_t)r * ldo;
        for (int c = 0; c < cols; c++) o[c] *= zr[c] * sigmoid(zr[c]);
    }
}

void glu(const gate_fn *f, const float *gate, size_t ldg, const float *up, size_t ldu, float *out, size_t ldo, int rows,
         int cols) {
    const cpu_kernels *k = cpu();
#pragma omp parallel for schedule(static) if (rows > 1)
    for (int r = 0; r < rows; r++) {
        const float *g = gate + (size_t)r * ldg, *u = up + (size_t)r * ldu;
        float *o = out + (size_t)r * ldo;
        if (f->kind == GATE_RELU2) relu2_rows(u, 0, o, 0, 1, cols); /* no gate: relu(up)^2 */
        else if (f->kind == GATE_SILU_CLAMPED) k->silu_clamped_mul(g, u, o, cols, f->limit, f->alpha);
        else if (f->kind == GATE_GELU_TANH) k->gelu_tanh_mul(g, u, o, cols);
        else k->silu_mul(g, u, o, cols);
    }
}

/* out = gelu_tanh(x), as act(gate) * up with up all ones (the product by 1 is exact) */
void gelu_tanh_rows(const float *x, size_t ldx, float *out, size_t ldo, int rows, int cols) {
    static _Thread_local fbuf ones_buf;
    float *ones = fbuf_get(&ones_buf, (size_t)cols);
    if (!ones) return; /* recorded (kernels.h) */
    for (int c = 0; c < cols; c++) ones[c] = 1.0f;
    for (int r = 0; r < rows; r++) cpu()->gelu_tanh_mul(x + (size_t)r * ldx, ones, out + (size_t)r * ldo, cols);
}

void layer_norm(const float *x, size_t ldx, float *out, size_t ldo, int rows, int cols, const float *weight,
                const float *bias, float eps) {
#pragma omp parallel for schedule(static) if (rows > 1)
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * ldx;
        float *o = out + (size_t)r * ldo;
        double sum = 0, sq = 0; /* in double: the two moments of a row without cancellation */
        for (int c = 0; c < cols; c++) sum += xr[c];
        double mean = sum / cols;
        for (int c = 0; c < cols; c++) sq += (xr[c] - mean) * (xr[c] - mean);
        float inv = (float)(1.0 / sqrt(sq / cols + eps)), m = (float)mean;
        for (int c = 0; c < cols; c++) o[c] = (xr[c] - m) * inv * weight[c] + bias[c];
    }
}

void softcap_rows(const float *x, size_t ldx, float cap, float *out, size_t ldo, int rows, int cols) {
#pragma omp parallel for schedule(static) if (rows > 1)
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < cols; j++) out[(size_t)r * ldo + j] = cap * tanhf(x[(size_t)r * ldx + j] / cap);
}

void relu2_rows(const float *x, size_t ldx, float *out, size_t ldo, int rows, int cols) {
#pragma omp parallel for schedule(static) if (rows > 1)
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < cols; j++) {
            float v = fmaxf(x[(size_t)r * ldx + j], 0.0f);
            out[(size_t)r * ldo + j] = v * v;
        }
}

void add_rows(const float *a, size_t lda, const float *b, size_t ldb, float *out, size_t ldo, int rows, int cols) {
    for (int r = 0; r < rows; r++) cpu()->add(a + (size_t)r * lda, b + (size_t)r * ldb, out + (size_t)r * ldo, cols);
}

void scale_rows(const float *a, size_t lda, float s, float *out, size_t ldo, int rows, int cols) {
    for (int r = 0; r < rows; r++) cpu()->scale(a + (size_t)r * lda, s, out + (size_t)r * ldo, cols);
}

/* Row `id` of a quantized table, dequantized into o (through the packed order, if any). */
static void embed_quantized(const wmat *t, int id, float *o) {
    static _Thread_local fbuf buf;
    const qlayout *q = t->q;
    float *row = fbuf_get(&buf, (size_t)q->kp);
    if (!row) return; /* recorded (kernels.h) */
    cpu()->dequant_q((const uint8_t *)t->data + (size_t)id * t->ld, q, (size_t)id, row);
    for (int p = 0; p < q->kp; p++)
        if (!q->col_of || q->col_of[p] >= 0) o[q->col_of ? q->col_of[p] : p] = row[p];
}

void embed_rows(const wmat *table, int v0, const int32_t *ids, int rows, float *out, size_t ldo) {
    for (int r = 0; r < rows; r++) {
        float *o = out + (size_t)r * ldo;
        int id = ids[r] - v0;
        if (id < 0 || id >= table->rows) {
            memset(o, 0, table->cols * sizeof *o);
        } else if (table->q) {
            embed_quantized(table, id, o);
        } else if (table->dt == DT_F32) {
            memcpy(o, (const float *)table->data + (size_t)id * table->ld, table->cols * sizeof *o);
        } else {
            cpu()->widen_bf16((const uint16_t *)table->data + (size_t)id * table->ld, o, table->cols);
        }
    }
}

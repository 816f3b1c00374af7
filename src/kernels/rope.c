/* Rotary position embeddings in transformers' rotate_half layout: for each head, element i
 * pairs with i + head_dim/2; DeepSeek's interleaved pairs (2i, 2i+1) are first gathered into
 * that order, which is the order transformers' DeepSeek-V3 leaves them in (V2's complex product
 * keeps them interleaved: q and k alike, so the scores are the same). The frequencies come
 * from the model (model/rope_freq.c); YaRN's attention factor scales the tables. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "kernels/kernels.h"
#include "util/alloc.h"
#include "util/err.h"

int rope_table_init(rope_table *t, const float *inv_freq, const float *long_inv, int half, float factor, int max_pos,
                    loom_err *err) {
    size_t rows = (size_t)max_pos * (long_inv ? 2 : 1);
    t->max_pos = max_pos;
    t->half = half;
    t->cos = mem_array(rows * half, sizeof *t->cos, "the RoPE tables", err);
    t->sin = t->cos ? mem_array(rows * half, sizeof *t->sin, "the RoPE tables", err) : NULL;
    if (!t->sin) {
        rope_table_free(t);
        return loom_err_prefix(err, "%d positions", max_pos);
    }
    for (size_t row = 0; row < rows; row++) {
        const float *inv = row < (size_t)max_pos ? inv_freq : long_inv;
        float p = (float)(row % (size_t)max_pos);
        for (int i = 0; i < half; i++) {
            float f = p * inv[i];
            t->cos[row * half + i] = cosf(f) * factor;
            t->sin[row * half + i] = sinf(f) * factor;
        }
    }
    return 0;
}

void rope_table_free(rope_table *t) {
    free(t->cos);
    free(t->sin);
    t->cos = t->sin = NULL;
}

void rope_apply(const rope_table *t, const float *x, size_t ldx, float *out, size_t ldo, int rows, int n_heads,
                int stride, int offset, bool interleaved, const int32_t *pos) {
    int half = t->half;
#pragma omp parallel for schedule(static) if (rows > 1)
    for (int r = 0; r < rows; r++) {
        const float *cs = t->cos + (size_t)pos[r] * half, *sn = t->sin + (size_t)pos[r] * half;
        const float *xr = x + (size_t)r * ldx;
        float *o = out + (size_t)r * ldo, pairs[1024];
        for (int h = 0; h < n_heads; h++) {
            const float *in = xr + (size_t)h * stride + offset;
            if (offset) memcpy(o + (size_t)h * stride, xr + (size_t)h * stride, offset * sizeof *o);
            if (stride > offset + 2 * half)
                memcpy(o + (size_t)h * stride + offset + 2 * half, in + 2 * half,
                       (stride - offset - 2 * half) * sizeof *o);
            if (interleaved) {
                for (int i = 0; i < half; i++) pairs[i] = in[2 * i], pairs[half + i] = in[2 * i + 1];
                in = pairs;
            }
            cpu()->rope(in, cs, sn, o + (size_t)h * stride + offset, half);
        }
    }
}

/* Rotary position embeddings in transformers' rotate_half layout: for each head, element i
 * pairs with i + head_dim/2. Frequencies follow transformers' default, linear and llama3
 * initialisers, computed in fp32 as they are there. */
#include <math.h>
#include <stdlib.h>

#include "cpu/cpu.h"
#include "kernels/kernels.h"
#include "util/err.h"

static float llama3_freq(const model_config *c, float inv_freq) {
    const float two_pi = 6.283185307179586f;
    float old_len = (float)c->rope_orig_max_pos;
    float low_wavelen = old_len / c->rope_low_freq, high_wavelen = old_len / c->rope_high_freq;
    float wavelen = two_pi / inv_freq;
    float scaled = wavelen > low_wavelen ? inv_freq / c->rope_factor : inv_freq;
    if (wavelen < high_wavelen || wavelen > low_wavelen) return scaled;
    float smooth = (old_len / wavelen - c->rope_low_freq) / (c->rope_high_freq - c->rope_low_freq);
    return (1 - smooth) * scaled / c->rope_factor + smooth * scaled;
}

int rope_table_init(rope_table *t, const model_config *c, int max_pos, loom_err *err) {
    int half = c->head_dim / 2;
    t->max_pos = max_pos;
    t->half = half;
    t->cos = malloc((size_t)max_pos * half * sizeof *t->cos);
    t->sin = malloc((size_t)max_pos * half * sizeof *t->sin);
    if (!t->cos || !t->sin) {
        rope_table_free(t);
        return loom_errf(err, "out of memory for RoPE tables (%d positions)", max_pos);
    }
    for (int i = 0; i < half; i++) {
        float inv = 1.0f / powf(c->rope_theta, (float)(2 * i) / (float)c->head_dim);
        if (c->rope_kind == ROPE_LINEAR) inv /= c->rope_factor;
        if (c->rope_kind == ROPE_LLAMA3) inv = llama3_freq(c, inv);
        for (int p = 0; p < max_pos; p++) {
            float f = (float)p * inv;
            t->cos[(size_t)p * half + i] = cosf(f);
            t->sin[(size_t)p * half + i] = sinf(f);
        }
    }
    return 0;
}

void rope_table_free(rope_table *t) {
    free(t->cos);
    free(t->sin);
    t->cos = t->sin = NULL;
}

void rope_apply(const rope_table *t, const float *x, size_t ldx, float *out, size_t ldo, int rows,
                int n_heads, const int32_t *pos) {
    int half = t->half;
#pragma omp parallel for schedule(static) if (rows > 1)
    for (int r = 0; r < rows; r++) {
        const float *cs = t->cos + (size_t)pos[r] * half, *sn = t->sin + (size_t)pos[r] * half;
        for (int h = 0; h < n_heads; h++)
            cpu()->rope(x + (size_t)r * ldx + h * 2 * half, cs, sn, out + (size_t)r * ldo + h * 2 * half, half);
    }
}

/* Rotary position embeddings in transformers' rotate_half layout: for each head, element i
 * pairs with i + head_dim/2; DeepSeek's interleaved pairs (2i, 2i+1) are first gathered into
 * that order, which is the order transformers' DeepSeek-V3 leaves them in (V2's complex product
 * keeps them interleaved: q and k alike, so the scores are the same). Frequencies follow
 * transformers' default, linear, llama3 and yarn initialisers, computed in fp32 as they are
 * there; YaRN's attention factor scales the tables. */
#include <string.h>
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

/* YaRN: frequencies blend from extrapolated (fast-rotating dimensions, left as they are) to
 * interpolated (divided by factor) along a linear ramp between the dimensions that turn
 * beta_fast and beta_slow times over the original context. */
static double yarn_correction_dim(const model_config *c, double rotations) {
    return c->head_dim * log(c->rope_orig_max_pos / (rotations * 2 * M_PI)) / (2 * log(c->rope_theta));
}

static float yarn_freq(const model_config *c, int i) {
    double low = yarn_correction_dim(c, c->rope_beta_fast), high = yarn_correction_dim(c, c->rope_beta_slow);
    if (c->rope_truncate) low = floor(low), high = ceil(high);
    if (low < 0) low = 0;
    if (high > c->head_dim - 1) high = c->head_dim - 1;
    if (low == high) high += 0.001;
    float ramp = ((float)i - (float)low) / (float)(high - low);
    float extrapolation = 1 - (ramp < 0 ? 0 : ramp > 1 ? 1 : ramp);
    float pos_freq = powf(c->rope_theta, (float)(2 * i) / (float)c->head_dim);
    return 1.0f / (c->rope_factor * pos_freq) * (1 - extrapolation) + 1.0f / pos_freq * extrapolation;
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
        if (c->rope_kind == ROPE_YARN) inv = yarn_freq(c, i);
        for (int p = 0; p < max_pos; p++) {
            float f = (float)p * inv;
            t->cos[(size_t)p * half + i] = cosf(f) * c->rope_attention_factor;
            t->sin[(size_t)p * half + i] = sinf(f) * c->rope_attention_factor;
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

/* RoPE frequencies (see rope_freq.h). */
#include "model/rope_freq.h"

#include <math.h>

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
    return c->rope_dim * log(c->rope_orig_max_pos / (rotations * 2 * M_PI)) / (2 * log(c->rope_theta));
}

static float yarn_freq(const model_config *c, int i) {
    double low = yarn_correction_dim(c, c->rope_beta_fast), high = yarn_correction_dim(c, c->rope_beta_slow);
    if (c->rope_truncate) low = floor(low), high = ceil(high);
    if (low < 0) low = 0;
    if (high > c->rope_dim - 1) high = c->rope_dim - 1;
    if (low == high) high += 0.001;
    float ramp = ((float)i - (float)low) / (float)(high - low);
    float extrapolation = 1 - (ramp < 0 ? 0 : ramp > 1 ? 1 : ramp);
    float pos_freq = powf(c->rope_theta, (float)(2 * i) / (float)c->rope_dim);
    return 1.0f / (c->rope_factor * pos_freq) * (1 - extrapolation) + 1.0f / pos_freq * extrapolation;
}

static float default_freq(float theta, int i, int dim) { return 1.0f / powf(theta, (float)(2 * i) / (float)dim); }

void rope_freqs_of(const model_config *c, rope_freqs *f) {
    int half = c->rope_dim / 2;
    *f = (rope_freqs){.half = half, .factor = c->rope_attention_factor, .has_local = c->rope_local_theta > 0};
    for (int i = 0; i < half; i++) {
        float base = default_freq(c->rope_theta, i, c->rope_dim);
        f->inv[i] = base;
        if (c->rope_kind == ROPE_LINEAR) f->inv[i] = base / c->rope_factor;
        if (c->rope_kind == ROPE_LLAMA3) f->inv[i] = llama3_freq(c, base);
        if (c->rope_kind == ROPE_YARN) f->inv[i] = yarn_freq(c, i);
        if (c->rope_kind == ROPE_LONGROPE) { /* 1 / (factor x base^(2i/d)), as transformers rounds it */
            float pos_freq = powf(c->rope_theta, (float)(2 * i) / (float)c->rope_dim);
            f->inv[i] = 1.0f / (c->rope_short[i] * pos_freq);
            f->long_inv[i] = 1.0f / (c->rope_long[i] * pos_freq);
        }
        if (f->has_local) f->local[i] = default_freq(c->rope_local_theta, i, c->rope_dim);
    }
    if (c->rope_kind == ROPE_LONGROPE) f->long_after = c->rope_orig_max_pos;
}

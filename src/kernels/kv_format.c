/* The KV cache's row formats (loom.h's loom_kv_dtype): how a layer's K or V row is rounded as it
 * is written, and widened to fp32 as attention reads it. A row is kv_width values in the dtype
 * (8-bit codes padded to 4 bytes), then, for the 8-bit dtypes, one fp32 scale per group of
 * columns: a head, or a latent cache's gcd(kv_lora, rope), so that a scale never spans two
 * heads' or the latent's and the rotary key's columns.
 *
 * The rounding is the whole of the difference from an fp32 cache. A value is rounded once, when
 * its pass writes it, and every later read of it, by any pass, rank or mode, widens the same
 * bytes: the parallel modes, the prefix cache and speculative verify keep their bit-identity
 * (docs/DESIGN.md 4.7). The rules are torch's own (bf16 and E4M3 casts, torch.round), so
 * tests/golden/make_kv_golden.py applies them inside transformers' cache as the oracle. */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "tensor/fp8.h"
#include "tensor/half.h"

static size_t codes_bytes(loom_kv_dtype dt, int width) {
    switch (dt) {
    case LOOM_KV_BF16: return (size_t)width * 2;
    case LOOM_KV_FP8:
    case LOOM_KV_INT8: return ((size_t)width + 3) & ~(size_t)3; /* the scales stay 4-byte aligned */
    default: return (size_t)width * 4;
    }
}

static bool scaled(loom_kv_dtype dt) { return dt == LOOM_KV_FP8 || dt == LOOM_KV_INT8; }

size_t kv_row_bytes(loom_kv_dtype dt, int width, int group) {
    return codes_bytes(dt, width) + (scaled(dt) ? (size_t)(width / group) * sizeof(float) : 0);
}

/* One group's values x[0..n) as 8-bit codes and their scale: max|x| over the largest code, so
 * the largest value takes it (an all-zero group: scale 0, codes 0). */
static float quantize_group(const float *x, int n, loom_kv_dtype dt, uint8_t *codes) {
    float amax = 0;
    for (int i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    float s = amax / (dt == LOOM_KV_FP8 ? FP8_E4M3_MAX : 127.0f);
    for (int i = 0; i < n; i++) {
        if (s == 0) codes[i] = 0;
        else if (dt == LOOM_KV_FP8) codes[i] = f32_to_e4m3(x[i] / s);
        else codes[i] = (uint8_t)(int8_t)fminf(fmaxf(nearbyintf(x[i] / s), -127.0f), 127.0f);
    }
    return s;
}

void kv_write(const kv_layer *c, char *pool, size_t row, const float *x) {
    char *r = pool + row * c->row_bytes;
    int w = c->kv_width;
    if (c->dt == LOOM_KV_BF16) {
        uint16_t *h = (uint16_t *)r;
        for (int i = 0; i < w; i++) h[i] = f32_to_bf16(x[i]);
    } else if (scaled(c->dt)) {
        float *scales = (float *)(r + codes_bytes(c->dt, w));
        for (int g = 0; g * c->group < w; g++)
            scales[g] = quantize_group(x + g * c->group, c->group, c->dt, (uint8_t *)r + g * c->group);
    } else {
        memcpy(r, x, (size_t)w * sizeof *x);
    }
}

const float *kv_read(const kv_layer *c, const char *pool, size_t row, int n, int col, int cols, float *buf,
                     size_t *ld) {
    const char *r = pool + row * c->row_bytes;
    if (c->dt == LOOM_KV_FLOAT32) {
        *ld = c->row_bytes / sizeof(float);
        return (const float *)r + col;
    }
    *ld = (size_t)cols;
    for (int i = 0; i < n; i++, r += c->row_bytes) {
        float *out = buf + (size_t)i * cols;
        if (c->dt == LOOM_KV_BF16) {
            cpu()->widen_bf16((const uint16_t *)r + col, out, cols);
            continue;
        }
        const float *scales = (const float *)(r + codes_bytes(c->dt, c->kv_width));
        for (int j = 0; j < cols; j += c->group) {
            int n_j = cols - j < c->group ? cols - j : c->group;
            cpu()->widen_kv8((const uint8_t *)r + col + j, out + j, n_j, scales[(col + j) / c->group],
                             c->dt == LOOM_KV_FP8);
        }
    }
    return buf;
}

/* clang-format off */
static const struct { const char *name; loom_kv_dtype dt; } kv_dtype_names[] = {
    {"auto", LOOM_KV_FLOAT32}, {"float32", LOOM_KV_FLOAT32}, {"bfloat16", LOOM_KV_BF16}, {"bf16", LOOM_KV_BF16},
    {"fp8", LOOM_KV_FP8}, {"fp8_e4m3", LOOM_KV_FP8}, {"int8", LOOM_KV_INT8}};
/* clang-format on */

int loom_kv_dtype_parse(const char *name, loom_kv_dtype *out) {
    for (size_t i = 0; i < sizeof kv_dtype_names / sizeof *kv_dtype_names; i++)
        if (!strcmp(name, kv_dtype_names[i].name)) return *out = kv_dtype_names[i].dt, 0;
    return -1;
}

const char *loom_kv_dtype_name(loom_kv_dtype dt) {
    static const char *const names[] = {"float32", "bfloat16", "fp8_e4m3", "int8"};
    return (unsigned)dt < sizeof names / sizeof *names ? names[dt] : "unknown";
}

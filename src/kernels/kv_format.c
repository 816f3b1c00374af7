/* The KV cache's layout and row formats (loom.h's loom_kv_dtype): where a position's K or V
 * lies in a layer's pool, how it is rounded as it is written, and how attention reads it back as
 * fp32.
 *
 * A block of block_size positions holds one slab after another: a slab is `slab` columns (a kv
 * head; a latent cache's whole row) of every position in the block, each position's part a
 * record of its values in the dtype (8-bit codes padded to 4 bytes), then, for the 8-bit
 * dtypes, one fp32 scale per `group` columns (a head; a latent cache's gcd(kv_lora, rope), so a
 * scale never spans the latent and the rotary key). So a head's keys are one contiguous stream
 * per block, as attention reads them: laid out a position at a time, an 8-bit head's 64 bytes
 * a position were one cache line in every 544 bytes, and decode read them slower than fp32's
 * (benches/RESULTS.md, "KV cache dtypes").
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

static size_t record_bytes(loom_kv_dtype dt, int slab, int group) {
    return codes_bytes(dt, slab) + (scaled(dt) ? (size_t)(slab / group) * sizeof(float) : 0);
}

size_t kv_row_bytes(loom_kv_dtype dt, int width, int slab, int group) {
    return slab ? (size_t)(width / slab) * record_bytes(dt, slab, group) : 0; /* slab 0: no attention (Mamba-2) */
}

void kv_layer_format(kv_layer *c, loom_kv_dtype dt, int slab, int group) {
    c->dt = dt, c->slab = slab, c->group = group;
    c->record = record_bytes(dt, slab, group);
    c->row_bytes = (size_t)(c->kv_width / slab) * c->record;
}

/* Position `row` of the pool's record in slab s. */
static const char *record_at(const kv_layer *c, const char *pool, size_t row, int s) {
    size_t block = row / (size_t)c->block_size, slot = row % (size_t)c->block_size;
    return pool + block * c->block_size * c->row_bytes + ((size_t)s * c->block_size + slot) * c->record;
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
    int w = c->slab;
    for (int s = 0; s < c->kv_width / w; s++, x += w) {
        char *r = (char *)record_at(c, pool, row, s);
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
}

const float *kv_read(const kv_layer *c, const char *pool, size_t row, int n, int col, int cols, float *buf,
                     size_t *ld) {
    int at = col % c->slab;
    const char *r = record_at(c, pool, row, col / c->slab);
    if (c->dt == LOOM_KV_FLOAT32) {
        *ld = c->record / sizeof(float);
        return (const float *)r + at;
    }
    *ld = (size_t)cols;
    for (int i = 0; i < n; i++, r += c->record) {
        float *out = buf + (size_t)i * cols;
        if (c->dt == LOOM_KV_BF16) {
            cpu()->widen_bf16((const uint16_t *)r + at, out, cols);
            continue;
        }
        const float *scales = (const float *)(r + codes_bytes(c->dt, c->slab));
        for (int j = 0; j < cols; j += c->group) {
            int n_j = cols - j < c->group ? cols - j : c->group;
            cpu()->widen_kv8((const uint8_t *)r + at + j, out + j, n_j, scales[(at + j) / c->group],
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

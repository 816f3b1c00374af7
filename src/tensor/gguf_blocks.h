/* llama.cpp's weight types as GGUF files store them: the table of types (block size, bytes a
 * block) and each block-quantized type's decoding to f32, written from the format's definition
 * (ggml's dequantize_row_*, gguf-py's dequantize_blocks) with the same float operations in the
 * same order, so a decoded weight is the reference's bit for bit. The decoders are static inline
 * so that cpu/variant.c compiles them once per CPU variant inside its kernels; model/ validates
 * tensors against the table, quant/gguf_reader.c maps them. Hand-written: ggml is the only
 * library that decodes these blocks, and it is not a packaged, linkable dependency. */
#ifndef LOOM_TENSOR_GGUF_BLOCKS_H
#define LOOM_TENSOR_GGUF_BLOCKS_H
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "tensor/half.h"

/* ggml's type numbers, as GGUF writes them */
enum gtype {
    GT_F32 = 0,
    GT_F16 = 1,
    GT_Q4_0 = 2,
    GT_Q4_1 = 3,
    GT_Q5_0 = 6,
    GT_Q5_1 = 7,
    GT_Q8_0 = 8,
    GT_Q2_K = 10,
    GT_Q3_K = 11,
    GT_Q4_K = 12,
    GT_Q5_K = 13,
    GT_Q6_K = 14,
    GT_IQ4_NL = 20,
    GT_IQ4_XS = 23,
    GT_BF16 = 30,
    GT_COUNT = 40 /* numbers below this are named (gguf_type_name); higher ones are unknown */
};

#define QK_K 256 /* weights a k-quant super-block holds */

typedef struct gtype_info {
    const char *name;
    int block;    /* weights a block holds (1: a plain element type) */
    int bytes;    /* bytes a block takes */
    bool decoded; /* loom decodes it (gguf_decode_block) */
} gtype_info;

/* Every type ggml numbers below GT_COUNT, with its size; the ones loom does not decode (other IQ
 * types, ternary, MXFP4 of ggml's layout) keep their names so that a file using one is refused by
 * name. */
static const gtype_info gtype_table[GT_COUNT] = {
    [0] = {"F32", 1, 4, true},         [1] = {"F16", 1, 2, true},          [2] = {"Q4_0", 32, 18, true},
    [3] = {"Q4_1", 32, 20, true},      [6] = {"Q5_0", 32, 22, true},       [7] = {"Q5_1", 32, 24, true},
    [8] = {"Q8_0", 32, 34, true},      [9] = {"Q8_1", 32, 40, false},      [10] = {"Q2_K", 256, 84, true},
    [11] = {"Q3_K", 256, 110, true},   [12] = {"Q4_K", 256, 144, true},    [13] = {"Q5_K", 256, 176, true},
    [14] = {"Q6_K", 256, 210, true},   [15] = {"Q8_K", 256, 292, false},   [16] = {"IQ2_XXS", 256, 66, false},
    [17] = {"IQ2_XS", 256, 74, false}, [18] = {"IQ3_XXS", 256, 98, false}, [19] = {"IQ1_S", 256, 50, false},
    [20] = {"IQ4_NL", 32, 18, true},   [21] = {"IQ3_S", 256, 110, false},  [22] = {"IQ2_S", 256, 82, false},
    [23] = {"IQ4_XS", 256, 136, true}, [24] = {"I8", 1, 1, false},         [25] = {"I16", 1, 2, false},
    [26] = {"I32", 1, 4, false},       [27] = {"I64", 1, 8, false},        [28] = {"F64", 1, 8, false},
    [29] = {"IQ1_M", 256, 56, false},  [30] = {"BF16", 1, 2, true},        [34] = {"TQ1_0", 256, 54, false},
    [35] = {"TQ2_0", 256, 66, false},  [39] = {"MXFP4", 32, 17, false},
};

/* The type's row of the table, or NULL for a number ggml does not define. */
static inline const gtype_info *gtype_get(int t) {
    return t >= 0 && t < GT_COUNT && gtype_table[t].name ? &gtype_table[t] : NULL;
}

static inline float gguf_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return f16_to_f32(h);
}

/* IQ4_NL's and IQ4_XS's sixteen non-uniform levels */
static const int8_t gguf_iq4_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* Q4_K's and Q5_K's eight 6-bit sub-block scales and mins, packed in 12 bytes */
static inline void gguf_k_scales(const uint8_t *s, uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63, mn[j] = s[4 + j] & 63;
        sc[4 + j] = (s[8 + j] & 15) | ((s[j] >> 2) & 0x30);
        mn[4 + j] = (s[8 + j] >> 4) | ((s[4 + j] >> 2) & 0x30);
    }
}

/* The 32-weight blocks' 4-bit codes: byte j holds weight j in its low nibble, j + 16 in its high. */
static inline int gguf_nib32(const uint8_t *qs, int e) { return e < 16 ? qs[e] & 15 : qs[e - 16] >> 4; }

/* One block of type t at b into out[gtype_table[t].block]. Each weight is computed as the
 * definition writes it: a product rounded once, then (k-quants with mins, Q4_1, Q5_1) the min
 * subtracted or added, rounded again. */
static inline void gguf_decode_block(int t, const uint8_t *b, float *out) {
    switch (t) {
    case GT_F32: memcpy(out, b, 4); return;
    case GT_F16: out[0] = gguf_f16(b); return;
    case GT_BF16: {
        uint16_t h;
        memcpy(&h, b, 2);
        out[0] = bf16_to_f32(h);
        return;
    }
    case GT_Q4_0: {
        float d = gguf_f16(b);
        for (int e = 0; e < 32; e++) out[e] = d * (float)(gguf_nib32(b + 2, e) - 8);
        return;
    }
    case GT_Q4_1: {
        float d = gguf_f16(b), m = gguf_f16(b + 2);
        for (int e = 0; e < 32; e++) {
            float p = d * (float)gguf_nib32(b + 4, e);
            out[e] = p + m;
        }
        return;
    }
    case GT_Q5_0:
    case GT_Q5_1: {
        bool min = t == GT_Q5_1;
        float d = gguf_f16(b), m = min ? gguf_f16(b + 2) : 0;
        const uint8_t *h = b + (min ? 4 : 2), *qs = h + 4;
        uint32_t qh = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
        for (int e = 0; e < 32; e++) {
            int q = gguf_nib32(qs, e) | (int)((qh >> e) & 1) << 4;
            if (min) {
                float p = d * (float)q;
                out[e] = p + m;
            } else {
                out[e] = d * (float)(q - 16);
            }
        }
        return;
    }
    case GT_Q8_0: {
        float d = gguf_f16(b);
        for (int e = 0; e < 32; e++) out[e] = (float)(int8_t)b[2 + e] * d;
        return;
    }
    case GT_IQ4_NL: {
        float d = gguf_f16(b);
        for (int e = 0; e < 32; e++) out[e] = d * (float)gguf_iq4_levels[gguf_nib32(b + 2, e)];
        return;
    }
    case GT_Q2_K: { /* scales[16] qs[64] d dmin; 16 groups of 16 */
        const uint8_t *sc = b, *qs = b + 16;
        float d = gguf_f16(b + 80), dmin = gguf_f16(b + 82);
        for (int e = 0; e < QK_K; e++) {
            int h = e / 128, i = e % 128, g = e / 16;
            float dl = d * (float)(sc[g] & 15), ml = dmin * (float)(sc[g] >> 4);
            float p = dl * (float)((qs[h * 32 + i % 32] >> (2 * (i / 32))) & 3);
            out[e] = p - ml;
        }
        return;
    }
    case GT_Q3_K: { /* hmask[32] qs[64] scales[12] d; 16 groups of 16, 6-bit signed scales */
        const uint8_t *hm = b, *qs = b + 32, *s = b + 96;
        float d = gguf_f16(b + 108);
        for (int e = 0; e < QK_K; e++) {
            int g = e / 16, h = e / 128, i = e % 128;
            int lo = g < 8 ? s[g] & 15 : s[g - 8] >> 4, hi = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
            float dl = d * (float)((int8_t)(lo | hi << 4) - 32);
            int ql = (qs[h * 32 + i % 32] >> (2 * (i / 32))) & 3, qh = ((hm[e % 32] >> (e / 32)) & 1) ^ 1;
            out[e] = dl * (float)(ql - (qh << 2));
        }
        return;
    }
    case GT_Q4_K:
    case GT_Q5_K: { /* d dmin scales[12] (Q5_K: qh[32]) qs[128]; 8 groups of 32 */
        uint8_t sc[8], mn[8];
        float d = gguf_f16(b), dmin = gguf_f16(b + 2);
        gguf_k_scales(b + 4, sc, mn);
        bool five = t == GT_Q5_K;
        const uint8_t *qh = b + 16, *qs = b + (five ? 48 : 16);
        for (int e = 0; e < QK_K; e++) {
            int g = e / 32, j = e % 32;
            int q = (qs[g / 2 * 32 + j] >> (4 * (g % 2))) & 15;
            if (five) q |= ((qh[j] >> g) & 1) << 4;
            float dl = d * (float)sc[g], ml = dmin * (float)mn[g];
            float p = dl * (float)q;
            out[e] = p - ml;
        }
        return;
    }
    case GT_Q6_K: { /* ql[128] qh[64] scales[16] (int8) d; 16 groups of 16 */
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        float d = gguf_f16(b + 208);
        for (int e = 0; e < QK_K; e++) {
            int h = e / 128, i = e % 128;
            int lo = (ql[h * 64 + i % 64] >> (4 * (i / 64))) & 15, hi = (qh[h * 32 + i % 32] >> (2 * (i / 32))) & 3;
            float dl = d * (float)sc[e / 16];
            out[e] = dl * (float)((lo | hi << 4) - 32);
        }
        return;
    }
    case GT_IQ4_XS: { /* d scales_h(u16) scales_l[4] qs[128]; 8 groups of 32, 6-bit signed scales */
        float d = gguf_f16(b);
        unsigned sh = b[2] | (unsigned)b[3] << 8;
        const uint8_t *sl = b + 4, *qs = b + 8;
        for (int e = 0; e < QK_K; e++) {
            int g = e / 32;
            int ls = ((sl[g / 2] >> (4 * (g % 2))) & 15) | (int)((sh >> (2 * g)) & 3) << 4;
            float dl = d * (float)(ls - 32);
            out[e] = dl * (float)gguf_iq4_levels[gguf_nib32(qs + g * 16, e % 32)];
        }
        return;
    }
    default: return; /* not decoded: refused by model/gguf.c before any kernel sees it */
    }
}

/* Weights [c0, c0 + n) of a row of type t (c0 and n whole blocks) into out. */
static inline void gguf_decode_row(int t, const uint8_t *row, int c0, int n, float *out) {
    const gtype_info *g = &gtype_table[t];
    const uint8_t *b = row + (size_t)(c0 / g->block) * g->bytes;
    for (int c = 0; c < n; c += g->block, b += g->bytes) gguf_decode_block(t, b, out + c);
}

#endif

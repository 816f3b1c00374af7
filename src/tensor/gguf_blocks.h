/* llama.cpp's weight types as GGUF files store them: the table of types (block size, bytes a
 * block) and the pieces every decoder of their blocks reads (the f16 scales, the k-quants' packed
 * 6-bit scales and mins, IQ4's levels). The decoders themselves are cpu/variant.c's gguf_span,
 * once per CPU variant (the generic one is the scalar form), written from the format's definition
 * (ggml's dequantize_row_*, gguf-py's dequantize_blocks); model/ validates tensors against the
 * table, quant/gguf_reader.c maps them. Hand-written: ggml is the only library that decodes these
 * blocks, and it is not a packaged, linkable dependency. */
#ifndef LOOM_TENSOR_GGUF_BLOCKS_H
#define LOOM_TENSOR_GGUF_BLOCKS_H
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "tensor/fp4.h"
#include "tensor/half.h"
#if defined(__F16C__)
#include <immintrin.h>
#endif

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
    GT_MXFP4 = 39,
    GT_COUNT = 40 /* numbers below this are named (gguf_type_name); higher ones are unknown */
};

#define QK_K 256 /* weights a k-quant super-block holds */

typedef struct gtype_info {
    const char *name;
    int block;    /* weights a block holds (1: a plain element type) */
    int bytes;    /* bytes a block takes */
    bool decoded; /* loom decodes it (cpu/variant.c's gguf_span) */
} gtype_info;

/* Every type ggml numbers below GT_COUNT, with its size; the ones loom does not decode (other IQ
 * types, ternary) keep their names so that a file using one is refused by name. */
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
    [35] = {"TQ2_0", 256, 66, false},  [39] = {"MXFP4", 32, 17, true},
};

/* The finest share of a row a rank may take: a k-quant's sub-block (both sides of the cut read
 * the super-block's header, d and the packed scales, and decode their own sub-blocks), else the
 * block. A Q4_K_M file's down_proj of 18944 features (Qwen2.5-7B) thus splits 4 ways, in
 * 4736-feature shares, 18.5 super-blocks each. */
static inline int gtype_split(int t) {
    switch (t) {
    case GT_Q2_K:
    case GT_Q3_K:
    case GT_Q6_K: return 16;
    case GT_Q4_K:
    case GT_Q5_K:
    case GT_IQ4_XS: return 32;
    default: return gtype_table[t].block;
    }
}

/* The types whose weights have a min (a code's weight is dl q - ml); their codes are never
 * negative. */
static inline bool gtype_has_mins(int t) {
    return t == GT_Q2_K || t == GT_Q4_K || t == GT_Q5_K || t == GT_Q4_1 || t == GT_Q5_1;
}

/* The type's row of the table, or NULL for a number ggml does not define. */
static inline const gtype_info *gtype_get(int t) {
    return t >= 0 && t < GT_COUNT && gtype_table[t].name ? &gtype_table[t] : NULL;
}

/* An f16 scale: by the CPU's conversion where the code is built for it (every x86 variant but
 * the generic one), both exact */
static inline float gguf_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
#if defined(__F16C__)
    return _cvtsh_ss(h);
#else
    return f16_to_f32(h);
#endif
}

/* IQ4_NL's and IQ4_XS's sixteen non-uniform levels */
static const int8_t gguf_iq4_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* MXFP4 as ggml stores it (GPT-OSS's experts): a block of 32 is one E8M0 exponent byte e, then
 * IQ4_NL's nibble order (byte j: weight j low, weight j + 16 high). Its codes are e2m1 values
 * doubled (tensor/fp4.h), integers, so the scale is 2^(e - 127) halved: 2^(e - 128), a subnormal float for e < 2
 * (ggml's GGML_E8M0_TO_FP32_HALF). Integer codes let it meet int8 activations as IQ4_NL does. */
static const int8_t gguf_mxfp4_levels[16] = {E2M1_TWICE_VALUES};
static inline float gguf_e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Byte k of the result = nibble k of w (IQ4_XS's low scale bits), and 2-bit field k of w (its
 * high ones), for k < 8: the fields moved apart by halves */
static inline uint64_t gguf_spread_nibbles(uint32_t w) {
    uint64_t x = w;
    x = (x | x << 16) & 0x0000ffff0000ffffULL;
    x = (x | x << 8) & 0x00ff00ff00ff00ffULL;
    return (x | x << 4) & 0x0f0f0f0f0f0f0f0fULL;
}
static inline uint64_t gguf_spread_pairs(uint16_t w) {
    uint64_t x = w;
    x = (x | x << 24) & 0x000000ff000000ffULL;
    x = (x | x << 12) & 0x000f000f000f000fULL;
    x = (x | x << 6) & 0x0303030303030303ULL;
    return x;
}

/* Q4_K's and Q5_K's eight 6-bit sub-block scales and mins, packed in 12 bytes: scales 0-3 and
 * mins 0-3 are the low 6 bits of bytes 0-3 and 4-7; scale and min 4 + j take their low 4 bits
 * from byte 8 + j's low and high nibble, their high 2 from the top of bytes j and 4 + j. Four
 * bytes a word, so each line does four. */
static inline void gguf_k_scales(const uint8_t *s, uint8_t sc[8], uint8_t mn[8]) {
    uint32_t w0, w1, w2, r[4];
    memcpy(&w0, s, 4), memcpy(&w1, s + 4, 4), memcpy(&w2, s + 8, 4);
    r[0] = w0 & 0x3f3f3f3f;
    r[1] = (w2 & 0x0f0f0f0f) | (w0 >> 2 & 0x30303030);
    r[2] = w1 & 0x3f3f3f3f;
    r[3] = (w2 >> 4 & 0x0f0f0f0f) | (w1 >> 2 & 0x30303030);
    memcpy(sc, r, 8), memcpy(mn, r + 2, 8);
}

#endif

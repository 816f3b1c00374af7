/* The hot kernels of one CPU variant, written once over simd.h's vector vocabulary. CMake
 * compiles this file once per variant (generic, avx2, avx2vnni, avx512, avx512bf16, avx512amx on x86-64; generic,
 * neon, neondot on aarch64) with that variant's flags, each defining the table cpu_<variant>; cpu.c picks one
 * at start-up. Every loop takes whole vectors and then one partial vector (simd.h's *_part),
 * so a kernel has a single code path for every length. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "cpu/cpu.h"
#if defined(LOOM_VARIANT_AVX512AMX) /* avx512bf16's kernels, and amx.c's panel for prefill */
#define LOOM_VARIANT_AVX512BF16
#include "cpu/amx.h"
#endif
#include "cpu/simd.h"
#include "tensor/fp8.h"
#include "tensor/gguf_blocks.h"
#include "tensor/tensor.h"

#define CAT2(a, b) a##b
#define CAT(a, b)  CAT2(a, b)
#define STR2(a)    #a
#define STR(a)     STR2(a)
#define TABLE      CAT(cpu_, LOOM_VARIANT)

static inline vf wload(const void *w, bool bf16, int i, int n) {
    if (bf16) return n == VL ? vload_bf16((const uint16_t *)w + i) : vload_bf16_part((const uint16_t *)w + i, n);
    return n == VL ? vload((const float *)w + i) : vload_part((const float *)w + i, n, 0.0f);
}

/* One weight row against nr (1 or 2) input rows, so the row is read once for both. Four
 * accumulators per input row over consecutive vectors hide the FMA latency. The row is
 * streamed alone, at sequential addresses: streaming four rows side by side (one x load for
 * four rows) measured 20-30% below this on Zen 4 with bf16 weights, since the hardware
 * prefetchers follow one stream far better than four interleaved ones. Inlined with nr and
 * bf16 constant, so each of the four uses below is its own loop with registers for a[][]. */
static inline __attribute__((always_inline)) void dot_row(const float *const *x, int nr, const void *w, bool bf16,
                                                          int k, float y[2]) {
    vf a[2][4];
#pragma GCC unroll 2
    for (int r = 0; r < 2; r++)
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) a[r][u] = vset1(0.0f);
    int k4 = k / (4 * VL) * (4 * VL);
    for (int i = 0; i < k4; i += 4 * VL)
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) {
            vf wv = wload(w, bf16, i + u * VL, VL);
#pragma GCC unroll 2
            for (int r = 0; r < nr; r++) a[r][u] = vfma(wv, vload(x[r] + i + u * VL), a[r][u]);
        }
    for (int i = k4; i < k; i += VL) {
        int n = k - i < VL ? k - i : VL;
        vf wv = wload(w, bf16, i, n);
#pragma GCC unroll 2
        for (int r = 0; r < nr; r++)
            a[r][0] = vfma(wv, n == VL ? vload(x[r] + i) : vload_part(x[r] + i, n, 0.0f), a[r][0]);
    }
#pragma GCC unroll 2
    for (int r = 0; r < nr; r++) y[r] = vhsum(vadd(vadd(a[r][0], a[r][1]), vadd(a[r][2], a[r][3])));
}

static void dot_f32(const float *const *x, int nr, const float *w, int k, float y[2]) {
    if (nr == 2) dot_row(x, 2, w, false, k, y);
    else dot_row(x, 1, w, false, k, y);
}

static void dot_bf16(const float *const *x, int nr, const uint16_t *w, int k, float y[2]) {
    if (nr == 2) dot_row(x, 2, w, true, k, y);
    else dot_row(x, 1, w, true, k, y);
}

#define QV (QBLOCK / VL) /* vectors in a packed block */

/* A packed block of QBLOCK weights as QV vectors of consecutive columns, each weight
 * dequantized exactly as the reference does: (q - zero) * scale, or fp8(q) * scale, one
 * rounding (4-bit blocks through simd.h's vdequant_nib, given the group's vqtab). */
static inline __attribute__((always_inline)) void qblock(const uint8_t *blk, int bits, enum qcode code, float s,
                                                         float z, vqtab t, vf out[QV]) {
    if (code != QCODE_UINT) { /* the code's bits times 2^(127 - bias) times s, as (2^(127 - bias) s) in one
                                * product: the same real number, rounded once, unless that factor overflows */
        int shift = code == QCODE_E5M2 ? FP8_E5M2_SHIFT : FP8_E4M3_SHIFT;
        float rescale = code == QCODE_E5M2 ? FP8_E5M2_SCALE : FP8_E4M3_SCALE, folded = rescale * s;
        if (isinf(folded))
#pragma GCC unroll 32
            for (int u = 0; u < QV; u++) out[u] = vmul(vmul(vload_fp8(blk + u * VL, shift), vset1(rescale)), vset1(s));
        else
#pragma GCC unroll 32
            for (int u = 0; u < QV; u++) out[u] = vmul(vload_fp8(blk + u * VL, shift), vset1(folded));
        return;
    }
    if (bits == 8) {
#pragma GCC unroll 32
        for (int u = 0; u < QV; u++) out[u] = vmul(vsub(vload_u8(blk + u * VL), vset1(z)), vset1(s));
        return;
    }
#pragma GCC unroll 16
    for (int u = 0; u < QV / 2; u++) vdequant_nib(blk + u * VL, t, &out[u], &out[u + QV / 2]);
}

/* Block at column c into the accumulators from index `first` on (mod 4). */
static inline __attribute__((always_inline)) void dot_q_block(const float *const *x, int nr, const uint8_t *w, int bits,
                                                              enum qcode code, float s, float z, vqtab t, int c,
                                                              int first, vf a[2][4]) {
    vf wv[QV];
    qblock(w + c / QBLOCK * (bits * QBLOCK / 8), bits, code, s, z, t, wv);
#pragma GCC unroll 32
    for (int u = 0; u < QV; u++)
#pragma GCC unroll 2
        for (int r = 0; r < nr; r++)
            a[r][(first + u) & 3] = vfma(wv[u], vload(x[r] + c + u * VL), a[r][(first + u) & 3]);
}

/* Group g of row `row` of q: its scale and zero point, and the table its 4-bit codes widen
 * through. */
static inline __attribute__((always_inline)) vqtab group_tab(const qlayout *q, size_t row, int g, float *s, float *z) {
    const float *sz = q->sz + (row * q->n_groups + g) * 2;
    *s = sz[0], *z = sz[1];
    return vqtab_make(*s, *z);
}

/* dot_row for a quantized row: the packed bytes are streamed once and widened in registers,
 * so 4-bit weights move an eighth of f32's bytes; bits and nr are constant once inlined.
 * Blocks go in pairs, the second into the other accumulators: with 16 lanes a block is two
 * vectors, and two accumulator chains alone would wait on the FMA latency. */
static inline __attribute__((always_inline)) void dot_q_row(const float *const *x, int nr, const uint8_t *w, int bits,
                                                            enum qcode code, const qlayout *q, size_t row, float y[2]) {
    vf a[2][4];
#pragma GCC unroll 2
    for (int r = 0; r < 2; r++)
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) a[r][u] = vset1(0.0f);
    for (int g = 0, c = 0; g < q->n_groups; g++) {
        float s, z;
        vqtab t = group_tab(q, row, g, &s, &z);
        int end = q->group_end[g];
        for (; c + 2 * QBLOCK <= end; c += 2 * QBLOCK) {
            dot_q_block(x, nr, w, bits, code, s, z, t, c, 0, a);
            dot_q_block(x, nr, w, bits, code, s, z, t, c + QBLOCK, QV, a);
        }
        if (c < end) dot_q_block(x, nr, w, bits, code, s, z, t, c, 0, a), c += QBLOCK;
    }
#pragma GCC unroll 2
    for (int r = 0; r < nr; r++) y[r] = vhsum(vadd(vadd(a[r][0], a[r][1]), vadd(a[r][2], a[r][3])));
}

/* GGUF blocks (tensor/gguf_blocks.h) decoded a vector at a time. Each weight's integer code is
 * built in float from its bit fields (small integers: exact), then scaled with the same one or
 * two roundings as the definition (dl * q, then - ml or + m): gguf-py's bits. IQ4's
 * non-uniform levels are looked up (vlevels_nib) and scaled once. */
static inline __attribute__((always_inline)) void gg_put(float *out, vf q, float dl, bool min, float ml) {
    vf p = vmul(vset1(dl), q);
    vstore(out, min ? vsub(p, vset1(ml)) : p);
}

/* A k-quant block of 256 weights at b into out. */
static inline __attribute__((always_inline)) void gg_kquant(int t, const uint8_t *b, float *out) {
    switch (t) {
    case GT_Q2_K: { /* scales[16] qs[64] d dmin: 16 groups of 16 */
        float d = gguf_f16(b + 80), dmin = gguf_f16(b + 82);
        for (int g = 0; g < 16; g++) {
            int i0 = g * 16 % 128;
            const uint8_t *q = b + 16 + g / 8 * 32 + i0 % 32;
            float dl = d * (float)(b[g] & 15), ml = dmin * (float)(b[g] >> 4);
            for (int u = 0; u < 16; u += VL) gg_put(out + g * 16 + u, vbits_u8(q + u, 2 * (i0 / 32), 3), dl, true, ml);
        }
        return;
    }
    case GT_Q3_K: { /* hmask[32] qs[64] scales[12] d */
        const uint8_t *s = b + 96;
        float d = gguf_f16(b + 108);
        for (int g = 0; g < 16; g++) {
            int e0 = g * 16, i0 = e0 % 128;
            int lo = g < 8 ? s[g] & 15 : s[g - 8] >> 4, hi = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
            float dl = d * (float)((int8_t)(lo | hi << 4) - 32);
            const uint8_t *q = b + 32 + e0 / 128 * 32 + i0 % 32, *h = b + e0 % 32;
            for (int u = 0; u < 16; u += VL) { /* ql - 4 (1 - bit): the bit set means no offset */
                vf neg = vsub(vset1(1.0f), vbits_u8(h + u, e0 / 32, 1));
                gg_put(out + e0 + u, vsub(vbits_u8(q + u, 2 * (i0 / 32), 3), vmul(neg, vset1(4.0f))), dl, false, 0);
            }
        }
        return;
    }
    case GT_Q4_K:
    case GT_Q5_K: { /* d dmin scales[12] (Q5_K: qh[32]) qs[128]: 8 groups of 32 */
        uint8_t sc[8], mn[8];
        float d = gguf_f16(b), dmin = gguf_f16(b + 2);
        gguf_k_scales(b + 4, sc, mn);
        const uint8_t *qs = b + (t == GT_Q5_K ? 48 : 16);
        for (int g = 0; g < 8; g++) {
            float dl = d * (float)sc[g], ml = dmin * (float)mn[g];
            for (int u = 0; u < 32; u += VL) {
                vf q = vbits_u8(qs + g / 2 * 32 + u, 4 * (g % 2), 15);
                if (t == GT_Q5_K) q = vadd(q, vmul(vbits_u8(b + 16 + u, g, 1), vset1(16.0f)));
                gg_put(out + g * 32 + u, q, dl, true, ml);
            }
        }
        return;
    }
    case GT_Q6_K: { /* ql[128] qh[64] scales[16] d: 16 groups of 16 */
        float d = gguf_f16(b + 208);
        for (int g = 0; g < 16; g++) {
            int e0 = g * 16, h = e0 / 128, i0 = e0 % 128;
            float dl = d * (float)(int8_t)b[192 + g];
            const uint8_t *lo = b + h * 64 + i0 % 64, *hi = b + 128 + h * 32 + i0 % 32;
            for (int u = 0; u < 16; u += VL) {
                vf q =
                    vadd(vbits_u8(lo + u, 4 * (i0 / 64), 15), vmul(vbits_u8(hi + u, 2 * (i0 / 32), 3), vset1(16.0f)));
                gg_put(out + e0 + u, vsub(q, vset1(32.0f)), dl, false, 0);
            }
        }
        return;
    }
    }
}

/* A block of 32 at b into out (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0). */
static inline __attribute__((always_inline)) void gg_block32(int t, const uint8_t *b, float *out) {
    float d = gguf_f16(b);
    if (t == GT_Q8_0) { /* signed bytes: u - 256 where u >= 128 */
        for (int u = 0; u < 32; u += VL) {
            vf q = vbits_u8(b + 2 + u, 0, 255);
            vstore(out + u, vmul(vsub(q, vkeep_ge(q, 128.0f, vset1(256.0f))), vset1(d)));
        }
        return;
    }
    bool min = t == GT_Q4_1 || t == GT_Q5_1, five = t == GT_Q5_0 || t == GT_Q5_1;
    float m = min ? gguf_f16(b + 2) : 0, offset = min ? 0 : five ? 16.0f : 8.0f;
    const uint8_t *qs = b + 2 + (min ? 2 : 0) + (five ? 4 : 0);
    const uint8_t *h = b + (min ? 4 : 2);
    uint32_t high = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
    for (int u = 0; u < 32; u += VL) {
        vf q = vbits_u8(qs + u % 16, u < 16 ? 0 : 4, 15);
        if (five) q = vadd(q, vmul(vbit_lanes(high, u), vset1(16.0f)));
        vf p = vmul(vset1(d), vsub(q, vset1(offset)));
        vstore(out + u, min ? vadd(p, vset1(m)) : p);
    }
}

/* IQ4_NL's block of 32 or IQ4_XS's of 256 (8 groups of 32 under 6-bit sub-scales), or MXFP4's of
 * 32, at b into out: d (or d times the sub-scale) times each code's level. */
static inline __attribute__((always_inline)) void gg_iq4(int t, const uint8_t *b, float *out) {
    bool mx = t == GT_MXFP4;
    float d = mx ? gguf_e8m0_half(b[0]) : gguf_f16(b);
    int groups = t == GT_IQ4_XS ? 8 : 1;
    unsigned sh = b[2] | (unsigned)b[3] << 8;
    for (int g = 0; g < groups; g++) {
        const uint8_t *qs = t == GT_IQ4_XS ? b + 8 + g * 16 : b + (mx ? 1 : 2);
        int ls = ((b[4 + g / 2] >> (4 * (g % 2))) & 15) | (int)((sh >> (2 * g)) & 3) << 4;
        float dl = t == GT_IQ4_XS ? d * (float)(ls - 32) : d;
        for (int u = 0; u < 16; u += VL) {
            vf lo, hi;
            vlevels_nib(qs + u, mx ? gguf_mxfp4_levels : gguf_iq4_levels, &lo, &hi);
            vstore(out + g * 32 + u, vmul(vset1(dl), lo));
            vstore(out + g * 32 + 16 + u, vmul(vset1(dl), hi));
        }
    }
}

/* Weights [c0, c0 + n) of a GGUF row (whole blocks) into out. */
static void gguf_span(int t, const uint8_t *row, int c0, int n, float *out) {
    const gtype_info *g = &gtype_table[t];
    const uint8_t *b = row + (size_t)(c0 / g->block) * g->bytes;
/* each type its own loop, the type constant in the inlined block decoder */
#define GG_LOOP(type, block, decode)                                                                                   \
    case type:                                                                                                         \
        for (int c = 0; c < n; c += block, b += g->bytes) decode(type, b, out + c);                                    \
        return;
    switch (t) {
        GG_LOOP(GT_Q2_K, QK_K, gg_kquant)
        GG_LOOP(GT_Q3_K, QK_K, gg_kquant)
        GG_LOOP(GT_Q4_K, QK_K, gg_kquant)
        GG_LOOP(GT_Q5_K, QK_K, gg_kquant)
        GG_LOOP(GT_Q6_K, QK_K, gg_kquant)
        GG_LOOP(GT_Q4_0, 32, gg_block32)
        GG_LOOP(GT_Q4_1, 32, gg_block32)
        GG_LOOP(GT_Q5_0, 32, gg_block32)
        GG_LOOP(GT_Q5_1, 32, gg_block32)
        GG_LOOP(GT_Q8_0, 32, gg_block32)
        GG_LOOP(GT_IQ4_NL, 32, gg_iq4)
        GG_LOOP(GT_IQ4_XS, QK_K, gg_iq4)
        GG_LOOP(GT_MXFP4, 32, gg_iq4)
    case GT_F16:
    case GT_BF16: /* one-element blocks: the store hands them over as plain dtypes, so test_gguf alone reads them here */
        for (int c = 0; c < n; c++, b += 2)
            out[c] = t == GT_F16 ? gguf_f16(b) : bf16_to_f32((uint16_t)(b[0] | b[1] << 8));
        return;
    default: return; /* other types are refused at load (model/gguf.c) */
    }
}

/* Weights [c0, c0 + n) of a row's slice that starts g0 weights into its first block (a
 * row-parallel share cut inside a k-quant super-block, tensor/gguf_blocks.h's gtype_split): whole
 * blocks decoded in place, a partial first or last one through a block on the stack. */
static void gguf_slice(int t, const uint8_t *row, int g0, int c0, int n, float *out) {
    float part[QK_K] __attribute__((aligned(64)));
    int block = gtype_table[t].block, at = g0 + c0, end = at + n, head = at % block;
    if (head) {
        int k = block - head < n ? block - head : n;
        gguf_span(t, row, at - head, block, part);
        memcpy(out, part + head, (size_t)k * sizeof *out);
        out += k, at += k;
    }
    int whole = (end - at) / block * block;
    if (whole) gguf_span(t, row, at, whole, out);
    out += whole, at += whole;
    if (at < end) {
        gguf_span(t, row, at, block, part);
        memcpy(out, part, (size_t)(end - at) * sizeof *out);
    }
}

/* Weights decoded from GGUF blocks at a time, on the stack: a whole number of any type's blocks */
#define GGUF_SPAN 2048

/* A GGUF row: each span of it decoded exactly into f32 and dotted as f32 weights are, the spans'
 * sums added in order. */
static void dot_gguf(const float *const *x, int nr, const uint8_t *w, const qlayout *q, float y[2]) {
    float span[GGUF_SPAN] __attribute__((aligned(64)));
    y[0] = y[1] = 0;
    for (int c = 0; c < q->kp; c += GGUF_SPAN) {
        int n = q->kp - c < GGUF_SPAN ? q->kp - c : GGUF_SPAN;
        const float *xs[2] = {x[0] + c, x[nr - 1] + c};
        float part[2] = {0, 0};
        gguf_slice(q->gtype, w, q->g0, c, n, span);
        if (nr == 2) dot_row(xs, 2, span, false, n, part);
        else dot_row(xs, 1, span, false, n, part);
        for (int r = 0; r < nr; r++) y[r] += part[r];
    }
}

/* GGUF rows on int8 activations (cpu.h's dot_gguf_q8). A type's block is read as blocks of 32
 * weights: each block's integer codes (gq_codes), and the scales of its block, once a block:
 * the factor dl a sub-block's codes are scaled by and the ml taken off times its activations'
 * sum (gq_scales), per 16 columns where a sub-block is 16 (gq_sub16), else per block of 32. */
typedef struct gq_scales {
    float dl[16], ml[16];
} gq_scales;

static inline bool gq_sub16(int t) { return t == GT_Q2_K || t == GT_Q3_K || t == GT_Q6_K; }

/* The block types whose codes meet int8 activations (dot_gguf_q8, panel_gguf_q8): each kernel's
 * switch instantiates its loop once per type with X, so that t is constant inside it. (Left as
 * written: clang-format 14 reflows this list differently on each pass.) */
/* clang-format off */
#define GQ_INT8_TYPES(X) \
    X(GT_Q2_K) X(GT_Q3_K) X(GT_Q4_K) X(GT_Q5_K) X(GT_Q6_K) \
    X(GT_Q4_0) X(GT_Q4_1) X(GT_Q5_0) X(GT_Q5_1) X(GT_Q8_0) \
    X(GT_IQ4_NL) X(GT_IQ4_XS) X(GT_MXFP4)
/* clang-format on */

/* The scales of the block (a super-block, or a block of 32) at b, as the definition rounds them:
 * d times the sub-block's integer scale (gg_kquant's dl), and dmin times its min (ml). */
static inline __attribute__((always_inline)) void gq_header(int t, const uint8_t *b, gq_scales *s) {
    switch (t) {
    case GT_Q2_K: {
        uint8_t sc[16], mn[16];
        for (int h = 0; h < 16; h++) sc[h] = b[h] & 15, mn[h] = b[h] >> 4;
        vgf d = vgf_set1(gguf_f16(b + 80)), dmin = vgf_set1(gguf_f16(b + 82));
        for (int h = 0; h < 16; h += 8) {
            vgf_store(s->dl + h, vgf_mul(d, vgf_from_u8(sc + h)));
            vgf_store(s->ml + h, vgf_mul(dmin, vgf_from_u8(mn + h)));
        }
        return;
    }
    case GT_Q3_K: {
        const uint8_t *sc = b + 96;
        float d = gguf_f16(b + 108);
        for (int h = 0; h < 16; h++) {
            int lo = h < 8 ? sc[h] & 15 : sc[h - 8] >> 4, hi = (sc[8 + h % 4] >> (2 * (h / 4))) & 3;
            s->dl[h] = d * (float)((int8_t)(lo | hi << 4) - 32);
        }
        return;
    }
    case GT_Q4_K:
    case GT_Q5_K: {
        uint8_t sc[8], mn[8];
        gguf_k_scales(b + 4, sc, mn);
        vgf_store(s->dl, vgf_mul(vgf_set1(gguf_f16(b)), vgf_from_u8(sc)));
        vgf_store(s->ml, vgf_mul(vgf_set1(gguf_f16(b + 2)), vgf_from_u8(mn)));
        return;
    }
    case GT_Q6_K: {
        vgf d = vgf_set1(gguf_f16(b + 208));
        for (int h = 0; h < 16; h += 8) vgf_store(s->dl + h, vgf_mul(d, vgf_from_i8((const int8_t *)b + 192 + h)));
        return;
    }
    case GT_IQ4_XS: { /* 6-bit scales: low 4 bits, a nibble each, from bytes 4-7; high 2 from bytes 2-3 */
        uint32_t lo;
        uint16_t hi;
        memcpy(&lo, b + 4, 4), memcpy(&hi, b + 2, 2);
        uint64_t ls = gguf_spread_nibbles(lo) | gguf_spread_pairs(hi) << 4;
        uint8_t sc[8];
        memcpy(sc, &ls, 8);
        vgf_store(s->dl, vgf_mul(vgf_set1(gguf_f16(b)), vgf_sub(vgf_from_u8(sc), vgf_set1(32))));
        return;
    }
    default: /* blocks of 32: one scale; Q4_1's and Q5_1's min is added, so taken off negated */
        s->dl[0] = t == GT_MXFP4 ? gguf_e8m0_half(b[0]) : gguf_f16(b);
        if (gtype_has_mins(t)) s->ml[0] = -gguf_f16(b + 2);
        return;
    }
}

/* Block j's lanes of v (dl or ml) times the activation scale dx, one rounding each */
static inline __attribute__((always_inline)) vgf gq_factor(int t, const float *v, int j, float dx) {
    return gq_sub16(t) ? vgf_halves(v[2 * j] * dx, v[2 * j + 1] * dx) : vgf_set1(v[j] * dx);
}

/* Block j (of 32 weights) of the block at b as signed integer codes: the weight is its code
 * times its sub-block's dl, less its ml. */
static inline __attribute__((always_inline)) vgb gq_codes(int t, const uint8_t *b, int j) {
    switch (t) {
    case GT_Q2_K: return vgb_bits(vgb_load(b + 16 + j / 4 * 32), 2 * (j % 4), 3);
    case GT_Q3_K: /* low 2 bits, less 4 where the high bit is clear */
        return vgb_sub(
            vgb_or(vgb_bits(vgb_load(b + 32 + j / 4 * 32), 2 * (j % 4), 3), vgb_shl(vgb_bits(vgb_load(b), j, 1), 2)),
            4);
    case GT_Q4_K: return vgb_bits(vgb_load(b + 16 + j / 2 * 32), 4 * (j % 2), 15);
    case GT_Q5_K:
        return vgb_or(vgb_bits(vgb_load(b + 48 + j / 2 * 32), 4 * (j % 2), 15),
                      vgb_shl(vgb_bits(vgb_load(b + 16), j, 1), 4));
    case GT_Q6_K: {
        int half = j / 4, jj = j % 4;
        vgb lo = vgb_bits(vgb_load(b + half * 64 + jj % 2 * 32), 4 * (jj / 2), 15);
        vgb hi = vgb_bits(vgb_load(b + 128 + half * 32), 2 * jj, 3);
        return vgb_sub(vgb_or(lo, vgb_shl(hi, 4)), 32);
    }
    case GT_IQ4_XS: return vgb_levels(vgb_nib16(b + 8 + j * 16), gguf_iq4_levels);
    case GT_IQ4_NL: return vgb_levels(vgb_nib16(b + 2), gguf_iq4_levels);
    case GT_MXFP4: return vgb_levels(vgb_nib16(b + 1), gguf_mxfp4_levels);
    case GT_Q4_0: return vgb_sub(vgb_nib16(b + 2), 8);
    case GT_Q4_1: return vgb_nib16(b + 4);
    case GT_Q5_0:
    case GT_Q5_1: {
        int min = t == GT_Q5_1;
        uint32_t high;
        memcpy(&high, b + 2 + 2 * min, 4);
        vgb q = vgb_or(vgb_nib16(b + 6 + 2 * min), vgb_shl(vgb_bit32(high), 4));
        return min ? q : vgb_sub(q, 16);
    }
    default: return vgb_load(b + 2); /* Q8_0 */
    }
}

/* The most input rows dot_gguf_q8 takes through a block at once: 8 where the variant has 32
 * vector registers for their chains (AVX-512), else 4. */
#if defined(LOOM_VARIANT_AVX512) || defined(LOOM_VARIANT_AVX512BF16)
#define GQ_ROWS 8
#else
#define GQ_ROWS 4
#endif
_Static_assert(GQ_ROWS <= GGUF_Q8_ROWS, "cpu.h's dot_gguf_q8 takes at most GGUF_Q8_ROWS rows a call");

/* Block j of the block at b, at column c of the slice, into chain h of the rows' chains acc
 * (Q2_K's mins, by 16 columns, into mt's: each lane's activation codes added as its products
 * are). For a super-block's edge blocks; pairs take gq_pair. */
static inline __attribute__((always_inline)) void gq_block(int t, const q8row *x, int nr, int live, const uint8_t *b,
                                                           const gq_scales *s, int j, int c, int h, vgf2 acc[GQ_ROWS],
                                                           vgf2 mt[GQ_ROWS]) {
    vgb code = gq_codes(t, b, j);
#pragma GCC unroll 8
    for (int r = 0; r < nr && r < live; r++) {
        float dx = x[r].d[c / QACT];
        vgl sums = gtype_has_mins(t) ? vgl_dot_u(code, x[r].q + c) : vgl_dot(code, x[r].q + c);
        acc[r] = vgf2_fma_half(h, sums, gq_factor(t, s->dl, j, dx), acc[r]);
        if (t == GT_Q2_K)
            mt[r] = vgf2_fma_half(h, vgl_dot_u(vgb_set1(1), x[r].q + c), gq_factor(t, s->ml, j, dx), mt[r]);
    }
}

/* A pair of blocks at column c of the slice: block j (even) of the block at b, and the next,
 * block j + 1 of the same super-block or (b1 another block of 32) b1's; f[r] holds each row's
 * factors (dl times the activation scale) by block, or by 16 columns (gq_sub16), block j's at
 * index j (or 2j), fm[r] Q2_K's mins' likewise. Even block into chain 0, odd into chain 1. */
static inline __attribute__((always_inline)) void gq_pair(int t, const q8row *x, int nr, int live, const uint8_t *b,
                                                          const uint8_t *b1, int j, int c, const float f[GQ_ROWS][16],
                                                          const float fm[GQ_ROWS][16], vgf2 acc[GQ_ROWS],
                                                          vgf2 mt[GQ_ROWS]) {
    vgb2 code;
    if (t == GT_Q4_K) code = vgb2_nibbles(b + 16 + j / 2 * 32); /* the pair shares its bytes */
    else if (t == GT_Q6_K) { /* gq_codes' fields for both: its low bits 64 bytes on, its high bits shared */
        int half = j / 4, jj = j % 4;
        vgb2 lo = vgb2_bits(b + half * 64, 4 * (jj / 2), 15),
             hi = vgb2_bits_twice(b + 128 + half * 32, 2 * jj, 2 * jj + 2, 3);
        code = vgb2_sub(vgb2_or(lo, vgb2_shl(hi, 4)), 32);
    } else code = vgb2_join(gq_codes(t, b, j), gq_codes(t, b1, b1 == b ? j + 1 : 0));
#pragma GCC unroll 8
    for (int r = 0; r < nr && r < live; r++) {
        vgl2 sums = gtype_has_mins(t) ? vgl2_dot_u(code, x[r].q + c) : vgl2_dot(code, x[r].q + c);
        acc[r] = vgf2_fma(sums, gq_sub16(t) ? vgf2_quad(f[r] + 2 * j) : vgf2_pair(f[r] + j), acc[r]);
        if (t == GT_Q2_K)
            mt[r] =
                vgf2_fma(vgl2_dot_u(vgb2_join(vgb_set1(1), vgb_set1(1)), x[r].q + c), vgf2_quad(fm[r] + 2 * j), mt[r]);
    }
}

/* A whole super-block's factors for each row, its first block the slice's i0: dl (and Q2_K's ml)
 * times the activation scale of each column's block, one rounding, as gq_factor's. */
static inline __attribute__((always_inline)) void gq_factors(int t, const q8row *x, int nr, int live,
                                                             const gq_scales *s, int i0, float f[GQ_ROWS][16],
                                                             float fm[GQ_ROWS][16]) {
#pragma GCC unroll 8
    for (int r = 0; r < nr && r < live; r++) {
        const float *d = x[r].d + i0;
        if (!gq_sub16(t)) {
            vgf_store(f[r], vgf_mul(vgf_load(s->dl), vgf_load(d)));
            continue;
        }
        vgf dx = vgf_load(d), lo = vgf_dup_lo(dx), hi = vgf_dup_hi(dx); /* each block's scale for its two halves */
        vgf_store(f[r], vgf_mul(vgf_load(s->dl), lo)), vgf_store(f[r] + 8, vgf_mul(vgf_load(s->dl + 8), hi));
        if (t == GT_Q2_K)
            vgf_store(fm[r], vgf_mul(vgf_load(s->ml), lo)), vgf_store(fm[r] + 8, vgf_mul(vgf_load(s->ml + 8), hi));
    }
}

/* Q4_K's and Q5_K's mins for a super-block whose blocks [j0, end) are the slice's from block i0:
 * each block's min times its activations' sum (q d, gsum), eight lanes, those outside the slice
 * zero, into the rows' chains mt. */
static inline __attribute__((always_inline)) void gq_mins_super(const q8row *x, int nr, int live, const gq_scales *s,
                                                                int j0, int end, int i0, vgf mt[GQ_ROWS]) {
#pragma GCC unroll 8
    for (int r = 0; r < nr && r < live; r++) {
        const float *gs = x[r].gsum + i0;
        float part[8];
        if (j0 || end < 8) {
            for (int j = 0; j < 8; j++) part[j] = j >= j0 && j < end ? gs[j - j0] : 0;
            gs = part;
        }
        mt[r] = vgf_fmaf(vgf_load(s->ml), vgf_load(gs), mt[r]);
    }
}

/* Bytes ahead that dot_gguf_q8 prefetches in its row stream. One Emerald Rapids Xeon, 2 threads,
 * the 1B shape in Q4_K_M: 15.7-15.9 tok/s at 512, 14.8-18.0 at 1536, 18.9-21.4 at 4096,
 * 21.7-22.5 at 8192, 22.2-22.4 at 16384 (the hardware's own prefetch runs too short a way). */
#define GQ_PREFETCH 8192
/* dot_gguf_q8 for the first `live` of nr (1, 2, 4 or GQ_ROWS) input rows, t and nr constant
 * once inlined (so are the rows' chains, in registers: every loop over rows unrolls to nr copies,
 * those past `live` skipped): each block's scales read once, each block of 32 decoded once for
 * all the rows, the blocks in pairs (even and odd in the row: the chains). A whole super-block's
 * eight go as four pairs with every bit field at a constant place; the slice's partial first and
 * last ones block by block. */
static inline __attribute__((always_inline)) void dot_gguf_q8_rows(int t, const q8row *x, int nr, int live,
                                                                   const uint8_t *w, const qlayout *q, float *y) {
    const gtype_info *g = &gtype_table[t];
    const int per = g->block / QACT, n = q->kp / QACT; /* blocks of 32 a block; in the slice */
    vgf2 acc[GQ_ROWS], mt2[GQ_ROWS];
    vgf mt[GQ_ROWS];
    float ms[GQ_ROWS], f[GQ_ROWS][16], fm[GQ_ROWS][16];
#pragma GCC unroll 8
    for (int r = 0; r < nr && r < live; r++) acc[r] = mt2[r] = vgf2_zero(), mt[r] = vgf_zero(), ms[r] = 0;
    gq_scales s, s1;
    if (per == 1) { /* blocks of 32, in pairs; their mins (Q4_1, Q5_1) in ms */
        int i = 0;
        for (; i + 2 <= n; i += 2, w += 2 * g->bytes) {
            __builtin_prefetch(w + GQ_PREFETCH);
            gq_header(t, w, &s), gq_header(t, w + g->bytes, &s1);
#pragma GCC unroll 8
            for (int r = 0; r < nr && r < live; r++) f[r][0] = s.dl[0] * x[r].d[i], f[r][1] = s1.dl[0] * x[r].d[i + 1];
            gq_pair(t, x, nr, live, w, w + g->bytes, 0, 32 * i, f, fm, acc, mt2);
            for (int r = 0; gtype_has_mins(t) && r < nr && r < live; r++)
                ms[r] = __builtin_fmaf(s1.ml[0], x[r].gsum[i + 1], __builtin_fmaf(s.ml[0], x[r].gsum[i], ms[r]));
        }
        if (i < n) {
            gq_header(t, w, &s);
            gq_block(t, x, nr, live, w, &s, 0, 32 * i, 0, acc, mt2);
            for (int r = 0; gtype_has_mins(t) && r < nr && r < live; r++)
                ms[r] = __builtin_fmaf(s.ml[0], x[r].gsum[i], ms[r]);
        }
    } else { /* super-blocks, the slice's first and last perhaps in part; i: the slice's block, j: its own */
        for (int i = 0, j = q->g0 / QACT; i < n; j = 0, w += g->bytes) {
            int end = per - j < n - i ? per : j + n - i, j0 = j, i0 = i;
            for (int p = 0; p < g->bytes; p += 64) __builtin_prefetch(w + GQ_PREFETCH + p);
            gq_header(t, w, &s);
            if (j == 0 && end == per) {
                gq_factors(t, x, nr, live, &s, i, f, fm);
#pragma GCC unroll 8
                for (int k = 0; k < per; k += 2) gq_pair(t, x, nr, live, w, w, k, 32 * (i + k), f, fm, acc, mt2);
                i += per;
            } else {
                for (; j < end; j++, i++) gq_block(t, x, nr, live, w, &s, j, 32 * i, j & 1, acc, mt2);
            }
            if (t == GT_Q4_K || t == GT_Q5_K) gq_mins_super(x, nr, live, &s, j0, end, i0, mt);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < nr && r < live; r++)
        y[r] = vgf_sum(vgf2_fold(acc[r])) - (vgf_sum(vgf_add(vgf2_fold(mt2[r]), mt[r])) + ms[r]);
}

/* GQ_ROWS rows at once where more than 4 come, else 4 at a time and the rest by 2 and 1. GCC
 * cannot see that the rows' factors (f, fm) are read under the same `r < live` they are written
 * under, and warns in the GQ_ROWS instance (clang does not, and knows no such warning). */
#if GQ_ROWS > 4 && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
static void dot_gguf_q8(const q8row *x, int nr, const uint8_t *w, const qlayout *q, float *y) {
#define GQ_TYPE(type)                                                                                                  \
    case type:                                                                                                         \
        if (GQ_ROWS > 4 && nr > 4) {                                                                                   \
            dot_gguf_q8_rows(type, x, GQ_ROWS, nr, w, q, y);                                                           \
            return;                                                                                                    \
        }                                                                                                              \
        for (; nr >= 4; nr -= 4, x += 4, y += 4) dot_gguf_q8_rows(type, x, 4, 4, w, q, y);                             \
        if (nr >= 2) dot_gguf_q8_rows(type, x, 2, 2, w, q, y), nr -= 2, x += 2, y += 2;                                \
        if (nr) dot_gguf_q8_rows(type, x, 1, 1, w, q, y);                                                              \
        return;
    switch (q->gtype) {
        GQ_INT8_TYPES(GQ_TYPE)
    default: return; /* plain element types compute on fp32 activations (runtime/bind.c) */
    }
#undef GQ_TYPE
}
#if GQ_ROWS > 4 && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#if defined(LOOM_VARIANT_AVX2) || defined(LOOM_VARIANT_AVX2VNNI) || defined(LOOM_VARIANT_AVX512) ||                    \
    defined(LOOM_VARIANT_AVX512BF16) || defined(LOOM_VARIANT_NEON) || defined(LOOM_VARIANT_NEONDOT)
#define HAS_GGUF_PANEL 1
/* A GGUF prefill (cpu.h's panel_gguf_q8): on x86 AMX's tiles, AVX-512 VNNI, or 256-bit integer
 * products (AVX-VNNI's, or AVX2's vpmaddubsw) where the CPU has nothing wider; on Arm, sdot by
 * lane (neondot) or widening multiplies (neon). The panel's 16
 * weight rows are decoded once into integer codes (gq_codes) and their sub-blocks' factors dl and
 * ml (gq_header's), lane n of each sub-block's 16; the codes laid out as the tiles take them,
 * which is also the lanes the vector products want: dword n of 64-byte row c / 4 holds weight
 * row n's columns c..c + 3 (a 256-bit product takes rows 0-7 or 8-15, one half of it). t
 * constant once inlined. */
static inline __attribute__((always_inline)) void gguf_unpack_row(int t, const uint8_t *w, const qlayout *q, int n,
                                                                  int8_t *codes, float *dl, float *ml) {
    const gtype_info *g = &gtype_table[t];
    const int per = g->block / QACT, n32 = q->kp / QACT, halves = gq_sub16(t);
    gq_scales s;
    for (int i = 0, j = q->g0 / QACT; i < n32; j = 0, w += g->bytes) {
        int end = per - j < n32 - i ? per : j + n32 - i;
        gq_header(t, w, &s);
        for (; j < end; j++, i++) {
            vgb_store(codes + (size_t)QACT * i, gq_codes(t, w, j));
            for (int h = 0; h <= halves; h++) {
                int u = (i << halves) + h, k = halves ? 2 * j + h : j;
                dl[u * PANEL_Q8_W + n] = s.dl[k];
                ml[u * PANEL_Q8_W + n] = gtype_has_mins(t) ? s.ml[k] : 0;
            }
        }
    }
}

static void gguf_pack(const int8_t *codes, int kp, uint8_t *pack) {
#if defined(LOOM_VARIANT_AVX512BF16)
    const __m512i rows = _mm512_mullo_epi32(_mm512_set1_epi32(kp),
                                            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    for (int c = 0; c < kp; c += 4, pack += 64) _mm512_storeu_si512(pack, _mm512_i32gather_epi32(rows, codes + c, 1));
#elif defined(__x86_64__)
    const __m256i lo = _mm256_mullo_epi32(_mm256_set1_epi32(kp), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256i hi = _mm256_add_epi32(lo, _mm256_set1_epi32(8 * kp));
    for (int c = 0; c < kp; c += 4, pack += 64) {
        _mm256_storeu_si256((__m256i *)pack, _mm256_i32gather_epi32((const int *)(codes + c), lo, 1));
        _mm256_storeu_si256((__m256i *)(pack + 32), _mm256_i32gather_epi32((const int *)(codes + c), hi, 1));
    }
#else /* Arm: no gather; the panel is decoded once for every input row of the pass */
    for (int c = 0; c < kp; c += 4, pack += 64)
        for (int n = 0; n < PANEL_Q8_W; n++) memcpy(pack + 4 * n, codes + (size_t)n * kp + c, 4);
#endif
}

#if defined(LOOM_VARIANT_AVX512BF16) && !defined(LOOM_VARIANT_AVX512AMX)
/* Input rows x (VNNI_ROWS, those past `rows` repeating the last: not stored) against the packed
 * panel, in panel_gguf_q8's order. vpdpbusd multiplies unsigned bytes by signed ones: the codes
 * go in offset by 128 (their top bit flipped) against each row's four activation codes
 * broadcast, and each sum starts at -128 times the sub-block's activation codes' sum (xs), so it
 * is exact, the tiles' own. width and mins constant once inlined. 12 rows a call measured the
 * same as 8 (1B shape, Q6_K and IQ4_XS, prefill 512, Emerald Rapids). */
#define VNNI_ROWS 8
static inline __attribute__((always_inline)) void gguf_vnni_rows(const q8row *x, const int32_t *const *xs, int rows,
                                                                 const uint8_t *pack, const float *dl, const float *ml,
                                                                 int kp, int width, bool mins, float *y, size_t ldy,
                                                                 __mmask16 cols) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512 acc[VNNI_ROWS];
#pragma GCC unroll 8
    for (int r = 0; r < VNNI_ROWS; r++) acc[r] = _mm512_setzero_ps();
    for (int k = 0; k < kp / QACT; k++) {
        __m512i w[8];
#pragma GCC unroll 8
        for (int t = 0; t < 8; t++) w[t] = _mm512_xor_si512(_mm512_loadu_si512(pack + ((size_t)k * 8 + t) * 64), flip);
        const int u = width == 16 ? 2 * k : k; /* the block's first sub-block */
        __m512 dv = _mm512_loadu_ps(dl + (size_t)u * PANEL_Q8_W), mv = _mm512_loadu_ps(ml + (size_t)u * PANEL_Q8_W);
#pragma GCC unroll 8
        for (int r = 0; r < VNNI_ROWS; r++) {
            int32_t a[8];
            memcpy(a, x[r].q + (size_t)k * QACT, sizeof a);
            __m512i s0 = _mm512_set1_epi32(-128 * xs[r][u]);
            if (width == 16) {
                __m512i s1 = _mm512_set1_epi32(-128 * xs[r][u + 1]);
#pragma GCC unroll 4
                for (int t = 0; t < 4; t++) {
                    s0 = _mm512_dpbusd_epi32(s0, w[t], _mm512_set1_epi32(a[t]));
                    s1 = _mm512_dpbusd_epi32(s1, w[t + 4], _mm512_set1_epi32(a[t + 4]));
                }
                __m512 p = _mm512_mul_ps(_mm512_cvtepi32_ps(s0), dv);
                p = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_loadu_ps(dl + (size_t)(u + 1) * PANEL_Q8_W), p);
                acc[r] = _mm512_fmadd_ps(p, _mm512_set1_ps(x[r].d[k]), acc[r]);
            } else {
#pragma GCC unroll 8
                for (int t = 0; t < 8; t++) s0 = _mm512_dpbusd_epi32(s0, w[t], _mm512_set1_epi32(a[t]));
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_mul_ps(dv, _mm512_set1_ps(x[r].d[k])), acc[r]);
            }
            for (int h = 0; mins && h < QACT / width; h++)
                acc[r] = _mm512_fnmadd_ps(h ? _mm512_loadu_ps(ml + (size_t)(u + 1) * PANEL_Q8_W) : mv,
                                          _mm512_set1_ps(x[r].gsum[u + h]), acc[r]);
        }
    }
    for (int r = 0; r < rows; r++) _mm512_mask_storeu_ps(y + (size_t)r * ldy, cols, acc[r]);
}

/* nr input rows against the packed panel, VNNI_ROWS at a time, the last group's missing rows
 * repeating its last row. */
static void gguf_vnni(const q8row *x, const int32_t *xsum, int nr, const uint8_t *pack, const float *dl,
                      const float *ml, int kp, int width, bool mins, float *y, size_t ldy, int nw) {
    const int nsub = kp / width;
    const __mmask16 cols = (__mmask16)((1u << nw) - 1);
    for (int r = 0; r < nr; r += VNNI_ROWS) {
        q8row xr[VNNI_ROWS];
        const int32_t *xs[VNNI_ROWS];
        int rows = nr - r < VNNI_ROWS ? nr - r : VNNI_ROWS;
        for (int i = 0; i < VNNI_ROWS; i++) {
            int at = r + (i < rows ? i : rows - 1);
            xr[i] = x[at], xs[i] = xsum + (size_t)at * nsub;
        }
        float *yr = y + (size_t)r * ldy;
#define GV(w, m) gguf_vnni_rows(xr, xs, rows, pack, dl, ml, kp, w, m, yr, ldy, cols)
        if (width == 16 && mins) GV(16, true);
        else if (width == 16) GV(16, false);
        else if (mins) GV(QACT, true);
        else GV(QACT, false);
#undef GV
    }
}
#elif defined(LOOM_VARIANT_NEON) || defined(LOOM_VARIANT_NEONDOT)
/* Four weight rows' codes, four columns a lane (w[l]: the pack's 16 bytes of them for columns
 * 4l..4l+3 of a sub-block), against 16 activation codes x, added into a. sdot takes lane l of x
 * as each lane's four activations; neon broadcasts them and adds widened products in pairs, then
 * pairs of pairs. Both sums are exact, so both variants give the tiles' bits. */
#if defined(LOOM_VARIANT_NEONDOT)
#define GGUF_DOT_LANE(a, w, x, l) vdotq_laneq_s32(a, w, x, l)
#else
#define GGUF_DOT_LANE(a, w, x, l)                                                                                      \
    vaddq_s32(a, vdot4_s8(w, vreinterpretq_s8_s32(vdupq_laneq_s32(vreinterpretq_s32_s8(x), l))))
#endif
static inline __attribute__((always_inline)) int32x4_t gguf_dot16(int32x4_t a, const int8x16_t w[4], int8x16_t x) {
    a = GGUF_DOT_LANE(a, w[0], x, 0);
    a = GGUF_DOT_LANE(a, w[1], x, 1);
    a = GGUF_DOT_LANE(a, w[2], x, 2);
    return GGUF_DOT_LANE(a, w[3], x, 3);
}

/* NEON_GGUF_ROWS input rows x (those past `rows` repeating the last, not stored) against one
 * quarter of the packed panel (4 weight rows, a lane each; pack, dl and ml that quarter's; `in`
 * of them stored), in panel_gguf_q8's order. width and mins constant once inlined: the block's
 * eight weight vectors and the rows' accumulators stay within NEON's 32 registers. */
#define NEON_GGUF_ROWS 4
static inline __attribute__((always_inline)) void gguf_rows_neon(const q8row *x, int rows, const uint8_t *pack,
                                                                 const float *dl, const float *ml, int kp, int width,
                                                                 bool mins, float *y, size_t ldy, int in) {
    float32x4_t acc[NEON_GGUF_ROWS];
#pragma GCC unroll 4
    for (int r = 0; r < NEON_GGUF_ROWS; r++) acc[r] = vdupq_n_f32(0);
    for (int k = 0; k < kp / QACT; k++) {
        int8x16_t w[8];
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) w[c] = vld1q_s8((const int8_t *)pack + ((size_t)k * 8 + c) * 64);
        const int u = width == 16 ? 2 * k : k; /* the block's first sub-block */
        float32x4_t dv = vld1q_f32(dl + (size_t)u * PANEL_Q8_W);
#pragma GCC unroll 4
        for (int r = 0; r < NEON_GGUF_ROWS; r++) {
            const int8_t *a = x[r].q + (size_t)k * QACT;
            int32x4_t s0 = gguf_dot16(vdupq_n_s32(0), w, vld1q_s8(a));
            if (width == 16) {
                int32x4_t s1 = gguf_dot16(vdupq_n_s32(0), w + 4, vld1q_s8(a + 16));
                float32x4_t p = vmulq_f32(vcvtq_f32_s32(s0), dv);
                p = vfmaq_f32(p, vcvtq_f32_s32(s1), vld1q_f32(dl + (size_t)(u + 1) * PANEL_Q8_W));
                acc[r] = vfmaq_f32(acc[r], p, vdupq_n_f32(x[r].d[k]));
            } else {
                s0 = gguf_dot16(s0, w + 4, vld1q_s8(a + 16));
                acc[r] = vfmaq_f32(acc[r], vcvtq_f32_s32(s0), vmulq_f32(dv, vdupq_n_f32(x[r].d[k])));
            }
            for (int h = 0; mins && h < QACT / width; h++)
                acc[r] = vfmsq_f32(acc[r], vld1q_f32(ml + (size_t)(u + h) * PANEL_Q8_W), vdupq_n_f32(x[r].gsum[u + h]));
        }
    }
    for (int r = 0; r < rows; r++) {
        float out[4];
        vst1q_f32(out, acc[r]);
        memcpy(y + (size_t)r * ldy, out, (size_t)in * sizeof *out);
    }
}

/* nr input rows against the packed panel, NEON_GGUF_ROWS at a time, a quarter of its weight
 * rows in turn. */
static void gguf_panel_neon(const q8row *x, int nr, const uint8_t *pack, const float *dl, const float *ml, int kp,
                            int width, bool mins, float *y, size_t ldy, int nw) {
    for (int r = 0; r < nr; r += NEON_GGUF_ROWS) {
        q8row xr[NEON_GGUF_ROWS];
        int rows = nr - r < NEON_GGUF_ROWS ? nr - r : NEON_GGUF_ROWS;
        for (int i = 0; i < NEON_GGUF_ROWS; i++) xr[i] = x[r + (i < rows ? i : rows - 1)];
        for (int h = 0; h * 4 < nw; h++) {
            int in = nw - h * 4 < 4 ? nw - h * 4 : 4;
            float *yr = y + (size_t)r * ldy + h * 4;
#define GN(w, m) gguf_rows_neon(xr, rows, pack + h * 16, dl + h * 4, ml + h * 4, kp, w, m, yr, ldy, in)
            if (width == 16 && mins) GN(16, true);
            else if (width == 16) GN(16, false);
            else if (mins) GN(QACT, true);
            else GN(QACT, false);
#undef GN
        }
    }
}
#elif !defined(LOOM_VARIANT_AVX512BF16)
/* What a type's codes (gq_codes) are offset by in the 256-bit panel, to make them the unsigned
 * bytes vpmaddubsw and vpdpbusd take: 0 for the types with mins, whose codes are never negative;
 * -min for the others; 128 for Q8_0's and IQ4's, which reach -128 or -127 (with AVX-VNNI only:
 * AVX2 multiplies them by their magnitude instead, gguf_sum256). The largest offset code is then
 * umax. */
typedef struct gq_offset {
    int bias, umax;
} gq_offset;
static inline gq_offset gq_offset_of(int t) {
    switch (t) {
    case GT_Q2_K: return (gq_offset){0, 3};
    case GT_Q3_K: return (gq_offset){4, 7};
    case GT_Q4_K:
    case GT_Q4_1: return (gq_offset){0, 15};
    case GT_Q4_0: return (gq_offset){8, 15};
    case GT_Q5_K:
    case GT_Q5_1: return (gq_offset){0, 31};
    case GT_Q5_0: return (gq_offset){16, 31};
    case GT_Q6_K: return (gq_offset){32, 63};
    case GT_MXFP4: return (gq_offset){12, 24};
#if defined(LOOM_VARIANT_AVX2VNNI)
    default: return (gq_offset){128, 255}; /* Q8_0, IQ4_NL, IQ4_XS */
#else
    default: return (gq_offset){0, 128};
#endif
    }
}

/* How many of vpmaddubsw's int16 results gguf_sum256 adds before widening (its `pairs`): as
 * many as stay exact (2 * 127 * umax each), at most a sub-block's; 0 where even one may not. */
static inline int gq_pairs(int t) {
    int fit = 32767 / (2 * 127 * gq_offset_of(t).umax), most = gtype_split(t) / 4;
    return fit >= most ? most : fit >= 4 ? 4 : fit >= 2 ? 2 : 0;
}

static inline __m256i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* One sub-block's products of the half panel's 8 weight rows w[t0..t0 + n) (offset codes, a lane
 * each) with an input row's codes a (four broadcast at a time, from column 4 t0), added to s,
 * which starts at -bias times the sub-block's activation codes' sum, so the sum is exact. AVX2's
 * vpmaddubsw adds two products into an int16 lane, at most 2 * 127 * umax, and `pairs` (2, 4 or
 * 8) of its results are added there before widening while that stays exact; with pairs 0 (Q8_0's
 * and IQ4's codes, not offset) it takes |w| times a with w's sign. AVX-VNNI's vpdpbusd has no
 * intermediate to overflow. */
static inline __attribute__((always_inline)) __m256i gguf_sum256(__m256i s, const int8_t *a, const __m256i *w, int t0,
                                                                 int n, int pairs) {
#define A4(t) bcast4(a + 4 * (t0 + (t)))
#if defined(LOOM_VARIANT_AVX2VNNI)
    (void)pairs;
#pragma GCC unroll 8
    for (int t = 0; t < n; t++) s = _mm256_dpbusd_avx_epi32(s, w[t0 + t], A4(t));
#else
    const __m256i ones = _mm256_set1_epi16(1);
    if (pairs == 0) {
#pragma GCC unroll 8
        for (int t = 0; t < n; t++) {
            __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(w[t0 + t]), _mm256_sign_epi8(A4(t), w[t0 + t]));
            s = _mm256_add_epi32(s, _mm256_madd_epi16(p, ones));
        }
        return s;
    }
#pragma GCC unroll 8
    for (int t = 0; t < n; t += pairs) {
        __m256i p = _mm256_maddubs_epi16(w[t0 + t], A4(t));
#pragma GCC unroll 8
        for (int i = 1; i < pairs; i++) p = _mm256_add_epi16(p, _mm256_maddubs_epi16(w[t0 + t + i], A4(t + i)));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(p, ones));
    }
#endif
#undef A4
    return s;
}

/* GGUF_ROWS input rows (x, xs their sums' starts by sub-block; those past `rows`
 * repeating the last, not stored) against one half of the packed panel (8 weight rows, a lane
 * each; pack, dl and ml that half's), in panel_gguf_q8's order. t constant once inlined. Four
 * rows keep the block's eight weight vectors, the rows' accumulators and the temporaries within
 * AVX2's 16 registers. */
#define GGUF_ROWS 4
static inline __attribute__((always_inline)) void gguf_rows256(int t, const q8row *x, const int32_t *const *xs,
                                                               int rows, const uint8_t *pack, const float *dl,
                                                               const float *ml, int kp, float *y, size_t ldy,
                                                               __m256i cols) {
    const int width = gtype_split(t), bias = gq_offset_of(t).bias, pairs = gq_pairs(t);
    const bool mins = gtype_has_mins(t);
    __m256 acc[GGUF_ROWS];
#pragma GCC unroll 4
    for (int r = 0; r < GGUF_ROWS; r++) acc[r] = _mm256_setzero_ps();
    for (int k = 0; k < kp / QACT; k++) {
        __m256i w[8];
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) w[c] = _mm256_loadu_si256((const __m256i *)(pack + ((size_t)k * 8 + c) * 64));
        const int u = width == 16 ? 2 * k : k; /* the block's first sub-block */
        __m256 dv = _mm256_loadu_ps(dl + (size_t)u * PANEL_Q8_W), mv = _mm256_loadu_ps(ml + (size_t)u * PANEL_Q8_W);
#pragma GCC unroll 4
        for (int r = 0; r < GGUF_ROWS; r++) {
            const int8_t *ar = x[r].q + (size_t)k * QACT;
            __m256i s0 = gguf_sum256(_mm256_set1_epi32(bias ? xs[r][u] : 0), ar, w, 0, width / 4, pairs);
            if (width == 16) {
                __m256i s1 = gguf_sum256(_mm256_set1_epi32(bias ? xs[r][u + 1] : 0), ar, w, 4, 4, pairs);
                __m256 p = _mm256_mul_ps(_mm256_cvtepi32_ps(s0), dv);
                p = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), _mm256_loadu_ps(dl + (size_t)(u + 1) * PANEL_Q8_W), p);
                acc[r] = _mm256_fmadd_ps(p, _mm256_set1_ps(x[r].d[k]), acc[r]);
            } else
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_mul_ps(dv, _mm256_set1_ps(x[r].d[k])), acc[r]);
            for (int h = 0; mins && h < QACT / width; h++)
                acc[r] = _mm256_fnmadd_ps(h ? _mm256_loadu_ps(ml + (size_t)(u + 1) * PANEL_Q8_W) : mv,
                                          _mm256_set1_ps(x[r].gsum[u + h]), acc[r]);
        }
    }
    for (int r = 0; r < rows; r++) _mm256_maskstore_ps(y + (size_t)r * ldy, cols, acc[r]);
}

/* nr input rows against the packed panel (its codes offset here by gq_offset_of's bias),
 * GGUF_ROWS at a time, each half of its weight rows in turn. A group's sums start at -bias times
 * its rows' activation code sums, which corr (scratch past the panel) holds for the group, so
 * that a sum's start is one broadcast load. */
static void gguf_panel256(const q8row *x, const int32_t *xsum, int nr, uint8_t *pack, const float *dl, const float *ml,
                          int kp, int t, float *y, size_t ldy, int nw) {
    const int nsub = kp / gtype_split(t), bias = gq_offset_of(t).bias;
    int32_t *corr = (int32_t *)(pack + (size_t)kp * PANEL_Q8_W); /* the tiles' input rows' part */
    for (size_t i = 0; bias && i < (size_t)kp * PANEL_Q8_W; i += 32)
        _mm256_storeu_si256((__m256i *)(pack + i), _mm256_add_epi8(_mm256_loadu_si256((const __m256i *)(pack + i)),
                                                                   _mm256_set1_epi8((char)bias)));
    for (int r = 0; r < nr; r += GGUF_ROWS) {
        q8row xr[GGUF_ROWS];
        const int32_t *xs[GGUF_ROWS];
        int rows = nr - r < GGUF_ROWS ? nr - r : GGUF_ROWS;
        for (int i = 0; i < GGUF_ROWS; i++) {
            int at = r + (i < rows ? i : rows - 1);
            xr[i] = x[at], xs[i] = corr + (size_t)i * nsub;
            for (int u = 0; bias && i < rows && u < nsub; u++)
                corr[(size_t)i * nsub + u] = -bias * xsum[(size_t)at * nsub + u];
        }
        for (int h = 0; h * 8 < nw; h++) {
            int in = nw - h * 8 < 8 ? nw - h * 8 : 8;
            __m256i cols = _mm256_cmpgt_epi32(_mm256_set1_epi32(in), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            float *yr = y + (size_t)r * ldy + h * 8;
#define G2_TYPE(type)                                                                                                  \
    case type:                                                                                                         \
        gguf_rows256(type, xr, xs, rows, pack + h * 32, dl + h * 8, ml + h * 8, kp, yr, ldy, cols);                    \
        break;
            switch (t) {
                GQ_INT8_TYPES(G2_TYPE)
            default: return;
            }
#undef G2_TYPE
        }
    }
}
#endif

static void panel_gguf_q8(const q8row *x, size_t x_stride, const int32_t *xsum, int nr, const uint8_t *w, size_t ld,
                          int nw, const qlayout *q, uint8_t *pack, float *y, size_t ldy) {
    const int t = q->gtype, kp = q->kp;
    int8_t *codes = panel_gguf_codes(pack, kp);
    float *dl = panel_gguf_dl(pack, kp), *ml = panel_gguf_ml(pack, kp);
    for (int n = 0; n < PANEL_Q8_W; n++) { /* rows past nw repeat the last: their sums are not stored */
        const uint8_t *row = w + (size_t)(n < nw ? n : nw - 1) * ld;
        int8_t *cn = codes + (size_t)n * kp;
#define GU_TYPE(type)                                                                                                  \
    case type: gguf_unpack_row(type, row, q, n, cn, dl, ml); break;
        switch (t) {
            GQ_INT8_TYPES(GU_TYPE)
        default: return; /* plain element types compute on fp32 activations (runtime/bind.c) */
        }
#undef GU_TYPE
    }
    gguf_pack(codes, kp, pack);
#if defined(LOOM_VARIANT_AVX512AMX)
    (void)xsum; /* the tiles multiply signed bytes by signed bytes */
    amx_panel_gguf(x, x_stride, nr, pack, dl, ml, kp, gtype_split(t), gtype_has_mins(t), y, ldy, nw);
#elif defined(LOOM_VARIANT_AVX512BF16)
    (void)x_stride;
    gguf_vnni(x, xsum, nr, pack, dl, ml, kp, gtype_split(t), gtype_has_mins(t), y, ldy, nw);
#elif defined(LOOM_VARIANT_NEON) || defined(LOOM_VARIANT_NEONDOT)
    (void)x_stride, (void)xsum; /* signed products: no offset to take back */
    gguf_panel_neon(x, nr, pack, dl, ml, kp, gtype_split(t), gtype_has_mins(t), y, ldy, nw);
#else
    (void)x_stride;
    gguf_panel256(x, xsum, nr, pack, dl, ml, kp, t, y, ldy, nw);
#endif
}
#endif

/* Each kind of code and row count its own loop (constants once inlined). */
static void dot_q(const float *const *x, int nr, const uint8_t *w, const qlayout *q, size_t row, float y[2]) {
    switch (q->code) {
    case QCODE_E2M1: return; /* a source's codes only: qmat_build makes them QCODE_GGUF */
    case QCODE_GGUF: dot_gguf(x, nr, w, q, y); break;
    case QCODE_E4M3:
        if (nr == 2) dot_q_row(x, 2, w, 8, QCODE_E4M3, q, row, y);
        else dot_q_row(x, 1, w, 8, QCODE_E4M3, q, row, y);
        break;
    case QCODE_E5M2:
        if (nr == 2) dot_q_row(x, 2, w, 8, QCODE_E5M2, q, row, y);
        else dot_q_row(x, 1, w, 8, QCODE_E5M2, q, row, y);
        break;
    case QCODE_UINT:
        if (q->bits == 4) {
            if (nr == 2) dot_q_row(x, 2, w, 4, QCODE_UINT, q, row, y);
            else dot_q_row(x, 1, w, 4, QCODE_UINT, q, row, y);
        } else {
            if (nr == 2) dot_q_row(x, 2, w, 8, QCODE_UINT, q, row, y);
            else dot_q_row(x, 1, w, 8, QCODE_UINT, q, row, y);
        }
        break;
    }
}

static void dequant_q(const uint8_t *w, const qlayout *q, size_t row, float *dst) {
    if (q->code == QCODE_GGUF) {
        gguf_slice(q->gtype, w, q->g0, 0, q->kp, dst);
        return;
    }
    const int block_bytes = q->bits * QBLOCK / 8;
    for (int g = 0, c = 0; g < q->n_groups; g++) {
        float s, z;
        vqtab t = group_tab(q, row, g, &s, &z);
        for (; c < q->group_end[g]; c += QBLOCK) {
            vf wv[QV];
            if (q->code == QCODE_E4M3) qblock(w + c / QBLOCK * block_bytes, 8, QCODE_E4M3, s, z, t, wv);
            else if (q->code == QCODE_E5M2) qblock(w + c / QBLOCK * block_bytes, 8, QCODE_E5M2, s, z, t, wv);
            else if (q->bits == 4) qblock(w + c / QBLOCK * block_bytes, 4, QCODE_UINT, s, z, t, wv);
            else qblock(w + c / QBLOCK * block_bytes, 8, QCODE_UINT, s, z, t, wv);
#pragma GCC unroll 32
            for (int u = 0; u < QV; u++) vstore(dst + c + u * VL, wv[u]);
        }
    }
}

#if defined(LOOM_VARIANT_AVX512AMX)
_Static_assert(Q8_OFFSET8 == 0, "amx.c's panel sums 8-bit codes unsigned: the tile must too");
#endif

#if !HAS_INT8_TILE
/* dot_q_row on int8 activations (cpu.h's q8row), in the order cpu.h fixes for every int8
 * product: a block's exact integer sum (its lanes added), times the block's activation scale
 * into the group's sum, that times the group's scale into the row's, and the zero point (less
 * the variant's 8-bit offset) once per group through the row's group sum. Every row keeps its
 * own sums, so a row's result is the same whatever rows share the call. */
static inline __attribute__((always_inline)) void dot_q8_row(const q8row *x, int nr, const uint8_t *w, int bits,
                                                             const qlayout *q, const float *sz, float y[4]) {
    _Static_assert(QACT == QBLOCK, "one activation scale per packed block");
    const size_t block_bytes = (size_t)bits * QBLOCK / 8;
    float acc[4] = {0, 0, 0, 0}, zero_term[4] = {0, 0, 0, 0};
    const uint8_t *blk = w;
    size_t c = 0; /* unsigned, so that block and scale indices are shifts */
    for (int g = 0; g < q->n_groups; g++) {
        float s = sz[2 * g], sz_g = s * (sz[2 * g + 1] - (bits == 8 ? Q8_OFFSET8 : 0)), ga[4] = {0, 0, 0, 0};
        for (size_t end = (size_t)q->group_end[g]; c < end; c += QBLOCK, blk += block_bytes) {
            vq wv = bits == 4 ? vq_nib(blk) : vq_prep8(blk);
#pragma GCC unroll 4
            for (int r = 0; r < nr; r++) {
                vacc i = bits == 4 ? vacc_dot4(vacc_zero(), wv, x[r].q + c) : vacc_dot8(vacc_zero(), wv, x[r].q + c);
                ga[r] = __builtin_fmaf((float)vacc_hsum(i), x[r].d[c / QBLOCK], ga[r]);
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            acc[r] = __builtin_fmaf(ga[r], s, acc[r]);
            zero_term[r] = __builtin_fmaf(sz_g, x[r].gsum[g], zero_term[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++) y[r] = acc[r] - zero_term[r];
}

static void dot_q8(const q8row *x, int nr, const uint8_t *w, const qlayout *q, const float *sz, float y[4]) {
#define DOT_Q8_NR(bits)                                                                                                \
    switch (nr) {                                                                                                      \
    case 1: dot_q8_row(x, 1, w, bits, q, sz, y); break;                                                                \
    case 2: dot_q8_row(x, 2, w, bits, q, sz, y); break;                                                                \
    case 3: dot_q8_row(x, 3, w, bits, q, sz, y); break;                                                                \
    default: dot_q8_row(x, 4, w, bits, q, sz, y); break;                                                               \
    }
    if (q->bits == 4) DOT_Q8_NR(4)
    else DOT_Q8_NR(8)
#undef DOT_Q8_NR
}
#else
/* Input rows up to which the tile sums each weight row's blocks itself, two at a time, and
 * folds the sums into the lanes, rather than transposing the blocks to share them among the
 * input rows: with one or two there is little to share. One Zen 4 core, 4-bit, in the cache:
 * two rows 53.5 GMAC/s by sums, 39.9 transposed. */
#define TILE_BY_SUMS  2
/* Bytes ahead that the few-row path prefetches in each of its eight weight rows. Decode reads
 * eight streams an eighth of the matrix apart (kernels/linear.c), more than the prefetchers of
 * an Emerald Rapids Xeon follow: 1B shape, 4-bit, 2 threads, 24.5-25.5 tok/s without, 30.7-33.8
 * at 512 bytes ahead, 28.5-32.6 at 1024 (benches/RESULTS.md). */
#define TILE_PREFETCH 512

/* The exact sums of two consecutive blocks (at byte `at` of each row) of eight weight rows
 * against one input row's codes x: lane j of *s0 and *s1 for row j. */
static inline __attribute__((always_inline)) void tile_pair_sums(const int8_t *x, const uint8_t *const *w, size_t at,
                                                                 int bits, vacc *s0, vacc *s1) {
    vxpair xp = vx_pair(x, bits);
    vacc p[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) p[j] = vacc_pair(w[j] + at, xp, bits);
    vacc_sum8_pair(p, s0, s1);
}

/* tile_q8 for nr (1 to 8) input rows: the column sums of each 32-column block are exact
 * integers in the lanes, one lane per weight row; each block's is scaled by its activation
 * scale, each group's by its weight scale, and the zero points come off once per group, all in
 * the lanes. A (row, weight row) pair's result is the same whatever shares its tile, and
 * whichever way its blocks were summed. A group's last block, when it has an odd number, is
 * transposed, unless the group and the next are one block each (groups of 32): then the two
 * pair across the boundary. */
static inline __attribute__((always_inline)) void tile_q8_rows(const q8row *x, int nr, const uint8_t *const *w,
                                                               int bits, const qlayout *q, const float *const *sz,
                                                               float *y) {
    const size_t block_bytes = (size_t)bits * QBLOCK / 8;
    const float zero_offset = bits == 8 ? Q8_OFFSET8 : 0;
    vaccf acc[8], zt[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) acc[r] = zt[r] = vaccf_set1(0.0f);
    size_t c = 0;
    for (int g = 0; g < q->n_groups; g++) {
        vaccf sv = vaccf_gather8(sz, 2 * (size_t)g), ga[8];
        vaccf szv = vaccf_mul(sv, vaccf_sub(vaccf_gather8(sz, 2 * (size_t)g + 1), vaccf_set1(zero_offset)));
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) ga[r] = vaccf_set1(0.0f);
        size_t end = (size_t)q->group_end[g];
        if (nr <= TILE_BY_SUMS && end - c == QBLOCK && g + 1 < q->n_groups &&
            (size_t)q->group_end[g + 1] - end == QBLOCK) {
            /* two groups of one block each (groups of 32): their blocks pair across the
             * boundary, each sum then finished in its own group exactly as alone */
            vaccf sv1 = vaccf_gather8(sz, 2 * (size_t)g + 2);
            vaccf szv1 = vaccf_mul(sv1, vaccf_sub(vaccf_gather8(sz, 2 * (size_t)g + 3), vaccf_set1(zero_offset)));
#pragma GCC unroll 8
            for (int r = 0; r < nr; r++) {
                vacc s0, s1;
                tile_pair_sums(x[r].q + c, w, c / QBLOCK * block_bytes, bits, &s0, &s1);
                acc[r] = vaccf_mul_add(vaccf_fma(s0, x[r].d[c / QACT], ga[r]), sv, acc[r]);
                zt[r] = vaccf_axpy(x[r].gsum[g], szv, zt[r]);
                acc[r] = vaccf_mul_add(vaccf_fma(s1, x[r].d[c / QACT + 1], ga[r]), sv1, acc[r]);
                zt[r] = vaccf_axpy(x[r].gsum[g + 1], szv1, zt[r]);
            }
            c += 2 * QBLOCK, g++;
            continue;
        }
        for (; nr <= TILE_BY_SUMS && c + 2 * QBLOCK <= end; c += 2 * QBLOCK) {
            size_t at = c / QBLOCK * block_bytes;
            if (at % 64 == 0) /* a cache line ahead in each of the eight row streams */
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) __builtin_prefetch(w[j] + at + TILE_PREFETCH);
#pragma GCC unroll 8
            for (int r = 0; r < nr; r++) {
                vacc s0, s1;
                tile_pair_sums(x[r].q + c, w, at, bits, &s0, &s1);
                ga[r] = vaccf_fma(s1, x[r].d[c / QACT + 1], vaccf_fma(s0, x[r].d[c / QACT], ga[r]));
            }
        }
        for (; c < end; c += QBLOCK) {
            vq wt[8];
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++)
                wt[j] = bits == 4 ? vq_nib(w[j] + c / QBLOCK * block_bytes) : vq_prep8(w[j] + c / QBLOCK * block_bytes);
            vq_transpose8(wt);
            vacc i[8];
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++) i[r] = vacc_zero();
#pragma GCC unroll 8
            for (int t = 0; t < 8; t++)
#pragma GCC unroll 8
                for (int r = 0; r < nr; r++) i[r] = vacc_dot_x4(i[r], wt[t], x[r].q + c + 4 * t, bits);
#pragma GCC unroll 8
            for (int r = 0; r < nr; r++) ga[r] = vaccf_fma(vacc_x4_end(i[r], bits), x[r].d[c / QACT], ga[r]);
        }
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) {
            acc[r] = vaccf_mul_add(ga[r], sv, acc[r]);
            zt[r] = vaccf_axpy(x[r].gsum[g], szv, zt[r]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < nr; r++) vaccf_store(y + 8 * r, vaccf_sub(acc[r], zt[r]));
}

static void tile_q8(const q8row *x, int nr, const uint8_t *const *w, const qlayout *q, const float *const *sz,
                    float *y) {
#define TILE_Q8_NR(bits)                                                                                               \
    switch (nr) {                                                                                                      \
    case 1: tile_q8_rows(x, 1, w, bits, q, sz, y); break;                                                              \
    case 2: tile_q8_rows(x, 2, w, bits, q, sz, y); break;                                                              \
    case 3: tile_q8_rows(x, 3, w, bits, q, sz, y); break;                                                              \
    case 4: tile_q8_rows(x, 4, w, bits, q, sz, y); break;                                                              \
    case 5: tile_q8_rows(x, 5, w, bits, q, sz, y); break;                                                              \
    case 6: tile_q8_rows(x, 6, w, bits, q, sz, y); break;                                                              \
    case 7: tile_q8_rows(x, 7, w, bits, q, sz, y); break;                                                              \
    default: tile_q8_rows(x, 8, w, bits, q, sz, y); break;                                                             \
    }
    if (q->bits == 4) TILE_Q8_NR(4)
    else TILE_Q8_NR(8)
#undef TILE_Q8_NR
}
#endif

#if HAS_BF16_DOT
/* nw (1 or 2) bf16 weight rows against nr (1 to 4) rows of bf16 activations, two accumulators
 * per pair (VL pairs per product); the tail past the last whole product is zero-padded. Two
 * weight rows share each activation load, as each activation row shares each weight load: a
 * few-row pass (a speculative verify) is bound by loads, not products. Every pair sums in the
 * same order whatever nw and nr, so a row's result does not depend on which rows share its
 * call. */
static inline __attribute__((always_inline)) void
dot_bf16x_tile(const uint16_t *const *x, int nr, const uint16_t *const *w, int nw, int k, float y[2][4]) {
    vf a[2][4][2];
#pragma GCC unroll 2
    for (int j = 0; j < 2; j++)
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) a[j][r][0] = a[j][r][1] = vset1(0.0f);
    int k2 = k / (4 * VL) * (4 * VL);
    for (int i = 0; i < k2; i += 4 * VL)
#pragma GCC unroll 2
        for (int u = 0; u < 2; u++) {
            vbf wv[2];
#pragma GCC unroll 2
            for (int j = 0; j < nw; j++) wv[j] = vload_bf16x(w[j] + i + u * 2 * VL);
#pragma GCC unroll 4
            for (int r = 0; r < nr; r++) {
                vbf xv = vload_bf16x(x[r] + i + u * 2 * VL);
#pragma GCC unroll 2
                for (int j = 0; j < nw; j++) a[j][r][u] = vdot_bf16(a[j][r][u], xv, wv[j]);
            }
        }
    if (k2 < k) {
        uint16_t wt[2][4 * VL] = {{0}}, xt[4][4 * VL] = {{0}};
        for (int j = 0; j < nw; j++) memcpy(wt[j], w[j] + k2, (size_t)(k - k2) * sizeof *wt[j]);
        for (int r = 0; r < nr; r++) memcpy(xt[r], x[r] + k2, (size_t)(k - k2) * sizeof *xt[r]);
#pragma GCC unroll 2
        for (int u = 0; u < 2; u++)
#pragma GCC unroll 4
            for (int r = 0; r < nr; r++)
#pragma GCC unroll 2
                for (int j = 0; j < nw; j++)
                    a[j][r][u] =
                        vdot_bf16(a[j][r][u], vload_bf16x(xt[r] + u * 2 * VL), vload_bf16x(wt[j] + u * 2 * VL));
    }
#pragma GCC unroll 2
    for (int j = 0; j < nw; j++)
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) y[j][r] = vhsum(vadd(a[j][r][0], a[j][r][1]));
}

static void dot_bf16x(const uint16_t *const *x, int nr, const uint16_t *const *w, int nw, int k, float y[2][4]) {
#define DOT_BF16X_NR(nw)                                                                                               \
    switch (nr) {                                                                                                      \
    case 1: dot_bf16x_tile(x, 1, w, nw, k, y); break;                                                                  \
    case 2: dot_bf16x_tile(x, 2, w, nw, k, y); break;                                                                  \
    case 3: dot_bf16x_tile(x, 3, w, nw, k, y); break;                                                                  \
    default: dot_bf16x_tile(x, 4, w, nw, k, y); break;                                                                 \
    }
    if (nw == 2) DOT_BF16X_NR(2)
    else DOT_BF16X_NR(1)
#undef DOT_BF16X_NR
}

/* Bytes ahead that dot_fp8x prefetches in its weight row's stream. Without it the hardware's
 * prefetch ran too short a way for FP8's rows, whose widening leaves the loads waiting: FP8
 * decode of the 1B shape went from 8.85 to 13.5 tok/s (4096 and 16384 bytes the same), of the
 * 8B shape from 1.63 to 2.96 (a Xeon, family 6 model 167, avx512amx, 2 threads). bf16's rows
 * (dot_bf16x) stream at the machine's rate without it, and the same prefetch there made the 8B
 * shape's decode 9% slower. */
#define FP8X_PREFETCH 8192
/* One row of FP8 codes (a quantized matrix's packed row, groups of whole QBLOCKs) against nr (1
 * to 4) rows of bf16 activations: each block's codes widened to bf16 exactly in registers
 * (vload_fp8_bf16x), one bf16 dot product per block and input row into a group's fp32 sums
 * (blocks alternating between two), each group's sum times its scale into the row's. The
 * weights are exact and the sums fp32: only the input's bf16 rounding differs from exact. */
static inline __attribute__((always_inline)) void dot_fp8x_row(const uint16_t *const *x, int nr, const uint8_t *w,
                                                               int e5m2, const qlayout *q, const float *sz,
                                                               float y[4]) {
    vf total[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) total[r] = vset1(0.0f);
    for (int g = 0, c = 0; g < q->n_groups; g++) {
        vf a[4][2];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) a[r][0] = a[r][1] = vset1(0.0f);
        int end = q->group_end[g];
        for (; c + 2 * QBLOCK <= end; c += 2 * QBLOCK) {
            __builtin_prefetch(w + c + FP8X_PREFETCH); /* the step's 64 codes are one line */
#pragma GCC unroll 2
            for (int u = 0; u < 2; u++) {
                vbf wv = vload_fp8_bf16x(w + c + u * QBLOCK, e5m2);
#pragma GCC unroll 4
                for (int r = 0; r < nr; r++) a[r][u] = vdot_bf16(a[r][u], vload_bf16x(x[r] + c + u * QBLOCK), wv);
            }
        }
        if (c < end) {
            vbf wv = vload_fp8_bf16x(w + c, e5m2);
#pragma GCC unroll 4
            for (int r = 0; r < nr; r++) a[r][0] = vdot_bf16(a[r][0], vload_bf16x(x[r] + c), wv);
            c += QBLOCK;
        }
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) total[r] = vfma(vadd(a[r][0], a[r][1]), vset1(sz[2 * g]), total[r]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++) y[r] = vhsum(total[r]);
}

static void dot_fp8x(const uint16_t *const *x, int nr, const uint8_t *w, const qlayout *q, const float *sz,
                     float y[4]) {
#define DOT_FP8X_NR(e5m2)                                                                                              \
    switch (nr) {                                                                                                      \
    case 1: dot_fp8x_row(x, 1, w, e5m2, q, sz, y); break;                                                              \
    case 2: dot_fp8x_row(x, 2, w, e5m2, q, sz, y); break;                                                              \
    case 3: dot_fp8x_row(x, 3, w, e5m2, q, sz, y); break;                                                              \
    default: dot_fp8x_row(x, 4, w, e5m2, q, sz, y); break;                                                             \
    }
    if (q->code == QCODE_E5M2) DOT_FP8X_NR(1)
    else DOT_FP8X_NR(0)
#undef DOT_FP8X_NR
}

static void widen_fp8_bf16(const uint8_t *src, uint16_t *dst, int n, int e5m2) {
    for (int i = 0; i < n; i += 2 * VL) vstore_bf16x(dst + i, vload_fp8_bf16x(src + i, e5m2));
}
#endif

static void widen_bf16(const uint16_t *src, float *dst, int n) {
    for (int i = 0; i < n; i += VL) {
        if (n - i >= VL) vstore(dst + i, vload_bf16(src + i));
        else vstore_part(dst + i, vload_bf16_part(src + i, n - i), n - i);
    }
}

/* An int8 code's byte widens unsigned, u, and takes its sign as u - 256 where u >= 128; an E4M3
 * code widens exactly (tensor/fp8.h) before the scale's one rounding. */
static void widen_kv8(const uint8_t *src, float *dst, int n, float scale, int e4m3) {
    int i = 0;
    vf s = vset1(scale);
    if (e4m3)
        for (; i + VL <= n; i += VL)
            vstore(dst + i, vmul(vmul(vload_fp8(src + i, FP8_E4M3_SHIFT), vset1(FP8_E4M3_SCALE)), s));
    else
        for (; i + VL <= n; i += VL) {
            vf u = vload_u8(src + i);
            vstore(dst + i, vmul(vfma(vfloor(vmul(u, vset1(1.0f / 128))), vset1(-256.0f), u), s));
        }
    for (; i < n; i++) dst[i] = (e4m3 ? fp8_to_f32(src[i], QCODE_E4M3) : (float)(int8_t)src[i]) * scale;
}

/* Four accumulators: RMSNorm rows are a few thousand floats, and one chain would wait on the
 * add latency (`loom bench machine` also streams memory through this). */
static float sum_squares(const float *x, int n) {
    vf a[4] = {vset1(0.0f), vset1(0.0f), vset1(0.0f), vset1(0.0f)};
    int i = 0;
    for (; i + 4 * VL <= n; i += 4 * VL)
        for (int j = 0; j < 4; j++) {
            vf v = vload(x + i + j * VL);
            a[j] = vfma(v, v, a[j]);
        }
    for (; i < n; i += VL) {
        vf v = n - i >= VL ? vload(x + i) : vload_part(x + i, n - i, 0.0f);
        a[0] = vfma(v, v, a[0]);
    }
    return vhsum(vadd(vadd(a[0], a[1]), vadd(a[2], a[3])));
}

/* The elementwise kernels share one loop shape: whole vectors, then the tail through a
 * partial load and store; only the operation on the loaded vectors differs. */
#define ELEMENTWISE(n, ...)                                                                                            \
    for (int i = 0; i < (n); i += VL) {                                                                                \
        int m_ = (n)-i < VL ? (n)-i : VL;                                                                              \
        __VA_ARGS__                                                                                                    \
    }
#define LD(p)    (m_ == VL ? vload((p) + i) : vload_part((p) + i, m_, 0.0f))
#define ST(p, v) (m_ == VL ? vstore((p) + i, (v)) : vstore_part((p) + i, (v), m_))

static void scale_mul(const float *x, float s, const float *w, float *out, int n) {
    vf sv = vset1(s);
    ELEMENTWISE(n, ST(out, vmul(vmul(LD(x), sv), LD(w)));)
}

static void rope(const float *x, const float *cs, const float *sn, float *out, int half) {
    ELEMENTWISE(half, {
        vf a = LD(x), b = LD(x + half), c = LD(cs), s = LD(sn);
        ST(out, vsub(vmul(a, c), vmul(b, s)));
        ST(out + half, vadd(vmul(b, c), vmul(a, s)));
    })
}

static void silu_mul(const float *gate, const float *up, float *out, int n) {
    vf one = vset1(1.0f), zero = vset1(0.0f);
    ELEMENTWISE(n, {
        vf g = LD(gate);
        ST(out, vmul(vdiv(g, vadd(one, vexp(vsub(zero, g)))), LD(up)));
    })
}

static void silu_clamped_mul(const float *gate, const float *up, float *out, int n, float limit, float alpha) {
    vf one = vset1(1.0f), hi = vset1(limit), lo = vset1(-limit), na = vset1(-alpha);
    ELEMENTWISE(n, {
        vf g = vmin(LD(gate), hi), u = vadd(vmin(vmax(LD(up), lo), hi), one);
        ST(out, vmul(vdiv(g, vadd(one, vexp(vmul(na, g)))), u));
    })
}

/* 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3): torch's
 * gelu(approximate="tanh") without a tanh to vectorise */
static void gelu_tanh_mul(const float *gate, const float *up, float *out, int n) {
    vf one = vset1(1.0f), k = vset1(-2.0f * 0.7978845608028654f), c = vset1(0.044715f);
    ELEMENTWISE(n, {
        vf g = LD(gate);
        vf u = vmul(k, vadd(g, vmul(c, vmul(g, vmul(g, g))))); /* -2u */
        ST(out, vmul(vdiv(g, vadd(one, vexp(u))), LD(up)));
    })
}

static void add(const float *a, const float *b, float *out, int n) { ELEMENTWISE(n, ST(out, vadd(LD(a), LD(b)));) }

static void axpy(float a, const float *x, float *y, int n) {
    vf av = vset1(a);
    ELEMENTWISE(n, ST(y, vfma(av, LD(x), LD(y)));)
}

static void scale(const float *x, float s, float *out, int n) {
    vf sv = vset1(s);
    ELEMENTWISE(n, ST(out, vmul(LD(x), sv));)
}

/* delta_step (cpu.h): the columns DELTA_VECS vectors at a time through both halves of the step,
 * so that block of the state stays in L1 between them (a head's whole state, 64 KB at 128 x 128,
 * would not) and d's and out's sums stay in registers. */
#define DELTA_VECS 4
static void delta_step(float *S, int kd, int vd, float decay, float beta, const float *k, const float *v,
                       const float *q, float *out) {
    vf dv = vset1(decay), bv = vset1(beta);
    for (int j0 = 0; j0 < vd; j0 += DELTA_VECS * VL) {
        int nv = 0, m[DELTA_VECS];
        for (int j = j0; j < vd && nv < DELTA_VECS; j += VL) m[nv++] = vd - j < VL ? vd - j : VL;
        vf d[DELTA_VECS], o[DELTA_VECS];
        for (int u = 0; u < nv; u++) d[u] = o[u] = vset1(0.0f);
#define SLD(p, u)    (m[u] == VL ? vload(p) : vload_part((p), m[u], 0.0f))
#define SST(p, u, x) (m[u] == VL ? vstore((p), (x)) : vstore_part((p), (x), m[u]))
        for (int i = 0; i < kd; i++) {
            float *Si = S + (size_t)i * vd + j0;
            vf ki = vset1(k[i]);
            for (int u = 0; u < nv; u++) {
                vf s = vmul(SLD(Si + u * VL, u), dv);
                SST(Si + u * VL, u, s);
                d[u] = vfma(s, ki, d[u]);
            }
        }
        for (int u = 0; u < nv; u++) d[u] = vmul(vsub(SLD(v + j0 + u * VL, u), d[u]), bv);
        for (int i = 0; i < kd; i++) {
            float *Si = S + (size_t)i * vd + j0;
            vf ki = vset1(k[i]), qi = vset1(q[i]);
            for (int u = 0; u < nv; u++) {
                vf s = vfma(ki, d[u], SLD(Si + u * VL, u));
                SST(Si + u * VL, u, s);
                o[u] = vfma(s, qi, o[u]);
            }
        }
        for (int u = 0; u < nv; u++) SST(out + j0 + u * VL, u, o[u]);
#undef SLD
#undef SST
    }
}

static void ssm_step(float *S, int hd, int ds, float decay, float step, const float *x, const float *B, const float *C,
                     float d, float *y) {
    vf dv = vset1(decay);
    for (int p = 0; p < hd; p++) {
        float *Sp = S + (size_t)p * ds;
        vf sx = vset1(step * x[p]), acc = vset1(0.0f);
        ELEMENTWISE(ds, {
            vf s = vfma(sx, LD(B), vmul(LD(Sp), dv));
            ST(Sp, s);
            acc = vfma(s, LD(C), acc);
        })
        y[p] = vhsum(acc) + x[p] * d;
    }
}

static void conv_row(const float *const *rows, const float *taps, size_t ldt, int k, const float *bias, float *out,
                     int n) {
    vf one = vset1(1.0f), neg = vset1(-1.0f);
    ELEMENTWISE(n, {
        vf acc = bias ? LD(bias) : vset1(0.0f);
        for (int j = 0; j < k; j++) acc = vfma(LD(taps + j * ldt), LD(rows[j]), acc);
        ST(out, vdiv(acc, vadd(one, vexp(vmul(neg, acc)))));
    })
}

/* gemm_ordered (cpu.h): register tiles of nr rows of x by nv whole vectors of b's columns, each
 * accumulator one element's chain over i. The tile's shape is chosen for speed alone, by how
 * many vectors remain; no shape changes an element's chain. */
#define GT_ROWS 8 /* rows of a tile at most */
#define GT_VECS 4 /* vectors of a tile at most */

typedef struct gemm_args {
    int k, accumulate;
    const float *x, *b;
    size_t xr, xk, ldb, ldy;
    float *y;
} gemm_args;

static inline __attribute__((always_inline)) void gemm_tile(const gemm_args *g, int r0, int c0, int nr, int nv) {
    vf a[GT_ROWS][GT_VECS];
#pragma GCC unroll 8
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            a[r][v] = g->accumulate ? vload(g->y + (size_t)(r0 + r) * g->ldy + c0 + v * VL) : vset1(0.0f);
    const float *x = g->x + (size_t)r0 * g->xr, *b = g->b + c0;
    for (int i = 0; i < g->k; i++, x += g->xk, b += g->ldb) {
        vf bv[GT_VECS];
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) bv[v] = vload(b + v * VL);
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) {
            vf xv = vset1(x[(size_t)r * g->xr]);
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) a[r][v] = vfma(xv, bv[v], a[r][v]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) vstore(g->y + (size_t)(r0 + r) * g->ldy + c0 + v * VL, a[r][v]);
}

/* The last columns, fewer than a vector (w of them), one row at a time: the same chain per
 * element through partial loads. Only head sizes that are not a multiple of VL come here. */
static void gemm_tile_part(const gemm_args *g, int r, int c0, int w) {
    float *y = g->y + (size_t)r * g->ldy + c0;
    vf a = g->accumulate ? vload_part(y, w, 0.0f) : vset1(0.0f);
    const float *x = g->x + (size_t)r * g->xr, *b = g->b + c0;
    for (int i = 0; i < g->k; i++, x += g->xk, b += g->ldb) a = vfma(vset1(*x), vload_part(b, w, 0.0f), a);
    vstore_part(y, a, w);
}

#define GT_FN(r, v)                                                                                                    \
    static void gemm_tile_##r##_##v(const gemm_args *g, int r0, int c0) { gemm_tile(g, r0, c0, r, v); }
#define GT_FNS(v) GT_FN(1, v) GT_FN(2, v) GT_FN(3, v) GT_FN(4, v) GT_FN(5, v) GT_FN(6, v) GT_FN(7, v) GT_FN(8, v)
GT_FNS(1)
GT_FNS(2)
GT_FNS(3)
GT_FNS(4)
#define GT_ROW(r)                                                                                                      \
    { gemm_tile_##r##_1, gemm_tile_##r##_2, gemm_tile_##r##_3, gemm_tile_##r##_4 }
static void (*const gemm_tiles[GT_ROWS][GT_VECS])(const gemm_args *, int, int) = {
    GT_ROW(1), GT_ROW(2), GT_ROW(3), GT_ROW(4), GT_ROW(5), GT_ROW(6), GT_ROW(7), GT_ROW(8)};

static void gemm_ordered(int m, int n, int k, const float *x, size_t xr, size_t xk, const float *b, size_t ldb,
                         float *y, size_t ldy, int accumulate) {
    gemm_args g = {
        .k = k, .accumulate = accumulate, .x = x, .b = b, .xr = xr, .xk = xk, .ldb = ldb, .ldy = ldy, .y = y};
    int whole = n / VL * VL;
    for (int c0 = 0; c0 < whole; c0 += GT_VECS * VL) { /* columns outer: b's panel stays in the cache */
        int nv = (whole - c0) / VL < GT_VECS ? (whole - c0) / VL : GT_VECS;
        int rows = (VREGS - 1 - nv) / nv; /* accumulators, b's vectors and one broadcast in registers */
        if (rows > GT_ROWS) rows = GT_ROWS;
        for (int r0 = 0; r0 < m; r0 += rows) {
            int nr = m - r0 < rows ? m - r0 : rows;
            gemm_tiles[nr - 1][nv - 1](&g, r0, c0);
        }
    }
    for (int r = 0; whole < n && r < m; r++) gemm_tile_part(&g, r, whole, n - whole);
}

/* softmax_step (cpu.h): whole vectors of columns, then one partial */
static void softmax_step(float *s, size_t lds, int nk, int n, float *m, float *l, float *corr) {
    for (int c = 0; c < n; c += VL) {
        int w = n - c < VL ? n - c : VL;
#define LDC(p)    (w == VL ? vload(p) : vload_part((p), w, -INFINITY))
#define STC(p, v) (w == VL ? vstore((p), (v)) : vstore_part((p), (v), w))
        vf mx = LDC(m + c);
        for (int j = 0; j < nk; j++) mx = vmax(mx, LDC(s + (size_t)j * lds + c));
        vf sum = vset1(0.0f);
        for (int j = 0; j < nk; j++) {
            vf e = vexp(vsub(LDC(s + (size_t)j * lds + c), mx));
            sum = vadd(sum, e);
            STC(s + (size_t)j * lds + c, e);
        }
        vf cr = vexp(vsub(LDC(m + c), mx));
        STC(corr + c, cr);
        STC(l + c, vfma(LDC(l + c), cr, sum));
        STC(m + c, mx);
#undef LDC
#undef STC
    }
}

const cpu_kernels TABLE = {
    .name = STR(LOOM_VARIANT),
    .floats = VL,
    .dot_f32 = dot_f32,
    .dot_bf16 = dot_bf16,
    .widen_bf16 = widen_bf16,
    .widen_kv8 = widen_kv8,
    .dot_q = dot_q,
    .dequant_q = dequant_q,
    .dot_gguf_q8 = dot_gguf_q8,
#if HAS_INT8_TILE
    .tile_q8 = tile_q8,
#if defined(LOOM_VARIANT_AVX512AMX)
    .panel_q8 = amx_panel_q8, /* its 8-bit codes unsigned, as the tile's (Q8_OFFSET8 0) */
#endif
#else
    .dot_q8 = dot_q8,
#endif
#if HAS_GGUF_PANEL
    .panel_gguf_q8 = panel_gguf_q8,
#endif
#if HAS_BF16_DOT
    .dot_bf16x = dot_bf16x,
    .dot_fp8x = dot_fp8x,
    .widen_fp8_bf16 = widen_fp8_bf16,
#endif
    .sum_squares = sum_squares,
    .scale_mul = scale_mul,
    .rope = rope,
    .silu_mul = silu_mul,
    .silu_clamped_mul = silu_clamped_mul,
    .gelu_tanh_mul = gelu_tanh_mul,
    .add = add,
    .axpy = axpy,
    .scale = scale,
    .gemm_ordered = gemm_ordered,
    .softmax_step = softmax_step,
    .delta_step = delta_step,
    .ssm_step = ssm_step,
    .conv_row = conv_row,
};

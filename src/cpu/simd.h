/* The vector vocabulary variant.c writes its kernels in: a vector `vf` of VL floats and the
 * handful of operations the kernels need, for the one variant this translation unit is built
 * as (CMake defines LOOM_VARIANT_<NAME> and passes that variant's -m flags). This is the only
 * file with intrinsics. The generic variant is the same code with VL = 1: portable C that the
 * compiler may vectorise for the baseline ISA.
 *
 * A second, smaller vocabulary serves the integer dot products of quantized weights on int8
 * activations: `vq` holds one packed block's 32 weight codes, `vacc` integer lanes that sum
 * their products with 32 activation codes exactly; x86 works on 256-bit halves even with
 * AVX-512, so one block is one register. On x86, HAS_INT8_TILE adds the transposed blocks and
 * folded sums of the int8 tile and `vaccf`, float lanes one per weight row. A third,
 * HAS_BF16_DOT, is the bf16 dot product of the variants whose CPUs have one. */
#ifndef LOOM_CPU_SIMD_H
#define LOOM_CPU_SIMD_H
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(LOOM_VARIANT_AVX512) || defined(LOOM_VARIANT_AVX512BF16)
#include <immintrin.h>
#define VL    16
#define VREGS 32 /* vector registers, for the register tiles of variant.c */
typedef __m512 vf;
typedef __m512i vi;
static inline vf vload(const float *p) { return _mm512_loadu_ps(p); }
static inline void vstore(float *p, vf v) { _mm512_storeu_ps(p, v); }
static inline vf vset1(float x) { return _mm512_set1_ps(x); }
static inline vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf vsub(vf a, vf b) { return _mm512_sub_ps(a, b); }
static inline vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf vdiv(vf a, vf b) { return _mm512_div_ps(a, b); }
static inline vf vfma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline vf vmin(vf a, vf b) { return _mm512_min_ps(a, b); }
static inline vf vmax(vf a, vf b) { return _mm512_max_ps(a, b); }
static inline vf vfloor(vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
static inline float vhsum(vf a) { return _mm512_reduce_add_ps(a); }
static inline vf vload_bf16(const uint16_t *p) {
    __m256i h = _mm256_loadu_si256((const __m256i *)p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
/* VL bytes as floats */
static inline vf vload_u8(const uint8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)));
}
/* VL bytes' bit fields (b >> shift) & mask as floats: GGUF blocks' codes and their high bits */
static inline vf vbits_u8(const uint8_t *p, int shift, int mask) {
    __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm512_cvtepi32_ps(
        _mm512_and_si512(_mm512_srlv_epi32(b, _mm512_set1_epi32(shift)), _mm512_set1_epi32(mask)));
}
/* VL bytes' low and high 4-bit codes as entries of a 16-entry table of small integers (IQ4's
 * levels), looked up as floats with one permute each */
static inline void vlevels_nib(const uint8_t *p, const int8_t levels[16], vf *lo, vf *hi) {
    __m512 t = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)levels)));
    __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    *lo = _mm512_permutexvar_ps(b, t);
    *hi = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), t);
}
/* bits first, first + 1, ... of w, one a lane, as floats (0 or 1) */
static inline vf vbit_lanes(uint32_t w, int first) {
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i at = _mm512_add_epi32(iota, _mm512_set1_epi32(first));
    return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32((int)w), at), _mm512_set1_epi32(1)));
}
/* VL FP8 codes as f32 bits (tensor/fp8.h): sign to bit 31, the rest shifted up; each is the
 * code's value times 2^-(127 - bias), which the caller multiplies back */
static inline vf vload_fp8(const uint8_t *p, int shift) {
    __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    __m512i u =
        _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x80)), 24),
                        _mm512_sllv_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x7f)), _mm512_set1_epi32(shift)));
    return _mm512_castsi512_ps(u);
}
/* 4-bit codes dequantized, (q - z) * s: the 16 values a group's codes can take, made once per
 * group, then one permute per vector looks them up (it reads an index's low 4 bits only, so
 * the low nibbles need no mask) */
typedef struct vqtab {
    vf v;
} vqtab;
static inline vqtab vqtab_make(float s, float z) {
    const vf iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return (vqtab){_mm512_mul_ps(_mm512_sub_ps(iota, _mm512_set1_ps(z)), _mm512_set1_ps(s))};
}
static inline void vdequant_nib(const uint8_t *p, vqtab t, vf *lo, vf *hi) {
    __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    *lo = _mm512_permutexvar_ps(b, t.v);
    *hi = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), t.v);
}
/* 2^n for integral n in [-126, 127] */
static inline vf vpow2i(vf n) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23));
}
/* v where x >= lo, else 0 (NaN and -inf give 0) */
static inline vf vkeep_ge(vf x, float lo, vf v) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, vset1(lo), _CMP_GE_OQ), v);
}

#elif defined(LOOM_VARIANT_AVX2) || defined(LOOM_VARIANT_AVX2VNNI)
#include <immintrin.h>
#define VL    8
#define VREGS 16
typedef __m256 vf;
static inline vf vload(const float *p) { return _mm256_loadu_ps(p); }
static inline void vstore(float *p, vf v) { _mm256_storeu_ps(p, v); }
static inline vf vset1(float x) { return _mm256_set1_ps(x); }
static inline vf vadd(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf vsub(vf a, vf b) { return _mm256_sub_ps(a, b); }
static inline vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vf vdiv(vf a, vf b) { return _mm256_div_ps(a, b); }
static inline vf vfma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline vf vmin(vf a, vf b) { return _mm256_min_ps(a, b); }
static inline vf vmax(vf a, vf b) { return _mm256_max_ps(a, b); }
static inline vf vfloor(vf a) { return _mm256_floor_ps(a); }
static inline float vhsum(vf a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
static inline vf vload_bf16(const uint16_t *p) {
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
static inline vf vload_u8(const uint8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}
static inline vf vbits_u8(const uint8_t *p, int shift, int mask) {
    __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    return _mm256_cvtepi32_ps(
        _mm256_and_si256(_mm256_srlv_epi32(b, _mm256_set1_epi32(shift)), _mm256_set1_epi32(mask)));
}
static inline void vlevels_nib(const uint8_t *p, const int8_t levels[16], vf *lo, vf *hi) {
    const __m128i t = _mm_loadu_si128((const __m128i *)levels), nib = _mm_set1_epi8(15);
    __m128i b = _mm_loadl_epi64((const __m128i *)p);
    *lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_shuffle_epi8(t, _mm_and_si128(b, nib))));
    *hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_shuffle_epi8(t, _mm_and_si128(_mm_srli_epi16(b, 4), nib))));
}
static inline vf vbit_lanes(uint32_t w, int first) {
    __m256i at = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(first));
    return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)w), at), _mm256_set1_epi32(1)));
}
static inline vf vload_fp8(const uint8_t *p, int shift) {
    __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    __m256i u =
        _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x80)), 24),
                        _mm256_sllv_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7f)), _mm256_set1_epi32(shift)));
    return _mm256_castsi256_ps(u);
}
/* 4-bit codes dequantized, (q - z) * s (a 16-entry lookup needs two 8-lane permutes and a
 * blend here: no cheaper than converting) */
typedef struct vqtab {
    vf s, z;
} vqtab;
static inline vqtab vqtab_make(float s, float z) { return (vqtab){vset1(s), vset1(z)}; }
static inline void vdequant_nib(const uint8_t *p, vqtab t, vf *lo, vf *hi) {
    __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    *lo = vmul(vsub(_mm256_cvtepi32_ps(_mm256_and_si256(b, _mm256_set1_epi32(15))), t.z), t.s);
    *hi = vmul(vsub(_mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4)), t.z), t.s);
}
static inline vf vpow2i(vf n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23));
}
static inline vf vkeep_ge(vf x, float lo, vf v) { return _mm256_and_ps(_mm256_cmp_ps(x, vset1(lo), _CMP_GE_OQ), v); }

#elif defined(LOOM_VARIANT_NEON) || defined(LOOM_VARIANT_NEONDOT)
#include <arm_neon.h>
#define VL    4
#define VREGS 32
typedef float32x4_t vf;
static inline vf vload(const float *p) { return vld1q_f32(p); }
static inline void vstore(float *p, vf v) { vst1q_f32(p, v); }
static inline vf vset1(float x) { return vdupq_n_f32(x); }
static inline vf vadd(vf a, vf b) { return vaddq_f32(a, b); }
static inline vf vsub(vf a, vf b) { return vsubq_f32(a, b); }
static inline vf vmul(vf a, vf b) { return vmulq_f32(a, b); }
static inline vf vdiv(vf a, vf b) { return vdivq_f32(a, b); }
static inline vf vfma(vf a, vf b, vf c) { return vfmaq_f32(c, a, b); }
static inline vf vmin(vf a, vf b) { return vminq_f32(a, b); }
static inline vf vmax(vf a, vf b) { return vmaxq_f32(a, b); }
static inline vf vfloor(vf a) { return vrndmq_f32(a); }
static inline float vhsum(vf a) { return vaddvq_f32(a); }
static inline vf vload_bf16(const uint16_t *p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }
static inline uint32x4_t vload_u8_u32(const uint8_t *p) {
    uint32_t u;
    memcpy(&u, p, 4);
    return vmovl_u16(vget_low_u16(vmovl_u8(vreinterpret_u8_u32(vdup_n_u32(u)))));
}
static inline vf vload_u8(const uint8_t *p) { return vcvtq_f32_u32(vload_u8_u32(p)); }
static inline vf vbits_u8(const uint8_t *p, int shift, int mask) {
    return vcvtq_f32_u32(vandq_u32(vshlq_u32(vload_u8_u32(p), vdupq_n_s32(-shift)), vdupq_n_u32((uint32_t)mask)));
}
static inline void vlevels_nib(const uint8_t *p, const int8_t levels[16], vf *lo, vf *hi) {
    uint32_t w;
    memcpy(&w, p, 4);
    uint8x8_t b = vcreate_u8(w);
    uint8x16_t t = vreinterpretq_u8_s8(vld1q_s8(levels));
    int8x8_t l = vreinterpret_s8_u8(vqtbl1_u8(t, vand_u8(b, vdup_n_u8(15))));
    int8x8_t h = vreinterpret_s8_u8(vqtbl1_u8(t, vshr_n_u8(b, 4)));
    *lo = vcvtq_f32_s32(vmovl_s16(vget_low_s16(vmovl_s8(l))));
    *hi = vcvtq_f32_s32(vmovl_s16(vget_low_s16(vmovl_s8(h))));
}
static inline vf vbit_lanes(uint32_t w, int first) {
    const int32_t iota[4] = {0, -1, -2, -3};
    int32x4_t at = vsubq_s32(vld1q_s32(iota), vdupq_n_s32(first));
    return vcvtq_f32_u32(vandq_u32(vshlq_u32(vdupq_n_u32(w), at), vdupq_n_u32(1)));
}
static inline vf vload_fp8(const uint8_t *p, int shift) {
    uint32x4_t b = vload_u8_u32(p);
    uint32x4_t u = vorrq_u32(vshlq_n_u32(vandq_u32(b, vdupq_n_u32(0x80)), 24),
                             vshlq_u32(vandq_u32(b, vdupq_n_u32(0x7f)), vdupq_n_s32(shift)));
    return vreinterpretq_f32_u32(u);
}
typedef struct vqtab {
    vf s, z;
} vqtab;
static inline vqtab vqtab_make(float s, float z) { return (vqtab){vset1(s), vset1(z)}; }
static inline void vdequant_nib(const uint8_t *p, vqtab t, vf *lo, vf *hi) {
    uint32x4_t b = vload_u8_u32(p);
    *lo = vmul(vsub(vcvtq_f32_u32(vandq_u32(b, vdupq_n_u32(15))), t.z), t.s);
    *hi = vmul(vsub(vcvtq_f32_u32(vshrq_n_u32(b, 4)), t.z), t.s);
}
static inline vf vpow2i(vf n) {
    return vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23));
}
static inline vf vkeep_ge(vf x, float lo, vf v) {
    return vreinterpretq_f32_u32(vandq_u32(vcgeq_f32(x, vset1(lo)), vreinterpretq_u32_f32(v)));
}

#elif defined(LOOM_VARIANT_GENERIC)
#define VL    1
#define VREGS 16 /* x86-64's SSE registers, aarch64 has more */
typedef float vf;
static inline vf vload(const float *p) { return *p; }
static inline void vstore(float *p, vf v) { *p = v; }
static inline vf vset1(float x) { return x; }
static inline vf vadd(vf a, vf b) { return a + b; }
static inline vf vsub(vf a, vf b) { return a - b; }
static inline vf vmul(vf a, vf b) { return a * b; }
static inline vf vdiv(vf a, vf b) { return a / b; }
static inline vf vfma(vf a, vf b, vf c) { return a * b + c; } /* unfused: no FMA in the baseline ISA */
static inline vf vmin(vf a, vf b) { return a < b ? a : b; }
static inline vf vmax(vf a, vf b) { return a > b ? a : b; }
static inline vf vfloor(vf a) { return floorf(a); }
static inline float vhsum(vf a) { return a; }
static inline vf vload_bf16(const uint16_t *p) {
    uint32_t u = (uint32_t)*p << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline vf vload_u8(const uint8_t *p) { return (float)*p; }
static inline vf vbits_u8(const uint8_t *p, int shift, int mask) { return (float)((*p >> shift) & mask); }
static inline vf vbit_lanes(uint32_t w, int first) { return (float)((w >> first) & 1); }
static inline void vlevels_nib(const uint8_t *p, const int8_t levels[16], vf *lo, vf *hi) {
    *lo = (float)levels[*p & 15];
    *hi = (float)levels[*p >> 4];
}
static inline vf vload_fp8(const uint8_t *p, int shift) {
    uint32_t u = (uint32_t)(*p & 0x80) << 24 | (uint32_t)(*p & 0x7f) << shift;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
typedef struct vqtab {
    vf s, z;
} vqtab;
static inline vqtab vqtab_make(float s, float z) { return (vqtab){s, z}; }
static inline void vdequant_nib(const uint8_t *p, vqtab t, vf *lo, vf *hi) {
    *lo = ((float)(*p & 15) - t.z) * t.s;
    *hi = ((float)(*p >> 4) - t.z) * t.s;
}
static inline vf vpow2i(vf n) {
    uint32_t u = (uint32_t)((int32_t)n + 127) << 23;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline vf vkeep_ge(vf x, float lo, vf v) { return x >= lo ? v : 0.0f; }

#else
#error "build variant.c with one LOOM_VARIANT_<NAME> defined (see CMakeLists.txt)"
#endif

/* Integer dot products. x86 sums them through the int8 tile (variant.c's tile_q8); NEON and
 * the generic variant one weight row at a time (dot_q8). 8-bit codes are made signed by
 * vq_prep8, which subtracts Q8_OFFSET8, where the instruction needs signed weights: the sums
 * are then of (code - Q8_OFFSET8) * x, and the kernels move the offset into the zero point. */
#if defined(LOOM_VARIANT_AVX2) || defined(LOOM_VARIANT_AVX2VNNI) || defined(LOOM_VARIANT_AVX512) ||                    \
    defined(LOOM_VARIANT_AVX512BF16)
typedef __m256i vq;
typedef __m256i vacc;
/* the block's 16 bytes in both halves, the upper half shifted down a nibble: low nibbles are
 * columns 0-15, high ones 16-31 */
static inline vq vq_nib(const uint8_t *p) {
    __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
    return _mm256_and_si256(_mm256_srlv_epi64(b, _mm256_set_epi64x(4, 4, 0, 0)), _mm256_set1_epi8(15));
}
static inline vacc vacc_zero(void) { return _mm256_setzero_si256(); }
#if defined(LOOM_VARIANT_AVX512BF16) || defined(LOOM_VARIANT_AVX2VNNI)
/* AVX512-VNNI, or AVX-VNNI (its VEX form, on CPUs without AVX-512: Alder Lake, Sierra Forest):
 * four u8 x s8 products summed into each int32 lane, no intermediate to overflow */
#define Q8_OFFSET8  0
#define INT16_SUMS4 0
#if defined(LOOM_VARIANT_AVX2VNNI)
#define vpdpbusd _mm256_dpbusd_avx_epi32
#else
#define vpdpbusd _mm256_dpbusd_epi32
#endif
static inline vq vq_prep8(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline vacc vacc_mul4(vacc a, __m256i w, __m256i x) { return vpdpbusd(a, w, x); }
static inline vacc vacc_mul8(vacc a, __m256i w, __m256i x) { return vpdpbusd(a, w, x); }
#else
/* AVX2's vpmaddubsw sums two u8 x s8 products into int16: exact for 4-bit codes (2 * 15 * 127),
 * not for 8-bit ones, which are made signed and multiplied as |w| times x with w's sign; then
 * vpmaddwd adds the pairs into int32; the tile adds a block's 4-bit pairs in int16 first. */
#define Q8_OFFSET8  128
#define INT16_SUMS4 1
static inline vq vq_prep8(const uint8_t *p) {
    return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)p), _mm256_set1_epi8((char)0x80));
}
static inline vacc vacc_mul4(vacc a, __m256i w, __m256i x) {
    return _mm256_add_epi32(a, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)));
}
static inline vacc vacc_mul8(vacc a, __m256i w, __m256i x) {
    return vacc_mul4(a, _mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
}
#endif

/* The output-stationary tile (variant.c's tile_q8): eight weight rows' blocks transposed so that
 * lane j of vector t holds row j's columns 4t..4t+3; one activation's four codes, broadcast,
 * then meet all eight rows in one product. */
#define HAS_INT8_TILE 1
static inline __attribute__((always_inline)) void vq_transpose8(vq r[8]) {
    __m256i t0 = _mm256_unpacklo_epi32(r[0], r[1]), t1 = _mm256_unpackhi_epi32(r[0], r[1]);
    __m256i t2 = _mm256_unpacklo_epi32(r[2], r[3]), t3 = _mm256_unpackhi_epi32(r[2], r[3]);
    __m256i t4 = _mm256_unpacklo_epi32(r[4], r[5]), t5 = _mm256_unpackhi_epi32(r[4], r[5]);
    __m256i t6 = _mm256_unpacklo_epi32(r[6], r[7]), t7 = _mm256_unpackhi_epi32(r[6], r[7]);
    __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
    __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
    __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
    __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
    r[0] = _mm256_permute2x128_si256(u0, u4, 0x20), r[4] = _mm256_permute2x128_si256(u0, u4, 0x31);
    r[1] = _mm256_permute2x128_si256(u1, u5, 0x20), r[5] = _mm256_permute2x128_si256(u1, u5, 0x31);
    r[2] = _mm256_permute2x128_si256(u2, u6, 0x20), r[6] = _mm256_permute2x128_si256(u2, u6, 0x31);
    r[3] = _mm256_permute2x128_si256(u3, u7, 0x20), r[7] = _mm256_permute2x128_si256(u3, u7, 0x31);
}
/* a + one activation's four codes x, broadcast, times the transposed block's vector wt: one
 * product for all eight weight rows. Without VNNI, 4-bit products add up in int16 lanes
 * (eight vpmaddubsw pairs over a block, each at most 2 * 15 * 127, stay exact), widened to
 * int32 by vacc_x4_end once per block. */
static inline vacc vacc_dot_x4(vacc a, vq wt, const int8_t *x, int bits) {
    int32_t v;
    memcpy(&v, x, 4);
    __m256i xv = _mm256_set1_epi32(v);
    if (bits == 8) return vacc_mul8(a, wt, xv);
    return INT16_SUMS4 ? _mm256_add_epi16(a, _mm256_maddubs_epi16(wt, xv)) : vacc_mul4(a, wt, xv);
}
static inline vacc vacc_x4_end(vacc a, int bits) {
    return INT16_SUMS4 && bits == 4 ? _mm256_madd_epi16(a, _mm256_set1_epi16(1)) : a;
}
/* Two consecutive blocks of one weight row at once, for the tile's few-row path: lanes 0-3 sum
 * block b's products, lanes 4-7 block b+1's. The pair's activations are arranged once for all
 * eight weight rows: for 4-bit codes (low nibbles a block's columns 0-15, high ones 16-31), the
 * two blocks' first halves in `a` and their second halves in `b`, so that one load and two
 * masks give both blocks' codes. */
typedef struct vxpair {
    __m256i a, b;
} vxpair;
static inline vxpair vx_pair(const int8_t *x, int bits) {
    __m256i x0 = _mm256_loadu_si256((const __m256i *)x), x1 = _mm256_loadu_si256((const __m256i *)(x + 32));
    if (bits == 8) return (vxpair){x0, x1};
    return (vxpair){_mm256_permute2x128_si256(x0, x1, 0x20), _mm256_permute2x128_si256(x0, x1, 0x31)};
}
static inline vacc vacc_pair(const uint8_t *w, vxpair x, int bits) {
    if (bits == 4) {
        __m256i v = _mm256_loadu_si256((const __m256i *)w), m = _mm256_set1_epi8(15);
        __m256i lo = _mm256_and_si256(v, m), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
        return vacc_mul4(vacc_mul4(vacc_zero(), lo, x.a), hi, x.b);
    }
    __m256i s0 = vacc_mul8(vacc_zero(), vq_prep8(w), x.a), s1 = vacc_mul8(vacc_zero(), vq_prep8(w + 32), x.b);
    return _mm256_add_epi32(_mm256_permute2x128_si256(s0, s1, 0x20), _mm256_permute2x128_si256(s0, s1, 0x31));
}
/* lane j of *s0 and *s1 = the sums of p[j]'s lanes 0-3 and 4-7: eight rows' pairs of block sums */
static inline void vacc_sum8_pair(const vacc p[8], vacc *s0, vacc *s1) {
    __m256i a0 = _mm256_hadd_epi32(p[0], p[1]), a1 = _mm256_hadd_epi32(p[2], p[3]);
    __m256i a2 = _mm256_hadd_epi32(p[4], p[5]), a3 = _mm256_hadd_epi32(p[6], p[7]);
    __m256i b0 = _mm256_hadd_epi32(a0, a1), b1 = _mm256_hadd_epi32(a2, a3);
    *s0 = _mm256_permute2x128_si256(b0, b1, 0x20);
    *s1 = _mm256_permute2x128_si256(b0, b1, 0x31);
}
typedef __m256 vaccf; /* float lanes, one per weight row */
static inline vaccf vaccf_set1(float v) { return _mm256_set1_ps(v); }
/* a + (float)i * d, lane by lane */
static inline vaccf vaccf_fma(vacc i, float d, vaccf a) {
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_set1_ps(d), a);
}
static inline vaccf vaccf_axpy(float s, vaccf x, vaccf a) { return _mm256_fmadd_ps(x, _mm256_set1_ps(s), a); }
/* lane j = p[j][i]: the eight weight rows' scale or zero point of one group */
static inline vaccf vaccf_gather8(const float *const *p, size_t i) {
    return _mm256_setr_ps(p[0][i], p[1][i], p[2][i], p[3][i], p[4][i], p[5][i], p[6][i], p[7][i]);
}
static inline void vaccf_store(float *p, vaccf v) { _mm256_storeu_ps(p, v); }
static inline vaccf vaccf_mul(vaccf a, vaccf b) { return _mm256_mul_ps(a, b); }
static inline vaccf vaccf_mul_add(vaccf a, vaccf b, vaccf c) { return _mm256_fmadd_ps(a, b, c); }
static inline vaccf vaccf_sub(vaccf a, vaccf b) { return _mm256_sub_ps(a, b); }
#elif defined(LOOM_VARIANT_NEON) || defined(LOOM_VARIANT_NEONDOT)
/* s8 x s8 products summed into int32 lanes: by sdot where the CPU has it (neondot), else by
 * widening multiplies, two products per int16 lane, pairwise added into int32. Both sums are
 * exact, so the two variants give the same bits. */
#define Q8_OFFSET8 128
typedef struct vq {
    int8x16_t lo, hi;
} vq;
typedef int32x4_t vacc;
static inline vq vq_nib(const uint8_t *p) {
    uint8x16_t b = vld1q_u8(p);
    return (vq){vreinterpretq_s8_u8(vandq_u8(b, vdupq_n_u8(15))), vreinterpretq_s8_u8(vshrq_n_u8(b, 4))};
}
static inline vq vq_prep8(const uint8_t *p) {
    uint8x16_t m = vdupq_n_u8(0x80);
    return (vq){vreinterpretq_s8_u8(veorq_u8(vld1q_u8(p), m)), vreinterpretq_s8_u8(veorq_u8(vld1q_u8(p + 16), m))};
}
static inline vacc vacc_zero(void) { return vdupq_n_s32(0); }
static inline int32_t vacc_hsum(vacc a) { return vaddvq_s32(a); }
#if defined(LOOM_VARIANT_NEONDOT)
/* sdot (Armv8.2 dot product): four s8 x s8 products summed into each int32 lane at once */
static inline vacc vacc_dot16(vacc a, int8x16_t w, const int8_t *x) { return vdotq_s32(a, w, vld1q_s8(x)); }
#else
static inline vacc vacc_dot16(vacc a, int8x16_t w, const int8_t *x) {
    int8x16_t xv = vld1q_s8(x);
    int16x8_t p = vmull_s8(vget_low_s8(w), vget_low_s8(xv));
    return vpadalq_s16(a, vmlal_s8(p, vget_high_s8(w), vget_high_s8(xv)));
}
#endif
static inline vacc vacc_dot4(vacc a, vq w, const int8_t *x) { return vacc_dot16(vacc_dot16(a, w.lo, x), w.hi, x + 16); }
static inline vacc vacc_dot8(vacc a, vq w, const int8_t *x) { return vacc_dot4(a, w, x); }

#else /* generic: the same sums, one code at a time */
#define Q8_OFFSET8 0
typedef struct vq {
    uint8_t c[32];
} vq;
typedef int32_t vacc;
static inline vq vq_nib(const uint8_t *p) {
    vq w;
    for (int j = 0; j < 16; j++) w.c[j] = p[j] & 15, w.c[j + 16] = p[j] >> 4;
    return w;
}
static inline vq vq_prep8(const uint8_t *p) {
    vq w;
    memcpy(w.c, p, 32);
    return w;
}
static inline vacc vacc_zero(void) { return 0; }
static inline int32_t vacc_hsum(vacc a) { return a; }
static inline vacc vacc_dot4(vacc a, vq w, const int8_t *x) {
    for (int j = 0; j < 32; j++) a += w.c[j] * x[j];
    return a;
}
static inline vacc vacc_dot8(vacc a, vq w, const int8_t *x) { return vacc_dot4(a, w, x); }
#endif

#ifndef HAS_INT8_TILE
#define HAS_INT8_TILE 0
#endif

/* GGUF blocks on int8 activations (variant.c's dot_gguf_q8): a block of 32 weights as 32
 * signed bytes (vgb), each the weight's integer code from its bit fields; its products with
 * 32 int8 activations summed four columns a lane, lane k of a vgl the exact sum over columns
 * 4k..4k+3; and eight float lanes (vgf) to scale and add those sums in. Every variant has the
 * same lanes and adds them in the same tree (vgf_sum), so every variant gives the same bits.
 * Codes lie in [-128, 127] and activations in [-127, 127], so two products fit an int16. */
#if defined(LOOM_VARIANT_AVX2) || defined(LOOM_VARIANT_AVX2VNNI) || defined(LOOM_VARIANT_AVX512) ||                    \
    defined(LOOM_VARIANT_AVX512BF16)
typedef __m256i vgb;
typedef __m256i vgl;
typedef __m256 vgf;
static inline vgb vgb_load(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline void vgb_store(int8_t *p, vgb v) { _mm256_storeu_si256((__m256i *)p, v); }
static inline vgb vgb_set1(int c) { return _mm256_set1_epi8((char)c); }
/* 16 bytes of nibbles: the low ones columns 0-15, the high ones 16-31 */
static inline vgb vgb_nib16(const uint8_t *p) { return vq_nib(p); }
/* each byte's bits [shift, shift + width) where mask = 2^width - 1 and shift + width <= 8 */
static inline vgb vgb_bits(vgb v, int shift, int mask) {
    return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(shift)), _mm256_set1_epi8((char)mask));
}
/* each byte shifted left by n, the bytes below 2^(8 - n) */
static inline vgb vgb_shl(vgb v, int n) { return _mm256_sll_epi16(v, _mm_cvtsi32_si128(n)); }
static inline vgb vgb_or(vgb a, vgb b) { return _mm256_or_si256(a, b); }
static inline vgb vgb_add(vgb a, vgb b) { return _mm256_add_epi8(a, b); }
static inline vgb vgb_sub(vgb a, int c) { return _mm256_sub_epi8(a, _mm256_set1_epi8((char)c)); }
/* byte c = bit c of u */
static inline vgb vgb_bit32(uint32_t u) {
    const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                          3, 3, 3, 3, 3, 3);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)u), pick);
    b = _mm256_and_si256(b, _mm256_set1_epi64x((long long)0x8040201008040201ULL));
    return _mm256_min_epu8(b, _mm256_set1_epi8(1));
}
/* levels[code] for codes below 16 */
static inline vgb vgb_levels(vgb code, const int8_t levels[16]) {
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)levels)), code);
}
/* codes in [0, 127] times x: u8 x s8 as the instructions take it */
static inline vgl vgl_dot_u(vgb w, const int8_t *x) {
    __m256i xv = _mm256_loadu_si256((const __m256i *)x);
#if defined(LOOM_VARIANT_AVX512BF16) || defined(LOOM_VARIANT_AVX2VNNI)
    return vpdpbusd(_mm256_setzero_si256(), w, xv);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, xv), _mm256_set1_epi16(1));
#endif
}
/* any codes: |w| times x with w's sign */
static inline vgl vgl_dot(vgb w, const int8_t *x) {
    __m256i xv = _mm256_loadu_si256((const __m256i *)x), aw = _mm256_abs_epi8(w), sx = _mm256_sign_epi8(xv, w);
#if defined(LOOM_VARIANT_AVX512BF16) || defined(LOOM_VARIANT_AVX2VNNI)
    return vpdpbusd(_mm256_setzero_si256(), aw, sx);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), _mm256_set1_epi16(1));
#endif
}
static inline vgf vgf_zero(void) { return _mm256_setzero_ps(); }
static inline vgf vgf_set1(float v) { return _mm256_set1_ps(v); }
static inline vgf vgf_halves(float lo, float hi) { return _mm256_setr_m128(_mm_set1_ps(lo), _mm_set1_ps(hi)); }
static inline vgf vgf_add(vgf a, vgf b) { return _mm256_add_ps(a, b); }
static inline vgf vgf_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void vgf_store(float *p, vgf a) { _mm256_storeu_ps(p, a); }
static inline vgf vgf_mul(vgf a, vgf b) { return _mm256_mul_ps(a, b); }
static inline vgf vgf_sub(vgf a, vgf b) { return _mm256_sub_ps(a, b); }
/* lanes 0-3 and 4-7 of a, each twice: [a0, a0, a1, a1, ...] */
static inline vgf vgf_dup_lo(vgf a) { return _mm256_permutevar8x32_ps(a, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3)); }
static inline vgf vgf_dup_hi(vgf a) { return _mm256_permutevar8x32_ps(a, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7)); }
/* eight bytes, unsigned or signed, as floats */
static inline vgf vgf_from_u8(const uint8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}
static inline vgf vgf_from_i8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}
/* a + (float)i * f, and a + x * f, fused, lane by lane */
static inline vgf vgf_fma(vgl i, vgf f, vgf a) { return _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), f, a); }
static inline vgf vgf_fmaf(vgf x, vgf f, vgf a) { return _mm256_fmadd_ps(x, f, a); }
/* ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)) */
static inline float vgf_sum(vgf a) {
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}
#elif defined(LOOM_VARIANT_NEON) || defined(LOOM_VARIANT_NEONDOT)
typedef struct vgb {
    uint8x16_t lo, hi;
} vgb;
typedef struct vgl {
    int32x4_t lo, hi;
} vgl;
typedef struct vgf {
    float32x4_t lo, hi;
} vgf;
static inline vgb vgb_load(const uint8_t *p) { return (vgb){vld1q_u8(p), vld1q_u8(p + 16)}; }
static inline void vgb_store(int8_t *p, vgb v) { vst1q_u8((uint8_t *)p, v.lo), vst1q_u8((uint8_t *)p + 16, v.hi); }
static inline vgb vgb_set1(int c) { return (vgb){vdupq_n_u8((uint8_t)c), vdupq_n_u8((uint8_t)c)}; }
static inline vgb vgb_nib16(const uint8_t *p) {
    uint8x16_t b = vld1q_u8(p);
    return (vgb){vandq_u8(b, vdupq_n_u8(15)), vshrq_n_u8(b, 4)};
}
static inline vgb vgb_bits(vgb v, int shift, int mask) {
    int8x16_t s = vdupq_n_s8((int8_t)-shift);
    uint8x16_t m = vdupq_n_u8((uint8_t)mask);
    return (vgb){vandq_u8(vshlq_u8(v.lo, s), m), vandq_u8(vshlq_u8(v.hi, s), m)};
}
static inline vgb vgb_shl(vgb v, int n) {
    int8x16_t s = vdupq_n_s8((int8_t)n);
    return (vgb){vshlq_u8(v.lo, s), vshlq_u8(v.hi, s)};
}
static inline vgb vgb_or(vgb a, vgb b) { return (vgb){vorrq_u8(a.lo, b.lo), vorrq_u8(a.hi, b.hi)}; }
static inline vgb vgb_add(vgb a, vgb b) { return (vgb){vaddq_u8(a.lo, b.lo), vaddq_u8(a.hi, b.hi)}; }
static inline vgb vgb_sub(vgb a, int c) {
    uint8x16_t v = vdupq_n_u8((uint8_t)c);
    return (vgb){vsubq_u8(a.lo, v), vsubq_u8(a.hi, v)};
}
static inline vgb vgb_bit32(uint32_t u) {
    static const uint8_t pick[32] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                     2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
    static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    uint8x16_t bytes = vreinterpretq_u8_u32(vdupq_n_u32(u)), m = vld1q_u8(bit), one = vdupq_n_u8(1);
    return (vgb){vandq_u8(vtstq_u8(vqtbl1q_u8(bytes, vld1q_u8(pick)), m), one),
                 vandq_u8(vtstq_u8(vqtbl1q_u8(bytes, vld1q_u8(pick + 16)), m), one)};
}
static inline vgb vgb_levels(vgb code, const int8_t levels[16]) {
    uint8x16_t t = vld1q_u8((const uint8_t *)levels);
    return (vgb){vqtbl1q_u8(t, code.lo), vqtbl1q_u8(t, code.hi)};
}
/* lane k: the sum of w's and x's bytes 4k..4k+3 multiplied, exact */
static inline int32x4_t vdot4_s8(int8x16_t w, int8x16_t x) {
#if defined(LOOM_VARIANT_NEONDOT)
    return vdotq_s32(vdupq_n_s32(0), w, x);
#else /* pairs into int32, then pairs of pairs */
    int32x4_t a = vpaddlq_s16(vmull_s8(vget_low_s8(w), vget_low_s8(x)));
    int32x4_t b = vpaddlq_s16(vmull_s8(vget_high_s8(w), vget_high_s8(x)));
    return vpaddq_s32(a, b);
#endif
}
static inline int32x4_t vgl_dot16(uint8x16_t w, const int8_t *x) {
    return vdot4_s8(vreinterpretq_s8_u8(w), vld1q_s8(x));
}
static inline vgl vgl_dot(vgb w, const int8_t *x) { return (vgl){vgl_dot16(w.lo, x), vgl_dot16(w.hi, x + 16)}; }
static inline vgl vgl_dot_u(vgb w, const int8_t *x) { return vgl_dot(w, x); } /* s8 x s8 takes both */
static inline vgf vgf_zero(void) { return (vgf){vdupq_n_f32(0), vdupq_n_f32(0)}; }
static inline vgf vgf_set1(float v) { return (vgf){vdupq_n_f32(v), vdupq_n_f32(v)}; }
static inline vgf vgf_halves(float lo, float hi) { return (vgf){vdupq_n_f32(lo), vdupq_n_f32(hi)}; }
static inline vgf vgf_add(vgf a, vgf b) { return (vgf){vaddq_f32(a.lo, b.lo), vaddq_f32(a.hi, b.hi)}; }
static inline vgf vgf_load(const float *p) { return (vgf){vld1q_f32(p), vld1q_f32(p + 4)}; }
static inline void vgf_store(float *p, vgf a) { vst1q_f32(p, a.lo), vst1q_f32(p + 4, a.hi); }
static inline vgf vgf_mul(vgf a, vgf b) { return (vgf){vmulq_f32(a.lo, b.lo), vmulq_f32(a.hi, b.hi)}; }
static inline vgf vgf_sub(vgf a, vgf b) { return (vgf){vsubq_f32(a.lo, b.lo), vsubq_f32(a.hi, b.hi)}; }
static inline vgf vgf_dup_lo(vgf a) { return (vgf){vzip1q_f32(a.lo, a.lo), vzip2q_f32(a.lo, a.lo)}; }
static inline vgf vgf_dup_hi(vgf a) { return (vgf){vzip1q_f32(a.hi, a.hi), vzip2q_f32(a.hi, a.hi)}; }
static inline vgf vgf_from_u8(const uint8_t *p) {
    uint16x8_t h = vmovl_u8(vld1_u8(p));
    return (vgf){vcvtq_f32_u32(vmovl_u16(vget_low_u16(h))), vcvtq_f32_u32(vmovl_u16(vget_high_u16(h)))};
}
static inline vgf vgf_from_i8(const int8_t *p) {
    int16x8_t h = vmovl_s8(vld1_s8(p));
    return (vgf){vcvtq_f32_s32(vmovl_s16(vget_low_s16(h))), vcvtq_f32_s32(vmovl_s16(vget_high_s16(h)))};
}
static inline vgf vgf_fma(vgl i, vgf f, vgf a) {
    return (vgf){vfmaq_f32(a.lo, vcvtq_f32_s32(i.lo), f.lo), vfmaq_f32(a.hi, vcvtq_f32_s32(i.hi), f.hi)};
}
static inline vgf vgf_fmaf(vgf x, vgf f, vgf a) {
    return (vgf){vfmaq_f32(a.lo, x.lo, f.lo), vfmaq_f32(a.hi, x.hi, f.hi)};
}
static inline float vgf_sum(vgf a) {
    float32x4_t s4 = vaddq_f32(a.lo, a.hi);
    float32x2_t s2 = vadd_f32(vget_low_f32(s4), vget_high_f32(s4));
    return vget_lane_f32(s2, 0) + vget_lane_f32(s2, 1);
}
#else /* generic: the same lanes, one byte at a time */
typedef struct vgb {
    uint8_t b[32];
} vgb;
typedef struct vgl {
    int32_t l[8];
} vgl;
typedef struct vgf {
    float l[8];
} vgf;
static inline vgb vgb_load(const uint8_t *p) {
    vgb v;
    memcpy(v.b, p, 32);
    return v;
}
static inline vgb vgb_set1(int c) {
    vgb v;
    memset(v.b, c, 32);
    return v;
}
static inline vgb vgb_nib16(const uint8_t *p) {
    vgb v;
    for (int j = 0; j < 16; j++) v.b[j] = p[j] & 15, v.b[j + 16] = p[j] >> 4;
    return v;
}
static inline vgb vgb_bits(vgb v, int shift, int mask) {
    for (int j = 0; j < 32; j++) v.b[j] = (uint8_t)((v.b[j] >> shift) & mask);
    return v;
}
static inline vgb vgb_shl(vgb v, int n) {
    for (int j = 0; j < 32; j++) v.b[j] = (uint8_t)(v.b[j] << n);
    return v;
}
static inline vgb vgb_or(vgb a, vgb b) {
    for (int j = 0; j < 32; j++) a.b[j] |= b.b[j];
    return a;
}
static inline vgb vgb_add(vgb a, vgb b) {
    for (int j = 0; j < 32; j++) a.b[j] = (uint8_t)(a.b[j] + b.b[j]);
    return a;
}
static inline vgb vgb_sub(vgb a, int c) {
    for (int j = 0; j < 32; j++) a.b[j] = (uint8_t)(a.b[j] - c);
    return a;
}
static inline vgb vgb_bit32(uint32_t u) {
    vgb v;
    for (int j = 0; j < 32; j++) v.b[j] = (u >> j) & 1;
    return v;
}
static inline vgb vgb_levels(vgb code, const int8_t levels[16]) {
    for (int j = 0; j < 32; j++) code.b[j] = (uint8_t)levels[code.b[j]];
    return code;
}
static inline vgl vgl_dot(vgb w, const int8_t *x) {
    vgl s;
    for (int k = 0; k < 8; k++) {
        s.l[k] = 0;
        for (int j = 4 * k; j < 4 * k + 4; j++) s.l[k] += (int8_t)w.b[j] * x[j];
    }
    return s;
}
static inline vgl vgl_dot_u(vgb w, const int8_t *x) { return vgl_dot(w, x); }
static inline vgf vgf_zero(void) { return (vgf){{0}}; }
static inline vgf vgf_set1(float v) { return (vgf){{v, v, v, v, v, v, v, v}}; }
static inline vgf vgf_halves(float lo, float hi) { return (vgf){{lo, lo, lo, lo, hi, hi, hi, hi}}; }
static inline vgf vgf_add(vgf a, vgf b) {
    for (int k = 0; k < 8; k++) a.l[k] += b.l[k];
    return a;
}
static inline vgf vgf_load(const float *p) {
    vgf a;
    memcpy(a.l, p, sizeof a.l);
    return a;
}
static inline void vgf_store(float *p, vgf a) { memcpy(p, a.l, sizeof a.l); }
static inline vgf vgf_mul(vgf a, vgf b) {
    for (int k = 0; k < 8; k++) a.l[k] *= b.l[k];
    return a;
}
static inline vgf vgf_sub(vgf a, vgf b) {
    for (int k = 0; k < 8; k++) a.l[k] -= b.l[k];
    return a;
}
static inline vgf vgf_dup_lo(vgf a) { return (vgf){{a.l[0], a.l[0], a.l[1], a.l[1], a.l[2], a.l[2], a.l[3], a.l[3]}}; }
static inline vgf vgf_dup_hi(vgf a) { return (vgf){{a.l[4], a.l[4], a.l[5], a.l[5], a.l[6], a.l[6], a.l[7], a.l[7]}}; }
static inline vgf vgf_from_u8(const uint8_t *p) {
    vgf a;
    for (int k = 0; k < 8; k++) a.l[k] = (float)p[k];
    return a;
}
static inline vgf vgf_from_i8(const int8_t *p) {
    vgf a;
    for (int k = 0; k < 8; k++) a.l[k] = (float)p[k];
    return a;
}
static inline vgf vgf_fma(vgl i, vgf f, vgf a) { /* fused, as the vector variants' */
    for (int k = 0; k < 8; k++) a.l[k] = __builtin_fmaf((float)i.l[k], f.l[k], a.l[k]);
    return a;
}
static inline vgf vgf_fmaf(vgf x, vgf f, vgf a) {
    for (int k = 0; k < 8; k++) a.l[k] = __builtin_fmaf(x.l[k], f.l[k], a.l[k]);
    return a;
}
static inline float vgf_sum(vgf a) {
    return ((a.l[0] + a.l[4]) + (a.l[2] + a.l[6])) + ((a.l[1] + a.l[5]) + (a.l[3] + a.l[7]));
}
#endif

/* Two consecutive blocks of 32 at once: their codes (vgb2), lane sums (vgl2), and the two chains
 * of dot_gguf_q8 (vgf2: the even block's lanes, then the odd one's). AVX-512 with VNNI holds each
 * in one register, so one instruction does both blocks' work; elsewhere they are two of the
 * single ones. Either way each lane takes the same operations in the same order. */
#if defined(LOOM_VARIANT_AVX512BF16)
typedef __m512i vgb2;
typedef __m512i vgl2;
typedef __m512 vgf2;
static inline vgb2 vgb2_join(vgb a, vgb b) { return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1); }
/* 32 bytes' low nibbles, then their high ones (Q4_K's pair of blocks) */
static inline vgb2 vgb2_nibbles(const uint8_t *p) {
    __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_and_si512(_mm512_mask_srli_epi16(v, (__mmask32)0xffff0000u, v, 4), _mm512_set1_epi8(15));
}
/* 64 bytes' bits [shift, shift + width) (vgb_bits') */
static inline vgb2 vgb2_bits(const uint8_t *p, int shift, int mask) {
    return _mm512_and_si512(_mm512_srl_epi16(_mm512_loadu_si512(p), _mm_cvtsi32_si128(shift)),
                            _mm512_set1_epi8((char)mask));
}
/* 32 bytes' bits from shift0 (the first block), then from shift1 (the second) */
static inline vgb2 vgb2_bits_twice(const uint8_t *p, int shift0, int shift1, int mask) {
    __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p));
    __m512i counts = _mm512_inserti64x4(_mm512_set1_epi16((short)shift0), _mm256_set1_epi16((short)shift1), 1);
    return _mm512_and_si512(_mm512_srlv_epi16(v, counts), _mm512_set1_epi8((char)mask));
}
static inline vgb2 vgb2_shl(vgb2 v, int n) { return _mm512_sll_epi16(v, _mm_cvtsi32_si128(n)); }
static inline vgb2 vgb2_or(vgb2 a, vgb2 b) { return _mm512_or_si512(a, b); }
static inline vgb2 vgb2_sub(vgb2 a, int c) { return _mm512_sub_epi8(a, _mm512_set1_epi8((char)c)); }
static inline vgl2 vgl2_dot_u(vgb2 w, const int8_t *x) {
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, _mm512_loadu_si512(x));
}
static inline vgl2 vgl2_dot(vgb2 w, const int8_t *x) { /* x negated where w < 0; where w = 0, |w| = 0 */
    __m512i xv = _mm512_loadu_si512(x),
            sx = _mm512_mask_sub_epi8(xv, _mm512_movepi8_mask(w), _mm512_setzero_si512(), xv);
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(w), sx);
}
static inline vgf2 vgf2_zero(void) { return _mm512_setzero_ps(); }
static inline vgf2 vgf2_fma(vgl2 i, vgf2 f, vgf2 a) { return _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), f, a); }
/* [f0 x 8 | f1 x 8] */
static inline vgf2 vgf2_pair(const float *f) {
    __m128 v = _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)f));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                 _mm512_castps128_ps512(v));
}
/* [f0 x 4, f1 x 4 | f2 x 4, f3 x 4] */
static inline vgf2 vgf2_quad(const float *f) {
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                                 _mm512_castps128_ps512(_mm_loadu_ps(f)));
}
/* one block into chain h alone: a + i f in its lanes */
static inline vgf2 vgf2_fma_half(int h, vgl i, vgf f, vgf2 a) {
    __m512 iv = _mm512_castps256_ps512(_mm256_cvtepi32_ps(i)), fv = _mm512_castps256_ps512(f);
    iv = _mm512_shuffle_f32x4(iv, iv, 0x44), fv = _mm512_shuffle_f32x4(fv, fv, 0x44);
    return _mm512_mask3_fmadd_ps(iv, fv, a, (__mmask16)(h ? 0xff00 : 0x00ff));
}
/* the chains added lane by lane */
static inline vgf vgf2_fold(vgf2 a) {
    return _mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
}
#else
typedef struct vgb2 {
    vgb b[2];
} vgb2;
typedef struct vgl2 {
    vgl l[2];
} vgl2;
typedef struct vgf2 {
    vgf f[2];
} vgf2;
static inline vgb2 vgb2_join(vgb a, vgb b) { return (vgb2){{a, b}}; }
static inline vgb2 vgb2_nibbles(const uint8_t *p) {
    vgb v = vgb_load(p);
    return (vgb2){{vgb_bits(v, 0, 15), vgb_bits(v, 4, 15)}};
}
static inline vgb2 vgb2_bits(const uint8_t *p, int shift, int mask) {
    return (vgb2){{vgb_bits(vgb_load(p), shift, mask), vgb_bits(vgb_load(p + 32), shift, mask)}};
}
static inline vgb2 vgb2_bits_twice(const uint8_t *p, int shift0, int shift1, int mask) {
    vgb v = vgb_load(p);
    return (vgb2){{vgb_bits(v, shift0, mask), vgb_bits(v, shift1, mask)}};
}
static inline vgb2 vgb2_shl(vgb2 v, int n) { return (vgb2){{vgb_shl(v.b[0], n), vgb_shl(v.b[1], n)}}; }
static inline vgb2 vgb2_or(vgb2 a, vgb2 b) { return (vgb2){{vgb_or(a.b[0], b.b[0]), vgb_or(a.b[1], b.b[1])}}; }
static inline vgb2 vgb2_sub(vgb2 a, int c) { return (vgb2){{vgb_sub(a.b[0], c), vgb_sub(a.b[1], c)}}; }
static inline vgl2 vgl2_dot_u(vgb2 w, const int8_t *x) {
    return (vgl2){{vgl_dot_u(w.b[0], x), vgl_dot_u(w.b[1], x + 32)}};
}
static inline vgl2 vgl2_dot(vgb2 w, const int8_t *x) { return (vgl2){{vgl_dot(w.b[0], x), vgl_dot(w.b[1], x + 32)}}; }
static inline vgf2 vgf2_zero(void) { return (vgf2){{vgf_zero(), vgf_zero()}}; }
static inline vgf2 vgf2_fma(vgl2 i, vgf2 f, vgf2 a) {
    return (vgf2){{vgf_fma(i.l[0], f.f[0], a.f[0]), vgf_fma(i.l[1], f.f[1], a.f[1])}};
}
static inline vgf2 vgf2_pair(const float *f) { return (vgf2){{vgf_set1(f[0]), vgf_set1(f[1])}}; }
static inline vgf2 vgf2_quad(const float *f) { return (vgf2){{vgf_halves(f[0], f[1]), vgf_halves(f[2], f[3])}}; }
static inline vgf2 vgf2_fma_half(int h, vgl i, vgf f, vgf2 a) {
    a.f[h] = vgf_fma(i, f, a.f[h]);
    return a;
}
static inline vgf vgf2_fold(vgf2 a) { return vgf_add(a.f[0], a.f[1]); }
#endif

/* bf16 dot products, fp32 accumulation: a += x . w over VL pairs of bf16 values (2 * VL of each) */
#if defined(LOOM_VARIANT_AVX512BF16)
#define HAS_BF16_DOT 1
typedef __m512bh vbf; /* 2 * VL bf16 values, as the dot product takes them */
static inline vbf vload_bf16x(const uint16_t *p) { return (__m512bh)_mm512_loadu_si512(p); }
static inline void vstore_bf16x(uint16_t *p, vbf v) { _mm512_storeu_si512(p, (__m512i)v); }
static inline vf vdot_bf16(vf a, vbf x, vbf w) { return _mm512_dpbf16_ps(a, x, w); }
/* 2 * VL FP8 codes as bf16, exactly (bf16 holds every E4M3 and E5M2 number): each code moved to
 * a word's high byte and shifted right arithmetically, which puts its exponent and mantissa at
 * bf16's and copies the sign into bits the mask then clears, and one add rebiases the exponent.
 * That is right for every normal code; a block holding a subnormal or zero one (exponent 0,
 * rare in weights) then looks those up: m times 2^(1 - bias - mantissa bits), the sign kept. */
static inline vbf vload_fp8_bf16x(const uint8_t *p, int e5m2) {
    static const uint16_t sub4[32] = {0, 0x3b00, 0x3b80, 0x3bc0, 0x3c00, 0x3c20, 0x3c40, 0x3c60}; /* m 2^-9 */
    static const uint16_t sub5[32] = {0, 0x3780, 0x3800, 0x3840};                                 /* m 2^-16 */
    __m512i b = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)p)), high = _mm512_slli_epi16(b, 8);
    __m512i v = e5m2 ? _mm512_add_epi16(_mm512_and_si512(_mm512_srai_epi16(high, 3), _mm512_set1_epi16((short)0x8fe0)),
                                        _mm512_set1_epi16(112 << 7))
                     : _mm512_add_epi16(_mm512_and_si512(_mm512_srai_epi16(high, 4), _mm512_set1_epi16((short)0x87f0)),
                                        _mm512_set1_epi16(120 << 7));
    __mmask32 sub = _mm512_testn_epi16_mask(b, _mm512_set1_epi16(e5m2 ? 0x7c : 0x78));
    if (sub) {
        __m512i mag = _mm512_permutexvar_epi16(b, _mm512_loadu_si512(e5m2 ? sub5 : sub4)); /* index: b's low 5 bits */
        v = _mm512_mask_mov_epi16(v, sub,
                                  _mm512_or_si512(mag, _mm512_and_si512(high, _mm512_set1_epi16((short)0x8000))));
    }
    return (__m512bh)v;
}
#else
#define HAS_BF16_DOT 0
#endif

/* The last partial vector of a row: n < VL floats, the other lanes `fill`; stored back the same
 * way. Every kernel takes its tail through these, so one code path covers every length. */
static inline vf vload_part(const float *p, int n, float fill) {
    float t[VL];
    for (int i = 0; i < VL; i++) t[i] = i < n ? p[i] : fill;
    return vload(t);
}
static inline vf vload_bf16_part(const uint16_t *p, int n) {
    uint16_t t[VL];
    for (int i = 0; i < VL; i++) t[i] = i < n ? p[i] : 0;
    return vload_bf16(t);
}
static inline void vstore_part(float *p, vf v, int n) {
    float t[VL];
    vstore(t, v);
    for (int i = 0; i < n && i < VL; i++) p[i] = t[i];
}

/* exp(x) to within ~2 ulp: x = n ln2 + r, |r| <= ln2/2, e^r by Cephes' degree-6 polynomial
 * (the same in every variant, so variants differ only in summation order). Below the smallest
 * normal's exponent the result is 0, so exp(-inf) = 0 as softmax masking needs. */
static inline vf vexp(vf x) {
    const float lo = -87.33654f, hi = 88.0f; /* 2^-126 and below 2^127: n stays a normal exponent */
    vf xc = vmin(vmax(x, vset1(lo)), vset1(hi));
    vf n = vfloor(vfma(xc, vset1(1.44269504088896341f), vset1(0.5f)));
    vf r = vsub(vsub(xc, vmul(n, vset1(0.693359375f))), vmul(n, vset1(-2.12194440e-4f)));
    vf p = vset1(1.9875691500e-4f);
    p = vfma(p, r, vset1(1.3981999507e-3f));
    p = vfma(p, r, vset1(8.3334519073e-3f));
    p = vfma(p, r, vset1(4.1665795894e-2f));
    p = vfma(p, r, vset1(1.6666665459e-1f));
    p = vfma(p, r, vset1(5.0000001201e-1f));
    p = vadd(vfma(p, vmul(r, r), r), vset1(1.0f));
    return vkeep_ge(x, lo, vmul(p, vpow2i(n)));
}

#endif

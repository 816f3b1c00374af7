/* FP8 numbers (OCP's E4M3 "fn" and E5M2, as torch's float8_e4m3fn and float8_e5m2 and the
 * safetensors dtypes F8_E4M3 and F8_E5M2) to and from f32, scalar. Both widen exactly: the code
 * without its sign, shifted to f32's top mantissa bits, is the value times 2^(bias - 127), and
 * one multiplication by a power of two, which is exact, restores it (subnormal codes included).
 * variant.c's kernels widen the same way in vectors. E4M3 has no infinities and one NaN code
 * per sign (0x7f, 0xff); E5M2 has IEEE's (exponent 31). */
#ifndef LOOM_TENSOR_FP8_H
#define LOOM_TENSOR_FP8_H
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "tensor/tensor.h"

#define FP8_E4M3_MAX 448.0f

/* The shift of a code's exponent and mantissa into f32's bits, and the power of two that
 * rescales it: 2^(127 - bias). */
#define FP8_E4M3_SHIFT 20
#define FP8_E4M3_SCALE 0x1p120f
#define FP8_E5M2_SHIFT 21
#define FP8_E5M2_SCALE 0x1p112f

static inline float fp8_to_f32(uint8_t b, enum qcode code) {
    int shift = code == QCODE_E5M2 ? FP8_E5M2_SHIFT : FP8_E4M3_SHIFT;
    uint32_t u = (uint32_t)(b & 0x80) << 24 | (uint32_t)(b & 0x7f) << shift;
    float f;
    memcpy(&f, &u, 4);
    return f * (code == QCODE_E5M2 ? FP8_E5M2_SCALE : FP8_E4M3_SCALE);
}

/* Whether code b is a number (not a NaN or an infinity). */
static inline bool fp8_finite(uint8_t b, enum qcode code) {
    return code == QCODE_E5M2 ? (b & 0x7c) != 0x7c : (b & 0x7f) != 0x7f;
}

/* x rounded to the nearest E4M3 number (ties to even), saturating at +-448 as vLLM clamps
 * before its cast; a NaN stays NaN. */
static inline uint8_t f32_to_e4m3(float x) {
    if (isnan(x)) return 0x7f;
    uint8_t sign = signbit(x) ? 0x80 : 0;
    float a = fminf(fabsf(x), FP8_E4M3_MAX);
    /* the spacing of E4M3 numbers around a: 2^(e - 3) for normal a in [2^e, 2^(e+1)), 2^-9 below 2^-6 */
    int e;
    frexpf(a, &e); /* a = m 2^e, m in [0.5, 1) */
    float quantum = a >= 0x1p-6f ? ldexpf(1.0f, e - 4) : 0x1p-9f;
    float r = rintf(a / quantum) * quantum; /* a / quantum < 2^4: exact; rintf rounds ties to even */
    if (r == 0) return sign;
    if (r < 0x1p-6f) return sign | (uint8_t)(r * 0x1p9f); /* subnormal: the mantissa alone */
    uint32_t u;
    memcpy(&u, &r, 4);
    int exp = (int)(u >> 23) - 127 + 7;
    return sign | (uint8_t)(exp << 3) | (uint8_t)(u >> 20 & 7);
}

#endif

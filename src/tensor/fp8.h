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
 * before its cast; a NaN stays NaN. Below 2^-6 the numbers are the multiples of 2^-9 (x * 512,
 * exact, rounded to an integer: 8 is the smallest normal code's encoding too); above, f32's
 * mantissa is rounded to 3 bits in place and the exponent rebiased. */
static inline uint8_t f32_to_e4m3(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint8_t sign = (uint8_t)(u >> 24 & 0x80);
    u &= 0x7fffffff;
    if (u > 0x7f800000) return sign | 0x7f;
    if (u >= 0x43e00000) return sign | 0x7e; /* 448 and above */
    if (u < 0x3c800000) return sign | (uint8_t)rintf(fabsf(x) * 512.0f);
    u += 0x7ffff + (u >> 20 & 1);
    return sign | (uint8_t)(((u >> 23) - 120) << 3) | (uint8_t)(u >> 20 & 7);
}

#endif

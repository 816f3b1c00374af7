/* OCP MX's FP4 numbers (E2M1), as MXFP4 checkpoints (GPT-OSS's experts) store them: a sign,
 * two exponent bits and one mantissa bit, the values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their
 * negatives, a block of 32 sharing one E8M0 scale 2^(e - 127). Twice each value is a small
 * integer: loom holds the blocks as ggml's MXFP4 (tensor/gguf_blocks.h), whose levels are those
 * integers under half the scale, so the kernels widen them exactly and multiply them by int8
 * activations. */
#ifndef LOOM_TENSOR_FP4_H
#define LOOM_TENSOR_FP4_H
#include <math.h>
#include <stdint.h>
#include <string.h>

#define E2M1_TWICE_VALUES 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12
#define E2M1_MAX          6.0f

/* An E8M0 exponent's scale, 2^(e - 127), e < 255: f32's exponent field, or for e = 0 the
 * subnormal 2^-127 */
static inline float e8m0_to_f32(uint8_t e) {
    uint32_t u = e ? (uint32_t)e << 23 : 0x00400000u;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float e2m1_to_f32(uint8_t code) {
    static const int8_t twice[16] = {E2M1_TWICE_VALUES};
    return 0.5f * twice[code & 15];
}

/* x rounded to the nearest E2M1 number, ties to the even code (mantissa 0), saturating at +-6;
 * a NaN becomes 0 (the caller refuses non-finite weights first). The code is the number of
 * midpoints between neighbours that |x| passes: a tie stays below when the lower code is even. */
static inline uint8_t f32_to_e2m1(float x) {
    float a = fabsf(x);
    uint8_t code =
        (uint8_t)((a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) + (a >= 3.5f) + (a > 5.0f));
    return (uint8_t)(code | (signbit(x) && code ? 8 : 0));
}

#endif

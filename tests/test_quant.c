/* Quantized linears against a reference written here from the source codes: y = x W^T with
 * W[r][c] = (q[r][c] - zero[r][g(c)]) * scale[r][g(c)], in double. Covers 4 and 8 bits, group
 * sizes 32 and 128 and per channel, widths that are not whole blocks (padding), act-order
 * group numbering (columns out of group order) and a row-parallel shard of the groups; each
 * through the decode kernel (few rows, one or two at a time) and the prefill path (panels
 * for sgemm), in the CPU variant LOOM_CPU selects.
 *
 * The same products on int8 activations (--dtype auto) are held to their stated bound: each
 * input value is moved by at most half its block's scale, max|x| / 254 over the QACT packed
 * columns it shares a scale with, so |y - ref| <= sum_c |W[r][c]| * that, plus fp32 rounding.
 * A row's result must also be the same bits whatever rows share its call. bf16 activations on
 * bf16 weights likewise: each input is moved by at most 2^-9 of itself. Then the
 * --quantization option's errors. */
#include <cjson/cJSON.h>
#include <math.h>

#include "check.h"
#include "cpu/cpu.h"
#include "kernels/kernels.h"
#include "model/quant_config.h"
#include "quant/quant.h"
#include "tensor/fp4.h"
#include "tensor/fp8.h"
#include "tensor/gguf_blocks.h"
#include "tensor/half.h"

typedef struct src_case {
    int bits, rows, cols, col0, n_groups, group;
    int32_t *group_of; /* act-order: each column's group (NULL: (col0 + c) / group) */
} src_case;

static uint32_t mix(uint32_t x) {
    x ^= x >> 16, x *= 0x7feb352dU, x ^= x >> 15, x *= 0x846ca68bU;
    return x ^ (x >> 16);
}

static int code_at(const src_case *s, int r, int c) {
    return (int)(mix((uint32_t)(r * 7919 + c) * 2654435761U) % (1U << s->bits));
}
static float scale_at(int r, int g) { return 0.001f + (float)(mix((uint32_t)(r * 131 + g + 17)) % 1000) * 1e-5f; }
static float zero_at(const src_case *s, int r, int g) {
    return (float)(mix((uint32_t)(r * 31 + g + 5)) % (1U << s->bits));
}
static int group_of(const src_case *s, int c) { return s->group_of ? s->group_of[c] : (s->col0 + c) / s->group; }

static int row_codes(void *ctx, int r, uint8_t *codes, float *scale, float *zero, loom_err *err) {
    (void)err;
    const src_case *s = ctx;
    for (int c = 0; c < s->cols; c++) codes[c] = (uint8_t)code_at(s, r, c);
    for (int g = 0; g < s->n_groups; g++) scale[g] = scale_at(r, g), zero[g] = zero_at(s, r, g);
    return 0;
}

/* The int8-activation bound of input row x against weight row r (see the top comment). */
static double q8_bound(const src_case *s, const wmat *w, const float *x, int r) {
    const qlayout *q = w->q;
    double bound = 0;
    for (int b = 0; b * QACT < q->kp; b++) {
        double amax = 0, wsum = 0;
        for (int p = b * QACT; p < q->kp && p < (b + 1) * QACT; p++) {
            int c = q->col_of ? q->col_of[p] : p;
            if (c < 0) continue;
            int g = group_of(s, c);
            amax = fmax(amax, fabs(x[c]));
            wsum += fabs((float)((float)code_at(s, r, c) - zero_at(s, r, g)) * scale_at(r, g));
        }
        bound += wsum * amax / 254;
    }
    return bound;
}

/* The matrix on int8 activations, as the prefill kernel computes it (a pass of M rows) and the
 * decode one (9): within q8_bound of the reference (plus 1e-5 of the sum of |terms| for fp32
 * rounding), each row the same bits alone as among the pass's rows, and the two kernels the
 * same bits (cpu.h fixes their order: int8 rounding would turn their differences into steps). */
static void check_q8(const char *what, const src_case *s, const wmat *w0, const float *x, int M, float *y, float *y1) {
    wmat w = *w0;
    w.act = WACT_INT8;
    const int passes[2] = {M, 9};
    double worst = 0; /* of |error| / bound */
    int differ = 0, kernels_differ = 0;
    for (int p = 0; p < 2; p++) {
        int n = passes[p];
        if (p) memcpy(y1, y, (size_t)n * s->rows * sizeof *y); /* the prefill kernel's first 9 rows */
        linear(x, s->cols, n, n, &w, NULL, y, s->rows);
        if (p) kernels_differ = memcmp(y1, y, (size_t)n * s->rows * sizeof *y) != 0;
        for (int i = 0; i < n; i++) {
            linear_chunked(x + (size_t)i * s->cols, s->cols, 1, 1, n, &w, NULL, y1, s->rows);
            differ += memcmp(y1, y + (size_t)i * s->rows, (size_t)s->rows * sizeof *y) != 0;
            for (int r = 0; r < s->rows; r++) {
                double ref = 0, mag = 0;
                for (int c = 0; c < s->cols; c++) {
                    int g = group_of(s, c);
                    double t = (float)((float)code_at(s, r, c) - zero_at(s, r, g)) * scale_at(r, g) *
                               x[(size_t)i * s->cols + c];
                    ref += t, mag += fabs(t);
                }
                double bound = q8_bound(s, &w, x + (size_t)i * s->cols, r) + 1e-5 * mag;
                double e = fabs(y[(size_t)i * s->rows + r] - ref) / bound;
                if (!(e <= worst)) worst = e;
            }
        }
    }
    CHECK(worst <= 1, "%s on int8 activations: error %.3g of its bound", what, worst);
    CHECK(differ == 0, "%s on int8 activations: %d rows differ alone from among their pass's", what, differ);
    CHECK(!kernels_differ, "%s on int8 activations: the decode kernel's bits differ from the prefill one's", what);
    printf("%-48s int8 activations: worst error %.2f of the bound\n", what, worst);
}

static void check_case(const char *what, src_case *s) {
    weight_store ws;
    weights_init_dummy(&ws, 1);
    loom_err err = {{0}};
    qsource src = {s->bits, s->rows, s->cols, s->col0, s->n_groups, s->group, s->group_of, s, NULL, row_codes, 0, 0, 0};
    wmat w;
    CHECK(qmat_build(&ws, &src, &w, &err) == 0, "%s: %s", what, err.msg);
    enum { M = 40 };
    float *x = malloc((size_t)M * s->cols * sizeof *x), *y = malloc((size_t)M * s->rows * sizeof *y);
    for (int i = 0; i < M * s->cols; i++) x[i] = (float)((int)(mix((uint32_t)i) % 2001) - 1000) / 1000.0f;
    static const int ms[] = {1, 2, 3, 9, M};
    double worst_all = 0;
    for (size_t t = 0; t < sizeof ms / sizeof ms[0]; t++) {
        int m = ms[t];
        linear(x, s->cols, m, m, &w, NULL, y, s->rows);
        double worst = 0;
        for (int i = 0; i < m; i++)
            for (int r = 0; r < s->rows; r++) {
                double ref = 0, mag = 0;
                for (int c = 0; c < s->cols; c++) {
                    int g = group_of(s, c);
                    double wv = (float)((float)code_at(s, r, c) - zero_at(s, r, g)) * scale_at(r, g);
                    ref += wv * x[(size_t)i * s->cols + c], mag += fabs(wv * x[(size_t)i * s->cols + c]);
                }
                double e = fabs(y[(size_t)i * s->rows + r] - ref) / (mag > 0 ? mag : 1);
                if (e > worst) worst = e;
            }
        CHECK(worst < 1e-6, "%s, %d rows (%s): relative error %.3g against the reference", what, m,
              m <= 8 ? "decode kernel" : "prefill panels", worst);
        if (worst > worst_all) worst_all = worst;
    }
    printf("%-48s kp %d of %d columns, %d groups held, worst relative error %.1e\n", what, w.q->kp, s->cols,
           w.q->n_groups, worst_all);
    float *y1 = malloc((size_t)M * s->rows * sizeof *y1);
    check_q8(what, s, &w, x, M, y, y1);
    free(y1);
    free(x);
    free(y);
    weights_close(&ws);
}

/* bf16 weights on bf16 activations, through the dot product (9 rows) and the GEMM (40): each
 * input rounded to nearest bf16 moves by at most 2^-9 of itself, so |y - ref| <= 2^-9 sum_c
 * |W[r][c] x[c]|, plus 1e-5 of that sum for fp32 rounding. Where the variant has no bf16 dot
 * product the product is exact, which the bound holds too. 300 columns: a partial vector. */
static void check_bf16(void) {
    enum { ROWS = 37, COLS = 300, M = 40 };
    uint16_t *wd = malloc((size_t)ROWS * COLS * sizeof *wd);
    float *x = malloc((size_t)M * COLS * sizeof *x), *y = malloc((size_t)M * ROWS * sizeof *y);
    for (int i = 0; i < ROWS * COLS; i++)
        wd[i] = f32_to_bf16((float)((int)(mix((uint32_t)i + 7) % 2001) - 1000) / 997.0f);
    for (int i = 0; i < M * COLS; i++) x[i] = (float)((int)(mix((uint32_t)i + 3) % 2001) - 1000) / 1000.0f;
    wmat w = {DT_BF16, ROWS, COLS, COLS, wd, NULL, WACT_BF16, 0};
    static const int ms[] = {9, M};
    for (size_t t = 0; t < sizeof ms / sizeof ms[0]; t++) {
        linear(x, COLS, ms[t], ms[t], &w, NULL, y, ROWS);
        double worst = 0;
        for (int i = 0; i < ms[t]; i++)
            for (int r = 0; r < ROWS; r++) {
                double ref = 0, mag = 0;
                for (int c = 0; c < COLS; c++) {
                    double v = (double)bf16_to_f32(wd[(size_t)r * COLS + c]) * x[(size_t)i * COLS + c];
                    ref += v, mag += fabs(v);
                }
                double e = fabs(y[(size_t)i * ROWS + r] - ref) / (mag * (0x1p-9 + 1e-5));
                if (!(e <= worst)) worst = e;
            }
        CHECK(worst <= 1, "bf16 activations, %d rows: error %.3g of the bound", ms[t], worst);
        printf("bf16 weights, bf16 activations, %2d rows: worst error %.2f of the bound\n", ms[t], worst);
    }
    free(wd);
    free(x);
    free(y);
}

/* FP8 codes, decoded from the format's definition in double: sign, exponent e with bias b,
 * mantissa m of mb bits: 2^(e-b) (1 + m / 2^mb), or 2^(1-b) m / 2^mb when e is 0. */
static double fp8_ref(uint8_t c, enum qcode code) {
    int mb = code == QCODE_E5M2 ? 2 : 3, eb = 7 - mb, bias = (1 << (eb - 1)) - 1;
    int e = c >> mb & ((1 << eb) - 1), m = c & ((1 << mb) - 1);
    double v = e ? ldexp(1 + m / (double)(1 << mb), e - bias) : ldexp(m / (double)(1 << mb), 1 - bias);
    return c & 0x80 ? -v : v;
}

/* The E4M3 number nearest v, by search over all of them (ties to the even code), saturating
 * at 448: the rounding vLLM's cast makes, written without tensor/fp8.h. */
static double e4m3_nearest(double v) {
    double a = fmin(fabs(v), 448), best = 0;
    int best_code = 0;
    for (int c = 0; c < 0x7f; c++) {
        double d = fabs(fp8_ref((uint8_t)c, QCODE_E4M3) - a), bd = fabs(best - a);
        if (d < bd || (d == bd && !(c & 1) && (best_code & 1))) best = fp8_ref((uint8_t)c, QCODE_E4M3), best_code = c;
    }
    return v < 0 ? -best : best;
}

typedef struct fp8_case {
    enum qcode code;
    int rows, cols, col0, n_groups, group; /* groups of `group` columns of the whole matrix */
} fp8_case;

static uint8_t fp8_code_at(const fp8_case *s, int r, int c) {
    for (uint32_t k = 0;; k++) { /* a random finite code, mostly of modest size */
        uint8_t b = (uint8_t)mix((uint32_t)(r * 7919 + c) * 2654435761U + k);
        if (fp8_finite(b, s->code) && fabs(fp8_ref(b, s->code)) <= 16) return b;
    }
}
static int fp8_row_codes(void *ctx, int r, uint8_t *codes, float *scale, float *zero, loom_err *err) {
    (void)err;
    const fp8_case *s = ctx;
    for (int c = 0; c < s->cols; c++) codes[c] = fp8_code_at(s, r, s->col0 + c);
    for (int g = 0; g < s->n_groups; g++) scale[g] = scale_at(r, g), zero[g] = 0;
    return 0;
}
static double fp8_weight(const fp8_case *s, int r, int c) { /* c: the shard's column */
    return (float)((float)fp8_ref(fp8_code_at(s, r, s->col0 + c), s->code) * scale_at(r, (s->col0 + c) / s->group));
}

/* Every code of both formats widened by the kernels (the transpose goes through the prefill
 * path's dequantization) against the format's definition: exact. */
static void check_fp8_codes(enum qcode code) {
    enum { N = 256 };
    uint8_t all[N];
    int n = 0;
    for (int b = 0; b < N; b++)
        if (fp8_finite((uint8_t)b, code)) all[n++] = (uint8_t)b;
    weight_store ws;
    weights_init_dummy(&ws, 1);
    /* one row of every code, then zero codes to a whole block: kp = cols, no column map */
    int kp = (n + QBLOCK - 1) / QBLOCK * QBLOCK;
    wmat w = {.dt = DT_U8, .rows = 1, .cols = kp, .ld = (size_t)kp};
    qlayout q = {8, kp, 1, (int32_t[]){kp}, NULL, (float[]){1, 0}, code, 0, 0, 0, 0};
    uint8_t padded[N + QBLOCK] = {0};
    memcpy(padded, all, (size_t)n);
    w.data = padded, w.q = &q;
    float t[N + QBLOCK];
    CHECK(linear_transpose(&w, t) == 0, "fp8 transpose");
    int wrong = 0;
    for (int i = 0; i < n; i++) wrong += t[i] != (float)fp8_ref(all[i], code);
    /* and through the decode kernels, exact and on bf16 activations (dot_fp8x, whose blocks
     * with and without subnormal codes widen differently): one-hot rows pick each column */
    float *x = calloc((size_t)q.kp, sizeof *x), y[2];
    wmat wb = w;
    wb.act = WACT_BF16;
    for (int i = 0; i < n; i++) {
        x[i] = 1;
        const float *xr[2] = {x, x};
        cpu()->dot_q(xr, 1, padded, &q, 0, y);
        wrong += y[0] != (float)fp8_ref(all[i], code);
        linear(x, (size_t)kp, 1, 1, &wb, NULL, y, 1);
        wrong += y[0] != (float)fp8_ref(all[i], code);
        x[i] = 0;
    }
    CHECK(wrong == 0, "%s: %d of %d codes widen wrongly", code == QCODE_E5M2 ? "E5M2" : "E4M3", wrong, n);
    printf("FP8 %s: all %d finite codes widen exactly (prefill, decode, decode on bf16 activations)\n",
           code == QCODE_E5M2 ? "E5M2" : "E4M3", n);
    free(x);
    weights_close(&ws);
}

/* MXFP4: all 16 FP4 codes under block scales from 2^-20 to 2^21, built by qmat_build into ggml's
 * MXFP4 blocks, widen exactly through the prefill path's dequantization (the transpose) and the
 * decode kernel (one-hot rows), against the format's table (0.5 x twice the value) times the
 * scale; and f32_to_e2m1 (online mxfp4) rounds to the nearest number, ties to the even code, as
 * a search over the 16 codes finds. */
enum { E2M1_KP = 2 * QBLOCK };
static int e2m1_row(void *ctx, int r, uint8_t *codes, float *scale, float *zero, loom_err *err) {
    (void)r, (void)err;
    int e = *(const int *)ctx;
    for (int c = 0; c < E2M1_KP; c++) codes[c] = (uint8_t)(c % 16);
    scale[0] = ldexpf(1, e), scale[1] = ldexpf(1, e + 1), zero[0] = zero[1] = 0;
    return 0;
}

static void check_e2m1(void) {
    static const float value[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    int wrong = 0;
    float x[E2M1_KP] = {0}, t[E2M1_KP], y[2];
    for (int e = -20; e <= 20; e += 5) {
        weight_store ws;
        weights_init_dummy(&ws, 1);
        qsource src = {.bits = 4,
                       .rows = 1,
                       .cols = E2M1_KP,
                       .n_groups = 2,
                       .group_size = QBLOCK,
                       .ctx = &e,
                       .row = e2m1_row,
                       .code = QCODE_E2M1};
        wmat w;
        loom_err err = {{0}};
        CHECK(qmat_build(&ws, &src, &w, &err) == 0, "%s", err.msg);
        CHECK(w.q->code == QCODE_GGUF && w.q->gtype == GT_MXFP4 && w.ld == 2 * 17, "FP4 codes not built as MXFP4");
        CHECK(linear_transpose(&w, t) == 0, "e2m1 transpose");
        for (int c = 0; c < E2M1_KP; c++) {
            int code = c % 16;
            float want = (code & 8 ? -value[code & 7] : value[code & 7]) * ldexpf(1, e + c / QBLOCK);
            wrong += t[c] != want;
            x[c] = 1;
            const float *xr[2] = {x, x};
            cpu()->dot_q(xr, 2, w.data, w.q, 0, y);
            wrong += y[0] != want || y[1] != want;
            x[c] = 0;
        }
        weights_close(&ws);
    }
    CHECK(wrong == 0, "E2M1: %d codes widen wrongly", wrong);
    for (int i = -1000; i <= 1000; i++) { /* steps of 1/128 through +-7.8, every tie included */
        float v = (float)i / 128, got = e2m1_to_f32(f32_to_e2m1(v));
        for (int c = 0; c < 16; c++) {
            float d = fabsf(v - e2m1_to_f32((uint8_t)c)), dg = fabsf(v - got);
            wrong += d < dg || (d == dg && e2m1_to_f32((uint8_t)c) != got && !(c & 1) && (f32_to_e2m1(v) & 1));
        }
    }
    CHECK(wrong == 0, "f32_to_e2m1: %d roundings off the nearest", wrong);
    printf("E2M1 (MXFP4): all 16 codes widen exactly at 9 scales (prefill, decode); rounding to nearest, ties even\n");
}

/* FP8 weights in block-scaled groups, a shard that starts inside a group: the exact product
 * (1e-6 of the sum of |terms|), then FP8 activations (vLLM's W8A8) against the formulas with
 * the rounding found by search: static, per token, per group. Activations then move by at most
 * half an FP8 step: |dx| <= 2^-4 |x| + s 2^-10 (the subnormal step is 2^-9 s), so a result is
 * within sum_c |w_c| (2^-4 |x_c| + s 2^-10) of the exact product, which bounds what a
 * tensor-parallel split of the input does to dynamic per-token scales (each rank's own amax):
 * each shard's partial sum keeps this bound with its own scale. */
static void check_fp8_case(const char *what, fp8_case *s) {
    weight_store ws;
    weights_init_dummy(&ws, 1);
    loom_err err = {{0}};
    qsource src = {8, s->rows, s->cols, s->col0, s->n_groups, s->group, NULL, s, NULL, fp8_row_codes, s->code, 0, 0};
    wmat w;
    CHECK(qmat_build(&ws, &src, &w, &err) == 0, "%s: %s", what, err.msg);
    enum { M = 20 };
    float *x = malloc((size_t)M * s->cols * sizeof *x), *y = malloc((size_t)M * s->rows * sizeof *y);
    for (int i = 0; i < M * s->cols; i++) x[i] = (float)((int)(mix((uint32_t)i * 3 + 1) % 2001) - 1000) / 250.0f;
    static const int ms[] = {1, 2, 9, M};
    double worst = 0, worst_q[3] = {0}, worst_bound[3] = {0}, worst_bf16 = 0;
    const char *modes[3] = {"static", "per token", "per group of 64"};
    for (int mode = -2; mode < 3; mode++) { /* -2: bf16 activations, -1: exact, then FP8's three */
        w.act = mode == -2 ? WACT_BF16 : mode < 0 ? WACT_F32 : WACT_FP8;
        w.in_scale = mode == 0 ? 0.008f : 0;
        ((qlayout *)w.q)->in_group = mode == 2 ? 64 : 0;
        for (size_t t = 0; t < sizeof ms / sizeof ms[0]; t++) {
            int m = ms[t];
            linear(x, s->cols, m, m, &w, NULL, y, s->rows);
            for (int i = 0; i < m; i++) {
                const float *xi = x + (size_t)i * s->cols;
                double amax = 0;
                for (int c = 0; c < s->cols; c++) amax = fmax(amax, fabs(xi[c]));
                double sx = mode == 0 ? 0.008f : fmax((float)amax / 448, 1.0 / (448 * 512));
                for (int r = 0; r < s->rows; r++) {
                    double ref = 0, mag = 0, exact = 0, bound = 0;
                    for (int c = 0; c < s->cols; c++) {
                        double wv = fp8_weight(s, r, c), xv = xi[c], sg = sx;
                        if (mode == 2) { /* the group's own scale */
                            double ga = 1e-10;
                            for (int k = c / 64 * 64; k < c / 64 * 64 + 64 && k < s->cols; k++)
                                ga = fmax(ga, fabs(xi[k]));
                            sg = (float)((float)ga / 448);
                        }
                        double q =
                            mode < 0 ? xv
                                     : e4m3_nearest(mode == 2 ? (float)(xv / sg) : (float)(xv * (float)(1 / sg))) * sg;
                        ref += wv * q, mag += fabs(wv * q), exact += wv * xv;
                        bound += fabs(wv) * (fabs(xv) / 16 + sg / 1024);
                    }
                    double e = fabs(y[(size_t)i * s->rows + r] - ref) / (mag > 0 ? mag : 1);
                    if (mode == -2) worst_bf16 = fmax(worst_bf16, e / (0x1p-9 + 1e-5));
                    else if (mode < 0) worst = fmax(worst, e);
                    else {
                        worst_q[mode] = fmax(worst_q[mode], e);
                        worst_bound[mode] = fmax(worst_bound[mode], fabs(y[(size_t)i * s->rows + r] - exact) / bound);
                    }
                }
            }
        }
    }
    CHECK(worst < 1e-6, "%s: relative error %.3g against the exact reference", what, worst);
    /* bf16 activations: each input moves by at most 2^-9 of itself (exact where the variant has
     * no dot_fp8x), plus fp32 rounding */
    CHECK(worst_bf16 <= 1, "%s, bf16 activations: error %.3g of the bound", what, worst_bf16);
    printf("%-48s bf16 activations: %.2f of the bound\n", what, worst_bf16);
    printf("%-48s kp %d of %d columns, %d groups held, exact: worst relative error %.1e\n", what, w.q->kp, s->cols,
           w.q->n_groups, worst);
    for (int mode = 0; mode < 3; mode++) {
        CHECK(worst_q[mode] < 1e-5, "%s, FP8 activations %s: relative error %.3g against vLLM's formula", what,
              modes[mode], worst_q[mode]);
        CHECK(worst_bound[mode] <= 1, "%s, FP8 activations %s: %.3g of the rounding bound from the exact product", what,
              modes[mode], worst_bound[mode]);
        printf("%-48s FP8 activations %-15s: %.1e of vLLM's formula, %.2f of the bound\n", what, modes[mode],
               worst_q[mode], worst_bound[mode]);
    }
    free(x);
    free(y);
    weights_close(&ws);
}

/* compressed-tensors' ignore list: names, their last components, and "re:" regular expressions
 * matched from the start (Python's re.match), as llm-compressor writes them; a bad expression
 * is refused when the config is read. */
static void check_ignore(void) {
    const char *json = "{\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128], \"ignored_layers\": "
                       "[\"lm_head\", \"re:.*mlp\\\\.gate$\", \"re:model\\\\.layers\\\\.1\\\\.\"]}";
    cJSON *j = cJSON_Parse(json);
    quant_config q;
    loom_err err = {{0}};
    CHECK(j && quant_config_parse(&q, j, "config.json", &err) == 0, "fp8 config: %s", err.msg);
    static const struct {
        const char *module;
        bool ignored;
    } names[] = {{"lm_head", true},
                 {"model.layers.3.mlp.gate", true},
                 {"model.layers.3.mlp.gate_proj", false},
                 {"model.layers.1.self_attn.q_proj", true},
                 {"model.layers.11.self_attn.q_proj", false},
                 {"xmodel.layers.1.mlp", false}};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        CHECK(quant_config_ignores(&q, names[i].module) == names[i].ignored, "ignore list: %s should%s be ignored",
              names[i].module, names[i].ignored ? "" : " not");
    cJSON_Delete(j);
    j = cJSON_Parse("{\"quant_method\": \"fp8\", \"ignored_layers\": [\"re:(unclosed\"]}");
    CHECK(quant_config_parse(&q, j, "config.json", &err) &&
              strstr(err.msg, "'re:(unclosed' is not a regular expression"),
          "a bad ignore pattern: %s", err.msg);
    cJSON_Delete(j);
    printf("FP8 ignore lists: names, suffixes and re: patterns as compressed-tensors matches them\n");
}

int main(void) {
    check_cpu_variant();
    check_ignore();
    check_bf16();
    check_fp8_codes(QCODE_E4M3);
    check_fp8_codes(QCODE_E5M2);
    check_e2m1();
    fp8_case block = {QCODE_E4M3, 37, 300, 0, 3, 128}; /* blocks of 128 columns, the last 44 wide */
    check_fp8_case("E4M3, blocks of 128, 300 columns", &block);
    fp8_case cut = {QCODE_E5M2, 19, 192, 192, 5, 128}; /* columns [192, 384) of 576: cuts block 1 */
    check_fp8_case("E5M2, blocks of 128, columns [192, 384) of 576", &cut);
    fp8_case channel = {QCODE_E4M3, 21, 96, 0, 1, 96};
    check_fp8_case("E4M3, per channel", &channel);
    /* act-order: 8 groups of 16 numbered in a shuffled column order */
    int32_t gi[128];
    for (int i = 0; i < 128; i++) gi[i] = (int)(mix((uint32_t)i + 99) % 8);
    const struct {
        const char *what;
        src_case c;
    } cases[] = {
        {"groups of 128", {0, 37, 256, 0, 2, 128, NULL}},
        {"groups of 32", {0, 19, 96, 0, 3, 32, NULL}},
        {"per channel, 100 columns (padded)", {0, 21, 100, 0, 1, 100, NULL}},
        /* the second half of a 256-column matrix's groups of 64: a row-parallel shard */
        {"columns [128, 256) of groups of 64", {0, 11, 128, 128, 4, 64, NULL}},
        {"act-order groups", {0, 21, 128, 0, 8, 16, gi}},
        /* a shard of 80 columns holding parts of groups, as a row-parallel rank's g_idx slice */
        {"act-order, columns [48, 128)", {0, 21, 80, 48, 8, 16, gi + 48}},
    };
    for (int bits = 4; bits <= 8; bits += 4)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            char what[96];
            src_case c = cases[i].c;
            c.bits = bits;
            snprintf(what, sizeof what, "%d-bit, %s", bits, cases[i].what);
            check_case(what, &c);
        }
    quant_scheme s;
    loom_err err = {{0}};
    CHECK(quant_scheme_parse(&s, "int3", 0, false, &err) && strstr(err.msg, "--quantization: unknown 'int3'"), "%s",
          err.msg);
    CHECK(quant_scheme_parse(&s, "int4", 48, false, &err) && strstr(err.msg, "--quant-group-size: 48 is not"), "%s",
          err.msg);
    CHECK(quant_scheme_parse(&s, NULL, 64, false, &err) && strstr(err.msg, "--quant-group-size needs --quantization"),
          "%s", err.msg);
    CHECK(quant_scheme_parse(&s, "int4", 0, false, &err) == 0 && s.bits == 4 && s.group == 128, "int4 defaults to 128");
    return check_done();
}

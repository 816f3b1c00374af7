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
#include <math.h>

#include "check.h"
#include "cpu/cpu.h"
#include "kernels/kernels.h"
#include "quant/quant.h"
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
    qsource src = {s->bits, s->rows, s->cols, s->col0, s->n_groups, s->group, s->group_of, s, NULL, row_codes};
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
    wmat w = {DT_BF16, ROWS, COLS, COLS, wd, NULL, WACT_BF16};
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

int main(void) {
    check_cpu_variant();
    check_bf16();
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
        {"act-order groups", {0, 13, 128, 0, 8, 16, gi}},
        /* a shard of 80 columns holding parts of groups, as a row-parallel rank's g_idx slice */
        {"act-order, columns [48, 128)", {0, 13, 80, 48, 8, 16, gi + 48}},
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

/* Quantized linears against a reference written here from the source codes: y = x W^T with
 * W[r][c] = (q[r][c] - zero[r][g(c)]) * scale[r][g(c)], in double. Covers 4 and 8 bits, group
 * sizes 32 and 128 and per channel, widths that are not whole blocks (padding), act-order
 * group numbering (columns out of group order) and a row-parallel shard of the groups; each
 * through the decode kernel (few rows, one or two at a time) and the prefill path (panels
 * for sgemm), in the CPU variant LOOM_CPU selects. Then the --quantization option's errors. */
#include <math.h>

#include "check.h"
#include "kernels/kernels.h"
#include "quant/quant.h"

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
    free(x);
    free(y);
    weights_close(&ws);
}

int main(void) {
    check_cpu_variant();
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

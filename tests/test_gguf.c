/* GGUF: llama.cpp's weight types and the container.
 *
 * Types: tests/golden/gguf_blocks/blocks.gguf (tests/golden/make_gguf_blocks.py) holds random
 * blocks of every type loom decodes beside the gguf package's dequantization of them. In the CPU
 * variant LOOM_CPU selects, each row decoded by the variant's kernel must equal the package's
 * values bit for bit, and the product y = x W^T through the decode kernel (one and two rows) and
 * the prefill path (panels for the GEMM), whole and for a row-parallel shard's columns, must
 * match a double-precision product over those values to fp32 rounding.
 *
 * Container: a small GGUF written here, then broken one way at a time (wrong magic, version,
 * every truncation, a string or count too large for the file, an unknown value or tensor type,
 * a message naming what is wrong. */
#include <math.h>

#include "check.h"
#include "cpu/cpu.h"
#include "kernels/kernels.h"
#include "model/gguf.h"
#include "model/gguf_mla.h"

#define GOLDEN     LOOM_SOURCE_DIR "/tests/golden/gguf_blocks/blocks.gguf"
#define MLA_GOLDEN LOOM_SOURCE_DIR "/tests/golden/gguf_blocks/mla.gguf"

/* x: m rows of cols values, deterministic */
static void fill_x(float *x, int m, int cols) {
    for (int i = 0; i < m * cols; i++) x[i] = sinf(0.37f * (float)i + 0.11f) * (1.0f + (float)(i % 7) / 7.0f);
}

/* y = x W^T over columns [c0, c0 + nc) of ref's rows, against the kernels' y */
static void check_product(const char *type, const wmat *w, const float *ref, int cols, int c0, int m) {
    int rows = w->rows, nc = w->cols;
    float *x = calloc((size_t)m * nc, sizeof *x), *y = calloc((size_t)m * rows, sizeof *y);
    fill_x(x, m, nc);
    linear(x, nc, m, m, w, NULL, y, rows);
    double worst = 0;
    for (int i = 0; i < m; i++)
        for (int r = 0; r < rows; r++) {
            double want = 0, mag = 0;
            for (int c = 0; c < nc; c++) {
                double p = (double)x[(size_t)i * nc + c] * ref[(size_t)r * cols + c0 + c];
                want += p, mag += fabs(p);
            }
            double err = fabs(y[(size_t)i * rows + r] - want) / (mag + 1e-30);
            if (err > worst) worst = err;
        }
    CHECK(worst < 4e-6, "%s, columns [%d, %d), %d input rows: relative error %.3g", type, c0, c0 + nc, m, worst);
    free(x);
    free(y);
}

extern const cpu_kernels cpu_generic;

#if defined(__x86_64__)
extern const cpu_kernels cpu_avx2, cpu_avx2vnni, cpu_avx512, cpu_avx512bf16, cpu_avx512amx;
#define PANEL_VARIANTS &cpu_avx512amx, &cpu_avx512bf16, &cpu_avx512, &cpu_avx2vnni, &cpu_avx2
#elif defined(__aarch64__)
extern const cpu_kernels cpu_neon, cpu_neondot;
#define PANEL_VARIANTS &cpu_neondot, &cpu_neon
#endif

/* cpu.h's panel_gguf_q8 order written out one product at a time: input row x against lane n of
 * a panel whose codes (kp a row), dl and ml (PANEL_Q8_W lanes a sub-block) the kernel left in its
 * scratch. Every variant's panel must give these bits. */
static float panel_order(const q8row *x, const int8_t *codes, const float *dl, const float *ml, int n, int kp,
                         int width, bool mins) {
    float acc = 0;
    for (int k = 0; k < kp / QACT; k++) {
        const int u = width == 16 ? 2 * k : k;
        int s[2] = {0, 0};
        for (int c = 0; c < QACT; c++) s[c / width] += codes[k * QACT + c] * x->q[k * QACT + c];
        if (width == 16) {
            float p = (float)s[0] * dl[u * PANEL_Q8_W + n];
            p = fmaf((float)s[1], dl[(u + 1) * PANEL_Q8_W + n], p);
            acc = fmaf(p, x->d[k], acc);
        } else {
            float f = dl[u * PANEL_Q8_W + n] * x->d[k];
            acc = fmaf((float)s[0], f, acc);
        }
        for (int h = 0; mins && h < QACT / width; h++) acc = fmaf(-ml[(u + h) * PANEL_Q8_W + n], x->gsum[u + h], acc);
    }
    return acc;
}

/* A prefill's panels give the same bits (cpu.h) on the m int8 rows xq (ldq floats apart): the
 * variant in use's panel against the order written out (panel_order), and against every other
 * panel this CPU runs (x86: AMX's tiles, AVX-512 VNNI, AVX-VNNI, AVX2; Arm: sdot, widening
 * products). */
static void check_panels(const char *type, const wmat *w, const float *xq, size_t ldq, int m, int c0) {
    const cpu_kernels *all[] = {PANEL_VARIANTS}, *k[8];
    const int n_all = (int)(sizeof all / sizeof *all);
    int nk = 0;
    loom_cpu_info info;
    loom_err err;
    if (!cpu()->panel_gguf_q8 || loom_cpu_get_info(&info, &err)) return;
    k[nk++] = cpu();
    char runs[sizeof info.runnable + 2], name[32];
    snprintf(runs, sizeof runs, " %s ", info.runnable);
    for (int v = 0; v < n_all; v++) {
        snprintf(name, sizeof name, " %s ", all[v]->name);
        if (all[v] != cpu() && strstr(runs, name)) k[nk++] = all[v];
    }
    const qlayout *ql = w->q;
    int kp = ql->kp, width = gtype_split(ql->gtype), nsub = kp / width, rows = w->rows;
    q8row *xr = calloc(m, sizeof *xr);
    float *gsum = calloc((size_t)m * nsub, sizeof *gsum), *y[8];
    int32_t *isum = calloc((size_t)m * nsub, sizeof *isum);
    uint8_t *pack = malloc(PANEL_GGUF_PACK(kp));
    for (int i = 0; i < m; i++) {
        const int8_t *q = (const int8_t *)(xq + i * ldq);
        const float *d = xq + i * ldq + kp / 4;
        for (int u = 0; u < nsub; u++) {
            int sum = 0;
            for (int c = u * width; c < (u + 1) * width; c++) sum += q[c];
            isum[i * nsub + u] = sum, gsum[i * nsub + u] = (float)sum * d[u * width / QACT];
        }
        xr[i] = (q8row){q, d, gsum + i * nsub};
    }
    const int8_t *codes = panel_gguf_codes(pack, kp);
    const float *dl = panel_gguf_dl(pack, kp), *ml = panel_gguf_ml(pack, kp);
    int off_order = 0;
    for (int v = 0; v < nk; v++) {
        y[v] = calloc((size_t)m * rows, sizeof *y[v]);
        for (int n0 = 0; n0 < rows; n0 += PANEL_Q8_W) {
            int nw = rows - n0 < PANEL_Q8_W ? rows - n0 : PANEL_Q8_W;
            k[v]->panel_gguf_q8(xr, ldq * sizeof(float), isum, m, (const uint8_t *)w->data + (size_t)n0 * w->ld, w->ld,
                                nw, ql, pack, y[v] + n0, rows);
            for (int i = 0; !v && i < m; i++)
                for (int n = 0; n < nw; n++) {
                    float want =
                        panel_order(&xr[i], codes + (size_t)n * kp, dl, ml, n, kp, width, gtype_has_mins(ql->gtype));
                    off_order += memcmp(&want, &y[0][(size_t)i * rows + n0 + n], sizeof want) != 0;
                }
        }
        if (v)
            CHECK(!memcmp(y[0], y[v], (size_t)m * rows * sizeof *y[0]),
                  "%s int8, columns [%d, %d), %d rows: the %s and %s panels give other bits", type, c0, c0 + kp, m,
                  k[0]->name, k[v]->name);
    }
    CHECK(!off_order, "%s int8, columns [%d, %d): %d of the %s panel's products differ from cpu.h's order", type, c0,
          c0 + kp, off_order, k[0]->name);
    for (int v = 0; v < nk; v++) free(y[v]);
    free(xr), free(gsum), free(isum), free(pack);
}

/* --dtype auto: y = x W^T on x's rows quantized to int8, through dot_gguf_q8 for 1 to 5 and 8 rows
 * (decode) and the prefill path for 40 (the variant's panel, else the exact panels). Both must match a
 * double-precision product of the reference weights with the values the int8 rows stand for, to
 * fp32 rounding; the decode path must give, row by row, the generic variant's bits from its
 * kernel called on one row, on four and on eight at once (cpu.h's one order); a prefill's last 17 rows
 * must have the same bits in a pass of their own; and every panel the CPU runs must give
 * cpu.h's bits. The prefill's last two rows are all +1 and all -1, whose int8 codes (all 127 and
 * -127) make the largest integer sums a kernel adds. */
static void check_int8(const char *type, const wmat *w, const float *ref, int cols, int c0) {
    int rows = w->rows, nc = w->cols;
    wmat wi = *w;
    wi.act = WACT_INT8;
    size_t ldq = q8row_floats(nc);
    for (int m = 1; m <= 40; m += m < 5 ? 1 : m == 5 ? 3 : 32) {
        float *x = calloc((size_t)m * nc, sizeof *x), *y = calloc((size_t)m * rows, sizeof *y);
        float *xq = calloc((size_t)m * ldq, sizeof *xq), *sums = calloc((size_t)m * nc / 4, sizeof *sums);
        fill_x(x, m, nc);
        for (int c = 0; m == 40 && c < nc; c++) /* codes of +-127 throughout: the largest integer sums */
            x[38 * nc + c] = 1.0f, x[39 * nc + c] = -1.0f;
        linear(x, nc, m, m, &wi, NULL, y, rows);
        quantize_rows(ROWS_INT8, x, nc, m, nc, 0, xq, ldq);
        q8row xr[GGUF_Q8_ROWS];
        double worst = 0;
        for (int i = 0; i < m; i++) {
            const int8_t *q = (const int8_t *)(xq + i * ldq);
            const float *d = xq + i * ldq + nc / 4;
            for (int b = 0; b < nc / QACT; b++) {
                int s = 0;
                for (int c = b * QACT; c < (b + 1) * QACT; c++) s += q[c];
                sums[i * nc / QACT + b] = (float)s * d[b];
            }
            if (i < GGUF_Q8_ROWS) xr[i] = (q8row){q, d, sums + i * nc / QACT};
            for (int r = 0; r < rows; r++) {
                double want = 0, mag = 0;
                for (int c = 0; c < nc; c++) {
                    double p = (double)q[c] * d[c / QACT] * ref[(size_t)r * cols + c0 + c];
                    want += p, mag += fabs(p);
                }
                double err = fabs(y[(size_t)i * rows + r] - want) / (mag + 1e-30);
                if (err > worst) worst = err;
            }
        }
        CHECK(worst < 4e-6, "%s int8, columns [%d, %d), %d input rows: relative error %.3g", type, c0, c0 + nc, m,
              worst);
        int differ = 0;
        for (int r = 0; (m == 5 || m == 8) && r < rows; r++) {
            const uint8_t *wr = (const uint8_t *)w->data + (size_t)r * w->ld;
            float one[1], many[GGUF_Q8_ROWS];
            for (int i = 0; i < m; i++) {
                cpu_generic.dot_gguf_q8(xr + i, 1, wr, w->q, one);
                differ += memcmp(&one[0], &y[(size_t)i * rows + r], sizeof one[0]) != 0;
            }
            cpu_generic.dot_gguf_q8(xr, m - 1, wr, w->q, many); /* 4 and 7 rows a call */
            for (int i = 0; i < m - 1; i++) differ += memcmp(&many[i], &y[(size_t)i * rows + r], sizeof *many) != 0;
        }
        CHECK(!differ, "%s int8, columns [%d, %d): %d products differ from the generic variant's bits", type, c0,
              c0 + nc, differ);
        if (m == 40) check_panels(type, w, xq, ldq, m, c0);
        if (m == 40) { /* a prefill's row has the same bits in a pass of other rows: rows 23.. alone */
            float *y17 = calloc((size_t)17 * rows, sizeof *y17);
            linear(x + 23 * nc, nc, 17, 17, &wi, NULL, y17, rows);
            CHECK(!memcmp(y17, y + 23 * rows, (size_t)17 * rows * sizeof *y17),
                  "%s int8, columns [%d, %d): rows 23-39 of a 40-row prefill differ from the same rows alone", type, c0,
                  c0 + nc);
            free(y17);
        }
        free(x), free(y), free(xq), free(sums);
    }
}

static void check_type(const gguf_file *f, const gguf_tensor *t) {
    char ref_name[64];
    snprintf(ref_name, sizeof ref_name, "%s.ref", t->name);
    const gguf_tensor *r = gguf_find_tensor(f, ref_name);
    CHECK(r && r->type == GT_F32, "%s: no reference tensor", t->name);
    if (!r) return;
    const gtype_info *g = gtype_get(t->type);
    int rows = (int)t->ne[1], cols = (int)t->ne[0];
    size_t row_bytes = (size_t)cols / g->block * g->bytes;
    const float *ref = r->data;
    qlayout q = {.kp = cols, .code = QCODE_GGUF, .gtype = t->type};
    /* decoded by the variant's kernel: the reference's bits */
    float *row = calloc(cols, sizeof *row);
    int differ = 0;
    for (int i = 0; i < rows; i++) {
        cpu()->dequant_q((const uint8_t *)t->data + i * row_bytes, &q, (size_t)i, row);
        differ += memcmp(row, ref + (size_t)i * cols, cols * sizeof *row) != 0;
    }
    free(row);
    CHECK(!differ, "%s: %d of %d rows decode to other bits than the gguf package's", t->name, differ, rows);
    wmat w = {.dt = DT_U8, .rows = rows, .cols = cols, .ld = row_bytes, .data = t->data, .q = &q, .act = WACT_F32};
    for (int m = 1; m <= 40; m += m < 2 ? 1 : 38) check_product(t->name, &w, ref, cols, 0, m);
    bool blocks = g->block > 1;
    if (blocks) check_int8(t->name, &w, ref, cols, 0);
    /* a row-parallel shard: the second half of the columns, whole super-blocks */
    qlayout half = q;
    half.kp = cols / 2;
    wmat shard = w;
    shard.cols = cols / 2, shard.q = &half;
    shard.data = (const uint8_t *)t->data + row_bytes / 2;
    check_product(t->name, &shard, ref, cols, cols / 2, 2);
    check_product(t->name, &shard, ref, cols, cols / 2, 40);
    if (blocks) check_int8(t->name, &shard, ref, cols, cols / 2);
    /* a share cut inside blocks at both ends, at the type's finest split (a k-quant's sub-block):
     * [u, cols - u), its rows decoding to the reference's bits and its products */
    int u = gtype_split(t->type);
    qlayout cut = q;
    cut.kp = cols - 2 * u, cut.g0 = u % g->block;
    shard.cols = cut.kp, shard.q = &cut;
    shard.data = (const uint8_t *)t->data + (size_t)u / g->block * g->bytes;
    float *part = calloc(cut.kp, sizeof *part);
    differ = 0;
    for (int i = 0; i < rows; i++) {
        cpu()->dequant_q((const uint8_t *)shard.data + i * row_bytes, &cut, (size_t)i, part);
        differ += memcmp(part, ref + (size_t)i * cols + u, cut.kp * sizeof *part) != 0;
    }
    free(part);
    CHECK(!differ, "%s: %d of %d rows' columns [%d, %d) decode to other bits than the gguf package's", t->name, differ,
          rows, u, cols - u);
    check_product(t->name, &shard, ref, cols, u, 1);
    check_product(t->name, &shard, ref, cols, u, 2);
    check_product(t->name, &shard, ref, cols, u, 40);
    if (blocks && u % QACT == 0) check_int8(t->name, &shard, ref, cols, u);
}

static void check_types(void) {
    gguf_file f;
    loom_err err = {{0}};
    CHECK(gguf_open(&f, GOLDEN, &err) == 0, "%s", err.msg);
    if (err.msg[0]) return;
    int types = 0;
    for (size_t i = 0; i < f.n_tensors; i++)
        if (!strstr(f.tensors[i].name, ".ref")) check_type(&f, &f.tensors[i]), types++;
    CHECK(types == 15, "%d types in %s", types, GOLDEN);
    gguf_close(&f);
}

/* DeepSeek's kv_b_proj joined from its Q8_0 and Q5_1 halves (model/gguf_mla.c) must be the
 * gguf package's dequantization of them joined in numpy (make_gguf_blocks.py's mla.gguf). */
static void check_mla_join(void) {
    gguf_file f;
    loom_err err = {{0}};
    CHECK(gguf_open(&f, MLA_GOLDEN, &err) == 0, "%s", err.msg);
    if (err.msg[0]) return;
    weight_store ws = {0};
    st_tensor kv = {0};
    const gguf_tensor *ref = gguf_find_tensor(&f, "kv_b.ref");
    CHECK(gguf_mla_kv_b(&ws, &f, 1, 0, &kv, &err) == 0, "joining kv_b_proj: %s", err.msg);
    CHECK(ref && kv.data && kv.ndim == 2 && kv.shape[0] == ref->ne[1] && kv.shape[1] == ref->ne[0] &&
              !memcmp(kv.data, ref->data, kv.nbytes),
          "kv_b_proj joined from attn_k_b and attn_v_b differs from the gguf package's");
    CHECK(gguf_mla_kv_b(&ws, &f, 1, 1, NULL, &err) < 0 && strstr(err.msg, "blk.1.attn_v_b.weight"),
          "a layer without its halves: %s", err.msg);
    free(kv.name);
    weights_close(&ws);
    gguf_close(&f);
}

/* ---------------------------------------------------------------- the container */

typedef struct buf {
    uint8_t b[4096];
    size_t n;
} buf;

static void put(buf *o, const void *p, size_t n) {
    memcpy(o->b + o->n, p, n);
    o->n += n;
}
static void put_u32(buf *o, uint32_t v) { put(o, &v, 4); }
static void put_u64(buf *o, uint64_t v) { put(o, &v, 8); }
static void put_str(buf *o, const char *s) {
    put_u64(o, strlen(s));
    put(o, s, strlen(s));
}

/* Where the fields to break sit in the file good() writes. */
typedef struct layout {
    size_t version, n_kv, key_len, kv_type, tensor_type, tensor_offset[2], dim0;
} layout;

/* Two keys (a string, an array of three u32) and two F32 tensors [8] and [2, 16], 32-aligned. */
static buf good(layout *at) {
    buf o = {.n = 0};
    put(&o, "GGUF", 4);
    at->version = o.n;
    put_u32(&o, 3);
    put_u64(&o, 2);
    at->n_kv = o.n;
    put_u64(&o, 2);
    at->key_len = o.n;
    put_str(&o, "general.architecture");
    at->kv_type = o.n;
    put_u32(&o, GGUF_STRING);
    put_str(&o, "llama");
    put_str(&o, "test.list");
    put_u32(&o, GGUF_ARRAY);
    put_u32(&o, GGUF_U32);
    put_u64(&o, 3);
    for (uint32_t i = 0; i < 3; i++) put_u32(&o, i);
    put_str(&o, "a.weight");
    put_u32(&o, 1);
    at->dim0 = o.n;
    put_u64(&o, 8);
    at->tensor_type = o.n;
    put_u32(&o, GT_F32);
    at->tensor_offset[0] = o.n;
    put_u64(&o, 0);
    put_str(&o, "b.weight");
    put_u32(&o, 2);
    put_u64(&o, 16);
    put_u64(&o, 2);
    put_u32(&o, GT_F32);
    at->tensor_offset[1] = o.n;
    put_u64(&o, 32);
    while (o.n % 32) o.b[o.n++] = 0;
    for (int i = 0; i < 32 + 128; i++) o.b[o.n++] = (uint8_t)i;
    return o;
}

/* The file with field `at` set to v (of `size` bytes) must be refused, the message holding `why`. */
static void refused(const char *what, size_t at, uint64_t v, int size, size_t len, const char *why) {
    layout l;
    buf o = good(&l);
    if (size) memcpy(o.b + at, &v, size);
    gguf_file f;
    loom_err err = {{0}};
    int rc = gguf_parse(&f, o.b, len ? len : o.n, "bad.gguf", &err);
    CHECK(rc != 0, "%s: accepted", what);
    CHECK(strstr(err.msg, "bad.gguf") && strstr(err.msg, why), "%s: message '%s' should name '%s'", what, err.msg, why);
    if (!rc) gguf_close(&f);
}

static void check_container(void) {
    layout l;
    buf o = good(&l);
    gguf_file f;
    loom_err err = {{0}};
    CHECK(gguf_parse(&f, o.b, o.n, "good.gguf", &err) == 0, "%s", err.msg);
    if (!err.msg[0]) {
        gguf_str s;
        CHECK(gguf_get_str(&f, "general.architecture", &s, &err) == 0 && s.n == 5 && !memcmp(s.p, "llama", 5),
              "architecture");
        const gguf_kv *list = gguf_get_array(&f, "test.list", GGUF_I32, &err);
        CHECK(list && list->n == 3 && gguf_array_num(list, 2) == 2, "the array");
        int64_t v;
        CHECK(gguf_get_i64(&f, "general.architecture", &v, &err) < 0 && strstr(err.msg, "general.architecture"),
              "a string read as an integer: %s", err.msg);
        const gguf_tensor *b = gguf_find_tensor(&f, "b.weight");
        CHECK(b && b->ndim == 2 && b->ne[0] == 16 && b->nbytes == 128 && ((const uint8_t *)b->data)[0] == 32,
              "tensor b");
        gguf_close(&f);
    }
    refused("wrong magic", 0, 0x46554746, 4, 0, "not a GGUF file");
    refused("version 1", l.version, 1, 4, 0, "version 1");
    refused("a huge key count", l.n_kv, (uint64_t)1 << 60, 8, 0, "metadata keys");
    refused("a key length past the end", l.key_len, (uint64_t)1 << 40, 8, 0, "remain");
    refused("an unknown value type", l.kv_type, 77, 4, 0, "type 77");
    refused("an unknown tensor type", l.tensor_type, 99, 4, 0, "type 99");
    refused("a misaligned offset", l.tensor_offset[1], 36, 8, 0, "alignment");
    refused("a tensor past the end", l.tensor_offset[1], 4096, 8, 0, "past the end");
    refused("overlapping tensors", l.tensor_offset[1], 0, 8, 0, "overlap");
    refused("a zero dimension", l.dim0, 0, 8, 0, "dimension 0");
    /* every truncation is refused, naming the file */
    int accepted = 0;
    for (size_t n = 0; n < o.n - 1; n++) {
        gguf_file t;
        loom_err e = {{0}};
        if (gguf_parse(&t, o.b, n, "cut.gguf", &e) == 0) accepted++, gguf_close(&t);
        else if (!strstr(e.msg, "cut.gguf")) accepted++;
    }
    CHECK(!accepted, "%d truncations accepted or refused without the file's name", accepted);
}

int main(void) {
    check_cpu_variant();
    check_types();
    check_mla_join();
    check_container();
    return check_done();
}

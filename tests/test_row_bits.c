/* The products the invariants rest on (docs/DESIGN.md 4.7), each fed the same rows in the
 * shapes the modes produce: a query in a block of 1, 3, 16 or 64, starting on a block boundary
 * or off it (a cached prefix, a pipeline's microbatches, a verify pass); a prompt written and
 * read in passes of every length; latent attention's expanded runs split differently and its
 * decoding rows batched with others; the linears' GEMMs over 17 to 131 rows, from misaligned
 * rows, in chunks, on one thread and two. Every row must keep the bits it has alone, whatever
 * the CPU, the variant and the libraries' own kernels: registered once per CPU variant, and CI
 * runs it under every oneDNN ISA this CPU has (ONEDNN_MAX_CPU_ISA). The data is random; no
 * value is checked here but the bits' agreement (test_golden and test_mla hold the values to
 * their references). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/kernels.h"
#include "model/weights.h"
#include "quant/quant.h"
#include "tensor/half.h"

static uint32_t rng = 12345;
static float urand(void) { /* xorshift32: uniform in [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 17, rng ^= rng << 5;
    return (float)(rng >> 8) / (float)(1 << 23) - 1.0f;
}
static float *rand_array(size_t n, float amp) {
    float *a = malloc(n * sizeof *a);
    for (size_t i = 0; i < n; i++) a[i] = amp * urand();
    return a;
}

/* ---- attend(): one problem, blocks of every size at every offset ---- */

#define CTX 150 /* positions of the one sequence */

typedef struct attend_case {
    const char *name;
    int g, d, window;
    float softcap;
    bool sinks;
} attend_case;

/* Queries p0.. p0+n-1 (with their g heads) into out[p][g][d], keys and values contiguous. */
static void attend_block(const attend_case *c, const float *q, const float *k, const float *v, const float *sinks,
                         int p0, int n, float *out) {
    size_t ld = (size_t)c->g * c->d;
    attend(&(attend_task){.q = q + (size_t)p0 * ld,
                          .ldq = (size_t)c->d,
                          .rows = n * c->g,
                          .g = c->g,
                          .qk_dim = c->d,
                          .v_dim = c->d,
                          .p0 = p0,
                          .window = c->window,
                          .scale = 1.0f / sqrtf((float)c->d),
                          .k = k,
                          .v = v,
                          .ldk = (size_t)c->d,
                          .ldv = (size_t)c->d,
                          .out = out + (size_t)p0 * ld,
                          .ldo = ld,
                          .head_stride = (size_t)c->d,
                          .softcap = c->softcap,
                          .sinks = c->sinks ? sinks : NULL});
}

/* EVIDENCE-OF: 4.7 (attention) */
static void attend_blocks(const attend_case *c) {
    size_t ld = (size_t)c->g * c->d;
    float *q = rand_array(CTX * ld, 2.0f), *k = rand_array(CTX * (size_t)c->d, 2.0f);
    float *v = rand_array(CTX * (size_t)c->d, 1.0f), *sinks = rand_array((size_t)c->g, 1.0f);
    float *alone = malloc(CTX * ld * sizeof *alone), *out = malloc(CTX * ld * sizeof *out);
    for (int p = 0; p < CTX; p++) attend_block(c, q, k, v, sinks, p, 1, alone);
    static const int sizes[] = {1, 3, 16, 64}, offsets[] = {0, 5};
    for (int threads = 1; threads <= 2; threads++)
        for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
            for (size_t oi = 0; oi < sizeof offsets / sizeof *offsets; oi++) {
                int n = sizes[si], off = offsets[oi], blocks = (CTX - off + n - 1) / n;
                memset(out, 0, CTX * ld * sizeof *out);
                /* blocks in reverse on a dynamic schedule: each thread's scratch is reused by
                 * blocks of other sizes, after other rows */
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
                for (int b = blocks - 1; b >= 0; b--) {
                    int p0 = off + b * n;
                    attend_block(c, q, k, v, sinks, p0, CTX - p0 < n ? CTX - p0 : n, out);
                }
                int first_bad = -1;
                for (int p = off; p < CTX && first_bad < 0; p++)
                    if (memcmp(out + p * ld, alone + p * ld, ld * sizeof *out)) first_bad = p;
                CHECK(first_bad < 0,
                      "attend, %s: queries in blocks of %d from position %d on %d thread(s): position %d's output "
                      "is not the bits it has alone",
                      c->name, n, off, threads, first_bad);
            }
    free(q), free(k), free(v), free(sinks), free(alone), free(out);
}

/* ---- attention(): a prompt in passes of every length over a paged cache ---- */

#define HEADS    4
#define KV_HEADS 2
#define HD       64
#define BLOCK    16
#define PROMPT   96

/* The prompt's outputs, passes of the given lengths in turn (0 ends the list). */
static void prompt_in_passes(const float *q, const float *k, const float *v, const int *passes, float *out) {
    static const int32_t table[PROMPT / BLOCK] = {4, 0, 5, 2, 1, 3}; /* the blocks scattered over the pool */
    size_t kvw = KV_HEADS * HD, qw = HEADS * HD;
    kv_layer c = {.k = calloc(PROMPT * kvw, sizeof(float)),
                  .v = calloc(PROMPT * kvw, sizeof(float)),
                  .kv_width = (int)kvw,
                  .block_size = BLOCK,
                  .tables = table,
                  .table_width = PROMPT / BLOCK};
    kv_layer_format(&c, LOOM_KV_FLOAT32, HD, HD);
    attn_shape s = {.n_heads = HEADS, .n_kv_heads = KV_HEADS, .head_dim = HD, .scale = 0.125f};
    int32_t pos[PROMPT], seq[PROMPT] = {0};
    for (int p0 = 0, i = 0; p0 < PROMPT; p0 += passes[i], i += passes[i + 1] != 0) {
        int n = PROMPT - p0 < passes[i] ? PROMPT - p0 : passes[i];
        for (int r = 0; r < n; r++) pos[r] = p0 + r;
        attention(&s, &c, q + p0 * qw, qw, k + p0 * kvw, kvw, v + p0 * kvw, kvw, out + p0 * qw, qw, n, pos, seq, NULL);
    }
    free(c.k), free(c.v);
}

static void attention_passes(void) {
    size_t qw = HEADS * HD, kvw = KV_HEADS * HD;
    float *q = rand_array(PROMPT * qw, 2.0f), *k = rand_array(PROMPT * kvw, 2.0f), *v = rand_array(PROMPT * kvw, 1.0f);
    float *one = malloc(PROMPT * qw * sizeof *one), *out = malloc(PROMPT * qw * sizeof *out);
    static const int by_one[] = {1, 0};
    prompt_in_passes(q, k, v, by_one, one);
    static const struct {
        const char *name;
        int passes[4];
    } ways[] = {{"one pass", {PROMPT, 0}},
                {"16-token passes", {16, 0}},
                {"5 tokens, then 59, then the rest", {5, 59, PROMPT, 0}},
                {"3-token passes", {3, 0}}};
    for (size_t w = 0; w < sizeof ways / sizeof *ways; w++) {
        prompt_in_passes(q, k, v, ways[w].passes, out);
        int first_bad = -1;
        for (int p = 0; p < PROMPT && first_bad < 0; p++)
            if (memcmp(out + p * qw, one + p * qw, qw * sizeof *out)) first_bad = p;
        CHECK(first_bad < 0, "attention, prompt in %s: position %d differs from the prompt token by token",
              ways[w].name, first_bad);
    }
    free(q), free(k), free(v), free(one), free(out);
}

/* ---- latent attention: expanded runs split differently, decoding rows batched ---- */

#define MH    4
#define LORA  64
#define NOPE  32
#define ROPE  16
#define VDIM  32
#define QKD   (NOPE + ROPE)
#define KVB   (NOPE + VDIM)
#define LATW  (LORA + ROPE)
#define HIST  40
#define MSEQS 3

typedef struct mla_data {
    float *q, *kv_c, *k_pe, *t; /* per (sequence, position): the query, latent and rotated key */
    kv_layer cache;
    int32_t table[MSEQS][HIST / 8 + 1];
} mla_data;

static attn_shape mla_shape_of(void) {
    return (attn_shape){
        .n_heads = MH, .n_kv_heads = MH, .head_dim = QKD, .scale = 0.1f, .mla = {LORA, NOPE, ROPE, VDIM}};
}

/* Rows (seq[r], pos[r]) through mla_attention, outputs into out[seq][pos]. */
static void mla_rows(mla_data *m, int rows, const int32_t *seq, const int32_t *pos, float *out) {
    static float q[HIST * MSEQS * MH * QKD], kv[HIST * MSEQS * LATW], o[HIST * MSEQS * MH * VDIM];
    for (int r = 0; r < rows; r++) {
        size_t at = (size_t)seq[r] * (HIST + 1) + pos[r];
        memcpy(q + r * MH * QKD, m->q + at * MH * QKD, MH * QKD * sizeof *q);
        memcpy(kv + r * LATW, m->kv_c + at * LORA, LORA * sizeof *kv);
        memcpy(kv + r * LATW + LORA, m->k_pe + at * ROPE, ROPE * sizeof *kv);
    }
    attn_shape s = mla_shape_of();
    mla_attention(&s, &m->cache, q, MH * QKD, kv, LATW, kv + LORA, LATW, m->t, o, MH * VDIM, rows, pos, seq);
    for (int r = 0; r < rows; r++)
        memcpy(out + ((size_t)seq[r] * (HIST + 1) + pos[r]) * MH * VDIM, o + r * MH * VDIM, MH * VDIM * sizeof *o);
}

/* Each sequence's history in runs of `run` positions (a run of one would decode: the last run
 * takes it), then all sequences decode position HIST together, or one at a time. */
static void mla_history(mla_data *m, int run, bool batched, float *out) {
    memset(m->cache.k, 0, (size_t)MSEQS * (HIST / 8 + 1) * 8 * LATW * sizeof(float));
    int32_t seq[HIST], pos[HIST];
    for (int s = 0; s < MSEQS; s++)
        for (int p0 = 0; p0 < HIST;) {
            int n = HIST - p0 <= run + 1 ? HIST - p0 : run;
            for (int r = 0; r < n; r++) seq[r] = s, pos[r] = p0 + r;
            mla_rows(m, n, seq, pos, out);
            p0 += n;
        }
    for (int s = 0; s < MSEQS; s++) seq[s] = s, pos[s] = HIST;
    if (batched) mla_rows(m, MSEQS, seq, pos, out);
    else
        for (int s = 0; s < MSEQS; s++) mla_rows(m, 1, seq + s, pos + s, out);
}

/* EVIDENCE-OF: 4.7 (latent attention) */
static void mla_splits(void) {
    mla_data m = {0};
    size_t tokens = (size_t)MSEQS * (HIST + 1), ow = MH * VDIM;
    m.q = rand_array(tokens * MH * QKD, 2.0f), m.kv_c = rand_array(tokens * LORA, 1.0f);
    m.k_pe = rand_array(tokens * ROPE, 2.0f), m.t = rand_array((size_t)LORA * MH * KVB, 0.2f);
    for (int s = 0; s < MSEQS; s++) /* each sequence's blocks interleaved with the others' */
        for (int b = 0; b <= HIST / 8; b++) m.table[s][b] = b * MSEQS + (MSEQS - 1 - s);
    m.cache = (kv_layer){.k = calloc((size_t)MSEQS * (HIST / 8 + 1) * 8 * LATW, sizeof(float)),
                         .kv_width = LATW,
                         .block_size = 8,
                         .tables = &m.table[0][0],
                         .table_width = HIST / 8 + 1};
    kv_layer_format(&m.cache, LOOM_KV_FLOAT32, LATW, LATW);
    float *ref = calloc(tokens * ow, sizeof *ref), *out = calloc(tokens * ow, sizeof *out);
    mla_history(&m, HIST, true, ref);
    static const int runs[] = {2, 7, 16};
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++)
        for (int batched = 0; batched <= 1; batched++) {
            mla_history(&m, runs[i], batched, out);
            int bad_s = -1, bad_p = -1;
            for (int s = 0; s < MSEQS && bad_s < 0; s++)
                for (int p = 0; p <= HIST && bad_s < 0; p++) {
                    size_t at = ((size_t)s * (HIST + 1) + p) * ow;
                    if (memcmp(out + at, ref + at, ow * sizeof *out)) bad_s = s, bad_p = p;
                }
            CHECK(bad_s < 0,
                  "latent attention, history in runs of %d, decoding %s: sequence %d position %d differs from one "
                  "run and a batched decoding step",
                  runs[i], batched ? "batched" : "one sequence at a time", bad_s, bad_p);
        }
    free(m.q), free(m.kv_c), free(m.k_pe), free(m.t), free(m.cache.k), free(ref), free(out);
}

/* ---- the linears over any rows: oneDNN's GEMMs (f32, bf16), the int8 tile and AMX panel ---- */

#define LROWS 131 /* rows of the longest pass */
#define LIN   200 /* columns in */
#define LOUT  96  /* columns out */
#define LDX   (LIN + 3)

/* the codes, scales and zero points of a quantized matrix of LOUT rows: groups of 32 columns
 * in the 4-bit one (one block a group), of 64 in the 8-bit one */
static int random_codes(void *ctx, int r, uint8_t *codes, float *scale, float *zero, loom_err *err) {
    (void)r, (void)err;
    int bits = *(const int *)ctx, group = bits == 4 ? 32 : 64;
    for (int c = 0; c < LIN; c++) codes[c] = (uint8_t)((urand() + 1) * 0.5f * (float)(1 << bits)) & ((1 << bits) - 1);
    for (int g = 0; g < (LIN + group - 1) / group; g++)
        scale[g] = 0.01f + 0.005f * urand(), zero[g] = (float)(1 << (bits - 1));
    return 0;
}
static wmat quantized(weight_store *ws, int *bits) {
    int group = *bits == 4 ? 32 : 64;
    qsource src = {*bits, LOUT, LIN, 0, (LIN + group - 1) / group, group, NULL, bits, NULL, random_codes, 0, 0, 0};
    wmat w;
    loom_err err = {{0}};
    CHECK(qmat_build(ws, &src, &w, &err) == 0, "%d-bit matrix: %s", *bits, err.msg);
    w.act = WACT_INT8;
    return w;
}

/* EVIDENCE-OF: 4.4 (a block's kernel chosen by its pass's rows), 4.7 (the linears) */
static void linears(void) {
    float *x = rand_array((size_t)LROWS * LDX, 1.0f), *wf = rand_array((size_t)LOUT * LIN, 0.1f);
    float *shifted = malloc(((size_t)LROWS * LDX + 1) * sizeof *shifted);
    memcpy(shifted + 1, x, (size_t)LROWS * LDX * sizeof *x); /* the same rows, off 64-byte alignment */
    uint16_t *wb = malloc((size_t)LOUT * LIN * sizeof *wb);
    for (int i = 0; i < LOUT * LIN; i++) wb[i] = f32_to_bf16(wf[i]);
    weight_store ws;
    weights_init_dummy(&ws, 1);
    int four = 4, eight = 8;
    const wmat mats[] = {{.dt = DT_F32, .rows = LOUT, .cols = LIN, .ld = LIN, .data = wf, .act = WACT_F32},
                         {.dt = DT_BF16, .rows = LOUT, .cols = LIN, .ld = LIN, .data = wb, .act = WACT_F32},
                         {.dt = DT_BF16, .rows = LOUT, .cols = LIN, .ld = LIN, .data = wb, .act = WACT_BF16},
                         quantized(&ws, &four),
                         quantized(&ws, &eight)};
    static const char *names[] = {"f32 weights", "bf16 weights, exact", "bf16 weights, bf16 activations",
                                  "4-bit weights, int8 activations", "8-bit weights, int8 activations"};
    float *ref = malloc((size_t)LROWS * LOUT * sizeof *ref), *y = malloc((size_t)LROWS * LOUT * sizeof *y);
    static const int counts[] = {17, 31, 64, 100, LROWS}, chunks[] = {0, 32};
    for (size_t wi = 0; wi < sizeof mats / sizeof *mats; wi++) {
        omp_set_num_threads(2);
        linear(x, LDX, LROWS, LROWS, &mats[wi], NULL, ref, LOUT);
        for (int threads = 1; threads <= 2; threads++)
            for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++)
                for (size_t ki = 0; ki < sizeof chunks / sizeof *chunks; ki++)
                    for (int first = 0; first <= 1; first++) { /* from row 0, or from row 1 and misaligned */
                        int m = counts[ci] - first, chunk = chunks[ki] ? chunks[ki] : m;
                        const float *rows = first ? shifted + 1 + LDX : x;
                        omp_set_num_threads(threads);
                        linear_chunked(rows, LDX, m, chunk, counts[ci], &mats[wi], NULL, y, LOUT);
                        int bad = -1;
                        for (int r = 0; r < m && bad < 0; r++)
                            if (memcmp(y + (size_t)r * LOUT, ref + (size_t)(first + r) * LOUT, LOUT * sizeof *y))
                                bad = r;
                        CHECK(bad < 0,
                              "linear, %s: rows %d..%d%s in chunks of %d on %d thread(s): row %d differs from one "
                              "product of %d rows",
                              names[wi], first, first + m - 1, first ? " (misaligned)" : "", chunk, threads,
                              first + bad, LROWS);
                    }
    }
    omp_set_num_threads(2);
    weights_close(&ws);
    free(x), free(shifted), free(wf), free(wb), free(ref), free(y);
}

int main(void) {
    check_cpu_variant();
    static const attend_case cases[] = {{"one head a kv head", 1, 64, 0, 0, false},
                                        {"four heads a kv head", 4, 64, 0, 0, false},
                                        {"head size 36 (a partial vector)", 2, 36, 0, 0, false},
                                        {"sliding window of 37", 4, 64, 37, 0, false},
                                        {"soft-capped scores", 2, 64, 0, 20.0f, false},
                                        {"attention sinks", 4, 64, 0, 0, true}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) attend_blocks(&cases[i]);
    attention_passes();
    mla_splits();
    linears();
    return check_done();
}

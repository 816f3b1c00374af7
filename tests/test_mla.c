/* Multi-head latent attention (mla.c) on deterministic data, against a double-precision
 * reference that expands every head's K and V from the latent: the expanded form (prefill runs,
 * one longer than a query block, one starting past position 0), the absorbed form (single-token
 * decoding steps, several sequences in one batch), both in one batch, the two forms against each
 * other on the same history, and the latent cache rows written, into blocks scattered over the
 * pool. Inputs and outputs have padded
 * strides, and the output's padding must stay untouched. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/kernels.h"

#define H    3
#define LORA 24
#define NOPE 16
#define ROPE 8
#define VD   12
#define QK   (NOPE + ROPE)
#define KVB  (NOPE + VD)
#define LAT  (LORA + ROPE)
#define CTX  32
#define SEQS 2
#define MAXR 24
#define LDQ  (H * QK + 5)
#define LDKV (LAT + 3) /* kv_c and k_pe side by side in one row, as kv_a_proj gives them */
#define LDO  (H * VD + 4)
#define PAD  12345.0f
#define TOL  1e-5

static float val(int i) { return (float)((i * 7919) % 101) / 101.0f - 0.5f; }

static float W[H * KVB][LORA];     /* kv_b_proj */
static float T[LORA][H * KVB];     /* its transpose, as mla_attention takes it */
static float Q[SEQS][CTX][H * QK]; /* each token's (rotated) query */
static float KVC[SEQS][CTX][LORA]; /* its normalised latent */
static float KPE[SEQS][CTX][ROPE]; /* its rotated shared key */

static attn_shape shape = {.n_heads = H, .n_kv_heads = H, .head_dim = QK, .mla = {LORA, NOPE, ROPE, VD}};

static void make_data(void) {
    for (int i = 0; i < H * KVB; i++)
        for (int j = 0; j < LORA; j++) T[j][i] = W[i][j] = val(i * LORA + j + 3);
    for (int s = 0; s < SEQS; s++)
        for (int p = 0; p < CTX; p++) {
            int base = 100000 + (s * CTX + p) * 97;
            for (int i = 0; i < H * QK; i++) Q[s][p][i] = 2 * val(base + i);
            for (int i = 0; i < LORA; i++) KVC[s][p][i] = val(base + 50000 + i);
            for (int i = 0; i < ROPE; i++) KPE[s][p][i] = 2 * val(base + 90000 + i);
        }
}

/* The output of the query at position p of sequence s over that sequence's tokens 0..p. */
static void reference(int s, int p, double *out) {
    double scale = shape.scale; /* the float the kernel is given */
    for (int h = 0; h < H; h++) {
        double score[CTX], v[CTX][VD], mx = -INFINITY, sum = 0;
        for (int t = 0; t <= p; t++) {
            double sc = 0;
            for (int d = 0; d < NOPE; d++) {
                double k = 0;
                for (int j = 0; j < LORA; j++) k += (double)W[h * KVB + d][j] * KVC[s][t][j];
                sc += (double)Q[s][p][h * QK + d] * k;
            }
            for (int d = 0; d < ROPE; d++) sc += (double)Q[s][p][h * QK + NOPE + d] * KPE[s][t][d];
            score[t] = scale * sc;
            if (score[t] > mx) mx = score[t];
            for (int d = 0; d < VD; d++) {
                double x = 0;
                for (int j = 0; j < LORA; j++) x += (double)W[h * KVB + NOPE + d][j] * KVC[s][t][j];
                v[t][d] = x;
            }
        }
        for (int t = 0; t <= p; t++) sum += score[t] = exp(score[t] - mx);
        for (int d = 0; d < VD; d++) {
            double o = 0;
            for (int t = 0; t <= p; t++) o += score[t] / sum * v[t][d];
            out[h * VD + d] = o;
        }
    }
}

/* A paged cache of blocks of BS positions, each sequence's blocks scattered over the pool in
 * reverse order, so that reading a block table is part of what the reference checks. */
#define BS 8
static const int32_t TABLES[SEQS][CTX / BS] = {{7, 5, 3, 1}, {6, 4, 2, 0}};
static kv_layer new_cache(void) {
    kv_layer c = {.k = calloc((size_t)SEQS * CTX * LAT, sizeof(float)),
                  .kv_width = LAT,
                  .block_size = BS,
                  .tables = &TABLES[0][0],
                  .table_width = CTX / BS};
    kv_layer_format(&c, LOOM_KV_FLOAT32, LAT, LAT); /* one slab: a position's row is contiguous */
    return c;
}

/* One mla_attention call over rows (seq[r], pos[r]) with the test's data, padded strides. */
static void run(kv_layer *c, int rows, const int32_t *seq, const int32_t *pos, float *out) {
    static float q[MAXR * LDQ], kv[MAXR * LDKV];
    for (int i = 0; i < MAXR * LDQ; i++) q[i] = NAN; /* the padding must not be read */
    for (int i = 0; i < MAXR * LDKV; i++) kv[i] = NAN;
    for (int i = 0; i < MAXR * LDO; i++) out[i] = PAD;
    for (int r = 0; r < rows; r++) {
        memcpy(q + r * LDQ, Q[seq[r]][pos[r]], sizeof Q[0][0]);
        memcpy(kv + r * LDKV, KVC[seq[r]][pos[r]], sizeof KVC[0][0]);
        memcpy(kv + r * LDKV + LORA, KPE[seq[r]][pos[r]], sizeof KPE[0][0]);
    }
    mla_attention(&shape, c, q, LDQ, kv, LDKV, kv + LORA, LDKV, &T[0][0], out, LDO, rows, pos, seq);
}

/* Every row of out against the reference, and the output's padding untouched. */
static void check_rows(const char *what, int rows, const int32_t *seq, const int32_t *pos, const float *out) {
    double ref[H * VD];
    for (int r = 0; r < rows; r++) {
        reference(seq[r], pos[r], ref);
        double worst = 0;
        int at = 0;
        for (int i = 0; i < H * VD; i++) {
            double d = fabs(out[r * LDO + i] - ref[i]);
            if (!(d <= worst)) worst = d, at = i; /* NaN counts as the worst */
        }
        CHECK(worst < TOL, "%s: row %d (seq %d pos %d) column %d: %.9g, expected %.9g (off by %g)", what, r, seq[r],
              pos[r], at, out[r * LDO + at], ref[at], worst);
        int pad_ok = 1;
        for (int i = H * VD; i < LDO; i++) pad_ok &= out[r * LDO + i] == PAD;
        CHECK(pad_ok, "%s: row %d: the output's padding was written", what, r);
    }
}

/* Cache rows (s, 0..n) hold [kv_c | k_pe] exactly, rows n.. of s are still zero. */
static void check_cache(const char *what, const kv_layer *c, int s, int n) {
    for (int p = 0; p < CTX; p++) {
        const float *row = (const float *)c->k + kv_row(c, s, p) * LAT;
        if (p < n) {
            CHECK(!memcmp(row, KVC[s][p], sizeof KVC[0][0]), "%s: seq %d pos %d: cached kv_c differs", what, s, p);
            CHECK(!memcmp(row + LORA, KPE[s][p], sizeof KPE[0][0]), "%s: seq %d pos %d: cached k_pe differs", what, s,
                  p);
        } else {
            int zero = 1;
            for (int i = 0; i < LAT; i++) zero &= row[i] == 0;
            CHECK(zero, "%s: seq %d pos %d: written, though no token is there yet", what, s, p);
        }
    }
}

static float out[MAXR * LDO];

/* A: expanded; B: absorbed, and both in one batch; D: chunked prefill and a run longer than a
 * block, next to a decoding step. All on one cache. */
static void forms(void) {
    kv_layer c = new_cache();
    int32_t seq[MAXR], pos[MAXR];

    for (int r = 0; r < 9; r++) seq[r] = 0, pos[r] = r;
    run(&c, 9, seq, pos, out);
    check_rows("A: prefill of 9", 9, seq, pos, out);
    check_cache("A", &c, 0, 9);
    check_cache("A", &c, 1, 0);

    for (int p = 9; p < 12; p++) {
        int32_t s1 = 0, p1 = p;
        run(&c, 1, &s1, &p1, out);
        char what[64];
        snprintf(what, sizeof what, "B: decoding at pos %d", p);
        check_rows(what, 1, &s1, &p1, out);
    }
    check_cache("B: decoding", &c, 0, 12);

    /* sequence 1's prefill of 5 (expanded) and sequence 0's next token (absorbed) */
    for (int r = 0; r < 5; r++) seq[r] = 1, pos[r] = r;
    seq[5] = 0, pos[5] = 12;
    run(&c, 6, seq, pos, out);
    check_rows("B: prefill of 5 and a decoding step", 6, seq, pos, out);
    check_cache("B: mixed", &c, 0, 13);
    check_cache("B: mixed", &c, 1, 5);

    /* two sequences decoding in one batch, the later position first */
    seq[0] = 0, pos[0] = 13, seq[1] = 1, pos[1] = 5;
    run(&c, 2, seq, pos, out);
    check_rows("B: two decoding steps", 2, seq, pos, out);

    /* chunked prefill: sequence 0's chunk at 14..17 (a run not starting at 0) and sequence 1's
     * at 6..25 (more than one block of queries) */
    int r = 0;
    for (int p = 14; p < 18; p++, r++) seq[r] = 0, pos[r] = p;
    for (int p = 6; p < 26; p++, r++) seq[r] = 1, pos[r] = p;
    run(&c, r, seq, pos, out);
    check_rows("D: chunks of 4 and 20", r, seq, pos, out);
    check_cache("D", &c, 0, 18);
    check_cache("D", &c, 1, 26);

    /* a decoding step, then a run of 3 */
    seq[0] = 0, pos[0] = 18;
    for (r = 1; r < 4; r++) seq[r] = 1, pos[r] = 25 + r;
    run(&c, 4, seq, pos, out);
    check_rows("D: a decoding step and a chunk of 3", 4, seq, pos, out);
    check_cache("D", &c, 0, 19);
    check_cache("D", &c, 1, 29);
    free(c.k);
}

/* C: the same 12-token history as one prefill, and as a prefill of 11 then a decoding step. */
static void agree(void) {
    kv_layer a = new_cache(), b = new_cache();
    int32_t seq[12] = {0}, pos[12];
    for (int r = 0; r < 12; r++) pos[r] = r;
    float last_a[H * VD], last_b[H * VD];
    run(&a, 12, seq, pos, out);
    check_rows("C: prefill of 12", 12, seq, pos, out);
    memcpy(last_a, out + 11 * LDO, sizeof last_a);
    run(&b, 11, seq, pos, out);
    run(&b, 1, seq + 11, pos + 11, out);
    check_rows("C: decoding at 11", 1, seq + 11, pos + 11, out);
    memcpy(last_b, out, sizeof last_b);
    double worst = 0;
    for (int i = 0; i < H * VD; i++)
        if (!(fabs(last_a[i] - last_b[i]) <= worst)) worst = fabs(last_a[i] - last_b[i]);
    CHECK(worst < TOL, "C: expanded and absorbed differ by %g at position 11", worst);
    CHECK(!memcmp(a.k, b.k, (size_t)SEQS * CTX * LAT * sizeof(float)), "C: the two caches differ");
    check_cache("C", &a, 0, 12);
    free(a.k);
    free(b.k);
}

int main(void) {
    shape.scale = 1.0f / sqrtf((float)QK);
    make_data();
    forms();
    agree();
    return check_done();
}

/* The paged KV cache: its bookkeeping (runtime/kv_cache.c) and the kernels reading through it.
 *  - bookkeeping: blocks taken as sequences grow, full blocks keyed and found again (the whole
 *    prefix, then none once the first token differs), reference counts across sharing
 *    sequences, a twin block never indexed twice, eviction of cached blocks when their room is
 *    needed (a sequence's later blocks before its earlier ones), and a hit whose tokens differ
 *    (a hash collision, made here by hand) refused;
 *  - the kernels: attention (GQA, with and without a sliding window), and latent attention in
 *    both its forms, over blocks scattered through the pool must give the same bits as over
 *    the same rows laid out contiguously, for blocks of 16 (smaller than attention's key chunk)
 *    and 64 positions, in every dtype the cache stores (kernels/kv_format.c), the rounding ones
 *    giving other bits than float32;
 *  - the dtypes' rounding: every value read back within the bound its dtype promises. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/kernels.h"
#include "runtime/kv_cache.h"

static void write_tokens(kv_cache *c, int seq, int from, int n, int salt) {
    int32_t ids[256];
    for (int i = 0; i < n; i++) ids[i] = (from + i) * 7 + salt;
    kv_cache_grow(c, seq, from + n);
    kv_cache_written(c, seq, from, ids, n);
}

static void bookkeeping(void) {
    kv_cache c;
    loom_err err;
    CHECK(!kv_cache_init(&c, 8, 16, 4, 128, true, &err), "init: %s", err.msg);
    write_tokens(&c, 0, 0, 40, 0); /* 2 full blocks and a partial one */
    CHECK(c.held[0] == 3 && c.n_free == 5 && c.n_indexed == 2, "40 positions: %d blocks held, %d free, %d indexed",
          c.held[0], c.n_free, c.n_indexed);
    int32_t want[64], got[8];
    for (int i = 0; i < 64; i++) want[i] = i * 7;
    CHECK(kv_cache_match(&c, want, 39, got) == 2 && got[0] == c.tables[0] && got[1] == c.tables[1],
          "the written prefix matches its 2 full blocks");
    CHECK(kv_cache_match(&c, want, 31, got) == 1, "31 tokens hold 1 whole block");
    want[0] = 99;
    CHECK(kv_cache_match(&c, want, 39, got) == 0, "another first token matches nothing");
    want[0] = 0, want[20] = 99;
    CHECK(kv_cache_match(&c, want, 39, got) == 1, "a change in the second block keeps the first");
    want[20] = 140;

    /* sharing: sequence 1 starts from sequence 0's blocks */
    int n = kv_cache_match(&c, want, 39, got);
    CHECK(!kv_cache_attach(&c, 1, got, n, &err) && c.len[1] == 32, "attach: %s", err.msg);
    CHECK(c.blocks[got[0]].refs == 2 && c.n_free == 5, "shared blocks: refs %d, free %d", c.blocks[got[0]].refs,
          c.n_free);
    CHECK(kv_cache_attach(&c, 1, got, n, &err) && strstr(err.msg, "not an empty sequence"),
          "attaching to a sequence that holds blocks is refused");
    int32_t bad = 7; /* free, never written */
    CHECK(kv_cache_attach(&c, 2, &bad, 1, &err) && strstr(err.msg, "not a full block"),
          "attaching a block that is not full is refused");

    /* a twin: sequence 2 writes sequence 0's first 16 tokens itself; the index keeps one */
    write_tokens(&c, 2, 0, 16, 0);
    CHECK(c.n_indexed == 2 && !c.blocks[c.tables[2 * c.table_width]].indexed, "a twin block is not indexed again");
    kv_cache_release(&c, 2);
    CHECK(c.free_head == c.tables[2 * c.table_width], "an unindexed block is reused first");

    /* releasing: cached blocks stay findable while nobody holds them */
    kv_cache_release(&c, 0);
    kv_cache_release(&c, 1);
    CHECK(c.n_free == 8 && c.n_indexed == 2 && kv_cache_match(&c, want, 39, got) == 2,
          "released blocks stay cached: %d free, %d indexed", c.n_free, c.n_indexed);

    /* eviction: 6 new blocks take the 6 never-indexed ones; the 7th evicts the cached prefix's
     * second block (a sequence's later block goes first), then its first */
    write_tokens(&c, 3, 0, 96, 1000);
    CHECK(c.evicted == 0 && kv_cache_match(&c, want, 39, got) == 2, "no cached block evicted while others are free");
    kv_cache_grow(&c, 3, 97);
    CHECK(c.evicted == 1 && kv_cache_match(&c, want, 39, got) == 1, "the prefix's later block is evicted first");
    kv_cache_grow(&c, 3, 113);
    CHECK(c.evicted == 2 && kv_cache_match(&c, want, 39, got) == 0, "then its first");
    kv_cache_release(&c, 3);

    /* a collision: a block found by its key whose tokens differ is not a hit */
    write_tokens(&c, 0, 0, 16, 0);
    CHECK(kv_cache_match(&c, want, 16, got) == 1, "the block is found");
    c.tokens[(size_t)c.tables[0] * 16 + 5] ^= 1; /* its key stays: as if another prefix hashed alike */
    CHECK(kv_cache_match(&c, want, 16, got) == 0, "a key whose tokens differ is a miss");
    kv_cache_free(&c);
}

/* Cutting back (rejected speculative tokens): at a block boundary the blocks past it, whose
 * tokens were all rejected, leave the index and are reused first, while the cached prefix stays;
 * inside a block the block stops being a prefix; inside a shared block the cut is refused. A
 * cached block evicted, written again with other tokens, matches those and not the old ones. */
static void truncation(void) {
    kv_cache c;
    loom_err err;
    CHECK(!kv_cache_init(&c, 8, 16, 4, 128, true, &err), "init: %s", err.msg);
    int32_t prompt[128], older[64], got[8];
    for (int i = 0; i < 128; i++) prompt[i] = i * 7;
    for (int i = 0; i < 64; i++) older[i] = i * 7 + 1000;
    write_tokens(&c, 1, 0, 32, 1000); /* an older prefix of 2 blocks, cached once released */
    kv_cache_release(&c, 1);
    write_tokens(&c, 0, 0, 48, 0); /* 32 accepted positions, then a block of 16 drafts */
    int rejected = c.tables[2];
    CHECK(!kv_cache_truncate(&c, 0, 32, &err), "a cut at a block boundary: %s", err.msg);
    CHECK(!c.blocks[rejected].indexed && kv_cache_match(&c, prompt, 47, got) == 2,
          "the rejected drafts' block is still a cached prefix");
    kv_cache_grow(&c, 3, 64); /* the 3 never-keyed blocks left, and one more */
    CHECK(c.evicted == 0 && kv_cache_match(&c, older, 33, got) == 2,
          "a new block evicted the older cached prefix (%ld evicted) instead of reusing the rejected drafts' block",
          c.evicted);
    kv_cache_release(&c, 3);
    CHECK(!kv_cache_truncate(&c, 0, 20, &err) && !c.blocks[c.tables[1]].indexed && c.len[0] == 20,
          "a cut inside the second block leaves it a cached prefix: %s", err.msg);
    int n = kv_cache_match(&c, prompt, 33, got);
    CHECK(n == 1 && !kv_cache_attach(&c, 2, got, n, &err), "the first block shared: %d, %s", n, err.msg);
    CHECK(kv_cache_truncate(&c, 2, 8, &err) && strstr(err.msg, "share"), "a cut inside a shared block is refused");
    CHECK(!kv_cache_truncate(&c, 2, 16, &err) && c.blocks[got[0]].indexed,
          "a cut at the shared block's end keeps it cached: %s", err.msg);
    kv_cache_release(&c, 0);
    kv_cache_release(&c, 2);
    /* evicted and written again: 8 blocks for one sequence take every block, cached ones too */
    write_tokens(&c, 0, 0, 128, 500);
    CHECK(kv_cache_match(&c, prompt, 33, got) == 0 && kv_cache_match(&c, older, 33, got) == 0,
          "an old prefix still matches after its blocks were written again");
    int32_t now[128];
    for (int i = 0; i < 128; i++) now[i] = i * 7 + 500;
    n = kv_cache_match(&c, now, 127, got);
    CHECK(n == 7, "the blocks written again match their new tokens: %d of 7", n);
    kv_cache_free(&c);
}

/* Attention over a pool whose blocks a table maps; the contiguous layout is the identity table. */
#define SEQS  2
#define CTX   128
#define HEADS 4
#define KVH   2
#define HD    16
#define KVW   (KVH * HD)
#define POOL  (SEQS * CTX) /* positions */
#define MLA_H 2
#define LORA  24
#define ROPE  8
#define NOPE  16
#define VD    12
#define LAT   (LORA + ROPE)
#define ROWS  (SEQS * CTX)
#define LDQ   (HEADS * HD > MLA_H * (NOPE + ROPE) ? HEADS * HD : MLA_H * (NOPE + ROPE))

static float val(long i) { return (float)((i * 7919) % 101) / 101.0f - 0.5f; }

/* Tables for blocks of bs positions: sequence s's block i is s * per + i (contiguous), or the
 * pool's blocks taken from the far end, the sequences interleaved (scattered). */
static void make_tables(int32_t *t, int bs, bool scattered) {
    int per = CTX / bs, n = POOL / bs;
    for (int s = 0; s < SEQS; s++)
        for (int i = 0; i < per; i++) t[s * per + i] = scattered ? n - 1 - (i * SEQS + s) : s * per + i;
}

/* The batches: a prefill of each sequence's first 40 positions in one pass (runs of 40), then
 * decode steps at 40..44 (one row per sequence), then a chunk of 30 positions; out receives
 * every row's output; the rows written. */
typedef void (*attend_fn)(kv_layer *c, int rows, const int32_t *pos, const int32_t *seq, float *out, long step);

static int drive(kv_layer *c, attend_fn fn, float *out, int width) {
    int32_t pos[ROWS], seq[ROWS];
    int r = 0, step = 0, at[SEQS] = {0};
    int plan[][2] = {{40, 1}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {30, 1}};
    for (size_t k = 0; k < sizeof plan / sizeof plan[0]; k++, step++) {
        int n = 0;
        for (int s = 0; s < SEQS; s++)
            for (int i = 0; i < plan[k][0]; i++) pos[n] = at[s]++, seq[n] = s, n++;
        fn(c, n, pos, seq, out + (size_t)r * width, step);
        r += n;
    }
    return r;
}

static attn_shape gqa;
static float q_data[ROWS * LDQ], k_data[ROWS * KVW], v_data[ROWS * KVW], t_data[LORA * MLA_H * (NOPE + VD)];

static void gqa_step(kv_layer *c, int rows, const int32_t *pos, const int32_t *seq, float *out, long step) {
    (void)step;
    for (int r = 0; r < rows; r++) {
        long id = seq[r] * CTX + pos[r]; /* a position's q, k and v are the same in any pass */
        for (int i = 0; i < LDQ; i++) q_data[r * LDQ + i] = val(id * 131 + i);
        for (int i = 0; i < KVW; i++)
            k_data[r * KVW + i] = val(id * 137 + i + 5), v_data[r * KVW + i] = val(id * 139 + i + 9);
    }
    attention(&gqa, c, q_data, LDQ, k_data, KVW, v_data, KVW, out, HEADS * HD, rows, pos, seq, NULL);
}

static attn_shape mla = {
    .n_heads = MLA_H, .n_kv_heads = MLA_H, .head_dim = NOPE + ROPE, .scale = 0.2f, .mla = {LORA, NOPE, ROPE, VD}};

static void mla_step(kv_layer *c, int rows, const int32_t *pos, const int32_t *seq, float *out, long step) {
    (void)step;
    for (int r = 0; r < rows; r++) {
        long id = seq[r] * CTX + pos[r];
        for (int i = 0; i < LDQ; i++) q_data[r * LDQ + i] = val(id * 131 + i);
        for (int i = 0; i < LAT; i++) k_data[r * KVW + i] = val(id * 137 + i + 5);
    }
    mla_attention(&mla, c, q_data, LDQ, k_data, KVW, k_data + LORA, KVW, t_data, out, MLA_H * VD, rows, pos, seq);
}

/* The kernel's outputs over a pool in dtype dt, its blocks scattered and contiguous: the same
 * bits; returns the contiguous ones (malloc'd). */
static float *same_bits(const char *what, attend_fn fn, int width, int kv_width, int slab, int group, bool has_v,
                        int bs, loom_kv_dtype dt) {
    int32_t tables[2][POOL / 16];
    float *out[2];
    int rows = 0;
    size_t row_bytes = kv_row_bytes(dt, kv_width, slab, group);
    for (int layout = 0; layout < 2; layout++) {
        make_tables(tables[layout], bs, layout);
        kv_layer c = {.k = calloc(POOL, row_bytes),
                      .v = has_v ? calloc(POOL, row_bytes) : NULL,
                      .kv_width = kv_width,
                      .block_size = bs,
                      .tables = tables[layout],
                      .table_width = CTX / bs};
        kv_layer_format(&c, dt, slab, group);
        out[layout] = calloc((size_t)ROWS * width, sizeof(float));
        rows = drive(&c, fn, out[layout], width);
        free(c.k), free(c.v);
    }
    bool finite = true;
    for (int i = 0; i < rows * width; i++) finite &= isfinite(out[0][i]) && out[0][i] != 0;
    CHECK(finite, "%s, %s cache, blocks of %d: outputs not all written", what, loom_kv_dtype_name(dt), bs);
    CHECK(!memcmp(out[0], out[1], (size_t)ROWS * width * sizeof(float)),
          "%s, %s cache, blocks of %d: scattered blocks do not give contiguous memory's bits", what,
          loom_kv_dtype_name(dt), bs);
    free(out[1]);
    return out[0];
}

/* Every dtype's bits scattered and contiguous; the rounding ones must differ from float32's
 * (a cache that silently kept fp32 would not). */
static void every_dtype(const char *what, attend_fn fn, int width, int kv_width, int slab, int group, bool has_v,
                        int bs) {
    float *exact = same_bits(what, fn, width, kv_width, slab, group, has_v, bs, LOOM_KV_FLOAT32);
    for (loom_kv_dtype dt = LOOM_KV_BF16; dt <= LOOM_KV_INT8; dt++) {
        float *rounded = same_bits(what, fn, width, kv_width, slab, group, has_v, bs, dt);
        CHECK(memcmp(exact, rounded, (size_t)ROWS * width * sizeof(float)),
              "%s, %s cache: the same bits as float32's, so nothing was rounded", what, loom_kv_dtype_name(dt));
        free(rounded);
    }
    free(exact);
}

static void paged_kernels(void) {
    for (int i = 0; i < LORA * MLA_H * (NOPE + VD); i++) t_data[i] = val(i + 77);
    int sizes[] = {16, 64};
    for (int k = 0; k < 2; k++) {
        int bs = sizes[k];
        gqa = (attn_shape){.n_heads = HEADS, .n_kv_heads = KVH, .head_dim = HD, .scale = 0.25f};
        every_dtype("attention (GQA)", gqa_step, HEADS * HD, KVW, HD, HD, true, bs);
        gqa.window = 7;
        every_dtype("attention (GQA, sliding window of 7)", gqa_step, HEADS * HD, KVW, HD, HD, true, bs);
        every_dtype("latent attention", mla_step, MLA_H * VD, LAT, LAT, ROPE, false, bs); /* gcd(24, 8) */
    }
}

/* The per-value error bound each dtype promises (docs/DESIGN.md, "KV cache dtypes"), for x in
 * a group whose largest magnitude is amax: bf16 and E4M3 round to nearest, half a unit in the
 * last place of the value (2^-8 and 2^-4 of it; E4M3's subnormals, below 2^-6 of the scale, in
 * steps of 2^-9 of it), int8 half a step of amax / 127; and the fp32 division and product around
 * the codes add a rounding each. */
static double kv_bound(loom_kv_dtype dt, double x, double amax) {
    double fp32 = 0x1p-22 * fabs(x), s = amax / (dt == LOOM_KV_FP8 ? 448.0 : 127.0);
    if (dt == LOOM_KV_BF16) return 0x1p-8 * fabs(x);
    if (dt == LOOM_KV_INT8) return 0.5 * s + fp32;
    return fmax(0x1p-4 * fabs(x), 0x1p-10 * s) + fp32;
}

/* Rows of random magnitudes (1e-6 to 1e3, so every code range is visited) and rows with an
 * all-zero group, a lone value and equal values, written and read back in every rounding dtype,
 * in groups of 16 and of 12 (a partial vector on every variant): each value within kv_bound of
 * what was written, a zero group all zeros. */
static void rounding_bounds(void) {
    enum { W = 48, N = 64 };
    for (int group = 12; group <= 16; group += 4)
        for (loom_kv_dtype dt = LOOM_KV_BF16; dt <= LOOM_KV_INT8; dt++) {
            kv_layer c = {.kv_width = W, .block_size = N};
            kv_layer_format(&c, dt, W, group);
            char *pool = calloc(N, c.row_bytes);
            float x[W], back[W];
            double worst = 0; /* the largest error over its bound */
            unsigned long seed = 12345;
            for (int r = 0; r < N; r++) {
                for (int i = 0; i < W; i++) {
                    seed = seed * 6364136223846793005UL + 1442695040888963407UL;
                    double u = (double)(seed >> 11) / 0x1p53;
                    x[i] = (float)((seed >> 7 & 1 ? -1 : 1) * pow(10.0, -6 + 9 * u));
                }
                if (r == 1) memset(x, 0, group * sizeof *x);       /* a zero group */
                if (r == 2) memset(x, 0, (group - 1) * sizeof *x); /* a lone value */
                if (r == 3)
                    for (int i = 0; i < group; i++) x[i] = 0.75f; /* equal values */
                kv_write(&c, pool, (size_t)r, x);
                size_t ld;
                const float *got = kv_read(&c, pool, (size_t)r, 1, 0, W, back, &ld);
                for (int g = 0; g < W / group; g++) {
                    double amax = 0;
                    for (int i = g * group; i < (g + 1) * group; i++) amax = fmax(amax, fabs(x[i]));
                    for (int i = g * group; i < (g + 1) * group; i++) {
                        double err = fabs((double)got[i] - x[i]), bound = kv_bound(dt, x[i], amax);
                        if (amax == 0) bound = 0;
                        if (!(err <= bound) && !(err - bound <= worst)) worst = err - bound;
                    }
                }
            }
            CHECK(worst == 0, "%s cache, groups of %d: a value read back off by %g more than its bound",
                  loom_kv_dtype_name(dt), group, worst);
            free(pool);
        }
}

int main(void) {
    bookkeeping();
    truncation();
    paged_kernels();
    rounding_bounds();
    return check_done();
}

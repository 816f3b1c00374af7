/* Causal attention with a KV cache, tiled with an online softmax so no [T, T] score matrix
 * exists. A task is one block of up to QB consecutive queries of one sequence and one kv head
 * with all the query heads that share it (GQA): their rows are stacked into one small matrix.
 * attend() is that task over any keys and values, contiguous or in the paged cache's blocks,
 * which latent attention (mla.c) also runs. Key chunks past the block's last position are never
 * visited; inside a chunk the causal mask and sliding window are applied per row. Attention
 * sinks (GPT-OSS) join each row's softmax at the end, as one more score with no value.
 *
 * A row's bits must not depend on which rows share its task: a prefix served from the cache,
 * a pipeline's microbatches and a speculative verify pass put the same query in other blocks
 * at other offsets, and the parallel modes and the prefix cache promise the same bits
 * (docs/DESIGN.md 4.7). A BLAS does not promise that: OpenBLAS on an Emerald Rapids Xeon sums
 * a row's products in another order when the call has another row count. So the scores and
 * the weighted sum of values are the CPU variant's gemm_ordered, which sums every element in
 * one chain over its inner dimension, and the softmax runs with the queries in columns
 * (softmax_step), elementwise across them: each row's result is a function of its own query,
 * its own keys and the chunk boundaries, which are multiples of the chunk whatever the block.
 * Keys a row may not see score -inf and add exact zeros, to its sum and to its values.
 *
 * A cache holding K and V in bf16 or 8 bits (kv_format.c) is read a chunk at a time, widened to
 * fp32 in the thread's scratch before the two products; an fp32 cache is read in place. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "kernels/kernels.h"
#include "util/alloc.h"

#define QB 16 /* queries per task */
#define KB 64 /* keys per block */

typedef struct scratch {
    float *qt;          /* the queries transposed: [qk_dim][rows padded] */
    float *s;           /* a chunk's scores, then weights: [KB][rows padded] */
    float *acc;         /* each row's weighted values: [rows][v_dim] */
    float *kw, *vw;     /* a chunk's keys and values widened from a cache's dtype: [KB][dim] */
    float *m, *l, *cor; /* each row's running max, sum and a chunk's rescaling */
    size_t cap_rows, cap_dim;
} scratch;

/* This thread's scratch for rows (padded) x dim, or NULL when it cannot be allocated (recorded:
 * kernels.h). */
static scratch *thread_scratch(size_t rows, size_t dim) {
    static _Thread_local scratch sc;
    if (rows > sc.cap_rows || dim > sc.cap_dim) {
        free(sc.qt), free(sc.s), free(sc.acc), free(sc.kw), free(sc.vw), free(sc.m), free(sc.l), free(sc.cor);
        size_t cap_rows = rows > sc.cap_rows ? rows : sc.cap_rows, cap_dim = dim > sc.cap_dim ? dim : sc.cap_dim;
        loom_err why;
        sc = (scratch){0};
        const char *what = "attention's scratch";
        if (!(sc.qt = mem_array(cap_rows * cap_dim, sizeof(float), what, &why)) ||
            !(sc.acc = mem_array(cap_rows * cap_dim, sizeof(float), what, &why)) ||
            !(sc.s = mem_array(cap_rows * KB, sizeof(float), what, &why)) ||
            !(sc.kw = mem_array(KB * cap_dim, sizeof(float), what, &why)) ||
            !(sc.vw = mem_array(KB * cap_dim, sizeof(float), what, &why)) ||
            !(sc.m = mem_array(cap_rows, sizeof(float), what, &why)) ||
            !(sc.l = mem_array(cap_rows, sizeof(float), what, &why)) ||
            !(sc.cor = mem_array(cap_rows, sizeof(float), what, &why))) {
            free(sc.qt), free(sc.s), free(sc.acc), free(sc.kw), free(sc.vw), free(sc.m), free(sc.l), free(sc.cor);
            sc = (scratch){0};
            kernel_scratch_failed(&why);
            return NULL;
        }
        sc.cap_rows = cap_rows;
        sc.cap_dim = cap_dim;
    }
    return &sc;
}

static void write_cache(kv_layer *c, const float *k, size_t ldk, const float *v, size_t ldv, int rows,
                        const int32_t *pos, const int32_t *seq) {
    for (int r = 0; r < rows; r++) {
        size_t at = kv_row(c, seq[r], pos[r]);
        kv_write(c, c->k, at, k + (size_t)r * ldk);
        kv_write(c, c->v, at, v + (size_t)r * ldv);
    }
}

/* The first query of t that sees the key at kp (reach non-decreasing): queries by position, or
 * by reach. */
static long first_seeing(const attend_task *t, int kp) {
    if (!t->reach) return (long)(kp - t->p0);
    long i = 0, n = t->rows / t->g;
    while (i < n && t->reach[i] < kp) i++;
    return i;
}

/* Row j of a chunk's scores (key at position kp, rows padded to rp) after scaling: soft-capped
 * where a row may see the key, -inf where it may not. Row r is query p0 + r / g, which sees
 * keys at or before it (or its reach) and, with a window, within the window. */
static void mask_scores(const attend_task *t, float *sj, int kp, int rp) {
    long lo = first_seeing(t, kp) * t->g, hi = t->window ? (long)(kp + t->window - t->p0) * t->g : t->rows;
    lo = lo < 0 ? 0 : lo > t->rows ? t->rows : lo;
    hi = hi < lo ? lo : hi > t->rows ? t->rows : hi;
    for (long r = 0; r < lo; r++) sj[r] = -INFINITY;
    for (long r = lo; r < hi && t->softcap; r++) sj[r] = t->softcap * tanhf(sj[r] / t->softcap);
    for (long r = hi; r < rp; r++) sj[r] = -INFINITY;
}

void attend(const attend_task *t) {
    const cpu_kernels *k = cpu();
    /* the rows padded to whole vectors, the softmax's columns: a padded row's chains change no
     * other row's bits, only the work (16 for GQA's 4 rows would be 4 times theirs on AVX2) */
    int rows = t->rows, g = t->g, dq = t->qk_dim, dv = t->v_dim, rp = (rows + k->floats - 1) / k->floats * k->floats;
    scratch *sc = thread_scratch((size_t)rp, (size_t)(dq > dv ? dq : dv));
    if (!sc) return;
    for (int r = 0; r < rp; r++) sc->m[r] = -FLT_MAX, sc->l[r] = 0;
    for (int d = 0; d < dq; d++) /* padding rows hold zeros: their scores are masked anyway */
        for (int r = 0; r < rp; r++) sc->qt[(size_t)d * rp + r] = r < rows ? t->q[(size_t)r * t->ldq + d] : 0.0f;
    memset(sc->acc, 0, (size_t)rows * dv * sizeof(float));
    int last = t->reach ? t->reach[rows / g - 1] : t->p0 + rows / g - 1, first = t->window ? t->p0 - t->window + 1 : 0;
    if (first < 0) first = 0;
    int chunk = t->cache && t->block_size < KB ? t->block_size : KB;
    for (int k0 = first - first % chunk; k0 <= last; k0 += chunk) {
        int nk = last + 1 - k0 < chunk ? last + 1 - k0 : chunk;
        const float *keys, *vals;
        size_t ldk, ldv;
        if (t->cache) { /* the chunk's rows are one block's, consecutive in the pool */
            size_t row = block_row(t->blocks, t->block_size, k0);
            keys = kv_read(t->cache, t->kpool, row, nk, t->kcol, dq, sc->kw, &ldk);
            if (t->vpool == t->kpool && t->vcol == t->kcol) vals = keys, ldv = ldk; /* a latent row's prefix */
            else vals = kv_read(t->cache, t->vpool, row, nk, t->vcol, dv, sc->vw, &ldv);
        } else {
            keys = t->k + (size_t)k0 * t->ldk, vals = t->v + (size_t)k0 * t->ldv, ldk = t->ldk, ldv = t->ldv;
        }
        /* scores with the keys in rows: s[j][r] = k_j . q_r, then scaled as a BLAS's alpha would */
        k->gemm_ordered(nk, rp, dq, keys, ldk, 1, sc->qt, (size_t)rp, sc->s, (size_t)rp, 0);
        k->scale(sc->s, t->scale, sc->s, nk * rp);
        for (int j = 0; j < nk; j++) mask_scores(t, sc->s + (size_t)j * rp, k0 + j, rp);
        k->softmax_step(sc->s, (size_t)rp, nk, rp, sc->m, sc->l, sc->cor);
        for (int r = 0; r < rows; r++)
            if (sc->cor[r] != 1.0f) k->scale(sc->acc + (size_t)r * dv, sc->cor[r], sc->acc + (size_t)r * dv, dv);
        /* acc[r] += sum over j of weight[j][r] * v_j */
        k->gemm_ordered(rows, dv, nk, sc->s, 1, (size_t)rp, vals, ldv, sc->acc, (size_t)dv, 1);
    }
    for (int r = 0; r < rows && t->sinks; r++) { /* the sink joins the softmax as one more score */
        float sink = t->sinks[r % g], mn = sink > sc->m[r] ? sink : sc->m[r];
        sc->l[r] = sc->l[r] * expf(sc->m[r] - mn) + expf(sink - mn);
        k->scale(sc->acc + (size_t)r * dv, expf(sc->m[r] - mn), sc->acc + (size_t)r * dv, dv);
    }
    for (int r = 0; r < rows; r++)
        k->scale(sc->acc + (size_t)r * dv, 1.0f / sc->l[r],
                 t->out + (size_t)(r / g) * t->ldo + (size_t)(r % g) * t->head_stride, dv);
}

/* Queries r0..r0+nq-1 of the batch (sequence sq, positions p0..), kv head kvh, with the query
 * heads that share it stacked: row i*g + j is query i, head kvh*g + j. */
static void attend_block(const attn_shape *s, const kv_layer *c, const float *q, size_t ldq, float *out, size_t ldo,
                         int r0, int nq, int kvh, int sq, int p0, const int32_t *reach) {
    static _Thread_local fbuf stacked_rows;
    int hd = s->head_dim, g = s->n_heads / s->n_kv_heads;
    float *stacked = fbuf_get(&stacked_rows, (size_t)nq * g * hd);
    if (!stacked) return;
    for (int i = 0; i < nq; i++)
        memcpy(stacked + (size_t)i * g * hd, q + (size_t)(r0 + i) * ldq + (size_t)kvh * g * hd,
               (size_t)g * hd * sizeof(float));
    size_t col = (size_t)kvh * hd;
    attend(&(attend_task){.q = stacked,
                          .ldq = hd,
                          .rows = nq * g,
                          .g = g,
                          .qk_dim = hd,
                          .v_dim = hd,
                          .p0 = p0,
                          .window = s->window,
                          .scale = s->scale,
                          .cache = c,
                          .kpool = c->k,
                          .vpool = c->v,
                          .kcol = (int)col,
                          .vcol = (int)col,
                          .out = out + (size_t)r0 * ldo + col * g,
                          .ldo = ldo,
                          .head_stride = hd,
                          .blocks = c->tables + (size_t)sq * c->table_width,
                          .block_size = c->block_size,
                          .softcap = s->softcap,
                          .sinks = s->sinks ? s->sinks + (size_t)kvh * g : NULL,
                          .reach = reach});
}

int attention_run_end(int r, int rows, const int32_t *pos, const int32_t *seq, int most) {
    int e = r + 1;
    while (e < rows && seq[e] == seq[r] && pos[e] == pos[e - 1] + 1 && e - r < most) e++;
    return e;
}

void attention(const attn_shape *s, kv_layer *cache, const float *q, size_t ldq, const float *k, size_t ldk,
               const float *v, size_t ldv, float *out, size_t ldo, int rows, const int32_t *pos, const int32_t *seq,
               const int32_t *reach) {
    write_cache(cache, k, ldk, v, ldv, rows, pos, seq);
    int n_blocks = 0;
    for (int r = 0; r < rows; r = attention_run_end(r, rows, pos, seq, QB)) n_blocks++;
    int starts[n_blocks + 1], b = 0;
    for (int r = 0; r < rows; r = attention_run_end(r, rows, pos, seq, QB)) starts[b++] = r;
    starts[n_blocks] = rows;
    int tasks = n_blocks * s->n_kv_heads;
#pragma omp parallel for schedule(dynamic, 1)
    for (int t = 0; t < tasks; t++) {
        int bl = t / s->n_kv_heads, kvh = t % s->n_kv_heads, r0 = starts[bl];
        attend_block(s, cache, q, ldq, out, ldo, r0, starts[bl + 1] - r0, kvh, seq[r0], pos[r0],
                     reach ? reach + r0 : NULL);
    }
}

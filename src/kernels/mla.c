/* Multi-head latent attention over a latent KV cache (DeepSeek-V2/V3). A token's cache row is
 * its normalised latent kv_c and its rotated k_pe, shared by every head; kv_b_proj turns kv_c
 * into each head's k_nope and v. Two forms give the same attention:
 * - expanded (runs of several queries, i.e. prefill): the sequence's cached latents times
 *   kv_b_proj give per-head K (k_nope, then the shared k_pe) and V, attended as usual;
 * - absorbed (a sequence decoding one token): W_UK, kv_b_proj's K half, is folded into the
 *   query (q_nope W_UK: one latent-sized query per head, next to q_pe), every head attends
 *   over the cache rows themselves as keys and over their kv_c as values, and W_UV, the V
 *   half, is applied to the latent result. No per-head K or V is ever made, which is what
 *   makes decoding read kv_lora + rope floats per cached token instead of heads * (K + V).
 * Both take kv_b_proj as its f32 transpose T [kv_lora, heads * (nope + v_dim)], whose column
 * blocks are W_UK^T and W_UV^T of each head.
 *
 * A token's K, V and latent query must not depend on which rows share its pass (a cached
 * prefix, a pipeline's microbatches: attention.c says why), so no product here goes to a BLAS:
 * the expansions and W_UV are the variant's gemm_ordered, one chain per element, and W_UK, read
 * along its rows, the variant's dot product, which sums each (row, column) pair alone. */
#include <string.h>

#include "cpu/cpu.h"
#include "kernels/kernels.h"

#define QB 16 /* queries per task in the expanded form */
/* The expansion's tiles, one per thread at a time: 256 columns of T over 512 latents are
 * 512 KiB, read once for 128 positions */
#define EXPAND_COLS 256
#define EXPAND_ROWS 128

static void write_latent(kv_layer *c, const mla_shape *m, const float *kv_c, size_t ldc, const float *k_pe, size_t ldp,
                         int rows, const int32_t *pos, const int32_t *seq) {
    float row[c->kv_width];
    for (int r = 0; r < rows; r++) {
        memcpy(row, kv_c + (size_t)r * ldc, m->kv_lora * sizeof *row);
        memcpy(row + m->kv_lora, k_pe + (size_t)r * ldp, m->rope * sizeof *row);
        kv_write(c, c->k, kv_row(c, seq[r], pos[r]), row);
    }
}

/* The decoding rows idx[0..n), one query each, in the absorbed form. */
static void absorbed(const attn_shape *s, const kv_layer *c, const float *q, size_t ldq, const float *t, float *out,
                     size_t ldo, const int *idx, int n, const int32_t *pos, const int32_t *seq) {
    static _Thread_local fbuf qb, ab, lb, ob;
    const mla_shape *m = &s->mla;
    int H = s->n_heads, qk = m->nope + m->rope, lat = m->kv_lora + m->rope, kvb = m->nope + m->v_dim;
    size_t ldt = (size_t)H * kvb;
    float *qd = fbuf_get(&qb, (size_t)n * H * qk), *qa = fbuf_get(&ab, (size_t)n * H * lat);
    float *ol = fbuf_get(&lb, (size_t)n * H * m->kv_lora), *od = fbuf_get(&ob, (size_t)n * H * m->v_dim);
    if (!qd || !qa || !ol || !od) return; /* recorded (kernels.h) */
    const cpu_kernels *k = cpu();
    for (int i = 0; i < n; i++) memcpy(qd + (size_t)i * H * qk, q + (size_t)idx[i] * ldq, (size_t)H * qk * sizeof *qd);
#pragma omp parallel for schedule(static)
    for (int hl = 0; hl < H * m->kv_lora; hl++) { /* each head's query over the latent: [q_nope W_UK | q_pe] */
        int h = hl / m->kv_lora, l = hl % m->kv_lora;
        for (int i = 0; i < n; i += 2) {
            int nr = i + 1 < n ? 2 : 1;
            const float *xr[2] = {qd + ((size_t)i * H + h) * qk, qd + ((size_t)(i + nr - 1) * H + h) * qk};
            float y[2];
            k->dot_f32(xr, nr, t + (size_t)l * ldt + (size_t)h * kvb, m->nope, y);
            for (int j = 0; j < nr; j++) qa[((size_t)(i + j) * H + h) * lat + l] = y[j];
        }
    }
    for (int i = 0; i < n; i++)
        for (int h = 0; h < H; h++)
            memcpy(qa + ((size_t)i * H + h) * lat + m->kv_lora, qd + ((size_t)i * H + h) * qk + m->nope,
                   m->rope * sizeof *qa);
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < n; i++) { /* the heads stacked over one key matrix: the cache itself */
        attend(&(attend_task){.q = qa + (size_t)i * H * lat,
                              .ldq = lat,
                              .rows = H,
                              .g = H,
                              .qk_dim = lat,
                              .v_dim = m->kv_lora,
                              .p0 = pos[idx[i]],
                              .scale = s->scale,
                              .cache = c,
                              .kpool = c->k,
                              .vpool = c->k,
                              .out = ol + (size_t)i * H * m->kv_lora,
                              .ldo = (size_t)H * m->kv_lora,
                              .head_stride = m->kv_lora,
                              .blocks = c->tables + (size_t)seq[idx[i]] * c->table_width,
                              .block_size = c->block_size});
    }
#pragma omp parallel for schedule(static)
    for (int h = 0; h < H; h++) /* the latent outputs through W_UV */
        k->gemm_ordered(n, m->v_dim, m->kv_lora, ol + (size_t)h * m->kv_lora, (size_t)H * m->kv_lora, 1,
                        t + (size_t)h * kvb + m->nope, ldt, od + (size_t)h * m->v_dim, (size_t)H * m->v_dim, 0);
    for (int i = 0; i < n; i++)
        memcpy(out + (size_t)idx[i] * ldo, od + (size_t)i * H * m->v_dim, (size_t)H * m->v_dim * sizeof *out);
}

/* Rows r0..r0+n-1, one sequence at positions p0.., in the expanded form. */
static void expanded(const attn_shape *s, const kv_layer *c, const float *q, size_t ldq, const float *t, float *out,
                     size_t ldo, int r0, int n, int sq, int p0) {
    static _Thread_local fbuf vb, kb, lb;
    const mla_shape *m = &s->mla;
    int H = s->n_heads, qk = m->nope + m->rope, kvb = m->nope + m->v_dim, ctx = p0 + n;
    float *kv = fbuf_get(&vb, (size_t)ctx * H * kvb), *k = fbuf_get(&kb, (size_t)ctx * H * qk);
    float *lat = fbuf_get(&lb, (size_t)ctx * c->kv_width);
    if (!kv || !k || !lat) return;  /* recorded (kernels.h) */
    for (int p = 0; p < ctx; p++) { /* the sequence's cache rows, gathered from their blocks as fp32 */
        float *at = lat + (size_t)p * c->kv_width;
        size_t ld;
        const float *row = kv_read(c, c->k, kv_row(c, sq, p), 1, 0, c->kv_width, at, &ld);
        if (row != at) memcpy(at, row, c->kv_width * sizeof *lat);
    }
    const cpu_kernels *kern = cpu();
    int cols = H * kvb, col_tiles = (cols + EXPAND_COLS - 1) / EXPAND_COLS,
        row_tiles = (ctx + EXPAND_ROWS - 1) / EXPAND_ROWS;
#pragma omp parallel for schedule(dynamic, 1)
    for (int tile = 0; tile < col_tiles * row_tiles; tile++) { /* kv = lat T, tile by tile */
        int c0 = tile / row_tiles * EXPAND_COLS, pt = tile % row_tiles * EXPAND_ROWS;
        int nc = cols - c0 < EXPAND_COLS ? cols - c0 : EXPAND_COLS,
            np = ctx - pt < EXPAND_ROWS ? ctx - pt : EXPAND_ROWS;
        kern->gemm_ordered(np, nc, m->kv_lora, lat + (size_t)pt * c->kv_width, c->kv_width, 1, t + c0, (size_t)cols,
                           kv + (size_t)pt * cols + c0, (size_t)cols, 0);
    }
    for (int p = 0; p < ctx; p++) /* each head's key: its k_nope, then the shared k_pe */
        for (int h = 0; h < H; h++) {
            float *kh = k + ((size_t)p * H + h) * qk;
            memcpy(kh, kv + ((size_t)p * H + h) * kvb, m->nope * sizeof *k);
            memcpy(kh + m->nope, lat + (size_t)p * c->kv_width + m->kv_lora, m->rope * sizeof *k);
        }
    int blocks = (n + QB - 1) / QB;
#pragma omp parallel for schedule(dynamic, 1)
    for (int task = 0; task < blocks * H; task++) {
        int b = task / H, h = task % H, i0 = b * QB, nq = n - i0 < QB ? n - i0 : QB;
        attend(&(attend_task){.q = q + (size_t)(r0 + i0) * ldq + (size_t)h * qk,
                              .ldq = ldq,
                              .rows = nq,
                              .g = 1,
                              .qk_dim = qk,
                              .v_dim = m->v_dim,
                              .p0 = p0 + i0,
                              .scale = s->scale,
                              .k = k + (size_t)h * qk,
                              .v = kv + (size_t)h * kvb + m->nope,
                              .ldk = (size_t)H * qk,
                              .ldv = (size_t)H * kvb,
                              .out = out + (size_t)(r0 + i0) * ldo + (size_t)h * m->v_dim,
                              .ldo = ldo});
    }
}

void mla_attention(const attn_shape *s, kv_layer *cache, const float *q, size_t ldq, const float *kv_c, size_t ldc,
                   const float *k_pe, size_t ldp, const float *kv_b_t, float *out, size_t ldo, int rows,
                   const int32_t *pos, const int32_t *seq) {
    if (rows <= 0) return;
    write_latent(cache, &s->mla, kv_c, ldc, k_pe, ldp, rows, pos, seq);
    int decoding[rows], n = 0;
    for (int r = 0, e; r < rows; r = e) {
        e = attention_run_end(r, rows, pos, seq, rows);
        if (e - r == 1) decoding[n++] = r;
        else expanded(s, cache, q, ldq, kv_b_t, out, ldo, r, e - r, seq[r], pos[r]);
    }
    if (n) absorbed(s, cache, q, ldq, kv_b_t, out, ldo, decoding, n, pos, seq);
}

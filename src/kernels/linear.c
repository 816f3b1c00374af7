/* Linear layers y = x W^T, in the precision the matrix's `act` asks (tensor/tensor.h).
 *
 * Exact (fp32 activations): many rows (prefill) are compute bound: f32 weights go straight to
 * the GEMM (gemm.c); bf16 and quantized weights are widened (dequantized) panel by panel into
 * a scratch buffer for it, the conversion amortised over the rows. Few rows (decode) are memory
 * bound: a fused kernel streams each weight row once, widening in registers, so bf16 moves
 * half the bytes of f32 and 4-bit weights an eighth.
 *
 * Reduced: bf16 weights take input rows rounded to bf16, through oneDNN's bf16 GEMM for many
 * rows and the variant's bf16 dot product for few. Quantized weights take input rows quantized
 * to int8 per QACT columns, through the variant's int8 tile (eight weight rows a call) or, where
 * it has none, its one-row integer dot product (linear_q8_rows says how each pass reads W).
 * Both quantize each row on its own, so a row's result never depends on which rows share its
 * pass or its rank. FP8 weights (integer-free codes) compute exactly by default; with FP8
 * activations (vLLM's W8A8) each row is rounded to E4M3 with the checkpoint's static scale or
 * its own dynamic one, and the exact product runs on those values (linear_fp8).
 *
 * A quantized matrix's columns may be in a packed order (quant/quant.h); the input is then
 * gathered into that order first. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "kernels/kernels.h"
#include "tensor/fp8.h"
#include "tensor/gguf_blocks.h"
#include "tensor/half.h"
#include "tensor/tensor.h"
#include "util/alloc.h"

/* Up to this many rows use the streaming kernel. A decode step of 16 sequences on the 1B shape
 * (Zen 2, AVX2): bf16 weights 543 ms streamed against 636 ms widened into panels for the GEMM,
 * f32 weights level (612 against 600 ms); the server's steps are that size. */
#define FEW_ROWS 16
/* f32 bytes of bf16 weights widened per sgemm call: wide enough that each call is a large GEMM
 * for OpenBLAS (256 rows of 2048 columns measured slower at 512 tokens), small enough to stay
 * a modest scratch for any width */
#define PANEL_BYTES ((size_t)8 << 20)

/* The columns a row of w's kernels reads: its packed columns when quantized. */
static int kernel_cols(const wmat *w) { return w->q ? w->q->kp : w->cols; }

/* x's m rows in w's packed column order (zero where a packed column is padding), or x itself
 * when w's columns are in input order; NULL when its scratch cannot be had (kernels.h). */
static const float *packed_input(const float *x, size_t *ldx, int m, const wmat *w) {
    static _Thread_local fbuf gathered;
    if (!w->q || !w->q->col_of) return x;
    int kp = w->q->kp;
    float *g = fbuf_get(&gathered, (size_t)m * kp);
    if (!g) return NULL;
    const int32_t *col_of = w->q->col_of;
    for (int r = 0; r < m; r++)
        for (int p = 0; p < kp; p++) g[(size_t)r * kp + p] = col_of[p] >= 0 ? x[(size_t)r * *ldx + col_of[p]] : 0.0f;
    *ldx = kp;
    return g;
}

/* Each weight row is read once for a pair of input rows (the last may be alone). */
static void linear_few(const float *x, size_t ldx, int m, const wmat *w, float *y, size_t ldy) {
    const cpu_kernels *k = cpu();
    if (!(x = packed_input(x, &ldx, m, w))) return;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < w->rows; n++)
        for (int r = 0; r < m; r += 2) {
            int nr = r + 1 < m ? 2 : 1;
            const float *xr[2] = {x + (size_t)r * ldx, x + (size_t)(r + nr - 1) * ldx};
            float acc[2];
            if (w->q) k->dot_q(xr, nr, (const uint8_t *)w->data + (size_t)n * w->ld, w->q, (size_t)n, acc);
            else if (w->dt == DT_F32) k->dot_f32(xr, nr, (const float *)w->data + (size_t)n * w->ld, w->cols, acc);
            else k->dot_bf16(xr, nr, (const uint16_t *)w->data + (size_t)n * w->ld, w->cols, acc);
            for (int i = 0; i < nr; i++) y[(size_t)(r + i) * ldy + n] = acc[i];
        }
}

/* Weight row n widened to f32 into dst[kernel_cols(w)]. */
static void widen_row(const cpu_kernels *k, const wmat *w, int n, float *dst) {
    if (w->q) k->dequant_q((const uint8_t *)w->data + (size_t)n * w->ld, w->q, (size_t)n, dst);
    else k->widen_bf16((const uint16_t *)w->data + (size_t)n * w->ld, dst, w->cols);
}

/* Rows in chunks of `chunk`, each its own sgemm (see linear_chunked); a panel of bf16 or
 * quantized weights is widened once for all of them. */
static void linear_panels(const float *x, size_t ldx, int m, int chunk, const wmat *w, float *y, size_t ldy) {
    static _Thread_local fbuf panel;
    int cols = kernel_cols(w);
    int rows = (int)(PANEL_BYTES / sizeof(float) / (size_t)cols);
    if (rows < 16) rows = 16;
    float *pn = fbuf_get(&panel, (size_t)rows * cols);
    if (!pn || !(x = packed_input(x, &ldx, m, w))) return;
    const cpu_kernels *k = cpu();
    for (int n0 = 0; n0 < w->rows; n0 += rows) {
        int nb = w->rows - n0 < rows ? w->rows - n0 : rows;
#pragma omp parallel for schedule(static)
        for (int r = 0; r < nb; r++) widen_row(k, w, n0 + r, pn + (size_t)r * cols);
        for (int r0 = 0; r0 < m; r0 += chunk)
            gemm_f32(m - r0 < chunk ? m - r0 : chunk, nb, cols, x + (size_t)r0 * ldx, ldx, pn, cols,
                     y + (size_t)r0 * ldy + n0, ldy);
    }
}

/* Rows of input each kernel call takes at once (cpu.h's dot_q8 and dot_bf16x), and the weight
 * rows of a panel that meets all of them while it stays in the cache: 32 rows of 4096 4-bit
 * columns are 64 KiB. */
#define TILE_ROWS  4
#define PANEL_ROWS 32

/* Row x of n columns (a multiple of QACT) as an int8 row (kernels.h): codes q with one scale
 * per QACT columns, d = max|x| / 127 and q = x / d rounded to nearest even, so |q| <= 127 and
 * q d is within d / 2 of x. A block holding a NaN or an infinity gets codes 0 and a scale that
 * is not finite, so the products it enters are NaN, as an exact product would be. */
static void quantize_row(const float *x, int n, float *row) {
    const float round = 12582912.0f; /* 1.5 * 2^23: adding and subtracting it rounds to nearest even */
    int8_t *q = (int8_t *)row;
    float *d = row + n / 4;
    for (int b = 0; b * QACT < n; b++) {
        const float *xb = x + b * QACT;
        float amax = 0;
        bool finite = true;
        for (int c = 0; c < QACT; c++) {
            float a = fabsf(xb[c]);
            finite &= a <= FLT_MAX; /* false for a NaN too */
            amax = a > amax ? a : amax;
        }
        d[b] = finite ? amax / 127 : NAN;
        float inv = finite && amax > 0 ? 127 / amax : 0;
        for (int c = 0; c < QACT; c++) q[b * QACT + c] = finite ? (int8_t)((xb[c] * inv + round) - round) : 0;
    }
}

static void quantize_rows_q8(const float *x, size_t ldx, int rows, int cols, float *out, size_t ldo) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) quantize_row(x + (size_t)r * ldx, cols, out + (size_t)r * ldo);
}

/* gsum[g] = the sum of q d over group g's columns of an int8 row: each scale block's integer
 * sum times its scale. */
static void group_sums(const float *row, const qlayout *ql, float *gsum) {
    const int8_t *q = (const int8_t *)row;
    const float *d = row + ql->kp / 4;
    for (int g = 0, c = 0; g < ql->n_groups; g++) {
        gsum[g] = 0;
        while (c < ql->group_end[g]) { /* the group's columns in each scale block they cross */
            int b = c / QACT, end = (b + 1) * QACT < ql->group_end[g] ? (b + 1) * QACT : ql->group_end[g], sum = 0;
            for (; c < end; c++) sum += q[c];
            gsum[g] += (float)sum * d[b];
        }
    }
}

/* xr[0..nr) = the int8 rows r.. of xq as the kernels take them (cpu.h's q8row) */
static void q8rows_at(const float *xq, size_t ldq, int r, int nr, const qlayout *ql, const float *sums, q8row *xr) {
    for (int i = 0; i < nr; i++) {
        const float *row = xq + (size_t)(r + i) * ldq;
        xr[i] = (q8row){(const int8_t *)row, row + ql->kp / 4, sums + (size_t)(r + i) * ql->n_groups};
    }
}

/* One call of the tile: input rows r.. (nr of them, xr) against weight rows n[0..8), where
 * n[j] < 0 is no row: the tile reads row n[0] there and stores nothing. */
static void tile_call(const cpu_kernels *k, const q8row *xr, int r, int nr, const wmat *w, const int n[8], float *y,
                      size_t ldy) {
    const qlayout *ql = w->q;
    const uint8_t *wr[8];
    const float *szr[8];
    float out[8 * 8];
    for (int j = 0; j < 8; j++) {
        int nj = n[j] >= 0 ? n[j] : n[0];
        wr[j] = (const uint8_t *)w->data + (size_t)nj * w->ld;
        szr[j] = ql->sz + (size_t)nj * ql->n_groups * 2;
    }
    k->tile_q8(xr, nr, wr, ql, szr, out);
    for (int i = 0; i < nr; i++)
        for (int j = 0; j < 8; j++)
            if (n[j] >= 0) y[(size_t)(r + i) * ldy + n[j]] = out[i * 8 + j];
}

/* Input rows [r0, r1) against weight rows [n0, n1) through the tile (eight weight rows a call)
 * or dot_q8 (one), in panels of weight rows that meet every input row while they stay in the
 * cache. */
static void panels_q8(const float *xq, size_t ldq, int r0, int r1, int n0, int n1, const wmat *w, const float *sums,
                      float *y, size_t ldy) {
    const cpu_kernels *k = cpu();
    const qlayout *ql = w->q;
    const int tile = k->tile_q8 ? 8 : TILE_ROWS; /* input rows per call */
    int panels = (n1 - n0 + PANEL_ROWS - 1) / PANEL_ROWS;
#pragma omp parallel for schedule(static)
    for (int p = 0; p < panels; p++) {
        int p0 = n0 + p * PANEL_ROWS, p1 = p0 + PANEL_ROWS < n1 ? p0 + PANEL_ROWS : n1;
        for (int r = r0; r < r1; r += tile) {
            q8row xr[8];
            int nr = r1 - r < tile ? r1 - r : tile;
            q8rows_at(xq, ldq, r, nr, ql, sums, xr);
            if (k->tile_q8)
                for (int j0 = p0; j0 < p1; j0 += 8) {
                    int n[8];
                    for (int j = 0; j < 8; j++) n[j] = j0 + j < p1 ? j0 + j : -1;
                    tile_call(k, xr, r, nr, w, n, y, ldy);
                }
            else
                for (int n = p0; n < p1; n++) {
                    float acc[TILE_ROWS];
                    k->dot_q8(xr, nr, (const uint8_t *)w->data + (size_t)n * w->ld, ql,
                              ql->sz + (size_t)n * ql->n_groups * 2, acc);
                    for (int i = 0; i < nr; i++) y[(size_t)(r + i) * ldy + n] = acc[i];
                }
        }
    }
}

/* The first mp input rows against the first wp weight rows through the variant's panel
 * (cpu.h's panel_q8: AMX), PANEL_Q8_W weight rows a thread's task. */
static void panels_amx(const float *xq, size_t ldq, int mp, int wp, const wmat *w, const float *sums, float *y,
                       size_t ldy) {
    static _Thread_local fbuf rows_buf;
    const qlayout *ql = w->q;
    q8row *xr = (q8row *)fbuf_get(&rows_buf, (size_t)mp * sizeof *xr / sizeof(float) + 1);
    if (!xr) return;
    q8rows_at(xq, ldq, 0, mp, ql, sums, xr);
#pragma omp parallel for schedule(static)
    for (int n0 = 0; n0 < wp; n0 += PANEL_Q8_W) {
        static _Thread_local fbuf pack_buf; /* each thread's own */
        uint8_t *pack = (uint8_t *)fbuf_get(&pack_buf, PANEL_Q8_PACK(ql) / sizeof(float));
        if (!pack) continue;
        cpu()->panel_q8(xr, ldq * sizeof(float), mp, (const uint8_t *)w->data + (size_t)n0 * w->ld, w->ld, ql,
                        ql->sz + (size_t)n0 * ql->n_groups * 2, pack, y + n0, ldy);
    }
}

/* Row r of the int8 rows xq (ldq floats apart, kp columns) as the GGUF kernels take it: each
 * `width`-column sub-block's activation codes added (into isum when given), times its block's
 * scale (one rounding) into gsum. */
static q8row gguf_row(const float *xq, size_t ldq, int r, int kp, int width, float *gsum, int32_t *isum) {
    const int8_t *q = (const int8_t *)(xq + (size_t)r * ldq);
    const float *d = xq + (size_t)r * ldq + kp / 4;
    for (int u = 0; u < kp / width; u++) {
        int sum = 0;
        for (int c = u * width; c < (u + 1) * width; c++) sum += q[c];
        if (isum) isum[u] = sum;
        gsum[u] = (float)sum * d[u * width / QACT];
    }
    return (q8row){q, d, gsum};
}

/* A GGUF prefill of m int8 rows through the variant's panel (cpu.h's panel_gguf_q8: every variant
 * but generic has one), a thread's task PANEL_Q8_W weight rows against every input row. */
static void panels_gguf(const float *xq, size_t ldq, int m, const wmat *w, float *y, size_t ldy) {
    static _Thread_local fbuf rows_buf, sums_buf, isums_buf;
    const qlayout *ql = w->q;
    const int kp = ql->kp, width = gtype_split(ql->gtype), nsub = kp / width;
    q8row *xr = (q8row *)fbuf_get(&rows_buf, (size_t)m * sizeof *xr / sizeof(float) + 1);
    float *sums = fbuf_get(&sums_buf, (size_t)m * nsub);
    int32_t *isums = (int32_t *)fbuf_get(&isums_buf, (size_t)m * nsub);
    if (!xr || !sums || !isums) return;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < m; r++)
        xr[r] = gguf_row(xq, ldq, r, kp, width, sums + (size_t)r * nsub, isums + (size_t)r * nsub);
    int panels = (w->rows + PANEL_Q8_W - 1) / PANEL_Q8_W;
#pragma omp parallel for schedule(static)
    for (int p = 0; p < panels; p++) {
        static _Thread_local fbuf pack_buf; /* each thread's own */
        uint8_t *pack = (uint8_t *)fbuf_get(&pack_buf, PANEL_GGUF_PACK(kp) / sizeof(float) + 1);
        if (!pack) continue;
        int n0 = p * PANEL_Q8_W, nw = w->rows - n0 < PANEL_Q8_W ? w->rows - n0 : PANEL_Q8_W;
        cpu()->panel_gguf_q8(xr, ldq * sizeof(float), isums, m, (const uint8_t *)w->data + (size_t)n0 * w->ld, w->ld,
                             nw, ql, pack, y + n0, ldy);
    }
}

/* y = xq W^T for GGUF blocks on m int8 rows (ldq floats apart). A short pass (decode) streams
 * each weight row once through the variant's dot_gguf_q8, up to GGUF_Q8_ROWS input rows a call, one thread's
 * rows one sequential stream; its order is the same for any rows, so a row's bits never depend
 * on the pass. A long one (prefill) takes the variant's panel where it has one (its own order,
 * again the same for any rows), else (generic) computes exactly on the values the int8
 * rows stand for (q d) through the panels of decoded blocks: decode and prefill then differ
 * only in the order of their fp32 sums, as FP8's do (linear_fp8x). */
static void linear_gguf_q8_rows(const float *xq, size_t ldq, int m, int pass_rows, const wmat *w, float *y,
                                size_t ldy) {
    static _Thread_local fbuf buf;
    int kp = w->q->kp;
    if ((pass_rows > FEW_ROWS || m > FEW_ROWS) && cpu()->panel_gguf_q8) {
        panels_gguf(xq, ldq, m, w, y, ldy);
        return;
    }
    if (pass_rows > FEW_ROWS || m > FEW_ROWS) { /* no panel: exact on the rows' values */
        float *xv = fbuf_get(&buf, (size_t)m * kp);
        if (!xv) return;
#pragma omp parallel for schedule(static)
        for (int r = 0; r < m; r++) {
            const int8_t *q = (const int8_t *)(xq + (size_t)r * ldq);
            const float *d = xq + (size_t)r * ldq + kp / 4;
            for (int c = 0; c < kp; c++) xv[(size_t)r * kp + c] = (float)q[c] * d[c / QACT];
        }
        wmat exact = *w;
        exact.act = WACT_F32;
        linear_panels(xv, kp, m, m, &exact, y, ldy);
        return;
    }
    float *sums = fbuf_get(&buf, (size_t)m * kp / QACT); /* each block's q d, for the mins */
    if (!sums) return;
    q8row xr[FEW_ROWS];
    for (int r = 0; r < m; r++) xr[r] = gguf_row(xq, ldq, r, kp, QACT, sums + (size_t)r * kp / QACT, NULL);
    const cpu_kernels *k = cpu();
#pragma omp parallel for schedule(static)
    for (int n = 0; n < w->rows; n++)
        for (int r = 0; r < m; r += GGUF_Q8_ROWS) {
            float acc[GGUF_Q8_ROWS];
            int nr = m - r < GGUF_Q8_ROWS ? m - r : GGUF_Q8_ROWS;
            k->dot_gguf_q8(xr + r, nr, (const uint8_t *)w->data + (size_t)n * w->ld, w->q, acc);
            for (int i = 0; i < nr; i++) y[(size_t)(r + i) * ldy + n] = acc[i];
        }
}

/* y = xq W^T for a quantized W on m int8 rows (in W's packed column order, ldq floats apart),
 * of a product of pass_rows rows. With the variant's tile, a long product (prefill) takes
 * panels of weight rows that meet every input row while they stay in the cache (with AMX, its
 * panel takes the whole rows and weight rows it can, the tile the rest). A short one (decode)
 * is bound by memory, and reads the matrix once: a tile's eight rows are then an eighth of the
 * matrix apart, eight sequential streams. Eight adjacent rows interleave within a few pages,
 * which the prefetchers do not follow: Zen 4, one core, 128 MiB of 1 KiB rows, 16-byte loads:
 * 7.9 GB/s interleaved, 20.1 as far streams, 24.5 as one stream. Without a tile, dot_q8 streams
 * each weight row alone; it sums in the tile's order, so all give the same bits (cpu.h). */
static void linear_q8_rows(const float *xq, size_t ldq, int m, int pass_rows, const wmat *w, float *y, size_t ldy) {
    static _Thread_local fbuf sums_buf;
    const qlayout *ql = w->q;
    if (ql->code == QCODE_GGUF) {
        linear_gguf_q8_rows(xq, ldq, m, pass_rows, w, y, ldy);
        return;
    }
    float *sums = fbuf_get(&sums_buf, (size_t)m * ql->n_groups);
    if (!sums) return;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < m; r++) group_sums(xq + (size_t)r * ldq, ql, sums + (size_t)r * ql->n_groups);
    const cpu_kernels *k = cpu();
    if (k->tile_q8 && pass_rows <= FEW_ROWS && m <= FEW_ROWS) { /* a call's rows are some of its pass's */
        q8row xr[FEW_ROWS];
        q8rows_at(xq, ldq, 0, m, ql, sums, xr);
        int run = (w->rows + 7) / 8;
#pragma omp parallel for schedule(static)
        for (int i = 0; i < run; i++) {
            int n[8];
            for (int j = 0; j < 8; j++) n[j] = j * run + i < w->rows ? j * run + i : -1;
            for (int r = 0; r < m; r += 8) tile_call(k, xr + r, r, m - r < 8 ? m - r : 8, w, n, y, ldy);
        }
        return;
    }
    int mp = k->panel_q8 ? m / PANEL_Q8_ROWS * PANEL_Q8_ROWS : 0, wp = mp ? w->rows / PANEL_Q8_W * PANEL_Q8_W : 0;
    if (wp) panels_amx(xq, ldq, mp, wp, w, sums, y, ldy);
    else mp = 0;
    panels_q8(xq, ldq, mp, m, 0, w->rows, w, sums, y, ldy);
    if (wp < w->rows) panels_q8(xq, ldq, 0, mp, wp, w->rows, w, sums, y, ldy);
}

/* y = x W^T for a quantized W on int8 activations, x quantized here. */
static void linear_q8(const float *x, size_t ldx, int m, int pass_rows, const wmat *w, float *y, size_t ldy) {
    static _Thread_local fbuf rows_buf;
    int kp = w->q->kp;
    if (!(x = packed_input(x, &ldx, m, w))) return;
    float *xq = fbuf_get(&rows_buf, (size_t)m * q8row_floats(kp));
    if (!xq) return;
    quantize_rows_q8(x, ldx, m, kp, xq, q8row_floats(kp));
    linear_q8_rows(xq, q8row_floats(kp), m, pass_rows, w, y, ldy);
}

/* x's m rows of `cols` columns rounded to bf16 (nearest even) into buf, cols apart; NULL when
 * the scratch cannot be had (kernels.h). */
static uint16_t *bf16_rows(fbuf *buf, const float *x, size_t ldx, int m, int cols) {
    uint16_t *xb = (uint16_t *)fbuf_get(buf, ((size_t)m * cols + 1) / 2);
    if (!xb) return NULL;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < m; r++)
        for (int c = 0; c < cols; c++) xb[(size_t)r * cols + c] = f32_to_bf16(x[(size_t)r * ldx + c]);
    return xb;
}

/* y = xb W^T for m rows of bf16 activations (stride kx) against bf16 weights (dot_bf16x) or FP8
 * codes in W's packed column order (dot_fp8x): panels of weight rows that meet every input row
 * while they stay in the cache, four input rows a call. */
static void bf16_rows_product(const uint16_t *xb, int kx, int m, const wmat *w, float *y, size_t ldy) {
    const cpu_kernels *k = cpu();
    const qlayout *q = w->q;
#pragma omp parallel for schedule(static)
    for (int p = 0; p < (w->rows + PANEL_ROWS - 1) / PANEL_ROWS; p++) {
        int n1 = (p + 1) * PANEL_ROWS < w->rows ? (p + 1) * PANEL_ROWS : w->rows;
        for (int r = 0; r < m; r += TILE_ROWS) {
            int nr = m - r < TILE_ROWS ? m - r : TILE_ROWS;
            const uint16_t *xr[TILE_ROWS];
            for (int i = 0; i < nr; i++) xr[i] = xb + (size_t)(r + i) * kx;
            /* bf16 weights: two rows a call where three or more input rows make the loads bind
             * (one or two input rows stream each weight row alone faster: measured on Zen 4) */
            for (int n = p * PANEL_ROWS, pair = !q && nr >= 3; n < n1; n += 1 + pair) {
                int nw = pair && n + 1 < n1 ? 2 : 1;
                float acc[2][TILE_ROWS];
                if (q) {
                    k->dot_fp8x(xr, nr, (const uint8_t *)w->data + (size_t)n * w->ld, q,
                                q->sz + (size_t)n * q->n_groups * 2, acc[0]);
                } else {
                    const uint16_t *wd = w->data, *wr[2] = {wd + (size_t)n * w->ld, wd + (size_t)(n + nw - 1) * w->ld};
                    k->dot_bf16x(xr, nr, wr, nw, kx, acc);
                }
                for (int j = 0; j < nw; j++)
                    for (int i = 0; i < nr; i++) y[(size_t)(r + i) * ldy + n + j] = acc[j][i];
            }
        }
    }
}

/* y = x W^T for a bf16 W on bf16 activations: the GEMM per chunk of rows for a long pass, the
 * dot product for a short one (or where the GEMM cannot run). */
static void linear_bf16x(const float *x, size_t ldx, int m, int chunk, int pass_rows, const wmat *w, float *y,
                         size_t ldy) {
    static _Thread_local fbuf rounded;
    int cols = w->cols;
    uint16_t *xb = bf16_rows(&rounded, x, ldx, m, cols);
    if (!xb) return;
    const uint16_t *wd = w->data;
    bool by_gemm = pass_rows > FEW_ROWS; /* until a chunk's GEMM cannot run: then all by the dot product */
    for (int r0 = 0; by_gemm && r0 < m; r0 += chunk)
        by_gemm = gemm_bf16(m - r0 < chunk ? m - r0 : chunk, w->rows, cols, xb + (size_t)r0 * cols, wd, w->ld,
                            y + (size_t)r0 * ldy, ldy);
    if (!by_gemm) bf16_rows_product(xb, cols, m, w, y, ldy);
}

/* Row x of n columns as FP8 (E4M3) activations the way vLLM quantizes them, written as the
 * values they stand for into out: a static scale s (w's in_scale) or a dynamic one per row,
 * s = max(amax / 448, 1 / (448 * 512)), each code fp8(x * (1/s)) kept unscaled, s returned to
 * multiply the row's sums by; or dynamic per group of `group` columns (vLLM's per-token-group
 * quantization, the fp8 method's), s_g = max(amax_g, 1e-10) / 448 and the code fp8(x / s_g),
 * kept scaled (fp8 * s_g, one fp32 rounding), 1 returned. A non-finite input gives NaN. */
static float fp8_row(const float *x, int n, float in_scale, int group, float *out) {
    if (group) {
        for (int g0 = 0; g0 < n; g0 += group) {
            int k = n - g0 < group ? n - g0 : group;
            float amax = 1e-10f;
            for (int c = 0; c < k; c++) amax = fmaxf(amax, fabsf(x[g0 + c]));
            float s = amax / FP8_E4M3_MAX;
            for (int c = 0; c < k; c++) out[g0 + c] = fp8_to_f32(f32_to_e4m3(x[g0 + c] / s), QCODE_E4M3) * s;
        }
        return 1;
    }
    float s = in_scale;
    if (!(s > 0)) {
        float amax = 0;
        for (int c = 0; c < n; c++) amax = fmaxf(amax, fabsf(x[c]));
        s = fmaxf(amax / FP8_E4M3_MAX, 1.0f / (FP8_E4M3_MAX * 512));
    }
    float inv = 1 / s;
    for (int c = 0; c < n; c++) out[c] = fp8_to_f32(f32_to_e4m3(x[c] * inv), QCODE_E4M3);
    return s;
}

/* y = x W^T for FP8 W on FP8 activations (WACT_FP8): x's m rows as FP8 values, quantized here
 * from f32 rows (fp8_row), or with `codes` decoded from rows of E4M3 codes that quantize_rows
 * rounded with w's static scale (the same values); then the exact product on those values,
 * Σ qx fp8(qw) sw in fp32, times each row's scale: vLLM's (Σ qx qw) sx sw, with the weight's
 * scale taken inside the sum (per block, as the exact kernels apply it). */
static void linear_fp8(const float *x, size_t ldx, bool codes, int m, int chunk, int pass_rows, const wmat *w, float *y,
                       size_t ldy) {
    static _Thread_local fbuf rows_buf;
    int cols = w->cols;
    float *xq = fbuf_get(&rows_buf, (size_t)m * (cols + 1));
    if (!xq) return;
    float *scale = xq + (size_t)m * cols;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < m; r++) {
        float *v = xq + (size_t)r * cols;
        if (codes) {
            const uint8_t *q = (const uint8_t *)(x + (size_t)r * ldx);
            for (int c = 0; c < cols; c++) v[c] = fp8_to_f32(q[c], QCODE_E4M3);
            scale[r] = w->in_scale;
        } else {
            scale[r] = fp8_row(x + (size_t)r * ldx, cols, w->in_scale, w->q->in_group, v);
        }
    }
    /* static and per-token values are E4M3 numbers, which bf16 holds exactly: the bf16 path
     * (one byte a weight at decode, linear_fp8x) computes them exactly too */
    wmat exact = *w;
    exact.act = w->q->in_group ? WACT_F32 : WACT_BF16;
    linear_chunked(xq, (size_t)cols, m, chunk, pass_rows, &exact, NULL, y, ldy);
    for (int r = 0; r < m; r++)
        if (scale[r] != 1)
            for (int n = 0; n < w->rows; n++) y[(size_t)r * ldy + n] *= scale[r];
}

void quantize_rows(rows_code code, const float *x, size_t ldx, int rows, int cols, float in_scale, float *out,
                   size_t ldo) {
    if (code == ROWS_INT8) {
        quantize_rows_q8(x, ldx, rows, cols, out, ldo);
        return;
    }
    float inv = 1 / in_scale; /* fp8_row's static rounding, kept as codes */
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        uint8_t *q = (uint8_t *)(out + (size_t)r * ldo);
        for (int c = 0; c < cols; c++) q[c] = f32_to_e4m3(x[(size_t)r * ldx + c] * inv);
    }
}

void linear_quantized_rows(rows_code code, const float *xq, size_t ldq, int m, int chunk, int pass_rows, const wmat *w,
                           const float *bias, float *y, size_t ldy) {
    if (m <= 0) return;
    if (code == ROWS_INT8) linear_q8_rows(xq, ldq, m, pass_rows, w, y, ldy);
    else linear_fp8(xq, ldq, true, m, chunk, pass_rows, w, y, ldy);
    if (bias) add_rows(y, ldy, bias, 0, y, ldy, m, w->rows);
}

/* Prefill of FP8 W with one scale a row (per tensor, per channel, or a shard within one block's
 * columns) on bf16 activations: panels of W widened to bf16 exactly, oneDNN's bf16 GEMM per
 * chunk of rows, each output column then times its row's scale (dot_fp8x's s times the sum).
 * False, y untouched, where the GEMM cannot run. */
static bool fp8_gemm(const float *x, size_t ldx, int m, int chunk, const wmat *w, float *y, size_t ldy) {
    static _Thread_local fbuf rounded, panel;
    const cpu_kernels *k = cpu();
    const qlayout *q = w->q;
    int kp = q->kp, rows = (int)(PANEL_BYTES / sizeof(uint16_t) / (size_t)kp);
    if (rows < 16) rows = 16;
    uint16_t *xb, *pn;
    if (!k->widen_fp8_bf16 || !(x = packed_input(x, &ldx, m, w)) || !(xb = bf16_rows(&rounded, x, ldx, m, kp)) ||
        !(pn = (uint16_t *)fbuf_get(&panel, ((size_t)rows * kp + 1) / 2)))
        return false;
    for (int n0 = 0; n0 < w->rows; n0 += rows) {
        int nb = w->rows - n0 < rows ? w->rows - n0 : rows;
#pragma omp parallel for schedule(static)
        for (int r = 0; r < nb; r++)
            k->widen_fp8_bf16((const uint8_t *)w->data + (size_t)(n0 + r) * w->ld, pn + (size_t)r * kp, kp,
                              q->code == QCODE_E5M2);
        for (int r0 = 0; r0 < m; r0 += chunk)
            if (!gemm_bf16(m - r0 < chunk ? m - r0 : chunk, nb, kp, xb + (size_t)r0 * kp, pn, (size_t)kp,
                           y + (size_t)r0 * ldy + n0, ldy))
                return false; /* the first call: nothing written */
#pragma omp parallel for schedule(static)
        for (int r = 0; r < m; r++)
            for (int j = 0; j < nb; j++) y[(size_t)r * ldy + n0 + j] *= q->sz[(size_t)(n0 + j) * 2];
    }
    return true;
}

/* y = x W^T for FP8 W on bf16 activations (--dtype auto, where the variant has dot_fp8x): each
 * row rounded to bf16. A short pass (decode) streams W once through dot_fp8x, a panel of weight
 * rows meeting four input rows a call, one byte a weight; a long one (prefill) goes through the
 * bf16 GEMM where each row has one scale (fp8_gemm), else the exact panels on the rounded rows,
 * so decode and prefill differ only in the order of their fp32 sums. */
static void linear_fp8x(const float *x, size_t ldx, int m, int chunk, int pass_rows, const wmat *w, float *y,
                        size_t ldy) {
    static _Thread_local fbuf rounded;
    int cols = w->cols;
    if (pass_rows > FEW_ROWS && w->q->n_groups == 1 && fp8_gemm(x, ldx, m, chunk, w, y, ldy)) return;
    if (pass_rows > FEW_ROWS) {
        float *xr = fbuf_get(&rounded, (size_t)m * cols);
        if (!xr) return;
#pragma omp parallel for schedule(static)
        for (int r = 0; r < m; r++)
            for (int c = 0; c < cols; c++) xr[(size_t)r * cols + c] = bf16_to_f32(f32_to_bf16(x[(size_t)r * ldx + c]));
        wmat exact = *w;
        exact.act = WACT_F32;
        linear_chunked(xr, (size_t)cols, m, chunk, pass_rows, &exact, NULL, y, ldy);
        return;
    }
    int kp = w->q->kp;
    uint16_t *xb;
    if (!(x = packed_input(x, &ldx, m, w)) || !(xb = bf16_rows(&rounded, x, ldx, m, kp))) return;
    bf16_rows_product(xb, kp, m, w, y, ldy);
}

void linear_chunked(const float *x, size_t ldx, int m, int chunk, int pass_rows, const wmat *w, const float *bias,
                    float *y, size_t ldy) {
    if (m <= 0) return;
    if (w->act == WACT_FP8 && w->q) linear_fp8(x, ldx, false, m, chunk, pass_rows, w, y, ldy);
    else if (w->act == WACT_BF16 && w->q && w->q->code && cpu()->dot_fp8x)
        linear_fp8x(x, ldx, m, chunk, pass_rows, w, y, ldy);
    else if (w->act == WACT_INT8 && w->q) linear_q8(x, ldx, m, pass_rows, w, y, ldy);
    else if (w->act == WACT_BF16 && w->dt == DT_BF16 && cpu()->dot_bf16x)
        linear_bf16x(x, ldx, m, chunk, pass_rows, w, y, ldy);
    else if (pass_rows <= FEW_ROWS) /* rows are independent here: chunks change nothing */
        linear_few(x, ldx, m, w, y, ldy);
    else if (w->dt == DT_F32 && !w->q)
        for (int r0 = 0; r0 < m; r0 += chunk)
            gemm_f32(m - r0 < chunk ? m - r0 : chunk, w->rows, w->cols, x + (size_t)r0 * ldx, ldx, w->data, w->ld,
                     y + (size_t)r0 * ldy, ldy);
    else linear_panels(x, ldx, m, chunk, w, y, ldy);
    if (bias) add_rows(y, ldy, bias, 0, y, ldy, m, w->rows);
}

void linear(const float *x, size_t ldx, int m, int pass_rows, const wmat *w, const float *bias, float *y, size_t ldy) {
    linear_chunked(x, ldx, m, m, pass_rows, w, bias, y, ldy);
}

/* Through the product with an identity, so every weight format comes out widened exactly as the
 * kernels widen it. */
int linear_transpose(const wmat *w, float *t) {
    wmat exact = *w;
    exact.act = WACT_F32; /* the identity's rows must not be rounded */
    int n = w->cols;
    loom_err why;
    float *eye = t ? mem_zalloc((size_t)n * n, sizeof *eye, "the identity of a transpose", &why) : NULL;
    if (!eye) {
        if (t) kernel_scratch_failed(&why);
        return -1;
    }
    for (int i = 0; i < n; i++) eye[(size_t)i * n + i] = 1;
    linear(eye, n, n, n, &exact, NULL, t, w->rows);
    free(eye);
    return 0;
}

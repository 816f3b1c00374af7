/* The f32 GEMM of every linear with many rows: y = x w^T through oneDNN's matmul, which runs
 * at 1.7x OpenBLAS's sgemm on the prefill shapes of CPUs with AVX-512 (benches/RESULTS.md,
 * "Prefill GEMM backends") and is fp32 all the same. Weights stay in loom's row-major layout
 * (oneDNN runs as fast on it as on its own blocked one). Primitives for each shape are made
 * once per calling thread and kept in a small table with their memory objects, so a steady
 * stream of passes allocates nothing; a shape oneDNN will not take falls back to sgemm.
 *
 * oneDNN's blocking, and so its summation order, depends on the leading dimensions and the
 * alignment of its operands, which differ between the modes for the same product (a fused
 * collective hands over rows in its own buffers). TP, SP and async TP must agree bit for bit,
 * so x and y pass through contiguous, aligned per-thread copies unless they already are:
 * every mode then runs the very same primitive on the same layout.
 *
 * A library's order depends on the row count too, on some of its paths: oneDNN on AVX2
 * (ONEDNN_MAX_CPU_ISA=AVX2, as on a Zen 2) changes an f32 row's bits when the call's rows leave
 * 1 to 3 over a multiple of 6, and on AMX sums a bf16 call of 1 or 2 rows in another order than
 * a long one; OpenBLAS 0.3.21's Prescott kernels (its choice on an Emerald Rapids Xeon) give a
 * row alone other bits than in a pair. A pipeline's microbatches and a cached prefix hand the
 * same row to calls of other lengths. So every call, to either library, takes exactly GEMM_TILE
 * rows, the last tile padded with zero rows (gemm_tiled): whatever the pass, a row meets one
 * shape, in a whole block of every kernel the libraries have. tests/test_row_bits.c checks it
 * under every ISA oneDNN can run on the host (.ci/run, scripts/test-gemm-paths.sh).
 *
 * gemm_bf16 is the prefill product of bf16 weights under --dtype auto: oneDNN's bf16 matmul
 * (AVX512-BF16 dot products, or AMX-BF16 tiles on CPUs that have them, which oneDNN asks
 * Linux's permission for itself) with fp32 accumulation and output.
 *
 * A build without oneDNN (LOOM_DNNL off: the aarch64 cross build, whose arm64 oneDNN package
 * cannot sit beside the amd64 one) runs every f32 GEMM on OpenBLAS and has no bf16 one; this
 * file is its one place. */
#include <cblas.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"

/* Rows of every library call: a multiple of every row block their kernels use (6 on AVX2, 16
 * and 32 on AVX-512 and AMX, OpenBLAS's unrolls), and long enough that a tile reads each weight
 * once for 192 rows. 1B shape, bf16, prefill 2048, Emerald Rapids: 234-313 tok/s in tiles of
 * 192 rows against 189-193 as one call (benches/RESULTS.md). */
#define GEMM_TILE 192

static bool packed(const void *p, size_t ld, int cols) { return ld == (size_t)cols && (uintptr_t)p % 64 == 0; }

/* One tile: y[GEMM_TILE, n] (contiguous, aligned) = x[GEMM_TILE, k] (row stride ldx; bf16 or
 * f32) times w^T. false when the backend cannot run it. */
typedef bool gemm_tile_fn(bool bf16, int n, int k, const void *x, size_t ldx, const void *w, size_t ldw, float *y);

/* y = x w^T in tiles of GEMM_TILE rows; the last tile's rows, and y's tiles unless they are
 * packed, through aligned per-thread copies. false when a tile could not run (y may then be
 * partly written: the caller computes all of it again). */
static bool gemm_tiled(gemm_tile_fn *tile, bool bf16, int m, int n, int k, const void *x, size_t ldx, const void *w,
                       size_t ldw, float *y, size_t ldy) {
    static _Thread_local fbuf xs, ys;
    size_t esize = bf16 ? sizeof(uint16_t) : sizeof(float), xrow = (size_t)k * esize;
    for (int r0 = 0; r0 < m; r0 += GEMM_TILE) {
        int rows = m - r0 < GEMM_TILE ? m - r0 : GEMM_TILE;
        const char *xt = (const char *)x + (size_t)r0 * ldx * esize;
        size_t ldt = ldx;
        float *yt = y + (size_t)r0 * ldy, *yp = rows == GEMM_TILE && packed(yt, ldy, n) ? yt : NULL;
        if (rows < GEMM_TILE) { /* the last tile: its rows, then zeros */
            char *pad = (char *)fbuf_get(&xs, (GEMM_TILE * xrow + sizeof(float) - 1) / sizeof(float));
            if (!pad) return false; /* recorded (kernels.h) */
            for (int r = 0; r < rows; r++) memcpy(pad + r * xrow, xt + (size_t)r * ldx * esize, xrow);
            memset(pad + (size_t)rows * xrow, 0, (size_t)(GEMM_TILE - rows) * xrow);
            xt = pad, ldt = (size_t)k;
        }
        if (!yp && !(yp = fbuf_get(&ys, (size_t)GEMM_TILE * n))) return false;
        if (!tile(bf16, n, k, xt, ldt, w, ldw, yp)) return false;
        if (yp != yt)
            for (int r = 0; r < rows; r++) memcpy(yt + (size_t)r * ldy, yp + (size_t)r * n, (size_t)n * sizeof *y);
    }
    return true;
}

static bool sgemm_tile(bool bf16, int n, int k, const void *x, size_t ldx, const void *w, size_t ldw, float *y) {
    (void)bf16; /* f32 only: gemm_bf16 never comes here */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, GEMM_TILE, n, k, 1.0f, x, (int)ldx, w, (int)ldw, 0.0f, y, n);
    return true;
}

#if !defined(LOOM_DNNL)
void gemm_f32(int m, int n, int k, const float *x, size_t ldx, const float *w, size_t ldw, float *y, size_t ldy) {
    gemm_tiled(sgemm_tile, false, m, n, k, x, ldx, w, ldw, y, ldy);
}
bool gemm_bf16(int m, int n, int k, const uint16_t *x, const uint16_t *w, size_t ldw, float *y, size_t ldy) {
    (void)m, (void)n, (void)k, (void)x, (void)w, (void)ldw, (void)y, (void)ldy;
    return false;
}
#else
#include <dnnl.h>
#include <pthread.h>
#include <stdlib.h>

typedef struct gemm_entry {
    bool bf16; /* the operands' type: bf16, else f32 */
    int n, k;
    size_t ldw;
    dnnl_primitive_t p;
    dnnl_memory_t x, w, y;
    unsigned used; /* the table's clock at the last use */
} gemm_entry;

#define GEMM_SHAPES 48 /* per thread: a model's linears' shapes, with room for a draft model's */

static dnnl_engine_t engine;
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;

static void engine_init(void) {
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) engine = NULL;
}

static void entry_free(gemm_entry *e) {
    if (!e->p) return;
    dnnl_primitive_destroy(e->p);
    dnnl_memory_destroy(e->x);
    dnnl_memory_destroy(e->w);
    dnnl_memory_destroy(e->y);
    memset(e, 0, sizeof *e);
}

/* The primitive and memory objects of one tile's shape (x: GEMM_TILE x k, w: n x k with row
 * stride ldw, y: GEMM_TILE x n; x and y contiguous; x and w bf16 or f32, y f32); false if
 * oneDNN has none. */
static bool entry_make(gemm_entry *e, bool bf16, int n, int k, size_t ldw) {
    dnnl_memory_desc_t xd, wd, yd;
    dnnl_dims_t xdims = {GEMM_TILE, k}, xstr = {k, 1};
    dnnl_dims_t wdims = {k, n}, wstr = {1, (dnnl_dim_t)ldw}; /* w^T: element (k, n) at n * ldw + k */
    dnnl_dims_t ydims = {GEMM_TILE, n}, ystr = {n, 1};
    dnnl_data_type_t in = bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd = NULL;
    *e = (gemm_entry){.bf16 = bf16, .n = n, .k = k, .ldw = ldw};
    bool ok = dnnl_memory_desc_init_by_strides(&xd, 2, xdims, in, xstr) == dnnl_success &&
              dnnl_memory_desc_init_by_strides(&wd, 2, wdims, in, wstr) == dnnl_success &&
              dnnl_memory_desc_init_by_strides(&yd, 2, ydims, dnnl_f32, ystr) == dnnl_success &&
              dnnl_matmul_desc_init(&md, &xd, &wd, NULL, &yd) == dnnl_success &&
              dnnl_primitive_desc_create(&pd, &md, NULL, engine, NULL) == dnnl_success &&
              dnnl_primitive_create(&e->p, pd) == dnnl_success &&
              dnnl_memory_create(&e->x, &xd, engine, DNNL_MEMORY_NONE) == dnnl_success &&
              dnnl_memory_create(&e->w, &wd, engine, DNNL_MEMORY_NONE) == dnnl_success &&
              dnnl_memory_create(&e->y, &yd, engine, DNNL_MEMORY_NONE) == dnnl_success;
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (!ok) {
        if (e->p) dnnl_primitive_destroy(e->p);
        if (e->x) dnnl_memory_destroy(e->x);
        if (e->w) dnnl_memory_destroy(e->w);
        memset(e, 0, sizeof *e);
    }
    return ok;
}

/* This thread's entry for the shape: found, or made in place of the least recently used. */
static gemm_entry *entry_for(bool bf16, int n, int k, size_t ldw) {
    static _Thread_local gemm_entry table[GEMM_SHAPES];
    static _Thread_local unsigned clock;
    gemm_entry *victim = &table[0];
    clock++;
    for (int i = 0; i < GEMM_SHAPES; i++) {
        gemm_entry *e = &table[i];
        if (e->p && e->bf16 == bf16 && e->n == n && e->k == k && e->ldw == ldw) {
            e->used = clock;
            return e;
        }
        if (!e->p || e->used < victim->used) victim = e;
    }
    entry_free(victim);
    if (!entry_make(victim, bf16, n, k, ldw)) return NULL;
    victim->used = clock;
    return victim;
}

/* One tile through oneDNN: x must be packed (ldx == k), the layout its primitive was made for. */
static bool onednn_tile(bool bf16, int n, int k, const void *x, size_t ldx, const void *w, size_t ldw, float *y) {
    static _Thread_local dnnl_stream_t stream; /* a stream serves one thread at a time */
    pthread_once(&engine_once, engine_init);
    gemm_entry *e = engine && ldx == (size_t)k ? entry_for(bf16, n, k, ldw) : NULL;
    if (e && !stream && dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success) stream = NULL;
    if (!e || !stream) return false;
    dnnl_memory_set_data_handle(e->x, (void *)x);
    dnnl_memory_set_data_handle(e->w, (void *)w);
    dnnl_memory_set_data_handle(e->y, y);
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, e->x}, {DNNL_ARG_WEIGHTS, e->w}, {DNNL_ARG_DST, e->y}};
    return dnnl_primitive_execute(e->p, stream, 3, args) == dnnl_success && dnnl_stream_wait(stream) == dnnl_success;
}

void gemm_f32(int m, int n, int k, const float *x, size_t ldx, const float *w, size_t ldw, float *y, size_t ldy) {
    static _Thread_local fbuf xs;
    const float *xp = x;
    if (!packed(x, ldx, k)) {
        float *c = fbuf_get(&xs, (size_t)m * k);
        for (int r = 0; c && r < m; r++) memcpy(c + (size_t)r * k, x + (size_t)r * ldx, (size_t)k * sizeof *c);
        xp = c;
    }
    if (!xp || !gemm_tiled(onednn_tile, false, m, n, k, xp, (size_t)k, w, ldw, y, ldy))
        gemm_tiled(sgemm_tile, false, m, n, k, x, ldx, w, ldw, y, ldy);
}

bool gemm_bf16(int m, int n, int k, const uint16_t *x, const uint16_t *w, size_t ldw, float *y, size_t ldy) {
    return packed(x, (size_t)k, k) && gemm_tiled(onednn_tile, true, m, n, k, x, (size_t)k, w, ldw, y, ldy);
}
#endif

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

#include "kernels/kernels.h"

static void sgemm(int m, int n, int k, const float *x, size_t ldx, const float *w, size_t ldw, float *y, size_t ldy) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, x, (int)ldx, w, (int)ldw, 0.0f, y, (int)ldy);
}

#if !defined(LOOM_DNNL)
void gemm_f32(int m, int n, int k, const float *x, size_t ldx, const float *w, size_t ldw, float *y, size_t ldy) {
    sgemm(m, n, k, x, ldx, w, ldw, y, ldy);
}
bool gemm_bf16(int m, int n, int k, const uint16_t *x, const uint16_t *w, size_t ldw, float *y, size_t ldy) {
    (void)m, (void)n, (void)k, (void)x, (void)w, (void)ldw, (void)y, (void)ldy;
    return false;
}
#else
#include <dnnl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct gemm_entry {
    bool bf16; /* the operands' type: bf16, else f32 */
    int m, n, k;
    size_t ldx, ldw, ldy;
    dnnl_primitive_t p;
    dnnl_memory_t x, w, y;
    unsigned used; /* the table's clock at the last use */
} gemm_entry;

#define GEMM_SHAPES 48 /* per thread: a model's linears at a few pass lengths */

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

/* The primitive and memory objects of one shape (x: m x k, w: n x k, y: m x n, row-major with
 * the given leading dimensions; x and w bf16 or f32, y f32); false if oneDNN has none. */
static bool entry_make(gemm_entry *e, bool bf16, int m, int n, int k, size_t ldx, size_t ldw, size_t ldy) {
    dnnl_memory_desc_t xd, wd, yd;
    dnnl_dims_t xdims = {m, k}, xstr = {(dnnl_dim_t)ldx, 1};
    dnnl_dims_t wdims = {k, n}, wstr = {1, (dnnl_dim_t)ldw}; /* w^T: element (k, n) at n * ldw + k */
    dnnl_dims_t ydims = {m, n}, ystr = {(dnnl_dim_t)ldy, 1};
    dnnl_data_type_t in = bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd = NULL;
    *e = (gemm_entry){.bf16 = bf16, .m = m, .n = n, .k = k, .ldx = ldx, .ldw = ldw, .ldy = ldy};
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
static gemm_entry *entry_for(bool bf16, int m, int n, int k, size_t ldx, size_t ldw, size_t ldy) {
    static _Thread_local gemm_entry table[GEMM_SHAPES];
    static _Thread_local unsigned clock;
    gemm_entry *victim = &table[0];
    clock++;
    for (int i = 0; i < GEMM_SHAPES; i++) {
        gemm_entry *e = &table[i];
        if (e->p && e->bf16 == bf16 && e->m == m && e->n == n && e->k == k && e->ldx == ldx && e->ldw == ldw &&
            e->ldy == ldy) {
            e->used = clock;
            return e;
        }
        if (!e->p || e->used < victim->used) victim = e;
    }
    entry_free(victim);
    if (!entry_make(victim, bf16, m, n, k, ldx, ldw, ldy)) return NULL;
    victim->used = clock;
    return victim;
}

static bool packed(const void *p, size_t ld, int cols) { return ld == (size_t)cols && (uintptr_t)p % 64 == 0; }

/* y = x w^T through oneDNN, x contiguous and aligned (packed); y through an aligned contiguous
 * copy unless it is one. false, nothing written, when oneDNN cannot run it. */
static bool onednn_gemm(bool bf16, int m, int n, int k, const void *x, const void *w, size_t ldw, float *y,
                        size_t ldy) {
    static _Thread_local dnnl_stream_t stream; /* a stream serves one thread at a time */
    static _Thread_local fbuf ys;
    pthread_once(&engine_once, engine_init);
    gemm_entry *e = engine ? entry_for(bf16, m, n, k, (size_t)k, ldw, (size_t)n) : NULL;
    if (e && !stream && dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success) stream = NULL;
    float *yp = packed(y, ldy, n) ? y : fbuf_get(&ys, (size_t)m * n);
    if (!e || !stream || !yp) return false; /* no scratch is recorded (kernels.h); the caller still computes */
    dnnl_memory_set_data_handle(e->x, (void *)x);
    dnnl_memory_set_data_handle(e->w, (void *)w);
    dnnl_memory_set_data_handle(e->y, yp);
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, e->x}, {DNNL_ARG_WEIGHTS, e->w}, {DNNL_ARG_DST, e->y}};
    if (dnnl_primitive_execute(e->p, stream, 3, args) != dnnl_success || dnnl_stream_wait(stream) != dnnl_success)
        return false;
    if (yp != y)
        for (int r = 0; r < m; r++) memcpy(y + (size_t)r * ldy, yp + (size_t)r * n, (size_t)n * sizeof *y);
    return true;
}

void gemm_f32(int m, int n, int k, const float *x, size_t ldx, const float *w, size_t ldw, float *y, size_t ldy) {
    static _Thread_local fbuf xs;
    const float *xp = x;
    if (!packed(x, ldx, k)) {
        float *c = fbuf_get(&xs, (size_t)m * k);
        for (int r = 0; c && r < m; r++) memcpy(c + (size_t)r * k, x + (size_t)r * ldx, (size_t)k * sizeof *c);
        xp = c;
    }
    if (!xp || !onednn_gemm(false, m, n, k, xp, w, ldw, y, ldy)) sgemm(m, n, k, x, ldx, w, ldw, y, ldy);
}

bool gemm_bf16(int m, int n, int k, const uint16_t *x, const uint16_t *w, size_t ldw, float *y, size_t ldy) {
    return packed(x, (size_t)k, k) && onednn_gemm(true, m, n, k, x, w, ldw, y, ldy);
}
#endif

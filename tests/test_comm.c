/* Collectives on every backend and several rank counts, odd sizes included: all_reduce must
 * equal the rank-ordered sum computed here, bit for bit (that order is what makes TP, SP and
 * both backends agree), so must reduce_scatter's blocks, and all_gather must place every rank's
 * columns. Also the deadline: a
 * rank that never arrives fails the collective instead of hanging it. `test_comm --mpi` is the
 * mode mpirun starts. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "mpirun.h"
#include "comm/comm.h"

#define ROWS 7
#define COLS 13

static float value(int rank, int i) { /* deterministic, rank-dependent, not exactly summable */
    uint32_t x = (uint32_t)(rank * 7919 + i) * 2654435761u;
    return (float)(x >> 8) / 16777216.0f * 2.0f - 1.0f + 1e-3f * rank;
}

/* Returns the number of mismatches; rank 0 prints them. */
static int check_collectives(loom_comm *c, void *arg) {
    (void)arg;
    loom_err err = {{0}};
    int n = c->size, bad = 0;
    float in[ROWS * COLS], out[ROWS * (COLS + 1)], want;
    for (int i = 0; i < ROWS * COLS; i++) in[i] = value(c->rank, i);
    /* strided output (ld COLS+1) to check row strides are honoured */
    for (int rep = 0; rep < 3; rep++) { /* several rounds: the shm slots alternate */
        if (comm_all_reduce(c, in, COLS, out, COLS + 1, ROWS, COLS, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
        for (int r = 0; r < ROWS; r++)
            for (int j = 0; j < COLS; j++) {
                want = value(0, r * COLS + j);
                for (int k = 1; k < n; k++) want += value(k, r * COLS + j);
                bad += memcmp(&want, &out[r * (COLS + 1) + j], sizeof want) != 0;
            }
    }
    /* gather: rank k contributes k+1 columns */
    int col0[16], w[16], total = 0;
    for (int k = 0; k < n; k++) col0[k] = total, w[k] = k + 1, total += k + 1;
    float *g = malloc(ROWS * total * sizeof *g);
    if (comm_all_gather_cols(c, in, COLS, g, total, ROWS, col0, w, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    for (int k = 0; k < n; k++)
        for (int r = 0; r < ROWS; r++)
            for (int j = 0; j < w[k]; j++) bad += g[r * total + col0[k] + j] != value(k, r * COLS + j);
    free(g);
    /* reduce-scatter: this rank's block of the rank-ordered sum of every rank's [ROWS * n, COLS] */
    float *partial = malloc((size_t)ROWS * n * COLS * sizeof *partial);
    for (int i = 0; i < ROWS * n * COLS; i++) partial[i] = value(c->rank, i);
    if (comm_reduce_scatter_rows(c, partial, COLS, out, COLS + 1, ROWS * n, COLS, &err))
        return fprintf(stderr, "%s\n", err.msg), 1;
    for (int r = 0; r < ROWS; r++)
        for (int j = 0; j < COLS; j++) {
            int i = (c->rank * ROWS + r) * COLS + j;
            want = value(0, i);
            for (int k = 1; k < n; k++) want += value(k, i);
            bad += memcmp(&want, &out[r * (COLS + 1) + j], sizeof want) != 0;
        }
    free(partial);
    if (bad) fprintf(stderr, "rank %d of %d: %d mismatches\n", c->rank, n, bad);
    return bad ? 1 : 0;
}

/* The fused ops against their unfused forms, on the same data. The "GEMM" here is a fixed
 * per-row transform that depends on the row index, so misplaced blocks or chunks show. */
typedef struct fused_ctx {
    float *out; /* gathered rows, rows * size */
    int rank;
} fused_ctx;

static void gather_cb(void *ctx, const float *x, size_t ldx, int row0, int rows) {
    fused_ctx *f = ctx;
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < COLS; j++) f->out[(size_t)(row0 + r) * COLS + j] = x[r * ldx + j] * (float)(row0 + r + 1);
}

static void partial_cb(void *ctx, int row0, int rows, float *y, size_t ldy) {
    fused_ctx *f = ctx;
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < COLS; j++) y[r * ldy + j] = value(f->rank, (row0 + r) * COLS + j);
}

/* rows per rank: ROWS runs whole, BIG_ROWS over MPI in comm_chunk_rows chunks (the last shorter) */
#define BIG_ROWS 517

static int check_fused_rows(loom_comm *c, int rows) {
    loom_err err = {{0}};
    int n = c->size, bad = 0;
    size_t block = (size_t)rows * COLS, all = block * n;
    float *shard = malloc(block * sizeof *shard), *want = malloc(all * sizeof *want), *got = malloc(all * sizeof *got);
    float *mine = malloc(block * sizeof *mine), *ref = malloc(block * sizeof *ref);
    for (int rep = 0; rep < 3; rep++) { /* alternate with plain collectives: they share the slots */
        for (size_t i = 0; i < block; i++) shard[i] = value(c->rank + 10 * rep, (int)i);
        fused_ctx f = {got, c->rank};
        if (comm_all_gather_matmul(c, shard, COLS, rows, COLS, gather_cb, &f, &err) ||
            comm_all_gather_rows(c, shard, COLS, want, COLS, rows, COLS, &err))
            return fprintf(stderr, "%s\n", err.msg), 1;
        for (int r = 0; r < rows * n; r++)
            for (int j = 0; j < COLS; j++) bad += got[r * COLS + j] != want[r * COLS + j] * (float)(r + 1);
        /* matmul_reduce_scatter of partials P_rank against the rank-ordered sum of the same */
        if (comm_matmul_reduce_scatter(c, rows, COLS, partial_cb, &f, mine, COLS, &err))
            return fprintf(stderr, "%s\n", err.msg), 1;
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < COLS; j++) {
                int i = (c->rank * rows + r) * COLS + j;
                ref[r * COLS + j] = value(0, i);
                for (int k = 1; k < n; k++) ref[r * COLS + j] += value(k, i);
            }
        bad += memcmp(mine, ref, block * sizeof *ref) != 0;
    }
    free(shard), free(want), free(got), free(mine), free(ref);
    if (bad) fprintf(stderr, "rank %d of %d, %d rows: fused ops differ from the plain ones in %d places\n", c->rank, n,
                     rows, bad);
    return bad ? 1 : 0;
}

static int check_fused(loom_comm *c, void *arg) {
    (void)arg;
    return check_fused_rows(c, ROWS) || check_fused_rows(c, BIG_ROWS);
}

static int check_all(loom_comm *c, void *arg) { return check_collectives(c, arg) || check_fused(c, arg); }

/* Rank 1 never takes part: the others must fail at the deadline, naming rank 1. */
static int one_rank_missing(loom_comm *c, void *arg) {
    (void)arg;
    if (c->rank == 1) {
        sleep(5);
        return 0;
    }
    loom_err err = {{0}};
    float x = 1, y;
    comm_set_phase(c, "the deadline test");
    int rc = comm_all_reduce(c, &x, 1, &y, 1, 1, 1, &err);
    if (rc && strstr(err.msg, "waited 1 s for rank 1")) return 3; /* the expected failure */
    fprintf(stderr, "rank %d: unexpected: rc %d, '%s'\n", c->rank, rc, err.msg);
    return 1;
}

static int launch(int tp, const char *backend, loom_rank_fn fn, double timeout) {
    loom_err err = {{0}};
    loom_launch_options o = {.tp = tp, .backend = backend, .slot_bytes = (size_t)BIG_ROWS * 5 * COLS * sizeof(float), .timeout_s = timeout, .spin = -1};
    return loom_launch(&o, fn, NULL, &err);
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--mpi")) return launch(0, "mpi", check_all, 30); /* MPI starts once */
    /* tp=1 runs in this process and starts its OpenMP pool, which a later fork would inherit
     * half-alive (as loom_launch documents): so it goes last */
    for (int tp = 2; tp <= 5; tp++) CHECK(launch(tp, "shm", check_collectives, 30) == 0, "shm tp=%d", tp);
    for (int tp = 2; tp <= 4; tp++) CHECK(launch(tp, "shm", check_fused, 30) == 0, "shm fused ops, tp=%d", tp);
    for (int tp = 2; tp <= 3 && mpi_available("test_comm"); tp++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, MPIRUN " -np %d %s --mpi", tp, LOOM_TEST_SELF);
        CHECK(system(cmd) == 0, "mpi tp=%d", tp);
    }
    CHECK(launch(3, "shm", one_rank_missing, 1) == 3, "a missing rank must fail the others at the deadline");
    CHECK(launch(1, "shm", check_collectives, 30) == 0, "tp=1");
    return check_done();
}

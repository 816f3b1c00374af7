/* Collectives on every backend and several rank counts, odd sizes included: all_reduce must
 * equal the rank-ordered sum computed here, bit for bit (that order is what makes TP, SP and
 * both backends agree), and all_gather must place every rank's columns. Also the deadline: a
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
    if (bad) fprintf(stderr, "rank %d of %d: %d mismatches\n", c->rank, n, bad);
    return bad ? 1 : 0;
}

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
    loom_launch_options o = {.tp = tp, .backend = backend, .slot_bytes = 4096, .timeout_s = timeout, .spin = -1};
    return loom_launch(&o, fn, NULL, &err);
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--mpi")) return launch(0, "mpi", check_collectives, 30);
    /* tp=1 runs in this process and starts its OpenMP pool, which a later fork would inherit
     * half-alive (as loom_launch documents): so it goes last */
    for (int tp = 2; tp <= 5; tp++) CHECK(launch(tp, "shm", check_collectives, 30) == 0, "shm tp=%d", tp);
    for (int tp = 2; tp <= 3; tp++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, MPIRUN " -np %d %s --mpi", tp, LOOM_TEST_SELF);
        CHECK(system(cmd) == 0, "mpi tp=%d", tp);
    }
    CHECK(launch(3, "shm", one_rank_missing, 1) == 3, "a missing rank must fail the others at the deadline");
    CHECK(launch(1, "shm", check_collectives, 30) == 0, "tp=1");
    return check_done();
}

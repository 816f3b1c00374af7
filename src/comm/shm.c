/* Shared-memory backend (see shm.h). An exchange copies the rank's block into its slot and
 * meets the others at a barrier; slots alternate between two sets, so a rank can start the
 * next exchange while a slow peer still reads the previous one (it cannot be two ahead: it
 * would have to pass a barrier the peer has not reached). The barrier spins briefly, then
 * sleeps on a futex: a waiter must not keep a core that its own BLAS threads need, and it
 * checks the abort flag and its deadline so a dead or stuck rank never hangs the job. */
#include "comm/shm.h"

#include <errno.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cpu/cpu.h"
#include "util/err.h"

#define MAX_RANKS 64

typedef struct rank_slot {
    char phase[96];
    _Atomic uint32_t arrived_gen; /* generation of the last barrier this rank reached */
    _Atomic uint32_t posted;      /* fused collectives: the last one whose block is in the slot */
} rank_slot;

struct shm_arena {
    int size, spin;
    size_t slot_bytes, map_bytes;
    double timeout_s;
    _Atomic uint32_t arrived, generation;
    _Atomic int abort;
    rank_slot ranks[MAX_RANKS];
    _Alignas(64) unsigned char slots[]; /* [2][size][slot_bytes] */
};

typedef struct shm_state {
    shm_arena *a;
    uint32_t exchanges; /* collectives so far, all kinds: its parity picks the slot set */
    uint32_t fused;     /* fused collectives so far: what a peer's `posted` must reach */
} shm_state;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void futex_wait(_Atomic uint32_t *addr, uint32_t val, long ns) {
    struct timespec ts = {0, ns};
    syscall(SYS_futex, addr, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *addr) { syscall(SYS_futex, addr, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0); }

shm_arena *shm_arena_create(int size, size_t slot_bytes, double timeout_s, int spin, loom_err *err) {
    if (size < 1 || size > MAX_RANKS) {
        loom_errf(err, "shm backend: %d ranks (1..%d)", size, MAX_RANKS);
        return NULL;
    }
    slot_bytes = (slot_bytes + 63) / 64 * 64;
    size_t bytes = sizeof(shm_arena) + 2 * (size_t)size * slot_bytes;
    shm_arena *a = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED) {
        loom_errf(err, "shm backend: cannot map a %zu MiB arena: %s", bytes >> 20, strerror(errno));
        return NULL;
    }
    a->size = size;
    a->spin = spin;
    a->slot_bytes = slot_bytes;
    a->map_bytes = bytes;
    a->timeout_s = timeout_s;
    for (int r = 0; r < size; r++) snprintf(a->ranks[r].phase, sizeof a->ranks[r].phase, "start-up");
    return a;
}

void shm_arena_destroy(shm_arena *a) {
    if (a) munmap(a, a->map_bytes);
}

void shm_arena_abort(shm_arena *a) {
    atomic_store(&a->abort, 1);
    futex_wake_all(&a->generation);
}

const char *shm_arena_phase(const shm_arena *a, int rank) { return a->ranks[rank].phase; }

/* Names the ranks that have not reached the barrier of generation gen. */
static void missing_ranks(const shm_arena *a, uint32_t gen, char *out, size_t cap) {
    size_t n = 0;
    out[0] = 0;
    for (int r = 0; r < a->size && n + 1 < cap; r++)
        if (atomic_load(&a->ranks[r].arrived_gen) != gen + 1)
            n += snprintf(out + n, cap - n, "%s%d ('%s')", n ? ", " : "", r, a->ranks[r].phase);
}

/* Waits until *word differs from old: spins a little, then sleeps on the futex, and gives up
 * when another rank failed or at the deadline (naming the missing ranks, or rank `peer`). */
static int wait_change(loom_comm *c, _Atomic uint32_t *word, uint32_t old, int peer, loom_err *err) {
    shm_arena *a = ((shm_state *)c->impl)->a;
    double deadline = 0;
    for (long i = 0;; i++) {
        if (atomic_load(word) != old) return 0;
        if (atomic_load(&a->abort))
            return loom_errf(err, "rank %d: stopping in '%s': another rank failed", c->rank, c->phase);
        if (i < a->spin) {
            cpu_relax();
            continue;
        }
        if (!deadline) deadline = now() + a->timeout_s;
        futex_wait(word, old, 20 * 1000 * 1000);
        if (now() > deadline && atomic_load(word) == old) {
            char who[512];
            if (peer >= 0) snprintf(who, sizeof who, "%d ('%s')", peer, a->ranks[peer].phase);
            else missing_ranks(a, old, who, sizeof who);
            shm_arena_abort(a);
            return loom_errf(err, "rank %d: '%s' waited %.0f s for rank %s", c->rank, c->phase, a->timeout_s, who);
        }
    }
}

static int shm_barrier(loom_comm *c, loom_err *err) {
    shm_arena *a = ((shm_state *)c->impl)->a;
    uint32_t gen = atomic_load(&a->generation);
    atomic_store(&a->ranks[c->rank].arrived_gen, gen + 1);
    if (atomic_fetch_add(&a->arrived, 1) == (uint32_t)a->size - 1) {
        atomic_store(&a->arrived, 0);
        atomic_fetch_add(&a->generation, 1);
        futex_wake_all(&a->generation);
        return 0;
    }
    return wait_change(c, &a->generation, gen, -1, err);
}

/* A peer's block of fused collective `seq` is in its slot once its counter reaches seq. The
 * counter may already be one further (the peer moved on and posted the next block, into the
 * other slot set), never two: it cannot pass a collective this rank has not posted. */
static int wait_posted(loom_comm *c, int peer, uint32_t seq, loom_err *err) {
    shm_arena *a = ((shm_state *)c->impl)->a;
    for (;;) {
        uint32_t v = atomic_load(&a->ranks[peer].posted);
        if ((int32_t)(v - seq) >= 0) return 0;
        if (wait_change(c, &a->ranks[peer].posted, v, peer, err)) return -1;
    }
}

static void post(shm_arena *a, int rank, uint32_t seq) {
    atomic_store(&a->ranks[rank].posted, seq);
    futex_wake_all(&a->ranks[rank].posted);
}

static float *slot_of(shm_arena *a, unsigned set, int rank) {
    return (float *)(a->slots + ((size_t)set * a->size + rank) * a->slot_bytes);
}

static int check_fits(loom_comm *c, size_t floats, loom_err *err) {
    shm_arena *a = ((shm_state *)c->impl)->a;
    if (floats * sizeof(float) <= a->slot_bytes) return 0;
    return loom_errf(err, "rank %d: '%s': a block of %zu bytes exceeds the shm slot of %zu", c->rank, c->phase,
                     floats * sizeof(float), a->slot_bytes);
}

/* Slots are reused two collectives later; each fused collective waits for every peer's block,
 * so by then every peer has finished reading (the argument of the exchange's double buffer). */
static int shm_all_gather_matmul(loom_comm *c, const float *shard, size_t lds, int rows, int cols, comm_gather_gemm f,
                                 void *ctx, loom_err *err) {
    shm_state *s = c->impl;
    shm_arena *a = s->a;
    if (check_fits(c, (size_t)rows * cols, err)) return -1;
    unsigned set = s->exchanges++ & 1;
    uint32_t seq = ++s->fused;
    float *mine = slot_of(a, set, c->rank);
    comm_pack_rows(mine, shard, lds, rows, cols);
    post(a, c->rank, seq);
    f(ctx, shard, lds, c->rank * rows, rows); /* own block first: nothing to wait for */
    for (int k = 1; k < c->size; k++) {
        int src = (c->rank + k) % c->size;
        if (wait_posted(c, src, seq, err)) return -1;
        f(ctx, slot_of(a, set, src), cols, src * rows, rows); /* read in place */
    }
    return 0;
}

static int shm_matmul_reduce_scatter(loom_comm *c, int rows, int cols, comm_partial_gemm f, void *ctx, float *out,
                                     size_t ldo, loom_err *err) {
    shm_state *s = c->impl;
    shm_arena *a = s->a;
    size_t block = (size_t)rows * cols; /* this rank's slot holds one block per destination */
    if (check_fits(c, block * c->size, err)) return -1;
    unsigned set = s->exchanges++ & 1;
    uint32_t seq = ++s->fused;
    float *mine = slot_of(a, set, c->rank);
    for (int k = 1; k <= c->size; k++) { /* the next peer's block first, the own one last */
        int dst = (c->rank + k) % c->size;
        f(ctx, dst * rows, rows, mine + dst * block, cols);
        if (k == c->size - 1) post(a, c->rank, seq); /* every peer's block is written */
    }
    if (c->size == 1) post(a, c->rank, seq);
    for (int src = 0; src < c->size; src++) {
        if (src != c->rank && wait_posted(c, src, seq, err)) return -1;
        c->blocks[src] = slot_of(a, set, src) + c->rank * block;
    }
    comm_sum_blocks(c, c->blocks, rows, cols, out, ldo);
    return 0;
}

static int shm_exchange(loom_comm *c, const float *mine, size_t ld, int rows, const int *cols, const float **blocks,
                        loom_err *err) {
    shm_state *s = c->impl;
    shm_arena *a = s->a;
    for (int r = 0; r < c->size; r++)
        if ((size_t)rows * cols[r] * sizeof(float) > a->slot_bytes)
            return loom_errf(err, "rank %d: '%s': exchange of %zu bytes exceeds the shm slot of %zu", c->rank,
                             c->phase, (size_t)rows * cols[r] * sizeof(float), a->slot_bytes);
    unsigned set = s->exchanges++ & 1;
    comm_pack_rows(slot_of(a, set, c->rank), mine, ld, rows, cols[c->rank]);
    if (shm_barrier(c, err)) return -1;
    for (int r = 0; r < c->size; r++) blocks[r] = slot_of(a, set, r);
    return 0;
}

static void shm_free(loom_comm *c) { free(c->impl); }

static const comm_backend shm_backend = {"shm", 1, shm_exchange, shm_barrier, shm_free, shm_all_gather_matmul,
                                          shm_matmul_reduce_scatter};

loom_comm *comm_shm(shm_arena *a, int rank) {
    loom_comm *c = malloc(sizeof *c);
    shm_state *s = calloc(1, sizeof *s);
    s->a = a;
    comm_init(c, rank, a->size, &shm_backend, s);
    c->phase = a->ranks[rank].phase;
    return c;
}

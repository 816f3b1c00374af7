/* Shared-memory backend (see shm.h). One arena holds every rank of the job. An exchange copies
 * the rank's block into its slot and meets the others at a barrier; slots alternate between two
 * sets, so a rank can start the next exchange while a slow peer still reads the previous one (it
 * cannot be two ahead: it would have to pass a barrier the peer has not reached). Each
 * communicator, the world and each group it splits into (replicas, stages, expert groups), has
 * its own slot sets, barrier and `posted` counters, so that argument holds for each alone
 * however their collectives interleave; the abort flag and the ranks' phases are the arena's.
 * Point-to-point messages go through each rank's outbox of two slots (see shm_send). Waits
 * spin briefly, then sleep on a futex: a waiter must not keep a core that its own BLAS threads
 * need, and it checks the abort flag and its deadline so a dead or stuck rank never hangs the
 * job. */
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
#include "util/alloc.h"
#include "util/err.h"

#define MAX_RANKS 64

/* A rank's part in one communicator's synchronisation. */
typedef struct member {
    _Atomic uint32_t arrived_gen; /* generation of the last barrier this rank reached */
    _Atomic uint32_t posted;      /* fused collectives: the last one whose block is in the slot */
} member;

/* A slot of a rank's outbox. head is 0 while the slot is free, else (k << 32) | (dst + 1): the
 * message is the sender's k-th and for world rank dst, in one word so a receiver reads both at
 * once. */
typedef struct message {
    _Atomic uint64_t head;
    size_t n; /* floats */
} message;

typedef struct rank_slot {
    char phase[96];
    member in[COMM_N_GROUPS]; /* in the world, and in its group of each kind */
    _Atomic uint32_t sent;    /* messages this rank has sent */
    _Atomic uint32_t taken;   /* of those, taken by their receivers */
    message box[2];           /* message k travels in box[k & 1] */
} rank_slot;

typedef struct barrier_state {
    _Atomic uint32_t arrived, generation;
} barrier_state;

/* slots: for each kind of group, each group's [2][group size][slot_bytes] (the groups of a
 * kind partition the job, so a kind takes [2][size][slot_bytes]); then the outboxes,
 * [size][2][slot_bytes]. */
struct shm_arena {
    comm_layout layout;
    int size, spin;
    size_t slot_bytes, map_bytes;
    double timeout_s;
    _Atomic int abort;
    barrier_state barriers[COMM_N_GROUPS][MAX_RANKS]; /* each group's */
    rank_slot ranks[MAX_RANKS];
    _Alignas(64) unsigned char slots[];
};

typedef struct shm_state {
    shm_arena *a;
    unsigned char *slots; /* this communicator's [2][size][slot_bytes] */
    uint32_t exchanges;   /* collectives so far, all kinds: its parity picks the slot set */
    uint32_t fused;       /* fused collectives so far: what a peer's `posted` must reach */
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

/* Where group `instance` of kind g has its slot sets; g = COMM_N_GROUPS: where the outboxes start. */
static size_t group_offset(const shm_arena *a, int g, int instance) {
    size_t kind = 2 * (size_t)a->size * a->slot_bytes;
    if (g == COMM_N_GROUPS) return g * kind;
    return g * kind + (size_t)instance * 2 * comm_group_size(&a->layout, g) * a->slot_bytes;
}

shm_arena *shm_arena_create(const comm_layout *l, size_t slot_bytes, double timeout_s, int spin, loom_err *err) {
    int size = comm_layout_size(l);
    if (l->tp < 1 || l->dp < 1 || l->pp < 1 || size > MAX_RANKS) {
        loom_errf(err, "shm backend: %d x %d x %d ranks (1..%d in all)", l->tp, l->dp, l->pp, MAX_RANKS);
        return NULL;
    }
    slot_bytes = (slot_bytes + 63) / 64 * 64;
    /* two slots a rank for each kind of group, two for the outboxes (see group_offset); a kind the
     * job does not split into is never touched, so costs no memory */
    size_t bytes = sizeof(shm_arena) + (2 * COMM_N_GROUPS + 2) * (size_t)size * slot_bytes;
    shm_arena *a = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED) {
        loom_errf(err, "shm backend: cannot map a %zu MiB arena: %s", bytes >> 20, strerror(errno));
        return NULL;
    }
    a->layout = *l;
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
    for (int g = 0; g < COMM_N_GROUPS; g++)
        for (int i = 0; i < comm_group_count(&a->layout, g); i++) futex_wake_all(&a->barriers[g][i].generation);
}

const char *shm_arena_phase(const shm_arena *a, int rank) { return a->ranks[rank].phase; }

static member *member_of(const loom_comm *c, int r) {
    const shm_state *s = c->impl;
    return &s->a->ranks[comm_world_rank(c, r)].in[c->group];
}

/* "3 (stage 1) ('phase')": world rank w as a wait names it. */
static void name_waited(const loom_comm *c, int w, char *out, size_t cap) {
    char name[32];
    snprintf(out, cap, "%s ('%s')", comm_format_rank(w, &c->layout, name, sizeof name),
             ((shm_state *)c->impl)->a->ranks[w].phase);
}

/* Names the ranks of c that have not reached the barrier of generation gen. */
static void missing_ranks(const loom_comm *c, uint32_t gen, char *out, size_t cap) {
    size_t n = 0;
    out[0] = 0;
    for (int r = 0; r < c->size && n + 1 < cap; r++)
        if (atomic_load(&member_of(c, r)->arrived_gen) != gen + 1) {
            char one[160];
            name_waited(c, comm_world_rank(c, r), one, sizeof one);
            n += snprintf(out + n, cap - n, "%s%s", n ? ", " : "", one);
        }
}

/* Waits until *word differs from old: spins a little, then sleeps on the futex, and gives up
 * when another rank failed or at the deadline (naming world rank `peer`, or with peer < 0 the
 * ranks missing from c's barrier). */
static int wait_change(loom_comm *c, _Atomic uint32_t *word, uint32_t old, int peer, loom_err *err) {
    shm_arena *a = ((shm_state *)c->impl)->a;
    double deadline = 0;
    char me[32], who[512];
    for (long i = 0;; i++) {
        if (atomic_load(word) != old) return 0;
        if (atomic_load(&a->abort))
            return loom_errf(err, "rank %s: stopping in '%s': another rank failed",
                             comm_rank_name(c, c->rank, me, sizeof me), c->phase);
        if (i < a->spin) {
            cpu_relax();
            continue;
        }
        if (!deadline) deadline = now() + a->timeout_s * c->deadline_scale;
        futex_wait(word, old, 20 * 1000 * 1000);
        if (now() > deadline && atomic_load(word) == old) {
            if (peer >= 0) name_waited(c, peer, who, sizeof who);
            else missing_ranks(c, old, who, sizeof who);
            shm_arena_abort(a);
            return loom_errf(err, "rank %s: '%s' waited %.0f s for rank %s", comm_rank_name(c, c->rank, me, sizeof me),
                             c->phase, a->timeout_s * c->deadline_scale, who);
        }
    }
}

static int shm_barrier(loom_comm *c, loom_err *err) {
    shm_state *s = c->impl;
    barrier_state *b = &s->a->barriers[c->group][c->instance];
    uint32_t gen = atomic_load(&b->generation);
    atomic_store(&member_of(c, c->rank)->arrived_gen, gen + 1);
    if (atomic_fetch_add(&b->arrived, 1) == (uint32_t)c->size - 1) {
        atomic_store(&b->arrived, 0);
        atomic_fetch_add(&b->generation, 1);
        futex_wake_all(&b->generation);
        return 0;
    }
    return wait_change(c, &b->generation, gen, -1, err);
}

/* A peer's block of fused collective `seq` is in its slot once its counter reaches seq. The
 * counter may already be one further (the peer moved on and posted the next block, into the
 * other slot set), never two: it cannot pass a collective this rank has not posted. */
static int wait_posted(loom_comm *c, int peer, uint32_t seq, loom_err *err) {
    _Atomic uint32_t *posted = &member_of(c, peer)->posted;
    for (;;) {
        uint32_t v = atomic_load(posted);
        if ((int32_t)(v - seq) >= 0) return 0;
        if (wait_change(c, posted, v, comm_world_rank(c, peer), err)) return -1;
    }
}

static void post(loom_comm *c, uint32_t seq) {
    _Atomic uint32_t *posted = &member_of(c, c->rank)->posted;
    atomic_store(posted, seq);
    futex_wake_all(posted);
}

static float *slot_of(const loom_comm *c, unsigned set, int rank) {
    const shm_state *s = c->impl;
    return (float *)(s->slots + ((size_t)set * c->size + rank) * s->a->slot_bytes);
}

/* Whose data is too large is named: in an exchange (an all-to-all's, say) it may be a peer's. */
static int check_fits(loom_comm *c, int owner, const char *what, size_t floats, loom_err *err) {
    shm_arena *a = ((shm_state *)c->impl)->a;
    if (floats * sizeof(float) <= a->slot_bytes) return 0;
    char me[32], who[32];
    return loom_errf(err, "rank %s: '%s': %s of %zu bytes from rank %s exceeds the shm slot of %zu",
                     comm_rank_name(c, c->rank, me, sizeof me), c->phase, what, floats * sizeof(float),
                     comm_rank_name(c, owner, who, sizeof who), a->slot_bytes);
}

/* Slots are reused two collectives later; each fused collective waits for every peer's block,
 * so by then every peer has finished reading (the argument of the exchange's double buffer). */
static int shm_all_gather_matmul(loom_comm *c, const float *shard, size_t lds, int rows, int cols, comm_gather_gemm f,
                                 void *ctx, loom_err *err) {
    shm_state *s = c->impl;
    if (check_fits(c, c->rank, "a block", (size_t)rows * cols, err)) return -1;
    unsigned set = s->exchanges++ & 1;
    uint32_t seq = ++s->fused;
    float *mine = slot_of(c, set, c->rank);
    comm_pack_rows(mine, shard, lds, rows, cols);
    post(c, seq);
    f(ctx, shard, lds, c->rank * rows, rows); /* own block first: nothing to wait for */
    for (int k = 1; k < c->size; k++) {
        int src = (c->rank + k) % c->size;
        if (wait_posted(c, src, seq, err)) return -1;
        f(ctx, slot_of(c, set, src), cols, src * rows, rows); /* read in place */
    }
    return 0;
}

static int shm_matmul_reduce_scatter(loom_comm *c, int rows, int cols, comm_partial_gemm f, void *ctx, float *out,
                                     size_t ldo, loom_err *err) {
    shm_state *s = c->impl;
    size_t block = (size_t)rows * cols; /* this rank's slot holds one block per destination */
    if (check_fits(c, c->rank, "a block", block * c->size, err)) return -1;
    unsigned set = s->exchanges++ & 1;
    uint32_t seq = ++s->fused;
    float *mine = slot_of(c, set, c->rank);
    for (int k = 1; k <= c->size; k++) { /* the next peer's block first, the own one last */
        int dst = (c->rank + k) % c->size;
        f(ctx, dst * rows, rows, mine + dst * block, cols);
        if (k == c->size - 1) post(c, seq); /* every peer's block is written */
    }
    if (c->size == 1) post(c, seq);
    for (int src = 0; src < c->size; src++) {
        if (src != c->rank && wait_posted(c, src, seq, err)) return -1;
        c->blocks[src] = slot_of(c, set, src) + c->rank * block;
    }
    comm_sum_blocks(c, c->blocks, rows, cols, out, ldo);
    return 0;
}

static int shm_exchange(loom_comm *c, const float *mine, size_t ld, int rows, const int *cols, const float **blocks,
                        loom_err *err) {
    shm_state *s = c->impl;
    for (int r = 0; r < c->size; r++)
        if (check_fits(c, r, "an exchange", (size_t)rows * cols[r], err)) return -1;
    unsigned set = s->exchanges++ & 1;
    comm_pack_rows(slot_of(c, set, c->rank), mine, ld, rows, cols[c->rank]);
    if (shm_barrier(c, err)) return -1;
    for (int r = 0; r < c->size; r++) blocks[r] = slot_of(c, set, r);
    return 0;
}

/* Point-to-point. A rank's messages, whatever their destination and communicator, go through
 * its outbox in turn: message k into box[k & 1], once message k - 2 has been taken, so a sender
 * runs at most two messages ahead of its receivers. A receiver takes, of the sender's boxes
 * addressed to it, the message numbered lowest: the one sent first. */
static float *outbox(const shm_arena *a, int w, int i) {
    return (float *)(a->slots + group_offset(a, COMM_N_GROUPS, 0) + (2 * (size_t)w + i) * a->slot_bytes);
}

static int shm_send(loom_comm *c, int dst, const float *data, size_t n, loom_err *err) {
    shm_arena *a = ((shm_state *)c->impl)->a;
    int me = comm_world_rank(c, c->rank);
    rank_slot *rs = &a->ranks[me];
    if (check_fits(c, c->rank, "a message", n, err)) return -1;
    uint32_t k = atomic_load(&rs->sent);
    message *m = &rs->box[k & 1];
    for (;;) { /* taken is read first: a take after the head's load changes it */
        uint32_t taken = atomic_load(&rs->taken);
        uint64_t head = atomic_load(&m->head);
        if (!head) break;
        if (wait_change(c, &rs->taken, taken, (int)(uint32_t)head - 1, err)) return -1;
    }
    if (n) memcpy(outbox(a, me, k & 1), data, n * sizeof *data);
    m->n = n;
    atomic_store(&m->head, (uint64_t)k << 32 | (uint32_t)(comm_world_rank(c, dst) + 1));
    atomic_store(&rs->sent, k + 1);
    futex_wake_all(&rs->sent);
    return 0;
}

static int shm_recv(loom_comm *c, int src, float *data, size_t n, loom_err *err) {
    shm_arena *a = ((shm_state *)c->impl)->a;
    int me = comm_world_rank(c, c->rank), from = comm_world_rank(c, src);
    rank_slot *rs = &a->ranks[from];
    for (;;) { /* sent is read first: a message posted after the scan changes it */
        uint32_t sent = atomic_load(&rs->sent);
        int box = -1;
        uint32_t first = 0;
        for (int i = 0; i < 2; i++) {
            uint64_t head = atomic_load(&rs->box[i].head);
            uint32_t k = head >> 32;
            if ((uint32_t)head == (uint32_t)me + 1 && (box < 0 || (int32_t)(k - first) < 0)) box = i, first = k;
        }
        if (box >= 0) {
            message *m = &rs->box[box];
            if (m->n != n) {
                char mine[32], peer[32];
                return loom_errf(err, "rank %s: '%s' expected %zu floats from rank %s, whose message holds %zu",
                                 comm_rank_name(c, c->rank, mine, sizeof mine), c->phase, n,
                                 comm_rank_name(c, src, peer, sizeof peer), m->n);
            }
            if (n) memcpy(data, outbox(a, from, box), n * sizeof *data);
            atomic_store(&m->head, 0);
            atomic_fetch_add(&rs->taken, 1);
            futex_wake_all(&rs->taken);
            return 0;
        }
        if (wait_change(c, &rs->sent, sent, from, err)) return -1;
    }
}

static int shm_split(loom_comm *c, comm_group g, loom_comm **out, loom_err *err);

static void shm_free(loom_comm *c) { free(c->impl); }

/* all_to_all: NULL, the exchange's: each rank reads its part of every slot in place. */
static const comm_backend shm_backend = {
    "shm",     1,        shm_exchange, shm_barrier, shm_free, shm_all_gather_matmul, shm_matmul_reduce_scatter,
    shm_split, shm_send, shm_recv,     NULL};

/* Rank `rank` of group `instance` of kind g; NULL with err set when out of memory. */
static loom_comm *group_comm(shm_arena *a, comm_group g, int instance, int rank, loom_err *err) {
    shm_state *s = mem_zalloc(1, sizeof *s, "a communicator", err);
    if (s) {
        s->a = a;
        s->slots = a->slots + group_offset(a, g, instance);
    }
    return comm_new(rank, comm_group_size(&a->layout, g), &shm_backend, s, err);
}

/* A group's communicator is a view over the arena: its own slots, barrier and counters. */
static int shm_split(loom_comm *c, comm_group g, loom_comm **out, loom_err *err) {
    shm_arena *a = ((shm_state *)c->impl)->a;
    int local, instance = comm_group_instance(&a->layout, g, c->rank, &local);
    return (*out = group_comm(a, g, instance, local, err)) ? 0 : -1;
}

loom_comm *comm_shm(shm_arena *a, int rank) {
    loom_comm *c = group_comm(a, GROUP_WORLD, 0, rank, NULL);
    if (!c) return NULL;
    c->layout = a->layout;
    c->phase = a->ranks[rank].phase;
    return c;
}

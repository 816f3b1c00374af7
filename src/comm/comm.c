/* Collectives over a backend's exchange (see comm.h), and the single-rank backend. */
#include "comm/comm.h"

#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "util/alloc.h"
#include "util/err.h"

loom_comm *comm_new(int rank, int size, const comm_backend *be, void *impl, loom_err *err) {
    if (!impl) return NULL;
    loom_comm *c = mem_zalloc(1, sizeof *c, "a communicator", err);
    if (!c) {
        be->free(&(loom_comm){.be = be, .impl = impl});
        return NULL;
    }
    c->rank = rank;
    c->size = size;
    c->layout = (comm_layout){size, 1, 1};
    c->deadline_scale = 1;
    c->be = be;
    c->impl = impl;
    c->phase = c->own_phase;
    snprintf(c->phase, sizeof c->own_phase, "start-up");
    const char *what = "a communicator's tables";
    if (!(c->cols = mem_zalloc((size_t)size, sizeof *c->cols, what, err)) ||
        !(c->next = mem_zalloc((size_t)size, sizeof *c->next, what, err)) ||
        !(c->blocks = mem_zalloc((size_t)size, sizeof *c->blocks, what, err)) ||
        !(c->a2a = mem_zalloc((size_t)size * (size + 1), sizeof *c->a2a, what, err))) {
        comm_free(c);
        return NULL;
    }
    return c;
}

void comm_free(loom_comm *c) {
    if (!c) return;
    if (c->be->free) c->be->free(c);
    free(c->cols);
    free(c->next);
    free(c->blocks);
    free(c->a2a);
    free(c->scratch);
    free(c);
}

void loom_comm_set_phase(loom_comm *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->phase, sizeof c->own_phase, fmt, ap);
    va_end(ap);
}

/* Every rank publishes [rows, cols] of in. */
static int exchange_same(loom_comm *c, const float *in, size_t ldi, int rows, int cols, loom_err *err) {
    for (int r = 0; r < c->size; r++) c->cols[r] = cols;
    return c->be->exchange(c, in, ldi, rows, c->cols, c->blocks, err);
}

int comm_all_reduce(loom_comm *c, const float *in, size_t ldi, float *out, size_t ldo, int rows, int cols,
                    loom_err *err) {
    double t0 = omp_get_wtime();
    if (exchange_same(c, in, ldi, rows, cols, err)) return -1;
    comm_sum_blocks(c, c->blocks, rows, cols, out, ldo);
    c->blocked_s += omp_get_wtime() - t0;
    return 0;
}

int comm_all_gather_cols(loom_comm *c, const float *in, size_t ldi, float *out, size_t ldo, int rows, const int *col0,
                         const int *widths, loom_err *err) {
    double t0 = omp_get_wtime();
    if (c->be->exchange(c, in, ldi, rows, widths, c->blocks, err)) return -1;
    for (int r = 0; r < c->size; r++)
        for (int i = 0; i < rows; i++)
            memcpy(out + (size_t)i * ldo + col0[r], c->blocks[r] + (size_t)i * widths[r], widths[r] * sizeof *out);
    c->blocked_s += omp_get_wtime() - t0;
    return 0;
}

/* A reduce-scatter is a matmul-reduce-scatter whose "GEMM" copies the rows of the partial:
 * each rank then moves only the blocks its peers own (over MPI, 1/N of an exchange of the
 * whole partial), summed in the same rank order. */
typedef struct partial_rows {
    const float *in;
    size_t ldi;
    int cols;
} partial_rows;

static void copy_partial(void *ctx, int row0, int rows, float *y, size_t ldy) {
    const partial_rows *p = ctx;
    for (int i = 0; i < rows; i++)
        memcpy(y + (size_t)i * ldy, p->in + (size_t)(row0 + i) * p->ldi, p->cols * sizeof *y);
}

int comm_reduce_scatter_rows(loom_comm *c, const float *in, size_t ldi, float *out, size_t ldo, int rows, int cols,
                             loom_err *err) {
    double t0 = omp_get_wtime();
    partial_rows p = {in, ldi, cols};
    int rc = c->be->matmul_reduce_scatter(c, rows / c->size, cols, copy_partial, &p, out, ldo, err);
    c->blocked_s += omp_get_wtime() - t0;
    return rc;
}

int comm_all_gather_rows(loom_comm *c, const float *in, size_t ldi, float *out, size_t ldo, int rows, int cols,
                         loom_err *err) {
    double t0 = omp_get_wtime();
    if (exchange_same(c, in, ldi, rows, cols, err)) return -1;
    for (int r = 0; r < c->size; r++)
        for (int i = 0; i < rows; i++)
            memcpy(out + ((size_t)r * rows + i) * ldo, c->blocks[r] + (size_t)i * cols, cols * sizeof *out);
    c->blocked_s += omp_get_wtime() - t0;
    return 0;
}

/* c->scratch with room for n floats (never NULL for n = 0: one more); NULL with err set when out
 * of memory. */
static float *scratch(loom_comm *c, size_t n, loom_err *err) {
    return ARRAY_RESERVE(c->scratch, c->scratch_cap, n + 1, "a communicator's packing space", err) ? NULL : c->scratch;
}

/* Rows that are not contiguous travel packed, through c->scratch (NULL when out of memory). */
static const float *contiguous(loom_comm *c, const float *in, size_t ld, int rows, int cols, loom_err *err) {
    if (ld == (size_t)cols || rows <= 1) return in;
    float *packed = scratch(c, (size_t)rows * cols, err);
    if (packed) comm_pack_rows(packed, in, ld, rows, cols);
    return packed;
}

int comm_gather_rows_at(loom_comm *c, const float *in, size_t ldi, int block, const int32_t *want, int n_want,
                        float *out, size_t ldo, int cols, loom_err *err) {
    double t0 = omp_get_wtime();
    /* each rank sends the wanted rows it owns, in the order wanted, as one flat row */
    for (int r = 0; r < c->size; r++) c->cols[r] = 0;
    for (int i = 0; i < n_want; i++) c->cols[want[i] / block] += cols;
    float *mine = scratch(c, (size_t)n_want * cols, err);
    if (!mine) return -1;
    int k = 0;
    for (int i = 0; i < n_want; i++)
        if (want[i] / block == c->rank)
            memcpy(mine + (size_t)k++ * cols, in + (size_t)(want[i] % block) * ldi, cols * sizeof *mine);
    if (c->be->exchange(c, mine, 0, 1, c->cols, c->blocks, err)) return -1;
    memset(c->next, 0, c->size * sizeof *c->next);
    for (int i = 0; i < n_want; i++) {
        int r = want[i] / block;
        memcpy(out + (size_t)i * ldo, c->blocks[r] + (size_t)c->next[r]++ * cols, cols * sizeof *out);
    }
    c->blocked_s += omp_get_wtime() - t0;
    return 0;
}

/* The all-to-all's first step: every rank's counts to every rank (its send_rows, then its
 * max_rows, as floats' bytes), so that every rank makes the same checks on the same table and
 * a refusal stops all of them before any row moves. Each rank's whole message, and what each
 * receives, must also stay within MPI's int counts. */
static int a2a_counts(loom_comm *c, const int *send_rows, int cols, int max_rows, loom_err *err) {
    int n = c->size, w = n + 1;
    int32_t *mine = c->a2a + (size_t)c->rank * w;
    for (int d = 0; d < n; d++) mine[d] = send_rows[d];
    mine[n] = max_rows;
    for (int r = 0; r < n; r++) c->cols[r] = w;
    if (c->be->exchange(c, (const float *)mine, w, 1, c->cols, c->blocks, err)) return -1;
    for (int r = 0; r < n; r++) memcpy(c->a2a + (size_t)r * w, c->blocks[r], w * sizeof *c->a2a);
    char me[32], s_name[32], d_name[32], last[32];
    comm_rank_name(c, c->rank, me, sizeof me);
    for (int s = 0; s < n; s++)
        for (int d = 0; d < n; d++)
            if (comm_a2a_rows(c, s, d) < 0)
                return loom_errf(err, "rank %s: '%s': all-to-all: rank %s sends %d rows to rank %s", me, c->phase,
                                 comm_rank_name(c, s, s_name, sizeof s_name), comm_a2a_rows(c, s, d),
                                 comm_rank_name(c, d, d_name, sizeof d_name));
    for (int d = 0; d < n; d++) {
        size_t sent = comm_a2a_send_off(c, d, n), taken = comm_a2a_recv_off(c, n, d);
        comm_rank_name(c, d, d_name, sizeof d_name);
        if ((long long)taken > comm_a2a_rows(c, d, n)) {
            char counts[320];
            size_t k = 0;
            for (int s = 0; s < n && k < sizeof counts; s++)
                k += snprintf(counts + k, sizeof counts - k, "%s%d", s ? ", " : "", comm_a2a_rows(c, s, d));
            return loom_errf(err,
                             "rank %s: '%s': all-to-all: rank %s would receive %zu rows, more than its max_rows of %d "
                             "(%s from ranks %s to %s in turn)",
                             me, c->phase, d_name, taken, comm_a2a_rows(c, d, n), counts,
                             comm_rank_name(c, 0, s_name, sizeof s_name), comm_rank_name(c, n - 1, last, sizeof last));
        }
        if ((sent > taken ? sent : taken) * cols > INT32_MAX)
            return loom_errf(err, "rank %s: '%s': all-to-all: rank %s sends %zu and receives %zu rows of %d: too many",
                             me, c->phase, d_name, sent, taken, cols);
    }
    return 0;
}

/* The rows over the exchange: every rank publishes its outgoing rows, and copies out its part of
 * each rank's. */
static int a2a_exchange(loom_comm *c, const float *in, int cols, float *out, size_t ldo, loom_err *err) {
    for (int r = 0; r < c->size; r++) c->cols[r] = (int)comm_a2a_send_off(c, r, c->size) * cols;
    if (c->be->exchange(c, in, c->cols[c->rank], 1, c->cols, c->blocks, err)) return -1;
    for (int s = 0; s < c->size; s++) {
        comm_unpack_rows(out + comm_a2a_recv_off(c, s, c->rank) * ldo, ldo,
                         c->blocks[s] + comm_a2a_send_off(c, s, c->rank) * cols, comm_a2a_rows(c, s, c->rank), cols);
    }
    return 0;
}

int comm_all_to_all_rows(loom_comm *c, const float *in, size_t ldi, const int *send_rows, int cols, float *out,
                         size_t ldo, int max_rows, int *recv_rows, loom_err *err) {
    double t0 = omp_get_wtime();
    if (a2a_counts(c, send_rows, cols, max_rows, err)) return -1;
    in = contiguous(c, in, ldi, (int)comm_a2a_send_off(c, c->rank, c->size), cols, err);
    if (!in || (c->be->all_to_all ? c->be->all_to_all : a2a_exchange)(c, in, cols, out, ldo, err)) return -1;
    for (int s = 0; s < c->size; s++) recv_rows[s] = comm_a2a_rows(c, s, c->rank);
    c->blocked_s += omp_get_wtime() - t0;
    return 0;
}

/* The one order every reduction uses (all-reduce, reduce-scatter and their fused form), so all
 * agree bit for bit. */
void comm_sum_blocks(const loom_comm *c, const float **blocks, int rows, int cols, float *out, size_t ldo) {
#pragma omp parallel for schedule(static) if (rows > 1)
    for (int i = 0; i < rows; i++) {
        float *o = out + (size_t)i * ldo;
        const float *b0 = blocks[0] + (size_t)i * cols;
        memmove(o, b0, cols * sizeof *o);
        for (int r = 1; r < c->size; r++) cpu()->add(o, blocks[r] + (size_t)i * cols, o, cols);
    }
}

/* The fused ops time their GEMMs apart, so that blocked_s stays the time spent waiting and
 * moving data: for async TP, the communication the GEMMs did not hide. */
typedef struct timed_gemm {
    comm_gather_gemm gather;
    comm_partial_gemm partial;
    void *ctx;
    double seconds;
} timed_gemm;

static void timed_gather(void *ctx, const float *x, size_t ldx, int row0, int rows) {
    timed_gemm *t = ctx;
    double t0 = omp_get_wtime();
    t->gather(t->ctx, x, ldx, row0, rows);
    t->seconds += omp_get_wtime() - t0;
}

static void timed_partial(void *ctx, int row0, int rows, float *y, size_t ldy) {
    timed_gemm *t = ctx;
    double t0 = omp_get_wtime();
    t->partial(t->ctx, row0, rows, y, ldy);
    t->seconds += omp_get_wtime() - t0;
}

int comm_all_gather_matmul(loom_comm *c, const float *shard, size_t lds, int rows, int cols, comm_gather_gemm f,
                           void *ctx, loom_err *err) {
    timed_gemm t = {.gather = f, .ctx = ctx};
    double t0 = omp_get_wtime();
    int rc = c->be->all_gather_matmul(c, shard, lds, rows, cols, timed_gather, &t, err);
    c->blocked_s += omp_get_wtime() - t0 - t.seconds;
    return rc;
}

int comm_matmul_reduce_scatter(loom_comm *c, int rows, int cols, comm_partial_gemm f, void *ctx, float *out, size_t ldo,
                               loom_err *err) {
    timed_gemm t = {.partial = f, .ctx = ctx};
    double t0 = omp_get_wtime();
    int rc = c->be->matmul_reduce_scatter(c, rows, cols, timed_partial, &t, out, ldo, err);
    c->blocked_s += omp_get_wtime() - t0 - t.seconds;
    return rc;
}

int loom_comm_all_gather(loom_comm *c, const float *mine, int n, float *all, loom_err *err) {
    int *col0 = mem_array((size_t)c->size, sizeof *col0, "an all-gather's columns", err);
    int *w = col0 ? mem_array((size_t)c->size, sizeof *w, "an all-gather's columns", err) : NULL;
    if (!w) {
        free(col0);
        return -1;
    }
    for (int r = 0; r < c->size; r++) col0[r] = r * n, w[r] = n;
    int rc = comm_all_gather_cols(c, mine, n, all, (size_t)n * c->size, 1, col0, w, err);
    free(col0);
    free(w);
    return rc;
}

/* n 4-byte words from rank root to every rank: an exchange in which only the root publishes. */
_Static_assert(sizeof(int32_t) == sizeof(float), "ints travel as floats' bytes");
static int broadcast_words(loom_comm *c, int root, void *buf, size_t n, loom_err *err) {
    char me[32];
    comm_rank_name(c, c->rank, me, sizeof me);
    if (root < 0 || root >= c->size)
        return loom_errf(err, "rank %s: broadcast from rank %d of a communicator of %d", me, root, c->size);
    if (n > INT32_MAX) return loom_errf(err, "rank %s: a broadcast of %zu words is too large", me, n);
    for (int r = 0; r < c->size; r++) c->cols[r] = r == root ? (int)n : 0;
    if (c->be->exchange(c, buf, n, 1, c->cols, c->blocks, err)) return -1;
    if (c->rank != root && n) memcpy(buf, c->blocks[root], n * sizeof(float));
    return 0;
}

/* A small fixed-size message (ints, moved as their bytes) from rank 0 to every rank: what
 * `loom serve` uses to hand each step's batch to the other ranks. Not counted in blocked_s: a
 * server's followers wait here for the next request. */
int loom_comm_broadcast_ints(loom_comm *c, int32_t *buf, int n, loom_err *err) {
    return broadcast_words(c, 0, buf, (size_t)n, err);
}

int comm_broadcast_floats(loom_comm *c, int root, float *buf, size_t n, loom_err *err) {
    double t0 = omp_get_wtime();
    /* the root's own stage ran the same collectives up to it, so for them it is due at once: a
     * stuck root is caught at the collective deadline, not the hand-over's */
    bool same_stage =
        comm_stage_of(&c->layout, comm_world_rank(c, c->rank)) == comm_stage_of(&c->layout, comm_world_rank(c, root));
    c->deadline_scale = same_stage ? 1 : COMM_HANDOVER_WAIT;
    int rc = broadcast_words(c, root, buf, n, err);
    c->deadline_scale = 1;
    c->blocked_s += omp_get_wtime() - t0;
    return rc;
}

int comm_group_size(const comm_layout *l, comm_group g) {
    switch (g) {
    case GROUP_REPLICA: return l->pp * l->tp;
    case GROUP_TP: return l->tp;
    case GROUP_EP: return l->dp * l->tp;
    default: return comm_layout_size(l);
    }
}

int comm_group_count(const comm_layout *l, comm_group g) { return comm_layout_size(l) / comm_group_size(l, g); }

int comm_group_instance(const comm_layout *l, comm_group g, int w, int *local) {
    int t = w % l->tp, d = comm_replica_of(l, w), s = comm_stage_of(l, w);
    switch (g) {
    case GROUP_REPLICA: *local = s * l->tp + t; return d;
    case GROUP_TP: *local = t; return w / l->tp;
    case GROUP_EP: *local = d * l->tp + t; return s;
    default: *local = w; return 0;
    }
}

int comm_group_member(const comm_layout *l, comm_group g, int instance, int r) {
    switch (g) {
    case GROUP_REPLICA: return (r / l->tp * l->dp + instance) * l->tp + r % l->tp;
    case GROUP_TP: return instance * l->tp + r;
    case GROUP_EP: return instance * l->dp * l->tp + r;
    default: return r;
    }
}

const char *comm_format_rank(int w, const comm_layout *l, char *buf, size_t cap) {
    if (l->dp > 1 && l->pp > 1)
        snprintf(buf, cap, "%d (dp %d, stage %d)", w, comm_replica_of(l, w), comm_stage_of(l, w));
    else if (l->dp > 1) snprintf(buf, cap, "%d (dp %d)", w, comm_replica_of(l, w));
    else if (l->pp > 1) snprintf(buf, cap, "%d (stage %d)", w, comm_stage_of(l, w));
    else snprintf(buf, cap, "%d", w);
    return buf;
}

const char *comm_rank_name(const loom_comm *c, int r, char *buf, size_t cap) {
    return comm_format_rank(comm_world_rank(c, r), &c->layout, buf, cap);
}

int comm_split(loom_comm *world, comm_group g, loom_comm **out, loom_err *err) {
    char who[32];
    comm_rank_name(world, world->rank, who, sizeof who);
    if (world->group != GROUP_WORLD || g == GROUP_WORLD || g >= COMM_N_GROUPS)
        return loom_errf(err, "rank %s: only the job's communicator splits, into replicas, stages or expert groups",
                         who);
    if (world->be->split(world, g, out, err)) return -1;
    loom_comm *s = *out;
    s->layout = world->layout;
    s->group = g;
    s->instance = comm_group_instance(&world->layout, g, world->rank, &(int){0});
    s->phase = world->phase;
    return 0;
}

/* The checks every backend shares: a peer is another rank of c. */
static int check_peer(loom_comm *c, int peer, const char *what, loom_err *err) {
    if (peer >= 0 && peer < c->size && peer != c->rank) return 0;
    char me[32];
    return loom_errf(err, "rank %s: '%s': %s rank %d of a communicator of %d (it must be another rank)",
                     comm_rank_name(c, c->rank, me, sizeof me), c->phase, what, peer, c->size);
}

int comm_send_rows(loom_comm *c, int dst, const float *in, size_t ld, int rows, int cols, loom_err *err) {
    if (check_peer(c, dst, "send to", err)) return -1;
    double t0 = omp_get_wtime();
    if (!(in = contiguous(c, in, ld, rows, cols, err))) return -1;
    c->deadline_scale = COMM_HANDOVER_WAIT;
    int rc = c->be->send(c, dst, in, (size_t)rows * cols, err);
    c->deadline_scale = 1;
    c->blocked_s += omp_get_wtime() - t0;
    return rc;
}

int comm_recv_rows(loom_comm *c, int src, float *out, size_t ld, int rows, int cols, loom_err *err) {
    if (check_peer(c, src, "receive from", err)) return -1;
    double t0 = omp_get_wtime();
    size_t n = (size_t)rows * cols;
    bool packed = ld != (size_t)cols && rows > 1;
    float *into = packed ? scratch(c, n, err) : out;
    if (!into) return -1;
    c->deadline_scale = COMM_HANDOVER_WAIT;
    int rc = c->be->recv(c, src, into, n, err);
    c->deadline_scale = 1;
    if (!rc && packed) comm_unpack_rows(out, ld, c->scratch, rows, cols);
    c->blocked_s += omp_get_wtime() - t0;
    return rc;
}

/* tp=1: the exchange hands back the rank's own data, packed. */
typedef struct local_state {
    float *buf;
    size_t cap;
} local_state;

static int local_exchange(loom_comm *c, const float *mine, size_t ld, int rows, const int *cols, const float **blocks,
                          loom_err *err) {
    local_state *s = c->impl;
    if (ARRAY_RESERVE(s->buf, s->cap, (size_t)rows * cols[0], "an exchange's buffer", err)) return -1;
    comm_pack_rows(s->buf, mine, ld, rows, cols[0]);
    blocks[0] = s->buf;
    return 0;
}

static int local_barrier(loom_comm *c, loom_err *err) {
    (void)c, (void)err;
    return 0;
}

static void local_free(loom_comm *c) {
    local_state *s = c->impl;
    free(s->buf);
    free(s);
}

static int local_all_gather_matmul(loom_comm *c, const float *shard, size_t lds, int rows, int cols, comm_gather_gemm f,
                                   void *ctx, loom_err *err) {
    (void)c, (void)cols, (void)err;
    f(ctx, shard, lds, 0, rows);
    return 0;
}

static int local_matmul_reduce_scatter(loom_comm *c, int rows, int cols, comm_partial_gemm f, void *ctx, float *out,
                                       size_t ldo, loom_err *err) {
    (void)c, (void)cols, (void)err;
    f(ctx, 0, rows, out, ldo);
    return 0;
}

static loom_comm *local_new(loom_err *err);

static int local_split(loom_comm *c, comm_group g, loom_comm **out, loom_err *err) {
    (void)c, (void)g; /* one rank: every group is the job */
    return (*out = local_new(err)) ? 0 : -1;
}

static const comm_backend local_backend = {
    "local",     1,    local_exchange, local_barrier, local_free, local_all_gather_matmul, local_matmul_reduce_scatter,
    local_split, NULL,  /* send, recv: no peer to talk to */
    NULL,        NULL}; /* all_to_all: its own rows, through the exchange */

static loom_comm *local_new(loom_err *err) {
    return comm_new(0, 1, &local_backend, mem_zalloc(1, sizeof(local_state), "a communicator", err), err);
}

loom_comm *comm_local(void) { return local_new(NULL); }

int loom_comm_send_floats(loom_comm *c, int dst, const float *buf, size_t n, loom_err *err) {
    return n > INT32_MAX ? loom_errf(err, "a message of %zu floats is too large", n)
                         : comm_send_rows(c, dst, buf, n, 1, (int)n, err);
}

int loom_comm_recv_floats(loom_comm *c, int src, float *buf, size_t n, loom_err *err) {
    return n > INT32_MAX ? loom_errf(err, "a message of %zu floats is too large", n)
                         : comm_recv_rows(c, src, buf, n, 1, (int)n, err);
}

/* ints travel as floats' bytes, which no backend converts (as broadcast_words) */
int loom_comm_send_ints(loom_comm *c, int dst, const int32_t *buf, size_t n, loom_err *err) {
    return loom_comm_send_floats(c, dst, (const float *)(const void *)buf, n, err);
}

int loom_comm_recv_ints(loom_comm *c, int src, int32_t *buf, size_t n, loom_err *err) {
    return loom_comm_recv_floats(c, src, (float *)(void *)buf, n, err);
}

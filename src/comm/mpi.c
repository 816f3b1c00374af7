/* MPI backend (see mpi.h). An exchange is one MPI_Iallgatherv of the ranks' packed blocks,
 * completed by polling MPI_Test so that a deadline can end a wait that would otherwise hang
 * (an MPI collective has no timeout of its own); the arithmetic on the blocks is comm.c's, the
 * same as shm's, so both backends give bit-identical results. The world's communicator is
 * MPI_COMM_WORLD; a replica's, a stage's or an expert group's, one MPI_Comm_split of it. */
#include "comm/mpi.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/alloc.h"
#include "util/err.h"

typedef struct mpi_state {
    MPI_Comm comm;
    double timeout_s;
    float *send, *recv;
    size_t send_cap, recv_cap;
    int *counts, *displs; /* [2 * size]: an exchange's, or an all-to-all's sends then receives */
    MPI_Request *reqs;    /* [2 * size * COMM_MAX_CHUNKS]: receives, then sends, of a fused collective */
    /* point-to-point: message k is sent from msg[k & 1], once the send of message k - 2 is done */
    float *msg[2];
    size_t msg_cap[2];
    MPI_Request msg_req[2];
    int msg_dst[2];
    unsigned msgs;
} mpi_state;

#define FUSED_TAG 7                             /* + the chunk's index, up to COMM_MAX_CHUNKS - 1 */
#define P2P_TAG   (FUSED_TAG + COMM_MAX_CHUNKS) /* comm_send_rows' messages */

/* Room for n floats in a message buffer (one more: MPI is never handed NULL); -1 with err set
 * when out of memory. */
static int buffer(loom_comm *c, float **buf, size_t *cap, size_t n, loom_err *err) {
    if (!ARRAY_RESERVE(*buf, *cap, n + 1, "an MPI message buffer", err)) return 0;
    char me[32];
    return loom_err_prefix(err, "rank %s", comm_rank_name(c, c->rank, me, sizeof me));
}

/* Polls done(arg) until it is true, giving up at the deadline. It polls flat out for the first
 * millisecond (a collective's partner is usually that close), then every 100 us: a rank
 * waiting long (an idle server's followers wait for the next step) should not hold a core. A
 * wait names rank `peer` of c, or with peer < 0 the other ranks. */
static int poll_until(loom_comm *c, int (*done)(void *), void *arg, const char *what, int peer, loom_err *err) {
    mpi_state *s = c->impl;
    double start = MPI_Wtime(), deadline = start + s->timeout_s * c->deadline_scale;
    for (;;) {
        if (done(arg)) return 0;
        if (MPI_Wtime() - start > 1e-3) {
            struct timespec nap = {0, 100 * 1000};
            nanosleep(&nap, NULL);
        }
        if (MPI_Wtime() > deadline) {
            char me[32], name[32], who[48] = "the other ranks";
            if (peer >= 0) snprintf(who, sizeof who, "rank %s", comm_rank_name(c, peer, name, sizeof name));
            return loom_errf(err, "rank %s: %s in '%s' waited %.0f s for %s", comm_rank_name(c, c->rank, me, sizeof me),
                             what, c->phase, s->timeout_s * c->deadline_scale, who);
        }
    }
}

static int request_done(void *req) {
    int done = 0;
    MPI_Test(req, &done, MPI_STATUS_IGNORE);
    return done;
}

/* Waits for req (see poll_until). */
static int wait_for(loom_comm *c, MPI_Request *req, const char *what, int peer, loom_err *err) {
    return poll_until(c, request_done, req, what, peer, err);
}

static int mpi_exchange(loom_comm *c, const float *mine, size_t ld, int rows, const int *cols, const float **blocks,
                        loom_err *err) {
    mpi_state *s = c->impl;
    size_t total = 0;
    for (int r = 0; r < c->size; r++) {
        size_t n = (size_t)rows * cols[r];
        if (n > (size_t)INT32_MAX)
            return loom_errf(err, "rank %d: exchange of %zu floats is too large for MPI", c->rank, n);
        s->counts[r] = (int)n;
        s->displs[r] = (int)total;
        total += n;
    }
    int w = cols[c->rank];
    if (buffer(c, &s->send, &s->send_cap, (size_t)rows * w, err) || buffer(c, &s->recv, &s->recv_cap, total, err))
        return -1;
    comm_pack_rows(s->send, mine, ld, rows, w);
    MPI_Request req;
    MPI_Iallgatherv(s->send, s->counts[c->rank], MPI_FLOAT, s->recv, s->counts, s->displs, MPI_FLOAT, s->comm, &req);
    if (wait_for(c, &req, "exchange", -1, err)) return -1;
    for (int r = 0; r < c->size; r++) blocks[r] = s->recv + s->displs[r];
    return 0;
}

/* Completes every request in reqs[0..n) (MPI_REQUEST_NULL ones are done already). */
static int wait_all(loom_comm *c, MPI_Request *reqs, int n, loom_err *err) {
    for (int i = 0; i < n; i++)
        if (reqs[i] != MPI_REQUEST_NULL && wait_for(c, &reqs[i], "fused collective", -1, err)) return -1;
    return 0;
}

/* One message per chunk (see comm_chunk_rows): chunk i of a block is rows [i*chunk, ...). */
typedef struct chunking {
    int rows, cols, chunk, n;
} chunking;

static chunking chunks_of(const loom_comm *c, int rows, int cols) {
    int chunk = comm_chunk_rows(c, rows);
    return (chunking){rows, cols, chunk, (rows + chunk - 1) / chunk};
}

static int chunk_floats(const chunking *k, int i) {
    return (k->rows - i * k->chunk < k->chunk ? k->rows - i * k->chunk : k->chunk) * k->cols;
}

/* Requests: receives from rank r at [r*n + i], sends to rank r at [(N + r)*n + i]. */
static void post_recvs(loom_comm *c, const chunking *k, float *recv) {
    mpi_state *s = c->impl;
    for (int r = 0; r < c->size; r++)
        for (int i = 0; i < k->n; i++) {
            MPI_Request *q = &s->reqs[r * k->n + i];
            *q = s->reqs[(c->size + r) * k->n + i] = MPI_REQUEST_NULL;
            if (r != c->rank)
                MPI_Irecv(recv + ((size_t)r * k->rows + (size_t)i * k->chunk) * k->cols, chunk_floats(k, i), MPI_FLOAT,
                          r, FUSED_TAG + i, s->comm, q);
        }
}

static void send_chunk(loom_comm *c, const chunking *k, const float *block, int dst, int i) {
    mpi_state *s = c->impl;
    MPI_Isend(block + (size_t)i * k->chunk * k->cols, chunk_floats(k, i), MPI_FLOAT, dst, FUSED_TAG + i, s->comm,
              &s->reqs[(c->size + dst) * k->n + i]);
}

/* Point-to-point posted ahead: the own block's GEMM runs while the peers' blocks travel, and
 * each peer chunk's GEMM starts as soon as that chunk is in. */
static int mpi_all_gather_matmul(loom_comm *c, const float *shard, size_t lds, int rows, int cols, comm_gather_gemm f,
                                 void *ctx, loom_err *err) {
    mpi_state *s = c->impl;
    int N = c->size;
    size_t n = (size_t)rows * cols;
    chunking k = chunks_of(c, rows, cols);
    if (buffer(c, &s->send, &s->send_cap, n, err) || buffer(c, &s->recv, &s->recv_cap, n * N, err)) return -1;
    comm_pack_rows(s->send, shard, lds, rows, cols);
    post_recvs(c, &k, s->recv);
    for (int r = 0; r < N; r++)
        for (int i = 0; i < k.n && r != c->rank; i++) send_chunk(c, &k, s->send, r, i);
    f(ctx, shard, lds, c->rank * rows, rows);
    for (int step = 1; step < N; step++) {
        int src = (c->rank + step) % N;
        for (int i = 0; i < k.n; i++) {
            if (wait_for(c, &s->reqs[src * k.n + i], "all_gather_matmul", src, err)) return -1;
            int r0 = i * k.chunk;
            f(ctx, s->recv + ((size_t)src * rows + r0) * cols, cols, src * rows + r0, chunk_floats(&k, i) / cols);
        }
    }
    return wait_all(c, s->reqs + N * k.n, N * k.n, err);
}

static int mpi_matmul_reduce_scatter(loom_comm *c, int rows, int cols, comm_partial_gemm f, void *ctx, float *out,
                                     size_t ldo, loom_err *err) {
    mpi_state *s = c->impl;
    int N = c->size;
    size_t n = (size_t)rows * cols;
    chunking k = chunks_of(c, rows, cols);
    if (buffer(c, &s->send, &s->send_cap, n * N, err) || buffer(c, &s->recv, &s->recv_cap, n * N, err)) return -1;
    post_recvs(c, &k, s->recv);
    for (int step = 1; step <= N; step++) { /* the next peer's block first, the own one last */
        int dst = (c->rank + step) % N;
        float *block = (dst == c->rank ? s->recv : s->send) + dst * n;
        for (int i = 0; i < k.n; i++) {
            int r0 = i * k.chunk;
            f(ctx, dst * rows + r0, chunk_floats(&k, i) / cols, block + (size_t)r0 * cols, cols);
            if (dst != c->rank) send_chunk(c, &k, block, dst, i);
            int flag; /* MPIs without a progress thread move data only inside calls */
            MPI_Testall(2 * N * k.n, s->reqs, &flag, MPI_STATUSES_IGNORE);
        }
    }
    if (wait_all(c, s->reqs, N * k.n, err)) return -1;
    for (int r = 0; r < N; r++) c->blocks[r] = s->recv + (size_t)r * n;
    comm_sum_blocks(c, c->blocks, rows, cols, out, ldo);
    return wait_all(c, s->reqs + N * k.n, N * k.n, err);
}

/* One MPI_Ialltoallv: each rank's rows go only to their destination, where an exchange would
 * carry every rank's whole message to every rank. Its counts are floats, c->a2a's rows times
 * cols, which comm.c checked fit in an int. The rows land in out itself when it is contiguous.
 * Point-to-point (an Isend and Irecv per pair with rows) measured the same on loopback, within
 * 8% either way at 2 and 3 ranks and 0.06 to 24 MiB a rank, so the one collective stays. */
static int mpi_all_to_all(loom_comm *c, const float *in, int cols, float *out, size_t ldo, loom_err *err) {
    mpi_state *s = c->impl;
    int N = c->size, *sc = s->counts, *sd = s->displs, *rc = s->counts + N, *rd = s->displs + N;
    for (int r = 0; r < N; r++) {
        sc[r] = comm_a2a_rows(c, c->rank, r) * cols, sd[r] = (int)comm_a2a_send_off(c, c->rank, r) * cols;
        rc[r] = comm_a2a_rows(c, r, c->rank) * cols, rd[r] = (int)comm_a2a_recv_off(c, r, c->rank) * cols;
    }
    size_t rows = comm_a2a_recv_off(c, N, c->rank);
    bool direct = ldo == (size_t)cols;
    if (!direct && buffer(c, &s->recv, &s->recv_cap, rows * cols, err)) return -1;
    float *recv = direct ? out : s->recv;
    MPI_Request req;
    MPI_Ialltoallv(in, sc, sd, MPI_FLOAT, recv, rc, rd, MPI_FLOAT, s->comm, &req);
    if (wait_for(c, &req, "all-to-all", -1, err)) return -1;
    if (!direct) comm_unpack_rows(out, ldo, recv, (int)rows, cols);
    return 0;
}

static int mpi_barrier(loom_comm *c, loom_err *err) {
    MPI_Request req;
    MPI_Ibarrier(((mpi_state *)c->impl)->comm, &req);
    return wait_for(c, &req, "barrier", -1, err);
}

/* The message is copied out, so the caller may reuse its rows at once; the buffer it left is
 * reused two messages later, once its send is done. */
static int mpi_send(loom_comm *c, int dst, const float *data, size_t n, loom_err *err) {
    mpi_state *s = c->impl;
    char me[32];
    if (n > (size_t)INT32_MAX)
        return loom_errf(err, "rank %s: a message of %zu floats is too large for MPI",
                         comm_rank_name(c, c->rank, me, sizeof me), n);
    unsigned i = s->msgs++ & 1;
    if (wait_for(c, &s->msg_req[i], "send", s->msg_dst[i], err)) return -1;
    if (buffer(c, &s->msg[i], &s->msg_cap[i], n, err)) return -1;
    if (n) memcpy(s->msg[i], data, n * sizeof *data);
    s->msg_dst[i] = dst;
    MPI_Isend(s->msg[i], (int)n, MPI_FLOAT, dst, P2P_TAG, s->comm, &s->msg_req[i]);
    return 0;
}

/* A receive first probes for the message, so that one of another size is reported as such
 * (and left where it is, as shm leaves it) rather than truncated, which MPI's default error
 * handler would turn into an abort of its own. The receive that follows matches the probed
 * message: nothing else receives on this process between them. */
typedef struct probe {
    int src;
    MPI_Comm comm;
    MPI_Status status;
} probe;

static int probed(void *arg) {
    probe *p = arg;
    int found = 0;
    MPI_Iprobe(p->src, P2P_TAG, p->comm, &found, &p->status);
    return found;
}

static int mpi_recv(loom_comm *c, int src, float *data, size_t n, loom_err *err) {
    mpi_state *s = c->impl;
    probe p = {.src = src, .comm = s->comm};
    if (poll_until(c, probed, &p, "receive", src, err)) return -1;
    int count;
    MPI_Get_count(&p.status, MPI_FLOAT, &count);
    if ((size_t)count != n) {
        char me[32], peer[32];
        return loom_errf(err, "rank %s: '%s' expected %zu floats from rank %s, whose message holds %d",
                         comm_rank_name(c, c->rank, me, sizeof me), c->phase, n,
                         comm_rank_name(c, src, peer, sizeof peer), count);
    }
    MPI_Request req;
    MPI_Irecv(data, count, MPI_FLOAT, src, P2P_TAG, s->comm, &req);
    return wait_for(c, &req, "receive", src, err);
}

/* The state over comm (taken: freed on failure); NULL with err set when out of memory. */
static mpi_state *state_new(MPI_Comm comm, int size, double timeout_s, loom_err *err) {
    const char *what = "an MPI communicator's tables";
    mpi_state *s = mem_zalloc(1, sizeof *s, what, err);
    if (s) {
        s->comm = comm;
        s->timeout_s = timeout_s;
        s->msg_req[0] = s->msg_req[1] = MPI_REQUEST_NULL;
    }
    if (s && (s->counts = mem_zalloc(2 * (size_t)size, sizeof *s->counts, what, err)) &&
        (s->displs = mem_zalloc(2 * (size_t)size, sizeof *s->displs, what, err)) &&
        (s->reqs = mem_zalloc(2 * (size_t)size * COMM_MAX_CHUNKS, sizeof *s->reqs, what, err)))
        return s;
    if (comm != MPI_COMM_WORLD) MPI_Comm_free(&comm);
    if (s) free(s->counts), free(s->displs);
    free(s);
    return NULL;
}

static int mpi_split(loom_comm *c, comm_group g, loom_comm **out, loom_err *err);

/* A send still in flight completes before its buffer goes: the receiver takes it in a run that
 * succeeds. In one that fails it may never: the wait ends at the deadline, and the buffer is
 * left to MPI (the job is aborting). */
static void mpi_free(loom_comm *c) {
    mpi_state *s = c->impl;
    for (int i = 0; i < 2; i++) {
        loom_err ignored;
        if (wait_for(c, &s->msg_req[i], "send", s->msg_dst[i], &ignored)) {
            MPI_Request_free(&s->msg_req[i]);
            s->msg[i] = NULL;
        }
        free(s->msg[i]);
    }
    if (s->comm != MPI_COMM_WORLD) MPI_Comm_free(&s->comm);
    free(s->send), free(s->recv), free(s->counts), free(s->displs), free(s->reqs);
    free(s);
}

static const comm_backend mpi_backend = {
    "mpi",     COMM_MAX_CHUNKS, mpi_exchange, mpi_barrier,   mpi_free, mpi_all_gather_matmul, mpi_matmul_reduce_scatter,
    mpi_split, mpi_send,        mpi_recv,     mpi_all_to_all};

/* MPI_Comm_split has no deadline: a barrier that has one goes first, so that a missing rank
 * fails there instead of hanging the split. */
static int mpi_split(loom_comm *c, comm_group g, loom_comm **out, loom_err *err) {
    mpi_state *s = c->impl;
    if (mpi_barrier(c, err)) return -1;
    MPI_Comm comm;
    int local, instance = comm_group_instance(&c->layout, g, c->rank, &local), size = comm_group_size(&c->layout, g);
    MPI_Comm_split(s->comm, instance, local, &comm);
    *out = comm_new(local, size, &mpi_backend, state_new(comm, size, s->timeout_s, err), err);
    return *out ? 0 : -1;
}

int comm_mpi_run(int tp, int dp, int pp, double timeout_s, bool progress_thread, loom_rank_fn fn, void *arg,
                 loom_err *err) {
    int provided, rank, size;
    /* Open MPI's TCP transport moves a large message only while some MPI call runs, so the
     * blocks posted ahead of a fused collective's GEMMs would wait for the GEMMs to end, and a
     * stage's hand-over would reach the next stage only when the sender calls MPI again, after
     * its next microbatch. Its progress thread (asleep in epoll until a socket is ready) moves
     * them meanwhile: at 1 Gbit/s, an 8 MiB send beside 200 ms of compute goes from 68 ms of
     * waiting to none. It also slows the plain collectives (TP's all-reduces waited 9.3 s a
     * pass with it, 5.4 s without, in benches/netns-mpi.sh), so only async TP and pipeline
     * stages ask for it. Left to the user when set; other MPIs ignore the variable. */
    if (progress_thread) setenv("OMPI_MCA_btl_tcp_progress_thread", "1", 0);
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        loom_errf(err, "MPI_Init failed (is this process started by mpirun?)");
        return 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (pp < 1) pp = 1;
    if (dp < 1) dp = 1;
    if (!tp && size % (pp * dp) == 0) tp = size / (pp * dp);
    if (tp * dp * pp != size) {
        char want[96] = "";
        if (dp > 1) snprintf(want + strlen(want), sizeof want - strlen(want), " x -dp %d", dp);
        if (pp > 1) snprintf(want + strlen(want), sizeof want - strlen(want), " x -pp %d", pp);
        if (!tp) loom_errf(err, "%s does not divide the %d ranks mpirun started", want + 3, size);
        else if (!want[0])
            loom_errf(err, "-tp %d but mpirun started %d ranks: they must agree (or leave -tp out)", tp, size);
        else
            loom_errf(err, "-tp %d%s = %d ranks but mpirun started %d (-np): they must agree (or leave -tp out)", tp,
                      want, tp * dp * pp, size);
        MPI_Finalize();
        return 2;
    }
    if (rank != 0 && !freopen("/dev/null", "w", stdout)) MPI_Abort(MPI_COMM_WORLD, 1);
    loom_err why; /* as a rank's failure below: the other ranks are already running */
    loom_comm *c = comm_new(rank, size, &mpi_backend, state_new(MPI_COMM_WORLD, size, timeout_s, &why), &why);
    if (!c) {
        fprintf(stderr, "loom: rank %d: %s; aborting the MPI job\n", rank, why.msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
        return 1;
    }
    c->layout = (comm_layout){tp, dp, pp};
    int rc = fn(c, arg);
    fflush(stdout);
    fflush(stderr);
    if (rc) {
        char who[32];
        fprintf(stderr, "loom: rank %s failed during '%s'; aborting the MPI job\n",
                comm_rank_name(c, rank, who, sizeof who), c->phase);
        MPI_Abort(MPI_COMM_WORLD, rc);
    }
    comm_free(c);
    MPI_Finalize();
    return rc;
}

void comm_mpi_node_rank(int *rank, int *size) {
    MPI_Comm node;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS) {
        *rank = 0, *size = 1; /* unknown: as if alone */
        return;
    }
    MPI_Comm_rank(node, rank);
    MPI_Comm_size(node, size);
    MPI_Comm_free(&node);
}

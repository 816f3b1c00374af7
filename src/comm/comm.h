/* The communicator: what a rank knows of the others. Above this interface nothing knows how
 * ranks talk. A backend makes each rank's block of a float matrix readable by every rank
 * (`exchange`), waits for all ranks (`barrier`) and runs the two fused ops (and may move an
 * all-to-all's rows itself); the collectives are built on those here, with one arithmetic for
 * every backend: partial sums are added in rank order 0..N-1, so shm, MPI, TP and SP give
 * bit-identical results and runs are deterministic. */
#ifndef LOOM_COMM_COMM_H
#define LOOM_COMM_COMM_H
#include <string.h>

#include "loom.h"

/* The GEMM a fused collective runs, block by block. For all-gather-matmul: consume the input
 * rows [row0, row0 + rows) of the gathered batch, found at x. For matmul-reduce-scatter:
 * compute this rank's partial product for output rows [row0, row0 + rows) into y. */
typedef void (*comm_gather_gemm)(void *ctx, const float *x, size_t ldx, int row0, int rows);
typedef void (*comm_partial_gemm)(void *ctx, int row0, int rows, float *y, size_t ldy);

/* The job's ranks: dp data-parallel replicas of pp pipeline stages of tp tensor-parallel ranks,
 * numbered world rank = (stage * dp + replica) * tp + tp rank. TP is fastest because its
 * collectives are the most frequent and the widest: mpirun fills a machine's slots with
 * consecutive ranks, so a TP group stays on one machine. The replicas of a stage come next
 * because a mixture-of-experts layer's all-to-all spans them (GROUP_EP), every layer of every
 * step; stages come last because a stage boundary carries one hand-over a microbatch, the
 * cheapest traffic to put between machines. (vLLM orders DP x PP x TP; with pp = 1 the two
 * agree.) */
typedef struct comm_layout {
    int tp, dp, pp;
} comm_layout;

/* The communicators a job's world splits into (comm_split): each rank is in one group of each
 * kind. */
typedef enum comm_group {
    GROUP_WORLD,   /* every rank of the job */
    GROUP_REPLICA, /* one data-parallel replica's pp x tp ranks: rank = stage * tp + tp rank */
    GROUP_TP,      /* one stage of one replica: its tp ranks, which tensor parallelism shards across */
    GROUP_EP,      /* one stage of every replica: dp x tp ranks, rank = replica * tp + tp rank,
                      which expert parallelism places the experts across */
    COMM_N_GROUPS
} comm_group;

static inline int comm_layout_size(const comm_layout *l) { return l->tp * l->dp * l->pp; }
static inline int comm_stage_of(const comm_layout *l, int w) { return w / (l->tp * l->dp); }
static inline int comm_replica_of(const comm_layout *l, int w) { return w / l->tp % l->dp; }
/* How many ranks a group of kind g holds, and how many such groups the job has. */
int comm_group_size(const comm_layout *l, comm_group g);
int comm_group_count(const comm_layout *l, comm_group g);
/* Which group of kind g world rank w is in, and (local) its rank there. */
int comm_group_instance(const comm_layout *l, comm_group g, int w, int *local);
/* The world rank of rank r of group `instance` of kind g. */
int comm_group_member(const comm_layout *l, comm_group g, int instance, int r);

typedef struct comm_backend {
    const char *name;
    int chunks; /* a fused op's block moves in this many chunks (see comm_chunk_rows) */
    /* Publishes mine ([rows, cols[rank]], row stride ld); blocks[r] receives rank r's block as a
     * contiguous [rows, cols[r]] matrix, readable until this rank's next exchange. */
    int (*exchange)(loom_comm *c, const float *mine, size_t ld, int rows, const int *cols, const float **blocks,
                    loom_err *err);
    int (*barrier)(loom_comm *c, loom_err *err);
    void (*free)(loom_comm *c);
    /* Async TP (see comm_all_gather_matmul / comm_matmul_reduce_scatter), which the plain
     * reduce-scatter is built on too. */
    int (*all_gather_matmul)(loom_comm *c, const float *shard, size_t lds, int rows, int cols, comm_gather_gemm f,
                             void *ctx, loom_err *err);
    int (*matmul_reduce_scatter)(loom_comm *c, int rows, int cols, comm_partial_gemm f, void *ctx, float *out,
                                 size_t ldo, loom_err *err);
    /* Pipeline and data parallelism (see comm_split, comm_send_rows). split: this rank's
     * communicator among the ranks of its group g of the job (c is the job's), made with comm_new
     * (comm_split fills in the group fields). send/recv: n contiguous floats to rank dst / from
     * rank src of c (never c's own rank), delivered in order between each pair of ranks. NULL in
     * the single-rank backend, which has no peer. */
    int (*split)(loom_comm *c, comm_group g, loom_comm **out, loom_err *err);
    int (*send)(loom_comm *c, int dst, const float *data, size_t n, loom_err *err);
    int (*recv)(loom_comm *c, int src, float *data, size_t n, loom_err *err);
    /* Expert parallelism: the rows of comm_all_to_all_rows, called once every rank's counts
     * are in c->a2a and each rank's outgoing rows are packed in `in`; out as there. Optional:
     * NULL moves them with `exchange`, which shows every rank's whole message to every rank:
     * on shm that is each rank reading its part of its peers' slots in place, over MPI it
     * would carry every row to every rank. */
    int (*all_to_all)(loom_comm *c, const float *in, int cols, float *out, size_t ldo, loom_err *err);
} comm_backend;

struct loom_comm {
    int rank, size;
    /* Which group of which job this is: the job's layout, the kind of group, and which group of
     * that kind (comm_group_instance); comm_world_rank maps a rank of it to the job's. */
    comm_layout layout;
    comm_group group;
    int instance;
    /* The backends' deadline is this times the collective one: COMM_HANDOVER_WAIT during a
     * stage hand-over (send, receive, the logits' broadcast), 1 otherwise. */
    int deadline_scale;
    const comm_backend *be;
    void *impl;
    char *phase; /* what this rank is doing, for fault reports (shm: in the arena) */
    char own_phase[96];
    double blocked_s;     /* time spent inside collectives */
    int *cols, *next;     /* [size] scratch */
    const float **blocks; /* [size] scratch */
    float *scratch;       /* packing space, grown to the largest need once */
    size_t scratch_cap;
    int32_t *a2a; /* [size][size + 1] the all-to-all's counts (see comm_a2a_rows) */
};

/* Inside an all-to-all, once every rank's counts are in: the rows rank s sends rank d, and at
 * d == size the most rank s takes (its max_rows). */
/* The job's rank of rank r of c. */
static inline int comm_world_rank(const loom_comm *c, int r) {
    return comm_group_member(&c->layout, c->group, c->instance, r);
}

static inline int comm_a2a_rows(const loom_comm *c, int s, int d) { return c->a2a[(size_t)s * (c->size + 1) + d]; }
/* Where rank s's rows for rank d start: among s's outgoing rows, which are grouped by
 * destination (send_off), and among d's incoming ones, grouped by source (recv_off). With
 * d == size / s == size: all of s's outgoing / d's incoming rows. */
static inline size_t comm_a2a_send_off(const loom_comm *c, int s, int d) {
    size_t n = 0;
    for (int k = 0; k < d; k++) n += comm_a2a_rows(c, s, k);
    return n;
}
static inline size_t comm_a2a_recv_off(const loom_comm *c, int s, int d) {
    size_t n = 0;
    for (int k = 0; k < s; k++) n += comm_a2a_rows(c, k, d);
    return n;
}

/* dst[rows, cols] (contiguous) = src's rows, whose stride is ld: a block as backends publish it. */
static inline void comm_pack_rows(float *dst, const float *src, size_t ld, int rows, int cols) {
    for (int i = 0; i < rows; i++) memcpy(dst + (size_t)i * cols, src + (size_t)i * ld, cols * sizeof *dst);
}

/* The reverse: a contiguous [rows, cols] block into dst's rows, whose stride is ld. */
static inline void comm_unpack_rows(float *dst, size_t ld, const float *src, int rows, int cols) {
    for (int i = 0; i < rows; i++) memcpy(dst + (size_t)i * ld, src + (size_t)i * cols, cols * sizeof *dst);
}

/* A communicator: the parts every backend shares, over impl, the backend's state, which it takes
 * (be->free frees it, also when this fails). NULL with err set when out of memory, or when impl
 * is NULL (its own allocation failed and said so). */
loom_comm *comm_new(int rank, int size, const comm_backend *be, void *impl, loom_err *err);
/* Single-rank communicator (tp=1); NULL when out of memory. */
loom_comm *comm_local(void);
void comm_free(loom_comm *c);

/* out = sum over ranks of in, added in rank order. [rows, cols], row strides ldi/ldo. */
int comm_all_reduce(loom_comm *c, const float *in, size_t ldi, float *out, size_t ldo, int rows, int cols,
                    loom_err *err);
/* Rank r holds [rows, widths[r]]; out gets it at columns col0[r]. */
int comm_all_gather_cols(loom_comm *c, const float *in, size_t ldi, float *out, size_t ldo, int rows, const int *col0,
                         const int *widths, loom_err *err);

/* Expert parallelism's dispatch and combine: each rank sends each rank rows of its own. in holds
 * this rank's outgoing rows grouped by destination, send_rows[d] of them for rank d, rank 0's
 * first ([sum, cols], row stride ldi). On return out holds the rows every rank sent this one,
 * grouped by source in rank order (source s's from row recv_rows[0] + ... + recv_rows[s - 1]),
 * row stride ldo, each bit for bit as sent; recv_rows[s] is how many came from rank s (learnt
 * inside the call). Zero-row messages are fine; cols is the same on every rank; in and out do
 * not overlap. Every rank's counts and max_rows reach every rank before any row moves, so a
 * rank that would receive more than its max_rows rows (or a negative count) is refused alike
 * on every rank, in an error naming it and its counts, and no rank is left waiting. The
 * combine is the same call with send_rows = the dispatch's recv_rows: every row goes back to
 * the rank, and the position, it came from. */
int comm_all_to_all_rows(loom_comm *c, const float *in, size_t ldi, const int *send_rows, int cols, float *out,
                         size_t ldo, int max_rows, int *recv_rows, loom_err *err);

/* Sequence parallelism: the rows of a [rows, cols] batch are split in tp equal blocks (rows is
 * a multiple of tp), rank r owning block r. */
/* out[rows/tp, cols] = this rank's block of the sum over ranks of in[rows, cols]. */
int comm_reduce_scatter_rows(loom_comm *c, const float *in, size_t ldi, float *out, size_t ldo, int rows, int cols,
                             loom_err *err);
/* out[rows * tp, cols] = every rank's in[rows, cols], in rank order. */
int comm_all_gather_rows(loom_comm *c, const float *in, size_t ldi, float *out, size_t ldo, int rows, int cols,
                         loom_err *err);
/* out[i] = row want[i] of the batch, whose rows are split in blocks of `block` (rank r owns
 * [r*block, (r+1)*block)); in holds this rank's block. */
int comm_gather_rows_at(loom_comm *c, const float *in, size_t ldi, int block, const int32_t *want, int n_want,
                        float *out, size_t ldo, int cols, loom_err *err);

/* Async TP. all_gather_matmul: every rank holds rows [rank*rows, (rank+1)*rows) of a batch
 * (shard, [rows, cols]); f runs on the own block first, then on each peer's as soon as it is
 * there (shm: read in place from the peer's slot; mpi: received by point-to-point posted
 * ahead), so the GEMMs overlap the gather. matmul_reduce_scatter: f computes this rank's
 * partial for each rank's block of rows, the next peer's first and its own last, each sent to
 * its owner as soon as it is done; out[rows, cols] = the sum of the partials of this rank's
 * block, added in rank order like every other reduction. */
int comm_all_gather_matmul(loom_comm *c, const float *shard, size_t lds, int rows, int cols, comm_gather_gemm f,
                           void *ctx, loom_err *err);
int comm_matmul_reduce_scatter(loom_comm *c, int rows, int cols, comm_partial_gemm f, void *ctx, float *out, size_t ldo,
                               loom_err *err);
/* Over MPI the fused ops move a rank's block of rows in chunks, so that a block starts
 * travelling before all of it is computed and the receiver's GEMM starts on the first chunk
 * to arrive; their callbacks then get single chunks. Every sharded linear runs in the same
 * chunks in every mode (see the engine), so the BLAS sees the same shapes, and gives the same
 * bits, in TP, SP and async TP. On shm a block is read in place once whole, so chunks would
 * only cost GEMM efficiency (each chunk's GEMM packs the weights again): one chunk per block
 * there, and for short blocks everywhere. */
#define COMM_MAX_CHUNKS 4
static inline int comm_chunk_rows(const loom_comm *c, int block_rows) {
    int n = c->be->chunks;
    return block_rows >= 128 * n ? (block_rows + n - 1) / n : block_rows;
}

/* Pipeline and data parallelism. comm_split: this rank's communicator among the ranks of its
 * group of kind g (not GROUP_WORLD), split from the job's communicator `world` by every rank
 * of the world at once, and freed before the world; it shares the world's phase, and errors
 * name world ranks with their replica and stage. The groups' collectives and the world's may
 * interleave in any order.
 * comm_send_rows / comm_recv_rows: [rows, cols] (row stride ld; rows may be 0) to rank dst /
 * from rank src of c, never c's own rank; a pair of ranks talks over one communicator, and
 * each receiver takes its messages in the order they were sent. A send returns once the rows
 * are copied out (the caller may reuse its buffer); it waits only while two earlier messages
 * of this rank, to any receivers, are untaken (shm: its outbox has two slots of slot_bytes),
 * so a rank can send twice before its receiver takes the first. A receive whose size differs
 * from the message's is an error naming both ranks, and leaves the message where it is. Waits
 * have the collectives' deadline and name the peer they waited for. */
int comm_split(loom_comm *world, comm_group g, loom_comm **out, loom_err *err);
/* A stage legitimately waits for the previous stages' whole share of a microbatch (a long
 * prefill on a slow core: minutes), where a collective waits for a peer's few GEMMs; so a
 * hand-over may wait this many times --comm-timeout before the peer counts as stuck. */
#define COMM_HANDOVER_WAIT 10
int comm_send_rows(loom_comm *c, int dst, const float *in, size_t ld, int rows, int cols, loom_err *err);
int comm_recv_rows(loom_comm *c, int src, float *out, size_t ld, int rows, int cols, loom_err *err);
/* buf[0..n) of rank root to every rank of c (n the same on all). */
int comm_broadcast_floats(loom_comm *c, int root, float *buf, size_t n, loom_err *err);
/* "3", or where the job has several replicas or stages "3 (dp 1, stage 1)": rank r of c as
 * messages name it. comm_format_rank: the same for world rank w of a job (the supervisor's). */
const char *comm_rank_name(const loom_comm *c, int r, char *buf, size_t cap);
const char *comm_format_rank(int w, const comm_layout *l, char *buf, size_t cap);

/* Sums blocks[0..size) (each [rows, cols], contiguous) in rank order into out. */
void comm_sum_blocks(const loom_comm *c, const float **blocks, int rows, int cols, float *out, size_t ldo);

#endif

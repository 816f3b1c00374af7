/* Collectives on every backend and several rank counts, odd sizes included: all_reduce must
 * equal the rank-ordered sum computed here, bit for bit (that order is what makes TP, SP and
 * both backends agree), so must reduce_scatter's blocks, and all_gather must place every rank's
 * columns. Pipeline stages: a stage's communicator, its collectives interleaved with the
 * world's, and point-to-point chains from each stage to the next. Also the deadline: a rank
 * that never arrives (or never sends) fails the wait instead of hanging it, and is named with
 * its stage. The all-to-all: uneven counts with empty messages, strided rows, dispatch then
 * combine, and its refusals. `test_comm --mpi` and `--mpi-stages TP PP` are the modes mpirun
 * starts. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "comm/comm.h"
#include "mpirun.h"

#define ROWS 7
#define COLS 13
/* rows per rank: ROWS runs whole, BIG_ROWS over MPI in comm_chunk_rows chunks (the last shorter) */
#define BIG_ROWS   517
#define SLOT_BYTES ((size_t)BIG_ROWS * 5 * COLS * sizeof(float))

static float value(int rank, int i) { /* deterministic, rank-dependent, not exactly summable */
    uint32_t x = (uint32_t)(rank * 7919 + i) * 2654435761u;
    return (float)(x >> 8) / 16777216.0f * 2.0f - 1.0f + 1e-3f * rank;
}

/* The sum over world ranks [w0, w0 + n) of value(w, i), in rank order. */
static float sum_of(int w0, int n, int i) {
    float want = value(w0, i);
    for (int w = w0 + 1; w < w0 + n; w++) want += value(w, i);
    return want;
}

/* Expert parallelism's all-to-all. Rounds of uneven counts (rows rank s sends rank d), each
 * followed by an all-reduce so that the shm slot sets alternate under it; rows strided on both
 * sides (the padding must stay untouched), every row checked bit for bit against its
 * (round, source, destination, index). */
#define A2A_ROUNDS 5
static int a2a_rows(int round, int n, int s, int d) {
    switch (round) {
    case 0: return n > 1 && d == n - 1 ? 0 : (s * 3 + d * 5 + 1) % 4; /* zero-row messages; the last rank gets none */
    case 1: return d == 0 ? 2000 + 100 * s : 0; /* all to rank 0, in messages past MPI's eager size */
    case 2: return 400 + 13 * s + 7 * d;        /* nearly a slot's worth from each rank */
    case 3: return 0;                           /* nothing anywhere */
    default: return (s + 2 * d) % 5;
    }
}

static float a2a_value(int round, int s, int d, int i, int j) { return value(1000 * round + 64 * s + d, i * COLS + j); }

#define A2A_LDI (COLS + 2)
#define A2A_LDO (COLS + 3)
static const float pad = -7;

static int all_reduce_ok(loom_comm *c) {
    loom_err err = {{0}};
    float in[COLS], out[COLS];
    for (int j = 0; j < COLS; j++) in[j] = value(c->rank, j);
    if (comm_all_reduce(c, in, COLS, out, COLS, 1, COLS, &err)) return fprintf(stderr, "%s\n", err.msg), 0;
    int bad = 0;
    for (int j = 0; j < COLS; j++) {
        float want = sum_of(0, c->size, j);
        bad += memcmp(&want, &out[j], sizeof want) != 0;
    }
    return !bad;
}

static int a2a_rounds(loom_comm *c) {
    loom_err err = {{0}};
    int n = c->size, me = c->rank, bad = 0, send_rows[16], recv_rows[16];
    for (int round = 0; round < A2A_ROUNDS; round++) {
        int sent = 0, taken = 0;
        for (int k = 0; k < n; k++)
            sent += send_rows[k] = a2a_rows(round, n, me, k), taken += a2a_rows(round, n, k, me);
        float *in = malloc(((size_t)sent * A2A_LDI + 1) * sizeof *in);
        float *out = malloc(((size_t)taken + 1) * A2A_LDO * sizeof *out);
        for (int d = 0, i0 = 0; d < n; i0 += send_rows[d++])
            for (int i = 0; i < send_rows[d]; i++)
                for (int j = 0; j < A2A_LDI; j++)
                    in[(size_t)(i0 + i) * A2A_LDI + j] = j < COLS ? a2a_value(round, me, d, i, j) : pad;
        for (size_t i = 0; i < ((size_t)taken + 1) * A2A_LDO; i++) out[i] = pad;
        int max_rows = round % 2 ? taken + 5 : taken; /* a max that is exactly reached is fine */
        if (comm_all_to_all_rows(c, in, A2A_LDI, send_rows, COLS, out, A2A_LDO, max_rows, recv_rows, &err))
            return fprintf(stderr, "round %d: %s\n", round, err.msg), 1;
        for (int s = 0, i0 = 0; s < n; i0 += a2a_rows(round, n, s++, me)) {
            bad += recv_rows[s] != a2a_rows(round, n, s, me);
            for (int i = 0; i < a2a_rows(round, n, s, me); i++)
                for (int j = 0; j < A2A_LDO; j++) {
                    float want = j < COLS ? a2a_value(round, s, me, i, j) : pad;
                    bad += memcmp(&want, &out[(size_t)(i0 + i) * A2A_LDO + j], sizeof want) != 0;
                }
        }
        for (int j = 0; j < A2A_LDO; j++) bad += out[(size_t)taken * A2A_LDO + j] != pad;
        free(in), free(out);
        if (!all_reduce_ok(c)) return fprintf(stderr, "rank %d: the all-reduce after round %d\n", me, round), 1;
    }
    if (bad) fprintf(stderr, "rank %d of %d: %d mismatches in the all-to-all\n", me, n, bad);
    return bad;
}

/* Dispatch and combine as expert parallelism runs them: each of this rank's tokens goes to two
 * ranks (its experts' owners), its rows grouped by destination; each receiver transforms what it
 * got; the same call with the received counts as send counts brings the rows back, each to the
 * position it left from, and every token adds its two results in a fixed order. The transforms
 * scale by powers of two, so the expected values are exact however the compiler contracts them. */
#define TOP_K 2
static int a2a_owner(int rank, int n, int t, int k) { return k ? (t + 1) % n : (t * 7 + rank) % n; }
static float a2a_expert(float v, int owner) { return v * 0.5f + (float)(owner + 1); }

static int a2a_round_trip(loom_comm *c) {
    loom_err err = {{0}};
    int n = c->size, me = c->rank, tokens = 6 + me, bad = 0;
    int send_rows[16] = {0}, recv_rows[16], back_rows[16], slot[32], max_rows = n * (6 + n) * TOP_K;
    float x[32 * COLS], in[32 * TOP_K * A2A_LDI], back[32 * TOP_K * (COLS + 1)];
    float *mid = malloc((size_t)max_rows * COLS * sizeof *mid);
    for (int i = 0; i < tokens * COLS; i++) x[i] = value(100 + me, i);
    int m = 0; /* slot[t * TOP_K + k]: the outgoing row of token t's k-th choice */
    for (int d = 0; d < n; d++)
        for (int t = 0; t < tokens; t++)
            for (int k = 0; k < TOP_K; k++)
                if (a2a_owner(me, n, t, k) == d) {
                    memcpy(in + (size_t)m * A2A_LDI, x + t * COLS, COLS * sizeof *x);
                    slot[t * TOP_K + k] = m++;
                    send_rows[d]++;
                }
    if (comm_all_to_all_rows(c, in, A2A_LDI, send_rows, COLS, mid, COLS, max_rows, recv_rows, &err))
        return fprintf(stderr, "dispatch: %s\n", err.msg), 1;
    int got = 0;
    for (int s = 0; s < n; s++) got += recv_rows[s];
    for (int i = 0; i < got * COLS; i++) mid[i] = a2a_expert(mid[i], me);
    if (comm_all_to_all_rows(c, mid, COLS, recv_rows, COLS, back, COLS + 1, tokens * TOP_K, back_rows, &err))
        return fprintf(stderr, "combine: %s\n", err.msg), 1;
    for (int d = 0; d < n; d++) bad += back_rows[d] != send_rows[d];
    for (int t = 0; t < tokens; t++)
        for (int j = 0; j < COLS; j++) {
            float y = 0, want = 0;
            for (int k = 0; k < TOP_K; k++) {
                float w = 0.25f * (k + 1);
                y += w * back[slot[t * TOP_K + k] * (COLS + 1) + j];
                want += w * a2a_expert(x[t * COLS + j], a2a_owner(me, n, t, k));
            }
            bad += memcmp(&y, &want, sizeof y) != 0;
        }
    free(mid);
    if (bad) fprintf(stderr, "rank %d of %d: %d mismatches after dispatch and combine\n", me, n, bad);
    return bad;
}

/* Refusals, alike on every rank and leaving the communicator usable: a rank that would receive
 * more than its max_rows, and on shm a rank whose message overflows its slot (launch's slots
 * hold SLOT_BYTES). */
static int a2a_refusals(loom_comm *c) {
    loom_err err = {{0}};
    int n = c->size, me = c->rank, target = n > 1 ? 1 : 0, send_rows[16], recv_rows[16], bad = 0;
    int big = (SLOT_BYTES + 64) / (COLS * sizeof(float)) + 1; /* past the slot, which shm rounds up to 64 bytes */
    float *in = calloc((size_t)big * COLS, sizeof *in), *out = malloc(16 * COLS * sizeof *out);
    char want[256], counts[64] = "";
    loom_comm_set_phase(c, "the all-to-all test");
    for (int d = 0; d < n; d++) send_rows[d] = d == target ? 1 + me : 0;
    for (int s = 0; s < n; s++)
        snprintf(counts + strlen(counts), sizeof counts - strlen(counts), "%s%d", s ? ", " : "", 1 + s);
    int max_rows = n * (n + 1) / 2 - 1;
    snprintf(want, sizeof want,
             "rank %d: 'the all-to-all test': all-to-all: rank %d would receive %d rows, more than its max_rows of %d "
             "(%s from ranks 0 to %d in turn)",
             me, target, max_rows + 1, max_rows, counts, n - 1);
    if (!comm_all_to_all_rows(c, in, COLS, send_rows, COLS, out, COLS, me == target ? max_rows : 16, recv_rows, &err) ||
        !strstr(err.msg, want))
        bad++, fprintf(stderr, "rank %d: max_rows overflow gave '%s'\n", me, err.msg);
    if (!strcmp(c->be->name, "shm")) {
        for (int d = 0; d < n; d++) send_rows[d] = d == 0 ? (me == target ? big : 1) : 0;
        snprintf(want, sizeof want,
                 "rank %d: 'the all-to-all test': an exchange of %zu bytes from rank %d exceeds the shm slot", me,
                 (size_t)big * COLS * sizeof(float), target);
        if (!comm_all_to_all_rows(c, in, COLS, send_rows, COLS, out, COLS, 1 << 20, recv_rows, &err) ||
            !strstr(err.msg, want))
            bad++, fprintf(stderr, "rank %d: slot overflow gave '%s'\n", me, err.msg);
    }
    free(in), free(out);
    loom_comm_set_phase(c, "after the all-to-all test");
    return bad || !all_reduce_ok(c);
}

static int check_all_to_all(loom_comm *c) { return a2a_rounds(c) || a2a_round_trip(c) || a2a_refusals(c); }

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
    return bad ? 1 : check_all_to_all(c);
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
    if (bad)
        fprintf(stderr, "rank %d of %d, %d rows: fused ops differ from the plain ones in %d places\n", c->rank, n, rows,
                bad);
    return bad ? 1 : 0;
}

static int check_fused(loom_comm *c, void *arg) {
    (void)arg;
    return check_fused_rows(c, ROWS) || check_fused_rows(c, BIG_ROWS);
}

static int check_all(loom_comm *c, void *arg) { return check_collectives(c, arg) || check_fused(c, arg); }

/* Jobs of dp replicas of pp stages of tp ranks: each group's communicator (its shape, its
 * members, how it names ranks) and its collectives interleaved with the job's and the other
 * groups'. */
typedef struct layout {
    int tp, dp, pp;
} layout;

/* World rank w as errors name it, written out here rather than through comm_format_rank. */
static const char *name_of(const layout *l, int w, char *buf, size_t cap) {
    int stage = w / (l->tp * l->dp), replica = w / l->tp % l->dp;
    if (l->dp > 1 && l->pp > 1) snprintf(buf, cap, "%d (dp %d, stage %d)", w, replica, stage);
    else if (l->dp > 1) snprintf(buf, cap, "%d (dp %d)", w, replica);
    else if (l->pp > 1) snprintf(buf, cap, "%d (stage %d)", w, stage);
    else snprintf(buf, cap, "%d", w);
    return buf;
}

/* c's all-reduce against the sum of its members' values in its rank order, whose world ranks
 * are `members`. */
static int check_group_sum(loom_comm *c, const int *members, const float *in, loom_err *err) {
    float out[ROWS * (COLS + 1)];
    if (comm_all_reduce(c, in, COLS, out, COLS + 1, ROWS, COLS, err)) return fprintf(stderr, "%s\n", err->msg), -1;
    int bad = 0;
    for (int r = 0; r < ROWS; r++)
        for (int j = 0; j < COLS; j++) {
            float want = value(members[0], r * COLS + j);
            for (int k = 1; k < c->size; k++) want += value(members[k], r * COLS + j);
            bad += memcmp(&want, &out[r * (COLS + 1) + j], sizeof want) != 0;
        }
    return bad;
}

static int check_stage_collectives(loom_comm *w, loom_comm *rp, loom_comm *st, loom_comm *ep, const layout *l) {
    loom_err err = {{0}};
    int tp = l->tp, stage = w->rank / (tp * l->dp), replica = w->rank / tp % l->dp, first = w->rank / tp * tp, bad = 0;
    char name[32], want_name[32];
    name_of(l, w->rank, want_name, sizeof want_name);
    /* the replica: its stages' tp ranks, stage-major; the stage: tp consecutive ranks; the
     * experts' group: the stage's ranks of every replica, consecutive */
    int rp_members[64], tp_members[64], ep_members[64], all[64];
    for (int r = 0; r < l->pp * tp; r++) rp_members[r] = (r / tp * l->dp + replica) * tp + r % tp;
    for (int r = 0; r < tp; r++) tp_members[r] = first + r;
    for (int r = 0; r < l->dp * tp; r++) ep_members[r] = stage * l->dp * tp + r;
    for (int r = 0; r < w->size; r++) all[r] = r;
    bad += st->rank != w->rank % tp || st->size != tp || comm_world_rank(st, 0) != first;
    bad += rp->size != l->pp * tp || rp->rank != stage * tp + w->rank % tp;
    for (int r = 0; r < rp->size; r++) bad += comm_world_rank(rp, r) != rp_members[r];
    if (ep) {
        bad += ep->size != l->dp * tp || ep->rank != replica * tp + w->rank % tp;
        for (int r = 0; r < ep->size; r++) bad += comm_world_rank(ep, r) != ep_members[r];
    }
    loom_comm *named[] = {w, rp, st, ep};
    for (int i = 0; i < 4; i++)
        if (named[i]) bad += strcmp(comm_rank_name(named[i], named[i]->rank, name, sizeof name), want_name) != 0;
    float in[ROWS * COLS], gathered[ROWS * COLS * 8], bcast[ROWS * COLS];
    for (int i = 0; i < ROWS * COLS; i++) in[i] = value(w->rank, i);
    int root = rp->size - tp;           /* the last stage's first rank, as the engine's logits come */
    for (int rep = 0; rep < 3; rep++) { /* several rounds: each communicator's slots alternate */
        bad += check_group_sum(st, tp_members, in, &err);
        int from = comm_world_rank(rp, root);
        for (int i = 0; i < ROWS * COLS; i++) bcast[i] = rp->rank == root ? value(from + rep, i) : -1;
        if (comm_broadcast_floats(rp, root, bcast, ROWS * COLS, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
        for (int i = 0; i < ROWS * COLS; i++) bad += bcast[i] != value(from + rep, i);
        if (ep) bad += check_group_sum(ep, ep_members, in, &err);
        int32_t ints[3] = {st->rank, rep, first};
        if (loom_comm_broadcast_ints(st, ints, 3, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
        bad += ints[0] != 0 || ints[1] != rep || ints[2] != first;
        if (comm_all_gather_rows(st, in, COLS, gathered, COLS, ROWS, COLS, &err))
            return fprintf(stderr, "%s\n", err.msg), 1;
        for (int i = 0; i < ROWS * COLS * tp; i++)
            bad += gathered[i] != value(first + i / (ROWS * COLS), i % (ROWS * COLS));
        if (rp != w) bad += check_group_sum(rp, rp_members, in, &err);
        bad += check_group_sum(w, all, in, &err);
    }
    if (bad) fprintf(stderr, "rank %s: %d mismatches in the groups' collectives\n", want_name, bad);
    return bad;
}

/* Messages from stage s rank r to stage s+1 rank r of the same replica (rp: its communicator):
 * uneven and empty ones, rows strided on either side or not, all sent before the receiver (which
 * starts late) takes the first, so the sender waits for room. Then a receive of the wrong size,
 * which names both ranks and leaves the message for the right one. */
#define N_MSG 5
static const int msg_rows[N_MSG] = {5, 0, 3, 7, 1};

static float msg_value(int from, int k, int i) { return value(from + 100 * (k + 1), i); }

static int check_send_recv(loom_comm *rp, const layout *l) {
    loom_err err = {{0}};
    int stage = rp->rank / l->tp, bad = 0, me = comm_world_rank(rp, rp->rank);
    float buf[8 * (COLS + 5)];
    if (stage < l->pp - 1) {
        for (int k = 0; k < N_MSG; k++) {
            size_t ld = k % 2 ? COLS : COLS + 2;
            for (int i = 0; i < msg_rows[k]; i++)
                for (int j = 0; j < COLS; j++) buf[i * ld + j] = msg_value(me, k, i * COLS + j);
            if (comm_send_rows(rp, rp->rank + l->tp, buf, ld, msg_rows[k], COLS, &err))
                return fprintf(stderr, "%s\n", err.msg), 1;
        }
        for (int i = 0; i < 2 * COLS; i++) buf[i] = msg_value(me, N_MSG, i);
        if (comm_send_rows(rp, rp->rank + l->tp, buf, COLS, 2, COLS, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    }
    if (stage > 0) {
        int from = rp->rank - l->tp, from_w = comm_world_rank(rp, from);
        usleep(100 * 1000);
        for (int k = 0; k < N_MSG; k++) {
            size_t ld = k % 3 ? COLS + 5 : COLS;
            for (size_t i = 0; i < sizeof buf / sizeof *buf; i++) buf[i] = -7;
            if (comm_recv_rows(rp, from, buf, ld, msg_rows[k], COLS, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
            for (int i = 0; i < 8; i++)
                for (size_t j = 0; j < ld; j++)
                    bad += buf[i * ld + j] != (i < msg_rows[k] && j < COLS ? msg_value(from_w, k, i * COLS + j) : -7);
        }
        /* 3 rows asked for, 2 sent */
        char want[200], mine[32], peer[32];
        snprintf(want, sizeof want, "rank %s: '%s' expected %d floats from rank %s, whose message holds %d",
                 name_of(l, me, mine, sizeof mine), rp->phase, 3 * COLS, name_of(l, from_w, peer, sizeof peer),
                 2 * COLS);
        if (!comm_recv_rows(rp, from, buf, COLS, 3, COLS, &err) || !strstr(err.msg, want))
            bad++, fprintf(stderr, "rank %d: a receive of the wrong size gave '%s'\n", me, err.msg);
        if (comm_recv_rows(rp, from, buf, COLS, 2, COLS, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
        for (int i = 0; i < 2 * COLS; i++) bad += buf[i] != msg_value(from_w, N_MSG, i);
    }
    if (bad) fprintf(stderr, "rank %d: %d mismatches in the messages\n", me, bad);
    return bad;
}

static int check_stages(loom_comm *w, void *arg) {
    const layout *l = arg;
    loom_err err = {{0}};
    loom_comm *rp = w, *st = NULL, *ep = NULL;
    int bad = (l->dp > 1 && comm_split(w, GROUP_REPLICA, &rp, &err)) || comm_split(w, GROUP_TP, &st, &err) ||
              (l->dp > 1 && comm_split(w, GROUP_EP, &ep, &err));
    if (bad) fprintf(stderr, "%s\n", err.msg);
    /* the messages travel between group collectives: each group's next collective waits for them */
    else
        bad = check_stage_collectives(w, rp, st, ep, l) || check_send_recv(rp, l) ||
              check_stage_collectives(w, rp, st, ep, l);
    comm_free(ep);
    comm_free(st);
    if (rp != w) comm_free(rp);
    return bad;
}

/* Faults in a 2 x 2 job (rank 2 is stage 1's first): rank 0 never sends to rank 2, or rank 3
 * never joins its stage's collective; rank 2 must fail at the deadline naming the rank it waited
 * for, with its stage: a hand-over's deadline is COMM_HANDOVER_WAIT times the collectives'
 * (0.2 s here: 2 s), and rank 0 is still there when it passes. */
static int peer_never_sends(loom_comm *w, void *arg) {
    (void)arg;
    loom_err err = {{0}};
    float x = 1;
    loom_comm_set_phase(w, "the deadline test");
    if (w->rank == 1) return comm_send_rows(w, 3, &x, 1, 1, 1, &err) ? 1 : 0;
    if (w->rank == 3) return comm_recv_rows(w, 1, &x, 1, 1, 1, &err) ? 1 : 0;
    if (w->rank == 0) {
        sleep(3);
        return 0;
    }
    int rc = comm_recv_rows(w, 0, &x, 1, 1, 1, &err);
    if (rc && strstr(err.msg, "rank 2 (stage 1): 'the deadline test' waited 2 s for rank 0 (stage 0) ('the deadline"))
        return 3;
    fprintf(stderr, "rank %d: unexpected: rc %d, '%s'\n", w->rank, rc, err.msg);
    return 1;
}

/* The last TP group of the job (its ranks size - tp .. size - 1): its last rank never joins, and
 * its first must fail at the deadline naming it with its replica and stage. */
static int stage_peer_missing(loom_comm *w, void *arg) {
    const layout *l = arg;
    loom_err err = {{0}};
    loom_comm *st;
    if (comm_split(w, GROUP_TP, &st, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    int rc = 0, waiter = w->size - l->tp, missing = w->size - 1;
    if (w->rank == waiter) {
        float x = 1, y;
        char want[128], name[32];
        snprintf(want, sizeof want, "waited 1 s for rank %s ('start-up')", name_of(l, missing, name, sizeof name));
        loom_comm_set_phase(st, "the stage deadline test");
        rc = comm_all_reduce(st, &x, 1, &y, 1, 1, 1, &err);
        rc = rc && strstr(err.msg, want) ? 3 : 1;
        if (rc != 3) fprintf(stderr, "rank %d: unexpected: '%s'\n", waiter, err.msg);
    } else if (w->rank == missing) {
        sleep(2);
    }
    comm_free(st);
    return rc;
}

/* One rank: a stage of itself, and no peer to send to. */
static void check_local(void) {
    loom_err err = {{0}};
    loom_comm *w = comm_local(), *st, *again = NULL;
    float x = 1;
    CHECK(comm_split(w, GROUP_TP, &st, &err) == 0 && st->size == 1 && comm_world_rank(st, 0) == 0, "tp=1: split: %s",
          err.msg);
    CHECK(comm_send_rows(st, 0, &x, 1, 1, 1, &err) && strstr(err.msg, "send to rank 0 of a communicator of 1"),
          "tp=1: a send to itself must fail: '%s'", err.msg);
    CHECK(comm_recv_rows(w, 0, &x, 1, 1, 1, &err) && strstr(err.msg, "receive from rank 0"),
          "tp=1: a receive from itself must fail: '%s'", err.msg);
    CHECK(comm_split(st, GROUP_TP, &again, &err) && strstr(err.msg, "only the job's communicator splits"),
          "tp=1: a group split again: '%s'", err.msg);
    comm_free(st);
    comm_free(w);
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
    loom_comm_set_phase(c, "the deadline test");
    int rc = comm_all_reduce(c, &x, 1, &y, 1, 1, 1, &err);
    /* the expected failure: the deadline, or (a rank whose peer's deadline came first, the only
     * failure there can be here) the stop that failure sends every rank */
    if (rc && (strstr(err.msg, "waited 1 s for rank 1") || strstr(err.msg, "another rank failed"))) return 3;
    fprintf(stderr, "rank %d: unexpected: rc %d, '%s'\n", c->rank, rc, err.msg);
    return 1;
}

/* The job's error message lands in err. */
static int launch_layout(layout l, const char *backend, loom_rank_fn fn, double timeout, loom_err *err) {
    loom_launch_options o = {.tp = l.tp,
                             .dp = l.dp,
                             .pp = l.pp,
                             .backend = backend,
                             .slot_bytes = SLOT_BYTES,
                             .timeout_s = timeout,
                             .spin = -1};
    if (l.pp < 1) l.pp = 1; /* (a bad -pp is refused before any rank runs) */
    return loom_launch(&o, fn, &l, err);
}

static int launch_stages(int tp, int pp, const char *backend, loom_rank_fn fn, double timeout, loom_err *err) {
    return launch_layout((layout){tp, 1, pp}, backend, fn, timeout, err);
}

static int launch(int tp, const char *backend, loom_rank_fn fn, double timeout) {
    loom_err err = {{0}};
    return launch_stages(tp, 1, backend, fn, timeout, &err);
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--mpi")) return launch(0, "mpi", check_all, 30); /* MPI starts once */
    if (argc == 5 && !strcmp(argv[1], "--mpi-layout")) {
        loom_err err = {{0}};
        int rc = launch_layout((layout){atoi(argv[2]), atoi(argv[3]), atoi(argv[4])}, "mpi", check_stages, 30, &err);
        if (err.msg[0]) fprintf(stderr, "%s\n", err.msg);
        return rc;
    }
    /* tp=1 runs in this process and starts its OpenMP pool, which a later fork would inherit
     * half-alive (as loom_launch documents): so it goes last */
    loom_launch_options one = {.tp = 1,
                               .backend = "shm",
                               .slot_bytes = SLOT_BYTES,
                               .timeout_s = 30,
                               .spin = -1,
                               .isolate = true}; /* a single shm rank, where tp=1 would run in this process */
    CHECK(loom_launch(&one, check_collectives, NULL, &(loom_err){{0}}) == 0, "shm, one rank");
    for (int tp = 2; tp <= 5; tp++) CHECK(launch(tp, "shm", check_collectives, 30) == 0, "shm tp=%d", tp);
    for (int tp = 2; tp <= 4; tp++) CHECK(launch(tp, "shm", check_fused, 30) == 0, "shm fused ops, tp=%d", tp);
    for (int tp = 2; tp <= 3 && mpi_available("test_comm"); tp++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, MPIRUN " -np %d %s --mpi", tp, LOOM_TEST_SELF);
        CHECK(system(cmd) == 0, "mpi tp=%d", tp);
    }
    static const layout layouts[] = {{1, 1, 2}, {2, 1, 2}, {1, 1, 3}, {2, 1, 3}, {3, 1, 2},
                                     {1, 2, 1}, {2, 2, 1}, {3, 2, 1}, {2, 2, 2}, {1, 3, 2}};
    for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) {
        loom_err err = {{0}};
        const layout *l = &layouts[i];
        CHECK(launch_layout(*l, "shm", check_stages, 30, &err) == 0, "shm tp=%d x dp=%d x pp=%d: %s", l->tp, l->dp,
              l->pp, err.msg);
    }
    static const layout mpi_layouts[] = {{1, 1, 2}, {2, 1, 2}, {2, 2, 1}, {1, 2, 2}};
    for (size_t i = 0; i < sizeof mpi_layouts / sizeof *mpi_layouts && mpi_available("test_comm"); i++) {
        char cmd[1024];
        const layout *l = &mpi_layouts[i];
        snprintf(cmd, sizeof cmd, MPIRUN " -np %d %s --mpi-layout %d %d %d", l->tp * l->dp * l->pp, LOOM_TEST_SELF,
                 l->tp, l->dp, l->pp);
        CHECK(system(cmd) == 0, "mpi tp=%d x dp=%d x pp=%d", l->tp, l->dp, l->pp);
    }
    if (mpi_available("test_comm")) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, MPIRUN " -np 3 %s --mpi-layout 2 1 2 2>&1 | grep -q -- '%s'", LOOM_TEST_SELF,
                 "-tp 2 x -pp 2 = 4 ranks but mpirun started 3 (-np)");
        CHECK(system(cmd) == 0, "mpi: 3 ranks for -tp 2 x -pp 2 must be refused, saying so");
        snprintf(cmd, sizeof cmd, MPIRUN " -np 3 %s --mpi-layout 0 2 1 2>&1 | grep -q -- '%s'", LOOM_TEST_SELF,
                 "-dp 2 does not divide the 3 ranks mpirun started");
        CHECK(system(cmd) == 0, "mpi: 3 ranks for -dp 2 must be refused, saying so");
    }
    loom_err err = {{0}};
    CHECK(launch_stages(2, 2, "shm", peer_never_sends, 0.2, &err) == 3 &&
              strstr(err.msg, "rank 2 (stage 1) exited with status 3 during 'the deadline test'"),
          "a peer that never sends must fail the receiver at the deadline: '%s'", err.msg);
    CHECK(launch_stages(2, 2, "shm", stage_peer_missing, 1, &err) == 3 &&
              strstr(err.msg, "rank 2 (stage 1) exited with status 3 during 'the stage deadline test'"),
          "a stage peer that never arrives must fail the stage at the deadline: '%s'", err.msg);
    CHECK(launch_stages(2, -1, "shm", check_stages, 1, &err) == 2 && strstr(err.msg, "-pp -1: need at least one stage"),
          "-pp -1: '%s'", err.msg);
    CHECK(launch_layout((layout){2, -1, 1}, "shm", check_stages, 1, &err) == 2 &&
              strstr(err.msg, "-dp -1: need at least one replica"),
          "-dp -1: '%s'", err.msg);
    CHECK(launch_layout((layout){2, 2, 2}, "shm", stage_peer_missing, 1, &err) == 3 &&
              strstr(err.msg, "rank 6 (dp 1, stage 1) exited with status 3 during 'the stage deadline test'"),
          "a replica's peer that never arrives must fail it at the deadline, named with its replica: '%s'", err.msg);
    CHECK(launch(3, "shm", one_rank_missing, 1) == 3, "a missing rank must fail the others at the deadline");
    CHECK(launch(1, "shm", check_collectives, 30) == 0, "tp=1");
    check_local();
    return check_done();
}

/* How a server step reaches every rank. Rank 0 (HTTP and the schedulers) describes each engine
 * step of each data-parallel replica in a fixed-size message of ints, and sends each replica's
 * message to that replica's ranks (point to point) before running its own replica's step; the
 * other ranks loop on those messages, each running its replica's step on its shards. A
 * replica's first rank then sends its logit rows to rank 0, which samples for every request.
 *
 * A replica takes part in a round when it has tokens or sequence changes, or, when the replicas
 * step together (a mixture of experts spread over them: loom_engine_stats.lockstep), whenever
 * any replica runs: it then passes empty. An idle replica of a dense model hears nothing and
 * sleeps in its receive, using no CPU beside a busy one. Every replica hears from rank 0 at
 * least every KEEPALIVE_S (an empty message), so that a quiet server never trips the
 * collectives' deadline, and gets a "stop" message when the server drains.
 *
 * Message: [command, n_tokens, n_logits, n_ops, round_runs, ids[n], pos[n], seq[n],
 * logit_rows[n_logits], ops[n_ops]]; round_runs: some replica runs tokens this round. The ops
 * are the KV cache's sequence changes since the previous step, in the order rank 0 made them:
 * [OP_RESET, slot], [OP_ATTACH, slot, n, block ids...] or [OP_TRUNCATE, slot, len]
 * (speculative tokens the target rejected). Every rank's KV cache then takes the same block
 * decisions (runtime/kv_cache.h), as rank 0's copy of each replica's bookkeeping did when it
 * made them. */
#include "serve/steps.h"

#include <stdlib.h>
#include <string.h>

#include "util/alloc.h"
#include "util/err.h"

enum { HEADER = 5 };
#define KEEPALIVE_S 0.5 /* the most a replica goes without a message from rank 0 */
enum { OP_RESET = 1, OP_ATTACH = 2, OP_TRUNCATE = 3 };

/* a reset, an attach header and a truncation per slot, twice over (a slot released and reused
 * in one step), and the attached blocks: as many as one whole context holds, so that any
 * cached prefix fits beside the first admission of a step (a request the step's earlier
 * admissions leave no room for is first in the next one) */
static int max_ops(int max_seqs, int max_blocks) { return 2 * (2 + 3 + 3) * max_seqs + max_blocks; }

static int message_ints(int max_tokens, int max_seqs, int max_logits, int max_blocks) {
    return HEADER + 3 * max_tokens + max_logits + max_ops(max_seqs, max_blocks);
}

static int blocks_of(int positions, int block_size) { return (positions + block_size - 1) / block_size; }

size_t serve_step_bytes(const loom_engine_options *eo, int max_pos) {
    int bs = eo->block_size ? eo->block_size : LOOM_BLOCK_SIZE_DEFAULT;
    return (size_t)message_ints(eo->max_tokens, eo->max_seqs, eo->max_logits > 0 ? eo->max_logits : eo->max_seqs,
                                blocks_of(eo->max_ctx > 0 ? eo->max_ctx : max_pos, bs)) *
           sizeof(int32_t);
}

/* The arrays live inside the message, at offsets fixed by the maximum sizes, so a step is
 * built in place and sent as is. */
static void point(step *s) {
    int32_t *p = s->msg + HEADER;
    s->ids = p;
    s->pos = p + s->max_tokens;
    s->seq = p + 2 * s->max_tokens;
    s->logit_rows = p + 3 * s->max_tokens;
    s->ops = p + 3 * s->max_tokens + s->max_logits;
}

void step_clear(step *s) {
    point(s);
    s->cmd = STEP_RUN;
    s->n_tokens = s->n_logits = s->n_ops = 0;
}

int step_round_init(step_round *r, const loom_engine_stats *st, int block_size, int max_tokens, int max_seqs,
                    int max_logits, size_t vocab, bool rank0, loom_err *err) {
    memset(r, 0, sizeof *r);
    int max_blocks = blocks_of(st->max_ctx, block_size);
    int n = message_ints(max_tokens, max_seqs, max_logits, max_blocks), dp = st->replicas;
    const char *what = "a server round's messages";
    if (!(r->msg = mem_zalloc((size_t)dp * n, sizeof *r->msg, what, err)) ||
        !(r->of = mem_zalloc((size_t)dp, sizeof *r->of, what, err)) ||
        !(r->sent_at = mem_zalloc((size_t)dp, sizeof *r->sent_at, what, err)) ||
        !(r->logits = mem_zalloc((size_t)dp, sizeof *r->logits, what, err)) ||
        !(r->recv = mem_zalloc((size_t)dp, sizeof *r->recv, what, err))) {
        step_round_free(r);
        return -1;
    }
    r->dp = dp;
    r->stages = st->stages;
    r->tp = st->ranks / dp / st->stages;
    r->lockstep = st->lockstep;
    r->vocab = vocab;
    for (int d = 0; d < dp; d++) {
        step *s = &r->of[d];
        *s = (step){.msg = r->msg + (size_t)d * n,
                    .n_ints = n,
                    .max_tokens = max_tokens,
                    .max_seqs = max_seqs,
                    .max_logits = max_logits,
                    .max_ops = max_ops(max_seqs, max_blocks)};
        step_clear(s);
        if (rank0 && d &&
            !(r->recv[d] = mem_array((size_t)max_logits * vocab, sizeof(float), "a replica's logits", err))) {
            step_round_free(r);
            return -1;
        }
        r->logits[d] = r->recv[d];
    }
    return 0;
}

void step_round_free(step_round *r) {
    for (int d = 1; r->recv && d < r->dp; d++) free(r->recv[d]);
    free(r->recv);
    free(r->logits);
    free(r->of);
    free(r->sent_at);
    free(r->msg);
    memset(r, 0, sizeof *r);
}

void step_reset(step *s, loom_engine *book, int slot) {
    loom_engine_reset_seq(book, slot);
    s->ops[s->n_ops++] = OP_RESET;
    s->ops[s->n_ops++] = slot;
}

int step_truncate(step *s, loom_engine *book, int slot, int len, loom_err *err) {
    if (loom_engine_truncate_seq(book, slot, len, err)) return -1;
    int32_t *op = s->ops + s->n_ops;
    op[0] = OP_TRUNCATE, op[1] = slot, op[2] = len;
    s->n_ops += 3;
    return 0;
}

bool step_attach_fits(const step *s, int n) { return s->n_ops + 3 + n <= s->max_ops; }

int step_attach(step *s, loom_engine *book, int slot, const int32_t *blocks, int n, loom_err *err) {
    if (loom_engine_attach_prefix(book, slot, blocks, n, err)) return -1;
    int32_t *op = s->ops + s->n_ops;
    op[0] = OP_ATTACH, op[1] = slot, op[2] = n;
    memcpy(op + 3, blocks, (size_t)n * sizeof *blocks);
    s->n_ops += 3 + n;
    return 0;
}

/* A rank's engine: the sequence changes of its replica's step, as rank 0 made them. */
static int apply_ops(loom_engine *e, const step *s, int rank, loom_err *err) {
    for (int i = 0; i < s->n_ops;) {
        const int32_t *op = s->ops + i;
        if (op[0] == OP_RESET && i + 2 <= s->n_ops) {
            loom_engine_reset_seq(e, op[1]);
            i += 2;
        } else if (op[0] == OP_ATTACH && i + 3 <= s->n_ops && op[2] >= 0 && op[2] <= s->n_ops - i - 3) {
            if (loom_engine_attach_prefix(e, op[1], op + 3, op[2], err))
                return loom_err_prefix(err, "rank %d: a step from rank 0", rank);
            i += 3 + op[2];
        } else if (op[0] == OP_TRUNCATE && i + 3 <= s->n_ops) {
            if (loom_engine_truncate_seq(e, op[1], op[2], err))
                return loom_err_prefix(err, "rank %d: a step from rank 0", rank);
            i += 3;
        } else return loom_errf(err, "rank %d: malformed sequence change in a step from rank 0 (at int %d)", rank, i);
    }
    return 0;
}

/* This rank's replica's step: its sequence changes, then its tokens, or an empty pass when
 * another replica runs (round_runs). Then a replica's first rank sends its logit rows to rank
 * 0, which takes each replica's in turn. */
static int run_own(step_round *r, loom_engine *e, loom_comm *c, int replica, bool round_runs, loom_err *err) {
    step *s = &r->of[replica];
    int rank = loom_comm_rank(c);
    if (apply_ops(e, s, rank, err)) return -1;
    if (!round_runs) return 0;
    loom_batch b = {.n_tokens = s->n_tokens,
                    .ids = s->ids,
                    .pos = s->pos,
                    .seq = s->seq,
                    .n_logits = s->n_logits,
                    .logit_rows = s->logit_rows};
    const float *logits;
    loom_comm_set_phase(c, "serve: running a step of %d tokens", s->n_tokens);
    if (loom_forward(e, &b, &logits, err)) return -1;
    if (!rank) {
        r->logits[0] = logits;
        for (int d = 1; d < r->dp; d++) { /* replica d's first rank: stage 0, tp rank 0 (loom_launch's order) */
            if (!r->of[d].n_logits) continue;
            loom_comm_set_phase(c, "serve: logits of replica %d", d);
            if (loom_comm_recv_floats(c, d * r->tp, r->recv[d], (size_t)r->of[d].n_logits * r->vocab, err)) return -1;
        }
    } else if (rank == replica * r->tp && s->n_logits) {
        loom_comm_set_phase(c, "serve: sending replica %d's logits", replica);
        if (loom_comm_send_floats(c, 0, logits, (size_t)s->n_logits * r->vocab, err)) return -1;
    }
    return 0;
}

/* Whether replica d's ranks hear this round (see the top of the file). */
static bool takes_part(const step_round *r, int d, bool round_runs, double now) {
    const step *s = &r->of[d];
    return s->cmd == STEP_STOP || s->n_tokens || s->n_ops || (r->lockstep && round_runs) ||
           now - r->sent_at[d] >= KEEPALIVE_S;
}

int step_round_run(step_round *r, loom_engine *e, loom_comm *c, double now, loom_err *err) {
    bool round_runs = false;
    for (int d = 0; d < r->dp; d++) round_runs |= r->of[d].cmd == STEP_RUN && r->of[d].n_tokens > 0;
    for (int d = 0; d < r->dp; d++) {
        step *s = &r->of[d];
        if (!takes_part(r, d, round_runs, now)) continue;
        int32_t h[HEADER] = {s->cmd, s->n_tokens, s->n_logits, s->n_ops, round_runs};
        memcpy(s->msg, h, sizeof h);
        r->sent_at[d] = now;
        for (int st = 0; st < r->stages; st++)
            for (int t = 0; t < r->tp; t++) {
                int w = (st * r->dp + d) * r->tp + t; /* loom_launch's order */
                if (!w) continue;
                loom_comm_set_phase(c, "serve: sending replica %d's step of %d tokens to rank %d", d, s->n_tokens, w);
                if (loom_comm_send_ints(c, w, s->msg, s->n_ints, err)) return -1;
            }
    }
    return r->of[0].cmd == STEP_RUN ? run_own(r, e, c, 0, round_runs, err) : 0;
}

int step_round_follow(step_round *r, loom_engine *e, loom_comm *c, int replica, loom_err *err) {
    int rank = loom_comm_rank(c);
    step *s = &r->of[replica];
    for (;;) {
        loom_comm_set_phase(c, "serve: waiting for a step from rank 0");
        if (loom_comm_recv_ints(c, 0, s->msg, s->n_ints, err)) return -1;
        point(s);
        s->cmd = s->msg[0], s->n_tokens = s->msg[1], s->n_logits = s->msg[2], s->n_ops = s->msg[3];
        if (s->cmd == STEP_STOP) return 0;
        if (s->cmd != STEP_RUN || s->n_tokens < 0 || s->n_tokens > s->max_tokens || s->n_logits < 0 ||
            s->n_logits > s->max_logits || s->n_ops < 0 || s->n_ops > s->max_ops)
            return loom_errf(err,
                             "rank %d: malformed step for replica %d from rank 0 (%d tokens, %d logits, %d ints "
                             "of sequence changes)",
                             rank, replica, s->n_tokens, s->n_logits, s->n_ops);
        if (run_own(r, e, c, replica, s->msg[4] != 0, err)) return -1;
    }
}

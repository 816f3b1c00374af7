/* How a server step reaches every rank. Rank 0 (HTTP and the scheduler) describes each engine
 * step in one fixed-size message of ints and broadcasts it through the communicator before
 * running it; the other ranks loop on those messages, running the same steps on their shards.
 * An idle rank 0 sends an empty step every second, so that a quiet server never trips the
 * collectives' deadline, and a "stop" message when it drains.
 *
 * Message: [command, n_tokens, n_logits, n_ops, ids[n], pos[n], seq[n], logit_rows[n_logits],
 * ops[n_ops]]. The ops are the KV cache's sequence changes since the previous step, in the
 * order rank 0 made them: [OP_RESET, slot], [OP_ATTACH, slot, n, block ids...] or
 * [OP_TRUNCATE, slot, len] (speculative tokens the target rejected). Every rank's KV cache then
 * takes the same block decisions (runtime/kv_cache.h). */
#include "serve/steps.h"

#include <stdlib.h>
#include <string.h>

#include "util/alloc.h"
#include "util/err.h"

enum { HEADER = 4 };
enum { OP_RESET = 1, OP_ATTACH = 2, OP_TRUNCATE = 3 };

/* a reset, an attach header and a truncation per slot, twice over (a slot released and reused
 * in one step), and the attached blocks */
static int max_ops(int max_seqs) { return 2 * (2 + 3 + 3) * max_seqs + STEP_MAX_ATTACHED_BLOCKS; }

static int message_ints(int max_tokens, int max_seqs, int max_logits) {
    return HEADER + 3 * max_tokens + max_logits + max_ops(max_seqs);
}

size_t serve_step_bytes(const loom_engine_options *eo) {
    return (size_t)message_ints(eo->max_tokens, eo->max_seqs, eo->max_logits > 0 ? eo->max_logits : eo->max_seqs) *
           sizeof(int32_t);
}

int step_init(step *s, int max_tokens, int max_seqs, int max_logits, loom_err *err) {
    s->n_ints = message_ints(max_tokens, max_seqs, max_logits);
    if (!(s->msg = mem_zalloc((size_t)s->n_ints, sizeof *s->msg, "a server step's message", err))) return -1;
    s->max_tokens = max_tokens;
    s->max_seqs = max_seqs;
    s->max_logits = max_logits;
    s->max_ops = max_ops(max_seqs);
    step_clear(s);
    return 0;
}

void step_free(step *s) { free(s->msg); }

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

void step_reset(step *s, loom_engine *e, int slot) {
    loom_engine_reset_seq(e, slot);
    s->ops[s->n_ops++] = OP_RESET;
    s->ops[s->n_ops++] = slot;
}

int step_truncate(step *s, loom_engine *e, int slot, int len, loom_err *err) {
    if (loom_engine_truncate_seq(e, slot, len, err)) return -1;
    int32_t *op = s->ops + s->n_ops;
    op[0] = OP_TRUNCATE, op[1] = slot, op[2] = len;
    s->n_ops += 3;
    return 0;
}

bool step_attach_fits(const step *s, int n) { return s->n_ops + 3 + n <= s->max_ops; }

int step_attach(step *s, loom_engine *e, int slot, const int32_t *blocks, int n, loom_err *err) {
    if (loom_engine_attach_prefix(e, slot, blocks, n, err)) return -1;
    int32_t *op = s->ops + s->n_ops;
    op[0] = OP_ATTACH, op[1] = slot, op[2] = n;
    memcpy(op + 3, blocks, (size_t)n * sizeof *blocks);
    s->n_ops += 3 + n;
    return 0;
}

/* Another rank: the sequence changes of a step, as rank 0 made them. */
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

static int run_tokens(loom_engine *e, const step *s, const float **logits, loom_err *err) {
    if (s->cmd != STEP_RUN || !s->n_tokens) return 0;
    loom_batch b = {.n_tokens = s->n_tokens,
                    .ids = s->ids,
                    .pos = s->pos,
                    .seq = s->seq,
                    .n_logits = s->n_logits,
                    .logit_rows = s->logit_rows};
    return loom_forward(e, &b, logits, err);
}

int step_run(loom_engine *e, loom_comm *c, step *s, const float **logits, loom_err *err) {
    if (loom_comm_size(c) > 1) {
        int32_t h[HEADER] = {s->cmd, s->n_tokens, s->n_logits, s->n_ops};
        memcpy(s->msg, h, sizeof h);
        loom_comm_set_phase(c, "serve: sending a step of %d tokens", s->n_tokens);
        if (loom_comm_broadcast_ints(c, s->msg, s->n_ints, err)) return -1;
    }
    return run_tokens(e, s, logits, err);
}

int step_follow(loom_engine *e, loom_comm *c, step *s, loom_err *err) {
    int rank = loom_comm_rank(c);
    for (;;) {
        loom_comm_set_phase(c, "serve: waiting for a step from rank 0");
        if (loom_comm_broadcast_ints(c, s->msg, s->n_ints, err)) return -1;
        point(s);
        s->cmd = s->msg[0], s->n_tokens = s->msg[1], s->n_logits = s->msg[2], s->n_ops = s->msg[3];
        if (s->cmd == STEP_STOP) return 0;
        if (s->n_tokens < 0 || s->n_tokens > s->max_tokens || s->n_logits < 0 || s->n_logits > s->max_logits ||
            s->n_ops < 0 || s->n_ops > s->max_ops)
            return loom_errf(err,
                             "rank %d: malformed step from rank 0 (%d tokens, %d logits, %d ints of sequence "
                             "changes)",
                             rank, s->n_tokens, s->n_logits, s->n_ops);
        loom_comm_set_phase(c, "serve: running a step of %d tokens", s->n_tokens);
        const float *logits;
        if (apply_ops(e, s, rank, err) || run_tokens(e, s, &logits, err)) return -1;
    }
}

/* How a server step reaches every rank. Rank 0 (HTTP and the scheduler) describes each engine
 * step in one fixed-size message of ints and broadcasts it through the communicator before
 * running it; the other ranks loop on those messages, running the same steps on their shards.
 * An idle rank 0 sends an empty step every second, so that a quiet server never trips the
 * collectives' deadline, and a "stop" message when it drains.
 *
 * Message: [command, n_tokens, n_logits, n_reset, ids[n], pos[n], seq[n], logit_rows[n_logits],
 * reset_slots[n_reset]]. */
#include "serve/steps.h"

#include <stdlib.h>
#include <string.h>

#include "util/alloc.h"
#include "util/err.h"

enum { HEADER = 4 };

static int message_ints(int max_tokens, int max_seqs) { return HEADER + 3 * max_tokens + 2 * max_seqs; }

size_t serve_step_bytes(const loom_engine_options *eo) {
    return (size_t)message_ints(eo->max_tokens, eo->max_seqs) * sizeof(int32_t);
}

int step_init(step *s, int max_tokens, int max_seqs, loom_err *err) {
    s->n_ints = message_ints(max_tokens, max_seqs);
    if (!(s->msg = mem_zalloc((size_t)s->n_ints, sizeof *s->msg, "a server step's message", err))) return -1;
    s->max_tokens = max_tokens;
    s->max_seqs = max_seqs;
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
    s->reset = p + 3 * s->max_tokens + s->max_seqs;
}

void step_clear(step *s) {
    point(s);
    s->cmd = STEP_RUN;
    s->n_tokens = s->n_logits = s->n_reset = 0;
}

/* What every rank does with a step: forget the slots it frees, run its tokens. */
static int run_local(loom_engine *e, const step *s, const float **logits, loom_err *err) {
    for (int i = 0; i < s->n_reset; i++) loom_engine_reset_seq(e, s->reset[i]);
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
        int32_t h[HEADER] = {s->cmd, s->n_tokens, s->n_logits, s->n_reset};
        memcpy(s->msg, h, sizeof h);
        loom_comm_set_phase(c, "serve: sending a step of %d tokens", s->n_tokens);
        if (loom_comm_broadcast_ints(c, s->msg, s->n_ints, err)) return -1;
    }
    return run_local(e, s, logits, err);
}

int step_follow(loom_engine *e, loom_comm *c, step *s, loom_err *err) {
    for (;;) {
        loom_comm_set_phase(c, "serve: waiting for a step from rank 0");
        if (loom_comm_broadcast_ints(c, s->msg, s->n_ints, err)) return -1;
        point(s);
        s->cmd = s->msg[0], s->n_tokens = s->msg[1], s->n_logits = s->msg[2], s->n_reset = s->msg[3];
        if (s->cmd == STEP_STOP) return 0;
        if (s->n_tokens < 0 || s->n_tokens > s->max_tokens || s->n_logits < 0 || s->n_logits > s->max_seqs ||
            s->n_reset < 0 || s->n_reset > s->max_seqs)
            return loom_errf(err, "rank %d: malformed step from rank 0 (%d tokens, %d logits, %d resets)",
                             loom_comm_rank(c), s->n_tokens, s->n_logits, s->n_reset);
        loom_comm_set_phase(c, "serve: running a step of %d tokens", s->n_tokens);
        const float *logits;
        if (run_local(e, s, &logits, err)) return -1;
    }
}

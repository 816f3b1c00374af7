/* One engine step of the server, per data-parallel replica, and how the steps of a round reach
 * every rank (see steps.c). */
#ifndef LOOM_SERVE_STEPS_H
#define LOOM_SERVE_STEPS_H
#include "loom.h"

enum step_cmd { STEP_RUN = 1, STEP_STOP = 2 };

typedef struct step {
    int32_t cmd, n_tokens, n_logits, n_ops;
    int32_t *ids, *pos, *seq, *logit_rows, *ops; /* inside msg */
    int32_t *msg;
    int n_ints, max_tokens, max_seqs, max_logits, max_ops;
} step;

/* Bytes a step's message takes on the communicator, for an engine with eo's sizes. */
/* The largest step message of an engine made from eo for a model of max_pos positions (an
 * upper bound before the engine exists: its context may come out shorter). */
size_t serve_step_bytes(const loom_engine_options *eo, int max_pos);
/* Empties s for the next step (a run of nothing, no sequence changes). */
void step_clear(step *s);
/* Rank 0's changes to a replica's KV cache sequences, made at once on its mirror of that
 * replica's engine (book, loom_engine_mirror_new) and on the replica's ranks, in the same order,
 * before the step's tokens: slot's sequence forgotten (its blocks given back), the empty slot
 * started with n cached blocks (from loom_engine_match_prefix), which needs room in the step
 * (step_attach_fits: else try the next step, where any match fits), or cut back (speculative tokens its last step ran
 * and the target rejected). */
void step_reset(step *s, loom_engine *book, int slot);
bool step_attach_fits(const step *s, int n);
int step_truncate(step *s, loom_engine *book, int slot, int len, loom_err *err);
int step_attach(step *s, loom_engine *book, int slot, const int32_t *blocks, int n, loom_err *err);

/* A round: every data-parallel replica's step (one replica: one step), each sent to its
 * replica's ranks. */
typedef struct step_round {
    int dp, stages, tp;
    bool lockstep;        /* every replica passes whenever one runs (loom_engine_stats.lockstep) */
    step *of;             /* [dp] */
    int32_t *msg;         /* [dp][of[0].n_ints] */
    double *sent_at;      /* rank 0: [dp] when each replica last heard from it */
    const float **logits; /* rank 0: [dp] each replica's logit rows of the round (its own: the engine's) */
    float **recv;         /* rank 0: [dp] where the other replicas' rows arrive */
    size_t vocab;
} step_round;

/* 0, or -1 with err set when out of memory (r then needs no step_round_free). block_size: the
 * KV cache's, so that a step has room to attach a whole context's blocks. */
int step_round_init(step_round *r, const loom_engine_stats *st, int block_size, int max_tokens, int max_seqs,
                    int max_logits, size_t vocab, bool rank0, loom_err *err);
void step_round_free(step_round *r);
/* Rank 0, at monotonic time `now` (seconds): sends each replica's step to its ranks (those that
 * take part in the round), runs its own replica's step, and collects every replica's logit rows
 * into r->logits. */
int step_round_run(step_round *r, loom_engine *e, loom_comm *c, double now, loom_err *err);
/* Other ranks: run their replica's steps of the rounds rank 0 sends until it sends STEP_STOP (0)
 * or a collective fails; a replica's first rank sends its logit rows to rank 0. */
int step_round_follow(step_round *r, loom_engine *e, loom_comm *c, int replica, loom_err *err);

#endif

/* One engine step of the server, and how it reaches every rank (see steps.c). */
#ifndef LOOM_SERVE_STEPS_H
#define LOOM_SERVE_STEPS_H
#include "loom.h"

enum step_cmd { STEP_RUN = 1, STEP_STOP = 2 };

/* Cached blocks one step may attach, over all its sequences: a longer match waits a step. */
#define STEP_MAX_ATTACHED_BLOCKS 4096

typedef struct step {
    int32_t cmd, n_tokens, n_logits, n_ops;
    int32_t *ids, *pos, *seq, *logit_rows, *ops; /* inside msg */
    int32_t *msg;
    int n_ints, max_tokens, max_seqs, max_logits, max_ops;
} step;

/* Bytes a step's message takes on the communicator, for an engine with eo's sizes. */
size_t serve_step_bytes(const loom_engine_options *eo);
/* 0, or -1 with err set when out of memory (s then needs no step_free). */
int step_init(step *s, int max_tokens, int max_seqs, int max_logits, loom_err *err);
void step_free(step *s);
/* Empties s for the next step (a run of nothing, no sequence changes). */
void step_clear(step *s);
/* Rank 0's changes to the KV cache's sequences, made on e at once and on the other ranks, in
 * the same order, before the step's tokens: slot's sequence forgotten (its blocks given back),
 * the empty slot started with n cached blocks (from loom_engine_match_prefix), which needs
 * room in the step (step_attach_fits: else try the next step), or cut back. */
void step_reset(step *s, loom_engine *e, int slot);
bool step_attach_fits(const step *s, int n);
/* The slot's sequence cut back to len positions (loom_engine_truncate_seq): speculative tokens
 * its last step ran and the target rejected. */
int step_truncate(step *s, loom_engine *e, int slot, int len, loom_err *err);
int step_attach(step *s, loom_engine *e, int slot, const int32_t *blocks, int n, loom_err *err);
/* Rank 0: sends s to the other ranks, then runs its tokens here (if any). */
int step_run(loom_engine *e, loom_comm *c, step *s, const float **logits, loom_err *err);
/* Other ranks: run the steps rank 0 sends until it sends STEP_STOP (0) or a collective fails. */
int step_follow(loom_engine *e, loom_comm *c, step *s, loom_err *err);

#endif

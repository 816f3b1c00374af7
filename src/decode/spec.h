/* Speculative decoding's parts (loom.h's loom_speculator): the speculator holds the method's
 * proposer and the counters; each proposer has its own file (ngram.c, draft_model.c). */
#ifndef LOOM_DECODE_SPEC_H
#define LOOM_DECODE_SPEC_H
#include "loom.h"

/* One method's proposer; propose has loom_speculator_propose's contract. */
typedef struct proposer {
    int (*propose)(loom_speculator *s, int n, const int32_t *seqs, const int32_t *const *hist, const int *len,
                   const int *max_draft, int32_t *drafts, int *n_draft, loom_err *err);
    void (*reset_seq)(loom_speculator *s, int seq);
    void (*free)(loom_speculator *s);
} proposer;

struct loom_speculator {
    loom_spec_options o;
    loom_engine *target;
    int vocab; /* the target's */
    const proposer *p;
    loom_spec_stats stats;
    /* draft_model, eagle3: the draft's engine, its scratch for a pass */
    loom_engine *draft;
    int draft_vocab, draft_ctx, draft_max_tokens;
    int32_t *ids, *pos, *seq, *rows;
    int *fed; /* per proposing sequence: tokens still to feed this pass (scratch) */
    struct eagle3_state *eagle3;
};

extern const proposer ngram_proposer;
/* Loads nothing: builds the draft engine for s->o over draft with the target's options eo. */
int draft_model_init(loom_speculator *s, loom_model *draft, const loom_engine_options *eo, loom_err *err);
/* The draft's engine (s->draft) and its pass scratch, on the target's ranks with its parallelism
 * or whole on every rank (draft_tensor_parallel_size); capture_last keeps its last hidden state. */
int draft_engine_new(loom_speculator *s, loom_model *draft, const loom_engine_options *eo, bool capture_last,
                     loom_err *err);
/* The eagle3 method (eagle3.c): fc, d2t and the staged states beside the draft's engine. */
int eagle3_init(loom_speculator *s, loom_model *draft, const loom_engine_options *eo, loom_err *err);

#endif

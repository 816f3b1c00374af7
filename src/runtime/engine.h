/* The engine (engine.c): a model's plans for this rank, bound to its weights, with the executor
 * that runs them and, across stages, the pipeline; and the state of the sequences it holds.
 * Generation and serving read it; the plan printer shares its derivation of plan options. */
#ifndef LOOM_RUNTIME_ENGINE_H
#define LOOM_RUNTIME_ENGINE_H
#include "runtime/executor.h"
#include "runtime/kv_cache.h"
#include "runtime/model.h"
#include "runtime/pipeline.h"
#include "runtime/state_cache.h"
#include "runtime/vision.h"

struct loom_engine {
    loom_model *model;
    /* communicators made here: tp=1's, this stage's, this replica's, the stage's expert group */
    loom_comm *local_comm, *own_comm, *replica_comm, *ep_comm;
    loom_comm *job; /* every rank of the job (o->comm, or local_comm) */
    int replica;    /* data parallelism: this rank's replica (0 with one) */
    /* replicas in lockstep (loom_forward's agreement): every rank's token count in the last
     * pass, and how many replicas had tokens */
    bool lockstep;
    float *counts;
    int *count_col0, *count_width, busy;
    int layer0, layer1; /* this rank's pipeline stage runs decoder layers [layer0, layer1) */
    executor x;
    pipeline pl;
    int max_seqs, max_ctx, max_tokens, max_logits;
    kv_cache kv;    /* whose blocks hold each sequence's positions */
    state_cache sc; /* recurrent layers under prefix caching: which snapshot follows which block
                       (n_slots 0: none kept) */
    float *logits;
    bool reads_rows;      /* the tree takes rows beside the ids (engine_forward_rows) */
    vision_tower *vision; /* a vision-language model's (on every rank; run where stage 0 runs) */
    bool mirror;          /* loom_engine_mirror_new's: bookkeeping only, nothing runs */
    /* called after every pass with its batch (an Eagle3 speculator takes the pass's hidden
     * states from the captures); a failure fails the pass */
    int (*after_pass)(void *user, const loom_batch *b, loom_err *err);
    void *after_pass_user;
};

/* loom_forward for a tree that reads rows beside its ids (an Eagle3 draft): rows_in holds one
 * hidden state per token of b. */
int engine_forward_rows(loom_engine *e, const loom_batch *b, const float *rows_in, const float **logits, loom_err *err);
/* Capture slot `slot` of the last pass (loom_engine_options' capture: the captured layers in
 * order, then the last hidden state), its rows `*width` floats apart; NULL if not captured. */
const float *engine_captured(const loom_engine *e, int slot, int *width);

/* KV cache bytes one token of one sequence takes over `layers` decoder layers. */
size_t engine_kv_bytes_per_token(const loom_engine *e, int layers);
/* The pipeline stages o asks for, *pp of them, over m's decoder layers: stage s runs layers
 * [first[s], first[s + 1]) (malloc'd; NULL with err naming the flag and the stage at fault). */
int *engine_stages(const loom_model *m, const loom_engine_options *o, int *pp, loom_err *err);
/* The planner's options for rank `rank` of `tp` in replica `replica`, stage `stage` of `pp`,
 * running decoder layers [layer0, layer1), with o's parallelism: the one place engine options
 * become plan options. */
plan_options engine_plan_options(const loom_model *m, const loom_engine_options *o, int tp, int rank, int replica,
                                 int pp, int stage, int layer0, int layer1);
/* The data-parallel replicas o asks for (1 without). */
int engine_replicas(const loom_engine_options *o);

#endif

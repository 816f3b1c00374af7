/* Pipeline parallelism's schedule (pipeline.c): a pass through the stages in microbatches, each
 * run by this rank's executor as soon as the previous stage hands it over, then the logits to
 * every rank. */
#ifndef LOOM_RUNTIME_PIPELINE_H
#define LOOM_RUNTIME_PIPELINE_H
#include "runtime/executor.h"

typedef struct pipeline {
    int pp, stage;        /* stages, and this rank's */
    int max_microbatches; /* 0: the default split */
    int *mb_first;        /* scratch: microbatch bounds, their logit rows and where those go */
    int32_t *mb_rows, *mb_at;
    /* where this stage's time went (the bubble is the waiting; the hand-overs' waits are the
     * executor's wait_prev_s and wait_next_s) */
    double pass_s, wait_logits_s;
    long passes, microbatches;
} pipeline;

/* For a stage running batches of up to max_seqs sequences and max_logits logit rows. */
int pipeline_init(pipeline *pl, int pp, int stage, int max_microbatches, int max_seqs, int max_logits, loom_err *err);
void pipeline_free(pipeline *pl);
/* Runs b through this rank's stage in microbatches; every rank ends with b's logits (vocab wide)
 * in logits. */
int pipeline_forward(pipeline *pl, executor *x, const loom_batch *b, float *logits, size_t vocab, loom_err *err);
/* The share of the pipelined passes' time this stage spent waiting for the others. */
double pipeline_idle(const pipeline *pl, const exec_stats *st);
void pipeline_print(const pipeline *pl, const exec_stats *st, int rank, int layer0, int layer1, FILE *f);

#endif

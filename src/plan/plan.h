/* The execution plan of one rank: the module tree flattened once, at start-up, into a list of
 * steps over values, each value placed in a buffer by liveness so that buffers are reused and
 * steady-state forward passes allocate nothing (the CPU analogue of CUDA graphs). */
#ifndef LOOM_PLAN_PLAN_H
#define LOOM_PLAN_PLAN_H
#include "model/weights.h"
#include "plan/module.h"

typedef struct plan_value {
    int width;       /* columns this rank holds */
    int base;        /* value whose buffer holds it (itself unless a view) */
    int col;         /* first column inside the base's rows */
    bool logit_rows; /* rows are the logit rows, not all tokens */
    const op *producer;
    int first_def, last_use; /* step indices, for buffer assignment */
    int buffer;      /* for bases: buffer index */
} plan_value;

typedef struct plan_step {
    const op *op;
    const module *mod; /* owning module, for messages and the plan printer */
    int in[4], out;
    /* resolved parameters of this rank */
    wmat w[LIN_MAX_PARTS];
    const float *bias[LIN_MAX_PARTS];
    int col[LIN_MAX_PARTS]; /* output column of each part */
    const float *norm_w;
} plan_step;

typedef struct plan {
    int tp, rank;
    plan_step *steps;
    int n_steps, cap_steps;
    plan_value *values;
    int n_values, cap_values;
    int output; /* logits value */
    int n_buffers;
    size_t *buffer_width; /* floats per row of each buffer */
    bool *buffer_logit_rows;
    /* loading progress, by decoder layer */
    bool progress;
    int layers_done, layers_total;
} plan;

/* Flattens the tree for (tp, rank) and resolves every weight through ws (NULL: shapes only,
 * for printing); errors name the module and tensor. */
int plan_build(plan *p, const module *tree, int tp, int rank, weight_store *ws, bool progress,
               loom_err *err);
void plan_free(plan *p);

#endif

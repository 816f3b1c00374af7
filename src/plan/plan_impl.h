/* Pieces of plan construction shared by plan.c (flattening, buffers), shard.c (tensor
 * parallelism) and sp.c (sequence parallelism and its safety analysis). */
#ifndef LOOM_PLAN_IMPL_H
#define LOOM_PLAN_IMPL_H
#include "plan/plan.h"

int plan_new_value(plan *p, int width, const op *producer, row_kind rows, dist d);
plan_step *plan_new_step(plan *p, step_kind kind, const op *o, const module *m);
/* A collective step from value v; returns its output value. */
int plan_collective(plan *p, step_kind k, const op *o, const module *m, int v, int width, row_kind rows);

/* Tensor parallelism (shard.c) */
int shard_vocab(plan *p, const module *tree, loom_err *err);
/* The slices this rank reads of a linear (returns its output width on this rank), of the
 * embedding table's vocabulary shard (quantized like the LM head), and of an OP_MOE's experts
 * (each rank 1/tp of every expert's features, or under EP whole experts). */
int shard_linear(plan *p, plan_step *s, const linear_desc *l, int in_width, const module *m, loom_err *err);
int shard_embed(plan *p, plan_step *s, const linear_part *table, int hidden, const module *m, loom_err *err);
int shard_moe(plan *p, plan_step *s, const moe_desc *d, const module *m, loom_err *err);

/* Sequence parallelism (sp.c) */
bool sp_is_region(const plan *p, const module *parent, const module *child);
/* dist of an op's output given its inputs', or -1 with err when the op may not act on a partial
 * sum (the rules of _check_partial_output in vLLM's Transformers-backend sequence parallelism). */
int sp_output_dist(plan *p, const module *m, const op *o, const int *in, loom_err *err);
/* Region exit: its output must be the partial sum of its reductions; reduce-scatter it. */
int sp_exit_region(plan *p, const module *m, const op *call, int out, loom_err *err);
void sp_warn(plan *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Warnings for ops outside regions that may mix tokens or cannot be analysed. */
void sp_check_outside(plan *p, const module *m, const op *o);

/* Expert parallelism (ep.c) */
bool ep_is_region(const plan *p, const module *parent, const module *child);
/* A warning when expert parallelism is asked of a model without experts. */
void ep_check_model(plan *p, const module *tree);
/* Region entry: its input x as this rank's token rows (sliced from every token's under plain TP). */
int ep_enter_region(plan *p, const module *m, const op *call, int x);
/* Inside the region, before op o runs: every-token ops get the gathered input, and a partial sum
 * of every token meeting this rank's rows is reduce-scattered first. */
int ep_place_inputs(plan *p, const module *m, const op *o, int *in, loom_err *err);
/* The experts' output dist under EP: DIST_COMPLETE, or -1 where they cannot run expert-parallel. */
int ep_moe_dist(plan *p, const module *m, const int *in, loom_err *err);
int ep_exit_region(plan *p, const module *m, const op *call, int out, loom_err *err);

#endif

/* What the planner's files share. Beneath all of them, values.c's builders; on those, the rules
 * of dists (dist.c), tensor parallelism's slices (shard.c), and the region kinds: a table of
 * what a region does at its entry, to each op inside and at its exit, which region.c, sp.c and
 * ep.c implement and plan.c's flattening calls through region_of and p->region alone. */
#ifndef LOOM_PLAN_IMPL_H
#define LOOM_PLAN_IMPL_H
#include "plan/placement.h"
#include "plan/plan.h"

/* Builders (values.c) */
int plan_new_value(plan *p, int width, const op *producer, row_kind rows, dist d);
plan_step *plan_new_step(plan *p, step_kind kind, const op *o, const module *m);
/* A collective step from value v; returns its output value. */
int plan_collective(plan *p, step_kind k, const op *o, const module *m, int v, int width, row_kind rows);
/* A warning for the plan's user, once per text. */
void plan_warn(plan *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends a copy of text to the list (*list, *n of *cap): the warnings, async TP's notes. */
void plan_keep_text(plan *p, char ***list, int *n, size_t *cap, const char *text);
/* A region's record for `loom plan`, verified until found otherwise. */
plan_region *plan_add_region(plan *p, const op *call, step_kind entry, step_kind exit);

/* Dists (dist.c): the dist of op o's output on this rank given its inputs', or -1 with err when
 * o may not act on them; the region being flattened decides first where it has a rule. */
int op_output_dist(plan *p, const module *m, const op *o, const int *in, loom_err *err);

/* Tensor parallelism (shard.c) */
int shard_vocab(plan *p, const module *tree, loom_err *err);
/* The slices this rank reads of a linear (returns its output width on this rank), of the
 * embedding table's vocabulary shard (quantized like the LM head), and of an OP_MOE's experts
 * (each rank 1/tp of every expert's features, or under EP whole experts). */
int shard_linear(plan *p, plan_step *s, const linear_desc *l, int in_width, const module *m, loom_err *err);
int shard_embed(plan *p, plan_step *s, const linear_part *table, int hidden, const module *m, loom_err *err);
int shard_moe(plan *p, plan_step *s, const moe_desc *d, const module *m, loom_err *err);

/* output_dist's answer when the common rules should decide */
#define DIST_DEFAULT (-2)

/* A kind of region: a child of a decoder layer whose ops see the ranks' work differently from
 * the rest of the layer. Every hook but is_region may be NULL. */
struct region_kind {
    const char *name;
    /* whether `child`, called by `parent`, is a region of this kind */
    bool (*is_region)(const plan *p, const module *parent, const module *child);
    /* the region's first input x as its ops see it (NULL: as it is) */
    int (*enter)(plan *p, const module *m, const op *call, int x, loom_err *err);
    /* before op o runs inside: its inputs in[] placed where it needs them (NULL: as they are) */
    int (*place_inputs)(plan *p, const module *m, const op *o, int *in, loom_err *err);
    /* op o's output dist where this kind has its own rule, else DIST_DEFAULT (NULL: never) */
    int (*output_dist)(plan *p, const module *m, const op *o, const int *in, loom_err *err);
    /* a partial sum op o just made inside: completed where it is (NULL: it flows on to the exit) */
    int (*partial)(plan *p, const module *m, const op *o, int v, loom_err *err);
    /* the region's output out as the rest of the layer takes it */
    int (*exit)(plan *p, const module *m, const op *call, int out, loom_err *err);
};

/* Outside any region, and TP's mixture of experts, whose routed and shared experts' partials
 * are summed before one all-reduce (region.c); sequence parallelism's regions (sp.c); expert
 * parallelism's (ep.c). */
extern const region_kind region_plain, region_moe_reduction, region_sp, region_ep;
/* The kind of region `child` is when `parent` calls it, or NULL: a plain call, whose ops run in
 * the region around it. */
const region_kind *region_of(const plan *p, const module *parent, const module *child);

/* Sequence parallelism's warnings for an op outside its regions that may mix tokens or cannot
 * be analysed (sp.c). */
void sp_check_outside(plan *p, const module *m, const op *o);
/* A warning when expert parallelism is asked of a model without experts (ep.c). */
void ep_check_model(plan *p, const module *tree);

#endif

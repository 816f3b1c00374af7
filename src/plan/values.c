/* The builders every part of the planner makes its plan with: values, steps, collectives,
 * region records and warnings. They sit beneath plan.c, the region kinds (sp.c, ep.c, region.c)
 * and shard.c, and call none of them. Out of memory, a builder returns -1 or NULL with the
 * message in p->oom, which plan_build reports. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan_impl.h"
#include "util/alloc.h"

static const char *step_names[] = {"op",
                                   "moe (expert parallel)",
                                   "all_reduce",
                                   "all_gather (vocab)",
                                   "reduce_scatter",
                                   "all_gather",
                                   "all_gather (logit rows)",
                                   "all_gather_matmul",
                                   "matmul_reduce_scatter",
                                   "send",
                                   "recv",
                                   "slice (own rows)",
                                   "capture"};

const char *step_kind_name(step_kind k) { return step_names[k]; }

int plan_new_value(plan *p, int width, const op *producer, row_kind rows, dist d) {
    if (ARRAY_RESERVE(p->values, p->cap_values, (size_t)p->n_values + 1, "the plan's values", &p->oom)) return -1;
    int id = p->n_values++;
    p->values[id] = (plan_value){.width = width,
                                 .base = id,
                                 .rows = rows,
                                 .dist = d,
                                 .producer = producer,
                                 .def_step = p->n_steps - 1,
                                 .last_use = p->n_steps - 1};
    return id;
}

plan_step *plan_new_step(plan *p, step_kind kind, const op *o, const module *m) {
    if (ARRAY_RESERVE(p->steps, p->cap_steps, (size_t)p->n_steps + 1, "the plan's steps", &p->oom)) return NULL;
    plan_step *s = &p->steps[p->n_steps++];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->op = o;
    s->mod = m;
    s->n_in = (kind == STEP_OP || kind == STEP_EP_MOE) && o ? o->n_in : 1;
    s->layer = p->layers;
    return s;
}

/* When a row-parallel linear's own output is what a reduction completes, the bias moves to
 * after the reduction, where every rank adds it to the sum: the same place whether the sum is
 * an all-reduce, a reduce-scatter or a fused matmul-reduce-scatter, so all three give the same
 * bits. (With ops between the linear and the reduction, rank 0's partial keeps it.) */
int plan_collective(plan *p, step_kind k, const op *o, const module *m, int v, int width, row_kind rows) {
    const plan_value in = p->values[v]; /* a copy: plan_new_value may move the array */
    plan_step *prod = in.base == v && in.def_step >= 0 ? &p->steps[in.def_step] : NULL;
    weight_ref bias = {0};
    if (prod && prod->kind == STEP_OP && prod->out == v && prod->row_bias_ref.kind &&
        (k == STEP_ALL_REDUCE || k == STEP_REDUCE_SCATTER)) {
        bias = prod->row_bias_ref;
        prod->bias_ref[0] = (weight_ref){0};
    }
    plan_step *s = plan_new_step(p, k, o, m);
    if (!s) return -1;
    s->in[0] = v;
    s->bias_ref[0] = bias;
    if ((s->out = plan_new_value(p, width, o, rows, DIST_FULL)) < 0) return -1;
    if (in.width > p->max_comm_cols[in.rows]) p->max_comm_cols[in.rows] = in.width;
    return s->out;
}

void plan_warn(plan *p, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    for (int i = 0; i < p->n_warnings; i++)
        if (!strcmp(p->warnings[i], buf)) return;
    plan_keep_text(p, &p->warnings, &p->n_warnings, &p->cap_warnings, buf);
}

void plan_keep_text(plan *p, char ***list, int *n, size_t *cap, const char *text) {
    char *copy = mem_strdup(text, "a note of the plan", &p->oom);
    if (!copy || ARRAY_RESERVE(*list, *cap, (size_t)*n + 1, "the plan's notes", &p->oom)) {
        free(copy); /* plan_build fails on p->oom */
        return;
    }
    (*list)[(*n)++] = copy;
}

plan_region *plan_add_region(plan *p, const op *call, step_kind entry, step_kind exit) {
    if (ARRAY_RESERVE(p->regions, p->cap_regions, (size_t)p->n_regions + 1, "the plan's regions", &p->oom)) return NULL;
    plan_region *r = &p->regions[p->n_regions++];
    *r = (plan_region){.mod = call->child, .verified = true, .entry = entry, .exit = exit};
    return r;
}

/* Experts across a stage's ranks at run time (expert_parallel.c): the buffers of the
 * all-to-alls and the per-MoE-layer counts, and the one step it runs, given its inputs and
 * output by the executor. */
#ifndef LOOM_RUNTIME_EXPERT_PARALLEL_H
#define LOOM_RUNTIME_EXPERT_PARALLEL_H
#include "comm/comm.h"
#include "kernels/kernels.h"
#include "plan/plan.h"

/* The experts' GEMMs on this rank since the profile reset (routing included under TP-MoE). */
typedef struct expert_work {
    double seconds, flop;
    long pairs; /* (token, expert) pairs computed */
} expert_work;

typedef struct expert_parallel {
    int n_layers, layer; /* expert-parallel MoE steps in the plan; the next one in this pass */
    int max_rows;        /* rows a rank may receive in one all-to-all: the padded batch */
    int32_t *choice, *copy, *local_choice, *row_at; /* copy: the expert copy each choice goes to */
    float *weight, *local_weight;
    float *send, *recv, *sums, *back; /* dispatched rows, received; experts' sums, and those come back */
    int *send_rows, *recv_rows, *start;
    const char **name; /* [n_layers]: each MoE module */
    long *received;    /* [n_layers][ranks]: rows each rank received, since the profile reset */
    double *bytes;     /* [n_layers]: bytes between ranks, both all-to-alls */
    double *load;      /* [n_layers][load_width]: tokens this rank routed to each expert */
    int load_width;    /* the most experts a layer has */
    long passes;
    double waited_s; /* blocked in the all-to-alls (profile) */
    /* experts sliced across replicas (plan_step.experts_sliced): the tokens of every job rank's
     * pass, by world rank, which the engine's lockstep agrees on before the pass */
    const float *rank_tokens;
} expert_parallel;

/* Sized for p's expert-parallel steps over `ranks` ranks (tp of them sharing a pass's tokens, the
 * rest other replicas' ranks) and passes of up to max_tokens; adds the bytes it holds to *bytes.
 * Nothing to do (0) when p has none. */
int ep_init(expert_parallel *x, const plan *p, int ranks, int tp, int max_tokens, size_t *bytes, loom_err *err);
void ep_free(expert_parallel *x);
void ep_reset_stats(expert_parallel *x, int ranks);
/* A pass begins: its expert-parallel steps count from the first layer again. */
void ep_begin_pass(expert_parallel *x);

/* A MoE step whose experts span the ranks of c, over a pass of n_tokens: route this rank's rows
 * of in (its block of the pass's tokens among the tp ranks of `tp`; router logits in logits)
 * with sh; under expert parallelism dispatch them over c, run this rank's experts (s->experts)
 * and combine into out; with sliced experts gather every rank's rows, run this rank's share of
 * every expert over them and reduce-scatter into out. Adds the experts' work to *work and the
 * collectives' time to *comm_s. */
int ep_moe_step(expert_parallel *x, loom_comm *c, const loom_comm *tp, moe_scratch *scratch, const plan_step *s,
                const moe_shape *sh, const float *in, size_t ldx, const float *logits, size_t ldl, float *out,
                size_t ldo, int n_tokens, expert_work *work, double *comm_s, loom_err *err);

/* The report of engine_print_experts (runtime/profile.h): the experts' GEMM rate, and under expert parallelism
 * the rows each rank received per layer and the bytes between ranks. */
void ep_print(const expert_parallel *x, const expert_work *w, int rank, int ranks, FILE *f, bool per_layer);

#endif

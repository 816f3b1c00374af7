/* Pipeline parallelism's schedule. A pass splits into microbatches of whole sequences, which
 * flow through the stages one after another (GPipe's forward): while stage s runs microbatch
 * k, stage s - 1 already runs k + 1, so with m microbatches over pp stages each stage idles
 * for (pp - 1) of the m + pp - 1 slots of a pass instead of pp - 1 of pp. The stages agree on
 * the split without talking: every rank derives it from the same batch. The last stage makes
 * the logits and hands them to every rank, so that generation and serving go on as with one
 * stage. Microbatching changes what runs together, not what is computed: a token's rows go
 * through the same layers with the same weights, and attention reads only its own sequence. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/engine.h"
#include "util/err.h"

void pipeline_init(loom_engine *e, const loom_engine_options *o) {
    e->max_microbatches = o->pp_microbatches;
    if (e->pp == 1) return;
    e->mb_first = calloc((size_t)e->max_seqs + 1, sizeof *e->mb_first); /* a microbatch holds a sequence or more */
    e->mb_rows = calloc(e->max_logits, sizeof *e->mb_rows);
    e->mb_at = calloc(e->max_logits, sizeof *e->mb_at);
}

void pipeline_free(loom_engine *e) {
    free(e->mb_first);
    free(e->mb_rows);
    free(e->mb_at);
}

/* Microbatch k is tokens [first[k], first[k + 1]); returns how many. Cuts fall between
 * sequences, at the first one past each equal share of the tokens. */
static int split_microbatches(const loom_engine *e, const loom_batch *b, int *first) {
    int runs = 1;
    for (int i = 1; i < b->n_tokens; i++) runs += b->seq[i] != b->seq[i - 1];
    int m = e->max_microbatches;
    if (m <= 0) {
        m = 4 * e->pp;
        if (m > b->n_tokens / LOOM_PP_MICROBATCH_MIN_TOKENS) m = b->n_tokens / LOOM_PP_MICROBATCH_MIN_TOKENS;
    }
    if (m > runs) m = runs;
    if (m < 1) m = 1;
    int k = 0, left = runs - 1; /* cuts possible from here on */
    first[0] = 0;
    for (int i = 1; i < b->n_tokens && k < m - 1; i++) {
        if (b->seq[i] == b->seq[i - 1]) continue;
        if (left-- == m - 1 - k || (long)i * m >= (long)(k + 1) * b->n_tokens) first[++k] = i;
    }
    first[++k] = b->n_tokens;
    return k;
}

int pipeline_forward(loom_engine *e, const loom_batch *b, loom_err *err) {
    double t0 = omp_get_wtime();
    int m = split_microbatches(e, b, e->mb_first);
    bool last = e->stage == e->pp - 1;
    for (int k = 0; k < m; k++) {
        int t = e->mb_first[k], n = e->mb_first[k + 1] - t, nl = 0;
        for (int i = 0; i < b->n_logits; i++)
            if (b->logit_rows[i] >= t && b->logit_rows[i] < t + n) e->mb_rows[nl] = b->logit_rows[i] - t, e->mb_at[nl++] = i;
        loom_batch mb = {.n_tokens = n, .ids = b->ids + t, .pos = b->pos + t, .seq = b->seq + t, .n_logits = nl,
                         .logit_rows = e->mb_rows};
        if (engine_run_pass(e, &mb, err)) return -1;
        if (last) engine_take_logits(e, &mb, e->mb_at);
    }
    int root = (e->pp - 1) * e->comm->size;
    comm_set_phase(e->world, "stage %d: logits of %d rows from rank %d", e->stage, b->n_logits, root);
    double t1 = omp_get_wtime();
    if (comm_broadcast_floats(e->world, root, e->logits, (size_t)b->n_logits * e->model->cfg.vocab, err)) return -1;
    double t2 = omp_get_wtime();
    e->pipe.wait_logits_s += t2 - t1;
    e->pipe.pass_s += t2 - t0;
    e->pipe.passes++;
    e->pipe.microbatches += m;
    return 0;
}

int loom_engine_stage(const loom_engine *e) { return e->stage; }

double loom_engine_pipeline_idle(const loom_engine *e) {
    const pipeline_stats *s = &e->pipe;
    return s->pass_s > 0 ? (s->wait_prev_s + s->wait_next_s + s->wait_logits_s) / s->pass_s : 0;
}

void pipeline_print_profile(const loom_engine *e, FILE *f) {
    const pipeline_stats *s = &e->pipe;
    fprintf(f, "pipeline stage %d of %d (rank %d, layers %d..%d): %.2f microbatches a pass, idle %.1f%% of %.3f s",
            e->stage, e->pp, e->world->rank, e->layer0, e->layer1 - 1,
            s->passes ? (double)s->microbatches / s->passes : 0.0, 100 * loom_engine_pipeline_idle(e), s->pass_s);
    if (e->stage > 0) fprintf(f, "; waiting for stage %d's hidden state %.3f s", e->stage - 1, s->wait_prev_s);
    if (e->stage < e->pp - 1)
        fprintf(f, "; for stage %d to take ours %.3f s; for the logits %.3f s", e->stage + 1, s->wait_next_s,
                s->wait_logits_s);
    fputc('\n', f);
}

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

#include "runtime/pipeline.h"
#include "util/alloc.h"
#include "util/err.h"

int pipeline_init(pipeline *pl, int pp, int stage, int max_microbatches, int max_seqs, int max_logits, loom_err *err) {
    *pl = (pipeline){.pp = pp, .stage = stage, .max_microbatches = max_microbatches};
    if (pp == 1) return 0;
    /* a microbatch holds a sequence or more */
    const char *what = "the pipeline's microbatch tables";
    return (pl->mb_first = mem_zalloc((size_t)max_seqs + 1, sizeof *pl->mb_first, what, err)) &&
                   (pl->mb_rows = mem_zalloc(max_logits, sizeof *pl->mb_rows, what, err)) &&
                   (pl->mb_at = mem_zalloc(max_logits, sizeof *pl->mb_at, what, err))
               ? 0
               : -1;
}

void pipeline_free(pipeline *pl) {
    free(pl->mb_first);
    free(pl->mb_rows);
    free(pl->mb_at);
}

/* Microbatch k is tokens [first[k], first[k + 1]); returns how many. Cuts fall between
 * sequences, at the first one past each equal share of the tokens. */
static int split_microbatches(const pipeline *pl, const loom_batch *b, int *first) {
    int runs = 1;
    for (int i = 1; i < b->n_tokens; i++) runs += b->seq[i] != b->seq[i - 1];
    int m = pl->max_microbatches;
    if (m <= 0) {
        m = 4 * pl->pp;
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

int pipeline_forward(pipeline *pl, executor *x, const loom_batch *b, float *logits, size_t vocab, loom_err *err) {
    double t0 = omp_get_wtime();
    int m = split_microbatches(pl, b, pl->mb_first);
    bool last = pl->stage == pl->pp - 1;
    const float *image_rows = b->image_rows; /* each microbatch's own, from its first image token's */
    for (int k = 0; k < m; k++) {
        int t = pl->mb_first[k], n = pl->mb_first[k + 1] - t, nl = 0;
        for (int i = 0; i < b->n_logits; i++)
            if (b->logit_rows[i] >= t && b->logit_rows[i] < t + n)
                pl->mb_rows[nl] = b->logit_rows[i] - t, pl->mb_at[nl++] = i;
        loom_batch mb = {.n_tokens = n,
                         .ids = b->ids + t,
                         .pos = b->pos + t,
                         .seq = b->seq + t,
                         .n_logits = nl,
                         .logit_rows = pl->mb_rows,
                         .image_rows = image_rows};
        x->capture_row0 = t;
        if (executor_run_pass(x, &mb, err)) return -1;
        image_rows = executor_image_rows_after(x, image_rows, b->ids + t, n);
        if (last) executor_take_logits(x, &mb, logits, vocab, pl->mb_at);
    }
    int root = (pl->pp - 1) * x->comm->size;
    loom_comm_set_phase(x->world, "stage %d: logits of %d rows from rank %d", pl->stage, b->n_logits, root);
    double t1 = omp_get_wtime();
    if (comm_broadcast_floats(x->world, root, logits, (size_t)b->n_logits * vocab, err) ||
        executor_share_captures(x, b->n_tokens, err))
        return -1;
    x->capture_row0 = 0;
    double t2 = omp_get_wtime();
    pl->wait_logits_s += t2 - t1;
    pl->pass_s += t2 - t0;
    pl->passes++;
    pl->microbatches += m;
    return 0;
}

double pipeline_idle(const pipeline *pl, const exec_stats *st) {
    return pl->pass_s > 0 ? (st->wait_prev_s + st->wait_next_s + pl->wait_logits_s) / pl->pass_s : 0;
}

void pipeline_print(const pipeline *pl, const exec_stats *st, int rank, int layer0, int layer1, FILE *f) {
    fprintf(f, "pipeline stage %d of %d (rank %d, layers %d..%d): %.2f microbatches a pass, idle %.1f%% of %.3f s",
            pl->stage, pl->pp, rank, layer0, layer1 - 1, pl->passes ? (double)pl->microbatches / pl->passes : 0.0,
            100 * pipeline_idle(pl, st), pl->pass_s);
    if (pl->stage > 0) fprintf(f, "; waiting for stage %d's hidden state %.3f s", pl->stage - 1, st->wait_prev_s);
    if (pl->stage < pl->pp - 1)
        fprintf(f, "; for stage %d to take ours %.3f s; for the logits %.3f s", pl->stage + 1, st->wait_next_s,
                pl->wait_logits_s);
    fputc('\n', f);
}

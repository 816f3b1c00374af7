/* The draft_model method: a smaller model with the target's tokenizer decodes k tokens
 * greedily (as vLLM's draft proposer does), every sequence of the call in the same passes.
 * It runs in an engine of its own, on the target's ranks with its parallelism, or whole on every
 * rank (draft_tensor_parallel_size 1: no collectives, the same tokens everywhere), with a KV
 * cache of its own. That cache holds tokens the target may since have rejected: each call first
 * cuts every sequence back to what it shares with the history it is given, then feeds the rest. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "decode/spec.h"
#include "runtime/engine.h"
#include "runtime/sampling.h"
#include "util/alloc.h"
#include "util/err.h"

/* The token the draft's cache holds at position p of sequence seq. */
static int32_t cached_token(const loom_engine *e, int seq, int p) {
    const kv_cache *c = &e->kv;
    int32_t b = c->tables[(size_t)seq * c->table_width + p / c->block_size];
    return c->tokens[(size_t)b * c->block_size + p % c->block_size];
}

/* One draft pass over the queued tokens; each sequence whose last queued token ran gets its
 * greedy next token in next[i]. */
static int run_pass(loom_speculator *s, int nt, int nl, const int *row_seq, int32_t *next, loom_err *err) {
    const float *logits;
    loom_batch b = {nt, s->ids, s->pos, s->seq, nl, s->rows, NULL};
    if (loom_forward(s->draft, &b, &logits, err)) return loom_err_prefix(err, "the draft model");
    for (int r = 0; r < nl; r++) next[row_seq[r]] = logits_argmax(logits + (size_t)r * s->draft_vocab, s->draft_vocab);
    return 0;
}

static int draft_propose(loom_speculator *s, int n, const int32_t *seqs, const int32_t *const *hist, const int *len,
                         const int *max_draft, int32_t *drafts, int *n_draft, loom_err *err) {
    loom_engine *e = s->draft;
    int k = s->o.num_speculative_tokens, most = 0;
    int32_t next[n > 0 ? n : 1];
    int row_seq[n > 0 ? n : 1];
    /* catch up: each sequence keeps the prefix its cache shares with hist, then queues the rest */
    for (int i = 0; i < n; i++) {
        n_draft[i] = 0;
        int want = max_draft[i];
        if (len[i] + want > s->draft_ctx) want = s->draft_ctx - len[i];
        s->fed[i] = want > 0 ? want : 0; /* how many this sequence drafts */
        if (s->fed[i] > most) most = s->fed[i];
        if (!s->fed[i]) continue;
        int held = e->kv.len[seqs[i]], common = 0;
        while (common < held && common < len[i] - 1 && cached_token(e, seqs[i], common) == hist[i][common]) common++;
        if (loom_engine_truncate_seq(e, seqs[i], common, err)) return loom_err_prefix(err, "the draft model");
    }
    /* the first pass (more if the queued tokens are over a pass): every queued token */
    int nt = 0, nl = 0;
    for (int i = 0; i < n; i++) {
        if (!s->fed[i]) continue;
        for (int p = e->kv.len[seqs[i]]; p < len[i]; p++) {
            if (nt == s->draft_max_tokens) {
                if (run_pass(s, nt, nl, row_seq, next, err)) return -1;
                nt = nl = 0;
            }
            s->ids[nt] = hist[i][p], s->pos[nt] = p, s->seq[nt] = seqs[i];
            if (p == len[i] - 1) s->rows[nl] = nt, row_seq[nl++] = i;
            nt++;
        }
    }
    if (nt && run_pass(s, nt, nl, row_seq, next, err)) return -1;
    /* then one token a pass, for the sequences that want more */
    for (int j = 0; j < most; j++) {
        nt = 0;
        for (int i = 0; i < n; i++) {
            if (j >= s->fed[i]) continue;
            drafts[(size_t)i * k + j] = next[i];
            n_draft[i] = j + 1;
            if (j + 1 == s->fed[i]) continue;
            s->ids[nt] = next[i], s->pos[nt] = len[i] + j, s->seq[nt] = seqs[i];
            s->rows[nt] = nt, row_seq[nt] = i;
            nt++;
        }
        if (nt && run_pass(s, nt, nt, row_seq, next, err)) return -1;
    }
    return 0;
}

static void draft_reset_seq(loom_speculator *s, int seq) { loom_engine_reset_seq(s->draft, seq); }

static void draft_free(loom_speculator *s) {
    loom_engine_free(s->draft);
    free(s->ids), free(s->pos), free(s->seq), free(s->rows), free(s->fed);
}

static const proposer draft_proposer = {draft_propose, draft_reset_seq, draft_free};

int draft_model_init(loom_speculator *s, loom_model *draft, const loom_engine_options *eo, loom_err *err) {
    loom_model_info ti, di;
    loom_model_get_info(s->target->model, &ti);
    loom_model_get_info(draft, &di);
    if (di.vocab > ti.vocab)
        return loom_errf(err, "draft model %s: its vocabulary of %d is larger than the target's %d", di.source,
                         di.vocab, ti.vocab);
    s->p = &draft_proposer; /* from here on, loom_speculator_free cleans up */
    return draft_engine_new(s, draft, eo, false, err);
}

int draft_engine_new(loom_speculator *s, loom_model *draft, const loom_engine_options *eo, bool capture_last,
                     loom_err *err) {
    loom_model_info di;
    loom_model_get_info(draft, &di);
    int ranks = eo->comm ? loom_comm_size(eo->comm) : 1;
    int tp = ranks / (eo->pipeline_parallel > 1 ? eo->pipeline_parallel : 1);
    int dtp = s->o.draft_tensor_parallel_size ? s->o.draft_tensor_parallel_size : tp;
    if (dtp != 1 && dtp != tp)
        return loom_errf(err, "draft_tensor_parallel_size %d: the draft runs at the target's -tp %d or at 1", dtp, tp);
    loom_engine_options o = *eo;
    o.max_ctx = s->target->max_ctx < di.max_pos ? s->target->max_ctx : di.max_pos;
    o.prefix_caching = false;
    o.all_logits = false;
    o.max_logits = 0; /* one row a sequence: the draft is never verified */
    o.n_capture_layers = 0, o.capture_last = capture_last;
    o.sequence_parallel = o.async_tp = false; /* a few rows a sequence: nothing to shard by tokens */
    o.expert_parallel = o.expert_parallel && draft->cfg.n_experts; /* a dense draft beside a MoE target */
    if (eo->pipeline_parallel > 1) dtp = 1;                        /* its one layer runs whole beside every stage */
    if (dtp == 1 && ranks > 1) { /* whole on every rank: no communicator, the target's threads */
        o.comm = NULL;
        o.sequence_parallel = o.async_tp = o.expert_parallel = false;
        o.pipeline_parallel = 1, o.pp_layer_partition = NULL;
        o.threads = eo->threads > 0 ? eo->threads : omp_get_num_procs() / ranks > 0 ? omp_get_num_procs() / ranks : 1;
    }
    s->draft = loom_engine_new(draft, &o, err);
    if (!s->draft) return loom_err_prefix(err, "draft model %s", di.source);
    s->draft_vocab = draft->cfg.head_vocab;
    s->draft_ctx = s->draft->max_ctx;
    s->draft_max_tokens = s->draft->max_tokens;
    int seqs = s->draft->max_seqs, t = s->draft_max_tokens;
    const char *what = "the draft model's pass";
    if (!(s->ids = mem_array(t, sizeof *s->ids, what, err)) || !(s->pos = mem_array(t, sizeof *s->pos, what, err)) ||
        !(s->seq = mem_array(t, sizeof *s->seq, what, err)) || !(s->rows = mem_array(t, sizeof *s->rows, what, err)) ||
        !(s->fed = mem_array(seqs, sizeof *s->fed, what, err)))
        return -1;
    return 0;
}

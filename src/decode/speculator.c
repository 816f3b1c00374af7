/* The speculator (loom.h): the method's proposer behind one interface, verification of a
 * sequence's proposals against the target's logits, and vLLM's spec_decode counters. */
#include <stdlib.h>
#include <time.h>

#include "decode/spec.h"
#include "runtime/engine.h"
#include "runtime/sampling.h"
#include "util/alloc.h"
#include "util/err.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

loom_speculator *loom_speculator_new(loom_engine *target, loom_model *draft, const loom_spec_options *o,
                                     const loom_engine_options *eo, loom_err *err) {
    if (o->num_speculative_tokens < 1 || o->num_speculative_tokens > LOOM_SPEC_MAX_TOKENS) {
        loom_errf(err, "num_speculative_tokens %d: from 1 to %d", o->num_speculative_tokens, LOOM_SPEC_MAX_TOKENS);
        return NULL;
    }
    if (o->method == LOOM_SPEC_NGRAM && (o->prompt_lookup_min < 1 || o->prompt_lookup_max < o->prompt_lookup_min)) {
        loom_errf(err, "prompt_lookup_min %d and prompt_lookup_max %d: 1 <= min <= max", o->prompt_lookup_min,
                  o->prompt_lookup_max);
        return NULL;
    }
    if (eo->data_parallel > 1) {
        loom_errf(err, "speculative decoding runs with one data-parallel replica (data_parallel %d)",
                  eo->data_parallel);
        return NULL;
    }
    if (target->model->cfg.recurrent) {
        loom_errf(err,
                  "%s has recurrent layers (linear attention), whose state cannot be rolled back past a rejected "
                  "draft token: speculative decoding is not supported on it",
                  target->model->cfg.arch);
        return NULL;
    }
    if ((o->method != LOOM_SPEC_NGRAM) != (draft != NULL)) {
        loom_errf(err,
                  draft ? "a draft model was given to a method that runs none" : "method %s: no draft model was given",
                  o->method == LOOM_SPEC_EAGLE3 ? "eagle3" : "draft_model");
        return NULL;
    }
    loom_speculator *s = mem_zalloc(1, sizeof *s, "a speculator", err);
    if (!s) return NULL;
    s->o = *o;
    s->target = target;
    s->vocab = target->model->cfg.vocab;
    s->stats.k = o->num_speculative_tokens;
    s->p = &ngram_proposer;
    if ((o->method == LOOM_SPEC_DRAFT_MODEL && draft_model_init(s, draft, eo, err)) ||
        (o->method == LOOM_SPEC_EAGLE3 && eagle3_init(s, draft, eo, err))) {
        loom_speculator_free(s);
        return NULL;
    }
    return s;
}

int loom_spec_engine_options(const loom_spec_options *o, const loom_model *target, const loom_model *draft,
                             loom_engine_options *eo, loom_err *err) {
    int seqs = eo->max_seqs > 0 ? eo->max_seqs : 1;
    eo->max_logits = seqs * (o->num_speculative_tokens + 1);
    if (o->method != LOOM_SPEC_EAGLE3) return 0;
    const model_config *tc = &target->cfg, *dc = draft ? &draft->cfg : NULL;
    if (!dc || !dc->eagle3.on)
        return loom_errf(err, "method eagle3: %s is not an Eagle3 draft", dc ? draft->source : "no draft model");
    const eagle3_config *e = &dc->eagle3;
    if (e->target_hidden != tc->hidden)
        return loom_errf(err, "%s: the Eagle3 draft's target_hidden_size %d is not the target's hidden_size %d",
                         draft->source, e->target_hidden, tc->hidden);
    if (dc->vocab != tc->vocab)
        return loom_errf(err, "%s: the Eagle3 draft's vocab_size %d is not the target's %d", draft->source, dc->vocab,
                         tc->vocab);
    int layers = tc->n_layers, dflt[3] = {2, layers / 2, layers - 3};
    eo->n_capture_layers = 3;
    for (int j = 0; j < 3; j++) {
        eo->capture_layers[j] = e->n_aux ? e->aux_layers[j] : dflt[j];
        if (eo->capture_layers[j] < 0 || eo->capture_layers[j] >= layers)
            return loom_errf(err,
                             "%s: the Eagle3 draft reads the target's layer %d, which %s (of %d layers) does not "
                             "have%s",
                             draft->source, eo->capture_layers[j], tc->arch, layers,
                             e->n_aux ? "" : " (the default 2, L/2, L-3: set eagle_aux_hidden_state_layer_ids)");
    }
    return 0;
}

void loom_speculator_free(loom_speculator *s) {
    if (!s) return;
    s->p->free(s);
    free(s);
}

int loom_speculator_propose(loom_speculator *s, int n, const int32_t *seqs, const int32_t *const *hist, const int *len,
                            const int *max_draft, int32_t *drafts, int *n_draft, loom_err *err) {
    double t0 = now();
    int rc = s->p->propose(s, n, seqs, hist, len, max_draft, drafts, n_draft, err);
    s->stats.propose_s += now() - t0;
    return rc;
}

int loom_speculator_verify(loom_speculator *s, loom_sampler *smp, const float *logits, const int32_t *drafts,
                           int n_draft, int32_t *out) {
    int a = 0;
    bool accepted = true;
    for (; a < n_draft && accepted; a++) {
        out[a] = sampler_verify(smp, logits + (size_t)a * s->vocab, drafts[a], &accepted);
        if (accepted) s->stats.accepted_at[a]++;
    }
    int emitted = a; /* the accepted drafts, and the correction if one was rejected */
    if (accepted) out[emitted++] = sampler_next(smp, logits + (size_t)n_draft * s->vocab); /* the bonus token */
    if (n_draft) {
        s->stats.drafts++;
        s->stats.draft_tokens += n_draft;
        s->stats.accepted_tokens += emitted - 1;
    }
    return emitted;
}

void loom_speculator_reset_seq(loom_speculator *s, int seq) { s->p->reset_seq(s, seq); }

void loom_speculator_get_stats(const loom_speculator *s, loom_spec_stats *st) { *st = s->stats; }

void loom_speculator_reset_stats(loom_speculator *s) { s->stats = (loom_spec_stats){.k = s->o.num_speculative_tokens}; }

/* Sampling (see sampling.h). Greedy takes the first maximum, as torch.argmax does. Otherwise
 * softmax(logits / T), then min-p (tokens below min_p times the top probability dropped, after
 * the temperature, as vLLM does), then top-k, then top-p (smallest prefix by descending
 * probability whose mass reaches p), renormalised, and one draw from xorshift64*. */
#include "runtime/sampling.h"

#include <math.h>
#include <stdlib.h>

#include "util/alloc.h"
#include "util/err.h"

int sampler_init(sampler *s, const loom_sampling *cfg, int vocab, loom_err *err) {
    if (cfg->temperature < 0) return loom_errf(err, "--temp must be >= 0 (got %g)", cfg->temperature);
    if (cfg->top_k < 0) return loom_errf(err, "--top-k must be >= 0 (got %d)", cfg->top_k);
    if (!(cfg->top_p > 0 && cfg->top_p <= 1)) return loom_errf(err, "--top-p must be in (0, 1] (got %g)", cfg->top_p);
    if (!(cfg->min_p >= 0 && cfg->min_p <= 1)) return loom_errf(err, "--min-p must be in [0, 1] (got %g)", cfg->min_p);
    s->cfg = *cfg;
    s->state = cfg->seed * 0x9e3779b97f4a7c15ull + 1;
    s->vocab = vocab;
    s->prob = mem_array(vocab, sizeof *s->prob, "the sampler's probabilities", err);
    s->idx = s->prob ? mem_array(vocab, sizeof *s->idx, "the sampler's ranking", err) : NULL;
    if (s->idx) return 0;
    free(s->prob);
    s->prob = NULL;
    return -1;
}

void sampler_free(sampler *s) {
    free(s->prob);
    free(s->idx);
}

loom_sampler *loom_sampler_new(const loom_sampling *cfg, int vocab, loom_err *err) {
    loom_sampler *s = mem_zalloc(1, sizeof *s, "a sampler", err);
    if (s && sampler_init(s, cfg, vocab, err)) {
        free(s);
        return NULL;
    }
    return s;
}

void loom_sampler_free(loom_sampler *s) {
    if (!s) return;
    sampler_free(s);
    free(s);
}

static float uniform(sampler *s) {
    s->state ^= s->state >> 12;
    s->state ^= s->state << 25;
    s->state ^= s->state >> 27;
    return (float)((s->state * 0x2545f4914f6cdd1dull) >> 40) / 16777216.0f;
}

static int by_prob_desc(const void *a, const void *b, void *prob) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    float x = ((const float *)prob)[i], y = ((const float *)prob)[j];
    return x < y ? 1 : x > y ? -1 : (i > j) - (i < j);
}

/* The candidates sampler_next draws from at a temperature: s->prob[s->idx[0..keep)],
 * unnormalised, their sum in *sum; returns keep. */
static int candidates(sampler *s, const float *logits, float *sum) {
    int n = s->vocab;
    int32_t best = logits_argmax(logits, n);
    float inv_t = 1.0f / s->cfg.temperature;
    *sum = 0;
    for (int i = 0; i < n; i++) {
        /* relative to the most likely token's, which is 1: min-p compares with min_p itself */
        s->prob[i] = expf((logits[i] - logits[best]) * inv_t);
        if (s->prob[i] < s->cfg.min_p) s->prob[i] = 0;
        *sum += s->prob[i];
        s->idx[i] = i;
    }
    int keep = n;
    if (s->cfg.top_k > 0 || s->cfg.top_p < 1) {
        qsort_r(s->idx, n, sizeof *s->idx, by_prob_desc, s->prob);
        if (s->cfg.top_k > 0 && s->cfg.top_k < keep) keep = s->cfg.top_k;
        float kept = 0;
        for (int i = 0; i < keep; i++) kept += s->prob[s->idx[i]];
        if (s->cfg.top_p < 1) {
            float acc = 0;
            for (int i = 0; i < keep; i++) {
                acc += s->prob[s->idx[i]];
                if (acc >= s->cfg.top_p * kept) {
                    keep = i + 1;
                    break;
                }
            }
        }
        *sum = 0;
        for (int i = 0; i < keep; i++) *sum += s->prob[s->idx[i]];
    }
    return keep;
}

/* One draw from the candidates, leaving out `skip` (-1: none), whose mass sum excludes, and
 * those of probability 0 (dropped by min-p or a -inf logit), which rounding must not pick. */
static int32_t draw(sampler *s, int keep, float sum, int32_t skip) {
    float r = uniform(s) * sum, acc = 0;
    int32_t last = -1;
    for (int i = 0; i < keep; i++) {
        if (s->idx[i] == skip || !s->prob[s->idx[i]]) continue;
        acc += s->prob[s->idx[i]];
        last = s->idx[i];
        if (r < acc) return last;
    }
    return last;
}

int32_t logits_argmax(const float *logits, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

int32_t sampler_next(sampler *s, const float *logits) {
    if (s->cfg.temperature == 0) return logits_argmax(logits, s->vocab);
    float sum;
    int keep = candidates(s, logits, &sum);
    return draw(s, keep, sum, -1);
}

int32_t sampler_verify(sampler *s, const float *logits, int32_t draft, bool *accepted) {
    if (s->cfg.temperature == 0) {
        int32_t best = logits_argmax(logits, s->vocab);
        *accepted = best == draft;
        return best;
    }
    float sum, p = 0;
    int keep = candidates(s, logits, &sum);
    for (int i = 0; i < keep; i++)
        if (s->idx[i] == draft) p = s->prob[draft];
    /* the draft is one-hot: accepted with probability min(1, p/q) = p(draft); otherwise the
     * residual max(0, p - q), renormalised, is p without the draft */
    *accepted = p > 0 && uniform(s) * sum < p;
    if (*accepted || sum - p <= 0) return draft;
    return draw(s, keep, sum - p, draft);
}

int32_t loom_sampler_next(loom_sampler *s, const float *logits) { return sampler_next(s, logits); }

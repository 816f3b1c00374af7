/* A request's logits processing (see logits.h), in vLLM's order: allowed_token_ids, min_tokens and
 * logit_bias, then the penalties (repetition, frequency, presence), then the grammar's mask. Counting the output's tokens anew for each
 * row costs O(prompt + output) per token, small beside the forward pass, and keeps no per-request
 * table of the vocabulary's width. */
#include "serve/logits.h"

#include "serve/structured.h"

#include <math.h>
#include <string.h>

/* A token of the prompt, in count: a bit above any count of the output's tokens. */
#define IN_PROMPT (1 << 30)

/* The vLLM fields, without the grammar. */
static bool changes_logits(const request *r) {
    return r->n_allowed || r->presence_penalty != 0 || r->frequency_penalty != 0 || r->repetition_penalty != 1 ||
           r->n_bias || r->min_tokens > r->n_tokens;
}

bool request_processes_logits(const request *r) { return r->grammar || changes_logits(r); }

int32_t request_sample(request *r, const loom_model_info *info, const float *raw, logits_scratch *sc, loom_err *err) {
    const float *row = raw;
    if (changes_logits(r)) {
        request_process_logits(r, info, raw, sc->row, sc->count);
        row = sc->row;
    }
    if (!r->grammar) return loom_sampler_next(r->smp, row);
    int32_t t = structured_sample(r, row, info->vocab, sc->row, sc->allowed, err);
    return t < 0 || grammar_matcher_accept(r->gm, t, err) ? -1 : t;
}

void request_process_logits(const request *r, const loom_model_info *info, const float *raw, float *out,
                            int32_t *count) {
    if (r->n_allowed) {
        for (int i = 0; i < info->vocab; i++) out[i] = -INFINITY;
        for (int i = 0; i < r->n_allowed; i++) out[r->allowed_ids[i]] = raw[r->allowed_ids[i]];
    } else {
        memcpy(out, raw, (size_t)info->vocab * sizeof *out);
    }
    if (r->n_tokens < r->min_tokens) {
        for (int i = 0; i < info->n_eos && !r->sampling.ignore_eos; i++) out[info->eos_ids[i]] = -INFINITY;
        for (int i = 0; i < r->n_stop_ids; i++) out[r->stop_ids[i]] = -INFINITY;
    }
    for (int i = 0; i < r->n_bias; i++) out[r->bias_id[i]] += r->bias[i];
    bool repetition = r->repetition_penalty != 1;
    if (!repetition && r->presence_penalty == 0 && r->frequency_penalty == 0) return;
    for (int i = 0; i < r->n_tokens; i++) count[r->tokens[i].id]++;
    for (int i = 0; i < r->n_prompt && repetition; i++) count[r->prompt[i]] |= IN_PROMPT;
    /* each distinct token once: the first of its occurrences applies it and clears its count */
    for (int i = 0; i < r->n_prompt + r->n_tokens; i++) {
        int32_t t = i < r->n_prompt ? r->prompt[i] : r->tokens[i - r->n_prompt].id, c = count[t] & ~IN_PROMPT;
        if (!count[t]) continue;
        if (repetition) out[t] = out[t] > 0 ? out[t] / r->repetition_penalty : out[t] * r->repetition_penalty;
        out[t] -= r->frequency_penalty * (float)c;
        if (c) out[t] -= r->presence_penalty;
        count[t] = 0;
    }
}

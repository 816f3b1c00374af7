/* The one place where a request changes its logits before sampling (logits.c): what vLLM's
 * sampler does to a row before the temperature, for one request, then its grammar's mask
 * (structured.c). The scheduler calls it on a copy of each of the request's logit rows on rank
 * 0, where every parallel mode gathers them, so every rank agrees on the token.
 * Log-probabilities reported stay the raw model's. */
#ifndef LOOM_SERVE_LOGITS_H
#define LOOM_SERVE_LOGITS_H
#include "serve/request.h"

/* Whether r changes its logits at all, its grammar included (false: the raw row is sampled, and
 * speculative proposals can be verified against it). */
bool request_processes_logits(const request *r);

/* The scheduler's scratch for request_sample: [vocab] floats, [vocab] counts (zero), and a mask
 * of (vocab + 31) / 32 words. */
typedef struct logits_scratch {
    float *row;
    int32_t *count;
    uint32_t *allowed;
} logits_scratch;

/* r's next token from a raw row: processed (request_process_logits), masked by r's grammar, drawn
 * by r's sampler, and taken by its grammar's matcher; -1 with err when the grammar allows no
 * token. */
int32_t request_sample(request *r, const loom_model_info *info, const float *raw, logits_scratch *sc, loom_err *err);
/* out = raw (info->vocab wide) processed for r's next token: every token but allowed_token_ids
 * (if given) is -inf; min_tokens masks EOS (unless ignore_eos) and stop_token_ids to -inf while
 * r has fewer tokens; logit_bias is added; then
 * the penalties: repetition over the prompt's and the output's tokens (a positive logit
 * divided by it, a negative one multiplied), frequency (times the token's count in the
 * output) and presence (once for a token in the output) subtracted. count is [vocab] scratch,
 * zero, and left zero. */
void request_process_logits(const request *r, const loom_model_info *info, const float *raw, float *out,
                            int32_t *count);

#endif

/* Next-token sampling: greedy, temperature, top-k, top-p, from a seeded generator. */
#ifndef LOOM_RUNTIME_SAMPLING_H
#define LOOM_RUNTIME_SAMPLING_H
#include "loom.h"

/* loom.h's loom_sampler: embedded in a caller's struct with sampler_init/free, or made on the
 * heap with loom_sampler_new/free. */
typedef struct loom_sampler {
    loom_sampling cfg;
    uint64_t state;
    int vocab;
    float *prob; /* [vocab] scratch, allocated once */
    int32_t *idx;
} sampler;

int sampler_init(sampler *s, const loom_sampling *cfg, int vocab, loom_err *err);
void sampler_free(sampler *s);
int32_t sampler_next(sampler *s, const float *logits);
/* The greedy token: the first maximum of logits[0..n), as torch.argmax takes it. */
int32_t logits_argmax(const float *logits, int n);
/* Speculative verification of one drafted token against the target's logits: *accepted says
 * whether the draft stands, and the token to emit is returned (the draft, or a correction
 * drawn so that emitted tokens follow the distribution sampler_next draws from). Greedy: the
 * draft stands where it is the argmax. */
int32_t sampler_verify(sampler *s, const float *logits, int32_t draft, bool *accepted);

#endif

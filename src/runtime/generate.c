/* Text generation on sequence slot 0: chunked prefill of the prompt, then one token per
 * forward pass, sampled and streamed through the caller's callback until EOS or the limit. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "runtime/engine.h"
#include "runtime/sampling.h"
#include "util/alloc.h"
#include "util/err.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static bool is_eos(const model_config *c, int32_t id) {
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] == id) return true;
    return false;
}

/* Feeds tokens [0, n) of seq 0 starting at position `pos` in chunks of max_tokens; returns the
 * last token's logits. p and sq are max_tokens-long scratch (sq all zeros). */
static int feed(loom_engine *e, const int32_t *ids, int n, int pos, int32_t *p, const int32_t *sq, const float **logits,
                loom_err *err) {
    int rc = 0;
    for (int done = 0; done < n && !rc; done += e->max_tokens) {
        int k = n - done < e->max_tokens ? n - done : e->max_tokens;
        for (int i = 0; i < k; i++) p[i] = pos + done + i;
        int32_t last = k - 1;
        loom_batch b = {.n_tokens = k, .ids = ids + done, .pos = p, .seq = sq, .n_logits = 1, .logit_rows = &last};
        rc = loom_forward(e, &b, logits, err);
    }
    return rc;
}

int loom_generate(loom_engine *e, const int32_t *prompt, int n_prompt, int max_new, const loom_sampling *s,
                  loom_token_cb cb, void *user, loom_gen_stats *stats, loom_err *err) {
    const model_config *c = &e->model->cfg;
    *stats = (loom_gen_stats){.prompt_tokens = n_prompt};
    if (n_prompt <= 0) return loom_errf(err, "empty prompt: nothing to condition on (add BOS)");
    if (n_prompt + max_new > e->max_ctx)
        return loom_errf(err, "prompt (%d tokens) + %d new tokens exceed the context of %d", n_prompt, max_new,
                         e->max_ctx);
    sampler smp;
    if (sampler_init(&smp, s, c->vocab, err)) return -1;
    tok_decoder dec;
    tok_decoder_init(&dec);
    size_t cap = e->model->tok ? tokenizer_decode_cap(e->model->tok) + 1 : 1;
    char *piece = mem_alloc(cap, "a decoded piece", err);
    int32_t *pos = piece ? mem_array(e->max_tokens, sizeof *pos, "the positions", err) : NULL;
    int32_t *seq = pos ? mem_zalloc(e->max_tokens, sizeof *seq, "the sequence ids", err) : NULL;
    if (!seq) {
        free(piece), free(pos), sampler_free(&smp);
        return -1;
    }
    /* The decoder reads the prompt first, its text dropped: the completion then continues it
     * (a SentencePiece "▁was" after "The robot" keeps its space, which a decoder starting on
     * the completion strips), so prompt + completion is the decode of all the ids. */
    for (int i = 0; e->model->tok && i < n_prompt; i++)
        tokenizer_decode_next(e->model->tok, &dec, prompt[i], piece, cap - 1);
    loom_engine_reset_seq(e, 0);
    const float *logits;
    double t0 = now();
    int rc = feed(e, prompt, n_prompt, 0, pos, seq, &logits, err);
    stats->prefill_s = now() - t0;
    t0 = now();
    for (int i = 0; i < max_new && !rc; i++) {
        int32_t next = sampler_next(&smp, logits);
        stats->generated++;
        if (!s->ignore_eos && is_eos(c, next)) {
            stats->stopped_at_eos = true;
            break;
        }
        size_t len = e->model->tok ? tokenizer_decode_next(e->model->tok, &dec, next, piece, cap - 1) : 0;
        piece[len] = 0;
        if (cb && !cb(user, next, piece, len)) break;
        if (i + 1 < max_new) rc = feed(e, &next, 1, n_prompt + i, pos, seq, &logits, err);
    }
    if (e->model->tok && cb && !rc) {
        size_t len = tokenizer_decode_flush(e->model->tok, &dec, piece, cap - 1);
        piece[len] = 0;
        if (len) cb(user, -1, piece, len);
    }
    stats->decode_s = now() - t0;
    free(piece);
    free(pos);
    free(seq);
    sampler_free(&smp);
    return rc;
}

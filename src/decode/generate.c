/* Text generation on sequence slot 0: chunked prefill of the prompt, then decode passes,
 * sampled and streamed through the caller's callback until EOS or the limit: one token a pass,
 * or with a speculator the proposals it verifies and keeps (loom_speculator_verify). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static bool is_eos(const model_config *c, int32_t id) {
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] == id) return true;
    return false;
}

/* Feeds tokens [0, n) of seq 0 starting at position `pos` in chunks of max_tokens; returns the
 * last token's logits. p and sq are max_tokens-long scratch (sq all zeros). A vision-language
 * model's pictures (image_rows: one row per image token, in order) are never cut: a chunk that
 * would end inside one ends before it. */
static int feed(loom_engine *e, const int32_t *ids, int n, int pos, const float *image_rows, int32_t *p,
                const int32_t *sq, const float **logits, loom_err *err) {
    int rc = 0, image = image_rows ? e->x.image_token : -1; /* without rows, image tokens are plain */
    for (int done = 0, k; done < n && !rc; done += k) {
        k = n - done < e->max_tokens ? n - done : e->max_tokens;
        while (image >= 0 && done + k < n && k > 0 && ids[done + k] == image && ids[done + k - 1] == image) k--;
        if (k == 0)
            return loom_errf(err, "token %d: a picture's %d tokens do not fit a pass of %d (--max-num-batched-tokens)",
                             done, e->model->cfg.vision.tokens_per_image, e->max_tokens);
        for (int i = 0; i < k; i++) p[i] = pos + done + i;
        int32_t last = k - 1;
        loom_batch b = {.n_tokens = k,
                        .ids = ids + done,
                        .pos = p,
                        .seq = sq,
                        .n_logits = 1,
                        .logit_rows = &last,
                        .image_rows = image_rows};
        rc = loom_forward(e, &b, logits, err);
        image_rows = executor_image_rows_after(&e->x, image_rows, ids + done, k);
    }
    return rc;
}

/* Tokens the next pass may propose: k, but no more than are still wanted after the target's
 * own token, nor than the context has room for (the pass runs positions len-1 .. len-1+m). */
static int draft_room(const loom_engine *e, const loom_speculator *sp, int len, int left) {
    int m = sp ? sp->o.num_speculative_tokens : 0;
    if (m > left - 1) m = left - 1;
    if (m > e->max_ctx - len) m = e->max_ctx - len;
    return m > 0 ? m : 0;
}

static int generate(loom_engine *e, loom_speculator *sp, const int32_t *prompt, int n_prompt, const float *image_rows,
                    int max_new, const loom_sampling *s, loom_token_cb cb, void *user, loom_gen_stats *stats,
                    loom_err *err);

int loom_generate(loom_engine *e, const int32_t *prompt, int n_prompt, int max_new, const loom_sampling *s,
                  loom_token_cb cb, void *user, loom_gen_stats *stats, loom_err *err) {
    return generate(e, NULL, prompt, n_prompt, NULL, max_new, s, cb, user, stats, err);
}

int loom_generate_images(loom_engine *e, const int32_t *prompt, int n_prompt, const float *image_rows, int max_new,
                         const loom_sampling *s, loom_token_cb cb, void *user, loom_gen_stats *stats, loom_err *err) {
    return generate(e, NULL, prompt, n_prompt, image_rows, max_new, s, cb, user, stats, err);
}

int loom_generate_speculative(loom_engine *e, loom_speculator *sp, const int32_t *prompt, int n_prompt, int max_new,
                              const loom_sampling *s, loom_token_cb cb, void *user, loom_gen_stats *stats,
                              loom_err *err) {
    return generate(e, sp, prompt, n_prompt, NULL, max_new, s, cb, user, stats, err);
}

/* Each decode pass runs the last token and the proposals after it, and emits what the
 * verification keeps (one token without a speculator); the KV cache is then cut back to the
 * tokens kept, all but the last of which it holds. */
static int generate(loom_engine *e, loom_speculator *sp, const int32_t *prompt, int n_prompt, const float *image_rows,
                    int max_new, const loom_sampling *s, loom_token_cb cb, void *user, loom_gen_stats *stats,
                    loom_err *err) {
    const model_config *c = &e->model->cfg;
    *stats = (loom_gen_stats){.prompt_tokens = n_prompt};
    if (n_prompt <= 0) return loom_errf(err, "empty prompt: nothing to condition on (add BOS)");
    if (n_prompt + max_new > e->max_ctx)
        return loom_errf(err, "prompt (%d tokens) + %d new tokens exceed the context of %d", n_prompt, max_new,
                         e->max_ctx);
    if (max_new <= 0) return 0;
    sampler smp;
    if (sampler_init(&smp, s, c->vocab, err)) return -1;
    tok_decoder dec;
    tok_decoder_init(&dec);
    size_t cap = e->model->tok ? tokenizer_decode_cap(e->model->tok) + 1 : 1;
    int k = LOOM_SPEC_MAX_TOKENS + 1;
    char *piece = mem_alloc(cap, "a decoded piece", err);
    int32_t *pos = piece ? mem_array(e->max_tokens > k ? e->max_tokens : k, sizeof *pos, "the positions", err) : NULL;
    int32_t *seq = pos ? mem_zalloc(e->max_tokens > k ? e->max_tokens : k, sizeof *seq, "the sequence ids", err) : NULL;
    int32_t *hist = seq ? mem_array((size_t)n_prompt + max_new + k, sizeof *hist, "the tokens", err) : NULL;
    if (!hist) {
        free(piece), free(pos), free(seq), sampler_free(&smp);
        return -1;
    }
    memcpy(hist, prompt, (size_t)n_prompt * sizeof *hist);
    /* The decoder reads the prompt first, its text dropped: the completion then continues it
     * (a SentencePiece "▁was" after "The robot" keeps its space, which a decoder starting on
     * the completion strips), so prompt + completion is the decode of all the ids. */
    for (int i = 0; e->model->tok && i < n_prompt; i++)
        tokenizer_decode_next(e->model->tok, &dec, prompt[i], true, piece, cap - 1);
    loom_engine_reset_seq(e, 0);
    if (sp) loom_speculator_reset_seq(sp, 0);
    const float *logits;
    double t0 = now();
    int rc = feed(e, prompt, n_prompt, 0, image_rows, pos, seq, &logits, err);
    stats->prefill_s = now() - t0;
    t0 = now();
    /* a pass's tokens: the last one, then the proposals (ids + 1), a logit row each */
    int32_t out[LOOM_SPEC_MAX_TOKENS + 1], rows[LOOM_SPEC_MAX_TOKENS + 1], ids[LOOM_SPEC_MAX_TOKENS + 1];
    int n_out = rc ? 0 : 1, len = n_prompt;
    out[0] = rc ? 0 : sampler_next(&smp, logits);
    for (bool done = rc != 0; !done;) {
        for (int i = 0; i < n_out && !done; i++) {
            hist[len++] = out[i];
            stats->generated++;
            if (!s->ignore_eos && is_eos(c, out[i])) {
                stats->stopped_at_eos = true;
                done = true;
                break;
            }
            size_t plen = e->model->tok ? tokenizer_decode_next(e->model->tok, &dec, out[i], true, piece, cap - 1) : 0;
            piece[plen] = 0;
            done = (cb && !cb(user, out[i], piece, plen)) || stats->generated == max_new;
        }
        if (done) break;
        int m = draft_room(e, sp, len, max_new - stats->generated), n_draft = 0;
        const int32_t *h = hist;
        if (sp && (rc = loom_speculator_propose(sp, 1, seq, &h, &len, &m, ids + 1, &n_draft, err))) break;
        ids[0] = hist[len - 1];
        for (int j = 0; j <= n_draft; j++) pos[j] = len - 1 + j, rows[j] = j;
        loom_batch b = {
            .n_tokens = n_draft + 1, .ids = ids, .pos = pos, .seq = seq, .n_logits = n_draft + 1, .logit_rows = rows};
        if ((rc = loom_forward(e, &b, &logits, err))) break;
        stats->passes++;
        if (sp) n_out = loom_speculator_verify(sp, &smp, logits, ids + 1, n_draft, out);
        else n_out = 1, out[0] = sampler_next(&smp, logits);
        stats->drafted += n_draft, stats->accepted += n_out - 1;
        if ((rc = loom_engine_truncate_seq(e, 0, len + n_out - 1, err))) break;
    }
    if (e->model->tok && cb && !rc) {
        size_t plen = tokenizer_decode_flush(e->model->tok, &dec, piece, cap - 1);
        piece[plen] = 0;
        if (plen) cb(user, -1, piece, plen);
    }
    stats->decode_s = now() - t0;
    free(piece);
    free(pos);
    free(seq);
    free(hist);
    sampler_free(&smp);
    return rc;
}

/* loom.h's text calls over the model's tokenizer (text/): tokenizing, and detokenizing whole or
 * streaming, the streaming decoder holding its own piece of scratch so callers need no sizes. */
#include <stdlib.h>
#include <string.h>

#include "runtime/model.h"
#include "util/alloc.h"
#include "util/err.h"

static int need_tokenizer(const loom_model *m, loom_err *err) {
    return m->tok ? 0 : loom_errf(err, "%s: no tokenizer loaded", m->source);
}

int loom_tokenize(const loom_model *m, const char *text, bool add_special, int32_t **ids, size_t *n, loom_err *err) {
    if (need_tokenizer(m, err)) return -1;
    return tokenizer_encode(m->tok, text, strlen(text), add_special, ids, n, err);
}

char *loom_detokenize(const loom_model *m, const int32_t *ids, size_t n, bool skip_special, loom_err *err) {
    if (need_tokenizer(m, err)) return NULL;
    char *text = tokenizer_decode(m->tok, ids, n, skip_special);
    if (!text) loom_errf(err, "cannot allocate the text of %zu tokens", n);
    return text;
}

int loom_token_bytes(const loom_model *m, int32_t id, char *out, size_t cap) {
    return m->tok ? tokenizer_token_bytes(m->tok, id, out, cap) : -1;
}

struct loom_detokenizer {
    const tokenizer *tok;
    tok_decoder dec;
    size_t cap; /* the most one call writes (tokenizer_decode_cap) */
    bool keep_special;
    char piece[]; /* cap + 1 */
};

loom_detokenizer *loom_detokenizer_new(const loom_model *m, loom_err *err) {
    if (need_tokenizer(m, err)) return NULL;
    size_t cap = tokenizer_decode_cap(m->tok);
    loom_detokenizer *d = mem_alloc(sizeof *d + cap + 1, "a streaming detokenizer", err);
    if (!d) return NULL;
    d->tok = m->tok;
    d->cap = cap;
    d->keep_special = false;
    tok_decoder_init(&d->dec);
    return d;
}

void loom_detokenizer_keep_special(loom_detokenizer *d, bool keep) { d->keep_special = keep; }

const char *loom_detokenizer_next(loom_detokenizer *d, int32_t id, size_t *len) {
    *len = tokenizer_decode_next(d->tok, &d->dec, id, !d->keep_special, d->piece, d->cap);
    d->piece[*len] = 0;
    return d->piece;
}

const char *loom_detokenizer_flush(loom_detokenizer *d, size_t *len) {
    *len = tokenizer_decode_flush(d->tok, &d->dec, d->piece, d->cap);
    d->piece[*len] = 0;
    return d->piece;
}

void loom_detokenizer_free(loom_detokenizer *d) { free(d); }

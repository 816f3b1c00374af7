/* Hugging Face tokenizer.json with a BPE model (see tokenizer.h). This file owns the string
 * arena, the id -> token lookups and the public queries; tokenizer_impl.h lists the other files.
 *
 * Encoding runs HF's pipeline: split the text on added tokens (the raw text first, then each
 * normalized piece), normalize, pre-tokenize, BPE-merge each piece by merge rank, and apply the
 * post-processor template. Decoding pushes token strings one at a time through the decoder chain,
 * so whole-sequence and streaming decode are the same code and cannot disagree. Each stage follows
 * the Rust `tokenizers` crate; where we knowingly differ, the comment says so. */
#include "text/tokenizer_impl.h"

int tok_intern(tokenizer *t, const char *s, size_t n, span *out, loom_err *err) {
    if (t->arena.n + n + 1 >= NONE) return loom_errf(err, "strings exceed 4 GiB");
    out->off = (uint32_t)t->arena.n;
    out->len = (uint32_t)n;
    if (sb_put(&t->arena, s, n, err) || sb_put(&t->arena, "", 1, err)) return -1;
    return 0;
}

const added_tok *tok_added_by_id(const tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_ids && t->added_of[id] >= 0 ? &t->added[t->added_of[id]] : NULL;
}

bool tok_token_span(const tokenizer *t, int32_t id, span *out) {
    const added_tok *a = tok_added_by_id(t, id);
    if (a) {
        *out = a->content;
        return true;
    }
    if (id < 0 || id >= t->model_n || t->model_str[id].off == NONE) return false;
    *out = t->model_str[id];
    return true;
}

int tokenizer_vocab_size(const tokenizer *t) { return t->n_ids; }

int tokenizer_token_id(const tokenizer *t, const char *piece) {
    size_t n = strlen(piece);
    for (uint32_t i = 0; i < t->n_added; i++)
        if (t->added[i].content.len == n && !memcmp(S(t, t->added[i].content), piece, n)) return t->added[i].id;
    return tok_vocab_find(t, piece, n);
}

const char *tokenizer_token(const tokenizer *t, int32_t id) {
    span s;
    return tok_token_span(t, id, &s) ? S(t, s) : NULL;
}

bool tokenizer_is_special(const tokenizer *t, int32_t id) {
    const added_tok *a = tok_added_by_id(t, id);
    return a && a->special;
}

/* A model's vocabulary as the grammar layer sees it: each token's bytes (loom_token_bytes) and
 * the EOS ids, from the public API, so that the grammar layer, below the runtime, never calls it. */
#include "serve/vocab.h"

#include <stdlib.h>

#include "util/alloc.h"

#define TOKEN_BYTES_MAX 4096 /* longer tokens are cut (no vocabulary has any) */

grammar_vocab *vocab_of_model(const loom_model *m, loom_err *err) {
    loom_model_info info;
    loom_model_get_info(m, &info);
    int n = info.vocab;
    char **bytes = mem_zalloc((size_t)n, sizeof *bytes, "the vocabulary's bytes", err);
    int *lens = mem_array((size_t)n, sizeof *lens, "the vocabulary's bytes", err);
    char *buf = mem_alloc(TOKEN_BYTES_MAX, "a token's bytes", err);
    grammar_vocab *v = NULL;
    if (!bytes || !lens || !buf) goto done;
    for (int i = 0; i < n; i++) {
        lens[i] = loom_token_bytes(m, i, buf, TOKEN_BYTES_MAX);
        if (lens[i] > 0 && !(bytes[i] = mem_strndup(buf, (size_t)lens[i], "a token's bytes", err))) goto done;
    }
    v = grammar_vocab_new(n, (const char *const *)bytes, lens, info.eos_ids, info.n_eos, err);
done:
    for (int i = 0; bytes && i < n; i++) free(bytes[i]);
    free(bytes);
    free(lens);
    free(buf);
    return v;
}

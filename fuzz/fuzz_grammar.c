/* libFuzzer target: the grammars a request may send. The first byte picks the input's kind:
 * GBNF, a JSON Schema (json_schema_to_gbnf) or a regular expression (regex_to_gbnf); what
 * converts is compiled over a small vocabulary (every byte, a few multi-byte pieces, EOS), then
 * walked: at each step the mask must agree with asking the matcher token by token, and the
 * token taken (chosen by the input's remaining bytes) must be accepted. */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"

#define VOCAB 264
#define EOS   263

static grammar_vocab *vocab(void) {
    static char store[256];
    static const char *pieces[] = {"\": ", "{\"", "true", "\xC3\xA9", "\xE2\x82", "\xAC!", "ab"};
    const char *bytes[VOCAB];
    int lens[VOCAB];
    for (int i = 0; i < 256; i++) store[i] = (char)i, bytes[i] = &store[i], lens[i] = 1;
    for (int i = 0; i < 7; i++) bytes[256 + i] = pieces[i], lens[256 + i] = (int)strlen(pieces[i]);
    bytes[EOS] = "", lens[EOS] = -1;
    int32_t eos = EOS;
    return grammar_vocab_new(VOCAB, bytes, lens, &eos, 1, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static grammar_vocab *v;
    if (!v && !(v = vocab())) return 0;
    if (size < 2) return 0;
    size_t text_len = size - 1, walk_at = size;
    for (size_t i = 1; i < size; i++) /* a NUL ends the grammar; what follows steers the walk */
        if (!data[i]) {
            text_len = i - 1, walk_at = i + 1;
            break;
        }
    char *text = malloc(text_len + 1);
    if (!text) return 0;
    memcpy(text, data + 1, text_len);
    text[text_len] = 0;
    loom_err err;
    char *gbnf = NULL;
    if (data[0] % 3 == 0) {
        gbnf = text;
        text = NULL;
    } else if (data[0] % 3 == 1) {
        cJSON *schema = cJSON_Parse(text);
        if (schema) gbnf = json_schema_to_gbnf(schema, &err);
        cJSON_Delete(schema);
    } else {
        gbnf = regex_to_gbnf(text, &err);
    }
    free(text);
    grammar *g = gbnf ? grammar_compile(gbnf, v, &err) : NULL;
    grammar_matcher *m = g ? grammar_matcher_new(g, &err) : NULL;
    uint32_t allowed[(VOCAB + 31) / 32];
    for (int step = 0; m && step < 64 && !grammar_matcher_done(m); step++) {
        if (grammar_matcher_mask(m, allowed, &err)) break; /* past its bound: the request would end here */
        int n_ok = 0, ok[VOCAB];
        for (int t = 0; t < VOCAB; t++) {
            bool in = allowed[t >> 5] >> (t & 31) & 1;
            if (in != grammar_matcher_allows(m, t) && !grammar_matcher_fault(m, &err))
                abort(); /* the mask and the matcher disagree */
            if (in) ok[n_ok++] = t;
        }
        if (!n_ok) break;
        int pick = ok[(walk_at < size ? data[walk_at++] : step) % n_ok];
        if (pick == EOS) break;
        if (grammar_matcher_accept(m, pick, &err)) abort(); /* allowed, then refused */
    }
    grammar_matcher_free(m);
    grammar_unref(g);
    free(gbnf);
    return 0;
}

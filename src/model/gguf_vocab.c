/* Reading a GGUF file's tokenizer.ggml.* keys into a tokenizer_vocab (text/tokenizer.h), checked
 * key by key so a file we cannot tokenize exactly is refused with the key named. */
#include <stdlib.h>
#include <string.h>

#include "model/gguf_vocab.h"
#include "util/alloc.h"
#include "util/err.h"

#define KEY "tokenizer.ggml."

/* A string key as a NUL-terminated copy in buf (truncated to cap); 1 when absent. */
static int get_name(const gguf_file *f, const char *key, char *buf, size_t cap, loom_err *err) {
    gguf_str s;
    int rc = gguf_get_str(f, key, &s, err);
    if (rc) return rc;
    size_t n = s.n < cap - 1 ? s.n : cap - 1;
    memcpy(buf, s.p, n);
    buf[n] = 0;
    if (strlen(buf) != s.n) return loom_errf(err, "%s: key '%s' is too long or holds a NUL byte", f->name, key);
    return 0;
}

static int get_id(const gguf_file *f, const char *key, size_t n, int32_t *out, loom_err *err) {
    int64_t v;
    *out = -1;
    int rc = gguf_get_i64(f, key, &v, err);
    if (rc) return rc < 0 ? -1 : 0;
    /* llama.cpp writes -1 (or UINT32_MAX) for "none" in some files */
    if (v == -1 || v == UINT32_MAX) return 0;
    if (v < 0 || (uint64_t)v >= n)
        return loom_errf(err, "%s: key '%s' is %lld, not a token id (%zu tokens)", f->name, key, (long long)v, n);
    *out = (int32_t)v;
    return 0;
}

static int get_flag(const gguf_file *f, const char *key, signed char *out, loom_err *err) {
    bool b;
    int rc = gguf_get_bool(f, key, &b, err);
    *out = rc ? -1 : b;
    return rc < 0 ? -1 : 0;
}

/* An array key that must have one item per token, or be absent (NULL, no error). */
static const gguf_kv *per_token(const gguf_file *f, const char *key, enum gguf_vtype elem, size_t n, loom_err *err) {
    const gguf_kv *kv = gguf_get_array(f, key, elem, err);
    if (kv && kv->n != n) {
        loom_errf(err, "%s: key '%s' has %llu items but tokenizer.ggml.tokens has %zu", f->name, key,
                  (unsigned long long)kv->n, n);
        return NULL;
    }
    return kv;
}

tokenizer *gguf_tokenizer(const gguf_file *f, loom_err *err) {
    tokenizer_vocab v = {.bos = -1, .eos = -1, .unk = -1, .pad = -1};
    char model[64], pre[64], arch[64];
    err->msg[0] = 0;
    int rc = get_name(f, KEY "model", model, sizeof model, err);
    if (rc || !strcmp(model, "none")) return NULL; /* absent or "none" (llama.cpp's vocabulary-less files) */
    if (!strcmp(model, "gpt2")) v.kind = TOKENIZER_VOCAB_GPT2;
    else if (!strcmp(model, "llama")) v.kind = TOKENIZER_VOCAB_SPM;
    else if (!strcmp(model, "gemma4")) v.kind = TOKENIZER_VOCAB_GEMMA4;
    else {
        /* bert (WordPiece), t5 (Unigram), rwkv, plamo2, ...: other algorithms than BPE */
        loom_errf(err, "%s: key '" KEY "model' is \"%s\": unsupported tokenizer (only \"gpt2\", \"llama\", \"gemma4\")",
                  f->name, model);
        return NULL;
    }
    if ((rc = get_name(f, KEY "pre", pre, sizeof pre, err)) < 0 ||
        get_name(f, "general.architecture", arch, sizeof arch, err) < 0)
        return NULL;
    v.pre = rc ? NULL : pre;
    v.arch = gguf_find(f, "general.architecture") ? arch : NULL;

    const gguf_kv *tokens = gguf_get_array(f, KEY "tokens", GGUF_STRING, err);
    if (!tokens) {
        if (!err->msg[0]) loom_errf(err, "%s: key '" KEY "tokens' is missing", f->name);
        return NULL;
    }
    size_t n = (size_t)tokens->n;
    const gguf_kv *scores = per_token(f, KEY "scores", GGUF_F32, n, err);
    if (!scores && err->msg[0]) return NULL;
    const gguf_kv *types = per_token(f, KEY "token_type", GGUF_I32, n, err);
    if (!types && err->msg[0]) return NULL;
    const gguf_kv *merges = gguf_get_array(f, KEY "merges", GGUF_STRING, err);
    if (!merges && err->msg[0]) return NULL;
    if (get_id(f, KEY "bos_token_id", n, &v.bos, err) || get_id(f, KEY "eos_token_id", n, &v.eos, err) ||
        get_id(f, KEY "unknown_token_id", n, &v.unk, err) || get_id(f, KEY "padding_token_id", n, &v.pad, err) ||
        get_flag(f, KEY "add_bos_token", &v.add_bos, err) || get_flag(f, KEY "add_eos_token", &v.add_eos, err) ||
        get_flag(f, KEY "add_space_prefix", &v.add_space_prefix, err))
        return NULL;

    tokenizer *t = NULL;
    tokenizer_str *strs = mem_array(n ? n : 1, sizeof *strs, "the token list", err);
    tokenizer_str *ms = merges ? mem_array(merges->n ? merges->n : 1, sizeof *ms, "the merge list", err) : NULL;
    float *sc = scores ? mem_array(n ? n : 1, sizeof *sc, "the token scores", err) : NULL;
    int32_t *ty = types ? mem_array(n ? n : 1, sizeof *ty, "the token types", err) : NULL;
    if (strs && (!merges || ms) && (!scores || sc) && (!types || ty)) {
        for (size_t i = 0; i < n; i++) strs[i] = (tokenizer_str){tokens->strs[i].p, tokens->strs[i].n};
        for (size_t i = 0; merges && i < merges->n; i++) ms[i] = (tokenizer_str){merges->strs[i].p, merges->strs[i].n};
        for (size_t i = 0; scores && i < n; i++) sc[i] = (float)gguf_array_num(scores, i);
        for (size_t i = 0; types && i < n; i++) {
            double d = gguf_array_num(types, i);
            ty[i] = d >= 0 && d <= 255 ? (int32_t)d : 0;
        }
        v.tokens = strs;
        v.n_tokens = n;
        v.merges = ms;
        v.n_merges = merges ? (size_t)merges->n : 0;
        v.scores = sc;
        v.types = ty;
        t = tokenizer_load_vocab(&v, f->name, err);
    }
    free(strs);
    free(ms);
    free(sc);
    free(ty);
    return t;
}

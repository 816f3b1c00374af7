/* Hugging Face tokenizer.json with a BPE model: loading, encoding and decoding (see tokenizer.h).
 *
 * Encoding runs HF's pipeline: split the text on added tokens (the raw text first, then each
 * normalized piece), normalize, pre-tokenize, BPE-merge each piece by merge rank, and apply the
 * post-processor template. Decoding pushes token strings one at a time through the decoder chain,
 * so whole-sequence and streaming decode are the same code and cannot disagree. Each stage follows
 * the Rust `tokenizers` crate; where we knowingly differ, the comment says so. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/tokenizer.h"

#include <cjson/cJSON.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "util/file.h"

#define NONE UINT32_MAX
#define MAX_STEPS 16     /* normalizers, pre-tokenizers, templates */
#define MAX_ID (1 << 24) /* a larger id means a broken file, not a big vocabulary */

/* The GPT-2 split used by the ByteLevel pre-tokenizer when use_regex is true. */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
/* Rust's \w, used by single_word added tokens. */
static const char WORD_PATTERN[] = "[\\p{L}\\p{M}\\p{Nd}\\p{Nl}\\p{Pc}]";
static const char FFFD[] = "\xEF\xBF\xBD";
_Static_assert(TOK_DEC_GROUP < 256, "tok_decoder.n_group is a uint8_t");

/* ---------------------------------------------------------------- small helpers */

typedef struct {
    char *p;
    size_t n, cap;
} strbuf;

/* Makes room for need elements in a malloc'd array; false when out of memory. The pointer is
 * passed by address and copied with memcpy so any element type can share this one function. */
static bool reserve_(void *arrp, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *old;
    memcpy(&old, arrp, sizeof old);
    void *p = realloc(old, c * elem);
    if (!p) return false;
    memcpy(arrp, &p, sizeof p);
    *cap = c;
    return true;
}
#define RESERVE(arr, cap, need) reserve_(&(arr), &(cap), (need), sizeof *(arr))

static bool sb_put(strbuf *b, const void *s, size_t n) {
    if (!n) return true;
    if (!RESERVE(b->p, b->cap, b->n + n)) return false;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return true;
}

static void sb_swap(strbuf *a, strbuf *b) {
    strbuf x = *a;
    *a = *b;
    *b = x;
}

/* Length of the UTF-8 sequence led by b, for text already known to be well formed. */
static size_t u8len(uint8_t b) { return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }

static uint32_t u8decode(const char *s, size_t *len) {
    const uint8_t *u = (const uint8_t *)s;
    *len = u8len(u[0]);
    switch (*len) {
    case 1: return u[0];
    case 2: return (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F);
    case 3: return (uint32_t)(u[0] & 0x0F) << 12 | (uint32_t)(u[1] & 0x3F) << 6 | (u[2] & 0x3F);
    default:
        return (uint32_t)(u[0] & 0x07) << 18 | (uint32_t)(u[1] & 0x3F) << 12 |
               (uint32_t)(u[2] & 0x3F) << 6 | (u[3] & 0x3F);
    }
}

static size_t u8encode(uint32_t c, char *out) {
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xC0 | c >> 6);
        out[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    out[0] = (char)(0xE0 | c >> 12);
    out[1] = (char)(0x80 | ((c >> 6) & 0x3F));
    out[2] = (char)(0x80 | (c & 0x3F));
    return 3; /* only used for code points below 0x10000 */
}

/* Well-formedness of s[0..n) at its start (Unicode table 3-7): the length of a complete sequence,
 * 0 when s is a valid but unfinished start of one, or -k when its first k bytes are a maximal
 * invalid subpart (Rust's from_utf8_lossy turns each such subpart into one U+FFFD). */
static int u8check(const uint8_t *s, size_t n) {
    uint8_t b = s[0], lo = 0x80, hi = 0xBF;
    int need;
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) {
        need = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 2;
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F; /* no surrogates */
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 3;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F; /* nothing above U+10FFFF */
    } else {
        return -1;
    }
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= n) return 0;
        uint8_t c = s[i];
        if (c < (i == 1 ? lo : 0x80) || c > (i == 1 ? hi : 0xBF)) return -i;
    }
    return need + 1;
}

/* Offset of the first byte of s that does not belong to well-formed UTF-8, or n. */
static size_t u8invalid(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        int r = u8check((const uint8_t *)s + i, n - i);
        if (r <= 0) return i;
        i += (size_t)r;
    }
    return n;
}

/* Well-formed so far: complete sequences, then perhaps an unfinished one. */
static bool u8prefix_ok(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        int r = u8check(s + i, n - i);
        if (r < 0) return false;
        if (r == 0) return true;
        i += (size_t)r;
    }
    return true;
}

/* Unicode White_Space, which is what Rust's \s (used for lstrip/rstrip) matches. */
static bool is_space(uint32_t c) {
    return (c >= 9 && c <= 13) || c == ' ' || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t mix64(uint64_t x) { /* splitmix64 finalizer */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Power-of-two table size with load factor at most one half. */
static uint32_t table_size(size_t n) {
    uint32_t s = 16;
    while (s < 2 * n) s *= 2;
    return s;
}

/* ---------------------------------------------------------------- the tokenizer */

typedef struct {
    uint32_t off, len; /* into tokenizer.arena; off is NONE for "no string" */
} span;

typedef struct {
    span lit;        /* literal pattern, when re is NULL */
    pcre2_code *re;  /* regex pattern */
} pattern;

typedef struct {
    int32_t id;
    span content; /* as written: what decoding prints */
    span key;     /* what is matched: content, or its normalized form for normalized tokens */
    bool special, lstrip, rstrip, single_word, normalized;
} added_tok;

/* Added tokens matched against one form of the text (raw, or normalized): indices into
 * tokenizer.added ordered by first byte of the key, longest key first, so the first hit in a
 * bucket is HF's leftmost-longest match. */
typedef struct {
    uint32_t *idx, n;
    uint32_t start[257];
} added_set;

typedef enum { NORM_PREPEND, NORM_REPLACE } norm_kind;
typedef struct {
    norm_kind kind;
    span str; /* text prepended, or the replacement */
    pattern pat;
} norm_step;

typedef enum { PRE_BYTELEVEL, PRE_SPLIT, PRE_METASPACE } pre_kind;
typedef enum { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS } split_mode;
typedef enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER } prepend_scheme;
typedef struct {
    pre_kind kind;
    pattern pat;       /* ByteLevel: GPT-2 regex (NULL without use_regex); Split: its pattern;
                        * Metaspace: the replacement, split before */
    split_mode mode;   /* Split */
    bool invert;       /* Split */
    bool prefix_space; /* ByteLevel add_prefix_space */
    prepend_scheme prepend; /* Metaspace */
    bool split;             /* Metaspace */
    span repl;              /* Metaspace replacement character */
} pre_step;

typedef struct {
    int32_t *items; /* ids, with -1 standing for the encoded sequence */
    size_t n, cap;
} tmpl;

typedef enum { DEC_REPLACE, DEC_METASPACE, DEC_BYTEFALLBACK, DEC_FUSE, DEC_BYTELEVEL } dec_kind;
typedef struct {
    dec_kind kind;
    span from, to;   /* Replace: literal and replacement; Metaspace: from = replacement char */
    bool strip_first; /* Metaspace: the first token loses its replacement chars */
} dec_step;

struct tokenizer {
    strbuf arena; /* every string, NUL-terminated */
    int32_t n_ids, model_n;
    span *model_str;    /* [model_n] vocab strings */
    int32_t *added_of;  /* [n_ids] index into added, or -1 */
    uint32_t *vocab_slot, vocab_mask; /* 1 + id, 0 empty */
    uint64_t *pair_key; /* merges: (left << 32 | right) -> rank, merged id */
    uint32_t *pair_rank, pair_mask;
    int32_t *pair_new;
    int32_t byte_id[256]; /* <0xXX> tokens for byte_fallback, -1 where missing */
    span unk;             /* off NONE: no unk_token */
    int32_t unk_id;
    bool fuse_unk, byte_fallback, ignore_merges;

    added_tok *added;
    uint32_t n_added;
    added_set raw_set, norm_set;
    pcre2_code *word_re; /* only when some token is single_word */

    norm_step norm[MAX_STEPS];
    int n_norm;
    pre_step pre[MAX_STEPS];
    int n_pre;
    tmpl tmpls[MAX_STEPS];
    int n_tmpl;

    dec_step dec[TOK_DEC_MAX_STEPS]; /* the chain up to and including the fusing step */
    int n_dec, dec_bf;               /* dec_bf: index of ByteFallback or -1 */
    bool dec_fused, dec_join_space;  /* join_space: no decoder, HF joins tokens with " " */
    bool has_strip;                  /* Strip after the fusing step */
    span strip_content;
    uint32_t strip_start;
    size_t decode_cap;

    char byte_char[256][2]; /* GPT-2 bytes_to_unicode, as UTF-8 */
    uint8_t byte_char_len[256];
    int16_t char_byte[324]; /* the reverse, by code point; -1 if not a byte char */
};

static const char *S(const tokenizer *t, span s) { return t->arena.p + s.off; }

static int intern(tokenizer *t, const char *s, size_t n, span *out, loom_err *err) {
    if (t->arena.n + n + 1 >= NONE) return loom_errf(err, "strings exceed 4 GiB");
    out->off = (uint32_t)t->arena.n;
    out->len = (uint32_t)n;
    if (!sb_put(&t->arena, s, n) || !sb_put(&t->arena, "", 1)) return loom_errf(err, "out of memory");
    return 0;
}

static int32_t vocab_find(const tokenizer *t, const char *s, size_t n) {
    for (uint32_t h = (uint32_t)hash_bytes(s, n) & t->vocab_mask;; h = (h + 1) & t->vocab_mask) {
        uint32_t v = t->vocab_slot[h];
        if (!v) return -1;
        span sp = t->model_str[v - 1];
        if (sp.len == n && !memcmp(S(t, sp), s, n)) return (int32_t)(v - 1);
    }
}

static uint64_t pair_of(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }

static uint32_t pair_slot(const tokenizer *t, uint64_t key) {
    uint32_t h = (uint32_t)mix64(key) & t->pair_mask;
    while (t->pair_key[h] != UINT64_MAX && t->pair_key[h] != key) h = (h + 1) & t->pair_mask;
    return h;
}

static bool pair_find(const tokenizer *t, int32_t a, int32_t b, uint32_t *rank, int32_t *merged) {
    uint32_t h = pair_slot(t, pair_of(a, b));
    if (t->pair_key[h] == UINT64_MAX) return false;
    *rank = t->pair_rank[h];
    *merged = t->pair_new[h];
    return true;
}

static const added_tok *added_by_id(const tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_ids && t->added_of[id] >= 0 ? &t->added[t->added_of[id]] : NULL;
}

/* The string decoding uses for id: the added token's content, else the vocab entry. */
static bool token_span(const tokenizer *t, int32_t id, span *out) {
    const added_tok *a = added_by_id(t, id);
    if (a) {
        *out = a->content;
        return true;
    }
    if (id < 0 || id >= t->model_n || t->model_str[id].off == NONE) return false;
    *out = t->model_str[id];
    return true;
}

/* ---------------------------------------------------------------- patterns */

static pcre2_code *compile_re(const char *src, const char *path, loom_err *err) {
    int code;
    PCRE2_SIZE at;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)src, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                   &code, &at, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        loom_errf(err, "%s: bad regex at offset %zu: %s", path, (size_t)at, (char *)msg);
        return NULL;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* best effort: the interpreter is the fallback */
    return re;
}

/* Finds the first match of p in s[0..n) at or after from: 1 with [*ms, *me), 0 for none, -1 on a
 * matching failure (err set). */
static int pat_find(const tokenizer *t, const pattern *p, const char *s, size_t n, size_t from,
                    pcre2_match_data *md, size_t *ms, size_t *me, loom_err *err) {
    if (!p->re) {
        const char *hit = memmem(s + from, n - from, S(t, p->lit), p->lit.len);
        if (!hit) return 0;
        *ms = (size_t)(hit - s);
        *me = *ms + p->lit.len;
        return 1;
    }
    int rc = pcre2_match(p->re, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, md, NULL);
    /* The JIT's small default stack can overflow on very long runs; the interpreter copes. */
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(p->re, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(rc, msg, sizeof msg);
        return loom_errf(err, "regex match failed: %s", (char *)msg);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}

/* Where to search after a match ending at me; an empty match moves on by one character. */
static size_t after_match(const char *s, size_t n, size_t ms, size_t me) {
    if (me > ms) return me;
    return me < n ? me + u8len((uint8_t)s[me]) : n + 1;
}

/* Replaces every match of p in s[0..n) by with[0..wn), into out. */
static int replace_all(const tokenizer *t, const pattern *p, const char *with, size_t wn,
                       const char *s, size_t n, strbuf *out, pcre2_match_data *md, loom_err *err) {
    size_t pos = 0, ms = 0, me = 0;
    for (size_t from = 0; from <= n; from = after_match(s, n, ms, me)) {
        int r = pat_find(t, p, s, n, from, md, &ms, &me, err);
        if (r < 0) return -1;
        if (!r) break;
        if (!sb_put(out, s + pos, ms - pos) || !sb_put(out, with, wn)) return loom_errf(err, "out of memory");
        pos = me;
    }
    return sb_put(out, s + pos, n - pos) ? 0 : loom_errf(err, "out of memory");
}

/* Runs the normalizer over s[0..n) into out (tmp is scratch). */
static int normalize(const tokenizer *t, pcre2_match_data *md, const char *s, size_t n, strbuf *out,
                     strbuf *tmp, loom_err *err) {
    out->n = 0;
    if (!sb_put(out, s, n)) return loom_errf(err, "out of memory");
    for (int i = 0; i < t->n_norm; i++) {
        const norm_step *st = &t->norm[i];
        tmp->n = 0;
        if (st->kind == NORM_PREPEND) {
            if (!out->n) continue; /* HF prepends only to non-empty text */
            if (!sb_put(tmp, S(t, st->str), st->str.len) || !sb_put(tmp, out->p, out->n))
                return loom_errf(err, "out of memory");
        } else if (replace_all(t, &st->pat, S(t, st->str), st->str.len, out->p ? out->p : "", out->n,
                               tmp, md, err)) {
            return -1;
        }
        sb_swap(out, tmp);
    }
    return 0;
}

/* ---------------------------------------------------------------- loading */

static const cJSON *jget(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }
static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *v = jget(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
static bool jbool(const cJSON *o, const char *k, bool def) {
    const cJSON *v = jget(o, k);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : def;
}
static bool jnull(const cJSON *v) { return !v || cJSON_IsNull(v); }

/* An integer id in [0, MAX_ID), or -1. */
static int32_t jid(const cJSON *v) {
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble < MAX_ID)) return -1;
    int32_t id = (int32_t)v->valuedouble;
    return (double)id == v->valuedouble ? id : -1;
}

/* A string of exactly one character (HF declares these fields as a Rust char). */
static int jchar(tokenizer *t, const cJSON *o, const char *k, const char *def, const char *path,
                 span *out, loom_err *err) {
    const char *s = jget(o, k) ? jstr(o, k) : def;
    size_t n = s ? strlen(s) : 0;
    if (!n || u8invalid(s, n) != n || u8len((uint8_t)s[0]) != n)
        return loom_errf(err, "%s.%s: expected a single character", path, k);
    return intern(t, s, n, out, err);
}

static int load_vocab(tokenizer *t, const cJSON *vocab, loom_err *err) {
    if (!cJSON_IsObject(vocab)) return loom_errf(err, "model.vocab: missing or not an object");
    size_t count = 0;
    for (const cJSON *e = vocab->child; e; e = e->next, count++) {
        int32_t id = jid(e);
        if (id < 0) return loom_errf(err, "model.vocab[\"%s\"]: id is not an integer in [0, %d)", e->string, MAX_ID);
        if (id >= t->model_n) t->model_n = id + 1;
    }
    uint32_t size = table_size(count);
    t->model_str = malloc((size_t)(t->model_n ? t->model_n : 1) * sizeof *t->model_str);
    t->vocab_slot = calloc(size, sizeof *t->vocab_slot);
    if (!t->model_str || !t->vocab_slot) return loom_errf(err, "out of memory");
    t->vocab_mask = size - 1;
    for (int32_t i = 0; i < t->model_n; i++) t->model_str[i].off = NONE;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        int32_t id = jid(e);
        if (t->model_str[id].off != NONE) return loom_errf(err, "model.vocab[\"%s\"]: id %d used twice", e->string, id);
        size_t n = strlen(e->string);
        if (intern(t, e->string, n, &t->model_str[id], err)) return -1;
        uint32_t h = (uint32_t)hash_bytes(e->string, n) & t->vocab_mask;
        while (t->vocab_slot[h]) h = (h + 1) & t->vocab_mask;
        t->vocab_slot[h] = (uint32_t)id + 1;
    }
    return 0;
}

/* Ids of a merge's two parts and of their concatenation; false if any is not in the vocab. */
static bool merge_parts(const tokenizer *t, strbuf *cat, const char *l, size_t ln, const char *r,
                        size_t rn, int32_t ids[3]) {
    cat->n = 0;
    if (!sb_put(cat, l, ln) || !sb_put(cat, r, rn)) return false;
    ids[0] = vocab_find(t, l, ln);
    ids[1] = vocab_find(t, r, rn);
    ids[2] = vocab_find(t, cat->p, cat->n);
    return ids[0] >= 0 && ids[1] >= 0 && ids[2] >= 0;
}

/* Resolves one merges entry: "a b" or ["a", "b"] (the newer pair form). */
static int merge_entry(const tokenizer *t, const cJSON *m, uint32_t i, strbuf *cat, int32_t ids[3],
                       loom_err *err) {
    if (cJSON_IsArray(m)) {
        const cJSON *a = m->child, *b = a ? a->next : NULL;
        if (!cJSON_IsString(a) || !cJSON_IsString(b) || b->next)
            return loom_errf(err, "model.merges[%u]: expected two strings", i);
        if (!merge_parts(t, cat, a->valuestring, strlen(a->valuestring), b->valuestring,
                         strlen(b->valuestring), ids))
            return loom_errf(err, "model.merges[%u]: [\"%s\", \"%s\"] (or their concatenation) is not in model.vocab",
                             i, a->valuestring, b->valuestring);
        return 0;
    }
    if (!cJSON_IsString(m)) return loom_errf(err, "model.merges[%u]: expected a string or a pair", i);
    /* HF requires exactly one space. A line with more comes from vocab entries that contain a
     * space (onnxruntime-extensions' Llama-2 copy spells U+00A0 as ' '): take the split whose
     * parts and concatenation are all tokens. */
    const char *s = m->valuestring;
    size_t n = strlen(s);
    for (size_t k = 0; k < n; k++)
        if (s[k] == ' ' && merge_parts(t, cat, s, k, s + k + 1, n - k - 1, ids)) return 0;
    return loom_errf(err, "model.merges[%u]: \"%s\" is not two tokens of model.vocab whose concatenation is one", i, s);
}

static int load_merges(tokenizer *t, const cJSON *merges, loom_err *err) {
    if (!cJSON_IsArray(merges)) return loom_errf(err, "model.merges: missing or not an array");
    size_t count = (size_t)cJSON_GetArraySize(merges);
    uint32_t size = table_size(count);
    t->pair_key = malloc(size * sizeof *t->pair_key);
    t->pair_rank = malloc(size * sizeof *t->pair_rank);
    t->pair_new = malloc(size * sizeof *t->pair_new);
    if (!t->pair_key || !t->pair_rank || !t->pair_new) return loom_errf(err, "out of memory");
    t->pair_mask = size - 1;
    memset(t->pair_key, 0xFF, size * sizeof *t->pair_key);
    strbuf cat = {0};
    uint32_t i = 0;
    for (const cJSON *m = merges->child; m; m = m->next, i++) {
        int32_t ids[3];
        if (merge_entry(t, m, i, &cat, ids, err)) {
            free(cat.p);
            return -1;
        }
        /* A repeated pair keeps its last rank, as HF's HashMap collect does. */
        uint64_t key = pair_of(ids[0], ids[1]);
        uint32_t h = pair_slot(t, key);
        t->pair_key[h] = key;
        t->pair_rank[h] = i;
        t->pair_new[h] = ids[2];
    }
    free(cat.p);
    return 0;
}

static int load_model(tokenizer *t, const cJSON *model, loom_err *err) {
    if (!cJSON_IsObject(model)) return loom_errf(err, "model: missing or not an object");
    const char *type = jstr(model, "type");
    if (!type) return loom_errf(err, "model.type: missing");
    if (strcmp(type, "BPE")) return loom_errf(err, "model.type: unsupported \"%s\" (only \"BPE\" models)", type);
    if (load_vocab(t, jget(model, "vocab"), err) || load_merges(t, jget(model, "merges"), err)) return -1;
    const char *affix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const char *s = jstr(model, affix[i]);
        if (s && *s) return loom_errf(err, "model.%s: \"%s\" is not supported", affix[i], s);
    }
    /* dropout randomizes merges for training; inference merges fully, as HF does without it. */
    t->fuse_unk = jbool(model, "fuse_unk", false);
    t->byte_fallback = jbool(model, "byte_fallback", false);
    t->ignore_merges = jbool(model, "ignore_merges", false);
    const char *unk = jstr(model, "unk_token");
    t->unk.off = NONE;
    t->unk_id = -1;
    if (unk) {
        if (intern(t, unk, strlen(unk), &t->unk, err)) return -1;
        t->unk_id = vocab_find(t, unk, strlen(unk));
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_id[b] = vocab_find(t, name, 6);
    }
    return 0;
}

static int load_pattern(tokenizer *t, const cJSON *p, const char *path, pattern *out, loom_err *err) {
    char sub[256];
    const char *s;
    if ((s = jstr(p, "String"))) {
        if (!*s) return loom_errf(err, "%s.String: empty", path);
        return intern(t, s, strlen(s), &out->lit, err);
    }
    if ((s = jstr(p, "Regex"))) {
        snprintf(sub, sizeof sub, "%s.Regex", path);
        return (out->re = compile_re(s, sub, err)) ? 0 : -1;
    }
    return loom_errf(err, "%s: expected {\"String\": ...} or {\"Regex\": ...}", path);
}

/* Calls load on each element of o[key] (a list), naming it path.key[i] in errors. */
static int load_list(tokenizer *t, const cJSON *o, const char *key, const char *path,
                     int (*load)(tokenizer *, const cJSON *, const char *, loom_err *), loom_err *err) {
    const cJSON *list = jget(o, key);
    if (!cJSON_IsArray(list)) return loom_errf(err, "%s.%s: missing or not a list", path, key);
    int i = 0;
    for (const cJSON *c = list->child; c; c = c->next, i++) {
        char sub[256];
        snprintf(sub, sizeof sub, "%s.%s[%d]", path, key, i);
        if (load(t, c, sub, err)) return -1;
    }
    return 0;
}

static const char *type_of(const cJSON *o, const char *path, loom_err *err) {
    const char *type = jstr(o, "type");
    if (!type) loom_errf(err, "%s.type: missing", path);
    return type;
}

static int load_normalizer(tokenizer *t, const cJSON *o, const char *path, loom_err *err) {
    if (jnull(o)) return 0;
    const char *type = type_of(o, path, err);
    char sub[256];
    if (!type) return -1;
    if (!strcmp(type, "Sequence")) return load_list(t, o, "normalizers", path, load_normalizer, err);
    /* NFC leaves text that is already NFC unchanged, and prompts almost always are; composing
     * decomposed input needs Unicode tables we do not carry, so such (rare) input can tokenize
     * differently from HF. */
    if (!strcmp(type, "NFC")) return 0;
    if (t->n_norm == MAX_STEPS) return loom_errf(err, "%s: more than %d normalizers", path, MAX_STEPS);
    norm_step *st = &t->norm[t->n_norm++];
    if (!strcmp(type, "Prepend")) {
        const char *s = jstr(o, "prepend");
        st->kind = NORM_PREPEND;
        if (!s) return loom_errf(err, "%s.prepend: missing", path);
        return intern(t, s, strlen(s), &st->str, err);
    }
    if (!strcmp(type, "Replace")) {
        const char *s = jstr(o, "content");
        st->kind = NORM_REPLACE;
        if (!s) return loom_errf(err, "%s.content: missing", path);
        snprintf(sub, sizeof sub, "%s.pattern", path);
        if (intern(t, s, strlen(s), &st->str, err)) return -1;
        return load_pattern(t, jget(o, "pattern"), sub, &st->pat, err);
    }
    return loom_errf(err, "%s.type: unsupported normalizer \"%s\"", path, type);
}

static int load_scheme(const cJSON *o, const char *path, prepend_scheme *out, loom_err *err) {
    const char *s = jstr(o, "prepend_scheme");
    if (!s) { /* older files: add_prefix_space */
        *out = jbool(o, "add_prefix_space", true) ? PREPEND_ALWAYS : PREPEND_NEVER;
        return 0;
    }
    if (!strcmp(s, "always")) *out = PREPEND_ALWAYS;
    else if (!strcmp(s, "first")) *out = PREPEND_FIRST;
    else if (!strcmp(s, "never")) *out = PREPEND_NEVER;
    else return loom_errf(err, "%s.prepend_scheme: unknown \"%s\"", path, s);
    return 0;
}

static int load_split(tokenizer *t, const cJSON *o, const char *path, pre_step *st, loom_err *err) {
    static const char *modes[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    char sub[256];
    const char *b = jstr(o, "behavior");
    int m = 0;
    while (m < 5 && (!b || strcmp(b, modes[m]))) m++;
    if (m == 5) return loom_errf(err, "%s.behavior: unknown \"%s\"", path, b ? b : "(missing)");
    st->kind = PRE_SPLIT;
    st->mode = (split_mode)m;
    st->invert = jbool(o, "invert", false);
    snprintf(sub, sizeof sub, "%s.pattern", path);
    return load_pattern(t, jget(o, "pattern"), sub, &st->pat, err);
}

static int load_pretok(tokenizer *t, const cJSON *o, const char *path, loom_err *err) {
    if (jnull(o)) return 0;
    const char *type = type_of(o, path, err);
    if (!type) return -1;
    if (!strcmp(type, "Sequence")) return load_list(t, o, "pretokenizers", path, load_pretok, err);
    if (t->n_pre == MAX_STEPS) return loom_errf(err, "%s: more than %d pre-tokenizers", path, MAX_STEPS);
    pre_step *st = &t->pre[t->n_pre++];
    if (!strcmp(type, "ByteLevel")) {
        st->kind = PRE_BYTELEVEL;
        st->prefix_space = jbool(o, "add_prefix_space", true);
        if (jbool(o, "use_regex", true) && !(st->pat.re = compile_re(GPT2_PATTERN, path, err))) return -1;
        return 0;
    }
    if (!strcmp(type, "Split")) return load_split(t, o, path, st, err);
    if (!strcmp(type, "Metaspace")) {
        st->kind = PRE_METASPACE;
        st->split = jbool(o, "split", true);
        if (jchar(t, o, "replacement", "\xE2\x96\x81", path, &st->repl, err)) return -1;
        st->pat.lit = st->repl;
        return load_scheme(o, path, &st->prepend, err);
    }
    return loom_errf(err, "%s.type: unsupported pre-tokenizer \"%s\"", path, type);
}

static int load_template(tokenizer *t, const cJSON *o, const char *path, loom_err *err) {
    const cJSON *single = jget(o, "single"), *specials = jget(o, "special_tokens");
    if (!cJSON_IsArray(single)) return loom_errf(err, "%s.single: missing or not a list", path);
    if (t->n_tmpl == MAX_STEPS) return loom_errf(err, "%s: more than %d templates", path, MAX_STEPS);
    tmpl *tp = &t->tmpls[t->n_tmpl++];
    int i = 0;
    for (const cJSON *it = single->child; it; it = it->next, i++) {
        const char *seq = jstr(jget(it, "Sequence"), "id"), *name = jstr(jget(it, "SpecialToken"), "id");
        if (seq) {
            if (strcmp(seq, "A"))
                return loom_errf(err, "%s.single[%d]: sequence \"%s\" in a one-sequence template", path, i, seq);
            if (!RESERVE(tp->items, tp->cap, tp->n + 1)) return loom_errf(err, "out of memory");
            tp->items[tp->n++] = -1;
            continue;
        }
        const cJSON *ids = jget(jget(specials, name ? name : ""), "ids");
        if (!name || !cJSON_IsArray(ids))
            return loom_errf(err, "%s.single[%d]: not a Sequence or a SpecialToken listed in special_tokens", path, i);
        for (const cJSON *v = ids->child; v; v = v->next) {
            int32_t id = jid(v);
            if (id < 0) return loom_errf(err, "%s.special_tokens[\"%s\"].ids: bad id", path, name);
            if (!RESERVE(tp->items, tp->cap, tp->n + 1)) return loom_errf(err, "out of memory");
            tp->items[tp->n++] = id;
        }
    }
    return 0;
}

static int load_post(tokenizer *t, const cJSON *o, const char *path, loom_err *err) {
    if (jnull(o)) return 0;
    const char *type = type_of(o, path, err);
    if (!type) return -1;
    if (!strcmp(type, "Sequence")) return load_list(t, o, "processors", path, load_post, err);
    if (!strcmp(type, "ByteLevel")) return 0; /* it only trims offsets */
    if (!strcmp(type, "TemplateProcessing")) return load_template(t, o, path, err);
    return loom_errf(err, "%s.type: unsupported post-processor \"%s\"", path, type);
}

/* Strip trims characters off the fused text; HF would trim each token when it comes before the
 * fusing step, and we only stream the former. */
static int load_strip(tokenizer *t, const cJSON *o, const char *path, loom_err *err) {
    const cJSON *start = jget(o, "start"), *stop = jget(o, "stop");
    if (!t->dec_fused || t->has_strip)
        return loom_errf(err, "%s: Strip is only supported once, after Fuse or ByteLevel", path);
    if (jid(start) < 0) return loom_errf(err, "%s.start: expected a count", path);
    if (jid(stop) != 0) return loom_errf(err, "%s.stop: only 0 is supported", path);
    t->has_strip = true;
    t->strip_start = (uint32_t)jid(start);
    return jchar(t, o, "content", NULL, path, &t->strip_content, err);
}

static int load_dec_step(tokenizer *t, const cJSON *o, const char *path, loom_err *err) {
    const char *type = type_of(o, path, err);
    if (!type) return -1;
    if (!strcmp(type, "Strip")) return load_strip(t, o, path, err);
    if (t->dec_fused) return loom_errf(err, "%s: only Strip may follow Fuse or ByteLevel", path);
    if (t->n_dec == TOK_DEC_MAX_STEPS) return loom_errf(err, "%s: more than %d decoders", path, TOK_DEC_MAX_STEPS);
    dec_step *st = &t->dec[t->n_dec];
    if (!strcmp(type, "Replace")) {
        const char *from = jstr(jget(o, "pattern"), "String"), *to = jstr(o, "content");
        if (!from || !*from) return loom_errf(err, "%s.pattern: only a non-empty {\"String\": ...} is supported", path);
        if (!to) return loom_errf(err, "%s.content: missing", path);
        st->kind = DEC_REPLACE;
        if (intern(t, from, strlen(from), &st->from, err) || intern(t, to, strlen(to), &st->to, err)) return -1;
    } else if (!strcmp(type, "Metaspace")) {
        prepend_scheme scheme;
        st->kind = DEC_METASPACE;
        if (jchar(t, o, "replacement", "\xE2\x96\x81", path, &st->from, err) || load_scheme(o, path, &scheme, err))
            return -1;
        st->strip_first = scheme != PREPEND_NEVER;
    } else if (!strcmp(type, "ByteFallback")) {
        if (t->dec_bf >= 0) return loom_errf(err, "%s: more than one ByteFallback", path);
        st->kind = DEC_BYTEFALLBACK;
        t->dec_bf = t->n_dec;
    } else if (!strcmp(type, "Fuse") || !strcmp(type, "ByteLevel")) {
        st->kind = type[0] == 'F' ? DEC_FUSE : DEC_BYTELEVEL;
        t->dec_fused = true;
    } else {
        return loom_errf(err, "%s.type: unsupported decoder \"%s\"", path, type);
    }
    t->n_dec++;
    return 0;
}

static int load_decoder(tokenizer *t, const cJSON *o, loom_err *err) {
    t->dec_bf = -1;
    if (jnull(o)) {
        t->dec_join_space = true;
        return 0;
    }
    const char *type = type_of(o, "decoder", err);
    if (!type) return -1;
    if (!strcmp(type, "Sequence")) return load_list(t, o, "decoders", "decoder", load_dec_step, err);
    return load_dec_step(t, o, "decoder", err);
}

static int load_added(tokenizer *t, const cJSON *list, loom_err *err) {
    if (jnull(list)) return 0;
    if (!cJSON_IsArray(list)) return loom_errf(err, "added_tokens: not a list");
    t->added = calloc((size_t)cJSON_GetArraySize(list) + 1, sizeof *t->added);
    if (!t->added) return loom_errf(err, "out of memory");
    int i = 0;
    for (const cJSON *o = list->child; o; o = o->next, i++) {
        const char *content = jstr(o, "content");
        int32_t id = jid(jget(o, "id"));
        if (!content) return loom_errf(err, "added_tokens[%d].content: missing", i);
        if (id < 0) return loom_errf(err, "added_tokens[%d].id: missing or not an id", i);
        if (!*content) continue; /* HF ignores empty tokens */
        size_t n = strlen(content);
        added_tok *a = &t->added[t->n_added++];
        /* HF keeps the vocab's id for a token the model already has. */
        int32_t vid = vocab_find(t, content, n);
        a->id = vid >= 0 ? vid : id;
        a->special = jbool(o, "special", false);
        a->lstrip = jbool(o, "lstrip", false);
        a->rstrip = jbool(o, "rstrip", false);
        a->single_word = jbool(o, "single_word", false);
        a->normalized = jbool(o, "normalized", !a->special);
        if (intern(t, content, n, &a->content, err)) return -1;
        if (a->single_word && !t->word_re && !(t->word_re = compile_re(WORD_PATTERN, "single_word", err))) return -1;
    }
    return 0;
}

/* Normalized tokens match their normalized form in normalized text (HF refresh_added_tokens). */
static int added_keys(tokenizer *t, loom_err *err) {
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    strbuf out = {0}, tmp = {0};
    int rc = md ? 0 : loom_errf(err, "out of memory");
    for (uint32_t i = 0; i < t->n_added && !rc; i++) {
        added_tok *a = &t->added[i];
        a->key = a->content;
        if (!a->normalized || !t->n_norm) continue;
        rc = normalize(t, md, S(t, a->content), a->content.len, &out, &tmp, err);
        if (!rc) rc = intern(t, out.p ? out.p : "", out.n, &a->key, err);
    }
    pcre2_match_data_free(md);
    free(out.p);
    free(tmp.p);
    return rc;
}

typedef struct {
    uint32_t key, idx; /* first byte << 24 | (0xFFFFFF - length): longest first */
} set_entry;

static int cmp_set_entry(const void *a, const void *b) {
    const set_entry *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int build_set(tokenizer *t, added_set *set, bool normalized, loom_err *err) {
    set_entry *e = malloc((t->n_added + 1) * sizeof *e);
    set->idx = malloc((t->n_added + 1) * sizeof *set->idx);
    if (!e || !set->idx) {
        free(e);
        return loom_errf(err, "out of memory");
    }
    for (uint32_t i = 0; i < t->n_added; i++) {
        const added_tok *a = &t->added[i];
        if (a->normalized != normalized || !a->key.len) continue;
        uint32_t len = a->key.len < 0xFFFFFF ? a->key.len : 0xFFFFFF;
        e[set->n++] = (set_entry){(uint32_t)(uint8_t)S(t, a->key)[0] << 24 | (0xFFFFFF - len), i};
    }
    qsort(e, set->n, sizeof *e, cmp_set_entry);
    uint32_t k = 0;
    for (uint32_t b = 0; b <= 256; b++) {
        while (k < set->n && e[k].key >> 24 < b) k++;
        set->start[b] = k;
    }
    for (uint32_t i = 0; i < set->n; i++) set->idx[i] = e[i].idx;
    free(e);
    return 0;
}

static int finish_added(tokenizer *t, loom_err *err) {
    t->n_ids = t->model_n;
    for (uint32_t i = 0; i < t->n_added; i++)
        if (t->added[i].id >= t->n_ids) t->n_ids = t->added[i].id + 1;
    t->added_of = malloc((size_t)(t->n_ids ? t->n_ids : 1) * sizeof *t->added_of);
    if (!t->added_of) return loom_errf(err, "out of memory");
    for (int32_t i = 0; i < t->n_ids; i++) t->added_of[i] = -1;
    for (uint32_t i = 0; i < t->n_added; i++) t->added_of[t->added[i].id] = (int32_t)i; /* last wins */
    for (int k = 0; k < t->n_tmpl; k++)
        for (size_t i = 0; i < t->tmpls[k].n; i++)
            if (t->tmpls[k].items[i] >= t->n_ids)
                return loom_errf(err, "post_processor: template id %d is not in the vocab", t->tmpls[k].items[i]);
    if (added_keys(t, err)) return -1;
    return build_set(t, &t->raw_set, false, err) || build_set(t, &t->norm_set, true, err) ? -1 : 0;
}

static void init_byte_map(tokenizer *t) {
    uint32_t extra = 0;
    for (int c = 0; c < 324; c++) t->char_byte[c] = -1;
    for (int b = 0; b < 256; b++) {
        /* GPT-2 keeps printable Latin-1 bytes as themselves, moves the rest to 256 and up */
        bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        uint32_t c = keep ? (uint32_t)b : 256 + extra++;
        t->byte_char_len[b] = (uint8_t)u8encode(c, t->byte_char[b]);
        t->char_byte[c] = (int16_t)b;
    }
}

/* Bound on one decode call's output: a held byte-fallback run turned into U+FFFDs, plus the
 * longest token after Replace steps, tripled if byte-level bytes may each become U+FFFD. */
static void init_decode_cap(tokenizer *t) {
    size_t longest = 0, grow = 1;
    for (int32_t i = 0; i < t->n_ids; i++) {
        span s;
        if (token_span(t, i, &s) && s.len > longest) longest = s.len;
    }
    for (int i = 0; i < t->n_dec; i++)
        if (t->dec[i].kind == DEC_REPLACE) {
            size_t f = (t->dec[i].to.len + t->dec[i].from.len - 1) / t->dec[i].from.len;
            grow *= f > 1 ? f : 1;
        }
    size_t piece = longest * grow, run = t->dec_bf >= 0 ? 3 * TOK_DEC_GROUP * grow : 0;
    bool bytes = t->n_dec && t->dec[t->n_dec - 1].kind == DEC_BYTELEVEL;
    t->decode_cap = run + (bytes ? 3 * piece + 3 : piece) + 8;
}

static int load(tokenizer *t, const cJSON *root, loom_err *err) {
    if (!cJSON_IsObject(root)) return loom_errf(err, "not a JSON object");
    if (load_model(t, jget(root, "model"), err) ||
        load_normalizer(t, jget(root, "normalizer"), "normalizer", err) ||
        load_added(t, jget(root, "added_tokens"), err) ||
        load_pretok(t, jget(root, "pre_tokenizer"), "pre_tokenizer", err) ||
        load_post(t, jget(root, "post_processor"), "post_processor", err) ||
        load_decoder(t, jget(root, "decoder"), err) || finish_added(t, err))
        return -1;
    init_byte_map(t);
    init_decode_cap(t);
    return 0;
}

tokenizer *tokenizer_load_json(const char *json, size_t len, const char *name, loom_err *err) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, false);
    if (!root) {
        loom_errf(err, "%s: invalid JSON near byte %zu", name, end && end >= json ? (size_t)(end - json) : (size_t)0);
        return NULL;
    }
    tokenizer *t = calloc(1, sizeof *t);
    int rc = t ? load(t, root, err) : loom_errf(err, "out of memory");
    cJSON_Delete(root);
    if (rc) {
        loom_err_prefix(err, "%s", name);
        tokenizer_free(t);
        return NULL;
    }
    return t;
}

tokenizer *tokenizer_load_file(const char *path, loom_err *err) {
    size_t len;
    char *json = file_read_all(path, &len, err);
    if (!json) return NULL;
    tokenizer *t = tokenizer_load_json(json, len, path, err);
    free(json);
    return t;
}

void tokenizer_free(tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < t->n_norm; i++) pcre2_code_free(t->norm[i].pat.re);
    for (int i = 0; i < t->n_pre; i++) pcre2_code_free(t->pre[i].pat.re);
    for (int i = 0; i < t->n_tmpl; i++) free(t->tmpls[i].items);
    pcre2_code_free(t->word_re);
    free(t->raw_set.idx);
    free(t->norm_set.idx);
    free(t->added);
    free(t->added_of);
    free(t->model_str);
    free(t->vocab_slot);
    free(t->pair_key);
    free(t->pair_rank);
    free(t->pair_new);
    free(t->arena.p);
    free(t);
}

int tokenizer_vocab_size(const tokenizer *t) { return t->n_ids; }

int tokenizer_token_id(const tokenizer *t, const char *piece) {
    size_t n = strlen(piece);
    for (uint32_t i = 0; i < t->n_added; i++)
        if (t->added[i].content.len == n && !memcmp(S(t, t->added[i].content), piece, n)) return t->added[i].id;
    return vocab_find(t, piece, n);
}

const char *tokenizer_token(const tokenizer *t, int32_t id) {
    span s;
    return token_span(t, id, &s) ? S(t, s) : NULL;
}

bool tokenizer_is_special(const tokenizer *t, int32_t id) {
    const added_tok *a = added_by_id(t, id);
    return a && a->special;
}

/* ---------------------------------------------------------------- encoding */

typedef struct {
    size_t off, len;
    bool first; /* starts at offset 0 of the input (Metaspace prepend_scheme "first") */
} piece;
typedef struct {
    strbuf s;
    piece *p;
    size_t n, cap;
} pieces;
typedef struct {
    size_t s, e;
    int32_t id; /* added token, or -1 for text */
} run;
typedef struct {
    run *p;
    size_t n, cap;
} runs;
typedef struct {
    size_t s, e;
    bool m; /* a match (Removed drops these) */
} seg;
typedef struct {
    int32_t id, prev, next;
    bool dead; /* merged into its left neighbour */
} sym;
typedef struct {
    uint32_t rank, pos;
    int32_t id;
} merge;

typedef struct {
    const tokenizer *t;
    loom_err *err;
    pcre2_match_data *md;
    int32_t *ids;
    size_t n_ids, cap_ids;
    strbuf norm, tmp, pre_tmp;
    pieces pa, pb;
    runs r1, r2;
    seg *sg;
    size_t n_sg, cap_sg;
    sym *sy;
    size_t cap_sy;
    merge *hp;
    size_t n_hp, cap_hp;
} enc;

static int oom(enc *e) { return loom_errf(e->err, "tokenizer_encode: out of memory"); }

static int push_id(enc *e, int32_t id) {
    if (!RESERVE(e->ids, e->cap_ids, e->n_ids + 1)) return oom(e);
    e->ids[e->n_ids++] = id;
    return 0;
}

static int push_run(enc *e, runs *r, size_t s, size_t end, int32_t id) {
    if (!RESERVE(r->p, r->cap, r->n + 1)) return oom(e);
    r->p[r->n++] = (run){s, end, id};
    return 0;
}

/* Appends a piece to out (mapping each byte to its GPT-2 character when map); empty pieces are
 * dropped, as HF drops them after every split. */
static int push_piece(enc *e, pieces *out, const char *s, size_t n, bool first, bool map) {
    if (!n) return 0;
    size_t off = out->s.n;
    bool ok = true;
    if (map) {
        for (size_t i = 0; i < n && ok; i++) {
            uint8_t b = (uint8_t)s[i];
            ok = sb_put(&out->s, e->t->byte_char[b], e->t->byte_char_len[b]);
        }
    } else {
        ok = sb_put(&out->s, s, n);
    }
    if (!ok || !RESERVE(out->p, out->cap, out->n + 1)) return oom(e);
    out->p[out->n++] = (piece){off, out->s.n - off, first};
    return 0;
}

/* True when the character at (after) or just before (!after) pos is a word character. */
static bool word_at(enc *e, const char *s, size_t n, size_t pos, bool after) {
    if (!after) {
        do pos--;
        while (pos > 0 && ((uint8_t)s[pos] & 0xC0) == 0x80);
    }
    return pcre2_match(e->t->word_re, (PCRE2_SPTR)s, n, pos, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK, e->md, NULL) >= 0;
}

/* Start of the whitespace run that ends at end. */
static size_t space_start(const char *s, size_t end) {
    while (end > 0) {
        size_t p = end - 1, len;
        while (p > 0 && ((uint8_t)s[p] & 0xC0) == 0x80) p--;
        if (!is_space(u8decode(s + p, &len))) break;
        end = p;
    }
    return end;
}

static size_t space_len(const char *s, size_t n) {
    size_t i = 0, len;
    while (i < n && is_space(u8decode(s + i, &len))) i += len;
    return i;
}

static const added_tok *added_at(const tokenizer *t, const added_set *set, const char *s, size_t n, size_t i) {
    uint8_t b = (uint8_t)s[i];
    for (uint32_t k = set->start[b]; k < set->start[b + 1]; k++) {
        const added_tok *a = &t->added[set->idx[k]];
        if (a->key.len <= n - i && !memcmp(s + i, S(t, a->key), a->key.len)) return a;
    }
    return NULL;
}

/* Cuts s[0..n) into text runs and added-token runs (HF AddedVocabulary::find_matches). Keys are
 * UTF-8 and start with a lead byte, so a byte-wise scan only ever matches at character starts. */
static int split_added(enc *e, const added_set *set, const char *s, size_t n, runs *out) {
    out->n = 0;
    size_t start = 0;
    for (size_t i = 0; i < n && set->n;) {
        const added_tok *a = added_at(e->t, set, s, n, i);
        if (!a) {
            i++;
            continue;
        }
        size_t ms = i, me = i + a->key.len;
        i = me;
        if (a->single_word && ((ms > 0 && word_at(e, s, n, ms, false)) || (me < n && word_at(e, s, n, me, true))))
            continue;
        if (a->lstrip) {
            size_t ws = space_start(s, ms);
            ms = ws > start ? ws : start; /* spaces a previous token took stay with it */
        }
        if (a->rstrip) i = me += space_len(s + me, n - me);
        if ((start < ms && push_run(e, out, start, ms, -1)) || push_run(e, out, ms, me, a->id)) return -1;
        start = me;
    }
    return start < n ? push_run(e, out, start, n, -1) : 0;
}

/* Matches of p over s[0..n) as alternating segments covering it (HF Pattern::find_matches). */
static int find_segs(enc *e, const pattern *p, const char *s, size_t n, bool invert) {
    size_t prev = 0, ms = 0, me = 0;
    e->n_sg = 0;
    for (size_t from = 0; from <= n; from = after_match(s, n, ms, me)) {
        int r = pat_find(e->t, p, s, n, from, e->md, &ms, &me, e->err);
        if (r < 0) return -1;
        if (!r) break;
        if (!RESERVE(e->sg, e->cap_sg, e->n_sg + 2)) return oom(e);
        if (prev != ms) e->sg[e->n_sg++] = (seg){prev, ms, false};
        e->sg[e->n_sg++] = (seg){ms, me, true};
        prev = me;
    }
    if (prev != n) {
        if (!RESERVE(e->sg, e->cap_sg, e->n_sg + 1)) return oom(e);
        e->sg[e->n_sg++] = (seg){prev, n, false};
    }
    for (size_t i = 0; invert && i < e->n_sg; i++) e->sg[i].m = !e->sg[i].m;
    return 0;
}

/* Applies a split behaviour to the segments in place (HF NormalizedString::split); afterwards
 * m marks only segments to remove. Returns the new count. */
static size_t fold_segs(seg *g, size_t n, split_mode mode) {
    size_t w = 0;
    bool prev = false;
    switch (mode) {
    case SPLIT_REMOVED: return n;
    case SPLIT_ISOLATED:
        for (size_t i = 0; i < n; i++) g[i].m = false;
        return n;
    case SPLIT_CONTIGUOUS:
    case SPLIT_MERGED_PREV:
        for (size_t i = 0; i < n; i++) {
            bool m = g[i].m, join = mode == SPLIT_CONTIGUOUS ? m == prev : m && !prev;
            if (join && w) {
                g[w - 1].e = g[i].e;
            } else {
                g[w] = g[i];
                g[w++].m = false;
            }
            prev = m;
        }
        return w;
    case SPLIT_MERGED_NEXT:
        w = n;
        for (size_t i = n; i-- > 0;) {
            bool m = g[i].m;
            if (m && !prev && w < n) {
                g[w].s = g[i].s;
            } else {
                g[--w] = g[i];
                g[w].m = false;
            }
            prev = m;
        }
        memmove(g, g + w, (n - w) * sizeof *g);
        return n - w;
    }
    return n;
}

static int split_piece(enc *e, const pattern *p, bool invert, split_mode mode, const char *s, size_t n,
                       bool first, bool map, pieces *out) {
    if (find_segs(e, p, s, n, invert)) return -1;
    size_t k = fold_segs(e->sg, e->n_sg, mode);
    for (size_t i = 0; i < k; i++)
        if (!e->sg[i].m && push_piece(e, out, s + e->sg[i].s, e->sg[i].e - e->sg[i].s, first && !e->sg[i].s, map))
            return -1;
    return 0;
}

static int pre_bytelevel(enc *e, const pre_step *st, const char *s, size_t n, bool first, pieces *out) {
    if (st->prefix_space && s[0] != ' ') {
        e->pre_tmp.n = 0;
        if (!sb_put(&e->pre_tmp, " ", 1) || !sb_put(&e->pre_tmp, s, n)) return oom(e);
        s = e->pre_tmp.p;
        n = e->pre_tmp.n;
    }
    if (st->pat.re) return split_piece(e, &st->pat, false, SPLIT_ISOLATED, s, n, first, true, out);
    return push_piece(e, out, s, n, first, true);
}

static int pre_metaspace(enc *e, const pre_step *st, const char *s, size_t n, bool first, pieces *out) {
    const tokenizer *t = e->t;
    const char *r = S(t, st->repl);
    size_t rn = st->repl.len;
    bool starts = s[0] == ' ' || (n >= rn && !memcmp(s, r, rn)); /* after the replacement */
    strbuf *b = &e->pre_tmp;
    b->n = 0;
    if ((st->prepend == PREPEND_ALWAYS || (st->prepend == PREPEND_FIRST && first)) && !starts && !sb_put(b, r, rn))
        return oom(e);
    for (size_t i = 0; i < n; i++)
        if (!(s[i] == ' ' ? sb_put(b, r, rn) : sb_put(b, s + i, 1))) return oom(e);
    if (st->split) return split_piece(e, &st->pat, false, SPLIT_MERGED_NEXT, b->p, b->n, first, false, out);
    return push_piece(e, out, b->p, b->n, first, false);
}

/* Runs the pre-tokenizers over one normalized run; the pieces end up in e->pa. */
static int pretokenize(enc *e, const char *s, size_t n, bool first) {
    e->pa.n = e->pa.s.n = 0;
    if (push_piece(e, &e->pa, s, n, first, false)) return -1;
    for (int k = 0; k < e->t->n_pre; k++) {
        const pre_step *st = &e->t->pre[k];
        e->pb.n = e->pb.s.n = 0;
        for (size_t i = 0; i < e->pa.n; i++) {
            const piece *pc = &e->pa.p[i];
            const char *ps = e->pa.s.p + pc->off;
            int rc = st->kind == PRE_BYTELEVEL ? pre_bytelevel(e, st, ps, pc->len, pc->first, &e->pb)
                   : st->kind == PRE_METASPACE ? pre_metaspace(e, st, ps, pc->len, pc->first, &e->pb)
                   : split_piece(e, &st->pat, st->invert, st->mode, ps, pc->len, pc->first, false, &e->pb);
            if (rc) return -1;
        }
        pieces x = e->pa;
        e->pa = e->pb;
        e->pb = x;
    }
    return 0;
}

/* Min-heap on (rank, pos), the order HF's BinaryHeap of merges pops in. */
static bool merge_less(merge a, merge b) { return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos; }

static int heap_push(enc *e, merge m) {
    if (!RESERVE(e->hp, e->cap_hp, e->n_hp + 1)) return oom(e);
    size_t i = e->n_hp++;
    for (; i > 0 && merge_less(m, e->hp[(i - 1) / 2]); i = (i - 1) / 2) e->hp[i] = e->hp[(i - 1) / 2];
    e->hp[i] = m;
    return 0;
}

static merge heap_pop(enc *e) {
    merge top = e->hp[0], last = e->hp[--e->n_hp];
    size_t i = 0, n = e->n_hp;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && merge_less(e->hp[c + 1], e->hp[c])) c++;
        if (!merge_less(e->hp[c], last)) break;
        e->hp[i] = e->hp[c];
        i = c;
    }
    if (n) e->hp[i] = last;
    return top;
}

/* Queues the merge of the symbol at pos with its right neighbour, if there is one. */
static int queue_pair(enc *e, int32_t pos) {
    uint32_t rank;
    int32_t merged;
    if (pos < 0 || e->sy[pos].next < 0) return 0;
    if (!pair_find(e->t, e->sy[pos].id, e->sy[e->sy[pos].next].id, &rank, &merged)) return 0;
    return heap_push(e, (merge){rank, (uint32_t)pos, merged});
}

/* HF Word::merge_all: repeatedly apply the lowest-ranked merge, skipping stale queue entries. */
static int merge_all(enc *e, size_t n) {
    e->n_hp = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (queue_pair(e, (int32_t)i)) return -1;
    while (e->n_hp) {
        merge m = heap_pop(e);
        sym *a = &e->sy[m.pos];
        uint32_t rank;
        int32_t merged;
        if (a->dead || a->next < 0) continue;
        sym *b = &e->sy[a->next];
        if (!pair_find(e->t, a->id, b->id, &rank, &merged) || merged != m.id) continue;
        a->id = m.id;
        b->dead = true;
        a->next = b->next;
        if (b->next >= 0) e->sy[b->next].prev = (int32_t)m.pos;
        if (queue_pair(e, a->prev) || queue_pair(e, (int32_t)m.pos)) return -1;
    }
    return 0;
}

static bool bytes_known(const tokenizer *t, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (t->byte_id[(uint8_t)s[i]] < 0) return false;
    return true;
}

/* HF BPE::merge_word: one symbol per character (byte tokens or <unk> for characters the vocab
 * lacks), then merges, then the ids. */
static int bpe_word(enc *e, const char *w, size_t n) {
    const tokenizer *t = e->t;
    if (t->ignore_merges) {
        int32_t id = vocab_find(t, w, n);
        if (id >= 0) return push_id(e, id);
    }
    if (!RESERVE(e->sy, e->cap_sy, n)) return oom(e);
    size_t ns = 0;
    bool unk = false; /* an <unk> waiting to be added (fuse_unk grows it instead) */
    for (size_t i = 0, cl; i < n; i += cl) {
        cl = u8len((uint8_t)w[i]);
        int32_t id = vocab_find(t, w + i, cl);
        if (id >= 0) {
            if (unk) e->sy[ns++].id = t->unk_id;
            unk = false;
            e->sy[ns++].id = id;
        } else if (t->byte_fallback && bytes_known(t, w + i, cl)) {
            /* as HF: a waiting <unk> is not added before these */
            for (size_t k = 0; k < cl; k++) e->sy[ns++].id = t->byte_id[(uint8_t)w[i + k]];
        } else if (t->unk.off != NONE) {
            if (t->unk_id < 0)
                return loom_errf(e->err, "tokenizer_encode: model.unk_token \"%s\" is not in the vocab", S(t, t->unk));
            if (unk && !t->fuse_unk) e->sy[ns++].id = t->unk_id;
            unk = true;
        } /* with neither, HF drops the character */
    }
    if (unk) e->sy[ns++].id = t->unk_id;
    for (size_t i = 0; i < ns; i++) {
        e->sy[i].prev = (int32_t)i - 1;
        e->sy[i].next = i + 1 < ns ? (int32_t)i + 1 : -1;
        e->sy[i].dead = false;
    }
    if (merge_all(e, ns)) return -1;
    for (int32_t i = ns ? 0 : -1; i >= 0; i = e->sy[i].next)
        if (push_id(e, e->sy[i].id)) return -1;
    return 0;
}

/* A run of the raw text without added tokens: normalize, split on normalized added tokens,
 * pre-tokenize and merge the rest. */
static int encode_segment(enc *e, const char *s, size_t n, bool first) {
    if (normalize(e->t, e->md, s, n, &e->norm, &e->tmp, e->err)) return -1;
    const char *ns = e->norm.p;
    if (split_added(e, &e->t->norm_set, ns, e->norm.n, &e->r2)) return -1;
    for (size_t i = 0; i < e->r2.n; i++) {
        run r = e->r2.p[i];
        if (r.id >= 0) {
            if (push_id(e, r.id)) return -1;
            continue;
        }
        if (pretokenize(e, ns + r.s, r.e - r.s, first && !r.s)) return -1;
        for (size_t k = 0; k < e->pa.n; k++)
            if (bpe_word(e, e->pa.s.p + e->pa.p[k].off, e->pa.p[k].len)) return -1;
    }
    return 0;
}

static int apply_templates(enc *e) {
    for (int k = 0; k < e->t->n_tmpl; k++) {
        const tmpl *tp = &e->t->tmpls[k];
        size_t n = 0;
        for (size_t i = 0; i < tp->n; i++) n += tp->items[i] < 0 ? e->n_ids : 1;
        int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
        if (!ids) return oom(e);
        size_t w = 0;
        for (size_t i = 0; i < tp->n; i++) {
            if (tp->items[i] >= 0) {
                ids[w++] = tp->items[i];
            } else if (e->n_ids) {
                memcpy(ids + w, e->ids, e->n_ids * sizeof *ids);
                w += e->n_ids;
            }
        }
        free(e->ids);
        e->ids = ids;
        e->n_ids = w;
        e->cap_ids = n ? n : 1;
    }
    return 0;
}

static int encode_text(enc *e, const char *s, size_t n) {
    if (split_added(e, &e->t->raw_set, s, n, &e->r1)) return -1;
    for (size_t i = 0; i < e->r1.n; i++) {
        run r = e->r1.p[i];
        if (r.id >= 0 ? push_id(e, r.id) : encode_segment(e, s + r.s, r.e - r.s, !r.s)) return -1;
    }
    return 0;
}

int tokenizer_encode(const tokenizer *t, const char *text, size_t len, bool add_special,
                     int32_t **ids, size_t *n_ids, loom_err *err) {
    *ids = NULL;
    *n_ids = 0;
    if (!len) text = "";
    size_t bad = u8invalid(text, len);
    if (bad < len) return loom_errf(err, "tokenizer_encode: invalid UTF-8 at byte %zu", bad);
    enc e = {.t = t, .err = err};
    e.md = pcre2_match_data_create(1, NULL);
    int rc = e.md ? encode_text(&e, text, len) : oom(&e);
    if (!rc && add_special) rc = apply_templates(&e);
    if (!rc && !RESERVE(e.ids, e.cap_ids, 1)) rc = oom(&e);
    pcre2_match_data_free(e.md);
    free(e.norm.p);
    free(e.tmp.p);
    free(e.pre_tmp.p);
    free(e.pa.s.p);
    free(e.pa.p);
    free(e.pb.s.p);
    free(e.pb.p);
    free(e.r1.p);
    free(e.r2.p);
    free(e.sg);
    free(e.sy);
    free(e.hp);
    if (rc) {
        free(e.ids);
        return -1;
    }
    *ids = e.ids;
    *n_ids = e.n_ids;
    return 0;
}

/* ---------------------------------------------------------------- decoding */

/* Where decoded text goes: the caller's fixed buffer (excess dropped) or a growing one. */
typedef struct {
    char *p;
    size_t n, cap;
    bool grow, oom;
} sink;

static void sink_put(sink *o, const char *s, size_t n) {
    if (o->grow) {
        if (o->oom || (n && !RESERVE(o->p, o->cap, o->n + n))) {
            o->oom = true;
            return;
        }
    } else if (n > o->cap - o->n) {
        n = o->cap - o->n;
    }
    if (n) memcpy(o->p + o->n, s, n);
    o->n += n;
}

/* Text after the fusing step: drop the leading Strip characters, then output. */
static void dec_text(const tokenizer *t, tok_decoder *d, sink *o, const char *s, size_t n) {
    if (t->has_strip && !d->strip_done) {
        span c = t->strip_content;
        while (n >= c.len && d->stripped < t->strip_start && !memcmp(s, S(t, c), c.len)) {
            s += c.len;
            n -= c.len;
            d->stripped++;
        }
        if (n) d->strip_done = true;
    }
    sink_put(o, s, n);
}

/* Byte-level output: bytes to UTF-8 text the way Rust's from_utf8_lossy does, holding back an
 * unfinished sequence until the next bytes (or the end) decide it. */
static void dec_bytes(const tokenizer *t, tok_decoder *d, sink *o, const uint8_t *b, size_t n) {
    char buf[256];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        d->u8[d->n_u8++] = b[i];
        for (;;) {
            int r = u8check(d->u8, d->n_u8);
            if (r == 0) break;
            if (r > 0) { /* complete: the held bytes and this one form a character */
                memcpy(buf + k, d->u8, (size_t)r);
                k += (size_t)r;
                d->n_u8 = 0;
                break;
            }
            size_t bad = (size_t)-r; /* a maximal invalid subpart: one U+FFFD, then look again */
            memcpy(buf + k, FFFD, 3);
            k += 3;
            d->n_u8 = (uint8_t)(d->n_u8 - bad);
            memmove(d->u8, d->u8 + bad, d->n_u8);
            if (!d->n_u8) break;
        }
        if (k > sizeof buf - 8) {
            dec_text(t, d, o, buf, k);
            k = 0;
        }
    }
    dec_text(t, d, o, buf, k);
}

/* Step output buffers: small pieces stay on the stack. */
typedef struct {
    char *heap;
    char local[256];
} scratch;

static char *scratch_get(scratch *sc, size_t n) {
    if (n <= sizeof sc->local) return sc->local;
    free(sc->heap);
    return sc->heap = malloc(n);
}

static void dec_run(const tokenizer *t, tok_decoder *d, sink *o, int k, const char *s, size_t n);

/* Ends a byte-fallback run: valid UTF-8 goes on as one piece, otherwise one U+FFFD per byte
 * (HF ByteFallback). A run already known bad has had its U+FFFDs sent. */
static void group_end(const tokenizer *t, tok_decoder *d, sink *o) {
    size_t n = d->n_group;
    d->n_group = 0;
    if (d->group_bad || !n) {
        d->group_bad = false;
        return;
    }
    if (u8invalid((const char *)d->group, n) == n) {
        dec_run(t, d, o, t->dec_bf + 1, (const char *)d->group, n);
        return;
    }
    for (size_t i = 0; i < n; i++) dec_run(t, d, o, t->dec_bf + 1, FFFD, 3);
}

static void group_add(const tokenizer *t, tok_decoder *d, sink *o, uint8_t b) {
    if (d->group_bad) {
        dec_run(t, d, o, t->dec_bf + 1, FFFD, 3);
        return;
    }
    if (d->n_group == TOK_DEC_GROUP) {
        /* A run this long: send its complete characters now, keeping an unfinished tail. This
         * departs from HF only if a later byte of the same run turns out invalid. */
        size_t done = 0, n = d->n_group, keep;
        for (int r; done < n && (r = u8check(d->group + done, n - done)) > 0;) done += (size_t)r;
        keep = n - done;
        char buf[TOK_DEC_GROUP];
        memcpy(buf, d->group, n - keep);
        memmove(d->group, d->group + n - keep, keep);
        d->n_group = (uint8_t)keep;
        dec_run(t, d, o, t->dec_bf + 1, buf, n - keep);
    }
    d->group[d->n_group++] = b;
    if (!u8prefix_ok(d->group, d->n_group)) { /* the run can no longer be valid: all U+FFFD */
        size_t n = d->n_group;
        d->n_group = 0;
        d->group_bad = true;
        for (size_t i = 0; i < n; i++) dec_run(t, d, o, t->dec_bf + 1, FFFD, 3);
    }
}

static int hex_digit(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A ByteFallback token: "<0xXX>". */
static bool byte_token(const char *s, size_t n, uint8_t *b) {
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>' || hex_digit(s[3]) < 0 || hex_digit(s[4]) < 0) return false;
    *b = (uint8_t)(hex_digit(s[3]) << 4 | hex_digit(s[4]));
    return true;
}

static size_t dec_replace(const tokenizer *t, const dec_step *st, const char *s, size_t n, scratch *sc, char **out) {
    const char *from = S(t, st->from);
    size_t count = 0;
    for (const char *p = s; (p = memmem(p, n - (size_t)(p - s), from, st->from.len)); p += st->from.len) count++;
    char *w = *out = scratch_get(sc, n + count * st->to.len);
    if (!w) return 0;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        if (n - i >= st->from.len && !memcmp(s + i, from, st->from.len)) {
            memcpy(w + k, S(t, st->to), st->to.len);
            k += st->to.len;
            i += st->from.len;
        } else {
            w[k++] = s[i++];
        }
    }
    return k;
}

/* HF Metaspace decoder: replacement chars become spaces, and vanish in the first token. */
static size_t dec_metaspace(const tokenizer *t, const dec_step *st, bool first, const char *s, size_t n, scratch *sc,
                            char **out) {
    char *w = *out = scratch_get(sc, n);
    if (!w) return 0;
    size_t k = 0, rn = st->from.len;
    for (size_t i = 0; i < n;) {
        if (n - i >= rn && !memcmp(s + i, S(t, st->from), rn)) {
            if (!first || !st->strip_first) w[k++] = ' ';
            i += rn;
        } else {
            w[k++] = s[i++];
        }
    }
    return k;
}

/* HF ByteLevel decoder, per token: its characters back to bytes; a token with any character
 * outside the byte alphabet (an added token like "  ") goes through as it is. */
static void dec_bytelevel(const tokenizer *t, tok_decoder *d, sink *o, const char *s, size_t n, scratch *sc) {
    uint8_t *w = (uint8_t *)scratch_get(sc, n);
    size_t k = 0, len;
    if (!w) {
        o->oom = true;
        return;
    }
    for (size_t i = 0; i < n; i += len) {
        uint32_t c = u8decode(s + i, &len);
        if (c >= 324 || t->char_byte[c] < 0) {
            dec_bytes(t, d, o, (const uint8_t *)s, n);
            return;
        }
        w[k++] = (uint8_t)t->char_byte[c];
    }
    dec_bytes(t, d, o, w, k);
}

/* Sends one piece through decoder steps k.. (HF decode_chain, one token at a time). */
static void dec_run(const tokenizer *t, tok_decoder *d, sink *o, int k, const char *s, size_t n) {
    scratch sc[2] = {{NULL, {0}}, {NULL, {0}}};
    int cur = 0;
    for (; k < t->n_dec; k++) {
        const dec_step *st = &t->dec[k];
        char *w = NULL;
        uint8_t b;
        switch (st->kind) {
        case DEC_REPLACE: n = dec_replace(t, st, s, n, &sc[cur], &w); break;
        case DEC_METASPACE:
            n = dec_metaspace(t, st, !d->seen[k], s, n, &sc[cur], &w);
            d->seen[k] = true;
            break;
        case DEC_BYTEFALLBACK:
            if (byte_token(s, n, &b)) {
                group_add(t, d, o, b);
                goto done;
            }
            group_end(t, d, o);
            continue;
        case DEC_FUSE: dec_text(t, d, o, s, n); goto done;
        case DEC_BYTELEVEL: dec_bytelevel(t, d, o, s, n, &sc[cur]); goto done;
        }
        if (!w) {
            o->oom = true;
            goto done;
        }
        s = w;
        cur ^= 1;
    }
    dec_text(t, d, o, s, n); /* no fusing step: HF joins the pieces as they are */
done:
    free(sc[0].heap);
    free(sc[1].heap);
}

static void dec_feed(const tokenizer *t, tok_decoder *d, int32_t id, bool skip_special, sink *o) {
    span s;
    const added_tok *a = added_by_id(t, id);
    /* Special means the added token's flag. HF 0.23 instead checks the token's normalized form
     * and so no longer skips special tokens marked normalized (as in onnxruntime-extensions'
     * Llama-2 file); we keep the earlier behaviour, which tokenizers.js shares. */
    if ((a && a->special && skip_special) || !token_span(t, id, &s)) return;
    if (t->dec_join_space && d->fed) dec_text(t, d, o, " ", 1);
    d->fed = true;
    dec_run(t, d, o, 0, S(t, s), s.len);
}

static void dec_finish(const tokenizer *t, tok_decoder *d, sink *o) {
    if (t->dec_bf >= 0) group_end(t, d, o);
    if (d->n_u8) dec_text(t, d, o, FFFD, 3); /* an unfinished sequence at the end is one U+FFFD */
    tok_decoder_init(d);
}

void tok_decoder_init(tok_decoder *d) { memset(d, 0, sizeof *d); }

size_t tokenizer_decode_cap(const tokenizer *t) { return t->decode_cap; }

size_t tokenizer_decode_next(const tokenizer *t, tok_decoder *d, int32_t id, char *out, size_t cap) {
    sink o = {.p = out, .cap = cap};
    dec_feed(t, d, id, true, &o);
    return o.n;
}

size_t tokenizer_decode_flush(const tokenizer *t, tok_decoder *d, char *out, size_t cap) {
    sink o = {.p = out, .cap = cap};
    dec_finish(t, d, &o);
    return o.n;
}

char *tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n, bool skip_special) {
    tok_decoder d;
    sink o = {.grow = true};
    tok_decoder_init(&d);
    for (size_t i = 0; i < n; i++) dec_feed(t, &d, ids[i], skip_special, &o);
    dec_finish(t, &d, &o);
    sink_put(&o, "", 1);
    if (o.oom) {
        free(o.p);
        return NULL;
    }
    return o.p;
}

/* Internals shared by the tokenizer's files (not for the engine: it uses text/tokenizer.h). Owns
 * the tokenizer struct, the per-call encoder state, the string buffer, and the declarations each
 * stage exports to the others:
 *   tokenizer.c       string arena, id -> token lookups, the public queries
 *   tokenizer_load.c  reading and validating tokenizer.json; tokenizer_free
 *   bpe.c             vocab and merge tables, merging a word into ids (the BPE model)
 *   pretokenize.c     regex/literal patterns, the normalizer, the pre-tokenizers
 *   added.c           the added-token index and splitting text on added tokens
 *   encode.c          the encode pipeline and the post-processor templates
 *   decode.c          the decoder chain, streaming and whole-sequence
 * UTF-8 decoding and validation are util/utf8.c's. */
#ifndef LOOM_TEXT_TOKENIZER_IMPL_H
#define LOOM_TEXT_TOKENIZER_IMPL_H
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"
#include "util/alloc.h"
#include "util/err.h"
#include "util/utf8.h"

#define NONE      UINT32_MAX
#define MAX_STEPS 16 /* normalizers, pre-tokenizers, templates */

/* ---------------------------------------------------------------- growable buffers */

typedef struct {
    char *p;
    size_t n, cap;
} strbuf;

/* Appends s[0..n) (growing through util/alloc.h); -1 with err set when out of memory. */
static inline int sb_put(strbuf *b, const void *s, size_t n, loom_err *err) {
    if (!n) return 0;
    if (ARRAY_RESERVE(b->p, b->cap, b->n + n, "tokenizer text", err)) return -1;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

/* ---------------------------------------------------------------- the tokenizer */

typedef struct {
    uint32_t off, len; /* into tokenizer.arena; off is NONE for "no string" */
} span;

typedef struct {
    span lit;       /* literal pattern, when re is NULL */
    pcre2_code *re; /* regex pattern */
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
    pattern pat;            /* ByteLevel: GPT-2 regex (NULL without use_regex); Split: its pattern;
                        * Metaspace: the replacement, split before */
    split_mode mode;        /* Split */
    bool invert;            /* Split */
    bool prefix_space;      /* ByteLevel add_prefix_space */
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
    span from, to;    /* Replace: literal and replacement; Metaspace: from = replacement char */
    bool strip_first; /* Metaspace: the first token loses its replacement chars */
} dec_step;

struct tokenizer {
    strbuf arena; /* every string, NUL-terminated */
    int32_t n_ids, model_n;
    span *model_str;                  /* [model_n] vocab strings */
    int32_t *added_of;                /* [n_ids] index into added, or -1 */
    uint32_t *vocab_slot, vocab_mask; /* 1 + id, 0 empty */
    uint64_t *pair_key;               /* merges: (left << 32 | right) -> rank, merged id */
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

static inline const char *S(const tokenizer *t, span s) { return t->arena.p + s.off; }

/* tokenizer.c */
/* Copies s[0..n) into the arena, NUL-terminated. */
int tok_intern(tokenizer *t, const char *s, size_t n, span *out, loom_err *err);
const added_tok *tok_added_by_id(const tokenizer *t, int32_t id);
/* The string decoding uses for id: the added token's content, else the vocab entry. */
bool tok_token_span(const tokenizer *t, int32_t id, span *out);

/* bpe.c: the tables are allocated by the loader, filled through these. */
int32_t tok_vocab_find(const tokenizer *t, const char *s, size_t n);
void tok_vocab_add(tokenizer *t, int32_t id); /* model_str[id] is set */
/* Sets the rank and merged id of the pair (left, right); a later call for the pair overwrites. */
void tok_pair_add(tokenizer *t, int32_t left, int32_t right, uint32_t rank, int32_t merged);

/* pretokenize.c */
/* Runs the normalizer over s[0..n) into out (tmp is scratch). */
int tok_normalize(const tokenizer *t, pcre2_match_data *md, const char *s, size_t n, strbuf *out, strbuf *tmp,
                  loom_err *err);

/* added.c */
/* Builds raw_set and norm_set, normalizing the keys of normalized tokens. */
int tok_added_index(tokenizer *t, loom_err *err);

/* decode.c */
/* Sets t->decode_cap once the vocab, added tokens and decoder chain are loaded. */
void tok_decode_init_cap(tokenizer *t);

/* tokenizer_load.c: loads a tokenizer.json already parsed (vocab_load.c builds one); name prefixes
 * errors. */
struct cJSON;
tokenizer *tokenizer_load_tree(const struct cJSON *root, const char *name, loom_err *err);

/* ---------------------------------------------------------------- encoding state */

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

/* One tokenizer_encode call: the ids so far and every stage's scratch, reused across pieces. */
typedef struct {
    const tokenizer *t;
    loom_err *err;
    pcre2_match_data *md;
    int32_t *ids;
    size_t n_ids, cap_ids;
    strbuf norm, tmp, pre_tmp; /* normalized run; normalizer and pre-tokenizer scratch */
    pieces pa, pb;             /* pre-tokenizer output and scratch */
    runs r1, r2;               /* added-token splits of the raw and the normalized text */
    seg *sg;                   /* pattern matches of one piece */
    size_t n_sg, cap_sg;
    sym *sy; /* BPE symbols of one word */
    size_t cap_sy;
    merge *hp; /* BPE merge queue */
    size_t n_hp, cap_hp;
} enc;

static inline int enc_push_id(enc *e, int32_t id) {
    if (ARRAY_RESERVE(e->ids, e->cap_ids, e->n_ids + 1, "token ids", e->err)) return -1;
    e->ids[e->n_ids++] = id;
    return 0;
}

/* pretokenize.c: runs the pre-tokenizers over one normalized run; the pieces end up in e->pa. */
int tok_pretokenize(enc *e, const char *s, size_t n, bool first);
/* bpe.c: appends the ids of one pre-tokenized word. */
int tok_bpe_word(enc *e, const char *w, size_t n);
/* added.c: cuts s[0..n) into text runs and added-token runs. */
int tok_split_added(enc *e, const added_set *set, const char *s, size_t n, runs *out);

#endif

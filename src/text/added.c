/* Added tokens: the index that matches them (built at load) and splitting text on them, with
 * HF's lstrip, rstrip, single_word and normalized options. */
#include "text/tokenizer_impl.h"

/* ---------------------------------------------------------------- the index */

/* Normalized tokens match their normalized form in normalized text (HF refresh_added_tokens). */
static int added_keys(tokenizer *t, loom_err *err) {
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    strbuf out = {0}, tmp = {0};
    int rc = md ? 0 : loom_errf(err, "cannot allocate PCRE2 match data");
    for (uint32_t i = 0; i < t->n_added && !rc; i++) {
        added_tok *a = &t->added[i];
        a->key = a->content;
        if (!a->normalized || !t->n_norm) continue;
        rc = tok_normalize(t, md, S(t, a->content), a->content.len, &out, &tmp, err);
        if (!rc) rc = tok_intern(t, out.p ? out.p : "", out.n, &a->key, err);
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
    set_entry *e = mem_array((size_t)t->n_added + 1, sizeof *e, "the added-token index", err);
    set->idx = e ? mem_array((size_t)t->n_added + 1, sizeof *set->idx, "the added-token index", err) : NULL;
    if (!set->idx) {
        free(e);
        return -1;
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

int tok_added_index(tokenizer *t, loom_err *err) {
    if (added_keys(t, err)) return -1;
    return build_set(t, &t->raw_set, false, err) || build_set(t, &t->norm_set, true, err) ? -1 : 0;
}

/* ---------------------------------------------------------------- splitting */

static int push_run(enc *e, runs *r, size_t s, size_t end, int32_t id) {
    if (ARRAY_RESERVE(r->p, r->cap, r->n + 1, "added-token runs", e->err)) return -1;
    r->p[r->n++] = (run){s, end, id};
    return 0;
}

/* Start of the character before pos (pos > 0). */
static size_t char_before(const char *s, size_t pos) {
    do pos--;
    while (pos > 0 && ((uint8_t)s[pos] & 0xC0) == 0x80);
    return pos;
}

/* True when the character at (after) or just before (!after) pos is a word character. */
static bool word_at(enc *e, const char *s, size_t n, size_t pos, bool after) {
    if (!after) pos = char_before(s, pos);
    return pcre2_match(e->t->word_re, (PCRE2_SPTR)s, n, pos, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK, e->md, NULL) >= 0;
}

/* Unicode White_Space, which is what Rust's \s (used for lstrip/rstrip) matches. */
static bool is_space(uint32_t c) {
    return (c >= 9 && c <= 13) || c == ' ' || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
           c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Start of the whitespace run that ends at end. */
static size_t space_start(const char *s, size_t end) {
    while (end > 0) {
        size_t p = char_before(s, end), len;
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

/* HF AddedVocabulary::find_matches. Keys are UTF-8 and start with a lead byte, so a byte-wise
 * scan only ever matches at character starts. */
int tok_split_added(enc *e, const added_set *set, const char *s, size_t n, runs *out) {
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

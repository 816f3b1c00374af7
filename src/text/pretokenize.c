/* The text stages before BPE: literal and regex patterns, the normalizer (Prepend, Replace),
 * and the pre-tokenizers (ByteLevel, Split with its behaviours, Metaspace), each cutting a
 * normalized run into the pieces BPE merges. */
#include "text/tokenizer_impl.h"

/* ---------------------------------------------------------------- patterns */

/* Finds the first match of p in s[0..n) at or after from: 1 with [*ms, *me), 0 for none, -1 on a
 * matching failure (err set). */
static int pat_find(const tokenizer *t, const pattern *p, const char *s, size_t n, size_t from, pcre2_match_data *md,
                    size_t *ms, size_t *me, loom_err *err) {
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
static int replace_all(const tokenizer *t, const pattern *p, const char *with, size_t wn, const char *s, size_t n,
                       strbuf *out, pcre2_match_data *md, loom_err *err) {
    size_t pos = 0, ms = 0, me = 0;
    for (size_t from = 0; from <= n; from = after_match(s, n, ms, me)) {
        int r = pat_find(t, p, s, n, from, md, &ms, &me, err);
        if (r < 0) return -1;
        if (!r) break;
        if (sb_put(out, s + pos, ms - pos, err) || sb_put(out, with, wn, err)) return -1;
        pos = me;
    }
    return sb_put(out, s + pos, n - pos, err);
}

/* ---------------------------------------------------------------- normalizer */

static void sb_swap(strbuf *a, strbuf *b) {
    strbuf x = *a;
    *a = *b;
    *b = x;
}

int tok_normalize(const tokenizer *t, pcre2_match_data *md, const char *s, size_t n, strbuf *out, strbuf *tmp,
                  loom_err *err) {
    out->n = 0;
    if (sb_put(out, s, n, err)) return -1;
    for (int i = 0; i < t->n_norm; i++) {
        const norm_step *st = &t->norm[i];
        tmp->n = 0;
        if (st->kind == NORM_PREPEND) {
            if (!out->n) continue; /* HF prepends only to non-empty text */
            if (sb_put(tmp, S(t, st->str), st->str.len, err) || sb_put(tmp, out->p, out->n, err)) return -1;
        } else if (replace_all(t, &st->pat, S(t, st->str), st->str.len, out->p ? out->p : "", out->n, tmp, md, err)) {
            return -1;
        }
        sb_swap(out, tmp);
    }
    return 0;
}

/* ---------------------------------------------------------------- pre-tokenizers */

/* Appends a piece to out (mapping each byte to its GPT-2 character when map); empty pieces are
 * dropped, as HF drops them after every split. */
static int push_piece(enc *e, pieces *out, const char *s, size_t n, bool first, bool map) {
    if (!n) return 0;
    size_t off = out->s.n;
    if (map) {
        for (size_t i = 0; i < n; i++) {
            uint8_t b = (uint8_t)s[i];
            if (sb_put(&out->s, e->t->byte_char[b], e->t->byte_char_len[b], e->err)) return -1;
        }
    } else if (sb_put(&out->s, s, n, e->err)) {
        return -1;
    }
    if (ARRAY_RESERVE(out->p, out->cap, out->n + 1, "pre-tokenized pieces", e->err)) return -1;
    out->p[out->n++] = (piece){off, out->s.n - off, first};
    return 0;
}

/* Matches of p over s[0..n) as alternating segments covering it (HF Pattern::find_matches). */
static int find_segs(enc *e, const pattern *p, const char *s, size_t n, bool invert) {
    size_t prev = 0, ms = 0, me = 0;
    e->n_sg = 0;
    for (size_t from = 0; from <= n; from = after_match(s, n, ms, me)) {
        int r = pat_find(e->t, p, s, n, from, e->md, &ms, &me, e->err);
        if (r < 0) return -1;
        if (!r) break;
        if (ARRAY_RESERVE(e->sg, e->cap_sg, e->n_sg + 2, "pattern matches", e->err)) return -1;
        if (prev != ms) e->sg[e->n_sg++] = (seg){prev, ms, false};
        e->sg[e->n_sg++] = (seg){ms, me, true};
        prev = me;
    }
    if (prev != n) {
        if (ARRAY_RESERVE(e->sg, e->cap_sg, e->n_sg + 1, "pattern matches", e->err)) return -1;
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

static int split_piece(enc *e, const pattern *p, bool invert, split_mode mode, const char *s, size_t n, bool first,
                       bool map, pieces *out) {
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
        if (sb_put(&e->pre_tmp, " ", 1, e->err) || sb_put(&e->pre_tmp, s, n, e->err)) return -1;
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
    if ((st->prepend == PREPEND_ALWAYS || (st->prepend == PREPEND_FIRST && first)) && !starts &&
        sb_put(b, r, rn, e->err))
        return -1;
    for (size_t i = 0; i < n; i++)
        if (s[i] == ' ' ? sb_put(b, r, rn, e->err) : sb_put(b, s + i, 1, e->err)) return -1;
    if (st->split) return split_piece(e, &st->pat, false, SPLIT_MERGED_NEXT, b->p, b->n, first, false, out);
    return push_piece(e, out, b->p, b->n, first, false);
}

int tok_pretokenize(enc *e, const char *s, size_t n, bool first) {
    e->pa.n = e->pa.s.n = 0;
    if (push_piece(e, &e->pa, s, n, first, false)) return -1;
    for (int k = 0; k < e->t->n_pre; k++) {
        const pre_step *st = &e->t->pre[k];
        e->pb.n = e->pb.s.n = 0;
        for (size_t i = 0; i < e->pa.n; i++) {
            const piece *pc = &e->pa.p[i];
            const char *ps = e->pa.s.p + pc->off;
            int rc = st->kind == PRE_BYTELEVEL ? pre_bytelevel(e, st, ps, pc->len, pc->first, &e->pb)
                     : st->kind == PRE_METASPACE
                         ? pre_metaspace(e, st, ps, pc->len, pc->first, &e->pb)
                         : split_piece(e, &st->pat, st->invert, st->mode, ps, pc->len, pc->first, false, &e->pb);
            if (rc) return -1;
        }
        pieces x = e->pa;
        e->pa = e->pb;
        e->pb = x;
    }
    return 0;
}

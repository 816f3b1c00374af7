/* The encode pipeline (HF's order): split the raw text on added tokens, normalize each other
 * run and split it again on normalized added tokens, pre-tokenize, BPE-merge each piece, and
 * apply the post-processor templates. */
#include "text/tokenizer_impl.h"

/* A run of the raw text without added tokens: normalize, split on normalized added tokens,
 * pre-tokenize and merge the rest. */
static int encode_segment(enc *e, const char *s, size_t n, bool first) {
    if (tok_normalize(e->t, e->md, s, n, &e->norm, &e->tmp, e->err)) return -1;
    const char *ns = e->norm.p;
    if (tok_split_added(e, &e->t->norm_set, ns, e->norm.n, &e->r2)) return -1;
    for (size_t i = 0; i < e->r2.n; i++) {
        run r = e->r2.p[i];
        if (r.id >= 0) {
            if (enc_push_id(e, r.id)) return -1;
            continue;
        }
        if (tok_pretokenize(e, ns + r.s, r.e - r.s, first && !r.s)) return -1;
        for (size_t k = 0; k < e->pa.n; k++)
            if (tok_bpe_word(e, e->pa.s.p + e->pa.p[k].off, e->pa.p[k].len)) return -1;
    }
    return 0;
}

static int apply_templates(enc *e) {
    for (int k = 0; k < e->t->n_tmpl; k++) {
        const tmpl *tp = &e->t->tmpls[k];
        size_t n = 0;
        for (size_t i = 0; i < tp->n; i++) n += tp->items[i] < 0 ? e->n_ids : 1;
        int32_t *ids = mem_array(n, sizeof *ids, "token ids", e->err);
        if (!ids) return -1;
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
    if (tok_split_added(e, &e->t->raw_set, s, n, &e->r1)) return -1;
    for (size_t i = 0; i < e->r1.n; i++) {
        run r = e->r1.p[i];
        if (r.id >= 0 ? enc_push_id(e, r.id) : encode_segment(e, s + r.s, r.e - r.s, !r.s)) return -1;
    }
    return 0;
}

int tokenizer_encode(const tokenizer *t, const char *text, size_t len, bool add_special, int32_t **ids, size_t *n_ids,
                     loom_err *err) {
    *ids = NULL;
    *n_ids = 0;
    if (!len) text = "";
    size_t bad = u8invalid(text, len);
    if (bad < len) return loom_errf(err, "tokenizer_encode: invalid UTF-8 at byte %zu", bad);
    enc e = {.t = t, .err = err};
    e.md = pcre2_match_data_create(1, NULL);
    int rc = e.md ? encode_text(&e, text, len) : loom_errf(err, "tokenizer_encode: cannot allocate PCRE2 match data");
    if (!rc && add_special) rc = apply_templates(&e);
    if (!rc && ARRAY_RESERVE(e.ids, e.cap_ids, 1, "token ids", err)) rc = -1;
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

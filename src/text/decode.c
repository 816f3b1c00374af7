/* Decoding: each token string goes through the decoder chain (Replace, Metaspace, ByteFallback,
 * Fuse or ByteLevel, then Strip) one at a time, so whole-sequence and streaming decode are the
 * same code and cannot disagree. */
#include "text/tokenizer_impl.h"

static const char FFFD[] = "\xEF\xBF\xBD";
_Static_assert(TOK_DEC_GROUP < 256, "tok_decoder.n_group is a uint8_t");

/* Where decoded text goes: the caller's fixed buffer (excess dropped) or a growing one. */
typedef struct {
    char *p;
    size_t n, cap;
    bool grow, oom;
} sink;

static void sink_put(sink *o, const char *s, size_t n) {
    if (o->grow) {
        if (o->oom || (n && ARRAY_RESERVE(o->p, o->cap, o->n + n, "decoded text", NULL))) {
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
    if (d->raw) {
        sink_put(o, (const char *)b, n);
        return;
    }
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

/* Step output buffers: small pieces stay on the stack. Out of memory, a step has no output
 * (NULL) and the sink is marked: tokenizer_decode then returns NULL, and decode_next, whose
 * callers have no error path, leaves out that piece. */
typedef struct {
    char *heap;
    char local[256];
} scratch;

static char *scratch_get(scratch *sc, size_t n) {
    if (n <= sizeof sc->local) return sc->local;
    free(sc->heap);
    return sc->heap = mem_alloc(n, "decoder scratch", NULL);
}

static void dec_run(const tokenizer *t, tok_decoder *d, sink *o, int k, const char *s, size_t n);

/* Well-formed so far: complete sequences, then perhaps an unfinished one. */
static bool u8prefix_ok(const uint8_t *s, size_t n) {
    size_t i = u8invalid((const char *)s, n);
    return i == n || u8check(s + i, n - i) == 0;
}

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
    if (d->raw) {
        sink_put(o, (const char *)&b, 1);
        return;
    }
    if (d->group_bad) {
        dec_run(t, d, o, t->dec_bf + 1, FFFD, 3);
        return;
    }
    if (d->n_group == TOK_DEC_GROUP) {
        /* A run this long: send its complete characters now, keeping an unfinished tail. This
         * departs from HF only if a later byte of the same run turns out invalid. */
        size_t n = d->n_group, done = u8invalid((const char *)d->group, n);
        char buf[TOK_DEC_GROUP];
        memcpy(buf, d->group, done);
        memmove(d->group, d->group + done, n - done);
        d->n_group = (uint8_t)(n - done);
        dec_run(t, d, o, t->dec_bf + 1, buf, done);
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
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* A ByteFallback token: "<0xXX>". */
static bool byte_token(const char *s, size_t n, uint8_t *b) {
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>' || hex_digit(s[3]) < 0 || hex_digit(s[4]) < 0) return false;
    *b = (uint8_t)(hex_digit(s[3]) << 4 | hex_digit(s[4]));
    return true;
}

/* s[0..n) with each occurrence of from[0..fn) (leftmost first, not overlapping) replaced by
 * to[0..tn), into sc; *out is NULL when out of memory. */
static size_t replace_lit(const char *s, size_t n, const char *from, size_t fn, const char *to, size_t tn, scratch *sc,
                          char **out) {
    size_t count = 0;
    for (const char *p = s; (p = memmem(p, n - (size_t)(p - s), from, fn)); p += fn) count++;
    char *w = *out = scratch_get(sc, n + count * tn);
    if (!w) return 0;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        if (n - i >= fn && !memcmp(s + i, from, fn)) {
            memcpy(w + k, to, tn);
            k += tn;
            i += fn;
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
        case DEC_REPLACE:
            n = replace_lit(s, n, S(t, st->from), st->from.len, S(t, st->to), st->to.len, &sc[cur], &w);
            break;
        case DEC_METASPACE: /* HF: replacement chars become spaces, and vanish in the first token */
            n = replace_lit(s, n, S(t, st->from), st->from.len, " ", !d->seen[k] && st->strip_first ? 0 : 1, &sc[cur],
                            &w);
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
    const added_tok *a = tok_added_by_id(t, id);
    /* Special means the added token's flag. HF 0.23 instead checks the token's normalized form
     * and so no longer skips special tokens marked normalized (as in onnxruntime-extensions'
     * Llama-2 file); we keep the earlier behaviour, which tokenizers.js shares. */
    if ((a && a->special && skip_special) || !tok_token_span(t, id, &s)) return;
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

size_t tokenizer_decode_next(const tokenizer *t, tok_decoder *d, int32_t id, bool skip_special, char *out, size_t cap) {
    sink o = {.p = out, .cap = cap};
    dec_feed(t, d, id, skip_special, &o);
    return o.n;
}

size_t tokenizer_decode_flush(const tokenizer *t, tok_decoder *d, char *out, size_t cap) {
    sink o = {.p = out, .cap = cap};
    dec_finish(t, d, &o);
    return o.n;
}

int tokenizer_token_bytes(const tokenizer *t, int32_t id, char *out, size_t cap) {
    const added_tok *a = tok_added_by_id(t, id);
    span s;
    if ((a && a->special) || !tok_token_span(t, id, &s)) return -1;
    tok_decoder d; /* mid-sequence: every first-token rule has been spent */
    tok_decoder_init(&d);
    memset(d.seen, 1, sizeof d.seen);
    d.strip_done = d.fed = d.raw = true;
    sink o = {.p = out, .cap = cap};
    dec_feed(t, &d, id, true, &o);
    return (int)o.n;
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

/* Bound on one decode call's output: a held byte-fallback run turned into U+FFFDs, plus the
 * longest token after Replace steps, tripled if byte-level bytes may each become U+FFFD. */
void tok_decode_init_cap(tokenizer *t) {
    size_t longest = 0, grow = 1;
    for (int32_t i = 0; i < t->n_ids; i++) {
        span s;
        if (tok_token_span(t, i, &s) && s.len > longest) longest = s.len;
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

/* Regular expressions (Python `re` syntax, as JSON Schema's `pattern` and vLLM's
 * structured_outputs.regex use it) into GBNF. Written here because no maintained C library
 * turns a regex into a grammar.
 *
 * The regex becomes one GBNF expression: literals, classes, groups, alternation and repetition
 * map one to one. Shorthands are ASCII (\d is [0-9], \w [A-Za-z0-9_], \s the six ASCII spaces),
 * a subset of Python's Unicode classes, so every sentence of the grammar still matches.
 * Backreferences, lookarounds, word boundaries, anchors inside the pattern and inline flags have
 * no grammar and are refused by name with their offset.
 *
 * Inside a JSON string (JSON Schema's `pattern`) two things change: the pattern searches rather
 * than matches in full (an end without its anchor takes any characters), and what it matches is
 * written JSON-escaped: a class that holds `"`, `\` or a control character spells it as its
 * escape. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/regex.h"
#include "util/err.h"

#define MAX_DEPTH 64

typedef struct rx {
    const char *src, *p;
    gbuf *out;
    bool json;
    int depth;
    loom_err *err;
} rx;

static int rx_fail(rx *r, const char *what) {
    return loom_errf(r->err, "regex: %s is not supported (at offset %td)", what, r->p - r->src);
}

static int rx_error(rx *r, const char *what) {
    return loom_errf(r->err, "regex: %s (at offset %td)", what, r->p - r->src);
}

typedef struct crange {
    uint32_t lo, hi;
} crange;

typedef struct cset {
    crange r[64];
    int n;
    bool overflow;
} cset;

static void cset_add(cset *c, uint32_t lo, uint32_t hi) {
    if (c->n == 64) c->overflow = true;
    else c->r[c->n++] = (crange){lo, hi};
}

static int by_lo(const void *a, const void *b) {
    uint32_t x = ((const crange *)a)->lo, y = ((const crange *)b)->lo;
    return (x > y) - (x < y);
}

/* Sorted, merged; the complement when negated. */
static void cset_normalize(cset *c, bool negate) {
    qsort(c->r, (size_t)c->n, sizeof *c->r, by_lo);
    int k = 0;
    for (int i = 0; i < c->n; i++) {
        if (k && c->r[i].lo <= c->r[k - 1].hi + 1) {
            if (c->r[i].hi > c->r[k - 1].hi) c->r[k - 1].hi = c->r[i].hi;
        } else {
            c->r[k++] = c->r[i];
        }
    }
    c->n = k;
    if (!negate) return;
    cset neg = {.n = 0};
    uint32_t next = 0;
    for (int i = 0; i < c->n; i++) {
        if (c->r[i].lo > next) cset_add(&neg, next, c->r[i].lo - 1);
        next = c->r[i].hi + 1;
    }
    if (next <= 0x10ffff) cset_add(&neg, next, 0x10ffff);
    *c = neg;
}

static bool cset_has(const cset *c, uint32_t cp) {
    for (int i = 0; i < c->n; i++)
        if (cp >= c->r[i].lo && cp <= c->r[i].hi) return true;
    return false;
}

static void put_cp(gbuf *b, uint32_t cp) {
    if (cp < 0x20 || cp == 0x7f || cp == '\\' || cp == ']' || cp == '[' || cp == '-' || cp == '^' || cp == '"')
        gbuf_printf(b, "\\x%02X", cp);
    else if (cp < 0x80) gbuf_printf(b, "%c", (char)cp);
    else if (cp < 0x10000) gbuf_printf(b, "\\u%04X", cp);
    else gbuf_printf(b, "\\U%08X", cp);
}

/* The class as GBNF: one bracket expression, and inside JSON the escapes of what JSON may not
 * hold raw. */
static void emit_class(rx *r, cset *c) {
    /* what may stand raw: everything, or inside JSON all but controls, '"' and '\' */
    static const crange json_raw[3] = {{0x20, 0x21}, {0x23, 0x5b}, {0x5d, 0x10ffff}}, all[1] = {{0, 0x10ffff}};
    const crange *keep = r->json ? json_raw : all;
    cset raw = {.n = 0};
    for (int i = 0; i < c->n; i++)
        for (int k = 0; k < (r->json ? 3 : 1); k++) {
            uint32_t lo = c->r[i].lo > keep[k].lo ? c->r[i].lo : keep[k].lo;
            uint32_t hi = c->r[i].hi < keep[k].hi ? c->r[i].hi : keep[k].hi;
            if (lo <= hi) cset_add(&raw, lo, hi);
        }
    int alts = 0;
    gbuf_puts(r->out, "(");
    if (raw.n) {
        gbuf_puts(r->out, "[");
        for (int i = 0; i < raw.n; i++) {
            put_cp(r->out, raw.r[i].lo);
            if (raw.r[i].hi > raw.r[i].lo) gbuf_puts(r->out, "-"), put_cp(r->out, raw.r[i].hi);
        }
        gbuf_puts(r->out, "]");
        alts++;
    }
    if (r->json) {
        static const char *named[32] = {
            ['\b'] = "\\\\b", ['\f'] = "\\\\f", ['\n'] = "\\\\n", ['\r'] = "\\\\r", ['\t'] = "\\\\t"};
        if (cset_has(c, '"')) gbuf_printf(r->out, "%s\"\\\\\\\"\"", alts++ ? " | " : "");
        if (cset_has(c, '\\')) gbuf_printf(r->out, "%s\"\\\\\\\\\"", alts++ ? " | " : "");
        for (uint32_t cp = 0; cp < 0x20; cp++) {
            if (!cset_has(c, cp)) continue;
            if (named[cp]) gbuf_printf(r->out, "%s\"%s\"", alts++ ? " | " : "", named[cp]);
            else gbuf_printf(r->out, "%s\"\\\\u00%02X\"", alts++ ? " | " : "", cp);
        }
    }
    if (!alts) gbuf_puts(r->out, "[^\\x00-\\U0010FFFF]"); /* the empty class: matches nothing */
    gbuf_puts(r->out, ")");
}

static int hexval(rx *r, int digits, uint32_t *cp) {
    *cp = 0;
    for (int i = 0; i < digits; i++) {
        char c = *r->p++;
        int v = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (v < 0) return rx_error(r, "a hex escape needs hex digits");
        *cp = *cp << 4 | (uint32_t)v;
    }
    return 0;
}

/* A shorthand class (\d \w \s and their negations) into c; false if the letter is none. */
static bool shorthand(char e, cset *c, bool *negated) {
    *negated = e == 'D' || e == 'W' || e == 'S';
    switch (e) {
    case 'd':
    case 'D': cset_add(c, '0', '9'); return true;
    case 'w':
    case 'W': cset_add(c, '0', '9'), cset_add(c, 'A', 'Z'), cset_add(c, 'a', 'z'), cset_add(c, '_', '_'); return true;
    case 's':
    case 'S': cset_add(c, '\t', '\r'), cset_add(c, ' ', ' '); return true;
    default: return false;
    }
}

/* After a backslash: one code point into *cp, or -1 with err for what has no grammar. */
static int escape(rx *r, uint32_t *cp) {
    char e = *r->p++;
    switch (e) {
    case 'n': *cp = '\n'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    case 'a': *cp = 7; return 0;
    case '0': *cp = 0; return 0;
    case 'x': return hexval(r, 2, cp);
    case 'u': return hexval(r, 4, cp);
    case 'U': return hexval(r, 8, cp);
    case 'b':
    case 'B': r->p -= 2; return rx_fail(r, "a word boundary '\\b'");
    case 'A':
    case 'Z':
    case 'z': r->p -= 2; return rx_fail(r, "an anchor escape");
    default:
        if (e >= '1' && e <= '9') {
            r->p -= 2;
            return rx_fail(r, "a backreference");
        }
        if (!e || (e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) {
            r->p -= 2;
            return rx_error(r, "unknown escape");
        }
        *cp = (uint32_t)(unsigned char)e;
        return 0;
    }
}

/* One UTF-8 code point of the pattern. */
static int next_cp(rx *r, uint32_t *cp) {
    const unsigned char *q = (const unsigned char *)r->p;
    int n = *q < 0x80 ? 1 : *q >> 5 == 6 ? 2 : *q >> 4 == 14 ? 3 : *q >> 3 == 30 ? 4 : 0;
    if (!n) return rx_error(r, "invalid UTF-8");
    *cp = n == 1 ? *q : (uint32_t)(*q & (0x7f >> n));
    for (int i = 1; i < n; i++) {
        if ((q[i] & 0xc0) != 0x80) return rx_error(r, "invalid UTF-8");
        *cp = *cp << 6 | (q[i] & 0x3f);
    }
    r->p += n;
    return 0;
}

static int parse_class(rx *r) {
    cset c = {.n = 0};
    r->p++;
    bool negate = *r->p == '^';
    if (negate) r->p++;
    for (bool first = true; first || *r->p != ']'; first = false) {
        if (!*r->p) return rx_error(r, "unterminated class");
        uint32_t lo, hi;
        if (*r->p == '\\') {
            bool neg;
            if (shorthand(r->p[1], &c, &neg)) {
                if (neg) return rx_fail(r, "a negated shorthand (\\D, \\W, \\S) inside a class");
                r->p += 2;
                continue;
            }
            r->p++;
            if (escape(r, &lo)) return -1;
        } else if (next_cp(r, &lo)) {
            return -1;
        }
        hi = lo;
        if (*r->p == '-' && r->p[1] != ']' && r->p[1]) {
            r->p++;
            if (*r->p == '\\') {
                r->p++;
                if (escape(r, &hi)) return -1;
            } else if (next_cp(r, &hi)) {
                return -1;
            }
            if (hi < lo) return rx_error(r, "a class range runs backwards");
        }
        cset_add(&c, lo, hi);
    }
    r->p++;
    if (c.overflow) return rx_fail(r, "a class of more than 64 ranges");
    cset_normalize(&c, negate);
    emit_class(r, &c);
    return 0;
}

static void emit_cp(rx *r, uint32_t cp) {
    cset c = {.n = 0};
    cset_add(&c, cp, cp);
    if (!r->json || (cp >= 0x20 && cp != '"' && cp != '\\')) {
        char b[8];
        int n = cp < 0x80 ? (b[0] = (char)cp, 1) : 0;
        if (n) gbuf_literal(r->out, b, 1);
        else emit_class(r, &c);
    } else {
        emit_class(r, &c);
    }
}

static int parse_alt(rx *r);

static int parse_atom(rx *r) {
    char c = *r->p;
    if (c == '(') {
        r->p++;
        if (*r->p == '?') {
            if (r->p[1] == ':') r->p += 2;
            else if (r->p[1] == 'P' && r->p[2] == '<') {
                while (*r->p && *r->p != '>') r->p++;
                if (!*r->p) return rx_error(r, "unterminated group name");
                r->p++;
            } else {
                r->p--;
                return rx_fail(r, r->p[2] == '=' || r->p[2] == '!' ? "a lookahead '(?='"
                                  : r->p[2] == '<'                 ? "a lookbehind '(?<'"
                                                                   : "an inline flag or extension '(?'");
            }
        }
        if (++r->depth > MAX_DEPTH) return rx_fail(r, "nesting deeper than 64 groups");
        gbuf_puts(r->out, "(");
        if (parse_alt(r)) return -1;
        r->depth--;
        if (*r->p != ')') return rx_error(r, "expected ')'");
        r->p++;
        gbuf_puts(r->out, ")");
        return 0;
    }
    if (c == '[') return parse_class(r);
    if (c == '.') {
        r->p++;
        cset any = {.n = 0};
        cset_add(&any, '\n', '\n');
        cset_normalize(&any, true);
        emit_class(r, &any);
        return 0;
    }
    if (c == '^' || c == '$') return rx_fail(r, "an anchor inside the pattern");
    if (c == '*' || c == '+' || c == '?' || c == '{') return rx_error(r, "nothing to repeat");
    uint32_t cp;
    if (c == '\\') {
        cset sh = {.n = 0};
        bool neg;
        if (shorthand(r->p[1], &sh, &neg)) {
            r->p += 2;
            cset_normalize(&sh, neg);
            emit_class(r, &sh);
            return 0;
        }
        r->p++;
        if (escape(r, &cp)) return -1;
    } else if (next_cp(r, &cp)) {
        return -1;
    }
    emit_cp(r, cp);
    return 0;
}

static int parse_quant(rx *r) {
    char c = *r->p;
    if (c == '*' || c == '+' || c == '?') {
        r->p++;
        gbuf_printf(r->out, "%c", c);
    } else if (c == '{' && ((r->p[1] >= '0' && r->p[1] <= '9') || r->p[1] == ',')) {
        const char *s = r->p;
        while (*r->p && *r->p != '}') r->p++;
        if (!*r->p) return rx_error(r, "unterminated '{'");
        r->p++;
        gbuf_put(r->out, s, (size_t)(r->p - s));
    } else {
        return 0;
    }
    if (*r->p == '?' || *r->p == '+') r->p++; /* lazy and possessive: the same language */
    if (*r->p == '*' || *r->p == '+' || *r->p == '?' || *r->p == '{') return rx_error(r, "multiple repeat");
    return 0;
}

static int parse_seq(rx *r) {
    gbuf_puts(r->out, "(\"\"");
    while (*r->p && *r->p != '|' && *r->p != ')') {
        if (*r->p == '$' && (!r->p[1] || r->p[1] == '|' || r->p[1] == ')')) break;
        gbuf_puts(r->out, " ");
        if (parse_atom(r) || parse_quant(r)) return -1;
    }
    gbuf_puts(r->out, ")");
    return 0;
}

static int parse_alt(rx *r) {
    for (;;) {
        if (parse_seq(r)) return -1;
        if (*r->p != '|') return 0;
        r->p++;
        gbuf_puts(r->out, " | ");
    }
}

int regex_expr(const char *pattern, bool json, gbuf *out, loom_err *err) {
    rx r = {.src = pattern, .p = pattern, .out = out, .json = json, .err = err};
    bool start = *r.p == '^';
    if (start) r.p++;
    const char *any = json ? "([^\"\\\\\\x00-\\x1F] | \"\\\\\" [\"\\\\/bfnrt])*" : "";
    if (json && !start) gbuf_printf(out, "%s ", any);
    gbuf_puts(out, "(");
    if (parse_alt(&r)) return -1;
    gbuf_puts(out, ")");
    bool end = *r.p == '$';
    if (end) r.p++;
    if (*r.p == ')') return rx_error(&r, "unbalanced ')'");
    if (*r.p) return rx_fail(&r, "an anchor inside the pattern");
    if (json && !end) gbuf_printf(out, " %s", any);
    return 0;
}

int regex_rules(const char *pattern, const char *name, gbuf *out, loom_err *err) {
    gbuf_printf(out, "%s ::= ", name);
    if (regex_expr(pattern, false, out, err)) return -1;
    gbuf_puts(out, "\n");
    return 0;
}

char *regex_to_gbnf(const char *pattern, loom_err *err) {
    gbuf b = {0};
    if (regex_rules(pattern, "root", &b, err) || b.oom) {
        if (b.oom) loom_errf(err, "regex: out of memory");
        gbuf_free(&b);
        return NULL;
    }
    return b.p;
}

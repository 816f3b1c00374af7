/* The GBNF compiler (the notation is in grammar.h): text into rules over bytes.
 *
 * Every construct lowers to alternatives of byte sets and rule references. A literal is one
 * byte set per UTF-8 byte. A character class becomes the alternatives of UTF-8 byte ranges
 * that spell its code points (the standard split of a code point range into byte-range
 * sequences); an ASCII-only class is a single byte set. Groups, `*`, `+`, `?` and `{n,m}` become
 * helper rules: x* is S ::= x S | (empty), right-recursive, which the matcher runs in constant
 * stack depth (a reference in last place does not push a frame). Left recursion would make the
 * automaton's stack grow without consuming a byte, so it is refused at compile time, as are
 * undefined rules and a missing root. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_impl.h"
#include "util/alloc.h"
#include "util/err.h"

/* elements in all, 40 bytes each: a bound on what a request can make the server hold (20 MiB) */
#define GRAMMAR_MAX_ELEMS  (1 << 19)
#define GRAMMAR_MAX_REPEAT 10000 /* x{n,m}: n and m at most */

typedef struct seq {
    gelem *el;
    size_t n, cap;
} seq;

typedef struct brule {
    char *name;
    seq *alts;
    size_t n_alts, cap_alts;
    bool defined;
} brule;

typedef struct parser {
    const char *src, *p;
    brule *rules;
    size_t n_rules, cap_rules, total;
    int n_helpers;
    loom_err *err;
    bool failed;
} parser;

static int fail(parser *ps, const char *fmt, const char *what) {
    if (ps->failed) return -1;
    ps->failed = true;
    int line = 1;
    for (const char *q = ps->src; q < ps->p; q++) line += *q == '\n';
    char msg[256];
    snprintf(msg, sizeof msg, fmt, what);
    return loom_errf(ps->err, "grammar: line %d (byte %td): %s", line, ps->p - ps->src, msg);
}

static int oom(parser *ps) { return fail(ps, "%s", "out of memory"); }

static int seq_push(parser *ps, seq *s, gelem e) {
    if (++ps->total > GRAMMAR_MAX_ELEMS) {
        char limit[32];
        snprintf(limit, sizeof limit, "%d", GRAMMAR_MAX_ELEMS);
        return fail(ps, "the grammar is too large (over %s elements, as repetitions expand)", limit);
    }
    if (ARRAY_RESERVE(s->el, s->cap, s->n + 1, "grammar elements", NULL)) return oom(ps);
    s->el[s->n++] = e;
    return 0;
}

static int seq_append(parser *ps, seq *s, const seq *t) {
    for (size_t i = 0; i < t->n; i++)
        if (seq_push(ps, s, t->el[i])) return -1;
    return 0;
}

static gelem ref(int r) { return (gelem){.kind = GE_REF, .ref = r}; }

static gelem byte_set(uint8_t lo, uint8_t hi) {
    gelem e = {.kind = GE_TERM};
    for (int b = lo; b <= hi; b++) e.bits[b >> 6] |= 1ull << (b & 63);
    return e;
}

/* The rule called name[0..n), made (undefined) on first mention; -1 when out of memory. */
static int new_rule(parser *ps, const char *name, size_t n) {
    if (ARRAY_RESERVE(ps->rules, ps->cap_rules, ps->n_rules + 1, "grammar rules", NULL)) return oom(ps);
    brule *r = &ps->rules[ps->n_rules];
    *r = (brule){.name = mem_strndup(name, n, "a rule name", NULL)};
    if (!r->name) return oom(ps);
    return (int)ps->n_rules++;
}

/* A named rule's id, the rule made when the name is new. Helper rules (most of a converted
 * schema's, thousands for a long string's repetition) are never looked up, so the scan is
 * over the rules a grammar names. */
static int rule_id(parser *ps, const char *name, size_t n) {
    for (size_t i = 0; i < ps->n_rules; i++)
        if (ps->rules[i].name[0] != ' ' && strlen(ps->rules[i].name) == n && !memcmp(ps->rules[i].name, name, n))
            return (int)i;
    return new_rule(ps, name, n);
}

/* A helper rule for a group, class or repetition, named after nothing a grammar can write
 * (a leading space). */
static int helper_rule(parser *ps) {
    char name[32];
    int n = snprintf(name, sizeof name, " helper %d", ps->n_helpers++);
    int r = new_rule(ps, name, (size_t)n);
    if (r >= 0) ps->rules[r].defined = true;
    return r;
}

/* Adds alternative s to rule r (taking s's elements). */
static int add_alt(parser *ps, int r, seq *s) {
    brule *b = &ps->rules[r];
    if (ARRAY_RESERVE(b->alts, b->cap_alts, b->n_alts + 1, "grammar alternatives", NULL)) {
        free(s->el);
        return oom(ps);
    }
    b->alts[b->n_alts++] = *s;
    *s = (seq){0};
    return 0;
}

static void skip_space(parser *ps) {
    for (;;) {
        while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r') ps->p++;
        if (*ps->p != '#') return;
        while (*ps->p && *ps->p != '\n') ps->p++;
    }
}

static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

/* At a `name ::=` (the next rule's start)? */
static bool at_rule_start(const parser *ps) {
    const char *q = ps->p;
    if (!name_char(*q)) return false;
    while (name_char(*q)) q++;
    while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r') q++;
    return !strncmp(q, "::=", 3);
}

static int hex_value(parser *ps, int digits, uint32_t *cp) {
    *cp = 0;
    for (int i = 0; i < digits; i++, ps->p++) {
        char c = *ps->p;
        int v = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (v < 0) return fail(ps, "%s", "a hex escape needs hex digits");
        *cp = *cp << 4 | (uint32_t)v;
    }
    return 0;
}

/* The next code point of a literal or class (escapes decoded); ps->p moves past it. */
static int next_char(parser *ps, uint32_t *cp) {
    const unsigned char *q = (const unsigned char *)ps->p;
    if (!*q) return fail(ps, "%s", "unterminated literal or class");
    if (*q != '\\') {
        int n = *q < 0x80 ? 1 : *q >> 5 == 6 ? 2 : *q >> 4 == 14 ? 3 : *q >> 3 == 30 ? 4 : 0;
        if (!n) return fail(ps, "%s", "invalid UTF-8");
        *cp = n == 1 ? *q : (uint32_t)(*q & (0x7f >> n));
        for (int i = 1; i < n; i++) {
            if ((q[i] & 0xc0) != 0x80) return fail(ps, "%s", "invalid UTF-8");
            *cp = *cp << 6 | (q[i] & 0x3f);
        }
        ps->p += n;
        return 0;
    }
    char c = ps->p[1];
    ps->p += 2;
    switch (c) {
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'x': return hex_value(ps, 2, cp);
    case 'u': return hex_value(ps, 4, cp);
    case 'U': return hex_value(ps, 8, cp);
    default:
        if (c && c < 0x7f && !name_char(c)) {
            *cp = (uint32_t)c; /* \\ \" \' \[ \] \- \/ ...: the character itself */
            return 0;
        }
        ps->p--;
        return fail(ps, "%s", "unknown escape");
    }
}

static int utf8_encode(uint32_t cp, uint8_t *out) {
    if (cp < 0x80) return out[0] = (uint8_t)cp, 1;
    if (cp < 0x800) return out[0] = (uint8_t)(0xc0 | cp >> 6), out[1] = (uint8_t)(0x80 | (cp & 0x3f)), 2;
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xe0 | cp >> 12), out[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
        out[2] = (uint8_t)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (uint8_t)(0xf0 | cp >> 18), out[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3f));
    out[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3f)), out[3] = (uint8_t)(0x80 | (cp & 0x3f));
    return 4;
}

static int parse_literal(parser *ps, seq *item) {
    ps->p++;
    while (*ps->p != '"') {
        uint32_t cp;
        if (next_char(ps, &cp)) return -1;
        if (cp > 0x10ffff) return fail(ps, "%s", "a code point past U+10FFFF");
        uint8_t b[4];
        int n = utf8_encode(cp, b);
        for (int i = 0; i < n; i++)
            if (seq_push(ps, item, byte_set(b[i], b[i]))) return -1;
    }
    ps->p++;
    return 0;
}

/* Code point ranges to UTF-8: each range splits until it is a product of byte ranges, one
 * alternative of the class's rule; ASCII goes into one byte set. */
typedef struct class_out {
    parser *ps;
    int rule;
    gelem ascii;
} class_out;

static int utf8_range(class_out *o, uint32_t lo, uint32_t hi) {
    if (lo > hi) return 0;
    if (lo <= 0xdfff && hi >= 0xd800) /* surrogates are not characters */
        return utf8_range(o, lo, lo < 0xd800 ? 0xd7ff : 0) || (hi > 0xdfff && utf8_range(o, 0xe000, hi));
    static const uint32_t last[3] = {0x7f, 0x7ff, 0xffff};
    for (int i = 0; i < 3; i++)
        if (lo <= last[i] && hi > last[i]) return utf8_range(o, lo, last[i]) || utf8_range(o, last[i] + 1, hi);
    if (hi < 0x80) {
        for (uint32_t c = lo; c <= hi; c++) o->ascii.bits[c >> 6] |= 1ull << (c & 63);
        return 0;
    }
    uint8_t a[4], b[4];
    int n = utf8_encode(lo, a);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) == (hi & ~m)) continue;
        if (lo & m) return utf8_range(o, lo, lo | m) || utf8_range(o, (lo | m) + 1, hi);
        if ((hi & m) != m) return utf8_range(o, lo, (hi & ~m) - 1) || utf8_range(o, hi & ~m, hi);
    }
    utf8_encode(hi, b);
    seq alt = {0};
    for (int i = 0; i < n; i++)
        if (seq_push(o->ps, &alt, byte_set(a[i], b[i]))) return free(alt.el), -1;
    return add_alt(o->ps, o->rule, &alt);
}

typedef struct cp_range {
    uint32_t lo, hi;
} cp_range;

static int by_lo(const void *a, const void *b) {
    uint32_t x = ((const cp_range *)a)->lo, y = ((const cp_range *)b)->lo;
    return (x > y) - (x < y);
}

/* A class's ranges (negated: their complement) as an item: one byte set, or a helper rule. */
static int class_item(parser *ps, cp_range *r, size_t n, bool negated, seq *item) {
    if (n) qsort(r, n, sizeof *r, by_lo); /* an empty class has no array (qsort takes none) */
    class_out o = {.ps = ps, .ascii = {.kind = GE_TERM}};
    bool ascii_only = !negated;
    for (size_t i = 0; i < n; i++) ascii_only &= r[i].hi < 0x80;
    if (!ascii_only && (o.rule = helper_rule(ps)) < 0) return -1;
    uint32_t next = 0; /* negated: the first code point not yet covered */
    for (size_t i = 0; i < n; i++) {
        if (negated) {
            if (r[i].lo > next && utf8_range(&o, next, r[i].lo - 1)) return -1;
            if (r[i].hi + 1 > next) next = r[i].hi + 1;
        } else if (utf8_range(&o, r[i].lo, r[i].hi)) {
            return -1;
        }
    }
    if (negated && next <= 0x10ffff && utf8_range(&o, next, 0x10ffff)) return -1;
    if (ascii_only) return seq_push(ps, item, o.ascii);
    if (o.ascii.bits[0] | o.ascii.bits[1]) {
        seq alt = {0};
        if (seq_push(ps, &alt, o.ascii) || add_alt(ps, o.rule, &alt)) return free(alt.el), -1;
    }
    return seq_push(ps, item, ref(o.rule));
}

static int parse_class(parser *ps, seq *item) {
    ps->p++;
    bool negated = *ps->p == '^';
    if (negated) ps->p++;
    cp_range *r = NULL;
    size_t n = 0, cap = 0;
    while (*ps->p != ']') {
        uint32_t lo, hi;
        if (next_char(ps, &lo)) goto fail;
        hi = lo;
        if (*ps->p == '-' && ps->p[1] != ']') {
            ps->p++;
            if (next_char(ps, &hi)) goto fail;
        }
        if (hi < lo || hi > 0x10ffff) {
            fail(ps, "%s", "a class range runs backwards or past U+10FFFF");
            goto fail;
        }
        if (ARRAY_RESERVE(r, cap, n + 1, "a character class", NULL)) {
            oom(ps);
            goto fail;
        }
        r[n++] = (cp_range){lo, hi};
    }
    ps->p++;
    int rc = class_item(ps, r, n, negated, item);
    free(r);
    return rc;
fail:
    free(r);
    return -1;
}

static int parse_alternatives(parser *ps, int rule, bool in_group);

/* item as one element: a helper rule when it has several. */
static int single(parser *ps, seq *item) {
    if (item->n == 1) return 0;
    int h = helper_rule(ps);
    if (h < 0 || add_alt(ps, h, item)) return -1;
    return seq_push(ps, item, ref(h));
}

/* x{min,max} (max -1: unbounded) in place of item x. */
static int repeat(parser *ps, seq *item, long min, long max) {
    if (single(ps, item)) return -1;
    gelem x = item->el[0];
    item->n = 0;
    for (long i = 0; i < min; i++)
        if (seq_push(ps, item, x)) return -1;
    if (max < 0) { /* S ::= x S | (empty) */
        int s = helper_rule(ps);
        seq a = {0}, empty = {0};
        if (s < 0 || seq_push(ps, &a, x) || seq_push(ps, &a, ref(s)) || add_alt(ps, s, &a) || add_alt(ps, s, &empty))
            return free(a.el), -1;
        return seq_push(ps, item, ref(s));
    }
    int opt = -1; /* O_k ::= x O_(k-1) | (empty), O_1 ::= x | (empty) */
    for (long k = min; k < max; k++) {
        int o = helper_rule(ps);
        seq a = {0}, empty = {0};
        if (o < 0 || seq_push(ps, &a, x) || (opt >= 0 && seq_push(ps, &a, ref(opt))) || add_alt(ps, o, &a) ||
            add_alt(ps, o, &empty))
            return free(a.el), -1;
        opt = o;
    }
    return opt >= 0 ? seq_push(ps, item, ref(opt)) : 0;
}

static long parse_count(parser *ps) {
    long v = 0;
    if (*ps->p < '0' || *ps->p > '9') return -1;
    while (*ps->p >= '0' && *ps->p <= '9' && v <= GRAMMAR_MAX_REPEAT) v = v * 10 + (*ps->p++ - '0');
    return v;
}

static int parse_postfix(parser *ps, seq *item) {
    for (;;) {
        char c = *ps->p;
        if (c == '*' || c == '+' || c == '?') {
            ps->p++;
            if (repeat(ps, item, c == '+', c == '?' ? 1 : -1)) return -1;
        } else if (c == '{') {
            ps->p++;
            skip_space(ps);
            long min = *ps->p == ',' ? 0 : parse_count(ps), max = min;
            skip_space(ps);
            if (*ps->p == ',') {
                ps->p++;
                skip_space(ps);
                max = *ps->p == '}' ? -1 : parse_count(ps);
                skip_space(ps);
            }
            if (min < 0 || *ps->p != '}' || (max >= 0 && max < min) || (max == -1 && min < 0))
                return fail(ps, "%s", "a repetition must read {n}, {n,}, {n,m} or {,m}");
            if (min > GRAMMAR_MAX_REPEAT || max > GRAMMAR_MAX_REPEAT)
                return fail(ps, "a repetition count over %s", "10000");
            ps->p++;
            if (repeat(ps, item, min, max)) return -1;
        } else {
            return 0;
        }
    }
}

static int parse_item(parser *ps, seq *item) {
    char c = *ps->p;
    if (c == '"') return parse_literal(ps, item);
    if (c == '[') return parse_class(ps, item);
    if (c == '.') {
        ps->p++;
        cp_range none[1];
        return class_item(ps, none, 0, true, item);
    }
    if (c == '(') {
        ps->p++;
        int h = helper_rule(ps);
        if (h < 0 || parse_alternatives(ps, h, true)) return -1;
        if (*ps->p != ')') return fail(ps, "%s", "expected ')'");
        ps->p++;
        return seq_push(ps, item, ref(h));
    }
    if (name_char(c)) {
        const char *s = ps->p;
        while (name_char(*ps->p)) ps->p++;
        int r = rule_id(ps, s, (size_t)(ps->p - s));
        return r < 0 ? -1 : seq_push(ps, item, ref(r));
    }
    char what[8] = {c, 0};
    return fail(ps, "unexpected '%s'", what);
}

static int parse_sequence(parser *ps, seq *s, bool in_group) {
    for (;;) {
        skip_space(ps);
        char c = *ps->p;
        if (!c || c == '|' || c == ')' || (!in_group && at_rule_start(ps))) return 0;
        seq item = {0};
        if (parse_item(ps, &item) || parse_postfix(ps, &item) || seq_append(ps, s, &item)) {
            free(item.el);
            return -1;
        }
        free(item.el);
    }
}

static int parse_alternatives(parser *ps, int rule, bool in_group) {
    for (;;) {
        seq s = {0};
        if (parse_sequence(ps, &s, in_group) || add_alt(ps, rule, &s)) return free(s.el), -1;
        if (*ps->p != '|') return 0;
        ps->p++;
    }
}

static int parse_rules(parser *ps) {
    for (;;) {
        skip_space(ps);
        if (!*ps->p) return 0;
        const char *s = ps->p;
        while (name_char(*ps->p)) ps->p++;
        if (ps->p == s) return fail(ps, "%s", "expected a rule name");
        int r = rule_id(ps, s, (size_t)(ps->p - s));
        if (r < 0) return -1;
        skip_space(ps);
        if (strncmp(ps->p, "::=", 3)) return fail(ps, "expected '::=' after rule '%s'", ps->rules[r].name);
        if (ps->rules[r].defined) return fail(ps, "rule '%s' is defined twice", ps->rules[r].name);
        ps->rules[r].defined = true;
        ps->p += 3;
        if (parse_alternatives(ps, r, false)) return -1;
        if (*ps->p == ')') return fail(ps, "%s", "unbalanced ')'");
    }
}

/* Left recursion that grows the stack is refused. Rule r reaches rule t at its left edge when an
 * alternative of r refers to t after only nullable references. A reference in last place pushes
 * no frame, so a cycle of those alone (x* over a nullable x) ends in a node already closed; a
 * cycle through any other reference pushes a frame per turn without reading a byte. So: the
 * strongly connected components of the left-edge graph (Kosaraju, iterative), and an error for
 * a non-tail edge inside one. */
typedef struct left_graph {
    int n;
    int32_t *first, *to, *rfirst, *rto; /* CSR of the edges and of their transpose */
    bool *tail;
} left_graph;

static void left_edges(const grammar *g, const bool *nullable, left_graph *lg, bool fill) {
    int32_t k = 0;
    for (int r = 0; r < g->n_rules; r++) {
        if (fill) lg->first[r] = k;
        for (int a = 0; a < g->rule_nalt[r]; a++)
            for (const gelem *e = &g->el[g->alt_start[g->rule_alt0[r] + a]]; e->kind == GE_REF; e++) {
                if (fill) lg->to[k] = e->ref, lg->tail[k] = e[1].kind == GE_END;
                k++;
                if (!nullable[e->ref]) break;
            }
    }
    lg->first[g->n_rules] = k; /* unfilled: the count, for sizing */
}

static int check_left_recursion(grammar *g, loom_err *err) {
    int n = g->n_rules, rc = -1;
    const char *what = "a grammar's left-recursion check";
    bool *nullable = mem_zalloc((size_t)n, 1, what, NULL);
    left_graph lg = {.n = n, .first = mem_array((size_t)n + 1, sizeof(int32_t), what, NULL)};
    int32_t *order = mem_array((size_t)n, sizeof(int32_t), what, NULL),
            *comp = mem_array((size_t)n, sizeof(int32_t), what, NULL),
            *stack = mem_array((size_t)n, 2 * sizeof(int32_t), what, NULL), *rcount = NULL;
    if (!nullable || !lg.first || !order || !comp || !stack) goto oom;
    for (bool changed = true; changed;) {
        changed = false;
        for (int r = 0; r < n; r++) {
            for (int a = 0; a < g->rule_nalt[r] && !nullable[r]; a++) {
                const gelem *e = &g->el[g->alt_start[g->rule_alt0[r] + a]];
                while (e->kind == GE_REF && nullable[e->ref]) e++;
                if (e->kind == GE_END) nullable[r] = changed = true;
            }
        }
    }
    left_edges(g, nullable, &lg, false);
    size_t m = (size_t)lg.first[n];
    lg.to = mem_array(m + 1, sizeof(int32_t), what, NULL), lg.tail = mem_array(m + 1, sizeof(bool), what, NULL);
    lg.rfirst = mem_zalloc((size_t)n + 1, sizeof(int32_t), what, NULL);
    lg.rto = mem_array(m + 1, sizeof(int32_t), what, NULL);
    rcount = mem_zalloc((size_t)n + 1, sizeof(int32_t), what, NULL);
    if (!lg.to || !lg.tail || !lg.rfirst || !lg.rto || !rcount) goto oom;
    left_edges(g, nullable, &lg, true);
    for (size_t k = 0; k < m; k++) lg.rfirst[lg.to[k] + 1]++;
    for (int r = 0; r < n; r++) lg.rfirst[r + 1] += lg.rfirst[r];
    for (int r = 0; r < n; r++)
        for (int32_t k = lg.first[r]; k < lg.first[r + 1]; k++) lg.rto[lg.rfirst[lg.to[k]] + rcount[lg.to[k]]++] = r;
    /* pass 1: finish order on the graph */
    int n_order = 0;
    for (int r = 0; r < n; r++) comp[r] = -1;
    for (int s = 0; s < n; s++) {
        if (comp[s] != -1) continue;
        int sp = 0;
        stack[sp++] = s, stack[sp++] = lg.first[s];
        comp[s] = -2;
        while (sp) {
            int32_t u = stack[sp - 2], k = stack[sp - 1];
            if (k < lg.first[u + 1]) {
                stack[sp - 1] = k + 1;
                int32_t v = lg.to[k];
                if (comp[v] == -1) comp[v] = -2, stack[sp++] = v, stack[sp++] = lg.first[v];
            } else {
                order[n_order++] = u;
                sp -= 2;
            }
        }
    }
    /* pass 2: components on the transpose, in reverse finish order */
    for (int r = 0; r < n; r++) comp[r] = -1;
    for (int i = n - 1; i >= 0; i--) {
        int32_t s = order[i];
        if (comp[s] != -1) continue;
        int sp = 0;
        stack[sp++] = s;
        comp[s] = s;
        while (sp) {
            int32_t u = stack[--sp];
            for (int32_t k = lg.rfirst[u]; k < lg.rfirst[u + 1]; k++)
                if (comp[lg.rto[k]] == -1) comp[lg.rto[k]] = s, stack[sp++] = lg.rto[k];
        }
    }
    rc = 0;
    for (int r = 0; r < n && !rc; r++)
        for (int32_t k = lg.first[r]; k < lg.first[r + 1] && !rc; k++)
            if (!lg.tail[k] && comp[lg.to[k]] == comp[r])
                rc = loom_errf(err, "grammar: rule '%s' is left-recursive (it can reach itself before any byte)",
                               g->rule_name[r][0] == ' ' ? g->rule_name[lg.to[k]] : g->rule_name[r]);
    goto done;
oom:
    rc = loom_errf(err, "grammar: out of memory");
done:
    free(nullable), free(order), free(comp), free(stack), free(rcount);
    free(lg.first), free(lg.to), free(lg.tail), free(lg.rfirst), free(lg.rto);
    return rc;
}

/* The parsed rules into g's flat arrays. */
static int flatten(parser *ps, grammar *g, loom_err *err) {
    size_t n_alts = 0, n_el = 0;
    for (size_t r = 0; r < ps->n_rules; r++) {
        if (!ps->rules[r].defined)
            return loom_errf(err, "grammar: rule '%s' is used but not defined", ps->rules[r].name);
        n_alts += ps->rules[r].n_alts;
        for (size_t a = 0; a < ps->rules[r].n_alts; a++) n_el += ps->rules[r].alts[a].n + 1;
    }
    g->n_rules = (int)ps->n_rules;
    g->n_el = (int)n_el;
    if (!(g->el = mem_array(n_el, sizeof *g->el, "a grammar", err)) ||
        !(g->alt_start = mem_array(n_alts + 1, sizeof *g->alt_start, "a grammar", err)) ||
        !(g->rule_alt0 = mem_array(ps->n_rules, sizeof *g->rule_alt0, "a grammar", err)) ||
        !(g->rule_nalt = mem_array(ps->n_rules, sizeof *g->rule_nalt, "a grammar", err)) ||
        !(g->rule_name = mem_zalloc(ps->n_rules, sizeof *g->rule_name, "a grammar", err)))
        return -1;
    size_t alt = 0, pos = 0;
    for (size_t r = 0; r < ps->n_rules; r++) {
        brule *b = &ps->rules[r];
        g->rule_alt0[r] = (int32_t)alt;
        g->rule_nalt[r] = (int32_t)b->n_alts;
        g->rule_name[r] = b->name;
        b->name = NULL;
        for (size_t a = 0; a < b->n_alts; a++) {
            g->alt_start[alt++] = (int32_t)pos;
            if (b->alts[a].n) memcpy(g->el + pos, b->alts[a].el, b->alts[a].n * sizeof *g->el);
            pos += b->alts[a].n;
            g->el[pos++] = (gelem){.kind = GE_END};
        }
    }
    g->root = -1;
    for (int r = 0; r < g->n_rules; r++)
        if (!strcmp(g->rule_name[r], "root")) g->root = r;
    if (g->root < 0) return loom_errf(err, "grammar: no rule named 'root'");
    return check_left_recursion(g, err);
}

static void parser_free(parser *ps) {
    for (size_t r = 0; r < ps->n_rules; r++) {
        for (size_t a = 0; a < ps->rules[r].n_alts; a++) free(ps->rules[r].alts[a].el);
        free(ps->rules[r].alts);
        free(ps->rules[r].name);
    }
    free(ps->rules);
}

grammar *grammar_compile(const char *gbnf, const grammar_vocab *v, loom_err *err) {
    parser ps = {.src = gbnf, .p = gbnf, .err = err};
    grammar *g = mem_zalloc(1, sizeof *g, "a grammar", err);
    if (!g) return NULL;
    g->refs = 1;
    g->vocab = v;
    pthread_mutex_init(&g->lock, NULL);
    if (parse_rules(&ps) || flatten(&ps, g, err) || !(g->local = cspace_new(g, err))) {
        parser_free(&ps);
        grammar_unref(g);
        return NULL;
    }
    parser_free(&ps);
    return g;
}

size_t grammar_bytes(grammar *g) {
    pthread_mutex_lock(&g->lock);
    size_t bytes = sizeof *g + (size_t)g->n_el * sizeof *g->el + g->pm_slots * sizeof *g->pm + g->mask_bytes +
                   cspace_bytes(g->local);
    for (int r = 0; r < g->n_rules; r++)
        bytes += 2 * sizeof *g->rule_alt0 + sizeof *g->rule_name + strlen(g->rule_name[r]) + 1 +
                 (size_t)g->rule_nalt[r] * sizeof *g->alt_start;
    pthread_mutex_unlock(&g->lock);
    return bytes;
}

grammar *grammar_ref(grammar *g) {
    __atomic_add_fetch(&g->refs, 1, __ATOMIC_RELAXED);
    return g;
}

void grammar_unref(grammar *g) {
    if (!g || __atomic_sub_fetch(&g->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
    grammar_masks_free(g);
    cspace_free(g->local);
    for (int r = 0; g->rule_name && r < g->n_rules; r++) free(g->rule_name[r]);
    free(g->rule_name);
    free(g->el);
    free(g->alt_start);
    free(g->rule_alt0);
    free(g->rule_nalt);
    pthread_mutex_destroy(&g->lock);
    free(g);
}

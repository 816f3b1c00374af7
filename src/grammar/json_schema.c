/* JSON Schema into GBNF: the rules for the JSON values a schema accepts, as JSON Schema is used
 * in practice (OpenAI's structured outputs, function parameters, JSONSchemaBench's corpora).
 * Written here because no maintained C library converts schemas to grammars.
 *
 * Every sentence of the grammar must validate; the grammar may leave some valid values out, and
 * does where generating them would invite a model to ramble:
 *  - an object writes its properties in the declared order, the optional ones optional, and no
 *    other keys unless additionalProperties says so (absent means none, as xgrammar's strict
 *    mode and llama.cpp do), then keys of patternProperties (their names by the pattern); an
 *    object with no properties takes any keys;
 *  - whitespace between tokens is bounded (a space, or a newline and up to 20 spaces or tabs);
 *  - numbers have at most 16 digits before and after the point and 2 in the exponent (1e999
 *    would overflow a validator's double);
 *  - strings never hold \u escapes of surrogates (a pair would count as two characters here and
 *    one to a validator);
 *  - oneOf is anyOf where the branches rule each other out: by type, by enum/const values, or
 *    by required properties (a branch leaves out, as declared and as extra keys, the ones the
 *    others require and it does not); a oneOf whose branches could both match is refused;
 *  - keys past an object's declared properties are none of them, and unescaped;
 *  - enum values of the wrong type are left out;
 *  - OpenAPI's `nullable` is an annotation, as JSON Schema validators take it (null only where
 *    the type allows it).
 * What would change validity and has no grammar here is refused, naming the keyword and the
 * JSON pointer of its schema: propertyNames, min/maxProperties (unless the required properties
 * already satisfy them), contains, not, if/then/else, dependencies,
 * unevaluated*, multipleOf, uniqueItems, non-integer bounds on numbers, and the formats JSON
 * Schema defines that have no grammar here (a format it does not define is an annotation, which
 * validators ignore). A $ref with keywords beside it is merged with them, as allOf is. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/regex.h"
#include "util/alloc.h"
#include "util/err.h"
#include "util/utf8.h"

#define MAX_DEPTH  64    /* nested subschemas (references do not count: they are rules) */
#define MAX_REFS   512   /* distinct $ref targets */
#define MAX_REPEAT 10000 /* GBNF's bound on a repetition count: longer maxima are cut to it */
#define MAX_LENS   256   /* distinct string length bounds given a shared rule each */
#define MAX_KEY    256   /* bytes of a property name kept out of extra keys */
#define INT_DIGITS 16    /* an unbounded integer's digits at most */

typedef struct conv {
    const cJSON *root;
    const char *name;
    gbuf *out;
    loom_err *err;
    int n_rules, depth;
    struct {
        char *ptr;
        int rule;
    } refs[MAX_REFS];
    int n_refs;
    bool need_value, need_string, need_number, need_integer, need_keychar;
    /* strings with length bounds, each a shared rule: a schema repeating "maxLength": 32767 in
     * a hundred places makes one rule of 10000 helpers, not a hundred */
    struct {
        int lo, hi; /* hi -1: unbounded */
    } lens[MAX_LENS];
    int n_lens;
    /* a oneOf branch's object (by identity) and the names it may not hold: the other branches
     * require them, so leaving them out is what keeps them from matching too */
    struct {
        const cJSON *schema, *names;
    } exclude;
} conv;

static int refuse(conv *c, const char *path, const char *fmt, const char *what) {
    char msg[256];
    snprintf(msg, sizeof msg, fmt, what);
    return loom_errf(c->err, "json_schema: %s (at %s)", msg, path[0] ? path : "/");
}

static const cJSON *get(const cJSON *s, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, k);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static void sub_path(char *dst, size_t cap, const char *path, const char *a, const char *b) {
    snprintf(dst, cap, "%s/%s%s%s", path, a, b ? "/" : "", b ? b : "");
}

/* ---- keywords ---- */

static const char *const refused_keywords[] = {"propertyNames",
                                               "contains",
                                               "minContains",
                                               "maxContains",
                                               "not",
                                               "if",
                                               "then",
                                               "else",
                                               "dependentRequired",
                                               "dependentSchemas",
                                               "dependencies",
                                               "unevaluatedProperties",
                                               "unevaluatedItems",
                                               "multipleOf",
                                               "$dynamicRef",
                                               "$recursiveRef",
                                               NULL};

static int check_keywords(conv *c, const cJSON *s, const char *path) {
    for (int i = 0; refused_keywords[i]; i++)
        if (get(s, refused_keywords[i])) return refuse(c, path, "'%s' is not supported", refused_keywords[i]);
    const cJSON *u = get(s, "uniqueItems");
    if (u && cJSON_IsTrue(u)) return refuse(c, path, "'%s' is not supported", "uniqueItems");
    return 0;
}

/* ---- shared rules ---- */

static void emit_shared(conv *c) {
    const char *n = c->name;
    gbuf *o = c->out;
    gbuf_printf(o, "%s-ws ::= \"\" | \" \" | \"\\n\" [ \\t]{0,20}\n", n);
    if (c->need_value) {
        gbuf_printf(o, "%s-value ::= %s-object | %s-array | %s-string | %s-number | \"true\" | \"false\" | \"null\"\n",
                    n, n, n, n, n);
        gbuf_printf(
            o,
            "%s-object ::= \"{\" %s-ws (%s-string %s-ws \":\" %s-ws %s-value %s-ws (\",\" %s-ws %s-string %s-ws "
            "\":\" %s-ws %s-value %s-ws)*)? \"}\"\n",
            n, n, n, n, n, n, n, n, n, n, n, n, n);
        gbuf_printf(o, "%s-array ::= \"[\" %s-ws (%s-value %s-ws (\",\" %s-ws %s-value %s-ws)*)? \"]\"\n", n, n, n, n,
                    n, n, n);
    }
    if (c->need_value || c->need_string) {
        gbuf_printf(o, "%s-string ::= \"\\\"\" %s-char* \"\\\"\"\n", n, n);
    }
    for (int k = 0; k < c->n_lens; k++) {
        gbuf_printf(o, "%s-string-%d ::= \"\\\"\" %s-char{%d,", n, k, n, c->lens[k].lo);
        if (c->lens[k].hi >= 0) gbuf_printf(o, "%d", c->lens[k].hi);
        gbuf_puts(o, "} \"\\\"\"\n");
    }
    if (c->need_value || c->need_number) {
        gbuf_printf(o,
                    "%s-number ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,16})? ([eE] [-+]? [1-9] "
                    "[0-9]?)?\n",
                    n);
    }
    if (c->need_integer) gbuf_printf(o, "%s-integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n", n);
    if (c->need_keychar) gbuf_printf(o, "%s-keychar ::= [^\"\\\\\\x00-\\x1F]\n", n);
    /* a character of a JSON string: raw, or an escape (no surrogate \u escapes) */
    gbuf_printf(o,
                "%s-char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" ([0-9a-cA-C] [0-9a-fA-F]{3} | "
                "[dD] [0-7] [0-9a-fA-F]{2} | [eEfF] [0-9a-fA-F]{3}))\n",
                n);
}

/* ---- numbers ---- */

/* Decimal digits of v, zero-padded to len. */
static void digits(char *d, uint64_t v, int len) {
    for (int i = len - 1; i >= 0; i--, v /= 10) d[i] = (char)('0' + v % 10);
    d[len] = 0;
}

static int n_digits(uint64_t v) {
    int n = 1;
    while (v >= 10) v /= 10, n++;
    return n;
}

static bool all_of(const char *s, char ch) {
    for (; *s; s++)
        if (*s != ch) return false;
    return true;
}

/* The strings of len digits from lo to hi (same length, lo <= hi), as one GBNF group. */
static void same_length(gbuf *b, const char *lo, const char *hi, int len) {
    if (!len) {
        gbuf_puts(b, "\"\"");
        return;
    }
    if (!strcmp(lo, hi)) {
        gbuf_literal(b, lo, (size_t)len);
        return;
    }
    if (lo[0] == hi[0]) {
        gbuf_printf(b, "(\"%c\" ", lo[0]);
        same_length(b, lo + 1, hi + 1, len - 1);
        gbuf_puts(b, ")");
        return;
    }
    char nines[24], zeros[24];
    memset(nines, '9', (size_t)len - 1), nines[len - 1] = 0;
    memset(zeros, '0', (size_t)len - 1), zeros[len - 1] = 0;
    bool lo_whole = all_of(lo + 1, '0'), hi_whole = all_of(hi + 1, '9');
    char d_lo = lo_whole ? lo[0] : (char)(lo[0] + 1), d_hi = hi_whole ? hi[0] : (char)(hi[0] - 1);
    int alts = 0;
    gbuf_puts(b, "(");
    if (!lo_whole) {
        gbuf_printf(b, "\"%c\" ", lo[0]);
        same_length(b, lo + 1, nines, len - 1);
        alts++;
    }
    if (d_lo <= d_hi) {
        gbuf_printf(b, "%s[%c-%c]", alts++ ? " | " : "", d_lo, d_hi);
        if (len > 1) gbuf_printf(b, " [0-9]{%d}", len - 1);
    }
    if (!hi_whole) {
        gbuf_printf(b, "%s\"%c\" ", alts++ ? " | " : "", hi[0]);
        same_length(b, zeros, hi + 1, len - 1);
    }
    gbuf_puts(b, ")");
}

#define UNBOUNDED UINT64_MAX

/* Unsigned decimal integers (no leading zeros) from lo to hi (UNBOUNDED: INT_DIGITS digits). */
static void uint_range(gbuf *b, uint64_t lo, uint64_t hi) {
    if (hi == UNBOUNDED) hi = 9999999999999999ull;
    int alts = 0;
    gbuf_puts(b, "(");
    for (int len = n_digits(lo); len <= n_digits(hi); len++) {
        uint64_t first = len == 1 ? 0 : (uint64_t)pow(10, len - 1), last = (uint64_t)pow(10, len) - 1;
        uint64_t a = lo > first ? lo : first, z = hi < last ? hi : last;
        if (a > z) continue;
        char da[24], dz[24];
        digits(da, a, len), digits(dz, z, len);
        if (alts++) gbuf_puts(b, " | ");
        same_length(b, da, dz, len);
    }
    gbuf_puts(b, ")");
}

/* A bound of a number schema: present, its value, exclusive. */
typedef struct bound {
    bool set, excl;
    double v;
} bound;

static int read_bounds(conv *c, const cJSON *s, const char *path, bool integer, bound *lo, bound *hi) {
    const cJSON *mn = get(s, "minimum"), *mx = get(s, "maximum"), *emn = get(s, "exclusiveMinimum"),
                *emx = get(s, "exclusiveMaximum");
    *lo = (bound){0}, *hi = (bound){0};
    const cJSON *k[4] = {mn, mx, emn, emx};
    const char *names[4] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    for (int i = 0; i < 4; i++) {
        if (!k[i]) continue;
        if (i >= 2 && cJSON_IsBool(k[i])) continue; /* draft 4: a flag on minimum/maximum */
        if (!cJSON_IsNumber(k[i])) return refuse(c, path, "'%s' must be a number", names[i]);
        double v = k[i]->valuedouble;
        if (fabs(v) > 9e15) return refuse(c, path, "'%s' beyond 9e15 is not supported", names[i]);
        if (!integer && v != floor(v))
            return refuse(c, path, "'%s' that is not an integer is not supported on a number", names[i]);
        bound *b = i % 2 ? hi : lo;
        bool excl = i >= 2;
        /* the tighter of two bounds on one side */
        if (!b->set || (i % 2 ? v < b->v || (v == b->v && excl) : v > b->v || (v == b->v && excl)))
            *b = (bound){true, excl, v};
    }
    if (emn && cJSON_IsTrue(emn) && lo->set) lo->excl = true;
    if (emx && cJSON_IsTrue(emx) && hi->set) hi->excl = true;
    if (integer) { /* integers: make bounds inclusive integers */
        if (lo->set) lo->v = lo->excl ? floor(lo->v) + 1 : ceil(lo->v), lo->excl = false;
        if (hi->set) hi->v = hi->excl ? ceil(hi->v) - 1 : floor(hi->v), hi->excl = false;
    }
    if (lo->set && hi->set && (lo->v > hi->v || (lo->v == hi->v && (lo->excl || hi->excl))))
        return refuse(c, path, "%s: no number lies between the bounds", "minimum/maximum");
    return 0;
}

static void integer_body(conv *c, const bound *lo, const bound *hi, gbuf *b) {
    if (!lo->set && !hi->set) {
        c->need_integer = true;
        gbuf_printf(b, "%s-integer", c->name);
        return;
    }
    int alts = 0;
    gbuf_puts(b, "(");
    if (!lo->set || lo->v < 0) { /* negatives: magnitudes from max(1, -hi) to -lo */
        uint64_t from = hi->set && hi->v < 0 ? (uint64_t)-hi->v : 1, to = lo->set ? (uint64_t)-lo->v : UNBOUNDED;
        gbuf_puts(b, "\"-\" ");
        uint_range(b, from, to);
        alts++;
    }
    if (!hi->set || hi->v >= 0) {
        if (alts++) gbuf_puts(b, " | ");
        uint_range(b, lo->set && lo->v > 0 ? (uint64_t)lo->v : 0, hi->set ? (uint64_t)hi->v : UNBOUNDED);
    }
    gbuf_puts(b, ")");
}

/* Unsigned decimals (an integer part and an optional fraction) from lo to hi, each bound
 * integer-valued and perhaps exclusive (hi may be unset). */
static void udecimal_range(gbuf *b, uint64_t lo, bool lo_excl, bool has_hi, uint64_t hi, bool hi_excl) {
    const char *frac = "(\".\" [0-9]{1,16})?", *nonzero = "(\".\" [0-9]{0,15} [1-9] [0-9]{0,15})";
    int alts = 0;
    gbuf_puts(b, "(");
    uint64_t from = lo + (lo_excl ? 1 : 0);
    if (lo_excl) { /* lo itself only with a fraction above zero */
        gbuf_printf(b, "\"%llu\" %s", (unsigned long long)lo, nonzero);
        alts++;
    }
    if (!has_hi || from < hi) { /* whole parts below hi take any fraction */
        if (alts++) gbuf_puts(b, " | ");
        uint_range(b, from, has_hi ? hi - 1 : UNBOUNDED);
        gbuf_printf(b, " %s", frac);
    }
    if (has_hi && !hi_excl && hi >= from) { /* hi itself, with no fraction */
        if (alts++) gbuf_puts(b, " | ");
        gbuf_printf(b, "\"%llu\"", (unsigned long long)hi);
    }
    if (!alts) gbuf_puts(b, "[^\\x00-\\U0010FFFF]");
    gbuf_puts(b, ")");
}

static void number_body(conv *c, const bound *lo, const bound *hi, gbuf *b) {
    if (!lo->set && !hi->set) {
        c->need_number = true;
        gbuf_printf(b, "%s-number", c->name);
        return;
    }
    int alts = 0;
    gbuf_puts(b, "(");
    if (!lo->set || lo->v < 0) { /* negatives: "-" and a magnitude above -hi (or 0), up to -lo */
        bool from_zero = !hi->set || hi->v >= 0;
        gbuf_puts(b, "\"-\" ");
        udecimal_range(b, from_zero ? 0 : (uint64_t)-hi->v, from_zero || hi->excl, lo->set,
                       lo->set ? (uint64_t)-lo->v : 0, lo->excl);
        alts++;
    }
    if (!hi->set || hi->v >= 0) {
        if (alts++) gbuf_puts(b, " | ");
        bool from_zero = !lo->set || lo->v < 0;
        udecimal_range(b, from_zero ? 0 : (uint64_t)lo->v, !from_zero && lo->excl, hi->set,
                       hi->set ? (uint64_t)hi->v : 0, hi->excl);
    }
    gbuf_puts(b, ")");
}

/* ---- strings ---- */

static int format_expr(conv *c, const char *f, const char *path, gbuf *b) {
    static const struct {
        const char *name, *gbnf;
    } formats[] = {
        {"date", "YEAR \"-\" DATE"},
        {"time", "TIME"},
        {"date-time", "YEAR \"-\" DATE \"T\" TIME"},
        {"uuid", "[0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12}"},
        {"email", "[a-zA-Z0-9] [a-zA-Z0-9._+-]{0,31} \"@\" [a-zA-Z0-9] [a-zA-Z0-9-]{0,30} (\".\" [a-zA-Z0-9] "
                  "[a-zA-Z0-9-]{0,30}){0,2} \".\" [a-zA-Z]{2,8}"},
        {"ipv4", "OCTET \".\" OCTET \".\" OCTET \".\" OCTET"},
        {"ipv6", "[0-9a-f]{1,4} (\":\" [0-9a-f]{1,4}){7}"},
        {"hostname", "LABEL (\".\" LABEL){0,3}"},
        {"uri", "[a-z] [a-z0-9+.-]{0,8} \"://\" LABEL (\".\" LABEL){0,3} (\"/\" [a-zA-Z0-9._~-]{0,20}){0,5}"},
        {"uri-reference", "[a-z] [a-z0-9+.-]{0,8} \"://\" LABEL (\".\" LABEL){0,3} (\"/\" [a-zA-Z0-9._~-]{0,20}){0,5}"},
    };
    /* the formats JSON Schema defines that have no grammar here; one it does not define is an
     * annotation, which validators ignore */
    static const char *const standard[] = {
        "duration",     "idn-email",    "idn-hostname",          "iri",   "iri-reference",
        "uri-template", "json-pointer", "relative-json-pointer", "regex", NULL};
    for (size_t i = 0; i < sizeof formats / sizeof *formats; i++) {
        if (strcmp(formats[i].name, f)) continue;
        /* the pieces, expanded in place: a year from 0001 (Python's dates, which validators use,
         * have no year 0), a month and its days (February to 28), a time with its
         * zone, an octet without leading zeros, a hostname label */
        static const struct {
            const char *key, *gbnf;
        } pieces[] = {
            {"YEAR", "(\"000\" [1-9] | \"00\" [1-9] [0-9] | \"0\" [1-9] [0-9]{2} | [1-9] [0-9]{3})"},
            {"DATE", "((\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01]) | (\"0\" [469] | "
                     "\"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") | \"02-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" "
                     "[0-8]))"},
            {"TIME", "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? (\"Z\" | "
                     "[+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])"},
            {"OCTET", "(\"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9]? [0-9])"},
            {"LABEL", "([a-z0-9] ([a-z0-9-]{0,20} [a-z0-9])?)"},
        };
        gbuf_puts(b, "\"\\\"\" ");
        for (const char *p = formats[i].gbnf; *p;) {
            size_t k = 0;
            while (k < sizeof pieces / sizeof *pieces && strncmp(p, pieces[k].key, strlen(pieces[k].key))) k++;
            if (k < sizeof pieces / sizeof *pieces) {
                gbuf_puts(b, pieces[k].gbnf);
                p += strlen(pieces[k].key);
            } else {
                gbuf_put(b, p++, 1);
            }
        }
        gbuf_puts(b, " \"\\\"\"");
        return 0;
    }
    for (int i = 0; standard[i]; i++)
        if (!strcmp(standard[i], f)) return refuse(c, path, "'format' '%s' is not supported", f);
    c->need_string = true;
    gbuf_printf(b, "%s-string", c->name);
    return 0;
}

static int string_body(conv *c, const cJSON *s, const char *path, gbuf *b) {
    const cJSON *f = get(s, "format"), *pat = get(s, "pattern"), *mn = get(s, "minLength"), *mx = get(s, "maxLength");
    if (f && !cJSON_IsString(f)) return refuse(c, path, "'%s' must be a string", "format");
    if (pat && !cJSON_IsString(pat)) return refuse(c, path, "'%s' must be a string", "pattern");
    if ((mn && !cJSON_IsNumber(mn)) || (mx && !cJSON_IsNumber(mx)))
        return refuse(c, path, "'%s' must be a number", mn && !cJSON_IsNumber(mn) ? "minLength" : "maxLength");
    if (pat && (f || mn || mx))
        return refuse(c, path, "'%s' with format, minLength or maxLength is not supported", "pattern");
    if (f && (mn || mx)) return refuse(c, path, "'%s' with minLength or maxLength is not supported", "format");
    if (pat) {
        gbuf_puts(b, "\"\\\"\" ");
        if (regex_expr(pat->valuestring, true, b, c->err))
            return loom_err_prefix(c->err, "json_schema: at %s", path[0] ? path : "/");
        gbuf_puts(b, " \"\\\"\"");
        return 0;
    }
    if (f) return format_expr(c, f->valuestring, path, b);
    if (!mn && !mx) {
        c->need_string = true;
        gbuf_printf(b, "%s-string", c->name);
        return 0;
    }
    double lo = mn ? mn->valuedouble : 0, hi = mx ? mx->valuedouble : -1;
    if (lo > MAX_REPEAT) return refuse(c, path, "'minLength' over %s is not supported", "10000");
    if (hi > MAX_REPEAT) hi = MAX_REPEAT; /* a shorter maximum: still valid */
    if (mx && hi < lo) return refuse(c, path, "'%s' below minLength: no string fits", "maxLength");
    int l = (int)ceil(lo), h = mx ? (int)floor(hi) : -1, k = 0;
    while (k < c->n_lens && (c->lens[k].lo != l || c->lens[k].hi != h)) k++;
    if (k == MAX_LENS) return refuse(c, path, "more than %s distinct string length bounds", "256");
    if (k == c->n_lens) c->lens[c->n_lens++].lo = l, c->lens[k].hi = h;
    gbuf_printf(b, "%s-string-%d", c->name, k);
    return 0;
}

/* ---- schemas ---- */

static int schema_rule(conv *c, const cJSON *s, const char *path);
static int schema_body(conv *c, const cJSON *s, const char *path, gbuf *b);

/* The value's JSON text as a literal. */
static void json_literal(gbuf *b, const cJSON *v) {
    char *t = cJSON_PrintUnformatted(v);
    if (!t) {
        b->oom = true;
        return;
    }
    gbuf_literal(b, t, strlen(t));
    free(t);
}

/* The subschema of v whose "$anchor" is name, or whose "id"/"$id" is "#name" (draft 4's plain
 * name fragments). */
static const cJSON *find_anchor(const cJSON *v, const char *name) {
    if (!cJSON_IsObject(v) && !cJSON_IsArray(v)) return NULL;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(v, "$anchor"), *x;
    if (cJSON_IsString(a) && !strcmp(a->valuestring, name)) return v;
    for (int k = 0; k < 2; k++) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(v, k ? "$id" : "id");
        if (cJSON_IsString(id) && id->valuestring[0] == '#' && !strcmp(id->valuestring + 1, name)) return v;
    }
    cJSON_ArrayForEach(x, v) {
        const cJSON *found = find_anchor(x, name);
        if (found) return found;
    }
    return NULL;
}

/* The schema a JSON pointer ("#/a/b") or a plain name fragment ("#name") names in the root
 * document. */
static const cJSON *resolve(conv *c, const char *ref, const char *path) {
    if (ref[0] != '#') return refuse(c, path, "'$ref' to another document ('%s') is not supported", ref), NULL;
    if (ref[1] && ref[1] != '/') {
        const cJSON *named = find_anchor(c->root, ref + 1);
        if (!named) refuse(c, path, "'$ref' '%s' names nothing in the schema", ref);
        return named;
    }
    const cJSON *at = c->root;
    for (const char *p = ref + 1; *p == '/' && at;) {
        char key[256];
        size_t n = 0;
        for (p++; *p && *p != '/' && n + 1 < sizeof key; p++) {
            if (*p == '~' && (p[1] == '0' || p[1] == '1')) key[n++] = p[1] == '0' ? '~' : '/', p++;
            else key[n++] = *p;
        }
        key[n] = 0;
        at = cJSON_IsArray(at) ? cJSON_GetArrayItem(at, atoi(key)) : cJSON_GetObjectItemCaseSensitive(at, key);
    }
    if (!at) refuse(c, path, "'$ref' '%s' names nothing in the schema", ref);
    return at;
}

/* The rule of a $ref target, made once (recursive schemas refer to themselves by it). */
static int ref_rule(conv *c, const char *ref, const char *path) {
    for (int i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i].ptr, ref)) return c->refs[i].rule;
    const cJSON *target = resolve(c, ref, path);
    if (!target) return -1;
    if (c->n_refs == MAX_REFS) return refuse(c, path, "more than %s distinct '$ref' targets", "512");
    int id = c->n_rules++, saved = c->depth;
    if (!(c->refs[c->n_refs].ptr = mem_strdup(ref, "a schema's reference", NULL)))
        return loom_errf(c->err, "json_schema: out of memory");
    c->refs[c->n_refs++].rule = id;
    gbuf body = {0};
    c->depth = 0; /* a reference starts a rule of its own */
    int rc = schema_body(c, target, ref + 1, &body);
    c->depth = saved;
    if (!rc) gbuf_printf(c->out, "%s-%d ::= %s\n", c->name, id, body.p ? body.p : "\"\"");
    gbuf_free(&body);
    return rc ? -1 : id;
}

static bool is_annotation(const char *k) {
    static const char *const names[] = {
        "title", "description", "default",    "examples", "example",   "$schema",          "$id",
        "id",    "$comment",    "deprecated", "readOnly", "writeOnly", "contentMediaType", "contentEncoding",
        "$defs", "definitions", "$anchor",    NULL};
    for (int i = 0; names[i]; i++)
        if (!strcmp(k, names[i])) return true;
    return k[0] == 'x' && k[1] == '-';
}

/* dst gains src's keywords (allOf): properties merged (a property in both becomes the allOf of
 * the two), required joined, anything else equal in both or present in one only. */
static int merge_into(conv *c, cJSON *dst, const cJSON *src, const char *path, int depth) {
    if (depth > MAX_DEPTH) return refuse(c, path, "'%s' nested too deeply", "allOf");
    const cJSON *ref = get(src, "$ref");
    if (ref && cJSON_IsString(ref)) {
        const cJSON *t = resolve(c, ref->valuestring, path);
        if (!t || merge_into(c, dst, t, path, depth + 1)) return -1;
    }
    const cJSON *k;
    cJSON_ArrayForEach(k, src) {
        if (is_annotation(k->string) || !strcmp(k->string, "$ref")) continue;
        if (!strcmp(k->string, "allOf")) {
            const cJSON *x;
            cJSON_ArrayForEach(x, k) if (merge_into(c, dst, x, path, depth + 1)) return -1;
            continue;
        }
        cJSON *have = cJSON_GetObjectItemCaseSensitive(dst, k->string);
        if (!have) {
            cJSON_AddItemToObject(dst, k->string, cJSON_Duplicate(k, true));
        } else if (!strcmp(k->string, "properties") && cJSON_IsObject(k)) {
            const cJSON *p;
            cJSON_ArrayForEach(p, k) {
                cJSON *q = cJSON_GetObjectItemCaseSensitive(have, p->string);
                if (!q) {
                    cJSON_AddItemToObject(have, p->string, cJSON_Duplicate(p, true));
                } else if (!cJSON_Compare(p, q, true)) {
                    cJSON *both = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(both, "allOf");
                    cJSON_AddItemToArray(list, cJSON_Duplicate(q, true));
                    cJSON_AddItemToArray(list, cJSON_Duplicate(p, true));
                    cJSON_ReplaceItemInObjectCaseSensitive(have, p->string, both);
                }
            }
        } else if (!strcmp(k->string, "required") && cJSON_IsArray(k)) {
            const cJSON *r;
            cJSON_ArrayForEach(r, k) {
                bool there = false;
                const cJSON *h;
                cJSON_ArrayForEach(h, have) there |= cJSON_Compare(h, r, true);
                if (!there) cJSON_AddItemToArray(have, cJSON_Duplicate(r, true));
            }
        } else if (!cJSON_Compare(have, k, true)) {
            return refuse(c, path, "'allOf' combines different '%s'", k->string);
        }
    }
    return 0;
}

/* The property list of an object schema, in order, then required names it does not declare. */
typedef struct prop {
    const char *key;
    const cJSON *schema; /* NULL: additionalProperties' or any value */
    bool required;
} prop;

static bool in_required(const cJSON *req, const char *k) {
    const cJSON *r;
    cJSON_ArrayForEach(r, req) if (cJSON_IsString(r) && !strcmp(r->valuestring, k)) return true;
    return false;
}

/* Whether name is among a list of strings. */
static bool listed(const cJSON *list, const char *name) {
    const cJSON *r;
    cJSON_ArrayForEach(r, list) if (cJSON_IsString(r) && !strcmp(r->valuestring, name)) return true;
    return false;
}

/* The rule of the names' trie node at prefix `at` (bytes of a name): a key's characters from
 * there, its closing quote included. The key may end unless a name ends here, go on along a
 * name, or leave every name with another character and then take any (unescaped) characters. */
static int key_node(conv *c, const cJSON *names, const char *at, size_t len, const char *path) {
    int id = c->n_rules++, n_seen = 0, rc = 0;
    gbuf alts = {0}, others = {0};
    uint32_t seen[128];
    bool ends = false;
    const cJSON *nm;
    cJSON_ArrayForEach(nm, names) {
        const char *k = nm->valuestring;
        if (strlen(k) < len || memcmp(k, at, len)) continue;
        if (!k[len]) {
            ends = true;
            continue;
        }
        size_t n;
        uint32_t cp = u8decode(k + len, &n);
        bool dup = false;
        for (int i = 0; i < n_seen; i++) dup |= seen[i] == cp;
        if (dup) continue;
        if (n_seen == (int)(sizeof seen / sizeof *seen)) {
            rc = refuse(c, path, "over %s property names branch at one character", "128");
            break;
        }
        seen[n_seen++] = cp;
        int child = key_node(c, names, k, len + n, path);
        if (child < 0) {
            rc = -1;
            break;
        }
        gbuf_printf(&alts, "\"\\U%08X\" %s-%d | ", cp, c->name, child);
        gbuf_printf(&others, "\\U%08X", cp);
    }
    if (!rc)
        gbuf_printf(c->out, "%s-%d ::= %s%s[^\"\\\\\\x00-\\x1F%s] %s-keychar* \"\\\"\"\n", c->name, id,
                    ends ? "" : "\"\\\"\" | ", alts.p ? alts.p : "", others.p ? others.p : "", c->name);
    gbuf_free(&alts);
    gbuf_free(&others);
    return rc ? -1 : id;
}

/* A key (quoted) that is none of `names`: unescaped, since an escaped spelling of a name is the
 * name to a validator. Names no unescaped key can spell are left out of the trie. */
static int key_except(conv *c, const cJSON *names, const char *path) {
    cJSON *spellable = cJSON_CreateArray();
    const cJSON *nm;
    cJSON_ArrayForEach(nm, names) {
        const char *k = cJSON_IsString(nm) ? nm->valuestring : NULL;
        if (k && strlen(k) > MAX_KEY) { /* the trie's depth is a name's length */
            cJSON_Delete(spellable);
            return refuse(c, path, "a property name over %s bytes beside additional properties", "256");
        }
        bool ok = k && u8invalid(k, strlen(k)) == strlen(k);
        for (const char *q = ok ? k : ""; *q; q++) ok &= *q != '"' && *q != '\\' && (unsigned char)*q >= 0x20;
        if (ok && !listed(spellable, k)) cJSON_AddItemToArray(spellable, cJSON_CreateString(k));
    }
    c->need_keychar = true;
    int root = c->n_rules++, first = key_node(c, spellable, "", 0, path);
    cJSON_Delete(spellable);
    if (first < 0) return -1;
    gbuf_printf(c->out, "%s-%d ::= \"\\\"\" %s-%d\n", c->name, root, c->name, first);
    return root;
}

static int object_body(conv *c, const cJSON *s, const char *path, gbuf *b) {
    const cJSON *props = get(s, "properties"), *req = get(s, "required"), *addl = get(s, "additionalProperties"),
                *pats = get(s, "patternProperties");
    if (pats && !cJSON_IsObject(pats)) return refuse(c, path, "'%s' must be an object", "patternProperties");
    if (props && !cJSON_IsObject(props)) return refuse(c, path, "'%s' must be an object", "properties");
    if (req && !cJSON_IsArray(req)) return refuse(c, path, "'%s' must be an array", "required");
    /* extra keys: absent means none where properties are declared, any where none are */
    bool extra = addl ? !cJSON_IsFalse(addl) : !props && !pats, more = extra || cJSON_GetArraySize(pats);
    int n = 0, n_req = 0;
    const cJSON *p, *r;
    cJSON_ArrayForEach(p, props) n++;
    cJSON_ArrayForEach(r, req) n++, n_req++;
    prop *list = mem_zalloc((size_t)n + 1, sizeof *list, "a schema's properties", NULL);
    if (!list) return loom_errf(c->err, "json_schema: out of memory");
    n = 0;
    cJSON_ArrayForEach(p, props) list[n++] = (prop){p->string, p, in_required(req, p->string)};
    cJSON_ArrayForEach(r, req) {
        if (!cJSON_IsString(r)) {
            free(list);
            return refuse(c, path, "'%s' must list strings", "required");
        }
        if (props && cJSON_GetObjectItemCaseSensitive(props, r->valuestring)) continue;
        if (addl && cJSON_IsFalse(addl)) {
            free(list);
            return refuse(c, path, "'required' names '%s', which additionalProperties false forbids", r->valuestring);
        }
        list[n++] = (prop){r->valuestring, NULL, true};
    }
    const cJSON *mnp = get(s, "minProperties"), *mxp = get(s, "maxProperties");
    if (mnp && (!cJSON_IsNumber(mnp) || mnp->valuedouble > n_req)) /* met by the required ones, or not */
        return free(list), refuse(c, path, "'%s' is not supported", "minProperties");
    if (mxp && (!cJSON_IsNumber(mxp) || more || mxp->valuedouble < n))
        return free(list), refuse(c, path, "'%s' is not supported", "maxProperties");
    const char *nm = c->name;
    char sub[512];
    int rc = 0, extra_rule = -1, *kv = mem_zalloc((size_t)n + 1, sizeof *kv, "a schema's properties", NULL);
    if (!kv) rc = loom_errf(c->err, "json_schema: out of memory");
    if (!rc && more) { /* one key and value past the declared ones: by a pattern, or any */
        gbuf alts = {0};
        const cJSON *pp;
        cJSON_ArrayForEach(pp, pats) {
            sub_path(sub, sizeof sub, path, "patternProperties", pp->string);
            int id = schema_rule(c, pp, sub);
            if (id < 0) break;
            gbuf_printf(&alts, "%s\"\\\"\" ", alts.len ? " | " : "");
            if (regex_expr(pp->string, true, &alts, c->err)) {
                loom_err_prefix(c->err, "json_schema: at %s", sub);
                break;
            }
            gbuf_printf(&alts, " \"\\\"\" %s-ws \":\" %s-ws %s-%d %s-ws", nm, nm, nm, id, nm);
        }
        if (pp) rc = -1;
        if (!rc && extra) {
            sub_path(sub, sizeof sub, path, "additionalProperties", NULL);
            int id = addl && cJSON_IsObject(addl) ? schema_rule(c, addl, sub) : -1;
            if (id < 0 && addl && cJSON_IsObject(addl)) rc = -1;
            if (id < 0) c->need_value = true;
            /* a key past the declared ones is none of them (nor a name a oneOf branch leaves out) */
            cJSON *taken = cJSON_CreateArray();
            const cJSON *x, *out = c->exclude.schema == s ? c->exclude.names : NULL;
            cJSON_ArrayForEach(x, props) cJSON_AddItemToArray(taken, cJSON_CreateString(x->string));
            cJSON_ArrayForEach(x, req) if (cJSON_IsString(x)) cJSON_AddItemToArray(taken, cJSON_Duplicate(x, true));
            cJSON_ArrayForEach(x, out) cJSON_AddItemToArray(taken, cJSON_Duplicate(x, true));
            int key = cJSON_GetArraySize(taken) ? key_except(c, taken, path) : -2;
            cJSON_Delete(taken);
            if (key == -1) rc = -1;
            if (key < 0) c->need_string = true;
            if (key < 0) gbuf_printf(&alts, "%s%s-string %s-ws \":\" %s-ws ", alts.len ? " | " : "", nm, nm, nm);
            else gbuf_printf(&alts, "%s%s-%d %s-ws \":\" %s-ws ", alts.len ? " | " : "", nm, key, nm, nm);
            if (id >= 0) gbuf_printf(&alts, "%s-%d %s-ws", nm, id, nm);
            else gbuf_printf(&alts, "%s-value %s-ws", nm, nm);
        }
        if (!rc) {
            extra_rule = c->n_rules++;
            gbuf_printf(c->out, "%s-%d ::= %s\n", nm, extra_rule, alts.p ? alts.p : "\"\"");
        }
        gbuf_free(&alts);
    }
    for (int i = 0; !rc && i < n; i++) {
        sub_path(sub, sizeof sub, path, "properties", list[i].key);
        const cJSON *sch = list[i].schema ? list[i].schema : addl && cJSON_IsObject(addl) ? addl : NULL;
        kv[i] = sch ? schema_rule(c, sch, sub) : -2;
        if (kv[i] == -1) rc = -1;
        if (kv[i] == -2) c->need_value = true;
    }
    if (!rc) { /* R(i): properties i.. after one was written; S(i): before any was */
        int base = c->n_rules;
        c->n_rules += 2 * (n + 1);
        char addkv[64];
        snprintf(addkv, sizeof addkv, "%s-%d", nm, extra_rule);
        if (more) {
            gbuf_printf(c->out, "%s-%d ::= (\",\" %s-ws %s)*\n", nm, base + 2 * n, nm, addkv);
            gbuf_printf(c->out, "%s-%d ::= (%s (\",\" %s-ws %s)*)?\n", nm, base + 2 * n + 1, addkv, nm, addkv);
        } else {
            gbuf_printf(c->out, "%s-%d ::= \"\"\n%s-%d ::= \"\"\n", nm, base + 2 * n, nm, base + 2 * n + 1);
        }
        for (int i = n - 1; i >= 0; i--) {
            gbuf key = {0};
            cJSON *ks = cJSON_CreateString(list[i].key);
            json_literal(&key, ks);
            cJSON_Delete(ks);
            char v[64];
            if (kv[i] >= 0) snprintf(v, sizeof v, "%s-%d", nm, kv[i]);
            else snprintf(v, sizeof v, "%s-value", nm);
            int R = base + 2 * i, S = R + 1, R1 = R + 2, S1 = R + 3;
            gbuf_printf(c->out, "%s-%d ::= \",\" %s-ws %s %s-ws \":\" %s-ws %s %s-ws %s-%d", nm, R, nm,
                        key.p ? key.p : "\"\"", nm, nm, v, nm, nm, R1);
            if (!list[i].required) gbuf_printf(c->out, " | %s-%d", nm, R1);
            gbuf_printf(c->out, "\n%s-%d ::= %s %s-ws \":\" %s-ws %s %s-ws %s-%d", nm, S, key.p ? key.p : "\"\"", nm,
                        nm, v, nm, nm, R1);
            if (!list[i].required) gbuf_printf(c->out, " | %s-%d", nm, S1);
            gbuf_puts(c->out, "\n");
            gbuf_free(&key);
        }
        gbuf_printf(b, "\"{\" %s-ws %s-%d \"}\"", nm, nm, base + 1);
    }
    free(kv);
    free(list);
    return rc;
}

static int array_body(conv *c, const cJSON *s, const char *path, gbuf *b) {
    const cJSON *items = get(s, "items"), *prefix = get(s, "prefixItems"), *mn = get(s, "minItems"),
                *mx = get(s, "maxItems"), *addi = get(s, "additionalItems");
    if (cJSON_IsArray(items)) prefix = items, items = addi; /* draft 4's tuples */
    if (prefix && !cJSON_IsArray(prefix)) return refuse(c, path, "'%s' must be an array", "prefixItems");
    if ((mn && !cJSON_IsNumber(mn)) || (mx && !cJSON_IsNumber(mx)))
        return refuse(c, path, "'%s' must be a number", mn && !cJSON_IsNumber(mn) ? "minItems" : "maxItems");
    int n_pre = cJSON_GetArraySize(prefix);
    long lo = mn ? (long)ceil(mn->valuedouble) : 0, hi = mx ? (long)floor(mx->valuedouble) : -1;
    if (lo > MAX_REPEAT) return refuse(c, path, "'minItems' over %s is not supported", "10000");
    if (hi > MAX_REPEAT) hi = MAX_REPEAT;
    if (mx && hi < lo) return refuse(c, path, "'%s' below minItems: no array fits", "maxItems");
    /* items after the prefix: the items schema; none when it is false, or with a prefix and no
     * items schema unless minItems needs them (then any values) */
    bool more = items ? !cJSON_IsFalse(items) : !prefix || lo > n_pre;
    if (!more && lo > n_pre) return refuse(c, path, "'%s' needs more items than the array allows", "minItems");
    char sub[512], item[64];
    int rc = 0;
    if (more && items && cJSON_IsObject(items)) {
        sub_path(sub, sizeof sub, path, "items", NULL);
        int id = schema_rule(c, items, sub);
        if (id < 0) return -1;
        snprintf(item, sizeof item, "%s-%d", c->name, id);
    } else {
        c->need_value = true;
        snprintf(item, sizeof item, "%s-value", c->name);
    }
    const char *nm = c->name;
    gbuf_printf(b, "\"[\" %s-ws ", nm);
    int open = 0;
    const cJSON *e = prefix ? prefix->child : NULL;
    for (int i = 0; i < n_pre && (hi < 0 || i < hi); i++, e = e->next) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", i);
        sub_path(sub, sizeof sub, path, "prefixItems", idx);
        int id = schema_rule(c, e, sub);
        if (id < 0) return -1;
        if (i >= lo) gbuf_puts(b, "("), open++; /* optional: so is everything after it */
        if (i) gbuf_printf(b, "\",\" %s-ws ", nm);
        gbuf_printf(b, "%s-%d %s-ws ", nm, id, nm);
    }
    long done = n_pre < hi || hi < 0 ? n_pre : hi;
    if (more && (hi < 0 || done < hi)) {
        long need = lo > done ? lo - done : 0, room = hi < 0 ? -1 : hi - done;
        if (done == 0) { /* the first item has no comma before it */
            if (need) gbuf_printf(b, "%s %s-ws (\",\" %s-ws %s %s-ws)", item, nm, nm, item, nm);
            else gbuf_printf(b, "(%s %s-ws (\",\" %s-ws %s %s-ws)", item, nm, nm, item, nm);
            long n1 = need ? need - 1 : 0, r1 = room < 0 ? -1 : room - 1;
            if (r1 < 0) gbuf_printf(b, "{%ld,}", n1);
            else gbuf_printf(b, "{%ld,%ld}", n1, r1);
            if (!need) gbuf_puts(b, ")?");
        } else {
            gbuf_printf(b, "(\",\" %s-ws %s %s-ws)", nm, item, nm);
            if (room < 0) gbuf_printf(b, "{%ld,}", need);
            else gbuf_printf(b, "{%ld,%ld}", need, room);
        }
    }
    for (; open; open--) gbuf_puts(b, ")?");
    gbuf_puts(b, "\"]\"");
    return rc;
}

/* The body of one JSON type of schema s. */
static int type_body(conv *c, const cJSON *s, const char *type, const char *path, gbuf *b) {
    bound lo, hi;
    if (!strcmp(type, "null")) gbuf_puts(b, "\"null\"");
    else if (!strcmp(type, "boolean")) gbuf_puts(b, "(\"true\" | \"false\")");
    else if (!strcmp(type, "string")) return string_body(c, s, path, b);
    else if (!strcmp(type, "integer") || !strcmp(type, "number")) {
        bool integer = type[0] == 'i';
        if (read_bounds(c, s, path, integer, &lo, &hi)) return -1;
        if (integer) integer_body(c, &lo, &hi, b);
        else number_body(c, &lo, &hi, b);
    } else if (!strcmp(type, "object")) return object_body(c, s, path, b);
    else if (!strcmp(type, "array")) return array_body(c, s, path, b);
    else return refuse(c, path, "'type' '%s' is not a JSON Schema type", type);
    return 0;
}

/* The type a schema without "type" describes by its keywords (NULL: any value). */
static const char *implied_type(const cJSON *s) {
    static const struct {
        const char *key, *type;
    } by_key[] = {{"properties", "object"},      {"additionalProperties", "object"},
                  {"required", "object"},        {"items", "array"},
                  {"prefixItems", "array"},      {"minItems", "array"},
                  {"maxItems", "array"},         {"minLength", "string"},
                  {"maxLength", "string"},       {"pattern", "string"},
                  {"format", "string"},          {"minimum", "number"},
                  {"maximum", "number"},         {"exclusiveMinimum", "number"},
                  {"exclusiveMaximum", "number"}};
    for (size_t i = 0; i < sizeof by_key / sizeof *by_key; i++)
        if (get(s, by_key[i].key)) return by_key[i].type;
    return NULL;
}

/* The types a merged branch's values can have, as bits (integer inside number); 0: any. */
enum { T_NULL = 1, T_BOOL = 2, T_INT = 4, T_NUM = 8 | T_INT, T_STR = 16, T_OBJ = 32, T_ARR = 64 };
static int type_bits(const cJSON *s) {
    static const struct {
        const char *name;
        int bits;
    } names[] = {{"null", T_NULL},  {"boolean", T_BOOL}, {"integer", T_INT}, {"number", T_NUM},
                 {"string", T_STR}, {"object", T_OBJ},   {"array", T_ARR}};
    const cJSON *type = get(s, "type"), *types = cJSON_IsArray(type) ? type : NULL, *t;
    const cJSON *cst = cJSON_GetObjectItemCaseSensitive(s, "const"), *en = cst ? NULL : get(s, "enum");
    int bits = 0;
    if (!type && (cst || en)) { /* the values' own types */
        for (t = cst ? cst : en->child; t; t = cst ? NULL : t->next)
            bits |= cJSON_IsNull(t)     ? T_NULL
                    : cJSON_IsBool(t)   ? T_BOOL
                    : cJSON_IsNumber(t) ? (t->valuedouble == floor(t->valuedouble) ? T_INT : T_NUM)
                    : cJSON_IsString(t) ? T_STR
                    : cJSON_IsArray(t)  ? T_ARR
                                        : T_OBJ;
        return bits;
    }
    const char *implied = type ? NULL : implied_type(s);
    if (!type && !implied) return 0;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        bool named = implied ? !strcmp(implied, names[i].name)
                             : cJSON_IsString(type) && !strcmp(type->valuestring, names[i].name);
        cJSON_ArrayForEach(t, types) named |= cJSON_IsString(t) && !strcmp(t->valuestring, names[i].name);
        if (named) bits |= names[i].bits;
    }
    return bits;
}

/* Whether every value branch a (merged) admits fails branch b, so that a oneOf holding both
 * matches one: their types are apart, their enum/const values are, or a is an object left
 * without a name b requires (a's names are taken out: see branches_body). */
static bool rules_out(const cJSON *a, const cJSON *b) {
    int ta = type_bits(a), tb = type_bits(b);
    if (ta && tb && !(ta & tb)) return true;
    const cJSON *ea = cJSON_GetObjectItemCaseSensitive(a, "const") ? NULL : get(a, "enum"),
                *eb = cJSON_GetObjectItemCaseSensitive(b, "const") ? NULL : get(b, "enum"), *x, *y;
    const cJSON *ca = cJSON_GetObjectItemCaseSensitive(a, "const"), *cb = cJSON_GetObjectItemCaseSensitive(b, "const");
    if ((ca || ea) && (cb || eb)) {
        bool apart = true;
        for (x = ca ? ca : ea->child; x && apart; x = ca ? NULL : x->next)
            for (y = cb ? cb : eb->child; y && apart; y = cb ? NULL : y->next) apart = !cJSON_Compare(x, y, true);
        if (apart) return true;
    }
    /* required names only bind objects, and a's object grammar must be a's own (no branches,
     * values or key patterns of its own that could bring the name back) */
    if (ta != T_OBJ || ca || ea || get(a, "anyOf") || get(a, "oneOf") || get(a, "patternProperties")) return false;
    const cJSON *theirs = get(b, "required"), *mine = get(a, "required");
    cJSON_ArrayForEach(x, theirs) if (cJSON_IsString(x) && !listed(mine, x->valuestring)) return true;
    return false;
}

/* Alternatives of the branches of anyOf/oneOf, each merged with the keywords beside it. A oneOf
 * is the anyOf of its branches where each rules the others out (rules_out): a branch leaves out
 * the properties other branches require and it does not, as keys past its declared ones too. A
 * oneOf whose branches could both match some value is refused. */
static int branches_body(conv *c, const cJSON *s, const cJSON *list, const char *kw, const char *path, gbuf *b) {
    if (!cJSON_IsArray(list) || !cJSON_GetArraySize(list)) return refuse(c, path, "'%s' must be a non-empty array", kw);
    cJSON *rest = cJSON_Duplicate(s, true);
    cJSON_DeleteItemFromObjectCaseSensitive(rest, kw);
    bool alone = true, one = !strcmp(kw, "oneOf");
    const cJSON *k;
    cJSON_ArrayForEach(k, rest) alone &= is_annotation(k->string);
    int n = cJSON_GetArraySize(list), rc = 0;
    cJSON **merged = mem_zalloc((size_t)n, sizeof *merged, "a schema's branches", NULL);
    if (!merged) rc = loom_errf(c->err, "json_schema: out of memory");
    const cJSON *br = list->child;
    char sub[512], idx[16];
    for (int i = 0; !rc && i < n; i++, br = br->next) { /* keywords beside them apply to every branch */
        snprintf(idx, sizeof idx, "%d", i);
        sub_path(sub, sizeof sub, path, kw, idx);
        if (alone && !one) continue;
        merged[i] = alone ? cJSON_CreateObject() : cJSON_Duplicate(rest, true);
        if (cJSON_IsBool(br)) rc = refuse(c, sub, "a boolean branch in '%s' is not supported", kw);
        else rc = merge_into(c, merged[i], br, sub, 0);
    }
    for (int i = 0; !rc && one && i < n; i++)
        for (int j = 0; !rc && j < n; j++)
            if (i != j && !rules_out(merged[i], merged[j])) {
                char msg[64];
                snprintf(msg, sizeof msg, "'oneOf' branches %d and %d", i, j);
                rc = refuse(c, path,
                            "%s could both match a value (only branches told apart by type, values or required "
                            "properties are supported)",
                            msg);
            }
    gbuf_puts(b, "(");
    br = list->child;
    for (int i = 0; !rc && i < n; i++, br = br->next) {
        snprintf(idx, sizeof idx, "%d", i);
        sub_path(sub, sizeof sub, path, kw, idx);
        cJSON *excluded = cJSON_CreateArray(), *props = cJSON_GetObjectItemCaseSensitive(merged[i], "properties");
        const cJSON *name, *mine = merged[i] ? get(merged[i], "required") : NULL;
        for (int j = 0; one && j < n; j++)
            if (j != i)
                cJSON_ArrayForEach(name, get(merged[j], "required")) if (cJSON_IsString(name) &&
                                                                         !listed(mine, name->valuestring) &&
                                                                         !listed(excluded, name->valuestring)) {
                    cJSON_DeleteItemFromObjectCaseSensitive(props, name->valuestring);
                    cJSON_AddItemToArray(excluded, cJSON_CreateString(name->valuestring));
                }
        c->exclude.schema = merged[i], c->exclude.names = excluded;
        int id = merged[i] ? schema_rule(c, merged[i], sub) : schema_rule(c, br, sub);
        c->exclude.schema = c->exclude.names = NULL;
        cJSON_Delete(excluded);
        if (id < 0) rc = -1;
        else gbuf_printf(b, "%s%s-%d", i ? " | " : "", c->name, id);
    }
    gbuf_puts(b, ")");
    for (int i = 0; merged && i < n; i++) cJSON_Delete(merged[i]);
    free(merged);
    cJSON_Delete(rest);
    return rc;
}

/* Whether JSON value v is of `type` (a name or a list of them; NULL: any). */
static bool of_type(const cJSON *v, const cJSON *type) {
    if (!type) return true;
    if (cJSON_IsArray(type)) {
        const cJSON *t;
        cJSON_ArrayForEach(t, type) if (of_type(v, t)) return true;
        return false;
    }
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    return !strcmp(t, "string")    ? cJSON_IsString(v)
           : !strcmp(t, "number")  ? cJSON_IsNumber(v)
           : !strcmp(t, "integer") ? cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble)
           : !strcmp(t, "boolean") ? cJSON_IsBool(v)
           : !strcmp(t, "null")    ? cJSON_IsNull(v)
           : !strcmp(t, "object")  ? cJSON_IsObject(v)
           : !strcmp(t, "array")   ? cJSON_IsArray(v)
                                   : true;
}

static int schema_body(conv *c, const cJSON *s, const char *path, gbuf *b) {
    if (cJSON_IsBool(s)) {
        if (cJSON_IsFalse(s)) return refuse(c, path, "the schema '%s' admits no value", "false");
        c->need_value = true;
        gbuf_printf(b, "%s-value", c->name);
        return 0;
    }
    if (!cJSON_IsObject(s)) return refuse(c, path, "%s", "a schema must be an object or a boolean");
    if (check_keywords(c, s, path)) return -1;
    const cJSON *ref = get(s, "$ref"), *any = get(s, "anyOf"), *one = get(s, "oneOf"), *all = get(s, "allOf"),
                *en = get(s, "enum"), *type = get(s, "type");
    const cJSON *cst = cJSON_GetObjectItemCaseSensitive(s, "const"); /* null is a value here */
    int rc = 0;
    if (all) {
        if (!cJSON_IsArray(all)) return refuse(c, path, "'%s' must be an array", "allOf");
        cJSON *m = cJSON_Duplicate(s, true);
        cJSON_DeleteItemFromObjectCaseSensitive(m, "allOf");
        const cJSON *x;
        cJSON_ArrayForEach(x, all) if (!rc) rc = merge_into(c, m, x, path, 0);
        if (!rc) rc = schema_body(c, m, path, b);
        cJSON_Delete(m);
    } else if (ref) {
        bool alone = true;
        const cJSON *k;
        cJSON_ArrayForEach(k, s) alone &=
            !strcmp(k->string, "$ref") || !strcmp(k->string, "nullable") || is_annotation(k->string);
        if (!cJSON_IsString(ref)) return refuse(c, path, "'%s' must be a string", "$ref");
        if (alone) {
            int id = ref_rule(c, ref->valuestring, path);
            if (id < 0) return -1;
            gbuf_printf(b, "%s-%d", c->name, id);
        } else { /* keywords beside $ref apply too (draft 2019 on): the target merged in, as allOf */
            cJSON *m = cJSON_CreateObject();
            rc = merge_into(c, m, s, path, 0);
            if (!rc) rc = schema_body(c, m, path, b);
            cJSON_Delete(m);
        }
    } else if (any || one) {
        rc = branches_body(c, s, any ? any : one, any ? "anyOf" : "oneOf", path, b);
    } else if (cst || en) {
        if (en && (!cJSON_IsArray(en) || !cJSON_GetArraySize(en)))
            return refuse(c, path, "'%s' must be a non-empty array", "enum");
        gbuf_puts(b, "(");
        if (cst) json_literal(b, cst);
        const cJSON *v, *values = cst ? NULL : en;
        int i = 0;
        cJSON_ArrayForEach(v, values) {
            if (!of_type(v, type)) continue; /* a value the type rules out is not valid */
            if (i++) gbuf_puts(b, " | ");
            json_literal(b, v);
        }
        gbuf_puts(b, ")");
        if (en && !i) return refuse(c, path, "'enum' holds no value of the schema's '%s'", "type");
    } else if (cJSON_IsArray(type)) {
        const cJSON *t;
        int i = 0;
        gbuf_puts(b, "(");
        cJSON_ArrayForEach(t, type) {
            if (!cJSON_IsString(t)) return refuse(c, path, "'%s' must list type names", "type");
            if (i++) gbuf_puts(b, " | ");
            if (type_body(c, s, t->valuestring, path, b)) return -1;
        }
        gbuf_puts(b, ")");
    } else if (type) {
        if (!cJSON_IsString(type)) return refuse(c, path, "'%s' must be a string or a list of them", "type");
        rc = type_body(c, s, type->valuestring, path, b);
    } else {
        const char *t = implied_type(s);
        if (t) rc = type_body(c, s, t, path, b);
        else {
            c->need_value = true;
            gbuf_printf(b, "%s-value", c->name);
        }
    }
    return rc;
}

static int schema_rule(conv *c, const cJSON *s, const char *path) {
    if (++c->depth > MAX_DEPTH) return refuse(c, path, "%s", "subschemas nested over 64 deep");
    int id = c->n_rules++;
    gbuf body = {0};
    int rc = schema_body(c, s, path, &body);
    if (!rc) gbuf_printf(c->out, "%s-%d ::= %s\n", c->name, id, body.p ? body.p : "\"\"");
    gbuf_free(&body);
    c->depth--;
    return rc ? -1 : id;
}

int json_schema_rules(const cJSON *schema, const char *name, gbuf *out, loom_err *err) {
    conv c = {.root = schema, .name = name, .out = out, .err = err};
    int id = schema_rule(&c, schema, "");
    if (id >= 0) {
        gbuf_printf(out, "%s ::= %s-%d\n", name, name, id);
        emit_shared(&c);
    }
    for (int i = 0; i < c.n_refs; i++) free(c.refs[i].ptr);
    if (id >= 0 && out->oom) return loom_errf(err, "json_schema: out of memory");
    return id < 0 ? -1 : 0;
}

char *json_schema_to_gbnf(const cJSON *schema, loom_err *err) {
    gbuf b = {0};
    gbuf_puts(&b, "root ::= schema\n");
    if (json_schema_rules(schema, "schema", &b, err)) {
        gbuf_free(&b);
        return NULL;
    }
    return b.p;
}

/* The grammar engine (src/grammar): GBNF compiled to bytes, the matcher's language, and token
 * masks.
 * - Languages: each grammar accepts exactly the strings listed as in it, byte by byte, including
 *   characters of 2-4 UTF-8 bytes split across tokens.
 * - Errors: undefined rules, a missing root, left recursion and bad syntax are refused by name.
 * - Masks: along random walks through grammars, on the real vocabularies in
 *   tests/data/tokenizers, the mask equals asking the matcher about every token one at a time
 *   (which walks the token's bytes through the automaton directly), and a token the mask allows
 *   is accepted.
 * - Regular expressions: for each pattern, the converted grammar accepts a string exactly when
 *   PCRE2 (the library, anchored at both ends) matches it whole, over strings from the pattern's
 *   alphabet; unsupported constructs are refused by name and offset.
 * - JSON Schema numbers: integer ranges accept exactly the integers between their bounds, and
 *   number ranges exactly the decimals between theirs, over every value near the bounds;
 *   unsupported keywords are refused naming the keyword and where it stands. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "grammar/grammar.h"
#include "text/tokenizer.h"

#define TOKDIR LOOM_SOURCE_DIR "/tests/data/tokenizers/"

/* A vocabulary of the 256 single bytes, then EOS (id 256). */
static grammar_vocab *byte_vocab(void) {
    static char store[256];
    const char *bytes[257];
    int lens[257];
    for (int i = 0; i < 256; i++) store[i] = (char)i, bytes[i] = &store[i], lens[i] = 1;
    bytes[256] = "", lens[256] = -1;
    int32_t eos = 256;
    loom_err err = {{0}};
    grammar_vocab *v = grammar_vocab_new(257, bytes, lens, &eos, 1, &err);
    CHECK(v, "%s", err.msg);
    return v;
}

/* Whether g accepts s whole (every byte allowed, then EOS). */
static bool accepts(grammar *g, const char *s) {
    loom_err err = {{0}};
    grammar_matcher *m = grammar_matcher_new(g, &err);
    bool ok = m != NULL;
    for (const unsigned char *p = (const unsigned char *)s; ok && *p; p++) ok = !grammar_matcher_accept(m, *p, &err);
    ok = ok && grammar_matcher_allows(m, 256);
    grammar_matcher_free(m);
    return ok;
}

/* g (made from `what`, or NULL with err) accepts each of in and refuses each of out
 * (NULL-terminated); takes g's reference. */
static void check_language(grammar *g, const char *what, const loom_err *err, const char *const *in,
                           const char *const *out) {
    CHECK(g, "%s: %s", what, err->msg);
    if (!g) return;
    for (; *in; in++) CHECK(accepts(g, *in), "%s should accept \"%s\"", what, *in);
    for (; *out; out++) CHECK(!accepts(g, *out), "%s should refuse \"%s\"", what, *out);
    grammar_unref(g);
}

static void language(grammar_vocab *v, const char *gbnf, const char *const *in, const char *const *out) {
    loom_err err = {{0}};
    check_language(grammar_compile(gbnf, v, &err), gbnf, &err, in, out);
}

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_languages(grammar_vocab *v) {
    language(v, "root ::= \"a\" [b-d]* \"e\"", L("ae", "abe", "abcdde"), L("a", "af", "abce!", ""));
    language(v, "root ::= (\"ab\" | \"c\")+ \"!\"", L("ab!", "c!", "abcab!"), L("!", "a!", "abc"));
    language(v, "root ::= \"x\"{2,3}", L("xx", "xxx"), L("x", "xxxx"));
    language(v, "root ::= \"x\"{,2} \"y\"{2,}", L("yy", "xyy", "xxyyyy"), L("y", "xxxyy"));
    language(v, "root ::= [^\"\\\\]+", L("h\xC3\xA9llo \xE2\x86\x92", "\xF0\x9F\x98\x80"),
             L("a\"", "\\", "\xC3", "\xED\xA0\x80"));
    language(v, "root ::= [\xCE\xB1-\xCF\x89]{2}", L("\xCE\xB1\xCE\xB2", "\xCF\x89\xCF\x89"), L("ab", "\xCE\xB1"));
    language(v, "root ::= . .", L("ab", "\xE2\x82\xAC\xF0\x9F\x98\x80"), L("a", "abc"));
    language(v, "root ::= (\"a\"?)* \"b\"  # nullable repetition\n", L("b", "aab"), L("a", "ba"));
    language(v, "root ::= item (\",\" item)*\nitem ::= [0-9]+ | \"[\" root? \"]\"", L("1", "1,[2,[]],3"),
             L("1,", "[", "1,,2"));
    language(v, "root ::= \"\\x41\\u00e9\\n\" [\\t-\\r]", L("A\xC3\xA9\n\t", "A\xC3\xA9\n\r"),
             L("A\xC3\xA9\n ", "A\n\t"));
    language(v, "root ::= \"\" | \"a\"", L("", "a"), L("aa"));
}

static void refused(grammar_vocab *v, const char *gbnf, const char *needle) {
    loom_err err = {{0}};
    grammar *g = grammar_compile(gbnf, v, &err);
    CHECK(!g && strstr(err.msg, needle), "%s: expected an error naming \"%s\", got \"%s\"", gbnf, needle,
          g ? "(compiled)" : err.msg);
    grammar_unref(g);
}

static void test_errors(grammar_vocab *v) {
    refused(v, "root ::= item", "rule 'item' is used but not defined");
    refused(v, "start ::= \"a\"", "no rule named 'root'");
    refused(v, "root ::= root \"a\" | \"b\"", "rule 'root' is left-recursive");
    refused(v, "root ::= x \"a\"\nx ::= y?\ny ::= root", "left-recursive");
    refused(v, "root ::= \"a\"\nroot ::= \"b\"", "rule 'root' is defined twice");
    refused(v, "root ::= \"a", "unterminated");
    refused(v, "root ::= \"\\q\"", "unknown escape");
    refused(v, "root ::= [z-a]", "runs backwards");
    refused(v, "root ::= \"a\"{3,2}", "repetition");
    refused(v, "root ::= \"a\"{20000}", "over 10000");
    refused(v, "root ::= (\"a\"", "expected ')'");
    refused(v, "root = \"a\"", "expected '::='");
}

/* The mask against one-token-at-a-time questions, along random walks. */
static void mask_matches_allows(const char *tok_file, const char *gbnf, int walks, int steps) {
    loom_err err = {{0}};
    tokenizer *t = tokenizer_load_file(tok_file, &err);
    CHECK(t, "%s", err.msg);
    if (!t) return;
    int n = tokenizer_vocab_size(t);
    char **bytes = calloc((size_t)n, sizeof *bytes);
    int *lens = calloc((size_t)n, sizeof *lens);
    for (int i = 0; i < n; i++) {
        char buf[1024];
        lens[i] = tokenizer_token_bytes(t, i, buf, sizeof buf);
        bytes[i] = malloc(lens[i] > 0 ? (size_t)lens[i] : 1);
        if (lens[i] > 0) memcpy(bytes[i], buf, (size_t)lens[i]);
    }
    int32_t eos = tokenizer_token_id(t, "</s>") >= 0 ? tokenizer_token_id(t, "</s>") : n - 1;
    grammar_vocab *v = grammar_vocab_new(n, (const char *const *)bytes, lens, &eos, 1, &err);
    grammar *g = v ? grammar_compile(gbnf, v, &err) : NULL;
    CHECK(g, "%s", err.msg);
    uint32_t *mask = calloc((size_t)(n + 31) / 32, sizeof *mask);
    uint64_t rng = 12345;
    int mismatches = 0, allowed_total = 0;
    for (int w = 0; g && w < walks; w++) {
        grammar_matcher *m = grammar_matcher_new(g, &err);
        for (int s = 0; m && s < steps && !grammar_matcher_done(m); s++) {
            CHECK(!grammar_matcher_mask(m, mask, &err), "%s: %s", gbnf, err.msg);
            int n_allowed = 0;
            int32_t *ok = malloc(sizeof *ok * (size_t)n);
            for (int i = 0; i < n; i++) {
                bool in_mask = mask[i >> 5] >> (i & 31) & 1;
                if (in_mask != grammar_matcher_allows(m, i) && mismatches++ < 5)
                    CHECK(false, "%s, walk %d step %d: token %d is %s by the mask but not by the matcher", gbnf, w, s,
                          i, in_mask ? "allowed" : "refused");
                if (in_mask) ok[n_allowed++] = i;
            }
            allowed_total += n_allowed;
            CHECK(n_allowed > 0, "%s: a walk reached a state that allows no token", gbnf);
            if (!n_allowed) {
                free(ok);
                break;
            }
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            int32_t pick = ok[(rng >> 33) % (uint64_t)n_allowed];
            free(ok);
            if (pick == eos) break;
            CHECK(!grammar_matcher_accept(m, pick, &err), "%s", err.msg);
        }
        grammar_matcher_free(m);
    }
    CHECK(mismatches == 0, "%s on %s: %d mismatches", gbnf, tok_file, mismatches);
    CHECK(allowed_total > 0, "nothing was allowed");
    free(mask);
    grammar_unref(g);
    grammar_vocab_free(v);
    for (int i = 0; i < n; i++) free(bytes[i]);
    free(bytes);
    free(lens);
    tokenizer_free(t);
}

static const char json_gbnf[] =
    "root ::= object\n"
    "value ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
    "array ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
    "number ::= \"-\"? ([0-9] | [1-9] [0-9]{1,15}) (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})? ws\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

/* The grammar of a regex against PCRE2 over every string of up to 4 characters of an alphabet. */
static void regex_vs_pcre2(grammar_vocab *v, const char *pattern, const char *alphabet) {
    loom_err err = {{0}};
    char *gbnf = regex_to_gbnf(pattern, &err);
    grammar *g = gbnf ? grammar_compile(gbnf, v, &err) : NULL;
    CHECK(g, "regex %s: %s", pattern, err.msg);
    char anchored[256];
    snprintf(anchored, sizeof anchored, "^(?:%s)$", pattern);
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)anchored, PCRE2_ZERO_TERMINATED, 0, &ec, &eo, NULL);
    pcre2_match_data *md = re ? pcre2_match_data_create_from_pattern(re, NULL) : NULL;
    int n = (int)strlen(alphabet), total = 1, bad = 0;
    for (int len = 1; len <= 4; len++) total = total * n + 1;
    for (int k = 0; g && md && k < total; k++) { /* k in mixed radix: a string of up to 4 letters */
        char s[8];
        int len = 0;
        for (int x = k; x > 0 && len < 4; x = (x - 1) / n) s[len++] = alphabet[(x - 1) % n];
        s[len] = 0;
        bool want = pcre2_match(re, (PCRE2_SPTR)s, (size_t)len, 0, 0, md, NULL) >= 0;
        if (accepts(g, s) != want && bad++ < 3) CHECK(false, "regex %s on \"%s\": PCRE2 says %d", pattern, s, want);
    }
    CHECK(!bad, "regex %s: %d strings disagree with PCRE2", pattern, bad);
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    grammar_unref(g);
    free(gbnf);
}

static void test_regex(grammar_vocab *v) {
    regex_vs_pcre2(v, "a+b?", "ab");
    regex_vs_pcre2(v, "(ab|c)*d", "abcd");
    regex_vs_pcre2(v, "[a-c][^a]{1,2}", "abcx");
    regex_vs_pcre2(v, "\\d\\w?\\s*", "1a _\t");
    regex_vs_pcre2(v, "x{2,}|y{0,1}z", "xyz");
    loom_err err = {{0}};
    char *gbnf = regex_to_gbnf("y{,1}z", &err); /* Python reads {,m} as {0,m}; PCRE2 before 10.43 as text */
    if (gbnf) language(v, gbnf, L("z", "yz"), L("yyz", "y{,1}z"));
    CHECK(gbnf, "%s", err.msg);
    free(gbnf);
    regex_vs_pcre2(v, "(?:a|)(?P<n>b+?)c?", "abc");
    regex_vs_pcre2(v, "\\.[.]\\x41\\D", "a.A1");
    static const struct {
        const char *pattern, *error;
    } bad[] = {{"(?=a)b", "lookahead '(?=' is not supported (at offset 0)"},
               {"a(?<!b)", "lookbehind"},
               {"(a)\\1", "backreference is not supported (at offset 3)"},
               {"\\bword", "word boundary"},
               {"a^b", "anchor inside the pattern"},
               {"(?i)abc", "inline flag"},
               {"a**", "multiple repeat"},
               {"(ab", "expected ')'"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        loom_err err = {{0}};
        char *gbnf = regex_to_gbnf(bad[i].pattern, &err);
        CHECK(!gbnf && strstr(err.msg, bad[i].error), "regex %s: got \"%s\"", bad[i].pattern, gbnf ? gbnf : err.msg);
        free(gbnf);
    }
}

/* The grammar of a one-schema document. */
static grammar *schema_grammar(grammar_vocab *v, const char *schema, loom_err *err) {
    cJSON *j = cJSON_Parse(schema);
    char *gbnf = j ? json_schema_to_gbnf(j, err) : NULL;
    grammar *g = gbnf ? grammar_compile(gbnf, v, err) : NULL;
    cJSON_Delete(j);
    free(gbnf);
    return g;
}

static void integer_range(grammar_vocab *v, long lo, long hi, bool has_lo, bool has_hi) {
    char schema[160], s[32];
    snprintf(schema, sizeof schema, "{\"type\": \"integer\"%s%ld%s%ld}",
             has_lo ? ", \"minimum\": " : ", \"x-lo\": ", lo, has_hi ? ", \"maximum\": " : ", \"x-hi\": ", hi);
    loom_err err = {{0}};
    grammar *g = schema_grammar(v, schema, &err);
    CHECK(g, "%s: %s", schema, err.msg);
    int bad = 0;
    for (long x = lo - 120; g && x <= hi + 120; x++) {
        snprintf(s, sizeof s, "%ld", x);
        bool want = (!has_lo || x >= lo) && (!has_hi || x <= hi);
        if (accepts(g, s) != want && bad++ < 3) CHECK(false, "%s on %s: want %d", schema, s, want);
    }
    CHECK(!bad, "%s: %d values wrong", schema, bad);
    CHECK(!g || !accepts(g, "007"), "%s took a leading zero", schema);
    grammar_unref(g);
}

/* number in [lo, hi] (integer bounds, each perhaps exclusive) against decimals in steps of 0.25 */
static void number_range(grammar_vocab *v, const char *bounds, double lo, double hi, bool lo_ex, bool hi_ex) {
    char schema[160], s[32];
    snprintf(schema, sizeof schema, "{\"type\": \"number\", %s}", bounds);
    loom_err err = {{0}};
    grammar *g = schema_grammar(v, schema, &err);
    CHECK(g, "%s: %s", schema, err.msg);
    int bad = 0;
    for (double x = lo - 3; g && x <= hi + 3; x += 0.25) {
        snprintf(s, sizeof s, x == (long)x ? "%.0f" : "%.2f", x);
        bool want = (lo_ex ? x > lo : x >= lo) && (hi_ex ? x < hi : x <= hi);
        if (accepts(g, s) != want && bad++ < 3) CHECK(false, "%s on %s: want %d", schema, s, want);
    }
    CHECK(!bad, "%s: %d values wrong", schema, bad);
    grammar_unref(g);
}

/* Properties with the same length bounds share one rule: JSONSchemaBench's Github_medium/o9913
 * repeats "maxLength": 32767 (cut to 10000) 28 times, which as 28 chains of 10000 helper rules,
 * each looked up by name among all the others, compiled for hours. The lengths still hold. */
static void long_strings(grammar_vocab *v) {
    gbuf schema = {0};
    gbuf_puts(&schema, "{\"type\": \"object\", \"properties\": {");
    for (int i = 0; i < 40; i++)
        gbuf_printf(&schema, "%s\"p%d\": {\"type\": \"string\", \"maxLength\": 32767}", i ? ", " : "", i);
    gbuf_puts(&schema,
              ", \"short\": {\"type\": \"string\", \"minLength\": 2, \"maxLength\": 3}}, \"required\": [\"short\"]}");
    loom_err err = {{0}};
    cJSON *j = cJSON_Parse(schema.p);
    char *gbnf = j ? json_schema_to_gbnf(j, &err) : NULL;
    const char *first = gbnf ? strstr(gbnf, "{0,10000}") : NULL;
    CHECK(first && !strstr(first + 1, "{0,10000}"), "40 strings of maxLength 32767: %s",
          gbnf ? "not one shared rule" : err.msg);
    grammar *g = gbnf ? grammar_compile(gbnf, v, &err) : NULL;
    CHECK(g != NULL, "40 long strings: %s", err.msg);
    if (g) {
        static const char *const in[] = {"{\"short\": \"ab\"}", "{\"p0\": \"\", \"short\": \"abc\"}", NULL};
        static const char *const out[] = {"{\"short\": \"a\"}", "{\"short\": \"abcd\"}", NULL};
        for (int i = 0; in[i]; i++) CHECK(accepts(g, in[i]), "long strings: %s refused", in[i]);
        for (int i = 0; out[i]; i++) CHECK(!accepts(g, out[i]), "long strings: %s accepted", out[i]);
    }
    grammar_unref(g);
    cJSON_Delete(j);
    free(gbnf);
    free(schema.p);
}

/* A schema's grammar accepts each of in and refuses each of out (NULL-terminated). */
static void schema_language(grammar_vocab *v, const char *schema, const char *const *in, const char *const *out) {
    loom_err err = {{0}};
    check_language(schema_grammar(v, schema, &err), schema, &err, in, out);
}

/* Keys past the declared properties are none of them; a oneOf told apart by required
 * properties keeps the others' names out of extra keys too (JSONSchemaBench's Glaive area
 * calculators wrote {"base": 3, "side_length": 2} under branches requiring one each). */
static void object_keys(grammar_vocab *v) {
    schema_language(
        v,
        "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}, "
        "\"additionalProperties\": {\"type\": \"string\"}}",
        (const char *const[]){"{\"a\": 1}", "{\"b\": \"x\"}", "{\"a\": 1, \"ab\": \"x\"}", "{\"\": \"x\"}", NULL},
        (const char *const[]){"{\"a\": \"x\"}", "{\"a\": 1, \"a\": \"x\"}", "{\"\\u0061\": \"x\"}", NULL});
    schema_language(v,
                    "{\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"integer\"}, \"y\": "
                    "{\"type\": \"integer\"}}, \"oneOf\": [{\"required\": [\"x\"]}, {\"required\": [\"y\"]}]}",
                    (const char *const[]){"{\"x\": 1}", "{\"y\": 2}", NULL},
                    (const char *const[]){"{\"x\": 1, \"y\": 2}", "{\"y\": 2, \"x\": 1}", "{}", NULL});
    /* draft 4's name fragments (JSONSchemaBench's Github_easy/o35904 was read as the root) */
    schema_language(v,
                    "{\"definitions\": {\"d\": {\"id\": \"#drive\", \"type\": \"object\", \"properties\": {\"n\": "
                    "{\"type\": \"integer\"}}, \"required\": [\"n\"]}}, \"type\": \"object\", \"properties\": "
                    "{\"jump\": {\"$ref\": \"#drive\"}}}",
                    (const char *const[]){"{\"jump\": {\"n\": 1}}", "{}", NULL},
                    (const char *const[]){"{\"jump\": {}}", "{\"jump\": {\"jump\": {\"n\": 1}}}", NULL});
    schema_language(v, "{\"oneOf\": [{\"type\": \"string\"}, {\"type\": \"integer\"}, {\"const\": true}]}",
                    (const char *const[]){"\"s\"", "3", "true", NULL}, (const char *const[]){"false", "null", NULL});
}

static void test_schema(grammar_vocab *v) {
    object_keys(v);
    integer_range(v, -7, 13, true, true);
    integer_range(v, 95, 1234, true, true);
    integer_range(v, -1000, -999, true, true);
    integer_range(v, 0, 0, true, true);
    integer_range(v, 5, 0, true, false);
    integer_range(v, 0, -3, false, true);
    integer_range(v, 19, 20001, true, true);
    number_range(v, "\"minimum\": 0, \"maximum\": 1", 0, 1, false, false);
    number_range(v, "\"exclusiveMinimum\": -2, \"exclusiveMaximum\": 3", -2, 3, true, true);
    number_range(v, "\"minimum\": 10, \"exclusiveMaximum\": 12", 10, 12, false, true);
    number_range(v, "\"minimum\": -5, \"maximum\": -1, \"exclusiveMaximum\": -2", -5, -2, false, true);
    long_strings(v);
    static const struct {
        const char *schema, *error;
    } bad[] = {
        {"{\"type\": \"object\", \"propertyNames\": {\"maxLength\": 3}}", "'propertyNames' is not supported (at /)"},
        {"{\"properties\": {\"a\": {\"type\": \"integer\", \"multipleOf\": 3}}}",
         "'multipleOf' is not supported (at /properties/a)"},
        {"{\"type\": \"array\", \"uniqueItems\": true}", "'uniqueItems' is not supported"},
        {"{\"type\": \"string\", \"format\": \"idn-email\"}", "'format' 'idn-email' is not supported"},
        {"{\"type\": \"number\", \"minimum\": 0.5}", "'minimum' that is not an integer"},
        {"{\"$ref\": \"#/$defs/missing\"}", "names nothing"},
        {"{\"$ref\": \"other.json#/x\"}", "another document"},
        {"{\"not\": {\"type\": \"null\"}}", "'not' is not supported"},
        {"{\"type\": \"integer\", \"minimum\": 5, \"maximum\": 4}", "no number lies between"},
        {"{\"type\": \"string\", \"pattern\": \"(?=x)\"}", "lookahead"},
        {"{\"allOf\": [{\"type\": \"string\"}, {\"type\": \"integer\"}]}", "'allOf' combines different 'type'"},
        {"false", "the schema 'false' admits no value"},
        {"{\"oneOf\": [{\"properties\": {\"cat\": {\"type\": \"string\"}}}, {\"properties\": {\"dog\": {}}}]}",
         "'oneOf' branches 0 and 1 could both match"},
        {"{\"oneOf\": [{\"type\": \"number\"}, {\"type\": \"integer\"}]}", "could both match"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        loom_err err = {{0}};
        cJSON *j = cJSON_Parse(bad[i].schema);
        char *gbnf = json_schema_to_gbnf(j, &err);
        CHECK(!gbnf && strstr(err.msg, bad[i].error) && strstr(err.msg, "json_schema: "), "%s: got \"%s\"",
              bad[i].schema, gbnf ? "a grammar" : err.msg);
        free(gbnf);
        cJSON_Delete(j);
    }
}

int main(void) {
    grammar_vocab *v = byte_vocab();
    if (v) {
        test_languages(v);
        test_errors(v);
        test_regex(v);
        test_schema(v);
    }
    grammar_vocab_free(v);
    const char *files[] = {TOKDIR "llama2/tokenizer.json", TOKDIR "phi-2/tokenizer.json"};
    for (int f = 0; f < 2; f++) {
        mask_matches_allows(files[f], json_gbnf, 4, 40);
        mask_matches_allows(files[f], "root ::= \"caf\xC3\xA9 \" [\xE4\xB8\x80-\xE9\xBF\xBF]{1,3} \"!\"", 3, 10);
        mask_matches_allows(files[f], "root ::= (\"yes\" | \"no\" | \"maybe\") \".\"", 3, 10);
    }
    return check_done();
}

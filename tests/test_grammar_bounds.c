/* The grammar layer's bounds (issue 49): no grammar a request may send makes the matcher's work
 * or memory grow without bound.
 * - Ambiguity: GBNF whose 2 to 5 alternatives match the same letters at every nesting level, and
 *   the JSON Schema whose two overlapping anyOf branches double the parses at every '[', either
 *   go on or end with the "too ambiguous" error within 64 tokens, and the matcher's bytes stay
 *   under MATCHER_BYTES_MAX throughout.
 * - Cancellation: with its stop flag up, a heavy operation ends early, saying so.
 * - Long walks: 320,000 brackets of two kinds, 20 deep, whose stacks are nearly all new, make the
 *   matcher forget the stacks it no longer stands on, and the mask still equals asking the
 *   matcher token by token afterwards.
 * - Size: a grammar whose repetitions expand past the element bound is refused at compile time.
 * - The cache: 200 distinct grammars, their masks computed as they are used, leave the cache
 *   within its byte budget after every lookup, and a grammar over the whole budget is not kept. */
#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "grammar/grammar.h"

#define EOS 272
/* the matcher's bound: its nodes (262,144 at most, with their table), configs, steps and items
 * (docs/DESIGN.md, "Structured output"); far above what any of these grammars needs but the
 * ambiguous ones */
#define MATCHER_BYTES_MAX ((size_t)64 << 20)

/* Every byte, then runs of 'a' and '[' of 2, 4, 8 and 16, then EOS. */
static grammar_vocab *vocab(void) {
    static char store[256], runs[8][17];
    const char *bytes[EOS + 1];
    int lens[EOS + 1];
    for (int i = 0; i < 256; i++) store[i] = (char)i, bytes[i] = &store[i], lens[i] = 1;
    for (int k = 0; k < 8; k++) {
        int n = 2 << (k % 4);
        memset(runs[k], k < 4 ? 'a' : '[', (size_t)n);
        bytes[256 + k] = runs[k], lens[256 + k] = n;
    }
    for (int i = 264; i < EOS; i++) bytes[i] = "", lens[i] = -1; /* never produced */
    bytes[EOS] = "", lens[EOS] = -1;
    int32_t eos = EOS;
    loom_err err = {{0}};
    grammar_vocab *v = grammar_vocab_new(EOS + 1, bytes, lens, &eos, 1, &err);
    CHECK(v, "%s", err.msg);
    return v;
}

/* Feeds token `tok` up to 64 times, asking for the mask before each (with_masks) or only
 * whether the token may come (the server's greedy path): the walk ends with the "too ambiguous"
 * error, or goes on, never another way; the matcher's bytes stay bounded. Returns the tokens
 * taken, *most the matcher's bytes at most. */
static int walk(grammar *g, const char *what, int32_t tok, bool with_masks, size_t *most) {
    loom_err err = {{0}};
    grammar_matcher *m = grammar_matcher_new(g, &err);
    CHECK(m, "%s: %s", what, err.msg);
    uint32_t mask[(EOS + 32) / 32];
    int taken = 0;
    bool failed = false;
    *most = 0;
    for (; m && taken < 64 && !failed; taken++) {
        if (with_masks) failed = grammar_matcher_mask(m, mask, &err) != 0;
        else if (!grammar_matcher_allows(m, tok)) failed = grammar_matcher_fault(m, &err) != 0 || !strcpy(err.msg, "?");
        failed = failed || grammar_matcher_accept(m, tok, &err);
        size_t bytes = grammar_matcher_bytes(m);
        *most = bytes > *most ? bytes : *most;
    }
    CHECK(!failed || strstr(err.msg, "too ambiguous"), "%s: ended with '%s'", what, err.msg);
    CHECK(*most <= MATCHER_BYTES_MAX, "%s: the matcher held %zu bytes", what, *most);
    grammar_matcher_free(m);
    return failed ? taken - 1 : taken;
}

static void ambiguous(grammar_vocab *v, const char *what, const char *gbnf, int32_t tok, bool must_end) {
    loom_err err = {{0}};
    grammar *g = grammar_compile(gbnf, v, &err);
    CHECK(g, "%s: %s", what, err.msg);
    if (!g) return;
    size_t most[2];
    int taken[2];
    for (int masks = 0; masks < 2; masks++) {
        taken[masks] = walk(g, what, tok, masks, &most[masks]);
        CHECK(!must_end || taken[masks] < 64, "%s: 64 tokens went through%s", what, masks ? " with masks" : "");
    }
    printf("%-42s tokens taken: %2d checking, %2d masked; MiB at most: matcher %4.1f, %4.1f, grammar %4.1f\n", what,
           taken[0], taken[1], most[0] / 1048576.0, most[1] / 1048576.0, grammar_bytes(g) / 1048576.0);
    grammar_unref(g);
}

static void ambiguity(grammar_vocab *v) {
    for (int alts = 2; alts <= 5; alts++) {
        char gbnf[512], what[64];
        int n = snprintf(gbnf, sizeof gbnf, "root ::= s\ns ::= ");
        for (int a = 0; a < alts; a++) n += snprintf(gbnf + n, sizeof gbnf - (size_t)n, "[a-zA-Z ] s \"%d\" | ", a);
        snprintf(gbnf + n, sizeof gbnf - (size_t)n, "\"\"\n");
        for (int k = 0; k < 4; k += 3) { /* tokens of 2 and 16 letters */
            snprintf(what, sizeof what, "GBNF, %d alternatives, %2d-letter tokens", alts, 2 << k);
            ambiguous(v, what, gbnf, 256 + k, true);
        }
    }
    const char *schema = "{\"anyOf\":[{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}},"
                         "{\"type\":\"array\",\"items\":{\"$ref\":\"#\"},\"maxItems\":7}]}";
    loom_err err = {{0}};
    cJSON *s = cJSON_Parse(schema);
    char *gbnf = s ? json_schema_to_gbnf(s, &err) : NULL;
    CHECK(gbnf, "the anyOf schema: %s", err.msg);
    if (gbnf) {
        ambiguous(v, "JSON Schema, overlapping anyOf, '['", gbnf, '[', true);
        ambiguous(v, "JSON Schema, overlapping anyOf, '[' x 16", gbnf, 263, true);
    }
    free(gbnf);
    cJSON_Delete(s);
    /* unambiguous nesting goes on */
    ambiguous(v, "GBNF, nesting with one parse a level", "root ::= \"[\" root \"]\" | \"x\"", 263, false);
}

static void cancellation(grammar_vocab *v) {
    loom_err err = {{0}};
    grammar *g = grammar_compile("root ::= s\ns ::= [a-z] s \"0\" | [a-z] s \"1\" | \"\"", v, &err);
    grammar_matcher *m = g ? grammar_matcher_new(g, &err) : NULL;
    atomic_bool stop = true;
    if (m) {
        grammar_matcher_stop_on(m, &stop);
        /* 16 letters: 2^16 parses by the last, far past the units between two reads of the flag */
        CHECK(grammar_matcher_accept(m, 259, &err) && strstr(err.msg, "stopped"), "with the stop flag up: '%s'",
              err.msg);
        atomic_store(&stop, false);
        CHECK(!grammar_matcher_accept(m, 256, &err), "the flag down again, two letters: %s", err.msg);
    }
    grammar_matcher_free(m);
    grammar_unref(g);
}

/* Brackets of two kinds, 20 deep, the kinds spelling the bits of 0, 1, 2, ... with the lowest
 * outermost: every number's stacks are new, so past half its node bound the matcher must forget
 * the ones it left. */
static void long_walk(grammar_vocab *v) {
    enum { DEPTH = 20, NUMBERS = 8000 };
    loom_err err = {{0}};
    grammar *g = grammar_compile("root ::= item*\nitem ::= \"(\" item* \")\" | \"{\" item* \"}\"", v, &err);
    grammar_matcher *m = g ? grammar_matcher_new(g, &err) : NULL;
    CHECK(m, "%s", err.msg);
    uint32_t mask[(EOS + 32) / 32];
    bool failed = false;
    for (int i = 0; m && i < NUMBERS && !failed; i++) {
        if (i % 997 == 0) { /* the mask agrees with the matcher, token by token */
            CHECK(!grammar_matcher_mask(m, mask, &err), "number %d: %s", i, err.msg);
            int bad = 0;
            for (int t = 0; t <= EOS; t++) bad += (mask[t >> 5] >> (t & 31) & 1) != grammar_matcher_allows(m, t);
            CHECK(!bad, "number %d: the mask and the matcher disagree on %d tokens", i, bad);
        }
        for (int k = 0; k < 2 * DEPTH && !failed; k++) {
            int bit = (k < DEPTH ? i >> k : i >> (2 * DEPTH - 1 - k)) & 1;
            int32_t tok = k < DEPTH ? (bit ? '(' : '{') : (bit ? ')' : '}');
            failed = grammar_matcher_accept(m, tok, &err);
            CHECK(!failed, "number %d, bracket %d: %s", i, k, err.msg);
        }
    }
    CHECK(m && grammar_matcher_allows(m, EOS), "after %d numbers in brackets the grammar may not end", NUMBERS);
    printf("%d numbers in brackets %d deep: the matcher holds %.1f MiB at the end\n", NUMBERS, DEPTH,
           m ? grammar_matcher_bytes(m) / 1048576.0 : 0);
    grammar_matcher_free(m);
    grammar_unref(g);
}

/* the 1.4 KB body: 100 repetitions of 10000 characters, a million elements */
static void size_bound(grammar_vocab *v) {
    gbuf b = {0};
    gbuf_puts(&b, "root ::= ");
    for (int i = 0; i < 100; i++) gbuf_puts(&b, "[a-zA-Z ]{10000} ");
    gbuf_puts(&b, "\"x\"");
    loom_err err = {{0}};
    grammar *g = b.p ? grammar_compile(b.p, v, &err) : NULL;
    CHECK(!g && strstr(err.msg, "too large"), "100 repetitions of 10000 characters: '%s'", g ? "compiled" : err.msg);
    grammar_unref(g);
    gbuf_free(&b);
}

/* 200 grammars of 60 to 2050 elements, each walked 40 bytes (its masks computed) after its
 * lookup, through a cache of 1 MiB: at every lookup the cache is within its budget. */
static void cache_budget(grammar_vocab *v) {
    enum { BUDGET = 1 << 20 };
    loom_err err = {{0}};
    grammar_cache *c = grammar_cache_new(v, 64, BUDGET, &err);
    CHECK(c, "%s", err.msg);
    size_t most = 0;
    uint32_t mask[(EOS + 32) / 32];
    for (int i = 0; c && i < 200; i++) {
        char gbnf[128], text[64];
        snprintf(gbnf, sizeof gbnf, "root ::= \"case %d \" [a-z]{%d} \"!\"", i, 50 + i * 10);
        int len = snprintf(text, sizeof text, "case %d aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", i);
        grammar *g = grammar_cache_get(c, gbnf, &err);
        CHECK(g, "grammar %d: %s", i, err.msg);
        size_t held = grammar_cache_bytes(c);
        most = held > most ? held : most;
        grammar_matcher *m = g ? grammar_matcher_new(g, &err) : NULL;
        for (int k = 0; m && k < len && !grammar_matcher_mask(m, mask, &err); k++)
            CHECK(!grammar_matcher_accept(m, (uint8_t)text[k], &err), "grammar %d, byte %d: %s", i, k, err.msg);
        grammar_matcher_free(m);
        grammar_unref(g);
    }
    CHECK(most <= BUDGET, "the cache held %zu bytes after a lookup, over its %d", most, BUDGET);
    const char *huge = "root ::= [a-z]{10000} [a-z]{10000} [a-z]{10000}"; /* 30,000 elements, 1.2 MB */
    grammar *g = c ? grammar_cache_get(c, huge, &err) : NULL;
    CHECK(g && grammar_bytes(g) > BUDGET, "a grammar over the budget: %s", g ? "it is not" : err.msg);
    CHECK(c && grammar_cache_bytes(c) <= BUDGET, "a grammar over the whole budget was kept");
    printf("200 grammars through a cache of %d bytes: at most %zu held after a lookup\n", BUDGET, most);
    grammar_unref(g);
    grammar_cache_free(c);
}

int main(void) {
    grammar_vocab *v = vocab();
    if (!v) return check_done();
    ambiguity(v);
    cancellation(v);
    long_walk(v);
    size_bound(v);
    cache_budget(v);
    grammar_vocab_free(v);
    return check_done();
}

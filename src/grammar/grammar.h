/* Structured output: grammars that constrain generation to a language, and the token masks that
 * enforce them during decoding.
 *
 * Every constraint becomes GBNF text first (llama.cpp's grammar notation), one intermediate
 * form: JSON Schema (json_schema.c), regular expressions (regex.c), a list of choices, tool
 * calls in a model family's format (serve/tool_calls.c), or GBNF a client sends. gbnf.c
 * compiles it into a grammar over bytes (character classes become UTF-8 byte sequences), so
 * matching never needs to decode characters split across tokens. matcher.c runs it as a
 * pushdown automaton; mask.c turns a matcher's state into the set of tokens that may come next,
 * over a trie of the vocabulary's byte strings, with per-position masks precomputed as xgrammar
 * does.
 *
 * The GBNF accepted (a superset of llama.cpp's):
 *   rule ::= alternatives          names: [A-Za-z0-9_-]+; a rule's body runs to the next
 *                                  `name ::=` (newlines are whitespace); `root` is the start
 *   "literal"                      escapes \n \r \t \\ \" \' \[ \] \- \xHH \uHHHH \UHHHHHHHH;
 *                                  other characters are themselves (UTF-8)
 *   [a-z0-9_] [^"\\]               character classes (code points), ranges, negation, the same
 *                                  escapes
 *   .                              any code point
 *   name                           a rule
 *   ( ... )  a | b                 grouping, alternation (an empty alternative matches nothing)
 *   x* x+ x? x{n} x{n,} x{n,m} x{,m}   repetition
 *   # comment                      to the end of the line
 * No C library for this is installable (llguidance ships inside a Python wheel; xgrammar is C++
 * with no C API), so loom implements it. */
#ifndef LOOM_GRAMMAR_GRAMMAR_H
#define LOOM_GRAMMAR_GRAMMAR_H
#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loom.h"

/* A growing text buffer for the converters (gbuf.c). Out of memory sets oom, after which puts
 * do nothing; the caller checks oom once at the end. */
typedef struct gbuf {
    char *p; /* NUL-terminated while not oom */
    size_t len, cap;
    bool oom;
} gbuf;
void gbuf_put(gbuf *b, const char *s, size_t n);
void gbuf_puts(gbuf *b, const char *s);
void gbuf_printf(gbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s as a GBNF string literal, quotes included (every byte escaped as it must be). */
void gbuf_literal(gbuf *b, const char *s, size_t n);
void gbuf_free(gbuf *b);

/* ---- Converters to GBNF (json_schema.c, regex.c). Each appends rules to out; errors name the
 * keyword or the pattern's position and refuse what is not supported rather than ignore it. ---- */

/* The rules for JSON values valid against `schema` (a JSON Schema document; its $defs and
 * definitions are resolved for $ref), the schema's own rule named `name`, helper rules named
 * `name`-something so that schemas with distinct names share one grammar. Whitespace between
 * tokens is optional and bounded. Returns 0, or -1 with err: "json_schema: 'KEYWORD' ... (at
 * /json/pointer)". */
int json_schema_rules(const cJSON *schema, const char *name, gbuf *out, loom_err *err);
/* A whole grammar (root rule `root`) for schema; {"type": "object"} for any JSON object. */
char *json_schema_to_gbnf(const cJSON *schema, loom_err *err);
/* Rules for the strings a regular expression matches in full (Python `re.fullmatch` syntax as
 * JSON Schema and vLLM use it), the rule named `name`. Errors name the position. */
int regex_rules(const char *pattern, const char *name, gbuf *out, loom_err *err);
char *regex_to_gbnf(const char *pattern, loom_err *err);

/* ---- Grammars and matching (gbnf.c, matcher.c, mask.c) ---- */

/* A vocabulary's byte strings in a trie: token i is bytes[i] (what it adds to text mid-sequence;
 * len -1: a token no grammar may produce, such as a special token), eos the tokens that end a
 * sequence (allowed where the grammar may end). Built once per model. */
typedef struct grammar_vocab grammar_vocab;
grammar_vocab *grammar_vocab_new(int n, const char *const *bytes, const int *lens, const int32_t *eos, int n_eos,
                                 loom_err *err);
void grammar_vocab_free(grammar_vocab *v);
int grammar_vocab_size(const grammar_vocab *v);

/* A compiled grammar for one vocabulary. Immutable but for its caches of per-position masks,
 * which it guards itself, so matchers on several threads may share it. Refcounted: each
 * matcher holds a reference. Errors name the rule and the byte offset in gbnf. */
typedef struct grammar grammar;
grammar *grammar_compile(const char *gbnf, const grammar_vocab *v, loom_err *err);
grammar *grammar_ref(grammar *g);
void grammar_unref(grammar *g);

/* The bytes a grammar holds: its elements and rules, and the masks and states it has learned
 * (which grow with use, within their own bounds). */
size_t grammar_bytes(grammar *g);

/* Compiled grammars by their text (cache.c), at most `capacity` of them and `max_bytes` in all
 * (grammar_bytes plus the text), least recently used leaving first. grammar_cache_get returns a
 * reference (compiling on a miss), NULL with err for text that does not compile. Safe from
 * several threads. */
typedef struct grammar_cache grammar_cache;
grammar_cache *grammar_cache_new(const grammar_vocab *v, int capacity, size_t max_bytes, loom_err *err);
grammar *grammar_cache_get(grammar_cache *c, const char *gbnf, loom_err *err);
/* The bytes the cache's grammars hold now. */
size_t grammar_cache_bytes(grammar_cache *c);
void grammar_cache_free(grammar_cache *c);

/* One sequence's place in a grammar. Each operation's work is bounded (a grammar ambiguous
 * enough to need more fails the operation, naming why), and a set stop flag ends one early. */
typedef struct grammar_matcher grammar_matcher;
grammar_matcher *grammar_matcher_new(grammar *g, loom_err *err);
void grammar_matcher_free(grammar_matcher *m);
/* The flag (the request's cancellation) the operations read now and then; NULL: none. */
void grammar_matcher_stop_on(grammar_matcher *m, const atomic_bool *stop);
/* Whether token id may come next (EOS: where the grammar may end); false too when checking
 * stopped short, which grammar_matcher_fault then reports. */
bool grammar_matcher_allows(grammar_matcher *m, int32_t id);
/* 0 when the last operation decided; -1 with err when it stopped short (its bound of work, the
 * stop flag, memory). */
int grammar_matcher_fault(const grammar_matcher *m, loom_err *err);
/* Takes token id; -1 with err when the grammar does not allow it or checking failed (the
 * matcher is unchanged). */
int grammar_matcher_accept(grammar_matcher *m, int32_t id, loom_err *err);
/* allowed[(vocab + 31) / 32] gets bit i set for each token that may come next; -1 with err when
 * computing it failed (past the work bound, stopped, out of memory). */
int grammar_matcher_mask(grammar_matcher *m, uint32_t *allowed, loom_err *err);
/* The bytes the matcher holds (its stacks, states and masks), within a bound of its own. */
size_t grammar_matcher_bytes(const grammar_matcher *m);
/* The text so far is a whole sentence of the grammar, and nothing may follow. */
bool grammar_matcher_done(const grammar_matcher *m);

#endif

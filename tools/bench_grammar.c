/* `loom bench grammar`: what structured output costs a decoding step. A model's vocabulary
 * (--load-format dummy is enough: only the tokenizer matters) and a grammar (a JSON Schema, GBNF
 * or a regular expression) are walked token by token: spelling a sentence of the grammar
 * (--text FILE, e.g. a JSON document the schema allows) with the longest allowed token at each
 * step, as a model writing it would mostly do, or
 * taking a random allowed token each step (EOS only when nothing else is allowed; a sentence that
 * ends starts the next). Every step's mask is timed: first on a fresh
 * grammar (its per-position masks computed as positions are first reached, as the first request
 * with a schema pays), then the same walk on the same grammar (as later requests with the schema
 * find it in the server's cache). The single-token check the server's greedy path makes instead
 * of a mask is timed too. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "grammar/grammar.h"
#include "serve/vocab.h"
#include "util/alloc.h"
#include "util/file.h"

static void report(const char *what, double *ms, int n) {
    if (!n) return;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += ms[i];
    qsort(ms, (size_t)n, sizeof *ms, cli_by_double);
    printf("%-30s mean %8.3f ms  p50 %8.3f  p90 %8.3f  p99 %8.3f  max %8.3f  (%d steps)\n", what, sum / n, ms[n / 2],
           ms[n * 9 / 10], ms[n * 99 / 100], ms[n - 1], n);
}

typedef struct walk_buf {
    int vocab;
    const char *text; /* the sentence to spell (NULL: random tokens) */
    size_t text_len, at;
    char **bytes; /* [vocab] each token's bytes (loom_token_bytes), len[i] of them */
    int *len;
    uint32_t *allowed;
    int32_t *ok;
    double *mask_ms, *check_ms;
} walk_buf;

/* A walk of n tokens from seed, sentence after sentence, timing each step into b; -1 on failure. */
static int walk(grammar *g, const loom_model_info *info, int n, uint64_t seed, walk_buf *b, loom_err *err) {
    grammar_matcher *m = grammar_matcher_new(g, err);
    int steps = 0;
    for (; m && steps < n; steps++) {
        if (grammar_matcher_done(m)) {
            grammar_matcher_free(m);
            if (!(m = grammar_matcher_new(g, err))) return -1;
        }
        double t0 = cli_now();
        if (grammar_matcher_mask(m, b->allowed, err)) {
            printf("step %d: the mask stopped after %.3f ms: %s\n", steps, (cli_now() - t0) * 1e3, err->msg);
            grammar_matcher_free(m);
            return -1;
        }
        b->mask_ms[steps] = (cli_now() - t0) * 1e3;
        int n_ok = 0;
        for (int i = 0; i < b->vocab; i++) {
            if (!(b->allowed[i >> 5] >> (i & 31) & 1)) continue;
            bool eos = false;
            for (int e = 0; e < info->n_eos; e++) eos |= info->eos_ids[e] == i;
            if (!eos) b->ok[n_ok++] = i;
        }
        if (b->text) { /* the longest allowed token that spells the text's next bytes */
            if (b->at == b->text_len) break;
            int32_t best = -1;
            for (int k = 0; k < n_ok; k++) {
                int32_t t = b->ok[k];
                if (b->len[t] > 0 && (size_t)b->len[t] <= b->text_len - b->at &&
                    !memcmp(b->bytes[t], b->text + b->at, (size_t)b->len[t]) && (best < 0 || b->len[t] > b->len[best]))
                    best = t;
            }
            if (best < 0) {
                fprintf(stderr, "loom bench grammar: --text: no allowed token spells its byte %zu on\n", b->at);
                grammar_matcher_free(m);
                return -1;
            }
            b->at += (size_t)b->len[best];
            n_ok = 1, b->ok[0] = best;
        }
        if (!n_ok) { /* only EOS: the sentence is whole, the next begins */
            grammar_matcher_free(m);
            m = grammar_matcher_new(g, err);
            continue;
        }
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        int32_t pick = b->ok[(seed >> 33) % (uint64_t)n_ok];
        t0 = cli_now();
        bool allowed = grammar_matcher_allows(m, pick);
        b->check_ms[steps] = (cli_now() - t0) * 1e3;
        if (!allowed && grammar_matcher_fault(m, err)) { /* past the matcher's bound of work */
            printf("step %d: the check stopped after %.3f ms: %s\n", steps, b->check_ms[steps], err->msg);
            steps = -1;
            break;
        }
        if (!allowed || grammar_matcher_accept(m, pick, err)) {
            fprintf(stderr, "loom bench grammar: the mask allowed token %d, which the matcher refuses%s%s\n", pick,
                    allowed ? ": " : "", allowed ? err->msg : "");
            steps = -1;
            break;
        }
    }
    if (!m) return -1;
    grammar_matcher_free(m);
    return steps;
}

/* The grammar text the options ask for (malloc'd), or NULL after printing why. */
static char *grammar_text(const char *schema_file, const char *gbnf_file, const char *regex) {
    loom_err err = {{0}};
    char *text = NULL;
    if (regex)
        return regex_to_gbnf(regex, &err) ?: (fprintf(stderr, "loom bench grammar: --regex: %s\n", err.msg), NULL);
    const char *path = schema_file ? schema_file : gbnf_file;
    size_t len;
    char *src = file_read_all(path, &len, &err);
    if (!src) {
        fprintf(stderr, "loom bench grammar: %s\n", err.msg);
        return NULL;
    }
    if (gbnf_file) return src;
    cJSON *schema = cJSON_ParseWithLength(src, len);
    if (!schema) fprintf(stderr, "loom bench grammar: %s is not valid JSON\n", path);
    else if (!(text = json_schema_to_gbnf(schema, &err)))
        fprintf(stderr, "loom bench grammar: %s: %s\n", path, err.msg);
    cJSON_Delete(schema);
    free(src);
    return text;
}

int bench_grammar(int argc, char **argv) {
    cli_common c = CLI_COMMON_DEFAULTS;
    const char *schema_file = NULL, *gbnf_file = NULL, *regex = NULL, *text_file = NULL;
    int n = 256;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_common_arg(&c, argc, argv, &i);
        if (r < 0) return 2;
        if (r) continue;
        if (!strcmp(a, "--json-schema")) schema_file = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--grammar")) gbnf_file = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--regex")) regex = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--text")) text_file = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--num-tokens")) n = (int)cli_int(a, cli_value(argc, argv, &i), 1, 1 << 20);
        else {
            fprintf(stderr, "loom bench grammar: unknown option '%s'\n", a);
            return 2;
        }
    }
    if (!!schema_file + !!gbnf_file + !!regex != 1) {
        fprintf(stderr, "loom bench grammar: give one of --json-schema FILE, --grammar FILE (GBNF), --regex RE\n");
        return 2;
    }
    char *text = grammar_text(schema_file, gbnf_file, regex);
    if (!text) return 1;
    loom_model *m = cli_load_model(&c, true);
    loom_model_info info;
    loom_err err = {{0}};
    int rc = 1;
    grammar_vocab *v = NULL;
    grammar *g = NULL;
    walk_buf b = {0};
    char *sentence = NULL;
    if (!m || cli_print_cpu("bench grammar", stdout)) goto done;
    loom_model_get_info(m, &info);
    double t0 = cli_now();
    if (!(v = vocab_of_model(m, &err))) goto fail;
    double t_vocab = cli_now() - t0;
    t0 = cli_now();
    if (!(g = grammar_compile(text, v, &err))) goto fail;
    printf("vocabulary: %d tokens (trie built in %.1f ms); grammar: %zu bytes of GBNF, compiled in %.2f ms\n",
           info.vocab, t_vocab * 1e3, strlen(text), (cli_now() - t0) * 1e3);
    b.vocab = info.vocab;
    if (text_file) {
        if (!(sentence = file_read_all(text_file, &b.text_len, &err))) goto fail;
        while (b.text_len && (sentence[b.text_len - 1] == '\n' || sentence[b.text_len - 1] == ' ')) b.text_len--;
        b.text = sentence;
        n = (int)b.text_len; /* steps at most */
        b.bytes = mem_zalloc((size_t)info.vocab, sizeof *b.bytes, "the vocabulary", NULL);
        b.len = mem_zalloc((size_t)info.vocab, sizeof *b.len, "the vocabulary", NULL);
        char piece[4096];
        for (int i = 0; b.bytes && b.len && i < info.vocab; i++)
            if ((b.len[i] = loom_token_bytes(m, i, piece, sizeof piece)) > 0 &&
                (b.bytes[i] = mem_alloc((size_t)b.len[i], "a token", NULL)))
                memcpy(b.bytes[i], piece, (size_t)b.len[i]);
        printf("spelling the %zu bytes of %s\n", b.text_len, text_file);
    }
    b.allowed = mem_zalloc(((size_t)info.vocab + 31) / 32, sizeof *b.allowed, "a mask", NULL);
    b.ok = mem_array((size_t)info.vocab, sizeof *b.ok, "the allowed tokens", NULL);
    b.mask_ms = mem_array((size_t)n, sizeof *b.mask_ms, "the timings", NULL);
    b.check_ms = mem_array((size_t)n, sizeof *b.check_ms, "the timings", NULL);
    if (!b.allowed || !b.ok || !b.mask_ms || !b.check_ms) {
        fprintf(stderr, "loom bench grammar: out of memory\n");
        goto done;
    }
    const char *pass[2] = {"mask, fresh grammar", "mask, cached grammar"};
    for (int p = 0; p < 2; p++) {
        b.at = 0;
        int steps = walk(g, &info, n, c.seed + 1, &b, &err);
        if (steps < 0) goto fail;
        report(pass[p], b.mask_ms, steps);
        if (p) report("one-token check (greedy path)", b.check_ms, steps);
    }
    rc = 0;
    goto done;
fail:
    if (err.msg[0]) fprintf(stderr, "loom bench grammar: %s\n", err.msg);
done:
    for (int i = 0; b.bytes && i < b.vocab; i++) free(b.bytes[i]);
    free(b.bytes), free(b.len);
    free(b.allowed), free(b.ok), free(b.mask_ms), free(b.check_ms), free(sentence);
    grammar_unref(g);
    grammar_vocab_free(v);
    free(text);
    cli_free(&c, m);
    return rc;
}

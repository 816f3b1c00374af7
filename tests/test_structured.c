/* Grammar-forced output is valid on any weights. Every schema of the corpus
 * (tests/data/schemas/corpus.jsonl) is converted and compiled, and a sentence is sampled under
 * its mask (temperature 1, a seed per schema) from two models: the embedded stories260K (trained
 * weights, its 512-token SentencePiece vocabulary) and the golden llama (random weights, its
 * 128 ids given a vocabulary of ASCII characters and JSON pieces, id 127 as EOS). Checked here:
 * the schemas expected to compile do and those expected to be refused are, naming a keyword;
 * every sampled token was allowed; every finished output parses as JSON (cJSON). The outputs
 * are written as JSONL (`test_structured --out FILE`) for tests/schema_check.py, which validates
 * them against their schemas with Python's jsonschema, an oracle this repository did not write.
 *
 * `--corpus FILE` runs another corpus of the same shape: benches/schema_coverage.sh passes
 * JSONSchemaBench's schemas, which have no "expect"; those that do not convert are then counted
 * and written out with the error, not failed. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "grammar/grammar.h"

#define CORPUS     LOOM_SOURCE_DIR "/tests/data/schemas/corpus.jsonl"
#define GOLDEN     LOOM_SOURCE_DIR "/tests/golden/llama"
#define MAX_TOKENS 256 /* per output (a random model may write a string for a long time) */
/* Under the sanitizers every 4th generated schema runs (10x slower code; the real ones all run). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
#define GEN_STRIDE 4
#else
#define GEN_STRIDE 1
#endif
#define MAX_CTX    512
#define GOLDEN_EOS 127

typedef struct model_case {
    const char *name;
    loom_model *m;
    loom_engine *e;
    int vocab, n_prompt, max_tokens;
    int32_t prompt[16];
    char **bytes; /* each token's text mid-sentence */
    int *lens;    /* -1: none (special, EOS) */
    grammar_vocab *v;
} model_case;

/* The golden model's ids as text: printable ASCII, then pieces of JSON; the last ends. */
static void golden_text(model_case *mc) {
    static const char *pieces[] = {"\n", "\": ", "\", \"", "{\"",  "\"}", "true", "false", "null",
                                   "[]", "{}",   ", ",     "\"",   "00",  "12",   "-1",    ".5",
                                   "e+", "ab",   "the",    "name", "id",  "\\n",  "\\\"",  "\\u00",
                                   "  ", "[\"",  "\"]",    "ing",  "er",  "on",   "at",    "\xC3\xA9"};
    for (int i = 0; i < mc->vocab; i++) {
        char c = (char)(0x20 + i);
        const char *s = i < 95 ? &c : i - 95 < (int)(sizeof pieces / sizeof *pieces) ? pieces[i - 95] : NULL;
        mc->lens[i] = i == GOLDEN_EOS || !s ? -1 : i < 95 ? 1 : (int)strlen(s);
        if (mc->lens[i] > 0) mc->bytes[i] = strndup(s, (size_t)mc->lens[i]);
    }
}

static bool model_open(model_case *mc, const char *path) {
    loom_err err = {{0}};
    loom_model_options mo = {.path = path, .load_tokenizer = path == NULL, .dtype = "float32"};
    loom_model_info info;
    if ((mc->m = loom_model_load(&mo, &err))) loom_model_get_info(mc->m, &info);
    loom_engine_options eo = {
        .max_seqs = 1, .max_ctx = mc->m && info.max_pos < MAX_CTX ? info.max_pos : MAX_CTX, .max_tokens = 64};
    if (!mc->m || !(mc->e = loom_engine_new(mc->m, &eo, &err))) {
        CHECK(false, "%s: %s", mc->name, err.msg);
        return false;
    }
    mc->max_tokens = eo.max_ctx - 17 < MAX_TOKENS ? eo.max_ctx - 17 : MAX_TOKENS; /* after a prompt of 16 at most */
    mc->vocab = info.vocab;
    mc->bytes = calloc((size_t)mc->vocab, sizeof *mc->bytes);
    mc->lens = calloc((size_t)mc->vocab, sizeof *mc->lens);
    int32_t eos = GOLDEN_EOS;
    if (path) {
        golden_text(mc);
        mc->prompt[0] = 0, mc->n_prompt = 1;
    } else {
        char piece[256];
        for (int i = 0; i < mc->vocab; i++)
            if ((mc->lens[i] = loom_token_bytes(mc->m, i, piece, sizeof piece)) > 0)
                mc->bytes[i] = strndup(piece, (size_t)mc->lens[i]);
        int32_t *ids = NULL;
        size_t n = 0;
        CHECK(!loom_tokenize(mc->m, "Once upon a time, the data was", true, &ids, &n, &err), "%s", err.msg);
        mc->n_prompt = (int)(n < 16 ? n : 16);
        memcpy(mc->prompt, ids, (size_t)mc->n_prompt * sizeof *ids);
        free(ids);
    }
    mc->v = grammar_vocab_new(mc->vocab, (const char *const *)mc->bytes, mc->lens, path ? &eos : info.eos_ids,
                              path ? 1 : info.n_eos, &err);
    CHECK(mc->v, "%s: %s", mc->name, err.msg);
    return mc->v != NULL;
}

static void model_close(model_case *mc) {
    for (int i = 0; mc->bytes && i < mc->vocab; i++) free(mc->bytes[i]);
    free(mc->bytes);
    free(mc->lens);
    grammar_vocab_free(mc->v);
    loom_engine_free(mc->e);
    loom_model_free(mc->m);
}

/* One sentence under g from mc, sampled with seed: its text into out (NUL-terminated, cut at
 * cap), whether it finished (the grammar ended, by EOS or with nothing allowed to follow). */
static bool sample(model_case *mc, grammar *g, uint64_t seed, char *out, size_t cap, int *n_tokens) {
    loom_err err = {{0}};
    loom_sampling s = {.temperature = 1, .top_p = 1, .seed = seed};
    loom_sampler *smp = loom_sampler_new(&s, mc->vocab, &err);
    grammar_matcher *gm = grammar_matcher_new(g, &err);
    float *row = malloc(sizeof *row * (size_t)mc->vocab);
    uint32_t *allowed = malloc(sizeof *allowed * (((size_t)mc->vocab + 31) / 32));
    int32_t ids[MAX_CTX], pos[MAX_CTX], seq[MAX_CTX] = {0}, last;
    int n = mc->n_prompt;
    size_t len = 0;
    bool finished = false;
    memcpy(ids, mc->prompt, (size_t)n * sizeof *ids);
    for (int i = 0; i < MAX_CTX; i++) pos[i] = i;
    loom_engine_reset_seq(mc->e, 0);
    *n_tokens = 0;
    for (int from = 0; smp && gm && row && allowed && *n_tokens < mc->max_tokens && !finished;) {
        last = n - from - 1;
        loom_batch b = {
            .n_tokens = n - from, .ids = ids + from, .pos = pos + from, .seq = seq, .n_logits = 1, .logit_rows = &last};
        const float *logits;
        if (loom_forward(mc->e, &b, &logits, &err)) {
            CHECK(false, "%s: %s", mc->name, err.msg);
            break;
        }
        from = n;
        if (grammar_matcher_mask(gm, allowed, &err)) {
            CHECK(false, "%s: %s", mc->name, err.msg);
            break;
        }
        bool any = false;
        for (int i = 0; i < mc->vocab; i++) {
            bool ok = allowed[i >> 5] >> (i & 31) & 1;
            row[i] = ok ? logits[i] : -INFINITY;
            any |= ok;
        }
        if (!any) break; /* the vocabulary cannot spell what must come next */
        int32_t t = loom_sampler_next(smp, row);
        CHECK(grammar_matcher_allows(gm, t) && !grammar_matcher_accept(gm, t, &err), "%s: sampled token %d refused",
              mc->name, t);
        (*n_tokens)++;
        ids[n++] = t;
        if (mc->lens[t] > 0 && len + (size_t)mc->lens[t] < cap) {
            memcpy(out + len, mc->bytes[t], (size_t)mc->lens[t]);
            len += (size_t)mc->lens[t];
        }
        finished = grammar_matcher_done(gm);
    }
    out[len] = 0;
    free(row);
    free(allowed);
    grammar_matcher_free(gm);
    loom_sampler_free(smp);
    return finished;
}

typedef struct tally {
    int schemas, compiled, refused_ok, outputs, finished, parsed;
} tally;

/* One corpus line through every model; its outputs to `out` (if any). */
static void run_schema(const cJSON *line, model_case *models, int n_models, int index, FILE *out, tally *t) {
    const cJSON *name = cJSON_GetObjectItem(line, "name"), *schema = cJSON_GetObjectItem(line, "schema"),
                *expect = cJSON_GetObjectItem(line, "expect");
    bool refuse = cJSON_IsString(expect) && !strcmp(expect->valuestring, "refuse");
    loom_err err = {{0}};
    char *gbnf = json_schema_to_gbnf(schema, &err);
    t->schemas++;
    if (!expect) { /* a corpus with no expectations: count and record what does not convert */
        if (gbnf) t->compiled++;
        else if (out) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "name", name->valuestring);
            cJSON_AddStringToObject(o, "error", err.msg);
            char *s = cJSON_PrintUnformatted(o);
            fprintf(out, "%s\n", s);
            free(s);
            cJSON_Delete(o);
        }
        if (!gbnf) return;
    } else if (refuse) {
        CHECK(!gbnf && strstr(err.msg, "json_schema: ") && strchr(err.msg, '\''),
              "%s: should be refused naming a keyword, got %s", name->valuestring, gbnf ? "a grammar" : err.msg);
        t->refused_ok += !gbnf;
        free(gbnf);
        return;
    }
    CHECK(gbnf, "%s: %s", name->valuestring, err.msg);
    if (!gbnf) return;
    static char text[1 << 16];
    for (int k = 0; k < n_models; k++) {
        grammar *g = grammar_compile(gbnf, models[k].v, &err);
        CHECK(g, "%s on %s: %s", name->valuestring, models[k].name, err.msg);
        if (!g) continue;
        t->compiled += k == 0 && expect;
        int n_tokens;
        bool finished = sample(&models[k], g, (uint64_t)index * 2 + (uint64_t)k, text, sizeof text, &n_tokens);
        t->outputs++;
        t->finished += finished;
        if (finished) {
            cJSON *parsed = cJSON_Parse(text);
            CHECK(parsed, "%s on %s: the output does not parse as JSON: %s", name->valuestring, models[k].name, text);
            t->parsed += parsed != NULL;
            cJSON_Delete(parsed);
        }
        if (out) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "name", name->valuestring);
            cJSON_AddStringToObject(o, "model", models[k].name);
            cJSON_AddStringToObject(o, "output", text);
            cJSON_AddStringToObject(o, "finish_reason", finished ? "stop" : "length");
            cJSON_AddNumberToObject(o, "tokens", n_tokens);
            char *s = cJSON_PrintUnformatted(o);
            fprintf(out, "%s\n", s);
            free(s);
            cJSON_Delete(o);
        }
        grammar_unref(g);
    }
    free(gbnf);
}

int main(int argc, char **argv) {
    const char *out_path = NULL, *corpus_path = CORPUS;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--out")) out_path = argv[i + 1];
        else if (!strcmp(argv[i], "--corpus")) corpus_path = argv[i + 1];
    }
    FILE *corpus = fopen(corpus_path, "r"), *out = out_path ? fopen(out_path, "w") : NULL;
    CHECK(corpus, "cannot open %s", corpus_path);
    CHECK(!out_path || out, "cannot write %s", out_path);
    model_case models[2] = {{.name = "stories260K"}, {.name = "golden-llama"}};
    bool ok = corpus && model_open(&models[0], NULL) && model_open(&models[1], GOLDEN);
    tally t = {0};
    char *line = NULL;
    size_t cap = 0;
    for (int index = 0; ok && getline(&line, &cap, corpus) > 0; index++) {
        cJSON *j = cJSON_Parse(line);
        CHECK(j, "corpus line %d is not JSON", index + 1);
        const cJSON *nm = cJSON_GetObjectItem(j, "name");
        bool gen = cJSON_IsString(nm) && !strncmp(nm->valuestring, "gen/", 4);
        if (j && (!gen || index % GEN_STRIDE == 0)) run_schema(j, models, 2, index, out, &t);
        cJSON_Delete(j);
    }
    free(line);
    for (int k = 0; k < 2; k++) model_close(&models[k]);
    if (corpus) fclose(corpus);
    if (out) fclose(out);
    printf("schemas %d: %d compiled, %d refused as expected; outputs %d: %d finished, %d of them parse as JSON\n",
           t.schemas, t.compiled, t.refused_ok, t.outputs, t.finished, t.parsed);
    CHECK(t.outputs > 0, "no output was generated");
    return check_done();
}

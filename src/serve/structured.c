/* Structured output in the server: the grammar vocabulary of the model (vocab.c), the cache of
 * compiled grammars, the request fields that ask for a grammar (OpenAI's
 * response_format, vLLM's structured_outputs, llama-server's grammar and json_schema), and
 * sampling under a grammar's mask.
 *
 * Sampling happens on rank 0 only, after the logits of every parallel mode have arrived there,
 * so the mask is applied once and every rank takes the token rank 0 sends. Greedy requests
 * first try the unmasked argmax: when the grammar allows it, it is also the masked argmax, and
 * no mask is computed. Otherwise the disallowed tokens' logits become -inf and the request's
 * sampler draws as usual, so temperature, top-k and top-p apply to the allowed tokens, as in
 * vLLM, where the grammar's bitmask is applied before sampling. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/structured.h"
#include "serve/vocab.h"
#include "util/alloc.h"
#include "util/err.h"

/* compiled grammars kept, and their bytes in all (elements, masks, states) */
#define GRAMMAR_CACHE_SIZE  64
#define GRAMMAR_CACHE_BYTES ((size_t)256 << 20)

int structured_init(server *srv, loom_err *err) {
    if (!srv->info.has_tokenizer) return 0; /* grammars match text: requests for one get 400 */
    return (srv->gvocab = vocab_of_model(srv->m, err)) &&
                   (srv->grammars = grammar_cache_new(srv->gvocab, GRAMMAR_CACHE_SIZE, GRAMMAR_CACHE_BYTES, err))
               ? 0
               : -1;
}

void structured_free(server *srv) {
    grammar_cache_free(srv->grammars);
    grammar_vocab_free(srv->gvocab);
}

/* json_object: any JSON object, as the schema {"type": "object"} converts. */
static char *any_object_gbnf(loom_err *err) {
    cJSON *any = cJSON_CreateObject();
    cJSON_AddStringToObject(any, "type", "object");
    char *gbnf = json_schema_to_gbnf(any, err);
    cJSON_Delete(any);
    return gbnf;
}

/* The one source of a grammar among the body's fields, as GBNF in *gbnf; *param names it. */
static int grammar_source(const cJSON *root, char **gbnf, const char **param, api_error *e) {
    static const char *const fields[] = {"response_format", "structured_outputs", "grammar", "json_schema"};
    const cJSON *v = NULL;
    loom_err err = {{0}};
    for (int i = 0; i < 4; i++) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, fields[i]);
        if (!f || cJSON_IsNull(f)) continue;
        if (i == 0) { /* {"type": "text"} asks for nothing */
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(f, "type");
            if (cJSON_IsString(t) && !strcmp(t->valuestring, "text")) continue;
        }
        if (v) return api_fail(e, 400, fields[i], "'%s' and '%s' both ask for a grammar: give one", *param, fields[i]);
        v = f;
        *param = fields[i];
    }
    if (!v) return 0;
    const char *p = *param;
    if (!strcmp(p, "grammar")) {
        if (!cJSON_IsString(v)) return api_fail(e, 400, p, "'grammar' must be a string (GBNF)");
        *gbnf = mem_strdup(v->valuestring, "a grammar", &err);
    } else if (!strcmp(p, "json_schema")) {
        if (!cJSON_IsObject(v) && !cJSON_IsBool(v)) return api_fail(e, 400, p, "'json_schema' must be a JSON Schema");
        *gbnf = json_schema_to_gbnf(v, &err);
    } else if (!strcmp(p, "response_format")) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "type");
        if (!cJSON_IsObject(v) || !cJSON_IsString(t))
            return api_fail(e, 400, p, "'response_format' must be an object with a string 'type'");
        if (!strcmp(t->valuestring, "json_object")) {
            *gbnf = any_object_gbnf(&err);
        } else if (!strcmp(t->valuestring, "json_schema")) {
            const cJSON *js = cJSON_GetObjectItemCaseSensitive(v, "json_schema");
            const cJSON *schema = cJSON_GetObjectItemCaseSensitive(js, "schema");
            if (!cJSON_IsObject(js) || !(cJSON_IsObject(schema) || cJSON_IsBool(schema)))
                return api_fail(e, 400, p,
                                "'response_format' of type json_schema needs 'json_schema': {'schema': ...}");
            *gbnf = json_schema_to_gbnf(schema, &err);
        } else {
            return api_fail(e, 400, p, "'response_format' type '%.64s' is not one of text, json_object, json_schema",
                            t->valuestring);
        }
    } else { /* vLLM's structured_outputs: one of json, regex, choice, grammar, json_object */
        if (!cJSON_IsObject(v)) return api_fail(e, 400, p, "'structured_outputs' must be an object");
        const cJSON *k, *kind = NULL;
        cJSON_ArrayForEach(k, v) {
            if (cJSON_IsNull(k) || (cJSON_IsBool(k) && !cJSON_IsTrue(k))) continue;
            if (strcmp(k->string, "json") && strcmp(k->string, "regex") && strcmp(k->string, "choice") &&
                strcmp(k->string, "grammar") && strcmp(k->string, "json_object"))
                return api_fail(e, 400, p,
                                "'structured_outputs.%.64s' is not supported (loom takes json, regex, "
                                "choice, grammar or json_object)",
                                k->string);
            if (kind)
                return api_fail(e, 400, p, "'structured_outputs' holds both '%s' and '%s': give one", kind->string,
                                k->string);
            kind = k;
        }
        if (!kind) return api_fail(e, 400, p, "'structured_outputs' asks for nothing");
        const char *name = kind->string;
        if (!strcmp(name, "json")) {
            cJSON *parsed = cJSON_IsString(kind) ? cJSON_Parse(kind->valuestring) : NULL;
            const cJSON *schema = parsed ? parsed : kind;
            if (!cJSON_IsObject(schema) && !cJSON_IsBool(schema)) {
                cJSON_Delete(parsed);
                return api_fail(e, 400, p, "'structured_outputs.json' must be a JSON Schema (an object or its text)");
            }
            *gbnf = json_schema_to_gbnf(schema, &err);
            cJSON_Delete(parsed);
        } else if (!strcmp(name, "json_object")) {
            *gbnf = any_object_gbnf(&err);
        } else if (!strcmp(name, "regex")) {
            if (!cJSON_IsString(kind)) return api_fail(e, 400, p, "'structured_outputs.regex' must be a string");
            *gbnf = regex_to_gbnf(kind->valuestring, &err);
        } else if (!strcmp(name, "grammar")) {
            if (!cJSON_IsString(kind))
                return api_fail(e, 400, p, "'structured_outputs.grammar' must be a string (GBNF)");
            *gbnf = mem_strdup(kind->valuestring, "a grammar", &err);
        } else { /* choice */
            gbuf b = {0};
            const cJSON *c;
            if (!cJSON_IsArray(kind) || !cJSON_GetArraySize(kind))
                return api_fail(e, 400, p, "'structured_outputs.choice' must be a non-empty array of strings");
            gbuf_puts(&b, "root ::= ");
            cJSON_ArrayForEach(c, kind) {
                if (!cJSON_IsString(c)) {
                    gbuf_free(&b);
                    return api_fail(e, 400, p, "'structured_outputs.choice' must be a non-empty array of strings");
                }
                if (c != kind->child) gbuf_puts(&b, " | ");
                gbuf_literal(&b, c->valuestring, strlen(c->valuestring));
            }
            if (b.oom) gbuf_free(&b);
            *gbnf = b.p;
            if (!*gbnf) loom_errf(&err, "cannot allocate a grammar");
        }
    }
    return *gbnf ? 0 : api_fail(e, 400, p, "%s", err.msg);
}

int structured_parse(server *srv, const cJSON *root, request *r, api_error *e) {
    const char *param = r->gbnf ? "tool_choice" : NULL;
    char *gbnf = NULL;
    if (grammar_source(root, &gbnf, &param, e)) return -1;
    if (gbnf && r->gbnf) {
        free(gbnf);
        return api_fail(e, 400, param, "'%s' cannot be combined with a forced tool call ('tool_choice')", param);
    }
    if (gbnf) r->gbnf = gbnf;
    if (!r->gbnf) return 0;
    if (!srv->grammars)
        return api_fail(e, 400, param, "'%s' needs the model's tokenizer, and this model has none", param);
    loom_err err = {{0}};
    if (!(r->grammar = grammar_cache_get(srv->grammars, r->gbnf, &err))) return api_fail(e, 400, param, "%s", err.msg);
    return 0;
}

int32_t structured_sample(request *r, const float *logits, int vocab, float *row, uint32_t *allowed, loom_err *err) {
    if (!r->gm) {
        if (!(r->gm = grammar_matcher_new(r->grammar, err))) return -1;
        grammar_matcher_stop_on(r->gm, &r->cancel);
    }
    if (r->sampling.temperature == 0) {
        int32_t best = 0;
        for (int i = 1; i < vocab; i++)
            if (logits[i] > logits[best]) best = i;
        if (grammar_matcher_allows(r->gm, best)) return best;
        if (grammar_matcher_fault(r->gm, err)) return -1;
    }
    if (grammar_matcher_mask(r->gm, allowed, err)) return -1;
    bool any = false;
    for (int i = 0; i < vocab; i++) {
        bool ok = allowed[i >> 5] >> (i & 31) & 1;
        row[i] = ok ? logits[i] : -INFINITY;
        any |= ok;
    }
    if (!any) return loom_errf(err, "the grammar allows no token of this vocabulary here");
    return loom_sampler_next(r->smp, row);
}

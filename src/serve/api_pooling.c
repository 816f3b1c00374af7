/* The pooling APIs, as OpenAI and vLLM serve them: requests whose prompts are pooled, nothing
 * generated (scheduler.c's pool_rows). Each input is one request; the first holds the others as
 * its choices, which the scheduler runs side by side through the same batches, replicas and
 * parallel modes as generations.
 *  - POST /v1/embeddings (--task embed): `input` a string, a list of strings, a list of token
 *    ids or a list of such lists; `encoding_format` "float" or "base64" (little-endian float32
 *    bytes, what OpenAI's Python client asks for by default); `dimensions` only as the model's.
 *  - POST /v1/score (vLLM's) and /v1/rerank (Jina's and Cohere's shape, vLLM's and
 *    llama-server's) (--task score): a causal reranker such as Qwen3-Reranker scores each
 *    (query, document) pair as the probability of its "yes" token against its "no" token at the
 *    pair's last token (--score-tokens). The pair's prompt is what --score-template writes from
 *    `query` and `document` (Qwen3-Reranker's instruction, prefix and suffix), else the query's
 *    tokens then the document's, as vLLM joins a pair for a decoder model.
 * Base64 is written here: six lines, for which no library is worth a dependency. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/api.h"
#include "template/template.h"
#include "util/alloc.h"

#define MAX_INPUTS 2048 /* as OpenAI's API */

/* Appends v's tokens (text tokenized, with the model's special tokens when add_special; or
 * token ids, checked) to r's prompt; where names v in errors. */
static int add_tokens_of(server *srv, const cJSON *v, bool add_special, const char *where, request *r, api_error *e) {
    loom_err err = {{0}};
    size_t cap = (size_t)r->n_prompt; /* what the prompt surely holds */
    if (cJSON_IsString(v)) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (!srv->info.has_tokenizer)
            return api_fail(e, 400, NULL, "the model has no tokenizer: give %s as token ids", where);
        if (loom_tokenize(srv->m, v->valuestring, add_special, &ids, &n, &err))
            return api_fail(e, 400, NULL, "%s: %s", where, err.msg);
        bool ok = !n || !ARRAY_RESERVE(r->prompt, cap, (size_t)r->n_prompt + n, "a prompt", &err);
        if (ok && n) memcpy(r->prompt + r->n_prompt, ids, n * sizeof *ids);
        r->n_prompt += ok ? (int)n : 0;
        free(ids);
        return ok ? 0 : api_fail(e, 500, NULL, "%s", err.msg);
    }
    if (!cJSON_IsArray(v)) return api_fail(e, 400, NULL, "%s must be a string or a list of token ids", where);
    int n = cJSON_GetArraySize(v), k = 0;
    if (n && ARRAY_RESERVE(r->prompt, cap, (size_t)r->n_prompt + n, "a prompt", &err))
        return api_fail(e, 500, NULL, "%s", err.msg);
    const cJSON *t;
    cJSON_ArrayForEach(t, v) {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 ||
            t->valuedouble >= srv->info.vocab)
            return api_fail(e, 400, NULL, "%s[%d] is not a token id in [0, %d)", where, k, srv->info.vocab);
        r->prompt[r->n_prompt + k++] = (int32_t)t->valuedouble;
    }
    r->n_prompt += n;
    return 0;
}

/* r's prompt is complete: not empty, within the context, and its result's room made (an
 * embedding's out_width values, a score's one). */
static int prompt_done(server *srv, request *r, const char *where, api_error *e) {
    if (!r->n_prompt) return api_fail(e, 400, NULL, "%s is empty", where);
    if (r->n_prompt > srv->max_ctx)
        return api_fail(e, 400, NULL,
                        "This model's maximum context length is %d tokens. However, %s has %d tokens. Please reduce "
                        "the length of the input.",
                        srv->max_ctx, where, r->n_prompt);
    loom_err why;
    size_t n = r->api == API_EMBEDDINGS ? (size_t)srv->info.out_width : 1;
    if (!(r->pooled = mem_zalloc(n, sizeof *r->pooled, "a pooled result", &why)))
        return api_fail(e, 500, NULL, "%s", why.msg);
    return 0;
}

/* v as a list of inputs: one string or token-id list alone is a list of one. */
static int input_list(const cJSON *v, const char *field, const cJSON **items, int *n, api_error *e) {
    if (cJSON_IsString(v) || (cJSON_IsArray(v) && cJSON_IsNumber(v->child))) {
        items[0] = v;
        *n = 1;
        return 0;
    }
    if (!cJSON_IsArray(v) || !cJSON_GetArraySize(v))
        return api_fail(e, 400, field,
                        "'%s' must be a string, a list of strings, a list of token ids or a list of such lists", field);
    if (cJSON_GetArraySize(v) > MAX_INPUTS)
        return api_fail(e, 400, field, "'%s' holds %d inputs (at most %d)", field, cJSON_GetArraySize(v), MAX_INPUTS);
    *n = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, v) items[(*n)++] = x;
    return 0;
}

/* The first of n requests of API api, the others its choices; NULL with e on failure. */
static request *pooled_requests(server *srv, req_api api, const char *prefix, int n, api_error *e) {
    loom_err why;
    if (n > srv->o->max_queue) /* they wait in the queue together */
        return api_fail(e, 400, NULL, "%d inputs do not fit in the queue (--max-queue %d)", n, srv->o->max_queue), NULL;
    request *r = request_new(REQ_POOL);
    if (!r || (n > 1 && !(r->choices = mem_zalloc((size_t)n, sizeof *r->choices, "a request's inputs", &why)))) {
        request_unref(r);
        return api_fail(e, 500, NULL, "out of memory for %d inputs", n), NULL;
    }
    r->api = api;
    r->serial = __atomic_fetch_add(&srv->next_id, 1, __ATOMIC_RELAXED);
    snprintf(r->id, sizeof r->id, "%s-%016llx", prefix, (unsigned long long)r->serial);
    r->created = time(NULL);
    if (n > 1) r->choices[0] = r, r->n_choices = r->n_return = n;
    for (int i = 1; i < n; i++) {
        request *c = r->choices[i] = request_new(REQ_POOL);
        if (!c) {
            request_unref(r);
            return api_fail(e, 500, NULL, "out of memory for %d inputs", n), NULL;
        }
        c->index = i, c->api = api;
    }
    return r;
}

static request *choice_of(request *r, int i) { return i ? r->choices[i] : r; }
static const request *pick(const request *r, int i) { return i ? r->choices[i] : r; }

request *api_parse_embeddings(server *srv, const char *body, size_t len, api_error *e) {
    cJSON *root = api_parse_body(body, len, e);
    if (!root) return NULL;
    const cJSON *fmt = get_field(root, "encoding_format"), **items = NULL;
    long dims = srv->info.out_width;
    int n = 0;
    request *r = NULL;
    loom_err why;
    if (api_check_model(srv, root, e) || get_int(root, "dimensions", 1, 1 << 20, &dims, e)) goto done;
    if (dims != srv->info.out_width) {
        api_fail(e, 400, "dimensions",
                 "'dimensions' %ld: this model's embeddings have %d (it is not Matryoshka-trained)", dims,
                 srv->info.out_width);
        goto done;
    }
    if (fmt && (!cJSON_IsString(fmt) || (strcmp(fmt->valuestring, "float") && strcmp(fmt->valuestring, "base64")))) {
        api_fail(e, 400, "encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
        goto done;
    }
    if (!(items = mem_array(MAX_INPUTS, sizeof *items, "the inputs", &why))) {
        api_fail(e, 500, NULL, "%s", why.msg);
        goto done;
    }
    if (input_list(get_field(root, "input"), "input", items, &n, e) ||
        !(r = pooled_requests(srv, API_EMBEDDINGS, "embd", n, e)))
        goto done;
    r->as_base64 = fmt && !strcmp(fmt->valuestring, "base64");
    for (int i = 0; i < n; i++) {
        char where[32];
        snprintf(where, sizeof where, "input[%d]", i);
        if (add_tokens_of(srv, items[i], true, where, choice_of(r, i), e) ||
            prompt_done(srv, choice_of(r, i), where, e)) {
            snprintf(e->param, sizeof e->param, "input");
            request_unref(r);
            r = NULL;
            break;
        }
    }
done:
    free(items);
    cJSON_Delete(root);
    return r;
}

/* A pair's prompt written by --score-template from its query and document (text). */
static int templated_pair(server *srv, const cJSON *query, const cJSON *doc, const char *dname, request *r,
                          api_error *e) {
    if (!cJSON_IsString(query) || !cJSON_IsString(doc))
        return api_fail(e, 400, NULL, "%s: with --score-template, the query and documents are text", dname);
    cJSON *ctx = cJSON_CreateObject();
    cJSON_AddArrayToObject(ctx, "messages"); /* the renderer's context always has them */
    cJSON_AddStringToObject(ctx, "query", query->valuestring);
    cJSON_AddStringToObject(ctx, "document", doc->valuestring);
    char *text = NULL;
    loom_err err = {{0}};
    int rc = chat_template_render(srv->score_tmpl, ctx, false, &text, &err);
    cJSON_Delete(ctx);
    if (rc) return api_fail(e, 400, NULL, "%s: --score-template: %s", dname, err.msg);
    cJSON *prompt = cJSON_CreateStringReference(text);
    rc = add_tokens_of(srv, prompt, true, dname, r, e);
    cJSON_Delete(prompt);
    free(text);
    return rc;
}

/* Pair i's prompt: --score-template's, else the query's tokens (with the model's special
 * tokens), then the document's. */
static int pair_prompt(server *srv, const cJSON *query, const char *qname, const cJSON *doc, const char *dname,
                       request *r, api_error *e) {
    if (srv->score_tmpl ? templated_pair(srv, query, doc, dname, r, e)
                        : add_tokens_of(srv, query, true, qname, r, e) || add_tokens_of(srv, doc, false, dname, r, e))
        return -1;
    return prompt_done(srv, r, dname, e);
}

/* /v1/score: text_1 and text_2 each a string (or token ids) or a list; one text_1 against every
 * text_2, or the two lists pairwise. */
request *api_parse_score(server *srv, const char *body, size_t len, api_error *e) {
    cJSON *root = api_parse_body(body, len, e);
    if (!root) return NULL;
    const cJSON **q = NULL, **d = NULL;
    int nq = 0, nd = 0;
    request *r = NULL;
    loom_err why;
    if (api_check_model(srv, root, e)) goto done;
    if (!(q = mem_array(MAX_INPUTS, sizeof *q, "the inputs", &why)) ||
        !(d = mem_array(MAX_INPUTS, sizeof *d, "the inputs", &why))) {
        api_fail(e, 500, NULL, "%s", why.msg);
        goto done;
    }
    if (input_list(get_field(root, "text_1"), "text_1", q, &nq, e) ||
        input_list(get_field(root, "text_2"), "text_2", d, &nd, e))
        goto done;
    if (nq != 1 && nq != nd) {
        api_fail(e, 400, "text_1", "'text_1' holds %d texts and 'text_2' %d: one against many, or as many of each", nq,
                 nd);
        goto done;
    }
    if (!(r = pooled_requests(srv, API_SCORE, "score", nd, e))) goto done;
    for (int i = 0; i < nd; i++) {
        char qn[32], dn[32];
        snprintf(qn, sizeof qn, "text_1[%d]", nq == 1 ? 0 : i);
        snprintf(dn, sizeof dn, "text_2[%d]", i);
        if (pair_prompt(srv, q[nq == 1 ? 0 : i], qn, d[i], dn, choice_of(r, i), e)) {
            request_unref(r);
            r = NULL;
            break;
        }
    }
done:
    free(q);
    free(d);
    cJSON_Delete(root);
    return r;
}

/* /v1/rerank: query against each of documents (strings, token ids, or {"text": ...}), the
 * results by relevance, top_n of them, with the documents' text when return_documents. */
request *api_parse_rerank(server *srv, const char *body, size_t len, api_error *e) {
    cJSON *root = api_parse_body(body, len, e), *echo = NULL;
    if (!root) return NULL;
    const cJSON *query = get_field(root, "query"), *docs = get_field(root, "documents"), *doc;
    long top_n = 0;
    bool return_documents = true;
    request *r = NULL;
    if (api_check_model(srv, root, e) || get_int(root, "top_n", 0, MAX_INPUTS, &top_n, e) ||
        get_bool(root, "return_documents", &return_documents, e))
        goto done;
    if (!query || (!cJSON_IsString(query) && !cJSON_IsArray(query))) {
        api_fail(e, 400, "query", "'query' must be a string or a list of token ids");
        goto done;
    }
    int n = cJSON_GetArraySize(docs);
    if (!cJSON_IsArray(docs) || !n || n > MAX_INPUTS) {
        api_fail(e, 400, "documents", "'documents' must be a list of 1 to %d documents", MAX_INPUTS);
        goto done;
    }
    if (!(r = pooled_requests(srv, API_RERANK, "rerank", n, e))) goto done;
    echo = cJSON_CreateObject();
    cJSON_AddNumberToObject(echo, "top_n", top_n ? (double)top_n : n);
    cJSON *texts = return_documents ? cJSON_AddArrayToObject(echo, "documents") : NULL;
    int i = 0;
    cJSON_ArrayForEach(doc, docs) {
        char dn[32];
        snprintf(dn, sizeof dn, "documents[%d]", i);
        const cJSON *text = cJSON_IsObject(doc) ? get_field(doc, "text") : doc;
        if (pair_prompt(srv, query, "query", text, dn, choice_of(r, i), e)) {
            snprintf(e->param, sizeof e->param, "documents");
            goto fail;
        }
        if (texts) cJSON_AddItemToArray(texts, cJSON_Duplicate(text, true));
        i++;
    }
    if (!(r->echoed = cJSON_PrintUnformatted(echo))) {
        api_fail(e, 500, NULL, "out of memory keeping the documents");
        goto fail;
    }
    goto done;
fail:
    request_unref(r);
    r = NULL;
done:
    cJSON_Delete(echo);
    cJSON_Delete(root);
    return r;
}

/* ---- the answers ---- */

/* The float32 bytes of v as base64 (malloc'd). */
static char *base64_floats(const double *v, int n) {
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t len = (size_t)n * 4;
    unsigned char *b = mem_alloc(len + 2, "an embedding's bytes", NULL);
    char *out = b ? mem_alloc((len + 2) / 3 * 4 + 1, "an embedding's base64", NULL) : NULL;
    if (!out) {
        free(b);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        float f = (float)v[i];
        memcpy(b + 4 * i, &f, 4); /* x86 and aarch64 are little-endian, as the format is */
    }
    b[len] = b[len + 1] = 0;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        unsigned x = (unsigned)b[i] << 16 | (unsigned)b[i + 1] << 8 | b[i + 2];
        out[o++] = digits[x >> 18 & 63], out[o++] = digits[x >> 12 & 63];
        out[o++] = i + 1 < len ? digits[x >> 6 & 63] : '=';
        out[o++] = i + 2 < len ? digits[x & 63] : '=';
    }
    out[o] = 0;
    free(b);
    return out;
}

/* The envelope and usage every pooling answer shares; `data` is where its results go. */
static cJSON *envelope(const server *srv, const request *r, const char *list, cJSON **data) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddNumberToObject(o, "created", (double)r->created);
    cJSON_AddStringToObject(o, "model", srv->o->served_name);
    *data = cJSON_AddArrayToObject(o, list);
    int tokens = 0;
    for (int i = 0; i < r->n_choices; i++) tokens += pick(r, i)->n_prompt;
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", tokens);
    cJSON_AddNumberToObject(u, "total_tokens", tokens);
    return o;
}

static char *embeddings_whole(const server *srv, const request *r) {
    cJSON *data, *o = envelope(srv, r, "data", &data);
    for (int i = 0; i < r->n_choices; i++) {
        const request *c = pick(r, i);
        cJSON *d = cJSON_CreateObject();
        cJSON_AddItemToArray(data, d);
        cJSON_AddStringToObject(d, "object", "embedding");
        cJSON_AddNumberToObject(d, "index", i);
        if (r->as_base64) {
            char *b64 = base64_floats(c->pooled, srv->info.out_width);
            if (!b64) {
                cJSON_Delete(o);
                return NULL;
            }
            cJSON_AddStringToObject(d, "embedding", b64);
            free(b64);
        } else {
            cJSON *v = cJSON_AddArrayToObject(d, "embedding");
            for (int j = 0; j < srv->info.out_width; j++)
                cJSON_AddItemToArray(v, cJSON_CreateNumber((float)c->pooled[j]));
        }
    }
    return api_print(o);
}

static char *score_whole(const server *srv, const request *r) {
    cJSON *data, *o = envelope(srv, r, "data", &data);
    for (int i = 0; i < r->n_choices; i++) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddItemToArray(data, d);
        cJSON_AddNumberToObject(d, "index", i);
        cJSON_AddStringToObject(d, "object", "score");
        cJSON_AddNumberToObject(d, "score", pick(r, i)->pooled[0]);
    }
    return api_print(o);
}

/* Results by relevance, best first (ties in the documents' order), the first top_n. */
static char *rerank_whole(const server *srv, const request *r) {
    cJSON *results, *o = envelope(srv, r, "results", &results), *echo = cJSON_Parse(r->echoed);
    const cJSON *texts = cJSON_GetObjectItemCaseSensitive(echo, "documents");
    int top = (int)cJSON_GetObjectItemCaseSensitive(echo, "top_n")->valuedouble, *order = NULL;
    if (!(order = mem_array((size_t)r->n_choices, sizeof *order, "the ranking", NULL))) {
        cJSON_Delete(echo);
        cJSON_Delete(o);
        return NULL;
    }
    for (int i = 0; i < r->n_choices; i++) {
        int k = i;
        for (; k > 0 && pick(r, order[k - 1])->pooled[0] < pick(r, i)->pooled[0]; k--) order[k] = order[k - 1];
        order[k] = i;
    }
    for (int k = 0; k < r->n_choices && k < top; k++) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddItemToArray(results, d);
        cJSON_AddNumberToObject(d, "index", order[k]);
        if (texts) {
            const cJSON *t = cJSON_GetArrayItem(texts, order[k]);
            cJSON *doc = cJSON_AddObjectToObject(d, "document");
            cJSON_AddItemToObject(doc, "text", cJSON_Duplicate(t, true));
        }
        cJSON_AddNumberToObject(d, "relevance_score", pick(r, order[k])->pooled[0]);
    }
    free(order);
    cJSON_Delete(echo);
    return api_print(o);
}

/* Pooled answers are whole: their parsers never set stream, so the stream events are none. */
const api_shape api_shape_embeddings = {embeddings_whole, NULL, NULL, NULL, NULL, api_error_body};
const api_shape api_shape_score = {score_whole, NULL, NULL, NULL, NULL, api_error_body};
const api_shape api_shape_rerank = {rerank_whole, NULL, NULL, NULL, NULL, api_error_body};

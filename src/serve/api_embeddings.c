/* POST /v1/embeddings, as OpenAI and vLLM serve it, for a model run with --task embed: `input`
 * a string, a list of strings, a list of token ids or a list of such lists; each input one
 * request (the first holds the others as its choices, which the scheduler runs side by side
 * through the same batches, replicas and parallel modes as generations), pooled as the model's
 * files say (scheduler.c). `encoding_format` "float" or "base64" (little-endian float32 bytes,
 * what OpenAI's Python client asks for by default); `dimensions` only as the model's own.
 * Base64 is written here: six lines, for which no library is worth a dependency. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/api.h"
#include "util/alloc.h"

#define MAX_INPUTS 2048 /* as OpenAI's API */

/* Input i's tokens into r: text tokenized with the model's special tokens, or ids checked. */
static int input_prompt(server *srv, const cJSON *v, int i, request *r, api_error *e) {
    loom_err err = {{0}};
    if (cJSON_IsString(v)) {
        size_t n;
        if (!srv->info.has_tokenizer)
            return api_fail(e, 400, "input", "the model has no tokenizer: give input[%d] as token ids", i);
        if (loom_tokenize(srv->m, v->valuestring, true, &r->prompt, &n, &err))
            return api_fail(e, 400, "input", "input[%d]: %s", i, err.msg);
        r->n_prompt = (int)n;
    } else {
        int n = cJSON_GetArraySize(v), k = 0;
        if (n && !(r->prompt = mem_array((size_t)n, sizeof *r->prompt, "an input's tokens", &err)))
            return api_fail(e, 500, NULL, "%s", err.msg);
        const cJSON *t;
        cJSON_ArrayForEach(t, v) {
            if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 ||
                t->valuedouble >= srv->info.vocab)
                return api_fail(e, 400, "input", "input[%d][%d] is not a token id in [0, %d)", i, k, srv->info.vocab);
            r->prompt[k++] = (int32_t)t->valuedouble;
        }
        r->n_prompt = k;
    }
    if (!r->n_prompt) return api_fail(e, 400, "input", "input[%d] is empty", i);
    if (r->n_prompt > srv->max_ctx)
        return api_fail(e, 400, "input",
                        "This model's maximum context length is %d tokens. However, input[%d] has %d tokens. Please "
                        "reduce the length of the input.",
                        srv->max_ctx, i, r->n_prompt);
    loom_err why;
    if (!(r->pooled = mem_zalloc((size_t)srv->info.out_width, sizeof *r->pooled, "an embedding", &why)))
        return api_fail(e, 500, NULL, "%s", why.msg);
    return 0;
}

/* input as a list of inputs: one string or id list alone is a list of one. */
static int input_list(const cJSON *input, const cJSON **items, int *n, api_error *e) {
    if (cJSON_IsString(input) || (cJSON_IsArray(input) && cJSON_IsNumber(input->child))) {
        items[0] = input;
        *n = 1;
        return 0;
    }
    if (!cJSON_IsArray(input) || !cJSON_GetArraySize(input))
        return api_fail(e, 400, "input",
                        "'input' must be a string, a list of strings, a list of token ids or a list of such lists");
    if (cJSON_GetArraySize(input) > MAX_INPUTS)
        return api_fail(e, 400, "input", "'input' holds %d inputs (at most %d)", cJSON_GetArraySize(input), MAX_INPUTS);
    *n = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, input) {
        if (!cJSON_IsString(v) && !cJSON_IsArray(v))
            return api_fail(e, 400, "input", "input[%d] must be a string or a list of token ids", *n);
        items[(*n)++] = v;
    }
    return 0;
}

request *api_parse_embeddings(server *srv, const char *body, size_t len, api_error *e) {
    cJSON *root = api_parse_body(body, len, e);
    if (!root) return NULL;
    const cJSON *fmt = get_field(root, "encoding_format"), **items = NULL;
    long dims = srv->info.out_width;
    int n = 0;
    request *r = NULL;
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
    loom_err why;
    if (!(items = mem_array(MAX_INPUTS, sizeof *items, "the inputs", &why))) {
        api_fail(e, 500, NULL, "%s", why.msg);
        goto done;
    }
    if (input_list(get_field(root, "input"), items, &n, e)) goto done;
    if (n > srv->o->max_queue) { /* they wait in the queue together */
        api_fail(e, 400, "input", "%d inputs do not fit in the queue (--max-queue %d)", n, srv->o->max_queue);
        goto done;
    }
    if (!(r = request_new(REQ_EMBED)) ||
        (n > 1 && !(r->choices = mem_zalloc((size_t)n, sizeof *r->choices, "a request's inputs", &why)))) {
        api_fail(e, 500, NULL, "out of memory for %d inputs", n);
        goto done;
    }
    r->api = API_EMBEDDINGS;
    r->serial = __atomic_fetch_add(&srv->next_id, 1, __ATOMIC_RELAXED);
    snprintf(r->id, sizeof r->id, "embd-%016llx", (unsigned long long)r->serial);
    r->created = time(NULL);
    r->as_base64 = fmt && !strcmp(fmt->valuestring, "base64");
    if (n > 1) r->choices[0] = r, r->n_choices = r->n_return = n;
    for (int i = 0; i < n; i++) {
        request *c = i ? request_new(REQ_EMBED) : r;
        if (!c) {
            api_fail(e, 500, NULL, "out of memory for %d inputs", n);
            goto fail;
        }
        if (i) r->choices[i] = c, c->index = i, c->kind = REQ_EMBED, c->api = API_EMBEDDINGS;
        if (input_prompt(srv, items[i], i, c, e)) goto fail;
    }
    goto done;
fail:
    request_unref(r);
    r = NULL;
done:
    free(items);
    cJSON_Delete(root);
    return r;
}

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

static char *embeddings_whole(const server *srv, const request *r) {
    cJSON *o = cJSON_CreateObject(), *data = NULL;
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "object", "list");
    data = cJSON_AddArrayToObject(o, "data");
    int tokens = 0;
    for (int i = 0; i < r->n_choices; i++) {
        const request *c = i ? r->choices[i] : r;
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "object", "embedding");
        cJSON_AddNumberToObject(d, "index", i);
        if (r->as_base64) {
            char *b64 = base64_floats(c->pooled, srv->info.out_width);
            if (!b64) {
                cJSON_Delete(d);
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
        cJSON_AddItemToArray(data, d);
        tokens += c->n_prompt;
    }
    cJSON_AddStringToObject(o, "model", srv->o->served_name);
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", tokens);
    cJSON_AddNumberToObject(u, "total_tokens", tokens);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* Embeddings are answered whole: the parser never sets stream, so the stream events are none. */
const api_shape api_shape_embeddings = {embeddings_whole, NULL, NULL, NULL, NULL, api_error_body};

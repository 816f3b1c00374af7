/* Request bodies of the OpenAI API into requests: every field checked for its type and range,
 * an error naming the field otherwise (see api.h). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/api.h"
#include "template/template.h"
#include "util/alloc.h"

int api_fail(api_error *e, int status, const char *param, const char *fmt, ...) {
    e->status = status;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    e->code = NULL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

/* The server ran out of memory for this request: a 500 with the allocator's message. */
static int out_of_memory(api_error *e, const loom_err *why) { return api_fail(e, 500, NULL, "%s", why->msg); }

/* A member that is present and not null. */
static const cJSON *field(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static int get_number(const cJSON *o, const char *k, double lo, double hi, double *out, api_error *e) {
    const cJSON *v = field(o, k);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi)
        return api_fail(e, 400, k, "'%s' must be a number in [%g, %g]", k, lo, hi);
    *out = v->valuedouble;
    return 0;
}

static int get_int(const cJSON *o, const char *k, long lo, long hi, long *out, api_error *e) {
    const cJSON *v = field(o, k);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi)
        return api_fail(e, 400, k, "'%s' must be an integer in [%ld, %ld]", k, lo, hi);
    *out = (long)v->valuedouble;
    return 0;
}

static int get_bool(const cJSON *o, const char *k, bool *out, api_error *e) {
    const cJSON *v = field(o, k);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return api_fail(e, 400, k, "'%s' must be a boolean", k);
    *out = cJSON_IsTrue(v);
    return 0;
}

static int check_model(const server *srv, const cJSON *root, api_error *e) {
    const cJSON *v = field(root, "model");
    if (!v) return 0;
    if (!cJSON_IsString(v)) return api_fail(e, 400, "model", "'model' must be a string");
    if (strcmp(v->valuestring, srv->o->served_name)) {
        api_fail(e, 404, "model", "The model `%.200s` does not exist (this server serves `%.200s`)", v->valuestring,
                 srv->o->served_name);
        e->code = "model_not_found";
        return -1;
    }
    return 0;
}

/* Fields loom does not implement are refused when they would change the result. */
static int refuse_unsupported(const cJSON *root, req_kind kind, api_error *e) {
    long n = 1, best_of = 1;
    double pres = 0, freq = 0, rep = 1;
    bool echo = false;
    if (get_int(root, "n", 1, 1 << 20, &n, e) || get_int(root, "best_of", 1, 1 << 20, &best_of, e) ||
        get_number(root, "presence_penalty", -2, 2, &pres, e) ||
        get_number(root, "frequency_penalty", -2, 2, &freq, e) ||
        get_number(root, "repetition_penalty", 0, 1e6, &rep, e) || get_bool(root, "echo", &echo, e))
        return -1;
    if (n != 1) return api_fail(e, 400, "n", "'n' must be 1: loom returns one choice per request");
    if (best_of != 1) return api_fail(e, 400, "best_of", "'best_of' must be 1: loom returns one choice per request");
    if (pres != 0 || freq != 0 || rep != 1)
        return api_fail(e, 400,
                        pres != 0   ? "presence_penalty"
                        : freq != 0 ? "frequency_penalty"
                                    : "repetition_penalty",
                        "presence, frequency and repetition penalties are not supported");
    if (echo) return api_fail(e, 400, "echo", "'echo' is not supported");
    const cJSON *bias = field(root, "logit_bias");
    if (bias && cJSON_GetArraySize(bias) > 0) return api_fail(e, 400, "logit_bias", "'logit_bias' is not supported");
    if (kind == REQ_COMPLETION && field(root, "suffix")) return api_fail(e, 400, "suffix", "'suffix' is not supported");
    return 0;
}

/* Adds stop string s (an empty one stops nothing: dropped). */
static int add_stop(request *r, const char *s, api_error *e) {
    loom_err why;
    if (!s[0]) return 0;
    if (!(r->stop[r->n_stop] = mem_strdup(s, "a stop string", &why))) return out_of_memory(e, &why);
    r->n_stop++;
    return 0;
}

static int parse_stop(const cJSON *root, request *r, api_error *e) {
    const cJSON *v = field(root, "stop");
    if (!v) return 0;
    if (cJSON_IsString(v)) return add_stop(r, v->valuestring, e);
    if (!cJSON_IsArray(v)) return api_fail(e, 400, "stop", "'stop' must be a string or an array of strings");
    if (cJSON_GetArraySize(v) > REQ_MAX_STOPS)
        return api_fail(e, 400, "stop", "'stop' has %d strings (at most %d)", cJSON_GetArraySize(v), REQ_MAX_STOPS);
    const cJSON *s;
    cJSON_ArrayForEach(s, v) {
        if (!cJSON_IsString(s)) return api_fail(e, 400, "stop", "'stop' must be a string or an array of strings");
        if (add_stop(r, s->valuestring, e)) return -1;
    }
    return 0;
}

static int parse_sampling(server *srv, const cJSON *root, request *r, api_error *e) {
    double temp = 1, top_p = 1;
    long top_k = 0, seed = -1;
    if (get_number(root, "temperature", 0, 100, &temp, e) || get_number(root, "top_p", 1e-9, 1, &top_p, e) ||
        get_int(root, "top_k", -1, 1 << 30, &top_k, e) || get_int(root, "seed", -(1L << 62), 1L << 62, &seed, e) ||
        get_bool(root, "ignore_eos", &r->sampling.ignore_eos, e))
        return -1;
    uint64_t n = __atomic_fetch_add(&srv->next_id, 1, __ATOMIC_RELAXED);
    r->sampling.temperature = (float)temp;
    r->sampling.top_p = (float)top_p;
    r->sampling.top_k = top_k < 0 ? 0 : (int)top_k;
    r->sampling.seed = field(root, "seed") ? (uint64_t)seed : srv->o->seed + n * 0x9e3779b97f4a7c15ull;
    snprintf(r->id, sizeof r->id, "%s-%016llx", r->kind == REQ_CHAT ? "chatcmpl" : "cmpl", (unsigned long long)n);
    loom_err err = {{0}};
    if (!(r->smp = loom_sampler_new(&r->sampling, srv->info.vocab, &err))) return api_fail(e, 400, NULL, "%s", err.msg);
    return 0;
}

static int parse_output(const cJSON *root, request *r, api_error *e) {
    if (get_bool(root, "stream", &r->stream, e)) return -1;
    const cJSON *so = field(root, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so)) return api_fail(e, 400, "stream_options", "'stream_options' must be an object");
        if (!r->stream)
            return api_fail(e, 400, "stream_options", "'stream_options' is only allowed with 'stream': true");
        if (get_bool(so, "include_usage", &r->include_usage, e)) return -1;
    }
    long top = 0;
    if (r->kind == REQ_COMPLETION) { /* the legacy API: logprobs is the number of alternatives */
        const cJSON *lp = field(root, "logprobs");
        if (lp && get_int(root, "logprobs", 0, REQ_MAX_TOP_LOGPROBS, &top, e)) return -1;
        r->logprobs = lp != NULL;
    } else {
        if (get_bool(root, "logprobs", &r->logprobs, e) ||
            get_int(root, "top_logprobs", 0, REQ_MAX_TOP_LOGPROBS, &top, e))
            return -1;
        if (top && !r->logprobs) return api_fail(e, 400, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
    }
    r->top_logprobs = (int)top;
    return 0;
}

static int tokenize(server *srv, const char *text, bool add_special, request *r, api_error *e) {
    loom_err err = {{0}};
    size_t n;
    if (!srv->info.has_tokenizer)
        return api_fail(e, 400, "prompt", "the model has no tokenizer: give the prompt as token ids");
    if (loom_tokenize(srv->m, text, add_special, &r->prompt, &n, &err))
        return api_fail(e, 400, "prompt", "%s", err.msg);
    r->n_prompt = (int)n;
    return 0;
}

/* prompt: a string, token ids, or a list holding one of those. */
static int parse_prompt(server *srv, const cJSON *root, request *r, api_error *e) {
    const cJSON *p = field(root, "prompt");
    if (!p) return api_fail(e, 400, "prompt", "'prompt' is required");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && !cJSON_IsNumber(p->child)) p = p->child;
    if (cJSON_IsString(p)) return tokenize(srv, p->valuestring, true, r, e);
    if (!cJSON_IsArray(p)) return api_fail(e, 400, "prompt", "'prompt' must be a string or an array of token ids");
    int n = cJSON_GetArraySize(p);
    loom_err why;
    if (!(r->prompt = mem_array((size_t)n, sizeof *r->prompt, "the prompt", &why))) return out_of_memory(e, &why);
    const cJSON *t;
    cJSON_ArrayForEach(t, p) {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 ||
            t->valuedouble >= srv->info.vocab) {
            if (cJSON_IsString(t) || cJSON_IsArray(t))
                return api_fail(e, 400, "prompt", "'prompt' holds %d prompts: loom takes one per request", n);
            return api_fail(e, 400, "prompt", "'prompt' token %d is not a token id in [0, %d)", r->n_prompt,
                            srv->info.vocab);
        }
        r->prompt[r->n_prompt++] = (int32_t)t->valuedouble;
    }
    return 0;
}

/* A copy of the messages as this template expects them (its capabilities, template.h): text
 * parts joined into one string; tool call arguments (a JSON string in OpenAI's API) parsed into
 * objects, as vLLM passes them, unless the template shows the string itself; and content null
 * beside tool calls made "" for templates that fail on null. */
static cJSON *template_messages(const cJSON *msgs, chat_template_caps caps, api_error *e) {
    if (!cJSON_IsArray(msgs) || !cJSON_GetArraySize(msgs))
        return api_fail(e, 400, "messages", "'messages' must be a non-empty array"), NULL;
    cJSON *out = cJSON_Duplicate(msgs, true);
    int i = 0;
    cJSON *m;
    cJSON_ArrayForEach(m, out) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role)) {
            api_fail(e, 400, "messages", "messages[%d] must be an object with a string 'role'", i);
            goto fail;
        }
        cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (cJSON_IsArray(content)) {
            char *joined = NULL;
            size_t len = 0, cap = 0;
            loom_err why;
            if (ARRAY_RESERVE(joined, cap, 1, "a message's text", &why)) {
                out_of_memory(e, &why);
                goto fail;
            }
            joined[0] = 0;
            const cJSON *part;
            cJSON_ArrayForEach(part, content) {
                const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type"),
                            *text = cJSON_GetObjectItemCaseSensitive(part, "text");
                if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text)) {
                    free(joined);
                    api_fail(e, 400, "messages", "messages[%d]: only text content parts are supported", i);
                    goto fail;
                }
                size_t n = strlen(text->valuestring);
                if (ARRAY_RESERVE(joined, cap, len + n + 2, "a message's text", &why)) {
                    free(joined);
                    out_of_memory(e, &why);
                    goto fail;
                }
                if (len) joined[len++] = '\n';
                memcpy(joined + len, text->valuestring, n + 1);
                len += n;
            }
            cJSON_ReplaceItemInObjectCaseSensitive(m, "content", cJSON_CreateString(joined));
            free(joined);
        } else if (content && !cJSON_IsString(content) && !cJSON_IsNull(content)) {
            api_fail(e, 400, "messages", "messages[%d].content must be a string, an array of parts or null", i);
            goto fail;
        }
        cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), *call;
        if (!cJSON_IsArray(calls)) calls = NULL;
        if (calls && !caps.null_content && (!content || cJSON_IsNull(content))) {
            if (content) cJSON_ReplaceItemInObjectCaseSensitive(m, "content", cJSON_CreateString(""));
            else cJSON_AddStringToObject(m, "content", "");
        }
        cJSON_ArrayForEach(call, calls) {
            cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
            cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
            if (!cJSON_IsString(args)) continue;
            cJSON *parsed = cJSON_Parse(args->valuestring);
            if (!parsed) {
                api_fail(e, 400, "messages", "messages[%d]: tool call arguments are not valid JSON", i);
                goto fail;
            }
            if (chat_template_wants_objects(caps)) cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", parsed);
            else cJSON_Delete(parsed);
        }
        i++;
    }
    return out;
fail:
    cJSON_Delete(out);
    return NULL;
}

/* Renders the chat template for a body with `messages` (chat completions, /tokenize). */
static char *render_chat(server *srv, const cJSON *root, api_error *e) {
    if (!srv->tmpl.plain)
        return api_fail(e, 400, "messages",
                        "the model has no chat template; start the server with --chat-template FILE"),
               NULL;
    const cJSON *tools = field(root, "tools");
    const chat_template *tmpl = tools ? srv->tmpl.tools : srv->tmpl.plain;
    cJSON *msgs = template_messages(field(root, "messages"), tools ? srv->tmpl.tools_caps : srv->tmpl.plain_caps, e);
    if (!msgs) return NULL;
    cJSON *ctx = cJSON_CreateObject();
    const cJSON *kw = field(root, "chat_template_kwargs"), *v;
    if (kw && !cJSON_IsObject(kw)) {
        api_fail(e, 400, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
        goto fail;
    }
    if (tools && !cJSON_IsArray(tools)) {
        api_fail(e, 400, "tools", "'tools' must be an array");
        goto fail;
    }
    bool agp = true;
    if (get_bool(root, "add_generation_prompt", &agp, e)) goto fail;
    cJSON_ArrayForEach(v, kw) cJSON_AddItemToObject(ctx, v->string, cJSON_Duplicate(v, true));
    cJSON_AddItemToObject(ctx, "messages", msgs);
    msgs = NULL;
    if (tools) cJSON_AddItemToObject(ctx, "tools", cJSON_Duplicate(tools, true));
    cJSON_AddBoolToObject(ctx, "add_generation_prompt", agp);
    if (srv->tmpl.bos_token) cJSON_AddStringToObject(ctx, "bos_token", srv->tmpl.bos_token);
    if (srv->tmpl.eos_token) cJSON_AddStringToObject(ctx, "eos_token", srv->tmpl.eos_token);
    char *text = NULL;
    loom_err err = {{0}};
    if (chat_template_render(tmpl, ctx, &text, &err)) api_fail(e, 400, "messages", "%s", err.msg);
    cJSON_Delete(ctx);
    return text;
fail:
    cJSON_Delete(msgs);
    cJSON_Delete(ctx);
    return NULL;
}

static cJSON *parse_body(const char *body, size_t len, api_error *e) {
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root) {
        size_t at = cJSON_GetErrorPtr() ? (size_t)(cJSON_GetErrorPtr() - body) : 0;
        api_fail(e, 400, NULL, "the body is not valid JSON (error near byte %zu)", at < len ? at : len);
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        api_fail(e, 400, NULL, "the body must be a JSON object");
        return NULL;
    }
    return root;
}

/* Prompt and output length against the context, as vLLM words it. */
static int fit_context(const server *srv, request *r, long max_tokens, api_error *e) {
    if (!r->n_prompt) return api_fail(e, 400, "prompt", "the prompt is empty");
    if (r->n_prompt >= srv->max_ctx)
        return api_fail(e, 400, "prompt",
                        "This model's maximum context length is %d tokens. However, your request has %d input tokens. "
                        "Please reduce the length of the input.",
                        srv->max_ctx, r->n_prompt);
    if (max_tokens > 0 && r->n_prompt + max_tokens > srv->max_ctx)
        return api_fail(
            e, 400, "max_tokens",
            "This model's maximum context length is %d tokens. However, you requested %ld tokens (%d in "
            "the prompt, %ld for the completion). Please reduce the length of the prompt or the completion.",
            srv->max_ctx, r->n_prompt + max_tokens, r->n_prompt, max_tokens);
    r->max_tokens = max_tokens > 0 ? (int)max_tokens : srv->max_ctx - r->n_prompt;
    return 0;
}

request *api_parse_generate(server *srv, req_kind kind, const char *body, size_t len, api_error *e) {
    cJSON *root = parse_body(body, len, e);
    if (!root) return NULL;
    request *r = request_new(kind);
    if (!r) {
        cJSON_Delete(root);
        api_fail(e, 500, NULL, "cannot allocate %zu bytes for a request", sizeof *r);
        return NULL;
    }
    long max_tokens = kind == REQ_COMPLETION ? 16 : 0; /* OpenAI's defaults: 16; chat: what fits */
    const char *max_key =
        kind == REQ_CHAT && field(root, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (check_model(srv, root, e) || refuse_unsupported(root, kind, e) ||
        get_int(root, max_key, 1, 1 << 30, &max_tokens, e))
        goto fail;
    if (kind == REQ_CHAT) {
        if (!(r->rendered = render_chat(srv, root, e)) || tokenize(srv, r->rendered, false, r, e)) goto fail;
    } else if (parse_prompt(srv, root, r, e)) {
        goto fail;
    }
    if (fit_context(srv, r, max_tokens, e) || parse_stop(root, r, e) || parse_output(root, r, e) ||
        parse_sampling(srv, root, r, e))
        goto fail;
    loom_err err = {{0}};
    if (srv->info.has_tokenizer && !(r->dec = loom_detokenizer_new(srv->m, &err))) {
        api_fail(e, 500, NULL, "%s", err.msg);
        goto fail;
    }
    cJSON_Delete(root);
    return r;
fail:
    cJSON_Delete(root);
    request_unref(r);
    return NULL;
}

static cJSON *ids_array(const int32_t *ids, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    return a;
}

char *api_tokenize(server *srv, const char *body, size_t len, api_error *e) {
    cJSON *root = parse_body(body, len, e);
    if (!root) return NULL;
    request *r = request_new(REQ_COMPLETION);
    char *out = NULL;
    bool chat = field(root, "messages") != NULL, add_special = !chat;
    if (!r) {
        api_fail(e, 500, NULL, "cannot allocate %zu bytes for a request", sizeof *r);
        goto done;
    }
    if (check_model(srv, root, e) || get_bool(root, "add_special_tokens", &add_special, e)) goto done;
    if (chat) {
        if (!(r->rendered = render_chat(srv, root, e)) || tokenize(srv, r->rendered, add_special, r, e)) goto done;
    } else {
        const cJSON *p = field(root, "prompt");
        if (!cJSON_IsString(p)) {
            api_fail(e, 400, "prompt", "'prompt' (a string) or 'messages' is required");
            goto done;
        }
        if (tokenize(srv, p->valuestring, add_special, r, e)) goto done;
    }
    cJSON *res = cJSON_CreateObject();
    cJSON_AddNumberToObject(res, "count", r->n_prompt);
    cJSON_AddNumberToObject(res, "max_model_len", srv->max_ctx);
    cJSON_AddItemToObject(res, "tokens", ids_array(r->prompt, r->n_prompt));
    if (chat) cJSON_AddStringToObject(res, "prompt", r->rendered);
    out = cJSON_PrintUnformatted(res);
    cJSON_Delete(res);
done:
    cJSON_Delete(root);
    request_unref(r);
    return out;
}

char *api_detokenize(server *srv, const char *body, size_t len, api_error *e) {
    cJSON *root = parse_body(body, len, e);
    if (!root) return NULL;
    const cJSON *t = field(root, "tokens"), *v;
    char *out = NULL;
    if (check_model(srv, root, e)) goto done;
    if (!cJSON_IsArray(t)) {
        api_fail(e, 400, "tokens", "'tokens' must be an array of token ids");
        goto done;
    }
    if (!srv->info.has_tokenizer) {
        api_fail(e, 400, "tokens", "the model has no tokenizer");
        goto done;
    }
    int n = cJSON_GetArraySize(t), k = 0;
    loom_err why;
    int32_t *ids = mem_array((size_t)n, sizeof *ids, "the tokens", &why);
    if (!ids) {
        out_of_memory(e, &why);
        goto done;
    }
    cJSON_ArrayForEach(v, t) {
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
            v->valuedouble >= srv->info.vocab) {
            api_fail(e, 400, "tokens", "'tokens'[%d] is not a token id in [0, %d)", k, srv->info.vocab);
            free(ids);
            goto done;
        }
        ids[k++] = (int32_t)v->valuedouble;
    }
    char *text = loom_detokenize(srv->m, ids, n, false, &why);
    free(ids);
    if (!text) {
        out_of_memory(e, &why);
        goto done;
    }
    cJSON *res = cJSON_CreateObject();
    cJSON_AddStringToObject(res, "prompt", text);
    free(text);
    out = cJSON_PrintUnformatted(res);
    cJSON_Delete(res);
done:
    cJSON_Delete(root);
    return out;
}

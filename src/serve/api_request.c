/* Request bodies of the OpenAI API into requests: every field checked for its type and range,
 * an error naming the field otherwise (see api.h). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/api.h"
#include "serve/fields.h"
#include "serve/structured.h"
#include "serve/tool_calls.h"
#include "serve/tool_grammar.h"
#include "template/template.h"
#include "util/alloc.h"

/* The server ran out of memory for this request: a 500 with the allocator's message. */
static int out_of_memory(api_error *e, const loom_err *why) { return api_fail(e, 500, NULL, "%s", why->msg); }

/* prompt: a string, token ids, or a list holding one of those (that one: NULL when absent). */
static const cJSON *prompt_value(const cJSON *root) {
    const cJSON *p = get_field(root, "prompt");
    return cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && !cJSON_IsNumber(p->child) ? p->child : p;
}

int api_check_model(const server *srv, const cJSON *root, api_error *e) {
    const cJSON *v = get_field(root, "model");
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

/* Fields loom does not implement are refused when they would change the result (vLLM's
 * extensions among them); so are those of one API that the other carries (echo, best_of:
 * completions only). */
static int refuse_unsupported(const cJSON *root, req_kind kind, api_error *e) {
    if (kind == REQ_COMPLETION && get_field(root, "suffix"))
        return api_fail(e, 400, "suffix", "'suffix' is not supported");
    static const char *const vllm_flags[] = {"use_beam_search", "include_stop_str_in_output"};
    for (size_t i = 0; i < sizeof vllm_flags / sizeof *vllm_flags; i++) {
        bool on = false;
        if (get_bool(root, vllm_flags[i], &on, e)) return -1;
        if (on) return api_fail(e, 400, vllm_flags[i], "'%s' is not supported", vllm_flags[i]);
    }
    const cJSON *bad_words = get_field(root, "bad_words");
    if (bad_words && cJSON_GetArraySize(bad_words) > 0)
        return api_fail(e, 400, "bad_words", "'bad_words' is not supported");
    if (get_field(root, "prompt_logprobs"))
        return api_fail(e, 400, "prompt_logprobs",
                        "'prompt_logprobs' is not supported (loom computes no prompt logprobs)");
    long best_of = 1;
    bool echo = false;
    if (kind == REQ_CHAT && (get_int(root, "best_of", 1, 1, &best_of, e) || get_bool(root, "echo", &echo, e) ||
                             (echo && api_fail(e, 400, "echo", "'echo' is only supported by /v1/completions"))))
        return -1;
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
    const cJSON *v = get_field(root, "stop");
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
    double temp = 1, top_p = 1, min_p = 0;
    long top_k = 0, seed = -1;
    if (get_number(root, "temperature", 0, 100, &temp, e) || get_number(root, "top_p", 1e-9, 1, &top_p, e) ||
        get_number(root, "min_p", 0, 1, &min_p, e) || get_int(root, "top_k", -1, 1 << 30, &top_k, e) ||
        get_int(root, "seed", -(1L << 62), 1L << 62, &seed, e) ||
        get_bool(root, "ignore_eos", &r->sampling.ignore_eos, e))
        return -1;
    uint64_t n = __atomic_fetch_add(&srv->next_id, 1, __ATOMIC_RELAXED);
    r->sampling.temperature = (float)temp;
    r->sampling.top_p = (float)top_p;
    r->sampling.top_k = top_k < 0 ? 0 : (int)top_k;
    r->sampling.min_p = (float)min_p;
    r->sampling.seed = get_field(root, "seed") ? (uint64_t)seed : srv->o->seed + n * 0x9e3779b97f4a7c15ull;
    r->serial = n;
    snprintf(r->id, sizeof r->id, "%s-%016llx", r->kind == REQ_CHAT ? "chatcmpl" : "cmpl", (unsigned long long)n);
    loom_err err = {{0}};
    if (!(r->smp = loom_sampler_new(&r->sampling, srv->info.vocab, &err))) return api_fail(e, 400, NULL, "%s", err.msg);
    return 0;
}

/* logit_bias: {"token id": bias}, ids in the vocabulary, biases clamped to [-100, 100] as vLLM
 * clamps them. */
static int parse_logit_bias(server *srv, const cJSON *root, request *r, api_error *e) {
    const cJSON *b = get_field(root, "logit_bias"), *v;
    if (!b) return 0;
    if (!cJSON_IsObject(b))
        return api_fail(e, 400, "logit_bias", "'logit_bias' must be an object of token ids (strings) to numbers");
    int n = cJSON_GetArraySize(b);
    loom_err why;
    if (n && (!(r->bias_id = mem_array((size_t)n, sizeof *r->bias_id, "logit_bias", &why)) ||
              !(r->bias = mem_array((size_t)n, sizeof *r->bias, "logit_bias", &why))))
        return out_of_memory(e, &why);
    cJSON_ArrayForEach(v, b) {
        char *end;
        long id = strtol(v->string, &end, 10);
        if (end == v->string || *end || id < 0 || id >= srv->info.vocab)
            return api_fail(e, 400, "logit_bias", "'logit_bias' key '%.40s' is not a token id in [0, %d)", v->string,
                            srv->info.vocab);
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
            return api_fail(e, 400, "logit_bias", "'logit_bias' value of token %ld must be a number", id);
        r->bias_id[r->n_bias] = (int32_t)id;
        r->bias[r->n_bias++] = (float)fmin(100, fmax(-100, v->valuedouble));
    }
    return 0;
}

/* A list of token ids, each in the vocabulary (stop_token_ids, allowed_token_ids), into *ids. */
static int parse_ids(server *srv, const cJSON *root, const char *k, int32_t **ids, int *n, api_error *e) {
    const cJSON *a = get_field(root, k), *v;
    if (!a) return 0;
    if (!cJSON_IsArray(a)) return api_fail(e, 400, k, "'%s' must be an array of token ids", k);
    int len = cJSON_GetArraySize(a);
    loom_err why;
    if (len && !(*ids = mem_array((size_t)len, sizeof **ids, k, &why))) return out_of_memory(e, &why);
    cJSON_ArrayForEach(v, a) {
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
            v->valuedouble >= srv->info.vocab)
            return api_fail(e, 400, k, "'%s'[%d] is not a token id in [0, %d)", k, *n, srv->info.vocab);
        (*ids)[(*n)++] = (int32_t)v->valuedouble;
    }
    return 0;
}

/* What changes a request's logits before sampling (logits.h): allowed_token_ids, penalties,
 * logit_bias, min_tokens, with vLLM's ranges. After fit_context (min_tokens is checked against max_tokens). */
static int parse_logits(server *srv, const cJSON *root, request *r, api_error *e) {
    double pres = 0, freq = 0, rep = 1;
    long min_tokens = 0;
    if (get_number(root, "presence_penalty", -2, 2, &pres, e) ||
        get_number(root, "frequency_penalty", -2, 2, &freq, e) ||
        get_number(root, "repetition_penalty", 0, 1e6, &rep, e) ||
        get_int(root, "min_tokens", 0, 1 << 30, &min_tokens, e) || parse_logit_bias(srv, root, r, e) ||
        parse_ids(srv, root, "stop_token_ids", &r->stop_ids, &r->n_stop_ids, e) ||
        parse_ids(srv, root, "allowed_token_ids", &r->allowed_ids, &r->n_allowed, e))
        return -1;
    if (get_field(root, "allowed_token_ids") && !r->n_allowed)
        return api_fail(e, 400, "allowed_token_ids", "'allowed_token_ids' must not be empty");
    if (rep <= 0) return api_fail(e, 400, "repetition_penalty", "'repetition_penalty' must be greater than 0");
    if (min_tokens > r->max_tokens)
        return api_fail(e, 400, "min_tokens", "'min_tokens' (%ld) must be at most max_tokens (%d)", min_tokens,
                        r->max_tokens);
    r->presence_penalty = (float)pres;
    r->frequency_penalty = (float)freq;
    r->repetition_penalty = (float)rep;
    r->min_tokens = (int)min_tokens;
    return 0;
}

/* echo (completions): the prompt's text before the output; the prompt as given when it is text,
 * else its ids decoded. Prompt log-probabilities are not computed, so not with logprobs. */
static int parse_echo(server *srv, const cJSON *root, request *r, api_error *e) {
    bool echo = false;
    if (get_bool(root, "echo", &echo, e)) return -1;
    if (!echo) return 0;
    if (r->logprobs)
        return api_fail(e, 400, "echo", "'echo' with 'logprobs' is not supported (loom computes no prompt logprobs)");
    if (!srv->info.has_tokenizer) return api_fail(e, 400, "echo", "'echo' needs a model with a tokenizer");
    const cJSON *prompt = prompt_value(root);
    loom_err why;
    r->echo = cJSON_IsString(prompt) ? mem_strdup(prompt->valuestring, "the echoed prompt", &why)
                                     : loom_detokenize(srv->m, r->prompt, (size_t)r->n_prompt, false, &why);
    return r->echo ? 0 : out_of_memory(e, &why);
}

/* n choices, of best_of generated (completions; not streamed): each a request of its own, seeded
 * seed + index as vLLM seeds its child requests. */
static int make_choices(server *srv, const cJSON *root, request *r, api_error *e) {
    long n = 1, best_of = 0;
    if (get_int(root, "n", 1, REQ_MAX_CHOICES, &n, e) || get_int(root, "best_of", 1, REQ_MAX_CHOICES, &best_of, e))
        return -1;
    if (!best_of) best_of = n;
    if (best_of < n) return api_fail(e, 400, "best_of", "'best_of' (%ld) must be at least n (%ld)", best_of, n);
    if (best_of > n && r->stream) return api_fail(e, 400, "best_of", "'best_of' greater than n cannot be streamed");
    if (best_of == 1) return 0;
    if (r->tool_parser) /* the stream reads one choice's calls */
        return api_fail(e, 400, best_of > n ? "best_of" : "n", "more than one choice with tools is not supported");
    if (best_of > srv->o->max_queue) /* they wait in the queue together */
        return api_fail(e, 400, best_of > n ? "best_of" : "n", "%ld choices do not fit in the queue (--max-queue %d)",
                        best_of, srv->o->max_queue);
    loom_err why;
    if (!(r->choices = mem_zalloc((size_t)best_of, sizeof *r->choices, "a request's choices", &why)))
        return out_of_memory(e, &why);
    r->choices[0] = r;
    r->n_choices = (int)best_of;
    r->n_return = (int)n;
    r->ranked = best_of > n;
    for (int i = 1; i < r->n_choices; i++) {
        request *c = r->choices[i] = request_clone(r, &why);
        if (!c) return out_of_memory(e, &why);
        c->index = i;
        c->sampling.seed = r->sampling.seed + (uint64_t)i;
        if (!(c->smp = loom_sampler_new(&c->sampling, srv->info.vocab, &why)) ||
            (srv->info.has_tokenizer && !(c->dec = loom_detokenizer_new(srv->m, &why))))
            return api_fail(e, 500, NULL, "%s", why.msg);
    }
    return 0;
}

static int parse_output(const cJSON *root, request *r, api_error *e) {
    if (get_bool(root, "stream", &r->stream, e)) return -1;
    const cJSON *so = get_field(root, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so)) return api_fail(e, 400, "stream_options", "'stream_options' must be an object");
        if (!r->stream)
            return api_fail(e, 400, "stream_options", "'stream_options' is only allowed with 'stream': true");
        if (get_bool(so, "include_usage", &r->include_usage, e)) return -1;
    }
    long top = 0;
    if (r->kind == REQ_COMPLETION) { /* the legacy API: logprobs is the number of alternatives */
        const cJSON *lp = get_field(root, "logprobs");
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

static int parse_prompt(server *srv, const cJSON *root, request *r, api_error *e) {
    const cJSON *p = prompt_value(root);
    if (!p) return api_fail(e, 400, "prompt", "'prompt' is required");
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
 * or absent beside tool calls made "" for templates that fail on null, or null for those that
 * show calls only then (chat_call_content). */
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
            static const char *const text[] = {"text", NULL};
            int bad;
            char *joined = text_of_parts(content, text, &bad);
            if (!joined) {
                if (bad == -2) api_fail(e, 500, NULL, "out of memory reading messages[%d]", i);
                else api_fail(e, 400, "messages", "messages[%d]: only text content parts are supported", i);
                goto fail;
            }
            cJSON_ReplaceItemInObjectCaseSensitive(m, "content", cJSON_CreateString(joined));
            free(joined);
        } else if (content && !cJSON_IsString(content) && !cJSON_IsNull(content)) {
            api_fail(e, 400, "messages", "messages[%d].content must be a string, an array of parts or null", i);
            goto fail;
        }
        cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), *call;
        if (!cJSON_IsArray(calls)) calls = NULL;
        if (calls && caps.call_content != CALL_CONTENT_DROPPED && (!content || cJSON_IsNull(content))) {
            cJSON *shape = caps.call_content == CALL_CONTENT_EMPTY ? cJSON_CreateString("") : cJSON_CreateNull();
            if (content) cJSON_ReplaceItemInObjectCaseSensitive(m, "content", shape);
            else cJSON_AddItemToObject(m, "content", shape);
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

/* tools[i]: {"type": "function", "function": {"name", "parameters": {...}}}. */
static int check_tools(const cJSON *tools, api_error *e) {
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type"), *fn = get_field(t, "function");
        const cJSON *name = fn ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL,
                    *params = fn ? get_field(fn, "parameters") : NULL;
        if (!cJSON_IsObject(t) || !cJSON_IsString(type) || strcmp(type->valuestring, "function"))
            return api_fail(e, 400, "tools", "'tools[%d]' must be an object with \"type\": \"function\"", i);
        if (!cJSON_IsObject(fn) || !cJSON_IsString(name) || !name->valuestring[0])
            return api_fail(e, 400, "tools", "'tools[%d].function' must be an object with a non-empty string 'name'",
                            i);
        if (params && !cJSON_IsObject(params))
            return api_fail(e, 400, "tools", "'tools[%d].function.parameters' must be an object (a JSON Schema)", i);
        i++;
    }
    return 0;
}

/* Renders the chat template for a body with `messages` (chat completions, /tokenize). */
static char *render_chat(server *srv, const cJSON *root, api_error *e) {
    if (!srv->tmpl.plain)
        return api_fail(e, 400, "messages",
                        "the model has no chat template; start the server with --chat-template FILE"),
               NULL;
    const cJSON *tools = get_field(root, "tools");
    const chat_template *tmpl = tools ? srv->tmpl.tools : srv->tmpl.plain;
    cJSON *msgs =
        template_messages(get_field(root, "messages"), tools ? srv->tmpl.tools_caps : srv->tmpl.plain_caps, e);
    if (!msgs) return NULL;
    cJSON *ctx = cJSON_CreateObject();
    const cJSON *kw = get_field(root, "chat_template_kwargs"), *v;
    if (kw && !cJSON_IsObject(kw)) {
        api_fail(e, 400, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
        goto fail;
    }
    if (tools && !cJSON_IsArray(tools)) {
        api_fail(e, 400, "tools", "'tools' must be an array");
        goto fail;
    }
    if (tools && check_tools(tools, e)) goto fail;
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
    bool keep_nulls = (tools ? srv->tmpl.tools_caps : srv->tmpl.plain_caps).call_content == CALL_CONTENT_NONE;
    if (chat_template_render(tmpl, ctx, keep_nulls, &text, &err)) api_fail(e, 400, "messages", "%s", err.msg);
    cJSON_Delete(ctx);
    return text;
fail:
    cJSON_Delete(msgs);
    cJSON_Delete(ctx);
    return NULL;
}

/* Which parsers' markers are special tokens in their models' tokenizers (vLLM decodes with
 * skip_special_tokens=False for them). */
static bool markers_are_special(tool_parser p) {
    return p == TOOL_PARSER_MISTRAL || p == TOOL_PARSER_DEEPSEEK_V3 || p == TOOL_PARSER_LLAMA3_JSON ||
           p == TOOL_PARSER_GRANITE;
}

/* tool_choice: "none", "auto", "required" or {"type": "function", "function": {"name"}}; *named
 * gets the name of the last form (which must be among tools). */
static int parse_tool_choice(const cJSON *v, const cJSON *tools, const char **mode, const char **named, api_error *e) {
    if (cJSON_IsString(v)) {
        if (strcmp(v->valuestring, "none") && strcmp(v->valuestring, "auto") && strcmp(v->valuestring, "required"))
            return api_fail(e, 400, "tool_choice",
                            "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                            "\"function\": {\"name\": ...}}, not \"%.100s\"",
                            v->valuestring);
        *mode = v->valuestring;
        return 0;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(v, "type"),
                *fn = cJSON_GetObjectItemCaseSensitive(v, "function");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    if (!cJSON_IsObject(v) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsString(name))
        return api_fail(e, 400, "tool_choice",
                        "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                        "\"function\": {\"name\": ...}}");
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(get_field(t, "function"), "name");
        if (!strcmp(n->valuestring, name->valuestring)) {
            *mode = "named";
            *named = name->valuestring;
            return 0;
        }
    }
    return api_fail(e, 400, "tool_choice", "'tool_choice' names the function '%.100s', which is not among 'tools'",
                    name->valuestring);
}

/* tools (checked as the template rendered them), tool_choice and parallel_tool_calls of a chat
 * request: whether the output is parsed
 * for calls (with the server's parser), and for "required" or a named function the grammar
 * that forces a call. Without tools the output is content, as before. */
static int parse_tools(server *srv, const cJSON *root, request *r, api_error *e) {
    const cJSON *tools = get_field(root, "tools"), *choice = get_field(root, "tool_choice");
    bool parallel = true;
    if (get_bool(root, "parallel_tool_calls", &parallel, e)) return -1;
    const char *mode = tools ? "auto" : "none", *named = NULL;
    if (choice && parse_tool_choice(choice, tools, &mode, &named, e)) return -1;
    if (!tools || !cJSON_GetArraySize(tools) || !strcmp(mode, "none")) {
        if (choice && strcmp(mode, "none"))
            return api_fail(e, 400, "tool_choice", "'tool_choice' is only allowed when 'tools' are given");
        return 0;
    }
    tool_parser p = (tool_parser)srv->tool_parser;
    if (!p) {
        if (!choice) return 0; /* tools rendered, the output returned as text, as before parsers */
        return api_fail(e, 400, "tool_choice",
                        "\"%s\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set "
                        "(no tool-call format was detected in the chat template)",
                        named ? "named" : mode);
    }
    r->tool_parser = p;
    r->parallel_tool_calls = parallel && !named;
    if (r->dec && markers_are_special(p)) loom_detokenizer_keep_special(r->dec, true);
    if (!named && strcmp(mode, "required")) return 0;
    if (p == TOOL_PARSER_PYTHONIC) /* its arguments are Python literals, which no schema grammar writes */
        return api_fail(e, 400, "tool_choice", "tool_choice \"%s\" cannot be forced with the pythonic tool-call parser",
                        named ? "named" : mode);
    loom_err err = {{0}};
    if (!(r->gbnf = tool_calls_gbnf(p, tools, named, r->parallel_tool_calls, &err)))
        return api_fail(e, 400, "tools", "%s", err.msg);
    return 0;
}

cJSON *api_parse_body(const char *body, size_t len, api_error *e) {
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

request *api_generate_json(server *srv, req_kind kind, const cJSON *root, api_error *e) {
    request *r = request_new(kind);
    if (!r) {
        api_fail(e, 500, NULL, "cannot allocate %zu bytes for a request", sizeof *r);
        return NULL;
    }
    long max_tokens = kind == REQ_COMPLETION ? 16 : 0; /* OpenAI's defaults: 16; chat: what fits */
    const char *max_key =
        kind == REQ_CHAT && get_field(root, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (api_check_model(srv, root, e) || refuse_unsupported(root, kind, e) ||
        get_int(root, max_key, 1, 1 << 30, &max_tokens, e))
        goto fail;
    if (kind == REQ_CHAT) {
        if (api_chat_prompt(srv, root, false, r, e)) goto fail;
    } else if (parse_prompt(srv, root, r, e)) {
        goto fail;
    }
    if (fit_context(srv, r, max_tokens, e) || parse_stop(root, r, e) || parse_output(root, r, e) ||
        parse_sampling(srv, root, r, e) || parse_logits(srv, root, r, e) || parse_echo(srv, root, r, e))
        goto fail;
    loom_err err = {{0}};
    if (srv->info.has_tokenizer && !(r->dec = loom_detokenizer_new(srv->m, &err))) {
        api_fail(e, 500, NULL, "%s", err.msg);
        goto fail;
    }
    /* a forced tool call's grammar first: structured_parse compiles it, or refuses a second one */
    if ((kind == REQ_CHAT && parse_tools(srv, root, r, e)) || structured_parse(srv, root, r, e)) goto fail;
    r->created = time(NULL);
    if (make_choices(srv, root, r, e)) goto fail;
    return r;
fail:
    request_unref(r);
    return NULL;
}

request *api_parse_generate(server *srv, req_kind kind, const char *body, size_t len, api_error *e) {
    cJSON *root = api_parse_body(body, len, e);
    request *r = root ? api_generate_json(srv, kind, root, e) : NULL;
    cJSON_Delete(root);
    return r;
}

int api_chat_prompt(server *srv, const cJSON *root, bool add_special, request *r, api_error *e) {
    return !(r->rendered = render_chat(srv, root, e)) || tokenize(srv, r->rendered, add_special, r, e) ? -1 : 0;
}

static cJSON *ids_array(const int32_t *ids, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    return a;
}

char *api_tokenize(server *srv, const char *body, size_t len, api_error *e) {
    cJSON *root = api_parse_body(body, len, e);
    if (!root) return NULL;
    request *r = request_new(REQ_COMPLETION);
    char *out = NULL;
    bool chat = get_field(root, "messages") != NULL, add_special = !chat;
    if (!r) {
        api_fail(e, 500, NULL, "cannot allocate %zu bytes for a request", sizeof *r);
        goto done;
    }
    if (api_check_model(srv, root, e) || get_bool(root, "add_special_tokens", &add_special, e)) goto done;
    if (chat) {
        if (api_chat_prompt(srv, root, add_special, r, e)) goto done;
    } else {
        const cJSON *p = get_field(root, "prompt");
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
    cJSON *root = api_parse_body(body, len, e);
    if (!root) return NULL;
    const cJSON *t = get_field(root, "tokens"), *v;
    char *out = NULL;
    if (api_check_model(srv, root, e)) goto done;
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

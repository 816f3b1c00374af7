/* Response bodies of the OpenAI API: completions and chat completions, whole or as stream
 * chunks, with usage, log-probabilities and tool calls; models; errors (see api.h). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/api.h"
#include "serve/tool_calls.h"
#include "util/alloc.h"

/* Token `id` as text for the log-probabilities of output position i (malloc'd; NULL when out of
 * memory, as every builder below passes on: the caller answers 500). The chosen
 * token is its piece of the output, so the tokens spell the text exactly; an alternative is
 * what decoding it after the previous token adds (so a SentencePiece "▁was" keeps its space).
 * Without a tokenizer: "token_id:N", as vLLM writes it. */
static char *token_text(const server *srv, const request *r, int i, int32_t id) {
    char *out;
    if (!srv->info.has_tokenizer) {
        if (asprintf(&out, "token_id:%d", id) < 0) out = NULL;
        return out;
    }
    if (id == r->tokens[i].id) {
        size_t from = i ? r->tokens[i - 1].text_end : 0;
        return mem_strndup(r->text ? r->text + from : "", r->tokens[i].text_end - from, "a token's text", NULL);
    }
    int32_t pair[2] = {i ? r->tokens[i - 1].id : r->prompt[r->n_prompt - 1], id};
    char *both = loom_detokenize(srv->m, pair, 2, true, NULL), *prev = loom_detokenize(srv->m, pair, 1, true, NULL);
    size_t n = prev ? strlen(prev) : 0;
    out = both && prev ? mem_strdup(strncmp(both, prev, n) ? both : both + n, "a token's text", NULL) : NULL;
    free(both);
    free(prev);
    return out;
}

/* JSON has no -inf: a token the model rules out gets vLLM's floor. */
static double finite_logprob(float lp) { return isfinite(lp) ? lp : -9999.0; }

static cJSON *chat_logprob(const char *text, float lp) {
    cJSON *o = cJSON_CreateObject(), *bytes = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "token", text);
    cJSON_AddNumberToObject(o, "logprob", finite_logprob(lp));
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        cJSON_AddItemToArray(bytes, cJSON_CreateNumber(*p));
    cJSON_AddItemToObject(o, "bytes", bytes);
    return o;
}

/* Log-probabilities of tokens [from, to): chat's {"content": [...]}, or the legacy shape. */
static cJSON *logprobs(const server *srv, const request *r, int from, int to) {
    cJSON *out = cJSON_CreateObject();
    char *text;
    if (r->kind == REQ_CHAT) {
        cJSON *content = cJSON_AddArrayToObject(out, "content");
        for (int i = from; i < to; i++) {
            const req_token *t = &r->tokens[i];
            if (!(text = token_text(srv, r, i, t->id))) goto fail;
            cJSON *e = chat_logprob(text, t->logprob);
            free(text);
            cJSON_AddItemToArray(content, e);
            cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
            for (int k = 0; k < t->n_top; k++) {
                if (!(text = token_text(srv, r, i, t->top_id[k]))) goto fail;
                cJSON_AddItemToArray(top, chat_logprob(text, t->top_logprob[k]));
                free(text);
            }
        }
    } else {
        cJSON *tokens = cJSON_AddArrayToObject(out, "tokens"), *lps = cJSON_AddArrayToObject(out, "token_logprobs"),
              *tops = r->top_logprobs ? cJSON_AddArrayToObject(out, "top_logprobs") : NULL,
              *offs = cJSON_AddArrayToObject(out, "text_offset");
        if (!tops) cJSON_AddNullToObject(out, "top_logprobs");
        for (int i = from; i < to; i++) {
            const req_token *t = &r->tokens[i];
            if (!(text = token_text(srv, r, i, t->id))) goto fail;
            cJSON_AddItemToArray(tokens, cJSON_CreateString(text));
            free(text);
            cJSON_AddItemToArray(lps, cJSON_CreateNumber(finite_logprob(t->logprob)));
            cJSON_AddItemToArray(offs, cJSON_CreateNumber(i ? (double)r->tokens[i - 1].text_end : 0));
            if (!tops) continue;
            cJSON *top = cJSON_CreateObject();
            cJSON_AddItemToArray(tops, top);
            for (int k = 0; k < t->n_top; k++) {
                if (!(text = token_text(srv, r, i, t->top_id[k]))) goto fail;
                if (!cJSON_GetObjectItemCaseSensitive(top, text))
                    cJSON_AddNumberToObject(top, text, finite_logprob(t->top_logprob[k]));
                free(text);
            }
        }
    }
    return out;
fail:
    cJSON_Delete(out);
    return NULL;
}

/* The prompt once, the output of every choice generated (best_of's unreturned ones too: they were
 * computed, as OpenAI bills them). */
static cJSON *usage(const request *r) {
    cJSON *u = cJSON_CreateObject();
    int out = 0;
    for (int i = 0; i < r->n_choices; i++) out += (i ? r->choices[i] : r)->n_tokens;
    cJSON_AddNumberToObject(u, "prompt_tokens", r->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", out);
    cJSON_AddNumberToObject(u, "total_tokens", r->n_prompt + out);
    cJSON *details = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    if (details) cJSON_AddNumberToObject(details, "cached_tokens", r->cached_tokens > 0 ? r->cached_tokens : 0);
    return u;
}

/* The envelope every response and chunk shares. */
static cJSON *envelope(const server *srv, const request *r, bool chunk) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(
        o, "object", r->kind == REQ_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)r->created);
    cJSON_AddStringToObject(o, "model", srv->o->served_name);
    return o;
}

char *api_print(cJSON *o) {
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

/* Choice `index`, from request r: text [text_from, text_to) and tokens [tok_from, tok_to), after
 * the echoed prompt in the whole text or the first chunk; chat puts the text in a message
 * (whole) or a delta (chunk); finish (non-NULL: the last) its finish reason. NULL when out of
 * memory. */
static cJSON *choice(const server *srv, const request *r, int index, size_t text_from, size_t text_to, int tok_from,
                     int tok_to, bool chunk, bool first, const char *finish) {
    bool with_logprobs = r->logprobs && tok_to > tok_from;
    const char *echo = r->echo && (!chunk || first) ? r->echo : "";
    size_t n_echo = strlen(echo), n = text_to - text_from;
    char *text = mem_alloc(n_echo + n + 1, "a response's text", NULL);
    cJSON *lp = text && with_logprobs ? logprobs(srv, r, tok_from, tok_to) : NULL;
    if (!text || (with_logprobs && !lp)) {
        free(text);
        return NULL;
    }
    memcpy(text, echo, n_echo);
    memcpy(text + n_echo, r->text ? r->text + text_from : "", n);
    text[n_echo + n] = 0;
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", index);
    if (r->kind == REQ_CHAT) {
        cJSON *m = cJSON_AddObjectToObject(c, chunk ? "delta" : "message");
        if (!chunk || first) cJSON_AddStringToObject(m, "role", "assistant");
        if (!chunk || first || n) cJSON_AddStringToObject(m, "content", text);
    } else {
        cJSON_AddStringToObject(c, "text", text);
    }
    free(text);
    if (with_logprobs) cJSON_AddItemToObject(c, "logprobs", lp);
    else cJSON_AddNullToObject(c, "logprobs");
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    return c;
}

const char *api_finish_name(const request *r, int n_calls) {
    return n_calls && r->finish != FINISH_CANCELLED ? "tool_calls" : request_finish_name(r);
}

/* A tool call's id: the request's unique number and the call's index, mixed (splitmix64, a
 * bijection) so that ids look as random as OpenAI's. Mistral's template insists on 9
 * alphanumerics (as vLLM's mistral parser makes them); others get "call_" and 16 hex digits. */
void api_tool_call_id(const request *r, int index, const char *prefix, char *id, size_t cap) {
    uint64_t z = (r->serial << 16 | (uint64_t)index) + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    if (r->tool_parser != TOOL_PARSER_MISTRAL) {
        snprintf(id, cap, "%s%016llx", prefix, (unsigned long long)z);
        return;
    }
    static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    for (int i = 0; i < 9; i++, z /= 62) id[i] = digits[z % 62];
    id[9] = 0;
}

/* Tool call `index` as OpenAI gives it: {id, type, function {name, arguments}}; a stream's
 * items carry their index, and a fragment of the arguments only that (name NULL). */
static cJSON *tool_call_json(const request *r, int index, bool chunk, const char *name, const char *arguments) {
    cJSON *c = cJSON_CreateObject();
    if (chunk) cJSON_AddNumberToObject(c, "index", index);
    if (name) {
        char id[32];
        api_tool_call_id(r, index, "call_", id, sizeof id);
        cJSON_AddStringToObject(c, "id", id);
        cJSON_AddStringToObject(c, "type", "function");
    }
    cJSON *fn = cJSON_AddObjectToObject(c, "function");
    if (name) cJSON_AddStringToObject(fn, "name", name);
    cJSON_AddStringToObject(fn, "arguments", arguments);
    return c;
}

/* best_of: the choices by cumulative log-probability, best first (ties in generated order);
 * otherwise in order. */
static void rank_choices(const request *r, const request **order) {
    for (int i = 0; i < r->n_choices; i++) {
        const request *c = i ? r->choices[i] : r;
        int k = i;
        for (; k > 0 && r->ranked && order[k - 1]->cum_logprob < c->cum_logprob; k--) order[k] = order[k - 1];
        order[k] = c;
    }
}

/* Choice `index` of a whole response: its text, or with a tool parser the content and calls
 * read out of it. NULL when out of memory. */
static cJSON *whole_choice(const server *srv, const request *r, int index) {
    tool_parse tp = {0};
    loom_err err;
    if (r->tool_parser && tool_calls_parse((tool_parser)r->tool_parser, r->text ? r->text : "", r->text_len,
                                           r->parallel_tool_calls ? INT_MAX : 1, &tp, &err))
        return NULL;
    cJSON *c = choice(srv, r, index, 0, r->text_len, 0, r->n_tokens, false, false, api_finish_name(r, tp.n_calls));
    if (c && tp.n_calls) { /* content: what is not a call, null when that is nothing (as OpenAI) */
        cJSON *m = cJSON_GetObjectItemCaseSensitive(c, "message");
        cJSON_ReplaceItemInObjectCaseSensitive(m, "content",
                                               tp.content ? cJSON_CreateString(tp.content) : cJSON_CreateNull());
        cJSON *calls = cJSON_AddArrayToObject(m, "tool_calls");
        for (int i = 0; i < tp.n_calls; i++)
            cJSON_AddItemToArray(calls, tool_call_json(r, i, false, tp.calls[i].name, tp.calls[i].arguments));
    }
    tool_parse_free(&tp);
    return c;
}

char *api_response(const server *srv, const request *r) {
    const request *order[REQ_MAX_CHOICES];
    rank_choices(r, order);
    cJSON *o = envelope(srv, r, false), *choices = cJSON_AddArrayToObject(o, "choices");
    for (int i = 0; i < r->n_return; i++) {
        cJSON *c = whole_choice(srv, order[i], i);
        if (!c) {
            cJSON_Delete(o);
            return NULL;
        }
        cJSON_AddItemToArray(choices, c);
    }
    cJSON_AddItemToObject(o, "usage", usage(r));
    return api_print(o);
}

char *api_chunk(const server *srv, const request *r, size_t text_from, size_t text_to, int tok_from, int tok_to,
                bool first, const char *finish) {
    cJSON *c = choice(srv, r, r->index, text_from, text_to, tok_from, tok_to, true, first, finish);
    if (!c) return NULL;
    cJSON *o = envelope(srv, r, true);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), c);
    if (r->include_usage) cJSON_AddNullToObject(o, "usage");
    return api_print(o);
}

char *api_tool_chunk(const server *srv, const request *r, int index, const char *name, const char *arguments,
                     bool first) {
    cJSON *o = envelope(srv, r, true), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), c);
    cJSON_AddNumberToObject(c, "index", r->index);
    cJSON *d = cJSON_AddObjectToObject(c, "delta");
    if (first) cJSON_AddStringToObject(d, "role", "assistant");
    cJSON *calls = cJSON_AddArrayToObject(d, "tool_calls");
    cJSON_AddItemToArray(calls, tool_call_json(r, index, true, name, name ? "" : arguments));
    cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddNullToObject(c, "finish_reason");
    if (r->include_usage) cJSON_AddNullToObject(o, "usage");
    return api_print(o);
}

char *api_usage_chunk(const server *srv, const request *r) {
    cJSON *o = envelope(srv, r, true);
    cJSON_AddArrayToObject(o, "choices");
    cJSON_AddItemToObject(o, "usage", usage(r));
    return api_print(o);
}

char *api_error_body(const api_error *e) {
    cJSON *o = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(err, "message", e->msg);
    cJSON_AddStringToObject(err, "type", e->status >= 500 ? "server_error" : "invalid_request_error");
    if (e->param[0]) cJSON_AddStringToObject(err, "param", e->param);
    else cJSON_AddNullToObject(err, "param");
    if (e->code) cJSON_AddStringToObject(err, "code", e->code);
    else cJSON_AddNumberToObject(err, "code", e->status);
    return api_print(o);
}

char *api_models(const server *srv) {
    cJSON *o = cJSON_CreateObject(), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddStringToObject(m, "id", srv->o->served_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", 0);
    cJSON_AddStringToObject(m, "owned_by", "loom");
    cJSON_AddNumberToObject(m, "max_model_len", srv->max_ctx);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), m);
    return api_print(o);
}

bool api_stream_done(sse_buf *b, const server *srv, const request *r) {
    return (!r->include_usage || sse_event(b, NULL, api_usage_chunk(srv, r))) &&
           sse_event(b, NULL, mem_strdup("[DONE]", "a stream's events", NULL));
}

/* ---- the shape of a one-choice chat stream whose output is read for tool calls ---- */

/* Content [from, to), with the log-probabilities of the tokens it completes. */
static bool openai_text(shape_stream *s, size_t from, size_t to) {
    const request *r = s->r;
    int tokens = s->tokens;
    while (tokens < r->n_tokens && r->tokens[tokens].text_end <= to) tokens++;
    bool ok = sse_event(s->buf, NULL, api_chunk(s->srv, r, from, to, s->tokens, tokens, !s->started, NULL));
    s->tokens = tokens;
    s->started = true;
    return ok;
}

/* A complete call as two chunks: index, id and name; then its arguments. */
static bool openai_call(shape_stream *s, const char *name, const char *arguments) {
    bool ok = sse_event(s->buf, NULL, api_tool_chunk(s->srv, s->r, s->calls, name, NULL, !s->started)) &&
              sse_event(s->buf, NULL, api_tool_chunk(s->srv, s->r, s->calls, NULL, arguments, false));
    s->started = true;
    return ok;
}

/* The finish reason, with the log-probabilities of the tokens not sent yet; usage; [DONE]. */
static bool openai_end(shape_stream *s) {
    const request *r = s->r;
    bool ok = sse_event(s->buf, NULL,
                        api_chunk(s->srv, r, r->text_len, r->text_len, s->tokens, r->n_tokens, !s->started,
                                  api_finish_name(r, s->calls)));
    s->started = true;
    return ok && api_stream_done(s->buf, s->srv, r);
}

static bool openai_fail(shape_stream *s, const api_error *e) {
    return sse_event(s->buf, NULL, api_error_body(e)) &&
           sse_event(s->buf, NULL, mem_strdup("[DONE]", "a stream's events", NULL));
}

const api_shape api_shape_openai = {api_response, openai_text, openai_call, openai_end, openai_fail, api_error_body};

const api_shape *api_shape_of(req_api api) {
    switch (api) {
    case API_MESSAGES: return &api_shape_messages;
    case API_RESPONSES: return &api_shape_responses;
    case API_EMBEDDINGS: return &api_shape_embeddings;
    case API_SCORE: return &api_shape_score;
    case API_RERANK: return &api_shape_rerank;
    default: return &api_shape_openai;
    }
}

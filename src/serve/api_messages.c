/* Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens), as vLLM and
 * llama-server serve it. A body is translated into a Chat Completions body and parsed by the
 * chat parser, so templates, tool parsers and grammars act as they do for OpenAI's clients:
 *   system (string or text blocks)      a first "system" message
 *   text blocks                         a message's content, joined by newlines
 *   tool_use blocks (assistant)         tool_calls, the input as its arguments
 *   tool_result blocks (user)           "tool" messages answering a tool_use by its id
 *   thinking blocks                     dropped, as llama-server drops them
 *   tools[].input_schema                tools[].function.parameters
 *   tool_choice auto/any/tool/none      "auto" / "required" / a named function / "none"
 *   stop_sequences                      stop
 *   max_tokens                          an upper bound, as Anthropic defines it: what the context
 *                                       leaves when that is less (Claude Code asks for 32,000
 *                                       whatever the model; llama-server clamps it too)
 *   output_config.format (json_schema)  response_format
 *   temperature, top_p, top_k           the same (which newer SDKs no longer send: then the
 *                                       server's default, temperature 1, as vLLM)
 * Answers go the other way: content blocks of text and tool_use, stop_reason, usage with the
 * prefix cache's hit as cache_read_input_tokens, and in a stream Anthropic's event sequence. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/api.h"
#include "serve/chat_body.h"
#include "serve/tool_calls.h"
#include "util/alloc.h"

/* ---- the request, into a chat request ---- */

/* A string, or an array of text blocks joined by newlines, as a new string (NULL with a 400
 * naming `where` otherwise). Images and documents are refused: loom reads text. */
static char *text_of(const cJSON *v, const char *where, api_error *e) {
    static const char *const text[] = {"text", NULL};
    int bad;
    char *out = text_of_parts(v, text, &bad);
    if (out) return out;
    if (bad == -2) api_fail(e, 500, NULL, "out of memory reading %s", where);
    else if (bad < 0) api_fail(e, 400, NULL, "%s must be a string or an array of text blocks", where);
    else api_fail(e, 400, NULL, "%s[%d] must be a text block ({\"type\": \"text\", \"text\": ...})", where, bad);
    return NULL;
}

static void add_message(cJSON *msgs, const char *role, const char *content) {
    cJSON_AddItemToArray(msgs, chat_message(role, content));
}

/* A content block's type ("" when it names none), and a text block's text (NULL for others). */
static const char *block_type(const cJSON *b) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(b, "type");
    return cJSON_IsString(type) ? type->valuestring : "";
}

static const char *block_text(const cJSON *b) {
    const cJSON *text = get_field(b, "text");
    return !strcmp(block_type(b), "text") && cJSON_IsString(text) ? text->valuestring : NULL;
}

/* The tool_use ids of the conversation, each answered at most once by a tool_result. */
typedef struct call_ids {
    const char *id[256];
    bool answered[256];
    int n;
} call_ids;

/* User message i's blocks: text joined into user messages, each tool_result a "tool" message
 * (in their order). */
static int user_blocks(const cJSON *content, int i, cJSON *msgs, call_ids *ids, api_error *e) {
    char where[64], *text = NULL;
    size_t len = 0, cap = 0;
    int j = 0, rc = 0;
    const cJSON *b;
    cJSON_ArrayForEach(b, content) {
        const char *t = block_type(b), *said = block_text(b);
        if (said) {
            if (!text_append(&text, &len, &cap, said)) {
                rc = api_fail(e, 500, NULL, "out of memory reading messages[%d]", i);
                break;
            }
        } else if (!strcmp(t, "tool_result")) {
            const cJSON *id = get_field(b, "tool_use_id");
            int k = 0;
            while (cJSON_IsString(id) && k < ids->n && (strcmp(ids->id[k], id->valuestring) || ids->answered[k])) k++;
            if (!cJSON_IsString(id) || k == ids->n) {
                rc = api_fail(e, 400, "messages",
                              "messages[%d].content[%d]: tool_result for '%.100s' answers no tool_use of an earlier "
                              "assistant message",
                              i, j, cJSON_IsString(id) ? id->valuestring : "(no tool_use_id)");
                break;
            }
            ids->answered[k] = true;
            snprintf(where, sizeof where, "messages[%d].content[%d].content", i, j);
            const cJSON *c = get_field(b, "content");
            char *result = c ? text_of(c, where, e) : mem_strdup("", "a tool result", NULL);
            if (!result) {
                rc = c ? -1 : api_fail(e, 500, NULL, "out of memory reading %s", where);
                break;
            }
            if (len) add_message(msgs, "user", text), len = 0;
            cJSON *m = chat_message("tool", result);
            cJSON_AddStringToObject(m, "tool_call_id", id->valuestring);
            cJSON_AddItemToArray(msgs, m);
            free(result);
        } else {
            rc = api_fail(e, 400, "messages",
                          "messages[%d].content[%d]: a user message takes text and tool_result blocks, not '%.40s'", i,
                          j, t[0] ? t : "(no type)");
            break;
        }
        j++;
    }
    if (!rc && (len || !j)) add_message(msgs, "user", text ? text : "");
    free(text);
    return rc;
}

/* Assistant message i's blocks: text as its content, tool_use blocks as its tool_calls. */
static int assistant_blocks(const cJSON *content, int i, cJSON *msgs, call_ids *ids, api_error *e) {
    cJSON *m = chat_message("assistant", NULL), *calls = NULL;
    cJSON_AddItemToArray(msgs, m);
    char *text = NULL;
    size_t len = 0, cap = 0;
    int j = 0;
    const cJSON *b;
    cJSON_ArrayForEach(b, content) {
        const char *t = block_type(b), *said = block_text(b);
        if (said) {
            if (!text_append(&text, &len, &cap, said)) {
                free(text);
                return api_fail(e, 500, NULL, "out of memory reading messages[%d]", i);
            }
        } else if (!strcmp(t, "tool_use")) {
            const cJSON *id = get_field(b, "id"), *name = get_field(b, "name"), *input = get_field(b, "input");
            if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsObject(input) || ids->n == 256) {
                free(text);
                return api_fail(e, 400, "messages",
                                "messages[%d].content[%d]: a tool_use block needs a string 'id' and 'name' and an "
                                "object 'input' (at most 256 in a conversation)",
                                i, j);
            }
            ids->answered[ids->n] = false;
            ids->id[ids->n++] = id->valuestring;
            if (!calls) calls = cJSON_AddArrayToObject(m, "tool_calls");
            char *args = cJSON_PrintUnformatted(input);
            cJSON_AddItemToArray(calls, chat_tool_call(id->valuestring, name->valuestring, args ? args : "{}"));
            free(args);
        } else if (strcmp(t, "thinking") && strcmp(t, "redacted_thinking")) {
            free(text);
            return api_fail(e, 400, "messages",
                            "messages[%d].content[%d]: an assistant message takes text, tool_use and thinking "
                            "blocks, not '%.40s'",
                            i, j, t[0] ? t : "(no type)");
        }
        j++;
    }
    if (text || !calls) cJSON_ReplaceItemInObjectCaseSensitive(m, "content", cJSON_CreateString(text ? text : ""));
    free(text);
    return 0;
}

static int translate_messages(const cJSON *in, cJSON *msgs, api_error *e) {
    const cJSON *list = get_field(in, "messages"), *m;
    if (!cJSON_IsArray(list) || !cJSON_GetArraySize(list))
        return api_fail(e, 400, "messages", "'messages' must be a non-empty array");
    call_ids ids = {.n = 0};
    int i = 0;
    cJSON_ArrayForEach(m, list) {
        const cJSON *role = get_field(m, "role"), *content = get_field(m, "content");
        bool user = cJSON_IsString(role) && !strcmp(role->valuestring, "user");
        if (!cJSON_IsString(role) || (!user && strcmp(role->valuestring, "assistant")))
            return api_fail(e, 400, "messages", "messages[%d].role must be \"user\" or \"assistant\"", i);
        if (!cJSON_IsString(content) && !cJSON_IsArray(content))
            return api_fail(e, 400, "messages", "messages[%d].content must be a string or an array of blocks", i);
        if (!user && !m->next)
            return api_fail(e, 400, "messages",
                            "messages[%d]: a final assistant message (a prefill to continue) is not supported", i);
        if (cJSON_IsString(content)) add_message(msgs, role->valuestring, content->valuestring);
        else if (user ? user_blocks(content, i, msgs, &ids, e) : assistant_blocks(content, i, msgs, &ids, e)) return -1;
        i++;
    }
    return 0;
}

/* tool_choice {type: auto | any | tool (with name) | none, disable_parallel_tool_use}. */
static int translate_tool_choice(const cJSON *in, cJSON *out, api_error *e) {
    const cJSON *v = get_field(in, "tool_choice");
    if (!v) return 0;
    const cJSON *type = get_field(v, "type"), *name = get_field(v, "name");
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    bool no_parallel = false;
    if (!cJSON_IsObject(v) || get_bool(v, "disable_parallel_tool_use", &no_parallel, e))
        return e->status ? -1 : api_fail(e, 400, "tool_choice", "'tool_choice' must be an object with a 'type'");
    if (!strcmp(t, "auto") || !strcmp(t, "none")) {
        cJSON_AddStringToObject(out, "tool_choice", t);
    } else if (!strcmp(t, "any")) {
        cJSON_AddStringToObject(out, "tool_choice", "required");
    } else if (!strcmp(t, "tool") && cJSON_IsString(name)) {
        chat_choose_tool(out, name->valuestring);
    } else {
        return api_fail(e, 400, "tool_choice",
                        "'tool_choice.type' must be \"auto\", \"any\", \"none\" or \"tool\" (with a 'name')");
    }
    if (no_parallel) cJSON_AddFalseToObject(out, "parallel_tool_calls");
    return 0;
}

/* output_config.format {type: json_schema, schema}: response_format (effort is not a setting
 * of loom's models, and is ignored as thinking is). */
static int translate_output_config(const cJSON *in, cJSON *out, api_error *e) {
    const cJSON *oc = get_field(in, "output_config"), *f = oc ? get_field(oc, "format") : NULL;
    if (oc && !cJSON_IsObject(oc)) return api_fail(e, 400, "output_config", "'output_config' must be an object");
    if (!f) return 0;
    const cJSON *type = get_field(f, "type"), *schema = get_field(f, "schema");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "json_schema") || !cJSON_IsObject(schema))
        return api_fail(e, 400, "output_config",
                        "'output_config.format' must be {\"type\": \"json_schema\", \"schema\": {...}}");
    cJSON *rf = cJSON_AddObjectToObject(out, "response_format");
    cJSON_AddStringToObject(rf, "type", "json_schema");
    cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
    cJSON_AddStringToObject(js, "name", "output");
    cJSON_AddItemToObject(js, "schema", cJSON_Duplicate(schema, true));
    return 0;
}

/* The Messages body `in` as a Chat Completions body (NULL with e filled). */
static cJSON *to_chat(const cJSON *in, bool for_generation, api_error *e) {
    cJSON *out = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(out, "messages");
    const cJSON *system = get_field(in, "system"), *thinking = get_field(in, "thinking");
    if (system) {
        char *text = text_of(system, "'system'", e);
        if (!text) goto fail;
        add_message(msgs, "system", text);
        free(text);
    }
    if (thinking && !cJSON_IsObject(thinking)) {
        api_fail(e, 400, "thinking", "'thinking' must be an object");
        goto fail;
    }
    if (translate_messages(in, msgs, e) || chat_tools_from_flat(in, out, "custom", "input_schema", e) ||
        translate_tool_choice(in, out, e) || translate_output_config(in, out, e))
        goto fail;
    chat_copy_field(in, out, "model", "model");
    if (!for_generation) return out;
    chat_copy_field(in, out, "stop_sequences", "stop");
    static const char *const same[] = {"temperature", "top_p", "top_k", "stream"};
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) chat_copy_field(in, out, same[i], same[i]);
    return out;
fail:
    cJSON_Delete(out);
    return NULL;
}

request *api_parse_messages(server *srv, const char *body, size_t len, api_error *e) {
    cJSON *in = api_parse_body(body, len, e), *chat = NULL;
    long max_tokens = 0;
    if (in && !get_int(in, "max_tokens", 1, 1 << 30, &max_tokens, e) && !max_tokens)
        api_fail(e, 400, "max_tokens", "'max_tokens' is required");
    chat = in && max_tokens ? to_chat(in, true, e) : NULL;
    request *r = chat ? api_generate_json(srv, REQ_CHAT, chat, e) : NULL; /* max_tokens: what the context leaves */
    cJSON_Delete(in);
    cJSON_Delete(chat);
    if (!r) return NULL;
    if (max_tokens < r->max_tokens) r->max_tokens = (int)max_tokens;
    r->api = API_MESSAGES;
    snprintf(r->id, sizeof r->id, "msg_%016llx", (unsigned long long)r->serial);
    return r;
}

char *api_count_tokens(server *srv, const char *body, size_t len, api_error *e) {
    cJSON *in = api_parse_body(body, len, e), *chat = in ? to_chat(in, false, e) : NULL;
    request *r = chat ? request_new(REQ_CHAT) : NULL;
    char *out = NULL;
    if (chat && !r) api_fail(e, 500, NULL, "cannot allocate a request");
    if (r && !api_chat_prompt(srv, chat, false, r, e)) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "input_tokens", r->n_prompt);
        out = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
    }
    request_unref(r);
    cJSON_Delete(in);
    cJSON_Delete(chat);
    return out;
}

/* ---- the answer ---- */

static const char *stop_reason(const request *r, int n_calls) {
    if (n_calls && r->finish != FINISH_CANCELLED) return "tool_use";
    if (r->finish == FINISH_LENGTH) return "max_tokens";
    return r->stop_matched ? "stop_sequence" : "end_turn";
}

/* Anthropic counts input_tokens apart from those read from the cache. */
static cJSON *usage(const request *r, bool with_input) {
    cJSON *u = cJSON_CreateObject();
    int cached = r->cached_tokens > 0 ? r->cached_tokens : 0;
    if (with_input) {
        cJSON_AddNumberToObject(u, "input_tokens", r->n_prompt - cached);
        cJSON_AddNumberToObject(u, "cache_creation_input_tokens", 0);
        cJSON_AddNumberToObject(u, "cache_read_input_tokens", cached);
    }
    cJSON_AddNumberToObject(u, "output_tokens", r->n_tokens);
    return u;
}

static cJSON *message(const server *srv, const request *r) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", r->id);
    cJSON_AddStringToObject(m, "type", "message");
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddStringToObject(m, "model", srv->o->served_name);
    cJSON_AddArrayToObject(m, "content");
    return m;
}

static void add_stop_fields(cJSON *o, const request *r, int n_calls) {
    cJSON_AddStringToObject(o, "stop_reason", stop_reason(r, n_calls));
    if (r->stop_matched && !n_calls) cJSON_AddStringToObject(o, "stop_sequence", r->stop_matched);
    else cJSON_AddNullToObject(o, "stop_sequence");
}

static cJSON *tool_use(const request *r, int index, const char *name, const char *arguments, bool with_input) {
    char id[40];
    api_tool_call_id(r, index, "toolu_", id, sizeof id);
    cJSON *b = cJSON_CreateObject(), *input = with_input ? cJSON_Parse(arguments) : NULL;
    cJSON_AddStringToObject(b, "type", "tool_use");
    cJSON_AddStringToObject(b, "id", id);
    cJSON_AddStringToObject(b, "name", name);
    cJSON_AddItemToObject(b, "input", input ? input : cJSON_CreateObject());
    return b;
}

static char *messages_whole(const server *srv, const request *r) {
    tool_parse tp = {0};
    loom_err err;
    const char *text = r->text ? r->text : "";
    if (r->tool_parser && tool_calls_parse((tool_parser)r->tool_parser, text, r->text_len,
                                           r->parallel_tool_calls ? 1 << 30 : 1, &tp, &err))
        return NULL;
    cJSON *m = message(srv, r), *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    const char *said = r->tool_parser ? tp.content : text;
    if (said && said[0]) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", "text");
        cJSON_AddStringToObject(b, "text", said);
        cJSON_AddItemToArray(content, b);
    }
    for (int i = 0; i < tp.n_calls; i++)
        cJSON_AddItemToArray(content, tool_use(r, i, tp.calls[i].name, tp.calls[i].arguments, true));
    add_stop_fields(m, r, tp.n_calls);
    cJSON_AddItemToObject(m, "usage", usage(r, true));
    tool_parse_free(&tp);
    return api_print(m);
}

/* ---- the stream: message_start, content blocks (start, deltas, stop), message_delta,
 * message_stop ---- */

static bool event(shape_stream *s, const char *type, cJSON *o) {
    cJSON_AddStringToObject(o, "type", type);
    return sse_event(s->buf, type, api_print(o));
}

static bool open_message(shape_stream *s) {
    if (s->started) return true;
    s->started = true;
    cJSON *o = cJSON_CreateObject(), *m = message(s->srv, s->r);
    cJSON_AddNullToObject(m, "stop_reason");
    cJSON_AddNullToObject(m, "stop_sequence");
    cJSON_AddItemToObject(m, "usage", usage(s->r, true));
    cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "usage"), "output_tokens",
                                           cJSON_CreateNumber(0));
    cJSON_AddItemToObject(o, "message", m);
    return event(s, "message_start", o);
}

static bool block_start(shape_stream *s, cJSON *block) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", s->items++);
    cJSON_AddItemToObject(o, "content_block", block);
    return event(s, "content_block_start", o);
}

static bool block_delta(shape_stream *s, const char *type, const char *key, const char *value) {
    cJSON *o = cJSON_CreateObject(), *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", s->items - 1);
    cJSON_AddStringToObject(d, "type", type);
    cJSON_AddStringToObject(d, key, value);
    cJSON_AddItemToObject(o, "delta", d);
    return event(s, "content_block_delta", o);
}

static bool block_stop(shape_stream *s) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", s->items - 1);
    s->text_open = false;
    return event(s, "content_block_stop", o);
}

static bool messages_text(shape_stream *s, size_t from, size_t to) {
    if (from == to) return true;
    char *text = mem_strndup(s->r->text + from, to - from, "a stream's text", NULL);
    bool ok = text && open_message(s);
    if (ok && !s->text_open) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", "text");
        cJSON_AddStringToObject(b, "text", "");
        ok = block_start(s, b);
        s->text_open = true;
    }
    ok = ok && block_delta(s, "text_delta", "text", text);
    free(text);
    return ok;
}

static bool messages_call(shape_stream *s, const char *name, const char *arguments) {
    return open_message(s) && (!s->text_open || block_stop(s)) &&
           block_start(s, tool_use(s->r, s->calls, name, arguments, false)) &&
           block_delta(s, "input_json_delta", "partial_json", arguments) && block_stop(s);
}

static bool messages_end(shape_stream *s) {
    if (!open_message(s) || (s->text_open && !block_stop(s))) return false;
    cJSON *o = cJSON_CreateObject(), *d = cJSON_AddObjectToObject(o, "delta");
    add_stop_fields(d, s->r, s->calls);
    cJSON_AddItemToObject(o, "usage", usage(s->r, false));
    return event(s, "message_delta", o) && event(s, "message_stop", cJSON_CreateObject());
}

static const char *error_type(int status) {
    switch (status) {
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status < 500 ? "invalid_request_error" : "api_error";
    }
}

static cJSON *error_json(const api_error *e) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "error");
    cJSON *err = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(err, "type", error_type(e->status));
    cJSON_AddStringToObject(err, "message", e->msg);
    return o;
}

static char *messages_error(const api_error *e) { return api_print(error_json(e)); }

static bool messages_fail(shape_stream *s, const api_error *e) {
    return sse_event(s->buf, "error", api_print(error_json(e)));
}

const api_shape api_shape_messages = {messages_whole, messages_text, messages_call,
                                      messages_end,   messages_fail, messages_error};

/* OpenAI's Responses API (POST /v1/responses, GET /v1/responses/ID), as vLLM serves it. A body
 * is translated into a Chat Completions body for the chat parser:
 *   instructions                    a first "system" message (not carried to follow-ups, as
 *                                   OpenAI documents)
 *   input (string, or items)        messages; function_call items become an assistant's
 *                                   tool_calls, function_call_output items "tool" messages
 *   previous_response_id            the stored conversation (response_store.c) before input
 *   tools (type function), tool_choice, parallel_tool_calls   the chat fields
 *   text.format                     response_format
 *   max_output_tokens               max_tokens
 * The answer is a response object whose output holds message items (output_text) and
 * function_call items, in the order the model wrote them; a stream sends Responses events
 * (response.created ... response.completed) with sequence numbers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/api.h"
#include "serve/chat_body.h"
#include "serve/response_store.h"
#include "serve/tool_calls.h"
#include "util/alloc.h"

/* ---- the request, into a chat request ---- */

/* Whether an assistant message of msgs made the call `id`. */
static bool call_made(const cJSON *msgs, const char *id) {
    const cJSON *m, *c;
    cJSON_ArrayForEach(m, msgs) {
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(m, "tool_calls")) {
            const cJSON *cid = cJSON_GetObjectItemCaseSensitive(c, "id");
            if (cJSON_IsString(cid) && !strcmp(cid->valuestring, id)) return true;
        }
    }
    return false;
}

/* A message item's content: a string, or input_text / output_text parts joined by newlines
 * (a new string; NULL with e naming the item otherwise). */
static char *content_text(const cJSON *content, int i, api_error *e) {
    static const char *const text[] = {"input_text", "output_text", NULL};
    int bad;
    char *out = text_of_parts(content, text, &bad);
    if (out) return out;
    if (bad == -2) api_fail(e, 500, NULL, "out of memory reading input[%d]", i);
    else if (bad < 0) api_fail(e, 400, "input", "input[%d].content must be a string or an array of parts", i);
    else {
        const cJSON *type = get_field(cJSON_GetArrayItem(content, bad), "type");
        api_fail(e, 400, "input",
                 "input[%d].content[%d]: only input_text and output_text parts are supported, not '%.40s'", i, bad,
                 cJSON_IsString(type) ? type->valuestring : "(no type)");
    }
    return NULL;
}

/* Input item i appended to msgs as chat messages. */
static int input_item(const cJSON *it, int i, cJSON *msgs, api_error *e) {
    const cJSON *type = get_field(it, "type"), *role = get_field(it, "role");
    const char *t = cJSON_IsString(type) ? type->valuestring : role ? "message" : "";
    if (!cJSON_IsObject(it)) return api_fail(e, 400, "input", "input[%d] must be an object", i);
    if (!strcmp(t, "message")) {
        const char *r = cJSON_IsString(role) ? role->valuestring : "";
        if (strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "system") && strcmp(r, "developer"))
            return api_fail(e, 400, "input", "input[%d].role must be user, assistant, system or developer", i);
        char *text = content_text(get_field(it, "content"), i, e);
        if (!text) return -1;
        cJSON_AddItemToArray(msgs, chat_message(strcmp(r, "developer") ? r : "system", text));
        free(text);
        return 0;
    }
    if (!strcmp(t, "function_call")) {
        const cJSON *id = get_field(it, "call_id"), *name = get_field(it, "name"), *args = get_field(it, "arguments");
        if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsString(args))
            return api_fail(e, 400, "input",
                            "input[%d]: a function_call needs string 'call_id', 'name' and 'arguments'", i);
        /* calls in a row are one assistant turn */
        cJSON *last = cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1);
        const cJSON *last_role = cJSON_GetObjectItemCaseSensitive(last, "role");
        cJSON *calls = cJSON_GetObjectItemCaseSensitive(last, "tool_calls");
        if (!calls || !cJSON_IsString(last_role) || strcmp(last_role->valuestring, "assistant")) {
            cJSON_AddItemToArray(msgs, last = chat_message("assistant", NULL));
            calls = cJSON_AddArrayToObject(last, "tool_calls");
        }
        cJSON_AddItemToArray(calls, chat_tool_call(id->valuestring, name->valuestring, args->valuestring));
        return 0;
    }
    if (!strcmp(t, "function_call_output")) {
        const cJSON *id = get_field(it, "call_id"), *out = get_field(it, "output");
        if (!cJSON_IsString(id))
            return api_fail(e, 400, "input", "input[%d]: a function_call_output needs 'call_id'", i);
        if (!call_made(msgs, id->valuestring))
            return api_fail(e, 400, "input",
                            "input[%d]: function_call_output for '%.100s' answers no function_call of the "
                            "conversation",
                            i, id->valuestring);
        char *text = out ? content_text(out, i, e) : mem_strdup("", "a function's output", NULL);
        if (!text) return out ? -1 : api_fail(e, 500, NULL, "out of memory reading input[%d]", i);
        cJSON *m = chat_message("tool", text);
        cJSON_AddStringToObject(m, "tool_call_id", id->valuestring);
        cJSON_AddItemToArray(msgs, m);
        free(text);
        return 0;
    }
    if (!strcmp(t, "reasoning")) return 0; /* the model's own earlier reasoning: not rendered */
    return api_fail(e, 400, "input",
                    "input[%d]: items of type '%.40s' are not supported (message, function_call, "
                    "function_call_output)",
                    i, t[0] ? t : "(none)");
}

/* The conversation: the stored one of previous_response_id, then input. */
static cJSON *conversation(server *srv, const cJSON *in, api_error *e) {
    const cJSON *prev = get_field(in, "previous_response_id"), *input = get_field(in, "input"), *it;
    cJSON *msgs = NULL;
    if (prev) {
        char *stored = cJSON_IsString(prev) ? response_store_get(srv->responses, prev->valuestring, false) : NULL;
        if (!cJSON_IsString(prev) || !stored || !(msgs = cJSON_Parse(stored))) {
            free(stored);
            return api_fail(e, 400, "previous_response_id",
                            "Previous response with id '%.100s' not found (never stored, or dropped from the store)",
                            cJSON_IsString(prev) ? prev->valuestring : "?"),
                   NULL;
        }
        free(stored);
    } else {
        msgs = cJSON_CreateArray();
    }
    if (cJSON_IsString(input)) {
        cJSON_AddItemToArray(msgs, chat_message("user", input->valuestring));
        return msgs;
    }
    if (!cJSON_IsArray(input) || !cJSON_GetArraySize(input)) {
        cJSON_Delete(msgs);
        return api_fail(e, 400, "input", "'input' must be a string or a non-empty array of items"), NULL;
    }
    int i = 0;
    cJSON_ArrayForEach(it, input) {
        if (input_item(it, i++, msgs, e)) {
            cJSON_Delete(msgs);
            return NULL;
        }
    }
    return msgs;
}

/* tool_choice "auto" | "none" | "required" | {"type": "function", "name"}. */
static int translate_tool_choice(const cJSON *in, cJSON *out, api_error *e) {
    const cJSON *v = get_field(in, "tool_choice");
    if (!v || cJSON_IsString(v)) {
        if (v) cJSON_AddItemToObject(out, "tool_choice", cJSON_Duplicate(v, true));
        return 0;
    }
    const cJSON *type = get_field(v, "type"), *name = get_field(v, "name");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsString(name))
        return api_fail(e, 400, "tool_choice",
                        "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": "
                        "...}");
    chat_choose_tool(out, name->valuestring);
    return 0;
}

/* text.format {type: text | json_object | json_schema (name, schema, strict)}. */
static int translate_format(const cJSON *in, cJSON *out, api_error *e) {
    const cJSON *text = get_field(in, "text"), *f = text ? get_field(text, "format") : NULL;
    if (text && !cJSON_IsObject(text)) return api_fail(e, 400, "text", "'text' must be an object");
    if (!f) return 0;
    const cJSON *type = get_field(f, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    if (!strcmp(t, "text")) return 0;
    cJSON *rf = cJSON_AddObjectToObject(out, "response_format");
    cJSON_AddStringToObject(rf, "type", t);
    if (!strcmp(t, "json_object")) return 0;
    if (strcmp(t, "json_schema") || !cJSON_IsObject(get_field(f, "schema")))
        return api_fail(e, 400, "text",
                        "'text.format' must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or {\"type\": "
                        "\"json_schema\", \"schema\": {...}}");
    cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
    static const char *const keys[] = {"name", "schema", "strict"};
    for (size_t i = 0; i < 3; i++)
        if (get_field(f, keys[i])) cJSON_AddItemToObject(js, keys[i], cJSON_Duplicate(get_field(f, keys[i]), true));
    return 0;
}

/* Fields loom cannot honour are refused by name. */
static int refuse_unsupported(const cJSON *in, api_error *e) {
    bool background = false;
    const cJSON *trunc = get_field(in, "truncation");
    if (get_bool(in, "background", &background, e)) return -1;
    if (background) return api_fail(e, 400, "background", "'background' responses are not supported");
    if (trunc && (!cJSON_IsString(trunc) || strcmp(trunc->valuestring, "disabled")))
        return api_fail(e, 400, "truncation", "'truncation' must be \"disabled\" (loom does not drop input)");
    if (get_field(in, "conversation"))
        return api_fail(e, 400, "conversation", "'conversation' is not supported; use previous_response_id");
    const cJSON *instr = get_field(in, "instructions");
    if (instr && !cJSON_IsString(instr)) return api_fail(e, 400, "instructions", "'instructions' must be a string");
    return 0;
}

/* What the response object repeats of the request, with OpenAI's defaults. */
static cJSON *echoed(const cJSON *in, bool store) {
    cJSON *o = cJSON_CreateObject();
    static const char *const keys[] = {"instructions", "max_output_tokens", "previous_response_id", "reasoning"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        const cJSON *v = get_field(in, keys[i]);
        cJSON_AddItemToObject(o, keys[i], v ? cJSON_Duplicate(v, true) : cJSON_CreateNull());
    }
    static const struct {
        const char *key, *json;
    } defaults[] = {{"metadata", "{}"},
                    {"parallel_tool_calls", "true"},
                    {"temperature", "1"},
                    {"top_p", "1"},
                    {"tool_choice", "\"auto\""},
                    {"tools", "[]"},
                    {"text", "{\"format\":{\"type\":\"text\"}}"},
                    {"truncation", "\"disabled\""}};
    for (size_t i = 0; i < sizeof defaults / sizeof *defaults; i++) {
        const cJSON *v = get_field(in, defaults[i].key);
        cJSON_AddItemToObject(o, defaults[i].key, v ? cJSON_Duplicate(v, true) : cJSON_Parse(defaults[i].json));
    }
    cJSON_AddBoolToObject(o, "store", store);
    return o;
}

request *api_parse_responses(server *srv, const char *body, size_t len, api_error *e) {
    cJSON *in = api_parse_body(body, len, e), *chat = NULL, *msgs = NULL;
    request *r = NULL;
    bool store = true;
    if (!in || refuse_unsupported(in, e) || get_bool(in, "store", &store, e) || !(msgs = conversation(srv, in, e)))
        goto done;
    chat = cJSON_CreateObject();
    const cJSON *instr = get_field(in, "instructions");
    cJSON *rendered = cJSON_AddArrayToObject(chat, "messages");
    if (instr) cJSON_AddItemToArray(rendered, chat_message("system", instr->valuestring));
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) cJSON_AddItemToArray(rendered, cJSON_Duplicate(m, true));
    if (chat_tools_from_flat(in, chat, "function", "parameters", e) || translate_tool_choice(in, chat, e) ||
        translate_format(in, chat, e))
        goto done;
    chat_copy_field(in, chat, "model", "model");
    chat_copy_field(in, chat, "max_output_tokens", "max_tokens");
    static const char *const same[] = {"temperature", "top_p", "stream", "parallel_tool_calls"};
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) chat_copy_field(in, chat, same[i], same[i]);
    if (!(r = api_generate_json(srv, REQ_CHAT, chat, e))) goto done;
    r->api = API_RESPONSES;
    r->store = store && srv->o->responses_store_bytes > 0;
    snprintf(r->id, sizeof r->id, "resp_%016llx", (unsigned long long)r->serial);
    cJSON *echo = echoed(in, r->store);
    r->conversation = cJSON_PrintUnformatted(msgs);
    r->echoed = cJSON_PrintUnformatted(echo);
    cJSON_Delete(echo);
    if (!r->conversation || !r->echoed) {
        api_fail(e, 500, NULL, "out of memory keeping the request's conversation");
        request_unref(r);
        r = NULL;
    }
done:
    cJSON_Delete(in);
    cJSON_Delete(chat);
    cJSON_Delete(msgs);
    return r;
}

char *api_stored_response(server *srv, const char *id, api_error *e) {
    char *body = response_store_get(srv->responses, id, true);
    if (!body) api_fail(e, 404, NULL, "Response with id '%.100s' not found", id);
    return body;
}

/* ---- the answer ---- */

/* Output item i's id; call i's call_id. */
static void item_id(const request *r, int i, bool call, char *id, size_t cap) {
    api_tool_call_id(r, i, call ? "fc_" : "msg_", id, cap);
}

static cJSON *text_part(const char *text) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "output_text");
    cJSON_AddStringToObject(p, "text", text);
    cJSON_AddArrayToObject(p, "annotations");
    cJSON_AddArrayToObject(p, "logprobs");
    return p;
}

/* Output item i: a message with its text (NULL: none yet), or call number `call` (name set). */
static cJSON *output_item(const request *r, int i, const char *text, int call, const char *name, const char *args,
                          bool done) {
    char id[48];
    cJSON *it = cJSON_CreateObject();
    item_id(r, i, name != NULL, id, sizeof id);
    cJSON_AddStringToObject(it, "id", id);
    cJSON_AddStringToObject(it, "type", name ? "function_call" : "message");
    cJSON_AddStringToObject(it, "status", done ? "completed" : "in_progress");
    if (!name) {
        cJSON_AddStringToObject(it, "role", "assistant");
        cJSON *content = cJSON_AddArrayToObject(it, "content");
        if (text) cJSON_AddItemToArray(content, text_part(text));
        return it;
    }
    api_tool_call_id(r, call, "call_", id, sizeof id);
    cJSON_AddStringToObject(it, "call_id", id);
    cJSON_AddStringToObject(it, "name", name);
    cJSON_AddStringToObject(it, "arguments", args);
    return it;
}

static bool blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strchr(" \t\r\n", s[i])) return false;
    return true;
}

/* Message item i of text, unless it is whitespace alone (then none); the gathered text emptied. */
static void flush_text(cJSON *out, const request *r, char *text, size_t *len) {
    if (*len && !blank(text, *len)) {
        text[*len] = 0;
        cJSON_AddItemToArray(out, output_item(r, cJSON_GetArraySize(out), text, 0, NULL, NULL, true));
    }
    *len = 0;
}

/* The output items, as the stream hands them out: text between calls gathered into message
 * items, each call kept (all, or the first without parallel_tool_calls) a function_call item.
 * NULL when out of memory. */
static cJSON *output_items(const request *r) {
    const char *text = r->text ? r->text : "";
    char *said = mem_alloc(r->text_len + 1, "a response's text", NULL);
    cJSON *out = said ? cJSON_CreateArray() : NULL;
    size_t len = 0;
    int calls = 0, rc = 0;
    tool_stream ts = {.parser = (tool_parser)r->tool_parser};
    tool_item it;
    loom_err err;
    if (!r->tool_parser) memcpy(said, text, len = r->text_len);
    while (out && r->tool_parser && (rc = tool_stream_next(&ts, text, r->text_len, true, &it, &err)) == 1) {
        if (!it.is_call) {
            memcpy(said + len, text + it.from, it.to - it.from);
            len += it.to - it.from;
            continue;
        }
        if (r->parallel_tool_calls || !calls) {
            flush_text(out, r, said, &len);
            cJSON_AddItemToArray(out,
                                 output_item(r, cJSON_GetArraySize(out), NULL, calls++, it.name, it.arguments, true));
        }
        free(it.name);
        free(it.arguments);
    }
    if (out) flush_text(out, r, said, &len);
    free(said);
    if (rc < 0) {
        cJSON_Delete(out);
        return NULL;
    }
    return out;
}

static cJSON *usage(const request *r) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "input_tokens", r->n_prompt);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "input_tokens_details"), "cached_tokens",
                            r->cached_tokens > 0 ? r->cached_tokens : 0);
    cJSON_AddNumberToObject(u, "output_tokens", r->n_tokens);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "output_tokens_details"), "reasoning_tokens", 0);
    cJSON_AddNumberToObject(u, "total_tokens", r->n_prompt + r->n_tokens);
    return u;
}

/* The response object; output NULL: still in progress (no output, no usage). */
static cJSON *response_object(const server *srv, const request *r, cJSON *output) {
    cJSON *o = cJSON_CreateObject();
    bool cut = r->finish == FINISH_LENGTH;
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "object", "response");
    cJSON_AddNumberToObject(o, "created_at", (double)r->created);
    cJSON_AddStringToObject(o, "status", !output ? "in_progress" : cut ? "incomplete" : "completed");
    cJSON_AddFalseToObject(o, "background");
    cJSON_AddNullToObject(o, "error");
    if (output && cut)
        cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "incomplete_details"), "reason", "max_output_tokens");
    else cJSON_AddNullToObject(o, "incomplete_details");
    cJSON_AddStringToObject(o, "model", srv->o->served_name);
    cJSON_AddItemToObject(o, "output", output ? output : cJSON_CreateArray());
    cJSON_AddItemToObject(o, "usage", output ? usage(r) : cJSON_CreateNull());
    cJSON *echo = cJSON_Parse(r->echoed), *v;
    cJSON_ArrayForEach(v, echo) cJSON_AddItemToObject(o, v->string, cJSON_Duplicate(v, true));
    cJSON_Delete(echo);
    return o;
}

/* The conversation with the output as its last, assistant, message: what a follow-up continues. */
static char *conversation_after(const request *r, const cJSON *output) {
    cJSON *msgs = cJSON_Parse(r->conversation), *m = chat_message("assistant", NULL), *calls = NULL;
    char *text = NULL;
    size_t len = 0, cap = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, output) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
        if (!strcmp(type->valuestring, "message")) {
            const cJSON *part = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(it, "content"), 0);
            const char *s = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
            size_t n = strlen(s);
            if (ARRAY_RESERVE(text, cap, len + n + 1, "a stored response", NULL)) break;
            memcpy(text + len, s, n + 1);
            len += n;
            continue;
        }
        if (!calls) calls = cJSON_AddArrayToObject(m, "tool_calls");
        cJSON_AddItemToArray(calls, chat_tool_call(cJSON_GetObjectItemCaseSensitive(it, "call_id")->valuestring,
                                                   cJSON_GetObjectItemCaseSensitive(it, "name")->valuestring,
                                                   cJSON_GetObjectItemCaseSensitive(it, "arguments")->valuestring));
    }
    if (text || !calls) cJSON_ReplaceItemInObjectCaseSensitive(m, "content", cJSON_CreateString(text ? text : ""));
    free(text);
    cJSON_AddItemToArray(msgs, m);
    return api_print(msgs);
}

/* The finished response's body; stored when asked. */
/* The finished response object (NULL when out of memory), stored when asked: what the whole
 * body is, and what a stream's last event carries. */
static cJSON *finished_response(const server *srv, const request *r) {
    cJSON *output = output_items(r);
    if (!output) return NULL;
    cJSON *o = response_object(srv, r, output);
    char *conv = r->store ? conversation_after(r, output) : NULL, *body = conv ? cJSON_PrintUnformatted(o) : NULL;
    if (body) response_store_put(srv->responses, r->id, conv, body);
    free(conv);
    free(body);
    return o;
}

static char *responses_whole(const server *srv, const request *r) { return api_print(finished_response(srv, r)); }

/* ---- the stream ---- */

static bool event(shape_stream *s, const char *type, cJSON *o) {
    cJSON_AddStringToObject(o, "type", type);
    cJSON_AddNumberToObject(o, "sequence_number", s->seq++);
    return sse_event(s->buf, type, api_print(o));
}

static bool with_response(shape_stream *s, const char *type) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "response", response_object(s->srv, s->r, NULL));
    return event(s, type, o);
}

static bool open_response(shape_stream *s) {
    if (s->started) return true;
    s->started = true;
    return with_response(s, "response.created") && with_response(s, "response.in_progress");
}

/* An event about output item i (item_id, output_index), with one more field. */
static bool item_event(shape_stream *s, const char *type, bool call, const char *key, cJSON *value) {
    char id[48];
    cJSON *o = cJSON_CreateObject();
    item_id(s->r, s->items, call, id, sizeof id);
    cJSON_AddStringToObject(o, "item_id", id);
    cJSON_AddNumberToObject(o, "output_index", s->items);
    if (!call) cJSON_AddNumberToObject(o, "content_index", 0);
    cJSON_AddItemToObject(o, key, value);
    return event(s, type, o);
}

static bool item_added(shape_stream *s, cJSON *item, bool done) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "output_index", s->items);
    cJSON_AddItemToObject(o, "item", item);
    return event(s, done ? "response.output_item.done" : "response.output_item.added", o);
}

/* Text is gathered until it holds more than whitespace; then its message item opens. */
static bool responses_text(shape_stream *s, size_t from, size_t to) {
    if (!open_response(s) || ARRAY_RESERVE(s->text, s->text_cap, s->text_len + (to - from) + 1, "a stream", NULL))
        return false;
    memcpy(s->text + s->text_len, s->r->text + from, to - from);
    s->text_len += to - from;
    s->text[s->text_len] = 0;
    bool ok = true;
    if (!s->text_open && !blank(s->text, s->text_len)) {
        ok = item_added(s, output_item(s->r, s->items, NULL, 0, NULL, NULL, false), false) &&
             item_event(s, "response.content_part.added", false, "part", text_part(""));
        s->text_open = true;
    }
    if (ok && s->text_open && s->text_sent < s->text_len) {
        ok = item_event(s, "response.output_text.delta", false, "delta", cJSON_CreateString(s->text + s->text_sent));
        s->text_sent = s->text_len;
    }
    return ok;
}

/* The open message item's closing events; whitespace gathered without one is dropped. */
static bool close_text(shape_stream *s) {
    bool ok = true;
    if (s->text_open) {
        ok = item_event(s, "response.output_text.done", false, "text", cJSON_CreateString(s->text)) &&
             item_event(s, "response.content_part.done", false, "part", text_part(s->text)) &&
             item_added(s, output_item(s->r, s->items, s->text, 0, NULL, NULL, true), true);
        s->items++;
    }
    s->text_open = false;
    s->text_len = s->text_sent = 0;
    return ok;
}

static bool responses_call(shape_stream *s, const char *name, const char *arguments) {
    if (!open_response(s) || !close_text(s)) return false;
    bool ok =
        item_added(s, output_item(s->r, s->items, NULL, s->calls, name, "", false), false) &&
        item_event(s, "response.function_call_arguments.delta", true, "delta", cJSON_CreateString(arguments)) &&
        item_event(s, "response.function_call_arguments.done", true, "arguments", cJSON_CreateString(arguments)) &&
        item_added(s, output_item(s->r, s->items, NULL, s->calls, name, arguments, true), true);
    s->items++;
    return ok;
}

static bool responses_end(shape_stream *s) {
    if (!open_response(s) || !close_text(s)) return false;
    cJSON *resp = finished_response(s->srv, s->r);
    if (!resp) return false;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "response", resp);
    return event(s, s->r->finish == FINISH_LENGTH ? "response.incomplete" : "response.completed", o);
}

static bool responses_fail(shape_stream *s, const api_error *e) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "code", e->status >= 500 ? "server_error" : "invalid_request_error");
    cJSON_AddStringToObject(o, "message", e->msg);
    cJSON_AddNullToObject(o, "param");
    return event(s, "error", o);
}

const api_shape api_shape_responses = {responses_whole, responses_text, responses_call,
                                       responses_end,   responses_fail, api_error_body};

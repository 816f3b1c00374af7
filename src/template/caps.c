/* A chat template's capabilities, found at load time by rendering probe conversations, as
 * minja's chat-template capability detection does: templates disagree on the shapes of a tool
 * conversation (a tool call's arguments as a JSON string, as OpenAI's API sends them, or as an
 * object, as vLLM passes them; an assistant message's content null, "" or null kept as none), and a shape a
 * template does not expect either fails (DeepSeek-R1 concatenates the arguments to a string)
 * or renders wrong (a template that `| tojson`s them quotes a string). Each probe's error is
 * the answer, so it is dropped. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/template.h"

#define PROBE_KEY    "probe_key"
#define PROBE_VALUE  "probe_value"
#define PROBE_ARGS   "{\"" PROBE_KEY "\": \"" PROBE_VALUE "\"}"
#define PROBE_ID     "call_probe_0"
#define PROBE_RESULT "probe_tool_result"

/* A user turn, an assistant turn with one tool call (arguments as an object or the string
 * PROBE_ARGS; content null or ""), and the tool's result, with one tool offered. */
static cJSON *probe_context(bool string_args, chat_call_content content) {
    cJSON *ctx = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(ctx, "messages");
    cJSON *user = cJSON_CreateObject();
    cJSON_AddStringToObject(user, "role", "user");
    cJSON_AddStringToObject(user, "content", "probe_question");
    cJSON_AddItemToArray(msgs, user);
    cJSON *asst = cJSON_CreateObject();
    cJSON_AddStringToObject(asst, "role", "assistant");
    if (content == CALL_CONTENT_EMPTY) cJSON_AddStringToObject(asst, "content", "");
    else cJSON_AddNullToObject(asst, "content");
    cJSON *call = cJSON_CreateObject(), *fn = cJSON_CreateObject();
    cJSON_AddStringToObject(call, "id", PROBE_ID);
    cJSON_AddStringToObject(call, "type", "function");
    cJSON_AddStringToObject(fn, "name", "probe_tool");
    if (string_args) cJSON_AddStringToObject(fn, "arguments", PROBE_ARGS);
    else cJSON_AddItemToObject(fn, "arguments", cJSON_Parse(PROBE_ARGS));
    cJSON_AddItemToObject(call, "function", fn);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(asst, "tool_calls"), call);
    cJSON_AddItemToArray(msgs, asst);
    cJSON *tool = cJSON_CreateObject();
    cJSON_AddStringToObject(tool, "role", "tool");
    cJSON_AddStringToObject(tool, "tool_call_id", PROBE_ID);
    cJSON_AddStringToObject(tool, "content", PROBE_RESULT);
    cJSON_AddItemToArray(msgs, tool);
    cJSON_AddItemToObject(ctx, "tools",
                          cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"probe_tool\","
                                      "\"description\":\"a probe\",\"parameters\":{\"type\":\"object\","
                                      "\"properties\":{\"" PROBE_KEY "\":{\"type\":\"string\"}}}}}]"));
    return ctx;
}

/* The probe's rendering (malloc'd), or NULL when the template fails on it. */
static char *probe(const chat_template *t, bool string_args, chat_call_content content) {
    cJSON *ctx = probe_context(string_args, content);
    char *out = NULL;
    loom_err err;
    if (!ctx || chat_template_render(t, ctx, content == CALL_CONTENT_NONE, &out, &err)) out = NULL;
    cJSON_Delete(ctx);
    return out;
}

static bool shows_string(const char *out) { return out && strstr(out, PROBE_ARGS); }

static bool shows_object(const char *out) { return out && strstr(out, PROBE_KEY) && strstr(out, PROBE_VALUE); }

/* Each argument form with each content shape. The first shape (in chat_call_content's order)
 * whose rendering shows the call; where none does, the first that renders at all. */
chat_template_caps chat_template_probe(const chat_template *t) {
    enum { SHAPES = CALL_CONTENT_NONE + 1 };
    chat_template_caps c = {0};
    char *strings[SHAPES], *objects[SHAPES];
    for (int k = 0; k < SHAPES; k++) {
        strings[k] = probe(t, true, (chat_call_content)k);
        objects[k] = probe(t, false, (chat_call_content)k);
        c.string_arguments |= shows_string(strings[k]);
        c.object_arguments |= shows_object(objects[k]);
    }
    char **chosen = chat_template_wants_objects(c) ? objects : strings;
    bool (*shows)(const char *) = chat_template_wants_objects(c) ? shows_object : shows_string;
    int pick = -1;
    for (int k = 0; k < SHAPES && pick < 0; k++)
        if (shows(chosen[k])) pick = k;
    for (int k = 0; k < SHAPES && pick < 0; k++)
        if (chosen[k]) pick = k;
    c.call_content = pick < 0 ? CALL_CONTENT_DROPPED : (chat_call_content)pick;
    const char *any = pick < 0 ? NULL : chosen[pick];
    c.tool_call_ids = any && strstr(any, PROBE_ID);
    c.tool_results = any && strstr(any, PROBE_RESULT);
    for (int k = 0; k < SHAPES; k++) {
        free(strings[k]);
        free(objects[k]);
    }
    return c;
}

bool chat_template_wants_objects(chat_template_caps c) { return !c.string_arguments; }

void chat_template_caps_describe(chat_template_caps c, char *buf, size_t cap) {
    snprintf(buf, cap, "tool call arguments as %s%s%s%s",
             c.string_arguments   ? "a string"
             : c.object_arguments ? "an object"
                                  : "neither form",
             c.call_content == CALL_CONTENT_EMPTY  ? ", content \"\" for null"
             : c.call_content == CALL_CONTENT_NONE ? ", content null kept"
                                                   : "",
             c.tool_call_ids ? ", shows call ids" : "", c.tool_results ? "" : ", tool results not shown");
}

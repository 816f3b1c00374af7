/* Chat Completions bodies' pieces, for the APIs translated into them (chat_body.h). */
#include "serve/chat_body.h"

#include <stdbool.h>
#include <string.h>

#include "serve/fields.h"

cJSON *chat_message(const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    if (content) cJSON_AddStringToObject(m, "content", content);
    else cJSON_AddNullToObject(m, "content");
    return m;
}

cJSON *chat_tool(const char *name, const char *description, const cJSON *parameters) {
    cJSON *tool = cJSON_CreateObject(), *fn = cJSON_CreateObject();
    cJSON_AddStringToObject(tool, "type", "function");
    cJSON_AddStringToObject(fn, "name", name);
    if (description) cJSON_AddStringToObject(fn, "description", description);
    if (parameters) cJSON_AddItemToObject(fn, "parameters", cJSON_Duplicate(parameters, true));
    cJSON_AddItemToObject(tool, "function", fn);
    return tool;
}

cJSON *chat_tool_call(const char *id, const char *name, const char *arguments) {
    cJSON *call = cJSON_CreateObject(), *fn = cJSON_CreateObject();
    cJSON_AddStringToObject(call, "id", id);
    cJSON_AddStringToObject(call, "type", "function");
    cJSON_AddStringToObject(fn, "name", name);
    cJSON_AddStringToObject(fn, "arguments", arguments);
    cJSON_AddItemToObject(call, "function", fn);
    return call;
}

void chat_copy_field(const cJSON *in, cJSON *out, const char *from, const char *to) {
    const cJSON *v = get_field(in, from);
    if (v) cJSON_AddItemToObject(out, to, cJSON_Duplicate(v, true));
}

void chat_choose_tool(cJSON *body, const char *name) {
    cJSON *c = cJSON_AddObjectToObject(body, "tool_choice");
    cJSON_AddStringToObject(c, "type", "function");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(c, "function"), "name", name);
}

int chat_tools_from_flat(const cJSON *in, cJSON *out, const char *type, const char *schema_key, api_error *e) {
    const cJSON *tools = get_field(in, "tools"), *t;
    if (!tools) return 0;
    if (!cJSON_IsArray(tools)) return api_fail(e, 400, "tools", "'tools' must be an array");
    cJSON *list = cJSON_AddArrayToObject(out, "tools");
    bool schema_required = !strcmp(schema_key, "input_schema");
    int i = 0;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *ty = get_field(t, "type"), *name = get_field(t, "name"), *schema = get_field(t, schema_key),
                    *desc = get_field(t, "description");
        if (ty || !schema_required) { /* Anthropic's custom tools may leave their type out */
            if (!cJSON_IsString(ty) || strcmp(ty->valuestring, type))
                return api_fail(e, 400, "tools", "tools[%d]: the tool type '%.60s' is not supported (only %s)", i,
                                cJSON_IsString(ty) ? ty->valuestring : "(none)", type);
        }
        if (!cJSON_IsString(name) || !name->valuestring[0] || (schema_required && !schema) ||
            (schema && !cJSON_IsObject(schema)) || (desc && !cJSON_IsString(desc)))
            return api_fail(e, 400, "tools",
                            "tools[%d] must have a non-empty string 'name', %s object '%s' and an optional string "
                            "'description'",
                            i, schema_required ? "an" : "an optional", schema_key);
        cJSON_AddItemToArray(list, chat_tool(name->valuestring, desc ? desc->valuestring : NULL, schema));
        i++;
    }
    return 0;
}

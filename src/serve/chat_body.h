/* The pieces of a Chat Completions body that the Messages and Responses translators build
 * (chat_body.c), so that both write them in one shape. */
#ifndef LOOM_SERVE_CHAT_BODY_H
#define LOOM_SERVE_CHAT_BODY_H
#include <cjson/cJSON.h>

#include "serve/fields.h"

/* {"role", "content"} (content NULL: null). */
cJSON *chat_message(const char *role, const char *content);
/* {"type": "function", "function": {"name", "description"?, "parameters"?}} (copies). */
cJSON *chat_tool(const char *name, const char *description, const cJSON *parameters);
/* An assistant's tool call: {"id", "type": "function", "function": {"name", "arguments"}}. */
cJSON *chat_tool_call(const char *id, const char *name, const char *arguments);
/* The `tools` of in, in Anthropic's and the Responses API's flat shape ({type, name,
 * description, SCHEMA_KEY}), as out's chat tools: each of the given type (Anthropic: "custom",
 * which may be left out; Responses: "function"), its schema under schema_key (input_schema,
 * required; parameters, optional). Other tool types are refused by name. -1 with e on failure. */
int chat_tools_from_flat(const cJSON *in, cJSON *out, const char *type, const char *schema_key, api_error *e);
/* in's field `from`, when present and not null, copied into out as `to`. */
void chat_copy_field(const cJSON *in, cJSON *out, const char *from, const char *to);
/* Adds tool_choice naming a function to body. */
void chat_choose_tool(cJSON *body, const char *name);

#endif

/* Chat templates: Hugging Face's Jinja2 chat templates rendered exactly as transformers'
 * apply_chat_template renders them (jinja2's ImmutableSandboxedEnvironment with trim_blocks,
 * lstrip_blocks and loop controls; the raise_exception and strftime_now globals; transformers'
 * tojson filter and {% generation %} tag). The subset of Jinja2 that published templates use is
 * implemented; anything else is refused with an error naming it, at parse time where the
 * construct can be recognised statically (unknown tags, filters and tests, unsupported syntax),
 * otherwise when it is reached (e.g. an unsupported string method).
 *
 * Known differences from Python: integers are 64-bit (overflow is an error, not a bignum); JSON
 * numbers arrive through cJSON, so an integral number written as 1.0 in the context is the int
 * 1, and integers beyond 2^53 lose precision; case mapping (lower, upper, title, ...) of letters
 * outside ASCII is an error rather than Python's Unicode tables; str()/repr() treat as
 * printable every code point except controls, separators and the common format characters.
 *
 * Limits (each an error return, so no template or context can hang or exhaust memory):
 * output TMPL_MAX_OUTPUT bytes, TMPL_MAX_MEMORY bytes of working memory per render,
 * TMPL_MAX_STEPS evaluation steps, macro calls nested TMPL_MAX_DEPTH deep, and expressions or
 * blocks nested TMPL_MAX_NESTING deep in the source. */
#ifndef LOOM_TEMPLATE_TEMPLATE_H
#define LOOM_TEMPLATE_TEMPLATE_H
#include <cjson/cJSON.h>
#include <stdbool.h>

#include "loom.h"

#define TMPL_MAX_OUTPUT  (16u << 20)
#define TMPL_MAX_MEMORY  (256u << 20)
#define TMPL_MAX_STEPS   20000000L
#define TMPL_MAX_DEPTH   100
#define TMPL_MAX_NESTING 200

typedef struct chat_template chat_template;

/* Parses a template's source; name is used in error messages ("chat template NAME: line N: ..."). */
chat_template *chat_template_parse(const char *source, const char *name, loom_err *err);

/* Renders with the given context, a cJSON object whose members are the template's variables
 * (messages, tools, documents, add_generation_prompt, bos_token, eos_token and any extra kwargs
 * such as enable_thinking or date_string). As transformers 5's apply_chat_template does, each
 * message's keys whose value is null are dropped (kept as none with keep_nulls, as transformers 4
 * passed them: see chat_call_content), a message's reasoning given as "reasoning_content",
 * "thinking" or "reasoning" is passed under both "thinking" and "reasoning_content", and tools,
 * documents (none) and add_generation_prompt (false) are always defined. strftime_now reads the
 * local clock, or SOURCE_DATE_EPOCH when it is set (reproducible prompts and tests). *out is
 * malloc'd and NUL-terminated; raise_exception(msg) becomes an error whose message contains msg. */
int chat_template_render(const chat_template *t, const cJSON *context, bool keep_nulls, char **out, loom_err *err);

void chat_template_free(chat_template *t);

/* How an assistant message's null content beside tool calls (as OpenAI clients send it) reaches
 * the template: dropped, as transformers 5 drops null keys (most templates); "" for templates
 * that read the content unconditionally and fail on a missing key; or kept as none, for
 * templates that show calls only then (DeepSeek-R1's). */
typedef enum chat_call_content { CALL_CONTENT_DROPPED, CALL_CONTENT_EMPTY, CALL_CONTENT_NONE } chat_call_content;

/* What a template renders of a tool conversation (caps.c: found by rendering probes). */
typedef struct chat_template_caps {
    bool string_arguments; /* a tool call's arguments given as a JSON string appear verbatim */
    bool object_arguments; /* given as an object, its keys and values appear */
    chat_call_content call_content;
    bool tool_call_ids; /* a tool call's id appears */
    bool tool_results;  /* a tool message's content appears */
} chat_template_caps;

chat_template_caps chat_template_probe(const chat_template *t);
/* Whether to pass a tool call's arguments as an object: unless the string appears verbatim
 * (then the model saw the client's own text, as minja decides), so that templates that
 * `| tojson` them, or concatenate them to a string, each get the form they expect. */
bool chat_template_wants_objects(chat_template_caps c);
/* One line for `loom serve`'s start-up ("tool call arguments as a string, ..."). */
void chat_template_caps_describe(chat_template_caps c, char *buf, size_t cap);

/* A model's chat templates: the one a request without tools renders, and the one a request
 * with tools (even an empty list) renders, which is a named "tool_use" template where the model
 * has one and the same template otherwise; both NULL when the model has none. Also
 * tokenizer_config.json's bos_token / eos_token (strings or {"content": ...}), NULL if absent,
 * which the caller may fill in from the model's tokenizer. Each template's capabilities. */
typedef struct chat_templates {
    chat_template *plain, *tools;
    char *tools_source; /* the source of `tools` (a tool-call format is detected from it) */
    chat_template_caps plain_caps, tools_caps;
    char *bos_token, *eos_token;
} chat_templates;

/* Finds them as transformers' tokenizer does: override_path (--chat-template, a file) if
 * non-NULL; else model_template, the one the model file carries (a GGUF's
 * tokenizer.chat_template), if non-NULL, with model_tools (its tokenizer.chat_template.tool_use,
 * or NULL) as its "tool_use"; else chat_template.jinja and additional_chat_templates/NAME.jinja in model_dir
 * (NULL: no folder), which replace tokenizer_config.json's "chat_template" (a string, or a list
 * of {"name", "template"}). Of several named templates, "tool_use" and "default" as above;
 * no "default" among several is an error listing the names. Returns 0 (with no templates when
 * the model has none), or -1 with err filled when a file cannot be read or a template parsed. */
int chat_templates_load(const char *model_dir, const char *override_path, const char *model_template,
                        const char *model_tools, chat_templates *out, loom_err *err);
void chat_templates_free(chat_templates *t);

#endif

/* The grammar that forces a tool call in a model family's format (tool_grammar.c). */
#ifndef LOOM_SERVE_TOOL_GRAMMAR_H
#define LOOM_SERVE_TOOL_GRAMMAR_H
#include "serve/tool_calls.h"

/* GBNF (root rule `root`) for output that is a call in p's format to one of `tools` (OpenAI's
 * tools array, already validated), or only to the one named `only` (non-NULL), whose arguments
 * follow the tool's parameters schema; parallel: one or more calls. NULL with err when a schema
 * is not supported (the converter's message) or p cannot be forced. */
char *tool_calls_gbnf(tool_parser p, const cJSON *tools, const char *only, bool parallel, loom_err *err);

#endif

/* Tool calls in a model family's output format: the text a model writes, parsed into OpenAI's
 * tool calls (a name, and arguments as a compact JSON string) and the content around them; the
 * family chosen from a chat template's source; and the GBNF that forces a call in that format.
 * Formats and names follow vLLM's tool parsers:
 *   hermes       <tool_call>{"name": N, "arguments": {...}}</tool_call>, repeated (Qwen, Hermes)
 *   llama3_json  [<|python_tag|>]{"name": N, "parameters": {...}}; {...} (the whole output)
 *   mistral      [TOOL_CALLS][{"name": N, "arguments": {...}}, ...], or [TOOL_CALLS]N[ARGS]{...}
 *   deepseek_v3  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\n{...}
 *                \n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜> (also V3.1's N<｜tool▁sep｜>{...})
 *   granite      <|tool_call|>[{"name": N, "arguments": {...}}, ...] (or <tool_call>[...])
 *   pythonic     [f(a=1, b="x"), g()] with Python literals (the whole output)
 * Text that looks like a call but does not parse stays content, as in vLLM.
 *
 * One scanner serves whole texts and streams: fed the text so far, it hands out items (content
 * or a complete call) only once no later byte can change them, so feeding a text in any split
 * gives the same items as feeding it whole. */
#ifndef LOOM_SERVE_TOOL_CALLS_H
#define LOOM_SERVE_TOOL_CALLS_H
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "loom.h"

/* DeepSeek-V3's markers (special tokens in its tokenizer) */
#define DS_CALLS_BEGIN "<｜tool▁calls▁begin｜>"
#define DS_CALLS_END   "<｜tool▁calls▁end｜>"
#define DS_CALL_BEGIN  "<｜tool▁call▁begin｜>"
#define DS_CALL_END    "<｜tool▁call▁end｜>"
#define DS_SEP         "<｜tool▁sep｜>"

typedef enum tool_parser {
    TOOL_PARSER_NONE,
    TOOL_PARSER_HERMES,
    TOOL_PARSER_LLAMA3_JSON,
    TOOL_PARSER_MISTRAL,
    TOOL_PARSER_DEEPSEEK_V3,
    TOOL_PARSER_GRANITE,
    TOOL_PARSER_PYTHONIC,
} tool_parser;

/* vLLM's name for p ("none" for TOOL_PARSER_NONE). */
const char *tool_parser_name(tool_parser p);
/* The parser vLLM names `name`; TOOL_PARSER_NONE when unknown. */
tool_parser tool_parser_find(const char *name);
/* The known names, comma-separated, for error messages. */
const char *tool_parser_names(void);
/* The format a chat template writes calls in, from markers in its source, as llama.cpp
 * detects it; TOOL_PARSER_NONE when none is found. */
tool_parser tool_parser_detect(const char *template_source);

/* One item of output: content text [from, to), or a call (name and arguments malloc'd). */
typedef struct tool_item {
    bool is_call;
    size_t from, to;
    char *name, *arguments;
} tool_item;

/* A scanner's place in a text; zero it with the parser set to start. */
typedef struct tool_stream {
    tool_parser parser;
    size_t pos;       /* bytes handed out as items (or skipped) */
    int state;        /* where pos stands: in text, or in a list of calls (tool_calls.c) */
    int open;         /* which of the family's markers opened the list */
    int calls_in_run; /* calls parsed in the current list */
    size_t run_start; /* where the list's opening marker began */
} tool_stream;

/* The next item of text[0, len) (done: the text is complete). Returns 1 with *it filled (a
 * call's strings are the caller's to free), 0 when nothing more can be decided yet, -1 when
 * out of memory (err). */
int tool_stream_next(tool_stream *s, const char *text, size_t len, bool done, tool_item *it, loom_err *err);

/* A whole output parsed: the content (NULL when there is none but whitespace), the calls. */
typedef struct tool_call {
    char *name, *arguments;
} tool_call;
typedef struct tool_parse {
    char *content;
    tool_call *calls;
    int n_calls;
} tool_parse;
/* max_calls: calls kept (later ones dropped; parallel_tool_calls false keeps 1). 0 or -1. */
int tool_calls_parse(tool_parser p, const char *text, size_t len, int max_calls, tool_parse *out, loom_err *err);
void tool_parse_free(tool_parse *t);

#endif

/* The regex converter's inside form, for json_schema.c (regex.c). */
#ifndef LOOM_GRAMMAR_REGEX_H
#define LOOM_GRAMMAR_REGEX_H
#include "grammar/grammar.h"

/* pattern as one GBNF expression appended to out. json: the pattern is a JSON Schema `pattern`,
 * so it searches (an end without its anchor takes any characters) and what it matches is written
 * JSON-escaped, for the inside of a JSON string. */
int regex_expr(const char *pattern, bool json, gbuf *out, loom_err *err);

#endif

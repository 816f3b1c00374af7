/* Structured output in the server (structured.c): grammars from the request's fields, compiled
 * through the server's cache, and sampling under their masks. */
#ifndef LOOM_SERVE_STRUCTURED_H
#define LOOM_SERVE_STRUCTURED_H
#include "grammar/grammar.h"
#include "serve/fields.h"
#include "serve/server.h"

/* The vocabulary's bytes and the grammar cache (none for a model without a tokenizer). */
int structured_init(server *srv, loom_err *err);
void structured_free(server *srv);
/* The grammar the body asks for (response_format, structured_outputs, grammar, json_schema; or
 * r->gbnf already set by a forced tool call), compiled into r->grammar; 400 naming the field
 * for a bad or unsupported one. */
int structured_parse(server *srv, const cJSON *root, request *r, api_error *e);
/* The next token of r under its grammar from a row of logits ([vocab]; row and allowed are
 * scratch of vocab floats and (vocab + 31) / 32 words), before the matcher takes it; -1 with
 * err when no token is allowed. */
int32_t structured_sample(request *r, const float *logits, int vocab, float *row, uint32_t *allowed, loom_err *err);

#endif

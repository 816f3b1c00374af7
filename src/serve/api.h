/* OpenAI's API as JSON: request bodies parsed into requests (api_request.c), and responses,
 * stream chunks and error bodies built from them (api_response.c), in the shapes OpenAI's
 * clients parse, tool calls included (message.tool_calls, delta.tool_calls). vLLM's extensions
 * are taken where clients send them (top_k, min_p, ignore_eos,
 * repetition_penalty, min_tokens, stop_token_ids, allowed_token_ids, chat_template_kwargs,
 * add_generation_prompt, /tokenize, /detokenize). */
#ifndef LOOM_SERVE_API_H
#define LOOM_SERVE_API_H
#include <cjson/cJSON.h>

#include "serve/fields.h"
#include "serve/server.h"

/* Parses a /v1/completions or /v1/chat/completions body into a new request (prompt tokenized,
 * chat template rendered, sampler ready). NULL with e filled (4xx) when the body is not a
 * valid request for this server (500 when out of memory). */
request *api_parse_generate(server *srv, req_kind kind, const char *body, size_t len, api_error *e);
/* POST /tokenize and /detokenize: the response body, or NULL with e filled (or, when cJSON ran
 * out of memory printing it, NULL with e untouched). */
char *api_tokenize(server *srv, const char *body, size_t len, api_error *e);
char *api_detokenize(server *srv, const char *body, size_t len, api_error *e);

/* Response bodies (malloc'd JSON; NULL when out of memory). Caller holds the server lock.
 * api_response: every choice of r (the first choice; best_of: the n of best cumulative
 * log-probability), usage summed over them. */
char *api_response(const server *srv, const request *r);
/* A stream chunk carrying choice r's text [text_from, text_to) and tokens [tok_from, tok_to),
 * with its index; `first` adds the chat role (and the echoed prompt); finish (non-NULL: the last
 * chunk) the finish reason. */
char *api_chunk(const server *srv, const request *r, size_t text_from, size_t text_to, int tok_from, int tok_to,
                bool first, const char *finish);
/* A chat stream chunk for tool call `index`: with name, the call begins (index, id, type, name
 * and empty arguments, as OpenAI streams it); else a fragment of its arguments. */
char *api_tool_chunk(const server *srv, const request *r, int index, const char *name, const char *arguments,
                     bool first);
/* The finish reason r's response gives: "tool_calls" when n_calls calls were made. */
const char *api_finish_name(const request *r, int n_calls);
/* The final chunk with only usage (stream_options.include_usage), r being the first choice. */
char *api_usage_chunk(const server *srv, const request *r);
char *api_error_body(const api_error *e);
char *api_models(const server *srv);

#endif

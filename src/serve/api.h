/* The server's APIs as JSON: request bodies parsed into requests, and answers built from them
 * in the shape each API's clients parse, whole or streamed (an api_shape each):
 *  - OpenAI's Completions and Chat Completions (api_request.c, api_response.c), tool calls
 *    included, with vLLM's extensions where clients send them (top_k, min_p, ignore_eos,
 *    repetition_penalty, min_tokens, stop_token_ids, allowed_token_ids, chat_template_kwargs,
 *    add_generation_prompt, /tokenize, /detokenize);
 *  - Anthropic's Messages (api_messages.c) and OpenAI's Responses (api_responses.c), each
 *    translated into a chat request, so that templates, tools and grammars work the same;
 *  - the pooling APIs (api_pooling.c): embeddings (--task embed), score and rerank (--task
 *    score). */
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
/* o as compact JSON (malloc'd; NULL when out of memory), o deleted. */
char *api_print(cJSON *o);
/* Tool call `index` of r's id: prefix and 16 hex digits, unique to the request and the call
 * (Mistral's template insists on 9 alphanumerics, and gets them whatever the prefix). */
void api_tool_call_id(const request *r, int index, const char *prefix, char *id, size_t cap);

/* Parts of the parser the other APIs' parsers build on (api_request.c): a body's JSON (an
 * object, else NULL with a 400 in e); a chat request from a Chat Completions body (which the
 * Messages and Responses parsers translate theirs into); and a chat body's prompt rendered and
 * tokenized into r (-1 with e filled on failure). */
cJSON *api_parse_body(const char *body, size_t len, api_error *e);
/* The body's `model`, when given, must be the served name (else a 404 naming it). */
int api_check_model(const server *srv, const cJSON *root, api_error *e);
request *api_generate_json(server *srv, req_kind kind, const cJSON *root, api_error *e);
int api_chat_prompt(server *srv, const cJSON *root, bool add_special, request *r, api_error *e);

/* Anthropic's Messages API (api_messages.c): POST /v1/messages into a request, and
 * /v1/messages/count_tokens's answer. */
request *api_parse_messages(server *srv, const char *body, size_t len, api_error *e);
char *api_count_tokens(server *srv, const char *body, size_t len, api_error *e);
/* OpenAI's Responses API (api_responses.c): POST /v1/responses into a request (the stored
 * conversation of previous_response_id before its input), and GET /v1/responses/ID. */
request *api_parse_responses(server *srv, const char *body, size_t len, api_error *e);
char *api_stored_response(server *srv, const char *id, api_error *e);
/* The pooling APIs (api_pooling.c): POST /v1/embeddings (--task embed), /v1/score and
 * /v1/rerank (--task score); a request per input, the others the first's choices. */
request *api_parse_embeddings(server *srv, const char *body, size_t len, api_error *e);
request *api_parse_score(server *srv, const char *body, size_t len, api_error *e);
request *api_parse_rerank(server *srv, const char *body, size_t len, api_error *e);

/* ---- an answer in the shape of the API that asked (one table per API) ---- */

/* A stream's events as text (server-sent events), which the HTTP front hands out in blocks. */
typedef struct sse_buf {
    char *out;
    size_t len, cap;
} sse_buf;
/* Appends "event: NAME" (name NULL: no such line) and "data: JSON", and frees json; false when
 * out of memory (json NULL: making it ran out). */
bool sse_event(sse_buf *b, const char *name, char *json);

/* Where the stream of a one-choice request stands in its API's events (zero it, then set buf,
 * srv and r). Lock held while it is used. */
typedef struct shape_stream {
    sse_buf *buf;
    const server *srv;
    const request *r;
    bool started;   /* the opening events are out */
    int tokens;     /* output tokens the events have covered */
    int calls;      /* tool calls sent */
    int items;      /* output items (content blocks) begun */
    bool text_open; /* the last of them is text, still open */
    char *text;     /* Responses: that item's text so far, and how much of it is sent */
    size_t text_len, text_cap, text_sent;
    int seq; /* Responses: the next event's sequence_number */
} shape_stream;

typedef struct api_shape {
    /* The whole answer of a finished request (NULL when out of memory). Lock held. */
    char *(*whole)(const server *srv, const request *r);
    /* A stream's events: content [from, to) of r->text; a complete tool call; the end (finish
     * reason, usage); a failure, which ends it. False when out of memory. */
    bool (*text)(shape_stream *s, size_t from, size_t to);
    bool (*call)(shape_stream *s, const char *name, const char *arguments);
    bool (*end)(shape_stream *s);
    bool (*fail)(shape_stream *s, const api_error *e);
    /* An error's body (NULL when out of memory). */
    char *(*error_body)(const api_error *e);
} api_shape;

extern const api_shape api_shape_openai, api_shape_messages, api_shape_responses, api_shape_embeddings, api_shape_score,
    api_shape_rerank;
const api_shape *api_shape_of(req_api api);
/* OpenAI's stream end once every choice has finished: usage (when asked) and [DONE]. */
bool api_stream_done(sse_buf *b, const server *srv, const request *r);

#endif

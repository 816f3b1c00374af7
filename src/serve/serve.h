/* `loom serve`: an HTTP server over the engine for OpenAI's and Anthropic's clients and for
 * browsers, with continuous batching.
 * The pieces, one file each:
 *  - http.c:      the HTTP front (GNU libmicrohttpd): routes, body limits, responses, streaming;
 *  - api_request.c, api_response.c: OpenAI's API as JSON: request bodies into `request`s;
 *                 responses, stream chunks and error bodies out;
 *  - api_messages.c, api_responses.c: Anthropic's Messages and OpenAI's Responses APIs,
 *                 translated into chat requests (chat_body.c), answered in their own shapes
 *                 (sse.c writes every stream's events); response_store.c, the stored
 *                 Responses conversations;
 *  - ui.c:        the chat page at /, embedded;
 *  - scheduler.c: continuous batching: admits requests into sequence slots from their cached
 *                 prefixes, preempts when KV blocks run out, builds each step's batch
 *                 (every running sequence's next token plus chunks of prompts), samples;
 *  - replicas.c:  the data-parallel replicas from rank 0: one scheduler each, the balancer that
 *                 gives each request to one, and the loop that runs their steps together;
 *  - steps.c:     how rank 0 hands each round of steps to the other ranks, and their loop;
 *  - metrics.c:   the Prometheus counters and histograms behind GET /metrics;
 *  - request.c:   a request's output text: streaming decode and stop strings;
 *  - tool_calls.c: tool calls read out of that text in a model family's format (whole or as
 *                 it streams), and the family detected from a chat template;
 *  - tool_grammar.c: the GBNF that forces a call in that format (tool_choice required/named);
 *  - serve.c:     start-up and shutdown on each rank;
 *  - server.h:    the state they share, at the bottom; fields.c, the request fields' readers
 *                 beneath every parser; clock.h, the clock.
 * Each file has its header. Rank 0 runs HTTP and the schedulers; the others only run the steps
 * they are sent. */
#ifndef LOOM_SERVE_SERVE_H
#define LOOM_SERVE_SERVE_H
#include "serve/server.h"

/* Runs the server on this rank until SIGTERM/SIGINT (drained: 0) or a failure (1). */
int serve_run(loom_comm *comm, loom_model *m, loom_engine *e, const serve_options *o);
/* What the engine needs for the server's steps (max_tokens, max_seqs), given eo's other fields. */
loom_engine_options serve_engine_options(const loom_engine_options *eo, const serve_options *o);

#endif

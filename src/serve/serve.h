/* `loom serve`: an OpenAI-compatible HTTP server over the engine, with continuous batching.
 * The pieces, one file each:
 *  - http.c:      the HTTP front (GNU libmicrohttpd): routes, body limits, responses, streaming;
 *  - api_request.c, api_response.c: OpenAI's API as JSON: request bodies into `request`s;
 *                 responses, stream chunks and error bodies out;
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
 *  - serve.c:     start-up and shutdown on each rank.
 * Rank 0 runs HTTP and the schedulers; the others only run the steps they are sent. */
#ifndef LOOM_SERVE_SERVE_H
#define LOOM_SERVE_SERVE_H
#include <pthread.h>

#include "grammar/grammar.h"
#include "loom.h"
#include "serve/metrics.h"
#include "serve/request.h"
#include "template/template.h"

typedef struct serve_options {
    const char *host;             /* address to listen on */
    int port;                     /* 0: any free port (printed) */
    const char *served_name;      /* the model's name in the API */
    const char *model_dir;        /* where to look for a chat template (NULL: embedded model) */
    const char *chat_template;    /* --chat-template FILE */
    const char *tool_call_parser; /* --tool-call-parser NAME (NULL: detected from the template) */
    bool enable_auto_tool_choice; /* --enable-auto-tool-choice (vLLM's; loom parses calls whenever
                                     it has a parser, so it only asks that there be one) */
    int max_num_seqs;             /* sequences running at once (slots; their KV shares the block pool) */
    bool prefix_routing;          /* --data-parallel-routing prefix: prefer a replica's cached prefix */
    int max_num_batched_tokens;   /* tokens per engine step */
    int max_queue;                /* requests waiting beyond that; more get 503 */
    size_t max_body_bytes;        /* larger request bodies get 413 */
    double header_timeout;        /* seconds a client has to finish its request headers */
    int max_per_address;          /* connections one IP address may hold open; more are refused */
    uint64_t seed;                /* seeds of requests that give none derive from it */
    int num_speculative_tokens;   /* --speculative-config's k on every rank (0: none) */
    loom_speculator *speculator;  /* rank 0's proposer (NULL: none) */
} serve_options;

/* Runs the server on this rank until SIGTERM/SIGINT (drained: 0) or a failure (1). */
int serve_run(loom_comm *comm, loom_model *m, loom_engine *e, const serve_options *o);
/* What the engine needs for the server's steps (max_tokens, max_seqs), given eo's other fields. */
loom_engine_options serve_engine_options(const loom_engine_options *eo, const serve_options *o);

typedef struct sched sched;

/* State shared by the HTTP threads and the scheduler. `lock` guards every request and the
 * queues; the engine runs outside it. */
typedef struct server {
    const serve_options *o;
    loom_model *m;
    loom_model_info info;
    int max_ctx;
    chat_templates tmpl;     /* none: chat requests get 400 */
    grammar_vocab *gvocab;   /* the vocabulary's bytes for structured output (NULL: no tokenizer) */
    grammar_cache *grammars; /* compiled grammars by their text */
    int tool_parser;         /* the tool_parser (serve/tool_calls.h) reading calls in chat outputs with
                                tools (0: none; the output stays content) */
    pthread_mutex_t lock;
    pthread_cond_t work; /* a request arrived or was cancelled: wakes the scheduler */
    sched **sch;         /* [dp]: each data-parallel replica's (replicas.c) */
    int dp;
    metrics met;
    bool draining;    /* SIGTERM: finish what runs, take nothing new */
    char failed[512]; /* the engine failed: every request fails with this */
    uint64_t next_id;
} server;

/* Queues r and its other choices on one replica's scheduler (one more reference to each is
 * taken; the scheduler may hold the others back, see scheduler.c); returns 0, or an HTTP status
 * with msg filled: 503 when the queue has no room for every choice or the server is draining or
 * failed. Caller holds the lock. */
int sched_submit(sched *s, request *r, char *msg, size_t cap);
/* Adds one replica's gauges (requests running and waiting, slots and KV blocks in use) as they
 * are now to m's. Lock held. */
void sched_gauges(const sched *s, metrics *m);
/* The replicas seen from rank 0 (replicas.c). replicas_submit: queues r on the replica `pin`
 * names (-1: none; the X-data-parallel-rank header), else (with prefix routing) on the one
 * holding the longest cached prefix of its prompt among those within PREFIX_SLACK of the least
 * load, else on the least loaded (vLLM's waiting x 4 + running); a request never moves. 400 for a pin out of range, else as
 * sched_submit. replicas_gauges: m's gauges over every replica. Both under the lock. */
int replicas_submit(server *srv, request *r, int pin, char *msg, size_t cap);
void replicas_gauges(server *srv, metrics *m);

/* The HTTP front: starts listening (printing the address), returns NULL with err on failure. */
typedef struct http_front http_front;
http_front *http_start(server *srv, loom_err *err);
void http_stop(http_front *h);

#endif

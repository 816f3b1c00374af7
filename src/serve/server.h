/* The server's options and the state its HTTP threads and schedulers share (serve.h lists the
 * files), at the bottom of serve/: every part includes it, and it includes none of them. */
#ifndef LOOM_SERVE_SERVER_H
#define LOOM_SERVE_SERVER_H
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
    int max_per_address;          /* idle connections one IP address may hold; one more closes its oldest */
    size_t responses_store_bytes; /* the Responses API's store of conversations (0: store nothing) */
    bool no_ui;                   /* --no-ui: no chat page at / */
    bool pool_every_token;        /* an embedding model with mean pooling: every prompt token's
                                     output row is read (so a pass returns up to a step's tokens) */
    const char *score_tokens;     /* --score-tokens NO,YES: a reranker's two tokens (words or ids) */
    const char *score_template;   /* --score-template FILE: Jinja writing a (query, document) pair's
                                     prompt (NULL: the query's tokens then the document's) */
    uint64_t seed;                /* seeds of requests that give none derive from it */
    int num_speculative_tokens;   /* --speculative-config's k on every rank (0: none) */
    loom_speculator *speculator;  /* rank 0's proposer (NULL: none) */
} serve_options;

typedef struct sched sched;
typedef struct response_store response_store;

/* State shared by the HTTP threads and the scheduler. `lock` guards every request and the
 * queues; the engine runs outside it. */
typedef struct server {
    const serve_options *o;
    loom_model *m;
    loom_model_info info;
    int max_ctx;
    chat_templates tmpl;       /* none: chat requests get 400 */
    grammar_vocab *gvocab;     /* the vocabulary's bytes for structured output (NULL: no tokenizer) */
    grammar_cache *grammars;   /* compiled grammars by their text */
    response_store *responses; /* the Responses API's stored responses */
    int32_t score_ids[2];      /* --task score: the tokens whose logits make a score (no, yes) */
    chat_template *score_tmpl; /* --score-template, parsed (NULL: none) */
    int tool_parser;           /* the tool_parser (serve/tool_calls.h) reading calls in chat outputs with
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

#endif

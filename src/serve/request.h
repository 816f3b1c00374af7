/* One generation request as the server holds it: what the client asked (parsed from its JSON by
 * api_request.c), and what the scheduler has produced so far. The HTTP front that owns the client
 * and the scheduler thread share it under the server's lock; each keeps a reference, and the
 * last to let go frees it. */
#ifndef LOOM_SERVE_REQUEST_H
#define LOOM_SERVE_REQUEST_H
#include <stdatomic.h>

#include "grammar/grammar.h"
#include "loom.h"

#define REQ_MAX_STOPS        8   /* stop strings per request (OpenAI allows 4) */
#define REQ_MAX_TOP_LOGPROBS 20  /* as OpenAI's API */
#define REQ_MAX_CHOICES      128 /* n and best_of, as OpenAI's API */

/* A generation (completion or chat), or a pooling: the prompt's output rows pooled into an
 * embedding or a score, nothing generated. */
typedef enum req_kind { REQ_COMPLETION, REQ_CHAT, REQ_POOL } req_kind;

/* The API a request came through, which shapes its answer (api.h): OpenAI's Completions and
 * Chat Completions, Anthropic's Messages, OpenAI's Responses. The last two are chat requests. */
typedef enum req_api { API_OPENAI, API_MESSAGES, API_RESPONSES, API_EMBEDDINGS, API_SCORE, API_RERANK } req_api;

typedef enum req_state {
    REQ_WAITING,  /* queued for a sequence slot (again, when preempted) */
    REQ_RUNNING,  /* holds a slot: prefilling, then decoding */
    REQ_FINISHED, /* done (finish reason set) or failed (error set) */
} req_state;

typedef enum req_finish { FINISH_NONE, FINISH_STOP, FINISH_LENGTH, FINISH_CANCELLED } req_finish;

/* One generated token with its log-probability and the most likely alternatives. */
typedef struct req_token {
    int32_t id;
    float logprob;
    int n_top;
    int32_t top_id[REQ_MAX_TOP_LOGPROBS];
    float top_logprob[REQ_MAX_TOP_LOGPROBS];
    size_t text_end; /* bytes of the output text once this token is decoded */
} req_token;

typedef struct request {
    /* asked */
    req_kind kind;
    req_api api;
    uint64_t serial; /* the server's number for it, unique: ids derive from it */
    char id[40];
    long created; /* unix time */
    int32_t *prompt;
    int n_prompt;
    int max_tokens; /* new tokens at most */
    loom_sampling sampling;
    char *stop[REQ_MAX_STOPS];
    int n_stop;
    bool stream, include_usage;
    bool logprobs;    /* return log-probabilities of the chosen tokens */
    int top_logprobs; /* and of this many alternatives */
    char *rendered;   /* chat: the prompt the template made (for /tokenize) */
    char *gbnf;       /* the grammar the output must follow (GBNF, see grammar/grammar.h): from
                         response_format, structured_outputs, grammar or a forced tool call;
                         NULL: none */
    grammar *grammar; /* gbnf compiled (a reference) */
    /* logits processing (logits.h), as vLLM's SamplingParams: allowed_token_ids (none: all),
     * penalties (0, 0, 1: off), logit_bias (ids and biases), min_tokens (EOS and stop_ids masked
     * until that many tokens) */
    int32_t *allowed_ids;
    int n_allowed;
    float presence_penalty, frequency_penalty, repetition_penalty;
    int32_t *bias_id;
    float *bias;
    int n_bias;
    int min_tokens;
    int32_t *stop_ids; /* stop_token_ids: the output ends with "stop" there, their text left out */
    int n_stop_ids;
    char *echo; /* completions' echo: the prompt's text, which the output follows (NULL: none) */
    /* Responses: the conversation given (chat messages, JSON), which the store keeps with the
     * output; the request's fields the answer repeats (a JSON object; rerank's: top_n and the
     * documents); and whether to store it (api_responses.c) */
    char *conversation, *echoed;
    bool store;

    /* n > 1 and best_of: a request is one choice. The first one, which the HTTP front holds,
     * lists them all; the scheduler holds the others back until the first has computed the
     * prompt, so they start from its cached blocks (scheduler.c). */
    int index;                /* this choice's place among them */
    struct request **choices; /* the first's: [n_choices], [0] itself, the others its references */
    int n_choices;            /* the first's: choices generated (best_of, else n) */
    int n_return;             /* the first's: choices returned (n): those of best cumulative logprob */
    bool siblings_held;       /* the first's: choices[1..] are not queued yet */
    bool ranked;              /* best_of: sum its tokens' log-probabilities into cum_logprob */
    double cum_logprob;
    int tool_parser;          /* chat with tools: the tool_parser (serve/tool_calls.h) reading calls
                                 out of the output; 0: the output is content */
    bool parallel_tool_calls; /* false: one call at most (later ones are dropped) */

    /* an embedding: the sum of the rows pooled so far (mean pooling: every prompt token's; last:
     * the last one's), [the model's out_width]; then, once finished, the embedding itself. A
     * score: [1], the reranker's probability of "yes" at the last token */
    double *pooled;
    int n_pooled;
    bool as_base64; /* the first's: embeddings answered as base64 of their float32 bytes */

    /* produced (under the server lock) */
    req_state state;
    req_finish finish;
    char error[512];   /* set when the request failed in the engine */
    int error_status;  /* its HTTP status: 500 (0), or 400 where the request's own grammar failed */
    int slot;          /* KV sequence slot while running */
    int computed;      /* positions of prompt and output whose K and V its sequence holds */
    int cached_tokens; /* prompt tokens its first admission found in the prefix cache (-1: not
                          admitted yet) */
    req_token *tokens; /* generated, in order */
    int n_tokens;
    size_t cap_tokens;
    int32_t *context; /* the prompt's ids then the generated ones (n_prompt + n_tokens), which a
                         speculative proposer reads; NULL until the first token */
    size_t cap_context;
    char *text; /* decoded output, stop string excluded */
    size_t text_len, text_cap;
    size_t text_ready;                /* bytes of text that no stop string can still claim */
    bool stop_cut;                    /* a stop string ended the text: nothing may follow it */
    const char *stop_matched;         /* that stop string (one of stop[]) */
    double t_arrive, t_first, t_last; /* monotonic seconds: arrival, first token, latest token */
    atomic_bool cancel; /* the client left: free the slot at the next step (the grammar reads it mid-step) */

    /* generation state (scheduler only) */
    loom_sampler *smp;
    loom_detokenizer *dec; /* NULL: the model has no tokenizer (ids only) */
    grammar_matcher *gm;   /* where the output is in its grammar (made at its first token) */

    /* called, lock held, when tokens, text or state change: the HTTP front resumes the
     * connection waiting for them (NULL: nobody waits) */
    void (*wake)(void *ctx);
    void *wake_ctx;
    int refs;
} request;

/* A request with its defaults (max_tokens unset: -1; greedy; no stops; one choice) and one
 * reference; NULL when out of memory. */
request *request_new(req_kind kind);
/* Another choice of r: a new request with what r asked (prompt, limits, stops, logits
 * processing, output options), nothing produced, and no sampler or decoder yet; NULL with err
 * when out of memory. */
request *request_clone(const request *r, loom_err *err);
/* Drops a reference; frees on the last (the first choice lets go of the others). Caller holds
 * the server lock. */
void request_unref(request *r);
/* Whether id is one of r's stop_token_ids. */
bool request_is_stop_token(const request *r, int32_t id);
/* Whether every choice of r has finished; the error of the first that failed (NULL: none), its
 * HTTP status in *status. */
bool request_all_finished(const request *r);
const char *request_error(const request *r, int *status);
/* Appends token id (and its log-probabilities) to r's output: decodes it, applies the stop
 * strings once it has more than min_tokens tokens, as vLLM (across token boundaries: text a
 * stop string might still claim is held back), and sets finish when a stop string matched. Out of memory for its output, r fails: error says
 * why, finish is set (cancelled). */
void request_add_token(request *r, const req_token *t);
/* Ends r's text: flushes the decoder's held-back bytes and releases held-back text. */
void request_end_text(request *r);
/* Tells whoever waits for r (its wake callback) that r changed. Caller holds the server lock. */
void request_changed(request *r);
/* The finish reason as OpenAI names it. */
const char *request_finish_name(const request *r);

#endif

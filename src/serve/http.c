/* The HTTP front, on GNU libmicrohttpd (Debian's libmicrohttpd-dev). Chosen over civetweb: a
 * GNU project maintained since 2007, a C API with no embedded scripting or file serving to
 * switch off, responses produced by a callback (server-sent events without buffering), and
 * its own limits on connections and idle time. It parses HTTP; loom reads the
 * bodies.
 *
 * No connection holds a thread: MHD's few event threads serve them all (epoll), so thousands of
 * idle connections cost a socket and a small record each. A request waiting for the engine
 * (a non-streaming answer, a stream's next tokens) suspends its connection, and the scheduler
 * resumes it when the request changes (request_changed). One watcher thread closes clients
 * that have not finished their request headers within --header-timeout, and cancels the
 * requests of waiting clients that left, so their KV slots free at the next step rather than
 * when generation ends. Routes: POST /v1/completions, /v1/chat/completions, /v1/messages,
 * /v1/messages/count_tokens, /v1/responses, /v1/embeddings, /v1/score, /v1/rerank (and
 * /rerank), /tokenize, /detokenize; GET
 * /v1/responses/ID,
 * /v1/models, /health, /metrics, and the chat page at / (unless --no-ui). */
#include "serve/http.h"

#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "serve/api.h"
#include "serve/clock.h"
#include "serve/replicas.h"
#include "serve/tool_calls.h"
#include "serve/ui.h"
#include "util/alloc.h"
#include "util/err.h"

#define STREAM_BLOCK   16384 /* bytes MHD asks a stream for at a time */
#define IDLE_TIMEOUT_S 60    /* MHD closes a connection silent this long (a body upload, an answer) */
#define WATCH_S        0.1   /* how often the watcher looks at the connections */
#define EVENT_THREADS  2     /* MHD's threads, whatever the number of connections */
/* Connections: past MAX_CONNECTIONS a request is answered 503 with Retry-After; MHD refuses
 * at accept only past MHD_CONNECTIONS. An address may hold --max-connections-per-address idle
 * ones (no request, or its headers unfinished): one more closes its oldest idle connection that
 * has been idle IDLE_GRACE_S, so a client opening many connections at once for requests (a
 * benchmark, a proxy) is never refused, while an idle flood cannot grow. */
#define MAX_CONNECTIONS 4096
#define MHD_CONNECTIONS (MAX_CONNECTIONS + 256)
#define IDLE_GRACE_S    1.0
#define DRAIN_WAIT_S    30 /* at shutdown, how long answers still being sent may take */

/* One client connection, from accept to close (MHD's socket context). */
typedef struct conn {
    struct conn *prev, *next; /* the front's list, under its conns_lock */
    struct MHD_Connection *c;
    int fd;
    uint8_t addr[17]; /* the client's address: family, then its 4 or 16 bytes */
    double since;     /* when its current request began: the accept, or its previous answer */
    bool headers;     /* that request's headers are in */
    bool closing;     /* the watcher shut it down */
    bool abandoned;   /* the server stops: what it waits for will not come (under the server lock) */
    /* under the server lock: the request it waits for, and whether MHD has it suspended */
    request *waiting;
    bool suspended;
} conn;

struct http_front {
    struct MHD_Daemon *d;
    server *srv;
    _Atomic int in_flight; /* requests begun and not yet answered in full */
    pthread_mutex_t conns_lock;
    conn *conns;
    _Atomic int n_conns;
    pthread_t watcher;
    _Atomic bool stop;
};

/* A connection's request body as it arrives, and the answer it waits for. */
typedef struct upload {
    char *body;
    size_t len, cap;
    size_t dropped; /* bytes of an oversized chunked body read and thrown away */
    bool too_big, answered;
    request *waiting; /* a non-streaming request submitted, its answer not sent yet */
} upload;

/* A streaming response: events built from the request's progress in its API's shape, handed
 * to MHD in blocks. OpenAI's requests without tool parsing follow each choice (sent[]); the
 * others have one choice, read as items of content and tool calls (tools, ss). */
typedef struct stream {
    server *srv;
    conn *k;
    request *r; /* the first choice */
    const api_shape *shape;
    sse_buf buf;
    size_t out_off; /* bytes of buf handed to MHD */
    bool ended;
    tool_stream tools; /* where the output has been read to */
    shape_stream ss;   /* and how far its events have gone */
    struct sent {
        size_t text;
        int tokens;
        bool started, ended;
    } sent[]; /* [r->n_choices] */
} stream;

/* A body that could not be made (NULL: out of memory) is answered with a fixed 500. */
static enum MHD_Result send_body(struct MHD_Connection *c, int status, char *body, const char *type) {
    static const char no_memory[] =
        "{\"error\":{\"message\":\"out of memory making the response\",\"type\":\"server_error\",\"param\":null,"
        "\"code\":500}}";
    struct MHD_Response *res =
        body ? MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE)
             : MHD_create_response_from_buffer(strlen(no_memory), (void *)no_memory, MHD_RESPMEM_PERSISTENT);
    if (!res) {
        free(body);
        return MHD_NO;
    }
    if (!body) {
        status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        type = "application/json";
    }
    MHD_add_response_header(res, "Content-Type", type);
    if (status == MHD_HTTP_SERVICE_UNAVAILABLE) MHD_add_response_header(res, "Retry-After", "1");
    enum MHD_Result rc = MHD_queue_response(c, status, res);
    MHD_destroy_response(res);
    return rc;
}

/* An error in the shape of the API the path belongs to. */
static enum MHD_Result send_error(struct MHD_Connection *c, const api_shape *sh, const api_error *e) {
    return send_body(c, e->status, sh->error_body(e), "application/json");
}

static enum MHD_Result fail(struct MHD_Connection *c, const api_shape *sh, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static enum MHD_Result fail(struct MHD_Connection *c, const api_shape *sh, int status, const char *fmt, ...) {
    api_error e = {.status = status};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.msg, sizeof e.msg, fmt, ap);
    va_end(ap);
    return send_error(c, sh, &e);
}

/* Anthropic's paths answer errors in its shape; the others in OpenAI's. */
static const api_shape *shape_of_path(const char *url) {
    return api_shape_of(strncmp(url, "/v1/messages", 12) ? API_OPENAI : API_MESSAGES);
}

/* True when the peer has closed its end (a pending request of a keep-alive client is not). */
static bool client_gone(int fd) {
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static conn *conn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* r's changes wake the connection waiting for it (the scheduler calls this, lock held). */
static void wake(void *ctx) {
    conn *k = ctx;
    if (!k->suspended) return;
    k->suspended = false;
    MHD_resume_connection(k->c);
}

/* Choice i of request r (r itself for 0). */
static request *choice_of(request *r, int i) { return i ? r->choices[i] : r; }

/* Links k and the request it waits for (every choice of it), both ways; unlinked by whichever
 * of the request's end and the connection's close comes first, so neither is left pointing at
 * freed memory. Lock held for both. */
static void wait_for(conn *k, request *r) {
    k->waiting = r;
    for (int i = 0; i < r->n_choices; i++) {
        choice_of(r, i)->wake = wake;
        choice_of(r, i)->wake_ctx = k;
    }
}

static void stop_waiting(request *r) {
    conn *k = r->wake_ctx;
    if (k) k->waiting = NULL, k->suspended = false;
    for (int i = 0; i < r->n_choices; i++) {
        choice_of(r, i)->wake = NULL;
        choice_of(r, i)->wake_ctx = NULL;
    }
}

/* Parks k until its request changes (lock held). */
static void suspend(conn *k) {
    k->suspended = true;
    MHD_suspend_connection(k->c);
}

/* The client of a waiting request left: its choices stop at the next step (lock held). */
static void cancel(server *srv, request *r) {
    if (request_all_finished(r)) return;
    for (int i = 0; i < r->n_choices; i++) choice_of(r, i)->cancel = true;
    pthread_cond_signal(&srv->work);
}

/* Appends the events choice i's progress allows (lock held): text no stop string can still
 * claim, with the log-probabilities of the tokens it completes; at its end, its finish reason.
 * False when out of memory. */
static bool choice_events(stream *s, int i) {
    request *r = choice_of(s->r, i);
    struct sent *p = &s->sent[i];
    bool done = r->state == REQ_FINISHED;
    if (p->ended) return true;
    int tokens = r->n_tokens;
    if (!done)
        while (tokens > p->tokens && r->tokens[tokens - 1].text_end > r->text_ready) tokens--;
    /* a token that adds no text still makes a chunk when it has log-probabilities to show, or
     * when the model has no tokenizer (no text will ever come) */
    bool new_tokens = tokens > p->tokens && (r->logprobs || !s->srv->info.has_tokenizer);
    if (!done && r->text_ready <= p->text && !new_tokens) return true;
    size_t to = done ? r->text_len : r->text_ready;
    bool ok = sse_event(
        &s->buf, NULL,
        api_chunk(s->srv, r, p->text, to, p->tokens, tokens, !p->started, done ? request_finish_name(r) : NULL));
    p->text = to;
    p->tokens = tokens;
    p->started = true;
    p->ended = done;
    return ok;
}

/* The stream of a one-choice request read as items (lock held): content as it becomes final
 * (with a tool parser, a possible call's start held back) and each call once complete, in the
 * request's API's shape; at the end, its finish. */
static bool item_events(stream *s, bool done) {
    request *r = s->r;
    const char *text = r->text ? r->text : "";
    size_t ready = done ? r->text_len : r->text_ready;
    bool ok = true;
    if (!r->tool_parser && ready > s->tools.pos) {
        ok = s->shape->text(&s->ss, s->tools.pos, ready);
        s->tools.pos = ready;
    }
    tool_item it;
    loom_err err;
    int rc = 0;
    while (r->tool_parser && ok && (rc = tool_stream_next(&s->tools, text, ready, done, &it, &err)) == 1) {
        if (!it.is_call) {
            ok = s->shape->text(&s->ss, it.from, it.to);
        } else if (r->parallel_tool_calls || !s->ss.calls) {
            ok = s->shape->call(&s->ss, it.name, it.arguments);
            s->ss.calls++;
        }
        if (it.is_call) free(it.name), free(it.arguments);
    }
    return ok && rc >= 0 && (!done || s->shape->end(&s->ss));
}

/* Appends the events the request's progress allows (lock held), and at the end the API's
 * closing events. Returns whether it appended anything (1 or 0), or -1 when out of memory. */
static int next_events(stream *s) {
    request *r = s->r;
    bool done = request_all_finished(r), ok = true;
    size_t before = s->buf.len;
    api_error e = {.status = 500};
    const char *error = done ? request_error(r, &e.status) : NULL;
    if (error) {
        snprintf(e.msg, sizeof e.msg, "%s", error);
        ok = s->shape->fail(&s->ss, &e);
    } else if (r->tool_parser || r->api != API_OPENAI) {
        ok = item_events(s, done);
    } else {
        for (int i = 0; i < r->n_choices && ok; i++) ok = choice_events(s, i);
        if (ok && done) ok = api_stream_done(&s->buf, s->srv, r);
    }
    if (done) s->ended = true;
    return !ok ? -1 : s->buf.len > before;
}

/* MHD asks for the next block of a stream. With nothing to send yet the connection is
 * suspended (returning 0 then is what MHD expects) until the request changes. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream *s = cls;
    server *srv = s->srv;
    pthread_mutex_lock(&srv->lock);
    for (;;) {
        if (s->out_off < s->buf.len) {
            size_t n = s->buf.len - s->out_off < max ? s->buf.len - s->out_off : max;
            memcpy(buf, s->buf.out + s->out_off, n);
            s->out_off += n;
            if (s->out_off == s->buf.len) s->out_off = s->buf.len = 0;
            pthread_mutex_unlock(&srv->lock);
            return (ssize_t)n;
        }
        if (s->ended) {
            MHD_set_connection_option(s->k->c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S);
            break;
        }
        int got = next_events(s);
        if (got > 0) continue;
        /* out of memory (the stream ends broken), or the client left: the request stops */
        if (got < 0 || s->k->abandoned || client_gone(s->k->fd)) {
            cancel(srv, s->r);
            pthread_mutex_unlock(&srv->lock);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        suspend(s->k);
        pthread_mutex_unlock(&srv->lock);
        return 0;
    }
    pthread_mutex_unlock(&srv->lock);
    return MHD_CONTENT_READER_END_OF_STREAM;
}

/* MHD is done with the stream (sent, or the client left): a request still going is cancelled. */
static void stream_done(void *cls) {
    stream *s = cls;
    server *srv = s->srv;
    pthread_mutex_lock(&srv->lock);
    cancel(srv, s->r);
    stop_waiting(s->r);
    request_unref(s->r);
    pthread_mutex_unlock(&srv->lock);
    free(s->ss.text);
    free(s->buf.out);
    free(s);
}

/* A non-streaming request's answer, once it is finished; until then its connection is
 * suspended, and this runs again when the scheduler resumes it. */
static enum MHD_Result answer_when_done(server *srv, struct MHD_Connection *c, conn *k, upload *u) {
    pthread_mutex_lock(&srv->lock);
    request *r = u->waiting;
    bool gone = k->abandoned || client_gone(k->fd);
    if (!request_all_finished(r) && !gone) {
        suspend(k);
        pthread_mutex_unlock(&srv->lock);
        return MHD_YES;
    }
    cancel(srv, r);
    stop_waiting(r);
    u->waiting = NULL;
    api_error e = {.status = 500};
    const char *error = request_error(r, &e.status);
    const api_shape *sh = api_shape_of(r->api);
    char *body = gone || error ? NULL : sh->whole(srv, r);
    if (!gone && !body) snprintf(e.msg, sizeof e.msg, "%s", error ? error : "out of memory making the response");
    request_unref(r);
    pthread_mutex_unlock(&srv->lock);
    if (gone) return MHD_NO; /* nobody to answer: close */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S);
    if (!body) return send_error(c, sh, &e);
    return send_body(c, MHD_HTTP_OK, body, "application/json");
}

/* The replica the X-data-parallel-rank header pins a request to: -1 without one, -2 when it is
 * not a number (replicas_submit refuses anything but -1 and a replica). */
static int pinned_replica(struct MHD_Connection *c) {
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-data-parallel-rank");
    if (!v) return -1;
    char *end;
    long d = strtol(v, &end, 10);
    return end == v || *end || d < 0 || d > 1 << 20 ? -2 : (int)d;
}

/* Request r, parsed (NULL: refused, e says why), is queued; its answer follows when it is
 * finished, or its stream as it goes, in the shape sh of the API that asked. */
static enum MHD_Result generate(server *srv, struct MHD_Connection *c, conn *k, upload *u, const api_shape *sh,
                                request *r, api_error *e) {
    if (!r) return send_error(c, sh, e);
    sh = api_shape_of(r->api);
    loom_err why;
    stream *s = r->stream ? mem_zalloc(1, sizeof *s + (size_t)r->n_choices * sizeof *s->sent, "a stream", &why) : NULL;
    if (r->stream && !s) {
        pthread_mutex_lock(&srv->lock);
        request_unref(r);
        pthread_mutex_unlock(&srv->lock);
        return fail(c, sh, MHD_HTTP_INTERNAL_SERVER_ERROR, "%s", why.msg);
    }
    pthread_mutex_lock(&srv->lock);
    int status = replicas_submit(srv, r, pinned_replica(c), e->msg, sizeof e->msg);
    if (status) {
        request_unref(r);
        pthread_mutex_unlock(&srv->lock);
        free(s);
        e->status = status;
        return send_error(c, sh, e);
    }
    wait_for(k, r);
    pthread_cond_signal(&srv->work);
    pthread_mutex_unlock(&srv->lock);
    /* generating is not idling: the idle timeout is off until the answer is complete */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    if (!r->stream) {
        u->waiting = r;
        return answer_when_done(srv, c, k, u);
    }
    s->srv = srv, s->k = k, s->r = r, s->shape = sh, s->tools = (tool_stream){.parser = (tool_parser)r->tool_parser};
    s->ss.buf = &s->buf, s->ss.srv = srv, s->ss.r = r;
    struct MHD_Response *res =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_read, s, stream_done);
    if (!res) {
        stream_done(s);
        return MHD_NO;
    }
    MHD_add_response_header(res, "Content-Type", "text/event-stream");
    MHD_add_response_header(res, "Cache-Control", "no-cache");
    enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, res);
    MHD_destroy_response(res);
    return rc;
}

typedef enum route_id {
    COMPLETIONS,
    CHAT,
    MESSAGES,
    COUNT_TOKENS,
    RESPONSES,
    STORED_RESPONSE,
    EMBEDDINGS,
    SCORE,
    RERANK,
    TOKENIZE,
    DETOKENIZE,
    MODELS,
    HEALTH,
    METRICS,
    CHAT_PAGE
} route_id;

/* A path ending in '/' takes one more segment (the id of what it names). A route with a task
 * needs the model run for it (--task). */
static const struct route {
    const char *path, *method;
    route_id id;
    loom_task task;
} routes[] = {
    {"/v1/completions", "POST", COMPLETIONS, LOOM_TASK_GENERATE},
    {"/v1/chat/completions", "POST", CHAT, LOOM_TASK_GENERATE},
    {"/v1/messages", "POST", MESSAGES, LOOM_TASK_GENERATE},
    {"/v1/messages/count_tokens", "POST", COUNT_TOKENS, 0},
    {"/v1/responses", "POST", RESPONSES, LOOM_TASK_GENERATE},
    {"/v1/responses/", "GET", STORED_RESPONSE, 0},
    {"/v1/embeddings", "POST", EMBEDDINGS, LOOM_TASK_EMBED},
    {"/v1/score", "POST", SCORE, LOOM_TASK_SCORE},
    {"/v1/rerank", "POST", RERANK, LOOM_TASK_SCORE},
    {"/rerank", "POST", RERANK, LOOM_TASK_SCORE},
    {"/tokenize", "POST", TOKENIZE, 0},
    {"/detokenize", "POST", DETOKENIZE, 0},
    {"/v1/models", "GET", MODELS, 0},
    {"/health", "GET", HEALTH, 0},
    {"/metrics", "GET", METRICS, 0},
    {"/", "GET", CHAT_PAGE, 0},
};

static enum MHD_Result route(server *srv, struct MHD_Connection *c, conn *k, const char *url, const char *method,
                             upload *u) {
    const struct route *r = NULL;
    const api_shape *sh = shape_of_path(url);
    size_t page_len;
    for (size_t i = 0; i < sizeof routes / sizeof *routes && !r; i++) {
        if (routes[i].id == CHAT_PAGE && srv->o->no_ui) continue;
        size_t n = strlen(routes[i].path);
        if (routes[i].path[n - 1] == '/' && n > 1 ? !strncmp(url, routes[i].path, n) && url[n] && !strchr(url + n, '/')
                                                  : !strcmp(url, routes[i].path))
            r = &routes[i];
    }
    if (!r) return fail(c, sh, MHD_HTTP_NOT_FOUND, "no route %s %s", method, url);
    if (strcmp(method, r->method)) return fail(c, sh, MHD_HTTP_METHOD_NOT_ALLOWED, "%s does not take %s", url, method);
    if (r->task && r->task != srv->info.task) {
        static const char *const names[] = {"auto", "generate", "embed", "score"};
        return fail(c, sh, MHD_HTTP_BAD_REQUEST,
                    "%s needs a model run with --task %s; this server's model runs with --task %s", url, names[r->task],
                    names[srv->info.task]);
    }
    const char *body = u->body ? u->body : "";
    api_error e = {0};
    char *out = NULL;
    switch (r->id) {
    case COMPLETIONS: return generate(srv, c, k, u, sh, api_parse_generate(srv, REQ_COMPLETION, body, u->len, &e), &e);
    case CHAT: return generate(srv, c, k, u, sh, api_parse_generate(srv, REQ_CHAT, body, u->len, &e), &e);
    case MESSAGES: return generate(srv, c, k, u, sh, api_parse_messages(srv, body, u->len, &e), &e);
    case COUNT_TOKENS: out = api_count_tokens(srv, body, u->len, &e); break;
    case RESPONSES: return generate(srv, c, k, u, sh, api_parse_responses(srv, body, u->len, &e), &e);
    case EMBEDDINGS: return generate(srv, c, k, u, sh, api_parse_embeddings(srv, body, u->len, &e), &e);
    case SCORE: return generate(srv, c, k, u, sh, api_parse_score(srv, body, u->len, &e), &e);
    case RERANK: return generate(srv, c, k, u, sh, api_parse_rerank(srv, body, u->len, &e), &e);
    case STORED_RESPONSE: out = api_stored_response(srv, url + strlen(r->path), &e); break;
    case TOKENIZE: out = api_tokenize(srv, body, u->len, &e); break;
    case DETOKENIZE: out = api_detokenize(srv, body, u->len, &e); break;
    case MODELS: out = api_models(srv); break;
    case HEALTH: {
        pthread_mutex_lock(&srv->lock);
        bool up = !srv->draining && !srv->failed[0];
        pthread_mutex_unlock(&srv->lock);
        if (!up)
            return fail(c, sh, MHD_HTTP_SERVICE_UNAVAILABLE, "the server is %s",
                        srv->failed[0] ? "failed" : "shutting down");
        out = mem_strdup("{\"status\":\"ok\"}", "the answer", NULL);
        break;
    }
    case CHAT_PAGE: {
        const char *page = ui_chat_page(&page_len);
        struct MHD_Response *res = MHD_create_response_from_buffer(page_len, (void *)page, MHD_RESPMEM_PERSISTENT);
        if (!res) return MHD_NO;
        MHD_add_response_header(res, "Content-Type", "text/html; charset=utf-8");
        enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, res);
        MHD_destroy_response(res);
        return rc;
    }
    case METRICS: {
        /* before the server's lock: a grammar computing a mask holds its own lock a while */
        size_t grammar_bytes = srv->grammars ? grammar_cache_bytes(srv->grammars) : 0;
        pthread_mutex_lock(&srv->lock);
        srv->met.grammar_cache_bytes = grammar_bytes;
        replicas_gauges(srv, &srv->met);
        out = metrics_text(&srv->met, srv->o->served_name);
        pthread_mutex_unlock(&srv->lock);
        return send_body(c, MHD_HTTP_OK, out, "text/plain; version=0.0.4");
    }
    }
    if (!out && e.status) return send_error(c, sh, &e);
    return send_body(c, MHD_HTTP_OK, out, "application/json"); /* NULL: out of memory, a 500 */
}

/* A request's headers are in: its deadline is met (then each later request on the connection
 * has its own, from the answer before it). */
static void headers_in(http_front *h, conn *k, bool in) {
    pthread_mutex_lock(&h->conns_lock);
    k->headers = in;
    k->since = serve_now();
    pthread_mutex_unlock(&h->conns_lock);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *data, size_t *data_size, void **con_cls) {
    (void)version;
    http_front *h = cls;
    server *srv = h->srv;
    upload *u = *con_cls;
    conn *k = conn_of(c);
    size_t limit = srv->o->max_body_bytes;
    if (!k) return MHD_NO; /* its record could not be made: close */
    if (!u) {              /* headers are in: refuse a declared oversized body before reading it */
        if (!(*con_cls = u = mem_zalloc(1, sizeof *u, "a connection", NULL))) return MHD_NO; /* out of memory: close */
        h->in_flight++;
        headers_in(h, k, true);
        if (h->n_conns > MAX_CONNECTIONS) {
            u->too_big = u->answered = true; /* the body, if any, is read and dropped */
            return fail(c, shape_of_path(url), MHD_HTTP_SERVICE_UNAVAILABLE,
                        "the server holds %d connections, its most; retry", (int)h->n_conns);
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > limit) {
            u->too_big = u->answered = true;
            return fail(c, shape_of_path(url), MHD_HTTP_CONTENT_TOO_LARGE,
                        "the request body (%s bytes) exceeds the limit of %zu bytes", cl, limit);
        }
        return MHD_YES;
    }
    if (*data_size) {
        /* A chunked body past the limit: MHD takes an answer only once the body has ended, so
         * the rest is read and thrown away, up to a bound past which the client is dropped. */
        if (u->too_big || u->len + *data_size > limit) {
            u->too_big = true;
            u->dropped += *data_size;
            *data_size = 0;
            return u->dropped > 16 * limit ? MHD_NO : MHD_YES;
        }
        if (ARRAY_RESERVE(u->body, u->cap, u->len + *data_size + 1, "a request body", NULL))
            return MHD_NO; /* out of memory: drop the connection */
        memcpy(u->body + u->len, data, *data_size);
        u->len += *data_size;
        u->body[u->len] = 0;
        *data_size = 0;
        return MHD_YES;
    }
    if (u->answered) return MHD_YES;
    if (u->too_big) {
        u->answered = true;
        return fail(c, shape_of_path(url), MHD_HTTP_CONTENT_TOO_LARGE,
                    "the request body exceeds the limit of %zu bytes", limit);
    }
    if (u->waiting) return answer_when_done(srv, c, k, u); /* resumed */
    return route(srv, c, k, url, method, u);
}

/* A request ended (answered, or its connection closed): the next one's header deadline starts. */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)toe;
    http_front *h = cls;
    upload *u = *con_cls;
    if (!u) return;
    if (u->waiting) {
        pthread_mutex_lock(&h->srv->lock);
        cancel(h->srv, u->waiting);
        stop_waiting(u->waiting);
        request_unref(u->waiting);
        pthread_mutex_unlock(&h->srv->lock);
    }
    conn *k = conn_of(c);
    if (k) headers_in(h, k, false);
    h->in_flight--;
    free(u->body);
    free(u);
    *con_cls = NULL;
}

static void address_of(struct MHD_Connection *c, uint8_t out[17]) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    memset(out, 0, 17);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    if (!sa) return;
    out[0] = (uint8_t)sa->sa_family;
    if (sa->sa_family == AF_INET) memcpy(out + 1, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    else if (sa->sa_family == AF_INET6) memcpy(out + 1, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
}

/* k's address holds more idle connections than its share: its oldest idle one past the grace
 * is shut down, as the watcher shuts late ones (conns_lock held). */
static void evict_idle(http_front *h, const conn *k) {
    int idle = 0;
    conn *oldest = NULL;
    double now = serve_now();
    for (conn *o = h->conns; o; o = o->next) {
        if (o->headers || o->closing || memcmp(o->addr, k->addr, sizeof k->addr)) continue;
        idle++;
        if (o != k && now - o->since >= IDLE_GRACE_S && (!oldest || o->since < oldest->since)) oldest = o;
    }
    if (idle > h->srv->o->max_per_address && oldest) {
        oldest->closing = true;
        shutdown(oldest->fd, SHUT_RDWR);
    }
}

/* A connection opens (its record joins the list, its address's oldest idle one closing past
 * the address's share) or closes (it leaves, unlinked from any request it waited for). */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    http_front *h = cls;
    conn *k = *socket_context;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!ci || !(k = mem_zalloc(1, sizeof *k, "a connection", NULL))) return; /* on_request closes it */
        *k = (conn){.c = c, .fd = ci->connect_fd, .since = serve_now()};
        address_of(c, k->addr);
        *socket_context = k;
        pthread_mutex_lock(&h->conns_lock);
        if ((k->next = h->conns)) k->next->prev = k;
        h->conns = k;
        h->n_conns++;
        evict_idle(h, k);
        pthread_mutex_unlock(&h->conns_lock);
        return;
    }
    if (!k) return;
    pthread_mutex_lock(&h->conns_lock);
    if (k->prev) k->prev->next = k->next;
    else h->conns = k->next;
    if (k->next) k->next->prev = k->prev;
    h->n_conns--;
    pthread_mutex_unlock(&h->conns_lock);
    pthread_mutex_lock(&h->srv->lock);
    if (k->waiting) stop_waiting(k->waiting);
    pthread_mutex_unlock(&h->srv->lock);
    free(k);
    *socket_context = NULL;
}

/* The watcher: shuts a connection whose request headers are late (MHD then sees it end and
 * closes it), and resumes a suspended one whose client left, which then cancels its request. */
static void *watch(void *arg) {
    http_front *h = arg;
    server *srv = h->srv;
    while (!h->stop) {
        struct timespec ts = {0, (long)(WATCH_S * 1e9)};
        nanosleep(&ts, NULL);
        double now = serve_now();
        pthread_mutex_lock(&h->conns_lock);
        for (conn *k = h->conns; k; k = k->next) {
            if (!k->headers && !k->closing && now - k->since > srv->o->header_timeout) {
                k->closing = true;
                shutdown(k->fd, SHUT_RDWR);
            }
            pthread_mutex_lock(&srv->lock);
            if (k->suspended && client_gone(k->fd)) wake(k);
            pthread_mutex_unlock(&srv->lock);
        }
        pthread_mutex_unlock(&h->conns_lock);
    }
    return NULL;
}

/* A server holds a descriptor a connection: take all the process may have. */
static void raise_fd_limit(void) {
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

http_front *http_start(server *srv, loom_err *err) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai;
    char port[16];
    snprintf(port, sizeof port, "%d", srv->o->port);
    int gai = getaddrinfo(srv->o->host, port, &hints, &ai);
    if (gai) {
        loom_errf(err, "--host %s: %s", srv->o->host, gai_strerror(gai));
        return NULL;
    }
    http_front *h = mem_zalloc(1, sizeof *h, "the HTTP front", err);
    if (!h) {
        freeaddrinfo(ai);
        return NULL;
    }
    h->srv = srv;
    pthread_mutex_init(&h->conns_lock, NULL);
    raise_fd_limit();
    unsigned flags =
        MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    h->d = MHD_start_daemon(flags, (uint16_t)srv->o->port, NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_THREAD_POOL_SIZE, (unsigned)EVENT_THREADS, MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned)IDLE_TIMEOUT_S, MHD_OPTION_CONNECTION_LIMIT, (unsigned)MHD_CONNECTIONS,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_NOTIFY_CONNECTION, on_connection,
                            h, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!h->d) {
        loom_errf(err, "cannot listen on %s:%d (address in use, or not an address of this machine)", srv->o->host,
                  srv->o->port);
        pthread_mutex_destroy(&h->conns_lock);
        free(h);
        return NULL;
    }
    if (pthread_create(&h->watcher, NULL, watch, h)) {
        loom_errf(err, "cannot start the HTTP front's watcher thread");
        MHD_stop_daemon(h->d);
        pthread_mutex_destroy(&h->conns_lock);
        free(h);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    /* the pid is where SIGTERM drains the server (under mpirun, which ends the job itself) */
    fprintf(stderr, "loom serve: listening on http://%s:%u (pid %d)\n", srv->o->host,
            di ? di->port : (unsigned)srv->o->port, (int)getpid());
    if (!srv->o->no_ui)
        fprintf(stderr, "loom serve: a chat page for browsers at http://%s:%u/ (--no-ui turns it off)\n", srv->o->host,
                di ? di->port : (unsigned)srv->o->port);
    return h;
}

/* Stops taking connections, lets the answers being sent finish, then closes the rest (idle
 * keep-alive connections). */
void http_stop(http_front *h) {
    if (!h) return;
    MHD_quiesce_daemon(h->d);
    for (double t0 = serve_now(); h->in_flight > 0 && serve_now() - t0 < DRAIN_WAIT_S;) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    h->stop = true;
    pthread_join(h->watcher, NULL);
    /* answers that did not finish in time: their connections are resumed, to close */
    pthread_mutex_lock(&h->conns_lock);
    pthread_mutex_lock(&h->srv->lock);
    for (conn *k = h->conns; k; k = k->next) {
        k->abandoned = true;
        wake(k);
    }
    pthread_mutex_unlock(&h->srv->lock);
    pthread_mutex_unlock(&h->conns_lock);
    MHD_stop_daemon(h->d);
    pthread_mutex_destroy(&h->conns_lock);
    free(h);
}

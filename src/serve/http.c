/* The HTTP front, on GNU libmicrohttpd (Debian's libmicrohttpd-dev). Chosen over civetweb: a
 * GNU project maintained since 2007, a C API with no embedded scripting or file serving to
 * switch off, responses produced by a callback (server-sent events without buffering), and
 * its own limits on connections, header memory and idle time. It parses HTTP; loom reads the
 * bodies.
 *
 * Each connection has its own thread, so a thread may block: a non-streaming request waits for
 * its request to finish, a stream's callback waits for its next tokens. Both poll the socket
 * while they wait, so a client that leaves frees its KV slot at the next step rather than when
 * generation ends. Routes: POST /v1/completions, /v1/chat/completions, /tokenize, /detokenize;
 * GET /v1/models, /health, /metrics. */
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "serve/api.h"
#include "serve/scheduler.h"
#include "util/alloc.h"
#include "util/err.h"

#define POLL_S          0.2   /* how often a waiting thread checks its client is still there */
#define STREAM_BLOCK    16384 /* bytes MHD asks a stream for at a time */
#define IDLE_TIMEOUT_S  60    /* MHD closes a connection silent this long */
#define MAX_CONNECTIONS 256

struct http_front {
    struct MHD_Daemon *d;
    server *srv;
    _Atomic int in_flight; /* requests begun and not yet answered in full */
};

#define DRAIN_WAIT_S 30 /* at shutdown, how long answers still being sent may take */

/* A connection's request body as it arrives. */
typedef struct upload {
    char *body;
    size_t len, cap;
    bool too_big;
} upload;

/* A streaming response: SSE text built from the request's progress, handed to MHD in blocks. */
typedef struct stream {
    server *srv;
    struct MHD_Connection *c;
    request *r;
    int fd;
    char *out;
    size_t out_len, out_off, out_cap;
    size_t sent_text;
    int sent_tokens;
    bool started, ended;
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
    enum MHD_Result rc = MHD_queue_response(c, status, res);
    MHD_destroy_response(res);
    return rc;
}

static enum MHD_Result send_error(struct MHD_Connection *c, const api_error *e) {
    return send_body(c, e->status, api_error_body(e), "application/json");
}

static enum MHD_Result fail(struct MHD_Connection *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static enum MHD_Result fail(struct MHD_Connection *c, int status, const char *fmt, ...) {
    api_error e = {.status = status};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.msg, sizeof e.msg, fmt, ap);
    va_end(ap);
    return send_error(c, &e);
}

/* True when the peer has closed its end (a pending request of a keep-alive client is not). */
static bool client_gone(int fd) {
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* Waits (lock held) for r to change, up to POLL_S; marks r cancelled if its client left. */
static bool wait_or_gone(server *srv, request *r, int fd) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += (long)(POLL_S * 1e9);
    if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&r->changed, &srv->lock, &until);
    if (r->state == REQ_FINISHED || !client_gone(fd)) return false;
    r->cancel = true;
    pthread_cond_signal(&srv->work);
    return true;
}

/* Appends the event "data: TEXT\n\n"; false when out of memory. */
static bool sse_text(stream *s, const char *text) {
    if (!text || ARRAY_RESERVE(s->out, s->out_cap, s->out_len + strlen(text) + 9, "a stream's events", NULL))
        return false;
    s->out_len += (size_t)sprintf(s->out + s->out_len, "data: %s\n\n", text);
    return true;
}

/* The same with a body it frees (NULL: making it ran out of memory). */
static bool sse(stream *s, char *json) {
    bool ok = sse_text(s, json);
    free(json);
    return ok;
}

/* Appends the events r's progress allows (lock held): text no stop string can still claim,
 * with the log-probabilities of the tokens it completes; at the end the finish reason, usage
 * and [DONE]. Returns whether it appended anything (1 or 0), or -1 when out of memory. */
static int next_events(stream *s) {
    request *r = s->r;
    bool done = r->state == REQ_FINISHED, ok = true;
    size_t before = s->out_len;
    if (done && r->error[0]) {
        api_error e = {.status = 500};
        snprintf(e.msg, sizeof e.msg, "%s", r->error);
        ok = sse(s, api_error_body(&e));
    } else {
        int tokens = r->n_tokens;
        if (!done)
            while (tokens > s->sent_tokens && r->tokens[tokens - 1].text_end > r->text_ready) tokens--;
        /* a token that adds no text still makes a chunk when it has log-probabilities to show,
         * or when the model has no tokenizer (no text will ever come) */
        bool new_tokens = tokens > s->sent_tokens && (r->logprobs || !s->srv->info.has_tokenizer);
        if (done || r->text_ready > s->sent_text || new_tokens) {
            size_t to = done ? r->text_len : r->text_ready;
            ok = sse(s, api_chunk(s->srv, r, s->sent_text, to, s->sent_tokens, tokens, !s->started, done));
            s->sent_text = to;
            s->sent_tokens = tokens;
            s->started = true;
        }
        if (ok && done && r->include_usage) ok = sse(s, api_usage_chunk(s->srv, r));
    }
    if (ok && done) {
        ok = sse_text(s, "[DONE]");
        s->ended = true;
    }
    return !ok ? -1 : s->out_len > before;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream *s = cls;
    server *srv = s->srv;
    pthread_mutex_lock(&srv->lock);
    for (;;) {
        if (s->out_off < s->out_len) {
            size_t n = s->out_len - s->out_off < max ? s->out_len - s->out_off : max;
            memcpy(buf, s->out + s->out_off, n);
            s->out_off += n;
            if (s->out_off == s->out_len) s->out_off = s->out_len = 0;
            pthread_mutex_unlock(&srv->lock);
            return (ssize_t)n;
        }
        if (s->ended) {
            MHD_set_connection_option(s->c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S);
            break;
        }
        int got = next_events(s);
        if (got > 0) continue;
        if (got < 0) { /* out of memory: the stream ends broken, the request stops at the next step */
            s->r->cancel = true;
            pthread_cond_signal(&srv->work);
            pthread_mutex_unlock(&srv->lock);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (wait_or_gone(srv, s->r, s->fd)) {
            pthread_mutex_unlock(&srv->lock);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
    pthread_mutex_unlock(&srv->lock);
    return MHD_CONTENT_READER_END_OF_STREAM;
}

/* MHD is done with the stream (sent, or the client left): a request still going is cancelled. */
static void stream_done(void *cls) {
    stream *s = cls;
    server *srv = s->srv;
    pthread_mutex_lock(&srv->lock);
    if (s->r->state != REQ_FINISHED) {
        s->r->cancel = true;
        pthread_cond_signal(&srv->work);
    }
    request_unref(s->r);
    pthread_mutex_unlock(&srv->lock);
    free(s->out);
    free(s);
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

static enum MHD_Result generate(server *srv, struct MHD_Connection *c, req_kind kind, const upload *u) {
    api_error e = {0};
    request *r = api_parse_generate(srv, kind, u->body ? u->body : "", u->len, &e);
    if (!r) return send_error(c, &e);
    loom_err why;
    stream *s = r->stream ? mem_zalloc(1, sizeof *s, "a stream", &why) : NULL;
    if (r->stream && !s) {
        pthread_mutex_lock(&srv->lock);
        request_unref(r);
        pthread_mutex_unlock(&srv->lock);
        return fail(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "%s", why.msg);
    }
    r->created = time(NULL);
    pthread_mutex_lock(&srv->lock);
    int status = sched_submit(srv->sch, r, e.msg, sizeof e.msg);
    if (status) {
        request_unref(r);
        pthread_mutex_unlock(&srv->lock);
        free(s);
        e.status = status;
        return send_error(c, &e);
    }
    pthread_cond_signal(&srv->work);
    int fd = conn_fd(c);
    /* generating is not idling: the idle timeout is off until the answer is complete */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    if (r->stream) {
        pthread_mutex_unlock(&srv->lock);
        *s = (stream){.srv = srv, .c = c, .r = r, .fd = fd};
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
    bool gone = false;
    while (r->state != REQ_FINISHED) gone |= wait_or_gone(srv, r, fd);
    char *body = gone ? NULL : r->error[0] ? NULL : api_response(srv, r);
    if (!gone && !body)
        snprintf(e.msg, sizeof e.msg, "%s", r->error[0] ? r->error : "out of memory making the response");
    request_unref(r);
    pthread_mutex_unlock(&srv->lock);
    if (gone) return MHD_NO; /* nobody to answer: close */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S);
    if (!body) return e.status = 500, send_error(c, &e);
    return send_body(c, MHD_HTTP_OK, body, "application/json");
}

typedef enum route_id { COMPLETIONS, CHAT, TOKENIZE, DETOKENIZE, MODELS, HEALTH, METRICS } route_id;

static const struct route {
    const char *path, *method;
    route_id id;
} routes[] = {
    {"/v1/completions", "POST", COMPLETIONS},
    {"/v1/chat/completions", "POST", CHAT},
    {"/tokenize", "POST", TOKENIZE},
    {"/detokenize", "POST", DETOKENIZE},
    {"/v1/models", "GET", MODELS},
    {"/health", "GET", HEALTH},
    {"/metrics", "GET", METRICS},
};

static enum MHD_Result route(server *srv, struct MHD_Connection *c, const char *url, const char *method,
                             const upload *u) {
    const struct route *r = NULL;
    for (size_t i = 0; i < sizeof routes / sizeof *routes && !r; i++)
        if (!strcmp(url, routes[i].path)) r = &routes[i];
    if (!r) return fail(c, MHD_HTTP_NOT_FOUND, "no route %s %s", method, url);
    if (strcmp(method, r->method)) return fail(c, MHD_HTTP_METHOD_NOT_ALLOWED, "%s does not take %s", url, method);
    const char *body = u->body ? u->body : "";
    api_error e = {0};
    char *out = NULL;
    switch (r->id) {
    case COMPLETIONS: return generate(srv, c, REQ_COMPLETION, u);
    case CHAT: return generate(srv, c, REQ_CHAT, u);
    case TOKENIZE: out = api_tokenize(srv, body, u->len, &e); break;
    case DETOKENIZE: out = api_detokenize(srv, body, u->len, &e); break;
    case MODELS: out = api_models(srv); break;
    case HEALTH: {
        pthread_mutex_lock(&srv->lock);
        bool up = !srv->draining && !srv->failed[0];
        pthread_mutex_unlock(&srv->lock);
        if (!up)
            return fail(c, MHD_HTTP_SERVICE_UNAVAILABLE, "the server is %s",
                        srv->failed[0] ? "failed" : "shutting down");
        out = mem_strdup("{\"status\":\"ok\"}", "the answer", NULL);
        break;
    }
    case METRICS:
        pthread_mutex_lock(&srv->lock);
        sched_gauges(srv->sch, &srv->met);
        out = metrics_text(&srv->met, srv->o->served_name);
        pthread_mutex_unlock(&srv->lock);
        return send_body(c, MHD_HTTP_OK, out, "text/plain; version=0.0.4");
    }
    if (!out && e.status) return send_error(c, &e);
    return send_body(c, MHD_HTTP_OK, out, "application/json"); /* NULL: out of memory, a 500 */
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *data, size_t *data_size, void **con_cls) {
    (void)version;
    http_front *h = cls;
    server *srv = h->srv;
    upload *u = *con_cls;
    size_t limit = srv->o->max_body_bytes;
    if (!u) { /* headers are in: refuse a declared oversized body before reading it */
        if (!(*con_cls = u = mem_zalloc(1, sizeof *u, "a connection", NULL))) return MHD_NO; /* out of memory: close */
        h->in_flight++;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > limit) {
            u->too_big = true;
            return fail(c, MHD_HTTP_CONTENT_TOO_LARGE, "the request body (%s bytes) exceeds the limit of %zu bytes", cl,
                        limit);
        }
        return MHD_YES;
    }
    if (*data_size) {
        if (u->too_big || u->len + *data_size > limit) {
            u->too_big = true; /* a chunked body past the limit: drop the connection */
            return MHD_NO;
        }
        if (ARRAY_RESERVE(u->body, u->cap, u->len + *data_size + 1, "a request body", NULL))
            return MHD_NO; /* out of memory: drop the connection */
        memcpy(u->body + u->len, data, *data_size);
        u->len += *data_size;
        u->body[u->len] = 0;
        *data_size = 0;
        return MHD_YES;
    }
    if (u->too_big) return MHD_YES; /* answered already */
    return route(srv, c, url, method, u);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)c, (void)toe;
    http_front *h = cls;
    upload *u = *con_cls;
    if (!u) return;
    h->in_flight--;
    free(u->body);
    free(u);
    *con_cls = NULL;
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
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
                     (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    h->d = MHD_start_daemon(flags, (uint16_t)srv->o->port, NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)MAX_CONNECTIONS, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!h->d) {
        loom_errf(err, "cannot listen on %s:%d (address in use, or not an address of this machine)", srv->o->host,
                  srv->o->port);
        free(h);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    /* the pid is where SIGTERM drains the server (under mpirun, which ends the job itself) */
    fprintf(stderr, "loom serve: listening on http://%s:%u (pid %d)\n", srv->o->host,
            di ? di->port : (unsigned)srv->o->port, (int)getpid());
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
    MHD_stop_daemon(h->d);
    free(h);
}

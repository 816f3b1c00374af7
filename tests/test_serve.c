/* `loom serve` from the outside, over loopback only: bad requests (each a 4xx with an OpenAI
 * error body, the server serving on), a client leaving mid-stream, a slow client, thousands of
 * idle connections, late request headers, an oversized chunked body, no leaked KV slots or
 * descriptors, streamed pieces joining to the whole text, the completion equal to
 * `loom run`'s, the same under -tp 2 (with a rank killed: every open request fails cleanly and
 * the job names the rank) and with speculative decoding, and SIGTERM draining the running
 * requests before exiting 0, and grammars ambiguous enough to hold a step ending with a 400
 * while the server serves on.
 * Requests are written by hand here because most of them are malformed on purpose; the real
 * client (the `openai` package) is tests/serve_openai.py. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "check.h"
#include "model/safetensors.h"
#include "mpirun.h"

#define BODY_LIMIT (1 << 20) /* the main test server's --max-body-bytes (loom's default) */
/* the main test server's --header-timeout in seconds: long enough that a loaded machine answers
 * beside an idle flood well within half of it, which a server waiting the idle ones out could not */
#define HEADER_TIMEOUT 8
#define REPLY_TIMEOUT  240 /* seconds: see connect_from */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void nap(double s) {
    struct timespec t = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    nanosleep(&t, NULL);
}

typedef struct server {
    pid_t pid;   /* what we started (loom, or mpirun) */
    pid_t rank0; /* the process serving HTTP, as it reports */
    int port;
    char log[128];
} server;

/* Starts `PREFIX loom serve --port 0 ARGS` with its stderr in a file and waits for its address. */
static int start_with(server *s, const char *prefix, const char *args) {
    snprintf(s->log, sizeof s->log, "/tmp/loom-test-serve-%d-%d.txt", (int)getpid(), (int)(now() * 1000) % 100000);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "exec %s %s serve --port 0 %s 2>%s", prefix, LOOM_BIN, args, s->log);
    s->pid = fork();
    if (s->pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    s->port = 0;
    for (double t0 = now(); now() - t0 < 120 && !s->port; nap(0.05)) {
        FILE *f = fopen(s->log, "r");
        char line[512];
        while (f && fgets(line, sizeof line, f)) {
            char *p = strstr(line, "listening on http://127.0.0.1:");
            if (p && sscanf(p, "listening on http://127.0.0.1:%d (pid %d)", &s->port, &s->rank0) != 2) s->port = 0;
        }
        if (f) fclose(f);
        if (waitpid(s->pid, NULL, WNOHANG) == s->pid) break;
    }
    if (!s->port) fprintf(stderr, "server did not start: %s\n", cmd);
    return s->port ? 0 : -1;
}

static int start(server *s, const char *args) { return start_with(s, "", args); }

/* Sends sig to `to` and returns the server's exit status (-1 if it did not exit in time). */
/* At exit every rank, and rank 0's mirror of each replica, print the digest of the replica's KV
 * bookkeeping ("replica R: KV bookkeeping HEX"): all of a replica's must agree, that is, every
 * rank took rank 0's block decisions. */
static void books_agree(const server *s) {
    FILE *f = fopen(s->log, "r");
    char line[512], first[16][32] = {{0}};
    int seen = 0;
    while (f && fgets(line, sizeof line, f)) {
        const char *at = strstr(line, "replica ");
        int rep;
        char hex[32];
        if (!at || !strstr(line, "KV bookkeeping") || sscanf(at, "replica %d: KV bookkeeping %31s", &rep, hex) != 2 ||
            rep < 0 || rep >= 16)
            continue;
        seen++;
        if (!first[rep][0]) snprintf(first[rep], sizeof first[rep], "%s", hex);
        CHECK(!strcmp(first[rep], hex), "replica %d's KV bookkeeping differs between its ranks: %s against %s (%s)",
              rep, hex, first[rep], s->log);
    }
    if (f) fclose(f);
    CHECK(seen >= 2, "the server printed %d digests of its KV bookkeeping at exit (%s)", seen, s->log);
}

static int stop_via(server *s, pid_t to, int sig, double within_s) {
    kill(to, sig);
    for (double t0 = now(); now() - t0 < within_s; nap(0.02)) {
        int st;
        if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
            if (WIFEXITED(st) && !WEXITSTATUS(st)) books_agree(s);
            unlink(s->log);
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
    }
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    return -1;
}

static int stop(server *s, int sig, double within_s) { return stop_via(s, s->pid, sig, within_s); }

/* A connection to 127.0.0.1:port from the loopback address `from` (NULL: the kernel's choice),
 * or -1. Connecting, sending and receiving each give up after REPLY_TIMEOUT s, so no loop waits
 * forever. A whole answer comes in one piece after its last token, and in CI (ctest -j2 beside the
 * heaviest tests) four preempted 90-token requests of the 100M model took over 30 s. */
static int connect_from(const char *from, int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in src = {.sin_family = AF_INET}, dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
    struct timeval tv = {REPLY_TIMEOUT, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv); /* bounds connect() too */
    if ((from && (inet_pton(AF_INET, from, &src.sin_addr) != 1 || bind(fd, (struct sockaddr *)&src, sizeof src))) ||
        connect(fd, (struct sockaddr *)&dst, sizeof dst)) {
        close(fd);
        return -1;
    }
    return fd;
}

static int connect_to(int port) { return connect_from(NULL, port); }

static void send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0) return;
        p += k, n -= (size_t)k;
    }
}

/* The whole response of an HTTP/1.0 exchange (the server closes when done); malloc'd. */
static char *read_all(int fd) {
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);
    for (;;) {
        if (len + 1024 > cap) buf = realloc(buf, cap *= 2);
        ssize_t k = read(fd, buf + len, cap - len - 1);
        if (k <= 0) break;
        len += (size_t)k;
    }
    buf[len] = 0;
    return buf;
}

typedef struct reply {
    int status;
    char *all, *body;
} reply;

/* Sends raw on the connection fd (-1: none was made) and reads the whole answer; closes fd. */
static reply request_raw(int fd, const char *raw, size_t n) {
    reply r = {0};
    if (fd < 0) return r;
    send_all(fd, raw, n);
    r.all = read_all(fd);
    close(fd);
    sscanf(r.all, "HTTP/1.%*d %d", &r.status);
    char *b = strstr(r.all, "\r\n\r\n");
    r.body = b ? b + 4 : r.all + strlen(r.all);
    return r;
}

static reply call_from(const char *from, int port, const char *method, const char *path, const char *body) {
    char head[512];
    size_t n = body ? strlen(body) : 0;
    int h = snprintf(head, sizeof head,
                     "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n",
                     method, path, n);
    char *raw = malloc(h + n + 1);
    memcpy(raw, head, h);
    if (n) memcpy(raw + h, body, n);
    reply r = request_raw(connect_from(from, port), raw, h + n);
    free(raw);
    return r;
}

static reply call(int port, const char *method, const char *path, const char *body) {
    return call_from(NULL, port, method, path, body);
}

static void reply_free(reply *r) { free(r->all); }

/* Sends a completion request and returns the open connection, for reading its answer as it
 * comes (or leaving). */
static int post_completion(int port, const char *body) {
    int fd = connect_to(port);
    char head[128];
    int n = snprintf(head, sizeof head, "POST /v1/completions HTTP/1.0\r\nContent-Length: %zu\r\n\r\n", strlen(body));
    send_all(fd, head, n);
    send_all(fd, body, strlen(body));
    return fd;
}

/* A JSON string field's value in body (first occurrence; escapes kept), into out. */
static int json_str(const char *body, const char *key, char *out, size_t cap) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    const char *p = strstr(body, pat);
    if (!p) return -1;
    p += strlen(pat);
    size_t n = 0;
    while (*p && *p != '"' && n + 1 < cap) {
        if (*p == '\\' && p[1]) out[n++] = *p++;
        out[n++] = *p++;
    }
    out[n] = 0;
    return 0;
}

static double metric(int port, const char *name) {
    reply r = call(port, "GET", "/metrics", NULL);
    double v = -1;
    char pat[128];
    snprintf(pat, sizeof pat, "\nloom:%s{", name);
    const char *p = r.body ? strstr(r.body, pat) : NULL;
    if (p && (p = strchr(p, '}'))) v = atof(p + 1);
    reply_free(&r);
    return v;
}

static int open_fds(pid_t pid) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "ls /proc/%d/fd | wc -l", (int)pid);
    FILE *f = popen(cmd, "r");
    int n = -1;
    if (f && fscanf(f, "%d", &n) != 1) n = -1;
    if (f) pclose(f);
    return n;
}

/* pid's descriptor count once it is down to `want`, or as it is after within_s: the server
 * closes its ends as it sees ours go, not at once. */
static int fds_down_to(pid_t pid, int want, double within_s) {
    int fds;
    for (double t0 = now(); (fds = open_fds(pid)) > want && now() - t0 < within_s;) nap(0.05);
    return fds;
}

/* The text `loom run` prints for a prompt (its trailing newline dropped). */
static char *loom_run(const char *args) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s run %s 2>/dev/null", LOOM_BIN, args);
    FILE *f = popen(cmd, "r");
    char *out = read_all(fileno(f));
    pclose(f);
    size_t n = strlen(out);
    if (n && out[n - 1] == '\n') out[n - 1] = 0;
    return out;
}

static void expect_error(int port, const char *what, const char *method, const char *path, const char *body, int status,
                         const char *needle) {
    reply r = call(port, method, path, body);
    CHECK(r.status == status, "%s: status %d, want %d: %s", what, r.status, status, r.body ? r.body : "");
    CHECK(r.body && strstr(r.body, "{\"error\":{\"message\":") && strstr(r.body, needle), "%s: body %s lacks '%s'",
          what, r.body ? r.body : "(none)", needle);
    reply_free(&r);
}

static void bad_requests(int port) {
    const char *c = "/v1/completions";
    expect_error(port, "malformed JSON", "POST", c, "{\"prompt\": \"x\",", 400, "not valid JSON");
    expect_error(port, "not an object", "POST", c, "[1,2]", 400, "must be a JSON object");
    expect_error(port, "max_tokens a string", "POST", c, "{\"prompt\":\"x\",\"max_tokens\":\"5\"}", 400, "max_tokens");
    expect_error(port, "temperature negative", "POST", c, "{\"prompt\":\"x\",\"temperature\":-1}", 400, "temperature");
    expect_error(port, "stop a number", "POST", c, "{\"prompt\":\"x\",\"stop\":5}", 400, "'stop'");
    expect_error(port, "prompt missing", "POST", c, "{\"max_tokens\":3}", 400, "'prompt' is required");
    expect_error(port, "token id out of range", "POST", c, "{\"prompt\":[1,99999]}", 400, "not a token id");
    expect_error(port, "unknown model", "POST", c, "{\"prompt\":\"x\",\"model\":\"gpt-4\"}", 404, "model_not_found");
    expect_error(port, "max_tokens 0", "POST", c, "{\"prompt\":\"x\",\"max_tokens\":0}", 400, "max_tokens");
    expect_error(port, "max_tokens negative", "POST", c, "{\"prompt\":\"x\",\"max_tokens\":-3}", 400, "max_tokens");
    expect_error(port, "n 200", "POST", c, "{\"prompt\":\"x\",\"n\":200}", 400, "'n' must be an integer in [1, 128]");
    expect_error(port, "suffix", "POST", c, "{\"prompt\":\"x\",\"suffix\":\"y\"}", 400, "'suffix' is not supported");
    expect_error(port, "logit_bias out of the vocabulary", "POST", c, "{\"prompt\":\"x\",\"logit_bias\":{\"512\":1}}",
                 400, "'logit_bias' key '512' is not a token id");
    expect_error(port, "chat without messages", "POST", "/v1/chat/completions", "{\"model\":\"stories260K\"}", 400,
                 "messages");
    expect_error(port, "unknown route", "GET", "/v2/nothing", NULL, 404, "no route");
    expect_error(port, "wrong method", "GET", c, NULL, 405, "does not take GET");
    /* the context is 512 tokens (--max-model-len): a longer prompt, and one that leaves no room */
    char body[8192] = "{\"prompt\":[1";
    for (int i = 0; i < 600; i++) strcat(body, ",300");
    strcat(body, "]}");
    expect_error(port, "prompt beyond the context", "POST", c, body, 400, "maximum context length is 512");
    expect_error(port, "completion beyond the context", "POST", c, "{\"prompt\":\"x\",\"max_tokens\":1000}", 400,
                 "maximum context length is 512");
    /* oversized body: refused from its Content-Length, before it is read */
    const char *big_head = "POST /v1/completions HTTP/1.0\r\nContent-Length: 100000000\r\n\r\n{\"prompt\":\"";
    reply r = request_raw(connect_to(port), big_head, strlen(big_head));
    CHECK(r.status == 413 && strstr(r.body, "exceeds the limit"), "oversized body: %d %s", r.status, r.body);
    reply_free(&r);
    r = call(port, "GET", "/health", NULL);
    CHECK(r.status == 200, "health after the bad requests: %d", r.status);
    reply_free(&r);
}

/* The streamed text (SSE "text" fields joined) of a completion request. */
static char *stream_text(int port, const char *body) {
    reply r = call(port, "POST", "/v1/completions", body);
    size_t cap = 65536, len = 0;
    char *text = calloc(1, cap);
    for (const char *p = r.body; p && (p = strstr(p, "data: {")); p++) {
        char piece[4096];
        if (json_str(p, "text", piece, sizeof piece)) continue;
        len += snprintf(text + len, cap - len, "%s", piece);
    }
    CHECK(r.body && strstr(r.body, "data: [DONE]\n\n"), "stream does not end with [DONE]: %s", r.body ? r.body : "");
    reply_free(&r);
    return text;
}

static void completions_match_run(int port, const char *run_args) {
    char *want = loom_run(run_args);
    reply r = call(port, "POST", "/v1/completions",
                   "{\"prompt\":\"The robot\",\"max_tokens\":24,\"temperature\":0,\"ignore_eos\":true}");
    char text[4096] = "";
    CHECK(r.status == 200 && !json_str(r.body, "text", text, sizeof text), "completion: %d %s", r.status, r.body);
    CHECK(!strcmp(text, want), "completion '%s' differs from loom run's '%s'", text, want);
    CHECK(strstr(r.body, "\"finish_reason\":\"length\"") && strstr(r.body, "\"completion_tokens\":24"),
          "usage or finish reason: %s", r.body);
    reply_free(&r);
    char *streamed =
        stream_text(port, "{\"prompt\":\"The robot\",\"max_tokens\":24,\"temperature\":0,\"ignore_eos\":true,"
                          "\"stream\":true}");
    CHECK(!strcmp(streamed, want), "streamed pieces join to '%s', not '%s'", streamed, want);
    free(streamed);
    free(want);
}

/* A greedy completion of n token ids (salt picks them; stories260K's vocabulary is 512),
 * max_tokens long: the request's body (malloc'd). */
static char *ids_body(int n, int salt, int max_tokens) {
    char *b = malloc((size_t)n * 8 + 128);
    int len = sprintf(b, "{\"prompt\":[");
    for (int i = 0; i < n; i++) len += sprintf(b + len, "%s%d", i ? "," : "", 3 + (i * 37 + salt * 101) % 500);
    sprintf(b + len, "],\"max_tokens\":%d,\"temperature\":0,\"ignore_eos\":true}", max_tokens);
    return b;
}

typedef struct completion {
    int status, cached; /* usage.prompt_tokens_details.cached_tokens (-1: absent) */
    char text[4096];
} completion;

static completion parse_completion(int status, const char *body) {
    completion c = {.status = status, .cached = -1};
    const char *p = body ? strstr(body, "\"cached_tokens\":") : NULL;
    if (p) c.cached = atoi(p + strlen("\"cached_tokens\":"));
    if (!body || json_str(body, "text", c.text, sizeof c.text)) c.status = -1;
    return c;
}

static completion complete(int port, const char *body) {
    reply r = call(port, "POST", "/v1/completions", body);
    completion c = parse_completion(r.status, r.body);
    reply_free(&r);
    return c;
}

/* Prefix caching: the same prompt twice, the second from the first's whole blocks (of
 * block_size) and with the same text; a prompt differing only in its first token hits none. */
static void prefix_reuse(int port, int block_size, const char *where) {
    int n = 2 * block_size + 10;
    char *body = ids_body(n, 7, 16);
    completion first = complete(port, body), again = complete(port, body);
    CHECK(first.status == 200 && again.status == 200, "%s: prefix reuse: %d, %d", where, first.status, again.status);
    CHECK(first.cached == 0 && again.cached == 2 * block_size,
          "%s: a repeated %d-token prompt: cached tokens %d then %d, want 0 then %d", where, n, first.cached,
          again.cached, 2 * block_size);
    CHECK(!strcmp(first.text, again.text), "%s: the text from the cached prefix '%s' differs from '%s'", where,
          again.text, first.text);
    char *other_body = malloc(strlen(body) + 16);
    sprintf(other_body, "{\"prompt\":[5%s", strchr(body, ',')); /* the first id (210) becomes 5 */
    completion other = complete(port, other_body);
    CHECK(other.status == 200 && other.cached == 0, "%s: another first token: status %d, cached %d", where,
          other.status, other.cached);
    free(other_body);
    free(body);
}

/* --kv-cache-dtype int8 in the small budget of preemption(): stories260K's 5 layers of 4 kv heads
 * of 8 take 5 x 2 x (32 codes + 4 scales x 4 bytes) = 480 bytes a position against 1280 in fp32, so
 * 160K hold 21 blocks of 16, not 8. A prompt run twice is served from its cached (rounded) blocks
 * the second time with the same text, and the log names the dtype. */
static void kv_int8(void) {
    server s;
    if (start(&s, "--kv-cache-dtype int8 --block-size 16 --kv-cache-memory-bytes 160K --max-model-len 128")) {
        CHECK(0, "the int8-cache server did not start");
        return;
    }
    CHECK(metric(s.port, "kv_blocks_total") == 21, "an int8 cache of 160K holds %g blocks of 16, not 21",
          metric(s.port, "kv_blocks_total"));
    char *body = ids_body(40, 7, 8);
    completion first = complete(s.port, body), again = complete(s.port, body);
    CHECK(first.status == 200 && again.status == 200 && again.cached == 32 && !strcmp(first.text, again.text),
          "a prompt twice on an int8 cache: %d, %d, cached %d of 40 (want 32), '%s' then '%s'", first.status,
          again.status, again.cached, first.text, again.text);
    free(body);
    char log[4096] = "";
    FILE *f = fopen(s.log, "r");
    log[f ? fread(log, 1, sizeof log - 1, f) : 0] = 0;
    if (f) fclose(f);
    CHECK(strstr(log, "(int8, 21 blocks of 16 positions"), "the server's log does not name the int8 cache: %s", log);
    CHECK(stop(&s, SIGTERM, 60) == 0, "the int8-cache server did not exit 0 on SIGTERM");
}

/* A KV cache of 8 blocks of 16 positions and 4 sequences of 20 + 70 positions (6 blocks each):
 * run together, the newest are preempted and recomputed, and each text equals its text alone.
 * A prompt cached before them is evicted by them (and their runs alone), and its next run,
 * recomputed, is the same. */
static void preemption(void) {
    server s;
    if (start(&s, "--block-size 16 --kv-cache-memory-bytes 160K --max-model-len 128 --max-num-seqs 4")) {
        CHECK(0, "the small-cache server did not start");
        return;
    }
    CHECK(metric(s.port, "kv_blocks_total") == 8, "the server holds %g blocks, not 8",
          metric(s.port, "kv_blocks_total"));
    enum { N = 4 };
    char *bodies[N], *kept = ids_body(40, 99, 8);
    completion alone[N], kept_alone = complete(s.port, kept), kept_again = complete(s.port, kept);
    CHECK(kept_again.cached == 32, "a prompt run twice: cached %d of its 40 tokens, want 32", kept_again.cached);
    for (int i = 0; i < N; i++) {
        bodies[i] = ids_body(20, i, 70);
        alone[i] = complete(s.port, bodies[i]);
        CHECK(alone[i].status == 200, "request %d alone: %d", i, alone[i].status);
    }
    int fds[N];
    for (int i = 0; i < N; i++) fds[i] = post_completion(s.port, bodies[i]);
    for (int i = 0; i < N; i++) {
        char *resp = read_all(fds[i]);
        close(fds[i]);
        const char *body = strstr(resp, "\r\n\r\n");
        completion c = parse_completion(body ? 200 : -1, body);
        CHECK(c.status == 200 && !strcmp(c.text, alone[i].text), "request %d among %d: '%s', alone '%s'", i, N, c.text,
              alone[i].text);
        free(resp);
        free(bodies[i]);
    }
    CHECK(metric(s.port, "num_preemptions_total") > 0, "4 requests of 6 blocks in 8 blocks preempted none");
    completion kept_later = complete(s.port, kept);
    CHECK(kept_later.status == 200 && kept_later.cached < 32 && !strcmp(kept_later.text, kept_alone.text),
          "the evicted prompt again: cached %d (want under 32), text '%s', was '%s'", kept_later.cached,
          kept_later.text, kept_alone.text);
    free(kept);
    CHECK(metric(s.port, "kv_blocks_used") == 0 && metric(s.port, "kv_slots_used") == 0,
          "blocks or slots held after every request ended");
    CHECK(stop(&s, SIGTERM, 60) == 0, "the small-cache server did not exit 0 on SIGTERM");
}

/* A cached prefix of 4,200 blocks of 16 positions, more than a step message had room to attach
 * before it was sized to a whole context (4,096 + 16 a sequence: such a request was never
 * admitted, and every request queued behind it waited with it). The golden mistral, whose
 * sliding window of 4 makes a 67,201-token prompt a matter of seconds, with its context raised
 * in a copy. The prompt runs, then again with three short requests queued behind it: all
 * complete, the repeat from 67,200 cached positions with the first run's text. */
static void long_cached_prefix(const char *tp, const char *where) {
    char dir[] = "/tmp/loom-test-long-XXXXXX", path[512], cfg[512], args[1024];
    if (!mkdtemp(dir)) {
        CHECK(0, "%s: mkdtemp failed", where);
        return;
    }
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    FILE *in = fopen(LOOM_SOURCE_DIR "/tests/golden/mistral/config.json", "r"), *out = fopen(cfg, "w");
    char line[4096];
    while (in && out && fgets(line, sizeof line, in)) {
        const char *was = "\"max_position_embeddings\": 256";
        char *at = strstr(line, was);
        if (at) fprintf(out, "%.*s\"max_position_embeddings\": 131072%s", (int)(at - line), line, at + strlen(was));
        else fputs(line, out);
    }
    if (in) fclose(in);
    if (out) fclose(out);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(!symlink(LOOM_SOURCE_DIR "/tests/golden/mistral/model.safetensors", path), "%s: symlink failed", where);
    enum { N = 4200 * 16 + 1, SHORT = 3 };
    char *big = malloc((size_t)N * 4 + 128), *shorts[SHORT];
    int len = sprintf(big, "{\"prompt\":[");
    for (int i = 0; i < N; i++) len += sprintf(big + len, "%s%d", i ? "," : "", 3 + (i * 37) % 120);
    sprintf(big + len, "],\"max_tokens\":4,\"temperature\":0,\"ignore_eos\":true}");
    for (int i = 0; i < SHORT; i++) {
        shorts[i] = malloc(64);
        snprintf(shorts[i], 64, "{\"prompt\":[%d,5,7],\"max_tokens\":4,\"temperature\":0}", 10 + i);
    }
    snprintf(args, sizeof args,
             "-m %s %s --block-size 16 --max-model-len 67300 --max-num-seqs 4 --max-num-batched-tokens 8192", dir, tp);
    server s;
    if (start(&s, args)) {
        CHECK(0, "%s: the long-context server did not start", where);
    } else {
        completion first = complete(s.port, big);
        CHECK(first.status == 200 && first.cached == 0, "%s: a %d-token prompt: status %d, cached %d", where, N,
              first.status, first.cached);
        int fds[1 + SHORT];
        fds[0] = post_completion(s.port, big);
        for (int i = 0; i < SHORT; i++) fds[1 + i] = post_completion(s.port, shorts[i]);
        for (int i = 0; i <= SHORT; i++) {
            char *resp = read_all(fds[i]);
            close(fds[i]);
            const char *body = resp ? strstr(resp, "\r\n\r\n") : NULL;
            completion c = parse_completion(body ? 200 : -1, body);
            if (i == 0)
                CHECK(c.status == 200 && c.cached == N - 1 && !strcmp(c.text, first.text),
                      "%s: the %d-token prompt again: status %d, cached %d (want %d), text '%s' (first '%s')", where, N,
                      c.status, c.cached, N - 1, c.text, first.text);
            else
                CHECK(c.status == 200, "%s: short request %d queued behind the long cached prefix: status %d", where, i,
                      c.status);
            free(resp);
        }
        CHECK(stop(&s, SIGTERM, 60) == 0, "%s: the long-context server did not exit 0 on SIGTERM", where);
    }
    unlink(path), unlink(cfg), rmdir(dir);
    for (int i = 0; i < SHORT; i++) free(shorts[i]);
    free(big);
}

/* The texts of a completion's choices, in index order, joined by '|' into out ("" if none). */
static void choice_texts(const char *body, char *out, size_t cap) {
    out[0] = 0;
    cJSON *j = body ? cJSON_Parse(body) : NULL, *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "choices")) {
        const cJSON *t = cJSON_GetObjectItem(c, "text");
        size_t n = strlen(out);
        snprintf(out + n, cap - n, "%s%s", n ? "|" : "", cJSON_IsString(t) ? t->valuestring : "?");
    }
    cJSON_Delete(j);
}

/* N_TWO requests of 20 prompt ids (salts salt0..), 60 greedy tokens and 2 choices: their bodies
 * (malloc'd) into bodies, and the choices each has alone on the server at port into alone. */
#define N_TWO 4
static void two_choice_requests(int port, const char *where, int salt0, char *bodies[N_TWO], char alone[N_TWO][1024]) {
    for (int i = 0; i < N_TWO; i++) {
        char *b = ids_body(20, salt0 + i, 60);
        bodies[i] = realloc(b, strlen(b) + 16);
        strcpy(strrchr(bodies[i], '}'), ",\"n\":2}");
        reply r = call(port, "POST", "/v1/completions", bodies[i]);
        choice_texts(r.status == 200 ? r.body : NULL, alone[i], 1024);
        CHECK(r.status == 200 && strchr(alone[i], '|'), "%s: request %d alone: status %d, choices '%s'", where, i,
              r.status, alone[i]);
        reply_free(&r);
    }
}

/* Preemption with siblings and speculative decoding, in each parallel mode: a KV cache of 8
 * blocks of 16 positions (on each rank: a budget for its share of the heads under -tp 2, of the
 * layers under -pp 2), n-gram proposals (not under -dp 2, where speculation does not run yet),
 * and 4 requests of 2 greedy choices each (the siblings share their prompt's blocks) of 20 + 60
 * positions. Run together, the newest are preempted and recomputed, and each choice's text is
 * the one the request had alone. A fifth request, queued behind them, is cancelled while it
 * waits. At the end nothing is held, and the ranks' bookkeeping agrees (books_agree). */
static void preemption_modes(void) {
    static const char *modes[][2] = {{"-tp 2", "80K"}, {"-pp 2", "96K"}, {"-dp 2", "160K"}};
    const char *spec = "--speculative-config '{\"method\":\"ngram\",\"num_speculative_tokens\":3,"
                       "\"prompt_lookup_min\":1,\"prompt_lookup_max\":3}'";
    for (int m = 0; m < 3; m++) {
        server s;
        char args[512];
        snprintf(args, sizeof args,
                 "%s --block-size 16 --kv-cache-memory-bytes %s --max-model-len 128 --max-num-seqs 4 %s", modes[m][0],
                 modes[m][1], m < 2 ? spec : "");
        if (start(&s, args)) {
            CHECK(0, "%s: the small-cache speculative server did not start", modes[m][0]);
            continue;
        }
        enum { N = N_TWO };
        char *bodies[N], alone[N][1024];
        two_choice_requests(s.port, modes[m][0], 40, bodies, alone);
        int fds[N + 1];
        for (int i = 0; i < N; i++) fds[i] = post_completion(s.port, bodies[i]);
        char *waiting = ids_body(30, 77, 40);
        fds[N] = post_completion(s.port, waiting);
        nap(0.05);
        close(fds[N]); /* the fifth leaves while it waits for a slot */
        for (int i = 0; i < N; i++) {
            char *resp = read_all(fds[i]), got[1024];
            close(fds[i]);
            const char *body = resp ? strstr(resp, "\r\n\r\n") : NULL;
            choice_texts(body, got, sizeof got);
            CHECK(!strcmp(got, alone[i]), "%s: request %d among %d: choices '%s', alone '%s'", modes[m][0], i, N, got,
                  alone[i]);
            free(resp);
            free(bodies[i]);
        }
        free(waiting);
        CHECK(metric(s.port, "num_preemptions_total") > 0, "%s: 4 requests of twice 5 blocks in 8 preempted none",
              modes[m][0]);
        double t0 = now();
        while (metric(s.port, "kv_slots_used") != 0 && now() - t0 < 5) nap(0.05);
        CHECK(metric(s.port, "kv_blocks_used") == 0 && metric(s.port, "kv_slots_used") == 0,
              "%s: blocks or slots held after every request ended or left", modes[m][0]);
        CHECK(stop(&s, SIGTERM, 60) == 0, "%s: the small-cache speculative server did not exit 0", modes[m][0]);
    }
}

/* The waiting queue's room when held-back siblings and preempted requests both return to its
 * head: --max-queue 4 and 2 slots, requests of 2 choices in 8 blocks of 16 positions, so that
 * choices are held, released, admitted, preempted and queued again at once. Every request is
 * answered: 200 with the choices it had alone, or 503 when the queue was full as it came. */
static void queue_room(void) {
    server s;
    if (start(&s, "--max-queue 4 --max-num-seqs 2 --block-size 16 --kv-cache-memory-bytes 160K --max-model-len 128")) {
        CHECK(0, "the small-queue server did not start");
        return;
    }
    enum { N = N_TWO };
    char *bodies[N], alone[N][1024];
    two_choice_requests(s.port, "the small-queue server", 60, bodies, alone);
    int fds[N], answered = 0;
    for (int i = 0; i < N; i++) fds[i] = post_completion(s.port, bodies[i]);
    for (int i = 0; i < N; i++) {
        char *resp = read_all(fds[i]), got[1024];
        close(fds[i]);
        const char *body = resp ? strstr(resp, "\r\n\r\n") : NULL;
        bool busy = resp && strstr(resp, " 503 ") && strstr(resp, "--max-queue");
        choice_texts(busy ? NULL : body, got, sizeof got);
        CHECK(busy || !strcmp(got, alone[i]), "the small-queue server: request %d: choices '%s', alone '%s'", i, got,
              alone[i]);
        answered += !busy;
        free(resp);
        free(bodies[i]);
    }
    CHECK(answered >= 2, "the small-queue server turned away %d of %d requests of 2 choices (room for 2)", N - answered,
          N);
    CHECK(metric(s.port, "num_preemptions_total") > 0, "the small-queue server preempted nothing");
    CHECK(metric(s.port, "kv_blocks_used") == 0 && metric(s.port, "kv_slots_used") == 0,
          "the small-queue server holds blocks or slots after every request ended");
    CHECK(stop(&s, SIGTERM, 60) == 0, "the small-queue server did not exit 0");
}

/* Process pid's CPU seconds so far (user + system), or -1 when it is gone; its parent in *ppid
 * and its resident MiB in *rss_mib, each when not NULL. The name may hold spaces: the fields
 * follow its closing parenthesis. */
static double proc_cpu_seconds(int pid, int *ppid, double *rss_mib) {
    char path[64], text[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[n] = 0;
    const char *after = strrchr(text, ')');
    int parent = 0;
    unsigned long user = 0, sys = 0;
    long pages = 0;
    if (!after ||
        sscanf(after, ") %*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu %*d %*d %*d %*d %*d %*d %*u %*u %ld",
               &parent, &user, &sys, &pages) < 3)
        return -1;
    if (ppid) *ppid = parent;
    if (rss_mib) *rss_mib = (double)pages * (double)sysconf(_SC_PAGESIZE) / 1048576.0;
    return (double)(user + sys) / (double)sysconf(_SC_CLK_TCK);
}

/* Grammars that match the same text in many ways (issue 49), each as a request of 64 tokens: it
 * finishes or fails with a 400 naming the ambiguity; a plain request sent beside it is answered
 * within 2 s; the server's memory stays under 1 GiB; and after a client of such a request
 * leaves, the server is idle within a second (under 0.2 CPU s in the next). */
static void hostile_grammars(const server *s) {
    char bodies[6][1024];
    int n = 0;
    for (int alts = 2; alts <= 5; alts++) {
        int k = snprintf(bodies[n], sizeof bodies[n],
                         "{\"prompt\":\"The\",\"max_tokens\":64,\"grammar\":\"root ::= s\\ns ::= ");
        for (int a = 0; a < alts; a++)
            k += snprintf(bodies[n] + k, sizeof bodies[n] - (size_t)k, "[a-zA-Z ] s \\\"%d\\\" | ", a);
        snprintf(bodies[n] + k, sizeof bodies[n] - (size_t)k, "\\\"\\\"\"}");
        n++;
    }
    const char *any_of = "{\"anyOf\":[{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}},"
                         "{\"type\":\"array\",\"items\":{\"$ref\":\"#\"},\"maxItems\":7}]}";
    snprintf(bodies[n++], sizeof bodies[0],
             "{\"prompt\":\"[\",\"max_tokens\":64,\"response_format\":{\"type\":\"json_schema\","
             "\"json_schema\":{\"name\":\"a\",\"schema\":%s}}}",
             any_of);
    double worst_plain = 0, most_rss = 0;
    for (int i = 0; i < n; i++) {
        int fd = post_completion(s->port, bodies[i]);
        double t0 = now();
        reply plain = call(s->port, "POST", "/v1/completions", "{\"prompt\":\"The\",\"max_tokens\":4}");
        double took = now() - t0;
        worst_plain = took > worst_plain ? took : worst_plain;
        CHECK(plain.status == 200 && took < 2, "beside hostile grammar %d: a plain request got %d after %.2f s", i,
              plain.status, took);
        reply_free(&plain);
        char *resp = read_all(fd);
        close(fd);
        int status = 0;
        sscanf(resp, "HTTP/1.%*d %d", &status);
        CHECK(status == 200 || (status == 400 && strstr(resp, "too ambiguous")), "hostile grammar %d: %.300s", i, resp);
        printf("hostile grammar %d: %d%s; a plain request beside it took %.2f s\n", i, status,
               status == 400 ? " (too ambiguous)" : "", took);
        free(resp);
        double rss;
        proc_cpu_seconds(s->pid, NULL, &rss);
        most_rss = rss > most_rss ? rss : most_rss;
    }
    CHECK(most_rss < 1024, "the server grew to %.0f MiB", most_rss);
    /* a client that leaves: the server goes idle */
    char stream[1100];
    snprintf(stream, sizeof stream, "%.*s,\"stream\":true}", (int)strlen(bodies[n - 1]) - 1, bodies[n - 1]);
    int fd = post_completion(s->port, stream);
    nap(0.05);
    close(fd);
    nap(1.0);
    double c0 = proc_cpu_seconds(s->pid, NULL, NULL);
    nap(1.0);
    double busy = proc_cpu_seconds(s->pid, NULL, NULL) - c0;
    CHECK(busy < 0.2, "after its client left, the server used %.2f CPU s in a second", busy);
    printf("hostile grammars: plain requests beside them answered within %.2f s; the server at most %.0f MiB; "
           "%.2f CPU s in the second after a client left\n",
           worst_plain, most_rss, busy);
}

/* A client that leaves mid-stream frees its slot at the next step. */
static void client_leaves(int port) {
    /* the 100M model takes seconds over 400 tokens, so the slot is watched on one stream: the
     * first bytes can come before the scheduler admits the request, hence the polling */
    int fd = post_completion(port, "{\"prompt\":[1,2,3],\"max_tokens\":400,\"ignore_eos\":true,\"stream\":true}");
    char buf[256];
    CHECK(recv(fd, buf, sizeof buf, 0) > 0, "no stream started");
    double held_at = now();
    while (metric(port, "kv_slots_used") != 1 && now() - held_at < 5) nap(0.02);
    CHECK(metric(port, "kv_slots_used") == 1, "a streaming request holds no slot within 5 s");
    close(fd);
    double t0 = now();
    while (metric(port, "kv_slots_used") != 0 && now() - t0 < 5) nap(0.05);
    CHECK(metric(port, "kv_slots_used") == 0, "the slot of a client that left was not freed within 5 s");
    CHECK(metric(port, "request_success_total") >= 0, "metrics unreadable");
}

/* A client sending its request body a byte a second does not hold up another one (its headers
 * come at once: slower ones are cut off by --header-timeout, see header_deadline). */
static void slow_client(int port) {
    int fd = connect_to(port);
    const char *raw = "POST /v1/completions HTTP/1.0\r\nContent-Length: 30\r\n\r\n{\"prompt\":\"Hi\",\"max_tokens\":2}";
    size_t head = (size_t)(strstr(raw, "\r\n\r\n") + 4 - raw);
    send_all(fd, raw, head + 1);
    double t0 = now();
    for (size_t i = head + 1; i < head + 4; i++) {
        nap(1.0);
        send_all(fd, raw + i, 1);
    }
    reply r = call(port, "POST", "/v1/completions", "{\"prompt\":\"The\",\"max_tokens\":4}");
    CHECK(r.status == 200, "a request beside a slow client: %d", r.status);
    CHECK(now() - t0 < 10, "a request beside a slow client took until %.1f s", now() - t0);
    reply_free(&r);
    send_all(fd, raw + head + 4, strlen(raw + head + 4));
    char *resp = read_all(fd);
    CHECK(strstr(resp, "HTTP/1.") && strstr(resp, " 200 "), "the slow client's own request: %s", resp);
    free(resp);
    close(fd);
}

/* 2000 connections from 127.0.0.1 that send nothing (the test server lets an address hold 32
 * idle ones): none refused, and once they have been idle a second, each new connection from that
 * address closes its oldest idle one, so the flood cannot grow; meanwhile another address and an
 * active client on the flooding one are answered long before the header deadline could have freed
 * anything, and every descriptor comes back once the flood ends. */
static void idle_flood(const server *s) {
    enum { N = 2000 };
    struct rlimit was, rl;
    getrlimit(RLIMIT_NOFILE, &was);
    if (was.rlim_max < N + 200) {
        printf("idle_flood skipped: the descriptor limit (%llu) is below %d\n", (unsigned long long)was.rlim_max,
               N + 200);
        return;
    }
    rl = (struct rlimit){was.rlim_max, was.rlim_max};
    setrlimit(RLIMIT_NOFILE, &rl);
    enum { MORE = 100 }; /* made after the first N have been idle a second */
    int fds_before = open_fds(s->pid), fd[N + MORE], opened = 0;
    for (double t0 = now(); opened < N && now() - t0 < 30; opened++)
        if ((fd[opened] = connect_from("127.0.0.1", s->port)) < 0) break;
    CHECK(opened == N, "only %d of %d idle connections could be made", opened, N);
    nap(1.2);
    for (int i = 0; i < MORE && opened == N + i; i++)
        if ((fd[opened] = connect_from("127.0.0.1", s->port)) >= 0) opened++;
    CHECK(opened == N + MORE, "only %d of %d idle connections could be made", opened, N + MORE);
    /* from another address, and an active client from the flooding one */
    const char *ask[][4] = {{"127.0.0.2", "GET", "/health", NULL},
                            {"127.0.0.2", "POST", "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":4}"},
                            {"127.0.0.1", "POST", "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":4}"}};
    for (int i = 0; i < 3; i++) {
        double t0 = now();
        reply r = call_from(ask[i][0], s->port, ask[i][1], ask[i][2], ask[i][3]);
        double t = now() - t0;
        CHECK(r.status == 200 && t < HEADER_TIMEOUT / 2,
              "%s %s from %s beside %d idle connections: status %d after %.2f s", ask[i][1], ask[i][2], ask[i][0],
              opened, r.status, t);
        reply_free(&r);
    }
    int refused = 0;
    for (int i = 0; i < opened; i++) {
        char b;
        ssize_t k = recv(fd[i], &b, 1, MSG_PEEK | MSG_DONTWAIT);
        refused += k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
        close(fd[i]);
    }
    CHECK(refused >= MORE, "of %d idle connections the server closed %d, fewer than the %d made past the grace", opened,
          refused, MORE);
    printf("idle flood: %d connections made, %d of them closed by the server\n", opened, refused);
    setrlimit(RLIMIT_NOFILE, &was);
    int fds = fds_down_to(s->pid, fds_before, 5);
    CHECK(fds <= fds_before, "the server's descriptors went from %d to %d over an idle flood", fds_before, fds);
    reply r = call(s->port, "POST", "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":4}");
    CHECK(r.status == 200, "a completion after the idle flood: %d %s", r.status, r.body ? r.body : "(no answer)");
    reply_free(&r);
}

/* 256 streams at once from one address (the test server lets it hold 32 idle connections), as a
 * benchmark client or a proxy sends them: every one is answered in full. */
static void many_streams(const server *s) {
    enum { N = 256 };
    int fd[N], bad = 0, first_bad = -1;
    for (int i = 0; i < N; i++)
        fd[i] = post_completion(s->port, "{\"prompt\":\"The\",\"max_tokens\":4,\"ignore_eos\":true,\"stream\":true}");
    for (int i = 0; i < N; i++) {
        char *resp = fd[i] >= 0 ? read_all(fd[i]) : NULL;
        if (fd[i] >= 0) close(fd[i]);
        bool whole = resp && strstr(resp, " 200 ") && strstr(resp, "data: [DONE]");
        if (!whole && bad++ == 0) first_bad = i;
        free(resp);
    }
    CHECK(!bad, "%d of %d streams from one address were not answered in full (the first: %d)", bad, N, first_bad);
    printf("%d streams at once from one address: %d answered in full\n", N, N - bad);
}

/* A client whose request headers are not finished is closed after --header-timeout; one that
 * finishes them within it is answered. */
static void header_deadline(const server *s) {
    const char *partial = "GET /health HTTP/1.1\r\nHost: x\r\n", *whole = "GET /health HTTP/1.0\r\n\r\n";
    double t0 = now();
    int fd = connect_from("127.0.0.2", s->port);
    struct timeval tv = {3 * HEADER_TIMEOUT, 0}; /* well past the deadline, to tell a close from no close */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    send_all(fd, partial, strlen(partial));
    free(read_all(fd)); /* until the server closes (whatever it says first), or the receive timeout */
    double t = now() - t0;
    close(fd);
    CHECK(t >= HEADER_TIMEOUT - 1 && t <= 2 * HEADER_TIMEOUT,
          "a client with unfinished headers was closed after %.1f s, not about %d s", t, HEADER_TIMEOUT);
    fd = connect_from("127.0.0.2", s->port);
    nap(1);
    reply r = request_raw(fd, whole, strlen(whole));
    CHECK(r.status == 200, "headers finished 1 s after connecting: %d %s", r.status, r.body ? r.body : "(no answer)");
    reply_free(&r);
}

/* A chunked body growing past --max-body-bytes gets its 413, not a dropped connection, and the
 * server serves on. */
static void chunked_too_big(const server *s) {
    enum { CHUNK = 64 << 10, CHUNKS = BODY_LIMIT / CHUNK + 2 };
    const char *head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    size_t n = strlen(head);
    char *raw = malloc(n + (size_t)CHUNKS * (CHUNK + 16) + 8);
    memcpy(raw, head, n);
    for (int i = 0; i < CHUNKS; i++) {
        n += (size_t)sprintf(raw + n, "%x\r\n", CHUNK);
        memset(raw + n, 'x', CHUNK);
        n += CHUNK;
        n += (size_t)sprintf(raw + n, "\r\n");
    }
    n += (size_t)sprintf(raw + n, "0\r\n\r\n");
    /* a server answering before the body's end may close on the rest: send_all (MSG_NOSIGNAL)
     * stops at the first failed send, and the answer is read all the same */
    reply r = request_raw(connect_to(s->port), raw, n);
    free(raw);
    CHECK(r.status == 413, "a chunked body of %d bytes (limit %d): '%.200s'", CHUNKS * CHUNK, BODY_LIMIT,
          r.all ? r.all : "(no answer)");
    reply_free(&r);
    r = call(s->port, "GET", "/health", NULL);
    CHECK(r.status == 200, "health after an oversized chunked body: %d", r.status);
    reply_free(&r);
}

static void no_leaks(const server *s, int fds_before) {
    for (int i = 0; i < 20; i++) {
        reply r = call(s->port, "POST", "/v1/completions", "{\"prompt\":\"A\",\"max_tokens\":3}");
        reply_free(&r);
    }
    int fds = fds_down_to(s->pid, fds_before, 5);
    CHECK(fds <= fds_before, "descriptors grew from %d to %d over 20 requests", fds_before, fds);
    CHECK(metric(s->port, "kv_slots_used") == 0 && metric(s->port, "num_requests_running") == 0 &&
              metric(s->port, "num_requests_waiting") == 0,
          "slots or requests left over");
}

/* SIGTERM while a long request runs: it completes, then the server exits 0. The wait allows for
 * a machine so loaded (ctest -j2 beside OpenMP's spinning threads) that 60 tokens of the 100M
 * model took 30 s in CI. */
static void sigterm_drains(server *s) {
    int fd = post_completion(s->port, "{\"prompt\":[1,2,3],\"max_tokens\":60,\"ignore_eos\":true}");
    double t0 = now();
    while (metric(s->port, "kv_slots_used") != 1 && now() - t0 < 5) nap(0.005);
    int rc = stop(s, SIGTERM, 150);
    char *resp = read_all(fd);
    close(fd);
    CHECK(rc == 0, "after SIGTERM the server exited with %d", rc);
    CHECK(strstr(resp, " 200 ") && strstr(resp, "\"completion_tokens\":60"), "the running request was not drained: %s",
          resp);
    free(resp);
}

/* -tp 2: the same completion as `loom run -tp 2`, then rank 1 killed while a request runs: the
 * request fails with an error naming the failure, the job ends naming rank 1. */
static void ranks(void) {
    server s;
    if (start(&s, "-tp 2 --enable-async-tp --sp-min-tokens 0 --block-size 32 --max-model-len 512")) {
        CHECK(0, "-tp 2 server did not start");
        return;
    }
    completions_match_run(s.port, "-tp 2 --enable-async-tp --sp-min-tokens 0 -p 'The robot' -n 24 --ignore-eos");
    prefix_reuse(s.port, 32, "-tp 2 --enable-async-tp --sp-min-tokens 0");
    /* rank 1 is found first, so that the kill follows the stream's start at once: the small
     * model makes a token in well under a millisecond, and the request must still be running */
    char cmd[128];
    snprintf(cmd, sizeof cmd, "pgrep -P %d | sort -n | sed -n 2p", (int)s.pid);
    FILE *f = popen(cmd, "r");
    int rank1 = 0;
    if (fscanf(f, "%d", &rank1) != 1) rank1 = 0;
    pclose(f);
    CHECK(rank1 > 0, "rank 1 not found");
    int fd = post_completion(s.port, "{\"prompt\":\"Once\",\"max_tokens\":500,\"ignore_eos\":true,\"stream\":true}");
    char probe[64];
    CHECK(recv(fd, probe, sizeof probe, MSG_PEEK) > 0, "no stream started under -tp 2");
    if (rank1 > 0) kill(rank1, SIGKILL);
    char *resp = read_all(fd);
    close(fd);
    double t0 = now();
    int st = 0;
    while (waitpid(s.pid, &st, WNOHANG) != s.pid && now() - t0 < 15) nap(0.05);
    CHECK(now() - t0 < 15 && WIFEXITED(st) && WEXITSTATUS(st) != 0, "the job did not end with a failure");
    char log[8192] = "";
    f = fopen(s.log, "r");
    size_t len = f ? fread(log, 1, sizeof log - 1, f) : 0;
    log[len] = 0;
    if (f) fclose(f);
    /* the server's log with it: this failed once in about 50 runs, cause not yet found */
    CHECK(strstr(resp, "\"error\"") && strstr(resp, "data: [DONE]"),
          "the open stream did not fail cleanly: %.300s\nthe server's log:\n%s",
          resp + (strlen(resp) > 300 ? strlen(resp) - 300 : 0), log);
    free(resp);
    CHECK(strstr(log, "rank 1 was killed by signal 9"), "the failure does not name rank 1: %s", log);
    unlink(s.log);
}

/* n requests of the same greedy completion at once, each of which must get `loom run`'s text. */
static void concurrent_match_run(int port, int n, const char *where) {
    int fds[8];
    for (int i = 0; i < n && i < 8; i++)
        fds[i] = post_completion(port, "{\"prompt\":\"The robot\",\"max_tokens\":24,\"temperature\":0,"
                                       "\"ignore_eos\":true}");
    char *want = loom_run("-p 'The robot' -n 24 --ignore-eos");
    for (int i = 0; i < n && i < 8; i++) {
        char *resp = read_all(fds[i]), text[4096] = "";
        close(fds[i]);
        const char *body = strstr(resp, "\r\n\r\n");
        CHECK(body && !json_str(body, "text", text, sizeof text) && !strcmp(text, want),
              "concurrent request %d under %s: '%s', not '%s'", i, where, text, want);
        free(resp);
    }
    free(want);
}

/* -tp 2 -pp 2: two stages of two ranks; a step of several requests' tokens splits into
 * microbatches that flow through the stages, and each request still gets `loom run`'s text. */
static void stages(void) {
    server s;
    if (start(&s, "-tp 2 -pp 2 --enable-sequence-parallel --sp-min-tokens 0 --pp-microbatches 4 --block-size 32 "
                  "--max-model-len 256")) {
        CHECK(0, "-tp 2 -pp 2 server did not start");
        return;
    }
    completions_match_run(s.port, "-tp 2 -pp 2 -p 'The robot' -n 24 --ignore-eos");
    prefix_reuse(s.port, 32, "-tp 2 -pp 2");
    concurrent_match_run(s.port, 3, "-pp 2");
    CHECK(stop(&s, SIGTERM, 30) == 0, "the -tp 2 -pp 2 server did not exit 0 on SIGTERM");
}

/* Under mpirun: rank 0 serves, rank 1 follows its steps over MPI; SIGTERM to rank 0 drains and
 * the job exits 0 (mpirun's own SIGTERM handling ends the job at once: that is Open MPI's). */
static void over_mpi(void) {
    server s;
    if (!mpi_available("test_serve")) return;
    if (start_with(&s, "env " MPIRUN " -np 2", "--backend mpi --block-size 32 --max-model-len 256")) {
        CHECK(0, "the MPI server did not start");
        return;
    }
    completions_match_run(s.port, "-tp 2 -p 'The robot' -n 24 --ignore-eos");
    prefix_reuse(s.port, 32, "-tp 2 over MPI");
    CHECK(stop_via(&s, s.rank0, SIGTERM, 60) == 0, "the MPI job did not exit 0 after SIGTERM to rank 0");
}

/* A labelled metric's value (`loom:NAME{...LABEL...} v`), or -1. */
static double metric_with(int port, const char *name, const char *label) {
    reply r = call(port, "GET", "/metrics", NULL);
    double v = -1;
    char pat[128];
    snprintf(pat, sizeof pat, "\nloom:%s{", name);
    for (const char *p = r.body; p && (p = strstr(p, pat)); p++) {
        const char *end = strchr(p, '}'), *at = strstr(p, label);
        if (end && at && at < end) {
            v = atof(end + 1);
            break;
        }
    }
    reply_free(&r);
    return v;
}

/* A completion request with one extra header line (e.g. "X-data-parallel-rank: 1\r\n"). */
static completion complete_with(int port, const char *header, const char *body) {
    char head[512];
    int h = snprintf(head, sizeof head, "POST /v1/completions HTTP/1.0\r\n%sContent-Length: %zu\r\n\r\n", header,
                     strlen(body));
    char *raw = malloc(h + strlen(body) + 1);
    memcpy(raw, head, h);
    memcpy(raw + h, body, strlen(body));
    reply r = request_raw(connect_to(port), raw, h + strlen(body));
    free(raw);
    completion c = parse_completion(r.status, r.body);
    if (r.status != 200) c.status = r.status, snprintf(c.text, sizeof c.text, "%s", r.body ? r.body : "");
    reply_free(&r);
    return c;
}

/* The "tokens" list of a completion's answer with logprobs (ids as "token_id:N" without a
 * tokenizer); malloc'd. */
static char *tokens_of(const char *resp) {
    const char *p = resp ? strstr(resp, "\"tokens\":[") : NULL, *end = p ? strchr(p, ']') : NULL;
    return p && end ? strndup(p, (size_t)(end - p + 1)) : strdup("(none)");
}

static char *completion_tokens(int port, const char *body) {
    reply r = call(port, "POST", "/v1/completions", body);
    char *out = tokens_of(r.body);
    reply_free(&r);
    return out;
}

/* -dp 2: two replicas of one rank each. Every request gets dp=1's text; concurrent requests
 * spread over both replicas; the X-data-parallel-rank header pins one (a bad one is a 400); a
 * prompt cached on a replica brings its repeat there. Then olmoe at -tp 2 -dp 2 with its experts
 * spread over all four ranks (EP + SP, the replicas stepping together): the same greedy tokens
 * as one rank. */
/* The CPU seconds (user + system) so far of the rank the launcher `supervisor` named
 * "loom rank R" (launch.c), or -1 if there is none. */
static double rank_cpu_seconds(pid_t supervisor, int rank) {
    char want[32], path[300], text[64];
    snprintf(want, sizeof want, "loom rank %d\n", rank);
    DIR *d = opendir("/proc");
    double found = -1;
    for (struct dirent *de; d && found < 0 && (de = readdir(d));) {
        snprintf(path, sizeof path, "/proc/%s/comm", de->d_name);
        FILE *f = fopen(path, "r");
        bool named = f && fgets(text, sizeof text, f) && !strcmp(text, want);
        if (f) fclose(f);
        int ppid = 0;
        double cpu = named ? proc_cpu_seconds(atoi(de->d_name), &ppid, NULL) : -1;
        if (cpu >= 0 && ppid == supervisor) found = cpu;
    }
    if (d) closedir(d);
    return found;
}

/* An idle replica sleeps: while replica 0 decodes requests pinned to it (until its rank has
 * used 0.3 CPU s, so that clock ticks measure both), replica 1's rank, which hears nothing but
 * rank 0's keep-alives, uses under a tenth of the busy rank's CPU time rather than spinning
 * beside it. */
static void idle_replica_sleeps(const server *s) {
    double busy0 = rank_cpu_seconds(s->pid, 0), idle0 = rank_cpu_seconds(s->pid, 1), busy = 0, t0 = now();
    CHECK(busy0 >= 0 && idle0 >= 0, "the -dp 2 server's ranks are not named 'loom rank 0' and 'loom rank 1'");
    int status = 200, n = 0;
    for (; status == 200 && busy < 0.3 && now() - t0 < 60; n++) {
        status = complete_with(s->port, "X-data-parallel-rank: 0\r\n",
                               "{\"prompt\":[1,2,3],\"max_tokens\":200,\"ignore_eos\":true}")
                     .status;
        busy = rank_cpu_seconds(s->pid, 0) - busy0;
    }
    double idle = rank_cpu_seconds(s->pid, 1) - idle0;
    CHECK(status == 200 && busy >= 0.3 && idle < busy / 10,
          "while replica 0 decoded %d requests (the last: status %d) its rank used %.2f CPU s and idle replica 1's "
          "%.2f s",
          n, status, busy, idle);
    printf("idle replica: %.2f CPU s while the busy one used %.2f s over %d requests\n", idle, busy, n);
}

static void data_parallel(void) {
    server s;
    if (start(&s, "-dp 2 --data-parallel-routing prefix --block-size 32 --max-model-len 256")) {
        CHECK(0, "the -dp 2 server did not start");
        return;
    }
    completions_match_run(s.port, "-p 'The robot' -n 24 --ignore-eos");
    enum { N = 4 };
    int fds[N];
    double before[2] = {metric_with(s.port, "data_parallel_requests_total", "engine=\"0\""),
                        metric_with(s.port, "data_parallel_requests_total", "engine=\"1\"")};
    concurrent_match_run(s.port, N, "-dp 2");
    double after[2] = {metric_with(s.port, "data_parallel_requests_total", "engine=\"0\""),
                       metric_with(s.port, "data_parallel_requests_total", "engine=\"1\"")};
    CHECK(after[0] - before[0] >= 1 && after[1] - before[1] >= 1 && after[0] + after[1] - before[0] - before[1] == N,
          "%d concurrent requests went %g to replica 0 and %g to replica 1", N, after[0] - before[0],
          after[1] - before[1]);
    char *body = ids_body(2 * 32 + 10, 11, 8);
    completion pinned = complete_with(s.port, "X-data-parallel-rank: 1\r\n", body);
    CHECK(pinned.status == 200 && metric_with(s.port, "data_parallel_requests_total", "engine=\"1\"") == after[1] + 1,
          "a request pinned to replica 1: %d %s", pinned.status, pinned.text);
    completion again = complete(s.port, body);
    CHECK(again.status == 200 && again.cached == 64 && !strcmp(again.text, pinned.text) &&
              metric(s.port, "data_parallel_prefix_routed_total") == 1,
          "its repeat: cached %d tokens (want 64, on replica 1), prefix-routed %g, text '%s' vs '%s'", again.cached,
          metric(s.port, "data_parallel_prefix_routed_total"), again.text, pinned.text);
    free(body);
    idle_replica_sleeps(&s);
    completion bad = complete_with(s.port, "X-data-parallel-rank: 2\r\n", "{\"prompt\":\"x\",\"max_tokens\":2}");
    CHECK(bad.status == 400 && strstr(bad.text, "X-data-parallel-rank"), "a pin to replica 2 of 2: %d %s", bad.status,
          bad.text);
    CHECK(stop(&s, SIGTERM, 30) == 0, "the -dp 2 server did not exit 0 on SIGTERM");

    const char *ask = "{\"prompt\":[5,6,7,8,9,10,11],\"max_tokens\":12,\"temperature\":0,\"logprobs\":1}";
    char *one = NULL, *many[N] = {0};
    if (!start(&s, "-m " LOOM_SOURCE_DIR "/tests/golden/olmoe --dtype float32")) {
        one = completion_tokens(s.port, ask);
        CHECK(stop(&s, SIGTERM, 30) == 0, "the olmoe server did not exit 0 on SIGTERM");
    } else CHECK(0, "the olmoe server did not start");
    /* the seed's layout on shm, and the experts' features over every rank under mpirun */
    const struct {
        const char *prefix, *args, *what;
    } jobs[] = {{"", "-tp 2 -dp 2 --enable-expert-parallel --enable-sequence-parallel --sp-min-tokens 0", "EP+SP"},
                {"env " MPIRUN " -np 4", "-tp 2 -dp 2 --backend mpi", "TP-MoE over MPI"}};
    for (int j = 0; j < 2; j++) {
        if (j && !mpi_available("test_serve")) break;
        char args[512];
        snprintf(args, sizeof args, "-m %s/tests/golden/olmoe --dtype float32 %s", LOOM_SOURCE_DIR, jobs[j].args);
        if (start_with(&s, jobs[j].prefix, args)) {
            CHECK(0, "the olmoe -tp 2 -dp 2 %s server did not start", jobs[j].what);
            continue;
        }
        for (int i = 0; i < N; i++) fds[i] = post_completion(s.port, ask); /* at once: both replicas run */
        for (int i = 0; i < N; i++) {
            char *resp = read_all(fds[i]);
            close(fds[i]);
            many[i] = tokens_of(resp);
            free(resp);
        }
        for (int i = 0; i < N; i++) {
            CHECK(one && strstr(one, "token_id:") && !strcmp(many[i], one),
                  "olmoe -tp 2 -dp 2 %s request %d: %s, one rank: %s", jobs[j].what, i, many[i], one ? one : "(none)");
            free(many[i]);
        }
        /* mpirun ends the job at once on SIGTERM (see over_mpi): rank 0 drains it */
        CHECK(stop_via(&s, j ? s.rank0 : s.pid, SIGTERM, 60) == 0,
              "the olmoe -tp 2 -dp 2 %s server did not exit 0 on SIGTERM", jobs[j].what);
    }
    free(one);
}

/* A chat template outside the supported subset stops start-up, naming the construct. */
static void bad_template(void) {
    char path[128], cmd[512];
    snprintf(path, sizeof path, "/tmp/loom-test-serve-%d.jinja", (int)getpid());
    FILE *f = fopen(path, "w");
    fputs("{% for m in messages %}{% include 'header.jinja' %}{{ m.content }}{% endfor %}", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s serve --port 0 --chat-template %s 2>&1", LOOM_BIN, path);
    FILE *p = popen(cmd, "r");
    char *out = read_all(fileno(p));
    int st = pclose(p);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0 && strstr(out, "include") && strstr(out, path),
          "a template with {%% include %%} did not stop start-up by name: %s", out);
    free(out);
    unlink(path);
}

/* The embedded model has no tokenizer_config.json: a --chat-template still gets its tokenizer's
 * BOS and EOS text (issue 28, part 5). */
static void embedded_special_tokens(void) {
    char path[128], args[256];
    snprintf(path, sizeof path, "/tmp/loom-test-serve-bos-%d.jinja", (int)getpid());
    FILE *f = fopen(path, "w");
    fputs("[{{ bos_token }}|{{ eos_token }}]{{ messages[0].content }}", f);
    fclose(f);
    server s;
    snprintf(args, sizeof args, "--chat-template %s", path);
    if (start(&s, args)) {
        CHECK(0, "server with --chat-template did not start");
        unlink(path);
        return;
    }
    reply r = call(s.port, "POST", "/tokenize", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    CHECK(r.status == 200 && strstr(r.body, "\"prompt\":\"[<s>|</s>]hi\""), "embedded bos/eos: %s", r.body);
    reply_free(&r);
    CHECK(stop(&s, SIGTERM, 30) == 0, "--chat-template server did not exit 0");
    unlink(path);
}

/* Tool round trips (issue 28): a conversation with a tool call and its result, as an OpenAI
 * client sends it (the arguments a JSON string, content null beside the calls), renders through
 * /tokenize as transformers renders it with the arguments and content in the form each template
 * expects (tests/data/templates/NAME/roundtrip.json, from tests/golden/make_template_golden.py),
 * or is refused with a 400 where transformers raises; every published template under
 * tests/data/templates, DeepSeek-R1's (arguments concatenated as a string, calls shown only
 * beside content none) included. */
static void template_round_trips(void) {
    const char *root = LOOM_SOURCE_DIR "/tests/data/templates";
    DIR *d = opendir(root);
    CHECK(d != NULL, "cannot open %s", root);
    int templates = 0;
    for (struct dirent *de; d && (de = readdir(d));) {
        char path[512], args[600];
        snprintf(path, sizeof path, "%s/%s/template.jinja", root, de->d_name);
        if (de->d_name[0] == '.' || access(path, R_OK)) continue;
        snprintf(path, sizeof path, "%s/%s/roundtrip.json", root, de->d_name);
        FILE *f = fopen(path, "r");
        CHECK(f != NULL, "%s: missing (run tests/golden/make_template_golden.py)", path);
        if (!f) continue;
        char *text = read_all(fileno(f));
        fclose(f);
        cJSON *trips = cJSON_Parse(text), *trip;
        free(text);
        CHECK(cJSON_GetArraySize(trips) > 0, "%s: no round trips", path);
        server s;
        snprintf(args, sizeof args, "--chat-template %s/%s/template.jinja", root, de->d_name);
        if (start_with(&s, "env SOURCE_DATE_EPOCH=1736942400 TZ=UTC", args)) {
            CHECK(0, "%s: the server did not start", de->d_name);
            cJSON_Delete(trips);
            continue;
        }
        cJSON_ArrayForEach(trip, trips) {
            const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(trip, "name"));
            const char *expected = cJSON_GetStringValue(cJSON_GetObjectItem(trip, "expected"));
            char *body = cJSON_PrintUnformatted(cJSON_GetObjectItem(trip, "request"));
            reply r = call(s.port, "POST", "/tokenize", body);
            cJSON *got = cJSON_Parse(r.body);
            const char *prompt = cJSON_GetStringValue(cJSON_GetObjectItem(got, "prompt"));
            if (expected)
                CHECK(r.status == 200 && prompt && !strcmp(prompt, expected),
                      "%s/%s: rendered\n%s\nexpected (transformers)\n%s", de->d_name, name, prompt ? prompt : r.body,
                      expected);
            else
                CHECK(r.status == 400, "%s/%s: transformers raises (%s), the server answered %d: %s", de->d_name, name,
                      cJSON_GetStringValue(cJSON_GetObjectItem(trip, "error")), r.status, r.body);
            cJSON_Delete(got);
            reply_free(&r);
            free(body);
        }
        cJSON_Delete(trips);
        CHECK(stop(&s, SIGTERM, 30) == 0, "%s: the server did not exit 0", de->d_name);
        templates++;
    }
    if (d) closedir(d);
    CHECK(templates >= 10, "round trips ran for %d templates (tests/data/templates has 10)", templates);
}

/* A model with named templates: requests with `tools` render "tool_use", others "default", as
 * transformers picks them. */
static void named_templates(void) {
    char dir[128], cmd[512];
    snprintf(dir, sizeof dir, "/tmp/loom-test-serve-model-%d", (int)getpid());
    snprintf(cmd, sizeof cmd, "rm -rf %s && cp -r %s/models/stories260K %s", dir, LOOM_SOURCE_DIR, dir);
    CHECK(system(cmd) == 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(cmd, "w");
    fputs("{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"chat_template\": ["
          "{\"name\": \"default\", \"template\": \"D:{{ messages[0].content }}\"},"
          "{\"name\": \"tool_use\", \"template\": \"T:{{ tools | length }}:{{ messages[0].content }}\"}]}",
          f);
    fclose(f);
    server s;
    snprintf(cmd, sizeof cmd, "-m %s", dir);
    if (start(&s, cmd)) {
        CHECK(0, "server with named templates did not start");
        return;
    }
    reply r = call(s.port, "POST", "/tokenize", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    CHECK(r.status == 200 && strstr(r.body, "\"prompt\":\"D:hi\""), "default template: %s", r.body);
    reply_free(&r);
    r = call(s.port, "POST", "/tokenize", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[]}");
    CHECK(r.status == 200 && strstr(r.body, "\"prompt\":\"T:0:hi\""), "tool_use template: %s", r.body);
    reply_free(&r);
    CHECK(stop(&s, SIGTERM, 30) == 0, "named-template server did not exit 0");
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "%s", cmd);
}

/* Speculative decoding in the continuous batch: greedy completions equal `loom run`'s plain
 * ones, several requests at once each verifying its own proposals in the same steps (n-gram
 * lookup at -tp 2 with async TP, blocks of 16 so cuts cross block boundaries; the embedded model
 * as its own draft at tp=1, every proposal accepted), and vLLM's spec_decode counters in
 * /metrics. */
static void speculative(void) {
    static const char *prompts[] = {"The robot", "Once upon", "Lily", "Tom and"};
    static const char *configs[][2] = {
        {"-tp 2 --enable-async-tp --sp-min-tokens 0 --block-size 16 --speculative-config "
         "'{\"method\":\"ngram\",\"num_speculative_tokens\":4,\"prompt_lookup_min\":1,\"prompt_lookup_max\":3}'",
         "-tp 2 --enable-async-tp --sp-min-tokens 0"},
        {"--speculative-config '{\"method\":\"draft_model\",\"model\":\"" LOOM_SOURCE_DIR
         "/models/stories260K\",\"num_speculative_tokens\":3}'",
         ""}};
    for (int c = 0; c < 2; c++) {
        server s;
        char args[1024];
        snprintf(args, sizeof args, "--max-model-len 512 --max-num-seqs 4 %s", configs[c][0]);
        if (start(&s, args)) {
            CHECK(0, "the speculative server did not start: %s", args);
            continue;
        }
        char run[256];
        snprintf(run, sizeof run, "%s -p 'The robot' -n 24 --ignore-eos", configs[c][1]);
        completions_match_run(s.port, run);
        int fd[4];
        for (int i = 0; i < 4; i++) { /* all at once: one batch, each its own proposals */
            char body[256];
            snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":40,\"temperature\":0,\"ignore_eos\":true}",
                     prompts[i]);
            fd[i] = post_completion(s.port, body);
        }
        for (int i = 0; i < 4; i++) {
            char *resp = read_all(fd[i]), text[4096] = "";
            close(fd[i]);
            const char *body = strstr(resp, "\r\n\r\n");
            snprintf(run, sizeof run, "%s -p '%s' -n 40 --ignore-eos", configs[c][1], prompts[i]);
            char *want = loom_run(run);
            CHECK(body && !json_str(body, "text", text, sizeof text) && !strcmp(text, want),
                  "%s: '%s' speculatively gave '%s', plainly '%s'", configs[c][0], prompts[i], text, want);
            free(want);
            free(resp);
        }
        double drafted = metric(s.port, "spec_decode_num_draft_tokens_total"),
               accepted = metric(s.port, "spec_decode_num_accepted_tokens_total"),
               first = metric(s.port, "spec_decode_num_accepted_tokens_per_pos_total");
        CHECK(drafted > 0 && accepted > 0 && first > 0, "%s: spec_decode counters %g drafted, %g accepted",
              configs[c][0], drafted, accepted);
        CHECK(c == 0 || accepted == drafted, "the model as its own draft: %g of %g accepted", accepted, drafted);
        printf("speculative serve (%s): %g of %g proposals accepted\n", c ? "draft_model itself" : "ngram -tp 2",
               accepted, drafted);
        CHECK(stop(&s, SIGTERM, 30) == 0, "the speculative server did not exit 0 on SIGTERM");
    }
}

/* Eagle3 in the server: the golden Eagle3 target (no tokenizer: ids in, ids out) with its random
 * draft, three requests at once, each answer the plain server's; the draft proposed. */
static void speculative_eagle3(void) {
    const char *target = LOOM_SOURCE_DIR "/tests/golden/eagle3/target";
    char args[2][2048], text[2][3][4096];
    snprintf(args[0], 900, "-m %s --max-model-len 128 --max-num-seqs 4 --block-size 16", target);
    snprintf(args[1], sizeof args[1],
             "%.900s --speculative-config '{\"method\":\"eagle3\",\"model\":\"" LOOM_SOURCE_DIR
             "/tests/golden/eagle3/speculators\",\"num_speculative_tokens\":3}'",
             args[0]);
    double drafted = 0;
    for (int c = 0; c < 2; c++) {
        server s;
        if (start(&s, args[c])) {
            CHECK(0, "the Eagle3 test server did not start: %s", args[c]);
            return;
        }
        int fd[3];
        for (int i = 0; i < 3; i++) {
            char body[512]; /* ids within the vocabulary of 128 */
            int len = sprintf(body, "{\"prompt\":[1");
            for (int j = 0; j < 5 + 3 * i; j++) len += sprintf(body + len, ",%d", 3 + (j * 37 + i * 11) % 120);
            sprintf(body + len, "],\"max_tokens\":24,\"temperature\":0,\"ignore_eos\":true}");
            fd[i] = post_completion(s.port, body);
        }
        for (int i = 0; i < 3; i++) {
            char *resp = read_all(fd[i]);
            close(fd[i]);
            const char *body = strstr(resp, "\r\n\r\n");
            text[c][i][0] = 0;
            CHECK(body && !json_str(body, "text", text[c][i], sizeof text[c][i]), "eagle3 server: %s", resp);
            free(resp);
        }
        if (c) drafted = metric(s.port, "spec_decode_num_draft_tokens_total");
        CHECK(stop(&s, SIGTERM, 30) == 0, "the Eagle3 test server did not exit 0");
    }
    for (int i = 0; i < 3; i++)
        CHECK(!strcmp(text[0][i], text[1][i]), "request %d: with Eagle3 '%s', plainly '%s'", i, text[1][i], text[0][i]);
    CHECK(drafted > 0, "the Eagle3 draft proposed nothing (%g)", drafted);
}

/* Tool calls without the grammar engine: start-up names the parser detected from Qwen2.5's
 * template, or that none was found (ChatML), and refuses an unknown --tool-call-parser or
 * --enable-auto-tool-choice without a parser; malformed tools and tool_choice are 400s naming
 * the field. (Forced calls through the real client: tests/serve_openai.py.) */
static void tool_calls(void) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s serve --port 0 --tool-call-parser hermes3 2>&1", LOOM_BIN);
    FILE *p = popen(cmd, "r");
    char *out = read_all(fileno(p));
    int st = pclose(p);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2 && strstr(out, "--tool-call-parser") && strstr(out, "llama3_json"),
          "an unknown --tool-call-parser did not stop start-up naming the flag and the parsers: %s", out);
    free(out);
    snprintf(
        cmd, sizeof cmd,
        "%s serve --port 0 --enable-auto-tool-choice --chat-template %s/tests/data/templates/chatml/template.jinja "
        "2>&1",
        LOOM_BIN, LOOM_SOURCE_DIR);
    p = popen(cmd, "r");
    out = read_all(fileno(p));
    st = pclose(p);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0 && strstr(out, "--enable-auto-tool-choice needs --tool-call-parser"),
          "--enable-auto-tool-choice without a parser started: %s", out);
    free(out);
    server s;
    if (start(&s, "--chat-template " LOOM_SOURCE_DIR "/tests/data/templates/qwen2.5/template.jinja")) {
        CHECK(0, "the server with Qwen2.5's template did not start");
        return;
    }
    FILE *f = fopen(s.log, "r");
    out = read_all(fileno(f));
    fclose(f);
    CHECK(strstr(out, "tool calls read in the hermes format (detected from the chat template)") != NULL,
          "start-up does not name the detected parser: %s", out);
    free(out);
    static const char *bad[][3] = {
        {"tools an object", "\"tools\":{\"type\":\"function\"}", "\"param\":\"tools\""},
        {"a tool of another type", "\"tools\":[{\"type\":\"retrieval\"}]", "\"param\":\"tools\""},
        {"a tool without a name", "\"tools\":[{\"type\":\"function\",\"function\":{}}]", "\"param\":\"tools\""},
        {"parameters not an object",
         "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":[]}}]", "\"param\":\"tools\""},
        {"tool_choice unknown",
         "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
         "\"tool_choice\":\"always\"",
         "\"param\":\"tool_choice\""},
        {"tool_choice names no tool",
         "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":{\"type\":"
         "\"function\",\"function\":{\"name\":\"g\"}}",
         "not among 'tools'"},
        {"tool_choice without tools", "\"tool_choice\":\"required\"", "\"param\":\"tool_choice\""},
        {"parallel_tool_calls a string",
         "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"parallel_tool_calls\":\"no\"",
         "\"param\":\"parallel_tool_calls\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char body[1024];
        snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],%s}", bad[i][1]);
        expect_error(s.port, bad[i][0], "POST", "/v1/chat/completions", body, 400, bad[i][2]);
    }
    CHECK(stop(&s, SIGTERM, 60) == 0, "the tools server did not exit 0 on SIGTERM");
}

/* An error in Anthropic's shape ({"type": "error", "error": {"type": TYPE, ...}}, TYPE NULL:
 * any) with this status, its body holding needle (NULL: anything). */
static void expect_anthropic_error(int port, const char *what, const char *method, const char *path, const char *body,
                                   int status, const char *type, const char *needle) {
    reply r = call(port, method, path, body);
    char shape[128];
    snprintf(shape, sizeof shape, "{\"type\":\"error\",\"error\":{\"type\":\"%s", type ? type : "");
    CHECK(r.status == status && r.body && strstr(r.body, shape) && (!needle || strstr(r.body, needle)),
          "%s %s, %s: %d %s (want %d in Anthropic's shape naming '%s')", method, path, what, r.status,
          r.body ? r.body : "", status, needle ? needle : "");
    reply_free(&r);
}

#define CHATML LOOM_SOURCE_DIR "/tests/data/templates/chatml/template.jinja"

/* Anthropic's Messages and OpenAI's Responses APIs refuse bad bodies with a 400 in their own
 * error shape, naming what is wrong, and the server keeps serving. (Their answers, against the
 * real `anthropic` and `openai` clients: tests/serve_agents.py.) */
static void agent_apis_refused(void) {
    server s;
    if (start(&s, "--chat-template " CHATML)) {
        CHECK(0, "the server with the ChatML template did not start");
        return;
    }
    const char *tool = "\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}]";
    static const char *const anthropic[][3] = {
        {"not JSON", "{\"max_tokens\":", "not valid JSON"},
        {"no max_tokens", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", "'max_tokens' is required"},
        {"messages empty", "{\"max_tokens\":4,\"messages\":[]}", "non-empty array"},
        {"a role of system", "{\"max_tokens\":4,\"messages\":[{\"role\":\"system\",\"content\":\"hi\"}]}",
         "\\\"user\\\" or \\\"assistant\\\""},
        {"content a number", "{\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":5}]}",
         "messages[0].content must be"},
        {"an unknown block", "{\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"video\"}]}]}",
         "not 'video'"},
        {"an image block",
         "{\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{}}]}]}",
         "not 'image'"},
        {"a tool_result without its tool_use",
         "{\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":"
         "\"toolu_1\",\"content\":\"3\"}]}]}",
         "tool_result for 'toolu_1' answers no tool_use"},
        {"a tool_use without input",
         "{\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":"
         "[{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\"}]},{\"role\":\"user\",\"content\":\"go\"}]}",
         "object 'input'"},
        {"a final assistant message",
         "{\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":"
         "\"Sure\"}]}",
         "prefill"},
        {"a server tool",
         "{\"max_tokens\":4,\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"w\"}],"
         "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
         "'web_search_20250305' is not supported"},
        {"tool_choice unknown",
         "{\"max_tokens\":4,\"tool_choice\":{\"type\":\"all\"},\"messages\":[{\"role\":\"user\","
         "\"content\":\"hi\"}]}",
         "'tool_choice.type'"},
        {"temperature a string",
         "{\"max_tokens\":4,\"temperature\":\"hot\",\"messages\":[{\"role\":\"user\","
         "\"content\":\"hi\"}]}",
         "temperature"},
        {"stop_sequences a number",
         "{\"max_tokens\":4,\"stop_sequences\":7,\"messages\":[{\"role\":\"user\","
         "\"content\":\"hi\"}]}",
         "'stop'"},
    };
    for (size_t i = 0; i < sizeof anthropic / sizeof *anthropic; i++)
        expect_anthropic_error(s.port, anthropic[i][0], "POST", "/v1/messages", anthropic[i][1], 400,
                               "invalid_request_error", anthropic[i][2]);
    char body[512];
    snprintf(body, sizeof body,
             "{\"max_tokens\":4,%s,\"tool_choice\":{\"type\":\"tool\",\"name\":\"g\"},"
             "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
             tool);
    expect_anthropic_error(s.port, "tool_choice naming no tool", "POST", "/v1/messages", body, 400, NULL,
                           "not among 'tools'");
    expect_anthropic_error(s.port, "an unknown model", "POST", "/v1/messages",
                           "{\"model\":\"claude-x\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":"
                           "\"hi\"}]}",
                           404, "not_found_error", NULL);
    expect_anthropic_error(s.port, "GET /v1/messages/batches", "GET", "/v1/messages/batches", NULL, 404, NULL, NULL);
    expect_anthropic_error(s.port, "count_tokens of a bad body", "POST", "/v1/messages/count_tokens",
                           "{\"messages\":\"hi\"}", 400, NULL, NULL);
    static const char *const responses[][3] = {
        {"no input", "{\"max_output_tokens\":4}", "'input' must be"},
        {"input a number", "{\"input\":5}", "'input' must be"},
        {"an unknown item", "{\"input\":[{\"type\":\"web_search_call\"}]}", "'web_search_call' are not supported"},
        {"an image part", "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\"}]}]}",
         "not 'input_image'"},
        {"an output without its call",
         "{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c9\","
         "\"output\":\"1\"}]}",
         "answers no function_call"},
        {"an unknown previous_response_id", "{\"previous_response_id\":\"resp_nope\",\"input\":\"hi\"}",
         "Previous response with id 'resp_nope' not found"},
        {"a tool of another type", "{\"input\":\"hi\",\"tools\":[{\"type\":\"file_search\"}]}",
         "'file_search' is not supported"},
        {"text.format unknown", "{\"input\":\"hi\",\"text\":{\"format\":{\"type\":\"yaml\"}}}", "'text.format'"},
        {"max_output_tokens 0", "{\"input\":\"hi\",\"max_output_tokens\":0}", "max_tokens"},
        {"background", "{\"input\":\"hi\",\"background\":true}", "'background'"},
        {"store a string", "{\"input\":\"hi\",\"store\":\"yes\"}", "store"},
    };
    for (size_t i = 0; i < sizeof responses / sizeof *responses; i++)
        expect_error(s.port, responses[i][0], "POST", "/v1/responses", responses[i][1], 400, responses[i][2]);
    expect_error(s.port, "a response never stored", "GET", "/v1/responses/resp_0123", NULL, 404, "not found");
    reply r = call(s.port, "POST", "/v1/messages",
                   "{\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    CHECK(r.status == 200 && r.body && strstr(r.body, "\"stop_reason\":\"max_tokens\""),
          "a good message after the bad ones: %d %s", r.status, r.body ? r.body : "");
    reply_free(&r);
    /* Claude Code asks for 32,000 tokens whatever the model: a bound, clamped to the context */
    r = call(s.port, "POST", "/v1/messages",
             "{\"max_tokens\":32000,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    CHECK(r.status == 200 && r.body && strstr(r.body, "\"type\":\"message\""), "max_tokens past the context: %d %s",
          r.status, r.body ? r.body : "");
    reply_free(&r);
    CHECK(stop(&s, SIGTERM, 60) == 0, "the server did not exit 0 on SIGTERM");
}

/* The Responses store's bound: with room for a few responses, the least recently used go first
 * (continuing one is a 400 naming previous_response_id), while one that was continued stays;
 * --responses-store-bytes 0 stores nothing. */
static void responses_store_bound(void) {
    server s;
    if (start(&s, "--responses-store-bytes 6000 --chat-template " CHATML)) {
        CHECK(0, "the server with a small responses store did not start");
        return;
    }
    char ids[8][40], body[256];
    for (int i = 0; i < 8; i++) {
        reply r = call(s.port, "POST", "/v1/responses", "{\"input\":\"Once upon\",\"max_output_tokens\":4}");
        CHECK(r.status == 200 && r.body && !json_str(r.body, "id", ids[i], sizeof ids[i]), "response %d: %d %s", i,
              r.status, r.body ? r.body : "");
        reply_free(&r);
        if (i < 2) continue;
        /* the first is continued each time: the most recently used, it is never dropped */
        snprintf(body, sizeof body,
                 "{\"previous_response_id\":\"%s\",\"input\":\"x\",\"max_output_tokens\":2,"
                 "\"store\":false}",
                 ids[0]);
        r = call(s.port, "POST", "/v1/responses", body);
        CHECK(r.status == 200, "continuing the first response after %d more: %d %s", i, r.status, r.body ? r.body : "");
        reply_free(&r);
    }
    snprintf(body, sizeof body, "{\"previous_response_id\":\"%s\",\"input\":\"x\"}", ids[1]);
    expect_error(s.port, "continuing a response dropped from the store", "POST", "/v1/responses", body, 400,
                 "\"param\":\"previous_response_id\"");
    char path[64];
    snprintf(path, sizeof path, "/v1/responses/%s", ids[7]);
    reply r = call(s.port, "GET", path, NULL);
    CHECK(r.status == 200 && r.body && strstr(r.body, ids[7]), "GET the newest response: %d %s", r.status,
          r.body ? r.body : "");
    reply_free(&r);
    CHECK(stop(&s, SIGTERM, 60) == 0, "the server did not exit 0 on SIGTERM");
    if (start(&s, "--responses-store-bytes 0 --chat-template " CHATML)) {
        CHECK(0, "the server without a responses store did not start");
        return;
    }
    r = call(s.port, "POST", "/v1/responses", "{\"input\":\"Once upon\",\"max_output_tokens\":4}");
    CHECK(r.status == 200 && r.body && strstr(r.body, "\"store\":false") && !json_str(r.body, "id", ids[0], 40),
          "a response with the store off says it was not stored: %s", r.body ? r.body : "");
    reply_free(&r);
    snprintf(path, sizeof path, "/v1/responses/%s", ids[0]);
    expect_error(s.port, "GET with the store off", "GET", path, NULL, 404, "not found");
    CHECK(stop(&s, SIGTERM, 60) == 0, "the server did not exit 0 on SIGTERM");
}

/* Golden embeddings (tests/golden/make_embed_golden.py: transformers' last hidden state of a
 * bare Qwen3Model, pooled as its sentence-transformers files say) from /v1/embeddings within
 * 1e-4, for last-token pooling with normalisation and mean pooling without, in every parallel
 * mode; prompts are chunked (--max-num-batched-tokens 8), so mean pooling sums across steps;
 * the float and base64 encodings give the same vectors. */
static void embeddings_golden(void) {
    static const char *const modes[] = {"",
                                        "-tp 2",
                                        "-tp 2 --enable-sequence-parallel --sp-min-tokens 0",
                                        "-tp 2 --enable-async-tp --sp-min-tokens 0",
                                        "-pp 2",
                                        "-dp 2",
                                        "--backend mpi"}; /* last: under mpirun -np 2, tp=2 */
    for (int c = 0; c < 2; c++) {
        const char *name = c ? "qwen3_embed_mean" : "qwen3_embed";
        char path[512];
        snprintf(path, sizeof path, "%s/tests/golden/%s/golden.safetensors", LOOM_SOURCE_DIR, name);
        st_file g;
        loom_err err;
        if (st_open(&g, path, &err)) {
            CHECK(0, "%s", err.msg);
            return;
        }
        char body[2048] = "{\"input\":[";
        for (int i = 0; i < 3; i++) {
            char key[32];
            snprintf(key, sizeof key, "ids_%d", i);
            const st_tensor *t = st_find(&g, key);
            strcat(body, i ? ",[" : "[");
            for (int j = 0; j < t->shape[0]; j++) {
                int64_t v;
                memcpy(&v, (const char *)t->data + 8 * j, 8);
                snprintf(body + strlen(body), sizeof body - strlen(body), "%s%lld", j ? "," : "", (long long)v);
            }
            strcat(body, "]");
        }
        strcat(body, "]}");
        for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
            server s;
            char args[512];
            bool mpi = strstr(modes[m], "mpi") != NULL;
            if (mpi && !mpi_available("test_serve")) continue;
            snprintf(args, sizeof args,
                     "-m %s/tests/golden/%s --dtype float32 --max-num-seqs 4 --max-num-batched-tokens 8 %s",
                     LOOM_SOURCE_DIR, name, modes[m]);
            if (start_with(&s, mpi ? "env " MPIRUN " -np 2" : "", args)) {
                CHECK(0, "%s %s: the server did not start", name, modes[m]);
                continue;
            }
            reply r = call(s.port, "POST", "/v1/embeddings", body);
            cJSON *root = r.body ? cJSON_Parse(r.body) : NULL;
            const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data");
            CHECK(r.status == 200 && cJSON_GetArraySize(data) == 3, "%s %s: %d %s", name, modes[m], r.status,
                  r.body ? r.body : "");
            double worst = 0;
            for (int i = 0; i < 3 && cJSON_GetArraySize(data) == 3; i++) {
                char key[32];
                snprintf(key, sizeof key, "embedding_%d", i);
                const st_tensor *want = st_find(&g, key);
                const cJSON *got = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(data, i), "embedding");
                CHECK(cJSON_GetArraySize(got) == want->shape[0], "%s %s: embedding %d has %d values", name, modes[m], i,
                      cJSON_GetArraySize(got));
                for (int j = 0; j < cJSON_GetArraySize(got) && j < want->shape[0]; j++) {
                    float w;
                    memcpy(&w, (const char *)want->data + 4 * j, 4);
                    double d = fabs(cJSON_GetArrayItem(got, j)->valuedouble - w);
                    worst = d > worst ? d : worst;
                }
            }
            CHECK(worst <= 1e-4, "%s %s: embeddings differ from transformers' by %.3g", name, modes[m], worst);
            cJSON_Delete(root);
            reply_free(&r);
            if (!m) { /* base64: the same vectors, as float32 bytes */
                char b64[2100];
                snprintf(b64, sizeof b64, "%.*s,\"encoding_format\":\"base64\"}", (int)strlen(body) - 1, body);
                r = call(s.port, "POST", "/v1/embeddings", b64);
                CHECK(r.status == 200 && r.body && strstr(r.body, "\"embedding\":\""), "%s base64: %d %s", name,
                      r.status, r.body ? r.body : "");
                reply_free(&r);
            }
            printf("%s %s: 3 embeddings within %.3g of transformers'\n", name, modes[m][0] ? modes[m] : "tp=1", worst);
            CHECK(stop_via(&s, mpi ? s.rank0 : s.pid, SIGTERM, 60) == 0, "%s %s: the server did not exit 0 on SIGTERM",
                  name, modes[m]);
        }
        st_close(&g);
    }
}

/* A causal reranker's scores (--task score): /v1/score's P(yes) against P(no) at each pair's
 * last token equals the softmax of transformers' logits there (the qwen3 golden model, tokens 5
 * and 9 as no and yes) within 1e-4, one query against many documents whose pairs are prefixes
 * of a golden sequence, in the parallel modes; /v1/rerank orders them by it, top_n of them. */
static void scores_golden(void) {
    static const char *const modes[] = {"", "-tp 2 --enable-async-tp --sp-min-tokens 0", "-pp 2", "-dp 2"};
    char path[512];
    snprintf(path, sizeof path, "%s/tests/golden/qwen3/golden.safetensors", LOOM_SOURCE_DIR);
    st_file g;
    loom_err err;
    if (st_open(&g, path, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    const st_tensor *ids = st_find(&g, "ids_0"), *logits = st_find(&g, "logits_0");
    int n = (int)ids->shape[0], vocab = (int)logits->shape[1];
    int64_t id[64];
    memcpy(id, ids->data, (size_t)n * 8);
    /* text_1: the first token; text_2[k]: tokens 1..k+1, so pair k is the sequence's first k+2 */
    char body[4096];
    int len = snprintf(body, sizeof body, "{\"text_1\":[%lld],\"text_2\":[", (long long)id[0]);
    for (int k = 0; k + 2 <= n; k++) {
        len += snprintf(body + len, sizeof body - len, "%s[", k ? "," : "");
        for (int j = 1; j < k + 2; j++)
            len += snprintf(body + len, sizeof body - len, "%s%lld", j > 1 ? "," : "", (long long)id[j]);
        len += snprintf(body + len, sizeof body - len, "]");
    }
    snprintf(body + len, sizeof body - len, "]}");
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
        server s;
        char args[512];
        snprintf(args, sizeof args,
                 "-m %s/tests/golden/qwen3 --dtype float32 --task score --score-tokens 5,9 --max-num-seqs 4 "
                 "--max-num-batched-tokens 8 %s",
                 LOOM_SOURCE_DIR, modes[m]);
        if (start(&s, args)) {
            CHECK(0, "score %s: the server did not start", modes[m]);
            continue;
        }
        reply r = call(s.port, "POST", "/v1/score", body);
        cJSON *root = r.body ? cJSON_Parse(r.body) : NULL;
        const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data");
        CHECK(r.status == 200 && cJSON_GetArraySize(data) == n - 1, "score %s: %d %s", modes[m], r.status,
              r.body ? r.body : "");
        double worst = 0;
        for (int k = 0; k < cJSON_GetArraySize(data); k++) {
            float no, yes;
            memcpy(&no, (const char *)logits->data + 4 * ((size_t)(k + 1) * vocab + 5), 4);
            memcpy(&yes, (const char *)logits->data + 4 * ((size_t)(k + 1) * vocab + 9), 4);
            double want = 1 / (1 + exp((double)no - yes));
            double got = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(data, k), "score")->valuedouble;
            worst = fabs(got - want) > worst ? fabs(got - want) : worst;
        }
        CHECK(worst <= 1e-4, "score %s: %.3g from transformers' softmax", modes[m], worst);
        printf("score %s: %d pairs within %.3g of transformers'\n", modes[m][0] ? modes[m] : "tp=1", n - 1, worst);
        cJSON_Delete(root);
        reply_free(&r);
        if (!m) {
            r = call(s.port, "POST", "/v1/rerank",
                     "{\"query\":[109],\"documents\":[[34],[34,56],[34,56,34],{\"text\":[34,56,34,7]}],\"top_n\":3}");
            root = r.body ? cJSON_Parse(r.body) : NULL;
            const cJSON *res = cJSON_GetObjectItemCaseSensitive(root, "results");
            bool sorted = cJSON_GetArraySize(res) == 3;
            for (int k = 1; k < cJSON_GetArraySize(res); k++)
                sorted &=
                    cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(res, k - 1), "relevance_score")->valuedouble >=
                    cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(res, k), "relevance_score")->valuedouble;
            CHECK(r.status == 200 && sorted && strstr(r.body, "\"document\":{\"text\":"),
                  "rerank: top 3 by relevance, with their documents: %s", r.body ? r.body : "");
            cJSON_Delete(root);
            reply_free(&r);
            expect_error(s.port, "rerank without documents", "POST", "/v1/rerank", "{\"query\":[1]}", 400,
                         "'documents'");
            expect_error(s.port, "score of unequal lists", "POST", "/v1/score",
                         "{\"text_1\":[[1],[2]],\"text_2\":[[3],[4],[5]]}", 400, "one against many");
            expect_error(s.port, "embeddings from a reranker", "POST", "/v1/embeddings", "{\"input\":[1]}", 400,
                         "--task embed");
        }
        CHECK(stop(&s, SIGTERM, 60) == 0, "score %s: the server did not exit 0 on SIGTERM", modes[m]);
    }
    st_close(&g);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s serve --port 0 -m %s/tests/golden/qwen3 --task score --score-tokens yes,no 2>&1",
             LOOM_BIN, LOOM_SOURCE_DIR);
    FILE *p = popen(cmd, "r");
    char *out = read_all(fileno(p));
    int st = pclose(p);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0 && strstr(out, "--score-tokens") && strstr(out, "token ids"),
          "word score tokens on a model without a tokenizer did not stop start-up naming the flag: %s", out);
    free(out);
}

/* --score-template writes a pair's prompt: the score equals that of the same text sent whole
 * to a server without one (the embedded model, tokens 5 and 9); the template takes text only,
 * and the flag needs --task score. */
static void score_template(void) {
    char tmpl[] = "/tmp/loom-score-XXXXXX";
    int fd = mkstemp(tmpl);
    const char *src = "Q: {{ query }}\nD: {{ document }}";
    CHECK(fd >= 0 && write(fd, src, strlen(src)) == (ssize_t)strlen(src), "cannot write the score template");
    close(fd);
    double scores[2] = {-1, -2};
    for (int t = 0; t < 2; t++) {
        server s;
        char args[256];
        snprintf(args, sizeof args, "--task score --score-tokens 5,9%s%s", t ? "" : " --score-template ",
                 t ? "" : tmpl);
        if (start(&s, args)) {
            CHECK(0, "the score server (%s) did not start", args);
            continue;
        }
        reply r = call(s.port, "POST", "/v1/score",
                       t ? "{\"text_1\":\"Q: a robot\\nD: The robot was big.\",\"text_2\":\"\"}"
                         : "{\"text_1\":\"a robot\",\"text_2\":\"The robot was big.\"}");
        const char *p = r.body ? strstr(r.body, "\"score\":") : NULL;
        CHECK(r.status == 200 && p, "score %s: %d %s", args, r.status, r.body ? r.body : "");
        if (p) scores[t] = atof(p + 8);
        reply_free(&r);
        if (!t)
            expect_error(s.port, "token ids through a score template", "POST", "/v1/score",
                         "{\"text_1\":[1,2],\"text_2\":\"x\"}", 400, "with --score-template");
        CHECK(stop(&s, SIGTERM, 60) == 0, "the score server did not exit 0 on SIGTERM");
    }
    CHECK(scores[0] == scores[1], "the templated pair scores %.17g, the same text whole %.17g", scores[0], scores[1]);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s serve --port 0 --score-template %s 2>&1", LOOM_BIN, tmpl);
    FILE *p = popen(cmd, "r");
    char *out = read_all(fileno(p));
    int st = pclose(p);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0 && strstr(out, "--task score"),
          "--score-template on a generator did not stop start-up: %s", out);
    free(out);
    unlink(tmpl);
}

/* Each task's endpoints: an embedding model refuses generation and a generator refuses
 * embeddings, with a 400 naming the --task; bad embedding requests are 400s naming the field. */
static void embedding_requests_refused(void) {
    server s;
    if (start(&s, "-m " LOOM_SOURCE_DIR "/tests/golden/qwen3_embed --dtype float32")) {
        CHECK(0, "the embedding server did not start");
        return;
    }
    expect_error(s.port, "a completion from an embedding model", "POST", "/v1/completions", "{\"prompt\":[5,6]}", 400,
                 "--task generate");
    static const char *const bad[][3] = {
        {"no input", "{}", "'input' must be"},
        {"input a number", "{\"input\":5}", "'input' must be"},
        {"an empty list", "{\"input\":[]}", "'input' must be"},
        {"a token outside the vocabulary", "{\"input\":[[1,2],[3,500]]}", "input[1][1] is not a token id"},
        {"an empty input", "{\"input\":[[1],[]]}", "input[1] is empty"},
        {"text without a tokenizer", "{\"input\":\"hello\"}", "no tokenizer"},
        {"dimensions", "{\"input\":[1,2],\"dimensions\":32}", "'dimensions' 32"},
        {"encoding_format", "{\"input\":[1,2],\"encoding_format\":\"int8\"}", "'encoding_format'"},
        {"an unknown model", "{\"input\":[1,2],\"model\":\"text-embedding-3-small\"}", "does not exist"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        expect_error(s.port, bad[i][0], "POST", "/v1/embeddings", bad[i][1], strstr(bad[i][0], "model") ? 404 : 400,
                     bad[i][2]);
    reply r = call(s.port, "POST", "/v1/embeddings", "{\"input\":[1,2,3]}");
    CHECK(r.status == 200, "an embedding after the bad requests: %d %s", r.status, r.body ? r.body : "");
    reply_free(&r);
    CHECK(stop(&s, SIGTERM, 60) == 0, "the embedding server did not exit 0 on SIGTERM");
    if (start(&s, "")) {
        CHECK(0, "the server did not start");
        return;
    }
    expect_error(s.port, "embeddings from a generator", "POST", "/v1/embeddings", "{\"input\":\"hi\"}", 400,
                 "--task embed");
    CHECK(stop(&s, SIGTERM, 60) == 0, "the server did not exit 0 on SIGTERM");
    /* a bare decoder has no head to generate with; loom run says where embeddings come from */
    static const char *const cli[][2] = {{"run --task generate", "bare decoder"}, {"run", "loom serve"}};
    for (size_t i = 0; i < sizeof cli / sizeof *cli; i++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "%s %s -m %s/tests/golden/qwen3_embed/config.json --load-format dummy -p x 2>&1",
                 LOOM_BIN, cli[i][0], LOOM_SOURCE_DIR);
        FILE *p = popen(cmd, "r");
        char *out = read_all(fileno(p));
        int st = pclose(p);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0 && strstr(out, cli[i][1]), "loom %s on an embedding model: %s",
              cli[i][0], out);
        free(out);
    }
}

/* ---- the scenarios, each its own ctest entry (test_serve.NAME; CMake reads the table) ---- */

/* fn on the main test server (the embedded model), then no descriptor, slot or request left
 * over, and a clean exit on SIGTERM. */
static void on_main_server(void (*fn)(const server *)) {
    server s;
    char args[256];
    snprintf(args, sizeof args,
             "--max-model-len 512 --max-num-seqs 4 --header-timeout %d --max-connections-per-address 32 "
             "--max-body-bytes %d",
             HEADER_TIMEOUT, BODY_LIMIT);
    if (start(&s, args)) {
        CHECK(0, "server did not start");
        return;
    }
    int fds = open_fds(s.pid);
    fn(&s);
    no_leaks(&s, fds);
    CHECK(stop(&s, SIGTERM, 30) == 0, "an idle server did not exit 0 on SIGTERM");
}

/* a model slow enough (~100M parameters, dummy weights) that requests are still running when
 * the client leaves or SIGTERM comes */
static int start_slow(server *s) {
    int rc = start(s, "-m " LOOM_SOURCE_DIR "/configs/llama-100m.json --load-format dummy --max-model-len 512");
    CHECK(rc == 0, "the 100M server did not start");
    return rc;
}

static void requests_refused(const server *s) { bad_requests(s->port); }
static void matches_run(const server *s) { completions_match_run(s->port, "-p 'The robot' -n 24 --ignore-eos"); }
static void prefix_reused(const server *s) { prefix_reuse(s->port, 64, "tp=1"); }
static void slow_client_alone(const server *s) { slow_client(s->port); }
#define ON_MAIN(fn)                                                                                                    \
    static void fn##_main(void) { on_main_server(fn); }
ON_MAIN(requests_refused)
ON_MAIN(matches_run)
ON_MAIN(prefix_reused)
ON_MAIN(slow_client_alone)
ON_MAIN(hostile_grammars)
ON_MAIN(idle_flood)
ON_MAIN(many_streams)
ON_MAIN(header_deadline)
ON_MAIN(chunked_too_big)

static void client_leaves_slow(void) {
    server s;
    if (start_slow(&s)) return;
    client_leaves(s.port);
    CHECK(stop(&s, SIGTERM, 60) == 0, "the 100M server did not exit 0 on SIGTERM");
}
static void sigterm_drains_slow(void) {
    server s;
    if (!start_slow(&s)) sigterm_drains(&s);
}
static void long_cached_prefix_tp1(void) { long_cached_prefix("", "tp=1"); }
static void long_cached_prefix_tp2(void) { long_cached_prefix("-tp 2", "-tp 2"); }

/* One entry a line, as CMake reads them (check.h) */
static const check_scenario scenarios[] = {
    {"bad_template", bad_template},
    {"named_templates", named_templates},
    {"tool_calls", tool_calls},
    {"agent_apis_refused", agent_apis_refused},
    {"responses_store_bound", responses_store_bound},
    {"embeddings_golden", embeddings_golden},
    {"embedding_requests_refused", embedding_requests_refused},
    {"scores_golden", scores_golden},
    {"score_template", score_template},
    {"embedded_special_tokens", embedded_special_tokens},
    {"template_round_trips", template_round_trips},
    {"bad_requests", requests_refused_main},
    {"completions_match_run", matches_run_main},
    {"prefix_reuse", prefix_reused_main},
    {"slow_client", slow_client_alone_main},
    {"hostile_grammars", hostile_grammars_main},
    {"idle_flood", idle_flood_main},
    {"many_streams", many_streams_main},
    {"header_deadline", header_deadline_main},
    {"chunked_too_big", chunked_too_big_main},
    {"client_leaves", client_leaves_slow},
    {"sigterm_drains", sigterm_drains_slow},
    {"preemption", preemption},
    {"kv_int8", kv_int8},
    {"preemption_modes", preemption_modes},
    {"queue_room", queue_room},
    {"long_cached_prefix_tp1", long_cached_prefix_tp1},
    {"long_cached_prefix_tp2", long_cached_prefix_tp2},
    {"speculative", speculative},
    {"speculative_eagle3", speculative_eagle3},
    {"ranks", ranks},
    {"stages", stages},
    {"data_parallel", data_parallel},
    {"over_mpi", over_mpi},
};

/* test_serve NAME runs one scenario (ctest's test_serve.NAME); with no argument, all in turn. */
int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    return check_scenarios(scenarios, (int)(sizeof scenarios / sizeof *scenarios), argc, argv);
}

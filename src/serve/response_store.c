/* The Responses API's store: responses created with store: true, kept in memory so that a later
 * request can continue their conversation by previous_response_id, and GET /v1/responses/ID
 * can return them. vLLM keeps them without bound; here a byte budget (--responses-store-bytes)
 * bounds them, and past it the least recently used (created or continued) go first. A
 * follow-up renders the stored turns as they were, so it finds their prompt in the prefix
 * cache. Entries are found by a hash of their id. */
#include "serve/response_store.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/alloc.h"

#define BUCKETS 4096

typedef struct entry {
    struct entry *newer, *older; /* the recency list */
    struct entry *next;          /* its bucket's chain */
    char *id, *conversation, *body;
    size_t bytes;
} entry;

struct response_store {
    pthread_mutex_t lock;
    size_t max_bytes, bytes;
    int count;
    entry *newest, *oldest;
    entry *buckets[BUCKETS];
};

static size_t bucket_of(const char *id) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)id; *p; p++) h = (h ^ *p) * 0x100000001b3ull;
    return (size_t)(h % BUCKETS);
}

response_store *response_store_new(size_t max_bytes, loom_err *err) {
    response_store *s = mem_zalloc(1, sizeof *s, "the responses store", err);
    if (!s) return NULL;
    pthread_mutex_init(&s->lock, NULL);
    s->max_bytes = max_bytes;
    return s;
}

static void unlink_recency(response_store *s, entry *e) {
    if (e->newer) e->newer->older = e->older;
    else s->newest = e->older;
    if (e->older) e->older->newer = e->newer;
    else s->oldest = e->newer;
    e->newer = e->older = NULL;
}

static void push_newest(response_store *s, entry *e) {
    e->older = s->newest;
    if (s->newest) s->newest->newer = e;
    s->newest = e;
    if (!s->oldest) s->oldest = e;
}

static void entry_free(entry *e) {
    free(e->id);
    free(e->conversation);
    free(e->body);
    free(e);
}

/* Drops e from the list, its bucket and the count. */
static void drop(response_store *s, entry *e) {
    unlink_recency(s, e);
    entry **p = &s->buckets[bucket_of(e->id)];
    while (*p != e) p = &(*p)->next;
    *p = e->next;
    s->bytes -= e->bytes;
    s->count--;
    entry_free(e);
}

static entry *find(response_store *s, const char *id) {
    entry *e = s->buckets[bucket_of(id)];
    while (e && strcmp(e->id, id)) e = e->next;
    return e;
}

bool response_store_put(response_store *s, const char *id, const char *conversation, const char *body) {
    size_t bytes = sizeof(entry) + strlen(id) + strlen(conversation) + strlen(body) + 3;
    if (bytes > s->max_bytes) return false;
    entry *e = mem_zalloc(1, sizeof *e, "a stored response", NULL);
    if (!e || !(e->id = mem_strdup(id, "a stored response", NULL)) ||
        !(e->conversation = mem_strdup(conversation, "a stored response", NULL)) ||
        !(e->body = mem_strdup(body, "a stored response", NULL))) {
        if (e) entry_free(e);
        return false;
    }
    e->bytes = bytes;
    pthread_mutex_lock(&s->lock);
    entry *old = find(s, id);
    if (old) drop(s, old);
    while (s->bytes + bytes > s->max_bytes) drop(s, s->oldest);
    size_t b = bucket_of(id);
    e->next = s->buckets[b];
    s->buckets[b] = e;
    push_newest(s, e);
    s->bytes += bytes;
    s->count++;
    pthread_mutex_unlock(&s->lock);
    return true;
}

char *response_store_get(response_store *s, const char *id, bool body) {
    pthread_mutex_lock(&s->lock);
    entry *e = find(s, id);
    char *out = NULL;
    if (e) {
        unlink_recency(s, e);
        push_newest(s, e);
        out = mem_strdup(body ? e->body : e->conversation, "a stored response", NULL);
    }
    pthread_mutex_unlock(&s->lock);
    return out;
}

void response_store_usage(response_store *s, size_t *bytes, int *count) {
    pthread_mutex_lock(&s->lock);
    *bytes = s->bytes;
    *count = s->count;
    pthread_mutex_unlock(&s->lock);
}

void response_store_free(response_store *s) {
    if (!s) return;
    while (s->oldest) drop(s, s->oldest);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

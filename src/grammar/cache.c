/* Compiled grammars by their text, so requests with the same schema or tool set share one
 * grammar and with it the per-position masks it has computed (mask.c): the first request with a
 * schema pays for its masks, the next ones reuse them. The cache holds at most `capacity`
 * grammars and `max_bytes` of them (text, elements, masks: grammar_bytes, which grows as masks
 * are computed, so it is counted again at every lookup); least recently used grammars leave
 * first, and one larger than the whole budget is not kept. A grammar still in use by a matcher
 * lives on through its reference. HTTP threads compile and look up at once, so the cache has its
 * own lock. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "util/alloc.h"

typedef struct cache_entry {
    char *text;
    grammar *g;
    uint64_t used; /* the cache's clock at the last lookup */
} cache_entry;

struct grammar_cache {
    const grammar_vocab *vocab;
    pthread_mutex_t lock;
    cache_entry *e;
    int n, cap;
    size_t max_bytes;
    uint64_t clock;
};

grammar_cache *grammar_cache_new(const grammar_vocab *v, int capacity, size_t max_bytes, loom_err *err) {
    grammar_cache *c = mem_zalloc(1, sizeof *c, "the grammar cache", err);
    if (!c) return NULL;
    if (!(c->e = mem_zalloc((size_t)capacity, sizeof *c->e, "the grammar cache", err))) {
        free(c);
        return NULL;
    }
    c->vocab = v;
    c->cap = capacity;
    c->max_bytes = max_bytes;
    pthread_mutex_init(&c->lock, NULL);
    return c;
}

void grammar_cache_free(grammar_cache *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) {
        free(c->e[i].text);
        grammar_unref(c->e[i].g);
    }
    free(c->e);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static size_t entry_bytes(const cache_entry *e) { return strlen(e->text) + 1 + grammar_bytes(e->g); }

/* Drops entry i (lock held). */
static void drop(grammar_cache *c, int i) {
    free(c->e[i].text);
    grammar_unref(c->e[i].g);
    c->e[i] = c->e[--c->n];
}

/* The entries' bytes (lock held). */
static size_t held(const grammar_cache *c) {
    size_t bytes = 0;
    for (int i = 0; i < c->n; i++) bytes += entry_bytes(&c->e[i]);
    return bytes;
}

/* Drops least recently used entries while the cache holds over its budget (lock held). */
static void evict(grammar_cache *c) {
    for (size_t bytes = held(c); c->n && bytes > c->max_bytes;) {
        int lru = 0;
        for (int i = 1; i < c->n; i++)
            if (c->e[i].used < c->e[lru].used) lru = i;
        size_t e = entry_bytes(&c->e[lru]); /* grown since counted, maybe */
        bytes = e < bytes ? bytes - e : 0;
        drop(c, lru);
    }
}

grammar *grammar_cache_get(grammar_cache *c, const char *gbnf, loom_err *err) {
    pthread_mutex_lock(&c->lock);
    c->clock++;
    evict(c); /* the masks computed since the last lookup count now */
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->e[i].text, gbnf)) {
            c->e[i].used = c->clock;
            grammar *g = grammar_ref(c->e[i].g);
            pthread_mutex_unlock(&c->lock);
            return g;
        }
    pthread_mutex_unlock(&c->lock);
    grammar *g = grammar_compile(gbnf, c->vocab, err); /* outside the lock: other lookups go on */
    bool fits = g && strlen(gbnf) + 1 + grammar_bytes(g) <= c->max_bytes;
    char *text = fits ? mem_strdup(gbnf, "a grammar's text", NULL) : NULL;
    if (!text) return g; /* uncached (over the budget alone, or out of memory): still usable */
    pthread_mutex_lock(&c->lock);
    if (c->n == c->cap) {
        int lru = 0;
        for (int i = 1; i < c->n; i++)
            if (c->e[i].used < c->e[lru].used) lru = i;
        drop(c, lru);
    }
    c->e[c->n++] = (cache_entry){.text = text, .g = grammar_ref(g), .used = c->clock};
    evict(c); /* the least recently used first */
    pthread_mutex_unlock(&c->lock);
    return g;
}

size_t grammar_cache_bytes(grammar_cache *c) {
    pthread_mutex_lock(&c->lock);
    size_t bytes = held(c);
    pthread_mutex_unlock(&c->lock);
    return bytes;
}

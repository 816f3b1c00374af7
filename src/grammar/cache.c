/* Compiled grammars by their text, so requests with the same schema or tool set share one
 * grammar and with it the per-position masks it has computed (mask.c): the first request with a
 * schema pays for its masks, the next ones reuse them. Least recently used grammars leave first;
 * a grammar still in use by a matcher lives on through its reference. HTTP threads compile and
 * look up at once, so the cache has its own lock. */
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
    uint64_t clock;
};

grammar_cache *grammar_cache_new(const grammar_vocab *v, int capacity, loom_err *err) {
    grammar_cache *c = mem_zalloc(1, sizeof *c, "the grammar cache", err);
    if (!c) return NULL;
    if (!(c->e = mem_zalloc((size_t)capacity, sizeof *c->e, "the grammar cache", err))) {
        free(c);
        return NULL;
    }
    c->vocab = v;
    c->cap = capacity;
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

grammar *grammar_cache_get(grammar_cache *c, const char *gbnf, loom_err *err) {
    pthread_mutex_lock(&c->lock);
    c->clock++;
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->e[i].text, gbnf)) {
            c->e[i].used = c->clock;
            grammar *g = grammar_ref(c->e[i].g);
            pthread_mutex_unlock(&c->lock);
            return g;
        }
    pthread_mutex_unlock(&c->lock);
    grammar *g = grammar_compile(gbnf, c->vocab, err); /* outside the lock: other lookups go on */
    char *text = g ? mem_strdup(gbnf, "a grammar's text", NULL) : NULL;
    if (!text) return g; /* uncached when out of memory: still usable */
    pthread_mutex_lock(&c->lock);
    int slot = c->n < c->cap ? c->n++ : 0;
    for (int i = 0; i < c->n; i++)
        if (c->e[i].used < c->e[slot].used) slot = i;
    if (c->e[slot].g) {
        free(c->e[slot].text);
        grammar_unref(c->e[slot].g);
    }
    c->e[slot] = (cache_entry){.text = text, .g = grammar_ref(g), .used = c->clock};
    pthread_mutex_unlock(&c->lock);
    return g;
}

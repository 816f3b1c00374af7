/* Token masks: a vocabulary's byte strings in a trie, and what each grammar position allows.
 *
 * Whether a token may come next depends on the whole stack, but mostly only on its top frame: a
 * token inside a JSON string is decided by the string rule alone, whatever object holds the
 * string. So, as xgrammar does, each position of the grammar (a byte set an element of an
 * alternative waits on) gets its mask computed once, over the sentinel stack that stands for
 * "any caller": tokens its frame accepts on its own (whatever lies below), and the few
 * ("uncertain") that finish the frame with bytes to spare, which are then checked one by one
 * against the real stack. A sequence's mask is the union over its config's stacks. The
 * computation walks the trie depth first, stepping a config per trie node, so tokens sharing a
 * prefix share its work, and a subtree no stack can enter is skipped whole. Positions are
 * computed on first use and kept with the grammar, so requests with the same grammar share
 * them. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_impl.h"
#include "util/alloc.h"
#include "util/err.h"

#define TOKEN_BYTES_MAX 4096 /* longer tokens are cut (no vocabulary has any) */

static int by_bytes(const void *a, const void *b, void *vocab) {
    const grammar_vocab *v = vocab;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    int lx = v->len[x], ly = v->len[y],
        c = memcmp(v->bytes + v->off[x], v->bytes + v->off[y], (size_t)(lx < ly ? lx : ly));
    if (c) return c;
    return lx != ly ? (lx > ly) - (lx < ly) : (x > y) - (x < y);
}

/* Trie node `at` over sorted[lo .. hi), whose tokens share their first `depth` bytes; its
 * children are placed at v->n_trie onwards, contiguous. */
static void build(grammar_vocab *v, int32_t at, int32_t lo, int32_t hi, int depth) {
    struct trie_node *t = &v->trie[at];
    t->tok_lo = lo;
    while (lo < hi && v->len[v->sorted[lo]] == depth) lo++;
    t->tok_hi = lo;
    t->sub_hi = hi;
    int n = 0;
    for (int32_t i = lo; i < hi; i++)
        if (i == lo || v->bytes[v->off[v->sorted[i]] + depth] != v->bytes[v->off[v->sorted[i - 1]] + depth]) n++;
    t->child0 = v->n_trie;
    t->n_child = n;
    v->n_trie += n;
    int32_t child = t->child0;
    for (int32_t i = lo; i < hi; child++) {
        uint8_t b = v->bytes[v->off[v->sorted[i]] + depth];
        int32_t j = i;
        while (j < hi && v->bytes[v->off[v->sorted[j]] + depth] == b) j++;
        v->trie[child].byte = b;
        build(v, child, i, j, depth + 1);
        i = j;
    }
}

grammar_vocab *grammar_vocab_new(int n, const char *const *bytes, const int *lens, const int32_t *eos, int n_eos,
                                 loom_err *err) {
    grammar_vocab *v = mem_zalloc(1, sizeof *v, "a grammar vocabulary", err);
    if (!v) return NULL;
    v->n = n;
    v->words = (n + 31) / 32;
    size_t total = 0;
    for (int i = 0; i < n; i++) total += lens[i] > 0 ? (size_t)lens[i] : 0;
    const char *what = "a grammar vocabulary";
    if (!(v->off = mem_array((size_t)n + 1, sizeof *v->off, what, err)) ||
        !(v->len = mem_array((size_t)n, sizeof *v->len, what, err)) || !(v->bytes = mem_alloc(total + 1, what, err)) ||
        !(v->is_eos = mem_zalloc((size_t)n, sizeof *v->is_eos, what, err)) ||
        !(v->eos = mem_array((size_t)n_eos + 1, sizeof *v->eos, what, err)) ||
        !(v->sorted = mem_array((size_t)n + 1, sizeof *v->sorted, what, err)) ||
        !(v->trie = mem_zalloc(total + 1, sizeof *v->trie, what, err)))
        goto fail;
    for (int e = 0; e < n_eos; e++)
        if (eos[e] >= 0 && eos[e] < n && !v->is_eos[eos[e]]) {
            v->is_eos[eos[e]] = true;
            v->eos[v->n_eos++] = eos[e];
        }
    size_t at = 0;
    int n_sorted = 0;
    for (int i = 0; i < n; i++) {
        v->off[i] = (int32_t)at;
        v->len[i] = v->is_eos[i] ? -1 : lens[i]; /* EOS ends a sentence; it is never its text */
        if (v->len[i] <= 0) continue;
        memcpy(v->bytes + at, bytes[i], (size_t)v->len[i]);
        at += (size_t)v->len[i];
        v->sorted[n_sorted++] = i;
    }
    v->off[n] = (int32_t)at;
    qsort_r(v->sorted, (size_t)n_sorted, sizeof *v->sorted, by_bytes, v);
    v->n_trie = 1;
    build(v, 0, 0, n_sorted, 0);
    return v;
fail:
    grammar_vocab_free(v);
    return NULL;
}

void grammar_vocab_free(grammar_vocab *v) {
    if (!v) return;
    free(v->off), free(v->len), free(v->bytes), free(v->is_eos), free(v->eos), free(v->sorted), free(v->trie);
    free(v);
}

int grammar_vocab_size(const grammar_vocab *v) { return v->n; }

long grammar_mask_units(const grammar_vocab *v) { return 4L * v->n_trie + (1L << 18); }

void pos_mask_free(pos_mask *pm) {
    if (!pm) return;
    free(pm->accept);
    free(pm->uncertain);
    free(pm->pops);
    free(pm);
}

typedef struct walker {
    const grammar_vocab *v;
    cspace *cs;
    pos_mask *pm;
    size_t cap_uncertain, n_pops, cap_pops;
    int32_t path_pops[TOKEN_BYTES_MAX]; /* depths on the current path where the frame may end */
    int n_path_pops;
    int32_t shared_at, shared_n; /* the path's pops as last copied into pm->pops */
    bool oom;
} walker;

/* Tokens sorted[lo .. hi) are uncertain, with the current path's pop offsets. */
static void uncertain_range(walker *w, int32_t lo, int32_t hi) {
    pos_mask *pm = w->pm;
    if (hi <= lo || w->oom) return;
    if (w->shared_at < 0) { /* the path's pops changed since they were last copied */
        if (ARRAY_RESERVE(pm->pops, w->cap_pops, w->n_pops + (size_t)w->n_path_pops, "a grammar mask", NULL)) {
            w->oom = true;
            return;
        }
        memcpy(pm->pops + w->n_pops, w->path_pops, (size_t)w->n_path_pops * sizeof *pm->pops);
        w->shared_at = (int32_t)w->n_pops, w->shared_n = w->n_path_pops;
        w->n_pops += (size_t)w->n_path_pops;
    }
    if (ARRAY_RESERVE(pm->uncertain, w->cap_uncertain, (size_t)pm->n_uncertain + (size_t)(hi - lo), "a grammar mask",
                      NULL)) {
        w->oom = true;
        return;
    }
    for (int32_t i = lo; i < hi; i++)
        pm->uncertain[pm->n_uncertain++] = (uncertain_token){w->v->sorted[i], w->shared_at, w->shared_n};
}

/* Below trie node `at`, `depth` bytes down, reached in config cfg. */
static void walk(walker *w, int32_t at, int depth, int32_t cfg) {
    const grammar_vocab *v = w->v;
    int n;
    const int32_t *nodes = cspace_nodes(w->cs, cfg, &n);
    bool pop = n && nodes[0] == NODE_SENTINEL; /* sorted: the sentinel, id 1, comes first in a local config */
    if (pop) {
        if (depth >= TOKEN_BYTES_MAX) {
            w->oom = true;
            return;
        }
        w->path_pops[w->n_path_pops++] = depth;
        w->shared_at = -1;
    }
    const struct trie_node *t = &v->trie[at];
    for (int32_t c = t->child0; c < t->child0 + t->n_child && !w->oom; c++) {
        const struct trie_node *ch = &v->trie[c];
        int32_t next = cspace_step(w->cs, cfg, ch->byte);
        if (next < 0) {
            w->oom = true;
            break;
        }
        if (next == CFG_DEAD) {
            if (w->n_path_pops) uncertain_range(w, ch->tok_lo, ch->sub_hi);
            continue;
        }
        for (int32_t i = ch->tok_lo; i < ch->tok_hi; i++) w->pm->accept[v->sorted[i] >> 5] |= 1u << (v->sorted[i] & 31);
        walk(w, c, depth + 1, next);
    }
    if (pop) {
        w->n_path_pops--;
        w->shared_at = -1;
    }
}

/* The bucket of an uncertain token: the byte after its one pop offset, or 256. */
static int bucket_of(const grammar_vocab *v, const pos_mask *pm, const uncertain_token *u) {
    return u->n_pops == 1 ? v->bytes[v->off[u->id] + pm->pops[u->pops]] : 256;
}

/* Sorts pm's uncertain tokens into their buckets (a counting sort). */
static int bucket_uncertain(const grammar_vocab *v, pos_mask *pm) {
    int32_t count[258] = {0};
    for (int i = 0; i < pm->n_uncertain; i++) count[bucket_of(v, pm, &pm->uncertain[i]) + 1]++;
    for (int b = 0; b < 257; b++) count[b + 1] += count[b];
    memcpy(pm->bucket, count, sizeof count);
    uncertain_token *sorted = mem_array((size_t)pm->n_uncertain + 1, sizeof *sorted, "a grammar mask", NULL);
    if (!sorted) return -1;
    for (int i = 0; i < pm->n_uncertain; i++) sorted[count[bucket_of(v, pm, &pm->uncertain[i])]++] = pm->uncertain[i];
    free(pm->uncertain);
    pm->uncertain = sorted;
    return 0;
}

void grammar_masks_free(grammar *g) {
    for (size_t i = 0; i < g->pm_slots; i++) pos_mask_free(g->pm[i].pm);
    free(g->pm);
}

static size_t slot_of(int64_t key, size_t slots) {
    uint64_t h = (uint64_t)key * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 32) & (slots - 1);
}

/* Files pm under key, growing the table at half full; -1 when out of memory. */
static int masks_put(grammar *g, int64_t key, pos_mask *pm) {
    if ((g->n_pm + 1) * 2 > g->pm_slots) {
        size_t n = g->pm_slots ? g->pm_slots * 2 : 64;
        struct pm_slot *t = mem_array(n, sizeof *t, "a grammar's masks", NULL);
        if (!t) return -1;
        for (size_t i = 0; i < n; i++) t[i] = (struct pm_slot){.key = -1};
        for (size_t i = 0; i < g->pm_slots; i++) {
            if (g->pm[i].key < 0) continue;
            size_t j = slot_of(g->pm[i].key, n);
            while (t[j].key >= 0) j = (j + 1) & (n - 1);
            t[j] = g->pm[i];
        }
        free(g->pm);
        g->pm = t;
        g->pm_slots = n;
    }
    size_t j = slot_of(key, g->pm_slots);
    while (g->pm[j].key >= 0) j = (j + 1) & (g->pm_slots - 1);
    g->pm[j] = (struct pm_slot){key, pm};
    g->n_pm++;
    return 0;
}

static pos_mask *masks_get(const grammar *g, int64_t key) {
    if (!g->pm_slots) return NULL;
    for (size_t j = slot_of(key, g->pm_slots); g->pm[j].key >= 0; j = (j + 1) & (g->pm_slots - 1))
        if (g->pm[j].key == key) return g->pm[j].pm;
    return NULL;
}

/* The bytes w's mask holds. */
static size_t mask_bytes(const walker *w) {
    return sizeof *w->pm + (size_t)w->v->words * sizeof *w->pm->accept +
           (size_t)w->pm->n_uncertain * sizeof *w->pm->uncertain + w->n_pops * sizeof *w->pm->pops;
}

int grammar_pos_mask(grammar *g, int32_t pos, int32_t ret, long *units, const atomic_bool *stop, const pos_mask **out,
                     pos_mask **owned, enum cspace_fault *fault) {
    int64_t key = (int64_t)pos << 32 | (uint32_t)(ret + 1);
    *owned = NULL, *fault = CS_OK;
    pthread_mutex_lock(&g->lock);
    pos_mask *pm = masks_get(g, key);
    if (pm) {
        pthread_mutex_unlock(&g->lock);
        *out = pm;
        return 0;
    }
    walker *w = mem_zalloc(1, sizeof *w, "a grammar mask", NULL);
    int rc = -1;
    if (w) {
        *w = (walker){.v = g->vocab, .cs = g->local, .shared_at = -1};
        int32_t start = -1;
        cspace_budget(g->local, *units, stop);
        if ((w->pm = pm = mem_zalloc(1, sizeof *pm, "a grammar mask", NULL)) &&
            (pm->accept = mem_zalloc((size_t)g->vocab->words, sizeof *pm->accept, "a grammar mask", NULL)) &&
            (start = cspace_local(g->local, pos, ret)) > CFG_DEAD)
            walk(w, 0, 0, start);
        *fault = cspace_fault(g->local), *units = cspace_budget_left(g->local);
        cspace_budget(g->local, LONG_MAX, NULL);
        if (start >= 0 && !w->oom && cspace_compact(g->local, CFG_DEAD) >= 0 && !bucket_uncertain(g->vocab, pm)) {
            size_t bytes = mask_bytes(w);
            if (g->mask_bytes + bytes > GRAMMAR_MASK_BYTES) /* past the grammar's budget: the caller's alone */
                *owned = pm, rc = 0;
            else if (!masks_put(g, key, pm)) g->mask_bytes += bytes, rc = 0;
        }
        if (rc) pos_mask_free(pm);
        free(w);
    }
    pthread_mutex_unlock(&g->lock);
    *out = rc ? NULL : pm;
    return rc;
}

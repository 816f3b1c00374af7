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
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_impl.h"
#include "util/alloc.h"
#include "util/err.h"

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

#define TOKEN_BYTES_MAX 4096 /* longer tokens are cut (no vocabulary has any) */

grammar_vocab *grammar_vocab_of_model(const loom_model *m, loom_err *err) {
    loom_model_info info;
    loom_model_get_info(m, &info);
    int n = info.vocab;
    char **bytes = mem_zalloc((size_t)n, sizeof *bytes, "the vocabulary's bytes", err);
    int *lens = mem_array((size_t)n, sizeof *lens, "the vocabulary's bytes", err);
    char *buf = mem_alloc(TOKEN_BYTES_MAX, "a token's bytes", err);
    grammar_vocab *v = NULL;
    if (!bytes || !lens || !buf) goto done;
    for (int i = 0; i < n; i++) {
        lens[i] = loom_token_bytes(m, i, buf, TOKEN_BYTES_MAX);
        if (lens[i] > 0 && !(bytes[i] = mem_strndup(buf, (size_t)lens[i], "a token's bytes", err))) goto done;
    }
    v = grammar_vocab_new(n, (const char *const *)bytes, lens, info.eos_ids, info.n_eos, err);
done:
    for (int i = 0; bytes && i < n; i++) free(bytes[i]);
    free(bytes);
    free(lens);
    free(buf);
    return v;
}

void grammar_vocab_free(grammar_vocab *v) {
    if (!v) return;
    free(v->off), free(v->len), free(v->bytes), free(v->is_eos), free(v->eos), free(v->sorted), free(v->trie);
    free(v);
}

int grammar_vocab_size(const grammar_vocab *v) { return v->n; }

void pos_mask_free(pos_mask *pm) {
    if (!pm) return;
    free(pm->accept);
    free(pm->uncertain);
    free(pm);
}

typedef struct walker {
    const grammar_vocab *v;
    cspace *cs;
    pos_mask *pm;
    size_t cap_uncertain;
    bool oom;
} walker;

static void uncertain_range(walker *w, int32_t lo, int32_t hi) {
    if (hi <= lo || w->oom) return;
    if (ARRAY_RESERVE(w->pm->uncertain, w->cap_uncertain, (size_t)w->pm->n_uncertain + (size_t)(hi - lo),
                      "a grammar mask", NULL)) {
        w->oom = true;
        return;
    }
    for (int32_t i = lo; i < hi; i++) w->pm->uncertain[w->pm->n_uncertain++] = w->v->sorted[i];
}

/* Below trie node `at`, reached in config cfg; ctx: the frame may have ended at some prefix of
 * the path so far (the caller's stack would then take the rest). */
static void walk(walker *w, int32_t at, int32_t cfg, bool ctx) {
    const grammar_vocab *v = w->v;
    int n;
    const int32_t *nodes = cspace_nodes(w->cs, cfg, &n);
    ctx |= n && nodes[0] == NODE_SENTINEL; /* sorted: the sentinel, id 1, comes first in a local config */
    const struct trie_node *t = &v->trie[at];
    for (int32_t c = t->child0; c < t->child0 + t->n_child && !w->oom; c++) {
        const struct trie_node *ch = &v->trie[c];
        int32_t next = cspace_step(w->cs, cfg, ch->byte);
        if (next < 0) {
            w->oom = true;
            return;
        }
        if (next == CFG_DEAD) {
            if (ctx) uncertain_range(w, ch->tok_lo, ch->sub_hi);
            continue;
        }
        for (int32_t i = ch->tok_lo; i < ch->tok_hi; i++) w->pm->accept[v->sorted[i] >> 5] |= 1u << (v->sorted[i] & 31);
        walk(w, c, next, ctx);
    }
}

const pos_mask *grammar_pos_mask(grammar *g, int32_t pos) {
    pthread_mutex_lock(&g->lock);
    pos_mask *pm = g->pm[pos];
    if (pm) goto done;
    walker w = {.v = g->vocab, .cs = g->local};
    if (!(w.pm = pm = mem_zalloc(1, sizeof *pm, "a grammar mask", NULL)) ||
        !(pm->accept = mem_zalloc((size_t)g->vocab->words, sizeof *pm->accept, "a grammar mask", NULL))) {
        pos_mask_free(pm);
        pm = NULL;
        goto done;
    }
    int32_t start = cspace_local(g->local, pos);
    if (start > CFG_DEAD) walk(&w, 0, start, false);
    if (start < 0 || w.oom || cspace_compact(g->local, CFG_DEAD) < 0) {
        pos_mask_free(pm);
        pm = NULL;
        goto done;
    }
    g->pm[pos] = pm;
done:
    pthread_mutex_unlock(&g->lock);
    return pm;
}

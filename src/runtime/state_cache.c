/* Snapshot slots of recurrent layers' state (state_cache.h): the bookkeeping of which slot
 * holds the state after which cached block, and which slots a pass fills. A slot is chosen
 * least recently used first; the few slots (two a sequence by default) make a linear search
 * cheaper than an index. */
#include "runtime/state_cache.h"

#include <stdlib.h>
#include <string.h>

#include "util/alloc.h"

int state_cache_init(state_cache *s, int interval, int n_slots, int max_seqs, loom_err *err) {
    *s = (state_cache){.interval = interval, .n_slots = n_slots, .max_pass = 2 * max_seqs};
    const char *what = "the recurrent state's snapshot slots";
    return (s->key = mem_zalloc(n_slots, sizeof *s->key, what, err)) &&
                   (s->valid = mem_zalloc(n_slots, sizeof *s->valid, what, err)) &&
                   (s->used = mem_zalloc(n_slots, sizeof *s->used, what, err)) &&
                   (s->pass = mem_zalloc(s->max_pass, sizeof *s->pass, what, err))
               ? 0
               : -1;
}

void state_cache_free(state_cache *s) {
    free(s->key), free(s->valid), free(s->used), free(s->pass);
    memset(s, 0, sizeof *s);
}

/* The least recently used slot the pass has not taken yet (n_slots >= max_pass, so one is). */
static int oldest_free(const state_cache *s) {
    int best = -1;
    for (int i = 0; i < s->n_slots; i++) {
        bool taken = false;
        for (int j = 0; j < s->n_pass && !taken; j++) taken = s->pass[j].slot == i;
        if (!taken && (best < 0 || s->used[i] < s->used[best])) best = i;
    }
    return best;
}

static void take(state_cache *s, int seq, int pos) {
    int slot = oldest_free(s);
    s->valid[slot] = false;
    s->used[slot] = ++s->tick;
    s->pass[s->n_pass++] = (state_snap){seq, pos, slot};
}

void state_cache_plan(state_cache *s, const loom_batch *b) {
    s->n_pass = 0;
    for (int r = 0, r0 = 0; r < b->n_tokens; r++) { /* r0: the run's first row */
        if (r + 1 < b->n_tokens && b->seq[r + 1] == b->seq[r]) continue;
        int first = b->pos[r0];
        r0 = r + 1;
        int last = (b->pos[r] + 1) / s->interval * s->interval; /* the last snapshot point reached */
        if (last > first) take(s, b->seq[r], last);
        /* a run ending on a point keeps the one before too: the same prompt again resumes there,
         * as its last token must run for its logits */
        if (last == b->pos[r] + 1 && last - s->interval > first) take(s, b->seq[r], last - s->interval);
    }
}

void state_cache_commit(state_cache *s, const kv_cache *kv) {
    for (int i = 0; i < s->n_pass; i++) {
        const state_snap *p = &s->pass[i];
        int b = kv->tables[(size_t)p->seq * kv->table_width + p->pos / kv->block_size - 1];
        s->key[p->slot] = kv->blocks[b].key;
        s->valid[p->slot] = kv->blocks[b].full;
    }
    s->n_pass = 0;
}

static int slot_of(const state_cache *s, kv_key k) {
    for (int i = 0; i < s->n_slots; i++)
        if (s->valid[i] && s->key[i].lo == k.lo && s->key[i].hi == k.hi) return i;
    return -1;
}

int state_cache_resumable(const state_cache *s, const kv_cache *kv, const int32_t *matched, int n) {
    int per = s->interval / kv->block_size;
    for (int k = n / per * per; k > 0; k -= per)
        if (slot_of(s, kv->blocks[matched[k - 1]].key) >= 0) return k;
    return 0;
}

int state_cache_take(state_cache *s, const kv_cache *kv, int b) {
    int slot = kv->blocks[b].full ? slot_of(s, kv->blocks[b].key) : -1;
    if (slot >= 0) s->used[slot] = ++s->tick;
    return slot;
}

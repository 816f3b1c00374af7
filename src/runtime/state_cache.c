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
                   (s->pos = mem_zalloc(n_slots, sizeof *s->pos, what, err)) &&
                   (s->resumed = mem_zalloc(n_slots, sizeof *s->resumed, what, err)) &&
                   (s->pass = mem_zalloc(s->max_pass, sizeof *s->pass, what, err))
               ? 0
               : -1;
}

void state_cache_free(state_cache *s) {
    free(s->key), free(s->valid), free(s->used), free(s->pos), free(s->resumed), free(s->pass);
    memset(s, 0, sizeof *s);
}

static bool taken_in_pass(const state_cache *s, int slot) {
    for (int j = 0; j < s->n_pass; j++)
        if (s->pass[j].slot == slot) return true;
    return false;
}

/* A slot sequence seq made stale before its run from position `first`: a snapshot on its own
 * path (the key of its block ending there) before `keep`, that no prefix resumed from; or -1. */
static int stale_slot(const state_cache *s, const kv_cache *kv, int seq, int first, int keep) {
    for (int i = 0; i < s->n_slots; i++) {
        if (!s->valid[i] || s->resumed[i] || s->pos[i] > first || s->pos[i] >= keep || taken_in_pass(s, i)) continue;
        const kv_block *b = &kv->blocks[kv->tables[(size_t)seq * kv->table_width + s->pos[i] / kv->block_size - 1]];
        if (b->full && b->key.lo == s->key[i].lo && b->key.hi == s->key[i].hi) return i;
    }
    return -1;
}

/* The least recently used slot the pass has not taken yet (n_slots >= max_pass, so one is); with
 * empty_only, an empty one or -1. */
static int oldest_free(const state_cache *s, bool empty_only) {
    int best = -1;
    for (int i = 0; i < s->n_slots; i++)
        if (!taken_in_pass(s, i) && (!empty_only || !s->valid[i]) && (best < 0 || s->used[i] < s->used[best])) best = i;
    return best;
}

/* An empty slot, else one its sequence made stale, else the least recently used. */
static void take(state_cache *s, const kv_cache *kv, int seq, int pos, int first, int keep) {
    int slot = oldest_free(s, true);
    if (slot < 0) slot = stale_slot(s, kv, seq, first, keep);
    if (slot < 0) slot = oldest_free(s, false);
    s->valid[slot] = s->resumed[slot] = false;
    s->used[slot] = ++s->tick;
    s->pos[slot] = pos;
    s->pass[s->n_pass++] = (state_snap){seq, pos, slot};
}

void state_cache_plan(state_cache *s, const kv_cache *kv, const loom_batch *b) {
    s->n_pass = 0;
    for (int r = 0, r0 = 0; r < b->n_tokens; r++) { /* r0: the run's first row */
        if (r + 1 < b->n_tokens && b->seq[r + 1] == b->seq[r]) continue;
        int first = b->pos[r0];
        r0 = r + 1;
        int last = (b->pos[r] + 1) / s->interval * s->interval; /* the last snapshot point reached */
        /* a run ending on a point keeps the one before too: the same prompt again resumes there,
         * as its last token must run for its logits */
        bool before = last == b->pos[r] + 1 && last - s->interval > first;
        int keep = last - s->interval; /* its sequence's snapshots from here on are not stale */
        if (last > first) take(s, kv, b->seq[r], last, first, keep);
        if (before) take(s, kv, b->seq[r], last - s->interval, first, keep);
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
    if (slot >= 0) s->used[slot] = ++s->tick, s->resumed[slot] = true;
    return slot;
}

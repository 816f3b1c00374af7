/* Prefix caching for recurrent layers (state_cache.c): which snapshot slot holds a recurrent
 * layer's state at the end of which cached block. Attention layers resume a cached prefix from
 * its KV blocks; a recurrent layer keeps one state per sequence, so a prefix resumes only where
 * a snapshot of that state was kept. Passes take snapshots at every `interval` positions (the
 * last such position each sequence's run in the pass reaches, and the one before where the run
 * ends on one); the key of the block a snapshot ends names it, as the prefix index names the
 * block. A new snapshot goes into an empty slot, else one its own sequence made stale (an
 * earlier snapshot on its path, before the one it keeps for a repeat, that no prefix has
 * resumed from: a conversation then holds two slots, not one per pass), else the least
 * recently used, so other conversations' last snapshots, which their next turns resume from,
 * stay. It holds no state (the executor's snapshot arrays
 * do) and, like kv_cache.h's bookkeeping, every rank keeps its own copy, changed only by
 * batches and attaches given in the same order. */
#ifndef LOOM_RUNTIME_STATE_CACHE_H
#define LOOM_RUNTIME_STATE_CACHE_H
#include "kernels/kernels.h"
#include "runtime/kv_cache.h"

typedef struct state_cache {
    int interval, n_slots;
    kv_key *key;    /* per slot: the key of the block its snapshot ends */
    bool *valid;    /* per slot: it holds a snapshot its key names */
    uint64_t *used; /* per slot: the tick of its last use, for least-recently-used reuse */
    int32_t *pos;   /* per slot: the position its snapshot was taken after */
    bool *resumed;  /* per slot: a prefix has resumed from it (kept out of its sequence's reuse) */
    uint64_t tick;
    state_snap *pass; /* the snapshots the pass being run takes */
    int n_pass, max_pass;
} state_cache;

/* interval: positions between snapshot points, a multiple of the KV block size; n_slots of
 * them kept (at least two a sequence: a pass takes up to two a sequence, max_pass). */
int state_cache_init(state_cache *s, int interval, int n_slots, int max_seqs, loom_err *err);
void state_cache_free(state_cache *s);
/* Before a pass of b (kv_cache_grow_batch done): the snapshots it takes (s->pass), each in a slot
 * no other of them uses (an empty one, its sequence's stale one, the least recently used); those
 * slots stop naming what they held. */
void state_cache_plan(state_cache *s, const kv_cache *kv, const loom_batch *b);
/* After the pass (kv_cache_written_batch has keyed its full blocks): the slots it filled are
 * named by the key of the block each snapshot ends. */
void state_cache_commit(state_cache *s, const kv_cache *kv);
/* Of matched[0..n) (kv_cache_match's blocks), how many a cached prefix can resume from: the
 * longest run ending at a snapshot point whose snapshot is kept (0: none). */
int state_cache_resumable(const state_cache *s, const kv_cache *kv, const int32_t *matched, int n);
/* The slot holding the state at the end of block `b` (full), or -1; a hit counts as a use. */
int state_cache_take(state_cache *s, const kv_cache *kv, int b);

#endif

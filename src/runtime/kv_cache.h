/* The paged KV cache's bookkeeping (kv_cache.c): which block of the pool holds each position of
 * each sequence, which blocks are free, and, with prefix caching, which full blocks hold which
 * tokens, so that a sequence starting with tokens seen before reuses their K and V instead of
 * computing them again. It holds no K or V (the executor's pools do). Every rank keeps its own
 * copy and changes it only through batches (their tokens and positions), releases and
 * attaches, which every rank is given in the same order: the copies take the same decisions
 * without any being sent. */
#ifndef LOOM_RUNTIME_KV_CACHE_H
#define LOOM_RUNTIME_KV_CACHE_H
#include <stdbool.h>
#include <stdint.h>

#include "loom.h"
#include "util/err.h"

/* A full block's key: a 128-bit hash of its predecessor's key and its own tokens, so it names
 * the whole prefix up to the block's end. */
typedef struct kv_key {
    uint64_t lo, hi;
} kv_key;

typedef struct kv_block {
    int refs;       /* sequences whose table holds it */
    int prev, next; /* neighbours in the free list while refs == 0 (-1: none) */
    bool full;      /* all its positions written: key is set */
    bool indexed;   /* in the prefix index (full, prefix caching on, and no twin indexed first) */
    kv_key key;
} kv_block;

typedef struct kv_cache {
    int n_blocks, block_size, max_seqs, table_width;
    bool prefix_caching;
    const char *uncached; /* prefix caching asked for, but off: why (a static string) */
    int32_t *tables;      /* [max_seqs][table_width]: each sequence's blocks in position order */
    int *len;             /* positions each sequence holds */
    int *held;            /* blocks in its table (more than len needs after a failed pass) */
    int32_t *tokens;      /* [n_blocks][block_size]: the token written at each row */
    kv_block *blocks;
    /* blocks no sequence holds, the next to be reused at the head: never-keyed ones there,
     * indexed ones at the tail, so a cached prefix is evicted last, least recently used first */
    int free_head, free_tail, n_free;
    int32_t *index; /* the prefix index: open addressing on key.lo, -1 where empty */
    size_t index_mask;
    int n_indexed;
    long evicted; /* indexed blocks reused for other positions */
} kv_cache;

int kv_cache_init(kv_cache *c, int n_blocks, int block_size, int max_seqs, int max_ctx, bool prefix_caching,
                  loom_err *err);
void kv_cache_free(kv_cache *c);
/* Blocks seq needs taken from the free list to hold new_len positions. */
int kv_cache_blocks_needed(const kv_cache *c, int seq, int new_len);
/* Gives seq blocks for new_len positions (the caller has checked they are free), reusing the
 * free list's head: an indexed block leaves the index then. */
void kv_cache_grow(kv_cache *c, int seq, int new_len);
/* Records that positions pos0..pos0+n-1 of seq hold tokens ids (a pass wrote them): its length
 * becomes pos0 + n, and each block they fill gets its key (and, with prefix caching, joins the
 * index unless a block with that key is already there). */
void kv_cache_written(kv_cache *c, int seq, int pos0, const int32_t *ids, int n);
/* seq keeps its first new_len positions (at most its length): the blocks past them go back to
 * the pool, and the block they end inside, if full, leaves the index (its later rows will be
 * written again). Fails on that block being shared, which no caller makes: rows past a
 * sequence's length were written by its own last pass, and only full blocks are shared. */
int kv_cache_truncate(kv_cache *c, int seq, int new_len, loom_err *err);
/* seq lets go of its blocks; its length restarts at 0. */
void kv_cache_release(kv_cache *c, int seq);
/* The indexed blocks holding the longest prefix of tokens[0..n) in whole blocks, into blocks
 * (room for n / block_size); their count. Keys are compared in full and so are each block's own
 * tokens: a collision between blocks of other tokens is a miss (kv_cache.c says what is left).
 * Changes nothing. */
int kv_cache_match(const kv_cache *c, const int32_t *tokens, int n, int32_t *blocks);
/* A batch's sequences (each one's tokens contiguous, loom_forward's rule): the blocks they need
 * from the free list; then, before its pass, the blocks given to them; after it, what they
 * wrote. A server's scheduler keeps a copy of a replica's bookkeeping the same way. */
int kv_cache_batch_needs(const kv_cache *c, const loom_batch *b);
void kv_cache_grow_batch(kv_cache *c, const loom_batch *b);
void kv_cache_written_batch(kv_cache *c, const loom_batch *b);
void kv_cache_get_stats(const kv_cache *c, loom_kv_stats *st);
/* A hash of the whole bookkeeping (each sequence's length and blocks, each block's references,
 * key and state, the free list in order), which every copy of it agrees on after the same
 * calls: a check that ranks took the same block decisions. */
uint64_t kv_cache_digest(const kv_cache *c);
/* Empty sequence seq starts with full blocks blocks[0..n) (from kv_cache_match, here or on
 * rank 0): it holds n * block_size positions. */
int kv_cache_attach(kv_cache *c, int seq, const int32_t *blocks, int n, loom_err *err);

#endif

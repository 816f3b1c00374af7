/* The paged KV cache's bookkeeping (kv_cache.h): block tables, the free list and the prefix
 * index. A block's key is XXH3-128 (libxxhash) of its predecessor's key and its tokens, as
 * vLLM's chain of block hashes; a hit also compares the block's own tokens, so a collision
 * between blocks of other tokens is a miss. Two different prefixes whose chains collide and
 * end in the same tokens would still hit: about n^2 / 2^129 for n blocks ever keyed. */
#include "runtime/kv_cache.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "util/alloc.h"

static int blocks_for(const kv_cache *c, int len) { return (len + c->block_size - 1) / c->block_size; }

static kv_key key_of(kv_key parent, const int32_t *tokens, int n) {
    int32_t in[4 + n]; /* the predecessor's key, then the tokens (n <= 1024) */
    memcpy(in, &parent, sizeof parent);
    memcpy(in + 4, tokens, (size_t)n * sizeof *tokens);
    XXH128_hash_t h = XXH3_128bits(in, sizeof in);
    return (kv_key){h.low64, h.high64};
}

static bool same_key(kv_key a, kv_key b) { return a.lo == b.lo && a.hi == b.hi; }

/* The free list. */
static void unlink_free(kv_cache *c, int b) {
    kv_block *k = &c->blocks[b];
    *(k->prev >= 0 ? &c->blocks[k->prev].next : &c->free_head) = k->next;
    *(k->next >= 0 ? &c->blocks[k->next].prev : &c->free_tail) = k->prev;
    k->prev = k->next = -1;
    c->n_free--;
}

static void push_free(kv_cache *c, int b, bool at_tail) {
    kv_block *k = &c->blocks[b];
    if (at_tail) {
        k->prev = c->free_tail, k->next = -1;
        *(c->free_tail >= 0 ? &c->blocks[c->free_tail].next : &c->free_head) = b;
        c->free_tail = b;
    } else {
        k->next = c->free_head, k->prev = -1;
        *(c->free_head >= 0 ? &c->blocks[c->free_head].prev : &c->free_tail) = b;
        c->free_head = b;
    }
    c->n_free++;
}

/* The prefix index: linear probing, deletion by backward shift (no tombstones). */
static size_t slot_of(const kv_cache *c, kv_key k) { return (size_t)k.lo & c->index_mask; }

static int index_find(const kv_cache *c, kv_key k) {
    for (size_t i = slot_of(c, k);; i = (i + 1) & c->index_mask) {
        int b = c->index[i];
        if (b < 0 || same_key(c->blocks[b].key, k)) return b;
    }
}

static void index_add(kv_cache *c, int b) {
    size_t i = slot_of(c, c->blocks[b].key);
    while (c->index[i] >= 0) i = (i + 1) & c->index_mask;
    c->index[i] = b;
    c->blocks[b].indexed = true;
    c->n_indexed++;
}

static void index_remove(kv_cache *c, int b) {
    size_t i = slot_of(c, c->blocks[b].key);
    while (c->index[i] != b) i = (i + 1) & c->index_mask;
    for (size_t j = i;;) { /* pull later entries of the probe run back over the hole */
        j = (j + 1) & c->index_mask;
        if (c->index[j] < 0) break;
        size_t home = slot_of(c, c->blocks[c->index[j]].key);
        if (((j - home) & c->index_mask) >= ((j - i) & c->index_mask)) c->index[i] = c->index[j], i = j;
    }
    c->index[i] = -1;
    c->blocks[b].indexed = false;
    c->n_indexed--;
}

int kv_cache_init(kv_cache *c, int n_blocks, int block_size, int max_seqs, int max_ctx, bool prefix_caching,
                  loom_err *err) {
    *c = (kv_cache){.n_blocks = n_blocks,
                    .block_size = block_size,
                    .max_seqs = max_seqs,
                    .prefix_caching = prefix_caching,
                    .free_head = -1,
                    .free_tail = -1};
    c->table_width = blocks_for(c, max_ctx);
    size_t cap = 1; /* the index at most half full */
    while (cap < 2 * (size_t)n_blocks) cap *= 2;
    c->index_mask = cap - 1;
    const char *what = "the KV cache's block tables";
    if (!(c->tables = mem_array((size_t)max_seqs * c->table_width, sizeof *c->tables, what, err)) ||
        !(c->len = mem_zalloc(max_seqs, sizeof *c->len, what, err)) ||
        !(c->held = mem_zalloc(max_seqs, sizeof *c->held, what, err)) ||
        !(c->tokens = mem_array((size_t)n_blocks * block_size, sizeof *c->tokens, what, err)) ||
        !(c->blocks = mem_zalloc(n_blocks, sizeof *c->blocks, what, err)) ||
        !(c->index = mem_array(cap, sizeof *c->index, what, err)))
        return -1;
    memset(c->index, 0xff, cap * sizeof *c->index);
    for (int b = 0; b < n_blocks; b++) push_free(c, b, true);
    return 0;
}

void kv_cache_free(kv_cache *c) {
    free(c->tables);
    free(c->len);
    free(c->held);
    free(c->tokens);
    free(c->blocks);
    free(c->index);
}

int kv_cache_blocks_needed(const kv_cache *c, int seq, int new_len) {
    int need = blocks_for(c, new_len) - c->held[seq];
    return need > 0 ? need : 0;
}

void kv_cache_grow(kv_cache *c, int seq, int new_len) {
    int32_t *table = c->tables + (size_t)seq * c->table_width;
    while (c->held[seq] < blocks_for(c, new_len)) {
        int b = c->free_head;
        unlink_free(c, b);
        kv_block *k = &c->blocks[b];
        if (k->indexed) index_remove(c, b), c->evicted++;
        k->full = false;
        k->refs = 1;
        table[c->held[seq]++] = b;
    }
}

void kv_cache_written(kv_cache *c, int seq, int pos0, const int32_t *ids, int n) {
    const int32_t *table = c->tables + (size_t)seq * c->table_width;
    int bs = c->block_size;
    for (int i = 0; i < n; i++) {
        int p = pos0 + i, b = table[p / bs];
        c->tokens[(size_t)b * bs + p % bs] = ids[i];
        if (p % bs != bs - 1) continue;
        kv_key parent = p / bs ? c->blocks[table[p / bs - 1]].key : (kv_key){0, 0};
        kv_block *k = &c->blocks[b];
        k->key = key_of(parent, c->tokens + (size_t)b * bs, bs);
        k->full = true;
        if (c->prefix_caching && index_find(c, k->key) < 0) index_add(c, b);
    }
    c->len[seq] = pos0 + n;
}

void kv_cache_release(kv_cache *c, int seq) {
    const int32_t *table = c->tables + (size_t)seq * c->table_width;
    /* from the last block back: a sequence's later blocks are evicted before its earlier ones,
     * which longer prefixes need too */
    for (int i = c->held[seq] - 1; i >= 0; i--) {
        kv_block *k = &c->blocks[table[i]];
        if (--k->refs == 0) push_free(c, table[i], k->indexed);
    }
    c->held[seq] = c->len[seq] = 0;
}

int kv_cache_truncate(kv_cache *c, int seq, int new_len, loom_err *err) {
    if (new_len < 0 || new_len > c->len[seq])
        return loom_errf(err, "sequence %d cut back to %d positions, but it holds %d", seq, new_len, c->len[seq]);
    int32_t *table = c->tables + (size_t)seq * c->table_width;
    int keep = blocks_for(c, new_len);
    if (new_len % c->block_size) {
        kv_block *k = &c->blocks[table[keep - 1]];
        if (k->refs > 1)
            return loom_errf(err, "sequence %d cut back inside block %d, which %d sequences share", seq,
                             table[keep - 1], k->refs);
        if (k->indexed) index_remove(c, table[keep - 1]);
        k->full = false;
    }
    /* blocks wholly past new_len hold rejected tokens only (a draft filling one got it keyed and
     * indexed): out of the index and reused first, not kept as the newest cached prefix */
    for (int i = c->held[seq] - 1; i >= keep; i--) {
        kv_block *k = &c->blocks[table[i]];
        if (--k->refs) continue;
        if (k->indexed) index_remove(c, table[i]);
        k->full = false;
        push_free(c, table[i], false);
    }
    c->held[seq] = keep < c->held[seq] ? keep : c->held[seq];
    c->len[seq] = new_len;
    return 0;
}

int kv_cache_match(const kv_cache *c, const int32_t *tokens, int n, int32_t *blocks) {
    if (!c->prefix_caching) return 0;
    int bs = c->block_size, m = 0;
    kv_key key = {0, 0};
    for (; (m + 1) * bs <= n; m++) {
        key = key_of(key, tokens + (size_t)m * bs, bs);
        int b = index_find(c, key);
        if (b < 0 || memcmp(c->tokens + (size_t)b * bs, tokens + (size_t)m * bs, bs * sizeof *tokens)) break;
        blocks[m] = b;
    }
    return m;
}

int kv_cache_attach(kv_cache *c, int seq, const int32_t *blocks, int n, loom_err *err) {
    if (seq < 0 || seq >= c->max_seqs || c->held[seq])
        return loom_errf(err, "a cached prefix attached to sequence %d, which is not an empty sequence", seq);
    if (n < 0 || n > c->table_width)
        return loom_errf(err, "a cached prefix of %d blocks attached to sequence %d (it holds up to %d)", n, seq,
                         c->table_width);
    for (int i = 0; i < n; i++)
        if (blocks[i] < 0 || blocks[i] >= c->n_blocks || !c->blocks[blocks[i]].full)
            return loom_errf(err, "a cached prefix names block %d, which is not a full block of the %d", blocks[i],
                             c->n_blocks);
    int32_t *table = c->tables + (size_t)seq * c->table_width;
    for (int i = 0; i < n; i++) {
        kv_block *k = &c->blocks[blocks[i]];
        if (k->refs++ == 0) unlink_free(c, blocks[i]);
        table[i] = blocks[i];
    }
    c->held[seq] = n;
    c->len[seq] = n * c->block_size;
    return 0;
}

/* Whether token r of b is the last of its sequence's run. */
static bool run_ends(const loom_batch *b, int r) { return r + 1 == b->n_tokens || b->seq[r + 1] != b->seq[r]; }

int kv_cache_batch_needs(const kv_cache *c, const loom_batch *b) {
    int need = 0;
    for (int r = 0; r < b->n_tokens; r++)
        if (run_ends(b, r)) need += kv_cache_blocks_needed(c, b->seq[r], b->pos[r] + 1);
    return need;
}

void kv_cache_grow_batch(kv_cache *c, const loom_batch *b) {
    for (int r = 0; r < b->n_tokens; r++)
        if (run_ends(b, r)) kv_cache_grow(c, b->seq[r], b->pos[r] + 1);
}

void kv_cache_written_batch(kv_cache *c, const loom_batch *b) {
    for (int r = 0, r0 = 0; r < b->n_tokens; r++)
        if (run_ends(b, r)) {
            kv_cache_written(c, b->seq[r], b->pos[r0], b->ids + r0, r + 1 - r0);
            r0 = r + 1;
        }
}

uint64_t kv_cache_digest(const kv_cache *c) {
    XXH3_state_t *h = XXH3_createState();
    if (!h) return 0;
    XXH3_64bits_reset(h);
    for (int s = 0; s < c->max_seqs; s++) {
        int32_t head[2] = {c->len[s], c->held[s]};
        XXH3_64bits_update(h, head, sizeof head);
        XXH3_64bits_update(h, c->tables + (size_t)s * c->table_width, (size_t)c->held[s] * sizeof *c->tables);
    }
    for (int b = 0; b < c->n_blocks; b++) {
        const kv_block *k = &c->blocks[b];
        int32_t state[3] = {k->refs, k->full, k->indexed};
        XXH3_64bits_update(h, state, sizeof state);
        if (k->full) XXH3_64bits_update(h, &k->key, sizeof k->key);
    }
    for (int b = c->free_head; b >= 0; b = c->blocks[b].next) XXH3_64bits_update(h, &b, sizeof b);
    uint64_t d = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    return d;
}

void kv_cache_get_stats(const kv_cache *c, loom_kv_stats *st) {
    *st = (loom_kv_stats){.block_size = c->block_size,
                          .blocks = c->n_blocks,
                          .blocks_used = c->n_blocks - c->n_free,
                          .blocks_cached = c->n_indexed,
                          .evicted = c->evicted,
                          .prefix_caching = c->prefix_caching,
                          .uncached = c->uncached};
}

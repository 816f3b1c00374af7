/* The BPE model: the vocab and merge hash tables, and merging one pre-tokenized word into ids
 * the way HF's BPE::merge_word does (byte fallback, <unk>, fuse_unk, ignore_merges). */
#include "text/tokenizer_impl.h"

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t mix64(uint64_t x) { /* splitmix64 finalizer */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* ---------------------------------------------------------------- tables */

int32_t tok_vocab_find(const tokenizer *t, const char *s, size_t n) {
    for (uint32_t h = (uint32_t)hash_bytes(s, n) & t->vocab_mask;; h = (h + 1) & t->vocab_mask) {
        uint32_t v = t->vocab_slot[h];
        if (!v) return -1;
        span sp = t->model_str[v - 1];
        if (sp.len == n && !memcmp(S(t, sp), s, n)) return (int32_t)(v - 1);
    }
}

void tok_vocab_add(tokenizer *t, int32_t id) {
    span sp = t->model_str[id];
    uint32_t h = (uint32_t)hash_bytes(S(t, sp), sp.len) & t->vocab_mask;
    while (t->vocab_slot[h]) h = (h + 1) & t->vocab_mask;
    t->vocab_slot[h] = (uint32_t)id + 1;
}

static uint64_t pair_of(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }

static uint32_t pair_slot(const tokenizer *t, uint64_t key) {
    uint32_t h = (uint32_t)mix64(key) & t->pair_mask;
    while (t->pair_key[h] != UINT64_MAX && t->pair_key[h] != key) h = (h + 1) & t->pair_mask;
    return h;
}

void tok_pair_add(tokenizer *t, int32_t left, int32_t right, uint32_t rank, int32_t merged) {
    uint64_t key = pair_of(left, right);
    uint32_t h = pair_slot(t, key);
    t->pair_key[h] = key;
    t->pair_rank[h] = rank;
    t->pair_new[h] = merged;
}

static bool pair_find(const tokenizer *t, int32_t a, int32_t b, uint32_t *rank, int32_t *merged) {
    uint32_t h = pair_slot(t, pair_of(a, b));
    if (t->pair_key[h] == UINT64_MAX) return false;
    *rank = t->pair_rank[h];
    *merged = t->pair_new[h];
    return true;
}

/* ---------------------------------------------------------------- merging */

/* Min-heap on (rank, pos), the order HF's BinaryHeap of merges pops in. */
static bool merge_less(merge a, merge b) { return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos; }

static int heap_push(enc *e, merge m) {
    if (ARRAY_RESERVE(e->hp, e->cap_hp, e->n_hp + 1, "the BPE merge queue", e->err)) return -1;
    size_t i = e->n_hp++;
    for (; i > 0 && merge_less(m, e->hp[(i - 1) / 2]); i = (i - 1) / 2) e->hp[i] = e->hp[(i - 1) / 2];
    e->hp[i] = m;
    return 0;
}

static merge heap_pop(enc *e) {
    merge top = e->hp[0], last = e->hp[--e->n_hp];
    size_t i = 0, n = e->n_hp;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && merge_less(e->hp[c + 1], e->hp[c])) c++;
        if (!merge_less(e->hp[c], last)) break;
        e->hp[i] = e->hp[c];
        i = c;
    }
    if (n) e->hp[i] = last;
    return top;
}

/* Queues the merge of the symbol at pos with its right neighbour, if there is one. */
static int queue_pair(enc *e, int32_t pos) {
    uint32_t rank;
    int32_t merged;
    if (pos < 0 || e->sy[pos].next < 0) return 0;
    if (!pair_find(e->t, e->sy[pos].id, e->sy[e->sy[pos].next].id, &rank, &merged)) return 0;
    return heap_push(e, (merge){rank, (uint32_t)pos, merged});
}

/* HF Word::merge_all: repeatedly apply the lowest-ranked merge, skipping stale queue entries. */
static int merge_all(enc *e, size_t n) {
    e->n_hp = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (queue_pair(e, (int32_t)i)) return -1;
    while (e->n_hp) {
        merge m = heap_pop(e);
        sym *a = &e->sy[m.pos];
        uint32_t rank;
        int32_t merged;
        if (a->dead || a->next < 0) continue;
        sym *b = &e->sy[a->next];
        if (!pair_find(e->t, a->id, b->id, &rank, &merged) || merged != m.id) continue;
        a->id = m.id;
        b->dead = true;
        a->next = b->next;
        if (b->next >= 0) e->sy[b->next].prev = (int32_t)m.pos;
        if (queue_pair(e, a->prev) || queue_pair(e, (int32_t)m.pos)) return -1;
    }
    return 0;
}

static bool bytes_known(const tokenizer *t, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (t->byte_id[(uint8_t)s[i]] < 0) return false;
    return true;
}

/* HF BPE::merge_word: one symbol per character (byte tokens or <unk> for characters the vocab
 * lacks), then merges, then the ids. */
int tok_bpe_word(enc *e, const char *w, size_t n) {
    const tokenizer *t = e->t;
    if (t->ignore_merges) {
        int32_t id = tok_vocab_find(t, w, n);
        if (id >= 0) return enc_push_id(e, id);
    }
    if (ARRAY_RESERVE(e->sy, e->cap_sy, n, "BPE symbols", e->err)) return -1;
    size_t ns = 0;
    bool unk = false; /* an <unk> waiting to be added (fuse_unk grows it instead) */
    for (size_t i = 0, cl; i < n; i += cl) {
        cl = u8len((uint8_t)w[i]);
        int32_t id = tok_vocab_find(t, w + i, cl);
        if (id >= 0) {
            if (unk) e->sy[ns++].id = t->unk_id;
            unk = false;
            e->sy[ns++].id = id;
        } else if (t->byte_fallback && bytes_known(t, w + i, cl)) {
            /* as HF: a waiting <unk> is not added before these */
            for (size_t k = 0; k < cl; k++) e->sy[ns++].id = t->byte_id[(uint8_t)w[i + k]];
        } else if (t->unk.off != NONE) {
            if (t->unk_id < 0)
                return loom_errf(e->err, "tokenizer_encode: model.unk_token \"%s\" is not in the vocab", S(t, t->unk));
            if (unk && !t->fuse_unk) e->sy[ns++].id = t->unk_id;
            unk = true;
        } /* with neither, HF drops the character */
    }
    if (unk) e->sy[ns++].id = t->unk_id;
    for (size_t i = 0; i < ns; i++) {
        e->sy[i].prev = (int32_t)i - 1;
        e->sy[i].next = i + 1 < ns ? (int32_t)i + 1 : -1;
        e->sy[i].dead = false;
    }
    if (merge_all(e, ns)) return -1;
    for (int32_t i = ns ? 0 : -1; i >= 0; i = e->sy[i].next)
        if (enc_push_id(e, e->sy[i].id)) return -1;
    return 0;
}

/* The pushdown automaton (see grammar_impl.h for nodes and configs), and a sequence's matcher.
 *
 * A config is closed: every node in it has a byte set on top (or is the accept or sentinel
 * node). Closing a node expands the rule reference on its top into the rule's alternatives,
 * each pushed over the rest of the frame; a reference in last place pushes nothing (the frame
 * it would return to is empty), so right recursion, which is how x* is written, runs in
 * constant depth; a frame that ends pops to its parent. Interned nodes make "already closed in
 * this step" one array lookup, which also ends the loops that nullable repetitions would make.
 *
 * Each config remembers its step on every byte, so after warm-up a token's check is one table
 * lookup per byte. A space keeps what it learned; past CSPACE_MAX_CONFIGS configs or
 * CSPACE_MAX_ITEMS items (a sequence wandering through new states), or half CSPACE_MAX_NODES
 * nodes, its owner compacts it between steps: the configs and their steps are forgotten and
 * relearned, and only the nodes the kept config stands on stay.
 *
 * Stacks are a tree, not a graph: a grammar whose alternatives match the same bytes in b ways at
 * each of k nested levels makes b^k stacks. So the work is bounded instead (cspace_budget): each
 * node closed and each item stepped is a unit, an operation past its owner's units fails with
 * CS_OVER, and so does a space past CSPACE_MAX_NODES nodes. Every 4096 units the owner's stop
 * flag is read, so a request whose client left stops inside a step. */
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_impl.h"
#include "util/alloc.h"
#include "util/err.h"

#define CSPACE_MAX_CONFIGS 8192
#define CSPACE_MAX_ITEMS   (1 << 20)
#define CSPACE_MAX_NODES   (1 << 18)
#define STOP_EVERY         4096 /* units between reads of the stop flag */

struct cspace {
    const grammar *g;
    /* nodes: (pos, parent), interned by an open-addressed table of ids */
    int32_t *pos, *parent;
    int n_nodes, kept_nodes; /* kept_nodes: after the last forgetting */
    size_t cap_pos, cap_parent;
    int32_t *node_hash;
    size_t node_slots;
    /* configs: items[start[c] .. start[c] + len[c]), interned likewise; trans[c * 256 + b] */
    int32_t *start, *len, *items, *trans;
    int n_cfg;
    size_t cap_start, cap_len, cap_trans, n_items, cap_items;
    int32_t *cfg_hash;
    size_t cfg_slots;
    /* scratch of one step */
    uint32_t *seen; /* [node] epoch of the step that closed it */
    size_t cap_seen;
    uint32_t epoch;
    int32_t *out, *work;
    size_t n_out, cap_out, cap_work;
    /* the bound on one operation (cspace_budget) and why the last one failed */
    long budget, until_stop;
    const atomic_bool *stop;
    enum cspace_fault fault;
};

/* Spends n units of the budget; -1 (CS_OVER, or CS_STOPPED when the owner's flag is up) when
 * it runs out. */
static int charge(cspace *cs, long n) {
    if ((cs->until_stop -= n) <= 0) {
        cs->until_stop = STOP_EVERY;
        if (cs->stop && atomic_load_explicit(cs->stop, memory_order_relaxed)) {
            cs->fault = CS_STOPPED;
            return -1;
        }
    }
    if ((cs->budget -= n) >= 0) return 0;
    cs->fault = CS_OVER;
    return -1;
}

void cspace_budget(cspace *cs, long units, const atomic_bool *stop) {
    cs->budget = units, cs->until_stop = STOP_EVERY, cs->stop = stop, cs->fault = CS_OK;
}

enum cspace_fault cspace_fault(const cspace *cs) { return cs->fault; }

long cspace_budget_left(const cspace *cs) { return cs->budget > 0 ? cs->budget : 0; }

static uint64_t mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

/* Resizes an open-addressed table of ids to twice the slots, rehashing with hash_of. */
static int rehash(cspace *cs, int32_t **table, size_t *slots, int count, uint64_t (*hash_of)(const cspace *, int32_t)) {
    size_t n = *slots ? *slots * 2 : 1024;
    int32_t *t = mem_array(n, sizeof *t, "a grammar's tables", NULL);
    if (!t) return -1;
    memset(t, 0xff, n * sizeof *t);
    for (int32_t id = 0; id < count; id++) {
        size_t i = hash_of(cs, id) & (n - 1);
        while (t[i] >= 0) i = (i + 1) & (n - 1);
        t[i] = id;
    }
    free(*table);
    *table = t;
    *slots = n;
    return 0;
}

static uint64_t node_hash_of(const cspace *cs, int32_t id) {
    return mix((uint64_t)(uint32_t)cs->pos[id] << 32 | (uint32_t)cs->parent[id]);
}

static uint64_t cfg_hash_of(const cspace *cs, int32_t c) {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int32_t i = 0; i < cs->len[c]; i++) h = mix(h ^ (uint32_t)cs->items[cs->start[c] + i]);
    return h;
}

/* The node (pos, parent), interned; -1 when out of memory or past CSPACE_MAX_NODES (CS_OVER). */
static int32_t node(cspace *cs, int32_t pos, int32_t parent) {
    uint64_t h = mix((uint64_t)(uint32_t)pos << 32 | (uint32_t)parent);
    size_t mask = cs->node_slots - 1, i = h & mask;
    for (; cs->node_hash[i] >= 0; i = (i + 1) & mask)
        if (cs->pos[cs->node_hash[i]] == pos && cs->parent[cs->node_hash[i]] == parent) return cs->node_hash[i];
    int32_t id = cs->n_nodes;
    if (id >= CSPACE_MAX_NODES) {
        cs->fault = CS_OVER;
        return -1;
    }
    if (ARRAY_RESERVE(cs->pos, cs->cap_pos, (size_t)id + 1, "grammar stacks", NULL) ||
        ARRAY_RESERVE(cs->parent, cs->cap_parent, (size_t)id + 1, "grammar stacks", NULL) ||
        ARRAY_RESERVE(cs->seen, cs->cap_seen, (size_t)id + 1, "grammar stacks", NULL))
        return -1;
    cs->pos[id] = pos, cs->parent[id] = parent, cs->seen[id] = 0;
    cs->n_nodes++;
    cs->node_hash[i] = id;
    if ((size_t)cs->n_nodes * 2 > cs->node_slots &&
        rehash(cs, &cs->node_hash, &cs->node_slots, cs->n_nodes, node_hash_of))
        return -1;
    return id;
}

/* The stack that goes on at pos over parent: parent itself when pos ends its alternative. */
static int32_t resume(cspace *cs, int32_t pos, int32_t parent) {
    return cs->g->el[pos].kind == GE_END ? parent : node(cs, pos, parent);
}

static int out_push(int32_t **arr, size_t *cap, size_t n, int32_t v) {
    if (mem_reserve(arr, cap, n + 1, sizeof **arr, "a grammar step", NULL)) return -1;
    (*arr)[n] = v;
    return 0;
}

/* Closes node n0 into cs->out (each node once per epoch). */
static int close_node(cspace *cs, int32_t n0) {
    size_t sp = 0;
    if (n0 < 0 || out_push(&cs->work, &cs->cap_work, sp++, n0)) return -1;
    while (sp) {
        int32_t n = cs->work[--sp];
        if (cs->seen[n] == cs->epoch) continue;
        if (charge(cs, 1)) return -1;
        cs->seen[n] = cs->epoch;
        const gelem *e = n > NODE_SENTINEL ? &cs->g->el[cs->pos[n]] : NULL;
        if (!e || e->kind == GE_TERM) {
            if (out_push(&cs->out, &cs->cap_out, cs->n_out++, n)) return -1;
            continue;
        }
        int32_t ret = resume(cs, cs->pos[n] + 1, cs->parent[n]); /* e is a reference */
        if (ret < 0) return -1;
        int32_t r = e->ref;
        for (int a = 0; a < cs->g->rule_nalt[r]; a++) {
            int32_t m = resume(cs, cs->g->alt_start[cs->g->rule_alt0[r] + a], ret);
            if (m < 0 || out_push(&cs->work, &cs->cap_work, sp++, m)) return -1;
        }
    }
    return 0;
}

static int by_id(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* cs->out (sorted) as a config, interned; -1 when out of memory. */
static int32_t intern_out(cspace *cs) {
    if (!cs->n_out) return CFG_DEAD;
    qsort(cs->out, cs->n_out, sizeof *cs->out, by_id);
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < cs->n_out; i++) h = mix(h ^ (uint32_t)cs->out[i]);
    size_t mask = cs->cfg_slots - 1, i = h & mask;
    for (; cs->cfg_hash[i] >= 0; i = (i + 1) & mask) {
        int32_t c = cs->cfg_hash[i];
        if ((size_t)cs->len[c] == cs->n_out && !memcmp(cs->items + cs->start[c], cs->out, cs->n_out * sizeof *cs->out))
            return c;
    }
    int32_t c = cs->n_cfg;
    if (ARRAY_RESERVE(cs->start, cs->cap_start, (size_t)c + 1, "grammar states", NULL) ||
        ARRAY_RESERVE(cs->len, cs->cap_len, (size_t)c + 1, "grammar states", NULL) ||
        ARRAY_RESERVE(cs->items, cs->cap_items, cs->n_items + cs->n_out, "grammar states", NULL) ||
        ARRAY_RESERVE(cs->trans, cs->cap_trans, ((size_t)c + 1) * 256, "grammar states", NULL))
        return -1;
    memset(cs->trans + (size_t)c * 256, 0xff, 256 * sizeof *cs->trans);
    cs->start[c] = (int32_t)cs->n_items, cs->len[c] = (int32_t)cs->n_out;
    memcpy(cs->items + cs->n_items, cs->out, cs->n_out * sizeof *cs->out);
    cs->n_items += cs->n_out;
    cs->n_cfg++;
    cs->cfg_hash[i] = c;
    if ((size_t)cs->n_cfg * 2 > cs->cfg_slots && rehash(cs, &cs->cfg_hash, &cs->cfg_slots, cs->n_cfg, cfg_hash_of))
        return -1;
    return c;
}

/* Drops every config but the dead one. */
static void forget_configs(cspace *cs) {
    cs->n_cfg = 1;
    cs->n_items = 0;
    memset(cs->cfg_hash, 0xff, cs->cfg_slots * sizeof *cs->cfg_hash);
    cs->cfg_hash[cfg_hash_of(cs, CFG_DEAD) & (cs->cfg_slots - 1)] = CFG_DEAD;
    memset(cs->trans, 0xff, 256 * sizeof *cs->trans);
}

cspace *cspace_new(const grammar *g, loom_err *err) {
    cspace *cs = mem_zalloc(1, sizeof *cs, "a grammar's states", err);
    if (!cs) return NULL;
    cs->g = g;
    cs->epoch = 1;
    cspace_budget(cs, LONG_MAX, NULL);
    /* node 0 (accept) and 1 (sentinel); config 0 (dead, no nodes) */
    if (rehash(cs, &cs->node_hash, &cs->node_slots, 0, node_hash_of) ||
        rehash(cs, &cs->cfg_hash, &cs->cfg_slots, 0, cfg_hash_of) || node(cs, -1, -1) != NODE_ACCEPT ||
        node(cs, -2, -2) != NODE_SENTINEL || ARRAY_RESERVE(cs->start, cs->cap_start, 1, "grammar states", NULL) ||
        ARRAY_RESERVE(cs->len, cs->cap_len, 1, "grammar states", NULL) ||
        ARRAY_RESERVE(cs->trans, cs->cap_trans, 256, "grammar states", NULL)) {
        cspace_free(cs);
        loom_errf(err, "cannot allocate a grammar's states");
        return NULL;
    }
    cs->start[0] = cs->len[0] = 0;
    cs->n_cfg = 1;
    forget_configs(cs);
    return cs;
}

size_t cspace_bytes(const cspace *cs) {
    return sizeof *cs +
           (cs->cap_pos + cs->cap_parent + cs->node_slots + cs->cfg_slots + cs->cap_start + cs->cap_len +
            cs->cap_items + cs->cap_trans + cs->cap_out + cs->cap_work) *
               sizeof(int32_t) +
           cs->cap_seen * sizeof *cs->seen;
}

void cspace_free(cspace *cs) {
    if (!cs) return;
    free(cs->pos), free(cs->parent), free(cs->node_hash), free(cs->seen);
    free(cs->start), free(cs->len), free(cs->items), free(cs->trans), free(cs->cfg_hash);
    free(cs->out), free(cs->work);
    free(cs);
}

static void begin(cspace *cs) {
    cs->n_out = 0;
    if (++cs->epoch == 0) { /* wrapped: no node may look closed in this step */
        memset(cs->seen, 0, (size_t)cs->n_nodes * sizeof *cs->seen);
        cs->epoch = 1;
    }
}

/* The config of the root's alternatives over `bottom`. */
static int32_t rule_config(cspace *cs, int rule, int32_t bottom) {
    begin(cs);
    const grammar *g = cs->g;
    for (int a = 0; a < g->rule_nalt[rule]; a++)
        if (close_node(cs, resume(cs, g->alt_start[g->rule_alt0[rule] + a], bottom))) return -1;
    return intern_out(cs);
}

int32_t cspace_start(cspace *cs) { return rule_config(cs, cs->g->root, NODE_ACCEPT); }

int32_t cspace_local(cspace *cs, int32_t pos, int32_t ret) {
    begin(cs);
    int32_t below = ret >= 0 ? node(cs, ret, NODE_SENTINEL) : NODE_SENTINEL;
    if (below < 0 || close_node(cs, node(cs, pos, below))) return -1;
    return intern_out(cs);
}

int32_t cspace_single(cspace *cs, int32_t n) {
    begin(cs);
    if (close_node(cs, n)) return -1;
    return intern_out(cs);
}

int32_t cspace_step(cspace *cs, int32_t cfg, uint8_t b) {
    int32_t *t = &cs->trans[(size_t)cfg * 256 + b];
    if (charge(cs, 1)) return -1; /* a step learned before is a unit too: masks walk a vocabulary */
    if (*t >= 0) return *t;
    begin(cs);
    if (charge(cs, cs->len[cfg])) return -1;
    for (int32_t i = 0; i < cs->len[cfg]; i++) {
        int32_t n = cs->items[cs->start[cfg] + i];
        if (n <= NODE_SENTINEL || !gelem_has(&cs->g->el[cs->pos[n]], b)) continue;
        if (close_node(cs, resume(cs, cs->pos[n] + 1, cs->parent[n]))) return -1;
    }
    int32_t next = intern_out(cs);
    if (next >= 0) cs->trans[(size_t)cfg * 256 + b] = next;
    return next;
}

/* Keeps only the nodes under cs->out's (the accept and sentinel nodes first, as ever), and maps
 * cs->out to their new ids; -1 when out of memory. */
static int forget_nodes(cspace *cs) {
    int32_t *old_pos = cs->pos, *old_parent = cs->parent, n_old = cs->n_nodes;
    int32_t *map = mem_array((size_t)n_old, sizeof *map, "grammar stacks", NULL);
    if (!map) return -1;
    memset(map, 0xff, (size_t)n_old * sizeof *map);
    free(cs->node_hash), free(cs->seen);
    cs->pos = cs->parent = cs->node_hash = NULL, cs->seen = NULL;
    cs->cap_pos = cs->cap_parent = cs->cap_seen = cs->node_slots = 0, cs->n_nodes = 0;
    int rc = rehash(cs, &cs->node_hash, &cs->node_slots, 0, node_hash_of) || node(cs, -1, -1) != NODE_ACCEPT ||
                     node(cs, -2, -2) != NODE_SENTINEL
                 ? -1
                 : 0;
    map[NODE_ACCEPT] = NODE_ACCEPT, map[NODE_SENTINEL] = NODE_SENTINEL;
    for (size_t i = 0; !rc && i < cs->n_out; i++) {
        size_t sp = 0; /* the stack from the item down to its first node already kept */
        for (int32_t n = cs->out[i]; !rc && map[n] < 0; n = old_parent[n])
            rc = out_push(&cs->work, &cs->cap_work, sp++, n);
        while (!rc && sp) {
            int32_t n = cs->work[--sp];
            if ((map[n] = node(cs, old_pos[n], map[old_parent[n]])) < 0) rc = -1;
        }
        if (!rc) cs->out[i] = map[cs->out[i]];
    }
    free(old_pos), free(old_parent), free(map);
    return rc;
}

int32_t cspace_compact(cspace *cs, int32_t keep) {
    /* twice what the last forgetting kept, too: a config standing on most of them would
     * otherwise be rebuilt at every step */
    bool nodes = cs->n_nodes > CSPACE_MAX_NODES / 2 && cs->n_nodes > 2 * cs->kept_nodes;
    if (cs->n_cfg <= CSPACE_MAX_CONFIGS && cs->n_items <= CSPACE_MAX_ITEMS && !nodes) return keep;
    begin(cs);
    for (int32_t i = 0; i < cs->len[keep]; i++)
        if (out_push(&cs->out, &cs->cap_out, cs->n_out++, cs->items[cs->start[keep] + i])) return -1;
    if (nodes && forget_nodes(cs)) return -1;
    if (nodes) cs->kept_nodes = cs->n_nodes;
    forget_configs(cs);
    return intern_out(cs);
}

const int32_t *cspace_nodes(const cspace *cs, int32_t cfg, int *n) {
    *n = cs->len[cfg];
    return *n ? cs->items + cs->start[cfg] : NULL; /* a config of no items may precede any storage */
}

int32_t cspace_node_pos(const cspace *cs, int32_t n) { return n > NODE_SENTINEL ? cs->pos[n] : -1; }

int32_t cspace_node_parent(const cspace *cs, int32_t n) { return cs->parent[n]; }

int32_t cspace_walk_bytes(cspace *cs, int32_t cfg, const uint8_t *b, int n) {
    for (int i = 0; i < n && cfg > CFG_DEAD; i++) cfg = cspace_step(cs, cfg, b[i]);
    return cfg;
}

int32_t cspace_walk(cspace *cs, int32_t cfg, const grammar_vocab *v, int32_t id) {
    return v->len[id] > 0 ? cspace_walk_bytes(cs, cfg, v->bytes + v->off[id], v->len[id]) : CFG_DEAD;
}

/* ---- a sequence's matcher ---- */

#define MASK_CACHE 4 /* the masks of a matcher's recent configs (a JSON string repeats one) */

struct grammar_matcher {
    grammar *g;
    cspace *cs;
    int32_t cfg;
    bool eos_taken;
    const atomic_bool *stop;
    bool failed;             /* the last operation stopped short of deciding: */
    enum cspace_fault fault; /* why */
    struct {
        int32_t cfg; /* -1: none */
        uint32_t *mask;
    } cache[MASK_CACHE];
    int next_slot;
};

grammar_matcher *grammar_matcher_new(grammar *g, loom_err *err) {
    grammar_matcher *m = mem_zalloc(1, sizeof *m, "a grammar matcher", err);
    if (!m) return NULL;
    m->g = grammar_ref(g);
    for (int i = 0; i < MASK_CACHE; i++) m->cache[i].cfg = -1;
    if (!(m->cs = cspace_new(g, err)) || (m->cfg = cspace_start(m->cs)) < 0) {
        if (m->cs) loom_errf(err, "cannot allocate a grammar's states");
        grammar_matcher_free(m);
        return NULL;
    }
    return m;
}

void grammar_matcher_free(grammar_matcher *m) {
    if (!m) return;
    cspace_free(m->cs);
    for (int i = 0; i < MASK_CACHE; i++) free(m->cache[i].mask);
    grammar_unref(m->g);
    free(m);
}

void grammar_matcher_stop_on(grammar_matcher *m, const atomic_bool *stop) { m->stop = stop; }

size_t grammar_matcher_bytes(const grammar_matcher *m) {
    size_t bytes = sizeof *m + cspace_bytes(m->cs);
    for (int i = 0; i < MASK_CACHE; i++) bytes += m->cache[i].mask ? (size_t)m->g->vocab->words * sizeof(uint32_t) : 0;
    return bytes;
}

/* An operation's error from the fault that ended it. */
static int matcher_fail(const grammar_vocab *vocab, enum cspace_fault fault, loom_err *err) {
    if (fault == CS_STOPPED) return loom_errf(err, "grammar: stopped (the request was cancelled)");
    if (fault == CS_OVER)
        return loom_errf(err,
                         "grammar: too ambiguous here: one token's matching went past its bound of work (%ld "
                         "units a token, %ld a mask and as many for its positions, %d stacks): the grammar's "
                         "alternatives match the same text in too many ways, as overlapping anyOf branches or GBNF "
                         "alternatives with a common start can",
                         GRAMMAR_STEP_UNITS, grammar_mask_units(vocab), CSPACE_MAX_NODES);
    return loom_errf(err, "grammar: cannot allocate a grammar's states");
}

static bool has_accept(const grammar_matcher *m, int32_t cfg) {
    int n;
    const int32_t *nodes = cspace_nodes(m->cs, cfg, &n);
    return n && nodes[0] == NODE_ACCEPT; /* sorted: the accept node comes first */
}

/* The config after token id (CFG_DEAD: not allowed; -1: failed, cspace_fault says why), within
 * one operation's budget. */
static int32_t after(grammar_matcher *m, int32_t id) {
    cspace_budget(m->cs, GRAMMAR_STEP_UNITS, m->stop);
    int32_t next = cspace_walk(m->cs, m->cfg, m->g->vocab, id);
    if ((m->failed = next < 0)) m->fault = cspace_fault(m->cs);
    return next;
}

/* The operation stopped short (fault: why): recorded for grammar_matcher_fault, and its error. */
static int stopped(grammar_matcher *m, enum cspace_fault fault, loom_err *err) {
    m->failed = true, m->fault = fault;
    return matcher_fail(m->g->vocab, fault, err);
}

int grammar_matcher_fault(const grammar_matcher *m, loom_err *err) {
    return m->failed ? matcher_fail(m->g->vocab, m->fault, err) : 0;
}

bool grammar_matcher_allows(grammar_matcher *m, int32_t id) {
    const grammar_vocab *v = m->g->vocab;
    m->failed = false;
    if (id < 0 || id >= v->n || m->eos_taken) return false;
    if (v->is_eos[id]) return has_accept(m, m->cfg);
    return after(m, id) > CFG_DEAD;
}

int grammar_matcher_accept(grammar_matcher *m, int32_t id, loom_err *err) {
    const grammar_vocab *v = m->g->vocab;
    m->failed = false;
    if (id < 0 || id >= v->n || m->eos_taken) return loom_errf(err, "token %d does not follow the grammar", id);
    if (v->is_eos[id]) {
        if (!has_accept(m, m->cfg)) return loom_errf(err, "token %d does not follow the grammar", id);
        m->eos_taken = true;
        return 0;
    }
    int32_t next = after(m, id);
    if (next < 0) return matcher_fail(m->g->vocab, m->fault, err);
    if (next == CFG_DEAD) return loom_errf(err, "token %d does not follow the grammar", id);
    int32_t kept = cspace_compact(m->cs, next);
    if (kept < 0) return stopped(m, CS_OK, err);
    if (kept != next)
        for (int i = 0; i < MASK_CACHE; i++) m->cache[i].cfg = -1; /* the ids are renumbered */
    m->cfg = kept;
    return 0;
}

bool grammar_matcher_done(const grammar_matcher *m) {
    int n;
    const int32_t *nodes = cspace_nodes(m->cs, m->cfg, &n);
    return m->eos_taken || (n == 1 && nodes[0] == NODE_ACCEPT);
}

/* Adds to allowed what node n of the current config allows: its position's mask, and the
 * uncertain tokens that the stack below takes the rest of. 0, or -1 with the fault in *fault. */
static int node_mask(grammar_matcher *m, int32_t n, uint32_t *allowed, long *mask_units, enum cspace_fault *fault) {
    const grammar_vocab *v = m->g->vocab;
    if (n == NODE_ACCEPT) {
        for (int e = 0; e < v->n_eos; e++) allowed[v->eos[e] >> 5] |= 1u << (v->eos[e] & 31);
        return 0;
    }
    int32_t up = cspace_node_parent(m->cs, n), ret = cspace_node_pos(m->cs, up);
    const pos_mask *pm;
    pos_mask *owned;
    if (grammar_pos_mask(m->g, cspace_node_pos(m->cs, n), ret, mask_units, m->stop, &pm, &owned, fault)) return -1;
    for (int w = 0; w < v->words; w++) allowed[w] |= pm->accept[w];
    /* an uncertain token is allowed when, at an offset where its frame may end, the stack the
     * frame returns to takes the rest of its bytes */
    int32_t below = pm->n_uncertain ? cspace_single(m->cs, ret >= 0 ? cspace_node_parent(m->cs, up) : up) : CFG_DEAD;
    for (int bucket = 0; bucket <= 256 && below > CFG_DEAD; bucket++) {
        int32_t from = bucket < 256 ? cspace_step(m->cs, below, (uint8_t)bucket) : below, skip = bucket < 256;
        for (int32_t i = pm->bucket[bucket]; i < pm->bucket[bucket + 1] && from > CFG_DEAD; i++) {
            const uncertain_token *u = &pm->uncertain[i];
            int32_t t = u->id;
            if (allowed[t >> 5] >> (t & 31) & 1) continue;
            const uint8_t *b = v->bytes + v->off[t];
            for (int j = 0; j < u->n_pops; j++) {
                int at = pm->pops[u->pops + j] + skip;
                int32_t to = cspace_walk_bytes(m->cs, from, b + at, v->len[t] - at);
                if (to < 0) from = -1;
                if (to > CFG_DEAD) {
                    allowed[t >> 5] |= 1u << (t & 31);
                    break;
                }
            }
        }
        if (from < 0) below = -1;
    }
    pos_mask_free(owned);
    if (below >= 0) return 0;
    *fault = cspace_fault(m->cs);
    return -1;
}

int grammar_matcher_mask(grammar_matcher *m, uint32_t *allowed, loom_err *err) {
    const grammar_vocab *v = m->g->vocab;
    size_t bytes = (size_t)v->words * sizeof *allowed;
    for (int i = 0; i < MASK_CACHE; i++)
        if (m->cache[i].cfg == m->cfg) {
            memcpy(allowed, m->cache[i].mask, bytes);
            return 0;
        }
    memset(allowed, 0, bytes);
    m->failed = false;
    if (m->eos_taken) return 0;
    int32_t cfg = m->cfg;
    int n;
    const int32_t *nodes = cspace_nodes(m->cs, cfg, &n);
    /* copy: the checks below may grow the config arrays */
    int32_t local[64], *list = n <= 64 ? local : mem_array((size_t)n, sizeof *list, "a grammar mask", NULL);
    if (!list) return stopped(m, CS_OK, err);
    if (n) memcpy(list, nodes, (size_t)n * sizeof *list);
    /* the uncertain tokens' checks scale with the vocabulary, as the masks' walks do */
    cspace_budget(m->cs, grammar_mask_units(v), m->stop);
    enum cspace_fault fault = CS_OK;
    long mask_units = grammar_mask_units(v);
    int rc = 0;
    for (int k = 0; k < n && !rc; k++) rc = node_mask(m, list[k], allowed, &mask_units, &fault);
    if (list != local) free(list);
    if (rc) return stopped(m, fault, err);
    int slot = m->next_slot;
    m->next_slot = (slot + 1) % MASK_CACHE;
    if (!m->cache[slot].mask && !(m->cache[slot].mask = mem_alloc(bytes, "a grammar mask", NULL))) return 0;
    memcpy(m->cache[slot].mask, allowed, bytes);
    m->cache[slot].cfg = cfg;
    return 0;
}

/* The grammar layer's internals, shared by gbnf.c (the compiler), matcher.c (the pushdown
 * automaton) and mask.c (vocabulary tries and token masks).
 *
 * A compiled grammar is a list of rules over bytes. Each rule is a list of alternatives; each
 * alternative a run of elements in `el` ending with GE_END: a byte set (GE_TERM) or another
 * rule (GE_REF). A position is an index into `el`.
 *
 * A stack of the automaton is a node: (pos, parent), the next element to match in the current
 * frame and the stack to go on with when that frame ends. Nodes are interned, so equal stacks
 * are equal ids and stacks share their tails. Node 0 is the empty stack (the grammar has ended:
 * accept); node 1 is a sentinel bottom that stands for "whatever the caller's stack is", which
 * mask.c uses to compute what a position allows on its own. A configuration is a sorted set of
 * nodes whose tops are byte sets (or 0 / 1): the automaton's state after some bytes. Configs are
 * interned too, and each remembers its step on every byte, so a config space becomes a DFA as it
 * is explored (config 0 is the empty set: no way on). */
#ifndef LOOM_GRAMMAR_IMPL_H
#define LOOM_GRAMMAR_IMPL_H
#include <pthread.h>
#include <stdatomic.h>

#include "grammar/grammar.h"

enum { GE_END, GE_TERM, GE_REF };

typedef struct gelem {
    uint8_t kind;
    int32_t ref;      /* GE_REF: the rule */
    uint64_t bits[4]; /* GE_TERM: the bytes it matches */
} gelem;

static inline bool gelem_has(const gelem *e, uint8_t b) { return e->bits[b >> 6] >> (b & 63) & 1; }

#define NODE_ACCEPT   0
#define NODE_SENTINEL 1
#define CFG_DEAD      0

typedef struct cspace cspace;

/* A stack top's mask on its own (mask.c): the top two frames, a position and the position its
 * frame returns to (two, because the innermost frame is often a repetition that may end at any
 * byte, like a string's characters, where its caller, the string, decides). Tokens accepted
 * whatever lies below those frames, and those that may leave them with bytes to spare, which
 * need the real stack: each with the offsets at which the frames may end, the rest of its bytes
 * then the stack below's. */
typedef struct uncertain_token {
    int32_t id;
    int32_t pops, n_pops; /* pos_mask.pops[pops .. pops + n_pops) */
} uncertain_token;

typedef struct pos_mask {
    uint32_t *accept; /* [words] */
    /* the uncertain tokens with one pop offset, bucketed by the byte after it (a caller that
     * cannot take that byte rules out the bucket at once: after optional whitespace, every token
     * that starts with a space is uncertain), then those with several (bucket 256) */
    uncertain_token *uncertain;
    int n_uncertain;
    int32_t bucket[258]; /* uncertain[bucket[b] .. bucket[b + 1]) */
    int32_t *pops;
} pos_mask;

struct grammar_vocab {
    int n, words; /* tokens; 32-bit words of a mask */
    int32_t *off; /* [n + 1] token i's bytes are bytes[off[i] .. off[i] + len[i]) */
    int *len;     /* -1: never produced by a grammar */
    uint8_t *bytes;
    bool *is_eos; /* [n] */
    int32_t *eos; /* the EOS ids */
    int n_eos;
    /* trie over the tokens with bytes, sorted by their bytes; node 0 is the root */
    int32_t *sorted; /* token ids in byte order */
    struct trie_node {
        int32_t child0, n_child; /* children are nodes child0 .. child0 + n_child - 1 */
        int32_t tok_lo, tok_hi;  /* sorted[tok_lo .. tok_hi): tokens ending here */
        int32_t sub_hi;          /* sorted[tok_lo .. sub_hi): every token at or below */
        uint8_t byte;            /* the byte that leads here */
    } * trie;
    int n_trie;
};

struct grammar {
    gelem *el;
    int n_el;
    int32_t *alt_start; /* each alternative's first position */
    int32_t *rule_alt0, *rule_nalt;
    char **rule_name;
    int n_rules, root;
    const grammar_vocab *vocab;
    int refs;
    pthread_mutex_t lock; /* guards the masks and local */
    struct pm_slot {
        int64_t key; /* -1: empty; else (pos << 32) | (return position + 1) */
        pos_mask *pm;
    } * pm; /* computed on first use */
    size_t pm_slots, n_pm;
    size_t mask_bytes; /* what the masks kept hold */
    cspace *local;     /* the config space mask.c computes masks in */
};

cspace *cspace_new(const grammar *g, loom_err *err);
void cspace_free(cspace *cs);
size_t cspace_bytes(const cspace *cs); /* what its tables hold */
/* Why the last operation that returned -1 failed: past its units or the space's nodes
 * (CS_OVER), stopped by the owner's flag (CS_STOPPED), or, with CS_OK, out of memory. */
enum cspace_fault { CS_OK, CS_OVER, CS_STOPPED };
/* Bounds the operations from now to the next call: `units` of work in all (LONG_MAX: none), and
 * stop, when not NULL, read now and then to end them early. Clears the fault. */
void cspace_budget(cspace *cs, long units, const atomic_bool *stop);
long cspace_budget_left(const cspace *cs);
enum cspace_fault cspace_fault(const cspace *cs);
/* The start config (the root rule's alternatives over the empty stack), and a position's config
 * over a frame returning to position ret (-1: none) over the sentinel. -1 when out of memory. */
int32_t cspace_start(cspace *cs);
int32_t cspace_local(cspace *cs, int32_t pos, int32_t ret);
/* The config of one node; -1 when out of memory. */
int32_t cspace_single(cspace *cs, int32_t node);
/* The config after byte b (CFG_DEAD: none); -1 when out of memory. */
int32_t cspace_step(cspace *cs, int32_t cfg, uint8_t b);
/* When the space holds too many configs, items or nodes, forgets all but keep and the nodes it
 * stands on, and returns keep's new id (keep itself otherwise; -1 when out of memory). Every
 * other config id, and node ids when nodes were forgotten, go stale. */
int32_t cspace_compact(cspace *cs, int32_t keep);
/* A config's nodes, and a node's position (-1 for the accept and sentinel nodes). */
const int32_t *cspace_nodes(const cspace *cs, int32_t cfg, int *n);
int32_t cspace_node_pos(const cspace *cs, int32_t node);
/* The config after bytes b[0..n), or after the bytes of token id (CFG_DEAD: not allowed); -1
 * when out of memory. */
int32_t cspace_walk_bytes(cspace *cs, int32_t cfg, const uint8_t *b, int n);
int32_t cspace_walk(cspace *cs, int32_t cfg, const grammar_vocab *v, int32_t id);
/* A node's parent (the stack its frame returns to). */
int32_t cspace_node_parent(const cspace *cs, int32_t node);

/* The units of a token's check or step, and of a sequence's mask: for its own stacks, and again
 * for the positions' masks it computes (mask.c), four walks of the vocabulary's trie and
 * 262,144 more. Legitimate grammars stay far below: a JSON Schema's new position over GPT-2's
 * 50,257 tokens took 31,000 units beyond its walk. */
#define GRAMMAR_STEP_UNITS (1L << 16)
long grammar_mask_units(const grammar_vocab *v);
/* the bytes of the masks a grammar keeps */
#define GRAMMAR_MASK_BYTES ((size_t)64 << 20)

/* mask.c: the mask of position pos in a frame that returns to position ret (-1: to the
 * sentinel), computed on first use within *units of work, less what it took (stop read now and
 * then). Kept with the grammar while its masks hold under GRAMMAR_MASK_BYTES; past that it is
 * the caller's, in *owned too, to free with pos_mask_free after use. 0 with *out, or -1 with
 * *fault (CS_OK: out of memory). */
int grammar_pos_mask(grammar *g, int32_t pos, int32_t ret, long *units, const atomic_bool *stop, const pos_mask **out,
                     pos_mask **owned, enum cspace_fault *fault);
void pos_mask_free(pos_mask *pm);
void grammar_masks_free(grammar *g);

#endif

/* Hybrid recurrent models (the qwen3_5 golden: two Gated DeltaNet layers and one gated attention
 * layer; granitemoehybrid: two Mamba-2 layers and one attention layer; nemotron_h: two Mamba-2
 * layers, one attention and two MLP layers; mamba2: Mamba-2 alone), beyond test_golden's
 * comparison with transformers:
 * - chunked prefill: the recurrent kernels run position by position, carrying the state from
 *   pass to pass, so a prompt's logits are the same bits in any chunking whose passes take the
 *   same linear kernels: passes of 1, 5 and 16 tokens (the GEMV of passes of up to 16 rows,
 *   DESIGN 4.4), and passes of 37 and 36 against one pass of 73 (the GEMM). Between the two
 *   kernels the linears sum in other orders, and the logits move within the goldens' 1e-4;
 * - a sequence's state restarts at position 0: a slot reused after a reset gives a prompt's
 *   logits as a fresh engine does, and two sequences sharing passes keep their states apart
 *   (the same bits as each alone);
 * - prefix caching: a prompt run in passes of 16 keeps a snapshot of the state at each 16
 *   positions (one block); a later prompt sharing its first k blocks, for every k, resumes from
 *   the k-th snapshot and gives the bits a cold run of it gives, and a prefix that ends where
 *   no snapshot is kept resumes from the one before; with the fewest slots, a conversation
 *   running on reuses its own stale snapshots, not another's;
 * - what would need the state at another position is refused with the reason: speculative
 *   decoding, cutting a sequence back. */
#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "golden_util.h"

#define KERNELS_TOL 1e-4 /* the GEMV's logits against the GEMM's (golden_util.h's ATOL) */

static const char *name; /* the case being checked */
/* whether it has experts: their GEMMs take the rows routed to each, so their kernels, like the
 * linears', follow the pass's rows, and two chunkings of the GEMM's passes agree within
 * KERNELS_TOL, not in every bit */
static bool experts;

static loom_model *load(void) {
    char dir[900];
    golden_dir(dir, sizeof dir, name);
    loom_err err = {{0}};
    loom_model_options mo = {.path = dir, .dtype = "float32"};
    loom_model *m = loom_model_load(&mo, &err);
    CHECK(m, "%s: %s", name, err.msg);
    return m;
}

#define BS 16 /* the KV block, and the snapshot interval */

/* slots: snapshot slots (0: as many as the tests' passes take) */
static loom_engine *engine_slots(loom_model *m, bool prefix_caching, int slots) {
    loom_err err = {{0}};
    loom_engine_options eo = {.max_seqs = 2,
                              .max_ctx = GOLDEN_MAX_LEN,
                              .max_tokens = 2 * GOLDEN_MAX_LEN,
                              .all_logits = true,
                              .prefix_caching = prefix_caching,
                              .block_size = BS,
                              .state_snapshot_interval = BS,
                              .state_snapshots = slots ? slots : 8};
    loom_engine *e = loom_engine_new(m, &eo, &err);
    CHECK(e, "%s engine: %s", name, err.msg);
    return e;
}

static loom_engine *engine(loom_model *m, bool prefix_caching) { return engine_slots(m, prefix_caching, 0); }

/* Tokens ids[from..n) into slot `slot`, whose positions before `from` it holds, in passes of
 * `chunk` tokens; their logits into out (row i - from). */
static int run_tokens(loom_engine *e, const int32_t *ids, int from, int n, int slot, int chunk, int vocab, float *out) {
    int32_t pos[GOLDEN_MAX_LEN], seq[GOLDEN_MAX_LEN], rows[GOLDEN_MAX_LEN];
    for (int i = 0; i < n; i++) pos[i] = i, seq[i] = slot, rows[i] = i;
    loom_err err = {{0}};
    for (int t0 = from; t0 < n; t0 += chunk) {
        int k = n - t0 < chunk ? n - t0 : chunk;
        loom_batch b = {k, ids + t0, pos + t0, seq + t0, k, rows, NULL};
        const float *lg;
        if (loom_forward(e, &b, &lg, &err)) {
            CHECK(0, "%s: a pass of %d tokens: %s", name, k, err.msg);
            return -1;
        }
        memcpy(out + (size_t)(t0 - from) * vocab, lg, (size_t)k * vocab * sizeof *out);
    }
    return 0;
}

/* Sequence s of g into slot `slot` from position 0, in passes of `chunk` tokens; every
 * position's logits into out ([n, vocab]). */
static int run_chunked(loom_engine *e, const golden *g, int s, int slot, int chunk, float *out) {
    return run_tokens(e, g->ids[s], 0, g->n[s], slot, chunk, g->vocab, out);
}

static double worst_diff(const float *a, const float *b, size_t n) {
    double w = 0;
    for (size_t i = 0; i < n; i++) w = fmax(w, fabs((double)a[i] - b[i]));
    return w;
}

static void check_chunking(loom_model *m, const golden *g) {
    size_t n = (size_t)g->n[0] * g->vocab;
    float *whole = malloc(n * sizeof *whole), *gemv = malloc(n * sizeof *gemv), *part = malloc(n * sizeof *part);
    loom_engine *e = engine(m, false);
    if (!e || run_chunked(e, g, 0, 0, GOLDEN_MAX_LEN, whole)) goto done;
    /* passes over 16 rows, as the one pass: 37 and 36 of the 73 tokens */
    loom_engine_reset_seq(e, 0);
    if (run_chunked(e, g, 0, 0, (g->n[0] + 1) / 2, part)) goto done;
    double two = worst_diff(whole, part, n), d;
    CHECK(experts ? two <= KERNELS_TOL : two == 0, "%s: in two passes the logits move by %.3g from one pass", name,
          two);
    static const int chunks[] = {16, 5, 1};
    for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
        loom_engine_reset_seq(e, 0);
        if (run_chunked(e, g, 0, 0, chunks[c], c ? part : gemv)) break;
        d = worst_diff(gemv, part, n);
        CHECK(!c || d == 0, "%s: in passes of %d tokens the logits move by %.3g from passes of 16", name, chunks[c], d);
    }
    d = worst_diff(whole, gemv, n);
    CHECK(d <= KERNELS_TOL, "%s: passes of 16 (GEMV) against one pass (GEMM): %.3g", name, d);
    printf("%s: %d tokens in passes of 37+36 against one pass: max |logit diff| %.2e; in passes of 16, 5, 1: the "
           "same bits; those against one pass (their linears' other kernel): %.2e\n",
           name, g->n[0], two, d);
done:
    loom_engine_free(e);
    free(whole), free(gemv), free(part);
}

/* Slot 1 runs sequence 1 after sequence 0 filled it (and was reset); then both sequences share
 * passes of 16 tokens: each must give what it gives alone on a fresh engine, in passes of 16. */
static void check_states_apart(loom_model *m, const golden *g) {
    size_t n0 = (size_t)g->n[0] * g->vocab, n1 = (size_t)g->n[1] * g->vocab;
    float *alone0 = malloc(n0 * sizeof(float)), *alone1 = malloc(n1 * sizeof(float));
    float *both = malloc((n0 + n1) * sizeof(float)), *again = malloc(n1 * sizeof(float));
    loom_engine *e = engine(m, false), *f = engine(m, false);
    if (!e || !f || run_chunked(e, g, 0, 0, GOLDEN_PASS_TOKENS, alone0) ||
        run_chunked(f, g, 1, 0, GOLDEN_PASS_TOKENS, alone1))
        goto done;
    /* slot 1 first holds sequence 0, then is reset for sequence 1 */
    if (run_chunked(f, g, 0, 1, GOLDEN_PASS_TOKENS, both)) goto done;
    loom_engine_reset_seq(f, 1);
    if (run_chunked(f, g, 1, 1, GOLDEN_PASS_TOKENS, again)) goto done;
    CHECK(worst_diff(alone1, again, n1) == 0, "%s: a reused slot keeps some of its last sequence's state", name);
    /* both sequences in shared passes, each in its slot: golden_run's prefill (its last pass
     * holds both), then its decode steps of one token each */
    loom_engine_reset_seq(e, 0);
    golden whole = *g;
    whole.prefill[0] = g->n[0], whole.prefill[1] = g->n[1], whole.decode_steps = 0;
    loom_err err = {{0}};
    CHECK(!golden_run(e, &whole, both, &err), "%s: both sequences in shared passes: %s", name, err.msg);
    if (!err.msg[0]) {
        double d0 = worst_diff(alone0, both, n0), d1 = worst_diff(alone1, both + n0, n1);
        CHECK(d0 == 0 && d1 == 0, "%s: two sequences in shared passes move each other's logits by %.3g and %.3g", name,
              d0, d1);
        printf("%s: two sequences sharing passes give the bits each gives alone\n", name);
    }
done:
    loom_engine_free(e), loom_engine_free(f);
    free(alone0), free(alone1), free(both), free(again);
}

/* Sequence 0's prompt in passes of BS (a snapshot at each BS positions), then, for every k, a
 * prompt of its first k blocks and other tokens after them: it must match k blocks, resume from
 * the k-th snapshot, and give a cold run's bits; and a prompt sharing k blocks and half of the
 * next resumes from the k-th as well. */
static void check_prefix_cache(loom_model *m, const golden *g) {
    loom_engine *e = engine(m, true), *cold = engine(m, false);
    int n = g->n[0], vocab = g->vocab, extra = 10;
    float *out = malloc((size_t)GOLDEN_MAX_LEN * vocab * sizeof *out),
          *want = malloc((size_t)GOLDEN_MAX_LEN * vocab * sizeof *want);
    int32_t prompt[GOLDEN_MAX_LEN], blocks[GOLDEN_MAX_LEN / BS];
    loom_kv_stats kv;
    if (!e || !cold || run_chunked(e, g, 0, 0, BS, out)) goto done;
    loom_engine_get_kv_stats(e, &kv);
    CHECK(kv.prefix_caching && !kv.uncached, "%s: prefix caching is off: %s", name, kv.uncached);
    for (int k = 1; k * BS <= n; k++)
        for (int half = 0; half < 2; half++) {
            int shared = k * BS + half * BS / 2, len = shared + extra; /* then sequence 1's tokens */
            memcpy(prompt, g->ids[0], shared * sizeof *prompt);
            for (int i = shared; i < len; i++) prompt[i] = g->ids[1][(i - shared) % g->n[1]];
            int hit = loom_engine_match_prefix(e, prompt, len - 1, blocks);
            CHECK(hit == k, "%s: a prompt sharing %d positions matched %d blocks, not %d", name, shared, hit, k);
            loom_err err = {{0}};
            loom_engine_reset_seq(e, 1);
            loom_engine_reset_seq(cold, 0);
            if (loom_engine_attach_prefix(e, 1, blocks, hit, &err)) {
                CHECK(0, "%s: attaching %d blocks: %s", name, hit, err.msg);
                continue;
            }
            if (run_tokens(e, prompt, hit * BS, len, 1, BS, vocab, out) ||
                run_tokens(cold, prompt, 0, len, 0, BS, vocab, want))
                continue;
            double d = worst_diff(out, want + (size_t)hit * BS * vocab, (size_t)(len - hit * BS) * vocab);
            CHECK(d == 0, "%s: resumed after %d blocks, the logits move by %.3g from a cold run", name, hit, d);
        }
    printf("%s: a prompt sharing 1 to %d blocks (and half of the next) resumes from the last snapshot, the "
           "same bits as a cold run\n",
           name, n / BS);
done:
    loom_engine_free(e), loom_engine_free(cold);
    free(out), free(want);
}

/* With the fewest slots (two a sequence), a conversation that runs on takes the slots its own
 * earlier snapshots held, not another's: B's two blocks, run first on sequence 1, stay
 * resumable while A runs four blocks on sequence 0 a block a pass (least-recently-used alone
 * would hand A B's slots), and A resumes from its own last block. */
static void check_slots_kept(loom_model *m, const golden *g) {
    loom_engine *e = engine_slots(m, true, 4);
    int vocab = g->vocab, n = g->n[0];
    int32_t bconv[3 * BS], blocks[GOLDEN_MAX_LEN / BS];
    float *out = malloc((size_t)GOLDEN_MAX_LEN * vocab * sizeof *out);
    CHECK(n > 4 * BS, "%s: sequence 0 of %d tokens: the check needs over 4 blocks", name, n);
    if (!e || !out || n <= 4 * BS) goto done;
    for (int i = 0; i < 3 * BS; i++) bconv[i] = (g->ids[0][i] + 1) % vocab; /* shares no block with A */
    if (run_tokens(e, bconv, 0, 2 * BS, 1, 2 * BS, vocab, out) ||
        run_tokens(e, g->ids[0], 0, 4 * BS, 0, BS, vocab, out))
        goto done;
    int hit_b = loom_engine_match_prefix(e, bconv, 3 * BS - 1, blocks);
    int hit_a = loom_engine_match_prefix(e, g->ids[0], n - 1, blocks);
    CHECK(hit_b == 2, "%s: another conversation's snapshot was taken: B resumes after %d blocks, not 2", name, hit_b);
    CHECK(hit_a == 4, "%s: A resumes after %d blocks, not 4", name, hit_a);
    printf("%s: with two slots a sequence, a conversation running on reuses its own stale snapshots: another's "
           "last one stays (resumes after %d blocks), its own last one is kept (%d blocks)\n",
           name, hit_b, hit_a);
done:
    loom_engine_free(e);
    free(out);
}

static void check_refusals(loom_model *m, const golden *g) {
    loom_engine *e = engine(m, true);
    if (!e) return;
    float *out = malloc((size_t)g->n[0] * g->vocab * sizeof *out);
    loom_err err = {{0}};
    if (!run_chunked(e, g, 0, 0, 16, out)) {
        CHECK(loom_engine_truncate_seq(e, 0, 8, &err) && strstr(err.msg, "cannot be rewound"),
              "%s: cutting a sequence back: %s", name, err.msg[0] ? err.msg : "allowed");
        printf("%s: cutting back refused: %s\n", name, err.msg);
    }
    loom_spec_options so = {
        .method = LOOM_SPEC_NGRAM, .num_speculative_tokens = 2, .prompt_lookup_min = 1, .prompt_lookup_max = 2};
    loom_engine_options eo = {.max_seqs = 2};
    memset(&err, 0, sizeof err);
    loom_speculator *sp = loom_speculator_new(e, NULL, &so, &eo, &err);
    CHECK(!sp && strstr(err.msg, "state cannot be rolled back"), "%s: speculative decoding: %s", name,
          sp ? "allowed" : err.msg);
    loom_speculator_free(sp);
    free(out);
    loom_engine_free(e);
}

int main(void) {
    static const struct {
        const char *name;
        bool experts;
    } cases[] = {{"qwen3_5", false},
                 {"qwen3_5_moe", true},
                 {"granitemoehybrid", true},
                 {"nemotron_h", false},
                 {"mamba2", false}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        name = cases[c].name, experts = cases[c].experts;
        golden g;
        if (golden_open(&g, name, "logits")) {
            CHECK(0, "%s: cannot read the golden data", name);
            continue;
        }
        loom_model *m = load();
        if (m) {
            check_chunking(m, &g);
            check_states_apart(m, &g);
            check_prefix_cache(m, &g);
            check_slots_kept(m, &g);
            check_refusals(m, &g);
        }
        loom_model_free(m);
        golden_close(&g);
    }
    return check_done();
}

/* Prefix caching against computing everything, on the golden checkpoints of each family (dense,
 * sliding window, mixture of experts, latent attention, quantized) and in each parallel mode
 * (tp=1; -tp 2 with async TP from the first token; -tp 2 -pp 2; -tp 2 over MPI). On one engine
 * with blocks of 16 positions:
 *   A  a 30-token prompt, prefilled, then 6 greedy tokens, each fed back (36 positions; its
 *      blocks stay cached once it is reset);
 *   B  the same prompt again: its first 29 tokens (the last always runs, for its logits) hold 1
 *      whole block, which it must take from A; it must then decode A's tokens, every
 *      log-probability within 1e-5;
 *   C  a follow-up turn: A's prompt, A's output and 5 new tokens, from A's 2 full blocks (the
 *      second holds A's first generated tokens), against
 *   D  the same context computed from position 0 on another sequence.
 * A prompt differing in its first token must hit nothing. Where the logits also come out
 * bit-identical (the cached K and V are the same bits when the kernels do not depend on the
 * batch's shape), that is reported; the test asks for the tolerance. Gemma 3 brings sliding
 * layers with their own RoPE; the KV cache's 8-bit dtypes, their rounded K and V reused from
 * cached blocks (on kernels whose rows do not depend on the pass: latent attention's two forms
 * give a cached and a recomputed prefix hidden states apart in their last bits, which an 8-bit
 * cache can round to neighbouring codes, 1.6e-3 apart in log-probability on deepseek_v3, as
 * vLLM's would); longrope (Phi-4-mini), whose rotation depends on the pass, has a
 * scenario of its own (longrope()). */
#include <math.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "golden_util.h"

#define BS      16
#define PROMPT  30
#define NEW     6 /* tokens A and B generate */
#define FOLLOW  5 /* new tokens of the follow-up turn */
#define TOL     1e-5
#define CTX_MAX 64
#define RUN_MAX 96 /* positions run_seq takes */

/* (qwen3_5, qwen3_next, granitemoehybrid, nemotron_h, mamba2: hybrid models, whose recurrent
 * layers resume from a snapshot of their state kept at each block's end; mamba2 has no
 * attention, so its blocks hold no KV, only the place of the snapshots) */
static const char *cases[] = {
    "llama",         "mistral", "olmoe",      "deepseek_v2",      "gptq_llama", "gemma3", "llama@kv-int8",
    "gemma3@kv-fp8", "qwen3_5", "qwen3_next", "granitemoehybrid", "nemotron_h", "mamba2"};

typedef enum mode { MODE_TP1, MODE_ASYNC, MODE_PP, MODE_MPI, MODE_COUNT } mode;
static const char *mode_names[] = {"tp=1", "-tp 2 --enable-async-tp --sp-min-tokens 0", "-tp 2 -pp 2",
                                   "-tp 2 over MPI"};

/* One run of the scenario. */
typedef struct part {
    int hit_b, hit_c, hit_other; /* blocks matched */
    int same_tokens_ab, same_tokens_cd;
    double worst_ab, worst_cd; /* |log-probability| differences */
    int bits_ab, bits_cd;      /* logits bit-identical */
    /* the same for the uncached runs against themselves computed in the cached runs' passes
     * (first the cached blocks' positions, then the rest) instead of whole: what pass shapes
     * alone change */
    double split_ab, split_cd;
    double same_ab, same_cd; /* the cached runs against those uncached runs in the same passes */
} part;

/* What rank 0 reports: the scenario prefilling in passes of 16 tokens (the cached run's passes
 * are then the uncached run's last ones, so the logits must be the same bits: cached K and V are
 * the bits recomputing them gives) and in whole passes (different GEMM shapes: within 1e-5). */
typedef struct result {
    int ok;
    part aligned, whole;
    char err[512];
} result;

typedef struct job {
    loom_model *m;
    mode md;
    loom_kv_dtype kv_dtype;
    result *out;
} job;

static void log_softmax(const float *x, int n, double *out) {
    double mx = x[0], sum = 0;
    for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    for (int i = 0; i < n; i++) sum += exp(x[i] - mx);
    for (int i = 0; i < n; i++) out[i] = x[i] - mx - log(sum);
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) b = x[i] > x[b] ? i : b;
    return b;
}

/* Runs ctx[from..n) on sequence seq in passes of `chunk` tokens, then `gen` greedy tokens
 * appended to ctx; the logits of the last context token and of each generated one go to
 * logits[0..gen] (vocab each). */
static int run_seq(loom_engine *e, int seq, int32_t *ctx, int from, int n, int gen, int chunk, int vocab, float *logits,
                   loom_err *err) {
    int32_t ids[RUN_MAX], pos[RUN_MAX], sq[RUN_MAX], row;
    const float *lg;
    for (int at = from; at < n;) {
        int k = n - at < chunk ? n - at : chunk;
        for (int j = 0; j < k; j++) ids[j] = ctx[at + j], pos[j] = at + j, sq[j] = seq;
        row = k - 1;
        loom_batch pass = {k, ids, pos, sq, 1, &row, NULL};
        if (loom_forward(e, &pass, &lg, err)) return -1;
        at += k;
    }
    memcpy(logits, lg, vocab * sizeof *lg);
    for (int g = 0; g < gen; g++) {
        ctx[n + g] = argmax(logits + (size_t)g * vocab, vocab);
        ids[0] = ctx[n + g], pos[0] = n + g, sq[0] = seq, row = 0;
        loom_batch b = {1, ids, pos, sq, 1, &row, NULL};
        if (loom_forward(e, &b, &lg, err)) return -1;
        memcpy(logits + (size_t)(g + 1) * vocab, lg, vocab * sizeof *lg);
    }
    return 0;
}

/* The worst log-probability difference of rows a and b, and whether they are the same bits. */
static double worst_logprob(const float *a, const float *b, int rows, int vocab, int *bits) {
    double *la = malloc(vocab * sizeof *la), *lb = malloc(vocab * sizeof *lb), worst = 0;
    for (int r = 0; r < rows; r++) {
        log_softmax(a + (size_t)r * vocab, vocab, la);
        log_softmax(b + (size_t)r * vocab, vocab, lb);
        for (int i = 0; i < vocab; i++) worst = fabs(la[i] - lb[i]) > worst ? fabs(la[i] - lb[i]) : worst;
    }
    *bits = !memcmp(a, b, (size_t)rows * vocab * sizeof *a);
    free(la);
    free(lb);
    return worst;
}

/* The scenario on e with prefills in passes of `chunk` tokens; salt varies the tokens, so that
 * one run never hits another's blocks. */
static int scenario(loom_engine *e, int vocab, int chunk, int salt, part *r, loom_err *err) {
    float *a = malloc((size_t)(NEW + 1) * vocab * sizeof *a), *b = malloc((size_t)(NEW + 1) * vocab * sizeof *b);
    float *c = malloc((size_t)vocab * sizeof *c), *d = malloc((size_t)vocab * sizeof *d);
    int32_t pa[CTX_MAX], pb[CTX_MAX], pc[CTX_MAX], pd[CTX_MAX], blocks[CTX_MAX / BS];
    for (int i = 0; i < PROMPT; i++) pa[i] = pb[i] = (i * 37 + 11 + salt) % vocab;
    int rc = run_seq(e, 0, pa, 0, PROMPT, NEW, chunk, vocab, a, err);
    if (!rc) {
        loom_engine_reset_seq(e, 0);
        r->hit_b = loom_engine_match_prefix(e, pb, PROMPT - 1, blocks);
        rc = loom_engine_attach_prefix(e, 1, blocks, r->hit_b, err);
    }
    if (!rc) rc = run_seq(e, 1, pb, r->hit_b * BS, PROMPT, NEW, chunk, vocab, b, err);
    int n_c = PROMPT + NEW + FOLLOW;
    if (!rc) { /* A's 36 positions and the new turn's tokens */
        memcpy(pc, pa, (PROMPT + NEW) * sizeof *pc);
        for (int i = 0; i < FOLLOW; i++) pc[PROMPT + NEW + i] = (i * 53 + 7 + salt) % vocab;
        memcpy(pd, pc, n_c * sizeof *pd);
        loom_engine_reset_seq(e, 1);
        r->hit_c = loom_engine_match_prefix(e, pc, n_c - 1, blocks);
        rc = loom_engine_attach_prefix(e, 0, blocks, r->hit_c, err);
    }
    if (!rc) rc = run_seq(e, 0, pc, r->hit_c * BS, n_c, 0, chunk, vocab, c, err);
    if (!rc) rc = run_seq(e, 1, pd, 0, n_c, 0, chunk, vocab, d, err);
    if (!rc && chunk == CTX_MAX) { /* A and D again, in the passes B and C ran with cached blocks */
        float *a2 = malloc((size_t)(NEW + 1) * vocab * sizeof *a2), *d2 = malloc((size_t)vocab * sizeof *d2);
        int32_t p2[CTX_MAX];
        memcpy(p2, pc, n_c * sizeof *p2);
        int bits;
        loom_engine_reset_seq(e, 0);
        loom_engine_reset_seq(e, 1);
        rc = run_seq(e, 0, p2, 0, r->hit_b * BS, 0, chunk, vocab, a2, err) ||
             run_seq(e, 0, p2, r->hit_b * BS, PROMPT, NEW, chunk, vocab, a2, err) ||
             run_seq(e, 1, p2, 0, r->hit_c * BS, 0, chunk, vocab, d2, err) ||
             run_seq(e, 1, p2, r->hit_c * BS, n_c, 0, chunk, vocab, d2, err);
        if (!rc) {
            r->split_ab = worst_logprob(a, a2, NEW + 1, vocab, &bits);
            r->split_cd = worst_logprob(d, d2, 1, vocab, &bits);
            r->same_ab = worst_logprob(b, a2, NEW + 1, vocab, &bits);
            r->same_cd = worst_logprob(c, d2, 1, vocab, &bits);
        }
        free(a2), free(d2);
    }
    if (!rc) {
        int32_t other[PROMPT];
        memcpy(other, pa, sizeof other);
        other[0] = (other[0] + 1) % vocab;
        r->hit_other = loom_engine_match_prefix(e, other, PROMPT - 1, blocks);
        r->same_tokens_ab = !memcmp(pa, pb, (PROMPT + NEW) * sizeof *pa);
        r->same_tokens_cd = argmax(c, vocab) == argmax(d, vocab);
        r->worst_ab = worst_logprob(a, b, NEW + 1, vocab, &r->bits_ab);
        r->worst_cd = worst_logprob(c, d, 1, vocab, &r->bits_cd);
    }
    loom_engine_reset_seq(e, 0);
    loom_engine_reset_seq(e, 1);
    free(a), free(b), free(c), free(d);
    return rc;
}

static int rank_main(loom_comm *comm, void *arg) {
    job *j = arg;
    result r = {0};
    loom_err err = {{0}};
    loom_model_info info;
    loom_model_get_info(j->m, &info);
    loom_engine_options eo = {.max_seqs = 2,
                              .max_ctx = CTX_MAX,
                              .max_tokens = CTX_MAX,
                              .comm = comm,
                              .block_size = BS,
                              .prefix_caching = true,
                              .state_snapshot_interval = BS,
                              .kv_cache_dtype = j->kv_dtype};
    if (j->md == MODE_ASYNC) eo.sequence_parallel = eo.async_tp = true, eo.sp_min_tokens = 0;
    if (j->md == MODE_PP) eo.pipeline_parallel = 2;
    loom_engine *e = loom_engine_new(j->m, &eo, &err);
    int rc = e ? 0 : -1;
    if (!rc) rc = scenario(e, info.vocab, BS, 0, &r.aligned, &err);
    if (!rc) rc = scenario(e, info.vocab, CTX_MAX, 5, &r.whole, &err);
    r.ok = !rc;
    snprintf(r.err, sizeof r.err, "%s", err.msg);
    if (loom_comm_rank(comm) == 0) *j->out = r;
    loom_engine_free(e);
    return rc ? 1 : 0;
}

static loom_model *load(const char *name) {
    char dir[900];
    golden_dir(dir, sizeof dir, name);
    loom_err err = {{0}};
    loom_model_options mo = {.path = dir};
    loom_model *m = loom_model_load(&mo, &err);
    CHECK(m, "%s: %s", name, err.msg);
    return m;
}

/* Case `name` in mode md on its ranks (MODE_MPI: the MPI backend, under mpirun). */
static result run_case(const char *name, mode md) {
    result *shared = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0), r;
    loom_model *m = load(name);
    if (!m) {
        munmap(shared, sizeof *shared);
        return (result){.err = "cannot load the checkpoint"};
    }
    memset(shared, 0, sizeof *shared);
    job j = {m, md, golden_kv_dtype(name), shared};
    loom_engine_options eo = {
        .max_seqs = 2, .max_ctx = CTX_MAX, .max_tokens = CTX_MAX, .block_size = BS, .kv_cache_dtype = j.kv_dtype};
    if (md == MODE_ASYNC) eo.sequence_parallel = eo.async_tp = true;
    if (md == MODE_PP) eo.pipeline_parallel = 2;
    loom_err err = {{0}};
    int tp = md == MODE_TP1 ? 1 : 2, pp = md == MODE_PP ? 2 : 1;
    if (golden_launch(m, tp, pp, md == MODE_MPI ? "mpi" : "shm", &eo, rank_main, &j, (float *)shared, sizeof *shared,
                      &err) == NULL) {
        r = (result){0};
        snprintf(r.err, sizeof r.err, "%s", err.msg);
        return r;
    }
    r = *shared;
    munmap(shared, sizeof *shared);
    return r;
}

/* The cached run against the uncached one. In passes of 16 tokens the cached run's passes are
 * the uncached run's last ones: the logits must be the same bits where the kernels' rows do not
 * depend on the pass (bits), else within TOL (latent attention and quantized weights: the cached
 * blocks' last positions were written by decode steps, whose kernels round differently). In
 * whole passes, the few rows after a cached prefix take the decode kernels where the uncached
 * prompt takes the GEMM: within TOL; or the cache's own part, against the uncached run computed
 * in the same passes, within TOL (the pass shapes alone move Gemma 3's wider logits by up to
 * 8.8e-6 on AVX-512, and an 8-bit cache's codes can round either side of a boundary there:
 * their sum passes TOL where the cache itself moves them by 4.4e-6); or, where the pass shapes
 * alone move the uncached run past TOL (quantized weights, whose two kernels differ by more),
 * the cached run no further from the uncached one than they do. */
static void check_part(const char *name, const char *mn, const char *how, const part *p, bool bits) {
    /* B: the prompt's 29 tokens before its last hold 1 whole block; C: A's 36 positions 2 */
    CHECK(p->hit_b == 1 && p->hit_c == 2 && p->hit_other == 0,
          "%s (%s, %s): blocks matched: repeat %d (want 1), follow-up %d (want 2), another first token %d (want 0)",
          name, mn, how, p->hit_b, p->hit_c, p->hit_other);
    CHECK(p->same_tokens_ab, "%s (%s, %s): greedy tokens differ with the prompt's prefix cached", name, mn, how);
    CHECK(p->same_tokens_cd, "%s (%s, %s): the follow-up turn's greedy token differs with its prefix cached", name, mn,
          how);
    bool split = !strcmp(how, "whole passes"); /* the uncached runs in the same passes were made */
    bool ab = p->worst_ab <= TOL || (split && (p->same_ab <= TOL || (p->split_ab > TOL && p->worst_ab <= p->split_ab)));
    bool cd = p->worst_cd <= TOL || (split && (p->same_cd <= TOL || (p->split_cd > TOL && p->worst_cd <= p->split_cd)));
    CHECK(ab && cd,
          "%s (%s, %s): log-probabilities with the prefix cached differ by %.3g (repeat) and %.3g (follow-up); "
          "computing them in the same passes without the cache changes them by %.3g and %.3g, and the cached runs "
          "differ from those by %.3g and %.3g",
          name, mn, how, p->worst_ab, p->worst_cd, p->split_ab, p->split_cd, p->same_ab, p->same_cd);
    CHECK(!bits || (p->bits_ab && p->bits_cd), "%s (%s, %s): logits with the prefix cached are not the same bits", name,
          mn, how);
    printf("%-12s %-42s %-15s hits %d/%d/%d, |logprob diff| repeat %.1e%s, follow-up %.1e%s", name, mn, how, p->hit_b,
           p->hit_c, p->hit_other, p->worst_ab, p->bits_ab ? " (same bits)" : "", p->worst_cd,
           p->bits_cd ? " (same bits)" : "");
    if (!strcmp(how, "whole passes"))
        printf("; uncached in the same passes %.1e, %.1e, cached against those %.1e, %.1e", p->split_ab, p->split_cd,
               p->same_ab, p->same_cd);
    printf("\n");
}

static void check_case(const char *name, mode md, const result *r) {
    CHECK(r->ok, "%s (%s): %s", name, mode_names[md], r->err);
    if (!r->ok) return;
    bool kernels_row_independent = strcmp(name, "deepseek_v2") && strcmp(name, "gptq_llama");
    check_part(name, mode_names[md], "16-token passes", &r->aligned, kernels_row_independent);
    check_part(name, mode_names[md], "whole passes", &r->whole, false);
}

/* longrope: phi4_mini's original context is 64 positions, and a pass reaching past it rotates
 * all its rows by the long factors (transformers' choice per forward), so a block's K carries
 * the rotation of the pass that wrote it. A: a prompt in one pass (72 tokens past the original
 * context, 60 within it), then B: 40 tokens, its first 34 A's, after A and on a fresh engine.
 * Where a context can reach past the original one, nothing may be cached (the engine says
 * why) and B must have the bits it has alone, whichever request came first; within it, B takes
 * A's 2 blocks and stays within TOL. */
static void longrope(void) {
    loom_model *m = load("phi4_mini");
    if (!m) return;
    loom_model_info info;
    loom_model_get_info(m, &info);
    int vocab = info.vocab, nb = 40;
    float *first = malloc(3 * (size_t)vocab * sizeof *first), *alone = malloc(3 * (size_t)vocab * sizeof *alone);
    for (int within = 0; within <= 1; within++) {
        const char *how = within ? "context within the original 64" : "context of 96, past the original 64";
        int na = within ? 60 : 72, hit = -1;
        int32_t pa[RUN_MAX], pb[RUN_MAX], pb2[RUN_MAX], blocks[RUN_MAX / BS];
        for (int i = 0; i < na; i++) pa[i] = (i * 37 + 11) % vocab;
        for (int i = 0; i < nb; i++) pb[i] = pb2[i] = i < 34 ? pa[i] : (i * 53 + 7) % vocab;
        loom_engine_options eo = {
            .max_seqs = 2, .max_ctx = within ? 64 : 96, .max_tokens = 96, .block_size = BS, .prefix_caching = true};
        loom_err err = {{0}};
        loom_engine *e = loom_engine_new(m, &eo, &err), *fresh = e ? loom_engine_new(m, &eo, &err) : NULL;
        CHECK(fresh, "phi4_mini (%s): %s", how, err.msg);
        if (!fresh) {
            loom_engine_free(e);
            continue;
        }
        loom_kv_stats kv;
        loom_engine_get_kv_stats(e, &kv);
        CHECK(kv.prefix_caching == (within == 1) && (kv.uncached != NULL) == (within == 0),
              "phi4_mini (%s): prefix caching %s%s%s", how, kv.prefix_caching ? "on" : "off", kv.uncached ? ": " : "",
              kv.uncached ? kv.uncached : "");
        int rc = run_seq(e, 0, pa, 0, na, 0, na, vocab, first, &err);
        if (!rc) {
            loom_engine_reset_seq(e, 0);
            hit = loom_engine_match_prefix(e, pb, nb - 1, blocks);
            rc = loom_engine_attach_prefix(e, 1, blocks, hit, &err) ||
                 run_seq(e, 1, pb, hit * BS, nb, 2, nb, vocab, first, &err) ||
                 run_seq(fresh, 0, pb2, 0, nb, 2, nb, vocab, alone, &err);
        }
        CHECK(!rc, "phi4_mini (%s): %s", how, err.msg);
        if (!rc) {
            int bits;
            double worst = worst_logprob(first, alone, 3, vocab, &bits);
            CHECK(hit == (within ? 2 : 0), "phi4_mini (%s): %d blocks matched (want %d)", how, hit, within ? 2 : 0);
            CHECK(within ? worst <= TOL : bits,
                  "phi4_mini (%s): B after A differs from B alone by %.3g in log-probability%s", how, worst,
                  within ? "" : " (it must be the same bits: nothing was cached)");
            printf("%-12s %-42s hits %d, |logprob diff| B after A against B alone %.1e%s\n", "phi4_mini", how, hit,
                   worst, bits ? " (same bits)" : "");
        }
        loom_engine_free(e);
        loom_engine_free(fresh);
    }
    free(first), free(alone);
    loom_model_free(m);
}

/* `--mpi-dump CASE FILE`: the MPI mode's ranks (mpirun starts this binary); world rank 0 writes
 * the result. */
static int mpi_dump(const char *name, const char *path) {
    result r = run_case(name, MODE_MPI);
    golden_dump((const float *)&r, sizeof r / sizeof(float), path);
    return r.err[0] ? 1 : 0; /* only rank 0 fills in the rest */
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--mpi-dump")) return mpi_dump(argv[2], argv[3]);
    check_cpu_variant();
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int md = 0; md < MODE_COUNT; md++) {
            if (md == MODE_MPI) {
                if (!mpi_available("test_prefix_cache")) continue;
                float *got = golden_mpi_run(2, cases[c], sizeof(result) / sizeof(float));
                result r = {0};
                if (got) memcpy(&r, got, sizeof r);
                else snprintf(r.err, sizeof r.err, "mpirun failed");
                free(got);
                check_case(cases[c], MODE_MPI, &r);
                continue;
            }
            result r = run_case(cases[c], (mode)md);
            check_case(cases[c], (mode)md, &r);
        }
    longrope();
    return check_done();
}

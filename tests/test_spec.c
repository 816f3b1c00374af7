/* Speculative decoding. Exactness: greedy output with speculation is the target's own, token for
 * token, for every golden family (dense, sliding window, MoE, MLA, quantized) at tp=1, -tp 2
 * (plain TP, and SP with async TP from the first token), -tp 2 -pp 2 and over MPI, with three
 * proposers (and on 8-bit KV caches, whose rejected rows are rounded again when rewritten): n-gram lookup, the target itself as its draft model (every proposal accepted: the
 * accept path and the bonus token) and another random model as the draft (most proposals
 * rejected: the KV cache's rollback in both engines). Distribution: with sampling, what
 * speculation emits follows the target's distribution (a two-sample chi-square over seeds against
 * plain sampling). The KV cache's truncation, and bad speculative configurations, each refused
 * with a message naming what is wrong. `test_spec --mpi-dump CASE FILE` is the mode mpirun starts. */
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "golden_util.h"
#include "runtime/kv_cache.h"
#include "runtime/sampling.h"

#define N_NEW 40 /* tokens generated: past mistral's window of 4, over several KV blocks of 16 */
#define K     4  /* num_speculative_tokens */
/* the target tests/golden/make_eagle3_golden.py made, with its Eagle3 draft (random: its
 * proposals are mostly rejected) */
#define EAGLE3_TARGET "eagle3/target"
#define EAGLE3_DRAFT  "eagle3/speculators"

static const char *families[] = {"llama",           "mistral",     "mixtral",         "qwen3_moe",
                                 "deepseek_v2",     "gptq_llama",  "gptq_llama@auto", "llama_bf16@auto",
                                 "ct_mixtral@auto", EAGLE3_TARGET, "llama@kv-int8",   "deepseek_v3@kv-fp8"};
#define N_FAMILIES (int)(sizeof families / sizeof *families)

/* The proposers, after the plain run (METHOD_NONE) that each must reproduce. */
typedef enum method { METHOD_NONE, METHOD_NGRAM, METHOD_SELF, METHOD_OTHER, METHOD_EAGLE3, N_METHODS } method;
static const char *method_names[] = {"plain", "ngram", "draft_model (itself)", "draft_model (another model)", "eagle3"};

typedef enum mode { MODE_TP1, MODE_TP2, MODE_ASYNC2, MODE_TP2_PP2, MODE_EP2, N_MODES } mode;
static const char *mode_names[] = {"tp=1", "-tp 2", "-tp 2 async TP (sp-min-tokens 0)", "-tp 2 -pp 2",
                                   "-tp 2 expert parallel + SP"};

typedef struct job {
    loom_model *m, *other; /* the target, and the unrelated draft */
    loom_model *eagle;     /* its Eagle3 draft (NULL: none, the method is skipped) */
    const int32_t *prompt;
    int n_prompt;
    mode mode;
    loom_kv_dtype kv_dtype; /* the target's KV cache (a rejected draft's rows are written again) */
    int32_t *out;           /* [N_METHODS][N_NEW + 1]: each method's tokens, then its accepted count */
} job;

static loom_spec_options spec_for(method me) {
    loom_spec_options o = {.num_speculative_tokens = K};
    if (me == METHOD_NGRAM) o.method = LOOM_SPEC_NGRAM, o.prompt_lookup_min = 1, o.prompt_lookup_max = 3;
    else o.method = me == METHOD_EAGLE3 ? LOOM_SPEC_EAGLE3 : LOOM_SPEC_DRAFT_MODEL;
    return o;
}

static loom_engine_options options_for(loom_comm *comm, mode mo, const job *j) {
    loom_engine_options eo = {
        .max_seqs = 1, .max_ctx = 64, .max_tokens = 16, .max_logits = K + 1, .comm = comm, .block_size = 16};
    eo.kv_cache_dtype = j->kv_dtype;
    eo.sequence_parallel = eo.async_tp = mo == MODE_ASYNC2;
    eo.pipeline_parallel = mo == MODE_TP2_PP2 ? 2 : 1;
    if (mo == MODE_EP2) eo.expert_parallel = eo.sequence_parallel = true;
    loom_spec_options so = spec_for(METHOD_EAGLE3);
    loom_err err = {{0}};
    if (j->eagle && loom_spec_engine_options(&so, j->m, j->eagle, &eo, &err)) fprintf(stderr, "%s\n", err.msg);
    return eo;
}

typedef struct collected {
    int32_t ids[N_NEW];
    int n;
} collected;

static bool collect(void *user, int32_t id, const char *piece, size_t len) {
    (void)piece, (void)len;
    collected *c = user;
    if (id >= 0 && c->n < N_NEW) c->ids[c->n++] = id;
    return true;
}

/* Every method's greedy tokens on this rank (all ranks generate the same); rank 0 keeps them. */
static int rank_main(loom_comm *comm, void *arg) {
    job *j = arg;
    loom_err err = {{0}};
    loom_engine_options eo = options_for(comm, j->mode, j);
    loom_engine *e = loom_engine_new(j->m, &eo, &err);
    int rc = e ? 0 : -1;
    loom_sampling greedy = {.top_p = 1, .ignore_eos = true};
    for (int me = 0; me < N_METHODS && !rc; me++) {
        loom_speculator *sp = NULL;
        if (me == METHOD_EAGLE3 && !j->eagle) {
            if (!comm || loom_comm_rank(comm) == 0) j->out[(size_t)me * (N_NEW + 1) + N_NEW] = -1; /* not run */
            continue;
        }
        if (me != METHOD_NONE) {
            loom_spec_options so = spec_for(me);
            loom_model *draft = me == METHOD_SELF     ? j->m
                                : me == METHOD_OTHER  ? j->other
                                : me == METHOD_EAGLE3 ? j->eagle
                                                      : NULL;
            if (!(sp = loom_speculator_new(e, draft, &so, &eo, &err))) rc = -1;
        }
        collected got = {0};
        loom_gen_stats st;
        if (!rc)
            rc = loom_generate_speculative(e, sp, j->prompt, j->n_prompt, N_NEW, &greedy, collect, &got, &st, &err);
        if (!rc && got.n != N_NEW) rc = loom_errf(&err, "%s generated %d tokens", method_names[me], got.n);
        if (!rc && (!comm || loom_comm_rank(comm) == 0)) {
            int32_t *out = j->out + (size_t)me * (N_NEW + 1);
            memcpy(out, got.ids, sizeof got.ids);
            out[N_NEW] = st.accepted;
        }
        loom_speculator_free(sp);
    }
    if (rc) fprintf(stderr, "rank %d: %s\n", comm ? loom_comm_rank(comm) : 0, err.msg);
    loom_engine_free(e);
    return rc ? 1 : 0;
}

static loom_model *load(const char *name) {
    char dir[900], target[900];
    golden_dir(dir, sizeof dir, name);
    golden_dir(target, sizeof target, EAGLE3_TARGET);
    loom_err err = {{0}};
    loom_model_options mo = {.path = dir, .dtype = golden_dtype(name), .embedding_from = target};
    loom_model *m = loom_model_load(&mo, &err);
    CHECK(m, "%s: %s", name, err.msg);
    return m;
}

#define OUT_INTS ((size_t)N_METHODS * (N_NEW + 1))

/* The case's prompt: its golden batch's first sequence, or for the Eagle3 target (which has no
 * golden batch of its own) a fixed one. */
static int open_prompt(golden *g, const char *name) {
    static int32_t eagle3_prompt[] = {1, 17, 42, 99, 5, 63, 88, 12, 7};
    if (strcmp(name, EAGLE3_TARGET)) return golden_open(g, name, "logits");
    *g = (golden){.prefill = {9}};
    g->ids[0] = malloc(sizeof eagle3_prompt);
    memcpy(g->ids[0], eagle3_prompt, sizeof eagle3_prompt);
    return 0;
}

/* Runs every method on `name` in mode mo; the tokens (munmap'd by the caller), or NULL. */
static int32_t *run_case(const char *name, mode mo) {
    golden g;
    if (open_prompt(&g, name)) return NULL;
    job j = {.m = load(name),
             .other = load(strcmp(name, "qwen3") ? "qwen3" : "llama"),
             .mode = mo,
             .kv_dtype = golden_kv_dtype(name)};
    j.eagle = strcmp(name, EAGLE3_TARGET) ? NULL : load(EAGLE3_DRAFT);
    j.prompt = g.ids[0], j.n_prompt = g.prefill[0];
    size_t bytes = OUT_INTS * sizeof *j.out;
    j.out = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    loom_err err = {{0}};
    int32_t *out = j.out;
    if (!j.m || !j.other) out = NULL;
    else if (mo == MODE_TP1) out = rank_main(NULL, &j) ? NULL : j.out;
    else {
        loom_engine_options eo = options_for(NULL, mo, &j);
        loom_model *other = j.other;
        out = (int32_t *)golden_launch(j.m, 2, mo == MODE_TP2_PP2 ? 2 : 1, "shm", &eo, rank_main, &j, (float *)j.out,
                                       bytes, &err);
        j.m = NULL, j.other = other;
        if (!out) fprintf(stderr, "%s %s: %s\n", name, mode_names[mo], err.msg);
    }
    if (!out && j.out) munmap(j.out, bytes);
    loom_model_free(j.m);
    loom_model_free(j.other);
    loom_model_free(j.eagle);
    golden_close(&g);
    return out;
}

/* Each method's tokens must be the plain run's. */
static void check_exact(const char *name, const char *where, const int32_t *out) {
    CHECK(out, "%s %s: the run failed", name, where);
    if (!out) return;
    for (int me = 1; me < N_METHODS; me++) {
        const int32_t *got = out + (size_t)me * (N_NEW + 1);
        if (got[N_NEW] < 0) continue; /* not run on this target */
        int first = -1;
        for (int i = 0; i < N_NEW && first < 0; i++)
            if (got[i] != out[i]) first = i;
        CHECK(first < 0, "%s %s, %s: token %d is %d, plain decoding gave %d", name, where, method_names[me], first,
              first >= 0 ? got[first] : 0, first >= 0 ? out[first] : 0);
    }
    /* the target as its own draft agrees with itself on every proposal: N_NEW - 1 tokens after
     * the prefill's, every one a proposal but the bonus tokens of each pass (not under pipeline
     * stages, where the draft runs whole on each rank, in other sums than the target's) */
    int self = out[METHOD_SELF * (N_NEW + 1) + N_NEW], passes = (N_NEW - 1 + K) / (K + 1);
    CHECK(self == N_NEW - 1 - passes || strstr(where, "-pp"),
          "%s %s: the target as its own draft had %d proposals accepted, want %d", name, where, self,
          N_NEW - 1 - passes);
    printf("%-15s %-34s accepted: ngram %2d, itself %2d, another model %2d, eagle3 %2d of %d\n", name, where,
           out[METHOD_NGRAM * (N_NEW + 1) + N_NEW], self, out[METHOD_OTHER * (N_NEW + 1) + N_NEW],
           out[METHOD_EAGLE3 * (N_NEW + 1) + N_NEW], N_NEW - 1);
}

/* The KV cache's truncation: blocks past the cut go back to the pool, and a full block cut
 * inside stops being a cached prefix (its later rows will be written again). */
static void test_truncate(void) {
    kv_cache c;
    loom_err err = {{0}};
    CHECK(!kv_cache_init(&c, 8, 16, 1, 128, true, &err), "%s", err.msg);
    int32_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = i;
    kv_cache_grow(&c, 0, 40);
    kv_cache_written(&c, 0, 0, ids, 40);
    CHECK(c.held[0] == 3 && c.n_free == 5 && c.n_indexed == 2, "40 positions: %d blocks held, %d free, %d indexed",
          c.held[0], c.n_free, c.n_indexed);
    CHECK(!kv_cache_truncate(&c, 0, 32, &err) && c.held[0] == 2 && c.n_free == 6 && c.n_indexed == 2,
          "cut to 32: %d held, %d free, %d indexed (the two full blocks stay cached)", c.held[0], c.n_free,
          c.n_indexed);
    int32_t b1 = c.tables[1];
    CHECK(!kv_cache_truncate(&c, 0, 20, &err) && c.held[0] == 2 && c.len[0] == 20 && c.n_indexed == 1 &&
              !c.blocks[b1].full,
          "cut to 20 inside block %d: %d held, length %d, %d indexed", b1, c.held[0], c.len[0], c.n_indexed);
    int32_t m[8];
    CHECK(kv_cache_match(&c, ids, 40, m) == 1, "after the cut only the first block is a cached prefix");
    CHECK(kv_cache_truncate(&c, 0, 21, &err) && strstr(err.msg, "holds 20"), "cut past the length: '%s'", err.msg);
    kv_cache_free(&c);
}

/* One verification against a known distribution: the emitted token must follow p whatever the
 * draft (inside the top-k, its most likely token, or outside the top-k). Exact chi-square with
 * 4 degrees of freedom at the 0.999 quantile (18.47). */
static void test_verify_distribution(void) {
    const double p[5] = {0.4, 0.3, 0.15, 0.1, 0.05};
    float logits[5];
    for (int i = 0; i < 5; i++) logits[i] = (float)log(p[i]);
    const int n = 40000;
    int drafts[] = {0, 2, 4};
    for (int d = 0; d < 3; d++) {
        sampler s;
        loom_err err;
        CHECK(!sampler_init(&s, &(loom_sampling){.temperature = 1, .top_p = 1, .seed = 11 + d}, 5, &err), "%s",
              err.msg);
        int count[5] = {0}, accepted = 0;
        for (int i = 0; i < n; i++) {
            bool acc;
            count[sampler_verify(&s, logits, drafts[d], &acc)]++;
            accepted += acc;
        }
        sampler_free(&s);
        double chi = 0;
        for (int i = 0; i < 5; i++) chi += (count[i] - n * p[i]) * (count[i] - n * p[i]) / (n * p[i]);
        CHECK(chi < 18.47, "draft %d: emitted tokens do not follow p (chi-square %.1f, 4 dof)", drafts[d], chi);
        CHECK(fabs(accepted / (double)n - p[drafts[d]]) < 0.01, "draft %d accepted %.3f of the time, p = %.2f",
              drafts[d], accepted / (double)n, p[drafts[d]]);
    }
}

/* End to end with sampling: the embedded model generates SEED_TOKENS tokens from "Once" for
 * each of SEEDS seeds, plainly and with itself as the draft (whose greedy proposals are
 * accepted with the target's probability of them, so both the accept and the reject paths
 * run). The (position, token) counts of the two must agree: a two-sample chi-square, bins of
 * fewer than 10 in both merged, against its 0.999 quantile (Wilson-Hilferty). The same test
 * must tell temperature 1 from 1.25 apart, or it could not fail. */
#define SEEDS       1500
#define SEED_TOKENS 6
#define SEED_VOCAB  512

static int *sample_counts(loom_engine *e, loom_speculator *sp, const int32_t *prompt, int n_prompt, float temp) {
    int *counts = calloc((size_t)SEED_TOKENS * SEED_VOCAB, sizeof *counts);
    for (int seed = 1; seed <= SEEDS && counts; seed++) {
        loom_sampling s = {.temperature = temp, .top_p = 1, .seed = (uint64_t)seed, .ignore_eos = true};
        collected got = {0};
        loom_gen_stats st;
        loom_err err = {{0}};
        if (loom_generate_speculative(e, sp, prompt, n_prompt, SEED_TOKENS, &s, collect, &got, &st, &err)) {
            fprintf(stderr, "seed %d: %s\n", seed, err.msg);
            free(counts);
            return NULL;
        }
        for (int i = 0; i < got.n; i++) counts[i * SEED_VOCAB + got.ids[i]]++;
    }
    return counts;
}

/* Whether the two samples' counts differ at the 0.999 level; the statistic and dof out. */
static bool differ(const int *a, const int *b, double *chi, int *dof) {
    double rest_a = 0, rest_b = 0;
    int bins = 0;
    *chi = 0;
    for (int i = 0; i < SEED_TOKENS * SEED_VOCAB; i++) {
        if (a[i] + b[i] < 10) {
            rest_a += a[i], rest_b += b[i];
            continue;
        }
        *chi += (double)(a[i] - b[i]) * (a[i] - b[i]) / (a[i] + b[i]);
        bins++;
    }
    if (rest_a + rest_b > 0) *chi += (rest_a - rest_b) * (rest_a - rest_b) / (rest_a + rest_b), bins++;
    /* every position's counts add up to SEEDS in both: one constraint a position */
    *dof = bins - SEED_TOKENS;
    double k = *dof, z = 3.09, q = k * pow(1 - 2 / (9 * k) + z * sqrt(2 / (9 * k)), 3);
    return *chi > q;
}

static void test_sampled_distribution(void) {
    loom_err err = {{0}};
    loom_model_options mo = {.dtype = "float32", .load_tokenizer = true};
    loom_model *m = loom_model_load(&mo, &err);
    CHECK(m, "the embedded model: %s", err.msg);
    if (!m) return;
    loom_engine_options eo = {.max_seqs = 1, .max_ctx = 64, .max_tokens = 16, .max_logits = K + 1};
    loom_engine *e = loom_engine_new(m, &eo, &err);
    loom_spec_options so = spec_for(METHOD_SELF);
    loom_speculator *sp = e ? loom_speculator_new(e, m, &so, &eo, &err) : NULL;
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    CHECK(sp && !loom_tokenize(m, "Once", true, &prompt, &n_prompt, &err), "%s", err.msg);
    if (sp && prompt) {
        int *plain = sample_counts(e, NULL, prompt, (int)n_prompt, 1);
        int *spec = sample_counts(e, sp, prompt, (int)n_prompt, 1);
        int *hot = sample_counts(e, NULL, prompt, (int)n_prompt, 1.25f);
        loom_spec_stats st;
        loom_speculator_get_stats(sp, &st);
        CHECK(plain && spec && hot, "sampling failed");
        double chi;
        int dof;
        if (plain && spec && hot) {
            CHECK(!differ(plain, spec, &chi, &dof),
                  "speculative sampling differs from plain sampling: chi-square %.1f with %d dof", chi, dof);
            printf("sampling: speculative vs plain chi-square %.1f (%d dof); ", chi, dof);
            CHECK(differ(plain, hot, &chi, &dof),
                  "the test cannot tell temperature 1.25 from 1 (chi-square %.1f, %d dof)", chi, dof);
            printf("temperature 1.25 vs 1: %.1f (%d dof); %ld of %ld proposals accepted\n", chi, dof,
                   st.accepted_tokens, st.draft_tokens);
            CHECK(st.accepted_tokens > 0 && st.accepted_tokens < st.draft_tokens,
                  "both paths should run: %ld of %ld accepted", st.accepted_tokens, st.draft_tokens);
        }
        free(plain), free(spec), free(hot);
    }
    free(prompt);
    loom_speculator_free(sp);
    loom_engine_free(e);
    loom_model_free(m);
}

/* Bad configurations: each refused, the message naming what is wrong. */
static void test_bad_input(void) {
    static const struct {
        const char *json, *says;
    } bad[] = {
        {"{\"method\": \"medusa2\", \"num_speculative_tokens\": 2}", "unknown method \"medusa2\""},
        {"{\"method\": \"ngram\", \"num_speculative_tokens\": 0}", "num_speculative_tokens"},
        {"{\"method\": \"ngram\", \"num_speculative_tokens\": -3}", "num_speculative_tokens"},
        {"{\"method\": \"ngram\"}", "\"num_speculative_tokens\" is required"},
        {"{\"method\": \"ngram\", \"num_speculative_tokens\": 2, \"prompt_lookup_mx\": 3}",
         "unknown key \"prompt_lookup_mx\""},
        {"{\"method\": \"ngram\", \"num_speculative_tokens\": 2, \"prompt_lookup_min\": 4, \"prompt_lookup_max\": 2}",
         "prompt_lookup_min 4 is above prompt_lookup_max 2"},
        {"{\"method\": \"draft_model\", \"num_speculative_tokens\": 2}", "needs the draft's \"model\""},
        {"{\"num_speculative_tokens\": 2}", "no \"method\""},
        {"[1, 2]", "not a JSON object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        loom_spec_options o;
        loom_err err = {{0}};
        CHECK(loom_spec_parse(bad[i].json, &o, &err) && strstr(err.msg, bad[i].says), "%s: got '%s', want '%s'",
              bad[i].json, err.msg, bad[i].says);
    }
    loom_spec_options o;
    loom_err err = {{0}};
    CHECK(!loom_spec_parse("{\"method\": \"ngram\", \"num_speculative_tokens\": 3, \"prompt_lookup_max\": 4}", &o,
                           &err) &&
              o.prompt_lookup_min == 4 && o.prompt_lookup_max == 4,
          "prompt_lookup_max alone sets both (vLLM): %d..%d", o.prompt_lookup_min, o.prompt_lookup_max);
    /* a draft whose vocabulary the target cannot take, and a draft tp that is neither 1 nor the target's */
    loom_model *target = load("llama_tp3"), *draft = load("llama");
    loom_engine_options eo = {.max_seqs = 1, .max_ctx = 32, .max_tokens = 16, .max_logits = 3};
    loom_engine *e = target ? loom_engine_new(target, &eo, &err) : NULL;
    loom_spec_options so = spec_for(METHOD_OTHER);
    CHECK(e && draft && !loom_speculator_new(e, draft, &so, &eo, &err) && strstr(err.msg, "vocabulary of 128") &&
              strstr(err.msg, "target's 120"),
          "a draft with a larger vocabulary: '%s'", err.msg);
    so.draft_tensor_parallel_size = 2;
    CHECK(e && !loom_speculator_new(e, target, &so, &eo, &err) && strstr(err.msg, "draft_tensor_parallel_size 2"),
          "a draft tp of 2 at tp 1: '%s'", err.msg);
    CHECK(e && !loom_speculator_new(e, NULL, &so, &eo, &err) && strstr(err.msg, "no draft model"),
          "draft_model with no model: '%s'", err.msg);
    loom_engine_free(e);
    loom_model_free(target);
    loom_model_free(draft);
}

/* Under mpirun: the async TP case on the MPI communicator; world rank 0 writes the tokens. */
static int mpi_dump(const char *name, const char *path) {
    golden g;
    if (open_prompt(&g, name)) return 1;
    job j = {.m = load(name), .other = load("qwen3"), .mode = MODE_ASYNC2, .kv_dtype = golden_kv_dtype(name)};
    j.eagle = strcmp(name, EAGLE3_TARGET) ? NULL : load(EAGLE3_DRAFT);
    j.prompt = g.ids[0], j.n_prompt = g.prefill[0];
    size_t bytes = OUT_INTS * sizeof *j.out;
    j.out = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    loom_engine_options eo = options_for(NULL, MODE_ASYNC2, &j);
    loom_err err = {{0}};
    float *out = golden_launch(j.m, 2, 1, "mpi", &eo, rank_main, &j, (float *)j.out, bytes, &err);
    if (!out) fprintf(stderr, "%s\n", err.msg);
    golden_dump(out, OUT_INTS, path);
    loom_model_free(j.other);
    loom_model_free(j.eagle);
    golden_close(&g);
    return out ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--mpi-dump")) return mpi_dump(argv[2], argv[3]);
    check_cpu_variant();
    test_truncate();
    test_verify_distribution();
    test_bad_input();
    for (int f = 0; f < N_FAMILIES; f++)
        for (int mo = 0; mo < N_MODES; mo++) {
            if (mo == MODE_EP2 && !strstr(families[f], "mixtral") && !strstr(families[f], "moe") &&
                !strstr(families[f], "deepseek"))
                continue; /* expert parallelism: the mixtures of experts */
            int32_t *out = run_case(families[f], mo);
            check_exact(families[f], mode_names[mo], out);
            if (out) munmap(out, OUT_INTS * sizeof *out);
        }
    if (mpi_available("test_spec")) {
        for (int c = 0; c < 2; c++) {
            const char *name = c ? EAGLE3_TARGET : "llama";
            int32_t *out = (int32_t *)golden_mpi_run(2, name, OUT_INTS);
            check_exact(name, "MPI -tp 2 async TP", out);
            free(out);
        }
    }
    test_sampled_distribution();
    return check_done();
}

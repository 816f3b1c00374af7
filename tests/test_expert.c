/* Expert parallelism against the oracles. Every mixture-of-experts golden model runs with
 * --enable-expert-parallel on 2, 3 and 4 shm ranks where its attention heads divide (mixtral_ep3
 * at 3: its 8 experts spread 3, 3 and 2) (whole experts per rank, rows dispatched and
 * combined by all-to-alls) and must match transformers within 1e-4 at every position; with
 * sequence parallelism (the experts taking each rank's token shard directly), with async TP and
 * with --sp-min-tokens (SP prefill, plain decode) the logits must be bit-identical to plain EP,
 * and MPI ranks bit-identical to shm ones. Routing extremes: each sequence also runs alone, so
 * decode steps carry one token (at 4 ranks three ranks hold only padding and most ranks receive
 * nothing), and deepseek_v3_skewed's correction bias sends every token to experts 0 and 1, on
 * rank 0: the other ranks must receive no row at all, which the engine's counts show; placed by
 * its own load profile its rows spread over both ranks at 2, and over all four at 4 with two
 * spare copies of its hot experts. Three
 * cases also run in two pipeline stages of two expert-parallel ranks each, bit-identical to one.
 * `test_expert CASE` runs one case; `--mpi-dump CASE MODE FILE` is the mode mpirun starts. */
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "golden_util.h"
#include "runtime/profile.h"

#define ATOL           1e-4
#define MAX_MOE_LAYERS 4

/* (and four quantized checkpoints' experts, held whole: gptq_mixtral's attention cannot split 4
 * ways; one again with --dtype auto, int8 activations, golden_util.h; the FP8 ones block-scaled;
 * then six GGUF files' experts, stacked per projection, GPT-OSS's MXFP4 ones also on int8
 * activations, as a folder's MXFP4 experts compute by default) */
static const char *cases[] = {"olmoe",
                              "mixtral",
                              "qwen2_moe",
                              "qwen3_moe",
                              "qwen3_5_moe",
                              "qwen3_next",
                              "granitemoehybrid",
                              "nemotron_h_moe",
                              "granitemoe",
                              "deepseek_v2",
                              "deepseek_v3",
                              "deepseek_v3_skewed",
                              "awq_mixtral",
                              "ct_mixtral",
                              "mixtral_ep3",
                              "awq_mixtral@auto",
                              "fp8_mixtral",
                              "fp8_deepseek_v3",
                              "ernie4_5_moe",
                              "gpt_oss",
                              "gguf_qwen2_moe",
                              "gguf_qwen3_moe",
                              "gguf_olmoe",
                              "gguf_mixtral",
                              "gguf_deepseek_v3",
                              "gguf_granitemoe",
                              "gguf_ernie4_5_moe",
                              "gguf_gpt_oss",
                              "gguf_gpt_oss@auto",
                              "gpt_oss@auto"};

typedef enum mode { MODE_EP, MODE_SP, MODE_ASYNC, MODE_THRESHOLD, N_MODES } mode;
static const char *mode_names[] = {"EP", "EP+SP", "EP+async TP", "EP+SP above 4 tokens"};

typedef struct job {
    loom_model *m;
    golden *g;
    mode mode;
    bool alone;                   /* each sequence on its own: decode steps of one token */
    int pp;                       /* pipeline stages, each of the n expert-parallel ranks */
    float *out;                   /* shared with the forked ranks (MAP_SHARED), or local under MPI */
    long *received;               /* [MAX_MOE_LAYERS][ranks]: rows each rank's experts received (shared) */
    const loom_expert_load *load; /* place the experts by this profile (NULL: contiguous) */
    int redundant;                /* with this many spare copies of the hottest experts */
    const char *save_load;        /* rank 0 writes the run's expert load profile here */
} job;

static loom_engine_options options(loom_comm *comm, mode md, int pp) {
    loom_engine_options eo = golden_engine_options(NULL, comm); /* float32 KV */
    eo.max_ctx = GOLDEN_MAX_LEN;                                /* qwen3_5_moe's 73 positions */
    eo.pipeline_parallel = pp;
    eo.pp_microbatches = 2;
    eo.expert_parallel = true;
    eo.sequence_parallel = md != MODE_EP;
    eo.async_tp = md == MODE_ASYNC;
    eo.sp_min_tokens = md == MODE_THRESHOLD ? 4 : 0; /* prefill of 11 SP, decode of 2 plain EP */
    return eo;
}

/* Each sequence alone: its prefill, then its decode steps one token each. */
static int run_alone(loom_engine *e, const golden *g, float *out, loom_err *err) {
    for (int s = 0; s < 2; s++)
        if (golden_run_alone(e, g, s, out, err)) return -1;
    return 0;
}

static int rank_main(loom_comm *comm, void *arg) {
    job *j = arg;
    loom_err err = {{0}};
    loom_engine_options eo = options(comm, j->mode, j->pp);
    eo.expert_load = j->load;
    eo.redundant_experts = j->redundant;
    loom_engine *e = loom_engine_new(j->m, &eo, &err);
    size_t n = (size_t)golden_rows(j->g) * j->g->vocab;
    float *mine = malloc(n * sizeof *mine);
    int rc = e && (j->alone ? run_alone(e, j->g, mine, &err) : golden_run(e, j->g, mine, &err)) == 0 ? 0 : 1;
    if (!rc && j->save_load) {
        loom_expert_load *l = loom_engine_expert_load(e, &err);
        rc = !l || (loom_comm_rank(comm) == 0 && loom_expert_load_write(l, j->save_load, &err)) ? 1 : 0;
        loom_expert_load_free(l);
    }
    if (rc) fprintf(stderr, "rank %d: %s\n", loom_comm_rank(comm), err.msg);
    else if (loom_comm_rank(comm) == 0) {
        memcpy(j->out, mine, n * sizeof *mine);
        int ranks = loom_comm_size(comm);
        for (int l = 0; l < MAX_MOE_LAYERS; l++)
            for (int r = 0; r < ranks; r++) j->received[l * ranks + r] = engine_expert_rows(e, l, r);
    }
    free(mine);
    loom_engine_free(e);
    return rc;
}

/* Logits of case `name` on n ranks over backend (munmap'd by the caller), the rows each rank
 * received per MoE layer in *received ([MAX_MOE_LAYERS][n], when not NULL), or NULL. */
static float *run_placed(const char *name, golden *g, int n, int pp, mode md, bool alone, const char *backend,
                         long *received, const loom_expert_load *load, int redundant, const char *save_load,
                         loom_err *err) {
    loom_model *m = golden_load(name, err);
    if (!m) return NULL;
    size_t bytes;
    long *rows =
        mmap(NULL, MAX_MOE_LAYERS * 8 * sizeof *rows, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    job j = {m, g, md, alone, pp, golden_shared_logits(g, &bytes), rows, load, redundant, save_load};
    loom_engine_options eo = options(NULL, md, pp);
    float *out = golden_launch(m, n, pp, backend, &eo, rank_main, &j, j.out, bytes, err);
    if (received) memcpy(received, rows, MAX_MOE_LAYERS * n * sizeof *rows);
    munmap(rows, MAX_MOE_LAYERS * 8 * sizeof *rows);
    return out;
}

static float *run_pp(const char *name, golden *g, int n, int pp, mode md, bool alone, const char *backend,
                     long *received, loom_err *err) {
    return run_placed(name, g, n, pp, md, alone, backend, received, NULL, 0, NULL, err);
}

static float *run(const char *name, golden *g, int n, mode md, bool alone, const char *backend, long *received,
                  loom_err *err) {
    return run_pp(name, g, n, 1, md, alone, backend, received, err);
}

/* `--mpi-dump CASE MODE FILE`: MODE + 10: each sequence alone */
static int mpi_dump(const char *name, int md, const char *path) {
    golden g;
    if (golden_open(&g, name, "logits")) return 1;
    loom_err err = {{0}};
    float *out = run(name, &g, 2, (mode)(md % 10), md >= 10, "mpi", NULL, &err);
    if (!out) fprintf(stderr, "test_expert --mpi-dump %s: %s\n", name, err.msg);
    golden_dump(out, (size_t)golden_rows(&g) * g.vocab, path);
    golden_close(&g);
    return out ? 0 : 1;
}

static void check_mpi_matches_shm(const char *name, int md, const golden *g, const float *shm) {
    if (!mpi_available("test_expert")) return;
    char args[256];
    snprintf(args, sizeof args, "%s %d", name, md);
    size_t n = (size_t)golden_rows(g) * g->vocab;
    float *mpi = golden_mpi_run(2, args, n);
    CHECK(mpi && !memcmp(mpi, shm, n * sizeof *mpi), "%s (%s%s): MPI logits are not bit-identical to shm", name,
          mode_names[md % 10], md >= 10 ? ", alone" : "");
    free(mpi);
}

/* The cases also run over MPI at 2 ranks: a plain mixture, one with a gated shared expert, one
 * with latent attention and shared experts. */
static bool over_mpi(const char *name) {
    return !strcmp(name, "olmoe") || !strcmp(name, "qwen2_moe") || !strcmp(name, "deepseek_v3") ||
           !strcmp(name, "awq_mixtral@auto");
}

/* Rows received per rank, in the MoE layers that ran (a layer whose ranks all got nothing did
 * not run: the skewed case's dense layer). */
static void check_skew(const char *name, int n, const long *received, bool alone) {
    int layers = 0;
    for (int l = 0; l < MAX_MOE_LAYERS; l++) {
        if (received[l * n] < 0) break;
        layers++;
        for (int r = 1; r < n; r++)
            CHECK(received[l * n + r] == 0,
                  "%s at %d ranks%s: MoE layer %d sent rank %d %ld rows, though every token "
                  "chose experts 0 and 1 (rank 0's)",
                  name, n, alone ? " (alone)" : "", l, r, received[l * n + r]);
        CHECK(received[l * n] > 0, "%s: rank 0 received no row in MoE layer %d", name, l);
    }
    CHECK(layers > 0, "%s: no MoE layer counted", name);
    printf("%-18s ep=%d%s: rank 0 received %ld rows in its MoE layer, ranks 1..%d none\n", name, n,
           alone ? " alone" : "", received[0], n - 1);
}

/* The skewed golden placed by its own load profile (a contiguous run at n ranks writes it), with
 * `redundant` spare copies of its hottest experts: within ATOL of transformers, and its rows
 * spread: at 2 ranks the two hot experts apart, equal rows; at 4, two copies of each, every rank
 * receiving rows and none more than 1.25x the mean (contiguous: all on rank 0). */
static void check_placement(const char *name, golden *g, int n, int redundant, const float *contiguous) {
    char path[128];
    snprintf(path, sizeof path, "/tmp/loom-test-expert-load-%d.json", (int)getpid());
    loom_err err = {{0}};
    long received[MAX_MOE_LAYERS * 4];
    size_t bytes = (size_t)golden_rows(g) * g->vocab * sizeof(float);
    float *profiled = run_placed(name, g, n, 1, MODE_EP, false, "shm", NULL, NULL, 0, path, &err);
    loom_expert_load *load = profiled ? loom_expert_load_read(path, &err) : NULL;
    CHECK(load, "%s: the expert load profile: %s", name, err.msg);
    float *placed =
        load ? run_placed(name, g, n, 1, MODE_SP, false, "shm", received, load, redundant, NULL, &err) : NULL;
    CHECK(placed, "%s: EP+SP at %d ranks placed by load with %d spare copies: %s", name, n, redundant, err.msg);
    if (placed) {
        double worst = golden_worst(g, placed);
        long most = 0, least = received[0], sum = 0;
        for (int r = 0; r < n; r++) {
            most = received[r] > most ? received[r] : most, sum += received[r];
            least = received[r] < least ? received[r] : least;
        }
        CHECK(worst <= ATOL, "%s placed by load at %d ranks: max |logit diff| vs transformers %.3g", name, n, worst);
        CHECK(least > 0 && (n == 2 ? most == least : most * n <= 1.25 * sum),
              "%s placed by load at %d ranks with %d spare copies: rows received from %ld to %ld per rank", name, n,
              redundant, least, most);
        printf("%-18s ep=%d placed by its load profile, %d spare copies: rows received %ld to %ld per rank "
               "(contiguous: all on rank 0); max |logit diff| vs transformers %.2e; bit-identical to contiguous: %s\n",
               name, n, redundant, least, most, worst, !memcmp(placed, contiguous, bytes) ? "yes" : "no");
        munmap(placed, bytes);
    }
    if (profiled) munmap(profiled, bytes);
    loom_expert_load_free(load);
    remove(path);
}

static void one_case(const char *name) {
    golden g;
    if (golden_open(&g, name, "logits")) {
        CHECK(0, "%s: cannot read golden data", name);
        return;
    }
    size_t bytes = (size_t)golden_rows(&g) * g.vocab * sizeof(float);
    bool skewed = strstr(name, "skewed") != NULL;
    for (int n = 2; n <= 4; n++) {
        loom_err lerr = {{0}};
        int divide = golden_heads_divide(name, n, &lerr); /* attention stays tensor-parallel */
        CHECK(divide >= 0, "%s: %s", name, lerr.msg);
        if (divide <= 0) continue;
        loom_err err = {{0}};
        long received[MAX_MOE_LAYERS * 4];
        float *runs[N_MODES], *alone[2];
        for (int md = 0; md < N_MODES; md++) runs[md] = run(name, &g, n, (mode)md, false, "shm", received, &err);
        CHECK(runs[MODE_EP], "%s ep=%d: %s", name, n, err.msg);
        if (!runs[MODE_EP]) continue;
        if (skewed) check_skew(name, n, received, false);
        if (skewed && n == 2) check_placement(name, &g, 2, 0, runs[MODE_EP]);
        if (skewed && n == 4) check_placement(name, &g, 4, 2, runs[MODE_EP]);
        double worst = golden_worst(&g, runs[MODE_EP]);
        CHECK(golden_reduced(name) || worst <= ATOL, "%s ep=%d: max |logit diff| vs transformers %.3g", name, n, worst);
        for (int md = 1; md < N_MODES; md++)
            CHECK(runs[md] && !memcmp(runs[md], runs[MODE_EP], bytes), "%s ep=%d: %s is not bit-identical to EP: %s",
                  name, n, mode_names[md], runs[md] ? "they differ" : err.msg);
        /* alone: one-token decode steps */
        alone[0] = run(name, &g, n, MODE_EP, true, "shm", NULL, &err);
        alone[1] = run(name, &g, n, MODE_SP, true, "shm", received, &err);
        CHECK(alone[0] && alone[1], "%s ep=%d alone: %s", name, n, err.msg);
        double worst_alone = alone[0] ? golden_worst(&g, alone[0]) : 1;
        CHECK(golden_reduced(name) || worst_alone <= ATOL, "%s ep=%d alone: max |logit diff| vs transformers %.3g",
              name, n, worst_alone);
        CHECK(alone[0] && alone[1] && !memcmp(alone[0], alone[1], bytes),
              "%s ep=%d alone: EP+SP is not bit-identical to EP", name, n);
        if (skewed && alone[1]) check_skew(name, n, received, true);
        printf("%-18s ep=%d max |logit diff| vs transformers: %.2e (batch), %.2e (alone, 1-token decode); "
               "EP+SP, async, threshold == EP: %s\n",
               name, n, worst, worst_alone,
               runs[1] && runs[2] && runs[3] && !memcmp(runs[1], runs[0], bytes) && !memcmp(runs[2], runs[0], bytes) &&
                       !memcmp(runs[3], runs[0], bytes)
                   ? "yes"
                   : "no");
        if (n == 2 && over_mpi(name)) { /* and in two pipeline stages of 2 expert-parallel ranks */
            float *pp = run_pp(name, &g, 2, 2, MODE_SP, false, "shm", NULL, &err);
            CHECK(pp && runs[MODE_SP] && !memcmp(pp, runs[MODE_SP], bytes),
                  "%s: EP+SP at tp=2 x pp=2 is not bit-identical to EP+SP at 2 ranks: %s", name,
                  pp ? "they differ" : err.msg);
            if (pp) munmap(pp, bytes);
            check_mpi_matches_shm(name, MODE_EP, &g, runs[MODE_EP]);
            if (runs[MODE_SP]) check_mpi_matches_shm(name, MODE_SP, &g, runs[MODE_SP]);
            if (alone[1]) check_mpi_matches_shm(name, 10 + MODE_SP, &g, alone[1]);
        }
        for (int md = 0; md < N_MODES; md++)
            if (runs[md]) munmap(runs[md], bytes);
        for (int k = 0; k < 2; k++)
            if (alone[k]) munmap(alone[k], bytes);
    }
    golden_close(&g);
}

/* `loom plan` shows each expert-parallel region's rows, dispatch, combine, exit and verdict. */
static void plan_shows(const char *flags, const char *const *want) {
    char cmd[1024], out[1 << 16];
    snprintf(cmd, sizeof cmd, "%s plan -m %s/tests/golden/qwen2_moe -tp 2 --enable-expert-parallel %s 2>&1", LOOM_BIN,
             LOOM_SOURCE_DIR, flags);
    FILE *f = popen(cmd, "r");
    size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
    out[n] = 0;
    CHECK(f && pclose(f) == 0, "loom plan %s failed: %s", flags, out);
    for (int i = 0; want[i]; i++)
        CHECK(strstr(out, want[i]), "loom plan %s does not say '%s':\n%s", flags, want[i], out);
}

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[1], "--mpi-dump")) return mpi_dump(argv[2], atoi(argv[3]), argv[4]);
    check_cpu_variant();
    if (argc < 2) {
        const char *sp[] = {"region model.layers.0.mlp           expert parallel: this rank's token shard in directly",
                            "dispatch: all_to_all, one row per (token, owning rank), [rows, 64 + 2 x 2]",
                            "rank 0 holds experts 0..3 of 8",
                            "combine: all_to_all back",
                            "every token's rows (an all_gather of the region input), then 1 reduce_scatter",
                            "exit: none, this rank's complete rows are its residual shard; verified",
                            NULL};
        const char *tp[] = {"expert parallel: its rows sliced from every token's",
                            "every token's rows (the region input as it is), then 1 reduce_scatter",
                            "exit: all_gather of every rank's complete rows", NULL};
        plan_shows("--enable-sequence-parallel", sp);
        plan_shows("", tp);
    }
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        if (argc < 2 || !strcmp(argv[1], cases[c])) one_case(cases[c]);
    return check_done();
}

/* Data parallelism against the oracles. Replicas (-dp) run sequences of their own: replica d
 * runs golden sequence d alone (its prefill, then one-token decode steps), its first rank
 * writing its logits.
 *  - The seed's run, and every mixture-of-experts golden where the heads divide: tp=2 x dp=2 with
 *    the experts spread over all four ranks, whole (EP) or each expert's features split
 *    (TP-MoE), each with and without SP, SP bit-identical to plain and all within 1e-4 of
 *    transformers, and in two pipeline stages (tp=2 x dp=2 x pp=2, eight ranks) bit-identical
 *    to one; olmoe over MPI bit-identical to shm.
 *  - Dense models at dp=2: each sequence's logits bit-identical to dp=1's.
 *  - An idle replica: replica 1 runs nothing while replica 0 runs both sequences one after the
 *    other; its experts serve replica 0's tokens in empty passes, nothing hangs, and replica 0's
 *    logits are as in the seed's run.
 * `test_data_parallel CASE` runs one case; `--mpi-dump CASE MODE FILE` is what mpirun starts. */
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "comm/comm.h"
#include "golden_util.h"

#define ATOL 1e-4

static const char *moe_cases[] = {"olmoe",      "mixtral",     "qwen2_moe",          "qwen3_moe",
                                  "granitemoe", "deepseek_v2", "deepseek_v3_skewed", "ct_mixtral"};
static const char *dense_cases[] = {"llama", "qwen2", "mistral", "gptq_llama"};

/* EP: whole experts spread over the four ranks; TP: every expert's features split over them
 * (no --enable-expert-parallel) */
typedef enum mode { MODE_EP, MODE_EP_SP, MODE_TP, MODE_TP_SP, MODE_IDLE, MODE_TP_IDLE, MODE_DENSE } mode;
static const char *mode_names[] = {
    "EP", "EP+SP", "TP-MoE", "TP-MoE+SP", "EP, replica 1 idle", "TP-MoE, replica 1 idle", "dense"};

typedef struct job {
    loom_model *m;
    const golden *g;
    mode mode;
    int tp, dp, pp;
    const char *partition; /* layers per stage (NULL: even) */
    float *out;            /* shared with the forked ranks (MAP_SHARED), or local under MPI */
} job;

static loom_engine_options options(loom_comm *comm, mode md, int dp, int pp, const char *partition) {
    loom_engine_options eo = golden_engine_options(NULL, comm); /* float32 KV */
    eo.data_parallel = dp;
    eo.pipeline_parallel = pp;
    eo.expert_parallel = md == MODE_EP || md == MODE_EP_SP || md == MODE_IDLE;
    eo.sequence_parallel = md == MODE_EP_SP || md == MODE_TP_SP;
    eo.pp_layer_partition = partition;
    eo.sp_min_tokens = 0;
    return eo;
}

/* Sequence s's rows, from the replica's first rank that ran it (world rank `writer`) to every
 * rank: under MPI the ranks share no memory, and world rank 0 writes the file. */
static int share_rows(loom_comm *comm, const golden *g, int s, int writer, float *rows, loom_err *err) {
    for (int i = 0; i < g->n[s]; i++)
        if (comm_broadcast_floats(comm, writer, rows + (size_t)golden_row(g, s, i) * g->vocab, g->vocab, err))
            return -1;
    return 0;
}

static int rank_main(loom_comm *comm, void *arg) {
    job *j = arg;
    loom_err err = {{0}};
    loom_engine_options eo = options(comm, j->mode, j->dp, j->pp, j->partition);
    loom_engine *e = loom_engine_new(j->m, &eo, &err);
    size_t n = (size_t)golden_rows(j->g) * j->g->vocab;
    float *mine = calloc(n, sizeof *mine);
    int rc = e && mine ? 0 : -1;
    loom_engine_stats st = {0};
    if (e) loom_engine_get_stats(e, &st);
    bool idle = j->mode == MODE_IDLE || j->mode == MODE_TP_IDLE;
    if (!rc && idle) { /* replica 0 runs both sequences, replica 1 only serves its experts */
        for (int s = 0; s < 2 && !rc && st.replica == 0; s++) rc = golden_run_alone(e, j->g, s, mine, &err);
    } else {
        for (int s = st.replica; s < 2 && !rc; s += st.replicas) rc = golden_run_alone(e, j->g, s, mine, &err);
    }
    if (!rc) rc = loom_engine_wait_replicas(e, &err);
    for (int s = 0; s < 2 && !rc; s++) /* replica r's first rank is world rank r * tp */
        rc = share_rows(comm, j->g, s, idle ? 0 : (s % j->dp) * j->tp, mine, &err);
    if (!rc && loom_comm_rank(comm) == 0) memcpy(j->out, mine, n * sizeof *mine);
    if (rc) fprintf(stderr, "rank %d: %s\n", loom_comm_rank(comm), err.msg);
    free(mine);
    loom_engine_free(e);
    return rc ? 1 : 0;
}

/* Logits of case `name` at tp x dp x pp in mode md over backend (munmap'd by the caller), or NULL. */
static float *run(const char *name, const golden *g, int tp, int dp, int pp, mode md, const char *backend,
                  loom_err *err) {
    loom_model *m = golden_load(name, err);
    if (!m) return NULL;
    size_t bytes;
    /* deepseek's first layer is dense: alone on stage 0 (deepseek_v3_skewed's two layers split
     * so as they are), that stage holds no experts and still steps with the replicas */
    const char *partition = pp == 2 && !strcmp(name, "deepseek_v2") ? "1,2" : NULL;
    job j = {m, g, md, tp, dp, pp, partition, golden_shared_logits(g, &bytes)};
    loom_engine_options eo = options(NULL, md, dp, pp, partition);
    return golden_launch_dp(m, tp, dp, pp, backend, &eo, rank_main, &j, j.out, bytes, err);
}

/* `--mpi-dump CASE MODE FILE`: tp=2 x dp=2 under mpirun */
static int mpi_dump(const char *name, int md, const char *path) {
    golden g;
    if (golden_open(&g, name, "logits")) return 1;
    loom_err err = {{0}};
    float *out = run(name, &g, 2, 2, 1, (mode)md, "mpi", &err);
    if (!out) fprintf(stderr, "test_data_parallel --mpi-dump %s: %s\n", name, err.msg);
    golden_dump(out, (size_t)golden_rows(&g) * g.vocab, path);
    golden_close(&g);
    return out ? 0 : 1;
}

/* The experts over tp=2 x dp=2 one way (EP or TP-MoE), with and without SP: each within ATOL of
 * transformers, SP bit-identical to plain, and two stages to one; the olmoe golden also with
 * replica 1 idle, and over MPI. */
static void moe_family(const char *name, const golden *g, mode plain) {
    mode with_sp = plain + 1, idle_mode = plain == MODE_EP ? MODE_IDLE : MODE_TP_IDLE;
    size_t bytes = (size_t)golden_rows(g) * g->vocab * sizeof(float);
    loom_err err = {{0}};
    float *out[2] = {run(name, g, 2, 2, 1, plain, "shm", &err), NULL};
    CHECK(out[0], "%s tp=2 x dp=2 %s: %s", name, mode_names[plain], err.msg);
    out[1] = run(name, g, 2, 2, 1, with_sp, "shm", &err);
    CHECK(out[1], "%s tp=2 x dp=2 %s: %s", name, mode_names[with_sp], err.msg);
    double worst[2];
    for (int i = 0; i < 2; i++) {
        worst[i] = out[i] ? golden_worst(g, out[i]) : 1;
        CHECK(worst[i] <= ATOL, "%s tp=2 x dp=2 %s: max |logit diff| vs transformers %.3g", name, mode_names[plain + i],
              worst[i]);
    }
    bool same = out[0] && out[1] && !memcmp(out[0], out[1], bytes);
    CHECK(same, "%s tp=2 x dp=2: %s is not bit-identical to %s", name, mode_names[with_sp], mode_names[plain]);
    printf("%-18s tp=2 x dp=2: max |logit diff| vs transformers %.2e (%s), %.2e (%s); bit-identical: %s\n", name,
           worst[0], mode_names[plain], worst[1], mode_names[with_sp], same ? "yes" : "no");
    /* two stages (a layer each: deepseek_v2's first is dense, so its stage 0 has no experts
     * and still steps with the replicas) */
    float *pp = run(name, g, 2, 2, 2, with_sp, "shm", &err);
    CHECK(pp && out[1] && !memcmp(pp, out[1], bytes),
          "%s: %s at tp=2 x dp=2 x pp=2 is not bit-identical to one stage: %s", name, mode_names[with_sp],
          pp ? "they differ" : err.msg);
    if (pp) munmap(pp, bytes);
    if (!strcmp(name, "olmoe")) { /* the seed's model: an idle replica, and MPI */
        float *idle = run(name, g, 2, 2, 1, idle_mode, "shm", &err);
        double worst_idle = idle ? golden_worst(g, idle) : 1;
        CHECK(idle && worst_idle <= ATOL, "%s tp=2 x dp=2 %s: %s (max |logit diff| %.3g)", name, mode_names[idle_mode],
              idle ? "logits off" : err.msg, worst_idle);
        printf("%-18s tp=2 x dp=2 %s throughout: max |logit diff| vs transformers %.2e\n", name, mode_names[idle_mode],
               worst_idle);
        for (int i = 0; i < 2 && mpi_available("test_data_parallel"); i++) {
            char args[256];
            snprintf(args, sizeof args, "%s %d", name, plain + i);
            size_t n = (size_t)golden_rows(g) * g->vocab;
            float *mpi = golden_mpi_run(4, args, n);
            CHECK(mpi && out[i] && !memcmp(mpi, out[i], n * sizeof *mpi),
                  "%s tp=2 x dp=2 %s: MPI logits are not bit-identical to shm", name, mode_names[plain + i]);
            free(mpi);
        }
        if (idle) munmap(idle, bytes);
    }
    for (int i = 0; i < 2; i++)
        if (out[i]) munmap(out[i], bytes);
}

static void moe_case(const char *name) {
    golden g;
    if (golden_open(&g, name, "logits")) {
        CHECK(0, "%s: cannot read golden data", name);
        return;
    }
    loom_err err = {{0}};
    int divide = golden_heads_divide(name, 2, &err);
    CHECK(divide >= 0, "%s: %s", name, err.msg);
    if (divide > 0) {
        moe_family(name, &g, MODE_EP);
        moe_family(name, &g, MODE_TP);
    } else if (!divide) {
        printf("%-18s skipped: its attention heads do not split over tp=2\n", name);
    }
    golden_close(&g);
}

static void dense_case(const char *name) {
    golden g;
    if (golden_open(&g, name, "logits")) {
        CHECK(0, "%s: cannot read golden data", name);
        return;
    }
    size_t bytes = (size_t)golden_rows(&g) * g.vocab * sizeof(float);
    for (int tp = 1; tp <= 2; tp++) {
        loom_err err = {{0}};
        float *one = run(name, &g, tp, 1, 1, MODE_DENSE, "shm", &err);
        CHECK(one, "%s tp=%d dp=1: %s", name, tp, err.msg);
        float *two = run(name, &g, tp, 2, 1, MODE_DENSE, "shm", &err);
        CHECK(two, "%s tp=%d dp=2: %s", name, tp, err.msg);
        bool same = one && two && !memcmp(one, two, bytes);
        CHECK(same, "%s tp=%d: dp=2's logits are not bit-identical to dp=1's", name, tp);
        double worst = two ? golden_worst(&g, two) : 1;
        CHECK(golden_reduced(name) || worst <= ATOL, "%s tp=%d dp=2: max |logit diff| vs transformers %.3g", name, tp,
              worst);
        printf("%-18s tp=%d x dp=2: each sequence == dp=1: %s; max |logit diff| vs transformers %.2e\n", name, tp,
               same ? "yes" : "no", worst);
        if (one) munmap(one, bytes);
        if (two) munmap(two, bytes);
    }
    golden_close(&g);
}

/* Refusals: experts whose features do not split over -tp x -dp, and a job started with another
 * layout. */
static void check_refusals(void) {
    char dir[900];
    golden_dir(dir, sizeof dir, "olmoe");
    loom_model_options mo = {.path = dir, .dtype = "float32"};
    loom_err err = {{0}};
    loom_model *m = loom_model_load(&mo, &err);
    CHECK(m, "olmoe: %s", err.msg);
    if (!m) return;
    loom_engine_options eo = options(NULL, MODE_TP, 5, 1, NULL); /* its experts have 48 features */
    CHECK(loom_check_sharding(m, 1, &eo, &err) && strstr(err.msg, "48 features, not divisible by 5 ranks") &&
              strstr(err.msg, "--enable-expert-parallel"),
          "olmoe's experts over -tp 1 x -dp 5 must be refused, naming the ranks and the flag: '%s'", err.msg);
    eo.data_parallel = 2, eo.expert_parallel = true;
    CHECK(!loom_engine_new(m, &eo, &err) && strstr(err.msg, "-dp 2 x -pp 1: the job's 1 ranks were started as"),
          "an engine asking for -dp 2 on one rank must be refused: '%s'", err.msg);
    loom_model_free(m);
}

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[1], "--mpi-dump")) return mpi_dump(argv[2], atoi(argv[3]), argv[4]);
    check_cpu_variant();
    if (argc < 2) check_refusals();
    for (size_t c = 0; c < sizeof moe_cases / sizeof *moe_cases; c++)
        if (argc < 2 || !strcmp(argv[1], moe_cases[c])) moe_case(moe_cases[c]);
    for (size_t c = 0; c < sizeof dense_cases / sizeof *dense_cases; c++)
        if (argc < 2 || !strcmp(argv[1], dense_cases[c])) dense_case(dense_cases[c]);
    return check_done();
}

/* Pipeline parallelism against the oracles. Every golden model runs in two stages (pp=2) and,
 * where its shapes divide by two, in two stages of two tensor-parallel ranks (tp=2 x pp=2) with
 * TP, SP and async TP; each must match transformers within 1e-4 at every position. A stage
 * boundary moves the hidden state and does no arithmetic, so pp=2 must be bit-identical to one
 * rank, and tp=2 x pp=2 to tp=2 with the same flags. The passes split into microbatches (one per
 * sequence: --pp-microbatches 2), so the batch's two sequences also flow through the stages
 * apart. Over MPI, a dense model, a mixture and latent attention must be bit-identical to shm.
 * `test_pipeline --mpi-dump CASE TP MODE FILE` is the mode mpirun starts. */
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "golden_util.h"

#define ATOL 1e-4

/* (the last three again with --dtype auto: bf16 and int8 activations, golden_util.h; awq_llama's
 * regions gather int8 rows under SP) */
static const char *cases[] = {ARCH_CASES,        QUANTIZED_CASES,  "llama_bf16@auto",
                              "gptq_llama@auto", "awq_llama@auto", KV_CASES};

typedef enum mode { MODE_TP, MODE_SP, MODE_ASYNC } mode;
static const char *mode_names[] = {"TP", "SP", "async TP"};

typedef struct job {
    loom_model *m;
    golden *g;
    int pp;
    mode mode;
    float *out; /* shared with the forked ranks (MAP_SHARED), or local under MPI */
} job;

static int rank_main(loom_comm *comm, void *arg) {
    job *j = arg;
    loom_err err = {{0}};
    loom_engine_options eo = golden_engine_options(j->g, comm);
    eo.sequence_parallel = j->mode != MODE_TP;
    eo.async_tp = j->mode == MODE_ASYNC;
    eo.pipeline_parallel = j->pp;
    eo.pp_microbatches = 2;
    loom_engine *e = loom_engine_new(j->m, &eo, &err);
    size_t n = (size_t)golden_rows(j->g) * j->g->vocab;
    float *mine = malloc(n * sizeof *mine);
    int rc = e && golden_run(e, j->g, mine, &err) == 0 ? 0 : 1;
    if (rc) fprintf(stderr, "rank %d: %s\n", loom_comm_rank(comm), err.msg);
    else if (loom_comm_rank(comm) == 0) memcpy(j->out, mine, n * sizeof *mine);
    free(mine);
    loom_engine_free(e);
    return rc;
}

/* Case `name` at tp x pp ranks over backend: the logits (munmap'd by the caller), or NULL. */
static float *run(const char *name, golden *g, int tp, int pp, mode md, const char *backend, loom_err *err) {
    loom_model *m = golden_load(name, err);
    if (!m) return NULL;
    job j = {m, g, pp, md, NULL};
    size_t bytes;
    float *out = j.out = golden_shared_logits(g, &bytes);
    loom_engine_options eo = golden_engine_options(g, NULL);
    eo.sequence_parallel = md != MODE_TP, eo.pipeline_parallel = pp;
    return golden_launch(m, tp, pp, backend, &eo, rank_main, &j, out, bytes, err);
}

static int mpi_dump(const char *name, int tp, int md, const char *path) {
    golden g;
    if (golden_open(&g, name, "logits")) return 1;
    loom_err err = {{0}};
    float *out = run(name, &g, tp, 2, (mode)md, "mpi", &err);
    if (!out) fprintf(stderr, "test_pipeline --mpi-dump %s: %s\n", name, err.msg);
    golden_dump(out, (size_t)golden_rows(&g) * g.vocab, path);
    golden_close(&g);
    return out ? 0 : 1;
}

/* The same run over MPI (mpirun starting this binary on tp x 2 ranks) must give shm's bits. */
static void check_mpi_matches_shm(const char *name, int tp, mode md, const golden *g, const float *shm) {
    char args[256];
    snprintf(args, sizeof args, "%s %d %d", name, tp, md);
    size_t n = (size_t)golden_rows(g) * g->vocab;
    float *mpi = golden_mpi_run(2 * tp, args, n);
    bool same = mpi && !memcmp(mpi, shm, n * sizeof *mpi);
    CHECK(same, "%s tp=%d x pp=2 (%s): MPI logits are not bit-identical to shm", name, tp, mode_names[md]);
    printf("%-12s tp=%d x pp=2 (%s) over MPI: %s shm\n", name, tp, mode_names[md], same ? "==" : "!=");
    free(mpi);
}

static bool over_mpi(const char *name) {
    return !strcmp(name, "llama") || !strcmp(name, "qwen2_moe") || !strcmp(name, "deepseek_v3") ||
           !strcmp(name, "gptq_llama@auto") || !strcmp(name, "awq_llama@auto");
}

/* pp stages against the same ranks in one stage: within the tolerance of transformers, and the
 * same bits. */
static void check_stages(const char *name, golden *g, int tp, mode md, const float *flat) {
    loom_err err = {{0}};
    float *out = run(name, g, tp, 2, md, "shm", &err);
    CHECK(out, "%s tp=%d x pp=2 (%s): %s", name, tp, mode_names[md], err.msg);
    if (!out) return;
    size_t bytes = (size_t)golden_rows(g) * g->vocab * sizeof(float);
    double worst = golden_worst(g, out);
    bool same = !memcmp(out, flat, bytes);
    CHECK(golden_reduced(name) || worst <= ATOL, "%s tp=%d x pp=2 (%s): max |logit diff| vs transformers %.3g", name,
          tp, mode_names[md], worst);
    CHECK(same, "%s tp=%d x pp=2 (%s): logits are not bit-identical to tp=%d alone (max diff %.3g)", name, tp,
          mode_names[md], tp, max_abs_diff(out, flat, golden_rows(g) * g->vocab));
    printf("%-12s tp=%d x pp=2 (%s) max |logit diff| vs transformers: %.2e; %s tp=%d alone\n", name, tp, mode_names[md],
           worst, same ? "==" : "!=", tp);
    if (over_mpi(name) && mpi_available("test_pipeline") && (tp == 1 || md == MODE_SP))
        check_mpi_matches_shm(name, tp, md, g, out);
    munmap(out, bytes);
}

int main(int argc, char **argv) {
    if (argc == 6 && !strcmp(argv[1], "--mpi-dump")) return mpi_dump(argv[2], atoi(argv[3]), atoi(argv[4]), argv[5]);
    check_cpu_variant();
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        if (argc == 2 && strcmp(argv[1], cases[c])) continue; /* `test_pipeline CASE`: that case alone */
        golden g;
        if (golden_open(&g, cases[c], "logits")) {
            CHECK(0, "%s: cannot read golden data", cases[c]);
            continue;
        }
        size_t bytes = (size_t)golden_rows(&g) * g.vocab * sizeof(float);
        loom_err err = {{0}};
        float *one = run(cases[c], &g, 1, 1, MODE_TP, "shm", &err);
        CHECK(one, "%s tp=1: %s", cases[c], err.msg);
        if (one) check_stages(cases[c], &g, 1, MODE_TP, one), munmap(one, bytes);
        for (int md = MODE_TP; md <= MODE_ASYNC; md++) {
            float *flat = run(cases[c], &g, 2, 1, (mode)md, "shm", &err);
            if (!flat) { /* shapes that do not divide by 2: test_parallel checks the refusal */
                printf("%-12s tp=2 refused: %s\n", cases[c], err.msg);
                break;
            }
            check_stages(cases[c], &g, 2, (mode)md, flat);
            munmap(flat, bytes);
        }
        golden_close(&g);
    }
    return check_done();
}

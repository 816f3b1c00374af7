/* `loom verify`: the seeds' validation table. The same prompts run greedily under tp=1, TP,
 * TP + sequence parallelism and async TP (each mode its own job, so every one starts from a
 * fresh process; with -dp the parallel modes spread the prompts over the replicas, with -ep
 * their experts are expert-parallel); per mode: how many prompts give the same greedy tokens as TP and as tp=1, the
 * first position where they diverge, and the largest logit difference up to there. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cli.h"
#include "runtime/sampling.h"
#include "util/alloc.h"

#define N_PROMPTS 4

static const char *default_prompts[N_PROMPTS] = {
    "Once upon a time", "The capital of France is",
    "def fibonacci(n):", "In a shocking finding, scientists discovered a herd of unicorns living in a remote valley"};

typedef struct verify_job {
    loom_model *m;
    int vocab, n_new, n_prompt[N_PROMPTS];
    int32_t *prompt[N_PROMPTS];
    float *logits; /* [N_PROMPTS][n_new][vocab], shared with the job's ranks */
    int32_t *ids;  /* [N_PROMPTS][n_new] */
    loom_engine_options eo;
} verify_job;

/* Greedy generation of each prompt, recording every step's logits; with data parallelism,
 * replica r takes prompts r, r + dp, ... */
static int verify_rank(loom_comm *comm, void *arg) {
    verify_job *j = arg;
    loom_err err = {{0}};
    loom_engine *e = cli_rank_engine("verify", comm, j->m, &j->eo);
    if (!e) return 1;
    loom_engine_stats es;
    loom_engine_get_stats(e, &es);
    /* the replica's first rank records (every rank of it holds the same logits) */
    bool records = es.stage == 0 && es.rank % (es.ranks / es.replicas / es.stages) == 0;
    int rc = 0, max = 0;
    for (int p = 0; p < N_PROMPTS; p++) max = j->n_prompt[p] > max ? j->n_prompt[p] : max;
    int32_t *pos = mem_array((size_t)max, sizeof *pos, "the positions", &err), tok;
    int32_t *seq = pos ? mem_zalloc((size_t)max, sizeof *seq, "the sequences", &err) : NULL;
    if (!seq) rc = -1;
    for (int p = es.replica; p < N_PROMPTS && !rc; p += es.replicas) {
        loom_engine_reset_seq(e, 0);
        const int32_t *ids = j->prompt[p];
        int n = j->n_prompt[p];
        for (int step = 0; step < j->n_new && !rc; step++) {
            int start = step ? j->n_prompt[p] + step - 1 : 0;
            for (int i = 0; i < n; i++) pos[i] = start + i;
            int32_t last = n - 1;
            loom_batch b = {n, ids, pos, seq, 1, &last, NULL};
            const float *lg;
            rc = loom_forward(e, &b, &lg, &err);
            if (rc) break;
            tok = logits_argmax(lg, j->vocab); /* every rank holds the same logits, so picks the same */
            if (records) {
                memcpy(j->logits + ((size_t)p * j->n_new + step) * j->vocab, lg, j->vocab * sizeof *lg);
                j->ids[p * j->n_new + step] = tok;
            }
            ids = &tok;
            n = 1;
        }
    }
    if (!rc) rc = loom_engine_wait_replicas(e, &err);
    if (rc) cli_rank_error("verify", comm, &err);
    free(pos);
    free(seq);
    loom_engine_free(e);
    return rc ? 1 : 0;
}

typedef struct mode_result {
    const char *name;
    float *logits;
    int32_t *ids;
} mode_result;

/* Prompts identical to ref, the earliest divergence, and the max logit difference before it. */
static void compare(const verify_job *j, const mode_result *a, const mode_result *ref, int *same, int *first,
                    double *maxdiff) {
    *same = 0, *first = -1, *maxdiff = 0;
    for (int p = 0; p < N_PROMPTS; p++) {
        int d = -1;
        for (int s = 0; s < j->n_new && d < 0; s++) {
            const float *x = a->logits + ((size_t)p * j->n_new + s) * j->vocab;
            const float *y = ref->logits + ((size_t)p * j->n_new + s) * j->vocab;
            for (int v = 0; v < j->vocab; v++) {
                double diff = fabs((double)x[v] - y[v]);
                if (!(diff <= *maxdiff)) *maxdiff = diff;
            }
            if (a->ids[p * j->n_new + s] != ref->ids[p * j->n_new + s]) d = s;
        }
        if (d < 0) (*same)++;
        else if (*first < 0 || d < *first) *first = d;
    }
}

static void print_table(const verify_job *j, const mode_result *r, int n_modes) {
    printf("%-10s %-22s %-22s %-18s %-18s\n", "mode", "same greedy as TP", "same greedy as tp=1", "max |dlogit| TP",
           "max |dlogit| tp=1");
    for (int i = 0; i < n_modes; i++) {
        int s_tp, f_tp, s_1, f_1;
        double d_tp, d_1;
        compare(j, &r[i], &r[1], &s_tp, &f_tp, &d_tp);
        compare(j, &r[i], &r[0], &s_1, &f_1, &d_1);
        char a[32], b[32];
        snprintf(a, sizeof a, "%d/%d%s", s_tp, N_PROMPTS, f_tp >= 0 ? " (diverges @" : "");
        if (f_tp >= 0) snprintf(a + strlen(a), sizeof a - strlen(a), "%d)", f_tp);
        snprintf(b, sizeof b, "%d/%d%s", s_1, N_PROMPTS, f_1 >= 0 ? " (diverges @" : "");
        if (f_1 >= 0) snprintf(b + strlen(b), sizeof b - strlen(b), "%d)", f_1);
        printf("%-10s %-22s %-22s %-18.3g %-18.3g%s\n", r[i].name, a, b, d_tp, d_1,
               i > 1 && d_tp == 0 && s_tp == N_PROMPTS ? "  bit-identical to TP" : "");
    }
}

/* The prompts to compare on; -1 with e set when out of memory. */
static int make_prompts(verify_job *j, const cli_common *c, loom_err *e) {
    loom_model_info info;
    loom_model_get_info(j->m, &info);
    uint64_t rng = c->seed + 7;
    for (int p = 0; p < N_PROMPTS; p++) {
        size_t n = 0;
        loom_err err = {{0}};
        if (!c->dummy && loom_tokenize(j->m, default_prompts[p], true, &j->prompt[p], &n, &err) == 0 && n > 0) {
            j->n_prompt[p] = (int)n;
            continue;
        }
        j->n_prompt[p] = 5 + 4 * p; /* no tokenizer: seeded ids, lengths that are not multiples of tp */
        if (!(j->prompt[p] = mem_array((size_t)j->n_prompt[p], sizeof(int32_t), "a prompt", e))) return -1;
        for (int i = 0; i < j->n_prompt[p]; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            j->prompt[p][i] = (int32_t)((rng >> 33) % (uint64_t)info.vocab);
        }
    }
    return 0;
}

int cli_verify(int argc, char **argv) {
    cli_common c = CLI_COMMON_DEFAULTS;
    int n_new = 16;
    for (int i = 0; i < argc; i++) {
        int r = cli_common_arg(&c, argc, argv, &i);
        if (r < 0) return 2;
        if (r) continue;
        if (!strcmp(argv[i], "-n") || !strcmp(argv[i], "--n-predict"))
            n_new = (int)cli_int(argv[i], cli_value(argc, argv, &i), 1, 4096);
        else {
            fprintf(stderr, "loom verify: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (c.tp < 2) {
        fprintf(stderr, "loom verify: compares parallel modes: give -tp N with N >= 2\n");
        return 2;
    }
    int tp = c.tp;
    loom_model *m = cli_load_model(&c, !c.dummy);
    if (!m) return 1;
    loom_model_info info;
    loom_model_get_info(m, &info);
    verify_job j = {.m = m, .vocab = info.vocab, .n_new = n_new};
    loom_err err;
    if (make_prompts(&j, &c, &err)) {
        fprintf(stderr, "loom verify: %s\n", err.msg);
        for (int p = 0; p < N_PROMPTS; p++) free(j.prompt[p]);
        cli_free(&c, m);
        return 1;
    }
    int longest = 0;
    for (int p = 0; p < N_PROMPTS; p++) longest = j.n_prompt[p] > longest ? j.n_prompt[p] : longest;
    j.eo =
        (loom_engine_options){.max_seqs = 1, .max_tokens = longest, .threads = c.threads, .max_ctx = longest + n_new};
    size_t nl = (size_t)N_PROMPTS * n_new * info.vocab, ni = (size_t)N_PROMPTS * n_new;
    enum { N_MODES = 4 };
    mode_result r[N_MODES] = {{.name = "tp=1"}, {.name = "TP"}, {.name = "TP+SP"}, {.name = "async TP"}};
    if (c.ep) r[1].name = "EP", r[2].name = "EP+SP", r[3].name = "EP+async";
    struct {
        int tp;
        bool sp, async_tp;
    } modes[N_MODES] = {{1, false, false}, {tp, false, false}, {tp, true, false}, {tp, true, true}};
    int rc = 0;
    for (int k = 0; k < N_MODES && !rc; k++) {
        r[k].logits = mmap(NULL, nl * sizeof(float), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        r[k].ids = mmap(NULL, ni * sizeof(int32_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (r[k].logits == MAP_FAILED || r[k].ids == MAP_FAILED) {
            if (r[k].logits == MAP_FAILED) r[k].logits = NULL;
            if (r[k].ids == MAP_FAILED) r[k].ids = NULL;
            fprintf(stderr, "loom verify: cannot map %zu bytes for the %s results\n",
                    nl * sizeof(float) + ni * sizeof(int32_t), r[k].name);
            rc = 1;
            break;
        }
        j.logits = r[k].logits, j.ids = r[k].ids;
        cli_common mc = c;
        mc.tp = modes[k].tp, mc.sp = modes[k].sp, mc.async_tp = modes[k].async_tp, mc.isolate = true;
        mc.pp = k ? c.pp : 1; /* the parallel modes run in -dp replicas of -pp stages; tp=1 is one rank */
        mc.dp = k ? c.dp : 1;
        j.eo.pipeline_parallel = mc.pp, j.eo.pp_layer_partition = mc.pp_partition;
        j.eo.data_parallel = mc.dp;
        j.eo.expert_parallel = k && c.ep;
        j.eo.pp_microbatches = c.pp_microbatches;
        j.eo.sequence_parallel = mc.sp;
        j.eo.async_tp = mc.async_tp;
        j.eo.sp_min_tokens = 0; /* verify compares the modes themselves, on every pass */
        fprintf(stderr, "loom verify: running %s\n", r[k].name);
        rc = cli_launch(&mc, m, &j.eo, 0, verify_rank, &j);
    }
    if (!rc) {
        printf("loom verify: %s, tp=%d, dp=%d, pp=%d%s, %d prompts, %d greedy tokens each\n", info.arch, tp, c.dp, c.pp,
               c.ep ? ", expert parallel" : "", N_PROMPTS, n_new);
        print_table(&j, r, N_MODES);
    }
    for (int k = 0; k < N_MODES; k++) {
        if (r[k].logits) munmap(r[k].logits, nl * sizeof(float));
        if (r[k].ids) munmap(r[k].ids, ni * sizeof(int32_t));
    }
    for (int p = 0; p < N_PROMPTS; p++) free(j.prompt[p]);
    cli_free(&c, m);
    return rc;
}

/* Tensor and sequence parallelism against the oracles: every golden model at tp = 2, 3 and 4
 * (where its shapes divide; otherwise the plan-time error is checked) must match transformers
 * within 1e-4 at every position, on shm ranks forked by loom_launch; with sequence parallelism
 * the logits must be bit-identical to plain TP (the golden batches have 11 and 2 tokens, not
 * multiples of the rank count, so padding is exercised in prefill and decode). The MPI backend,
 * run under mpirun, must be bit-identical to shm at the same N. `test_parallel --mpi-dump CASE
 * SP FILE` is the mode mpirun starts. */
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "golden_util.h"

#define ATOL 1e-4

/* (the last four again with --dtype auto: bf16 and int8 activations, golden_util.h; ct_llama's
 * and awq_mixtral's attention regions gather int8 rows, gptq_llama's act-order ones fp32; then
 * two FP8 models on FP8 activations, static scales and dynamic per-token ones; then a GGUF's
 * blocks, whose regions gather fp32 rows under --dtype auto too, and a GGUF's MXFP4 experts on int8
 * activations; then the KV cache's rounding dtypes, against transformers with the same rounding) */
static const char *cases[] = {ARCH_CASES,
                              QUANTIZED_CASES,
                              "llama_bf16@auto",
                              "gptq_llama@auto",
                              "ct_llama@auto",
                              "awq_mixtral@auto",
                              "fp8_llama@fp8act",
                              "fp8_qwen2@fp8act",
                              "gguf_gemma3@auto",
                              "gguf_gpt_oss@auto",
                              KV_CASES};

typedef enum mode { MODE_TP, MODE_SP, MODE_ASYNC, MODE_ASYNC_THRESHOLD } mode;
static const char *mode_names[] = {"TP", "SP", "async TP", "async TP above 4 tokens"};

typedef struct job {
    loom_model *m;
    golden *g;
    mode mode;
    bool long_batch;
    float *out; /* shared with the forked ranks (MAP_SHARED), or local under MPI */
} job;

/* The long batch: LONG_SEQS sequences of LONG_LEN tokens in one prefill, so that each rank's
 * block at tp=2 (524 rows) runs over MPI in comm_chunk_rows chunks, then one decode step of each;
 * the logits of each sequence's last token in both passes. */
#define LONG_SEQS 8
#define LONG_LEN  131
#define LONG_ROWS (2 * LONG_SEQS)

static int long_run(loom_engine *e, int vocab, float *out, loom_err *err) {
    static int32_t ids[LONG_SEQS * LONG_LEN], pos[LONG_SEQS * LONG_LEN], seq[LONG_SEQS * LONG_LEN], rows[LONG_SEQS];
    int t = 0;
    for (int s = 0; s < LONG_SEQS; s++)
        for (int i = 0; i < LONG_LEN; i++, t++) ids[t] = (t * 37 + 11) % vocab, pos[t] = i, seq[t] = s;
    for (int pass = 0; pass < 2; pass++) {
        for (int s = 0; s < LONG_SEQS; s++) rows[s] = pass ? s : (s + 1) * LONG_LEN - 1;
        if (pass)
            for (int s = 0; s < LONG_SEQS; s++) ids[s] = (s * 5 + 3) % vocab, pos[s] = LONG_LEN, seq[s] = s;
        loom_batch b = {pass ? LONG_SEQS : t, ids, pos, seq, LONG_SEQS, rows, NULL};
        const float *lg;
        if (loom_forward(e, &b, &lg, err)) return -1;
        memcpy(out + (size_t)pass * LONG_SEQS * vocab, lg, (size_t)LONG_SEQS * vocab * sizeof *lg);
    }
    return 0;
}

static int job_rows(const job *j) { return j->long_batch ? LONG_ROWS : golden_rows(j->g); }

/* Every rank runs the batch; rank 0's logits are the result (all ranks hold the same). */
static int rank_main(loom_comm *comm, void *arg) {
    job *j = arg;
    loom_err err = {{0}};
    loom_engine_options eo = golden_engine_options(j->g, comm);
    if (j->long_batch) eo.max_seqs = LONG_SEQS, eo.max_ctx = LONG_LEN + 1, eo.max_tokens = LONG_SEQS * LONG_LEN;
    eo.sequence_parallel = j->mode != MODE_TP;
    eo.async_tp = j->mode >= MODE_ASYNC;
    eo.sp_min_tokens = j->mode == MODE_ASYNC_THRESHOLD ? 4 : 0; /* prefill of 11 fused, decode of 2 plain TP */
    loom_engine *e = loom_engine_new(j->m, &eo, &err);
    size_t n = (size_t)job_rows(j) * j->g->vocab;
    float *mine = malloc(n * sizeof *mine);
    int rc = e && (j->long_batch ? long_run(e, j->g->vocab, mine, &err) : golden_run(e, j->g, mine, &err)) == 0 ? 0 : 1;
    if (rc) fprintf(stderr, "rank %d: %s\n", loom_comm_rank(comm), err.msg);
    else if (loom_comm_rank(comm) == 0) memcpy(j->out, mine, n * sizeof *mine);
    free(mine);
    loom_engine_free(e);
    return rc;
}

/* A user's layer through the custom-op API: doubles the MLP's partial sum (a scaling op, so
 * sequence parallelism may keep it inside the region) and squares the attention's input. */
static void times_two(void *u, const float *in, size_t ldi, float *out, size_t ldo, int rows, int cols,
                      const int32_t *pos, const int32_t *seq) {
    (void)u, (void)pos, (void)seq;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) out[r * ldo + c] = 2 * in[r * ldi + c];
}

static void squared(void *u, const float *in, size_t ldi, float *out, size_t ldo, int rows, int cols,
                    const int32_t *pos, const int32_t *seq) {
    (void)u, (void)pos, (void)seq;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) out[r * ldo + c] = in[r * ldi + c] * in[r * ldi + c];
}

#define CUSTOM_CASE "llama+custom"

/* --quantization for the quantized section's loads (NULL: float, as stored) */
static const char *quantization;
static int quant_group;

static loom_model *load(const char *name) {
    bool custom = !strcmp(name, CUSTOM_CASE);
    char dir[900], path[1000];
    golden_dir(dir, sizeof dir, custom ? "llama" : name);
    loom_err err = {{0}};
    loom_model_options mo = {.path = golden_model_at(dir, path, sizeof path),
                             .dtype = golden_dtype(name),
                             .quantization = quantization,
                             .quant_group = quant_group,
                             .fp8_activations = golden_fp8_act(name)};
    loom_model *m = loom_model_load(&mo, &err);
    loom_custom_op a = {"times_two", LOOM_OP_SCALING, times_two, NULL},
                   b = {"squared", LOOM_OP_ELEMENTWISE, squared, NULL};
    if (m && custom &&
        (loom_model_add_custom(m, "model.layers.0.mlp", false, &a, &err) ||
         loom_model_add_custom(m, "model.layers.1.self_attn", true, &b, &err))) {
        loom_model_free(m);
        m = NULL;
    }
    CHECK(m, "%s: %s", name, err.msg);
    return m;
}

/* Runs case `name` (its golden batch, or the long one) at tp ranks over backend; returns the
 * logits (munmap'd by the caller). */
static float *run_job(const char *name, golden *g, int tp, mode md, bool long_batch, const char *backend,
                      loom_err *err) {
    loom_model *m = load(name);
    if (!m) return NULL;
    job j = {m, g, md, long_batch, NULL};
    size_t bytes = (size_t)job_rows(&j) * g->vocab * sizeof(float);
    float *out = j.out = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    loom_engine_options eo = golden_engine_options(g, NULL);
    if (long_batch) eo.max_tokens = LONG_SEQS * LONG_LEN;
    eo.sequence_parallel = md != MODE_TP;
    return golden_launch(m, tp, 1, backend, &eo, rank_main, &j, out, bytes, err);
}

static float *run_tp(const char *name, golden *g, int tp, mode md, const char *backend, loom_err *err) {
    return run_job(name, g, tp, md, false, backend, err);
}

/* A quantized checkpoint's group_size (0: none or per channel), from its config.json. */
static int quant_group_size(const char *name) {
    char path[1000];
    golden_dir(path, sizeof path, name);
    strcat(path, "/config.json");
    FILE *f = fopen(path, "rb");
    char buf[1 << 14];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    cJSON *c = cJSON_Parse(buf);
    const cJSON *g =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "quantization_config"), "group_size");
    int group = cJSON_IsNumber(g) && g->valueint > 0 ? g->valueint : 0;
    cJSON_Delete(c);
    return group;
}

/* vLLM's rule: query heads and the MLP divide by tp; kv heads divide by tp or tp by them.
 * Sets *why to the plan-time message expected where they do not. A quantized checkpoint's
 * row-parallel shares (hidden / tp, intermediate / tp) must also be whole groups. */
static bool shardable(const char *name, int tp, const char **why) {
    loom_model *m = load(name);
    loom_model_info i;
    loom_model_get_info(m, &i);
    loom_model_free(m);
    *why = "cannot be split across";
    if (i.n_attention_layers && !(i.n_heads % tp == 0 && (i.n_kv_heads % tp == 0 || tp % i.n_kv_heads == 0)))
        return false;
    if (i.intermediate % tp) return false;
    if (i.n_recurrent_layers && (i.n_linear_k_heads % tp || i.n_linear_v_heads % tp)) return false;
    *why = "normalises groups"; /* Mamba-2's gated norm: a rank holds whole groups, or there is one */
    if (i.n_linear_groups > 1 && i.n_linear_groups % tp) return false;
    /* the GGUF cases of random blocks (the others are converted in F32): down_proj in Q4_K and
     * Q6_K (split at 32 and 16 weights: their sub-blocks), o_proj in blocks of 32; the MoE ones'
     * down_exps 64 features (make_gguf_golden.py's EXP_INTER) in blocks of 32 */
    static const char *const blocks[] = {"gguf_llama",  "gguf_qwen2",     "gguf_qwen3",
                                         "gguf_gemma3", "gguf_qwen2_moe", "gguf_qwen3_moe"};
    for (size_t b = 0; b < sizeof blocks / sizeof *blocks; b++) {
        if (strncmp(name, blocks[b], strlen(blocks[b])) || (name[strlen(blocks[b])] && name[strlen(blocks[b])] != '@'))
            continue;
        *why = "cuts a GGUF block: the tensor is";
        int down_share = strstr(name, "_moe") ? 64 / tp : i.intermediate / tp;
        return down_share % 32 == 0 && (i.n_heads * i.head_dim / tp) % 32 == 0;
    }
    int g = quant_group_size(name);
    *why = "is not a whole number of quantization groups";
    return !g || ((i.hidden / tp) % g == 0 && (i.intermediate / tp) % g == 0);
}

/* `--mpi-dump CASE MODE FILE`; MODE + LONG_DUMP: the long batch */
#define LONG_DUMP 10

static int mpi_dump(const char *name, int md, const char *path) {
    golden g;
    if (golden_open(&g, name, "logits")) return 1;
    loom_err err = {{0}};
    bool long_batch = md >= LONG_DUMP;
    float *out = run_job(name, &g, 2, (mode)(md % LONG_DUMP), long_batch, "mpi", &err);
    if (!out) fprintf(stderr, "test_tp --mpi-dump %s: %s\n", name, err.msg);
    golden_dump(out, (size_t)(long_batch ? LONG_ROWS : golden_rows(&g)) * g.vocab, path);
    golden_close(&g);
    return out ? 0 : 1;
}

/* The logits of case `name` at tp=2 over MPI (mpirun starting this binary), or NULL. */
static float *mpi_logits(const char *name, int md, const golden *g) {
    char args[256];
    snprintf(args, sizeof args, "%s %d", name, md);
    return golden_mpi_run(2, args, (size_t)(md >= LONG_DUMP ? LONG_ROWS : golden_rows(g)) * g->vocab);
}

static void check_mpi_matches_shm(const char *name, mode md, const golden *g, const float *shm) {
    if (!mpi_available("test_parallel")) return;
    float *mpi = mpi_logits(name, md, g);
    CHECK(mpi && !memcmp(mpi, shm, (size_t)golden_rows(g) * g->vocab * sizeof *mpi),
          "%s (%s): MPI tp=2 logits are not bit-identical to shm", name, mode_names[md]);
    free(mpi);
}

/* The cases also run over MPI at tp=2 (a dense, a biased, two mixtures, latent attention, four
 * quantized, a GGUF file's blocks, a hybrid of Mamba-2 and attention). */
static bool over_mpi(const char *name) {
    static const char *names[] = {"llama",           "qwen2",         "llama_bias",      "olmoe",
                                  "qwen2_moe",       "deepseek_v3",   "gptq_llama",      "ct_mixtral",
                                  "gptq_llama@auto", "ct_llama@auto", "fp8_deepseek_v3", "fp8_llama@fp8act",
                                  "gguf_gemma3",     "nemotron_h"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(name, names[i])) return true;
    return false;
}

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[1], "--mpi-dump")) return mpi_dump(argv[2], atoi(argv[3]), argv[4]);
    check_cpu_variant();
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        if (argc == 2 && strcmp(argv[1], cases[c])) continue; /* `test_parallel CASE`: that case alone */
        golden g;
        if (golden_open(&g, cases[c], "logits")) {
            CHECK(0, "%s: cannot read golden data", cases[c]);
            continue;
        }
        loom_err err1 = {{0}};
        float *one = run_tp(cases[c], &g, 1, MODE_TP, "shm", &err1); /* tp=1, in a process of its own */
        CHECK(one, "%s tp=1: %s", cases[c], err1.msg);
        for (int tp = 2; tp <= 4 && one; tp++) {
            loom_err err = {{0}};
            float *out = run_tp(cases[c], &g, tp, MODE_TP, "shm", &err);
            const char *why;
            if (!shardable(cases[c], tp, &why)) {
                CHECK(!out && strstr(err.msg, why), "%s tp=%d: shapes do not divide, yet: %s", cases[c], tp,
                      out ? "it ran" : err.msg);
                printf("%-12s tp=%d refused at plan time: %s\n", cases[c], tp, err.msg);
                continue;
            }
            CHECK(out, "%s tp=%d: %s", cases[c], tp, err.msg);
            if (!out) continue;
            /* reduced: a split moves int8 scale blocks, so only the modes' bits are held */
            double worst = golden_worst(&g, out), vs1 = max_abs_diff(out, one, golden_rows(&g) * g.vocab);
            CHECK(golden_reduced(cases[c]) || worst <= ATOL, "%s tp=%d: max |logit diff| vs transformers %.3g",
                  cases[c], tp, worst);
            CHECK(golden_reduced(cases[c]) || vs1 <= ATOL, "%s tp=%d: max |logit diff| vs tp=1 %.3g", cases[c], tp,
                  vs1);
            /* EVIDENCE-OF: 4.1, 4.2 (SP and async TP the same bits as TP) */
            size_t bytes = (size_t)golden_rows(&g) * g.vocab * sizeof(float);
            float *sp = run_tp(cases[c], &g, tp, MODE_SP, "shm", &err);
            float *as = run_tp(cases[c], &g, tp, MODE_ASYNC, "shm", &err);
            float *th = run_tp(cases[c], &g, tp, MODE_ASYNC_THRESHOLD, "shm", &err);
            CHECK(th && !memcmp(th, out, bytes),
                  "%s tp=%d: async TP with --sp-min-tokens is not bit-identical to TP: %s", cases[c], tp,
                  th ? "they differ" : err.msg);
            if (th) munmap(th, bytes);
            CHECK(sp && !memcmp(sp, out, bytes), "%s tp=%d: sequence-parallel logits are not bit-identical to TP: %s",
                  cases[c], tp, sp ? "they differ" : err.msg);
            CHECK(as && !memcmp(as, out, bytes), "%s tp=%d: async-TP logits are not bit-identical to TP: %s", cases[c],
                  tp, as ? "they differ" : err.msg);
            printf("%-12s tp=%d max |logit diff| vs transformers: %.2e, vs tp=1: %.2e; SP %s TP, async TP %s TP\n",
                   cases[c], tp, worst, vs1,
                   sp && !memcmp(sp, out, bytes) ? "==" : "!=", as && !memcmp(as, out, bytes) ? "==" : "!=");
            if (tp == 2 && over_mpi(cases[c])) {
                check_mpi_matches_shm(cases[c], MODE_TP, &g, out);
                if (sp) check_mpi_matches_shm(cases[c], MODE_SP, &g, sp);
                if (as) check_mpi_matches_shm(cases[c], MODE_ASYNC, &g, as);
            }
            if (sp) munmap(sp, bytes);
            if (as) munmap(as, bytes);
            munmap(out, bytes);
        }
        if (one) munmap(one, (size_t)golden_rows(&g) * g.vocab * sizeof(float));
        golden_close(&g);
    }
    /* The long batch, whose blocks run in chunks: no HF oracle for it, so tp=2 must match
     * tp=1 within the tolerance and SP and async TP must equal TP exactly. */
    golden lg;
    if (golden_open(&lg, "llama_bias", "logits") == 0) {
        loom_err err = {{0}};
        size_t bytes = (size_t)LONG_ROWS * lg.vocab * sizeof(float);
        float *runs[4];
        for (int md = 0; md < 3; md++) runs[md] = run_job("llama_bias", &lg, 2, (mode)md, true, "shm", &err);
        runs[3] = run_job("llama_bias", &lg, 1, MODE_TP, true, "shm", &err);
        CHECK(runs[0] && runs[3], "long batch: %s", err.msg);
        if (runs[0] && runs[3]) {
            double d = max_abs_diff(runs[0], runs[3], LONG_ROWS * lg.vocab);
            CHECK(d <= ATOL, "long batch: tp=2 differs from tp=1 by %.3g", d);
            printf("long batch (%d x %d tokens) tp=2 vs tp=1: %.2e\n", LONG_SEQS, LONG_LEN, d);
        }
        for (int md = 1; md < 3; md++)
            CHECK(runs[0] && runs[md] && !memcmp(runs[0], runs[md], bytes), "long batch: %s is not bit-identical to TP",
                  mode_names[md]);
        /* over MPI every sharded linear runs in chunks, the fused ops' as the chunks arrive */
        if (mpi_available("test_parallel")) {
            float *mpi_tp = mpi_logits("llama_bias", LONG_DUMP + MODE_TP, &lg);
            float *mpi_async = mpi_logits("llama_bias", LONG_DUMP + MODE_ASYNC, &lg);
            CHECK(mpi_tp && mpi_async && !memcmp(mpi_tp, mpi_async, bytes),
                  "long batch over MPI (chunked): async TP is not bit-identical to TP");
            CHECK(mpi_tp && runs[3] && max_abs_diff(mpi_tp, runs[3], LONG_ROWS * lg.vocab) <= ATOL,
                  "long batch over MPI: tp=2 differs from tp=1");
            free(mpi_tp);
            free(mpi_async);
        }
        for (int i = 0; i < 4; i++)
            if (runs[i]) munmap(runs[i], bytes);
        golden_close(&lg);
    }
    /* Quantized at load (int8 per channel, int4 in groups of 32, fp8 per channel, mxfp4; a dense model with
     * biases and two mixtures of experts, whose 48-feature expert shares take no 32-column groups): no HF
     * oracle for the quantized model, so SP and async TP must equal TP exactly, and with exact
     * compute tp must stay near tp=1 (only the row-parallel partial sums' order differs). Then
     * with int8 activations, where only the bits are held. A split that cuts a group is refused
     * at plan time. */
    static const struct {
        const char *name, *q;
        int group, tp;
    } qcases[] = {{"qwen2", "int8", 0, 2},          {"llama_tp3", "int4", 32, 3}, {"olmoe", "int8", 0, 2},
                  {"qwen2_moe", "int8", 0, 2},      {"qwen2@auto", "int8", 0, 2}, {"llama_tp3@auto", "int4", 32, 3},
                  {"qwen2_moe@auto", "int8", 0, 2}, {"qwen2", "fp8", 0, 2},       {"llama_tp3", "fp8", 0, 3},
                  {"olmoe", "fp8", 0, 2},           {"llama_tp3", "mxfp4", 0, 3}};
    for (size_t c = 0; c < sizeof qcases / sizeof qcases[0]; c++) {
        golden qg;
        if (golden_open(&qg, qcases[c].name, "logits")) continue;
        quantization = qcases[c].q, quant_group = qcases[c].group;
        loom_err err = {{0}};
        size_t bytes = (size_t)golden_rows(&qg) * qg.vocab * sizeof(float);
        float *one = run_tp(qcases[c].name, &qg, 1, MODE_TP, "shm", &err);
        float *runs[4];
        for (int md = 0; md < 4; md++) runs[md] = run_tp(qcases[c].name, &qg, qcases[c].tp, (mode)md, "shm", &err);
        CHECK(one && runs[0], "%s -q %s tp=%d: %s", qcases[c].name, qcases[c].q, qcases[c].tp, err.msg);
        for (int md = 1; md < 4; md++)
            CHECK(runs[0] && runs[md] && !memcmp(runs[0], runs[md], bytes),
                  "%s -q %s tp=%d: %s is not bit-identical to TP", qcases[c].name, qcases[c].q, qcases[c].tp,
                  mode_names[md]);
        if (one && runs[0]) {
            double d = max_abs_diff(runs[0], one, golden_rows(&qg) * qg.vocab), dq = golden_worst(&qg, one);
            CHECK(golden_reduced(qcases[c].name) || d <= ATOL, "%s -q %s: tp=%d differs from tp=1 by %.3g",
                  qcases[c].name, qcases[c].q, qcases[c].tp, d);
            printf(
                "%-12s -q %s tp=%d vs tp=1: %.2e (quantized vs transformers' float model: %.3f); SP, async TP == TP\n",
                qcases[c].name, qcases[c].q, qcases[c].tp, d, dq);
        }
        if (one) munmap(one, bytes);
        for (int md = 0; md < 4; md++)
            if (runs[md]) munmap(runs[md], bytes);
        golden_close(&qg);
    }
    golden rg;
    if (golden_open(&rg, "llama", "logits") == 0) {
        quantization = "int4", quant_group = 32;
        loom_err err = {{0}};
        float *out = run_tp("llama", &rg, 2, MODE_TP, "shm", &err);
        CHECK(!out && strstr(err.msg, "down_proj.weight: a rank's share of the input features, [0, 48) of 96, is not a "
                                      "whole number of quantization groups of 32"),
              "llama -q int4 --quant-group-size 32 at tp=2 must be refused naming down_proj: %s",
              out ? "it ran" : err.msg);
        golden_close(&rg);
    }
    quantization = NULL, quant_group = 0;
    /* the custom ops change the model, so there is no HF oracle: SP must equal TP exactly */
    golden g;
    if (golden_open(&g, "llama", "logits") == 0) {
        loom_err err = {{0}};
        size_t bytes = (size_t)golden_rows(&g) * g.vocab * sizeof(float);
        float *tp = run_tp(CUSTOM_CASE, &g, 2, MODE_TP, "shm", &err),
              *sp = run_tp(CUSTOM_CASE, &g, 2, MODE_SP, "shm", &err);
        float *as = run_tp(CUSTOM_CASE, &g, 2, MODE_ASYNC, "shm", &err);
        CHECK(tp && sp && !memcmp(tp, sp, bytes), "custom ops: SP logits are not bit-identical to TP (%s)", err.msg);
        /* the MLP's custom op sits between down_proj and the exit: that reduce-scatter must stay
         * plain (the fallback path), the rest fuse; results identical all the same */
        CHECK(tp && as && !memcmp(tp, as, bytes), "custom ops: async-TP logits are not bit-identical to TP (%s)",
              err.msg);
        if (as) munmap(as, bytes);
        CHECK(tp && golden_worst(&g, tp) > 1e-2, "custom ops: they should change the logits");
        if (tp) munmap(tp, bytes);
        if (sp) munmap(sp, bytes);
        golden_close(&g);
    }
    return check_done();
}

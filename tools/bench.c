/* `loom bench latency`: vLLM's latency benchmark (same flags, same report) plus per-phase
 * rates; `loom bench machine`: the sgemm rate and memory read bandwidth of this machine, so
 * model figures can be read against what the hardware allows, measured in the same run. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "cli.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* numpy's default (linear) percentile, as vLLM reports */
static double percentile(const double *sorted, int n, double q) {
    double k = (n - 1) * q / 100.0;
    int f = (int)k;
    return f + 1 < n ? sorted[f] + (k - f) * (sorted[f + 1] - sorted[f]) : sorted[f];
}

typedef struct latency_opts {
    cli_common c;
    int input_len, output_len, batch, warmup, iters;
    const char *json;
    bool profile;
} latency_opts;

typedef struct batch_bufs {
    int32_t *ids, *pos, *seq, *rows;
} batch_bufs;

/* One request batch as vLLM times it: prefill every prompt, then output_len-1 decode steps. */
static int one_iteration(loom_engine *e, const latency_opts *o, batch_bufs *b, uint64_t *rng, int chunk,
                         int vocab, double *prefill_s, double *decode_s, loom_err *err) {
    const float *logits;
    for (int s = 0; s < o->batch; s++) loom_engine_reset_seq(e, s);
    double t0 = now();
    /* prompts flattened token-major, chunked so a pass never exceeds the engine's tokens */
    int total = o->batch * o->input_len;
    for (int done = 0; done < total;) {
        int k = total - done < chunk ? total - done : chunk, nl = 0;
        for (int i = 0; i < k; i++) {
            int t = done + i;
            *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
            b->ids[i] = (int32_t)((*rng >> 33) % (uint64_t)vocab);
            b->seq[i] = t / o->input_len;
            b->pos[i] = t % o->input_len;
            if (b->pos[i] == o->input_len - 1) b->rows[nl++] = i;
        }
        loom_batch bt = {k, b->ids, b->pos, b->seq, nl, b->rows};
        if (loom_forward(e, &bt, &logits, err)) return -1;
        done += k;
    }
    double t1 = now();
    for (int step = 1; step < o->output_len; step++) {
        for (int s = 0; s < o->batch; s++) {
            b->ids[s] = (int32_t)((s + step) % vocab);
            b->seq[s] = s;
            b->pos[s] = o->input_len + step - 1;
            b->rows[s] = s;
        }
        loom_batch bt = {o->batch, b->ids, b->pos, b->seq, o->batch, b->rows};
        if (loom_forward(e, &bt, &logits, err)) return -1;
    }
    *prefill_s = t1 - t0;
    *decode_s = now() - t1;
    return 0;
}

/* Figures every rank measured, gathered so rank 0 can report them. */
typedef struct rank_figures {
    float peak_rss_mib, comm_share;
} rank_figures;

static void report(const latency_opts *o, double *lat, double pre, double dec, size_t weights, size_t act, size_t kv,
                   const rank_figures *ranks, int n_ranks) {
    int n = o->iters;
    double avg = 0;
    for (int i = 0; i < n; i++) avg += lat[i];
    avg /= n;
    qsort(lat, n, sizeof *lat, cmp_double);
    static const int pct[] = {10, 25, 50, 75, 90, 99};
    printf("Avg latency: %.6f seconds\n", avg);
    for (int i = 0; i < 6; i++) printf("%d%% percentile latency: %.6f seconds\n", pct[i], percentile(lat, n, pct[i]));
    double pre_avg = pre / n, dec_avg = dec / n;
    printf("Prefill: %.4f s avg, %.1f tok/s\n", pre_avg, o->batch * o->input_len / pre_avg);
    if (o->output_len > 1)
        printf("Decode: %.4f s avg, %.2f tok/s (%d steps of %d sequences)\n", dec_avg,
               o->batch * (o->output_len - 1) / dec_avg, o->output_len - 1, o->batch);
    printf("Memory (rank 0): weights %.1f MiB, activations %.1f MiB, KV cache %.1f MiB\n", weights / 1048576.0,
           act / 1048576.0, kv / 1048576.0);
    for (int r = 0; r < n_ranks; r++)
        printf("Rank %d: peak RSS %.1f MiB, %.1f%% of the time in collectives\n", r, ranks[r].peak_rss_mib,
               100 * ranks[r].comm_share);
    if (!o->json) return;
    FILE *f = fopen(o->json, "w");
    if (!f) {
        fprintf(stderr, "loom bench: cannot write %s\n", o->json);
        return;
    }
    fprintf(f, "{\"avg_latency\": %.9f, \"latencies\": [", avg);
    for (int i = 0; i < n; i++) fprintf(f, "%s%.9f", i ? ", " : "", lat[i]);
    fprintf(f, "], \"percentiles\": {");
    for (int i = 0; i < 6; i++) fprintf(f, "%s\"%d\": %.9f", i ? ", " : "", pct[i], percentile(lat, n, pct[i]));
    fprintf(f, "}, \"prefill_avg_s\": %.9f, \"decode_avg_s\": %.9f, \"tp\": %d, \"ranks\": [", pre_avg, dec_avg,
            n_ranks);
    for (int r = 0; r < n_ranks; r++)
        fprintf(f, "%s{\"peak_rss_mib\": %.1f, \"collective_share\": %.4f}", r ? ", " : "", ranks[r].peak_rss_mib,
                ranks[r].comm_share);
    fprintf(f, "]}\n");
    fclose(f);
}

typedef struct latency_job {
    const latency_opts *o;
    loom_model *m;
    loom_engine_options eo;
} latency_job;

static int latency_rank(loom_comm *comm, void *arg) {
    latency_job *j = arg;
    const latency_opts *o = j->o;
    loom_err err = {{0}};
    loom_engine *e = cli_rank_engine("bench", comm, j->m, &j->eo);
    if (!e) return 1;
    loom_model_info info;
    loom_model_get_info(j->m, &info);
    int chunk = j->eo.max_tokens;
    batch_bufs b = {malloc(chunk * 4), malloc(chunk * 4), malloc(chunk * 4), malloc(chunk * 4)};
    double *lat = malloc(o->iters * sizeof *lat), pre = 0, dec = 0, blocked0 = 0, t_start = 0;
    uint64_t rng = o->c.seed + 1;
    int rc = 0;
    if (loom_comm_rank(comm) == 0)
        fprintf(stderr, "loom bench: %s, tp=%d, %d threads per rank, batch %d, input %d, output %d, %d warm-up + %d iterations\n",
                info.arch, loom_comm_size(comm), omp_get_max_threads(), o->batch, o->input_len, o->output_len,
                o->warmup, o->iters);
    for (int it = 0; it < o->warmup + o->iters && !rc; it++) {
        if (it == o->warmup) {
            loom_engine_set_profile(e, o->profile);
            blocked0 = loom_comm_blocked_seconds(comm);
            t_start = now();
        }
        double p = 0, d = 0;
        rc = one_iteration(e, o, &b, &rng, chunk, info.vocab, &p, &d, &err);
        if (it >= o->warmup) {
            lat[it - o->warmup] = p + d;
            pre += p;
            dec += d;
        }
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    float mine[2] = {ru.ru_maxrss / 1024.0f, (float)((loom_comm_blocked_seconds(comm) - blocked0) / (now() - t_start))};
    rank_figures *all = malloc(loom_comm_size(comm) * sizeof *all);
    if (!rc) rc = loom_comm_all_gather(comm, mine, 2, (float *)all, &err);
    if (rc) cli_rank_error("bench", comm, &err);
    else if (loom_comm_rank(comm) == 0) {
        report(o, lat, pre, dec, info.weight_bytes, loom_engine_activation_bytes(e), loom_engine_kv_bytes(e), all,
               loom_comm_size(comm));
        if (o->profile) loom_engine_print_profile(e, stdout);
    }
    free(all);
    free(lat);
    free(b.ids), free(b.pos), free(b.seq), free(b.rows);
    loom_engine_free(e);
    return rc ? 1 : 0;
}

static int bench_latency(int argc, char **argv) {
    latency_opts o = {.c = CLI_COMMON_DEFAULTS, .input_len = 32, .output_len = 128, .batch = 8, .warmup = 10, .iters = 30};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_common_arg(&o.c, argc, argv, &i);
        if (r < 0) return 2;
        if (r) continue;
        if (!strcmp(a, "--input-len")) o.input_len = (int)cli_int(a, cli_value(argc, argv, &i), 1, 1 << 22);
        else if (!strcmp(a, "--output-len")) o.output_len = (int)cli_int(a, cli_value(argc, argv, &i), 1, 1 << 22);
        else if (!strcmp(a, "--batch-size")) o.batch = (int)cli_int(a, cli_value(argc, argv, &i), 1, 4096);
        else if (!strcmp(a, "--num-iters-warmup")) o.warmup = (int)cli_int(a, cli_value(argc, argv, &i), 0, 1 << 20);
        else if (!strcmp(a, "--num-iters")) o.iters = (int)cli_int(a, cli_value(argc, argv, &i), 1, 1 << 20);
        else if (!strcmp(a, "--output-json")) o.json = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--profile")) o.profile = true;
        else {
            fprintf(stderr, "loom bench latency: unknown option '%s'\n", a);
            return 2;
        }
    }
    loom_model *m = cli_load_model(&o.c, false);
    if (!m) return 1;
    int chunk = o.batch * o.input_len < 2048 ? o.batch * o.input_len : 2048;
    if (chunk < o.batch) chunk = o.batch;
    latency_job j = {.o = &o, .m = m,
                     .eo = {.max_seqs = o.batch, .max_ctx = o.input_len + o.output_len, .max_tokens = chunk,
                            .threads = o.c.threads, .sequence_parallel = o.c.sp}};
    int rc = cli_launch(&o.c, m, &j.eo, latency_rank, &j);
    loom_model_free(m);
    return rc;
}

/* sgemm at a prefill-like shape and a multi-threaded streaming read, best of a few runs. */
static int bench_machine(int argc, char **argv) {
    int threads = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") || !strcmp(argv[i], "-t"))
            threads = (int)cli_int(argv[i], cli_value(argc, argv, &i), 1, 1024);
        else {
            fprintf(stderr, "loom bench machine: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (threads) omp_set_num_threads(threads), openblas_set_num_threads(threads);
    int M = 512, N = 2048, K = 2048;
    float *a = aligned_alloc(64, (size_t)M * K * 4), *w = aligned_alloc(64, (size_t)N * K * 4),
          *c = aligned_alloc(64, (size_t)M * N * 4);
    for (size_t i = 0; i < (size_t)M * K; i++) a[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < (size_t)N * K; i++) w[i] = (float)(i % 5) * 0.1f;
    double best = 1e9;
    for (int r = 0; r < 8; r++) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1, a, K, w, K, 0, c, N);
        double t = now() - t0;
        if (t < best) best = t;
    }
    printf("sgemm %dx%dx%d: %.1f GFLOP/s (%d threads)\n", M, N, K, 2.0 * M * N * K / best / 1e9, omp_get_max_threads());
    free(a), free(w), free(c);
    size_t n = (size_t)1 << 28; /* 1 GiB of floats */
    float *buf = aligned_alloc(64, n * 4);
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) buf[i] = 1.0f;
    best = 1e9;
    volatile float sink = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = now();
        float s = 0;
#pragma omp parallel for simd reduction(+ : s)
        for (size_t i = 0; i < n; i++) s += buf[i];
        double t = now() - t0;
        sink += s;
        if (t < best) best = t;
    }
    printf("memory read: %.1f GB/s\n", n * 4.0 / best / 1e9);
    free(buf);
    return 0;
}

int cli_bench(int argc, char **argv) {
    if (argc >= 1 && !strcmp(argv[0], "latency")) return bench_latency(argc - 1, argv + 1);
    if (argc >= 1 && !strcmp(argv[0], "machine")) return bench_machine(argc - 1, argv + 1);
    fprintf(stderr, "usage: loom bench latency|machine [options]\n");
    return 2;
}

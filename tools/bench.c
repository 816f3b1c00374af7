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
#include "cpu/cpu.h"
#include "kernels/kernels.h"
#include "runtime/profile.h"
#include "runtime/sampling.h"
#include "util/alloc.h"
#include "util/err.h"

/* numpy's default (linear) percentile, as vLLM reports */
static double percentile(const double *sorted, int n, double q) {
    double k = (n - 1) * q / 100.0;
    int f = (int)k;
    return f + 1 < n ? sorted[f] + (k - f) * (sorted[f + 1] - sorted[f]) : sorted[f];
}

typedef struct bench_mode {
    const char *name;
    bool sp, async_tp, ep;
    bool spec; /* decodes greedily with --speculative-config's proposals */
} bench_mode;

typedef struct latency_opts {
    cli_common c;
    int input_len, output_len, batch, warmup, iters;
    const char *json;
    bool profile;
    int max_batched;       /* --max-num-batched-tokens: tokens per forward pass */
    bool repeat;           /* --repeat-prompts: time each batch's second run, from its cached prefixes */
    const char *save_load; /* --save-expert-load FILE: the timed runs' tokens per expert (placement.c) */
    bench_mode modes[3];
    int n_modes;
    int vocab;  /* the model's */
    int spec_k; /* --speculative-config's num_speculative_tokens (0: none) */
} latency_opts;

/* What a greedy decode (--speculative-config) measured: the target's passes alone. */
typedef struct spec_figures {
    double target_s;
    long passes, pass_tokens;
} spec_figures;

typedef struct batch_bufs {
    int32_t *ids, *pos, *seq, *rows;
    int32_t *prompts; /* [batch][input_len] */
    int *from;        /* [batch]: each prompt's first position to compute (past its cached blocks) */
    int32_t *blocks;  /* [input_len]: a matched prefix's blocks */
    /* greedy decoding (--speculative-config): each prompt's tokens so far, the first from its
     * prefill's logits; each pass's proposals */
    int32_t *first, *hist, *drafts;
    int *len, *max_draft, *n_draft, *active;
    const int32_t **hist_of;
} batch_bufs;

/* Prefills every prompt from b->from, sequences in order, in passes of at most chunk tokens (the
 * engine's most), a logit row at each prompt's last token. */
static int prefill(loom_engine *e, const latency_opts *o, batch_bufs *b, int chunk, loom_err *err) {
    const float *logits;
    int s = 0, p = b->from[0];
    while (s < o->batch) {
        int k = 0, nl = 0;
        for (; k < chunk && s < o->batch; k++) {
            b->ids[k] = b->prompts[(size_t)s * o->input_len + p], b->seq[k] = s, b->pos[k] = p;
            if (++p == o->input_len) {
                b->rows[nl++] = k;
                if (++s < o->batch) p = b->from[s];
            }
        }
        loom_batch bt = {k, b->ids, b->pos, b->seq, nl, b->rows, NULL};
        if (loom_forward(e, &bt, &logits, err)) return -1;
        for (int r = 0; b->first && r < nl; r++)
            b->first[b->seq[b->rows[r]]] = logits_argmax(logits + (size_t)r * o->vocab, o->vocab);
    }
    return 0;
}

/* Greedy decoding of every prompt to output_len tokens, with the speculator's proposals when
 * there is one: each pass runs every sequence's last token and its proposals, and keeps what
 * the target agrees with. The target's passes are timed apart from the proposing. */
static int decode_greedy(loom_engine *e, loom_speculator *sp, const latency_opts *o, batch_bufs *b, spec_figures *f,
                         loom_err *err) {
    int k = o->spec_k, stride = o->input_len + o->output_len + k, n_active;
    for (int s = 0; s < o->batch; s++) {
        int32_t *h = b->hist + (size_t)s * stride;
        memcpy(h, b->prompts + (size_t)s * o->input_len, (size_t)o->input_len * sizeof *h);
        h[o->input_len] = b->first[s];
        b->len[s] = o->input_len + 1;
        b->hist_of[s] = h;
    }
    loom_sampling greedy = {.top_p = 1};
    loom_sampler *smp = loom_sampler_new(&greedy, o->vocab, err);
    if (!smp) return -1;
    int rc = 0;
    do {
        n_active = 0;
        for (int s = 0; s < o->batch; s++) {
            int left = o->input_len + o->output_len - b->len[s];
            if (left <= 0) continue;
            b->active[n_active] = s;
            b->max_draft[n_active] = sp ? (left - 1 < k ? left - 1 : k) : 0;
            b->n_draft[n_active] = 0;
            n_active++;
        }
        if (!n_active) break;
        const int32_t *hists[n_active];
        int lens[n_active];
        for (int i = 0; i < n_active; i++) hists[i] = b->hist_of[b->active[i]], lens[i] = b->len[b->active[i]];
        if (sp && (rc = loom_speculator_propose(sp, n_active, b->active, hists, lens, b->max_draft, b->drafts,
                                                b->n_draft, err)))
            break;
        int nt = 0;
        for (int i = 0; i < n_active; i++) {
            int s = b->active[i];
            for (int j = 0; j <= b->n_draft[i]; j++, nt++) {
                b->ids[nt] = j ? b->drafts[(size_t)i * k + j - 1] : hists[i][lens[i] - 1];
                b->pos[nt] = lens[i] - 1 + j, b->seq[nt] = s, b->rows[nt] = nt;
            }
        }
        const float *logits;
        loom_batch bt = {nt, b->ids, b->pos, b->seq, nt, b->rows, NULL};
        double t0 = cli_now();
        if ((rc = loom_forward(e, &bt, &logits, err))) break;
        f->target_s += cli_now() - t0;
        f->passes++, f->pass_tokens += nt;
        for (int i = 0, row = 0; i < n_active && !rc; i++) {
            int s = b->active[i], nd = b->n_draft[i];
            int32_t out[LOOM_SPEC_MAX_TOKENS + 1], *h = b->hist + (size_t)s * stride;
            int n_out = sp ? loom_speculator_verify(sp, smp, logits + (size_t)row * o->vocab, b->drafts + (size_t)i * k,
                                                    nd, out)
                           : (out[0] = loom_sampler_next(smp, logits + (size_t)row * o->vocab), 1);
            row += nd + 1;
            rc = loom_engine_truncate_seq(e, s, lens[i] + n_out - 1, err);
            for (int j = 0; j < n_out && b->len[s] < o->input_len + o->output_len; j++) h[b->len[s]++] = out[j];
        }
    } while (!rc);
    loom_sampler_free(smp);
    return rc;
}

/* One request batch as vLLM times it: prefill every prompt, then output_len-1 decode steps.
 * With --repeat-prompts the prompts run once untimed first, and the timed run starts each from
 * the longest prefix of it the KV cache holds in whole blocks (its last token always runs);
 * *hits counts those positions. */
static int one_iteration(loom_engine *e, loom_speculator *sp, const latency_opts *o, batch_bufs *b, uint64_t *rng,
                         int chunk, int vocab, double *prefill_s, double *decode_s, long *hits, spec_figures *f,
                         loom_err *err) {
    const float *logits;
    for (int s = 0; s < o->batch; s++) {
        loom_engine_reset_seq(e, s), b->from[s] = 0;
        if (sp) loom_speculator_reset_seq(sp, s);
    }
    for (int t = 0; t < o->batch * o->input_len; t++) {
        *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
        b->prompts[t] = (int32_t)((*rng >> 33) % (uint64_t)vocab);
    }
    if (o->repeat) {
        loom_kv_stats kv;
        loom_engine_get_kv_stats(e, &kv);
        if (prefill(e, o, b, chunk, err)) return -1;
        for (int s = 0; s < o->batch; s++) { /* given back with their blocks cached, then taken again */
            loom_engine_reset_seq(e, s);
            const int32_t *prompt = b->prompts + (size_t)s * o->input_len;
            int m = loom_engine_match_prefix(e, prompt, o->input_len - 1, b->blocks);
            if (loom_engine_attach_prefix(e, s, b->blocks, m, err)) return -1;
            b->from[s] = m * kv.block_size;
            *hits += b->from[s];
        }
    }
    double t0 = cli_now();
    if (prefill(e, o, b, chunk, err)) return -1;
    double t1 = cli_now();
    if (o->spec_k && decode_greedy(e, sp, o, b, f, err)) return -1;
    for (int step = 1; step < o->output_len && !o->spec_k; step++) {
        for (int s = 0; s < o->batch; s++) {
            b->ids[s] = (int32_t)((s + step) % vocab);
            b->seq[s] = s;
            b->pos[s] = o->input_len + step - 1;
            b->rows[s] = s;
        }
        loom_batch bt = {o->batch, b->ids, b->pos, b->seq, o->batch, b->rows, NULL};
        if (loom_forward(e, &bt, &logits, err)) return -1;
    }
    *prefill_s = t1 - t0;
    *decode_s = cli_now() - t1;
    return 0;
}

/* Figures every rank measured, gathered so rank 0 can report them. */
typedef struct rank_figures {
    float peak_rss_mib, comm_share, activation_mib;
    float stage, idle_share;                    /* pipeline: the rank's stage, its forward passes' time spent waiting */
    float expert_s, expert_gflop, expert_pairs; /* the experts' GEMMs: their time, work and (token, expert) pairs */
} rank_figures;
#define RANK_FIGURES (sizeof(rank_figures) / sizeof(float))

/* Prints one mode's report (vLLM's lines first); returns its average latency. */
static double report(const latency_opts *o, const char *mode, double *lat, double pre, double dec, long hits,
                     size_t weights, size_t streamed, size_t act, size_t kv, size_t kv_per_token,
                     const rank_figures *ranks, int n_ranks) {
    int n = o->iters;
    double avg = 0;
    for (int i = 0; i < n; i++) avg += lat[i];
    avg /= n;
    qsort(lat, n, sizeof *lat, cli_by_double);
    static const int pct[] = {10, 25, 50, 75, 90, 99};
    printf("Avg latency: %.6f seconds\n", avg);
    for (int i = 0; i < 6; i++) printf("%d%% percentile latency: %.6f seconds\n", pct[i], percentile(lat, n, pct[i]));
    double pre_avg = pre / n, dec_avg = dec / n;
    printf("Prefill: %.4f s avg, %.1f tok/s\n", pre_avg, o->batch * o->input_len / pre_avg);
    if (o->repeat)
        printf("Prefix cache: %.0f of the %d prompt tokens of each batch's second run reused (%.1f%%); %.1f tok/s "
               "over the rest\n",
               (double)hits / n, o->batch * o->input_len, 100.0 * hits / n / (o->batch * o->input_len),
               (o->batch * o->input_len - (double)hits / n) / pre_avg);
    if (o->output_len > 1)
        printf("Decode: %.4f s avg, %.2f tok/s (%d steps of %d sequences)\n", dec_avg,
               o->batch * (o->output_len - 1) / dec_avg, o->output_len - 1, o->batch);
    printf("Memory (rank 0): weights %.1f MiB, activations %.1f MiB, KV cache %.1f MiB (%s, %zu bytes per token)\n",
           weights / 1048576.0, act / 1048576.0, kv / 1048576.0, loom_kv_dtype_name(o->c.kv_cache_dtype), kv_per_token);
    if (o->output_len > 1)
        printf("Decode reads (rank 0): %.1f MiB of weights per step, %.1f GB/s\n", streamed / 1048576.0,
               streamed * (o->output_len - 1) / dec_avg / 1e9);
    for (int r = 0; r < n_ranks; r++) {
        printf("Rank %d: peak RSS %.1f MiB, activations %.1f MiB, %.1f%% of the time in collectives", r,
               ranks[r].peak_rss_mib, ranks[r].activation_mib, 100 * ranks[r].comm_share);
        if (o->c.pp > 1) printf(", stage %d idle %.1f%% (the bubble)", (int)ranks[r].stage, 100 * ranks[r].idle_share);
        if (ranks[r].expert_s > 0)
            printf(", experts %.0f pairs in %.3f s, %.1f GFLOP/s", ranks[r].expert_pairs, ranks[r].expert_s,
                   ranks[r].expert_gflop / ranks[r].expert_s);
        putchar('\n');
    }
    if (!o->json) return avg;
    char path[1024];
    if (o->n_modes > 1) snprintf(path, sizeof path, "%s.%s.json", o->json, mode);
    else snprintf(path, sizeof path, "%s", o->json);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "loom bench: cannot write %s\n", path);
        return avg;
    }
    fprintf(f, "{\"avg_latency\": %.9f, \"latencies\": [", avg);
    for (int i = 0; i < n; i++) fprintf(f, "%s%.9f", i ? ", " : "", lat[i]);
    fprintf(f, "], \"percentiles\": {");
    for (int i = 0; i < 6; i++) fprintf(f, "%s\"%d\": %.9f", i ? ", " : "", pct[i], percentile(lat, n, pct[i]));
    fprintf(f,
            "}, \"prefill_avg_s\": %.9f, \"decode_avg_s\": %.9f, \"prefix_cache_hit_tokens\": %.1f, "
            "\"kv_bytes_per_token\": %zu, \"tp\": %d, \"ranks\": [",
            pre_avg, dec_avg, (double)hits / n, kv_per_token, n_ranks);
    for (int r = 0; r < n_ranks; r++)
        fprintf(f,
                "%s{\"peak_rss_mib\": %.1f, \"activation_mib\": %.1f, \"collective_share\": %.4f, \"stage\": %d, "
                "\"idle_share\": %.4f, \"expert_seconds\": %.6f, \"expert_gflop\": %.3f, \"expert_pairs\": %.0f}",
                r ? ", " : "", ranks[r].peak_rss_mib, ranks[r].activation_mib, ranks[r].comm_share, (int)ranks[r].stage,
                ranks[r].idle_share, ranks[r].expert_s, ranks[r].expert_gflop, ranks[r].expert_pairs);
    fprintf(f, "], \"mode\": \"%s\"}\n", mode);
    fclose(f);
    return avg;
}

typedef struct latency_job {
    const latency_opts *o;
    loom_model *m;
    loom_engine_options eo;
} latency_job;

#define MAX_MODES 3

/* What one mode measured on this rank. */
typedef struct mode_run {
    loom_engine *e;
    double *lat, pre, dec, blocked;
    long hits; /* --repeat-prompts: prompt positions the timed runs found cached */
    loom_speculator *sp;
    spec_figures spec; /* greedy decoding's target passes, timed iterations only */
} mode_run;

/* A greedy mode's passes, and with speculation vLLM's spec_decode figures. */
static void report_spec(const latency_opts *o, const mode_run *r) {
    printf("Target passes: %ld, %.2f tokens a sequence each, %.3f ms a pass\n", r->spec.passes,
           (double)r->spec.pass_tokens / r->spec.passes / o->batch, 1e3 * r->spec.target_s / r->spec.passes);
    if (!r->sp) return;
    loom_spec_stats st;
    loom_speculator_get_stats(r->sp, &st);
    printf("Speculative: %ld drafts, %ld tokens proposed, %ld accepted (acceptance rate %.1f%%), mean acceptance "
           "length %.2f, proposing %.4f s per batch\n",
           st.drafts, st.draft_tokens, st.accepted_tokens,
           st.draft_tokens ? 100.0 * st.accepted_tokens / st.draft_tokens : 0,
           st.drafts ? 1 + (double)st.accepted_tokens / st.drafts : 1, st.propose_s / o->iters);
    printf("Acceptance by position:");
    for (int i = 0; i < st.k; i++) printf(" %.3f", st.drafts ? (double)st.accepted_at[i] / st.drafts : 0);
    putchar('\n');
}

/* Data parallelism: a batch takes as long as its slowest replica. Each replica's experts serve
 * the others until all are done (loom_engine_wait_replicas), then every rank learns every
 * rank's prefill and decode times (an idle replica's are 0) and keeps the longest of each. */
static int slowest_replica(loom_comm *comm, loom_engine *e, double *prefill_s, double *decode_s, loom_err *err) {
    if (loom_engine_wait_replicas(e, err)) return -1;
    int n = loom_comm_size(comm);
    float mine[2] = {(float)*prefill_s, (float)*decode_s},
          *all = mem_array((size_t)n * 2, sizeof *all, "the replicas' times", err);
    if (!all || loom_comm_all_gather(comm, mine, 2, all, err)) return free(all), -1;
    for (int r = 0; r < n; r++) {
        *prefill_s = all[2 * r] > *prefill_s ? all[2 * r] : *prefill_s;
        *decode_s = all[2 * r + 1] > *decode_s ? all[2 * r + 1] : *decode_s;
    }
    free(all);
    return 0;
}

/* --save-expert-load: the first expert-parallel mode's tokens per expert over the timed
 * iterations, summed over the ranks (every rank takes part), written by rank 0. */
static int save_expert_load(loom_comm *comm, const mode_run *runs, const latency_opts *o, loom_err *err) {
    int k = 0;
    while (k < o->n_modes && !o->modes[k].ep) k++;
    if (k == o->n_modes) return loom_errf(err, "--save-expert-load: no mode runs with --enable-expert-parallel");
    loom_expert_load *l = loom_engine_expert_load(runs[k].e, err);
    int rc = !l || (loom_comm_rank(comm) == 0 && loom_expert_load_write(l, o->save_load, err)) ? -1 : 0;
    if (!rc && loom_comm_rank(comm) == 0) fprintf(stderr, "loom bench: expert load written to %s\n", o->save_load);
    loom_expert_load_free(l);
    return rc;
}

static int latency_rank(loom_comm *comm, void *arg) {
    latency_job *j = arg;
    const latency_opts *o = j->o;
    loom_err err = {{0}};
    mode_run runs[MAX_MODES] = {{0}};
    int rc = 0;
    for (int k = 0; k < o->n_modes && !rc; k++) { /* the modes share the weights, not activations */
        loom_engine_options eo = j->eo;
        eo.sequence_parallel = o->modes[k].sp;
        eo.async_tp = o->modes[k].async_tp;
        eo.expert_parallel = o->modes[k].ep;
        if (o->n_modes > 1) eo.sp_min_tokens = 0; /* comparing modes: each runs as itself on every pass */
        runs[k].e = cli_rank_engine("bench", comm, j->m, &eo);
        bool none = true;
        if (runs[k].e && o->modes[k].spec &&
            !(runs[k].sp = cli_rank_speculator("bench", comm, runs[k].e, &o->c, &eo, &none)))
            rc = 1;
        runs[k].lat = runs[k].e ? mem_zalloc((size_t)o->iters, sizeof *runs[k].lat, "the latencies", &err) : NULL;
        rc = rc || !runs[k].lat ? 1 : 0;
    }
    loom_model_info info;
    loom_model_get_info(j->m, &info);
    int chunk = j->eo.max_tokens;
    batch_bufs b = {0};
    if (!rc && (!(b.ids = mem_array((size_t)chunk, sizeof *b.ids, "a batch", &err)) ||
                !(b.pos = mem_array((size_t)chunk, sizeof *b.pos, "a batch", &err)) ||
                !(b.seq = mem_array((size_t)chunk, sizeof *b.seq, "a batch", &err)) ||
                !(b.rows = mem_array((size_t)chunk, sizeof *b.rows, "a batch", &err)) ||
                !(b.prompts = mem_array((size_t)o->batch * o->input_len, sizeof *b.prompts, "the prompts", &err)) ||
                !(b.from = mem_array((size_t)o->batch, sizeof *b.from, "the prompts", &err)) ||
                !(b.blocks = mem_array((size_t)o->input_len, sizeof *b.blocks, "the prompts", &err))))
        rc = 1;
    size_t stride = (size_t)o->input_len + o->output_len + o->spec_k;
    if (!rc && o->spec_k &&
        (!(b.first = mem_array((size_t)o->batch, sizeof *b.first, "the first tokens", &err)) ||
         !(b.hist = mem_array(stride * o->batch, sizeof *b.hist, "the tokens", &err)) ||
         !(b.drafts = mem_array((size_t)o->batch * o->spec_k, sizeof *b.drafts, "the proposals", &err)) ||
         !(b.len = mem_array((size_t)o->batch, sizeof *b.len, "the tokens", &err)) ||
         !(b.max_draft = mem_array((size_t)o->batch, sizeof *b.max_draft, "the proposals", &err)) ||
         !(b.n_draft = mem_array((size_t)o->batch, sizeof *b.n_draft, "the proposals", &err)) ||
         !(b.active = mem_array((size_t)o->batch, sizeof *b.active, "the proposals", &err)) ||
         !(b.hist_of = mem_array((size_t)o->batch, sizeof *b.hist_of, "the tokens", &err))))
        rc = 1;
    /* data parallelism: replica r runs sequences r, r + dp, ... of each batch, its own prompts */
    loom_engine_stats es = {.replicas = 1};
    if (!rc) loom_engine_get_stats(runs[0].e, &es);
    latency_opts share = *o;
    share.batch = o->batch / es.replicas + (es.replica < o->batch % es.replicas);
    uint64_t rng = o->c.seed + 1 + (uint64_t)es.replica;
    double t_start = 0;
    if (!rc && loom_comm_rank(comm) == 0) {
        cli_print_cpu("bench", stdout);
        fprintf(stderr,
                "loom bench: %s, tp=%d, dp=%d, pp=%d, %d threads per rank, batch %d, input %d, output %d, %d "
                "warm-up + %d iterations%s\n",
                info.arch, loom_comm_size(comm) / o->c.pp / es.replicas, es.replicas, o->c.pp, omp_get_max_threads(),
                o->batch, o->input_len, o->output_len, o->warmup, o->iters,
                o->n_modes > 1 ? ", modes alternating" : "");
    }
    /* modes alternate iteration by iteration, so drift on the host hits them alike */
    for (int it = 0; it < o->warmup + o->iters && !rc; it++)
        for (int k = 0; k < o->n_modes && !rc; k++) {
            mode_run *r = &runs[k];
            if (it == o->warmup) engine_set_profile(r->e, o->profile), t_start = t_start ? t_start : cli_now();
            loom_engine_stats before, after;
            loom_engine_get_stats(r->e, &before);
            double p = 0, d = 0;
            long hits = 0;
            spec_figures f = {0};
            if (it == o->warmup && r->sp) loom_speculator_reset_stats(r->sp);
            rc = share.batch ? one_iteration(r->e, r->sp, &share, &b, &rng, chunk, info.vocab, &p, &d, &hits, &f, &err)
                             : 0;
            if (!rc && es.replicas > 1) rc = slowest_replica(comm, r->e, &p, &d, &err);
            if (it < o->warmup) continue;
            r->spec.target_s += f.target_s, r->spec.passes += f.passes, r->spec.pass_tokens += f.pass_tokens;
            r->hits += hits;
            loom_engine_get_stats(r->e, &after);
            r->lat[it - o->warmup] = p + d;
            r->pre += p, r->dec += d, r->blocked += after.blocked_seconds - before.blocked_seconds;
        }
    if (!rc && o->save_load) rc = save_expert_load(comm, runs, o, &err);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    int n_ranks = loom_comm_size(comm);
    rank_figures *all = rc ? NULL : mem_array((size_t)n_ranks * o->n_modes, sizeof *all, "the ranks' figures", &err);
    if (!all) rc = 1;
    for (int k = 0; k < o->n_modes && !rc; k++) {
        mode_run *r = &runs[k];
        loom_engine_stats st;
        loom_engine_get_stats(r->e, &st);
        rank_figures mine = {ru.ru_maxrss / 1024.0f,
                             (float)(r->blocked / (r->pre + r->dec)),
                             (float)(st.activation_bytes / 1048576.0),
                             (float)st.stage,
                             (float)st.pipeline_idle,
                             (float)st.expert_seconds,
                             (float)st.expert_gflop,
                             (float)st.expert_pairs};
        rc = loom_comm_all_gather(comm, (const float *)&mine, RANK_FIGURES, (float *)(all + (size_t)k * n_ranks), &err);
    }
    if (rc && err.msg[0]) cli_rank_error("bench", comm, &err);
    else if (!rc && loom_comm_rank(comm) == 0) {
        double avg[MAX_MODES];
        for (int k = 0; k < o->n_modes; k++) {
            mode_run *r = &runs[k];
            loom_engine_stats st;
            loom_engine_get_stats(r->e, &st);
            if (o->n_modes > 1) printf("== mode %s\n", o->modes[k].name);
            avg[k] =
                report(o, o->modes[k].name, r->lat, r->pre, r->dec, r->hits, info.weight_bytes, st.decode_bytes,
                       st.activation_bytes, st.kv_bytes, st.kv_bytes_per_token, all + (size_t)k * n_ranks, n_ranks);
            if (o->spec_k) report_spec(o, r);
            if (o->profile) engine_print_profile(r->e, stdout);
            else engine_print_experts(r->e, stdout, false);
        }
        for (int k = 1; k < o->n_modes; k++)
            printf("Avg latency %s / %s: %.3f\n", o->modes[k].name, o->modes[0].name, avg[k] / avg[0]);
        if (o->spec_k)
            printf("Decode speed-up of speculation: %.3fx (plain %.4f s, speculative %.4f s per batch); one pass "
                   "over %.2f tokens a sequence costs %.3fx a one-token pass\n",
                   runs[0].dec / runs[1].dec, runs[0].dec / o->iters, runs[1].dec / o->iters,
                   (double)runs[1].spec.pass_tokens / runs[1].spec.passes / o->batch,
                   (runs[1].spec.target_s / runs[1].spec.passes) / (runs[0].spec.target_s / runs[0].spec.passes));
    }
    free(all);
    for (int k = 0; k < o->n_modes; k++)
        free(runs[k].lat), loom_speculator_free(runs[k].sp), loom_engine_free(runs[k].e);
    free(b.first), free(b.hist), free(b.drafts), free(b.len), free(b.max_draft), free(b.n_draft), free(b.active);
    free(b.hist_of);
    free(b.ids), free(b.pos), free(b.seq), free(b.rows), free(b.prompts), free(b.from), free(b.blocks);
    return rc ? 1 : 0;
}

/* ep, ep-sp: expert parallelism beside tensor-parallel attention, without and with SP */
static const bench_mode known_modes[] = {{"tp", false, false, false, false},
                                         {"sp", true, false, false, false},
                                         {"async", true, true, false, false},
                                         {"ep", false, false, true, false},
                                         {"ep-sp", true, false, true, false}};

/* --compare tp,sp,async: the modes to alternate (default: the one the flags say). */
static int parse_modes(latency_opts *o, const char *list) {
    o->n_modes = 0;
    char buf[64];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        size_t k = 0;
        while (k < sizeof known_modes / sizeof known_modes[0] && strcmp(t, known_modes[k].name)) k++;
        if (o->n_modes == MAX_MODES || k == sizeof known_modes / sizeof known_modes[0]) {
            fprintf(stderr, "loom bench latency: --compare takes up to %d of: tp, sp, async, ep, ep-sp (got '%s')\n",
                    MAX_MODES, list);
            return -1;
        }
        o->modes[o->n_modes++] = known_modes[k];
    }
    return 0;
}

static int bench_latency(int argc, char **argv) {
    latency_opts o = {
        .c = CLI_COMMON_DEFAULTS, .input_len = 32, .output_len = 128, .batch = 8, .warmup = 10, .iters = 30};
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
        else if (!strcmp(a, "--repeat-prompts")) o.repeat = true;
        else if (!strcmp(a, "--save-expert-load")) o.save_load = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--max-num-batched-tokens"))
            o.max_batched = (int)cli_int(a, cli_value(argc, argv, &i), 1, 1 << 20);
        else if (!strcmp(a, "--compare")) {
            if (parse_modes(&o, cli_value(argc, argv, &i))) return 2;
        } else {
            fprintf(stderr, "loom bench latency: unknown option '%s'\n", a);
            return 2;
        }
    }
    if (o.c.spec_json && o.n_modes) {
        fprintf(stderr, "loom bench latency: --compare and --speculative-config do not go together (speculation "
                        "compares itself with plain greedy decoding)\n");
        return 2;
    }
    loom_model *m = cli_load_model(&o.c, false);
    if (!m) return 1;
    if (cli_load_speculation(&o.c)) {
        cli_free(&o.c, m);
        return 1;
    }
    loom_model_info info;
    loom_model_get_info(m, &info);
    o.vocab = info.vocab;
    o.spec_k = o.c.spec_json ? o.c.spec.num_speculative_tokens : 0;
    if (!o.n_modes) o.modes[o.n_modes++] = known_modes[o.c.async_tp ? 2 : o.c.ep ? 3 + o.c.sp : o.c.sp ? 1 : 0];
    if (o.spec_k) { /* plain greedy decoding, then speculative, alternating */
        o.modes[0].name = "plain";
        o.modes[1] = o.modes[0];
        o.modes[1].name = "speculative", o.modes[1].spec = true;
        o.n_modes = 2;
    }
    for (int k = 0; k < o.n_modes; k++) /* collectives are sized for the widest; async TP's MPI needs */
        o.c.sp |= o.modes[k].sp, o.c.async_tp |= o.modes[k].async_tp; /* the progress thread */
    bool ep = false; /* the plan checked and the slots sized for: expert parallel where a mode is */
    for (int k = 0; k < o.n_modes; k++) ep |= o.modes[k].ep;
    /* prompts go in passes of at most max_batched tokens (default: up to 8192 at once) */
    int limit = o.max_batched ? o.max_batched : 8192,
        chunk = o.batch * o.input_len < limit ? o.batch * o.input_len : limit;
    if (chunk < o.batch * (o.spec_k + 1)) chunk = o.batch * (o.spec_k + 1);
    latency_job j = {.o = &o, .m = m, .eo = cli_engine_options(&o.c)};
    j.eo.expert_parallel = ep;
    j.eo.max_seqs = o.batch, j.eo.max_ctx = o.input_len + o.output_len, j.eo.max_tokens = chunk;
    int rc = cli_spec_engine_options(&o.c, m, &j.eo) ? 1 : cli_launch(&o.c, m, &j.eo, 0, latency_rank, &j);
    cli_free(&o.c, m);
    return rc;
}

/* OpenBLAS's sgemm and the linears' GEMM (oneDNN) at a prefill-like shape and a
 * multi-threaded streaming read, best of a few runs. */
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
    if (cli_print_cpu("bench machine", stdout)) return 1;
    int M = 512, N = 2048, K = 2048;
    loom_err err;
    float *a = mem_aligned((size_t)M * K * 4, "the GEMM's input", &err);
    float *w = a ? mem_aligned((size_t)N * K * 4, "the GEMM's weights", &err) : NULL;
    float *c = w ? mem_aligned((size_t)M * N * 4, "the GEMM's output", &err) : NULL;
    if (!c) {
        free(a), free(w);
        fprintf(stderr, "loom bench machine: %s\n", err.msg);
        return 1;
    }
    for (size_t i = 0; i < (size_t)M * K; i++) a[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < (size_t)N * K; i++) w[i] = (float)(i % 5) * 0.1f;
    for (int lib = 0; lib < 2; lib++) {
        double best = 1e9;
        for (int r = 0; r < 8; r++) {
            double t0 = cli_now();
            if (lib) gemm_f32(M, N, K, a, K, w, K, c, N);
            else cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1, a, K, w, K, 0, c, N);
            double t = cli_now() - t0;
            if (t < best) best = t;
        }
        printf("%s %dx%dx%d: %.1f GFLOP/s (%d threads)\n", lib ? "linears' GEMM" : "sgemm (OpenBLAS)", M, N, K,
               2.0 * M * N * K / best / 1e9, omp_get_max_threads());
    }
    free(a), free(w), free(c);
    size_t n = (size_t)1 << 28; /* 1 GiB of floats */
    float *buf = mem_aligned(n * 4, "the memory read", &err);
    if (!buf) {
        fprintf(stderr, "loom bench machine: %s\n", err.msg);
        return 1;
    }
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) buf[i] = 1.0f;
    double best = 1e9;
    volatile float sink = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = cli_now();
        float s = 0;
        const int block = 1 << 16; /* floats per call of the kernel variant's streaming read */
#pragma omp parallel for reduction(+ : s)
        for (size_t i = 0; i < n; i += block) s += cpu()->sum_squares(buf + i, block);
        double t = cli_now() - t0;
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
    if (argc >= 1 && !strcmp(argv[0], "grammar")) return bench_grammar(argc - 1, argv + 1);
    if (argc >= 1 && !strcmp(argv[0], "image")) return bench_image(argc - 1, argv + 1);
    fprintf(stderr, "usage: loom bench latency|machine|grammar|image [options]\n");
    return 2;
}

/* Prometheus text exposition of the server's metrics (see metrics.h). */
#include "serve/metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/alloc.h"

/* seconds: time to first token and end-to-end latency span ms to minutes; inter-token
 * latency lies in the low buckets */
static const double latency_bounds[HIST_BUCKETS] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08,
                                                    0.1,   0.25,  0.5,  1,    2.5,  10,   60};

void metrics_init(metrics *m, int slots_total) {
    memset(m, 0, sizeof *m);
    m->slots_total = slots_total;
    m->ttft.bounds = m->itl.bounds = m->e2e.bounds = latency_bounds;
}

void histogram_add(histogram *h, double v) {
    int b = 0;
    while (b < HIST_BUCKETS && v > h->bounds[b]) b++;
    h->count[b]++;
    h->sum += v;
}

typedef struct text {
    char *s;
    size_t len, cap;
    bool failed; /* out of memory: the rest is dropped, and the text is NULL */
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
    while (!t->failed) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->s ? t->s + t->len : NULL, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < t->cap - t->len) {
            t->len += n;
            return;
        }
        t->failed = n < 0 || ARRAY_RESERVE(t->s, t->cap, t->len + n + 1, "the metrics text", NULL);
    }
}

static void scalar(text *t, const char *name, const char *type, const char *help, const char *label, double v) {
    put(t, "# HELP loom:%s %s\n# TYPE loom:%s %s\nloom:%s{%s} %.17g\n", name, help, name, type, name, label, v);
}

static void hist(text *t, const char *name, const char *help, const char *label, const histogram *h) {
    put(t, "# HELP loom:%s %s\n# TYPE loom:%s histogram\n", name, help, name);
    uint64_t acc = 0;
    for (int b = 0; b <= HIST_BUCKETS; b++) {
        acc += h->count[b];
        if (b < HIST_BUCKETS)
            put(t, "loom:%s_bucket{%s,le=\"%g\"} %llu\n", name, label, h->bounds[b], (unsigned long long)acc);
        else put(t, "loom:%s_bucket{%s,le=\"+Inf\"} %llu\n", name, label, (unsigned long long)acc);
    }
    put(t, "loom:%s_sum{%s} %.17g\nloom:%s_count{%s} %llu\n", name, label, h->sum, name, label,
        (unsigned long long)acc);
}

char *metrics_text(const metrics *m, const char *model_name) {
    text t = {0};
    char label[256];
    snprintf(label, sizeof label, "model_name=\"%s\"", model_name);
    scalar(&t, "num_requests_running", "gauge", "Requests holding a sequence slot.", label, m->running);
    scalar(&t, "num_requests_waiting", "gauge", "Requests queued for a slot.", label, m->waiting);
    scalar(&t, "kv_slots_used", "gauge", "KV cache sequence slots in use.", label, m->slots_used);
    scalar(&t, "kv_slots_total", "gauge", "KV cache sequence slots (--max-num-seqs).", label, m->slots_total);
    scalar(&t, "kv_cache_usage_perc", "gauge", "Fraction of the KV cache's blocks held by sequences (1 = full).", label,
           m->blocks_total ? (double)m->blocks_used / m->blocks_total : 0);
    scalar(&t, "kv_blocks_used", "gauge", "KV cache blocks held by sequences.", label, m->blocks_used);
    scalar(&t, "kv_blocks_total", "gauge", "KV cache blocks in the pool.", label, m->blocks_total);
    scalar(&t, "prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.", label,
           (double)m->prefix_queries);
    scalar(&t, "prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.", label,
           (double)m->prefix_hits);
    scalar(&t, "num_preemptions_total", "counter",
           "Running requests put back in the queue for want of KV blocks (recomputed later).", label,
           (double)m->preemptions);
    scalar(&t, "grammar_cache_bytes", "gauge",
           "Bytes the cache of compiled grammars holds (their elements, masks and states).", label,
           (double)m->grammar_cache_bytes);
    scalar(&t, "prompt_tokens_total", "counter", "Prompt tokens of the requests admitted.", label,
           (double)m->prompt_tokens);
    scalar(&t, "generation_tokens_total", "counter", "Tokens generated.", label, (double)m->generation_tokens);
    put(&t,
        "# HELP loom:request_success_total Requests finished, by reason.\n# TYPE loom:request_success_total counter\n");
    put(&t, "loom:request_success_total{%s,finished_reason=\"stop\"} %llu\n", label,
        (unsigned long long)m->finished_stop);
    put(&t, "loom:request_success_total{%s,finished_reason=\"length\"} %llu\n", label,
        (unsigned long long)m->finished_length);
    put(&t, "loom:request_success_total{%s,finished_reason=\"abort\"} %llu\n", label,
        (unsigned long long)m->finished_abort);
    scalar(&t, "request_failure_total", "counter", "Requests the engine failed.", label, (double)m->failed);
    if (m->spec.k) { /* vLLM's spec_decode counters */
        scalar(&t, "spec_decode_num_drafts_total", "counter", "Verifications of at least one proposed token.", label,
               (double)m->spec.drafts);
        scalar(&t, "spec_decode_num_draft_tokens_total", "counter", "Tokens proposed.", label,
               (double)m->spec.draft_tokens);
        scalar(&t, "spec_decode_num_accepted_tokens_total", "counter", "Proposed tokens the target accepted.", label,
               (double)m->spec.accepted_tokens);
        put(&t, "# HELP loom:spec_decode_num_accepted_tokens_per_pos_total Accepted proposals by position.\n"
                "# TYPE loom:spec_decode_num_accepted_tokens_per_pos_total counter\n");
        for (int i = 0; i < m->spec.k; i++)
            put(&t, "loom:spec_decode_num_accepted_tokens_per_pos_total{%s,position=\"%d\"} %ld\n", label, i,
                m->spec.accepted_at[i]);
    }
    if (m->dp > 1) {
        put(&t, "# HELP loom:data_parallel_requests_total Requests given to each data-parallel replica.\n"
                "# TYPE loom:data_parallel_requests_total counter\n");
        for (int d = 0; d < m->dp && d < METRICS_MAX_REPLICAS; d++)
            put(&t, "loom:data_parallel_requests_total{%s,engine=\"%d\"} %llu\n", label, d,
                (unsigned long long)m->routed[d]);
        scalar(&t, "data_parallel_prefix_routed_total", "counter",
               "Requests given to another replica than the least loaded, for the cached prefix of their prompt "
               "it holds.",
               label, (double)m->routed_prefix);
    }
    hist(&t, "time_to_first_token_seconds", "Time from arrival to the first generated token.", label, &m->ttft);
    hist(&t, "inter_token_latency_seconds", "Time between consecutive generated tokens.", label, &m->itl);
    hist(&t, "e2e_request_latency_seconds", "Time from arrival to the last token.", label, &m->e2e);
    if (!t.failed) return t.s;
    free(t.s);
    return NULL;
}

/* The server's Prometheus metrics (GET /metrics), named as vLLM names its own with a loom:
 * prefix: gauges of requests running and waiting and of the KV cache's slots and blocks in use,
 * counters of tokens, prefix cache queries and hits, preemptions and finished requests, and
 * latency histograms. Updated under the server lock; the gauges
 * are read from the scheduler when the metrics are asked for. */
#ifndef LOOM_SERVE_METRICS_H
#define LOOM_SERVE_METRICS_H
#include <stddef.h>
#include <stdint.h>

#include "loom.h"

#define HIST_BUCKETS         14
#define METRICS_MAX_REPLICAS 64

typedef struct histogram {
    const double *bounds; /* upper bounds of the buckets, ascending; +Inf implied */
    uint64_t count[HIST_BUCKETS + 1];
    double sum;
} histogram;

typedef struct metrics {
    int running, waiting, slots_used, slots_total;
    int blocks_used, blocks_total; /* the KV cache's, as of the last step */
    uint64_t prompt_tokens, generation_tokens;
    uint64_t prefix_queries, prefix_hits; /* prompt tokens looked up in the prefix cache, and found */
    uint64_t preemptions;
    size_t grammar_cache_bytes; /* the compiled grammars' cache, as of the request for /metrics */
    uint64_t finished_stop, finished_length, finished_abort, failed;
    histogram ttft, itl, e2e;
    loom_spec_stats spec; /* speculative decoding's counters (spec.k 0: none) */
    /* data parallelism (dp > 1): requests given to each replica, and of them those whose replica
     * was chosen for a cached prefix of their prompt */
    int dp;
    uint64_t routed[METRICS_MAX_REPLICAS], routed_prefix;
} metrics;

void metrics_init(metrics *m, int slots_total);
void histogram_add(histogram *h, double v);
/* The Prometheus text exposition of m; malloc'd (NULL when out of memory). */
char *metrics_text(const metrics *m, const char *model_name);

#endif

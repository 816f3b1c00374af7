/* Mixture-of-experts kernels: routing (scores, then top-k, optionally limited to the best groups),
 * then one pass per expert over the rows routed to it -- gathered into a contiguous block, so each
 * expert is three GEMMs of n_e rows rather than n_e matrix-vector products -- and a weighted sum
 * back per row, over its experts in increasing index, so each row's sum has one fixed order. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "kernels/kernels.h"
#include "util/alloc.h"

/* The caller names the failure (it has the error path), so the sizes here report nowhere; on
 * failure nothing stays allocated. */
int moe_scratch_init(moe_scratch *s, int rows, const moe_shape *sh) {
    size_t routed = (size_t)rows * sh->top_k, per_thread = (size_t)omp_get_max_threads() * rows;
    const char *what = "the experts' scratch";
    *s = (moe_scratch){.threads = omp_get_max_threads()};
    /* per thread, one expert's rows at a time (at most every row); y: see moe_forward */
    if ((s->choice = mem_array(routed, sizeof *s->choice, what, NULL)) &&
        (s->weight = mem_array(routed, sizeof *s->weight, what, NULL)) &&
        (s->token = mem_array(routed, sizeof *s->token, what, NULL)) &&
        (s->slot = mem_array(routed, sizeof *s->slot, what, NULL)) &&
        (s->pair = mem_array(routed, sizeof *s->pair, what, NULL)) &&
        (s->count = mem_array((size_t)sh->n_experts, sizeof *s->count, what, NULL)) &&
        (s->start = mem_array((size_t)sh->n_experts + 1, sizeof *s->start, what, NULL)) &&
        (s->x = mem_array(per_thread * sh->hidden, sizeof *s->x, what, NULL)) &&
        (s->gate = mem_array(per_thread * sh->inter, sizeof *s->gate, what, NULL)) &&
        (s->up = mem_array(per_thread * sh->inter, sizeof *s->up, what, NULL)) &&
        (s->y = mem_array((s->threads > 1 ? routed : (size_t)rows) * sh->hidden, sizeof *s->y, what, NULL)))
        return 0;
    moe_scratch_free(s);
    return -1;
}

size_t moe_scratch_bytes(int rows, const moe_shape *sh, int threads) {
    size_t y_rows = threads > 1 ? (size_t)rows * sh->top_k : (size_t)rows;
    return (y_rows * sh->hidden + (size_t)threads * rows * (sh->hidden + 2 * sh->inter)) * sizeof(float);
}

void moe_scratch_free(moe_scratch *s) {
    free(s->choice), free(s->weight), free(s->token), free(s->slot), free(s->pair), free(s->count), free(s->start);
    free(s->x), free(s->y), free(s->gate), free(s->up);
    memset(s, 0, sizeof *s);
}

/* The k largest of v[0..n), largest first; on equal values the lower index first. */
static void top_k(const float *v, int n, int k, int32_t *idx) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < n; e++) {
            bool taken = false;
            for (int i = 0; i < j && !taken; i++) taken = idx[i] == e;
            if (!taken && (best < 0 || v[e] > v[best])) best = e;
        }
        idx[j] = best;
    }
}

static void softmax(const float *v, int n, float *p) {
    float max = v[0], sum = 0;
    for (int i = 1; i < n; i++) max = v[i] > max ? v[i] : max;
    for (int i = 0; i < n; i++) sum += p[i] = expf(v[i] - max);
    for (int i = 0; i < n; i++) p[i] /= sum;
}

/* A group's score for group-limited routing: its best, or the sum of its two best (DeepSeek-V3). */
static float group_score(const float *v, int n, bool top2) {
    int32_t best[2];
    int k = top2 && n > 1 ? 2 : 1;
    top_k(v, n, k, best);
    return k == 2 ? v[best[0]] + v[best[1]] : v[best[0]];
}

/* The scores to choose the experts by: the scores plus the correction bias, and -inf outside the
 * topk_group best groups, so that no expert there can be chosen (transformers fills 0 there: the
 * same choice while the candidates' choosing scores are positive). Without bias or groups, the
 * scores themselves; else written to buf. */
static const float *choosing_scores(const float *score, const moe_shape *sh, float *buf) {
    int E = sh->n_experts, G = sh->n_group;
    if (!sh->bias && !G) return score;
    for (int e = 0; e < E; e++) buf[e] = score[e] + (sh->bias ? sh->bias[e] : 0);
    if (!G) return buf;
    int size = E / G;
    float gscore[512];
    int32_t best[512];
    bool keep[512] = {false};
    for (int g = 0; g < G; g++) gscore[g] = group_score(buf + g * size, size, sh->group_top2_sum);
    top_k(gscore, G, sh->topk_group, best);
    for (int j = 0; j < sh->topk_group; j++) keep[best[j]] = true;
    for (int g = 0; g < G; g++)
        if (!keep[g])
            for (int e = g * size; e < (g + 1) * size; e++) buf[e] = -INFINITY;
    return buf;
}

void moe_route(const float *logits, size_t ldl, int rows, const moe_shape *sh, int32_t *choice, float *weight) {
    int E = sh->n_experts, k = sh->top_k;
    float scale = sh->scale == 0 ? 1 : sh->scale; /* 0: a shape that does not set it */
#pragma omp parallel for schedule(static) if (rows > 16)
    for (int r = 0; r < rows; r++) {
        const float *l = logits + (size_t)r * ldl;
        int32_t *c = choice + (size_t)r * k;
        float *w = weight + (size_t)r * k, score[512], buf[512];
        if (sh->softmax_of_topk) {
            top_k(l, E, k, c);
            for (int j = 0; j < k; j++) buf[j] = l[c[j]];
            softmax(buf, k, w);
            continue;
        }
        if (sh->sigmoid)
            for (int e = 0; e < E; e++) score[e] = 1 / (1 + expf(-l[e]));
        else softmax(l, E, score);
        top_k(choosing_scores(score, sh, buf), E, k, c);
        float sum = 0;
        for (int j = 0; j < k; j++) sum += w[j] = score[c[j]];
        if (sh->norm_topk) {
            if (sh->sigmoid) sum += 1e-20f; /* as transformers' DeepSeek-V3 does */
            for (int j = 0; j < k; j++) w[j] /= sum;
        }
        if (scale != 1)
            for (int j = 0; j < k; j++) w[j] *= scale;
    }
}

/* y[n, H] = down(act(gate x) * up x), or without a gate down(relu(up x)^2), for the n rows tok[]
 * of x, through the scratch xs, g, u (expert e: its matrices w, its biases from sh). */
static void run_expert(const moe_shape *sh, int e, const wmat *w, const float *x, size_t ldx, const int32_t *tok, int n,
                       float *xs, float *g, float *u, float *y) {
    int H = sh->hidden, I = sh->inter;
    const float *const *b = sh->expert_bias ? sh->expert_bias + 3 * e : (const float *const[3]){NULL, NULL, NULL};
    for (int i = 0; i < n; i++) memcpy(xs + (size_t)i * H, x + (size_t)tok[i] * ldx, H * sizeof *x);
    if (sh->gate.kind != GATE_RELU2) linear(xs, H, n, n, &w[0], b[0], g, I);
    linear(xs, H, n, n, &w[1], b[1], u, I);
    glu(&sh->gate, g, I, u, I, g, I, n, I);
    linear(g, I, n, n, &w[2], b[2], y, H);
}

void moe_forward(const moe_shape *sh, const wmat *experts, const float *x, size_t ldx, const float *logits, size_t ldl,
                 int rows, float *out, size_t ldo, moe_scratch *s) {
    moe_route(logits, ldl, rows, sh, s->choice, s->weight);
    moe_experts(sh, experts, x, ldx, rows, s->choice, s->weight, out, ldo, s);
}

void moe_experts(const moe_shape *sh, const wmat *experts, const float *x, size_t ldx, int rows, const int32_t *choice,
                 const float *weight, float *out, size_t ldo, moe_scratch *s) {
    int E = sh->n_experts, k = sh->top_k, H = sh->hidden, I = sh->inter;
    /* bucket the (row, expert) pairs by expert, rows in increasing order within each */
    memset(s->count, 0, E * sizeof *s->count);
    for (int i = 0; i < rows * k; i++)
        if (choice[i] >= 0) s->count[choice[i]]++;
    s->start[0] = 0;
    for (int e = 0; e < E; e++) s->start[e + 1] = s->start[e] + s->count[e];
    memset(s->count, 0, E * sizeof *s->count);
    for (int i = 0; i < rows * k; i++) {
        if (choice[i] < 0) continue;
        int e = choice[i], at = s->start[e] + s->count[e]++;
        s->token[at] = i / k;
        s->pair[at] = i;
        s->slot[i] = at;
    }
    /* One thread: each expert's output is added into its rows at once, experts in increasing
     * index, so y holds one expert's rows (top_k times less than every pair's). Several: the
     * experts are spread over the threads, each expert's GEMMs single-threaded (OpenBLAS inside
     * a parallel region), one GEMM of few rows using a core better than two do; every pair's
     * output is kept, and each row then sums its experts in increasing index. Both add the same
     * terms in the same order: the same bits. */
    if (s->threads == 1) {
        for (int r = 0; r < rows; r++) memset(out + (size_t)r * ldo, 0, H * sizeof *out);
        for (int e = 0; e < E; e++) {
            int n = s->count[e];
            if (!n) continue;
            run_expert(sh, e, experts + 3 * e, x, ldx, s->token + s->start[e], n, s->x, s->gate, s->up, s->y);
            for (int i = 0; i < n; i++)
                cpu()->axpy(weight[s->pair[s->start[e] + i]], s->y + (size_t)i * H,
                            out + (size_t)s->token[s->start[e] + i] * ldo, H);
        }
        return;
    }
#pragma omp parallel for schedule(dynamic, 1) num_threads(s->threads)
    for (int e = 0; e < E; e++) {
        int n = s->count[e], t = omp_get_thread_num();
        if (n)
            run_expert(sh, e, experts + 3 * e, x, ldx, s->token + s->start[e], n, s->x + (size_t)t * rows * H,
                       s->gate + (size_t)t * rows * I, s->up + (size_t)t * rows * I, s->y + (size_t)s->start[e] * H);
    }
#pragma omp parallel for schedule(static) if (rows > 16)
    for (int r = 0; r < rows; r++) {
        int32_t order[64];
        const int32_t *c = choice + (size_t)r * k;
        int n = 0;
        for (int j = 0; j < k; j++) { /* insertion sort of the k (<= 64) choices by expert */
            if (c[j] < 0) continue;
            int i = n++;
            for (; i > 0 && c[order[i - 1]] > c[j]; i--) order[i] = order[i - 1];
            order[i] = j;
        }
        float *o = out + (size_t)r * ldo;
        memset(o, 0, H * sizeof *o);
        for (int j = 0; j < n; j++) {
            int pair = r * k + order[j];
            cpu()->axpy(weight[pair], s->y + (size_t)s->slot[pair] * H, o, H);
        }
    }
}

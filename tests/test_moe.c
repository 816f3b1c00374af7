/* Mixture-of-experts routing and expert kernels, on data built so that the answer is known:
 * routing ties (lower expert index first, never an expert twice), the two routing orders
 * (softmax then top-k, top-k then softmax), renormalisation, DeepSeek's group-limited routing
 * (ties between groups, too), correction bias and scaling, and a forward pass in which some
 * experts receive no row, against a per-row reference. The architectures themselves are
 * checked against transformers in test_golden and test_parallel. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/kernels.h"

static void check_route_shape(const char *what, const float *logits, const moe_shape *sh, const int32_t *want,
                              const float *want_w) {
    int32_t choice[8];
    float weight[8];
    moe_route(logits, sh->n_experts, 1, sh, choice, weight);
    for (int j = 0; j < sh->top_k; j++) {
        CHECK(choice[j] == want[j], "%s: choice %d is expert %d, expected %d", what, j, choice[j], want[j]);
        CHECK(fabsf(weight[j] - want_w[j]) < 1e-6f, "%s: weight %d is %g, expected %g", what, j, weight[j], want_w[j]);
    }
}

static void check_route(const char *what, const float *logits, int n_experts, int top_k, bool softmax_of_topk,
                        bool norm, const int32_t *want, const float *want_w) {
    moe_shape sh = {.n_experts = n_experts, .top_k = top_k, .softmax_of_topk = softmax_of_topk, .norm_topk = norm};
    check_route_shape(what, logits, &sh, want, want_w);
}

static void routing(void) {
    float equal[4] = {1, 1, 1, 1};
    check_route("all tied, top 2", equal, 4, 2, false, false, (int32_t[]){0, 1}, (float[]){0.25f, 0.25f});
    check_route("all tied, top 2, renormalised", equal, 4, 2, false, true, (int32_t[]){0, 1}, (float[]){0.5f, 0.5f});
    check_route("all tied, every expert", equal, 4, 4, false, false, (int32_t[]){0, 1, 2, 3},
                (float[]){0.25f, 0.25f, 0.25f, 0.25f});
    /* experts 1 and 3 tie for first, 0 and 2 for third */
    float pairs[4] = {0, logf(3), 0, logf(3)};
    check_route("tied pairs, top 3", pairs, 4, 3, false, false, (int32_t[]){1, 3, 0},
                (float[]){3.0f / 8, 3.0f / 8, 1.0f / 8});
    check_route("tied pairs, top 3, renormalised", pairs, 4, 3, false, true, (int32_t[]){1, 3, 0},
                (float[]){3.0f / 7, 3.0f / 7, 1.0f / 7});
    /* GraniteMoE: softmax over the chosen logits only */
    float spread[4] = {-5, logf(3), 2, 0};
    check_route("softmax of the top 2", spread, 4, 2, true, false, (int32_t[]){2, 1},
                (float[]){expf(2) / (expf(2) + 3), 3 / (expf(2) + 3)});
    /* DeepSeek-V2's routed_scaling_factor, without renormalisation */
    moe_shape scaled = {.n_experts = 4, .top_k = 3, .scale = 1.5f};
    check_route_shape("tied pairs, top 3, scaled by 1.5", pairs, &scaled, (int32_t[]){1, 3, 0},
                      (float[]){1.5f * 3 / 8, 1.5f * 3 / 8, 1.5f * 1 / 8});
}

/* The logits whose softmax is p[0..n) / sum(p). */
static void logits_of(const float *p, int n, float *l) {
    for (int i = 0; i < n; i++) l[i] = logf(p[i]);
}

/* DeepSeek-V2 group_limited_greedy: softmax scores, a group scores its best, only the experts of
 * the topk_group best groups can be chosen. */
static void group_limited(void) {
    float l[8];
    /* groups {0,1} {2,3} {4,5} {6,7} score 4, 3, 3, 1: groups 1 and 2 tie, and group 1 (the lower)
     * joins group 0; so expert 5 (2.9) is passed over for expert 3 (2.5), and expert 4 (3) for its
     * equal, expert 2 -- without groups the top 3 would be 0, 2, 4 */
    logits_of((float[]){4, 1, 3, 2.5f, 3, 2.9f, 1, 1}, 8, l);
    moe_shape sh = {.n_experts = 8, .top_k = 3, .n_group = 4, .topk_group = 2};
    check_route_shape("groups tie", l, &sh, (int32_t[]){0, 2, 3}, (float[]){4 / 18.4f, 3 / 18.4f, 2.5f / 18.4f});
    moe_shape flat = {.n_experts = 8, .top_k = 3};
    check_route_shape("groups tie, without groups", l, &flat, (int32_t[]){0, 2, 4},
                      (float[]){4 / 18.4f, 3 / 18.4f, 3 / 18.4f});
    /* groups {0..3} {4..7} score 3 and 2.5: only group 0 stays, where experts 1, 2 and 3 tie for
     * second (expert 1 takes it), although experts 4, 5 and 6 score more */
    logits_of((float[]){3, 1, 1, 1, 2, 2.5f, 2.5f, 1}, 8, l);
    sh = (moe_shape){.n_experts = 8, .top_k = 2, .norm_topk = true, .n_group = 2, .topk_group = 1};
    check_route_shape("experts tie within a group, renormalised", l, &sh, (int32_t[]){0, 1},
                      (float[]){3.0f / 4, 1.0f / 4});
}

static float sigmoid(float x) { return 1 / (1 + expf(-x)); }

/* DeepSeek-V3 noaux_tc: sigmoid scores; the correction bias moves the choice (groups scoring the
 * sum of their two best, then experts), while the weights are the scores without it. */
static void noaux_tc(void) {
    float l[8] = {2, -1, 1, 1, 0, 0.5f, -2, -3};
    moe_shape sh = {.n_experts = 8,
                    .top_k = 3,
                    .norm_topk = true,
                    .sigmoid = true,
                    .n_group = 4,
                    .topk_group = 2,
                    .group_top2_sum = true,
                    .scale = 2.5f};
    /* no bias: groups {0,1} {2,3} {4,5} {6,7} score s(2)+s(-1) = 1.15, 2s(1) = 1.46, s(0)+s(0.5) =
     * 1.12 and 0.17: groups 1 and 0; then s(2) = 0.88, and experts 2 and 3 tie at s(1) = 0.73 */
    float sum = sigmoid(2) + 2 * sigmoid(1);
    check_route_shape("sigmoid, top-2 groups", l, &sh, (int32_t[]){0, 2, 3},
                      (float[]){2.5f * sigmoid(2) / sum, 2.5f * sigmoid(1) / sum, 2.5f * sigmoid(1) / sum});
    /* the bias lifts group 2 to 1.12 + 1 = 2.12 and drops group 1 to 1.36, still above group 0:
     * groups 2 and 1; then 4 and 5 at 1.0 and 1.12, and expert 3 (0.73) above expert 2 (0.63) */
    sh.bias = (float[]){0, 0, -0.1f, 0, 0.5f, 0.5f, 0, 0};
    sum = sigmoid(0.5f) + sigmoid(0) + sigmoid(1);
    check_route_shape("sigmoid, top-2 groups, bias", l, &sh, (int32_t[]){5, 4, 3},
                      (float[]){2.5f * sigmoid(0.5f) / sum, 2.5f * sigmoid(0) / sum, 2.5f * sigmoid(1) / sum});
}

/* Experts with distinct weights; three rows, top 2 of 6 experts, so at least two get nothing. */
#define H    5
#define I    3
#define E    6
#define ROWS 3

static float val(int i) { return (float)((i * 7919) % 23) / 23.0f - 0.5f; }

static void forward(void) {
    static float w[E][3][H * I];
    wmat experts[3 * E];
    for (int e = 0; e < E; e++)
        for (int m = 0; m < 3; m++) {
            for (int i = 0; i < H * I; i++) w[e][m][i] = val(1000 * e + 100 * m + i);
            /* gate, up: [I, H]; down: [H, I] */
            experts[3 * e + m] =
                (wmat){DT_F32, m < 2 ? I : H, m < 2 ? H : I, m < 2 ? H : I, w[e][m], NULL, WACT_F32, 0};
        }
    float x[ROWS * H], logits[ROWS * E] = {0}, out[ROWS * H];
    for (int i = 0; i < ROWS * H; i++) x[i] = val(i + 77);
    /* row 0 -> experts 4, 1; row 1 -> 1, 4 (the same two, the other way round); row 2 -> 5, 1 */
    logits[0 * E + 4] = 3, logits[0 * E + 1] = 2;
    logits[1 * E + 1] = 3, logits[1 * E + 4] = 2;
    logits[2 * E + 5] = 3, logits[2 * E + 1] = 1;
    moe_shape sh = {.hidden = H, .inter = I, .n_experts = E, .top_k = 2, .norm_topk = true};
    moe_scratch s;
    CHECK(moe_scratch_init(&s, ROWS, &sh) == 0, "scratch");
    moe_forward(&sh, experts, x, H, logits, E, ROWS, out, H, &s);
    int used[E] = {0};
    for (int i = 0; i < ROWS * 2; i++) used[s.choice[i]]++;
    CHECK(!used[0] && !used[2] && !used[3], "experts 0, 2 and 3 should receive no row");
    for (int r = 0; r < ROWS; r++) {
        double p[E], sum = 0, ref[H] = {0};
        for (int e = 0; e < E; e++) sum += p[e] = exp(logits[r * E + e]);
        int c0 = s.choice[r * 2], c1 = s.choice[r * 2 + 1];
        for (int j = 0; j < 2; j++) {
            int e = j ? c1 : c0;
            double wt = p[e] / (p[c0] + p[c1]), act[I];
            for (int f = 0; f < I; f++) {
                double g = 0, u = 0;
                for (int c = 0; c < H; c++)
                    g += w[e][0][f * H + c] * x[r * H + c], u += w[e][1][f * H + c] * x[r * H + c];
                act[f] = g / (1 + exp(-g)) * u;
            }
            for (int c = 0; c < H; c++)
                for (int f = 0; f < I; f++) ref[c] += wt * w[e][2][c * I + f] * act[f];
        }
        for (int c = 0; c < H; c++)
            CHECK(fabs(out[r * H + c] - ref[c]) < 1e-6, "row %d column %d: %g, expected %g", r, c, out[r * H + c],
                  ref[c]);
    }
    /* one thread adds each expert's rows at once; several keep every output and sum per row:
     * the same terms in the same order, so the same bits */
    float again[ROWS * H];
    int threads = s.threads;
    s.threads = threads > 1 ? 1 : 2;
    if (s.threads == 2) { /* grow y for the several-thread path */
        free(s.y);
        s.y = malloc((size_t)ROWS * 2 * H * sizeof *s.y);
    }
    moe_forward(&sh, experts, x, H, logits, E, ROWS, again, H, &s);
    CHECK(!memcmp(out, again, sizeof out), "one thread and several give different bits");
    moe_scratch_free(&s);
}

int main(void) {
    routing();
    group_limited();
    noaux_tc();
    forward();
    return check_done();
}

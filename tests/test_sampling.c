/* Sampling: greedy is torch.argmax (first maximum); a seeded sampler is reproducible and
 * draws from softmax(logits / T) (checked against the exact probabilities with a fixed seed);
 * top-k, top-p and min-p keep exactly the tokens they should; bad settings are refused.
 * A request's logits processing (src/serve/logits.c) against vLLM's formulas computed here in
 * double: repetition penalty over prompt and output (positive logits divided, negative
 * multiplied), frequency and presence penalties over the output, logit_bias, allowed_token_ids,
 * and min_tokens masking EOS and stop_token_ids. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runtime/sampling.h"
#include "serve/logits.h"

#define N 5

static void draw(const loom_sampling *cfg, const float *logits, int n, int *counts) {
    sampler s;
    loom_err err;
    memset(counts, 0, N * sizeof *counts);
    if (sampler_init(&s, cfg, N, &err)) return;
    for (int i = 0; i < n; i++) counts[sampler_next(&s, logits)]++;
    sampler_free(&s);
}

#define V 64 /* the vocabulary of the logits-processing test */

/* vLLM's processing of one row, in double: allowed_token_ids, min_tokens, logit_bias, then
 * repetition, frequency and presence penalties (vllm/model_executor/layers/utils.py's
 * apply_penalties). */
static void reference(const request *r, const int *eos, int n_eos, const float *raw, double *want) {
    int count[V] = {0};
    bool prompt[V] = {0};
    for (int i = 0; i < r->n_tokens; i++) count[r->tokens[i].id]++;
    for (int i = 0; i < r->n_prompt; i++) prompt[r->prompt[i]] = true;
    for (int t = 0; t < V; t++) {
        double x = raw[t];
        bool allowed = !r->n_allowed;
        for (int i = 0; i < r->n_allowed; i++) allowed |= r->allowed_ids[i] == t;
        if (!allowed) x = -INFINITY;
        for (int i = 0; i < n_eos && r->n_tokens < r->min_tokens && !r->sampling.ignore_eos; i++)
            if (eos[i] == t) x = -INFINITY;
        for (int i = 0; i < r->n_stop_ids && r->n_tokens < r->min_tokens; i++)
            if (r->stop_ids[i] == t) x = -INFINITY;
        for (int i = 0; i < r->n_bias; i++)
            if (r->bias_id[i] == t) x += r->bias[i];
        if (prompt[t] || count[t]) x = x > 0 ? x / r->repetition_penalty : x * r->repetition_penalty;
        x -= r->frequency_penalty * count[t];
        x -= r->presence_penalty * (count[t] > 0);
        want[t] = x;
    }
}

/* Processes a random row for r and compares it with the reference; returns the largest error. */
static double compare(const request *r, const loom_model_info *info, unsigned seed) {
    float raw[V], out[V];
    double want[V], worst = 0;
    int32_t count[V] = {0};
    srand(seed);
    for (int t = 0; t < V; t++) raw[t] = (float)(rand() % 2001 - 1000) / 100.0f; /* positive and negative */
    reference(r, info->eos_ids, info->n_eos, raw, want);
    request_process_logits(r, info, raw, out, count);
    for (int t = 0; t < V; t++) {
        if (isinf(want[t]) || isinf(out[t])) {
            CHECK(want[t] == out[t], "token %d: %g, want %g", t, out[t], want[t]);
            continue;
        }
        double err = fabs(out[t] - want[t]);
        worst = err > worst ? err : worst;
    }
    for (int t = 0; t < V; t++) CHECK(!count[t], "the scratch counts must be left zero (token %d: %d)", t, count[t]);
    return worst;
}

static void test_logits_processing(void) {
    static const int eos[] = {2, 5};
    loom_model_info info = {.vocab = V, .eos_ids = eos, .n_eos = 2};
    request *r = request_new(REQ_COMPLETION);
    static int32_t prompt[] = {1, 7, 7, 9, 30, 2}, bias_id[] = {3, 7, 40}, stop_ids[] = {11};
    static float bias[] = {100, -2.5f, -100};
    static req_token tokens[] = {{.id = 9}, {.id = 12}, {.id = 12}, {.id = 12}, {.id = 40}, {.id = 63}};
    request plain = *r;
    CHECK(!request_processes_logits(r), "a request with no processing asked processes nothing");
    r->prompt = prompt, r->n_prompt = 6, r->tokens = tokens, r->n_tokens = 6;
    r->bias_id = bias_id, r->bias = bias, r->n_bias = 3;
    r->stop_ids = stop_ids, r->n_stop_ids = 1;
    r->repetition_penalty = 1.3f, r->frequency_penalty = 0.7f, r->presence_penalty = -0.4f;
    double worst = compare(r, &info, 1);
    CHECK(worst < 1e-5, "penalties and logit_bias: largest error %g against vLLM's formulas", worst);
    /* min_tokens masks EOS and the stop ids while the output is shorter; not EOS under ignore_eos */
    float raw[V] = {0}, out[V];
    int32_t count[V] = {0};
    r->min_tokens = 7;
    CHECK(request_processes_logits(r), "min_tokens not reached: processing");
    CHECK(compare(r, &info, 2) < 1e-5, "with min_tokens");
    request_process_logits(r, &info, raw, out, count);
    CHECK(isinf(out[2]) && isinf(out[5]) && isinf(out[11]) && !isinf(out[0]),
          "min_tokens 7 at 6 tokens masks 2, 5, 11");
    r->sampling.ignore_eos = true;
    request_process_logits(r, &info, raw, out, count);
    CHECK(!isinf(out[2]) && !isinf(out[5]) && isinf(out[11]), "ignore_eos: only the stop id is masked");
    r->min_tokens = 6;
    request_process_logits(r, &info, raw, out, count);
    CHECK(!isinf(out[11]), "min_tokens reached: nothing masked");
    /* each alone, so that one cannot hide another's mistake */
    request one = plain;
    one.prompt = prompt, one.n_prompt = 6, one.tokens = tokens, one.n_tokens = 6;
    one.repetition_penalty = 0.5f;
    CHECK(request_processes_logits(&one) && compare(&one, &info, 3) < 1e-5, "repetition penalty alone");
    one.repetition_penalty = 1, one.frequency_penalty = 2;
    CHECK(compare(&one, &info, 4) < 1e-5, "frequency penalty alone");
    one.frequency_penalty = 0, one.presence_penalty = 2;
    CHECK(compare(&one, &info, 5) < 1e-5, "presence penalty alone");
    static int32_t allowed[] = {3, 12, 50};
    one.presence_penalty = 0, one.allowed_ids = allowed, one.n_allowed = 3, one.bias_id = bias_id, one.bias = bias,
    one.n_bias = 3;
    CHECK(request_processes_logits(&one) && compare(&one, &info, 6) < 1e-5, "allowed_token_ids with logit_bias");
    free(r);
}

int main(void) {
    const float ties[N] = {0.5f, 2.0f, 1.0f, 2.0f, -1.0f};
    int c[N], d[N];
    draw(&(loom_sampling){.temperature = 0, .top_p = 1}, ties, 10, c);
    CHECK(c[1] == 10, "greedy must take the first maximum (index 1), got counts %d %d %d %d %d", c[0], c[1], c[2], c[3],
          c[4]);

    /* probabilities 0.4, 0.3, 0.15, 0.1, 0.05 */
    const double p[N] = {0.4, 0.3, 0.15, 0.1, 0.05};
    float logits[N];
    for (int i = 0; i < N; i++) logits[i] = (float)log(p[i]) + 3.0f; /* a shift must not matter */
    const int n = 40000;
    draw(&(loom_sampling){.temperature = 1, .top_p = 1, .seed = 7}, logits, n, c);
    for (int i = 0; i < N; i++) /* 5 standard deviations of a binomial */
        CHECK(fabs(c[i] / (double)n - p[i]) < 5 * sqrt(p[i] * (1 - p[i]) / n), "token %d drawn %d/%d times, p=%.2f", i,
              c[i], n, p[i]);
    draw(&(loom_sampling){.temperature = 1, .top_p = 1, .seed = 7}, logits, n, d);
    CHECK(!memcmp(c, d, sizeof c), "the same seed must draw the same tokens");
    draw(&(loom_sampling){.temperature = 1, .top_p = 1, .seed = 8}, logits, n, d);
    CHECK(memcmp(c, d, sizeof c), "another seed should draw differently");

    draw(&(loom_sampling){.temperature = 1, .top_k = 2, .top_p = 1, .seed = 3}, logits, n, c);
    CHECK(c[2] + c[3] + c[4] == 0 && fabs(c[0] / (double)n - 0.4 / 0.7) < 0.02, "top-k 2: counts %d %d %d", c[0], c[1],
          c[2]);
    /* top-p 0.7 keeps {0.4, 0.3} exactly (0.4 < 0.7 <= 0.7) */
    draw(&(loom_sampling){.temperature = 1, .top_p = 0.7f, .seed = 3}, logits, n, c);
    CHECK(c[2] + c[3] + c[4] == 0 && c[0] && c[1], "top-p 0.7: counts %d %d %d", c[0], c[1], c[2]);
    /* low temperature sharpens towards the maximum */
    draw(&(loom_sampling){.temperature = 0.05f, .top_p = 1, .seed = 3}, logits, 1000, c);
    CHECK(c[0] == 1000, "temperature 0.05: the top token should win every draw, got %d", c[0]);

    /* min-p 0.3 keeps p >= 0.12 = 0.3 x 0.4: {0.4, 0.3, 0.15}, renormalised; with top-k 2 {0.4, 0.3} */
    draw(&(loom_sampling){.temperature = 1, .top_p = 1, .min_p = 0.3f, .seed = 11}, logits, n, c);
    for (int i = 0; i < N; i++) {
        double q = i < 3 ? p[i] / 0.85 : 0;
        CHECK(fabs(c[i] / (double)n - q) < 5 * sqrt(q * (1 - q) / n) + 1e-9, "min-p 0.3: token %d drawn %d/%d, p=%.3f",
              i, c[i], n, q);
    }
    draw(&(loom_sampling){.temperature = 1, .top_k = 2, .top_p = 1, .min_p = 0.3f, .seed = 11}, logits, n, c);
    CHECK(c[2] + c[3] + c[4] == 0 && c[0] && c[1], "min-p 0.3, top-k 2: counts %d %d %d", c[0], c[1], c[2]);
    /* after the temperature, as vLLM: at T = 2 the ratios are sqrt(p / 0.4), so 0.1 (0.5) stays, 0.05 (0.35) goes */
    draw(&(loom_sampling){.temperature = 2, .top_p = 1, .min_p = 0.4f, .seed = 11}, logits, n, c);
    CHECK(c[4] == 0 && c[3] > 0, "min-p 0.4 at T=2: counts %d %d %d %d %d", c[0], c[1], c[2], c[3], c[4]);
    test_logits_processing();

    sampler s;
    loom_err err = {{0}};
    CHECK(sampler_init(&s, &(loom_sampling){.temperature = -1, .top_p = 1}, N, &err) && strstr(err.msg, "--temp"),
          "negative temperature: %s", err.msg);
    CHECK(sampler_init(&s, &(loom_sampling){.temperature = 1, .top_p = 1.5f}, N, &err) && strstr(err.msg, "--top-p"),
          "top-p 1.5: %s", err.msg);
    CHECK(sampler_init(&s, &(loom_sampling){.temperature = 1, .top_p = 1, .min_p = 1.5f}, N, &err) &&
              strstr(err.msg, "--min-p"),
          "min-p 1.5: %s", err.msg);
    return check_done();
}

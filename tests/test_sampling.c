/* Sampling: greedy is torch.argmax (first maximum); a seeded sampler is reproducible and
 * draws from softmax(logits / T) (checked against the exact probabilities with a fixed seed);
 * top-k and top-p keep exactly the tokens they should; bad settings are refused. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "runtime/sampling.h"

#define N 5

static void draw(const loom_sampling *cfg, const float *logits, int n, int *counts) {
    sampler s;
    loom_err err;
    memset(counts, 0, N * sizeof *counts);
    if (sampler_init(&s, cfg, N, &err)) return;
    for (int i = 0; i < n; i++) counts[sampler_next(&s, logits)]++;
    sampler_free(&s);
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

    sampler s;
    loom_err err = {{0}};
    CHECK(sampler_init(&s, &(loom_sampling){.temperature = -1, .top_p = 1}, N, &err) && strstr(err.msg, "--temp"),
          "negative temperature: %s", err.msg);
    CHECK(sampler_init(&s, &(loom_sampling){.temperature = 1, .top_p = 1.5f}, N, &err) && strstr(err.msg, "--top-p"),
          "top-p 1.5: %s", err.msg);
    return check_done();
}

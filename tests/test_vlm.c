/* Gemma 3's images against transformers (tests/golden/make_vlm_golden.py): the vision tower and
 * projector's features of two pictures within 1e-4 of get_image_features; the logits of a
 * prompt with one picture and of one with two within 1e-4 of the full forward (the image
 * tokens seeing each other), in one pass and in passes cut after each image, and at tp 2 (the
 * tower sharded by heads and MLP features); with the tower whole on each rank (--mm-encoder-tp-mode
 * data) the features are one rank's bits, SP's and async TP's results tp 2's bits, and two
 * pipeline stages' one rank's. A batch that cuts an image is refused; image tokens without rows
 * run as plain tokens. */
#include <sys/mman.h>

#include "check.h"
#include "golden_util.h"

#define ATOL    1e-4
#define MAX_LEN 64

typedef struct vlm_golden {
    st_file f;
    int size, tokens, hidden, vocab, image_token;
    const float *pixels[2], *features[2];
    int n[2];
    int32_t ids[2][MAX_LEN];
    const float *logits[2];
    int32_t generated[8]; /* transformers' greedy tokens after prompt 1 */
} vlm_golden;

static const st_tensor *tensor(const vlm_golden *g, const char *fmt, int i) {
    char key[32];
    snprintf(key, sizeof key, fmt, i);
    return st_find(&g->f, key);
}

static int vlm_open(vlm_golden *g, loom_model *m) {
    char path[1000];
    loom_err err;
    snprintf(path, sizeof path, "%s/tests/golden/gemma3_vlm/golden.safetensors", LOOM_SOURCE_DIR);
    if (st_open(&g->f, path, &err)) return fprintf(stderr, "%s\n", err.msg), -1;
    loom_model_info info;
    loom_model_get_info(m, &info);
    g->size = info.image_size, g->tokens = info.image_tokens, g->hidden = info.hidden, g->vocab = info.vocab;
    g->image_token = info.image_token;
    for (int i = 0; i < 2; i++) {
        const st_tensor *px = tensor(g, "pixels_%d", i), *ft = tensor(g, "features_%d", i);
        const st_tensor *ids = tensor(g, "ids_%d", i), *lg = tensor(g, "logits_%d", i);
        if (!px || !ft || !ids || !lg || ids->shape[0] > MAX_LEN || px->shape[1] != g->size ||
            ft->shape[0] != g->tokens || ft->shape[1] != g->hidden)
            return fprintf(stderr, "%s: not the golden this test reads\n", path), -1;
        g->pixels[i] = px->data, g->features[i] = ft->data, g->logits[i] = lg->data;
        g->n[i] = (int)ids->shape[0];
        const st_tensor *gen = tensor(g, "generated_%d", 1);
        if (!gen || gen->shape[0] != 8) return fprintf(stderr, "%s: no generated_1\n", path), -1;
        for (int t = 0; t < 8; t++) {
            int64_t v;
            memcpy(&v, (const char *)gen->data + 8 * t, 8);
            g->generated[t] = (int32_t)v;
        }
        for (int t = 0; t < g->n[i]; t++) {
            int64_t v;
            memcpy(&v, (const char *)ids->data + 8 * t, 8);
            g->ids[i][t] = (int32_t)v;
        }
    }
    return 0;
}

static loom_model *load(void) {
    char path[1000];
    snprintf(path, sizeof path, "%s/tests/golden/gemma3_vlm", LOOM_SOURCE_DIR);
    loom_err err = {{0}};
    loom_model *m = loom_model_load(&(loom_model_options){.path = path, .dtype = "float32"}, &err);
    CHECK(m, "%s", err.msg);
    return m;
}

/* What one run produces: both pictures' features, then each prompt's logits (prompt 0's rows,
 * prompt 1's), one pass a prompt or (cut) a pass up to each image's end and one after. */
typedef struct job {
    loom_model *m;
    vlm_golden *g;
    int pp;
    bool sp, async, cut, data;
    float *out;
} job;

static size_t job_floats(const vlm_golden *g) {
    return (size_t)2 * g->tokens * g->hidden + (size_t)(g->n[0] + g->n[1]) * g->vocab;
}

/* Prompt s into seq s: whole, or cut after each image's last token. */
static int run_prompt(loom_engine *e, const vlm_golden *g, int s, const float *rows, bool cut, float *out,
                      loom_err *err) {
    int32_t pos[MAX_LEN], seq[MAX_LEN], lrows[MAX_LEN];
    for (int t = 0; t < g->n[s]; t++) pos[t] = t, seq[t] = s, lrows[t] = t;
    const float *image_rows = rows;
    for (int t0 = 0; t0 < g->n[s];) {
        int t1 = g->n[s];
        for (int t = t0 + 1; cut && t < g->n[s]; t++)
            if (g->ids[s][t - 1] == g->image_token && g->ids[s][t] != g->image_token) {
                t1 = t;
                break;
            }
        loom_batch b = {t1 - t0, g->ids[s] + t0, pos + t0, seq + t0, t1 - t0, lrows, image_rows};
        const float *lg;
        if (loom_forward(e, &b, &lg, err)) return -1;
        memcpy(out + (size_t)t0 * g->vocab, lg, (size_t)(t1 - t0) * g->vocab * sizeof *lg);
        for (int t = t0; t < t1; t++) image_rows += g->ids[s][t] == g->image_token ? g->hidden : 0;
        t0 = t1;
    }
    return 0;
}

static int run(loom_engine *e, const job *j, float *out, loom_err *err) {
    const vlm_golden *g = j->g;
    size_t fsz = (size_t)g->tokens * g->hidden;
    for (int i = 0; i < 2; i++)
        if (loom_encode_image(e, g->pixels[i], out + i * fsz, err)) return -1;
    float *lg = out + 2 * fsz;
    for (int s = 0; s < 2; s++) {
        if (run_prompt(e, g, s, out, j->cut, lg, err)) return -1; /* prompt 1 has both images, in order */
        lg += (size_t)g->n[s] * g->vocab;
    }
    return 0;
}

static loom_engine_options options(loom_comm *comm, const job *j) {
    return (loom_engine_options){.max_seqs = 2,
                                 .max_ctx = MAX_LEN,
                                 .max_tokens = MAX_LEN,
                                 .all_logits = true,
                                 .comm = comm,
                                 .pipeline_parallel = j->pp,
                                 .sequence_parallel = j->sp,
                                 .async_tp = j->async,
                                 .mm_encoder_data = j->data};
}

static int rank_main(loom_comm *comm, void *arg) {
    job *j = arg;
    loom_err err = {{0}};
    loom_engine_options eo = options(comm, j);
    loom_engine *e = loom_engine_new(j->m, &eo, &err);
    size_t n = job_floats(j->g);
    float *mine = malloc(n * sizeof *mine);
    int rc = e && mine && run(e, j, mine, &err) == 0 ? 0 : 1;
    if (rc) fprintf(stderr, "rank %d: %s\n", loom_comm_rank(comm), err.msg);
    else if (loom_comm_rank(comm) == 0) memcpy(j->out, mine, n * sizeof *mine);
    free(mine);
    loom_engine_free(e);
    return rc;
}

/* The golden run at tp x pp ranks (1 x 1: in this process); NULL on failure. */
static float *launch(vlm_golden *g, int tp, int pp, bool sp, bool async, bool cut, bool data) {
    loom_model *m = load();
    if (!m) return NULL;
    size_t bytes = job_floats(g) * sizeof(float);
    float *out = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    job j = {m, g, pp, sp, async, cut, data, out};
    loom_err err = {{0}};
    loom_engine_options eo = options(NULL, &j);
    float *r = golden_launch(m, tp, pp, "shm", &eo, rank_main, &j, out, bytes, &err);
    CHECK(r, "tp %d pp %d%s%s: %s", tp, pp, sp ? " SP" : "", async ? " async" : "", err.msg);
    return r;
}

/* A batch that cuts an image is refused; image tokens without rows are plain tokens, as
 * transformers runs a prompt without pixel values (a server's text prompt may hold the id). */
static void check_refusals(vlm_golden *g) {
    loom_model *m = load();
    loom_err err = {{0}};
    job j = {0};
    loom_engine_options eo = options(NULL, &j);
    loom_engine *e = m ? loom_engine_new(m, &eo, &err) : NULL;
    CHECK(e, "%s", err.msg);
    if (e) {
        int first = 0;
        while (g->ids[0][first] != g->image_token) first++;
        int32_t pos[MAX_LEN], seq[MAX_LEN] = {0}, last = first + g->tokens - 1;
        for (int t = 0; t < MAX_LEN; t++) pos[t] = t;
        int half = first + g->tokens / 2;
        loom_batch cut = {half, g->ids[0], pos, seq, 0, NULL, g->features[0]};
        const float *lg;
        CHECK(loom_forward(e, &cut, &lg, &err) && strstr(err.msg, "not whole images"), "%s", err.msg);
        loom_batch bare = {first + g->tokens, g->ids[0], pos, seq, 1, &last, NULL};
        CHECK(!loom_forward(e, &bare, &lg, &err), "image tokens without rows: %s", err.msg);
        loom_engine_free(e);
    }
    loom_model_free(m);
}

static bool collect(void *user, int32_t id, const char *piece, size_t len) {
    (void)piece, (void)len;
    int32_t *out = user;
    if (id >= 0) out[out[8]++] = id; /* out[8]: how many */
    return out[8] < 8;
}

/* Greedy generation after prompt 1 with both pictures, its prefill in passes of 20 tokens (the
 * pictures are 16 each: passes end before each), against transformers' generate(). */
static void check_generation(vlm_golden *g, const float *features) {
    loom_model *m = load();
    loom_err err = {{0}};
    loom_engine_options eo = {.max_seqs = 1, .max_ctx = MAX_LEN, .max_tokens = 20};
    loom_engine *e = m ? loom_engine_new(m, &eo, &err) : NULL;
    CHECK(e, "%s", err.msg);
    if (e) {
        int32_t got[9] = {0};
        loom_gen_stats st;
        loom_sampling greedy = {.top_p = 1, .ignore_eos = true};
        int rc = loom_generate_images(e, g->ids[1], g->n[1], features, 8, &greedy, collect, got, &st, &err);
        CHECK(!rc, "%s", err.msg);
        CHECK(!rc && got[8] == 8 && !memcmp(got, g->generated, sizeof g->generated),
              "greedy tokens %d %d %d %d %d %d %d %d, transformers' %d %d %d %d %d %d %d %d", got[0], got[1], got[2],
              got[3], got[4], got[5], got[6], got[7], g->generated[0], g->generated[1], g->generated[2],
              g->generated[3], g->generated[4], g->generated[5], g->generated[6], g->generated[7]);
        printf("greedy generation after two pictures, prefill in passes of 20: %s\n",
               !rc && !memcmp(got, g->generated, sizeof g->generated) ? "transformers' tokens" : "DIFFERENT");
        eo.max_tokens = 12; /* a picture of 16 tokens fits no pass */
        loom_engine_free(e);
        e = loom_engine_new(m, &eo, &err);
        rc = e ? loom_generate_images(e, g->ids[1], g->n[1], features, 8, &greedy, collect, got, &st, &err) : -1;
        CHECK(rc && strstr(err.msg, "do not fit a pass of 12"), "%s", err.msg);
        loom_engine_free(e);
    }
    loom_model_free(m);
}

/* gemma-3-4b-it's config as released leaves the text model's heads and vocabulary to
 * Gemma3TextConfig's defaults, and the tower's activation to SiglipVisionConfig's. */
static void check_released_config(void) {
    char path[1000];
    snprintf(path, sizeof path, "%s/configs/gemma-3-4b-it.json", LOOM_SOURCE_DIR);
    loom_err err = {{0}};
    loom_model *m = loom_model_load(&(loom_model_options){.path = path, .dummy = true}, &err);
    CHECK(m, "%s", err.msg);
    if (!m) return;
    loom_model_info i;
    loom_model_get_info(m, &i);
    CHECK(i.vocab == 262208 && i.n_heads == 8 && i.n_kv_heads == 4 && i.head_dim == 256 && i.hidden == 2560 &&
              i.n_layers == 34 && i.max_pos == 131072,
          "text model: vocab %d, %d heads (%d kv) of %d, hidden %d, %d layers, %d positions", i.vocab, i.n_heads,
          i.n_kv_heads, i.head_dim, i.hidden, i.n_layers, i.max_pos);
    CHECK(i.image_size == 896 && i.image_tokens == 256 && i.image_token == 262144 && i.image_begin == 255999 &&
              i.image_end == 256000,
          "images: %d px, %d tokens, ids %d %d %d", i.image_size, i.image_tokens, i.image_token, i.image_begin,
          i.image_end);
    loom_model_free(m);
}

/* A config whose sliding window is narrower than an image is refused (its image tokens would see
 * each other across the window, which one window rule cannot give). */
static void check_narrow_window(void) {
    char path[1000], tmp[] = "/tmp/loom-vlm-XXXXXX.json";
    snprintf(path, sizeof path, "%s/tests/golden/gemma3_vlm/config.json", LOOM_SOURCE_DIR);
    FILE *f = fopen(path, "rb");
    char text[8192] = {0};
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    cJSON *c = cJSON_Parse(text);
    cJSON *t = cJSON_GetObjectItemCaseSensitive(c, "text_config");
    CHECK(n && t, "%s: not read", path);
    if (!t) {
        cJSON_Delete(c);
        return;
    }
    cJSON_ReplaceItemInObjectCaseSensitive(t, "sliding_window", cJSON_CreateNumber(8));
    char *out = cJSON_Print(c);
    int fd = mkstemps(tmp, 5);
    if (fd >= 0) {
        FILE *w = fdopen(fd, "wb");
        fputs(out, w);
        fclose(w);
    }
    loom_err err = {{0}};
    loom_model *m = loom_model_load(&(loom_model_options){.path = tmp, .dummy = true}, &err);
    CHECK(!m && strstr(err.msg, "wider than the sliding window of 8"), "a window of 8 for 16 image tokens: %s",
          m ? "loaded" : err.msg);
    loom_model_free(m);
    unlink(tmp);
    free(out);
    cJSON_Delete(c);
}

/* Features and logits of a run against transformers' */
static void check_oracle(const vlm_golden *g, const float *out, const char *mode) {
    size_t fsz = (size_t)g->tokens * g->hidden;
    for (int i = 0; i < 2; i++) {
        double d = max_abs_diff(out + i * fsz, g->features[i], (int)fsz);
        CHECK(d <= ATOL, "%s: picture %d's features: max |diff| %.3g", mode, i, d);
        printf("%s: picture %d's features within %.3g of transformers'\n", mode, i, d);
    }
    const float *lg = out + 2 * fsz;
    for (int s = 0; s < 2; s++) {
        double d = max_abs_diff(lg, g->logits[s], g->n[s] * g->vocab);
        CHECK(d <= ATOL, "%s: prompt %d (%d pictures): max |diff| %.3g", mode, s, s + 1, d);
        printf("%s: prompt %d (%d tokens, %d picture%s): logits within %.3g\n", mode, s, g->n[s], s + 1, s ? "s" : "",
               d);
        lg += (size_t)g->n[s] * g->vocab;
    }
}

static void check_same(const float *a, const float *b, size_t n, const char *what) {
    bool same = !memcmp(a, b, n * sizeof *a);
    CHECK(same, "%s: not the same bits (max |diff| %.3g)", what, max_abs_diff(a, b, (int)n));
    printf("%s: %s\n", what, same ? "the same bits" : "DIFFERENT");
}

int main(void) {
    vlm_golden g;
    loom_model *m = load();
    if (!m || vlm_open(&g, m)) return 1;
    loom_model_free(m);
    size_t fsz = (size_t)g.tokens * g.hidden, n = job_floats(&g);
    float *one = launch(&g, 1, 1, false, false, false, false), *cut = launch(&g, 1, 1, false, false, true, false);
    float *tp = launch(&g, 2, 1, false, false, false, false), *sp = launch(&g, 2, 1, true, false, false, false);
    float *async = launch(&g, 2, 1, true, true, false, false), *pp = launch(&g, 1, 2, false, false, false, false);
    float *data = launch(&g, 2, 1, false, false, false, true);
    if (one) check_oracle(&g, one, "one rank");
    if (cut) check_oracle(&g, cut, "passes cut after each image");
    if (tp) check_oracle(&g, tp, "tp 2");
    if (data) check_oracle(&g, data, "tp 2, the tower whole on each rank");
    if (one && data)
        check_same(data, one, 2 * fsz, "tp 2's features with the tower whole on each rank, against one rank's");
    if (tp && sp) check_same(sp, tp, n, "tp 2 with SP against tp 2");
    if (tp && async) check_same(async, tp, n, "tp 2 with async TP against tp 2");
    if (one && pp) check_same(pp, one, n, "two pipeline stages against one rank");
    check_refusals(&g);
    if (one) check_generation(&g, one); /* both pictures' features, in order */
    check_released_config();
    check_narrow_window();
    float *runs[] = {one, cut, tp, sp, async, pp, data};
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++)
        if (runs[i]) munmap(runs[i], n * sizeof(float));
    st_close(&g.f);
    return check_done();
}

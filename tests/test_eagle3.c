/* The Eagle3 draft against its reference (tests/golden/make_eagle3_golden.py: speculators'
 * Eagle3 layer with transformers' Llama parts, in fp32): the target's captured hidden states
 * entering layers 2, 4 and 5 against transformers' hidden_states, at tp=1 and, bit for bit the
 * same, at -tp 2 with SP (all-gathered) and -tp 2 -pp 2 (sent between stages); then each
 * checkpoint layout's draft (speculators', norm_before_residual absent so true, no embedding
 * of its own; EAGLE's, absent so false, with one), fed fc of those states beside the shifted
 * tokens, and two steps on its own pre-norm state, all within 1e-4 of the reference's logits.
 * The pitfalls: the shift (pair q holds token q + 1), the position of the first step (the
 * target's, where speculators trains one higher: RoPE cannot tell), the normed vs pre-norm state
 * fed back. And bad drafts: a hidden size or vocabulary the target does not have, no d2t. */
#include <sys/mman.h>

#include "check.h"
#include "golden_util.h"
#include "kernels/kernels.h"
#include "runtime/engine.h"

#define ATOL 1e-4
#define N    9  /* prompt tokens */
#define H    64 /* hidden size, target's and draft's */
#define DV   96 /* the draft's vocabulary */

static const char *dir_of(const char *what) {
    static char buf[4][900];
    static int i;
    i = (i + 1) % 4;
    snprintf(buf[i], sizeof buf[i], "%s/tests/golden/eagle3/%s", LOOM_SOURCE_DIR, what);
    return buf[i];
}

static const float *tensor_f32(const st_file *f, const char *name, size_t n) {
    const st_tensor *t = st_find(f, name);
    CHECK(t && t->dtype == DT_F32 && t->nbytes == n * 4, "golden tensor %s", name);
    return t ? t->data : NULL;
}

static int64_t id_at(const st_file *f, const char *name, int i) {
    const st_tensor *t = st_find(f, name);
    int64_t v = -1;
    if (t && t->dtype == DT_I64) memcpy(&v, (const char *)t->data + 8 * (size_t)i, 8);
    return v;
}

static loom_model *load(const char *path, bool embedding) {
    loom_err err = {{0}};
    loom_model_options o = {.path = path, .dtype = "float32", .embedding_from = embedding ? dir_of("target") : NULL};
    loom_model *m = loom_model_load(&o, &err);
    CHECK(m, "%s: %s", path, err.msg);
    return m;
}

typedef struct capture_job {
    loom_model *m;
    const int32_t *ids;
    bool sp;
    int pp;
    float *out; /* [N][3H] then [N][V] */
} capture_job;

static loom_engine_options capture_options(loom_comm *comm) {
    loom_engine_options eo = {.max_seqs = 1, .max_ctx = 32, .max_tokens = 16, .all_logits = true, .comm = comm};
    eo.n_capture_layers = 3;
    eo.capture_layers[0] = 2, eo.capture_layers[1] = 4, eo.capture_layers[2] = 5;
    return eo;
}

static int capture_rank(loom_comm *comm, void *arg) {
    capture_job *j = arg;
    loom_err err = {{0}};
    loom_engine_options eo = capture_options(comm);
    eo.sequence_parallel = j->sp;
    eo.pipeline_parallel = j->pp;
    loom_engine *e = loom_engine_new(j->m, &eo, &err);
    int32_t pos[N], seq[N] = {0}, rows[N];
    for (int i = 0; i < N; i++) pos[i] = i, rows[i] = i;
    loom_batch b = {N, j->ids, pos, seq, N, rows, NULL};
    const float *lg;
    int rc = e && !loom_forward(e, &b, &lg, &err) ? 0 : 1;
    if (!rc && (!comm || loom_comm_rank(comm) == 0)) {
        for (int s = 0; s < 3; s++) {
            int w;
            const float *c = engine_captured(e, s, &w);
            for (int t = 0; t < N; t++) memcpy(j->out + ((size_t)t * 3 + s) * H, c + (size_t)t * w, H * sizeof *c);
        }
        memcpy(j->out + (size_t)N * 3 * H, lg, (size_t)N * 128 * sizeof *lg);
    }
    if (rc) fprintf(stderr, "capture: %s\n", err.msg);
    loom_engine_free(e);
    return rc;
}

/* The captured states (and logits) at tp x pp with or without SP; munmap'd by the caller. */
static float *capture(const int32_t *ids, int tp, int pp, bool sp) {
    size_t bytes = ((size_t)N * 3 * H + (size_t)N * 128) * sizeof(float);
    capture_job j = {.m = load(dir_of("target"), false), .ids = ids, .sp = sp, .pp = pp};
    j.out = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (tp == 1 && pp == 1) {
        int rc = capture_rank(NULL, &j);
        loom_model_free(j.m);
        return rc ? NULL : j.out;
    }
    loom_engine_options eo = capture_options(NULL);
    eo.sequence_parallel = sp, eo.pipeline_parallel = pp;
    loom_err err = {{0}};
    float *out = golden_launch(j.m, tp, pp, "shm", &eo, capture_rank, &j, j.out, bytes, &err);
    CHECK(out, "capture at -tp %d -pp %d: %s", tp, pp, err.msg);
    return out;
}

static void check_captures(const st_file *g, const int32_t *ids) {
    const float *aux = tensor_f32(g, "aux", (size_t)N * 3 * H), *tl = tensor_f32(g, "target_logits", (size_t)N * 128);
    float *one = capture(ids, 1, 1, false);
    CHECK(one && aux && tl, "tp=1 capture failed");
    if (!one || !aux || !tl) return;
    double da = max_abs_diff(one, aux, N * 3 * H), dl = max_abs_diff(one + N * 3 * H, tl, N * 128);
    CHECK(da < ATOL && dl < ATOL, "target: hidden states entering layers 2, 4, 5 differ by %.2e, logits by %.2e", da,
          dl);
    printf("target: captured states within %.1e of transformers' hidden_states, logits %.1e\n", da, dl);
    static const struct {
        int tp, pp;
        bool sp;
        const char *name;
    } modes[] = {{2, 1, true, "-tp 2 with SP (all-gathered)"},
                 {2, 2, false, "-tp 2 -pp 2 (sent between stages)"},
                 {1, 2, false, "-pp 2"}};
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
        float *par = capture(ids, modes[m].tp, modes[m].pp, modes[m].sp);
        float *tp_ref = modes[m].tp == 2 ? capture(ids, 2, 1, false) : NULL;
        const float *ref = tp_ref ? tp_ref : one; /* SP and stages: the bits of plain TP at that tp */
        CHECK(par && !memcmp(par, ref, (size_t)N * 3 * H * sizeof *par), "%s: captures differ from %s", modes[m].name,
              tp_ref ? "-tp 2" : "tp=1");

        size_t bytes = ((size_t)N * 3 * H + (size_t)N * 128) * sizeof(float);
        if (par) munmap(par, bytes);
        if (tp_ref) munmap(tp_ref, bytes);
    }
    munmap(one, ((size_t)N * 3 * H + (size_t)N * 128) * sizeof(float));
}

/* One layout's draft: its first pass over the 9 pairs, then two steps on its own state. */
static void check_draft(const st_file *g, const char *fmt, const int32_t *ids) {
    char key[64];
    loom_model *d = load(dir_of(fmt), true);
    if (!d) return;
    loom_err err = {{0}};
    loom_engine_options eo = {.max_seqs = 1, .max_ctx = 32, .max_tokens = 16, .all_logits = true, .capture_last = true};
    loom_engine *e = loom_engine_new(d, &eo, &err);
    CHECK(e, "%s draft engine: %s", fmt, err.msg);
    wmat fc;
    const float *aux = tensor_f32(g, "aux", (size_t)N * 3 * H);
    CHECK(!weights_get(&d->ws, "fc.weight", H, 3 * H, 0, 0, 0, 0, false, 0, &fc, &err), "%s fc: %s", fmt, err.msg);
    float gbuf[N * H], in[N * H];
    linear(aux, 3 * H, N, N, &fc, NULL, gbuf, H);
    int32_t pos[N], seq[N] = {0}, rows[N];
    for (int i = 0; i < N; i++) pos[i] = i, rows[i] = i;
    loom_batch b = {N, ids + 1, pos, seq, N, rows, NULL}; /* pair q: token q + 1 beside the state at q */
    const float *lg;
    snprintf(key, sizeof key, "%s_first", fmt);
    const float *want = tensor_f32(g, key, (size_t)N * DV);
    CHECK(e && want && !engine_forward_rows(e, &b, gbuf, &lg, &err), "%s first pass: %s", fmt, err.msg);
    if (!e || !want) goto done;
    double worst = max_abs_diff(lg, want, N * DV);
    int w;
    for (int j = 0; j < 2; j++) { /* the draft's own last state, at the next position */
        const float *last = engine_captured(e, 0, &w);
        memcpy(in, last + (size_t)(j ? 0 : N - 1) * w, H * sizeof *in);
        snprintf(key, sizeof key, "%s_chain_ids", fmt);
        int32_t tok = (int32_t)id_at(g, key, j), p = N + j, s0 = 0, r0 = 0;
        loom_batch c = {1, &tok, &p, &s0, 1, &r0, NULL};
        CHECK(!engine_forward_rows(e, &c, in, &lg, &err), "%s step %d: %s", fmt, j + 1, err.msg);
        snprintf(key, sizeof key, "%s_chain", fmt);
        const float *wc = tensor_f32(g, key, (size_t)2 * DV);
        double dj = wc ? max_abs_diff(lg, wc + (size_t)j * DV, DV) : 1;
        worst = dj > worst ? dj : worst;
    }
    CHECK(worst < ATOL, "%s draft: logits differ from the reference by %.2e", fmt, worst);
    printf("%s draft: first pass and 2 steps within %.1e of the reference\n", fmt, worst);
done:
    loom_engine_free(e);
    loom_model_free(d);
}

/* speculators_config's proposal, vLLM's default for num_speculative_tokens (the golden config
 * proposes 3); EAGLE's layout has none. */
static void proposal_default(void) {
    loom_model *spec = load(dir_of("speculators"), true), *eagle = load(dir_of("eagle"), true);
    loom_model_info si = {0}, ei = {0};
    if (spec) loom_model_get_info(spec, &si);
    if (eagle) loom_model_get_info(eagle, &ei);
    CHECK(si.spec_tokens == 3 && ei.spec_tokens == 0, "proposed tokens: speculators %d (want 3), EAGLE %d (want 0)",
          si.spec_tokens, ei.spec_tokens);
    loom_spec_options o;
    loom_err err = {{0}};
    CHECK(!loom_spec_parse("{\"method\": \"eagle3\", \"model\": \"x\"}", &o, &err) && !o.num_speculative_tokens,
          "eagle3 without num_speculative_tokens (the draft's config may give it): %s", err.msg);
    loom_model_free(spec);
    loom_model_free(eagle);
}

/* Bad drafts: each refused at loom_spec_engine_options or loom_speculator_new, naming why. */
static void bad_drafts(void) {
    loom_err err = {{0}};
    loom_spec_options so = {.method = LOOM_SPEC_EAGLE3, .num_speculative_tokens = 2};
    loom_model *target = load(dir_of("target"), false), *draft = load(dir_of("eagle"), true);
    char wide[900];
    golden_dir(wide, sizeof wide, "gptq_llama"); /* hidden 128 */
    loom_model_options wo = {.path = wide, .dtype = "float32"};
    loom_model *other = loom_model_load(&wo, &err);
    loom_engine_options eo = {.max_seqs = 1, .max_ctx = 32, .max_tokens = 16};
    CHECK(other && draft && loom_spec_engine_options(&so, other, draft, &eo, &err) &&
              strstr(err.msg, "target_hidden_size 64 is not the target's hidden_size 128"),
          "a draft for another hidden size: '%s'", err.msg);
    CHECK(target && loom_spec_engine_options(&so, target, target, &eo, &err) && strstr(err.msg, "not an Eagle3 draft"),
          "a plain model as the Eagle3 draft: '%s'", err.msg);
    loom_model_options no = {.path = dir_of("no_d2t"), .dtype = "float32"};
    loom_model *nd = loom_model_load(&no, &err);
    eo = (loom_engine_options){.max_seqs = 1, .max_ctx = 32, .max_tokens = 16};
    CHECK(nd && target && !loom_spec_engine_options(&so, target, nd, &eo, &err), "no_d2t options: %s", err.msg);
    loom_engine *e = target ? loom_engine_new(target, &eo, &err) : NULL;
    CHECK(e && nd && !loom_speculator_new(e, nd, &so, &eo, &err) && strstr(err.msg, "holds no d2t"),
          "a draft without d2t: '%s'", err.msg);
    loom_engine_free(e);
    loom_model_options noemb = {.path = dir_of("speculators"), .dtype = "float32"};
    CHECK(!loom_model_load(&noemb, &err) && strstr(err.msg, "holds no embed_tokens.weight"),
          "a draft without an embedding and no target folder: '%s'", err.msg);
    loom_model_free(nd);
    loom_model_free(other);
    loom_model_free(draft);
    loom_model_free(target);
}

int main(void) {
    st_file g;
    loom_err err = {{0}};
    char path[1000];
    snprintf(path, sizeof path, "%s/golden.safetensors", dir_of(""));
    if (st_open(&g, path, &err)) {
        CHECK(0, "%s", err.msg);
        return check_done();
    }
    int32_t ids[N + 1];
    for (int i = 0; i <= N; i++) ids[i] = (int32_t)id_at(&g, "ids", i);
    check_captures(&g, ids);
    check_draft(&g, "speculators", ids);
    check_draft(&g, "eagle", ids);
    bad_drafts();
    proposal_default();
    st_close(&g);
    return check_done();
}

/* The trained stories260K checkpoint against its published greedy output (llama2.c's CI
 * oracle): the ids through the API, and the exact text `loom run` prints with no arguments.
 * Quantized to int8 at load, the story is unchanged with exact compute (--dtype float32); with
 * int8 activations (--dtype auto, the default for quantized weights) it cannot be: at one of
 * its 200 positions the exact top two logits are 0.125 apart, and rounding every activation
 * to 8 bits moves them further, so the story forks there. Fed the published story, the int8
 * activations must choose its next token at MIN_AGREE of its positions: 199 measured with the
 * generic, avx2 and avx512bf16 kernels, 198 with avx512 (its fp32 sums in another order). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "loom.h"
#include "mpirun.h"

#define EXPECTED LOOM_SOURCE_DIR "/tests/data/stories260K/expected_greedy_200tokens"

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16;
    char *b = malloc(cap);
    *len = fread(b, 1, cap - 1, f);
    b[*len] = 0;
    fclose(f);
    return b;
}

typedef struct {
    int32_t ids[256];
    int n;
} collected;

static bool collect(void *user, int32_t id, const char *piece, size_t len) {
    (void)piece, (void)len;
    collected *c = user;
    if (id >= 0 && c->n < 256) c->ids[c->n++] = id;
    return true;
}

#define MIN_AGREE 198

/* The published story's 200 ids into want; their count (200 unless the file is broken). */
static int published_ids(int32_t want[256]) {
    size_t len;
    char *text = slurp(EXPECTED "_ids.txt", &len);
    CHECK(text, "cannot read %s", EXPECTED "_ids.txt");
    if (!text) return 0;
    int n = 0;
    for (char *p = text; *p && n < 256;) {
        if (*p >= '0' && *p <= '9') want[n++] = (int32_t)strtol(p, &p, 10);
        else p++;
    }
    free(text);
    CHECK(n == 200, "expected 200 ids, read %d", n);
    return n;
}

/* The model loaded as mo, on a KV cache of dtype kv, teacher-forced on the published story in
 * one pass: the positions whose greedy choice is the story's next token (-1: it did not run). */
static int story_agreement(const loom_model_options *mo, loom_kv_dtype kv) {
    int32_t want[256], ids[256], pos[256], seq[256], rows[256];
    int n = published_ids(want), agree = 0;
    if (n != 200) return -1;
    ids[0] = 1; /* BOS, then the story but its last token */
    for (int i = 0; i < n; i++) {
        if (i) ids[i] = want[i - 1];
        pos[i] = i, seq[i] = 0, rows[i] = i;
    }
    loom_err err = {{0}};
    loom_model *m = loom_model_load(mo, &err);
    loom_engine_options eo = {
        .max_seqs = 1, .max_ctx = 256, .max_tokens = 256, .all_logits = true, .kv_cache_dtype = kv};
    loom_engine *e = m ? loom_engine_new(m, &eo, &err) : NULL;
    loom_batch b = {.n_tokens = n, .ids = ids, .pos = pos, .seq = seq, .n_logits = n, .logit_rows = rows};
    const float *logits = NULL;
    CHECK(e && loom_forward(e, &b, &logits, &err) == 0, "%s", err.msg);
    loom_model_info info;
    if (m) loom_model_get_info(m, &info);
    for (int i = 0; logits && i < n; i++) {
        const float *l = logits + (size_t)i * info.vocab;
        int best = 0;
        for (int v = 1; v < info.vocab; v++)
            if (l[v] > l[best]) best = v;
        agree += best == want[i];
    }
    loom_engine_free(e);
    loom_model_free(m);
    return logits ? agree : -1;
}

/* -q int8 with int8 activations */
static void check_int8_agreement(void) {
    int agree = story_agreement(&(loom_model_options){.dtype = "auto", .quantization = "int8"}, LOOM_KV_FLOAT32);
    CHECK(agree >= MIN_AGREE, "-q int8, int8 activations: the greedy choice is the story's at %d of 200 positions",
          agree);
    printf("-q int8 with int8 activations: greedy choice is the published story's at %d of 200 positions\n", agree);
}

/* The KV cache's rounding dtypes, exact compute otherwise: their greedy choice, teacher-forced,
 * against the story's, at KV_AGREE[dtype] of its positions or more. bf16 keeps the story whole
 * (and its free-running text: main). The 8-bit caches round each head's values by up to 1/254 of
 * its largest (int8) or 1/16 of each value (E4M3), which moves the top two logits past each
 * other where they lie close: 197 (int8) and 192 (fp8) positions agree with the generic and avx2
 * kernels; one less is allowed for the other variants' fp32 sums, as MIN_AGREE allows. */
static void check_kv_agreement(void) {
    static const int KV_AGREE[] = {[LOOM_KV_BF16] = 200, [LOOM_KV_FP8] = 191, [LOOM_KV_INT8] = 196};
    for (loom_kv_dtype dt = LOOM_KV_BF16; dt <= LOOM_KV_INT8; dt++) {
        int agree = story_agreement(&(loom_model_options){.dtype = "float32"}, dt);
        CHECK(agree >= KV_AGREE[dt], "--kv-cache-dtype %s: the greedy choice is the story's at %d of 200 positions",
              loom_kv_dtype_name(dt), agree);
        printf("--kv-cache-dtype %s: greedy choice is the published story's at %d of 200 positions\n",
               loom_kv_dtype_name(dt), agree);
    }
}

static void check_ids(void) {
    int32_t want[256];
    int n = published_ids(want);
    if (!n) return;
    loom_err err = {{0}};
    loom_model_options mo = {.load_tokenizer = true};
    loom_model *m = loom_model_load(&mo, &err);
    CHECK(m, "%s", err.msg);
    if (!m) return;
    loom_engine_options eo = {.max_seqs = 1, .max_ctx = 256};
    loom_engine *e = loom_engine_new(m, &eo, &err);
    CHECK(e, "%s", err.msg);
    collected got = {.n = 0};
    loom_sampling s = {.top_p = 1};
    loom_gen_stats st;
    int32_t bos = 1;
    CHECK(e && loom_generate(e, &bos, 1, 200, &s, collect, &got, &st, &err) == 0, "%s", err.msg);
    CHECK(got.n == 200, "generated %d ids", got.n);
    int first_diff = -1;
    for (int i = 0; i < got.n && i < n && first_diff < 0; i++)
        if (got.ids[i] != want[i]) first_diff = i;
    CHECK(first_diff < 0, "greedy ids diverge at %d: got %d, want %d", first_diff, got.ids[first_diff],
          want[first_diff]);
    loom_engine_free(e);
    loom_model_free(m);
}

/* `prefix loom args` must print exactly the text of file `expected`. */
static void check_cli_output(const char *prefix, const char *args, const char *expected) {
    size_t want_len, got_len;
    char *want = slurp(expected, &want_len);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s %s > /tmp/loom-stories-%d.txt", prefix, LOOM_BIN, args, (int)getpid());
    CHECK(system(cmd) == 0, "%s failed", cmd);
    snprintf(cmd, sizeof cmd, "/tmp/loom-stories-%d.txt", (int)getpid());
    char *got = slurp(cmd, &got_len);
    remove(cmd);
    CHECK(want && got && got_len == want_len && !memcmp(got, want, want_len),
          "`%s loom %s` output differs from %s:\n--- got (%zu bytes)\n%s\n--- want (%zu bytes)\n%s", prefix, args,
          expected, got_len, got ? got : "", want_len, want ? want : "");
    free(want);
    free(got);
}

/* `prefix loom args` must print exactly the published story. */
static void check_cli_text(const char *prefix, const char *args) { check_cli_output(prefix, args, EXPECTED ".txt"); }

/* `loom verify` on the trained model (its tokenizer's prompts, lengths not multiples of the
 * ranks, 16 greedy steps each): SP and async TP must be bit-identical to TP at tp = 2 and 4. */
static void check_verify(int tp, const char *args) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s verify -tp %d %s 2>/dev/null | grep -c 'bit-identical to TP' | grep -qx 2", LOOM_BIN,
             tp, args);
    CHECK(system(cmd) == 0, "loom verify -tp %d %s: SP and async TP are not both bit-identical to TP", tp, args);
}

int main(void) {
    check_cpu_variant();
    check_verify(2, "");
    check_verify(4, "");
    check_verify(2, "-q int8");
    check_verify(2, "-q int8 --quantize-lm-head");
    check_verify(2, "-q int8 --dtype float32");
    check_ids();
    check_cli_text("", "");
    check_cli_text("", "run -tp 2");
    check_cli_text("", "run -tp 4");
    check_cli_text("", "run -tp 2 --enable-sequence-parallel");
    check_cli_text("", "run -tp 4 --enable-sequence-parallel");
    /* weights quantized at load to int8 per channel (the LM head stays float) keep the story
     * when computed exactly; with int8 activations it forks at one position (top comment) */
    check_cli_text("", "run -q int8 --dtype float32");
    check_cli_text("", "run -q int8 --dtype float32 -tp 2 --enable-async-tp");
    check_int8_agreement();
    check_kv_agreement();
    check_cli_text("", "run --kv-cache-dtype bfloat16");
    /* a completion continues its prompt: its first piece keeps the space transformers' decode of
     * prompt + completion gives it */
    /* pipeline stages: the boundary moves the hidden state and does no arithmetic. stories260K
     * has 5 layers: pp=2 splits them 3 + 2, the partition flag 1 + 4 */
    check_cli_text("", "run -pp 2");
    check_cli_text("", "run -pp 3");
    check_cli_text("", "run -pp 2 --pp-layer-partition 1,4");
    check_cli_text("", "run -tp 2 -pp 2");
    check_cli_text("", "run -tp 2 -pp 2 --enable-sequence-parallel --sp-min-tokens 0");
    check_cli_text("", "run -tp 2 -pp 2 --enable-async-tp --sp-min-tokens 0");
    check_verify(2, "-pp 2");
    check_cli_output("", "run -p 'The robot' -n 8",
                     LOOM_SOURCE_DIR "/tests/data/stories260K/prompt_the_robot_8tokens.txt");
    if (mpi_available("test_stories")) {
        check_cli_text(MPIRUN " -np 2", "run --backend mpi");
        check_cli_text(MPIRUN " -np 2", "run --backend mpi --enable-sequence-parallel");
        check_cli_text(MPIRUN " -np 2", "run --backend mpi -pp 2");
        check_cli_text(MPIRUN " -np 4", "run --backend mpi -tp 2 -pp 2 --enable-sequence-parallel --sp-min-tokens 0");
    } else {
        CHECK(system(LOOM_BIN " run --backend mpi 2>&1 | grep -q 'this build has no MPI backend'") == 0,
              "`loom run --backend mpi` must say that this build has no MPI backend");
    }
    return check_done();
}

/* Parity with Hugging Face transformers on one rank: for every golden model, the two prompts
 * are prefilled together in one flattened batch, then decoded together (teacher-forced), and
 * every position's logits must be within 1e-4 of HF's. The bf16 model is compared with HF
 * computing in fp32 on the same bf16 weights (bf16 -> fp32 is exact and loom computes in
 * fp32); HF's native bf16 compute differs from that by ~6e-2, see tests/golden/README.md. */
#include <unistd.h>

#include "check.h"
#include "golden_util.h"

#define ATOL 1e-4

static const char *cases[] = {
    "llama",       "llama_tied",   "mistral",    "qwen2",       "qwen3",       "granite",
    "llama_bf16",  "llama_tp3",    "llama_f16",  "llama_bias",  "olmoe",       "mixtral",
    "qwen2_moe",   "qwen3_moe",    "granitemoe", "deepseek_v2", "deepseek_v3", "deepseek_v3_skewed",
    "mixtral_ep3", QUANTIZED_CASES};

/* Runs golden case `name` from folder dir (its own, or a resharded copy). */
static void run_case_in(const char *name, const char *dir, const char *dtype) {
    golden g;
    if (golden_open(&g, name, "logits")) {
        CHECK(0, "%s: cannot read golden data", name);
        return;
    }
    loom_err err = {{0}};
    loom_model_options mo = {.path = dir, .dtype = dtype};
    loom_model *m = loom_model_load(&mo, &err);
    loom_engine_options eo = golden_engine_options(NULL);
    loom_engine *e = m ? loom_engine_new(m, &eo, &err) : NULL;
    float *out = malloc((size_t)golden_rows(&g) * g.vocab * sizeof *out);
    CHECK(e && golden_run(e, &g, out, &err) == 0, "%s: %s", name, err.msg);
    if (e) {
        double worst = golden_worst(&g, out);
        CHECK(worst <= ATOL, "%s (%s): max |logit diff| vs transformers %.3g", name, dtype, worst);
        printf("%-12s %-8s max |logit diff| vs transformers: %.2e%s\n", name, dtype, worst,
               strstr(dir, "sharded") ? " (sharded checkpoint)" : "");
    }
    free(out);
    loom_engine_free(e);
    loom_model_free(m);
    golden_close(&g);
}

static void run_case(const char *name, const char *dtype) {
    char dir[900];
    golden_dir(dir, sizeof dir, name);
    run_case_in(name, dir, dtype);
}

/* Rewrites a case's model.safetensors as two shards plus model.safetensors.index.json, as
 * save_pretrained does for large models, in a temporary folder; returns 0 on success. */
static int reshard(const char *name, char *out_dir, size_t cap) {
    char dir[900], path[2400];
    golden_dir(dir, sizeof dir, name);
    snprintf(out_dir, cap, "/tmp/loom-sharded-%d", (int)getpid());
    snprintf(path, sizeof path, "mkdir -p %s && cp %s/config.json %s/", out_dir, dir, out_dir);
    if (system(path)) return -1;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st_file f;
    loom_err err;
    if (st_open(&f, path, &err)) return -1;
    cJSON *index = cJSON_CreateObject(), *map = cJSON_AddObjectToObject(index, "weight_map");
    for (int shard = 0; shard < 2; shard++) {
        char file[64];
        snprintf(file, sizeof file, "model-%05d-of-00002.safetensors", shard + 1);
        cJSON *h = cJSON_CreateObject();
        size_t off = 0;
        for (size_t i = shard; i < f.n; i += 2) { /* alternate tensors between the shards */
            const st_tensor *t = &f.tensors[i];
            cJSON *e = cJSON_AddObjectToObject(h, t->name);
            cJSON_AddStringToObject(e, "dtype", dtype_name(t->dtype));
            cJSON *shape = cJSON_AddArrayToObject(e, "shape");
            for (int d = 0; d < t->ndim; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
            cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
            cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
            cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + t->nbytes)));
            off += t->nbytes;
            cJSON_AddStringToObject(map, t->name, file);
        }
        char *text = cJSON_PrintUnformatted(h);
        size_t hl = strlen(text);
        snprintf(path, sizeof path, "%s/%s", out_dir, file);
        FILE *o = fopen(path, "wb");
        for (int b = 0; b < 8; b++) fputc((int)((uint64_t)hl >> (8 * b) & 0xff), o);
        fwrite(text, 1, hl, o);
        for (size_t i = shard; i < f.n; i += 2) fwrite(f.tensors[i].data, 1, f.tensors[i].nbytes, o);
        fclose(o);
        free(text);
        cJSON_Delete(h);
    }
    char *text = cJSON_Print(index);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", out_dir);
    FILE *o = fopen(path, "w");
    fputs(text, o);
    fclose(o);
    free(text);
    cJSON_Delete(index);
    st_close(&f);
    return 0;
}

int main(void) {
    check_cpu_variant();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(cases[i], "auto");
    /* the bf16 checkpoint widened at load takes the f32 kernels: it must match as well */
    run_case("llama_bf16", "float32");
    /* a sharded checkpoint (index + two files) must load to the same model */
    char dir[256], cmd[300];
    CHECK(reshard("qwen2", dir, sizeof dir) == 0, "could not write the sharded copy");
    run_case_in("qwen2", dir, "auto");
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "cleanup");
    return check_done();
}

/* Malformed model files: each case writes a broken copy of a golden model and runs the loom
 * binary on it; loom must exit non-zero (or warn, for unexpected tensors) with a message that
 * names the file and field at fault. Under ASan this also shows the loaders never read out of
 * bounds on such input. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

static char tmp[256], src_dir[600];

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc(n + 1);
    *len = fread(b, 1, n, f);
    b[*len] = 0;
    fclose(f);
    return b;
}

static void spit(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, len, f);
    fclose(f);
}

/* A case's folder: fresh copies of the golden llama's config and weights. */
static void fresh_case(const char *config_json) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "rm -rf %s/m && mkdir -p %s/m && cp %s/model.safetensors %s/m/", tmp, tmp, src_dir, tmp);
    CHECK(system(cmd) == 0, "setup");
    char path[1024];
    snprintf(path, sizeof path, "%s/m/config.json", tmp);
    if (config_json) {
        spit(path, config_json, strlen(config_json));
    } else {
        size_t n;
        char src[1024];
        snprintf(src, sizeof src, "%s/config.json", src_dir);
        char *c = slurp(src, &n);
        spit(path, c, n);
        free(c);
    }
}

/* Rewrites the case's model.safetensors with header `h` (NULL: keep) over data of the original. */
static void write_weights(const char *header, const void *data, size_t data_len) {
    char path[1024];
    snprintf(path, sizeof path, "%s/m/model.safetensors", tmp);
    FILE *f = fopen(path, "wb");
    uint64_t hl = strlen(header);
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(hl >> (8 * i));
    fwrite(le, 1, 8, f);
    fwrite(header, 1, hl, f);
    if (data_len) fwrite(data, 1, data_len, f);
    fclose(f);
}

/* The original header as a cJSON tree, and the data section. */
static cJSON *orig_header(char **data, size_t *data_len, char **whole) {
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", src_dir);
    size_t n;
    *whole = slurp(path, &n);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | (unsigned char)(*whole)[i];
    *data = *whole + 8 + hl;
    *data_len = n - 8 - hl;
    return cJSON_ParseWithLength(*whole + 8, hl);
}

static void write_modified(cJSON *h, char *data, size_t len) {
    char *s = cJSON_PrintUnformatted(h);
    write_weights(s, data, len);
    free(s);
}

/* Runs loom with args on the case folder; returns exit status, its output in *msg. */
static int run_loom(const char *args, char **msg) {
    char cmd[4096], errp[1024];
    snprintf(errp, sizeof errp, "%s/stderr.txt", tmp);
    snprintf(cmd, sizeof cmd, "%s %s > %s 2>&1", LOOM_BIN, args, errp);
    int st = system(cmd);
    size_t n;
    *msg = slurp(errp, &n);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void expect(const char *what, const char *args, int want_rc, const char *needle) {
    char full[2048];
    snprintf(full, sizeof full, args, tmp);
    char *msg;
    int rc = run_loom(full, &msg);
    if (want_rc) CHECK(rc != 0 && rc < 128, "%s: exit code %d, want a clean failure", what, rc);
    else CHECK(rc == 0, "%s: exit code %d, want 0", what, rc);
    CHECK(msg && strstr(msg, needle), "%s: output lacks '%s': %s", what, needle, msg ? msg : "(none)");
    free(msg);
}

#define BENCH "bench latency -m %s/m --input-len 3 --output-len 2 --batch-size 1 --num-iters 1 --num-iters-warmup 0"

/* A case that changes one field of the golden model and must fail with `needle`: obj.key (obj
 * NULL: a top-level key, added if absent), in
 * config.json (config) or in the safetensors header, set to the JSON `value` (a printf format, in
 * which %zu stands for the data section's size plus 256) or, with `like`, to a copy of like.key;
 * with neither, the key is removed (a missing field or tensor). */
typedef struct {
    const char *what;
    bool config;
    const char *obj, *key, *value, *like, *needle;
} field_edit;

/* Runs the n cases of e on the model of src_dir, whose header is h over data. */
static void expect_edits(const field_edit *e, size_t n, const cJSON *h, char *data, size_t dlen) {
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", src_dir);
    size_t len;
    char *text = slurp(path, &len);
    cJSON *config = cJSON_Parse(text);
    for (; n > 0; n--, e++) {
        cJSON *c = cJSON_Duplicate(e->config ? config : h, 1);
        cJSON *v = NULL, *parent = e->obj ? cJSON_GetObjectItem(c, e->obj) : c;
        if (!e->value && !e->like) {
            cJSON_DeleteItemFromObject(parent, e->key);
        } else if (e->like) {
            v = cJSON_Duplicate(cJSON_GetObjectItem(cJSON_GetObjectItem(c, e->like), e->key), 1);
        } else {
            char json[256];
            snprintf(json, sizeof json, e->value, dlen + 256);
            v = cJSON_Parse(json);
        }
        if (v && cJSON_GetObjectItem(parent, e->key)) cJSON_ReplaceItemInObject(parent, e->key, v);
        else if (v) cJSON_AddItemToObject(parent, e->key, v);
        if (e->config) {
            char *out = cJSON_Print(c);
            fresh_case(out);
            free(out);
        } else {
            fresh_case(NULL);
            write_modified(c, data, dlen);
        }
        expect(e->what, BENCH, 1, e->needle);
        cJSON_Delete(c);
    }
    cJSON_Delete(config);
    free(text);
}

/* The case's weights without `tensor` must fail naming it. */
static void expect_missing(const cJSON *h, char *data, size_t dlen, const char *what, const char *tensor) {
    cJSON *c = cJSON_Duplicate(h, 1);
    cJSON_DeleteItemFromObject(c, tensor);
    fresh_case(NULL);
    write_modified(c, data, dlen);
    char needle[300];
    snprintf(needle, sizeof needle, "missing tensor '%s'", tensor);
    expect(what, BENCH, 1, needle);
    cJSON_Delete(c);
}

static void bad_quantized(void);
static void bad_fp8(void);
static void bad_deepseek(void);
static void bad_pipeline(void);
static void bad_expert_load(void);

/* Stage layouts refused at plan time, before any rank starts (the case has 2 layers). */
static void bad_pipeline(void) {
    expect("pp: more stages than layers", BENCH " -pp 3", 1,
           "cannot run with -pp 3: the model has 2 decoder layers, fewer than the 3 stages (each needs one)");
    expect("pp: a stage with no layers", BENCH " -pp 2 --pp-layer-partition 2,0", 1,
           "--pp-layer-partition '2,0': stage 1 has no layers");
    expect("pp: a partition that does not add up", BENCH " -pp 2 --pp-layer-partition 1,2", 1,
           "--pp-layer-partition '1,2' adds up to 3 layers, but the model has 2");
    expect("pp: a partition of more stages", BENCH " -pp 2 --pp-layer-partition 1,1,0", 1,
           "--pp-layer-partition '1,1,0' names more stages than -pp 2");
    expect("pp: a partition without -pp", BENCH " --pp-layer-partition 1,1", 1,
           "--pp-layer-partition '1,1' names more stages than -pp 1");
    expect("pp: not a count", BENCH " -pp 2 --pp-layer-partition 1,x", 1,
           "--pp-layer-partition '1,x': 'x' is not a layer count");
    expect("pp: zero stages", BENCH " -pp 0", 1, "-pp");
    expect("pp: the unmodified copy runs in two stages", BENCH " -pp 2 --pp-layer-partition 1,1", 0, "Avg latency");
}

/* Broken expert load profiles (--expert-load), for the olmoe golden (8 experts) at -tp 2 -ep. */
static void bad_expert_load(void) {
    static const struct {
        const char *what, *json, *needle;
    } cases[] = {
        {"expert load: not JSON", "{\"format\": ", "el.json: not valid JSON"},
        {"expert load: another file", "{\"format\": \"safetensors\"}", "\"format\" is not \"loom-expert-load\""},
        {"expert load: no experts", "{\"format\": \"loom-expert-load\", \"n_experts\": 0, \"layers\": {}}",
         "\"n_experts\" must be a whole number from 1"},
        {"expert load: a short layer",
         "{\"format\": \"loom-expert-load\", \"n_experts\": 8, \"layers\": {\"model.layers.0.mlp\": [1, 2]}}",
         "layer \"model.layers.0.mlp\" must be an array of 8 counts"},
        {"expert load: a negative count",
         "{\"format\": \"loom-expert-load\", \"n_experts\": 8, \"layers\": {\"model.layers.0.mlp\": "
         "[1, 2, 3, 4, 5, 6, 7, -8]}}",
         "layer \"model.layers.0.mlp\", expert 7: a count must be a number from 0"},
        {"expert load: another model's experts",
         "{\"format\": \"loom-expert-load\", \"n_experts\": 4, \"layers\": {\"model.layers.0.mlp\": [1, 2, 3, 4]}}",
         "the expert load profile counts 4 experts for model.layers.0.mlp, which has 8"},
    };
    char path[1100], args[2048];
    snprintf(path, sizeof path, "%s/el.json", tmp);
    snprintf(args, sizeof args,
             "bench latency -m " LOOM_SOURCE_DIR "/tests/golden/olmoe --input-len 3 --output-len 2 --batch-size 1 "
             "--num-iters 1 --num-iters-warmup 0 -tp 2 --enable-expert-parallel --expert-load %%s/el.json");
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        spit(path, cases[i].json, strlen(cases[i].json));
        expect(cases[i].what, args, 1, cases[i].needle);
    }
    expect("expert load: a missing file", "bench latency -m %s/m --expert-load /nonexistent/el.json", 1,
           "/nonexistent/el.json");
    /* redundant copies: of whole experts, placed by a load */
    const char *olmoe = "plan -m " LOOM_SOURCE_DIR "/tests/golden/olmoe -tp 2";
    snprintf(args, sizeof args, "%s --num-redundant-experts 2", olmoe);
    expect("redundant experts without expert parallelism", args, 1,
           "--num-redundant-experts 2: redundant copies are of whole experts, which need --enable-expert-parallel");
    snprintf(args, sizeof args, "%s -ep --num-redundant-experts 2", olmoe);
    expect("redundant experts without a load profile", args, 1,
           "model.layers.0.mlp: --num-redundant-experts 2: redundant copies go to the hottest experts, which need a "
           "load profile of the layer (--expert-load)");
    snprintf(args, sizeof args, "%s -ep --num-redundant-experts -1", olmoe);
    expect("redundant experts: a negative count", args, 1, "--num-redundant-experts");
}

/* Broken copies of the GPTQ golden checkpoint (4-bit, groups of 32, act-order). */
static void bad_quantized(void) {
    snprintf(src_dir, sizeof src_dir, "%s/tests/golden/gptq_llama", LOOM_SOURCE_DIR);
    fresh_case(NULL);
    expect("gptq: the unmodified copy loads", BENCH, 0, "Avg latency");

    static const field_edit edits[] = {
        {"gptq: 3-bit", true, "quantization_config", "bits", "3", NULL,
         "config.json: quantization_config.bits: 3-bit weights are not supported (4 or 8)"},
        {"gptq: group size not dividing the input features", true, "quantization_config", "group_size", "48", NULL,
         "q_proj.weight: quantization_config.group_size 48 does not divide its 128 input features"},
        {"an unsupported quant_method", true, "quantization_config", "quant_method", "\"bitsandbytes\"", NULL,
         "quantization_config.quant_method 'bitsandbytes' is not supported (gptq, awq, compressed-tensors, fp8"},
        {"gptq: wrong packed shape", false, "model.layers.0.self_attn.q_proj.qweight", "shape", "[128, 16]", NULL,
         "tensor 'model.layers.0.self_attn.q_proj.qweight' has shape [128, 16], expected [16, 128]"},
    };
    char *data, *whole;
    size_t dlen;
    cJSON *h = orig_header(&data, &dlen, &whole);
    expect_edits(edits, sizeof edits / sizeof *edits, h, data, dlen);

    expect_missing(h, data, dlen, "gptq: missing scales", "model.layers.1.mlp.down_proj.scales");

    /* entry 5 of q_proj's g_idx set to 99, past its 4 groups */
    const cJSON *off =
        cJSON_GetObjectItem(cJSON_GetObjectItem(h, "model.layers.0.self_attn.q_proj.g_idx"), "data_offsets");
    int32_t bad = 99;
    memcpy(data + cJSON_GetArrayItem(off, 0)->valueint + 5 * 4, &bad, 4);
    fresh_case(NULL);
    write_modified(h, data, dlen);
    expect("gptq: g_idx out of range", BENCH, 1,
           "tensor 'model.layers.0.self_attn.q_proj.g_idx': entry 5 is 99, outside the 4 groups");
    cJSON_Delete(h);
    free(whole);
}

/* Overwrites `bytes` at offset `at` of tensor `name`'s data in data (its header h), then expects
 * the copy to fail with needle. */
static void expect_poked(const cJSON *h, char *data, size_t dlen, const char *what, const char *name, size_t at,
                         const void *bytes, size_t n, const char *needle) {
    const cJSON *off = cJSON_GetObjectItem(cJSON_GetObjectItem(h, name), "data_offsets");
    char *p = data + cJSON_GetArrayItem(off, 0)->valueint + at, saved[8];
    memcpy(saved, p, n);
    memcpy(p, bytes, n);
    cJSON *c = cJSON_Duplicate(h, 1);
    fresh_case(NULL);
    write_modified(c, data, dlen);
    expect(what, BENCH, 1, needle);
    memcpy(p, saved, n);
    cJSON_Delete(c);
}

/* Broken copies of the FP8 golden checkpoints: compressed-tensors' per-tensor static one, then
 * the fp8 method's block-scaled DeepSeek-V3. */
static void bad_fp8(void) {
    snprintf(src_dir, sizeof src_dir, "%s/tests/golden/fp8_llama", LOOM_SOURCE_DIR);
    fresh_case(NULL);
    expect("fp8: the unmodified copy loads", BENCH, 0, "Avg latency");
    static const field_edit edits[] = {
        {"fp8: NVFP4", true, "quantization_config", "format", "\"nvfp4-pack-quantized\"", NULL,
         "quantization_config.format 'nvfp4-pack-quantized' is not supported"},
        {"fp8: KV-cache scales", true, "quantization_config", "kv_cache_scheme",
         "{\"num_bits\": 8, \"type\": \"float\", \"strategy\": \"tensor\"}", NULL,
         "quantization_config.kv_cache_scheme: quantized KV caches (and their scales) are not supported"},
        {"fp8: E8M0 scales", false, "model.layers.0.self_attn.q_proj.weight_scale", "dtype", "\"F8_E8M0\"", NULL,
         "'model.layers.0.self_attn.q_proj.weight_scale': unsupported dtype 'F8_E8M0'"},
        {"fp8: integer scales", false, "model.layers.0.self_attn.q_proj.weight_scale", "dtype", "\"I32\"", NULL,
         "tensor 'model.layers.0.self_attn.q_proj.weight_scale' has dtype I32, expected F32, F16 or BF16"},
        {"fp8: int8 weights", false, "model.layers.1.mlp.up_proj.weight", "dtype", "\"I8\"", NULL,
         "tensor 'model.layers.1.mlp.up_proj.weight' has dtype I8, expected F8_E4M3 or F8_E5M2"},
    };
    char *data, *whole;
    size_t dlen;
    cJSON *h = orig_header(&data, &dlen, &whole);
    expect_edits(edits, sizeof edits / sizeof *edits, h, data, dlen);
    expect_missing(h, data, dlen, "fp8: missing weight scale", "model.layers.1.mlp.down_proj.weight_scale");
    expect_missing(h, data, dlen, "fp8: missing input scale", "model.layers.0.self_attn.k_proj.input_scale");
    float nan = NAN, inf = INFINITY;
    uint8_t nan_code = 0x7f;
    expect_poked(h, data, dlen, "fp8: a NaN weight scale", "model.layers.0.self_attn.q_proj.weight_scale", 0, &nan, 4,
                 "tensor 'model.layers.0.self_attn.q_proj.weight_scale': scale 0 is not finite");
    expect_poked(h, data, dlen, "fp8: an infinite input scale", "model.layers.0.mlp.gate_proj.input_scale", 0, &inf, 4,
                 "tensor 'model.layers.0.mlp.gate_proj.input_scale' is inf, not a positive finite scale");
    expect_poked(h, data, dlen, "fp8: a NaN weight", "model.layers.1.self_attn.o_proj.weight", 130, &nan_code, 1,
                 "tensor 'model.layers.1.self_attn.o_proj.weight' holds a NaN or an infinity at [1, 2]");
    cJSON_Delete(h);
    free(whole);

    snprintf(src_dir, sizeof src_dir, "%s/tests/golden/fp8_deepseek_v3", LOOM_SOURCE_DIR);
    h = orig_header(&data, &dlen, &whole);
    static const field_edit block_edits[] = {
        {"fp8: an unknown fmt", true, "quantization_config", "fmt", "\"e3m4\"", NULL,
         "quantization_config.fmt 'e3m4' is not supported (e4m3, e5m2)"},
        {"fp8: a bad block", true, "quantization_config", "weight_block_size", "[128]", NULL,
         "quantization_config.weight_block_size must be a list of two sizes"},
        {"fp8: blocks of another shape", false, "model.layers.0.self_attn.q_b_proj.weight_scale_inv", "shape", "[3, 4]",
         NULL, "tensor 'model.layers.0.self_attn.q_b_proj.weight_scale_inv' has shape [3, 4], expected [6, 2]"},
    };
    expect_edits(block_edits, sizeof block_edits / sizeof *block_edits, h, data, dlen);
    cJSON_Delete(h);
    free(whole);
}

/* The n cases of e on golden model `name`. */
static void edits_on(const char *name, const field_edit *e, size_t n) {
    snprintf(src_dir, sizeof src_dir, "%s/tests/golden/%s", LOOM_SOURCE_DIR, name);
    char *data, *whole;
    size_t dlen;
    cJSON *h = orig_header(&data, &dlen, &whole);
    expect_edits(e, n, h, data, dlen);
    cJSON_Delete(h);
    free(whole);
}

/* ERNIE 4.5's own MoE fields, on its golden model. */
static void bad_ernie(void) {
    static const field_edit edits[] = {
        {"ernie: more experts per token than experts", true, NULL, "moe_k", "9", NULL, "moe_k 9 exceeds the 8 experts"},
        {"ernie: a layer index below -1", true, NULL, "moe_layer_end_index", "-2", NULL,
         "field 'moe_layer_end_index' must be an integer >= -1"},
        {"ernie: a zero interval", true, NULL, "moe_layer_interval", "0", NULL,
         "field 'moe_layer_interval' must be an integer >= 1"},
        {"ernie: the correction bias of another shape", false, "model.layers.1.mlp.moe_statics.e_score_correction_bias",
         "shape", "[8]", NULL,
         "tensor 'model.layers.1.mlp.moe_statics.e_score_correction_bias' has shape [8], expected [1, 8]"},
    };
    edits_on("ernie4_5_moe", edits, sizeof edits / sizeof *edits);
}

/* Phi-3's RoPE fields and fused tensors, on the Phi-4-mini golden model (6 rotary pairs). */
static void bad_phi3(void) {
    static const field_edit edits[] = {
        {"phi3: a short factor list of another length", true, "rope_parameters", "short_factor", "[1.0, 1.0]", NULL,
         "rope 'short_factor' must list 6 factors (one per rotary pair)"},
        {"phi3: a zero long factor", true, "rope_parameters", "long_factor", "[1, 2, 0, 8, 16, 32]", NULL,
         "rope 'long_factor'[2] must be a positive number"},
        {"phi3: a partial rotary factor over 1", true, "rope_parameters", "partial_rotary_factor", "1.5", NULL,
         "partial_rotary_factor 1.5 of head_dim 16: the rotary width must be even and positive"},
        {"phi3: an odd rotary width", true, "rope_parameters", "partial_rotary_factor", "0.3125", NULL,
         "partial_rotary_factor 0.3125 of head_dim 16: the rotary width must be even and positive"},
        {"phi3: a fused qkv_proj of another shape", false, "model.layers.0.self_attn.qkv_proj.weight", "shape",
         "[64, 128]", NULL,
         "tensor 'model.layers.0.self_attn.qkv_proj.weight' has shape [64, 128], expected [128, 64]"},
    };
    edits_on("phi4_mini", edits, sizeof edits / sizeof *edits);
}

/* GPT-OSS's fields and MXFP4 tensors, on its golden model (8 experts of 128, hidden 64). */
static void bad_gpt_oss(void) {
    static const field_edit edits[] = {
        {"gpt-oss: a zero swiglu_limit", true, NULL, "swiglu_limit", "0", NULL,
         "field 'swiglu_limit' must be positive"},
        {"gpt-oss: mxfp4 scales of another dtype", false, "model.layers.0.mlp.experts.gate_up_proj_scales", "dtype",
         "\"I8\"", NULL, "tensor 'model.layers.0.mlp.experts.gate_up_proj_scales' has dtype I8, expected U8 (mxfp4)"},
        {"gpt-oss: mxfp4 blocks of another shape", false, "model.layers.1.mlp.experts.down_proj_blocks", "shape",
         "[8, 64, 2, 32]", NULL,
         "tensor 'model.layers.1.mlp.experts.down_proj_blocks' has shape [8, 64, 2, 32], expected [experts, rows, 4, "
         "16], 512 rows in all"},
        {"gpt-oss: float experts in place of the MXFP4 ones", true, NULL, "quantization_config", "null", NULL,
         "model.layers.0.mlp.experts.gate_up_proj: interleaved gate and up rows are read from MXFP4 checkpoints only"},
    };
    edits_on("gpt_oss", edits, sizeof edits / sizeof *edits);
}

/* Gemma's own fields, on the Gemma 3 golden model. */
static void bad_gemma(void) {
    static const field_edit edits[] = {
        {"gemma: exact GELU", true, NULL, "hidden_activation", "\"gelu\"", NULL,
         "unsupported hidden_activation 'gelu' (only gelu_pytorch_tanh)"},
        {"gemma: layer_types too short", true, NULL, "layer_types", "[\"sliding_attention\"]", NULL,
         "field 'layer_types' must list one type for each of the 3 layers"},
        {"gemma: an unknown layer type", true, NULL, "layer_types",
         "[\"sliding_attention\", \"chunked_attention\", \"full_attention\"]", NULL,
         "layer_types[1] 'chunked_attention': only sliding_attention and full_attention"},
        {"gemma: scaled RoPE on the sliding layers", true, "rope_parameters", "sliding_attention",
         "{\"rope_type\": \"linear\", \"factor\": 2.0}", NULL,
         "rope_parameters.sliding_attention: rope type 'linear' (only default)"},
        {"gemma: a negative soft-cap", true, NULL, "final_logit_softcapping", "-1.0", NULL,
         "field 'final_logit_softcapping' must be positive (or null for none)"},
        {"gemma: bidirectional attention", true, NULL, "use_bidirectional_attention", "true", NULL,
         "field 'use_bidirectional_attention': only causal attention is supported"},
        {"gemma: query_pre_attn_scalar zero", true, NULL, "query_pre_attn_scalar", "0", NULL,
         "field 'query_pre_attn_scalar' must be positive"},
    };
    edits_on("gemma3", edits, sizeof edits / sizeof *edits);
}

/* Qwen3.5's linear-attention fields and tensors, on its golden model (2 key heads, 4 value
 * heads, 3 layers). */
static void bad_qwen3_5(void) {
    static const field_edit edits[] = {
        {"qwen3.5: an unknown layer type", true, NULL, "layer_types",
         "[\"linear_attention\", \"mamba\", \"full_attention\"]", NULL,
         "layer_types[1] 'mamba': one of linear_attention, full_attention"},
        {"qwen3.5: layer_types too short", true, NULL, "layer_types", "[\"full_attention\"]", NULL,
         "field 'layer_types' must list one type for each of the 3 layers"},
        {"qwen3.5: value heads not a multiple of key heads", true, NULL, "linear_num_value_heads", "3", NULL,
         "linear_num_value_heads 3 is not a multiple of linear_num_key_heads 2"},
        {"qwen3.5: a one-tap convolution", true, NULL, "linear_conv_kernel_dim", "1", NULL,
         "linear_conv_kernel_dim 1: from 2 to 16 taps"},
        {"qwen3.5: A_log of another shape", false, "model.layers.1.linear_attn.A_log", "shape", "[2, 2]", NULL,
         "tensor 'model.layers.1.linear_attn.A_log' has shape [2, 2], expected [4]"},
        {"qwen3.5: conv1d of another layout", false, "model.layers.0.linear_attn.conv1d.weight", "shape", "[128, 2, 2]",
         NULL, "tensor 'model.layers.0.linear_attn.conv1d.weight' has shape [128, 2, 2], expected [128, 1, 4]"},
    };
    edits_on("qwen3_5", edits, sizeof edits / sizeof *edits);
}

/* Granite 4.0-H's Mamba-2 fields, on its golden model (8 heads of 16, one group, 3 layers). */
static void bad_granite_hybrid(void) {
    static const field_edit edits[] = {
        {"granite-h: an unknown layer type", true, NULL, "layer_types", "[\"mamba\", \"rwkv\", \"attention\"]", NULL,
         "layer_types[1] 'rwkv': one of mamba, linear_attention, attention, full_attention"},
        {"granite-h: heads not a multiple of the groups", true, NULL, "mamba_n_groups", "3", NULL,
         "mamba_n_heads 8 is not a multiple of mamba_n_groups 3"},
        {"granite-h: heads of another width", true, NULL, "mamba_d_head", "32", NULL,
         "mamba_n_heads 8 of mamba_d_head 32 do not make mamba_expand x hidden_size 128"},
        {"granite-h: a rotary type of its own", true, NULL, "position_embedding_type", "\"alibi\"", NULL,
         "position_embedding_type 'alibi' (rope, nope or null)"},
        {"granite-h: D of another shape", false, "model.layers.0.mamba.D", "shape", "[2, 4]", NULL,
         "tensor 'model.layers.0.mamba.D' has shape [2, 4], expected [8]"},
    };
    edits_on("granitemoehybrid", edits, sizeof edits / sizeof *edits);
}

/* Nemotron-H's layer kinds and Mamba-2 fields, on its golden model (M - * M -; 8 heads of 16 in
 * 2 groups), its experts (nemotron_h_moe: 8 of 32), and Mamba-2's alone. */
static void bad_nemotron_h(void) {
    static const field_edit edits[] = {
        {"nemotron-h: an unknown layer type", true, NULL, "layers_block_type",
         "[\"linear_attention\", \"rwkv\", \"full_attention\", \"linear_attention\", \"mlp\"]", NULL,
         "layers_block_type[1] 'rwkv': one of linear_attention, mamba, full_attention, attention, mlp, moe"},
        {"nemotron-h: an MLP of another activation", true, NULL, "mlp_hidden_act", "\"silu\"", NULL,
         "mlp_hidden_act 'silu' is not supported (relu2 is)"},
        {"nemotron-h: heads not a multiple of the groups", true, NULL, "n_groups", "3", NULL,
         "mamba_num_heads 8 is not a multiple of n_groups 3"},
        {"nemotron-h: no layer list", true, NULL, "layers_block_type", NULL, NULL, "missing field 'num_hidden_layers'"},
        {"nemotron-h: a missing A_log", false, NULL, "backbone.layers.3.mixer.A_log", NULL, NULL,
         "model.layers.3.mixer.A_log"},
    };
    edits_on("nemotron_h", edits, sizeof edits / sizeof *edits);
    /* older configs spell the layers as hybrid_override_pattern: the same model loads from it,
     * and a character outside it is named */
    static const struct {
        const char *pattern;
        int rc;
        const char *needle;
    } patterns[] = {{"M-*M-", 0, "Avg latency"}, {"M-*X-", 1, "hybrid_override_pattern[3] 'X': one of M, *, - and E"}};
    for (size_t i = 0; i < sizeof patterns / sizeof *patterns; i++) {
        char path[1024];
        size_t len;
        snprintf(path, sizeof path, "%s/config.json", src_dir);
        char *text = slurp(path, &len);
        cJSON *c = cJSON_Parse(text);
        cJSON_DeleteItemFromObject(c, "layers_block_type");
        cJSON_AddStringToObject(c, "hybrid_override_pattern", patterns[i].pattern);
        char *out = cJSON_Print(c);
        fresh_case(out);
        expect(patterns[i].pattern, BENCH, patterns[i].rc, patterns[i].needle);
        free(out);
        cJSON_Delete(c);
        free(text);
    }
    static const field_edit moe[] = {
        {"nemotron-h: experts on a latent projection", true, NULL, "moe_latent_size", "16", NULL,
         "moe_latent_size: experts on a latent projection (Nemotron 3 Super's) are not supported"},
        {"nemotron-h: groups that do not divide the experts", true, NULL, "n_group", "3", NULL,
         "n_group 3 does not divide the 8 experts"},
        {"nemotron-h: an expert's up_proj of another shape", false, "backbone.layers.1.mixer.experts.3.up_proj.weight",
         "shape", "[64, 32]", NULL, "has shape [64, 32], expected [32, 64]"},
    };
    edits_on("nemotron_h_moe", moe, sizeof moe / sizeof *moe);
    static const field_edit mamba[] = {
        {"mamba2: heads that do not make the inner width", true, NULL, "head_dim", "32", NULL,
         "num_heads 8 of head_dim 32 do not make expand x hidden_size 128"},
        {"mamba2: a missing D", false, NULL, "backbone.layers.1.mixer.D", NULL, NULL, "model.layers.1.mixer.D"},
    };
    edits_on("mamba2", mamba, sizeof mamba / sizeof *mamba);
    static const field_edit vlm[] = {
        {"qwen3.5 (vision-language): no text_config", true, NULL, "text_config", NULL, NULL,
         "Qwen3_5ForConditionalGeneration without a text_config"},
        {"qwen3.5 (vision-language): a text model of another layer count", true, "text_config", "num_hidden_layers",
         "4", NULL, "field 'layer_types' must list one type for each of the 4 layers"},
    };
    edits_on("qwen3_5_vl", vlm, sizeof vlm / sizeof *vlm);
}

int main(void) {
    snprintf(tmp, sizeof tmp, "/tmp/loom-bad-XXXXXX");
    CHECK(mkdtemp(tmp), "mkdtemp");
    snprintf(src_dir, sizeof src_dir, "%s/tests/golden/llama", LOOM_SOURCE_DIR);

    fresh_case(NULL);
    expect("sanity: the unmodified copy loads", BENCH, 0, "Avg latency");
    bad_pipeline();
    bad_expert_load();

#define MOE_CONFIG(extra)                                                                                              \
    "{\"architectures\": [\"OlmoeForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 48, "                     \
    "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 128, \"num_experts\": 4" extra "}"
    /* whole config.json files, over the golden weights */
    static const struct {
        const char *what, *json, *needle;
    } configs[] = {
        {"config: missing field", "{\"architectures\": [\"LlamaForCausalLM\"], \"num_hidden_layers\": 2}",
         "config.json: missing field 'hidden_size'"},
        {"config: invalid JSON",
         "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": ", "config.json: invalid JSON"},
        {"config: unsupported architecture",
         "{\"architectures\": [\"GPT2LMHeadModel\"], \"hidden_size\": 64, \"intermediate_size\": 96,"
         " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 128}",
         "unsupported architecture 'GPT2LMHeadModel'"},
        {"config: wrong type",
         "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": \"64\", \"intermediate_size\": 96,"
         " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 128}",
         "field 'hidden_size' must be a number"},
        {"config: heads do not divide hidden",
         "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 96,"
         " \"num_hidden_layers\": 2, \"num_attention_heads\": 5, \"vocab_size\": 128}",
         "not a multiple of num_attention_heads"},
        {"config: more experts per token than experts", MOE_CONFIG(", \"num_experts_per_tok\": 5"),
         "num_experts_per_tok 5 exceeds the 4 experts"},
        {"config: a dense layer that does not exist", MOE_CONFIG(", \"mlp_only_layers\": [2]"),
         "'mlp_only_layers' entries must be layers 0..1"},
        {"config: OLMoE's clip_qkv", MOE_CONFIG(", \"clip_qkv\": 8.0"), "field 'clip_qkv' is not supported"},
    };
    for (size_t i = 0; i < sizeof configs / sizeof *configs; i++) {
        fresh_case(configs[i].json);
        expect(configs[i].what, BENCH, 1, configs[i].needle);
    }
    bad_deepseek();

    char *data, *whole;
    size_t dlen;
    cJSON *h = orig_header(&data, &dlen, &whole);

    fresh_case(NULL);
    write_weights("", NULL, 0);
    expect("safetensors: too short", BENCH, 1, "model.safetensors: header length 0 is invalid");
    fresh_case(NULL);
    {
        char p[1024];
        snprintf(p, sizeof p, "%s/m/model.safetensors", tmp);
        spit(p, "\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10);
    }
    expect("safetensors: huge header length", BENCH, 1, "is invalid for a 10-byte file");
    fresh_case(NULL);
    write_weights("[1, 2]   ", data, dlen);
    expect("safetensors: header not an object", BENCH, 1, "model.safetensors: header is not a JSON object");

    static const field_edit edits[] = {
        {"safetensors: offsets outside the file", false, "model.norm.weight", "data_offsets", "[0, %zu]", NULL,
         "tensor 'model.norm.weight': data_offsets outside"},
        {"safetensors: shape x dtype != bytes", false, "model.norm.weight", "shape", "[65]", NULL,
         "'model.norm.weight': shape x dtype is 260 bytes"},
        {"safetensors: overlapping tensors", false, "model.layers.0.input_layernorm.weight", "data_offsets", NULL,
         "model.norm.weight", "overlap"},
        {"safetensors: unsupported dtype", false, "model.norm.weight", "dtype", "\"F8_E8M0\"", NULL,
         "'model.norm.weight': unsupported dtype 'F8_E8M0'"},
        {"weights: transposed shape", false, "model.layers.0.mlp.up_proj.weight", "shape", "[64, 96]", NULL,
         "'model.layers.0.mlp.up_proj.weight' has shape [64, 96], expected [96, 64]"},
        {"weights: integer dtype", false, "model.norm.weight", "dtype", "\"I32\"", NULL,
         "'model.norm.weight' has dtype I32"},
    };
    expect_edits(edits, sizeof edits / sizeof *edits, h, data, dlen);
    expect_missing(h, data, dlen, "weights: missing tensor", "model.layers.1.mlp.down_proj.weight");

    cJSON *c = cJSON_Duplicate(h, 1);
    cJSON_AddItemToObject(c, "model.extra.weight", cJSON_Duplicate(cJSON_GetObjectItem(c, "model.norm.weight"), 1));
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(c, "model.extra.weight"), "data_offsets",
                              cJSON_CreateIntArray((int[]){(int)dlen, (int)dlen + 256}, 2));
    fresh_case(NULL);
    {
        char *d2 = calloc(dlen + 256, 1);
        memcpy(d2, data, dlen);
        write_modified(c, d2, dlen + 256);
        free(d2);
    }
    expect("weights: unexpected tensor is reported", BENCH, 0,
           "1 tensor not used by LlamaForCausalLM, e.g. 'model.extra.weight'");
    cJSON_Delete(c);

    fresh_case(NULL);
    {
        char p[1024];
        snprintf(p, sizeof p, "%s/m/model.safetensors.index.json", tmp);
        const char *idx = "{\"weight_map\": {\"model.norm.weight\": \"model-00002-of-00002.safetensors\"}}";
        spit(p, idx, strlen(idx));
    }
    expect("sharded: index names a missing file", BENCH, 1, "model-00002-of-00002.safetensors: cannot open");
    expect("no such folder", "run -m %s/nowhere", 1, "nowhere: no such model folder");
    fresh_case(NULL);
    expect("run without tokenizer.json", "run -m %s/m -n 1", 1, "tokenizer.json: missing");

    cJSON_Delete(h);
    free(whole);
    bad_quantized();
    bad_fp8();
    bad_gemma();
    bad_qwen3_5();
    bad_granite_hybrid();
    bad_nemotron_h();
    bad_ernie();
    bad_phi3();
    bad_gpt_oss();
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    CHECK(system(cmd) == 0, "cleanup");
    return check_done();
}

/* DeepSeek's latent attention and routing fields: each bad value named, before any weight. */
#define DEEPSEEK_CONFIG(extra)                                                                                         \
    "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 96, "                \
    "\"moe_intermediate_size\": 32, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 128, "       \
    "\"n_routed_experts\": 8, \"kv_lora_rank\": 32, \"q_lora_rank\": 48, \"v_head_dim\": 24" extra "}"
/* what each case does not change (JSON objects take a key once) */
#define ROPE   ", \"qk_rope_head_dim\": 16"
#define NOPE   ", \"qk_nope_head_dim\": 32"
#define TOPK   ", \"num_experts_per_tok\": 2"
#define GROUPS ", \"n_group\": 4, \"topk_group\": 2"

static void bad_deepseek(void) {
    static const struct {
        const char *what, *extra, *needle;
    } cases[] = {
        {"no qk_nope_head_dim", ROPE TOPK GROUPS, "missing field 'qk_nope_head_dim'"},
        {"odd rotary dims", NOPE TOPK GROUPS ", \"qk_rope_head_dim\": 15", "qk_rope_head_dim 15 must be even"},
        {"unknown topk_method", ROPE NOPE TOPK GROUPS ", \"topk_method\": \"bogus\"",
         "unsupported topk_method 'bogus' (supported: greedy, group_limited_greedy, noaux_tc)"},
        {"unknown scoring_func", ROPE NOPE TOPK GROUPS ", \"scoring_func\": \"tanh\"",
         "unsupported scoring_func 'tanh'"},
        {"groups that do not divide the experts", ROPE NOPE TOPK ", \"n_group\": 3, \"topk_group\": 2",
         "n_group 3 does not divide the 8 experts"},
        {"more groups kept than exist", ROPE NOPE TOPK ", \"n_group\": 4, \"topk_group\": 5",
         "topk_group 5 exceeds n_group 4"},
        {"more experts per token than the kept groups hold",
         ROPE NOPE ", \"n_group\": 4, \"topk_group\": 1, "
                   "\"num_experts_per_tok\": 3",
         "num_experts_per_tok 3 exceeds the 2 experts of topk_group 1 groups"},
        {"noaux_tc over groups of one", ROPE NOPE TOPK ", \"n_group\": 8, \"topk_group\": 2", "groups of 1 have fewer"},
        {"first_k_dense_replace past the layers", ROPE NOPE TOPK GROUPS ", \"first_k_dense_replace\": 3",
         "first_k_dense_replace 3 exceeds the 2 layers"},
        {"zero routed_scaling_factor", ROPE NOPE TOPK GROUPS ", \"routed_scaling_factor\": 0",
         "field 'routed_scaling_factor' must be positive"},
        {"shared experts too wide for an int", ROPE NOPE TOPK GROUPS ", \"n_shared_experts\": 337508389",
         "n_shared_experts 337508389 x moe_intermediate_size"},
        {"an unknown RoPE type", ROPE NOPE TOPK GROUPS ", \"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2}",
         "unsupported rope type 'dynamic'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char what[128];
        snprintf(what, sizeof what, "deepseek config: %s", cases[i].what);
        char json[2048];
        snprintf(json, sizeof json, DEEPSEEK_CONFIG("%s"), cases[i].extra);
        fresh_case(json);
        expect(what, BENCH, 1, cases[i].needle);
    }
    /* the context against the KV budget: too long for it, and a budget that is not a size */
    fresh_case(NULL);
    expect("kv budget: not one block", BENCH " --kv-cache-memory-bytes 1K", 1, "holds not one block of 64");
    expect("kv budget: context over it", BENCH " --kv-cache-memory-bytes 64K --input-len 200", 1,
           "is over the KV cache budget of 65536 bytes");
    expect("kv budget: block size", BENCH " --block-size 48", 1,
           "--block-size 48: a KV cache block holds a power of two");
    expect("kv budget: not a size", BENCH " --kv-cache-memory-bytes 4Q", 2,
           "--kv-cache-memory-bytes: '4Q' is not a size in bytes");
    expect("kv dtype: unknown", BENCH " --kv-cache-dtype int4", 2, "--kv-cache-dtype: unknown 'int4'");
}

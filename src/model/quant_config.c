/* config.json's quantization_config: GPTQ, AWQ (GEMM), compressed-tensors integer weight-only
 * and FP8 schemes, and the "fp8" method (DeepSeek-V3's block scales), with the field names each
 * library writes. Anything loom would run differently from what the checkpoint means (another
 * method, an integer activation scheme, NVFP4 or MXFP8, KV-cache scales, AWQ's other kernel
 * layouts) is refused, naming the field. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <limits.h>
#include <pcre2.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "model/quant_config.h"
#include "util/err.h"

const char *quant_format_name(quant_format f) {
    static const char *names[] = {"none",
                                  "gptq",
                                  "awq",
                                  "compressed-tensors pack-quantized",
                                  "compressed-tensors int-quantized",
                                  "compressed-tensors float-quantized",
                                  "fp8",
                                  "mxfp4",
                                  "gguf"};
    return names[f];
}

typedef struct qreader {
    const cJSON *obj;
    const char *file, *where; /* where: "quantization_config" or a config group's path */
    loom_err *err;
} qreader;

static const cJSON *item(const qreader *r, const char *key) { return cJSON_GetObjectItemCaseSensitive(r->obj, key); }

/* An integer field (def when absent or null); -1 with an error on another type. */
static int int_field(const qreader *r, const char *key, int def, int *out) {
    const cJSON *v = item(r, key);
    if (!v || cJSON_IsNull(v)) return *out = def, 0;
    /* range first: converting a double outside int's range is undefined */
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= INT_MIN && v->valuedouble <= INT_MAX) ||
        v->valuedouble != (double)(int)v->valuedouble)
        return loom_errf(r->err, "%s: %s.%s must be an integer", r->file, r->where, key);
    *out = (int)v->valuedouble;
    return 0;
}

static int bool_field(const qreader *r, const char *key, bool def, bool *out) {
    const cJSON *v = item(r, key);
    if (!v || cJSON_IsNull(v)) return *out = def, 0;
    if (!cJSON_IsBool(v)) return loom_errf(r->err, "%s: %s.%s must be true or false", r->file, r->where, key);
    *out = cJSON_IsTrue(v);
    return 0;
}

static const char *str_field(const qreader *r, const char *key) {
    const cJSON *v = item(r, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int check_bits(const qreader *r, const char *key, int bits, bool four_only) {
    if (bits == 4 || (bits == 8 && !four_only)) return 0;
    return loom_errf(r->err, "%s: %s.%s: %d-bit weights are not supported (%s)", r->file, r->where, key, bits,
                     four_only ? "4" : "4 or 8");
}

/* group_size as the libraries write it: -1 (or absent where allowed) for one per channel */
static int group_field(const qreader *r, const char *key, int def, quant_config *q) {
    if (int_field(r, key, def, &q->group)) return -1;
    if (q->group == -1) q->group = 0;
    else if (q->group <= 0)
        return loom_errf(r->err, "%s: %s.%s: %d is neither a positive group size nor -1 (per channel)", r->file,
                         r->where, key, q->group);
    return 0;
}

/* Regular expression `re` (an ignore entry's after "re:"), compiled; NULL with the compiler's
 * message in msg when it is not one. */
static pcre2_code *ignore_regex(const char *re, char *msg, size_t cap) {
    int code;
    PCRE2_SIZE at;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_ANCHORED, &code, &at, NULL);
    if (!c) pcre2_get_error_message(code, (PCRE2_UCHAR *)msg, cap);
    return c;
}

bool quant_config_ignores(const quant_config *q, const char *module) {
    size_t n = strlen(module);
    for (int i = 0; i < q->n_ignore; i++) {
        const char *e = q->ignore[i];
        if (!strncmp(e, "re:", 3)) { /* compressed-tensors' re.match: anchored at the start only */
            char msg[128];
            pcre2_code *c = ignore_regex(e + 3, msg, sizeof msg); /* checked when parsed */
            pcre2_match_data *md = c ? pcre2_match_data_create_from_pattern(c, NULL) : NULL;
            bool hit = md && pcre2_match(c, (PCRE2_SPTR)module, n, 0, 0, md, NULL) >= 0;
            pcre2_match_data_free(md);
            pcre2_code_free(c);
            if (hit) return true;
            continue;
        }
        size_t k = strlen(e); /* the module's name, or its last components ("lm_head", "mlp.gate") */
        if (!strcmp(module, e) || (k < n && module[n - k - 1] == '.' && !strcmp(module + n - k, e))) return true;
    }
    return false;
}

/* A list of module names kept in float (AWQ's modules_to_not_convert, CT's ignore). */
static int ignore_list(const qreader *r, const char *key, quant_config *q) {
    const cJSON *v = item(r, key), *e;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsArray(v)) return loom_errf(r->err, "%s: %s.%s must be a list of module names", r->file, r->where, key);
    cJSON_ArrayForEach(e, v) {
        if (!cJSON_IsString(e) || strlen(e->valuestring) >= sizeof q->ignore[0])
            return loom_errf(r->err, "%s: %s.%s: every entry must be a module name", r->file, r->where, key);
        if (q->n_ignore == QUANT_MAX_IGNORE)
            return loom_errf(r->err, "%s: %s.%s: more than %d entries", r->file, r->where, key, QUANT_MAX_IGNORE);
        char msg[128];
        pcre2_code *c = strncmp(e->valuestring, "re:", 3) ? NULL : ignore_regex(e->valuestring + 3, msg, sizeof msg);
        if (!strncmp(e->valuestring, "re:", 3) && !c)
            return loom_errf(r->err, "%s: %s.%s: '%s' is not a regular expression: %s", r->file, r->where, key,
                             e->valuestring, msg);
        pcre2_code_free(c);
        snprintf(q->ignore[q->n_ignore++], sizeof q->ignore[0], "%s", e->valuestring);
    }
    return 0;
}

static int parse_gptq(const qreader *r, quant_config *q) {
    q->format = QF_GPTQ;
    if (int_field(r, "bits", -1, &q->bits) || check_bits(r, "bits", q->bits, false) ||
        group_field(r, "group_size", -1, q) || bool_field(r, "sym", true, &q->sym) ||
        bool_field(r, "desc_act", false, &q->act_order) || bool_field(r, "lm_head", false, &q->lm_head))
        return -1;
    const char *fmt = str_field(r, "checkpoint_format");
    if (!fmt) fmt = str_field(r, "format");
    if (fmt && strcmp(fmt, "gptq") && strcmp(fmt, "gptq_v2"))
        return loom_errf(r->err, "%s: %s.checkpoint_format '%s' is not supported (gptq, gptq_v2)", r->file, r->where,
                         fmt);
    q->gptq_v2 = fmt && !strcmp(fmt, "gptq_v2");
    return 0;
}

static int parse_awq(const qreader *r, quant_config *q) {
    q->format = QF_AWQ;
    const char *version = str_field(r, "version");
    if (version && strcasecmp(version, "gemm"))
        return loom_errf(r->err, "%s: %s.version '%s' is not supported (only AWQ's GEMM layout)", r->file, r->where,
                         version);
    bool zero_point;
    int group;
    if (int_field(r, "bits", -1, &q->bits) || (q->bits < 0 && int_field(r, "w_bit", -1, &q->bits)) ||
        check_bits(r, "bits", q->bits, true) || bool_field(r, "zero_point", true, &zero_point) ||
        int_field(r, "group_size", -2, &group) || (group == -2 && int_field(r, "q_group_size", -2, &group)))
        return -1;
    if (!zero_point) return loom_errf(r->err, "%s: %s.zero_point false is not supported", r->file, r->where);
    if (group <= 0)
        return loom_errf(r->err, "%s: %s.group_size must be a positive number of input features", r->file, r->where);
    q->group = group;
    return ignore_list(r, "modules_to_not_convert", q);
}

/* A [rows, columns] pair of positive integers (an FP8 block's shape). */
static int block_field(const qreader *r, const char *key, int out[2]) {
    const cJSON *v = item(r, key);
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2)
        return loom_errf(r->err, "%s: %s.%s must be a list of two sizes, [rows, columns]", r->file, r->where, key);
    for (int i = 0; i < 2; i++) {
        const cJSON *e = cJSON_GetArrayItem(v, i);
        if (!cJSON_IsNumber(e) || !(e->valuedouble >= 1 && e->valuedouble <= 1 << 20) ||
            e->valuedouble != (double)(int)e->valuedouble)
            return loom_errf(r->err, "%s: %s.%s must be a list of two positive sizes", r->file, r->where, key);
        out[i] = (int)e->valuedouble;
    }
    return 0;
}

/* A scale's stored dtype, where the config names one: floats are read as stored; E8M0
 * (MXFP8's powers of two) is not. */
static int scale_dtype(const qreader *r) {
    const char *d = str_field(r, "scale_dtype");
    if (!d || strstr(d, "float32") || strstr(d, "bfloat16") || strstr(d, "float16")) return 0;
    return loom_errf(r->err, "%s: %s.scale_dtype '%s' is not supported (E8M0 scales are MXFP8's; float scales only)",
                     r->file, r->where, d);
}

/* A kv_cache_scheme (FP8 KV caches and their scales) is refused: loom's cache is fp32. */
static int no_kv_cache_scheme(const qreader *r) {
    const cJSON *kv = item(r, "kv_cache_scheme");
    if (!kv || cJSON_IsNull(kv)) return 0;
    return loom_errf(r->err, "%s: %s.kv_cache_scheme: quantized KV caches (and their scales) are not supported",
                     r->file, r->where);
}

/* compressed-tensors FP8: the weights' scale (tensor, channel or block) and the activations'
 * (none, static per tensor, dynamic per token or per group). */
static int parse_ct_fp8(const qreader *w, const qreader *a, quant_config *q) {
    int bits;
    bool sym, dynamic;
    const char *strategy = str_field(w, "strategy");
    if (int_field(w, "num_bits", -1, &bits) || bool_field(w, "symmetric", true, &sym) ||
        bool_field(w, "dynamic", false, &dynamic) || scale_dtype(w))
        return -1;
    if (bits != 8)
        return loom_errf(w->err, "%s: %s.num_bits: %d-bit float weights are not supported (NVFP4 is 4-bit; FP8 only)",
                         w->file, w->where, bits);
    if (!sym || dynamic)
        return loom_errf(w->err, "%s: %s.%s: FP8 weights must be symmetric with stored scales", w->file, w->where,
                         sym ? "dynamic" : "symmetric");
    q->bits = 8;
    if (strategy && !strcmp(strategy, "tensor")) q->fp8_scale = FP8_TENSOR;
    else if (strategy && !strcmp(strategy, "channel")) q->fp8_scale = FP8_CHANNEL;
    else if (strategy && !strcmp(strategy, "block")) {
        q->fp8_scale = FP8_BLOCK;
        if (block_field(w, "block_structure", q->fp8_block)) return -1;
    } else
        return loom_errf(w->err, "%s: %s.strategy '%s' is not supported for FP8 weights (tensor, channel, block)",
                         w->file, w->where, strategy ? strategy : "(missing)");
    if (!a->obj || cJSON_IsNull(a->obj)) return 0; /* weight-only (W8A16) */
    if (!cJSON_IsObject(a->obj)) return loom_errf(a->err, "%s: %s must be an object or null", a->file, a->where);
    const char *type = str_field(a, "type"), *as = str_field(a, "strategy");
    if (int_field(a, "num_bits", -1, &bits) || bool_field(a, "dynamic", false, &dynamic) || scale_dtype(a)) return -1;
    if (!type || strcmp(type, "float") || bits != 8)
        return loom_errf(a->err, "%s: %s: only FP8 activations go with FP8 weights (type float, num_bits 8)", a->file,
                         a->where);
    if (as && !strcmp(as, "tensor") && !dynamic) q->fp8_act = FP8_ACT_STATIC;
    else if (as && !strcmp(as, "token") && dynamic) q->fp8_act = FP8_ACT_TOKEN;
    else if (as && !strcmp(as, "group") && dynamic) {
        q->fp8_act = FP8_ACT_GROUP;
        if (int_field(a, "group_size", -1, &q->act_group)) return -1;
        if (q->act_group <= 0)
            return loom_errf(a->err, "%s: %s.group_size must be positive for strategy group", a->file, a->where);
    } else
        return loom_errf(a->err,
                         "%s: %s: strategy '%s' with dynamic %s is not supported (static tensor, dynamic token, "
                         "dynamic group)",
                         a->file, a->where, as ? as : "(missing)", dynamic ? "true" : "false");
    return 0;
}

/* compressed-tensors: one config group quantizing Linear layers, integer weight-only or FP8. */
static int parse_compressed(const qreader *r, quant_config *q) {
    const char *fmt = str_field(r, "format");
    if (fmt && !strcmp(fmt, "pack-quantized")) q->format = QF_CT_PACKED;
    else if (fmt && (!strcmp(fmt, "int-quantized") || !strcmp(fmt, "naive-quantized"))) q->format = QF_CT_INT;
    else if (fmt && !strcmp(fmt, "float-quantized")) q->format = QF_CT_FP8;
    else
        return loom_errf(r->err,
                         "%s: %s.format '%s' is not supported (pack-quantized, int-quantized, naive-quantized, "
                         "float-quantized)",
                         r->file, r->where, fmt ? fmt : "(missing)");
    if (no_kv_cache_scheme(r)) return -1;
    const cJSON *groups = item(r, "config_groups");
    if (!cJSON_IsObject(groups) || cJSON_GetArraySize(groups) != 1)
        return loom_errf(r->err, "%s: %s.config_groups must hold exactly one group", r->file, r->where);
    char where[160], act_where[192];
    snprintf(where, sizeof where, "%s.config_groups.%s", r->where, groups->child->string);
    snprintf(act_where, sizeof act_where, "%s.input_activations", where);
    qreader g = {groups->child, r->file, where, r->err};
    qreader a = {item(&g, "input_activations"), r->file, act_where, r->err};
    snprintf(where + strlen(where), sizeof where - strlen(where), ".weights");
    qreader w = {item(&g, "weights"), r->file, where, r->err};
    if (!cJSON_IsObject(w.obj)) return loom_errf(r->err, "%s: missing %s", r->file, where);
    const char *type = str_field(&w, "type"), *strategy = str_field(&w, "strategy");
    bool is_float = type && !strcmp(type, "float");
    if (is_float && q->format == QF_CT_INT) q->format = QF_CT_FP8; /* naive-quantized FP8 stores the same tensors */
    if (q->format == QF_CT_FP8) {
        if (!is_float)
            return loom_errf(r->err, "%s: %s.type '%s': float-quantized weights must be of type float", r->file, where,
                             type ? type : "(missing)");
        return parse_ct_fp8(&w, &a, q) || ignore_list(r, "ignore", q) ? -1 : 0;
    }
    if (a.obj && !cJSON_IsNull(a.obj))
        return loom_errf(r->err, "%s: %s: activation quantization is not supported with integer weights", r->file,
                         act_where);
    if (!type || strcmp(type, "int"))
        return loom_errf(r->err, "%s: %s.type '%s' is not supported (int, float)", r->file, where,
                         type ? type : "(missing)");
    if (int_field(&w, "num_bits", -1, &q->bits) || check_bits(&w, "num_bits", q->bits, false) ||
        bool_field(&w, "symmetric", true, &q->sym))
        return -1;
    if (q->format == QF_CT_INT && q->bits != 8)
        return loom_errf(r->err, "%s: %s.num_bits: int-quantized weights must be 8-bit", r->file, where);
    if (strategy && !strcmp(strategy, "channel")) q->group = 0;
    else if (strategy && !strcmp(strategy, "group")) {
        if (group_field(&w, "group_size", -2, q)) return -1;
        if (!q->group)
            return loom_errf(r->err, "%s: %s.group_size must be positive for strategy group", r->file, where);
    } else
        return loom_errf(r->err, "%s: %s.strategy '%s' is not supported (channel, group)", r->file, where,
                         strategy ? strategy : "(missing)");
    const char *order = str_field(&w, "actorder");
    q->act_order = order && strcmp(order, "weight"); /* "weight": reordered at quantization, g_idx not stored */
    if (cJSON_IsTrue(item(&w, "dynamic")))
        return loom_errf(r->err, "%s: %s.dynamic: dynamic weight scales are not supported", r->file, where);
    return ignore_list(r, "ignore", q);
}

/* quant_method "fp8" (transformers' FineGrainedFP8Config, vLLM's Fp8Config, DeepSeek-V3's
 * checkpoints): E4M3 weights scaled per block of weight_block_size (weight_scale_inv), or per
 * tensor without one (weight_scale), and activations dynamic (per group of a block's columns,
 * or per token) or static (input_scale). */
static int parse_fp8(const qreader *r, quant_config *q) {
    q->format = QF_FP8;
    q->bits = 8;
    const char *fmt = str_field(r, "fmt"), *act = str_field(r, "activation_scheme");
    if (fmt && strcmp(fmt, "e4m3") && strcmp(fmt, "e5m2"))
        return loom_errf(r->err, "%s: %s.fmt '%s' is not supported (e4m3, e5m2)", r->file, r->where, fmt);
    const cJSON *block = item(r, "weight_block_size");
    if (block && !cJSON_IsNull(block)) {
        q->fp8_scale = FP8_BLOCK;
        if (block_field(r, "weight_block_size", q->fp8_block)) return -1;
    }
    if (!act || !strcmp(act, "dynamic")) {
        q->fp8_act = q->fp8_scale == FP8_BLOCK ? FP8_ACT_GROUP : FP8_ACT_TOKEN;
        q->act_group = q->fp8_block[1];
    } else if (!strcmp(act, "static")) {
        if (q->fp8_scale == FP8_BLOCK)
            return loom_errf(r->err, "%s: %s.activation_scheme 'static' does not go with weight_block_size", r->file,
                             r->where);
        q->fp8_act = FP8_ACT_STATIC;
    } else
        return loom_errf(r->err, "%s: %s.activation_scheme '%s' is not supported (dynamic, static)", r->file, r->where,
                         act);
    if (no_kv_cache_scheme(r)) return -1;
    return ignore_list(r, "ignored_layers", q) || ignore_list(r, "modules_to_not_convert", q) ? -1 : 0;
}

int quant_config_parse(quant_config *q, const cJSON *qc, const char *name, loom_err *err) {
    memset(q, 0, sizeof *q);
    qreader r = {qc, name, "quantization_config", err};
    if (!cJSON_IsObject(qc)) return loom_errf(err, "%s: quantization_config must be an object", name);
    const char *method = str_field(&r, "quant_method");
    if (!method) return loom_errf(err, "%s: quantization_config.quant_method is missing", name);
    if (!strcmp(method, "gptq")) return parse_gptq(&r, q);
    if (!strcmp(method, "awq")) return parse_awq(&r, q);
    if (!strcmp(method, "compressed-tensors")) return parse_compressed(&r, q);
    if (!strcmp(method, "fp8")) return parse_fp8(&r, q);
    if (!strcmp(method, "mxfp4")) { /* OCP MX: groups of 32, E8M0 scales; what is quantized, the files say */
        *q = (quant_config){.format = QF_MXFP4, .bits = 4, .group = 32, .sym = true};
        return ignore_list(&r, "modules_to_not_convert", q);
    }
    return loom_errf(err,
                     "%s: quantization_config.quant_method '%s' is not supported (gptq, awq, compressed-tensors, fp8, "
                     "mxfp4; modelopt's NVFP4 is not)",
                     name, method);
}

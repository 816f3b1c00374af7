/* config.json's quantization_config: GPTQ, AWQ (GEMM) and compressed-tensors weight-only
 * schemes, with the field names each library writes. Anything loom would run differently
 * from what the checkpoint means (another method, an activation scheme, AWQ's other kernel
 * layouts) is refused, naming the field. */
#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "model/quant_config.h"
#include "util/err.h"

const char *quant_format_name(quant_format f) {
    static const char *names[] = {"none", "gptq", "awq", "compressed-tensors pack-quantized",
                                  "compressed-tensors int-quantized"};
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

/* compressed-tensors: one config group of integer weight-only quantization of Linear layers. */
static int parse_compressed(const qreader *r, quant_config *q) {
    const char *fmt = str_field(r, "format");
    if (fmt && !strcmp(fmt, "pack-quantized")) q->format = QF_CT_PACKED;
    else if (fmt && (!strcmp(fmt, "int-quantized") || !strcmp(fmt, "naive-quantized"))) q->format = QF_CT_INT;
    else
        return loom_errf(r->err, "%s: %s.format '%s' is not supported (pack-quantized, int-quantized)", r->file,
                         r->where, fmt ? fmt : "(missing)");
    const cJSON *groups = item(r, "config_groups");
    if (!cJSON_IsObject(groups) || cJSON_GetArraySize(groups) != 1)
        return loom_errf(r->err, "%s: %s.config_groups must hold exactly one group", r->file, r->where);
    char where[160];
    snprintf(where, sizeof where, "%s.config_groups.%s", r->where, groups->child->string);
    qreader g = {groups->child, r->file, where, r->err};
    const cJSON *act = item(&g, "input_activations");
    if (act && !cJSON_IsNull(act))
        return loom_errf(r->err, "%s: %s.input_activations: activation quantization is not supported", r->file, where);
    snprintf(where + strlen(where), sizeof where - strlen(where), ".weights");
    qreader w = {item(&g, "weights"), r->file, where, r->err};
    if (!cJSON_IsObject(w.obj)) return loom_errf(r->err, "%s: missing %s", r->file, where);
    const char *type = str_field(&w, "type"), *strategy = str_field(&w, "strategy");
    if (!type || strcmp(type, "int"))
        return loom_errf(r->err, "%s: %s.type '%s' is not supported (int)", r->file, where, type ? type : "(missing)");
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

int quant_config_parse(quant_config *q, const cJSON *qc, const char *name, loom_err *err) {
    memset(q, 0, sizeof *q);
    qreader r = {qc, name, "quantization_config", err};
    if (!cJSON_IsObject(qc)) return loom_errf(err, "%s: quantization_config must be an object", name);
    const char *method = str_field(&r, "quant_method");
    if (!method) return loom_errf(err, "%s: quantization_config.quant_method is missing", name);
    if (!strcmp(method, "gptq")) return parse_gptq(&r, q);
    if (!strcmp(method, "awq")) return parse_awq(&r, q);
    if (!strcmp(method, "compressed-tensors")) return parse_compressed(&r, q);
    return loom_errf(err, "%s: quantization_config.quant_method '%s' is not supported (gptq, awq, compressed-tensors)",
                     name, method);
}

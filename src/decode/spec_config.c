/* --speculative-config: vLLM's JSON object, read into loom_spec_options. Keys and defaults are
 * vLLM's: "method" (ngram, draft_model, eagle3; a "model" with no method means a draft model, and
 * "[ngram]" is vLLM's old spelling of ngram), "num_speculative_tokens" (required, but for eagle3
 * a speculators draft's config may give it: loom_model_info.spec_tokens),
 * "prompt_lookup_min"/"prompt_lookup_max" (ngram: one given sets the other, neither gives 5 and
 * 5), "model" and "draft_tensor_parallel_size" (draft_model, eagle3). A key loom does not know is an
 * error naming it, not ignored, so a setting never silently does nothing. */
#include <cjson/cJSON.h>
#include <string.h>

#include "loom.h"
#include "util/err.h"

#define NGRAM_DEFAULT 5 /* vLLM's prompt lookup length when neither bound is given */

static const char *const known_keys[] = {
    "method", "num_speculative_tokens",    "prompt_lookup_min", "prompt_lookup_max",
    "model",  "draft_tensor_parallel_size"};

static int get_int(const cJSON *root, const char *key, int min, int max, int *out, loom_err *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int)v->valuedouble || v->valueint < min || v->valueint > max)
        return loom_errf(err, "--speculative-config: \"%s\" must be an integer from %d to %d", key, min, max);
    *out = v->valueint;
    return 1;
}

int loom_spec_parse(const char *json, loom_spec_options *o, loom_err *err) {
    *o = (loom_spec_options){0};
    cJSON *root = cJSON_Parse(json);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return loom_errf(err, "--speculative-config: not a JSON object: '%.80s'", json);
    }
    int rc = 0;
    for (const cJSON *it = root->child; it && !rc; it = it->next) {
        bool known = false;
        for (size_t i = 0; i < sizeof known_keys / sizeof *known_keys; i++) known |= !strcmp(it->string, known_keys[i]);
        if (!known)
            rc = loom_errf(err,
                           "--speculative-config: unknown key \"%s\" (loom reads method, num_speculative_tokens, "
                           "prompt_lookup_min, prompt_lookup_max, model, draft_tensor_parallel_size)",
                           it->string);
    }
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(root, "method");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!rc && method && !cJSON_IsString(method))
        rc = loom_errf(err, "--speculative-config: \"method\" is not a string");
    if (!rc && model && !cJSON_IsString(model)) rc = loom_errf(err, "--speculative-config: \"model\" is not a string");
    const char *m = method                                           ? method->valuestring
                    : model && strcmp(model->valuestring, "[ngram]") ? "draft_model"
                                                                     : "ngram";
    if (!rc && !method && !model)
        rc = loom_errf(err, "--speculative-config: no \"method\" (ngram or draft_model) and no draft \"model\"");
    if (!rc) {
        if (!strcmp(m, "ngram") || !strcmp(m, "[ngram]")) o->method = LOOM_SPEC_NGRAM;
        else if (!strcmp(m, "draft_model")) o->method = LOOM_SPEC_DRAFT_MODEL;
        else if (!strcmp(m, "eagle3")) o->method = LOOM_SPEC_EAGLE3;
        else if (!strcmp(m, "eagle") || !strcmp(m, "medusa") || !strcmp(m, "mtp") || !strcmp(m, "mlp_speculator"))
            rc = loom_errf(err, "--speculative-config: method \"%s\" is not built (ngram, draft_model, eagle3 are)", m);
        else rc = loom_errf(err, "--speculative-config: unknown method \"%s\" (ngram, draft_model, eagle3)", m);
    }
    int k = 0;
    if (!rc && get_int(root, "num_speculative_tokens", 1, LOOM_SPEC_MAX_TOKENS, &k, err) < 0) rc = -1;
    if (!rc && !k && o->method != LOOM_SPEC_EAGLE3) /* an Eagle3 draft's config may name it */
        rc = loom_errf(err, "--speculative-config: \"num_speculative_tokens\" is required (1 to %d)",
                       LOOM_SPEC_MAX_TOKENS);
    o->num_speculative_tokens = k;
    int lo = 0, hi = 0, has_lo = 0, has_hi = 0;
    if (!rc && ((has_lo = get_int(root, "prompt_lookup_min", 1, 1 << 16, &lo, err)) < 0 ||
                (has_hi = get_int(root, "prompt_lookup_max", 1, 1 << 16, &hi, err)) < 0))
        rc = -1;
    if (!rc && o->method == LOOM_SPEC_NGRAM) {
        o->prompt_lookup_min = has_lo ? lo : has_hi ? hi : NGRAM_DEFAULT;
        o->prompt_lookup_max = has_hi ? hi : has_lo ? lo : NGRAM_DEFAULT;
        if (o->prompt_lookup_min > o->prompt_lookup_max)
            rc = loom_errf(err, "--speculative-config: prompt_lookup_min %d is above prompt_lookup_max %d",
                           o->prompt_lookup_min, o->prompt_lookup_max);
    } else if (!rc && (has_lo || has_hi))
        rc = loom_errf(err, "--speculative-config: prompt_lookup_min/max apply to method ngram, not %s", m);
    if (!rc && (o->method == LOOM_SPEC_DRAFT_MODEL || o->method == LOOM_SPEC_EAGLE3)) {
        if (!model) rc = loom_errf(err, "--speculative-config: method %s needs the draft's \"model\" folder", m);
        else if (strlen(model->valuestring) >= sizeof o->model)
            rc = loom_errf(err, "--speculative-config: \"model\" path longer than %zu bytes", sizeof o->model - 1);
        else strcpy(o->model, model->valuestring);
        if (!rc && get_int(root, "draft_tensor_parallel_size", 1, 256, &o->draft_tensor_parallel_size, err) < 0)
            rc = -1;
    } else if (!rc && cJSON_GetObjectItemCaseSensitive(root, "draft_tensor_parallel_size"))
        rc = loom_errf(err, "--speculative-config: draft_tensor_parallel_size applies to a draft model");
    cJSON_Delete(root);
    return rc;
}

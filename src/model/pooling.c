/* An embedding model's pooling, as sentence-transformers declares it beside the weights:
 * modules.json lists the pipeline (Transformer, Pooling, Normalize), and the Pooling module's
 * config.json names its mode. loom pools the last token's state (Qwen3-Embedding's
 * pooling_mode_lasttoken) or the mean over the prompt's tokens (pooling_mode_mean_tokens), then
 * L2-normalises when a Normalize module follows. A folder without these files gets vLLM's
 * default for decoder models: the last token, normalised. */
#include "model/pooling.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "util/file.h"

/* The Pooling module's mode from its config.json. */
static int read_mode(const char *path, pooling_config *p, loom_err *err) {
    size_t len;
    char *text = file_read_all(path, &len, err);
    if (!text) return -1;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return loom_errf(err, "%s: not a JSON object", path);
    }
    static const char *const unsupported[] = {"pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
                                              "pooling_mode_weightedmean_tokens", "pooling_mode_cls_token"};
    int rc = 0;
    for (size_t i = 0; i < sizeof unsupported / sizeof *unsupported && !rc; i++)
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, unsupported[i])))
            rc = loom_errf(err, "%s: %s is not supported (last-token and mean pooling are)", path, unsupported[i]);
    bool last = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "pooling_mode_lasttoken")),
         mean = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "pooling_mode_mean_tokens"));
    if (!rc && last == mean)
        rc =
            loom_errf(err, "%s: exactly one of pooling_mode_lasttoken and pooling_mode_mean_tokens must be true", path);
    p->mode = last ? LOOM_POOL_LAST : LOOM_POOL_MEAN;
    cJSON_Delete(root);
    return rc;
}

int pooling_config_read(const char *dir, pooling_config *p, loom_err *err) {
    *p = (pooling_config){.mode = LOOM_POOL_LAST, .normalize = true};
    char path[4200];
    snprintf(path, sizeof path, "%s/modules.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    fclose(f);
    size_t len;
    char *text = file_read_all(path, &len, err);
    if (!text) return -1;
    cJSON *root = cJSON_ParseWithLength(text, len), *m;
    free(text);
    if (!cJSON_IsArray(root)) {
        cJSON_Delete(root);
        return loom_errf(err, "%s: not a JSON array of modules", path);
    }
    int rc = 0;
    bool pooling = false;
    p->normalize = false;
    cJSON_ArrayForEach(m, root) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(m, "type"),
                    *sub = cJSON_GetObjectItemCaseSensitive(m, "path");
        const char *t = cJSON_IsString(type) ? type->valuestring : "";
        if (!strcmp(t, "sentence_transformers.models.Transformer")) continue;
        if (!strcmp(t, "sentence_transformers.models.Normalize")) {
            p->normalize = true;
        } else if (!strcmp(t, "sentence_transformers.models.Pooling") && cJSON_IsString(sub)) {
            char sub_path[4400];
            snprintf(sub_path, sizeof sub_path, "%s/%s/config.json", dir, sub->valuestring);
            if ((rc = read_mode(sub_path, p, err))) break;
            pooling = true;
        } else {
            rc = loom_errf(err, "%s: module '%.100s' is not supported (Transformer, Pooling, Normalize are)", path,
                           t[0] ? t : "(no type)");
            break;
        }
    }
    cJSON_Delete(root);
    if (!rc && !pooling) return loom_errf(err, "%s: lists no sentence_transformers.models.Pooling module", path);
    p->declared = !rc;
    return rc;
}

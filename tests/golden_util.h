/* Reading the golden files written by tests/golden/make_golden.py: token ids, HF logits and
 * the metadata that says how the C engine must feed them. */
#ifndef LOOM_TESTS_GOLDEN_UTIL_H
#define LOOM_TESTS_GOLDEN_UTIL_H
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/safetensors.h"

typedef struct golden {
    st_file f;
    int n[2], prefill[2], decode_steps, vocab;
    int32_t *ids[2];
    const float *logits[2];
} golden;

static int golden_meta_int(const st_file *f, const char *key) {
    cJSON *m = cJSON_Parse(f->metadata ? f->metadata : "{}");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, key);
    int r = cJSON_IsString(v) ? atoi(v->valuestring) : -1;
    cJSON_Delete(m);
    return r;
}

static int golden_open(golden *g, const char *dir, const char *logits_prefix) {
    char path[1100];
    loom_err err;
    snprintf(path, sizeof path, "%s/golden.safetensors", dir);
    if (st_open(&g->f, path, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    g->decode_steps = golden_meta_int(&g->f, "decode_steps");
    for (int s = 0; s < 2; s++) {
        char name[64];
        snprintf(name, sizeof name, "prefill_%d", s);
        g->prefill[s] = golden_meta_int(&g->f, name);
        snprintf(name, sizeof name, "ids_%d", s);
        const st_tensor *ids = st_find(&g->f, name);
        snprintf(name, sizeof name, "%s_%d", logits_prefix, s);
        const st_tensor *lg = st_find(&g->f, name);
        if (!ids || !lg || ids->dtype != DT_I64 || lg->dtype != DT_F32 || lg->ndim != 2) return -1;
        g->n[s] = (int)ids->shape[0];
        g->vocab = (int)lg->shape[1];
        g->ids[s] = malloc(g->n[s] * sizeof(int32_t));
        for (int i = 0; i < g->n[s]; i++) {
            int64_t v;
            memcpy(&v, (const char *)ids->data + 8 * i, 8);
            g->ids[s][i] = (int32_t)v;
        }
        g->logits[s] = lg->data;
    }
    return 0;
}

static void golden_close(golden *g) {
    free(g->ids[0]);
    free(g->ids[1]);
    st_close(&g->f);
}
#endif

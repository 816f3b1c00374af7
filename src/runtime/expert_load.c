/* Expert load profiles (loom_expert_load): the tokens each expert of each mixture-of-experts
 * layer was routed, summed over the ranks of an expert-parallel run (loom_engine_expert_load),
 * written to and read from a JSON file, so that a later run places its experts by them
 * (plan/placement.c). The file:
 *   {"format": "loom-expert-load", "n_experts": 64,
 *    "layers": {"model.layers.0.mlp": [412, 0, 37, ...], ...}}
 * A file names its layers by module, so a profile taken at one rank count places experts at
 * any other. The reader takes untrusted input: every field is checked and named in errors. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/expert_load.h"

#include "plan/placement.h"
#include "runtime/engine.h"
#include "util/alloc.h"
#include "util/file.h"

#define FORMAT "loom-expert-load"

void loom_expert_load_free(loom_expert_load *l) {
    if (!l) return;
    for (int i = 0; l->names && i < l->n_layers; i++) free(l->names[i]);
    free(l->names);
    free(l->count);
    free(l);
}

/* A profile of n layers of e experts, counts zero; NULL when out of memory. */
static loom_expert_load *profile_new(int n, int e, loom_err *err) {
    loom_expert_load *l = mem_zalloc(1, sizeof *l, "an expert load profile", err);
    if (l && (!(l->names = mem_zalloc(n ? n : 1, sizeof *l->names, "an expert load profile", err)) ||
              !(l->count = mem_zalloc((size_t)(n ? n : 1) * e, sizeof *l->count, "an expert load profile", err)))) {
        loom_expert_load_free(l);
        return NULL;
    }
    if (l) l->n_layers = n, l->n_experts = e;
    return l;
}

loom_expert_load *loom_expert_load_read(const char *path, loom_err *err) {
    size_t len;
    char *text = file_read_all(path, &len, err);
    if (!text) return NULL;
    loom_expert_load *l = expert_load_parse(text, len, path, err);
    free(text);
    return l;
}

loom_expert_load *expert_load_parse(const char *text, size_t len, const char *path, loom_err *err) {
    cJSON *root = cJSON_ParseWithLength(text, len);
    loom_expert_load *l = NULL;
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(root, "format"),
                *experts = cJSON_GetObjectItemCaseSensitive(root, "n_experts"),
                *layers = cJSON_GetObjectItemCaseSensitive(root, "layers");
    if (!root) loom_errf(err, "%s: not valid JSON", path);
    else if (!cJSON_IsString(format) || strcmp(format->valuestring, FORMAT))
        loom_errf(err, "%s: \"format\" is not \"%s\" (an expert load profile from loom bench latency)", path, FORMAT);
    else if (!cJSON_IsNumber(experts) || experts->valuedouble < 1 || experts->valuedouble > 1 << 16 ||
             experts->valuedouble != (int)experts->valuedouble)
        loom_errf(err, "%s: \"n_experts\" must be a whole number from 1 to 65536", path);
    else if (!cJSON_IsObject(layers) || !layers->child)
        loom_errf(err, "%s: \"layers\" must be an object of at least one layer", path);
    else if ((l = profile_new(cJSON_GetArraySize(layers), experts->valueint, err))) {
        int i = 0;
        const cJSON *layer;
        cJSON_ArrayForEach(layer, layers) {
            if (!cJSON_IsArray(layer) || cJSON_GetArraySize(layer) != l->n_experts) {
                loom_errf(err, "%s: layer \"%s\" must be an array of %d counts", path, layer->string, l->n_experts);
                break;
            }
            for (int j = 0; i < l->n_layers && j < i; j++)
                if (!strcmp(l->names[j], layer->string)) {
                    loom_errf(err, "%s: layer \"%s\" appears twice", path, layer->string);
                    goto fail;
                }
            int e = 0;
            const cJSON *c;
            cJSON_ArrayForEach(c, layer) {
                if (!cJSON_IsNumber(c) || !(c->valuedouble >= 0) || c->valuedouble > 1e18) {
                    loom_errf(err, "%s: layer \"%s\", expert %d: a count must be a number from 0", path, layer->string,
                              e);
                    goto fail;
                }
                l->count[(size_t)i * l->n_experts + e++] = c->valuedouble;
            }
            if (!(l->names[i++] = mem_strdup(layer->string, "an expert load profile", err))) goto fail;
        }
        if (i == l->n_layers) {
            cJSON_Delete(root);
            return l;
        }
    }
fail:
    loom_expert_load_free(l);
    cJSON_Delete(root);
    return NULL;
}

int loom_expert_load_write(const loom_expert_load *l, const char *path, loom_err *err) {
    FILE *f = fopen(path, "w");
    if (!f) return loom_errf(err, "%s: cannot write", path);
    fprintf(f, "{\"format\": \"%s\", \"n_experts\": %d, \"layers\": {", FORMAT, l->n_experts);
    for (int i = 0; i < l->n_layers; i++) {
        fprintf(f, "%s\n  \"%s\": [", i ? "," : "", l->names[i]);
        for (int e = 0; e < l->n_experts; e++)
            fprintf(f, "%s%.0f", e ? ", " : "", l->count[(size_t)i * l->n_experts + e]);
        fputc(']', f);
    }
    fprintf(f, "\n}}\n");
    return fclose(f) ? loom_errf(err, "%s: cannot write", path) : 0;
}

loom_expert_load *loom_engine_expert_load(loom_engine *e, loom_err *err) {
    const expert_parallel *x = &e->x.ep;
    if (!x->n_layers)
        return loom_errf(err, "no expert load to report: the engine runs no expert-parallel layers "
                              "(--enable-expert-parallel)"),
               NULL;
    const plan *p = &e->x.plans[0].p;
    int w = x->load_width, n = e->x.ep_comm->size;
    for (int i = 0; i < p->n_steps; i++)
        if (p->steps[i].kind == STEP_EP_MOE && p->steps[i].op->moe->n_experts != w)
            return loom_errf(err, "the mixture-of-experts layers have different numbers of experts"), NULL;
    loom_expert_load *l = profile_new(x->n_layers, w, err);
    float *mine = l ? mem_array((size_t)x->n_layers * w, sizeof *mine, "an expert load profile", err) : NULL;
    float *all = mine ? mem_array((size_t)x->n_layers * w * n, sizeof *all, "an expert load profile", err) : NULL;
    int rc = all ? 0 : -1;
    for (size_t i = 0; !rc && i < (size_t)x->n_layers * w; i++) mine[i] = (float)x->load[i];
    /* every rank of the stage's experts' group routed its own tokens: their sum is the stage's */
    if (!rc) rc = loom_comm_all_gather(e->x.ep_comm, mine, x->n_layers * w, all, err);
    for (size_t i = 0; !rc && i < (size_t)x->n_layers * w; i++)
        for (int r = 0; r < n; r++) l->count[i] += all[(size_t)r * x->n_layers * w + i];
    for (int i = 0, k = 0; !rc && i < p->n_steps; i++)
        if (p->steps[i].kind == STEP_EP_MOE && !(l->names[k++] = mem_strdup(p->steps[i].mod->name, "a name", err)))
            rc = -1;
    free(mine);
    free(all);
    if (!rc) return l;
    loom_expert_load_free(l);
    return NULL;
}

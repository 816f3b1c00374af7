/* safetensors parsing (see safetensors.h). The header is untrusted input: every number is
 * range-checked before it is used as a size or an offset (fuzzed by fuzz/fuzz_safetensors.c). */
#include "model/safetensors.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "util/alloc.h"
#include "util/err.h"

#define MAX_HEADER (100u << 20) /* the format's own limit */

static int by_name(const void *a, const void *b) {
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

typedef struct {
    size_t begin, end, index;
} span;

static int by_begin(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static int parse_tensor(st_tensor *t, const cJSON *e, const uint8_t *data, size_t data_size, const char *fname,
                        loom_err *err) {
    const char *n = e->string;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsObject(e)) return loom_errf(err, "%s: tensor '%s': entry is not an object", fname, n);
    if (!cJSON_IsString(dt)) return loom_errf(err, "%s: tensor '%s': missing 'dtype'", fname, n);
    if (!dtype_from_name(dt->valuestring, &t->dtype))
        return loom_errf(err, "%s: tensor '%s': unsupported dtype '%s'", fname, n, dt->valuestring);
    if (!cJSON_IsArray(shape)) return loom_errf(err, "%s: tensor '%s': missing 'shape'", fname, n);
    int nd = cJSON_GetArraySize(shape);
    if (nd > ST_MAX_DIMS) return loom_errf(err, "%s: tensor '%s': %d dimensions (max %d)", fname, n, nd, ST_MAX_DIMS);
    t->ndim = nd;
    /* numel * size must fit; dims bounded by the data section so the product cannot overflow
     * unnoticed: check after each multiplication. */
    size_t bytes = dtype_size(t->dtype);
    const cJSON *d;
    int i = 0;
    cJSON_ArrayForEach(d, shape) {
        if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > (double)data_size ||
            d->valuedouble != (double)(int64_t)d->valuedouble)
            return loom_errf(err, "%s: tensor '%s': bad shape entry", fname, n);
        t->shape[i] = (int64_t)d->valuedouble;
        if (t->shape[i] && bytes > data_size / (size_t)t->shape[i]) bytes = SIZE_MAX;
        else bytes *= (size_t)t->shape[i];
        i++;
    }
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
        return loom_errf(err, "%s: tensor '%s': missing 'data_offsets'", fname, n);
    const cJSON *b = cJSON_GetArrayItem(offs, 0), *en = cJSON_GetArrayItem(offs, 1);
    if (!cJSON_IsNumber(b) || !cJSON_IsNumber(en) || b->valuedouble < 0 || en->valuedouble < b->valuedouble ||
        en->valuedouble > (double)data_size || b->valuedouble != (double)(size_t)b->valuedouble ||
        en->valuedouble != (double)(size_t)en->valuedouble)
        return loom_errf(err, "%s: tensor '%s': data_offsets outside the file's %zu data bytes", fname, n, data_size);
    size_t begin = (size_t)b->valuedouble, end = (size_t)en->valuedouble;
    if (end - begin != bytes)
        return loom_errf(err, "%s: tensor '%s': shape x dtype is %zu bytes but data_offsets span %zu", fname, n, bytes,
                         end - begin);
    t->nbytes = bytes;
    t->data = data + begin;
    return 0;
}

static int check_overlap(st_file *f, const uint8_t *data, loom_err *err) {
    span *s = mem_array(f->n + 1, sizeof *s, "the tensors' spans", err);
    if (!s) return loom_err_prefix(err, "%s", f->name);
    for (size_t i = 0; i < f->n; i++) {
        s[i].begin = (size_t)((const uint8_t *)f->tensors[i].data - data);
        s[i].end = s[i].begin + f->tensors[i].nbytes;
        s[i].index = i;
    }
    qsort(s, f->n, sizeof *s, by_begin);
    int rc = 0;
    for (size_t i = 1; i < f->n && !rc; i++)
        if (s[i].begin < s[i - 1].end && s[i].end > s[i].begin)
            rc = loom_errf(err, "%s: tensors '%s' and '%s' overlap", f->name, f->tensors[s[i - 1].index].name,
                           f->tensors[s[i].index].name);
    free(s);
    return rc;
}

int st_parse(st_file *f, const void *buf, size_t size, const char *name, loom_err *err) {
    memset(f, 0, sizeof *f);
    if (!(f->name = mem_strdup(name, "the file's name", err))) {
        loom_err_prefix(err, "%s", name);
        goto fail;
    }
    const uint8_t *p = buf;
    if (size < 8) {
        loom_errf(err, "%s: too short for a safetensors header (%zu bytes)", name, size);
        goto fail;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | p[i];
    if (hlen < 2 || hlen > MAX_HEADER || hlen > size - 8) {
        loom_errf(err, "%s: header length %llu is invalid for a %zu-byte file", name, (unsigned long long)hlen, size);
        goto fail;
    }
    cJSON *root = cJSON_ParseWithLength((const char *)p + 8, (size_t)hlen);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        loom_errf(err, "%s: header is not a JSON object", name);
        goto fail;
    }
    const uint8_t *data = p + 8 + hlen;
    size_t data_size = size - 8 - (size_t)hlen;
    size_t cap = (size_t)cJSON_GetArraySize(root);
    const cJSON *e;
    int rc = 0;
    if (!(f->tensors = mem_zalloc(cap, sizeof *f->tensors, "the tensor index", err)))
        rc = loom_err_prefix(err, "%s", name);
    cJSON_ArrayForEach(e, root) {
        if (rc) break;
        if (!strcmp(e->string, "__metadata__")) {
            if (!cJSON_IsObject(e)) {
                rc = loom_errf(err, "%s: '__metadata__' is not an object", name);
                break;
            }
            free(f->metadata); /* a repeated key: JSON keeps the last */
            if (!(f->metadata = cJSON_PrintUnformatted(e))) rc = loom_errf(err, "%s: cannot copy '__metadata__'", name);
            continue;
        }
        st_tensor *t = &f->tensors[f->n];
        if ((rc = parse_tensor(t, e, data, data_size, name, err))) break;
        if (!(t->name = mem_strdup(e->string, "a tensor's name", err))) {
            rc = loom_err_prefix(err, "%s", name);
            break;
        }
        f->n++;
    }
    cJSON_Delete(root);
    if (rc) goto fail;
    qsort(f->tensors, f->n, sizeof *f->tensors, by_name);
    for (size_t i = 1; i < f->n; i++)
        if (!strcmp(f->tensors[i].name, f->tensors[i - 1].name)) {
            loom_errf(err, "%s: tensor '%s' appears twice", name, f->tensors[i].name);
            goto fail;
        }
    if (check_overlap(f, data, err)) goto fail;
    return 0;
fail:
    st_close(f);
    return -1;
}

int st_open(st_file *f, const char *path, loom_err *err) {
    file_map m;
    if (file_map_open(&m, path, err)) return -1;
    if (st_parse(f, m.data, m.size, path, err)) {
        file_map_close(&m);
        return -1;
    }
    f->map = m;
    return 0;
}

void st_close(st_file *f) {
    for (size_t i = 0; i < f->n; i++) free(f->tensors[i].name);
    free(f->tensors);
    free(f->metadata);
    free(f->name);
    file_map_close(&f->map);
    memset(f, 0, sizeof *f);
}

const st_tensor *st_find(const st_file *f, const char *name) {
    st_tensor key = {.name = (char *)name};
    return f->n ? bsearch(&key, f->tensors, f->n, sizeof key, by_name) : NULL;
}

int64_t st_numel(const st_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* Weight lookup, validation against the shapes the model expects, dtype policy, and dummy
 * generation (see weights.h). */
#include "model/weights.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "tensor/gguf_blocks.h"
#include "tensor/half.h"
#include "util/alloc.h"
#include "util/err.h"
#include "util/file.h"

int weights_add_file(weight_store *w, st_file *f, loom_err *err) {
    bool *used = mem_zalloc(f->n, sizeof *used, "the tensors' marks", err);
    if (!used || ARRAY_RESERVE(w->files, w->cap_files, (size_t)w->n_files + 1, "the list of weight files", err) ||
        ARRAY_RESERVE(w->used, w->cap_used, (size_t)w->n_files + 1, "the list of weight files", err)) {
        free(used);
        st_close(f);
        return -1;
    }
    w->files[w->n_files] = *f;
    w->used[w->n_files++] = used;
    return 0;
}

/* Sharded checkpoints: the index names each tensor's file; open every file it mentions once. */
static int open_index(weight_store *w, const char *dir, const char *index_path, loom_err *err) {
    size_t len;
    char *text = file_read_all(index_path, &len, err);
    if (!text) return -1;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(map)) {
        cJSON_Delete(root);
        return loom_errf(err, "%s: missing object 'weight_map'", index_path);
    }
    int rc = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, map) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/')) {
            rc = loom_errf(err, "%s: weight_map entry '%s' must name a file in the folder", index_path, e->string);
            break;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->valuestring);
        bool seen = false;
        for (int i = 0; i < w->n_files && !seen; i++) seen = !strcmp(w->files[i].name, path);
        if (seen) continue;
        st_file f;
        if ((rc = st_open(&f, path, err)) || (rc = weights_add_file(w, &f, err))) break;
    }
    /* every tensor the index lists must be in the file it names */
    cJSON_ArrayForEach(e, map) {
        if (rc) break;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->valuestring);
        for (int i = 0; i < w->n_files; i++)
            if (!strcmp(w->files[i].name, path) && !st_find(&w->files[i], e->string))
                rc = loom_errf(err, "%s: tensor '%s' is listed for %s but not in it", index_path, e->string, path);
    }
    cJSON_Delete(root);
    return rc;
}

/* The folder's files (one, or those its index names) join the store's. */
static int add_dir(weight_store *w, const char *dir, loom_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(path, "rb");
    int rc;
    if (f) {
        fclose(f);
        rc = open_index(w, dir, path, err);
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        st_file sf;
        rc = st_open(&sf, path, err);
        if (!rc) rc = weights_add_file(w, &sf, err);
    }
    return rc;
}

int weights_open_dir(weight_store *w, const char *dir, loom_err *err) {
    memset(w, 0, sizeof *w);
    if (strlen(dir) >= sizeof w->dir) return loom_errf(err, "%s: the path is too long", dir);
    snprintf(w->dir, sizeof w->dir, "%s", dir);
    int rc = add_dir(w, dir, err);
    if (rc) weights_close(w);
    return rc;
}

int weights_borrow_dir(weight_store *w, const char *dir, loom_err *err) {
    int first = w->n_files;
    if (add_dir(w, dir, err)) return -1;
    for (int i = first; i < w->n_files; i++) /* what the model does not read of them is not its own */
        for (size_t t = 0; t < w->files[i].n; t++) w->used[i][t] = true;
    return 0;
}

int weights_open_image(weight_store *w, const void *buf, size_t size, const char *name, loom_err *err) {
    memset(w, 0, sizeof *w);
    snprintf(w->dir, sizeof w->dir, "%s", name);
    st_file f;
    if (st_parse(&f, buf, size, name, err) || weights_add_file(w, &f, err)) {
        weights_close(w);
        return -1;
    }
    return 0;
}

void weights_init_dummy(weight_store *w, uint64_t seed) {
    memset(w, 0, sizeof *w);
    snprintf(w->dir, sizeof w->dir, "(dummy weights)");
    w->dummy = true;
    w->seed = seed;
}

void weights_close(weight_store *w) {
    for (int i = 0; i < w->n_files; i++) {
        st_close(&w->files[i]);
        free(w->used[i]);
    }
    for (int i = 0; i < w->n_owned; i++) free(w->owned[i]);
    free(w->files);
    free(w->used);
    free(w->owned);
    free(w->dummies);
    free(w->made);
    memset(w, 0, sizeof *w);
}

void *weights_buffer(weight_store *w, size_t bytes, const char *what, loom_err *err) {
    if (ARRAY_RESERVE(w->owned, w->cap_owned, (size_t)w->n_owned + 1, "the list of weight buffers", err)) return NULL;
    /* Large tensors go on 2 MiB pages where the kernel allows it (THP "madvise"): decode
     * streams every weight once per token, and 4 KiB pages cost a TLB miss per page. Only the
     * whole 2 MiB pages: a tail page would hold 2 MiB for what is left over (GPT-OSS-20B's
     * MXFP4 experts, 4.4 MB a matrix, took 4 GB more that way). */
    const size_t huge = (size_t)2 << 20;
    size_t align = bytes >= huge ? huge : 64;
    void *p = mem_aligned_to(align, bytes, what, err);
    if (!p) return NULL;
    if (align == huge) madvise(p, bytes / huge * huge, MADV_HUGEPAGE);
    w->owned[w->n_owned++] = p;
    w->bytes_owned += bytes;
    return p;
}

static uint64_t splitmix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t name_hash(const char *s, uint64_t seed) {
    uint64_t h = 1469598103934665603ull ^ seed;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Dummy value at (r, c) of the full tensor: independent of the slice asked for, so every
 * tensor-parallel split of a dummy model holds pieces of the same model. */
static float dummy_value(uint64_t key, size_t idx, float scale) {
    uint64_t x = splitmix(key + idx);
    return scale * ((float)(x >> 40) * (2.0f / 16777216.0f) - 1.0f);
}

struct dummy_entry {
    uint64_t key;
    int r0, nr, c0, nc;
    bool f32;
    const void *data;
};

/* Rows [r0, r0+nr) x columns [c0, c0+nc) of the dummy tensor `key` as f32 */
static void dummy_f32(uint64_t key, int cols, int r0, int nr, int c0, int nc, float init, float *p) {
    size_t full_cols = cols ? cols : 1;
#pragma omp parallel for
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++)
            p[(size_t)r * nc + c] = init < 0 ? 1.0f : dummy_value(key, (size_t)(r0 + r) * full_cols + c0 + c, init);
}

static int fill_dummy(weight_store *w, const char *name, int cols, int r0, int nr, int c0, int nc, bool f32, float init,
                      wmat *out, loom_err *err) {
    size_t n = (size_t)nr * nc, full_cols = cols ? cols : 1;
    uint64_t key = name_hash(name, w->seed);
    out->dt = f32 ? DT_F32 : DT_BF16;
    out->ld = nc;
    for (int i = 0; i < w->n_dummies; i++) {
        const struct dummy_entry *d = &w->dummies[i];
        if (d->key == key && d->r0 == r0 && d->nr == nr && d->c0 == c0 && d->nc == nc && d->f32 == f32) {
            out->data = d->data;
            return 0;
        }
    }
    if (ARRAY_RESERVE(w->dummies, w->cap_dummies, (size_t)w->n_dummies + 1, "the list of dummy tensors", err))
        return -1;
    void *data = weights_buffer(w, n * (f32 ? 4 : 2), "a dummy tensor", err);
    if (!data) return loom_err_prefix(err, "%s", name);
    if (f32) {
        dummy_f32(key, cols, r0, nr, c0, nc, init, data);
    } else {
        uint16_t *p = data;
#pragma omp parallel for
        for (int r = 0; r < nr; r++)
            for (int c = 0; c < nc; c++)
                p[(size_t)r * nc + c] = f32_to_bf16(dummy_value(key, (size_t)(r0 + r) * full_cols + c0 + c, init));
    }
    out->data = data;
    w->dummies[w->n_dummies++] = (struct dummy_entry){key, r0, nr, c0, nc, f32, out->data};
    return 0;
}

/* What checkpoints put in place of the module tree's "model.": Mamba-2's and Nemotron-H's
 * "backbone.", a vision-language model's text model's "model.language_model." (Qwen3.5's) or
 * "language_model.model." (Gemma 3's). */
static const char *const model_aliases[] = {"backbone.", "model.language_model.", "language_model.model."};
#define N_ALIASES (int)(sizeof model_aliases / sizeof *model_aliases)

const char *weights_tree_name(const char *file_name, char *buf, size_t cap) {
    for (int a = 0; a < N_ALIASES; a++) {
        size_t n = strlen(model_aliases[a]);
        if (!strncmp(file_name, model_aliases[a], n)) {
            snprintf(buf, cap, "model.%s", file_name + n);
            return buf;
        }
    }
    return file_name;
}

/* Tensor `name` in any file (its index into *file_index), under the name itself or, for a
 * "model." name, without the prefix (a bare decoder saved alone, as embedding models are) or
 * under one of model_aliases. */
static const st_tensor *lookup(const weight_store *w, const char *name, int *file_index) {
    char forms[2 + N_ALIASES][176];
    int n = 1;
    snprintf(forms[0], sizeof forms[0], "%s", name);
    if (!strncmp(name, "model.", 6)) {
        snprintf(forms[n++], sizeof forms[0], "%s", name + 6);
        for (int a = 0; a < N_ALIASES; a++) snprintf(forms[n++], sizeof forms[0], "%s%s", model_aliases[a], name + 6);
    }
    for (int f = 0; f < n; f++)
        for (int i = 0; i < w->n_files; i++) {
            const st_tensor *t = st_find(&w->files[i], forms[f]);
            if (t) {
                *file_index = i;
                return t;
            }
        }
    return NULL;
}

/* Tensor `name`, marked used. */
static const st_tensor *find(weight_store *w, const char *name, const char **file) {
    int i;
    const st_tensor *t = lookup(w, name, &i);
    if (t) {
        w->used[i][t - w->files[i].tensors] = true;
        *file = w->files[i].name;
    }
    return t;
}

/* Tensor `name`, nothing marked used. */
static const st_tensor *peek(const weight_store *w, const char *name) {
    int i;
    return lookup(w, name, &i);
}

int weights_gguf_type(const void *store, const char *name) {
    const st_tensor *t = peek(store, name);
    return t ? t->gtype : 0;
}

bool weights_has(const weight_store *w, const char *name) { return peek(w, name) != NULL; }

const st_tensor *weights_tensor(weight_store *w, const char *name, const char **file) {
    const char *f;
    return find(w, name, file ? file : &f);
}

static bool aligned(const void *p, size_t a) { return (uintptr_t)p % a == 0; }

/* Tensor `name`, which must have the ndim dimensions `shape` and a float dtype. */
static const st_tensor *locate(weight_store *w, const char *name, int ndim, const int *shape, const char **file,
                               loom_err *err) {
    const st_tensor *t = find(w, name, file);
    if (!t) {
        loom_errf(err, "%s: missing tensor '%s'", w->dir, name);
        return NULL;
    }
    bool shape_ok = t->ndim == ndim;
    for (int i = 0; i < ndim && shape_ok; i++) shape_ok = t->shape[i] == shape[i];
    if (!shape_ok) {
        char got[128] = "", want[128] = "";
        for (int i = 0; i < t->ndim; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        for (int i = 0; i < ndim; i++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%d", i ? ", " : "", shape[i]);
        loom_errf(err, "%s: tensor '%s' has shape [%s], expected [%s]", *file, name, got, want);
        return NULL;
    }
    if (t->gtype) {
        loom_errf(err, "%s: tensor '%s' is stored as %s blocks, which only a linear layer reads", *file, name,
                  gtype_table[t->gtype].name);
        return NULL;
    }
    if (t->dtype != DT_F32 && t->dtype != DT_BF16 && t->dtype != DT_F16) {
        loom_errf(err, "%s: tensor '%s' has dtype %s (supported: F32, F16, BF16)", *file, name, dtype_name(t->dtype));
        return NULL;
    }
    return t;
}

/* Element i of a float tensor's row as f32 (exact for every float dtype it holds). */
static float elem(const uint8_t *row, enum dtype dt, int i) {
    uint16_t h;
    float f;
    if (dt == DT_F32) {
        memcpy(&f, row + (size_t)i * 4, 4);
        return f;
    }
    memcpy(&h, row + (size_t)i * 2, 2);
    return dt == DT_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

int weights_read_f32(weight_store *w, const char *name, int ndim, const int *shape, int cols, int r0, int nr, int c0,
                     int nc, float init, float *dst, loom_err *err) {
    if (w->dummy) {
        dummy_f32(name_hash(name, w->seed), cols, r0, nr, c0, nc, init, dst);
        return 0;
    }
    const char *file;
    const st_tensor *t = locate(w, name, ndim, shape, &file, err);
    if (!t) return -1;
    size_t ld = cols ? (size_t)cols : 1, es = dtype_size(t->dtype);
    const uint8_t *src = (const uint8_t *)t->data + ((size_t)r0 * ld + c0) * es;
#pragma omp parallel for
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) dst[(size_t)r * nc + c] = elem(src + (size_t)r * ld * es, t->dtype, c);
    return 0;
}

bool weights_made_find(const weight_store *w, const char *name, int r0, int nr, int c0, int nc, bool quantized,
                       enum dtype dt, wmat *out) {
    for (int i = 0; i < w->n_made; i++) {
        const wmat_made *m = &w->made[i];
        if ((m->w.q != NULL) == quantized && (quantized || m->w.dt == dt) && m->r0 == r0 && m->nr == nr &&
            m->c0 == c0 && m->nc == nc && !strcmp(m->name, name)) {
            *out = m->w;
            return true;
        }
    }
    return false;
}

int weights_made_keep(weight_store *w, const char *name, int r0, int nr, int c0, int nc, const wmat *m, loom_err *err) {
    if (ARRAY_RESERVE(w->made, w->cap_made, (size_t)w->n_made + 1, "the list of matrices made at load", err)) return -1;
    wmat_made *k = &w->made[w->n_made++];
    *k = (wmat_made){.r0 = r0, .nr = nr, .c0 = c0, .nc = nc, .w = *m};
    snprintf(k->name, sizeof k->name, "%s", name);
    return 0;
}

/* Fetches rows [r0, r0+nr) x columns [c0, c0+nc) of tensor `name`, which must have the ndim
 * dimensions `shape`, read as a [rows, cols] matrix (rows: the leading dimensions together). */
static int fetch(weight_store *w, const char *name, int ndim, const int *shape, int cols, int r0, int nr, int c0,
                 int nc, bool as_f32, float init, wmat *out, loom_err *err) {
    *out = (wmat){.rows = nr, .cols = nc};
    bool keep_bf16 = !as_f32 && w->keep == WDT_BF16;
    if (w->dummy) return fill_dummy(w, name, cols, r0, nr, c0, nc, !keep_bf16, init, out, err);

    const char *file;
    const st_tensor *t = locate(w, name, ndim, shape, &file, err);
    if (!t) return -1;
    size_t ld = cols ? (size_t)cols : 1, es = dtype_size(t->dtype);
    const uint8_t *src = (const uint8_t *)t->data + ((size_t)r0 * ld + c0) * es;
    /* Use the mapping in place when the kernels can read it as is. */
    bool in_place =
        (t->dtype == DT_F32 && !keep_bf16 && aligned(src, 4)) || (t->dtype == DT_BF16 && !as_f32 && aligned(src, 2));
    if (in_place) {
        out->dt = t->dtype;
        out->ld = ld;
        out->data = src;
        w->bytes_mapped_used += (size_t)nr * nc * es;
        return 0;
    }
    out->ld = nc;
    out->dt = keep_bf16 ? DT_BF16 : DT_F32;
    if (weights_made_find(w, name, r0, nr, c0, nc, false, out->dt, out)) return 0;
    void *dst = weights_buffer(w, (size_t)nr * nc * (keep_bf16 ? 2 : 4), "a converted tensor", err);
    if (!dst) return loom_err_prefix(err, "%s: tensor '%s'", file, name);
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) {
            float f = elem(src + (size_t)r * ld * es, t->dtype, c);
            if (keep_bf16) ((uint16_t *)dst)[(size_t)r * nc + c] = f32_to_bf16(f);
            else ((float *)dst)[(size_t)r * nc + c] = f;
        }
    out->data = dst;
    return weights_made_keep(w, name, r0, nr, c0, nc, out, err);
}

int weights_get(weight_store *w, const char *name, int rows, int cols, int r0, int nr, int c0, int nc, bool as_f32,
                float init, wmat *out, loom_err *err) {
    int shape[2] = {rows, cols};
    return fetch(w, name, cols ? 2 : 1, shape, cols, r0, nr ? nr : rows, c0,
                 nc     ? nc
                 : cols ? cols
                        : 1,
                 as_f32, init, out, err);
}

int weights_get_stacked_f32(weight_store *w, const char *name, const int shape[3], int r0, int nr, float init,
                            wmat *out, loom_err *err) {
    return fetch(w, name, 3, shape, shape[2], r0, nr, 0, shape[2], true, init, out, err);
}

int weights_get_expert(weight_store *w, const char *name, int n_experts, int expert, int rows, int cols, int r0, int nr,
                       int c0, int nc, float init, wmat *out, loom_err *err) {
    int shape[3] = {n_experts, rows, cols};
    return fetch(w, name, 3, shape, cols, expert * rows + r0, nr ? nr : rows, c0, nc ? nc : cols, false, init, out,
                 err);
}

char **weights_unused(const weight_store *w) {
    size_t n = 0;
    for (int i = 0; i < w->n_files; i++)
        for (size_t j = 0; j < w->files[i].n; j++) n += !w->used[i][j];
    char **names = mem_array(n + 1, sizeof *names, "the unused tensors' names", NULL);
    if (!names) return NULL;
    n = 0;
    for (int i = 0; i < w->n_files; i++)
        for (size_t j = 0; j < w->files[i].n; j++)
            if (!w->used[i][j]) names[n++] = w->files[i].tensors[j].name;
    names[n] = NULL;
    return names;
}

/* GGUF parsing (see gguf.h). The file is untrusted input: a cursor walks it with every read
 * bounded by the buffer, counts are bounded by the bytes left before anything is allocated for
 * them, and each tensor's extent is checked inside the data section and against its neighbours
 * (fuzzed by fuzz/fuzz_gguf.c). Hand-written: no maintained C library reads GGUF apart from
 * ggml itself, which Debian does not package as a library. */
#include "model/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/alloc.h"
#include "util/err.h"

#define GGUF_MAGIC     "GGUF"
#define GGUF_ALIGNMENT 32 /* general.alignment's default */

typedef struct cursor {
    const uint8_t *p, *end;
    const char *name; /* the file, for messages */
    loom_err *err;
} cursor;

static const uint8_t vsize[GGUF_N_VTYPES] = {
    [GGUF_U8] = 1,  [GGUF_I8] = 1,   [GGUF_U16] = 2, [GGUF_I16] = 2, [GGUF_U32] = 4, [GGUF_I32] = 4,
    [GGUF_F32] = 4, [GGUF_BOOL] = 1, [GGUF_U64] = 8, [GGUF_I64] = 8, [GGUF_F64] = 8};

const char *gguf_vtype_name(enum gguf_vtype t) {
    static const char *const names[GGUF_N_VTYPES] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                                     "int32",  "float32", "bool",   "string", "array",
                                                     "uint64", "int64",   "float64"};
    return (unsigned)t < GGUF_N_VTYPES ? names[t] : "unknown";
}

static size_t left(const cursor *c) { return (size_t)(c->end - c->p); }

/* Takes n bytes, or fails naming `what` at its offset. */
static const uint8_t *take(cursor *c, size_t n, const uint8_t *base, const char *what) {
    if (n > left(c)) {
        loom_errf(c->err, "%s: truncated: %s at byte %zu needs %zu bytes, %zu remain", c->name, what,
                  (size_t)(c->p - base), n, left(c));
        return NULL;
    }
    const uint8_t *p = c->p;
    c->p += n;
    return p;
}

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static int read_u32(cursor *c, const uint8_t *base, const char *what, uint32_t *out) {
    const uint8_t *p = take(c, 4, base, what);
    if (!p) return -1;
    *out = (uint32_t)le(p, 4);
    return 0;
}

static int read_u64(cursor *c, const uint8_t *base, const char *what, uint64_t *out) {
    const uint8_t *p = take(c, 8, base, what);
    if (!p) return -1;
    *out = le(p, 8);
    return 0;
}

static int read_str(cursor *c, const uint8_t *base, const char *what, gguf_str *out) {
    uint64_t n;
    if (read_u64(c, base, what, &n)) return -1;
    if (n > left(c))
        return loom_errf(c->err, "%s: %s at byte %zu: a string of %llu bytes, %zu remain in the file", c->name, what,
                         (size_t)(c->p - base), (unsigned long long)n, left(c));
    out->p = (const char *)take(c, n, base, what);
    out->n = n;
    return 0;
}

/* A value of type t for key kv (its strings' table allocated here). */
static int read_value(cursor *c, const uint8_t *base, gguf_kv *kv, loom_err *err) {
    if (kv->type == GGUF_STRING) {
        if (!(kv->strs = mem_zalloc(1, sizeof *kv->strs, "a GGUF string", err))) return -1;
        kv->n = 1;
        kv->data = c->p;
        return read_str(c, base, kv->key, kv->strs);
    }
    if (kv->type != GGUF_ARRAY) {
        kv->n = 1;
        return (kv->data = take(c, vsize[kv->type], base, kv->key)) ? 0 : -1;
    }
    uint32_t elem;
    uint64_t n;
    if (read_u32(c, base, kv->key, &elem) || read_u64(c, base, kv->key, &n)) return -1;
    if (elem >= GGUF_N_VTYPES || elem == GGUF_ARRAY)
        return loom_errf(err, "%s: key '%s': an array of %s (type %u) is not supported", c->name, kv->key,
                         gguf_vtype_name(elem), elem);
    kv->elem = elem, kv->n = n, kv->data = c->p;
    if (elem != GGUF_STRING) {
        if (n > left(c) / vsize[elem])
            return loom_errf(err, "%s: key '%s': %llu items of %s run past the end of the file", c->name, kv->key,
                             (unsigned long long)n, gguf_vtype_name(elem));
        c->p += n * vsize[elem];
        return 0;
    }
    if (n > left(c) / 8) /* each string takes at least its 8-byte length */
        return loom_errf(err, "%s: key '%s': %llu strings cannot fit in the %zu bytes left", c->name, kv->key,
                         (unsigned long long)n, left(c));
    if (!(kv->strs = mem_array(n ? n : 1, sizeof *kv->strs, "a GGUF string array", err))) return -1;
    for (uint64_t i = 0; i < n; i++)
        if (read_str(c, base, kv->key, &kv->strs[i])) return -1;
    return 0;
}

static char *dup_str(gguf_str s, loom_err *err) { return mem_strndup(s.p, s.n, "a GGUF name", err); }

static int read_kvs(gguf_file *f, cursor *c, const uint8_t *base, uint64_t n, loom_err *err) {
    if (n > left(c) / 12) /* key length and value type at least */
        return loom_errf(err, "%s: %llu metadata keys cannot fit in the file", f->name, (unsigned long long)n);
    if (!(f->kv = mem_zalloc(n ? n : 1, sizeof *f->kv, "the GGUF metadata", err))) return -1;
    for (uint64_t i = 0; i < n; i++) {
        gguf_kv *kv = &f->kv[i];
        gguf_str key;
        uint32_t type;
        if (read_str(c, base, "a metadata key", &key)) return -1;
        char *name = dup_str(key, err);
        if (!name) return -1;
        bool twice = gguf_find(f, name) != NULL; /* among the keys before this one */
        kv->key = name, f->n_kv = i + 1;         /* gguf_close frees it from here on */
        if (strlen(kv->key) != key.n)
            return loom_errf(err, "%s: metadata key %llu holds a NUL byte", f->name, (unsigned long long)i + 1);
        if (twice) return loom_errf(err, "%s: key '%s' appears twice", f->name, kv->key);
        if (read_u32(c, base, kv->key, &type)) return -1;
        if (type >= GGUF_N_VTYPES)
            return loom_errf(err, "%s: key '%s' has value type %u, which GGUF does not define", f->name, kv->key, type);
        kv->type = type;
        if (read_value(c, base, kv, err)) return -1;
    }
    return 0;
}

static int read_tensor_info(gguf_file *f, cursor *c, const uint8_t *base, gguf_tensor *t, uint64_t *offset,
                            loom_err *err) {
    gguf_str name;
    uint32_t ndim, type;
    if (read_str(c, base, "a tensor name", &name) || !(t->name = dup_str(name, err))) return -1;
    if (strlen(t->name) != name.n) return loom_errf(err, "%s: a tensor name holds a NUL byte", f->name);
    if (read_u32(c, base, t->name, &ndim)) return -1;
    if (ndim < 1 || ndim > GGUF_MAX_DIMS)
        return loom_errf(err, "%s: tensor '%s' has %u dimensions (1 to %d)", f->name, t->name, ndim, GGUF_MAX_DIMS);
    t->ndim = (int)ndim;
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        uint64_t ne;
        if (read_u64(c, base, t->name, &ne)) return -1;
        if (ne == 0 || ne > INT32_MAX || numel > (uint64_t)INT64_MAX / ne)
            return loom_errf(err, "%s: tensor '%s': dimension %d is %llu", f->name, t->name, d, (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
        numel *= ne;
    }
    if (read_u32(c, base, t->name, &type) || read_u64(c, base, t->name, offset)) return -1;
    const gtype_info *g = gtype_get((int)type);
    if (!g) return loom_errf(err, "%s: tensor '%s' has type %u, which ggml does not define", f->name, t->name, type);
    t->type = (int)type;
    if (t->ne[0] % g->block)
        return loom_errf(err, "%s: tensor '%s' (%s): its rows of %lld weights are not whole blocks of %d", f->name,
                         t->name, g->name, (long long)t->ne[0], g->block);
    if (numel / g->block > SIZE_MAX / (size_t)g->bytes)
        return loom_errf(err, "%s: tensor '%s' is too large", f->name, t->name);
    t->nbytes = (size_t)(numel / g->block) * g->bytes;
    return 0;
}

typedef struct extent {
    uint64_t begin, end;
    size_t index;
} extent;

static int by_begin(const void *a, const void *b) {
    const extent *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Every tensor inside the data section, aligned, and apart from the others. */
static int place_tensors(gguf_file *f, const uint8_t *base, size_t size, size_t data_at, const uint64_t *offsets,
                         loom_err *err) {
    size_t data_size = size - data_at;
    extent *ext = mem_array(f->n_tensors ? f->n_tensors : 1, sizeof *ext, "the tensor extents", err);
    if (!ext) return -1;
    int rc = 0;
    for (size_t i = 0; i < f->n_tensors && !rc; i++) {
        gguf_tensor *t = &f->tensors[i];
        if (offsets[i] % f->alignment)
            rc = loom_errf(err, "%s: tensor '%s' starts at data offset %llu, not a multiple of the alignment %zu",
                           f->name, t->name, (unsigned long long)offsets[i], f->alignment);
        else if (offsets[i] > data_size || t->nbytes > data_size - offsets[i])
            rc = loom_errf(err, "%s: tensor '%s' (%zu bytes at data offset %llu) runs past the end of the file",
                           f->name, t->name, t->nbytes, (unsigned long long)offsets[i]);
        else t->data = base + data_at + offsets[i];
        ext[i] = (extent){offsets[i], offsets[i] + t->nbytes, i};
    }
    if (!rc) qsort(ext, f->n_tensors, sizeof *ext, by_begin);
    for (size_t i = 1; i < f->n_tensors && !rc; i++)
        if (ext[i].begin < ext[i - 1].end)
            rc = loom_errf(err, "%s: tensors '%s' and '%s' overlap", f->name, f->tensors[ext[i - 1].index].name,
                           f->tensors[ext[i].index].name);
    free(ext);
    return rc;
}

static int read_alignment(gguf_file *f, loom_err *err) {
    int64_t a = GGUF_ALIGNMENT;
    const gguf_kv *kv = gguf_find(f, "general.alignment");
    if (kv && kv->type != GGUF_U32)
        return loom_errf(err, "%s: key 'general.alignment' is %s, expected uint32", f->name, gguf_vtype_name(kv->type));
    if (gguf_get_i64(f, "general.alignment", &a, err) < 0) return -1;
    if (a < 1 || a > 1 << 20 || (a & (a - 1)))
        return loom_errf(err, "%s: general.alignment %lld is not a power of two up to 1 MiB", f->name, (long long)a);
    f->alignment = (size_t)a;
    return 0;
}

static int by_tensor_name(const void *a, const void *b) {
    return strcmp(((const gguf_tensor *)a)->name, ((const gguf_tensor *)b)->name);
}

bool gguf_is_gguf(const void *buf, size_t size) { return size >= 4 && !memcmp(buf, GGUF_MAGIC, 4); }

static int parse(gguf_file *f, const uint8_t *base, size_t size, loom_err *err) {
    cursor c = {base, base + size, f->name, err};
    uint32_t version;
    uint64_t n_tensors, n_kv;
    if (!gguf_is_gguf(base, size))
        return loom_errf(err, "%s: not a GGUF file (its first bytes are not \"GGUF\")", f->name);
    c.p += 4;
    if (read_u32(&c, base, "the version", &version)) return -1;
    if (version != 2 && version != 3)
        return loom_errf(err, "%s: GGUF version %u (versions 2 and 3 are read)", f->name, version);
    f->version = version;
    if (read_u64(&c, base, "the tensor count", &n_tensors) || read_u64(&c, base, "the key count", &n_kv) ||
        read_kvs(f, &c, base, n_kv, err) || read_alignment(f, err))
        return -1;
    if (n_tensors > left(&c) / 24) /* name length, dimensions, type and offset at least */
        return loom_errf(err, "%s: %llu tensors cannot fit in the file", f->name, (unsigned long long)n_tensors);
    uint64_t *offsets = mem_array(n_tensors ? n_tensors : 1, sizeof *offsets, "the tensor offsets", err);
    if (!offsets || !(f->tensors = mem_zalloc(n_tensors ? n_tensors : 1, sizeof *f->tensors, "the tensors", err))) {
        free(offsets);
        return -1;
    }
    int rc = 0;
    for (uint64_t i = 0; i < n_tensors && !rc; i++) {
        f->n_tensors = i + 1; /* gguf_close frees its name, however far it is read */
        rc = read_tensor_info(f, &c, base, &f->tensors[i], &offsets[i], err);
    }
    size_t at = (size_t)(c.p - base), data_at = (at + f->alignment - 1) / f->alignment * f->alignment;
    if (!rc && data_at > size && n_tensors)
        rc = loom_errf(err, "%s: truncated: the data section would start at byte %zu of %zu", f->name, data_at, size);
    if (!rc) rc = place_tensors(f, base, size, data_at < size ? data_at : size, offsets, err);
    free(offsets);
    if (rc) return -1;
    qsort(f->tensors, f->n_tensors, sizeof *f->tensors, by_tensor_name);
    for (size_t i = 1; i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i].name, f->tensors[i - 1].name))
            return loom_errf(err, "%s: tensor '%s' appears twice", f->name, f->tensors[i].name);
    return 0;
}

int gguf_parse(gguf_file *f, const void *buf, size_t size, const char *name, loom_err *err) {
    memset(f, 0, sizeof *f);
    if (!(f->name = mem_strdup(name, "a file name", err))) return -1;
    if (parse(f, buf, size, err)) {
        gguf_close(f);
        return -1;
    }
    return 0;
}

int gguf_open(gguf_file *f, const char *path, loom_err *err) {
    file_map m;
    if (file_map_open(&m, path, err)) return -1;
    if (gguf_parse(f, m.data, m.size, path, err)) {
        file_map_close(&m);
        return -1;
    }
    f->map = m;
    return 0;
}

void gguf_close(gguf_file *f) {
    for (size_t i = 0; i < f->n_kv; i++) free(f->kv[i].key), free(f->kv[i].strs);
    for (size_t i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->kv);
    free(f->tensors);
    free(f->name);
    if (f->map.data) file_map_close(&f->map);
    memset(f, 0, sizeof *f);
}

const gguf_kv *gguf_find(const gguf_file *f, const char *key) {
    for (size_t i = 0; i < f->n_kv; i++)
        if (f->kv[i].key && !strcmp(f->kv[i].key, key)) return &f->kv[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    gguf_tensor key = {.name = (char *)name};
    return bsearch(&key, f->tensors, f->n_tensors, sizeof *f->tensors, by_tensor_name);
}

const gguf_tensor *gguf_parts_find_tensor(const gguf_file *parts, int n_parts, const char *name) {
    const gguf_tensor *t = NULL;
    for (int i = 0; i < n_parts && !t; i++) t = gguf_find_tensor(&parts[i], name);
    return t;
}

static bool is_int(enum gguf_vtype t) { return t <= GGUF_I32 || t == GGUF_U64 || t == GGUF_I64; }
static bool is_signed(enum gguf_vtype t) { return t == GGUF_I8 || t == GGUF_I16 || t == GGUF_I32 || t == GGUF_I64; }

/* An integer of type t at p, sign-extended to 64 bits where signed. */
static uint64_t int_at(enum gguf_vtype t, const uint8_t *p) {
    int n = vsize[t];
    uint64_t u = le(p, n);
    if (is_signed(t) && n < 8 && (u >> (8 * n - 1))) u |= ~(uint64_t)0 << (8 * n);
    return u;
}

/* Item i of a numeric array (or the scalar, i = 0) as a double; integers exactly where they fit. */
static double num_at(enum gguf_vtype t, const uint8_t *p) {
    if (t == GGUF_F32) {
        float v;
        memcpy(&v, p, 4);
        return v;
    }
    if (t == GGUF_F64) {
        double v;
        memcpy(&v, p, 8);
        return v;
    }
    uint64_t u = int_at(t, p);
    return is_signed(t) ? (double)(int64_t)u : (double)u;
}

double gguf_array_num(const gguf_kv *kv, uint64_t i) { return num_at(kv->elem, kv->data + i * vsize[kv->elem]); }

static int wrong_type(const gguf_file *f, const gguf_kv *kv, const char *want, loom_err *err) {
    return loom_errf(err, "%s: key '%s' is %s%s%s, expected %s", f->name, kv->key, gguf_vtype_name(kv->type),
                     kv->type == GGUF_ARRAY ? " of " : "", kv->type == GGUF_ARRAY ? gguf_vtype_name(kv->elem) : "",
                     want);
}

int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out, loom_err *err) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 1;
    if (!is_int(kv->type)) return wrong_type(f, kv, "an integer", err);
    uint64_t u = int_at(kv->type, kv->data);
    if (!is_signed(kv->type) && u > (uint64_t)INT64_MAX)
        return loom_errf(err, "%s: key '%s' is %llu, out of range", f->name, key, (unsigned long long)u);
    *out = (int64_t)u;
    return 0;
}

int gguf_get_f64(const gguf_file *f, const char *key, double *out, loom_err *err) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 1;
    if (kv->type == GGUF_STRING || kv->type == GGUF_ARRAY || kv->type == GGUF_BOOL)
        return wrong_type(f, kv, "a number", err);
    *out = num_at(kv->type, kv->data);
    return 0;
}

int gguf_get_bool(const gguf_file *f, const char *key, bool *out, loom_err *err) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 1;
    if (kv->type != GGUF_BOOL) return wrong_type(f, kv, "bool", err);
    if (kv->data[0] > 1) return loom_errf(err, "%s: key '%s' holds %u, not a bool", f->name, key, kv->data[0]);
    *out = kv->data[0];
    return 0;
}

int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, loom_err *err) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 1;
    if (kv->type != GGUF_STRING) return wrong_type(f, kv, "string", err);
    *out = kv->strs[0];
    return 0;
}

const gguf_kv *gguf_get_array(const gguf_file *f, const char *key, enum gguf_vtype elem, loom_err *err) {
    if (err) err->msg[0] = 0;
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return NULL;
    bool ok =
        kv->type == GGUF_ARRAY && (kv->elem == elem || (elem != GGUF_STRING && is_int(elem) && is_int(kv->elem)) ||
                                   (elem == GGUF_F32 && kv->elem == GGUF_F64));
    if (!ok) {
        char want[48];
        snprintf(want, sizeof want, "an array of %s", gguf_vtype_name(elem));
        wrong_type(f, kv, want, err);
        return NULL;
    }
    return kv;
}

/* GGUF container (llama.cpp's model file): header, metadata and tensor directory, validated over
 * a byte buffer (an mmap'd file). Nothing is copied: strings, arrays and tensors point into the
 * buffer. Versions 2 and 3; every length, count, type and offset is checked against the buffer
 * before use, so a truncated or hostile file is refused with a message naming the key or tensor. */
#ifndef LOOM_MODEL_GGUF_H
#define LOOM_MODEL_GGUF_H
#include "loom.h"
#include "tensor/gguf_blocks.h"
#include "util/file.h"

#define GGUF_MAX_DIMS 4

/* Metadata value types, as the format numbers them. */
enum gguf_vtype {
    GGUF_U8,
    GGUF_I8,
    GGUF_U16,
    GGUF_I16,
    GGUF_U32,
    GGUF_I32,
    GGUF_F32,
    GGUF_BOOL,
    GGUF_STRING,
    GGUF_ARRAY,
    GGUF_U64,
    GGUF_I64,
    GGUF_F64,
    GGUF_N_VTYPES
};

typedef struct gguf_str {
    const char *p; /* not NUL-terminated */
    size_t n;
} gguf_str;

/* One key's value. Scalars are read with the getters below; an array holds n items of `elem`
 * at `data` (packed little-endian), or for strings n gguf_str in `strs`. */
typedef struct gguf_kv {
    char *key;
    enum gguf_vtype type, elem; /* elem: an array's item type */
    uint64_t n;                 /* array items (1 for a scalar) */
    const uint8_t *data;        /* the scalar's or the array's bytes */
    gguf_str *strs;             /* GGUF_STRING (n = 1) or an array of strings */
} gguf_kv;

typedef struct gguf_tensor {
    char *name;
    int type; /* ggml type number (tensor/gguf_blocks.h) */
    int ndim;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the innermost (contiguous) dimension: a matrix's columns */
    size_t nbytes;
    const void *data;
} gguf_tensor;

typedef struct gguf_file {
    char *name;   /* path, for messages */
    file_map map; /* set when gguf_open mapped the file */
    uint32_t version;
    size_t alignment;
    gguf_kv *kv;
    size_t n_kv;
    gguf_tensor *tensors;
    size_t n_tensors;
} gguf_file;

/* Whether the buffer starts with GGUF's magic. */
bool gguf_is_gguf(const void *buf, size_t size);
int gguf_parse(gguf_file *f, const void *buf, size_t size, const char *name, loom_err *err);
int gguf_open(gguf_file *f, const char *path, loom_err *err);
void gguf_close(gguf_file *f);

const gguf_kv *gguf_find(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);
/* Tensor `name` in whichever of a split file's parts holds it, or NULL. */
const gguf_tensor *gguf_parts_find_tensor(const gguf_file *parts, int n_parts, const char *name);

/* Typed reads of scalar keys. Each returns 1 when the key is absent (out untouched), 0 when read,
 * and -1 with err naming the key when it holds another type or a value out of range. Integer
 * getters accept any integer type whose value fits; gguf_get_f64 any number. */
int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out, loom_err *err);
int gguf_get_f64(const gguf_file *f, const char *key, double *out, loom_err *err);
int gguf_get_bool(const gguf_file *f, const char *key, bool *out, loom_err *err);
int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, loom_err *err);
/* An array key of `elem` items (GGUF_STRING: read its strs); NULL when absent, or with err set when
 * the key is not such an array (err->msg[0] tells the two apart). */
const gguf_kv *gguf_get_array(const gguf_file *f, const char *key, enum gguf_vtype elem, loom_err *err);
/* Item i of a numeric array as a double. */
double gguf_array_num(const gguf_kv *kv, uint64_t i);
const char *gguf_vtype_name(enum gguf_vtype t);

#endif

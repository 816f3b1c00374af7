/* safetensors container: header parsing and validation over a byte buffer (an mmap'd file
 * or the embedded default model). Nothing is copied; tensors point into the buffer. */
#ifndef LOOM_MODEL_SAFETENSORS_H
#define LOOM_MODEL_SAFETENSORS_H
#include "loom.h"
#include "tensor/tensor.h"
#include "util/file.h"

#define ST_MAX_DIMS 8

typedef struct st_tensor {
    char *name;
    enum dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t nbytes;
    const void *data;
    int gtype; /* a GGUF file's block-quantized tensor (dtype U8, shape in weights): its ggml type
                  (tensor/gguf_blocks.h); 0 for a plain dtype */
} st_tensor;

typedef struct st_file {
    char *name;   /* path, for messages */
    file_map map; /* set when st_open mapped the file */
    st_tensor *tensors;
    size_t n;       /* sorted by name */
    char *metadata; /* "__metadata__" as JSON text, or NULL */
} st_file;

/* Validates and indexes a safetensors image: header length, JSON, dtypes, shapes, offsets
 * inside the data section and not overlapping, shape x dtype = byte length. */
int st_parse(st_file *f, const void *buf, size_t size, const char *name, loom_err *err);
int st_open(st_file *f, const char *path, loom_err *err);
void st_close(st_file *f);
const st_tensor *st_find(const st_file *f, const char *name);
int64_t st_numel(const st_tensor *t);

#endif

/* Within quant/: a checkpoint format's reader, one row of checkpoint.c's table per format, and
 * the helpers every reader shares (reader_util.c). The readers: int_reader.c (GPTQ, AWQ,
 * compressed-tensors' integer formats), fp8_reader.c (compressed-tensors' float-quantized and the
 * "fp8" method), mxfp4_reader.c (GPT-OSS's experts). */
#ifndef LOOM_QUANT_READER_H
#define LOOM_QUANT_READER_H
#include "quant/checkpoint.h"

/* A rank's slice of a [rows, cols] matrix: rows r0, r0 + row_step, ... (nr of them), columns
 * [c0, c0 + nc). */
typedef struct ckpt_slice {
    int rows, cols, r0, nr, row_step, c0, nc;
} ckpt_slice;

typedef struct ckpt_reader {
    /* whether the format quantizes the LM head (a vocabulary-parallel linear) */
    bool (*head)(const quant_config *q);
    /* refuses a slice its packing cannot split, naming the tensor and the numbers */
    int (*check)(const quant_config *q, const char *name, const ckpt_slice *s, loom_err *err);
    /* whether the files hold weight `name` in the format */
    bool (*has)(weight_store *ws, const quant_config *q, const char *name);
    /* the slice, read and repacked into out (not yet kept: checkpoint.c keeps it) */
    int (*get)(weight_store *ws, const quant_config *q, const char *name, const ckpt_slice *s, wmat *out,
               loom_err *err);
    bool row_step; /* takes interleaved rows (row_step over 1) */
} ckpt_reader;

extern const ckpt_reader int_reader, fp8_reader, mxfp4_reader, gguf_reader;

/* A weight's module ("<module>.weight" less ".weight"); its tensor `<module>.<suffix>` (NULL if
 * absent; *file, if given, the file holding it); element i of an F32, F16 or BF16 tensor as f32;
 * a tensor's shape as text for messages ("128, 64"). */
void ckpt_module_of(const char *name, char *out, size_t cap);
const st_tensor *ckpt_part(weight_store *ws, const char *mod, const char *suffix, const char **file);
float ckpt_real(const st_tensor *t, size_t i);
void ckpt_shape(const st_tensor *t, char *out, size_t cap);

#endif

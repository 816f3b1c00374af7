/* Quantized weights: the one home of integer, FP8 and MXFP4 weight formats. A quantized linear
 * reaches the kernels as a wmat whose `q` describes loom's own packed layout
 * (tensor/tensor.h's qlayout), whatever the checkpoint stored: each format's reader (a row of
 * checkpoint.c's table: int_reader.c, fp8_reader.c, mxfp4_reader.c; online.c for float
 * checkpoints and dummy weights) turns its tensors into codes, scales and zero points, and
 * qmat.c repacks them.
 *
 * A weight is (q - zero) * scale, or fp8(q) * scale for FP8 codes, in fp32: the same single
 * rounding a float reference dequantizing the checkpoint makes, so exact results (--dtype
 * float32) compare with transformers on the dequantized weights. By default integer weights
 * meet int8 inputs and FP8 ones bf16 inputs (kernels/linear.c). */
#ifndef LOOM_QUANT_QUANT_H
#define LOOM_QUANT_QUANT_H
#include "model/weights.h"

#define QCHUNK 256 /* rows read at a time while repacking */

/* Parses --quantization's value ("none", "int8", "int4"), --quant-group-size (0: the
 * default, per channel for int8 and 128 for int4) and --quantize-lm-head. */
int quant_scheme_parse(quant_scheme *s, const char *name, int group, bool head, loom_err *err);

/* One row of a source matrix as integer codes: codes[c] for the shard's columns c in
 * [0, cols) (the matrix's columns col0 + c), and scale/zero for every one of the matrix's
 * n_groups groups. Rows come in chunks of QCHUNK: `chunk` (optional) is called first, on one
 * thread, to read rows [r0, r0+n); then `row` for each of them, from several threads. */
typedef struct qsource {
    int bits, rows, cols, col0;
    int n_groups;            /* the whole matrix's groups */
    int group_size;          /* columns per group, when group_of is NULL */
    const int32_t *group_of; /* [cols]: each shard column's group (act-order), or NULL */
    void *ctx;
    int (*chunk)(void *ctx, int r0, int n, loom_err *err);
    int (*row)(void *ctx, int r, uint8_t *codes, float *scale, float *zero, loom_err *err);
    enum qcode code; /* what the codes are (FP8 ones: bits 8, zero points unused) */
    float in_scale;  /* FP8: the activation scheme, as qlayout keeps it */
    int in_group;
} qsource;

/* Builds the packed matrix of src's rows (owned by the store) into out. */
int qmat_build(weight_store *ws, const qsource *src, wmat *out, loom_err *err);
/* Matrices built at load are kept by tensor name and slice (weights_made_keep), so that a
 * second plan over the same slices reuses them. */

/* Rows [r0, r0+nr) x columns [c0, c0+nc) of float tensor `name` (ndim dimensions `shape`, read
 * as [rows, cols]), quantized with scheme s at load (dummy stores generate the float values
 * first). Per-channel scales cover the whole row, so every tensor-parallel split holds pieces
 * of the same model. */
int quant_online(weight_store *ws, const quant_scheme *s, const char *name, int ndim, const int *shape, int cols,
                 int r0, int nr, int c0, int nc, float init, wmat *out, loom_err *err);
/* Refuses a split of a matrix's cols input features to [c0, c0+nc) that cuts a group. */
int quant_check_split(const quant_scheme *s, const char *name, int cols, int c0, int nc, loom_err *err);

#endif

/* Quantized weights: the one home of integer weight formats. A quantized linear reaches the
 * kernels as a wmat whose `q` describes loom's own packed layout (below), whatever the
 * checkpoint stored: each format's reader (online.c for float checkpoints and dummy weights)
 * turns its tensors into integer codes, scales and zero points, and qmat.c repacks them.
 *
 * Compute stays fp32: a weight is (q - zero) * scale in fp32, the same single rounding a
 * float reference dequantizing the checkpoint makes, so results compare with transformers on
 * the dequantized weights. */
#ifndef LOOM_QUANT_QUANT_H
#define LOOM_QUANT_QUANT_H
#include "model/weights.h"

/* Columns of a packed block. A 4-bit block is 16 bytes, byte j holding column j in its low
 * nibble and column j + 16 in its high one, so a vector of bytes widens into two vectors of
 * consecutive columns with an and and a shift (any vector length dividing 16); an 8-bit block
 * is 32 bytes in column order. */
#define QBLOCK 32
#define QCHUNK 256 /* rows read at a time while repacking */

/* The packed layout of one matrix. Its columns are the input features reordered so that each
 * quantization group is contiguous (act-order checkpoints number groups out of column order),
 * each group padded with zero codes to whole blocks: packed column p holds input column
 * col_of[p] (-1: padding, which meets a zero input). */
typedef struct qlayout {
    int bits;                 /* 4 or 8 */
    int kp;                   /* packed columns per row */
    int n_groups;             /* groups this matrix holds (a row-parallel shard: its share) */
    const int32_t *group_end; /* [n_groups]: the packed column where each group ends */
    const int32_t *col_of;    /* [kp]; NULL when packed column p is input column p (kp == cols) */
    const float *sz;          /* [rows][n_groups][2]: scale, zero point */
} qlayout;

/* Parses --quantization's value ("none", "int8", "int4"), --quant-group-size (0: the
 * default, per channel for int8 and 128 for int4) and --quantize-lm-head. */
int quant_scheme_parse(quant_scheme *s, const char *name, int group, bool head, loom_err *err);

/* One row of a source matrix as integer codes: codes[c] for the shard's columns c in
 * [0, cols) (the matrix's columns col0 + c), and scale/zero for every one of the matrix's
 * n_groups groups. Rows come in chunks of QCHUNK: `chunk` (optional) is called first, on one
 * thread, to read rows [r0, r0+n); then `row` for each of them, from several threads. */
typedef struct qsource {
    int bits, rows, cols, col0;
    int n_groups;          /* the whole matrix's groups */
    int group_size;        /* columns per group, when group_of is NULL */
    const int32_t *group_of; /* [cols]: each shard column's group (act-order), or NULL */
    void *ctx;
    int (*chunk)(void *ctx, int r0, int n, loom_err *err);
    int (*row)(void *ctx, int r, uint8_t *codes, float *scale, float *zero, loom_err *err);
} qsource;

/* Builds the packed matrix of src's rows (owned by the store) into out. */
int qmat_build(weight_store *ws, const qsource *src, wmat *out, loom_err *err);
/* Matrices built at load are kept by tensor name and slice, so that a second plan over the
 * same slices (the engine's plain-TP plan beside its SP one) reuses them. */
bool qmat_find(weight_store *ws, const char *name, int r0, int nr, int c0, int nc, wmat *out);
void qmat_keep(weight_store *ws, const char *name, int r0, int nr, int c0, int nc, const wmat *w);

/* Rows [r0, r0+nr) x columns [c0, c0+nc) of float tensor `name` (ndim dimensions `shape`, read
 * as [rows, cols]), quantized with scheme s at load (dummy stores generate the float values
 * first). Per-channel scales cover the whole row, so every tensor-parallel split holds pieces
 * of the same model. */
int quant_online(weight_store *ws, const quant_scheme *s, const char *name, int ndim, const int *shape, int cols, int r0,
                 int nr, int c0, int nc, float init, wmat *out, loom_err *err);
/* Refuses a split of a matrix's cols input features to [c0, c0+nc) that cuts a group. */
int quant_check_split(const quant_scheme *s, const char *name, int cols, int c0, int nc, loom_err *err);

#endif

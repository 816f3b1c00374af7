/* The bottom layer's types: element dtypes, the matrix the kernels read (wmat), and loom's
 * packed layout of quantized matrices. Every layer above shares them; this one includes none. */
#ifndef LOOM_TENSOR_TENSOR_H
#define LOOM_TENSOR_TENSOR_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Element types, as safetensors names them (dtype_name). */
enum dtype { DT_F32, DT_F16, DT_BF16, DT_I64, DT_I32, DT_I16, DT_I8, DT_U8, DT_BOOL, DT_F64, DT_F8_E4M3, DT_F8_E5M2 };
size_t dtype_size(enum dtype d);
const char *dtype_name(enum dtype d);
/* The dtype safetensors calls `name` ("BF16"); false if there is none. */
bool dtype_from_name(const char *name, enum dtype *d);

/* Columns of a packed block. A 4-bit block is 16 bytes, byte j holding column j in its low
 * nibble and column j + 16 in its high one, so a vector of bytes widens into two vectors of
 * consecutive columns with an and and a shift (any vector length dividing 16); an 8-bit block
 * is 32 bytes in column order. */
#define QBLOCK 32

/* What a packed code means: an unsigned integer, the weight (q - zero) * scale; or an FP8
 * number (tensor/fp8.h), the weight fp8(q) * scale with no zero point. QCODE_GGUF is not loom's
 * packing: each row is blocks of one llama.cpp type (tensor/gguf_blocks.h) in input column
 * order, a GGUF file's as stored, mapped. QCODE_E2M1 describes a source's codes only (quant.h's
 * qsource: a 4-bit FP4 number, tensor/fp4.h, the weight e2m1(q) * scale, its groups 32 columns,
 * scales powers of 2): qmat_build makes them ggml's MXFP4 blocks, QCODE_GGUF. */
enum qcode { QCODE_UINT, QCODE_E4M3, QCODE_E5M2, QCODE_E2M1, QCODE_GGUF };

/* The packed layout of one quantized matrix (quant/ builds it). Its columns are the input
 * features reordered so that each quantization group is contiguous (act-order checkpoints
 * number groups out of column order), each group padded with zero codes to whole blocks:
 * packed column p holds input column col_of[p] (-1: padding, which meets a zero input). */
typedef struct qlayout {
    int bits;                 /* 4 or 8 (FP8 codes: 8) */
    int kp;                   /* packed columns per row */
    int n_groups;             /* groups this matrix holds (a row-parallel shard: its share) */
    const int32_t *group_end; /* [n_groups]: the packed column where each group ends */
    const int32_t *col_of;    /* [kp]; NULL when packed column p is input column p (kp == cols) */
    const float *sz;          /* [rows][n_groups][2]: scale, zero point */
    enum qcode code;
    /* FP8 checkpoints, for FP8 activations (WACT_FP8): the stored activation scale (0:
     * dynamic), and with a dynamic one the columns each scale covers (0: the whole row) */
    float in_scale;
    int in_group;
    int gtype; /* QCODE_GGUF: the rows' block type (a ggml type number) */
    int g0;    /* QCODE_GGUF: where a row's slice starts in its first block (a split inside a super-block) */
} qlayout;

/* What a linear's input rows are rounded to before the product (--dtype): nothing (exact fp32),
 * bf16 for bf16 weights, int8 codes with fp32 scales for integer-quantized ones, or FP8 codes
 * with the checkpoint's activation scales for FP8 ones (--fp8-activations; vLLM's W8A8). */
enum wact { WACT_F32, WACT_BF16, WACT_INT8, WACT_FP8 };

/* A row-major [rows, cols] matrix with leading dimension ld (elements), f32 or bf16; or, when
 * q is set, quantized: dt DT_U8, ld bytes per packed row, q the layout. act: how it computes. */
typedef struct wmat {
    enum dtype dt;
    int rows, cols;
    size_t ld;
    const void *data;
    const qlayout *q;
    enum wact act;
    float in_scale; /* WACT_FP8: the static activation scale (the largest of a fused linear's parts', as vLLM
                     * takes), 0 for dynamic scales */
} wmat;

#endif

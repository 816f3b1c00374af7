/* A checkpoint's quantization, as config.json's quantization_config states it: which format
 * its quantized linears are stored in and with what parameters (config.c parses the block
 * through quant_config_parse; the readers of quant/reader.h follow it). */
#ifndef LOOM_MODEL_QUANT_CONFIG_H
#define LOOM_MODEL_QUANT_CONFIG_H
#include <stdbool.h>

#include "loom.h"

typedef enum quant_format {
    QF_NONE,
    QF_GPTQ,      /* qweight packed along the input features, qzeros, scales, g_idx */
    QF_AWQ,       /* GEMM version: qweight packed along the outputs, AWQ's nibble order */
    QF_CT_PACKED, /* compressed-tensors pack-quantized: weight_packed, weight_scale, ... */
    QF_CT_INT,    /* compressed-tensors int-quantized: int8 weight, weight_scale */
    QF_CT_FP8,    /* compressed-tensors float-quantized: FP8 weight, weight_scale, input_scale */
    QF_FP8,       /* quant_method "fp8": FP8 weight, weight_scale_inv per block (or weight_scale) */
    QF_MXFP4,     /* quant_method "mxfp4" (GPT-OSS): stacked experts as <name>_blocks, <name>_scales */
    QF_GGUF,      /* a GGUF file: linears in llama.cpp's block types, mapped as stored (model/gguf_model.c) */
} quant_format;

/* How an FP8 checkpoint scales its weights: one scale for the matrix, one per output row, or
 * one per block of fp8_block[0] rows by fp8_block[1] columns. */
typedef enum fp8_weight_scale { FP8_TENSOR, FP8_CHANNEL, FP8_BLOCK } fp8_weight_scale;
/* How its activations are scaled when they are quantized too (--fp8-activations): not at all
 * (weight-only), by the stored input_scale, or dynamically per token or per group of
 * act_group columns of a token. */
typedef enum fp8_act_scale { FP8_ACT_NONE, FP8_ACT_STATIC, FP8_ACT_TOKEN, FP8_ACT_GROUP } fp8_act_scale;

#define QUANT_MAX_IGNORE 256

typedef struct quant_config {
    quant_format format;
    int bits;
    int group;                  /* input features per scale; 0: one per output channel */
    bool sym;                   /* no stored zero points (or all at the midpoint) */
    bool act_order;             /* groups numbered by g_idx, out of column order */
    bool gptq_v2;               /* GPTQ zero points stored as they are (v1 stores them minus one) */
    bool lm_head;               /* the LM head is quantized too */
    fp8_weight_scale fp8_scale; /* FP8 formats: */
    int fp8_block[2];
    fp8_act_scale fp8_act;
    int act_group;
    int n_ignore; /* modules kept in float: AWQ's modules_to_not_convert, CT's ignore (a "re:" entry is a
                   * regular expression matched from the name's start), fp8's ignored_layers */
    char ignore[QUANT_MAX_IGNORE][160];
    /* QF_GGUF: tensor `name`'s block type (weights_gguf_type over the open store), so that the
     * planner's split check knows each tensor's own */
    int (*gguf_type)(const void *store, const char *name);
    const void *store;
} quant_config;

static inline bool quant_format_fp8(quant_format f) { return f == QF_CT_FP8 || f == QF_FP8; }

struct cJSON;
/* Parses quantization_config qc of config file `name`; a method, format or value loom does
 * not run is an error naming the field. */
int quant_config_parse(quant_config *q, const struct cJSON *qc, const char *name, loom_err *err);
const char *quant_format_name(quant_format f);
/* Whether module `module` ("model.layers.0.mlp.gate") is in the ignore list: kept in float. */
bool quant_config_ignores(const quant_config *q, const char *module);

#endif

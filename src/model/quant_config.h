/* A checkpoint's quantization, as config.json's quantization_config states it: which format
 * its quantized linears are stored in and with what parameters (config.c parses the block
 * through quant_config_parse; the readers in checkpoint.c follow it). */
#ifndef LOOM_MODEL_QUANT_CONFIG_H
#define LOOM_MODEL_QUANT_CONFIG_H
#include "loom.h"

typedef enum quant_format {
    QF_NONE,
    QF_GPTQ,      /* qweight packed along the input features, qzeros, scales, g_idx */
    QF_AWQ,       /* GEMM version: qweight packed along the outputs, AWQ's nibble order */
    QF_CT_PACKED, /* compressed-tensors pack-quantized: weight_packed, weight_scale, ... */
    QF_CT_INT,    /* compressed-tensors int-quantized: int8 weight, weight_scale */
} quant_format;

#define QUANT_MAX_IGNORE 32

typedef struct quant_config {
    quant_format format;
    int bits;
    int group;      /* input features per scale; 0: one per output channel */
    bool sym;       /* no stored zero points (or all at the midpoint) */
    bool act_order; /* groups numbered by g_idx, out of column order */
    bool gptq_v2;   /* GPTQ zero points stored as they are (v1 stores them minus one) */
    bool lm_head;   /* the LM head is quantized too */
    int n_ignore;   /* modules kept in float: AWQ's modules_to_not_convert, CT's ignore */
    char ignore[QUANT_MAX_IGNORE][128];
} quant_config;

struct cJSON;
/* Parses quantization_config qc of config file `name`; a method, format or value loom does
 * not run is an error naming the field. */
int quant_config_parse(quant_config *q, const struct cJSON *qc, const char *name, loom_err *err);
const char *quant_format_name(quant_format f);

#endif

/* libFuzzer target: the quantized checkpoint readers (GPTQ, AWQ, compressed-tensors packed,
 * int8 and FP8, the fp8 method's blocks, MXFP4) on an arbitrary safetensors image holding one
 * 128 x 128 linear `q_proj`, read whole, as a tensor-parallel rank's slice, and (MXFP4) as
 * every second row from row 1, as GPT-OSS's interleaved up rows are. Whatever the tensors' shapes, dtypes and values, a
 * reader must fail with a message or build a matrix, never read outside them. */
#include "quant/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const quant_config formats[] = {
        {.format = QF_GPTQ, .bits = 4, .group = 32, .act_order = true},
        {.format = QF_GPTQ, .bits = 8, .group = 0, .sym = true, .gptq_v2 = true},
        {.format = QF_AWQ, .bits = 4, .group = 32},
        {.format = QF_CT_PACKED, .bits = 4, .group = 32},
        {.format = QF_CT_INT, .bits = 8, .group = 0, .sym = true},
        {.format = QF_CT_FP8, .bits = 8, .fp8_scale = FP8_TENSOR, .fp8_act = FP8_ACT_STATIC},
        {.format = QF_CT_FP8, .bits = 8, .fp8_scale = FP8_CHANNEL, .fp8_act = FP8_ACT_TOKEN},
        {.format = QF_FP8,
         .bits = 8,
         .fp8_scale = FP8_BLOCK,
         .fp8_block = {48, 80},
         .fp8_act = FP8_ACT_GROUP,
         .act_group = 80},
        {.format = QF_MXFP4, .bits = 4, .group = 32, .sym = true},
    };
    weight_store ws;
    loom_err err;
    if (weights_open_image(&ws, data, size, "fuzz", &err)) return 0;
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) {
        wmat w;
        if (quant_checkpoint_has(&ws, &formats[i], "q_proj.weight")) {
            quant_checkpoint_get(&ws, &formats[i], "q_proj.weight", 128, 128, 0, 128, 1, 0, 128, &w, &err);
            quant_checkpoint_get(&ws, &formats[i], "q_proj.weight", 128, 128, 64, 64, 1, 64, 64, &w, &err);
            if (formats[i].format == QF_MXFP4)
                quant_checkpoint_get(&ws, &formats[i], "q_proj.weight", 128, 128, 1, 63, 2, 0, 128, &w, &err);
        }
    }
    weights_close(&ws);
    return 0;
}

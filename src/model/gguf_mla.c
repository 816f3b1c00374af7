/* DeepSeek's kv_b_proj from a GGUF file. llama.cpp's converter splits it per head into
 * attn_k_b, k's rows transposed ([heads, kv_lora, nope], for its absorbed attention), and
 * attn_v_b ([heads, v, kv_lora]). loom's latent attention reads the Hugging Face tensor, so the
 * two are joined back, in F32: each row decoded exactly (blocks by the CPU variant's decoder, as
 * every GGUF weight), then placed. kv_b_proj is small beside the experts (DeepSeek-V2-Lite: 8 MiB
 * a layer in F32), and runtime/bind.c holds an f32 transpose of it anyway. */
#include "model/gguf_mla.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "tensor/gguf_blocks.h"
#include "util/alloc.h"
#include "util/err.h"

/* Row r of t (ne[0] weights) in f32. */
static void row_f32(const gguf_tensor *t, int64_t r, float *dst) {
    const gtype_info *g = &gtype_table[t->type];
    int n = (int)t->ne[0];
    const uint8_t *row = (const uint8_t *)t->data + (size_t)r * ((size_t)n / g->block * g->bytes);
    if (t->type == GT_F32) {
        memcpy(dst, row, (size_t)n * sizeof *dst);
    } else if (t->type == GT_F16 || t->type == GT_BF16) {
        for (int i = 0; i < n; i++) {
            uint16_t h = (uint16_t)(row[2 * i] | row[2 * i + 1] << 8);
            dst[i] = t->type == GT_F16 ? f16_to_f32(h) : bf16_to_f32(h);
        }
    } else {
        qlayout q = {.kp = n, .code = QCODE_GGUF, .gtype = t->type};
        cpu()->dequant_q(row, &q, (size_t)r, dst);
    }
}

int gguf_mla_kv_b(weight_store *ws, const gguf_file *parts, int n_parts, int layer, st_tensor *out, loom_err *err) {
    char kn[64], vn[64];
    snprintf(kn, sizeof kn, "blk.%d.attn_k_b.weight", layer);
    snprintf(vn, sizeof vn, "blk.%d.attn_v_b.weight", layer);
    const gguf_tensor *k = gguf_parts_find_tensor(parts, n_parts, kn), *v = gguf_parts_find_tensor(parts, n_parts, vn);
    if (!k || !v) return loom_errf(err, "%s: tensor '%s' without '%s'", parts[0].name, k ? kn : vn, k ? vn : kn);
    /* k: ne [nope, kv_lora, heads]; v: ne [kv_lora, v, heads] */
    if (k->ndim != 3 || v->ndim != 3 || k->ne[1] != v->ne[0] || k->ne[2] != v->ne[2] || !gtype_table[k->type].decoded ||
        !gtype_table[v->type].decoded || k->ne[0] * (int64_t)k->ne[1] > (1 << 24) || v->ne[1] > (1 << 12))
        return loom_errf(err,
                         "%s: '%s' and '%s' must be [heads, kv_lora, nope] and [heads, v, kv_lora] of one kv_lora and "
                         "head count, in types loom decodes",
                         parts[0].name, kn, vn);
    if (!out) return 0;
    int64_t nope = k->ne[0], lora = k->ne[1], heads = k->ne[2], vd = v->ne[1], rows = heads * (nope + vd);
    float *kv = weights_buffer(ws, (size_t)(rows * lora) * sizeof *kv, "a joined kv_b_proj", err);
    float *line = mem_array((size_t)(nope > lora ? nope : lora), sizeof *line, "a kv_b_proj row", err);
    if (!kv || !line) return free(line), -1;
    for (int64_t h = 0; h < heads; h++) {
        float *dst = kv + (size_t)(h * (nope + vd) * lora);
        for (int64_t j = 0; j < lora; j++) { /* k_b's row j is column j of the head's k rows */
            row_f32(k, h * lora + j, line);
            for (int64_t i = 0; i < nope; i++) dst[i * lora + j] = line[i];
        }
        for (int64_t i = 0; i < vd; i++) row_f32(v, h * vd + i, dst + (size_t)((nope + i) * lora));
    }
    free(line);
    char name[96];
    snprintf(name, sizeof name, "model.layers.%d.self_attn.kv_b_proj.weight", layer);
    if (!(out->name = mem_strdup(name, "a tensor name", err))) return -1;
    out->dtype = DT_F32, out->ndim = 2, out->shape[0] = rows, out->shape[1] = lora;
    out->nbytes = (size_t)(rows * lora) * sizeof *kv, out->data = kv, out->gtype = 0;
    return 0;
}

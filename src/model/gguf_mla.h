/* DeepSeek's kv_b_proj from a GGUF file's two halves (model/gguf_model.c reads the other tensors). */
#ifndef LOOM_MODEL_GGUF_MLA_H
#define LOOM_MODEL_GGUF_MLA_H
#include "model/gguf.h"
#include "model/safetensors.h"
#include "model/weights.h"

/* Decoder layer `layer`'s kv_b_proj [heads x (nope + v), kv_lora] in F32, joined from
 * blk.<layer>.attn_k_b [heads, kv_lora, nope] and attn_v_b [heads, v, kv_lora], wherever among
 * the parts each is, into *out (named and held by the store); with out NULL, only whether both
 * halves are there and fit. */
int gguf_mla_kv_b(weight_store *ws, const gguf_file *parts, int n_parts, int layer, st_tensor *out, loom_err *err);

#endif

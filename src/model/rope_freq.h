/* RoPE's inverse frequencies as transformers' rope initialisers compute them (default, linear,
 * llama3, yarn, longrope), in fp32 as they are there, over the rotary width (head_dim, or the
 * part partial_rotary_factor rotates). The kernels build their cos/sin tables from them. */
#ifndef LOOM_MODEL_ROPE_FREQ_H
#define LOOM_MODEL_ROPE_FREQ_H
#include "kernels/kernels.h"
#include "model/config.h"

/* Every set c's layers rotate by: the model's, the sliding layers' own base (Gemma 3), and
 * longrope's long factors, with the attention factor the tables are scaled by. */
void rope_freqs_of(const model_config *c, rope_freqs *f);

#endif

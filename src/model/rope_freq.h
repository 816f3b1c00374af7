/* RoPE's inverse frequencies as transformers' rope initialisers compute them (default, linear,
 * llama3, yarn), in fp32 as they are there. The kernels build their cos/sin tables from them. */
#ifndef LOOM_MODEL_ROPE_FREQ_H
#define LOOM_MODEL_ROPE_FREQ_H
#include "model/config.h"

/* inv[0 .. head_dim/2): the inverse frequency of each rotary pair of c's heads. */
void rope_inv_freq(const model_config *c, float *inv);
/* The same for the sliding layers' own base (c->rope_local_theta, unscaled; Gemma 3). */
void rope_local_inv_freq(const model_config *c, float *inv);

#endif

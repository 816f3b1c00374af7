/* A vision-language model's vision tower and projector (vision.c): their weights, bound once per
 * engine, and an image's features, the rows its tokens take in the text model's embedding
 * (loom_batch.image_rows). Every rank runs the whole tower, replicated (vLLM's
 * --mm-encoder-tp-mode data), so each holds the same rows with no collective. */
#ifndef LOOM_RUNTIME_VISION_H
#define LOOM_RUNTIME_VISION_H
#include "model/config.h"
#include "model/weights.h"

typedef struct vision_layer {
    const float *ln1_w, *ln1_b, *ln2_w, *ln2_b;
    wmat q, k, v, o, fc1, fc2;
    const float *q_b, *k_b, *v_b, *o_b, *fc1_b, *fc2_b;
} vision_layer;

typedef struct vision_tower {
    vision_config cfg;
    int text_hidden;
    wmat patch;                 /* the patch convolution as a linear over (channel, y, x) */
    const float *patch_b, *pos; /* its bias, the position embedding [patches, hidden] */
    vision_layer *layers;
    const float *post_w, *post_b; /* the final LayerNorm */
    float *soft_norm;             /* the soft-embedding RMSNorm's 1 + w */
    wmat proj;                    /* mm_input_projection_weight transposed: [text hidden, hidden] */
} vision_tower;

/* Binds the tower of c (c->vision.kind set) to the store's weights. */
int vision_tower_load(vision_tower *t, const model_config *c, weight_store *ws, loom_err *err);
void vision_tower_free(vision_tower *t);
/* The features of one image: pixels [3, image_size, image_size] (its processor's), features
 * [tokens_per_image, text hidden]. */
int vision_encode(const vision_tower *t, const float *pixels, float *features, loom_err *err);

#endif

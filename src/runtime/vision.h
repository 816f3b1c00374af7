/* A vision-language model's vision tower and projector (vision.c): their weights, bound once per
 * engine, and an image's features, the rows its tokens take in the text model's embedding
 * (loom_batch.image_rows). Under TP the tower is sharded as the text model is: each rank holds
 * its share of the heads and of the MLP's features, and the attention's output projection and
 * the MLP's second linear end in an all-reduce; every rank then holds the same rows. Where the
 * heads or features do not divide by the ranks, or when asked (vLLM's --mm-encoder-tp-mode
 * data), every rank runs the whole tower instead. */
#ifndef LOOM_RUNTIME_VISION_H
#define LOOM_RUNTIME_VISION_H
#include "comm/comm.h"
#include "model/config.h"
#include "model/weights.h"

/* rows of an encoder all-reduce at once: the shm slot holds this many rows of the tower */
#define VISION_REDUCE_ROWS 64

typedef struct vision_layer {
    const float *ln1_w, *ln1_b, *ln2_w, *ln2_b;
    wmat q, k, v, o, fc1, fc2;
    const float *q_b, *k_b, *v_b, *o_b, *fc1_b, *fc2_b;
} vision_layer;

typedef struct vision_tower {
    vision_config cfg;
    int text_hidden;
    int rank, tp;               /* this rank's share: heads and MLP features [rank/tp, (rank+1)/tp); tp 1: all */
    wmat patch;                 /* the patch convolution as a linear over (channel, y, x) */
    const float *patch_b, *pos; /* its bias, the position embedding [patches, hidden] */
    vision_layer *layers;
    const float *post_w, *post_b; /* the final LayerNorm */
    float *soft_norm;             /* the soft-embedding RMSNorm's 1 + w */
    wmat proj;                    /* mm_input_projection_weight transposed: [text hidden, hidden] */
} vision_tower;

/* Whether the tower of c shards over tp ranks (its heads and MLP features divide). */
bool vision_shards(const vision_config *v, int tp);
/* Binds the tower of c (c->vision.kind set) to the store's weights: rank's share of tp (tp 1:
 * all of it). */
int vision_tower_load(vision_tower *t, const model_config *c, weight_store *ws, int rank, int tp, loom_err *err);
void vision_tower_free(vision_tower *t);
/* The features of one image: pixels [3, image_size, image_size] (its processor's), features
 * [tokens_per_image, text hidden]; comm: the tower's ranks (t->tp of them). */
int vision_encode(const vision_tower *t, loom_comm *comm, const float *pixels, float *features, loom_err *err);

#endif

/* How an embedding model pools its hidden states (pooling.c). */
#ifndef LOOM_MODEL_POOLING_H
#define LOOM_MODEL_POOLING_H
#include <stdbool.h>

#include "loom.h"

typedef struct pooling_config {
    bool declared;     /* the folder says (sentence-transformers' modules.json) */
    loom_pooling mode; /* else the last token's, vLLM's default for decoder embedding models */
    bool normalize;    /* L2-normalised (a Normalize module; by default too, as vLLM) */
} pooling_config;

/* The pooling dir's sentence-transformers files declare, or the default when it has none.
 * -1 with err naming the file and field for what loom does not do (max or weighted-mean
 * pooling, a Dense projection after the pooling). */
int pooling_config_read(const char *dir, pooling_config *p, loom_err *err);

#endif

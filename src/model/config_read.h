/* The field getters config.json's parsers share (config.c, config_hybrid.c): each reads one
 * field of `obj`, gives the default where it is absent or null, and on a bad value returns -1
 * with an error naming the file and the field. */
#ifndef LOOM_MODEL_CONFIG_READ_H
#define LOOM_MODEL_CONFIG_READ_H
#include <cjson/cJSON.h>

#include "model/config.h"

typedef struct {
    const cJSON *root;
    const char *name; /* the file, for messages */
    loom_err *err;
} reader;

int cfg_num(reader *r, const cJSON *obj, const char *key, double def, bool required, double *out);
int cfg_int(reader *r, const cJSON *obj, const char *key, int def, bool required, int min, int *out);
int cfg_float(reader *r, const cJSON *obj, const char *key, double def, bool required, float *out);
int cfg_bool(reader *r, const char *key, bool def, bool *out); /* of the root */
const char *cfg_str(const cJSON *obj, const char *key);        /* NULL unless a string */

/* Hybrid models' fields (config_hybrid.c), after the shared ones: the layers' mixers and the
 * recurrent mixers' shapes. */
int parse_qwen3_5(reader *r, model_config *c);
int parse_granite_hybrid(reader *r, model_config *c);
int parse_nemotron_h(reader *r, model_config *c);
int parse_mamba2(reader *r, model_config *c);
/* A vision-language model's vision_config and the outer config's image tokens
 * (config_vision.c); root is the outer config. */
int parse_vision(reader *r, model_config *c);
/* The layer count a hybrid model's list of layer kinds gives (Nemotron-H's layers_block_type or
 * hybrid_override_pattern, which stand for num_hidden_layers), or 0. */
int hybrid_layer_count(const reader *r);

#endif

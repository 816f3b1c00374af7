/* The embedded default model (stories260K converted to a Hugging Face folder), linked into
 * the binary so that `loom run` needs no files. */
#ifndef LOOM_MODEL_EMBEDDED_H
#define LOOM_MODEL_EMBEDDED_H
#include <stddef.h>

typedef struct embedded_file {
    const void *data;
    size_t size;
} embedded_file;

typedef enum { EMBEDDED_CONFIG, EMBEDDED_SAFETENSORS, EMBEDDED_TOKENIZER } embedded_id;

embedded_file embedded_get(embedded_id id);

#endif

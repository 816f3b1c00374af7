/* Embeds models/stories260K into the library (util/embed.h); the folder comes from the build
 * (LOOM_DEFAULT_MODEL_DIR). */
#include "model/embedded.h"

#include "util/embed.h"

LOOM_EMBED(loom_default_config, LOOM_DEFAULT_MODEL_DIR "/config.json")
LOOM_EMBED(loom_default_safetensors, LOOM_DEFAULT_MODEL_DIR "/model.safetensors")
LOOM_EMBED(loom_default_tokenizer, LOOM_DEFAULT_MODEL_DIR "/tokenizer.json")

embedded_file embedded_get(embedded_id id) {
    switch (id) {
    case EMBEDDED_CONFIG:
        return (embedded_file){loom_default_config_start,
                               (size_t)(loom_default_config_end - loom_default_config_start)};
    case EMBEDDED_SAFETENSORS:
        return (embedded_file){loom_default_safetensors_start,
                               (size_t)(loom_default_safetensors_end - loom_default_safetensors_start)};
    case EMBEDDED_TOKENIZER: break;
    }
    return (embedded_file){loom_default_tokenizer_start,
                           (size_t)(loom_default_tokenizer_end - loom_default_tokenizer_start)};
}

/* The architecture table: config.json "architectures" name -> builder. */
#include "model/arch/arch.h"

#include <string.h>

#include "util/err.h"

static const struct {
    const char *name;
    llama_variant variant;
} llama_like[] = {
    {"LlamaForCausalLM", {0}},
    {"MistralForCausalLM", {.sliding_window = true}},
    {"Qwen2ForCausalLM", {.qkv_bias = true}},
    {"Qwen3ForCausalLM", {.qk_norm = true}},
    {"GraniteForCausalLM", {0}}, /* multipliers come from the config */
};

module *arch_build(const model_config *c, loom_err *err) {
    for (size_t i = 0; i < sizeof llama_like / sizeof llama_like[0]; i++)
        if (!strcmp(c->arch, llama_like[i].name)) return build_llama_family(c, &llama_like[i].variant);
    char list[256] = "";
    for (size_t i = 0; i < sizeof llama_like / sizeof llama_like[0]; i++)
        strcat(strcat(list, i ? ", " : ""), llama_like[i].name);
    loom_errf(err, "config.json: unsupported architecture '%s' (supported: %s)", c->arch, list);
    return NULL;
}

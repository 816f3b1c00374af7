/* The table of GGUF architectures: each `general.architecture` llama.cpp writes that loom runs
 * is a row, the transformers class it is and what llama.cpp's converter changed on the way in
 * (gguf_config.c and gguf_model.c read the rows); the others it defines are refused by name. */
#include "model/gguf_arch.h"

#include <stdio.h>
#include <string.h>

#include "util/err.h"

static const gguf_arch archs[] = {
    {.name = "llama", .hf = "LlamaForCausalLM", .meta_rope = true},
    {.name = "llama", .hf = "MixtralForCausalLM", .meta_rope = true, .moe = true, .norm_topk = true},
    {.name = "qwen2", .hf = "Qwen2ForCausalLM"},
    {.name = "qwen3", .hf = "Qwen3ForCausalLM"},
    {.name = "gemma2", .hf = "Gemma2ForCausalLM", .gemma = true},
    {.name = "gemma3", .hf = "Gemma3ForCausalLM", .gemma = true},
    {.name = "qwen2moe", .hf = "Qwen2MoeForCausalLM", .moe = true},
    {.name = "qwen3moe", .hf = "Qwen3MoeForCausalLM", .moe = true, .norm_topk = true},
    {.name = "olmoe", .hf = "OlmoeForCausalLM", .moe = true},
    {.name = "deepseek2", .hf = "DeepseekV3ForCausalLM", .moe = true, .deepseek = true},
    {.name = "granite", .hf = "GraniteForCausalLM", .meta_rope = true, .multipliers = true},
    {.name = "granitemoe", .hf = "GraniteMoeForCausalLM", .meta_rope = true, .multipliers = true, .moe = true},
    {.name = "phi3", .hf = "Phi3ForCausalLM"},
    {.name = "ernie4_5", .hf = "Ernie4_5ForCausalLM"},
    {.name = "ernie4_5-moe", .hf = "Ernie4_5_MoeForCausalLM", .moe = true, .ernie_moe = true},
    {.name = "gpt-oss", .hf = "GptOssForCausalLM", .moe = true},
};

const gguf_arch *gguf_arch_of(const gguf_file *f, loom_err *err) {
    gguf_str a;
    int rc = gguf_get_str(f, "general.architecture", &a, err);
    if (rc < 0) return NULL;
    if (rc > 0) {
        loom_errf(err, "%s: missing key 'general.architecture'", f->name);
        return NULL;
    }
    /* of an architecture's rows, the one with experts where the file counts them */
    const gguf_arch *found = NULL;
    for (size_t i = 0; i < sizeof archs / sizeof *archs; i++) {
        if (strlen(archs[i].name) != a.n || memcmp(archs[i].name, a.p, a.n)) continue;
        char key[96];
        snprintf(key, sizeof key, "%s.expert_count", archs[i].name);
        if (!found || archs[i].moe == (gguf_find(f, key) != NULL)) found = &archs[i];
    }
    if (found) return found;
    char list[256] = "";
    for (size_t i = 0; i < sizeof archs / sizeof *archs; i++)
        if (!i || strcmp(archs[i].name, archs[i - 1].name)) strcat(strcat(list, i ? ", " : ""), archs[i].name);
    loom_errf(err, "%s: general.architecture '%.*s' is not one loom runs (GGUF: %s)", f->name,
              (int)(a.n > 64 ? 64 : a.n), a.p, list);
    return NULL;
}

/* A vision-language model's vision tower config (config.json's vision_config) and the image
 * tokens its outer config names. Defaults follow transformers' classes: Gemma3Config (256 tokens
 * an image, the boi/eoi/image token ids) and SiglipVisionConfig, whose defaults fill what a
 * released vision_config leaves out. */
#include <math.h>
#include <string.h>

#include "model/config_read.h"
#include "util/err.h"

int parse_vision(reader *r, model_config *c) {
    if (strcmp(c->arch, "Gemma3ForCausalLM")) return 0; /* Qwen3.5's tower is not loaded */
    vision_config *v = &c->vision;
    const cJSON *vc = cJSON_GetObjectItemCaseSensitive(r->root, "vision_config");
    if (!cJSON_IsObject(vc))
        return loom_errf(r->err, "%s: Gemma3ForConditionalGeneration without a vision_config", r->name);
    const char *type = cfg_str(vc, "model_type");
    if (type && strcmp(type, "siglip_vision_model"))
        return loom_errf(r->err, "%s: vision_config.model_type '%s' (Gemma 3's tower is siglip_vision_model)", r->name,
                         type);
    const char *act = cfg_str(vc, "hidden_act");
    if (act && strcmp(act, "gelu_pytorch_tanh"))
        return loom_errf(r->err, "%s: vision_config.hidden_act '%s' (only gelu_pytorch_tanh)", r->name, act);
    reader vr = {vc, r->name, r->err};
    v->kind = VISION_GEMMA3;
    if (cfg_int(&vr, vc, "hidden_size", 768, false, 1, &v->hidden) ||
        cfg_int(&vr, vc, "intermediate_size", 3072, false, 1, &v->intermediate) ||
        cfg_int(&vr, vc, "num_hidden_layers", 12, false, 1, &v->n_layers) ||
        cfg_int(&vr, vc, "num_attention_heads", 12, false, 1, &v->n_heads) ||
        cfg_int(&vr, vc, "image_size", 224, false, 1, &v->image_size) ||
        cfg_int(&vr, vc, "patch_size", 16, false, 1, &v->patch_size) ||
        cfg_int(&vr, vc, "num_channels", 3, false, 3, &v->channels) ||
        cfg_float(&vr, vc, "layer_norm_eps", 1e-6, false, &v->eps) ||
        cfg_int(r, r->root, "mm_tokens_per_image", 256, false, 1, &v->tokens_per_image) ||
        cfg_int(r, r->root, "image_token_index", 262144, false, 0, &v->image_token) ||
        cfg_int(r, r->root, "boi_token_index", 255999, false, 0, &v->boi_token) ||
        cfg_int(r, r->root, "eoi_token_index", 256000, false, 0, &v->eoi_token))
        return -1;
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(vc, "vision_use_head")))
        return loom_errf(r->err, "%s: vision_config.vision_use_head: Gemma 3's tower has no pooling head", r->name);
    if (v->channels != 3)
        return loom_errf(r->err, "%s: vision_config.num_channels %d (pictures are RGB)", r->name, v->channels);
    if (v->hidden % v->n_heads)
        return loom_errf(r->err, "%s: vision_config.hidden_size %d is not a multiple of num_attention_heads %d",
                         r->name, v->hidden, v->n_heads);
    int side = v->image_size / v->patch_size, per_side = (int)lround(sqrt((double)v->tokens_per_image));
    if (v->image_size % v->patch_size || per_side * per_side != v->tokens_per_image || side % per_side)
        return loom_errf(r->err,
                         "%s: mm_tokens_per_image %d must be a square whose side divides the %d patches a side "
                         "(image_size %d / patch_size %d)",
                         r->name, v->tokens_per_image, side, v->image_size, v->patch_size);
    /* an image's tokens see each other across the window (transformers ORs the masks): loom's
     * attention keeps one window rule, which holds while an image fits in the window */
    if (c->sliding_window && v->tokens_per_image > c->sliding_window)
        return loom_errf(r->err, "%s: mm_tokens_per_image %d is wider than the sliding window of %d", r->name,
                         v->tokens_per_image, c->sliding_window);
    if (v->image_token >= c->vocab)
        return loom_errf(r->err, "%s: image_token_index %d is outside the text model's vocabulary of %d", r->name,
                         v->image_token, c->vocab);
    return 0;
}

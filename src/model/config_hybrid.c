/* Hybrid models' config.json fields, after the ones every architecture shares (config.c): which
 * mixer each layer has (attention, Gated DeltaNet, Mamba-2, or Nemotron-H's MLP or experts)
 * and the recurrent mixers' shapes. Defaults follow transformers' configuration classes:
 * Qwen3_5TextConfig (Qwen3.5-MoE's and Qwen3-Next's share them), GraniteMoeHybridConfig,
 * NemotronHConfig and Mamba2Config. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/config_read.h"
#include "util/err.h"

/* A name a config gives a layer kind, transformers' older names beside the current ones. */
typedef struct {
    const char *name;
    enum mixer_kind kind;
} layer_name;

/* Reads `key`, a list of one layer kind per layer from names[], into c->mixer; absent, every
 * layer is `fill`, but every interval-th attends (0: none does). */
static int parse_mixers(reader *r, model_config *c, const char *key, const layer_name *names, int n_names,
                        enum mixer_kind fill, int interval) {
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(r->root, key), *t;
    if (c->n_layers > (int)sizeof c->mixer)
        return loom_errf(r->err, "%s: %d layers: at most %zu", r->name, c->n_layers, sizeof c->mixer);
    if (types && !cJSON_IsNull(types) && (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != c->n_layers))
        return loom_errf(r->err, "%s: field '%s' must list one type for each of the %d layers", r->name, key,
                         c->n_layers);
    for (int l = 0; l < c->n_layers; l++) c->mixer[l] = interval && (l + 1) % interval == 0 ? MIXER_ATTENTION : fill;
    int l = 0;
    if (cJSON_IsArray(types)) cJSON_ArrayForEach(t, types) {
            const char *v = cJSON_IsString(t) ? t->valuestring : "";
            int i = 0;
            while (i < n_names && strcmp(v, names[i].name)) i++;
            if (i == n_names) {
                char known[160] = "";
                for (int k = 0; k < n_names; k++) strcat(strcat(known, k ? ", " : ""), names[k].name);
                return loom_errf(r->err, "%s: %s[%d] '%s': one of %s", r->name, key, l, v, known);
            }
            c->mixer[l++] = names[i].kind;
        }
    for (l = 0; l < c->n_layers; l++) c->recurrent |= mixer_is_recurrent(c->mixer[l]);
    return 0;
}

/* A time step limit: a number, or transformers' {"__float__": "Infinity"}. */
static int get_limit(reader *r, const cJSON *v, float *out) {
    const char *f = cJSON_IsObject(v) ? cfg_str(v, "__float__") : NULL;
    if (cJSON_IsNumber(v)) *out = (float)v->valuedouble;
    else if (f && !strcmp(f, "Infinity")) *out = INFINITY;
    else return loom_errf(r->err, "%s: field 'time_step_limit' must hold two numbers", r->name);
    return 0;
}

/* What each architecture calls a Mamba-2 mixer's fields, and their defaults; expand NULL: the
 * heads alone give the inner width (Nemotron-H), else it is expand x hidden_size, which the
 * heads must make up. */
typedef struct {
    const char *heads, *head_dim, *groups, *state, *conv, *expand, *conv_bias, *proj_bias;
    int def_heads, def_head_dim, def_groups, def_state;
} mamba_names;

static int parse_mamba(reader *r, model_config *c, const mamba_names *k) {
    const cJSON *root = r->root, *head = cJSON_GetObjectItemCaseSensitive(root, k->head_dim);
    const cJSON *limit = cJSON_GetObjectItemCaseSensitive(root, "time_step_limit");
    mamba_config *mb = &c->mamba;
    int expand = 0;
    if (cfg_int(r, root, k->heads, k->def_heads, false, 1, &mb->n_heads) ||
        cfg_int(r, root, k->groups, k->def_groups, false, 1, &mb->n_groups) ||
        cfg_int(r, root, k->state, k->def_state, false, 1, &mb->d_state) ||
        cfg_int(r, root, k->conv, 4, false, 1, &mb->conv_kernel) ||
        (k->expand && cfg_int(r, root, k->expand, 2, false, 1, &expand)) ||
        cfg_bool(r, k->conv_bias, true, &mb->conv_bias) || cfg_bool(r, k->proj_bias, false, &mb->proj_bias))
        return -1;
    /* Granite's default head width, "auto", is what makes up expand x hidden_size */
    if ((head && cJSON_IsString(head) && !strcmp(head->valuestring, "auto")) || (!head && !k->def_head_dim)) {
        mb->head_dim = expand * c->hidden / mb->n_heads;
    } else if (cfg_int(r, root, k->head_dim, k->def_head_dim, false, 1, &mb->head_dim)) {
        return -1;
    }
    mb->inner = mb->n_heads * mb->head_dim;
    if (expand && mb->inner != expand * c->hidden)
        return loom_errf(r->err, "%s: %s %d of %s %d do not make %s x hidden_size %d", r->name, k->heads, mb->n_heads,
                         k->head_dim, mb->head_dim, k->expand, expand * c->hidden);
    if (mb->n_heads % mb->n_groups)
        return loom_errf(r->err, "%s: %s %d is not a multiple of %s %d", r->name, k->heads, mb->n_heads, k->groups,
                         mb->n_groups);
    if (mb->conv_kernel < 2 || mb->conv_kernel > CONV_MAX_KERNEL)
        return loom_errf(r->err, "%s: %s %d: from 2 to %d taps", r->name, k->conv, mb->conv_kernel, CONV_MAX_KERNEL);
    mb->dt_min = 0, mb->dt_max = INFINITY;
    if (limit && !cJSON_IsNull(limit) &&
        (!cJSON_IsArray(limit) || cJSON_GetArraySize(limit) != 2 ||
         get_limit(r, cJSON_GetArrayItem(limit, 0), &mb->dt_min) ||
         get_limit(r, cJSON_GetArrayItem(limit, 1), &mb->dt_max)))
        return loom_errf(r->err, "%s: field 'time_step_limit' must hold two numbers", r->name);
    return 0;
}

/* Granite 4.0-H: Mamba-2 layers (mamba or linear_attention) beside attention ones, attention
 * without RoPE unless position_embedding_type is rope; Granite's multipliers (parse_body's),
 * experts with a shared MLP (shared_intermediate_size) in every layer. */
int parse_granite_hybrid(reader *r, model_config *c) {
    static const mamba_names k = {"mamba_n_heads",
                                  "mamba_d_head",
                                  "mamba_n_groups",
                                  "mamba_d_state",
                                  "mamba_d_conv",
                                  "mamba_expand",
                                  "mamba_conv_bias",
                                  "mamba_proj_bias",
                                  128,
                                  0,
                                  1,
                                  256};
    static const layer_name names[] = {{"mamba", MIXER_MAMBA2},
                                       {"linear_attention", MIXER_MAMBA2},
                                       {"attention", MIXER_ATTENTION},
                                       {"full_attention", MIXER_ATTENTION}};
    if (parse_mamba(r, c, &k) ||
        cfg_int(r, r->root, "shared_intermediate_size", 1024, false, 0, &c->shared_intermediate))
        return -1;
    const char *pe = cfg_str(r->root, "position_embedding_type");
    if (pe && strcmp(pe, "rope") && strcmp(pe, "nope"))
        return loom_errf(r->err, "%s: position_embedding_type '%s' (rope, nope or null)", r->name, pe);
    c->no_rope = !pe || !strcmp(pe, "nope");
    return parse_mixers(r, c, "layer_types", names, 4, MIXER_MAMBA2, 0);
}

/* Qwen3.5's text model (and Qwen3.5-MoE's, Qwen3-Next's): layer_types of linear_attention
 * (Gated DeltaNet) and full_attention, else every full_attention_interval-th layer attends; the
 * DeltaNet's heads and convolution. Its full attention is gated and its norms zero-centred (the
 * architecture's, arch.c). */
int parse_qwen3_5(reader *r, model_config *c) {
    static const layer_name names[] = {{"linear_attention", MIXER_GATED_DELTA}, {"full_attention", MIXER_ATTENTION}};
    const cJSON *root = r->root;
    gdn_config *g = &c->gdn;
    int interval;
    if (cfg_int(r, root, "linear_num_key_heads", 16, false, 1, &g->k_heads) ||
        cfg_int(r, root, "linear_num_value_heads", 32, false, 1, &g->v_heads) ||
        cfg_int(r, root, "linear_key_head_dim", 128, false, 1, &g->k_dim) ||
        cfg_int(r, root, "linear_value_head_dim", 128, false, 1, &g->v_dim) ||
        cfg_int(r, root, "linear_conv_kernel_dim", 4, false, 1, &g->conv_kernel) ||
        cfg_int(r, root, "full_attention_interval", 4, false, 1, &interval))
        return -1;
    if (g->k_dim > DELTA_MAX_DIM || g->v_dim > DELTA_MAX_DIM)
        return loom_errf(r->err, "%s: linear attention heads of %d keys and %d values: at most %d each", r->name,
                         g->k_dim, g->v_dim, DELTA_MAX_DIM);
    if (g->conv_kernel < 2 || g->conv_kernel > CONV_MAX_KERNEL)
        return loom_errf(r->err, "%s: linear_conv_kernel_dim %d: from 2 to %d taps", r->name, g->conv_kernel,
                         CONV_MAX_KERNEL);
    if (g->v_heads % g->k_heads)
        return loom_errf(r->err, "%s: linear_num_value_heads %d is not a multiple of linear_num_key_heads %d", r->name,
                         g->v_heads, g->k_heads);
    return parse_mixers(r, c, "layer_types", names, 2, MIXER_GATED_DELTA, interval);
}

/* Nemotron-H's older configs spell their layers as one character each. */
static const char *const pattern_kinds = "M*-E"; /* Mamba-2, attention, MLP, mixture of experts */

int hybrid_layer_count(const reader *r) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(r->root, "layers_block_type");
    const char *pattern = cfg_str(r->root, "hybrid_override_pattern");
    return cJSON_IsArray(list) ? cJSON_GetArraySize(list) : pattern ? (int)strlen(pattern) : 0;
}

/* Nemotron-H: each layer one block after its norm, Mamba-2, attention without RoPE, a
 * squared-ReLU MLP or experts (squared ReLU without a gate, DeepSeek-V3's routing: config.c's
 * parse_deepseek_moe), listed by layers_block_type (or hybrid_override_pattern), which gives
 * the layer count. */
int parse_nemotron_h(reader *r, model_config *c) {
    static const mamba_names k = {"mamba_num_heads",
                                  "mamba_head_dim",
                                  "n_groups",
                                  "ssm_state_size",
                                  "conv_kernel",
                                  NULL,
                                  "use_conv_bias",
                                  "use_bias",
                                  128,
                                  64,
                                  8,
                                  128};
    static const layer_name names[] = {
        {"linear_attention", MIXER_MAMBA2}, {"mamba", MIXER_MAMBA2}, {"full_attention", MIXER_ATTENTION},
        {"attention", MIXER_ATTENTION},     {"mlp", MIXER_MLP},      {"moe", MIXER_MOE}};
    const char *pattern = cfg_str(r->root, "hybrid_override_pattern");
    c->n_layers = hybrid_layer_count(r);
    if (!c->n_layers) return loom_errf(r->err, "%s: missing field 'layers_block_type'", r->name);
    if (parse_mamba(r, c, &k) || cfg_float(r, r->root, "layer_norm_epsilon", 1e-5, false, &c->rms_eps)) return -1;
    const char *mlp_act = cfg_str(r->root, "mlp_hidden_act"), *mamba_act = cfg_str(r->root, "mamba_hidden_act");
    if (mlp_act && strcmp(mlp_act, "relu2"))
        return loom_errf(r->err, "%s: mlp_hidden_act '%s' is not supported (relu2 is)", r->name, mlp_act);
    if (mamba_act && strcmp(mamba_act, "silu"))
        return loom_errf(r->err, "%s: mamba_hidden_act '%s' is not supported (silu is)", r->name, mamba_act);
    if (cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(r->root, "layers_block_type"))) {
        if (parse_mixers(r, c, "layers_block_type", names, 6, MIXER_MAMBA2, 0)) return -1;
    } else {
        if (c->n_layers > (int)sizeof c->mixer)
            return loom_errf(r->err, "%s: %d layers: at most %zu", r->name, c->n_layers, sizeof c->mixer);
        for (int l = 0; l < c->n_layers; l++) {
            const char *at = strchr(pattern_kinds, pattern[l]);
            if (!at || !pattern[l])
                return loom_errf(r->err, "%s: hybrid_override_pattern[%d] '%c': one of M, *, - and E", r->name, l,
                                 pattern[l]);
            static const enum mixer_kind kinds[] = {MIXER_MAMBA2, MIXER_ATTENTION, MIXER_MLP, MIXER_MOE};
            c->mixer[l] = kinds[at - pattern_kinds];
        }
    }
    bool moe = false;
    for (int l = 0; l < c->n_layers; l++) {
        moe |= c->mixer[l] == MIXER_MOE;
        c->recurrent |= mixer_is_recurrent(c->mixer[l]);
    }
    c->no_rope = true;
    if (!moe) { /* its config sizes experts that no layer has */
        c->n_experts = 0;
        return 0;
    }
    const cJSON *latent = cJSON_GetObjectItemCaseSensitive(r->root, "moe_latent_size");
    if (latent && !cJSON_IsNull(latent))
        return loom_errf(r->err,
                         "%s: moe_latent_size: experts on a latent projection (Nemotron 3 Super's) are not "
                         "supported",
                         r->name);
    if (!c->n_experts) return loom_errf(r->err, "%s: layers of experts ('moe') but no n_routed_experts", r->name);
    return cfg_int(r, r->root, "moe_shared_expert_intermediate_size", 7688, false, 0, &c->shared_intermediate);
}

/* Mamba-2 alone: every layer a Mamba-2 mixer after its norm. */
int parse_mamba2(reader *r, model_config *c) {
    static const mamba_names k = {
        "num_heads", "head_dim", "n_groups", "state_size", "conv_kernel", "expand", "use_conv_bias", "use_bias",
        128,         64,         8,          128};
    if (parse_mamba(r, c, &k) || cfg_float(r, r->root, "layer_norm_epsilon", 1e-5, false, &c->rms_eps)) return -1;
    const char *act = cfg_str(r->root, "hidden_act");
    if (act && strcmp(act, "silu"))
        return loom_errf(r->err, "%s: hidden_act '%s' is not supported (silu is)", r->name, act);
    return parse_mixers(r, c, "layer_types", NULL, 0, MIXER_MAMBA2, 0);
}

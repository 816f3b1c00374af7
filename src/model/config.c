/* config.json parsing. Defaults follow transformers' configuration classes for the
 * architectures loom supports; anything required and absent is an error naming the field. */
#include "model/config.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/arch/arch.h"
#include "model/config_read.h"
#include "util/err.h"
#include "util/file.h"

/* A number field; returns 0 if absent or null (then *out = def), -1 on a type error. */
int cfg_num(reader *r, const cJSON *obj, const char *key, double def, bool required, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) {
        if (required) return loom_errf(r->err, "%s: missing field '%s'", r->name, key);
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return loom_errf(r->err, "%s: field '%s' must be a number", r->name, key);
    *out = v->valuedouble;
    return 0;
}

int cfg_int(reader *r, const cJSON *obj, const char *key, int def, bool required, int min, int *out) {
    double d = def;
    if (cfg_num(r, obj, key, def, required, &d)) return -1;
    if (d != floor(d) || d < min || d > 1e9)
        return loom_errf(r->err, "%s: field '%s' must be an integer >= %d (got %g)", r->name, key, min, d);
    *out = (int)d;
    return 0;
}

int cfg_float(reader *r, const cJSON *obj, const char *key, double def, bool required, float *out) {
    double d = def;
    if (cfg_num(r, obj, key, def, required, &d)) return -1;
    if (!isfinite((float)d))
        return loom_errf(r->err, "%s: field '%s' must be a finite number (got %g)", r->name, key, d);
    *out = (float)d;
    return 0;
}

int cfg_bool(reader *r, const char *key, bool def, bool *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->root, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsBool(v)) return loom_errf(r->err, "%s: field '%s' must be true or false", r->name, key);
    *out = cJSON_IsTrue(v);
    return 0;
}

const char *cfg_str(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* YaRN's mscale: how much a context stretched `scale` times sharpens attention. */
static double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * log(scale) + 1.0; }

/* YaRN, as transformers' _compute_yarn_parameters reads it: the attention factor defaults to
 * mscale(factor, mscale) / mscale(factor, mscale_all_dim) when both are set, else to
 * mscale(factor); the frequencies are computed in rope.c. */
static int parse_yarn(reader *r, model_config *c, const cJSON *s) {
    float mscale, attention_factor;
    c->rope_kind = ROPE_YARN;
    if (cfg_int(r, s, "original_max_position_embeddings", c->max_pos, false, 1, &c->rope_orig_max_pos) ||
        cfg_float(r, s, "beta_fast", 32.0, false, &c->rope_beta_fast) ||
        cfg_float(r, s, "beta_slow", 1.0, false, &c->rope_beta_slow) ||
        cfg_float(r, s, "mscale", 0.0, false, &mscale) ||
        cfg_float(r, s, "mscale_all_dim", 0.0, false, &c->rope_mscale_all_dim) ||
        cfg_float(r, s, "attention_factor", -1.0, false, &attention_factor))
        return -1;
    const cJSON *factor = cJSON_GetObjectItemCaseSensitive(s, "factor");
    if (!factor || cJSON_IsNull(factor)) c->rope_factor = (float)c->max_pos / (float)c->rope_orig_max_pos;
    if (!(c->rope_factor > 0)) return loom_errf(r->err, "%s: rope 'factor' must be positive", r->name);
    /* "or 32", "or 1" in transformers: zero means the default too */
    if (c->rope_beta_fast == 0) c->rope_beta_fast = 32;
    if (c->rope_beta_slow == 0) c->rope_beta_slow = 1;
    const cJSON *truncate = cJSON_GetObjectItemCaseSensitive(s, "truncate");
    c->rope_truncate = !cJSON_IsFalse(truncate);
    if (attention_factor >= 0) c->rope_attention_factor = attention_factor;
    else if (mscale != 0 && c->rope_mscale_all_dim != 0)
        c->rope_attention_factor =
            (float)(yarn_mscale(c->rope_factor, mscale) / yarn_mscale(c->rope_factor, c->rope_mscale_all_dim));
    else c->rope_attention_factor = (float)yarn_mscale(c->rope_factor, 1.0);
    return 0;
}

/* Where the RoPE settings are: transformers 5 writes "rope_parameters" (theta inside), older
 * versions "rope_theta" plus an optional "rope_scaling"; accept both. Models whose layer types
 * rotate differently (Gemma 3) nest one set per type: the full-attention layers' are the
 * model's. NULL: none beyond rope_theta. */
static const cJSON *rope_params(const reader *r) {
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(r->root, "rope_parameters");
    const cJSON *scaling = cJSON_GetObjectItemCaseSensitive(r->root, "rope_scaling");
    if (cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(params, "full_attention")))
        params = cJSON_GetObjectItemCaseSensitive(params, "full_attention");
    return cJSON_IsObject(scaling) ? scaling : cJSON_IsObject(params) ? params : NULL;
}

/* longrope (transformers' _compute_longrope_parameters): the attention factor defaults to
 * sqrt(1 + ln(factor) / ln(original context)), factor to max_position_embeddings over the
 * original context, which Phi-3 keeps at the top level (4096 when absent, and first). The
 * factor lists are read with the rotary width (parse_rope_dim). */
static int parse_longrope(reader *r, model_config *c, const cJSON *s) {
    bool phi3 = !strcmp(c->arch, "Phi3ForCausalLM");
    float attention_factor;
    c->rope_kind = ROPE_LONGROPE;
    if (cfg_int(r, s, "original_max_position_embeddings", c->max_pos, false, 1, &c->rope_orig_max_pos) ||
        (phi3 && cfg_int(r, r->root, "original_max_position_embeddings", 4096, false, 1, &c->rope_orig_max_pos)) ||
        cfg_float(r, s, "factor", (double)c->max_pos / c->rope_orig_max_pos, false, &c->rope_factor) ||
        cfg_float(r, s, "attention_factor", -1.0, false, &attention_factor))
        return -1;
    if (!(c->rope_factor > 0)) return loom_errf(r->err, "%s: rope 'factor' must be positive", r->name);
    if (attention_factor >= 0) c->rope_attention_factor = attention_factor;
    else if (c->rope_factor > 1 && c->rope_orig_max_pos > 1)
        c->rope_attention_factor = (float)sqrt(1 + log(c->rope_factor) / log(c->rope_orig_max_pos));
    return 0;
}

static int parse_rope(reader *r, model_config *c, double default_theta) {
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(r->root, "rope_parameters");
    if (cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(params, "full_attention")))
        params = cJSON_GetObjectItemCaseSensitive(params, "full_attention");
    if (cfg_float(r, r->root, "rope_theta", default_theta, false, &c->rope_theta)) return -1;
    if (cJSON_IsObject(params) && cfg_float(r, params, "rope_theta", c->rope_theta, false, &c->rope_theta)) return -1;
    const cJSON *s = rope_params(r);
    c->rope_kind = ROPE_DEFAULT;
    c->rope_factor = 1;
    c->rope_attention_factor = 1;
    if (!s) return 0;
    const char *type = cfg_str(s, "rope_type");
    if (!type) type = cfg_str(s, "type");
    if (!type || !strcmp(type, "default")) return 0;
    /* Phi-3's config class reads its older names for longrope */
    if (!strcmp(type, "longrope") || !strcmp(type, "su") ||
        (!strcmp(c->arch, "Phi3ForCausalLM") && !strcmp(type, "yarn")))
        return parse_longrope(r, c, s);
    if (cfg_float(r, s, "factor", 1.0, strcmp(type, "yarn") != 0, &c->rope_factor)) return -1;
    if (!strcmp(type, "linear")) {
        c->rope_kind = ROPE_LINEAR;
        return 0;
    }
    if (!strcmp(type, "llama3")) {
        c->rope_kind = ROPE_LLAMA3;
        if (cfg_float(r, s, "low_freq_factor", 1.0, true, &c->rope_low_freq) ||
            cfg_float(r, s, "high_freq_factor", 4.0, true, &c->rope_high_freq) ||
            cfg_int(r, s, "original_max_position_embeddings", 8192, true, 1, &c->rope_orig_max_pos))
            return -1;
        if (c->rope_high_freq <= c->rope_low_freq)
            return loom_errf(r->err, "%s: rope high_freq_factor must exceed low_freq_factor", r->name);
        return 0;
    }
    if (!strcmp(type, "yarn")) return parse_yarn(r, c, s);
    return loom_errf(r->err, "%s: unsupported rope type '%s' (supported: default, linear, llama3, yarn, longrope)",
                     r->name, type);
}

/* A longrope factor list of `n` positive numbers. */
static int get_factors(reader *r, const cJSON *s, const char *key, int n, float *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key), *e;
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != n)
        return loom_errf(r->err, "%s: rope '%s' must list %d factors (one per rotary pair)", r->name, key, n);
    int i = 0;
    cJSON_ArrayForEach(e, v) {
        if (!cJSON_IsNumber(e) || !(e->valuedouble > 0) || !isfinite(e->valuedouble))
            return loom_errf(r->err, "%s: rope '%s'[%d] must be a positive number", r->name, key, i);
        out[i++] = (float)e->valuedouble;
    }
    return 0;
}

/* The rotary width, once head_dim is final: head_dim x partial_rotary_factor (in the RoPE
 * settings or at the top level), truncated as transformers' int() does; then longrope's
 * factor lists, one per pair of it. */
static int parse_rope_dim(reader *r, model_config *c, double default_partial) {
    const cJSON *s = rope_params(r);
    float partial;
    if (cfg_float(r, r->root, "partial_rotary_factor", default_partial, false, &partial) ||
        (s && cfg_float(r, s, "partial_rotary_factor", partial, false, &partial)))
        return -1;
    c->rope_dim = partial > 0 && partial <= 1 ? (int)(c->head_dim * (double)partial) : 0;
    if (c->rope_dim < 2 || c->rope_dim % 2)
        return loom_errf(r->err,
                         "%s: partial_rotary_factor %g of head_dim %d: the rotary width must be even and positive",
                         r->name, partial, c->head_dim);
    if (c->rope_kind != ROPE_LONGROPE) return 0;
    return get_factors(r, s, "short_factor", c->rope_dim / 2, c->rope_short) ||
           get_factors(r, s, "long_factor", c->rope_dim / 2, c->rope_long);
}

static int parse_eos(reader *r, model_config *c) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->root, "eos_token_id");
    c->n_eos = 0;
    if (!v || cJSON_IsNull(v)) return 0;
    if (cJSON_IsNumber(v)) {
        c->eos_ids[c->n_eos++] = v->valueint;
        return 0;
    }
    if (!cJSON_IsArray(v)) return loom_errf(r->err, "%s: field 'eos_token_id' must be an id or a list", r->name);
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        if (!cJSON_IsNumber(e)) return loom_errf(r->err, "%s: 'eos_token_id' entries must be ids", r->name);
        if (c->n_eos < (int)(sizeof c->eos_ids / sizeof c->eos_ids[0])) c->eos_ids[c->n_eos++] = e->valueint;
    }
    return 0;
}

/* A string field that must be one of `names` (NULL-terminated); *out = its index, or def if absent. */
static int get_choice(reader *r, const char *key, const char *const *names, int def, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->root, key);
    *out = def;
    if (!v || cJSON_IsNull(v)) return 0;
    char list[160] = "";
    for (int i = 0; names[i]; i++) {
        if (cJSON_IsString(v) && !strcmp(v->valuestring, names[i])) return *out = i, 0;
        strcat(strcat(list, i ? ", " : ""), names[i]);
    }
    return loom_errf(r->err, "%s: unsupported %s %s%s%s (supported: %s)", r->name, key, cJSON_IsString(v) ? "'" : "",
                     cJSON_IsString(v) ? v->valuestring : "value", cJSON_IsString(v) ? "'" : "", list);
}

/* DeepSeek's routing and layer layout. Its defaults are those of transformers' config classes,
 * except where the V3 model ignores a field: its router always scores with a sigmoid and picks
 * groups by their two best (noaux_tc), which is what its checkpoints declare. Like vLLM (and
 * DeepSeek's own code), loom honours norm_topk_prob and moe_layer_freq in V2 as well, which
 * transformers' V2 ignores; every released V2 config has them false and 1. */
static int parse_deepseek_moe(reader *r, model_config *c) {
    static const char *const methods[] = {"greedy", "group_limited_greedy", "noaux_tc", NULL};
    static const char *const scoring[] = {"softmax", "sigmoid", NULL};
    /* Nemotron-H's router is V3's (transformers' NemotronHTopkRouter), its config without these keys */
    bool v3 = !strcmp(c->arch, "DeepseekV3ForCausalLM") || !strcmp(c->arch, "NemotronHForCausalLM");
    int method, score, first_dense, freq, shared;
    c->routed_scale = 1;
    if (get_choice(r, "topk_method", methods, v3 ? TOPK_NOAUX_TC : TOPK_GREEDY, &method) ||
        get_choice(r, "scoring_func", scoring, v3, &score) ||
        cfg_int(r, r->root, "n_group", 1, false, 1, &c->n_group) ||
        cfg_int(r, r->root, "topk_group", 1, false, 1, &c->topk_group) ||
        cfg_float(r, r->root, "routed_scaling_factor", 1.0, false, &c->routed_scale) ||
        cfg_int(r, r->root, "first_k_dense_replace", 0, false, 0, &first_dense) ||
        cfg_int(r, r->root, "moe_layer_freq", 1, false, 1, &freq) ||
        cfg_int(r, r->root, "n_shared_experts", 0, false, 0, &shared))
        return -1;
    c->topk_method = (enum topk_method)method;
    c->sigmoid_scores = score == 1;
    if (!(c->routed_scale > 0)) return loom_errf(r->err, "%s: field 'routed_scaling_factor' must be positive", r->name);
    if (first_dense > c->n_layers)
        return loom_errf(r->err, "%s: first_k_dense_replace %d exceeds the %d layers", r->name, first_dense,
                         c->n_layers);
    for (int l = 0; l < c->n_layers; l++)
        if (l < first_dense || l % freq) c->mlp_only[l] = 1;
    if ((long long)shared * c->moe_intermediate > INT_MAX)
        return loom_errf(r->err, "%s: n_shared_experts %d x moe_intermediate_size %d is too large", r->name, shared,
                         c->moe_intermediate);
    if (shared) c->shared_intermediate = shared * c->moe_intermediate;
    if (c->topk_method == TOPK_GREEDY) return 0;
    int per = c->n_experts / c->n_group;
    if (c->n_experts % c->n_group)
        return loom_errf(r->err, "%s: n_group %d does not divide the %d experts", r->name, c->n_group, c->n_experts);
    if (c->topk_group > c->n_group)
        return loom_errf(r->err, "%s: topk_group %d exceeds n_group %d", r->name, c->topk_group, c->n_group);
    if (c->top_k > c->topk_group * per)
        return loom_errf(r->err, "%s: num_experts_per_tok %d exceeds the %d experts of topk_group %d groups", r->name,
                         c->top_k, c->topk_group * per, c->topk_group);
    if (c->topk_method == TOPK_NOAUX_TC && per < 2)
        return loom_errf(r->err, "%s: noaux_tc scores a group by its two best experts; groups of %d have fewer",
                         r->name, per);
    return 0;
}

/* Multi-head latent attention's dimensions (present when kv_lora_rank is). The rotary part is
 * what RoPE tables are built for, so it becomes head_dim, as transformers' config sets it. */
static int parse_mla(reader *r, model_config *c) {
    mla_config *a = &c->mla;
    const cJSON *root = r->root;
    if (!cJSON_GetObjectItemCaseSensitive(root, "kv_lora_rank")) return 0;
    if (cfg_int(r, root, "kv_lora_rank", 0, true, 1, &a->kv_lora_rank) ||
        cfg_int(r, root, "q_lora_rank", 0, false, 0, &a->q_lora_rank) ||
        cfg_int(r, root, "qk_nope_head_dim", 0, true, 1, &a->qk_nope_head_dim) ||
        cfg_int(r, root, "qk_rope_head_dim", 0, true, 2, &a->qk_rope_head_dim) ||
        cfg_int(r, root, "v_head_dim", 0, true, 1, &a->v_head_dim) ||
        cfg_bool(r, "rope_interleave", true, &a->rope_interleave))
        return -1;
    if (a->qk_rope_head_dim % 2 || a->qk_rope_head_dim > CONFIG_MAX_HEAD_DIM)
        return loom_errf(r->err, "%s: qk_rope_head_dim %d must be even for RoPE, and at most 1024", r->name,
                         a->qk_rope_head_dim);
    c->head_dim = a->qk_rope_head_dim;
    return 0;
}

/* Mixture-of-experts fields, as Mixtral, OLMoE, Qwen2/3-MoE and GraniteMoE name them. */
static int parse_moe(reader *r, model_config *c) {
    const cJSON *root = r->root;
    const char *count = cJSON_GetObjectItemCaseSensitive(root, "num_experts")        ? "num_experts"
                        : cJSON_GetObjectItemCaseSensitive(root, "n_routed_experts") ? "n_routed_experts"
                        : cJSON_GetObjectItemCaseSensitive(root, "moe_num_experts")  ? "moe_num_experts" /* ERNIE */
                                                                                     : "num_local_experts";
    const char *per_token = cJSON_GetObjectItemCaseSensitive(root, "moe_k") ? "moe_k" : "num_experts_per_tok";
    if (cfg_int(r, root, count, 0, false, 0, &c->n_experts)) return -1;
    if (!c->n_experts) return 0;
    if (cfg_int(r, root, per_token, 2, false, 1, &c->top_k) ||
        cfg_int(r, root, "moe_intermediate_size", c->intermediate, false, 1, &c->moe_intermediate) ||
        cfg_int(r, root, "shared_expert_intermediate_size", 0, false, 0, &c->shared_intermediate) ||
        cfg_int(r, root, "decoder_sparse_step", 1, false, 1, &c->sparse_step) ||
        cfg_bool(r, "norm_topk_prob", false, &c->norm_topk))
        return -1;
    if (c->n_experts > 512)
        return loom_errf(r->err, "%s: %d experts: at most 512 are supported", r->name, c->n_experts);
    if (c->top_k > 64) return loom_errf(r->err, "%s: %s %d: at most 64 are supported", r->name, per_token, c->top_k);
    if (c->top_k > c->n_experts)
        return loom_errf(r->err, "%s: %s %d exceeds the %d experts", r->name, per_token, c->top_k, c->n_experts);
    if (c->n_layers > (int)sizeof c->mlp_only)
        return loom_errf(r->err, "%s: %d layers: at most %zu in a mixture-of-experts model", r->name, c->n_layers,
                         sizeof c->mlp_only);
    const cJSON *only = cJSON_GetObjectItemCaseSensitive(root, "mlp_only_layers"), *l;
    if (only && !cJSON_IsNull(only) && !cJSON_IsArray(only))
        return loom_errf(r->err, "%s: field 'mlp_only_layers' must be a list of layer indices", r->name);
    cJSON_ArrayForEach(l, only) {
        if (!cJSON_IsNumber(l) || l->valueint < 0 || l->valueint >= c->n_layers)
            return loom_errf(r->err, "%s: 'mlp_only_layers' entries must be layers 0..%d", r->name, c->n_layers - 1);
        c->mlp_only[l->valueint] = 1;
    }
    const cJSON *clip = cJSON_GetObjectItemCaseSensitive(root, "clip_qkv");
    if (clip && !cJSON_IsNull(clip)) return loom_errf(r->err, "%s: field 'clip_qkv' is not supported", r->name);
    return parse_deepseek_moe(r, c);
}

static int parse_body(reader *r, model_config *c);
static cJSON *gemma3_text_defaults(const cJSON *text);

/* ERNIE 4.5 (transformers' Ernie4_5Config / Ernie4_5_MoeConfig defaults): biases on every
 * projection or on none (use_bias), head_dim 128 on the dense model, tied embeddings; the MoE
 * model's experts in the layers from moe_layer_start_index to moe_layer_end_index (-1: the last)
 * every moe_layer_interval, with moe_num_shared_experts experts' width of shared MLP beside them.
 * (moe_norm_min, the floor of the renormalising sum, is left out: softmax scores never near it.) */
static int parse_ernie(reader *r, model_config *c) {
    const cJSON *root = r->root;
    bool bias;
    if (cfg_bool(r, "use_bias", false, &bias) || cfg_bool(r, "tie_word_embeddings", true, &c->tie_embeddings))
        return -1;
    c->attention_bias = c->mlp_bias = bias;
    if (!c->n_experts) {
        if (cfg_int(r, root, "head_dim", 128, false, 1, &c->head_dim)) return -1;
        if (c->head_dim % 2 || c->head_dim > CONFIG_MAX_HEAD_DIM)
            return loom_errf(r->err, "%s: head_dim %d must be even for RoPE, and at most 1024", r->name, c->head_dim);
        c->attention_mult = 1.0f / sqrtf((float)c->head_dim);
        return 0;
    }
    int start, end, interval, shared;
    if (cfg_int(r, root, "moe_layer_start_index", 1, false, 0, &start) ||
        cfg_int(r, root, "moe_layer_end_index", -1, false, -1, &end) ||
        cfg_int(r, root, "moe_layer_interval", 1, false, 1, &interval) ||
        cfg_int(r, root, "moe_num_shared_experts", 2, false, 0, &shared))
        return -1;
    if (end == -1) end = c->n_layers - 1;
    for (int l = 0; l < c->n_layers; l++) c->mlp_only[l] = !((l + 1) % interval == 0 && l >= start && l <= end);
    if ((long long)shared * c->moe_intermediate > INT_MAX)
        return loom_errf(r->err, "%s: moe_num_shared_experts %d x moe_intermediate_size %d is too large", r->name,
                         shared, c->moe_intermediate);
    c->shared_intermediate = shared * c->moe_intermediate;
    return 0;
}

static bool is_gemma(const model_config *c) {
    return !strcmp(c->arch, "Gemma2ForCausalLM") || !strcmp(c->arch, "Gemma3ForCausalLM");
}

/* Which layers attend within the window: "layer_types" (one "sliding_attention" or
 * "full_attention" per layer), else every `period`-th layer attends fully, as transformers
 * fills layer_types in. */
static int parse_layer_types(reader *r, model_config *c, int period) {
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(r->root, "layer_types"), *t;
    if (c->n_layers > (int)sizeof c->sliding_layer)
        return loom_errf(r->err, "%s: %d layers: at most %zu with layer_types", r->name, c->n_layers,
                         sizeof c->sliding_layer);
    c->layer_windows = true;
    if (!types || cJSON_IsNull(types)) {
        for (int l = 0; l < c->n_layers; l++) c->sliding_layer[l] = (l + 1) % period != 0;
        return 0;
    }
    if (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != c->n_layers)
        return loom_errf(r->err, "%s: field 'layer_types' must list one type for each of the %d layers", r->name,
                         c->n_layers);
    int l = 0;
    cJSON_ArrayForEach(t, types) {
        const char *v = cJSON_IsString(t) ? t->valuestring : "";
        if (strcmp(v, "sliding_attention") && strcmp(v, "full_attention"))
            return loom_errf(r->err, "%s: layer_types[%d] '%s': only sliding_attention and full_attention", r->name, l,
                             v);
        c->sliding_layer[l++] = !strcmp(v, "sliding_attention");
    }
    return 0;
}

/* A soft-capping field: absent is the default, null is none (0). */
static int get_softcap(reader *r, const char *key, double def, float *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->root, key);
    if (cJSON_IsNull(v)) return *out = 0, 0;
    if (cfg_float(r, r->root, key, def, false, out)) return -1;
    if (v && !(*out > 0)) return loom_errf(r->err, "%s: field '%s' must be positive (or null for none)", r->name, key);
    return 0;
}

/* Gemma 2 and 3 (transformers' Gemma2Config / Gemma3TextConfig defaults): GeGLU, scores
 * scaled by query_pre_attn_scalar, sliding and global layers (Gemma 2 alternating, Gemma 3 one
 * global in sliding_window_pattern), soft-capping (Gemma 2; Gemma 3's attention ignores
 * attn_logit_softcapping, as transformers' does), and Gemma 3's local RoPE base. */
static int parse_gemma(reader *r, model_config *c) {
    const cJSON *root = r->root;
    bool gemma3 = !strcmp(c->arch, "Gemma3ForCausalLM");
    const char *act = cfg_str(root, "hidden_activation");
    if (act && strcmp(act, "gelu_pytorch_tanh"))
        return loom_errf(r->err, "%s: unsupported hidden_activation '%s' (only gelu_pytorch_tanh)", r->name, act);
    c->gelu_tanh = true;
    float scalar;
    int pattern;
    if (cfg_int(r, root, "head_dim", 256, false, 1, &c->head_dim) ||
        cfg_float(r, root, "query_pre_attn_scalar", 256, false, &scalar) ||
        get_softcap(r, "final_logit_softcapping", gemma3 ? 0 : 30.0, &c->final_softcap) ||
        get_softcap(r, "attn_logit_softcapping", 50.0, &c->attn_softcap) ||
        cfg_int(r, root, "sliding_window", 4096, false, 1, &c->sliding_window) ||
        cfg_int(r, root, "sliding_window_pattern", gemma3 ? 6 : 2, false, 1, &pattern) ||
        cfg_bool(r, "tie_word_embeddings", true, &c->tie_embeddings) || parse_layer_types(r, c, pattern))
        return -1;
    if (c->head_dim % 2 || c->head_dim > CONFIG_MAX_HEAD_DIM)
        return loom_errf(r->err, "%s: head_dim %d must be even for RoPE, and at most 1024", r->name, c->head_dim);
    if (!(scalar > 0)) return loom_errf(r->err, "%s: field 'query_pre_attn_scalar' must be positive", r->name);
    c->attention_mult = 1.0f / sqrtf(scalar);
    if (gemma3) c->attn_softcap = 0;
    const cJSON *bidir = cJSON_GetObjectItemCaseSensitive(root, "use_bidirectional_attention");
    if (cJSON_IsTrue(bidir))
        return loom_errf(r->err, "%s: field 'use_bidirectional_attention': only causal attention is supported",
                         r->name);
    if (!gemma3) return 0;
    /* the sliding layers' RoPE: rope_parameters.sliding_attention, or rope_local_base_freq */
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
    const cJSON *local = cJSON_GetObjectItemCaseSensitive(params, "sliding_attention");
    if (cfg_float(r, root, "rope_local_base_freq", 10000.0, false, &c->rope_local_theta)) return -1;
    if (cJSON_IsObject(local)) {
        const char *type = cfg_str(local, "rope_type");
        if (type && strcmp(type, "default"))
            return loom_errf(r->err, "%s: rope_parameters.sliding_attention: rope type '%s' (only default)", r->name,
                             type);
        if (cfg_float(r, local, "rope_theta", c->rope_local_theta, false, &c->rope_local_theta)) return -1;
    }
    if (!(c->rope_local_theta > 0))
        return loom_errf(r->err, "%s: the sliding layers' rope_theta must be positive", r->name);
    return 0;
}

/* GPT-OSS (transformers' GptOssConfig defaults): q/k/v/o biases, head_dim 64, sliding (128)
 * and full layers alternating from a sliding one, the experts' clamped SwiGLU. The MoE fields
 * (num_local_experts, num_experts_per_tok) are parse_moe's; every layer is sparse. */
static int parse_gpt_oss(reader *r, model_config *c) {
    const cJSON *root = r->root;
    if (cfg_bool(r, "attention_bias", true, &c->attention_bias) ||
        cfg_int(r, root, "head_dim", 64, false, 2, &c->head_dim) ||
        cfg_int(r, root, "sliding_window", 128, false, 1, &c->sliding_window) ||
        cfg_float(r, root, "swiglu_limit", 7.0, false, &c->swiglu_limit) ||
        cfg_float(r, root, "swiglu_alpha", 1.702, false, &c->swiglu_alpha) || parse_layer_types(r, c, 2))
        return -1;
    if (!(c->swiglu_limit > 0)) return loom_errf(r->err, "%s: field 'swiglu_limit' must be positive", r->name);
    if (c->head_dim % 2 || c->head_dim > CONFIG_MAX_HEAD_DIM)
        return loom_errf(r->err, "%s: head_dim %d must be even for RoPE, and at most 1024", r->name, c->head_dim);
    c->attention_mult = 1.0f / sqrtf((float)c->head_dim);
    if (!c->n_experts) return loom_errf(r->err, "%s: missing field 'num_local_experts'", r->name);
    return 0;
}

/* An Eagle3 draft's own fields (eagle3_config), from `top`: EAGLE's config, or speculators'
 * outer one. norm_before_residual defaults as vLLM reads each format: true for speculators'
 * (vLLM's converter sets it when absent, though speculators' own class defaults to false), false
 * for EAGLE's (vLLM's getattr default, and EAGLE's own layer). */
static int parse_eagle3(reader *r, const cJSON *top, model_config *c, bool speculators) {
    eagle3_config *e = &c->eagle3;
    e->on = true;
    snprintf(e->layer, sizeof e->layer, "%s", speculators ? "layers.0" : "midlayer");
    reader t = {top, r->name, r->err};
    if (cfg_int(&t, top, "draft_vocab_size", c->vocab, false, 1, &e->draft_vocab) ||
        cfg_bool(&t, "norm_before_residual", speculators, &e->norm_before_residual) ||
        cfg_int(&t, top, "target_hidden_size", c->hidden, false, 1, &e->target_hidden))
        return -1;
    if (e->draft_vocab > c->vocab)
        return loom_errf(r->err, "%s: draft_vocab_size %d is larger than vocab_size %d", r->name, e->draft_vocab,
                         c->vocab);
    c->head_vocab = e->draft_vocab;
    static const char *const unbuilt[] = {"norm_before_fc", "fc_norm", "norm_output"};
    for (size_t i = 0; i < sizeof unbuilt / sizeof *unbuilt; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(top, unbuilt[i]);
        if (cJSON_IsTrue(v))
            return loom_errf(r->err, "%s: '%s' Eagle3 drafts are not supported (loom reads the plain layout)", r->name,
                             unbuilt[i]);
    }
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(top, "eagle_aux_hidden_state_layer_ids");
    const cJSON *ec = cJSON_GetObjectItemCaseSensitive(top, "eagle_config");
    if (!ids && cJSON_IsObject(ec)) ids = cJSON_GetObjectItemCaseSensitive(ec, "eagle_aux_hidden_state_layer_ids");
    if (ids && !cJSON_IsNull(ids)) {
        int n = cJSON_IsArray(ids) ? cJSON_GetArraySize(ids) : -1;
        if (n != 3)
            return loom_errf(r->err, "%s: 'eagle_aux_hidden_state_layer_ids' must list 3 layers (fc takes 3 states)",
                             r->name);
        for (int i = 0; i < 3; i++) {
            const cJSON *v = cJSON_GetArrayItem(ids, i);
            if (!cJSON_IsNumber(v) || v->valueint < 0)
                return loom_errf(r->err, "%s: 'eagle_aux_hidden_state_layer_ids' entries must be layer indices",
                                 r->name);
            e->aux_layers[i] = v->valueint;
        }
        e->n_aux = 3;
    }
    if (c->n_layers != 1)
        return loom_errf(r->err, "%s: an Eagle3 draft of %d layers (loom runs drafts of one layer)", r->name,
                         c->n_layers);
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(top, "speculators_config");
    const cJSON *pm = cJSON_IsObject(sc) ? cJSON_GetObjectItemCaseSensitive(sc, "proposal_methods") : NULL;
    const cJSON *first = cJSON_IsArray(pm) ? cJSON_GetArrayItem(pm, 0) : NULL;
    return cJSON_IsObject(first) ? cfg_int(r, first, "speculative_tokens", 0, false, 0, &e->spec_tokens) : 0;
}

static int parse(reader *r, model_config *c) {
    const cJSON *root = r->root;
    memset(c, 0, sizeof *c);
    const char *spec = cfg_str(root, "speculators_model_type");
    if (spec) { /* speculators' layout: the layer's config nested, the draft's own fields outside */
        const cJSON *tl = cJSON_GetObjectItemCaseSensitive(root, "transformer_layer_config");
        if (strcmp(spec, "eagle3"))
            return loom_errf(r->err, "%s: speculators_model_type '%s' is not supported (eagle3 is)", r->name, spec);
        if (!cJSON_IsObject(tl)) return loom_errf(r->err, "%s: missing field 'transformer_layer_config'", r->name);
        const char *type = cfg_str(tl, "model_type");
        if (type && strcmp(type, "llama") && strcmp(type, "qwen3"))
            return loom_errf(r->err,
                             "%s: an Eagle3 draft's transformer_layer_config of model_type '%s' (llama or qwen3)",
                             r->name, type);
        reader inner = {tl, r->name, r->err};
        snprintf(c->arch, sizeof c->arch, "Eagle3Speculator");
        if (parse_body(&inner, c)) return -1;
        c->eagle3.qk_norm = type && !strcmp(type, "qwen3");
        return parse_eagle3(r, root, c, true);
    }
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    const cJSON *a0 = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
    if (!cJSON_IsString(a0)) return loom_errf(r->err, "%s: missing field 'architectures'", r->name);
    snprintf(c->arch, sizeof c->arch, "%s", a0->valuestring);
    /* a bare decoder (Qwen3Model, LlamaModel) of a family loom builds: that family without
     * its head */
    size_t n = strlen(c->arch);
    char family[sizeof c->arch + 16];
    snprintf(family, sizeof family, "%.*sForCausalLM", n > 5 ? (int)n - 5 : 0, c->arch);
    if (n > 5 && !strcmp(c->arch + n - 5, "Model") && strlen(family) < sizeof c->arch && arch_supported(family)) {
        c->bare = true;
        snprintf(c->arch, sizeof c->arch, "%s", family);
    }
    /* a vision-language model of a family loom builds, as released (Qwen3.5): its text model,
     * from text_config; its weights under model.language_model. (weights.c), the vision tower
     * not loaded */
    static const char *const vlm[][2] = {{"Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM"},
                                         {"Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForCausalLM"},
                                         {"Gemma3ForConditionalGeneration", "Gemma3ForCausalLM"}};
    for (size_t i = 0; i < sizeof vlm / sizeof *vlm; i++) {
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(root, "text_config");
        if (strcmp(c->arch, vlm[i][0])) continue;
        if (!cJSON_IsObject(text)) return loom_errf(r->err, "%s: %s without a text_config", r->name, vlm[i][0]);
        snprintf(c->arch, sizeof c->arch, "%s", vlm[i][1]);
        c->text_of_vlm = true;
        cJSON *filled = gemma3_text_defaults(text);
        reader inner = {filled ? filled : text, r->name, r->err};
        int rc = parse_body(&inner, c) || parse_vision(r, c) ||
                 cfg_bool(r, "tie_word_embeddings", c->tie_embeddings, &c->tie_embeddings); /* the outer one rules */
        cJSON_Delete(filled);
        return rc ? -1 : 0;
    }
    if (parse_body(r, c)) return -1;
    return strcmp(c->arch, "LlamaForCausalLMEagle3") ? 0 : parse_eagle3(r, root, c, false);
}

/* A released Gemma 3's text_config names only what differs from Gemma3TextConfig's defaults
 * (gemma-3-4b-it's: the widths, the layers, RoPE's scaling and the window): a copy with the
 * defaults the shared fields would otherwise require, or NULL (not Gemma 3, or out of memory,
 * when the file is read as it is). */
static cJSON *gemma3_text_defaults(const cJSON *text) {
    const char *type = cfg_str(text, "model_type");
    if (!type || strcmp(type, "gemma3_text")) return NULL;
    cJSON *t = cJSON_Duplicate(text, 1);
    static const struct {
        const char *key;
        double value;
    } defaults[] = {{"vocab_size", 262208},
                    {"hidden_size", 2304},
                    {"intermediate_size", 9216},
                    {"num_hidden_layers", 26},
                    {"num_attention_heads", 8},
                    {"num_key_value_heads", 4},
                    {"max_position_embeddings", 131072}};
    for (size_t i = 0; t && i < sizeof defaults / sizeof *defaults; i++)
        if (!cJSON_GetObjectItemCaseSensitive(t, defaults[i].key))
            cJSON_AddNumberToObject(t, defaults[i].key, defaults[i].value);
    return t;
}

/* The fields every architecture shares, and what its family adds. */
static int parse_body(reader *r, model_config *c) {
    const cJSON *root = r->root;

    /* Qwen3.5-MoE's every layer is sparse: its config has no dense width; Mamba-2's has neither
     * an MLP nor attention; Nemotron-H's list of layer kinds stands for num_hidden_layers */
    bool all_sparse = !strcmp(c->arch, "Qwen3_5MoeForCausalLM"), mamba = !strcmp(c->arch, "Mamba2ForCausalLM");
    bool nemotron = !strcmp(c->arch, "NemotronHForCausalLM");
    int listed = nemotron ? hybrid_layer_count(r) : 0;
    if (cfg_int(r, root, "hidden_size", 0, true, 1, &c->hidden) ||
        cfg_int(r, root, "intermediate_size", all_sparse, !all_sparse && !mamba, !mamba, &c->intermediate) ||
        cfg_int(r, root, "num_hidden_layers", listed, !listed, 1, &c->n_layers) ||
        cfg_int(r, root, "num_attention_heads", mamba, !mamba, 1, &c->n_heads) ||
        cfg_int(r, root, "vocab_size", 0, true, 1, &c->vocab) ||
        cfg_int(r, root, "num_key_value_heads", c->n_heads, false, 1, &c->n_kv_heads) ||
        cfg_int(r, root, "max_position_embeddings", 2048, false, 1, &c->max_pos) ||
        cfg_float(r, root, "rms_norm_eps", 1e-6, false, &c->rms_eps))
        return -1;
    if (c->hidden % c->n_heads && !cJSON_GetObjectItemCaseSensitive(root, "head_dim"))
        return loom_errf(r->err, "%s: hidden_size %d is not a multiple of num_attention_heads %d", r->name, c->hidden,
                         c->n_heads);
    if (cfg_int(r, root, "head_dim", c->hidden / c->n_heads, false, 1, &c->head_dim)) return -1;
    c->head_vocab = c->vocab;
    if (c->head_dim % 2 || c->head_dim > CONFIG_MAX_HEAD_DIM)
        return loom_errf(r->err, "%s: head_dim %d must be even for RoPE, and at most 1024", r->name, c->head_dim);
    if (c->n_heads % c->n_kv_heads)
        return loom_errf(r->err, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", r->name,
                         c->n_heads, c->n_kv_heads);
    if (!(c->rms_eps > 0)) return loom_errf(r->err, "%s: field 'rms_norm_eps' must be positive", r->name);
    const char *act = cfg_str(root, "hidden_act");
    if (act && strcmp(act, "silu") && !is_gemma(c)) /* Gemma's is hidden_activation */
        return loom_errf(r->err, "%s: unsupported hidden_act '%s' (only silu)", r->name, act);
    if (parse_mla(r, c) || parse_rope(r, c, strcmp(c->arch, "Gemma3ForCausalLM") ? 10000.0 : 1e6)) return -1;
    if (cfg_bool(r, "tie_word_embeddings", false, &c->tie_embeddings) ||
        cfg_bool(r, "attention_bias", false, &c->attention_bias) || cfg_bool(r, "mlp_bias", false, &c->mlp_bias))
        return -1;
    if (cfg_int(r, root, "sliding_window", 0, false, 0, &c->sliding_window)) return -1;
    const cJSON *usw = cJSON_GetObjectItemCaseSensitive(root, "use_sliding_window");
    if (usw && !cJSON_IsTrue(usw)) c->sliding_window = 0; /* Qwen2 keeps a window it does not use */
    if (cfg_float(r, root, "embedding_multiplier", 1.0, false, &c->embedding_mult) ||
        cfg_float(r, root, "attention_multiplier", 1.0 / sqrt(c->head_dim), false, &c->attention_mult) ||
        cfg_float(r, root, "residual_multiplier", 1.0, false, &c->residual_mult) ||
        cfg_float(r, root, "logits_scaling", 1.0, false, &c->logits_scale))
        return -1;
    if (c->logits_scale == 0) return loom_errf(r->err, "%s: field 'logits_scaling' must be non-zero", r->name);
    if (is_gemma(c) && parse_gemma(r, c)) return -1;
    if (parse_moe(r, c) || cfg_int(r, root, "bos_token_id", -1, false, -1, &c->bos_id) || parse_eos(r, c)) return -1;
    if (!strncmp(c->arch, "Ernie4_5", 8) && parse_ernie(r, c)) return -1; /* after parse_moe: it reads the experts */
    if (!strcmp(c->arch, "GptOssForCausalLM") && parse_gpt_oss(r, c)) return -1;
    bool qwen3_5 = !strcmp(c->arch, "Qwen3_5ForCausalLM") || all_sparse || !strcmp(c->arch, "Qwen3NextForCausalLM");
    if (qwen3_5 && parse_qwen3_5(r, c)) return -1;
    if (all_sparse) c->intermediate = c->moe_intermediate; /* the one MLP width it has */
    if (!strcmp(c->arch, "GraniteMoeHybridForCausalLM") && parse_granite_hybrid(r, c)) return -1;
    if ((nemotron && parse_nemotron_h(r, c)) || (mamba && parse_mamba2(r, c))) return -1;
    if (parse_rope_dim(r, c, qwen3_5 ? 0.25 : 1.0)) return -1; /* head_dim is final */
    const char *dt = cfg_str(root, "torch_dtype");
    if (!dt) dt = cfg_str(root, "dtype");
    snprintf(c->dtype, sizeof c->dtype, "%s", dt ? dt : "");
    const cJSON *qc = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
    if (qc && !cJSON_IsNull(qc)) return quant_config_parse(&c->quant, qc, r->name, r->err);
    return 0;
}

int config_parse(model_config *c, const char *json, size_t len, const char *name, loom_err *err) {
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) return loom_errf(err, "%s: invalid JSON", name);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return loom_errf(err, "%s: expected a JSON object", name);
    }
    reader r = {root, name, err};
    int rc = parse(&r, c);
    cJSON_Delete(root);
    return rc;
}

int config_load_file(model_config *c, const char *path, loom_err *err) {
    size_t len;
    char *text = file_read_all(path, &len, err);
    if (!text) return -1;
    int rc = config_parse(c, text, len, path, err);
    free(text);
    return rc;
}

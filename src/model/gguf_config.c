/* A GGUF file's metadata as config.json text for config.c (see gguf_model.h): the keys
 * transformers' GGUF loader maps and the defaults its config classes (and loom's parser) fill
 * in, so both read one model; what each architecture's converter stored otherwise (experts,
 * latent attention, RoPE factor tensors, Granite's multipliers) by its row of gguf_arch.c's
 * table. Keys that would change the model and are not read are refused by name. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "model/arch/arch.h"
#include "model/gguf_arch.h"
#include "model/gguf_model.h"
#include "tensor/gguf_blocks.h"
#include "util/alloc.h"
#include "util/err.h"

typedef struct cfg_writer {
    const gguf_file *f; /* the first part: the metadata */
    const gguf_file *parts;
    int n_parts;
    const gguf_arch *a;
    const char *arch;
    cJSON *root;
    loom_err *err;
} cfg_writer;

/* Tensor `name` in whichever part holds it (a split file's tensors are spread over its parts). */
static const gguf_tensor *find_tensor(const cfg_writer *w, const char *name) {
    return gguf_parts_find_tensor(w->parts, w->n_parts, name);
}

/* `{arch}.<key>` as a number into json field `field`; required keys must be there. */
static int put_num(cfg_writer *w, const char *key, const char *field, bool required) {
    char full[160];
    snprintf(full, sizeof full, "%s.%s", w->arch, key);
    double v;
    int rc = gguf_get_f64(w->f, full, &v, w->err);
    if (rc < 0) return -1;
    if (rc > 0) return required ? loom_errf(w->err, "%s: missing key '%s'", w->f->name, full) : 0;
    cJSON_AddNumberToObject(w->root, field, v);
    return 0;
}

/* RoPE scaling as `{arch}.rope.scaling.*` states it */
static int put_rope_scaling(cfg_writer *w) {
    char key[160];
    gguf_str type;
    snprintf(key, sizeof key, "%s.rope.scaling.type", w->arch);
    int rc = gguf_get_str(w->f, key, &type, w->err);
    if (rc) return rc < 0 ? -1 : 0;
    char name[16];
    snprintf(name, sizeof name, "%.*s", (int)(type.n < 15 ? type.n : 15), type.p);
    if (!strcmp(name, "none")) return 0;
    if (strcmp(name, "linear") && strcmp(name, "yarn"))
        return loom_errf(w->err, "%s: key '%s' is '%s' (none, linear and yarn are read)", w->f->name, key, name);
    double factor = 1, orig = 0;
    snprintf(key, sizeof key, "%s.rope.scaling.factor", w->arch);
    if (gguf_get_f64(w->f, key, &factor, w->err) < 0) return -1;
    snprintf(key, sizeof key, "%s.rope.scaling.original_context_length", w->arch);
    if (gguf_get_f64(w->f, key, &orig, w->err) < 0) return -1;
    cJSON *s = cJSON_AddObjectToObject(w->root, "rope_scaling");
    cJSON_AddStringToObject(s, "rope_type", name);
    cJSON_AddNumberToObject(s, "factor", factor);
    if (orig > 0) cJSON_AddNumberToObject(s, "original_max_position_embeddings", orig);
    /* YaRN's ramp, where the converter copied it from the config (GPT-OSS's) */
    static const char *const ramp[][2] = {{"yarn_beta_fast", "beta_fast"}, {"yarn_beta_slow", "beta_slow"}};
    for (int i = 0; i < 2 && !strcmp(name, "yarn"); i++) {
        double v;
        snprintf(key, sizeof key, "%s.rope.scaling.%s", w->arch, ramp[i][0]);
        if ((rc = gguf_get_f64(w->f, key, &v, w->err)) < 0) return -1;
        if (!rc) cJSON_AddNumberToObject(s, ramp[i][1], v);
    }
    return 0;
}

/* tokenizer.ggml.<key> as config field `field`, if present */
static int put_token_id(cfg_writer *w, const char *key, const char *field) {
    char full[96];
    snprintf(full, sizeof full, "tokenizer.ggml.%s", key);
    int64_t id;
    int rc = gguf_get_i64(w->f, full, &id, w->err);
    if (rc) return rc < 0 ? -1 : 0;
    cJSON_AddNumberToObject(w->root, field, (double)id);
    return 0;
}

/* An F32 [rotary dims / 2] factor tensor's values into a new array `key` of s. */
static int put_factor_list(cfg_writer *w, cJSON *s, const char *key, const gguf_tensor *t, const char *name) {
    if (t->type != GT_F32 || t->ndim != 1)
        return loom_errf(w->err, "%s: tensor '%s' must be F32 [rotary dims / 2], not %s of %d dimensions", w->f->name,
                         name, gtype_table[t->type].name, t->ndim);
    cJSON *list = cJSON_AddArrayToObject(s, key);
    const float *v = t->data;
    for (int64_t i = 0; i < t->ne[0]; i++) cJSON_AddItemToArray(list, cJSON_CreateNumber(v[i]));
    return 0;
}

/* RoPE scaling stored as factor tensors, both longrope's form:
 * - Llama 3's, `rope_freqs.weight`: each rotary pair's frequency divided by its factor
 *   (llama.cpp's rope kernels divide theta by it), one list and no attention factor.
 *   (transformers' GGUF loader drops the tensor: it runs such a file without the scaling.)
 * - Phi-3's, `rope_factors_short.weight` and `rope_factors_long.weight`, with the context they
 *   switch at (rope.scaling.original_context_length) and the attention factor
 *   (rope.scaling.attn_factor). loom switches per pass, as transformers does, where llama.cpp
 *   chooses by the context it was started with. */
static int put_rope_factors(cfg_writer *w) {
    const gguf_tensor *freqs = find_tensor(w, ROPE_FREQS), *shrt = find_tensor(w, ROPE_SHORT),
                      *lng = find_tensor(w, ROPE_LONG);
    if (!freqs && !shrt && !lng) return 0;
    if (cJSON_GetObjectItemCaseSensitive(w->root, "rope_scaling") || (freqs && (shrt || lng)) || !shrt != !lng)
        return loom_errf(w->err,
                         "%s: RoPE scaling is %s.rope.scaling.type, or tensor '%s', or tensors '%s' and '%s': not "
                         "two of them, nor one of the last two",
                         w->f->name, w->arch, ROPE_FREQS, ROPE_SHORT, ROPE_LONG);
    cJSON *s = cJSON_AddObjectToObject(w->root, "rope_scaling");
    cJSON_AddStringToObject(s, "rope_type", "longrope");
    if (freqs) {
        const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(w->root, "max_position_embeddings");
        cJSON_AddNumberToObject(s, "original_max_position_embeddings", ctx ? ctx->valuedouble : 0);
        cJSON_AddNumberToObject(s, "attention_factor", 1.0);
        return put_factor_list(w, s, "short_factor", freqs, ROPE_FREQS) ||
                       put_factor_list(w, s, "long_factor", freqs, ROPE_FREQS)
                   ? -1
                   : 0;
    }
    char key[160];
    double orig, factor;
    snprintf(key, sizeof key, "%s.rope.scaling.original_context_length", w->arch);
    int rc = gguf_get_f64(w->f, key, &orig, w->err);
    if (rc) return rc < 0 ? -1 : loom_errf(w->err, "%s: tensor '%s' without key '%s'", w->f->name, ROPE_LONG, key);
    cJSON_AddNumberToObject(s, "original_max_position_embeddings", orig);
    cJSON_AddNumberToObject(w->root, "original_max_position_embeddings", orig); /* where Phi-3's config keeps it */
    snprintf(key, sizeof key, "%s.rope.scaling.attn_factor", w->arch);
    if ((rc = gguf_get_f64(w->f, key, &factor, w->err)) < 0) return -1;
    if (!rc) cJSON_AddNumberToObject(s, "attention_factor", factor);
    return put_factor_list(w, s, "short_factor", shrt, ROPE_SHORT) ||
                   put_factor_list(w, s, "long_factor", lng, ROPE_LONG)
               ? -1
               : 0;
}

/* Keys that change the model and that loom does not read: refused rather than ignored (and
 * experts in a dense architecture). */
static int refuse_unread(cfg_writer *w) {
    static const char *const keys[] = {"attention.clamp_kqv", "attention.causal", "rope.scaling.yarn_ext_factor",
                                       "rope.scaling.yarn_attn_factor"};
    /* read by put_rope_factors, put_deepseek, put_ernie_moe and put_multipliers where they apply
     * only */
    static const char *const longrope[] = {"rope.scaling.attn_factor"};
    static const char *const deepseek[] = {"attention.q_lora_rank", "expert_weights_scale", "expert_group_count"};
    static const char *const dense_lead[] = {"leading_dense_block_count", "expert_shared_count"};
    static const char *const interleave[] = {"interleave_moe_layer_step"};
    static const char *const multipliers[] = {"attention.scale", "embedding_scale", "residual_scale", "logit_scale"};
    const struct {
        const char *const *keys;
        size_t n;
        bool read;
    } lists[] = {{keys, 4, false},
                 {longrope, 1, find_tensor(w, ROPE_LONG) != NULL},
                 {deepseek, 3, w->a->deepseek},
                 {dense_lead, 2, w->a->deepseek || w->a->ernie_moe},
                 {interleave, 1, w->a->ernie_moe},
                 {multipliers, 4, w->a->multipliers}};
    char full[160];
    for (size_t l = 0; l < sizeof lists / sizeof *lists; l++)
        for (size_t i = 0; !lists[l].read && i < lists[l].n; i++) {
            snprintf(full, sizeof full, "%s.%s", w->arch, lists[l].keys[i]);
            if (gguf_find(w->f, full)) return loom_errf(w->err, "%s: key '%s' is not supported", w->f->name, full);
        }
    snprintf(full, sizeof full, "%s.expert_count", w->arch);
    if (!w->a->moe && gguf_find(w->f, full))
        return loom_errf(w->err, "%s: key '%s': experts in a '%s' file are not supported", w->f->name, full, w->arch);
    /* GraniteMoeShared's files are granitemoe ones with a shared expert, which loom does not run */
    snprintf(full, sizeof full, "%s.expert_shared_feed_forward_length", w->arch);
    const moe_layout *l = w->a->moe ? arch_moe_layout(w->a->hf) : NULL;
    if (l && !l->shared && gguf_find(w->f, full))
        return loom_errf(w->err, "%s: key '%s': a shared expert in a '%s' file (%s has none) is not supported",
                         w->f->name, full, w->arch, w->a->hf);
    return 0;
}

/* The experts' sizes and routing. Routing is a softmax over the router's logits (the only
 * gating function these architectures have but DeepSeek's, which may score by a sigmoid);
 * whether the top k weights are renormalised is the file's expert_weights_norm where it says,
 * else the architecture's own rule. */
static int put_experts(cfg_writer *w) {
    if (!w->a->moe) return 0;
    char key[160];
    int64_t gating = 1;
    snprintf(key, sizeof key, "%s.expert_gating_func", w->arch);
    if (gguf_get_i64(w->f, key, &gating, w->err) < 0) return -1;
    if (gating != 1 && !(w->a->deepseek && gating == 2))
        return loom_errf(w->err, "%s: key '%s' is %lld (1, softmax%s, is read)", w->f->name, key, (long long)gating,
                         w->a->deepseek ? ", or 2, sigmoid" : "");
    if (w->a->deepseek) {
        cJSON_AddStringToObject(w->root, "scoring_func", gating == 2 ? "sigmoid" : "softmax");
        int64_t groups = 1;
        snprintf(key, sizeof key, "%s.expert_group_count", w->arch);
        if (gguf_get_i64(w->f, key, &groups, w->err) < 0) return -1;
        /* a sigmoid router picks groups by their two best scores, with the correction bias
         * (V3's noaux_tc); a softmax one by their best (V2's group_limited_greedy), which is
         * DeepSeek-V2's rule though llama.cpp scores every file's groups by the best two */
        cJSON_AddStringToObject(w->root, "topk_method",
                                gating == 2  ? "noaux_tc"
                                : groups > 1 ? "group_limited_greedy"
                                             : "greedy");
    }
    bool norm = w->a->norm_topk;
    snprintf(key, sizeof key, "%s.expert_weights_norm", w->arch);
    if (gguf_get_bool(w->f, key, &norm, w->err) < 0) return -1;
    cJSON_AddBoolToObject(w->root, "norm_topk_prob", norm);
    return put_num(w, "expert_count", "num_experts", true) ||
                   put_num(w, "expert_used_count", "num_experts_per_tok", true) ||
                   put_num(w, "expert_feed_forward_length", "moe_intermediate_size", false) ||
                   put_num(w, "expert_shared_feed_forward_length", "shared_expert_intermediate_size", false)
               ? -1
               : 0;
}

/* `{arch}.<key>` as an integer, or def where absent. */
static int get_int_key(cfg_writer *w, const char *key, int64_t def, int64_t *out) {
    char full[160];
    snprintf(full, sizeof full, "%s.%s", w->arch, key);
    *out = def;
    return gguf_get_i64(w->f, full, out, w->err) < 0 ? -1 : 0;
}

/* The sliding window, where the file has one: Phi-3's converter writes 0 for none. */
static int put_window(cfg_writer *w) {
    int64_t window;
    if (get_int_key(w, "attention.sliding_window", 0, &window)) return -1;
    if (window) cJSON_AddNumberToObject(w->root, "sliding_window", (double)window);
    return 0;
}

/* The rotary width (rope.dimension_count) where it is less than a head's, as transformers'
 * partial_rotary_factor (Phi-4-mini's 0.75): written half a feature over, so that config.c's
 * truncation of head_dim x factor lands on it whatever the float rounding. DeepSeek's states
 * its own (put_deepseek). */
static int put_rotary(cfg_writer *w) {
    int64_t dims, heads, hidden, head;
    if (w->a->deepseek) return 0;
    if (get_int_key(w, "rope.dimension_count", 0, &dims) || get_int_key(w, "attention.head_count", 1, &heads) ||
        get_int_key(w, "embedding_length", 0, &hidden) ||
        get_int_key(w, "attention.key_length", heads > 0 ? hidden / heads : 0, &head))
        return -1;
    if (!dims || dims == head) return 0;
    if (dims < 2 || dims > head)
        return loom_errf(w->err, "%s: %s.rope.dimension_count %lld: a head has %lld features", w->f->name, w->arch,
                         (long long)dims, (long long)head);
    cJSON_AddNumberToObject(w->root, "partial_rotary_factor", ((double)dims + 0.5) / (double)head);
    return 0;
}

/* DeepSeek-V2/V3's latent attention and layer layout as DeepseekV3's config states them.
 * llama.cpp's converter writes the attention as MQA: one kv head of the latent and the rotary
 * key (key_length = kv_lora + rope), the per-head widths under key_length_mla and
 * value_length_mla (older files: key_length and value_length themselves). Its q/k rows keep
 * Hugging Face's order, whose rotary pairs are interleaved, as llama.cpp's rope then rotates
 * them. YaRN's log multiplier is 0.1 x mscale_all_dim; mscale is taken equal, as in every
 * released DeepSeek config. */
static int put_deepseek(cfg_writer *w) {
    if (!w->a->deepseek) return 0;
    int64_t kv_lora, rope, q_lora, kl, vl, heads;
    if (get_int_key(w, "attention.kv_lora_rank", -1, &kv_lora) || get_int_key(w, "rope.dimension_count", -1, &rope) ||
        get_int_key(w, "attention.q_lora_rank", 0, &q_lora) || get_int_key(w, "attention.head_count", 0, &heads) ||
        get_int_key(w, "attention.key_length", -1, &kl) || get_int_key(w, "attention.key_length_mla", kl, &kl) ||
        get_int_key(w, "attention.value_length", -1, &vl) || get_int_key(w, "attention.value_length_mla", vl, &vl))
        return -1;
    if (kv_lora < 1 || rope < 2 || kl <= rope || vl < 1)
        return loom_errf(w->err,
                         "%s: %s.attention.kv_lora_rank, rope.dimension_count and key_length_mla / value_length_mla "
                         "(or key_length / value_length) must size latent attention (got %lld, %lld, %lld, %lld)",
                         w->f->name, w->arch, (long long)kv_lora, (long long)rope, (long long)kl, (long long)vl);
    cJSON *r = w->root;
    cJSON_AddNumberToObject(r, "kv_lora_rank", (double)kv_lora);
    if (q_lora) cJSON_AddNumberToObject(r, "q_lora_rank", (double)q_lora);
    cJSON_AddNumberToObject(r, "qk_rope_head_dim", (double)rope);
    cJSON_AddNumberToObject(r, "qk_nope_head_dim", (double)(kl - rope));
    cJSON_AddNumberToObject(r, "v_head_dim", (double)vl);
    cJSON_AddBoolToObject(r, "rope_interleave", true);
    cJSON_DeleteItemFromObject(r, "head_dim");            /* the MQA form's, not a head's */
    cJSON_DeleteItemFromObject(r, "num_key_value_heads"); /* the MQA form's one */
    cJSON_AddNumberToObject(r, "num_key_value_heads", (double)heads);
    if (put_num(w, "leading_dense_block_count", "first_k_dense_replace", false) ||
        put_num(w, "expert_shared_count", "n_shared_experts", false) ||
        put_num(w, "expert_weights_scale", "routed_scaling_factor", false) ||
        put_num(w, "expert_group_count", "n_group", false) ||
        put_num(w, "expert_group_used_count", "topk_group", false))
        return -1;
    char key[160];
    double log_mul;
    snprintf(key, sizeof key, "%s.rope.scaling.yarn_log_multiplier", w->arch);
    int rc = gguf_get_f64(w->f, key, &log_mul, w->err);
    if (rc) return rc < 0 ? -1 : 0;
    cJSON *s = cJSON_GetObjectItemCaseSensitive(r, "rope_scaling");
    if (!s)
        return loom_errf(w->err, "%s: key '%s' without YaRN scaling (%s.rope.scaling.type)", w->f->name, key, w->arch);
    cJSON_AddNumberToObject(s, "mscale", log_mul / 0.1);
    cJSON_AddNumberToObject(s, "mscale_all_dim", log_mul / 0.1);
    return 0;
}

/* ERNIE 4.5's MoE layers in its config's fields: from leading_dense_block_count (0 where absent,
 * as llama.cpp reads it; the config class's default is 1) every interleave_moe_layer_step, with
 * expert_shared_count shared experts (0 where absent; the class's default is 2), whose width
 * expert_shared_feed_forward_length states again and must agree. */
static int put_ernie_moe(cfg_writer *w) {
    if (!w->a->ernie_moe) return 0;
    int64_t lead, step, shared, inter, width;
    if (get_int_key(w, "leading_dense_block_count", 0, &lead) || get_int_key(w, "expert_shared_count", 0, &shared) ||
        get_int_key(w, "interleave_moe_layer_step", -1, &step) ||
        get_int_key(w, "expert_feed_forward_length", 0, &inter) ||
        get_int_key(w, "expert_shared_feed_forward_length", 0, &width))
        return -1;
    if (step < 0) return loom_errf(w->err, "%s: missing key '%s.interleave_moe_layer_step'", w->f->name, w->arch);
    if (width && width != shared * inter)
        return loom_errf(w->err,
                         "%s: key '%s.expert_shared_feed_forward_length' is %lld, not expert_shared_count %lld x "
                         "expert_feed_forward_length %lld",
                         w->f->name, w->arch, (long long)width, (long long)shared, (long long)inter);
    cJSON_AddNumberToObject(w->root, "moe_layer_start_index", (double)lead);
    cJSON_AddNumberToObject(w->root, "moe_layer_interval", (double)step);
    cJSON_AddNumberToObject(w->root, "moe_num_shared_experts", (double)shared);
    return 0;
}

/* Granite's multipliers, which llama.cpp's converter renames to _scale keys. */
static int put_multipliers(cfg_writer *w) {
    if (!w->a->multipliers) return 0;
    return put_num(w, "attention.scale", "attention_multiplier", false) ||
                   put_num(w, "embedding_scale", "embedding_multiplier", false) ||
                   put_num(w, "residual_scale", "residual_multiplier", false) ||
                   put_num(w, "logit_scale", "logits_scaling", false)
               ? -1
               : 0;
}

static int vocab_size(const cfg_writer *w, int64_t *out) {
    const gguf_tensor *t = find_tensor(w, "token_embd.weight");
    if (!t || t->ndim != 2)
        return loom_errf(w->err, "%s: missing tensor 'token_embd.weight' [hidden, vocab]", w->f->name);
    *out = t->ne[1];
    return 0;
}

int gguf_model_config(const gguf_file *parts, int n_parts, model_config *c, loom_err *err) {
    const gguf_file *f = &parts[0];
    const gguf_arch *a = gguf_arch_of(f, err);
    if (!a) return -1;
    cfg_writer w = {f, parts, n_parts, a, a->name, cJSON_CreateObject(), err};
    if (!w.root) return loom_errf(err, "out of memory building %s's config", f->name);
    cJSON *list = cJSON_AddArrayToObject(w.root, "architectures");
    cJSON_AddItemToArray(list, cJSON_CreateString(a->hf));
    int64_t vocab = 0;
    bool blocks = false;
    for (int p = 0; p < n_parts; p++)
        for (size_t i = 0; i < parts[p].n_tensors; i++) blocks |= gtype_table[parts[p].tensors[i].type].block > 1;
    int rc = refuse_unread(&w);
    if (!rc) rc = vocab_size(&w, &vocab);
    if (!rc)
        rc = put_num(&w, "embedding_length", "hidden_size", true) ||
                     put_num(&w, "feed_forward_length", "intermediate_size", true) ||
                     put_num(&w, "block_count", "num_hidden_layers", true) ||
                     put_num(&w, "attention.head_count", "num_attention_heads", true) ||
                     put_num(&w, "attention.head_count_kv", "num_key_value_heads", false) ||
                     put_num(&w, "context_length", "max_position_embeddings", true) ||
                     put_num(&w, "attention.layer_norm_rms_epsilon", "rms_norm_eps", true) ||
                     put_num(&w, "attention.key_length", "head_dim", false) ||
                     put_num(&w, "rope.freq_base", "rope_theta", false) || put_window(&w) ||
                     put_num(&w, "final_logit_softcapping", "final_logit_softcapping", false) ||
                     put_num(&w, "attn_logit_softcapping", "attn_logit_softcapping", false) || put_experts(&w) ||
                     put_rope_scaling(&w) || put_deepseek(&w) || put_ernie_moe(&w) || put_multipliers(&w) ||
                     put_rotary(&w) || put_rope_factors(&w) || put_token_id(&w, "bos_token_id", "bos_token_id") ||
                     put_token_id(&w, "eos_token_id", "eos_token_id") ||
                     put_token_id(&w, "padding_token_id", "pad_token_id")
                 ? -1
                 : 0;
    if (!rc) {
        cJSON_AddNumberToObject(w.root, "vocab_size", (double)vocab);
        cJSON_AddBoolToObject(w.root, "tie_word_embeddings", !find_tensor(&w, "output.weight"));
        /* biases on every attention projection (Qwen2's q/k/v ones are its architecture's own);
         * ERNIE's use_bias says the same of every projection */
        bool bias = find_tensor(&w, "blk.0.attn_output.bias") != NULL;
        cJSON_AddBoolToObject(w.root, "attention_bias", bias);
        cJSON_AddBoolToObject(w.root, "use_bias", bias);
        /* a head's width where the file does not state it (attention.key_length): hidden / heads,
         * as llama.cpp takes it, rather than a config class's own default (ERNIE's 128) */
        const cJSON *hidden = cJSON_GetObjectItemCaseSensitive(w.root, "hidden_size"),
                    *heads = cJSON_GetObjectItemCaseSensitive(w.root, "num_attention_heads");
        if (!cJSON_GetObjectItemCaseSensitive(w.root, "head_dim") && !a->deepseek && heads->valuedouble > 0)
            cJSON_AddNumberToObject(w.root, "head_dim", (double)(int64_t)(hidden->valuedouble / heads->valuedouble));
    }
    char *text = rc ? NULL : cJSON_PrintUnformatted(w.root);
    cJSON_Delete(w.root);
    if (rc) return -1;
    if (!text) return loom_errf(err, "out of memory building %s's config", f->name);
    rc = config_parse(c, text, strlen(text), f->name, err);
    cJSON_free(text);
    if (rc) return -1;
    c->rope_meta_layout = a->meta_rope;
    c->experts_stacked = a->moe;
    if (blocks) c->quant = (quant_config){.format = QF_GGUF};
    return 0;
}

char *gguf_model_chat_template(const gguf_file *f, const char *name, loom_err *err) {
    gguf_str t;
    char key[96];
    snprintf(key, sizeof key, "tokenizer.chat_template%s%s", name ? "." : "", name ? name : "");
    err->msg[0] = 0;
    int rc = gguf_get_str(f, key, &t, err);
    return rc ? NULL : mem_strndup(t.p, t.n, "the chat template", err);
}

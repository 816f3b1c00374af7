/* GGUF as a model source (see gguf_model.h). Each architecture llama.cpp writes is a row of
 * `archs`: the transformers class it is, and what its converter changed on the way in. The
 * metadata becomes config.json text for config.c, with the keys transformers' GGUF loader maps
 * and the defaults its config classes (and loom's parser) fill in, so both read one model. The
 * tensors are renamed by `names`; anything else in the file is refused by name. */
#include "model/gguf_model.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/arch/arch.h"
#include "model/gguf_mla.h"
#include "util/alloc.h"
#include "util/err.h"

/* RoPE factor tensors, read into the config (put_rope_factors), not weights */
#define ROPE_FREQS "rope_freqs.weight"
#define ROPE_SHORT "rope_factors_short.weight"
#define ROPE_LONG  "rope_factors_long.weight"

typedef struct gguf_arch {
    const char *name; /* general.architecture */
    const char *hf;   /* its transformers class */
    /* llama.cpp's converter reorders q and k rows of each head into Meta's layout, rotary pairs
     * adjacent; the file is run with adjacent pairs instead of copying rows back */
    bool meta_rope;
    bool gemma; /* norms stored as 1 + w, the FFN's norms named as Gemma's */
    /* a mixture of experts (the row chosen where {arch}.expert_count is present), whose top k
     * weights llama.cpp's graph renormalises or not by architecture (the file carries no
     * norm_topk_prob; transformers' loader sets Qwen3-MoE's) */
    bool moe, norm_topk;
    /* DeepSeek-V2/V3: latent attention and DeepSeek's routing (put_deepseek), written for
     * DeepseekV3's config class, which states every choice V2 makes as well */
    bool deepseek;
    /* Granite: the embedding, residual, attention and logit multipliers (their _scale keys) */
    bool multipliers;
} gguf_arch;

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
    {.name = "phi3", .hf = "Phi3ForCausalLM"},
};

/* Architectures llama.cpp defines whose GGUF layout loom does not read yet. */
static const char *const later[] = {"gpt-oss", "ernie4_5",   "ernie4_5-moe", "mistral3",
                                    "gemma3n", "granitemoe", "granitehybrid"};

/* GGUF's per-layer names (after "blk.N.") and the Hugging Face module they belong to; Gemma's
 * FFN norms first, in their own rows. */
typedef struct name_map {
    const char *gguf, *hf;
    bool gemma_only, plain_only;
    bool as_row;      /* stored 1-D, read as one row: [n] is [1, n] (a linear of one output) */
    const char *only; /* the one architecture the row is for (NULL: any; such rows come first) */
} name_map;

static const name_map layer_names[] = {
    /* Phi-3's fused q/k/v and gate/up, read as row ranges (model/arch) */
    {"attn_qkv", "self_attn.qkv_proj", false, false, false, "phi3"},
    {"ffn_up", "mlp.gate_up_proj", false, false, false, "phi3"},
    {"attn_norm", "input_layernorm", false, false, false, NULL},
    {"attn_q", "self_attn.q_proj", false, false, false, NULL},
    {"attn_k", "self_attn.k_proj", false, false, false, NULL},
    {"attn_v", "self_attn.v_proj", false, false, false, NULL},
    {"attn_output", "self_attn.o_proj", false, false, false, NULL},
    {"attn_q_norm", "self_attn.q_norm", false, false, false, NULL},
    {"attn_k_norm", "self_attn.k_norm", false, false, false, NULL},
    {"ffn_norm", "post_attention_layernorm", false, true, false, NULL},
    {"ffn_norm", "pre_feedforward_layernorm", true, false, false, NULL},
    {"post_attention_norm", "post_attention_layernorm", true, false, false, NULL},
    {"post_ffw_norm", "post_feedforward_layernorm", true, false, false, NULL},
    {"ffn_gate", "mlp.gate_proj", false, false, false, NULL},
    {"ffn_up", "mlp.up_proj", false, false, false, NULL},
    {"ffn_down", "mlp.down_proj", false, false, false, NULL},
    {"ffn_gate_inp_shexp", "mlp.shared_expert_gate", false, false, true, NULL},
    /* latent attention (attn_k_b and attn_v_b, llama.cpp's split of kv_b_proj, are joined back
     * by gguf_mla.c) */
    {"attn_q_a", "self_attn.q_a_proj", false, false, false, NULL},
    {"attn_q_a_norm", "self_attn.q_a_layernorm", false, false, false, NULL},
    {"attn_q_b", "self_attn.q_b_proj", false, false, false, NULL},
    {"attn_kv_a_mqa", "self_attn.kv_a_proj_with_mqa", false, false, false, NULL},
    {"attn_kv_a_norm", "self_attn.kv_a_layernorm", false, false, false, NULL},
    {"attn_kv_b", "self_attn.kv_b_proj", false, false, false, NULL},
};

static const name_map global_names[] = {
    {"token_embd", "model.embed_tokens", false, false, false, NULL},
    {"output_norm", "model.norm", false, false, false, NULL},
    {"output", "lm_head", false, false, false, NULL},
};

static const gguf_arch *arch_of(const gguf_file *f, loom_err *err) {
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
    for (size_t i = 0; i < sizeof later / sizeof *later; i++)
        if (strlen(later[i]) == a.n && !memcmp(later[i], a.p, a.n)) {
            loom_errf(err,
                      "%s: general.architecture '%s': loom runs this architecture from Hugging Face folders, not "
                      "yet from GGUF",
                      f->name, later[i]);
            return NULL;
        }
    char list[256] = "";
    for (size_t i = 0; i < sizeof archs / sizeof *archs; i++)
        if (!i || strcmp(archs[i].name, archs[i - 1].name)) strcat(strcat(list, i ? ", " : ""), archs[i].name);
    loom_errf(err, "%s: general.architecture '%.*s' is not one loom runs (GGUF: %s)", f->name,
              (int)(a.n > 64 ? 64 : a.n), a.p, list);
    return NULL;
}

bool gguf_model_is_file(const char *path) {
    struct stat st;
    if (stat(path, &st) || !S_ISREG(st.st_mode)) return false;
    size_t n = strlen(path);
    if (n > 5 && !strcmp(path + n - 5, ".gguf")) return true; /* then a bad magic is gguf.c's error */
    FILE *fp = fopen(path, "rb");
    char magic[4];
    bool yes = fp && fread(magic, 1, 4, fp) == 4 && gguf_is_gguf(magic, 4);
    if (fp) fclose(fp);
    return yes;
}

/* "NAME-00001-of-00003.gguf": the split's count and where its number starts in path. */
static int split_count(const char *path, size_t *num_at) {
    size_t n = strlen(path);
    const char *tail = "-00001-of-00000.gguf";
    size_t tl = strlen(tail);
    if (n < tl || strcmp(path + n - 5, ".gguf") || memcmp(path + n - tl, "-00001-of-", 10)) return 1;
    int count = 0;
    for (size_t i = n - 10; i < n - 5; i++) {
        if (path[i] < '0' || path[i] > '9') return 1;
        count = count * 10 + (path[i] - '0');
    }
    *num_at = n - tl + 1;
    return count;
}

int gguf_model_open(const char *path, gguf_file *parts, int max_parts, int *n_parts, loom_err *err) {
    *n_parts = 0;
    if (gguf_open(&parts[0], path, err)) return -1;
    *n_parts = 1;
    int64_t declared = 1;
    if (gguf_get_i64(&parts[0], "split.count", &declared, err) < 0) return -1;
    size_t num_at = 0;
    int count = split_count(path, &num_at);
    if (declared > 1 && count == 1)
        return loom_errf(err,
                         "%s: one part of a model split in %lld (split.count): give its first part, the file named "
                         "...-00001-of-%05lld.gguf",
                         path, (long long)declared, (long long)declared);
    if (declared != count)
        return loom_errf(err, "%s: split.count is %lld, but the file name says %d part%s", path, (long long)declared,
                         count, count == 1 ? "" : "s");
    if (count > max_parts) return loom_errf(err, "%s: %d parts (at most %d)", path, count, max_parts);
    char part[4096];
    for (int i = 1; i < count; i++) {
        snprintf(part, sizeof part, "%s", path);
        char num[16];
        snprintf(num, sizeof num, "%05d", i + 1);
        memcpy(part + num_at, num, 5);
        if (gguf_open(&parts[i], part, err)) return -1;
        *n_parts = i + 1;
        int64_t no = -1;
        if (gguf_get_i64(&parts[i], "split.no", &no, err) < 0) return -1;
        if (no != i) return loom_errf(err, "%s: split.no is %lld, expected %d", part, (long long)no, i);
    }
    return 0;
}

/* ---------------------------------------------------------------- config */

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
    const gguf_tensor *t = NULL;
    for (int i = 0; i < w->n_parts && !t; i++) t = gguf_find_tensor(&w->parts[i], name);
    return t;
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
    static const char *const keys[] = {"attention.clamp_kqv", "attention.causal", "rope.scaling.attn_factor"};
    /* read by put_deepseek and put_multipliers for their architectures only */
    static const char *const deepseek[] = {"attention.q_lora_rank", "expert_weights_scale", "expert_group_count",
                                           "leading_dense_block_count", "expert_shared_count"};
    static const char *const multipliers[] = {"attention.scale", "embedding_scale", "residual_scale", "logit_scale"};
    const struct {
        const char *const *keys;
        size_t n;
        bool read;
    } lists[] = {{keys, 2, false},
                 {keys + 2, 1, find_tensor(w, ROPE_LONG) != NULL}, /* Phi-3's longrope attention factor */
                 {deepseek, 5, w->a->deepseek},
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

/* The rotary width (rope.dimension_count) where it is less than a head's, as transformers'
 * partial_rotary_factor (Phi-4-mini's 0.75): written half a feature over, so that config.c's
 * truncation of head_dim x factor lands on it whatever the float rounding. DeepSeek's states
 * its own (put_deepseek). A sliding window of 0, which Phi-3's converter writes for none, is
 * none. */
static int put_rotary(cfg_writer *w) {
    const cJSON *window = cJSON_GetObjectItemCaseSensitive(w->root, "sliding_window");
    if (window && window->valuedouble == 0) cJSON_DeleteItemFromObject(w->root, "sliding_window");
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
    const gguf_arch *a = arch_of(f, err);
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
                     put_num(&w, "rope.freq_base", "rope_theta", false) ||
                     put_num(&w, "attention.sliding_window", "sliding_window", false) ||
                     put_num(&w, "final_logit_softcapping", "final_logit_softcapping", false) ||
                     put_num(&w, "attn_logit_softcapping", "attn_logit_softcapping", false) || put_experts(&w) ||
                     put_rope_scaling(&w) || put_deepseek(&w) || put_multipliers(&w) || put_rotary(&w) ||
                     put_rope_factors(&w) || put_token_id(&w, "bos_token_id", "bos_token_id") ||
                     put_token_id(&w, "eos_token_id", "eos_token_id") ||
                     put_token_id(&w, "padding_token_id", "pad_token_id")
                 ? -1
                 : 0;
    if (!rc) {
        cJSON_AddNumberToObject(w.root, "vocab_size", (double)vocab);
        cJSON_AddBoolToObject(w.root, "tie_word_embeddings", !find_tensor(&w, "output.weight"));
        /* biases on every attention projection (Qwen2's q/k/v ones are its architecture's own) */
        cJSON_AddBoolToObject(w.root, "attention_bias", find_tensor(&w, "blk.0.attn_output.bias") != NULL);
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

char *gguf_model_chat_template(const gguf_file *f, loom_err *err) {
    gguf_str t;
    err->msg[0] = 0;
    int rc = gguf_get_str(f, "tokenizer.chat_template", &t, err);
    return rc ? NULL : mem_strndup(t.p, t.n, "the chat template", err);
}

/* ---------------------------------------------------------------- tensors */

/* The router, every expert's projection in one tensor each (model_config.experts_stacked), the
 * shared experts and DeepSeek's routing bias, named as the architecture's MoE block reads them
 * (model/arch's layout: Qwen's mlp.experts.gate_proj, Mixtral's block_sparse_moe.experts.w1,
 * DeepSeek's mlp.shared_experts.gate_proj). */
static const name_map expert_rows[] = {
    {"ffn_gate_inp", "router", false, false, false, NULL},      {"ffn_gate_exps", "gate", false, false, false, NULL},
    {"ffn_up_exps", "up", false, false, false, NULL},           {"ffn_down_exps", "down", false, false, false, NULL},
    {"ffn_gate_shexp", "gate_proj", false, false, false, NULL}, {"ffn_up_shexp", "up_proj", false, false, false, NULL},
    {"ffn_down_shexp", "down_proj", false, false, false, NULL}, {"exp_probs_b", "bias", false, false, false, NULL},
};

static const name_map *expert_name(const gguf_arch *a, const char *rest, size_t stem, const char *dot, int layer,
                                   char *out, size_t cap) {
    const moe_layout *l = a->moe ? arch_moe_layout(a->hf) : NULL;
    if (!l) return NULL;
    char shared[3][96] = {"", "", ""};
    for (int j = 0; j < 3 && l->shared; j++)
        snprintf(shared[j], sizeof shared[j], "%s.%s.weight", l->shared, expert_rows[4 + j].hf);
    const char *hf[] = {l->router,
                        l->gate,
                        l->up,
                        l->down,
                        l->shared ? shared[0] : NULL,
                        l->shared ? shared[1] : NULL,
                        l->shared ? shared[2] : NULL,
                        l->bias};
    for (size_t i = 0; i < sizeof expert_rows / sizeof *expert_rows; i++) {
        if (!hf[i] || strlen(expert_rows[i].gguf) != stem || memcmp(expert_rows[i].gguf, rest, stem)) continue;
        if (strcmp(dot, hf[i] == l->bias ? ".bias" : ".weight"))
            return NULL; /* the bias tensor is "exp_probs_b.bias" */
        char part[128];
        snprintf(part, sizeof part, "%s", hf[i]);
        moe_stacked_name(part);
        snprintf(out, cap, "model.layers.%d.%s.%s", layer, l->module, part);
        return &expert_rows[i];
    }
    return NULL;
}

/* The Hugging Face name of GGUF tensor `name` into out, and its row of the tables; NULL if it
 * has none. */
static const name_map *hf_name(const gguf_arch *a, const char *name, char *out, size_t cap) {
    const char *dot = strrchr(name, '.');
    if (!dot || (strcmp(dot, ".weight") && strcmp(dot, ".bias"))) return NULL;
    size_t stem = (size_t)(dot - name);
    int layer, used = 0;
    const char *rest = name;
    const name_map *table = global_names;
    size_t n = sizeof global_names / sizeof *global_names;
    if (sscanf(name, "blk.%d.%n", &layer, &used) == 1 && used > 0 && layer >= 0) {
        rest = name + used, stem -= (size_t)used;
        table = layer_names, n = sizeof layer_names / sizeof *layer_names;
        const name_map *e = expert_name(a, rest, stem, dot, layer, out, cap);
        if (e) return e;
    }
    for (size_t i = 0; i < n; i++) {
        if (strlen(table[i].gguf) != stem || memcmp(table[i].gguf, rest, stem)) continue;
        if ((table[i].gemma_only && !a->gemma) || (table[i].plain_only && a->gemma) ||
            (table[i].only && strcmp(table[i].only, a->name)))
            continue;
        if (table == layer_names) snprintf(out, cap, "model.layers.%d.%s%s", layer, table[i].hf, dot);
        else snprintf(out, cap, "%s%s", table[i].hf, dot);
        return &table[i];
    }
    return NULL;
}

static enum dtype plain_dtype(int type) { return type == GT_F32 ? DT_F32 : type == GT_F16 ? DT_F16 : DT_BF16; }

static int by_name(const void *x, const void *y) {
    return strcmp(((const st_tensor *)x)->name, ((const st_tensor *)y)->name);
}

/* Gemma's norm weights back to w from the file's 1 + w, as transformers' loader subtracts 1 */
static int unshift_norm(weight_store *ws, st_tensor *t, const gguf_tensor *g, loom_err *err) {
    if (g->type != GT_F32)
        return loom_errf(err, "%s: Gemma norm '%s' has type %s (F32 expected)", ws->dir, g->name,
                         gtype_table[g->type].name);
    size_t n = t->nbytes / sizeof(float);
    float *w = weights_buffer(ws, t->nbytes, "Gemma's norm weights", err);
    if (!w) return -1;
    memcpy(w, g->data, t->nbytes);
    for (size_t i = 0; i < n; i++) w[i] -= 1.0f;
    t->data = w;
    return 0;
}

/* Part `at`'s tensors under Hugging Face names, as an st_file the store owns (its mapping
 * moves); DeepSeek's attn_k_b, with its attn_v_b from whichever part holds it, becomes one
 * kv_b_proj (gguf_mla.c). */
static int part_as_file(weight_store *ws, gguf_file *parts, int n_parts, int at, const gguf_arch *a, st_file *out,
                        loom_err *err) {
    gguf_file *p = &parts[at];
    memset(out, 0, sizeof *out);
    if (!(out->tensors = mem_zalloc(p->n_tensors ? p->n_tensors : 1, sizeof *out->tensors, "the tensors", err)) ||
        !(out->name = mem_strdup(p->name, "a file name", err)))
        return -1;
    for (size_t i = 0; i < p->n_tensors; i++) {
        const gguf_tensor *g = &p->tensors[i];
        if (!strcmp(g->name, ROPE_FREQS) || !strcmp(g->name, ROPE_SHORT) || !strcmp(g->name, ROPE_LONG)) continue;
        int layer, used = 0;
        char half = 0;
        if (a->deepseek && sscanf(g->name, "blk.%d.attn_%c_b.weight%n", &layer, &half, &used) == 2 &&
            used == (int)strlen(g->name) && (half == 'k' || half == 'v')) {
            if (gguf_mla_kv_b(ws, parts, n_parts, layer, half == 'k' ? &out->tensors[out->n++] : NULL, err)) return -1;
            continue;
        }
        st_tensor *t = &out->tensors[out->n++];
        char name[256];
        const name_map *m = hf_name(a, g->name, name, sizeof name);
        if (!m)
            return loom_errf(err, "%s: tensor '%s' (%s) is not one of a %s model that loom reads", p->name, g->name,
                             gtype_table[g->type].name, a->name);
        if (!gtype_table[g->type].decoded)
            return loom_errf(err,
                             "%s: tensor '%s' has type %s, which loom does not decode (F32, F16, BF16, Q4_0, "
                             "Q4_1, Q5_0, Q5_1, Q8_0, Q2_K to Q6_K, IQ4_NL, IQ4_XS)",
                             p->name, g->name, gtype_table[g->type].name);
        if (!(t->name = mem_strdup(name, "a tensor name", err))) return -1;
        t->ndim = g->ndim, t->nbytes = g->nbytes, t->data = g->data;
        for (int d = 0; d < g->ndim; d++) t->shape[d] = g->ne[g->ndim - 1 - d];
        if (m->as_row && g->ndim == 1) t->ndim = 2, t->shape[0] = 1, t->shape[1] = g->ne[0];
        bool blocks = gtype_table[g->type].block > 1;
        t->dtype = blocks ? DT_U8 : plain_dtype(g->type);
        t->gtype = blocks ? g->type : 0;
        size_t len = strlen(name);
        if (a->gemma && len > 11 && !strcmp(name + len - 11, "norm.weight") && unshift_norm(ws, t, g, err)) return -1;
    }
    qsort(out->tensors, out->n, sizeof *out->tensors, by_name);
    for (size_t i = 1; i < out->n; i++)
        if (!strcmp(out->tensors[i].name, out->tensors[i - 1].name))
            return loom_errf(err, "%s: two tensors are both '%s'", p->name, out->tensors[i].name);
    out->map = p->map;
    p->map = (file_map){0};
    return 0;
}

int gguf_model_weights(weight_store *ws, gguf_file *parts, int n_parts, loom_err *err) {
    memset(ws, 0, sizeof *ws);
    snprintf(ws->dir, sizeof ws->dir, "%s", parts[0].name);
    const gguf_arch *a = arch_of(&parts[0], err);
    int rc = a ? 0 : -1;
    for (int i = 0; i < n_parts && !rc; i++) {
        st_file f;
        rc = part_as_file(ws, parts, n_parts, i, a, &f, err);
        if (rc) st_close(&f);
        else rc = weights_add_file(ws, &f, err);
    }
    for (int i = 0; i < n_parts; i++) gguf_close(&parts[i]);
    if (rc) weights_close(ws);
    return rc;
}

/* GGUF as a model source (see gguf_model.h): opening a file and a split one's parts, and its
 * tensors under the Hugging Face names the architectures read (`layer_names`, and the experts'
 * from each architecture's MoE layout); anything else in the file is refused by name. The
 * config comes from gguf_config.c, the architectures from gguf_arch.c. */
#include "model/gguf_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/arch/arch.h"
#include "model/gguf_arch.h"
#include "model/gguf_mla.h"
#include "util/alloc.h"
#include "util/err.h"

/* GGUF's per-layer names (after "blk.N.") and the Hugging Face module they belong to; Gemma's
 * FFN norms first, in their own rows. */
typedef struct name_map {
    const char *gguf, *hf;
    bool gemma_only, plain_only;
    enum {
        AS_IS,
        AS_ROW, /* stored 1-D, read as one row: [n] is [1, n] (a linear of one output) */
        BARE    /* the Hugging Face name has no .weight (GPT-OSS's sinks) */
    } form;
    const char *only; /* the one architecture the row is for (NULL: any; such rows come first) */
} name_map;

static const name_map layer_names[] = {
    /* Phi-3's fused q/k/v and gate/up, read as row ranges (model/arch) */
    {"attn_qkv", "self_attn.qkv_proj", false, false, AS_IS, "phi3"},
    {"ffn_up", "mlp.gate_up_proj", false, false, AS_IS, "phi3"},
    /* GPT-OSS's pre-FFN norm, and its attention sinks (a logit per head) */
    {"post_attention_norm", "post_attention_layernorm", false, false, AS_IS, "gpt-oss"},
    {"attn_sinks", "self_attn.sinks", false, false, BARE, "gpt-oss"},
    {"attn_norm", "input_layernorm", false, false, AS_IS, NULL},
    {"attn_q", "self_attn.q_proj", false, false, AS_IS, NULL},
    {"attn_k", "self_attn.k_proj", false, false, AS_IS, NULL},
    {"attn_v", "self_attn.v_proj", false, false, AS_IS, NULL},
    {"attn_output", "self_attn.o_proj", false, false, AS_IS, NULL},
    {"attn_q_norm", "self_attn.q_norm", false, false, AS_IS, NULL},
    {"attn_k_norm", "self_attn.k_norm", false, false, AS_IS, NULL},
    {"ffn_norm", "post_attention_layernorm", false, true, AS_IS, NULL},
    {"ffn_norm", "pre_feedforward_layernorm", true, false, AS_IS, NULL},
    {"post_attention_norm", "post_attention_layernorm", true, false, AS_IS, NULL},
    {"post_ffw_norm", "post_feedforward_layernorm", true, false, AS_IS, NULL},
    {"ffn_gate", "mlp.gate_proj", false, false, AS_IS, NULL},
    {"ffn_up", "mlp.up_proj", false, false, AS_IS, NULL},
    {"ffn_down", "mlp.down_proj", false, false, AS_IS, NULL},
    {"ffn_gate_inp_shexp", "mlp.shared_expert_gate", false, false, AS_ROW, NULL},
    /* latent attention (attn_k_b and attn_v_b, llama.cpp's split of kv_b_proj, are joined back
     * by gguf_mla.c) */
    {"attn_q_a", "self_attn.q_a_proj", false, false, AS_IS, NULL},
    {"attn_q_a_norm", "self_attn.q_a_layernorm", false, false, AS_IS, NULL},
    {"attn_q_b", "self_attn.q_b_proj", false, false, AS_IS, NULL},
    {"attn_kv_a_mqa", "self_attn.kv_a_proj_with_mqa", false, false, AS_IS, NULL},
    {"attn_kv_a_norm", "self_attn.kv_a_layernorm", false, false, AS_IS, NULL},
    {"attn_kv_b", "self_attn.kv_b_proj", false, false, AS_IS, NULL},
};

static const name_map global_names[] = {
    {"token_embd", "model.embed_tokens", false, false, AS_IS, NULL},
    {"output_norm", "model.norm", false, false, AS_IS, NULL},
    {"output", "lm_head", false, false, AS_IS, NULL},
};

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

/* The router, every expert's projection in one tensor each (model_config.experts_stacked), the
 * shared experts and DeepSeek's routing bias, named as the architecture's MoE block reads them
 * (model/arch's layout: Qwen's mlp.experts.gate_proj, Mixtral's block_sparse_moe.experts.w1,
 * DeepSeek's mlp.shared_experts.gate_proj). */
static const name_map expert_rows[] = {
    {"ffn_gate_inp", "router", false, false, AS_IS, NULL},      {"ffn_gate_exps", "gate", false, false, AS_IS, NULL},
    {"ffn_up_exps", "up", false, false, AS_IS, NULL},           {"ffn_down_exps", "down", false, false, AS_IS, NULL},
    {"ffn_gate_shexp", "gate_proj", false, false, AS_IS, NULL}, {"ffn_up_shexp", "up_proj", false, false, AS_IS, NULL},
    {"ffn_down_shexp", "down_proj", false, false, AS_IS, NULL}, {"exp_probs_b", "bias", false, false, AS_IS, NULL},
};

static const name_map *expert_name(const gguf_arch *a, const char *rest, size_t stem, const char *dot, int layer,
                                   char *out, size_t cap) {
    const moe_layout *l = a->moe ? moe_layout_of_file(arch_moe_layout(a->hf), true) : NULL;
    if (!l) return NULL;
    char shared[3][96] = {"", "", ""}, router[96];
    for (int j = 0; j < 3 && l->shared; j++)
        snprintf(shared[j], sizeof shared[j], "%s.%s.weight", l->shared, expert_rows[4 + j].hf);
    /* GraniteMoE's router is a module of its own, its weight "layer.weight" */
    snprintf(router, sizeof router, l->external_router ? "%s.layer.weight" : "%s", l->router);
    const char *hf[] = {router,
                        l->gate,
                        l->up,
                        l->down,
                        l->shared ? shared[0] : NULL,
                        l->shared ? shared[1] : NULL,
                        l->shared ? shared[2] : NULL,
                        l->bias};
    for (size_t i = 0; i < sizeof expert_rows / sizeof *expert_rows; i++) {
        if (!hf[i] || strlen(expert_rows[i].gguf) != stem || memcmp(expert_rows[i].gguf, rest, stem)) continue;
        /* the routing bias tensor is "exp_probs_b.bias"; GPT-OSS's router and experts have a
         * ".bias" beside their ".weight" */
        bool bias = !strcmp(dot, ".bias"),
             with_bias = (i == 0 && l->router_bias) || (i >= 1 && i <= 3 && l->expert_bias);
        if (hf[i] == l->bias ? !bias : bias && !with_bias) return NULL;
        char part[128], name[136];
        snprintf(part, sizeof part, "%s", hf[i]);
        moe_stacked_name(part);
        if (bias && hf[i] != l->bias) moe_bias_name(name, sizeof name, part);
        else snprintf(name, sizeof name, "%s", part);
        snprintf(out, cap, "model.layers.%d.%s.%s", layer, l->module, name);
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
        if (table == layer_names)
            snprintf(out, cap, "model.layers.%d.%s%s", layer, table[i].hf, table[i].form == BARE ? "" : dot);
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
                             "Q4_1, Q5_0, Q5_1, Q8_0, Q2_K to Q6_K, IQ4_NL, IQ4_XS, MXFP4)",
                             p->name, g->name, gtype_table[g->type].name);
        if (!(t->name = mem_strdup(name, "a tensor name", err))) return -1;
        t->ndim = g->ndim, t->nbytes = g->nbytes, t->data = g->data;
        for (int d = 0; d < g->ndim; d++) t->shape[d] = g->ne[g->ndim - 1 - d];
        if (m->form == AS_ROW && g->ndim == 1) t->ndim = 2, t->shape[0] = 1, t->shape[1] = g->ne[0];
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
    const gguf_arch *a = gguf_arch_of(&parts[0], err);
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

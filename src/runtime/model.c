/* Model loading: resolves the source (folder, bare config.json for dummy weights, or the
 * embedded default), parses the config, builds the module tree before any weight is read so
 * that an unsupported model fails fast, then opens the weights and the tokenizer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cpu/cpu.h"
#include "model/arch/arch.h"
#include "model/embedded.h"
#include "model/gguf_model.h"
#include "model/gguf_vocab.h"
#include "quant/quant.h"
#include "runtime/model.h"
#include "util/alloc.h"
#include "util/err.h"

/* --dtype, as vLLM's: the precision linears compute in (weights_store's keep and exact).
 * auto: as the weights are stored, so bf16 and quantized weights compute in reduced precision;
 * float32: every linear exact in fp32 on the weights as stored; bfloat16: float weights kept
 * (rounded) in bf16 and computed so. */
static int parse_dtype(weight_store *ws, const char *want, const char *stored, bool dummy, loom_err *err) {
    bool as_stored = !want || !strcmp(want, "auto") || !strcmp(want, "float32") || !strcmp(want, "f32");
    if (!as_stored && strcmp(want, "bfloat16") && strcmp(want, "bf16"))
        return loom_errf(err, "--dtype: unknown '%s' (auto, float32, bfloat16)", want);
    ws->exact = want && (!strcmp(want, "float32") || !strcmp(want, "f32"));
    /* dummy weights are made in the dtype the checkpoint would have been stored in */
    bool stored_16 = !strcmp(stored, "bfloat16") || !strcmp(stored, "float16");
    ws->keep = !as_stored || (dummy && stored_16) ? WDT_BF16 : WDT_AUTO;
    return 0;
}

/* An Eagle3 draft without an embedding of its own (speculators' checkpoints never hold one)
 * reads the target's, from the folder o->embedding_from; dummy weights take the target's name,
 * so that a draft made with the target's seed shares its dummy table too. */
static int borrow_embedding(loom_model *m, const loom_model_options *o, loom_err *err) {
    const char *file;
    static const char *const speculator_reads[] = {"fc.weight", "d2t", "t2d"}; /* decode/eagle3.c, not the plan */
    for (size_t i = 0; i < sizeof speculator_reads / sizeof *speculator_reads; i++)
        weights_tensor(&m->ws, speculator_reads[i], &file);
    if (!o->dummy && weights_has(&m->ws, "embed_tokens.weight")) return 0;
    for (int i = 0; i < m->tree->n_ops; i++)
        if (m->tree->ops[i].kind == OP_EMBED)
            snprintf(m->tree->ops[i].lin->parts[0].weight, sizeof m->tree->ops[i].lin->parts[0].weight,
                     "model.embed_tokens.weight");
    if (o->dummy) return 0;
    if (!o->embedding_from)
        return loom_errf(err,
                         "%s: the Eagle3 draft holds no embed_tokens.weight, and no target folder to read the "
                         "target's from was given",
                         o->path);
    return weights_borrow_dir(&m->ws, o->embedding_from, err)
               ? loom_err_prefix(err, "%s: the target's embedding for the Eagle3 draft", o->path)
               : 0;
}

static const char *task_name(loom_task t) {
    return t == LOOM_TASK_EMBED ? "embed" : t == LOOM_TASK_SCORE ? "score" : "generate";
}

/* What the model is run for (loom_task), from the options, its config and the pooling its
 * folder dir declares (NULL: none, the embedded model); an embedding model outputs its pooled
 * rows' final hidden states (cfg.pooled), so it is built without its head. Before the tree. */
static int resolve_task(loom_model *m, const loom_model_options *o, const char *dir, loom_err *err) {
    model_config *c = &m->cfg;
    m->pool = (pooling_config){.mode = LOOM_POOL_LAST, .normalize = true};
    if (dir && pooling_config_read(dir, &m->pool, err)) return -1;
    m->task = o->task ? o->task : c->bare || m->pool.declared ? LOOM_TASK_EMBED : LOOM_TASK_GENERATE;
    if (c->bare && m->task != LOOM_TASK_EMBED)
        return loom_errf(err,
                         "%s: architecture '%.*sModel' is a bare decoder with no LM head: it can only embed (--task "
                         "embed), not %s",
                         m->source, (int)(strlen(c->arch) - strlen("ForCausalLM")), c->arch, task_name(m->task));
    if (m->task == LOOM_TASK_EMBED && c->eagle3.on)
        return loom_errf(err, "%s: an Eagle3 draft cannot embed", m->source);
    c->pooled = m->task == LOOM_TASK_EMBED;
    if (c->pooled) c->head_vocab = c->hidden;
    return 0;
}

#define GGUF_MAX_PARTS 64

/* A GGUF file (or a split one's first part): config, tokenizer and chat template from its
 * metadata, weights mapped from its tensors. */
static int open_gguf(loom_model *m, const loom_model_options *o, loom_err *err) {
    gguf_file parts[GGUF_MAX_PARTS];
    int n = 0, rc = gguf_model_open(o->path, parts, GGUF_MAX_PARTS, &n, err);
    if (!rc) rc = gguf_model_config(parts, n, &m->cfg, err);
    if (!rc) rc = resolve_task(m, o, NULL, err);
    if (!rc && !(m->tree = arch_build(&m->cfg, err))) rc = loom_err_prefix(err, "%s", o->path);
    if (!rc && o->load_tokenizer && !(m->tok = gguf_tokenizer(&parts[0], err)) && err->msg[0]) rc = -1;
    if (!rc && !(m->chat_template = gguf_model_chat_template(&parts[0], NULL, err)) && err->msg[0]) rc = -1;
    if (!rc && !(m->chat_template_tools = gguf_model_chat_template(&parts[0], "tool_use", err)) && err->msg[0]) rc = -1;
    if (rc) {
        for (int i = 0; i < n; i++) gguf_close(&parts[i]);
        return -1;
    }
    if (o->dummy) {
        for (int i = 0; i < n; i++) gguf_close(&parts[i]);
        weights_init_dummy(&m->ws, o->seed);
        return 0;
    }
    if (gguf_model_weights(&m->ws, parts, n, err)) return -1;
    m->cfg.quant.gguf_type = weights_gguf_type, m->cfg.quant.store = &m->ws;
    return 0;
}

static int open_sources(loom_model *m, const loom_model_options *o, loom_err *err) {
    if (o->path && gguf_model_is_file(o->path)) {
        if (!(m->source = mem_strdup(o->path, "the model's path", err))) return -1;
        return open_gguf(m, o, err);
    }
    if (!o->path) {
        embedded_file c = embedded_get(EMBEDDED_CONFIG), w = embedded_get(EMBEDDED_SAFETENSORS);
        if (!(m->source = mem_strdup("(embedded stories260K)", "the model's name", err))) return -1;
        if (config_parse(&m->cfg, c.data, c.size, "embedded config.json", err) || resolve_task(m, o, NULL, err))
            return -1;
        if (!(m->tree = arch_build(&m->cfg, err))) return -1;
        if (o->dummy) weights_init_dummy(&m->ws, o->seed);
        else if (weights_open_image(&m->ws, w.data, w.size, "embedded model.safetensors", err)) return -1;
        if (o->load_tokenizer) {
            embedded_file t = embedded_get(EMBEDDED_TOKENIZER);
            if (!(m->tok = tokenizer_load_json(t.data, t.size, "embedded tokenizer.json", err))) return -1;
        }
        return 0;
    }
    struct stat st;
    if (stat(o->path, &st) != 0) return loom_errf(err, "%s: no such model folder or config file", o->path);
    char dir[4096], cfg_path[4200], tok_path[4200];
    if (S_ISDIR(st.st_mode)) {
        snprintf(dir, sizeof dir, "%s", o->path);
        snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
    } else {
        if (!o->dummy)
            return loom_errf(err, "%s: a bare config file needs --load-format dummy (or give the model folder)",
                             o->path);
        snprintf(cfg_path, sizeof cfg_path, "%s", o->path);
        snprintf(dir, sizeof dir, "%s", o->path);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        else snprintf(dir, sizeof dir, ".");
    }
    if (!(m->source = mem_strdup(o->path, "the model's path", err))) return -1;
    if (config_load_file(&m->cfg, cfg_path, err) || resolve_task(m, o, dir, err)) return -1;
    if (!(m->tree = arch_build(&m->cfg, err))) return loom_err_prefix(err, "%s", cfg_path);
    if (o->dummy) weights_init_dummy(&m->ws, o->seed);
    else if (weights_open_dir(&m->ws, dir, err)) return -1;
    if (m->cfg.eagle3.on && borrow_embedding(m, o, err)) return -1;
    if (o->load_tokenizer) {
        snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", dir);
        FILE *f = fopen(tok_path, "rb");
        if (f) {
            fclose(f);
            if (!(m->tok = tokenizer_load_file(tok_path, err))) return -1;
        } else if (!o->dummy) {
            return loom_errf(err, "%s: missing (needed for text; the model folder has no tokenizer)", tok_path);
        }
    }
    return 0;
}

/* A quantized checkpoint is read as stored, so --quantization does not apply to it; dummy
 * weights of its config are quantized at load to its bits and group size instead (its
 * format's packing does not change the numbers). */
static int checkpoint_quantization(loom_model *m, bool dummy, loom_err *err) {
    quant_config *q = &m->cfg.quant;
    if (!q->format) return 0;
    if (m->ws.quant.bits)
        return loom_errf(err,
                         "%s: the checkpoint is already quantized (%s, %d-bit); --quantization applies to float "
                         "checkpoints",
                         m->source, quant_format_name(q->format), q->bits);
    if (dummy && q->format == QF_GGUF) { /* dummy weights of its shapes, in float */
        q->format = QF_NONE;
    } else if (dummy && q->format == QF_MXFP4) { /* its experts' blocks, quantized from the dummy floats */
        m->ws.quant = (quant_scheme){4, 32, false, QCODE_E2M1, 0, 0, true};
        q->format = QF_NONE;
    } else if (dummy) { /* FP8 blocks become groups of a block's columns: the same bytes and work a row */
        bool fp8 = quant_format_fp8(q->format);
        m->ws.quant = (quant_scheme){q->bits,
                                     fp8 ? q->fp8_block[1] : q->group,
                                     q->format == QF_GPTQ ? q->lm_head : false,
                                     fp8 ? QCODE_E4M3 : QCODE_UINT,
                                     fp8 && q->fp8_act == FP8_ACT_STATIC ? DUMMY_INPUT_SCALE : 0,
                                     fp8 && q->fp8_act == FP8_ACT_GROUP ? q->act_group : 0,
                                     false};
        q->format = QF_NONE;
    }
    return 0;
}

loom_model *loom_model_load(const loom_model_options *o, loom_err *err) {
    if (cpu_init(err)) return NULL;
    loom_model *m = mem_zalloc(1, sizeof *m, "a model", err);
    if (!m) return NULL;
    if (open_sources(m, o, err) == 0) {
        int rc = parse_dtype(&m->ws, o->dtype, m->cfg.dtype, o->dummy, err);
        m->progress = o->progress;
        if (rc == 0) rc = quant_scheme_parse(&m->ws.quant, o->quantization, o->quant_group, o->quantize_lm_head, err);
        if (rc == 0 && o->fp8_activations && m->ws.exact)
            rc = loom_errf(err, "--fp8-activations rounds every FP8 linear's input; it cannot go with --dtype float32");
        m->ws.fp8_act = o->fp8_activations;
        if (rc == 0) rc = checkpoint_quantization(m, o->dummy, err);
        if (rc == 0) return m;
    }
    loom_model_free(m);
    return NULL;
}

void loom_model_free(loom_model *m) {
    if (!m) return;
    module_free(m->tree);
    weights_close(&m->ws);
    if (m->tok) tokenizer_free(m->tok);
    free(m->chat_template);
    free(m->chat_template_tools);
    free(m->source);
    free(m);
}

void loom_model_get_info(const loom_model *m, loom_model_info *info) {
    const model_config *c = &m->cfg;
    int recurrent = 0, attention = c->recurrent ? 0 : c->n_layers;
    for (int l = 0; c->recurrent && l < c->n_layers; l++) {
        recurrent += mixer_is_recurrent(c->mixer[l]);
        attention += c->mixer[l] == MIXER_ATTENTION;
    }
    *info = (loom_model_info){
        .arch = c->arch,
        .vocab = c->vocab,
        .hidden = c->hidden,
        .intermediate = c->intermediate,
        .n_layers = c->n_layers,
        .n_heads = c->n_heads,
        .n_kv_heads = c->n_kv_heads,
        .n_recurrent_layers = recurrent,
        .n_attention_layers = attention,
        .image_size = c->vision.kind ? c->vision.image_size : 0,
        .image_tokens = c->vision.kind ? c->vision.tokens_per_image : 0,
        .image_token = c->vision.kind ? c->vision.image_token : -1,
        .image_begin = c->vision.kind ? c->vision.boi_token : -1,
        .image_end = c->vision.kind ? c->vision.eoi_token : -1,
        .n_linear_groups = c->recurrent ? c->mamba.n_groups : 0,
        .n_linear_k_heads = !c->recurrent      ? 0
                            : c->mamba.n_heads ? c->mamba.n_heads
                                               : c->gdn.k_heads,
        .n_linear_v_heads = !c->recurrent      ? 0
                            : c->mamba.n_heads ? c->mamba.n_heads
                                               : c->gdn.v_heads,
        .head_dim = c->head_dim,
        .max_pos = c->max_pos,
        .bos_id = c->bos_id,
        .eos_ids = c->eos_ids,
        .n_eos = c->n_eos,
        .n_params = module_count_params(m->tree),
        .weight_bytes = m->ws.bytes_owned + m->ws.bytes_mapped_used,
        .source = m->source,
        .has_tokenizer = m->tok,
        .spec_tokens = c->eagle3.spec_tokens,
        .task = m->task,
        .out_width = c->head_vocab,
        .pooling = m->pool.mode,
        .normalize = m->pool.normalize,
        .chat_template = m->chat_template,
        .chat_template_tools = m->chat_template_tools,
    };
}

int loom_model_add_custom(loom_model *m, const char *path, bool at_input, const loom_custom_op *op, loom_err *err) {
    module *mod = module_find(m->tree, path);
    if (!mod) return loom_errf(err, "%s: no module '%s' in the model", m->source, path);
    if (!op->name || !op->forward)
        return loom_errf(err, "custom op for '%s' needs a name and a forward function", path);
    return module_add_custom(mod, at_input, op) ? module_check(mod, err) : 0;
}

static void mark_unfusable(module *m) {
    for (int i = 0; i < m->n_ops; i++) {
        if (m->ops[i].kind == OP_LINEAR) m->ops[i].lin->no_fuse = true;
        if (m->ops[i].kind == OP_CALL) mark_unfusable(m->ops[i].child);
    }
}

int loom_model_mark_unfusable(loom_model *m, const char *path, loom_err *err) {
    module *mod = module_find(m->tree, path);
    if (!mod) return loom_errf(err, "%s: no module '%s' in the model", m->source, path);
    mark_unfusable(mod);
    return 0;
}

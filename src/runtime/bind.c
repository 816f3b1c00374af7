/* The binder: the planner names each weight a step reads by tensor and slice (plan.h's
 * weight_ref) and has already refused splits a format cannot take; this reads them. A linear
 * comes from the checkpoint's quantized tensors where it stores it so (quant/checkpoint.c),
 * else it is quantized at load where --quantization says (quant/online.c), else it is kept as
 * stored (mapped where its dtype allows). Binding a layer is where the time of loading goes,
 * so it reports progress by decoder layer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cpu/cpu.h"
#include "quant/checkpoint.h"
#include "runtime/bind.h"
#include "util/alloc.h"
#include "util/err.h"

/* The precision a linear computes in (tensor/tensor.h's wmat.act): reduced where its weights
 * are (bf16 or quantized; FP8 on bf16 activations, or FP8 ones with --fp8-activations) unless
 * --dtype float32 asked for exact, except for the router (a
 * replicated linear): its scores pick experts, and a rounding there changes which weights a
 * token meets, not just its value. The LM head follows its weights like any other linear, as
 * llama.cpp's and vLLM's do; its logits are fp32 sums either way, and at decode it is a third of
 * a 1B model's bytes with an 8-bit head (--quantize-lm-head). */
static enum wact act_for(const weight_store *ws, const weight_ref *r, const wmat *w) {
    if (ws->exact || r->style == PAR_REPLICATED) return WACT_F32;
    if (w->q && w->q->code == QCODE_GGUF) /* int8 where its slice is whole blocks of 32 (cpu.h's dot_gguf_q8) */
        return w->q->g0 % QACT || w->q->kp % QACT ? WACT_F32 : WACT_INT8;
    if (w->q && w->q->code != QCODE_UINT) return ws->fp8_act ? WACT_FP8 : WACT_BF16; /* FP8: exact in the weight */
    return w->q ? WACT_INT8 : w->dt == DT_BF16 ? WACT_BF16 : WACT_F32;
}

/* A linear's parts on FP8 activations with static scales quantize their one input with the
 * largest of their scales, as vLLM's fused q/k/v and gate/up do. */
static void share_input_scale(plan_step *s) {
    float most = 0;
    for (int i = 0; i < s->op->lin->n_parts; i++)
        if (s->w[i].act == WACT_FP8 && s->w[i].q->in_scale > most) most = s->w[i].q->in_scale;
    for (int i = 0; i < s->op->lin->n_parts; i++)
        if (s->w[i].act == WACT_FP8) s->w[i].in_scale = most;
}

static int read_tensor(const plan *p, weight_store *ws, const weight_ref *r, wmat *out, loom_err *err) {
    if (r->kind == WEIGHT_F32 && r->ndim == 3)
        return weights_get_stacked_f32(ws, r->name, (const int[3]){r->shape[0], r->shape[1], r->cols}, r->r0, r->nr,
                                       r->init, out, err);
    if (r->kind == WEIGHT_F32)
        return weights_get(ws, r->name, r->shape[0], r->cols, r->r0, r->nr, r->c0, r->nc, true, r->init, out, err);
    const quant_config *cq = p->o.checkpoint;
    int step = r->row_step > 1 ? r->row_step : 1, rows = r->ndim == 3 ? r->shape[0] * r->shape[1] : r->shape[0];
    if ((r->kind == WEIGHT_LINEAR || r->kind == WEIGHT_TABLE) && cq &&
        quant_checkpoint_applies(cq, r->name, r->style) && quant_checkpoint_has(ws, cq, r->name))
        return quant_checkpoint_get(ws, cq, r->name, rows, r->cols, r->r0, r->nr, step, r->c0, r->nc, out, err);
    quant_scheme q = shard_scheme(p, r->style);
    if (q.bits && (!q.experts_only || r->ndim == 3)) /* dummy rows need no interleaving: any step reads alike */
        return quant_online(ws, &q, r->name, r->ndim, r->shape, r->cols, r->r0, r->nr, r->c0, r->nc, r->init, out, err);
    if (step > 1 && !ws->dummy)
        return loom_errf(err, "%s: interleaved gate and up rows are read from MXFP4 checkpoints only (%s_blocks)",
                         r->name, r->name);
    if (r->ndim == 2)
        return weights_get(ws, r->name, r->shape[0], r->cols, r->r0, r->nr, r->c0, r->nc, false, r->init, out, err);
    return weights_get_expert(ws, r->name, r->shape[0], r->r0 / r->shape[1], r->shape[1], r->cols, r->r0 % r->shape[1],
                              r->nr, r->c0, r->nc, r->init, out, err);
}

static int read_weight(const plan *p, weight_store *ws, const weight_ref *r, wmat *out, loom_err *err) {
    if (read_tensor(p, ws, r, out, err)) return -1;
    if (r->kind == WEIGHT_LINEAR) out->act = act_for(ws, r, out);
    if (out->act == WACT_FP8) out->in_scale = out->q->in_scale;
    return 0;
}

/* An f32 vector's data (a WEIGHT_F32 reference), or NULL for a step that names none. */
static int read_vector(const plan *p, weight_store *ws, const weight_ref *r, const float **out, loom_err *err) {
    wmat v;
    if (!r->kind) return *out = NULL, 0;
    if (read_weight(p, ws, r, &v, err)) return -1;
    *out = v.data;
    return 0;
}

/* GPT-OSS's expert biases, this rank's features of gate's and up's: from the interleaved
 * [E, 2 inter] tensor, or from one [E, inter] tensor each (a GGUF file); down's [E, hidden] on
 * the rank holding the first features only, so that the ranks' partial sums add it once (every
 * rank under EP: each holds whole experts). */
static int bind_expert_biases(const plan *p, plan_step *s, weight_store *ws, loom_err *err) {
    const moe_desc *d = s->op->moe;
    int E = d->n_experts, I = d->inter, H = d->hidden, nr = s->expert_inter, r0 = s->expert_r0;
    s->expert_bias =
        mem_zalloc(3 * (size_t)(s->n_experts ? s->n_experts : 1), sizeof *s->expert_bias, "the experts' biases", err);
    if (!s->expert_bias) return -1;
    for (int i = 0; i < s->n_experts; i++) {
        int e = s->expert_ids[i];
        weight_ref dn = {WEIGHT_F32, d->down_bias, 2, {E}, H, e, 1, 0, H, PAR_REPLICATED, 0.02f, 0};
        if (r0 == 0 && read_vector(p, ws, &dn, &s->expert_bias[3 * i + 2], err)) return -1;
        if (d->up_bias[0]) {
            weight_ref gate = {WEIGHT_F32, d->gate_up_bias, 2, {E}, I, e, 1, r0, nr, PAR_REPLICATED, 0.02f, 0},
                       up = gate;
            up.name = d->up_bias;
            if (read_vector(p, ws, &gate, &s->expert_bias[3 * i], err) ||
                read_vector(p, ws, &up, &s->expert_bias[3 * i + 1], err))
                return -1;
            continue;
        }
        weight_ref gu = {WEIGHT_F32, d->gate_up_bias, 2, {E}, 2 * I, e, 1, 2 * r0, 2 * nr, PAR_REPLICATED, 0.02f, 0};
        wmat v;
        float *b = weights_buffer(ws, 2 * (size_t)nr * sizeof *b, "the experts' biases", err);
        if (!b || read_weight(p, ws, &gu, &v, err)) return -1;
        for (int j = 0; j < nr; j++)
            b[j] = ((const float *)v.data)[2 * j], b[nr + j] = ((const float *)v.data)[2 * j + 1];
        s->expert_bias[3 * i] = b, s->expert_bias[3 * i + 1] = b + nr;
    }
    return 0;
}

/* This rank's experts of an MoE step: per-expert tensors, or the layout's fused alternative
 * where the checkpoint holds that. */
static int bind_experts(const plan *p, plan_step *s, weight_store *ws, loom_err *err) {
    const moe_desc *d = s->op->moe;
    bool fused = d->fused_gate_up[0] && weights_has(ws, d->fused_gate_up);
    s->experts =
        mem_zalloc(3 * (size_t)(s->n_experts ? s->n_experts : 1), sizeof *s->experts, "the experts' matrices", err);
    if (!s->experts) return -1;
    for (int i = 0; i < s->n_experts; i++) {
        char names[3][160];
        weight_ref w[3];
        expert_slices(s, s->expert_ids[i], fused, names, w);
        for (int j = 0; j < 3; j++) /* (no gate: an empty matrix) */
            if (w[j].name && read_weight(p, ws, &w[j], &s->experts[3 * i + j], err)) return -1;
    }
    if (d->gate_up_bias[0] && bind_expert_biases(p, s, ws, err)) return -1;
    /* static FP8 input scales (zero otherwise): as vLLM's, one for all of a rank's experts, the
     * largest of gate and up's (whose input they share) and of down's */
    wmat *e = s->experts;
    float gate_up = 0, down = 0;
    for (int i = 0; i < s->n_experts; i++)
        gate_up = fmaxf(gate_up, fmaxf(e[3 * i].in_scale, e[3 * i + 1].in_scale)),
        down = fmaxf(down, e[3 * i + 2].in_scale);
    for (int i = 0; i < s->n_experts; i++)
        e[3 * i].in_scale = e[3 * i + 1].in_scale = gate_up, e[3 * i + 2].in_scale = down;
    return 0;
}

/* A linear the planner gave quantized rows (plan.c's takes_quantized_rows, from the
 * configuration) must compute on them: int8 rows need each part integer-quantized in its
 * input's column order, FP8 rows each part FP8 with the static input scale they are rounded
 * with. A checkpoint whose configuration says so but whose file holds it otherwise fails here. */
static int check_quantized_input(const plan *p, const plan_step *s, loom_err *err) {
    rows_code code = s->kind == STEP_AG_MATMUL ? s->code : s->kind == STEP_OP ? p->values[s->in[0]].code : ROWS_F32;
    for (int i = 0; code && i < s->op->lin->n_parts; i++) {
        const wmat *w = &s->w[i];
        if (code == ROWS_INT8 && !int8_rows_fit(w))
            return loom_errf(err,
                             "%s: its configuration has it quantized in column order, so the plan gathers int8 rows "
                             "for it, but the checkpoint holds it otherwise (run with --dtype float32)",
                             s->weight[i].name);
        if (code == ROWS_FP8 && !(w->act == WACT_FP8 && w->in_scale > 0))
            return loom_errf(err,
                             "%s: its configuration gives it FP8 weights with a static input scale, so the plan "
                             "gathers FP8 rows for it, but the checkpoint holds it otherwise (run without "
                             "--fp8-activations)",
                             s->weight[i].name);
    }
    return 0;
}

/* A gather of FP8 rows rounds them with the scale its consumer computes with (the linear that
 * alone reads its output; bound later in the plan's order). */
static void gather_scales(plan *p) {
    for (int i = 0; i < p->n_steps; i++) {
        plan_step *s = &p->steps[i];
        if (s->kind == STEP_AG_MATMUL && s->code == ROWS_FP8) s->in_scale = s->w[0].in_scale;
        if (s->kind != STEP_GATHER_ROWS || s->code != ROWS_FP8) continue;
        for (int j = i + 1; j < p->n_steps; j++)
            if (p->steps[j].kind == STEP_OP && p->steps[j].n_in && p->steps[j].in[0] == s->out) {
                s->in_scale = p->steps[j].w[0].in_scale;
                break;
            }
    }
}

/* A norm that scales by weight + offset (Gemma's 1 + w) reads a copy with the offset added,
 * once, in fp32 as transformers adds it. */
static int offset_norm(weight_store *ws, plan_step *s, loom_err *err) {
    int n = s->norm_ref.nr ? s->norm_ref.nr : s->norm_ref.shape[0];
    float *w = weights_buffer(ws, (size_t)n * sizeof *w, "a norm's offset weight", err);
    if (!w) return -1;
    for (int i = 0; i < n; i++) w[i] = s->norm_w[i] + s->op->weight_offset;
    s->norm_w = w;
    return 0;
}

static int bind_step(const plan *p, plan_step *s, weight_store *ws, loom_err *err) {
    for (int i = 0; i < LIN_MAX_PARTS; i++) {
        if (s->weight[i].kind && read_weight(p, ws, &s->weight[i], &s->w[i], err)) return -1;
        if (read_vector(p, ws, &s->bias_ref[i], &s->bias[i], err)) return -1;
    }
    if (s->op && s->op->kind == OP_LINEAR) share_input_scale(s);
    if (s->op && s->op->kind == OP_LINEAR && check_quantized_input(p, s, err)) return -1;
    if (read_vector(p, ws, &s->norm_ref, &s->norm_w, err) ||
        read_vector(p, ws, &s->route_bias_ref, &s->route_bias, err) ||
        read_vector(p, ws, &s->sinks_ref, &s->attn.sinks, err))
        return -1;
    if (s->norm_w && s->op->weight_offset && offset_norm(ws, s, err)) return -1;
    if (s->op && s->op->kind == OP_MOE && (s->kind == STEP_OP || s->kind == STEP_EP_MOE) && bind_experts(p, s, ws, err))
        return -1;
    if (s->op && s->op->kind == OP_ATTENTION && s->attn.mla.kv_lora) {
        /* both forms of latent attention read kv_b_proj as its f32 transpose, made once here
         * through the linear kernel so every weight format widens as it would in a GEMM */
        int kv_lora = s->attn.mla.kv_lora, cols = s->w[0].rows;
        float *t = weights_buffer(ws, (size_t)kv_lora * cols * sizeof *t, "kv_b_proj's transpose", err);
        if (!t || linear_transpose(&s->w[0], t)) return t ? kernel_scratch_check(err) : -1;
        s->w[1] = (wmat){DT_F32, kv_lora, cols, cols, t, NULL, WACT_F32, 0};
    }
    return 0;
}

/* Decoder layer n of t is bound: on stderr, in place on a terminal, otherwise at every quarter
 * so logs stay short. */
static void report_progress(int n, int t) {
    if (isatty(2)) fprintf(stderr, "\rloading weights: layer %d/%d (%d%%)%s", n, t, 100 * n / t, n == t ? "\n" : "");
    else if (n == t || (4 * n / t) != (4 * (n - 1) / t)) fprintf(stderr, "loading weights: layer %d/%d\n", n, t);
}

int bind_plan(plan *p, weight_store *ws, bool progress, loom_err *err) {
    int done = 0; /* decoder layers bound */
    for (int i = 0; i < p->n_steps; i++) {
        plan_step *s = &p->steps[i];
        for (; progress && done < s->layer; done++) report_progress(done + 1, p->n_layers);
        if (bind_step(p, s, ws, err)) return s->mod ? loom_err_prefix(err, "%s", s->mod->name) : -1;
    }
    for (; progress && done < p->layers; done++) report_progress(done + 1, p->n_layers);
    gather_scales(p);
    return 0;
}

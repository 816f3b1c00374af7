/* `loom plan`: the module tree with each module's op list, then the flattened plan's size and
 * buffer use. Built without touching weights, so it is instant for any model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/placement.h"
#include "plan/plan.h"
#include "plan/stage.h"
#include "quant/checkpoint.h"
#include "runtime/engine.h"
#include "tensor/gguf_blocks.h"

/* A GGUF model's block type of weight `name` ("" when the file stores it as a plain dtype). */
static const char *gguf_type_of(const quant_config *cq, const char *name) {
    int t = cq && cq->format == QF_GGUF && cq->gguf_type ? cq->gguf_type(cq->store, name) : 0;
    return t ? gtype_table[t].name : "";
}

/* The linear's parts' GGUF types ("Q5_0+Q5_0+Q8_0"), where any is stored in blocks. */
static void print_gguf_types(FILE *f, const quant_config *cq, const linear_desc *l) {
    bool any = false;
    for (int j = 0; j < l->n_parts; j++) any |= *gguf_type_of(cq, l->parts[j].weight) != 0;
    for (int j = 0; any && j < l->n_parts; j++) {
        const char *t = gguf_type_of(cq, l->parts[j].weight);
        fprintf(f, "%s%s", j ? "+" : ", GGUF ", *t ? t : "float");
    }
}

/* A GGUF file's stacked experts: their gate, up and down tensors' types ("Q4_K+Q5_K+Q8_0"),
 * into out, "" when they are not stacked per projection or not stored in blocks. */
static const char *expert_types(const quant_config *cq, const moe_desc *d, char *out, size_t cap) {
    out[0] = 0;
    if (d->stacked_each && *gguf_type_of(cq, d->gate))
        snprintf(out, cap, "%s+%s+%s", gguf_type_of(cq, d->gate), gguf_type_of(cq, d->up), gguf_type_of(cq, d->down));
    return out;
}

/* "column-parallel, out 48+32+16" and which parts every rank holds whole */
static void print_linear(FILE *f, const linear_desc *l) {
    static const char *styles[] = {"replicated", "column-parallel", "row-parallel", "vocab-parallel"};
    int whole = 0;
    fprintf(f, "%s", styles[l->style]);
    for (int j = 0; j < l->n_parts; j++) {
        const char *start;
        int len = linear_part_name(&l->parts[j], &start);
        fprintf(f, "%s%.*s", j ? "+" : " ", len, start);
        if (l->parts[j].tensor_rows) fprintf(f, "[%d:%d]", l->parts[j].row0, l->parts[j].row0 + l->parts[j].out);
        whole += l->parts[j].whole;
    }
    fprintf(f, ", out");
    for (int j = 0; j < l->n_parts; j++)
        fprintf(f, "%s%d%s", j ? "+" : " ", l->parts[j].out, l->parts[j].whole ? "*" : "");
    if (whole) fputs(" (*: held whole by every rank)", f);
}

/* Layers of the same shape: the same ops, children of the same shape, attention over the same
 * window (Gemma's sliding and global layers print apart), and in a GGUF file linears of the same
 * block types (a Q4_K_M file's layers with Q6_K in some tensors print apart). */
static bool same_shape(const module *a, const module *b, const quant_config *cq) {
    if (a->n_ops != b->n_ops) return false;
    for (int i = 0; i < a->n_ops; i++) {
        const op *x = &a->ops[i], *y = &b->ops[i];
        if (x->kind != y->kind || (x->kind == OP_CALL && !same_shape(x->child, y->child, cq)) ||
            (x->kind == OP_ATTENTION && x->attn.sliding_window != y->attn.sliding_window))
            return false;
        for (int j = 0; x->kind == OP_LINEAR && j < x->lin->n_parts && j < y->lin->n_parts; j++)
            if (strcmp(gguf_type_of(cq, x->lin->parts[j].weight), gguf_type_of(cq, y->lin->parts[j].weight)))
                return false;
        char tx[64], ty[64];
        if (x->kind == OP_MOE &&
            strcmp(expert_types(cq, x->moe, tx, sizeof tx), expert_types(cq, y->moe, ty, sizeof ty)))
            return false;
    }
    return true;
}

static void print_repeats(FILE *f, int depth, int repeats) {
    if (repeats)
        fprintf(f, "%*s... %d more decoder layer%s of the same shape\n", 2 * depth + 2, "", repeats,
                repeats > 1 ? "s" : "");
}

static void print_module(FILE *f, const module *m, int depth, const quant_config *cq) {
    fprintf(f, "%*s%s [%s]\n", 2 * depth, "", m->name, m->kind);
    const module *shown = NULL; /* the last decoder layer shown in full */
    int repeats = 0;            /* layers since, of its shape */
    for (int i = 0; i < m->n_ops; i++) {
        const op *o = &m->ops[i];
        if (o->kind != OP_CALL) {
            print_repeats(f, depth, repeats);
            repeats = 0;
        }
        if (o->kind == OP_CALL) {
            /* decoder layers: show a layer in full where its shape changes (a dense layer
             * before the experts' ones), count the ones like it after */
            if (strcmp(o->child->kind, "decoder_layer")) {
                print_module(f, o->child, depth + 1, cq);
                continue;
            }
            if (!shown || !same_shape(shown, o->child, cq)) {
                print_repeats(f, depth, repeats);
                print_module(f, o->child, depth + 1, cq);
                shown = o->child, repeats = 0;
            } else {
                repeats++;
            }
            continue;
        }
        fprintf(f, "%*s%s = %s(", 2 * depth + 2, "", m->value_names[o->out[0]], op_name(o));
        for (int j = 0; j < o->n_in; j++) fprintf(f, "%s%s", j ? ", " : "", m->value_names[o->in[j]]);
        fputc(')', f);
        if (o->lin && o->kind == OP_LINEAR) {
            fputs("  ", f);
            print_linear(f, o->lin);
            print_gguf_types(f, cq, o->lin);
        }
        if (o->kind == OP_EMBED) print_gguf_types(f, cq, o->lin);
        if (o->kind == OP_ATTENTION && o->attn.kv_lora) {
            const attn_desc *a = &o->attn;
            fprintf(f, "  latent cache of %d+%d per token (kv_c, k_pe) on every rank; ", a->kv_lora, a->rope);
            print_linear(f, o->lin);
            fprintf(f,
                    " inside: absorbed when a sequence decodes one token, expanded into K (%d+%d) and V (%d) "
                    "for longer runs",
                    a->nope, a->rope, a->v_dim);
        }
        if (o->kind == OP_ATTENTION && o->attn.sliding_window)
            fprintf(f, "  within a sliding window of %d positions", o->attn.sliding_window);
        if (o->kind == OP_ATTENTION && o->attn.softcap) fprintf(f, "  scores soft-capped at %g", o->attn.softcap);
        if (o->kind == OP_ATTENTION && o->attn.sinks[0]) fprintf(f, "  sinks %s", o->attn.sinks);
        if (o->kind == OP_SOFTCAP) fprintf(f, "  %g * tanh(x / %g)", o->scalar, o->scalar);
        if (o->kind == OP_RMS_NORM && o->weight_offset) fprintf(f, "  scaling by %g + w", o->weight_offset);
        if (o->kind == OP_RMS_NORM && o->gate_silu) fprintf(f, "  per %d columns, times silu(z)", o->group);
        if (o->kind == OP_RMS_NORM && o->wide) fprintf(f, "  per %d columns of %d", o->group, o->features);
        if (o->kind == OP_HEAD_SLICE)
            fprintf(f, "  columns %d..%d of each head of %d", o->slice.offset, o->slice.offset + o->slice.width - 1,
                    o->slice.stride);
        if (o->kind == OP_CONV1D)
            fprintf(f, "  causal, depthwise, %d taps over %d channels, then SiLU; keeps each sequence's last %d rows",
                    o->rec->kernel, o->rec->channels, o->rec->kernel - 1);
        if (o->kind == OP_GATED_DELTA)
            fprintf(f, "  %d key heads of %d, %d value heads of %d; keeps a %dx%d state per value head and sequence",
                    o->rec->n_k_heads, o->rec->k_dim, o->rec->n_v_heads, o->rec->v_dim, o->rec->k_dim, o->rec->v_dim);
        if (o->kind == OP_ROPE && o->rope.local) fprintf(f, "  the sliding layers' own RoPE base");
        if (o->kind == OP_ROPE && (o->rope.offset || o->rope.interleaved))
            fprintf(f, "  the rotary part of each head (from column %d)%s", o->rope.offset,
                    o->rope.interleaved ? ", interleaved pairs" : "");
        if (o->kind == OP_MOE) {
            const moe_desc *d = o->moe;
            fprintf(f,
                    "  %d experts of %d features, top %d (%s%s), each expert's %s column-parallel and down "
                    "row-parallel",
                    d->n_experts, d->inter, d->top_k,
                    d->routing == ROUTE_TOPK_SOFTMAX ? "softmax over the chosen logits"
                    : d->sigmoid                     ? "sigmoid"
                                                     : "softmax",
                    d->norm_topk ? ", renormalised" : "",
                    d->act.act == GLU_RELU2 ? "up (squared ReLU, no gate)" : "gate/up");
            if (d->n_group)
                fprintf(f, "; within the best %d of %d groups by their %s%s", d->topk_group, d->n_group,
                        d->group_top2_sum ? "two best scores' sum" : "best score",
                        d->bias[0] ? ", choosing with the correction bias" : "");
            if (d->bias[0] && !d->n_group) fprintf(f, "; chosen by score plus the correction bias");
            if (d->scale != 1) fprintf(f, "; weights times %g", d->scale);
            if (d->act.act == GLU_SILU_CLAMPED)
                fprintf(f, "; clamped SwiGLU (limit %g, alpha %g)", d->act.limit, d->act.alpha);
            if (d->gate_up_bias[0]) fprintf(f, "; experts with biases");
            if (d->interleaved) fprintf(f, "; gate and up rows interleaved");
            char types[64];
            if (*expert_types(cq, d, types, sizeof types)) fprintf(f, "; stacked per projection, GGUF %s", types);
        }
        if (o->kind == OP_RMS_NORM && o->across_ranks)
            fprintf(f, "  over the whole projection: under TP each rank sums its heads' squares and an all_reduce "
                       "adds them");
        fputc('\n', f);
    }
}

/* What the latent cache saves: per token, one latent row per layer on each rank, against the
 * K and V of this rank's heads that a full cache would hold. */
static void print_latent_kv(FILE *f, const loom_model *m, const plan *p) {
    const mla_config *a = &m->cfg.mla;
    size_t layers = (size_t)(p->o.layer1 - p->o.layer0), latent = layers * p->kv_width * sizeof(float);
    size_t full =
        layers * m->cfg.n_heads / p->o.tp * (a->qk_nope_head_dim + a->qk_rope_head_dim + a->v_head_dim) * sizeof(float);
    fprintf(f,
            "KV cache per token on each rank: %zu bytes (latent kv_c %d + k_pe %d per layer) against %zu for full "
            "per-head K and V: %.1fx smaller\n",
            latent, a->kv_lora_rank, a->qk_rope_head_dim, full, (double)full / (double)latent);
    size_t budget = LOOM_KV_CACHE_BYTES_DEFAULT;
    fprintf(f,
            "KV budget of 4 GiB per rank (the default): %zu positions of one sequence, against %zu with full K and "
            "V (the model's maximum: %d)\n",
            budget / latent, budget / full, m->cfg.max_pos);
}

/* A rank's experts as ranges of indices: "0..3", "0, 5, 9..11". */
static const char *expert_ranges(const plan_step *s, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < s->n_experts && n < cap; i++) {
        int j = i;
        while (j + 1 < s->n_experts && s->expert_ids[j + 1] == s->expert_ids[j] + 1) j++;
        if (j > i) n += snprintf(buf + n, cap - n, "%s%d..%d", i ? ", " : "", s->expert_ids[i], s->expert_ids[j]);
        else n += snprintf(buf + n, cap - n, "%s%d", i ? ", " : "", s->expert_ids[i]);
        i = j;
    }
    return s->n_experts ? buf : "none";
}

/* An expert-parallel region: where its rows come from, the dispatch and combine, what stays
 * tensor-parallel inside, how it leaves, and the verdict. */
static void print_ep_region(FILE *f, const plan *p, const plan_region *r) {
    const plan_step *s = NULL;
    for (int i = 0; i < p->n_steps && !s; i++)
        if (p->steps[i].kind == STEP_EP_MOE && !strncmp(p->steps[i].mod->name, r->mod->name, strlen(r->mod->name)))
            s = &p->steps[i];
    if (!s) return;
    char ids[256];
    const moe_desc *d = s->op->moe;
    fprintf(f, "  region %-28s %s: %s\n", r->mod->name,
            s->experts_sliced ? "experts across replicas" : "expert parallel",
            r->entry == STEP_SLICE_ROWS ? "its rows sliced from every token's (no communication)"
                                        : "this rank's token shard in directly, no all-gather");
    if (s->experts_sliced) {
        fprintf(
            f,
            "    route: this rank's rows; all_gather of every replica's rows over the %d ranks, [rows, %d + 2 x %d] "
            "(hidden state, experts, weights), the counts known from the replicas' agreement; rank 0 holds "
            "features %d..%d of each of the %d experts\n",
            plan_ep_ranks(&p->o), d->hidden, d->top_k, s->expert_r0, s->expert_r0 + s->expert_inter - 1, d->n_experts);
        fprintf(f, "    reduce-scatter: all_to_all of each rank's partial sums to the rows' owners, added in rank "
                   "order: output complete\n");
    } else {
        fprintf(
            f,
            "    route: this rank's rows; dispatch: all_to_all, one row per (token, owning rank), [rows, %d + 2 x %d] "
            "(hidden state, local experts, weights); rank 0 holds experts %s of %d\n",
            d->hidden, d->top_k, expert_ranges(s, ids, sizeof ids), d->n_experts);
        const double *load;
        loom_err ignored;
        placement contiguous;
        if (!placement_load_row(p->o.expert_load, r->mod->name, d->n_experts, &load, &ignored) && load &&
            !placement_make(&contiguous, d->n_experts, plan_ep_ranks(&p->o), NULL, 0, &ignored)) {
            fprintf(
                f,
                "    placed by the load profile: the experts' work max/mean over the ranks %.3f (contiguous: %.3f)\n",
                placement_imbalance(load, &s->place, plan_ep_ranks(&p->o)),
                placement_imbalance(load, &contiguous, plan_ep_ranks(&p->o)));
            placement_free(&contiguous);
        }
        if (s->place.n_copies > d->n_experts) {
            fprintf(f, "    redundant copies (%d):", s->place.n_copies - d->n_experts);
            for (int e = 0; e < d->n_experts; e++) {
                int n = s->place.first[e + 1] - s->place.first[e];
                if (n < 2) continue;
                fprintf(f, " expert %d x%d (ranks", e, n);
                for (int c = s->place.first[e]; c < s->place.first[e + 1]; c++) fprintf(f, " %d", s->place.owner[c]);
                fprintf(f, ")");
            }
            fprintf(f, ", its tokens taken in turn\n");
        }
        fprintf(f, "    combine: all_to_all back, one sum per row of its experts there (increasing index); each token "
                   "adds its owners' sums in rank order: output complete\n");
    }
    if (r->gathers || r->completes)
        fprintf(f,
                "    tensor-parallel beside them (shared experts): every token's rows (%s), then %d reduce_scatter "
                "completing their partial sum on this rank's rows before the routed output is added\n",
                r->gathers ? "an all_gather of the region input" : "the region input as it is", r->completes);
    fprintf(f,
            "    exit: %s; verified (a complete value: a norm or a residual add may follow it, a second reduction is "
            "refused)\n",
            r->exit == STEP_OP            ? "none, this rank's complete rows are its residual shard"
            : r->exit == STEP_GATHER_ROWS ? "all_gather of every rank's complete rows (plain TP's residual)"
            : r->exit == STEP_SLICE_ROWS  ? "slice of this rank's rows"
                                          : step_kind_name(r->exit));
}

static void print_ep(FILE *f, const plan *p) {
    int n = 0, ranks = plan_ep_ranks(&p->o);
    for (int i = 0; i < p->n_regions; i++) n += p->regions[i].ep;
    if (p->o.ep)
        fprintf(f,
                "\nexpert parallelism: %d ranks hold whole experts (contiguous, the first E %% %d ranks one more); "
                "attention and dense layers stay tensor-parallel; %d expert-parallel regions\n",
                ranks, ranks, n);
    else
        fprintf(f,
                "\nexperts across replicas: each of %d ranks holds 1/%d of every expert's features (TP-MoE over "
                "-tp x -dp); attention and dense layers stay tensor-parallel within a replica; %d expert regions\n",
                ranks, ranks, n);
    if (p->o.dp > 1)
        fprintf(f,
                "  the experts' group is a stage's ranks of all %d replicas (rank in it = replica x %d + tp rank): "
                "each replica routes its own tokens, every collective of the experts spans the %d ranks, and the "
                "replicas step together, one with nothing to run joining with no rows of its own\n",
                p->o.dp, p->o.tp, ranks);
    for (int i = 0; i < p->n_regions; i++)
        if (p->regions[i].ep) print_ep_region(f, p, &p->regions[i]);
}

static void print_sp(FILE *f, const plan *p) {
    fprintf(f,
            "\nsequence parallelism: the residual stream holds T/%d tokens per rank between the embedding "
            "and the LM head%s\n",
            p->o.tp, p->o.pp > 1 ? ", across the stage boundaries too (regions below: stage 0's)" : "");
    int verified = 0;
    for (int i = 0; i < p->n_regions; i++) {
        const plan_region *r = &p->regions[i];
        verified += r->verified;
        if (r->ep) {
            fprintf(f, "  region %-28s experts across ranks (below): takes this rank's tokens, leaves complete\n",
                    r->mod->name);
            continue;
        }
        char in[160] = "all-gather in";
        if (r->gather_code) /* plan.c's mark_quantized_gathers */
            snprintf(in, sizeof in, "all-gather of %s rows in (%zu bytes a token, fp32 %zu)",
                     r->gather_code == ROWS_FP8 ? "FP8 (E4M3, static scale)" : "int8",
                     r->gather_code == ROWS_FP8 ? (size_t)r->gather_width
                                                : q8row_floats(r->gather_width) * sizeof(float),
                     (size_t)r->gather_width * sizeof(float));
        fprintf(f, "  region %-28s %s, reduce-scatter out: %s%s\n", r->mod->name, in,
                strcmp(r->mod->kind, "moe") ? "" : "mixture of experts (a reducer, like a row-parallel linear), ",
                r->verified ? "verified (partial sums reach the exit only through additive, pass-through and "
                              "scaling ops)"
                            : "could not verify (an opaque op acts on a partial sum)");
    }
    for (int i = 0; i < p->n_warnings; i++) fprintf(f, "  warning: %s\n", p->warnings[i]);
    fprintf(f, "sequence parallel: %d regions, %d verified, %d could not verify, %d warning%s\n", p->n_regions,
            verified, p->n_regions - verified, p->n_warnings, p->n_warnings == 1 ? "" : "s");
}

/* A fused linear's weight format: quantized linears fuse like float ones, since the fused
 * steps run the same row-blocked kernels (linear_chunked) whatever the weights are. */
static void print_format(FILE *f, const plan *p, const plan_step *s) {
    quant_scheme q = shard_scheme(p, s->op->lin->style);
    const quant_config *cq = p->o.checkpoint;
    const char *kind = q.code ? "fp8" : q.bits == 4 ? "int4" : "int8";
    if (cq && quant_format_fp8(cq->format) &&
        quant_checkpoint_applies(cq, s->op->lin->parts[0].weight, s->op->lin->style)) {
        static const char *act[] = {"weight-only", "static activation scale", "dynamic per token", "dynamic per group"};
        fprintf(f, "  (%s FP8, ", quant_format_name(cq->format));
        if (cq->fp8_scale == FP8_BLOCK) fprintf(f, "blocks of %dx%d", cq->fp8_block[0], cq->fp8_block[1]);
        else fputs(cq->fp8_scale == FP8_CHANNEL ? "per channel" : "per tensor", f);
        fprintf(f, ", %s)", act[cq->fp8_act]);
    } else if (cq && quant_checkpoint_applies(cq, s->op->lin->parts[0].weight, s->op->lin->style)) {
        fprintf(f, "  (%s int%d, ", quant_format_name(cq->format), cq->bits);
        if (cq->group) fprintf(f, "groups of %d%s)", cq->group, cq->act_order ? ", act-order" : "");
        else fputs("per channel)", f);
    } else if (!q.bits) fputs("  (float)", f);
    else if (q.group) fprintf(f, "  (%s, groups of %d)", kind, q.group);
    else fprintf(f, "  (%s, per channel)", kind);
}

static void print_async(FILE *f, const plan *p) {
    int quantized = 0;
    for (int i = 0; i < p->n_steps; i++) {
        const plan_step *s = &p->steps[i];
        if (s->kind != STEP_AG_MATMUL && s->kind != STEP_MATMUL_RS) continue;
        quantized += shard_scheme(p, s->op->lin->style).bits ||
                     (p->o.checkpoint &&
                      quant_checkpoint_applies(p->o.checkpoint, s->op->lin->parts[0].weight, s->op->lin->style));
    }
    fprintf(f, "\nasync TP: fused %d/%d region collectives (%d of them with quantized linears)\n", p->n_fused,
            p->n_region_collectives, quantized);
    for (int i = 0; i < p->n_steps; i++) {
        const plan_step *s = &p->steps[i];
        if (s->kind != STEP_AG_MATMUL && s->kind != STEP_MATMUL_RS) continue;
        fprintf(f, "  %-28s %-22s", s->mod->name, step_kind_name(s->kind));
        for (int j = 0; j < s->op->lin->n_parts; j++) {
            const char *start;
            int len = linear_part_name(&s->op->lin->parts[j], &start);
            fprintf(f, "%s%.*s", j ? "+" : "", len, start);
        }
        print_format(f, p, s);
        if (s->code) fprintf(f, ", gathers %s rows", s->code == ROWS_FP8 ? "FP8" : "int8");
        fputc('\n', f);
    }
    for (int i = 0; i < p->n_unfused; i++) fprintf(f, "  not fused: %s\n", p->unfused[i]);
}

/* The stages, their ranks and layers, and what crosses each boundary (stage.c). */
static void print_stages(FILE *f, const loom_model *m, const plan_options *po, const int *first) {
    int tp = po->tp, pp = po->pp, hidden = stage_hidden_width(m->tree);
    fprintf(f, "\npipeline: %d stages of %d rank%s (rank = stage x %d + tp rank)\n", pp, tp, tp > 1 ? "s" : "", tp);
    for (int s = 0; s < pp; s++) {
        fprintf(f, "  stage %d: rank%s %d", s, tp > 1 ? "s" : "", s * tp);
        if (tp > 1) fprintf(f, "-%d", s * tp + tp - 1);
        fprintf(f, ", decoder layers %d..%d (%d)%s%s\n", first[s], first[s + 1] - 1, first[s + 1] - first[s],
                s == 0 ? ", the embedding" : "", s == pp - 1 ? ", the final norm and LM head" : "");
    }
    for (int s = 0; s + 1 < pp; s++) {
        if (po->sp)
            fprintf(f,
                    "  stage %d -> %d: each tp rank r sends its own token shard, [T/%d, %d] (%zu bytes per token "
                    "per rank pair), to tp rank r of stage %d; nothing is gathered\n",
                    s, s + 1, tp, hidden, hidden * sizeof(float) / tp, s + 1);
        else
            fprintf(f,
                    "  stage %d -> %d: the complete hidden state, [T, %d] (%zu bytes per token), from each tp rank r "
                    "to tp rank r of stage %d\n",
                    s, s + 1, hidden, hidden * sizeof(float), s + 1);
    }
    fprintf(f, "  logits: rank %d (stage %d) hands [rows, %d] to every rank\n", (pp - 1) * tp, pp - 1, m->cfg.vocab);
    fprintf(f, "  a pass of several sequences splits into microbatches that flow through the stages\n");
}

static void print_collectives(FILE *f, const plan *p) {
    int count[STEP_KIND_COUNT] = {0};
    for (int i = 0; i < p->n_steps; i++) count[p->steps[i].kind]++;
    fprintf(f, "collectives and stage hand-overs per forward pass:");
    for (int k = STEP_ALL_REDUCE; k < STEP_KIND_COUNT; k++)
        if (count[k] && k != STEP_CAPTURE) fprintf(f, " %d %s", count[k], step_kind_name(k));
    fputc('\n', f);
}

/* What an Eagle3 draft reads (loom_engine_options' capture): where each state is kept and how it
 * reaches the rank that drafts. */
static void print_captures(FILE *f, const plan *p, const loom_engine_options *o, const int *first, int pp) {
    if (!o->n_capture_layers && !o->capture_last) return;
    fprintf(f, "\nhidden states kept after each pass (speculative decoding's Eagle3 draft reads them):\n");
    for (int j = 0; j < o->n_capture_layers; j++) {
        int l = o->capture_layers[j], s = 0;
        while (s + 1 < pp && l >= first[s + 1]) s++;
        fprintf(f, "  slot %d: every token's hidden state entering layer %d [T, %d]", j, l, p->capture_width[j]);
        if (pp > 1) fprintf(f, " (stage %d; rank %d hands it to every rank)", s, s * p->o.tp);
        if (p->o.sp)
            fprintf(f, "; under SP each rank holds its token shard there: an all_gather of the shard first, as a "
                       "region's entry gathers, moving the residual as the layer receives it (no arithmetic), so "
                       "the states are TP's bits");
        fputc('\n', f);
    }
    if (o->capture_last)
        fprintf(f, "  slot %d: the logit rows' hidden state entering the final norm (the draft's own, fed back)\n",
                o->n_capture_layers);
}

int loom_print_plan(loom_model *m, int tp, const loom_engine_options *o, FILE *f, loom_err *err) {
    plan p;
    int pp, *first = engine_stages(m, o, &pp, err);
    if (!first) return -1;
    plan_options po = engine_plan_options(m, o, tp, 0, 0, pp, 0, first[0], first[1]);
    if (plan_build(&p, m->tree, &po, err)) {
        free(first);
        return -1;
    }
    const mla_config *a = &m->cfg.mla;
    if (a->kv_lora_rank)
        fprintf(f,
                "model %s from %s: %d layers, hidden %d, %d heads of latent attention (q/k %d+%d, v %d, latent %d, "
                "%s %d), vocab %d\n",
                m->cfg.arch, m->source, m->cfg.n_layers, m->cfg.hidden, m->cfg.n_heads, a->qk_nope_head_dim,
                a->qk_rope_head_dim, a->v_head_dim, a->kv_lora_rank, a->q_lora_rank ? "q_lora" : "plain q_proj of",
                a->q_lora_rank ? a->q_lora_rank : m->cfg.hidden, m->cfg.vocab);
    else
        fprintf(f, "model %s from %s: %d layers, hidden %d, %d heads (%d kv) of %d, vocab %d\n", m->cfg.arch, m->source,
                m->cfg.n_layers, m->cfg.hidden, m->cfg.n_heads, m->cfg.n_kv_heads, m->cfg.head_dim, m->cfg.vocab);
    if (p.o.dp > 1)
        fprintf(f,
                "data parallelism: %d replicas, each with its own %d rank%s, KV cache and sequences (job: %d ranks, "
                "rank = (stage x %d + replica) x %d + tp rank)\n",
                p.o.dp, tp * pp, tp * pp > 1 ? "s" : "", tp * pp * p.o.dp, p.o.dp, tp);
    if (tp == 1 && pp == 1) fprintf(f, "parallelism: tp=1 (single rank)%s\n", p.o.dp > 1 ? " in each replica" : "");
    else if (tp == 1) fprintf(f, "parallelism: %d pipeline stages of one rank\n", pp);
    else
        fprintf(f,
                "parallelism: tensor parallel across %d ranks (column/row-parallel linears, vocab-parallel "
                "embedding and LM head)%s%s\n",
                tp,
                p.o.async_tp ? " + sequence parallel + async TP"
                : p.o.sp     ? " + sequence parallel"
                             : "",
                p.o.ep                    ? " + expert parallel"
                : plan_experts_span(&p.o) ? " + experts across replicas"
                                          : "");
    fprintf(f, "\nmodule tree:\n");
    print_module(f, m->tree, 1, &m->cfg.quant);
    if (pp > 1) print_stages(f, m, &p.o, first);
    size_t floats = 0;
    for (int b = 0; b < p.n_buffers; b++)
        if (p.buffer_rows[b] == ROWS_TOKENS) floats += p.buffer_width[b];
    fprintf(f, "\nplan (rank 0 of %d%s): %d steps over %d values in %d reused buffers (%zu floats per token)\n", tp,
            pp > 1 ? ", stage 0" : "", p.n_steps, p.n_values, p.n_buffers, floats);
    if (tp > 1 || pp > 1) {
        print_collectives(f, &p);
        for (int s = 1; s < pp; s++) { /* the later stages' own steps */
            plan ps;
            plan_options so = po;
            so.stage = s, so.layer0 = first[s], so.layer1 = first[s + 1];
            if (plan_build(&ps, m->tree, &so, err)) {
                plan_free(&p);
                free(first);
                return -1;
            }
            fprintf(f, "plan (rank %d, stage %d): %d steps; ", s * tp, s, ps.n_steps);
            print_collectives(f, &ps);
            plan_free(&ps);
        }
        if (stage_count_using(m->tree, 0, m->cfg.n_layers, OP_ATTENTION)) /* Mamba-2 has no heads of these */
            fprintf(f, "rank 0 holds %d of %d q heads, %d %s columns, ", m->cfg.n_heads / tp, m->cfg.n_heads,
                    p.kv_width, p.kv_latent ? "latent cache" : "kv");
        else fprintf(f, "rank 0 holds ");
        fprintf(f, "vocabulary rows %d..%d\n", p.vocab_col0[0], p.vocab_col0[0] + p.vocab_width[0] - 1);
    }
    print_captures(f, &p, o, first, pp);
    if (p.kv_latent) print_latent_kv(f, m, &p);
    size_t state = plan_seq_state_floats(&p) * sizeof(float);
    if (state)
        fprintf(f,
                "recurrent state on rank 0%s: %zu bytes a sequence in its %d recurrent layers, whatever the "
                "sequence's length (%d of %d layers attend, so hold a KV cache)\n",
                pp > 1 ? ", stage 0" : "", state, stage_count_using(m->tree, 0, m->cfg.n_layers, OP_CONV1D),
                stage_count_using(m->tree, 0, m->cfg.n_layers, OP_ATTENTION), m->cfg.n_layers);
    if (p.o.sp) print_sp(f, &p);
    if (plan_experts_span(&p.o) && p.n_regions) print_ep(f, &p);
    if (p.o.async_tp) print_async(f, &p);
    plan_free(&p);
    free(first);
    return 0;
}

/* `loom plan`: the module tree with each module's op list, then the flattened plan's size and
 * buffer use. Built without touching weights, so it is instant for any model. */
#include <stdio.h>
#include <string.h>

#include "plan/plan_impl.h"
#include "quant/checkpoint.h"
#include "runtime/model.h"

static void print_module(FILE *f, const module *m, int depth) {
    fprintf(f, "%*s%s [%s]\n", 2 * depth, "", m->name, m->kind);
    for (int i = 0; i < m->n_ops; i++) {
        const op *o = &m->ops[i];
        if (o->kind == OP_CALL) {
            /* identical decoder layers: show the first in full, count the rest */
            bool layer = !strcmp(o->child->kind, "decoder_layer");
            int first = -1;
            for (int j = 0; j < m->n_ops && layer; j++)
                if (m->ops[j].kind == OP_CALL && !strcmp(m->ops[j].child->kind, "decoder_layer")) {
                    first = j;
                    break;
                }
            if (!layer || first == i) print_module(f, o->child, depth + 1);
            else if (i + 1 == m->n_ops || m->ops[i + 1].kind != OP_CALL)
                fprintf(f, "%*s... %d more decoder layers of the same shape\n", 2 * depth + 2, "", i - first);
            continue;
        }
        fprintf(f, "%*s%s = %s(", 2 * depth + 2, "", m->value_names[o->out[0]], op_kind_name(o->kind));
        for (int j = 0; j < o->n_in; j++) fprintf(f, "%s%s", j ? ", " : "", m->value_names[o->in[j]]);
        fputc(')', f);
        if (o->lin && o->kind == OP_LINEAR) {
            static const char *styles[] = {"replicated", "column-parallel", "row-parallel", "vocab-parallel"};
            fprintf(f, "  %s, out", styles[o->lin->style]);
            for (int j = 0; j < o->lin->n_parts; j++) fprintf(f, "%s%d", j ? "+" : " ", o->lin->parts[j].out);
        }
        if (o->kind == OP_MOE) {
            const moe_desc *d = o->moe;
            fprintf(f, "  %d experts of %d features, top %d (%s), each expert's gate/up column-parallel and down "
                       "row-parallel", d->n_experts, d->inter, d->top_k,
                    d->routing == ROUTE_TOPK_SOFTMAX ? "softmax over the chosen logits"
                    : d->norm_topk                   ? "softmax, renormalised"
                                                     : "softmax");
        }
        if (o->kind == OP_RMS_NORM && o->across_ranks)
            fprintf(f, "  over the whole projection: under TP each rank sums its heads' squares and an all_reduce "
                       "adds them");
        fputc('\n', f);
    }
}

static void print_sp(FILE *f, const plan *p) {
    fprintf(f, "\nsequence parallelism: the residual stream holds T/%d tokens per rank between the embedding "
               "and the LM head\n", p->o.tp);
    int verified = 0;
    for (int i = 0; i < p->n_regions; i++) {
        const plan_region *r = &p->regions[i];
        verified += r->verified;
        fprintf(f, "  region %-28s all-gather in, reduce-scatter out: %s%s\n", r->mod->name,
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
    if (cq && quant_checkpoint_applies(cq, s->op->lin->parts[0].weight, s->op->lin->style)) {
        fprintf(f, "  (%s int%d, ", quant_format_name(cq->format), cq->bits);
        if (cq->group) fprintf(f, "groups of %d%s)", cq->group, cq->act_order ? ", act-order" : "");
        else fputs("per channel)", f);
    } else if (!q.bits) fputs("  (float)", f);
    else if (q.group) fprintf(f, "  (int%d, groups of %d)", q.bits, q.group);
    else fprintf(f, "  (int%d, per channel)", q.bits);
}

static void print_async(FILE *f, const plan *p) {
    int quantized = 0;
    for (int i = 0; i < p->n_steps; i++) {
        const plan_step *s = &p->steps[i];
        if (s->kind != STEP_AG_MATMUL && s->kind != STEP_MATMUL_RS) continue;
        quantized += shard_scheme(p, s->op->lin->style).bits ||
                     (p->o.checkpoint && quant_checkpoint_applies(p->o.checkpoint, s->op->lin->parts[0].weight,
                                                                  s->op->lin->style));
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
        fputc('\n', f);
    }
    for (int i = 0; i < p->n_unfused; i++) fprintf(f, "  not fused: %s\n", p->unfused[i]);
}

int loom_print_plan(loom_model *m, int tp, bool sequence_parallel, bool async_tp, FILE *f, loom_err *err) {
    plan p;
    plan_options po = {.tp = tp, .sp = sequence_parallel, .async_tp = async_tp, .quant = m->ws.quant,
                       .checkpoint = &m->cfg.quant};
    if (plan_build(&p, m->tree, &po, NULL, err)) return -1;
    fprintf(f, "model %s from %s: %d layers, hidden %d, %d heads (%d kv) of %d, vocab %d\n", m->cfg.arch,
            m->source, m->cfg.n_layers, m->cfg.hidden, m->cfg.n_heads, m->cfg.n_kv_heads, m->cfg.head_dim,
            m->cfg.vocab);
    if (tp == 1) fprintf(f, "parallelism: tp=1 (single rank)\n");
    else
        fprintf(f, "parallelism: tensor parallel across %d ranks (column/row-parallel linears, vocab-parallel "
                   "embedding and LM head)%s\n", tp, p.o.async_tp ? " + sequence parallel + async TP" : p.o.sp ? " + sequence parallel" : "");
    fprintf(f, "\nmodule tree:\n");
    print_module(f, m->tree, 1);
    size_t floats = 0;
    for (int b = 0; b < p.n_buffers; b++)
        if (p.buffer_rows[b] == ROWS_TOKENS) floats += p.buffer_width[b];
    int count[STEP_MATMUL_RS + 1] = {0};
    for (int i = 0; i < p.n_steps; i++) count[p.steps[i].kind]++;
    fprintf(f, "\nplan (rank 0 of %d): %d steps over %d values in %d reused buffers (%zu floats per token)\n", tp,
            p.n_steps, p.n_values, p.n_buffers, floats);
    if (tp > 1) {
        fprintf(f, "collectives per forward pass:");
        for (int k = STEP_ALL_REDUCE; k <= STEP_MATMUL_RS; k++)
            if (count[k]) fprintf(f, " %d %s", count[k], step_kind_name(k));
        fprintf(f, "\nrank 0 holds %d of %d q heads, %d kv columns, vocabulary rows %d..%d\n", m->cfg.n_heads / tp,
                m->cfg.n_heads, p.kv_width, p.vocab_col0[0], p.vocab_col0[0] + p.vocab_width[0] - 1);
    }
    if (p.o.sp) print_sp(f, &p);
    if (p.o.async_tp) print_async(f, &p);
    plan_free(&p);
    return 0;
}

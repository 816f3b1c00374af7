/* The sequence-parallel safety analysis, one rule at a time, positive and negative, on small
 * module trees built here (plans are built without weights: the analysis needs only shapes).
 * Every model has one decoder layer whose region is `x -> column linear -> row linear -> TAIL`
 * and whose output is added to the residual; TAIL is what each case puts on the partial sum.
 * Custom ops (the public API for a user's own layer) are checked the same way, and so are
 * expert-parallel regions, whose experts' output is complete rather than partial. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "graph/module.h"
#include "plan/placement.h"
#include "plan/plan.h"

#define H 8
#define V 16

typedef void (*tail_fn)(module *region, int x, int partial);

static void no_tail(module *r, int x, int z) { (void)x, module_output(r, z); }
static void scale_tail(module *r, int x, int z) { (void)x, module_output(r, emit_scale(r, z, 0.22f, "scaled")); }
static void add_partials(module *r, int x, int z) { (void)x, module_output(r, emit_add(r, z, z, "twice")); }
static void add_complete(module *r, int x, int z) { module_output(r, emit_add(r, z, x, "resid")); }
static void norm_tail(module *r, int x, int z) {
    (void)x, module_output(r, emit_rms_norm(r, z, "n.weight", 1e-5f, 0, "normed"));
}
static void act_tail(module *r, int x, int z) {
    (void)x, module_output(r, emit_glu(r, z, z, &(glu_desc){GLU_SILU, 0, 0}));
}
static void discard_tail(module *r, int x, int z) { (void)z, module_output(r, emit_scale(r, x, 1.5f, "not_the_sum")); }

static linear_desc lin(const char *w, int in, int out, par_style style) {
    linear_desc l = {.in = in, .n_parts = 1, .style = style};
    snprintf(l.parts[0].weight, sizeof l.parts[0].weight, "%s", w);
    l.parts[0].out = out;
    return l;
}

static void reduce_again(module *r, int x, int z) {
    (void)x;
    linear_desc d = lin("again.weight", H, H, PAR_ROW);
    module_output(r, emit_linear(r, z, &d));
}

static void column_on_partial(module *r, int x, int z) {
    (void)x;
    linear_desc d = lin("col.weight", H, H, PAR_COLUMN);
    module_output(r, emit_linear(r, z, &d));
}

/* Mixture-of-experts pieces: a router (replicated), the experts (a reducer), a sigmoid gate */
static int router(module *r, int x) {
    linear_desc g = lin("router.weight", H, 4, PAR_REPLICATED);
    return emit_linear(r, x, &g);
}

static int experts(module *r, int in, int logits) {
    moe_desc d = {.hidden = H, .inter = 4, .n_experts = 4, .top_k = 2};
    snprintf(d.gate, sizeof d.gate, "e.%%d.gate.weight");
    snprintf(d.up, sizeof d.up, "e.%%d.up.weight");
    snprintf(d.down, sizeof d.down, "e.%%d.down.weight");
    return emit_moe(r, in, logits, &d);
}

static void moe_beside(module *r, int x, int z) {
    module_output(r, emit_add(r, z, experts(r, x, router(r, x)), "sum"));
}
static void moe_on_partial(module *r, int x, int z) { module_output(r, experts(r, z, router(r, x))); }
static void gate_complete(module *r, int x, int z) {
    linear_desc g = lin("g.weight", H, 1, PAR_REPLICATED);
    module_output(r, emit_sigmoid_gate(r, z, emit_linear(r, x, &g), "gated"));
}
static void gate_partial(module *r, int x, int z) { (void)x, module_output(r, emit_sigmoid_gate(r, z, z, "gated")); }

/* OLMoE's norm over a whole head-sharded projection of `heads` heads of 4 (k heads: replicable) */
static void projection_norm(module *r, int x, int z, int heads) {
    linear_desc k = lin("k.weight", H, heads * 4, PAR_COLUMN);
    k.parts[0].head_dim = 4;
    k.parts[0].replicable = true;
    int n = emit_rms_norm_across(r, emit_linear(r, x, &k), "kn.weight", 1e-5f, heads * 4, "k_normed");
    linear_desc o = lin("o.weight", heads * 4, H, PAR_ROW);
    module_output(r, emit_add(r, z, emit_linear(r, n, &o), "sum"));
}
static void norm_two_heads(module *r, int x, int z) { projection_norm(r, x, z, 2); }
static void norm_one_head(module *r, int x, int z) { projection_norm(r, x, z, 1); }

/* A tree of hidden width `hidden` whose region ends with tail; `outside` may add ops to the
 * decoder layer's input. */
static module *model_of(int hidden, tail_fn tail, void (*outside)(module *layer, int *h)) {
    module *region = module_new("mlp", "model.layers.0.mlp");
    int x = module_input(region, "x");
    linear_desc up = lin("up.weight", hidden, 2 * hidden, PAR_COLUMN),
                down = lin("down.weight", 2 * hidden, hidden, PAR_ROW);
    int z = emit_linear(region, emit_linear(region, x, &up), &down);
    tail(region, x, z);
    module *layer = module_new("decoder_layer", "model.layers.0");
    int h = module_input(layer, "hidden");
    if (outside) outside(layer, &h);
    int r = emit_call(layer, region, &h, 1, "mlp");
    module_output(layer, emit_add(layer, h, r, "resid"));
    module *m = module_new("model", "model");
    int e = emit_embed(m, "embed.weight", V, hidden, 1.0f, -1);
    e = emit_call(m, layer, &e, 1, "hidden");
    linear_desc head = lin("embed.weight", hidden, V, PAR_VOCAB);
    module_output(m, emit_linear(m, emit_logit_rows(m, e), &head));
    return m;
}

static module *model(tail_fn tail, void (*outside)(module *layer, int *h)) { return model_of(H, tail, outside); }

/* Which rows the region's all-gather moves (plan.c's mark_quantized_gathers), with plain
 * collectives and fused into all_gather_matmul: int8 rows when the linear it feeds computes on
 * int8 activations in column order (64 features: whole 32-column blocks; `hidden` 40 is not),
 * FP8 rows when it computes on FP8 activations with a static scale, else fp32 rows. */
static void expect_gather(const char *what, int hidden, plan_options o, rows_code want) {
    static const char *names[] = {"fp32", "int8", "FP8"};
    for (int async = 0; async < 2; async++) {
        module *m = model_of(hidden, no_tail, NULL);
        plan p;
        loom_err err = {{0}};
        o.tp = 2, o.rank = 0, o.sp = true, o.async_tp = async;
        int rc = plan_build(&p, m, &o, &err);
        CHECK(rc == 0, "%s: %s", what, err.msg);
        if (rc) return module_free(m);
        int gathers = 0;
        rows_code got = ROWS_F32;
        for (int i = 0; i < p.n_steps; i++)
            if (p.steps[i].kind == STEP_GATHER_ROWS || p.steps[i].kind == STEP_AG_MATMUL)
                gathers++, got = p.steps[i].code;
        CHECK(gathers == 1 && got == want && p.regions[0].gather_code == want,
              "%s (%s): want %s rows, got %s rows in %d gathers", what, async ? "async TP" : "SP", names[want],
              names[got], gathers);
        plan_free(&p);
        module_free(m);
    }
}

/* Builds the SP plan for rank 0 of 2; returns 0 or -1 with err. */
static int plan_sp(module *m, plan *p, loom_err *err) {
    plan_options o = {.tp = 2, .rank = 0, .sp = true};
    return plan_build(p, m, &o, err);
}

static void expect_error(const char *what, module *m, const char *needle) {
    plan p;
    loom_err err = {{0}};
    int rc = plan_sp(m, &p, &err);
    CHECK(rc != 0 && strstr(err.msg, needle), "%s: want an error with '%s', got %s", what, needle,
          rc ? err.msg : "a plan");
    if (!rc) plan_free(&p);
    module_free(m);
}

/* Accepted: `verified` regions verified, a warning containing `warning` (NULL: none). */
static void expect_ok(const char *what, module *m, bool verified, const char *warning) {
    plan p;
    loom_err err = {{0}};
    int rc = plan_sp(m, &p, &err);
    CHECK(rc == 0, "%s: %s", what, err.msg);
    if (rc) return module_free(m);
    CHECK(p.n_regions == 1 && p.regions[0].verified == verified, "%s: %d regions, verified %d", what, p.n_regions,
          p.n_regions ? p.regions[0].verified : -1);
    bool found = false;
    for (int i = 0; i < p.n_warnings; i++) found |= warning && strstr(p.warnings[i], warning) != NULL;
    CHECK(warning ? found : p.n_warnings == 0, "%s: want %s, got %d warnings%s%s", what, warning ? warning : "none",
          p.n_warnings, p.n_warnings ? ", first: " : "", p.n_warnings ? p.warnings[0] : "");
    int rs = 0, ag = 0;
    for (int i = 0; i < p.n_steps; i++)
        rs += p.steps[i].kind == STEP_REDUCE_SCATTER, ag += p.steps[i].kind == STEP_GATHER_ROWS;
    CHECK(rs == 2 && ag == 1, "%s: want the embedding's and the region's reduce-scatter and one all-gather, got %d, %d",
          what, rs, ag);
    plan_free(&p);
    module_free(m);
}

/* Expert parallelism: a region `x -> router -> experts -> TAIL`, where the experts' output y is
 * complete (every rank's share already in it); TAIL is what each case does with it. */
typedef void (*ep_tail_fn)(module *region, int x, int y);

static void ep_plain(module *r, int x, int y) { (void)x, module_output(r, y); }
static void ep_norm(module *r, int x, int y) {
    (void)x, module_output(r, emit_rms_norm(r, y, "n.weight", 1e-5f, 0, "normed"));
}
static void ep_residual(module *r, int x, int y) { module_output(r, emit_add(r, y, x, "resid")); }
static void ep_reduce_again(module *r, int x, int y) {
    (void)x;
    linear_desc d = lin("again.weight", H, H, PAR_ROW);
    module_output(r, emit_linear(r, y, &d));
}
static void ep_column_on_output(module *r, int x, int y) {
    (void)x;
    linear_desc d = lin("col.weight", H, H, PAR_COLUMN);
    module_output(r, emit_linear(r, y, &d));
}
/* a tensor-parallel shared expert beside them, optionally gated by a replicated linear of x */
static int shared_expert(module *r, int x) {
    linear_desc up = lin("s.up.weight", H, 2 * H, PAR_COLUMN), down = lin("s.down.weight", 2 * H, H, PAR_ROW);
    return emit_linear(r, emit_linear(r, x, &up), &down);
}
static void ep_shared(module *r, int x, int y) { module_output(r, emit_add(r, y, shared_expert(r, x), "sum")); }
static void ep_shared_gated(module *r, int x, int y) {
    linear_desc g = lin("g.weight", H, 1, PAR_REPLICATED);
    int gated = emit_sigmoid_gate(r, shared_expert(r, x), emit_linear(r, x, &g), "gated");
    module_output(r, emit_add(r, y, gated, "sum"));
}

static module *ep_model(ep_tail_fn tail) {
    module *region = module_new("moe", "model.layers.0.mlp");
    int x = module_input(region, "x");
    tail(region, x, experts(region, x, router(region, x)));
    module *layer = module_new("decoder_layer", "model.layers.0");
    int h = module_input(layer, "hidden");
    int r = emit_call(layer, region, &h, 1, "mlp");
    module_output(layer, emit_add(layer, h, r, "resid"));
    module *m = module_new("model", "model");
    int e = emit_call(m, layer, (int[]){emit_embed(m, "embed.weight", V, H, 1.0f, -1)}, 1, "hidden");
    linear_desc head = lin("embed.weight", H, V, PAR_VOCAB);
    module_output(m, emit_linear(m, emit_logit_rows(m, e), &head));
    return m;
}

/* The EP plan of rank 0 of 2, with or without SP: accepted, with `gathers` all-gathers and
 * `scatters` reduce-scatters (the embedding's counts under SP) and the region's exit step. */
static void expect_ep(const char *what, ep_tail_fn tail, bool sp, int gathers, int scatters, step_kind exit) {
    module *m = ep_model(tail);
    plan p;
    loom_err err = {{0}};
    plan_options o = {.tp = 2, .sp = sp, .ep = true};
    int rc = plan_build(&p, m, &o, &err);
    CHECK(rc == 0, "%s: %s", what, err.msg);
    if (!rc) {
        int ag = 0, rs = 0;
        for (int i = 0; i < p.n_steps; i++)
            ag += p.steps[i].kind == STEP_GATHER_ROWS, rs += p.steps[i].kind == STEP_REDUCE_SCATTER;
        CHECK(ag == gathers && rs == scatters, "%s: want %d all-gathers and %d reduce-scatters, got %d and %d", what,
              gathers, scatters, ag, rs);
        CHECK(p.n_regions == 1 && p.regions[0].ep && p.regions[0].exit == exit, "%s: the region's exit is %s, not %s",
              what, p.n_regions ? step_kind_name(p.regions[0].exit) : "missing", step_kind_name(exit));
        plan_free(&p);
    }
    module_free(m);
}

static void expect_ep_error(const char *what, ep_tail_fn tail, const char *needle) {
    for (int sp = 0; sp < 2; sp++) {
        module *m = ep_model(tail);
        plan p;
        loom_err err = {{0}};
        plan_options o = {.tp = 2, .sp = sp, .ep = true};
        int rc = plan_build(&p, m, &o, &err);
        CHECK(rc != 0 && strstr(err.msg, needle), "%s (sp %d): want an error with '%s', got %s", what, sp, needle,
              rc ? err.msg : "a plan");
        if (!rc) plan_free(&p);
        module_free(m);
    }
}

static void ident(void *u, const float *in, size_t ldi, float *out, size_t ldo, int rows, int cols, const int32_t *pos,
                  const int32_t *seq) {
    (void)u, (void)pos, (void)seq;
    for (int r = 0; r < rows; r++) memcpy(out + r * ldo, in + r * ldi, cols * sizeof *out);
}

static module *with_custom(loom_op_class cls, const char *name, const char *path, bool at_input) {
    module *m = model(no_tail, NULL);
    loom_custom_op c = {name, cls, ident, NULL};
    module_add_custom(module_find(m, path), at_input, &c);
    return m;
}

/* (its result is not used: the shapes it would need are beside the point) */
static void attention_outside(module *layer, int *h) {
    attn_desc a = {.layer = 0, .n_heads = 2, .n_kv_heads = 2, .head_dim = H / 2, .scale = 1};
    emit_attention(layer, *h, *h, *h, &a);
}

/* The rows each quantization gathers under SP: int8 codes where the linears take them, else
 * fp32 or FP8 (section 3.4). */
static void gathers(void) {
    quant_config act_order = {.format = QF_GPTQ, .bits = 4, .group = 32, .act_order = true};
    quant_config groups_of_16 = {.format = QF_GPTQ, .bits = 4, .group = 16};
    quant_config fp8_static = {.format = QF_CT_FP8, .bits = 8, .fp8_act = FP8_ACT_STATIC};
    quant_config fp8_dynamic = {.format = QF_FP8, .bits = 8, .fp8_scale = FP8_BLOCK, .fp8_act = FP8_ACT_GROUP};
    expect_gather("-q int8", 64, (plan_options){.quant = {8, 0, false, 0, 0, 0}}, ROWS_INT8);
    expect_gather("-q int4, groups of 32", 64, (plan_options){.quant = {4, 32, false, 0, 0, 0}}, ROWS_INT8);
    expect_gather("-q int8 --dtype float32", 64, (plan_options){.quant = {8, 0, false, 0, 0, 0}, .exact = true},
                  ROWS_F32);
    expect_gather("float weights", 64, (plan_options){0}, ROWS_F32);
    expect_gather("40 features: a partial 32-column block", 40, (plan_options){.quant = {8, 0, false, 0, 0, 0}},
                  ROWS_F32);
    expect_gather("act-order checkpoint", 64, (plan_options){.checkpoint = &act_order}, ROWS_F32);
    expect_gather("checkpoint groups of 16", 64, (plan_options){.checkpoint = &groups_of_16}, ROWS_F32);
    expect_gather("FP8, static scales, FP8 activations", 40, (plan_options){.checkpoint = &fp8_static, .fp8_act = true},
                  ROWS_FP8);
    expect_gather("FP8, static scales, exact activations", 64, (plan_options){.checkpoint = &fp8_static}, ROWS_F32);
    expect_gather("FP8, dynamic scales, FP8 activations", 64,
                  (plan_options){.checkpoint = &fp8_dynamic, .fp8_act = true}, ROWS_F32);
    expect_gather("-q fp8 (dynamic per token)", 64,
                  (plan_options){.quant = {8, 0, false, QCODE_E4M3, 0, 0}, .fp8_act = true}, ROWS_F32);
    expect_gather("dummy weights of a static FP8 checkpoint", 64,
                  (plan_options){.quant = {8, 0, false, QCODE_E4M3, DUMMY_INPUT_SCALE, 0}, .fp8_act = true}, ROWS_FP8);
}

/* Section 4.3's rules on the model's own ops. */
static void region_rules(void) {
    /* EVIDENCE-OF: 4.3 R2 (a partial passes through to the exit) */
    expect_ok("plain region", model(no_tail, NULL), true, NULL);
    /* EVIDENCE-OF: 4.3 R3 */
    expect_ok("scaling a partial sum (Granite's residual multiplier)", model(scale_tail, NULL), true, NULL);
    /* EVIDENCE-OF: 4.3 R1, both ways */
    expect_ok("adding two partial sums", model(add_partials, NULL), true, NULL);
    expect_error("residual add inside the region", model(add_complete, NULL),
                 "model.layers.0.mlp: `add` adds a complete value to a partial sum");
    /* EVIDENCE-OF: 4.3 R6 */
    expect_error("norm of a partial sum", model(norm_tail, NULL),
                 "model.layers.0.mlp: `rms_norm` is applied to a partial sum");
    expect_error("activation of a partial sum", model(act_tail, NULL),
                 "model.layers.0.mlp: `silu_mul` is applied to a partial sum");
    /* EVIDENCE-OF: 4.3 R5 */
    expect_error("second reduction", model(reduce_again, NULL),
                 "model.layers.0.mlp: `linear` reduces a partial sum again");
    expect_error("column linear on a partial sum", model(column_on_partial, NULL),
                 "model.layers.0.mlp: `linear` is applied to a partial sum");
    /* EVIDENCE-OF: 4.3 R8 */
    expect_error("region output is not the sum", model(discard_tail, NULL),
                 "its output is not a partial sum of its reductions");
    /* EVIDENCE-OF: 4.3 R9 */
    expect_ok("token mixing outside a region warns", model(no_tail, attention_outside), true,
              "`attention` outside a region mixes tokens");
}

/* The same rules on custom ops of each class (loom_op_class). */
static void custom_ops(void) {
    /* EVIDENCE-OF: 4.3 R1, R2, R3 and R6 for custom ops of each class */
    expect_ok("custom additive", with_custom(LOOM_OP_ADDITIVE, "my_sum", "model.layers.0.mlp", false), true, NULL);
    expect_ok("custom pass-through", with_custom(LOOM_OP_PASSTHROUGH, "my_view", "model.layers.0.mlp", false), true,
              NULL);
    expect_ok("custom scaling", with_custom(LOOM_OP_SCALING, "my_scale", "model.layers.0.mlp", false), true, NULL);
    expect_error("custom elementwise on a partial sum",
                 with_custom(LOOM_OP_ELEMENTWISE, "my_gelu", "model.layers.0.mlp", false),
                 "model.layers.0.mlp: `my_gelu` is applied to a partial sum");
    expect_error("custom token mixing on a partial sum",
                 with_custom(LOOM_OP_TOKEN_MIXING, "my_conv", "model.layers.0.mlp", false),
                 "`my_conv` is applied to a partial sum");
    /* EVIDENCE-OF: 4.3 R7 */
    expect_ok("custom opaque op: could not verify", with_custom(LOOM_OP_OPAQUE, "my_blob", "model.layers.0.mlp", false),
              false, "could not verify that `my_blob` is compatible");
    expect_ok("custom token mixing outside a region warns",
              with_custom(LOOM_OP_TOKEN_MIXING, "my_shift", "model.layers.0", true), true, "`my_shift` may mix tokens");
    expect_ok("custom elementwise on the region input is fine",
              with_custom(LOOM_OP_ELEMENTWISE, "my_gelu", "model.layers.0.mlp", true), true, NULL);
}

/* Norms over sharded features or heads, experts and sigmoid gates in a region. */
static void norms_and_gates(void) {
    /* a norm over features that tensor parallelism shards (OLMoE-style q/k norm) is refused */
    module *m = model(no_tail, NULL);
    module *r = module_find(m, "model.layers.0.mlp");
    linear_desc q = lin("q.weight", H, H, PAR_COLUMN);
    emit_rms_norm(r, emit_linear(r, 0, &q), "qn.weight", 1e-5f, 0, "q_normed");
    expect_error("norm over sharded features", m, "normalises over features split across ranks");

    expect_ok("experts beside the MLP: two partial sums added", model(moe_beside, NULL), true, NULL);
    expect_error("experts on a partial sum", model(moe_on_partial, NULL), "`moe` is applied to a partial sum");
    /* EVIDENCE-OF: 4.3 R4, both ways */
    expect_ok("a sigmoid gate by a complete value (Qwen2-MoE's shared expert)", model(gate_complete, NULL), true, NULL);
    expect_error("a gate by a partial sum", model(gate_partial, NULL), "`sigmoid_gate` gates by a partial sum");
    expect_error("a whole-projection norm over replicated heads", model(norm_one_head, NULL),
                 "heads are replicated across 2 ranks");
    /* ...and over heads each rank owns: its statistic is the all-reduced sum of squares */
    m = model(norm_two_heads, NULL);
    plan np;
    loom_err nerr = {{0}};
    CHECK(plan_sp(m, &np, &nerr) == 0, "whole-projection norm: %s", nerr.msg);
    int stat = -1;
    for (int i = 0; i + 2 < np.n_steps && nerr.msg[0] == 0; i++)
        if (np.steps[i].sum_squares && np.steps[i + 1].kind == STEP_ALL_REDUCE &&
            np.steps[i + 2].in[1] == np.steps[i + 1].out)
            stat = i;
    CHECK(stat >= 0, "whole-projection norm: want sum of squares -> all_reduce -> norm steps");
    if (!nerr.msg[0]) plan_free(&np);
    module_free(m);
}

/* Regions around expert parallelism, with and without SP. */
static void expert_parallel(void) {
    /* expert parallelism: the experts' output is complete. Under SP the region takes this rank's
     * rows and leaves them as they are (only the embedding reduce-scatters); under plain TP it
     * slices them and all-gathers the complete rows back. */
    expect_ep("EP+SP: no gather in, no reduce-scatter out", ep_plain, true, 0, 1, STEP_OP);
    expect_ep("EP: slice in, all-gather out", ep_plain, false, 1, 0, STEP_GATHER_ROWS);
    expect_ep("EP+SP: a norm after the experts", ep_norm, true, 0, 1, STEP_OP);
    expect_ep("EP+SP: a residual add of the complete output before the exit", ep_residual, true, 0, 1, STEP_OP);
    expect_ep("EP: a residual add before the exit", ep_residual, false, 1, 0, STEP_GATHER_ROWS);
    /* a shared expert stays tensor-parallel: the input gathered for it (under SP), its partial
     * sum reduce-scattered to this rank's rows before the routed output joins */
    expect_ep("EP+SP: a shared expert beside", ep_shared, true, 1, 2, STEP_OP);
    expect_ep("EP: a shared expert beside", ep_shared, false, 1, 1, STEP_GATHER_ROWS);
    expect_ep("EP+SP: a gated shared expert (Qwen2-MoE)", ep_shared_gated, true, 1, 2, STEP_OP);
    expect_ep_error("EP: a second reduction of the experts' output", ep_reduce_again,
                    "model.layers.0.mlp: `linear` reduces across ranks a value the experts' combine already completed");
    expect_ep_error("EP: a tensor-parallel linear on the experts' output", ep_column_on_output,
                    "`linear` reads every token, but its input is made inside the expert-parallel region");
}

/* Expert placement (EPLB): ranges, copies and their balance. */
static void expert_placement(void) {
    /* placement: without a load, contiguous ranges covering every expert once, the first E % N
     * ranks one more; with one, and with redundant copies, each rank holding a contiguous split's
     * count of the copies, numbered in increasing expert order, an expert's copies on distinct
     * ranks; a skewed load (DeepSeek-V3's skewed golden: every token on experts 0 and 1) spread so
     * that the two hot experts sit on different ranks, and one expert hotter than a rank's share
     * balanced only by copies of it */
    bool placed = true, distinct = true;
    loom_err perr = {{0}};
    for (int experts = 1; experts <= 70; experts++)
        for (int ranks = 1; ranks <= 9; ranks++)
            for (int kind = 0; kind < 3; kind++) { /* contiguous, by load, by load with copies */
                double load[70];
                for (int e = 0; e < experts; e++) load[e] = (e * 7919) % 13 + (e == 3) * 40;
                int spare = kind == 2 ? (experts + 1) / 2 : 0;
                spare = spare > experts * (ranks - 1) ? experts * (ranks - 1) : spare;
                placement pl;
                if (placement_make(&pl, experts, ranks, kind ? load : NULL, spare, &perr)) {
                    placed = false;
                    continue;
                }
                int held[9] = {0}, S = experts + spare;
                for (int e = 0; e < experts; e++)
                    for (int c = pl.first[e]; c < pl.first[e + 1]; c++) {
                        placed &= pl.owner[c] >= 0 && pl.owner[c] < ranks && pl.local[c] == held[pl.owner[c]]++;
                        placed &= kind || c == 0 || pl.owner[c] >= pl.owner[c - 1];
                        for (int d = pl.first[e]; d < c; d++) distinct &= pl.owner[d] != pl.owner[c];
                    }
                placed &= pl.first[experts] == S && pl.n_copies == S;
                for (int r = 0; r < ranks; r++) placed &= held[r] == S / ranks + (r < S % ranks);
                placement_free(&pl);
            }
    CHECK(placed, "placement_make: copies not spread evenly, or their local indices out of order: %s", perr.msg);
    CHECK(distinct, "placement_make: two copies of an expert on one rank");
    double skewed[16] = {100, 100}, hot[8] = {100, 10, 10, 10, 10, 10, 10, 10};
    placement by_load, contiguous, copies;
    bool made =
        !placement_make(&by_load, 16, 2, skewed, 0, &perr) && !placement_make(&contiguous, 16, 2, NULL, 0, &perr);
    CHECK(made && placement_imbalance(skewed, &by_load, 2) == 1.0 && placement_imbalance(skewed, &contiguous, 2) == 2.0,
          "a skewed load at 2 ranks: imbalance %.3f placed by load, %.3f contiguous (want 1 and 2)",
          made ? placement_imbalance(skewed, &by_load, 2) : -1,
          made ? placement_imbalance(skewed, &contiguous, 2) : -1);
    placement_free(&by_load), placement_free(&contiguous);
    made = !placement_make(&by_load, 8, 4, hot, 0, &perr) && !placement_make(&copies, 8, 4, hot, 4, &perr);
    double alone = made ? placement_imbalance(hot, &by_load, 4) : -1,
           spread = made ? placement_imbalance(hot, &copies, 4) : -1;
    CHECK(made && alone > 2.3 && spread < 1.2 && copies.first[1] - copies.first[0] == 4,
          "one expert with 100 of 170 tokens at 4 ranks: imbalance %.3f placed, %.3f with 4 spare copies (want > 2.3 "
          "and < 1.2, the hot expert on every rank)",
          alone, spread);
    placement_free(&by_load), placement_free(&copies);
    CHECK(placement_make(&copies, 8, 4, NULL, 2, &perr) && strstr(perr.msg, "--expert-load"),
          "redundant copies without a load must be refused, naming --expert-load: '%s'", perr.msg);
    CHECK(placement_make(&copies, 8, 4, hot, 25, &perr) && strstr(perr.msg, "from 0 to 24"),
          "25 spare copies of 8 experts on 4 ranks must be refused: '%s'", perr.msg);

    /* async TP: which collectives fuse, and the fallbacks with their reasons */
    struct {
        const char *what;
        tail_fn tail;
        bool unfusable;
        int fused;
        const char *why;
    } fuse_cases[] = {
        {"plain region: gather and scatter both fuse", no_tail, false, 2, NULL},
        {"scaled output: the scatter stays plain", scale_tail, false, 1,
         "does not return a row-parallel linear's output unmodified"},
        {"linears marked not fusable", no_tail, true, 0, "marked not fusable"},
    };
    for (size_t i = 0; i < sizeof fuse_cases / sizeof fuse_cases[0]; i++) {
        module *fm = model(fuse_cases[i].tail, NULL);
        module *region = module_find(fm, "model.layers.0.mlp");
        for (int k = 0; k < region->n_ops && fuse_cases[i].unfusable; k++)
            if (region->ops[k].kind == OP_LINEAR) region->ops[k].lin->no_fuse = true;
        plan p;
        loom_err err = {{0}};
        plan_options o = {.tp = 2, .async_tp = true};
        int rc = plan_build(&p, fm, &o, &err);
        CHECK(rc == 0, "%s: %s", fuse_cases[i].what, err.msg);
        if (!rc) {
            CHECK(p.n_region_collectives == 2 && p.n_fused == fuse_cases[i].fused, "%s: fused %d/%d",
                  fuse_cases[i].what, p.n_fused, p.n_region_collectives);
            bool said = !fuse_cases[i].why;
            for (int k = 0; k < p.n_unfused; k++) said |= fuse_cases[i].why && strstr(p.unfused[k], fuse_cases[i].why);
            CHECK(said, "%s: the plan does not say why", fuse_cases[i].what);
            plan_free(&p);
        }
        module_free(fm);
    }

    /* the flag does nothing at tp=1: the CLI says so and runs */
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "%s run -n 4 --enable-sequence-parallel 2>&1 >/dev/null | grep -q 'no effect with one rank'", LOOM_BIN);
    CHECK(system(cmd) == 0, "loom run --enable-sequence-parallel at tp=1 must warn");
    snprintf(cmd, sizeof cmd,
             "%s run -n 4 --enable-expert-parallel 2>&1 >/dev/null | grep -q 'no effect with one rank'", LOOM_BIN);
    CHECK(system(cmd) == 0, "loom run --enable-expert-parallel at tp=1 must warn");
    snprintf(cmd, sizeof cmd,
             "%s run -n 4 -tp 2 --enable-expert-parallel 2>&1 >/dev/null | grep -q 'no "
             "mixture-of-experts layers'",
             LOOM_BIN);
    CHECK(system(cmd) == 0, "loom run --enable-expert-parallel on a dense model must warn");
}

/* One entry a line, as CMake reads them (check.h) */
static const check_scenario scenarios[] = {
    {"gathers", gathers},
    {"region_rules", region_rules},
    {"custom_ops", custom_ops},
    {"norms_and_gates", norms_and_gates},
    {"expert_parallel", expert_parallel},
    {"expert_placement", expert_placement},
};

/* test_sp_rules NAME runs one scenario (ctest's test_sp_rules.NAME); with no argument, all. */
int main(int argc, char **argv) {
    return check_scenarios(scenarios, (int)(sizeof scenarios / sizeof *scenarios), argc, argv);
}

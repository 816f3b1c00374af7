/* Pipeline stages (see stage.h). A stage is the same module tree planned over a range of its
 * decoder-layer calls: nothing here knows an architecture, only the top module's op list, in
 * which decoder layers are the calls of modules of kind "decoder_layer". */
#include "plan/stage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/alloc.h"
#include "util/err.h"

static bool is_layer_call(const op *o) { return o->kind == OP_CALL && !strcmp(o->child->kind, "decoder_layer"); }

int stage_count_layers(const module *tree) {
    int n = 0;
    for (int i = 0; i < tree->n_ops; i++) n += is_layer_call(&tree->ops[i]);
    return n;
}

int stage_count_using(const module *tree, int layer0, int layer1, op_kind kind) {
    int n = 0, layer = 0;
    for (int i = 0; i < tree->n_ops; i++)
        if (is_layer_call(&tree->ops[i]) && layer++ >= layer0 && layer <= layer1)
            n += module_uses(tree->ops[i].child, kind);
    return n;
}

/* vLLM's even split: n / pp layers each, the remainder one each to the stages just before the
 * last, which keeps the LM head's stage the lightest. */
static void even_split(int n_layers, int pp, int *count) {
    for (int s = 0; s < pp; s++) count[s] = n_layers / pp;
    for (int k = 0; k < n_layers % pp; k++) count[pp - 2 - k]++;
}

static int parse_partition(const char *partition, int pp, int *count, loom_err *err) {
    const char *s = partition;
    int n = 0;
    for (;;) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > 1 << 20 || (*end && *end != ','))
            return loom_errf(err, "--pp-layer-partition '%s': '%.*s' is not a layer count", partition,
                             (int)strcspn(s, ","), s);
        if (n == pp) return loom_errf(err, "--pp-layer-partition '%s' names more stages than -pp %d", partition, pp);
        count[n++] = (int)v;
        if (!*end) break;
        s = end + 1;
    }
    if (n != pp) return loom_errf(err, "--pp-layer-partition '%s' has %d stages, but -pp is %d", partition, n, pp);
    return 0;
}

int stage_layers(int n_layers, int pp, const char *partition, int *first, loom_err *err) {
    int *count = mem_zalloc(pp, sizeof *count, "the pipeline's stages", err), rc = 0, total = 0;
    if (!count) return -1;
    if (partition && *partition) rc = parse_partition(partition, pp, count, err);
    else if (n_layers < pp)
        rc = loom_errf(err, "the model has %d decoder layers, fewer than the %d stages (each needs one)", n_layers, pp);
    else even_split(n_layers, pp, count);
    for (int s = 0; s < pp && !rc; s++) total += count[s];
    if (!rc && total != n_layers)
        rc = loom_errf(err, "--pp-layer-partition '%s' adds up to %d layers, but the model has %d", partition, total,
                       n_layers);
    for (int s = 0; s < pp && !rc; s++)
        if (!count[s]) rc = loom_errf(err, "--pp-layer-partition '%s': stage %d has no layers", partition, s);
    first[0] = 0;
    for (int s = 0; s < pp && !rc; s++) first[s + 1] = first[s] + count[s];
    free(count);
    return rc;
}

/* an op between two layers runs with the next one */
bool stage_is_layer_call(const module *tree, int i) { return is_layer_call(&tree->ops[i]); }

int stage_op_layer(const module *tree, int i) {
    int before = 0;
    for (int k = 0; k < i; k++) before += is_layer_call(&tree->ops[k]);
    if (is_layer_call(&tree->ops[i])) return before;
    for (int k = i + 1; k < tree->n_ops; k++)
        if (is_layer_call(&tree->ops[k])) return before ? before : -1;
    return stage_count_layers(tree);
}

bool stage_runs_op(const plan_options *o, const module *tree, int i) {
    if (o->pp <= 1) return true;
    int l = stage_op_layer(tree, i);
    if (l < 0) return o->stage == 0;
    if (l >= stage_count_layers(tree)) return o->stage == o->pp - 1;
    return l >= o->layer0 && l < o->layer1;
}

static bool under(const char *name, const char *module_name) {
    size_t n = strlen(module_name);
    return !strncmp(name, module_name, n) && name[n] == '.';
}

static bool names_tensor(const op *o, const char *name) {
    if (o->kind == OP_RMS_NORM) return !strcmp(o->weight, name);
    if (o->kind == OP_CALL) return under(name, o->child->name);
    for (int j = 0; o->lin && j < o->lin->n_parts; j++)
        if (!strcmp(o->lin->parts[j].weight, name) || !strcmp(o->lin->parts[j].bias, name)) return true;
    return false;
}

bool stage_foreign_tensor(const plan_options *o, const module *tree, const char *name) {
    if (o->pp <= 1) return false;
    bool named = false; /* by any op of the top module */
    for (int i = 0; i < tree->n_ops; i++) {
        if (!names_tensor(&tree->ops[i], name)) continue;
        if (stage_runs_op(o, tree, i)) return false;
        named = true;
    }
    return named || o->stage > 0;
}

int stage_hidden_width(const module *tree) {
    for (int i = 0; i < tree->n_ops; i++)
        if (tree->ops[i].kind == OP_EMBED) return tree->ops[i].lin->in;
    return 0;
}

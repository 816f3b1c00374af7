/* Pipeline stages: which decoder layers each stage runs, and which of the top module's ops go
 * with them (the embedding with the first stage, the final norm and LM head with the last). */
#ifndef LOOM_PLAN_STAGE_H
#define LOOM_PLAN_STAGE_H
#include "plan/plan.h"

/* Stage s runs decoder layers [first[s], first[s + 1]) of n_layers; first has pp + 1 entries.
 * partition: vLLM's VLLM_PP_LAYER_PARTITION, the layer count of each stage separated by commas
 * (NULL or "": an even split). Errors name the flag and the stage at fault. */
int stage_layers(int n_layers, int pp, const char *partition, int *first, loom_err *err);
/* Decoder layers in the top module. */
int stage_count_layers(const module *tree);
/* Decoder layers [layer0, layer1) that use op `kind`: OP_ATTENTION, those that hold a KV cache;
 * OP_CONV1D, a hybrid model's recurrent ones, which hold their state instead. */
int stage_count_using(const module *tree, int layer0, int layer1, op_kind kind);
/* The part of the pass op i of the top module belongs to: -1 before the decoder layers,
 * n_layers after them, or the layer it is (a call) or precedes. */
int stage_op_layer(const module *tree, int i);
/* Whether op i of the top module calls a decoder layer. */
bool stage_is_layer_call(const module *tree, int i);
/* Whether the stage of o runs op i of the top module. */
bool stage_runs_op(const plan_options *o, const module *tree, int i);
/* Whether tensor `name` belongs to ops another stage runs, so this one leaves it unread. Stages
 * after the first claim only the tensors of their own layers, so that a tensor no op reads is
 * reported once. */
bool stage_foreign_tensor(const plan_options *o, const module *tree, const char *name);
/* The width of the hidden state that crosses a stage boundary (the embedding's). */
int stage_hidden_width(const module *tree);

#endif

/* The loaded model: configuration, module tree, weight store, tokenizer. */
#ifndef LOOM_RUNTIME_MODEL_H
#define LOOM_RUNTIME_MODEL_H
#include "graph/module.h"
#include "model/config.h"
#include "model/pooling.h"
#include "model/weights.h"
#include "text/tokenizer.h"

struct loom_model {
    model_config cfg;
    char *source; /* folder, config path or "(embedded)", for messages */
    module *tree;
    weight_store ws;
    tokenizer *tok; /* NULL when not loaded */
    bool progress;
    loom_task task;            /* resolved from loom_model_options.task */
    pooling_config pool;       /* an embedding model's */
    char *chat_template;       /* the one the model file carries (a GGUF's), or NULL */
    char *chat_template_tools; /* its "tool_use" one, or NULL */
};

#endif

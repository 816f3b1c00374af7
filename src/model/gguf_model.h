/* A GGUF file (or a split one's parts) as a model: its metadata turned into the config.json
 * transformers' GGUF loader would write, its tensors renamed to the Hugging Face names the
 * architectures read, and its weights opened as a store that maps them. */
#ifndef LOOM_MODEL_GGUF_MODEL_H
#define LOOM_MODEL_GGUF_MODEL_H
#include "model/config.h"
#include "model/gguf.h"
#include "model/weights.h"

/* Whether path names a GGUF file (by its name or its magic; a folder or a missing file is not one). */
bool gguf_model_is_file(const char *path);

/* Opens path and, for a split model (`NAME-00001-of-0000N.gguf`), every part. parts[0] holds the
 * metadata; *n_parts is set. The caller closes each. */
int gguf_model_open(const char *path, gguf_file *parts, int max_parts, int *n_parts, loom_err *err);

/* The model's config, from the first part's metadata (`general.architecture`, `{arch}.*`, the
 * tokenizer's special ids) and every part's tensors (a tied head where `output.weight` is absent,
 * Llama 3's `rope_freqs.weight`). A GGUF whose linears are block-quantized gets quant format
 * QF_GGUF. Keys loom does not run are refused by name. */
int gguf_model_config(const gguf_file *parts, int n_parts, model_config *c, loom_err *err);

/* The store over the parts' tensors under Hugging Face names (every tensor mapped, except Gemma's
 * norms, which the file stores as 1 + w and the store gives back as w). Takes the parts: they are
 * closed by weights_close, or here on failure. */
int gguf_model_weights(weight_store *ws, gguf_file *parts, int n_parts, loom_err *err);

/* The chat template the file carries (tokenizer.chat_template), or with a name one of its
 * named ones (tokenizer.chat_template.NAME, as llama.cpp's converter writes a list of named
 * templates), NUL-terminated and malloc'd, or NULL (err clear) when it has none. */
char *gguf_model_chat_template(const gguf_file *f, const char *name, loom_err *err);

#endif

/* The tokenizer of a GGUF file: its tokenizer.ggml.* keys read into a tokenizer_vocab and built by
 * text/tokenizer_load_vocab. */
#ifndef LOOM_MODEL_GGUF_VOCAB_H
#define LOOM_MODEL_GGUF_VOCAB_H
#include "model/gguf.h"
#include "text/tokenizer.h"

/* NULL with err naming the file and the key at fault: a mistyped key, arrays whose lengths
 * disagree, an id out of range, or a tokenizer model or pre-tokenizer loom does not run ("bert",
 * "t5", "rwkv", ... are refused by name); NULL with err clear for a file without a vocabulary
 * (no tokenizer.ggml.model, or "none", as llama.cpp writes for benchmark files). */
tokenizer *gguf_tokenizer(const gguf_file *f, loom_err *err);

#endif

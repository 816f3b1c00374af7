/* A model's vocabulary for the grammar layer (vocab.c). */
#ifndef LOOM_SERVE_VOCAB_H
#define LOOM_SERVE_VOCAB_H
#include "grammar/grammar.h"
#include "loom.h"

/* The tokens' bytes of m's tokenizer (its EOS ids end sentences) as a grammar vocabulary. */
grammar_vocab *vocab_of_model(const loom_model *m, loom_err *err);

#endif

/* Text tokenizer: a Hugging Face tokenizer.json with a BPE model (byte-level GPT-2 / Llama-3 /
 * Qwen style, or SentencePiece-style Llama-2 with byte fallback). Encodes UTF-8 text to ids and
 * decodes ids to text, whole or streaming, matching the Python `tokenizers` library. */
#ifndef LOOM_TEXT_TOKENIZER_H
#define LOOM_TEXT_TOKENIZER_H
#include "loom.h"

typedef struct tokenizer tokenizer;

/* Loads tokenizer.json. On failure returns NULL with err naming the file and the field at fault. */
tokenizer *tokenizer_load_file(const char *path, loom_err *err);
/* Same from memory; name is used in errors. json need not be NUL-terminated. */
tokenizer *tokenizer_load_json(const char *json, size_t len, const char *name, loom_err *err);
void tokenizer_free(tokenizer *t);

/* A vocabulary as a GGUF file (llama.cpp's format) carries it, for tokenizer_load_vocab. The
 * arrays are borrowed for the call only. Kinds, as tokenizer.ggml.model names them:
 *   TOKENIZER_VOCAB_GPT2    "gpt2": byte-level BPE with merges; `pre` picks the split
 *   TOKENIZER_VOCAB_SPM     "llama": SentencePiece, merges derived from the scores, byte tokens
 *                           <0xXX> as fallback
 *   TOKENIZER_VOCAB_GEMMA4  "gemma4": SentencePiece-style BPE (U+2581 for spaces, byte tokens)
 *                           with merges */
typedef enum { TOKENIZER_VOCAB_GPT2, TOKENIZER_VOCAB_SPM, TOKENIZER_VOCAB_GEMMA4 } tokenizer_vocab_kind;
typedef struct tokenizer_str {
    const char *p; /* not NUL-terminated */
    size_t n;
} tokenizer_str;
/* tokenizer.ggml.token_type values */
enum {
    TOKEN_TYPE_NORMAL = 1,
    TOKEN_TYPE_UNKNOWN,
    TOKEN_TYPE_CONTROL,
    TOKEN_TYPE_USER_DEFINED,
    TOKEN_TYPE_UNUSED,
    TOKEN_TYPE_BYTE
};
typedef struct tokenizer_vocab {
    tokenizer_vocab_kind kind;
    const char *pre;             /* tokenizer.ggml.pre; NULL as "default" (GPT2 only) */
    const char *arch;            /* general.architecture or NULL: Gemma 1-3 SentencePiece files need it */
    const tokenizer_str *tokens; /* [n_tokens], id = index */
    size_t n_tokens;
    const float *scores;         /* [n_tokens] or NULL (SPM needs them) */
    const int32_t *types;        /* [n_tokens] TOKEN_TYPE_* or NULL (all normal) */
    const tokenizer_str *merges; /* [n_merges] "left right", or NULL (GPT2 and GEMMA4 need them) */
    size_t n_merges;
    int32_t bos, eos, unk, pad; /* ids, -1 for none */
    /* 1 yes, 0 no, -1 not stated: llama.cpp's default (BOS for SPM and the Llama-3 names; a
     * space prefix for SPM) */
    signed char add_bos, add_eos; /* what add_special adds */
    signed char add_space_prefix; /* a space before the text (and after each added token) */
} tokenizer_vocab;
/* The tokenizer the vocabulary describes, built as transformers' GGUF conversion and llama.cpp
 * tokenize (see vocab_load.c). name is used in errors. NULL with err set for a pre-tokenizer name
 * or kind it does not know, or inconsistent arrays. */
tokenizer *tokenizer_load_vocab(const tokenizer_vocab *v, const char *name, loom_err *err);

/* Ids run 0 .. vocab_size-1 (max id of the vocab and the added tokens, plus one). */
int tokenizer_vocab_size(const tokenizer *t);
/* Id of a token string ("<s>", "<|endoftext|>", "▁the"); added tokens first, then the vocab. -1 if absent. */
int tokenizer_token_id(const tokenizer *t, const char *piece);
/* The token string of an id (NUL-terminated, owned by t), or NULL for an id that has none. */
const char *tokenizer_token(const tokenizer *t, int32_t id);
/* True for added tokens marked "special" (the ones skip_special drops when decoding). */
bool tokenizer_is_special(const tokenizer *t, int32_t id);

/* Encodes UTF-8 text (invalid UTF-8 is an error). add_special applies the post_processor's
 * template (e.g. prepends BOS for Llama-2's TemplateProcessing; nothing for ByteLevel). Added
 * tokens in the text are matched as whole tokens, as HF does. *ids is malloc'd (never NULL on
 * success), caller frees. Returns 0, or -1 with err set. */
int tokenizer_encode(const tokenizer *t, const char *text, size_t len, bool add_special, int32_t **ids, size_t *n_ids,
                     loom_err *err);

/* Streaming decode state: fixed size, no allocation, one per sequence. Special tokens print
 * nothing. Bytes that do not yet form complete UTF-8 are held back (for byte fallback, a whole run
 * of <0xXX> tokens is held until it ends, because HF judges the run as one: valid UTF-8, or one
 * U+FFFD per byte). The output of a sequence equals tokenizer_decode(ids, skip_special = true). */
#define TOK_DEC_MAX_STEPS 8  /* decoder chain length supported */
#define TOK_DEC_GROUP     64 /* byte-fallback bytes held back at most */
typedef struct tok_decoder {
    bool seen[TOK_DEC_MAX_STEPS]; /* each decoder step has had its first piece */
    bool fed;                     /* a token has reached the decoder */
    bool strip_done;              /* text has begun: nothing more to strip */
    bool group_bad;               /* the current byte run is already invalid UTF-8 */
    uint32_t stripped;            /* leading Strip characters removed so far */
    uint8_t n_group, n_u8;
    uint8_t group[TOK_DEC_GROUP]; /* byte-fallback run held back */
    uint8_t u8[4];                /* unfinished UTF-8 sequence (byte-level) */
    bool raw;                     /* bytes out as they come, no UTF-8 assembly (token bytes) */
} tok_decoder;
void tok_decoder_init(tok_decoder *d);
/* Most bytes one decode_next/flush call can produce; pass at least this cap (output beyond cap is
 * dropped). A few hundred bytes for the usual tokenizers. */
size_t tokenizer_decode_cap(const tokenizer *t);
/* Feeds one id; writes the text now complete to out (not NUL-terminated) and returns its length. */
size_t tokenizer_decode_next(const tokenizer *t, tok_decoder *d, int32_t id, bool skip_special, char *out, size_t cap);
/* Ends the sequence: writes what was held back (incomplete UTF-8 becomes U+FFFD) and resets d. */
size_t tokenizer_decode_flush(const tokenizer *t, tok_decoder *d, char *out, size_t cap);
/* The bytes token id adds to text in the middle of a sequence, before UTF-8 assembly (a
 * byte-fallback or byte-level token may hold part of a character): what a grammar matches.
 * Returns their length (output past cap is dropped), or -1 for a special token or an id with no
 * token. */
int tokenizer_token_bytes(const tokenizer *t, int32_t id, char *out, size_t cap);
/* Whole-sequence decode into a malloc'd NUL-terminated string; skip_special drops special tokens.
 * Ids with no token are skipped, as HF does. NULL only when out of memory. */
char *tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n, bool skip_special);

#endif

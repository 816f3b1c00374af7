/* libFuzzer target: the GGUF container parser on arbitrary bytes, and on what it accepts, the
 * model config and the tokenizer built from its metadata (both untrusted: counts, ids, strings,
 * merges) and a read of every tensor's first and last byte. */
#include "model/gguf_model.h"
#include "model/gguf_vocab.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file f;
    loom_err err;
    if (gguf_parse(&f, data, size, "fuzz", &err)) return 0;
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < f.n_tensors; i++)
        sink ^= ((const uint8_t *)f.tensors[i].data)[0] ^ ((const uint8_t *)f.tensors[i].data)[f.tensors[i].nbytes - 1];
    (void)sink;
    model_config c;
    (void)gguf_model_config(&f, 1, &c, &err);
    tokenizer *t = gguf_tokenizer(&f, &err);
    if (t) tokenizer_free(t);
    gguf_close(&f);
    return 0;
}

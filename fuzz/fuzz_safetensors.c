/* libFuzzer target: the safetensors header parser and validator on arbitrary bytes. */
#include "model/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_file f;
    loom_err err;
    if (st_parse(&f, data, size, "fuzz", &err) == 0) {
        /* every tensor must lie inside the buffer: touch its first and last byte */
        volatile uint8_t sink = 0;
        for (size_t i = 0; i < f.n; i++)
            if (f.tensors[i].nbytes)
                sink ^= ((const uint8_t *)f.tensors[i].data)[0] ^
                        ((const uint8_t *)f.tensors[i].data)[f.tensors[i].nbytes - 1];
        (void)sink;
        st_close(&f);
    }
    return 0;
}

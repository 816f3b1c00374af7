/* libFuzzer target: tokenizer.json loading; a file that loads is then used to encode and
 * decode a fixed text, so the tables it built are exercised too. */
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    loom_err err;
    tokenizer *t = tokenizer_load_json((const char *)data, size, "fuzz", &err);
    if (!t) return 0;
    static const char text[] = "Once upon a time, caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac <s> 123";
    int32_t *ids;
    size_t n;
    if (tokenizer_encode(t, text, strlen(text), true, &ids, &n, &err) == 0) {
        free(tokenizer_decode(t, ids, n, false));
        free(ids);
    }
    tokenizer_free(t);
    return 0;
}

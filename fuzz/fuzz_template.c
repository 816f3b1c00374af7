/* libFuzzer target: chat templates. The input is a template's source, a NUL, then a JSON render
 * context; both are parsed and the template rendered. The engine's own limits (template.h) keep
 * every input finite in time and memory. */
#include <stdlib.h>
#include <string.h>

#include "template/template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size + 2);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = buf[size + 1] = 0;
    size_t split = strlen(buf);
    loom_err err;
    chat_template *t = chat_template_parse(buf, "fuzz", &err);
    cJSON *ctx = split < size ? cJSON_Parse(buf + split + 1) : NULL;
    if (t && ctx) {
        char *out = NULL;
        if (chat_template_render(t, ctx, false, &out, &err) == 0) free(out);
    }
    cJSON_Delete(ctx);
    chat_template_free(t);
    free(buf);
    return 0;
}

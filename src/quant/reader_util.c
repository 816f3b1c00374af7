/* What every checkpoint reader shares (reader.h): module names, tensor lookup, float elements
 * of any float dtype, and shapes as text for messages. */
#include <stdio.h>
#include <string.h>

#include "quant/reader.h"
#include "tensor/half.h"

void ckpt_module_of(const char *name, char *out, size_t cap) {
    snprintf(out, cap, "%s", name);
    size_t n = strlen(out);
    if (n > 7 && !strcmp(out + n - 7, ".weight")) out[n - 7] = 0;
}

const st_tensor *ckpt_part(weight_store *ws, const char *mod, const char *suffix, const char **file) {
    char full[300];
    snprintf(full, sizeof full, "%s.%s", mod, suffix);
    return weights_tensor(ws, full, file);
}

float ckpt_real(const st_tensor *t, size_t i) {
    const uint8_t *p = (const uint8_t *)t->data;
    uint16_t h;
    float f;
    if (t->dtype == DT_F32) return memcpy(&f, p + 4 * i, 4), f;
    memcpy(&h, p + 2 * i, 2);
    return t->dtype == DT_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

void ckpt_shape(const st_tensor *t, char *out, size_t cap) {
    out[0] = 0;
    for (int i = 0; i < t->ndim; i++)
        snprintf(out + strlen(out), cap - strlen(out), "%s%lld", i ? ", " : "", (long long)t->shape[i]);
}

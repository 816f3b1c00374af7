/* Element dtypes: their sizes and safetensors' names for them. */
#include "tensor/tensor.h"

#include <string.h>

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    [DT_F32] = {"F32", 4},   [DT_F16] = {"F16", 2}, [DT_BF16] = {"BF16", 2},       [DT_I64] = {"I64", 8},
    [DT_I32] = {"I32", 4},   [DT_I16] = {"I16", 2}, [DT_I8] = {"I8", 1},           [DT_U8] = {"U8", 1},
    [DT_BOOL] = {"BOOL", 1}, [DT_F64] = {"F64", 8}, [DT_F8_E4M3] = {"F8_E4M3", 1}, [DT_F8_E5M2] = {"F8_E5M2", 1},
};

size_t dtype_size(enum dtype d) { return dtypes[d].size; }
const char *dtype_name(enum dtype d) { return dtypes[d].name; }

bool dtype_from_name(const char *name, enum dtype *d) {
    for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++)
        if (!strcmp(name, dtypes[k].name)) return *d = (enum dtype)k, true;
    return false;
}

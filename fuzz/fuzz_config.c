/* libFuzzer target: config.json parsing and building the module tree from what it accepts. */
#include "model/arch/arch.h"
#include "model/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    model_config c;
    loom_err err;
    if (config_parse(&c, (const char *)data, size, "fuzz", &err) == 0 && c.n_layers <= 256) {
        module *m = arch_build(&c, &err);
        module_free(m);
    }
    return 0;
}

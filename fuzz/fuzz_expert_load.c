/* libFuzzer target: expert load profiles (--expert-load FILE), and placing a layer by each one
 * it accepts. */
#include "plan/placement.h"
#include "runtime/expert_load.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    loom_err err;
    loom_expert_load *l = expert_load_parse((const char *)data, size, "fuzz", &err);
    if (l && l->n_experts <= 4096) {
        int32_t owner[4096], local[4096];
        placement_make(l->n_experts, 3, l->count, owner, local);
    }
    loom_expert_load_free(l);
    return 0;
}

/* libFuzzer target: expert load profiles (--expert-load FILE), and placing a layer by each one
 * it accepts, with and without redundant copies of its hottest experts. */
#include "plan/placement.h"
#include "runtime/expert_load.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    loom_err err;
    loom_expert_load *l = expert_load_parse((const char *)data, size, "fuzz", &err);
    if (l && l->n_experts <= 4096) {
        for (int redundant = 0; redundant <= l->n_experts % 7; redundant += 3) {
            placement pl;
            if (!placement_make(&pl, l->n_experts, 3, l->count, redundant, &err)) {
                placement_imbalance(l->count, &pl, 3);
                placement_free(&pl);
            }
        }
    }
    loom_expert_load_free(l);
    return 0;
}

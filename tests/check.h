/* Minimal test harness shared by the C tests: CHECK records a failure with its location and
 * carries on; check_done prints "N passed, N failed" and gives the process exit code. */
#ifndef LOOM_TESTS_CHECK_H
#define LOOM_TESTS_CHECK_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom.h"

static int check_passed, check_failed;

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (cond) {                                                                                                    \
            check_passed++;                                                                                            \
        } else {                                                                                                       \
            check_failed++;                                                                                            \
            fprintf(stderr, "%s:%d: FAILED: %s: ", __FILE__, __LINE__, #cond);                                         \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fputc('\n', stderr);                                                                                       \
        }                                                                                                              \
    } while (0)

static inline int check_done(void) {
    printf("%d passed, %d failed\n", check_passed, check_failed);
    return check_failed ? 1 : 0;
}
/* Tests registered once per CPU variant (LOOM_CPU set by ctest) skip, with ctest's code 77,
 * where this CPU cannot run the variant; they print the variant they test otherwise. */
static inline void check_cpu_variant(void) {
    loom_cpu_info ci;
    loom_err err = {{0}};
    if (loom_cpu_get_info(&ci, &err)) {
        printf("skipped: %s\n", err.msg);
        exit(77);
    }
    printf("CPU: %s, kernels %s\n", ci.model, ci.variant);
}
#endif

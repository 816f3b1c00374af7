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

/* Where the checks ran: the CPU, the variant and the GEMM libraries' own kernels. A failed
 * comparison of bits is read with it: a user's report then says which path to look at. */
static inline void check_where(FILE *f) {
    loom_cpu_info ci;
    loom_err err = {{0}};
    if (loom_cpu_get_info(&ci, &err)) fprintf(f, "CPU: %s, no kernels (%s); GEMMs: %s\n", ci.model, err.msg, ci.gemm);
    else fprintf(f, "CPU: %s, kernels %s; GEMMs: %s\n", ci.model, ci.variant, ci.gemm);
}

static inline int check_done(void) {
    printf("%d passed, %d failed\n", check_passed, check_failed);
    if (check_failed) check_where(stderr);
    return check_failed ? 1 : 0;
}
/* A program of scenarios: each a ctest entry of its own (PROGRAM.NAME), for the programs CMake's
 * LOOM_SCENARIO_TESTS lists; CMake reads the table's entries, one a line: {"name", function}, */
typedef struct check_scenario {
    const char *name;
    void (*run)(void);
} check_scenario;
/* Runs the scenario argv[1] names, or every one with no argument; the exit code. */
static inline int check_scenarios(const check_scenario *s, int n, int argc, char **argv) {
    int ran = 0;
    for (int i = 0; i < n; i++)
        if (argc < 2 || !strcmp(argv[1], s[i].name)) s[i].run(), ran++;
    CHECK(ran, "no scenario named '%s'", argc > 1 ? argv[1] : "");
    return check_done();
}
/* Tests registered once per CPU variant (LOOM_CPU set by ctest) skip, with ctest's code 77,
 * where this CPU cannot run the variant; they print where they run otherwise. */
static inline void check_cpu_variant(void) {
    loom_cpu_info ci;
    loom_err err = {{0}};
    if (loom_cpu_get_info(&ci, &err)) {
        printf("skipped: %s\n", err.msg);
        exit(77);
    }
    check_where(stdout);
}
#endif
